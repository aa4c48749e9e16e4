/* Chat templates: the parser. Recursive descent over the tokens of tp_lex into tp_node
 * trees, with Jinja's precedence, lowest first:
 *   a if c else b  <  or  <  and  <  not  <  == != < > <= >= in, not in  <  ~  <  + -
 *   <  * / // %  <  **  <  unary - +  <  filters (|f), tests (is t)  <  postfix . [] ()
 * Nesting is bounded (max_depth) so a hostile template cannot exhaust the stack. */
#include <stdlib.h>
#include "core/fpguard.h"

#include <string.h>

#include "seqkv.h"
#include "server/template_int.h"

typedef struct {
    tp_arena *a;
    const tp_tok *t;
    size_t i, n;
    int depth, max_depth;
} tp_parser;

static tp_node *ps_expr(tp_parser *P);
static tp_node *ps_or(tp_parser *P);
static tp_node *ps_unary(tp_parser *P);
static tp_node *ps_body(tp_parser *P, const char *const *ends, const char **which);

static const tp_tok *ps_peek(const tp_parser *P) { return &P->t[P->i]; }

_Noreturn static void ps_fail(tp_parser *P, const char *what)
{
    const tp_tok *t = ps_peek(P);
    tp_fail(P->a, SKV_ERR_FORMAT, t->line, t->col, "%s (at '%.*s')", what,
            (int)(t->n > 20 ? 20 : t->n), t->k == T_EOF ? "end of template" : t->s);
}

static int ps_is(const tp_parser *P, tp_tok_kind k, const char *s)
{
    const tp_tok *t = ps_peek(P);
    return t->k == k && (!s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0));
}

static int ps_accept(tp_parser *P, tp_tok_kind k, const char *s)
{
    if (!ps_is(P, k, s)) return 0;
    P->i++;
    return 1;
}

static void ps_expect(tp_parser *P, tp_tok_kind k, const char *s, const char *what)
{
    if (!ps_accept(P, k, s)) ps_fail(P, what);
}

static tp_node *ps_node(tp_parser *P, tp_node_kind k)
{
    tp_node *e = tp_alloc(P->a, sizeof *e);
    e->k = k, e->line = ps_peek(P)->line, e->col = ps_peek(P)->col;
    return e;
}

static const tp_tok *ps_name(tp_parser *P, const char *what)
{
    if (!ps_is(P, T_NAME, NULL)) ps_fail(P, what);
    return &P->t[P->i++];
}

static void ps_enter(tp_parser *P)
{
    if (++P->depth > P->max_depth) ps_fail(P, "template nested too deeply");
}

/* ---- expressions ---- */

/* Call arguments after '(' up to ')': positional, then name=value (N_KWARG). */
static tp_node *ps_args(tp_parser *P)
{
    tp_node *head = NULL, **tail = &head;
    while (!ps_accept(P, T_OP, ")")) {
        if (head) ps_expect(P, T_OP, ",", "expected ',' or ')'");
        if (ps_accept(P, T_OP, ")")) break;
        tp_node *e;
        if (ps_is(P, T_NAME, NULL) && P->t[P->i + 1].k == T_OP && P->t[P->i + 1].n == 1 &&
            P->t[P->i + 1].s[0] == '=') {
            e = ps_node(P, N_KWARG);
            const tp_tok *nm = ps_name(P, "argument name");
            e->name = nm->s, e->name_n = nm->n;
            P->i++;
            e->a = ps_expr(P);
        } else e = ps_expr(P);
        *tail = e, tail = &e->next;
    }
    return head;
}

/* Items up to the closer; for a dict, key ':' value pairs. */
static tp_node *ps_items(tp_parser *P, const char *close, int dict)
{
    tp_node *head = NULL, **tail = &head;
    while (!ps_accept(P, T_OP, close)) {
        if (head) ps_expect(P, T_OP, ",", "expected ',' between items");
        if (ps_accept(P, T_OP, close)) break;
        tp_node *e = ps_expr(P);
        *tail = e, tail = &e->next;
        if (!dict) continue;
        ps_expect(P, T_OP, ":", "expected ':' in a dict");
        e = ps_expr(P);
        *tail = e, tail = &e->next;
    }
    return head;
}

static tp_node *ps_literal(tp_parser *P)
{
    const tp_tok *t = ps_peek(P);
    tp_node *e = ps_node(P, N_LIT);
    if (t->k == T_STRING) {
        tp_buf b = {.limit = (size_t)-1};
        while (ps_is(P, T_STRING, NULL)) tp_buf_put(P->a, &b, P->t[P->i].s, P->t[P->i].n), P->i++;
        e->lit = tv_strn(P->a, b.p ? b.p : "", b.n);
        return e;
    }
    char tmp[64];
    size_t n = t->n < sizeof tmp - 1 ? t->n : sizeof tmp - 1;
    memcpy(tmp, t->s, n), tmp[n] = 0;
    e->lit = t->k == T_INT ? tv_int(strtoll(tmp, NULL, 10)) : tv_float(strtod(tmp, NULL));
    P->i++;
    return e;
}

static tp_node *ps_name_primary(tp_parser *P)
{
    static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
    const tp_tok *t = ps_peek(P);
    for (int k = 0; k < 6; k++)
        if (ps_is(P, T_NAME, consts[k])) {
            tp_node *e = ps_node(P, N_LIT);
            e->lit = k < 2 ? tv_bool(1) : k < 4 ? tv_bool(0) : tv_none();
            P->i++;
            return e;
        }
    tp_node *e = ps_node(P, N_NAME);
    e->name = t->s, e->name_n = t->n;
    P->i++;
    return e;
}

static tp_node *ps_primary(tp_parser *P)
{
    const tp_tok *t = ps_peek(P);
    if (t->k == T_STRING || t->k == T_INT || t->k == T_FLOAT) return ps_literal(P);
    if (t->k == T_NAME) return ps_name_primary(P);
    tp_node *e;
    if (ps_accept(P, T_OP, "(")) {
        e = ps_expr(P);
        if (!ps_is(P, T_OP, ",")) {
            ps_expect(P, T_OP, ")", "expected ')'");
            return e;
        }
        tp_node *l = ps_node(P, N_LIST); /* a tuple is a list here */
        P->i++;
        l->args = e, e->next = ps_items(P, ")", 0);
        return l;
    }
    if (ps_is(P, T_OP, "[") || ps_is(P, T_OP, "{")) {
        int dict = t->s[0] == '{';
        e = ps_node(P, dict ? N_DICT : N_LIST);
        P->i++;
        e->args = ps_items(P, dict ? "}" : "]", dict);
        return e;
    }
    ps_fail(P, "expected an expression");
}

static tp_node *ps_subscript(tp_parser *P, tp_node *obj)
{
    tp_node *e = ps_node(P, N_ITEM), *part[3] = {NULL, NULL, NULL};
    int k = 0;
    e->a = obj;
    for (;;) {
        if (!ps_is(P, T_OP, ":") && !ps_is(P, T_OP, "]")) part[k] = ps_expr(P);
        if (ps_accept(P, T_OP, "]")) break;
        ps_expect(P, T_OP, ":", "expected ':' or ']'");
        if (++k > 2) ps_fail(P, "too many ':' in a slice");
        e->k = N_SLICE;
    }
    e->b = part[0], e->c = part[1], e->d = part[2];
    if (e->k == N_ITEM && !e->b) ps_fail(P, "empty subscript");
    return e;
}

static tp_node *ps_postfix(tp_parser *P, tp_node *e)
{
    for (;;) {
        tp_node *x;
        if (ps_accept(P, T_OP, ".")) {
            x = ps_node(P, N_ATTR);
            const tp_tok *nm = ps_is(P, T_INT, NULL) ? &P->t[P->i++] : ps_name(P, "attribute name");
            x->name = nm->s, x->name_n = nm->n;
        } else if (ps_accept(P, T_OP, "[")) {
            x = ps_subscript(P, e);
        } else if (ps_accept(P, T_OP, "(")) {
            x = ps_node(P, N_CALL);
            x->args = ps_args(P);
        } else return e;
        if (!x->a) x->a = e;
        e = x;
    }
}

static int ps_starts_operand(const tp_parser *P)
{
    static const char *const kw[] = {"and", "or", "else", "if", "in", "not", "is", NULL};
    const tp_tok *t = ps_peek(P);
    if (t->k == T_STRING || t->k == T_INT || t->k == T_FLOAT) return 1;
    if (t->k != T_NAME) return 0;
    for (int k = 0; kw[k]; k++)
        if (ps_is(P, T_NAME, kw[k])) return 0;
    return 1;
}

static tp_node *ps_filter_or_test(tp_parser *P, tp_node *e, int test)
{
    tp_node *x = ps_node(P, test ? N_TEST : N_FILTER);
    if (test) x->op = ps_accept(P, T_NAME, "not");
    const tp_tok *nm = ps_name(P, test ? "test name" : "filter name");
    x->name = nm->s, x->name_n = nm->n, x->a = e;
    if (ps_accept(P, T_OP, "(")) x->args = ps_args(P);
    else if (test && ps_starts_operand(P)) x->args = ps_postfix(P, ps_primary(P));
    return x;
}

static tp_node *ps_filters(tp_parser *P, tp_node *e)
{
    for (;;) {
        if (ps_accept(P, T_OP, "|")) e = ps_filter_or_test(P, e, 0);
        else if (ps_accept(P, T_NAME, "is")) e = ps_filter_or_test(P, e, 1);
        else return e;
    }
}

static tp_node *ps_unary(tp_parser *P)
{
    ps_enter(P);
    tp_node *e;
    if (ps_is(P, T_OP, "-") || ps_is(P, T_OP, "+")) {
        int neg = ps_peek(P)->s[0] == '-';
        e = ps_node(P, N_NEG);
        P->i++;
        e->a = ps_unary(P);
        if (!neg) e = e->a;
    } else e = ps_postfix(P, ps_primary(P));
    P->depth--;
    return ps_filters(P, e);
}

typedef struct { const char *s; int op; } ps_opdef;

static tp_node *ps_binary(tp_parser *P, int level);

static const ps_opdef *ps_find_op(const tp_parser *P, const ps_opdef *ops)
{
    for (; ops->s; ops++)
        if (ps_is(P, T_OP, ops->s)) return ops;
    return NULL;
}

/* levels: 0 compare, 1 ~, 2 + -, 3 * / // %, 4 ** */
static tp_node *ps_binary(tp_parser *P, int level)
{
    static const ps_opdef ops[5][7] = {
        {{"==", OP_EQ}, {"!=", OP_NE}, {"<", OP_LT}, {"<=", OP_LE}, {">", OP_GT}, {">=", OP_GE}, {0, 0}},
        {{"~", OP_CAT}, {0, 0}}, {{"+", OP_ADD}, {"-", OP_SUB}, {0, 0}},
        {{"*", OP_MUL}, {"/", OP_DIV}, {"//", OP_FDIV}, {"%", OP_MOD}, {0, 0}},
        {{"**", OP_POW}, {0, 0}}};
    tp_node *e = level < 4 ? ps_binary(P, level + 1) : ps_unary(P);
    for (;;) {
        const ps_opdef *d = ps_find_op(P, ops[level]);
        int in = 0;
        if (!d && level == 0) {
            if (ps_is(P, T_NAME, "in")) in = 1;
            else if (ps_is(P, T_NAME, "not") && P->t[P->i + 1].k == T_NAME &&
                     P->t[P->i + 1].n == 2 && memcmp(P->t[P->i + 1].s, "in", 2) == 0) in = 2;
        }
        if (!d && !in) return e;
        tp_node *x = ps_node(P, in ? N_IN : N_BINOP);
        P->i += in == 2 ? 2 : 1;
        x->op = in ? in == 2 : d->op;
        x->a = e, x->b = level < 4 ? ps_binary(P, level + 1) : ps_unary(P);
        e = x;
    }
}

static tp_node *ps_not(tp_parser *P)
{
    if (!ps_is(P, T_NAME, "not")) return ps_binary(P, 0);
    tp_node *e = ps_node(P, N_NOT);
    P->i++;
    ps_enter(P);
    e->a = ps_not(P);
    P->depth--;
    return e;
}

static tp_node *ps_logic(tp_parser *P, int is_or)
{
    tp_node *e = is_or ? ps_logic(P, 0) : ps_not(P);
    while (ps_is(P, T_NAME, is_or ? "or" : "and")) {
        tp_node *x = ps_node(P, is_or ? N_OR : N_AND);
        P->i++;
        x->a = e, x->b = is_or ? ps_logic(P, 0) : ps_not(P);
        e = x;
    }
    return e;
}

static tp_node *ps_or(tp_parser *P) { return ps_logic(P, 1); }

static tp_node *ps_expr(tp_parser *P)
{
    ps_enter(P);
    tp_node *e = ps_or(P);
    while (ps_is(P, T_NAME, "if")) {
        tp_node *x = ps_node(P, N_COND);
        P->i++;
        x->b = e, x->a = ps_or(P);
        if (ps_accept(P, T_NAME, "else")) x->c = ps_expr(P);
        e = x;
    }
    P->depth--;
    return e;
}

/* ---- statements ---- */
static void ps_end_tag(tp_parser *P) { ps_expect(P, T_BLOCK_END, NULL, "expected '%}'"); }

static tp_node *ps_if(tp_parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *which;
    tp_node *e = ps_node(P, N_IF);
    e->a = ps_expr(P);
    ps_end_tag(P);
    e->b = ps_body(P, ends, &which);
    if (strcmp(which, "elif") == 0) return e->c = ps_if(P), e;
    if (strcmp(which, "else") == 0) {
        static const char *const end_only[] = {"endif", NULL};
        ps_end_tag(P);
        e->c = ps_body(P, end_only, &which);
    }
    ps_end_tag(P);
    return e;
}

/* Names separated by commas (for and set targets); namespace attributes when attr. */
static tp_node *ps_targets(tp_parser *P, int attr)
{
    tp_node *head = NULL, **tail = &head;
    do {
        tp_node *e = ps_node(P, N_NAME);
        const tp_tok *nm = ps_name(P, "expected a variable name");
        e->name = nm->s, e->name_n = nm->n;
        if (attr && ps_accept(P, T_OP, ".")) {
            tp_node *x = ps_node(P, N_ATTR);
            nm = ps_name(P, "attribute name");
            x->name = nm->s, x->name_n = nm->n, x->a = e;
            e = x;
        }
        *tail = e, tail = &e->next;
    } while (ps_accept(P, T_OP, ","));
    return head;
}

static tp_node *ps_for(tp_parser *P)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *which;
    tp_node *e = ps_node(P, N_FOR);
    e->args = ps_targets(P, 0);
    ps_expect(P, T_NAME, "in", "expected 'in'");
    e->a = ps_or(P);
    if (ps_accept(P, T_NAME, "if")) e->d = ps_or(P);
    ps_accept(P, T_NAME, "recursive");
    ps_end_tag(P);
    e->b = ps_body(P, ends, &which);
    if (strcmp(which, "else") == 0) {
        static const char *const end_only[] = {"endfor", NULL};
        ps_end_tag(P);
        e->c = ps_body(P, end_only, &which);
    }
    ps_end_tag(P);
    return e;
}

static tp_node *ps_set(tp_parser *P)
{
    tp_node *e = ps_node(P, N_SET);
    e->args = ps_targets(P, 1);
    if (ps_accept(P, T_OP, "=")) {
        e->b = ps_expr(P);
        ps_end_tag(P);
        return e;
    }
    static const char *const ends[] = {"endset", NULL};
    const char *which;
    ps_end_tag(P);
    e->k = N_SET_BLOCK;
    e->b = ps_body(P, ends, &which);
    ps_end_tag(P);
    return e;
}

/* {% filter NAME[(ARGS)] [| NAME...] %} BODY {% endfilter %}: the body's output through the
 * filters (the innermost one's operand left NULL: the captured text). */
static tp_node *ps_filter_block(tp_parser *P)
{
    static const char *const ends[] = {"endfilter", NULL};
    const char *which;
    tp_node *e = ps_node(P, N_FILTER_BLOCK);
    e->a = ps_filter_or_test(P, NULL, 0);
    while (ps_accept(P, T_OP, "|")) e->a = ps_filter_or_test(P, e->a, 0);
    ps_end_tag(P);
    e->b = ps_body(P, ends, &which);
    ps_end_tag(P);
    return e;
}

static tp_node *ps_macro(tp_parser *P)
{
    static const char *const ends[] = {"endmacro", NULL};
    const char *which;
    tp_node *e = ps_node(P, N_MACRO), **tail = &e->args;
    const tp_tok *nm = ps_name(P, "macro name");
    e->name = nm->s, e->name_n = nm->n;
    ps_expect(P, T_OP, "(", "expected '('");
    while (!ps_accept(P, T_OP, ")")) {
        if (e->args) ps_expect(P, T_OP, ",", "expected ',' or ')'");
        tp_node *p = ps_node(P, N_NAME);
        nm = ps_name(P, "parameter name");
        p->name = nm->s, p->name_n = nm->n;
        if (ps_accept(P, T_OP, "=")) p->a = ps_expr(P);
        *tail = p, tail = &p->next;
    }
    ps_end_tag(P);
    e->b = ps_body(P, ends, &which);
    ps_end_tag(P);
    return e;
}

static tp_node *ps_block(tp_parser *P, const char *const *ends, const char **which)
{
    const tp_tok *nm = ps_name(P, "expected a tag name");
    for (size_t k = 0; ends && ends[k]; k++)
        if (nm->n == strlen(ends[k]) && memcmp(nm->s, ends[k], nm->n) == 0) {
            *which = ends[k];
            return NULL;
        }
    P->i--;
    if (ps_accept(P, T_NAME, "if")) return ps_if(P);
    if (ps_accept(P, T_NAME, "for")) return ps_for(P);
    if (ps_accept(P, T_NAME, "set")) return ps_set(P);
    if (ps_accept(P, T_NAME, "macro")) return ps_macro(P);
    if (ps_accept(P, T_NAME, "filter")) return ps_filter_block(P);
    int brk = ps_is(P, T_NAME, "break"), cont = ps_is(P, T_NAME, "continue");
    int skip = ps_is(P, T_NAME, "generation") || ps_is(P, T_NAME, "endgeneration");
    if (!brk && !cont && !skip) ps_fail(P, "unknown or unexpected tag");
    tp_node *e = ps_node(P, brk ? N_BREAK : cont ? N_CONTINUE : N_TEXT);
    if (skip) e->lit = tv_strn(P->a, "", 0);
    P->i++;
    ps_end_tag(P);
    return e;
}

static tp_node *ps_stmt(tp_parser *P, const char *const *ends, const char **which)
{
    const tp_tok *t = ps_peek(P);
    tp_node *e;
    if (t->k == T_TEXT) {
        e = ps_node(P, N_TEXT);
        e->lit = tv_strn(P->a, t->s, t->n);
        P->i++;
        return e;
    }
    if (ps_accept(P, T_VAR_BEGIN, NULL)) {
        e = ps_node(P, N_OUTPUT);
        e->a = ps_expr(P);
        ps_expect(P, T_VAR_END, NULL, "expected '}}'");
        return e;
    }
    if (!ps_accept(P, T_BLOCK_BEGIN, NULL)) ps_fail(P, "unexpected token");
    ps_enter(P);
    e = ps_block(P, ends, which);
    P->depth--;
    return e;
}

/* Statements up to a block tag named in ends (consumed up to its name; *which names it),
 * or to the end of the template when ends is NULL. */
static tp_node *ps_body(tp_parser *P, const char *const *ends, const char **which)
{
    tp_node *head = NULL, **tail = &head;
    *which = NULL;
    for (;;) {
        if (ps_is(P, T_EOF, NULL)) {
            if (ends) ps_fail(P, "missing end tag");
            return head;
        }
        tp_node *e = ps_stmt(P, ends, which);
        if (!e) return head;
        *tail = e, tail = &e->next;
    }
}

tp_node *tp_parse(tp_arena *a, const tp_tok *toks, size_t n, int max_depth)
{
    tp_parser P = {.a = a, .t = toks, .n = n, .max_depth = max_depth};
    const char *which;
    return ps_body(&P, NULL, &which);
}
