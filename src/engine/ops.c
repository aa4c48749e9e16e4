/* Scalar reference kernels (the specification of every numeric result) and
 * dequantization. See ops.h for the determinism contract. */
#include "engine/ops.h"
#include "core/fpguard.h"

#include <math.h>
#include <string.h>

#include "core/detf32.h"
#include "quant/dot.h"
#include "quant/repack.h"
#include "quant/types.h"

/* ---- exp: core/detf32.h (one source with the CUDA kernels) ---------------------- */

float skv_exp_ref(float x) { return skv_detf32_exp(x); }

/* ---- scalar kernels -------------------------------------------------------- */

static float dot_ref(const float *a, const float *b, size_t n)
{
    float acc[8] = {0};
    size_t n8 = n & ~(size_t)7, j;
    for (j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(a[j + l], b[j + l], acc[l]);
    float h[4], g[2];
    for (int l = 0; l < 4; l++) h[l] = acc[l] + acc[l + 4];
    for (int l = 0; l < 2; l++) g[l] = h[l] + h[l + 2];
    float s = g[0] + g[1];
    for (; j < n; j++) s = fmaf(a[j], b[j], s);
    return s;
}

static float sum_ref(const float *a, size_t n)
{
    float acc[8] = {0};
    size_t n8 = n & ~(size_t)7, j;
    for (j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++) acc[l] = a[j + l] + acc[l];
    float h[4], g[2];
    for (int l = 0; l < 4; l++) h[l] = acc[l] + acc[l + 4];
    for (int l = 0; l < 2; l++) g[l] = h[l] + h[l + 2];
    float s = g[0] + g[1];
    for (; j < n; j++) s = a[j] + s;
    return s;
}

static void matmul_ref(float *y, size_t ldy, const float *W, size_t K, const float *x, size_t ldx,
                       size_t T, size_t n_rows)
{
    for (size_t t = 0; t < T; t++)
        for (size_t r = 0; r < n_rows; r++) y[t * ldy + r] = dot_ref(W + r * K, x + t * ldx, K);
}

static void axpy_ref(float *y, float a, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

static void exp_sub_ref(float *y, const float *x, float m, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = skv_exp_ref(x[i] - m);
}

static void silu_mul_ref(float *h, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) h[i] = (h[i] / (1.0f + skv_exp_ref(-h[i]))) * g[i];
}

static void add_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = y[i] + x[i];
}

static void scale_ref(float *y, float s, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = y[i] * s;
}

static void rmsnorm_ref(float *y, const float *x, const float *w, size_t n, float eps)
{
    float ss = dot_ref(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = (x[i] * inv) * w[i];
}

static void rope_ref(float *x, const float *c, const float *s, size_t n_pairs)
{
    for (size_t i = 0; i < n_pairs; i++) {
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c[i] - x1 * s[i];
        x[2 * i + 1] = x0 * s[i] + x1 * c[i];
    }
}

static void attn_ref(float *const *out, const float *const *q, const size_t *n, size_t nq, const float *K,
                     const float *V, size_t hd, float scale, float *scores, size_t n_max)
{
    for (size_t i = 0; i < nq; i++) {
        const float *qi = q[i];
        float *s = scores + i * n_max, *o = out[i], mx = -INFINITY;
        for (size_t j = 0; j < n[i]; j++) {
            s[j] = dot_ref(qi, K + j * hd, hd) * scale;
            mx = s[j] > mx ? s[j] : mx;
        }
        exp_sub_ref(s, s, mx, n[i]);
        float inv = 1.0f / sum_ref(s, n[i]);
        memset(o, 0, hd * sizeof(float));
        for (size_t j = 0; j < n[i]; j++) axpy_ref(o, s[j] * inv, V + j * hd, hd);
    }
}

static void attn_f16_ref(float *const *out, const float *const *q, const size_t *n, size_t nq, const uint16_t *K,
                         const uint16_t *V, size_t hd, float scale, float *scores, size_t n_max, float *kv)
{
    skv_dequant_rows(SKV_GGML_F16, K, hd * sizeof *K, hd, n_max, kv);
    skv_dequant_rows(SKV_GGML_F16, V, hd * sizeof *V, hd, n_max, kv + n_max * hd);
    attn_ref(out, q, n, nq, kv, kv + n_max * hd, hd, scale, scores, n_max);
}

static const skv_kernels k_scalar = {
    .name = "scalar",
    .matmul = matmul_ref,
    .dot = dot_ref,
    .sum = sum_ref,
    .axpy = axpy_ref,
    .exp_sub = exp_sub_ref,
    .silu_mul = silu_mul_ref,
    .add = add_ref,
    .scale = scale_ref,
    .rmsnorm = rmsnorm_ref,
    .rope = rope_ref,
    .attn = attn_ref,
    .attn_f16 = attn_f16_ref,
    .dequant = skv_dequant_rows,
    .dot_level = SKV_DOT_REF,
};

const skv_kernels *skv_kernels_scalar(void) { return &k_scalar; }

const skv_kernels *skv_kernels_best(void)
{
    const skv_kernels *k = skv_kernels_avx2();
    return k ? k : &k_scalar;
}

/* ---- dequantization --------------------------------------------------------- */

int skv_dequant_supported(uint32_t type) { return skv_type_readable(type); }

void skv_dequant_rows_simd(int simd, uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows,
                           float *dst)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    const uint8_t *s = src;
    if (!t || !t->to_float) { /* callers check skv_dequant_supported */
        memset(dst, 0, n_rows * K * sizeof *dst);
        return;
    }
    skv_to_float_fn to_float = skv_type_to_float(t, simd);
    for (size_t r = 0; r < n_rows; r++) to_float(s + r * row_bytes, dst + r * K, K);
}

void skv_dequant_rows(uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows, float *dst)
{
    skv_dequant_rows_simd(0, type, src, row_bytes, K, n_rows, dst);
}

/* ---- integer dot products (quant/dot.h) ------------------------------------- */

size_t skv_qmatmul_act_bytes(uint32_t type, size_t K) { return skv_act_row_bytes(type, K); }

size_t skv_qmatmul_token_block(uint32_t type, size_t K) { return skv_act_token_block(type, K); }

void skv_qmatmul_quantize(const skv_kernels *k, uint32_t type, const float *x, size_t ldx, size_t T, size_t K,
                          void *qa)
{
    skv_act_quantize(k->dot_level, type, x, ldx, T, K, qa);
}

void skv_qmatmul(const skv_kernels *k, float *y, size_t ldy, uint32_t type, const void *W, size_t row_bytes,
                 size_t K, const void *qa, size_t T, size_t n_rows)
{
    skv_gemm_fn g;
    if (type & SKV_QMATMUL_PACKED) {
        type &= ~SKV_QMATMUL_PACKED;
        skv_gemm_packed(k->dot_level, type, y, ldy, W, row_bytes, qa, skv_act_row_bytes(type, K), K, T, n_rows);
        return;
    }
    g = skv_dot_gemm(k->dot_level, type);
    if (g) g(y, ldy, W, row_bytes, qa, skv_act_row_bytes(type, K), K, T, n_rows);
}
