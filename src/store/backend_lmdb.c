/* The store's tables (backend.h) in one LMDB environment DIR/data.mdb: one named
 * database per table, opened with MDB_NOTLS (read transactions are not tied to threads).
 * A write transaction is an LMDB write transaction (LMDB serialises writers, so commit
 * never reports a conflict); a read transaction is a snapshot. */
#include <errno.h>
#include "core/fpguard.h"
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store_int.h"

typedef struct lmdb_backend {
    store_backend base;
    MDB_env *env;
    MDB_dbi dbi[TB_N];
} lmdb_backend;

struct store_btx {
    lmdb_backend *b;
    MDB_txn *txn;
};

static const char *const tb_names[TB_N] = {"meta", "nodes", "children", "sessions", "kv", "mat", "matord"};

static int mdb_status(int rc)
{
    switch (rc) {
    case 0: return SKV_OK;
    case MDB_MAP_FULL: return SKV_ERR_RANGE;
    case ENOMEM: return SKV_ERR_NOMEM;
    case MDB_CORRUPTED: case MDB_INVALID: case MDB_PAGE_NOTFOUND: case MDB_INCOMPATIBLE:
    case MDB_VERSION_MISMATCH: case MDB_BAD_TXN:
        return SKV_ERR_FORMAT;
    default: return SKV_ERR_IO;
    }
}

static int lmdb_err(skv_store *st, int rc, const char *what)
{
    if (rc == MDB_MAP_FULL)
        return store_err(st, SKV_ERR_RANGE, "%s: the store is full (its map size; nothing was changed): open it with "
                         "a larger skv_store_params.map_size, or lower the budget and run gc", what);
    if (rc == EIO)
        return store_err(st, SKV_ERR_IO, "%s: a write to the store failed (I/O error, or the disk is full: nothing "
                         "was changed; reopen the store)", what);
    if (rc == ENOSPC)
        return store_err(st, SKV_ERR_IO, "%s: no space left on the device (nothing was changed): free space, then "
                         "retry", what);
    return store_err(st, mdb_status(rc), "%s: %s", what, mdb_strerror(rc));
}

#define ERR(t, rc, what) lmdb_err((t)->b->base.st, rc, what)

static MDB_val val_of(const void *p, size_t n)
{
    MDB_val v = {n, NULL};
    memcpy(&v.mv_data, &p, sizeof p); /* LMDB takes non-const pointers, never writes through keys */
    return v;
}

static int l_begin(store_backend *base, int write, store_btx **out)
{
    lmdb_backend *b = (lmdb_backend *)base;
    store_btx *t = malloc(sizeof *t);
    if (!t) return store_err(base->st, SKV_ERR_NOMEM, "out of memory");
    t->b = b;
    int rc = mdb_txn_begin(b->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
    if (rc) {
        free(t);
        return lmdb_err(base->st, rc, "begin transaction");
    }
    *out = t;
    return SKV_OK;
}

static int l_commit(store_btx *t)
{
    int rc = mdb_txn_commit(t->txn);
    skv_store *st = t->b->base.st;
    free(t);
    return rc ? lmdb_err(st, rc, "commit") : SKV_OK;
}

static void l_abort(store_btx *t)
{
    if (!t) return;
    mdb_txn_abort(t->txn);
    free(t);
}

static int l_get(store_btx *t, int tb, const void *k, size_t kn, int flags, const uint8_t **v, size_t *vn)
{
    MDB_val key = val_of(k, kn), val;
    (void)flags;
    int rc = mdb_get(t->txn, t->b->dbi[tb], &key, &val);
    if (rc == MDB_NOTFOUND) return 1;
    if (rc) return ERR(t, rc, tb_names[tb]);
    *v = val.mv_data;
    *vn = val.mv_size;
    return SKV_OK;
}

static int l_put(store_btx *t, int tb, const void *k, size_t kn, const void *v, size_t vn)
{
    MDB_val key = val_of(k, kn), val = val_of(v, vn);
    int rc = mdb_put(t->txn, t->b->dbi[tb], &key, &val, 0);
    return rc ? ERR(t, rc, tb_names[tb]) : SKV_OK;
}

static int l_del(store_btx *t, int tb, const void *k, size_t kn)
{
    MDB_val key = val_of(k, kn);
    int rc = mdb_del(t->txn, t->b->dbi[tb], &key, NULL);
    return rc && rc != MDB_NOTFOUND ? ERR(t, rc, tb_names[tb]) : SKV_OK;
}

static int l_scan(store_btx *t, int tb, const void *prefix, size_t pn, store_scan_fn fn, void *u)
{
    MDB_cursor *cur;
    MDB_val k = val_of(prefix, pn), v;
    int rc = mdb_cursor_open(t->txn, t->b->dbi[tb], &cur), r = 0;
    if (rc) return ERR(t, rc, "cursor");
    for (rc = mdb_cursor_get(cur, &k, &v, pn ? MDB_SET_RANGE : MDB_FIRST); !rc && !r;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (pn && (k.mv_size < pn || memcmp(k.mv_data, prefix, pn) != 0)) break;
        r = fn(u, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
    }
    mdb_cursor_close(cur);
    if (!r && rc && rc != MDB_NOTFOUND) return ERR(t, rc, tb_names[tb]);
    return r;
}

static int l_new_id(store_btx *t, uint64_t *next, uint64_t *out)
{
    (void)t;
    *out = (*next)++;
    return SKV_OK;
}

/* Pages on LMDB's free list (reusable, so not "in use"): each record of the free
 * database (dbi 0) is a page-number list whose first word is its length. */
static uint64_t free_pages(MDB_txn *txn)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint64_t n = 0;
    if (mdb_cursor_open(txn, 0, &cur)) return 0;
    while (!mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (v.mv_size >= sizeof(size_t)) {
            size_t cnt;
            memcpy(&cnt, v.mv_data, sizeof cnt);
            n += cnt;
        }
    mdb_cursor_close(cur);
    return n;
}

static int l_bytes(store_backend *base, uint64_t *out)
{
    lmdb_backend *b = (lmdb_backend *)base;
    MDB_envinfo ei;
    MDB_stat ms;
    MDB_txn *txn;
    int rc = mdb_txn_begin(b->env, NULL, MDB_RDONLY, &txn);
    if (rc) return lmdb_err(base->st, rc, "begin transaction");
    uint64_t unused = free_pages(txn);
    mdb_env_info(b->env, &ei);
    mdb_env_stat(b->env, &ms);
    mdb_txn_abort(txn);
    uint64_t pages = (uint64_t)ei.me_last_pgno + 1;
    *out = (pages > unused ? pages - unused : pages) * ms.ms_psize;
    return SKV_OK;
}

static void l_misses(store_backend *b, const uint64_t add[2], uint64_t out[2])
{
    (void)b; /* LMDB never drops a record on its own: a missing one is damage (FORMAT) */
    (void)add;
    if (out) out[0] = out[1] = 0;
}

static void l_close(store_backend *base)
{
    lmdb_backend *b = (lmdb_backend *)base;
    if (b->env) mdb_env_close(b->env);
    free(b);
}

static const store_backend_ops lmdb_ops = {
    .name = "lmdb", .begin = l_begin, .commit = l_commit, .abort = l_abort, .get = l_get, .put = l_put,
    .del = l_del, .scan = l_scan, .new_id = l_new_id, .bytes = l_bytes, .misses = l_misses, .close = l_close,
};

/* ---- open --------------------------------------------------------------- */

/* Creating a store inside an LMDB environment that holds someone else's data would
 * change it: only an empty environment (or an existing store) is accepted. */
static int foreign_env(MDB_txn *txn)
{
    MDB_dbi main_db, probe;
    MDB_stat ms;
    if (mdb_dbi_open(txn, "meta", 0, &probe) == 0) return 0;
    if (mdb_dbi_open(txn, NULL, 0, &main_db) || mdb_stat(txn, main_db, &ms)) return 1;
    return ms.ms_entries > 0;
}

/* Opens the tables; those added by later versions (mat, matord) are created when
 * missing, in a writable environment. */
static int open_dbs(lmdb_backend *b, MDB_txn *txn, int create, const char *dir)
{
    skv_store *st = b->base.st;
    if (create && foreign_env(txn))
        return store_err(st, SKV_ERR_FORMAT, "'%s' holds an LMDB environment with other data, not a seqkv store", dir);
    for (int i = 0; i < TB_N; i++) {
        unsigned fl = create || (i >= TB_MAT && !b->base.readonly) ? MDB_CREATE : 0;
        int rc = mdb_dbi_open(txn, tb_names[i], fl, &b->dbi[i]);
        if ((rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) && i == TB_META)
            return store_err(st, SKV_ERR_FORMAT,
                             "'%s' is an LMDB environment but not a seqkv store (no 'meta' database)", dir);
        if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
            return store_err(st, SKV_ERR_FORMAT, "store '%s': database '%s' missing (damaged)", dir, tb_names[i]);
        if (rc) return lmdb_err(st, rc, tb_names[i]);
    }
    return SKV_OK;
}

static int open_env(lmdb_backend *b, const char *dir, int create, const skv_store_params *p)
{
    skv_store *st = b->base.st;
    struct stat sb;
    char path[4096];
    if (create && stat(dir, &sb) != 0 && mkdir(dir, 0777) != 0)
        return store_err(st, SKV_ERR_IO, "cannot create directory '%s': %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (!create && stat(path, &sb) != 0)
        return store_err(st, SKV_ERR_IO, "no seqkv store in '%s' (create one with 'seqkv store init')", dir);
    int rc = mdb_env_create(&b->env);
    if (!rc) rc = mdb_env_set_maxdbs(b->env, 8);
    if (!rc) rc = mdb_env_set_mapsize(b->env, p->map_size ? p->map_size : DEFAULT_MAP);
    if (rc) return lmdb_err(st, rc, "lmdb");
    rc = mdb_env_open(b->env, dir, MDB_NOTLS | (b->base.readonly ? MDB_RDONLY : 0), 0664);
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED)
        return store_err(st, SKV_ERR_FORMAT, "'%s' is not a seqkv store: data.mdb is not a valid LMDB environment (%s)",
                         dir, mdb_strerror(rc));
    if (rc) return store_err(st, mdb_status(rc), "cannot open store '%s': %s", dir, mdb_strerror(rc));
    int dead;
    mdb_reader_check(b->env, &dead); /* reader slots of killed processes */
    return SKV_OK;
}

static int open_tables(lmdb_backend *b, const char *dir, int create, int *fresh)
{
    skv_store *st = b->base.st;
    MDB_txn *txn;
    MDB_val k = {6, (void *)"header"}, v;
    int rc = mdb_txn_begin(b->env, NULL, b->base.readonly ? MDB_RDONLY : 0, &txn);
    if (rc)
        return rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND
                   ? store_err(st, SKV_ERR_FORMAT, "store '%s' is damaged: %s", dir, mdb_strerror(rc))
                   : lmdb_err(st, rc, "begin");
    if ((rc = open_dbs(b, txn, create, dir))) {
        mdb_txn_abort(txn);
        return rc;
    }
    rc = mdb_get(txn, b->dbi[TB_META], &k, &v);
    if (rc && rc != MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return lmdb_err(st, rc, "read header");
    }
    *fresh = rc == MDB_NOTFOUND;
    if ((rc = mdb_txn_commit(txn))) return lmdb_err(st, rc, "commit");
    return SKV_OK;
}

int store_backend_lmdb_open(skv_store *st, const char *dir, int flags, const skv_store_params *p,
                            store_backend **out, int *fresh)
{
    lmdb_backend *b = calloc(1, sizeof *b);
    int rc, create = !!(flags & SKV_STORE_CREATE);
    if (!b) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    b->base = (store_backend){.ops = &lmdb_ops, .st = st, .readonly = !!(flags & SKV_STORE_READONLY)};
    if ((rc = open_env(b, dir, create, p)) || (rc = open_tables(b, dir, create, fresh))) {
        l_close(&b->base);
        return rc;
    }
    if (*fresh && !create) {
        l_close(&b->base);
        return store_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (no header)", dir);
    }
    *out = &b->base;
    return SKV_OK;
}

/* ---- one record without opening the store (store_model.c) ---- */

/* The meta record `name` of the transaction (1 = absent, no "meta" table counts as absent),
 * copied into *v. */
static int peek_txn(MDB_env *env, const char *dir, const char *name, uint8_t **v, size_t *vn, skv_err *err)
{
    MDB_txn *txn;
    MDB_dbi meta;
    MDB_val k = {strlen(name), (void *)(uintptr_t)name}, val;
    int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), g;
    if (rc) return skv_fail(err, SKV_ERR_FORMAT, "store '%s' is damaged: %s", dir, mdb_strerror(rc));
    if ((g = mdb_dbi_open(txn, "meta", 0, &meta)) || (g = mdb_get(txn, meta, &k, &val)) == MDB_NOTFOUND) rc = 1;
    else if (g) rc = skv_fail(err, SKV_ERR_IO, "store '%s': %s", dir, mdb_strerror(g));
    else if (!(*v = malloc(val.mv_size ? val.mv_size : 1))) rc = skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    else memcpy(*v, val.mv_data, val.mv_size), *vn = val.mv_size;
    mdb_txn_abort(txn);
    return rc;
}

int store_lmdb_peek(const char *dir, const char *name, uint8_t **v, size_t *vn, skv_err *err)
{
    char path[4096];
    MDB_env *env = NULL;
    *v = NULL;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return skv_fail(err, SKV_ERR_IO, "no seqkv store in '%s'", dir);
    fclose(f);
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 8);
    if (!rc) rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0664);
    if (rc) rc = skv_fail(err, SKV_ERR_FORMAT, "'%s' is not a seqkv store: %s", dir, mdb_strerror(rc));
    else rc = peek_txn(env, dir, name, v, vn, err);
    if (env) mdb_env_close(env);
    return rc;
}
