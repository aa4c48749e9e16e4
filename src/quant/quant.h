/* Per-vector quantizers: TurboQuant (MSE and inner-product variants) and the
 * f32 / f16 / q8_0 / q4_0 baselines, behind one interface.
 *
 * READ ME FIRST
 * - A scheme id + a dimension d fix the size of one encoded vector:
 *   skv_quant_bytes(scheme, d).  n vectors are stored back to back, no
 *   padding, so an array [n][d] of floats encodes to n * bytes bytes.
 * - The tq* schemes also take a 64-bit seed (rotation signs, QJL matrix).
 *   Decoding needs the same (scheme, d, seed): a container must record all
 *   three.  Baselines ignore the seed.
 * - Every layout is explicit little-endian and bit-packed (docs/quant.md).
 *   Scheme ids are stored in files: never renumber them.
 * - Encoding and decoding are bit-identical on every machine: IEEE binary32
 *   arithmetic in a fixed order, no libm transcendental (sqrtf only, which
 *   is correctly rounded), no FMA contraction.  The AVX2 path computes the
 *   very same operations and is tested equal to the scalar reference.
 * - Encoding rejects non-finite input (SKV_ERR_INVALID_ARG) and values whose
 *   fp16 norm/scale would overflow (SKV_ERR_RANGE).  Decoding validates every
 *   byte (SKV_ERR_FORMAT for a non-finite or negative norm, a non-finite
 *   scale or value, non-zero padding bits) and so always yields finite floats.
 * - On error the destination contents are unspecified.
 * - A context (skv_quant_ctx) holds the precomputed tables for one
 *   (scheme, d, seed); it is immutable after creation, so one context may be
 *   used by many threads at once.  Encoding/decoding never allocate.
 */
#ifndef SKV_QUANT_H
#define SKV_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* Scheme ids: part of the on-disk format. */
typedef enum skv_quant_scheme {
    SKV_QUANT_F32 = 0,  /* IEEE binary32, 32 bits/value, lossless */
    SKV_QUANT_F16 = 1,  /* IEEE binary16 (RNE), 16 bits/value */
    SKV_QUANT_Q8_0 = 2, /* blocks of 32: fp16 scale + 32 x int8 (8.5 bits/value) */
    SKV_QUANT_Q4_0 = 3, /* blocks of 32: fp16 scale + 32 x 4 bit (4.5 bits/value) */
    SKV_QUANT_TQ1 = 4,  /* TurboQuant-MSE: fp16 norm + b-bit Lloyd-Max indices */
    SKV_QUANT_TQ2 = 5,
    SKV_QUANT_TQ3 = 6,
    SKV_QUANT_TQ4 = 7,
    SKV_QUANT_TQ2P = 8, /* TurboQuant-prod: fp16 norm + fp16 residual norm + */
    SKV_QUANT_TQ3P = 9, /*   (b-1)-bit MSE indices + d QJL sign bits        */
    SKV_QUANT_TQ4P = 10,
    SKV_QUANT_COUNT = 11
} skv_quant_scheme;

/* Limits on d (hostile sizes are rejected with SKV_ERR_RANGE). */
#define SKV_QUANT_MAX_D 65536u     /* f32, f16, q8_0, q4_0 */
#define SKV_QUANT_MAX_D_TQ 4096u   /* tq1..tq4 (scratch lives on the stack) */
#define SKV_QUANT_MAX_D_TQP 1024u  /* tq2p..tq4p (the QJL matrix is d x d floats) */

/* Blocked baselines (ggml-compatible layout for full blocks). */
#define SKV_QUANT_QK 32u                       /* values per block */
#define SKV_QUANT_Q8_0_BLOCK_BYTES (2u + 32u)  /* fp16 scale + 32 int8 */
#define SKV_QUANT_Q4_0_BLOCK_BYTES (2u + 16u)  /* fp16 scale + 16 bytes of nibbles */

/* Name <-> id.  Names: "f32" "f16" "q8_0" "q4_0" "tq1".."tq4" "tq2p".."tq4p".
 * skv_quant_parse returns the id (>= 0) or SKV_ERR_INVALID_ARG;
 * skv_quant_name returns NULL for an unknown id. */
int skv_quant_parse(const char *name);
const char *skv_quant_name(int scheme);

/* SKV_OK when (scheme, d) is supported, else SKV_ERR_INVALID_ARG (unknown
 * scheme, d == 0) or SKV_ERR_RANGE (d above the scheme's limit). */
int skv_quant_check(int scheme, size_t d);

/* Bytes of one encoded vector, 0 when (scheme, d) is not supported. */
size_t skv_quant_bytes(int scheme, size_t d);

/* Stored bits per value, overhead (norms, scales, padding) included; 0 when
 * unsupported. */
double skv_quant_bits_per_value(int scheme, size_t d);

/* Nominal index bits per coordinate of a tq scheme (1..4), 0 otherwise. */
int skv_quant_tq_bits(int scheme);
/* 1 for tq2p..tq4p, 0 otherwise. */
int skv_quant_is_prod(int scheme);

/* One-shot encode/decode of n_vec contiguous vectors of d floats.
 * They build (and free) a context per call: to encode many small batches of
 * a tq scheme, create a context once instead.
 *   encode: x[n_vec*d] -> dst[n_vec*bytes]; dst_cap in bytes.
 *   decode: src[n_vec*bytes] (src_size >= that) -> y[n_vec*d]; y_cap in floats.
 * n_vec == 0 is a no-op (pointers may then be NULL).
 * Errors: SKV_ERR_INVALID_ARG (NULL, bad scheme, d == 0, non-finite input),
 * SKV_ERR_RANGE (d too large, dst/y too small, size overflow, fp16 overflow),
 * SKV_ERR_FORMAT (src too short or invalid bytes), SKV_ERR_NOMEM. */
int skv_quant_encode(int scheme, size_t d, uint64_t seed, const float *x, size_t n_vec,
                     uint8_t *dst, size_t dst_cap);
int skv_quant_decode(int scheme, size_t d, uint64_t seed, const uint8_t *src, size_t src_size,
                     size_t n_vec, float *y, size_t y_cap);

/* ---- contexts ---------------------------------------------------------- */

typedef struct skv_quant_ctx skv_quant_ctx;

/* Creates the tables for (scheme, d, seed).  *out is NULL on error. */
int skv_quant_ctx_create(skv_quant_ctx **out, int scheme, size_t d, uint64_t seed);
void skv_quant_ctx_free(skv_quant_ctx *ctx);

int skv_quant_ctx_scheme(const skv_quant_ctx *ctx);
size_t skv_quant_ctx_dim(const skv_quant_ctx *ctx);
size_t skv_quant_ctx_bytes(const skv_quant_ctx *ctx);
uint64_t skv_quant_ctx_seed(const skv_quant_ctx *ctx);

/* Same contract as skv_quant_encode / skv_quant_decode. */
int skv_quant_ctx_encode(const skv_quant_ctx *ctx, const float *x, size_t n_vec, uint8_t *dst,
                         size_t dst_cap);
int skv_quant_ctx_decode(const skv_quant_ctx *ctx, const uint8_t *src, size_t src_size,
                         size_t n_vec, float *y, size_t y_cap);

/* The orthogonal rotation of a tq context (identity for baselines): y = R x
 * and x = R^T y for one vector of d floats (in-place allowed).  With these
 * an attention kernel can score a query against tq keys without decoding
 * them: <q, k~> = norm * <R q, centroids[idx]>. */
int skv_quant_ctx_rotate(const skv_quant_ctx *ctx, const float *x, float *y);
int skv_quant_ctx_unrotate(const skv_quant_ctx *ctx, const float *y, float *x);

/* The ctx's scalar codebook (unit-sphere centroids, ascending) for tq
 * schemes: writes 2^bits floats (bits = the MSE-stage bits) to out[cap];
 * returns the count, or a negative status. */
int skv_quant_ctx_codebook(const skv_quant_ctx *ctx, float *out, size_t cap);

/* Theoretical distortion E||u - Q(u)||^2 of a random unit vector under the
 * b-bit codebook used for dimension d (from tools/gen_codebooks.py); a
 * negative value for b outside 1..4 or d == 0. */
double skv_quant_tq_expected_mse(size_t d, int bits);

/* ---- implementation selection (tests, benchmarks) ---------------------- */

/* 1 when the AVX2 path was compiled in and the CPU has every feature it is
 * compiled for (AVX2, FMA, F16C; core/cpu.h, SEQKV_CPU caps it). */
int skv_quant_simd_available(void);
/* Force the scalar reference path (1) or allow SIMD (0) for one context;
 * outputs are identical either way.  Not thread-safe against concurrent use
 * of the same context. */
void skv_quant_ctx_force_scalar(skv_quant_ctx *ctx, int force);

/* ---- the deterministic PRNG (documented in docs/quant.md) --------------- */

/* splitmix64: *state += 0x9E3779B97F4A7C15, then the Stafford mix13 finaliser. */
uint64_t skv_quant_splitmix64(uint64_t *state);
/* A standard normal variate from the stream: Marsaglia's polar method in
 * binary64 with a log built from + - * / only (bit-identical everywhere).
 * spare and has_spare cache the second variate of each accepted pair. */
double skv_quant_gauss(uint64_t *state, double *spare, int *has_spare);

/* ---- kernels (internal): scalar references and their AVX2 twins ---------
 * Each *_avx2 computes exactly the same bits as its *_ref (tests compare).
 * dot: 8-lane striped sum, lane l accumulates a[i]*b[i] for i % 8 == l in
 *      index order, then skv_quant_hsum8.  fwht: unnormalised, m a power of
 *      two (avx2: m >= 8).  index: idx[i] = #{k < nb : y[i] > bound[k]}.
 *      qjl_signs: z[i] = (dot(S_i, r) >= 0).  qjl_accum: acc = sum over rows
 *      i in order of +-S_i (sign z[i]).  (The baselines' kernels, binary16
 *      conversion included, are the type table's: quant/types_kernels.h.) */
static inline float skv_quant_hsum8(const float l[8])
{
    float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
    return (t0 + t2) + (t1 + t3);
}

float skv_quant_dot_ref(const float *a, const float *b, size_t n);
void skv_quant_fwht_ref(float *v, size_t m);
void skv_quant_scale_ref(const float *x, float k, float *y, size_t n);
void skv_quant_xorsign_ref(float *v, const uint32_t *mask, size_t n);
void skv_quant_index_ref(const float *y, const float *bound, int nb, uint8_t *idx, size_t n);
void skv_quant_lookup_ref(const uint8_t *idx, const float *cent, int levels, float *v, size_t n);
void skv_quant_qjl_signs_ref(const float *S, const float *r, size_t d, uint8_t *z);
void skv_quant_qjl_accum_ref(const float *S, const uint8_t *z, size_t d, float *acc);

float skv_quant_dot_avx2(const float *a, const float *b, size_t n);
void skv_quant_fwht_avx2(float *v, size_t m);
void skv_quant_scale_avx2(const float *x, float k, float *y, size_t n);
void skv_quant_xorsign_avx2(float *v, const uint32_t *mask, size_t n);
void skv_quant_index_avx2(const float *y, const float *bound, int nb, uint8_t *idx, size_t n);
void skv_quant_lookup_avx2(const uint8_t *idx, const float *cent, int levels, float *v, size_t n);
void skv_quant_qjl_signs_avx2(const float *S, const float *r, size_t d, uint8_t *z);
void skv_quant_qjl_accum_avx2(const float *S, const uint8_t *z, size_t d, float *acc);

#endif
