/* AVX-512 twin of the decode attention of a GQA pair (ops_avx2.c: attn_avx2 over an f32
 * KV cache, attn_f16_avx2 over an f16 one, call it where the CPU has
 * SKV_CPU_AVX512_SET): compiled with the AVX-512 flags (Makefile). Same bits as the
 * reference (ops.h): each score is still one 8-lane chain over d (a zmm holds the chains
 * of two keys), reduced by the canonical tree, times scale; each output element one fma
 * chain over j ascending (a zmm holds 16 elements of one row). Halves are converted in
 * registers (exact). */
#include "engine/ops.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "quant/simd_avx2.h"

/* Keys a and b's halves [d, d + 8) as one zmm: a in the low 8 lanes, b in the high. */
static inline __m512 cvt_pair(const uint16_t *a, const uint16_t *b)
{
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
                                        _mm_loadu_si128((const __m128i *)(const void *)b), 1);
    return _mm512_cvtph_ps(h);
}

static inline __m512 bcast8(const float *p)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

/* The 8 scores of one row from its 4 key-pair accumulators, times scale. */
static inline __m256 reduce_keys(const __m512 *acc, __m256 sv)
{
    __m256 h[8];
    for (int p = 0; p < 4; p++) {
        h[2 * p] = _mm512_castps512_ps256(acc[p]);
        h[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1));
    }
    return _mm256_mul_ps(skv_reduce8_avx2(h), sv);
}

/* Keys a and b's f32 [d, d + 8) as one zmm, as cvt_pair does for halves. */
static inline __m512 load_pair(const float *a, const float *b)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

static inline __m512 load16_h(const uint16_t *v) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)v)); }

/* The pair kernels over K / V rows of type T (uint16_t halves for an f16 cache, float for
 * an f32 one): PAIR loads two keys' [d, d + 8) as one zmm, LOAD16 16 elements of a row.
 * scores: s0[j], s1[j] for j < n & ~7 (8 keys x 2 rows per tile), returns how many were
 * done; wsum: o0 = sum_j w0[j] v_j, o1 likewise (fma, j ascending from zero), hd a
 * multiple of 64. The prefetches run 16 rows ahead, one per cache line. */
#define PAIR512(SUF, T, PAIR, LOAD16)                                                                                  \
    size_t skv_scores_pair##SUF##_avx512(float *s0, float *s1, const float *q0, const float *q1, const T *K,           \
                                         size_t n, size_t hd, float scale)                                             \
    {                                                                                                                  \
        const __m256 sv = _mm256_set1_ps(scale);                                                                       \
        size_t j = 0;                                                                                                  \
        for (; j + 8 <= n; j += 8) {                                                                                   \
            __m512 acc[8];                                                                                             \
            const T *k = K + j * hd;                                                                                   \
            for (size_t p = 0; p < 8 * hd; p += 64 / sizeof(T))                                                        \
                _mm_prefetch((const char *)(k + 16 * hd + p), _MM_HINT_T1);                                            \
            _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();                          \
            for (size_t d = 0; d < hd; d += 8) {                                                                       \
                __m512 a = bcast8(q0 + d), b = bcast8(q1 + d);                                                         \
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {                                                  \
                    __m512 kv = PAIR(k + (size_t)(2 * p) * hd + d, k + (size_t)(2 * p + 1) * hd + d);                  \
                    acc[p] = _mm512_fmadd_ps(a, kv, acc[p]);                                                           \
                    acc[4 + p] = _mm512_fmadd_ps(b, kv, acc[4 + p]);                                                   \
                }                                                                                                      \
            }                                                                                                          \
            _mm256_storeu_ps(s0 + j, reduce_keys(acc, sv));                                                            \
            _mm256_storeu_ps(s1 + j, reduce_keys(acc + 4, sv));                                                        \
        }                                                                                                              \
        return j;                                                                                                      \
    }                                                                                                                  \
    void skv_wsum_pair##SUF##_avx512(float *o0, float *o1, const float *w0, const float *w1, size_t n, const T *V,     \
                                     size_t hd)                                                                        \
    {                                                                                                                  \
        for (size_t d = 0; d < hd; d += 64) {                                                                          \
            __m512 acc[8];                                                                                             \
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) acc[c] = _mm512_setzero_ps();                          \
            for (size_t j = 0; j < n; j++) {                                                                           \
                __m512 a = _mm512_set1_ps(w0[j]), b = _mm512_set1_ps(w1[j]);                                           \
                const T *v = V + j * hd + d;                                                                           \
                for (size_t p = 0; p < 64; p += 64 / sizeof(T)) _mm_prefetch((const char *)(v + 16 * hd + p), _MM_HINT_T1); \
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                                  \
                    __m512 vv = LOAD16(v + 16 * c);                                                                    \
                    acc[c] = _mm512_fmadd_ps(a, vv, acc[c]);                                                           \
                    acc[4 + c] = _mm512_fmadd_ps(b, vv, acc[4 + c]);                                                   \
                }                                                                                                      \
            }                                                                                                          \
            for (int c = 0; c < 4; c++) {                                                                              \
                _mm512_storeu_ps(o0 + d + 16 * c, acc[c]);                                                             \
                _mm512_storeu_ps(o1 + d + 16 * c, acc[4 + c]);                                                         \
            }                                                                                                          \
        }                                                                                                              \
    }

PAIR512(_h, uint16_t, cvt_pair, load16_h)
PAIR512(, float, load_pair, _mm512_loadu_ps)

int skv_ops_avx512_built(void) { return 1; }

#elif defined(__x86_64__)
/* A compiler without the AVX-512 flags: never called (skv_ops_avx512_built says so). */
int skv_ops_avx512_built(void) { return 0; }
size_t skv_scores_pair_h_avx512(float *s0, float *s1, const float *q0, const float *q1, const uint16_t *K, size_t n,
                                size_t hd, float scale)
{
    (void)s0, (void)s1, (void)q0, (void)q1, (void)K, (void)n, (void)hd, (void)scale;
    return 0;
}
void skv_wsum_pair_h_avx512(float *o0, float *o1, const float *w0, const float *w1, size_t n, const uint16_t *V,
                            size_t hd)
{
    (void)o0, (void)o1, (void)w0, (void)w1, (void)n, (void)V, (void)hd;
}
size_t skv_scores_pair_avx512(float *s0, float *s1, const float *q0, const float *q1, const float *K, size_t n,
                              size_t hd, float scale)
{
    (void)s0, (void)s1, (void)q0, (void)q1, (void)K, (void)n, (void)hd, (void)scale;
    return 0;
}
void skv_wsum_pair_avx512(float *o0, float *o1, const float *w0, const float *w1, size_t n, const float *V, size_t hd)
{
    (void)o0, (void)o1, (void)w0, (void)w1, (void)n, (void)V, (void)hd;
}
#else
typedef int skv_ops_avx512_unused;
#endif
