/* Draft models for speculative restore: see draft.h. */
#include "engine/draft.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

struct skv_draft {
    int32_t *hist;   /* cap tokens */
    size_t cap, n;
    uint32_t *table; /* SKV_DRAFT_MAX_ORDER tables of mask + 1 slots: follower index + 1, 0 = empty */
    uint32_t mask;
};

static uint32_t ctx_hash(const int32_t *t, unsigned order)
{
    uint32_t h = 0x9e3779b1u * order;
    for (unsigned i = 0; i < order; i++) {
        h = (h ^ (uint32_t)t[i]) * 0x85ebca77u;
        h ^= h >> 15;
    }
    h *= 0xc2b2ae3du;
    return h ^ (h >> 16);
}

int skv_draft_create(size_t cap, skv_draft **out)
{
    skv_draft *d;
    size_t slots = 64;
    if (!out || cap == 0 || cap > ((size_t)1 << 28)) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    while (slots < 2 * cap && slots < ((size_t)1 << 20)) slots <<= 1; /* at most 16 MiB of tables */
    if (!(d = calloc(1, sizeof *d))) return SKV_ERR_NOMEM;
    d->hist = malloc(cap * sizeof *d->hist);
    d->table = calloc(slots * SKV_DRAFT_MAX_ORDER, sizeof *d->table);
    if (!d->hist || !d->table) {
        skv_draft_free(d);
        return SKV_ERR_NOMEM;
    }
    d->cap = cap;
    d->mask = (uint32_t)(slots - 1);
    *out = d;
    return SKV_OK;
}

void skv_draft_free(skv_draft *d)
{
    if (!d) return;
    free(d->hist);
    free(d->table);
    free(d);
}

void skv_draft_reset(skv_draft *d)
{
    if (!d) return;
    d->n = 0;
    memset(d->table, 0, ((size_t)d->mask + 1) * SKV_DRAFT_MAX_ORDER * sizeof *d->table);
}

size_t skv_draft_len(const skv_draft *d) { return d ? d->n : 0; }

static uint32_t *slot(const skv_draft *d, unsigned order, uint32_t h)
{
    return d->table + (size_t)(order - 1) * ((size_t)d->mask + 1) + (h & d->mask);
}

int skv_draft_push(skv_draft *d, int32_t tok)
{
    if (!d || tok < 0) return SKV_ERR_INVALID_ARG;
    if (d->n >= d->cap) return SKV_ERR_RANGE;
    /* The contexts ending just before this token are followed by it. */
    for (unsigned o = 1; o <= SKV_DRAFT_MAX_ORDER && o <= d->n; o++)
        *slot(d, o, ctx_hash(d->hist + d->n - o, o)) = (uint32_t)d->n + 1;
    d->hist[d->n++] = tok;
    return SKV_OK;
}

size_t skv_draft_propose(const skv_draft *d, int32_t *out, size_t max, unsigned *match_len)
{
    if (match_len) *match_len = 0;
    if (!d || !out || max == 0 || d->n == 0) return 0;
    size_t N = d->n;
    for (unsigned o = N < SKV_DRAFT_MAX_ORDER ? (unsigned)N : SKV_DRAFT_MAX_ORDER; o >= 1; o--) {
        const int32_t *suffix = d->hist + N - o;
        uint32_t v = *slot(d, o, ctx_hash(suffix, o));
        if (v == 0) continue;
        size_t j = (size_t)v - 1; /* follower index of an earlier occurrence */
        if (j < o || j >= N || memcmp(d->hist + j - o, suffix, o * sizeof *suffix)) continue; /* collision */
        if (match_len) { /* the real length of the match, up to SKV_DRAFT_MATCH_CAP */
            unsigned len = o;
            while (len < SKV_DRAFT_MATCH_CAP && len < j && d->hist[j - 1 - len] == d->hist[N - 1 - len]) len++;
            *match_len = len;
        }
        /* Copy what followed; past the history's end the copy continues into itself. */
        for (size_t i = 0; i < max; i++) out[i] = j + i < N ? d->hist[j + i] : out[j + i - N];
        return max;
    }
    return 0;
}
