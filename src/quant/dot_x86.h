/* The x86 twins of the integer dot kernels (dot.h), one source built twice:
 * dot_avx2.c (SKV_DOT_VNNI 0: maddubs + madd) and dot_avx512.c (SKV_DOT_VNNI
 * 1: vpdpbusd).  Both form the same exact int32 block sums, so both give the
 * reference's bits.  Layout of the work:
 *
 *   rows r0..r0+7 of W (one tile, lanes = rows)  x  token t = 0..T-1
 *     per block b: p[i] = int32 partial sums of row i  --reduce8-->  isum[8]
 *                  acc[8] = fma(d[8] * dx, float(isum[8]), acc[8])
 *
 * so each lane runs exactly the reference's per-element sequence, and the
 * tile's weight rows (8 x K bytes) stay in L1 while all T tokens pass.
 * Include only from a file that defines SKV_DOT_VNNI and SKV_DOT_FN(name). */
#ifndef SKV_DOT_X86_H
#define SKV_DOT_X86_H

#include <immintrin.h>
#include <string.h>

#include "quant/dot_int.h"
#include "quant/fbits.h"

/* acc + the u8 x s8 products of u and s, four adjacent ones per int32 lane
 * (u <= 128, so the maddubs pairs never saturate). */
static inline __m256i dp_u8s8(__m256i acc, __m256i u, __m256i s)
{
#if SKV_DOT_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + sc * (u8 x s8 products), sc_lo for bytes 0..15, sc_hi for bytes 16..31 (u <= 63). */
static inline __m256i dp_scaled(__m256i acc, __m256i u, __m256i s, int sc_lo, int sc_hi)
{
#if SKV_DOT_VNNI
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
    return _mm256_add_epi32(acc, _mm256_mullo_epi32(p, _mm256_set_m128i(_mm_set1_epi32(sc_hi), _mm_set1_epi32(sc_lo))));
#else
    __m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)sc_hi), _mm_set1_epi16((short)sc_lo));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc));
#endif
}

/* Lane r = the sum of the 8 lanes of p[r] (integer: exact in any order). */
static inline __m256i reduce8_epi32(const __m256i p[8])
{
    __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The binary16 at w[i] + off of the 8 rows, as floats (exact). */
static inline __m256 scales8(const uint8_t *const w[8], size_t off)
{
    uint16_t h[8];
    for (int i = 0; i < 8; i++) h[i] = skv_rd16le(w[i] + off);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
}

static inline __m256i ld32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* acc = fma(d * dx, (float)isum, acc), lane by lane. */
static inline __m256 fma_scaled(__m256 acc, __m256 d, float dx, __m256i isum)
{
    return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum), acc);
}

/* out[i] = dot(row w[i], activation row qa) for the 8 rows of a tile, nb blocks. */
typedef void (*tile_fn)(float out[8], const uint8_t *const w[8], const uint8_t *qa, size_t nb);

static void gemm_tiles(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride,
                       size_t nb, size_t T, size_t n_rows, tile_fn tile)
{
    const uint8_t *w0 = W, *a0 = qa;
    for (size_t r0 = 0; r0 < n_rows; r0 += 8) {
        size_t m = n_rows - r0 < 8 ? n_rows - r0 : 8;
        const uint8_t *w[8];
        for (size_t i = 0; i < 8; i++) w[i] = w0 + (r0 + (i < m ? i : m - 1)) * row_bytes; /* short tile: repeats */
        for (size_t t = 0; t < T; t++) {
            float o[8];
            tile(o, w, a0 + t * qa_stride, nb);
            memcpy(y + t * ldy + r0, o, m * sizeof(float));
        }
    }
}

/* ---- q8_0: sum q*a with the sign trick (|q| as u8, a with q's sign) ---- */
static void tile_q8_0(float out[8], const uint8_t *const w[8], const uint8_t *qa, size_t nb)
{
    const skv_act32 *a = (const skv_act32 *)(const void *)qa;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i av = ld32(a[b].qs), p[8];
        for (int i = 0; i < 8; i++) {
            __m256i q = ld32(w[i] + 34 * b + 2);
            p[i] = dp_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q));
        }
        acc = fma_scaled(acc, scales8(w, 34 * b), a[b].d, reduce8_epi32(p));
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- q4_0: sum (q - 8)*a = sum q*a - 8 * sum a ---- */
static void tile_q4_0(float out[8], const uint8_t *const w[8], const uint8_t *qa, size_t nb)
{
    const skv_act32 *a = (const skv_act32 *)(const void *)qa;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i av = ld32(a[b].qs), p[8];
        for (int i = 0; i < 8; i++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(w[i] + 18 * b + 2));
            __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
            p[i] = dp_u8s8(_mm256_setzero_si256(), v, av);
        }
        __m256i isum = _mm256_sub_epi32(reduce8_epi32(p), _mm256_set1_epi32(8 * (a[b].bsum[0] + a[b].bsum[1])));
        acc = fma_scaled(acc, scales8(w, 18 * b), a[b].d, isum);
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- q4_k: 8 runs of 32 nibbles, each with a 6-bit scale and min ---- */

/* Row i's integer sums of one q4_k block: the scaled products, and (return) sum mn*asum. */
static inline __m256i q4_k_row(const uint8_t *blk, const skv_act256 *a, const int32_t asum[8], int32_t *imin)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    uint8_t sc[8], mn[8];
    __m256i acc = _mm256_setzero_si256();
    int32_t m = 0;
    skv_k4_scales8(blk + 4, sc, mn);
    for (int c = 0; c < 4; c++) {
        __m256i q = ld32(blk + 16 + 32 * c);
        acc = dp_scaled(acc, _mm256_and_si256(q, m4), ld32(a->qs + 64 * c), sc[2 * c], sc[2 * c]);
        acc = dp_scaled(acc, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), ld32(a->qs + 64 * c + 32), sc[2 * c + 1],
                        sc[2 * c + 1]);
    }
    for (int s = 0; s < 8; s++) m += (int32_t)mn[s] * asum[s];
    *imin = m;
    return acc;
}

static void tile_q4_k(float out[8], const uint8_t *const w[8], const uint8_t *qa, size_t nb)
{
    const skv_act256 *a = (const skv_act256 *)(const void *)qa;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        int32_t asum[8], imin[8];
        __m256i p[8];
        for (int s = 0; s < 8; s++) asum[s] = a[b].bsum[2 * s] + a[b].bsum[2 * s + 1];
        for (int i = 0; i < 8; i++) p[i] = q4_k_row(w[i] + 144 * b, &a[b], asum, &imin[i]);
        acc = fma_scaled(acc, scales8(w, 144 * b), a[b].d, reduce8_epi32(p));
        __m256 dm = _mm256_xor_ps(_mm256_mul_ps(scales8(w, 144 * b + 2), _mm256_set1_ps(a[b].d)), sign);
        acc = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(ld32(imin)), acc);
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- q6_k: 16 runs of 16 six-bit values q - 32, int8 scales ---- */

/* The 32 unsigned values k (0..3) of half g: ql nibble plus two qh bits. */
static inline __m256i q6_values(__m256i l0, __m256i l1, __m256i h, int k)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    __m256i lo = _mm256_and_si256(k < 2 ? (k ? l1 : l0) : _mm256_srli_epi16(k == 3 ? l1 : l0, 4), m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * k), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

/* Row i's scaled unsigned products of one q6_k block; *corr = 32 * sum sc*bsum. */
static inline __m256i q6_k_row(const uint8_t *blk, const skv_act256 *a, int32_t *corr)
{
    const int8_t *sc = (const int8_t *)(const void *)(blk + 192);
    __m256i acc = _mm256_setzero_si256();
    int32_t c = 0;
    for (int g = 0; g < 2; g++) {
        __m256i l0 = ld32(blk + 64 * g), l1 = ld32(blk + 64 * g + 32), h = ld32(blk + 128 + 32 * g);
        for (int k = 0; k < 4; k++) {
            int s = 8 * g + 2 * k;
            acc = dp_scaled(acc, q6_values(l0, l1, h, k), ld32(a->qs + 128 * g + 32 * k), sc[s], sc[s + 1]);
        }
    }
    for (int s = 0; s < 16; s++) c += (int32_t)sc[s] * a->bsum[s];
    *corr = 32 * c;
    return acc;
}

static void tile_q6_k(float out[8], const uint8_t *const w[8], const uint8_t *qa, size_t nb)
{
    const skv_act256 *a = (const skv_act256 *)(const void *)qa;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        int32_t corr[8];
        __m256i p[8];
        for (int i = 0; i < 8; i++) p[i] = q6_k_row(w[i] + 210 * b, &a[b], &corr[i]);
        acc = fma_scaled(acc, scales8(w, 210 * b + 208), a[b].d, _mm256_sub_epi32(reduce8_epi32(p), ld32(corr)));
    }
    _mm256_storeu_ps(out, acc);
}

/* The exported gemm of one type over tiles of tile_<name>, blocks of n values. */
#define SKV_DOT_GEMM(name, n)                                                                                    \
    void SKV_DOT_FN(name)(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride, \
                          size_t K, size_t T, size_t n_rows)                                                      \
    {                                                                                                             \
        gemm_tiles(y, ldy, W, row_bytes, qa, qa_stride, K / (n), T, n_rows, tile_##name);                         \
    }
SKV_DOT_GEMM(q8_0, 32)
SKV_DOT_GEMM(q4_0, 32)
SKV_DOT_GEMM(q4_k, 256)
SKV_DOT_GEMM(q6_k, 256)

#endif
