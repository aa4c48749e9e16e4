/* skv_ctx_layer0_kv (src/engine/forward.c, engine/layer0.h): layer 0's K/V regenerated from
 * the tokens and positions alone equal, bit for bit, the layer-0 rows of a full prefill --
 * at any offset, in any batch size, on the bundled model and stories260K -- and bad
 * arguments are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layer0.h"
#include "seqkv.h"
#include "test.h"

static void check_model(skv_model *m, int max_batch)
{
    skv_model_info mi;
    skv_model_get_info(m, &mi);
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL, *g = NULL;
    size_t n = 160, H = (size_t)mi.n_head_kv, hd = (size_t)mi.head_dim, l0 = 2 * H * n * hd;
    int32_t tok[160];
    for (size_t t = 0; t < n; t++) tok[t] = (int32_t)((t * 7919 + 13) % (size_t)mi.n_vocab);
    cp.n_ctx = 256;
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &c), SKV_OK);
    cp.max_batch = max_batch;
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &g), SKV_OK);
    float *full = malloc((size_t)mi.n_layer * l0 * sizeof *full), *kv = malloc(l0 * sizeof *kv);
    CHECK_EQ_INT(skv_prefill(c, tok, n, SKV_LOGITS_NONE, NULL), SKV_OK);
    CHECK_EQ_INT(skv_ctx_kv_read(c, 0, (int)n, full), SKV_OK);
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, tok, n, 0, kv), SKV_OK);
    CHECK(memcmp(full, kv, l0 * sizeof *kv) == 0);
    CHECK_EQ_INT(skv_ctx_n_pos(g), 0);
    /* positions 100..159 alone, at their offset */
    size_t k = 60, p0 = 100;
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, tok + p0, k, (int)p0, kv), SKV_OK);
    for (size_t b = 0; b < 2 * H; b++)
        CHECK(memcmp(full + (b * n + p0) * hd, kv + b * k * hd, k * hd * sizeof *kv) == 0);
    int32_t bad = mi.n_vocab;
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, &bad, 1, 0, kv), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, tok, 1, -1, kv), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, tok, 2, 255, kv), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, tok, 1, 257, kv), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_ctx_layer0_kv(g, tok, 1, 0, NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_ctx_layer0_kv(NULL, tok, 1, 0, kv), SKV_ERR_INVALID_ARG);
    free(full), free(kv);
    skv_ctx_free(c);
    skv_ctx_free(g);
}

static void bundled_model(void)
{
    skv_model *m = NULL;
    if (skv_model_load("models/kjv-4m.gguf", NULL, &m, NULL, 0)) SKIP("models/kjv-4m.gguf not loadable");
    check_model(m, 0);
    check_model(m, 7);
    skv_model_free(m);
}

static void stories260k(void)
{
    const char *dir = test_shared_dir();
    char path[1024];
    skv_model *m = NULL;
    if (!dir) SKIP("../shared/models/stories260K not available");
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", dir);
    if (skv_model_load(path, NULL, &m, NULL, 0)) SKIP("stories260K not loadable");
    check_model(m, 0);
    check_model(m, 3);
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_layer0");
    RUN(bundled_model);
    RUN(stories260k);
    TEST_END();
}
