/* Helpers shared by the x86 integer dot kernels (dot_x86.h, dot_ext_x86.h): the 8-row
 * tiles of the AVX2 level, their int32 reductions and the per-lane float chain of dot.h.
 * Include only from a file that defines SKV_DOT_VNNI (0: maddubs + madd, 1: vpdpbusd). */
#ifndef SKV_DOT_X86_BASE_H
#define SKV_DOT_X86_BASE_H

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
    /* built in registers: eight 2-byte stores read back as one 16-byte load would stall
     * store forwarding once per block */
#define H_(i) (short)skv_rd16le(w[i] + off)
    return _mm256_cvtph_ps(_mm_set_epi16(H_(7), H_(6), H_(5), H_(4), H_(3), H_(2), H_(1), H_(0)));
#undef H_
}

/* Asks for the bytes `ahead` past block b of the 8 rows (decode streams weights
 * from memory: eight rows at once is more streams than the prefetcher follows). */
static inline void prefetch8(const uint8_t *const w[8], size_t off)
{
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) _mm_prefetch((const char *)(w[i] + off), _MM_HINT_T0);
}

static inline __m256i ld32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* acc = fma(d * dx, (float)isum, acc), lane by lane. */
static inline __m256 fma_scaled(__m256 acc, __m256 d, float dx, __m256i isum)
{
    return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum), acc);
}

/* Up to NT tokens share one unpacking of a weight block: y[t*ldy + i] =
 * dot(row w[i], activation row qa + t*qs) for t < nt, i < m; nb blocks.  8 rather than 4
 * measured 0-30% faster AVX2 batches (bench_dot, T = 64). */
#define NT 8
#define PF_AHEAD 512 /* bytes of each weight row prefetched ahead of the block in use */
typedef void (*tile_fn)(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                        size_t nt, size_t m);

static void gemm_tiles(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride,
                       size_t nb, size_t T, size_t n_rows, tile_fn tile)
{
    const uint8_t *w0 = W, *a0 = qa;
    for (size_t r0 = 0; r0 < n_rows; r0 += 8) {
        size_t m = n_rows - r0 < 8 ? n_rows - r0 : 8;
        const uint8_t *w[8];
        for (size_t i = 0; i < 8; i++) w[i] = w0 + (r0 + (i < m ? i : m - 1)) * row_bytes; /* short tile: repeats */
        for (size_t t = 0; t < T; t += NT)
            tile(y + t * ldy + r0, ldy, w, a0 + t * qa_stride, qa_stride, nb, T - t < NT ? T - t : NT, m);
    }
}

/* The nt accumulators of a tile to y (m rows each). */
static inline void store_tile(float *y, size_t ldy, const __m256 *acc, size_t nt, size_t m)
{
    for (size_t t = 0; t < nt; t++) {
        float o[8];
        _mm256_storeu_ps(o, acc[t]);
        memcpy(y + t * ldy, o, m * sizeof(float));
    }
}

#define ACT32(qa, qs, t, b) ((const skv_act32 *)(const void *)((qa) + (t) * (qs)) + (b))
#define ACT256(qa, qs, t, b) ((const skv_act256 *)(const void *)((qa) + (t) * (qs)) + (b))

/* acc + the u8 x s8 products of u and s, each pair scaled by the int16 lanes
 * of sc (u * s pairs stay within int16: u <= 63). */
static inline __m256i dp_sc16(__m256i acc, __m256i u, __m256i s, __m256i sc)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc));
}

/* Lane r = sum_k madd(pairs[k] lane r, bcast[k]): int16 pairs x int16 pairs, exact. */
static inline __m256i madd_pairs(const __m256i *pairs, const int32_t *bcast, int n)
{
    __m256i s = _mm256_setzero_si256();
    for (int k = 0; k < n; k++) s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs[k], _mm256_set1_epi32(bcast[k])));
    return s;
}

/* Two int16 values as one int32 (low, high). */
static inline int32_t pair16(int lo, int hi) { return (int32_t)(((uint32_t)(uint16_t)hi << 16) | (uint16_t)lo); }

/* The 32 unsigned values (q + 32) of run k (0..3) of a q6_k half g, from the half's ql
 * bytes l0, l1 (64g, 64g + 32) and qh bytes h (128 + 32g): a ql nibble plus two qh bits. */
static inline __m256i q6_values(__m256i l0, __m256i l1, __m256i h, int k)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    __m256i lo = _mm256_and_si256(k < 2 ? (k ? l1 : l0) : _mm256_srli_epi16(k == 3 ? l1 : l0, 4), m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * k), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

/* An activation block of 256 in registers: av[j] = values 32j .. 32j+31, bs[k] = the
 * group sums (2k, 2k+1) as an int16 pair. */
static inline void act256_regs(const skv_act256 *a, __m256i av[8], int32_t bs[8])
{
    for (int j = 0; j < 8; j++) av[j] = ld32(a->qs + 32 * j);
    for (int k = 0; k < 8; k++) bs[k] = pair16(a->bsum[2 * k], a->bsum[2 * k + 1]);
}

#endif
