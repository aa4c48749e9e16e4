/* tok_spm.c - SentencePiece-style BPE (GGUF tokenizer.ggml.model "llama").
 *
 * A fragment gets its optional leading space, ' ' becomes U+2581, and the
 * text is split into characters by lead byte alone. Then the adjacent pair
 * whose concatenation is the highest-scoring token is merged (ties: leftmost)
 * until none is left; a final symbol that is not a token is emitted as
 * <0xXX> byte tokens. The fragment is first cut into segments before U+2581
 * characters that no token joins to their left neighbour (`nocut`), so that
 * each segment merges alone (READ ME FIRST in tok_encode.c). */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the character at s[pos] by its lead byte, cut at len. */
static size_t char_len(const uint8_t *s, size_t pos, size_t len)
{
    size_t cl = skv_utf8_seq_len(s[pos]);
    return cl > len - pos ? len - pos : cl;
}

static int is_sep(const uint8_t *s, size_t cl) { return cl == 3 && memcmp(s, TOK_SEP, 3) == 0; }

/* Packs one character (1..4 bytes) into a uint32 for the nocut set. */
static uint32_t pack_char(const uint8_t *s, size_t n)
{
    uint32_t v = 0;
    for (size_t i = 0; i < n && i < 4; i++) v |= (uint32_t)s[i] << (8 * i);
    return v;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------------ */
/* create time                                                              */

/* The characters of token id that precede a U+2581 in it (split into
 * characters the way the encoder splits): written to out unless NULL;
 * returns how many. */
static size_t nocut_chars(const skv_tokenizer *t, size_t id, uint32_t *out)
{
    size_t len, pos = 0, prev = 0, prev_len = 0, n = 0;
    const uint8_t *s = tok_text(t, (int32_t)id, &len);
    while (pos < len) {
        size_t cl = char_len(s, pos, len);
        if (pos > 0 && is_sep(s + pos, cl)) {
            if (out) out[n] = pack_char(s + prev, prev_len);
            n++;
        }
        prev = pos;
        prev_len = cl;
        pos += cl;
    }
    return n;
}

/* Byte fallback: <0xXX>, else the token whose text is that one byte. */
static void spm_byte_tables(skv_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char hex[8];
        uint8_t one = (uint8_t)b;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_tok[b] = tok_find_str(t, hex);
        if (t->byte_tok[b] < 0) t->byte_tok[b] = tok_find(t, &one, 1);
    }
}

int tok_setup_spm(skv_tokenizer *t, skv_err *err)
{
    size_t n = 0;
    uint32_t *set;
    spm_byte_tables(t);
    for (size_t id = 0; id < t->n_vocab; id++) n += nocut_chars(t, id, NULL);
    if (!(set = malloc((n ? n : 1) * sizeof *set))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    n = 0;
    for (size_t id = 0; id < t->n_vocab; id++) n += nocut_chars(t, id, set + n);
    qsort(set, n, sizeof *set, cmp_u32);
    t->n_nocut = 0;
    for (size_t i = 0; i < n; i++)
        if (t->n_nocut == 0 || set[t->n_nocut - 1] != set[i]) set[t->n_nocut++] = set[i];
    t->nocut = set;
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* merging                                                                  */

/* Candidate merge of two SPM symbols over text x (0 if the concatenation
 * is not a token). */
static int spm_candidate(const skv_tokenizer *t, const uint8_t *x, const sym *s, int32_t l, int32_t r,
                         bigram *b)
{
    size_t len;
    int32_t id;
    if (l < 0 || r < 0) return 0;
    len = (size_t)s[l].len + s[r].len;
    id = tok_find(t, x + s[l].start, len);
    if (id < 0) return 0;
    b->score = t->score[id];
    b->rank = 0;
    b->left = l;
    b->right = r;
    b->id = id;
    b->rid = -1;
    b->size = (uint32_t)len;
    return 1;
}

static int spm_try_push(enc *e, heap *h, const uint8_t *x, const sym *s, int32_t l, int32_t r)
{
    bigram b;
    return spm_candidate(e->t, x, s, l, r, &b) ? tok_heap_push(h, &b) : SKV_OK;
}

static int spm_merge_heap(enc *e, const uint8_t *x, sym *s, int32_t n)
{
    heap h = {NULL, 0, 0, &e->heap, 1};
    int rc = SKV_OK;
    for (int32_t i = 1; i < n && rc == SKV_OK; i++) rc = spm_try_push(e, &h, x, s, i - 1, i);
    while (rc == SKV_OK && h.n) {
        bigram b = tok_heap_pop(&h);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        tok_sym_merge(s, b.left, b.right, b.id);
        rc = spm_try_push(e, &h, x, s, l->prev, b.left);
        if (rc == SKV_OK) rc = spm_try_push(e, &h, x, s, b.left, l->next);
    }
    return rc;
}

/* Reference: rescan all adjacent pairs for the best one, merge, repeat. */
static int spm_merge_naive(enc *e, const uint8_t *x, sym *s, int32_t n)
{
    for (;;) {
        bigram best, b;
        int found = 0;
        memset(&best, 0, sizeof best);
        for (int32_t i = 0; i >= 0 && i < n; i = s[i].next)
            if (spm_candidate(e->t, x, s, i, s[i].next, &b) && (!found || tok_before(1, &b, &best))) {
                best = b;
                found = 1;
            }
        if (!found) return SKV_OK;
        tok_sym_merge(s, best.left, best.right, best.id);
    }
}

/* One symbol per character of x[0..len); returns the count. */
static int32_t spm_symbols(const uint8_t *x, size_t len, sym *s)
{
    int32_t n = 0;
    for (size_t pos = 0; pos < len; n++) {
        size_t cl = char_len(x, pos, len);
        s[n].prev = n - 1;
        s[n].next = pos + cl < len ? n + 1 : -1;
        s[n].start = pos;
        s[n].len = (uint32_t)cl;
        s[n].id = -1; /* looked up at the end */
        pos += cl;
    }
    return n;
}

/* Emits a merged symbol: its token, else its bytes as byte tokens. */
static void spm_emit(enc *e, const uint8_t *x, const sym *s)
{
    const skv_tokenizer *t = e->t;
    int32_t id = s->id >= 0 ? s->id : tok_find(t, x + s->start, s->len);
    if (id >= 0) {
        tok_put(e, id);
        return;
    }
    for (uint32_t k = 0; k < s->len; k++) { /* byte fallback */
        int32_t b = t->byte_tok[x[s->start + k]];
        if (b >= 0) tok_put(e, b);
        else if (t->unk >= 0) tok_put(e, t->unk); /* llama.cpp throws here */
    }
}

/* Merges and emits one segment x[0..len) (whole characters). */
static int spm_segment(enc *e, const uint8_t *x, size_t len)
{
    sym *s = tok_scratch_get(&e->sym, (len + 1) * sizeof *s);
    int32_t n;
    int rc;
    if (!s) return SKV_ERR_NOMEM;
    n = spm_symbols(x, len, s);
    rc = (e->flags & SKV_TOKENIZER_NAIVE) ? spm_merge_naive(e, x, s, n) : spm_merge_heap(e, x, s, n);
    if (rc) return rc;
    for (int32_t i = 0; i >= 0 && i < n; i = s[i].next) spm_emit(e, x, &s[i]);
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* fragments                                                                */

static int spm_may_cut(const skv_tokenizer *t, const uint8_t *c, size_t n)
{
    uint32_t key = pack_char(c, n);
    return bsearch(&key, t->nocut, t->n_nocut, sizeof key, cmp_u32) == NULL;
}

/* Writes the escaped fragment into x (room for 3 * len + 3); returns its length. */
static size_t spm_escape(const uint8_t *text, size_t len, int prefix, uint8_t *x)
{
    size_t n = 0;
    if (prefix) {
        memcpy(x, TOK_SEP, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(x + n, TOK_SEP, 3);
            n += 3;
        } else {
            x[n++] = text[i];
        }
    }
    return n;
}

int tok_spm_fragment(enc *e, const uint8_t *text, size_t len, int prefix)
{
    size_t n, pos = 0, seg = 0, prev = 0, prev_len = 0;
    uint8_t *x = tok_scratch_get(&e->text, 3 * len + 3);
    int segment = !(e->flags & SKV_TOKENIZER_NO_SEGMENT), rc;
    if (!x) return SKV_ERR_NOMEM;
    n = spm_escape(text, len, prefix, x);
    while (pos < n) {
        size_t cl = char_len(x, pos, n);
        if (pos > seg && is_sep(x + pos, cl) && segment && spm_may_cut(e->t, x + prev, prev_len)) {
            if ((rc = tok_cached(e, x + seg, pos - seg, spm_segment))) return rc;
            seg = pos;
        }
        prev = pos;
        prev_len = cl;
        pos += cl;
    }
    return n > seg ? tok_cached(e, x + seg, n - seg, spm_segment) : SKV_OK;
}
