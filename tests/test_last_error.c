/* The one error channel (include/seqkv.h "ERRORS"): after any failing public call,
 * skv_last_error() holds a non-empty message naming the problem, the same message the
 * handle (or the err buffer) of the older conventions keeps; it is per thread.
 * Bundled model only (models/kjv-4m.gguf), so a fresh clone runs it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static skv_model *g_m;

/* rc must be a failure; skv_last_error() must contain `needle`, differ from what it was
 * before the call (`before`), and equal `same` (the older channel's copy) when given. */
#define FAILS(rc, needle, same)                                                                          \
    do {                                                                                                 \
        int rc_ = (rc);                                                                                  \
        const char *le_ = skv_last_error();                                                              \
        CHECK_MSG(rc_ < 0, "%s returned %d", #rc, rc_);                                                  \
        CHECK_MSG(le_ && le_[0] && strstr(le_, (needle)), "%s: skv_last_error() = '%s', wanted '%s'", #rc, \
                  le_ ? le_ : "(null)", (needle));                                                       \
        CHECK_MSG(strcmp(le_, before) != 0, "%s left the earlier message '%s'", #rc, le_);               \
        const char *same_ = (same);                                                                      \
        CHECK_MSG(!same_ || !strcmp(same_, le_), "%s: '%s' vs the handle's '%s'", #rc, le_, same_);      \
        snprintf(before, sizeof before, "%s", le_);                                                      \
    } while (0)

static char before[1024];

static void model_and_ctx_calls(void)
{
    char err[512];
    skv_model *m = NULL;
    FAILS(skv_model_load("no-such-model.gguf", NULL, &m, NULL, 0), "no-such-model.gguf", NULL);
    snprintf(before, sizeof before, "x");
    FAILS(skv_model_load("no-such-model-2.gguf", NULL, &m, err, sizeof err), "no-such-model-2.gguf", err);

    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL, *c2 = NULL;
    p.n_ctx = -1;
    FAILS(skv_ctx_create(g_m, &p, &c), "out of range", skv_model_last_error(g_m));
    p = skv_ctx_default_params();
    p.n_ctx = 8;
    CHECK(skv_ctx_create(g_m, &p, &c) == SKV_OK && skv_ctx_create(g_m, &p, &c2) == SKV_OK);
    int32_t tok[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    FAILS(skv_ctx_prefill(c, tok, 16, SKV_LOGITS_NONE, NULL), "context full", skv_ctx_last_error(c));
    FAILS(skv_ctx_decode(c, -3, NULL), "outside the vocabulary", skv_ctx_last_error(c));
    skv_ctx *twice[2] = {c, c};
    FAILS(skv_ctx_decode_multi(twice, tok, 2, NULL), "appears twice", skv_ctx_last_error(c));
    FAILS(skv_ctx_truncate(c, -1), "negative position", skv_ctx_last_error(c));
    float kv[4] = {0};
    FAILS(skv_ctx_kv_write(c, 5, 1, kv), "out of range", skv_ctx_last_error(c));

    size_t n = 0, len = 0;
    const char *text = "In the beginning God created the heaven and the earth.";
    FAILS(skv_model_tokenize(g_m, text, strlen(text), 1, tok, 1, &n), "tokenize", NULL);
    FAILS(skv_tokenize(g_m, "", 0, 1, tok, 16, NULL), "tokenize", NULL); /* the old name too */
    FAILS(skv_model_token_piece(g_m, -1, err, sizeof err, &len), "token_piece", NULL);
    const char *t = NULL;
    FAILS(skv_model_token_text(g_m, 1 << 30, &t, &len), "token_text", NULL);
    FAILS(skv_kv_quant_check("k=nonsense", NULL, NULL, 0), "nonsense", NULL);
    FAILS(skv_kv_quant_check("k=nonsense2", NULL, err, sizeof err), "nonsense2", err);
    skv_kvdump *d = NULL;
    FAILS(skv_kvdump_read("no-such-dump.kv", &d, NULL, 0), "no-such-dump.kv", NULL);

    skv_restore_job jobs[2] = {{.ctx = c}, {.ctx = c}};
    FAILS(skv_session_restore_batch(g_m, jobs, 2, NULL), "same context", NULL);
    skv_ctx_free(c);
    skv_ctx_free(c2);
}

static void encoder_and_session_calls(void)
{
    char err[512];
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = 9999;
    FAILS(skv_encoder_create(g_m, &ep, &e, err, sizeof err), "codec", err);
    ep = skv_encoder_default_params();
    CHECK(skv_encoder_create(g_m, &ep, &e, NULL, 0) == SKV_OK);
    int32_t bad = -5;
    FAILS(skv_encoder_append(e, &bad, 1, NULL), "vocabulary", skv_encoder_last_error(e));
    skv_encoder_free(e);

    static const uint8_t junk[64] = "not a session file at all";
    skv_session *s = NULL;
    FAILS(skv_session_open(junk, sizeof junk, &s, NULL, 0), "", NULL);
    CHECK(skv_last_error()[0]);
}

static void store_calls(void)
{
    char err[512], dir[64];
    skv_store *st = NULL;
    snprintf(dir, sizeof dir, "/tmp/skv_lasterr_%d", (int)getpid());
    FAILS(skv_store_open(dir, g_m, 0, NULL, &st, NULL, 0), dir, NULL); /* no store there, no CREATE */
    FAILS(skv_store_open(dir, g_m, SKV_STORE_CREATE | SKV_STORE_READONLY, NULL, &st, err, sizeof err), "invalid",
          err);
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
    int32_t tok[4] = {1, 2, 3, 4};
    FAILS(skv_store_put(st, "", tok, 4, NULL), "name", skv_store_last_error(st));
    FAILS(skv_store_put(st, "ok", tok, 0, NULL), "token", skv_store_last_error(st));
    skv_store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void *other_thread(void *arg)
{
    (void)arg;
    skv_model *m = NULL;
    skv_model_load("other-thread.gguf", NULL, &m, NULL, 0);
    return NULL;
}

static void per_thread(void)
{
    skv_model *m = NULL;
    pthread_t th;
    CHECK(skv_model_load("this-thread.gguf", NULL, &m, NULL, 0) < 0);
    CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0);
    pthread_join(th, NULL);
    CHECK_MSG(strstr(skv_last_error(), "this-thread.gguf"), "another thread's failure reached this one: '%s'",
              skv_last_error());
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_last_error");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_last_error:setup: %s\n", err);
        return 1;
    }
    RUN(model_and_ctx_calls);
    RUN(encoder_and_session_calls);
    RUN(store_calls);
    RUN(per_thread);
    skv_model_free(g_m);
    TEST_END();
}
