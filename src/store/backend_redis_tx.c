/* Redis transactions (backend_redis.c has the layout): optimistic, all or nothing.
 *
 *   begin     take a connection (pool)
 *   get       served from this transaction's own records first; else WATCH key + GET
 *             (pipelined), remembered (a second read costs nothing and sees the same)
 *   put/del   remembered only: nothing reaches Redis before commit
 *   scan      WATCH the set/hash and read it (children: HGETALL; the placement order:
 *             ZRANGEBYLEX in pages), or SCAN the namespace (whole tables: stats, gc, ls);
 *             merged with this transaction's own writes, in key order
 *   commit    MULTI, every write, EXEC. A nil EXEC = a watched key changed: STORE_CONFLICT,
 *             nothing applied. A command refused while queued (out of memory) makes Redis
 *             discard the whole transaction (EXECABORT): an error, nothing applied.
 *             Sentinel mode: WAIT follows EXEC, the commit is acknowledged once
 *             `replicas` replicas have it.
 *
 * Sentinel mode: a connection lost before the commit was sent, or a write refused with
 * READONLY (the server was demoted: nothing applied), marks the call as one to run again
 * (rb_retry_take): store_run redoes it on a new connection to the new master.
 *
 * KV blobs are written with SET NX: a blob key names one span of one token path, so a
 * concurrent writer that stored it first stored the same bytes. */
#include <stdlib.h>
#include "core/fpguard.h"
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "store/backend_redis.h"

typedef struct rb_ent {
    uint64_t h;
    int used, tb, has, dirty, known; /* known: read from Redis or written here */
    uint8_t *k, *v;
    size_t kn, vn;
} rb_ent;

struct store_btx {
    redis_backend *b;
    redisContext *c;
    int write, bad, watched;
    rb_ent *e;           /* open addressing, cap a power of two */
    size_t n, cap;
    uint8_t **old;       /* replaced values, freed at the end (get's pointers stay valid) */
    size_t n_old, cap_old;
    rb_buf kb;           /* key scratch */
};

#define ST(t) ((t)->b->base.st)

/* ---- the transaction's records ------------------------------------------ */

static uint64_t ent_hash(int tb, const void *k, size_t kn) { return XXH3_64bits_withSeed(k, kn, (uint64_t)tb + 1); }

static rb_ent *ent_find(store_btx *t, int tb, const void *k, size_t kn, uint64_t h)
{
    if (!t->cap) return NULL;
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        rb_ent *e = &t->e[i];
        if (!e->used) return e;
        if (e->h == h && e->tb == tb && e->kn == kn && !memcmp(e->k, k, kn)) return e;
    }
}

static int ent_grow(store_btx *t)
{
    size_t cap = t->cap ? 2 * t->cap : 64;
    rb_ent *ne = calloc(cap, sizeof *ne), *old = t->e;
    if (!ne) return SKV_ERR_NOMEM;
    size_t oc = t->cap;
    t->e = ne;
    t->cap = cap;
    for (size_t i = 0; i < oc; i++)
        if (old[i].used) *ent_find(t, old[i].tb, old[i].k, old[i].kn, old[i].h) = old[i];
    free(old);
    return SKV_OK;
}

/* The record (tb, k), added (unused fields zero) when new; NULL: out of memory. */
static rb_ent *ent_get(store_btx *t, int tb, const void *k, size_t kn)
{
    uint64_t h = ent_hash(tb, k, kn);
    if ((t->n + 1) * 2 > t->cap && ent_grow(t)) return NULL;
    rb_ent *e = ent_find(t, tb, k, kn, h);
    if (e->used) return e;
    if (!(e->k = malloc(kn ? kn : 1))) return NULL;
    memcpy(e->k, k, kn);
    e->kn = kn;
    e->h = h;
    e->tb = tb;
    e->used = 1;
    t->n++;
    return e;
}

static int ent_set(store_btx *t, rb_ent *e, const void *v, size_t vn, int has)
{
    uint8_t *nv = NULL;
    if (has && !(nv = malloc(vn ? vn : 1))) return SKV_ERR_NOMEM;
    if (has && vn) memcpy(nv, v, vn);
    if (e->v) {
        if (t->n_old == t->cap_old) {
            size_t cap = t->cap_old ? 2 * t->cap_old : 16;
            uint8_t **no = realloc(t->old, cap * sizeof *no);
            if (!no) { free(nv); return SKV_ERR_NOMEM; }
            t->old = no;
            t->cap_old = cap;
        }
        t->old[t->n_old++] = e->v;
    }
    e->v = nv;
    e->vn = has ? vn : 0;
    e->has = has;
    return SKV_OK;
}

static void tx_free(store_btx *t)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].used) {
            free(t->e[i].k);
            free(t->e[i].v);
        }
    for (size_t i = 0; i < t->n_old; i++) free(t->old[i]);
    free(t->e);
    free(t->old);
    free(t->kb.p);
    rb_conn_put(t->b, t->c, t->bad);
    free(t);
}

/* ---- commands ------------------------------------------------------------- */

static _Thread_local int tl_commit_unknown, tl_conn_retry;

void rb_conn_retry_set(void) { tl_conn_retry = 1; }

int rb_retry_take(void)
{
    int u = tl_conn_retry;
    tl_conn_retry = 0;
    return u;
}

int store_commit_unknown_take(void)
{
    int u = tl_commit_unknown;
    tl_commit_unknown = 0;
    return u;
}

static int conn_lost(store_btx *t)
{
    t->bad = 1;
    rb_pool_flush(t->b); /* the idle ones went the same way (a restart, a kill of clients) */
    if (rb_failover_mode(&t->b->addr)) rb_conn_retry_set(); /* a failover, perhaps: nothing was applied */
    return store_err(ST(t), SKV_ERR_IO, "Redis at %s: %s (connection lost; nothing of this call was committed "
                     "unless it said so: retry, a new connection is made)", t->b->url,
                     t->c->errstr[0] ? t->c->errstr : "no reply");
}

static redisReply *cmd(store_btx *t, int argc, const char **argv, const size_t *len)
{
    redisReply *r = redisCommandArgv(t->c, argc, argv, len);
    if (!r) conn_lost(t);
    return r;
}

/* Cluster mode: a redirection (the slot moved: a failover or a migration) or a cluster in
 * transition. Nothing of this transaction was applied (a redirected command is not run;
 * a queued one makes EXEC abort): the connection is dropped and the call runs again on a
 * new one, which asks the cluster where the slot is now. */
static int redirected(store_btx *t, redisReply *r)
{
    skv_err e;
    t->bad = 1;
    rb_pool_flush(t->b);
    rb_conn_retry_set();
    int rc = store_err(ST(t), rb_cluster_fail(&t->b->addr, t->b->url, r, &e), "%s", e.msg);
    freeReplyObject(r);
    return rc;
}

static int reply_err(store_btx *t, redisReply *r, const char *what)
{
    if (rb_cluster_redirect(&t->b->addr, r)) return redirected(t, r);
    int rc = store_err(ST(t), SKV_ERR_IO, "Redis at %s: %s: %.200s%s", t->b->url, what,
                       r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply",
                       r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "OOM", 3)
                           ? " (the Redis server is full: raise maxmemory or use an evicting maxmemory-policy)"
                           : "");
    if (r) freeReplyObject(r);
    return rc;
}

/* WATCH (unless nowatch) then a read command; its reply (or NULL). */
static redisReply *watched_read(store_btx *t, const rb_buf *key, int nowatch, int argc, const char **argv,
                                const size_t *len)
{
    redisReply *w = NULL, *r = NULL;
    const char *wa[2] = {"WATCH", (const char *)key->p};
    size_t wl[2] = {5, key->n};
    if (!nowatch) redisAppendCommandArgv(t->c, 2, wa, wl);
    redisAppendCommandArgv(t->c, argc, argv, len);
    if ((!nowatch && redisGetReply(t->c, (void **)&w) != REDIS_OK) || redisGetReply(t->c, (void **)&r) != REDIS_OK) {
        if (w) freeReplyObject(w);
        conn_lost(t);
        return NULL;
    }
    if (w) freeReplyObject(w);
    t->watched |= !nowatch;
    return r;
}

static int fetch(store_btx *t, int tb, const uint8_t *k, size_t kn, int nowatch, rb_ent *e)
{
    int rc = rb_key(t->b, tb, k, kn, &t->kb);
    if (rc) return store_err(ST(t), rc, "out of memory");
    const char *argv[3] = {tb == TB_CHILDREN ? "HGET" : tb == TB_MATORD ? "ZSCORE" : "GET", (const char *)t->kb.p,
                           (const char *)(tb == TB_CHILDREN ? k + 8 : k)};
    size_t len[3] = {strlen(argv[0]), t->kb.n, tb == TB_CHILDREN ? 4 : kn};
    redisReply *r = watched_read(t, &t->kb, nowatch, tb == TB_CHILDREN || tb == TB_MATORD ? 3 : 2, argv, len);
    if (!r) return SKV_ERR_IO;
    if (r->type == REDIS_REPLY_NIL) rc = ent_set(t, e, NULL, 0, 0);
    else if (r->type == REDIS_REPLY_STRING) rc = ent_set(t, e, tb == TB_MATORD ? "" : r->str,
                                                          tb == TB_MATORD ? 0 : r->len, 1);
    else return reply_err(t, r, "read");
    freeReplyObject(r);
    return rc ? store_err(ST(t), rc, "out of memory") : SKV_OK;
}

/* ---- the backend calls ------------------------------------------------------ */

int rb_begin(store_backend *base, int write, store_btx **out)
{
    store_btx *t = calloc(1, sizeof *t);
    if (!t) return store_err(base->st, SKV_ERR_NOMEM, "out of memory");
    t->b = (redis_backend *)base;
    t->write = write;
    if (!(t->c = rb_conn_get(t->b))) {
        free(t);
        return SKV_ERR_IO;
    }
    *out = t;
    return SKV_OK;
}

int rb_get(store_btx *t, int tb, const void *k, size_t kn, int flags, const uint8_t **v, size_t *vn)
{
    if (t->bad) return SKV_ERR_IO;
    rb_ent *e = ent_get(t, tb, k, kn);
    if (!e) return store_err(ST(t), SKV_ERR_NOMEM, "out of memory");
    if (!e->known) {
        int rc = fetch(t, tb, k, kn, flags & STORE_NOWATCH, e);
        if (rc) return rc;
        e->known = 1;
    }
    if (!e->has) return 1;
    *v = e->v;
    *vn = e->vn;
    return SKV_OK;
}

static int write_ent(store_btx *t, int tb, const void *k, size_t kn, const void *v, size_t vn, int has)
{
    if (t->bad) return SKV_ERR_IO;
    if (!t->write) return store_err(ST(t), SKV_ERR_INTERNAL, "write in a read transaction");
    rb_ent *e = ent_get(t, tb, k, kn);
    if (!e || ent_set(t, e, v, vn, has)) return store_err(ST(t), SKV_ERR_NOMEM, "out of memory");
    e->known = e->dirty = 1;
    return SKV_OK;
}

int rb_put(store_btx *t, int tb, const void *k, size_t kn, const void *v, size_t vn)
{
    return write_ent(t, tb, k, kn, v, vn, 1);
}

int rb_del(store_btx *t, int tb, const void *k, size_t kn) { return write_ent(t, tb, k, kn, NULL, 0, 0); }

int rb_new_id(store_btx *t, uint64_t *next, uint64_t *out)
{
    uint64_t id = 0;
    (void)next; /* ids are random: writers on other machines share no counter */
    while (id == 0)
        if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) return store_err(ST(t), SKV_ERR_IO, "getrandom failed");
    *out = id;
    return SKV_OK;
}

/* ---- commit ---------------------------------------------------------------- */

typedef struct argv_b {
    const char *a[5];
    size_t l[5];
    int n;
} argv_b;

static void arg(argv_b *v, const void *p, size_t n)
{
    v->a[v->n] = p;
    v->l[v->n++] = n;
}

static void arg_s(argv_b *v, const char *s) { arg(v, s, strlen(s)); }

/* Appends the command that applies record e. */
static int append_write(store_btx *t, const rb_ent *e)
{
    argv_b v = {.n = 0};
    int rc = rb_key(t->b, e->tb, e->k, e->kn, &t->kb);
    if (rc) return rc;
    if (e->tb == TB_CHILDREN) {
        arg_s(&v, e->has ? "HSET" : "HDEL");
        arg(&v, t->kb.p, t->kb.n);
        arg(&v, e->k + 8, 4);
        if (e->has) arg(&v, e->v, e->vn);
    } else if (e->tb == TB_MATORD) {
        arg_s(&v, e->has ? "ZADD" : "ZREM");
        arg(&v, t->kb.p, t->kb.n);
        if (e->has) arg_s(&v, "0");
        arg(&v, e->k, e->kn);
    } else {
        arg_s(&v, e->has ? "SET" : "DEL");
        arg(&v, t->kb.p, t->kb.n);
        if (e->has) arg(&v, e->v, e->vn);
        if (e->has && e->tb == TB_KV) arg_s(&v, "NX");
    }
    return redisAppendCommandArgv(t->c, v.n, v.a, v.l) == REDIS_OK ? SKV_OK : SKV_ERR_NOMEM;
}

/* A write refused because the server is a replica now (a failover demoted it): nothing
 * was applied; in sentinel mode the call runs again on the new master. */
static int demoted(store_btx *t, const redisReply *r)
{
    if (!rb_failover_mode(&t->b->addr) || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "READONLY", 8)) return 0;
    t->bad = 1;
    rb_pool_flush(t->b);
    rb_conn_retry_set();
    return 1;
}

/* WAIT's reply (sentinel mode): the commit is acknowledged when enough replicas have it. */
static int wait_reply(store_btx *t, redisReply *r)
{
    const redis_addr *a = &t->b->addr;
    long long got = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (got >= a->replicas) return SKV_OK;
    return store_err(ST(t), SKV_ERR_IO, "Redis master '%s': the commit was applied on the master but %lld of %d "
                     "replicas confirmed it within %d ms: a failover now could lose it (is a replica down? "
                     "replicas=N in the URL sets how many must confirm)", a->master, got < 0 ? 0 : got, a->replicas,
                     a->wait_ms);
}

/* Reads the n replies of MULTI, the queued writes and EXEC (and WAIT's when waited). The
 * whole pipeline has been sent: a connection lost before EXEC's reply leaves the outcome
 * unknown. */
static int exec_replies(store_btx *t, size_t n, int waited)
{
    int rc = SKV_OK;
    for (size_t i = 0; i < n + 2 + (size_t)waited; i++) {
        redisReply *r = NULL;
        if (redisGetReply(t->c, (void **)&r) != REDIS_OK) {
            if (!n) return conn_lost(t); /* a read transaction's check: nothing to apply */
            t->bad = 1;
            rb_pool_flush(t->b);
            tl_commit_unknown = 1; /* lost before EXEC's reply, or after it while waiting for replicas: a put
                                    * asks the (new) master whether it has the session (store_session.c) */
            if (i == n + 2 && !rc) /* EXEC's reply was read: applied, unconfirmed by replicas */
                return store_err(ST(t), SKV_ERR_IO, "Redis master '%s': the commit was applied on the master "
                                 "but the connection was lost waiting for its replicas (%s): a failover now "
                                 "could lose it", t->b->addr.master,
                                 t->c->errstr[0] ? t->c->errstr : "no reply");
            return store_err(ST(t), SKV_ERR_IO, "Redis at %s: %s (the connection was lost during the commit: whether "
                             "it was applied is not known)", t->b->url, t->c->errstr[0] ? t->c->errstr : "no reply");
        }
        if (i == n + 2) { /* WAIT */
            if (!rc) rc = wait_reply(t, r);
            else freeReplyObject(r);
            continue;
        }
        if (i == n + 1) { /* EXEC */
            if (r->type == REDIS_REPLY_NIL) rc = rc ? rc : STORE_CONFLICT;
            else if (r->type != REDIS_REPLY_ARRAY && !rc) rc = reply_err(t, r, "commit"), r = NULL;
        } else if (r->type == REDIS_REPLY_ERROR && !rc) {
            if (demoted(t, r)) {
                freeReplyObject(r);
                rc = store_err(ST(t), SKV_ERR_IO, "Redis at %s: the server was demoted to a replica (a failover): "
                               "nothing was written", t->b->url);
                continue;
            }
            rc = reply_err(t, r, "commit refused, nothing was written");
            r = NULL;
        }
        if (r) freeReplyObject(r);
    }
    return rc;
}

int rb_commit(store_btx *t)
{
    size_t n = 0;
    tl_commit_unknown = 0;
    int rc = t->bad ? SKV_ERR_IO : SKV_OK, waited = 0;
    const char *multi = "MULTI", *exec = "EXEC";
    size_t ml = 5, el = 4;
    char nrep[16], ms[16];
    snprintf(nrep, sizeof nrep, "%d", t->b->addr.replicas);
    snprintf(ms, sizeof ms, "%d", t->b->addr.wait_ms);
    const char *wait[3] = {"WAIT", nrep, ms};
    size_t wl[3] = {4, strlen(nrep), strlen(ms)};
    if (!rc && (t->watched || t->write)) {
        redisAppendCommandArgv(t->c, 1, &multi, &ml);
        for (size_t i = 0; i < t->cap && !rc; i++)
            if (t->e[i].used && t->e[i].dirty) {
                if ((rc = append_write(t, &t->e[i]))) rc = store_err(ST(t), rc, "out of memory");
                n++;
            }
        if (rc) t->bad = 1; /* half a pipeline: the connection is dropped, nothing is sent */
        else redisAppendCommandArgv(t->c, 1, &exec, &el);
        if (!rc && n && t->write == STORE_TX_WRITE && rb_failover_mode(&t->b->addr) && t->b->addr.replicas) {
            redisAppendCommandArgv(t->c, 3, wait, wl);
            waited = 1;
        }
        if (!rc) rc = exec_replies(t, n, waited);
    }
    tx_free(t);
    return rc;
}

void rb_abort(store_btx *t)
{
    if (!t) return;
    if (t->watched && !t->bad) {
        const char *argv[1] = {"UNWATCH"};
        size_t len[1] = {7};
        redisReply *r = cmd(t, 1, argv, len);
        if (r) freeReplyObject(r);
    }
    tx_free(t);
}

/* ---- scans ----------------------------------------------------------------- */

/* One record of a scan: key and value copied into the scan's own arena. */
typedef struct rec {
    uint8_t *k, *v;
    size_t kn, vn;
    int del; /* this transaction deleted it */
} rec;

typedef struct rec_list {
    rec *r;
    size_t n, cap;
} rec_list;

static int rec_add(rec_list *l, const void *k, size_t kn, const void *v, size_t vn, int del)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        rec *nr = realloc(l->r, cap * sizeof *nr);
        if (!nr) return SKV_ERR_NOMEM;
        l->r = nr;
        l->cap = cap;
    }
    rec *r = &l->r[l->n];
    if (!(r->k = malloc(kn + vn + 1))) return SKV_ERR_NOMEM;
    memcpy(r->k, k, kn);
    r->v = r->k + kn;
    if (vn) memcpy(r->v, v, vn);
    r->kn = kn;
    r->vn = vn;
    r->del = del;
    l->n++;
    return SKV_OK;
}

static void rec_free(rec_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->r[i].k);
    free(l->r);
}

static int rec_cmp(const void *a, const void *b)
{
    const rec *x = a, *y = b;
    size_t n = x->kn < y->kn ? x->kn : y->kn;
    int c = memcmp(x->k, y->k, n);
    return c ? c : (x->kn > y->kn) - (x->kn < y->kn);
}

/* This transaction's own writes to table tb under prefix. */
static int own_writes(store_btx *t, int tb, const uint8_t *prefix, size_t pn, rec_list *l)
{
    for (size_t i = 0; i < t->cap; i++) {
        const rb_ent *e = &t->e[i];
        if (!e->used || !e->dirty || e->tb != tb || e->kn < pn || (pn && memcmp(e->k, prefix, pn))) continue;
        if (rec_add(l, e->k, e->kn, e->v, e->vn, !e->has)) return SKV_ERR_NOMEM;
    }
    if (l->n > 1) qsort(l->r, l->n, sizeof *l->r, rec_cmp);
    return SKV_OK;
}

/* Emits base (sorted) merged with own (sorted; own wins, deletions hide). */
static int emit_merged(rec_list *base, rec_list *own, store_scan_fn fn, void *u)
{
    size_t i = 0, j = 0;
    int r = 0;
    while (!r && (i < base->n || j < own->n)) {
        int c = i >= base->n ? 1 : j >= own->n ? -1 : rec_cmp(&base->r[i], &own->r[j]);
        const rec *x = c < 0 ? &base->r[i] : &own->r[j];
        if (!x->del) r = fn(u, x->k, x->kn, x->v, x->vn);
        if (c <= 0) i++;
        if (c >= 0) j++;
    }
    return r;
}

/* A node's children: the parent's hash, all of it. */
static int scan_children(store_btx *t, const uint8_t *parent, rec_list *base)
{
    int rc = rb_key(t->b, TB_CHILDREN, parent, 8, &t->kb);
    if (rc) return rc;
    const char *argv[2] = {"HGETALL", (const char *)t->kb.p};
    size_t len[2] = {7, t->kb.n};
    redisReply *r = watched_read(t, &t->kb, 0, 2, argv, len);
    if (!r) return SKV_ERR_IO;
    if (r->type != REDIS_REPLY_ARRAY) return reply_err(t, r, "children");
    uint8_t key[12];
    memcpy(key, parent, 8);
    for (size_t i = 0; i + 1 < r->elements && !rc; i += 2) {
        if (r->element[i]->len != 4) continue; /* not ours */
        memcpy(key + 8, r->element[i]->str, 4);
        rc = rec_add(base, key, 12, r->element[i + 1]->str, r->element[i + 1]->len, 0);
    }
    freeReplyObject(r);
    if (base->n > 1) qsort(base->r, base->n, sizeof *base->r, rec_cmp);
    return rc;
}

/* The placement order, one page of the sorted set (members ascending) from offset off. */
static int order_page(store_btx *t, size_t off, size_t count, rec_list *base)
{
    char o[24], c[24];
    int rc = rb_key(t->b, TB_MATORD, NULL, 0, &t->kb);
    if (rc) return rc;
    snprintf(o, sizeof o, "%zu", off);
    snprintf(c, sizeof c, "%zu", count);
    const char *argv[7] = {"ZRANGEBYLEX", (const char *)t->kb.p, "-", "+", "LIMIT", o, c};
    size_t len[7] = {11, t->kb.n, 1, 1, 5, strlen(o), strlen(c)};
    redisReply *r = watched_read(t, &t->kb, 0, 7, argv, len);
    if (!r) return SKV_ERR_IO;
    if (r->type != REDIS_REPLY_ARRAY) return reply_err(t, r, "placement order");
    for (size_t i = 0; i < r->elements && !rc; i++) rc = rec_add(base, r->element[i]->str, r->element[i]->len, "", 0, 0);
    freeReplyObject(r);
    return rc;
}

/* The whole order, read in pages while the callback wants more. */
static int scan_order(store_btx *t, rec_list *own, store_scan_fn fn, void *u)
{
    enum { PAGE = 64 };
    size_t off = 0, j = 0;
    int r = 0, rc;
    for (;;) {
        rec_list page = {0};
        if ((rc = order_page(t, off, PAGE, &page))) { rec_free(&page); return rc; }
        int last = page.n < PAGE;
        size_t i = 0;
        while (!r && (i < page.n || (last && j < own->n))) {
            int c = i >= page.n ? 1 : j >= own->n ? -1 : rec_cmp(&page.r[i], &own->r[j]);
            const rec *x = c < 0 ? &page.r[i] : &own->r[j];
            if (!x->del) r = fn(u, x->k, x->kn, x->v, x->vn);
            if (c <= 0) i++;
            if (c >= 0) j++;
        }
        off += page.n;
        rec_free(&page);
        if (r || last) return r;
    }
}

static void glob_escape(rb_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strchr("*?[]\\", s[i])) rb_buf_cat(b, "\\", 1, NULL, 0);
        rb_buf_cat(b, s + i, 1, NULL, 0);
    }
}

int rb_scan_keys(redis_backend *b, const char *sub, size_t sn, rb_keys *out)
{
    rb_buf pat = {0};
    char cur[32] = "0";
    redisContext *c = rb_conn_get(b);
    int rc = c ? SKV_OK : SKV_ERR_IO;
    memset(out, 0, sizeof *out);
    glob_escape(&pat, b->ns, b->ns_n);
    glob_escape(&pat, sub, sn);
    rb_buf_cat(&pat, "*", 1, NULL, 0);
    do {
        const char *argv[6] = {"SCAN", cur, "MATCH", (const char *)pat.p, "COUNT", "1000"};
        size_t len[6] = {4, strlen(cur), 5, pat.n, 5, 4};
        redisReply *r = rc ? NULL : redisCommandArgv(c, 6, argv, len);
        if (!rc && (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2))
            rc = store_err(b->base.st, SKV_ERR_IO, "Redis SCAN: %s", r ? "unexpected reply" : c->errstr);
        for (size_t i = 0; !rc && i < r->element[1]->elements; i++) {
            redisReply *k = r->element[1]->element[i];
            if (out->n == out->cap) {
                size_t cap = out->cap ? 2 * out->cap : 256;
                uint8_t **nk = realloc(out->k, cap * sizeof *nk);
                size_t *nn = nk ? realloc(out->kn, cap * sizeof *nn) : NULL;
                if (nk) out->k = nk;
                if (!nk || !nn) { rc = SKV_ERR_NOMEM; break; }
                out->kn = nn;
                out->cap = cap;
            }
            if (!(out->k[out->n] = malloc(k->len + 1))) { rc = SKV_ERR_NOMEM; break; }
            memcpy(out->k[out->n], k->str, k->len);
            out->k[out->n][k->len] = 0;
            out->kn[out->n++] = k->len;
        }
        if (!rc) snprintf(cur, sizeof cur, "%.*s", (int)r->element[0]->len, r->element[0]->str);
        if (r) freeReplyObject(r);
    } while (!rc && strcmp(cur, "0"));
    free(pat.p);
    rb_conn_put(b, c, rc != 0);
    if (rc == SKV_ERR_NOMEM) store_err(b->base.st, rc, "out of memory");
    return rc;
}

void rb_keys_free(rb_keys *ks)
{
    for (size_t i = 0; i < ks->n; i++) free(ks->k[i]);
    free(ks->k);
    free(ks->kn);
}

/* A whole table by SCAN (not watched: stats, gc, ls), values by MGET. */
static int scan_table(store_btx *t, int tb, rec_list *base)
{
    static const char letters[TB_N] = {'m', 'n', 'c', 's', 'k', 'x', 'o'};
    char sub[2] = {letters[tb], ':'};
    rb_keys ks;
    int rc = rb_scan_keys(t->b, sub, 2, &ks);
    size_t skip = t->b->ns_n + 2;
    for (size_t i = 0; !rc && i < ks.n; i++) {
        const char *argv[2] = {"GET", (const char *)ks.k[i]};
        size_t len[2] = {3, ks.kn[i]};
        redisReply *r = cmd(t, 2, argv, len);
        if (!r) { rc = SKV_ERR_IO; break; }
        if (r->type == REDIS_REPLY_STRING && ks.kn[i] >= skip)
            rc = rec_add(base, ks.k[i] + skip, ks.kn[i] - skip, r->str, r->len, 0);
        freeReplyObject(r);
    }
    rb_keys_free(&ks);
    if (base->n > 1) qsort(base->r, base->n, sizeof *base->r, rec_cmp);
    return rc;
}

int rb_scan(store_btx *t, int tb, const void *prefix, size_t pn, store_scan_fn fn, void *u)
{
    rec_list base = {0}, own = {0};
    int rc;
    if (t->bad) return SKV_ERR_IO;
    if (tb == TB_CHILDREN ? pn != 8 : pn != 0)
        return store_err(ST(t), SKV_ERR_INTERNAL, "Redis backend: unsupported scan");
    if ((rc = own_writes(t, tb, prefix, pn, &own))) goto out;
    if (tb == TB_MATORD) {
        rc = scan_order(t, &own, fn, u);
        goto out;
    }
    rc = tb == TB_CHILDREN ? scan_children(t, prefix, &base) : scan_table(t, tb, &base);
    if (!rc) rc = emit_merged(&base, &own, fn, u);
out:
    if (rc == SKV_ERR_NOMEM) rc = store_err(ST(t), rc, "out of memory");
    rec_free(&base);
    rec_free(&own);
    return rc;
}
