/* The integer dot kernels' scalar reference and dispatch (dot.h).  This file
 * is the specification: every SIMD twin computes exactly these bits. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "core/f16.h"
#include "quant/fbits.h"
#include "quant/types.h"

static_assert(sizeof(skv_act32) == 40, "act32: d, 2 sums, 32 values");
static_assert(sizeof(skv_act256) == 292, "act256: d, 16 sums, 256 values");

/* max |x[j]| as the bits of |x| (an integer max: exact in any order, NaN > inf). */
static uint32_t amax_bits(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t a = skv_f32_bits(x[j]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* The sums of the 16-value groups of n quantized values. */
static void group_sums(const int8_t *q, int16_t *bsum, size_t n)
{
    for (size_t g = 0; g < n / 16; g++) {
        int s = 0;
        for (size_t l = 0; l < 16; l++) s += q[16 * g + l];
        bsum[g] = (int16_t)s;
    }
}

/* roundf(x[j] * id) clamped to [-127, 127] for 32 values (x86 min/max semantics:
 * NaN -> 127; the clamps only matter for non-finite inputs). */
static void round32_ref(const float *x, float id, int8_t *q)
{
    for (size_t j = 0; j < 32; j++) {
        float r = roundf(x[j] * id);
        r = r < 127.0f ? r : 127.0f;
        r = r > -127.0f ? r : -127.0f;
        q[j] = (int8_t)(int)r;
    }
}

/* nearest_int of quantize_row_q8_K: the 1.5 * 2^23 trick read as bits, then clamped. */
static int8_t q8k_round(float v)
{
    int32_t i = (int32_t)(skv_f32_bits(v + 12582912.0f) & 0x007fffffu) - 0x00400000;
    i = i < 127 ? i : 127;
    return (int8_t)(i > -128 ? i : -128);
}

static void round256_ref(const float *x, float iscale, int8_t *q)
{
    for (size_t j = 0; j < 256; j++) q[j] = q8k_round(iscale * x[j]);
}

/* The per-value steps of the activation quantizers: the scalar reference, or the AVX2
 * twins (act_avx2.c, the same bits) at the AVX2 level and above. */
typedef struct {
    uint32_t (*amax)(const float *x, size_t n);
    void (*round32)(const float *x, float id, int8_t *q);
    void (*round256)(const float *x, float iscale, int8_t *q);
} act_ops;

static const act_ops k_ops_ref = {amax_bits, round32_ref, round256_ref};
#if defined(__x86_64__)
static const act_ops k_ops_avx2 = {skv_amax_bits_avx2, skv_act32_round_avx2, skv_act256_round_avx2};
#endif

/* The ops of a level the CPU allows (skv_dot_level). */
static const act_ops *ops_at(int level)
{
#if defined(__x86_64__)
    if (level >= SKV_DOT_AVX2) return &k_ops_avx2;
#else
    (void)level;
#endif
    return &k_ops_ref;
}

/* quantize_row_q8_0's arithmetic: d = amax / 127 (kept as binary16), q = roundf(x / d). */
static void act32_block(const float *x, skv_act32 *a, const act_ops *ops)
{
    float d = skv_bits_f32(ops->amax(x, 32)) / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    a->d = skv_f16_to_f32(skv_f32_to_f16(d));
    ops->round32(x, id, a->qs);
    group_sums(a->qs, a->bsum, 32);
}

static void act32_rows(const float *x, void *qa, size_t K, const act_ops *ops)
{
    skv_act32 *a = qa;
    for (size_t b = 0; b < K / 32; b++) act32_block(x + 32 * b, a + b, ops);
}

void skv_act32_quantize_ref(const float *x, void *qa, size_t K) { act32_rows(x, qa, K, &k_ops_ref); }

/* The lanes layout of 16 rows (row t at x + t*ldx; dot_avx512.c): per block,
 * bytes 4k..4k+3 of row t at 64k + 4t as q + 128, then the 16 scales and the
 * 16 block sums, 16 x 40 bytes: the same values as 16 skv_act32 rows. */
static void act32_lanes(const float *x, size_t ldx, size_t K, uint8_t *out, const act_ops *ops)
{
    for (size_t b = 0; b < K / 32; b++, out += 16 * sizeof(skv_act32)) {
        skv_act32 a[16];
        float d[16];
        int32_t s[16];
        for (size_t t = 0; t < 16; t++) {
            act32_block(x + t * ldx + 32 * b, a + t, ops);
            d[t] = a[t].d;
            s[t] = a[t].bsum[0] + a[t].bsum[1];
            for (size_t j = 0; j < 32; j++) out[64 * (j / 4) + 4 * t + j % 4] = (uint8_t)(a[t].qs[j] + 128);
        }
        memcpy(out + 512, d, sizeof d);
        memcpy(out + 576, s, sizeof s);
    }
}

/* quantize_row_q8_K's arithmetic: max = the first value of largest magnitude,
 * q = rne(x * (-127 / max)), d = 1 / (-127 / max); an all-zero block stays zero. */
static void act256_block(const float *x, skv_act256 *a, const act_ops *ops)
{
    uint32_t mb = ops->amax(x, 256);
    size_t at = 0;
    memset(a, 0, sizeof *a);
    if (!mb) return;
    while ((skv_f32_bits(x[at]) & 0x7fffffffu) != mb) at++;
    float iscale = -127.0f / x[at];
    ops->round256(x, iscale, a->qs);
    group_sums(a->qs, a->bsum, 256);
    a->d = 1.0f / iscale;
}

static void act256_rows(const float *x, void *qa, size_t K, const act_ops *ops)
{
    skv_act256 *a = qa;
    for (size_t b = 0; b < K / 256; b++) act256_block(x + 256 * b, a + b, ops);
}

void skv_act256_quantize_ref(const float *x, void *qa, size_t K) { act256_rows(x, qa, K, &k_ops_ref); }

/* The lanes layout of 16 rows of 256-value blocks: per block, bytes 4k..4k+3 of
 * row t at 64k + 4t as q + 128, the 16 scales at 4096, and at 4160 + 64k + 4t row
 * t's group sums 2k and 2k+1 as an int16 pair: the values of 16 skv_act256 rows. */
static void act256_lanes(const float *x, size_t ldx, size_t K, uint8_t *out, const act_ops *ops)
{
    for (size_t b = 0; b < K / 256; b++, out += 16 * sizeof(skv_act256))
        for (size_t t = 0; t < 16; t++) {
            skv_act256 a;
            act256_block(x + t * ldx + 256 * b, &a, ops);
            for (size_t j = 0; j < 256; j++) out[64 * (j / 4) + 4 * t + j % 4] = (uint8_t)(a.qs[j] + 128);
            memcpy(out + 4096 + 4 * t, &a.d, 4);
            for (size_t k = 0; k < 8; k++) {
                uint32_t v = (uint32_t)(uint16_t)a.bsum[2 * k] | (uint32_t)(uint16_t)a.bsum[2 * k + 1] << 16;
                memcpy(out + 4160 + 64 * k + 4 * t, &v, 4);
            }
        }
}

/* One block's exact integer sums against its activation values. */
static void block_isums(const skv_iblock *w, const int8_t *qs, const int16_t *bsum, size_t n, int32_t *isum,
                        int32_t *imin)
{
    int32_t s = 0, m = 0;
    for (size_t g = 0; g < n / 16; g++) {
        int32_t p = 0;
        for (size_t l = 0; l < 16; l++) p += (int32_t)w->q[16 * g + l] * qs[16 * g + l];
        s += (int32_t)w->sc[g] * p;
        m += (int32_t)w->mn[g] * bsum[g];
    }
    *isum = s;
    *imin = m;
}

/* The canonical dot of one weight row with one activation row (dot.h). */
static float row_dot(const uint8_t *w, const uint8_t *qa, size_t nb, size_t n, size_t bytes, skv_unpack_fn unpack)
{
    float acc = 0.0f;
    size_t abytes = n == 32 ? sizeof(skv_act32) : sizeof(skv_act256);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *a = qa + b * abytes;
        const skv_act32 *a32 = (const skv_act32 *)(const void *)a;
        const skv_act256 *a256 = (const skv_act256 *)(const void *)a;
        skv_iblock ib;
        int32_t isum, imin;
        float dx = n == 32 ? a32->d : a256->d;
        unpack(w + b * bytes, &ib);
        block_isums(&ib, n == 32 ? a32->qs : a256->qs, n == 32 ? a32->bsum : a256->bsum, n, &isum, &imin);
        acc = fmaf(ib.d * dx, (float)isum, acc);
        if (ib.has_min) acc = fmaf(-(ib.m * dx), (float)imin, acc);
    }
    return acc;
}

void skv_gemm_ref(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, size_t qa_stride,
                  size_t K, size_t T, size_t n_rows, size_t n, size_t bytes, skv_unpack_fn unpack)
{
    const uint8_t *w = W, *a = qa;
    for (size_t t = 0; t < T; t++)
        for (size_t r = 0; r < n_rows; r++)
            y[t * ldy + r] = row_dot(w + r * row_bytes, a + t * qa_stride, K / n, n, bytes, unpack);
}

/* The reference gemm of one type: blocks of n values, bytes each. */
#define GEMM_REF(name, n, bytes)                                                                       \
    void skv_gemm_##name##_ref(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa, \
                               size_t qa_stride, size_t K, size_t T, size_t n_rows)                   \
    {                                                                                                  \
        skv_gemm_ref(y, ldy, W, row_bytes, qa, qa_stride, K, T, n_rows, n, bytes, skv_unpack_##name);  \
    }
GEMM_REF(q8_0, 32, 34)
GEMM_REF(q4_0, 32, 18)
GEMM_REF(q4_1, 32, 20)
GEMM_REF(q5_0, 32, 22)
GEMM_REF(q5_1, 32, 24)
GEMM_REF(iq4_nl, 32, 18)
GEMM_REF(q2_k, 256, 84)
GEMM_REF(q3_k, 256, 110)
GEMM_REF(q4_k, 256, 144)
GEMM_REF(q5_k, 256, 176)
GEMM_REF(q6_k, 256, 210)
GEMM_REF(iq4_xs, 256, 136)

/* ---- dispatch ---------------------------------------------------------------- */

/* Activation formats: block size, bytes, the row quantizer and the lanes one (16 rows). */
static const struct {
    size_t n, bytes;
    void (*rows)(const float *x, void *qa, size_t K, const act_ops *ops);
    void (*lanes)(const float *x, size_t ldx, size_t K, uint8_t *out, const act_ops *ops);
} k_acts[3] = {
    [SKV_ACT_Q8_32] = {32, sizeof(skv_act32), act32_rows, act32_lanes},
    [SKV_ACT_Q8_256] = {256, sizeof(skv_act256), act256_rows, act256_lanes},
};

static unsigned act_of(uint32_t wtype)
{
    const skv_type_traits *t = skv_type_traits_of(wtype);
    return t && t->gemm[SKV_DOT_REF] ? t->act_type : SKV_ACT_NONE;
}

size_t skv_act_row_bytes(uint32_t wtype, size_t K)
{
    unsigned a = act_of(wtype);
    if (a == SKV_ACT_NONE || K == 0 || K % k_acts[a].n) return 0;
    return K / k_acts[a].n * k_acts[a].bytes;
}

#define ACT_L2_BYTES ((size_t)768 << 10) /* the activations' share of a 2 MiB L2 */

size_t skv_act_token_block(uint32_t wtype, size_t K)
{
    size_t rb = skv_act_row_bytes(wtype, K), n = rb ? ACT_L2_BYTES / rb / 16 * 16 : 0;
    return n < 16 ? 16 : n;
}

int skv_dot_level(int max_level)
{
    int l = SKV_DOT_REF;
    if (skv_cpu_has(SKV_CPU_AVX2_SET)) l = SKV_DOT_AVX2;
    if (l == SKV_DOT_AVX2 && skv_cpu_has(SKV_CPU_AVX512_SET)) l = SKV_DOT_AVX512;
    return l < max_level ? l : max_level;
}

/* The entry of a per-level column at level or the nearest lower level that has one. */
#define AT_LEVEL(col, level, out)                                     \
    do {                                                              \
        int l_ = (level) < 0 ? 0 : (level) > 2 ? 2 : (level);         \
        for ((out) = NULL; l_ >= 0 && !(out); l_--) (out) = (col)[l_]; \
    } while (0)

/* Whether the gemm of wtype at level reads full groups of 16 rows in the lanes layout. */
static int lanes_layout(int level, uint32_t wtype)
{
#if defined(__x86_64__)
    (void)wtype; /* every type with an integer dot has a lanes kernel */
    return skv_dot_avx512_lanes && level >= SKV_DOT_AVX512;
#else
    (void)level, (void)wtype;
    return 0;
#endif
}

void skv_act_quantize(int level, uint32_t wtype, const float *x, size_t ldx, size_t T, size_t K, void *qa)
{
    size_t rb = skv_act_row_bytes(wtype, K), t = 0;
    unsigned a = act_of(wtype);
    const act_ops *ops;
    if (!rb) return;
    level = skv_dot_level(level);
    ops = ops_at(level);
    if (lanes_layout(level, wtype))
        for (; t + 16 <= T; t += 16) k_acts[a].lanes(x + t * ldx, ldx, K, (uint8_t *)qa + t * rb, ops);
    for (; t < T; t++) k_acts[a].rows(x + t * ldx, (uint8_t *)qa + t * rb, K, ops);
}

skv_gemm_fn skv_dot_gemm(int level, uint32_t wtype)
{
    const skv_type_traits *t = skv_type_traits_of(wtype);
    skv_gemm_fn g;
    if (!t || !t->gemm[SKV_DOT_REF]) return NULL;
    AT_LEVEL(t->gemm, skv_dot_level(level), g);
    return g;
}
