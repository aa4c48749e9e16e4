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
#include <string.h>

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

/* Eight bfloat16 -> binary32 values: the 16 bits shifted up (exact). */
static inline __m256 load_b8(const uint16_t *p)
{
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

static inline float bf16_to_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline const uint16_t *row_at(const void *W, size_t row_bytes, size_t r)
{
    return (const uint16_t *)(const void *)((const uint8_t *)W + r * row_bytes);
}

/* Prefetches bytes [off, off + n) of W (an address hint: it may lie past the rows the call
 * owns, the next call's rows, and never faults). */
static inline void prefetch_span(const void *W, size_t off, size_t n)
{
    uintptr_t a = (uintptr_t)W + off;
    for (size_t i = 0; i < n; i += 64) _mm_prefetch((const char *)(a + i), _MM_HINT_T0);
}

#define HK(name) skv_f16_##name
#define HK_LOAD8(p) load_h8(p)
#define HK_TO_F32(v) skv_f16_to_f32(v)
#include "quant/half_kern_x86.h"
#undef HK
#undef HK_LOAD8
#undef HK_TO_F32

#define HK(name) skv_bf16_##name
#define HK_LOAD8(p) load_b8(p)
#define HK_TO_F32(v) bf16_to_f32(v)
#include "quant/half_kern_x86.h"
#undef HK
#undef HK_LOAD8
#undef HK_TO_F32

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

void skv_bf16_matmul_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                          size_t T, size_t n_rows, float *scratch)
{
    (void)scratch;
    skv_bf16_matmul_tiles_avx2(y, ldy, W, row_bytes, K, x, ldx, T, n_rows);
}

#else
/* Not an x86-64 AVX2 build: the table lists no SIMD twins; keep the unit non-empty. */
typedef int skv_types_avx2_unused;
#endif
