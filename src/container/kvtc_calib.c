/* kvtc calibrations: accumulate the second moments of each (layer, kind, kv_head) series
 * in double, finish with the Jacobi eigen-decomposition, save and load the file image
 * (docs/kvtc.md section 1). */
#include "container/kvtc_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/util.h"
#include "seqkv.h"

static const uint8_t cal_magic[8] = {'S', 'K', 'V', 'T', 'C', 'A', 'L', '1'};

static int dims_ok(uint32_t L, uint32_t H, uint32_t d)
{
    return L && H && d && d <= SKV_KVTC_MAX_D && (uint64_t)L * 2 * H <= SKV_KVTC_MAX_SERIES;
}

static int calib_alloc(skv_kvtc_calib *c, uint32_t L, uint32_t H, uint32_t d)
{
    c->n_layer = L, c->n_head_kv = H, c->d = d;
    c->n_series = (size_t)L * 2 * H;
    c->mu = calloc(c->n_series * d, sizeof *c->mu);
    c->eig = calloc(c->n_series * d, sizeof *c->eig);
    c->basis = calloc(c->n_series * d * d, sizeof *c->basis);
    return c->mu && c->eig && c->basis ? SKV_OK : SKV_ERR_NOMEM;
}

int skv_kvtc_calib_create(uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim, skv_kvtc_calib **out)
{
    *out = NULL;
    if (!dims_ok(n_layer, n_head_kv, head_dim)) return SKV_ERR_INVALID_ARG;
    skv_kvtc_calib *c = calloc(1, sizeof *c);
    int rc = c ? calib_alloc(c, n_layer, n_head_kv, head_dim) : SKV_ERR_NOMEM;
    if (!rc) {
        c->sum = calloc(c->n_series * head_dim, sizeof *c->sum);
        c->cross = calloc(c->n_series * head_dim * head_dim, sizeof *c->cross);
        rc = c->sum && c->cross ? SKV_OK : SKV_ERR_NOMEM;
    }
    if (rc) skv_kvtc_calib_free(c);
    else *out = c;
    return rc;
}

void skv_kvtc_calib_free(skv_kvtc_calib *c)
{
    if (!c) return;
    free(c->mu), free(c->eig), free(c->basis), free(c->sum), free(c->cross), free(c->w);
    free(c);
}

int skv_kvtc_calib_set_rope(skv_kvtc_calib *c, int style, uint32_t rope_dim, float base)
{
    if (!c || !c->sum || c->n_samples || !kvtc_rope_ok(style, rope_dim, base, c->d)) return SKV_ERR_INVALID_ARG;
    c->rope_style = style, c->rope_dim = rope_dim, c->rope_base = base;
    return SKV_OK;
}

/* Adds one vector x of series s to the running sums (fixed order: i, then j >= i). */
static void accumulate(skv_kvtc_calib *c, size_t s, const double *x)
{
    size_t d = c->d;
    double *sm = c->sum + s * d, *cr = c->cross + s * d * d;
    for (size_t i = 0; i < d; i++) {
        sm[i] += x[i];
        for (size_t j = i; j < d; j++) cr[i * d + j] += x[i] * x[j];
    }
}

int skv_kvtc_calib_add(skv_kvtc_calib *c, const float *kv, size_t n_pos)
{
    if (!c || !c->sum || !kv) return SKV_ERR_INVALID_ARG;
    double *tab = kvtc_rope_table(c, 0, n_pos), *u = malloc(c->d * sizeof *u);
    if (!u || (c->rope_style && !tab)) {
        free(tab), free(u);
        return SKV_ERR_NOMEM;
    }
    for (size_t s = 0; s < c->n_series; s++)
        for (size_t t = 0; t < n_pos; t++) {
            kvtc_unrope(c, (s / c->n_head_kv) % 2 == 0 ? tab : NULL, t, kv + (s * n_pos + t) * c->d, u);
            accumulate(c, s, u);
        }
    c->n_samples += n_pos;
    free(tab), free(u);
    return SKV_OK;
}

/* Series s: mean and covariance from the sums, then its eigen-decomposition. */
static int finish_series(skv_kvtc_calib *c, size_t s, double *cov, double *eig, double *vec)
{
    size_t d = c->d;
    double n = (double)c->n_samples, *sm = c->sum + s * d, *cr = c->cross + s * d * d;
    for (size_t i = 0; i < d; i++) c->mu[s * d + i] = (float)(sm[i] / n);
    for (size_t i = 0; i < d; i++)
        for (size_t j = i; j < d; j++)
            cov[i * d + j] = cov[j * d + i] = cr[i * d + j] / n - (sm[i] / n) * (sm[j] / n);
    int rc = skv_kvtc_jacobi(cov, d, eig, vec);
    for (size_t j = 0; !rc && j < d; j++) c->eig[s * d + j] = (float)(eig[j] > 0.0 ? eig[j] : 0.0);
    for (size_t i = 0; !rc && i < d * d; i++) c->basis[s * d * d + i] = (float)vec[i];
    return rc;
}

int skv_kvtc_calib_finish(skv_kvtc_calib *c)
{
    if (!c || !c->sum || c->n_samples < 2) return SKV_ERR_INVALID_ARG;
    size_t d = c->d;
    double *cov = malloc(d * d * sizeof *cov), *eig = malloc(d * sizeof *eig), *vec = malloc(d * d * sizeof *vec);
    int rc = cov && eig && vec ? SKV_OK : SKV_ERR_NOMEM;
    for (size_t s = 0; !rc && s < c->n_series; s++) rc = finish_series(c, s, cov, eig, vec);
    free(cov), free(eig), free(vec);
    if (!rc) {
        free(c->sum), free(c->cross);
        c->sum = NULL, c->cross = NULL;
        c->id = kvtc_calib_image_id(c);
    }
    return rc;
}

/* ---- the file image -------------------------------------------------------------- */

/* Bytes of the step weights after the header: none in a version 1 file. */
static size_t weights_len(uint32_t version, uint32_t n_layer)
{
    return version == SKV_KVTC_CAL_VERSION_W ? (size_t)n_layer * 2 * 4 : 0;
}

static uint32_t image_version(const skv_kvtc_calib *c) { return c->w ? SKV_KVTC_CAL_VERSION_W : SKV_KVTC_CAL_VERSION; }

static size_t image_len(const skv_kvtc_calib *c)
{
    return SKV_KVTC_CAL_HDR + weights_len(image_version(c), c->n_layer) + c->n_series * (2 + c->d) * c->d * 4 + 8;
}

static int weight_ok(float w) { return w >= 1.0f / 64.0f && w <= 64.0f; }

int skv_kvtc_calib_set_weights(skv_kvtc_calib *c, const float *w)
{
    if (!c || c->sum || !w) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < (size_t)c->n_layer * 2; i++)
        if (!weight_ok(w[i])) return SKV_ERR_INVALID_ARG;
    if (!c->w && !(c->w = malloc((size_t)c->n_layer * 2 * sizeof *c->w))) return SKV_ERR_NOMEM;
    memcpy(c->w, w, (size_t)c->n_layer * 2 * sizeof *c->w);
    c->id = kvtc_calib_image_id(c);
    return SKV_OK;
}

static uint8_t *put_f32s(uint8_t *p, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++, p += 4) skv_wrf32(p, x[i]);
    return p;
}

static void image_write(const skv_kvtc_calib *c, uint8_t *buf)
{
    size_t d = c->d;
    memcpy(buf, cal_magic, 8);
    skv_wr32(buf + 8, image_version(c));
    skv_wr32(buf + 12, c->n_layer), skv_wr32(buf + 16, c->n_head_kv), skv_wr32(buf + 20, c->d);
    skv_wr64(buf + 24, c->n_samples);
    skv_wr32(buf + 32, (uint32_t)c->rope_style), skv_wr32(buf + 36, c->rope_dim), skv_wrf32(buf + 40, c->rope_base);
    skv_wr32(buf + 44, 0);
    uint8_t *p = buf + SKV_KVTC_CAL_HDR;
    if (c->w) p = put_f32s(p, c->w, (size_t)c->n_layer * 2);
    for (size_t s = 0; s < c->n_series; s++) {
        p = put_f32s(p, c->mu + s * d, d);
        p = put_f32s(p, c->eig + s * d, d);
        p = put_f32s(p, c->basis + s * d * d, d * d);
    }
    skv_wr64(p, XXH3_64bits(buf, (size_t)(p - buf)));
}

uint64_t kvtc_calib_image_id(const skv_kvtc_calib *c)
{
    size_t len = image_len(c);
    uint8_t *buf = malloc(len);
    if (!buf) return 0;
    image_write(c, buf);
    uint64_t id = skv_rd64(buf + len - 8);
    free(buf);
    return id;
}

int skv_kvtc_calib_save(const skv_kvtc_calib *c, uint8_t **buf, size_t *len)
{
    *buf = NULL, *len = 0;
    if (!c || c->sum) return SKV_ERR_INVALID_ARG;
    if (!(*buf = malloc(image_len(c)))) return SKV_ERR_NOMEM;
    *len = image_len(c);
    image_write(c, *buf);
    return SKV_OK;
}

uint64_t skv_kvtc_calib_id(const skv_kvtc_calib *c) { return c ? c->id : 0; }

void skv_kvtc_calib_dims(const skv_kvtc_calib *c, uint32_t *n_layer, uint32_t *n_head_kv, uint32_t *head_dim)
{
    *n_layer = c->n_layer, *n_head_kv = c->n_head_kv, *head_dim = c->d;
}

const float *skv_kvtc_calib_eig(const skv_kvtc_calib *c, size_t series)
{
    return series < c->n_series ? c->eig + series * c->d : NULL;
}

static int cal_fail(skv_err *err, const char *msg)
{
    return skv_fail(err, SKV_ERR_FORMAT, "kvtc calibration: %s", msg);
}

/* Header fields of buf[0..len): geometry checked before any size is computed from it. */
static int image_check(const uint8_t *buf, size_t len, uint32_t dim[3], skv_err *err)
{
    if (len < SKV_KVTC_CAL_HDR + 8 || memcmp(buf, cal_magic, 8)) return cal_fail(err, "not a calibration (magic)");
    uint32_t version = skv_rd32(buf + 8);
    if (version != SKV_KVTC_CAL_VERSION && version != SKV_KVTC_CAL_VERSION_W) return cal_fail(err, "unknown version");
    for (int i = 0; i < 3; i++) dim[i] = skv_rd32(buf + 12 + 4 * i);
    if (!dims_ok(dim[0], dim[1], dim[2])) return cal_fail(err, "geometry out of range");
    if (!kvtc_rope_ok((int)skv_rd32(buf + 32), skv_rd32(buf + 36), skv_rdf32(buf + 40), dim[2]) || skv_rd32(buf + 44))
        return cal_fail(err, "bad RoPE fields");
    size_t want = SKV_KVTC_CAL_HDR + weights_len(version, dim[0]) + (size_t)dim[0] * 2 * dim[1] * (2 + dim[2]) * dim[2] * 4 + 8;
    if (len != want) return cal_fail(err, "length does not match the geometry (truncated?)");
    if (XXH3_64bits(buf, len - 8) != skv_rd64(buf + len - 8)) return cal_fail(err, "checksum mismatch (damaged)");
    return SKV_OK;
}

static int image_read(skv_kvtc_calib *c, const uint8_t *buf, skv_err *err)
{
    const uint8_t *p = buf + SKV_KVTC_CAL_HDR;
    size_t d = c->d;
    c->n_samples = skv_rd64(buf + 24);
    c->rope_style = (int)skv_rd32(buf + 32), c->rope_dim = skv_rd32(buf + 36), c->rope_base = skv_rdf32(buf + 40);
    if (skv_rd32(buf + 8) == SKV_KVTC_CAL_VERSION_W) {
        if (!(c->w = malloc((size_t)c->n_layer * 2 * sizeof *c->w))) return SKV_ERR_NOMEM;
        for (size_t i = 0; i < (size_t)c->n_layer * 2; i++, p += 4)
            if (!weight_ok(c->w[i] = skv_rdf32(p))) return cal_fail(err, "a step weight is outside [1/64, 64]");
    }
    for (size_t s = 0; s < c->n_series; s++) {
        for (size_t i = 0; i < d; i++, p += 4) c->mu[s * d + i] = skv_rdf32(p);
        for (size_t i = 0; i < d; i++, p += 4) c->eig[s * d + i] = skv_rdf32(p);
        for (size_t i = 0; i < d * d; i++, p += 4) c->basis[s * d * d + i] = skv_rdf32(p);
    }
    c->id = skv_rd64(p);
    for (size_t i = 0; i < c->n_series * d; i++)
        if (!isfinite(c->mu[i]) || !(c->eig[i] >= 0.0f)) return cal_fail(err, "a mean or eigenvalue is not finite");
    for (size_t i = 0; i < c->n_series * d * d; i++)
        if (!(fabsf(c->basis[i]) <= 1.0f)) return cal_fail(err, "a basis entry is outside [-1, 1]");
    return SKV_OK;
}

int skv_kvtc_calib_load(const uint8_t *buf, size_t len, skv_kvtc_calib **out, skv_err *err)
{
    uint32_t dim[3];
    *out = NULL;
    int rc = buf ? image_check(buf, len, dim, err) : SKV_ERR_INVALID_ARG;
    if (rc) return rc;
    skv_kvtc_calib *c = calloc(1, sizeof *c);
    rc = c ? calib_alloc(c, dim[0], dim[1], dim[2]) : SKV_ERR_NOMEM;
    if (!rc) rc = image_read(c, buf, err);
    if (rc) skv_kvtc_calib_free(c);
    else *out = c;
    return rc;
}
