/* Node tiers and store-kept dictionaries (docs/store.md "Tiers", "Dictionaries"), on LMDB
 * and on a real redis-server this test starts (tests/redis_harness.h):
 *   - every tier restores bit-exact: raw tokens (a tiny price), cmv (a high price), cmvd
 *     (after training a dictionary), materialised KV (a budget); every restore verified
 *     and compared with a fresh run;
 *   - the rule's decisions: a node restored often goes back to raw tokens; the budget in
 *     both directions moves nodes between the kv tier and the token tiers (gc);
 *   - hostile records: a damaged or missing dictionary, a damaged coded node: a clear
 *     SKV_ERR_FORMAT, never a wrong restore;
 *   - versions: a version-2 store opens (read-only as is; a write upgrades it to 4), a
 *     version-5 store is refused naming the versions (version 3: tests/test_store_tokens.c). */
#include <hiredis/hiredis.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "redis_harness.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define NS 6

static skv_model *g_m;
static int32_t *g_text;
static size_t g_n_text;
static char g_root[256];
static redis_srv g_redis;
static int g_have_redis;

typedef struct {
    char name[16];
    int32_t tok[200];
    size_t n;
} sess;

static sess g_s[NS];

static skv_ctx *new_ctx(void)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 256;
    return skv_ctx_create(g_m, &p, &c) == SKV_OK ? c : NULL;
}

/* Sessions sharing a 40-token opening, each with its own continuation. */
static void make_sessions(void)
{
    for (int k = 0; k < NS; k++) {
        sess *s = &g_s[k];
        snprintf(s->name, sizeof s->name, "s%d", k);
        memcpy(s->tok, g_text, 40 * sizeof *s->tok);
        s->n = 40 + 30 + 10 * (size_t)k;
        memcpy(s->tok + 40, g_text + 400 + 150 * (size_t)k, (s->n - 40) * sizeof *s->tok);
    }
}

/* get verified, and the same tokens and KV digest as a fresh run. */
static int check_get(skv_store *st, const sess *s)
{
    skv_ctx *c = new_ctx(), *f = new_ctx();
    int32_t tok[256];
    size_t n = 0;
    uint8_t a[16], b[16];
    int rc = c && f ? skv_store_get(st, s->name, c, SKV_STORE_VERIFY, tok, 256, &n, NULL) : SKV_ERR_NOMEM;
    if (!rc && (n != s->n || memcmp(tok, s->tok, n * sizeof *tok))) rc = SKV_ERR_MISMATCH;
    if (!rc && !(rc = skv_prefill(f, s->tok, s->n, SKV_LOGITS_NONE, NULL)) && !(rc = skv_ctx_kv_digest(c, (int)n, a)) &&
        !(rc = skv_ctx_kv_digest(f, (int)n, b)) && memcmp(a, b, 16))
        rc = SKV_ERR_MISMATCH;
    skv_ctx_free(c);
    skv_ctx_free(f);
    return rc;
}

static int all_restore(skv_store *st)
{
    for (int k = 0; k < NS; k++) {
        int rc = check_get(st, &g_s[k]);
        if (rc) {
            fprintf(stderr, "get %s: %d %s\n", g_s[k].name, rc, skv_store_last_error(st));
            return rc;
        }
    }
    return SKV_OK;
}

static skv_store *open_at(const char *where, int flags, int64_t budget)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st = NULL;
    char err[512];
    p.budget = budget;
    if (skv_store_open(where, g_m, flags, &p, &st, err, sizeof err)) fprintf(stderr, "open %s: %s\n", where, err);
    return st;
}

static void where_of(char *buf, size_t cap, int redis, const char *name)
{
    if (redis) snprintf(buf, cap, "unix://%.200s?prefix=%.30s", g_redis.sock, name);
    else snprintf(buf, cap, "%.200s/%.40s", g_root, name);
}

static skv_store_stats stats_of(skv_store *st)
{
    skv_store_stats s;
    memset(&s, 0, sizeof s);
    if (skv_store_get_stats(st, &s)) fprintf(stderr, "stats: %s\n", skv_store_last_error(st));
    return s;
}

/* Only tier `tier` holds positions, and the tiers add up to the unique positions. */
static int only_tier(const skv_store_stats *s, int tier)
{
    uint64_t sum = 0;
    for (int i = 0; i < 4; i++) sum += s->tier_positions[i];
    return sum == s->unique_positions && s->tier_positions[tier] == sum && sum > 0;
}

static int put_all(skv_store *st)
{
    for (int k = 0; k < NS; k++)
        if (skv_store_put(st, g_s[k].name, g_s[k].tok, g_s[k].n, NULL)) return 1;
    return 0;
}

/* ---- every tier restores bit-exact ----------------------------------------- */

static void tiers_case(int redis)
{
    char where[300];
    skv_store_gc_report g;
    uint64_t id = 0;
    size_t nid = 0;
    where_of(where, sizeof where, redis, "tiers");
    skv_store *st = open_at(where, SKV_STORE_CREATE, 0);
    CHECK(st != NULL);
    if (!st) return;
    CHECK(skv_store_set_price(st, 1e-12) == SKV_OK); /* bytes are free: raw tokens */
    CHECK(put_all(st) == 0);
    skv_store_stats s = stats_of(st);
    CHECK_MSG(only_tier(&s, SKV_STORE_TIER_TOKENS), "raw %llu of %llu", (unsigned long long)s.tier_positions[1],
              (unsigned long long)s.unique_positions);
    CHECK(all_restore(st) == SKV_OK);
    CHECK(skv_store_set_price(st, 1.0) == SKV_OK); /* bytes are dear: cheap-coded */
    CHECK(skv_store_gc(st, &g) == SKV_OK && g.n_retiered > 0);
    s = stats_of(st);
    CHECK_MSG(only_tier(&s, SKV_STORE_TIER_CMV), "cmv %llu of %llu", (unsigned long long)s.tier_positions[2],
              (unsigned long long)s.unique_positions);
    CHECK(s.tier_bytes[SKV_STORE_TIER_CMV] < s.tier_positions[SKV_STORE_TIER_CMV] * 8);
    CHECK(all_restore(st) == SKV_OK);
    CHECK(skv_store_train_dict(st, 0, &id, &nid) == SKV_OK && id && nid > 0);
    CHECK(skv_store_gc(st, &g) == SKV_OK && g.n_retiered > 0);
    s = stats_of(st);
    CHECK(s.dict_id == id && s.dict_ids == nid);
    CHECK_MSG(only_tier(&s, SKV_STORE_TIER_CMVD), "cmvd %llu of %llu", (unsigned long long)s.tier_positions[3],
              (unsigned long long)s.unique_positions);
    CHECK(all_restore(st) == SKV_OK);
    /* the budget up: materialised (kv tier) near the root; down again: token tiers */
    CHECK(skv_store_set_budget(st, 64u << 20) == SKV_OK && skv_store_gc(st, &g) == SKV_OK && g.n_materialised > 0);
    s = stats_of(st);
    CHECK(s.tier_nodes[SKV_STORE_TIER_KV] == s.mat_nodes && s.mat_nodes > 0);
    CHECK(all_restore(st) == SKV_OK);
    CHECK(skv_store_set_budget(st, 0) == SKV_OK && skv_store_gc(st, &g) == SKV_OK && g.n_demoted > 0);
    s = stats_of(st);
    CHECK(only_tier(&s, SKV_STORE_TIER_CMVD));
    CHECK(all_restore(st) == SKV_OK);
    /* a node restored often goes back to raw tokens: the price at which a fresh node
     * (E = 2) is coded but one with E > 20 is not */
    s = stats_of(st);
    double len = (double)g_s[0].n - 40, save = 8.0 * len - 8 - (2.0 + s.cm_bpp) * len;
    CHECK(save > 0);
    CHECK(skv_store_set_price(st, 10.0 * (len / s.cm_tps) / save) == SKV_OK && skv_store_gc(st, &g) == SKV_OK);
    uint64_t raw0 = stats_of(st).tier_positions[SKV_STORE_TIER_TOKENS];
    for (int i = 0; i < 40; i++) CHECK(check_get(st, &g_s[0]) == SKV_OK);
    s = stats_of(st);
    CHECK_MSG(s.tier_positions[SKV_STORE_TIER_TOKENS] >= raw0 + 30, "raw positions %llu -> %llu",
              (unsigned long long)raw0, (unsigned long long)s.tier_positions[SKV_STORE_TIER_TOKENS]);
    CHECK(all_restore(st) == SKV_OK);
    CHECK(skv_store_set_price(st, 0) == SKV_ERR_INVALID_ARG);
    skv_store_close(st);
    st = open_at(where, SKV_STORE_READONLY, -1); /* another handle reads the same tiers */
    CHECK(st && all_restore(st) == SKV_OK);
    skv_store_close(st);
}

static void test_tiers_lmdb(void) { tiers_case(0); }
static void test_tiers_redis(void)
{
    if (g_have_redis) tiers_case(1);
    else printf("SKIP test_store_tiers:test_tiers_redis: redis-server is not installed\n");
}

/* ---- hostile records -------------------------------------------------------- */

/* Replaces (v != NULL) or deletes the meta record `name` of the store at where. */
static int lmdb_meta(const char *dir, const char *table, const void *key, size_t kn, const void *v, size_t vn)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {kn, (void *)(uintptr_t)key}, val = {vn, (void *)(uintptr_t)v};
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 16);
    if (!rc) rc = mdb_env_set_mapsize(env, 1ull << 30);
    if (!rc) rc = mdb_env_open(env, dir, 0, 0664);
    if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc && !(rc = mdb_dbi_open(txn, table, 0, &dbi))) {
        rc = v ? mdb_put(txn, dbi, &k, &val, 0) : mdb_del(txn, dbi, &k, NULL);
        rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    }
    mdb_env_close(env);
    return rc;
}

static int lmdb_read(const char *dir, const char *table, const void *key, size_t kn, uint8_t **out, size_t *on)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {kn, (void *)(uintptr_t)key}, v;
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 16);
    if (!rc) rc = mdb_env_set_mapsize(env, 1ull << 30);
    if (!rc) rc = mdb_env_open(env, dir, MDB_RDONLY, 0664);
    if (!rc) rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (!rc && !(rc = mdb_dbi_open(txn, table, 0, &dbi)) && !(rc = mdb_get(txn, dbi, &k, &v))) {
        *out = malloc(v.mv_size);
        memcpy(*out, v.mv_data, v.mv_size);
        *on = v.mv_size;
    }
    if (!rc) mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

static void redis_meta_key(char *buf, size_t cap, const char *prefix, const char *name)
{
    uint8_t fp[16];
    int n = snprintf(buf, cap, "%s:skv2:", prefix);
    skv_model_fingerprint(g_m, fp);
    for (int i = 0; i < 16; i++) n += snprintf(buf + n, cap - (size_t)n, "%02x", fp[i]);
    snprintf(buf + n, cap - (size_t)n, ":m:%s", name);
}

/* Sets (v) or deletes the Redis key. */
static int redis_set(const char *key, const void *v, size_t vn)
{
    redisContext *c = redis_connect(&g_redis);
    redisReply *r = !c ? NULL : v ? redisCommand(c, "SET %s %b", key, v, vn) : redisCommand(c, "DEL %s", key);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok ? 0 : 1;
}

static int redis_get(const char *key, uint8_t **out, size_t *on)
{
    redisContext *c = redis_connect(&g_redis);
    redisReply *r = c ? redisCommand(c, "GET %s", key) : NULL;
    int ok = r && r->type == REDIS_REPLY_STRING;
    if (ok) {
        *out = malloc(r->len);
        memcpy(*out, r->str, r->len);
        *on = r->len;
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok ? 0 : 1;
}

/* The meta record `name`: read (v NULL, *out), replaced or deleted (del). */
static int meta_rw(int redis, const char *prefix, const char *where, const char *name, int del, uint8_t **out,
                   size_t *on, const uint8_t *v, size_t vn)
{
    char key[300];
    if (redis) {
        redis_meta_key(key, sizeof key, prefix, name);
        if (out) return redis_get(key, out, on);
        return redis_set(key, del ? NULL : v, vn);
    }
    if (out) return lmdb_read(where, "meta", name, strlen(name), out, on);
    return lmdb_meta(where, "meta", name, strlen(name), del ? NULL : v, vn);
}

static int get_fails(skv_store *st, const sess *s, const char *want)
{
    skv_ctx *c = new_ctx();
    int32_t tok[256];
    size_t n;
    int rc = skv_store_get(st, s->name, c, SKV_STORE_VERIFY, tok, 256, &n, NULL);
    int ok = rc == SKV_ERR_FORMAT && strstr(skv_store_last_error(st), want);
    if (!ok) fprintf(stderr, "get %s: %d '%s' (wanted FORMAT '%s')\n", s->name, rc, skv_store_last_error(st), want);
    skv_ctx_free(c);
    return ok;
}

static void hostile_case(int redis)
{
    char where[300], name[32];
    uint64_t id = 0;
    uint8_t *rec = NULL;
    size_t rn = 0;
    skv_store_gc_report g;
    where_of(where, sizeof where, redis, "hostile");
    skv_store *st = open_at(where, SKV_STORE_CREATE, 0);
    CHECK(st != NULL);
    if (!st) return;
    CHECK(skv_store_set_price(st, 1.0) == SKV_OK && put_all(st) == 0);
    CHECK(skv_store_train_dict(st, 0, &id, NULL) == SKV_OK && skv_store_gc(st, &g) == SKV_OK);
    CHECK(only_tier((skv_store_stats[]){stats_of(st)}, SKV_STORE_TIER_CMVD));
    skv_store_close(st);
    snprintf(name, sizeof name, "dict.%016llx", (unsigned long long)id);
    CHECK(meta_rw(redis, "hostile", where, name, 0, &rec, &rn, NULL, 0) == 0 && rn > 40);
    if (!rec) return;
    rec[28] ^= 0x01; /* an id of the dictionary */
    CHECK(meta_rw(redis, "hostile", where, name, 0, NULL, NULL, rec, rn) == 0);
    st = open_at(where, 0, -1);
    CHECK(st && get_fails(st, &g_s[1], "is damaged"));
    skv_store_close(st);
    /* the checksum made to match: the id no longer matches its ids */
    uint64_t h = XXH3_64bits(rec, rn - 8);
    for (int i = 0; i < 8; i++) rec[rn - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    CHECK(meta_rw(redis, "hostile", where, name, 0, NULL, NULL, rec, rn) == 0);
    st = open_at(where, 0, -1);
    CHECK(st && get_fails(st, &g_s[1], "does not match its id"));
    skv_store_close(st);
    CHECK(meta_rw(redis, "hostile", where, name, 1, NULL, NULL, NULL, 0) == 0); /* missing */
    st = open_at(where, 0, -1);
    CHECK(st && get_fails(st, &g_s[2], "is missing"));
    skv_store_close(st);
    free(rec);
}

static void test_hostile_lmdb(void) { hostile_case(0); }
static void test_hostile_redis(void)
{
    if (g_have_redis) hostile_case(1);
    else printf("SKIP test_store_tiers:test_hostile_redis: redis-server is not installed\n");
}

/* A coded node record with one flipped byte: FORMAT, never another session's tokens. */
static void test_damaged_coded_node(void)
{
    char where[300];
    where_of(where, sizeof where, 0, "coded");
    skv_store *st = open_at(where, SKV_STORE_CREATE, 0);
    CHECK(st && skv_store_set_price(st, 1.0) == SKV_OK);
    CHECK(st && skv_store_put(st, "x", g_s[0].tok, g_s[0].n, NULL) == SKV_OK);
    CHECK(only_tier((skv_store_stats[]){stats_of(st)}, SKV_STORE_TIER_CMV));
    skv_store_close(st);
    uint8_t key[8] = {0, 0, 0, 0, 0, 0, 0, 1}, *rec = NULL;
    size_t rn = 0;
    CHECK(lmdb_read(where, "nodes", key, 8, &rec, &rn) == 0 && rn > 100 && !memcmp(rec, "SKVC", 4));
    if (!rec) return;
    for (size_t at = 8; at < rn; at += rn / 7) {
        rec[at] ^= 0x01;
        CHECK(lmdb_meta(where, "nodes", key, 8, rec, rn) == 0);
        st = open_at(where, SKV_STORE_READONLY, -1);
        sess x = g_s[0];
        snprintf(x.name, sizeof x.name, "x");
        CHECK(st && get_fails(st, &x, "node 1"));
        skv_store_close(st);
        rec[at] ^= 0x01;
    }
    CHECK(lmdb_meta(where, "nodes", key, 8, rec, rn) == 0);
    free(rec);
}

/* ---- versions --------------------------------------------------------------- */

static void set_version(const char *where, uint32_t v)
{
    uint8_t *h = NULL;
    size_t hn = 0;
    CHECK(lmdb_read(where, "meta", "header", 6, &h, &hn) == 0 && hn == 168);
    if (!h) return;
    for (int i = 0; i < 4; i++) h[8 + i] = (uint8_t)(v >> (8 * i));
    uint64_t x = XXH3_64bits(h, 160);
    for (int i = 0; i < 8; i++) h[160 + i] = (uint8_t)(x >> (8 * i));
    CHECK(lmdb_meta(where, "meta", "header", 6, h, hn) == 0);
    free(h);
}

static uint32_t version_of(const char *where)
{
    uint8_t *h = NULL;
    size_t hn = 0;
    uint32_t v = 0;
    if (lmdb_read(where, "meta", "header", 6, &h, &hn) == 0 && hn == 168) v = h[8] | (uint32_t)h[9] << 8;
    free(h);
    return v;
}

static void test_versions(void)
{
    char where[300], err[512];
    skv_store *st;
    where_of(where, sizeof where, 0, "v2");
    st = open_at(where, SKV_STORE_CREATE, 0);
    CHECK(st && skv_store_set_price(st, 1e-12) == SKV_OK && put_all(st) == 0); /* raw: what version 2 stored */
    skv_store_close(st);
    CHECK(version_of(where) == 4);
    set_version(where, 2);
    st = open_at(where, SKV_STORE_READONLY, -1); /* read as is */
    CHECK(st && all_restore(st) == SKV_OK);
    skv_store_close(st);
    CHECK(version_of(where) == 2);
    st = open_at(where, 0, -1); /* a writer upgrades it */
    CHECK(st && all_restore(st) == SKV_OK);
    skv_store_close(st);
    CHECK(version_of(where) == 4);
    set_version(where, 5);
    CHECK(skv_store_open(where, g_m, 0, NULL, &st, err, sizeof err) == SKV_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err, "version 5") && strstr(err, "2..4"), "%s", err);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_store_tiers");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_store_tiers:setup: %s\n", err);
        return 1;
    }
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    char *text = malloc(20001);
    size_t len = f ? fread(text, 1, 20000, f) : 0;
    if (f) fclose(f);
    text[len] = 0;
    g_text = malloc(20000 * sizeof *g_text);
    if (skv_tokenize(g_m, text, len, 1, g_text, 20000, &g_n_text) || g_n_text < 2000) {
        printf("FAIL test_store_tiers:setup: cannot tokenize the held-out text\n");
        return 1;
    }
    free(text);
    make_sessions();
    snprintf(g_root, sizeof g_root, "/tmp/seqkv_test_tiers_%d", (int)getpid());
    mkdir(g_root, 0700);
    g_have_redis = redis_available();
    if (!g_have_redis && getenv("SEQKV_REQUIRE_REDIS") && atoi(getenv("SEQKV_REQUIRE_REDIS"))) {
        printf("FAIL test_store_tiers: redis-server is not installed (scripts/install-deps.sh)\n");
        return 1;
    }
    if (g_have_redis) {
        snprintf(g_redis.dir, sizeof g_redis.dir, "%.200s/redis", g_root);
        if (redis_start(&g_redis, NULL)) {
            printf("FAIL test_store_tiers:setup: redis-server did not start\n");
            return 1;
        }
    }
    RUN(test_tiers_lmdb);
    RUN(test_hostile_lmdb);
    RUN(test_damaged_coded_node);
    RUN(test_versions);
    RUN(test_tiers_redis);
    RUN(test_hostile_redis);
    redis_kill(&g_redis);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_root);
    free(g_text);
    skv_model_free(g_m);
    TEST_END();
}
