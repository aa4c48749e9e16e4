/* kvpred internals shared by kvpred.c (header, side information, fitting) and
 * kvpred_code.c (the per-head coding loop). Not part of the public API. */
#ifndef SKV_KVPRED_INT_H
#define SKV_KVPRED_INT_H

#include <stddef.h>
#include <stdint.h>

#include "coder/adbit.h"
#include "container/kvpred.h"
#include "quant/quant.h"

#define KVP_EXP 20 /* magnitude classes: |q| < 2^20 */

/* The state of one (layer, kind, kv_head) series: its predictor and models. */
typedef struct kvp_head {
    size_t d;
    int tok;               /* predictor tok: b weighs the matched row, a the previous one */
    float *mu, *a, *b;     /* [d] predictor coefficients */
    uint32_t *part;        /* [d] partner channel of each channel */
    float *prev, *pred, *row; /* [d] x~[t-1], the prediction, scratch */
    float *ry;             /* [d] rot: the rotated residual, scratch */
    const skv_quant_ctx *rot; /* NULL, or the rotation of the residuals (flag bit 2) */
    int32_t *pq;           /* [d] q[t-1] */
    skv_adbit *models;     /* [d][6]: zero[3], sign[3] */
    skv_adbit ex[3][KVP_EXP];
    skv_adbit lv[16];
    float *mem;
} kvp_head;

int kvp_head_alloc(kvp_head *s, size_t d);
/* The rotation of flag bit 2 for head_dim d: *out NULL when rot is 0. */
int kvp_rot_create(int rot, size_t d, skv_quant_ctx **out);
void kvp_head_free(kvp_head *s);
void kvp_head_reset(kvp_head *s);
int kvp_put_level(skv_rangecoder_enc *e, kvp_head *s, unsigned L);
int kvp_get_level(skv_rangecoder_dec *d, kvp_head *s, uint8_t *L);
/* One series of n_pos vectors x (n_pos * d floats); out (optional) gets x~. */
/* ref (NULL, or n_pos entries): the earlier position whose row out[ref[t]] predicts t, -1 none. */
int kvp_encode_series(skv_rangecoder_enc *e, kvp_head *s, const float *x, size_t n_pos, float step,
                      const uint8_t *level, const int32_t *ref, float *out);
int kvp_decode_series(skv_rangecoder_dec *d, kvp_head *s, size_t n_pos, float step, const uint8_t *level,
                      const int32_t *ref, float *out);
/* ref[t] = the latest t' < t with tokens[t'] == tokens[t], else -1 (malloc'ed; NULL: no memory). */
int32_t *kvp_refs(const int32_t *tokens, size_t n);

/* kvpred_alloc.c: skv_kvp_encode with surprisal or a target rate (kvpred.h). */
typedef struct kvp_dims {
    uint32_t n_layer, n_head_kv, head_dim;
    const float *kv;
    size_t n_pos;
} kvp_dims;
/* p->layer0: layers 1.. coded (flag bit 1), deq's layer 0 = kv's (the regenerated rows). */
int kvp_encode_layer0(const skv_kvp_params *p, const kvp_dims *dm, uint8_t **body, size_t *body_len, skv_kvp_header *h,
                      float *deq);
int kvp_encode_alloc(const skv_kvp_params *p, const kvp_dims *dm, uint8_t **body, size_t *body_len, skv_kvp_header *h,
                     float *deq);

#endif
