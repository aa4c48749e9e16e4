/* tok_common.c - hashing, the uint64 map, vocabulary lookup and scratch
 * buffers shared by the tokenizer's files. */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

static uint64_t load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

uint64_t tok_hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n, w;
    while (n > 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    if (n >= 4) w = load32(s) | load32(s + n - 4) << 32; /* overlapping loads */
    else if (n) w = (uint64_t)s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16;
    else w = 0;
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

static uint64_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    k *= 0xC4CEB9FE1A85EC53ull;
    return k ^ (k >> 33);
}

size_t tok_table_cap(size_t n)
{
    size_t cap = 16;
    if (n > SIZE_MAX / 64) return 0;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

/* ------------------------------------------------------------------------ */
/* u64map: capacity is sized for all insertions at init, so a free slot
 * always exists.                                                           */

int tok_map_init(u64map *m, size_t n)
{
    size_t cap = tok_table_cap(n);
    m->mask = 0;
    m->key = NULL;
    m->val = NULL;
    if (!cap || cap > SIZE_MAX / sizeof(uint64_t)) return SKV_ERR_NOMEM;
    m->key = calloc(cap, sizeof(uint64_t));
    m->val = malloc(cap * sizeof(uint32_t));
    if (!m->key || !m->val) return SKV_ERR_NOMEM;
    m->mask = cap - 1;
    return SKV_OK;
}

void tok_map_free(u64map *m)
{
    free(m->key);
    free(m->val);
}

const uint32_t *tok_map_get(const u64map *m, uint64_t k)
{
    size_t i;
    if (!m->key) return NULL;
    k += 1;
    for (i = (size_t)mix64(k) & m->mask; m->key[i]; i = (i + 1) & m->mask)
        if (m->key[i] == k) return &m->val[i];
    return NULL;
}

void tok_map_put_first(u64map *m, uint64_t k, uint32_t v)
{
    size_t i;
    k += 1;
    for (i = (size_t)mix64(k) & m->mask; m->key[i]; i = (i + 1) & m->mask)
        if (m->key[i] == k) return;
    m->key[i] = k;
    m->val[i] = v;
}

/* ------------------------------------------------------------------------ */
/* vocabulary lookup (the hash is built by tokenizer.c)                     */

int32_t tok_find(const skv_tokenizer *t, const uint8_t *s, size_t n)
{
    size_t i;
    if (n == 0 || n > t->max_token_len) return -1;
    for (i = (size_t)tok_hash_bytes(s, n) & t->slot_mask; t->slots[i]; i = (i + 1) & t->slot_mask) {
        int32_t id = (int32_t)(t->slots[i] - 1);
        size_t len;
        const uint8_t *txt = tok_text(t, id, &len);
        if (len == n && memcmp(txt, s, n) == 0) return id;
    }
    return -1;
}

int32_t tok_find_str(const skv_tokenizer *t, const char *s)
{
    return tok_find(t, (const uint8_t *)s, strlen(s));
}

/* ------------------------------------------------------------------------ */
/* scratch                                                                  */

void *tok_grow_array(void *v, size_t *cap, size_t elem)
{
    size_t ncap = *cap ? 2 * *cap : 16;
    void *g = ncap > SIZE_MAX / elem ? NULL : realloc(v, ncap * elem);
    if (g) *cap = ncap;
    return g;
}

/* The capacity to grow b to for n bytes: doubling from 256. */
static size_t scratch_cap(const scratch *b, size_t n)
{
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n) cap = cap > SIZE_MAX / 2 ? n : cap * 2;
    return cap;
}

void *tok_scratch_get(scratch *b, size_t n)
{
    if (n > b->cap) {
        size_t cap = scratch_cap(b, n);
        void *q = malloc(cap);
        if (!q) return NULL;
        free(b->p);
        b->p = q;
        b->cap = cap;
    }
    return b->p;
}

void *tok_scratch_grow(scratch *b, size_t n)
{
    if (n > b->cap) {
        size_t cap = scratch_cap(b, n);
        void *q = realloc(b->p, cap);
        if (!q) return NULL;
        b->p = q;
        b->cap = cap;
    }
    return b->p;
}
