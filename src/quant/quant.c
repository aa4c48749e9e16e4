/* Per-vector quantizers: the scheme table, contexts, and the encoding /
 * decoding of n vectors (quant.h).  Byte layouts, rotation and PRNG spec:
 * docs/quant.md.  Shapes:
 *   x, y      [n_vec][d] floats          (one KV head's vectors, contiguous)
 *   encoded   [n_vec][bytes] bytes       (bytes = skv_quant_bytes(scheme, d))
 *   S         [d][d] floats, row-major   (QJL matrix, prod schemes only)
 * The baselines (f32, f16, q8_0, q4_0) are rows of the type table
 * (quant/types.h): each vector is one row of that type, its last block
 * possibly short.  The tq schemes live in tq.c (quant_int.h lists the files). */
#include "quant/quant_int.h"
#include "core/fpguard.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "seqkv.h"

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

typedef struct scheme_traits {
    const char *name;
    int kind;
    int bits;      /* nominal bits per value (tq: total incl. QJL bit) */
    uint32_t type; /* KIND_BLOCK: the type-table row (a ggml type id) */
} scheme_traits;

static const scheme_traits k_traits[SKV_QUANT_COUNT] = {
    [SKV_QUANT_F32] = {"f32", KIND_BLOCK, 32, SKV_GGML_F32},
    [SKV_QUANT_F16] = {"f16", KIND_BLOCK, 16, SKV_GGML_F16},
    [SKV_QUANT_Q8_0] = {"q8_0", KIND_BLOCK, 8, SKV_GGML_Q8_0},
    [SKV_QUANT_Q4_0] = {"q4_0", KIND_BLOCK, 4, SKV_GGML_Q4_0},
    [SKV_QUANT_TQ1] = {"tq1", KIND_TQ, 1, 0},     [SKV_QUANT_TQ2] = {"tq2", KIND_TQ, 2, 0},
    [SKV_QUANT_TQ3] = {"tq3", KIND_TQ, 3, 0},     [SKV_QUANT_TQ4] = {"tq4", KIND_TQ, 4, 0},
    [SKV_QUANT_TQ2P] = {"tq2p", KIND_TQP, 2, 0},  [SKV_QUANT_TQ3P] = {"tq3p", KIND_TQP, 3, 0},
    [SKV_QUANT_TQ4P] = {"tq4p", KIND_TQP, 4, 0},
};

static int kind_of(int scheme)
{
    return (scheme >= 0 && scheme < SKV_QUANT_COUNT) ? k_traits[scheme].kind : -1;
}

/* ---- implementation selection --------------------------------------------- */

/* The AVX2 twins (quant_avx2.c) are compiled for AVX2 + FMA + F16C. */
int skv_quant_simd_available(void)
{
#if defined(__x86_64__)
    return skv_cpu_has(SKV_CPU_AVX2_SET);
#else
    return 0;
#endif
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
    case KIND_BLOCK: return skv_type_row_bytes(k_traits[scheme].type, d);
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

/* ---- contexts ------------------------------------------------------------- */

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
    if (c->kind == KIND_BLOCK) c->type = skv_type_traits_of(k_traits[scheme].type);
    c->d = d;
    c->seed = seed;
    c->bytes = skv_quant_bytes(scheme, d);
    c->simd = skv_quant_simd_available();
    if (c->kind == KIND_TQ || c->kind == KIND_TQP) {
        c->bits = k_traits[scheme].bits - (c->kind == KIND_TQP);
        if ((rc = skv_tq_ctx_init(c)) != SKV_OK) {
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
    if (ctx->sign) skv_quant_rotate_fwd(ctx, y, tmp);
    return SKV_OK;
}

int skv_quant_ctx_unrotate(const skv_quant_ctx *ctx, const float *y, float *x)
{
    if (!ctx || !x || !y) return SKV_ERR_INVALID_ARG;
    float tmp[SKV_QUANT_MAX_D_TQ];
    memmove(x, y, ctx->d * sizeof *x);
    if (ctx->sign) skv_quant_rotate_inv(ctx, x, tmp);
    return SKV_OK;
}

/* n_vec * per without overflow; SKV_OK or SKV_ERR_RANGE. */
/* One vector of a baseline scheme: a row of its type. */
static int block_encode(const skv_quant_ctx *c, const float *x, uint8_t *out)
{
    return skv_type_from_float(c->type, c->simd)(x, out, c->d);
}

static int block_decode(const skv_quant_ctx *c, const uint8_t *in, float *y)
{
    int rc = c->type->check ? c->type->check(in, c->d) : SKV_OK;
    if (rc == SKV_OK) skv_type_to_float(c->type, c->simd)(in, y, c->d);
    return rc;
}

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
    skv_tq_scratch s;
    int rc = SKV_OK;
    if (!ctx) return SKV_ERR_INVALID_ARG;
    if (n_vec == 0) return SKV_OK;
    if (!x || !dst) return SKV_ERR_INVALID_ARG;
    if (mul_size(n_vec, ctx->bytes, &need) != SKV_OK || need > dst_cap) return SKV_ERR_RANGE;
    if (mul_size(n_vec, ctx->d, &need) != SKV_OK) return SKV_ERR_RANGE;
    for (size_t i = 0; i < n_vec && rc == SKV_OK; i++) {
        const float *xi = x + i * ctx->d;
        uint8_t *o = dst + i * ctx->bytes;
        rc = ctx->kind == KIND_BLOCK ? block_encode(ctx, xi, o) : skv_tq_encode_one(ctx, xi, o, &s);
    }
    return rc;
}

int skv_quant_ctx_decode(const skv_quant_ctx *ctx, const uint8_t *src, size_t src_size,
                         size_t n_vec, float *y, size_t y_cap)
{
    size_t need;
    skv_tq_scratch s;
    int rc = SKV_OK;
    if (!ctx) return SKV_ERR_INVALID_ARG;
    if (n_vec == 0) return SKV_OK;
    if (!src || !y) return SKV_ERR_INVALID_ARG;
    if (mul_size(n_vec, ctx->d, &need) != SKV_OK || need > y_cap) return SKV_ERR_RANGE;
    if (mul_size(n_vec, ctx->bytes, &need) != SKV_OK || need > src_size) return SKV_ERR_FORMAT;
    for (size_t i = 0; i < n_vec && rc == SKV_OK; i++) {
        const uint8_t *in = src + i * ctx->bytes;
        float *yi = y + i * ctx->d;
        rc = ctx->kind == KIND_BLOCK ? block_decode(ctx, in, yi) : skv_tq_decode_one(ctx, in, yi, &s);
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
