/* AVX2 reductions shared by the AVX2 kernel files (quant/types_avx2.c,
 * engine/ops_avx2.c): the canonical 8 -> 1 sum of engine/ops.h, one lane at a
 * time or eight at once.  Include only from files compiled with -mavx2. */
#ifndef SKV_SIMD_AVX2_H
#define SKV_SIMD_AVX2_H

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

/* Canonical 8 -> 1 reduction: h = lo + hi; g = h[0,1] + h[2,3]; s = g[0] + g[1]. */
static inline float skv_hsum8_avx2(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 g = _mm_add_ps(h, _mm_movehl_ps(h, h));
    __m128 s = _mm_add_ss(g, _mm_shuffle_ps(g, g, 1));
    return _mm_cvtss_f32(s);
}

/* Eight canonical 8 -> 1 reductions at once: lane r of the result is the reduction of
 * a[r], pairing exactly the operands skv_hsum8_avx2 pairs (addition commutes bit-exactly). */
static inline __m256 skv_reduce8_avx2(const __m256 a[8])
{
    __m256 h04 = _mm256_add_ps(_mm256_permute2f128_ps(a[0], a[4], 0x20), _mm256_permute2f128_ps(a[0], a[4], 0x31));
    __m256 h15 = _mm256_add_ps(_mm256_permute2f128_ps(a[1], a[5], 0x20), _mm256_permute2f128_ps(a[1], a[5], 0x31));
    __m256 h26 = _mm256_add_ps(_mm256_permute2f128_ps(a[2], a[6], 0x20), _mm256_permute2f128_ps(a[2], a[6], 0x31));
    __m256 h37 = _mm256_add_ps(_mm256_permute2f128_ps(a[3], a[7], 0x20), _mm256_permute2f128_ps(a[3], a[7], 0x31));
    /* h_r = lo(a_r) + hi(a_r); hXY = [h_X | h_Y] */
    __m256 g0145 = _mm256_add_ps(_mm256_shuffle_ps(h04, h15, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(h04, h15, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 g2367 = _mm256_add_ps(_mm256_shuffle_ps(h26, h37, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(h26, h37, _MM_SHUFFLE(3, 2, 3, 2)));
    /* g_r = (h_r[0] + h_r[2], h_r[1] + h_r[3]) */
    return _mm256_add_ps(_mm256_shuffle_ps(g0145, g2367, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(g0145, g2367, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

#endif
