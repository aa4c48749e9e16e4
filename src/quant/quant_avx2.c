/* AVX2 twins of the quantizer kernels in quant_ref.c.  Compiled with
 * -mavx2 -mfma -mf16c (and -ffp-contract=off, so no multiply-add is fused);
 * only called after skv_quant_simd_available() said yes (the CPU has all
 * three).  Each function performs the same IEEE operations on the same
 * operands as its *_ref twin, element by element, so the results are
 * bit-identical (tests compare). */
#include "quant/quant.h"
#include "core/fpguard.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX2__)

#include <immintrin.h>
#include <string.h>

float skv_quant_dot_avx2(const float *a, const float *b, size_t n)
{
    __m256 acc = _mm256_setzero_ps();
    float l[8];
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    _mm256_storeu_ps(l, acc);
    for (; i < n; i++) l[i & 7] = l[i & 7] + a[i] * b[i]; /* same lanes as the reference */
    return skv_quant_hsum8(l);
}

/* In-register stages h = 1, 2, 4: partner = v with lanes swapped by h;
 * lanes whose bit h is clear take v + partner (= a + b), the others
 * partner - v (= a - b with a the lower lane), exactly as the reference. */
static inline __m256 fwht8(__m256 v)
{
    __m256 p = _mm256_permute_ps(v, 0xB1); /* swap neighbours */
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
    p = _mm256_permute_ps(v, 0x4E); /* swap pairs */
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
    p = _mm256_permute2f128_ps(v, v, 0x01); /* swap halves */
    return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
}

void skv_quant_fwht_avx2(float *v, size_t m)
{
    for (size_t i = 0; i < m; i += 8) _mm256_storeu_ps(v + i, fwht8(_mm256_loadu_ps(v + i)));
    for (size_t h = 8; h < m; h <<= 1)
        for (size_t i = 0; i < m; i += h << 1)
            for (size_t j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
                _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
            }
}

void skv_quant_scale_avx2(const float *x, float k, float *y, size_t n)
{
    __m256 vk = _mm256_set1_ps(k);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vk));
    for (; i < n; i++) y[i] = x[i] * k;
}

void skv_quant_xorsign_avx2(float *v, const uint32_t *mask, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 mk = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(const void *)(mask + i)));
        _mm256_storeu_ps(v + i, _mm256_xor_ps(_mm256_loadu_ps(v + i), mk));
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, v + i, sizeof u);
        u ^= mask[i];
        memcpy(v + i, &u, sizeof u);
    }
}

void skv_quant_index_avx2(const float *y, const float *bound, int nb, uint8_t *idx, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(y + i);
        __m256i cnt = _mm256_setzero_si256();
        __m128i lo, hi, p;
        for (int k = 0; k < nb; k++) /* a true compare is -1: subtract it */
            cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_set1_ps(bound[k]), _CMP_GT_OQ)));
        lo = _mm256_castsi256_si128(cnt);
        hi = _mm256_extracti128_si256(cnt, 1);
        p = _mm_packs_epi32(lo, hi);
        p = _mm_packus_epi16(p, p);
        _mm_storel_epi64((__m128i *)(void *)(idx + i), p);
    }
    for (; i < n; i++) {
        int c = 0;
        for (int k = 0; k < nb; k++) c += y[i] > bound[k];
        idx[i] = (uint8_t)c;
    }
}

void skv_quant_lookup_avx2(const uint8_t *idx, const float *cent, int levels, float *v, size_t n)
{
    float t0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    __m256 lo, hi;
    __m256i seven = _mm256_set1_epi32(7);
    size_t i = 0;
    memcpy(t0, cent, (size_t)(levels < 8 ? levels : 8) * sizeof *t0);
    if (levels > 8) memcpy(t1, cent + 8, (size_t)(levels - 8) * sizeof *t1);
    lo = _mm256_loadu_ps(t0);
    hi = _mm256_loadu_ps(t1);
    for (; i + 8 <= n; i += 8) {
        __m128i b8 = _mm_loadl_epi64((const __m128i *)(const void *)(idx + i));
        __m256i k = _mm256_cvtepu8_epi32(b8);
        __m256 r = _mm256_permutevar8x32_ps(lo, k);
        if (levels > 8) {
            __m256 sel = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, seven));
            r = _mm256_blendv_ps(r, _mm256_permutevar8x32_ps(hi, k), sel);
        }
        _mm256_storeu_ps(v + i, r);
    }
    for (; i < n; i++) v[i] = cent[idx[i]];
}

void skv_quant_qjl_signs_avx2(const float *S, const float *r, size_t d, uint8_t *z)
{
    size_t i = 0;
    for (; i + 4 <= d; i += 4) { /* four rows at once, each in the reference's lane order */
        const float *s0 = S + i * d, *s1 = s0 + d, *s2 = s1 + d, *s3 = s2 + d;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        float l[4][8];
        size_t j = 0;
        for (; j + 8 <= d; j += 8) {
            __m256 rv = _mm256_loadu_ps(r + j);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(s0 + j), rv));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(s1 + j), rv));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(_mm256_loadu_ps(s2 + j), rv));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(_mm256_loadu_ps(s3 + j), rv));
        }
        _mm256_storeu_ps(l[0], a0);
        _mm256_storeu_ps(l[1], a1);
        _mm256_storeu_ps(l[2], a2);
        _mm256_storeu_ps(l[3], a3);
        for (int k = 0; k < 4; k++) {
            const float *row = S + (i + (size_t)k) * d;
            for (size_t t = j; t < d; t++) l[k][t & 7] = l[k][t & 7] + row[t] * r[t];
            z[i + (size_t)k] = skv_quant_hsum8(l[k]) >= 0.0f;
        }
    }
    for (; i < d; i++) z[i] = skv_quant_dot_avx2(S + i * d, r, d) >= 0.0f;
}

/* a - b is by definition a + (-b) in IEEE arithmetic, so flipping the sign
 * bit of the row and adding gives the reference's bits without a branch. */
void skv_quant_qjl_accum_avx2(const float *S, const uint8_t *z, size_t d, float *acc)
{
    size_t j = 0;
    for (; j + 32 <= d; j += 32) { /* a column strip in registers, rows in order */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i < d; i++) {
            const float *row = S + i * d + j;
            __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(z[i] ? 0 : (int)0x80000000u));
            a0 = _mm256_add_ps(a0, _mm256_xor_ps(_mm256_loadu_ps(row), m));
            a1 = _mm256_add_ps(a1, _mm256_xor_ps(_mm256_loadu_ps(row + 8), m));
            a2 = _mm256_add_ps(a2, _mm256_xor_ps(_mm256_loadu_ps(row + 16), m));
            a3 = _mm256_add_ps(a3, _mm256_xor_ps(_mm256_loadu_ps(row + 24), m));
        }
        _mm256_storeu_ps(acc + j, a0);
        _mm256_storeu_ps(acc + j + 8, a1);
        _mm256_storeu_ps(acc + j + 16, a2);
        _mm256_storeu_ps(acc + j + 24, a3);
    }
    for (; j + 8 <= d; j += 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (size_t i = 0; i < d; i++) {
            __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(z[i] ? 0 : (int)0x80000000u));
            a0 = _mm256_add_ps(a0, _mm256_xor_ps(_mm256_loadu_ps(S + i * d + j), m));
        }
        _mm256_storeu_ps(acc + j, a0);
    }
    for (; j < d; j++) {
        float a = 0.0f;
        for (size_t i = 0; i < d; i++) a = z[i] ? a + S[i * d + j] : a - S[i * d + j];
        acc[j] = a;
    }
}

#else
/* Not an AVX2 build: quant.c never calls these; keep the unit non-empty. */
typedef int skv_quant_avx2_unused;
#endif
