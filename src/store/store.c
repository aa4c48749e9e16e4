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
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>
#include <zstd.h>

#include "store/trie.h"
#include "core/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the KV blobs store host floats: little-endian hosts only"
#endif

#define STORE_MAGIC "SKVSTORE"
#define STORE_VERSION 1
#define HEADER_SIZE 168
#define STATE_SIZE 64
#define SESSION_SIZE 56
#define BLOB_HDR 16
#define KV_MAGIC 0x4b564b53u   /* "SKVK" */
#define SES_MAGIC 0x53564b53u  /* "SKVS" */
#define DEFAULT_BUDGET (64ull << 20)
#define DEFAULT_MAP (64ull << 30)
#define ZSTD_KV_LEVEL 3

typedef struct store_state {
    uint64_t next_id, clock, budget;
    double prefill_tps, load_bps, prior_weight, comp_ratio;
} store_state;

struct skv_store {
    MDB_env *env;
    MDB_dbi meta, nodes, children, sessions, kv;
    skv_model *model;
    skv_model_info info;
    uint8_t fp[16];
    int readonly, n_threads;
    size_t blocks, head_dim; /* KV of one position = blocks x head_dim floats */
    skv_ctx *work;           /* put's context: used only inside the write transaction */
    pthread_mutex_t mu;      /* guards err */
    char err[512];
};

/* One transaction with its trie view. */
typedef struct tx {
    skv_store *st;
    MDB_txn *txn;
    store_state s;
    skv_trie_io io;
} tx;

static int set_err(skv_store *st, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(skv_store *st, int status, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&st->mu);
    va_start(ap, fmt);
    vsnprintf(st->err, sizeof st->err, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&st->mu);
    return status;
}

const char *skv_store_last_error(const skv_store *st) { return st ? st->err : "no store"; }

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

static int lmdb_err(skv_store *st, int rc, const char *what)
{
    return set_err(st, mdb_status(rc), "%s: %s", what, mdb_strerror(rc));
}

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static void be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static uint64_t rbe64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
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
        return set_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (bad header)", dir);
    if (XXH3_64bits(p, 160) != skv_rd64(p + 160))
        return set_err(st, SKV_ERR_FORMAT, "store '%s': header checksum mismatch (damaged)", dir);
    if (skv_rd32(p + 8) != STORE_VERSION)
        return set_err(st, SKV_ERR_UNSUPPORTED, "store '%s' has format version %u (this build reads %d)", dir,
                       skv_rd32(p + 8), STORE_VERSION);
    memcpy(name, p + 32, 96);
    name[96] = 0;
    if (memcmp(p + 16, st->fp, 16) != 0)
        return set_err(st, SKV_ERR_MISMATCH, "store '%s' was made with model '%s', not with the loaded model '%s'",
                       dir, name, st->info.name);
    return SKV_OK;
}

static int state_load(tx *t)
{
    MDB_val k = {5, (void *)"state"}, v;
    int rc = mdb_get(t->txn, t->st->meta, &k, &v);
    if (rc) return lmdb_err(t->st, rc, "store state");
    if (state_decode(v.mv_data, v.mv_size, &t->s))
        return set_err(t->st, SKV_ERR_FORMAT, "store state record damaged");
    return SKV_OK;
}

static int state_save(tx *t)
{
    uint8_t buf[STATE_SIZE];
    MDB_val k = {5, (void *)"state"}, v = {STATE_SIZE, buf};
    state_encode(&t->s, buf);
    int rc = mdb_put(t->txn, t->st->meta, &k, &v, 0);
    return rc ? lmdb_err(t->st, rc, "store state") : SKV_OK;
}

/* ---- KV blobs ----------------------------------------------------------- */

static size_t pos_floats(const skv_store *st) { return st->blocks * st->head_dim; }

/* Copies positions [p0, p0+n) of a [blocks][len][head_dim] array into dst (its own
 * [blocks][dlen][head_dim] layout at position d0). */
static void kv_copy(const skv_store *st, const float *src, size_t len, size_t p0, size_t n, float *dst, size_t dlen,
                    size_t d0)
{
    size_t D = st->head_dim;
    for (size_t b = 0; b < st->blocks; b++)
        memcpy(dst + (b * dlen + d0) * D, src + (b * len + p0) * D, n * D * sizeof *dst);
}

/* Byte-shuffle (all first bytes, then all second bytes, ...): f32 exponents and high
 * mantissa bytes then sit together and compress. */
static void shuffle4(const uint8_t *in, uint8_t *out, size_t n_floats, int inverse)
{
    for (size_t i = 0; i < n_floats; i++)
        for (size_t j = 0; j < 4; j++) {
            if (inverse) out[4 * i + j] = in[j * n_floats + i];
            else out[j * n_floats + i] = in[4 * i + j];
        }
}

static int blob_put(tx *t, uint64_t id, const float *kv, uint32_t len, uint64_t *bytes)
{
    skv_store *st = t->st;
    size_t nf = (size_t)len * pos_floats(st), raw = nf * 4, cap = BLOB_HDR + ZSTD_compressBound(raw);
    uint8_t *sh = malloc(raw), *out = malloc(cap), key[8];
    int rc = SKV_ERR_NOMEM;
    if (!sh || !out) goto done;
    shuffle4((const uint8_t *)kv, sh, nf, 0);
    size_t z = ZSTD_compress(out + BLOB_HDR, cap - BLOB_HDR, sh, raw, ZSTD_KV_LEVEL);
    if (ZSTD_isError(z)) { rc = set_err(st, SKV_ERR_INTERNAL, "zstd: %s", ZSTD_getErrorName(z)); goto done; }
    skv_wr32(out, KV_MAGIC);
    skv_wr32(out + 4, len);
    skv_wr64(out + 8, XXH3_64bits(kv, raw));
    be64(key, id);
    MDB_val k = {8, key}, v = {BLOB_HDR + z, out};
    int lr = mdb_put(t->txn, st->kv, &k, &v, 0);
    rc = lr ? lmdb_err(st, lr, "write KV") : SKV_OK;
    *bytes = BLOB_HDR + z;
    t->s.comp_ratio = 0.8 * t->s.comp_ratio + 0.2 * ((double)(BLOB_HDR + z) / (double)raw);
done:
    free(sh);
    free(out);
    return rc;
}

/* Loads node id's KV (len positions) into a malloc'ed array. */
static int blob_get(tx *t, uint64_t id, uint32_t len, float **out)
{
    skv_store *st = t->st;
    uint8_t key[8];
    size_t nf = (size_t)len * pos_floats(st), raw = nf * 4;
    be64(key, id);
    MDB_val k = {8, key}, v;
    int rc = mdb_get(t->txn, st->kv, &k, &v);
    if (rc) return rc == MDB_NOTFOUND ? set_err(st, SKV_ERR_FORMAT, "node %llu is marked materialised but has no KV",
                                                (unsigned long long)id)
                                      : lmdb_err(st, rc, "read KV");
    const uint8_t *p = v.mv_data;
    if (v.mv_size < BLOB_HDR || skv_rd32(p) != KV_MAGIC || skv_rd32(p + 4) != len ||
        ZSTD_getFrameContentSize(p + BLOB_HDR, v.mv_size - BLOB_HDR) != raw)
        return set_err(st, SKV_ERR_FORMAT, "KV of node %llu: bad blob header", (unsigned long long)id);
    uint8_t *sh = malloc(raw ? raw : 1);
    float *kv = malloc(raw ? raw : 1);
    if (!sh || !kv) { free(sh); free(kv); return set_err(st, SKV_ERR_NOMEM, "out of memory"); }
    size_t d = ZSTD_decompress(sh, raw, p + BLOB_HDR, v.mv_size - BLOB_HDR);
    if (!ZSTD_isError(d) && d == raw) shuffle4(sh, (uint8_t *)kv, nf, 1);
    free(sh);
    if (ZSTD_isError(d) || d != raw || XXH3_64bits(kv, raw) != skv_rd64(p + 8)) {
        free(kv);
        return set_err(st, SKV_ERR_FORMAT, "KV of node %llu does not decode (damaged)", (unsigned long long)id);
    }
    *out = kv;
    return SKV_OK;
}

static int blob_del(tx *t, uint64_t id)
{
    uint8_t key[8];
    be64(key, id);
    MDB_val k = {8, key};
    int rc = mdb_del(t->txn, t->st->kv, &k, NULL);
    return rc && rc != MDB_NOTFOUND ? lmdb_err(t->st, rc, "delete KV") : SKV_OK;
}

/* ---- trie storage over LMDB --------------------------------------------- */

static int io_get_node(void *u, uint64_t id, skv_trie_node *out)
{
    tx *t = u;
    uint8_t key[8];
    char e[160];
    be64(key, id);
    MDB_val k = {8, key}, v;
    int rc = mdb_get(t->txn, t->st->nodes, &k, &v);
    if (rc == MDB_NOTFOUND) return 1;
    if (rc) return lmdb_err(t->st, rc, "read node");
    if ((rc = skv_trie_node_decode(v.mv_data, v.mv_size, out, e, sizeof e)))
        return set_err(t->st, rc, "node %llu: %s", (unsigned long long)id, e);
    if (out->id != id) {
        skv_trie_node_clear(out);
        return set_err(t->st, SKV_ERR_FORMAT, "node %llu: record names id %llu", (unsigned long long)id,
                       (unsigned long long)out->id);
    }
    return SKV_OK;
}

static int io_put_node(void *u, const skv_trie_node *n)
{
    tx *t = u;
    uint8_t key[8];
    size_t sz = skv_trie_node_size(n->len);
    uint8_t *buf = malloc(sz);
    if (!buf) return set_err(t->st, SKV_ERR_NOMEM, "out of memory");
    skv_trie_node_encode(n, buf);
    be64(key, n->id);
    MDB_val k = {8, key}, v = {sz, buf};
    int rc = mdb_put(t->txn, t->st->nodes, &k, &v, 0);
    free(buf);
    return rc ? lmdb_err(t->st, rc, "write node") : SKV_OK;
}

static int io_del_node(void *u, uint64_t id)
{
    tx *t = u;
    uint8_t key[8];
    be64(key, id);
    MDB_val k = {8, key};
    int rc = mdb_del(t->txn, t->st->nodes, &k, NULL);
    return rc ? lmdb_err(t->st, rc, "delete node") : SKV_OK;
}

static void child_key(uint8_t key[12], uint64_t parent, int32_t tok)
{
    be64(key, parent);
    be32(key + 8, (uint32_t)tok);
}

static int io_get_child(void *u, uint64_t parent, int32_t tok, uint64_t *child)
{
    tx *t = u;
    uint8_t key[12];
    child_key(key, parent, tok);
    MDB_val k = {12, key}, v;
    int rc = mdb_get(t->txn, t->st->children, &k, &v);
    if (rc == MDB_NOTFOUND) return 1;
    if (rc) return lmdb_err(t->st, rc, "read child");
    if (v.mv_size != 8) return set_err(t->st, SKV_ERR_FORMAT, "child record of %zu bytes", v.mv_size);
    *child = skv_rd64(v.mv_data);
    return SKV_OK;
}

static int io_put_child(void *u, uint64_t parent, int32_t tok, uint64_t child)
{
    tx *t = u;
    uint8_t key[12], val[8];
    child_key(key, parent, tok);
    skv_wr64(val, child);
    MDB_val k = {12, key}, v = {8, val};
    int rc = mdb_put(t->txn, t->st->children, &k, &v, 0);
    return rc ? lmdb_err(t->st, rc, "write child") : SKV_OK;
}

static int io_del_child(void *u, uint64_t parent, int32_t tok)
{
    tx *t = u;
    uint8_t key[12];
    child_key(key, parent, tok);
    MDB_val k = {12, key};
    int rc = mdb_del(t->txn, t->st->children, &k, NULL);
    return rc ? lmdb_err(t->st, rc, "delete child") : SKV_OK;
}

static int io_children(void *u, uint64_t parent, int (*cb)(void *, int32_t, uint64_t), void *cu)
{
    tx *t = u;
    MDB_cursor *c;
    uint8_t key[12];
    int rc = mdb_cursor_open(t->txn, t->st->children, &c), r = 0;
    if (rc) return lmdb_err(t->st, rc, "cursor");
    child_key(key, parent, 0);
    MDB_val k = {12, key}, v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); !rc && !r; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const uint8_t *p = k.mv_data;
        if (k.mv_size != 12 || rbe64(p) != parent) break;
        if (v.mv_size != 8) { r = set_err(t->st, SKV_ERR_FORMAT, "child record damaged"); break; }
        r = cb(cu, (int32_t)(rbe64(p + 4) & 0xffffffffu), skv_rd64(v.mv_data));
    }
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND) return lmdb_err(t->st, rc, "walk children");
    return r;
}

static int io_new_id(void *u, uint64_t *id)
{
    tx *t = u;
    *id = t->s.next_id++;
    return SKV_OK;
}

static int io_kv_split(void *u, skv_trie_node *up, skv_trie_node *low, uint32_t k)
{
    tx *t = u;
    float *all, *a = NULL, *b = NULL;
    uint32_t len = k + low->len;
    if (!(low->flags & SKV_TRIE_MAT)) return SKV_OK;
    int rc = blob_get(t, low->id, len, &all);
    if (rc) return rc;
    a = malloc((size_t)k * pos_floats(t->st) * sizeof *a);
    b = malloc((size_t)low->len * pos_floats(t->st) * sizeof *b);
    if (!a || !b) rc = set_err(t->st, SKV_ERR_NOMEM, "out of memory");
    if (!rc) {
        kv_copy(t->st, all, len, 0, k, a, k, 0);
        kv_copy(t->st, all, len, k, low->len, b, low->len, 0);
        rc = blob_put(t, up->id, a, k, &up->kv_bytes);
    }
    if (!rc) rc = blob_put(t, low->id, b, low->len, &low->kv_bytes);
    free(all);
    free(a);
    free(b);
    return rc;
}

static int io_kv_merge(void *u, const skv_trie_node *up, skv_trie_node *m)
{
    tx *t = u;
    float *a = NULL, *b = NULL, *c = NULL;
    uint32_t lb = m->len - up->len;
    int rc;
    if (!(m->flags & SKV_TRIE_MAT)) { /* one side token-only: the merged node is token-only */
        m->kv_bytes = 0;
        if ((rc = blob_del(t, up->id))) return rc;
        return blob_del(t, m->id);
    }
    if ((rc = blob_get(t, up->id, up->len, &a)) || (rc = blob_get(t, m->id, lb, &b))) goto out;
    if (!(c = malloc((size_t)m->len * pos_floats(t->st) * sizeof *c))) {
        rc = set_err(t->st, SKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    kv_copy(t->st, a, up->len, 0, up->len, c, m->len, 0);
    kv_copy(t->st, b, lb, 0, lb, c, m->len, up->len);
    if (!(rc = blob_put(t, m->id, c, m->len, &m->kv_bytes))) rc = blob_del(t, up->id);
out:
    free(a);
    free(b);
    free(c);
    return rc;
}

static int io_kv_drop(void *u, const skv_trie_node *n)
{
    return (n->flags & SKV_TRIE_MAT) ? blob_del(u, n->id) : SKV_OK;
}

/* ---- transactions ------------------------------------------------------- */

static int tx_begin(skv_store *st, int write, tx *t)
{
    memset(t, 0, sizeof *t);
    t->st = st;
    pthread_mutex_lock(&st->mu);
    st->err[0] = 0; /* a message left from an earlier call must not describe this one */
    pthread_mutex_unlock(&st->mu);
    if (write && st->readonly) return set_err(st, SKV_ERR_INVALID_ARG, "the store was opened read-only");
    int rc = mdb_txn_begin(st->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
    if (rc) return lmdb_err(st, rc, "begin transaction");
    t->io = (skv_trie_io){
        .user = t,
        .get_node = io_get_node,
        .put_node = io_put_node,
        .del_node = io_del_node,
        .get_child = io_get_child,
        .put_child = io_put_child,
        .del_child = io_del_child,
        .children = io_children,
        .new_id = io_new_id,
        .kv_split = io_kv_split,
        .kv_merge = io_kv_merge,
        .kv_drop = io_kv_drop,
    };
    if ((rc = state_load(t))) {
        mdb_txn_abort(t->txn);
        t->txn = NULL;
    }
    return rc;
}

static void tx_abort(tx *t)
{
    if (t->txn) mdb_txn_abort(t->txn);
    t->txn = NULL;
}

static int tx_commit(tx *t)
{
    int rc = state_save(t);
    if (rc) {
        tx_abort(t);
        return rc;
    }
    rc = mdb_txn_commit(t->txn);
    t->txn = NULL;
    return rc ? lmdb_err(t->st, rc, "commit") : SKV_OK;
}

/* A trie error either set a message already or is a bare status from trie.c. */
static int trie_err(skv_store *st, int rc, const char *what)
{
    char prev[sizeof st->err];
    pthread_mutex_lock(&st->mu);
    memcpy(prev, st->err, sizeof prev);
    pthread_mutex_unlock(&st->mu);
    if (rc == SKV_ERR_FORMAT || rc == SKV_ERR_INTERNAL)
        return set_err(st, rc, "%s: the store's trie is inconsistent (damaged?)%s%.400s", what, prev[0] ? ": " : "",
                       prev);
    if (rc == SKV_ERR_NOMEM) return set_err(st, rc, "%s: out of memory", what);
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
        return set_err(st, SKV_ERR_FORMAT, "'%s' holds an LMDB environment with other data, not a seqkv store", dir);
    int rc = mdb_dbi_open(txn, "meta", fl, &st->meta);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
        return set_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (no 'meta' database)",
                       dir);
    if (rc) return lmdb_err(st, rc, "open meta");
    const char *names[4] = {"nodes", "children", "sessions", "kv"};
    MDB_dbi *dbis[4] = {&st->nodes, &st->children, &st->sessions, &st->kv};
    for (int i = 0; i < 4; i++) {
        rc = mdb_dbi_open(txn, names[i], fl, dbis[i]);
        if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
            return set_err(st, SKV_ERR_FORMAT, "store '%s': database '%s' missing (damaged)", dir, names[i]);
        if (rc) return lmdb_err(st, rc, names[i]);
    }
    return SKV_OK;
}

static int work_ctx(skv_store *st);

/* Restore speed for the cost model: a 128-token prefill of the model (no logits). */
static double measure_prefill(skv_store *st)
{
    int32_t tok[128];
    double best = 0;
    if (work_ctx(st)) return 2000.0;
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
            return lmdb_err(st, rc, "write header");
        return SKV_OK;
    }
    if (rc == MDB_NOTFOUND)
        return set_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (no header)", dir);
    if (rc) return lmdb_err(st, rc, "read header");
    return header_check(st, v.mv_data, v.mv_size, dir);
}

static int open_env(skv_store *st, const char *dir, int flags, const skv_store_params *p)
{
    struct stat sb;
    char path[4096];
    int create = flags & SKV_STORE_CREATE;
    if (create && stat(dir, &sb) != 0 && mkdir(dir, 0777) != 0)
        return set_err(st, SKV_ERR_IO, "cannot create directory '%s': %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (!create && stat(path, &sb) != 0)
        return set_err(st, SKV_ERR_IO, "no seqkv store in '%s' (create one with 'seqkv store init')", dir);
    int rc = mdb_env_create(&st->env);
    if (!rc) rc = mdb_env_set_maxdbs(st->env, 8);
    if (!rc) rc = mdb_env_set_mapsize(st->env, p->map_size ? p->map_size : DEFAULT_MAP);
    if (rc) return lmdb_err(st, rc, "lmdb");
    rc = mdb_env_open(st->env, dir, MDB_NOTLS | (st->readonly ? MDB_RDONLY : 0), 0664);
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED)
        return set_err(st, SKV_ERR_FORMAT, "'%s' is not a seqkv store: data.mdb is not a valid LMDB environment (%s)",
                       dir, mdb_strerror(rc));
    if (rc) return set_err(st, mdb_status(rc), "cannot open store '%s': %s", dir, mdb_strerror(rc));
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
                   ? set_err(st, SKV_ERR_FORMAT, "store '%s' is damaged: %s", dir, mdb_strerror(rc))
                   : lmdb_err(st, rc, "begin");
    if ((rc = open_dbs(st, txn, create, dir)) || (rc = init_or_check(st, txn, create, p, dir))) {
        mdb_txn_abort(txn);
        return rc;
    }
    if ((rc = mdb_txn_commit(txn))) return lmdb_err(st, rc, "commit");
    if (p->budget >= 0 && !st->readonly) return skv_store_set_budget(st, (uint64_t)p->budget);
    return SKV_OK;
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
    pthread_mutex_init(&st->mu, NULL);
    st->model = m;
    st->readonly = !!(flags & SKV_STORE_READONLY);
    st->n_threads = p->n_threads > 0 ? p->n_threads : 1;
    if ((rc = skv_model_get_info(m, &st->info)) || (rc = skv_model_fingerprint(m, st->fp))) {
        set_err(st, rc, "cannot read the model's info/fingerprint");
    } else {
        st->blocks = (size_t)st->info.n_layer * 2 * (size_t)st->info.n_head_kv;
        st->head_dim = (size_t)st->info.head_dim;
        rc = open_store(st, dir, flags, p);
    }
    if (rc) {
        skv_errf(err, errcap, rc, "%s", st->err);
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
    pthread_mutex_destroy(&st->mu);
    free(st);
}

int skv_store_set_budget(skv_store *st, uint64_t bytes)
{
    tx t;
    int rc = tx_begin(st, 1, &t);
    if (rc) return rc;
    t.s.budget = bytes;
    return tx_commit(&t);
}

/* ---- sessions ----------------------------------------------------------- */

typedef struct ses_rec {
    uint64_t end;
    uint32_t n_tokens;
    uint8_t digest[16];
    uint64_t put_time;
} ses_rec;

static void ses_encode(const ses_rec *r, uint8_t *p)
{
    memset(p, 0, SESSION_SIZE);
    skv_wr32(p, SES_MAGIC);
    skv_wr32(p + 4, 1);
    skv_wr64(p + 8, r->end);
    skv_wr32(p + 16, r->n_tokens);
    memcpy(p + 24, r->digest, 16);
    skv_wr64(p + 40, r->put_time);
    skv_wr64(p + 48, XXH3_64bits(p, 48));
}

static int ses_decode(const MDB_val *v, ses_rec *r)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size != SESSION_SIZE || skv_rd32(p) != SES_MAGIC || skv_rd32(p + 4) != 1 ||
        XXH3_64bits(p, 48) != skv_rd64(p + 48))
        return SKV_ERR_FORMAT;
    r->end = skv_rd64(p + 8);
    r->n_tokens = skv_rd32(p + 16);
    memcpy(r->digest, p + 24, 16);
    r->put_time = skv_rd64(p + 40);
    return SKV_OK;
}

/* LMDB takes keys as non-const pointers but never writes through them. */
static MDB_val name_key(const char *name)
{
    MDB_val k = {strlen(name), NULL};
    memcpy(&k.mv_data, &name, sizeof name);
    return k;
}

static int check_name(skv_store *st, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > 255) return set_err(st, SKV_ERR_INVALID_ARG, "session names are 1..255 bytes");
    return SKV_OK;
}

/* 1 = absent. */
static int ses_get(tx *t, const char *name, ses_rec *r)
{
    MDB_val k = name_key(name), v;
    int rc = mdb_get(t->txn, t->st->sessions, &k, &v);
    if (rc == MDB_NOTFOUND) return 1;
    if (rc) return lmdb_err(t->st, rc, "read session");
    if (ses_decode(&v, r)) return set_err(t->st, SKV_ERR_FORMAT, "session '%s': record damaged", name);
    return SKV_OK;
}

/* Positions a restore of the path's first `upto` positions can load: the contiguous run
 * of materialised nodes from the root. */
static uint32_t loadable(const skv_trie_path *p, uint32_t upto)
{
    uint32_t l = 0;
    for (size_t i = 0; i < p->n && (p->nodes[i].flags & SKV_TRIE_MAT); i++) {
        uint32_t end = p->nodes[i].depth;
        l = end < upto ? end : upto;
        if (end >= upto) break;
    }
    return l;
}

/* Loads positions [0, upto) of the path into ctx from materialised KV. */
static int load_prefix(tx *t, const skv_trie_path *p, uint32_t upto, skv_ctx *ctx)
{
    int rc = skv_ctx_truncate(ctx, 0);
    for (size_t i = 0; !rc && i < p->n; i++) {
        const skv_trie_node *nd = &p->nodes[i];
        uint32_t p0 = nd->depth - nd->len, use = nd->depth <= upto ? nd->len : upto - p0;
        float *kv, *part;
        if (p0 >= upto) break;
        if ((rc = blob_get(t, nd->id, nd->len, &kv))) return rc;
        part = kv;
        if (use < nd->len && (part = malloc((size_t)use * pos_floats(t->st) * sizeof *part)))
            kv_copy(t->st, kv, nd->len, 0, use, part, use, 0);
        rc = part ? skv_ctx_kv_write(ctx, (int)p0, (int)use, part) : SKV_ERR_NOMEM;
        if (part != kv) free(part);
        free(kv);
        if (rc) return set_err(t->st, rc, "loading KV: %s", skv_ctx_last_error(ctx));
    }
    return rc;
}

/* ---- placement policy --------------------------------------------------- */

typedef struct cand {
    uint64_t id, parent;
    double score;
    uint64_t bytes;
    int on_path, alive;
} cand;

typedef struct mat_set {
    cand *c;
    size_t n, cap;
    uint64_t total;
} mat_set;

/* Expected seconds saved per byte: reuse x (recompute - load) / bytes (docs/store.md). */
static double node_score(const store_state *s, const skv_trie_node *nd, double bytes)
{
    double prior = exp2(-nd->d_end);
    double reuse = ((double)nd->hits + (double)nd->refcount + s->prior_weight * prior) /
                   ((double)s->clock + s->prior_weight);
    double saved = (double)nd->len / s->prefill_tps - bytes / s->load_bps;
    if (saved < 0) saved = 0;
    return bytes > 0 ? reuse * saved / bytes : 0;
}

static int mat_add(mat_set *m, const cand *c)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        cand *nb = realloc(m->c, cap * sizeof *nb);
        if (!nb) return SKV_ERR_NOMEM;
        m->c = nb;
        m->cap = cap;
    }
    m->c[m->n++] = *c;
    m->total += c->bytes;
    return SKV_OK;
}

/* The materialised set: every key of the kv database with its node's score. */
static int mat_load(tx *t, mat_set *m)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(t->txn, t->st->kv, &cur), r = SKV_OK;
    memset(m, 0, sizeof *m);
    if (rc) return lmdb_err(t->st, rc, "cursor");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        skv_trie_node nd;
        if (k.mv_size != 8) { r = set_err(t->st, SKV_ERR_FORMAT, "kv key damaged"); break; }
        uint64_t id = rbe64(k.mv_data);
        if ((r = io_get_node(t, id, &nd)) == 1) r = set_err(t->st, SKV_ERR_FORMAT, "KV of a missing node");
        if (r) break;
        cand c = {.id = id, .parent = nd.parent, .bytes = v.mv_size, .alive = 1};
        c.score = node_score(&t->s, &nd, (double)v.mv_size);
        skv_trie_node_clear(&nd);
        if (mat_add(m, &c)) r = set_err(t->st, SKV_ERR_NOMEM, "out of memory");
    }
    mdb_cursor_close(cur);
    if (!r && rc && rc != MDB_NOTFOUND) r = lmdb_err(t->st, rc, "walk kv");
    if (r) free(m->c);
    return r;
}

static int is_leaf(const mat_set *m, size_t i)
{
    for (size_t j = 0; j < m->n; j++)
        if (m->c[j].alive && m->c[j].parent == m->c[i].id) return 0;
    return 1;
}

/* The lowest-scoring materialised leaf (optionally not on the current path). */
static long lowest_leaf(const mat_set *m, int skip_path)
{
    long best = -1;
    for (size_t i = 0; i < m->n; i++) {
        if (!m->c[i].alive || (skip_path && m->c[i].on_path) || !is_leaf(m, i)) continue;
        if (best < 0 || m->c[i].score < m->c[best].score) best = (long)i;
    }
    return best;
}

/* Demotes node id to token-only: drops its KV, clears the flag. */
static int demote(tx *t, mat_set *m, size_t i)
{
    skv_trie_node nd;
    int rc = io_get_node(t, m->c[i].id, &nd);
    if (rc == 1) rc = SKV_ERR_FORMAT;
    if (rc) return rc;
    nd.flags &= ~(uint32_t)SKV_TRIE_MAT;
    nd.kv_bytes = 0;
    if (!(rc = blob_del(t, nd.id))) rc = io_put_node(t, &nd);
    skv_trie_node_clear(&nd);
    m->c[i].alive = 0;
    m->total -= m->c[i].bytes;
    return rc;
}

static int evict_to(tx *t, mat_set *m, uint64_t budget, uint32_t *n_demoted)
{
    int rc = SKV_OK;
    while (!rc && m->total > budget) {
        long i = lowest_leaf(m, 0);
        if (i < 0) break;
        if (!(rc = demote(t, m, (size_t)i))) (*n_demoted)++;
    }
    return rc;
}

/* Can `need` bytes be freed by demoting leaves off the path scoring below `score`? Each
 * demotion may expose a parent as a new leaf, so simulate in order. */
static int make_room(tx *t, mat_set *m, uint64_t need, double score, uint32_t *n_demoted, int apply)
{
    uint64_t freed = 0;
    int rc = SKV_OK;
    char *was = malloc(m->n + 1);
    if (!was) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < m->n; i++) was[i] = (char)m->c[i].alive;
    while (freed < need) {
        long i = lowest_leaf(m, 1);
        if (i < 0 || m->c[i].score >= score) break;
        freed += m->c[i].bytes;
        m->c[i].alive = 0;
    }
    int ok = freed >= need;
    for (size_t i = 0; i < m->n; i++) { /* undo the simulation, then apply for real */
        int sel = was[i] && !m->c[i].alive;
        m->c[i].alive = was[i];
        if (ok && apply && sel && !rc) {
            if (!(rc = demote(t, m, i))) (*n_demoted)++;
        }
    }
    free(was);
    return rc ? rc : ok;
}

/* Materialises path nodes (root first) whose parent is materialised, from ctx (which holds
 * the whole path's KV), while the budget allows or lower-valued leaves can make room. */
static int place(tx *t, const skv_trie_path *p, skv_ctx *ctx, uint32_t *n_mat, uint32_t *n_dem)
{
    skv_store *st = t->st;
    mat_set m;
    int rc = mat_load(t, &m);
    if (rc) return rc;
    for (size_t i = 0; i < m.n; i++)
        for (size_t j = 0; j < p->n; j++) m.c[i].on_path |= m.c[i].id == p->nodes[j].id;
    for (size_t i = 0; !rc && i < p->n; i++) {
        const skv_trie_node *nd = &p->nodes[i];
        if (nd->flags & SKV_TRIE_MAT) continue;
        double est = (double)nd->len * (double)pos_floats(st) * 4.0 * t->s.comp_ratio + BLOB_HDR;
        double score = node_score(&t->s, nd, est);
        uint64_t need = m.total + (uint64_t)est > t->s.budget ? m.total + (uint64_t)est - t->s.budget : 0;
        if (need && (rc = make_room(t, &m, need, score, n_dem, 1)) <= 0) break; /* 0: no room */
        rc = SKV_OK;
        float *kv = malloc((size_t)nd->len * pos_floats(st) * sizeof *kv);
        skv_trie_node up;
        if (!kv) { rc = set_err(st, SKV_ERR_NOMEM, "out of memory"); break; }
        rc = skv_ctx_kv_read(ctx, (int)(nd->depth - nd->len), (int)nd->len, kv);
        if (!rc && !(rc = skv_trie_node_copy(&up, nd))) {
            if (!(rc = blob_put(t, nd->id, kv, nd->len, &up.kv_bytes))) {
                up.flags |= SKV_TRIE_MAT;
                rc = io_put_node(t, &up);
                cand c = {.id = up.id, .parent = up.parent, .bytes = up.kv_bytes, .alive = 1, .on_path = 1,
                          .score = node_score(&t->s, &up, (double)up.kv_bytes)};
                if (!rc) rc = mat_add(&m, &c);
                (*n_mat)++;
            }
            skv_trie_node_clear(&up);
        }
        free(kv);
    }
    if (!rc) rc = evict_to(t, &m, t->s.budget, n_dem); /* measured sizes may exceed the estimate */
    free(m.c);
    return rc;
}

/* ---- put ---------------------------------------------------------------- */

static int work_ctx(skv_store *st)
{
    if (st->work) return SKV_OK;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_threads = st->n_threads;
    int rc = skv_ctx_create(st->model, &cp, &st->work);
    return rc ? set_err(st, rc, "cannot create a context for the model") : SKV_OK;
}

static int check_tokens(skv_store *st, const int32_t *tokens, size_t n)
{
    if (!tokens || n < 1) return set_err(st, SKV_ERR_INVALID_ARG, "a session needs at least one token");
    if (n > (size_t)st->info.n_ctx_train)
        return set_err(st, SKV_ERR_RANGE, "session of %zu tokens exceeds the model's context of %d", n,
                       st->info.n_ctx_train);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= st->info.n_vocab)
            return set_err(st, SKV_ERR_INVALID_ARG, "token %zu (%d) is outside the vocabulary", i, (int)tokens[i]);
    return SKV_OK;
}

/* Runs the model so ctx holds positions [0, n) and sur[m..n) the new tokens' surprisal. */
static int compute_new(tx *t, const skv_trie_path *p, const int32_t *tokens, size_t n, float *sur,
                       skv_store_put_report *r)
{
    skv_store *st = t->st;
    uint32_t m = p->matched, lm = loadable(p, m);
    uint32_t start = m ? (lm < m - 1 ? lm : m - 1) : 0; /* logits predicting token m need m-1 run */
    int V = st->info.n_vocab, rc;
    float *logits = malloc((n - start) * (size_t)V * sizeof *logits);
    if (!logits) return set_err(st, SKV_ERR_NOMEM, "out of memory");
    /* put's prefill computes every row of logits, so its speed is not a restore's: the
     * cost model's recompute speed comes from the store's creation and from gets */
    if ((rc = load_prefix(t, p, start, st->work))) goto out;
    if ((rc = skv_prefill(st->work, tokens + start, n - start, SKV_LOGITS_ALL, logits))) {
        rc = set_err(st, rc, "prefill: %s", skv_ctx_last_error(st->work));
        goto out;
    }
    for (size_t j = m; j < n; j++) /* position 0 has no prediction; rounding never makes a cost negative */
        sur[j] = j ? (float)fmax(0.0, skv_token_surprisal(logits + (j - 1 - start) * (size_t)V, V, tokens[j])) : 0.0f;
    r->n_loaded = start;
    r->n_computed = (uint32_t)(n - start);
out:
    free(logits);
    return rc;
}

static int put_tx(tx *t, const char *name, const int32_t *tokens, size_t n, skv_store_put_report *r)
{
    skv_store *st = t->st;
    skv_trie_path p = {0};
    ses_rec sr = {0};
    float *sur = calloc(n, sizeof *sur);
    int rc;
    if (!sur) return set_err(st, SKV_ERR_NOMEM, "out of memory");
    if ((rc = ses_get(t, name, &sr)) <= 0) {
        if (!rc) rc = set_err(st, SKV_ERR_INVALID_ARG, "a session named '%s' exists already", name);
        goto out;
    }
    if ((rc = skv_trie_match(&t->io, tokens, n, &p))) { rc = trie_err(st, rc, "lookup"); goto out; }
    r->n_shared = p.matched;
    if ((rc = compute_new(t, &p, tokens, n, sur, r))) goto out;
    skv_trie_path_free(&p);
    if ((rc = skv_trie_insert(&t->io, tokens, n, sur, ++t->s.clock, &sr.end))) { rc = trie_err(st, rc, "insert"); goto out; }
    if ((rc = skv_ctx_kv_digest(st->work, (int)n, sr.digest))) goto out;
    sr.n_tokens = (uint32_t)n;
    sr.put_time = (uint64_t)time(NULL);
    uint8_t rec[SESSION_SIZE];
    ses_encode(&sr, rec);
    MDB_val k = name_key(name), v = {SESSION_SIZE, rec};
    if ((rc = mdb_put(t->txn, st->sessions, &k, &v, 0))) { rc = lmdb_err(st, rc, "write session"); goto out; }
    if ((rc = skv_trie_path_to(&t->io, sr.end, &p))) { rc = trie_err(st, rc, "path"); goto out; }
    r->bits = p.bits;
    rc = place(t, &p, st->work, &r->n_materialised, &r->n_demoted);
out:
    skv_trie_path_free(&p);
    free(sur);
    return rc;
}

int skv_store_put(skv_store *st, const char *name, const int32_t *tokens, size_t n, skv_store_put_report *rep)
{
    skv_store_put_report r = {.n_tokens = (uint32_t)n};
    tx t;
    double t0 = skv_now();
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = check_name(st, name)) || (rc = check_tokens(st, tokens, n))) return rc;
    if ((rc = tx_begin(st, 1, &t))) return rc;
    if ((rc = work_ctx(st)) || (rc = put_tx(&t, name, tokens, n, &r))) {
        tx_abort(&t);
        return rc;
    }
    if ((rc = tx_commit(&t))) return rc;
    r.seconds = skv_now() - t0;
    if (rep) *rep = r;
    return SKV_OK;
}

/* ---- get ---------------------------------------------------------------- */

static int get_tx(tx *t, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap, size_t *n_out,
                  skv_store_get_report *r, ses_rec *sr)
{
    skv_store *st = t->st;
    skv_trie_path p;
    int rc = ses_get(t, name, sr);
    if (rc == 1) return set_err(st, SKV_ERR_INVALID_ARG, "no session named '%s'", name);
    if (rc) return rc;
    if ((rc = skv_trie_path_to(&t->io, sr->end, &p))) return trie_err(st, rc, "session path");
    if (p.matched != sr->n_tokens) {
        rc = set_err(st, SKV_ERR_FORMAT, "session '%s': path of %u tokens, record says %u", name, p.matched,
                     sr->n_tokens);
        goto out;
    }
    if (n_out) *n_out = p.matched;
    if (p.matched > cap || p.matched > (uint32_t)skv_ctx_n_ctx(ctx)) {
        rc = set_err(st, SKV_ERR_RANGE, "session '%s' has %u tokens: buffer %zu / context %d too small", name,
                     p.matched, cap, skv_ctx_n_ctx(ctx));
        goto out;
    }
    for (size_t i = 0, k = 0; i < p.n; i++)
        for (uint32_t j = 0; j < p.nodes[i].len; j++) tokens[k++] = p.nodes[i].tokens[j];
    uint32_t l = loadable(&p, p.matched);
    double t0 = skv_now();
    if ((rc = load_prefix(t, &p, l, ctx))) goto out;
    double t1 = skv_now();
    if (p.matched > l && (rc = skv_prefill(ctx, tokens + l, p.matched - l, SKV_LOGITS_NONE, NULL))) {
        rc = set_err(st, rc, "prefill: %s", skv_ctx_last_error(ctx));
        goto out;
    }
    double t2 = skv_now();
    *r = (skv_store_get_report){.n_tokens = p.matched, .n_loaded = l, .n_computed = p.matched - l,
                                .load_seconds = t1 - t0, .compute_seconds = t2 - t1};
    if (flags & SKV_STORE_VERIFY) {
        uint8_t d[16];
        if ((rc = skv_ctx_kv_digest(ctx, (int)p.matched, d))) goto out;
        if (memcmp(d, sr->digest, 16) != 0) {
            rc = set_err(st, SKV_ERR_MISMATCH, "session '%s': restored KV digest differs from the stored one", name);
            goto out;
        }
        r->verified = 1;
    }
out:
    skv_trie_path_free(&p);
    return rc;
}

/* Records the access (hits, clock) and the measured speeds, and lets the placement policy
 * promote nodes of the session's path now that ctx holds its whole KV (the session's
 * tokens never change, so the KV fits whatever splits happened meanwhile): a short write
 * transaction after the read. */
static int touch(skv_store *st, const char *name, const ses_rec *seen, skv_store_get_report *r, skv_ctx *ctx)
{
    tx t;
    ses_rec now;
    skv_trie_path p;
    uint32_t n_dem = 0;
    int rc = tx_begin(st, 1, &t);
    if (rc) return rc;
    if (ses_get(&t, name, &now) != 0 || now.end != seen->end) { /* removed meanwhile */
        tx_abort(&t);
        return SKV_OK;
    }
    if ((rc = skv_trie_touch(&t.io, now.end, ++t.s.clock)) || (rc = skv_trie_path_to(&t.io, now.end, &p))) {
        tx_abort(&t);
        return trie_err(st, rc, "touch");
    }
    if (r->n_loaded >= 16 && r->load_seconds > 0)
        t.s.load_bps = 0.5 * t.s.load_bps +
                       0.5 * (double)r->n_loaded * (double)pos_floats(st) * 4.0 * t.s.comp_ratio / r->load_seconds;
    if (r->n_computed >= 16 && r->compute_seconds > 0)
        t.s.prefill_tps = 0.5 * t.s.prefill_tps + 0.5 * (double)r->n_computed / r->compute_seconds;
    rc = place(&t, &p, ctx, &r->n_materialised, &n_dem);
    skv_trie_path_free(&p);
    if (rc) {
        tx_abort(&t);
        return rc;
    }
    return tx_commit(&t);
}

int skv_store_get(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap,
                  size_t *n_tokens, skv_store_get_report *rep)
{
    skv_store_get_report r = {0};
    ses_rec sr;
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!ctx || !tokens || skv_ctx_model(ctx) != st->model)
        return set_err(st, SKV_ERR_INVALID_ARG, "skv_store_get needs a context of the store's model and a buffer");
    if ((rc = check_name(st, name)) || (rc = tx_begin(st, 0, &t))) return rc;
    rc = get_tx(&t, name, ctx, flags, tokens, cap, n_tokens, &r, &sr);
    tx_abort(&t);
    if (!rc && !st->readonly) rc = touch(st, name, &sr, &r, ctx);
    if (!rc && rep) *rep = r;
    return rc;
}

/* ---- match, remove, list ------------------------------------------------ */

int skv_store_match(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r)
{
    skv_trie_path p;
    tx t;
    int rc;
    if (!st || !r || (n && !tokens)) return st ? set_err(st, SKV_ERR_INVALID_ARG, "match: bad arguments") : SKV_ERR_INVALID_ARG;
    if ((rc = tx_begin(st, 0, &t))) return rc;
    rc = skv_trie_match(&t.io, tokens, n, &p);
    if (!rc) {
        uint32_t l = loadable(&p, p.matched);
        *r = (skv_store_match_result){.n_matched = p.matched, .bits = p.bits, .n_load = l, .n_compute = p.matched - l};
        skv_trie_path_free(&p);
    }
    tx_abort(&t);
    return rc ? trie_err(st, rc, "lookup") : SKV_OK;
}

int skv_store_remove(skv_store *st, const char *name)
{
    ses_rec sr;
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = check_name(st, name)) || (rc = tx_begin(st, 1, &t))) return rc;
    if ((rc = ses_get(&t, name, &sr)) == 1) rc = set_err(st, SKV_ERR_INVALID_ARG, "no session named '%s'", name);
    if (!rc && (rc = skv_trie_remove(&t.io, sr.end))) rc = trie_err(st, rc, "remove");
    if (!rc) {
        MDB_val k = name_key(name);
        if ((rc = mdb_del(t.txn, st->sessions, &k, NULL))) rc = lmdb_err(st, rc, "delete session");
    }
    if (rc) {
        tx_abort(&t);
        return rc;
    }
    return tx_commit(&t);
}

int skv_store_list(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user)
{
    MDB_cursor *cur;
    MDB_val k, v;
    tx t;
    char name[256];
    int rc, r = SKV_OK;
    if (!st || !cb) return SKV_ERR_INVALID_ARG;
    if ((rc = tx_begin(st, 0, &t))) return rc;
    if ((rc = mdb_cursor_open(t.txn, st->sessions, &cur))) {
        tx_abort(&t);
        return lmdb_err(st, rc, "cursor");
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ses_rec sr;
        if (k.mv_size < 1 || k.mv_size > 255 || ses_decode(&v, &sr)) {
            r = set_err(st, SKV_ERR_FORMAT, "session record damaged");
            break;
        }
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = 0;
        skv_store_session_info si = {.name = name, .n_tokens = sr.n_tokens, .put_time = sr.put_time};
        memcpy(si.digest, sr.digest, 16);
        r = cb(user, &si) ? 1 : SKV_OK;
    }
    mdb_cursor_close(cur);
    tx_abort(&t);
    if (rc && rc != MDB_NOTFOUND) return lmdb_err(st, rc, "list");
    return r < 0 ? r : SKV_OK;
}

/* ---- stats and gc ------------------------------------------------------- */

static int scan_nodes(tx *t, skv_store_stats *s)
{
    MDB_cursor *cur;
    MDB_val k, v;
    char e[128];
    int rc = mdb_cursor_open(t->txn, t->st->nodes, &cur), r = SKV_OK;
    if (rc) return lmdb_err(t->st, rc, "cursor");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        skv_trie_node nd;
        if ((r = skv_trie_node_decode(v.mv_data, v.mv_size, &nd, e, sizeof e))) {
            r = set_err(t->st, r, "%s", e);
            break;
        }
        s->n_nodes++;
        s->unique_positions += nd.len;
        for (uint32_t i = 0; i < nd.len; i++) s->token_floor_bits += nd.surprisal[i];
        if (nd.flags & SKV_TRIE_MAT) {
            s->mat_nodes++;
            s->mat_positions += nd.len;
            s->mat_bytes += nd.kv_bytes;
        }
        skv_trie_node_clear(&nd);
    }
    mdb_cursor_close(cur);
    if (!r && rc && rc != MDB_NOTFOUND) r = lmdb_err(t->st, rc, "scan nodes");
    return r;
}

static int sum_session(void *user, const skv_store_session_info *si)
{
    skv_store_stats *s = user;
    s->n_sessions++;
    s->session_tokens += si->n_tokens;
    return 0;
}

/* Pages on LMDB's free list (reusable, so not "in use"): each record of the free
 * database (dbi 0) is a page-number list whose first word is its length. */
static uint64_t free_pages(tx *t)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint64_t n = 0;
    if (mdb_cursor_open(t->txn, 0, &cur)) return 0;
    while (!mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (v.mv_size >= sizeof(size_t)) {
            size_t cnt;
            memcpy(&cnt, v.mv_data, sizeof cnt);
            n += cnt;
        }
    mdb_cursor_close(cur);
    return n;
}

int skv_store_get_stats(skv_store *st, skv_store_stats *s)
{
    MDB_envinfo ei;
    MDB_stat ms;
    tx t;
    double f16 = 0, tq = 0;
    int rc;
    if (!st || !s) return SKV_ERR_INVALID_ARG;
    memset(s, 0, sizeof *s);
    if ((rc = skv_store_list(st, sum_session, s))) return rc;
    if ((rc = tx_begin(st, 0, &t))) return rc;
    rc = scan_nodes(&t, s);
    uint64_t unused = free_pages(&t);
    mdb_env_info(st->env, &ei);
    mdb_env_stat(st->env, &ms);
    tx_abort(&t);
    if (rc) return rc;
    snprintf(s->model_name, sizeof s->model_name, "%s", st->info.name);
    uint64_t pages = (uint64_t)ei.me_last_pgno + 1;
    s->disk_bytes = (pages > unused ? pages - unused : pages) * ms.ms_psize;
    s->dedup_ratio = s->unique_positions ? (double)s->session_tokens / (double)s->unique_positions : 0;
    s->bits_per_position = s->session_tokens ? (double)s->disk_bytes * 8.0 / (double)s->session_tokens : 0;
    skv_kv_position_bytes(st->model, "f16", &f16);
    skv_kv_position_bytes(st->model, "tq3.5", &tq);
    s->f16_bytes = f16 * (double)s->session_tokens;
    s->tq35_bytes = tq * (double)s->session_tokens;
    s->budget = t.s.budget;
    s->prefill_tps = t.s.prefill_tps;
    s->load_bps = t.s.load_bps;
    s->prior_weight = t.s.prior_weight;
    s->clock = t.s.clock;
    return SKV_OK;
}

int skv_store_gc(skv_store *st, skv_store_gc_report *r)
{
    skv_store_gc_report g = {0};
    mat_set m;
    char e[256];
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = tx_begin(st, 1, &t))) return rc;
    if ((rc = skv_trie_check(&t.io, e, sizeof e))) {
        tx_abort(&t);
        return set_err(st, rc == SKV_ERR_INTERNAL ? SKV_ERR_FORMAT : rc, "store check failed: %s", e);
    }
    if ((rc = mat_load(&t, &m))) {
        tx_abort(&t);
        return rc;
    }
    uint64_t before = m.total;
    rc = evict_to(&t, &m, t.s.budget, &g.n_demoted);
    g.mat_bytes = m.total;
    g.bytes_freed = before - m.total;
    free(m.c);
    if (rc) {
        tx_abort(&t);
        return rc;
    }
    if ((rc = tx_commit(&t))) return rc;
    if (r) *r = g;
    return SKV_OK;
}

/* ---- internal: model-free bulk insert (benchmarks) ----------------------- */

int skv_store__put_tokens(skv_store *st, size_t n_sessions, const char *const *names, const int32_t *const *tokens,
                          const size_t *lens, const float *const *surprisal)
{
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = tx_begin(st, 1, &t))) return rc;
    for (size_t i = 0; i < n_sessions && !rc; i++) {
        ses_rec sr = {.n_tokens = (uint32_t)lens[i], .put_time = (uint64_t)time(NULL)};
        uint8_t rec[SESSION_SIZE];
        if ((rc = check_name(st, names[i])) || (rc = check_tokens(st, tokens[i], lens[i]))) break;
        if ((rc = skv_trie_insert(&t.io, tokens[i], lens[i], surprisal[i], ++t.s.clock, &sr.end))) {
            rc = trie_err(st, rc, "insert");
            break;
        }
        ses_encode(&sr, rec);
        MDB_val k = name_key(names[i]), v = {SESSION_SIZE, rec};
        if ((rc = mdb_put(t.txn, st->sessions, &k, &v, MDB_NOOVERWRITE)))
            rc = rc == MDB_KEYEXIST ? set_err(st, SKV_ERR_INVALID_ARG, "session '%s' exists", names[i])
                                    : lmdb_err(st, rc, "write session");
    }
    if (rc) {
        tx_abort(&t);
        return rc;
    }
    return tx_commit(&t);
}
