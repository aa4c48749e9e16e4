/* bench_attn: CPU time of the attention kernels (engine/ops.h `attn`) at long contexts, in the
 * shapes the engine calls them with for a TinyLlama-1.1B geometry (head_dim 64, 8 query heads
 * per KV head):
 *   decode DEPTH: the 8 query rows of one KV head attend to DEPTH+1 rows (one call);
 *   prefill CTX:  the 8 x 2 = 16 query rows of two consecutive tokens per call, every token
 *                 position 0..CTX-1 (what one KV head of a whole prefill computes).
 *   bench_attn [DEPTH=2048] [CTX=2048] [REPS=20] [avx2: skip the (slow) scalar reference]
 * Prints one line per (kernel set, test): CPU milliseconds per call / per prefill head, measured
 * with CLOCK_PROCESS_CPUTIME_ID (the machine is shared: CPU time, not wall time). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/ops.h"

#define HD 64
#define G 8

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* One decode step of one KV head: G rows over depth+1 positions. */
static void decode_call(const skv_kernels *k, const float *K, const float *V, const float *q, float *out,
                        size_t depth, float *scores)
{
    const float *qp[G];
    float *op[G];
    size_t n[G];
    for (int i = 0; i < G; i++) {
        qp[i] = q + i * HD;
        op[i] = out + i * HD;
        n[i] = depth + 1;
    }
    k->attn(op, qp, n, G, K, V, HD, 0.125f, scores, depth + 1);
}

/* All tokens 0..ctx-1 of one KV head, two tokens (16 rows) per call, as attn_task groups them. */
static void prefill_head(const skv_kernels *k, const float *K, const float *V, const float *q, float *out,
                         size_t ctx, float *scores)
{
    for (size_t t = 0; t < ctx; t += 2) {
        const float *qp[2 * G];
        float *op[2 * G];
        size_t n[2 * G], nq = 0;
        for (size_t tt = t; tt < t + 2 && tt < ctx; tt++)
            for (int i = 0; i < G; i++, nq++) {
                qp[nq] = q + (tt % 64) * G * HD + i * HD;
                op[nq] = out + (tt - t) * G * HD + i * HD;
                n[nq] = tt + 1;
            }
        k->attn(op, qp, n, nq, K, V, HD, 0.125f, scores, n[nq - 1]);
    }
}

int main(int argc, char **argv)
{
    size_t depth = argc > 1 ? (size_t)atol(argv[1]) : 2048, ctx = argc > 2 ? (size_t)atol(argv[2]) : 2048;
    int reps = argc > 3 ? atoi(argv[3]) : 20;
    size_t rows = (depth + 1 > ctx ? depth + 1 : ctx);
    float *K = malloc(rows * HD * sizeof(float)), *V = malloc(rows * HD * sizeof(float));
    float *q = malloc(64 * G * HD * sizeof(float)), *out = malloc(2 * G * HD * sizeof(float));
    float *scores = malloc(2 * G * rows * sizeof(float));
    if (!K || !V || !q || !out || !scores || reps < 1) return 1;
    fill(K, rows * HD, 1);
    fill(V, rows * HD, 2);
    fill(q, 64 * G * HD, 3);
    const skv_kernels *sets[2] = {skv_kernels_scalar(), skv_kernels_avx2()};
    for (int s = argc > 4 ? 1 : 0; s < 2; s++) {
        if (!sets[s]) continue;
        double t0 = cpu_s();
        for (int r = 0; r < reps; r++) decode_call(sets[s], K, V, q, out, depth, scores);
        double t1 = cpu_s();
        int preps = reps / 10 > 0 ? reps / 10 : 1;
        for (int r = 0; r < preps; r++) prefill_head(sets[s], K, V, q, out, ctx, scores);
        double t2 = cpu_s();
        printf("%s decode depth %zu: %.3f ms/call; prefill ctx %zu: %.1f ms/KV head (out[0]=%g)\n", sets[s]->name,
               depth, 1e3 * (t1 - t0) / reps, ctx, 1e3 * (t2 - t1) / preps, (double)out[0]);
    }
    free(K);
    free(V);
    free(q);
    free(out);
    free(scores);
    return 0;
}
