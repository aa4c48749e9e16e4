/* Quantized matrix products as integer dot products (issue 15).
 *
 * READ ME FIRST
 * - An activation row of K floats is quantized on its own into "act" blocks
 *   (skv_act_quantize): blocks of 32 for the legacy types (q8_0, q4_*, q5_*,
 *   iq4_nl; llama.cpp's quantize_row_q8_0 arithmetic: d = amax/127 rounded to
 *   binary16, q = roundf(x / d)) and of 256 for the K-quants and iq4_xs
 *   (quantize_row_q8_K: d = -max/127, q = rne(x * -127/max), max the
 *   first value of largest magnitude).  Only the row's own values matter, so
 *   the quantization is batch-invariant.
 * - Every weight block is read as integers: value i = d * sc[g] * q[i]
 *   - m * mn[g], groups g of 16 values.  Per block the kernels form the exact
 *   integer sums isum = sum_g sc[g] * sum_{i in g} q[i] a[i] and
 *   imin = sum_g mn[g] * bsum[g] (int32: no rounding, any order), then, blocks
 *   ascending, one fixed float sequence per output element:
 *       acc = fma(d * dx, (float)isum, acc)
 *       acc = fma(-(m * dx), (float)imin, acc)     (types with a min only)
 *   with acc = +0 at the start.  That sequence is the specification
 *   (dot.c, the scalar reference); SIMD twins put rows (in batches also
 *   tokens) in lanes, so any lane count computes it exactly
 *   (docs/determinism.md, "Integer dot kernels").
 * - Decode (T = 1) and prefill (T tokens) may run different kernels (rows or
 *   tokens in lanes, tiles of any size): each output element is the sequence
 *   above whatever T, the tiling or the kernel.
 * - Activations that are not finite give outputs that are not finite (no
 *   undefined behaviour: conversions are clamped first).  Internal to the
 *   quant layer and the engine's kernels (engine/ops.c). */
#ifndef SKV_DOT_H
#define SKV_DOT_H

#include <stddef.h>
#include <stdint.h>

/* Activation block formats (the act_type column of the type table). */
enum skv_act_type { SKV_ACT_NONE = 0, SKV_ACT_Q8_32 = 1, SKV_ACT_Q8_256 = 2 };

/* One activation block of 32 values: scale (binary16-exact), per-16 sums, values. */
typedef struct { float d; int16_t bsum[2]; int8_t qs[32]; } skv_act32;
/* One activation block of 256 values. */
typedef struct { float d; int16_t bsum[16]; int8_t qs[256]; } skv_act256;

/* SIMD levels of the dot kernels, each bit-identical to the reference. */
enum skv_dot_level { SKV_DOT_REF = 0, SKV_DOT_AVX2 = 1, SKV_DOT_AVX512 = 2 };

/* y[t*ldy + r] = the canonical dot of weight row r (W + r*row_bytes, K values)
 * with activation row t (qa + t*qa_stride bytes) for r < n_rows, t < T. */
typedef void (*skv_gemm_fn)(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa,
                            size_t qa_stride, size_t K, size_t T, size_t n_rows);
/* Quantizes the K floats at x into K / block activation blocks at qa. */
typedef void (*skv_act_quant_fn)(const float *x, void *qa, size_t K);

/* Bytes of one quantized activation row of K values for weights of the type;
 * 0 when the type has no integer dot or K is not a multiple of its block. */
size_t skv_act_row_bytes(uint32_t wtype, size_t K);

/* Tokens per pass of a long batch over the weights: a multiple of 16 whose activation
 * rows (skv_act_row_bytes each) fit in about half an L2 cache, so the weight tiles that
 * stream by reuse them from L2 rather than from L3 or memory. */
size_t skv_act_token_block(uint32_t wtype, size_t K);

/* The highest level the CPU allows, capped by max_level (SEQKV_CPU caps the CPU). */
int skv_dot_level(int max_level);

/* Quantizes T rows (row t at x + t*ldx) into qa (row stride skv_act_row_bytes)
 * for weights of type wtype at the given level, for the gemm of the same level: the
 * AVX-512 gemms read each full group of 16 rows (rows 16g .. 16g+15) in
 * an interleaved "lanes" layout of the same size (dot_avx512.c); the rows after the
 * last full group, and every row at other levels and types, are in the row layout. */
void skv_act_quantize(int level, uint32_t wtype, const float *x, size_t ldx, size_t T, size_t K, void *qa);

/* The gemm of the weight type at level (falling back to lower levels where a
 * type has no kernel); NULL when the type has no integer dot. */
skv_gemm_fn skv_dot_gemm(int level, uint32_t wtype);

#endif
