/* A tiny fork-join pool: skv_pool_run() calls fn(ctx, i) for i in [0, n_tasks) spread
 * over the workers and the calling thread, and returns when all are done.
 * Which thread runs a task never affects results: callers give each task its own
 * outputs (see the determinism contract in ops.h). Workers spin briefly before
 * sleeping, so back-to-back jobs (one per matmul) do not pay a futex wake each. */
#ifndef SKV_THREADPOOL_H
#define SKV_THREADPOOL_H

#include <stddef.h>

typedef struct skv_pool skv_pool;
typedef void (*skv_task_fn)(void *ctx, size_t task, int thread);

/* n_threads includes the caller; n_threads <= 1 creates no workers. NULL on failure. */
skv_pool *skv_pool_create(int n_threads);
void skv_pool_free(skv_pool *p);
int skv_pool_size(const skv_pool *p);
void skv_pool_run(skv_pool *p, skv_task_fn fn, void *ctx, size_t n_tasks);

#endif
