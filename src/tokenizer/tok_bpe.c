/* tok_bpe.c - GPT-2 byte-level BPE (GGUF tokenizer.ggml.model "gpt2").
 *
 * A fragment is decoded into code points and pre-tokenized into words
 * (unicode.c). Each word's UTF-8 bytes become one symbol per byte (its
 * byte-level character's token); then the adjacent pair with the lowest merge
 * rank is merged (ties: leftmost) until none is left. Long fragments are cut
 * into blocks where every pre-tokenizer ends a word (READ ME FIRST in
 * tok_encode.c). */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* create time                                                              */

static void gpt2_byte_tables(skv_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        uint8_t u[4], one = (uint8_t)b;
        size_t n = skv_utf8_encode(skv_unicode_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = tok_find(t, u, n);
        t->raw1_tok[b] = tok_find(t, &one, 1);
    }
}

/* Parses merge i ("a b") into the merge table; buf (bufcap bytes) holds the
 * joined text while it is looked up. */
static int add_merge(skv_tokenizer *t, const skv_strref *mg, size_t i, uint8_t *buf, size_t bufcap,
                     skv_err *err)
{
    const uint8_t *m = (const uint8_t *)mg->ptr;
    size_t len = mg->len, sp = 1;
    int32_t l, r;
    if (len && !m) return skv_fail(err, SKV_ERR_INVALID_ARG, "merge %zu: NULL text", i);
    while (sp < len && m[sp] != ' ') sp++; /* first space after the first byte */
    if (len < 3 || sp >= len - 1)
        return skv_fail(err, SKV_ERR_FORMAT, "merge %zu is not of the form \"a b\"", i);
    l = tok_find(t, m, sp);
    r = tok_find(t, m + sp + 1, len - sp - 1);
    if (l < 0 || r < 0)
        return skv_fail(err, SKV_ERR_FORMAT, "merge %zu (\"%.*s\") names a token not in the vocabulary",
                        i, (int)(len > 64 ? 64 : len), (const char *)m);
    if (len - 1 > bufcap) {
        t->merge_res[i] = -1; /* longer than any token */
    } else {
        memcpy(buf, m, sp);
        memcpy(buf + sp, m + sp + 1, len - sp - 1);
        t->merge_res[i] = tok_find(t, buf, len - 1);
    }
    tok_map_put_first(&t->merges, ((uint64_t)(uint32_t)l << 32) | (uint32_t)r, (uint32_t)i);
    return SKV_OK;
}

/* GPT2: byte tables and the merge table. */
int tok_setup_gpt2(skv_tokenizer *t, const skv_tokenizer_desc *d, skv_err *err)
{
    size_t bufcap = 2 * t->max_token_len + 8;
    uint8_t *buf;
    int rc = SKV_OK;
    gpt2_byte_tables(t);
    if (d->n_merges == 0) return SKV_OK;
    if (!d->merges)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "n_merges is %zu but merges is NULL", d->n_merges);
    if (d->n_merges > INT32_MAX) return skv_fail(err, SKV_ERR_FORMAT, "%zu merges is absurd", d->n_merges);
    t->n_merges = d->n_merges;
    t->merge_res = malloc(d->n_merges * sizeof *t->merge_res);
    buf = malloc(bufcap);
    if (!t->merge_res || !buf || tok_map_init(&t->merges, d->n_merges) != SKV_OK) {
        free(buf);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < d->n_merges && rc == SKV_OK; i++)
        rc = add_merge(t, &d->merges[i], i, buf, bufcap, err);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* merging                                                                  */

static int bpe_candidate(const skv_tokenizer *t, const sym *s, int32_t l, int32_t r, bigram *b)
{
    const uint32_t *rank;
    if (l < 0 || r < 0 || s[l].id < 0 || s[r].id < 0) return 0;
    rank = tok_map_get(&t->merges, ((uint64_t)(uint32_t)s[l].id << 32) | (uint32_t)s[r].id);
    if (!rank) return 0;
    b->score = 0;
    b->rank = *rank;
    b->left = l;
    b->right = r;
    b->id = s[l].id;
    b->rid = s[r].id;
    b->size = 0;
    return 1;
}

static int bpe_try_push(enc *e, heap *h, const sym *s, int32_t l, int32_t r)
{
    bigram b;
    return bpe_candidate(e->t, s, l, r, &b) ? tok_heap_push(h, &b) : SKV_OK;
}

static int bpe_merge_heap(enc *e, sym *s, int32_t n)
{
    heap h = {NULL, 0, 0, &e->heap, 0};
    int rc = SKV_OK;
    for (int32_t i = 1; i < n && rc == SKV_OK; i++) rc = bpe_try_push(e, &h, s, i - 1, i);
    while (rc == SKV_OK && h.n) {
        bigram b = tok_heap_pop(&h);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->len == 0 || r->len == 0 || l->next != b.right || l->id != b.id || r->id != b.rid) continue;
        tok_sym_merge(s, b.left, b.right, e->t->merge_res[b.rank]);
        rc = bpe_try_push(e, &h, s, l->prev, b.left);
        if (rc == SKV_OK) rc = bpe_try_push(e, &h, s, b.left, l->next);
    }
    return rc;
}

/* Reference: rescan all adjacent pairs for the lowest rank, merge, repeat. */
static int bpe_merge_naive(enc *e, sym *s, int32_t n)
{
    for (;;) {
        bigram best, b;
        int found = 0;
        memset(&best, 0, sizeof best);
        for (int32_t i = 0; i >= 0 && i < n; i = s[i].next)
            if (bpe_candidate(e->t, s, i, s[i].next, &b) && (!found || tok_before(0, &b, &best))) {
                best = b;
                found = 1;
            }
        if (!found) return SKV_OK;
        tok_sym_merge(s, best.left, best.right, e->t->merge_res[best.rank]);
    }
}

/* Emits a symbol that is not a token: every byte of its byte-level text
 * that is itself a one-byte token (llama.cpp's fallback; usually nothing). */
static void bpe_fallback(enc *e, const uint8_t *w, const sym *s)
{
    for (uint32_t k = 0; k < s->len; k++) {
        uint8_t u[4];
        size_t m = skv_utf8_encode(skv_unicode_byte_to_cp(w[s->start + k]), u);
        for (size_t j = 0; j < m; j++)
            if (e->t->raw1_tok[u[j]] >= 0) tok_put(e, e->t->raw1_tok[u[j]]);
    }
}

/* ignore_merges: the word's byte-level text if it is a token (-1 if not;
 * SKV_ERR_NOMEM as *rc). */
static int32_t bpe_whole_word(enc *e, const uint8_t *w, size_t m, int *rc)
{
    uint8_t *x = tok_scratch_get(&e->text, 2 * m);
    size_t n = 0;
    *rc = x ? SKV_OK : SKV_ERR_NOMEM;
    if (!x) return -1;
    for (size_t i = 0; i < m; i++) n += skv_utf8_encode(skv_unicode_byte_to_cp(w[i]), x + n);
    return tok_find(e->t, x, n);
}

/* Tokenizes one pre-token word given as UTF-8 bytes w[0..m). */
static int bpe_word(enc *e, const uint8_t *w, size_t m)
{
    const skv_tokenizer *t = e->t;
    sym *s;
    int rc = SKV_OK;
    if (m > INT32_MAX) return SKV_ERR_RANGE;
    if (t->ignore_merges && m <= t->max_token_len) {
        int32_t id = bpe_whole_word(e, w, m, &rc);
        if (rc) return rc;
        if (id >= 0) {
            tok_put(e, id);
            return SKV_OK;
        }
    }
    if (!(s = tok_scratch_get(&e->sym, m * sizeof *s))) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < m; i++)
        s[i] = (sym){(int32_t)i - 1, i + 1 < m ? (int32_t)i + 1 : -1, t->byte_tok[w[i]], 1, i};
    if (m > 1)
        rc = (e->flags & SKV_TOKENIZER_NAIVE) ? bpe_merge_naive(e, s, (int32_t)m) : bpe_merge_heap(e, s, (int32_t)m);
    if (rc) return rc;
    for (int32_t i = 0; i >= 0; i = s[i].next) {
        if (s[i].id >= 0) tok_put(e, s[i].id);
        else bpe_fallback(e, w, &s[i]);
    }
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* fragments                                                                */

/* Pre-tokenizes and encodes text[0..len), a piece that starts and ends on
 * code point boundaries. */
static int bpe_block(enc *e, const uint8_t *text, size_t len)
{
    uint32_t *cp = tok_scratch_get(&e->cps, len * sizeof *cp);
    uint8_t *cls = tok_scratch_get(&e->cls, len);
    size_t *lens = tok_scratch_get(&e->lens, len * sizeof *lens);
    size_t *tmp = tok_scratch_get(&e->tmp, len * sizeof *tmp);
    size_t n = 0, pos = 0, k, at = 0;
    if (!cp || !cls || !lens || !tmp) return SKV_ERR_NOMEM;
    while (pos < len) {
        size_t adv;
        cp[n] = skv_utf8_decode(text + pos, len - pos, &adv);
        cls[n] = skv_unicode_class(cp[n]);
        n++;
        pos += adv;
    }
    k = skv_unicode_pretokenize(e->t->pretok, cp, cls, n, lens, tmp);
    for (size_t i = 0; i < k; i++) {
        size_t m = 0;
        uint8_t *w = tok_scratch_get(&e->word, 4 * lens[i]);
        int rc;
        if (!w) return SKV_ERR_NOMEM;
        for (size_t j = 0; j < lens[i]; j++) m += skv_utf8_encode(cp[at + j], w + m);
        at += lens[i];
        if ((rc = tok_cached(e, w, m, bpe_word))) return rc;
    }
    return SKV_OK;
}

static int is_alpha(uint8_t c) { return (uint8_t)((c | 32) - 'a') < 26; }

#define BPE_BLOCK_MIN 4096

/* End of the block that starts at a: the first ASCII letter + " <letter>"
 * at least BPE_BLOCK_MIN bytes on, else len. */
static size_t block_end(const uint8_t *text, size_t len, size_t a)
{
    for (size_t p = a + BPE_BLOCK_MIN; p + 1 < len; p++)
        if (text[p] == ' ' && is_alpha(text[p - 1]) && is_alpha(text[p + 1])) return p;
    return len;
}

int tok_bpe_fragment(enc *e, const uint8_t *text, size_t len)
{
    size_t a = 0;
    while (a < len) {
        size_t b = (e->flags & SKV_TOKENIZER_NO_SEGMENT) ? len : block_end(text, len, a);
        int rc = bpe_block(e, text + a, b - a);
        if (rc) return rc;
        a = b;
    }
    return SKV_OK;
}
