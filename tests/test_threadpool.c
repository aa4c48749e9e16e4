/* The fork-join pool (src/core/threadpool.h): every task of every job runs exactly
 * once, on a valid thread index, and is finished when skv_pool_run returns;
 * pools of 1..4 threads (and more threads than cores), a job straight after
 * create (a bug there once deadlocked), thousands of back-to-back jobs, task
 * counts 0, 1 and more than the threads, create/free loops. Leaks are left to
 * make san (LSan). A watchdog turns a deadlock into a FAIL line instead of a
 * hung suite. */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "core/threadpool.h"

#define WATCHDOG_S 120 /* per case */
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct {
    atomic_int *count;  /* per task: times run */
    atomic_int bad_thread;
    int n_threads;
    size_t n_tasks;
    uint32_t tag;       /* per job; tasks write it into out[] */
    uint32_t *out;      /* per task */
} job;

static void task(void *arg, size_t i, int thread)
{
    job *j = arg;
    if (i >= j->n_tasks || thread < 0 || thread >= j->n_threads) {
        atomic_fetch_add(&j->bad_thread, 1);
        return;
    }
    atomic_fetch_add(&j->count[i], 1);
    j->out[i] = j->tag ^ (uint32_t)i;
}

/* Runs one job of n tasks (heap state freed right after, so ASan sees any late
 * access by a straggler); 1 if every task ran exactly once. */
static int run_job(skv_pool *p, size_t n, uint32_t tag, char *why, size_t cap)
{
    job *j = calloc(1, sizeof *j);
    int ok = 1;
    if (!j) abort();
    j->count = calloc(n ? n : 1, sizeof *j->count);
    j->out = calloc(n ? n : 1, sizeof *j->out);
    if (!j->count || !j->out) abort();
    j->n_threads = skv_pool_size(p);
    j->n_tasks = n;
    j->tag = tag;
    skv_pool_run(p, task, j, n);
    if (atomic_load(&j->bad_thread)) {
        snprintf(why, cap, "task index or thread index out of range");
        ok = 0;
    }
    for (size_t i = 0; ok && i < n; i++)
        if (atomic_load(&j->count[i]) != 1 || j->out[i] != (tag ^ (uint32_t)i)) {
            snprintf(why, cap, "job %u (%zu tasks, %d threads): task %zu ran %d times", tag, n, j->n_threads, i,
                     atomic_load(&j->count[i]));
            ok = 0;
        }
    free(j->count);
    free(j->out);
    free(j);
    return ok;
}

#define CHECK_JOB(p, n, tag)                                                       \
    do {                                                                           \
        char why_[256];                                                            \
        int ok_ = run_job(p, n, tag, why_, sizeof why_);                           \
        if (!ok_) skv_pool_free(p);                                                \
        CHECK_MSG(ok_, "%s", why_);                                                \
    } while (0)

static void sizes(void)
{
    skv_pool *p;
    CHECK(skv_pool_size(NULL) == 1);
    for (int n = -3; n <= 4; n++) {
        CHECK((p = skv_pool_create(n)) != NULL);
        int sz = skv_pool_size(p);
        skv_pool_free(p);
        CHECK_EQ_INT(sz, n < 1 ? 1 : n);
    }
    skv_pool_free(NULL);
}

static void job_right_after_create(void)
{
    for (int t = 1; t <= 4; t++)
        for (int rep = 0; rep < 50; rep++) {
            skv_pool *p = skv_pool_create(t);
            CHECK(p != NULL);
            CHECK_JOB(p, (size_t)(rep % 7) + 2, (uint32_t)rep);
            skv_pool_free(p);
        }
}

static void every_task_exactly_once(void)
{
    static const size_t counts[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 64, 257, 1000};
    for (int t = 1; t <= 4; t++) {
        skv_pool *p = skv_pool_create(t);
        CHECK(p != NULL);
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) CHECK_JOB(p, counts[c], (uint32_t)(t * 100 + c));
        skv_pool_free(p);
    }
}

static void many_back_to_back_jobs(void)
{
    for (int t = 1; t <= 4; t++) {
        skv_pool *p = skv_pool_create(t);
        CHECK(p != NULL);
        for (uint32_t k = 0; k < 3000; k++) CHECK_JOB(p, (size_t)(k % 11), k); /* includes 0- and 1-task jobs */
        skv_pool_free(p);
    }
}

static void more_threads_than_cores(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = (int)(cores > 0 && cores < 8 ? 2 * cores + 1 : 9);
    skv_pool *p = skv_pool_create(t);
    CHECK(p != NULL);
    for (uint32_t k = 0; k < 300; k++) CHECK_JOB(p, (size_t)(k % 40), k);
    skv_pool_free(p);
}

static void null_pool_runs_inline(void)
{
    char why[256];
    CHECK_MSG(run_job(NULL, 0, 1, why, sizeof why), "%s", why);
    CHECK_MSG(run_job(NULL, 17, 2, why, sizeof why), "%s", why);
}

/* Create/free with and without a job, and pools freed while workers may still be
 * starting or spinning. */
static void create_free_loops(void)
{
    for (int rep = 0; rep < 200; rep++) {
        int t = 1 + rep % 4;
        skv_pool *p = skv_pool_create(t);
        CHECK(p != NULL);
        if (rep % 3 == 1) CHECK_JOB(p, (size_t)(3 * t), (uint32_t)rep);
        if (rep % 3 == 2)
            for (uint32_t k = 0; k < 5; k++) CHECK_JOB(p, (size_t)t + k, k);
        skv_pool_free(p);
    }
}

/* Two pools used alternately from the same thread stay independent. */
static void two_pools_interleaved(void)
{
    skv_pool *a = skv_pool_create(3), *b = skv_pool_create(2);
    char why[256];
    int ok = a && b;
    for (uint32_t k = 0; ok && k < 500; k++)
        ok = run_job(a, (size_t)(k % 9), k, why, sizeof why) && run_job(b, (size_t)(k % 5), ~k, why, sizeof why);
    skv_pool_free(a);
    skv_pool_free(b);
    CHECK_MSG(a && b, "create failed");
    CHECK_MSG(ok, "%s", why);
}

static void on_alarm(int sig)
{
    static const char msg[] = "FAIL test_threadpool:watchdog: a case ran over " STR(WATCHDOG_S) " s (deadlock?)\n";
    (void)sig;
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

int main(void)
{
    TEST_BEGIN("test_threadpool");
    signal(SIGALRM, on_alarm);
#define RUN_W(fn) (alarm(WATCHDOG_S), RUN(fn))
    RUN_W(sizes);
    RUN_W(null_pool_runs_inline);
    RUN_W(job_right_after_create);
    RUN_W(every_task_exactly_once);
    RUN_W(many_back_to_back_jobs);
    RUN_W(more_threads_than_cores);
    RUN_W(create_free_loops);
    RUN_W(two_pools_interleaved);
    alarm(0);
    TEST_END();
}
