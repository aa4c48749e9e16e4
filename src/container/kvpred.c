/* kvpred: sub-header, side information, predictor fitting and the encode / decode drivers
 * (kvpred.h; byte layout in docs/format.md section 2.5).
 *
 * Sub-header (SKV_KVP_HDR = 64 bytes, little-endian):
 *   0 "SKVP" | 4 u16 size (64) | 6 u8 predictor | 7 u8 flags | 8 u32 n_layer
 *   12 u32 n_head_kv | 16 u32 head_dim | 20 u32 reserved 0 | 24 u64 tokens_bytes
 *   32 u64 side_bytes | 40 u64 stream_bytes | 48 f32 rel_mse K | 52 f32 rel_mse V
 *   56 u64 reserved 0
 * Side: per (layer, kind) 8 bytes (f32 step, u8 pairing, 3 zero bytes); then per
 * (layer, kind, kv_head, channel) the f16 coefficients of the predictor (lpc: mu, a;
 * lpc2 and tok: mu, a, b; none, delta: nothing). */
#include "container/kvpred_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "core/util.h"
#include "seqkv.h"

#define KVP_MAGIC "SKVP"
#define KVP_MAX_LAYERS 4096

static const char *const pred_names[SKV_KVP_N_PRED] = {"none", "delta", "lpc", "lpc2", "tok"};
static const unsigned coef_count[SKV_KVP_N_PRED] = {0, 0, 2, 3, 3}; /* f16 per channel */

const char *skv_kvp_pred_name(int p) { return p >= 0 && p < SKV_KVP_N_PRED ? pred_names[p] : NULL; }

int skv_kvp_pred_parse(const char *name)
{
    for (int i = 0; name && i < SKV_KVP_N_PRED; i++)
        if (!strcmp(name, pred_names[i])) return i;
    return -1;
}

uint64_t skv_kvp_side_bytes(int predictor, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim)
{
    uint64_t blocks = (uint64_t)n_layer * 2, ch = (uint64_t)n_head_kv * head_dim;
    if (predictor < 0 || predictor >= SKV_KVP_N_PRED || n_layer > KVP_MAX_LAYERS || ch > SKV_KVP_MAX_ROW) return 0;
    return blocks * 8 + blocks * ch * 2 * coef_count[predictor];
}

void skv_kvp_header_write(const skv_kvp_header *h, uint8_t out[SKV_KVP_HDR])
{
    memset(out, 0, SKV_KVP_HDR);
    memcpy(out, KVP_MAGIC, 4);
    skv_wr16(out + 4, SKV_KVP_HDR);
    out[6] = (uint8_t)h->predictor;
    out[7] = (uint8_t)h->flags;
    skv_wr32(out + 8, h->n_layer);
    skv_wr32(out + 12, h->n_head_kv);
    skv_wr32(out + 16, h->head_dim);
    skv_wr64(out + 24, h->tokens_bytes);
    skv_wr64(out + 32, h->side_bytes);
    skv_wr64(out + 40, h->stream_bytes);
    skv_wrf32(out + 48, h->rel_mse[0]);
    skv_wrf32(out + 52, h->rel_mse[1]);
}

static int kvp_bad(skv_err *err, const char *what)
{
    return skv_fail(err, SKV_ERR_FORMAT, "predictive KV sub-header: %s", what);
}

static int check_header(const skv_kvp_header *h, size_t size, skv_err *err)
{
    uint64_t ch = (uint64_t)h->n_head_kv * h->head_dim;
    uint32_t coded = h->n_layer - (uint32_t)((h->flags >> 1) & 1); /* layers in side and stream */
    if (h->predictor >= SKV_KVP_N_PRED || (h->flags & ~7))
        return kvp_bad(err, "unknown predictor or flags");
    if ((h->flags & 2) && h->n_layer < 2) return kvp_bad(err, "layer 0 regenerated but no other layer stored");
    if (h->n_layer < 1 || h->n_layer > KVP_MAX_LAYERS || h->n_head_kv < 1 || h->head_dim < 1 || ch > SKV_KVP_MAX_ROW)
        return kvp_bad(err, "geometry (layers, KV heads, head_dim) out of range");
    if (h->predictor == SKV_KVP_LPC2 && (h->head_dim & 1)) return kvp_bad(err, "lpc2 needs an even head_dim");
    if ((h->flags & 4) && h->head_dim > SKV_KVP_ROT_MAX_D) return kvp_bad(err, "rotated residuals need head_dim <= 4096");
    if (h->side_bytes != skv_kvp_side_bytes(h->predictor, coded, h->n_head_kv, h->head_dim))
        return kvp_bad(err, "side information size does not match the geometry");
    for (int k = 0; k < 2; k++)
        if (!(h->rel_mse[k] >= 0.0f) || isinf(h->rel_mse[k])) return kvp_bad(err, "quality field is not finite");
    uint64_t rest = size - SKV_KVP_HDR;
    if (h->tokens_bytes > rest || h->side_bytes > rest - h->tokens_bytes ||
        h->stream_bytes != rest - h->tokens_bytes - h->side_bytes)
        return kvp_bad(err, "token, side and stream sizes do not add up to the payload");
    return SKV_OK;
}

int skv_kvp_header_parse(const uint8_t *p, size_t size, skv_kvp_header *h, skv_err *err)
{
    if (size < SKV_KVP_HDR || memcmp(p, KVP_MAGIC, 4)) return kvp_bad(err, "missing or truncated");
    if (skv_rd16(p + 4) != SKV_KVP_HDR || skv_rd32(p + 20) || skv_rd64(p + 56))
        return kvp_bad(err, "unexpected size or reserved bytes");
    h->predictor = p[6];
    h->flags = p[7];
    h->n_layer = skv_rd32(p + 8);
    h->n_head_kv = skv_rd32(p + 12);
    h->head_dim = skv_rd32(p + 16);
    h->tokens_bytes = skv_rd64(p + 24);
    h->side_bytes = skv_rd64(p + 32);
    h->stream_bytes = skv_rd64(p + 40);
    h->rel_mse[0] = skv_rdf32(p + 48);
    h->rel_mse[1] = skv_rdf32(p + 52);
    return check_header(h, size, err);
}

/* ---- fitting (encoder) ---------------------------------------------------------- */

static uint32_t partner(uint32_t c, uint32_t d, int pairing)
{
    return pairing ? (c < d / 2 ? c + d / 2 : c - d / 2) : c ^ 1u;
}

static float f16_round(double v)
{
    return skv_f16_to_f32(skv_f32_to_f16((float)v));
}

static double clampd(double v, double lim) { return v > lim ? lim : v < -lim ? -lim : v; }

/* Least-squares a, b of channel c (partner p) on the mean-removed series x[n][d];
 * returns the open-loop residual energy. */
static double fit_channel(const float *x, size_t n, size_t d, const double *mu, size_t c, size_t p, int two,
                          double *a, double *b)
{
    double s11 = 0, s22 = 0, s12 = 0, t1 = 0, t2 = 0, e0 = 0;
    for (size_t t = 1; t < n; t++) {
        double y = x[t * d + c] - mu[c], u = x[(t - 1) * d + c] - mu[c], v = x[(t - 1) * d + p] - mu[p];
        s11 += u * u, s22 += v * v, s12 += u * v, t1 += y * u, t2 += y * v, e0 += y * y;
    }
    double det = s11 * s22 - s12 * s12;
    *a = *b = 0.0;
    if (two && det > 1e-9 * s11 * s22 && s11 > 0) {
        *a = (t1 * s22 - t2 * s12) / det;
        *b = (t2 * s11 - t1 * s12) / det;
    } else if (s11 > 0) {
        *a = t1 / s11;
    }
    *a = clampd(*a, 2.0), *b = clampd(*b, 2.0);
    return e0 - 2 * (*a * t1 + *b * t2) + *a * *a * s11 + *b * *b * s22 + 2 * *a * *b * s12;
}

/* Predictor tok: the weight of the matched earlier row (ref[t] >= 0) of channel c. */
static double fit_match(const float *x, size_t n, size_t d, const double *mu, size_t c, const int32_t *ref)
{
    double num = 0, den = 0;
    for (size_t t = 0; t < n; t++) {
        if (ref[t] < 0) continue;
        double y = x[t * d + c] - mu[c], u = x[(size_t)ref[t] * d + c] - mu[c];
        num += y * u, den += u * u;
    }
    return den > 0 ? clampd(num / den, 2.0) : 0.0;
}

/* Fills s (mu, a, b, part) for one head's series and, when side is not NULL, writes the
 * coefficients there; returns the residual energy of the fit. */
static double fit_head(kvp_head *s, int pred, int pairing, const float *x, size_t n, const int32_t *ref, uint8_t *side)
{
    size_t d = s->d;
    double *mu = calloc(d, sizeof *mu), energy = 0;
    s->tok = pred == SKV_KVP_TOK;
    if (!mu) return -1.0;
    for (size_t c = 0; c < d; c++) {
        for (size_t t = 0; pred >= SKV_KVP_LPC && t < n; t++) mu[c] += x[t * d + c];
        mu[c] = n ? f16_round(mu[c] / (double)n) : 0.0;
    }
    for (size_t c = 0; c < d; c++) {
        double a = pred == SKV_KVP_DELTA ? 1.0 : 0.0, b = 0.0;
        s->part[c] = pred == SKV_KVP_LPC2 ? partner((uint32_t)c, (uint32_t)d, pairing) : (uint32_t)c;
        if (pred >= SKV_KVP_LPC) energy += fit_channel(x, n, d, mu, c, s->part[c], pred == SKV_KVP_LPC2, &a, &b);
        if (pred == SKV_KVP_TOK) b = fit_match(x, n, d, mu, c, ref);
        s->mu[c] = (float)mu[c], s->a[c] = f16_round(a), s->b[c] = f16_round(b);
        for (unsigned j = 0; side && j < coef_count[pred]; j++)
            skv_wr16(side + (c * coef_count[pred] + j) * 2, skv_f32_to_f16(j == 0 ? s->mu[c] : j == 1 ? s->a[c] : s->b[c]));
    }
    free(mu);
    return energy;
}

/* RoPE pairing of a (layer, kind) block for lpc2: the one with the smaller fitted energy. */
static int choose_pairing(kvp_head *s, const float *blk, size_t n_head, size_t n)
{
    double e[2] = {0, 0};
    for (int pr = 0; pr < 2; pr++)
        for (size_t h = 0; h < n_head; h++) e[pr] += fit_head(s, SKV_KVP_LPC2, pr, blk + h * n * s->d, n, NULL, NULL);
    return e[1] < e[0];
}

static float block_step(const float *x, size_t n, float rel)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double rms = n ? sqrt(ss / (double)n) : 0.0, st = rel * rms;
    return st > 1e-30 && st < 1e30 ? (float)st : 1.0f;
}

/* ---- encode / decode ------------------------------------------------------------ */

typedef struct kvp_geom {
    size_t n_layer, n_head, d, n_pos, series, block; /* series = n_pos * d floats, block = n_head series */
    size_t ch_bytes;                                   /* coefficient bytes of one (layer, kind) block */
} kvp_geom;

static int geom_make(kvp_geom *g, int pred, uint32_t n_layer, uint32_t n_head, uint32_t d, size_t n_pos, size_t *total)
{
    size_t t;
    g->n_layer = n_layer, g->n_head = n_head, g->d = d, g->n_pos = n_pos;
    g->ch_bytes = (size_t)n_head * d * 2 * coef_count[pred];
    if (!skv_mul_ok(n_pos, d, &g->series) || !skv_mul_ok(g->series, n_head, &g->block) ||
        !skv_mul_ok(g->block, (size_t)n_layer * 2, &t))
        return 0;
    *total = t;
    return 1;
}

static int check_params(const skv_kvp_params *p, uint32_t n_layer, uint32_t n_head, uint32_t d)
{
    if (!p || p->predictor < 0 || p->predictor >= SKV_KVP_N_PRED) return SKV_ERR_INVALID_ARG;
    for (int k = 0; k < 2; k++)
        if (!(p->step[k] > 0.0f && p->step[k] <= 1e6f)) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; p->abs_step && n_layer <= KVP_MAX_LAYERS && i < (size_t)n_layer * 2; i++)
        if (!(p->abs_step[i] > 0.0f) || isinf(p->abs_step[i])) return SKV_ERR_INVALID_ARG;
    if (!skv_kvp_side_bytes(p->predictor, n_layer, n_head, d) || n_layer < 1 || n_head < 1 || d < 1)
        return SKV_ERR_INVALID_ARG;
    if (p->predictor == SKV_KVP_TOK && !p->tokens) return SKV_ERR_INVALID_ARG;
    if (p->rot && d > SKV_KVP_ROT_MAX_D) return SKV_ERR_INVALID_ARG;
    return p->predictor == SKV_KVP_LPC2 && (d & 1) ? SKV_ERR_INVALID_ARG : SKV_OK;
}

/* Every (layer, kind) block into the coder e; side entries and coefficients into side. */
static int encode_blocks(const skv_kvp_params *p, const kvp_geom *g, const float *kv, uint8_t *side,
                         skv_rangecoder_enc *e, kvp_head *s, const int32_t *ref, float *deq)
{
    uint8_t *coef = side + g->n_layer * 2 * 8;
    int rc = SKV_OK;
    kvp_head_reset(s);
    for (size_t t = 0; p->level && t < g->n_pos && !rc; t++) rc = kvp_put_level(e, s, p->level[t]);
    for (size_t i = 0; i < g->n_layer * 2 && !rc; i++) {
        const float *blk = kv + i * g->block;
        float step = p->abs_step ? p->abs_step[i] : block_step(blk, g->block, p->step[i & 1]);
        int pairing = p->predictor == SKV_KVP_LPC2 ? choose_pairing(s, blk, g->n_head, g->n_pos) : 0;
        memset(side + i * 8, 0, 8);
        skv_wrf32(side + i * 8, step);
        side[i * 8 + 4] = (uint8_t)pairing;
        for (size_t h = 0; h < g->n_head && !rc; h++) {
            const float *x = blk + h * g->series;
            if (fit_head(s, p->predictor, pairing, x, g->n_pos, ref, coef + i * g->ch_bytes + h * g->ch_bytes / g->n_head) < 0)
                return SKV_ERR_NOMEM;
            rc = kvp_encode_series(e, s, x, g->n_pos, step, p->level, ref, deq + i * g->block + h * g->series);
        }
    }
    return rc;
}

static void rel_errors(const float *x, const float *y, const kvp_geom *g, float out[2])
{
    double e2[2] = {0, 0}, s2[2] = {0, 0};
    for (size_t i = 0; i < g->n_layer * 2; i++)
        for (size_t j = 0; j < g->block; j++) {
            double v = x[i * g->block + j], r = v - y[i * g->block + j];
            e2[i & 1] += r * r, s2[i & 1] += v * v;
        }
    for (int k = 0; k < 2; k++) out[k] = s2[k] > 0 ? (float)(e2[k] / s2[k]) : 0.0f;
}

/* One attempt with a stream buffer of cap bytes; SKV_ERR_RANGE from the coder itself
 * (not from a residual) sets *full. */
static int encode_try(const skv_kvp_params *p, const kvp_geom *g, const float *kv, uint8_t *body, size_t side_n,
                      size_t cap, kvp_head *s, float *deq, size_t *stream_len, int *full)
{
    skv_rangecoder_enc e;
    int32_t *ref = p->predictor == SKV_KVP_TOK ? kvp_refs(p->tokens, g->n_pos) : NULL;
    if (p->predictor == SKV_KVP_TOK && !ref) return SKV_ERR_NOMEM;
    skv_rangecoder_enc_init(&e, body + side_n, cap);
    int rc = encode_blocks(p, g, kv, body, &e, s, ref, deq);
    free(ref);
    if (!rc) rc = skv_rangecoder_enc_finish(&e, stream_len);
    *full = rc == SKV_ERR_RANGE && e.err == SKV_ERR_RANGE;
    return rc;
}

void skv_kvp_ramp_levels(size_t n, uint8_t *level)
{
    for (size_t t = 0; t < n; t++) { /* integer form of floor(2 log2(D / 4)): largest L with 2^L <= (D/4)^2 */
        uint64_t D = n - t, sq = D * D, L = 0;
        while (L < 7 && ((uint64_t)16 << (L + 1)) <= sq) L++;
        level[t] = (uint8_t)(t == 0 || sq < 16 ? 0 : L);
    }
}

static int finite_all(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static int encode_main(const skv_kvp_params *p, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim, const float *kv,
                       size_t n_pos, uint8_t **body, size_t *body_len, skv_kvp_header *h, float *deq);

int skv_kvp_encode(const skv_kvp_params *p, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim, const float *kv,
                   size_t n_pos, uint8_t **body, size_t *body_len, skv_kvp_header *h, float *deq)
{
    if (p && p->layer0) {
        kvp_dims dm = {n_layer, n_head_kv, head_dim, kv, n_pos};
        return kvp_encode_layer0(p, &dm, body, body_len, h, deq);
    }
    if (p && (p->surprisal || p->rate != 0.0f)) {
        kvp_dims dm = {n_layer, n_head_kv, head_dim, kv, n_pos};
        return kvp_encode_alloc(p, &dm, body, body_len, h, deq);
    }
    if (!p || !p->ramp) return encode_main(p, n_layer, n_head_kv, head_dim, kv, n_pos, body, body_len, h, deq);
    if (p->level) return SKV_ERR_INVALID_ARG;
    skv_kvp_params q = *p;
    uint8_t *lv = malloc(n_pos ? n_pos : 1);
    if (!lv) return SKV_ERR_NOMEM;
    skv_kvp_ramp_levels(n_pos, lv);
    q.level = lv, q.ramp = 0, q.step[0] = p->step[0] / 8.0f, q.step[1] = p->step[1] / 8.0f;
    int rc = encode_main(&q, n_layer, n_head_kv, head_dim, kv, n_pos, body, body_len, h, deq);
    free(lv);
    return rc;
}

static int encode_main(const skv_kvp_params *p, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim, const float *kv,
                       size_t n_pos, uint8_t **body, size_t *body_len, skv_kvp_header *h, float *deq)
{
    kvp_geom g;
    kvp_head s;
    size_t total = 0, side_n, cap, len = 0;
    int rc = check_params(p, n_layer, n_head_kv, head_dim), full = 1;
    if (rc || !body || !body_len || !h || (n_pos && !kv)) return rc ? rc : SKV_ERR_INVALID_ARG;
    if (!geom_make(&g, p->predictor, n_layer, n_head_kv, head_dim, n_pos, &total)) return SKV_ERR_RANGE;
    if (!finite_all(kv, total)) return SKV_ERR_INVALID_ARG;
    for (size_t t = 0; p->level && t < n_pos; t++)
        if (p->level[t] > SKV_KVP_SKIP) return SKV_ERR_INVALID_ARG;
    side_n = (size_t)skv_kvp_side_bytes(p->predictor, n_layer, n_head_kv, head_dim);
    float *y = deq ? deq : malloc(total ? total * sizeof *y : 1);
    skv_quant_ctx *rot = NULL;
    if (!y || (rc = kvp_head_alloc(&s, head_dim)) || (rc = kvp_rot_create(p->rot, head_dim, &rot))) {
        if (y) kvp_head_free(&s);
        if (!deq) free(y);
        return y && rc != SKV_ERR_NOMEM ? rc : SKV_ERR_NOMEM;
    }
    s.rot = rot;
    *body = NULL;
    for (cap = total * 2 + 4096; full && !rc;) {
        uint8_t *nb = realloc(*body, side_n + cap);
        if (!nb) rc = SKV_ERR_NOMEM;
        else *body = nb, rc = encode_try(p, &g, kv, nb, side_n, cap, &s, y, &len, &full);
        if (full) rc = SKV_OK, cap *= 4;
    }
    if (!rc) {
        *h = (skv_kvp_header){.predictor = p->predictor, .flags = (p->level ? 1 : 0) | (p->rot ? 4 : 0), .n_layer = n_layer,
                              .n_head_kv = n_head_kv, .head_dim = head_dim, .side_bytes = side_n, .stream_bytes = len};
        rel_errors(kv, y, &g, h->rel_mse);
        *body_len = side_n + len;
    } else {
        free(*body);
        *body = NULL;
    }
    kvp_head_free(&s);
    skv_quant_ctx_free(rot);
    if (!deq) free(y);
    return rc;
}

/* The side entry of block i: its step and the head's coefficients of (block i, head h). */
static int read_side(const skv_kvp_header *hd, const kvp_geom *g, const uint8_t *side, size_t i, size_t h,
                     kvp_head *s, float *step)
{
    const uint8_t *ent = side + i * 8;
    const uint8_t *coef = side + g->n_layer * 2 * 8 + i * g->ch_bytes + h * g->ch_bytes / g->n_head;
    unsigned nc = coef_count[hd->predictor];
    int pairing = ent[4];
    *step = skv_rdf32(ent);
    if (!(*step > 0.0f) || isinf(*step) || ent[5] || ent[6] || ent[7] || pairing > 1 ||
        (pairing && hd->predictor != SKV_KVP_LPC2))
        return SKV_ERR_FORMAT;
    for (size_t c = 0; c < g->d; c++) {
        float v[3] = {0.0f, hd->predictor == SKV_KVP_DELTA ? 1.0f : 0.0f, 0.0f};
        for (unsigned j = 0; j < nc; j++) v[j] = skv_f16_to_f32(skv_rd16(coef + (c * nc + j) * 2));
        if (!isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2])) return SKV_ERR_FORMAT;
        s->mu[c] = v[0], s->a[c] = v[1], s->b[c] = v[2];
        s->part[c] = hd->predictor == SKV_KVP_LPC2 ? partner((uint32_t)c, (uint32_t)g->d, pairing) : (uint32_t)c;
    }
    s->tok = hd->predictor == SKV_KVP_TOK;
    return SKV_OK;
}

static int decode_blocks(const skv_kvp_header *hd, const kvp_geom *g, const uint8_t *side, skv_rangecoder_dec *d,
                         kvp_head *s, uint8_t *level, const int32_t *ref, float *kv)
{
    int rc = SKV_OK;
    kvp_head_reset(s);
    for (size_t t = 0; level && t < g->n_pos && !rc; t++) rc = kvp_get_level(d, s, &level[t]);
    for (size_t i = 0; i < g->n_layer * 2 && !rc; i++)
        for (size_t h = 0; h < g->n_head && !rc; h++) {
            float step;
            if ((rc = read_side(hd, g, side, i, h, s, &step))) break;
            rc = kvp_decode_series(d, s, g->n_pos, step, level, ref, kv + i * g->block + h * g->series);
        }
    return rc;
}

static int decode_main(const skv_kvp_header *h, const uint8_t *body, size_t body_len, size_t n_pos,
                       const int32_t *tokens, float *kv, size_t kv_cap);

int skv_kvp_decode(const skv_kvp_header *h, const uint8_t *body, size_t body_len, size_t n_pos, const int32_t *tokens,
                   float *kv, size_t kv_cap)
{
    if (!h || !(h->flags & 2)) return decode_main(h, body, body_len, n_pos, tokens, kv, kv_cap);
    skv_kvp_header r = *h;
    size_t l0 = 0, total = 0;
    kvp_geom g;
    if (h->n_layer < 2 || (n_pos && !kv)) return SKV_ERR_FORMAT;
    if (h->predictor >= SKV_KVP_N_PRED || h->predictor < 0 ||
        !geom_make(&g, h->predictor, h->n_layer, h->n_head_kv, h->head_dim, n_pos, &total) || kv_cap < total)
        return SKV_ERR_RANGE;
    l0 = 2 * g.block;
    r.n_layer--, r.flags &= ~2;
    memset(kv, 0, l0 * sizeof *kv);
    return decode_main(&r, body, body_len, n_pos, tokens, kv + l0, kv_cap - l0);
}

static int decode_main(const skv_kvp_header *h, const uint8_t *body, size_t body_len, size_t n_pos,
                       const int32_t *tokens, float *kv, size_t kv_cap)
{
    kvp_geom g;
    kvp_head s;
    skv_rangecoder_dec d;
    size_t total = 0;
    uint8_t *level = NULL;
    int rc;
    if (!h || (!body && body_len) || (n_pos && !kv)) return SKV_ERR_INVALID_ARG;
    if (h->side_bytes + h->stream_bytes != body_len || h->predictor < 0 || h->predictor >= SKV_KVP_N_PRED ||
        h->side_bytes != skv_kvp_side_bytes(h->predictor, h->n_layer, h->n_head_kv, h->head_dim) || !h->side_bytes)
        return SKV_ERR_FORMAT;
    if (!geom_make(&g, h->predictor, h->n_layer, h->n_head_kv, h->head_dim, n_pos, &total) || kv_cap < total)
        return SKV_ERR_RANGE;
    if (h->predictor == SKV_KVP_TOK && !tokens) return SKV_ERR_INVALID_ARG;
    if ((h->flags & 4) && h->head_dim > SKV_KVP_ROT_MAX_D) return SKV_ERR_FORMAT;
    int32_t *ref = h->predictor == SKV_KVP_TOK ? kvp_refs(tokens, n_pos) : NULL;
    skv_quant_ctx *rot = NULL;
    if ((h->flags & 1) && !(level = malloc(n_pos ? n_pos : 1))) rc = SKV_ERR_NOMEM;
    else if (h->predictor == SKV_KVP_TOK && !ref) rc = SKV_ERR_NOMEM;
    else if (!(rc = kvp_head_alloc(&s, h->head_dim)) && (rc = kvp_rot_create((h->flags >> 2) & 1, h->head_dim, &rot)))
        kvp_head_free(&s);
    if (rc) {
        free(level), free(ref);
        return rc == SKV_ERR_NOMEM ? rc : SKV_ERR_FORMAT;
    }
    s.rot = rot;
    skv_rangecoder_dec_init(&d, body + h->side_bytes, (size_t)h->stream_bytes);
    rc = decode_blocks(h, &g, body, &d, &s, level, ref, kv);
    free(ref);
    if (!rc && skv_rangecoder_dec_finish(&d)) rc = SKV_ERR_FORMAT;
    if (rc && rc != SKV_ERR_NOMEM) rc = SKV_ERR_FORMAT;
    kvp_head_free(&s);
    skv_quant_ctx_free(rot);
    free(level);
    return rc;
}
