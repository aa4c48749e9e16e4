/* The placement index of the placement policy (store_policy.c, docs/store.md): which trie nodes keep their span's KV
 * materialised. Each is scored by the seconds it saves per byte (expected reuse x
 * (recompute - load) / bytes); new path nodes are materialised while the budget allows or
 * lower-scoring leaves can be demoted to make room.
 *
 * Incremental: the materialised set is an index kept up to date by every node write
 * (store_mat_note from store_io_put_node), never rebuilt by a scan:
 *
 *   TB_MAT     u64 BE id            -> u64 rank bits | u64 bytes | u64 parent   (24 bytes)
 *   TB_MATORD  u64 BE rank bits | id -> ""          (ascending: lowest rank first)
 *   meta "mat"                      -> u64 total bytes | f64 prefill_tps | f64 load_bps
 *                                      | u64 XXH3-64                            (32 bytes)
 *
 * rank = (hits + refcount + kappa 2^-d_T) x saved / bytes: the score without its common
 * denominator (clock + kappa), so ranks written at different clocks compare as the scores
 * would. saved uses the speeds recorded in "mat", not the live ones, so all ranks in the
 * index are computed alike; when the measured speeds drift more than 25% from those, the
 * ranks are recomputed (O(M), rare once the measurements settle). A node write costs
 * O(1) index updates; finding the lowest-ranked leaf walks the index from its low end,
 * O(k x fanout) for k interior nodes passed; a put places its path in O(depth x demotions)
 * instead of the former O(M^2) over M materialised nodes. */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store/store_int.h"

#define MAT_REC 24
#define MAT_META 32

double store_mat_rank(const store_state *s, const mat_meta *mm, const skv_trie_node *nd, double bytes)
{
    double prior = exp2(-nd->d_end);
    double reuse = (double)nd->hits + (double)nd->refcount + s->prior_weight * prior;
    double saved = (double)nd->len / mm->prefill_tps - bytes / mm->load_bps;
    if (saved < 0) saved = 0;
    return bytes > 0 ? reuse * saved / bytes : 0;
}

/* Non-negative doubles sort as their bit patterns. */
static uint64_t rank_bits(double r)
{
    uint64_t u;
    if (!(r > 0)) r = 0;
    memcpy(&u, &r, 8);
    return u;
}

double store_mat_bits_rank(uint64_t u)
{
    double r;
    memcpy(&r, &u, 8);
    return r;
}

/* ---- the index ----------------------------------------------------------- */

int store_mat_meta_get(tx *t, mat_meta *mm)
{
    const uint8_t *v;
    size_t n;
    uint64_t u;
    int rc = store_get(t, TB_META, "mat", 3, &v, &n);
    *mm = (mat_meta){0, t->s.prefill_tps, t->s.load_bps};
    if (rc == 1 && t->st->be->evicts) return SKV_OK; /* evicted: counted again as nodes change */
    if (rc == 1) return store_err(t->st, SKV_ERR_FORMAT, "store placement record missing (damaged)");
    if (rc) return rc;
    if (n != MAT_META || XXH3_64bits(v, 24) != skv_rd64(v + 24))
        return store_err(t->st, SKV_ERR_FORMAT, "store placement record damaged");
    mm->total = skv_rd64(v);
    u = skv_rd64(v + 8), memcpy(&mm->prefill_tps, &u, 8);
    u = skv_rd64(v + 16), memcpy(&mm->load_bps, &u, 8);
    if (!(mm->prefill_tps > 0) || !(mm->load_bps > 0))
        return store_err(t->st, SKV_ERR_FORMAT, "store placement record damaged");
    return SKV_OK;
}

int store_mat_meta_set(tx *t, const mat_meta *mm)
{
    uint8_t b[MAT_META];
    uint64_t u;
    skv_wr64(b, mm->total);
    memcpy(&u, &mm->prefill_tps, 8), skv_wr64(b + 8, u);
    memcpy(&u, &mm->load_bps, 8), skv_wr64(b + 16, u);
    skv_wr64(b + 24, XXH3_64bits(b, 24));
    return store_put(t, TB_META, "mat", 3, b, MAT_META);
}

int store_mat_total(tx *t, uint64_t *total)
{
    mat_meta mm;
    int rc = store_mat_meta_get(t, &mm);
    *total = mm.total;
    return rc;
}

int store_mat_ent_get(tx *t, uint64_t id, mat_ent *e)
{
    uint8_t key[8];
    const uint8_t *v;
    size_t n;
    be64(key, id);
    int rc = store_get(t, TB_MAT, key, 8, &v, &n);
    if (rc) return rc;
    if (n != MAT_REC) return store_err(t->st, SKV_ERR_FORMAT, "placement entry of node %llu damaged",
                                       (unsigned long long)id);
    *e = (mat_ent){skv_rd64(v), skv_rd64(v + 8), skv_rd64(v + 16)};
    return SKV_OK;
}

static void ord_key(uint8_t key[16], uint64_t rank, uint64_t id)
{
    be64(key, rank);
    be64(key + 8, id);
}

/* Removes id's entry (absent: nothing to do); *bytes: what it counted. */
static int ent_del(tx *t, uint64_t id, uint64_t *bytes)
{
    mat_ent e;
    uint8_t key[16];
    int rc = store_mat_ent_get(t, id, &e);
    *bytes = 0;
    if (rc) return rc == 1 ? SKV_OK : rc;
    ord_key(key, e.rank, id);
    if ((rc = store_del(t, TB_MATORD, key, 16))) return rc;
    be64(key, id);
    *bytes = e.bytes;
    return store_del(t, TB_MAT, key, 8);
}

static int total_add(tx *t, uint64_t add, uint64_t sub)
{
    mat_meta mm;
    int rc = store_mat_meta_get(t, &mm);
    if (rc || add == sub) return rc;
    mm.total = mm.total + add > sub ? mm.total + add - sub : 0;
    return store_mat_meta_set(t, &mm);
}

int store_mat_forget(tx *t, uint64_t id)
{
    uint64_t old;
    int rc = ent_del(t, id, &old);
    return rc || !old ? rc : total_add(t, 0, old);
}

int store_mat_note(tx *t, const skv_trie_node *n)
{
    if (!(n->flags & SKV_TRIE_MAT)) return store_mat_forget(t, n->id);
    mat_meta mm;
    int rc = store_mat_meta_get(t, &mm);
    if (rc) return rc;
    mat_ent e = {rank_bits(store_mat_rank(&t->s, &mm, n, (double)n->kv_bytes)), n->kv_bytes, n->parent}, old;
    uint8_t key[16], rec[MAT_REC];
    rc = store_mat_ent_get(t, n->id, &old);
    if (rc < 0) return rc;
    if (rc == 0 && !memcmp(&old, &e, sizeof e)) return SKV_OK;
    uint64_t was = 0;
    if (rc == 0 && (rc = ent_del(t, n->id, &was))) return rc;
    ord_key(key, e.rank, n->id);
    if ((rc = store_put(t, TB_MATORD, key, 16, "", 0))) return rc;
    skv_wr64(rec, e.rank);
    skv_wr64(rec + 8, e.bytes);
    skv_wr64(rec + 16, e.parent);
    be64(key, n->id);
    if ((rc = store_put(t, TB_MAT, key, 8, rec, MAT_REC))) return rc;
    return total_add(t, e.bytes, was);
}


typedef struct each_scan {
    tx *t;
    store_mat_fn fn;
    void *u;
} each_scan;

static int each_rec(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    each_scan *es = u;
    mat_ent e;
    (void)v;
    (void)vn;
    if (kn != 16) return store_err(es->t->st, SKV_ERR_FORMAT, "placement index damaged");
    uint64_t id = rbe64(k + 8);
    int rc = store_mat_ent_get(es->t, id, &e);
    if (rc == 1) return es->t->st->be->evicts ? 0 : store_err(es->t->st, SKV_ERR_FORMAT, "placement index damaged");
    return rc ? rc : es->fn(es->u, id, e.parent, e.bytes);
}

int store_mat_each(tx *t, store_mat_fn fn, void *u)
{
    each_scan es = {t, fn, u};
    return store_scan(t, TB_MATORD, NULL, 0, each_rec, &es);
}

int store_ids_add(store_ids *l, uint64_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        uint64_t *nb = realloc(l->id, cap * sizeof *nb);
        if (!nb) return SKV_ERR_NOMEM;
        l->id = nb;
        l->cap = cap;
    }
    l->id[l->n++] = id;
    return 0;
}

static int collect_id(void *u, uint64_t id, uint64_t parent, uint64_t bytes)
{
    (void)parent;
    (void)bytes;
    return store_ids_add(u, id);
}

int store_mat_ids(tx *t, store_ids *l)
{
    memset(l, 0, sizeof *l);
    int rc = store_mat_each(t, collect_id, l);
    if (rc == SKV_ERR_NOMEM) rc = store_err(t->st, rc, "out of memory");
    if (rc < 0) {
        free(l->id);
        l->id = NULL;
    }
    return rc < 0 ? rc : SKV_OK;
}
