/* The placement policy (docs/store.md): which trie nodes keep their span's KV
 * materialised. Each is scored by the seconds it saves per byte (expected reuse x
 * (recompute - load) / bytes); new path nodes are materialised while the budget allows or
 * lower-scoring leaves can be demoted to make room. */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

/* ---- placement policy --------------------------------------------------- */


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
int store_mat_load(tx *t, mat_set *m)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(t->txn, t->st->kv, &cur), r = SKV_OK;
    memset(m, 0, sizeof *m);
    if (rc) return store_lmdb_err(t->st, rc, "cursor");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        skv_trie_node nd;
        if (k.mv_size != 8) { r = store_err(t->st, SKV_ERR_FORMAT, "kv key damaged"); break; }
        uint64_t id = rbe64(k.mv_data);
        if ((r = store_io_get_node(t, id, &nd)) == 1) r = store_err(t->st, SKV_ERR_FORMAT, "KV of a missing node");
        if (r) break;
        cand c = {.id = id, .parent = nd.parent, .bytes = v.mv_size, .alive = 1};
        c.score = node_score(&t->s, &nd, (double)v.mv_size);
        skv_trie_node_clear(&nd);
        if (mat_add(m, &c)) r = store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    }
    mdb_cursor_close(cur);
    if (!r && rc && rc != MDB_NOTFOUND) r = store_lmdb_err(t->st, rc, "walk kv");
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
    int rc = store_io_get_node(t, m->c[i].id, &nd);
    if (rc == 1) rc = SKV_ERR_FORMAT;
    if (rc) return rc;
    nd.flags &= ~(uint32_t)SKV_TRIE_MAT;
    nd.kv_bytes = 0;
    if (!(rc = store_blob_del(t, nd.id))) rc = store_io_put_node(t, &nd);
    skv_trie_node_clear(&nd);
    m->c[i].alive = 0;
    m->total -= m->c[i].bytes;
    return rc;
}

int store_evict_to(tx *t, mat_set *m, uint64_t budget, uint32_t *n_demoted)
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
/* Stores node nd's span of KV (read from ctx) and marks it materialised. */
static int materialise(tx *t, mat_set *m, const skv_trie_node *nd, skv_ctx *ctx, uint32_t *n_mat)
{
    float *kv = malloc((size_t)nd->len * store_pos_floats(t->st) * sizeof *kv);
    skv_trie_node up;
    int rc;
    if (!kv) return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    rc = skv_ctx_kv_read(ctx, (int)(nd->depth - nd->len), (int)nd->len, kv);
    if (!rc && !(rc = skv_trie_node_copy(&up, nd))) {
        if (!(rc = store_blob_put(t, nd->id, kv, nd->len, &up.kv_bytes))) {
            up.flags |= SKV_TRIE_MAT;
            rc = store_io_put_node(t, &up);
            cand c = {.id = up.id, .parent = up.parent, .bytes = up.kv_bytes, .alive = 1, .on_path = 1,
                      .score = node_score(&t->s, &up, (double)up.kv_bytes)};
            if (!rc) rc = mat_add(m, &c);
            (*n_mat)++;
        }
        skv_trie_node_clear(&up);
    }
    free(kv);
    return rc;
}

int store_place(tx *t, const skv_trie_path *p, skv_ctx *ctx, uint32_t *n_mat, uint32_t *n_dem)
{
    mat_set m;
    int rc = store_mat_load(t, &m);
    if (rc) return rc;
    for (size_t i = 0; i < m.n; i++)
        for (size_t j = 0; j < p->n; j++) m.c[i].on_path |= m.c[i].id == p->nodes[j].id;
    for (size_t i = 0; !rc && i < p->n; i++) {
        const skv_trie_node *nd = &p->nodes[i];
        if (nd->flags & SKV_TRIE_MAT) continue;
        double est = (double)nd->len * (double)store_pos_floats(t->st) * 4.0 * t->s.comp_ratio + BLOB_HDR;
        double score = node_score(&t->s, nd, est);
        uint64_t need = m.total + (uint64_t)est > t->s.budget ? m.total + (uint64_t)est - t->s.budget : 0;
        if (need && (rc = make_room(t, &m, need, score, n_dem, 1)) <= 0) break; /* 0: no room */
        rc = materialise(t, &m, nd, ctx, n_mat);
    }
    if (!rc) rc = store_evict_to(t, &m, t->s.budget, n_dem); /* measured sizes may exceed the estimate */
    free(m.c);
    return rc;
}

/* ---- gc: filling up to the budget --------------------------------------- */

/* A token-only node gc may materialise; ready = its parent is materialised (or the root). */
typedef struct fill_cand {
    uint64_t id, parent;
    double score, est;
    int ready, done;
} fill_cand;

typedef struct fill_set {
    fill_cand *c;
    size_t n, cap;
} fill_set;

static double est_bytes(const tx *t, uint32_t len)
{
    return (double)len * (double)store_pos_floats(t->st) * 4.0 * t->s.comp_ratio + BLOB_HDR;
}

static int fill_add(fill_set *f, const fill_cand *c)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 64;
        fill_cand *nb = realloc(f->c, cap * sizeof *nb);
        if (!nb) return SKV_ERR_NOMEM;
        f->c = nb;
        f->cap = cap;
    }
    f->c[f->n++] = *c;
    return SKV_OK;
}

static int mat_has(const mat_set *m, uint64_t id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->c[i].alive && m->c[i].id == id) return 1;
    return 0;
}

typedef struct fill_scan {
    tx *t;
    const mat_set *m;
    fill_set *f;
} fill_scan;

static int fill_visit(void *u, const skv_trie_node *nd)
{
    fill_scan *fs = u;
    fill_cand c = {.id = nd->id, .parent = nd->parent, .est = est_bytes(fs->t, nd->len)};
    c.score = node_score(&fs->t->s, nd, c.est);
    c.ready = nd->parent == SKV_TRIE_ROOT || mat_has(fs->m, nd->parent);
    if (!(nd->flags & SKV_TRIE_MAT) && c.score > 0 && fill_add(fs->f, &c))
        return store_err(fs->t->st, SKV_ERR_NOMEM, "out of memory");
    return 0;
}

/* Every token-only node that would save time (score > 0). */
static int fill_load(tx *t, const mat_set *m, fill_set *f)
{
    fill_scan fs = {t, m, f};
    return store_scan_nodes(t, fill_visit, &fs);
}

/* The ready candidate with the best score that fits in `room` bytes, or -1. */
static long fill_best(const fill_set *f, double room)
{
    long best = -1;
    for (size_t i = 0; i < f->n; i++) {
        const fill_cand *c = &f->c[i];
        if (c->ready && !c->done && c->est <= room && (best < 0 || c->score > f->c[best].score)) best = (long)i;
    }
    return best;
}

/* Computes node id's span in st->work (its whole path from materialised KV and a prefill
 * of the span) and materialises it. */
static int fill_one(tx *t, mat_set *m, uint64_t id, uint32_t *n_mat)
{
    skv_store *st = t->st;
    skv_trie_path p;
    int rc = skv_trie_path_to(&t->io, id, &p);
    if (rc) return store_trie_err(st, rc, "gc path");
    const skv_trie_node *nd = &p.nodes[p.n - 1];
    uint32_t p0 = nd->depth - nd->len;
    if (!(rc = store_load_prefix(t, &p, p0, st->work)) &&
        (rc = skv_prefill(st->work, nd->tokens, nd->len, SKV_LOGITS_NONE, NULL)))
        rc = store_err(st, rc, "prefill: %s", skv_ctx_last_error(st->work));
    if (!rc) rc = materialise(t, m, nd, st->work, n_mat);
    skv_trie_path_free(&p);
    return rc;
}

int store_fill_to(tx *t, mat_set *m, uint64_t budget, uint32_t *n_mat, uint32_t *n_dem)
{
    fill_set f = {0};
    int rc = fill_load(t, m, &f);
    while (!rc && m->total < budget) {
        long i = fill_best(&f, (double)(budget - m->total));
        if (i < 0) break;
        f.c[i].done = 1;
        if ((rc = store_work_ctx(t->st)) || (rc = fill_one(t, m, f.c[i].id, n_mat))) break;
        if (m->total > budget) { /* measured size above the estimate: trim, and stop there */
            rc = store_evict_to(t, m, budget, n_dem);
            break;
        }
        for (size_t j = 0; j < f.n; j++) f.c[j].ready |= f.c[j].parent == f.c[i].id;
    }
    free(f.c);
    return rc;
}
