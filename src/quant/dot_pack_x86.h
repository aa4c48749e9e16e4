/* The T = 1 (decode) kernels of the packed layouts (quant/repack.h), one source
 * built twice like dot_x86.h, after which dot_avx2.c and dot_avx512.c include it
 * (SKV_DOT_PFN names the entry points).  A group of 16 rows is read as two
 * halves of 8 rows, row i of a half in lane i of a ymm register: a 32-byte half
 * of a 64-byte chunk holds the same four bytes of eight rows, against which the
 * activation's four matching bytes are broadcast.  Each int32 lane so ends a
 * block with its row's exact integer sum (no horizontal reduction) and runs the
 * reference's chain (dot.c): acc = fma(d * dx, (float)isum, acc), then the min
 * term.  The stream of a group is contiguous, prefetched PK_PF bytes ahead.  The
 * ymm kernels serve the AVX2 level (maddubs pairs summed in int16 where the bound
 * allows: no saturation, no overflow), the zmm ones (vpdpbusd) the AVX-512 level. */
#ifndef SKV_DOT_PACK_X86_H
#define SKV_DOT_PACK_X86_H

#include "quant/qblocks.h"

#define PK_PF 12288 /* measured best of 0 .. 12288 on TinyLlama q4_0 / Q4_K_M decode */
/* q6_k's ymm kernel: TinyLlama Q6_K tg64 20.1-24.6 tokens/s against 17.9-21.9 at PK_PF
 * (AMD EPYC at SEQKV_CPU=avx2, alternating runs) */
#define PK_PF_Q6 6144

static inline __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline void pk_prefetch(const uint8_t *p, size_t n)
{
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

/* Part `part` of `parts` of the prefetch of the block PK_PF ahead of block g (gb bytes):
 * a large block's kernel issues its prefetches spread over its parts, not all at its
 * start (a burst of 50 that the miss queue cannot take: TinyLlama q6_k decode 18 -> 21
 * tokens per CPU-second). */
static inline void pk_prefetch_part_at(const uint8_t *g, size_t ahead, size_t gb, int part, int parts)
{
    size_t n = (gb + (size_t)parts - 1) / (size_t)parts;
    pk_prefetch(g + ahead + n * (size_t)part, n);
}

static inline void pk_prefetch_part(const uint8_t *g, size_t gb, int part, int parts)
{
    pk_prefetch_part_at(g, PK_PF, gb, part, parts);
}

static inline __m256 half_scales(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }

static inline __m256i lo4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
static inline __m256i hi4(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }

/* q4_0: per block 16 scales, then chunk j (0..3) = the rows' qs[4j..4j+3]: low nibbles
 * are values 4j.., high nibbles values 16 + 4j.. */
static inline void pk_group_q4_0(float *y, const uint8_t *g, const skv_act32 *a, size_t nb)
{
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += 288) {
        __m256i ab[8];
        pk_prefetch(g + PK_PF, 288);
#pragma GCC unroll 8 /* the loops unrolled: 29.5 -> 36.8 GB/s in L2 (bench_dot 2048 256 1, AMD EPYC) */
        for (int k = 0; k < 8; k++) ab[k] = bcast4(a[b].qs + 4 * k);
        __m256i corr = _mm256_set1_epi32(8 * (a[b].bsum[0] + a[b].bsum[1]));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i s = _mm256_setzero_si256(); /* int16 pairs: 8 x 2 * 15 * 128 < 2^15, exact */
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i v = ld32(g + 32 + 64 * j + 32 * h);
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo4(v), ab[j]));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi4(v), ab[j + 4]));
            }
            __m256i p = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
            acc[h] = fma_scaled(acc[h], half_scales(g + 16 * h), a[b].d, _mm256_sub_epi32(p, corr));
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* int32 lanes from 8 bytes: the half's rows of one run's scales. */
static inline __m256i u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)); }
static inline __m256i s8x8(const uint8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)); }

/* Byte j = bit s of byte j of qh as bit 4 (q5_k's fifth bit; the 16-bit shifts move no
 * other byte's bit onto bit 4: s <= 4 shifts left by at most 4, s > 4 right by at most 3). */
static inline __m256i bit4(__m256i qh, int s)
{
    __m256i v = s <= 4 ? _mm256_slli_epi16(qh, 4 - s) : _mm256_srli_epi16(qh, s - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* q4_k / q5_k (q5) half h of block g: sum_r sc[r] * (run r's sum), runs 2c / 2c+1 in the
 * low / high nibbles of the qs chunks 8c .. 8c+7 (at qo), q5_k's bit r of qh chunk j on
 * top.  Nibbles sum eight chunks' maddubs pairs in int16 (8 x 2 * 15 * 128 < 2^15), five
 * bits four (4 x 2 * 31 * 128 < 2^15): exact. */
static inline __attribute__((always_inline)) __m256i k4_isum(const uint8_t *g, const int8_t *qs, int h, const int q5)
{
    const size_t qo = q5 ? 832 : 320;
    const int span = q5 ? 4 : 8;
    __m256i is = _mm256_setzero_si256(), qh[8];
    if (q5) /* loaded once for the four pairs of runs (not once per pair: measured faster) */
        for (int j = 0; j < 8; j++) qh[j] = ld32(g + 320 + 64 * j + 32 * h);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i pl = _mm256_setzero_si256(), ph = _mm256_setzero_si256();
        pk_prefetch_part(g, q5 ? 2880 : 2368, 4 * h + c, 8);
        for (int j0 = 0; j0 < 8; j0 += span) {
            __m256i sl = _mm256_setzero_si256(), sh = _mm256_setzero_si256();
            for (int j = j0; j < j0 + span; j++) {
                __m256i v = ld32(g + qo + 64 * (8 * c + j) + 32 * h), l = lo4(v), u = hi4(v);
                if (q5) l = _mm256_or_si256(l, bit4(qh[j], 2 * c)), u = _mm256_or_si256(u, bit4(qh[j], 2 * c + 1));
                sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(l, bcast4(qs + 64 * c + 4 * j)));
                sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(u, bcast4(qs + 64 * c + 32 + 4 * j)));
            }
            pl = _mm256_add_epi32(pl, _mm256_madd_epi16(sl, _mm256_set1_epi16(1)));
            ph = _mm256_add_epi32(ph, _mm256_madd_epi16(sh, _mm256_set1_epi16(1)));
        }
        is = _mm256_add_epi32(is, _mm256_mullo_epi32(pl, u8x8(g + 64 + 16 * (2 * c) + 8 * h)));
        is = _mm256_add_epi32(is, _mm256_mullo_epi32(ph, u8x8(g + 64 + 16 * (2 * c + 1) + 8 * h)));
    }
    return is;
}

static inline __attribute__((always_inline)) void pk_group_k4(float *y, const uint8_t *g, const skv_act256 *a,
                                                              size_t nb, const int q5)
{
    const size_t gb = q5 ? 2880 : 2368;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += gb) {
        int32_t bs[4];
        for (int k = 0; k < 4; k++)
            bs[k] = pair16(a[b].bsum[4 * k] + a[b].bsum[4 * k + 1], a[b].bsum[4 * k + 2] + a[b].bsum[4 * k + 3]);
        __m256 dx = _mm256_set1_ps(a[b].d);
        for (int h = 0; h < 2; h++) {
            __m256i is = k4_isum(g, a[b].qs, h, q5), mi = _mm256_setzero_si256();
            for (int k = 0; k < 4; k++) {
                __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(g + 192 + 32 * k + 16 * h)));
                mi = _mm256_add_epi32(mi, _mm256_madd_epi16(mn, _mm256_set1_epi32(bs[k])));
            }
            __m256 dm = _mm256_xor_ps(half_scales(g + 32 + 16 * h), _mm256_set1_ps(-0.0f));
            acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(half_scales(g + 16 * h), dx), _mm256_cvtepi32_ps(is), acc[h]);
            acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(mi), acc[h]);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

static inline void pk_group_q4_k(float *y, const uint8_t *g, const skv_act256 *a, size_t nb)
{
    pk_group_k4(y, g, a, nb, 0);
}

static inline void pk_group_q5_k(float *y, const uint8_t *g, const skv_act256 *a, size_t nb)
{
    pk_group_k4(y, g, a, nb, 1);
}

/* iq4_xs: d[16] | the runs' 6-bit scales sc[8][16] (ls, the scale is ls - 32) | qs: 32
 * chunks, run r's 16 bytes in chunks 4r .. 4r+3 (low nibbles: values 4k.., high: 16 + 4k..).
 * The levels (-127..113) times activations overflow maddubs' int16 pairs as u8, so the
 * ymm kernel takes |level| against the activation with the level's sign (exact: |a| <= 127
 * from the act quantizer) and sums every chunk in int32. */
static inline void pk_group_iq4_xs(float *y, const uint8_t *g, const skv_act256 *a, size_t nb)
{
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)skv_iq4nl_levels));
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += 2208) {
        for (int h = 0; h < 2; h++) {
            __m256i is = _mm256_setzero_si256();
            for (int r = 0; r < 8; r++) {
                __m256i p = _mm256_setzero_si256();
                pk_prefetch_part(g, 2208, 8 * h + r, 16);
                for (int k = 0; k < 4; k++) {
                    __m256i v = ld32(g + 160 + 64 * (4 * r + k) + 32 * h);
                    __m256i l = _mm256_shuffle_epi8(lut, lo4(v)), u = _mm256_shuffle_epi8(lut, hi4(v));
                    p = dp_u8s8(p, _mm256_abs_epi8(l), _mm256_sign_epi8(bcast4(a[b].qs + 32 * r + 4 * k), l));
                    p = dp_u8s8(p, _mm256_abs_epi8(u), _mm256_sign_epi8(bcast4(a[b].qs + 32 * r + 16 + 4 * k), u));
                }
                __m256i sc = _mm256_sub_epi32(u8x8(g + 32 + 16 * r + 8 * h), _mm256_set1_epi32(32));
                is = _mm256_add_epi32(is, _mm256_mullo_epi32(p, sc));
            }
            acc[h] = fma_scaled(acc[h], half_scales(g + 16 * h), a[b].d, is);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* q6_k half h, 128-value part gg, groups 8gg + 2k + jh: values 128gg + 32k + 4j.. are the
 * nibble (k >= 2: high) of ql chunk 16gg + 8(k%2) + j with bits 2k of qh chunk 8gg + j.
 * Two chunks' maddubs pairs add in int16 before widening (2 x 2 * 63 * 128 < 2^15: exact). */
static inline __m256i q6k_part(const uint8_t *g, const skv_act256 *a, int h, int gg, int jh)
{
    const __m256i m30 = _mm256_set1_epi8(0x30), one = _mm256_set1_epi16(1);
    __m256i u[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i is = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int j0 = 4 * jh; j0 < 4 * jh + 4; j0 += 2) {
        __m256i s[4];
#pragma GCC unroll 2
        for (int j = j0; j < j0 + 2; j++) {
            __m256i qh = ld32(g + 2336 + 64 * (8 * gg + j) + 32 * h);
            __m256i l0 = ld32(g + 288 + 64 * (16 * gg + j) + 32 * h), l1 = ld32(g + 288 + 64 * (16 * gg + 8 + j) + 32 * h);
            const int8_t *x = a->qs + 128 * gg + 4 * j;
            __m256i p0 = _mm256_maddubs_epi16(_mm256_or_si256(lo4(l0), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)), bcast4(x));
            __m256i p1 = _mm256_maddubs_epi16(_mm256_or_si256(lo4(l1), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)), bcast4(x + 32));
            __m256i p2 = _mm256_maddubs_epi16(_mm256_or_si256(hi4(l0), _mm256_and_si256(qh, m30)), bcast4(x + 64));
            __m256i p3 = _mm256_maddubs_epi16(_mm256_or_si256(hi4(l1), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)), bcast4(x + 96));
            if (j == j0) {
                s[0] = p0, s[1] = p1, s[2] = p2, s[3] = p3;
            } else {
                s[0] = _mm256_add_epi16(s[0], p0), s[1] = _mm256_add_epi16(s[1], p1);
                s[2] = _mm256_add_epi16(s[2], p2), s[3] = _mm256_add_epi16(s[3], p3);
            }
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) u[k] = _mm256_add_epi32(u[k], _mm256_madd_epi16(s[k], one));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        int s = 8 * gg + 2 * k + jh;
        __m256i v = _mm256_sub_epi32(u[k], _mm256_set1_epi32(32 * a->bsum[s]));
        is = _mm256_add_epi32(is, _mm256_mullo_epi32(v, s8x8(g + 32 + 16 * s + 8 * h)));
    }
    return is;
}

static inline void pk_group_q6_k(float *y, const uint8_t *g, const skv_act256 *a, size_t nb)
{
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += 3360) {
        for (int h = 0; h < 2; h++) {
            __m256i is = _mm256_setzero_si256();
            for (int gg = 0; gg < 2; gg++)
                for (int jh = 0; jh < 2; jh++) {
                    pk_prefetch_part_at(g, PK_PF_Q6, 3360, 4 * h + 2 * gg + jh, 8);
                    is = _mm256_add_epi32(is, q6k_part(g, a + b, h, gg, jh));
                }
            acc[h] = fma_scaled(acc[h], half_scales(g + 16 * h), a[b].d, is);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* Rows r0 .. r0 + 7 (r0: 0 or 8) of a packed q4_0 group of nb blocks back in the file
 * layout at dst (repack.c's fallback for batches): per block a 4 x 8 transposition of
 * the half's four chunks gives each row its 16 bytes of qs. */
void SKV_DOT_PFN(unpack8_q4_0)(const void *P, size_t nb, size_t r0, void *dst)
{
    const uint8_t *p = P;
    uint8_t *d = dst;
    size_t frb = 18 * nb;
    for (size_t b = 0; b < nb; b++, p += 288, d += 18) {
        const uint8_t *c = p + 32 + 4 * r0;
        __m256i t0 = _mm256_unpacklo_epi32(ld32(c), ld32(c + 64)), t1 = _mm256_unpackhi_epi32(ld32(c), ld32(c + 64));
        __m256i t2 = _mm256_unpacklo_epi32(ld32(c + 128), ld32(c + 192));
        __m256i t3 = _mm256_unpackhi_epi32(ld32(c + 128), ld32(c + 192));
        __m256i r[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                        _mm256_unpackhi_epi64(t1, t3)}; /* r[k]: rows k (low half) and k + 4 (high half) */
        for (int k = 0; k < 4; k++) {
            _mm_storeu_si128((__m128i *)(void *)(d + k * frb + 2), _mm256_castsi256_si128(r[k]));
            _mm_storeu_si128((__m128i *)(void *)(d + (k + 4) * frb + 2), _mm256_extracti128_si256(r[k], 1));
        }
        for (size_t i = 0; i < 8; i++) memcpy(d + i * frb, p + 2 * (r0 + i), 2);
    }
}

/* Rows r0 .. r0 + 7 (r0: 0 or 8) of a packed iq4_xs group of nb blocks back in the file
 * layout at dst: per block four 8 x 8 transpositions of 4-byte units give each row its
 * 128 bytes of qs (eight units per store), the runs' 6-bit scales packed back by hand. */
void SKV_DOT_PFN(unpack8_iq4_xs)(const void *P, size_t nb, size_t r0, void *dst)
{
    const uint8_t *p = P;
    uint8_t *d = dst;
    size_t frb = 136 * nb;
    for (size_t b = 0; b < nb; b++, p += 2208, d += 136) {
        for (int u = 0; u < 32; u += 8) {
            const uint8_t *c = p + 160 + 64 * u + 4 * r0;
            __m256i t[8], q[8];
            for (int j = 0; j < 8; j += 2) {
                t[j] = _mm256_unpacklo_epi32(ld32(c + 64 * j), ld32(c + 64 * (j + 1)));
                t[j + 1] = _mm256_unpackhi_epi32(ld32(c + 64 * j), ld32(c + 64 * (j + 1)));
            }
            for (int j = 0; j < 8; j += 4) {
                q[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]), q[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
                q[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]), q[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
            }
            for (int i = 0; i < 4; i++) { /* q[i]: rows i and i + 4, units u..u+3; q[i + 4]: units u+4..u+7 */
                _mm256_storeu_si256((__m256i *)(void *)(d + i * frb + 8 + 4 * u), _mm256_permute2x128_si256(q[i], q[i + 4], 0x20));
                _mm256_storeu_si256((__m256i *)(void *)(d + (i + 4) * frb + 8 + 4 * u),
                                    _mm256_permute2x128_si256(q[i], q[i + 4], 0x31));
            }
        }
        for (size_t i = 0; i < 8; i++) {
            uint8_t *f = d + i * frb;
            unsigned sh = 0;
            memcpy(f, p + 2 * (r0 + i), 2);
            memset(f + 4, 0, 4);
            for (unsigned r = 0; r < 8; r++) {
                unsigned x = p[32 + 16 * r + r0 + i];
                f[4 + r / 2] |= (uint8_t)((x & 15) << (4 * (r % 2)));
                sh |= (x >> 4 & 3) << (2 * r);
            }
            f[2] = (uint8_t)sh, f[3] = (uint8_t)(sh >> 8);
        }
    }
}

#if !SKV_DOT_VNNI
/* ---- AVX2 prefill of the 256-value types: the decode's per-lane sums over a tile of
 * tokens ----
 * Per half (8 rows) and block, the values are formed once into an L1 buffer (the chunk
 * order of the decode) with the runs' scales, then each of up to PKT_TOK256 tokens runs
 * the decode's integer sums and float chain on them: the same bits as pk_group_*. */
/* bench_dot 2048 5632 128, AVX2: q4_k 188 -> 158 us per token over the unpacked rows; two
 * tokens per value load measured no faster */
#define PKT_TOK256 32

/* q4_k / q5_k: a half's block formed: u[c][j][0 / 1] = the low / high values of chunk 8c
 * + j (q5_k's fifth bit on), sc[r] the runs' scales and mn[k] the mins of runs 2k, 2k + 1
 * as int16 lanes. */
typedef struct {
    __m256i u[4][8][2], sc[8], mn[4];
    __m256 dw, dm;
} k4_formed;

static inline __attribute__((always_inline)) void k4_form(k4_formed *f, const uint8_t *g, int h, const int q5)
{
    const size_t qo = q5 ? 832 : 320;
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 8; j++) {
            __m256i v = ld32(g + qo + 64 * (8 * c + j) + 32 * h), l = lo4(v), u = hi4(v);
            if (q5) {
                __m256i qh = ld32(g + 320 + 64 * j + 32 * h);
                l = _mm256_or_si256(l, bit4(qh, 2 * c)), u = _mm256_or_si256(u, bit4(qh, 2 * c + 1));
            }
            f->u[c][j][0] = l, f->u[c][j][1] = u;
        }
    for (int r = 0; r < 8; r++) f->sc[r] = u8x8(g + 64 + 16 * r + 8 * h);
    for (int k = 0; k < 4; k++) f->mn[k] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(g + 192 + 32 * k + 16 * h)));
    f->dw = half_scales(g + 16 * h);
    f->dm = _mm256_xor_ps(half_scales(g + 32 + 16 * h), _mm256_set1_ps(-0.0f));
}

/* One token's decode sums and chain on a formed half block. */
static inline __attribute__((always_inline)) __m256 k4_token(__m256 acc, const k4_formed *f, const skv_act256 *a,
                                                             const int q5)
{
    const int span = q5 ? 4 : 8;
    __m256i is = _mm256_setzero_si256(), mi = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i pl = _mm256_setzero_si256(), ph = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int j0 = 0; j0 < 8; j0 += span) {
            __m256i sl = _mm256_setzero_si256(), sh = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = j0; j < j0 + span; j++) {
                sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(f->u[c][j][0], bcast4(a->qs + 64 * c + 4 * j)));
                sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(f->u[c][j][1], bcast4(a->qs + 64 * c + 32 + 4 * j)));
            }
            pl = _mm256_add_epi32(pl, _mm256_madd_epi16(sl, _mm256_set1_epi16(1)));
            ph = _mm256_add_epi32(ph, _mm256_madd_epi16(sh, _mm256_set1_epi16(1)));
        }
        is = _mm256_add_epi32(is, _mm256_mullo_epi32(pl, f->sc[2 * c]));
        is = _mm256_add_epi32(is, _mm256_mullo_epi32(ph, f->sc[2 * c + 1]));
    }
    for (int k = 0; k < 4; k++) {
        int32_t bs = pair16(a->bsum[4 * k] + a->bsum[4 * k + 1], a->bsum[4 * k + 2] + a->bsum[4 * k + 3]);
        mi = _mm256_add_epi32(mi, _mm256_madd_epi16(f->mn[k], _mm256_set1_epi32(bs)));
    }
    __m256 dx = _mm256_set1_ps(a->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(f->dw, dx), _mm256_cvtepi32_ps(is), acc);
    return _mm256_fmadd_ps(_mm256_mul_ps(f->dm, dx), _mm256_cvtepi32_ps(mi), acc);
}

static inline __attribute__((always_inline)) void pk_tile_k4(float *y, size_t ldy, const uint8_t *g, const uint8_t *qa,
                                                             size_t qs, size_t nb, size_t nt, const int q5)
{
    const size_t gb = q5 ? 2880 : 2368;
    k4_formed f;
    for (int h = 0; h < 2; h++) {
        __m256 acc[PKT_TOK256];
        for (size_t t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            k4_form(&f, g + b * gb, h, q5);
            for (size_t t = 0; t < nt; t++) acc[t] = k4_token(acc[t], &f, ACT256(qa, qs, t, b), q5);
        }
        for (size_t t = 0; t < nt; t++) _mm256_storeu_ps(y + t * ldy + 8 * (size_t)h, acc[t]);
    }
}

static void pk_tile_q4_k(float *y, size_t ldy, const uint8_t *g, const uint8_t *qa, size_t qs, size_t nb, size_t nt)
{
    pk_tile_k4(y, ldy, g, qa, qs, nb, nt, 0);
}

static void pk_tile_q5_k(float *y, size_t ldy, const uint8_t *g, const uint8_t *qa, size_t qs, size_t nb, size_t nt)
{
    pk_tile_k4(y, ldy, g, qa, qs, nb, nt, 1);
}

/* The prefill entry points over a type's tile pk_tile_<name> (16 rows x up to ntok tokens):
 * y[t * ldy + r] for n_rows (a multiple of 16) packed rows, T tokens, blocks of n values. */
#define SKV_PK_GEMM_TILES(name, n, ntok)                                                                          \
    void skv_gemm_##name##_pk_avx2(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa,        \
                                   size_t qs, size_t K, size_t T, size_t n_rows)                                 \
    {                                                                                                            \
        const uint8_t *w = W, *q = qa;                                                                           \
        for (size_t r = 0; r < n_rows; r += 16)                                                                  \
            for (size_t t = 0; t < T; t += (ntok))                                                               \
                pk_tile_##name(y + t * ldy + r, ldy, w + r * row_bytes, q + t * qs, qs, K / (n),                 \
                               T - t < (ntok) ? T - t : (ntok));                                                 \
    }
SKV_PK_GEMM_TILES(q4_k, 256, PKT_TOK256)
SKV_PK_GEMM_TILES(q5_k, 256, PKT_TOK256)
#endif

#if SKV_DOT_VNNI
/* ---- AVX-512: the same per lane, a whole group of 16 rows in the 16 lanes of a zmm
 * register (a 64-byte chunk is one load). ---- */

static inline __m512i bc4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline __m512i ld64(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline __m512i lo4z(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
static inline __m512i hi4z(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
static inline __m512 scales16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p)); }
static inline __m512i u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)); }
static inline __m512i s8x16(const uint8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)); }
#define DPZ(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))

static void pkz_group_q4_0(float *y, const uint8_t *g, const skv_act32 *a, size_t nb)
{
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += 288) {
        __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
        pk_prefetch(g + PK_PF, 288);
        for (int j = 0; j < 4; j++) {
            __m512i v = ld64(g + 32 + 64 * j);
            p0 = DPZ(p0, lo4z(v), bc4(a[b].qs + 4 * j));
            p1 = DPZ(p1, hi4z(v), bc4(a[b].qs + 16 + 4 * j));
        }
        __m512i is = _mm512_sub_epi32(_mm512_add_epi32(p0, p1), _mm512_set1_epi32(8 * (a[b].bsum[0] + a[b].bsum[1])));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), _mm512_set1_ps(a[b].d)), _mm512_cvtepi32_ps(is), acc);
    }
    _mm512_storeu_ps(y, acc);
}

/* Byte j = bit s of byte j of qh as bit 4 (bit4's zmm twin). */
static inline __m512i bit4z(__m512i qh, int s)
{
    __m512i v = s <= 4 ? _mm512_slli_epi16(qh, 4 - s) : _mm512_srli_epi16(qh, s - 4);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x10));
}

/* k4_isum of 16 rows in lanes (qh chunks at 320 and the qs chunks after them for q5). */
static inline __attribute__((always_inline)) __m512i pkz_k4_isum(const uint8_t *g, const int8_t *qs, const int q5)
{
    const size_t qo = q5 ? 832 : 320;
    __m512i is = _mm512_setzero_si512(), qh[8];
    if (q5) /* loaded once for the four pairs of runs: 14 -> 28 tokens/s on TinyLlama q5_k */
        for (int j = 0; j < 8; j++) qh[j] = ld64(g + 320 + 64 * j);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i pl = _mm512_setzero_si512(), ph = _mm512_setzero_si512();
        pk_prefetch_part(g, q5 ? 2880 : 2368, c, 4);
        for (int j = 0; j < 8; j++) {
            __m512i v = ld64(g + qo + 64 * (8 * c + j)), l = lo4z(v), u = hi4z(v);
            if (q5) l = _mm512_or_si512(l, bit4z(qh[j], 2 * c)), u = _mm512_or_si512(u, bit4z(qh[j], 2 * c + 1));
            pl = DPZ(pl, l, bc4(qs + 64 * c + 4 * j));
            ph = DPZ(ph, u, bc4(qs + 64 * c + 32 + 4 * j));
        }
        is = _mm512_add_epi32(is, _mm512_mullo_epi32(pl, u8x16(g + 64 + 16 * (2 * c))));
        is = _mm512_add_epi32(is, _mm512_mullo_epi32(ph, u8x16(g + 64 + 16 * (2 * c + 1))));
    }
    return is;
}

/* q4_k / q5_k (q5) of 16 rows in lanes. */
static inline __attribute__((always_inline)) void pkz_group_k4(float *y, const uint8_t *g, const skv_act256 *a,
                                                               size_t nb, const int q5)
{
    const size_t gb = q5 ? 2880 : 2368;
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += gb) {
        __m512i mi = _mm512_setzero_si512();
        __m512i is = pkz_k4_isum(g, a[b].qs, q5);
        for (int k = 0; k < 4; k++) {
            int32_t bs = pair16(a[b].bsum[4 * k] + a[b].bsum[4 * k + 1], a[b].bsum[4 * k + 2] + a[b].bsum[4 * k + 3]);
            __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(g + 192 + 32 * k)));
            mi = _mm512_add_epi32(mi, _mm512_madd_epi16(mn, _mm512_set1_epi32(bs)));
        }
        __m512 dx = _mm512_set1_ps(a[b].d);
        __m512 dm = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(scales16(g + 32)), _mm512_set1_epi32((int)0x80000000u)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), dx), _mm512_cvtepi32_ps(is), acc);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(mi), acc);
    }
    _mm512_storeu_ps(y, acc);
}

static void pkz_group_q4_k(float *y, const uint8_t *g, const skv_act256 *a, size_t nb) { pkz_group_k4(y, g, a, nb, 0); }
static void pkz_group_q5_k(float *y, const uint8_t *g, const skv_act256 *a, size_t nb) { pkz_group_k4(y, g, a, nb, 1); }

static inline __m512i q6kz_part(const uint8_t *g, const skv_act256 *a, int gg, int jh)
{
    const __m512i m30 = _mm512_set1_epi8(0x30);
    __m512i u[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512i is = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 4 * jh; j < 4 * jh + 4; j++) {
        __m512i qh = ld64(g + 2336 + 64 * (8 * gg + j));
        __m512i l0 = ld64(g + 288 + 64 * (16 * gg + j)), l1 = ld64(g + 288 + 64 * (16 * gg + 8 + j));
        const int8_t *x = a->qs + 128 * gg + 4 * j;
        u[0] = DPZ(u[0], _mm512_or_si512(lo4z(l0), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30)), bc4(x));
        u[1] = DPZ(u[1], _mm512_or_si512(lo4z(l1), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30)), bc4(x + 32));
        u[2] = DPZ(u[2], _mm512_or_si512(hi4z(l0), _mm512_and_si512(qh, m30)), bc4(x + 64));
        u[3] = DPZ(u[3], _mm512_or_si512(hi4z(l1), _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30)), bc4(x + 96));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        int s = 8 * gg + 2 * k + jh;
        __m512i v = _mm512_sub_epi32(u[k], _mm512_set1_epi32(32 * a->bsum[s]));
        is = _mm512_add_epi32(is, _mm512_mullo_epi32(v, s8x16(g + 32 + 16 * s)));
    }
    return is;
}

static void pkz_group_q6_k(float *y, const uint8_t *g, const skv_act256 *a, size_t nb)
{
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += 3360) {
        __m512i is = _mm512_setzero_si512();
        for (int gg = 0; gg < 2; gg++)
            for (int jh = 0; jh < 2; jh++) {
                pk_prefetch_part(g, 3360, 2 * gg + jh, 4);
                is = _mm512_add_epi32(is, q6kz_part(g, a + b, gg, jh));
            }
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), _mm512_set1_ps(a[b].d)), _mm512_cvtepi32_ps(is), acc);
    }
    _mm512_storeu_ps(y, acc);
}
/* iq4_xs of 16 rows in lanes: the levels + 128 as u8 (vpdpbusd does not saturate), less
 * 128 times the run's activation sum. */
static void pkz_group_iq4_xs(float *y, const uint8_t *g, const skv_act256 *a, size_t nb)
{
    const __m128i lv = _mm_loadu_si128((const __m128i *)(const void *)skv_iq4nl_levels);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_xor_si128(lv, _mm_set1_epi8((char)0x80)));
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += 2208) {
        const int8_t *qs = a[b].qs;
        __m512i is = _mm512_setzero_si512();
        for (int r = 0; r < 8; r++) {
            __m512i p = _mm512_setzero_si512();
            pk_prefetch_part(g, 2208, r, 8);
            for (int k = 0; k < 4; k++) {
                __m512i v = ld64(g + 160 + 64 * (4 * r + k));
                p = DPZ(p, _mm512_shuffle_epi8(lut, lo4z(v)), bc4(qs + 32 * r + 4 * k));
                p = DPZ(p, _mm512_shuffle_epi8(lut, hi4z(v)), bc4(qs + 32 * r + 16 + 4 * k));
            }
            p = _mm512_sub_epi32(p, _mm512_set1_epi32(128 * (a[b].bsum[2 * r] + a[b].bsum[2 * r + 1])));
            is = _mm512_add_epi32(is, _mm512_mullo_epi32(p, _mm512_sub_epi32(u8x16(g + 32 + 16 * r), _mm512_set1_epi32(32))));
        }
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), _mm512_set1_ps(a[b].d)), _mm512_cvtepi32_ps(is), acc);
    }
    _mm512_storeu_ps(y, acc);
}
#define PK_GROUP(name) pkz_group_##name
#else
#define PK_GROUP(name) pk_group_##name
#endif

/* The entry points: n_rows (a multiple of 16) packed rows of row_bytes, one token. */
#define SKV_PK_GEMV(name, act_t, n)                                                                              \
    void SKV_DOT_PFN(name)(float *y, const void *W, size_t row_bytes, const void *qa, size_t K, size_t n_rows) \
    {                                                                                                          \
        const uint8_t *w = W;                                                                                  \
        for (size_t r = 0; r < n_rows; r += 16)                                                                \
            PK_GROUP(name)(y + r, w + r * row_bytes, (const act_t *)qa, K / (n));                              \
    }
SKV_PK_GEMV(q4_0, skv_act32, 32)
SKV_PK_GEMV(q4_k, skv_act256, 256)
SKV_PK_GEMV(q5_k, skv_act256, 256)
SKV_PK_GEMV(q6_k, skv_act256, 256)
SKV_PK_GEMV(iq4_xs, skv_act256, 256)

#endif
