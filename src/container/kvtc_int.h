/* kvtc internals shared by kvtc.c (the stream) and kvtc_calib.c (calibrations). */
#ifndef SKV_KVTC_INT_H
#define SKV_KVTC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "container/kvtc.h"

#define SKV_KVTC_CAL_VERSION 1u  /* without step weights */
#define SKV_KVTC_CAL_VERSION_W 2u /* with step weights (skv_kvtc_calib_set_weights) */
#define SKV_KVTC_VERSION 1u

struct skv_kvtc_calib {
    uint32_t n_layer, n_head_kv, d;
    size_t n_series;     /* n_layer * 2 * n_head_kv, canonical order */
    uint64_t n_samples;  /* positions accumulated */
    uint64_t id;         /* XXH3-64 of the file image (0 before finish) */
    int rope_style;      /* SKV_KVTC_ROPE_* */
    uint32_t rope_dim;
    float rope_base;
    float *mu;           /* [n_series][d] */
    float *eig;          /* [n_series][d] descending */
    float *basis;        /* [n_series][d components][d channels] */
    float *w;            /* [n_layer * 2] step weights of each (layer, kind); NULL: all 1 (a version 1 file) */
    double *sum, *cross; /* accumulation only: [n_series][d], [n_series][d][d] (upper triangle) */
};

uint64_t kvtc_calib_image_id(const skv_kvtc_calib *c);
int kvtc_rope_ok(int style, uint32_t rope_dim, float base, uint32_t d);

/* kvtc_rope.c: cos/sin of every (position pos0 + t, pair) of a calibration's RoPE, t < n;
 * NULL for none. */
double *kvtc_rope_table(const skv_kvtc_calib *c, size_t pos0, size_t n);
/* x (d floats, position t) -> u (d doubles) with K's rotation undone (tab NULL: a copy). */
void kvtc_unrope(const skv_kvtc_calib *c, const double *tab, size_t t, const float *x, double *u);
/* u rotated by position t's angles in place (tab NULL: nothing). */
void kvtc_rope(const skv_kvtc_calib *c, const double *tab, size_t t, double *u);

#endif
