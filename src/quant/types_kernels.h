/* The kernels behind the rows of the type table (types.c): scalar references
 * in types_ref.c, AVX2 twins in types_avx2.c (compiled with -mavx2 -mfma
 * -mf16c, so they need SKV_CPU_AVX2_SET).  Internal to the quant layer and
 * its tests; everything else goes through skv_type_traits_of(). */
#ifndef SKV_TYPES_KERNELS_H
#define SKV_TYPES_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* ---- binary16 conversion: RNE to / from little-endian binary16; each
 * returns 1 if any value (result / input) is infinite or NaN, else 0 ---- */
int skv_f16enc_ref(const float *x, uint8_t *out, size_t n);
int skv_f16dec_ref(const uint8_t *in, float *y, size_t n);
int skv_f16enc_avx2(const float *x, uint8_t *out, size_t n);
int skv_f16dec_avx2(const uint8_t *in, float *y, size_t n);

/* ---- rows (signatures of skv_to_float_fn / skv_from_float_fn / skv_check_fn) ---- */
void skv_f32_to_float_ref(const void *src, float *dst, size_t n);
int skv_f32_from_float_ref(const float *src, void *dst, size_t n);
int skv_f32_check(const void *src, size_t n);

void skv_f16_to_float_ref(const void *src, float *dst, size_t n);
int skv_f16_from_float_ref(const float *src, void *dst, size_t n);
int skv_f16_check(const void *src, size_t n);
void skv_f16_to_float_avx2(const void *src, float *dst, size_t n);
int skv_f16_from_float_avx2(const float *src, void *dst, size_t n);
/* The f16 weight matrix-vector product (skv_matvec_fn). */
void skv_f16_matvec_avx2(float *y, const void *W, size_t row_bytes, size_t K, const float *x, size_t n_rows);
/* The f16 weight matrix product (skv_matmul_fn): y[t][r] for T tokens, weights converted in
 * registers; with scratch (8 * K floats) and T >= SKV_F16_MATMUL_WIDE_T on an AVX-512 CPU it
 * runs the AVX-512 twin (types_avx512.c: 8-row tiles converted once into scratch), for
 * smaller T >= 2 the AVX-512 register tiles (skv_f16_matmul_avx512_small). */
#define SKV_F16_MATMUL_WIDE_T 24
void skv_f16_matmul_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                         size_t T, size_t n_rows, float *scratch);
void skv_f16_matmul_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                           size_t T, size_t n_rows, float *scratch);
/* 2 <= T < SKV_F16_MATMUL_WIDE_T on an AVX-512 CPU: 4-row tiles converted in registers
 * once for up to 8 tokens (types_avx512.c); the AVX2 tiles alone, without dispatch. */
void skv_f16_matmul_avx512_small(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                                 size_t ldx, size_t T, size_t n_rows);
void skv_f16_matmul_tiles_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                               size_t ldx, size_t T, size_t n_rows);
/* bf16 weights: the same kernels with the exact bf16 conversion (half_kern_x86.h); the
 * product has no AVX-512 tiles (scratch unused). */
void skv_bf16_matvec_avx2(float *y, const void *W, size_t row_bytes, size_t K, const float *x, size_t n_rows);
void skv_bf16_matmul_tiles_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                                size_t ldx, size_t T, size_t n_rows);
void skv_bf16_matmul_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                          size_t T, size_t n_rows, float *scratch);

/* Packed f16 / bf16 rows (quant/repack.h; K a multiple of 8): the matvec and the tiles,
 * n_rows a multiple of 8, and the skv_matmul_packed_fn of the type table. */
void skv_f16_matvec_packed_avx2(float *y, const void *P, size_t K, const float *x, size_t n_rows);
void skv_bf16_matvec_packed_avx2(float *y, const void *P, size_t K, const float *x, size_t n_rows);
void skv_f16_matmul_tiles_packed_avx2(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx,
                                      size_t T, size_t n_rows);
void skv_bf16_matmul_tiles_packed_avx2(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx,
                                       size_t T, size_t n_rows);
/* T >= 2 on an AVX-512 CPU (types_avx512.c): 8 packed rows x up to 6 tokens. */
void skv_f16_matmul_avx512_packed(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                  size_t n_rows);
void skv_bf16_matmul_avx512_packed(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                   size_t n_rows);
void skv_f16_matmul_packed_avx2(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                size_t n_rows, float *scratch);
void skv_bf16_matmul_packed_avx2(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                 size_t n_rows, float *scratch);

void skv_bf16_to_float_ref(const void *src, float *dst, size_t n);
void skv_bf16_to_float_avx2(const void *src, float *dst, size_t n);

/* q8_0: blocks of 32 = fp16 scale + 32 x int8; short block of L: 2 + L bytes. */
size_t skv_q8_0_short_bytes(size_t L);
void skv_q8_0_to_float_ref(const void *src, float *dst, size_t n);
int skv_q8_0_from_float_ref(const float *src, void *dst, size_t n);
int skv_q8_0_check(const void *src, size_t n);

/* q4_0: blocks of 32 = fp16 scale + 16 bytes of nibbles; short block of L:
 * 2 + ceil(L/2) bytes. */
size_t skv_q4_0_short_bytes(size_t L);
void skv_q4_0_to_float_ref(const void *src, float *dst, size_t n);
int skv_q4_0_from_float_ref(const float *src, void *dst, size_t n);
int skv_q4_0_check(const void *src, size_t n);

/* ---- weight-only block types (layouts in qblocks.h): rows of whole blocks;
 * to_float of a row whose length is not a block multiple gives zeros for the
 * partial block and reads nothing of it ---- */
void skv_q4_1_to_float_ref(const void *src, float *dst, size_t n);   /* qlegacy.c */
void skv_q5_0_to_float_ref(const void *src, float *dst, size_t n);
void skv_q5_1_to_float_ref(const void *src, float *dst, size_t n);
void skv_iq4_nl_to_float_ref(const void *src, float *dst, size_t n);
void skv_iq4_xs_to_float_ref(const void *src, float *dst, size_t n);
void skv_q2_k_to_float_ref(const void *src, float *dst, size_t n);   /* kquants.c */
void skv_q3_k_to_float_ref(const void *src, float *dst, size_t n);
void skv_q4_k_to_float_ref(const void *src, float *dst, size_t n);
void skv_q5_k_to_float_ref(const void *src, float *dst, size_t n);
void skv_q6_k_to_float_ref(const void *src, float *dst, size_t n);

/* AVX2 twins (kquants_avx2.c); q8_0 / q4_0 handle short last blocks too. */
void skv_q8_0_to_float_avx2(const void *src, float *dst, size_t n);
void skv_q4_0_to_float_avx2(const void *src, float *dst, size_t n);
void skv_q4_k_to_float_avx2(const void *src, float *dst, size_t n);
void skv_q5_k_to_float_avx2(const void *src, float *dst, size_t n);
void skv_q6_k_to_float_avx2(const void *src, float *dst, size_t n);

#endif
