/* kvtc: the stream (kvtc.h, docs/kvtc.md section 2). Per (layer, kind, kv_head) series:
 * project onto the calibration's first k components, code the coefficient series with
 * kvpred's series coder, reconstruct mu + B_k^T y~. */
#include "container/kvtc_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "container/kvpred.h"
#include "container/kvpred_int.h"
#include "core/util.h"
#include "seqkv.h"

static const uint8_t tc_magic[4] = {'S', 'K', 'V', 'T'};

/* What encoder and decoder share about one stream. */
typedef struct kvtc_geo {
    const skv_kvtc_calib *c;
    size_t n, S, d;     /* positions, series, head_dim */
    size_t pos0;        /* the first position (RoPE angles) */
    int pred, ramp;
    float *step;        /* [n_layer * 2] absolute steps */
    uint16_t *k;        /* [S] components kept */
    float *b;           /* tok: [S][d] coefficient weights of the matched row (else NULL) */
    uint8_t *level;     /* ramp: [n] levels (else NULL) */
    int32_t *ref;       /* tok: [n] matched positions (else NULL) */
    float *y;           /* scratch: [n][d] coefficients */
    double *rope;       /* K's RoPE table (kvtc_rope_table), NULL for none */
    double *u;          /* scratch: [d] */
} kvtc_geo;

static void geo_free(kvtc_geo *g)
{
    free(g->step), free(g->k), free(g->b), free(g->level), free(g->ref), free(g->y), free(g->rope), free(g->u);
}

static int geo_alloc(kvtc_geo *g, const skv_kvtc_calib *c, size_t pos0, size_t n, int pred, int ramp,
                     const int32_t *tokens)
{
    memset(g, 0, sizeof *g);
    g->c = c, g->pos0 = pos0, g->n = n, g->S = c->n_series, g->d = c->d, g->pred = pred, g->ramp = ramp;
    g->step = malloc(c->n_layer * 2 * sizeof *g->step);
    g->k = calloc(g->S, sizeof *g->k);
    g->y = malloc(n * g->d * sizeof *g->y);
    g->b = pred == SKV_KVTC_TOK ? calloc(g->S * g->d, sizeof *g->b) : NULL;
    g->level = ramp ? malloc(n) : NULL;
    g->ref = pred == SKV_KVTC_TOK ? kvp_refs(tokens, n) : NULL;
    g->rope = kvtc_rope_table(c, pos0, n);
    g->u = malloc(g->d * sizeof *g->u);
    if (!g->u || (c->rope_style && !g->rope)) return SKV_ERR_NOMEM;
    if (!g->step || !g->k || !g->y || (pred == SKV_KVTC_TOK && (!g->b || !g->ref)) || (ramp && !g->level)) return SKV_ERR_NOMEM;
    if (ramp) skv_kvp_ramp_levels(n, g->level);
    return SKV_OK;
}

/* The RoPE table for series s: K series only. */
static const double *series_rope(const kvtc_geo *g, size_t s)
{
    return (s / g->c->n_head_kv) % 2 == 0 ? g->rope : NULL;
}

/* y = B_k (u - mu), u = x at position t with K's RoPE undone: double sums in channel order,
 * rounded once. */
static void project(const kvtc_geo *g, size_t s, size_t t, const float *x, size_t k, float *y)
{
    size_t d = g->d;
    const float *mu = g->c->mu + s * d, *B = g->c->basis + s * d * d;
    kvtc_unrope(g->c, series_rope(g, s), t, x, g->u);
    for (size_t j = 0; j < k; j++) {
        double acc = 0.0;
        for (size_t i = 0; i < d; i++) acc += (double)B[j * d + i] * (g->u[i] - (double)mu[i]);
        y[j] = (float)acc;
    }
}

/* x = RoPE_t(mu + B_k^T y): double sums in component order, rounded once; 0 if not finite. */
static int reconstruct(const kvtc_geo *g, size_t s, size_t t, const float *y, size_t k, float *x)
{
    size_t d = g->d;
    const float *mu = g->c->mu + s * d, *B = g->c->basis + s * d * d;
    int ok = 1;
    for (size_t i = 0; i < d; i++) {
        double acc = (double)mu[i];
        for (size_t j = 0; j < k; j++) acc += (double)B[j * d + i] * (double)y[j];
        g->u[i] = acc;
    }
    kvtc_rope(g->c, series_rope(g, s), t, g->u);
    for (size_t i = 0; i < d; i++) {
        x[i] = (float)g->u[i];
        ok &= isfinite(x[i]) != 0;
    }
    return ok;
}

/* ---- the encoder's choices --------------------------------------------------------- */

/* Step of (layer, kind) = rel x the calibration RMS of its heads' deviations from the mean
 * x the calibration's step weight of lk (1 without weights). */
static float lk_step(const skv_kvtc_calib *c, size_t lk, float rel)
{
    double e = 0.0, w = c->w ? (double)c->w[lk] : 1.0;
    size_t H = c->n_head_kv, d = c->d;
    for (size_t i = 0; i < H * d; i++) e += (double)c->eig[lk * H * d + i];
    double rms = sqrt(e / (double)(H * d));
    return (float)(rel * (rms > 1e-20 ? rms : 1.0) * w);
}

/* Reverse water-filling: the components whose calibration variance exceeds theta * step^2. */
static uint16_t keep_count(const float *eig, size_t d, float step, float theta)
{
    size_t k = 0;
    while (k < d && (double)eig[k] > (double)theta * (double)step * (double)step) k++;
    return (uint16_t)k;
}

/* tok: b[j] = least squares of y[t][j] on y[ref[t]][j] over the matched positions, clamped to
 * [-1, 1] and rounded to a multiple of 1/127 (the side stores 127 b as an int8). */
static void fit_b(const float *y, size_t n, size_t k, size_t d, const int32_t *ref, float *b)
{
    for (size_t j = 0; j < k; j++) {
        double num = 0.0, den = 0.0;
        for (size_t t = 0; t < n; t++)
            if (ref[t] >= 0) {
                double r = y[(size_t)ref[t] * d + j];
                num += (double)y[t * d + j] * r, den += r * r;
            }
        double v = den > 0.0 ? num / den : 0.0;
        b[j] = (float)floor((v > 1.0 ? 1.0 : v < -1.0 ? -1.0 : v) * 127.0 + 0.5) / 127.0f; /* what the side holds */
    }
}

static void head_setup(kvp_head *h, const kvtc_geo *g, size_t s)
{
    size_t k = g->k[s];
    h->d = k;
    h->tok = g->pred == SKV_KVTC_TOK;
    for (size_t j = 0; j < k; j++) {
        h->mu[j] = 0.0f, h->a[j] = 0.0f, h->part[j] = (uint32_t)j;
        h->b[j] = h->tok ? g->b[s * g->d + j] : 0.0f;
    }
}

/* ---- the stream -------------------------------------------------------------------- */

static size_t side_len(const kvtc_geo *g)
{
    size_t n = g->c->n_layer * 2 * 4 + g->S * 2;
    for (size_t s = 0; g->pred == SKV_KVTC_TOK && s < g->S; s++) n += (size_t)g->k[s];
    return n;
}

static void side_write(const kvtc_geo *g, uint8_t *p)
{
    for (size_t i = 0; i < g->c->n_layer * 2; i++, p += 4) skv_wrf32(p, g->step[i]);
    for (size_t s = 0; s < g->S; s++, p += 2) skv_wr16(p, g->k[s]);
    for (size_t s = 0; g->pred == SKV_KVTC_TOK && s < g->S; s++)
        for (size_t j = 0; j < g->k[s]; j++) *p++ = (uint8_t)(int8_t)floor((double)g->b[s * g->d + j] * 127.0 + 0.5);
}

/* Series s of the block: coefficients, coded; deq (optional) gets the reconstruction. */
static int encode_series(skv_rangecoder_enc *e, kvp_head *h, kvtc_geo *g, size_t s, const float *x, float *deq)
{
    size_t n = g->n, d = g->d, k = g->k[s];
    for (size_t t = 0; t < n; t++) project(g, s, t, x + t * d, k, g->y + t * k);
    if (g->pred == SKV_KVTC_TOK) fit_b(g->y, n, k, k, g->ref, g->b + s * d);
    head_setup(h, g, s);
    if (!k) {
        for (size_t t = 0; deq && t < n; t++) reconstruct(g, s, t, g->y, 0, deq + t * d);
        return SKV_OK;
    }
    float step = g->step[s / g->c->n_head_kv];
    int rc = kvp_encode_series(e, h, g->y, n, step, g->level, g->ref, g->y);
    for (size_t t = 0; !rc && t < n; t++)
        if (!reconstruct(g, s, t, g->y + t * k, k, deq ? deq + t * d : h->row)) rc = SKV_ERR_RANGE;
    return rc;
}

static void header_write(const kvtc_geo *g, uint8_t *out, size_t body_len)
{
    memset(out, 0, SKV_KVTC_HDR);
    memcpy(out, tc_magic, 4);
    out[4] = SKV_KVTC_VERSION, out[5] = (uint8_t)g->pred, out[6] = (uint8_t)(g->ramp ? 1 : 0);
    skv_wr64(out + 8, g->c->id);
    skv_wr32(out + 16, g->c->n_layer), skv_wr32(out + 20, g->c->n_head_kv), skv_wr32(out + 24, g->c->d);
    skv_wr32(out + 28, (uint32_t)g->n);
    skv_wr64(out + 32, body_len);
    skv_wr32(out + 40, (uint32_t)g->pos0);
    skv_wr64(out + 48, XXH3_64bits_withSeed(out + SKV_KVTC_HDR, body_len, XXH3_64bits(out, 48)));
}

static int encode_try(kvtc_geo *g, const float *kv, uint8_t *buf, size_t cap, float *deq, size_t *len)
{
    kvp_head h;
    skv_rangecoder_enc e;
    size_t side = side_len(g), stream = 0, block = g->n * g->d;
    if (kvp_head_alloc(&h, g->d)) return SKV_ERR_NOMEM;
    skv_rangecoder_enc_init(&e, buf + SKV_KVTC_HDR + side, cap - SKV_KVTC_HDR - side);
    int rc = SKV_OK;
    for (size_t s = 0; s < g->S && !rc; s++) rc = encode_series(&e, &h, g, s, kv + s * block, deq ? deq + s * block : NULL);
    kvp_head_free(&h);
    if (!rc) rc = skv_rangecoder_enc_finish(&e, &stream);
    if (rc) return rc == SKV_ERR_RANGE && e.err == SKV_ERR_RANGE ? 1 : rc; /* 1: the buffer was too small */
    side_write(g, buf + SKV_KVTC_HDR);
    *len = SKV_KVTC_HDR + side + stream;
    header_write(g, buf, side + stream);
    return SKV_OK;
}

static int params_ok(const skv_kvtc_params *p, const skv_kvtc_calib *c, const float *kv, size_t n)
{
    if (!p || !c || c->sum || !kv || !n || n > SKV_KVTC_MAX_POS || p->pos0 > SKV_KVTC_MAX_POS - n) return 0;
    if (p->predictor < 0 || p->predictor >= SKV_KVTC_N_PRED || (p->predictor == SKV_KVTC_TOK && !p->tokens)) return 0;
    for (int i = 0; i < 2; i++)
        if (!(p->step[i] > 0.0f) || !isfinite(p->step[i])) return 0;
    return p->theta >= 0.0f && isfinite(p->theta);
}

static void choose(kvtc_geo *g, const skv_kvtc_params *p)
{
    const skv_kvtc_calib *c = g->c;
    float theta = p->theta > 0.0f ? p->theta : 1.0f / 12.0f;
    for (size_t lk = 0; lk < c->n_layer * 2; lk++) {
        float nominal = lk_step(c, lk, p->step[lk & 1]);
        g->step[lk] = p->ramp ? nominal / 8.0f : nominal;
        for (size_t h = 0; h < c->n_head_kv; h++) {
            size_t s = lk * c->n_head_kv + h;
            g->k[s] = keep_count(c->eig + s * c->d, c->d, nominal, theta);
        }
    }
}

int skv_kvtc_encode(const skv_kvtc_params *p, const skv_kvtc_calib *c, const float *kv, size_t n_pos, uint8_t **out,
                    size_t *out_len, float *deq)
{
    kvtc_geo g;
    *out = NULL, *out_len = 0;
    if (!params_ok(p, c, kv, n_pos)) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < c->n_series * n_pos * c->d; i++)
        if (!isfinite(kv[i])) return SKV_ERR_INVALID_ARG;
    int rc = geo_alloc(&g, c, p->pos0, n_pos, p->predictor, p->ramp, p->tokens);
    if (!rc) choose(&g, p);
    size_t cap = SKV_KVTC_HDR + side_len(&g) + c->n_series * n_pos * c->d + 4096;
    for (int tries = 0; !rc && tries < 8; tries++, cap *= 2) {
        uint8_t *buf = malloc(cap);
        rc = buf ? encode_try(&g, kv, buf, cap, deq, out_len) : SKV_ERR_NOMEM;
        if (!rc) *out = buf;
        else free(buf);
        if (rc != 1) break;
    }
    geo_free(&g);
    return rc == 1 ? SKV_ERR_RANGE : rc;
}

/* ---- the decoder ------------------------------------------------------------------- */

static int tc_fail(skv_err *err, int rc, const char *msg)
{
    return skv_fail(err, rc, "kvtc: %s", msg);
}

int skv_kvtc_peek(const uint8_t *buf, size_t len, size_t *n_pos, uint64_t *calib_id, skv_err *err)
{
    if (!buf || len < SKV_KVTC_HDR || memcmp(buf, tc_magic, 4)) return tc_fail(err, SKV_ERR_FORMAT, "not a kvtc stream (magic)");
    if (buf[4] != SKV_KVTC_VERSION) return tc_fail(err, SKV_ERR_FORMAT, "unknown version");
    if (buf[5] >= SKV_KVTC_N_PRED || buf[6] > 1 || buf[7]) return tc_fail(err, SKV_ERR_FORMAT, "bad predictor or flags");
    uint64_t body = skv_rd64(buf + 32);
    uint32_t n = skv_rd32(buf + 28), pos0 = skv_rd32(buf + 40);
    if (!n || n > SKV_KVTC_MAX_POS || pos0 > SKV_KVTC_MAX_POS - n || skv_rd32(buf + 44))
        return tc_fail(err, SKV_ERR_FORMAT, "positions out of range");
    if (body != len - SKV_KVTC_HDR) return tc_fail(err, SKV_ERR_FORMAT, "length does not match (truncated?)");
    if (XXH3_64bits_withSeed(buf + SKV_KVTC_HDR, (size_t)body, XXH3_64bits(buf, 48)) != skv_rd64(buf + 48))
        return tc_fail(err, SKV_ERR_FORMAT, "checksum mismatch (damaged)");
    *n_pos = n, *calib_id = skv_rd64(buf + 8);
    return SKV_OK;
}

/* Side values: steps finite and positive, k <= d, tok weights int8 in [-127, 127]; all within body. */
static int side_read(kvtc_geo *g, const uint8_t *p, size_t body, size_t *used)
{
    size_t lk = g->c->n_layer * 2, need = lk * 4 + g->S * 2;
    if (need > body) return SKV_ERR_FORMAT;
    for (size_t i = 0; i < lk; i++)
        if (!((g->step[i] = skv_rdf32(p + 4 * i)) > 0.0f) || !isfinite(g->step[i])) return SKV_ERR_FORMAT;
    for (size_t s = 0; s < g->S; s++)
        if ((g->k[s] = skv_rd16(p + lk * 4 + 2 * s)) > g->d) return SKV_ERR_FORMAT;
    if (side_len(g) > body) return SKV_ERR_FORMAT;
    const uint8_t *q = p + need;
    for (size_t s = 0; g->pred == SKV_KVTC_TOK && s < g->S; s++)
        for (size_t j = 0; j < g->k[s]; j++, q++) {
            if (*q == 0x80) return SKV_ERR_FORMAT; /* -128: outside [-1, 1] */
            g->b[s * g->d + j] = (float)(int8_t)*q / 127.0f;
        }
    *used = side_len(g);
    return SKV_OK;
}

static int decode_series(skv_rangecoder_dec *dc, kvp_head *h, kvtc_geo *g, size_t s, float *out)
{
    size_t n = g->n, d = g->d, k = g->k[s];
    head_setup(h, g, s);
    int rc = k ? kvp_decode_series(dc, h, n, g->step[s / g->c->n_head_kv], g->level, g->ref, g->y) : SKV_OK;
    for (size_t t = 0; !rc && t < n; t++)
        if (!reconstruct(g, s, t, g->y + t * k, k, out + t * d)) rc = SKV_ERR_FORMAT;
    return rc;
}

static int decode_body(kvtc_geo *g, const uint8_t *body, size_t blen, float *kv)
{
    size_t side = 0;
    kvp_head h;
    skv_rangecoder_dec dc;
    int rc = side_read(g, body, blen, &side);
    if (rc) return rc;
    if (kvp_head_alloc(&h, g->d)) return SKV_ERR_NOMEM;
    rc = skv_rangecoder_dec_init(&dc, body + side, blen - side);
    for (size_t s = 0; s < g->S && !rc; s++) rc = decode_series(&dc, &h, g, s, kv + s * g->n * g->d);
    kvp_head_free(&h);
    if (!rc && skv_rangecoder_dec_finish(&dc)) rc = SKV_ERR_FORMAT;
    return rc == SKV_ERR_NOMEM ? rc : rc ? SKV_ERR_FORMAT : SKV_OK;
}

static int geometry_matches(const uint8_t *buf, const skv_kvtc_calib *c)
{
    return skv_rd32(buf + 16) == c->n_layer && skv_rd32(buf + 20) == c->n_head_kv && skv_rd32(buf + 24) == c->d;
}

int skv_kvtc_decode(const uint8_t *buf, size_t len, const skv_kvtc_calib *c, const int32_t *tokens, float *kv,
                    size_t kv_cap, skv_err *err)
{
    size_t n = 0;
    uint64_t id = 0;
    kvtc_geo g;
    int rc = skv_kvtc_peek(buf, len, &n, &id, err);
    if (rc) return rc;
    if (!c || c->sum) return tc_fail(err, SKV_ERR_INVALID_ARG, "no finished calibration given");
    if (id != c->id || !geometry_matches(buf, c))
        return skv_fail(err, SKV_ERR_MISMATCH, "kvtc: the stream needs the calibration kvtc-%016llx.cal, not kvtc-%016llx.cal",
                        (unsigned long long)id, (unsigned long long)c->id);
    if (buf[5] == SKV_KVTC_TOK && !tokens) return tc_fail(err, SKV_ERR_INVALID_ARG, "predictor tok needs the tokens");
    if (!kv || kv_cap / c->n_series / c->d < n) return tc_fail(err, SKV_ERR_RANGE, "output buffer too small");
    rc = geo_alloc(&g, c, skv_rd32(buf + 40), n, buf[5], buf[6] & 1, tokens);
    if (!rc) rc = decode_body(&g, buf + SKV_KVTC_HDR, len - SKV_KVTC_HDR, kv);
    geo_free(&g);
    if (rc == SKV_ERR_FORMAT) tc_fail(err, rc, "damaged stream (side values or coefficients)");
    return rc;
}
