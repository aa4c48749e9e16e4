/* AVX-512 twin of the f16 weight matrix product (types_kernels.h) for prefill-sized
 * batches: compiled with the AVX-512 flags (Makefile), run only where the CPU has
 * SKV_CPU_AVX512_SET (skv_f16_matmul_avx2 decides). Same bits as the reference: every
 * output is still one 8-lane chain (fma over j ascending), a zmm register holds the
 * chains of two rows for one token, and each chain is reduced by the canonical tree
 * (skv_reduce8_avx2). The f16 rows are converted once per 8-row tile into scratch,
 * laid out pair by pair, and reused for every token. */
#include "quant/types_kernels.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/f16.h"
#include "quant/simd_avx2.h"

#define TILE_T 6 /* tokens per tile: 4 x 6 accumulators + 4 weights + 1 token = 29 of 32 registers */

static inline const uint16_t *row16(const void *W, size_t rb, size_t r)
{
    return (const uint16_t *)(const void *)((const uint8_t *)W + r * rb);
}

/* dst = rows 0..7 (f16, rb apart) as f32 over [0, n8): pair p at dst + p * 2 * n8, in
 * runs of 8 values alternating row 2p and row 2p + 1. */
static void pack8(float *dst, const void *W, size_t rb, size_t n8)
{
    for (size_t p = 0; p < 4; p++) {
        const uint16_t *a = row16(W, rb, 2 * p), *b = row16(W, rb, 2 * p + 1);
        float *d = dst + p * 2 * n8;
        for (size_t j = 0; j < n8; j += 8) {
            _mm256_storeu_ps(d + 2 * j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + j))));
            _mm256_storeu_ps(d + 2 * j + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + j))));
        }
    }
}

static inline __m512 bcast8(const float *p)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

/* The 4 * TT chains of TT tokens over n packed columns of P (pair p at P + p * 2 * n): for
 * each group of 8 columns, ascending, one fma per chain. */
static inline __attribute__((always_inline)) void chains8(__m512 *acc, const float *P, size_t n, const float *x,
                                                          size_t ldx, const int TT)
{
    for (size_t j = 0; j < n; j += 8) {
        __m512 w[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) w[p] = _mm512_loadu_ps(P + (size_t)p * 2 * n + 2 * j);
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) {
            __m512 xv = bcast8(x + (size_t)t * ldx + j);
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) acc[4 * t + p] = _mm512_fmadd_ps(w[p], xv, acc[4 * t + p]);
        }
    }
}

/* y[t*ldy + 0..8) for TT tokens from the packed 8-row tile P; K's tail (K > n8) from the
 * f16 rows, after the reduction as in the reference. */
static inline __attribute__((always_inline)) void tile8(float *y, size_t ldy, const float *P, const void *W, size_t rb,
                                                        size_t K, size_t n8, const float *x, size_t ldx, const int TT)
{
    __m512 acc[4 * TILE_T];
#pragma GCC unroll 24
    for (int i = 0; i < 4 * TT; i++) acc[i] = _mm512_setzero_ps();
    chains8(acc, P, n8, x, ldx, TT);
    for (int t = 0; t < TT; t++) {
        __m256 h[8];
        float o[8];
        for (int p = 0; p < 4; p++) {
            h[2 * p] = _mm512_castps512_ps256(acc[4 * t + p]);
            h[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[4 * t + p]), 1));
        }
        _mm256_storeu_ps(o, skv_reduce8_avx2(h));
        for (int r = 0; r < 8; r++) {
            const uint16_t *wr = row16(W, rb, (size_t)r);
            for (size_t k = n8; k < K; k++) o[r] = fmaf(skv_f16_to_f32(wr[k]), x[(size_t)t * ldx + k], o[r]);
        }
        memcpy(y + (size_t)t * ldy, o, sizeof o);
    }
}

static void tokens8(float *y, size_t ldy, const float *P, const void *W, size_t rb, size_t K, const float *x,
                    size_t ldx, size_t T)
{
    size_t n8 = K & ~(size_t)7, t = 0;
    for (; t + TILE_T <= T; t += TILE_T) tile8(y + t * ldy, ldy, P, W, rb, K, n8, x + t * ldx, ldx, TILE_T);
    switch (T - t) {
    case 5: tile8(y + t * ldy, ldy, P, W, rb, K, n8, x + t * ldx, ldx, 5); break;
    case 4: tile8(y + t * ldy, ldy, P, W, rb, K, n8, x + t * ldx, ldx, 4); break;
    case 3: tile8(y + t * ldy, ldy, P, W, rb, K, n8, x + t * ldx, ldx, 3); break;
    case 2: tile8(y + t * ldy, ldy, P, W, rb, K, n8, x + t * ldx, ldx, 2); break;
    case 1: tile8(y + t * ldy, ldy, P, W, rb, K, n8, x + t * ldx, ldx, 1); break;
    default: break;
    }
}

/* ---- K in blocks: the packed rows stay in L1 ----
 * For K >= 2 * KBLK the 8 rows are packed KBLK columns at a time (8 x 256 floats, 8 KiB)
 * and every token tile runs over that block before the next is packed; each tile's 24
 * accumulators wait in scratch between blocks. A lane's chain is the same fmas in the
 * same order (stores and loads of f32 are exact), so the bits are the unblocked ones.
 * Whole-K packing (above) wrote 8 x K floats (64-176 KiB for 2048-5632) through L1 into
 * L2 and read them back per token tile: at 33 tokens a pass of a 1.1B F16 model spent
 * 44% of its time packing (2026-12-04, AMD EPYC). The f16 rows of the block after next
 * are prefetched while a block is packed (the next 8 rows' first blocks at the end of a
 * tile; a prefetch never faults, so the rows past n_rows -- the next task's -- are
 * fetched too), so the weights stream from memory while the FMAs run. */
#define KBLK 256
#define ACC_FLOATS (4 * 16) /* one token's 4 zmm accumulators */

/* dst = rows 0..7 over columns [k0, k0 + kb) as pack8 lays them out (pair p at dst + p *
 * 2 * kb); pf: the 8 rows to prefetch (rb apart), from byte pfo of each row, 2 * kb bytes. */
static void pack8_block(float *dst, const void *W, size_t rb, size_t k0, size_t kb, const uint8_t *pf, size_t pfo)
{
    for (size_t p = 0; p < 4; p++) {
        const uint16_t *a = row16(W, rb, 2 * p) + k0, *b = row16(W, rb, 2 * p + 1) + k0;
        const uint8_t *pa = pf + 2 * p * rb + pfo, *pb = pa + rb;
        float *d = dst + p * 2 * kb;
        for (size_t j = 0; j < kb; j += 8) {
            if ((j & 31) == 0) {
                _mm_prefetch((const char *)(pa + 2 * j), _MM_HINT_T0);
                _mm_prefetch((const char *)(pb + 2 * j), _MM_HINT_T0);
            }
            _mm256_storeu_ps(d + 2 * j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + j))));
            _mm256_storeu_ps(d + 2 * j + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + j))));
        }
    }
}

/* TT tokens' chains over one packed block: acc (ACC_FLOATS per token) in and out; first:
 * start from zero. x points at the block's first column. */
static inline __attribute__((always_inline)) void tile8_block(float *acc_mem, const float *P, size_t kb, const float *x,
                                                              size_t ldx, const int TT, int first)
{
    __m512 acc[4 * TILE_T];
#pragma GCC unroll 24
    for (int i = 0; i < 4 * TT; i++) acc[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem + 16 * i);
    chains8(acc, P, kb, x, ldx, TT);
#pragma GCC unroll 24
    for (int i = 0; i < 4 * TT; i++) _mm512_storeu_ps(acc_mem + 16 * i, acc[i]);
}

/* The T tokens in ceil(T / TILE_T) tiles of as equal sizes as can be (33: 6 6 6 5 5 5, not
 * five of 6 and one of 3: a small tile does the weight loads of a full one for fewer FMAs). */
static void tokens8_block(float *acc_mem, const float *P, size_t kb, const float *x, size_t ldx, size_t T, int first)
{
    size_t n_tiles = (T + TILE_T - 1) / TILE_T, t = 0;
    for (size_t i = 0; i < n_tiles; i++) {
        size_t tt = T / n_tiles + (i < T % n_tiles);
        float *a = acc_mem + t * ACC_FLOATS;
        const float *xt = x + t * ldx;
        switch (tt) {
        case 6: tile8_block(a, P, kb, xt, ldx, 6, first); break;
        case 5: tile8_block(a, P, kb, xt, ldx, 5, first); break;
        case 4: tile8_block(a, P, kb, xt, ldx, 4, first); break;
        case 3: tile8_block(a, P, kb, xt, ldx, 3, first); break;
        case 2: tile8_block(a, P, kb, xt, ldx, 2, first); break;
        default: tile8_block(a, P, kb, xt, ldx, 1, first); break;
        }
        t += tt;
    }
}

/* y[t*ldy + 0..8) for T tokens from their accumulators: the canonical reduction, then K's
 * tail (K > n8) from the f16 rows, as tile8 does. */
static void finish8(float *y, size_t ldy, const float *acc_mem, const void *W, size_t rb, size_t K, size_t n8,
                    const float *x, size_t ldx, size_t T)
{
    for (size_t t = 0; t < T; t++) {
        __m256 h[8];
        float o[8];
        for (int p = 0; p < 4; p++) {
            __m512 a = _mm512_loadu_ps(acc_mem + t * ACC_FLOATS + 16 * (size_t)p);
            h[2 * p] = _mm512_castps512_ps256(a);
            h[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
        }
        _mm256_storeu_ps(o, skv_reduce8_avx2(h));
        for (int r = 0; r < 8; r++) {
            const uint16_t *wr = row16(W, rb, (size_t)r);
            for (size_t k = n8; k < K; k++) o[r] = fmaf(skv_f16_to_f32(wr[k]), x[t * ldx + k], o[r]);
        }
        memcpy(y + t * ldy, o, sizeof o);
    }
}

/* 8 rows at Wr, all T tokens, K in blocks; scratch: 8 * KBLK floats of packed block, then
 * tc * ACC_FLOATS of accumulators (tc tokens at a time). */
static void rows8_blocked(float *y, size_t ldy, const void *Wr, size_t rb, size_t K, size_t n8, const float *x,
                          size_t ldx, size_t T, float *scratch, size_t tc)
{
    float *P = scratch, *acc = scratch + 8 * KBLK;
    const uint8_t *W8 = Wr, *next = W8 + 8 * rb;
    size_t nb = (n8 + KBLK - 1) / KBLK;
    for (size_t t0 = 0; t0 < T; t0 += tc) {
        size_t tn = T - t0 < tc ? T - t0 : tc;
        for (size_t b = 0; b < nb; b++) {
            size_t k0 = b * KBLK, kb = n8 - k0 < KBLK ? n8 - k0 : KBLK;
            /* the block after next: these rows', else (the last chunk of tokens) the next 8 rows' */
            size_t pb = b + 2;
            const uint8_t *pf = W8;
            if (pb >= nb) {
                pb -= nb;
                if (t0 + tn >= T) pf = next;
            }
            pack8_block(P, Wr, rb, k0, kb, pf, pb * KBLK * 2);
            tokens8_block(acc, P, kb, x + t0 * ldx + k0, ldx, tn, b == 0);
        }
        finish8(y + t0 * ldy, ldy, acc, Wr, rb, K, n8, x + t0 * ldx, ldx, tn);
    }
}

void skv_f16_matmul_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                           size_t T, size_t n_rows, float *scratch)
{
    size_t r = 0, n8 = K & ~(size_t)7;
    /* tokens whose accumulators fit in the 8 * K floats of scratch beside the packed block */
    size_t tc = n8 >= 2 * KBLK ? (8 * K - 8 * KBLK) / ACC_FLOATS : 0;
    for (; r + 8 <= n_rows; r += 8) {
        const void *Wr = (const uint8_t *)W + r * row_bytes;
        if (tc) {
            rows8_blocked(y + r, ldy, Wr, row_bytes, K, n8, x, ldx, T, scratch, tc);
            continue;
        }
        pack8(scratch, Wr, row_bytes, n8);
        tokens8(y + r, ldy, scratch, Wr, row_bytes, K, x, ldx, T);
    }
    if (r < n_rows)
        skv_f16_matmul_tiles_avx2(y + r, ldy, (const uint8_t *)W + r * row_bytes, row_bytes, K, x, ldx, T, n_rows - r);
}

/* ---- small batches (2 <= T < SKV_F16_MATMUL_WIDE_T): no scratch, weights converted in
 * registers. A tile is 4 rows (two zmm of two rows' 8-lane chains) x up to SMALL_T tokens:
 * each group of 8 halves of the 4 rows is converted once and used for all the tile's
 * tokens (the AVX2 tiles convert it once per 4 tokens). Same chains, same reduction. */
#define SMALL_T 8 /* 2 x 8 accumulators + 2 weights + 1 token = 19 of 32 registers */

static inline __m512 cvt_pair(const uint16_t *a, const uint16_t *b)
{
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
                                        _mm_loadu_si128((const __m128i *)(const void *)b), 1);
    return _mm512_cvtph_ps(h);
}

/* y[t*ldy + 0..4) of TT tokens from acc (token t: rows 0,1 in acc[2t], rows 2,3 in
 * acc[2t+1]): the canonical reduction two tokens at a time, then K's tail per output. */
static inline __attribute__((always_inline)) void finish4(float *y, size_t ldy, const __m512 *acc, const void *W,
                                                          size_t rb, size_t K, size_t n8, const float *x, size_t ldx,
                                                          const int TT)
{
    for (int t = 0; t < TT; t += 2) {
        __m256 h[8];
        float o[8];
        for (int u = 0; u < 2; u++)
            for (int p = 0; p < 2; p++) {
                __m512 a = t + u < TT ? acc[2 * (t + u) + p] : _mm512_setzero_ps();
                h[4 * u + 2 * p] = _mm512_castps512_ps256(a);
                h[4 * u + 2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
            }
        _mm256_storeu_ps(o, skv_reduce8_avx2(h));
        for (int u = 0; u < 2 && t + u < TT; u++)
            for (int r = 0; r < 4; r++) {
                const uint16_t *wr = row16(W, rb, (size_t)r);
                const float *xt = x + (size_t)(t + u) * ldx;
                float s = o[4 * u + r];
                for (size_t k = n8; k < K; k++) s = fmaf(skv_f16_to_f32(wr[k]), xt[k], s);
                y[(size_t)(t + u) * ldy + (size_t)r] = s;
            }
    }
}

/* 4 rows x TT tokens; pf: prefetch the next 4 rows (the weights stream from L3 in runs
 * too short for the hardware prefetcher), done by the first token group only. */
static inline __attribute__((always_inline)) void tile4(float *y, size_t ldy, const void *W, size_t rb, size_t K,
                                                        size_t n8, const float *x, size_t ldx, const int TT, int pf)
{
    __m512 acc[2 * SMALL_T];
    const uint16_t *w0 = row16(W, rb, 0), *w1 = row16(W, rb, 1), *w2 = row16(W, rb, 2), *w3 = row16(W, rb, 3);
    uintptr_t nx = (uintptr_t)W + 4 * rb;
#pragma GCC unroll 16
    for (int i = 0; i < 2 * TT; i++) acc[i] = _mm512_setzero_ps();
    for (size_t j = 0; j < n8; j += 8) {
        if (pf && (j & 31) == 0)
            for (size_t r = 0; r < 4; r++) _mm_prefetch((const char *)(nx + r * rb + 2 * j), _MM_HINT_T0);
        __m512 a = cvt_pair(w0 + j, w1 + j), b = cvt_pair(w2 + j, w3 + j);
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m512 xv = bcast8(x + (size_t)t * ldx + j);
            acc[2 * t] = _mm512_fmadd_ps(a, xv, acc[2 * t]);
            acc[2 * t + 1] = _mm512_fmadd_ps(b, xv, acc[2 * t + 1]);
        }
    }
    finish4(y, ldy, acc, W, rb, K, n8, x, ldx, TT);
}

static void tokens4(float *y, size_t ldy, const void *W, size_t rb, size_t K, size_t n8, const float *x, size_t ldx,
                    size_t TT, int pf)
{
    switch (TT) {
    case 8: tile4(y, ldy, W, rb, K, n8, x, ldx, 8, pf); break;
    case 7: tile4(y, ldy, W, rb, K, n8, x, ldx, 7, pf); break;
    case 6: tile4(y, ldy, W, rb, K, n8, x, ldx, 6, pf); break;
    case 5: tile4(y, ldy, W, rb, K, n8, x, ldx, 5, pf); break;
    case 4: tile4(y, ldy, W, rb, K, n8, x, ldx, 4, pf); break;
    case 3: tile4(y, ldy, W, rb, K, n8, x, ldx, 3, pf); break;
    case 2: tile4(y, ldy, W, rb, K, n8, x, ldx, 2, pf); break;
    default: tile4(y, ldy, W, rb, K, n8, x, ldx, 1, pf); break;
    }
}

void skv_f16_matmul_avx512_small(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                                 size_t ldx, size_t T, size_t n_rows)
{
    size_t r = 0, n8 = K & ~(size_t)7;
    for (; r + 4 <= n_rows; r += 4) {
        const void *Wr = (const uint8_t *)W + r * row_bytes;
        for (size_t t = 0; t < T; t += SMALL_T)
            tokens4(y + t * ldy + r, ldy, Wr, row_bytes, K, n8, x + t * ldx, ldx, T - t < SMALL_T ? T - t : SMALL_T,
                    t == 0);
    }
    if (r < n_rows) /* fewer than 4 rows: the AVX2 tiles */
        skv_f16_matmul_tiles_avx2(y + r, ldy, (const uint8_t *)W + r * row_bytes, row_bytes, K, x, ldx, T, n_rows - r);
}

/* ---- packed rows (quant/repack.h): an 8-row group's chunk of 8 values is 128 bytes, rows
 * 2p and 2p + 1 at 32 p, so one 32-byte load converts to exactly the pair layout of
 * chains8 (a zmm of two rows' 8-lane chains). The group is read as one stream, converted
 * in registers once per tile of up to 6 tokens. ---- */
/* 16 binary16 (bf16 = 0) or bfloat16 (bf16 = 1) values at p as floats, exactly. */
static inline __attribute__((always_inline)) __m512 cvt16(const uint8_t *p, const int bf16)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

static inline __attribute__((always_inline)) void tile8_packed(float *y, size_t ldy, const uint8_t *G, size_t K,
                                                               const float *x, size_t ldx, const int TT,
                                                               const uint8_t *pf, const int bf16)
{
    __m512 acc[4 * TILE_T];
#pragma GCC unroll 24
    for (int i = 0; i < 4 * TT; i++) acc[i] = _mm512_setzero_ps();
    for (size_t j = 0; j < K; j += 8) {
        const uint8_t *c = G + 16 * j;
        __m512 w[4];
        if (pf) {
            _mm_prefetch((const char *)(pf + 16 * j), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 16 * j + 64), _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) w[p] = cvt16(c + 32 * p, bf16);
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) {
            __m512 xv = bcast8(x + (size_t)t * ldx + j);
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) acc[4 * t + p] = _mm512_fmadd_ps(w[p], xv, acc[4 * t + p]);
        }
    }
    for (int t = 0; t < TT; t++) {
        __m256 h[8];
        for (int p = 0; p < 4; p++) {
            h[2 * p] = _mm512_castps512_ps256(acc[4 * t + p]);
            h[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[4 * t + p]), 1));
        }
        _mm256_storeu_ps(y + (size_t)t * ldy, skv_reduce8_avx2(h));
    }
}

/* Per 8-row group the T tokens in tiles of as equal sizes as can be (tokens8_block's rule),
 * the first prefetching the group's stream 4 KiB ahead. */
static inline __attribute__((always_inline)) void matmul_packed(float *y, size_t ldy, const void *P, size_t K,
                                                                const float *x, size_t ldx, size_t T, size_t n_rows,
                                                                const int bf16)
{
    size_t n_tiles = (T + TILE_T - 1) / TILE_T;
    for (size_t r = 0; r < n_rows; r += 8) {
        const uint8_t *G = (const uint8_t *)P + r * 2 * K;
        for (size_t i = 0, t = 0; i < n_tiles; i++) {
            size_t tt = T / n_tiles + (i < T % n_tiles);
            const uint8_t *pf = i ? NULL : G + 4096;
            float *yt = y + t * ldy + r;
            const float *xt = x + t * ldx;
            switch (tt) {
            case 6: tile8_packed(yt, ldy, G, K, xt, ldx, 6, pf, bf16); break;
            case 5: tile8_packed(yt, ldy, G, K, xt, ldx, 5, pf, bf16); break;
            case 4: tile8_packed(yt, ldy, G, K, xt, ldx, 4, pf, bf16); break;
            case 3: tile8_packed(yt, ldy, G, K, xt, ldx, 3, pf, bf16); break;
            case 2: tile8_packed(yt, ldy, G, K, xt, ldx, 2, pf, bf16); break;
            default: tile8_packed(yt, ldy, G, K, xt, ldx, 1, pf, bf16); break;
            }
            t += tt;
        }
    }
}

void skv_f16_matmul_avx512_packed(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                  size_t n_rows)
{
    matmul_packed(y, ldy, P, K, x, ldx, T, n_rows, 0);
}

void skv_bf16_matmul_avx512_packed(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                   size_t n_rows)
{
    matmul_packed(y, ldy, P, K, x, ldx, T, n_rows, 1);
}

#elif defined(__x86_64__)
/* A compiler without the AVX-512 flags: the AVX2 kernel under this name. */
void skv_f16_matmul_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x, size_t ldx,
                           size_t T, size_t n_rows, float *scratch)
{
    (void)scratch;
    skv_f16_matmul_tiles_avx2(y, ldy, W, row_bytes, K, x, ldx, T, n_rows);
}

void skv_f16_matmul_avx512_small(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                                 size_t ldx, size_t T, size_t n_rows)
{
    skv_f16_matmul_tiles_avx2(y, ldy, W, row_bytes, K, x, ldx, T, n_rows);
}

void skv_f16_matmul_avx512_packed(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                  size_t n_rows)
{
    skv_f16_matmul_tiles_packed_avx2(y, ldy, P, K, x, ldx, T, n_rows);
}

void skv_bf16_matmul_avx512_packed(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                   size_t n_rows)
{
    skv_bf16_matmul_tiles_packed_avx2(y, ldy, P, K, x, ldx, T, n_rows);
}
#else
typedef int skv_types_avx512_unused;
#endif
