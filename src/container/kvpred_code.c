/* kvpred: the per-head coding loop the encoder and the decoder share (kvpred.h,
 * docs/format.md section 2.5). One (layer, kind, kv_head) series at a time:
 *
 *   for t in 0 .. n_pos-1:
 *     pred  = mu + a (x~[t-1] - mu) + b (x~[t-1][partner] - mu[partner])
 *     level = levels[t] (0 if none);  SKIP: x~[t] = pred, no symbols
 *     else   q[c] = round((x[t][c] - pred[c]) / step)   (encoder only)
 *            x~[t][c] = pred[c] + q[c] * step            (both, binary32)
 *            symbols of q[c], contexts from q[t-1][c]
 *
 * Symbols of one integer q, contexts z = min(|q_prev|, 2), s = sign class of q_prev:
 *   bit q != 0 (model zero[c][z]); then bit q < 0 (sign[c][s]); m = |q|, n = floor(log2 m)
 *   in 0..19: n ones then (n < 19) a zero under ex[z][0..n] (shared by the head's channels);
 *   then the n low bits of m raw (put_bits).
 *
 * Residual mode rot (flag bit 2): the residual is rotated before the quantizer,
 *     y = R (x[t] - pred),  q[c] = round(y[c] / step),  x~[t] = pred + R^T (q * step),
 * R the TurboQuant rotation of d (quant.h): the symbols of q[c] are those of rotated
 * coordinate c, with the same models and contexts. */
#include "container/kvpred_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

/* 2^(L/2), L = 0..7: the step multiplier of a level. */
static const float level_mult[8] = {1.0f, 1.41421356f, 2.0f, 2.82842712f, 4.0f, 5.65685425f, 8.0f, 11.3137085f};

void kvp_head_free(kvp_head *s)
{
    free(s->mem);
    free(s->models);
    memset(s, 0, sizeof *s);
}

int kvp_head_alloc(kvp_head *s, size_t d)
{
    memset(s, 0, sizeof *s);
    s->d = d;
    s->mem = malloc(d * 7 * sizeof(float) + d * sizeof(uint32_t) + d * sizeof(int32_t));
    s->models = malloc(d * 6 * sizeof *s->models);
    if (!s->mem || !s->models) {
        kvp_head_free(s);
        return SKV_ERR_NOMEM;
    }
    s->mu = s->mem, s->a = s->mu + d, s->b = s->a + d, s->prev = s->b + d, s->pred = s->prev + d, s->row = s->pred + d;
    s->ry = s->row + d;
    s->part = (uint32_t *)(s->ry + d);
    s->pq = (int32_t *)(s->part + d);
    return SKV_OK;
}

int kvp_rot_create(int rot, size_t d, skv_quant_ctx **out)
{
    *out = NULL;
    if (!rot) return SKV_OK;
    if (d > SKV_KVP_ROT_MAX_D) return SKV_ERR_INVALID_ARG;
    int rc = skv_quant_ctx_create(out, SKV_QUANT_TQ4, d, SKV_KVP_ROT_SEED);
    return rc == SKV_ERR_NOMEM ? rc : rc ? SKV_ERR_INVALID_ARG : SKV_OK;
}

/* Fresh models and x~[-1] = mu at the start of one head's series. */
void kvp_head_reset(kvp_head *s)
{
    for (size_t i = 0; i < s->d * 6; i++) skv_adbit_init(&s->models[i]);
    for (size_t i = 0; i < 3 * KVP_EXP; i++) skv_adbit_init(&s->ex[i / KVP_EXP][i % KVP_EXP]);
    for (size_t i = 0; i < 16; i++) skv_adbit_init(&s->lv[i]);
    memcpy(s->prev, s->mu, s->d * sizeof *s->prev);
    memset(s->pq, 0, s->d * sizeof *s->pq);
}

static void predict(kvp_head *s, const float *ref)
{
    for (size_t c = 0; s->tok && c < s->d; c++)
        s->pred[c] = ref ? s->mu[c] + s->b[c] * (ref[c] - s->mu[c]) : s->mu[c] + s->a[c] * (s->prev[c] - s->mu[c]);
    for (size_t c = 0; !s->tok && c < s->d; c++) {
        uint32_t p = s->part[c];
        float own = s->a[c] * (s->prev[c] - s->mu[c]), other = s->b[c] * (s->prev[p] - s->mu[p]);
        s->pred[c] = (s->mu[c] + own) + other;
    }
}

static int zctx(int32_t pq) { return pq == 0 ? 0 : (pq == 1 || pq == -1) ? 1 : 2; }
static int sctx(int32_t pq) { return pq == 0 ? 0 : pq > 0 ? 1 : 2; }

static int put_q(skv_rangecoder_enc *e, kvp_head *s, size_t c, int32_t q)
{
    int z = zctx(s->pq[c]), n = 0, rc;
    uint32_t m = q < 0 ? (uint32_t)-q : (uint32_t)q;
    rc = skv_adbit_put(e, &s->models[c * 6 + z], m != 0);
    if (!m) return rc;
    skv_adbit_put(e, &s->models[c * 6 + 3 + sctx(s->pq[c])], q < 0);
    while ((m >> (n + 1)) != 0) n++;
    for (int j = 0; j < n; j++) skv_adbit_put(e, &s->ex[z][j], 1);
    if (n < KVP_EXP - 1) skv_adbit_put(e, &s->ex[z][n], 0);
    return n ? skv_rangecoder_enc_put_bits(e, m - (1u << n), (unsigned)n) : e->err;
}

static int get_q(skv_rangecoder_dec *d, kvp_head *s, size_t c, int32_t *q)
{
    int z = zctx(s->pq[c]), bit = 0, neg = 0, n = 0;
    uint32_t low = 0;
    skv_adbit_get(d, &s->models[c * 6 + z], &bit);
    *q = 0;
    if (!bit) return d->err;
    skv_adbit_get(d, &s->models[c * 6 + 3 + sctx(s->pq[c])], &neg);
    while (n < KVP_EXP - 1 && (skv_adbit_get(d, &s->ex[z][n], &bit), bit)) n++;
    if (n) skv_rangecoder_dec_get_bits(d, (unsigned)n, &low);
    *q = (int32_t)((1u << n) + low);
    if (neg) *q = -*q;
    return d->err;
}

/* Levels 0..SKV_KVP_SKIP as 4-bit binary trees (models lv[1..15]). */
int kvp_put_level(skv_rangecoder_enc *e, kvp_head *s, unsigned L)
{
    unsigned node = 1;
    for (int b = 3; b >= 0; b--) {
        int bit = (int)((L >> b) & 1);
        skv_adbit_put(e, &s->lv[node], bit);
        node = 2 * node + (unsigned)bit;
    }
    return e->err;
}

int kvp_get_level(skv_rangecoder_dec *d, kvp_head *s, uint8_t *L)
{
    unsigned node = 1;
    for (int b = 3; b >= 0; b--) {
        int bit = 0;
        skv_adbit_get(d, &s->lv[node], &bit);
        node = 2 * node + (unsigned)bit;
    }
    if (d->err) return d->err;
    if (node - 16 > SKV_KVP_SKIP) return SKV_ERR_FORMAT;
    *L = (uint8_t)(node - 16);
    return SKV_OK;
}

/* A SKIP position: x~ = the prediction, no symbols. */
static int skip_pos(kvp_head *s)
{
    memcpy(s->prev, s->pred, s->d * sizeof *s->prev);
    memset(s->pq, 0, s->d * sizeof *s->pq);
    return SKV_OK;
}

/* The quantizer's input of one position: the residual, rotated in mode rot (into s->ry). */
static const float *residual(kvp_head *s, const float *x)
{
    for (size_t c = 0; c < s->d; c++) s->ry[c] = x[c] - s->pred[c];
    if (s->rot) skv_quant_ctx_rotate(s->rot, s->ry, s->ry);
    return s->ry;
}

/* x~ = pred + (R^T) (q * st) into dst, q the integers in s->pq; 0 if some x~ is not finite. */
static int reconstruct(kvp_head *s, float st, float *dst)
{
    for (size_t c = 0; c < s->d; c++) s->ry[c] = (float)s->pq[c] * st;
    if (s->rot) skv_quant_ctx_unrotate(s->rot, s->ry, s->ry);
    int ok = 1;
    for (size_t c = 0; c < s->d; c++) {
        dst[c] = s->pred[c] + s->ry[c];
        ok &= isfinite(dst[c]) != 0;
    }
    return ok;
}

/* One position of the encoder: x (d floats) -> symbols; s->prev = x~. */
static int enc_pos(skv_rangecoder_enc *e, kvp_head *s, const float *x, float step, unsigned L, const float *ref)
{
    predict(s, ref);
    if (L == SKV_KVP_SKIP) return skip_pos(s);
    float st = step * level_mult[L];
    const float *r = residual(s, x);
    for (size_t c = 0; c < s->d; c++) {
        double v = floor((double)r[c] / (double)st + 0.5);
        if (!(fabs(v) <= SKV_KVP_MAX_Q)) return SKV_ERR_RANGE;
        int32_t q = (int32_t)v;
        int rc = put_q(e, s, c, q);
        if (rc) return rc;
        s->pq[c] = q;
    }
    if (!reconstruct(s, st, s->row)) return SKV_ERR_RANGE;
    memcpy(s->prev, s->row, s->d * sizeof *s->prev);
    return SKV_OK;
}

static int dec_pos(skv_rangecoder_dec *d, kvp_head *s, float step, unsigned L, const float *ref)
{
    predict(s, ref);
    if (L == SKV_KVP_SKIP) return skip_pos(s);
    float st = step * level_mult[L];
    for (size_t c = 0; c < s->d; c++) {
        int32_t q = 0;
        int rc = get_q(d, s, c, &q);
        if (rc) return rc;
        s->pq[c] = q;
    }
    return reconstruct(s, st, s->prev) ? SKV_OK : SKV_ERR_FORMAT;
}

static const float *ref_row(const int32_t *ref, size_t t, const float *out, size_t d)
{
    return ref && ref[t] >= 0 ? out + (size_t)ref[t] * d : NULL;
}

int kvp_encode_series(skv_rangecoder_enc *e, kvp_head *s, const float *x, size_t n_pos, float step,
                      const uint8_t *level, const int32_t *ref, float *out)
{
    kvp_head_reset(s);
    for (size_t t = 0; t < n_pos; t++) {
        int rc = enc_pos(e, s, x + t * s->d, step, level ? level[t] : 0, ref_row(ref, t, out, s->d));
        if (rc) return rc;
        if (out) memcpy(out + t * s->d, s->prev, s->d * sizeof *out);
    }
    return SKV_OK;
}

int kvp_decode_series(skv_rangecoder_dec *d, kvp_head *s, size_t n_pos, float step, const uint8_t *level,
                      const int32_t *ref, float *out)
{
    kvp_head_reset(s);
    for (size_t t = 0; t < n_pos; t++) {
        int rc = dec_pos(d, s, step, level ? level[t] : 0, ref_row(ref, t, out, s->d));
        if (rc) return rc;
        for (size_t c = 0; c < s->d; c++)
            if (!isfinite(s->pred[c])) return SKV_ERR_FORMAT;
        memcpy(out + t * s->d, s->prev, s->d * sizeof *out);
    }
    return SKV_OK;
}

int32_t *kvp_refs(const int32_t *tokens, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    int32_t *ref = malloc((n ? n : 1) * sizeof *ref), *slot = malloc(cap * sizeof *slot); /* slot: a position, -1 empty */
    if (!ref || !slot) {
        free(ref), free(slot);
        return NULL;
    }
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    for (size_t t = 0; t < n; t++) {
        size_t h = ((uint32_t)tokens[t] * 2654435761u) & (cap - 1);
        while (slot[h] >= 0 && tokens[slot[h]] != tokens[t]) h = (h + 1) & (cap - 1);
        ref[t] = slot[h];
        slot[h] = (int32_t)t;
    }
    free(slot);
    return ref;
}
