/* Internals of the integer dot kernels (dot.h): a weight block in integer
 * form, its unpackers (dot_unpack.c), the reference gemm and the SIMD entry
 * points.  Internal to the quant layer and its tests. */
#ifndef SKV_DOT_INT_H
#define SKV_DOT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/dot.h"

/* A weight block of n = 32 or 256 values as integers: value i =
 * d * sc[i/16] * q[i] - m * mn[i/16]; has_min: whether the m term exists. */
typedef struct {
    float d, m;
    int has_min;
    int16_t sc[16], mn[16];
    int8_t q[256];
} skv_iblock;

typedef void (*skv_unpack_fn)(const uint8_t *blk, skv_iblock *o);

/* Unpackers of every type with an integer dot (dot_unpack.c). */
void skv_unpack_q8_0(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q4_0(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q4_1(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q5_0(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q5_1(const uint8_t *blk, skv_iblock *o);
void skv_unpack_iq4_nl(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q2_k(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q3_k(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q4_k(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q5_k(const uint8_t *blk, skv_iblock *o);
void skv_unpack_q6_k(const uint8_t *blk, skv_iblock *o);
void skv_unpack_iq4_xs(const uint8_t *blk, skv_iblock *o);

/* The 6-bit scales and mins of the 8 runs of a q4_k / q5_k block, from its
 * 12 packed bytes (same values as qblocks.h skv_k4_scale_min). */
static inline void skv_k4_scales8(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8])
{
    for (unsigned j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* The reference gemm over blocks of n values (bytes each) read by unpack. */
void skv_gemm_ref(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride,
                  size_t K, size_t T, size_t n_rows, size_t n, size_t bytes, skv_unpack_fn unpack);

/* Reference activation quantizers (one row of K values). */
void skv_act32_quantize_ref(const float *x, void *qa, size_t K);
void skv_act256_quantize_ref(const float *x, void *qa, size_t K);

/* AVX2 twins of their per-value steps (act_avx2.c; dot.c runs them at the AVX2 level
 * and above): max |x| as bits over n (a multiple of 8) values; roundf(x * id)
 * clamped to +-127 for 32 values; q8_K's nearest_int(iscale * x) for 256. */
uint32_t skv_amax_bits_avx2(const float *x, size_t n);
void skv_act32_round_avx2(const float *x, float id, int8_t *q);
void skv_act256_round_avx2(const float *x, float iscale, int8_t *q);

/* ---- references of the type table's gemm column (dot.c) ---- */
void skv_gemm_q8_0_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_0_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_1_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q5_0_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q5_1_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_iq4_nl_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q2_k_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q3_k_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_k_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q5_k_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q6_k_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_iq4_xs_ref(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);

/* ---- SIMD twins of the gemm (dot_x86.h, built for AVX2 in dot_avx2.c and
 * for AVX-512 VNNI in dot_avx512.c): exactly the reference's bits. ---- */
void skv_gemm_q8_0_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_0_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_k_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q6_k_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
/* Their prefill at AVX2 (T > 1): dot_ext_x86.h's tokens-in-lanes tiles. */
void skv_gemm_q4_k_tok_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q6_k_tok_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
/* The types without a tuned kernel: generic tiles over one unpacker per type
 * (dot_ext_x86.h, built in dot_ext_avx2.c and, with the lanes kernels, dot_avx512.c). */
#define SKV_EXT_DECL(name)                                                                                    \
    void skv_gemm_##name##_avx2(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t,  \
                                size_t);                                                                      \
    void skv_gemm_##name##_avx512(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, \
                                  size_t)
/* The AVX-512 name of an AVX2 gemm, for builds whose compiler lacks AVX-512 VNNI. */
#define SKV_GEMM_AVX512_ALIAS(name)                                                                      \
    void skv_gemm_##name##_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, \
                                  size_t qa_stride, size_t K, size_t T, size_t n_rows)                  \
    {                                                                                                    \
        skv_gemm_##name##_avx2(y, ldy, W, row_bytes, qa, qa_stride, K, T, n_rows);                       \
    }
SKV_EXT_DECL(q4_1);
SKV_EXT_DECL(q5_0);
SKV_EXT_DECL(q5_1);
SKV_EXT_DECL(iq4_nl);
SKV_EXT_DECL(q2_k);
SKV_EXT_DECL(q3_k);
SKV_EXT_DECL(q5_k);
SKV_EXT_DECL(iq4_xs);
/* Whether the AVX-512 gemms read groups of 16 activation rows in the lanes layout
 * (dot_avx512.c; 0 when the compiler could not build them). */
extern const int skv_dot_avx512_lanes;
void skv_gemm_q8_0_avx512(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_0_avx512(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q4_k_avx512(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);
void skv_gemm_q6_k_avx512(float *, size_t, const void *, size_t, const void *, size_t, size_t, size_t, size_t);

/* ---- T = 1 kernels of the packed layouts (quant/repack.h; dot_pack_x86.h): n_rows (a
 * multiple of 16) packed rows of row_bytes from the group at W, one activation row. ---- */
#define SKV_PK_DECL(name)                                                                                  \
    void skv_gemv_##name##_pk_avx2(float *y, const void *W, size_t row_bytes, const void *qa, size_t K,   \
                                   size_t n_rows);                                                        \
    void skv_gemv_##name##_pk_avx512(float *y, const void *W, size_t row_bytes, const void *qa, size_t K, \
                                     size_t n_rows)
SKV_PK_DECL(q4_0);
/* Rows r0 .. r0 + 7 of a packed q4_0 group of nb blocks in the file layout (repack.c). */
void skv_gemv_unpack8_q4_0_pk_avx2(const void *P, size_t nb, size_t r0, void *dst);
void skv_gemv_unpack8_q4_0_pk_avx512(const void *P, size_t nb, size_t r0, void *dst);
void skv_gemv_unpack8_iq4_xs_pk_avx2(const void *P, size_t nb, size_t r0, void *dst);
void skv_gemv_unpack8_iq4_xs_pk_avx512(const void *P, size_t nb, size_t r0, void *dst);
SKV_PK_DECL(q4_k);
SKV_PK_DECL(q5_k);
SKV_PK_DECL(q6_k);
SKV_PK_DECL(iq4_xs);
SKV_PK_DECL(q4_1); /* dot_pack32_x86.h */
SKV_PK_DECL(q5_0);
SKV_PK_DECL(q5_1);
SKV_PK_DECL(iq4_nl);
SKV_PK_DECL(q8_0);
SKV_PK_DECL(q2_k); /* dot_pack2_x86.h */
/* The AVX2 prefill of the packed 32-value types (dot_pack32_x86.h): the gemm's arguments,
 * W the packed rows (n_rows a multiple of 16). */
#define SKV_PKT_DECL(name)                                                                                          \
    void skv_gemm_##name##_pk_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qs, \
                                   size_t K, size_t T, size_t n_rows)
SKV_PKT_DECL(q4_1);
SKV_PKT_DECL(q5_0);
SKV_PKT_DECL(q5_1);
SKV_PKT_DECL(iq4_nl);
SKV_PKT_DECL(q4_0);
SKV_PKT_DECL(q8_0);
SKV_PKT_DECL(q4_k); /* dot_pack_x86.h */
SKV_PKT_DECL(q5_k);
SKV_PK_DECL(q3_k);

#endif
