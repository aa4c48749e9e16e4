/* kvtc: model-free transform coding of a block of KV positions (docs/kvtc.md).
 *
 * READ ME FIRST
 * - A *calibration* (skv_kvtc_calib) holds, per (layer, kind, kv_head) series, the mean
 *   mu[d] of its head vectors and an orthonormal basis (the eigenvectors of their
 *   covariance, eigenvalues descending), measured once on a calibration text. It is saved
 *   as a side file named by its XXH3-64 (kvtc-<16 hex>.cal), as cmvd names dictionaries;
 *   a stream names the calibration it needs and a decode with another one is refused
 *   (SKV_ERR_MISMATCH).
 * - Coding one series: y[t] = B_k (x[t] - mu) (the first k components; k per series, chosen
 *   by reverse water-filling: component j is kept when eig[j] > theta * step^2), y is
 *   quantized with one uniform step per (layer, kind) and range-coded by kvpred's series
 *   coder (predictor none or tok, per-component adaptive models, optional recency ramp),
 *   and x~[t] = mu + B_k^T y~[t]. Dropped components come back as the mean.
 * - Input and output are the canonical KV order of kvcodec.h
 *   (layer, kind K/V, kv_head, position, head_dim).
 * - Determinism: the covariance is summed in double in a fixed order, the eigenvectors
 *   come from a cyclic Jacobi method with a fixed sweep order (kvtc_jacobi.c), the
 *   projections are double sums in channel order rounded once to binary32; the build pins
 *   -ffp-contract=off. Decode == the encoder's reconstruction bit for bit everywhere.
 */
#ifndef SKV_KVTC_H
#define SKV_KVTC_H

#include <stddef.h>
#include <stdint.h>
#include "core/util.h"

#define SKV_KVTC_HDR 56           /* stream header bytes */
#define SKV_KVTC_CAL_HDR 48       /* calibration file header bytes (then series, then XXH3-64) */
#define SKV_KVTC_MAX_D 256u       /* head_dim a reader accepts */
#define SKV_KVTC_MAX_SERIES 4096u /* n_layer * 2 * n_head_kv a reader accepts */
#define SKV_KVTC_MAX_POS (1u << 24)

enum { SKV_KVTC_NONE = 0, SKV_KVTC_TOK = 1, SKV_KVTC_N_PRED = 2 };
/* K's RoPE undone before the transform (and redone after): pairs (2i, 2i+1) or halves
 * (i, i + rope_dim/2), angle p * base^(-2i / rope_dim) at position p (a stream's pos0 + t;
 * calibration windows start at 0). */
enum { SKV_KVTC_ROPE_NONE = 0, SKV_KVTC_ROPE_PAIRS = 1, SKV_KVTC_ROPE_HALVES = 2 };

typedef struct skv_kvtc_calib skv_kvtc_calib;

/* Accumulation: create, add blocks of canonical KV (n_pos positions each), finish (the
 * eigen-decompositions). SKV_ERR_INVALID_ARG (geometry over the limits), SKV_ERR_NOMEM. */
int skv_kvtc_calib_create(uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim, skv_kvtc_calib **out);
/* Before any add: K rows are un-rotated with this RoPE (style SKV_KVTC_ROPE_*; rope_dim even,
 * <= head_dim; base > 1) before they are measured or coded. SKV_ERR_INVALID_ARG. */
int skv_kvtc_calib_set_rope(skv_kvtc_calib *c, int style, uint32_t rope_dim, float base);
/* kv: positions 0 .. n_pos - 1 of a segment (the RoPE angles count from 0). */
int skv_kvtc_calib_add(skv_kvtc_calib *c, const float *kv, size_t n_pos);
int skv_kvtc_calib_finish(skv_kvtc_calib *c);
void skv_kvtc_calib_free(skv_kvtc_calib *c);
/* The file image of a finished calibration (malloc'ed) and its id (XXH3-64 of the bytes
 * before the trailing checksum, which is that same value). */
int skv_kvtc_calib_save(const skv_kvtc_calib *c, uint8_t **buf, size_t *len);
uint64_t skv_kvtc_calib_id(const skv_kvtc_calib *c);
/* Parses a file image: SKV_ERR_FORMAT with a message for anything malformed. */
int skv_kvtc_calib_load(const uint8_t *buf, size_t len, skv_kvtc_calib **out, skv_err *err);
/* A finished calibration's step weights: the step of (layer, kind) lk is multiplied by
 * w[lk] (n_layer * 2 values, each finite in [1/64, 64]; `seqkv kvtc-calib` measures them
 * from the model's KL sensitivity on the calibration text). Saved as a version 2 file; the
 * id changes. SKV_ERR_INVALID_ARG, SKV_ERR_NOMEM. */
int skv_kvtc_calib_set_weights(skv_kvtc_calib *c, const float *w);
/* Geometry, and series s's eigenvalues (descending; d floats). */
void skv_kvtc_calib_dims(const skv_kvtc_calib *c, uint32_t *n_layer, uint32_t *n_head_kv, uint32_t *head_dim);
const float *skv_kvtc_calib_eig(const skv_kvtc_calib *c, size_t series);

typedef struct skv_kvtc_params {
    int predictor;         /* SKV_KVTC_NONE or SKV_KVTC_TOK */
    float step[2];         /* K and V steps relative to the calibration RMS of each (layer, kind) */
    float theta;           /* water level: keep component j when eig[j] > theta * step^2 (0: 1/12) */
    int ramp;              /* 1: the recency ramp of kvpred (skv_kvp_ramp_levels), steps / 8 */
    uint32_t pos0;         /* the segment's first position (K's RoPE angles); pos0 + n_pos <= 2^24 */
    const int32_t *tokens; /* predictor tok: the n_pos token ids */
} skv_kvtc_params;

/* kv (canonical, n_pos positions) -> *out (malloc'ed, *out_len bytes: header, side, stream).
 * deq (optional, same size as kv): the decoder's output. SKV_ERR_INVALID_ARG,
 * SKV_ERR_RANGE (a coefficient beyond the coder's range), SKV_ERR_NOMEM. */
int skv_kvtc_encode(const skv_kvtc_params *p, const skv_kvtc_calib *c, const float *kv, size_t n_pos, uint8_t **out,
                    size_t *out_len, float *deq);
/* The stream's n_pos and calibration id, after checking its header: SKV_ERR_FORMAT. */
int skv_kvtc_peek(const uint8_t *buf, size_t len, size_t *n_pos, uint64_t *calib_id, skv_err *err);
/* buf -> kv (kv_cap floats). tokens: n_pos ids for predictor tok. SKV_ERR_MISMATCH (another
 * calibration or geometry), SKV_ERR_FORMAT (damaged: header, checksum, side values, stream),
 * SKV_ERR_RANGE (kv_cap too small), SKV_ERR_NOMEM; a message in err. */
int skv_kvtc_decode(const uint8_t *buf, size_t len, const skv_kvtc_calib *c, const int32_t *tokens, float *kv,
                    size_t kv_cap, skv_err *err);

/* kvtc_jacobi.c: eigen-decomposition of the symmetric d x d matrix a (row-major, destroyed)
 * by cyclic Jacobi rotations: eig[d] descending, vec[j * d + i] = component i of
 * eigenvector j (sign: its largest-magnitude component, first in index order, positive).
 * SKV_ERR_NOMEM; SKV_ERR_RANGE when it does not converge in 64 sweeps. */
int skv_kvtc_jacobi(double *a, size_t d, double *eig, double *vec);

#endif
