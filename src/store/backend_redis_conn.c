/* The Redis backend's connections (backend_redis.h): the URL, the connection pool, key
 * names, over backend_redis_sentinel.c. backend_redis_tx.c (transactions) and
 * backend_redis.c (the backend's operations, open, peek) are built on it; it calls neither. */
#include <pthread.h>
#include "core/fpguard.h"
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "store/backend_redis.h"

int store_is_redis_url(const char *where)
{
    return where && (!strncmp(where, "redis://", 8) || !strncmp(where, "unix://", 7) ||
                     !strncmp(where, "redis+sentinel://", 17) || !strncmp(where, "redis+cluster://", 16));
}

/* redis://HOST[:PORT][/PREFIX], unix:///path/sock[?prefix=PREFIX], redis+sentinel://...
 * or redis+cluster://... */
int rb_parse_url(const char *url, redis_addr *a, skv_err *err)
{
    memset(a, 0, sizeof *a);
    snprintf(a->prefix, sizeof a->prefix, "seqkv");
    a->port = 6379;
    if (!strncmp(url, "redis+sentinel://", 17) || !strncmp(url, "redis+cluster://", 16)) {
        int rc = !strncmp(url, "redis+sentinel://", 17) ? rb_parse_sentinel_url(url, a, err)
                                                        : rb_parse_cluster_url(url, a, err);
        if (rc) return rc;
    } else if (!strncmp(url, "unix://", 7)) {
        const char *q = strchr(url + 7, '?');
        size_t n = q ? (size_t)(q - url - 7) : strlen(url + 7);
        if (n == 0 || n >= sizeof a->path) return skv_fail(err, SKV_ERR_INVALID_ARG, "bad Redis URL '%s'", url);
        memcpy(a->path, url + 7, n);
        if (q && strncmp(q, "?prefix=", 8))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': only ?prefix=P is understood", url);
        if (q) snprintf(a->prefix, sizeof a->prefix, "%s", q + 8);
    } else {
        const char *h = url + 8, *sl = strchr(h, '/'), *co = strchr(h, ':');
        size_t hn = sl ? (size_t)(sl - h) : strlen(h);
        if (co && (!sl || co < sl)) {
            char *end;
            long port = strtol(co + 1, &end, 10);
            if (port < 1 || port > 65535 || (end != sl && *end))
                return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': bad port", url);
            a->port = (int)port;
            hn = (size_t)(co - h);
        }
        if (hn == 0 || hn >= sizeof a->host) return skv_fail(err, SKV_ERR_INVALID_ARG, "bad Redis URL '%s'", url);
        memcpy(a->host, h, hn);
        if (sl && sl[1]) snprintf(a->prefix, sizeof a->prefix, "%s", sl + 1);
        if (strchr(h, '?'))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': redis:// takes no options (replicas, "
                            "shards, ...: redis+sentinel:// and redis+cluster:// do)", url);
    }
    if (!a->prefix[0] || strlen(a->prefix) > 200)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': the prefix must be 1..200 bytes", url);
    return SKV_OK;
}

redisContext *rb_addr_connect(const redis_addr *a, skv_err *err)
{
    if (a->n_sent) return rb_sentinel_connect(a, err);
    if (a->cluster) return rb_cluster_connect(a, err);
    return rb_connect_timeout(a->host, a->port, a->path, 5.0, err);
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
    double idle = 0, now = skv_now();
    int suspect = 0;
    skv_err e = {0};
    pthread_mutex_lock(&b->mu);
    if (b->n_free) {
        c = b->free_c[--b->n_free];
        idle = now - b->free_t[b->n_free];
    }
    suspect = b->flush_t > 0 && now - b->flush_t < RB_FLUSH_CHECK;
    pthread_mutex_unlock(&b->mu);
    if (c && (idle > RB_IDLE_CHECK || suspect) && !conn_alive(c)) {
        redisFree(c);
        c = NULL;
    }
    if (c) return c;
    if (!(c = rb_addr_connect(&b->addr, &e))) store_err(b->base.st, SKV_ERR_IO, "%.255s", e.msg);
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
    b->flush_t = skv_now();
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

