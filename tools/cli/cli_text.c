/* Text that must survive tokenization: the check compress and store put run before
 * storing a text, so that what a restore gives back is what was stored, or the user was
 * told why not (issue 13, item 12). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 if it is invalid (stray
 * continuation byte, overlong form, surrogate, beyond U+10FFFF, truncated). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    static const unsigned char lo2[5] = {0, 0, 0xa0, 0x90, 0}, hi2[5] = {0, 0, 0xbf, 0x8f, 0};
    size_t k = s[0] < 0x80 ? 1 : s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : s[0] < 0xf5 ? 4 : 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (k < 2) return k;
    if (k > n) return 0;
    if (s[0] == 0xe0 || s[0] == 0xf0) lo = lo2[k]; /* overlong */
    if (s[0] == 0xed || s[0] == 0xf4) hi = hi2[k]; /* surrogates, beyond U+10FFFF */
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return k;
}

/* Offset of the first invalid UTF-8 sequence, or len. */
static size_t utf8_invalid_at(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, k;
    while (i < len && (k = utf8_seq(s + i, len - i)) != 0) i += k;
    return i;
}

/* Offset of the first U+2581 (E2 96 81), or len. */
static size_t mark_at(const char *text, size_t len)
{
    for (size_t i = 0; i + 3 <= len; i++)
        if (!memcmp(text + i, "\xe2\x96\x81", 3)) return i;
    return len;
}

static size_t line_of(const char *text, size_t off)
{
    size_t line = 1;
    for (size_t i = 0; i < off; i++) line += text[i] == '\n';
    return line;
}

static void report_change(const char *what, const char *text, size_t len, size_t diff)
{
    size_t bad = utf8_invalid_at(text, len), mark = mark_at(text, len);
    size_t at = bad < mark ? bad : mark;
    const char *why, *fix;
    if (at > diff + 3) at = diff;
    if (bad < len && at == bad) {
        why = "invalid UTF-8, which the tokenizer replaces";
        fix = "drop the invalid bytes (iconv -c -f UTF-8 -t UTF-8)";
    } else if (mark < len && at == mark) {
        why = "U+2581 (SentencePiece's space mark), which comes back as a space";
        fix = "replace the U+2581 characters";
    } else {
        why = "a character the model's vocabulary cannot represent";
        fix = "remove or replace it";
    }
    cli_error("%s would not come back unchanged from a restore: byte %zu (line %zu) is %s; %s, or pass "
              "--lossy-text to store the text as the tokenizer changes it",
              what, at, line_of(text, at), why, fix);
}

int cli_check_roundtrip(const skv_model *m, const char *what, const char *text, size_t len, const int32_t *tok,
                        size_t n)
{
    size_t back_len = 0, d = 0;
    char *back = cli_detokenize(m, tok, n, 0, &back_len);
    if (!back) return -1;
    while (d < len && d < back_len && back[d] == text[d]) d++;
    free(back);
    if (d == len && d == back_len) return 0;
    report_change(what, text, len, d);
    return -1;
}

int32_t *cli_text_tokens(const skv_model *m, const char *what, const char *text, size_t len, int lossy, size_t *n)
{
    char name[300];
    snprintf(name, sizeof name, strcmp(what, "-") ? "'%.256s'" : "the text on stdin", what);
    if (!len) {
        cli_error("%s is empty: nothing to store (give a text of at least one character)", name);
        return NULL;
    }
    int32_t *tok = cli_tokenize(m, text, len, 1, n);
    if (tok && !lossy && cli_check_roundtrip(m, name, text, len, tok, *n)) {
        free(tok);
        tok = NULL;
    }
    return tok;
}
