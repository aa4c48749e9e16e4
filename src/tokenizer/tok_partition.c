/* tok_partition.c - user-defined tokens (type 4, neither control nor
 * unknown), which llama.cpp cuts out of the raw text before tokenizing,
 * longest first (tokenizer_st_partition with parse_special = false).
 *
 * At create time their texts go into a byte trie, so that one pass over the
 * text tells which of them occur at all; only those are searched for. */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

/* Sort key of a user-defined token: longest first, equal lengths by id
 * (llama.cpp's std::sort leaves those unordered). Texts are at most 2^30
 * bytes and ids below 2^31, so both fit. */
static uint64_t ud_key(size_t len, size_t id) { return (uint64_t)(UINT32_MAX - len) << 32 | id; }

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int is_ud(const skv_tokenizer *t, size_t id)
{
    return (t->attr[id] & A_USER) && !(t->attr[id] & (A_CONTROL | A_UNKNOWN));
}

/* t->ud = the n user-defined tokens in priority order. */
static int sort_ud(skv_tokenizer *t, size_t n)
{
    uint64_t *keys = malloc(n * sizeof *keys);
    if (!keys) return SKV_ERR_NOMEM;
    for (size_t id = 0; id < t->n_vocab; id++)
        if (is_ud(t, id)) keys[t->n_ud++] = ud_key(t->off[id + 1] - t->off[id], id);
    qsort(keys, t->n_ud, sizeof *keys, cmp_u64);
    for (size_t k = 0; k < t->n_ud; k++) t->ud[k] = (int32_t)(keys[k] & UINT32_MAX);
    free(keys);
    return SKV_OK;
}

/* Adds t->ud[k] to the trie; *nodes = nodes used so far. */
static void trie_insert(skv_tokenizer *t, size_t k, size_t *nodes)
{
    size_t len;
    const uint8_t *s = tok_text(t, t->ud[k], &len);
    uint32_t node = 0;
    if (len > t->max_ud_len) t->max_ud_len = len;
    for (size_t i = 0; i < len; i++) {
        uint64_t key = ((uint64_t)node << 8) | s[i];
        const uint32_t *child = tok_map_get(&t->trie, key);
        if (!child) {
            t->trie_ud[*nodes] = -1;
            tok_map_put_first(&t->trie, key, (uint32_t)*nodes);
            node = (uint32_t)(*nodes)++;
        } else {
            node = *child;
        }
        if (i == 0) t->trie_root[s[0]] = (int32_t)node;
    }
    t->trie_ud[node] = (int32_t)k;
}

int tok_setup_user_defined(skv_tokenizer *t, skv_err *err)
{
    size_t n = 0, nodes = 1, total = 0;
    for (size_t id = 0; id < t->n_vocab; id++)
        if (is_ud(t, id)) {
            n++;
            total += t->off[id + 1] - t->off[id];
        }
    if (n == 0) return SKV_OK;
    t->ud = malloc(n * sizeof *t->ud);
    t->trie_ud = malloc((total + 1) * sizeof *t->trie_ud);
    if (!t->ud || !t->trie_ud || tok_map_init(&t->trie, total) != SKV_OK || sort_ud(t, n) != SKV_OK)
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    t->trie_ud[0] = -1;
    for (int b = 0; b < 256; b++) t->trie_root[b] = -1;
    for (size_t k = 0; k < t->n_ud; k++) trie_insert(t, k, &nodes);
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* encode time                                                              */

/* Marks in seen every user-defined token that starts at text[i]. */
static void mark_at(const skv_tokenizer *t, const uint8_t *text, size_t len, size_t i, uint8_t *seen)
{
    uint32_t node = (uint32_t)t->trie_root[text[i]];
    if (t->trie_ud[node] >= 0) seen[t->trie_ud[node]] = 1;
    for (size_t j = i + 1; j < len && j - i < t->max_ud_len; j++) {
        const uint32_t *c = tok_map_get(&t->trie, ((uint64_t)node << 8) | text[j]);
        if (!c) break;
        node = *c;
        if (t->trie_ud[node] >= 0) seen[t->trie_ud[node]] = 1;
    }
}

static const uint8_t *find_bytes(const uint8_t *h, size_t hn, const uint8_t *needle, size_t nn)
{
    if (nn == 0 || nn > hn) return NULL;
    for (const uint8_t *p = h, *end = h + hn - nn + 1; p < end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, needle, nn) == 0) return p;
    }
    return NULL;
}

/* A growing fragment list. */
typedef struct {
    frag *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, frag f)
{
    if (l->n == l->cap) {
        frag *v = tok_grow_array(l->v, &l->cap, sizeof *v);
        if (!v) return SKV_ERR_NOMEM;
        l->v = v;
    }
    l->v[l->n++] = f;
    return SKV_OK;
}

/* Appends raw fragment f to out with every occurrence of token id (text
 * tx[0..tl)) cut out, left to right, non-overlapping. */
static int cut_fragment(const uint8_t *text, frag f, const uint8_t *tx, size_t tl, int32_t id, frag_list *out)
{
    size_t a = f.a, end = f.a + f.n;
    const uint8_t *hit;
    while ((hit = find_bytes(text + a, end - a, tx, tl)) != NULL) {
        size_t at = (size_t)(hit - text);
        if (at > a && frag_push(out, (frag){a, at - a, -1})) return SKV_ERR_NOMEM;
        if (frag_push(out, (frag){at, tl, id})) return SKV_ERR_NOMEM;
        a = at + tl;
    }
    return end > a ? frag_push(out, (frag){a, end - a, -1}) : SKV_OK;
}

/* One round: cuts user-defined token k out of every raw fragment of in. */
static int cut_token(const skv_tokenizer *t, const uint8_t *text, size_t k, const frag_list *in, frag_list *out)
{
    size_t tl;
    const uint8_t *tx = tok_text(t, t->ud[k], &tl);
    for (size_t i = 0; i < in->n; i++) {
        int rc = in->v[i].tok >= 0 ? frag_push(out, in->v[i]) : cut_fragment(text, in->v[i], tx, tl, t->ud[k], out);
        if (rc) return rc;
    }
    return SKV_OK;
}

int tok_partition(const skv_tokenizer *t, const uint8_t *text, size_t len, frag **out, size_t *n_out)
{
    uint8_t *seen = calloc(t->n_ud, 1);
    frag_list f = {NULL, 0, 0}, g = {NULL, 0, 0};
    int rc = seen ? frag_push(&f, (frag){0, len, -1}) : SKV_ERR_NOMEM;
    for (size_t i = 0; i < len && rc == SKV_OK; i++) /* which user-defined tokens occur at all */
        if (t->trie_root[text[i]] >= 0) mark_at(t, text, len, i, seen);
    for (size_t k = 0; k < t->n_ud && rc == SKV_OK; k++) {
        if (!seen[k]) continue;
        g.n = 0;
        if ((rc = cut_token(t, text, k, &f, &g)) == SKV_OK) {
            frag_list swap = f;
            f = g;
            g = swap;
        }
    }
    free(seen);
    free(g.v);
    if (rc) {
        free(f.v);
        return rc;
    }
    *out = f.v;
    *n_out = f.n;
    return SKV_OK;
}
