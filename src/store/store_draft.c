/* store_draft.c - store-prefix drafts for speculative restore (issue 16).
 *
 * While a model-coded segment is decoded, the tokens decoded so far are a prefix of the
 * session. If the store holds sessions with that whole prefix, the likeliest next
 * tokens are what followed it there: the rest of the trie node the prefix ends in, then
 * down the child most stored sessions pass through (largest refcount), until max
 * tokens. The restorer verifies such a block with one batched pass (restore.c), so a
 * session that continues or edits a stored one restores its shared part at about
 * prefill speed. Any answer is safe (drafts never change what is restored), so errors
 * and evicted records just mean no draft. One read transaction per proposal; the trie
 * walk is O(prefix length).
 *
 *      stored:   [the lord is my shepherd] -+- [i shall not want ...]   (refcount 3)
 *                                           +- [he maketh me ...]       (refcount 1)
 *      decoded:  the lord is my sh|   ->  draft: "epherd i shall not want ..."
 */
#include "store/store_int.h"
#include "core/fpguard.h"

#include "store/trie.h"

typedef struct {
    const int32_t *hist;
    size_t n;
    int32_t *out;
    size_t max, n_out;
} draft_args;

typedef struct {
    tx *t;
    uint64_t best;
    uint32_t best_ref;
    int rc;
} child_pick;

static int pick_cb(void *cu, int32_t tok, uint64_t child)
{
    child_pick *c = cu;
    skv_trie_node nd = {0};
    int rc = c->t->io.get_node(c->t->io.user, child, &nd);
    (void)tok;
    if (rc) { /* absent (evicted) or an error: no draft through it */
        c->rc = rc < 0 ? rc : c->rc;
        return rc < 0;
    }
    if (nd.refcount > c->best_ref) c->best_ref = nd.refcount, c->best = child;
    skv_trie_node_clear(&nd);
    return 0;
}

/* The child of node id that most sessions pass through (1: none). */
static int heaviest_child(tx *t, uint64_t id, skv_trie_node *out)
{
    child_pick c = {t, 0, 0, SKV_OK};
    int rc = t->io.children(t->io.user, id, pick_cb, &c);
    if (rc < 0 || c.rc) return rc < 0 ? rc : c.rc;
    return c.best ? t->io.get_node(t->io.user, c.best, out) : 1;
}

static void copy_span(draft_args *a, const skv_trie_node *nd, uint32_t from)
{
    while (from < nd->len && a->n_out < a->max) a->out[a->n_out++] = nd->tokens[from++];
}

static int draft_tx(tx *t, void *u)
{
    draft_args *a = u;
    skv_trie_path p;
    skv_trie_node cur = {0};
    uint64_t id = SKV_TRIE_ROOT;
    if (skv_trie_match(&t->io, a->hist, a->n, &p)) return SKV_OK; /* no draft */
    if (p.matched == a->n) {
        if (p.n) {
            copy_span(a, &p.nodes[p.n - 1], p.last_used);
            id = p.nodes[p.n - 1].id;
        }
        while (a->n_out < a->max && heaviest_child(t, id, &cur) == SKV_OK) {
            copy_span(a, &cur, 0);
            id = cur.id;
            skv_trie_node_clear(&cur);
        }
    }
    skv_trie_path_free(&p);
    return SKV_OK;
}

size_t store_draft_one(void *store, const int32_t *hist, size_t n, int32_t *out, size_t max)
{
    draft_args a = {hist, n, out, max, 0};
    if (!store || !out || max == 0 || (n && !hist)) return 0;
    if (store_run((skv_store *)store, 0, draft_tx, &a)) return 0;
    return a.n_out;
}
