/* A trie path's KV into a context (docs/store.md): the positions a restore can load
 * (materialised nodes from the root), loading them from KV blobs, prefilling the rest;
 * and the store's own work context. Called by the placement policy (store_policy.c) and
 * by put and get (store_session.c), below both. */
#include "core/fpguard.h"
#include <stdlib.h>

#include "store/store_int.h"

/* Positions a restore of the path's first `upto` positions can load: the contiguous run
 * of materialised nodes from the root. */
uint32_t store_loadable(const skv_trie_path *p, uint32_t upto)
{
    uint32_t l = 0;
    for (size_t i = 0; i < p->n && (p->nodes[i].flags & SKV_TRIE_MAT); i++) {
        uint32_t end = p->nodes[i].depth;
        l = end < upto ? end : upto;
        if (end >= upto) break;
    }
    return l;
}

/* Loads positions [0, upto) of the path into ctx from materialised KV; stops early at a
 * blob the backend evicted (*got: positions loaded). */
int store_load_prefix(tx *t, const skv_trie_path *p, uint32_t upto, skv_ctx *ctx, uint32_t *got)
{
    int rc = skv_ctx_truncate(ctx, 0);
    *got = 0;
    for (size_t i = 0; !rc && i < p->n; i++) {
        const skv_trie_node *nd = &p->nodes[i];
        uint32_t p0 = nd->depth - nd->len, use = nd->depth <= upto ? nd->len : upto - p0;
        float *kv, *part;
        if (p0 >= upto) break;
        if ((rc = store_blob_get_kept(t, nd->id, nd->len, &kv)) == 1) return SKV_OK;
        if (rc) return rc;
        part = kv;
        if (use < nd->len && (part = malloc((size_t)use * store_pos_floats(t->st) * sizeof *part)))
            store_kv_copy(t->st, kv, nd->len, 0, use, part, use, 0);
        rc = part ? skv_ctx_kv_write(ctx, (int)p0, (int)use, part) : SKV_ERR_NOMEM;
        if (part != kv) free(part);
        store_blob_give(t->st, kv);
        if (rc) return store_err(t->st, rc, "loading KV: %s", skv_ctx_last_error(ctx));
        *got = p0 + use;
    }
    return rc;
}

int store_path_prefill(tx *t, const skv_trie_path *p, uint32_t from, uint32_t upto, skv_ctx *ctx)
{
    for (size_t i = 0; i < p->n; i++) {
        const skv_trie_node *nd = &p->nodes[i];
        uint32_t s0 = nd->depth - nd->len, a = s0 > from ? s0 : from, b = nd->depth < upto ? nd->depth : upto;
        if (a >= b) continue;
        int rc = skv_ctx_prefill(ctx, nd->tokens + (a - s0), b - a, SKV_LOGITS_NONE, NULL);
        if (rc) return store_err(t->st, rc, "prefill: %s", skv_ctx_last_error(ctx));
    }
    return SKV_OK;
}

int store_work_ctx(skv_store *st)
{
    if (st->work) return SKV_OK;
    if (st->parent) { /* a shard: the router's context (its write lock covers both) */
        int rc = store_work_ctx(st->parent);
        st->work = st->parent->work;
        return rc ? store_err(st, rc, "%s", skv_store_last_error(st->parent)) : SKV_OK;
    }
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_threads = st->n_threads;
    int rc = skv_ctx_create(st->model, &cp, &st->work);
    return rc ? store_err(st, rc, "cannot create a context for the model") : SKV_OK;
}

void store_progress(const skv_store *st, uint64_t done, uint64_t total)
{
    if (st->progress) st->progress(st->progress_user, done, total);
}

int store_prefill(skv_store *st, skv_ctx *ctx, const int32_t *tokens, size_t from, size_t to, size_t total)
{
    size_t step = st->progress ? STORE_PROGRESS_CHUNK : to - from;
    for (size_t q = from; q < to; q += step) {
        size_t k = to - q < step ? to - q : step;
        int rc = skv_ctx_prefill(ctx, tokens + q, k, SKV_LOGITS_NONE, NULL);
        if (rc) return store_err(st, rc, "prefill: %s", skv_ctx_last_error(ctx));
        store_progress(st, q + k, total);
    }
    return SKV_OK;
}

int store_set_progress_one(skv_store *st, void (*fn)(void *user, uint64_t done, uint64_t total), void *user)
{
    if (!st) return skv_fail(NULL, SKV_ERR_INVALID_ARG, "skv_store_set_progress: NULL store");
    st->progress = fn;
    st->progress_user = user;
    return SKV_OK;
}
