/* The error convention of include/seqkv.h on the calls made through a model: skv_ctx_create
 * keeps its message on the model, per thread, cleared by the next successful create.
 * Bundled model only (models/kjv-4m.gguf), so a fresh clone runs it. */
#include <pthread.h>
#include <string.h>

#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static skv_model *g_m;

static void bad_params_say_why(void)
{
    CHECK(g_m);
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = -1;
    CHECK_EQ_INT(skv_ctx_create(g_m, &p, &c), SKV_ERR_INVALID_ARG);
    CHECK(c == NULL);
    CHECK_MSG(strstr(skv_model_last_error(g_m), "out of range"), "message: '%s'", skv_model_last_error(g_m));
    p = skv_ctx_default_params();
    p.kv_quant = "k=nonsense";
    CHECK(skv_ctx_create(g_m, &p, &c) != SKV_OK);
    CHECK_MSG(strstr(skv_model_last_error(g_m), "kv_quant"), "message: '%s'", skv_model_last_error(g_m));
}

static void success_clears(void)
{
    CHECK(g_m);
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_threads = -5;
    CHECK(skv_ctx_create(g_m, &p, &c) != SKV_OK);
    CHECK(skv_model_last_error(g_m)[0]);
    CHECK_EQ_INT(skv_ctx_create(g_m, NULL, &c), SKV_OK);
    CHECK_MSG(!skv_model_last_error(g_m)[0], "message left: '%s'", skv_model_last_error(g_m));
    skv_ctx_free(c);
    CHECK(skv_model_last_error(NULL) != NULL);
}

static void *create_ok(void *arg)
{
    skv_ctx *c = NULL;
    int *ok = arg;
    *ok = skv_ctx_create(g_m, NULL, &c) == SKV_OK && !skv_model_last_error(g_m)[0];
    skv_ctx_free(c);
    return NULL;
}

/* A failure on this thread is not cleared by another thread's success. */
static void message_is_per_thread(void)
{
    CHECK(g_m);
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.max_batch = -1;
    CHECK(skv_ctx_create(g_m, &p, &c) != SKV_OK);
    pthread_t t;
    int ok = 0;
    CHECK(pthread_create(&t, NULL, create_ok, &ok) == 0);
    pthread_join(t, NULL);
    CHECK(ok);
    CHECK_MSG(strstr(skv_model_last_error(g_m), "out of range"), "message: '%s'", skv_model_last_error(g_m));
}

int main(void)
{
    TEST_BEGIN("test_errors");
    char err[256] = "";
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err)) fprintf(stderr, "%s: %s\n", MODEL, err);
    RUN(bad_params_say_why);
    RUN(success_clears);
    RUN(message_is_per_thread);
    skv_model_free(g_m);
    TEST_END();
}
