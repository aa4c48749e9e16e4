/* The x86 twins of the integer dot kernels (dot.h) for the types without a kernel of
 * their own in dot_x86.h: q4_1, q5_0, q5_1, iq4_nl (blocks of 32) and q2_k, q3_k,
 * q5_k, iq4_xs (blocks of 256).  One source built twice, like dot_x86.h:
 * dot_ext_avx2.c (SKV_DOT_VNNI 0) and dot_avx512.c (SKV_DOT_VNNI 1), whose lanes
 * kernels take full groups of 16 tokens from the same unpackers.
 *
 * Each type is an unpacker that turns one weight block of a row into 32-byte chunks
 * of small values u, per-16 scales sc and mins mn, d and c (the min factor), such that
 * the block's exact integer sums of dot.h are
 *
 *   isum = sum_g sc[g] * sum_{i in g} u[i] a[i]  -  bias * sum_g sc[g] * bsum[g]
 *   imin = sum_g mn[g] * bsum[g]
 *
 * (q = u - bias).  Two generic tiles, one per block size, run them over 8 rows x up to
 * NT = 8 tokens (dot_x86_base.h) and each lane runs the reference's
 * float chain:
 *
 *   acc = fma(d * dx, (float)isum, acc);  acc = fma(c * dx, (float)imin, acc)
 *
 * with c * dx = -(m * dx) of dot.c exactly (a negation commutes with a rounded
 * product).  The iq4 types' levels (-127..113) do not fit the u8 side of maddubs
 * pairs within int16, so they use the sign trick: |q| as u8 times a with q's sign.
 * That is exact for every activation value but -128, which the act quantizers never
 * give for finite inputs (dot.c: q8_0 clamps to +-127; q8_K maps the largest
 * magnitude to -127).  Bounds of the int16 pairs: u <= 31 with |a| <= 128, or
 * |q| <= 127 with |a| <= 127: below 2^15.  Include only from a file that defines
 * SKV_DOT_VNNI and SKV_DOT_FN(name). */
#ifndef SKV_DOT_EXT_X86_H
#define SKV_DOT_EXT_X86_H

#include "quant/dot_x86_base.h"
#include "quant/qblocks.h"

#define EXT_INLINE static inline __attribute__((always_inline))

/* The types of this file, as the compile-time constant `kind` of the tiles. */
enum { EXT_Q4_1, EXT_Q5_0, EXT_Q5_1, EXT_IQ4_NL, EXT_Q2_K, EXT_Q3_K, EXT_Q5_K, EXT_IQ4_XS, EXT_Q4_K, EXT_Q6_K };

/* Block bytes, offset of d, offset of the min factor's binary16 (-1: no min), bias. */
static const struct {
    int bytes, d_off, m_off, bias, is_signed;
} k_ext[] = {
    [EXT_Q4_1] = {20, 0, 2, 0, 0},   [EXT_Q5_0] = {22, 0, -1, 16, 0}, [EXT_Q5_1] = {24, 0, 2, 0, 0},
    [EXT_IQ4_NL] = {18, 0, -1, 0, 1}, [EXT_Q2_K] = {84, 80, 82, 0, 0}, [EXT_Q3_K] = {110, 108, -1, 4, 0},
    [EXT_Q5_K] = {176, 0, 2, 0, 0},  [EXT_IQ4_XS] = {136, 0, -1, 0, 1}, [EXT_Q4_K] = {144, 0, 2, 0, 0},
    [EXT_Q6_K] = {210, 208, -1, 32, 0},
};

/* 16 bytes of nibble pairs as 32 values: low nibbles (values 0..15), then high ones. */
static inline __m256i nibbles32(const uint8_t *p)
{
    __m128i q = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}

/* The little-endian 32-bit word at p (x86: a plain load). */
static inline uint32_t rd32le(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Byte j = 0x10 where bit j of the little-endian 32-bit word at p is set, else 0. */
static inline __m256i bits32_as_0x10(const uint8_t *p)
{
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)rd32le(p)), spread); /* byte j: byte j/8 */
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, bit), bit), _mm256_set1_epi8(0x10));
}

/* Byte j = v where bit s of byte j of h is set, else 0. */
static inline __m256i bit_as(__m256i h, int s, char v)
{
    const __m256i m = _mm256_set1_epi8((char)(1 << s));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, m), m), _mm256_set1_epi8(v));
}

/* The iq4 levels of 32 nibble values. */
static inline __m256i iq4_levels(__m256i idx)
{
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)skv_iq4nl_levels));
    return _mm256_shuffle_epi8(lut, idx);
}

/* Asks for the lines of block b of the next tile's 8 rows: rows r0 .. r0+7 are contiguous
 * (w[i] = w[0] + i * row_bytes), so the next tile's row i is w[i] + 8 * row_bytes.  Decode
 * streams the weights from memory; one tile of lookahead keeps them coming when a row is
 * short (a 2048-value q5_k row is 1408 bytes: a prefetch a fixed distance ahead within the
 * row would fall into rows already streaming).  A short tile (w[1] == w[0]) asks again for
 * its own lines, which costs nothing. */
static inline void prefetch_next_tile(const uint8_t *const w[8], size_t off, size_t bytes)
{
    size_t next = 8 * (size_t)(w[1] - w[0]);
    for (size_t c = 0; c < bytes; c += 64) prefetch8(w, next + off + c);
}

/* The 32 values of a 32-value block (u, or the signed levels). */
EXT_INLINE __m256i values32(const uint8_t *blk, const int kind)
{
    switch (kind) {
    case EXT_Q4_1: return nibbles32(blk + 4);
    case EXT_Q5_0: return _mm256_or_si256(nibbles32(blk + 6), bits32_as_0x10(blk + 2));
    case EXT_Q5_1: return _mm256_or_si256(nibbles32(blk + 8), bits32_as_0x10(blk + 4));
    default: return iq4_levels(nibbles32(blk + 2));
    }
}

/* The 8 rows' chain over nb blocks of 32 for nt tokens. */
EXT_INLINE void tile32(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                       size_t nt, size_t m, const int kind)
{
    const size_t bytes = (size_t)k_ext[kind].bytes;
    const int bias = k_ext[kind].bias, has_min = k_ext[kind].m_off >= 0, sgn = k_ext[kind].is_signed;
    __m256 acc[NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i v[8], u[8], p[8];
        if (b % 3 == 0) prefetch_next_tile(w, bytes * b, 3 * bytes);
        __m256 d = scales8(w, bytes * b), c = has_min ? scales8(w, bytes * b + 2) : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) v[i] = values32(w[i] + bytes * b, kind), u[i] = sgn ? _mm256_abs_epi8(v[i]) : v[i];
        for (size_t t = 0; t < nt; t++) {
            const skv_act32 *a = ACT32(qa, qs, t, b);
            __m256i av = ld32(a->qs);
            int32_t asum = a->bsum[0] + a->bsum[1];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) p[i] = dp_u8s8(_mm256_setzero_si256(), u[i], sgn ? _mm256_sign_epi8(av, v[i]) : av);
            __m256i isum = reduce8_epi32(p);
            if (bias) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(bias * asum));
            acc[t] = fma_scaled(acc[t], d, a->d, isum);
            if (has_min) acc[t] = fma_scaled(acc[t], c, a->d, _mm256_set1_epi32(asum));
        }
    }
    store_tile(y, ldy, acc, nt, m);
}

/* ---- blocks of 256 ---- */

/* One weight block of the 8 rows, unpacked once for all tokens of a tile. */
typedef struct {
    __m256i u[8][8];  /* [row][j]: values 32j .. 32j+31 (u8; |q| for the signed types) */
    __m256i s[8][8];  /* [row][j]: the signed types' levels (their signs), else unused */
    __m256i sc[8][8]; /* [row][j]: scales of groups 2j (low 16 bytes) and 2j+1 (high) as int16 */
    __m256i sv[8];    /* [row]: the 16 group scales as int16 (bias term) */
    __m256i mv[8];    /* [row]: the 16 group mins as int16 (min term) */
    __m256 d, c;
} ext_unpacked;

/* The 16 scales of a q3_k block from its 12 packed bytes, less 32, as int8: the low
 * nibbles of bytes 0..7 then their high nibbles, with two bits of bytes 8..11 on top
 * (group s: byte 8 + s % 4, bits 2 * (s / 4)). */
static inline __m128i q3k_scales(const uint8_t *q)
{
    const uint64_t m4 = 0x0F0F0F0F0F0F0F0Full;
    const uint32_t m2 = 0x03030303u;
    uint64_t L;
    uint32_t H;
    memcpy(&L, q, 8);
    memcpy(&H, q + 8, 4);
    uint64_t h0 = (uint64_t)(H & m2) | (uint64_t)((H >> 2) & m2) << 32;
    uint64_t h1 = (uint64_t)((H >> 4) & m2) | (uint64_t)((H >> 6) & m2) << 32;
    __m128i v = _mm_set_epi64x((long long)(((L >> 4) & m4) | h1 << 4), (long long)((L & m4) | h0 << 4));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/* Eight bytes, each twice, as 16 int16 (signed or not). */
static inline __m256i twice16(const uint8_t b[8], int is_signed)
{
    __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)b);
    x = _mm_unpacklo_epi8(x, x);
    return is_signed ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x);
}

/* The per-16 scales and mins of one row's block as 16 int16 each (mins zero without). */
EXT_INLINE void ext_scales_v(const uint8_t *blk, __m256i *sc, __m256i *mn, const int kind)
{
    uint8_t s8[8], m8[8];
    switch (kind) {
    case EXT_Q2_K: {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)blk), m4 = _mm_set1_epi8(15);
        *sc = _mm256_cvtepu8_epi16(_mm_and_si128(x, m4));
        *mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(x, 4), m4));
        return;
    }
    case EXT_Q3_K: *sc = _mm256_cvtepi8_epi16(q3k_scales(blk + 96)), *mn = _mm256_setzero_si256(); return;
    case EXT_Q6_K:
        *sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
        *mn = _mm256_setzero_si256();
        return;
    case EXT_Q4_K:
    case EXT_Q5_K:
        skv_k4_scales8(blk + 4, s8, m8);
        *sc = twice16(s8, 0), *mn = twice16(m8, 0);
        return;
    default: {
        /* scale r = (nibble r of scales_l | bits 2r, 2r + 1 of scales_h << 4) - 32: the nibbles
         * interleaved low, high; lane r of the product sh * 2^(14 - 2r) holds bits 2r, 2r + 1
         * of sh in its top two bits */
        const __m128i m4 = _mm_set1_epi8(15), l = _mm_cvtsi32_si128((int)rd32le(blk + 4));
        __m128i lo = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4)));
        __m128i hi = _mm_mullo_epi16(_mm_set1_epi16((short)skv_rd16le(blk + 2)),
                                     _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1));
        __m128i s16 = _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(_mm_srli_epi16(hi, 14), 4)), _mm_set1_epi16(32));
        *sc = _mm256_set_m128i(_mm_unpackhi_epi16(s16, s16), _mm_unpacklo_epi16(s16, s16));
        *mn = _mm256_setzero_si256();
        (void)s8, (void)m8;
    }
    }
}

/* The same as arrays (the AVX-512 lanes preparation). */
EXT_INLINE void ext_scales(const uint8_t *blk, int16_t sc[16], int16_t mn[16], const int kind)
{
    __m256i s, m;
    ext_scales_v(blk, &s, &m, kind);
    _mm256_storeu_si256((__m256i *)(void *)sc, s);
    _mm256_storeu_si256((__m256i *)(void *)mn, m);
}

/* Scales of groups 2j (low 16 bytes) and 2j+1 (high 16 bytes) in every int16 lane. */
static inline __m256i scale_pair(__m256i sc, int j)
{
    const __m256i lohi = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                          2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(j)), lohi);
}

/* Values 32j .. 32j+31 of one row's block (u, or the signed levels). */
EXT_INLINE __m256i values256(const uint8_t *blk, int j, const int kind)
{
    const __m256i m2 = _mm256_set1_epi8(3);
    switch (kind) {
    case EXT_Q2_K: return _mm256_and_si256(_mm256_srli_epi16(ld32(blk + 16 + 32 * (j / 4)), 2 * (j % 4)), m2);
    case EXT_Q3_K: {
        __m256i two = _mm256_and_si256(_mm256_srli_epi16(ld32(blk + 32 + 32 * (j / 4)), 2 * (j % 4)), m2);
        return _mm256_or_si256(two, bit_as(ld32(blk), j, 4)); /* q + 4 */
    }
    case EXT_Q4_K:
    case EXT_Q5_K: {
        __m256i q = ld32(blk + (kind == EXT_Q4_K ? 16 : 48) + 32 * (j / 2));
        __m256i lo = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(15));
        return kind == EXT_Q4_K ? lo : _mm256_or_si256(lo, bit_as(ld32(blk + 16), j, 0x10));
    }
    case EXT_Q6_K: {
        const uint8_t *half = blk + 64 * (j / 4);
        return q6_values(ld32(half), ld32(half + 32), ld32(blk + 128 + 32 * (j / 4)), j % 4);
    }
    default: return iq4_levels(nibbles32(blk + 8 + 16 * j));
    }
}

/* d and the min factor c (-m; zero without a min) of block b of the 8 rows. */
EXT_INLINE void scales_dc(const uint8_t *const w[8], size_t b, __m256 *d, __m256 *c, const int kind)
{
    const size_t at = (size_t)k_ext[kind].bytes * b;
    *d = scales8(w, at + (size_t)k_ext[kind].d_off);
    *c = k_ext[kind].m_off < 0 ? _mm256_setzero_ps()
                               : _mm256_xor_ps(scales8(w, at + (size_t)k_ext[kind].m_off), _mm256_set1_ps(-0.0f));
}

EXT_INLINE void unpack256(ext_unpacked *o, const uint8_t *const w[8], size_t b, const int kind)
{
    for (int i = 0; i < 8; i++) {
        const uint8_t *blk = w[i] + (size_t)k_ext[kind].bytes * b;
        ext_scales_v(blk, &o->sv[i], &o->mv[i], kind);
        for (int j = 0; j < 8; j++) {
            __m256i v = values256(blk, j, kind);
            o->u[i][j] = k_ext[kind].is_signed ? _mm256_abs_epi8(v) : v;
            if (k_ext[kind].is_signed) o->s[i][j] = v;
            o->sc[i][j] = scale_pair(o->sv[i], j);
        }
    }
    scales_dc(w, b, &o->d, &o->c, kind);
}

/* The chain step of one token from the rows' int32 partial sums p (isum before the
 * bias term) and their scales / mins sv, mv against the token's group sums bsum. */
EXT_INLINE __m256 finish256(__m256 acc, __m256i p[8], const __m256i sv[8], const __m256i mv[8], __m256 d, __m256 c,
                            const skv_act256 *a, const int kind)
{
    __m256i bsum = ld32(a->bsum), q[8];
    for (int i = 0; i < 8; i++) {
        if (k_ext[kind].bias)
            p[i] = _mm256_sub_epi32(p[i], _mm256_mullo_epi32(_mm256_madd_epi16(sv[i], bsum),
                                                             _mm256_set1_epi32(k_ext[kind].bias)));
        if (k_ext[kind].m_off >= 0) q[i] = _mm256_madd_epi16(mv[i], bsum);
    }
    acc = fma_scaled(acc, d, a->d, reduce8_epi32(p));
    if (k_ext[kind].m_off >= 0) acc = fma_scaled(acc, c, a->d, reduce8_epi32(q));
    return acc;
}

/* One token's chain step over an unpacked block of the 8 rows. */
EXT_INLINE __m256 step256(__m256 acc, const ext_unpacked *u, const skv_act256 *a, const int kind)
{
    __m256i av[8], p[8];
    for (int j = 0; j < 8; j++) av[j] = ld32(a->qs + 32 * j);
    for (int i = 0; i < 8; i++) {
        p[i] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++)
            p[i] = dp_sc16(p[i], u->u[i][j], k_ext[kind].is_signed ? _mm256_sign_epi8(av[j], u->s[i][j]) : av[j],
                           u->sc[i][j]);
    }
    return finish256(acc, p, u->sv, u->mv, u->d, u->c, a, kind);
}

/* tile256 for one token (decode): each row's values are multiplied as they are
 * unpacked, with no other token to share an unpacked copy with. */
EXT_INLINE void tile1_256(float *y, const uint8_t *const w[8], const uint8_t *qa, size_t nb, size_t m, const int kind)
{
    const size_t bytes = (size_t)k_ext[kind].bytes;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const skv_act256 *a = ACT256(qa, 0, 0, b);
        __m256i av[8], p[8], sv[8], mv[8];
        __m256 d, c;
        prefetch_next_tile(w, bytes * b, bytes);
        for (int j = 0; j < 8; j++) av[j] = ld32(a->qs + 32 * j);
        for (int i = 0; i < 8; i++) {
            const uint8_t *blk = w[i] + bytes * b;
            ext_scales_v(blk, &sv[i], &mv[i], kind);
            p[i] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                __m256i v = values256(blk, j, kind), sc = scale_pair(sv[i], j);
                p[i] = k_ext[kind].is_signed ? dp_sc16(p[i], _mm256_abs_epi8(v), _mm256_sign_epi8(av[j], v), sc)
                                             : dp_sc16(p[i], v, av[j], sc);
            }
        }
        scales_dc(w, b, &d, &c, kind);
        acc = finish256(acc, p, sv, mv, d, c, a, kind);
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    memcpy(y, o, m * sizeof(float));
}

/* The 8 rows' chain over nb blocks of 256 for nt tokens. */
EXT_INLINE void tile256(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs, size_t nb,
                        size_t nt, size_t m, const int kind)
{
    const size_t bytes = (size_t)k_ext[kind].bytes;
    __m256 acc[NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    ext_unpacked u;
    if (nt == 1) {
        tile1_256(y, w, qa, nb, m, kind);
        return;
    }
    for (size_t b = 0; b < nb; b++) {
        prefetch_next_tile(w, bytes * b, bytes);
        unpack256(&u, w, b, kind);
        for (size_t t = 0; t < nt; t++) acc[t] = step256(acc[t], &u, ACT256(qa, qs, t, b), kind);
    }
    store_tile(y, ldy, acc, nt, m);
}

#if !SKV_DOT_VNNI
/* ---- prefill without VNNI: tokens in lanes ----
 * Rows in lanes (tile256) load each row's unpacked chunk, its signs and its scales for
 * every token: four loads per 32 products, which bound the AVX2 prefill (AMD EPYC: iq4_xs
 * at 30 GMAC/s).  Here lane t of the sums is token t: a row's chunk meets 8 tokens in turn
 * (one activation load per 32 products, the chunk in registers), the 8 partial sums reduce
 * to one vector of the 8 tokens' exact isums, and the float chain runs per row over the
 * tokens' lanes (the same per-element sequence: d * dx is the reference's product).  The
 * weight blocks of 8 rows are unpacked once per TOK_CHUNK tokens into an L1 buffer; blocks
 * ascend outermost, so each output's chain keeps the reference's order. */
#define TOK_CHUNK 64 /* tokens sharing one unpacking of a weight block (8 tiles of 8) */

typedef struct {
    __m256i u[8][8], v[8][8], sc[8][8]; /* [row][j]: values (|q| if signed), signed levels, scale pairs */
    __m256i svb[8], mv[8];              /* [row]: group scales * bias, group mins (int16) */
    float d[8], c[8];                   /* [row]: d, -m */
} tok_block;

EXT_INLINE void tok_unpack(tok_block *o, const uint8_t *const w[8], size_t b, size_t m, const int kind)
{
    const size_t bytes = (size_t)k_ext[kind].bytes;
    for (size_t i = 0; i < m; i++) {
        const uint8_t *blk = w[i] + bytes * b;
        __m256i sv;
        ext_scales_v(blk, &sv, &o->mv[i], kind);
        o->svb[i] = _mm256_mullo_epi16(sv, _mm256_set1_epi16((short)k_ext[kind].bias)); /* |sc| * bias < 2^15 */
        for (int j = 0; j < 8; j++) {
            __m256i v = values256(blk, j, kind);
            o->u[i][j] = k_ext[kind].is_signed ? _mm256_abs_epi8(v) : v;
            o->v[i][j] = v;
            o->sc[i][j] = scale_pair(sv, j);
        }
        o->d[i] = _cvtsh_ss(skv_rd16le(blk + k_ext[kind].d_off));
        o->c[i] = k_ext[kind].m_off < 0 ? 0.0f : -_cvtsh_ss(skv_rd16le(blk + k_ext[kind].m_off));
    }
}

/* One block of rows r < m against 8 tokens (activation block ab, row stride qs): the rows'
 * chain steps on acc[r] (lane t: token t). */
EXT_INLINE void tok_step(__m256 *acc, const tok_block *wb, const uint8_t *ab, size_t qs, size_t m, const int kind)
{
    const int sgn = k_ext[kind].is_signed;
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)qs));
    const __m256 dx = _mm256_i32gather_ps((const float *)(const void *)ab, at, 1); /* d leads the block */
    const uint8_t *bs = ab + offsetof(skv_act256, bsum);
    for (size_t i = 0; i < m; i++) {
        __m256i p[8];
        for (int t = 0; t < 8; t++) p[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int j = 0; j < 8; j++) {
            const __m256i u = wb->u[i][j], v = wb->v[i][j], sc = wb->sc[i][j];
            const uint8_t *aq = ab + offsetof(skv_act256, qs) + 32 * (size_t)j;
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                __m256i av = ld32(aq + (size_t)t * qs);
                p[t] = dp_sc16(p[t], u, sgn ? _mm256_sign_epi8(av, v) : av, sc);
            }
        }
        if (k_ext[kind].bias)
            for (int t = 0; t < 8; t++) p[t] = _mm256_sub_epi32(p[t], _mm256_madd_epi16(wb->svb[i], ld32(bs + t * qs)));
        acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(wb->d[i]), dx), _mm256_cvtepi32_ps(reduce8_epi32(p)), acc[i]);
        if (k_ext[kind].m_off >= 0) {
            for (int t = 0; t < 8; t++) p[t] = _mm256_madd_epi16(wb->mv[i], ld32(bs + t * qs));
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(wb->c[i]), dx), _mm256_cvtepi32_ps(reduce8_epi32(p)),
                                     acc[i]);
        }
    }
}

/* The gemm of the AVX2 prefill: per 8 rows, chunks of up to TOK_CHUNK tokens in tiles of 8
 * with tokens in lanes; the last T % 8 tokens (and decode) in rows-in-lanes tiles. */
EXT_INLINE void gemm_tok256(float *y, size_t ldy, const uint8_t *W, size_t row_bytes, const uint8_t *qa, size_t qs,
                            size_t nb, size_t T, size_t n_rows, const int kind)
{
    const size_t T8 = T / 8 * 8;
    tok_block wb;
    __m256 acc[TOK_CHUNK / 8][8];
    for (size_t r0 = 0; r0 < n_rows; r0 += 8) {
        size_t m = n_rows - r0 < 8 ? n_rows - r0 : 8;
        const uint8_t *w[8];
        for (size_t i = 0; i < 8; i++) w[i] = W + (r0 + (i < m ? i : m - 1)) * row_bytes;
        for (size_t t0 = 0; t0 < T8; t0 += TOK_CHUNK) {
            size_t nt = T8 - t0 < TOK_CHUNK ? T8 - t0 : TOK_CHUNK;
            for (size_t k = 0; k < nt / 8; k++)
                for (int i = 0; i < 8; i++) acc[k][i] = _mm256_setzero_ps();
            for (size_t b = 0; b < nb; b++) {
                tok_unpack(&wb, w, b, m, kind);
                for (size_t k = 0; k < nt / 8; k++)
                    tok_step(acc[k], &wb, qa + (t0 + 8 * k) * qs + b * sizeof(skv_act256), qs, m, kind);
            }
            for (size_t k = 0; k < nt / 8; k++)
                for (size_t i = 0; i < m; i++) {
                    float o[8];
                    _mm256_storeu_ps(o, acc[k][i]);
                    for (size_t t = 0; t < 8; t++) y[(t0 + 8 * k + t) * ldy + r0 + i] = o[t];
                }
        }
        if (T8 < T) tile256(y + T8 * ldy + r0, ldy, w, qa + T8 * qs, qs, nb, T - T8, m, kind);
    }
}
#endif

/* The exported gemm of one type: tiles of tile<n> for kind, blocks of n values (the AVX2
 * prefill of blocks of 256: gemm_tok256). */
#if SKV_DOT_VNNI
#define EXT_GEMM256(...) 0
#else
#define EXT_GEMM256(y, ldy, W, rb, qa, qs, nb, T, n_rows, kind) \
    (T > 1 ? (gemm_tok256(y, ldy, W, rb, qa, qs, nb, T, n_rows, kind), 1) : 0)
#endif
#define SKV_EXT_GEMM(name, n, kind)                                                                            \
    static void tile_##name(float *y, size_t ldy, const uint8_t *const w[8], const uint8_t *qa, size_t qs,     \
                            size_t nb, size_t nt, size_t m)                                                    \
    {                                                                                                          \
        tile##n(y, ldy, w, qa, qs, nb, nt, m, kind);                                                           \
    }                                                                                                          \
    void SKV_DOT_FN(name)(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride, \
                          size_t K, size_t T, size_t n_rows)                                                   \
    {                                                                                                          \
        if ((n) == 256 && EXT_GEMM256(y, ldy, (const uint8_t *)W, row_bytes, (const uint8_t *)qa, qa_stride,    \
                                      K / (n), T, n_rows, kind))                                               \
            return;                                                                                            \
        gemm_tiles(y, ldy, W, row_bytes, qa, qa_stride, K / (n), T, n_rows, tile_##name);                      \
    }
SKV_EXT_GEMM(q4_1, 32, EXT_Q4_1)
SKV_EXT_GEMM(q5_0, 32, EXT_Q5_0)
SKV_EXT_GEMM(q5_1, 32, EXT_Q5_1)
SKV_EXT_GEMM(iq4_nl, 32, EXT_IQ4_NL)
SKV_EXT_GEMM(q2_k, 256, EXT_Q2_K)
SKV_EXT_GEMM(q3_k, 256, EXT_Q3_K)
SKV_EXT_GEMM(q5_k, 256, EXT_Q5_K)
SKV_EXT_GEMM(iq4_xs, 256, EXT_IQ4_XS)
#if !SKV_DOT_VNNI
/* q4_k and q6_k have tuned kernels of their own (dot_x86.h); their AVX2 prefill is this
 * file's (dot_avx2.c calls it for T > 1). */
#undef SKV_DOT_FN
#define SKV_DOT_FN(name) skv_gemm_##name##_tok_avx2
SKV_EXT_GEMM(q4_k, 256, EXT_Q4_K)
SKV_EXT_GEMM(q6_k, 256, EXT_Q6_K)
#endif

#endif
