/* Fork-join pool. State machine of one job g (the caller's g-th):
 *
 *   caller: slot[g & 1] := (fn, ctx, n); pending = n; ticket = (g, 0) (release); gen++;
 *           wake sleepers
 *   everyone (caller included): t = ticket; (g', i) = t; if i >= slot[g' & 1].n: stop;
 *           else claim task i by CAS(ticket, t, t + 1) and run it; pending -= 1
 *   caller: wait until pending == 0, then return
 *
 * The handoff is the one counter `pending`, not a barrier: the caller does not wait for
 * workers that claimed nothing (one that the OS has descheduled, say, on a loaded machine;
 * the caller and the others take its share). A worker that wakes late reads whichever
 * job the ticket names; the fields it read are valid if its CAS succeeds, because a
 * slot is rewritten only two jobs later, after the ticket has moved on (the CAS compares
 * generation and index together). Workers watch `gen`: they spin (with a pause) up to
 * SPIN_ITERS polls, then sleep on the condition variable. */
#include "core/threadpool.h"
#include "core/fpguard.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
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

typedef struct {
    _Atomic(skv_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_size_t n_tasks;
} job_slot;

struct skv_pool {
    int n_threads;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;
    atomic_int stop;
    uint32_t job;                /* the caller's job counter */
    job_slot slot[2];            /* job g in slot[g & 1] */
    atomic_uint_fast64_t ticket; /* job << 32 | next task index */
    atomic_size_t pending;       /* tasks of the current job not finished */
    atomic_int sleepers;
};

/* Claims and runs tasks of whichever job the ticket names until it has none left. */
static void run_tasks(skv_pool *p, int thread)
{
    uint_fast64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    for (;;) {
        const job_slot *s = &p->slot[(t >> 32) & 1];
        size_t i = (size_t)(t & 0xffffffffu), n = atomic_load_explicit(&s->n_tasks, memory_order_relaxed);
        skv_task_fn fn = atomic_load_explicit(&s->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&s->ctx, memory_order_relaxed);
        if (i >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* t reloaded: another thread took task i, or a new job started */
        fn(ctx, i, thread);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
        t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    }
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
    if (!p || p->n_threads <= 1 || n_tasks <= 1 || n_tasks > 0xffffffffu) {
        for (size_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    job_slot *s = &p->slot[++p->job & 1];
    atomic_store_explicit(&s->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&s->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&s->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->pending, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->ticket, (uint_fast64_t)p->job << 32, memory_order_release);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check below */
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, 0);
    /* the last tasks may still run on workers: wait for them, not for idle workers */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0;) {
        /* yield once spinning stops paying off: with more threads than free cores the
         * worker we wait for may need this very core */
        if (++spins < 2000) CPU_RELAX();
        else sched_yield();
    }
}
