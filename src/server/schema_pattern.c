/* A regular expression (JSON schema "pattern", between its ^ and $) as a GBNF expression:
 * literals, `.`, [classes] with ranges and negation, \d \w \s (and \D \W \S), escaped
 * punctuation, (groups) and (?:groups), `|`, and `* + ?` `{m}` `{m,}` `{m,n}`. Anything else
 * (anchors inside, lookaround, backreferences, lazy quantifiers, ...) is refused by name. */
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/schema.h"

typedef struct rx {
    const char *s, *end, *dot;
    char *o;
    size_t n, cap;
    int depth, failed;
    skv_err *err;
} rx;

#define RX_MAX_DEPTH 64

static void rx_err(rx *r, const char *what)
{
    if (!r->failed) skv_fail(r->err, SKV_ERR_INVALID_ARG, "pattern: %s", what);
    r->failed = 1;
}

static void put(rx *r, const char *s, size_t n)
{
    if (r->failed) return;
    if (r->n + n + 1 > r->cap) {
        size_t c = (r->n + n + 1) * 2;
        char *t = realloc(r->o, c);
        if (!t) return rx_err(r, "out of memory");
        r->o = t, r->cap = c;
    }
    memcpy(r->o + r->n, s, n);
    r->n += n;
    r->o[r->n] = 0;
}

static void puts_(rx *r, const char *s) { put(r, s, strlen(s)); }

/* A literal character, as GBNF literal text (without quotes). */
static void put_lit_char(rx *r, unsigned char c)
{
    char b[8];
    if (c == '"' || c == '\\') snprintf(b, sizeof b, "\\%c", c);
    else if (c < 0x20 || c == 0x7F) snprintf(b, sizeof b, "\\x%02X", c);
    else b[0] = (char)c, b[1] = 0;
    puts_(r, b);
}

/* The class body of \d \w \s (upper case: negated by the caller). */
static const char *class_escape(char c)
{
    switch (c) {
    case 'd': case 'D': return "0-9";
    case 'w': case 'W': return "a-zA-Z0-9_";
    case 's': case 'S': return " \\t\\n\\r\\x0B\\x0C";
    default: return NULL;
    }
}

static int is_punct_escape(char c) { return c && strchr(".^$*+?()[]{}|\\/-\"'", c) != NULL; }

/* An escape outside a class: \d and friends, control escapes, escaped punctuation. */
static void escape_item(rx *r)
{
    char c = r->s + 1 < r->end ? r->s[1] : 0;
    const char *cls = class_escape(c);
    r->s += 2;
    if (cls) {
        puts_(r, c >= 'a' ? "[" : "[^"), puts_(r, cls), puts_(r, "]");
    } else if (c == 'n' || c == 't' || c == 'r') {
        puts_(r, c == 'n' ? "\"\\n\"" : c == 't' ? "\"\\t\"" : "\"\\r\"");
    } else if (is_punct_escape(c)) {
        puts_(r, "\""), put_lit_char(r, (unsigned char)c), puts_(r, "\"");
    } else {
        char m[48];
        snprintf(m, sizeof m, "unsupported escape \\%c", c ? c : '0');
        rx_err(r, m);
    }
}

/* One member of a class: a character or an escape, copied in GBNF's class syntax. */
static void class_member(rx *r)
{
    char c = *r->s;
    if (c != '\\') {
        if (c == '"' || (unsigned char)c < 0x20) put_lit_char(r, (unsigned char)c);
        else put(r, r->s, 1);
        r->s++;
        return;
    }
    char e = r->s + 1 < r->end ? r->s[1] : 0;
    const char *cls = class_escape(e);
    r->s += 2;
    if (cls && e >= 'a') puts_(r, cls);
    else if (e == 'n' || e == 't' || e == 'r') put(r, r->s - 2, 2);
    else if (is_punct_escape(e)) put_lit_char(r, (unsigned char)e);
    else rx_err(r, "unsupported escape in a character class");
}

static void class_item(rx *r)
{
    r->s++;
    puts_(r, "[");
    if (r->s < r->end && *r->s == '^') puts_(r, "^"), r->s++;
    while (r->s < r->end && *r->s != ']' && !r->failed) {
        if (*r->s == '[' || *r->s == ']' || (*r->s == '\\' && r->s + 1 < r->end && (r->s[1] == ']' || r->s[1] == '[' || r->s[1] == '-' || r->s[1] == '^'))) {
            puts_(r, "\\");
            r->s += *r->s == '\\';
            put(r, r->s++, 1);
        } else {
            class_member(r);
        }
    }
    if (r->s >= r->end) return rx_err(r, "unterminated character class");
    r->s++;
    puts_(r, "]");
}

static void alternation(rx *r);

/* A literal character: one byte, or a whole UTF-8 sequence (kept together in one literal). */
static void literal_char(rx *r)
{
    unsigned char c = (unsigned char)*r->s;
    size_t n = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    n = n < (size_t)(r->end - r->s) ? n : (size_t)(r->end - r->s);
    puts_(r, "\"");
    if (c < 0x80) put_lit_char(r, c);
    else put(r, r->s, n);
    puts_(r, "\"");
    r->s += n;
}

static void group_item(rx *r)
{
    r->s++;
    if (r->s < r->end && *r->s == '?') {
        if (r->s + 1 >= r->end || r->s[1] != ':') return rx_err(r, "unsupported group syntax (lookaround, named group or flags)");
        r->s += 2;
    }
    if (++r->depth > RX_MAX_DEPTH) return rx_err(r, "groups nested too deep");
    puts_(r, "(");
    alternation(r);
    if (r->s >= r->end || *r->s != ')') return rx_err(r, "unbalanced parentheses");
    r->s++;
    r->depth--;
    puts_(r, ")");
}

/* A decimal count at *p (advanced), at most 5 digits; -1 when none. */
static long digits(const rx *r, const char **p)
{
    long v = 0;
    int k = 0;
    for (; *p < r->end && **p >= '0' && **p <= '9' && k < 5; (*p)++, k++) v = v * 10 + (**p - '0');
    return k ? v : -1;
}

/* {m}, {m,}, {m,n} copied after checking them. */
static void braces(rx *r)
{
    const char *p = r->s + 1;
    long m = digits(r, &p), n = m;
    if (m < 0) return rx_err(r, "invalid repetition");
    if (p < r->end && *p == ',') {
        p++;
        n = p < r->end && *p == '}' ? -2 : digits(r, &p);
        if (n == -1 || (n >= 0 && n < m)) return rx_err(r, "invalid repetition");
    }
    if (p >= r->end || *p != '}') return rx_err(r, "invalid repetition");
    put(r, r->s, (size_t)(p + 1 - r->s));
    r->s = p + 1;
}

static void quantifier(rx *r)
{
    while (r->s < r->end && !r->failed && *r->s && strchr("*+?{", *r->s)) {
        if (*r->s == '{') braces(r);
        else put(r, r->s++, 1);
        if (r->s < r->end && (*r->s == '?' || *r->s == '+')) return rx_err(r, "lazy or possessive quantifiers are not supported");
    }
}

static void atom(rx *r)
{
    char c = *r->s;
    if (c == '(') group_item(r);
    else if (c == '[') class_item(r);
    else if (c == '.') puts_(r, r->dot), r->s++;
    else if (c == '\\') escape_item(r);
    else if (c == '^' || c == '$') rx_err(r, "anchor inside the pattern");
    else if (c && strchr("*+?{", c)) rx_err(r, "nothing to repeat");
    else literal_char(r);
}

static void sequence(rx *r)
{
    int any = 0;
    while (r->s < r->end && *r->s != '|' && *r->s != ')' && !r->failed) {
        if (any) puts_(r, " ");
        atom(r);
        quantifier(r);
        any = 1;
    }
    if (!any) puts_(r, "\"\"");
}

static void alternation(rx *r)
{
    sequence(r);
    while (r->s < r->end && *r->s == '|' && !r->failed) {
        r->s++;
        puts_(r, " | ");
        sequence(r);
    }
}

int srv_regex_to_gbnf(const char *re, size_t n, const char *dot, char **out, skv_err *err)
{
    rx r = {.s = re, .end = re + n, .dot = dot, .err = err};
    puts_(&r, "");
    alternation(&r);
    if (!r.failed && r.s < r.end) rx_err(&r, "unbalanced parentheses");
    if (r.failed) return free(r.o), *out = NULL, -1;
    *out = r.o;
    return 0;
}
