/* The recognizer: a set of parse stacks (a pushdown automaton run breadth-first). A stack
 * holds element positions, its top the terminal that must match next; an empty stack means
 * the input so far is a whole sentence. A code point advances every stack whose top
 * matches it, then expands rule references at the new tops until each is a terminal again.
 * Bounded: at most SKV_GBNF_MAX_STACKS stacks of SKV_GBNF_MAX_DEPTH elements and
 * SKV_GBNF_MAX_SET elements in all, and a cap on the work of one code point (counted in
 * stack elements moved, hashed or compared); a step past a bound is refused (the input is
 * then not accepted), never run on. Each public call also has a budget, SKV_GBNF_MAX_WORK:
 * past it the call refuses what is left. skv_gmatch_exhausted() tells a refusal for cost
 * (work, stacks, set size, expansion nesting) from one of the grammar. Equal stacks
 * are merged through a hash table, so a set of n stacks costs O(elements), not O(n^2).
 * Bytes are UTF-8; a sequence cut at the end of a text is kept as a partial character and
 * checked for a possible completion. */
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_int.h"

#define EXPAND_DEPTH 512       /* nested expansions for one code point */
#define EXPAND_WORK (1u << 16) /* element operations for one code point */

typedef struct span {
    uint32_t off, len;
} span;

typedef struct gset {
    uint32_t *d; /* the stacks' elements, one after another */
    size_t nd, capd;
    span *s;
    size_t ns, caps;
    uint32_t pv; /* partial UTF-8 character: its bits so far */
    int pl;      /* and the bytes still to come (0: none) */
    int pn;      /* and its whole length in bytes */
    int over;    /* a bound was hit while building the set */
} gset;

struct skv_gmatch {
    const skv_gbnf *g;
    gset cur, a, b;
    gset *deep;    /* masks: the state after each byte of the current text */
    uint8_t *dead; /* and whether it is refused */
    size_t n_deep;
    uint32_t *tmp; /* expansion scratch: stacks being built, nested */
    size_t captmp;
    size_t work;  /* element operations for the current code point */
    size_t spent; /* and for the current public call */
    int exhausted;   /* the last public call hit a bound on work (not on nesting) */
    int born_costly; /* the start alone hit one: every call does */
    struct hslot {
        uint32_t gen, idx;
    } *ht;         /* the set being built: its stacks by hash (slots of other gens are free) */
    size_t capht;  /* a power of two, or 0 */
    uint32_t gen;
};

static void set_clear(gset *o) { o->nd = o->ns = 0, o->pv = 0, o->pl = 0, o->pn = 0, o->over = 0; }

/* The smallest code point a UTF-8 sequence of n bytes may encode (shorter forms are overlong). */
static uint32_t utf8_min(int n) { return n == 2 ? 0x80u : n == 3 ? 0x800u : 0x10000u; }
static void set_free(gset *o) { free(o->d), free(o->s); }

static int same_stack(const gset *o, size_t i, const uint32_t *stk, size_t len)
{
    return o->s[i].len == len && (!len || !memcmp(o->d + o->s[i].off, stk, len * sizeof *stk));
}

static uint32_t stack_hash(const uint32_t *stk, size_t len)
{
    uint32_t h = 0x811C9DC5u ^ (uint32_t)len;
    for (size_t i = 0; i < len; i++) h = (h ^ stk[i]) * 0x01000193u, h ^= h >> 15;
    return h;
}

/* Starts building a set: the hash table forgets every stack (by generation). */
static void set_begin(skv_gmatch *m, gset *o)
{
    set_clear(o);
    if (++m->gen == 0) { /* wrapped: every slot is stale for real */
        if (m->ht) memset(m->ht, 0, m->capht * sizeof *m->ht);
        m->gen = 1;
    }
}

/* The hash table holds twice the set's stacks at least: -1 when out of memory. */
static int ht_fit(skv_gmatch *m, const gset *o)
{
    if (m->capht >= 2 * (o->ns + 1)) return 0;
    size_t cap = m->capht ? 2 * m->capht : 64;
    struct hslot *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    free(m->ht);
    m->ht = t, m->capht = cap, m->gen = 1;
    for (size_t i = 0; i < o->ns; i++) {
        size_t h = stack_hash(o->d + o->s[i].off, o->s[i].len) & (cap - 1);
        while (t[h].gen == 1) h = (h + 1) & (cap - 1);
        t[h] = (struct hslot){1, (uint32_t)i};
    }
    m->work += o->nd;
    return 0;
}

static void add_stack(skv_gmatch *m, gset *o, const uint32_t *stk, size_t len)
{
    m->work += 1 + len;
    if (ht_fit(m, o)) {
        o->over = 1;
        return;
    }
    size_t h = stack_hash(stk, len) & (m->capht - 1);
    for (; m->ht[h].gen == m->gen; h = (h + 1) & (m->capht - 1)) {
        m->work += 1 + len;
        if (same_stack(o, m->ht[h].idx, stk, len)) return;
    }
    if (o->ns >= SKV_GBNF_MAX_STACKS || o->nd + len > SKV_GBNF_MAX_SET) {
        o->over = m->exhausted = 1;
        return;
    }
    if (skv_gbnf_grow((void **)&o->s, &o->caps, o->ns + 1, sizeof *o->s) ||
        skv_gbnf_grow((void **)&o->d, &o->capd, o->nd + len, sizeof *o->d)) {
        o->over = 1;
        return;
    }
    if (len) memcpy(o->d + o->nd, stk, len * sizeof *stk);
    m->ht[h] = (struct hslot){m->gen, (uint32_t)o->ns};
    o->s[o->ns++] = (span){(uint32_t)o->nd, (uint32_t)len};
    o->nd += len;
}

/* Expands the stack at m->tmp[off..off+len) into terminal-topped stacks of o. */
static void expand(skv_gmatch *m, gset *o, size_t off, size_t len, int depth)
{
    const skv_gbnf *g = m->g;
    if (o->over) return;
    if (depth > EXPAND_DEPTH || (m->work += 1 + len) > EXPAND_WORK) {
        o->over = m->exhausted = 1;
        return;
    }
    uint32_t top = len ? m->tmp[off + len - 1] : 0;
    if (!len || skv_gel_is_char(&g->el[top])) {
        add_stack(m, o, m->tmp + off, len);
        return;
    }
    uint32_t rule = g->el[top].a, at = (uint32_t)(off + len);
    for (uint32_t a = g->alt_off[rule]; a < g->alt_off[rule + 1] && !o->over; a++) {
        if (skv_gbnf_grow((void **)&m->tmp, &m->captmp, at + len + 1, sizeof *m->tmp)) {
            o->over = 1;
            return;
        }
        size_t k = len - 1;
        memmove(m->tmp + at, m->tmp + off, k * sizeof *m->tmp);
        if (!skv_gel_is_end(&g->el[top + 1])) m->tmp[at + k++] = top + 1;
        if (!skv_gel_is_end(&g->el[g->alts[a]])) m->tmp[at + k++] = g->alts[a];
        if (k > SKV_GBNF_MAX_DEPTH) o->over = 1;
        else expand(m, o, at, k, depth + 1);
    }
}

static int char_match(const skv_gbnf *g, const skv_gel *e, uint32_t cp)
{
    int in = 0;
    for (uint32_t i = e->a; i < e->a + e->n && !in; i++) in = cp >= g->rng[i][0] && cp <= g->rng[i][1];
    return e->type == GE_CHAR ? in : !in;
}

/* Some code point of [lo, hi] could match e. */
static int range_match(const skv_gbnf *g, const skv_gel *e, uint32_t lo, uint32_t hi)
{
    for (uint32_t i = e->a; i < e->a + e->n; i++) {
        int meets = g->rng[i][0] <= hi && g->rng[i][1] >= lo, covers = g->rng[i][0] <= lo && g->rng[i][1] >= hi;
        if (e->type == GE_CHAR && meets) return 1;
        if (e->type == GE_NCHAR && covers) return 0;
    }
    return e->type == GE_NCHAR;
}

/* out = in advanced by the code point cp; 1 when some stack survives within the bounds. */
static int step(skv_gmatch *m, const gset *in, gset *out, uint32_t cp)
{
    const skv_gbnf *g = m->g;
    set_begin(m, out);
    if (m->spent > SKV_GBNF_MAX_WORK) { /* this call's budget is gone: refuse what is left */
        out->over = m->exhausted = 1;
        return 0;
    }
    m->work = 0;
    for (size_t i = 0; i < in->ns && !out->over; i++) {
        size_t len = in->s[i].len;
        if (!len) continue; /* an empty stack: the sentence ended (in->d may be NULL) */
        const uint32_t *stk = in->d + in->s[i].off;
        if (!char_match(g, &g->el[stk[len - 1]], cp)) continue;
        if (skv_gbnf_grow((void **)&m->tmp, &m->captmp, len + 1, sizeof *m->tmp)) return 0;
        memcpy(m->tmp, stk, (len - 1) * sizeof *stk);
        m->work += len;
        size_t k = len - 1;
        if (!skv_gel_is_end(&g->el[stk[len - 1] + 1])) m->tmp[k++] = stk[len - 1] + 1;
        expand(m, out, 0, k, 0);
    }
    m->spent += m->work;
    return out->ns && !out->over;
}

static int partial_ok(const skv_gbnf *g, const gset *in, uint32_t pv, int pl, int pn)
{
    uint32_t lo = pv << (6 * pl), hi = lo | ((1u << (6 * pl)) - 1);
    lo = lo > utf8_min(pn) ? lo : utf8_min(pn);
    hi = hi < 0x10FFFFu ? hi : 0x10FFFFu;
    if (lo > hi) return 0;
    for (size_t i = 0; i < in->ns; i++)
        if (in->s[i].len && range_match(g, &g->el[in->d[in->s[i].off + in->s[i].len - 1]], lo, hi)) return 1;
    return 0;
}

/* One byte of UTF-8: 1 with *cp when a character is complete, 0 when more is due, -1 invalid
 * (overlong forms, surrogates and values above U+10FFFF included). */
static int utf8_byte(uint8_t b, uint32_t *pv, int *pl, int *pn, uint32_t *cp)
{
    if (*pl) {
        if ((b & 0xC0) != 0x80) return -1;
        *pv = (*pv << 6) | (b & 0x3Fu);
        if (--*pl) return 0;
        if (*pv < utf8_min(*pn) || *pv > 0x10FFFFu || (*pv >= 0xD800u && *pv < 0xE000u)) return -1;
        return *cp = *pv, 1;
    }
    if (b < 0x80) return *cp = b, 1;
    if (b >= 0xC2 && b < 0xE0) *pv = b & 0x1Fu, *pl = 1;
    else if (b >= 0xE0 && b < 0xF0) *pv = b & 0x0Fu, *pl = 2;
    else if (b >= 0xF0 && b < 0xF5) *pv = b & 0x07u, *pl = 3;
    else return -1;
    *pn = *pl + 1;
    return 0;
}

/* Runs s from the current set: the resulting set (cur itself when no character completed),
 * or NULL when the grammar refuses s. pv, pl: the partial character after s. */
static const gset *run(skv_gmatch *m, const char *s, size_t n, uint32_t *pv, int *pl, int *pn)
{
    const gset *in = &m->cur;
    gset *bufs[2] = {&m->a, &m->b};
    int w = 0;
    *pv = m->cur.pv, *pl = m->cur.pl, *pn = m->cur.pn;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int r = utf8_byte((uint8_t)s[i], pv, pl, pn, &cp);
        if (r < 0) return NULL;
        if (!r) continue;
        if (!step(m, in, bufs[w], cp)) return NULL;
        in = bufs[w];
        w ^= 1;
    }
    return *pl && !partial_ok(m->g, in, *pv, *pl, *pn) ? NULL : in;
}

/* A public call starts with the whole budget. */
static void call_begin(skv_gmatch *m) { m->spent = 0, m->exhausted = m->born_costly; }

int skv_gmatch_exhausted(const skv_gmatch *m) { return m->exhausted; }

static int accepts(skv_gmatch *m, const char *s, size_t n)
{
    uint32_t pv;
    int pl, pn;
    return run(m, s, n, &pv, &pl, &pn) != NULL;
}

int skv_gmatch_accepts(skv_gmatch *m, const char *s, size_t n)
{
    call_begin(m);
    return accepts(m, s, n);
}

int skv_gmatch_feed(skv_gmatch *m, const char *s, size_t n)
{
    uint32_t pv;
    int pl, pn;
    call_begin(m);
    const gset *r = run(m, s, n, &pv, &pl, &pn);
    if (!r) return -1;
    if (r != &m->cur) {
        gset t = m->cur;
        m->cur = *r;
        *(r == &m->a ? &m->a : &m->b) = t;
    }
    m->cur.pv = pv, m->cur.pl = pl, m->cur.pn = pn;
    return 0;
}

int skv_gmatch_accepting(const skv_gmatch *m)
{
    for (size_t i = 0; i < m->cur.ns && !m->cur.pl; i++)
        if (!m->cur.s[i].len) return 1;
    return 0;
}

int skv_gmatch_can_continue(const skv_gmatch *m)
{
    for (size_t i = 0; i < m->cur.ns; i++)
        if (m->cur.s[i].len) return 1;
    return 0;
}

/* ---- masks: the vocabulary walked as a trie (gbnf_vocab.c), one state per byte depth ---- */
static int set_copy(gset *o, const gset *in)
{
    if (skv_gbnf_grow((void **)&o->d, &o->capd, in->nd, sizeof *o->d) ||
        skv_gbnf_grow((void **)&o->s, &o->caps, in->ns, sizeof *o->s))
        return -1;
    if (in->nd) memcpy(o->d, in->d, in->nd * sizeof *o->d);
    if (in->ns) memcpy(o->s, in->s, in->ns * sizeof *o->s);
    o->nd = in->nd, o->ns = in->ns, o->pv = in->pv, o->pl = in->pl, o->pn = in->pn, o->over = in->over;
    return 0;
}

/* out = in after the byte b: 1 alive, 0 refused. */
static int extend(skv_gmatch *m, const gset *in, gset *out, uint8_t b)
{
    uint32_t pv = in->pv, cp;
    int pl = in->pl, pn = in->pn, r = utf8_byte(b, &pv, &pl, &pn, &cp);
    if (r < 0 || (r ? !step(m, in, out, cp) : set_copy(out, in) != 0)) return 0;
    out->pv = r ? 0 : pv, out->pl = pl, out->pn = pn;
    return 1;
}

static int ensure_deep(skv_gmatch *m, size_t n)
{
    if (n <= m->n_deep) return 0;
    gset *d = realloc(m->deep, n * sizeof *d);
    uint8_t *dead = d ? realloc(m->dead, n) : NULL;
    if (d) m->deep = d;
    if (!dead) return -1;
    m->dead = dead;
    memset(m->deep + m->n_deep, 0, (n - m->n_deep) * sizeof *d);
    m->n_deep = n;
    return 0;
}

static size_t common_prefix(const skv_gvtext *a, const skv_gvtext *b)
{
    size_t n = a->len < b->len ? a->len : b->len, i = 0;
    while (i < n && a->text[i] == b->text[i]) i++;
    return i;
}

/* Text t given the states deep[0..top] of the text before it: its verdict; *top updated. */
static int mask_one(skv_gmatch *m, const skv_gvtext *t, size_t *top)
{
    size_t d = *top;
    while (d < t->len && !m->dead[d]) {
        m->dead[d + 1] = (uint8_t)!extend(m, &m->deep[d], &m->deep[d + 1], (uint8_t)t->text[d]);
        d++;
    }
    *top = d;
    if (!t->len || d < t->len || m->dead[d]) return 0;
    return !m->deep[d].pl || partial_ok(m->g, &m->deep[d], m->deep[d].pv, m->deep[d].pl, m->deep[d].pn);
}

void skv_gmatch_mask(skv_gmatch *m, const skv_gvocab *v, uint8_t *allow)
{
    size_t top = 0;
    call_begin(m);
    if (ensure_deep(m, (size_t)v->max_len + 1) || set_copy(&m->deep[0], &m->cur)) {
        for (size_t k = 0; k < v->n; k++) /* out of memory: one text at a time */
            allow[v->t[k].id] = v->t[k].len && accepts(m, v->t[k].text, v->t[k].len);
        return;
    }
    m->dead[0] = 0;
    for (size_t k = 0; k < v->n; k++) {
        if (k) {
            size_t c = common_prefix(&v->t[k - 1], &v->t[k]);
            top = c < top ? c : top;
        }
        allow[v->t[k].id] = (uint8_t)mask_one(m, &v->t[k], &top);
    }
}

skv_gmatch *skv_gmatch_new(const skv_gbnf *g)
{
    skv_gmatch *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    if (skv_gbnf_grow((void **)&m->tmp, &m->captmp, 2, sizeof *m->tmp)) return skv_gmatch_free(m), NULL;
    m->tmp[0] = g->rule_at[g->root];
    /* the root's start: a stack [first element of each alternative], expanded */
    set_begin(m, &m->cur);
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) {
        m->tmp[0] = g->alts[a];
        expand(m, &m->cur, 0, skv_gel_is_end(&g->el[g->alts[a]]) ? 0 : 1, 0);
    }
    if (m->cur.over && !m->exhausted) return skv_gmatch_free(m), NULL;
    if (m->cur.over) set_clear(&m->cur), m->born_costly = 1; /* refuses everything, for cost */
    return m;
}

void skv_gmatch_free(skv_gmatch *m)
{
    if (!m) return;
    set_free(&m->cur), set_free(&m->a), set_free(&m->b);
    for (size_t i = 0; i < m->n_deep; i++) set_free(&m->deep[i]);
    free(m->deep), free(m->dead);
    free(m->tmp), free(m->ht);
    free(m);
}
