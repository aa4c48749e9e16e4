/* tok_detok.c - token ids -> text, the inverse of encoding with add_special:
 * every BOS is dropped, and with SentencePiece also the one space the encoder
 * put in front of the text (its dummy prefix) on the first piece after a BOS,
 * so encode(text, add_special) -> detokenize gives the text back whenever the
 * text round-trips at all (valid UTF-8 without a literal U+2581). */
#include "tokenizer/tokenizer.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

/* The output being built: bytes beyond cap are counted, not written. */
typedef struct {
    char *text;
    size_t cap, n;
} detok_w;

static void dw_bytes(detok_w *w, const char *s, size_t n)
{
    if (w->text && w->n < w->cap) memcpy(w->text + w->n, s, n < w->cap - w->n ? n : w->cap - w->n);
    w->n += n;
}

/* Appends token id's piece, less a leading space when strip is set. */
static int dw_piece(detok_w *w, const skv_tokenizer *t, int32_t id, int strip)
{
    char small[256], *buf = small;
    size_t len = 0;
    int rc = skv_tokenizer_piece(t, id, small, sizeof small, &len);
    if (rc == SKV_ERR_RANGE && (buf = malloc(len ? len : 1)) != NULL) rc = skv_tokenizer_piece(t, id, buf, len, &len);
    if (!buf) return SKV_ERR_NOMEM;
    if (rc >= 0) {
        size_t skip = strip && len && buf[0] == ' ';
        dw_bytes(w, buf + skip, len - skip);
    }
    if (buf != small) free(buf);
    return rc < 0 ? rc : SKV_OK;
}

int skv_tokenizer_detokenize(const skv_tokenizer *t, const int32_t *tokens, size_t n, int after_bos, char *text,
                             size_t cap, size_t *len)
{
    detok_w w = {text, cap, 0};
    if (!t || !len || (n && !tokens) || (cap && !text)) return SKV_ERR_INVALID_ARG;
    int32_t bos = skv_tokenizer_bos(t);
    int spm = skv_tokenizer_kind(t) == SKV_TOKENIZER_SPM, rc = SKV_OK;
    for (size_t i = 0; i < n && rc == SKV_OK; i++) {
        if (tokens[i] < 0 || (size_t)tokens[i] >= skv_tokenizer_n_vocab(t)) return SKV_ERR_INVALID_ARG;
        if (tokens[i] == bos) {
            after_bos = 1;
            continue;
        }
        rc = dw_piece(&w, t, tokens[i], spm && after_bos);
        after_bos = 0;
    }
    *len = w.n;
    if (rc) return rc;
    if (w.n >= cap) return SKV_ERR_RANGE;
    text[w.n] = 0;
    return SKV_OK;
}
