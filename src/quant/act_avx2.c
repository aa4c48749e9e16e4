/* AVX2 twins of the activation quantizers' inner loops (dot.c): the same bits as
 * the scalar code, compiled with -mavx2 -mfma -mf16c and run only where
 * skv_dot_level() allows SKV_DOT_AVX2.  dot.c keeps the per-block scalar steps
 * (the scale, its binary16 rounding, the group sums); these do the per-value work. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* max |x[j]| over n (a multiple of 8) values as the bits of |x|: an unsigned integer
 * max, exact in any order (NaN above inf), as dot.c's amax_bits. */
uint32_t skv_amax_bits_avx2(const float *x, size_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    for (size_t j = 0; j < n; j += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + j)), abs));
    __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(h);
}

/* roundf (half away from zero) of 8 values: the truncation plus one step away from
 * zero where the dropped fraction (exact) is at least one half; NaN and inf stay. */
static inline __m256 roundf8(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step));
}

/* Four vectors of 8 int32 (each in -128..127) as 32 int8 in order. */
static inline void store_s8x32(int8_t *q, __m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d); /* lanes interleave by 128 bits */
    __m256i v = _mm256_packs_epi16(ab, cd);
    v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(void *)q, v);
}

/* q[j] = roundf(x[j] * id) clamped to [-127, 127] (minps / maxps: NaN -> 127), 32 values. */
void skv_act32_round_avx2(const float *x, float id, int8_t *q)
{
    __m256i r[4];
    for (int k = 0; k < 4; k++) {
        __m256 v = roundf8(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), _mm256_set1_ps(id)));
        v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f));
        r[k] = _mm256_cvttps_epi32(v);
    }
    store_s8x32(q, r[0], r[1], r[2], r[3]);
}

/* q[j] = quantize_row_q8_K's nearest_int(iscale * x[j]) clamped to [-128, 127], 256 values. */
void skv_act256_round_avx2(const float *x, float iscale, int8_t *q)
{
    for (int c = 0; c < 8; c++) {
        __m256i r[4];
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(iscale), _mm256_loadu_ps(x + 32 * c + 8 * k)),
                                     _mm256_set1_ps(12582912.0f));
            __m256i i = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x007fffff)),
                                         _mm256_set1_epi32(0x00400000));
            r[k] = _mm256_max_epi32(_mm256_min_epi32(i, _mm256_set1_epi32(127)), _mm256_set1_epi32(-128));
        }
        store_s8x32(q + 32 * c, r[0], r[1], r[2], r[3]);
    }
}
#endif
