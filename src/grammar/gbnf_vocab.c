/* Token vocabularies for masks (gbnf.h): the texts copied once and their order sorted by
 * bytes, so that a mask walks them as a trie: a text shares the recognizer states of the
 * prefix it has in common with the text before it, and a refused prefix refuses every text
 * that starts with it at once. */
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_int.h"

static int by_text(const void *a, const void *b)
{
    const skv_gvtext *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->text, y->text, n) : 0;
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

skv_gvocab *skv_gvocab_new(const char *const *texts, const uint32_t *lens, size_t n)
{
    skv_gvocab *v = calloc(1, sizeof *v);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += lens[i];
    if (!v || !(v->t = malloc((n ? n : 1) * sizeof *v->t)) || !(v->bytes = malloc(bytes + 1))) return skv_gvocab_free(v), NULL;
    for (size_t i = 0, at = 0; i < n; at += lens[i], i++) {
        if (lens[i]) memcpy(v->bytes + at, texts[i], lens[i]);
        v->t[i] = (skv_gvtext){v->bytes + at, lens[i], (uint32_t)i};
        v->max_len = lens[i] > v->max_len ? lens[i] : v->max_len;
    }
    v->n = n;
    qsort(v->t, n, sizeof *v->t, by_text);
    return v;
}

void skv_gvocab_free(skv_gvocab *v)
{
    if (!v) return;
    free(v->t), free(v->bytes), free(v);
}

size_t skv_gvocab_size(const skv_gvocab *v) { return v->n; }
