/* The store's KV blobs (a node's span of materialised KV, byte-shuffled f32 under zstd,
 * checksummed: layout in store.c) and the trie's storage (skv_trie_io) over the nodes,
 * children and kv tables of one backend transaction (backend.h). Every node write also
 * updates the placement index (store_policy.c), so the policy never rescans the trie. */
#include <stdlib.h>
#include "core/fpguard.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "core/shuffle.h"
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

/* A blob's decoding goes through buffers the handle keeps: its byte planes (zstd's output)
 * and, for a restore, the floats they unshuffle to (copied into the context right after).
 * Fresh buffers faulted their pages in every time: a restore of a 457-position session
 * allocated 1.8 MB for each, and with every longer conversation malloc mapped new memory
 * again (glibc maps what is larger than the largest block freed so far): after a restart
 * zstd and the unshuffle took 2.2 ms where 0.7 with warm buffers. One buffer of each kind,
 * of up to PLANES_KEEP bytes, taken by one thread at a time (another allocates its own
 * meanwhile), grown with an eighth more room (a conversation grows by a few positions a
 * turn: 57 positions of a 457-position one), freed at close. */
#define PLANES_KEEP (32u << 20)

enum { KEEP_PLANES, KEEP_FLOATS, KEEP_N };

struct store_planes {
    pthread_mutex_t lock;
    struct { uint8_t *buf; size_t cap; int busy; } b[KEEP_N];
};

static pthread_mutex_t g_planes_make = PTHREAD_MUTEX_INITIALIZER;

void store_kv_free(skv_store *st)
{
    if (!st->planes) return;
    for (int i = 0; i < KEEP_N; i++) free(st->planes->b[i].buf);
    pthread_mutex_destroy(&st->planes->lock);
    free(st->planes);
    st->planes = NULL;
}

/* raw bytes: the kept buffer `which` (grown) when free and small enough, else a fresh one. */
static uint8_t *planes_take(skv_store *st, size_t raw, int which)
{
    struct store_planes *k;
    pthread_mutex_lock(&g_planes_make);
    if (!st->planes && (st->planes = calloc(1, sizeof *st->planes)) && pthread_mutex_init(&st->planes->lock, NULL)) {
        free(st->planes);
        st->planes = NULL;
    }
    k = st->planes;
    pthread_mutex_unlock(&g_planes_make);
    if (!k || raw > PLANES_KEEP) return malloc(raw ? raw : 1);
    pthread_mutex_lock(&k->lock);
    uint8_t *b = NULL;
    if (!k->b[which].busy) {
        if (k->b[which].cap < raw) {
            size_t cap = raw + raw / 8 < PLANES_KEEP ? raw + raw / 8 : PLANES_KEEP;
            free(k->b[which].buf);
            k->b[which].cap = (k->b[which].buf = malloc(cap)) ? cap : 0;
        }
        if (k->b[which].cap >= raw) b = k->b[which].buf, k->b[which].busy = 1;
    }
    pthread_mutex_unlock(&k->lock);
    return b ? b : malloc(raw ? raw : 1);
}

/* Gives back what planes_take returned (a kept buffer, or frees a fresh one). */
static void planes_give(skv_store *st, void *b)
{
    struct store_planes *k = st->planes;
    if (k && b) {
        pthread_mutex_lock(&k->lock);
        int kept = 0;
        for (int i = 0; i < KEEP_N; i++)
            if (b == k->b[i].buf) k->b[i].busy = 0, kept = 1;
        pthread_mutex_unlock(&k->lock);
        if (kept) return;
    }
    free(b);
}

/* TB_KV key: u64 BE id | u32 BE len. */
static void blob_key(uint8_t key[12], uint64_t id, uint32_t len)
{
    be64(key, id);
    be32(key + 8, len);
}

static int blob_encode(tx *t, const float *kv, uint32_t len, uint8_t **out, size_t *n)
{
    skv_store *st = t->st;
    size_t nf = (size_t)len * store_pos_floats(st), raw = nf * 4, cap = BLOB_HDR + ZSTD_compressBound(raw);
    uint8_t *sh = planes_take(st, raw, KEEP_PLANES), *b = malloc(cap);
    int rc = SKV_OK;
    if (!sh || !b) rc = store_err(st, SKV_ERR_NOMEM, "out of memory");
    if (!rc) {
        skv_shuffle4((const uint8_t *)kv, sh, nf, 0); /* byte planes: they compress */
        size_t z = ZSTD_compress(b + BLOB_HDR, cap - BLOB_HDR, sh, raw, ZSTD_KV_LEVEL);
        if (ZSTD_isError(z)) rc = store_err(st, SKV_ERR_INTERNAL, "zstd: %s", ZSTD_getErrorName(z));
        skv_wr32(b, KV_MAGIC);
        skv_wr32(b + 4, len);
        skv_wr64(b + 8, XXH3_64bits(kv, raw));
        *n = BLOB_HDR + z;
    }
    planes_give(st, sh);
    if (rc) free(b);
    else *out = b;
    return rc;
}

int store_blob_put(tx *t, uint64_t id, const float *kv, uint32_t len, uint64_t *bytes)
{
    uint8_t *b, key[12];
    size_t n = 0;
    int rc = blob_encode(t, kv, len, &b, &n);
    if (rc) return rc;
    blob_key(key, id, len);
    rc = store_put(t, TB_KV, key, 12, b, n);
    free(b);
    *bytes = n;
    size_t raw = (size_t)len * store_pos_floats(t->st) * 4;
    t->s.comp_ratio = 0.8 * t->s.comp_ratio + 0.2 * ((double)n / (double)(raw ? raw : 1));
    if (t->s.comp_ratio > STORE_MAX_COMP_RATIO) t->s.comp_ratio = STORE_MAX_COMP_RATIO; /* what the reader accepts */
    return rc;
}

/* Decodes and checks a blob of len positions into a malloc'ed array. */
/* kept: the floats in the handle's kept buffer (give back with store_blob_give), else
 * malloc'ed (free). */
static int blob_decode(tx *t, uint64_t id, uint32_t len, const uint8_t *p, size_t n, int kept, float **out)
{
    skv_store *st = t->st;
    size_t nf = (size_t)len * store_pos_floats(st), raw = nf * 4;
    if (n < BLOB_HDR || skv_rd32(p) != KV_MAGIC || skv_rd32(p + 4) != len ||
        ZSTD_getFrameContentSize(p + BLOB_HDR, n - BLOB_HDR) != raw)
        return store_err(st, SKV_ERR_FORMAT, "KV of node %llu: bad blob header", (unsigned long long)id);
    uint8_t *sh = planes_take(st, raw, KEEP_PLANES);
    float *kv = kept ? (float *)(void *)planes_take(st, raw, KEEP_FLOATS) : malloc(raw ? raw : 1);
    if (!sh || !kv) {
        planes_give(st, sh);
        planes_give(st, kv);
        return store_err(st, SKV_ERR_NOMEM, "out of memory");
    }
    size_t d = ZSTD_decompress(sh, raw, p + BLOB_HDR, n - BLOB_HDR);
    if (!ZSTD_isError(d) && d == raw) skv_shuffle4(sh, (uint8_t *)kv, nf, 1);
    planes_give(st, sh);
    if (ZSTD_isError(d) || d != raw || XXH3_64bits(kv, raw) != skv_rd64(p + 8)) {
        planes_give(st, kv);
        return store_err(st, SKV_ERR_FORMAT, "KV of node %llu does not decode (damaged)", (unsigned long long)id);
    }
    *out = kv;
    return SKV_OK;
}

static int blob_get(tx *t, uint64_t id, uint32_t len, int kept, float **out)
{
    uint8_t key[12];
    const uint8_t *p;
    size_t n;
    blob_key(key, id, len);
    int rc = store_get(t, TB_KV, key, 12, &p, &n);
    if (rc == 1 && t->st->be->evicts) {
        t->miss[0]++;
        return 1;
    }
    if (rc == 1)
        return store_err(t->st, SKV_ERR_FORMAT, "node %llu is marked materialised but has no KV",
                         (unsigned long long)id);
    return rc ? rc : blob_decode(t, id, len, p, n, kept, out);
}

/* Loads node id's KV (len positions) into a malloc'ed array. A blob the backend may have
 * evicted (Redis) is a miss (1, counted); in LMDB it is damage. */
int store_blob_get(tx *t, uint64_t id, uint32_t len, float **out)
{
    return blob_get(t, id, len, 0, out);
}

int store_blob_get_kept(tx *t, uint64_t id, uint32_t len, float **out)
{
    return blob_get(t, id, len, 1, out);
}

void store_blob_give(skv_store *st, float *kv)
{
    planes_give(st, kv);
}

int store_blob_del(tx *t, uint64_t id, uint32_t len)
{
    uint8_t key[12];
    blob_key(key, id, len);
    return store_del(t, TB_KV, key, 12);
}

/* ---- trie storage ------------------------------------------------------- */

int store_io_get_node(void *u, uint64_t id, skv_trie_node *out)
{
    tx *t = u;
    uint8_t key[8];
    const uint8_t *v;
    size_t n;
    be64(key, id);
    memset(out, 0, sizeof *out); /* safe to clear whatever happens below */
    int rc = store_get(t, TB_NODES, key, 8, &v, &n);
    if (rc) return rc;
    if ((rc = store_node_decode(t, v, n, out))) {
        char e[420];
        snprintf(e, sizeof e, "%s", skv_errbox_get(t->st->err));
        return store_err(t->st, rc, "node %llu: %s", (unsigned long long)id, e);
    }
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
    uint8_t key[8], *buf;
    size_t sz;
    int rc = store_node_encode(t, n, &buf, &sz); /* its tier's record (store_tier.c) */
    if (rc) return rc;
    be64(key, n->id);
    rc = store_put(t, TB_NODES, key, 8, buf, sz);
    free(buf);
    return rc ? rc : store_mat_note(t, n);
}

typedef struct scan_nodes {
    tx *t;
    int (*fn)(void *u, const skv_trie_node *nd);
    void *u;
} scan_nodes;

static int scan_node(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    scan_nodes *sn = u;
    skv_trie_node nd;
    (void)k;
    (void)kn;
    int r = store_node_decode(sn->t, v, vn, &nd);
    if (r) return r;
    r = sn->fn(sn->u, &nd);
    skv_trie_node_clear(&nd);
    return r;
}

int store_scan_nodes(tx *t, int (*fn)(void *u, const skv_trie_node *nd), void *u)
{
    scan_nodes sn = {t, fn, u};
    return store_scan(t, TB_NODES, NULL, 0, scan_node, &sn);
}

static int io_del_node(void *u, uint64_t id)
{
    tx *t = u;
    uint8_t key[8];
    be64(key, id);
    int rc = store_del(t, TB_NODES, key, 8);
    return rc ? rc : store_mat_forget(t, id);
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
    const uint8_t *v;
    size_t n;
    child_key(key, parent, tok);
    int rc = store_get(t, TB_CHILDREN, key, 12, &v, &n);
    if (rc) return rc;
    if (n != 8) return store_err(t->st, SKV_ERR_FORMAT, "child record of %zu bytes", n);
    *child = skv_rd64(v);
    if (t->st->be->evicts) { /* the child's record may have been evicted: then the edge is gone */
        uint8_t nk[8];
        be64(nk, *child);
        if ((rc = store_get(t, TB_NODES, nk, 8, &v, &n)) == 1) t->miss[1]++;
    }
    return rc;
}

static int io_put_child(void *u, uint64_t parent, int32_t tok, uint64_t child)
{
    uint8_t key[12], val[8];
    child_key(key, parent, tok);
    skv_wr64(val, child);
    return store_put(u, TB_CHILDREN, key, 12, val, 8);
}

static int io_del_child(void *u, uint64_t parent, int32_t tok)
{
    uint8_t key[12];
    child_key(key, parent, tok);
    return store_del(u, TB_CHILDREN, key, 12);
}

typedef struct child_scan {
    tx *t;
    int (*cb)(void *, int32_t, uint64_t);
    void *cu;
} child_scan;

static int child_rec(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    child_scan *cs = u;
    if (kn != 12 || vn != 8) return store_err(cs->t->st, SKV_ERR_FORMAT, "child record damaged");
    return cs->cb(cs->cu, (int32_t)(rbe64(k + 4) & 0xffffffffu), skv_rd64(v));
}

static int io_children(void *u, uint64_t parent, int (*cb)(void *, int32_t, uint64_t), void *cu)
{
    child_scan cs = {u, cb, cu};
    uint8_t key[8];
    be64(key, parent);
    return store_scan(u, TB_CHILDREN, key, 8, child_rec, &cs);
}

static int io_new_id(void *u, uint64_t *id)
{
    tx *t = u;
    return t->st->be->ops->new_id(t->bt, &t->s.next_id, id);
}

static int io_kv_split(void *u, skv_trie_node *up, skv_trie_node *low, uint32_t k)
{
    tx *t = u;
    float *all, *a = NULL, *b = NULL;
    uint32_t len = k + low->len;
    if (!(low->flags & SKV_TRIE_MAT)) return SKV_OK;
    int rc = store_blob_get(t, low->id, len, &all);
    if (rc == 1) { /* evicted: both parts are token-only now */
        up->flags &= ~(uint32_t)SKV_TRIE_MAT;
        low->flags &= ~(uint32_t)SKV_TRIE_MAT;
        up->kv_bytes = low->kv_bytes = 0;
        return SKV_OK;
    }
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
    if (!rc) rc = store_blob_del(t, low->id, len);
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
        if ((rc = store_blob_del(t, up->id, up->len))) return rc;
        return store_blob_del(t, m->id, m->len - up->len);
    }
    if ((rc = store_blob_get(t, up->id, up->len, &a)) || (rc = store_blob_get(t, m->id, lb, &b))) {
        if (rc == 1) { /* a part was evicted: the merged node is token-only */
            m->flags &= ~(uint32_t)SKV_TRIE_MAT;
            m->kv_bytes = 0;
            if (!(rc = store_blob_del(t, up->id, up->len))) rc = store_blob_del(t, m->id, lb);
        }
        goto out;
    }
    if (!(c = malloc((size_t)m->len * store_pos_floats(t->st) * sizeof *c))) {
        rc = store_err(t->st, SKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    store_kv_copy(t->st, a, up->len, 0, up->len, c, m->len, 0);
    store_kv_copy(t->st, b, lb, 0, lb, c, m->len, up->len);
    if (!(rc = store_blob_put(t, m->id, c, m->len, &m->kv_bytes)) && !(rc = store_blob_del(t, up->id, up->len)))
        rc = store_blob_del(t, m->id, lb);
out:
    free(a);
    free(b);
    free(c);
    return rc;
}

static int io_kv_drop(void *u, const skv_trie_node *n)
{
    return (n->flags & SKV_TRIE_MAT) ? store_blob_del(u, n->id, n->len) : SKV_OK;
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
