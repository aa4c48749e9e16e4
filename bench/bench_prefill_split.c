/* Prompts of slots that start together: K prompts of N tokens prefilled one after another
 * (each its own context, as a server's slots do) against one prefill of K x N rows in one
 * context (an upper bound on what batching the K prompts into one pass could gain: the
 * same matmul rows, the weights read once; its attention is longer, so it flatters the
 * split side's rival). Used to decide whether seqkv serve needs a multi-context prefill
 * (bench/results/serve.md, 2026-12-06: on the 4M bundled model it does not).
 * Usage: bench_prefill_split MODEL [N=100] [K=4] [threads=2] [reps=7]
 * Prints the best and median wall milliseconds of each over reps rounds, alternating. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "seqkv.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    char err[256];
    skv_model *m;
    if (argc < 2) {
        fprintf(stderr, "usage: bench_prefill_split MODEL [N=100] [K=4] [threads=2] [reps=7]\n");
        return 2;
    }
    int N = argc > 2 ? atoi(argv[2]) : 100, K = argc > 3 ? atoi(argv[3]) : 4, th = argc > 4 ? atoi(argv[4]) : 2;
    int reps = argc > 5 ? atoi(argv[5]) : 7;
    if (N < 1 || K < 1 || K > 64 || th < 1 || reps < 1 || reps > 1000) return fprintf(stderr, "bad arguments\n"), 2;
    if (skv_model_load(argv[1], NULL, &m, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    skv_model_info info;
    skv_model_get_info(m, &info);
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = N * K, p.n_threads = th;
    skv_ctx *c[64];
    int32_t *tok = malloc((size_t)N * (size_t)K * sizeof *tok);
    float *hid = malloc((size_t)N * (size_t)K * (size_t)info.n_embd * sizeof *hid);
    float *lg = malloc((size_t)info.n_vocab * sizeof *lg);
    double *split = malloc((size_t)reps * sizeof *split), *one = malloc((size_t)reps * sizeof *one);
    if (!tok || !hid || !lg || !split || !one) return fprintf(stderr, "out of memory\n"), 1;
    for (int i = 0; i < K; i++)
        if (skv_ctx_create(m, &p, &c[i])) return fprintf(stderr, "%s\n", skv_model_last_error(m)), 1;
    for (int i = 0; i < N * K; i++) tok[i] = 1 + (int32_t)((i * 7919) % (info.n_vocab - 1));
    for (int r = -1; r < reps; r++) { /* round -1 warms the pages and threads up */
        double t0 = now_ms();
        for (int i = 0; i < K; i++)
            if (skv_ctx_truncate(c[i], 0) || skv_ctx_prefill_hidden(c[i], tok + i * N, (size_t)N, hid, lg)) return 1;
        double t1 = now_ms();
        if (skv_ctx_truncate(c[0], 0) || skv_ctx_prefill_hidden(c[0], tok, (size_t)N * (size_t)K, hid, lg)) return 1;
        double t2 = now_ms();
        if (r >= 0) split[r] = t1 - t0, one[r] = t2 - t1;
    }
    qsort(split, (size_t)reps, sizeof *split, cmp_d);
    qsort(one, (size_t)reps, sizeof *one, cmp_d);
    printf("%d prompts of %d tokens, %d threads: one after another best %.2f ms, median %.2f; "
           "one pass of %d rows best %.2f ms, median %.2f\n",
           K, N, th, split[0], split[reps / 2], N * K, one[0], one[reps / 2]);
    for (int i = 0; i < K; i++) skv_ctx_free(c[i]);
    skv_model_free(m);
    free(tok), free(hid), free(lg), free(split), free(one);
    return 0;
}
