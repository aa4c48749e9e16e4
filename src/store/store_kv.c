/* The store's KV blobs (a node's span of materialised KV, byte-shuffled f32 under zstd,
 * checksummed: layout in store.c) and the trie's storage (skv_trie_io) over the nodes,
 * children and kv databases of one LMDB transaction. */
#include <stdlib.h>
#include "core/fpguard.h"
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "store/store_int.h"

/* ---- KV blobs ----------------------------------------------------------- */

size_t store_pos_floats(const skv_store *st) { return st->blocks * st->head_dim; }

void store_kv_copy(const skv_store *st, const float *src, size_t len, size_t p0, size_t n, float *dst, size_t dlen,
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

int store_blob_put(tx *t, uint64_t id, const float *kv, uint32_t len, uint64_t *bytes)
{
    skv_store *st = t->st;
    size_t nf = (size_t)len * store_pos_floats(st), raw = nf * 4, cap = BLOB_HDR + ZSTD_compressBound(raw);
    uint8_t *sh = malloc(raw), *out = malloc(cap), key[8];
    int rc = SKV_ERR_NOMEM;
    if (!sh || !out) goto done;
    shuffle4((const uint8_t *)kv, sh, nf, 0);
    size_t z = ZSTD_compress(out + BLOB_HDR, cap - BLOB_HDR, sh, raw, ZSTD_KV_LEVEL);
    if (ZSTD_isError(z)) { rc = store_err(st, SKV_ERR_INTERNAL, "zstd: %s", ZSTD_getErrorName(z)); goto done; }
    skv_wr32(out, KV_MAGIC);
    skv_wr32(out + 4, len);
    skv_wr64(out + 8, XXH3_64bits(kv, raw));
    be64(key, id);
    MDB_val k = {8, key}, v = {BLOB_HDR + z, out};
    int lr = mdb_put(t->txn, st->kv, &k, &v, 0);
    rc = lr ? store_lmdb_err(st, lr, "write KV") : SKV_OK;
    *bytes = BLOB_HDR + z;
    t->s.comp_ratio = 0.8 * t->s.comp_ratio + 0.2 * ((double)(BLOB_HDR + z) / (double)raw);
done:
    free(sh);
    free(out);
    return rc;
}

/* Loads node id's KV (len positions) into a malloc'ed array. */
int store_blob_get(tx *t, uint64_t id, uint32_t len, float **out)
{
    skv_store *st = t->st;
    uint8_t key[8];
    size_t nf = (size_t)len * store_pos_floats(st), raw = nf * 4;
    be64(key, id);
    MDB_val k = {8, key}, v;
    int rc = mdb_get(t->txn, st->kv, &k, &v);
    if (rc) return rc == MDB_NOTFOUND ? store_err(st, SKV_ERR_FORMAT, "node %llu is marked materialised but has no KV",
                                                (unsigned long long)id)
                                      : store_lmdb_err(st, rc, "read KV");
    const uint8_t *p = v.mv_data;
    if (v.mv_size < BLOB_HDR || skv_rd32(p) != KV_MAGIC || skv_rd32(p + 4) != len ||
        ZSTD_getFrameContentSize(p + BLOB_HDR, v.mv_size - BLOB_HDR) != raw)
        return store_err(st, SKV_ERR_FORMAT, "KV of node %llu: bad blob header", (unsigned long long)id);
    uint8_t *sh = malloc(raw ? raw : 1);
    float *kv = malloc(raw ? raw : 1);
    if (!sh || !kv) { free(sh); free(kv); return store_err(st, SKV_ERR_NOMEM, "out of memory"); }
    size_t d = ZSTD_decompress(sh, raw, p + BLOB_HDR, v.mv_size - BLOB_HDR);
    if (!ZSTD_isError(d) && d == raw) shuffle4(sh, (uint8_t *)kv, nf, 1);
    free(sh);
    if (ZSTD_isError(d) || d != raw || XXH3_64bits(kv, raw) != skv_rd64(p + 8)) {
        free(kv);
        return store_err(st, SKV_ERR_FORMAT, "KV of node %llu does not decode (damaged)", (unsigned long long)id);
    }
    *out = kv;
    return SKV_OK;
}

int store_blob_del(tx *t, uint64_t id)
{
    uint8_t key[8];
    be64(key, id);
    MDB_val k = {8, key};
    int rc = mdb_del(t->txn, t->st->kv, &k, NULL);
    return rc && rc != MDB_NOTFOUND ? store_lmdb_err(t->st, rc, "delete KV") : SKV_OK;
}

/* ---- trie storage over LMDB --------------------------------------------- */

int store_io_get_node(void *u, uint64_t id, skv_trie_node *out)
{
    tx *t = u;
    uint8_t key[8];
    char e[160];
    be64(key, id);
    MDB_val k = {8, key}, v;
    int rc = mdb_get(t->txn, t->st->nodes, &k, &v);
    if (rc == MDB_NOTFOUND) return 1;
    if (rc) return store_lmdb_err(t->st, rc, "read node");
    if ((rc = skv_trie_node_decode(v.mv_data, v.mv_size, out, e, sizeof e)))
        return store_err(t->st, rc, "node %llu: %s", (unsigned long long)id, e);
    if (out->id != id) {
        skv_trie_node_clear(out);
        return store_err(t->st, SKV_ERR_FORMAT, "node %llu: record names id %llu", (unsigned long long)id,
                       (unsigned long long)out->id);
    }
    return SKV_OK;
}

int store_io_put_node(void *u, const skv_trie_node *n)
{
    tx *t = u;
    uint8_t key[8];
    size_t sz = skv_trie_node_size(n->len);
    uint8_t *buf = malloc(sz);
    if (!buf) return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    skv_trie_node_encode(n, buf);
    be64(key, n->id);
    MDB_val k = {8, key}, v = {sz, buf};
    int rc = mdb_put(t->txn, t->st->nodes, &k, &v, 0);
    free(buf);
    return rc ? store_lmdb_err(t->st, rc, "write node") : SKV_OK;
}

int store_scan_nodes(tx *t, int (*fn)(void *u, const skv_trie_node *nd), void *u)
{
    MDB_cursor *cur;
    MDB_val k, v;
    char e[128];
    int rc = mdb_cursor_open(t->txn, t->st->nodes, &cur), r = SKV_OK;
    if (rc) return store_lmdb_err(t->st, rc, "cursor");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        skv_trie_node nd;
        if ((r = skv_trie_node_decode(v.mv_data, v.mv_size, &nd, e, sizeof e))) {
            r = store_err(t->st, r, "%s", e);
            break;
        }
        r = fn(u, &nd);
        skv_trie_node_clear(&nd);
    }
    mdb_cursor_close(cur);
    if (!r && rc && rc != MDB_NOTFOUND) r = store_lmdb_err(t->st, rc, "scan nodes");
    return r;
}

static int io_del_node(void *u, uint64_t id)
{
    tx *t = u;
    uint8_t key[8];
    be64(key, id);
    MDB_val k = {8, key};
    int rc = mdb_del(t->txn, t->st->nodes, &k, NULL);
    return rc ? store_lmdb_err(t->st, rc, "delete node") : SKV_OK;
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
    if (rc) return store_lmdb_err(t->st, rc, "read child");
    if (v.mv_size != 8) return store_err(t->st, SKV_ERR_FORMAT, "child record of %zu bytes", v.mv_size);
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
    return rc ? store_lmdb_err(t->st, rc, "write child") : SKV_OK;
}

static int io_del_child(void *u, uint64_t parent, int32_t tok)
{
    tx *t = u;
    uint8_t key[12];
    child_key(key, parent, tok);
    MDB_val k = {12, key};
    int rc = mdb_del(t->txn, t->st->children, &k, NULL);
    return rc ? store_lmdb_err(t->st, rc, "delete child") : SKV_OK;
}

static int io_children(void *u, uint64_t parent, int (*cb)(void *, int32_t, uint64_t), void *cu)
{
    tx *t = u;
    MDB_cursor *c;
    uint8_t key[12];
    int rc = mdb_cursor_open(t->txn, t->st->children, &c), r = 0;
    if (rc) return store_lmdb_err(t->st, rc, "cursor");
    child_key(key, parent, 0);
    MDB_val k = {12, key}, v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); !rc && !r; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const uint8_t *p = k.mv_data;
        if (k.mv_size != 12 || rbe64(p) != parent) break;
        if (v.mv_size != 8) { r = store_err(t->st, SKV_ERR_FORMAT, "child record damaged"); break; }
        r = cb(cu, (int32_t)(rbe64(p + 4) & 0xffffffffu), skv_rd64(v.mv_data));
    }
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND) return store_lmdb_err(t->st, rc, "walk children");
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
    int rc = store_blob_get(t, low->id, len, &all);
    if (rc) return rc;
    a = malloc((size_t)k * store_pos_floats(t->st) * sizeof *a);
    b = malloc((size_t)low->len * store_pos_floats(t->st) * sizeof *b);
    if (!a || !b) rc = store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    if (!rc) {
        store_kv_copy(t->st, all, len, 0, k, a, k, 0);
        store_kv_copy(t->st, all, len, k, low->len, b, low->len, 0);
        rc = store_blob_put(t, up->id, a, k, &up->kv_bytes);
    }
    if (!rc) rc = store_blob_put(t, low->id, b, low->len, &low->kv_bytes);
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
        if ((rc = store_blob_del(t, up->id))) return rc;
        return store_blob_del(t, m->id);
    }
    if ((rc = store_blob_get(t, up->id, up->len, &a)) || (rc = store_blob_get(t, m->id, lb, &b))) goto out;
    if (!(c = malloc((size_t)m->len * store_pos_floats(t->st) * sizeof *c))) {
        rc = store_err(t->st, SKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    store_kv_copy(t->st, a, up->len, 0, up->len, c, m->len, 0);
    store_kv_copy(t->st, b, lb, 0, lb, c, m->len, up->len);
    if (!(rc = store_blob_put(t, m->id, c, m->len, &m->kv_bytes))) rc = store_blob_del(t, up->id);
out:
    free(a);
    free(b);
    free(c);
    return rc;
}

static int io_kv_drop(void *u, const skv_trie_node *n)
{
    return (n->flags & SKV_TRIE_MAT) ? store_blob_del(u, n->id) : SKV_OK;
}

void store_io_init(tx *t)
{
    t->io = (skv_trie_io){
        .user = t,
        .get_node = store_io_get_node,
        .put_node = store_io_put_node,
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
}
