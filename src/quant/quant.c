/* Per-vector quantizers: TurboQuant (MSE / inner-product) and baselines.
 * Byte layouts, rotation and PRNG spec: docs/quant.md.  Shapes:
 *   x, y      [n_vec][d] floats          (one KV head's vectors, contiguous)
 *   encoded   [n_vec][bytes] bytes       (bytes = skv_quant_bytes(scheme, d))
 *   S         [d][d] floats, row-major   (QJL matrix, prod schemes only)
 *
 * Every float operation below is a plain IEEE binary32 (or binary64 in the
 * PRNG) operation in a fixed order; reductions use the 8-lane striped order
 * of skv_quant_dot_ref() so that the AVX2 twin computes the same bits. */
#include "quant/quant.h"
#include "core/fpguard.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "seqkv.h"
#include "quant/tq_codebooks.h"

/* ---- layouts, pinned ------------------------------------------------------ */

#define TQ_BYTES(b, d) ((size_t)2 + ((size_t)(b) * (size_t)(d) + 7u) / 8u)
#define TQP_BYTES(b, d) ((size_t)4 + ((size_t)(b) * (size_t)(d) + 7u) / 8u)

static_assert(sizeof(float) == 4, "binary32 float required");
static_assert(sizeof(uint16_t) == 2, "uint16_t");
static_assert(SKV_QUANT_COUNT == 11, "scheme ids are a file format: append only");
static_assert(SKV_QUANT_Q8_0_BLOCK_BYTES == 34, "q8_0 block = fp16 scale + 32 x int8");
static_assert(SKV_QUANT_Q4_0_BLOCK_BYTES == 18, "q4_0 block = fp16 scale + 16 x 2 nibbles");
static_assert(TQ_BYTES(3, 128) == 50, "tq3 @ d=128: 2-byte norm + 48 bytes of indices");
static_assert(TQ_BYTES(4, 128) == 66, "tq4 @ d=128");
static_assert(TQP_BYTES(3, 128) == 52, "tq3p @ d=128: 2 norms + 32 B indices + 16 B signs");
static_assert(TQ_BYTES(3, 5) == 4, "tq3 @ d=5: 15 bits of indices round up to 2 bytes");
static_assert(SKV_QUANT_MAX_D_TQP <= SKV_QUANT_MAX_D_TQ, "prod limit within tq limit");

/* PRNG stream tags (ASCII "tqsign\0\0" + round, "tqperm\0\0" + round,
 * "tqqjl\0\0\0"). */
#define TAG_SIGNS 0x74717369676E0000ull
#define TAG_PERM 0x74717065726D0000ull
#define TAG_QJL 0x7471716A6C000000ull

/* Rotation of a d that is not a power of two: this many rounds of
 * block-diagonal randomized Hadamard, with a seeded permutation between
 * rounds (docs/quant.md). */
#define ROT_ROUNDS 3
#define MAX_BLOCKS 16 /* set bits of d <= SKV_QUANT_MAX_D_TQ */
static_assert(SKV_QUANT_MAX_D_TQ < (1u << MAX_BLOCKS), "blocks of d fit MAX_BLOCKS");

/* sqrt(pi/2), the QJL de-biasing constant, as the nearest binary32. */
#define SQRT_HALF_PI_F 1.25331413731550025f

enum { KIND_F32, KIND_F16, KIND_Q8_0, KIND_Q4_0, KIND_TQ, KIND_TQP };

typedef struct scheme_traits {
    const char *name;
    int kind;
    int bits; /* nominal bits per value (tq: total incl. QJL bit) */
} scheme_traits;

static const scheme_traits k_traits[SKV_QUANT_COUNT] = {
    [SKV_QUANT_F32] = {"f32", KIND_F32, 32},   [SKV_QUANT_F16] = {"f16", KIND_F16, 16},
    [SKV_QUANT_Q8_0] = {"q8_0", KIND_Q8_0, 8}, [SKV_QUANT_Q4_0] = {"q4_0", KIND_Q4_0, 4},
    [SKV_QUANT_TQ1] = {"tq1", KIND_TQ, 1},     [SKV_QUANT_TQ2] = {"tq2", KIND_TQ, 2},
    [SKV_QUANT_TQ3] = {"tq3", KIND_TQ, 3},     [SKV_QUANT_TQ4] = {"tq4", KIND_TQ, 4},
    [SKV_QUANT_TQ2P] = {"tq2p", KIND_TQP, 2},  [SKV_QUANT_TQ3P] = {"tq3p", KIND_TQP, 3},
    [SKV_QUANT_TQ4P] = {"tq4p", KIND_TQP, 4},
};

struct skv_quant_ctx {
    int scheme;
    int kind;
    size_t d;
    uint64_t seed;
    size_t bytes;     /* per encoded vector */
    int bits;         /* MSE-stage index bits (tq: b, tqp: b-1), 0 for baselines */
    int levels;       /* 1 << bits */
    int simd;         /* use the AVX2 kernels */
    int n_round;      /* rotation rounds: 1 (d a power of two) or ROT_ROUNDS */
    int n_blk;        /* Hadamard blocks: the binary decomposition of d */
    size_t blk_off[MAX_BLOCKS], blk_len[MAX_BLOCKS];
    float blk_rs[MAX_BLOCKS]; /* 1 / sqrtf(blk_len) */
    float qjl_scale;  /* sqrt(pi/2) / d */
    float cent[16];   /* unit-sphere centroids, ascending */
    float bound[16];  /* bound[k] = (cent[k] + cent[k+1]) / 2, k < levels-1 */
    uint32_t *sign;   /* [n_round][d] 0 or 0x80000000 (xor into the float bits) */
    uint32_t *perm;   /* [n_round-1][d] permutation after round r: v'[i] = v[perm[i]] */
    float *S;         /* [d][d] QJL matrix (prod schemes) */
};

/* Byte order only picks fast copies; every layout is little-endian regardless. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SKV_LITTLE_ENDIAN 1
#else
#define SKV_LITTLE_ENDIAN 0
#endif

/* ---- small helpers -------------------------------------------------------- */

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int f32_finite(float f) { return (f32_bits(f) & 0x7f800000u) != 0x7f800000u; }
static int f16_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

static int any_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!f32_finite(x[i])) return 1;
    return 0;
}

static int kind_of(int scheme)
{
    return (scheme >= 0 && scheme < SKV_QUANT_COUNT) ? k_traits[scheme].kind : -1;
}

/* ---- PRNG: splitmix64 and a deterministic Gaussian ------------------------ */

uint64_t skv_quant_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Natural log of a positive normal binary64 from + - * / only:
 * x = 2^e * m, m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(z), z = (m-1)/(m+1),
 * |z| <= 0.1716, series to z^25 (truncation < 1e-20).  Not correctly rounded
 * (~1 ulp), but the same bits on every IEEE machine, which is what matters. */
static double det_log(double x)
{
    uint64_t u;
    double m, z, z2, p;
    int e;
    memcpy(&u, &x, sizeof u);
    e = (int)((u >> 52) & 0x7ff) - 1023;
    u = (u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    memcpy(&m, &u, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    z = (m - 1.0) / (m + 1.0);
    z2 = z * z;
    p = 1.0 / 25.0;
    for (int k = 11; k >= 0; k--) p = p * z2 + 1.0 / (double)(2 * k + 1);
    return 2.0 * z * p + (double)e * 0.69314718055994530942;
}

double skv_quant_gauss(uint64_t *state, double *spare, int *has_spare)
{
    if (*has_spare) {
        *has_spare = 0;
        return *spare;
    }
    for (;;) {
        /* u, v uniform on [-1, 1) with 53-bit resolution (exact in binary64) */
        double u = (double)(skv_quant_splitmix64(state) >> 11) * 0x1p-52 - 1.0;
        double v = (double)(skv_quant_splitmix64(state) >> 11) * 0x1p-52 - 1.0;
        double s = u * u + v * v;
        double f;
        if (s >= 1.0 || s == 0.0) continue;
        f = sqrt(-2.0 * det_log(s) / s);
        *spare = v * f;
        *has_spare = 1;
        return u * f;
    }
}

/* ---- scalar reference kernels (the AVX2 twins compute the same bits) ------ */

float skv_quant_dot_ref(const float *a, const float *b, size_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
    return skv_quant_hsum8(l);
}

/* Unnormalised Walsh-Hadamard transform of v[m], m a power of two:
 * stage h pairs (j, j+h) -> (a+b, a-b). */
void skv_quant_fwht_ref(float *v, size_t m)
{
    for (size_t h = 1; h < m; h <<= 1)
        for (size_t i = 0; i < m; i += h << 1)
            for (size_t j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
}

void skv_quant_scale_ref(const float *x, float k, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = x[i] * k;
}

void skv_quant_xorsign_ref(float *v, const uint32_t *mask, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = bits_f32(f32_bits(v[i]) ^ mask[i]);
}

/* idx[i] = #{k < nb : y[i] > bound[k]} (bounds ascending). */
void skv_quant_index_ref(const float *y, const float *bound, int nb, uint8_t *idx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        for (int k = 0; k < nb; k++) c += y[i] > bound[k];
        idx[i] = (uint8_t)c;
    }
}

void skv_quant_lookup_ref(const uint8_t *idx, const float *cent, int levels, float *v, size_t n)
{
    (void)levels; /* indices are < levels by construction (b-bit fields) */
    for (size_t i = 0; i < n; i++) v[i] = cent[idx[i]];
}

/* QJL signs: z[i] = (S_i . r >= 0) with S_i row i of S[d][d]. */
void skv_quant_qjl_signs_ref(const float *S, const float *r, size_t d, uint8_t *z)
{
    for (size_t i = 0; i < d; i++) z[i] = skv_quant_dot_ref(S + i * d, r, d) >= 0.0f;
}

/* acc = S^T (2z - 1), summed over rows i = 0, 1, ... in order from +0:
 * acc[j] = acc[j] + S[i][j] where z[i] is 1, acc[j] - S[i][j] where 0. */
void skv_quant_qjl_accum_ref(const float *S, const uint8_t *z, size_t d, float *acc)
{
    for (size_t j = 0; j < d; j++) acc[j] = 0.0f;
    for (size_t i = 0; i < d; i++) {
        const float *row = S + i * d;
        if (z[i])
            for (size_t j = 0; j < d; j++) acc[j] = acc[j] + row[j];
        else
            for (size_t j = 0; j < d; j++) acc[j] = acc[j] - row[j];
    }
}

/* f32 -> f16 (RNE) as little-endian bytes; returns 1 if any result is
 * infinite or NaN (the caller has rejected non-finite input already). */
int skv_quant_f16enc_ref(const float *x, uint8_t *out, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = skv_f32_to_f16(x[i]);
        bad |= (h & 0x7c00u) == 0x7c00u;
        out[2 * i] = (uint8_t)h;
        out[2 * i + 1] = (uint8_t)(h >> 8);
    }
    return bad;
}

/* Little-endian f16 bytes -> f32; returns 1 if any input is infinite or NaN. */
int skv_quant_f16dec_ref(const uint8_t *in, float *y, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(in[2 * i] | in[2 * i + 1] << 8);
        bad |= (h & 0x7c00u) == 0x7c00u;
        y[i] = skv_f16_to_f32(h);
    }
    return bad;
}

/* ---- dispatch ------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_TWIN 1
#else
#define HAVE_AVX2_TWIN 0
#endif

int skv_quant_simd_available(void)
{
#if HAVE_AVX2_TWIN && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

#if HAVE_AVX2_TWIN
#define PICK(c, name) ((c)->simd ? skv_quant_##name##_avx2 : skv_quant_##name##_ref)
#else
#define PICK(c, name) (skv_quant_##name##_ref)
#endif

static float k_dot(const skv_quant_ctx *c, const float *a, const float *b, size_t n)
{
    return PICK(c, dot)(a, b, n);
}

static void k_fwht(const skv_quant_ctx *c, float *v, size_t m)
{
    if (m >= 8)
        PICK(c, fwht)(v, m);
    else
        skv_quant_fwht_ref(v, m);
}

static void k_scale(const skv_quant_ctx *c, const float *x, float k, float *y, size_t n)
{
    PICK(c, scale)(x, k, y, n);
}

static void k_xorsign(const skv_quant_ctx *c, float *v, const uint32_t *mask, size_t n)
{
    PICK(c, xorsign)(v, mask, n);
}

static void k_index(const skv_quant_ctx *c, const float *y, uint8_t *idx, size_t n)
{
    PICK(c, index)(y, c->bound, c->levels - 1, idx, n);
}

static void k_lookup(const skv_quant_ctx *c, const uint8_t *idx, float *v, size_t n)
{
    PICK(c, lookup)(idx, c->cent, c->levels, v, n);
}

static void k_qjl_signs(const skv_quant_ctx *c, const float *r, uint8_t *z)
{
    PICK(c, qjl_signs)(c->S, r, c->d, z);
}

static void k_qjl_accum(const skv_quant_ctx *c, const uint8_t *z, float *acc)
{
    PICK(c, qjl_accum)(c->S, z, c->d, acc);
}

/* ---- bit streams (LSB-first: bit k of the stream is bit k%8 of byte k/8) -- */

typedef struct bitw {
    uint8_t *p;
    uint32_t acc;
    int n;
} bitw;

/* Fast path from a byte boundary: 8 fields of b <= 4 bits are exactly b
 * bytes.  SWAR: with the 8 index bytes in a little-endian word, merge
 * neighbouring fields pairwise three times (bytes -> 16-bit -> 32-bit ->
 * 64-bit lanes); unpacking runs the same steps backwards. */
static inline uint64_t load8_le(const uint8_t *p)
{
    uint64_t x = 0;
#if SKV_LITTLE_ENDIAN
    memcpy(&x, p, sizeof x);
#else
    for (int k = 0; k < 8; k++) x |= (uint64_t)p[k] << (8 * k);
#endif
    return x;
}

static inline void store8_le(uint8_t *p, uint64_t x)
{
#if SKV_LITTLE_ENDIAN
    memcpy(p, &x, sizeof x);
#else
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(x >> (8 * k));
#endif
}

static inline uint64_t swar_pack8(uint64_t x, unsigned b)
{
    x = (x | x >> (8 - b)) & 0x00FF00FF00FF00FFull;
    x = (x | x >> (16 - 2 * b)) & 0x0000FFFF0000FFFFull;
    return (x | x >> (32 - 4 * b)) & ((1ull << (8 * b)) - 1);
}

static inline uint64_t swar_unpack8(uint64_t g, unsigned b)
{
    uint64_t m32 = ((1ull << (4 * b)) - 1) * 0x0000000100000001ull;
    uint64_t m16 = ((1ull << (2 * b)) - 1) * 0x0001000100010001ull;
    uint64_t m8 = ((1ull << b) - 1) * 0x0101010101010101ull;
    g = (g | g << (32 - 4 * b)) & m32;
    g = (g | g << (16 - 2 * b)) & m16;
    return (g | g << (8 - b)) & m8;
}

static inline size_t put_groups(uint8_t **pp, const uint8_t *v, size_t count, unsigned b)
{
    size_t i = 0;
    uint8_t *p = *pp;
    for (; i + 8 <= count; i += 8) {
        uint64_t g = swar_pack8(load8_le(v + i), b);
        for (unsigned k = 0; k < b; k++) *p++ = (uint8_t)(g >> (8 * k));
    }
    *pp = p;
    return i;
}

static inline size_t get_groups(const uint8_t **pp, uint8_t *v, size_t count, unsigned b)
{
    size_t i = 0;
    const uint8_t *p = *pp;
    for (; i + 8 <= count; i += 8) {
        uint64_t g = 0;
        for (unsigned k = 0; k < b; k++) g |= (uint64_t)*p++ << (8 * k);
        store8_le(v + i, swar_unpack8(g, b));
    }
    *pp = p;
    return i;
}

static void bitw_put(bitw *w, const uint8_t *v, size_t count, int b)
{
    size_t i = 0;
    if (w->n == 0) {
        switch (b) {
        case 1: i = put_groups(&w->p, v, count, 1); break;
        case 2: i = put_groups(&w->p, v, count, 2); break;
        case 3: i = put_groups(&w->p, v, count, 3); break;
        default: i = put_groups(&w->p, v, count, 4); break;
        }
    }
    for (; i < count; i++) {
        w->acc |= (uint32_t)v[i] << w->n;
        w->n += b;
        while (w->n >= 8) {
            *w->p++ = (uint8_t)w->acc;
            w->acc >>= 8;
            w->n -= 8;
        }
    }
}

static void bitw_flush(bitw *w)
{
    if (w->n > 0) *w->p++ = (uint8_t)w->acc; /* pad bits are zero */
    w->acc = 0;
    w->n = 0;
}

typedef struct bitr {
    const uint8_t *p;
    uint32_t acc;
    int n;
} bitr;

static void bitr_get(bitr *r, uint8_t *v, size_t count, int b)
{
    uint32_t mask = (1u << b) - 1u;
    size_t i = 0;
    if (r->n == 0) {
        switch (b) {
        case 1: i = get_groups(&r->p, v, count, 1); break;
        case 2: i = get_groups(&r->p, v, count, 2); break;
        case 3: i = get_groups(&r->p, v, count, 3); break;
        default: i = get_groups(&r->p, v, count, 4); break;
        }
    }
    for (; i < count; i++) {
        while (r->n < b) {
            r->acc |= (uint32_t)*r->p++ << r->n;
            r->n += 8;
        }
        v[i] = (uint8_t)(r->acc & mask);
        r->acc >>= b;
        r->n -= b;
    }
}

/* The bits left in the last byte read are padding and must be zero. */
static int bitr_pad_ok(const bitr *r) { return r->acc == 0; }

/* ---- f32 / f16 ------------------------------------------------------------ */

static int f32_encode(const float *x, size_t d, uint8_t *out)
{
    if (any_nonfinite(x, d)) return SKV_ERR_INVALID_ARG;
#if SKV_LITTLE_ENDIAN
    memcpy(out, x, d * sizeof *x);
#else
    for (size_t i = 0; i < d; i++) {
        uint32_t u = f32_bits(x[i]);
        out[4 * i] = (uint8_t)u;
        out[4 * i + 1] = (uint8_t)(u >> 8);
        out[4 * i + 2] = (uint8_t)(u >> 16);
        out[4 * i + 3] = (uint8_t)(u >> 24);
    }
#endif
    return SKV_OK;
}

static int f32_decode(const uint8_t *in, size_t d, float *y)
{
#if SKV_LITTLE_ENDIAN
    memcpy(y, in, d * sizeof *y);
#else
    for (size_t i = 0; i < d; i++) {
        const uint8_t *p = in + 4 * i;
        y[i] = bits_f32((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                        (uint32_t)p[3] << 24);
    }
#endif
    return any_nonfinite(y, d) ? SKV_ERR_FORMAT : SKV_OK;
}

static int f16_encode(const skv_quant_ctx *c, const float *x, uint8_t *out)
{
    if (!PICK(c, f16enc)(x, out, c->d)) return SKV_OK;
    return any_nonfinite(x, c->d) ? SKV_ERR_INVALID_ARG : SKV_ERR_RANGE;
}

static int f16_decode(const skv_quant_ctx *c, const uint8_t *in, float *y)
{
    return PICK(c, f16dec)(in, y, c->d) ? SKV_ERR_FORMAT : SKV_OK;
}

/* ---- q8_0 / q4_0 -----------------------------------------------------------
 * A vector of d values is cut into blocks of 32; the last block may be short
 * (L = d % 32 values) and is then stored short: q8_0 2 + L bytes, q4_0
 * 2 + ceil(L/2) bytes.  Full blocks are byte-identical to ggml's. */

static size_t q8_block_bytes(size_t L) { return 2 + L; }

/* roundf() for |v| <= 2^24 without a libm call: t = trunc(v) and v - t are
 * exact, so comparing the fraction with 1/2 rounds exactly (ties away). */
static inline int round_half_away(float v)
{
    int t = (int)v;
    float f = v - (float)t;
    return t + (f >= 0.5f) - (f <= -0.5f);
}
static size_t q4_block_bytes(size_t L) { return 2 + (L + 1) / 2; }

/* One block of L <= 32 values (ggml's q8_0 rounding: scale = amax/127,
 * q = round-half-away(x / scale) with the binary32 scale, stored fp16). */
static int q8_block_encode(const float *x, size_t L, uint8_t *out)
{
    float amax = 0.0f, d, id;
    uint16_t h;
    for (size_t j = 0; j < L; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    d = amax / 127.0f;
    h = skv_f32_to_f16(d);
    if (!f16_finite(h)) return SKV_ERR_RANGE;
    memset(out, 0, q8_block_bytes(L));
    if (h == 0) return SKV_OK; /* every value rounds to zero: canonical zero block */
    wr16(out, h);
    id = 1.0f / d;
    for (size_t j = 0; j < L; j++) {
        int q = round_half_away(x[j] * id);
        q = q > 127 ? 127 : (q < -127 ? -127 : q);
        out[2 + j] = (uint8_t)(int8_t)q;
    }
    return SKV_OK;
}

static int q8_encode(const float *x, size_t d, uint8_t *out)
{
    int rc = SKV_OK;
    if (any_nonfinite(x, d)) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < d && rc == SKV_OK; i += SKV_QUANT_QK) {
        size_t L = d - i < SKV_QUANT_QK ? d - i : SKV_QUANT_QK;
        rc = q8_block_encode(x + i, L, out);
        out += q8_block_bytes(L);
    }
    return rc;
}

static int q8_decode(const uint8_t *in, size_t d, float *y)
{
    for (size_t i = 0; i < d; i += SKV_QUANT_QK) {
        size_t L = d - i < SKV_QUANT_QK ? d - i : SKV_QUANT_QK;
        uint16_t h = rd16(in);
        float s;
        if (!f16_finite(h)) return SKV_ERR_FORMAT;
        s = skv_f16_to_f32(h);
        for (size_t j = 0; j < L; j++) y[i + j] = (float)(int8_t)in[2 + j] * s;
        in += q8_block_bytes(L);
    }
    return SKV_OK;
}

/* One block of L <= 32 values (ggml's q4_0 rounding: scale = -m/8 where m is
 * the first value of largest magnitude, q = min(15, trunc(x/scale + 8.5))).
 * Nibble layout, h = ceil(L/2): value j < h is the low nibble of byte j,
 * value h + j the high nibble of byte j (ggml's for L = 32); an odd L leaves
 * the high nibble of the last byte zero. */
static int q4_block_encode(const float *x, size_t L, uint8_t *out)
{
    float amax = 0.0f, mx = 0.0f, d, id;
    size_t half = (L + 1) / 2;
    uint8_t q[SKV_QUANT_QK];
    uint16_t h;
    for (size_t j = 0; j < L; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            mx = x[j];
        }
    }
    d = mx / -8.0f;
    h = skv_f32_to_f16(d);
    if (!f16_finite(h)) return SKV_ERR_RANGE;
    memset(out, 0, q4_block_bytes(L));
    if ((h & 0x7fffu) == 0) { /* zero block: scale +0, every nibble 8 (= 0) */
        memset(q, 8, sizeof q);
    } else {
        wr16(out, h);
        id = 1.0f / d;
        for (size_t j = 0; j < L; j++) {
            float t = x[j] * id + 8.5f;
            int v = (int)t; /* t in [0.49, 16.51]: truncation = floor */
            q[j] = (uint8_t)(v > 15 ? 15 : (v < 0 ? 0 : v));
        }
    }
    for (size_t j = 0; j < half; j++) {
        uint8_t hi = (j + half < L) ? q[j + half] : 0;
        out[2 + j] = (uint8_t)(q[j] | (hi << 4));
    }
    return SKV_OK;
}

static int q4_encode(const float *x, size_t d, uint8_t *out)
{
    int rc = SKV_OK;
    if (any_nonfinite(x, d)) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < d && rc == SKV_OK; i += SKV_QUANT_QK) {
        size_t L = d - i < SKV_QUANT_QK ? d - i : SKV_QUANT_QK;
        rc = q4_block_encode(x + i, L, out);
        out += q4_block_bytes(L);
    }
    return rc;
}

static int q4_decode(const uint8_t *in, size_t d, float *y)
{
    for (size_t i = 0; i < d; i += SKV_QUANT_QK) {
        size_t L = d - i < SKV_QUANT_QK ? d - i : SKV_QUANT_QK;
        size_t half = (L + 1) / 2;
        uint16_t h = rd16(in);
        float s;
        if (!f16_finite(h)) return SKV_ERR_FORMAT;
        if ((L & 1) && (in[2 + half - 1] >> 4)) return SKV_ERR_FORMAT; /* pad nibble */
        s = skv_f16_to_f32(h);
        for (size_t j = 0; j < half; j++) {
            y[i + j] = (float)((int)(in[2 + j] & 15) - 8) * s;
            if (j + half < L) y[i + j + half] = (float)((int)(in[2 + j] >> 4) - 8) * s;
        }
        in += q4_block_bytes(L);
    }
    return SKV_OK;
}

/* ---- rotation ---------------------------------------------------------------
 * R x: for each round r = 0 .. n_round-1
 *     v ^= sign_r                          (random +-1 diagonal)
 *     for each block b: v_b = FWHT(v_b) * (1 / sqrtf(len_b))
 *     if r < n_round-1: v'[i] = v[perm_r[i]]
 * With d a power of two this is one randomized Hadamard transform.  The
 * inverse runs the rounds backwards: unpermute, FWHT * 1/sqrtf(len), ^= sign.
 * tmp is d floats of scratch. */
static void blocks_fwht(const skv_quant_ctx *c, float *v)
{
    for (int b = 0; b < c->n_blk; b++) {
        float *w = v + c->blk_off[b];
        k_fwht(c, w, c->blk_len[b]);
        k_scale(c, w, c->blk_rs[b], w, c->blk_len[b]);
    }
}

static void rotate_fwd(const skv_quant_ctx *c, float *v, float *tmp)
{
    size_t d = c->d;
    for (int r = 0; r < c->n_round; r++) {
        k_xorsign(c, v, c->sign + (size_t)r * d, d);
        blocks_fwht(c, v);
        if (r + 1 < c->n_round) {
            const uint32_t *p = c->perm + (size_t)r * d;
            for (size_t i = 0; i < d; i++) tmp[i] = v[p[i]];
            memcpy(v, tmp, d * sizeof *v);
        }
    }
}

static void rotate_inv(const skv_quant_ctx *c, float *v, float *tmp)
{
    size_t d = c->d;
    for (int r = c->n_round - 1; r >= 0; r--) {
        if (r + 1 < c->n_round) {
            const uint32_t *p = c->perm + (size_t)r * d;
            for (size_t i = 0; i < d; i++) tmp[p[i]] = v[i];
            memcpy(v, tmp, d * sizeof *v);
        }
        blocks_fwht(c, v);
        k_xorsign(c, v, c->sign + (size_t)r * d, d);
    }
}

/* ---- TurboQuant ----------------------------------------------------------- */

typedef struct tq_scratch {
    float v[SKV_QUANT_MAX_D_TQ];   /* rotated unit vector / decoded coordinates */
    float t[SKV_QUANT_MAX_D_TQ];   /* rotation scratch */
    float r[SKV_QUANT_MAX_D_TQP];  /* residual (prod) */
    uint8_t idx[SKV_QUANT_MAX_D_TQ];
    uint8_t z[SKV_QUANT_MAX_D_TQP]; /* QJL sign bits (prod) */
} tq_scratch;

static int tq_encode_one(const skv_quant_ctx *c, const float *x, uint8_t *out, tq_scratch *s)
{
    size_t d = c->d, hdr = c->kind == KIND_TQP ? 4 : 2;
    float n2 = k_dot(c, x, x, d), norm, inv;
    uint16_t h;
    bitw w;
    if (!f32_finite(n2)) return any_nonfinite(x, d) ? SKV_ERR_INVALID_ARG : SKV_ERR_RANGE;
    norm = sqrtf(n2);
    h = skv_f32_to_f16(norm);
    if (!f16_finite(h)) return SKV_ERR_RANGE;
    memset(out, 0, c->bytes);
    if (h == 0) return SKV_OK; /* (near-)zero vector: canonical all-zero encoding */
    wr16(out, h);
    inv = 1.0f / norm;
    k_scale(c, x, inv, s->v, d);
    rotate_fwd(c, s->v, s->t);
    k_index(c, s->v, s->idx, d);
    w.p = out + hdr;
    w.acc = 0;
    w.n = 0;
    bitw_put(&w, s->idx, d, c->bits);
    if (c->kind == KIND_TQP) {
        k_lookup(c, s->idx, s->r, d);
        for (size_t i = 0; i < d; i++) s->r[i] = s->v[i] - s->r[i];
        wr16(out + 2, skv_f32_to_f16(sqrtf(k_dot(c, s->r, s->r, d))));
        k_qjl_signs(c, s->r, s->z);
        bitw_put(&w, s->z, d, 1);
    }
    bitw_flush(&w);
    return SKV_OK;
}

static int tq_decode_one(const skv_quant_ctx *c, const uint8_t *in, float *y, tq_scratch *s)
{
    size_t d = c->d, hdr = c->kind == KIND_TQP ? 4 : 2;
    uint16_t h = rd16(in);
    bitr r;
    if (!f16_finite(h) || (h & 0x8000u)) return SKV_ERR_FORMAT;
    if (h == 0) {
        memset(y, 0, d * sizeof *y);
        return SKV_OK;
    }
    r.p = in + hdr;
    r.acc = 0;
    r.n = 0;
    bitr_get(&r, s->idx, d, c->bits);
    k_lookup(c, s->idx, s->v, d);
    if (c->kind == KIND_TQP) {
        uint16_t hg = rd16(in + 2);
        float k;
        if (!f16_finite(hg) || (hg & 0x8000u)) return SKV_ERR_FORMAT;
        bitr_get(&r, s->z, d, 1);
        k_qjl_accum(c, s->z, s->r);
        k = c->qjl_scale * skv_f16_to_f32(hg);
        for (size_t j = 0; j < d; j++) s->v[j] = s->v[j] + k * s->r[j];
    }
    if (!bitr_pad_ok(&r)) return SKV_ERR_FORMAT;
    rotate_inv(c, s->v, s->t);
    k_scale(c, s->v, skv_f16_to_f32(h), y, d);
    return SKV_OK;
}

/* ---- scheme properties ---------------------------------------------------- */

int skv_quant_parse(const char *name)
{
    if (!name) return SKV_ERR_INVALID_ARG;
    for (int i = 0; i < SKV_QUANT_COUNT; i++)
        if (strcmp(name, k_traits[i].name) == 0) return i;
    return SKV_ERR_INVALID_ARG;
}

const char *skv_quant_name(int scheme)
{
    return kind_of(scheme) < 0 ? NULL : k_traits[scheme].name;
}

int skv_quant_check(int scheme, size_t d)
{
    int kind = kind_of(scheme);
    size_t max = kind == KIND_TQ ? SKV_QUANT_MAX_D_TQ
                 : kind == KIND_TQP ? SKV_QUANT_MAX_D_TQP
                                    : SKV_QUANT_MAX_D;
    if (kind < 0 || d == 0) return SKV_ERR_INVALID_ARG;
    return d > max ? SKV_ERR_RANGE : SKV_OK;
}

size_t skv_quant_bytes(int scheme, size_t d)
{
    if (skv_quant_check(scheme, d) != SKV_OK) return 0;
    switch (k_traits[scheme].kind) {
    case KIND_F32: return 4 * d;
    case KIND_F16: return 2 * d;
    case KIND_Q8_0:
        return (d / SKV_QUANT_QK) * SKV_QUANT_Q8_0_BLOCK_BYTES +
               (d % SKV_QUANT_QK ? q8_block_bytes(d % SKV_QUANT_QK) : 0);
    case KIND_Q4_0:
        return (d / SKV_QUANT_QK) * SKV_QUANT_Q4_0_BLOCK_BYTES +
               (d % SKV_QUANT_QK ? q4_block_bytes(d % SKV_QUANT_QK) : 0);
    case KIND_TQ: return TQ_BYTES(k_traits[scheme].bits, d);
    case KIND_TQP: return TQP_BYTES(k_traits[scheme].bits, d);
    default: return 0;
    }
}

double skv_quant_bits_per_value(int scheme, size_t d)
{
    size_t b = skv_quant_bytes(scheme, d);
    return b ? 8.0 * (double)b / (double)d : 0.0;
}

int skv_quant_tq_bits(int scheme)
{
    int kind = kind_of(scheme);
    return (kind == KIND_TQ || kind == KIND_TQP) ? k_traits[scheme].bits : 0;
}

int skv_quant_is_prod(int scheme) { return kind_of(scheme) == KIND_TQP; }

/* Row of the generated table for d (the Gaussian row if d is not tabulated). */
static int cb_row(size_t d)
{
    for (int i = 0; i < SKV_TQ_CB_ROWS - 1; i++)
        if (skv_tq_cb_dims[i] == d) return i;
    return SKV_TQ_CB_ROWS - 1;
}

static const int k_cb_off[5] = {0, 0, 2, 6, 14};

double skv_quant_tq_expected_mse(size_t d, int bits)
{
    if (d == 0 || bits < 1 || bits > 4) return -1.0;
    return skv_tq_cb_mse[cb_row(d)][bits - 1];
}

/* ---- contexts ------------------------------------------------------------- */

static void init_codebook(skv_quant_ctx *c)
{
    const float *t = skv_tq_cb[cb_row(c->d)] + k_cb_off[c->bits];
    float sd = sqrtf((float)c->d);
    c->levels = 1 << c->bits;
    for (int k = 0; k < c->levels; k++) c->cent[k] = t[k] / sd;
    for (int k = 0; k + 1 < c->levels; k++) c->bound[k] = (c->cent[k] + c->cent[k + 1]) * 0.5f;
}

/* Fisher-Yates from the identity; j uniform in [0, i] by rejection. */
static void init_perm(uint32_t *pm, size_t d, uint64_t st)
{
    for (size_t j = 0; j < d; j++) pm[j] = (uint32_t)j;
    for (size_t i = d - 1; i > 0; i--) {
        uint64_t n = (uint64_t)i + 1, lim = UINT64_MAX - UINT64_MAX % n, u;
        uint32_t sw;
        do u = skv_quant_splitmix64(&st);
        while (u >= lim);
        sw = pm[i];
        pm[i] = pm[u % n];
        pm[u % n] = sw;
    }
}

/* Blocks = the powers of two in d's binary expansion, largest first; one
 * round if that is a single block, else ROT_ROUNDS with permutations. */
static int init_rotation(skv_quant_ctx *c)
{
    size_t d = c->d;
    c->n_blk = 0;
    for (size_t bit = (size_t)1 << 30, off = 0; bit; bit >>= 1)
        if (d & bit) {
            c->blk_off[c->n_blk] = off;
            c->blk_len[c->n_blk] = bit;
            c->blk_rs[c->n_blk] = 1.0f / sqrtf((float)bit);
            c->n_blk++;
            off += bit;
        }
    c->n_round = c->n_blk == 1 ? 1 : ROT_ROUNDS;
    c->sign = malloc((size_t)c->n_round * d * sizeof *c->sign);
    if (!c->sign) return SKV_ERR_NOMEM;
    if (c->n_round > 1 && !(c->perm = malloc((size_t)(c->n_round - 1) * d * sizeof *c->perm)))
        return SKV_ERR_NOMEM;
    for (int r = 0; r < c->n_round; r++) {
        uint64_t st = c->seed ^ (TAG_SIGNS + (uint64_t)r), word = 0;
        uint32_t *sg = c->sign + (size_t)r * d;
        for (size_t j = 0; j < d; j++) {
            if ((j & 63) == 0) word = skv_quant_splitmix64(&st);
            sg[j] = ((word >> (j & 63)) & 1u) ? 0x80000000u : 0u;
        }
        if (r + 1 < c->n_round) /* no permutation after the last round */
            init_perm(c->perm + (size_t)r * d, d, c->seed ^ (TAG_PERM + (uint64_t)r));
    }
    return SKV_OK;
}

/* S[i][j] = the (i*d + j)-th normal variate of the QJL stream, as float. */
static int init_qjl(skv_quant_ctx *c)
{
    uint64_t st = c->seed ^ TAG_QJL;
    double spare = 0.0;
    int has = 0;
    c->qjl_scale = SQRT_HALF_PI_F / (float)c->d;
    c->S = malloc(c->d * c->d * sizeof *c->S);
    if (!c->S) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < c->d * c->d; i++) c->S[i] = (float)skv_quant_gauss(&st, &spare, &has);
    return SKV_OK;
}

static int ctx_init_tq(skv_quant_ctx *c)
{
    int rc;
    init_codebook(c);
    if ((rc = init_rotation(c)) != SKV_OK) return rc;
    return c->kind == KIND_TQP ? init_qjl(c) : SKV_OK;
}

int skv_quant_ctx_create(skv_quant_ctx **out, int scheme, size_t d, uint64_t seed)
{
    skv_quant_ctx *c;
    int rc;
    if (!out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if ((rc = skv_quant_check(scheme, d)) != SKV_OK) return rc;
    c = calloc(1, sizeof *c);
    if (!c) return SKV_ERR_NOMEM;
    c->scheme = scheme;
    c->kind = k_traits[scheme].kind;
    c->d = d;
    c->seed = seed;
    c->bytes = skv_quant_bytes(scheme, d);
    c->simd = skv_quant_simd_available();
    if (c->kind == KIND_TQ || c->kind == KIND_TQP) {
        c->bits = k_traits[scheme].bits - (c->kind == KIND_TQP);
        if ((rc = ctx_init_tq(c)) != SKV_OK) {
            skv_quant_ctx_free(c);
            return rc;
        }
    }
    *out = c;
    return SKV_OK;
}

void skv_quant_ctx_free(skv_quant_ctx *ctx)
{
    if (!ctx) return;
    free(ctx->sign);
    free(ctx->perm);
    free(ctx->S);
    free(ctx);
}

int skv_quant_ctx_scheme(const skv_quant_ctx *ctx) { return ctx ? ctx->scheme : SKV_ERR_INVALID_ARG; }
size_t skv_quant_ctx_dim(const skv_quant_ctx *ctx) { return ctx ? ctx->d : 0; }
size_t skv_quant_ctx_bytes(const skv_quant_ctx *ctx) { return ctx ? ctx->bytes : 0; }
uint64_t skv_quant_ctx_seed(const skv_quant_ctx *ctx) { return ctx ? ctx->seed : 0; }

void skv_quant_ctx_force_scalar(skv_quant_ctx *ctx, int force)
{
    if (ctx) ctx->simd = force ? 0 : skv_quant_simd_available();
}

int skv_quant_ctx_codebook(const skv_quant_ctx *ctx, float *out, size_t cap)
{
    if (!ctx || !out) return SKV_ERR_INVALID_ARG;
    if (ctx->levels == 0) return SKV_ERR_UNSUPPORTED;
    if (cap < (size_t)ctx->levels) return SKV_ERR_RANGE;
    memcpy(out, ctx->cent, (size_t)ctx->levels * sizeof *out);
    return ctx->levels;
}

int skv_quant_ctx_rotate(const skv_quant_ctx *ctx, const float *x, float *y)
{
    if (!ctx || !x || !y) return SKV_ERR_INVALID_ARG;
    float tmp[SKV_QUANT_MAX_D_TQ];
    memmove(y, x, ctx->d * sizeof *y);
    if (ctx->sign) rotate_fwd(ctx, y, tmp);
    return SKV_OK;
}

int skv_quant_ctx_unrotate(const skv_quant_ctx *ctx, const float *y, float *x)
{
    if (!ctx || !x || !y) return SKV_ERR_INVALID_ARG;
    float tmp[SKV_QUANT_MAX_D_TQ];
    memmove(x, y, ctx->d * sizeof *x);
    if (ctx->sign) rotate_inv(ctx, x, tmp);
    return SKV_OK;
}

/* n_vec * per without overflow; SKV_OK or SKV_ERR_RANGE. */
static int mul_size(size_t n, size_t per, size_t *out)
{
    if (per && n > SIZE_MAX / per) return SKV_ERR_RANGE;
    *out = n * per;
    return SKV_OK;
}

int skv_quant_ctx_encode(const skv_quant_ctx *ctx, const float *x, size_t n_vec, uint8_t *dst,
                         size_t dst_cap)
{
    size_t need;
    tq_scratch s;
    int rc = SKV_OK;
    if (!ctx) return SKV_ERR_INVALID_ARG;
    if (n_vec == 0) return SKV_OK;
    if (!x || !dst) return SKV_ERR_INVALID_ARG;
    if (mul_size(n_vec, ctx->bytes, &need) != SKV_OK || need > dst_cap) return SKV_ERR_RANGE;
    if (mul_size(n_vec, ctx->d, &need) != SKV_OK) return SKV_ERR_RANGE;
    for (size_t i = 0; i < n_vec && rc == SKV_OK; i++) {
        const float *xi = x + i * ctx->d;
        uint8_t *o = dst + i * ctx->bytes;
        switch (ctx->kind) {
        case KIND_F32: rc = f32_encode(xi, ctx->d, o); break;
        case KIND_F16: rc = f16_encode(ctx, xi, o); break;
        case KIND_Q8_0: rc = q8_encode(xi, ctx->d, o); break;
        case KIND_Q4_0: rc = q4_encode(xi, ctx->d, o); break;
        default: rc = tq_encode_one(ctx, xi, o, &s); break;
        }
    }
    return rc;
}

int skv_quant_ctx_decode(const skv_quant_ctx *ctx, const uint8_t *src, size_t src_size,
                         size_t n_vec, float *y, size_t y_cap)
{
    size_t need;
    tq_scratch s;
    int rc = SKV_OK;
    if (!ctx) return SKV_ERR_INVALID_ARG;
    if (n_vec == 0) return SKV_OK;
    if (!src || !y) return SKV_ERR_INVALID_ARG;
    if (mul_size(n_vec, ctx->d, &need) != SKV_OK || need > y_cap) return SKV_ERR_RANGE;
    if (mul_size(n_vec, ctx->bytes, &need) != SKV_OK || need > src_size) return SKV_ERR_FORMAT;
    for (size_t i = 0; i < n_vec && rc == SKV_OK; i++) {
        const uint8_t *in = src + i * ctx->bytes;
        float *yi = y + i * ctx->d;
        switch (ctx->kind) {
        case KIND_F32: rc = f32_decode(in, ctx->d, yi); break;
        case KIND_F16: rc = f16_decode(ctx, in, yi); break;
        case KIND_Q8_0: rc = q8_decode(in, ctx->d, yi); break;
        case KIND_Q4_0: rc = q4_decode(in, ctx->d, yi); break;
        default: rc = tq_decode_one(ctx, in, yi, &s); break;
        }
    }
    return rc;
}

int skv_quant_encode(int scheme, size_t d, uint64_t seed, const float *x, size_t n_vec,
                     uint8_t *dst, size_t dst_cap)
{
    skv_quant_ctx *c;
    int rc = skv_quant_check(scheme, d);
    if (rc != SKV_OK) return rc;
    if (n_vec == 0) return SKV_OK;
    if (!x || !dst) return SKV_ERR_INVALID_ARG;
    if ((rc = skv_quant_ctx_create(&c, scheme, d, seed)) != SKV_OK) return rc;
    rc = skv_quant_ctx_encode(c, x, n_vec, dst, dst_cap);
    skv_quant_ctx_free(c);
    return rc;
}

int skv_quant_decode(int scheme, size_t d, uint64_t seed, const uint8_t *src, size_t src_size,
                     size_t n_vec, float *y, size_t y_cap)
{
    skv_quant_ctx *c;
    int rc = skv_quant_check(scheme, d);
    if (rc != SKV_OK) return rc;
    if (n_vec == 0) return SKV_OK;
    if (!src || !y) return SKV_ERR_INVALID_ARG;
    if ((rc = skv_quant_ctx_create(&c, scheme, d, seed)) != SKV_OK) return rc;
    rc = skv_quant_ctx_decode(c, src, src_size, n_vec, y, y_cap);
    skv_quant_ctx_free(c);
    return rc;
}
