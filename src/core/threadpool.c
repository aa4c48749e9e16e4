/* Fork-join pool. State machine of one job:
 *
 *   caller: publish (fn, ctx, n), next = 0, pending = n; gen++ ; wake sleepers
 *   everyone (caller included): while ((i = next++) < n) fn(ctx, i); pending -= done
 *   workers: acks++ after each job
 *   caller: wait until pending == 0 and acks == n_workers (a full barrier)
 *
 * Workers watch `gen`: they spin (with a pause) up to SPIN_ITERS polls, then sleep
 * on the condition variable. */
#include "core/threadpool.h"
#include "core/fpguard.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000

typedef struct {
    skv_pool *pool;
    int index;
    pthread_t tid;
} worker;

struct skv_pool {
    int n_threads;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;
    atomic_int stop;
    skv_task_fn fn;
    void *ctx;
    size_t n_tasks;
    atomic_size_t next;
    atomic_size_t pending;
    atomic_int acks; /* workers that finished the current job: every job is a full barrier */
    atomic_int sleepers;
};

static void run_tasks(skv_pool *p, int thread)
{
    size_t done = 0, i;
    while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_tasks) {
        p->fn(p->ctx, i, thread);
        done++;
    }
    if (done) atomic_fetch_sub_explicit(&p->pending, done, memory_order_release);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    skv_pool *p = w->pool;
    unsigned seen = 0; /* gen starts at 0; reading it here would race with the first job */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                if (spins % 256 == 0) sched_yield();
                else CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_tasks(p, w->index);
        atomic_fetch_add_explicit(&p->acks, 1, memory_order_release);
    }
}

skv_pool *skv_pool_create(int n_threads)
{
    skv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (p->n_threads > 1) {
        p->workers = calloc((size_t)p->n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            skv_pool_free(p);
            return NULL;
        }
        for (int i = 0; i < p->n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].index = i + 1;
            if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0) {
                p->n_threads = i + 1; /* join those started */
                skv_pool_free(p);
                return NULL;
            }
        }
    }
    return p;
}

void skv_pool_free(skv_pool *p)
{
    if (!p) return;
    if (p->workers) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i].tid, NULL);
        free(p->workers);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int skv_pool_size(const skv_pool *p) { return p ? p->n_threads : 1; }

void skv_pool_run(skv_pool *p, skv_task_fn fn, void *ctx, size_t n_tasks)
{
    if (!p || p->n_threads <= 1 || n_tasks <= 1) {
        for (size_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->acks, 0, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check below */
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, 0);
    /* Wait for every worker, not just every task, so no straggler from this job can
     * observe the next job's fields half-written. */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0 ||
                        atomic_load_explicit(&p->acks, memory_order_acquire) != p->n_threads - 1;) {
        /* yield once spinning stops paying off: with more threads than free cores the
         * worker we wait for may need this very core */
        if (++spins < 2000) CPU_RELAX();
        else sched_yield();
    }
}
