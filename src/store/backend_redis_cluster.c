/* The Redis backend's cluster mode (backend_redis.h), beside backend_redis_sentinel.c at
 * the bottom of the chain: finding the master that serves the store's hash slot.
 *
 *   redis+cluster://H1:P1[,H2:P2...]/PREFIX[?replicas=N&wait_ms=MS&failover=S]
 *
 * Written on hiredis, which has no cluster support (Debian packages no cluster client:
 * hiredis-cluster is not packaged), and kept to what the store needs. Every key of one
 * store carries the hash tag {PREFIX} (backend_redis_conn.c: rb_top), so one store lives
 * in ONE hash slot, CRC16(PREFIX) mod 16384, and every transaction (WATCH ... MULTI ...
 * EXEC) touches that slot only; different stores (prefixes) spread over the masters.
 *
 * A new connection (connections are pooled: at open and after one was lost or
 * redirected) asks the seed nodes in turn for CLUSTER SLOTS, connects to the master named
 * for the slot and probes it with EXISTS of the store's header key; a MOVED answer is
 * followed (at most RB_CLUSTER_HOPS times: the map it was given was stale), an ASK
 * answer (the slot is being migrated away) keeps this node, which still owns the slot.
 * While no node serves the slot (its master is down and no replica promoted yet, or the
 * cluster says CLUSTERDOWN) it asks again every 0.2 s (rb_poll_nodes) for up to
 * `failover` seconds, then fails naming each seed and what it said. No slot map is kept
 * between connections: one slot, asked again whenever the pool is empty.
 *
 * A MOVED, ASK, TRYAGAIN or CLUSTERDOWN answer inside a transaction (backend_redis_tx.c:
 * rb_cluster_redirect) drops the connection and marks the call to run again (store_run,
 * at most STORE_CONN_RETRIES attempts with growing pauses), as a lost connection does in
 * sentinel mode. */
#include <pthread.h>
#include "core/fpguard.h"
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/backend_redis.h"

#define RB_CLUSTER_HOPS 5     /* MOVED answers followed by one connection attempt */
#define RB_CLUSTER_TIMEOUT 1.0 /* seconds for one node's answer while looking */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), bit by bit: Redis Cluster's
 * key hash. One slot is computed per store, so speed does not matter. */
static unsigned crc16(const char *s, size_t n)
{
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (int b = 0; b < 8; b++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

int rb_cluster_slot(const char *tag) { return (int)(crc16(tag, strlen(tag)) & 16383); }

int rb_parse_cluster_url(const char *url, redis_addr *a, skv_err *err)
{
    const char *h = url + strlen("redis+cluster://"), *q = strchr(h, '?');
    const char *end = q ? q : h + strlen(h), *sl = memchr(h, '/', (size_t)(end - h));
    rb_failover_defaults(a);
    const char *grammar = "redis+cluster://HOST:PORT[,HOST:PORT...]/PREFIX[?replicas=N&wait_ms=MS&failover=S"
                          "&shards=N&shard_tokens=B]";
    int rc = rb_parse_hosts(h, sl ? sl : end, a, &a->n_seed, "seed node", url, err);
    if (rc) return rc;
    if (!sl || sl + 1 >= end || (size_t)(end - sl - 1) >= sizeof a->prefix)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': name the store's prefix: %s", url, grammar);
    snprintf(a->prefix, sizeof a->prefix, "%.*s", (int)(end - sl - 1), sl + 1);
    if (strpbrk(a->prefix, "{}/"))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': a cluster store's prefix is its hash tag: "
                        "no '{', '}' or '/'", url);
    a->cluster = 1; /* (before the options: their message names the cluster's own) */
    if ((rc = rb_parse_options(q, a, url, err))) return rc;
    a->slot = rb_cluster_slot(a->prefix);
    snprintf(a->master, sizeof a->master, "cluster slot %d", a->slot);
    return SKV_OK;
}

void rb_top(const redis_addr *a, char *buf, size_t cap)
{
    snprintf(buf, cap, a->cluster ? "{%s}:skv%d:" : "%s:skv%d:", a->prefix, STORE_KEY_VERSION);
}

int rb_cluster_redirect(const redis_addr *a, const redisReply *r)
{
    static const char *const why[] = {"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"};
    if (!a->cluster || !r || r->type != REDIS_REPLY_ERROR) return 0;
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++)
        if (!strncmp(r->str, why[i], strlen(why[i]))) return 1;
    return 0;
}

int rb_cluster_fail(const redis_addr *a, const char *url, const redisReply *r, skv_err *err)
{
    return skv_fail(err, SKV_ERR_IO, "Redis Cluster at %s: the store's slot %d answered '%.200s' (it is being "
                    "migrated or the cluster is reconfiguring: nothing was written; retry when it settles)", url,
                    a->slot, r->str);
}

/* ---- finding the slot's master ------------------------------------------------------ */

int rb_cluster_owner(const redisReply *r, int slot, const char *asked, char *host, size_t hcap, int *port)
{
    if (r->type != REDIS_REPLY_ARRAY) return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
            continue;
        if (slot < e->element[0]->integer || slot > e->element[1]->integer) continue;
        const redisReply *m = e->element[2];
        if (m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
            m->element[1]->integer > 65535 || m->element[0]->len >= hcap)
            return -1;
        int named = m->element[0]->len > 0 && strcmp(m->element[0]->str, "?");
        snprintf(host, hcap, "%s", named ? m->element[0]->str : asked);
        *port = (int)m->element[1]->integer;
        return 0;
    }
    return -1;
}

/* Seed i's CLUSTER SLOTS answer for a->slot; 0, or -1 with why. */
static int ask_seed(const redis_addr *a, int i, char *host, size_t hcap, int *port, skv_err *why)
{
    skv_err e;
    redisContext *c = rb_connect_timeout(a->sent_host[i], a->sent_port[i], NULL, RB_CLUSTER_TIMEOUT, &e);
    if (!c) return skv_fail(why, SKV_ERR_IO, "seed %s:%d: unreachable", a->sent_host[i], a->sent_port[i]), -1;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    redisReply *r = redisCommandArgv(c, 2, argv, NULL);
    int ok = r && !rb_cluster_owner(r, a->slot, a->sent_host[i], host, hcap, port);
    if (!ok)
        skv_fail(why, SKV_ERR_IO, "seed %s:%d: %.150s", a->sent_host[i], a->sent_port[i],
                 !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "names no master for the slot");
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok ? 0 : -1;
}

int rb_parse_moved(const char *s, char *host, size_t hcap, int *port)
{
    const char *sp = strchr(s, ' '), *hp = sp ? strchr(sp + 1, ' ') : NULL;
    if (!hp || !hp[1]) return -1;
    const char *co = strrchr(hp + 1, ':');
    size_t hn = co ? (size_t)(co - hp - 1) : 0;
    if (!co || hn == 0 || hn >= hcap) return -1;
    char *end;
    long p = strtol(co + 1, &end, 10);
    if (*end || p < 1 || p > 65535) return -1;
    memcpy(host, hp + 1, hn);
    host[hn] = 0;
    *port = (int)p;
    return 0;
}

/* Probes host:port with EXISTS of the store's header key: 1 it serves the slot, 0 it
 * redirected (MOVED: host/port now name the next node), -1 it cannot (why). */
static int probe(const redis_addr *a, redisContext *c, char *host, size_t hcap, int *port, skv_err *why)
{
    char key[300];
    rb_top(a, key, sizeof key);
    strncat(key, "H", sizeof key - strlen(key) - 1);
    const char *argv[2] = {"EXISTS", key};
    redisReply *r = redisCommandArgv(c, 2, argv, NULL);
    int rc = -1, err = r && r->type == REDIS_REPLY_ERROR;
    if (r && r->type == REDIS_REPLY_INTEGER) rc = 1;
    else if (err && !strncmp(r->str, "ASK ", 4)) rc = 1; /* still the owner */
    else if (err && !strncmp(r->str, "MOVED ", 6) && !rb_parse_moved(r->str, host, hcap, port)) rc = 0;
    if (rc < 0)
        skv_fail(why, SKV_ERR_IO, "%s:%d: %.150s", host, *port,
                 !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    if (r) freeReplyObject(r);
    return rc;
}

/* A connection to the node serving the slot, starting at host:port, following MOVED. */
static redisContext *follow(const redis_addr *a, char *host, size_t hcap, int port, skv_err *why)
{
    for (int hop = 0; hop <= RB_CLUSTER_HOPS; hop++) {
        skv_err e;
        redisContext *c = rb_connect_timeout(host, port, NULL, RB_CLUSTER_TIMEOUT, &e);
        if (!c) {
            skv_fail(why, SKV_ERR_IO, "master %s:%d of slot %d: unreachable", host, port, a->slot);
            return NULL;
        }
        int p = probe(a, c, host, hcap, &port, why);
        if (p == 1) return c;
        redisFree(c);
        if (p < 0) return NULL;
    }
    skv_fail(why, SKV_ERR_IO, "slot %d: more than %d MOVED redirections", a->slot, RB_CLUSTER_HOPS);
    return NULL;
}

/* Seed i's master of the slot, found and probed. */
static redisContext *try_seed(const redis_addr *a, int i, skv_err *why)
{
    char host[128];
    int port;
    if (ask_seed(a, i, host, sizeof host, &port, why)) return NULL;
    return follow(a, host, sizeof host, port, why);
}

redisContext *rb_cluster_connect(const redis_addr *a, skv_err *err)
{
    char what[300];
    snprintf(what, sizeof what, "no Redis Cluster master serves slot %d (store '%.200s')", a->slot, a->prefix);
    return rb_poll_nodes(a, a->n_seed, try_seed, what, "are the nodes up and has the cluster promoted a replica?",
                         err);
}
