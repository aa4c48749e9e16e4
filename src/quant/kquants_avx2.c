/* AVX2 twins of the block dequantizers q8_0, q4_0 (types_ref.c) and q4_k,
 * q5_k, q6_k (kquants.c).  Compiled with -mavx2 -mfma -mf16c and
 * -ffp-contract=off; listed in the type table with simd_needs =
 * SKV_CPU_AVX2_SET.
 *
 * Bit-identity with the references: the integer fields are unpacked in
 * integer lanes and converted exactly (|q| < 2^24); the scales are the
 * references' own scalar products (d * sc, dmin * m); each value is then the
 * same one multiplication (and, for the K-quants with a min, the same one
 * subtraction) in the same order, so every lane rounds as the scalar does.
 * tests/test_quant.c and tests/test_ops.c compare on random blocks. */
#include "quant/types_kernels.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "core/f16.h"
#include "quant/fbits.h"
#include "quant/qblocks.h"

static float half_at(const uint8_t p[2]) { return skv_f16_to_f32(skv_rd16le(p)); }

/* The low 8 unsigned bytes of v minus bias, as exact floats. */
static inline __m256 u8x8_minus(__m128i v, int bias)
{
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(v), _mm256_set1_epi32(bias)));
}

/* y[0..16) = scale * (bytes of v - bias). */
static inline void scaled16(float *y, __m128i v, int bias, __m256 scale)
{
    _mm256_storeu_ps(y, _mm256_mul_ps(scale, u8x8_minus(v, bias)));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(scale, u8x8_minus(_mm_srli_si128(v, 8), bias)));
}

/* y[0..16) = d1 * bytes of v - m1 (the K-quants with a min). */
static inline void affine16(float *y, __m128i v, __m256 d1, __m256 m1)
{
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8_minus(v, 0)), m1));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8_minus(_mm_srli_si128(v, 8), 0)), m1));
}

/* The nibbles of 16 bytes: low (shift 0) or high (shift 4). */
static inline __m128i nibbles16(__m128i v, int shift)
{
    return _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(15));
}

static inline __m128i load16(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }

/* ---- q8_0 / q4_0: whole blocks here, a short last block by the reference ---- */

void skv_q8_0_to_float_avx2(const void *src, float *dst, size_t n)
{
    const uint8_t *in = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32, in += 34) {
        __m256 s = _mm256_set1_ps(half_at(in));
        for (int j = 0; j < 32; j += 8) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(const void *)(in + 2 + j));
            _mm256_storeu_ps(dst + i + (size_t)j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s));
        }
    }
    if (i < n) skv_q8_0_to_float_ref(in, dst + i, n - i);
}

void skv_q4_0_to_float_avx2(const void *src, float *dst, size_t n)
{
    const uint8_t *in = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32, in += 18) {
        __m256 s = _mm256_set1_ps(half_at(in));
        __m128i q = load16(in + 2);
        scaled16(dst + i, nibbles16(q, 0), 8, s);
        scaled16(dst + i + 16, nibbles16(q, 4), 8, s);
    }
    if (i < n) skv_q4_0_to_float_ref(in, dst + i, n - i);
}

/* ---- q4_k / q5_k: runs of 32 with a 6-bit scale and min ---- */

/* Run s of a q4_k (qh NULL) or q5_k block, as k4_run in kquants.c. */
static void k4_run_avx2(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, float d, float dmin,
                        unsigned s, float *y)
{
    uint8_t sc, mn;
    skv_k4_scale_min(scales, s, &sc, &mn);
    __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)mn);
    const uint8_t *q = qs + 32 * (s / 2);
    for (unsigned h = 0; h < 32; h += 16) {
        __m128i v = nibbles16(load16(q + h), (int)(4 * (s % 2)));
        if (qh) {
            __m128i bit = _mm_and_si128(_mm_srl_epi16(load16(qh + h), _mm_cvtsi32_si128((int)s)), _mm_set1_epi8(1));
            v = _mm_or_si128(v, _mm_slli_epi16(bit, 4));
        }
        affine16(y + h, v, d1, m1);
    }
}

static void q4_k_block_avx2(const uint8_t *p, float *y)
{
    const skv_block_q4_k *b = (const skv_block_q4_k *)(const void *)p;
    float d = half_at(b->d), dmin = half_at(b->dmin);
    for (unsigned s = 0; s < 8; s++) k4_run_avx2(b->scales, b->qs, NULL, d, dmin, s, y + 32 * s);
}

static void q5_k_block_avx2(const uint8_t *p, float *y)
{
    const skv_block_q5_k *b = (const skv_block_q5_k *)(const void *)p;
    float d = half_at(b->d), dmin = half_at(b->dmin);
    for (unsigned s = 0; s < 8; s++) k4_run_avx2(b->scales, b->qs, b->qh, d, dmin, s, y + 32 * s);
}

/* ---- q6_k: runs of 16 with an int8 scale (bit positions: kquants.c) ---- */

static void q6_k_block_avx2(const uint8_t *p, float *y)
{
    const skv_block_q6_k *b = (const skv_block_q6_k *)(const void *)p;
    float d = half_at(b->d);
    for (unsigned s = 0; s < 16; s++, y += 16) {
        unsigned g = s / 8, k = (s % 8) / 2, at = 16 * (s % 2);
        __m128i lo = nibbles16(load16(b->ql + 64 * g + 32 * (k % 2) + at), k < 2 ? 0 : 4);
        __m128i hi = _mm_and_si128(_mm_srl_epi16(load16(b->qh + 32 * g + at), _mm_cvtsi32_si128((int)(2 * k))),
                                   _mm_set1_epi8(3));
        scaled16(y, _mm_or_si128(lo, _mm_slli_epi16(hi, 4)), 32, _mm256_set1_ps(d * (float)(int8_t)b->scales[s]));
    }
}

SKV_ROW_TO_FLOAT(skv_q4_k_to_float_avx2, SKV_QK_K, skv_block_q4_k, q4_k_block_avx2)
SKV_ROW_TO_FLOAT(skv_q5_k_to_float_avx2, SKV_QK_K, skv_block_q5_k, q5_k_block_avx2)
SKV_ROW_TO_FLOAT(skv_q6_k_to_float_avx2, SKV_QK_K, skv_block_q6_k, q6_k_block_avx2)

#else
/* Not an x86-64 AVX2 build: the table lists no SIMD twins; keep the unit non-empty. */
typedef int skv_kquants_avx2_unused;
#endif
