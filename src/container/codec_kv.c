/* The quantized-KV codecs f16 q8 q4 tq2 tq3 tq4 (one scheme each) and kvq (schemes per
 * kind from a kv_quant spec), docs/format.md section 2.3. Payload:
 *     KV sub-header (kvcodec.h) | zstd(LEB128 ids) | per-vector encoded KV, canonical order
 * The digest is that of the dequantized KV: verify proves the payload decoded correctly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fpguard.h"

#include "container/codecs.h"
#include "quant/kvquant.h"
#include "quant/quant.h"

/* The one scheme of a fixed quantized-KV codec (both kinds); -1 for KVQ and the others. */
int skv_codec_scheme(int codec)
{
    static const int map[] = {SKV_QUANT_F16, SKV_QUANT_Q8_0, SKV_QUANT_Q4_0, SKV_QUANT_TQ2, SKV_QUANT_TQ3, SKV_QUANT_TQ4};
    return codec >= SKV_CODEC_F16 && codec <= SKV_CODEC_TQ4 ? map[codec - SKV_CODEC_F16] : -1;
}

/* Schemes and seed of a KV codec: fixed, or from the kv_quant spec (kinds and seed only). */
static int kv_schemes(const skv_encoder_params *p, skv_codec_state *st)
{
    skv_kvq_spec sp;
    st->kv_scheme[0] = st->kv_scheme[1] = skv_codec_scheme(p->codec);
    st->kv_seed = 0;
    if (p->codec != SKV_CODEC_KVQ) return p->kv_quant ? SKV_ERR_INVALID_ARG : SKV_OK;
    if (!p->kv_quant || skv_kvquant_parse(p->kv_quant, &sp, NULL)) return SKV_ERR_INVALID_ARG;
    if (sp.scheme[0] < 0 || sp.scheme[1] < 0 || sp.keep_first || sp.keep_last || sp.window) return SKV_ERR_INVALID_ARG;
    st->kv_scheme[0] = sp.scheme[0];
    st->kv_scheme[1] = sp.scheme[1];
    st->kv_seed = sp.seed;
    return SKV_OK;
}

int skv_codec_kv_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err)
{
    int rc = kv_schemes(p, st);
    if (rc)
        return skv_fail(err, rc, "codec %s: kv_quant must be %s", skv_codec_name(p->codec),
                        p->codec == SKV_CODEC_KVQ ? "k=SCHEME,v=SCHEME[,seed=S] (no keep-first/keep-last/window)"
                                                  : "NULL (the codec names its scheme)");
    if ((rc = skv_kvcodec_create(&st->kvc, st->kv_scheme, st->kv_seed, (uint32_t)mi->n_layer, (uint32_t)mi->n_head_kv,
                                 (uint32_t)mi->head_dim)))
        return skv_fail(err, rc, "the KV schemes do not support this model's head size %d: %s", mi->head_dim,
                        skv_status_str(rc));
    return SKV_OK;
}

/* Payload (malloc'ed): sub-header | the token frame (*x->buf, tlen bytes) | the segment's
 * exact KV encoded per vector. digest = that of the dequantized KV. */
static int kv_payload(skv_codec_seg *x, size_t tlen)
{
    const skv_model_info *mi = x->mi;
    const skv_codec_state *st = x->st;
    size_t n = x->n, nf = (size_t)mi->n_layer * 2 * (size_t)mi->n_head_kv * n * (size_t)mi->head_dim;
    size_t kvb = skv_kvcodec_position_bytes(st->kvc) * n;
    float *kv = malloc(nf * sizeof *kv), *deq = malloc(nf * sizeof *deq);
    uint8_t *buf = malloc(SKV_KVC_HDR + tlen + kvb);
    double mse[2] = {0, 0};
    skv_kvc_header h;
    int rc = SKV_ERR_NOMEM;
    if (!kv || !deq || !buf) goto done;
    if ((rc = skv_ctx_kv_read(x->ctx, 0, (int)n, kv))) goto done;
    if ((rc = skv_kvcodec_encode(st->kvc, kv, n, buf + SKV_KVC_HDR + tlen, kvb, deq, mse))) goto done;
    if ((rc = skv_digest_f32(deq, nf, x->digest))) goto done;
    h = (skv_kvc_header){.scheme = {st->kv_scheme[0], st->kv_scheme[1]}, .n_layer = (uint32_t)mi->n_layer,
                        .n_head_kv = (uint32_t)mi->n_head_kv, .head_dim = (uint32_t)mi->head_dim, .seed = st->kv_seed,
                        .tokens_bytes = tlen, .kv_bytes = kvb, .rel_mse = {(float)mse[0], (float)mse[1]}};
    skv_kvc_header_write(&h, buf);
    memcpy(buf + SKV_KVC_HDR, *x->buf, tlen);
    x->payload = x->owned = buf;
    x->len = SKV_KVC_HDR + tlen + kvb;
    buf = NULL;
done:
    free(kv);
    free(deq);
    free(buf);
    if (rc == SKV_ERR_NOMEM) return skv_fail(x->err, rc, "out of memory");
    if (rc)
        skv_fail(x->err, rc,
                 "the KV cannot be stored as k=%s,v=%s (non-finite values or an fp16 overflow): %s",
                 skv_quant_name(st->kv_scheme[0]), skv_quant_name(st->kv_scheme[1]), skv_status_str(rc));
    return rc;
}

int skv_codec_kv_encode(skv_codec_seg *x)
{
    size_t tlen = 0;
    int rc = skv_codec_tokens_frame(x, &tlen);
    return rc ? rc : kv_payload(x, tlen);
}

/* Segment i's KV sub-header: valid (kvcodec.c), the schemes the codec names, and the same
 * schemes, seed and geometry as segment 0 (one session, one cache layout). */
int skv_codec_kv_check(skv_session *s, uint32_t i, skv_err *err)
{
    seg_view *g = &s->segs[i];
    const skv_kvc_header *a = &s->segs[0].kvh, *h = &g->kvh;
    skv_err sub = {0};
    int fixed = skv_codec_scheme(s->info.codec);
    if (skv_kvc_header_parse(g->payload, g->payload_bytes, g->n_tokens, &g->kvh, &sub)) {
        char full[240];
        snprintf(full, sizeof full, "segment %u: %.199s", i, sub.msg);
        return skv_session_bad(err, full);
    }
    if (fixed >= 0 && (h->scheme[0] != fixed || h->scheme[1] != fixed))
        return skv_session_bad(err, "KV sub-header schemes differ from the codec's");
    if (i && (h->scheme[0] != a->scheme[0] || h->scheme[1] != a->scheme[1] || h->seed != a->seed ||
              h->n_layer != a->n_layer || h->n_head_kv != a->n_head_kv || h->head_dim != a->head_dim))
        return skv_session_bad(err, "segments disagree on the KV schemes, seed or geometry");
    return SKV_OK;
}

/* Tokens and dequantized KV (skv_session_kv_floats(g) floats) of a quantized-KV segment. */
int skv_codec_kv_decode(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                        int32_t *tok, skv_err *err)
{
    const skv_kvc_header *h = &g->kvh;
    seg_view t = *g;
    skv_kvcodec *c = NULL;
    int rc;
    if (model_free && (rc = skv_kvc_check_budget(h, err))) return rc;
    t.payload = g->payload + SKV_KVC_HDR;
    t.payload_bytes = h->tokens_bytes;
    if ((rc = skv_session_decode_tokens(&t, s->info.n_vocab, tok, err))) return rc;
    if ((rc = skv_kvcodec_create(&c, h->scheme, h->seed, h->n_layer, h->n_head_kv, h->head_dim)))
        return skv_fail(err, rc, "cannot set up the KV quantizers: %s", skv_status_str(rc));
    rc = skv_kvcodec_decode(c, t.payload + h->tokens_bytes, (size_t)h->kv_bytes, g->n_tokens, kv, kv_cap);
    skv_kvcodec_free(c);
    if (rc == SKV_ERR_FORMAT) return skv_session_bad(err, "the quantized KV payload holds invalid values");
    if (rc) return skv_fail(err, rc, "KV decoding failed: %s", skv_status_str(rc));
    return SKV_OK;
}
