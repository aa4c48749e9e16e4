/* TurboQuant: codebooks, the QJL matrix, and the encoding of one vector
 * (MSE variant: norm + b-bit indices of the rotated unit vector; prod
 * variant: (b-1)-bit indices + the QJL signs of the residual). */
#include "quant/quant_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "quant/fbits.h"
#include "quant/tq_codebooks.h"
#include "seqkv.h"

int skv_tq_encode_one(const skv_quant_ctx *c, const float *x, uint8_t *out, skv_tq_scratch *s)
{
    size_t d = c->d, hdr = c->kind == KIND_TQP ? 4 : 2;
    float n2 = k_dot(c, x, x, d), norm, inv;
    uint16_t h;
    skv_bitw w;
    if (!skv_f32_finite(n2)) return skv_any_nonfinite(x, d) ? SKV_ERR_INVALID_ARG : SKV_ERR_RANGE;
    norm = sqrtf(n2);
    h = skv_f32_to_f16(norm);
    if (!skv_f16_finite(h)) return SKV_ERR_RANGE;
    memset(out, 0, c->bytes);
    if (h == 0) return SKV_OK; /* (near-)zero vector: canonical all-zero encoding */
    skv_wr16le(out, h);
    inv = 1.0f / norm;
    k_scale(c, x, inv, s->v, d);
    skv_quant_rotate_fwd(c, s->v, s->t);
    k_index(c, s->v, s->idx, d);
    w.p = out + hdr;
    w.acc = 0;
    w.n = 0;
    skv_bitw_put(&w, s->idx, d, c->bits);
    if (c->kind == KIND_TQP) {
        k_lookup(c, s->idx, s->r, d);
        for (size_t i = 0; i < d; i++) s->r[i] = s->v[i] - s->r[i];
        skv_wr16le(out + 2, skv_f32_to_f16(sqrtf(k_dot(c, s->r, s->r, d))));
        k_qjl_signs(c, s->r, s->z);
        skv_bitw_put(&w, s->z, d, 1);
    }
    skv_bitw_flush(&w);
    return SKV_OK;
}

int skv_tq_decode_one(const skv_quant_ctx *c, const uint8_t *in, float *y, skv_tq_scratch *s)
{
    size_t d = c->d, hdr = c->kind == KIND_TQP ? 4 : 2;
    uint16_t h = skv_rd16le(in);
    skv_bitr r;
    if (!skv_f16_finite(h) || (h & 0x8000u)) return SKV_ERR_FORMAT;
    if (h == 0) {
        memset(y, 0, d * sizeof *y);
        return SKV_OK;
    }
    r.p = in + hdr;
    r.acc = 0;
    r.n = 0;
    skv_bitr_get(&r, s->idx, d, c->bits);
    k_lookup(c, s->idx, s->v, d);
    if (c->kind == KIND_TQP) {
        uint16_t hg = skv_rd16le(in + 2);
        float k;
        if (!skv_f16_finite(hg) || (hg & 0x8000u)) return SKV_ERR_FORMAT;
        skv_bitr_get(&r, s->z, d, 1);
        k_qjl_accum(c, s->z, s->r);
        k = c->qjl_scale * skv_f16_to_f32(hg);
        for (size_t j = 0; j < d; j++) s->v[j] = s->v[j] + k * s->r[j];
    }
    if (!skv_bitr_pad_ok(&r)) return SKV_ERR_FORMAT;
    skv_quant_rotate_inv(c, s->v, s->t);
    k_scale(c, s->v, skv_f16_to_f32(h), y, d);
    return SKV_OK;
}

/* Row of the generated table for d (the Gaussian row if d is not tabulated). */
static int cb_row(size_t d)
{
    for (int i = 0; i < SKV_TQ_CB_ROWS - 1; i++)
        if (skv_tq_cb_dims[i] == d) return i;
    return SKV_TQ_CB_ROWS - 1;
}

static const int k_cb_off[5] = {0, 0, 2, 6, 14};

double skv_quant_tq_expected_mse(size_t d, int bits)
{
    if (d == 0 || bits < 1 || bits > 4) return -1.0;
    return skv_tq_cb_mse[cb_row(d)][bits - 1];
}

static void init_codebook(skv_quant_ctx *c)
{
    const float *t = skv_tq_cb[cb_row(c->d)] + k_cb_off[c->bits];
    float sd = sqrtf((float)c->d);
    c->levels = 1 << c->bits;
    for (int k = 0; k < c->levels; k++) c->cent[k] = t[k] / sd;
    for (int k = 0; k + 1 < c->levels; k++) c->bound[k] = (c->cent[k] + c->cent[k + 1]) * 0.5f;
}

/* S[i][j] = the (i*d + j)-th normal variate of the QJL stream, as float. */
static int init_qjl(skv_quant_ctx *c)
{
    uint64_t st = c->seed ^ TAG_QJL;
    double spare = 0.0;
    int has = 0;
    c->qjl_scale = SQRT_HALF_PI_F / (float)c->d;
    c->S = malloc(c->d * c->d * sizeof *c->S);
    if (!c->S) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < c->d * c->d; i++) c->S[i] = (float)skv_quant_gauss(&st, &spare, &has);
    return SKV_OK;
}

int skv_tq_ctx_init(skv_quant_ctx *c)
{
    int rc;
    init_codebook(c);
    if ((rc = skv_quant_rotation_init(c)) != SKV_OK) return rc;
    return c->kind == KIND_TQP ? init_qjl(c) : SKV_OK;
}
