/* Per-position KV sizes under the per-vector schemes of quant.c. */
#include <string.h>
#include "core/fpguard.h"

#include "engine/model.h"
#include "quant/kvquant.h"
#include "quant/quant.h"

int skv_kv_position_bytes(const skv_model *m, const char *scheme, double *bytes)
{
    size_t hd, vecs;
    if (!m || !scheme || !bytes) return SKV_ERR_INVALID_ARG;
    hd = (size_t)m->info.head_dim;
    vecs = 2 * (size_t)m->info.n_layer * (size_t)m->info.n_head_kv;
    if (!strcmp(scheme, "tq3.5")) {
        double a, b;
        int rc = skv_kv_position_bytes(m, "tq3", &a);
        if (!rc) rc = skv_kv_position_bytes(m, "tq4", &b);
        if (!rc) *bytes = (a + b) / 2.0;
        return rc;
    }
    int id = skv_quant_parse(scheme);
    if (id < 0 || skv_quant_check(id, hd) != SKV_OK) return SKV_ERR_INVALID_ARG;
    *bytes = (double)skv_quant_bytes(id, hd) * (double)vecs;
    return SKV_OK;
}

/* The model's part of the check (its head size); the spec's grammar is the quantizer's. */
static int skv_kv_quant_check_e(const char *spec, const skv_model *m, skv_err *err)
{
    return skv_kvquant_check(spec, m ? m->info.head_dim : -1, err);
}

int skv_kv_quant_check(const char *spec, const skv_model *m, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kv_quant_check_e(spec, m, &e), err, errcap);
}
