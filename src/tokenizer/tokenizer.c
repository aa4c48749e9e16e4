/* tokenizer - text <-> token ids, bit-compatible with llama.cpp's llama-vocab.cpp.
 *
 * This file builds the tokenizer from a skv_tokenizer_desc: token texts,
 * scores and attributes, the text -> id hash, the pre-tokenizer, and then the
 * kind-specific tables (tok_spm.c, tok_bpe.c), the special ids and the
 * user-defined tokens. How encoding works: READ ME FIRST in tok_encode.c;
 * the files: tok_int.h. Every count and byte in a skv_tokenizer_desc is
 * validated here.
 */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_tokenizer_free(skv_tokenizer *t)
{
    if (!t) return;
    void *owned[] = {t->blob, t->off, t->score, t->attr, t->slots, t->merge_res, t->nocut, t->ud, t->trie_ud};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    tok_map_free(&t->merges);
    tok_map_free(&t->trie);
    free(t);
}

/* Checks the token texts and returns their total size in *total (an empty
 * text counts `empty` bytes for its placeholder). */
static int measure_texts(const skv_strref *tok, size_t n, size_t empty, size_t *total,
                         skv_err *err)
{
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = tok[i].len;
        if (len && !tok[i].ptr)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "token %zu: NULL text with length %zu", i, len);
        if (len > ((size_t)1 << 30))
            return skv_fail(err, SKV_ERR_FORMAT, "token %zu: text of %zu bytes is absurd", i, len);
        *total += len ? len : empty;
        if (*total > ((size_t)1 << 40)) return skv_fail(err, SKV_ERR_FORMAT, "token texts too large");
    }
    return SKV_OK;
}

/* Copies the token texts (an empty text becomes "[EMPTY_<id>]" as in llama.cpp). */
static int copy_texts(skv_tokenizer *t, const skv_strref *tok, skv_err *err)
{
    size_t total, n = t->n_vocab, pos = 0;
    char tmp[48];
    int rc = measure_texts(tok, n, sizeof tmp, &total, err);
    if (rc) return rc;
    t->off = malloc((n + 1) * sizeof *t->off);
    t->blob = malloc(total ? total : 1);
    if (!t->off || !t->blob) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s = tok[i].ptr;
        size_t len = tok[i].len;
        if (len == 0) {
            len = (size_t)snprintf(tmp, sizeof tmp, "[EMPTY_%zu]", i);
            s = tmp;
        }
        t->off[i] = pos;
        memcpy(t->blob + pos, s, len);
        pos += len;
        if (len > t->max_token_len) t->max_token_len = len;
    }
    t->off[n] = pos;
    return SKV_OK;
}

static uint8_t attr_of_type(int32_t type)
{
    switch (type) {
    case SKV_TOKEN_TYPE_NORMAL: return A_NORMAL;
    case SKV_TOKEN_TYPE_UNKNOWN: return A_UNKNOWN;
    case SKV_TOKEN_TYPE_CONTROL: return A_CONTROL;
    case SKV_TOKEN_TYPE_USER_DEFINED: return A_USER;
    case SKV_TOKEN_TYPE_UNUSED: return A_UNUSED;
    case SKV_TOKEN_TYPE_BYTE: return A_BYTE;
    default: return 0; /* undefined: rendered as nothing */
    }
}

/* Scores (NaN would break the heap order, so it becomes -inf) and attributes. */
static int copy_scores(skv_tokenizer *t, const skv_tokenizer_desc *d, skv_err *err)
{
    t->score = malloc(d->n_vocab * sizeof *t->score);
    t->attr = malloc(d->n_vocab);
    if (!t->score || !t->attr) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->n_vocab; i++) {
        float s = d->scores ? d->scores[i] : 0.0f;
        t->score[i] = isnan(s) ? -INFINITY : s;
        t->attr[i] = d->types ? attr_of_type(d->types[i]) : A_NORMAL;
    }
    return SKV_OK;
}

/* The text -> id hash; two tokens with one text are an error. */
static int build_hash(skv_tokenizer *t, skv_err *err)
{
    size_t cap = tok_table_cap(t->n_vocab);
    if (!cap) return skv_fail(err, SKV_ERR_NOMEM, "vocabulary too large");
    t->slots = calloc(cap, sizeof *t->slots);
    if (!t->slots) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    t->slot_mask = cap - 1;
    for (size_t id = 0; id < t->n_vocab; id++) {
        size_t len, i;
        const uint8_t *s = tok_text(t, (int32_t)id, &len);
        for (i = (size_t)tok_hash_bytes(s, len) & t->slot_mask; t->slots[i]; i = (i + 1) & t->slot_mask) {
            size_t olen;
            uint32_t other = t->slots[i] - 1;
            const uint8_t *o = tok_text(t, (int32_t)other, &olen);
            if (olen == len && memcmp(o, s, len) == 0)
                return skv_fail(err, SKV_ERR_FORMAT,
                                "duplicate token in vocabulary: ids %u and %zu have the same text",
                                other, id);
        }
        t->slots[i] = (uint32_t)id + 1;
    }
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* pre-tokenizers                                                           */

/* tokenizer.ggml.pre names whose llama.cpp pre-tokenizer we implement, with
 * the flags llama.cpp sets for them (llama_vocab::impl::load); one row per
 * behaviour. "gpt2" is our alias; llama.cpp spells it "gpt-2". */
static const pre_entry pre_table[] = {
    {"default", SKV_PRETOK_DEFAULT, 0, 0},
    {"gpt2 gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
     "exaone4 jina-v1-en jina-v2-code roberta-bpe mpt olmo jais trillion granite-docling",
     SKV_PRETOK_GPT2, 0, 0},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
     SKV_PRETOK_LLAMA3, 1, 1},
    {"dbrx smaug-bpe", SKV_PRETOK_LLAMA3, 0, 0},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
     SKV_PRETOK_QWEN2, 0, 0},
    {"smollm starcoder refact command-r codeshell exaone minerva-7b mellum2", SKV_PRETOK_SMOLLM, 0, 0},
    {"falcon", SKV_PRETOK_FALCON, 0, 0},
    {"qwen35", SKV_PRETOK_QWEN35, 0, 0},
    {"deepseek-llm", SKV_PRETOK_DEEPSEEK_LLM, 0, 0},
    {"deepseek-coder", SKV_PRETOK_DEEPSEEK_CODER, 0, 0},
};

/* Is name one of the space-separated words of list? */
static int name_in(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t w = strcspn(p, " ");
        if (w == n && memcmp(p, name, n) == 0) return 1;
        p += w + (p[w] == ' ');
    }
    return 0;
}

static const pre_entry *find_pre(const char *name)
{
    if (!name || !*name) return &pre_table[0];
    for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++)
        if (name_in(pre_table[i].names, name)) return &pre_table[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* create                                                                   */

/* Validates what create needs before allocating; *pre = the pre-tokenizer. */
static int check_desc(const skv_tokenizer_desc *d, const pre_entry **pre, skv_err *err)
{
    *pre = &pre_table[0];
    if (d->kind != SKV_TOKENIZER_SPM && d->kind != SKV_TOKENIZER_GPT2)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "unsupported tokenizer kind %d", d->kind);
    if (d->n_vocab == 0) return skv_fail(err, SKV_ERR_INVALID_ARG, "empty vocabulary (n_vocab = 0)");
    if (d->n_vocab >= INT32_MAX)
        return skv_fail(err, SKV_ERR_FORMAT, "vocabulary of %zu tokens is absurd", d->n_vocab);
    if (!d->tokens) return skv_fail(err, SKV_ERR_INVALID_ARG, "tokens is NULL");
    if (d->kind == SKV_TOKENIZER_GPT2 && !(*pre = find_pre(d->pre)))
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "unknown pre-tokenizer '%.64s'", d->pre);
    return SKV_OK;
}

/* The build steps, in order: later ones look tokens up by text. */
static int build(skv_tokenizer *t, const skv_tokenizer_desc *d, const pre_entry *pre, skv_err *err)
{
    int rc;
    if ((rc = copy_scores(t, d, err)) || (rc = copy_texts(t, d->tokens, err)) ||
        (rc = build_hash(t, err)))
        return rc;
    tok_fixup_attrs(t);
    if ((rc = tok_setup_specials(t, d, pre, err))) return rc;
    rc = t->kind == SKV_TOKENIZER_SPM ? tok_setup_spm(t, err) : tok_setup_gpt2(t, d, err);
    return rc ? rc : tok_setup_user_defined(t, err);
}

int skv_tokenizer_create(const skv_tokenizer_desc *d, skv_tokenizer **out, skv_err *err)
{
    skv_tokenizer *t;
    const pre_entry *pre;
    int rc;
    skv_err_clear(err);
    if (!out) return skv_fail(err, SKV_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!d) return skv_fail(err, SKV_ERR_INVALID_ARG, "desc is NULL");
    if ((rc = check_desc(d, &pre, err))) return rc;
    t = calloc(1, sizeof *t);
    if (!t) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    t->kind = d->kind;
    t->n_vocab = d->n_vocab;
    t->pretok = pre->kind;
    t->ignore_merges = pre->ignore_merges;
    if ((rc = build(t, d, pre, err))) {
        skv_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* accessors                                                                */

size_t skv_tokenizer_n_vocab(const skv_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t skv_tokenizer_bos(const skv_tokenizer *t) { return t ? t->bos : -1; }
int32_t skv_tokenizer_eos(const skv_tokenizer *t) { return t ? t->eos : -1; }
int32_t skv_tokenizer_unk(const skv_tokenizer *t) { return t ? t->unk : -1; }
int32_t skv_tokenizer_pad(const skv_tokenizer *t) { return t ? t->pad : -1; }
int skv_tokenizer_add_bos(const skv_tokenizer *t) { return t ? t->add_bos : 0; }
int skv_tokenizer_add_eos(const skv_tokenizer *t) { return t ? t->add_eos : 0; }
int skv_tokenizer_kind(const skv_tokenizer *t) { return t ? t->kind : 0; }
const char *skv_tokenizer_pre_name(const skv_tokenizer *t)
{
    return !t ? "?" : t->kind == SKV_TOKENIZER_GPT2 ? skv_pretok_name(t->pretok) : "none";
}

const char *skv_tokenizer_token_text(const skv_tokenizer *t, int32_t id, size_t *len)
{
    size_t n;
    const uint8_t *s;
    if (len) *len = 0;
    if (!t || id < 0 || (size_t)id >= t->n_vocab) return NULL;
    s = tok_text(t, id, &n);
    if (len) *len = n;
    return (const char *)s;
}

float skv_tokenizer_token_score(const skv_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || (size_t)id >= t->n_vocab) return -INFINITY;
    return t->score ? t->score[id] : 0.0f;
}

int skv_tokenizer_token_type(const skv_tokenizer *t, int32_t id)
{
    uint8_t a;
    if (!t || id < 0 || (size_t)id >= t->n_vocab) return -1;
    a = t->attr[id];
    if (a & A_UNKNOWN) return SKV_TOKEN_TYPE_UNKNOWN;
    if (a & A_CONTROL) return SKV_TOKEN_TYPE_CONTROL;
    if (a & A_USER) return SKV_TOKEN_TYPE_USER_DEFINED;
    if (a & A_BYTE) return SKV_TOKEN_TYPE_BYTE;
    if (a & A_UNUSED) return SKV_TOKEN_TYPE_UNUSED;
    if (a & A_NORMAL) return SKV_TOKEN_TYPE_NORMAL;
    return 0;
}
