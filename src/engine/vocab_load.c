/* vocab_load - a tokenizer from a GGUF file's tokenizer.ggml.* keys (vocab_load.h). */
#include "engine/vocab_load.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "seqkv.h"

/* A special token id: absent -> the tokenizer's default; -1 or 0xFFFFFFFF -> none;
 * other out-of-range values are passed on for the tokenizer to reject. */
static int32_t special_id(const skv_gguf *g, const char *key)
{
    int64_t v;
    int rc = skv_gguf_get_int(g, key, &v);
    if (rc == SKV_ERR_RANGE) return SKV_TOKEN_DEFAULT;
    if (rc != SKV_OK || v == -1 || v == 0xFFFFFFFFll) return SKV_TOKEN_NONE;
    return v < INT32_MIN || v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

/* The arrays a GGUF tokenizer is built from (owned; the strings point into the mapping). */
typedef struct {
    skv_strref *toks, *merges;
    float *scores;
    int32_t *types;
    size_t n_merges;
    char pre[64];
} tok_arrays;

static int tokenizer_kind(const skv_gguf *g, skv_tokenizer_desc *d, tok_arrays *a, skv_err *err)
{
    skv_gguf_str s;
    if (skv_gguf_get_str(g, "tokenizer.ggml.model", &s) != SKV_OK)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: missing tokenizer.ggml.model");
    if (s.len == 5 && !memcmp(s.ptr, "llama", 5)) d->kind = SKV_TOKENIZER_SPM;
    else if (s.len == 4 && !memcmp(s.ptr, "gpt2", 4)) d->kind = SKV_TOKENIZER_GPT2;
    else
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "tokenizer '%.*s' is not supported (llama, gpt2 are)",
                        (int)(s.len > 20 ? 20 : s.len), s.ptr);
    snprintf(a->pre, sizeof a->pre, "default");
    if (skv_gguf_get_str(g, "tokenizer.ggml.pre", &s) == SKV_OK)
        snprintf(a->pre, sizeof a->pre, "%.*s", (int)(s.len > 60 ? 60 : s.len), s.ptr);
    d->pre = a->pre;
    return SKV_OK;
}

/* tokens (required), scores and token types (optional), merges (optional). */
static int tokenizer_arrays(const skv_gguf *g, size_t n, tok_arrays *a, skv_err *err)
{
    uint32_t et;
    _Static_assert(sizeof(skv_gguf_str) == sizeof(skv_strref), "string ref layouts must match"); /* {ptr, len} */
    if (!(a->toks = malloc(n * sizeof *a->toks))) return SKV_ERR_NOMEM;
    if (skv_gguf_arr_strings(g, "tokenizer.ggml.tokens", (skv_gguf_str *)a->toks, n) != SKV_OK)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: bad tokenizer.ggml.tokens");
    if (skv_gguf_has(g, "tokenizer.ggml.scores")) {
        if (!(a->scores = malloc(n * sizeof *a->scores))) return SKV_ERR_NOMEM;
        if (skv_gguf_arr_f32(g, "tokenizer.ggml.scores", a->scores, n) != SKV_OK)
            return skv_fail(err, SKV_ERR_FORMAT, "GGUF: tokenizer.ggml.scores must be %zu f32 values", n);
    }
    if (skv_gguf_has(g, "tokenizer.ggml.token_type")) {
        if (!(a->types = malloc(n * sizeof *a->types))) return SKV_ERR_NOMEM;
        if (skv_gguf_arr_i32(g, "tokenizer.ggml.token_type", a->types, n) != SKV_OK)
            return skv_fail(err, SKV_ERR_FORMAT, "GGUF: tokenizer.ggml.token_type must be %zu integers", n);
    }
    if (skv_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &a->n_merges) != SKV_OK) return SKV_OK;
    if (et != SKV_GGUF_STRING || a->n_merges > (1u << 24)) return skv_fail(err, SKV_ERR_FORMAT, "GGUF: bad tokenizer.ggml.merges");
    if (!(a->merges = malloc((a->n_merges ? a->n_merges : 1) * sizeof *a->merges))) return SKV_ERR_NOMEM;
    if (skv_gguf_arr_strings(g, "tokenizer.ggml.merges", (skv_gguf_str *)a->merges, a->n_merges) != SKV_OK)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: bad tokenizer.ggml.merges");
    return SKV_OK;
}

static void tokenizer_specials(const skv_gguf *g, skv_tokenizer_desc *d)
{
    int b;
    d->bos_id = special_id(g, "tokenizer.ggml.bos_token_id");
    d->eos_id = special_id(g, "tokenizer.ggml.eos_token_id");
    d->unk_id = special_id(g, "tokenizer.ggml.unknown_token_id");
    d->pad_id = special_id(g, "tokenizer.ggml.padding_token_id");
    d->add_bos = skv_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == SKV_OK ? b : -1;
    d->add_eos = skv_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == SKV_OK ? b : -1;
    d->add_space_prefix = skv_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == SKV_OK ? b : -1;
}

/* Number of tokens: the length of tokenizer.ggml.tokens (1 .. 2^24). */
static int tokenizer_size(const skv_gguf *g, size_t *n, skv_err *err)
{
    uint32_t et;
    if (skv_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, n) != SKV_OK || et != SKV_GGUF_STRING || *n == 0 ||
        *n > (1u << 24))
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: missing or invalid tokenizer.ggml.tokens");
    return SKV_OK;
}

int skv_vocab_from_gguf(const skv_gguf *g, skv_tokenizer **out, skv_err *err)
{
    skv_tokenizer_desc d;
    tok_arrays a;
    size_t n = 0;
    int rc;
    memset(&d, 0, sizeof d);
    memset(&a, 0, sizeof a);
    *out = NULL;
    if ((rc = tokenizer_size(g, &n, err)) || (rc = tokenizer_kind(g, &d, &a, err))) return rc;
    if ((rc = tokenizer_arrays(g, n, &a, err)) == SKV_OK) {
        d.n_vocab = n;
        d.tokens = a.toks;
        d.scores = a.scores;
        d.types = a.types;
        d.n_merges = a.n_merges;
        d.merges = a.merges;
        tokenizer_specials(g, &d);
        rc = skv_tokenizer_create(&d, out, err);
    }
    if (rc == SKV_ERR_NOMEM) skv_fail(err, rc, "out of memory loading the tokenizer");
    free(a.toks);
    free(a.merges);
    free(a.scores);
    free(a.types);
    return rc;
}


int skv_vocab_load(const char *path, skv_tokenizer **out, skv_err *err)
{
    skv_gguf *g = NULL;
    int rc;
    if (!out || !path) return skv_fail(err, SKV_ERR_INVALID_ARG, "skv_vocab_load: NULL argument");
    *out = NULL;
    if ((rc = skv_gguf_open(path, &g, err))) return rc;
    rc = skv_vocab_from_gguf(g, out, err);
    skv_gguf_close(g);
    return rc;
}
