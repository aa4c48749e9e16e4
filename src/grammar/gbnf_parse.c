/* The GBNF parser: text -> skv_gbnf (gbnf_int.h). Recursive descent over rules,
 * alternatives, sequences and items; groups and repetitions become generated rules
 * (names with a '#', which a user's rule name cannot hold). Every error names its line and
 * column; sizes and nesting are bounded (gbnf.h). */
#include "core/fpguard.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_int.h"

typedef struct gvec {
    skv_gel *v;
    size_t n, cap;
} gvec;

typedef struct prule {
    char *name;
    gvec el;
    const char *used_at; /* first reference, for "undefined rule" */
    int defined;
} prule;

typedef struct P {
    const char *start, *s, *end;
    skv_err *err;
    int failed, nest;
    prule *r;
    uint32_t nr, rcap;
    uint32_t *ht; /* named rules by name hash: id + 1, 0 = empty (open addressing) */
    size_t hcap, nnamed;
    uint32_t (*rng)[2];
    size_t nrng, rngcap, total;
} P;

static void perr(P *p, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void perr(P *p, const char *at, const char *fmt, ...)
{
    int line = 1, col = 1;
    char msg[200];
    va_list ap;
    if (p->failed) return;
    p->failed = 1;
    for (const char *c = p->start; c < at && c < p->end; c++) line += *c == '\n', col = *c == '\n' ? 1 : col + 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    skv_fail(p->err, SKV_ERR_FORMAT, "grammar line %d col %d: %s", line, col, msg);
}

int skv_gbnf_grow(void **v, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *t = realloc(*v, c * sz);
    if (!t) return -1;
    *v = t;
    *cap = c;
    return 0;
}

static int emit(P *p, int rule, uint32_t type, uint32_t a, uint32_t n)
{
    if (p->failed) return -1;
    gvec *g = &p->r[rule].el;
    if (++p->total > SKV_GBNF_MAX_ELEMENTS) return perr(p, p->s, "grammar too large (over %u elements)", SKV_GBNF_MAX_ELEMENTS), -1;
    if (skv_gbnf_grow((void **)&g->v, &g->cap, g->n + 1, sizeof *g->v)) return perr(p, p->s, "out of memory"), -1;
    g->v[g->n++] = (skv_gel){type, a, n};
    return 0;
}

/* ---- rules by name (a hash index: a hostile grammar of 65,536 rules stays linear) ---- */
static size_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int find_rule(const P *p, const char *name, size_t len)
{
    for (size_t i = name_hash(name, len) & (p->hcap - 1); p->hcap && p->ht[i]; i = (i + 1) & (p->hcap - 1)) {
        const char *rn = p->r[p->ht[i] - 1].name;
        if (strlen(rn) == len && !memcmp(rn, name, len)) return (int)p->ht[i] - 1;
    }
    return -1;
}

static void ht_put(uint32_t *ht, size_t cap, const char *name, uint32_t id)
{
    size_t i = name_hash(name, strlen(name)) & (cap - 1);
    while (ht[i]) i = (i + 1) & (cap - 1);
    ht[i] = id + 1;
}

/* Indexes rule id (a user's name; generated ones, with '#', are never looked up). */
static int index_rule(P *p, uint32_t id)
{
    if ((p->nnamed + 1) * 2 > p->hcap) {
        size_t cap = p->hcap ? p->hcap * 2 : 64;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (uint32_t i = 0; i < p->nr; i++)
            if (i != id && !strchr(p->r[i].name, '#')) ht_put(t, cap, p->r[i].name, i);
        free(p->ht);
        p->ht = t, p->hcap = cap;
    }
    ht_put(p->ht, p->hcap, p->r[id].name, id);
    p->nnamed++;
    return 0;
}

static int new_rule(P *p, const char *name, size_t len)
{
    if (p->nr >= SKV_GBNF_MAX_RULES) return perr(p, p->s, "too many rules (over %d)", SKV_GBNF_MAX_RULES), -1;
    size_t cap = p->rcap;
    if (skv_gbnf_grow((void **)&p->r, &cap, p->nr + 1, sizeof *p->r)) return perr(p, p->s, "out of memory"), -1;
    p->rcap = (uint32_t)cap;
    char *n = malloc(len + 1);
    if (!n) return perr(p, p->s, "out of memory"), -1;
    memcpy(n, name, len);
    n[len] = 0;
    p->r[p->nr] = (prule){.name = n};
    if (!memchr(name, '#', len) && index_rule(p, p->nr)) return free(n), perr(p, p->s, "out of memory"), -1;
    return (int)p->nr++;
}

static int rule_of(P *p, const char *name, size_t len)
{
    int id = find_rule(p, name, len);
    return id >= 0 ? id : new_rule(p, name, len);
}

/* A generated rule, named after its parent. */
static int gen_rule(P *p, int parent)
{
    char n[96];
    int len = snprintf(n, sizeof n, "%.60s#%u", p->r[parent].name, p->nr);
    int id = new_rule(p, n, (size_t)len);
    if (id >= 0) p->r[id].defined = 1;
    return id;
}

/* ---- lexing ---- */
static int is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static void skip_space(P *p, int newline_ok)
{
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '#') {
            while (p->s < p->end && *p->s != '\n') p->s++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->s++;
        } else {
            return;
        }
    }
}

static size_t word_len(const P *p)
{
    size_t n = 0;
    while (p->s + n < p->end && is_word(p->s[n])) n++;
    return n;
}

static int hex_val(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int parse_hex(P *p, int digits, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = p->s < p->end ? hex_val(*p->s) : -1;
        if (h < 0) return perr(p, p->s, "expected %d hex digits", digits), -1;
        v = v * 16 + (uint32_t)h;
        p->s++;
    }
    if (v > 0x10FFFF) return perr(p, p->s, "code point above U+10FFFF"), -1;
    *cp = v;
    return 0;
}

static int parse_escape(P *p, uint32_t *cp)
{
    char c = p->s < p->end ? *p->s++ : 0;
    switch (c) {
    case 'x': return parse_hex(p, 2, cp);
    case 'u': return parse_hex(p, 4, cp);
    case 'U': return parse_hex(p, 8, cp);
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint32_t)c; return 0;
    default: return perr(p, p->s - 1, "unknown escape \\%c", c ? c : '0'), -1;
    }
}

/* One UTF-8 character of the text (raw or escaped) as a code point. */
static int parse_char(P *p, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)p->s;
    size_t left = (size_t)(p->end - p->s);
    if (!left) return perr(p, p->s, "unexpected end of grammar"), -1;
    if (*u == '\\') return p->s++, parse_escape(p, cp);
    int n = *u < 0x80 ? 1 : *u >= 0xC2 && *u < 0xE0 ? 2 : *u >= 0xE0 && *u < 0xF0 ? 3 : *u >= 0xF0 && *u < 0xF5 ? 4 : 0;
    if (!n || (size_t)n > left) return perr(p, p->s, "invalid UTF-8 in grammar"), -1;
    uint32_t v = n == 1 ? *u : *u & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return perr(p, p->s, "invalid UTF-8 in grammar"), -1;
        v = (v << 6) | (u[i] & 0x3Fu);
    }
    p->s += n;
    *cp = v;
    return 0;
}

static int add_range(P *p, uint32_t lo, uint32_t hi)
{
    if (skv_gbnf_grow((void **)&p->rng, &p->rngcap, p->nrng + 1, sizeof *p->rng)) return perr(p, p->s, "out of memory"), -1;
    if (++p->total > SKV_GBNF_MAX_ELEMENTS) return perr(p, p->s, "grammar too large (over %u elements)", SKV_GBNF_MAX_ELEMENTS), -1;
    p->rng[p->nrng][0] = lo;
    p->rng[p->nrng++][1] = hi;
    return 0;
}

/* ---- items ---- */
static int parse_alts(P *p, int rule, int nested);

static int parse_literal(P *p, int g)
{
    p->s++; /* the opening quote */
    while (p->s < p->end && *p->s != '"') {
        uint32_t cp;
        if (*p->s == '\n') return perr(p, p->s, "newline in a literal (write \\n)"), -1;
        if (parse_char(p, &cp) || add_range(p, cp, cp) || emit(p, g, GE_CHAR, (uint32_t)p->nrng - 1, 1)) return -1;
    }
    if (p->s >= p->end) return perr(p, p->s, "unterminated literal"), -1;
    p->s++;
    return 0;
}

static int parse_class(P *p, int g)
{
    const char *open = p->s++;
    uint32_t type = GE_CHAR, first = (uint32_t)p->nrng, lo, hi;
    if (p->s < p->end && *p->s == '^') type = GE_NCHAR, p->s++;
    while (p->s < p->end && *p->s != ']') {
        if (*p->s == '\n') return perr(p, p->s, "newline in a character class"), -1;
        if (parse_char(p, &lo)) return -1;
        hi = lo;
        if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            if (parse_char(p, &hi)) return -1;
            if (hi < lo) return perr(p, p->s, "character range upside down"), -1;
        }
        if (add_range(p, lo, hi)) return -1;
    }
    if (p->s >= p->end) return perr(p, open, "unterminated character class"), -1;
    p->s++;
    return emit(p, g, type, first, (uint32_t)p->nrng - first);
}

static int parse_group(P *p, int g, int rule)
{
    const char *open = p->s++;
    if (++p->nest > SKV_GBNF_MAX_NEST) return perr(p, open, "groups nested deeper than %d", SKV_GBNF_MAX_NEST), -1;
    int sub = gen_rule(p, rule);
    if (sub < 0 || parse_alts(p, sub, 1)) return -1;
    if (p->s >= p->end || *p->s != ')') return perr(p, open, "unclosed '(' (expected ')')"), -1;
    p->s++;
    p->nest--;
    return emit(p, g, GE_REF, (uint32_t)sub, 0);
}

static int parse_ref(P *p, int g)
{
    size_t n = word_len(p);
    int id = rule_of(p, p->s, n);
    if (id < 0) return -1;
    if (!p->r[id].used_at) p->r[id].used_at = p->s;
    p->s += n;
    return emit(p, g, GE_REF, (uint32_t)id, 0);
}

/* One item, appended to g. 1 = no item here (end of sequence). */
static int parse_primary(P *p, int g, int rule)
{
    char c = p->s < p->end ? *p->s : 0;
    if (c == '"') return parse_literal(p, g);
    if (c == '[') return parse_class(p, g);
    if (c == '(') return parse_group(p, g, rule);
    if (c == '.') return p->s++, emit(p, g, GE_NCHAR, 0, 0);
    if (c && is_word(c)) return parse_ref(p, g);
    return 1;
}

/* ---- repetitions: the item at g->v[from..] becomes one reference to generated rules ---- */
static int wrap_item(P *p, int gi, size_t from, int rule, skv_gel *item)
{
    gvec *g = &p->r[gi].el;
    if (g->n - from == 1) {
        *item = g->v[from];
        g->n = from;
        return 0;
    }
    int sub = gen_rule(p, rule);
    if (sub < 0) return -1;
    for (size_t i = from; i < p->r[gi].el.n; i++) {
        skv_gel e = p->r[gi].el.v[i];
        if (emit(p, sub, e.type, e.a, e.n)) return -1;
    }
    p->r[gi].el.n = from;
    *item = (skv_gel){GE_REF, (uint32_t)sub, 0};
    return emit(p, sub, GE_END, 0, 0);
}

/* A rule `x r | ` (star: r itself; else the chain's next link, or nothing at the last). */
static int opt_rule(P *p, int rule, skv_gel x, int next, int star)
{
    int sub = gen_rule(p, rule);
    if (sub < 0) return -1;
    int e = sub;
    if (emit(p, e, x.type, x.a, x.n)) return -1;
    if (star && emit(p, e, GE_REF, (uint32_t)sub, 0)) return -1;
    if (!star && next >= 0 && emit(p, e, GE_REF, (uint32_t)next, 0)) return -1;
    if (emit(p, e, GE_ALT, 0, 0) || emit(p, e, GE_END, 0, 0)) return -1;
    return sub;
}

static int repeat(P *p, int g, int rule, skv_gel x, long m, long n)
{
    for (long i = 0; i < m; i++)
        if (emit(p, g, x.type, x.a, x.n)) return -1;
    int tail = -1;
    if (n < 0) {
        tail = opt_rule(p, rule, x, -1, 1);
    } else {
        for (long i = m; i < n; i++) tail = opt_rule(p, rule, x, tail, 0);
    }
    if (p->failed) return -1;
    return tail >= 0 ? emit(p, g, GE_REF, (uint32_t)tail, 0) : 0;
}

static long parse_count(P *p)
{
    long v = 0;
    const char *at = p->s;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        v = v * 10 + (*p->s++ - '0');
        if (v > SKV_GBNF_MAX_REPEAT) return perr(p, at, "repetition count above %d", SKV_GBNF_MAX_REPEAT), -2;
    }
    return p->s == at ? -1 : v;
}

/* {m} {m,} {m,n}: m and n (n = -1: unbounded). */
static int parse_braces(P *p, long *m, long *n)
{
    const char *open = p->s++;
    skip_space(p, 0);
    if ((*m = parse_count(p)) == -1) perr(p, p->s, "expected a number after '{'");
    if (*m < 0) return -1;
    skip_space(p, 0);
    *n = *m;
    if (p->s < p->end && *p->s == ',') {
        p->s++;
        skip_space(p, 0);
        *n = parse_count(p);
        if (*n == -2) return -1;
        skip_space(p, 0);
    }
    if (p->s >= p->end || *p->s != '}') return perr(p, open, "expected '}' closing a repetition"), -1;
    if (*n >= 0 && *n < *m) return perr(p, open, "repetition {%ld,%ld}: max below min", *m, *n), -1;
    p->s++;
    return 0;
}

static int parse_repetition(P *p, int g, size_t from, int rule)
{
    char c = p->s < p->end ? *p->s : 0;
    long m, n;
    skv_gel x;
    if (c == '*') m = 0, n = -1, p->s++;
    else if (c == '+') m = 1, n = -1, p->s++;
    else if (c == '?') m = 0, n = 1, p->s++;
    else if (c == '{') {
        if (parse_braces(p, &m, &n)) return -1;
    } else {
        return 0;
    }
    if (wrap_item(p, g, from, rule, &x)) return -1;
    return repeat(p, g, rule, x, m, n);
}

static int parse_seq(P *p, int g, int rule, int nested)
{
    for (;;) {
        size_t from = p->r[g].el.n;
        int rc = parse_primary(p, g, rule);
        if (rc < 0) return -1;
        if (rc == 1) return 0;
        if (parse_repetition(p, g, from, rule)) return -1;
        skip_space(p, nested);
    }
}

static int parse_alts(P *p, int rule, int nested)
{
    skip_space(p, nested);
    if (parse_seq(p, rule, rule, nested)) return -1;
    while (p->s < p->end && *p->s == '|') {
        if (emit(p, rule, GE_ALT, 0, 0)) return -1;
        p->s++;
        skip_space(p, 1);
        if (parse_seq(p, rule, rule, nested)) return -1;
    }
    return emit(p, rule, GE_END, 0, 0);
}

/* name ::= alternatives, then the end of the line. */
static int parse_rule(P *p)
{
    const char *at = p->s;
    size_t n = word_len(p);
    if (!n) return perr(p, at, "expected a rule name"), -1;
    int id = rule_of(p, at, n);
    if (id < 0) return -1;
    if (p->r[id].defined) return perr(p, at, "rule '%s' defined twice", p->r[id].name), -1;
    p->r[id].defined = 1;
    p->s += n;
    skip_space(p, 0);
    if (p->end - p->s < 3 || memcmp(p->s, "::=", 3)) return perr(p, p->s, "expected '::=' after rule '%s'", p->r[id].name), -1;
    p->s += 3;
    if (parse_alts(p, id, 0)) return -1;
    if (p->s < p->end && *p->s != '\n' && *p->s != '\r') return perr(p, p->s, "unexpected '%c'", *p->s), -1;
    return 0;
}

/* ---- checks and the compiled form ---- */
static int check_defined(P *p)
{
    for (uint32_t i = 0; i < p->nr; i++)
        if (!p->r[i].defined) return perr(p, p->r[i].used_at, "undefined rule '%s'", p->r[i].name), -1;
    return 0;
}

static int flatten(P *p, skv_gbnf *g)
{
    size_t n_alt = 0, at = 0, k = 0;
    for (uint32_t i = 0; i < p->nr; i++) {
        g->n_el += p->r[i].el.n;
        for (size_t j = 0; j < p->r[i].el.n; j++) n_alt += skv_gel_is_end(&p->r[i].el.v[j]);
    }
    g->el = malloc(g->n_el * sizeof *g->el);
    g->rule_at = malloc(p->nr * sizeof *g->rule_at);
    g->alt_off = malloc((p->nr + 1) * sizeof *g->alt_off);
    g->alts = malloc((n_alt ? n_alt : 1) * sizeof *g->alts);
    if (!g->el || !g->rule_at || !g->alt_off || !g->alts) return perr(p, p->s, "out of memory"), -1;
    for (uint32_t i = 0; i < p->nr; i++) {
        g->rule_at[i] = (uint32_t)at;
        g->alt_off[i] = (uint32_t)k;
        g->alts[k++] = (uint32_t)at;
        for (size_t j = 0; j < p->r[i].el.n; j++, at++) {
            g->el[at] = p->r[i].el.v[j];
            if (g->el[at].type == GE_ALT) g->alts[k++] = (uint32_t)at + 1;
        }
    }
    g->alt_off[p->nr] = (uint32_t)k;
    g->n_rules = p->nr;
    return 0;
}

static void p_free(P *p)
{
    for (uint32_t i = 0; i < p->nr; i++) free(p->r[i].name), free(p->r[i].el.v);
    free(p->r);
    free(p->ht);
    free(p->rng);
}

static int parse_all(P *p)
{
    skip_space(p, 1);
    while (p->s < p->end && !p->failed) {
        if (parse_rule(p)) return -1;
        skip_space(p, 1);
    }
    return p->failed ? -1 : 0;
}

static int finish(P *p, skv_gbnf *g, const char *root)
{
    int r = find_rule(p, root, strlen(root));
    if (r < 0 || !p->r[r].defined) return perr(p, p->end, "no rule '%s' (the start rule)", root), -1;
    if (check_defined(p) || flatten(p, g)) return -1;
    g->root = (uint32_t)r;
    g->rng = p->rng;
    g->n_rng = p->nrng;
    p->rng = NULL;
    uint32_t bad;
    int rc = skv_gbnf_left_recursive(g, &bad);
    if (rc < 0) return perr(p, p->end, "out of memory"), -1;
    if (rc) {
        const char *name = p->r[bad].name;
        size_t n = strcspn(name, "#");
        return perr(p, p->end, "left recursion through rule '%.*s' (rewrite it right-recursive)", (int)n, name), -1;
    }
    return 0;
}

int skv_gbnf_parse(const char *text, size_t len, const char *root, skv_gbnf **out, skv_err *err)
{
    P p = {.start = text, .s = text, .end = text + len, .err = err};
    skv_gbnf *g = calloc(1, sizeof *g);
    *out = NULL;
    skv_err_clear(err);
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (len > SKV_GBNF_MAX_TEXT) perr(&p, text, "grammar longer than %u bytes", SKV_GBNF_MAX_TEXT);
    else if (!g) perr(&p, text, "out of memory");
    else if (nul) perr(&p, nul, "NUL byte in grammar");
    else if (!parse_all(&p)) finish(&p, g, root);
    p_free(&p);
    if (p.failed) return skv_gbnf_free(g), -1;
    *out = g;
    return 0;
}

void skv_gbnf_free(skv_gbnf *g)
{
    if (!g) return;
    free(g->el);
    free(g->rule_at);
    free(g->alt_off);
    free(g->alts);
    free(g->rng);
    free(g);
}

size_t skv_gbnf_n_rules(const skv_gbnf *g) { return g->n_rules; }
