/* unicode - UTF-8, character classes, GPT-2 byte alphabet, pre-tokenizers.
 * See unicode.h for the contract; docs/tokenizer.md for how each pre-tokenizer
 * maps onto llama.cpp's regexes. */
#include "tokenizer/unicode.h"
#include "core/fpguard.h"

#include "tokenizer/unicode_tables.h"

uint8_t skv_unicode_class(uint32_t cp)
{
    if (cp >= 0x110000u) return SKV_UC_C;
    return skv_uc_stage2[((size_t)skv_uc_stage1[cp >> SKV_UC_SHIFT] << SKV_UC_SHIFT) +
                         (cp & ((1u << SKV_UC_SHIFT) - 1))];
}

const char *skv_unicode_version(void) { return SKV_UC_VERSION; }

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */

static int is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

uint32_t skv_utf8_decode(const uint8_t *s, size_t n, size_t *adv)
{
    uint8_t b0 = s[0];
    uint32_t cp;
    *adv = 1;
    if (b0 < 0x80) return b0;
    if ((b0 & 0x40) == 0) return SKV_UNICODE_REPLACEMENT; /* stray continuation */
    if ((b0 & 0x20) == 0) {
        if (n < 2 || !is_cont(s[1])) return SKV_UNICODE_REPLACEMENT;
        *adv = 2;
        return ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3Fu);
    }
    if ((b0 & 0x10) == 0) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) return SKV_UNICODE_REPLACEMENT;
        *adv = 3;
        return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3Fu);
    }
    if ((b0 & 0x08) == 0) {
        if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3]))
            return SKV_UNICODE_REPLACEMENT;
        cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
             ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3Fu);
        if (cp > 0x10FFFFu) return SKV_UNICODE_REPLACEMENT; /* llama.cpp throws later */
        *adv = 4;
        return cp;
    }
    return SKV_UNICODE_REPLACEMENT;
}

size_t skv_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp > 0x10FFFFu) cp = SKV_UNICODE_REPLACEMENT;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* ------------------------------------------------------------------------ */
/* GPT-2 byte-level alphabet: the 188 printable bytes '!'..'~', 0xA1..0xAC,
 * 0xAE..0xFF stand for themselves; the other 68 bytes, in increasing order,
 * map to U+0100, U+0101, ... */

static int byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t skv_unicode_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;            /* 33 of them */
    if (b <= 0xA0) return 256u + 33 + (b - 0x7Fu); /* 0x7F..0xA0: 34 */
    return 256u + 67;                          /* 0xAD */
}

int skv_unicode_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(0x7F + cp - (256 + 33));
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizers.
 *
 * llama.cpp applies a list of regexes in turn; each one splits every chunk
 * produced so far into its matches and the unmatched gaps between them. A
 * stage below does the same for one regex: it reads chunk lengths from `in`
 * and writes the refined lengths to `out`. Inside a chunk [a, end) the
 * helpers see "no character" (class 0) past the end, exactly like the
 * OUT_OF_RANGE sentinel of llama.cpp's splitters. */

typedef struct {
    const uint32_t *cp;
    const uint8_t *cls;
    size_t end;   /* end of the current chunk */
    size_t prev;  /* end of the last emitted piece */
    size_t *out;
    size_t n_out;
} split_state;

#define OUT_OF_RANGE 0xFFFFFFFFu

static inline uint8_t cls_at(const split_state *s, size_t i) { return i < s->end ? s->cls[i] : 0; }
static inline uint32_t cp_at(const split_state *s, size_t i) { return i < s->end ? s->cp[i] : OUT_OF_RANGE; }
static inline int c_is_l(uint8_t c) { return (c & SKV_UC_CAT_MASK) == SKV_UC_L; }
static inline int c_is_n(uint8_t c) { return (c & SKV_UC_CAT_MASK) == SKV_UC_N; }
static inline int c_is_ws(uint8_t c) { return (c & SKV_UC_WS) != 0; }
static inline int c_is_m(uint8_t c) { return (c & SKV_UC_CAT_MASK) == SKV_UC_M; }
/* [^\s\p{L}\p{N}] for a character inside the chunk */
static inline int c_is_other(uint8_t c) { return c != 0 && !c_is_ws(c) && !c_is_l(c) && !c_is_n(c); }
/* Qwen3.5's word letters [\p{L}\p{M}] (marks = 1) or \p{L}, and the matching
 * "other" class [^\s\p{L}\p{M}\p{N}] or [^\s\p{L}\p{N}]. */
static inline int c_is_word(uint8_t c, int marks) { return c_is_l(c) || (marks && c_is_m(c)); }
static inline int c_is_other_w(uint8_t c, int marks) { return c_is_other(c) && !(marks && c_is_m(c)); }

/* Closes the piece that ends at `end` (empty pieces are dropped). */
static void emit(split_state *s, size_t end)
{
    if (end > s->prev) s->out[s->n_out++] = end - s->prev;
    s->prev = end;
}

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d at pos: returns the match length (0: none).
 * any_case: the Llama-3 form (?:'[sS]|'[tT]|...). Lowercasing ASCII only is
 * exact: no other code point lowercases to one of these letters (checked by
 * tools/gen/gen_unicode_tables.py). */
static size_t match_contraction(const split_state *s, size_t pos, int any_case)
{
    uint32_t c1, c2;
    if (s->cp[pos] != '\'' || pos + 1 >= s->end) return 0;
    c1 = s->cp[pos + 1];
    if (any_case) c1 = ascii_lower(c1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= s->end) return 0;
    c2 = s->cp[pos + 2];
    if (any_case) c2 = ascii_lower(c2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* Length of the whitespace run at pos; *after_nl = one past its last \r or \n
 * (0 if none). */
static size_t ws_run(const split_state *s, size_t pos, size_t *after_nl)
{
    size_t n = 0;
    *after_nl = 0;
    while (c_is_ws(cls_at(s, pos + n))) {
        uint32_t c = s->cp[pos + n];
        if (c == '\r' || c == '\n') *after_nl = pos + n + 1;
        n++;
    }
    return n;
}

/* The whitespace alternatives that end every pattern, at pos:
 * \s*[\r\n]+ (only when newlines is set), then \s+(?!\S), then \s+. */
static size_t ws_match(const split_state *s, size_t pos, int newlines)
{
    size_t after_nl, nws = ws_run(s, pos, &after_nl);
    if (newlines && after_nl > 0) return after_nl;           /* \s*[\r\n]+ */
    if (nws > 1 && pos + nws < s->end) return pos + nws - 1; /* \s+(?!\S) */
    if (nws > 0) return pos + nws;                           /* \s+ */
    return pos + 1;                                          /* unreachable */
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * One match starting at pos; returns its end. */
static size_t gpt2_match(const split_state *s, size_t pos)
{
    uint32_t c = s->cp[pos];
    uint8_t f2 = c == ' ' ? cls_at(s, pos + 1) : s->cls[pos];
    size_t p = pos + (c == ' '), m;

    if ((m = match_contraction(s, pos, 0)) != 0) return pos + m;
    if (c_is_l(f2)) {
        while (c_is_l(cls_at(s, p))) p++;
        return p;
    }
    if (c_is_n(f2)) {
        while (c_is_n(cls_at(s, p))) p++;
        return p;
    }
    if (c_is_other(f2)) {
        while (c_is_other(cls_at(s, p))) p++;
        return p;
    }
    return ws_match(s, pos, 0);
}

/* \p{N}{1,digits} repeated over a run of digits at pos: every full group
 * but the last is emitted here; returns the end of the last. */
static size_t digit_groups(split_state *s, size_t pos, int digits)
{
    size_t start = pos, p = pos;
    while (c_is_n(cls_at(s, p))) {
        p++;
        if (p - start >= (size_t)digits) {
            emit(s, p);
            start = p;
        }
    }
    return p;
}

/* Llama-3 (digits = 3) and Qwen2 (digits = 1):
 * (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
 * \p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen3.5 (digits = 1, marks = 1) reads [\p{L}\p{M}]+ for \p{L}+ and
 * [^\s\p{L}\p{M}\p{N}]+ for [^\s\p{L}\p{N}]+.
 * A \p{N}{1,3} run is emitted as consecutive groups of three, so this one may
 * emit several pieces; returns the end of the last. */
static size_t llama3_match(split_state *s, size_t pos, int digits, int marks)
{
    uint32_t c = s->cp[pos];
    uint8_t f = s->cls[pos];
    uint8_t f2 = c == ' ' ? cls_at(s, pos + 1) : f;
    size_t p, m;

    if ((m = match_contraction(s, pos, 1)) != 0) return pos + m;
    if (!(c == '\r' || c == '\n' || c_is_n(f)) && (c_is_word(f, marks) || c_is_word(cls_at(s, pos + 1), marks))) {
        p = pos + 1;
        while (c_is_word(cls_at(s, p), marks)) p++;
        return p;
    }
    if (c_is_n(f)) return digit_groups(s, pos, digits);
    if (!c_is_ws(f2) && !c_is_word(f2, marks) && !c_is_n(f2)) {
        /* f2 may be 0 (a space ending the chunk): then only the space matches,
         * which is also what \s+ would give. */
        p = pos + (c == ' ');
        while (c_is_other_w(cls_at(s, p), marks)) p++;
        while (cp_at(s, p) == '\r' || cp_at(s, p) == '\n') p++;
        return p;
    }
    return ws_match(s, pos, 1);
}

typedef enum { STAGE_GPT2, STAGE_LLAMA3, STAGE_QWEN2, STAGE_QWEN35 } word_stage;

static size_t split_words(word_stage kind, const uint32_t *cp, const uint8_t *cls,
                          const size_t *in, size_t n_in, size_t *out)
{
    split_state s = {cp, cls, 0, 0, out, 0};
    size_t a = 0;
    for (size_t i = 0; i < n_in; i++) {
        size_t pos = a;
        s.end = a + in[i];
        s.prev = a;
        while (pos < s.end) {
            if (kind == STAGE_GPT2) pos = gpt2_match(&s, pos);
            else pos = llama3_match(&s, pos, kind == STAGE_LLAMA3 ? 3 : 1, kind == STAGE_QWEN35);
            emit(&s, pos);
        }
        a = s.end;
    }
    return s.n_out;
}

/* Character classes of the std::regex stages, as llama.cpp evaluates them on
 * its collapsed text: ASCII by explicit lists, other code points by category
 * (whitespace collapses to \v and so belongs to neither class). */
static int in_punct_class(uint32_t c, uint8_t f, int backtick)
{
    /* [\p{P}\$\+<=>\^~\|]: every printable non-alphanumeric ASCII but '`';
     * Falcon's [\p{P}\$\+<=>\^~\|`] (backtick = 1) has '`' too */
    if (c < 0x80) {
        return c > 0x20 && c < 0x7F && (c != '`' || backtick) && !(c >= '0' && c <= '9') &&
               !((c | 32) >= 'a' && (c | 32) <= 'z');
    }
    return !c_is_ws(f) && (f & SKV_UC_CAT_MASK) == SKV_UC_P;
}

static int in_number_class(uint32_t c, uint8_t f)
{
    if (c < 0x80) return c >= '0' && c <= '9';
    return !c_is_ws(f) && c_is_n(f);
}

enum { CLASS_PUNCT, CLASS_PUNCT_BT, CLASS_NUMBER };

static inline int member(int which, uint32_t c, uint8_t f)
{
    return which == CLASS_NUMBER ? in_number_class(c, f) : in_punct_class(c, f, which == CLASS_PUNCT_BT);
}

/* [class]+ (single = 0) or [class] (single = 1): matches and gaps alternate.
 * Inlined at each call so that `which` is a constant. */
static inline size_t split_class(int which, int single, const uint32_t *cp, const uint8_t *cls,
                                 const size_t *in, size_t n_in, size_t *out)
{
    size_t n = 0, a = 0;
    for (size_t i = 0; i < n_in; i++) {
        size_t end = a + in[i], pos = a;
        while (pos < end) {
            size_t p = pos;
            int m = member(which, cp[p], cls[p]);
            if (m && single) p++;
            else
                while (p < end && member(which, cp[p], cls[p]) == m) p++;
            out[n++] = p - pos;
            pos = p;
        }
        a = end;
    }
    return n;
}

static int is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* [0-9][0-9][0-9]: leftmost non-overlapping triples; the gaps stay whole. */
static size_t split_digit3(const uint32_t *cp, const size_t *in, size_t n_in, size_t *out)
{
    size_t n = 0, a = 0;
    for (size_t i = 0; i < n_in; i++) {
        size_t end = a + in[i], pos = a, gap = a;
        while (pos + 3 <= end) {
            if (is_ascii_digit(cp[pos]) && is_ascii_digit(cp[pos + 1]) && is_ascii_digit(cp[pos + 2])) {
                if (pos > gap) out[n++] = pos - gap;
                out[n++] = 3;
                pos += 3;
                gap = pos;
            } else {
                pos++;
            }
        }
        if (end > gap) out[n++] = end - gap;
        a = end;
    }
    return n;
}

const char *skv_pretok_name(skv_pretok kind)
{
    static const char *const names[SKV_PRETOK_COUNT] = {
        [SKV_PRETOK_DEFAULT] = "default", [SKV_PRETOK_GPT2] = "gpt2", [SKV_PRETOK_LLAMA3] = "llama3",
        [SKV_PRETOK_QWEN2] = "qwen2", [SKV_PRETOK_SMOLLM] = "smollm", [SKV_PRETOK_FALCON] = "falcon",
        [SKV_PRETOK_QWEN35] = "qwen35", [SKV_PRETOK_DEEPSEEK_LLM] = "deepseek-llm",
        [SKV_PRETOK_DEEPSEEK_CODER] = "deepseek-coder",
    };
    return (unsigned)kind < SKV_PRETOK_COUNT ? names[kind] : "?";
}

size_t skv_unicode_pretokenize(skv_pretok kind, const uint32_t *cps, const uint8_t *cls,
                               size_t n, size_t *lens, size_t *tmp)
{
    size_t k;
    if (n == 0) return 0;
    tmp[0] = n;
    switch (kind) {
    case SKV_PRETOK_GPT2:
        return split_words(STAGE_GPT2, cps, cls, tmp, 1, lens);
    case SKV_PRETOK_LLAMA3:
        return split_words(STAGE_LLAMA3, cps, cls, tmp, 1, lens);
    case SKV_PRETOK_QWEN2:
        return split_words(STAGE_QWEN2, cps, cls, tmp, 1, lens);
    case SKV_PRETOK_QWEN35:
        return split_words(STAGE_QWEN35, cps, cls, tmp, 1, lens);
    case SKV_PRETOK_SMOLLM:
        k = split_class(CLASS_NUMBER, 1, cps, cls, tmp, 1, lens);
        k = split_words(STAGE_GPT2, cps, cls, lens, k, tmp);
        break;
    case SKV_PRETOK_FALCON:
        k = split_class(CLASS_PUNCT_BT, 0, cps, cls, tmp, 1, lens);
        k = split_words(STAGE_GPT2, cps, cls, lens, k, tmp);
        k = split_digit3(cps, tmp, k, lens);
        return k;
    case SKV_PRETOK_DEEPSEEK_LLM:
    case SKV_PRETOK_DEEPSEEK_CODER:
        return skv_pretok_deepseek(kind, cps, cls, n, lens, tmp);
    case SKV_PRETOK_DEFAULT:
    default:
        k = split_class(CLASS_PUNCT, 0, cps, cls, tmp, 1, lens);
        k = split_words(STAGE_GPT2, cps, cls, lens, k, tmp);
        k = split_class(CLASS_NUMBER, 0, cps, cls, tmp, k, lens);
        k = split_digit3(cps, lens, k, tmp);
        break;
    }
    for (size_t i = 0; i < k; i++) lens[i] = tmp[i];
    return k;
}
