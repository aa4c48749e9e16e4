/* Chat templates: the evaluator. Expressions (tp_eval) and statements (tp_exec) over the
 * tree of template_parse.c, with Python's semantics where Jinja borrows them (truthiness,
 * `and`/`or` returning an operand, negative indices, slices, floor division).
 * Scopes: the root scope holds the render's variables; a for loop opens a scope (so a
 * `set` inside it is not seen after it: that is what namespace() is for); a macro call
 * opens a scope above the root, not above its caller. */
#include <math.h>
#include "core/fpguard.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "seqkv.h"
#include "server/template_int.h"

void tp_error(tp_ctx *c, const tp_node *at, const char *fmt, ...)
{
    char msg[sizeof c->a->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tp_fail(c->a, SKV_ERR_FORMAT, at ? at->line : 0, at ? at->col : 0, "%s", msg);
}

void tp_step(tp_ctx *c, const tp_node *at)
{
    if (++c->steps > c->lim->max_steps)
        tp_fail(c->a, SKV_ERR_RANGE, at->line, at->col, "template step limit (%llu) exceeded",
                (unsigned long long)c->lim->max_steps);
}

static void tp_enter(tp_ctx *c, const tp_node *at)
{
    if (++c->depth > c->lim->max_depth)
        tp_fail(c->a, SKV_ERR_RANGE, at->line, at->col, "template recursion deeper than %d",
                c->lim->max_depth);
}

/* ---- lookups ---- */
static tv *tp_lookup(tp_scope *sc, const char *name, size_t n)
{
    for (; sc; sc = sc->up) {
        tv *v = tv_dict_get(sc->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static tv tp_name(tp_ctx *c, const tp_node *e)
{
    tv *v = tp_lookup(c->scope, e->name, e->name_n);
    if (v) return *v;
    int fn = tp_global_index(e->name, e->name_n);
    if (fn < 0) return tv_undef();
    tv f = {.k = V_FUNC, .u.fn = fn};
    return f;
}

tv tp_getattr(tp_ctx *c, tv obj, const char *name, size_t n)
{
    (void)c;
    if (obj.k == V_DICT || obj.k == V_NS) {
        tv *v = tv_dict_get(obj.u.d, name, n);
        return v ? *v : tv_undef();
    }
    return tv_undef();
}

/* index i of a sequence of length n, Python-style (negative from the end); -1 if outside */
static int64_t tp_index(int64_t i, size_t n)
{
    if (i < 0) i += (int64_t)n;
    return i < 0 || (uint64_t)i >= n ? -1 : i;
}

tv tp_getitem(tp_ctx *c, const tp_node *at, tv obj, tv key)
{
    (void)at;
    if ((obj.k == V_DICT || obj.k == V_NS) && key.k == V_STR)
        return tp_getattr(c, obj, key.u.s->s, key.u.s->len);
    if (key.k != V_INT) return tv_undef();
    if (obj.k == V_LIST) {
        int64_t i = tp_index(key.u.i, obj.u.l->n);
        return i < 0 ? tv_undef() : obj.u.l->v[i];
    }
    if (obj.k == V_STR) {
        int64_t i = tp_index(key.u.i, obj.u.s->len);
        return i < 0 ? tv_undef() : tv_strn(c->a, obj.u.s->s + i, 1);
    }
    return tv_undef();
}

tv_list *tp_iterable(tp_ctx *c, const tp_node *at, tv v)
{
    tv out = tv_list_new(c->a);
    if (v.k == V_LIST) return v.u.l;
    if (v.k == V_DICT || v.k == V_NS) {
        for (size_t i = 0; i < v.u.d->n; i++) {
            tv k = {.k = V_STR, .u.s = v.u.d->key[i]};
            tv_list_push(c->a, out.u.l, k);
        }
    } else if (v.k == V_STR) {
        for (size_t i = 0; i < v.u.s->len;) {
            size_t j = i + 1;
            while (j < v.u.s->len && ((unsigned char)v.u.s->s[j] & 0xC0) == 0x80) j++;
            tv_list_push(c->a, out.u.l, tv_strn(c->a, v.u.s->s + i, j - i));
            i = j;
        }
    } else if (v.k != V_UNDEF && v.k != V_NONE) {
        tp_error(c, at, "%s is not iterable", tv_kind_name(v.k));
    }
    return out.u.l;
}

/* ---- expressions ---- */
static int64_t tp_slice_bound(tv v, int64_t n, int64_t dflt, int step_neg)
{
    if (v.k != V_INT) return dflt;
    int64_t i = v.u.i < 0 ? v.u.i + n : v.u.i;
    int64_t lo = step_neg ? -1 : 0, hi = step_neg ? n - 1 : n;
    return i < lo ? lo : i > hi ? hi : i;
}

static tv tp_slice(tp_ctx *c, const tp_node *e)
{
    tv obj = tp_eval(c, e->a);
    tv b = e->b ? tp_eval(c, e->b) : tv_none(), s = e->c ? tp_eval(c, e->c) : tv_none();
    tv st = e->d ? tp_eval(c, e->d) : tv_none();
    int64_t step = st.k == V_INT ? st.u.i : 1;
    if (step == 0) tp_error(c, e, "slice step cannot be zero");
    if (obj.k != V_LIST && obj.k != V_STR) return tv_undef();
    int64_t n = (int64_t)(obj.k == V_LIST ? obj.u.l->n : obj.u.s->len);
    int64_t from = tp_slice_bound(b, n, step < 0 ? n - 1 : 0, step < 0);
    int64_t to = tp_slice_bound(s, n, step < 0 ? -1 : n, step < 0);
    tv out = obj.k == V_LIST ? tv_list_new(c->a) : tv_strn(c->a, "", 0);
    tp_buf buf = {.limit = c->lim->max_output};
    for (int64_t i = from; step > 0 ? i < to : i > to;) {
        if (obj.k == V_LIST) tv_list_push(c->a, out.u.l, obj.u.l->v[i]);
        else tp_buf_put(c->a, &buf, obj.u.s->s + i, 1);
        /* the next index would pass `to`: stop before i + step, which may overflow for a
         * huge step (|to - i| <= n + 1 cannot) */
        if (step > 0 ? step >= to - i : step <= to - i) break;
        i += step;
    }
    return obj.k == V_LIST ? out : tv_strn(c->a, buf.p ? buf.p : "", buf.n);
}

tp_args tp_eval_args(tp_ctx *c, const tp_node *args)
{
    tp_args r = {0};
    size_t n = 0;
    for (const tp_node *e = args; e; e = e->next) n++;
    r.pos = tp_alloc(c->a, (n + 1) * sizeof *r.pos);
    r.kw = tp_alloc(c->a, (n + 1) * sizeof *r.kw);
    r.kw_name = tp_alloc(c->a, (n + 1) * sizeof *r.kw_name);
    for (const tp_node *e = args; e; e = e->next) {
        if (e->k != N_KWARG) { r.pos[r.n_pos++] = tp_eval(c, e); continue; }
        r.kw_name[r.n_kw] = tv_strn(c->a, e->name, e->name_n).u.s;
        r.kw[r.n_kw++] = tp_eval(c, e->a);
    }
    return r;
}

static tv tp_call(tp_ctx *c, const tp_node *e)
{
    tp_args args = tp_eval_args(c, e->args);
    tv res;
    if (e->a->k == N_ATTR) {
        tv obj = tp_eval(c, e->a->a);
        if (tp_method(c, e, obj, e->a->name, e->a->name_n, &args, &res)) return res;
    }
    tv f = tp_eval(c, e->a);
    if (f.k == V_MACRO) return tp_call_macro(c, f.u.m, e, &args);
    if (f.k == V_FUNC) return tp_call_global(c, e, f.u.fn, &args);
    if (e->a->k == N_ATTR)
        tp_error(c, e, "unknown method '%.*s' of %s", (int)e->a->name_n, e->a->name,
                 tv_kind_name(tp_eval(c, e->a->a).k));
    tp_error(c, e, "%s is not callable", tv_kind_name(f.k));
}

static tv tp_filter_node(tp_ctx *c, const tp_node *e)
{
    tv x = tp_eval(c, e->a);
    tp_args args = tp_eval_args(c, e->args);
    if (e->k == N_FILTER) return tp_filter(c, e, x, e->name, e->name_n, &args);
    int r = tp_test(c, e, x, e->name, e->name_n, &args);
    return tv_bool(e->op ? !r : r);
}

/* A filter block's chain f applied to the captured text x (f's innermost operand is NULL). */
static tv tp_filter_chain(tp_ctx *c, const tp_node *f, tv x)
{
    if (f->a) x = tp_filter_chain(c, f->a, x);
    tp_args args = tp_eval_args(c, f->args);
    return tp_filter(c, f, x, f->name, f->name_n, &args);
}

static tv tp_in(tp_ctx *c, const tp_node *e)
{
    tv x = tp_eval(c, e->a), hay = tp_eval(c, e->b);
    int r = 0;
    if (hay.k == V_STR && x.k == V_STR) {
        r = x.u.s->len == 0 || tv_find(hay.u.s->s, hay.u.s->len, x.u.s->s, x.u.s->len) != NULL;
    } else if (hay.k == V_DICT || hay.k == V_NS) {
        r = x.k == V_STR && tv_dict_get(hay.u.d, x.u.s->s, x.u.s->len) != NULL;
    } else if (hay.k == V_LIST) {
        for (size_t i = 0; i < hay.u.l->n && !r; i++) r = tv_equal(x, hay.u.l->v[i]);
    } else if (hay.k != V_UNDEF && hay.k != V_NONE) {
        tp_error(c, e, "'in' needs a string, list or dict, not %s", tv_kind_name(hay.k));
    }
    return tv_bool(e->op ? !r : r);
}

static tv tp_collection(tp_ctx *c, const tp_node *e)
{
    tv out = e->k == N_LIST ? tv_list_new(c->a) : tv_dict_new(c->a);
    for (const tp_node *it = e->args; it; it = it->next) {
        tv v = tp_eval(c, it);
        if (e->k == N_LIST) { tv_list_push(c->a, out.u.l, v); continue; }
        tv val = tp_eval(c, it = it->next);
        tv k = tv_to_str(c->a, v);
        tv_dict_set(c->a, out.u.d, k.u.s->s, k.u.s->len, val);
    }
    return out;
}

static tv tp_eval_node(tp_ctx *c, const tp_node *e)
{
    tv x;
    switch (e->k) {
    case N_LIT: return e->lit;
    case N_NAME: return tp_name(c, e);
    case N_ATTR: return tp_getattr(c, tp_eval(c, e->a), e->name, e->name_n);
    case N_ITEM: x = tp_eval(c, e->a); return tp_getitem(c, e, x, tp_eval(c, e->b));
    case N_SLICE: return tp_slice(c, e);
    case N_CALL: return tp_call(c, e);
    case N_FILTER: case N_TEST: return tp_filter_node(c, e);
    case N_NOT: return tv_bool(!tv_truthy(tp_eval(c, e->a)));
    case N_NEG: return tp_binop(c, e, tv_int(0), tp_eval(c, e->a));
    case N_BINOP: x = tp_eval(c, e->a); return tp_binop(c, e, x, tp_eval(c, e->b));
    case N_AND: x = tp_eval(c, e->a); return tv_truthy(x) ? tp_eval(c, e->b) : x;
    case N_OR: x = tp_eval(c, e->a); return tv_truthy(x) ? x : tp_eval(c, e->b);
    case N_COND:
        if (tv_truthy(tp_eval(c, e->a))) return tp_eval(c, e->b);
        return e->c ? tp_eval(c, e->c) : tv_undef();
    case N_LIST: case N_DICT: return tp_collection(c, e);
    case N_IN: return tp_in(c, e);
    default: tp_error(c, e, "not an expression");
    }
}

tv tp_eval(tp_ctx *c, const tp_node *e)
{
    tp_enter(c, e);
    tv v = tp_eval_node(c, e);
    c->depth--;
    return v;
}

/* ---- statements ---- */
static void tp_assign(tp_ctx *c, const tp_node *target, tv v)
{
    if (target->k == N_NAME) {
        tv_dict_set(c->a, c->scope->vars, target->name, target->name_n, v);
        return;
    }
    tv ns = tp_name(c, target->a);
    if (ns.k != V_NS && ns.k != V_DICT)
        tp_error(c, target, "'%.*s' is not a namespace", (int)target->a->name_n, target->a->name);
    tv_dict_set(c->a, ns.u.d, target->name, target->name_n, v);
}

static void tp_assign_targets(tp_ctx *c, const tp_node *targets, tv v)
{
    if (!targets->next) { tp_assign(c, targets, v); return; }
    if (v.k != V_LIST) tp_error(c, targets, "cannot unpack %s", tv_kind_name(v.k));
    size_t i = 0;
    for (const tp_node *t = targets; t; t = t->next, i++) {
        if (i >= v.u.l->n) tp_error(c, targets, "not enough values to unpack");
        tp_assign(c, t, v.u.l->v[i]);
    }
    if (i != v.u.l->n) tp_error(c, targets, "too many values to unpack");
}

static tv tp_capture(tp_ctx *c, const tp_node *body)
{
    tp_buf buf = {.limit = c->lim->max_output}, *saved = c->out;
    c->out = &buf;
    tp_exec(c, body);
    c->out = saved;
    c->loop_ctl = 0; /* a break outside a loop ends the block, no more */
    return tv_strn(c->a, buf.p ? buf.p : "", buf.n);
}

static tp_scope *tp_scope_new(tp_ctx *c, tp_scope *up)
{
    tp_scope *sc = tp_alloc(c->a, sizeof *sc);
    sc->vars = tv_dict_new(c->a).u.d;
    sc->up = up;
    return sc;
}

tv tp_call_macro(tp_ctx *c, const tp_node *m, const tp_node *at, tp_args *args)
{
    tp_scope *saved = c->scope;
    size_t i = 0;
    tp_enter(c, at);
    tp_step(c, at);
    c->scope = tp_scope_new(c, c->globals);
    for (const tp_node *p = m->args; p; p = p->next, i++) {
        tv *kw = NULL;
        for (size_t k = 0; k < args->n_kw; k++)
            if (args->kw_name[k]->len == p->name_n && memcmp(args->kw_name[k]->s, p->name, p->name_n) == 0)
                kw = &args->kw[k];
        tv v = i < args->n_pos ? args->pos[i] : kw ? *kw : p->a ? tp_eval(c, p->a) : tv_undef();
        tv_dict_set(c->a, c->scope->vars, p->name, p->name_n, v);
    }
    tv out = tp_capture(c, m->b);
    c->scope = saved;
    c->depth--;
    return out;
}

/* The loop variable's fields for item i of n (updated in place each iteration). */
static void tp_loop_vars(tp_ctx *c, tv_dict *loop, const tv_list *items, size_t i)
{
    size_t n = items->n;
    tv_dict_set(c->a, loop, "index", 5, tv_int((int64_t)i + 1));
    tv_dict_set(c->a, loop, "index0", 6, tv_int((int64_t)i));
    tv_dict_set(c->a, loop, "revindex", 8, tv_int((int64_t)(n - i)));
    tv_dict_set(c->a, loop, "revindex0", 9, tv_int((int64_t)(n - i - 1)));
    tv_dict_set(c->a, loop, "first", 5, tv_bool(i == 0));
    tv_dict_set(c->a, loop, "last", 4, tv_bool(i + 1 == n));
    tv_dict_set(c->a, loop, "length", 6, tv_int((int64_t)n));
    tv_dict_set(c->a, loop, "previtem", 8, i ? items->v[i - 1] : tv_undef());
    tv_dict_set(c->a, loop, "nextitem", 8, i + 1 < n ? items->v[i + 1] : tv_undef());
}

/* The items of a for loop, after its `if` filter. */
static tv_list *tp_for_items(tp_ctx *c, const tp_node *e)
{
    tv_list *all = tp_iterable(c, e, tp_eval(c, e->a));
    if (!e->d) return all;
    tv out = tv_list_new(c->a);
    for (size_t i = 0; i < all->n; i++) {
        tp_step(c, e);
        tp_assign_targets(c, e->args, all->v[i]);
        if (tv_truthy(tp_eval(c, e->d))) tv_list_push(c->a, out.u.l, all->v[i]);
    }
    return out.u.l;
}

static void tp_for(tp_ctx *c, const tp_node *e)
{
    tp_scope *saved = c->scope;
    c->scope = tp_scope_new(c, saved);
    tv_list *items = tp_for_items(c, e);
    tv loop = tv_dict_new(c->a);
    tv_dict_set(c->a, c->scope->vars, "loop", 4, loop);
    for (size_t i = 0; i < items->n; i++) {
        tp_step(c, e);
        tp_loop_vars(c, loop.u.d, items, i);
        tp_assign_targets(c, e->args, items->v[i]);
        tp_exec(c, e->b);
        int ctl = c->loop_ctl;
        c->loop_ctl = 0;
        if (ctl == 1) break;
    }
    if (items->n == 0 && e->c) tp_exec(c, e->c);
    c->scope = saved;
}

static void tp_stmt(tp_ctx *c, const tp_node *e)
{
    switch (e->k) {
    case N_TEXT: tp_buf_put(c->a, c->out, e->lit.u.s->s, e->lit.u.s->len); return;
    case N_OUTPUT: tv_to_buf(c->a, c->out, tp_eval(c, e->a), 0); return;
    case N_IF:
        tp_exec(c, tv_truthy(tp_eval(c, e->a)) ? e->b : e->c);
        return;
    case N_FOR: tp_for(c, e); return;
    case N_SET: tp_assign_targets(c, e->args, tp_eval(c, e->b)); return;
    case N_SET_BLOCK: tp_assign_targets(c, e->args, tp_capture(c, e->b)); return;
    case N_FILTER_BLOCK: tv_to_buf(c->a, c->out, tp_filter_chain(c, e->a, tp_capture(c, e->b)), 0); return;
    case N_MACRO: {
        tv m = {.k = V_MACRO, .u.m = e};
        tv_dict_set(c->a, c->scope->vars, e->name, e->name_n, m);
        return;
    }
    case N_BREAK: c->loop_ctl = 1; return;
    case N_CONTINUE: c->loop_ctl = 2; return;
    default: tp_error(c, e, "not a statement");
    }
}

void tp_exec(tp_ctx *c, const tp_node *body)
{
    for (const tp_node *e = body; e && !c->loop_ctl; e = e->next) {
        tp_enter(c, e);
        tp_stmt(c, e);
        c->depth--;
    }
}
