/* What gc and training change in the tiers (store_tier.c, docs/store.md "Tiers"): the
 * nodes whose stored tier (or dictionary) differs from what the rule picks now are
 * rewritten (store_retier, from gc); a dictionary is trained on the store's own sessions
 * and made the one new cheap-coded nodes use (skv_store_train_dict, store_dict.c's
 * records). Above store_kv.c (it rewrites nodes through the trie's storage). */
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

typedef struct retier_scan {
    tx *t;
    store_ids l;
} retier_scan;

/* Collects nodes whose stored tier (or dictionary) differs from what the rule picks now. */
static int retier_rec(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    retier_scan *r = u;
    int now = store_node_tier(v, vn);
    if (kn != 8 || now < 0) return store_err(r->t->st, SKV_ERR_FORMAT, "node record damaged (unknown layout)");
    int want = store_node_want(r->t, v);
    if (want == now && !(now == STORE_TIER_CMVD && skv_rd64(v + 64) != r->t->tier.dict_id)) return 0;
    if (r->l.n == r->l.cap) {
        size_t cap = r->l.cap ? 2 * r->l.cap : 64;
        uint64_t *nb = realloc(r->l.id, cap * sizeof *nb);
        if (!nb) return store_err(r->t->st, SKV_ERR_NOMEM, "out of memory");
        r->l.id = nb;
        r->l.cap = cap;
    }
    r->l.id[r->l.n++] = rbe64(k);
    return 0;
}

int store_retier(tx *t, uint32_t *n_changed)
{
    struct store_tier_rec tr;
    retier_scan r = {t, {0}};
    int rc = store_tier_get(t, &tr);
    if (!rc) rc = store_scan(t, TB_NODES, NULL, 0, retier_rec, &r);
    for (size_t i = 0; rc >= 0 && i < r.l.n; i++) {
        skv_trie_node nd = {0}; /* cleared below whatever the get did (a failed decode leaves it unset) */
        if ((rc = store_io_get_node(t, r.l.id[i], &nd)) == 1) continue; /* evicted meanwhile (Redis) */
        if (!rc && !(rc = store_io_put_node(t, &nd))) (*n_changed)++;
        skv_trie_node_clear(&nd);
    }
    free(r.l.id);
    return rc < 0 ? rc : SKV_OK;
}

/* ---- training ------------------------------------------------------------ */

typedef struct train {
    int32_t *ids;
    uint32_t n, cap;
} train;

/* Depth first: every unique position once, shared prefixes first. */
static int train_visit(void *u, const skv_trie_node *nd, const int32_t *seq)
{
    train *tr = u;
    (void)seq;
    uint32_t k = nd->len < tr->cap - tr->n ? nd->len : tr->cap - tr->n;
    memcpy(tr->ids + tr->n, nd->tokens, (size_t)k * sizeof *tr->ids);
    tr->n += k;
    return tr->n == tr->cap;
}

typedef struct train_args {
    uint32_t cap;
    uint64_t id;
    uint32_t n;
} train_args;

static int train_tx(tx *t, void *u)
{
    train_args *a = u;
    struct store_tier_rec r;
    train tr = {malloc((size_t)a->cap * sizeof(int32_t)), 0, a->cap};
    int rc = tr.ids ? store_tier_get(t, &r) : store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    if (!rc && (rc = skv_trie_walk(&t->io, train_visit, &tr)) > 0) rc = SKV_OK;
    if (rc < 0) rc = store_trie_err(t->st, rc, "dictionary training");
    else if (tr.n == 0) rc = store_err(t->st, SKV_ERR_INVALID_ARG, "the store holds no sessions to train on");
    if (!rc) rc = store_dict_put(t, tr.ids, tr.n, &a->id);
    if (!rc) rc = store_dict_snap_put(t, a->id, tr.ids, tr.n);
    if (!rc) {
        r.dict_id = a->id;
        r.dict_n = a->n = tr.n;
        rc = store_tier_put(t, &r);
    }
    free(tr.ids);
    return rc;
}

int store_train_dict_one(skv_store *st, size_t max_ids, uint64_t *id, size_t *n_ids)
{
    if (!st) return SKV_ERR_INVALID_ARG;
    if (max_ids > STORE_DICT_MAX)
        return store_err(st, SKV_ERR_INVALID_ARG, "a store dictionary holds at most %u ids", STORE_DICT_MAX);
    train_args a = {max_ids ? (uint32_t)max_ids : STORE_DICT_DEFAULT, 0, 0};
    int rc = store_run(st, 1, train_tx, &a);
    if (!rc && id) *id = a.id;
    if (!rc && n_ids) *n_ids = a.n;
    return store_done(st, rc);
}
