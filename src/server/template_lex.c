/* Chat templates: the lexer. Splits a template into text and tag tokens, applying the
 * whitespace rules Hugging Face renders chat templates with:
 *   - `{{-` / `{%-` / `{#-` strip all whitespace before the tag, `-}}` / `-%}` / `-#}` all
 *     whitespace after it;
 *   - trim_blocks: the first newline after a block or comment tag is dropped;
 *   - lstrip_blocks: spaces and tabs between the start of a line and a block or comment
 *     tag are dropped (`{%+` keeps them).
 * Inside a tag, "}}" closes it only outside braces, so dict literals nest. */
#include <string.h>
#include "core/fpguard.h"

#include "seqkv.h"
#include "server/template_int.h"

typedef struct {
    tp_arena *a;
    const char *src;
    size_t len, pos;
    size_t at_pos;       /* line/col are those of src[at_pos] */
    int line, col;
    tp_tok *t;
    size_t n, cap;
    int strip_next;      /* the last tag ended with '-' */
    int trim_next;       /* the last tag was a block or comment (trim_blocks) */
} tp_lexer;

static void lx_where(tp_lexer *L, size_t p, int *line, int *col)
{
    for (; L->at_pos < p; L->at_pos++) {
        if (L->src[L->at_pos] == '\n') L->line++, L->col = 1;
        else L->col++;
    }
    *line = L->line, *col = L->col;
}

_Noreturn static void lx_fail(tp_lexer *L, size_t p, const char *what)
{
    int line, col;
    lx_where(L, p, &line, &col);
    tp_fail(L->a, SKV_ERR_FORMAT, line, col, "%s", what);
}

static void lx_push(tp_lexer *L, tp_tok_kind k, const char *s, size_t n, size_t p)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 64;
        tp_tok *t = tp_alloc(L->a, cap * sizeof *t);
        if (L->n) memcpy(t, L->t, L->n * sizeof *t);
        L->t = t, L->cap = cap;
    }
    tp_tok *t = &L->t[L->n++];
    t->k = k, t->s = s, t->n = n;
    lx_where(L, p, &t->line, &t->col);
}

static int lx_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The text from L->pos to the tag at p, with the whitespace rules applied. */
static void lx_text(tp_lexer *L, size_t p, char mod, int is_block)
{
    size_t s = L->pos, e = p;
    if (L->strip_next)
        while (s < e && lx_space(L->src[s])) s++;
    else if (L->trim_next && s < e && L->src[s] == '\n') s++;
    else if (L->trim_next && e - s >= 2 && L->src[s] == '\r' && L->src[s + 1] == '\n') s += 2;
    if (mod == '-') {
        while (e > s && lx_space(L->src[e - 1])) e--;
    } else if (is_block && mod != '+') {
        size_t q = e;
        while (q > s && (L->src[q - 1] == ' ' || L->src[q - 1] == '\t')) q--;
        if (q == 0 || L->src[q - 1] == '\n') e = q;
    }
    if (e > s) lx_push(L, T_TEXT, L->src + s, e - s, s);
}

static char lx_escape(char c)
{
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case '0': return '\0';
    default: return c;
    }
}

static size_t lx_string(tp_lexer *L, size_t p)
{
    char q = L->src[p];
    size_t i = p + 1, n = 0;
    char *out = tp_alloc(L->a, L->len - p + 1);
    while (i < L->len && L->src[i] != q) {
        if (L->src[i] == '\\' && i + 1 < L->len) out[n++] = lx_escape(L->src[i + 1]), i += 2;
        else out[n++] = L->src[i++];
    }
    if (i >= L->len) lx_fail(L, p, "unterminated string");
    lx_push(L, T_STRING, out, n, p);
    return i + 1;
}

static int lx_digit(char c) { return c >= '0' && c <= '9'; }
static int lx_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static size_t lx_number(tp_lexer *L, size_t p)
{
    size_t i = p;
    int is_float = 0;
    while (i < L->len && lx_digit(L->src[i])) i++;
    if (i + 1 < L->len && L->src[i] == '.' && lx_digit(L->src[i + 1])) {
        is_float = 1, i++;
        while (i < L->len && lx_digit(L->src[i])) i++;
    }
    if (i < L->len && (L->src[i] == 'e' || L->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->len && (L->src[j] == '+' || L->src[j] == '-')) j++;
        if (j < L->len && lx_digit(L->src[j])) {
            is_float = 1, i = j;
            while (i < L->len && lx_digit(L->src[i])) i++;
        }
    }
    lx_push(L, is_float ? T_FLOAT : T_INT, L->src + p, i - p, p);
    return i;
}

static size_t lx_op(tp_lexer *L, size_t p, int *braces)
{
    static const char *const two[] = {"==", "!=", "<=", ">=", "//", "**"};
    for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
        if (p + 1 < L->len && memcmp(L->src + p, two[k], 2) == 0) {
            lx_push(L, T_OP, L->src + p, 2, p);
            return p + 2;
        }
    if (!strchr("+-*/%~<>=()[]{}.,:|", L->src[p])) lx_fail(L, p, "unexpected character");
    if (L->src[p] == '{') ++*braces;
    if (L->src[p] == '}') --*braces;
    lx_push(L, T_OP, L->src + p, 1, p);
    return p + 1;
}

/* Code tokens of one tag from p up to its closer `close` ("}}" or "%}"); returns the
 * position after the closer. */
static size_t lx_code(tp_lexer *L, size_t p, const char *close)
{
    int braces = 0;
    for (;;) {
        while (p < L->len && lx_space(L->src[p])) p++;
        if (p >= L->len) lx_fail(L, p, "unterminated tag");
        const char *c = L->src + p;
        size_t left = L->len - p;
        if (braces <= 0 && left >= 3 && c[0] == '-' && memcmp(c + 1, close, 2) == 0) {
            L->strip_next = 1;
            return p + 3;
        }
        if (braces <= 0 && left >= 2 && memcmp(c, close, 2) == 0) return p + 2;
        if (*c == '"' || *c == '\'') p = lx_string(L, p);
        else if (lx_digit(*c)) p = lx_number(L, p);
        else if (lx_alpha(*c)) {
            size_t i = p;
            while (i < L->len && (lx_alpha(L->src[i]) || lx_digit(L->src[i]))) i++;
            lx_push(L, T_NAME, c, i - p, p);
            p = i;
        } else p = lx_op(L, p, &braces);
    }
}

static size_t lx_comment(tp_lexer *L, size_t p)
{
    for (size_t i = p; i + 1 < L->len; i++)
        if (L->src[i] == '#' && L->src[i + 1] == '}') {
            L->strip_next = i > p && L->src[i - 1] == '-';
            return i + 2;
        }
    lx_fail(L, p, "unterminated comment");
}

/* Position of the next "{{", "{%" or "{#" at or after p, or len. */
static size_t lx_next_tag(const tp_lexer *L, size_t p)
{
    for (; p + 1 < L->len; p++)
        if (L->src[p] == '{' && strchr("{%#", L->src[p + 1])) return p;
    return L->len;
}

static void lx_tag(tp_lexer *L, size_t p)
{
    char kind = L->src[p + 1];
    char mod = p + 2 < L->len ? L->src[p + 2] : 0;
    lx_text(L, p, mod, kind != '{');
    size_t q = p + 2 + (mod == '-' || mod == '+');
    L->strip_next = 0;
    L->trim_next = kind != '{';
    if (kind == '#') { L->pos = lx_comment(L, q); return; }
    lx_push(L, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, L->src + p, 2, p);
    L->pos = lx_code(L, q, kind == '{' ? "}}" : "%}");
    lx_push(L, kind == '{' ? T_VAR_END : T_BLOCK_END, L->src + L->pos - 2, 2, L->pos - 2);
}

tp_tok *tp_lex(tp_arena *a, const char *src, size_t len, size_t *n_out)
{
    tp_lexer L = {.a = a, .src = src, .len = len, .line = 1, .col = 1};
    while (L.pos < len) {
        size_t p = lx_next_tag(&L, L.pos);
        if (p >= len) {
            lx_text(&L, len, 0, 0);
            break;
        }
        lx_tag(&L, p);
    }
    lx_push(&L, T_EOF, src + len, 0, len);
    *n_out = L.n;
    return L.t;
}
