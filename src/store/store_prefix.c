/* skv_store_get_prefix: the KV of the longest stored prefix of any token list, without a
 * session name. The trie path of the prefix (skv_trie_match) says which positions have
 * materialised KV (loaded, up to the first node without it, as a get loads a session's)
 * and the rest is recomputed from the caller's own tokens, which are the prefix's: the
 * result is bit-identical to a fresh prefill of tokens[0..n_matched). A read transaction
 * only: every process sharing the store (a fleet of servers on one Redis) finds what any
 * of them put, with no index of its own. */
#include "core/fpguard.h"
#include <string.h>

#include "store/store_int.h"

typedef struct prefix_args {
    const int32_t *tokens;
    size_t n;
    skv_ctx *ctx;
    skv_store_prefix_report r;
} prefix_args;

static int prefix_tx(tx *t, void *u)
{
    prefix_args *a = u;
    skv_trie_path p;
    uint32_t got = 0;
    int rc = skv_trie_match(&t->io, a->tokens, a->n, &p);
    if (rc) return store_trie_err(t->st, rc, "lookup");
    uint32_t m = p.matched;
    if (m > (uint32_t)skv_ctx_n_ctx(a->ctx)) m = (uint32_t)skv_ctx_n_ctx(a->ctx); /* what fits */
    uint32_t l = store_loadable(&p, m);
    double t0 = skv_now();
    rc = skv_ctx_truncate(a->ctx, 0);
    if (!rc && m) rc = store_load_prefix(t, &p, l, a->ctx, &got);
    double t1 = skv_now();
    if (!rc && m > got && (rc = skv_ctx_prefill(a->ctx, a->tokens + got, m - got, SKV_LOGITS_NONE, NULL)))
        rc = store_err(t->st, rc, "prefill: %s", skv_ctx_last_error(a->ctx));
    a->r = (skv_store_prefix_report){.n_matched = rc ? 0 : m, .n_loaded = got, .n_computed = rc ? 0 : m - got,
                                     .bits = p.bits, .load_seconds = t1 - t0, .compute_seconds = skv_now() - t1};
    skv_trie_path_free(&p);
    if (rc) skv_ctx_truncate(a->ctx, 0);
    return rc;
}

int store_get_prefix_one(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, skv_store_prefix_report *rep)
{
    prefix_args a = {tokens, n, ctx, {0}};
    float none = 0;
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!ctx || (n && !tokens) || skv_ctx_model(ctx) != st->model)
        return store_done(st, store_err(st, SKV_ERR_INVALID_ARG, "get_prefix needs tokens and a context of the "
                                                                 "store's model"));
    if (skv_ctx_kv_write(ctx, skv_ctx_n_pos(ctx), 0, &none) == SKV_ERR_UNSUPPORTED) /* kv_quant: see get */
        return store_done(st, store_err(st, SKV_ERR_UNSUPPORTED, "get_prefix needs a context without kv_quant"));
    int rc = store_run(st, 0, prefix_tx, &a);
    if (!rc && rep) *rep = a.r;
    return store_done(st, rc);
}
