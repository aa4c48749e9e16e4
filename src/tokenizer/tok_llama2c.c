/* tok_llama2c.c - llama2.c tokenizer files (tok512.bin style), converted to
 * the vocabulary llama.cpp's convert-llama2c-to-ggml makes of them, then
 * built by skv_tokenizer_create.
 *
 * Layout: u32 max_token_length, then per token f32 score, u32 len, len bytes
 * (little-endian). */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rd_u32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static int is_hex(uint8_t c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); }

static int is_byte_piece(const uint8_t *s, size_t n)
{
    return n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && is_hex(s[3]) && is_hex(s[4]) && s[5] == '>';
}

/* The converted vocabulary; texts holds the token texts back to back. */
typedef struct {
    skv_strref *toks;
    float *scores;
    int32_t *types;
    char *texts;
} l2c_vocab;

static void l2c_free(l2c_vocab *v)
{
    free(v->toks);
    free(v->scores);
    free(v->types);
    free(v->texts);
}

/* Pass 1: checks every token's bounds; *total = room for the converted texts. */
static int l2c_measure(const uint8_t *p, size_t size, size_t vocab_size, size_t *total, skv_err *err)
{
    uint32_t max_len = rd_u32(p);
    size_t pos = 4;
    if (max_len == 0 || max_len > (1u << 20))
        return skv_fail(err, SKV_ERR_FORMAT, "llama2.c tokenizer: max_token_length %u is absurd", max_len);
    if (vocab_size == 0 || vocab_size > (size - 4) / 8)
        return skv_fail(err, SKV_ERR_FORMAT,
                        "llama2.c tokenizer: %zu bytes cannot hold %zu tokens", size, vocab_size);
    *total = 0;
    for (size_t i = 0; i < vocab_size; i++) {
        uint32_t len;
        if (size - pos < 8)
            return skv_fail(err, SKV_ERR_FORMAT, "llama2.c tokenizer: truncated at token %zu", i);
        len = rd_u32(p + pos + 4);
        if (len > max_len)
            return skv_fail(err, SKV_ERR_FORMAT,
                            "llama2.c tokenizer: token %zu has length %u > max_token_length %u", i, len, max_len);
        pos += 8;
        if (size - pos < len)
            return skv_fail(err, SKV_ERR_FORMAT, "llama2.c tokenizer: truncated in token %zu", i);
        pos += len;
        *total += 3 * (size_t)len + 8; /* ' ' -> U+2581 triples at most; "</s>" */
    }
    return SKV_OK;
}

/* Converts token i with file text s[0..len) into dst; returns its length.
 * Ids 0/1/2 become <unk>/<s>/</s>, <0xXX> pieces byte tokens, ' ' U+2581. */
static size_t l2c_convert(size_t i, const uint8_t *s, uint32_t len, char *dst, int32_t *type)
{
    static const char *const names[3] = {"<unk>", "<s>", "</s>"};
    size_t n = 0;
    if (i <= 2) {
        n = strlen(names[i]);
        memcpy(dst, names[i], n);
        *type = i == 0 ? SKV_TOKEN_TYPE_UNKNOWN : SKV_TOKEN_TYPE_CONTROL;
        return n;
    }
    if (is_byte_piece(s, len)) {
        memcpy(dst, s, len);
        *type = SKV_TOKEN_TYPE_BYTE;
        return len;
    }
    for (uint32_t k = 0; k < len; k++) {
        if (s[k] == ' ') {
            memcpy(dst + n, TOK_SEP, 3);
            n += 3;
        } else {
            dst[n++] = (char)s[k];
        }
    }
    *type = SKV_TOKEN_TYPE_NORMAL;
    return n;
}

/* Pass 2 over the checked file: fills v (allocated with room for total bytes). */
static int l2c_read(const uint8_t *p, size_t vocab_size, size_t total, l2c_vocab *v)
{
    size_t pos = 4, used = 0;
    v->toks = malloc(vocab_size * sizeof *v->toks);
    v->scores = malloc(vocab_size * sizeof *v->scores);
    v->types = malloc(vocab_size * sizeof *v->types);
    v->texts = malloc(total);
    if (!v->toks || !v->scores || !v->types || !v->texts) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < vocab_size; i++) {
        uint32_t bits = rd_u32(p + pos), len = rd_u32(p + pos + 4);
        char *dst = v->texts + used;
        memcpy(&v->scores[i], &bits, sizeof bits);
        v->toks[i].ptr = dst;
        v->toks[i].len = l2c_convert(i, p + pos + 8, len, dst, &v->types[i]);
        used += v->toks[i].len;
        pos += 8 + len;
    }
    return SKV_OK;
}

/* The description convert-llama2c-to-ggml writes: SPM, bos 1, eos 2, unk 0. */
static skv_tokenizer_desc l2c_desc(const l2c_vocab *v, size_t vocab_size)
{
    skv_tokenizer_desc d = {
        .kind = SKV_TOKENIZER_SPM, .n_vocab = vocab_size,
        .tokens = v->toks, .scores = v->scores, .types = v->types,
        .bos_id = vocab_size > 1 ? 1 : -1, .eos_id = vocab_size > 2 ? 2 : -1, .unk_id = 0, .pad_id = -1,
        .add_bos = vocab_size > 1 ? -1 : 0, .add_eos = -1, .add_space_prefix = -1,
    };
    return d;
}

int skv_tokenizer_load_llama2c(const void *data, size_t size, size_t vocab_size,
                               skv_tokenizer **out, skv_err *err)
{
    l2c_vocab v = {NULL, NULL, NULL, NULL};
    skv_tokenizer_desc d;
    size_t total = 0;
    int rc;
    skv_err_clear(err);
    if (!out) return skv_fail(err, SKV_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!data && size) return skv_fail(err, SKV_ERR_INVALID_ARG, "data is NULL");
    if (size < 4) return skv_fail(err, SKV_ERR_FORMAT, "llama2.c tokenizer: %zu bytes is too short", size);
    if ((rc = l2c_measure(data, size, vocab_size, &total, err))) return rc;
    if (l2c_read(data, vocab_size, total, &v) != SKV_OK) {
        rc = skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    } else {
        d = l2c_desc(&v, vocab_size);
        rc = skv_tokenizer_create(&d, out, err);
    }
    l2c_free(&v);
    return rc;
}
