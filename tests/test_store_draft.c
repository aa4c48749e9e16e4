/* Store-prefix drafts (issue 16): skv_store_draft proposes what followed the decoded
 * prefix in the store, and a speculative restore with it (SKV_DRAFT_EXTERN) gives exactly
 * the tokens and KV of a token-by-token restore while confirming the stored part in long
 * blocks. Also: drafts of a bad source (out-of-range ids, nonsense) change nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "test.h"

static skv_model *g_m;
static int32_t *g_tok;
static size_t g_n;

/* tokens restored + stats for one draft setting */
static int restore_with(const skv_session *s, int draft, skv_draft_fn fn, void *user, int32_t *tok, size_t cap,
                        skv_restore_stats *st, uint8_t dig[16])
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_restore_params p = {.verify = 1, .draft = draft, .draft_max = 64, .stats = st, .draft_fn = fn,
                            .draft_user = user};
    skv_ctx *c = NULL;
    int rc;
    cp.n_ctx = 512;
    if ((rc = skv_ctx_create(g_m, &cp, &c))) return rc;
    memset(st, 0, sizeof *st);
    rc = skv_session_restore_segment(s, g_m, 0, c, &p, tok, cap);
    if (!rc) rc = skv_ctx_kv_digest(c, skv_ctx_n_pos(c), dig);
    skv_ctx_free(c);
    return rc;
}

static size_t bad_source(void *user, const int32_t *hist, size_t n, int32_t *out, size_t max)
{
    (void)user;
    for (size_t i = 0; i < max; i++) out[i] = (int32_t)((n * 7919u + i * 104729u) % 4096u);
    if (max > 2 && hist[0] >= 0) out[max / 2] = n % 2 ? -5 : 1 << 30; /* out of range: cut there */
    return max + 3;                                                   /* and claims too many */
}

static void draft_follows_the_store(void)
{
    char dir[] = "/tmp/skv_store_draft_XXXXXX", err[512], cmd[600];
    skv_store *st = NULL;
    int32_t out[64];
    CHECK(mkdtemp(dir) != NULL);
    CHECK_MSG(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    CHECK(skv_store_put(st, "a", g_tok, 300, NULL) == SKV_OK);
    CHECK(skv_store_put(st, "b", g_tok, 120, NULL) == SKV_OK);
    /* inside the stored path: its continuation */
    size_t k = skv_store_draft(st, g_tok, 100, out, 64);
    CHECK_EQ_INT((int)k, 64);
    CHECK(memcmp(out, g_tok + 100, 64 * sizeof *out) == 0);
    /* near the end: only what is stored */
    CHECK_EQ_INT((int)skv_store_draft(st, g_tok, 290, out, 64), 10);
    /* a prefix the store does not hold, or nothing to give */
    int32_t other[3] = {g_tok[0], g_tok[1], (g_tok[2] + 1) % 4096};
    CHECK_EQ_INT((int)skv_store_draft(st, other, 3, out, 64), 0);
    CHECK_EQ_INT((int)skv_store_draft(st, g_tok, 300, out, 64), 0);
    CHECK_EQ_INT((int)skv_store_draft(NULL, g_tok, 10, out, 64), 0);
    CHECK_EQ_INT((int)skv_store_draft(st, g_tok, 10, out, 0), 0);

    /* a session sharing the first 250 stored tokens, then other text */
    int32_t *sess = malloc(400 * sizeof *sess), *t1 = malloc(512 * sizeof *t1), *t2 = malloc(512 * sizeof *t2);
    CHECK(sess && t1 && t2);
    memcpy(sess, g_tok, 250 * sizeof *sess);
    memcpy(sess + 250, g_tok + 600, 150 * sizeof *sess);
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    uint8_t *data = NULL, d1[16], d2[16];
    size_t size = 0;
    skv_session *s = NULL;
    skv_restore_stats s1, s2;
    ep.codec = SKV_CODEC_MODEL;
    ep.n_ctx = 512;
    CHECK(skv_encoder_create(g_m, &ep, &e, NULL, 0) == SKV_OK);
    CHECK(skv_encoder_append(e, sess, 400, NULL) == SKV_OK && skv_encoder_finish(e, &data, &size) == SKV_OK);
    skv_encoder_free(e);
    CHECK(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK);
    CHECK(restore_with(s, SKV_DRAFT_NONE, NULL, NULL, t1, 512, &s1, d1) == SKV_OK);
    CHECK(restore_with(s, SKV_DRAFT_EXTERN, skv_store_draft, st, t2, 512, &s2, d2) == SKV_OK);
    CHECK(memcmp(t1, sess, 400 * sizeof *t1) == 0 && memcmp(t2, sess, 400 * sizeof *t2) == 0);
    CHECK(memcmp(d1, d2, 16) == 0);
    CHECK_MSG(s2.n_accepted >= 240 && s2.n_passes < 200, "accepted %llu of %llu drafted, %llu passes",
              (unsigned long long)s2.n_accepted, (unsigned long long)s2.n_drafted, (unsigned long long)s2.n_passes);
    /* a bad source: same tokens and KV */
    CHECK(restore_with(s, SKV_DRAFT_EXTERN, bad_source, NULL, t2, 512, &s2, d2) == SKV_OK);
    CHECK(memcmp(t2, sess, 400 * sizeof *t2) == 0 && memcmp(d1, d2, 16) == 0);
    /* EXTERN needs a source */
    CHECK(restore_with(s, SKV_DRAFT_EXTERN, NULL, NULL, t2, 512, &s2, d2) == SKV_ERR_INVALID_ARG);
    skv_session_free(s);
    free(data);
    free(sess);
    free(t1);
    free(t2);
    skv_store_close(st);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    char err[512];
    static char text[200000];
    TEST_BEGIN("test_store_draft");
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    if (skv_model_load("models/kjv-4m.gguf", NULL, &g_m, err, sizeof err) != SKV_OK || len < 8000) {
        printf("FAIL test_store_draft: cannot load the bundled model or held-out text: %s\n", err);
        return 1;
    }
    g_tok = malloc((len + 16) * sizeof *g_tok);
    if (!g_tok || skv_tokenize(g_m, text, len, 1, g_tok, len + 16, &g_n) || g_n < 800) {
        printf("FAIL test_store_draft: tokenize\n");
        return 1;
    }
    RUN(draft_follows_the_store);
    free(g_tok);
    skv_model_free(g_m);
    TEST_END();
}
