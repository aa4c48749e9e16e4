/* Internals of the per-vector quantizers (quant.h), shared by the files of
 * src/quant/: the context, the kernel dispatch and the TurboQuant stages.
 *
 *   quant.c      scheme table, contexts, encode / decode of n vectors
 *   quant_ref.c  scalar reference kernels (quant_avx2.c: their AVX2 twins)
 *   prng.c       splitmix64 and the deterministic Gaussian
 *   bitpack.c    LSB-first bit streams of b-bit fields
 *   rotation.c   the seeded randomized Hadamard rotation
 *   tq.c         TurboQuant codebooks, QJL matrix, encode / decode of one vector
 * The f32 / f16 / q8_0 / q4_0 baselines are rows of the type table (types.h). */
#ifndef SKV_QUANT_INT_H
#define SKV_QUANT_INT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"
#include "quant/types.h"


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


enum { KIND_BLOCK, KIND_TQ, KIND_TQP }; /* KIND_BLOCK: a type-table row */

struct skv_quant_ctx {
    int scheme;
    int kind;
    const skv_type_traits *type; /* KIND_BLOCK: the row that codes each vector */
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


/* ---- kernel dispatch: the AVX2 twin when the context allows SIMD -------- */

#if defined(__x86_64__)
#define PICK(c, name) ((c)->simd ? skv_quant_##name##_avx2 : skv_quant_##name##_ref)
#else
#define PICK(c, name) (skv_quant_##name##_ref)
#endif

static inline float k_dot(const skv_quant_ctx *c, const float *a, const float *b, size_t n)
{
    return PICK(c, dot)(a, b, n);
}

static inline void k_fwht(const skv_quant_ctx *c, float *v, size_t m)
{
    if (m >= 8)
        PICK(c, fwht)(v, m);
    else
        skv_quant_fwht_ref(v, m);
}

static inline void k_scale(const skv_quant_ctx *c, const float *x, float k, float *y, size_t n)
{
    PICK(c, scale)(x, k, y, n);
}

static inline void k_xorsign(const skv_quant_ctx *c, float *v, const uint32_t *mask, size_t n)
{
    PICK(c, xorsign)(v, mask, n);
}

static inline void k_index(const skv_quant_ctx *c, const float *y, uint8_t *idx, size_t n)
{
    PICK(c, index)(y, c->bound, c->levels - 1, idx, n);
}

static inline void k_lookup(const skv_quant_ctx *c, const uint8_t *idx, float *v, size_t n)
{
    PICK(c, lookup)(idx, c->cent, c->levels, v, n);
}

static inline void k_qjl_signs(const skv_quant_ctx *c, const float *r, uint8_t *z)
{
    PICK(c, qjl_signs)(c->S, r, c->d, z);
}

static inline void k_qjl_accum(const skv_quant_ctx *c, const uint8_t *z, float *acc)
{
    PICK(c, qjl_accum)(c->S, z, c->d, acc);
}

/* ---- bit streams (bitpack.c): LSB-first, bit k of the stream is bit k%8 of
 * byte k/8; fields of b = 1..4 bits ---- */

typedef struct skv_bitw {
    uint8_t *p;
    uint32_t acc;
    int n;
} skv_bitw;

typedef struct skv_bitr {
    const uint8_t *p;
    uint32_t acc;
    int n;
} skv_bitr;

void skv_bitw_put(skv_bitw *w, const uint8_t *v, size_t count, int b);
/* Writes the last partial byte (pad bits zero). */
void skv_bitw_flush(skv_bitw *w);
void skv_bitr_get(skv_bitr *r, uint8_t *v, size_t count, int b);
/* The bits left in the last byte read are padding and must be zero. */
static inline int skv_bitr_pad_ok(const skv_bitr *r) { return r->acc == 0; }

/* ---- rotation (rotation.c) ---- */

/* Block decomposition, signs and permutations of (c->d, c->seed). */
int skv_quant_rotation_init(skv_quant_ctx *c);
/* v = R v and v = R^T v in place; tmp: d floats of scratch. */
void skv_quant_rotate_fwd(const skv_quant_ctx *c, float *v, float *tmp);
void skv_quant_rotate_inv(const skv_quant_ctx *c, float *v, float *tmp);

/* ---- TurboQuant (tq.c) ---- */

typedef struct skv_tq_scratch {
    float v[SKV_QUANT_MAX_D_TQ];   /* rotated unit vector / decoded coordinates */
    float t[SKV_QUANT_MAX_D_TQ];   /* rotation scratch */
    float r[SKV_QUANT_MAX_D_TQP];  /* residual (prod) */
    uint8_t idx[SKV_QUANT_MAX_D_TQ];
    uint8_t z[SKV_QUANT_MAX_D_TQP]; /* QJL sign bits (prod) */
} skv_tq_scratch;


/* Codebook, rotation and (prod) QJL matrix of a tq context. */
int skv_tq_ctx_init(skv_quant_ctx *c);
/* One vector: x[d] -> out[c->bytes], in[c->bytes] -> y[d]; quant.h statuses. */
int skv_tq_encode_one(const skv_quant_ctx *c, const float *x, uint8_t *out, skv_tq_scratch *s);
int skv_tq_decode_one(const skv_quant_ctx *c, const uint8_t *in, float *y, skv_tq_scratch *s);

#endif
