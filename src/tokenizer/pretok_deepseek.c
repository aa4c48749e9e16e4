/* pretok_deepseek - the DeepSeek pre-tokenizers (llama.cpp's DEEPSEEK_LLM and
 * DEEPSEEK_CODER), bit-compatible with its unicode_regex_split().
 *
 * READ ME FIRST
 * - Both are lists of regexes that llama.cpp runs through std::regex, one after
 *   the other: each splits every chunk made so far into its matches and the
 *   gaps between them (the gaps are kept as chunks too). A stage here does the
 *   same for one regex: split_matches() walks a chunk, asks the stage's matcher
 *   for the match that starts at each position (leftmost-first, as
 *   regex_search finds it) and emits gap, match, gap, ...
 * - What std::regex sees: regexes with \p{..} run on llama.cpp's "collapsed"
 *   text, where such a class is exactly the code point's Unicode category (for
 *   ASCII too; checked in unicode.c's notes). Regexes without \p{..} run on
 *   the code points, except that non-ASCII whitespace has become U+000B: it
 *   matches \s and no explicit range. So every class below is false for
 *   non-ASCII whitespace, and \s is the White_Space bit.
 * - No class here contains whitespace, so \s?X+ matches at pos exactly when
 *   pos is in X, or pos is whitespace and pos + 1 is in X.
 */
#include "tokenizer/unicode.h"
#include "core/fpguard.h"

/* One chunk [.., end) of the code points cp with classes cls. */
typedef struct {
    const uint32_t *cp;
    const uint8_t *cls;
    size_t end;
} span;

/* A regex stage's matcher: the end of the match starting at pos, or pos if none. */
typedef size_t (*matcher)(const span *c, size_t pos);

static int is_ws(uint8_t f) { return (f & SKV_UC_WS) != 0; }
static int is_ascii_letter(uint32_t c) { return (uint8_t)((c | 32) - 'a') < 26; }
static int is_hidden_ws(uint32_t c, uint8_t f) { return c >= 0x80 && is_ws(f); } /* became U+000B */

/* DeepSeek-LLM's letter class beyond A-Za-z: the ranges of its tokenizer.json
 * Split regex \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+, sorted, inclusive. */
static const uint32_t ds_letters[][2] = {
    {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6}, {0x00F8, 0x01BA}, {0x01BC, 0x01BF},
    {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373}, {0x0376, 0x0376}, {0x0377, 0x0377},
    {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A}, {0x038C, 0x038C},
    {0x038E, 0x03A1}, {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F}, {0x0531, 0x0556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2183}, {0x2184, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF2}, {0x2CF3, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B},
    {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06},
    {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};

static int in_ranges(uint32_t c, const uint32_t (*r)[2], size_t n)
{
    size_t lo = 0, hi = n; /* first range with r[i][1] >= c */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid][1] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && r[lo][0] <= c;
}

/* ---- the classes ------------------------------------------------------------ */

static int cl_crlf(uint32_t c, uint8_t f)
{
    (void)f;
    return c == '\r' || c == '\n';
}

static int cl_ds_letter(uint32_t c, uint8_t f)
{
    if (c < 0x80) return is_ascii_letter(c);
    return !is_ws(f) && in_ranges(c, ds_letters, sizeof ds_letters / sizeof ds_letters[0]);
}

/* [!-/:-~！-／：-～‘-‟　-。] (U+3000 itself is whitespace, so never here) */
static int cl_ds_punct(uint32_t c, uint8_t f)
{
    if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E);
    if (is_hidden_ws(c, f)) return 0;
    return (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) ||
           (c >= 0x3000 && c <= 0x3002);
}

/* [一-龥ࠀ-一가-퟿]: U+0800..U+9FA5 and U+AC00..U+D7FF */
static int cl_cjk(uint32_t c, uint8_t f)
{
    if (is_hidden_ws(c, f)) return 0;
    return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF);
}

static int cl_cat(uint8_t f, int cat) { return !is_ws(f) && (f & SKV_UC_CAT_MASK) == cat; }
static int cl_l(uint32_t c, uint8_t f) { return (void)c, cl_cat(f, SKV_UC_L); }
static int cl_p(uint32_t c, uint8_t f) { return (void)c, cl_cat(f, SKV_UC_P); }
static int cl_n(uint32_t c, uint8_t f) { return (void)c, cl_cat(f, SKV_UC_N); }

typedef int (*char_class)(uint32_t c, uint8_t f);

static int in_at(const span *s, size_t i, char_class in) { return i < s->end && in(s->cp[i], s->cls[i]); }

/* ---- matchers: X, X+, \s?X+ ---------------------------------------------------- */

static size_t one(const span *s, size_t pos, char_class in) { return pos + in_at(s, pos, in); }

static size_t run(const span *s, size_t pos, char_class in)
{
    while (in_at(s, pos, in)) pos++;
    return pos;
}

static size_t ws_run(const span *s, size_t pos, char_class in)
{
    if (!in(s->cp[pos], s->cls[pos])) {
        if (!is_ws(s->cls[pos]) || !in_at(s, pos + 1, in)) return pos;
        pos++;
    }
    return run(s, pos, in);
}

static size_t m_crlf(const span *s, size_t pos) { return one(s, pos, cl_crlf); }
static size_t m_ds_letters(const span *s, size_t pos) { return ws_run(s, pos, cl_ds_letter); }
static size_t m_ds_punct(const span *s, size_t pos) { return ws_run(s, pos, cl_ds_punct); }
static size_t m_cjk(const span *s, size_t pos) { return run(s, pos, cl_cjk); }
static size_t m_letters(const span *s, size_t pos) { return ws_run(s, pos, cl_l); }
static size_t m_punct(const span *s, size_t pos) { return ws_run(s, pos, cl_p); }
static size_t m_numbers(const span *s, size_t pos) { return run(s, pos, cl_n); }
static size_t m_number(const span *s, size_t pos) { return one(s, pos, cl_n); }

/* ---- stages ------------------------------------------------------------------- */

/* One regex over the chunks in[0..n_in): matches and the gaps between them. */
static size_t split_matches(matcher m, const uint32_t *cp, const uint8_t *cls, const size_t *in, size_t n_in,
                            size_t *out)
{
    size_t n = 0, a = 0;
    for (size_t i = 0; i < n_in; i++) {
        span s = {cp, cls, a + in[i]};
        size_t gap = a, pos = a;
        while (pos < s.end) {
            size_t e = m(&s, pos);
            if (e == pos) {
                pos++;
                continue;
            }
            if (pos > gap) out[n++] = pos - gap;
            out[n++] = e - pos;
            pos = gap = e;
        }
        if (s.end > gap) out[n++] = s.end - gap;
        a = s.end;
    }
    return n;
}

/* \s+$ : the whitespace that ends a chunk, split from the rest. */
static size_t split_ws_end(const uint8_t *cls, const size_t *in, size_t n_in, size_t *out)
{
    size_t n = 0, a = 0;
    for (size_t i = 0; i < n_in; i++) {
        size_t end = a + in[i], t = end;
        while (t > a && is_ws(cls[t - 1])) t--;
        if (t > a) out[n++] = t - a;
        if (end > t) out[n++] = end - t;
        a = end;
    }
    return n;
}

/* The regex lists; WS_END marks the \s+$ stage. */
#define WS_END ((matcher)0)

static const matcher deepseek_llm[] = {m_crlf, m_ds_letters, m_ds_punct, WS_END, m_cjk, m_numbers};
static const matcher deepseek_coder[] = {m_crlf, m_letters, m_punct, m_cjk, m_number};

size_t skv_pretok_deepseek(skv_pretok kind, const uint32_t *cps, const uint8_t *cls, size_t n, size_t *lens,
                           size_t *tmp)
{
    const matcher *st = kind == SKV_PRETOK_DEEPSEEK_LLM ? deepseek_llm : deepseek_coder;
    size_t n_st = kind == SKV_PRETOK_DEEPSEEK_LLM ? sizeof deepseek_llm / sizeof deepseek_llm[0]
                                                  : sizeof deepseek_coder / sizeof deepseek_coder[0];
    size_t *src = tmp, *dst = lens, k = 1;
    if (n == 0) return 0;
    tmp[0] = n;
    for (size_t i = 0; i < n_st; i++) {
        size_t *t;
        k = st[i] ? split_matches(st[i], cps, cls, src, k, dst) : split_ws_end(cls, src, k, dst);
        t = src;
        src = dst;
        dst = t;
    }
    for (size_t i = 0; src != lens && i < k; i++) lens[i] = src[i];
    return k;
}
