/* The session store: the probabilistic-language trie of src/trie.c persisted in LMDB,
 * with materialised KV per node and a placement policy (docs/store.md).
 *
 * LMDB environment DIR/data.mdb, five named databases:
 *
 *   meta      "header" -> magic "SKVSTORE", version, model fingerprint + name + geometry
 *             "state"  -> next node id, clock, budget, measured speeds, prior weight
 *   nodes     u64 BE node id ---------------------> node record (trie.c, checksummed)
 *   children  u64 BE parent id | u32 BE token ----> u64 LE child id
 *   sessions  name bytes -------------------------> session record (end node id, tokens,
 *                                                   KV digest, put time; checksummed)
 *   kv        u64 BE node id ---------------------> KV blob of the node's span
 *
 *   KV blob:  0 u32 "SKVK" | 4 u32 positions | 8 u64 XXH3-64 of the f32 bytes |
 *             16 zstd frame of the byte-shuffled f32 values, canonical order
 *             [layer][K,V][kv_head][position][dim] over the span's positions only
 *
 * Big-endian keys sort numerically, so one cursor range walks a node's children in
 * token order. Every put / remove / gc is one write transaction: a crash leaves the
 * store as of the last commit (LMDB's copy-on-write B-trees), never half a session.
 * Readers run in read-only transactions (a consistent snapshot) concurrently with the
 * one writer.
 */
#include <errno.h>
#include "core/fpguard.h"
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "store/store_int.h"

int store_err(skv_store *st, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    skv_errbox_vset(st->err, status, fmt, ap);
    va_end(ap);
    return status;
}

int store_done(skv_store *st, int status)
{
    if (status < 0 && !skv_errbox_get(st->err)[0])
        store_err(st, status, "%s%s", skv_status_str(status),
                  status == SKV_ERR_NOMEM ? " (nothing was changed; retry with more memory)" : "");
    return status;
}

const char *skv_store_last_error(const skv_store *st) { return st ? skv_errbox_get(st->err) : "no store"; }

skv_store_params skv_store_default_params(void)
{
    return (skv_store_params){.map_size = 0, .budget = -1, .n_threads = 1};
}

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

int store_lmdb_err(skv_store *st, int rc, const char *what)
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

/* ---- meta records ------------------------------------------------------- */

static void state_encode(const store_state *s, uint8_t *p)
{
    uint64_t u;
    memset(p, 0, STATE_SIZE);
    skv_wr64(p, s->next_id);
    skv_wr64(p + 8, s->clock);
    skv_wr64(p + 16, s->budget);
    memcpy(&u, &s->prefill_tps, 8); skv_wr64(p + 24, u);
    memcpy(&u, &s->load_bps, 8); skv_wr64(p + 32, u);
    memcpy(&u, &s->prior_weight, 8); skv_wr64(p + 40, u);
    memcpy(&u, &s->comp_ratio, 8); skv_wr64(p + 48, u);
    skv_wr64(p + 56, XXH3_64bits(p, 56));
}

static int state_decode(const uint8_t *p, size_t n, store_state *s)
{
    uint64_t u;
    if (n != STATE_SIZE || XXH3_64bits(p, 56) != skv_rd64(p + 56)) return SKV_ERR_FORMAT;
    s->next_id = skv_rd64(p);
    s->clock = skv_rd64(p + 8);
    s->budget = skv_rd64(p + 16);
    u = skv_rd64(p + 24); memcpy(&s->prefill_tps, &u, 8);
    u = skv_rd64(p + 32); memcpy(&s->load_bps, &u, 8);
    u = skv_rd64(p + 40); memcpy(&s->prior_weight, &u, 8);
    u = skv_rd64(p + 48); memcpy(&s->comp_ratio, &u, 8);
    if (!(s->prefill_tps > 0) || !(s->load_bps > 0) || !(s->prior_weight >= 0) || !(s->comp_ratio > 0) ||
        s->next_id == 0)
        return SKV_ERR_FORMAT;
    return SKV_OK;
}

/* header: 0 magic[8] | 8 u32 version | 12 u32 0 | 16 fingerprint[16] | 32 name[96] |
 *         128 u32 n_layer, n_head_kv, head_dim, n_vocab, n_ctx | 148 u32 0 x3 | 160 u64 XXH3-64 */
static void header_encode(const skv_store *st, uint8_t *p)
{
    memset(p, 0, HEADER_SIZE);
    memcpy(p, STORE_MAGIC, 8);
    skv_wr32(p + 8, STORE_VERSION);
    memcpy(p + 16, st->fp, 16);
    memcpy(p + 32, st->info.name, strnlen(st->info.name, 95));
    skv_wr32(p + 128, (uint32_t)st->info.n_layer);
    skv_wr32(p + 132, (uint32_t)st->info.n_head_kv);
    skv_wr32(p + 136, (uint32_t)st->info.head_dim);
    skv_wr32(p + 140, (uint32_t)st->info.n_vocab);
    skv_wr32(p + 144, (uint32_t)st->info.n_ctx_train);
    skv_wr64(p + 160, XXH3_64bits(p, 160));
}

static int header_check(skv_store *st, const uint8_t *p, size_t n, const char *dir)
{
    char name[97];
    if (n != HEADER_SIZE || memcmp(p, STORE_MAGIC, 8) != 0)
        return store_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (bad header)", dir);
    if (XXH3_64bits(p, 160) != skv_rd64(p + 160))
        return store_err(st, SKV_ERR_FORMAT, "store '%s': header checksum mismatch (damaged)", dir);
    if (skv_rd32(p + 8) != STORE_VERSION)
        return store_err(st, SKV_ERR_UNSUPPORTED, "store '%s' has format version %u (this build reads %d)", dir,
                       skv_rd32(p + 8), STORE_VERSION);
    memcpy(name, p + 32, 96);
    name[96] = 0;
    if (memcmp(p + 16, st->fp, 16) != 0)
        return store_err(st, SKV_ERR_MISMATCH, "store '%s' was made with model '%s', not with the loaded model '%s'",
                       dir, name, st->info.name);
    return SKV_OK;
}

static int state_load(tx *t)
{
    MDB_val k = {5, (void *)"state"}, v;
    int rc = mdb_get(t->txn, t->st->meta, &k, &v);
    if (rc) return store_lmdb_err(t->st, rc, "store state");
    if (state_decode(v.mv_data, v.mv_size, &t->s))
        return store_err(t->st, SKV_ERR_FORMAT, "store state record damaged");
    return SKV_OK;
}

static int state_save(tx *t)
{
    uint8_t buf[STATE_SIZE];
    MDB_val k = {5, (void *)"state"}, v = {STATE_SIZE, buf};
    state_encode(&t->s, buf);
    int rc = mdb_put(t->txn, t->st->meta, &k, &v, 0);
    return rc ? store_lmdb_err(t->st, rc, "store state") : SKV_OK;
}

/* ---- transactions ------------------------------------------------------- */

int store_tx_begin(skv_store *st, int write, tx *t)
{
    memset(t, 0, sizeof *t);
    t->st = st;
    skv_errbox_clear(st->err); /* a message left from an earlier call must not describe this one */
    if (write && st->readonly) return store_err(st, SKV_ERR_INVALID_ARG, "the store was opened read-only");
    int rc = mdb_txn_begin(st->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
    if (rc) return store_lmdb_err(st, rc, "begin transaction");
    store_io_init(t);
    if ((rc = state_load(t))) {
        mdb_txn_abort(t->txn);
        t->txn = NULL;
    }
    return rc;
}

void store_tx_abort(tx *t)
{
    if (t->txn) mdb_txn_abort(t->txn);
    t->txn = NULL;
}

int store_tx_commit(tx *t)
{
    int rc = state_save(t);
    if (rc) {
        store_tx_abort(t);
        return rc;
    }
    rc = mdb_txn_commit(t->txn);
    t->txn = NULL;
    return rc ? store_lmdb_err(t->st, rc, "commit") : SKV_OK;
}

int store_trie_err(skv_store *st, int rc, const char *what)
{
    char prev[512];
    snprintf(prev, sizeof prev, "%s", skv_errbox_get(st->err));
    if (rc == SKV_ERR_FORMAT || rc == SKV_ERR_INTERNAL)
        return store_err(st, rc, "%s: the store's trie is inconsistent (damaged?)%s%.400s", what, prev[0] ? ": " : "",
                       prev);
    if (rc == SKV_ERR_NOMEM) return store_err(st, rc, "%s: out of memory", what);
    return rc;
}

/* ---- open / close ------------------------------------------------------- */

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

static int open_dbs(skv_store *st, MDB_txn *txn, int create, const char *dir)
{
    unsigned fl = create ? MDB_CREATE : 0;
    if (create && foreign_env(txn))
        return store_err(st, SKV_ERR_FORMAT, "'%s' holds an LMDB environment with other data, not a seqkv store", dir);
    int rc = mdb_dbi_open(txn, "meta", fl, &st->meta);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
        return store_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (no 'meta' database)",
                       dir);
    if (rc) return store_lmdb_err(st, rc, "open meta");
    const char *names[4] = {"nodes", "children", "sessions", "kv"};
    MDB_dbi *dbis[4] = {&st->nodes, &st->children, &st->sessions, &st->kv};
    for (int i = 0; i < 4; i++) {
        rc = mdb_dbi_open(txn, names[i], fl, dbis[i]);
        if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
            return store_err(st, SKV_ERR_FORMAT, "store '%s': database '%s' missing (damaged)", dir, names[i]);
        if (rc) return store_lmdb_err(st, rc, names[i]);
    }
    return SKV_OK;
}

/* Restore speed for the cost model: a 128-token prefill of the model (no logits). */
static double measure_prefill(skv_store *st)
{
    int32_t tok[128];
    double best = 0;
    if (store_work_ctx(st)) return 2000.0;
    for (int i = 0; i < 128; i++) tok[i] = (int32_t)((i * 7919) % st->info.n_vocab);
    for (int rep = 0; rep < 2; rep++) {
        double t0 = skv_now();
        if (skv_ctx_truncate(st->work, 0) || skv_prefill(st->work, tok, 128, SKV_LOGITS_NONE, NULL)) return 2000.0;
        double dt = skv_now() - t0;
        if (dt > 0 && 128 / dt > best) best = 128 / dt;
    }
    return best > 0 ? best : 2000.0;
}

static int init_or_check(skv_store *st, MDB_txn *txn, int create, const skv_store_params *p, const char *dir)
{
    MDB_val k = {6, (void *)"header"}, v;
    int rc = mdb_get(txn, st->meta, &k, &v);
    if (rc == MDB_NOTFOUND && create) {
        uint8_t hdr[HEADER_SIZE], sb[STATE_SIZE];
        store_state s = {.next_id = 1, .clock = 0, .budget = p->budget >= 0 ? (uint64_t)p->budget : DEFAULT_BUDGET,
                         .prefill_tps = measure_prefill(st), .load_bps = 200e6, .prior_weight = 16.0, .comp_ratio = 0.8};
        header_encode(st, hdr);
        state_encode(&s, sb);
        MDB_val hv = {HEADER_SIZE, hdr}, sk = {5, (void *)"state"}, sv = {STATE_SIZE, sb};
        if ((rc = mdb_put(txn, st->meta, &k, &hv, 0)) || (rc = mdb_put(txn, st->meta, &sk, &sv, 0)))
            return store_lmdb_err(st, rc, "write header");
        return store_model_init(st, txn);
    }
    if (rc == MDB_NOTFOUND)
        return store_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (no header)", dir);
    if (rc) return store_lmdb_err(st, rc, "read header");
    return header_check(st, v.mv_data, v.mv_size, dir);
}

static int open_env(skv_store *st, const char *dir, int flags, const skv_store_params *p)
{
    struct stat sb;
    char path[4096];
    int create = flags & SKV_STORE_CREATE;
    if (create && stat(dir, &sb) != 0 && mkdir(dir, 0777) != 0)
        return store_err(st, SKV_ERR_IO, "cannot create directory '%s': %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (!create && stat(path, &sb) != 0)
        return store_err(st, SKV_ERR_IO, "no seqkv store in '%s' (create one with 'seqkv store init')", dir);
    int rc = mdb_env_create(&st->env);
    if (!rc) rc = mdb_env_set_maxdbs(st->env, 8);
    if (!rc) rc = mdb_env_set_mapsize(st->env, p->map_size ? p->map_size : DEFAULT_MAP);
    if (rc) return store_lmdb_err(st, rc, "lmdb");
    rc = mdb_env_open(st->env, dir, MDB_NOTLS | (st->readonly ? MDB_RDONLY : 0), 0664);
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED)
        return store_err(st, SKV_ERR_FORMAT, "'%s' is not a seqkv store: data.mdb is not a valid LMDB environment (%s)",
                       dir, mdb_strerror(rc));
    if (rc) return store_err(st, mdb_status(rc), "cannot open store '%s': %s", dir, mdb_strerror(rc));
    int dead;
    mdb_reader_check(st->env, &dead); /* reader slots of killed processes */
    return SKV_OK;
}

static int open_store(skv_store *st, const char *dir, int flags, const skv_store_params *p)
{
    MDB_txn *txn;
    int rc, create = flags & SKV_STORE_CREATE;
    if ((rc = open_env(st, dir, flags, p))) return rc;
    if ((rc = mdb_txn_begin(st->env, NULL, st->readonly ? MDB_RDONLY : 0, &txn)))
        return rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND
                   ? store_err(st, SKV_ERR_FORMAT, "store '%s' is damaged: %s", dir, mdb_strerror(rc))
                   : store_lmdb_err(st, rc, "begin");
    if ((rc = open_dbs(st, txn, create, dir)) || (rc = init_or_check(st, txn, create, p, dir))) {
        mdb_txn_abort(txn);
        return rc;
    }
    if ((rc = mdb_txn_commit(txn))) return store_lmdb_err(st, rc, "commit");
    if (p->budget >= 0 && !st->readonly) return skv_store_set_budget(st, (uint64_t)p->budget);
    return SKV_OK;
}

/* The model file's absolute path (as given when it cannot be resolved); malloc'ed. */
static char *abs_path(const char *path)
{
    char *r = realpath(path, NULL);
    if (r || !(r = malloc(strlen(path) + 1))) return r;
    return strcpy(r, path);
}

int skv_store_open(const char *dir, skv_model *m, int flags, const skv_store_params *p, skv_store **out,
                   char *err, size_t errcap)
{
    skv_store_params dp = skv_store_default_params();
    skv_store *st;
    int rc;
    *out = NULL;
    if (!dir || !m || !out || (flags & ~(SKV_STORE_CREATE | SKV_STORE_READONLY)) ||
        ((flags & SKV_STORE_CREATE) && (flags & SKV_STORE_READONLY)))
        return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "skv_store_open: invalid arguments");
    if (!p) p = &dp;
    if (!(st = calloc(1, sizeof *st))) return skv_errf(err, errcap, SKV_ERR_NOMEM, "out of memory");
    if (!(st->err = skv_errbox_create()) || (p->model_path && !(st->model_path = abs_path(p->model_path)))) {
        skv_store_close(st);
        return skv_errf(err, errcap, SKV_ERR_NOMEM, "out of memory");
    }
    st->model = m;
    st->readonly = !!(flags & SKV_STORE_READONLY);
    st->n_threads = p->n_threads > 0 ? p->n_threads : 1;
    if ((rc = skv_model_get_info(m, &st->info)) || (rc = skv_model_fingerprint(m, st->fp))) {
        store_err(st, rc, "cannot read the model's info/fingerprint");
    } else {
        st->blocks = (size_t)st->info.n_layer * 2 * (size_t)st->info.n_head_kv;
        st->head_dim = (size_t)st->info.head_dim;
        rc = open_store(st, dir, flags, p);
    }
    if (rc) {
        skv_errf(err, errcap, rc, "%s", skv_errbox_get(st->err));
        skv_store_close(st);
        return rc;
    }
    *out = st;
    return SKV_OK;
}

void skv_store_close(skv_store *st)
{
    if (!st) return;
    if (st->env) mdb_env_close(st->env);
    skv_ctx_free(st->work);
    skv_errbox_free(st->err);
    free(st->model_path);
    free(st);
}

int skv_store_set_budget(skv_store *st, uint64_t bytes)
{
    tx t;
    int rc = store_tx_begin(st, 1, &t);
    if (rc) return rc;
    t.s.budget = bytes;
    return store_tx_commit(&t);
}

