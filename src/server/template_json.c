/* Chat templates: JSON text to template values, for the globals and message fields that are
 * structured (OpenAI's `tools`, an assistant message's `tool_calls`). The text comes from the
 * server's own JSON encoder, but it is read as hostile all the same: nesting is bounded by
 * the template's depth limit, every byte is checked, and any fault is a tp_fail. */
#include <stdlib.h>
#include "core/fpguard.h"

#include <string.h>

#include "seqkv.h"
#include "server/template_int.h"

typedef struct {
    tp_arena *a;
    const char *s, *end;
    int max_depth;
} jr;

_Noreturn static void jr_fail(jr *r, const char *what)
{
    tp_fail(r->a, SKV_ERR_FORMAT, 0, 0, "structured template input: %s", what);
}

static void jr_ws(jr *r)
{
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r')) r->s++;
}

static int jr_lit(jr *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->s) < n || memcmp(r->s, w, n)) return 0;
    r->s += n;
    return 1;
}

static unsigned jr_hex4(jr *r)
{
    unsigned v = 0;
    if (r->end - r->s < 4) jr_fail(r, "short \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = *r->s++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else jr_fail(r, "bad \\u escape");
    }
    return v;
}

static void jr_utf8(jr *r, tp_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 63)), u[2] = (char)(0x80 | ((cp >> 6) & 63)),
        u[3] = (char)(0x80 | (cp & 63)), n = 4;
    tp_buf_put(r->a, b, u, n);
}

/* A \u escape (a surrogate pair joined); the opening "\u" consumed. */
static void jr_uescape(jr *r, tp_buf *b)
{
    unsigned cp = jr_hex4(r);
    if (cp >= 0xD800 && cp < 0xDC00 && jr_lit(r, "\\u")) {
        unsigned lo = jr_hex4(r);
        if (lo < 0xDC00 || lo >= 0xE000) jr_fail(r, "unpaired surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xD800 && cp < 0xE000) {
        jr_fail(r, "unpaired surrogate");
    }
    jr_utf8(r, b, cp);
}

static tv jr_string(jr *r)
{
    tp_buf b = {.limit = (size_t)(r->end - r->s) * 4 + 16};
    r->s++; /* the opening quote */
    for (;;) {
        if (r->s >= r->end) jr_fail(r, "unterminated string");
        char c = *r->s++;
        if (c == '"') break;
        if ((unsigned char)c < 0x20) jr_fail(r, "control character in a string");
        if (c != '\\') {
            tp_buf_put(r->a, &b, &c, 1);
            continue;
        }
        if (r->s >= r->end) jr_fail(r, "unterminated escape");
        char e = *r->s++, o = 0;
        switch (e) {
        case '"': case '\\': case '/': o = e; break;
        case 'b': o = '\b'; break;
        case 'f': o = '\f'; break;
        case 'n': o = '\n'; break;
        case 'r': o = '\r'; break;
        case 't': o = '\t'; break;
        case 'u': jr_uescape(r, &b); continue;
        default: jr_fail(r, "bad escape");
        }
        tp_buf_put(r->a, &b, &o, 1);
    }
    return tv_strn(r->a, b.p ? b.p : "", b.n);
}

static tv jr_number(jr *r)
{
    char buf[64];
    size_t n = 0;
    while (r->s + n < r->end && n < sizeof buf && strchr("+-0123456789.eE", r->s[n]) && r->s[n]) n++;
    if (!n || n >= sizeof buf) jr_fail(r, "bad number");
    memcpy(buf, r->s, n);
    buf[n] = 0;
    r->s += n;
    char *e = NULL;
    if (!strpbrk(buf, ".eE")) {
        long long i = strtoll(buf, &e, 10);
        if (*e) jr_fail(r, "bad number");
        return tv_int(i);
    }
    double f = strtod(buf, &e);
    if (*e) jr_fail(r, "bad number");
    return tv_float(f);
}

static tv jr_value(jr *r, int depth);

static tv jr_array(jr *r, int depth)
{
    tv l = tv_list_new(r->a);
    r->s++;
    jr_ws(r);
    if (jr_lit(r, "]")) return l;
    do {
        tv_list_push(r->a, l.u.l, jr_value(r, depth + 1));
        jr_ws(r);
    } while (jr_lit(r, ","));
    if (!jr_lit(r, "]")) jr_fail(r, "expected ']'");
    return l;
}

static tv jr_object(jr *r, int depth)
{
    tv d = tv_dict_new(r->a);
    r->s++;
    jr_ws(r);
    if (jr_lit(r, "}")) return d;
    do {
        jr_ws(r);
        if (r->s >= r->end || *r->s != '"') jr_fail(r, "expected a key");
        tv k = jr_string(r);
        jr_ws(r);
        if (!jr_lit(r, ":")) jr_fail(r, "expected ':'");
        tv_dict_set(r->a, d.u.d, k.u.s->s, k.u.s->len, jr_value(r, depth + 1));
        jr_ws(r);
    } while (jr_lit(r, ","));
    if (!jr_lit(r, "}")) jr_fail(r, "expected '}'");
    return d;
}

static tv jr_value(jr *r, int depth)
{
    if (depth > r->max_depth) jr_fail(r, "nested too deeply");
    jr_ws(r);
    if (r->s >= r->end) jr_fail(r, "unexpected end");
    switch (*r->s) {
    case '{': return jr_object(r, depth);
    case '[': return jr_array(r, depth);
    case '"': return jr_string(r);
    default: break;
    }
    if (jr_lit(r, "null")) return tv_none();
    if (jr_lit(r, "true")) return tv_bool(1);
    if (jr_lit(r, "false")) return tv_bool(0);
    return jr_number(r);
}

tv tp_json_value(tp_arena *a, const char *s, size_t n, int max_depth)
{
    jr r = {.a = a, .s = s, .end = s + n, .max_depth = max_depth};
    tv v = jr_value(&r, 0);
    jr_ws(&r);
    if (r.s != r.end) jr_fail(&r, "trailing bytes");
    return v;
}
