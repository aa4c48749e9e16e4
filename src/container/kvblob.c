/* Engine-free KV blobs (docs/kvblob.md): any engine's KV, given as canonical f32
 * [layer][kind][kv_head][position][head_dim] with its geometry, stored with a per-vector
 * scheme (kvcodec.h) or the model-free predictive coder (kvpred.h), and decoded without a
 * model. The blob is a 24-byte frame around the same sub-headers and bodies the .skv
 * codecs kvq and pred use (their token frame empty):
 *     "SKVB" | u16 version 1 | u8 kind (1 per-vector, 2 predictive) | u8 0 | u32 n_pos |
 *     u32 0 | u64 XXH3-64 of everything after these 24 bytes | sub-header | body
 * Every field is checked before it is used: a hostile blob gets SKV_ERR_FORMAT with a
 * message, never a read outside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "core/fpguard.h"

#include "container/kvcodec.h"
#include "container/kvpred.h"
#include "container/session_int.h"
#include "core/util.h"
#include "quant/kvquant.h"
#include "quant/quant.h"

#define BLOB_HDR 24
#define BLOB_VERSION 1
#define BLOB_MAX_POS (1u << 24) /* positions a reader accepts */
enum { KIND_QUANT = 1, KIND_PRED = 2 };

static int blob_bad(skv_err *err, const char *what)
{
    return skv_fail(err, SKV_ERR_FORMAT, "not a valid KV blob: %s", what);
}

static int geometry_ok(const skv_kv_geometry *g)
{
    return g && g->n_layer >= 1 && g->n_layer <= SKV_KVC_MAX_LAYERS && g->n_head_kv >= 1 &&
           g->n_head_kv <= SKV_KVC_MAX_HEADS && g->head_dim >= 1 && g->head_dim <= 65536;
}

/* Writes the frame in front of body[BLOB_HDR..size). */
static void frame_write(uint8_t *b, size_t size, int kind, size_t n_pos)
{
    memcpy(b, "SKVB", 4);
    skv_wr16(b + 4, BLOB_VERSION);
    b[6] = (uint8_t)kind;
    b[7] = 0;
    skv_wr32(b + 8, (uint32_t)n_pos);
    skv_wr32(b + 12, 0);
    skv_wr64(b + 16, XXH3_64bits(b + BLOB_HDR, size - BLOB_HDR));
}

/* ---- per-vector schemes ---- */

static int encode_quant(const char *spec, const skv_kv_geometry *g, const float *kv, size_t n_pos, uint8_t **out,
                        size_t *size, skv_err *err)
{
    skv_kvq_spec sp;
    skv_kvcodec *c = NULL;
    double mse[2] = {0, 0};
    skv_err sub = {0};
    if (skv_kvquant_parse(spec, &sp, &sub))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "scheme '%s': %s (or 'pred[:SPEC]')", spec, sub.msg);
    if (sp.scheme[0] < 0 || sp.scheme[1] < 0 || sp.keep_first || sp.keep_last || sp.window)
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "scheme '%s': give both kinds (SCHEME or k=SCHEME,v=SCHEME[,seed=S]); keep-first, "
                        "keep-last and window do not apply to a stored block",
                        spec);
    int rc = skv_kvcodec_create(&c, sp.scheme, sp.seed, (uint32_t)g->n_layer, (uint32_t)g->n_head_kv,
                                (uint32_t)g->head_dim);
    if (rc)
        return skv_fail(err, rc, "scheme '%s' cannot code vectors of head_dim %d: %s", spec, g->head_dim,
                        skv_status_str(rc));
    size_t pb = skv_kvcodec_position_bytes(c), kvb = pb * n_pos;
    uint8_t *b = (pb && kvb / pb == n_pos) ? malloc(BLOB_HDR + SKV_KVC_HDR + kvb) : NULL;
    rc = b ? skv_kvcodec_encode(c, kv, n_pos, b + BLOB_HDR + SKV_KVC_HDR, kvb, NULL, mse) : SKV_ERR_NOMEM;
    skv_kvcodec_free(c);
    if (rc) {
        free(b);
        return skv_fail(err, rc, "the KV cannot be stored as '%s' (non-finite values or an fp16 overflow): %s",
                        spec, skv_status_str(rc));
    }
    skv_kvc_header h = {.scheme = {sp.scheme[0], sp.scheme[1]}, .n_layer = (uint32_t)g->n_layer,
                        .n_head_kv = (uint32_t)g->n_head_kv, .head_dim = (uint32_t)g->head_dim, .seed = sp.seed,
                        .kv_bytes = kvb, .rel_mse = {(float)mse[0], (float)mse[1]}};
    skv_kvc_header_write(&h, b + BLOB_HDR);
    *size = BLOB_HDR + SKV_KVC_HDR + kvb;
    frame_write(b, *size, KIND_QUANT, n_pos);
    *out = b;
    return SKV_OK;
}

/* ---- the predictive coder ---- */

static int pred_params(const char *spec, skv_kvp_params *p, skv_err *err)
{
    int want_sur = 0;
    const char *s = spec[4] == ':' ? spec + 5 : "lpc2,step=0.05";
    if (skv_session_pred_spec(s, p, &want_sur) || want_sur || p->layer0 || p->kl > 0.0f ||
        p->predictor == SKV_KVP_TOK)
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "scheme '%s': pred takes pred:PREDICTOR[,ramp][,rot][,step=S][,kstep=S][,vstep=S][,rate=BITS] "
                        "with PREDICTOR none, delta, lpc or lpc2 (tok, surprisal, layer0 and kl need a model)",
                        spec);
    return SKV_OK;
}

static int encode_pred(const char *spec, const skv_kv_geometry *g, const float *kv, size_t n_pos, uint8_t **out,
                       size_t *size, skv_err *err)
{
    skv_kvp_params p;
    skv_kvp_header h;
    uint8_t *body = NULL, *b;
    size_t blen = 0;
    int rc = pred_params(spec, &p, err);
    if (rc) return rc;
    rc = skv_kvp_encode(&p, (uint32_t)g->n_layer, (uint32_t)g->n_head_kv, (uint32_t)g->head_dim, kv, n_pos, &body,
                        &blen, &h, NULL);
    if (rc)
        return skv_fail(err, rc, "the KV cannot be coded as '%s' (non-finite values, a residual too large, "
                        "or an unsupported geometry): %s", spec, skv_status_str(rc));
    if (!(b = malloc(BLOB_HDR + SKV_KVP_HDR + blen))) {
        free(body);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    h.tokens_bytes = 0;
    skv_kvp_header_write(&h, b + BLOB_HDR);
    memcpy(b + BLOB_HDR + SKV_KVP_HDR, body, blen);
    free(body);
    *size = BLOB_HDR + SKV_KVP_HDR + blen;
    frame_write(b, *size, KIND_PRED, n_pos);
    *out = b;
    return SKV_OK;
}

static int skv_kv_encode_e(const char *scheme, const skv_kv_geometry *g, const float *kv, size_t n_pos, uint8_t **out,
                  size_t *size, skv_err *err)
{
    if (!scheme || !kv || !out || !size) return skv_fail(err, SKV_ERR_INVALID_ARG, "NULL argument");
    *out = NULL;
    *size = 0;
    if (!geometry_ok(g))
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "geometry out of range: layers 1..%d, KV heads 1..%d, head_dim 1..65536", SKV_KVC_MAX_LAYERS,
                        SKV_KVC_MAX_HEADS);
    if (n_pos < 1 || n_pos > BLOB_MAX_POS)
        return skv_fail(err, SKV_ERR_RANGE, "%zu positions: a blob holds 1..%u", n_pos, BLOB_MAX_POS);
    if (!strncmp(scheme, "pred", 4) && (!scheme[4] || scheme[4] == ':'))
        return encode_pred(scheme, g, kv, n_pos, out, size, err);
    return encode_quant(scheme, g, kv, n_pos, out, size, err);
}

int skv_kv_encode(const char *scheme, const skv_kv_geometry *g, const float *kv, size_t n_pos, uint8_t **out,
                  size_t *size, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kv_encode_e(scheme, g, kv, n_pos, out, size, &e), err, errcap);
}

/* ---- reading ---- */

/* The parsed blob: frame, then the sub-header of its kind. */
typedef struct blob_view {
    int kind;
    uint32_t n_pos;
    const uint8_t *sub;
    size_t sub_size;
    skv_kvc_header kvh;
    skv_kvp_header kph;
} blob_view;

static int blob_parse(const void *data, size_t size, blob_view *v, skv_err *err)
{
    const uint8_t *p = data;
    skv_err sub = {0};
    if (!data || size < BLOB_HDR || memcmp(p, "SKVB", 4)) return blob_bad(err, "no SKVB magic (truncated?)");
    if (skv_rd16(p + 4) != BLOB_VERSION)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "KV blob version %u: this build reads version %d",
                        skv_rd16(p + 4), BLOB_VERSION);
    v->kind = p[6];
    v->n_pos = skv_rd32(p + 8);
    if ((v->kind != KIND_QUANT && v->kind != KIND_PRED) || p[7] || skv_rd32(p + 12))
        return blob_bad(err, "unknown kind or non-zero reserved bytes");
    if (v->n_pos < 1 || v->n_pos > BLOB_MAX_POS) return blob_bad(err, "position count out of range");
    if (skv_rd64(p + 16) != XXH3_64bits(p + BLOB_HDR, size - BLOB_HDR))
        return skv_fail(err, SKV_ERR_MISMATCH, "KV blob checksum mismatch: the bytes were damaged");
    v->sub = p + BLOB_HDR;
    v->sub_size = size - BLOB_HDR;
    int rc = v->kind == KIND_QUANT ? skv_kvc_header_parse(v->sub, v->sub_size, v->n_pos, &v->kvh, &sub)
                                   : skv_kvp_header_parse(v->sub, v->sub_size, &v->kph, &sub);
    if (rc) return blob_bad(err, sub.msg);
    if (v->kind == KIND_QUANT ? v->kvh.tokens_bytes != 0 : (v->kph.tokens_bytes != 0 || (v->kph.flags & 2) != 0 ||
                                                             v->kph.predictor == SKV_KVP_TOK))
        return blob_bad(err, "a token frame or a model-dependent predictor inside a model-free blob");
    return SKV_OK;
}

static int skv_kv_blob_inspect_e(const void *data, size_t size, skv_kv_blob_info *info, skv_err *err)
{
    blob_view v;
    if (!info) return skv_fail(err, SKV_ERR_INVALID_ARG, "NULL argument");
    int rc = blob_parse(data, size, &v, err);
    if (rc) return rc;
    memset(info, 0, sizeof *info);
    info->n_pos = v.n_pos;
    if (v.kind == KIND_QUANT) {
        info->geometry = (skv_kv_geometry){(int)v.kvh.n_layer, (int)v.kvh.n_head_kv, (int)v.kvh.head_dim};
        for (int k = 0; k < 2; k++) {
            snprintf(info->scheme[k], sizeof info->scheme[k], "%s", skv_quant_name(v.kvh.scheme[k]));
            info->rel_mse[k] = v.kvh.rel_mse[k];
        }
        info->seed = v.kvh.seed;
        return SKV_OK;
    }
    info->geometry = (skv_kv_geometry){(int)v.kph.n_layer, (int)v.kph.n_head_kv, (int)v.kph.head_dim};
    for (int k = 0; k < 2; k++) {
        snprintf(info->scheme[k], sizeof info->scheme[k], "pred");
        info->rel_mse[k] = v.kph.rel_mse[k];
    }
    snprintf(info->predictor, sizeof info->predictor, "%s", skv_kvp_pred_name(v.kph.predictor));
    return SKV_OK;
}

int skv_kv_blob_inspect(const void *data, size_t size, skv_kv_blob_info *info, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kv_blob_inspect_e(data, size, info, &e), err, errcap);
}

static int skv_kv_decode_e(const void *data, size_t size, float *kv, size_t kv_cap, skv_err *err)
{
    blob_view v;
    skv_kvcodec *c = NULL;
    int rc = blob_parse(data, size, &v, err);
    if (rc) return rc;
    if (!kv) return skv_fail(err, SKV_ERR_INVALID_ARG, "NULL output");
    const uint32_t *g = v.kind == KIND_QUANT ? &v.kvh.n_layer : &v.kph.n_layer;
    size_t need = (size_t)g[0] * 2 * g[1] * g[2] * v.n_pos;
    if (kv_cap < need)
        return skv_fail(err, SKV_ERR_RANGE, "output holds %zu floats, the blob decodes to %zu", kv_cap, need);
    if (v.kind == KIND_PRED) {
        rc = skv_kvp_decode(&v.kph, v.sub + SKV_KVP_HDR, v.sub_size - SKV_KVP_HDR, v.n_pos, NULL, kv, kv_cap);
    } else {
        if ((rc = skv_kvc_check_budget(&v.kvh, err))) return rc;
        if (!(rc = skv_kvcodec_create(&c, v.kvh.scheme, v.kvh.seed, v.kvh.n_layer, v.kvh.n_head_kv, v.kvh.head_dim)))
            rc = skv_kvcodec_decode(c, v.sub + SKV_KVC_HDR, (size_t)v.kvh.kv_bytes, v.n_pos, kv, kv_cap);
        skv_kvcodec_free(c);
    }
    if (rc == SKV_ERR_FORMAT) return blob_bad(err, "the KV body does not decode");
    if (rc) return skv_fail(err, rc, "KV decoding failed: %s", skv_status_str(rc));
    return SKV_OK;
}

int skv_kv_decode(const void *data, size_t size, float *kv, size_t kv_cap, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kv_decode_e(data, size, kv, kv_cap, &e), err, errcap);
}
