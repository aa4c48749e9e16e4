/* JSON schema -> GBNF, after llama.cpp's json-schema-to-grammar (common/ there): the same
 * rules for what a schema allows, so the same logits give the same tokens. Rule names
 * follow its scheme (root, space, the primitives, name-suffix), each rule added once.
 * Not ported: remote $refs, and what llama.cpp ignores silently (not, if/then/else,
 * patternProperties, uniqueItems, multipleOf, ...): those are refused here by name. */
#include "core/fpguard.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "server/schema.h"
#include "server/schema_int.h"

static const sc_prim k_prims[] = {
    {"boolean", "(\"true\" | \"false\")", {NULL}},
    {"decimal-part", "[0-9]{1,16}", {NULL}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {NULL}},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?", {"integral-part", "decimal-part"}},
    {"integer", "(\"-\"? integral-part)", {"integral-part"}},
    {"value", "object | array | string | number | boolean | null", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space \"}\"", {"string", "value"}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"value"}},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"", {NULL}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {NULL}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char"}},
    {"null", "\"null\"", {NULL}},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", {NULL}},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", {NULL}},
    {"date-time", "date \"T\" time", {"date", "time"}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date"}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time"}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time"}},
};

const sc_prim *sc_prim_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof k_prims / sizeof *k_prims; i++)
        if (!strcmp(k_prims[i].name, name)) return &k_prims[i];
    return NULL;
}

/* Keywords that constrain values and that this converter does not implement. */
static const char *const k_refused[] = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "contains", "minContains", "maxContains", "multipleOf", "minProperties", "maxProperties",
    "unevaluatedProperties", "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef",
};

void sc_fail(sc *c, const char *fmt, ...)
{
    va_list ap;
    if (c->failed) return;
    c->failed = 1;
    va_start(ap, fmt);
    skv_vfail(c->err, SKV_ERR_INVALID_ARG, fmt, ap);
    va_end(ap);
}

/* ---- strings ---- */
char *sc_strf(sc *c, const char *fmt, ...)
{
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) vsnprintf(s, (size_t)n + 1, fmt, aq);
    else sc_fail(c, "out of memory");
    va_end(aq);
    return s;
}

/* A GBNF literal of the bytes s (quotes, backslashes and control characters escaped). */
char *sc_literal(sc *c, const char *s, size_t n)
{
    char *o = malloc(n * 4 + 3), *p = o;
    if (!o) return sc_fail(c, "out of memory"), NULL;
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') *p++ = '\\', *p++ = (char)ch;
        else if (ch == '\n') *p++ = '\\', *p++ = 'n';
        else if (ch == '\r') *p++ = '\\', *p++ = 'r';
        else if (ch < 0x20 || ch == 0x7F) p += sprintf(p, "\\x%02X", ch);
        else *p++ = (char)ch;
    }
    *p++ = '"';
    *p = 0;
    return o;
}

/* Frees what jansson allocated (json_dumps): with its allocator, which the server sets. */
void sc_json_free(void *p)
{
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    if (p) f(p);
}

/* The literal of a JSON value as llama.cpp writes it (compact, keys sorted). */
char *sc_const(sc *c, const json_t *v)
{
    char *d = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *lit = d ? sc_literal(c, d, strlen(d)) : NULL;
    if (!d) sc_fail(c, "out of memory");
    sc_json_free(d);
    return lit;
}

/* ---- rules ---- */
char *sc_esc_name(sc *c, const char *name)
{
    char *o = malloc(strlen(name) + 1), *p = o;
    if (!o) return sc_fail(c, "out of memory"), NULL;
    for (const char *s = name; *s; s++) {
        int ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-';
        if (ok) *p++ = *s;
        else if (p == o || p[-1] != '-') *p++ = '-';
    }
    *p = 0;
    return o;
}

int sc_rule_find(const sc *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->rules[i].name, name)) return (int)i;
    return -1;
}

static const char *rule_put(sc *c, char *name, char *body)
{
    if (c->n >= SC_MAX_RULES) return sc_fail(c, "schema too large (over %d rules)", SC_MAX_RULES), free(name), free(body), NULL;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        void *t = realloc(c->rules, cap * sizeof *c->rules);
        if (!t) return sc_fail(c, "out of memory"), free(name), free(body), NULL;
        c->rules = t, c->cap = cap;
    }
    c->rules[c->n++] = (sc_rule){name, body};
    return name;
}

/* Adds `name ::= body` (body is taken over): the name used, made unique as llama.cpp does. */
const char *sc_add_rule(sc *c, const char *name, char *body)
{
    char *base = body ? sc_esc_name(c, name) : NULL;
    if (!base) return free(body), NULL;
    int at = sc_rule_find(c, base);
    if (at < 0) return rule_put(c, base, body);
    if (!strcmp(c->rules[at].body, body)) return free(base), free(body), c->rules[at].name;
    for (int i = 0;; i++) {
        char *k = sc_strf(c, "%s%d", base, i);
        if (!k) return free(base), free(body), NULL;
        at = sc_rule_find(c, k);
        if (at < 0) return free(base), rule_put(c, k, body);
        if (!strcmp(c->rules[at].body, body)) return free(base), free(body), free(k), c->rules[at].name;
        free(k);
    }
}

const char *sc_add_prim(sc *c, const char *name, const sc_prim *p)
{
    char *body = sc_strf(c, "%s", p->body);
    const char *n = sc_add_rule(c, name, body);
    for (int i = 0; n && i < 6 && p->deps[i]; i++)
        if (sc_rule_find(c, p->deps[i]) < 0 && !sc_add_prim(c, p->deps[i], sc_prim_find(p->deps[i]))) return NULL;
    return n;
}

/* ---- refusals ---- */
int sc_refuse_unsupported(sc *c, const json_t *s)
{
    for (size_t i = 0; i < sizeof k_refused / sizeof *k_refused; i++)
        if (json_object_get(s, k_refused[i]))
            return sc_fail(c, "json schema: \"%s\" is not supported (docs/server.md, \"Constrained output\")", k_refused[i]), -1;
    if (json_is_true(json_object_get(s, "uniqueItems")))
        return sc_fail(c, "json schema: \"uniqueItems\" is not supported (docs/server.md, \"Constrained output\")"), -1;
    const char *t = json_string_value(json_object_get(s, "type"));
    int bounds = json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
                 json_object_get(s, "exclusiveMaximum");
    if (bounds && !(t && !strcmp(t, "integer")))
        return sc_fail(c, "json schema: minimum/maximum are supported on \"type\": \"integer\" only"), -1;
    return 0;
}

void sc_free(sc *c)
{
    for (size_t i = 0; i < c->n; i++) free(c->rules[i].name), free(c->rules[i].body);
    free(c->rules);
    free(c->resolving);
}

static char *format_grammar(sc *c)
{
    size_t len = 1;
    for (size_t i = 0; i < c->n; i++) len += strlen(c->rules[i].name) + strlen(c->rules[i].body) + 6;
    char *o = malloc(len), *p = o;
    if (!o) return sc_fail(c, "out of memory"), NULL;
    for (size_t i = 0; i < c->n; i++) p += sprintf(p, "%s ::= %s\n", c->rules[i].name, c->rules[i].body);
    *p = 0;
    return o;
}

/* The grammar made must parse (a pattern's class such as [z-a] is copied as written and
 * only the GBNF parser sees that it is upside down): 0, or -1 with err. */
static int check_grammar(const char *text, skv_err *err)
{
    skv_err sub = {0};
    skv_gbnf *g = NULL;
    if (!skv_gbnf_parse(text, strlen(text), "root", &g, &sub)) return skv_gbnf_free(g), 0;
    skv_fail(err, SKV_ERR_INVALID_ARG, "json schema: its grammar is refused (a pattern?): %.199s", sub.msg);
    return -1;
}

char *srv_schema_to_gbnf(const json_t *schema, skv_err *err)
{
    sc c = {.root = schema, .err = err};
    char *out = NULL;
    skv_err_clear(err);
    sc_add_rule(&c, "space", sc_strf(&c, "%s", SC_SPACE_RULE));
    if (!c.failed) sc_visit(&c, schema, "");
    if (!c.failed) out = format_grammar(&c);
    sc_free(&c);
    return out && check_grammar(out, err) ? (free(out), NULL) : out;
}
