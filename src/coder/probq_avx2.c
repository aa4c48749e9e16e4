/* probq_avx2.c - AVX2 twins of probq's streaming passes (probq_kern.h).
 * Compiled with -mavx2 -mfma -mf16c; only AVX2 integer and plain binary32
 * subtract/multiply are used (no FMA: the log2 step is (l - max) * K, two
 * roundings, exactly as the scalar code). Lane results equal the scalar
 * ones bit for bit; sums are integer. */
#include "coder/probq_kern.h"
#include "core/fpguard.h"

#include "coder/probq.h"
#include "core/cpu.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#include <string.h>

/* Order-preserving keys of 8 floats (-0 as +0), as probq_key. */
static inline __m256i key8(__m256i u)
{
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    u = _mm256_andnot_si256(_mm256_cmpeq_epi32(u, sign), u);
    return _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31), sign));
}

static uint32_t max_key_avx2(const float *logits, size_t n)
{
    const __m256i expm = _mm256_set1_epi32(0x7F800000);
    __m256i kmax = _mm256_setzero_si256(), bad = _mm256_setzero_si256();
    uint32_t lanes[8], best = 0, badlane = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(logits + i));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), expm));
        kmax = _mm256_max_epu32(kmax, key8(u));
    }
    _mm256_storeu_si256((__m256i *)(void *)lanes, kmax);
    for (int j = 0; j < 8; j++) best = lanes[j] > best ? lanes[j] : best;
    badlane = (uint32_t)_mm256_movemask_epi8(bad);
    for (; i < n; i++) { /* tail: one lane at a time */
        uint32_t u;
        __m256i k;
        memcpy(&u, &logits[i], sizeof u);
        badlane |= (u & 0x7F800000u) == 0x7F800000u;
        k = key8(_mm256_set1_epi32((int)u));
        u = (uint32_t)_mm256_extract_epi32(k, 0);
        best = u > best ? u : best;
    }
    return badlane ? 0 : best;
}

/* 8 lanes of exp2_fix(e), e <= 2^21 (probq.c's probq_exp2). */
static inline __m256i exp2_8(__m256i e)
{
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF), one = _mm256_set1_epi64x(1);
    const __m256i half = _mm256_set1_epi64x((int64_t)1 << 30);
    __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)SKV_PROBQ_E_MAX), e);
    __m256i f = _mm256_and_si256(e, _mm256_set1_epi32(0xFFFF)), ip = _mm256_srli_epi32(e, 16);
    __m256i hi = _mm256_i32gather_epi32((const int *)(const void *)skv_probq_exp2_hi, _mm256_srli_epi32(f, 8), 4);
    __m256i lo = _mm256_i32gather_epi32((const int *)(const void *)skv_probq_exp2_lo,
                                        _mm256_and_si256(f, _mm256_set1_epi32(0xFF)), 4);
    __m256i ve = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epu32(hi, lo), half), 31);
    __m256i vo = _mm256_srli_epi64(
        _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(hi, 32), _mm256_srli_epi64(lo, 32)), half), 31);
    __m256i ie = _mm256_and_si256(ip, lo32), io = _mm256_srli_epi64(ip, 32);
    ve = _mm256_srlv_epi64(_mm256_add_epi64(ve, _mm256_srli_epi64(_mm256_sllv_epi64(one, ie), 1)), ie);
    vo = _mm256_srlv_epi64(_mm256_add_epi64(vo, _mm256_srli_epi64(_mm256_sllv_epi64(one, io), 1)), io);
    return _mm256_and_si256(_mm256_or_si256(_mm256_and_si256(ve, lo32), _mm256_slli_epi64(vo, 32)), valid);
}

/* 8 lanes of log2_fix(l, max) (probq.c's probq_log2). */
static inline __m256i log2_8(__m256 l, __m256 maxv)
{
    const __m256 k = _mm256_set1_ps(0x1.715476p+16f);
    __m256 p = _mm256_mul_ps(_mm256_sub_ps(l, maxv), k);
    __m256 ok = _mm256_cmp_ps(p, _mm256_set1_ps(-2097152.0f), _CMP_GT_OQ);
    __m256i e = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_setzero_ps(), p));
    return _mm256_blendv_epi8(_mm256_set1_epi32((int)SKV_PROBQ_E_MAX), e, _mm256_castps_si256(ok));
}

static inline __m256i widen_add(__m256i acc, __m256i v32)
{
    acc = _mm256_add_epi64(acc, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(v32)));
    return _mm256_add_epi64(acc, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(v32, 1)));
}

static uint64_t hsum64(__m256i acc)
{
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)(void *)v, acc);
    return v[0] + v[1] + v[2] + v[3];
}

static uint64_t weights_avx2(const float *logits, size_t n, float max, uint32_t *w)
{
    __m256 maxv = _mm256_set1_ps(max);
    __m256i acc = _mm256_setzero_si256();
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = exp2_8(log2_8(_mm256_loadu_ps(logits + i), maxv));
        _mm256_storeu_si256((__m256i *)(void *)(w + i), v);
        acc = widen_add(acc, v);
    }
    for (; i < n; i++) {
        __m256i v = exp2_8(log2_8(_mm256_set1_ps(logits[i]), maxv));
        w[i] = (uint32_t)_mm256_extract_epi32(v, 0);
        s += w[i];
    }
    return s + hsum64(acc);
}

/* floor(w * m / 2^35) for 8 lanes, added as 64-bit lanes. */
static inline __m256i scaled_add(__m256i acc, __m256i w, __m256i m)
{
    acc = _mm256_add_epi64(acc, _mm256_srli_epi64(_mm256_mul_epu32(w, m), 35));
    return _mm256_add_epi64(acc, _mm256_srli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(w, 32), m), 35));
}

static uint64_t scaled_sum_avx2(const uint32_t *w, size_t n, uint64_t m)
{
    __m256i acc = _mm256_setzero_si256(), mv = _mm256_set1_epi64x((int64_t)m);
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) acc = scaled_add(acc, _mm256_loadu_si256((const __m256i *)(const void *)(w + i)), mv);
    for (; i < n; i++) s += ((uint64_t)w[i] * m) >> 35;
    return s + hsum64(acc);
}

/* probq.c's bucket for 8 lanes: w < 16 -> w, else 8 L - 16 + the 3 bits under
 * the top one, L = floor(log2 w). L comes from the float exponent of w >> 1
 * (< 2^31, so a signed conversion is exact in range), corrected down by one
 * when the conversion rounded up to the next power of two. */
static inline __m256i bucket8(__m256i w)
{
    __m256i h = _mm256_srli_epi32(w, 1);
    __m256i le = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(h)), 23),
                                  _mm256_set1_epi32(127));
    __m256i over = _mm256_cmpeq_epi32(_mm256_srlv_epi32(h, le), _mm256_setzero_si256());
    __m256i l = _mm256_add_epi32(_mm256_add_epi32(le, over), _mm256_set1_epi32(1)); /* over = -1 */
    __m256i sub = _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_sub_epi32(l, _mm256_set1_epi32(3))),
                                   _mm256_set1_epi32(7));
    __m256i b = _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(l, 3), _mm256_set1_epi32(16)), sub);
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(16), w); /* w <= 2^31: 2^31 reads negative */
    small = _mm256_andnot_si256(_mm256_srai_epi32(w, 31), small);
    return _mm256_blendv_epi8(b, w, small);
}

static uint64_t scaled_sum_hist_avx2(const uint32_t *w, size_t n, uint64_t m, uint32_t (*hist)[SKV_PROBQ_NBUCKET])
{
    __m256i acc = _mm256_setzero_si256(), mv = _mm256_set1_epi64x((int64_t)m);
    uint32_t b[8];
    uint64_t s = 0;
    size_t i = 0;
    memset(hist, 0, 4 * sizeof *hist);
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(w + i));
        acc = scaled_add(acc, v, mv);
        _mm256_storeu_si256((__m256i *)(void *)b, bucket8(v));
        for (int j = 0; j < 8; j++) hist[j & 3][b[j]]++;
    }
    for (; i < n; i++) {
        s += ((uint64_t)w[i] * m) >> 35;
        _mm256_storeu_si256((__m256i *)(void *)b, bucket8(_mm256_set1_epi32((int)w[i])));
        hist[0][b[0]]++;
    }
    for (int k = 0; k < SKV_PROBQ_NBUCKET; k++) hist[0][k] += hist[1][k] + hist[2][k] + hist[3][k];
    return s + hsum64(acc);
}

static const skv_probq_kern probq_avx2 = {max_key_avx2, weights_avx2, scaled_sum_avx2, scaled_sum_hist_avx2};

const skv_probq_kern *skv_probq_kern_avx2(void)
{
    return skv_cpu_has(SKV_CPU_AVX2_SET) ? &probq_avx2 : NULL;
}

#else
const skv_probq_kern *skv_probq_kern_avx2(void) { return NULL; }
#endif
