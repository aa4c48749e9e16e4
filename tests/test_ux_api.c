/* Issue 13 (what a user expects), the library side: skv_detokenize writes tokens as the CLI
 * did (BOS dropped, the SentencePiece space after BOS too) and gives texts back; the log
 * callback (skv_set_log) receives the warnings the library used to keep to itself. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static skv_model *g_m;
static skv_model_info g_info;

/* ---- skv_detokenize ------------------------------------------------------------------ */

/* The CLI's writer before skv_detokenize (tools/seqkv.c, cli_write_tokens at a65474b):
 * the reference the library function must match. */
static size_t old_cli_text(const int32_t *tok, size_t n, int after_bos, char *out)
{
    char buf[512];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (tok[i] == g_info.bos_id) {
            after_bos = 1;
            continue;
        }
        if (skv_token_piece(g_m, tok[i], buf, sizeof buf, &len) != SKV_OK) continue;
        size_t skip = after_bos && g_info.tokenizer_kind == SKV_TOKENIZER_KIND_SPM && len && buf[0] == ' ';
        memcpy(out + o, buf + skip, len - skip);
        o += len - skip;
        after_bos = 0;
    }
    return o;
}

static void test_detok_matches_cli(void)
{
    int32_t tok[200];
    static char want[200 * 512], got[200 * 512];
    unsigned s = 12345;
    for (int round = 0; round < 200; round++) {
        size_t n = (size_t)(round % 50) + 1, len = 0;
        for (size_t i = 0; i < n; i++) {
            s = s * 1103515245u + 12345u;
            tok[i] = (s >> 8) % 7 == 0 ? g_info.bos_id : (int32_t)((s >> 8) % (unsigned)g_info.n_vocab);
        }
        int flags = round & 1 ? SKV_DETOK_AFTER_BOS : 0;
        size_t wn = old_cli_text(tok, n, flags, want);
        CHECK(skv_detokenize(g_m, tok, n, flags, got, sizeof got, &len) == SKV_OK);
        CHECK_MSG(len == wn && !memcmp(got, want, wn) && got[len] == 0, "round %d: %zu vs %zu bytes", round, len, wn);
    }
}

static void test_detok_roundtrip(void)
{
    const char *texts[] = {"In the beginning God created the heaven and the earth.", " leading space", "two  spaces",
                           "line\nbreaks\n\n", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", ""};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        int32_t tok[256];
        char back[1024];
        size_t n = 0, len = 0, L = strlen(texts[k]);
        CHECK(skv_tokenize(g_m, texts[k], L, 1, tok, 256, &n) == SKV_OK);
        CHECK(skv_detokenize(g_m, tok, n, 0, back, sizeof back, &len) == SKV_OK);
        CHECK_MSG(len == L && !memcmp(back, texts[k], L), "'%s' came back as '%.*s'", texts[k], (int)len, back);
        /* in two parts: the second continues after the BOS of the first */
        size_t l1 = 0, l2 = 0;
        CHECK(skv_detokenize(g_m, tok, 1, 0, back, sizeof back, &l1) == SKV_OK);
        CHECK(skv_detokenize(g_m, tok + 1, n - 1, SKV_DETOK_AFTER_BOS, back, sizeof back, &l2) == SKV_OK);
        CHECK_MSG(l1 == 0 && l2 == L && !memcmp(back, texts[k], L), "parts of '%s'", texts[k]);
    }
}

static void test_detok_errors(void)
{
    int32_t tok[64];
    char small[4];
    size_t n = 0, len = 0, len2 = 0;
    const char *t = "And God said, Let there be light";
    CHECK(skv_tokenize(g_m, t, strlen(t), 1, tok, 64, &n) == SKV_OK);
    CHECK(skv_detokenize(g_m, tok, n, 0, NULL, 0, &len) == SKV_ERR_RANGE); /* a size query */
    CHECK(len == strlen(t));
    CHECK(skv_detokenize(g_m, tok, n, 0, small, sizeof small, &len2) == SKV_ERR_RANGE && len2 == len);
    CHECK(skv_detokenize(g_m, tok, n, 0, NULL, 5, &len) == SKV_ERR_INVALID_ARG);
    CHECK(skv_detokenize(NULL, tok, n, 0, small, 4, &len) == SKV_ERR_INVALID_ARG);
    CHECK(skv_detokenize(g_m, tok, n, 0, small, 4, NULL) == SKV_ERR_INVALID_ARG);
    tok[1] = g_info.n_vocab;
    CHECK(skv_detokenize(g_m, tok, n, 0, NULL, 0, &len) == SKV_ERR_INVALID_ARG);
    tok[1] = -1;
    CHECK(skv_detokenize(g_m, tok, n, 0, NULL, 0, &len) == SKV_ERR_INVALID_ARG);
    CHECK(skv_detokenize(g_m, NULL, 0, 0, small, sizeof small, &len) == SKV_OK && len == 0 && small[0] == 0);
}

/* ---- skv_set_log ----------------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    int n, level;
    char last[1024];
} log_rec;

static void record(void *user, int level, const char *msg)
{
    log_rec *r = user;
    pthread_mutex_lock(&r->mu);
    r->n++;
    r->level = level;
    snprintf(r->last, sizeof r->last, "%s", msg);
    pthread_mutex_unlock(&r->mu);
}

static int ctx_of(int n_ctx)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = n_ctx;
    int rc = skv_ctx_create(g_m, &p, &c);
    skv_ctx_free(c);
    return rc;
}

static void test_log_context_beyond_training(void)
{
    log_rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    char want[64];
    skv_set_log(record, &r);
    CHECK(ctx_of(g_info.n_ctx_train) == SKV_OK);
    CHECK_MSG(r.n == 0, "a context of the trained length logged '%s'", r.last);
    CHECK(ctx_of(g_info.n_ctx_train + 1) == SKV_OK);
    snprintf(want, sizeof want, "trained length %d", g_info.n_ctx_train);
    CHECK_MSG(r.n == 1 && r.level == SKV_LOG_WARN && strstr(r.last, want), "got %d messages, last '%s'", r.n, r.last);
    skv_set_log(NULL, NULL);
    CHECK(ctx_of(g_info.n_ctx_train + 1) == SKV_OK);
    CHECK(r.n == 1); /* switched off */
}

static void test_log_store_without_model_record(void)
{
    log_rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    char dir[128], err[512];
    skv_store *st = NULL;
    skv_store_model sm;
    skv_store_params p = skv_store_default_params(); /* model_path NULL: no record */
    snprintf(dir, sizeof dir, "/tmp/seqkv_test_ux_%d", (int)getpid());
    mkdir(dir, 0777);
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    skv_store_close(st);
    skv_set_log(record, &r);
    CHECK(skv_store_model_info(dir, &sm, err, sizeof err) == SKV_OK && sm.path[0] == 0);
    skv_set_log(NULL, NULL);
    CHECK_MSG(r.n == 1 && r.level == SKV_LOG_INFO && strstr(r.last, "no model-path record"), "got '%s'", r.last);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* Loggers and a thread that swaps the callback: every message reaches one of the two
 * recorders with its own user pointer (never one's function with the other's data). */
static log_rec g_a = {.mu = PTHREAD_MUTEX_INITIALIZER}, g_b = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *swapper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) skv_set_log(record, i & 1 ? &g_a : &g_b);
    return NULL;
}

static void *creator(void *arg)
{
    (void)arg;
    for (int i = 0; i < 40; i++) ctx_of(g_info.n_ctx_train + 8);
    return NULL;
}

static void test_log_threads(void)
{
    pthread_t t[3];
    skv_set_log(record, &g_a);
    pthread_create(&t[0], NULL, swapper, NULL);
    pthread_create(&t[1], NULL, creator, NULL);
    pthread_create(&t[2], NULL, creator, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    skv_set_log(NULL, NULL);
    CHECK_MSG(g_a.n + g_b.n == 80, "%d + %d messages of 80", g_a.n, g_b.n);
}

/* ---- the calls' old names (docs/api-history.md) --------------------------------------- */

/* Each old name is a working alias of its prefixed name: same status, same output. */
static void test_old_names(void)
{
    const char *text = "In the beginning God created the heaven and the earth.";
    int32_t a[64], b[64];
    size_t na = 0, nb = 0, la = 0, lb = 0;
    char pa[256], pb[256];
    CHECK(skv_model_tokenize(g_m, text, strlen(text), 1, a, 64, &na) == SKV_OK);
    CHECK(skv_tokenize(g_m, text, strlen(text), 1, b, 64, &nb) == SKV_OK);
    CHECK(na == nb && na > 2 && !memcmp(a, b, na * sizeof *a));
    CHECK(skv_model_detokenize(g_m, a, na, 0, pa, sizeof pa, &la) == SKV_OK);
    CHECK(skv_detokenize(g_m, a, na, 0, pb, sizeof pb, &lb) == SKV_OK);
    CHECK(la == lb && !memcmp(pa, pb, la) && la == strlen(text));
    CHECK(skv_model_token_piece(g_m, a[1], pa, sizeof pa, &la) == SKV_OK);
    CHECK(skv_token_piece(g_m, a[1], pb, sizeof pb, &lb) == SKV_OK);
    CHECK(la == lb && !memcmp(pa, pb, la));
    const char *ta = NULL, *tb = NULL;
    CHECK(skv_model_token_text(g_m, a[1], &ta, &la) == SKV_OK && skv_token_text(g_m, a[1], &tb, &lb) == SKV_OK);
    CHECK(ta == tb && la == lb);
    CHECK(skv_tokenize(g_m, text, strlen(text), 1, b, 1, &nb) == SKV_ERR_RANGE); /* errors alike too */
    CHECK(skv_model_tokenize(g_m, text, strlen(text), 1, b, 1, &nb) == SKV_ERR_RANGE);

    /* contexts: prefill + decode under either name give bit-identical logits and KV */
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c[4] = {0};
    float *la_ = malloc((size_t)g_info.n_vocab * sizeof(float)), *lb_ = malloc((size_t)g_info.n_vocab * sizeof(float));
    uint8_t da[16], db[16];
    cp.n_ctx = 128;
    for (int i = 0; i < 4; i++) CHECK(skv_ctx_create(g_m, &cp, &c[i]) == SKV_OK);
    if (!c[0] || !c[1] || !c[2] || !c[3] || !la_ || !lb_) goto out;
    CHECK(skv_ctx_prefill(c[0], a, na - 1, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_prefill(c[1], a, na - 1, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_ctx_decode(c[0], a[na - 1], la_) == SKV_OK);
    CHECK(skv_decode(c[1], a[na - 1], lb_) == SKV_OK);
    CHECK(!memcmp(la_, lb_, (size_t)g_info.n_vocab * sizeof(float)));
    CHECK(skv_ctx_kv_digest(c[0], skv_ctx_n_pos(c[0]), da) == SKV_OK);
    CHECK(skv_ctx_kv_digest(c[1], skv_ctx_n_pos(c[1]), db) == SKV_OK && !memcmp(da, db, 16));
    int32_t two[2] = {a[1], a[2]};
    CHECK(skv_ctx_decode_multi(c, two, 2, NULL) == SKV_OK);
    CHECK(skv_decode_multi(c + 2, two, 2, NULL) == SKV_OK);
    CHECK(skv_ctx_n_pos(c[2]) == 1 && skv_ctx_n_pos(c[3]) == 1 && skv_ctx_n_pos(c[0]) == (int)na + 1);
out:
    for (int i = 0; i < 4; i++) skv_ctx_free(c[i]);
    free(la_);
    free(lb_);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_ux_api");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_ux_api:setup: %s\n", err);
        return 1;
    }
    skv_model_get_info(g_m, &g_info);
    RUN(test_detok_matches_cli);
    RUN(test_detok_roundtrip);
    RUN(test_detok_errors);
    RUN(test_log_context_beyond_training);
    RUN(test_log_store_without_model_record);
    RUN(test_log_threads);
    RUN(test_old_names);
    skv_model_free(g_m);
    TEST_END();
}
