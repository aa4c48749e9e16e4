/* The T = 1 kernels of the packed layouts (quant/repack.h) of q4_1, q5_0, q5_1, iq4_nl
 * and q8_0, and the AVX2 prefill tiles of those and q4_0 (below):
 * q4_0's scheme (dot_pack_x86.h, whose helpers this header uses; include it after that
 * one) with the other 32-value types' fields.  Per block of a 16-row group:
 *
 *   type     bytes      fields (offsets)
 *   q4_1     320 = 16x20  d[16] 0 | m[16] 32 | qs: 4 chunks 64
 *   q5_0     352 = 16x22  d[16] 0 | qh: 1 chunk 32 | qs: 4 chunks 96
 *   q5_1     384 = 16x24  d[16] 0 | m[16] 32 | qh: 1 chunk 64 | qs: 4 chunks 128
 *   iq4_nl   288 = 16x18  d[16] 0 | qs: 4 chunks 32
 *   q8_0     544 = 16x34  d[16] 0 | qs: 8 chunks 32 (chunk j: values 4j..4j+3)
 *
 * A qs chunk j holds the rows' qs[4j..4j+3] (low nibbles: values 4j.., high: 16 + 4j..),
 * the qh chunk each row's 32 fifth bits as its little-endian u32.  Each lane (a row) forms
 * the block's exact isum = sum (u - bias) a and runs dot.c's chain: fma(d * dx, isum, acc),
 * then for q4_1 / q5_1 fma(m * dx, sum a, acc) (the reference's -(-m * dx), exactly). */
#ifndef SKV_DOT_PACK32_X86_H
#define SKV_DOT_PACK32_X86_H

enum { PK32_Q4_1, PK32_Q5_0, PK32_Q5_1, PK32_IQ4_NL, PK32_Q4_0, PK32_Q8_0 };

/* Group block bytes, offsets of m (-1: none), qh (-1: none) and qs, the bias of the values. */
static const struct {
    int gb, mo, ho, qo, bias;
} k_pk32[] = {
    [PK32_Q4_1] = {320, 32, -1, 64, 0},
    [PK32_Q5_0] = {352, -1, 32, 96, 16},
    [PK32_Q5_1] = {384, 32, 64, 128, 0},
    [PK32_IQ4_NL] = {288, -1, -1, 32, 0},
    [PK32_Q4_0] = {288, -1, -1, 32, 8}, /* the prefill tiles' (decode: dot_pack_x86.h) */
    [PK32_Q8_0] = {544, -1, -1, 32, 0},
};

/* Byte t of every dword lane = 0x10 where bit s + t of byte B of the lane's qh is set
 * (s + 3 <= 7: the four bits sit in one byte). */
static inline __m256i qh_bits4(__m256i qh, int B, int s)
{
    const __m256i idx = _mm256_add_epi8(_mm256_set1_epi8((char)B),
                                        _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4,
                                                         4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    const __m256i bit = _mm256_set1_epi32((int)(0x08040201u << s));
    __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(qh, idx), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(x, bit), _mm256_set1_epi8(0x10));
}

/* Half h (8 rows) of a group: the values of qs chunk j, low (hi = 0) or high nibbles
 * (qh: the half's qh chunk, loaded once per block). */
static inline __attribute__((always_inline)) __m256i pk32_values(const uint8_t *g, __m256i qh, int h, int j, int hi,
                                                                 const int kind)
{
    __m256i v = ld32(g + k_pk32[kind].qo + 64 * j + 32 * h), u = hi ? hi4(v) : lo4(v);
    if (kind == PK32_IQ4_NL)
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)skv_iq4nl_levels)), u);
    if (k_pk32[kind].ho >= 0) u = _mm256_or_si256(u, qh_bits4(qh, 2 * hi + j / 2, 4 * (j % 2)));
    return u;
}

static inline __attribute__((always_inline)) void pk32_group(float *y, const uint8_t *g, const skv_act32 *a, size_t nb,
                                                             const int kind)
{
    const size_t gb = (size_t)k_pk32[kind].gb;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += gb) {
        int32_t asum = a[b].bsum[0] + a[b].bsum[1];
        pk_prefetch(g + PK_PF, gb);
#pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            __m256i p = _mm256_setzero_si256();
            __m256i qh = k_pk32[kind].ho >= 0 ? ld32(g + k_pk32[kind].ho + 32 * h) : p;
#pragma GCC unroll 16
            for (int j = 0; j < 4; j++)
#pragma GCC unroll 16
                for (int hi = 0; hi < 2; hi++) {
                    __m256i v = pk32_values(g, qh, h, j, hi, kind), x = bcast4(a[b].qs + 16 * hi + 4 * j);
                    p = kind == PK32_IQ4_NL ? dp_u8s8(p, _mm256_abs_epi8(v), _mm256_sign_epi8(x, v)) : dp_u8s8(p, v, x);
                }
            if (k_pk32[kind].bias) p = _mm256_sub_epi32(p, _mm256_set1_epi32(k_pk32[kind].bias * asum));
            acc[h] = fma_scaled(acc[h], half_scales(g + 16 * h), a[b].d, p);
            if (k_pk32[kind].mo >= 0)
                acc[h] = fma_scaled(acc[h], half_scales(g + k_pk32[kind].mo + 16 * h), a[b].d, _mm256_set1_epi32(asum));
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* q8_0: |q| against the activation with q's sign (maddubs pairs: 2 * 128 * 127 < 2^15). */
static inline void pk_group_q8_0(float *y, const uint8_t *g, const skv_act32 *a, size_t nb)
{
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += 544) {
        pk_prefetch(g + PK_PF, 544);
#pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            __m256i p = _mm256_setzero_si256();
#pragma GCC unroll 16
            for (int j = 0; j < 8; j++) {
                __m256i q = ld32(g + 32 + 64 * j + 32 * h);
                p = dp_u8s8(p, _mm256_abs_epi8(q), _mm256_sign_epi8(bcast4(a[b].qs + 4 * j), q));
            }
            acc[h] = fma_scaled(acc[h], half_scales(g + 16 * h), a[b].d, p);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* The AVX2 prefill tiles (below): up to PKT_TOK tokens meet each block's values formed
 * once; step k (0..7) of a block meets the activation bytes at PKT_AOFF (the nibble types:
 * chunk k / 2, low or high nibbles; q8_0: chunk k).  The AVX-512 level keeps the unpacked
 * rows against its lanes layout of 16 tokens (dot_avx512.c): this scheme in zmm lanes
 * measured 0-14% faster at T = 128 (bench_dot), not worth a second activation layout. */
#define PKT_TOK 32 /* bench_dot 2048 5632 128, AVX2: 32 best of 8, 16, 32, 64 */
#define PKT_AOFF(k, kind) ((kind) == PK32_Q8_0 ? 4 * (k) : 16 * ((k) % 2) + 4 * ((k) / 2))

#if !SKV_DOT_VNNI
/* ---- AVX2 prefill: the decode scheme over up to PKT_TOK tokens ----
 * A half's 8 value chunks of a block are formed once (iq4_nl: |q| and q) and meet each
 * token's broadcast activation bytes in turn; each lane ends the block with its row's
 * exact isum for that token, so the rows-in-lanes tiles' horizontal reduction (six
 * hadds per 8 rows and token) is gone.  Per (row, token) the chain is the decode's.
 * Step k (0..7) of a half's block: its value chunk. */
static inline __attribute__((always_inline)) __m256i pkt_values(const uint8_t *g, __m256i qh, int h, int k,
                                                                const int kind)
{
    if (kind == PK32_Q8_0) return ld32(g + 32 + 64 * k + 32 * h);
    return pk32_values(g, qh, h, k / 2, k % 2, kind);
}

static inline __attribute__((always_inline)) void pk32_tile(float *y, size_t ldy, const uint8_t *g,
                                                            const uint8_t *qa, size_t qs, size_t nb, size_t nt,
                                                            const int kind)
{
    const size_t gb = (size_t)k_pk32[kind].gb;
    const int sgn = kind == PK32_IQ4_NL || kind == PK32_Q8_0; /* |q| times a with q's sign */
    for (int h = 0; h < 2; h++) {
        __m256 acc[PKT_TOK];
        for (size_t t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
        const uint8_t *gp = g;
        for (size_t b = 0; b < nb; b++, gp += gb) {
            __m256i u[8], v[8];
            __m256i qh = k_pk32[kind].ho >= 0 ? ld32(gp + k_pk32[kind].ho + 32 * h) : _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                v[k] = pkt_values(gp, qh, h, k, kind);
                u[k] = sgn ? _mm256_abs_epi8(v[k]) : v[k];
            }
            const __m256 dw = half_scales(gp + 16 * h);
            const __m256 mw = k_pk32[kind].mo >= 0 ? half_scales(gp + k_pk32[kind].mo + 16 * h) : dw;
            for (size_t t = 0; t < nt; t++) {
                const skv_act32 *a = ACT32(qa, qs, t, b);
                __m256i p;
                if (sgn) { /* maddubs pairs up to 2 * 128 * 127: one step per int32 widening */
                    p = _mm256_setzero_si256();
#pragma GCC unroll 8
                    for (int k = 0; k < 8; k++)
                        p = dp_u8s8(p, u[k], _mm256_sign_epi8(bcast4(a->qs + PKT_AOFF(k, kind)), v[k]));
                } else { /* u <= 31: 4 pairs of 2 * 31 * 128 fit int16, so two int16 sums of 4 steps */
                    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
                    for (int k = 0; k < 8; k += 2) {
                        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(u[k], bcast4(a->qs + PKT_AOFF(k, kind))));
                        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(u[k + 1], bcast4(a->qs + PKT_AOFF(k + 1, kind))));
                    }
                    p = _mm256_add_epi32(_mm256_madd_epi16(s0, _mm256_set1_epi16(1)),
                                         _mm256_madd_epi16(s1, _mm256_set1_epi16(1)));
                }
                int32_t asum = a->bsum[0] + a->bsum[1];
                if (k_pk32[kind].bias) p = _mm256_sub_epi32(p, _mm256_set1_epi32(k_pk32[kind].bias * asum));
                acc[t] = fma_scaled(acc[t], dw, a->d, p);
                if (k_pk32[kind].mo >= 0) acc[t] = fma_scaled(acc[t], mw, a->d, _mm256_set1_epi32(asum));
            }
        }
        for (size_t t = 0; t < nt; t++) _mm256_storeu_ps(y + t * ldy + 8 * (size_t)h, acc[t]);
    }
}

#endif

#if SKV_DOT_VNNI
/* ---- AVX-512: the 16 rows in the lanes of a zmm register ---- */

/* qh_bits4 of 16 lanes. */
static inline __m512i qh_bits4z(__m512i qh, int B, int s)
{
    const __m512i idx = _mm512_add_epi8(_mm512_set1_epi8((char)B),
                                        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12)));
    __mmask64 k = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, idx), _mm512_set1_epi32((int)(0x08040201u << s)));
    return _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x10));
}

/* The values of qs chunk j as u8: u (q5_0: bias 16 off later), iq4_nl's levels + 128. */
static inline __attribute__((always_inline)) __m512i pkz32_values(const uint8_t *g, __m512i qh, int j, int hi,
                                                                  const int kind)
{
    __m512i v = ld64(g + k_pk32[kind].qo + 64 * j), u = hi ? hi4z(v) : lo4z(v);
    if (kind == PK32_IQ4_NL) {
        __m128i lv = _mm_loadu_si128((const __m128i *)(const void *)skv_iq4nl_levels);
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_xor_si128(lv, _mm_set1_epi8((char)0x80))), u);
    }
    if (k_pk32[kind].ho >= 0) u = _mm512_or_si512(u, qh_bits4z(qh, 2 * hi + j / 2, 4 * (j % 2)));
    return u;
}

static inline __attribute__((always_inline)) void pkz32_group(float *y, const uint8_t *g, const skv_act32 *a, size_t nb,
                                                              const int kind)
{
    const size_t gb = (size_t)k_pk32[kind].gb;
    const int bias = kind == PK32_IQ4_NL ? 128 : k_pk32[kind].bias;
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += gb) {
        int32_t asum = a[b].bsum[0] + a[b].bsum[1];
        __m512i p = _mm512_setzero_si512(), qh = k_pk32[kind].ho >= 0 ? ld64(g + k_pk32[kind].ho) : p;
        pk_prefetch(g + PK_PF, gb);
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
#pragma GCC unroll 16
            for (int hi = 0; hi < 2; hi++) p = DPZ(p, pkz32_values(g, qh, j, hi, kind), bc4(a[b].qs + 16 * hi + 4 * j));
        if (bias) p = _mm512_sub_epi32(p, _mm512_set1_epi32(bias * asum));
        __m512 dx = _mm512_set1_ps(a[b].d);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), dx), _mm512_cvtepi32_ps(p), acc);
        if (k_pk32[kind].mo >= 0)
            acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g + k_pk32[kind].mo), dx),
                                  _mm512_cvtepi32_ps(_mm512_set1_epi32(asum)), acc);
    }
    _mm512_storeu_ps(y, acc);
}
/* q8_0: q + 128 as u8 into vpdpbusd, less 128 times the activations' sum. */
static void pkz_group_q8_0(float *y, const uint8_t *g, const skv_act32 *a, size_t nb)
{
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += 544) {
        __m512i p = _mm512_setzero_si512();
        pk_prefetch(g + PK_PF, 544);
#pragma GCC unroll 16
        for (int j = 0; j < 8; j++)
            p = DPZ(p, _mm512_xor_si512(ld64(g + 32 + 64 * j), _mm512_set1_epi8((char)0x80)), bc4(a[b].qs + 4 * j));
        p = _mm512_sub_epi32(p, _mm512_set1_epi32(128 * (a[b].bsum[0] + a[b].bsum[1])));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), _mm512_set1_ps(a[b].d)), _mm512_cvtepi32_ps(p), acc);
    }
    _mm512_storeu_ps(y, acc);
}

#define PK32_GROUP pkz32_group
#else
#define PK32_GROUP pk32_group
#endif

/* The entry points (dot_pack_x86.h's SKV_PK_GEMV) over a per-type group kernel. */
#define PK32_TYPE(name, kind)                                                          \
    static void PK_GROUP(name)(float *y, const uint8_t *g, const skv_act32 *a, size_t nb) \
    {                                                                                  \
        PK32_GROUP(y, g, a, nb, kind);                                                 \
    }                                                                                  \
    SKV_PK_GEMV(name, skv_act32, 32)
PK32_TYPE(q4_1, PK32_Q4_1)
PK32_TYPE(q5_0, PK32_Q5_0)
PK32_TYPE(q5_1, PK32_Q5_1)
PK32_TYPE(iq4_nl, PK32_IQ4_NL)
SKV_PK_GEMV(q8_0, skv_act32, 32)

#if !SKV_DOT_VNNI
/* The AVX2 prefill entry points (dot_pack_x86.h's SKV_PK_GEMM_TILES). */
#define PK32_GEMM(name, kind)                                                                                   \
    static void pk_tile_##name(float *y, size_t ldy, const uint8_t *g, const uint8_t *qa, size_t qs, size_t nb, \
                               size_t nt)                                                                      \
    {                                                                                                          \
        pk32_tile(y, ldy, g, qa, qs, nb, nt, kind);                                                            \
    }                                                                                                          \
    SKV_PK_GEMM_TILES(name, 32, PKT_TOK)
PK32_GEMM(q4_1, PK32_Q4_1)
PK32_GEMM(q5_0, PK32_Q5_0)
PK32_GEMM(q5_1, PK32_Q5_1)
PK32_GEMM(iq4_nl, PK32_IQ4_NL)
PK32_GEMM(q4_0, PK32_Q4_0)
PK32_GEMM(q8_0, PK32_Q8_0)
#endif

#endif
