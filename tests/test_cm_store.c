/* The store keeps codec cmvd's primed model beside its dictionary (docs/store.md
 * "Dictionaries", issue 16), on LMDB. Proves, each step in a fresh process (the primed
 * models are per process): training writes the "dictcm.<id>" snapshot record; a process
 * restoring the store's cmvd sessions loads it and primes nothing, every restore verified;
 * a store without the record (an older build's) or with a damaged one still restores
 * (the process primes), and its next write transaction that codes a cmvd node writes the
 * record again; the damaged record is then replaced and loads. Model: models/kjv-4m.gguf. */
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coder/cmvcodec.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define NS 5

static skv_model *g_m;
static int32_t g_text[4000];
static size_t g_n_text;
static char g_dir[256];
static uint64_t g_id;

static const int32_t *sess_tok(int k, size_t *n)
{
    *n = 60 + 20 * (size_t)k;
    return g_text + 300 * (size_t)k;
}

static skv_store *open_store(void)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st = NULL;
    char err[512];
    p.budget = 0; /* no materialised KV: every node in a token tier */
    if (skv_store_open(g_dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err)) fprintf(stderr, "open %s: %s\n", g_dir, err);
    return st;
}

/* Session k put (k < NS: the training set; NS: one more). */
static int put_one(skv_store *st, int k)
{
    char name[16];
    size_t n = 0;
    const int32_t *t = sess_tok(k, &n);
    snprintf(name, sizeof name, "s%d", k);
    return skv_store_put(st, name, t, n, NULL);
}

/* Every session restored verified, with its own tokens. */
static int all_restore(skv_store *st, int upto)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    cp.n_ctx = 256;
    int rc = skv_ctx_create(g_m, &cp, &c);
    for (int k = 0; !rc && k <= upto; k++) {
        char name[16];
        int32_t tok[256];
        size_t n = 0, want = 0;
        const int32_t *t = sess_tok(k, &want);
        snprintf(name, sizeof name, "s%d", k);
        rc = skv_store_get(st, name, c, SKV_STORE_VERIFY, tok, 256, &n, NULL);
        if (!rc && (n != want || memcmp(tok, t, n * sizeof *t))) rc = SKV_ERR_MISMATCH;
        if (rc) fprintf(stderr, "get %s: %d %s\n", name, rc, skv_store_last_error(st));
    }
    skv_ctx_free(c);
    return rc;
}

/* Runs fn in a child process; its exit status (0 = all well). */
static int in_child(int (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(fn());
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 99;
    return WEXITSTATUS(status);
}

static int child_build(void)
{
    skv_store *st = open_store();
    skv_store_gc_report g;
    skv_store_stats s;
    size_t n = 0;
    uint64_t id = 0;
    int rc = st ? skv_store_set_price(st, 1.0) : 1; /* bytes are dear: cheap-coded nodes */
    for (int k = 0; !rc && k < NS; k++) rc = put_one(st, k);
    if (!rc) rc = skv_store_train_dict(st, 0, &id, &n);
    if (!rc) rc = skv_store_gc(st, &g); /* re-coded as cmvd under the dictionary */
    memset(&s, 0, sizeof s);
    if (!rc) rc = skv_store_get_stats(st, &s);
    if (!rc && (s.dict_id != id || s.tier_positions[SKV_STORE_TIER_CMVD] != s.unique_positions)) rc = 1;
    printf("# dictionary %016llx: %zu ids, %llu positions, all cmvd\n", (unsigned long long)id, n,
           (unsigned long long)s.unique_positions);
    skv_store_close(st);
    fflush(stdout);
    return rc ? 1 : 0;
}

/* Restores sessions 0..upto; exit 0 when that primed `want` dictionaries. */
static int restore_priming(size_t want, int upto)
{
    skv_store *st = open_store();
    int rc = st ? all_restore(st, upto) : 1;
    size_t primed = skv_cmv_primings();
    skv_store_close(st);
    if (rc) return 1;
    if (primed != want) fprintf(stderr, "primed %zu dictionaries, expected %zu\n", primed, want);
    return primed != want ? 2 : 0;
}

static int child_restore_loaded(void) { return restore_priming(0, NS - 1); }
static int child_restore_primed(void) { return restore_priming(1, NS - 1); }
static int child_restore_all_loaded(void) { return restore_priming(0, NS); }

/* A write that codes a cmvd node (a new session) writes the record when it is missing. */
static int child_put(void)
{
    skv_store *st = open_store();
    int rc = st ? put_one(st, NS) : 1;
    if (rc) fprintf(stderr, "put: %d %s\n", rc, st ? skv_store_last_error(st) : "");
    skv_store_close(st);
    return rc ? 1 : 0;
}

/* The meta record key: read (*out), replaced (v) or deleted (del). */
static int meta(const char *key, int del, uint8_t **out, size_t *on, const uint8_t *v, size_t vn)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {strlen(key), (void *)(uintptr_t)key}, val = {vn, (void *)(uintptr_t)v};
    int rc = mdb_env_create(&env), ro = !del && !v;
    if (!rc) rc = mdb_env_set_maxdbs(env, 16);
    if (!rc) rc = mdb_env_set_mapsize(env, 1ull << 30);
    if (!rc) rc = mdb_env_open(env, g_dir, ro ? MDB_RDONLY : 0, 0664);
    if (!rc) rc = mdb_txn_begin(env, NULL, ro ? MDB_RDONLY : 0, &txn);
    if (!rc && !(rc = mdb_dbi_open(txn, "meta", 0, &dbi))) {
        if (ro && !(rc = mdb_get(txn, dbi, &k, &val)) && (*out = malloc(val.mv_size)))
            memcpy(*out, val.mv_data, *on = val.mv_size);
        else if (!ro) rc = del ? mdb_del(txn, dbi, &k, NULL) : mdb_put(txn, dbi, &k, &val, 0);
        if (ro || rc) mdb_txn_abort(txn);
        else rc = mdb_txn_commit(txn);
    }
    mdb_env_close(env);
    return rc;
}

static void snap_key(char key[32]) { snprintf(key, 32, "dictcm.%016llx", (unsigned long long)g_id); }

static void test_store_keeps_the_snapshot(void)
{
    char key[32];
    uint8_t *b = NULL;
    size_t bn = 0;
    CHECK_EQ_INT(in_child(child_build), 0);
    /* the dictionary's id, from the "tier" record (the parent opens no store: it would
     * load the primed model, and every child after would inherit it) */
    CHECK_EQ_INT(meta("tier", 0, &b, &bn, NULL, 0), 0);
    for (int k = 0; b && bn >= 24 && k < 8; k++) g_id |= (uint64_t)b[16 + k] << (8 * k);
    free(b);
    b = NULL;
    snap_key(key);
    CHECK_EQ_INT(meta(key, 0, &b, &bn, NULL, 0), 0);
    CHECK_MSG(bn > 100 && b && !memcmp(b, "SKVC", 4), "record of %zu bytes", bn);
    printf("# snapshot record %s: %zu bytes\n", key, bn);
    CHECK_EQ_INT(in_child(child_restore_loaded), 0);
    /* an older store: no record; the process primes, a write puts the record back */
    CHECK_EQ_INT(meta(key, 1, NULL, NULL, NULL, 0), 0);
    CHECK_EQ_INT(in_child(child_restore_primed), 0);
    CHECK_EQ_INT(in_child(child_put), 0);
    uint8_t *b2 = NULL;
    size_t bn2 = 0;
    CHECK_EQ_INT(meta(key, 0, &b2, &bn2, NULL, 0), 0);
    CHECK_MSG(bn2 == bn && b2 && !memcmp(b, b2, bn), "rewritten record: %zu bytes", bn2);
    CHECK_EQ_INT(in_child(child_restore_all_loaded), 0);
    /* a damaged record: primed instead, then replaced by the next write */
    if (b2) b2[bn2 / 2] ^= 0x10;
    CHECK_EQ_INT(meta(key, 0, NULL, NULL, b2, bn2), 0);
    CHECK_EQ_INT(in_child(child_restore_primed), 0);
    free(b2);
    free(b);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_cm_store");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_cm_store:setup: %s\n", err);
        return 1;
    }
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    char *text = malloc(12001);
    size_t len = f && text ? fread(text, 1, 12000, f) : 0;
    if (f) fclose(f);
    if (!len || skv_tokenize(g_m, text, len, 1, g_text, 4000, &g_n_text) || g_n_text < 300 * NS + 200) {
        printf("FAIL test_cm_store:setup: cannot tokenize the held-out text\n");
        return 1;
    }
    free(text);
    snprintf(g_dir, sizeof g_dir, "/tmp/seqkv_test_cm_store_%d", (int)getpid());
    mkdir(g_dir, 0700);
    RUN(test_store_keeps_the_snapshot);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    skv_model_free(g_m);
    TEST_END();
}
