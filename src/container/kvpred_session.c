/* Codec pred (10) of .skv sessions: tokens + predictively coded KV (kvpred.h,
 * docs/format.md section 2.5). The payload:
 *     SKVP sub-header (64 bytes) | token frame (codec tokens payload) | side | stream
 * Restored without the model, like the quantized-KV codecs (section 2.3), whose reader
 * paths it shares through seg_view.kvh (geometry) and seg_view.kph. */
#include "container/codecs.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container/kvpred.h"
#include "container/kvpred_quality.h"

#define PRED_DEFAULT_STEP 1.0f

/* One item of a pred spec (skv_codec_spec_items); u: {params, want_sur}. */
typedef struct {
    skv_kvp_params *p;
    int *want_sur;
} pred_spec;

static int pred_item(void *u, const char *name, const char *val)
{
    pred_spec *ps = u;
    skv_kvp_params *p = ps->p;
    char *end = NULL;
    if (!val) {
        if (!strcmp(name, "ramp")) p->ramp = 1;
        else if (!strcmp(name, "surprisal")) *ps->want_sur = 1;
        else if (!strcmp(name, "layer0")) p->layer0 = 1;
        else if (!strcmp(name, "rot")) p->rot = 1;
        else if ((p->predictor = skv_kvp_pred_parse(name)) < 0) return 1;
        return 0;
    }
    float v = strtof(val, &end);
    if (end == val || *end || !(v > 0.0f && v <= (strcmp(name, "rate") ? 1e6f : 1e9f))) return 1;
    if (!strcmp(name, "rate")) p->rate = v;
    else if (!strcmp(name, "kl")) p->kl = v;
    else if (!strcmp(name, "step")) p->step[0] = p->step[1] = v;
    else if (!strcmp(name, "kstep")) p->step[0] = v;
    else if (!strcmp(name, "vstep")) p->step[1] = v;
    else return 1;
    return 0;
}

/* "PREDICTOR[,ramp][,surprisal][,layer0][,rot][,step=S][,kstep=S][,vstep=S][,rate=BITS][,kl=X]" -> p (*want_sur: the
 * encoder must record each token's surprisal); NULL or "" = "tok,ramp,step=1" (the best
 * model-free point measured, bench/results/rd.md). */
int skv_session_pred_spec(const char *spec, skv_kvp_params *p, int *want_sur)
{
    pred_spec ps = {p, want_sur};
    *p = (skv_kvp_params){.predictor = SKV_KVP_TOK, .step = {PRED_DEFAULT_STEP, PRED_DEFAULT_STEP}};
    *want_sur = 0;
    if (!spec || !*spec) {
        p->ramp = 1;
        return SKV_OK;
    }
    if (skv_codec_spec_items(spec, pred_item, &ps)) return SKV_ERR_INVALID_ARG;
    return p->kl > 0.0f && p->rate > 0.0f ? SKV_ERR_INVALID_ARG : SKV_OK;
}

/* skv_kvp_encode, or with a target KL the quality search (it runs the model). */
static int pred_encode(const skv_kvp_params *q, const skv_ctx *ctx, const float *kv, size_t n, uint8_t **body,
                       size_t *blen, skv_kvp_header *h, float *deq)
{
    skv_model_info mi;
    skv_model_get_info(skv_ctx_model(ctx), &mi);
    if (q->kl > 0.0f) return skv_kvp_encode_quality(q, skv_ctx_model(ctx), q->tokens, kv, n, body, blen, h, deq, NULL, NULL);
    return skv_kvp_encode(q, (uint32_t)mi.n_layer, (uint32_t)mi.n_head_kv, (uint32_t)mi.head_dim, kv, n, body, blen, h,
                          deq);
}

int skv_session_pred_payload(const skv_kvp_params *p, const skv_ctx *ctx, const int32_t *tok, const float *sur, size_t n,
                             const uint8_t *tframe, size_t tlen, uint8_t **out, size_t *plen, uint8_t digest[16])
{
    skv_model_info mi;
    skv_model_get_info(skv_ctx_model(ctx), &mi);
    size_t nf = (size_t)mi.n_layer * 2 * (size_t)mi.n_head_kv * n * (size_t)mi.head_dim, blen = 0;
    float *kv = malloc(nf * sizeof *kv), *deq = malloc(nf * sizeof *deq);
    uint8_t *body = NULL, *buf = NULL;
    skv_kvp_params q = *p;
    skv_kvp_header h;
    int rc = SKV_ERR_NOMEM;
    q.tokens = tok;
    q.surprisal = sur;
    if (kv && deq && !(rc = skv_ctx_kv_read(ctx, 0, (int)n, kv)) &&
        !(rc = pred_encode(&q, ctx, kv, n, &body, &blen, &h, deq)) &&
        !(rc = skv_digest_f32(deq, nf, digest))) {
        rc = (buf = malloc(SKV_KVP_HDR + tlen + blen)) ? SKV_OK : SKV_ERR_NOMEM;
        h.tokens_bytes = tlen;
        if (buf) {
            skv_kvp_header_write(&h, buf);
            memcpy(buf + SKV_KVP_HDR, tframe, tlen);
            memcpy(buf + SKV_KVP_HDR + tlen, body, blen);
            *out = buf;
            *plen = SKV_KVP_HDR + tlen + blen;
        }
    }
    free(kv), free(deq), free(body);
    return rc;
}

/* Segment i's sub-header: valid, the same predictor and geometry as segment 0. */
int skv_session_check_pred(skv_session *s, uint32_t i, skv_err *err)
{
    seg_view *g = &s->segs[i];
    const skv_kvp_header *a = &s->segs[0].kph, *h = &g->kph;
    skv_err sub = {0};
    if (skv_kvp_header_parse(g->payload, g->payload_bytes, &g->kph, &sub)) {
        char full[240];
        snprintf(full, sizeof full, "segment %u: %.199s", i, sub.msg);
        return skv_session_bad(err, full);
    }
    if (i && (h->predictor != a->predictor || h->n_layer != a->n_layer || h->n_head_kv != a->n_head_kv ||
              h->head_dim != a->head_dim))
        return skv_session_bad(err, "segments disagree on the KV predictor or geometry");
    memset(&g->kvh, 0, sizeof g->kvh); /* the geometry the shared KV paths read */
    g->kvh.n_layer = h->n_layer, g->kvh.n_head_kv = h->n_head_kv, g->kvh.head_dim = h->head_dim;
    g->kvh.tokens_bytes = h->tokens_bytes;
    g->kvh.rel_mse[0] = h->rel_mse[0], g->kvh.rel_mse[1] = h->rel_mse[1];
    return SKV_OK;
}

int skv_session_decode_pred(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                            int32_t *tok, skv_err *err)
{
    const skv_kvp_header *h = &g->kph;
    seg_view t = *g;
    int rc;
    if (model_free && (h->flags & 2))
        return skv_fail(err, SKV_ERR_UNSUPPORTED,
                        "this pred segment regenerates layer 0 from the model: restore it with the model "
                        "(skv_session_restore_segment)");
    t.payload = g->payload + SKV_KVP_HDR;
    t.payload_bytes = h->tokens_bytes;
    if ((rc = skv_session_decode_tokens(&t, s->info.n_vocab, tok, err))) return rc;
    rc = skv_kvp_decode(h, t.payload + h->tokens_bytes, (size_t)(h->side_bytes + h->stream_bytes), g->n_tokens, tok, kv,
                        kv_cap);
    if (rc == SKV_ERR_FORMAT) return skv_session_bad(err, "the predictive KV payload does not decode");
    if (rc) return skv_fail(err, rc, "KV decoding failed: %s", skv_status_str(rc));
    return SKV_OK;
}

/* ---- the codec table's operations (codecs.c) ---- */

int skv_codec_pred_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err)
{
    (void)mi;
    if (!skv_session_pred_spec(p->kv_quant, &st->kvp, &st->want_sur)) return SKV_OK;
    return skv_fail(err, SKV_ERR_INVALID_ARG,
                    "codec pred: kv_quant must be PREDICTOR[,ramp][,surprisal][,layer0][,rot][,step=S][,kstep=S][,vstep=S]"
                    "[,rate=BITS][,kl=X] (none delta lpc lpc2 tok), not '%s'",
                    p->kv_quant);
}

int skv_codec_pred_encode(skv_codec_seg *x)
{
    size_t tlen = 0;
    int rc = skv_codec_tokens_frame(x, &tlen);
    if (rc) return rc;
    rc = skv_session_pred_payload(&x->st->kvp, x->ctx, x->tok, x->sur, x->n, *x->buf, tlen, &x->owned, &x->len,
                                  x->digest);
    x->payload = x->owned;
    if (rc)
        return skv_fail(x->err, rc, "%s",
                        rc == SKV_ERR_NOMEM ? "out of memory"
                                            : "the KV cannot be coded predictively (non-finite values, or a step too "
                                              "small for them)");
    return SKV_OK;
}

/* The predictor names the "scheme"; the KV bytes are the sub-header, side and stream. */
void skv_codec_pred_kv_info(const seg_view *g, skv_session_kv_info *out)
{
    const skv_kvp_header *p = &g->kph;
    for (int k = 0; k < 2; k++) snprintf(out->scheme[k], sizeof out->scheme[k], "%s", skv_kvp_pred_name(p->predictor));
    out->kv_bytes = SKV_KVP_HDR + p->side_bytes + p->stream_bytes;
    out->position_bytes = (out->kv_bytes + g->n_tokens - 1) / g->n_tokens;
    out->model_layers = (p->flags & 2) ? 1 : 0;
}
