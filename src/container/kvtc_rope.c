/* kvtc: K's rotary position encoding undone before the transform and redone after it
 * (kvtc.h). The angles come from the deterministic double math of core/detmath.h, so the
 * same table is built on every machine; it need not equal the engine's float tables bit
 * for bit (both coder sides use this one), only closely enough that the un-rotated keys are
 * alike across positions. */
#include "container/kvtc_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>

#include "core/detmath.h"

int kvtc_rope_ok(int style, uint32_t rope_dim, float base, uint32_t d)
{
    if (style == SKV_KVTC_ROPE_NONE) return rope_dim == 0 && base == 0.0f;
    return (style == SKV_KVTC_ROPE_PAIRS || style == SKV_KVTC_ROPE_HALVES) && rope_dim >= 2 && !(rope_dim & 1) &&
           rope_dim <= d && base > 1.0f && base < 1e30f;
}

double *kvtc_rope_table(const skv_kvtc_calib *c, size_t pos0, size_t n)
{
    if (c->rope_style == SKV_KVTC_ROPE_NONE) return NULL;
    size_t np = c->rope_dim / 2;
    double *tab = malloc(n * np * 2 * sizeof *tab);
    for (size_t i = 0; tab && i < np; i++) {
        double f = skv_det_pow((double)c->rope_base, -2.0 * (double)i / (double)c->rope_dim);
        for (size_t t = 0; t < n; t++) skv_det_sincos((double)(pos0 + t) * f, &tab[(t * np + i) * 2 + 1], &tab[(t * np + i) * 2]);
    }
    return tab;
}

/* Channels of pair i. */
static void pair_of(const skv_kvtc_calib *c, size_t i, size_t *a, size_t *b)
{
    if (c->rope_style == SKV_KVTC_ROPE_PAIRS) *a = 2 * i, *b = 2 * i + 1;
    else *a = i, *b = i + c->rope_dim / 2;
}

/* Rotates every pair of u at position t by the angle (sign +1) or its inverse (-1). */
static void rotate_pairs(const skv_kvtc_calib *c, const double *tab, size_t t, double sign, double *u)
{
    size_t np = c->rope_dim / 2;
    for (size_t i = 0; i < np; i++) {
        size_t a, b;
        pair_of(c, i, &a, &b);
        double cs = tab[(t * np + i) * 2], sn = sign * tab[(t * np + i) * 2 + 1], x = u[a], y = u[b];
        u[a] = x * cs - y * sn;
        u[b] = x * sn + y * cs;
    }
}

void kvtc_unrope(const skv_kvtc_calib *c, const double *tab, size_t t, const float *x, double *u)
{
    for (size_t i = 0; i < c->d; i++) u[i] = (double)x[i];
    if (tab) rotate_pairs(c, tab, t, -1.0, u);
}

void kvtc_rope(const skv_kvtc_calib *c, const double *tab, size_t t, double *u)
{
    if (tab) rotate_pairs(c, tab, t, 1.0, u);
}
