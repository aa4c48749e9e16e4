/* The session store (src/store/store.c) on the bundled model: bit-identical restores with
 * shared prefixes, splits, eviction and reopening; remove + gc; match; wrong model;
 * corrupt and foreign files; concurrent readers; SIGKILLed writers. */
#include <errno.h>
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "seqkv.h"
#include "test.h"

double skv_now(void); /* src/core/util.h */

#define MODEL "models/kjv-4m.gguf"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static skv_model *g_m;
static int32_t *g_text; /* held-out KJV tokens */
static size_t g_n_text;
static char g_root[256];

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static void store_dir(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", g_root, name);
    rm_rf(buf);
}

static skv_ctx *new_ctx(void)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 256;
    if (skv_ctx_create(g_m, &p, &c) != SKV_OK) return NULL;
    return c;
}

/* Digest of a fresh run of tokens. */
static int fresh_digest(const int32_t *t, size_t n, uint8_t d[16])
{
    skv_ctx *c = new_ctx();
    int rc = c ? skv_prefill(c, t, n, SKV_LOGITS_NONE, NULL) : SKV_ERR_NOMEM;
    if (!rc) rc = skv_ctx_kv_digest(c, (int)n, d);
    skv_ctx_free(c);
    return rc;
}

/* A session: text[off .. off+n) after a shared opening of `shared` tokens of the text. */
static size_t make_session(int32_t *out, size_t shared, size_t off, size_t n)
{
    memcpy(out, g_text, shared * sizeof *out);
    memcpy(out + shared, g_text + off, n * sizeof *out);
    return shared + n;
}

typedef struct {
    char name[32];
    int32_t tok[256];
    size_t n;
} sess;

/* get(name) must give the tokens and the KV of a fresh run. */
static int check_get(skv_store *st, const sess *s, skv_store_get_report *rep)
{
    skv_ctx *c = new_ctx();
    int32_t tok[256];
    size_t n = 0;
    uint8_t want[16], got[16];
    int rc = c ? skv_store_get(st, s->name, c, SKV_STORE_VERIFY, tok, 256, &n, rep) : SKV_ERR_NOMEM;
    if (!rc) rc = skv_ctx_kv_digest(c, (int)n, got);
    if (!rc) rc = fresh_digest(s->tok, s->n, want);
    if (!rc && (n != s->n || memcmp(tok, s->tok, n * sizeof *tok) || memcmp(got, want, 16))) rc = SKV_ERR_MISMATCH;
    if (rc) fprintf(stderr, "get %s: %d %s\n", s->name, rc, skv_store_last_error(st));
    skv_ctx_free(c);
    return rc;
}

static void build_sessions(sess *s, int k)
{
    /* shared opening of 40 tokens; sessions branch, some inside an edge */
    for (int i = 0; i < k; i++) {
        snprintf(s[i].name, sizeof s[i].name, "s%d", i);
        size_t shared = i == 3 ? 25 : (i == 4 ? 40 : 40 + (size_t)(i % 2) * 10);
        s[i].n = make_session(s[i].tok, shared, 100 + 37 * (size_t)i, 20 + (size_t)i * 3);
    }
    /* s5 = a prefix of s1 (ends inside s1's edge), s6 = s0 plus more (continues s0) */
    s[5].n = 47;
    memcpy(s[5].tok, s[1].tok, 47 * sizeof(int32_t));
    s[6].n = s[0].n + 15;
    memcpy(s[6].tok, s[0].tok, s[0].n * sizeof(int32_t));
    memcpy(s[6].tok + s[0].n, g_text + 900, 15 * sizeof(int32_t));
}

static void test_put_get(void)
{
    char dir[300], err[512];
    sess s[8];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    skv_store_get_report r;
    skv_store_put_report pr;
    store_dir(dir, sizeof dir, "putget");
    build_sessions(s, 8);
    p.budget = 64 << 20;
    CHECK_MSG(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK, "%s", err);
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(skv_store_put(st, s[i].name, s[i].tok, s[i].n, &pr) == SKV_OK, "put %d: %s", i,
                  skv_store_last_error(st));
        if (i == 1) CHECK_EQ_INT(pr.n_shared, 40);
    }
    CHECK(skv_store_put(st, "s0", s[0].tok, s[0].n, NULL) == SKV_ERR_INVALID_ARG); /* duplicate name */
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(check_get(st, &s[i], &r) == SKV_OK, "session %d", i);
        CHECK(r.verified == 1 && r.n_loaded + r.n_computed == s[i].n);
        CHECK_MSG(r.n_loaded == s[i].n, "session %d: with a large budget everything loads (%u of %zu)", i,
                  r.n_loaded, s[i].n);
    }
    skv_store_stats stt;
    CHECK(skv_store_get_stats(st, &stt) == SKV_OK);
    CHECK_EQ_INT(stt.n_sessions, 8);
    size_t total = 0;
    for (int i = 0; i < 8; i++) total += s[i].n;
    CHECK_EQ_INT(stt.session_tokens, total);
    CHECK(stt.unique_positions < total && stt.dedup_ratio > 1.0);
    /* eviction: a tiny budget demotes everything, restores recompute and stay exact */
    skv_store_gc_report g;
    CHECK(skv_store_set_budget(st, 0) == SKV_OK);
    CHECK(skv_store_gc(st, &g) == SKV_OK);
    CHECK(g.n_demoted > 0 && g.mat_bytes == 0);
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(check_get(st, &s[i], &r) == SKV_OK, "after eviction, session %d", i);
        CHECK_EQ_INT(r.n_loaded, 0);
    }
    /* a middle budget: part materialised; reopen and restore again */
    CHECK(skv_store_set_budget(st, 400 << 10) == SKV_OK);
    sess extra = s[7];
    snprintf(extra.name, sizeof extra.name, "extra");
    extra.n = make_session(extra.tok, 40, 1500, 30);
    CHECK(skv_store_put(st, "extra", extra.tok, extra.n, &pr) == SKV_OK);
    CHECK(pr.n_materialised > 0);
    CHECK(skv_store_get_stats(st, &stt) == SKV_OK);
    CHECK(stt.mat_bytes > 0 && stt.mat_bytes <= 400 << 10);
    skv_store_close(st);
    CHECK_MSG(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    CHECK_MSG(check_get(st, &extra, &r) == SKV_OK, "reopened, extra");
    CHECK(r.n_loaded > 0 && r.n_loaded < extra.n + 1);
    for (int i = 0; i < 8; i++) CHECK_MSG(check_get(st, &s[i], &r) == SKV_OK, "reopened, session %d", i);
    /* a restore promotes its path when the budget allows: the next restore loads it all */
    CHECK(skv_store_set_budget(st, 64 << 20) == SKV_OK);
    CHECK(check_get(st, &s[2], &r) == SKV_OK);
    CHECK(r.n_computed > 0 && r.n_materialised > 0);
    CHECK(check_get(st, &s[2], &r) == SKV_OK);
    CHECK_EQ_INT(r.n_loaded, s[2].n);
    skv_store_close(st);
}

/* get_prefix of q[0..n) gives the KV of a fresh run of its first want tokens. */
static int check_prefix(skv_store *st, skv_ctx *c, const int32_t *q, size_t n, uint32_t want, uint32_t *loaded)
{
    skv_store_prefix_report r;
    uint8_t a[16], b[16];
    int rc = skv_store_get_prefix(st, q, n, c, &r);
    if (!rc && r.n_matched != want) return fprintf(stderr, "matched %u, want %u\n", r.n_matched, want), -1;
    if (!rc && (uint32_t)skv_ctx_n_pos(c) != want) return fprintf(stderr, "ctx holds %d\n", skv_ctx_n_pos(c)), -1;
    if (!rc && want && (skv_ctx_kv_digest(c, (int)want, a) || fresh_digest(q, want, b) || memcmp(a, b, 16))) rc = -2;
    if (loaded) *loaded = r.n_loaded;
    return rc;
}

/* The longest stored prefix of any token list, restored without a session name: inside an
 * edge, past a branch, beyond every session (cut to the stored part), nothing stored;
 * materialised KV loaded, the rest recomputed; a small context gets what fits. */
static void test_get_prefix(void)
{
    char dir[300], err[512];
    sess s[8];
    skv_store *st;
    int32_t q[256];
    uint32_t loaded = 0;
    store_dir(dir, sizeof dir, "prefix");
    build_sessions(s, 8);
    CHECK_MSG(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    skv_ctx *c = new_ctx();
    CHECK(c != NULL);
    CHECK(check_prefix(st, c, s[0].tok, s[0].n, 0, NULL) == SKV_OK); /* an empty store */
    for (int i = 0; i < 8; i++) CHECK(skv_store_put(st, s[i].name, s[i].tok, s[i].n, NULL) == SKV_OK);
    CHECK(check_prefix(st, c, s[1].tok, 44, 44, NULL) == SKV_OK);       /* inside s1's edge */
    memcpy(q, s[2].tok, s[2].n * sizeof *q);
    q[s[2].n - 3] = q[s[2].n - 3] == 5 ? 6 : 5;                           /* differs 3 before the end */
    CHECK(check_prefix(st, c, q, s[2].n, (uint32_t)s[2].n - 3, &loaded) == SKV_OK);
    CHECK(loaded > 0);
    memcpy(q, s[6].tok, s[6].n * sizeof *q);
    memcpy(q + s[6].n, g_text + 2000, 20 * sizeof *q);                    /* beyond every session */
    CHECK(check_prefix(st, c, q, s[6].n + 20, (uint32_t)s[6].n, NULL) == SKV_OK);
    CHECK(skv_store_set_budget(st, 0) == SKV_OK);
    skv_store_gc_report g;
    CHECK(skv_store_gc(st, &g) == SKV_OK);
    CHECK(check_prefix(st, c, s[4].tok, s[4].n, (uint32_t)s[4].n, &loaded) == SKV_OK && loaded == 0); /* recomputed */
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *small = NULL;
    p.n_ctx = 32;
    CHECK(skv_ctx_create(g_m, &p, &small) == SKV_OK);
    CHECK(check_prefix(st, small, s[0].tok, s[0].n, 32, NULL) == SKV_OK);  /* what fits */
    CHECK(skv_store_get_prefix(st, NULL, 3, c, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_store_last_error(st)[0] != 0);
    skv_ctx_free(small);
    skv_ctx_free(c);
    skv_store_close(st);
}

static void test_remove_match(void)
{
    char dir[300], err[512];
    sess s[8];
    skv_store *st;
    skv_store_get_report r;
    skv_store_match_result mr;
    store_dir(dir, sizeof dir, "rm");
    build_sessions(s, 8);
    CHECK_MSG(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    for (int i = 0; i < 8; i++) CHECK(skv_store_put(st, s[i].name, s[i].tok, s[i].n, NULL) == SKV_OK);
    /* match: s1's first 47 tokens then a foreign token */
    int32_t q[64];
    memcpy(q, s[1].tok, 47 * sizeof *q);
    q[47] = s[1].tok[47] == 5 ? 6 : 5;
    CHECK(skv_store_match(st, q, 48, &mr) == SKV_OK);
    CHECK_EQ_INT(mr.n_matched, 47);
    CHECK(mr.n_load + mr.n_compute == 47);
    { /* d_T is the model's surprisal of the prefix, computed independently */
        skv_ctx *c = new_ctx();
        int V = 4096;
        float *lg = malloc(47 * (size_t)V * sizeof *lg);
        CHECK(c && lg && skv_prefill(c, q, 47, SKV_LOGITS_ALL, lg) == SKV_OK);
        double bits = 0;
        for (int j = 1; j < 47; j++) {
            const float *row = lg + (size_t)(j - 1) * V;
            double mx = row[0], z = 0;
            for (int v = 1; v < V; v++) if (row[v] > mx) mx = row[v];
            for (int v = 0; v < V; v++) z += exp(row[v] - mx);
            bits += (log(z) - (row[q[j]] - mx)) / log(2.0);
        }
        free(lg);
        skv_ctx_free(c);
        CHECK_MSG(fabs(bits - mr.bits) < 1e-3 * (1 + bits), "d_T %.4f vs model %.4f", mr.bits, bits);
        CHECK(bits > 10);
    }
    skv_store_stats a, b;
    CHECK(skv_store_get_stats(st, &a) == SKV_OK);
    CHECK(skv_store_remove(st, "s1") == SKV_OK);
    CHECK(skv_store_remove(st, "s1") == SKV_ERR_INVALID_ARG);
    CHECK(skv_store_remove(st, "s6") == SKV_OK);
    skv_store_gc_report g;
    CHECK_MSG(skv_store_gc(st, &g) == SKV_OK, "%s", skv_store_last_error(st));
    CHECK(skv_store_get_stats(st, &b) == SKV_OK);
    CHECK_EQ_INT(b.n_sessions, 6);
    CHECK(b.unique_positions < a.unique_positions);
    CHECK(skv_store_match(st, q, 48, &mr) == SKV_OK); /* s5 still holds those 47 */
    CHECK_EQ_INT(mr.n_matched, 47);
    for (int i = 0; i < 8; i++) {
        if (i == 1 || i == 6) continue;
        CHECK_MSG(check_get(st, &s[i], &r) == SKV_OK, "session %d after rm", i);
    }
    skv_ctx *c = new_ctx();
    int32_t tok[256];
    CHECK(skv_store_get(st, "s1", c, 0, tok, 256, NULL, &r) == SKV_ERR_INVALID_ARG);
    skv_ctx_free(c);
    for (int i = 0; i < 8; i++)
        if (i != 1 && i != 6) CHECK(skv_store_remove(st, s[i].name) == SKV_OK);
    CHECK(skv_store_get_stats(st, &b) == SKV_OK);
    CHECK(b.n_sessions == 0 && b.n_nodes == 0 && b.mat_bytes == 0);
    skv_store_close(st);
}

/* Rewrites the stored model fingerprint (as if another model had made the store). */
static int forge_fingerprint(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {6, (void *)"header"}, v;
    int rc = mdb_env_create(&env);
    mdb_env_set_maxdbs(env, 8);
    if (!rc) rc = mdb_env_open(env, dir, 0, 0664);
    if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc && !(rc = mdb_dbi_open(txn, "meta", 0, &dbi)) && !(rc = mdb_get(txn, dbi, &k, &v))) {
        uint8_t h[168];
        memcpy(h, v.mv_data, 168);
        h[16] ^= 1;
        memcpy(h + 32, "other-model", 12);
        uint64_t x = XXH3_64bits(h, 160);
        for (int i = 0; i < 8; i++) h[160 + i] = (uint8_t)(x >> (8 * i));
        MDB_val nv = {168, h};
        rc = mdb_put(txn, dbi, &k, &nv, 0);
    }
    if (!rc) rc = mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

static void test_wrong_model(void)
{
    char dir[300], err[512], path[400];
    skv_store *st;
    store_dir(dir, sizeof dir, "wrong");
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
    skv_store_close(st);
    CHECK(forge_fingerprint(dir) == 0);
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_MISMATCH);
    CHECK_MSG(strstr(err, "other-model") && strstr(err, "kjv"), "message names both models: %s", err);
    /* a real second model when ../shared is there */
    if (test_stories_path(path, sizeof path, "stories260K.gguf")) {
        skv_model *m2;
        store_dir(dir, sizeof dir, "wrong2");
        CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
        skv_store_close(st);
        CHECK(skv_model_load(path, NULL, &m2, err, sizeof err) == SKV_OK);
        int rc = skv_store_open(dir, m2, 0, NULL, &st, err, sizeof err);
        skv_model_free(m2);
        CHECK_MSG(rc == SKV_ERR_MISMATCH, "%d %s", rc, err);
    }
}

static void test_corrupt(void)
{
    char dir[300], err[512], path[400];
    skv_store *st;
    FILE *f;
    /* no store at all */
    store_dir(dir, sizeof dir, "none");
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_IO);
    CHECK(strstr(err, "store init") != NULL);
    /* garbage data.mdb */
    store_dir(dir, sizeof dir, "garbage");
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    CHECK((f = fopen(path, "wb")) != NULL);
    for (int i = 0; i < 20000; i++) fputc((i * 7919) & 0xff, f);
    fclose(f);
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_FORMAT);
    CHECK_MSG(strstr(err, "not a seqkv store"), "%s", err);
    /* an LMDB environment of someone else */
    store_dir(dir, sizeof dir, "foreign");
    mkdir(dir, 0777);
    {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_val k = {3, (void *)"foo"}, v = {3, (void *)"bar"};
        CHECK(mdb_env_create(&env) == 0);
        CHECK(mdb_env_open(env, dir, 0, 0664) == 0);
        CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0);
        CHECK(mdb_dbi_open(txn, NULL, 0, &dbi) == 0);
        CHECK(mdb_put(txn, dbi, &k, &v, 0) == 0);
        CHECK(mdb_txn_commit(txn) == 0);
        mdb_env_close(env);
    }
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_FORMAT);
    CHECK_MSG(strstr(err, "not a seqkv store"), "%s", err);
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_ERR_FORMAT); /* left alone */
    CHECK_MSG(strstr(err, "not a seqkv store"), "%s", err);
    /* a damaged node record: restores fail cleanly */
    sess s;
    store_dir(dir, sizeof dir, "damaged");
    snprintf(s.name, sizeof s.name, "x");
    s.n = make_session(s.tok, 10, 200, 10);
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
    CHECK(skv_store_put(st, "x", s.tok, s.n, NULL) == SKV_OK);
    skv_store_close(st);
    {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_cursor *cur;
        MDB_val k, v;
        CHECK(mdb_env_create(&env) == 0);
        mdb_env_set_maxdbs(env, 8);
        CHECK(mdb_env_open(env, dir, 0, 0664) == 0);
        CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0);
        CHECK(mdb_dbi_open(txn, "nodes", 0, &dbi) == 0);
        CHECK(mdb_cursor_open(txn, dbi, &cur) == 0);
        CHECK(mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0);
        uint8_t buf[4096];
        CHECK(v.mv_size <= sizeof buf);
        memcpy(buf, v.mv_data, v.mv_size);
        buf[80] ^= 0x40; /* a token id */
        MDB_val nv = {v.mv_size, buf};
        mdb_cursor_close(cur);
        CHECK(mdb_put(txn, dbi, &k, &nv, 0) == 0);
        CHECK(mdb_txn_commit(txn) == 0);
        mdb_env_close(env);
    }
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK);
    skv_store_get_report r;
    int rc = check_get(st, &s, &r);
    CHECK_MSG(rc == SKV_ERR_FORMAT, "damaged node: %d", rc);
    CHECK_MSG(strstr(skv_store_last_error(st), "checksum"), "%s", skv_store_last_error(st));
    skv_store_gc_report g;
    CHECK(skv_store_gc(st, &g) == SKV_ERR_FORMAT);
    skv_store_close(st);
}

/* ---- concurrency -------------------------------------------------------- */

typedef struct {
    skv_store *st;
    sess *s;
    int n, iters, failures;
    volatile int *stop;
} reader_arg;

static void *reader_main(void *a_)
{
    reader_arg *a = a_;
    skv_store_get_report r;
    for (int it = 0; it < a->iters; it++) {
        const sess *s = &a->s[it % a->n];
        skv_store_match_result mr;
        if (check_get(a->st, s, &r) != SKV_OK) a->failures++;
        if (skv_store_match(a->st, s->tok, s->n, &mr) != SKV_OK || mr.n_matched != s->n) a->failures++;
    }
    return NULL;
}

typedef struct {
    skv_store *st;
    int n, failures;
} writer_arg;

static void *writer_main(void *a_)
{
    writer_arg *a = a_;
    for (int i = 0; i < a->n; i++) {
        sess s;
        snprintf(s.name, sizeof s.name, "w%d", i);
        s.n = make_session(s.tok, 30 + (size_t)(i % 3) * 5, 2000 + 13 * (size_t)i, 12);
        if (skv_store_put(a->st, s.name, s.tok, s.n, NULL) != SKV_OK) a->failures++;
        if (i == 2 && skv_store_remove(a->st, "w0") != SKV_OK) a->failures++;
    }
    return NULL;
}

static void test_concurrent_readers(void)
{
    char dir[300], err[512];
    sess s[8];
    skv_store *st;
    store_dir(dir, sizeof dir, "conc");
    build_sessions(s, 8);
    skv_store_params p = skv_store_default_params();
    p.budget = 300 << 10; /* partly materialised: the writer's puts evict while readers load */
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    for (int i = 0; i < 8; i++) CHECK(skv_store_put(st, s[i].name, s[i].tok, s[i].n, NULL) == SKV_OK);
    skv_store_close(st);
    /* a reader process with its own handle */
    pid_t pid = fork();
    if (pid == 0) {
        skv_store *st2;
        int bad = skv_store_open(dir, g_m, SKV_STORE_READONLY, NULL, &st2, err, sizeof err) != SKV_OK;
        reader_arg a = {.st = st2, .s = s, .n = 8, .iters = SANITIZED ? 6 : 12};
        if (!bad) reader_main(&a);
        skv_store_close(st2);
        _exit(bad || a.failures ? 1 : 0);
    }
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK);
    pthread_t rt[2], wt;
    reader_arg ra[2];
    writer_arg wa = {.st = st, .n = SANITIZED ? 6 : 10};
    for (int i = 0; i < 2; i++) {
        ra[i] = (reader_arg){.st = st, .s = s, .n = 8, .iters = SANITIZED ? 6 : 12};
        CHECK(pthread_create(&rt[i], NULL, reader_main, &ra[i]) == 0);
    }
    CHECK(pthread_create(&wt, NULL, writer_main, &wa) == 0);
    for (int i = 0; i < 2; i++) pthread_join(rt[i], NULL);
    pthread_join(wt, NULL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_EQ_INT(wa.failures, 0);
    CHECK_EQ_INT(ra[0].failures + ra[1].failures, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader process failed");
    skv_store_gc_report g;
    CHECK(skv_store_gc(st, &g) == SKV_OK);
    skv_store_close(st);
}

/* ---- crash safety ------------------------------------------------------- */

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

/* Session k of writer round w: 8..32 tokens, sharing openings with others. */
static size_t crash_session(int w, int k, int32_t *out)
{
    uint64_t h = (uint64_t)w * 1000003u + (uint64_t)k * 7919u;
    size_t shared = 4 + h % 12, n = 8 + (h / 13) % 25;
    if (n < shared + 2) n = shared + 2;
    memcpy(out, g_text, shared * sizeof *out);
    memcpy(out + shared, g_text + 50 + (h % 3000), (n - shared) * sizeof *out);
    return n;
}

static void crash_writer(const char *dir, int w, int fd)
{
    skv_store *st;
    char err[512];
    if (skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) != SKV_OK) _exit(3);
    for (int k = 0;; k++) {
        int32_t tok[64];
        char name[32];
        size_t n = crash_session(w, k, tok);
        snprintf(name, sizeof name, "c%d_%d", w, k);
        if (skv_store_put(st, name, tok, n, NULL) != SKV_OK) _exit(4);
        if (k % 4 == 3) { /* removes too, so merges and deletions get killed as well */
            char old[32], line[40];
            /* announced before: a remove killed before its commit leaves an extra session */
            snprintf(line, sizeof line, "-c%d_%d\n", w, k - 2);
            if (write(fd, line, strlen(line)) < 0) _exit(6);
            snprintf(old, sizeof old, "c%d_%d", w, k - 2);
            if (skv_store_remove(st, old) != SKV_OK) _exit(5);
        }
        char line[40];
        snprintf(line, sizeof line, "+%s\n", name);
        if (write(fd, line, strlen(line)) < 0) _exit(6);
    }
}

typedef struct {
    char (*names)[32];
    int n;
} name_set;

static int find_name(const name_set *s, const char *nm)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], nm)) return i;
    return -1;
}

static int collect(void *user, const skv_store_session_info *si)
{
    name_set *s = user;
    if (s->n < 4096) snprintf(s->names[s->n++], 32, "%s", si->name);
    return 0;
}

/* The error convention on a shared handle: each thread reads the message of its own
 * last call (a failure's message; "" after a success), whatever the other threads do. */
typedef struct {
    skv_store *st;
    int fail;      /* 1: this thread's calls fail (no such session), 0: they succeed */
    int problems;
} err_arg;

static void *err_thread(void *a_)
{
    err_arg *a = a_;
    skv_store_match_result r;
    for (int i = 0; i < 200; i++) {
        if (a->fail) {
            a->problems += skv_store_remove(a->st, "no-such-session") != SKV_ERR_INVALID_ARG;
            a->problems += strstr(skv_store_last_error(a->st), "no-such-session") == NULL;
        } else {
            a->problems += skv_store_match(a->st, g_text, 30, &r) != SKV_OK;
            a->problems += skv_store_last_error(a->st)[0] != 0;
        }
    }
    return NULL;
}

static void test_last_error_per_thread(void)
{
    char dir[300], err[512];
    skv_store *st;
    store_dir(dir, sizeof dir, "errs");
    /* creation failure: says why, through err */
    err[0] = 0;
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_IO);
    CHECK_MSG(strstr(err, "no seqkv store") != NULL, "%s", err);
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
    /* set on failure, cleared on success, on one thread */
    CHECK(skv_store_remove(st, "nobody") == SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_store_last_error(st), "nobody") != NULL);
    CHECK(skv_store_put(st, "a", g_text, 40, NULL) == SKV_OK);
    CHECK_MSG(skv_store_last_error(st)[0] == 0, "after a success: '%s'", skv_store_last_error(st));
    /* two threads sharing the handle: a failing one and a succeeding one */
    pthread_t th[2];
    err_arg a[2] = {{.st = st, .fail = 1}, {.st = st, .fail = 0}};
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, err_thread, &a[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK_MSG(a[0].problems == 0 && a[1].problems == 0, "failing thread %d, succeeding thread %d problems",
              a[0].problems, a[1].problems);
    CHECK(skv_store_last_error(st)[0] == 0); /* this thread's own last call succeeded */
    skv_store_close(st);
}

static void test_crash(void)
{
    char dir[300], err[512];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    int kills = 0, rounds = 52;
    name_set committed = {calloc(4096, 32), 0}, listed = {calloc(4096, 32), 0};
    static int committed_at[4096];
    CHECK(committed.names && listed.names);
    store_dir(dir, sizeof dir, "crash");
    p.budget = 96 << 10;
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    /* kill moments are drawn from a window of a few puts, as long as puts take here */
    int32_t tok[64];
    size_t n = crash_session(9999, 0, tok);
    skv_store_close(st);
    double t0 = skv_now(); /* what a writer does first: open, create its context, put */
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK);
    CHECK(skv_store_put(st, "warmup", tok, n, NULL) == SKV_OK);
    CHECK(skv_store_remove(st, "warmup") == SKV_OK);
    long window_ms = (long)((skv_now() - t0) * 1000 * 3) + 10;
    skv_store_close(st);
    /* at least `rounds` kills; more (and a longer window) while the writers commit too
     * little for the check to mean much, e.g. on a loaded machine */
    for (int w = 0; w < rounds || (committed.n < 10 && w < 3 * rounds); w++) {
        int before = committed.n;
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            crash_writer(dir, w, fds[1]);
            _exit(0);
        }
        close(fds[1]);
        long ms = 2 + (long)rnd((uint32_t)window_ms);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status), "writer %d exited with %d before the kill", w, WEXITSTATUS(status));
        kills++;
        /* everything the writer announced (a growing buffer: a fast writer in a long
         * window can say more than a pipe's worth, and a cut line would be misread) */
        size_t len = 0, cap = 1 << 14;
        char *buf = malloc(cap);
        ssize_t got = 0;
        CHECK(buf != NULL);
        while (buf && (got = read(fds[0], buf + len, cap - 1 - len)) > 0)
            if ((len += (size_t)got) == cap - 1) {
                char *nb = realloc(buf, cap *= 2);
                if (!nb) free(buf);
                buf = nb;
            }
        close(fds[0]);
        CHECK_MSG(buf && got == 0, "reading writer %d's announcements failed", w);
        buf[len] = 0;
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
            if (line[0] == '+' && committed.n < 4096) {
                snprintf(committed.names[committed.n], 32, "%s", line + 1);
                committed_at[committed.n++] = (int)ms; /* the round's kill moment, for a report */
            }
            if (line[0] == '-') {
                int i = find_name(&committed, line + 1);
                if (i >= 0) {
                    memcpy(committed.names[i], committed.names[--committed.n], 32);
                    committed_at[i] = committed_at[committed.n];
                }
            }
        }
        free(buf);
        if (committed.n == before && committed.n < 10 && window_ms < 2000) window_ms = window_ms * 5 / 4;
    }
    CHECK(kills >= 50);
    CHECK_MSG(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    skv_store_gc_report g;
    CHECK_MSG(skv_store_gc(st, &g) == SKV_OK, "trie invariants after the kills: %s", skv_store_last_error(st));
    CHECK(skv_store_list(st, collect, &listed) == SKV_OK);
    for (int i = 0; i < committed.n; i++)
        CHECK_MSG(find_name(&listed, committed.names[i]) >= 0,
                  "committed %s is missing (its writer killed %d ms after the start; %d kills, window %ld ms, "
                  "%d committed, %d listed)",
                  committed.names[i], committed_at[i], kills, window_ms, committed.n, listed.n);
    for (int i = 0; i < listed.n; i++) { /* every visible session is whole */
        sess s;
        int w, k;
        CHECK(sscanf(listed.names[i], "c%d_%d", &w, &k) == 2);
        snprintf(s.name, sizeof s.name, "%s", listed.names[i]);
        s.n = crash_session(w, k, s.tok);
        skv_store_get_report r;
        CHECK_MSG(check_get(st, &s, &r) == SKV_OK, "session %s", s.name);
    }
    fprintf(stderr, "crash test: %d kills (window %ld ms), %d committed sessions, %d listed\n", kills, window_ms,
            committed.n, listed.n);
    CHECK(committed.n >= 10); /* the writers got work done (not the property under test) */
    skv_store_close(st);
    free(committed.names);
    free(listed.names);
}

/* ---- hardening (issue 13) ------------------------------------------------ */

/* Changes the first record of database db in dir's environment: flips a byte at `flip`
 * (of the value), or deletes the record (flip < 0). */
static int raw_damage(const char *dir, const char *db, long flip)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 8);
    if (!rc) rc = mdb_env_open(env, dir, 0, 0664);
    if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc) return rc;
    if (!(rc = mdb_dbi_open(txn, db, 0, &dbi)) && !(rc = mdb_cursor_open(txn, dbi, &cur))) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        if (!rc && flip < 0) rc = mdb_cursor_del(cur, 0);
        else if (!rc && (size_t)flip >= v.mv_size) rc = EINVAL;
        else if (!rc) {
            uint8_t *buf = malloc(v.mv_size);
            memcpy(buf, v.mv_data, v.mv_size);
            buf[flip] ^= 0x5a;
            MDB_val nv = {v.mv_size, buf};
            rc = mdb_cursor_put(cur, &k, &nv, MDB_CURRENT);
            free(buf);
        }
        mdb_cursor_close(cur);
    }
    if (!rc) rc = mdb_txn_commit(txn);
    else mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

static uint64_t mat_bytes(skv_store *st)
{
    skv_store_stats s;
    return skv_store_get_stats(st, &s) ? UINT64_MAX : s.mat_bytes;
}

/* Item 4: a kv_quant context is refused; the store never takes its view for exact KV. */
static void test_kvquant_ctx(void)
{
    char dir[300], err[512];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    skv_store_get_report r;
    sess s = {.name = "q"};
    s.n = make_session(s.tok, 30, 300, 40);
    store_dir(dir, sizeof dir, "kvq");
    p.budget = 0; /* nothing materialised by the put: the get would be the first to */
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    CHECK(skv_store_put(st, s.name, s.tok, s.n, NULL) == SKV_OK);
    CHECK(skv_store_set_budget(st, 64u << 20) == SKV_OK);
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *q = NULL;
    int32_t tok[256];
    size_t n = 0;
    cp.n_ctx = 256;
    cp.kv_quant = "kv=tq3,window=0";
    CHECK(skv_ctx_create(g_m, &cp, &q) == SKV_OK);
    int rc = skv_store_get(st, s.name, q, 0, tok, 256, &n, &r);
    skv_ctx_free(q);
    CHECK_MSG(rc == SKV_ERR_UNSUPPORTED && strstr(skv_store_last_error(st), "kv_quant"), "%d %s", rc,
              skv_store_last_error(st));
    CHECK_EQ_INT(mat_bytes(st), 0);
    CHECK(check_get(st, &s, &r) == SKV_OK); /* exact context: verified, and materialises */
    CHECK(mat_bytes(st) > 0);
    CHECK(check_get(st, &s, &r) == SKV_OK && r.n_loaded > 0 && r.verified);
    skv_store_close(st);
}

/* Items 6 and 11: gc checks the KV blobs, says how to repair, and fills the budget back. */
static void test_gc_blobs_both_ways(void)
{
    char dir[300], err[512];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    skv_store_gc_report g;
    skv_store_get_report r;
    sess s[8];
    build_sessions(s, 8);
    store_dir(dir, sizeof dir, "gcblobs");
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    for (int i = 0; i < 8; i++) CHECK(skv_store_put(st, s[i].name, s[i].tok, s[i].n, NULL) == SKV_OK);
    uint64_t full = mat_bytes(st);
    CHECK(full > 0 && full != UINT64_MAX);
    skv_store_close(st);
    CHECK(raw_damage(dir, "kv", 40) == 0); /* inside the first blob's zstd frame */
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK);
    int rc = skv_store_gc(st, &g);
    CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(skv_store_last_error(st), "--budget 0"), "%d %s", rc,
              skv_store_last_error(st));
    CHECK(skv_store_set_budget(st, 0) == SKV_OK); /* the advice works */
    CHECK_MSG(skv_store_gc(st, &g) == SKV_OK, "%s", skv_store_last_error(st));
    CHECK(g.mat_bytes == 0 && g.n_materialised == 0);
    CHECK(skv_store_set_budget(st, 64u << 20) == SKV_OK); /* raising it materialises again */
    CHECK_MSG(skv_store_gc(st, &g) == SKV_OK, "%s", skv_store_last_error(st));
    CHECK_MSG(g.n_materialised > 0 && g.mat_bytes > 0 && g.mat_bytes == mat_bytes(st), "%u %llu", g.n_materialised,
              (unsigned long long)g.mat_bytes);
    for (int i = 0; i < 8; i++) CHECK(check_get(st, &s[i], &r) == SKV_OK && r.verified);
    CHECK(r.n_loaded > 0);
    CHECK(skv_store_set_budget(st, g.mat_bytes / 2) == SKV_OK); /* and lowering it demotes */
    CHECK(skv_store_gc(st, &g) == SKV_OK && g.n_demoted > 0 && g.mat_bytes <= mat_bytes(st) &&
          mat_bytes(st) <= g.mat_bytes);
    skv_store_close(st);
    /* a node record gone (the check fails without text of its own): a real message */
    CHECK(raw_damage(dir, "nodes", -1) == 0);
    CHECK(skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK);
    rc = skv_store_gc(st, &g);
    const char *msg = skv_store_last_error(st);
    CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(msg, "missing") && strstr(msg, "damaged"), "%d %s", rc, msg);
    for (const char *c = msg; *c; c++) CHECK((unsigned char)*c >= 32 && (unsigned char)*c < 127);
    skv_store_close(st);
}

/* Item 10: the store remembers its model (name, fingerprint, path), readable without one. */
static void test_model_info(void)
{
    char dir[300], dir2[300], err[512];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    skv_store_model mi;
    skv_model_info info;
    uint8_t fp[16];
    CHECK(skv_model_get_info(g_m, &info) == SKV_OK && skv_model_fingerprint(g_m, fp) == SKV_OK);
    store_dir(dir, sizeof dir, "minfo");
    p.model_path = MODEL;
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    skv_store_close(st);
    CHECK_MSG(skv_store_model_info(dir, &mi, err, sizeof err) == SKV_OK, "%s", err);
    CHECK(!strcmp(mi.name, info.name) && !memcmp(mi.fingerprint, fp, 16) && mi.n_vocab == info.n_vocab &&
          mi.n_layer == info.n_layer && mi.head_dim == info.head_dim);
    size_t L = strlen(mi.path);
    CHECK_MSG(mi.path[0] == '/' && L > strlen(MODEL) && !strcmp(mi.path + L - strlen(MODEL), MODEL), "%s", mi.path);
    /* made without a path: none recorded; the first put of a handle that knows it records it */
    store_dir(dir2, sizeof dir2, "minfo2");
    CHECK(skv_store_open(dir2, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
    skv_store_close(st);
    CHECK(skv_store_model_info(dir2, &mi, err, sizeof err) == SKV_OK && mi.path[0] == 0 && mi.name[0]);
    CHECK(skv_store_open(dir2, g_m, 0, &p, &st, err, sizeof err) == SKV_OK);
    CHECK(skv_store_put(st, "a", g_text, 20, NULL) == SKV_OK);
    skv_store_close(st);
    CHECK(skv_store_model_info(dir2, &mi, err, sizeof err) == SKV_OK && mi.path[0] == '/');
    /* no store, a damaged record */
    CHECK(skv_store_model_info("/nonexistent/store", &mi, err, sizeof err) == SKV_ERR_IO);
    CHECK(raw_damage(dir, "meta", 3) == 0); /* the first meta record is "header" */
    CHECK(skv_store_model_info(dir, &mi, err, sizeof err) == SKV_ERR_FORMAT);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_store");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_store:setup: %s\n", err);
        return 1;
    }
    size_t len;
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    char *text = malloc(20001);
    len = f ? fread(text, 1, 20000, f) : 0;
    if (f) fclose(f);
    text[len] = 0;
    g_text = malloc(20000 * sizeof *g_text);
    if (skv_tokenize(g_m, text, len, 1, g_text, 20000, &g_n_text) || g_n_text < 4000) {
        printf("FAIL test_store:setup: cannot tokenize the held-out text\n");
        return 1;
    }
    free(text);
    snprintf(g_root, sizeof g_root, "/tmp/seqkv_test_store_%d", (int)getpid());
    rm_rf(g_root);
    mkdir(g_root, 0777);
    RUN(test_put_get);
    RUN(test_get_prefix);
    RUN(test_remove_match);
    RUN(test_wrong_model);
    RUN(test_corrupt);
    RUN(test_concurrent_readers);
    RUN(test_last_error_per_thread);
    RUN(test_kvquant_ctx);
    RUN(test_gc_blobs_both_ways);
    RUN(test_model_info);
    RUN(test_crash);
    rm_rf(g_root);
    free(g_text);
    skv_model_free(g_m);
    TEST_END();
}
