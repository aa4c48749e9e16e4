/* Internal to the Redis backend, a chain of files (each calls only those above it in
 * this list): backend_redis_sentinel.c: one connection, the master found through
 * Sentinel; backend_redis_cluster.c: the master of the store's slot in a Redis Cluster,
 * the store's hash tag, redirections; backend_redis_conn.c: URL,
 * connections, keys; backend_redis_tx.c: transactions and scans; backend_redis.c:
 * statistics, the operations table, open, peek. */
#ifndef SKV_STORE_BACKEND_REDIS_H
#define SKV_STORE_BACKEND_REDIS_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>

#include "store/store_int.h"
#include "core/util.h"

#define RB_POOL 16        /* idle connections kept */
#define RB_IDLE_CHECK 0.2 /* seconds idle after which a pooled connection is PINGed first */
#define RB_FLUSH_CHECK 10.0 /* seconds after a lost connection during which every pooled one is
                             * PINGed first: those out at the flush come back dead (a failover) */
#define RB_SENTINELS 8    /* sentinels (or cluster seed nodes) one URL may name */

/* Where the store is. Sentinel mode (n_sent > 0): host and port are unused, every new
 * connection asks the sentinels for the master named `master` (backend_redis_sentinel.c).
 * Cluster mode (cluster = 1, n_seed > 0 seed nodes in sent_host/sent_port): every new
 * connection goes to the master serving `slot`, the slot of the hash tag {prefix}
 * (backend_redis_cluster.c). */
typedef struct redis_addr {
    char host[256], path[256], prefix[256];
    int port;
    int n_sent, sent_port[RB_SENTINELS];
    int cluster, n_seed, slot;
    char sent_host[RB_SENTINELS][128], master[128];
    int replicas;    /* a write commit WAITs for this many replicas (sentinel mode; 0: none) */
    int wait_ms;     /* ... at most this long */
    double failover; /* seconds a new connection keeps looking for a master */
    /* 1 while the last search found no master within `failover` seconds (the store is
     * cut off, or a failover outlasts it): the next searches try each node once, without
     * waiting, until one finds a master. NULL: always wait (a one-shot connection). */
    atomic_int *cut;
} redis_addr;

typedef struct redis_backend {
    store_backend base;
    redis_addr addr;
    char url[512];
    char top[320];   /* "P:skv2:" */
    char ns[360];    /* "P:skv2:<fp hex>:" */
    size_t top_n, ns_n;
    pthread_mutex_t mu; /* guards the pool */
    redisContext *free_c[RB_POOL];
    double free_t[RB_POOL]; /* when each was put back */
    int n_free;
    double flush_t;  /* when the pool was last flushed (a connection lost), 0: never */
    atomic_int cut;  /* addr.cut points here */
} redis_backend;

typedef struct rb_buf {
    uint8_t *p;
    size_t n, cap;
} rb_buf;

/* Keys found by SCAN (malloc'ed copies). */
typedef struct rb_keys {
    uint8_t **k;
    size_t *kn, n, cap;
} rb_keys;

/* redis://HOST[:PORT][/PREFIX], unix:///path/sock[?prefix=PREFIX] or
 * redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/PREFIX][?replicas=N&wait_ms=MS&failover=S];
 * message in err. */
int rb_parse_url(const char *url, redis_addr *a, skv_err *err);
int rb_parse_sentinel_url(const char *url, redis_addr *a, skv_err *err); /* the third form */
/* redis+cluster://HOST:PORT[,HOST:PORT...]/PREFIX[?replicas=N&wait_ms=MS&failover=S] */
int rb_parse_cluster_url(const char *url, redis_addr *a, skv_err *err);
/* HOST:PORT[,HOST:PORT...] in [s, end) into a->sent_host/sent_port, their count in *n;
 * `what` names them in messages. */
int rb_parse_hosts(const char *s, const char *end, redis_addr *a, int *n, const char *what, const char *url,
                   skv_err *err);
/* replicas 1, wait_ms 2000, failover 30 s: the sentinel and cluster modes' defaults */
void rb_failover_defaults(redis_addr *a);
/* The query (q: at '?', or NULL): replicas=N, wait_ms=MS, failover=S. */
int rb_parse_options(const char *q, redis_addr *a, const char *url, skv_err *err);
/* 1 in the modes that survive a failover (sentinel, cluster): a lost connection or a
 * redirection marks the call to run again. */
static inline int rb_failover_mode(const redis_addr *a) { return a->n_sent > 0 || a->cluster; }
/* The store's key prefix "P:skv2:" (cluster mode: "{P}:skv2:", P the hash tag). */
void rb_top(const redis_addr *a, char *buf, size_t cap);
int rb_cluster_slot(const char *tag); /* CRC16(tag) mod 16384 */
/* Cluster mode: a connection to the master serving a->slot (CLUSTER SLOTS from the seeds,
 * MOVED followed), waiting up to a->failover seconds for one. NULL: message in err. */
redisContext *rb_cluster_connect(const redis_addr *a, skv_err *err);
redisContext *rb_addr_connect(const redis_addr *a, skv_err *err); /* NULL: message in err */
redisContext *rb_connect_timeout(const char *host, int port, const char *path, double seconds, skv_err *err);
/* Sentinel mode: a connection to the master, found through the sentinels, waiting for a
 * failover to end for up to a->failover seconds. NULL: message in err. */
redisContext *rb_sentinel_connect(const redis_addr *a, skv_err *err);
/* Tries nodes 0..n-1 with try_node in rounds every 0.2 s for up to a->failover seconds
 * (one round only while *a->cut): the first connection it returns (its timeout set for
 * WAIT), or NULL with "WHAT within S s (each node's last reason): HINT" in err. Shared
 * by the sentinel and cluster modes. */
typedef redisContext *(*rb_try_fn)(const redis_addr *a, int i, skv_err *why);
redisContext *rb_poll_nodes(const redis_addr *a, int n, rb_try_fn try_node, const char *what, const char *hint,
                            skv_err *err);
int rb_buf_cat(rb_buf *b, const void *a, size_t an, const void *c, size_t cn);
/* The Redis key of record k of table tb (children: the parent's hash; matord: the set). */
int rb_key(const redis_backend *b, int tb, const uint8_t *k, size_t kn, rb_buf *out);
redisContext *rb_conn_get(redis_backend *b); /* NULL: message set */
void rb_conn_put(redis_backend *b, redisContext *c, int bad);
void rb_pool_flush(redis_backend *b); /* closes every idle connection */
/* Every key of the namespace whose name continues with sub[sn] (SCAN: not a snapshot). */
int rb_scan_keys(redis_backend *b, const char *sub, size_t sn, rb_keys *out);
void rb_keys_free(rb_keys *ks);

int rb_begin(store_backend *b, int write, store_btx **out);
int rb_commit(store_btx *t);
void rb_abort(store_btx *t);
int rb_get(store_btx *t, int tb, const void *k, size_t kn, int flags, const uint8_t **v, size_t *vn);
int rb_put(store_btx *t, int tb, const void *k, size_t kn, const void *v, size_t vn);
int rb_del(store_btx *t, int tb, const void *k, size_t kn);
int rb_scan(store_btx *t, int tb, const void *prefix, size_t pn, store_scan_fn fn, void *u);
int rb_new_id(store_btx *t, uint64_t *next, uint64_t *out);
/* Sentinel mode: the failed call may run again (a lost connection or a demoted master
 * before anything was sent to commit); rb_retry_take reads and clears it (backend.h: retry_take). */
void rb_conn_retry_set(void);
/* Cluster mode: 1 when reply r is a redirection or a cluster in transition (MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN): the caller drops its connection and the call runs again. */
int rb_cluster_redirect(const redis_addr *a, const redisReply *r);
/* The master of `slot` in a CLUSTER SLOTS reply r (every field checked: a hostile or odd
 * reply is "not found"): host (`asked`, the node asked, when the reply leaves it empty or
 * "?") and port; 0, or -1. */
int rb_cluster_owner(const redisReply *r, int slot, const char *asked, char *host, size_t hcap, int *port);
/* "MOVED 1234 HOST:PORT" (or ASK) -> host, port; 0, or -1 when malformed. */
int rb_parse_moved(const char *s, char *host, size_t hcap, int *port);
/* The message for such a reply (into err); SKV_ERR_IO. */
int rb_cluster_fail(const redis_addr *a, const char *url, const redisReply *r, skv_err *err);
int rb_retry_take(void);

#endif
