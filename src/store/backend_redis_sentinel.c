/* The Redis backend's lowest file (backend_redis.h): one connection with a timeout, and
 * Redis Sentinel: finding the current master of a replicated deployment.
 *
 *   redis+sentinel://S1:P1[,S2:P2...]/MASTER[/PREFIX][?replicas=N&wait_ms=MS&failover=S]
 *
 * A new connection asks the sentinels in turn for MASTER's address (SENTINEL
 * get-master-addr-by-name), connects there and asks the server its ROLE: only a server
 * that says "master" is used (a sentinel's answer can be stale for a moment around a
 * failover, and an old master that comes back is a replica until Sentinel reconfigures it).
 * While no sentinel names a reachable master (the failover is under way, the master is
 * down and not yet declared so) it tries again every RB_SENT_POLL seconds for up to
 * `failover` seconds (default RB_SENT_FAILOVER), then fails naming every sentinel and what
 * each said. The answer is not cached: connections are pooled, so this runs only when the
 * pool is empty, i.e. at open and after a connection was lost.
 *
 * replicas (default 1) and wait_ms (default 2000): a write commit is followed by WAIT, so
 * a put is acknowledged only once that many replicas have it (backend_redis_tx.c);
 * replicas=0 turns this off; a STORE_TX_CACHE commit (a get's access record) never waits. docs/store.md "Failover" says what this guarantees. */
#include <pthread.h>
#include "core/fpguard.h"
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "store/backend_redis.h"

#define RB_SENT_FAILOVER 30.0 /* seconds a new connection waits for a master, by default */
#define RB_SENT_POLL 0.2      /* seconds between rounds of questions to the sentinels */
#define RB_SENT_TIMEOUT 1.0   /* seconds for one sentinel's (or candidate's) answer */

redisContext *rb_connect_timeout(const char *host, int port, const char *path, double seconds, skv_err *err)
{
    struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    redisContext *c = path && path[0] ? redisConnectUnixWithTimeout(path, tv) : redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) {
        char where[300];
        if (path && path[0]) snprintf(where, sizeof where, "%s", path);
        else snprintf(where, sizeof where, "%s:%d", host, port);
        skv_fail(err, SKV_ERR_IO, "cannot connect to Redis at %s: %s (is redis-server running?)", where,
                 c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* ---- the URL ------------------------------------------------------------------ */

static int parse_hostport(const char *s, size_t n, char *host, size_t hcap, int *port)
{
    const char *co = memchr(s, ':', n);
    if (!co || co == s || (size_t)(co - s) >= hcap) return -1;
    char num[8];
    size_t pn = n - (size_t)(co - s) - 1;
    if (pn == 0 || pn >= sizeof num) return -1;
    memcpy(num, co + 1, pn);
    num[pn] = 0;
    char *end;
    long p = strtol(num, &end, 10);
    if (*end || p < 1 || p > 65535) return -1;
    memcpy(host, s, (size_t)(co - s));
    host[co - s] = 0;
    *port = (int)p;
    return 0;
}

/* One name=value of the query; -1 when unknown or out of range. */
static int parse_option(redis_addr *a, const char *s, size_t n)
{
    char buf[64], *end;
    if (n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *eq = strchr(buf, '=');
    if (!eq || !eq[1]) return -1;
    *eq = 0;
    double v = strtod(eq + 1, &end);
    if (*end || !(v >= 0)) return -1;
    if (!strcmp(buf, "replicas") && v <= 64 && v == (int)v) a->replicas = (int)v;
    else if (!strcmp(buf, "wait_ms") && v >= 1 && v <= 600000 && v == (int)v) a->wait_ms = (int)v;
    else if (!strcmp(buf, "failover") && v <= 3600) a->failover = v;
    else return -1;
    return 0;
}

int rb_parse_hosts(const char *s, const char *end, redis_addr *a, int *n_out, const char *what, const char *url,
                   skv_err *err)
{
    int n = 0;
    while (s < end) {
        const char *c = memchr(s, ',', (size_t)(end - s));
        size_t len = c ? (size_t)(c - s) : (size_t)(end - s);
        if (n == RB_SENTINELS)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': more than %d %ss", url, RB_SENTINELS, what);
        if (parse_hostport(s, len, a->sent_host[n], sizeof a->sent_host[0], &a->sent_port[n]))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': a %s is HOST:PORT (PORT 1..65535)", url,
                            what);
        n++;
        s += len + (c != NULL);
    }
    if (!n) return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': name one %s at least", url, what);
    *n_out = n;
    return SKV_OK;
}

int rb_parse_options(const char *q, redis_addr *a, const char *url, skv_err *err)
{
    for (const char *s = q ? q + 1 : NULL; s && *s;) {
        const char *amp = strchr(s, '&');
        size_t n = amp ? (size_t)(amp - s) : strlen(s);
        if (parse_option(a, s, n))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': options are replicas=0..64, "
                            "wait_ms=1..600000, failover=SECONDS (0..3600)%s", url,
                            a->cluster ? ", shards=2..256, shard_tokens=1..4096" : " (shards=N: redis+cluster:// only)");
        s += n + (amp != NULL);
    }
    return SKV_OK;
}

void rb_failover_defaults(redis_addr *a)
{
    a->replicas = 1;
    a->wait_ms = 2000;
    a->failover = RB_SENT_FAILOVER;
}

int rb_parse_sentinel_url(const char *url, redis_addr *a, skv_err *err)
{
    const char *h = url + strlen("redis+sentinel://"), *q = strchr(h, '?');
    const char *end = q ? q : h + strlen(h), *sl = memchr(h, '/', (size_t)(end - h));
    rb_failover_defaults(a);
    if (!sl) return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': name the master: "
                             "redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/PREFIX]", url);
    int rc = rb_parse_hosts(h, sl, a, &a->n_sent, "sentinel", url, err);
    if (rc) return rc;
    const char *m = sl + 1, *ms = memchr(m, '/', (size_t)(end - m));
    size_t mn = ms ? (size_t)(ms - m) : (size_t)(end - m);
    if (mn == 0 || mn >= sizeof a->master)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': one sentinel at least and a master name "
                        "of 1..%zu bytes", url, sizeof a->master - 1);
    memcpy(a->master, m, mn);
    if (ms && ms + 1 < end) snprintf(a->prefix, sizeof a->prefix, "%.*s", (int)(end - ms - 1), ms + 1);
    return rb_parse_options(q, a, url, err);
}

/* ---- finding the master --------------------------------------------------------- */

static redisReply *ask(redisContext *c, int argc, const char **argv)
{
    return redisCommandArgv(c, argc, argv, NULL);
}

/* Sentinel i's answer: the master's address into host/port; 0, or -1 with why in `why`. */
static int ask_sentinel(const redis_addr *a, int i, char *host, size_t hcap, int *port, skv_err *why)
{
    skv_err e;
    redisContext *c = rb_connect_timeout(a->sent_host[i], a->sent_port[i], NULL, RB_SENT_TIMEOUT, &e);
    if (!c) {
        skv_fail(why, SKV_ERR_IO, "sentinel %s:%d: unreachable", a->sent_host[i], a->sent_port[i]);
        return -1;
    }
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", a->master};
    redisReply *r = ask(c, 3, argv);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < hcap;
    if (ok) {
        memcpy(host, r->element[0]->str, r->element[0]->len + 1);
        *port = atoi(r->element[1]->str);
    } else {
        skv_fail(why, SKV_ERR_IO, "sentinel %s:%d: %s", a->sent_host[i], a->sent_port[i],
                 !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_NIL ? "does not know the master" : "unexpected reply");
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok ? 0 : -1;
}

/* A connection to host:port if that server says it is a master. */
static redisContext *connect_master(const char *host, int port, skv_err *why)
{
    skv_err e;
    redisContext *c = rb_connect_timeout(host, port, NULL, RB_SENT_TIMEOUT, &e);
    if (!c) {
        skv_fail(why, SKV_ERR_IO, "master %s:%d: unreachable", host, port);
        return NULL;
    }
    const char *argv[1] = {"ROLE"};
    redisReply *r = ask(c, 1, argv);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
             !strcmp(r->element[0]->str, "master");
    if (!ok) skv_fail(why, SKV_ERR_IO, "%s:%d is not a master (yet)", host, port);
    if (r) freeReplyObject(r);
    if (ok) return c;
    redisFree(c);
    return NULL;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* rb_poll_nodes found no master: why, with each node's last reason. */
static void poll_fail(const redis_addr *a, int n, const skv_err *why, const char *what, const char *hint, int once,
                      skv_err *err)
{
    char all[RB_SENTINELS * 210];
    size_t k = 0;
    all[0] = 0;
    for (int i = 0; i < n && k < sizeof all; i++)
        k += (size_t)snprintf(all + k, sizeof all - k, "%s%.200s", i ? "; " : "", why[i].msg);
    skv_fail(err, SKV_ERR_IO, "%s %s %.0f s (%s): %s (failover=SECONDS in the URL waits longer)", what,
             once ? "at one try, as the search before found none within" : "within", a->failover, all, hint);
}

redisContext *rb_poll_nodes(const redis_addr *a, int n, rb_try_fn try_node, const char *what, const char *hint,
                           skv_err *err)
{
    skv_err why[RB_SENTINELS];
    double t0 = skv_now();
    int once = a->cut && atomic_load(a->cut);
    for (;;) {
        for (int i = 0; i < n; i++) {
            redisContext *c = try_node(a, i, &why[i]);
            if (c) {
                /* a commit's WAIT blocks up to wait_ms on the master: the socket waits longer */
                long ms = 5000L + a->wait_ms;
                redisSetTimeout(c, (struct timeval){ms / 1000, (ms % 1000) * 1000});
                if (a->cut) atomic_store(a->cut, 0);
                return c;
            }
        }
        if (once || skv_now() - t0 >= a->failover) break;
        nap(RB_SENT_POLL);
    }
    if (a->cut) atomic_store(a->cut, 1); /* the store is cut off: the next searches do not wait */
    poll_fail(a, n, why, what, hint, once, err);
    return NULL;
}

/* Sentinel i's master, if it says "master". */
static redisContext *try_sentinel(const redis_addr *a, int i, skv_err *why)
{
    char host[128];
    int port;
    if (ask_sentinel(a, i, host, sizeof host, &port, why)) return NULL;
    return connect_master(host, port, why);
}

redisContext *rb_sentinel_connect(const redis_addr *a, skv_err *err)
{
    char what[200];
    snprintf(what, sizeof what, "no Redis master '%s' found through the sentinels", a->master);
    return rb_poll_nodes(a, a->n_sent, try_sentinel, what, "is a sentinel running and has it promoted a replica?",
                         err);
}
