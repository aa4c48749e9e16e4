/* Kernel twins: every AVX2 kernel that the engine's results depend on is compared bit for
 * bit with the scalar reference on random inputs of awkward sizes (tails of the 8-lane
 * loops, row counts that are not multiples of the tiles), including the fused f16
 * matrix-vector product against its definition (dequant + matmul with one token) and
 * the dequantization of every weight type the type table can read.
 * tests/test_engine.c covers the same kernels end to end through whole models. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "core/cpu.h"
#include "engine/ops.h"
#include "quant/types.h"
#include "quant/types_kernels.h"
#include "test.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static float rnd_float(void) { return ((float)(rnd() & 0xffffff) / 16777216.0f - 0.5f) * 4.0f; }

/* Random binary16 values, a few of them subnormal or zero. */
static uint16_t rnd_half(void)
{
    uint32_t r = rnd();
    if (r % 50 == 0) return (uint16_t)(r >> 16 & 0x83ff); /* subnormal / signed zero */
    return skv_f32_to_f16(rnd_float());
}

static const skv_kernels *avx2_or_skip(void) { return skv_kernels_avx2(); }

static void matvec_f16_equals_dequant_matmul(void)
{
    const skv_kernels *ref = skv_kernels_scalar(), *fast = avx2_or_skip();
    if (!fast) SKIP("no AVX2+FMA+F16C on this CPU");
    CHECK(fast->matvec_f16 != NULL);
    static const size_t Ks[] = {1, 5, 8, 13, 16, 31, 64, 67, 256, 769};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t n = 1; n <= 19; n += (n < 9 ? 1 : 5)) {
            size_t K = Ks[ki], row_bytes = 2 * K + 2 * (n % 3); /* rows need not be packed */
            uint8_t *W = calloc(n, row_bytes);
            float *x = malloc(K * sizeof *x), *Wf = malloc(n * K * sizeof *Wf);
            float *y1 = malloc(n * sizeof *y1), *y2 = malloc(n * sizeof *y2), *y3 = malloc(n * sizeof *y3);
            CHECK(W && x && Wf && y1 && y2 && y3);
            for (size_t r = 0; r < n; r++)
                for (size_t j = 0; j < K; j++) {
                    uint16_t h = rnd_half();
                    memcpy(W + r * row_bytes + 2 * j, &h, 2);
                }
            for (size_t j = 0; j < K; j++) x[j] = rnd_float();
            ref->dequant(1 /* f16 */, W, row_bytes, K, n, Wf);
            ref->matmul(y1, n, Wf, K, x, K, 1, n);
            fast->matmul(y2, n, Wf, K, x, K, 1, n);
            fast->matvec_f16(y3, W, row_bytes, K, x, n);
            CHECK_MSG(!memcmp(y1, y2, n * sizeof *y1), "AVX2 matmul differs from scalar (K %zu, rows %zu)", K, n);
            CHECK_MSG(!memcmp(y1, y3, n * sizeof *y1), "matvec_f16 differs from dequant+matmul (K %zu, rows %zu)", K,
                      n);
            free(W), free(x), free(Wf), free(y1), free(y2), free(y3);
        }
}

/* A random finite bf16: a random float's top 16 bits. */
static uint16_t rnd_bf16(void)
{
    float f = rnd_float();
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* One case of a 16-bit float weight product mm (type f16 or bf16): n rows (row_bytes apart)
 * x T tokens (x rows ldx apart, y rows ldy) against the reference dequant + matmul. */
static void matmul_half_case(const skv_kernels *ref, uint32_t type, skv_matmul_fn mm, size_t K, size_t n, size_t T)
{
    size_t row_bytes = 2 * K + 2 * (n % 3), ldx = K + T % 2, ldy = n + 1;
    uint8_t *W = calloc(n, row_bytes);
    float *x = calloc(T * ldx, sizeof *x), *Wf = malloc((n + 8) * K * sizeof *Wf);
    float *y1 = calloc(T * ldy, sizeof *y1), *y2 = calloc(T * ldy, sizeof *y2);
    CHECK(W && x && Wf && y1 && y2);
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < K; j++) {
            uint16_t h = type == SKV_GGML_F16 ? rnd_half() : rnd_bf16();
            memcpy(W + r * row_bytes + 2 * j, &h, 2);
        }
    for (size_t i = 0; i < T * ldx; i++) x[i] = rnd_float();
    ref->dequant(type, W, row_bytes, K, n, Wf);
    ref->matmul(y1, ldy, Wf, K, x, ldx, T, n);
    mm(y2, ldy, W, row_bytes, K, x, ldx, T, n, Wf + n * K); /* scratch: 8 * K floats */
    CHECK_MSG(!memcmp(y1, y2, T * ldy * sizeof *y1), "%s product differs from dequant+matmul (K %zu, rows %zu, T %zu)",
              skv_ggml_type_name(type), K, n, T);
    free(W), free(x), free(Wf), free(y1), free(y2);
}

static void matmul_f16_case(const skv_kernels *ref, const skv_kernels *fast, size_t K, size_t n, size_t T)
{
    matmul_half_case(ref, SKV_GGML_F16, fast->matmul_f16, K, n, T);
}

/* bf16 weights run the f16 kernels' source with bf16's conversion (quant/half_kern_x86.h):
 * decode (T = 1: 8-row tiles, single rows) and batches (4 x 3 and 2 x 4 tiles). */
static void matmul_bf16_equals_dequant_matmul(void)
{
    const skv_kernels *ref = skv_kernels_scalar();
    const skv_type_traits *t = skv_type_traits_of(SKV_GGML_BF16);
    skv_matmul_fn mm = skv_type_matmul(t, 1);
    if (!avx2_or_skip()) SKIP("no AVX2+FMA+F16C on this CPU");
    CHECK(mm != NULL && skv_type_matvec(t, 1) != NULL);
    static const size_t Ks[] = {1, 7, 8, 13, 64, 67, 256, 1031};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t n = 1; n <= 19; n += (n < 9 ? 1 : 5))
            for (size_t T = 1; T <= 11; T += (T < 5 ? 1 : 3)) matmul_half_case(ref, SKV_GGML_BF16, mm, Ks[ki], n, T);
}

static void matmul_f16_equals_dequant_matmul(void)
{
    const skv_kernels *ref = skv_kernels_scalar(), *fast = avx2_or_skip();
    if (!fast) SKIP("no AVX2+FMA+F16C on this CPU");
    CHECK(fast->matmul_f16 != NULL);
    static const size_t Ks[] = {1, 7, 8, 13, 64, 67, 256};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t n = 1; n <= 19; n += (n < 9 ? 1 : 5))
            for (size_t T = 1; T <= 11; T++) matmul_f16_case(ref, fast, Ks[ki], n, T);
    /* T 2..23: the AVX-512 register tiles (4 rows x up to 8 tokens) where the CPU allows */
    for (size_t T = 12; T < SKV_F16_MATMUL_WIDE_T; T += 5)
        for (size_t n = 4; n <= 13; n += 3) matmul_f16_case(ref, fast, 64 + T % 5, n, T);
    /* prefill-sized: the AVX-512 tiles where the CPU (and SEQKV_CPU) allows them */
    for (size_t T = SKV_F16_MATMUL_WIDE_T; T <= SKV_F16_MATMUL_WIDE_T + 13; T += 1)
        for (size_t n = 7; n <= 17; n += 5) matmul_f16_case(ref, fast, 67 + T % 3, n, T);
    /* K >= 512: the AVX-512 tiles over K in blocks of 256 columns, the accumulators kept in
     * scratch between blocks, the tokens in chunks when scratch holds fewer (K 517: 32 a
     * chunk), a last short block (K 1031: 1024 = 4 blocks, tail 7) */
    static const size_t Kb[] = {512, 517, 776, 1031};
    static const size_t Tb[] = {24, 31, 32, 33, 65, 70};
    for (size_t ki = 0; ki < sizeof Kb / sizeof Kb[0]; ki++)
        for (size_t ti = 0; ti < sizeof Tb / sizeof Tb[0]; ti++)
            for (size_t n = 8; n <= 17; n += 9) matmul_f16_case(ref, fast, Kb[ki], n, Tb[ti]);
}

/* attn of nq rows over K/V of n_max positions (rows attend to n[i] of them), AVX2 vs scalar. */
static void attn_case(const skv_kernels *ref, const skv_kernels *fast, size_t hd, size_t nq, const size_t *n,
                      size_t n_max)
{
    float *K = malloc(n_max * hd * sizeof *K), *V = malloc(n_max * hd * sizeof *V), *q = malloc(nq * hd * sizeof *q);
    float *o1 = malloc(nq * hd * sizeof *o1), *o2 = malloc(nq * hd * sizeof *o2);
    float *s1 = malloc(nq * n_max * sizeof *s1), *s2 = malloc(nq * n_max * sizeof *s2);
    float *op1[4], *op2[4];
    const float *qp[4];
    CHECK(K && V && q && o1 && o2 && s1 && s2 && nq <= 4);
    for (size_t i = 0; i < n_max * hd; i++) K[i] = rnd_float(), V[i] = rnd_float();
    for (size_t i = 0; i < nq * hd; i++) q[i] = rnd_float();
    for (size_t i = 0; i < nq; i++) op1[i] = o1 + i * hd, op2[i] = o2 + i * hd, qp[i] = q + i * hd;
    ref->attn(op1, qp, n, nq, K, V, hd, 0.125f, s1, n_max);
    fast->attn(op2, qp, n, nq, K, V, hd, 0.125f, s2, n_max);
    CHECK_MSG(!memcmp(o1, o2, nq * hd * sizeof *o1), "AVX2 attn differs from scalar (hd %zu, rows %zu, n %zu)", hd, nq,
              n[0]);
    free(K), free(V), free(q), free(o1), free(o2), free(s1), free(s2);
}

static void attn_equals_scalar(void)
{
    const skv_kernels *ref = skv_kernels_scalar(), *fast = avx2_or_skip();
    if (!fast) SKIP("no AVX2+FMA+F16C on this CPU");
    static const size_t hds[] = {8, 13, 32, 64, 96, 128};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (size_t len = 1; len <= 41; len += 4)
            for (size_t nq = 1; nq <= 4; nq++) {
                size_t same[4] = {len, len, len, len}, ramp[4] = {len, len + 1, len + 2, len + 3};
                attn_case(ref, fast, hds[hi], nq, same, len);
                attn_case(ref, fast, hds[hi], nq, ramp, len + 3);
            }
}

/* attn_f16 over binary16 K/V (an f16 KV cache), AVX2 vs the scalar reference, and both vs
 * the f32 attn of the converted rows: up to 16 rows (a GQA group of 8 heads x 2 tokens), so
 * the decode pair, the blocked path (K and V converted a block at a time) and its groups of 8
 * rows all run. */
static void attn_f16_case(const skv_kernels *ref, const skv_kernels *fast, size_t hd, size_t nq, const size_t *n,
                          size_t n_max)
{
    uint16_t *K = malloc(n_max * hd * sizeof *K), *V = malloc(n_max * hd * sizeof *V);
    float *Kf = malloc(n_max * hd * sizeof *Kf), *Vf = malloc(n_max * hd * sizeof *Vf), *q = malloc(nq * hd * sizeof *q);
    float *o1 = malloc(nq * hd * sizeof *o1), *o2 = malloc(nq * hd * sizeof *o2), *o3 = malloc(nq * hd * sizeof *o3);
    float *s = malloc(nq * n_max * sizeof *s), *kv = malloc(2 * n_max * hd * sizeof *kv);
    float *op1[16], *op2[16], *op3[16];
    const float *qp[16];
    CHECK(K && V && Kf && Vf && q && o1 && o2 && o3 && s && kv && nq <= 16);
    for (size_t i = 0; i < n_max * hd; i++) {
        K[i] = rnd_half(), V[i] = rnd_half();
        Kf[i] = skv_f16_to_f32(K[i]), Vf[i] = skv_f16_to_f32(V[i]);
    }
    for (size_t i = 0; i < nq * hd; i++) q[i] = rnd_float();
    for (size_t i = 0; i < nq; i++) op1[i] = o1 + i * hd, op2[i] = o2 + i * hd, op3[i] = o3 + i * hd, qp[i] = q + i * hd;
    ref->attn(op1, qp, n, nq, Kf, Vf, hd, 0.125f, s, n_max);
    ref->attn_f16(op2, qp, n, nq, K, V, hd, 0.125f, s, n_max, kv);
    fast->attn_f16(op3, qp, n, nq, K, V, hd, 0.125f, s, n_max, kv);
    CHECK_MSG(!memcmp(o1, o2, nq * hd * sizeof *o1), "scalar attn_f16 differs from attn (hd %zu, rows %zu, n %zu)", hd,
              nq, n[0]);
    CHECK_MSG(!memcmp(o1, o3, nq * hd * sizeof *o1), "AVX2 attn_f16 differs from scalar (hd %zu, rows %zu, n %zu)", hd,
              nq, n[0]);
    free(K), free(V), free(Kf), free(Vf), free(q), free(o1), free(o2), free(o3), free(s), free(kv);
}

static void attn_f16_equals_scalar(void)
{
    const skv_kernels *ref = skv_kernels_scalar(), *fast = avx2_or_skip();
    if (!fast) SKIP("no AVX2+FMA+F16C on this CPU");
    CHECK(ref->attn_f16 && fast->attn_f16);
    static const size_t hds[] = {8, 13, 32, 64, 128}, nqs[] = {1, 2, 3, 5, 8, 9, 16};
    static const size_t long_lens[] = {129, 200, 333}; /* several key blocks (64 keys at hd 64) */
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (size_t li = 0; li < 24 + sizeof long_lens / sizeof long_lens[0]; li++)
            for (size_t ni = 0; ni < sizeof nqs / sizeof nqs[0]; ni++) {
                size_t len = li < 24 ? 1 + 3 * li : long_lens[li - 24], nq = nqs[ni], same[16], ramp[16];
                for (size_t i = 0; i < 16; i++) same[i] = len, ramp[i] = len + i;
                attn_f16_case(ref, fast, hds[hi], nq, same, len);
                attn_f16_case(ref, fast, hds[hi], nq, ramp, len + nq - 1);
            }
}

static void matmul_tiles_equal_scalar(void)
{
    const skv_kernels *ref = skv_kernels_scalar(), *fast = avx2_or_skip();
    if (!fast) SKIP("no AVX2+FMA+F16C on this CPU");
    for (size_t K = 1; K <= 70; K += 3)
        for (size_t T = 1; T <= 5; T++) {
            size_t n = 1 + rnd() % 21;
            float *W = malloc(n * K * sizeof *W), *x = malloc(T * K * sizeof *x);
            float *y1 = malloc(T * n * sizeof *y1), *y2 = malloc(T * n * sizeof *y2);
            CHECK(W && x && y1 && y2);
            for (size_t i = 0; i < n * K; i++) W[i] = rnd_float();
            for (size_t i = 0; i < T * K; i++) x[i] = rnd_float();
            ref->matmul(y1, n, W, K, x, K, T, n);
            fast->matmul(y2, n, W, K, x, K, T, n);
            CHECK_MSG(!memcmp(y1, y2, T * n * sizeof *y1), "matmul differs (K %zu, T %zu, rows %zu)", K, T, n);
            free(W), free(x), free(y1), free(y2);
        }
}

/* Random stored bytes of a row, with finite f32 / f16 values and fp16 scales. */
static void random_weights(uint32_t type, uint8_t *W, size_t n_bytes)
{
    for (size_t i = 0; i < n_bytes; i++) W[i] = (uint8_t)rnd();
    if (type == SKV_GGML_F32)
        for (size_t i = 3; i < n_bytes; i += 4) W[i] &= 0xbf;
    if (type == SKV_GGML_F16 || type == SKV_GGML_BF16)
        for (size_t i = 1; i < n_bytes; i += 2) W[i] &= 0xbb;
}

/* The AVX2 kernels' dequant (the type table's SIMD to_float where a row has one)
 * equals the scalar one for every type the engine reads, rows padded or not. */
static void dequant_twins_every_type(void)
{
    const skv_kernels *ref = skv_kernels_scalar(), *fast = avx2_or_skip();
    if (!fast) SKIP("no AVX2+FMA+F16C on this CPU");
    for (uint32_t type = 0; type < SKV_GGML_NTYPES; type++) {
        if (!skv_dequant_supported(type)) continue;
        for (size_t K = 32; K <= 512; K += 96) { /* 512: two K-quant super-blocks */
            size_t n = 5, row_bytes = skv_type_row_bytes(type, K) + 4 * (K % 3);
            if (!skv_type_row_bytes(type, K)) continue; /* not a whole number of blocks */
            uint8_t *W = malloc(n * row_bytes);
            float *y1 = malloc(n * K * sizeof *y1), *y2 = malloc(n * K * sizeof *y2);
            CHECK(W && y1 && y2);
            random_weights(type, W, n * row_bytes);
            ref->dequant(type, W, row_bytes, K, n, y1);
            fast->dequant(type, W, row_bytes, K, n, y2);
            CHECK_MSG(!memcmp(y1, y2, n * K * sizeof *y1), "%s K %zu: dequant differs", skv_ggml_type_name(type), K);
            free(W), free(y1), free(y2);
        }
    }
}

/* The AVX2 kernel set exists exactly when the CPU has all it is compiled for. */
static void kernels_follow_cpu_features(void)
{
    CHECK((skv_kernels_avx2() != NULL) == skv_cpu_has(SKV_CPU_AVX2_SET));
    CHECK(skv_kernels_best() == (skv_kernels_avx2() ? skv_kernels_avx2() : skv_kernels_scalar()));
    CHECK(skv_dequant_supported(SKV_GGML_Q8_0) && skv_dequant_supported(SKV_GGML_Q4_K) && !skv_dequant_supported(SKV_GGML_IQ2_XXS) && !skv_dequant_supported(99));
}

int main(void)
{
    TEST_BEGIN("test_ops");
    RUN(matvec_f16_equals_dequant_matmul);
    RUN(matmul_f16_equals_dequant_matmul);
    RUN(matmul_bf16_equals_dequant_matmul);
    RUN(attn_equals_scalar);
    RUN(attn_f16_equals_scalar);
    RUN(matmul_tiles_equal_scalar);
    RUN(dequant_twins_every_type);
    RUN(kernels_follow_cpu_features);
    TEST_END();
}
