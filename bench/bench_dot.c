/* The integer dot kernels (quant/dot.h) per weight type and level, one Markdown row each:
 *
 *   bench_dot [K=2048] [N=5632] [T=64] [seconds per measurement=0.3] [types=all]
 *
 * One thread (pin it: taskset -c 0).  A measurement is the best of the repetitions that
 * fit in the time budget of one gemm over an N x K weight matrix of random blocks (small
 * finite scales; TinyLlama's FFN up is 2048 x 5632): T = 1 (decode) and T tokens (prefill).
 * Columns: microseconds per token row of outputs (T = 1: per call; T: per call / T), the
 * weight bytes streamed per second at T = 1, and the speedup over the scalar reference.
 * Types with a packed layout (quant/repack.h: what decode runs) get "packed" rows too.
 * The levels are those the CPU has (SEQKV_CPU caps them).  types: comma-separated ggml
 * names ("q5_k,iq4_xs"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "quant/repack.h"
#include "quant/types.h"

static uint64_t g_state = 7;

static uint32_t rnd(void) { return (uint32_t)(skv_quant_splitmix64(&g_state) >> 32); }

/* Random bytes, then every 2-byte field that may hold a binary16 scale set to a small
 * finite value: timing does not depend on the values, only NaN-free runs are wanted. */
static void random_weights(uint8_t *W, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) W[i] = (uint8_t)rnd();
    for (size_t i = 1; i < bytes; i += 2) W[i] &= 0x3b; /* binary16 exponents stay below 15 */
}

/* Best seconds of one gemm call over the budget. */
static double best_call(skv_gemm_fn g, float *y, const uint8_t *W, size_t rb, const uint8_t *qa, size_t ab, size_t K,
                        size_t T, size_t N, double budget)
{
    double best = 1e30, t0 = skv_now();
    do {
        double s = skv_now();
        g(y, N, W, rb, qa, ab, K, T, N);
        s = skv_now() - s;
        best = s < best ? s : best;
    } while (skv_now() - t0 < budget);
    return best;
}

static int wanted(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) return 1;
    return list == NULL;
}

/* The packed layout's kernels (quant/repack.h) at the SIMD levels, T = 1 (decode) and T
 * tokens (prefill): one row per level. */
static double best_packed(int l, uint32_t type, float *y, const uint8_t *P, size_t prb, const uint8_t *qa, size_t ab,
                          size_t K, size_t T, size_t N, double budget)
{
    double best = 1e30, t0 = skv_now();
    do {
        double s = skv_now();
        skv_gemm_packed(l, type, y, N, P, prb, qa, ab, K, T, N);
        s = skv_now() - s;
        best = s < best ? s : best;
    } while (skv_now() - t0 < budget);
    return best;
}

static void bench_packed(uint32_t type, const uint8_t *W, size_t rb, const float *x, size_t K, size_t N, size_t T,
                         double budget, double ref1, double refT)
{
    static const char *lv[] = {"scalar", "avx2 packed", "avx512 packed"};
    size_t prb = skv_pack_row_bytes(type, K), ab = skv_act_row_bytes(type, K);
    uint8_t *P = prb && N % SKV_PACK_ROWS == 0 ? malloc(N * prb) : NULL, *qa = malloc(T * ab);
    float *y = malloc(T * N * sizeof *y);
    if (P && qa && y) {
        skv_pack_rows(type, W, rb, K, N, P);
        for (int l = SKV_DOT_AVX2; l <= skv_dot_level(SKV_DOT_AVX512); l++) {
            skv_act_quantize(l, type, x, K, T, K, qa);
            double s1 = best_packed(l, type, y, P, prb, qa, ab, K, 1, N, budget);
            double sT = best_packed(l, type, y, P, prb, qa, ab, K, T, N, budget) / (double)T;
            printf("| %s | %s | %.1f | %.2f | %.1fx | %.1f | %.1fx |\n", skv_ggml_type_name(type), lv[l], s1 * 1e6,
                   (double)(N * rb) / s1 / 1e9, ref1 / s1, sT * 1e6, refT / sT);
        }
    }
    free(P), free(qa), free(y);
}

static void bench_type(uint32_t type, size_t K, size_t N, size_t T, double budget)
{
    static const char *lv[] = {"scalar", "avx2", "avx512"};
    size_t rb = skv_type_row_bytes(type, K), ab = skv_act_row_bytes(type, K);
    uint8_t *W = malloc(N * rb), *qa = malloc(T * ab);
    float *x = malloc(T * K * sizeof *x), *y = malloc(T * N * sizeof *y);
    double ref1 = 0, refT = 0;
    if (!W || !qa || !x || !y) exit(1);
    random_weights(W, N * rb);
    for (size_t i = 0; i < T * K; i++) x[i] = (float)(rnd() >> 8) / 8388608.0f - 1.0f;
    for (int l = 0; l <= skv_dot_level(SKV_DOT_AVX512); l++) {
        skv_gemm_fn g = skv_dot_gemm(l, type);
        skv_act_quantize(l, type, x, K, T, K, qa);
        double s1 = best_call(g, y, W, rb, qa, ab, K, 1, N, budget);
        double sT = best_call(g, y, W, rb, qa, ab, K, T, N, budget) / (double)T;
        if (l == 0) ref1 = s1, refT = sT;
        printf("| %s | %s | %.1f | %.2f | %.1fx | %.1f | %.1fx |\n", skv_ggml_type_name(type), lv[l], s1 * 1e6,
               (double)(N * rb) / s1 / 1e9, ref1 / s1, sT * 1e6, refT / sT);
        fflush(stdout);
    }
    bench_packed(type, W, rb, x, K, N, T, budget, ref1, refT);
    free(W), free(qa), free(x), free(y);
}

int main(int argc, char **argv)
{
    size_t K = argc > 1 ? (size_t)atol(argv[1]) : 2048, N = argc > 2 ? (size_t)atol(argv[2]) : 5632;
    size_t T = argc > 3 ? (size_t)atol(argv[3]) : 64;
    double budget = argc > 4 ? atof(argv[4]) : 0.3;
    const char *types = argc > 5 ? argv[5] : NULL;
    if (!K || K % 256 || !N || !T) {
        fprintf(stderr, "usage: bench_dot [K (multiple of 256)] [N] [T] [seconds] [types]\n");
        return 2;
    }
    printf("gemm of %zu x %zu weights, 1 thread; T = 1 and T = %zu tokens\n\n", N, K, T);
    printf("| type | level | T=1 us/call | T=1 GB/s | T=1 speedup | T=%zu us/token | T=%zu speedup |\n", T, T);
    printf("|---|---|--:|--:|--:|--:|--:|\n");
    for (uint32_t id = 0; id < SKV_GGML_NTYPES; id++) {
        const skv_type_traits *t = skv_type_traits_of(id);
        if (t && t->gemm[SKV_DOT_REF] && wanted(types, t->name)) bench_type(id, K, N, T, budget);
    }
    return 0;
}
