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
#include <sys/time.h>

#include "core/log.h"
#include "store/backend_redis.h"

int store_is_redis_url(const char *where)
{
    return where && (!strncmp(where, "redis://", 8) || !strncmp(where, "unix://", 7));
}

/* redis://HOST[:PORT][/PREFIX]  or  unix:///path/sock[?prefix=PREFIX] */
static int parse_url(const char *url, redis_addr *a, char *err, size_t errcap)
{
    memset(a, 0, sizeof *a);
    snprintf(a->prefix, sizeof a->prefix, "seqkv");
    a->port = 6379;
    if (!strncmp(url, "unix://", 7)) {
        const char *q = strchr(url + 7, '?');
        size_t n = q ? (size_t)(q - url - 7) : strlen(url + 7);
        if (n == 0 || n >= sizeof a->path) return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "bad Redis URL '%s'", url);
        memcpy(a->path, url + 7, n);
        if (q && strncmp(q, "?prefix=", 8))
            return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "Redis URL '%s': only ?prefix=P is understood", url);
        if (q) snprintf(a->prefix, sizeof a->prefix, "%s", q + 8);
    } else {
        const char *h = url + 8, *sl = strchr(h, '/'), *co = strchr(h, ':');
        size_t hn = sl ? (size_t)(sl - h) : strlen(h);
        if (co && (!sl || co < sl)) {
            char *end;
            long port = strtol(co + 1, &end, 10);
            if (port < 1 || port > 65535 || (end != sl && *end))
                return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "Redis URL '%s': bad port", url);
            a->port = (int)port;
            hn = (size_t)(co - h);
        }
        if (hn == 0 || hn >= sizeof a->host) return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "bad Redis URL '%s'", url);
        memcpy(a->host, h, hn);
        if (sl && sl[1]) snprintf(a->prefix, sizeof a->prefix, "%s", sl + 1);
    }
    if (!a->prefix[0] || strlen(a->prefix) > 200)
        return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "Redis URL '%s': the prefix must be 1..200 bytes", url);
    return SKV_OK;
}

static redisContext *addr_connect(const redis_addr *a, char *err, size_t errcap)
{
    struct timeval tv = {5, 0};
    redisContext *c = a->path[0] ? redisConnectUnixWithTimeout(a->path, tv) : redisConnectWithTimeout(a->host, a->port, tv);
    if (!c || c->err) {
        char where[300];
        if (a->path[0]) snprintf(where, sizeof where, "%s", a->path);
        else snprintf(where, sizeof where, "%s:%d", a->host, a->port);
        skv_errf(err, errcap, SKV_ERR_IO, "cannot connect to Redis at %s: %s (is redis-server running?)", where,
                 c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* A connection idle for a while may have been dropped (server restarted, client killed,
 * idle timeout): one PING tells, before a transaction depends on it. */
static int conn_alive(redisContext *c)
{
    const char *argv[1] = {"PING"};
    size_t len[1] = {4};
    redisReply *r = redisCommandArgv(c, 1, argv, len);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok;
}

redisContext *rb_conn_get(redis_backend *b)
{
    redisContext *c = NULL;
    double idle = 0;
    char e[256];
    pthread_mutex_lock(&b->mu);
    if (b->n_free) {
        c = b->free_c[--b->n_free];
        idle = skv_now() - b->free_t[b->n_free];
    }
    pthread_mutex_unlock(&b->mu);
    if (c && idle > RB_IDLE_CHECK && !conn_alive(c)) {
        redisFree(c);
        c = NULL;
    }
    if (c) return c;
    if (!(c = addr_connect(&b->addr, e, sizeof e))) store_err(b->base.st, SKV_ERR_IO, "%s", e);
    return c;
}

void rb_conn_put(redis_backend *b, redisContext *c, int bad)
{
    if (!c) return;
    pthread_mutex_lock(&b->mu);
    if (!bad && !c->err && b->n_free < RB_POOL) {
        b->free_t[b->n_free] = skv_now();
        b->free_c[b->n_free++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&b->mu);
    redisFree(c);
}

void rb_pool_flush(redis_backend *b)
{
    redisContext *c[RB_POOL];
    pthread_mutex_lock(&b->mu);
    int n = b->n_free;
    memcpy(c, b->free_c, (size_t)n * sizeof *c);
    b->n_free = 0;
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < n; i++) redisFree(c[i]);
}

/* ---- keys --------------------------------------------------------------- */

static const char tb_letter[TB_N] = {'m', 'n', 'c', 's', 'k', 'x', 'o'};

int rb_key(const redis_backend *b, int tb, const uint8_t *k, size_t kn, rb_buf *out)
{
    out->n = 0;
    if (tb == TB_META && kn == 6 && !memcmp(k, "header", 6)) return rb_buf_cat(out, b->top, b->top_n, "H", 1);
    if (tb == TB_META && kn == 5 && !memcmp(k, "model", 5)) return rb_buf_cat(out, b->top, b->top_n, "M", 1);
    char t[3] = {tb_letter[tb], ':', 0};
    int rc = rb_buf_cat(out, b->ns, b->ns_n, t, 2);
    if (tb == TB_CHILDREN) kn = 8;       /* the hash of the parent's children */
    if (tb == TB_MATORD) return rc ? rc : rb_buf_cat(out, NULL, 0, NULL, 0); /* one sorted set */
    return rc ? rc : rb_buf_cat(out, k, kn, NULL, 0);
}

int rb_buf_cat(rb_buf *b, const void *a, size_t an, const void *c, size_t cn)
{
    if (b->n + an + cn + 1 > b->cap) {
        size_t cap = (b->n + an + cn + 1) * 2;
        uint8_t *nb = realloc(b->p, cap);
        if (!nb) return SKV_ERR_NOMEM;
        b->p = nb;
        b->cap = cap;
    }
    if (an) memcpy(b->p + b->n, a, an);
    b->n += an;
    if (cn) memcpy(b->p + b->n, c, cn);
    b->n += cn;
    b->p[b->n] = 0;
    return SKV_OK;
}

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
};

/* ---- open --------------------------------------------------------------- */

static void set_ns(redis_backend *b, const uint8_t fp[16])
{
    int n = snprintf(b->top, sizeof b->top, "%s:skv%d:", b->addr.prefix, STORE_KEY_VERSION);
    b->top_n = (size_t)n;
    n = snprintf(b->ns, sizeof b->ns, "%s", b->top);
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
    int rc = r->type == REDIS_REPLY_INTEGER ? r->integer == 0
                                            : store_err(b->base.st, SKV_ERR_IO, "Redis: %s",
                                                        r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
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
    char e[256];
    redis_backend *b = calloc(1, sizeof *b);
    if (!b) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    b->base = (store_backend){.ops = &redis_ops, .st = st, .readonly = !!(flags & SKV_STORE_READONLY), .evicts = 1};
    pthread_mutex_init(&b->mu, NULL);
    snprintf(b->url, sizeof b->url, "%s", url);
    int rc = parse_url(url, &b->addr, e, sizeof e);
    if (rc) {
        r_close(&b->base);
        return store_err(st, rc, "%s", e);
    }
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

int store_redis_peek(const char *url, const char *name, uint8_t **v, size_t *vn, char *err, size_t errcap)
{
    redis_addr a;
    char key[400];
    *v = NULL;
    int rc = parse_url(url, &a, err, errcap);
    if (rc) return rc;
    redisContext *c = addr_connect(&a, err, errcap);
    if (!c) return SKV_ERR_IO;
    snprintf(key, sizeof key, "%s:skv%d:%s", a.prefix, STORE_KEY_VERSION, strcmp(name, "header") ? "M" : "H");
    const char *argv[2] = {"GET", key};
    size_t len[2] = {3, strlen(key)};
    redisReply *r = conn_cmd(c, 2, argv, len);
    if (!r) rc = skv_errf(err, errcap, SKV_ERR_IO, "Redis at %s: %s", url, c->errstr);
    else if (r->type == REDIS_REPLY_NIL) rc = 1;
    else if (r->type != REDIS_REPLY_STRING) rc = skv_errf(err, errcap, SKV_ERR_IO, "Redis at %s: unexpected reply", url);
    else if (!(*v = malloc(r->len + 1))) rc = skv_errf(err, errcap, SKV_ERR_NOMEM, "out of memory");
    else {
        memcpy(*v, r->str, r->len);
        *vn = r->len;
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}
