/* The compiled form of a GBNF grammar, shared by the parser and the recognizer.
 *
 * Each rule is a run of elements: its alternatives one after another, GE_ALT between
 * them, GE_END after the last. A terminal is GE_CHAR (matches a code point inside one of
 * its ranges) or GE_NCHAR (outside all of them; `.` is GE_NCHAR with no range). GE_REF
 * names a rule. Repetitions and groups are expanded into generated rules. */
#ifndef SKV_GRAMMAR_GBNF_INT_H
#define SKV_GRAMMAR_GBNF_INT_H

#include "grammar/gbnf.h"

enum { GE_END = 0, GE_ALT, GE_REF, GE_CHAR, GE_NCHAR };

typedef struct skv_gel {
    uint32_t type; /* GE_* */
    uint32_t a;    /* GE_REF: the rule; GE_CHAR/GE_NCHAR: first range */
    uint32_t n;    /* GE_CHAR/GE_NCHAR: number of ranges */
} skv_gel;

struct skv_gbnf {
    skv_gel *el;          /* every rule's elements */
    size_t n_el;
    uint32_t *rule_at;    /* n_rules: index of the rule's first element */
    uint32_t *alt_off;    /* n_rules + 1: the rule's alternatives in alts[] */
    uint32_t *alts;       /* start element of each alternative */
    uint32_t (*rng)[2];   /* code point ranges, inclusive */
    size_t n_rng;
    uint32_t n_rules, root;
};

static inline int skv_gel_is_end(const skv_gel *e) { return e->type == GE_END || e->type == GE_ALT; }
static inline int skv_gel_is_char(const skv_gel *e) { return e->type == GE_CHAR || e->type == GE_NCHAR; }

/* A vocabulary for masks (gbnf_vocab.c): texts sorted by bytes, each with its id. */
typedef struct skv_gvtext {
    const char *text;
    uint32_t len, id;
} skv_gvtext;

struct skv_gvocab {
    skv_gvtext *t; /* sorted */
    char *bytes;   /* every text, one after another */
    size_t n;
    uint32_t max_len;
};

/* Grows *v (of *cap items of sz bytes) to hold need items, doubling: 0, or -1 (unchanged). */
int skv_gbnf_grow(void **v, size_t *cap, size_t need, size_t sz);

/* gbnf_check.c: 1 with *rule set when some rule can reach itself without consuming a
 * character (left recursion, direct or through nullable rules), else 0 (-1: out of memory). */
int skv_gbnf_left_recursive(const skv_gbnf *g, uint32_t *rule);

#endif
