/* The store's tables (backend.h) in Redis, shared by any number of processes and machines
 * (docs/store.md "Redis layout").
 *
 *   P:skv2:H                     header (as LMDB's meta "header"; names the model)
 *   P:skv2:M                     model record
 *   P:skv2:<fp>:m:<name>         other meta records ("state", "mat")
 *   P:skv2:<fp>:n:<id8>          node records          P:skv2:<fp>:s:<name>  sessions
 *   P:skv2:<fp>:k:<id8 len4>     KV blobs (SET NX: immutable, written once)
 *   P:skv2:<fp>:x:<id8>          placement entries
 *   P:skv2:<fp>:c:<parent8>      hash: token4 -> child id8 (a node's children)
 *   P:skv2:<fp>:o                sorted set (all scores 0, so lexical): rank8|id8 members
 *   P:skv2:<fp>:!misses          hash: kv, node -> evicted records found (statistics)
 *
 * P is the URL's prefix, <fp> the model fingerprint in hex, skv2 the format version.
 *
 * A transaction (backend_redis_tx.c) takes a connection of its own from the pool, WATCHes
 * every key it reads, keeps what it writes in memory and sends it at commit as one
 * MULTI ... EXEC: other clients see all of it or none. When a watched key changed, EXEC
 * does nothing and commit reports STORE_CONFLICT (the caller runs again). No lock is ever
 * held across the network. */
#include <pthread.h>
#include "core/fpguard.h"
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "store/backend_redis.h"

/* ---- statistics, size ----------------------------------------------------- */

static redisReply *conn_cmd(redisContext *c, int argc, const char **argv, const size_t *len)
{
    return redisCommandArgv(c, argc, argv, len);
}

static void r_misses(store_backend *base, const uint64_t add[2], uint64_t out[2])
{
    redis_backend *b = (redis_backend *)base;
    redisContext *c = rb_conn_get(b);
    char key[512], n0[24], n1[24];
    snprintf(key, sizeof key, "%.*s!misses", (int)b->ns_n, b->ns);
    if (out) out[0] = out[1] = 0;
    if (!c) return;
    redisReply *r;
    if (add) {
        snprintf(n0, sizeof n0, "%llu", (unsigned long long)add[0]);
        snprintf(n1, sizeof n1, "%llu", (unsigned long long)add[1]);
        const char *a0[4] = {"HINCRBY", key, "kv", n0}, *a1[4] = {"HINCRBY", key, "node", n1};
        size_t l0[4] = {7, strlen(key), 2, strlen(n0)}, l1[4] = {7, strlen(key), 4, strlen(n1)};
        if (add[0] && (r = conn_cmd(c, 4, a0, l0))) freeReplyObject(r);
        if (add[1] && (r = conn_cmd(c, 4, a1, l1))) freeReplyObject(r);
    } else {
        const char *a[4] = {"HMGET", key, "kv", "node"};
        size_t l[4] = {5, strlen(key), 2, 4};
        if ((r = conn_cmd(c, 4, a, l)) && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
            for (int i = 0; i < 2; i++)
                if (r->element[i]->type == REDIS_REPLY_STRING) out[i] = strtoull(r->element[i]->str, NULL, 10);
        if (r) freeReplyObject(r);
    }
    rb_conn_put(b, c, 0);
}

/* MEMORY USAGE of every key of this store (its namespace, header, model record). */
static int r_bytes(store_backend *base, uint64_t *out)
{
    redis_backend *b = (redis_backend *)base;
    rb_keys ks = {0};
    int rc = rb_scan_keys(b, "", 0, &ks);
    *out = 0;
    if (rc) return rc;
    redisContext *c = rb_conn_get(b);
    if (!c) { rb_keys_free(&ks); return SKV_ERR_IO; }
    rb_buf k = {0};
    for (int i = 0; i < 2 + (int)ks.n && !rc; i++) {
        if (i < 2) rc = rb_buf_cat(&k, b->top, b->top_n, i ? "M" : "H", 1);
        const uint8_t *kp = i < 2 ? k.p : ks.k[i - 2];
        size_t kn = i < 2 ? k.n : ks.kn[i - 2];
        const char *argv[3] = {"MEMORY", "USAGE", (const char *)kp};
        size_t len[3] = {6, 5, kn};
        redisAppendCommandArgv(c, 3, argv, len);
        k.n = 0;
    }
    for (size_t i = 0; i < 2 + ks.n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK) { rc = store_err(base->st, SKV_ERR_IO, "Redis: %s", c->errstr); break; }
        if (r->type == REDIS_REPLY_INTEGER) *out += (uint64_t)r->integer;
        freeReplyObject(r);
    }
    free(k.p);
    rb_keys_free(&ks);
    rb_conn_put(b, c, rc != 0);
    return rc;
}

static void r_close(store_backend *base)
{
    redis_backend *b = (redis_backend *)base;
    if (!b) return;
    for (int i = 0; i < b->n_free; i++) redisFree(b->free_c[i]);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static const store_backend_ops redis_ops = {
    .name = "redis", .begin = rb_begin, .commit = rb_commit, .abort = rb_abort, .get = rb_get, .put = rb_put,
    .del = rb_del, .scan = rb_scan, .new_id = rb_new_id, .bytes = r_bytes, .misses = r_misses, .close = r_close,
    .retry_take = rb_retry_take,
};

/* ---- open --------------------------------------------------------------- */

static void set_ns(redis_backend *b, const uint8_t fp[16])
{
    rb_top(&b->addr, b->top, sizeof b->top);
    b->top_n = strlen(b->top);
    int n = snprintf(b->ns, sizeof b->ns, "%s", b->top);
    for (int i = 0; i < 16; i++) n += snprintf(b->ns + n, sizeof b->ns - (size_t)n, "%02x", fp[i]);
    b->ns[n++] = ':';
    b->ns[n] = 0;
    b->ns_n = (size_t)n;
}

/* 1 when the header is absent. */
static int header_absent(redis_backend *b, redisContext *c)
{
    char key[400];
    snprintf(key, sizeof key, "%sH", b->top);
    const char *argv[2] = {"EXISTS", key};
    size_t len[2] = {6, strlen(key)};
    redisReply *r = conn_cmd(c, 2, argv, len);
    if (!r) return store_err(b->base.st, SKV_ERR_IO, "Redis at %s: %s", b->url, c->errstr);
    skv_err e;
    int rc = r->type == REDIS_REPLY_INTEGER ? r->integer == 0
             : rb_cluster_redirect(&b->addr, r)
                 ? store_err(b->base.st, rb_cluster_fail(&b->addr, b->url, r, &e), "%s", e.msg)
                 : store_err(b->base.st, SKV_ERR_IO, "Redis: %s", r->type == REDIS_REPLY_ERROR ? r->str
                                                                                              : "unexpected reply");
    freeReplyObject(r);
    return rc;
}

/* One CONFIG GET value (into v), or -1 when the server refuses the command (renamed or
 * disabled on managed services). */
static int config_get(redisContext *c, const char *name, char *v, size_t cap)
{
    const char *argv[3] = {"CONFIG", "GET", name};
    size_t len[3] = {6, 3, strlen(name)};
    redisReply *r = conn_cmd(c, 3, argv, len);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING;
    if (ok) snprintf(v, cap, "%s", r->element[1]->str);
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Redis's persistence, checked when a store is opened for writing (docs/store.md
 * "Deployment"). Without an append-only file a restart or kill -9 of redis-server loses
 * the whole store (seen: one kill -9 wiped one): creating a store there is refused unless
 * $SEQKV_REDIS_VOLATILE=1 says a store that can vanish is meant; opening an existing one
 * logs a warning. appendfsync no (the OS flushes when it likes) is a warning: a kill -9 of
 * redis-server loses nothing acknowledged, a power loss may. */
static int durability_check(redis_backend *b, redisContext *c, int fresh)
{
    char aof[16] = "", fsync_[16] = "";
    const char *volatile_ok = getenv("SEQKV_REDIS_VOLATILE");
    int ok_volatile = volatile_ok && !strcmp(volatile_ok, "1");
    if (config_get(c, "appendonly", aof, sizeof aof)) {
        skv_log(SKV_LOG_WARN, "Redis at %s refuses CONFIG GET: cannot check its persistence; make sure it runs with "
                "appendonly yes (docs/store.md \"Deployment\")", b->url);
        return SKV_OK;
    }
    if (strcmp(aof, "yes")) {
        if (fresh && !ok_volatile)
            return store_err(b->base.st, SKV_ERR_UNSUPPORTED,
                             "Redis at %s keeps no append-only file (appendonly %s): a restart or kill -9 of "
                             "redis-server would lose the whole store. Run it with --appendonly yes --appendfsync "
                             "everysec (redis.conf, or on a running server: redis-cli CONFIG SET appendonly yes; "
                             "redis-cli CONFIG REWRITE); docs/store.md \"Deployment\". SEQKV_REDIS_VOLATILE=1 "
                             "creates the store anyway, as a cache that can vanish", b->url, aof);
        if (!ok_volatile)
            skv_log(SKV_LOG_WARN, "Redis at %s keeps no append-only file (appendonly %s): a restart or kill -9 of "
                    "redis-server loses this store; run it with appendonly yes (docs/store.md \"Deployment\")", b->url,
                    aof);
        return SKV_OK;
    }
    if (!config_get(c, "appendfsync", fsync_, sizeof fsync_) && !strcmp(fsync_, "no"))
        skv_log(SKV_LOG_WARN, "Redis at %s: appendfsync no: a power loss may lose the last seconds of puts "
                "(everysec: at most one second; always: none)", b->url);
    return SKV_OK;
}

int store_backend_redis_open(skv_store *st, const char *url, int flags, store_backend **out, int *fresh)
{
    skv_err e = {0};
    redis_backend *b = calloc(1, sizeof *b);
    if (!b) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    b->base = (store_backend){.ops = &redis_ops, .st = st, .readonly = !!(flags & SKV_STORE_READONLY), .evicts = 1};
    pthread_mutex_init(&b->mu, NULL);
    snprintf(b->url, sizeof b->url, "%s", url);
    int rc = rb_parse_url(url, &b->addr, &e);
    if (rc) {
        r_close(&b->base);
        return store_err(st, rc, "%.255s", e.msg);
    }
    b->addr.cut = &b->cut; /* a server's calls stop waiting once a whole search failed */
    set_ns(b, st->fp);
    redisContext *c = rb_conn_get(b);
    rc = c ? header_absent(b, c) : SKV_ERR_IO;
    if (rc >= 0 && !b->base.readonly) {
        int d = durability_check(b, c, rc == 1);
        if (d) rc = d;
    }
    rb_conn_put(b, c, rc < 0);
    if (rc == 1 && b->base.readonly) rc = store_err(st, SKV_ERR_IO, "no seqkv store at '%s' (nothing to read)", url);
    if (rc < 0) {
        r_close(&b->base);
        return rc;
    }
    *fresh = rc == 1;
    *out = &b->base;
    return SKV_OK;
}

int store_redis_peek(const char *url, const char *name, uint8_t **v, size_t *vn, skv_err *err)
{
    redis_addr a;
    char key[400];
    *v = NULL;
    int rc = rb_parse_url(url, &a, err);
    if (rc) return rc;
    redisContext *c = rb_addr_connect(&a, err);
    if (!c) return SKV_ERR_IO;
    rb_top(&a, key, sizeof key - 1);
    strcat(key, strcmp(name, "header") ? "M" : "H");
    const char *argv[2] = {"GET", key};
    size_t len[2] = {3, strlen(key)};
    redisReply *r = conn_cmd(c, 2, argv, len);
    if (!r) rc = skv_fail(err, SKV_ERR_IO, "Redis at %s: %s", url, c->errstr);
    else if (r->type == REDIS_REPLY_NIL) rc = 1;
    else if (rb_cluster_redirect(&a, r)) rc = rb_cluster_fail(&a, url, r, err);
    else if (r->type != REDIS_REPLY_STRING) rc = skv_fail(err, SKV_ERR_IO, "Redis at %s: unexpected reply", url);
    else if (!(*v = malloc(r->len + 1))) rc = skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    else {
        memcpy(*v, r->str, r->len);
        *vn = r->len;
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}
