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

#include "quant/dot_x86_base.h"

/* ---- q8_0: sum q*a with the sign trick (|q| as u8, a with q's sign); with
 * VNNI (no saturation) (q + 128) as u8 times a, minus 128 * sum a ---- */
static void tile_q8_0(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                      size_t nt, size_t m)
{
    __m256 acc[NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i q[8], p[8];
        prefetch8(w, 34 * b + PF_AHEAD);
        __m256 d = scales8(w, 34 * b);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) q[i] = ld32(w[i] + 34 * b + 2);
#if SKV_DOT_VNNI
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) q[i] = _mm256_xor_si256(q[i], _mm256_set1_epi8((char)0x80)); /* q + 128 as u8 */
#else
        __m256i u[8]; /* |q| as u8, once for all tokens (with q: 16 vectors, read back from L1) */
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) u[i] = _mm256_sign_epi8(q[i], q[i]);
#endif
        for (size_t t = 0; t < nt; t++) {
            const skv_act32 *a = ACT32(qa, qs, t, b);
            __m256i av = ld32(a->qs);
#if SKV_DOT_VNNI
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) p[i] = dp_u8s8(_mm256_setzero_si256(), q[i], av);
            __m256i corr = _mm256_set1_epi32(128 * (a->bsum[0] + a->bsum[1]));
            acc[t] = fma_scaled(acc[t], d, a->d, _mm256_sub_epi32(reduce8_epi32(p), corr));
#else
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) p[i] = dp_u8s8(_mm256_setzero_si256(), u[i], _mm256_sign_epi8(av, q[i]));
            acc[t] = fma_scaled(acc[t], d, a->d, reduce8_epi32(p));
#endif
        }
    }
    store_tile(y, ldy, acc, nt, m);
}

/* ---- q4_0: sum (q - 8)*a = sum q*a - 8 * sum a ---- */
static void tile_q4_0(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                      size_t nt, size_t m)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc[NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i v[8], p[8];
        if (b % 3 == 0) prefetch8(w, 18 * b + PF_AHEAD); /* 54 bytes per 3 blocks: every line once or twice */
        __m256 d = scales8(w, 18 * b);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(w[i] + 18 * b + 2));
            v[i] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        }
        for (size_t t = 0; t < nt; t++) {
            const skv_act32 *a = ACT32(qa, qs, t, b);
            __m256i av = ld32(a->qs);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) p[i] = dp_u8s8(_mm256_setzero_si256(), v[i], av);
            __m256i isum = _mm256_sub_epi32(reduce8_epi32(p), _mm256_set1_epi32(8 * (a->bsum[0] + a->bsum[1])));
            acc[t] = fma_scaled(acc[t], d, a->d, isum);
        }
    }
    store_tile(y, ldy, acc, nt, m);
}

/* ---- q4_k: 8 runs of 32 nibbles, each with a 6-bit scale and min ---- */

/* One q4_k weight block of the 8 rows, unpacked once for all tokens. */
typedef struct {
    __m256i u[8][8];   /* [row][run]: the 32 nibbles of run c */
    __m256i sc[8][8];  /* [row][run]: the run's scale in every int16 lane */
    __m256i mn[4];     /* [k]: lane r = (mn[2k], mn[2k+1]) of row r, int16 pairs */
    __m256 d, dm;      /* the rows' d and m */
} q4k_unpacked;

static void q4_k_unpack(q4k_unpacked *o, const uint8_t *const w[8], size_t b)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    int32_t mp[4][8];
    for (int i = 0; i < 8; i++) {
        const uint8_t *blk = w[i] + 144 * b;
        uint8_t sc[8], mn[8];
        skv_k4_scales8(blk + 4, sc, mn);
        for (int c = 0; c < 4; c++) {
            __m256i q = ld32(blk + 16 + 32 * c);
            o->u[i][2 * c] = _mm256_and_si256(q, m4);
            o->u[i][2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        for (int s = 0; s < 8; s++) o->sc[i][s] = _mm256_set1_epi16((short)sc[s]);
        for (int k = 0; k < 4; k++) mp[k][i] = pair16(mn[2 * k], mn[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) o->mn[k] = ld32(mp[k]);
    o->d = scales8(w, 144 * b);
    o->dm = _mm256_xor_ps(scales8(w, 144 * b + 2), _mm256_set1_ps(-0.0f));
}

/* The 8 rows' isum of q4_k block b against one token's values av (multiplied as
 * they are unpacked: decode has no other token to share an unpacked copy with). */
static inline __m256i q4_k_isum1(const uint8_t *const w[8], size_t b, const __m256i av[8], __m256i mn[4])
{
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i p[8];
    int32_t mp[4][8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const uint8_t *blk = w[i] + 144 * b;
        uint8_t sc[8], mnb[8];
        __m256i s = _mm256_setzero_si256();
        skv_k4_scales8(blk + 4, sc, mnb);
        for (int c = 0; c < 4; c++) {
            __m256i q = ld32(blk + 16 + 32 * c), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            s = dp_sc16(s, _mm256_and_si256(q, m4), av[2 * c], _mm256_set1_epi16((short)sc[2 * c]));
            s = dp_sc16(s, hi, av[2 * c + 1], _mm256_set1_epi16((short)sc[2 * c + 1]));
        }
        p[i] = s;
        for (int k = 0; k < 4; k++) mp[k][i] = pair16(mnb[2 * k], mnb[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) mn[k] = ld32(mp[k]);
    return reduce8_epi32(p);
}

/* tile_q4_k for one token. */
static void tile1_q4_k(float *y, const uint8_t *const w[8], const uint8_t *qa, size_t nb, size_t m)
{
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const skv_act256 *a = ACT256(qa, 0, 0, b);
        __m256i av[8], mn[4];
        int32_t as[4];
        for (int c = 0; c < 3; c++) prefetch8(w, 144 * b + PF_AHEAD + 64 * c);
        for (int s = 0; s < 8; s++) av[s] = ld32(a->qs + 32 * s);
        for (int k = 0; k < 4; k++)
            as[k] = pair16(a->bsum[4 * k] + a->bsum[4 * k + 1], a->bsum[4 * k + 2] + a->bsum[4 * k + 3]);
        __m256i isum = q4_k_isum1(w, b, av, mn);
        __m256 dx = _mm256_set1_ps(a->d), dm = _mm256_xor_ps(scales8(w, 144 * b + 2), _mm256_set1_ps(-0.0f));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(scales8(w, 144 * b), dx), _mm256_cvtepi32_ps(isum), acc);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(madd_pairs(mn, as, 4)), acc);
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    memcpy(y, o, m * sizeof(float));
}

static void tile_q4_k(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                      size_t nt, size_t m)
{
    __m256 acc[NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    q4k_unpacked u;
    if (nt == 1) {
        tile1_q4_k(y, w, qa, nb, m);
        return;
    }
    for (size_t b = 0; b < nb; b++) {
        for (int c = 0; c < 3; c++) prefetch8(w, 144 * b + PF_AHEAD + 64 * c);
        q4_k_unpack(&u, w, b);
        for (size_t t = 0; t < nt; t++) {
            const skv_act256 *a = ACT256(qa, qs, t, b);
            __m256i av[8], p[8];
            int32_t as[4];
            for (int s = 0; s < 8; s++) av[s] = ld32(a->qs + 32 * s);
            for (int k = 0; k < 4; k++)
                as[k] = pair16(a->bsum[4 * k] + a->bsum[4 * k + 1], a->bsum[4 * k + 2] + a->bsum[4 * k + 3]);
            for (int i = 0; i < 8; i++) {
                p[i] = _mm256_setzero_si256();
                for (int s = 0; s < 8; s++) p[i] = dp_sc16(p[i], u.u[i][s], av[s], u.sc[i][s]);
            }
            __m256 dx = _mm256_set1_ps(a->d);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(u.d, dx), _mm256_cvtepi32_ps(reduce8_epi32(p)), acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(u.dm, dx), _mm256_cvtepi32_ps(madd_pairs(u.mn, as, 4)), acc[t]);
        }
    }
    store_tile(y, ldy, acc, nt, m);
}

/* ---- q6_k: 16 runs of 16 six-bit values q - 32, int8 scales ---- */

/* One q6_k weight block of the 8 rows, unpacked once for all tokens. */
typedef struct {
    __m256i u[8][8];  /* [row][j]: values 32j .. 32j+31 (unsigned, q + 32) */
    __m256i sc[8][8]; /* [row][j]: scales of runs 2j (low 16 bytes) and 2j+1 (high) as int16 */
    __m256i sp[8];    /* [k]: lane r = (sc[2k], sc[2k+1]) of row r, int16 pairs */
    __m256 d;
} q6k_unpacked;

static void q6_k_unpack(q6k_unpacked *o, const uint8_t *const w[8], size_t b)
{
    int32_t sp[8][8];
    for (int i = 0; i < 8; i++) {
        const uint8_t *blk = w[i] + 210 * b;
        const int8_t *sc = (const int8_t *)(const void *)(blk + 192);
        for (int g = 0; g < 2; g++) {
            __m256i l0 = ld32(blk + 64 * g), l1 = ld32(blk + 64 * g + 32), h = ld32(blk + 128 + 32 * g);
            for (int k = 0; k < 4; k++) {
                int s = 8 * g + 2 * k;
                o->u[i][4 * g + k] = q6_values(l0, l1, h, k);
                o->sc[i][4 * g + k] = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
            }
        }
        for (int k = 0; k < 8; k++) sp[k][i] = pair16(sc[2 * k], sc[2 * k + 1]);
    }
    for (int k = 0; k < 8; k++) o->sp[k] = ld32(sp[k]);
    o->d = scales8(w, 210 * b + 208);
}

static void tile_q6_k(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                      size_t nt, size_t m)
{
    __m256 acc[NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    q6k_unpacked u;
    for (size_t b = 0; b < nb; b++) {
        for (int c = 0; c < 4; c++) prefetch8(w, 210 * b + PF_AHEAD + 64 * c);
        q6_k_unpack(&u, w, b);
        for (size_t t = 0; t < nt; t++) {
            const skv_act256 *a = ACT256(qa, qs, t, b);
            __m256i av[8], p[8];
            int32_t bs[8];
            act256_regs(a, av, bs);
            for (int i = 0; i < 8; i++) {
                p[i] = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) p[i] = dp_sc16(p[i], u.u[i][j], av[j], u.sc[i][j]);
            }
            __m256i corr = _mm256_slli_epi32(madd_pairs(u.sp, bs, 8), 5);
            acc[t] = fma_scaled(acc[t], u.d, a->d, _mm256_sub_epi32(reduce8_epi32(p), corr));
        }
    }
    store_tile(y, ldy, acc, nt, m);
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
#if SKV_DOT_VNNI
SKV_DOT_GEMM(q4_k, 256)
SKV_DOT_GEMM(q6_k, 256)
#else
/* Decode here; prefill in dot_ext_x86.h's tokens-in-lanes tiles (four loads per 32
 * products in the row tiles above against one there). */
#define SKV_DOT_GEMM_TOK(name)                                                                                    \
    void SKV_DOT_FN(name)(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride, \
                          size_t K, size_t T, size_t n_rows)                                                      \
    {                                                                                                             \
        if (T > 1)                                                                                                \
            skv_gemm_##name##_tok_avx2(y, ldy, W, row_bytes, qa, qa_stride, K, T, n_rows);                        \
        else                                                                                                      \
            gemm_tiles(y, ldy, W, row_bytes, qa, qa_stride, K / 256, T, n_rows, tile_##name);                     \
    }
SKV_DOT_GEMM_TOK(q4_k)
SKV_DOT_GEMM_TOK(q6_k)
#endif

#endif
