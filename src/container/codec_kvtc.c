/* Codec kvtc (11) of .skv sessions: tokens + transform-coded KV (kvtc.h, docs/format.md
 * section 2.8, docs/kvtc.md). The payload:
 *     SKVC sub-header (32 bytes) | token frame (codec tokens payload) | kvtc stream
 * Restored without the model, like pred, through the shared KV paths (seg_view.kvh holds
 * the geometry). The stream names its calibration by id; the encoder takes the
 * calibration's image (skv_encoder_params.kvtc_cal), a restore the session's
 * (skv_session_set_kvtc_cal). Every segment names the same calibration. */
#include "container/codecs.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVTC_SUB 32
#define KVTC_DEFAULT_STEP 1.0f

static const uint8_t sub_magic[4] = {'S', 'K', 'V', 'C'};

/* ---- the writer's spec --------------------------------------------------------------- */

/* One item of the spec (skv_codec_spec_items) into the skv_kvtc_params u. */
static int kvtc_item(void *u, const char *name, const char *val)
{
    skv_kvtc_params *p = u;
    char *end = NULL;
    if (!val) {
        if (!strcmp(name, "ramp")) p->ramp = 1;
        else if (!strcmp(name, "none")) p->predictor = SKV_KVTC_NONE;
        else if (!strcmp(name, "tok")) p->predictor = SKV_KVTC_TOK;
        else return 1;
        return 0;
    }
    float v = strtof(val, &end);
    if (end == val || *end || !(v > 0.0f && v <= 1e6f)) return 1;
    if (!strcmp(name, "step")) p->step[0] = p->step[1] = v;
    else if (!strcmp(name, "kstep")) p->step[0] = v;
    else if (!strcmp(name, "vstep")) p->step[1] = v;
    else if (!strcmp(name, "theta")) p->theta = v;
    else return 1;
    return 0;
}

/* "[none|tok][,ramp][,step=S][,kstep=S][,vstep=S][,theta=X]" -> p; NULL or "": tok,ramp,step=1. */
int skv_codec_kvtc_spec(const char *spec, skv_kvtc_params *p)
{
    *p = (skv_kvtc_params){.predictor = SKV_KVTC_TOK, .step = {KVTC_DEFAULT_STEP, KVTC_DEFAULT_STEP}};
    if (!spec || !*spec) {
        p->ramp = 1;
        return SKV_OK;
    }
    return skv_codec_spec_items(spec, kvtc_item, p);
}

/* ---- the encoder --------------------------------------------------------------------- */

static int cal_geometry_fail(skv_err *err, const skv_kvtc_calib *c, const char *what, int L, int H, int d)
{
    uint32_t cl, ch, cd;
    skv_kvtc_calib_dims(c, &cl, &ch, &cd);
    return skv_fail(err, SKV_ERR_MISMATCH,
                    "the calibration kvtc-%016llx.cal is for %u layers x %u KV heads x head_dim %u, %s has %d x %d x %d",
                    (unsigned long long)skv_kvtc_calib_id(c), cl, ch, cd, what, L, H, d);
}

static int geometry_is(const skv_kvtc_calib *c, uint32_t L, uint32_t H, uint32_t d)
{
    uint32_t cl, ch, cd;
    skv_kvtc_calib_dims(c, &cl, &ch, &cd);
    return cl == L && ch == H && cd == d;
}

int skv_codec_kvtc_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err)
{
    skv_err sub = {0};
    if (skv_codec_kvtc_spec(p->kv_quant, &st->tcp))
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "codec kvtc: kv_quant must be [none|tok][,ramp][,step=S][,kstep=S][,vstep=S][,theta=X], not '%s'",
                        p->kv_quant);
    if (!p->kvtc_cal || !p->kvtc_cal_bytes)
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "codec kvtc needs a calibration (kvtc_cal: the bytes of a kvtc-<id>.cal file, "
                        "`seqkv kvtc-calib` writes one)");
    int rc = skv_kvtc_calib_load(p->kvtc_cal, p->kvtc_cal_bytes, &st->tc, &sub);
    if (rc) return skv_fail(err, rc, "codec kvtc: %s", sub.msg);
    if (!geometry_is(st->tc, (uint32_t)mi->n_layer, (uint32_t)mi->n_head_kv, (uint32_t)mi->head_dim))
        return cal_geometry_fail(err, st->tc, "the model", mi->n_layer, mi->n_head_kv, mi->head_dim);
    return SKV_OK;
}

/* sum |x - x~|^2 / sum |x|^2 of K (kind 0) and V over the canonical KV (block: one
 * (layer, kind) of n_head_kv series, `block` floats). */
static void rel_mse(const float *kv, const float *deq, size_t n_lk, size_t block, float out[2])
{
    double e[2] = {0, 0}, x[2] = {0, 0};
    for (size_t lk = 0; lk < n_lk; lk++)
        for (size_t i = lk * block; i < (lk + 1) * block; i++) {
            double dv = (double)kv[i] - (double)deq[i];
            e[lk & 1] += dv * dv;
            x[lk & 1] += (double)kv[i] * (double)kv[i];
        }
    for (int k = 0; k < 2; k++) out[k] = x[k] > 0.0 ? (float)(e[k] / x[k]) : 0.0f;
}

static void sub_write(uint8_t *p, uint64_t tokens_bytes, const float mse[2])
{
    memset(p, 0, KVTC_SUB);
    memcpy(p, sub_magic, 4);
    skv_wr16(p + 4, KVTC_SUB);
    skv_wr64(p + 8, tokens_bytes);
    skv_wrf32(p + 16, mse[0]), skv_wrf32(p + 20, mse[1]);
}

/* The payload (sub-header, the token frame tframe[0..tlen), the stream) into x->owned. */
static int kvtc_payload(skv_codec_seg *x, const float *kv, float *deq, size_t nf, size_t tlen)
{
    const skv_codec_state *st = x->st;
    skv_kvtc_params p = st->tcp;
    uint8_t *body = NULL;
    size_t blen = 0;
    float mse[2];
    p.tokens = x->tok, p.pos0 = 0;
    int rc = skv_kvtc_encode(&p, st->tc, kv, x->n, &body, &blen, deq);
    if (!rc) rc = skv_digest_f32(deq, nf, x->digest);
    if (!rc && !(x->owned = malloc(KVTC_SUB + tlen + blen))) rc = SKV_ERR_NOMEM;
    if (!rc) {
        rel_mse(kv, deq, (size_t)x->mi->n_layer * 2, nf / ((size_t)x->mi->n_layer * 2), mse);
        sub_write(x->owned, tlen, mse);
        memcpy(x->owned + KVTC_SUB, *x->buf, tlen);
        memcpy(x->owned + KVTC_SUB + tlen, body, blen);
        x->payload = x->owned, x->len = KVTC_SUB + tlen + blen;
    }
    free(body);
    return rc;
}

int skv_codec_kvtc_encode(skv_codec_seg *x)
{
    const skv_model_info *mi = x->mi;
    size_t tlen = 0, nf = (size_t)mi->n_layer * 2 * (size_t)mi->n_head_kv * x->n * (size_t)mi->head_dim;
    int rc = skv_codec_tokens_frame(x, &tlen);
    if (rc) return rc;
    float *kv = malloc(nf * sizeof *kv), *deq = malloc(nf * sizeof *deq);
    rc = kv && deq ? skv_ctx_kv_read(x->ctx, 0, (int)x->n, kv) : SKV_ERR_NOMEM;
    if (!rc) rc = kvtc_payload(x, kv, deq, nf, tlen);
    free(kv), free(deq);
    if (rc == SKV_ERR_NOMEM) return skv_fail(x->err, rc, "out of memory");
    if (rc) return skv_fail(x->err, rc, "the KV cannot be transform-coded (non-finite values, or a step too small for them)");
    return SKV_OK;
}

/* ---- the reader ---------------------------------------------------------------------- */

static int seg_bad(skv_err *err, uint32_t i, const char *what)
{
    char msg[240];
    snprintf(msg, sizeof msg, "segment %u: %.199s", i, what);
    return skv_session_bad(err, msg);
}

/* The stream's geometry (bytes 16..28 of its header, docs/kvtc.md) within the reader's limits. */
static int stream_geometry(const uint8_t *h, skv_kvc_header *kvh)
{
    uint32_t L = skv_rd32(h + 16), H = skv_rd32(h + 20), d = skv_rd32(h + 24);
    if (!L || !H || !d || d > SKV_KVTC_MAX_D || L > SKV_KVTC_MAX_SERIES || H > SKV_KVTC_MAX_SERIES / 2 / L) return 0;
    memset(kvh, 0, sizeof *kvh);
    kvh->n_layer = L, kvh->n_head_kv = H, kvh->head_dim = d;
    return 1;
}

/* Segment i's sub-header and stream header (checksum included) into segs[i]. */
static int check_one(skv_session *s, uint32_t i, skv_err *err)
{
    seg_view *g = &s->segs[i];
    const uint8_t *p = g->payload;
    skv_err sub = {0};
    size_t n = 0;
    if (g->payload_bytes < KVTC_SUB + SKV_KVTC_HDR || memcmp(p, sub_magic, 4) || skv_rd16(p + 4) != KVTC_SUB ||
        skv_rd16(p + 6) || skv_rd64(p + 24))
        return seg_bad(err, i, "bad kvtc sub-header (magic, size or reserved bytes)");
    uint64_t tb = skv_rd64(p + 8);
    float m0 = skv_rdf32(p + 16), m1 = skv_rdf32(p + 20);
    if (tb > g->payload_bytes - KVTC_SUB - SKV_KVTC_HDR) return seg_bad(err, i, "kvtc token frame runs past the payload");
    if (!(m0 >= 0.0f) || !(m1 >= 0.0f) || isinf(m0) || isinf(m1)) return seg_bad(err, i, "quality field is not finite");
    const uint8_t *st = p + KVTC_SUB + tb;
    size_t slen = (size_t)(g->payload_bytes - KVTC_SUB - tb);
    if (skv_kvtc_peek(st, slen, &n, &g->cal_id, &sub)) return seg_bad(err, i, sub.msg);
    if (n != g->n_tokens || skv_rd32(st + 40)) return seg_bad(err, i, "the kvtc stream's positions are not the segment's");
    if (!stream_geometry(st, &g->kvh)) return seg_bad(err, i, "kvtc geometry out of range");
    g->kvh.tokens_bytes = tb;
    g->kvh.rel_mse[0] = m0, g->kvh.rel_mse[1] = m1;
    g->kvtc_pred = st[5];
    return SKV_OK;
}

int skv_codec_kvtc_check(skv_session *s, uint32_t i, skv_err *err)
{
    int rc = check_one(s, i, err);
    if (rc || !i) return rc;
    const seg_view *a = &s->segs[0], *g = &s->segs[i];
    if (g->cal_id != a->cal_id || g->kvh.n_layer != a->kvh.n_layer || g->kvh.n_head_kv != a->kvh.n_head_kv ||
        g->kvh.head_dim != a->kvh.head_dim)
        return skv_session_bad(err, "segments disagree on the kvtc calibration or geometry");
    return SKV_OK;
}

static int need_cal(skv_err *err, uint64_t id)
{
    return skv_fail(err, SKV_ERR_INVALID_ARG,
                    "codec kvtc: this session needs its calibration kvtc-%016llx.cal (skv_session_set_kvtc_cal; "
                    "seqkv: --kvtc-cal)",
                    (unsigned long long)id);
}

int skv_codec_kvtc_decode(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                          int32_t *tok, skv_err *err)
{
    seg_view t = *g;
    skv_err sub = {0};
    (void)model_free; /* the decode never runs the model */
    if (!s->tc) return need_cal(err, g->cal_id);
    t.payload = g->payload + KVTC_SUB;
    t.payload_bytes = g->kvh.tokens_bytes;
    int rc = skv_session_decode_tokens(&t, s->info.n_vocab, tok, err);
    if (rc) return rc;
    const uint8_t *st = t.payload + t.payload_bytes;
    rc = skv_kvtc_decode(st, (size_t)(g->payload_bytes - KVTC_SUB - t.payload_bytes), s->tc, tok, kv, kv_cap, &sub);
    if (rc == SKV_ERR_FORMAT) return skv_session_bad(err, sub.msg);
    if (rc) return skv_fail(err, rc, "%s", sub.msg);
    return SKV_OK;
}

/* "tc:" and the predictor name the "scheme"; the KV bytes are the sub-header and the stream. */
void skv_codec_kvtc_kv_info(const seg_view *g, skv_session_kv_info *out)
{
    for (int k = 0; k < 2; k++)
        snprintf(out->scheme[k], sizeof out->scheme[k], "%s", g->kvtc_pred == SKV_KVTC_TOK ? "tc:tok" : "tc:none");
    out->kv_bytes = g->payload_bytes - g->kvh.tokens_bytes;
    out->position_bytes = (out->kv_bytes + g->n_tokens - 1) / g->n_tokens;
}

/* ---- the session's calibration (public) ---------------------------------------------- */

/* SKV_OK when s is a kvtc session (its id into *id: 0 without segments). */
int skv_codec_kvtc_cal_of(const skv_session *s, uint64_t *id, skv_err *err)
{
    if (!(skv_codec_flags(s->info.codec) & SKV_CODEC_F_CAL))
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "codec %s takes no kvtc calibration", skv_codec_name(s->info.codec));
    *id = s->info.n_segments ? s->segs[0].cal_id : 0;
    return SKV_OK;
}

int skv_codec_kvtc_attach(skv_session *s, const void *image, size_t len, skv_err *err)
{
    skv_kvtc_calib *c = NULL;
    skv_err sub = {0};
    uint64_t want = 0;
    int rc = skv_codec_kvtc_cal_of(s, &want, err);
    if (rc) return rc;
    if ((rc = skv_kvtc_calib_load(image, len, &c, &sub))) return skv_fail(err, rc, "%s", sub.msg);
    const skv_kvc_header *h = &s->segs[0].kvh;
    if (s->info.n_segments && skv_kvtc_calib_id(c) != want)
        rc = skv_fail(err, SKV_ERR_MISMATCH, "this session needs the calibration kvtc-%016llx.cal, not kvtc-%016llx.cal",
                      (unsigned long long)want, (unsigned long long)skv_kvtc_calib_id(c));
    else if (s->info.n_segments && !geometry_is(c, h->n_layer, h->n_head_kv, h->head_dim))
        rc = cal_geometry_fail(err, c, "the session", (int)h->n_layer, (int)h->n_head_kv, (int)h->head_dim);
    if (rc) {
        skv_kvtc_calib_free(c);
        return rc;
    }
    skv_kvtc_calib_free(s->tc);
    s->tc = c;
    return SKV_OK;
}
