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
#include "quant/repack.h"
#include "quant/simd_avx2.h"
#include "quant/types.h"

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

/* Tokens from which the AVX2 level unpacks each 16 rows and runs the file layout's 3 x 4
 * tiles: the packed 4 x 3 tiles convert a third more weight vectors per product, which
 * is what bounds a batch once the rows are in cache (2048 x 32768 f16, 1 thread, AMD EPYC:
 * T = 2, 4 packed tiles 10.7, 12.4 ms vs the file rows' 12.2, 14.2; T = 16 even; T = 24,
 * 64 packed tiles 50.7, 126 ms, unpacked 43.5, 98, the file rows 41.8, 97). */
#define PACKED_UNPACK_T 24

/* 16 packed rows (two 8-row groups) back in the file layout at dst (rows 2K bytes apart),
 * read in order with the stream prefetched 2 KiB ahead (T = 24: 43.5 ms vs 45.9 without,
 * the file rows 41.8). */
static void unpack16(const uint8_t *P, size_t K, uint8_t *dst)
{
    for (size_t g = 0; g < 2; g++)
        for (size_t c = 0; c < K / 8; c++) {
            _mm_prefetch((const char *)(P + 16 * g * K + 128 * c + 2048), _MM_HINT_T0); /* 2 KiB ahead */
            _mm_prefetch((const char *)(P + 16 * g * K + 128 * c + 2048 + 64), _MM_HINT_T0);
#pragma GCC unroll 8
            for (size_t i = 0; i < 8; i++)
                _mm_storeu_si128((__m128i *)(void *)(dst + (8 * g + i) * 2 * K + 16 * c),
                                 _mm_loadu_si128((const __m128i *)(const void *)(P + 16 * g * K + 128 * c + 16 * i)));
        }
}

/* Packed rows (quant/repack.h), n_rows a multiple of 16: decode reads each 8-row group as
 * one stream (29-31 GB/s against the file rows' 23-24 on the AMD EPYC, 2048 x 32768 f16);
 * batches run the packed tiles (AVX-512: 8 rows x up to 6 tokens; AVX2: 4 rows x 3 tokens,
 * or from PACKED_UNPACK_T tokens the file layout's tiles on each 16 rows unpacked into the
 * second half of scratch, 16 * K floats). Same bits as the file-layout kernels. */
static void matmul_packed(int bf16, float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                          size_t n_rows, float *scratch)
{
    const uint8_t *p = P;
    uint8_t *rows = (uint8_t *)(scratch + 8 * K);
    if (T == 1) {
        if (bf16) skv_bf16_matvec_packed_avx2(y, P, K, x, n_rows);
        else skv_f16_matvec_packed_avx2(y, P, K, x, n_rows);
    } else if (skv_cpu_has(SKV_CPU_AVX512_SET)) {
        if (bf16) skv_bf16_matmul_avx512_packed(y, ldy, P, K, x, ldx, T, n_rows);
        else skv_f16_matmul_avx512_packed(y, ldy, P, K, x, ldx, T, n_rows);
    } else if (T < PACKED_UNPACK_T || !scratch) {
        if (bf16) skv_bf16_matmul_tiles_packed_avx2(y, ldy, P, K, x, ldx, T, n_rows);
        else skv_f16_matmul_tiles_packed_avx2(y, ldy, P, K, x, ldx, T, n_rows);
    } else {
        for (size_t r = 0; r < n_rows; r += 16) {
            unpack16(p + r * 2 * K, K, rows);
            if (bf16) skv_bf16_matmul_tiles_avx2(y + r, ldy, rows, 2 * K, K, x, ldx, T, 16);
            else skv_f16_matmul_tiles_avx2(y + r, ldy, rows, 2 * K, K, x, ldx, T, 16);
        }
    }
}

void skv_f16_matmul_packed_avx2(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                size_t n_rows, float *scratch)
{
    matmul_packed(0, y, ldy, P, K, x, ldx, T, n_rows, scratch);
}

void skv_bf16_matmul_packed_avx2(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                 size_t n_rows, float *scratch)
{
    matmul_packed(1, y, ldy, P, K, x, ldx, T, n_rows, scratch);
}

#else
/* Not an x86-64 AVX2 build: the table lists no SIMD twins; keep the unit non-empty. */
typedef int skv_types_avx2_unused;
#endif
