/* A put from work already done (skv_ctx_prefill_surprisal + skv_store_put_kv: what a
 * server's slot hands the store instead of having it run the model again):
 *   - surprisal_matches_logits_all: skv_ctx_prefill_surprisal gives, bit for bit, the
 *     surprisals of SKV_LOGITS_ALL's rows, the same last row and the same KV, in chunks
 *     that cross its scratch blocks (64 rows) and the context's max_batch;
 *   - hidden_then_surprisal: skv_ctx_prefill_hidden then skv_ctx_hidden_surprisal on
 *     another context give the same, bit for bit;
 *   - put_kv_same_store: sessions put with skv_store_put in one store and with
 *     skv_store_put_kv (KV read from a context, surprisals from the prefill, a later turn
 *     giving only its own positions' surprisals) in another: the same session digests,
 *     trie, materialised KV, surprisal totals; every get verified; no model run (n_given);
 *   - put_kv_falls_back: surprisals that start past the store's longest stored prefix:
 *     the put runs the model itself (n_given 0) and stores the same;
 *   - put_kv_errors: missing KV or surprisals, `from` past the tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define N_TEXT 4000

static skv_model *g_m;
static skv_model_info g_mi;
static int32_t g_text[N_TEXT];
static size_t g_n_text;
static char g_root[256];

static skv_ctx *new_ctx(int max_batch)
{
    skv_ctx_params cp = skv_ctx_default_params();
    cp.max_batch = max_batch;
    skv_ctx *c = NULL;
    return skv_ctx_create(g_m, &cp, &c) == SKV_OK ? c : NULL;
}

static void test_surprisal_matches_logits_all(void)
{
    const size_t n = 300, V = (size_t)g_mi.n_vocab;
    float *all = malloc(n * V * sizeof *all), *sur = malloc(n * sizeof *sur), *last = malloc(V * sizeof *last);
    skv_ctx *a = new_ctx(0), *b = new_ctx(48);
    uint8_t da[16], db[16];
    CHECK(all && sur && last && a && b);
    CHECK(skv_ctx_prefill(a, g_text, n, SKV_LOGITS_ALL, all) == SKV_OK);
    /* chunks 1, 70 (crossing a scratch block and max_batch), then the rest */
    size_t cuts[] = {0, 1, 71, n};
    for (int k = 0; k < 3; k++) {
        size_t c0 = cuts[k], c1 = cuts[k + 1];
        CHECK(skv_ctx_prefill_surprisal(b, g_text + c0, c1 - c0, sur + c0, last) == SKV_OK);
        if (c1 < n) { /* the chunk's last row predicts the next chunk's first token */
            sur[c1 - 1] = (float)skv_token_bits(last, (int)V, g_text[c1]);
        }
    }
    for (size_t i = 0; i + 1 < n; i++) {
        float want = (float)skv_token_bits(all + i * V, (int)V, g_text[i + 1]);
        CHECK_MSG(memcmp(&want, &sur[i], sizeof want) == 0, "row %zu: %.9g != %.9g", i, want, sur[i]);
    }
    CHECK(memcmp(last, all + (n - 1) * V, V * sizeof *last) == 0);
    CHECK(skv_ctx_kv_digest(a, (int)n, da) == SKV_OK && skv_ctx_kv_digest(b, (int)n, db) == SKV_OK);
    CHECK(memcmp(da, db, 16) == 0);
    CHECK(skv_ctx_prefill_surprisal(b, g_text, 0, NULL, NULL) == SKV_OK); /* nothing: nothing written */
    CHECK(skv_ctx_prefill_surprisal(b, g_text, 3, NULL, NULL) == SKV_ERR_INVALID_ARG);
    free(all), free(sur), free(last);
    skv_ctx_free(a), skv_ctx_free(b);
}

/* skv_ctx_prefill_hidden + skv_ctx_hidden_surprisal (the surprisals computed later, on
 * another context with one thread and a small batch): the same last row, surprisals and
 * KV as SKV_LOGITS_ALL, bit for bit, in chunks that cross the scratch blocks and max_batch. */
static void test_hidden_then_surprisal(void)
{
    const size_t n = 300, V = (size_t)g_mi.n_vocab, D = (size_t)g_mi.n_embd;
    float *all = malloc(n * V * sizeof *all), *hid = malloc(n * D * sizeof *hid), *sur = malloc(n * sizeof *sur),
          *last = malloc(V * sizeof *last);
    skv_ctx *a = new_ctx(0), *b = new_ctx(48), *w = new_ctx(5);
    uint8_t da[16], db[16];
    CHECK(all && hid && sur && last && a && b && w);
    CHECK(skv_ctx_prefill(a, g_text, n, SKV_LOGITS_ALL, all) == SKV_OK);
    size_t cuts[] = {0, 1, 71, n};
    for (int k = 0; k < 3; k++) {
        CHECK(skv_ctx_prefill_hidden(b, g_text + cuts[k], cuts[k + 1] - cuts[k], hid + cuts[k] * D, last) == SKV_OK);
        CHECK_MSG(memcmp(last, all + (cuts[k + 1] - 1) * V, V * sizeof *last) == 0, "chunk %d's last row", k);
    }
    CHECK(skv_ctx_hidden_surprisal(w, hid, 70, g_text + 1, sur) == SKV_OK); /* two calls, 70 + 229 rows */
    CHECK(skv_ctx_hidden_surprisal(w, hid + 70 * D, n - 71, g_text + 71, sur + 70) == SKV_OK);
    for (size_t i = 0; i + 1 < n; i++) {
        float want = (float)skv_token_bits(all + i * V, (int)V, g_text[i + 1]);
        CHECK_MSG(memcmp(&want, &sur[i], sizeof want) == 0, "row %zu: %.9g != %.9g", i, want, sur[i]);
    }
    CHECK(skv_ctx_n_pos(w) == 0); /* no KV touched */
    CHECK(skv_ctx_kv_digest(a, (int)n, da) == SKV_OK && skv_ctx_kv_digest(b, (int)n, db) == SKV_OK);
    CHECK(memcmp(da, db, 16) == 0);
    int32_t bad = (int32_t)V;
    CHECK(skv_ctx_hidden_surprisal(w, hid, 1, &bad, sur) == SKV_ERR_INVALID_ARG);
    CHECK(skv_ctx_hidden_surprisal(w, NULL, 1, g_text, sur) == SKV_ERR_INVALID_ARG);
    CHECK(skv_ctx_hidden_surprisal(w, NULL, 0, NULL, NULL) == SKV_OK);
    free(all), free(hid), free(sur), free(last);
    skv_ctx_free(a), skv_ctx_free(b), skv_ctx_free(w);
}

typedef struct sess {
    char name[16];
    const int32_t *tok;
    size_t n;
    size_t from; /* put_kv gives surprisals from here (a later turn of an earlier session) */
} sess;

/* Five conversations: two turns of one (the second extends the first), a branch of it, and
 * two unrelated texts. */
static size_t make_sessions(sess *s)
{
    static int32_t branch[200];
    memcpy(branch, g_text, 90 * sizeof *branch);
    memcpy(branch + 90, g_text + 2000, 110 * sizeof *branch);
    s[0] = (sess){"turn1", g_text, 120, 0};
    s[1] = (sess){"turn2", g_text, 260, 120};
    s[2] = (sess){"branch", branch, 200, 90};
    s[3] = (sess){"other", g_text + 1000, 150, 0};
    s[4] = (sess){"short", g_text + 3000, 1, 0};
    return 5;
}

/* put_kv of s the way a server slot does it: the positions from `from` on were just run
 * (the one before them again, for the first of their surprisals), the KV read out whole. */
static int put_like_a_slot(skv_store *st, const sess *s, size_t from, skv_store_put_report *r)
{
    skv_ctx *c = new_ctx(0);
    size_t a = from ? from - 1 : 0, per = 0;
    float *sur = calloc(s->n, sizeof *sur), *kv = NULL;
    int rc = c && sur ? SKV_OK : SKV_ERR_NOMEM;
    if (!rc) rc = skv_ctx_prefill(c, s->tok, a, SKV_LOGITS_NONE, NULL);
    if (!rc) rc = skv_ctx_prefill_surprisal(c, s->tok + a, s->n - a, sur + a + 1, NULL);
    if (!rc) {
        per = (size_t)g_mi.n_layer * 2 * (size_t)g_mi.n_head_kv * (size_t)g_mi.head_dim;
        kv = malloc(per * s->n * sizeof *kv);
        rc = kv ? skv_ctx_kv_read(c, 0, (int)s->n, kv) : SKV_ERR_NOMEM;
    }
    for (size_t i = 0; i < from && !rc; i++) sur[i] = 1e30f; /* never read: they would show */
    if (!rc) rc = skv_store_put_kv(st, s->name, s->tok, s->n, kv, sur, from, r);
    free(sur), free(kv);
    skv_ctx_free(c);
    return rc;
}

typedef struct listing {
    char names[8][16];
    uint8_t digest[8][16];
    uint32_t n_tok[8];
    int n;
} listing;

static int list_cb(void *u, const skv_store_session_info *s)
{
    listing *l = u;
    if (l->n == 8) return 1;
    snprintf(l->names[l->n], sizeof l->names[0], "%s", s->name);
    memcpy(l->digest[l->n], s->digest, 16);
    l->n_tok[l->n++] = s->n_tokens;
    return 0;
}

static skv_store *open_store(const char *name)
{
    char dir[400], err[512];
    skv_store *st = NULL;
    skv_store_params p = skv_store_default_params();
    p.budget = 64 << 20;
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    if (skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) != SKV_OK) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return st;
}

/* The two stores hold the same: sessions, digests, trie, materialised KV, surprisal totals. */
static int same_stores(skv_store *a, skv_store *b, char *why, size_t cap)
{
    listing la = {0}, lb = {0};
    skv_store_stats sa, sb;
    if (skv_store_list(a, list_cb, &la) || skv_store_list(b, list_cb, &lb))
        return snprintf(why, cap, "list failed"), 0;
    if (la.n != lb.n || memcmp(la.names, lb.names, sizeof la.names) || memcmp(la.digest, lb.digest, sizeof la.digest) ||
        memcmp(la.n_tok, lb.n_tok, sizeof la.n_tok))
        return snprintf(why, cap, "sessions differ (%d vs %d)", la.n, lb.n), 0;
    if (skv_store_get_stats(a, &sa) || skv_store_get_stats(b, &sb)) return snprintf(why, cap, "stats failed"), 0;
    if (sa.n_nodes != sb.n_nodes || sa.unique_positions != sb.unique_positions || sa.mat_nodes != sb.mat_nodes ||
        sa.mat_positions != sb.mat_positions || sa.token_floor_bits != sb.token_floor_bits)
        return snprintf(why, cap, "trie differs: nodes %llu/%llu, positions %llu/%llu, mat %llu/%llu, bits %.9g/%.9g",
                        (unsigned long long)sa.n_nodes, (unsigned long long)sb.n_nodes,
                        (unsigned long long)sa.unique_positions, (unsigned long long)sb.unique_positions,
                        (unsigned long long)sa.mat_nodes, (unsigned long long)sb.mat_nodes, sa.token_floor_bits,
                        sb.token_floor_bits), 0;
    return 1;
}

static int get_verified(skv_store *st, const sess *s)
{
    skv_ctx *c = new_ctx(0);
    int32_t tok[400];
    size_t n = 0;
    skv_store_get_report r;
    int rc = c ? skv_store_get(st, s->name, c, SKV_STORE_VERIFY, tok, 400, &n, &r) : SKV_ERR_NOMEM;
    int ok = !rc && r.verified && n == s->n && !memcmp(tok, s->tok, n * sizeof *tok);
    skv_ctx_free(c);
    return ok;
}

static void test_put_kv_same_store(void)
{
    sess s[8];
    size_t ns = make_sessions(s);
    skv_store *a = open_store("model"), *b = open_store("given");
    char why[300];
    CHECK(a && b);
    for (size_t i = 0; i < ns; i++) {
        skv_store_put_report ra, rb;
        CHECK_MSG(skv_store_put(a, s[i].name, s[i].tok, s[i].n, &ra) == SKV_OK, "%s", skv_store_last_error(a));
        CHECK_MSG(put_like_a_slot(b, &s[i], s[i].from, &rb) == SKV_OK, "%s: %s", s[i].name, skv_store_last_error(b));
        CHECK_MSG(rb.n_given == s[i].n && rb.n_computed == 0, "%s: %u given, %u computed", s[i].name, rb.n_given,
                  rb.n_computed);
        CHECK_MSG(ra.bits == rb.bits && ra.n_shared == rb.n_shared && ra.n_materialised == rb.n_materialised,
                  "%s: bits %.9g vs %.9g, shared %u vs %u", s[i].name, ra.bits, rb.bits, ra.n_shared, rb.n_shared);
        CHECK_MSG(same_stores(a, b, why, sizeof why), "after %s: %s", s[i].name, why);
    }
    for (size_t i = 0; i < ns; i++) CHECK_MSG(get_verified(b, &s[i]), "get %s", s[i].name);
    /* a retry of a put that committed: a no-op, as skv_store_put's */
    skv_store_put_report r;
    CHECK(put_like_a_slot(b, &s[1], s[1].from, &r) == SKV_OK && r.existed);
    skv_store_close(a), skv_store_close(b);
}

static void test_put_kv_falls_back(void)
{
    sess s[8];
    make_sessions(s);
    skv_store *a = open_store("fb_model"), *b = open_store("fb_given");
    skv_store_put_report ra, rb;
    char why[300];
    CHECK(a && b);
    /* turn2 alone, its surprisals given only from 120 on: the store holds none of it */
    CHECK(skv_store_put(a, "turn2", s[1].tok, s[1].n, &ra) == SKV_OK);
    CHECK_MSG(put_like_a_slot(b, &s[1], 120, &rb) == SKV_OK, "%s", skv_store_last_error(b));
    CHECK_MSG(rb.n_given == 0 && rb.n_computed > 0, "%u given, %u computed", rb.n_given, rb.n_computed);
    CHECK(ra.bits == rb.bits);
    CHECK_MSG(same_stores(a, b, why, sizeof why), "%s", why);
    CHECK(get_verified(b, &s[1]));
    skv_store_close(a), skv_store_close(b);
}

static void test_put_kv_errors(void)
{
    skv_store *st = open_store("errors");
    float kv[1] = {0}, sur[4] = {0};
    CHECK(st);
    CHECK(skv_store_put_kv(NULL, "x", g_text, 4, kv, sur, 0, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_store_put_kv(st, "x", g_text, 4, NULL, sur, 0, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_store_last_error(st), "needs the KV") != NULL);
    CHECK(skv_store_put_kv(st, "x", g_text, 4, kv, NULL, 0, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_store_put_kv(st, "x", g_text, 4, kv, sur, 5, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_store_put_kv(st, "", g_text, 4, kv, sur, 0, NULL) == SKV_ERR_INVALID_ARG); /* the name, as put */
    skv_store_close(st);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_store_put_kv");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_store_put_kv:setup: %s\n", err);
        return 1;
    }
    skv_model_get_info(g_m, &g_mi);
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    char *text = malloc(14001);
    size_t len = f && text ? fread(text, 1, 14000, f) : 0;
    if (f) fclose(f);
    if (!text || skv_tokenize(g_m, text, len, 1, g_text, N_TEXT, &g_n_text) || g_n_text < 3200) {
        printf("FAIL test_store_put_kv:setup: cannot tokenize the held-out text\n");
        return 1;
    }
    free(text);
    snprintf(g_root, sizeof g_root, "/tmp/seqkv_test_put_kv_%d", (int)getpid());
    mkdir(g_root, 0700);
    RUN(test_surprisal_matches_logits_all);
    RUN(test_hidden_then_surprisal);
    RUN(test_put_kv_same_store);
    RUN(test_put_kv_falls_back);
    RUN(test_put_kv_errors);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_root);
    skv_model_free(g_m);
    TEST_END();
}
