/* Quantized KV cache: spec parsing and per-vector round trips (kvquant.h). */
#include "quant/kvquant.h"
#include "core/fpguard.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "quant/quant.h"
#include "seqkv.h"

struct skv_kvquant {
    skv_kvq_spec spec;
    int n_layer;
    size_t hd;
    skv_quant_ctx **qc;  /* [n_layer][2], NULL where the pair is not active */
    uint8_t *buf;        /* one encoded vector (largest scheme) */
    size_t buf_cap;
    uint64_t fallbacks;
};

__attribute__((format(printf, 2, 3))) static int fail(skv_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = skv_vfail(err, SKV_ERR_INVALID_ARG, fmt, ap);
    va_end(ap);
    return rc;
}

/* Strict decimal in [0, hi]; len chars of s. */
static int parse_uint(const char *s, size_t len, uint64_t hi, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 20) return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        unsigned dgt = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10) return -1;
        v = v * 10 + dgt;
    }
    if (v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_scheme(const char *s, size_t len)
{
    char name[16];
    if (len == 0 || len >= sizeof name) return -1;
    memcpy(name, s, len);
    name[len] = 0;
    int id = skv_quant_parse(name);
    return id < 0 ? -1 : id;
}

enum { KEY_K, KEY_V, KEY_KF, KEY_KL, KEY_W, KEY_SEED, KEY_N };

/* One item "key=value" or a bare scheme name; seen[] rejects duplicates. */
static int parse_item(const char *it, size_t len, skv_kvq_spec *sp, int seen[KEY_N], skv_err *err)
{
    static const char *const keys[] = {"k", "v", "keep-first", "keep-last", "window", "seed", "kv"};
    char item[64];
    const char *eq = memchr(it, '=', len);
    size_t kl = eq ? (size_t)(eq - it) : 0, vl = eq ? len - kl - 1 : len;
    const char *val = eq ? eq + 1 : it;
    int key = -1;
    snprintf(item, sizeof item, "%.*s", (int)(len < 60 ? len : 60), it);
    if (!eq) key = 6;
    for (int i = 0; eq && i < 7; i++)
        if (strlen(keys[i]) == kl && !memcmp(keys[i], it, kl)) key = i;
    if (key < 0) return fail(err, "kv-quant: unknown item '%s' (keys: k v kv keep-first keep-last window seed)", item);
    if (key <= KEY_V || key == 6) {
        int id = parse_scheme(val, vl);
        if (id < 0) return fail(err, "kv-quant: unknown scheme in '%s' (f32 f16 q8_0 q4_0 tq1..tq4 tq2p..tq4p)", item);
        for (int kind = 0; kind < 2; kind++) {
            if (key != 6 && key != kind) continue;
            if (seen[kind]) return fail(err, "kv-quant: '%s' sets a kind twice", item);
            seen[kind] = 1;
            sp->scheme[kind] = id;
        }
        return SKV_OK;
    }
    uint64_t v, hi = key == KEY_SEED ? UINT64_MAX : key == KEY_W ? SKV_KVQ_MAX_WINDOW : SKV_KVQ_MAX_LAYERS;
    if (seen[key]) return fail(err, "kv-quant: '%s' repeats an option", item);
    if (parse_uint(val, vl, hi, &v)) return fail(err, "kv-quant: bad number in '%s'", item);
    seen[key] = 1;
    if (key == KEY_KF) sp->keep_first = (int)v;
    else if (key == KEY_KL) sp->keep_last = (int)v;
    else if (key == KEY_W) sp->window = (int)v;
    else sp->seed = v;
    return SKV_OK;
}

int skv_kvquant_parse(const char *s, skv_kvq_spec *out, skv_err *err)
{
    skv_kvq_spec sp = {{-1, -1}, 0, 0, 0, 0};
    int seen[KEY_N] = {0};
    skv_err_clear(err);
    if (!s || !out) return fail(err, "kv-quant: %s", "NULL argument");
    if (strlen(s) > 1024) return fail(err, "kv-quant: %s", "spec too long");
    for (const char *p = s;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0) return fail(err, "kv-quant: empty item in '%s'", s);
        int rc = parse_item(p, len, &sp, seen, err);
        if (rc) return rc;
        if (!e) break;
        p = e + 1;
    }
    if (sp.scheme[0] < 0 && sp.scheme[1] < 0) return fail(err, "kv-quant: '%s' quantizes neither K nor V", s);
    *out = sp;
    return SKV_OK;
}

int skv_kvquant_format(const skv_kvq_spec *sp, char *buf, size_t cap)
{
    char part[2][24];
    if (!sp || !buf || !cap) return SKV_ERR_INVALID_ARG;
    for (int k = 0; k < 2; k++) {
        const char *n = sp->scheme[k] >= 0 ? skv_quant_name(sp->scheme[k]) : NULL;
        snprintf(part[k], sizeof part[k], "%s=%s,", k ? "v" : "k", n ? n : "");
        if (!n) part[k][0] = 0;
    }
    int w = snprintf(buf, cap, "%s%skeep-first=%d,keep-last=%d,window=%d,seed=%llu", part[0], part[1],
                     sp->keep_first, sp->keep_last, sp->window, (unsigned long long)sp->seed);
    return w < 0 || (size_t)w >= cap ? SKV_ERR_RANGE : SKV_OK;
}

uint64_t skv_kvquant_seed(uint64_t base, int layer, int kind)
{
    uint64_t st = base ^ (((uint64_t)(uint32_t)layer << 1 | (uint64_t)(kind & 1)) * 0xD1B54A32D192ED03ull);
    return skv_quant_splitmix64(&st);
}

static int pair_wanted(const skv_kvq_spec *sp, int n_layer, int layer, int kind)
{
    return sp->scheme[kind] >= 0 && layer >= sp->keep_first && layer < n_layer - sp->keep_last;
}

int skv_kvquant_create(skv_kvquant **out, const skv_kvq_spec *spec, int n_layer, size_t head_dim)
{
    skv_kvquant *q;
    int rc;
    if (!out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if (!spec || n_layer <= 0 || head_dim == 0 || spec->keep_first < 0 || spec->keep_last < 0 || spec->window < 0)
        return SKV_ERR_INVALID_ARG;
    for (int k = 0; k < 2; k++)
        if (spec->scheme[k] >= 0 && (rc = skv_quant_check(spec->scheme[k], head_dim)) != SKV_OK) return rc;
    if (!(q = calloc(1, sizeof *q))) return SKV_ERR_NOMEM;
    q->spec = *spec;
    q->n_layer = n_layer;
    q->hd = head_dim;
    q->buf_cap = 4 * head_dim + 64; /* f32 is the largest layout */
    q->qc = calloc((size_t)n_layer * 2, sizeof *q->qc);
    q->buf = malloc(q->buf_cap);
    if (!q->qc || !q->buf) {
        skv_kvquant_free(q);
        return SKV_ERR_NOMEM;
    }
    for (int l = 0; l < n_layer; l++)
        for (int k = 0; k < 2; k++) {
            if (!pair_wanted(spec, n_layer, l, k)) continue;
            rc = skv_quant_ctx_create(&q->qc[2 * l + k], spec->scheme[k], head_dim, skv_kvquant_seed(spec->seed, l, k));
            if (rc == SKV_OK && skv_quant_ctx_bytes(q->qc[2 * l + k]) > q->buf_cap) rc = SKV_ERR_INTERNAL;
            if (rc) {
                skv_kvquant_free(q);
                return rc;
            }
        }
    *out = q;
    return SKV_OK;
}

void skv_kvquant_free(skv_kvquant *q)
{
    if (!q) return;
    if (q->qc)
        for (int i = 0; i < 2 * q->n_layer; i++) skv_quant_ctx_free(q->qc[i]);
    free(q->qc);
    free(q->buf);
    free(q);
}

const skv_kvq_spec *skv_kvquant_spec(const skv_kvquant *q) { return q ? &q->spec : NULL; }

int skv_kvquant_active(const skv_kvquant *q, int layer, int kind)
{
    return q && layer >= 0 && layer < q->n_layer && (kind == 0 || kind == 1) && q->qc[2 * layer + kind] != NULL;
}

int skv_kvquant_layer_active(const skv_kvquant *q, int layer)
{
    return skv_kvquant_active(q, layer, 0) || skv_kvquant_active(q, layer, 1);
}

int skv_kvquant_roundtrip(skv_kvquant *q, int layer, int kind, const float *x, float *y)
{
    if (!x || !y || !skv_kvquant_active(q, layer, kind)) return SKV_ERR_INVALID_ARG;
    const skv_quant_ctx *c = q->qc[2 * layer + kind];
    size_t nb = skv_quant_ctx_bytes(c);
    if (skv_quant_ctx_encode(c, x, 1, q->buf, q->buf_cap) != SKV_OK ||
        skv_quant_ctx_decode(c, q->buf, nb, 1, y, q->hd) != SKV_OK) {
        /* uncodable vector (non-finite or fp16 overflow): keep it exact, deterministically */
        if (y != x) memmove(y, x, q->hd * sizeof *y);
        q->fallbacks++;
    }
    return SKV_OK;
}

uint64_t skv_kvquant_fallbacks(const skv_kvquant *q) { return q ? q->fallbacks : 0; }

/* ---- public helpers (seqkv.h) ------------------------------------------- */

int skv_kvquant_check(const char *spec, int head_dim, skv_err *err)
{
    skv_kvq_spec sp;
    int rc = skv_kvquant_parse(spec, &sp, err);
    if (rc || head_dim < 0) return rc;
    for (int k = 0; k < 2; k++)
        if (sp.scheme[k] >= 0 && (rc = skv_quant_check(sp.scheme[k], (size_t)head_dim)) != SKV_OK) {
            skv_fail(err, 0, "kv-quant: scheme %s does not support head_dim %d", skv_quant_name(sp.scheme[k]),
                     head_dim);
            return rc;
        }
    return SKV_OK;
}

int skv_kv_quant_roundtrip(const char *scheme, size_t d, int layer, int kind, const float *x, size_t n_vec,
                           float *y, double *bits_per_value)
{
    skv_quant_ctx *qc = NULL;
    uint8_t *buf = NULL;
    size_t nb, total;
    int id = scheme ? skv_quant_parse(scheme) : SKV_ERR_INVALID_ARG, rc;
    if (id < 0 || layer < 0 || (kind != 0 && kind != 1) || (n_vec && (!x || !y))) return SKV_ERR_INVALID_ARG;
    if ((rc = skv_quant_check(id, d)) != SKV_OK) return rc;
    if (bits_per_value) *bits_per_value = skv_quant_bits_per_value(id, d);
    if (!n_vec) return SKV_OK;
    if ((rc = skv_quant_ctx_create(&qc, id, d, skv_kvquant_seed(0, layer, kind))) != SKV_OK) return rc;
    nb = skv_quant_ctx_bytes(qc);
    if (n_vec > SIZE_MAX / nb || n_vec > SIZE_MAX / d) rc = SKV_ERR_RANGE;
    else if (!(buf = malloc(total = n_vec * nb))) rc = SKV_ERR_NOMEM;
    else if ((rc = skv_quant_ctx_encode(qc, x, n_vec, buf, total)) == SKV_OK)
        rc = skv_quant_ctx_decode(qc, buf, total, n_vec, y, n_vec * d);
    free(buf);
    skv_quant_ctx_free(qc);
    return rc;
}
