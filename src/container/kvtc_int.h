/* kvtc internals shared by kvtc.c (the stream) and kvtc_calib.c (calibrations). */
#ifndef SKV_KVTC_INT_H
#define SKV_KVTC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "container/kvtc.h"

#define SKV_KVTC_CAL_VERSION 1u
#define SKV_KVTC_VERSION 1u

struct skv_kvtc_calib {
    uint32_t n_layer, n_head_kv, d;
    size_t n_series;     /* n_layer * 2 * n_head_kv, canonical order */
    uint64_t n_samples;  /* positions accumulated */
    uint64_t id;         /* XXH3-64 of the file image (0 before finish) */
    float *mu;           /* [n_series][d] */
    float *eig;          /* [n_series][d] descending */
    float *basis;        /* [n_series][d components][d channels] */
    double *sum, *cross; /* accumulation only: [n_series][d], [n_series][d][d] (upper triangle) */
};

uint64_t kvtc_calib_image_id(const skv_kvtc_calib *c);

#endif
