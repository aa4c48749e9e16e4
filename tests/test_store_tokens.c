/* The session record's token checksum (store version 4, docs/store.md "LMDB layout"), on
 * LMDB and on a real redis-server this test starts (tests/redis_harness.h):
 *   - issue 13: a node record rewritten with a valid checksum and one token of its span
 *     changed. Its KV comes from its blob (keyed by node id and span length), so the KV
 *     digest matched and a verified get returned the changed token; now every get of the
 *     session (verified or not) is SKV_ERR_FORMAT saying the store is damaged, gc's check
 *     reports it, and the other sessions restore as before;
 *   - an older store (version 3, version-1 session records without the checksum) opens:
 *     read-only as it is, a writer upgrades the header to 4 and leaves the old records as
 *     they are (checked as before); a session put again gets the checksum; version 5 is
 *     refused naming "2..4". */
#include <hiredis/hiredis.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "gguf_edit.h"
#include "redis_harness.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define NS 3

static skv_model *g_m;
static int g_vocab;
static char g_root[256];
static redis_srv g_redis;
static int g_have_redis;

typedef struct {
    char name[16];
    int32_t tok[64];
    size_t n;
} sess;

static sess g_s[NS];

/* Three sessions with different first tokens (three nodes under the root). */
static void make_sessions(void)
{
    for (int k = 0; k < NS; k++) {
        sess *s = &g_s[k];
        snprintf(s->name, sizeof s->name, "s%d", k);
        s->n = 20 + 5 * (size_t)k;
        for (size_t i = 0; i < s->n; i++) s->tok[i] = (int32_t)((100 + 7 * k + (int)i * 131) % g_vocab);
    }
}

/* ---- raw records: LMDB tables or Redis keys ------------------------------------ */

typedef struct {
    int redis;
    char where[300], prefix[32];
} loc;

static loc loc_of(int redis, const char *name)
{
    loc l = {.redis = redis};
    snprintf(l.prefix, sizeof l.prefix, "%s", name);
    if (redis) snprintf(l.where, sizeof l.where, "unix://%.200s?prefix=%.30s", g_redis.sock, name);
    else snprintf(l.where, sizeof l.where, "%.200s/%.40s", g_root, name);
    return l;
}

/* The Redis key of a record: "P:skv2:H" for the header, else "P:skv2:<fp>:<t>:<key>". */
static size_t redis_key(const loc *l, const char *table, const void *key, size_t kn, uint8_t *out, size_t cap)
{
    uint8_t fp[16];
    int n;
    if (!strcmp(table, "meta")) return (size_t)snprintf((char *)out, cap, "%s:skv2:H", l->prefix);
    n = snprintf((char *)out, cap, "%s:skv2:", l->prefix);
    skv_model_fingerprint(g_m, fp);
    for (int i = 0; i < 16; i++) n += snprintf((char *)out + n, cap - (size_t)n, "%02x", fp[i]);
    n += snprintf((char *)out + n, cap - (size_t)n, ":%c:", table[0] == 'n' ? 'n' : 's');
    if ((size_t)n + kn > cap) return 0;
    memcpy(out + n, key, kn);
    return (size_t)n + kn;
}

static int lmdb_env(const char *dir, unsigned flags, MDB_env **env, MDB_txn **txn)
{
    int rc = mdb_env_create(env);
    if (!rc) rc = mdb_env_set_maxdbs(*env, 16);
    if (!rc) rc = mdb_env_set_mapsize(*env, 1ull << 30);
    if (!rc) rc = mdb_env_open(*env, dir, flags, 0664);
    if (!rc) rc = mdb_txn_begin(*env, NULL, flags & MDB_RDONLY, txn);
    if (rc) mdb_env_close(*env);
    return rc;
}

/* Reads (v == NULL: into *out, malloc'ed) or writes one record. 0 on success. */
static int rec_rw(const loc *l, const char *table, const void *key, size_t kn, uint8_t **out, size_t *on,
                  const uint8_t *v, size_t vn)
{
    if (l->redis) {
        uint8_t k[400];
        size_t n = redis_key(l, table, key, kn, k, sizeof k);
        redisContext *c = redis_connect(&g_redis);
        redisReply *r = !c ? NULL : v ? redisCommand(c, "SET %b %b", k, n, v, vn) : redisCommand(c, "GET %b", k, n);
        int ok = r && (v ? r->type == REDIS_REPLY_STATUS : r->type == REDIS_REPLY_STRING);
        if (ok && !v && (*out = malloc(r->len))) memcpy(*out, r->str, r->len), *on = r->len;
        if (r) freeReplyObject(r);
        redisFree(c);
        return ok ? 0 : 1;
    }
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {kn, (void *)(uintptr_t)key}, val = {vn, (void *)(uintptr_t)v};
    int rc = lmdb_env(l->where, v ? 0 : MDB_RDONLY, &env, &txn);
    if (rc) return rc;
    if (!(rc = mdb_dbi_open(txn, table, 0, &dbi))) rc = v ? mdb_put(txn, dbi, &k, &val, 0) : mdb_get(txn, dbi, &k, &val);
    if (!rc && !v && (*out = malloc(val.mv_size))) memcpy(*out, val.mv_data, val.mv_size), *on = val.mv_size;
    rc = rc || !v ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

/* The key (node id, 8 bytes BE) of the raw node record whose span starts with token t0. */
static int lmdb_find_node(const loc *l, int32_t t0, uint8_t key[8])
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    int found = 0;
    if (lmdb_env(l->where, MDB_RDONLY, &env, &txn)) return 0;
    if (!mdb_dbi_open(txn, "nodes", 0, &dbi) && !mdb_cursor_open(txn, dbi, &cur)) {
        for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !found; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            const uint8_t *p = v.mv_data;
            found = k.mv_size == 8 && v.mv_size > 80 && !memcmp(p, "SKVN", 4) &&
                    (int32_t)(p[72] | p[73] << 8 | p[74] << 16 | (uint32_t)p[75] << 24) == t0;
            if (found) memcpy(key, k.mv_data, 8);
        }
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return found;
}

static int redis_find_node(const loc *l, int32_t t0, uint8_t key[8])
{
    uint8_t pat[400];
    size_t pn = redis_key(l, "nodes", "*", 1, pat, sizeof pat), n;
    redisContext *c = redis_connect(&g_redis);
    redisReply *r = c ? redisCommand(c, "KEYS %b", pat, pn) : NULL;
    int found = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && !found; i++) {
        const redisReply *e = r->element[i];
        uint8_t *v = NULL;
        if (e->len < 8 || rec_rw(l, "nodes", e->str + e->len - 8, 8, &v, &n, NULL, 0)) continue;
        found = n > 80 && !memcmp(v, "SKVN", 4) && (int32_t)(v[72] | v[73] << 8 | v[74] << 16 | (uint32_t)v[75] << 24) == t0;
        if (found) memcpy(key, e->str + e->len - 8, 8);
        free(v);
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return found;
}

/* Writes XXH3-64 of rec[0..n-8) into its last 8 bytes (little-endian). */
static void reseal(uint8_t *rec, size_t n)
{
    uint64_t h = XXH3_64bits(rec, n - 8);
    for (int i = 0; i < 8; i++) rec[n - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
}

/* ---- the store's view ---------------------------------------------------------- */

static skv_store *open_at(const loc *l, int flags)
{
    skv_store *st = NULL;
    char err[512];
    if (skv_store_open(l->where, g_m, flags, NULL, &st, err, sizeof err)) fprintf(stderr, "open %s: %s\n", l->where, err);
    return st;
}

/* get (flags) of s: SKV_OK with s's tokens, or the status. */
static int get_of(skv_store *st, const sess *s, int flags)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    int32_t tok[64];
    size_t n = 0;
    cp.n_ctx = 128;
    if (skv_ctx_create(g_m, &cp, &c)) return SKV_ERR_NOMEM;
    int rc = skv_store_get(st, s->name, c, flags, tok, 64, &n, NULL);
    if (!rc && (n != s->n || memcmp(tok, s->tok, n * sizeof *tok))) rc = SKV_ERR_INTERNAL; /* wrong tokens */
    skv_ctx_free(c);
    return rc;
}

static int all_restore(skv_store *st)
{
    for (int k = 0; k < NS; k++) {
        int rc = get_of(st, &g_s[k], SKV_STORE_VERIFY);
        if (rc) {
            fprintf(stderr, "get %s: %d %s\n", g_s[k].name, rc, skv_store_last_error(st));
            return rc;
        }
    }
    return SKV_OK;
}

static int put_all(skv_store *st)
{
    for (int k = 0; k < NS; k++)
        if (skv_store_put(st, g_s[k].name, g_s[k].tok, g_s[k].n, NULL)) return 1;
    return 0;
}

/* ---- issue 13: one token of a node's span changed, its checksum made to match ---- */

static void token_changed_case(int redis)
{
    loc l = loc_of(redis, "changed");
    uint8_t key[8], *rec = NULL;
    size_t rn = 0;
    skv_store *st = open_at(&l, SKV_STORE_CREATE); /* the default budget: every node keeps its KV */
    CHECK(st && put_all(st) == 0);
    skv_store_close(st);
    const sess *x = &g_s[1];
    CHECK(redis ? redis_find_node(&l, x->tok[0], key) : lmdb_find_node(&l, x->tok[0], key));
    CHECK(rec_rw(&l, "nodes", key, 8, &rec, &rn, NULL, 0) == 0 && rn > 100);
    if (!rec) return;
    uint32_t len = rec[28] | (uint32_t)rec[29] << 8;
    CHECK(len == x->n && (rec[5] & 1)); /* x's whole span, materialised: its KV is a blob's */
    rec[72 + 4 * 3] = (uint8_t)(rec[72 + 4 * 3] + 1); /* token 3: another id (its low byte + 1) */
    reseal(rec, rn);
    CHECK(rec_rw(&l, "nodes", key, 8, NULL, NULL, rec, rn) == 0);
    free(rec);
    st = open_at(&l, 0);
    CHECK(st != NULL);
    int rc = get_of(st, x, SKV_STORE_VERIFY);
    const char *e = skv_store_last_error(st);
    CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(e, "token checksum") && strstr(e, "damaged") && strstr(e, "s1"),
              "verified get: %d '%s'", rc, e);
    rc = get_of(st, x, 0);
    CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(skv_store_last_error(st), "token checksum"), "get: %d '%s'", rc,
              skv_store_last_error(st));
    CHECK(get_of(st, &g_s[0], SKV_STORE_VERIFY) == SKV_OK && get_of(st, &g_s[2], SKV_STORE_VERIFY) == SKV_OK);
    skv_store_gc_report g;
    rc = skv_store_gc(st, &g);
    e = skv_store_last_error(st);
    CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(e, "store check failed") && strstr(e, "'s1'"), "gc: %d '%s'", rc, e);
    /* what the message says to do: remove it and put it again */
    CHECK(skv_store_remove(st, x->name) == SKV_OK && skv_store_put(st, x->name, x->tok, x->n, NULL) == SKV_OK);
    CHECK(all_restore(st) == SKV_OK && skv_store_gc(st, &g) == SKV_OK);
    skv_store_close(st);
}

static void test_token_changed_lmdb(void) { token_changed_case(0); }
static void test_token_changed_redis(void)
{
    if (g_have_redis) token_changed_case(1);
    else SKIP("redis-server is not installed");
}

/* ---- issue 13 (fuzz_store): session records forged whole, checksums recomputed ------ */

/* A session record as the store writes it (version 2), checksums computed. */
static void forge_ses(uint8_t rec[64], uint64_t end, const int32_t *tok, uint32_t n)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    uint64_t sum = XXH3_64bits_withSeed(tok, n * sizeof *tok, n);
    memset(rec, 0, 64);
    memcpy(rec, "SKVS", 4);
    rec[4] = 2;
    for (int i = 0; i < 8; i++) rec[8 + i] = (uint8_t)(end >> (8 * i)), rec[48 + i] = (uint8_t)(sum >> (8 * i));
    for (int i = 0; i < 4; i++) rec[16 + i] = (uint8_t)(n >> (8 * i));
    cp.n_ctx = 128;
    CHECK(skv_ctx_create(g_m, &cp, &c) == SKV_OK);
    if (c) CHECK((n == 0 || skv_prefill(c, tok, n, SKV_LOGITS_NONE, NULL) == SKV_OK) &&
                 skv_ctx_kv_digest(c, (int)n, rec + 24) == SKV_OK); /* the digest a verified get compares */
    skv_ctx_free(c);
    reseal(rec, 64);
}

/* Q's record replaced, then: a verified get of Q (status; on success its tokens must be
 * want's), and gc's status. The record is put back after. */
static void forged_get(const loc *l, const sess *q, const uint8_t rec[64], const sess *want, int get_rc, int gc_rc,
                       const char *what)
{
    uint8_t *orig = NULL;
    size_t on = 0;
    CHECK(rec_rw(l, "sessions", q->name, strlen(q->name), &orig, &on, NULL, 0) == 0 && on == 64);
    CHECK(rec_rw(l, "sessions", q->name, strlen(q->name), NULL, NULL, rec, 64) == 0);
    skv_store *st = open_at(l, 0);
    CHECK(st != NULL);
    if (!st) return free(orig);
    sess as = *q;
    if (want) memcpy(as.tok, want->tok, sizeof as.tok), as.n = want->n;
    int rc = get_of(st, &as, SKV_STORE_VERIFY);
    const char *e = skv_store_last_error(st);
    CHECK_MSG(rc == get_rc && (rc == SKV_OK || (strstr(e, "damaged") && strstr(e, q->name))), "%s: get %d '%s'", what,
              rc, e);
    skv_store_gc_report g;
    rc = skv_store_gc(st, &g);
    e = skv_store_last_error(st);
    CHECK_MSG(rc == gc_rc && (rc == SKV_OK || strstr(e, "store check failed")), "%s: gc %d '%s'", what, rc, e);
    skv_store_close(st);
    CHECK(orig && rec_rw(l, "sessions", q->name, strlen(q->name), NULL, NULL, orig, on) == 0);
    free(orig);
}

/* The u64 id of the stored node whose span starts with token t0. */
static uint64_t node_id(const loc *l, int32_t t0)
{
    uint8_t key[8], *rec = NULL;
    size_t rn = 0;
    uint64_t id = 0;
    if (!(l->redis ? redis_find_node(l, t0, key) : lmdb_find_node(l, t0, key))) return 0;
    if (!rec_rw(l, "nodes", key, 8, &rec, &rn, NULL, 0) && rn > 16)
        for (int i = 0; i < 8; i++) id |= (uint64_t)rec[8 + i] << (8 * i);
    free(rec);
    return id;
}

/* fuzz_store found a verified get returning 0 tokens: the session record rewritten with
 * end node 0 (the root), 0 tokens, the digest of no KV and both checksums recomputed. A
 * record no put writes is damage: one ending at the root or with no tokens, one naming
 * a node where no session ends (here the split node of two sessions' shared prefix, with
 * that prefix's digest: the get returned the prefix). A record redirected to another
 * session's end node, digest and all, gives that session's tokens: the records a get
 * reads cannot tell, gc's count of sessions per node does (LMDB; Redis evicts). */
static void forged_case(int redis)
{
    loc l = loc_of(redis, "forged");
    sess p = g_s[0], q = g_s[0];
    snprintf(q.name, sizeof q.name, "q");
    q.n = 18;
    for (size_t i = 10; i < q.n; i++) q.tok[i] = (int32_t)((q.tok[i] + 17) % g_vocab); /* shares 10 with p */
    skv_store *st = open_at(&l, SKV_STORE_CREATE);
    CHECK(st && skv_store_put(st, p.name, p.tok, p.n, NULL) == SKV_OK && skv_store_put(st, q.name, q.tok, q.n, NULL) == SKV_OK);
    skv_store_close(st);
    uint64_t split = node_id(&l, p.tok[0]), p_end = node_id(&l, p.tok[10]);
    CHECK(split != 0 && p_end != 0 && split != p_end);
    uint8_t rec[64];
    forge_ses(rec, 0, q.tok, 0);
    forged_get(&l, &q, rec, NULL, SKV_ERR_FORMAT, SKV_ERR_FORMAT, "root, no tokens");
    forge_ses(rec, split, q.tok, 10);
    forged_get(&l, &q, rec, NULL, SKV_ERR_FORMAT, SKV_ERR_FORMAT, "the split node");
    forge_ses(rec, p_end, p.tok, (uint32_t)p.n);
    forged_get(&l, &q, rec, &p, SKV_OK, redis ? SKV_OK : SKV_ERR_FORMAT, "another session's end");
    forge_ses(rec, node_id(&l, q.tok[10]), q.tok, (uint32_t)q.n); /* the record as put wrote it */
    forged_get(&l, &q, rec, NULL, SKV_OK, SKV_OK, "q's own record");
}

static void test_forged_lmdb(void) { forged_case(0); }
static void test_forged_redis(void)
{
    if (g_have_redis) forged_case(1);
    else SKIP("redis-server is not installed");
}

/* ---- an older store: version 3, session records without the token checksum ----- */

static void set_version(const loc *l, uint32_t v)
{
    uint8_t *h = NULL;
    size_t hn = 0;
    CHECK(rec_rw(l, "meta", "header", 6, &h, &hn, NULL, 0) == 0 && hn == 168);
    if (!h) return;
    for (int i = 0; i < 4; i++) h[8 + i] = (uint8_t)(v >> (8 * i));
    reseal(h, hn);
    CHECK(rec_rw(l, "meta", "header", 6, NULL, NULL, h, hn) == 0);
    free(h);
}

static uint32_t version_of(const loc *l)
{
    uint8_t *h = NULL;
    size_t hn = 0;
    uint32_t v = 0;
    if (rec_rw(l, "meta", "header", 6, &h, &hn, NULL, 0) == 0 && hn == 168) v = h[8] | (uint32_t)h[9] << 8;
    free(h);
    return v;
}

static size_t ses_size(const loc *l, const char *name)
{
    uint8_t *r = NULL;
    size_t rn = 0;
    if (rec_rw(l, "sessions", name, strlen(name), &r, &rn, NULL, 0)) rn = 0;
    free(r);
    return rn;
}

/* Rewrites a session record as version 3 wrote it: 56 bytes, version 1, no token checksum. */
static int make_v1(const loc *l, const char *name)
{
    uint8_t *r = NULL, old[56];
    size_t rn = 0;
    if (rec_rw(l, "sessions", name, strlen(name), &r, &rn, NULL, 0) || rn != 64) return free(r), 1;
    memcpy(old, r, 48);
    free(r);
    old[4] = 1;
    reseal(old, sizeof old);
    return rec_rw(l, "sessions", name, strlen(name), NULL, NULL, old, sizeof old);
}

static void old_version_case(int redis)
{
    loc l = loc_of(redis, "v3");
    char err[512];
    skv_store *st = open_at(&l, SKV_STORE_CREATE);
    skv_store_gc_report g;
    CHECK(st && put_all(st) == 0);
    skv_store_close(st);
    CHECK(version_of(&l) == 4 && ses_size(&l, "s0") == 64);
    for (int k = 0; k < NS; k++) CHECK(make_v1(&l, g_s[k].name) == 0);
    set_version(&l, 3);
    st = open_at(&l, SKV_STORE_READONLY); /* read as it is */
    CHECK(st && all_restore(st) == SKV_OK);
    skv_store_close(st);
    CHECK(version_of(&l) == 3);
    st = open_at(&l, 0); /* a writer upgrades the header; old session records stay (checked as before) */
    CHECK(st && all_restore(st) == SKV_OK && skv_store_gc(st, &g) == SKV_OK);
    CHECK(version_of(&l) == 4 && ses_size(&l, "s0") == 56);
    CHECK(skv_store_remove(st, "s0") == SKV_OK && skv_store_put(st, "s0", g_s[0].tok, g_s[0].n, NULL) == SKV_OK);
    CHECK(ses_size(&l, "s0") == 64 && ses_size(&l, "s1") == 56); /* put again: with the checksum */
    CHECK(all_restore(st) == SKV_OK && skv_store_gc(st, &g) == SKV_OK);
    skv_store_close(st);
    set_version(&l, 5);
    CHECK(skv_store_open(l.where, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err, "version 5") && strstr(err, "2..4"), "%s", err);
}

/* A store records its model's tokenizer fingerprint (header flags bit 0, bytes 148..155):
 * the same weights with another token text (tests/gguf_edit.h) open an older store as
 * before but are refused by a new one, naming the tokenizer; an older store keeps flags 0
 * through the upgrade; an unknown flag is refused. */
static void tokenizer_case(int redis)
{
    loc l = loc_of(redis, "tok");
    char path[300], err[512];
    skv_model *m2 = NULL;
    skv_store *st = open_at(&l, SKV_STORE_CREATE);
    uint8_t *h = NULL, tf[16];
    size_t hn = 0;
    CHECK(st && put_all(st) == 0);
    skv_store_close(st);
    snprintf(path, sizeof path, "%.200s/tok.gguf", g_root);
    CHECK(gguf_other_tokenizer(MODEL, g_m, path) == 0 && skv_model_load(path, NULL, &m2, err, sizeof err) == SKV_OK);
    if (!m2) return;
    CHECK(rec_rw(&l, "meta", "header", 6, &h, &hn, NULL, 0) == 0 && hn == 168);
    CHECK(skv_model_tokenizer_fingerprint(g_m, tf) == SKV_OK);
    if (h) CHECK(h[12] == 1 && !memcmp(h + 148, tf, 8));
    int rc = skv_store_open(l.where, m2, 0, NULL, &st, err, sizeof err);
    CHECK_MSG(rc == SKV_ERR_MISMATCH && strstr(err, "tokenizer") && !st, "another tokenizer: %d '%s'", rc, err);
    if (h) { /* as an older store wrote it: flags 0, no tokenizer; version 3 (a writer upgrades it) */
        memset(h + 12, 0, 4);
        memset(h + 148, 0, 8);
        h[8] = 3;
        reseal(h, hn);
        CHECK(rec_rw(&l, "meta", "header", 6, NULL, NULL, h, hn) == 0);
    }
    skv_model *keep = g_m;
    g_m = m2; /* all_restore's contexts: the other model's */
    st = open_at(&l, 0);
    CHECK(st && all_restore(st) == SKV_OK);
    skv_store_close(st);
    g_m = keep;
    free(h);
    h = NULL;
    CHECK(rec_rw(&l, "meta", "header", 6, &h, &hn, NULL, 0) == 0 && hn == 168);
    if (h) CHECK(h[8] == 4 && h[12] == 0 && !memcmp(h + 148, "\0\0\0\0\0\0\0\0", 8)); /* upgraded, still without */
    if (h) {
        h[12] = 2; /* a flag this build does not know */
        reseal(h, hn);
        CHECK(rec_rw(&l, "meta", "header", 6, NULL, NULL, h, hn) == 0);
        rc = skv_store_open(l.where, g_m, 0, NULL, &st, err, sizeof err);
        CHECK_MSG(rc == SKV_ERR_UNSUPPORTED && strstr(err, "flags"), "unknown flag: %d '%s'", rc, err);
    }
    free(h);
    skv_model_free(m2);
    remove(path);
}

static void test_tokenizer_lmdb(void) { tokenizer_case(0); }
static void test_tokenizer_redis(void)
{
    if (g_have_redis) tokenizer_case(1);
    else SKIP("redis-server is not installed");
}

static void test_old_version_lmdb(void) { old_version_case(0); }
static void test_old_version_redis(void)
{
    if (g_have_redis) old_version_case(1);
    else SKIP("redis-server is not installed");
}

int main(void)
{
    char err[512];
    skv_model_info mi;
    TEST_BEGIN("test_store_tokens");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_store_tokens:setup: %s\n", err);
        return 1;
    }
    skv_model_get_info(g_m, &mi);
    g_vocab = mi.n_vocab;
    make_sessions();
    snprintf(g_root, sizeof g_root, "/tmp/seqkv_test_tokens_%d", (int)getpid());
    mkdir(g_root, 0700);
    g_have_redis = redis_available();
    if (!g_have_redis && getenv("SEQKV_REQUIRE_REDIS") && atoi(getenv("SEQKV_REQUIRE_REDIS"))) {
        printf("FAIL test_store_tokens: redis-server is not installed (scripts/install-deps.sh)\n");
        return 1;
    }
    if (g_have_redis) {
        snprintf(g_redis.dir, sizeof g_redis.dir, "%.200s/redis", g_root);
        if (redis_start(&g_redis, NULL)) {
            printf("FAIL test_store_tokens:setup: redis-server did not start\n");
            return 1;
        }
    }
    RUN(test_token_changed_lmdb);
    RUN(test_old_version_lmdb);
    RUN(test_forged_lmdb);
    RUN(test_tokenizer_lmdb);
    RUN(test_token_changed_redis);
    RUN(test_old_version_redis);
    RUN(test_forged_redis);
    RUN(test_tokenizer_redis);
    redis_kill(&g_redis);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_root);
    skv_model_free(g_m);
    TEST_END();
}
