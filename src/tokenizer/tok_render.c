/* tok_render.c - token -> bytes, as llama.cpp's token_to_piece(special =
 * false) renders them: SPM U+2581 -> ' ', <0xXX> -> byte; GPT2 byte-level
 * characters -> bytes; user-defined tokens -> their text; control, unknown
 * and unused tokens -> nothing. */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A writer that only counts when buf is NULL (the first of two passes). */
typedef struct {
    char *buf;
    size_t n;
} piece_w;

static void pw_bytes(piece_w *w, const void *s, size_t n)
{
    if (w->buf) memcpy(w->buf + w->n, s, n);
    w->n += n;
}

/* llama.cpp's token_to_byte: strtol(text.substr(3, 2), 16). */
static uint8_t byte_of_piece(const uint8_t *s, size_t n)
{
    char hex[3] = {0, 0, 0};
    for (size_t i = 3; i < 5 && i < n; i++) hex[i - 3] = (char)s[i];
    return (uint8_t)strtol(hex, NULL, 16); /* n < 3: llama.cpp throws; we give 0 */
}

/* SPM normal token: U+2581 -> ' ', everything else as is. */
static void render_spm(const uint8_t *s, size_t n, piece_w *w)
{
    for (size_t i = 0; i < n; i++) {
        if (i + 3 <= n && memcmp(s + i, TOK_SEP, 3) == 0) {
            pw_bytes(w, " ", 1);
            i += 2;
        } else {
            pw_bytes(w, s + i, 1);
        }
    }
}

/* llama_decode_text's marker for code point cp of token text s[0..n) that is
 * not a byte-level character: "[UNK_BYTE_0x" hex(utf8(cp)) text "]". */
static void render_unk_byte(uint32_t cp, const uint8_t *s, size_t n, piece_w *w)
{
    uint8_t u[4];
    char hex[3];
    size_t m = skv_utf8_encode(cp, u);
    pw_bytes(w, "[UNK_BYTE_0x", 12);
    for (size_t j = 0; j < m; j++) {
        snprintf(hex, sizeof hex, "%02x", u[j]);
        pw_bytes(w, hex, 2);
    }
    pw_bytes(w, s, n);
    pw_bytes(w, "]", 1);
}

/* GPT2 normal token: each byte-level character -> its byte. */
static void render_gpt2(const uint8_t *s, size_t n, piece_w *w)
{
    for (size_t i = 0, adv; i < n; i += adv) {
        uint32_t cp = skv_utf8_decode(s + i, n - i, &adv);
        int b = skv_unicode_cp_to_byte(cp);
        if (b >= 0) {
            uint8_t c = (uint8_t)b;
            pw_bytes(w, &c, 1);
        } else {
            render_unk_byte(cp, s, n, w);
        }
    }
}

static void render(const skv_tokenizer *t, int32_t id, piece_w *w)
{
    size_t n;
    const uint8_t *s = tok_text(t, id, &n);
    uint8_t a = t->attr[id];
    if (a & (A_UNKNOWN | A_CONTROL)) return;
    if (a & A_USER) {
        pw_bytes(w, s, n);
    } else if (a & A_NORMAL) {
        if (t->kind == SKV_TOKENIZER_SPM) render_spm(s, n, w);
        else render_gpt2(s, n, w);
    } else if (a & A_BYTE) {
        uint8_t b = byte_of_piece(s, n);
        pw_bytes(w, &b, 1);
    }
}

int skv_tokenizer_piece(const skv_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *len)
{
    piece_w w = {NULL, 0};
    if (len) *len = 0;
    if (!t || !len || id < 0 || (size_t)id >= t->n_vocab || (cap && !buf)) return SKV_ERR_INVALID_ARG;
    render(t, id, &w);
    *len = w.n;
    if (w.n > cap) return SKV_ERR_RANGE;
    if (w.n > (size_t)INT32_MAX) return SKV_ERR_RANGE;
    w.buf = buf;
    w.n = 0;
    render(t, id, &w);
    return (int)w.n;
}
