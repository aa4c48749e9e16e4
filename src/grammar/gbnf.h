/* GBNF grammars (llama.cpp's grammar format, grammars/README.md there) and a recognizer
 * that says which token texts may come next: constrained sampling for seqkv serve.
 *
 * Layer: grammar (rank 1, above core only). Internal: the library API is include/seqkv.h.
 *
 * The grammar: `name ::= alternatives` rules; alternatives `a | b`; sequences; "literals"
 * with escapes (\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH); [char classes] with ranges
 * and ^ negation; `.` (any character); (groups); repetition `* + ?` and `{m}` `{m,}`
 * `{m,n}`; `#` comments. A rule ends at a newline outside parentheses (a newline after `|`
 * or inside a group continues it). Characters are Unicode code points; input bytes are
 * UTF-8 (a token may end inside a character: checked for a possible completion).
 *
 * Hostile-input safety: the text, the expanded grammar, nesting, repetition counts and the
 * recognizer's stacks are bounded (SKV_GBNF_MAX_*); left recursion, undefined rules and a
 * missing root are refused with a message naming the line and column or the rule. */
#ifndef SKV_GRAMMAR_GBNF_H
#define SKV_GRAMMAR_GBNF_H

#include <stddef.h>
#include <stdint.h>
#include "core/util.h"

#define SKV_GBNF_MAX_TEXT (1u << 20)      /* bytes of grammar text */
#define SKV_GBNF_MAX_ELEMENTS (1u << 18)  /* elements after expanding repetitions */
#define SKV_GBNF_MAX_RULES 65536          /* rules, the generated ones included */
#define SKV_GBNF_MAX_NEST 128             /* nested groups */
#define SKV_GBNF_MAX_REPEAT 10000         /* m and n of {m,n} */
#define SKV_GBNF_MAX_STACKS 1024          /* recognizer: parse stacks alive at once */
#define SKV_GBNF_MAX_DEPTH 1024           /* recognizer: elements on one stack */
#define SKV_GBNF_MAX_SET (1u << 15)       /* recognizer: elements of the stacks alive at once */
#define SKV_GBNF_MAX_WORK (1u << 27)      /* recognizer: element operations in one call */

typedef struct skv_gbnf skv_gbnf;     /* a parsed grammar (immutable, shareable) */
typedef struct skv_gmatch skv_gmatch; /* a recognizer over one grammar (one thread) */

/* Parses text (len bytes) with start rule `root`. 0, or -1 with err set ("line L col C: ..."). */
int skv_gbnf_parse(const char *text, size_t len, const char *root, skv_gbnf **out, skv_err *err);
void skv_gbnf_free(skv_gbnf *g);
size_t skv_gbnf_n_rules(const skv_gbnf *g);

/* A recognizer at the start of the root rule; NULL when out of memory or when the start
 * already nests past SKV_GBNF_MAX_DEPTH. A start past a bound on work gives a recognizer
 * that refuses everything, each call with skv_gmatch_exhausted() set. */
skv_gmatch *skv_gmatch_new(const skv_gbnf *g);
void skv_gmatch_free(skv_gmatch *m);
/* 1 when the n bytes s could come next (the state does not change), else 0. */
int skv_gmatch_accepts(skv_gmatch *m, const char *s, size_t n);
/* Consumes the n bytes s: 0, or -1 (state unchanged) when the grammar refuses them. */
int skv_gmatch_feed(skv_gmatch *m, const char *s, size_t n);
/* 1 when the last accepts, feed or mask call refused something for its cost, not for the
 * grammar: a bound on work was hit (SKV_GBNF_MAX_WORK stack-element operations in the
 * call, a cap per character, SKV_GBNF_MAX_STACKS or SKV_GBNF_MAX_SET), as nested ambiguous
 * repetitions do. Past SKV_GBNF_MAX_DEPTH (nesting) a text is just refused. */
int skv_gmatch_exhausted(const skv_gmatch *m);
/* 1 when the input so far is a whole sentence of the grammar (end of text allowed here). */
int skv_gmatch_accepting(const skv_gmatch *m);
/* 1 when some continuation is still possible (the input is not finished by force). */
int skv_gmatch_can_continue(const skv_gmatch *m);
/* A token vocabulary for masks: n texts (lens[i] bytes each, copied), kept sorted so that
 * texts sharing a prefix share its recognition. NULL when out of memory. */
typedef struct skv_gvocab skv_gvocab;
skv_gvocab *skv_gvocab_new(const char *const *texts, const uint32_t *lens, size_t n);
void skv_gvocab_free(skv_gvocab *v);
size_t skv_gvocab_size(const skv_gvocab *v);
/* allow[i] = 1 when text i (not empty) could come next, else 0 (the same answers as
 * skv_gmatch_accepts on each text); allow has skv_gvocab_size(v) entries. */
void skv_gmatch_mask(skv_gmatch *m, const skv_gvocab *v, uint8_t *allow);

#endif
