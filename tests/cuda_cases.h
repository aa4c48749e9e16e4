/* The cases shared by tests/test_cuda_order.c (the host model of the CUDA kernels) and
 * tests/test_cuda_gpu.c (the kernels on a device): each builds inputs, runs the CPU
 * engine's scalar reference (engine/ops.h, quant/dot.h) and the implementation under test
 * (cu_impl), and compares the outputs bit for bit. Shapes cross every boundary of the
 * kernels' structure: lengths not a multiple of 8 (the tail), of 32 blocks (the warp's
 * chunks of k_qdot), more keys than a block's 256 threads (k_attn), GQA groups.
 * Include after test.h. */
#ifndef SKV_TESTS_CUDA_CASES_H
#define SKV_TESTS_CUDA_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "cuda/cu_ops.h"
#include "engine/arch.h"
#include "engine/ops.h"
#include "quant/dot.h"
#include "quant/types.h"

typedef struct {
    int (*matvec_f16)(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows);
    int (*qmatmul)(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows);
    int (*rmsnorm)(float *y, const float *x, const float *w, size_t n, size_t T, float eps);
    int (*rope)(float *x, size_t rows, size_t hd, size_t np, int neox, const float *cos_t, const float *sin_t,
                const uint32_t *pos, size_t n_pos);
    int (*silu_mul)(float *h, const float *g, size_t n);
    int (*attn)(const skv_cu_attn_args *a);
    /* 1: NaN equals NaN whatever the payload (x86 and CUDA make different default NaNs) */
    int nan_any;
} cu_impl;

static const cu_impl *cu_under_test;

static uint64_t cu_rng = 0x9e3779b97f4a7c15ull;

static uint32_t cu_rand(void)
{
    cu_rng ^= cu_rng << 13, cu_rng ^= cu_rng >> 7, cu_rng ^= cu_rng << 17;
    return (uint32_t)(cu_rng >> 16);
}

/* Uniform in (-a, a), with a's magnitude varied per call site. */
static float cu_uni(float a) { return ((float)(cu_rand() & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * a; }

static void cu_fill(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) x[i] = cu_uni(a);
}

/* Index of the first element whose bits differ, or n when all agree. */
static size_t cu_first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, a + i, 4);
        memcpy(&y, b + i, 4);
        if (x == y || (cu_under_test->nan_any && a[i] != a[i] && b[i] != b[i])) continue;
        return i;
    }
    return n;
}

#define CU_SAME(ref, got, n, what)                                                                       \
    do {                                                                                                 \
        size_t i_ = cu_first_diff((ref), (got), (n));                                                    \
        CHECK_MSG(i_ == (n), "%s: element %zu differs: reference %a, implementation %a", (what), i_,     \
                  (double)(ref)[i_], (double)(got)[i_]);                                                 \
    } while (0)

#define CU_OK(call) CHECK_MSG((call) == SKV_CUDA_OK, "%s: %s", #call, skv_cuda_error())

static void cu_case_matvec_f16(void)
{
    static const size_t Ks[] = {8, 13, 64, 100, 257, 2048};
    const skv_kernels *k = skv_kernels_scalar();
    for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
        size_t K = Ks[c], R = 37, T = 3;
        uint16_t *W = malloc(R * K * 2);
        float *Wf = malloc(R * K * 4), *x = malloc(T * K * 4), *ref = malloc(T * R * 4), *got = malloc(T * R * 4);
        CHECK(W && Wf && x && ref && got);
        for (size_t i = 0; i < R * K; i++) W[i] = skv_f32_to_f16(cu_uni(c & 1 ? 0.05f : 2.0f));
        cu_fill(x, T * K, 1.5f);
        k->dequant(SKV_GGML_F16, W, K * 2, K, R, Wf);
        k->matmul(ref, R, Wf, K, x, K, T, R);
        int rc = cu_under_test->matvec_f16(got, W, K, x, T, R);
        int diff = rc == SKV_CUDA_OK ? (int)cu_first_diff(ref, got, T * R) : -1;
        free(W), free(Wf), free(x), free(ref), free(got);
        CHECK_MSG(rc == SKV_CUDA_OK, "matvec_f16 K=%zu: %s", K, skv_cuda_error());
        CHECK_MSG((size_t)diff == T * R, "matvec_f16 K=%zu: output %d differs", K, diff);
    }
}

/* Weight rows of q8_0 (34-byte blocks) or q4_0 (18): random scales (one block in 7 with
 * scale 0), random quants (q8_0 includes -128). */
static void cu_qweights(uint8_t *W, size_t bytes, size_t n_blocks)
{
    for (size_t b = 0; b < n_blocks; b++) {
        uint8_t *p = W + b * bytes;
        uint16_t d = b % 7 == 3 ? 0 : skv_f32_to_f16(cu_uni(0.02f));
        p[0] = (uint8_t)d, p[1] = (uint8_t)(d >> 8);
        for (size_t i = 2; i < bytes; i++) p[i] = (uint8_t)cu_rand();
    }
}

/* Activations: random, one block of zeros, one with a value that ties in roundf. */
static void cu_qacts(float *x, size_t T, size_t K, int specials)
{
    cu_fill(x, T * K, 3.0f);
    if (K >= 64) memset(x + 32, 0, 32 * sizeof *x);
    x[0] = 127.0f, x[1] = 0.5f, x[2] = -2.5f; /* d = 1: x/d ties at 0.5, -2.5 */
    if (specials && K >= 128) x[70] = -0.0f, x[100] = 1e-40f;
}

static void cu_case_qmatmul(int wtype)
{
    static const size_t Ks[] = {32, 96, 1024, 1056, 2080};
    uint32_t gt = wtype == SKV_CU_Q4_0 ? SKV_GGML_Q4_0 : SKV_GGML_Q8_0;
    size_t bytes = wtype == SKV_CU_Q4_0 ? 18 : 34;
    const skv_kernels *k = skv_kernels_scalar();
    for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
        size_t K = Ks[c], R = 21, T = 4, nb = K / 32;
        uint8_t *W = malloc(R * nb * bytes), *qa = malloc(T * skv_qmatmul_act_bytes(gt, K));
        float *x = malloc(T * K * 4), *ref = malloc(T * R * 4), *got = malloc(T * R * 4);
        CHECK(W && qa && x && ref && got);
        cu_qweights(W, bytes, R * nb);
        cu_qacts(x, T, K, 1);
        skv_qmatmul_quantize(k, gt, x, K, T, K, qa);
        skv_qmatmul(k, ref, R, gt, W, nb * bytes, K, qa, T, R);
        int rc = cu_under_test->qmatmul(wtype, got, W, K, x, T, R);
        int diff = rc == SKV_CUDA_OK ? (int)cu_first_diff(ref, got, T * R) : -1;
        free(W), free(qa), free(x), free(ref), free(got);
        CHECK_MSG(rc == SKV_CUDA_OK, "qmatmul K=%zu: %s", K, skv_cuda_error());
        CHECK_MSG((size_t)diff == T * R, "qmatmul type %d K=%zu: output %d differs", wtype, K, diff);
    }
}

static void cu_case_q8_0(void) { cu_case_qmatmul(SKV_CU_Q8_0); }
static void cu_case_q4_0(void) { cu_case_qmatmul(SKV_CU_Q4_0); }

static void cu_case_rmsnorm(void)
{
    static const size_t Ns[] = {7, 64, 260, 2048};
    const skv_kernels *k = skv_kernels_scalar();
    for (size_t c = 0; c < sizeof Ns / sizeof *Ns; c++) {
        size_t n = Ns[c], T = 3;
        float x[3 * 2048], w[2048], ref[3 * 2048], got[3 * 2048];
        cu_fill(x, T * n, c == 2 ? 1e-3f : 4.0f);
        cu_fill(w, n, 1.2f);
        for (size_t t = 0; t < T; t++) k->rmsnorm(ref + t * n, x + t * n, w, n, 1e-5f);
        CU_OK(cu_under_test->rmsnorm(got, x, w, n, T, 1e-5f));
        CU_SAME(ref, got, T * n, "rmsnorm");
    }
}

static void cu_case_rope(void)
{
    const skv_kernels *k = skv_kernels_scalar();
    enum { HD = 64, ROWS = 12, NPOS = 9 };
    for (int neox = 0; neox <= 1; neox++)
        for (size_t np = 16; np <= 32; np += 16) { /* partial rotary (np < hd/2) and whole */
            float x[ROWS * HD], ref[ROWS * HD], cs[NPOS * 32], sn[NPOS * 32], tmp[64];
            uint32_t pos[ROWS];
            cu_fill(x, ROWS * HD, 2.0f);
            cu_fill(cs, NPOS * np, 1.0f);
            cu_fill(sn, NPOS * np, 1.0f);
            memcpy(ref, x, sizeof x);
            for (size_t i = 0; i < ROWS; i++) {
                pos[i] = cu_rand() % NPOS;
                skv_rope_apply(neox ? SKV_ROPE_NEOX : SKV_ROPE_NORM, k->rope, ref + i * HD, cs + pos[i] * np,
                               sn + pos[i] * np, np, tmp);
            }
            CU_OK(cu_under_test->rope(x, ROWS, HD, np, neox, cs, sn, pos, NPOS));
            CU_SAME(ref, x, (size_t)ROWS * HD, neox ? "rope neox" : "rope");
        }
}

static void cu_case_silu(void)
{
    enum { N = 4099 };
    static float h[N], g[N], ref[N];
    const skv_kernels *k = skv_kernels_scalar();
    cu_fill(h, N, 30.0f);
    cu_fill(g, N, 2.0f);
    h[0] = -100.0f, h[1] = 100.0f, h[2] = -0.0f, h[3] = 87.5f, h[4] = -87.5f, h[5] = 1e-30f;
    memcpy(ref, h, sizeof h);
    k->silu_mul(ref, g, N);
    CU_OK(cu_under_test->silu_mul(h, g, N));
    CU_SAME(ref, h, (size_t)N, "silu_mul");
}

/* GQA: 2 KV heads, 4 query rows each, lengths from 1 to past one block of threads. */
static void cu_attn_one(size_t hd, int f16)
{
    enum { NQ = 8, NKV = 2, NCTX = 300 };
    const skv_kernels *k = skv_kernels_scalar();
    size_t kvn = (size_t)NKV * NCTX * hd;
    float *Kf = malloc(kvn * 4), *Vf = malloc(kvn * 4), *q = malloc(NQ * hd * 4), *ref = malloc(NQ * hd * 4),
          *got = malloc(NQ * hd * 4), *sc = malloc(NCTX * 4), *kv = malloc(2 * NCTX * hd * 4);
    uint16_t *Kh = malloc(kvn * 2), *Vh = malloc(kvn * 2);
    uint32_t n[NQ] = {1, 2, 15, 64, 263, 300, 39, 103}, kvh[NQ];
    CHECK(Kf && Vf && q && ref && got && sc && kv && Kh && Vh);
    cu_fill(Kf, kvn, 1.0f);
    cu_fill(Vf, kvn, 1.0f);
    cu_fill(q, NQ * hd, 1.0f);
    for (size_t i = 0; i < kvn; i++) { /* an f16 cache holds exactly these values */
        Kh[i] = skv_f32_to_f16(Kf[i]), Vh[i] = skv_f32_to_f16(Vf[i]);
        Kf[i] = skv_f16_to_f32(Kh[i]), Vf[i] = skv_f16_to_f32(Vh[i]);
    }
    float scale = 1.0f / sqrtf((float)hd);
    for (size_t i = 0; i < NQ; i++) {
        size_t len = n[i], off;
        float *o = ref + i * hd;
        const float *qi = q + i * hd;
        kvh[i] = (uint32_t)(i / (NQ / NKV));
        off = (size_t)kvh[i] * NCTX * hd;
        if (f16) k->attn_f16(&o, &qi, &len, 1, Kh + off, Vh + off, hd, scale, sc, len, kv);
        else k->attn(&o, &qi, &len, 1, Kf + off, Vf + off, hd, scale, sc, len);
    }
    skv_cu_attn_args a = {got, q, n, kvh, NQ, f16 ? (const void *)Kh : Kf, f16 ? (const void *)Vh : Vf,
                          f16, NKV, NCTX, hd, scale};
    int rc = cu_under_test->attn(&a);
    size_t diff = rc == SKV_CUDA_OK ? cu_first_diff(ref, got, NQ * hd) : 0;
    free(Kf), free(Vf), free(q), free(ref), free(got), free(sc), free(kv), free(Kh), free(Vh);
    CHECK_MSG(rc == SKV_CUDA_OK, "attn: %s", skv_cuda_error());
    CHECK_MSG(diff == NQ * hd, "attn hd=%zu f16=%d: output %zu (row %zu) differs", hd, f16, diff, diff / hd);
}

static void cu_case_attn(void)
{
    static const size_t hds[] = {64, 40, 20, 128};
    for (size_t c = 0; c < sizeof hds / sizeof *hds; c++)
        for (int f16 = 0; f16 <= 1; f16++) {
            cu_attn_one(hds[c], f16);
            if (test_cur_failed) return;
        }
}

/* The 1.1B geometry's largest matrix (ffn 5632 x dim 2048) at 2 tokens, f16 and q4_0:
 * grids of the real size (k_matvec_f16: 176 x 2 blocks; k_qdot: 704 x 2). */
static void cu_case_big(void)
{
    enum { R = 5632, K = 2048, T = 2 };
    const skv_kernels *k = skv_kernels_scalar();
    uint16_t *W = malloc((size_t)R * K * 2);
    uint8_t *Q = malloc((size_t)R * (K / 32) * 18), *qa = malloc(T * skv_qmatmul_act_bytes(SKV_GGML_Q4_0, K));
    float *Wf = malloc((size_t)R * K * 4), *x = malloc(T * K * 4), *ref = malloc(T * R * 4), *got = malloc(T * R * 4);
    int rc = SKV_CUDA_FAILED;
    size_t d1 = 0, d2 = 0;
    if (W && Q && qa && Wf && x && ref && got) {
        for (size_t i = 0; i < (size_t)R * K; i++) W[i] = skv_f32_to_f16(cu_uni(0.03f));
        cu_qweights(Q, 18, (size_t)R * (K / 32));
        cu_fill(x, T * K, 1.0f);
        k->dequant(SKV_GGML_F16, W, K * 2, K, R, Wf);
        k->matmul(ref, R, Wf, K, x, K, T, R);
        rc = cu_under_test->matvec_f16(got, W, K, x, T, R);
        d1 = rc == SKV_CUDA_OK ? cu_first_diff(ref, got, T * R) : 0;
        skv_qmatmul_quantize(k, SKV_GGML_Q4_0, x, K, T, K, qa);
        skv_qmatmul(k, ref, R, SKV_GGML_Q4_0, Q, (K / 32) * 18, K, qa, T, R);
        if (rc == SKV_CUDA_OK) rc = cu_under_test->qmatmul(SKV_CU_Q4_0, got, Q, K, x, T, R);
        d2 = rc == SKV_CUDA_OK ? cu_first_diff(ref, got, T * R) : 0;
    }
    free(W), free(Q), free(qa), free(Wf), free(x), free(ref), free(got);
    CHECK_MSG(rc == SKV_CUDA_OK, "%s", skv_cuda_error());
    CHECK_MSG(d1 == T * R, "f16 5632 x 2048: output %zu differs", d1);
    CHECK_MSG(d2 == T * R, "q4_0 5632 x 2048: output %zu differs", d2);
}

/* Every case: X(test case name, function). */
#define CU_CASES(X)                  \
    X(matvec_f16, cu_case_matvec_f16) \
    X(qmatmul_q8_0, cu_case_q8_0)     \
    X(qmatmul_q4_0, cu_case_q4_0)     \
    X(rmsnorm, cu_case_rmsnorm)       \
    X(rope, cu_case_rope)             \
    X(silu_mul, cu_case_silu)         \
    X(attention_gqa, cu_case_attn)    \
    X(shapes_of_1_1b, cu_case_big)

#endif
