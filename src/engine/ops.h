/* Numeric kernels of the forward pass, in two bit-identical implementations:
 * a portable scalar reference (ops.c) and AVX2+FMA (ops_avx2.c).
 *
 * READ ME FIRST - the determinism contract (docs/determinism.md):
 * 1. Every output element is computed by one fixed sequence of IEEE binary32
 *    operations that depends only on the element's own inputs, never on how many
 *    tokens are batched together or how work is split between threads.
 * 2. The canonical dot product of length n uses 8 lanes:
 *        acc[l] = fma(a[j+l], b[j+l], acc[l])   for j = 0, 8, ... < n8 = n & ~7
 *        s = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))
 *        s = fma(a[j], b[j], s)                 for j = n8 .. n-1 (in order)
 *    (the reduction tree is the one a 256->128->64->32 bit horizontal add gives:
 *    h[l] = acc[l] + acc[l+4], g[l] = h[l] + h[l+2], s = g[0] + g[1]).
 *    The canonical sum is the same with fma(a, 1, acc) == a + acc.
 * 3. fma is the correctly rounded fused multiply-add (C99 fmaf, VFMADD*PS);
 *    nothing else is fused: builds use -ffp-contract=off.
 * 4. exp is our own polynomial (skv_exp_ref), never libm's.
 * Tests compare the two implementations bit for bit on random inputs. */
#ifndef SKV_OPS_H
#define SKV_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct skv_kernels {
    const char *name;
    /* y[t*ldy + r] = dot(W + r*K, x + t*ldx, K) for r < n_rows, t < T */
    void (*matmul)(float *y, size_t ldy, const float *W, size_t K, const float *x, size_t ldx,
                   size_t T, size_t n_rows);
    float (*dot)(const float *a, const float *b, size_t n);
    float (*sum)(const float *a, size_t n);
    void (*axpy)(float *y, float a, const float *x, size_t n);     /* y = fma(a, x, y) */
    void (*exp_sub)(float *y, const float *x, float m, size_t n);  /* y = exp(x - m) */
    void (*silu_mul)(float *h, const float *g, size_t n);          /* h = (h / (1 + exp(-h))) * g */
    void (*add)(float *y, const float *x, size_t n);               /* y = y + x */
    void (*scale)(float *y, float s, size_t n);                    /* y = y * s */
    /* y = (x * inv) * w with inv = 1 / sqrt(dot(x,x)/n + eps) */
    void (*rmsnorm)(float *y, const float *x, const float *w, size_t n, float eps);
    /* pairs (x[2i], x[2i+1]) rotated: x0*c - x1*s, x0*s + x1*c, for i < n_pairs */
    void (*rope)(float *x, const float *cos_t, const float *sin_t, size_t n_pairs);
    /* Causal attention of nq query rows that share one KV head. Row i attends to the
     * first n[i] rows of K and V ([*][hd], contiguous):
     *   s_j = dot(q_i, k_j) * scale;  m = max_j s_j;  e_j = exp(s_j - m);  Z = sum(e)
     *   w_j = e_j * (1 / Z);  out_i = 0;  out_i[d] = fma(w_j, v_j[d], out_i[d]) for j ascending.
     * scores: scratch of nq * n_max floats (n_max >= every n[i]). */
    void (*attn)(float *const *out, const float *const *q, const size_t *n, size_t nq, const float *K,
                 const float *V, size_t hd, float scale, float *scores, size_t n_max);
    /* attn over binary16 K and V rows ([*][hd] uint16, an f16 KV cache): exactly the f32
     * rows' values converted, then attn (same bits). kv: scratch of 2 * n_max * hd floats
     * for shapes without a direct kernel (the scalar reference always converts there; the
     * AVX2 set reads a decode step's GQA pair from the halves, converted in registers). */
    void (*attn_f16)(float *const *out, const float *const *q, const size_t *n, size_t nq, const uint16_t *K,
                     const uint16_t *V, size_t hd, float scale, float *scores, size_t n_max, float *kv);
    /* skv_dequant_rows, with SIMD conversions where they exist (exact: same values) */
    void (*dequant)(uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows, float *dst);
    /* Optional (NULL: not provided). y[r] = dot(f32(W_r), x, K) for n_rows binary16 rows W_r
     * of row_bytes each: exactly dequant + matmul with T = 1 (same products, same order),
     * without the f32 copy of the rows. Token-by-token decoding of f16 models is bound by
     * that copy; its twin is the dequant + matmul path, compared bit for bit by
     * tests/test_engine.c (scalar kernels, which lack it, vs AVX2, single-token decodes). */
    void (*matvec_f16)(float *y, const void *W, size_t row_bytes, size_t K, const float *x, size_t n_rows);
    /* Optional (NULL: not provided). The same for T tokens (y[t*ldy + r], x + t*ldx): exactly
     * dequant + matmul, the f16 rows converted in registers instead of into an f32 copy
     * (tests/test_ops.c compares it with dequant + the scalar matmul). */
    void (*matmul_f16)(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                       size_t T, size_t n_rows, float *scratch); /* scratch: NULL or 8 * K floats */
    /* The level of the integer dot kernels (quant/dot.h) this set runs: skv_qmatmul at
     * any level gives the same bits, the level only decides the speed. */
    int dot_level;
} skv_kernels;

/* Quantized weights by integer dot products (quant/dot.h): for a weight type with an
 * integer dot and K a multiple of its block, skv_qmatmul_act_bytes(type, K) > 0; the
 * T activation rows are quantized once per product (skv_qmatmul_quantize, row t at
 * qa + t*that many bytes; batch-invariant: each row on its own), then
 *   y[t*ldy + r] = skv_qmatmul(...)  for r < n_rows, t < T
 * whatever T, the row split between calls, or the kernel set.  At most
 * SKV_QMATMUL_ACT_BOUND(K) bytes per activation row, for every type. */
#define SKV_QMATMUL_ACT_BOUND(K) (((K) / 32 + 1) * 40)
size_t skv_qmatmul_act_bytes(uint32_t type, size_t K);
/* Tokens per pass over the weights (a multiple of 16; the passes' activations stay in
 * L2): a product of T tokens may run as skv_qmatmul calls on tokens [t0, t0 + that) at
 * qa + t0 * act_bytes, t0 a multiple of it (speed only: the bits do not change). */
size_t skv_qmatmul_token_block(uint32_t type, size_t K);
void skv_qmatmul_quantize(const skv_kernels *k, uint32_t type, const float *x, size_t ldx, size_t T, size_t K,
                          void *qa);
void skv_qmatmul(const skv_kernels *k, float *y, size_t ldy, uint32_t type, const void *W, size_t row_bytes,
                 size_t K, const void *qa, size_t T, size_t n_rows);
/* Or'ed into skv_qmatmul's type: W holds rows in the packed layout of quant/repack.h
 * (row_bytes: its bytes per row; n_rows a multiple of 16).  The same bits. */
#define SKV_QMATMUL_PACKED 0x80000000u

/* x86-64: the AVX-512 parts of the AVX2 set's decode pair, attn_f16's (_h) and attn's
 * (ops_avx512.c; used only when skv_ops_avx512_built() and the CPU has
 * SKV_CPU_AVX512_SET): scores of the first n & ~7 keys (returns that count) and the
 * value sums (hd a multiple of 64). */
int skv_ops_avx512_built(void);
size_t skv_scores_pair_h_avx512(float *s0, float *s1, const float *q0, const float *q1, const uint16_t *K, size_t n,
                                size_t hd, float scale);
void skv_wsum_pair_h_avx512(float *o0, float *o1, const float *w0, const float *w1, size_t n, const uint16_t *V,
                            size_t hd);
size_t skv_scores_pair_avx512(float *s0, float *s1, const float *q0, const float *q1, const float *K, size_t n,
                              size_t hd, float scale);
void skv_wsum_pair_avx512(float *o0, float *o1, const float *w0, const float *w1, size_t n, const float *V, size_t hd);

/* Largest nq the attn kernels accept. */
#define SKV_ATTN_MAX_Q 16

const skv_kernels *skv_kernels_scalar(void);
/* NULL when the CPU lacks AVX2, FMA or F16C (core/cpu.h; SEQKV_CPU=scalar
 * hides them), or the build lacks them. */
const skv_kernels *skv_kernels_avx2(void);
/* AVX2 when available, else scalar. */
const skv_kernels *skv_kernels_best(void);

/* The reference exponential: deterministic on any IEEE binary32 platform.
 * exp(x) for x in [-87, 88]; 0 below -87, +inf above 88; about 2 ulp. */
float skv_exp_ref(float x);

/* Dequantizes n_rows rows of K elements of a GGML-typed matrix into f32 with
 * the type table's to_float (quant/types.h).  Supported: every type with a
 * to_float (skv_dequant_supported); others give zeros.  The _simd form uses
 * the row's SIMD twin where simd is set and the CPU allows (same values). */
int skv_dequant_supported(uint32_t type);
void skv_dequant_rows(uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows, float *dst);
void skv_dequant_rows_simd(int simd, uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows,
                           float *dst);

#endif
