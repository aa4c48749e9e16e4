/* A kvtc calibration of a model for the codec tests: the KV of one window of synthetic
 * token ids run through the model (not a held-out text: the tests need a valid
 * calibration, not a good one). */
#ifndef SKV_TEST_KVTC_FIXTURE_H
#define SKV_TEST_KVTC_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>

#include "container/kvtc.h"
#include "seqkv.h"

/* The image of a calibration of m (RoPE pairs) over n_pos ids seeded by seed; NULL on failure. */
static uint8_t *kvtc_fixture_cal(skv_model *m, int n_pos, uint32_t seed, size_t *len)
{
    skv_model_info mi;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    skv_kvtc_calib *cal = NULL;
    uint8_t *img = NULL;
    skv_model_get_info(m, &mi);
    size_t nf = (size_t)mi.n_layer * 2 * (size_t)mi.n_head_kv * (size_t)n_pos * (size_t)mi.head_dim;
    int32_t *tok = malloc((size_t)n_pos * sizeof *tok);
    float *kv = malloc(nf * sizeof *kv);
    cp.n_ctx = n_pos;
    for (int i = 0; tok && i < n_pos; i++) tok[i] = i ? (int32_t)(3 + (seed + (uint32_t)i * 2654435761u) % (uint32_t)(mi.n_vocab - 3)) : 1;
    int rc = tok && kv ? skv_ctx_create(m, &cp, &c) : SKV_ERR_NOMEM;
    if (!rc) rc = skv_ctx_prefill(c, tok, (size_t)n_pos, SKV_LOGITS_NONE, NULL);
    if (!rc) rc = skv_ctx_kv_read(c, 0, n_pos, kv);
    if (!rc) rc = skv_kvtc_calib_create((uint32_t)mi.n_layer, (uint32_t)mi.n_head_kv, (uint32_t)mi.head_dim, &cal);
    if (!rc) rc = skv_kvtc_calib_set_rope(cal, SKV_KVTC_ROPE_PAIRS, (uint32_t)mi.rope_dim, mi.rope_base);
    if (!rc) rc = skv_kvtc_calib_add(cal, kv, (size_t)n_pos);
    if (!rc) rc = skv_kvtc_calib_finish(cal);
    if (!rc) rc = skv_kvtc_calib_save(cal, &img, len);
    skv_kvtc_calib_free(cal);
    skv_ctx_free(c);
    free(tok), free(kv);
    return rc ? NULL : img;
}

#endif
