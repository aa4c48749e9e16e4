/* Surprisal-adaptive allocation and a target rate for the predictive KV coder (kvpred.h,
 * docs/format.md section 2.5, docs/kvpred.md). Encoder only: the levels it chooses are
 * stored in the stream, so a reader needs neither the surprisal nor the model.
 *
 * - Levels from surprisal: with s_ref = 4 x the mean surprisal (bits) of positions
 *   1..n-1, level[t] = clamp(round(2 log2(s_ref / s[t])), 0, 7) (s[t] floored at
 *   s_ref / 2^4): a token that surprised the model gets the finest step, a near-certain
 *   one a step up to 2^3.5 times coarser; position 0 (the attention sink) level 0. With
 *   ramp the recency ramp's level is added (capped at 7) and the steps are divided by 8.
 * - Target rate: the relative steps are scaled by 2^g, g found by bisection over
 *   [-KVP_G_SPAN, KVP_G_SPAN] (KVP_G_ITERS encodes), the finest scale whose KV bits (the
 *   64-byte sub-header, side and stream) per position are at most the target; the
 *   coarsest when none is. */
#include "container/kvpred_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

#define KVP_G_SPAN 12.0
#define KVP_G_ITERS 11

void skv_kvp_surprisal_levels(const float *sur, size_t n, const uint8_t *base, uint8_t *level)
{
    double sum = 0.0;
    size_t k = 0;
    for (size_t t = 1; t < n; t++)
        if (isfinite(sur[t]) && sur[t] > 0.0f) sum += sur[t], k++;
    double ref = k && sum > 0.0 ? 4.0 * sum / (double)k : 1.0;
    for (size_t t = 0; t < n; t++) {
        double s = isfinite(sur[t]) && sur[t] > ref / 16.0 ? sur[t] : ref / 16.0;
        long L = t == 0 ? 0 : lround(2.0 * log2(ref / s));
        L = L < 0 ? 0 : L > 7 ? 7 : L;
        if (base) L = L + base[t] > 7 ? 7 : L + base[t];
        level[t] = (uint8_t)L;
    }
}

/* One encode of q with its steps scaled by 2^g; *bits = KV bits per position, or HUGE_VAL
 * when a residual is out of range (too fine a step). */
static int encode_scaled(const skv_kvp_params *q, double g, const kvp_dims *dm, uint8_t **body, size_t *len,
                         skv_kvp_header *h, float *deq, double *bits)
{
    skv_kvp_params r = *q;
    r.rate = 0.0f;
    for (int k = 0; k < 2; k++) {
        double st = q->step[k] * exp2(g);
        r.step[k] = (float)(st < 1e-6 ? 1e-6 : st > 1e6 ? 1e6 : st);
    }
    *body = NULL;
    int rc = skv_kvp_encode(&r, dm->n_layer, dm->n_head_kv, dm->head_dim, dm->kv, dm->n_pos, body, len, h, deq);
    *bits = rc ? HUGE_VAL : (double)(*len + SKV_KVP_HDR) * 8.0 / (double)(dm->n_pos ? dm->n_pos : 1);
    if (rc == SKV_ERR_RANGE) rc = SKV_OK;
    return rc;
}

static int encode_rate(const skv_kvp_params *q, const kvp_dims *dm, uint8_t **body, size_t *len, skv_kvp_header *h,
                       float *deq)
{
    double lo = -KVP_G_SPAN, hi = KVP_G_SPAN, bits;
    int rc = SKV_OK;
    for (int it = 0; it < KVP_G_ITERS && !rc; it++) {
        double mid = 0.5 * (lo + hi);
        uint8_t *b = NULL;
        size_t l = 0;
        rc = encode_scaled(q, mid, dm, &b, &l, h, NULL, &bits);
        free(b);
        if (bits <= q->rate) hi = mid;
        else lo = mid;
    }
    if (!rc) rc = encode_scaled(q, hi, dm, body, len, h, deq, &bits);
    return !rc && bits == HUGE_VAL ? SKV_ERR_RANGE : rc;
}

int kvp_encode_alloc(const skv_kvp_params *p, const kvp_dims *dm, uint8_t **body, size_t *body_len, skv_kvp_header *h,
                     float *deq)
{
    skv_kvp_params q = *p;
    uint8_t *lv = NULL;
    int rc;
    if (!(p->rate >= 0.0f) || isinf(p->rate) || (p->surprisal && p->level)) return SKV_ERR_INVALID_ARG;
    q.surprisal = NULL, q.rate = 0.0f;
    if (p->surprisal) {
        if (!(lv = malloc(dm->n_pos ? dm->n_pos : 1))) return SKV_ERR_NOMEM;
        if (p->ramp) skv_kvp_ramp_levels(dm->n_pos, lv);
        skv_kvp_surprisal_levels(p->surprisal, dm->n_pos, p->ramp ? lv : NULL, lv);
        if (p->ramp) q.step[0] = p->step[0] / 8.0f, q.step[1] = p->step[1] / 8.0f;
        q.level = lv, q.ramp = 0;
    }
    if (p->rate > 0.0f) {
        q.rate = p->rate;
        rc = encode_rate(&q, dm, body, body_len, h, deq);
    } else {
        rc = skv_kvp_encode(&q, dm->n_layer, dm->n_head_kv, dm->head_dim, dm->kv, dm->n_pos, body, body_len, h, deq);
    }
    free(lv);
    return rc;
}

int kvp_encode_layer0(const skv_kvp_params *p, const kvp_dims *dm, uint8_t **body, size_t *body_len, skv_kvp_header *h,
                      float *deq)
{
    skv_kvp_params q = *p;
    size_t l0 = 2 * (size_t)dm->n_head_kv * dm->head_dim * dm->n_pos;
    if (dm->n_layer < 2 || !dm->kv) return SKV_ERR_INVALID_ARG;
    q.layer0 = 0;
    q.abs_step = p->abs_step ? p->abs_step + 2 : NULL; /* the steps of layers 1.. */
    int rc = skv_kvp_encode(&q, dm->n_layer - 1, dm->n_head_kv, dm->head_dim, dm->kv + l0, dm->n_pos, body, body_len, h,
                            deq ? deq + l0 : NULL);
    if (rc) return rc;
    if (deq) memcpy(deq, dm->kv, l0 * sizeof *deq);
    h->n_layer = dm->n_layer, h->flags |= 2;
    return SKV_OK;
}
