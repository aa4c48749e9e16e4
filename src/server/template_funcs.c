/* Chat templates: operators, global functions (range, namespace, raise_exception, dict,
 * strftime_now) and argument helpers. Integer arithmetic is checked: an overflow is a
 * template error, never undefined behaviour. */
#include <math.h>
#include "core/fpguard.h"

#include <string.h>
#include <time.h>

#include "seqkv.h"
#include "server/template_int.h"

tv *tp_kwarg(tp_args *args, const char *name)
{
    size_t n = strlen(name);
    for (size_t k = 0; k < args->n_kw; k++)
        if (args->kw_name[k]->len == n && memcmp(args->kw_name[k]->s, name, n) == 0)
            return &args->kw[k];
    return NULL;
}

/* Positional argument i, else keyword `name`, else dflt. */
tv tp_arg(tp_args *args, size_t i, const char *name, tv dflt)
{
    if (i < args->n_pos) return args->pos[i];
    tv *kw = name ? tp_kwarg(args, name) : NULL;
    return kw ? *kw : dflt;
}

/* ---- operators ---- */
static int tp_num(tv v) { return v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL; }
static double tp_dbl(tv v) { return v.k == V_FLOAT ? v.u.f : v.k == V_INT ? (double)v.u.i : v.u.b; }
static int64_t tp_i64(tv v) { return v.k == V_INT ? v.u.i : v.u.b; }

static tv tp_repeat(tp_ctx *c, const tp_node *at, tv seq, int64_t n)
{
    tv out = seq.k == V_LIST ? tv_list_new(c->a) : tv_strn(c->a, "", 0);
    tp_buf b = {.limit = c->lim->max_output};
    for (int64_t i = 0; i < n; i++) {
        tp_step(c, at);
        if (seq.k == V_STR) { tp_buf_put(c->a, &b, seq.u.s->s, seq.u.s->len); continue; }
        for (size_t j = 0; j < seq.u.l->n; j++) tv_list_push(c->a, out.u.l, seq.u.l->v[j]);
    }
    return seq.k == V_STR ? tv_strn(c->a, b.p ? b.p : "", b.n) : out;
}

/* x ~ y: both as text, whatever they are (a list ~ anything is not a list concatenation). */
static tv tp_cat_str(tp_ctx *c, tv x, tv y)
{
    tp_buf b = {.limit = c->lim->max_output};
    tv_to_buf(c->a, &b, x, 0);
    tv_to_buf(c->a, &b, y, 0);
    return tv_strn(c->a, b.p ? b.p : "", b.n);
}

/* x + y of two strings or two lists. */
static tv tp_concat(tp_ctx *c, tv x, tv y)
{
    if (x.k == V_LIST && y.k == V_LIST) {
        tv out = tv_list_new(c->a);
        for (size_t i = 0; i < x.u.l->n; i++) tv_list_push(c->a, out.u.l, x.u.l->v[i]);
        for (size_t i = 0; i < y.u.l->n; i++) tv_list_push(c->a, out.u.l, y.u.l->v[i]);
        return out;
    }
    return tp_cat_str(c, x, y);
}

static tv tp_int_pow(tp_ctx *c, const tp_node *at, int64_t b, int64_t e)
{
    if (e < 0) return tv_float(pow((double)b, (double)e));
    if (b == 0 || b == 1) return tv_int(e == 0 ? 1 : b);
    if (b == -1) return tv_int((e & 1) ? -1 : 1);
    int64_t r = 1;
    for (int64_t i = 0; i < e; i++) /* |b| >= 2: overflows within 63 rounds */
        if (__builtin_mul_overflow(r, b, &r)) tp_error(c, at, "integer overflow in **");
    return tv_int(r);
}

static tv tp_int_op(tp_ctx *c, const tp_node *at, int64_t x, int64_t y)
{
    int64_t r = 0;
    int ovf = 0;
    switch (at->op) {
    case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case OP_DIV: if (!y) tp_error(c, at, "division by zero"); return tv_float((double)x / (double)y);
    case OP_POW: return tp_int_pow(c, at, x, y);
    default: /* OP_FDIV, OP_MOD: Python rounds toward minus infinity */
        if (!y) tp_error(c, at, "division by zero");
        if (x == INT64_MIN && y == -1) ovf = 1;
        else if (at->op == OP_FDIV) r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
        else r = x % y + (((x % y != 0) && ((x < 0) != (y < 0))) ? y : 0);
    }
    if (ovf) tp_error(c, at, "integer overflow");
    return tv_int(r);
}

static tv tp_float_op(tp_ctx *c, const tp_node *at, double x, double y)
{
    switch (at->op) {
    case OP_ADD: return tv_float(x + y);
    case OP_SUB: return tv_float(x - y);
    case OP_MUL: return tv_float(x * y);
    case OP_POW: return tv_float(pow(x, y));
    default:
        if (y == 0.0) tp_error(c, at, "division by zero");
        if (at->op == OP_DIV) return tv_float(x / y);
        if (at->op == OP_FDIV) return tv_float(floor(x / y));
        return tv_float(x - floor(x / y) * y);
    }
}

static tv tp_compare_op(tp_ctx *c, const tp_node *at, tv x, tv y)
{
    if (at->op == OP_EQ) return tv_bool(tv_equal(x, y));
    if (at->op == OP_NE) return tv_bool(!tv_equal(x, y));
    int ok, r = tv_compare(x, y, &ok);
    if (!ok) tp_error(c, at, "cannot compare %s with %s", tv_kind_name(x.k), tv_kind_name(y.k));
    return tv_bool(at->op == OP_LT ? r < 0 : at->op == OP_LE ? r <= 0 : at->op == OP_GT ? r > 0 : r >= 0);
}

tv tp_binop(tp_ctx *c, const tp_node *at, tv x, tv y)
{
    int op = at->k == N_NEG ? OP_SUB : at->op;
    if (op >= OP_EQ) return tp_compare_op(c, at, x, y);
    if (op == OP_CAT) return tp_cat_str(c, x, y);
    if (tp_num(x) && tp_num(y)) {
        tp_node tmp = *at;
        tmp.op = op;
        if (x.k != V_FLOAT && y.k != V_FLOAT) return tp_int_op(c, &tmp, tp_i64(x), tp_i64(y));
        return tp_float_op(c, &tmp, tp_dbl(x), tp_dbl(y));
    }
    if (op == OP_ADD && x.k == y.k && (x.k == V_STR || x.k == V_LIST)) return tp_concat(c, x, y);
    /* llama.cpp's engine: a string plus none or undefined is the string (templates such as
     * firefunction-v2's add variables only some callers set) */
    if (op == OP_ADD && ((x.k == V_STR && (y.k == V_NONE || y.k == V_UNDEF)) ||
                         (y.k == V_STR && (x.k == V_NONE || x.k == V_UNDEF))))
        return x.k == V_STR ? x : y;
    if (op == OP_MUL && (x.k == V_STR || x.k == V_LIST) && y.k == V_INT)
        return tp_repeat(c, at, x, y.u.i);
    if (op == OP_MUL && (y.k == V_STR || y.k == V_LIST) && x.k == V_INT)
        return tp_repeat(c, at, y, x.u.i);
    tp_error(c, at, "unsupported operand types: %s and %s", tv_kind_name(x.k), tv_kind_name(y.k));
}

/* ---- global functions ---- */
static tv g_range(tp_ctx *c, const tp_node *at, tp_args *a)
{
    tv x = tp_arg(a, 0, NULL, tv_int(0)), y = tp_arg(a, 1, NULL, tv_none());
    tv z = tp_arg(a, 2, NULL, tv_int(1));
    if (x.k != V_INT || (y.k != V_INT && y.k != V_NONE) || z.k != V_INT || z.u.i == 0)
        tp_error(c, at, "range() needs integer arguments and a non-zero step");
    int64_t from = y.k == V_NONE ? 0 : x.u.i, to = y.k == V_NONE ? x.u.i : y.u.i, step = z.u.i;
    tv out = tv_list_new(c->a);
    for (int64_t i = from; step > 0 ? i < to : i > to; i += step) {
        tp_step(c, at);
        tv_list_push(c->a, out.u.l, tv_int(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return out;
}

static tv g_namespace(tp_ctx *c, const tp_node *at, tp_args *a)
{
    tv ns = tv_dict_new(c->a);
    ns.k = V_NS;
    (void)at;
    for (size_t i = 0; i < a->n_pos; i++) /* namespace(dict) copies the dict */
        if (a->pos[i].k == V_DICT)
            for (size_t k = 0; k < a->pos[i].u.d->n; k++)
                tv_dict_set(c->a, ns.u.d, a->pos[i].u.d->key[k]->s, a->pos[i].u.d->key[k]->len,
                            a->pos[i].u.d->val[k]);
    for (size_t k = 0; k < a->n_kw; k++)
        tv_dict_set(c->a, ns.u.d, a->kw_name[k]->s, a->kw_name[k]->len, a->kw[k]);
    return ns;
}

static tv g_dict(tp_ctx *c, const tp_node *at, tp_args *a)
{
    tv d = g_namespace(c, at, a);
    d.k = V_DICT;
    return d;
}

static tv g_raise(tp_ctx *c, const tp_node *at, tp_args *a)
{
    tv msg = tv_to_str(c->a, tp_arg(a, 0, NULL, tv_undef()));
    tp_error(c, at, "raise_exception: %.*s", (int)(msg.u.s->len > 150 ? 150 : msg.u.s->len), msg.u.s->s);
}

static tv g_strftime_now(tp_ctx *c, const tp_node *at, tp_args *a)
{
    tv fmt = tp_arg(a, 0, NULL, tv_undef());
    if (fmt.k != V_STR || fmt.u.s->len > 64) tp_error(c, at, "strftime_now() needs a short format");
    char out[256];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    size_t n = strftime(out, sizeof out, fmt.u.s->s, &tm); /* the template's own format */
#pragma GCC diagnostic pop
    return tv_strn(c->a, out, n);
}

typedef tv (*tp_global_fn)(tp_ctx *, const tp_node *, tp_args *);
static const struct { const char *name; tp_global_fn fn; } tp_globals[] = {
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"raise_exception", g_raise},
    {"strftime_now", g_strftime_now},
};

int tp_global_index(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof tp_globals / sizeof tp_globals[0]; i++)
        if (strlen(tp_globals[i].name) == n && memcmp(tp_globals[i].name, name, n) == 0) return (int)i;
    return -1;
}

tv tp_call_global(tp_ctx *c, const tp_node *at, int fn, tp_args *args)
{
    return tp_globals[fn].fn(c, at, args);
}
