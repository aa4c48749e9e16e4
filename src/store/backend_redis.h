/* Internal to the Redis backend, a chain of three files (each calls only those above it
 * in this list): backend_redis_conn.c: URL, connections, keys; backend_redis_tx.c:
 * transactions and scans; backend_redis.c: statistics, the operations table, open, peek. */
#ifndef SKV_STORE_BACKEND_REDIS_H
#define SKV_STORE_BACKEND_REDIS_H

#include <hiredis/hiredis.h>
#include <pthread.h>

#include "store/store_int.h"
#include "core/util.h"

#define RB_POOL 16        /* idle connections kept */
#define RB_IDLE_CHECK 0.2 /* seconds idle after which a pooled connection is PINGed first */
#define RB_FLUSH_CHECK 10.0 /* seconds after a lost connection during which every pooled one is
                             * PINGed first: those out at the flush come back dead (a failover) */
#define RB_SENTINELS 8    /* sentinels one URL may name */

/* Where the store is. Sentinel mode (n_sent > 0): host and port are unused, every new
 * connection asks the sentinels for the master named `master` (backend_redis_sentinel.c). */
typedef struct redis_addr {
    char host[256], path[256], prefix[256];
    int port;
    int n_sent, sent_port[RB_SENTINELS];
    char sent_host[RB_SENTINELS][128], master[128];
    int replicas;    /* a write commit WAITs for this many replicas (sentinel mode; 0: none) */
    int wait_ms;     /* ... at most this long */
    double failover; /* seconds a new connection keeps looking for a master */
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
redisContext *rb_addr_connect(const redis_addr *a, skv_err *err); /* NULL: message in err */
redisContext *rb_connect_timeout(const char *host, int port, const char *path, double seconds, skv_err *err);
/* Sentinel mode: a connection to the master, found through the sentinels, waiting for a
 * failover to end for up to a->failover seconds. NULL: message in err. */
redisContext *rb_sentinel_connect(const redis_addr *a, skv_err *err);
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
int rb_retry_take(void);

#endif
