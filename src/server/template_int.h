/* Internals of the chat-template interpreter (template*.c only).
 *
 * READ ME FIRST
 *  - Every allocation of a parse or a render comes from one arena (tp_arena); a parse's
 *    arena lives as long as its skv_tmpl, a render's is dropped when the render returns.
 *    So values are never freed one by one, and errors unwind with longjmp to the entry
 *    point (skv_tmpl_parse / skv_tmpl_render), which frees the arena: nothing leaks.
 *  - The arena refuses to grow past its limit: memory is bounded by the input.
 *  - Values are small structs passed by value; strings are immutable; lists, dicts and
 *    namespaces are shared by reference (Python semantics: list.append is visible to
 *    every holder).
 *  - Strings are bytes (UTF-8 passes through); `length` counts code points, slices and
 *    indexing work on bytes. */
#ifndef SKV_SERVER_TEMPLATE_INT_H
#define SKV_SERVER_TEMPLATE_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "server/template.h"

/* ---- arena + error unwinding ---- */
typedef struct tp_block tp_block;
typedef struct {
    tp_block *head;
    size_t used, limit;   /* bytes handed out in all blocks; the bound */
    jmp_buf *jump;        /* where tp_fail lands */
    skv_tmpl_error *err;
    int status;           /* the SKV_ERR_* that tp_fail recorded */
} tp_arena;

void *tp_alloc(tp_arena *a, size_t n);
void tp_arena_free(tp_arena *a);
_Noreturn void tp_fail(tp_arena *a, int status, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Runs fn(a, arg) with tp_fail landing here: SKV_OK, or the status tp_fail recorded. The only
 * setjmp of the interpreter. It lives in its own translation unit on purpose: a caller that
 * calloc()s the arena and calls setjmp itself lets the optimiser assume the block is unchanged
 * by the second return of setjmp (nothing had escaped yet), so clang -O2 read back the
 * calloc()'s zeros instead of the status tp_fail stored. Here the arena is an argument. */
int tp_run(tp_arena *a, void (*fn)(tp_arena *a, void *arg), void *arg);

/* ---- values ---- */
typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO,
               V_FUNC } tv_kind;
typedef struct tv_str { size_t len; char s[]; } tv_str;
typedef struct tv_list tv_list;
typedef struct tv_dict tv_dict;
typedef struct tp_node tp_node;
typedef struct {
    tv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        tv_str *s;
        tv_list *l;
        tv_dict *d;       /* V_DICT and V_NS */
        const tp_node *m; /* V_MACRO */
        int fn;           /* V_FUNC: index into the globals table */
    } u;
} tv;
struct tv_list { size_t n, cap; tv *v; };
struct tv_dict { size_t n, cap; tv_str **key; tv *val; };

/* a growing byte buffer in the arena */
typedef struct { char *p; size_t n, cap, limit; } tp_buf;
void tp_buf_put(tp_arena *a, tp_buf *b, const char *s, size_t n);

tv tv_undef(void);
tv tv_none(void);
tv tv_bool(int b);
tv tv_int(int64_t i);
tv tv_float(double f);
tv tv_strn(tp_arena *a, const char *s, size_t n);
tv tv_cstr(tp_arena *a, const char *s);
tv tv_list_new(tp_arena *a);
tv tv_dict_new(tp_arena *a);
void tv_list_push(tp_arena *a, tv_list *l, tv v);
void tv_dict_set(tp_arena *a, tv_dict *d, const char *k, size_t kn, tv v);
tv *tv_dict_get(const tv_dict *d, const char *k, size_t kn);
int tv_truthy(tv v);
int tv_equal(tv a, tv b);
/* <0, 0, >0; sets *ok = 0 when the kinds cannot be ordered */
int tv_compare(tv a, tv b, int *ok);
/* str(v) as Python prints it (None, True, 1.5, ['a', 1], {'k': 'v'}); repr: quote strings */
void tv_to_buf(tp_arena *a, tp_buf *b, tv v, int repr);
tv tv_to_str(tp_arena *a, tv v);
/* json.dumps(v, ensure_ascii=False, indent) ; indent < 0: one line with ", " and ": " */
void tv_to_json(tp_arena *a, tp_buf *b, tv v, int indent, int depth);
const char *tv_kind_name(tv_kind k);
size_t tv_utf8_len(const char *s, size_t n);
/* the first occurrence of needle[0..m) in hay[0..n), or NULL (memmem, which C11 lacks) */
const char *tv_find(const char *hay, size_t n, const char *needle, size_t m);

/* JSON text (s[0..n)) as a value: objects are dicts (key order kept), arrays lists; any
 * fault, or nesting past max_depth, is a tp_fail (template_json.c). */
tv tp_json_value(tp_arena *a, const char *s, size_t n, int max_depth);

/* ---- tokens ---- */
typedef enum { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING,
               T_INT, T_FLOAT, T_OP, T_EOF } tp_tok_kind;
typedef struct {
    tp_tok_kind k;
    const char *s;  /* T_STRING: the decoded bytes (arena); else a pointer into the source */
    size_t n;
    int line, col;
} tp_tok;

/* Splits src into tokens (arena array ending with T_EOF); *n_out: the count. */
tp_tok *tp_lex(tp_arena *a, const char *src, size_t len, size_t *n_out);

/* ---- syntax tree ---- */
typedef enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_FILTER_BLOCK, N_MACRO, N_BREAK, N_CONTINUE,
    /* expressions */
    N_LIT, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG,
    N_BINOP, N_AND, N_OR, N_COND, N_LIST, N_DICT, N_IN, N_KWARG
} tp_node_kind;

struct tp_node {
    tp_node_kind k;
    int line, col;
    int op;              /* N_BINOP: the operator (tp_op); N_TEST / N_IN: negated */
    const char *name;    /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_KWARG, N_MACRO, N_SET target */
    size_t name_n;
    tv lit;              /* N_LIT, N_TEXT */
    tp_node *a, *b, *c;  /* operands; N_IF: cond, then, else; N_FOR: iter, body, else;
                            N_FILTER_BLOCK: the filters (N_FILTER, innermost a NULL), body */
    tp_node *args;       /* N_CALL/N_FILTER/N_TEST args, N_LIST/N_DICT items, N_MACRO params
                            (N_NAME, default in a), N_FOR/N_SET targets (N_NAME / N_ATTR) */
    tp_node *d;          /* N_FOR: the `if` condition; N_SLICE: the step */
    tp_node *next;       /* next statement in a body / next item in a list */
};

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT, OP_EQ, OP_NE, OP_LT,
       OP_LE, OP_GT, OP_GE };

struct skv_tmpl {
    tp_arena arena;
    tp_node *body;
    skv_tmpl_limits lim;
    int supports_system;
};

/* Parses tokens into the statement list of the template. */
tp_node *tp_parse(tp_arena *a, const tp_tok *toks, size_t n, int max_depth);

/* ---- rendering ---- */
/* evaluated call arguments: positional, then keyword */
typedef struct { tv *pos; size_t n_pos; tv_str **kw_name; tv *kw; size_t n_kw; } tp_args;

typedef struct tp_scope tp_scope;
struct tp_scope { tv_dict *vars; tp_scope *up; };

typedef struct {
    tp_arena *a;
    const skv_tmpl_limits *lim;
    tp_buf *out;
    tp_scope *globals;   /* the root scope: the render's variables, macros defined at top */
    tp_scope *scope;     /* the innermost scope */
    int depth;
    uint64_t steps;
    int loop_ctl;        /* 1 break, 2 continue (pending) */
} tp_ctx;

tv tp_eval(tp_ctx *c, const tp_node *e);
void tp_exec(tp_ctx *c, const tp_node *body);
tv tp_call_macro(tp_ctx *c, const tp_node *m, const tp_node *at, tp_args *args);
_Noreturn void tp_error(tp_ctx *c, const tp_node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tp_step(tp_ctx *c, const tp_node *at);

/* filters, tests, methods and global functions (template_filters.c, template_funcs.c) */
tp_args tp_eval_args(tp_ctx *c, const tp_node *args);
tv tp_filter(tp_ctx *c, const tp_node *at, tv x, const char *name, size_t n, tp_args *args);
int tp_test(tp_ctx *c, const tp_node *at, tv x, const char *name, size_t n, tp_args *args);
/* 1 when obj.name(...) is a known method: *res set */
int tp_method(tp_ctx *c, const tp_node *at, tv obj, const char *name, size_t n, tp_args *args,
              tv *res);
int tp_global_index(const char *name, size_t n);
tv tp_binop(tp_ctx *c, const tp_node *at, tv x, tv y);
tv tp_call_global(tp_ctx *c, const tp_node *at, int fn, tp_args *args);
tv *tp_kwarg(tp_args *args, const char *name);
tv tp_arg(tp_args *args, size_t i, const char *name, tv dflt);

/* lookup helpers shared by eval and filters */
tv tp_getattr(tp_ctx *c, tv obj, const char *name, size_t n);
tv tp_getitem(tp_ctx *c, const tp_node *at, tv obj, tv key);
/* iterate: a list of items (dict: its keys; string: its characters) */
tv_list *tp_iterable(tp_ctx *c, const tp_node *at, tv v);

#endif
