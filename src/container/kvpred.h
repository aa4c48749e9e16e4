/* Predictive (closed-loop) coding of a block of KV positions, model-free: the lossy face
 * of the paper's Layer 2 (docs/format.md section 2.5, docs/kvpred.md).
 *
 * READ ME FIRST
 * - Input and output are the canonical KV order of kvcodec.h:
 *       for layer: for kind K, V: for kv_head: for position: head_dim floats
 *   Each (layer, kind, kv_head) is a time series of n_pos vectors x[t]. The coder predicts
 *   x[t] from the *reconstructed* x~[t-1] (closed loop: the decoder holds exactly the same
 *   x~[t-1], so prediction errors do not accumulate), quantizes the residual with a
 *   uniform step, and range-codes the integers under adaptive binary models.
 * - Predictors (one formula, coefficients per channel c of a head, partner p(c)):
 *       pred[c] = mu[c] + a[c] * (x~[t-1][c] - mu[c]) + b[c] * (x~[t-1][p(c)] - mu[p(c)])
 *   none: mu = a = b = 0; delta: a = 1; lpc: mu, a fitted on the session (b = 0);
 *   lpc2: mu, a, b fitted, p(c) the RoPE partner of c: a 2x2 linear map per channel pair,
 *   which learns the rotation RoPE applies between positions (pairs (2i, 2i+1) or
 *   (i, i + d/2), chosen per (layer, kind) by the encoder). x~[-1] = mu.
 *   tok: the tokens are known to the decoder (a .skv stores them anyway): when token[t]
 *   occurred before, at t' (the latest such), pred[c] = mu[c] + b[c] * (x~[t'][c] - mu[c]);
 *   otherwise pred[c] = mu[c] + a[c] * (x~[t-1][c] - mu[c]).
 * - Residual mode (flag bit 2, `rot`): the residual r = x - pred is rotated, y = R r with
 *   the TurboQuant rotation of head_dim (quant.h, seed SKV_KVP_ROT_SEED), y is quantized
 *   and coded channel by channel as r would be, and x~ = pred + R^T (q * step).
 * - Step of (layer, kind) at position t: step_lk * mult(level[t]) with
 *   mult(L) = 2^(L/2), L = 0..7; L = 8 (SKV_KVP_SKIP) codes no residual: x~[t] = pred.
 *   Levels are optional (surprisal-adaptive allocation): all 0 when absent.
 * - Everything the decoder computes is plain binary32 arithmetic in a fixed order
 *   (no FMA contraction: the build pins -ffp-contract=off), so decode == the encoder's
 *   reconstruction bit for bit on every machine.
 */
#ifndef SKV_KVPRED_H
#define SKV_KVPRED_H

#include <stddef.h>
#include <stdint.h>
#include "core/util.h"

#define SKV_KVP_HDR 64
#define SKV_KVP_SKIP 8          /* level: no residual */
#define SKV_KVP_MAX_Q ((1 << 20) - 1)
#define SKV_KVP_MAX_ROW 65536   /* n_head_kv * head_dim a reader accepts */
#define SKV_KVP_ROT_SEED 0x534B5650524F5431ull /* flag bit 2: the TurboQuant rotation of seed "SKVPROT1" */
#define SKV_KVP_ROT_MAX_D 4096u  /* flag bit 2: head_dim at most the tq schemes' limit */

enum { SKV_KVP_NONE = 0, SKV_KVP_DELTA = 1, SKV_KVP_LPC = 2, SKV_KVP_LPC2 = 3, SKV_KVP_TOK = 4, SKV_KVP_N_PRED = 5 };

typedef struct skv_kvp_header {
    int predictor;          /* SKV_KVP_* */
    int flags;              /* bit 0: per-position levels in the stream; bit 1: layer 0 not stored (regenerated
                               from the tokens by the model: engine/layer0.h), side and stream code layers 1..;
                               bit 2: residuals rotated (SKV_KVP_ROT_SEED, head_dim <= SKV_KVP_ROT_MAX_D) */
    uint32_t n_layer, n_head_kv, head_dim;
    uint64_t tokens_bytes;  /* .skv: the token frame between the sub-header and the body */
    uint64_t side_bytes;    /* steps, pairings, coefficients */
    uint64_t stream_bytes;  /* the range-coded residuals */
    float rel_mse[2];       /* informational, as kvcodec.h */
} skv_kvp_header;

typedef struct skv_kvp_params {
    int predictor;          /* SKV_KVP_* */
    float step[2];          /* step of K and V relative to the RMS of each (layer, kind) block */
    const uint8_t *level;   /* NULL, or n_pos levels 0..SKV_KVP_SKIP */
    const float *abs_step;  /* NULL, or n_layer * 2 absolute steps (layer, kind) replacing step[] */
    const int32_t *tokens;  /* predictor tok: the n_pos token ids (else ignored) */
    int ramp;               /* 1: levels from the recency ramp (skv_kvp_ramp_levels), steps / 8; level must be NULL */
    const float *surprisal; /* NULL, or n_pos surprisals (bits): levels from skv_kvp_surprisal_levels (plus the ramp's
                               when ramp); level must be NULL */
    int layer0;             /* 1: layer 0 not stored (flag bit 1; n_layer >= 2): the reader regenerates it */
    int rot;                /* 1: residuals rotated with the TurboQuant rotation of head_dim before the uniform
                               quantizer (flag bit 2; docs/format.md 2.5) */
    float kl;               /* 0, or the target KL (nats per token) of skv_kvp_encode_quality (it runs the model:
                               container/kvpred_quality.h); skv_kvp_encode ignores it */
    float rate;             /* 0, or the target KV bits per position (sub-header, side, stream): step[] scaled to
                               the finest that fits (the coarsest tried when none does) */
} skv_kvp_params;

/* "none" "delta" "lpc" "lpc2" <-> SKV_KVP_*; NULL / -1 if unknown. */
const char *skv_kvp_pred_name(int predictor);
int skv_kvp_pred_parse(const char *name);

/* The recency ramp over n positions: level[t] = min(7, floor(2 log2((n - t) / 4))) (0 when
 * negative), level[0] = 0: the step grows as sqrt of the distance from the end, the
 * attention sink (position 0) and the recent positions finest. */
void skv_kvp_ramp_levels(size_t n, uint8_t *level);

/* Surprisal-adaptive levels: s_ref = 4 x the mean of sur[1..n) (bits, > 0), level[t] =
 * clamp(round(2 log2(s_ref / max(sur[t], s_ref / 16))), 0, 7), level[0] = 0; base (NULL, or
 * n levels, may equal level) is added, capped at 7. Finer steps where the model was surprised. */
void skv_kvp_surprisal_levels(const float *sur, size_t n, const uint8_t *base, uint8_t *level);

void skv_kvp_header_write(const skv_kvp_header *h, uint8_t out[SKV_KVP_HDR]);
/* Validates p[0..size) (size = the whole payload: header, tokens, body): magic, sizes,
 * geometry, predictor, side_bytes as the geometry says, and that the parts add up.
 * SKV_OK or SKV_ERR_FORMAT with a message. */
int skv_kvp_header_parse(const uint8_t *p, size_t size, skv_kvp_header *h, skv_err *err);
/* Side-information bytes of a geometry and predictor; 0 on overflow. */
uint64_t skv_kvp_side_bytes(int predictor, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim);

/* kv (canonical, n_pos positions) -> *body (malloc'ed: side, then stream; *body_len bytes)
 * and h (everything but tokens_bytes). deq (optional, same size as kv): the decoder's
 * output. SKV_ERR_INVALID_ARG (bad params, non-finite values), SKV_ERR_RANGE (a residual
 * needs more than SKV_KVP_MAX_Q steps), SKV_ERR_NOMEM. */
int skv_kvp_encode(const skv_kvp_params *p, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim, const float *kv,
                   size_t n_pos, uint8_t **body, size_t *body_len, skv_kvp_header *h, float *deq);
/* body (side_bytes + stream_bytes) of a parsed header -> kv (kv_cap floats); tokens: the
 * n_pos ids for predictor tok (else may be NULL). With flag bit 1 layer 0 of kv is left
 * zero (the caller regenerates it: skv_ctx_layer0_kv).
 * SKV_ERR_FORMAT (bad side values, a corrupt stream, a non-finite result), SKV_ERR_RANGE
 * (kv_cap too small), SKV_ERR_NOMEM. */
int skv_kvp_decode(const skv_kvp_header *h, const uint8_t *body, size_t body_len, size_t n_pos, const int32_t *tokens,
                   float *kv, size_t kv_cap);

#endif
