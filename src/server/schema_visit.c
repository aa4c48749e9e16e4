/* The schema keywords, in llama.cpp's order of precedence (its visit()): $ref, anyOf/oneOf,
 * a list of types, const, enum, objects, allOf, arrays, pattern, format, string lengths,
 * integer bounds, then the primitives. Each returns the name of the rule it added. */
#include "core/fpguard.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/schema.h"
#include "server/schema_int.h"

static const char *str_of(const json_t *s, const char *key) { return json_string_value(json_object_get(s, key)); }
static int is_type(const json_t *s, const char *t)
{
    const char *v = str_of(s, "type");
    return v && !strcmp(v, t);
}
static int valid_type(const char *t)
{
    static const char *const k[] = {"string", "number", "integer", "boolean", "null", "array", "object"};
    for (size_t i = 0; t && i < sizeof k / sizeof *k; i++)
        if (!strcmp(k[i], t)) return 1;
    return 0;
}
static int no_type(const json_t *s) { return !json_object_get(s, "type"); }

/* name + "-" + suffix, or suffix alone at the top. */
static char *sub_name(sc *c, const char *name, const char *suffix)
{
    return sc_strf(c, "%s%s%s", name, *name ? "-" : "", suffix);
}

/* A rule `name ::= body` for a sub-name (name-suffix); body taken over. */
static const char *add_sub(sc *c, const char *name, const char *suffix, char *body)
{
    char *n = sub_name(c, name, suffix);
    const char *r = n ? sc_add_rule(c, n, body) : (free(body), NULL);
    free(n);
    return r;
}

/* ---- growing strings ---- */
typedef struct sb {
    sc *c;
    char *s;
    size_t n, cap;
} sb;

static void sb_add(sb *b, const char *s)
{
    size_t k = s ? strlen(s) : 0;
    if (!s) b->c->failed = 1;
    if (b->c->failed) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *t = realloc(b->s, cap);
        if (!t) return sc_fail(b->c, "out of memory");
        b->s = t, b->cap = cap;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

static char *sb_take(sb *b)
{
    if (b->c->failed) return free(b->s), NULL;
    return b->s ? b->s : sc_strf(b->c, "%s", "");
}

char *sc_repeat(sc *c, const char *item, long min, long max, const char *sep)
{
    if (max == 0) return sc_strf(c, "%s", "");
    if (min == 0 && max == 1) return sc_strf(c, "%s?", item);
    if (!sep) {
        if (max < 0) return min <= 1 ? sc_strf(c, "%s%s", item, min ? "+" : "*") : sc_strf(c, "%s{%ld,}", item, min);
        return sc_strf(c, "%s{%ld,%ld}", item, min, max);
    }
    char *grp = sc_strf(c, "(%s %s)", sep, item);
    char *rest = grp ? sc_repeat(c, grp, min ? min - 1 : 0, max < 0 ? -1 : max - 1, NULL) : NULL;
    char *r = rest ? sc_strf(c, min ? "%s %s" : "(%s %s)?", item, rest) : NULL;
    free(grp), free(rest);
    return r;
}

/* ---- $ref: local JSON pointers only ---- */
static const json_t *pointer(sc *c, const char *ref)
{
    const json_t *t = c->root;
    const char *p = ref + 1;
    while (t && *p == '/') {
        char key[256];
        size_t n = strcspn(++p, "/");
        if (n >= sizeof key) return NULL;
        memcpy(key, p, n);
        key[n] = 0;
        t = json_is_array(t) ? json_array_get(t, strtoul(key, NULL, 10)) : json_object_get(t, key);
        p += n;
    }
    return *p ? NULL : t;
}

static int resolving(const sc *c, const char *ref)
{
    for (size_t i = 0; i < c->n_resolving; i++)
        if (!strcmp(c->resolving[i], ref)) return 1;
    return 0;
}

static const char *visit_ref(sc *c, const json_t *refv, const char *rule_name)
{
    const char *ref = json_string_value(refv);
    const json_t *target = ref && ref[0] == '#' ? pointer(c, ref) : NULL;
    if (!target)
        return sc_fail(c, "json schema: unsupported or unresolvable \"$ref\" %.80s (local \"#/...\" only)",
                       ref ? ref : "(not a string)"), NULL;
    char *raw = sc_strf(c, "ref%s", ref + 1), *name = raw ? sc_esc_name(c, raw) : NULL;
    const char *r = name;
    free(raw);
    if (name && sc_rule_find(c, name) < 0 && !resolving(c, ref)) {
        const char **t = realloc(c->resolving, (c->n_resolving + 1) * sizeof *t);
        if (!t) return free(name), sc_fail(c, "out of memory"), NULL;
        c->resolving = t;
        c->resolving[c->n_resolving++] = ref;
        r = sc_visit(c, target, name);
        c->n_resolving--;
    }
    r = r ? sc_add_rule(c, rule_name, sc_strf(c, "%s", r)) : NULL;
    free(name);
    return r;
}

/* ---- unions: anyOf/oneOf, and a list of types ---- */
static const char *visit_union(sc *c, const json_t *alts, const json_t *typed_from, const char *name, const char *rule_name)
{
    sb b = {c, NULL, 0, 0};
    size_t i;
    const json_t *a;
    if (!json_array_size(alts)) return sc_fail(c, "json schema: anyOf/oneOf/type lists must be non-empty arrays"), NULL;
    json_array_foreach(alts, i, a) {
        json_t *alt = typed_from ? json_deep_copy(typed_from) : NULL;
        if (typed_from && (!alt || json_object_set_new(alt, "type", json_deep_copy(a)))) sc_fail(c, "out of memory");
        char *n = sc_strf(c, "%s%s%zu", name, *name ? "-" : "alternative-", i);
        const char *r = n && !c->failed ? sc_visit(c, typed_from ? alt : a, n) : NULL;
        json_decref(alt);
        free(n);
        if (i) sb_add(&b, " | ");
        sb_add(&b, r);
    }
    return sc_add_rule(c, rule_name, sb_take(&b));
}

static const char *visit_enum(sc *c, const json_t *vals, const char *rule_name)
{
    sb b = {c, NULL, 0, 0};
    size_t i;
    const json_t *v;
    if (!json_is_array(vals) || !json_array_size(vals)) return sc_fail(c, "json schema: \"enum\" must be a non-empty array"), NULL;
    sb_add(&b, "(");
    json_array_foreach(vals, i, v) {
        char *lit = sc_const(c, v);
        if (i) sb_add(&b, " | ");
        sb_add(&b, lit);
        free(lit);
    }
    sb_add(&b, ")");
    return sc_add_rule(c, rule_name, sb_take(&b));
}

/* ---- objects ---- */
typedef struct props {
    const char **names;   /* in order */
    const char **kv;      /* each one's key-value rule */
    int *req;
    size_t n;
    const char *extra_kv; /* additionalProperties' rule, or NULL */
} props;

/* llama.cpp's get_recursive_refs: optional properties from i on, each optional after the first. */
static char *optional_tail(sc *c, const props *p, const size_t *opt, size_t n_opt, size_t i, int first_optional,
                           const char *name)
{
    const char *kv = opt[i] == SIZE_MAX ? p->extra_kv : p->kv[opt[i]];
    int star = opt[i] == SIZE_MAX;
    char *res = first_optional ? sc_strf(c, "( \",\" space %s )%s", kv, star ? "*" : "?")
                               : star ? sc_strf(c, "%s ( \",\" space %s )*", kv, kv) : sc_strf(c, "%s", kv);
    if (!res || i + 1 >= n_opt) return res;
    char *rest = optional_tail(c, p, opt, n_opt, i + 1, 1, name);
    char *suffix = sc_strf(c, "%s-rest", star ? "*" : p->names[opt[i]]);
    const char *rn = rest && suffix ? add_sub(c, name, suffix, rest) : (free(rest), NULL);
    free(suffix);
    char *out = rn ? sc_strf(c, "%s %s", res, rn) : NULL;
    free(res);
    return out;
}

static char *object_body(sc *c, const props *p, const char *name)
{
    sb b = {c, NULL, 0, 0};
    size_t opt[SC_MAX_RULES], n_opt = 0, n_req = 0;
    for (size_t i = 0; i < p->n && n_opt < SC_MAX_RULES - 1; i++)
        if (!p->req[i]) opt[n_opt++] = i;
    if (p->extra_kv) opt[n_opt++] = SIZE_MAX;
    sb_add(&b, "\"{\" space ");
    for (size_t i = 0; i < p->n; i++)
        if (p->req[i]) sb_add(&b, n_req++ ? " \",\" space " : ""), sb_add(&b, p->kv[i]);
    if (!p->n && !p->extra_kv) return free(b.s), sc_strf(c, "%s", "\"{\" space \"}\"");
    if (n_opt) {
        sb_add(&b, n_req ? " ( \",\" space ( " : " (");
        for (size_t i = 0; i < n_opt; i++) {
            char *t = optional_tail(c, p, opt, n_opt, i, 0, name);
            sb_add(&b, i ? " | " : ""), sb_add(&b, t);
            free(t);
        }
        sb_add(&b, n_req ? " ) )?" : " )?");
    }
    sb_add(&b, " space \"}\"");
    return sb_take(&b);
}

static int by_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* One trie node of llama.cpp's _not_strings: s[0..n) share their first d bytes. */
static void not_node(sc *c, sb *b, const char **s, size_t n, size_t d, const char *ch_rule)
{
    char rejects[1024] = "", buf[16];
    int first = 1;
    for (size_t i = 0, j; i < n; i = j) {
        j = i + 1;
        if (strlen(s[i]) == d) continue;
        unsigned char ch = (unsigned char)s[i][d];
        int more = strlen(s[i]) > d + 1, end = !more;
        while (j < n && strlen(s[j]) > d && (unsigned char)s[j][d] == ch) more |= strlen(s[j]) > d + 1, end |= strlen(s[j]) == d + 1, j++;
        if (ch >= 0x80) return sc_fail(c, "json schema: additionalProperties next to non-ASCII property names is not supported");
        snprintf(buf, sizeof buf, "\\x%02X", ch);
        if (strlen(rejects) + 5 < sizeof rejects) strcat(rejects, buf);
        sb_add(b, first ? "[" : " | ["), sb_add(b, buf), sb_add(b, "]");
        first = 0;
        if (more) sb_add(b, " ("), not_node(c, b, s + i, j - i, d + 1, ch_rule), sb_add(b, ")");
        else if (end) sb_add(b, " "), sb_add(b, ch_rule), sb_add(b, "+");
    }
    if (!first) sb_add(b, " | [^\""), sb_add(b, rejects), sb_add(b, "] "), sb_add(b, ch_rule), sb_add(b, "*");
}

static char *not_strings(sc *c, const char **names, size_t n)
{
    sb b = {c, NULL, 0, 0};
    const char *ch = sc_add_prim(c, "char", sc_prim_find("char"));
    const char **s = malloc((n ? n : 1) * sizeof *s);
    int root_end = 0;
    if (!s || !ch) return free(s), sc_fail(c, "out of memory"), NULL;
    memcpy(s, names, n * sizeof *s);
    qsort(s, n, sizeof *s, by_str);
    for (size_t i = 0; i < n; i++) root_end |= !*s[i];
    sb_add(&b, "[\"] ( ");
    not_node(c, &b, s, n, 0, ch);
    sb_add(&b, root_end ? " ) [\"]" : " )? [\"]");
    free(s);
    return sb_take(&b);
}

static const char *extra_kv(sc *c, const json_t *add, const props *p, const char *name)
{
    char *sub = sub_name(c, name, "additional"), *vn = sub ? sc_strf(c, "%s-value", sub) : NULL;
    const char *val = !vn ? NULL : json_is_object(add) ? sc_visit(c, add, vn) : sc_add_prim(c, "value", sc_prim_find("value"));
    const char *key = !val ? NULL : !p->n ? sc_add_prim(c, "string", sc_prim_find("string"))
                                          : add_sub(c, sub, "k", not_strings(c, p->names, p->n));
    const char *kv = key ? add_sub(c, sub, "kv", sc_strf(c, "%s \":\" space %s", key, val)) : NULL;
    free(sub), free(vn);
    return kv;
}

static int is_required(const json_t *req, const char *k)
{
    size_t i;
    const json_t *v;
    json_array_foreach(req, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), k)) return 1;
    return 0;
}

/* One property: its value's rule and its key-value rule. */
static const char *prop_kv(sc *c, const char *name, const char *k, const json_t *v)
{
    char *pn = sub_name(c, name, k), *kvn = pn ? sc_strf(c, "%s-kv", pn) : NULL;
    json_t *ks = json_string(k);
    char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL, *lit = kd ? sc_literal(c, kd, strlen(kd)) : NULL;
    const char *vr = lit && kvn ? sc_visit(c, v, pn) : NULL;
    const char *r = vr ? sc_add_rule(c, kvn, sc_strf(c, "%s space \":\" space %s", lit, vr)) : NULL;
    if (!ks || !kd) sc_fail(c, "out of memory");
    json_decref(ks), sc_json_free(kd), free(lit), free(pn), free(kvn);
    return r;
}

/* properties (an object of schemas, or NULL), required flags via req or all_required. */
static const char *build_object(sc *c, json_t *const *prop_objs, const int *prop_req, size_t n_objs, const json_t *req,
                                const json_t *add, const char *name, const char *rule_name)
{
    size_t cap = 0, n = 0;
    for (size_t i = 0; i < n_objs; i++) cap += json_object_size(prop_objs[i]);
    props p = {calloc(cap + 1, sizeof *p.names), calloc(cap + 1, sizeof *p.kv), calloc(cap + 1, sizeof *p.req), 0, NULL};
    if (!p.names || !p.kv || !p.req) sc_fail(c, "out of memory");
    for (size_t i = 0; i < n_objs && !c->failed; i++) {
        const char *k;
        const json_t *v;
        json_object_foreach(prop_objs[i], k, v) {
            p.names[n] = k, p.req[n] = prop_req ? prop_req[i] : is_required(req, k);
            if (!(p.kv[n++] = prop_kv(c, name, k, v))) break;
        }
    }
    p.n = n;
    if (!c->failed && (json_is_true(add) || json_is_object(add))) p.extra_kv = extra_kv(c, add, &p, name);
    char *body = c->failed ? NULL : object_body(c, &p, name);
    free(p.names), free(p.kv), free(p.req);
    return body ? sc_add_rule(c, rule_name, body) : NULL;
}

/* allOf: the properties of its object components merged (anyOf inside: optional). */
static int all_of_part(sc *c, const json_t *t, int req, json_t **objs, int *reqs, size_t *n)
{
    if (json_object_get(t, "$ref")) t = pointer(c, json_string_value(json_object_get(t, "$ref")) ? json_string_value(json_object_get(t, "$ref")) : "");
    if (!t || !json_is_object(json_object_get(t, "properties")) || *n >= 64)
        return sc_fail(c, "json schema: allOf supports object components with \"properties\" (or $refs to them) only"), -1;
    objs[*n] = json_object_get(t, "properties"), reqs[(*n)++] = req;
    return 0;
}

static const char *visit_all_of(sc *c, const json_t *all, const char *name, const char *rule_name)
{
    json_t *objs[64];
    const json_t *t, *u;
    int reqs[64];
    size_t n = 0, i, k;
    if (!json_is_array(all)) return sc_fail(c, "json schema: \"allOf\" must be an array"), NULL;
    json_array_foreach(all, i, t) {
        const json_t *any = json_object_get(t, "anyOf");
        if (!json_is_array(any) && all_of_part(c, t, 1, objs, reqs, &n)) return NULL;
        json_array_foreach(any, k, u) if (all_of_part(c, u, 0, objs, reqs, &n)) return NULL;
    }
    return build_object(c, objs, reqs, n, NULL, NULL, name, rule_name);
}

static long count_of(sc *c, const json_t *s, const char *key, long dflt)
{
    const json_t *v = json_object_get(s, key);
    if (!v) return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SC_MAX_ITEMS)
        return sc_fail(c, "json schema: \"%s\" must be an integer 0..%d", key, SC_MAX_ITEMS), -2;
    return (long)json_integer_value(v);
}

static const char *visit_array(sc *c, const json_t *s, const char *name, const char *rule_name)
{
    const json_t *items = json_object_get(s, "items") ? json_object_get(s, "items") : json_object_get(s, "prefixItems"), *it;
    sb b = {c, NULL, 0, 0};
    size_t i;
    sb_add(&b, "\"[\" space ");
    if (json_is_array(items)) {
        json_array_foreach(items, i, it) {
            char *suffix = sc_strf(c, "tuple-%zu", i), *n = suffix ? sub_name(c, name, suffix) : NULL;
            sb_add(&b, i ? " \",\" space " : ""), sb_add(&b, n ? sc_visit(c, it, n) : NULL);
            free(suffix), free(n);
        }
    } else {
        char *n = sub_name(c, name, "item");
        const char *item = n ? sc_visit(c, items, n) : NULL;
        long lo = count_of(c, s, "minItems", 0), hi = count_of(c, s, "maxItems", -1);
        char *rep = item && lo >= 0 && hi >= -1 ? sc_repeat(c, item, lo, hi, "\",\" space") : NULL;
        if (hi >= 0 && lo > hi) sc_fail(c, "json schema: minItems above maxItems");
        sb_add(&b, rep);
        free(n), free(rep);
    }
    sb_add(&b, " space \"]\"");
    return sc_add_rule(c, rule_name, sb_take(&b));
}

static const char *visit_pattern(sc *c, const json_t *pat, const char *rule_name)
{
    const char *p = json_string_value(pat);
    size_t n = p ? json_string_length(pat) : 0;
    char *expr = NULL;
    if (!p || n < 2 || p[0] != '^' || p[n - 1] != '$')
        return sc_fail(c, "json schema: \"pattern\" must be a string anchored with ^ and $"), NULL;
    const char *dot = sc_add_rule(c, "dot", sc_strf(c, "%s", "[^\\x0A\\x0D]"));
    if (!dot || srv_regex_to_gbnf(p + 1, n - 2, dot, &expr, c->err)) return c->failed = 1, NULL;
    char *body = sc_strf(c, "\"\\\"\" (%s) \"\\\"\"", expr);
    free(expr);
    return sc_add_rule(c, rule_name, body);
}

static const char *visit_string(sc *c, const json_t *s, const char *rule_name)
{
    const char *fmt = str_of(s, "format");
    if (json_object_get(s, "pattern")) return visit_pattern(c, json_object_get(s, "pattern"), rule_name);
    if (fmt && !strncmp(fmt, "uuid", 4) && (!fmt[4] || (fmt[4] >= '1' && fmt[4] <= '5' && !fmt[5])))
        return sc_add_prim(c, !strcmp(rule_name, "root") ? "root" : fmt, sc_prim_find("uuid"));
    if (fmt && (!strcmp(fmt, "date") || !strcmp(fmt, "time") || !strcmp(fmt, "date-time"))) {
        char *pn = sc_strf(c, "%s-string", fmt);
        const char *r = pn ? sc_add_prim(c, pn, sc_prim_find(pn)) : NULL;
        free(pn);
        return r ? sc_add_rule(c, rule_name, sc_strf(c, "%s", r)) : NULL;
    }
    if (fmt) return sc_fail(c, "json schema: string format \"%.40s\" is not supported (uuid, date, time, date-time)", fmt), NULL;
    const char *ch = sc_add_prim(c, "char", sc_prim_find("char"));
    long lo = count_of(c, s, "minLength", 0), hi = count_of(c, s, "maxLength", -1);
    if (!ch || lo < 0 || hi < -1) return NULL;
    if (hi >= 0 && lo > hi) return sc_fail(c, "json schema: minLength above maxLength"), NULL;
    char *rep = sc_repeat(c, ch, lo, hi, NULL);
    char *body = rep ? sc_strf(c, "\"\\\"\" %s \"\\\"\"", rep) : NULL;
    free(rep);
    return sc_add_rule(c, rule_name, body);
}

static int bound_of(sc *c, const json_t *s, const char *key, const char *excl, int dir, long long *v)
{
    const json_t *x = json_object_get(s, key), *e = json_object_get(s, excl);
    if (!x && !e) return 0;
    x = x ? x : e;
    if (!json_is_integer(x)) return sc_fail(c, "json schema: \"%s\" must be an integer here", x == e ? excl : key), -1;
    *v = json_integer_value(x) + (x == e ? dir : 0);
    return 1;
}

static const char *visit_int_range(sc *c, const json_t *s, const char *rule_name)
{
    long long lo = 0, hi = 0;
    int has_lo = bound_of(c, s, "minimum", "exclusiveMinimum", 1, &lo), has_hi = bound_of(c, s, "maximum", "exclusiveMaximum", -1, &hi);
    if (has_lo < 0 || has_hi < 0) return NULL;
    if (has_lo && has_hi && lo > hi) return sc_fail(c, "json schema: minimum above maximum"), NULL;
    char *r = sc_int_range(c, has_lo, lo, has_hi, hi);
    char *body = r ? sc_strf(c, "(%s)", r) : NULL;
    free(r);
    return sc_add_rule(c, rule_name, body);
}

static const char *visit_typed(sc *c, const json_t *s, const char *name, const char *rule_name)
{
    const char *t = str_of(s, "type");
    int obj_like = no_type(s) || is_type(s, "object");
    json_t *pr = json_object_get(s, "properties"), *add = json_object_get(s, "additionalProperties");
    if (obj_like && (pr || (add && !json_is_true(add)))) {
        if (pr && !json_is_object(pr)) return sc_fail(c, "json schema: \"properties\" must be an object"), NULL;
        return build_object(c, &pr, NULL, pr ? 1 : 0, json_object_get(s, "required"), add, name, rule_name);
    }
    if ((obj_like || is_type(s, "string")) && json_object_get(s, "allOf")) return visit_all_of(c, json_object_get(s, "allOf"), name, rule_name);
    if ((no_type(s) || is_type(s, "array")) && (json_object_get(s, "items") || json_object_get(s, "prefixItems")))
        return visit_array(c, s, name, rule_name);
    if ((no_type(s) && (json_object_get(s, "pattern") || json_object_get(s, "format"))) || is_type(s, "string"))
        return visit_string(c, s, rule_name);
    if (is_type(s, "integer") && (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                                  json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum")))
        return visit_int_range(c, s, rule_name);
    if (!json_object_size(s) || is_type(s, "object"))
        return sc_add_rule(c, rule_name, sc_strf(c, "%s", sc_add_prim(c, "object", sc_prim_find("object"))));
    if (no_type(s)) return sc_add_rule(c, rule_name, sc_strf(c, "%s", sc_add_prim(c, "value", sc_prim_find("value"))));
    if (!valid_type(t)) return sc_fail(c, "json schema: unrecognized \"type\" %.40s", t ? t : "(not a string)"), NULL;
    return sc_add_prim(c, !strcmp(rule_name, "root") ? "root" : t, sc_prim_find(t));
}

const char *sc_visit(sc *c, const json_t *s, const char *name)
{
    char *rn = NULL;
    const char *r = NULL, *t = str_of(s, "type");
    const json_t *type = json_object_get(s, "type"), *alts = json_object_get(s, "oneOf");
    if (c->failed) return NULL;
    if (!json_is_object(s)) return sc_fail(c, "json schema: a schema must be an object"), NULL;
    if (type && !json_is_string(type) && !json_is_array(type)) return sc_fail(c, "json schema: \"type\" must be a string or an array"), NULL;
    if (t && !valid_type(t)) return sc_fail(c, "json schema: unrecognized \"type\" \"%.40s\"", t), NULL;
    if (++c->depth > SC_MAX_DEPTH) return sc_fail(c, "json schema nested deeper than %d", SC_MAX_DEPTH), NULL;
    if (sc_refuse_unsupported(c, s)) return NULL;
    rn = sc_strf(c, "%s%s", *name ? name : "root", sc_prim_find(name) ? "-" : "");
    alts = alts ? alts : json_object_get(s, "anyOf");
    if (!rn) r = NULL;
    else if (json_object_get(s, "$ref")) r = visit_ref(c, json_object_get(s, "$ref"), rn);
    else if (alts) r = visit_union(c, alts, NULL, name, rn);
    else if (json_is_array(type)) r = visit_union(c, type, s, name, rn);
    else if (json_object_get(s, "const")) r = sc_add_rule(c, rn, sc_const(c, json_object_get(s, "const")));
    else if (json_object_get(s, "enum")) r = visit_enum(c, json_object_get(s, "enum"), rn);
    else r = visit_typed(c, s, name, rn);
    free(rn);
    c->depth--;
    return c->failed ? NULL : r;
}
