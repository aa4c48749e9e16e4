/* AVX2+FMA kernels: bit-identical to the scalar reference in ops.c (same
 * per-element operation sequence; see ops.h). Compiled with -mavx2 -mfma. */
#include "engine/ops.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "quant/dot.h"
#include "quant/simd_avx2.h"
#include "quant/types.h"
#include "quant/types_kernels.h"
#include "core/f16.h"


static float dot_avx2(const float *a, const float *b, size_t n)
{
    __m256 acc = _mm256_setzero_ps();
    size_t n8 = n & ~(size_t)7, j;
    for (j = 0; j < n8; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
    float s = skv_hsum8_avx2(acc);
    for (; j < n; j++) s = fmaf(a[j], b[j], s);
    return s;
}

static float sum_avx2(const float *a, size_t n)
{
    __m256 acc = _mm256_setzero_ps();
    size_t n8 = n & ~(size_t)7, j;
    for (j = 0; j < n8; j += 8) acc = _mm256_add_ps(_mm256_loadu_ps(a + j), acc);
    float s = skv_hsum8_avx2(acc);
    for (; j < n; j++) s = a[j] + s;
    return s;
}

/* Eight dots sharing K: out lane r = dot(a[r], b[r], K) for pointer pairs, tails included. */
static inline __attribute__((always_inline)) void dot8(float out[8], const float *const a[8], const float *const b[8],
                                                       size_t K)
{
    __m256 acc[8];
    size_t n8 = K & ~(size_t)7, j;
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (j = 0; j < n8; j += 8)
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r] + j), _mm256_loadu_ps(b[r] + j), acc[r]);
    _mm256_storeu_ps(out, skv_reduce8_avx2(acc));
    if (n8 != K)
        for (int r = 0; r < 8; r++)
            for (j = n8; j < K; j++) out[r] = fmaf(a[r][j], b[r][j], out[r]);
}

/* Tile: 4 weight rows x 2 tokens (8 outputs, one reduce8). */
static inline void tile_4x2(float *y, size_t ldy, const float *W, size_t K, const float *x, size_t ldx)
{
    const float *a[8] = {W, W + K, W + 2 * K, W + 3 * K, W, W + K, W + 2 * K, W + 3 * K};
    const float *b[8] = {x, x, x, x, x + ldx, x + ldx, x + ldx, x + ldx};
    float o[8];
    dot8(o, a, b, K);
    memcpy(y, o, 4 * sizeof(float));
    memcpy(y + ldy, o + 4, 4 * sizeof(float));
}

/* Tile: 8 weight rows x 1 token (matrix-vector). */
static inline void tile_8x1(float *y, const float *W, size_t K, const float *x)
{
    const float *a[8] = {W, W + K, W + 2 * K, W + 3 * K, W + 4 * K, W + 5 * K, W + 6 * K, W + 7 * K};
    const float *b[8] = {x, x, x, x, x, x, x, x};
    dot8(y, a, b, K);
}

/* Tile: 3 weight rows x 4 tokens, twelve 8-lane accumulators (each output's own chain,
 * reduced by the same tree as dot_avx2); 7 loads per 12 fma instead of 6 per 8. */
static void tile_3x4(float *y, size_t ldy, const float *W, size_t K, const float *x, size_t ldx)
{
    __m256 acc[16];
    float o[16];
    size_t n8 = K & ~(size_t)7, j;
    for (int i = 0; i < 16; i++) acc[i] = _mm256_setzero_ps();
    for (j = 0; j < n8; j += 8) {
        __m256 w0 = _mm256_loadu_ps(W + j), w1 = _mm256_loadu_ps(W + K + j), w2 = _mm256_loadu_ps(W + 2 * K + j);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + j);
            acc[3 * t] = _mm256_fmadd_ps(w0, xv, acc[3 * t]);
            acc[3 * t + 1] = _mm256_fmadd_ps(w1, xv, acc[3 * t + 1]);
            acc[3 * t + 2] = _mm256_fmadd_ps(w2, xv, acc[3 * t + 2]);
        }
    }
    _mm256_storeu_ps(o, skv_reduce8_avx2(acc));
    _mm256_storeu_ps(o + 8, skv_reduce8_avx2(acc + 8));
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 3; r++) {
            float s = o[3 * t + r];
            for (size_t k = n8; k < K; k++) s = fmaf(W[(size_t)r * K + k], x[(size_t)t * ldx + k], s);
            y[(size_t)t * ldy + r] = s;
        }
}

static void matmul_avx2(float *y, size_t ldy, const float *W, size_t K, const float *x, size_t ldx,
                        size_t T, size_t n_rows)
{
    size_t t = 0;
    for (; t + 4 <= T; t += 4) {
        size_t r = 0;
        for (; r + 3 <= n_rows; r += 3) tile_3x4(y + t * ldy + r, ldy, W + r * K, K, x + t * ldx, ldx);
        for (; r < n_rows; r++)
            for (size_t u = t; u < t + 4; u++) y[u * ldy + r] = dot_avx2(W + r * K, x + u * ldx, K);
    }
    for (; t + 2 <= T; t += 2) {
        size_t r = 0;
        for (; r + 4 <= n_rows; r += 4) tile_4x2(y + t * ldy + r, ldy, W + r * K, K, x + t * ldx, ldx);
        for (; r < n_rows; r++) {
            y[t * ldy + r] = dot_avx2(W + r * K, x + t * ldx, K);
            y[(t + 1) * ldy + r] = dot_avx2(W + r * K, x + (t + 1) * ldx, K);
        }
    }
    for (; t < T; t++) {
        size_t r = 0;
        for (; r + 8 <= n_rows; r += 8) tile_8x1(y + t * ldy + r, W + r * K, K, x + t * ldx);
        for (; r < n_rows; r++) y[t * ldy + r] = dot_avx2(W + r * K, x + t * ldx, K);
    }
}

/* The f16 rows' dot kernel of the type table (quant/types_avx2.c). */
static void matvec_f16_avx2(float *y, const void *W, size_t row_bytes, size_t K, const float *x, size_t n_rows)
{
    skv_type_matvec(skv_type_traits_of(SKV_GGML_F16), 1)(y, W, row_bytes, K, x, n_rows);
}

static void matmul_f16_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                            size_t ldx, size_t T, size_t n_rows, float *scratch)
{
    skv_type_matmul(skv_type_traits_of(SKV_GGML_F16), 1)(y, ldy, W, row_bytes, K, x, ldx, T, n_rows, scratch);
}

static void axpy_avx2(float *y, float a, const float *x, size_t n)
{
    __m256 av = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

/* Vector twin of skv_exp_ref: the same operations lane by lane. */
static inline __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 rnd = _mm256_set1_ps(12582912.0f);
    __m256 k = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), rnd), rnd);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.3888889e-3f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333333e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1666667e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666667e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ki = _mm256_cvttps_epi32(k);
    __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(ki, _mm256_srli_epi32(ki, 31)), 1); /* ki / 2 toward 0 */
    __m256i k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    res = _mm256_blendv_ps(res, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    res = _mm256_blendv_ps(res, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    res = _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return res;
}

static void exp_sub_avx2(float *y, const float *x, float m, size_t n)
{
    __m256 mv = _mm256_set1_ps(m);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
    for (; i < n; i++) y[i] = skv_exp_ref(x[i] - m);
}

static void silu_mul_avx2(float *h, const float *g, size_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 hv = _mm256_loadu_ps(h + i);
        __m256 e = exp8(_mm256_sub_ps(zero, hv));
        _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_div_ps(hv, _mm256_add_ps(one, e)), _mm256_loadu_ps(g + i)));
    }
    for (; i < n; i++) h[i] = (h[i] / (1.0f + skv_exp_ref(-h[i]))) * g[i];
}

static void add_avx2(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = y[i] + x[i];
}

static void scale_avx2(float *y, float s, size_t n)
{
    __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
    for (; i < n; i++) y[i] = y[i] * s;
}

static void rmsnorm_avx2(float *y, const float *x, const float *w, size_t n, float eps)
{
    float ss = dot_avx2(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    __m256 iv = _mm256_set1_ps(inv);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), iv), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = (x[i] * inv) * w[i];
}

static void rope_avx2(float *x, const float *c, const float *s, size_t n_pairs)
{
    /* scalar: the pair shuffles cost more than they save at head_dim <= 128 */
    for (size_t i = 0; i < n_pairs; i++) {
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c[i] - x1 * s[i];
        x[2 * i + 1] = x0 * s[i] + x1 * c[i];
    }
}

static float max_avx2(const float *s, size_t n)
{
    __m256 mv = _mm256_set1_ps(-INFINITY);
    size_t j = 0;
    float mx, lanes[8];
    for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
    _mm256_storeu_ps(lanes, mv);
    mx = lanes[0];
    for (int l = 1; l < 8; l++) mx = lanes[l] > mx ? lanes[l] : mx;
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx; /* max is exact: any order gives the same value */
    return mx;
}

/* Key/value blocks of the attention kernel: positions [0, B), [B, 2B), ... with B * hd * 4
 * bytes about 16 KiB, so one block of K (or V) stays in L1 while every query row of the call
 * uses it. The blocking only reorders loops over independent outputs: each score and each
 * output element keeps the reference's operation sequence (ops.h), so results do not depend
 * on B, on the rows grouped into a call, or on the batch. */
static size_t attn_block(size_t hd)
{
    size_t b = (4096 / hd) & ~(size_t)7;
    return b < 8 ? 8 : b;
}

/* Weighted value sums for N query rows (w: row i at w + i*ldw) over positions [j0, j1) of
 * V (Vb: the block's rows, position j at Vb + (j - j0) * hd), added to out (which holds the
 * sums of the positions before j0): rows run jointly up to lo = min(j1, n[i]), then each row
 * finishes its own tail; per element the fma order is j ascending, as in the reference (the
 * f32 partial sums round trip through out exactly). hd is a multiple of 8. */
#define WSUM(N)                                                                                        \
    static void wsum_##N(float *const *out, const float *w, size_t ldw, const size_t *n, size_t j0,   \
                         size_t j1, const float *Vb, size_t hd)                                        \
    {                                                                                                  \
        size_t lo = j1;                                                                                \
        for (int i = 0; i < N; i++) lo = n[i] < lo ? n[i] : lo;                                        \
        for (size_t d = 0; d < hd; d += 8) {                                                           \
            __m256 acc[N];                                                                             \
            _Pragma("GCC unroll 8") for (int i = 0; i < N; i++) acc[i] = _mm256_loadu_ps(out[i] + d); \
            for (size_t j = j0; j < lo; j++) {                                                         \
                __m256 v = _mm256_loadu_ps(Vb + (j - j0) * hd + d);                                    \
                _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)                                    \
                    acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + (size_t)i * ldw + j), v, acc[i]);  \
            }                                                                                          \
            for (int i = 0; i < N; i++) {                                                              \
                size_t end = n[i] < j1 ? n[i] : j1;                                                    \
                for (size_t j = lo > j0 ? lo : j0; j < end; j++)                                       \
                    acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + (size_t)i * ldw + j),             \
                                             _mm256_loadu_ps(Vb + (j - j0) * hd + d), acc[i]);         \
                _mm256_storeu_ps(out[i] + d, acc[i]);                                                  \
            }                                                                                          \
        }                                                                                              \
    }
WSUM(1)
WSUM(2)
WSUM(3)
WSUM(4)
WSUM(5)
WSUM(6)
WSUM(7)
WSUM(8)
typedef void (*wsum_t)(float *const *, const float *, size_t, const size_t *, size_t, size_t, const float *,
                       size_t);
static const wsum_t wsum_fn[9] = {NULL, wsum_1, wsum_2, wsum_3, wsum_4, wsum_5, wsum_6, wsum_7, wsum_8};

/* Scores s_i[j] = dot(q_i, k_j) * scale of the full 8-groups j < n[i] & ~7 inside the key
 * block [j0, j1) (a multiple of 8 apart; Kb: its rows, key j at Kb + (j - j0) * hd), for
 * every row: the block is read from L1 nq times. */
static void scores_block(const float *const *q, const size_t *n, size_t nq, const float *Kb, size_t hd,
                         float scale, float *scores, size_t n_max, size_t j0, size_t j1)
{
    const __m256 sv = _mm256_set1_ps(scale);
    for (size_t i = 0; i < nq; i++) {
        float *s = scores + i * n_max;
        for (size_t j = j0; j < j1 && j + 8 <= n[i]; j += 8) {
            const float *a[8] = {q[i], q[i], q[i], q[i], q[i], q[i], q[i], q[i]};
            const float *b[8];
            for (int r = 0; r < 8; r++) b[r] = Kb + (j - j0 + (size_t)r) * hd;
            dot8(s + j, a, b, hd);
            _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), sv));
        }
    }
}

/* Softmax weights of each row in place, its 8-group tail's scores already there:
 * exp(s - max) / sum. */
static void softmax_rows(const size_t *n, size_t nq, float *scores, size_t n_max)
{
    for (size_t i = 0; i < nq; i++) {
        float *s = scores + i * n_max;
        exp_sub_avx2(s, s, max_avx2(s, n[i]), n[i]);
        scale_avx2(s, 1.0f / sum_avx2(s, n[i]), n[i]);
    }
}

/* Decode-shaped attention (issue 16): two query rows with the same n and hd % 32 == 0.
 * Scores: 4 keys x 2 rows per tile (8 chains, one reduce8), each K row loaded once for
 * both rows; value sums: blocks of PAIR_JB positions, in each 32 dims at a time (the
 * block's rows come from L1 after the first 32), positions inner, each V load shared by
 * both rows, the partial sums kept in the output between blocks (f32 round trips are
 * exact). Per output the operations of the reference (ops.h). */
#define PAIR_JB 32 /* positions per value-sum block: 32 x 256 bytes of f32 rows at hd 64 */
/* The pair kernels for K / V rows of type T (float, or uint16_t halves converted by LOAD
 * in registers: exact), DOT the matching dot_avx2; scores of keys [j, n). */
#define PAIR_KERNELS(SUF, T, LOAD, DOT)                                                                            \
    static void scores_pair##SUF(float *s0, float *s1, const float *q0, const float *q1, const T *K, size_t j,    \
                                 size_t n, size_t hd, float scale)                                                \
    {                                                                                                              \
        const __m256 sv = _mm256_set1_ps(scale);                                                                   \
        for (; j + 4 <= n; j += 4) {                                                                               \
            __m256 acc[8], o;                                                                                      \
            const T *k = K + j * hd;                                                                               \
            for (size_t p = 0; p < 4 * hd; p += 64 / sizeof(T))                                                    \
                _mm_prefetch((const char *)(k + 32 * hd + p), _MM_HINT_T1);                                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();                      \
            for (size_t d = 0; d < hd; d += 8) {                                                                   \
                __m256 a = _mm256_loadu_ps(q0 + d), b = _mm256_loadu_ps(q1 + d);                                   \
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                              \
                    __m256 kv = LOAD(k + (size_t)r * hd + d);                                                      \
                    acc[r] = _mm256_fmadd_ps(a, kv, acc[r]);                                                       \
                    acc[4 + r] = _mm256_fmadd_ps(b, kv, acc[4 + r]);                                               \
                }                                                                                                  \
            }                                                                                                      \
            o = _mm256_mul_ps(skv_reduce8_avx2(acc), sv);                                                          \
            _mm_storeu_ps(s0 + j, _mm256_castps256_ps128(o));                                                      \
            _mm_storeu_ps(s1 + j, _mm256_extractf128_ps(o, 1));                                                    \
        }                                                                                                          \
        for (; j < n; j++) {                                                                                       \
            s0[j] = DOT(q0, K + j * hd, hd) * scale;                                                               \
            s1[j] = DOT(q1, K + j * hd, hd) * scale;                                                               \
        }                                                                                                          \
    }                                                                                                              \
    static void wsum_pair##SUF(float *o0, float *o1, const float *w0, const float *w1, size_t n, const T *V,      \
                               size_t hd)                                                                          \
    {                                                                                                              \
        for (size_t j0 = 0; j0 < n || j0 == 0; j0 += PAIR_JB) {                                                    \
            size_t j1 = n - j0 < PAIR_JB ? n : j0 + PAIR_JB;                                                       \
            for (size_t d = 0; d < hd; d += 32) {                                                                  \
                __m256 acc[8];                                                                                     \
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                              \
                    acc[c] = j0 ? _mm256_loadu_ps(o0 + d + 8 * c) : _mm256_setzero_ps();                           \
                    acc[4 + c] = j0 ? _mm256_loadu_ps(o1 + d + 8 * c) : _mm256_setzero_ps();                       \
                }                                                                                                  \
                for (size_t j = j0; j < j1; j++) {                                                                 \
                    __m256 a = _mm256_broadcast_ss(w0 + j), b = _mm256_broadcast_ss(w1 + j);                       \
                    const T *v = V + j * hd + d;                                                                   \
                    if (d == 0)                                                                                    \
                        for (size_t p = 0; p < hd; p += 64 / sizeof(T))                                            \
                            _mm_prefetch((const char *)(v + 16 * hd + p), _MM_HINT_T1);                            \
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                          \
                        __m256 vv = LOAD(v + 8 * c);                                                               \
                        acc[c] = _mm256_fmadd_ps(a, vv, acc[c]);                                                   \
                        acc[4 + c] = _mm256_fmadd_ps(b, vv, acc[4 + c]);                                           \
                    }                                                                                              \
                }                                                                                                  \
                for (int c = 0; c < 4; c++) {                                                                      \
                    _mm256_storeu_ps(o0 + d + 8 * c, acc[c]);                                                      \
                    _mm256_storeu_ps(o1 + d + 8 * c, acc[4 + c]);                                                  \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }

static inline __m256 h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }

/* dot_avx2(a, f32(b), n): the same chain and reduction. */
static float dot_h(const float *a, const uint16_t *b, size_t n)
{
    __m256 acc = _mm256_setzero_ps();
    size_t n8 = n & ~(size_t)7, j;
    for (j = 0; j < n8; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), h8(b + j), acc);
    float s = skv_hsum8_avx2(acc);
    for (; j < n; j++) s = fmaf(a[j], skv_f16_to_f32(b[j]), s);
    return s;
}

PAIR_KERNELS(, float, _mm256_loadu_ps, dot_avx2)
PAIR_KERNELS(_h, uint16_t, h8, dot_h)

static void softmax_row(float *s, size_t n)
{
    exp_sub_avx2(s, s, max_avx2(s, n), n);
    scale_avx2(s, 1.0f / sum_avx2(s, n), n);
}

static void attn_pair(float *const *out, const float *const *q, size_t n, const float *K, const float *V, size_t hd,
                      float scale, float *scores, size_t n_max)
{
    float *s0 = scores, *s1 = scores + n_max;
    int wide = hd % 64 == 0 && skv_ops_avx512_built() && skv_cpu_has(SKV_CPU_AVX512_SET);
    size_t j = wide ? skv_scores_pair_avx512(s0, s1, q[0], q[1], K, n, hd, scale) : 0;
    scores_pair(s0, s1, q[0], q[1], K, j, n, hd, scale);
    softmax_row(s0, n);
    softmax_row(s1, n);
    if (wide) skv_wsum_pair_avx512(out[0], out[1], s0, s1, n, V, hd);
    else wsum_pair(out[0], out[1], s0, s1, n, V, hd);
}

static void attn_avx2(float *const *out, const float *const *q, const size_t *n, size_t nq, const float *K,
                      const float *V, size_t hd, float scale, float *scores, size_t n_max)
{
    if (nq == 2 && n[0] == n[1] && hd % 32 == 0) { /* a decode step of a GQA pair */
        attn_pair(out, q, n[0], K, V, hd, scale, scores, n_max);
        return;
    }
    size_t B = attn_block(hd);
    for (size_t j0 = 0; j0 < n_max; j0 += B)
        scores_block(q, n, nq, K + j0 * hd, hd, scale, scores, n_max, j0, j0 + B < n_max ? j0 + B : n_max);
    for (size_t i = 0; i < nq; i++) /* the 8-group tails */
        for (size_t j = n[i] & ~(size_t)7; j < n[i]; j++) scores[i * n_max + j] = dot_avx2(q[i], K + j * hd, hd) * scale;
    softmax_rows(n, nq, scores, n_max);
    if (hd % 8) { /* generic shapes: one row at a time */
        for (size_t i = 0; i < nq; i++) {
            memset(out[i], 0, hd * sizeof(float));
            for (size_t j = 0; j < n[i]; j++) axpy_avx2(out[i], scores[i * n_max + j], V + j * hd, hd);
        }
        return;
    }
    /* out_i[d] = fma(w_ij, v_j[d], out_i[d]), j ascending: independent chains, up to 8 rows
     * at a time sharing each V load, one value block at a time */
    for (size_t i = 0; i < nq; i++) memset(out[i], 0, hd * sizeof(float));
    for (size_t j0 = 0; j0 < n_max; j0 += B)
        for (size_t i0 = 0; i0 < nq; i0 += 8) {
            size_t m = nq - i0 < 8 ? nq - i0 : 8;
            wsum_fn[m](out + i0, scores + i0 * n_max, n_max, n + i0, j0, j0 + B, V + j0 * hd, hd);
        }
}

/* attn_avx2's blocked path over binary16 K and V rows: each block of B positions is
 * converted into kv (2 * B * hd floats; the conversion is exact) right before the f32 block
 * kernels read it, so the cache is read as halves and never converted whole. The same
 * operations per output as attn_avx2 on the converted rows. hd % 8 == 0. */
static void attn_blocks_h(float *const *out, const float *const *q, const size_t *n, size_t nq, const uint16_t *K,
                          const uint16_t *V, size_t hd, float scale, float *scores, size_t n_max, float *kv)
{
    size_t B = attn_block(hd);
    for (size_t j0 = 0; j0 < n_max; j0 += B) {
        size_t j1 = j0 + B < n_max ? j0 + B : n_max;
        skv_f16_to_float_avx2(K + j0 * hd, kv, (j1 - j0) * hd);
        scores_block(q, n, nq, kv, hd, scale, scores, n_max, j0, j1);
    }
    for (size_t i = 0; i < nq; i++)
        for (size_t j = n[i] & ~(size_t)7; j < n[i]; j++) scores[i * n_max + j] = dot_h(q[i], K + j * hd, hd) * scale;
    softmax_rows(n, nq, scores, n_max);
    for (size_t i = 0; i < nq; i++) memset(out[i], 0, hd * sizeof(float));
    for (size_t j0 = 0; j0 < n_max; j0 += B) {
        size_t j1 = j0 + B < n_max ? j0 + B : n_max;
        skv_f16_to_float_avx2(V + j0 * hd, kv, (j1 - j0) * hd);
        for (size_t i0 = 0; i0 < nq; i0 += 8) {
            size_t m = nq - i0 < 8 ? nq - i0 : 8;
            wsum_fn[m](out + i0, scores + i0 * n_max, n_max, n + i0, j0, j1, kv, hd);
        }
    }
}

/* ---- attention over an f16 KV cache: attn_pair with the K / V rows read as halves and
 * converted in registers (exact), half the bytes of the f32 rows per position; the pair
 * kernels are the f32 ones (PAIR_KERNELS above), the AVX-512 parts in ops_avx512.c. */
static void attn_f16_avx2(float *const *out, const float *const *q, const size_t *n, size_t nq, const uint16_t *K,
                          const uint16_t *V, size_t hd, float scale, float *scores, size_t n_max, float *kv)
{
    if (nq == 2 && n[0] == n[1] && hd % 32 == 0) { /* a decode step of a GQA pair */
        float *s0 = scores, *s1 = scores + n_max;
        int wide = hd % 64 == 0 && skv_ops_avx512_built() && skv_cpu_has(SKV_CPU_AVX512_SET);
        size_t j = wide ? skv_scores_pair_h_avx512(s0, s1, q[0], q[1], K, n[0], hd, scale) : 0;
        scores_pair_h(s0, s1, q[0], q[1], K, j, n[0], hd, scale);
        softmax_row(s0, n[0]);
        softmax_row(s1, n[0]);
        if (wide) skv_wsum_pair_h_avx512(out[0], out[1], s0, s1, n[0], V, hd);
        else wsum_pair_h(out[0], out[1], s0, s1, n[0], V, hd);
        return;
    }
    if (hd % 8 == 0) {
        attn_blocks_h(out, q, n, nq, K, V, hd, scale, scores, n_max, kv);
        return;
    }
    skv_f16_to_float_avx2(K, kv, n_max * hd);
    skv_f16_to_float_avx2(V, kv + n_max * hd, n_max * hd);
    attn_avx2(out, q, n, nq, kv, kv + n_max * hd, hd, scale, scores, n_max);
}

/* The type table's SIMD to_float where a row has one (exact: same values). */
static void dequant_avx2(uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows, float *dst)
{
    skv_dequant_rows_simd(1, type, src, row_bytes, K, n_rows, dst);
}

static const skv_kernels k_avx2 = {
    .name = "avx2",
    .matmul = matmul_avx2,
    .dot = dot_avx2,
    .sum = sum_avx2,
    .axpy = axpy_avx2,
    .exp_sub = exp_sub_avx2,
    .silu_mul = silu_mul_avx2,
    .add = add_avx2,
    .scale = scale_avx2,
    .rmsnorm = rmsnorm_avx2,
    .rope = rope_avx2,
    .attn = attn_avx2,
    .attn_f16 = attn_f16_avx2,
    .dequant = dequant_avx2,
    .matvec_f16 = matvec_f16_avx2,
    .matmul_f16 = matmul_f16_avx2,
    .dot_level = SKV_DOT_AVX512, /* the widest the CPU has (skv_dot_level): same bits */
};

/* The file is compiled for AVX2 + FMA + F16C: all three must be there. */
const skv_kernels *skv_kernels_avx2(void) { return skv_cpu_has(SKV_CPU_AVX2_SET) ? &k_avx2 : NULL; }

#else
const skv_kernels *skv_kernels_avx2(void) { return NULL; }
#endif
