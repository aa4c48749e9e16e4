/* The store's storage seam (docs/store.md "Backends"): a few tables of byte keys and
 * byte values, read and written inside transactions. The trie, the sessions, the KV blobs
 * and the placement index are all records in these tables; store*.c never calls LMDB or
 * Redis itself.
 *
 *   table        key                       value
 *   TB_META      name ("header", "state",  the meta records (store.c, store_model.c)
 *                "model", "mat")
 *   TB_NODES     u64 BE id                 node record (trie.c codec)
 *   TB_CHILDREN  u64 BE parent | u32 BE t  u64 LE child id    (scanned per parent)
 *   TB_SESSIONS  name                      session record
 *   TB_KV        u64 BE id | u32 BE len    KV blob of the node's span (immutable: a node
 *                                          id's span end never moves, so (id, len) names
 *                                          one span of one token path: written once)
 *   TB_MAT       u64 BE id                 placement entry of a materialised node
 *   TB_MATORD    u64 BE score | u64 BE id  empty: materialised nodes, lowest score first
 *
 * Two implementations:
 *   backend_lmdb.c   one LMDB environment, one database per table; a transaction is an
 *                    LMDB transaction (one writer, snapshot readers).
 *   backend_redis.c  keys in a Redis namespace; a transaction WATCHes what it reads,
 *                    buffers what it writes and commits with MULTI/EXEC: all or nothing,
 *                    STORE_CONFLICT when another writer changed a key it read (the caller
 *                    runs the whole transaction again). Redis may evict any key: a
 *                    missing record is a miss, never a wrong answer.
 *
 * Every call returns SKV_OK, 1 where it says "absent", STORE_CONFLICT from commit, or a
 * negative status with the store's message set. */
#ifndef SKV_STORE_BACKEND_H
#define SKV_STORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"
#include "core/util.h"

enum { TB_META, TB_NODES, TB_CHILDREN, TB_SESSIONS, TB_KV, TB_MAT, TB_MATORD, TB_N };

#define STORE_CONFLICT 2   /* commit lost a race: nothing was written, run it again */
#define STORE_RETRIES 64   /* attempts of one call before it gives up (SKV_ERR_IO) */
#define STORE_CONN_RETRIES 6 /* attempts of one call that lost its Redis connection (failover) */
#define STORE_NOWATCH 1    /* get flag: a statistic, last writer wins (no conflict) */
/* begin's write argument: 0 a read, STORE_TX_WRITE a write, STORE_TX_CACHE a write whose
 * loss costs nothing (access statistics, materialised KV: all rebuilt on demand), which
 * Redis through Sentinel commits without waiting for replicas */
enum { STORE_TX_WRITE = 1, STORE_TX_CACHE = 2 };

/* 1 when the calling thread's last commit failed with its outcome unknown (the connection to
 * Redis was lost after EXEC was sent: it may or may not have been applied; LMDB never
 * says so). Reading it clears it. The caller finds out from the data (put: the session
 * record). */
int store_commit_unknown_take(void);

typedef struct store_backend store_backend;
typedef struct store_btx store_btx;

/* Scan callback: one record; nonzero stops the scan (returned). */
typedef int (*store_scan_fn)(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn);

typedef struct store_backend_ops {
    const char *name;
    /* begin: write = 0 for a read transaction (LMDB: a snapshot; Redis: validated at end) */
    int (*begin)(store_backend *b, int write, store_btx **out);
    /* Ends the transaction (freed either way): SKV_OK, STORE_CONFLICT or an error. A read
     * transaction's end says whether what it read was consistent. */
    int (*commit)(store_btx *t);
    void (*abort)(store_btx *t);
    /* *v stays valid until the transaction ends. 1 = absent. */
    int (*get)(store_btx *t, int tb, const void *k, size_t kn, int flags, const uint8_t **v, size_t *vn);
    int (*put)(store_btx *t, int tb, const void *k, size_t kn, const void *v, size_t vn);
    int (*del)(store_btx *t, int tb, const void *k, size_t kn);
    /* Records whose key starts with prefix[pn], in key order (pn 0: the whole table). */
    int (*scan)(store_btx *t, int tb, const void *prefix, size_t pn, store_scan_fn fn, void *u);
    /* A fresh node id (LMDB: *next++; Redis: random, shared by no writer). */
    int (*new_id)(store_btx *t, uint64_t *next, uint64_t *out);
    /* Bytes the store occupies (LMDB: pages in use; Redis: memory of its keys). */
    int (*bytes)(store_backend *b, uint64_t *out);
    /* Adds to the miss counters (records evicted); reads them when add is NULL. */
    void (*misses)(store_backend *b, const uint64_t add[2], uint64_t out[2]);
    void (*close)(store_backend *b);
    /* NULL, or: 1 when the calling thread's last failure may be undone by running the call
     * again (Redis through Sentinel: the connection was lost before a commit was sent, or
     * the server refused a write as a replica: a failover). Reading it clears it. */
    int (*retry_take)(void);
} store_backend_ops;

/* Every backend starts with this. */
struct store_backend {
    const store_backend_ops *ops;
    skv_store *st; /* for messages (store_err) */
    int readonly;
    int evicts; /* records may vanish on their own (Redis maxmemory): a miss, not damage */
};

/* Opens the backend named by `where`: "redis://HOST:PORT/PREFIX",
 * "unix:///path/to.sock?prefix=P", "redis+sentinel://HOST:PORT,.../MASTER/PREFIX" or
 * "redis+cluster://HOST:PORT,.../PREFIX" for Redis, anything else an LMDB directory. fresh: set to
 * 1 when the store holds no header yet (create it). */
int store_backend_open(skv_store *st, const char *where, int flags, const skv_store_params *p, store_backend **out,
                       int *fresh);
int store_backend_lmdb_open(skv_store *st, const char *dir, int flags, const skv_store_params *p,
                            store_backend **out, int *fresh);
int store_backend_redis_open(skv_store *st, const char *url, int flags, store_backend **out, int *fresh);
int store_is_redis_url(const char *where);
/* The namespace a URL names, and reading one record of it without a model (store_model.c). */
int store_redis_peek(const char *url, const char *name, uint8_t **v, size_t *vn, skv_err *err);
/* The same for an LMDB directory (its "meta" table): 1 = absent, *v malloc'ed. */
int store_lmdb_peek(const char *dir, const char *name, uint8_t **v, size_t *vn, skv_err *err);

#endif
