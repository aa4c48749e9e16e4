/* Chat templates: filters (x|f), tests (x is t) and methods (x.m()), one table each.
 * Adding one is adding a row and its function. */
#include <ctype.h>
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "server/template_int.h"

typedef tv (*tp_filter_fn)(tp_ctx *c, const tp_node *at, tv x, tp_args *a);

static tv str_of(tp_ctx *c, tv v) { return tv_to_str(c->a, v); }
static tv str_from_buf(tp_ctx *c, const tp_buf *b) { return tv_strn(c->a, b->p ? b->p : "", b->n); }

static tv need_str(tp_ctx *c, const tp_node *at, tv x, const char *what)
{
    if (x.k == V_UNDEF) return tv_strn(c->a, "", 0);
    if (x.k != V_STR) tp_error(c, at, "%s needs a string, not %s", what, tv_kind_name(x.k));
    return x;
}

/* ---- string helpers ---- */
static int in_set(char ch, tv chars)
{
    if (chars.k != V_STR) return isspace((unsigned char)ch) != 0;
    return memchr(chars.u.s->s, ch, chars.u.s->len) != NULL;
}

/* strip: which 1 = left, 2 = right, 3 = both */
static tv str_strip(tp_ctx *c, tv s, tv chars, int which)
{
    size_t b = 0, e = s.u.s->len;
    while ((which & 1) && b < e && in_set(s.u.s->s[b], chars)) b++;
    while ((which & 2) && e > b && in_set(s.u.s->s[e - 1], chars)) e--;
    return tv_strn(c->a, s.u.s->s + b, e - b);
}

/* case: 0 lower, 1 upper, 2 title, 3 capitalize */
static tv str_case(tp_ctx *c, tv s, int mode)
{
    tv out = tv_strn(c->a, s.u.s->s, s.u.s->len);
    int prev_alpha = 0;
    for (size_t i = 0; i < out.u.s->len; i++) {
        unsigned char ch = (unsigned char)out.u.s->s[i];
        int up = mode == 1 || (mode == 2 && !prev_alpha) || (mode == 3 && i == 0);
        out.u.s->s[i] = (char)(up ? toupper(ch) : tolower(ch));
        prev_alpha = isalpha(ch) != 0;
    }
    return out;
}

static tv str_replace(tp_ctx *c, const tp_node *at, tv s, tv from, tv to, int64_t count)
{
    if (from.k != V_STR || to.k != V_STR) tp_error(c, at, "replace() needs strings");
    tp_buf b = {.limit = c->lim->max_output};
    size_t i = 0, fl = from.u.s->len;
    while (i <= s.u.s->len) {
        const char *hit = fl && count ? tv_find(s.u.s->s + i, s.u.s->len - i, from.u.s->s, fl) : NULL;
        if (!hit) break;
        tp_buf_put(c->a, &b, s.u.s->s + i, (size_t)(hit - (s.u.s->s + i)));
        tp_buf_put(c->a, &b, to.u.s->s, to.u.s->len);
        i = (size_t)(hit - s.u.s->s) + fl;
        if (count > 0) count--;
    }
    tp_buf_put(c->a, &b, s.u.s->s + i, s.u.s->len - i);
    return str_from_buf(c, &b);
}

static tv str_split(tp_ctx *c, tv s, tv sep)
{
    tv out = tv_list_new(c->a);
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    if (sep.k != V_STR || sep.u.s->len == 0) { /* whitespace runs */
        while (p < end) {
            while (p < end && isspace((unsigned char)*p)) p++;
            const char *q = p;
            while (q < end && !isspace((unsigned char)*q)) q++;
            if (q > p) tv_list_push(c->a, out.u.l, tv_strn(c->a, p, (size_t)(q - p)));
            p = q;
        }
        return out;
    }
    for (;;) {
        const char *hit = tv_find(p, (size_t)(end - p), sep.u.s->s, sep.u.s->len);
        tv_list_push(c->a, out.u.l, tv_strn(c->a, p, (size_t)((hit ? hit : end) - p)));
        if (!hit) return out;
        p = hit + sep.u.s->len;
    }
}

static int str_affix(tv s, tv a, int at_end)
{
    if (a.k == V_LIST) {
        for (size_t i = 0; i < a.u.l->n; i++)
            if (str_affix(s, a.u.l->v[i], at_end)) return 1;
        return 0;
    }
    if (a.k != V_STR || a.u.s->len > s.u.s->len) return 0;
    size_t off = at_end ? s.u.s->len - a.u.s->len : 0;
    return memcmp(s.u.s->s + off, a.u.s->s, a.u.s->len) == 0;
}

static tv seq_join(tp_ctx *c, const tp_node *at, tv x, tv sep, tv attr)
{
    tv_list *l = tp_iterable(c, at, x);
    tp_buf b = {.limit = c->lim->max_output};
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep.k == V_STR) tp_buf_put(c->a, &b, sep.u.s->s, sep.u.s->len);
        tv v = l->v[i];
        if (attr.k == V_STR) v = tp_getattr(c, v, attr.u.s->s, attr.u.s->len);
        tv_to_buf(c->a, &b, v, 0);
    }
    return str_from_buf(c, &b);
}

/* ---- filters ---- */
static tv f_trim(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    return str_strip(c, need_str(c, at, x, "trim"), tp_arg(a, 0, "chars", tv_none()), 3);
}

static tv f_length(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)a;
    if (x.k == V_STR) return tv_int((int64_t)tv_utf8_len(x.u.s->s, x.u.s->len));
    if (x.k == V_DICT || x.k == V_NS) return tv_int((int64_t)x.u.d->n);
    return tv_int((int64_t)tp_iterable(c, at, x)->n);
}

static tv f_list(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)a;
    tv out = tv_list_new(c->a);
    tv_list *l = tp_iterable(c, at, x);
    for (size_t i = 0; i < l->n; i++) tv_list_push(c->a, out.u.l, l->v[i]);
    return out;
}

static tv f_lower(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)a; return str_case(c, need_str(c, at, str_of(c, x), "lower"), 0); }
static tv f_upper(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)a; return str_case(c, need_str(c, at, str_of(c, x), "upper"), 1); }
static tv f_title(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)a; return str_case(c, need_str(c, at, str_of(c, x), "title"), 2); }
static tv f_capitalize(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)a; return str_case(c, need_str(c, at, str_of(c, x), "capitalize"), 3); }
static tv f_string(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)at, (void)a; return str_of(c, x); }
static tv f_safe(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)c, (void)at, (void)a; return x; }

static tv f_default(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)c, (void)at;
    tv d = tp_arg(a, 0, "default_value", tv_strn(c->a, "", 0));
    int boolean = tv_truthy(tp_arg(a, 1, "boolean", tv_bool(0)));
    return x.k == V_UNDEF || (boolean && !tv_truthy(x)) ? d : x;
}

static tv f_tojson(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    tv ind = tp_arg(a, 0, "indent", tv_none());
    if (ind.k != V_NONE && (ind.k != V_INT || ind.u.i < 0 || ind.u.i > 16))
        tp_error(c, at, "tojson: indent must be an integer 0..16");
    tp_buf b = {.limit = c->lim->max_output};
    tv_to_json(c->a, &b, x, ind.k == V_INT ? (int)ind.u.i : -1, 0);
    return str_from_buf(c, &b);
}

static tv f_select(tp_ctx *c, const tp_node *at, tv x, tp_args *a, int by_attr, int keep)
{
    tv_list *l = tp_iterable(c, at, x);
    tv out = tv_list_new(c->a);
    size_t skip = by_attr ? 1 : 0;
    tv attr = tp_arg(a, 0, NULL, tv_undef()), test = tp_arg(a, skip, NULL, tv_undef());
    tp_args rest = *a;
    rest.pos += skip + 1 <= a->n_pos ? skip + 1 : a->n_pos;
    rest.n_pos = a->n_pos > skip + 1 ? a->n_pos - skip - 1 : 0;
    if (by_attr && attr.k != V_STR) tp_error(c, at, "selectattr needs an attribute name");
    for (size_t i = 0; i < l->n; i++) {
        tp_step(c, at);
        tv v = by_attr ? tp_getattr(c, l->v[i], attr.u.s->s, attr.u.s->len) : l->v[i];
        int r = test.k == V_STR ? tp_test(c, at, v, test.u.s->s, test.u.s->len, &rest) : tv_truthy(v);
        if (r == keep) tv_list_push(c->a, out.u.l, l->v[i]);
    }
    return out;
}

static tv f_selectattr(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { return f_select(c, at, x, a, 1, 1); }
static tv f_rejectattr(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { return f_select(c, at, x, a, 1, 0); }
static tv f_selectf(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { return f_select(c, at, x, a, 0, 1); }
static tv f_reject(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { return f_select(c, at, x, a, 0, 0); }

static tv f_map(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    tv_list *l = tp_iterable(c, at, x);
    tv out = tv_list_new(c->a), *attr = tp_kwarg(a, "attribute");
    tv name = tp_arg(a, 0, NULL, tv_undef());
    tp_args rest = {.pos = a->pos + (a->n_pos ? 1 : 0), .n_pos = a->n_pos ? a->n_pos - 1 : 0};
    if (!attr && name.k != V_STR) tp_error(c, at, "map needs attribute= or a filter name");
    for (size_t i = 0; i < l->n; i++) {
        tp_step(c, at);
        tv v = attr ? (attr->k == V_STR ? tp_getattr(c, l->v[i], attr->u.s->s, attr->u.s->len) : tv_undef())
                    : tp_filter(c, at, l->v[i], name.u.s->s, name.u.s->len, &rest);
        tv_list_push(c->a, out.u.l, v);
    }
    return out;
}

static tv f_join(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    return seq_join(c, at, x, tp_arg(a, 0, "d", tv_undef()), tp_arg(a, 1, "attribute", tv_undef()));
}

static tv f_first_last(tp_ctx *c, const tp_node *at, tv x, int last)
{
    tv_list *l = tp_iterable(c, at, x);
    return l->n ? l->v[last ? l->n - 1 : 0] : tv_undef();
}

static tv f_first(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)a; return f_first_last(c, at, x, 0); }
static tv f_last(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)a; return f_first_last(c, at, x, 1); }

static tv f_replace(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    tv n = tp_arg(a, 2, "count", tv_int(-1));
    return str_replace(c, at, need_str(c, at, str_of(c, x), "replace"), tp_arg(a, 0, NULL, tv_undef()),
                       tp_arg(a, 1, NULL, tv_undef()), n.k == V_INT ? n.u.i : -1);
}

static tv f_int(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)c, (void)at;
    if (x.k == V_INT) return x;
    if (x.k == V_BOOL) return tv_int(x.u.b);
    if (x.k == V_FLOAT && x.u.f > -9e18 && x.u.f < 9e18) return tv_int((int64_t)x.u.f);
    if (x.k == V_STR) return tv_int(strtoll(x.u.s->s, NULL, 10));
    return tp_arg(a, 0, "default", tv_int(0));
}

static tv f_float(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)c, (void)at, (void)a;
    if (x.k == V_FLOAT) return x;
    if (x.k == V_INT) return tv_float((double)x.u.i);
    if (x.k == V_STR) return tv_float(strtod(x.u.s->s, NULL));
    return tv_float(0.0);
}

static tv f_abs(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)a;
    if (x.k == V_FLOAT) return tv_float(x.u.f < 0 ? -x.u.f : x.u.f);
    if (x.k != V_INT || x.u.i == INT64_MIN) tp_error(c, at, "abs needs a number");
    return tv_int(x.u.i < 0 ? -x.u.i : x.u.i);
}

static tv f_reverse(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    (void)a;
    if (x.k == V_STR) {
        tv out = tv_strn(c->a, x.u.s->s, x.u.s->len);
        for (size_t i = 0; i < x.u.s->len; i++) out.u.s->s[i] = x.u.s->s[x.u.s->len - 1 - i];
        return out;
    }
    tv_list *l = tp_iterable(c, at, x);
    tv out = tv_list_new(c->a);
    for (size_t i = l->n; i-- > 0;) tv_list_push(c->a, out.u.l, l->v[i]);
    return out;
}

static tv dict_items(tp_ctx *c, tv d)
{
    tv out = tv_list_new(c->a);
    for (size_t i = 0; (d.k == V_DICT || d.k == V_NS) && i < d.u.d->n; i++) {
        tv pair = tv_list_new(c->a), k = {.k = V_STR, .u.s = d.u.d->key[i]};
        tv_list_push(c->a, pair.u.l, k);
        tv_list_push(c->a, pair.u.l, d.u.d->val[i]);
        tv_list_push(c->a, out.u.l, pair);
    }
    return out;
}

static tv f_items(tp_ctx *c, const tp_node *at, tv x, tp_args *a) { (void)at, (void)a; return dict_items(c, x); }

static tv f_indent(tp_ctx *c, const tp_node *at, tv x, tp_args *a)
{
    tv s = need_str(c, at, str_of(c, x), "indent"), w = tp_arg(a, 0, "width", tv_int(4));
    int first = tv_truthy(tp_arg(a, 1, "first", tv_bool(0)));
    int blank = tv_truthy(tp_arg(a, 2, "blank", tv_bool(0)));
    if (w.k != V_INT || w.u.i < 0 || w.u.i > 64) tp_error(c, at, "indent: width must be 0..64");
    tp_buf b = {.limit = c->lim->max_output};
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    for (int line = 0; p <= end; line++) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((q ? q : end) - p);
        if ((line || first) && (n || blank)) for (int64_t i = 0; i < w.u.i; i++) tp_buf_put(c->a, &b, " ", 1);
        tp_buf_put(c->a, &b, p, n);
        if (!q) break;
        tp_buf_put(c->a, &b, "\n", 1);
        p = q + 1;
    }
    return str_from_buf(c, &b);
}

static const struct { const char *name; tp_filter_fn fn; } tp_filters[] = {
    {"trim", f_trim}, {"length", f_length}, {"count", f_length}, {"list", f_list},
    {"lower", f_lower}, {"upper", f_upper}, {"title", f_title}, {"capitalize", f_capitalize},
    {"string", f_string}, {"safe", f_safe}, {"default", f_default}, {"d", f_default},
    {"tojson", f_tojson}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
    {"select", f_selectf}, {"reject", f_reject}, {"map", f_map}, {"join", f_join},
    {"first", f_first}, {"last", f_last}, {"replace", f_replace}, {"int", f_int},
    {"float", f_float}, {"abs", f_abs}, {"reverse", f_reverse}, {"items", f_items},
    {"indent", f_indent},
};

static int name_is(const char *name, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(name, lit, n) == 0;
}

tv tp_filter(tp_ctx *c, const tp_node *at, tv x, const char *name, size_t n, tp_args *args)
{
    for (size_t i = 0; i < sizeof tp_filters / sizeof tp_filters[0]; i++)
        if (name_is(name, n, tp_filters[i].name)) return tp_filters[i].fn(c, at, x, args);
    tp_error(c, at, "unknown filter '%.*s'", (int)n, name);
}

/* ---- tests ---- */
static int t_case(tv x, int upper)
{
    if (x.k != V_STR) return 0;
    for (size_t i = 0; i < x.u.s->len; i++)
        if (upper ? islower((unsigned char)x.u.s->s[i]) : isupper((unsigned char)x.u.s->s[i])) return 0;
    return 1;
}

static int t_in(tp_ctx *c, const tp_node *at, tv x, tv hay)
{
    tp_node n = *at;
    n.k = N_IN, n.op = 0;
    tp_node lx = {.k = N_LIT, .lit = x}, lh = {.k = N_LIT, .lit = hay};
    n.a = &lx, n.b = &lh;
    return tv_truthy(tp_eval(c, &n));
}

int tp_test(tp_ctx *c, const tp_node *at, tv x, const char *name, size_t n, tp_args *args)
{
    tv y = tp_arg(args, 0, NULL, tv_undef());
    int ok, num = x.k == V_INT || x.k == V_FLOAT;
    if (name_is(name, n, "defined")) return x.k != V_UNDEF;
    if (name_is(name, n, "undefined")) return x.k == V_UNDEF;
    if (name_is(name, n, "none")) return x.k == V_NONE;
    if (name_is(name, n, "string")) return x.k == V_STR;
    if (name_is(name, n, "number")) return num;
    if (name_is(name, n, "integer")) return x.k == V_INT;
    if (name_is(name, n, "float")) return x.k == V_FLOAT;
    if (name_is(name, n, "boolean")) return x.k == V_BOOL;
    if (name_is(name, n, "true")) return x.k == V_BOOL && x.u.b;
    if (name_is(name, n, "false")) return x.k == V_BOOL && !x.u.b;
    if (name_is(name, n, "mapping")) return x.k == V_DICT || x.k == V_NS;
    if (name_is(name, n, "sequence")) return x.k == V_LIST || x.k == V_STR;
    if (name_is(name, n, "iterable")) return x.k == V_LIST || x.k == V_STR || x.k == V_DICT;
    if (name_is(name, n, "callable")) return x.k == V_MACRO || x.k == V_FUNC;
    if (name_is(name, n, "lower")) return t_case(x, 0);
    if (name_is(name, n, "upper")) return t_case(x, 1);
    if (name_is(name, n, "equalto") || name_is(name, n, "eq") || name_is(name, n, "sameas") ||
        name_is(name, n, "==")) return tv_equal(x, y);
    if (name_is(name, n, "ne") || name_is(name, n, "!=")) return !tv_equal(x, y);
    if (name_is(name, n, "odd") || name_is(name, n, "even"))
        return x.k == V_INT && (int)(x.u.i & 1) == (name[0] == 'o');
    if (name_is(name, n, "divisibleby")) return x.k == V_INT && y.k == V_INT && y.u.i && x.u.i % y.u.i == 0;
    if (name_is(name, n, "in")) return t_in(c, at, x, y);
    int r = tv_compare(x, y, &ok);
    if (name_is(name, n, "gt") || name_is(name, n, "greaterthan")) return ok && r > 0;
    if (name_is(name, n, "lt") || name_is(name, n, "lessthan")) return ok && r < 0;
    if (name_is(name, n, "ge")) return ok && r >= 0;
    if (name_is(name, n, "le")) return ok && r <= 0;
    tp_error(c, at, "unknown test '%.*s'", (int)n, name);
}

/* ---- methods ---- */
static int m_str(tp_ctx *c, const tp_node *at, tv s, const char *name, size_t n, tp_args *a, tv *r)
{
    tv x = tp_arg(a, 0, NULL, tv_none());
    if (name_is(name, n, "strip")) *r = str_strip(c, s, x, 3);
    else if (name_is(name, n, "lstrip")) *r = str_strip(c, s, x, 1);
    else if (name_is(name, n, "rstrip")) *r = str_strip(c, s, x, 2);
    else if (name_is(name, n, "lower")) *r = str_case(c, s, 0);
    else if (name_is(name, n, "upper")) *r = str_case(c, s, 1);
    else if (name_is(name, n, "title")) *r = str_case(c, s, 2);
    else if (name_is(name, n, "capitalize")) *r = str_case(c, s, 3);
    else if (name_is(name, n, "startswith")) *r = tv_bool(str_affix(s, x, 0));
    else if (name_is(name, n, "endswith")) *r = tv_bool(str_affix(s, x, 1));
    else if (name_is(name, n, "split")) *r = str_split(c, s, x);
    else if (name_is(name, n, "join")) *r = seq_join(c, at, x, s, tv_undef());
    else if (name_is(name, n, "replace")) *r = f_replace(c, at, s, a);
    else return 0;
    return 1;
}

static int m_container(tp_ctx *c, tv o, const char *name, size_t n, tp_args *a, tv *r)
{
    tv x = tp_arg(a, 0, NULL, tv_none());
    int dict = o.k == V_DICT || o.k == V_NS;
    if (o.k == V_LIST && name_is(name, n, "append")) {
        tv_list_push(c->a, o.u.l, x);
        *r = tv_none();
    } else if (o.k == V_LIST && name_is(name, n, "pop") && o.u.l->n) {
        *r = o.u.l->v[--o.u.l->n];
    } else if (dict && name_is(name, n, "items")) *r = dict_items(c, o);
    else if (dict && (name_is(name, n, "keys") || name_is(name, n, "values"))) {
        *r = tv_list_new(c->a);
        for (size_t i = 0; i < o.u.d->n; i++) {
            tv k = {.k = V_STR, .u.s = o.u.d->key[i]};
            tv_list_push(c->a, r->u.l, name[0] == 'k' ? k : o.u.d->val[i]);
        }
    } else if (dict && name_is(name, n, "get")) {
        tv *v = x.k == V_STR ? tv_dict_get(o.u.d, x.u.s->s, x.u.s->len) : NULL;
        *r = v ? *v : tp_arg(a, 1, NULL, tv_none());
    } else return 0;
    return 1;
}

int tp_method(tp_ctx *c, const tp_node *at, tv obj, const char *name, size_t n, tp_args *args, tv *res)
{
    if (obj.k == V_STR) return m_str(c, at, obj, name, n, args, res);
    if (obj.k == V_LIST || obj.k == V_DICT || obj.k == V_NS) return m_container(c, obj, name, n, args, res);
    return 0;
}
