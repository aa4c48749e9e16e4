/* AVX2 + F16C + FMA twins of the type-table kernels (types_kernels.h).
 * Compiled with -mavx2 -mfma -mf16c (-ffp-contract=off: nothing is fused
 * unless written); the table lists them with simd_needs = SKV_CPU_AVX2_SET.
 * Each computes the same bits as its reference (tests/test_quant.c and
 * tests/test_ops.c compare). */
#include "quant/types_kernels.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>

#include "core/cpu.h"
#include "core/f16.h"
#include "quant/simd_avx2.h"

/* bad | (lanes of the eight halves h whose exponent is all ones: inf / NaN). */
static inline __m128i mark_nonfinite(__m128i bad, __m128i h)
{
    const __m128i em = _mm_set1_epi16(0x7c00);
    return _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, em), em));
}

/* F16C's VCVTPS2PH with imm 0 rounds to nearest even, like skv_f32_to_f16. */
int skv_f16enc_avx2(const float *x, uint8_t *out, size_t n)
{
    __m128i bad = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0);
        bad = mark_nonfinite(bad, h);
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i), h);
    }
    int tail = i < n ? skv_f16enc_ref(x + i, out + 2 * i, n - i) : 0;
    return tail | (_mm_movemask_epi8(bad) != 0);
}

/* Half -> single is exact, so this equals the scalar conversion. */
int skv_f16dec_avx2(const uint8_t *in, float *y, size_t n)
{
    __m128i bad = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i));
        bad = mark_nonfinite(bad, h);
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    int tail = i < n ? skv_f16dec_ref(in + 2 * i, y + i, n - i) : 0;
    return tail | (_mm_movemask_epi8(bad) != 0);
}

void skv_f16_to_float_avx2(const void *src, float *dst, size_t n) { (void)skv_f16dec_avx2(src, dst, n); }

/* bf16 -> f32 is the 16 bits shifted up (exact), as the reference does value by value. */
void skv_bf16_to_float_avx2(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i)));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    if (i < n) skv_bf16_to_float_ref(p + 2 * i, dst + i, n - i);
}

/* Eight binary16 -> binary32 values (exact). */
static inline __m256 load_h8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline const uint16_t *row_at(const void *W, size_t row_bytes, size_t r)
{
    return (const uint16_t *)(const void *)((const uint8_t *)W + r * row_bytes);
}

/* Eight rows at once: per row the operations of the canonical dot on the converted row. */
static void matvec8(float *y, const void *W, size_t row_bytes, size_t K, const float *x)
{
    size_t n8 = K & ~(size_t)7, j;
    const uint16_t *w[8];
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        w[i] = row_at(W, row_bytes, (size_t)i);
        acc[i] = _mm256_setzero_ps();
    }
    for (j = 0; j < n8; j += 8) {
        __m256 xv = _mm256_loadu_ps(x + j);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = _mm256_fmadd_ps(load_h8(w[i] + j), xv, acc[i]);
    }
    _mm256_storeu_ps(y, skv_reduce8_avx2(acc));
    if (n8 != K)
        for (int i = 0; i < 8; i++)
            for (j = n8; j < K; j++) y[i] = fmaf(skv_f16_to_f32(w[i][j]), x[j], y[i]);
}

static float matvec1(const uint16_t *w, size_t K, const float *x)
{
    size_t n8 = K & ~(size_t)7, j;
    __m256 acc = _mm256_setzero_ps();
    for (j = 0; j < n8; j += 8) acc = _mm256_fmadd_ps(load_h8(w + j), _mm256_loadu_ps(x + j), acc);
    float sum = skv_hsum8_avx2(acc);
    for (; j < K; j++) sum = fmaf(skv_f16_to_f32(w[j]), x[j], sum);
    return sum;
}

void skv_f16_matvec_avx2(float *y, const void *W, size_t row_bytes, size_t K, const float *x, size_t n_rows)
{
    size_t r = 0;
    for (; r + 8 <= n_rows; r += 8) matvec8(y + r, row_at(W, row_bytes, r), row_bytes, K, x);
    for (; r < n_rows; r++) y[r] = matvec1(row_at(W, row_bytes, r), K, x);
}

/* Tile of R rows x TT tokens of y = W x: R*TT <= 16 accumulators, each the canonical dot
 * chain of its output (8 lanes, fma over j ascending, the reduce8 tree, then the tail).
 * Each weight vector is converted in registers once and used for all TT tokens. */
static inline __attribute__((always_inline)) void tile_f16(float *y, size_t ldy, const void *W, size_t rb, size_t K,
                                                           const float *x, size_t ldx, const int R, const int TT)
{
    __m256 acc[16];
    float o[16];
    const uint16_t *w[8];
    size_t n8 = K & ~(size_t)7, j;
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) w[r] = row_at(W, rb, (size_t)r);
    for (j = 0; j < n8; j += 8) {
        __m256 wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load_h8(w[r] + j);
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + j);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[t * R + r] = _mm256_fmadd_ps(wv[r], xv, acc[t * R + r]);
        }
    }
    _mm256_storeu_ps(o, skv_reduce8_avx2(acc));
    if (R * TT > 8) _mm256_storeu_ps(o + 8, skv_reduce8_avx2(acc + 8));
    for (int t = 0; t < TT; t++)
        for (int r = 0; r < R; r++) {
            float s = o[t * R + r];
            for (size_t k = n8; k < K; k++) s = fmaf(skv_f16_to_f32(w[r][k]), x[(size_t)t * ldx + k], s);
            y[(size_t)t * ldy + (size_t)r] = s;
        }
}

/* Prefetches bytes [off, off + n) of W (an address hint: it may lie past the rows the call
 * owns, the next call's rows, and never faults). */
static inline void prefetch_span(const void *W, size_t off, size_t n)
{
    uintptr_t a = (uintptr_t)W + off;
    for (size_t i = 0; i < n; i += 64) _mm_prefetch((const char *)(a + i), _MM_HINT_T0);
}

/* Rows r0.. of a token group of TT tokens: tiles of R rows, then single rows. The first
 * group (pf) prefetches the rows of the next tile: the weights come from L3 or memory
 * once per call, in short runs the hardware prefetcher does not pick up. */
static inline __attribute__((always_inline)) void rows_f16(float *y, size_t ldy, const void *W, size_t rb, size_t K,
                                                           const float *x, size_t ldx, size_t n_rows, const int R,
                                                           const int TT, int pf)
{
    size_t r = 0;
    for (; r + (size_t)R <= n_rows; r += (size_t)R) {
        if (pf) prefetch_span(W, (r + (size_t)R) * rb, (size_t)R * rb);
        tile_f16(y + r, ldy, row_at(W, rb, r), rb, K, x, ldx, R, TT);
    }
    for (; r < n_rows; r++) tile_f16(y + r, ldy, row_at(W, rb, r), rb, K, x, ldx, 1, TT);
}

void skv_f16_matmul_tiles_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                               size_t ldx, size_t T, size_t n_rows)
{
    size_t t = 0;
    for (; t + 4 <= T; t += 4) rows_f16(y + t * ldy, ldy, W, row_bytes, K, x + t * ldx, ldx, n_rows, 3, 4, t == 0);
    for (; t + 2 <= T; t += 2) rows_f16(y + t * ldy, ldy, W, row_bytes, K, x + t * ldx, ldx, n_rows, 4, 2, t == 0);
    if (t < T) skv_f16_matvec_avx2(y + t * ldy, W, row_bytes, K, x + t * ldx, n_rows);
}

void skv_f16_matmul_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                         size_t T, size_t n_rows, float *scratch)
{
    if (T >= 2 && n_rows >= 4 && skv_cpu_has(SKV_CPU_AVX512_SET)) {
        if (scratch && T >= SKV_F16_MATMUL_WIDE_T && n_rows >= 8)
            skv_f16_matmul_avx512(y, ldy, W, row_bytes, K, x, ldx, T, n_rows, scratch);
        else skv_f16_matmul_avx512_small(y, ldy, W, row_bytes, K, x, ldx, T, n_rows);
        return;
    }
    skv_f16_matmul_tiles_avx2(y, ldy, W, row_bytes, K, x, ldx, T, n_rows);
}

#else
/* Not an x86-64 AVX2 build: the table lists no SIMD twins; keep the unit non-empty. */
typedef int skv_types_avx2_unused;
#endif
