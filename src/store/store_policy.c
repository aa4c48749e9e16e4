/* The placement policy (docs/store.md): which trie nodes keep their span's KV
 * materialised. Each is scored by the seconds it saves per byte (store_mat_rank); new path
 * nodes are materialised while the budget allows or lower-scoring leaves can be demoted
 * to make room; gc fills up to the budget. The index of the materialised set, updated by
 * every node write, is store_matindex.c's (below store_kv.c, which calls it). */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store/store_int.h"
static int build_visit(void *u, const skv_trie_node *nd) { return store_mat_note(u, nd); }

int store_mat_build(tx *t)
{
    mat_meta mm = {0, t->s.prefill_tps, t->s.load_bps};
    int rc = store_mat_meta_set(t, &mm);
    return rc ? rc : store_scan_nodes(t, build_visit, t);
}

static int drifted(double a, double b) { return a > 1.25 * b || b > 1.25 * a; }

/* Recomputes every rank when the measured speeds moved away from those of the index. */
static int mat_refresh(tx *t)
{
    mat_meta mm;
    store_ids l = {0};
    int rc = store_mat_meta_get(t, &mm);
    if (rc || (!drifted(mm.prefill_tps, t->s.prefill_tps) && !drifted(mm.load_bps, t->s.load_bps))) return rc;
    mm.prefill_tps = t->s.prefill_tps;
    mm.load_bps = t->s.load_bps;
    if ((rc = store_mat_meta_set(t, &mm)) || (rc = store_mat_ids(t, &l))) goto out;
    for (size_t i = 0; !rc && i < l.n; i++) {
        skv_trie_node nd;
        if ((rc = store_io_get_node(t, l.id[i], &nd)) == 1) rc = store_mat_forget(t, l.id[i]);
        else if (!rc) {
            rc = store_mat_note(t, &nd);
            skv_trie_node_clear(&nd);
        }
    }
out:
    free(l.id);
    return rc;
}

/* ---- leaves and demotion ------------------------------------------------- */

typedef struct leaf_q {
    tx *t;
    int found; /* a materialised child was seen */
} leaf_q;

static int child_mat(void *u, int32_t tok, uint64_t child)
{
    leaf_q *q = u;
    mat_ent e;
    (void)tok;
    int rc = store_mat_ent_get(q->t, child, &e);
    if (rc < 0) return rc;
    q->found = rc == 0;
    return q->found;
}

/* 1 when no child of id is materialised. */
static int is_leaf(tx *t, uint64_t id)
{
    leaf_q q = {t, 0};
    int rc = t->io.children(t, id, child_mat, &q);
    return rc < 0 ? rc : !q.found;
}

/* A walk over the index from its low end collecting leaves (off the path, ranked below
 * `below`) until `need` bytes are found (need 0: the first one). */
typedef struct leaf_walk {
    tx *t;
    const skv_trie_path *path;
    double below;
    uint64_t need, freed;
    uint64_t *ids;
    size_t n, cap;
} leaf_walk;

static int on_path(const skv_trie_path *p, uint64_t id)
{
    for (size_t i = 0; p && i < p->n; i++)
        if (p->nodes[i].id == id) return 1;
    return 0;
}

static int walk_leaf(void *u, uint64_t id, uint64_t parent, uint64_t bytes)
{
    leaf_walk *w = u;
    mat_ent e;
    (void)parent;
    if (on_path(w->path, id)) return 0;
    int rc = store_mat_ent_get(w->t, id, &e);
    if (rc) return rc < 0 ? rc : 0;
    if (store_mat_bits_rank(e.rank) >= w->below) return 1; /* everything further ranks higher */
    if ((rc = is_leaf(w->t, id)) <= 0) return rc;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        uint64_t *nb = realloc(w->ids, cap * sizeof *nb);
        if (!nb) return store_err(w->t->st, SKV_ERR_NOMEM, "out of memory");
        w->ids = nb;
        w->cap = cap;
    }
    w->ids[w->n++] = id;
    w->freed += bytes;
    return w->freed >= w->need ? 1 : 0;
}

/* Demotes node id to token-only: drops its KV, clears the flag (the index follows). */
static int demote(tx *t, uint64_t id)
{
    skv_trie_node nd;
    int rc = store_io_get_node(t, id, &nd);
    if (rc == 1) return store_mat_forget(t, id); /* evicted node (Redis): forget its entry */
    if (rc) return rc;
    rc = (nd.flags & SKV_TRIE_MAT) ? store_blob_del(t, nd.id, nd.len) : SKV_OK;
    nd.flags &= ~(uint32_t)SKV_TRIE_MAT;
    nd.kv_bytes = 0;
    if (!rc) rc = store_io_put_node(t, &nd);
    skv_trie_node_clear(&nd);
    return rc;
}

static int walk(tx *t, leaf_walk *w)
{
    int rc = store_mat_each(t, walk_leaf, w);
    return rc < 0 ? rc : SKV_OK;
}

int store_evict_to(tx *t, uint64_t budget, uint32_t *n_demoted)
{
    uint64_t total;
    int rc = mat_refresh(t);
    while (!rc && !(rc = store_mat_total(t, &total)) && total > budget) {
        leaf_walk w = {.t = t, .below = INFINITY, .need = 0};
        if ((rc = walk(t, &w)) || w.n == 0) {
            free(w.ids);
            break;
        }
        rc = demote(t, w.ids[0]);
        free(w.ids);
        if (rc) break;
        (*n_demoted)++;
    }
    return rc;
}

/* Frees `need` bytes by demoting leaves off the path ranked below `rank`, if that many
 * can be found (1; a leaf a demotion would expose is not counted: conservative), else 0. */
static int make_room(tx *t, const skv_trie_path *p, uint64_t need, double rank, uint32_t *n_demoted)
{
    leaf_walk w = {.t = t, .path = p, .below = rank, .need = need};
    int rc = walk(t, &w);
    if (!rc && w.freed >= need)
        for (size_t i = 0; !rc && i < w.n; i++)
            if (!(rc = demote(t, w.ids[i]))) (*n_demoted)++;
    free(w.ids);
    return rc ? rc : w.freed >= need;
}

/* ---- materialising ------------------------------------------------------- */

static double est_bytes(const tx *t, uint32_t len)
{
    return (double)len * (double)store_pos_floats(t->st) * 4.0 * t->s.comp_ratio + BLOB_HDR;
}

/* Stores node nd's span of KV (read from ctx) and marks it materialised. */
static int materialise(tx *t, const skv_trie_node *nd, skv_ctx *ctx, uint32_t *n_mat)
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
            (*n_mat)++;
        }
        skv_trie_node_clear(&up);
    }
    free(kv);
    return rc;
}

/* Materialises path nodes (root first) from ctx (which holds the whole path's KV), while
 * the budget allows or lower-ranked leaves can make room; the first that cannot be placed
 * ends the pass (nothing below it could be loaded). */
int store_place(tx *t, const skv_trie_path *p, skv_ctx *ctx, uint32_t *n_mat, uint32_t *n_dem)
{
    int rc = mat_refresh(t);
    for (size_t i = 0; !rc && i < p->n; i++) {
        const skv_trie_node *nd = &p->nodes[i];
        mat_meta mm;
        if (nd->flags & SKV_TRIE_MAT) continue;
        double est = est_bytes(t, nd->len);
        if ((rc = store_mat_meta_get(t, &mm))) break;
        double over = (double)mm.total + est - (double)t->s.budget; /* in double: est may be huge */
        uint64_t need = over <= 0 ? 0 : over >= 0x1p63 ? UINT64_MAX : (uint64_t)over;
        if (need && (rc = make_room(t, p, need, store_mat_rank(&t->s, &mm, nd, est), n_dem)) <= 0) break; /* 0: no room */
        rc = materialise(t, nd, ctx, n_mat);
    }
    if (!rc) rc = store_evict_to(t, t->s.budget, n_dem); /* measured sizes may exceed the estimate */
    return rc;
}

/* ---- gc: filling up to the budget --------------------------------------- */

/* A token-only node gc may materialise; ready = its parent is materialised (or the root). */
typedef struct fill_cand {
    uint64_t id, parent;
    double rank, est;
    int ready, done;
} fill_cand;

typedef struct fill_set {
    tx *t;
    mat_meta mm;
    fill_cand *c;
    size_t n, cap;
} fill_set;

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

static int fill_visit(void *u, const skv_trie_node *nd)
{
    fill_set *f = u;
    mat_ent e;
    if (nd->flags & SKV_TRIE_MAT) return 0;
    fill_cand c = {.id = nd->id, .parent = nd->parent, .est = est_bytes(f->t, nd->len)};
    c.rank = store_mat_rank(&f->t->s, &f->mm, nd, c.est);
    int rc = nd->parent == SKV_TRIE_ROOT ? 0 : store_mat_ent_get(f->t, nd->parent, &e);
    if (rc < 0) return rc;
    c.ready = rc == 0;
    if (c.rank > 0 && fill_add(f, &c)) return store_err(f->t->st, SKV_ERR_NOMEM, "out of memory");
    return 0;
}

/* The ready candidate with the best rank that fits in `room` bytes, or -1. */
static long fill_best(const fill_set *f, double room)
{
    long best = -1;
    for (size_t i = 0; i < f->n; i++) {
        const fill_cand *c = &f->c[i];
        if (c->ready && !c->done && c->est <= room && (best < 0 || c->rank > f->c[best].rank)) best = (long)i;
    }
    return best;
}

/* Computes node id's span in st->work (its whole path from materialised KV and a prefill
 * of the span) and materialises it. */
static int fill_one(tx *t, uint64_t id, uint32_t *n_mat)
{
    skv_store *st = t->st;
    skv_trie_path p;
    uint32_t got = 0;
    int rc = skv_trie_path_to(&t->io, id, &p);
    if (rc) return store_trie_err(st, rc, "gc path");
    const skv_trie_node *nd = &p.nodes[p.n - 1];
    uint32_t p0 = nd->depth - nd->len;
    if (!(rc = store_load_prefix(t, &p, p0, st->work, &got)) && got < p0) /* a blob was evicted */
        rc = store_path_prefill(t, &p, got, p0, st->work);
    if (!rc && (rc = skv_ctx_prefill(st->work, nd->tokens, nd->len, SKV_LOGITS_NONE, NULL)))
        rc = store_err(st, rc, "prefill: %s", skv_ctx_last_error(st->work));
    if (!rc) rc = materialise(t, nd, st->work, n_mat);
    skv_trie_path_free(&p);
    return rc;
}

int store_fill_to(tx *t, uint64_t budget, uint32_t *n_mat, uint32_t *n_dem)
{
    fill_set f = {.t = t};
    uint64_t total;
    int rc = mat_refresh(t);
    if (!rc) rc = store_mat_meta_get(t, &f.mm);
    if (!rc) rc = store_scan_nodes(t, fill_visit, &f);
    while (!rc && !(rc = store_mat_total(t, &total)) && total < budget) {
        long i = fill_best(&f, (double)(budget - total));
        if (i < 0) break;
        f.c[i].done = 1;
        if ((rc = store_work_ctx(t->st)) || (rc = fill_one(t, f.c[i].id, n_mat))) break;
        if ((rc = store_mat_total(t, &total))) break;
        if (total > budget) { /* measured size above the estimate: trim, and stop there */
            rc = store_evict_to(t, budget, n_dem);
            break;
        }
        for (size_t j = 0; j < f.n; j++) f.c[j].ready |= f.c[j].parent == f.c[i].id;
    }
    free(f.c);
    return rc;
}
