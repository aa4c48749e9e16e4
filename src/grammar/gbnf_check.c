/* Left recursion: a rule that can reach itself before consuming a character would make the
 * recognizer expand forever, so the parser refuses it. Nullable rules (those that can
 * match nothing) are found with a worklist in time linear in the grammar's size, then the
 * "leftmost reference" graph is searched for a cycle without recursion (a hostile grammar
 * of 65536 rules in a chain must not overflow the C stack). */
#include "core/fpguard.h"
#include <stdlib.h>

#include "grammar/gbnf_int.h"

typedef struct nullw {
    uint32_t *alt_rule; /* alternative -> its rule */
    uint32_t *left;     /* alternative -> its references not yet known nullable (UINT32_MAX: has a char) */
    uint32_t *ref_off;  /* rule -> its uses in ref_alt (CSR) */
    uint32_t *ref_alt;  /* alternatives that reference the rule, once per reference */
    uint32_t *queue;
    uint8_t *nullable;
} nullw;

static void nullw_free(nullw *w)
{
    free(w->alt_rule), free(w->left), free(w->ref_off), free(w->ref_alt), free(w->queue);
}

/* Calls fn(w, alt, element) for every element of every alternative. */
static void each_element(const skv_gbnf *g, nullw *w, void (*fn)(const skv_gbnf *, nullw *, uint32_t, const skv_gel *))
{
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
            for (const skv_gel *e = g->el + g->alts[a]; !skv_gel_is_end(e); e++) fn(g, w, a, e);
}

static void count_refs(const skv_gbnf *g, nullw *w, uint32_t a, const skv_gel *e)
{
    (void)g;
    if (e->type == GE_REF) {
        w->ref_off[e->a + 1]++;
        if (w->left[a] != UINT32_MAX) w->left[a]++;
    } else {
        w->left[a] = UINT32_MAX;
    }
}

static void place_refs(const skv_gbnf *g, nullw *w, uint32_t a, const skv_gel *e)
{
    (void)g;
    if (e->type == GE_REF) w->ref_alt[w->queue[e->a]++] = a; /* queue: the fill cursors here */
}

static int nullw_init(const skv_gbnf *g, nullw *w)
{
    uint32_t n_alt = g->alt_off[g->n_rules];
    w->alt_rule = malloc(n_alt * sizeof *w->alt_rule);
    w->left = calloc(n_alt, sizeof *w->left);
    w->ref_off = calloc(g->n_rules + 1, sizeof *w->ref_off);
    w->queue = malloc((g->n_rules + 1) * sizeof *w->queue);
    if (!w->alt_rule || !w->left || !w->ref_off || !w->queue) return -1;
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) w->alt_rule[a] = r;
    each_element(g, w, count_refs);
    for (uint32_t r = 0; r < g->n_rules; r++) w->ref_off[r + 1] += w->ref_off[r];
    if (!(w->ref_alt = malloc((w->ref_off[g->n_rules] + 1) * sizeof *w->ref_alt))) return -1;
    for (uint32_t r = 0; r < g->n_rules; r++) w->queue[r] = w->ref_off[r];
    each_element(g, w, place_refs);
    return 0;
}

/* A rule became nullable: push it once. */
static void mark(nullw *w, uint32_t r, uint32_t *n_q)
{
    if (w->nullable[r]) return;
    w->nullable[r] = 1;
    w->queue[(*n_q)++] = r;
}

static int find_nullable(const skv_gbnf *g, uint8_t *nullable)
{
    nullw w = {.nullable = nullable};
    uint32_t n_q = 0;
    if (nullw_init(g, &w)) return nullw_free(&w), -1;
    for (uint32_t a = 0; a < g->alt_off[g->n_rules]; a++)
        if (!w.left[a]) mark(&w, w.alt_rule[a], &n_q);
    for (uint32_t q = 0; q < n_q; q++) {
        uint32_t r = w.queue[q];
        for (uint32_t i = w.ref_off[r]; i < w.ref_off[r + 1]; i++) {
            uint32_t a = w.ref_alt[i];
            if (w.left[a] != UINT32_MAX && --w.left[a] == 0) mark(&w, w.alt_rule[a], &n_q);
        }
    }
    nullw_free(&w);
    return 0;
}

/* ---- the cycle search: an explicit stack of (rule, next element, still leftmost) ---- */
typedef struct frame {
    uint32_t rule, at;
    int lead;
} frame;

/* The next leftmost reference of f's rule, advancing f; UINT32_MAX when none is left. */
static uint32_t next_edge(const skv_gbnf *g, const uint8_t *nullable, frame *f)
{
    for (;;) {
        const skv_gel *e = g->el + f->at;
        if (e->type == GE_END) return UINT32_MAX;
        f->at++;
        if (e->type == GE_ALT) f->lead = 1;
        else if (e->type != GE_REF) f->lead = 0;
        else if (f->lead) {
            f->lead = nullable[e->a];
            return e->a;
        }
    }
}

static int dfs(const skv_gbnf *g, const uint8_t *nullable, uint8_t *color, frame *st, uint32_t start, uint32_t *bad)
{
    size_t n = 0;
    st[n++] = (frame){start, g->rule_at[start], 1};
    color[start] = 1;
    while (n) {
        uint32_t x = next_edge(g, nullable, &st[n - 1]);
        if (x == UINT32_MAX) {
            color[st[--n].rule] = 2;
        } else if (color[x] == 1) {
            return *bad = x, 1;
        } else if (!color[x]) {
            color[x] = 1;
            st[n++] = (frame){x, g->rule_at[x], 1};
        }
    }
    return 0;
}

int skv_gbnf_left_recursive(const skv_gbnf *g, uint32_t *rule)
{
    uint8_t *nullable = calloc(g->n_rules, 2);
    frame *st = malloc(g->n_rules * sizeof *st);
    int rc = nullable && st ? find_nullable(g, nullable) : -1;
    uint8_t *color = nullable + g->n_rules;
    for (uint32_t r = 0; !rc && r < g->n_rules; r++)
        if (!color[r]) rc = dfs(g, nullable, color, st, r, rule);
    free(nullable);
    free(st);
    return rc;
}
