/* tok_encode.c - text -> token ids, bit-compatible with llama.cpp's llama-vocab.cpp.
 *
 * READ ME FIRST
 * - Encoding = partition + per-fragment tokenizer, as in llama.cpp:
 *     text --(user-defined tokens, longest first)--> fragments
 *     SPM:  fragment -> ' '-prefix (first fragment / after a token) -> ' ' to
 *           U+2581 -> characters -> merge the adjacent pair whose concatenation
 *           is the highest-scoring vocab token (ties: leftmost) until none ->
 *           ids, unknown characters as <0xXX> byte tokens.
 *     GPT2: fragment -> pre-tokenizer words (unicode.c) -> each word's UTF-8
 *           bytes -> one symbol per byte -> merge the adjacent pair with the
 *           lowest merge rank (ties: leftmost) until none -> ids.
 * - Both merge loops use a binary heap with lazy deletion, exactly like
 *   llama.cpp's priority queues. A stale entry is recognised because one of
 *   its two symbols changed (SPM: total length differs; BPE: ids differ).
 * - Segmentation (the speed/memory trick, off with SKV_TOKENIZER_NO_SEGMENT):
 *   a fragment is cut into independent pieces where no merge can cross.
 *     SPM: before a U+2581 character whose left neighbour c never precedes
 *          U+2581 inside any vocab token (set `nocut`, built at create time).
 *          No symbol can then span the cut, and merges on either side never
 *          interact, so the result is identical.
 *     GPT2: between an ASCII letter and " <ASCII letter>": every supported
 *          pre-tokenizer ends a word there, and no splitter decision before
 *          the cut looks past it (see docs/tokenizer.md).
 *   Without segmentation memory is still linear in the fragment.
 * - Pieces of at most 64 bytes (SPM segments, BPE words) are memoized per
 *   encode call; their ids depend only on their bytes (see `tok_cached`).
 * - The reference paths (SKV_TOKENIZER_NO_SEGMENT, SKV_TOKENIZER_NAIVE) skip
 *   both shortcuts; tests and the fuzzer check that all paths agree.
 * - Files: tok_int.h lists them. This one holds the encode entry points, the
 *   per-call memo and the merge heap that tok_spm.c and tok_bpe.c share.
 */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_SLOTS (1u << 16)
#define CACHE_MAX_ARENA ((size_t)4 << 20)

static void enc_free(enc *e)
{
    scratch *all[] = {&e->text, &e->sym, &e->heap, &e->cps, &e->cls, &e->lens, &e->tmp, &e->word,
                      &e->cache.text, &e->cache.ids};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->p);
    free(e->cache.slot);
}

/* ------------------------------------------------------------------------ */
/* the memo                                                                 */

static const cache_slot *cache_find(const piece_cache *c, uint64_t h, const uint8_t *s, size_t n)
{
    if (!c->slot) return NULL;
    for (size_t i = (size_t)h & c->mask; c->slot[i].hash; i = (i + 1) & c->mask) {
        const cache_slot *q = &c->slot[i];
        if (q->hash == h && q->text_len == n && memcmp((const uint8_t *)c->text.p + q->text_off, s, n) == 0)
            return q;
    }
    return NULL;
}

/* The free slot for hash h (the table is never full). */
static size_t cache_free_slot(const cache_slot *slot, size_t mask, uint64_t h)
{
    size_t j;
    for (j = (size_t)h & mask; slot[j].hash; j = (j + 1) & mask) {
    }
    return j;
}

/* Grows the slot table to keep it at most half full; 0 if it may not grow. */
static int cache_room(piece_cache *c)
{
    size_t cap = c->slot ? c->mask + 1 : 0, ncap;
    cache_slot *ns;
    if (c->slot && 2 * (c->fill + 1) <= cap) return 1;
    ncap = cap ? 2 * cap : 256;
    if (ncap > CACHE_MAX_SLOTS) return 0;
    ns = calloc(ncap, sizeof *ns);
    if (!ns) return 0;
    for (size_t i = 0; i < cap; i++)
        if (c->slot[i].hash) ns[cache_free_slot(ns, ncap - 1, c->slot[i].hash)] = c->slot[i];
    free(c->slot);
    c->slot = ns;
    c->mask = ncap - 1;
    return 1;
}

static void cache_insert(piece_cache *c, uint64_t h, const uint8_t *s, size_t n, const int32_t *ids, size_t k)
{
    uint8_t *tx;
    int32_t *iv;
    cache_slot *q;
    if (c->text_n + n > CACHE_MAX_ARENA || !cache_room(c)) return;
    if (!(tx = tok_scratch_grow(&c->text, c->text_n + n)) ||
        !(iv = tok_scratch_grow(&c->ids, (c->ids_n + k + 1) * sizeof *iv)))
        return;
    memcpy(tx + c->text_n, s, n);
    memcpy(iv + c->ids_n, ids, k * sizeof *ids);
    q = &c->slot[cache_free_slot(c->slot, c->mask, h)];
    q->hash = h;
    q->text_off = (uint32_t)c->text_n;
    q->text_len = (uint16_t)n;
    q->ids_off = (uint32_t)c->ids_n;
    q->n_ids = (uint16_t)k;
    c->text_n += n;
    c->ids_n += k;
    c->fill++;
}

int tok_cached(enc *e, const uint8_t *s, size_t n, piece_fn fn)
{
    uint64_t h;
    const cache_slot *q;
    int rc;
    if (n > CACHE_MAX_PIECE || (e->flags & (SKV_TOKENIZER_NO_SEGMENT | SKV_TOKENIZER_NAIVE))) return fn(e, s, n);
    h = tok_hash_bytes(s, n) | 1;
    if ((q = cache_find(&e->cache, h, s, n)) != NULL) {
        const int32_t *ids = (const int32_t *)e->cache.ids.p + q->ids_off;
        for (size_t i = 0; i < q->n_ids; i++) tok_put(e, ids[i]);
        return SKV_OK;
    }
    e->capture = 1;
    e->seg_n = 0;
    rc = fn(e, s, n);
    e->capture = 0;
    if (rc == SKV_OK && e->seg_n <= sizeof e->seg / sizeof e->seg[0])
        cache_insert(&e->cache, h, s, n, e->seg, e->seg_n);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* the merge heap                                                           */

int tok_heap_push(heap *h, const bigram *b)
{
    size_t i;
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *v = tok_scratch_grow(h->mem, cap * sizeof *v);
        if (!v) return SKV_ERR_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!tok_before(h->spm, b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = *b;
    return SKV_OK;
}

bigram tok_heap_pop(heap *h)
{
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && tok_before(h->spm, &h->v[c + 1], &h->v[c])) c++;
        if (!tok_before(h->spm, &h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

void tok_sym_merge(sym *s, int32_t l, int32_t r, int32_t id)
{
    s[l].len += s[r].len;
    s[l].id = id;
    s[r].len = 0;
    s[l].next = s[r].next;
    if (s[r].next >= 0) s[s[r].next].prev = l;
}

/* ------------------------------------------------------------------------ */
/* public encode                                                            */

/* Encodes the fragments in order (BOS/EOS are added by the caller). */
static int encode_frags(enc *e, const uint8_t *x, const frag *frags, size_t n_frags)
{
    const skv_tokenizer *t = e->t;
    int rc = SKV_OK, prev_special = 1;
    for (size_t i = 0; i < n_frags && rc == SKV_OK; i++) {
        if (frags[i].tok >= 0) {
            tok_put(e, frags[i].tok);
            prev_special = 1;
        } else if (t->kind == SKV_TOKENIZER_SPM) {
            rc = tok_spm_fragment(e, x + frags[i].a, frags[i].n, t->add_space_prefix && prev_special);
            prev_special = 0;
        } else {
            rc = tok_bpe_fragment(e, x + frags[i].a, frags[i].n);
        }
    }
    return rc;
}

/* Cuts x[0..len) at user-defined tokens (when there are any) and encodes
 * the fragments. */
static int encode_text(enc *e, const uint8_t *x, size_t len)
{
    frag one = {0, len, -1}, *frags = &one;
    size_t n_frags = len ? 1 : 0;
    int rc;
    if (len && e->t->n_ud && (rc = tok_partition(e->t, x, len, &frags, &n_frags))) return rc;
    rc = encode_frags(e, x, frags, n_frags);
    if (frags != &one) free(frags);
    return rc;
}

int skv_tokenizer_encode_ex(const skv_tokenizer *t, const char *text, size_t len, unsigned flags,
                            int32_t *out, size_t cap, size_t *n_out)
{
    enc e;
    int rc;
    if (!t || !n_out || (len && !text) || (cap && !out)) return SKV_ERR_INVALID_ARG;
    *n_out = 0;
    if (len >= INT32_MAX) return SKV_ERR_RANGE;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.flags = flags;
    e.out = out;
    e.cap = cap;
    if ((flags & SKV_TOKENIZER_ADD_SPECIAL) && t->add_bos) tok_put(&e, t->bos);
    rc = encode_text(&e, (const uint8_t *)text, len);
    if ((flags & SKV_TOKENIZER_ADD_SPECIAL) && t->add_eos) tok_put(&e, t->eos);
    enc_free(&e);
    if (rc) return rc;
    *n_out = e.n;
    return e.n > cap ? SKV_ERR_RANGE : SKV_OK;
}

int skv_tokenizer_encode(const skv_tokenizer *t, const char *text, size_t len, int add_special,
                         int32_t *out, size_t cap, size_t *n_out)
{
    return skv_tokenizer_encode_ex(t, text, len, add_special ? SKV_TOKENIZER_ADD_SPECIAL : 0, out, cap, n_out);
}
