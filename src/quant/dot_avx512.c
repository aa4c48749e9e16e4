/* AVX-512 VNNI twins of the integer dot kernels: dot_x86.h built with
 * vpdpbusd (-mavx512f -mavx512bw -mavx512vl -mavx512vnni, Makefile); run only
 * where skv_dot_level() allows SKV_DOT_AVX512 (SKV_CPU_AVX512_SET).  A build
 * whose compiler lacks the flags gets the AVX2 kernels under these names.
 *
 * Batches of every type also have a "lanes" kernel (dot_ext_x86.h's types through
 * its unpackers, prep32 / prepk): sixteen tokens in the
 * sixteen int32/float lanes of a zmm register, one weight row at a time, the
 * row's four bytes broadcast into vpdpbusd against the four bytes of each
 * token.  A lane then holds one block's whole integer sum, with no horizontal
 * reduction, and runs the reference's chain for its (row, token) exactly.  It
 * reads the activations of each full group of 16 tokens interleaved (dot.h,
 * skv_act_quantize at this level: per block, byte 4k..4k+3 of token t at
 * 64k + 4t as a + 128, then the 16 scales and the 16 block sums); the tokens
 * after the last full group stay in the row layout and go to the tile kernels. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX2__) && \
    defined(__FMA__) && defined(__F16C__)
#define SKV_DOT_VNNI 1
#define SKV_DOT_FN(name) skv_tiles_##name##_avx512
#define TILES_DECL(name)                                                                                  \
    void skv_tiles_##name##_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, \
                                   size_t qa_stride, size_t K, size_t T, size_t n_rows)
TILES_DECL(q8_0);
TILES_DECL(q4_0);
TILES_DECL(q4_k);
TILES_DECL(q6_k);
TILES_DECL(q4_1);
TILES_DECL(q5_0);
TILES_DECL(q5_1);
TILES_DECL(iq4_nl);
TILES_DECL(q2_k);
TILES_DECL(q3_k);
TILES_DECL(q5_k);
TILES_DECL(iq4_xs);
#define SKV_DOT_PFN(name) skv_gemv_##name##_pk_avx512
#include "quant/dot_x86.h"
#include "quant/dot_pack_x86.h"
#include "quant/dot_pack32_x86.h"
#include "quant/dot_pack2_x86.h"
#include "quant/dot_ext_x86.h"

const int skv_dot_avx512_lanes = 1;

#define LG 16   /* tokens per lane group */
#define LR 8    /* weight rows per pass over the groups */
#define LCH 64  /* blocks per prepared chunk of the rows */
#define LMAXG 32 /* lane groups per batch (their accumulators live on the stack) */
#define LBLK (LG * sizeof(skv_act32)) /* bytes of one block of a lane group: 16 x 40 */

/* A chunk of LCH blocks of LR rows prepared for the lanes kernel: the int8 values of
 * block b of row i at q[i] + b * stride, its scale and 128 * the sum of its values. */
typedef struct {
    const uint8_t *q[LR];
    size_t stride;
    float d[LR][LCH], m[LR][LCH]; /* m: the min factor of q4_1 / q5_1 (dot_ext_x86.h's c) */
    int32_t corr[LR][LCH];
    int8_t buf[LR][LCH * 32];
} lanes_prep;


/* The sum of the 32 int8 values at q (sad of q + 128 against zero, less 32 * 128). */
static inline int32_t sum32_s8(__m256i q)
{
    __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
    return _mm_cvtsi128_si32(h) - 32 * 128;
}

static void prep_q8_0(void *pv, const uint8_t *const w[LR], size_t b0, size_t nbc)
{
    lanes_prep *p = pv;
    p->stride = 34;
    for (int i = 0; i < LR; i++) {
        const uint8_t *r = w[i] + 34 * b0;
        p->q[i] = r + 2;
        for (size_t b = 0; b < nbc; b++) {
            p->d[i][b] = _cvtsh_ss(skv_rd16le(r + 34 * b));
            p->corr[i][b] = 128 * sum32_s8(ld32(r + 34 * b + 2));
        }
    }
}

static void prep_q4_0(void *pv, const uint8_t *const w[LR], size_t b0, size_t nbc)
{
    lanes_prep *p = pv;
    const __m256i m4 = _mm256_set1_epi8(15), eight = _mm256_set1_epi8(8);
    p->stride = 32;
    for (int i = 0; i < LR; i++) {
        const uint8_t *r = w[i] + 18 * b0;
        p->q[i] = (const uint8_t *)p->buf[i];
        for (size_t b = 0; b < nbc; b++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(r + 18 * b + 2));
            __m256i v = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4), eight);
            _mm256_storeu_si256((__m256i *)(void *)(p->buf[i] + 32 * b), v);
            p->d[i][b] = _cvtsh_ss(skv_rd16le(r + 18 * b));
            p->corr[i][b] = 128 * sum32_s8(v);
        }
    }
}

/* The other 32-value types (dot_ext_x86.h): q = u - bias, or the signed levels. */
static inline __attribute__((always_inline)) void prep32(void *pv, const uint8_t *const w[LR], size_t b0, size_t nbc,
                                                         const int kind)
{
    lanes_prep *p = pv;
    const size_t bytes = (size_t)k_ext[kind].bytes;
    p->stride = 32;
    for (int i = 0; i < LR; i++) {
        p->q[i] = (const uint8_t *)p->buf[i];
        for (size_t b = 0; b < nbc; b++) {
            const uint8_t *blk = w[i] + bytes * (b0 + b);
            __m256i v = _mm256_sub_epi8(values32(blk, kind), _mm256_set1_epi8((char)k_ext[kind].bias));
            _mm256_storeu_si256((__m256i *)(void *)(p->buf[i] + 32 * b), v);
            p->d[i][b] = _cvtsh_ss(skv_rd16le(blk));
            p->m[i][b] = k_ext[kind].m_off >= 0 ? _cvtsh_ss(skv_rd16le(blk + k_ext[kind].m_off)) : 0.0f;
            p->corr[i][b] = 128 * sum32_s8(v);
        }
    }
}

static void prep_q4_1(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prep32(p, w, b0, n, EXT_Q4_1); }
static void prep_q5_0(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prep32(p, w, b0, n, EXT_Q5_0); }
static void prep_q5_1(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prep32(p, w, b0, n, EXT_Q5_1); }
static void prep_iq4_nl(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prep32(p, w, b0, n, EXT_IQ4_NL); }

static inline int32_t rd32s(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* acc[g][i] = the chain of row i over the chunk's nbc blocks for lane group g < ng
 * (group g's block b at a + g * gbytes + b * LBLK); has_min: q4_1 / q5_1's min term,
 * the tokens' block sums (at 576) times m. */
static inline __attribute__((always_inline)) void chunk32(__m512 (*acc)[LR], const void *pv, const uint8_t *a,
                                                          size_t gbytes, size_t ng, size_t nbc, const int has_min)
{
    const lanes_prep *p = pv;
    for (size_t g = 0; g < ng; g++) {
        __m512 s[LR];
        for (int i = 0; i < LR; i++) s[i] = acc[g][i];
        for (size_t b = 0; b < nbc; b++) {
            const uint8_t *ab = a + g * gbytes + b * LBLK;
            __m512i x[8];
            __m512 dx = _mm512_loadu_ps((const void *)(ab + 512));
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) x[k] = _mm512_loadu_si512((const void *)(ab + 64 * k));
#pragma GCC unroll 8
            for (int i = 0; i < LR; i++) {
                const uint8_t *q = p->q[i] + b * p->stride;
                __m512i v = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) v = _mm512_dpbusd_epi32(v, x[k], _mm512_set1_epi32(rd32s(q + 4 * k)));
                v = _mm512_sub_epi32(v, _mm512_set1_epi32(p->corr[i][b]));
                s[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p->d[i][b]), dx), _mm512_cvtepi32_ps(v), s[i]);
                if (has_min)
                    s[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p->m[i][b]), dx),
                                           _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(ab + 576))), s[i]);
            }
        }
        for (int i = 0; i < LR; i++) acc[g][i] = s[i];
    }
}

static void lanes_chunk(__m512 (*acc)[LR], const void *p, const uint8_t *a, size_t gbytes, size_t ng, size_t nbc)
{
    chunk32(acc, p, a, gbytes, ng, nbc, 0);
}

static void lanes_chunk_min(__m512 (*acc)[LR], const void *p, const uint8_t *a, size_t gbytes, size_t ng, size_t nbc)
{
    chunk32(acc, p, a, gbytes, ng, nbc, 1);
}

/* ---- K-quants in lanes: a lane group's block of 256 values is 16 x 292 bytes:
 * byte 4k..4k+3 of token t at 64k + 4t (q + 128; k < 64), the 16 scales at 4096, and
 * at 4160 + 64k + 4t token t's group sums 2k (low) and 2k+1 (high) as int16. ---- */
#define KBLK (LG * sizeof(skv_act256))
#define KCH 8 /* blocks per prepared chunk */

/* A chunk of KCH blocks of LR rows: the 256 int8 values of each block (unsigned
 * nibbles for q4_k, q - 32 for q6_k), d, -m, 128 * sum_r sc[r] * sum q (the u8
 * offset's share), the runs' scales and q4_k's min pairs (mn[k] in both halves). */
typedef struct {
    float d[LR][KCH], mneg[LR][KCH];
    int32_t corr[LR][KCH];
    int32_t sc[LR][KCH][16];
    int32_t mn[LR][KCH][8];
    int8_t q[LR][KCH * 256];
} lanesk_prep;

/* The sums of the four 8-byte quarters of 32 unsigned bytes. */
static inline __m256i quarter_sums(__m256i v) { return _mm256_sad_epu8(v, _mm256_setzero_si256()); }

static inline int32_t quarter(__m256i s, int j)
{
    __m128i h = j < 2 ? _mm256_castsi256_si128(s) : _mm256_extracti128_si256(s, 1);
    return (int32_t)(j % 2 ? _mm_extract_epi64(h, 1) : _mm_cvtsi128_si64(h));
}

static void prep_q4_k(void *pv, const uint8_t *const w[LR], size_t b0, size_t nbc)
{
    lanesk_prep *p = pv;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int i = 0; i < LR; i++)
        for (size_t b = 0; b < nbc; b++) {
            const uint8_t *blk = w[i] + 144 * (b0 + b);
            uint8_t sc[8], mn[8];
            int32_t corr = 0;
            skv_k4_scales8(blk + 4, sc, mn);
            for (int c = 0; c < 4; c++) {
                __m256i q = ld32(blk + 16 + 32 * c);
                __m256i v[2] = {_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
                for (int h = 0; h < 2; h++) {
                    __m256i qs = quarter_sums(v[h]);
                    int r = 2 * c + h;
                    _mm256_storeu_si256((__m256i *)(void *)(p->q[i] + 256 * b + 32 * r), v[h]);
                    corr += sc[r] * (quarter(qs, 0) + quarter(qs, 1) + quarter(qs, 2) + quarter(qs, 3));
                }
            }
            for (int r = 0; r < 8; r++) p->sc[i][b][r] = sc[r], p->mn[i][b][r] = pair16(mn[r], mn[r]);
            p->corr[i][b] = 128 * corr;
            p->d[i][b] = _cvtsh_ss(skv_rd16le(blk));
            p->mneg[i][b] = -_cvtsh_ss(skv_rd16le(blk + 2));
        }
}

static void prep_q6_k(void *pv, const uint8_t *const w[LR], size_t b0, size_t nbc)
{
    lanesk_prep *p = pv;
    for (int i = 0; i < LR; i++)
        for (size_t b = 0; b < nbc; b++) {
            const uint8_t *blk = w[i] + 210 * (b0 + b);
            const int8_t *sc = (const int8_t *)(const void *)(blk + 192);
            int32_t corr = 0;
            for (int g = 0; g < 2; g++) {
                __m256i l0 = ld32(blk + 64 * g), l1 = ld32(blk + 64 * g + 32), h = ld32(blk + 128 + 32 * g);
                for (int k = 0; k < 4; k++) {
                    __m256i v = q6_values(l0, l1, h, k), qs = quarter_sums(v);
                    int j = 4 * g + k;
                    _mm256_storeu_si256((__m256i *)(void *)(p->q[i] + 256 * b + 32 * j),
                                        _mm256_sub_epi8(v, _mm256_set1_epi8(32)));
                    corr += sc[2 * j] * (quarter(qs, 0) + quarter(qs, 1) - 16 * 32);
                    corr += sc[2 * j + 1] * (quarter(qs, 2) + quarter(qs, 3) - 16 * 32);
                }
            }
            for (int r = 0; r < 16; r++) p->sc[i][b][r] = sc[r];
            p->corr[i][b] = 128 * corr;
            p->d[i][b] = _cvtsh_ss(skv_rd16le(blk + 208));
        }
}

/* The other 256-value types (dot_ext_x86.h): block b of row i as q = u - bias, or the
 * signed levels, in 16 runs of 16 with their scales (the min pairs of q2_k / q5_k as
 * q4_k's) and 128 * sum_r sc[r] * sum q. */
static inline __attribute__((always_inline)) void prepk_block(lanesk_prep *p, int i, size_t b, const uint8_t *blk,
                                                              const int kind)
{
    int16_t sc[16], mn[16];
    int32_t corr = 0;
    ext_scales(blk, sc, mn, kind);
    for (int j = 0; j < 8; j++) {
        __m256i v = _mm256_sub_epi8(values256(blk, j, kind), _mm256_set1_epi8((char)k_ext[kind].bias));
        __m256i qs = quarter_sums(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80))); /* q + 128 */
        _mm256_storeu_si256((__m256i *)(void *)(p->q[i] + 256 * b + 32 * j), v);
        corr += sc[2 * j] * (quarter(qs, 0) + quarter(qs, 1) - 16 * 128);
        corr += sc[2 * j + 1] * (quarter(qs, 2) + quarter(qs, 3) - 16 * 128);
    }
    for (int r = 0; r < 16; r++) p->sc[i][b][r] = sc[r];
    for (int k = 0; k < 8; k++) p->mn[i][b][k] = pair16(mn[2 * k], mn[2 * k + 1]);
    p->corr[i][b] = 128 * corr;
    p->d[i][b] = _cvtsh_ss(skv_rd16le(blk + k_ext[kind].d_off));
    p->mneg[i][b] = k_ext[kind].m_off >= 0 ? -_cvtsh_ss(skv_rd16le(blk + k_ext[kind].m_off)) : 0.0f;
}

static inline __attribute__((always_inline)) void prepk(void *pv, const uint8_t *const w[LR], size_t b0, size_t nbc,
                                                        const int kind)
{
    for (int i = 0; i < LR; i++)
        for (size_t b = 0; b < nbc; b++) prepk_block(pv, i, b, w[i] + (size_t)k_ext[kind].bytes * (b0 + b), kind);
}

static void prep_q2_k(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prepk(p, w, b0, n, EXT_Q2_K); }
static void prep_q3_k(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prepk(p, w, b0, n, EXT_Q3_K); }
static void prep_q5_k(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prepk(p, w, b0, n, EXT_Q5_K); }
static void prep_iq4_xs(void *p, const uint8_t *const w[LR], size_t b0, size_t n) { prepk(p, w, b0, n, EXT_IQ4_XS); }

/* The chunk kernel of the K-quants: runs of L four-byte steps (8: q4_k's 32 values,
 * 4: q6_k's 16), each run's exact sum scaled by its scale; has_min: q4_k's min term. */
static inline __attribute__((always_inline)) void chunk_k(__m512 (*acc)[LR], const lanesk_prep *p, const uint8_t *a,
                                                          size_t gbytes, size_t ng, size_t nbc, const int L,
                                                          const int has_min)
{
    for (size_t g = 0; g < ng; g++) {
        __m512 s[LR];
        for (int i = 0; i < LR; i++) s[i] = acc[g][i];
        for (size_t b = 0; b < nbc; b++) {
            const uint8_t *ab = a + g * gbytes + b * KBLK;
            __m512i is[LR];
            for (int i = 0; i < LR; i++) is[i] = _mm512_setzero_si512();
            for (int r = 0; r < 64 / L; r++) {
                __m512i x[8];
#pragma GCC unroll 8
                for (int k = 0; k < L; k++) x[k] = _mm512_loadu_si512((const void *)(ab + 64 * (L * r + k)));
#pragma GCC unroll 8
                for (int i = 0; i < LR; i++) {
                    const uint8_t *q = (const uint8_t *)p->q[i] + 256 * b + 4 * L * r;
                    __m512i v = _mm512_setzero_si512();
#pragma GCC unroll 8
                    for (int k = 0; k < L; k++) v = _mm512_dpbusd_epi32(v, x[k], _mm512_set1_epi32(rd32s(q + 4 * k)));
                    is[i] = _mm512_add_epi32(is[i], _mm512_mullo_epi32(v, _mm512_set1_epi32(p->sc[i][b][r])));
                }
            }
            __m512 dx = _mm512_loadu_ps((const void *)(ab + 4096));
            for (int i = 0; i < LR; i++) {
                __m512i v = _mm512_sub_epi32(is[i], _mm512_set1_epi32(p->corr[i][b]));
                s[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p->d[i][b]), dx), _mm512_cvtepi32_ps(v), s[i]);
                if (!has_min) continue;
                __m512i mi = _mm512_setzero_si512();
                for (int k = 0; k < 8; k++)
                    mi = _mm512_add_epi32(mi, _mm512_madd_epi16(_mm512_loadu_si512((const void *)(ab + 4160 + 64 * k)),
                                                                _mm512_set1_epi32(p->mn[i][b][k])));
                s[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p->mneg[i][b]), dx), _mm512_cvtepi32_ps(mi), s[i]);
            }
        }
        for (int i = 0; i < LR; i++) acc[g][i] = s[i];
    }
}

static void chunk_q4_k(__m512 (*acc)[LR], const void *p, const uint8_t *a, size_t gbytes, size_t ng, size_t nbc)
{
    chunk_k(acc, p, a, gbytes, ng, nbc, 8, 1);
}

static void chunk_q6_k(__m512 (*acc)[LR], const void *p, const uint8_t *a, size_t gbytes, size_t ng, size_t nbc)
{
    chunk_k(acc, p, a, gbytes, ng, nbc, 4, 0);
}

/* Runs of 16 with a min (q2_k, q5_k). */
static void chunk_k16_min(__m512 (*acc)[LR], const void *p, const uint8_t *a, size_t gbytes, size_t ng, size_t nbc)
{
    chunk_k(acc, p, a, gbytes, ng, nbc, 4, 1);
}

/* How a type runs in lanes: its row preparation, the chunk kernel, the bytes of one
 * block of a lane group and the blocks per prepared chunk. */
typedef struct {
    void (*prep)(void *p, const uint8_t *const w[LR], size_t b0, size_t nbc);
    void (*chunk)(__m512 (*acc)[LR], const void *p, const uint8_t *a, size_t gbytes, size_t ng, size_t nbc);
    size_t n, blk, ch;
} lanes_kind;

/* Rows r0..r0+m-1 of the ng lane groups at a (group g's 16 tokens from y + 16g * ldy). */
static void lanes_rows(float *y, size_t ldy, const uint8_t *const w[LR], size_t m, const uint8_t *a,
                       size_t gbytes, size_t ng, size_t nb, const lanes_kind *kd)
{
    __m512 acc[LMAXG][LR];
    union {
        lanes_prep l;
        lanesk_prep k;
    } p;
    for (size_t g = 0; g < ng; g++)
        for (int i = 0; i < LR; i++) acc[g][i] = _mm512_setzero_ps();
    for (size_t b0 = 0; b0 < nb; b0 += kd->ch) {
        size_t nbc = nb - b0 < kd->ch ? nb - b0 : kd->ch;
        kd->prep(&p, w, b0, nbc);
        kd->chunk(acc, &p, a + b0 * kd->blk, gbytes, ng, nbc);
    }
    for (size_t g = 0; g < ng; g++)
        for (size_t i = 0; i < m; i++) {
            float o[LG];
            _mm512_storeu_ps(o, acc[g][i]);
            for (size_t t = 0; t < LG; t++) y[(LG * g + t) * ldy + i] = o[t];
        }
}

/* The full lane groups of T tokens (lanes kernel), then the rest (tile kernel);
 * tiles alone where kd is NULL. */
static void gemm_lanes(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride,
                       size_t K, size_t T, size_t n_rows, const lanes_kind *kd, skv_gemm_fn tiles)
{
    const uint8_t *w0 = W, *a0 = qa;
    size_t ng_all = kd ? T / LG : 0, gbytes = LG * qa_stride;
    for (size_t g0 = 0; g0 < ng_all; g0 += LMAXG) {
        size_t ng = ng_all - g0 < LMAXG ? ng_all - g0 : LMAXG;
        for (size_t r0 = 0; r0 < n_rows; r0 += LR) {
            size_t m = n_rows - r0 < LR ? n_rows - r0 : LR;
            const uint8_t *w[LR];
            for (size_t i = 0; i < LR; i++) w[i] = w0 + (r0 + (i < m ? i : m - 1)) * row_bytes;
            lanes_rows(y + LG * g0 * ldy + r0, ldy, w, m, a0 + g0 * gbytes, gbytes, ng, K / kd->n, kd);
        }
    }
    if (T > LG * ng_all)
        tiles(y + LG * ng_all * ldy, ldy, W, row_bytes, a0 + ng_all * gbytes, qa_stride, K, T - LG * ng_all, n_rows);
}

/* The exported gemm of one type: lanes kernel of its kind (prep, chunk kernel, block
 * values, lane-group block bytes, blocks per chunk), then tiles. */
#define GEMM512(name, chunk, n, blk, ch)                                                                 \
    static const lanes_kind k_##name = {prep_##name, chunk, n, blk, ch};                                 \
    void skv_gemm_##name##_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, \
                                  size_t qa_stride, size_t K, size_t T, size_t n_rows)                  \
    {                                                                                                    \
        gemm_lanes(y, ldy, W, row_bytes, qa, qa_stride, K, T, n_rows, &k_##name, skv_tiles_##name##_avx512); \
    }
GEMM512(q8_0, lanes_chunk, 32, LBLK, LCH)
GEMM512(q4_0, lanes_chunk, 32, LBLK, LCH)
GEMM512(q4_1, lanes_chunk_min, 32, LBLK, LCH)
GEMM512(q5_0, lanes_chunk, 32, LBLK, LCH)
GEMM512(q5_1, lanes_chunk_min, 32, LBLK, LCH)
GEMM512(iq4_nl, lanes_chunk, 32, LBLK, LCH)
GEMM512(q4_k, chunk_q4_k, 256, KBLK, KCH)
GEMM512(q6_k, chunk_q6_k, 256, KBLK, KCH)
GEMM512(q2_k, chunk_k16_min, 256, KBLK, KCH)
GEMM512(q3_k, chunk_q6_k, 256, KBLK, KCH)
GEMM512(q5_k, chunk_k16_min, 256, KBLK, KCH)
GEMM512(iq4_xs, chunk_q6_k, 256, KBLK, KCH)

#elif defined(__x86_64__)
const int skv_dot_avx512_lanes = 0;
SKV_GEMM_AVX512_ALIAS(q8_0)
SKV_GEMM_AVX512_ALIAS(q4_0)
SKV_GEMM_AVX512_ALIAS(q4_k)
SKV_GEMM_AVX512_ALIAS(q6_k)
SKV_GEMM_AVX512_ALIAS(q4_1)
SKV_GEMM_AVX512_ALIAS(q5_0)
SKV_GEMM_AVX512_ALIAS(q5_1)
SKV_GEMM_AVX512_ALIAS(iq4_nl)
SKV_GEMM_AVX512_ALIAS(q2_k)
SKV_GEMM_AVX512_ALIAS(q3_k)
SKV_GEMM_AVX512_ALIAS(q5_k)
SKV_GEMM_AVX512_ALIAS(iq4_xs)
#define SKV_PK_ALIAS(name)                                                                                      \
    void skv_gemv_##name##_pk_avx512(float *y, const void *W, size_t row_bytes, const void *qa, size_t K, size_t n) \
    {                                                                                                           \
        skv_gemv_##name##_pk_avx2(y, W, row_bytes, qa, K, n);                                                   \
    }
SKV_PK_ALIAS(q4_0)
SKV_PK_ALIAS(q4_k)
SKV_PK_ALIAS(q5_k)
SKV_PK_ALIAS(q6_k)
SKV_PK_ALIAS(iq4_xs)
SKV_PK_ALIAS(q4_1)
SKV_PK_ALIAS(q5_0)
SKV_PK_ALIAS(q5_1)
SKV_PK_ALIAS(iq4_nl)
SKV_PK_ALIAS(q8_0)
SKV_PK_ALIAS(q2_k)
SKV_PK_ALIAS(q3_k)
void skv_gemv_unpack8_q4_0_pk_avx512(const void *P, size_t nb, size_t r0, void *dst)
{
    skv_gemv_unpack8_q4_0_pk_avx2(P, nb, r0, dst);
}
void skv_gemv_unpack8_iq4_xs_pk_avx512(const void *P, size_t nb, size_t r0, void *dst)
{
    skv_gemv_unpack8_iq4_xs_pk_avx2(P, nb, r0, dst);
}
#endif
