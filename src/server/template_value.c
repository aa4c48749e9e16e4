/* Chat templates: the arena, error unwinding and the value model (template_int.h). */
#include <stdarg.h>
#include "core/fpguard.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "server/template_int.h"

/* ---- arena ---- */
struct tp_block { tp_block *next; size_t cap, used; max_align_t data[]; };
#define TP_BLOCK_MIN ((size_t)64 << 10)

void *tp_alloc(tp_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > a->limit || a->used > a->limit - n)
        tp_fail(a, SKV_ERR_RANGE, 0, 0, "template memory limit (%zu bytes) exceeded", a->limit);
    tp_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > TP_BLOCK_MIN ? n : TP_BLOCK_MIN;
        b = malloc(sizeof *b + cap);
        if (!b) tp_fail(a, SKV_ERR_NOMEM, 0, 0, "out of memory");
        b->next = a->head, b->cap = cap, b->used = 0;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void tp_arena_free(tp_arena *a)
{
    while (a->head) {
        tp_block *b = a->head;
        a->head = b->next;
        free(b);
    }
    a->used = 0;
}

void tp_fail(tp_arena *a, int status, int line, int col, const char *fmt, ...)
{
    va_list ap;
    if (a->err) {
        a->err->line = line, a->err->col = col;
        va_start(ap, fmt);
        vsnprintf(a->err->msg, sizeof a->err->msg, fmt, ap);
        va_end(ap);
    }
    a->status = status;
    longjmp(*a->jump, 1);
}

int tp_run(tp_arena *a, void (*fn)(tp_arena *a, void *arg), void *arg)
{
    jmp_buf jb;
    jmp_buf *outer = a->jump;
    a->jump = &jb;
    if (setjmp(jb)) {
        a->jump = outer;
        return a->status;
    }
    fn(a, arg);
    a->jump = outer;
    return SKV_OK;
}

void tp_buf_put(tp_arena *a, tp_buf *b, const char *s, size_t n)
{
    if (n > b->limit || b->n > b->limit - n)
        tp_fail(a, SKV_ERR_RANGE, 0, 0, "template output limit (%zu bytes) exceeded", b->limit);
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) cap *= 2;
        char *p = tp_alloc(a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* ---- constructors ---- */
tv tv_undef(void) { tv v = {.k = V_UNDEF}; return v; }
tv tv_none(void) { tv v = {.k = V_NONE}; return v; }
tv tv_bool(int b) { tv v = {.k = V_BOOL, .u.b = !!b}; return v; }
tv tv_int(int64_t i) { tv v = {.k = V_INT, .u.i = i}; return v; }
tv tv_float(double f) { tv v = {.k = V_FLOAT, .u.f = f}; return v; }

tv tv_strn(tp_arena *a, const char *s, size_t n)
{
    tv v = {.k = V_STR};
    v.u.s = tp_alloc(a, sizeof *v.u.s + n + 1);
    v.u.s->len = n;
    if (n) memcpy(v.u.s->s, s, n);
    return v;
}

tv tv_cstr(tp_arena *a, const char *s) { return tv_strn(a, s, strlen(s)); }

tv tv_list_new(tp_arena *a)
{
    tv v = {.k = V_LIST};
    v.u.l = tp_alloc(a, sizeof *v.u.l);
    return v;
}

tv tv_dict_new(tp_arena *a)
{
    tv v = {.k = V_DICT};
    v.u.d = tp_alloc(a, sizeof *v.u.d);
    return v;
}

void tv_list_push(tp_arena *a, tv_list *l, tv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        tv *p = tp_alloc(a, cap * sizeof *p);
        if (l->n) memcpy(p, l->v, l->n * sizeof *p);
        l->v = p, l->cap = cap;
    }
    l->v[l->n++] = v;
}

tv *tv_dict_get(const tv_dict *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->key[i]->len == kn && memcmp(d->key[i]->s, k, kn) == 0) return &d->val[i];
    return NULL;
}

void tv_dict_set(tp_arena *a, tv_dict *d, const char *k, size_t kn, tv v)
{
    tv *slot = tv_dict_get(d, k, kn);
    if (slot) { *slot = v; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        tv_str **key = tp_alloc(a, cap * sizeof *key);
        tv *val = tp_alloc(a, cap * sizeof *val);
        if (d->n) memcpy(key, d->key, d->n * sizeof *key), memcpy(val, d->val, d->n * sizeof *val);
        d->key = key, d->val = val, d->cap = cap;
    }
    d->key[d->n] = tv_strn(a, k, kn).u.s;
    d->val[d->n++] = v;
}

/* ---- predicates ---- */
int tv_truthy(tv v)
{
    switch (v.k) {
    case V_BOOL: return v.u.b;
    case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0.0;
    case V_STR: return v.u.s->len != 0;
    case V_LIST: return v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    case V_NS: case V_MACRO: case V_FUNC: return 1;
    default: return 0;
    }
}

static int tv_is_num(tv v) { return v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL; }

static double tv_num(tv v)
{
    return v.k == V_FLOAT ? v.u.f : v.k == V_INT ? (double)v.u.i : (double)v.u.b;
}

static int tv_equal_at(tv a, tv b, int depth);

static int tv_list_equal(const tv_list *a, const tv_list *b, int depth)
{
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (!tv_equal_at(a->v[i], b->v[i], depth + 1)) return 0;
    return 1;
}

static int tv_dict_equal(const tv_dict *a, const tv_dict *b, int depth)
{
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
        tv *o = tv_dict_get(b, a->key[i]->s, a->key[i]->len);
        if (!o || !tv_equal_at(a->val[i], *o, depth + 1)) return 0;
    }
    return 1;
}

int tv_equal(tv a, tv b) { return tv_equal_at(a, b, 0); }

/* depth bounds the walk: a list may contain itself (l.append(l)) */
static int tv_equal_at(tv a, tv b, int depth)
{
    if (depth > 64) return 0;
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.k != V_FLOAT && b.k != V_FLOAT)
            return (a.k == V_INT ? a.u.i : a.u.b) == (b.k == V_INT ? b.u.i : b.u.b);
        return tv_num(a) == tv_num(b);
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case V_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case V_LIST: return a.u.l == b.u.l || tv_list_equal(a.u.l, b.u.l, depth);
    case V_DICT: return a.u.d == b.u.d || tv_dict_equal(a.u.d, b.u.d, depth);
    case V_NS: return a.u.d == b.u.d;
    case V_MACRO: return a.u.m == b.u.m;
    case V_FUNC: return a.u.fn == b.u.fn;
    default: return 1; /* undefined, none */
    }
}

int tv_compare(tv a, tv b, int *ok)
{
    *ok = 1;
    if (tv_is_num(a) && tv_is_num(b)) {
        double x = tv_num(a), y = tv_num(b);
        return (x > y) - (x < y);
    }
    if (a.k == V_STR && b.k == V_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        if (r) return r;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    *ok = 0;
    return 0;
}

const char *tv_kind_name(tv_kind k)
{
    static const char *const names[] = {"undefined", "none", "boolean", "integer", "float",
                                        "string", "list", "dict", "namespace", "macro",
                                        "function"};
    return names[k];
}

const char *tv_find(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0) return hay;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

size_t tv_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* ---- printing ---- */
static void tv_put_float(tp_arena *a, tp_buf *b, double f)
{
    char tmp[40];
    int n = snprintf(tmp, sizeof tmp, "%.17g", f);
    for (int p = 1; p < 17; p++) { /* the shortest form that reads back the same (repr) */
        char t2[40];
        int m = snprintf(t2, sizeof t2, "%.*g", p, f);
        if (strtod(t2, NULL) == f) { memcpy(tmp, t2, (size_t)m + 1), n = m; break; }
    }
    tp_buf_put(a, b, tmp, (size_t)n);
    if (!strpbrk(tmp, ".eninf")) tp_buf_put(a, b, ".0", 2);
}

static void tv_put_repr_str(tp_arena *a, tp_buf *b, const tv_str *s)
{
    tp_buf_put(a, b, "'", 1);
    for (size_t i = 0; i < s->len; i++) {
        char c = s->s[i];
        if (c == '\'' || c == '\\') tp_buf_put(a, b, "\\", 1), tp_buf_put(a, b, &c, 1);
        else if (c == '\n') tp_buf_put(a, b, "\\n", 2);
        else tp_buf_put(a, b, &c, 1);
    }
    tp_buf_put(a, b, "'", 1);
}

/* repr - 1 is the nesting depth: bounded, as a list may contain itself */
static void tv_put_container(tp_arena *a, tp_buf *b, tv v, int repr)
{
    if (repr > 64) tp_fail(a, SKV_ERR_RANGE, 0, 0, "value nested deeper than 64");
    if (v.k == V_LIST) {
        tp_buf_put(a, b, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tp_buf_put(a, b, ", ", 2);
            tv_to_buf(a, b, v.u.l->v[i], repr + 1);
        }
        tp_buf_put(a, b, "]", 1);
        return;
    }
    tp_buf_put(a, b, "{", 1);
    for (size_t i = 0; i < v.u.d->n; i++) {
        if (i) tp_buf_put(a, b, ", ", 2);
        tv_put_repr_str(a, b, v.u.d->key[i]);
        tp_buf_put(a, b, ": ", 2);
        tv_to_buf(a, b, v.u.d->val[i], repr + 1);
    }
    tp_buf_put(a, b, "}", 1);
}

void tv_to_buf(tp_arena *a, tp_buf *b, tv v, int repr)
{
    char tmp[32];
    switch (v.k) {
    case V_UNDEF: return;
    case V_NONE: tp_buf_put(a, b, "None", 4); return;
    case V_BOOL: tp_buf_put(a, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5); return;
    case V_INT:
        tp_buf_put(a, b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i));
        return;
    case V_FLOAT: tv_put_float(a, b, v.u.f); return;
    case V_STR:
        if (repr) tv_put_repr_str(a, b, v.u.s);
        else tp_buf_put(a, b, v.u.s->s, v.u.s->len);
        return;
    case V_LIST: case V_DICT: tv_put_container(a, b, v, repr); return;
    case V_NS: tp_buf_put(a, b, "<Namespace>", 11); return;
    default: tp_buf_put(a, b, "<function>", 10); return;
    }
}

tv tv_to_str(tp_arena *a, tv v)
{
    if (v.k == V_STR) return v;
    tp_buf b = {.limit = a->limit};
    tv_to_buf(a, &b, v, 0);
    return tv_strn(a, b.p ? b.p : "", b.n);
}

/* ---- JSON ---- */
static void tv_json_str(tp_arena *a, tp_buf *b, const char *s, size_t n)
{
    tp_buf_put(a, b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f" : NULL;
        char u[8];
        if (esc) tp_buf_put(a, b, esc, 2);
        else if (c < 0x20) tp_buf_put(a, b, u, (size_t)snprintf(u, sizeof u, "\\u%04x", c));
        else tp_buf_put(a, b, (const char *)&s[i], 1);
    }
    tp_buf_put(a, b, "\"", 1);
}

static void tv_json_sep(tp_arena *a, tp_buf *b, int indent, int depth, int first)
{
    if (!first) tp_buf_put(a, b, indent < 0 ? ", " : ",", indent < 0 ? 2 : 1);
    if (indent < 0) return;
    tp_buf_put(a, b, "\n", 1);
    for (int i = 0; i < indent * depth; i++) tp_buf_put(a, b, " ", 1);
}

static void tv_json_container(tp_arena *a, tp_buf *b, tv v, int indent, int depth)
{
    int is_list = v.k == V_LIST;
    size_t n = is_list ? v.u.l->n : v.u.d->n;
    tp_buf_put(a, b, is_list ? "[" : "{", 1);
    for (size_t i = 0; i < n; i++) {
        tv_json_sep(a, b, indent, depth + 1, i == 0);
        if (!is_list) {
            tv_json_str(a, b, v.u.d->key[i]->s, v.u.d->key[i]->len);
            tp_buf_put(a, b, ": ", 2);
        }
        tv_to_json(a, b, is_list ? v.u.l->v[i] : v.u.d->val[i], indent, depth + 1);
    }
    if (n && indent >= 0) tv_json_sep(a, b, indent, depth, 1);
    tp_buf_put(a, b, is_list ? "]" : "}", 1);
}

void tv_to_json(tp_arena *a, tp_buf *b, tv v, int indent, int depth)
{
    if (depth > 64) tp_fail(a, SKV_ERR_RANGE, 0, 0, "tojson: nesting deeper than 64");
    switch (v.k) {
    case V_UNDEF: case V_NONE: tp_buf_put(a, b, "null", 4); return;
    case V_BOOL: tp_buf_put(a, b, v.u.b ? "true" : "false", v.u.b ? 4 : 5); return;
    case V_STR: tv_json_str(a, b, v.u.s->s, v.u.s->len); return;
    case V_LIST: case V_DICT: case V_NS: tv_json_container(a, b, v, indent, depth); return;
    default: tv_to_buf(a, b, v, 0); return;
    }
}
