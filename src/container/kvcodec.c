/* Quantized KV blocks and their sub-header (kvcodec.h, docs/format.md section 2.3).
 *
 * Sub-header (SKV_KVC_HDR = 56 bytes, little-endian):
 *   0 "SKVQ" | 4 u16 size (56) | 6 u8 scheme K | 7 u8 scheme V | 8 u32 n_layer
 *   12 u32 n_head_kv | 16 u32 head_dim | 20 u32 reserved 0 | 24 u64 seed
 *   32 u64 tokens_bytes | 40 u64 kv_bytes | 48 f32 rel_mse K | 52 f32 rel_mse V */
#include "container/kvcodec.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/kvquant.h"
#include "quant/quant.h"
#include "seqkv.h"
#include "core/util.h"

#define KVC_MAGIC "SKVQ"

/* Quantizers are built when first needed, never all at once up front: a tq*p quantizer
 * holds a head_dim^2 QJL matrix (4 MiB at head_dim 1024), so the eager tables of a
 * header's 4096 declared layers would be 32 GiB. The encoder keeps what it builds (one
 * model, many segments); a decoder builds each one for its block and frees it. */
struct skv_kvcodec {
    int scheme[2];
    uint32_t n_layer, n_head_kv, head_dim;
    uint64_t seed;
    size_t vec_bytes[2];
    skv_quant_ctx **qc; /* [n_layer][2], NULL until built (encode) */
};

void skv_kvc_header_write(const skv_kvc_header *h, uint8_t *out)
{
    memset(out, 0, SKV_KVC_HDR);
    memcpy(out, KVC_MAGIC, 4);
    skv_wr16(out + 4, SKV_KVC_HDR);
    out[6] = (uint8_t)h->scheme[0];
    out[7] = (uint8_t)h->scheme[1];
    skv_wr32(out + 8, h->n_layer);
    skv_wr32(out + 12, h->n_head_kv);
    skv_wr32(out + 16, h->head_dim);
    skv_wr64(out + 24, h->seed);
    skv_wr64(out + 32, h->tokens_bytes);
    skv_wr64(out + 40, h->kv_bytes);
    skv_wrf32(out + 48, h->rel_mse[0]);
    skv_wrf32(out + 52, h->rel_mse[1]);
}

size_t skv_kvc_position_bytes(const int scheme[2], uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim)
{
    size_t vec = 0, r;
    for (int k = 0; k < 2; k++) {
        size_t b = skv_quant_bytes(scheme[k], head_dim);
        if (!b) return 0;
        vec += b;
    }
    if (!skv_mul_ok(vec, n_head_kv, &r) || !skv_mul_ok(r, n_layer, &r)) return 0;
    return r;
}

static int hdr_bad(skv_err *err, const char *what)
{
    return skv_fail(err, SKV_ERR_FORMAT, "KV sub-header: %s", what);
}

/* Geometry and schemes of a parsed header (no sizes). */
static int check_shape(const skv_kvc_header *h, skv_err *err)
{
    if (h->n_layer < 1 || h->n_layer > SKV_KVC_MAX_LAYERS || h->n_head_kv < 1 || h->n_head_kv > SKV_KVC_MAX_HEADS ||
        h->head_dim < 1 || h->head_dim > SKV_QUANT_MAX_D)
        return hdr_bad(err, "geometry (layers, KV heads, head_dim) out of range");
    for (int k = 0; k < 2; k++)
        if (!skv_quant_name(h->scheme[k]) || skv_quant_check(h->scheme[k], h->head_dim) != SKV_OK)
            return hdr_bad(err, "unknown scheme, or one that does not support head_dim");
    return SKV_OK;
}

int skv_kvc_header_parse(const uint8_t *p, size_t size, uint32_t n_pos, skv_kvc_header *h, skv_err *err)
{
    size_t pos_bytes, kv;
    if (size < SKV_KVC_HDR || memcmp(p, KVC_MAGIC, 4)) return hdr_bad(err, "missing or truncated");
    if (skv_rd16(p + 4) != SKV_KVC_HDR || skv_rd32(p + 20)) return hdr_bad(err, "unexpected size or reserved bytes");
    h->scheme[0] = p[6];
    h->scheme[1] = p[7];
    h->n_layer = skv_rd32(p + 8);
    h->n_head_kv = skv_rd32(p + 12);
    h->head_dim = skv_rd32(p + 16);
    h->seed = skv_rd64(p + 24);
    h->tokens_bytes = skv_rd64(p + 32);
    h->kv_bytes = skv_rd64(p + 40);
    h->rel_mse[0] = skv_rdf32(p + 48);
    h->rel_mse[1] = skv_rdf32(p + 52);
    int rc = check_shape(h, err);
    if (rc) return rc;
    for (int k = 0; k < 2; k++)
        if (!(h->rel_mse[k] >= 0.0f) || isinf(h->rel_mse[k])) return hdr_bad(err, "quality field is not a finite number >= 0");
    pos_bytes = skv_kvc_position_bytes(h->scheme, h->n_layer, h->n_head_kv, h->head_dim);
    if (!pos_bytes || !skv_mul_ok(pos_bytes, n_pos, &kv) || h->kv_bytes != kv)
        return hdr_bad(err, "KV size does not match positions x bytes per position");
    if (h->tokens_bytes > size - SKV_KVC_HDR || h->kv_bytes != size - SKV_KVC_HDR - h->tokens_bytes)
        return hdr_bad(err, "token and KV sizes do not add up to the payload");
    return SKV_OK;
}

void skv_kvcodec_free(skv_kvcodec *c)
{
    if (!c) return;
    if (c->qc)
        for (size_t i = 0; i < 2 * (size_t)c->n_layer; i++) skv_quant_ctx_free(c->qc[i]);
    free(c->qc);
    free(c);
}

int skv_kvcodec_create(skv_kvcodec **out, const int scheme[2], uint64_t seed, uint32_t n_layer, uint32_t n_head_kv,
                       uint32_t head_dim)
{
    skv_kvcodec *c;
    skv_kvc_header h = {.scheme = {scheme ? scheme[0] : -1, scheme ? scheme[1] : -1},
                        .n_layer = n_layer, .n_head_kv = n_head_kv, .head_dim = head_dim};
    int rc;
    if (!out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if (!scheme || check_shape(&h, NULL)) {
        for (int k = 0; scheme && k < 2; k++)
            if (skv_quant_name(scheme[k]) && (rc = skv_quant_check(scheme[k], head_dim)) == SKV_ERR_RANGE) return rc;
        return SKV_ERR_INVALID_ARG;
    }
    if (!(c = calloc(1, sizeof *c)) || !(c->qc = calloc(2 * (size_t)n_layer, sizeof *c->qc))) {
        free(c);
        return SKV_ERR_NOMEM;
    }
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->seed = seed;
    for (int k = 0; k < 2; k++) {
        c->scheme[k] = scheme[k];
        c->vec_bytes[k] = skv_quant_bytes(scheme[k], head_dim);
    }
    *out = c;
    return SKV_OK;
}

/* Table entries (floats and words) building the quantizer of one scheme costs: the QJL
 * matrix of tq*p (head_dim^2 Gaussian draws, the dominant cost) and the rotation. */
static uint64_t setup_entries(int scheme, uint32_t d)
{
    uint64_t rot = skv_quant_tq_bits(scheme) ? (uint64_t)8 * d : 0; /* signs and permutations: <= 5 d */
    return rot + (skv_quant_is_prod(scheme) ? (uint64_t)d * d : 0);
}

uint64_t skv_kvc_setup_entries(const int scheme[2], uint32_t n_layer, uint32_t head_dim)
{
    return (uint64_t)n_layer * (setup_entries(scheme[0], head_dim) + setup_entries(scheme[1], head_dim));
}

int skv_kvc_check_budget(const skv_kvc_header *h, skv_err *err)
{
    uint64_t need = skv_kvc_setup_entries(h->scheme, h->n_layer, h->head_dim);
    uint64_t per = h->kv_bytes > UINT64_MAX / SKV_KVC_SETUP_PER_BYTE ? UINT64_MAX : h->kv_bytes * SKV_KVC_SETUP_PER_BYTE;
    uint64_t limit = per > SKV_KVC_SETUP_FLOOR ? per : SKV_KVC_SETUP_FLOOR;
    if (need <= limit) return SKV_OK;
    return skv_fail(err, SKV_ERR_RANGE,
                    "decoding this KV without the model would build %llu quantizer table entries (%u layers of %s/%s at head_dim %u) for %llu payload bytes, above the limit of %llu: restore it with its model (skv_session_restore_segment)",
                    (unsigned long long)need, h->n_layer, skv_quant_name(h->scheme[0]), skv_quant_name(h->scheme[1]),
                    h->head_dim, (unsigned long long)h->kv_bytes, (unsigned long long)limit);
}

size_t skv_kvcodec_position_bytes(const skv_kvcodec *c)
{
    return c ? skv_kvc_position_bytes(c->scheme, c->n_layer, c->n_head_kv, c->head_dim) : 0;
}

/* Floats and bytes of n_pos positions; 0 on overflow. */
static int block_sizes(const skv_kvcodec *c, size_t n_pos, size_t *floats, size_t *bytes)
{
    size_t per = (size_t)c->n_layer * 2 * c->n_head_kv * c->head_dim;
    *bytes = skv_kvcodec_position_bytes(c);
    return *bytes && skv_mul_ok(per, n_pos, floats) && skv_mul_ok(*bytes, n_pos, bytes);
}

/* The quantizer of block i = 2 * layer + kind: the cached one, else a new one, cached
 * when keep, else returned in *tmp for the caller to free. */
static int quant_get(skv_kvcodec *c, size_t i, int keep, const skv_quant_ctx **q, skv_quant_ctx **tmp)
{
    int k = (int)(i & 1), rc;
    *tmp = NULL;
    if (!c->qc[i]) {
        if ((rc = skv_quant_ctx_create(tmp, c->scheme[k], c->head_dim, skv_kvquant_seed(c->seed, (int)(i >> 1), k))))
            return rc;
        if (keep) c->qc[i] = *tmp, *tmp = NULL;
    }
    *q = c->qc[i] ? c->qc[i] : *tmp;
    return SKV_OK;
}

/* Adds block i's squared error and signal (x: the exact floats, y: their round trip). */
static void add_error(const float *x, const float *y, size_t n, double *err2, double *sig2)
{
    for (size_t j = 0; j < n; j++) {
        double v = x[j], e = v - (double)y[j];
        *err2 += e * e;
        *sig2 += v * v;
    }
}

int skv_kvcodec_encode(skv_kvcodec *c, const float *kv, size_t n_pos, uint8_t *dst, size_t dst_cap, float *deq,
                       double rel_mse[2])
{
    size_t nf, nb, nvec, vf, off_f = 0, off_b = 0;
    double err2[2] = {0, 0}, sig2[2] = {0, 0};
    float *y = NULL;
    int rc = SKV_OK;
    if (!c || (n_pos && (!kv || !dst))) return SKV_ERR_INVALID_ARG;
    if (!block_sizes(c, n_pos, &nf, &nb) || dst_cap < nb) return SKV_ERR_RANGE;
    nvec = (size_t)c->n_head_kv * n_pos; /* fits: block_sizes checked n_pos * every head's floats */
    vf = nvec * c->head_dim;
    if (!deq && rel_mse && n_pos && !(y = malloc(vf * sizeof *y))) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < 2 * (size_t)c->n_layer && !rc; i++) {
        const skv_quant_ctx *q;
        skv_quant_ctx *tmp;
        size_t bb = nvec * c->vec_bytes[i & 1];
        float *out = deq ? deq + off_f : y;
        if ((rc = quant_get(c, i, 1, &q, &tmp))) break;
        rc = skv_quant_ctx_encode(q, kv + off_f, nvec, dst + off_b, bb);
        if (!rc && out) rc = skv_quant_ctx_decode(q, dst + off_b, bb, nvec, out, vf);
        if (!rc && rel_mse) add_error(kv + off_f, out, vf, &err2[i & 1], &sig2[i & 1]);
        off_f += vf;
        off_b += bb;
    }
    free(y);
    for (int k = 0; rel_mse && k < 2; k++) rel_mse[k] = sig2[k] > 0 ? err2[k] / sig2[k] : 0.0;
    return rc;
}

int skv_kvcodec_decode(skv_kvcodec *c, const uint8_t *src, size_t src_size, size_t n_pos, float *kv, size_t kv_cap)
{
    size_t nf, nb, nvec, vf, off_f = 0, off_b = 0;
    int rc = SKV_OK;
    if (!c || (n_pos && (!kv || !src))) return SKV_ERR_INVALID_ARG;
    if (!block_sizes(c, n_pos, &nf, &nb) || kv_cap < nf) return SKV_ERR_RANGE;
    nvec = (size_t)c->n_head_kv * n_pos;
    vf = nvec * c->head_dim;
    if (src_size != nb) return SKV_ERR_FORMAT;
    for (size_t i = 0; i < 2 * (size_t)c->n_layer && !rc; i++) {
        const skv_quant_ctx *q;
        skv_quant_ctx *tmp;
        size_t bb = nvec * c->vec_bytes[i & 1];
        if ((rc = quant_get(c, i, 0, &q, &tmp))) break;
        rc = skv_quant_ctx_decode(q, src + off_b, bb, nvec, kv + off_f, vf);
        skv_quant_ctx_free(tmp);
        off_f += vf;
        off_b += bb;
    }
    return rc;
}
