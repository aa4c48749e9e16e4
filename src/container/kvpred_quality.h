/* Target-quality mode of the predictive KV writer (`--kv-quant ...,kl=X`; docs/kvpred.md,
 * docs/format.md 2.5). Encoder only, and it needs the model: the stream it writes is an
 * ordinary pred stream (the reader needs neither the model nor the target).
 *
 * The quality of a stored cache is how well generation continues from it. The writer
 * measures that on the segment itself, with kv-rd's protocol: its first P = n - m positions
 * (m = min(SKV_KVQ_TAIL, n / 4)) are coded as a segment of their own with the trial steps,
 * decoded into a scratch context, the last m tokens are run over them, and their logits are
 * compared with those of the same run over the exact KV: KL(p_exact || p_restored), nats per
 * row, mean of the m rows. The global step scale 2^g (both steps, g in [-8, 6]) is found by
 * bisection (SKV_KVQ_ITERS trials): the coarsest whose measured KL is at most the target;
 * the whole segment is then coded at that scale. Measured against held-out continuations
 * in bench/results/rd.md (kv-rd --kl-targets). */
#ifndef SKV_KVPRED_QUALITY_H
#define SKV_KVPRED_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "container/kvpred.h"
#include "seqkv.h"

#define SKV_KVQ_TAIL 64
#define SKV_KVQ_ITERS 9

/* skv_kvp_encode of the n positions kv (canonical order, the model's geometry) of tokens tok
 * (the segment's, tok[0] the first), with p->step scaled to meet p->kl (> 0): *kl_out (NULL
 * allowed) the KL measured at the chosen scale, *scale_out (NULL allowed) the scale 2^g. Segments
 * under 8 positions cannot be measured: encoded at p->step, *kl_out = -1.
 * SKV_ERR_INVALID_ARG (p->kl not > 0, p->rate set), skv_kvp_encode's errors, the engine's. */
int skv_kvp_encode_quality(const skv_kvp_params *p, const skv_model *m, const int32_t *tok, const float *kv, size_t n,
                           uint8_t **body, size_t *body_len, skv_kvp_header *h, float *deq, double *kl_out,
                           double *scale_out);

#endif
