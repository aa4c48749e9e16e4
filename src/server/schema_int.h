/* The JSON-schema converter's shared state (schema.c: rules and strings; schema_visit.c:
 * the keywords). Private to src/server/. */
#ifndef SKV_SERVER_SCHEMA_INT_H
#define SKV_SERVER_SCHEMA_INT_H

#include <jansson.h>
#include <stddef.h>
#include "core/util.h"

#define SC_MAX_RULES 4096
#define SC_MAX_DEPTH 64
#define SC_MAX_ITEMS 10000 /* minItems/maxItems/minLength/maxLength bounds we expand */
#define SC_SPACE_RULE "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}"

typedef struct sc_prim {
    const char *name, *body, *deps[6];
} sc_prim;

typedef struct sc_rule {
    char *name, *body;
} sc_rule;

typedef struct sc {
    const json_t *root; /* the whole schema, for "#/..." references */
    sc_rule *rules;
    size_t n, cap;
    const char **resolving; /* $refs being expanded (recursion ends at their names) */
    size_t n_resolving;
    int depth, failed;
    skv_err *err;
} sc;

const sc_prim *sc_prim_find(const char *name);
void sc_fail(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *sc_strf(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *sc_literal(sc *c, const char *s, size_t n);
char *sc_const(sc *c, const json_t *v);
void sc_json_free(void *p);
char *sc_esc_name(sc *c, const char *name);
int sc_rule_find(const sc *c, const char *name);
const char *sc_add_rule(sc *c, const char *name, char *body);
const char *sc_add_prim(sc *c, const char *name, const sc_prim *p);
int sc_refuse_unsupported(sc *c, const json_t *s);
void sc_free(sc *c);
/* The rule for schema s under the name hint `name` ("" at the top); NULL on failure. */
const char *sc_visit(sc *c, const json_t *s, const char *name);
/* build_repetition of llama.cpp: item repeated min..max (max < 0: unbounded), separated. */
char *sc_repeat(sc *c, const char *item, long min, long max, const char *sep);
/* An integer range as a GBNF expression (schema_int.c). */
char *sc_int_range(sc *c, int has_min, long long min, int has_max, long long max);

#endif
