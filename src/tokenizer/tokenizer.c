/* tokenizer - text <-> token ids, bit-compatible with llama.cpp's llama-vocab.cpp.
 *
 * READ ME FIRST
 * - Encoding = partition + per-fragment tokenizer, as in llama.cpp:
 *     text --(user-defined tokens, longest first)--> fragments
 *     SPM:  fragment -> ' '-prefix (first fragment / after a token) -> ' ' to
 *           U+2581 -> characters -> merge the adjacent pair whose concatenation
 *           is the highest-scoring vocab token (ties: leftmost) until none ->
 *           ids, unknown characters as <0xXX> byte tokens.
 *     GPT2: fragment -> pre-tokenizer words (unicode.c) -> each word's UTF-8
 *           bytes -> one symbol per byte -> merge the adjacent pair with the
 *           lowest merge rank (ties: leftmost) until none -> ids.
 * - Both merge loops use a binary heap with lazy deletion, exactly like
 *   llama.cpp's priority queues. A stale entry is recognised because one of
 *   its two symbols changed (SPM: total length differs; BPE: ids differ).
 * - Segmentation (the speed/memory trick, off with SKV_TOKENIZER_NO_SEGMENT):
 *   a fragment is cut into independent pieces where no merge can cross.
 *     SPM: before a U+2581 character whose left neighbour c never precedes
 *          U+2581 inside any vocab token (set `nocut`, built at create time).
 *          No symbol can then span the cut, and merges on either side never
 *          interact, so the result is identical.
 *     GPT2: between an ASCII letter and " <ASCII letter>": every supported
 *          pre-tokenizer ends a word there, and no splitter decision before
 *          the cut looks past it (see docs/tokenizer.md).
 *   Without segmentation memory is still linear in the fragment.
 * - Pieces of at most 64 bytes (SPM segments, BPE words) are memoized per
 *   encode call; their ids depend only on their bytes (see `cached`).
 * - The reference paths (SKV_TOKENIZER_NO_SEGMENT, SKV_TOKENIZER_NAIVE) skip
 *   both shortcuts; tests and the fuzzer check that all paths agree.
 * - Every count and byte in a skv_tokenizer_desc is validated in create().
 */
#include "tokenizer/tokenizer.h"
#include "core/fpguard.h"

#include "seqkv.h"
#include "tokenizer/unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token attributes (llama_token_attr subset), a bit set per token. */
enum {
    A_UNKNOWN = 1,
    A_UNUSED = 2,
    A_NORMAL = 4,
    A_CONTROL = 8,
    A_USER = 16,
    A_BYTE = 32
};

/* Open-addressing map uint64 -> uint32 (keys stored + 1; 0 marks empty). */
typedef struct {
    uint64_t *key;
    uint32_t *val;
    size_t mask;
} u64map;

struct skv_tokenizer {
    int kind;
    skv_pretok pretok;     /* GPT2 only */
    int ignore_merges;     /* GPT2: a word that is a token is emitted whole */
    size_t n_vocab;
    char *blob;            /* token texts back to back */
    size_t *off;           /* (n_vocab + 1): text of id i = blob[off[i] .. off[i+1]) */
    float *score;          /* n_vocab, NaN replaced by -inf */
    uint8_t *attr;         /* n_vocab, A_* bits */
    uint32_t *slots;       /* text -> id hash: id + 1, 0 = empty */
    size_t slot_mask;
    size_t max_token_len;
    int32_t byte_tok[256]; /* SPM: <0xXX> (else the 1-byte text); GPT2: the byte's
                              byte-level character */
    int32_t raw1_tok[256]; /* token whose text is exactly this single byte */
    u64map merges;         /* GPT2: (left << 32 | right) -> rank */
    int32_t *merge_res;    /* n_merges: token of the merged text, -1 if none */
    size_t n_merges;
    uint32_t *nocut;       /* SPM: sorted packed characters that precede U+2581 in a token */
    size_t n_nocut;
    int32_t *ud;           /* user-defined tokens matched in raw text, priority order */
    size_t n_ud;
    u64map trie;           /* (node << 8 | byte) -> child node; root = 0 */
    int32_t trie_root[256]; /* the root's children (-1: none), for a quick first test */
    int32_t *trie_ud;      /* per node: index into ud ending here, or -1 */
    size_t max_ud_len;
    int32_t bos, eos, unk, pad;
    int add_bos, add_eos, add_space_prefix;
};

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

#if defined(__GNUC__)
#define SKV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SKV_PRINTF(a, b)
#endif

static int fail(char *err, size_t errcap, int status, const char *fmt, ...) SKV_PRINTF(4, 5);

static int fail(char *err, size_t errcap, int status, const char *fmt, ...)
{
    if (err && errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return status;
}

static uint64_t load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A quick non-cryptographic hash (only ever compared within one process). */
static uint64_t hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n, w;
    while (n > 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    if (n >= 4) w = load32(s) | load32(s + n - 4) << 32; /* overlapping loads */
    else if (n) w = (uint64_t)s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16;
    else w = 0;
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

static uint64_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    k *= 0xC4CEB9FE1A85EC53ull;
    return k ^ (k >> 33);
}

/* Smallest power of two >= 2n (at least 16), or 0 on overflow. */
static size_t table_cap(size_t n)
{
    size_t cap = 16;
    if (n > SIZE_MAX / 64) return 0;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

static int u64map_init(u64map *m, size_t n)
{
    size_t cap = table_cap(n);
    m->mask = 0;
    m->key = NULL;
    m->val = NULL;
    if (!cap || cap > SIZE_MAX / sizeof(uint64_t)) return SKV_ERR_NOMEM;
    m->key = calloc(cap, sizeof(uint64_t));
    m->val = malloc(cap * sizeof(uint32_t));
    if (!m->key || !m->val) return SKV_ERR_NOMEM;
    m->mask = cap - 1;
    return SKV_OK;
}

static void u64map_free(u64map *m)
{
    free(m->key);
    free(m->val);
}

static const uint32_t *u64map_get(const u64map *m, uint64_t k)
{
    size_t i;
    if (!m->key) return NULL;
    k += 1;
    for (i = (size_t)mix64(k) & m->mask; m->key[i]; i = (i + 1) & m->mask)
        if (m->key[i] == k) return &m->val[i];
    return NULL;
}

/* Inserts k -> v unless k is present (first wins). Capacity was sized for all
 * insertions at init, so a free slot always exists. */
static void u64map_put_first(u64map *m, uint64_t k, uint32_t v)
{
    size_t i;
    k += 1;
    for (i = (size_t)mix64(k) & m->mask; m->key[i]; i = (i + 1) & m->mask)
        if (m->key[i] == k) return;
    m->key[i] = k;
    m->val[i] = v;
}

static const uint8_t *tok_text(const skv_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->off[id + 1] - t->off[id];
    return (const uint8_t *)t->blob + t->off[id];
}

/* Vocabulary id of the exact text s[0..n), or -1. */
static int32_t tok_find(const skv_tokenizer *t, const uint8_t *s, size_t n)
{
    size_t i;
    if (n == 0 || n > t->max_token_len) return -1;
    for (i = (size_t)hash_bytes(s, n) & t->slot_mask; t->slots[i]; i = (i + 1) & t->slot_mask) {
        int32_t id = (int32_t)(t->slots[i] - 1);
        size_t len;
        const uint8_t *txt = tok_text(t, id, &len);
        if (len == n && memcmp(txt, s, n) == 0) return id;
    }
    return -1;
}

static int32_t tok_find_str(const skv_tokenizer *t, const char *s)
{
    return tok_find(t, (const uint8_t *)s, strlen(s));
}

/* ------------------------------------------------------------------------ */
/* creation                                                                 */

void skv_tokenizer_free(skv_tokenizer *t)
{
    if (!t) return;
    free(t->blob);
    free(t->off);
    free(t->score);
    free(t->attr);
    free(t->slots);
    u64map_free(&t->merges);
    free(t->merge_res);
    free(t->nocut);
    free(t->ud);
    u64map_free(&t->trie);
    free(t->trie_ud);
    free(t);
}

/* Copies the token texts (an empty text becomes "[EMPTY_<id>]" as in llama.cpp). */
static int copy_texts(skv_tokenizer *t, const skv_strref *tok, char *err, size_t errcap)
{
    size_t total = 0, n = t->n_vocab, pos = 0;
    char tmp[48];
    for (size_t i = 0; i < n; i++) {
        size_t len = tok[i].len;
        if (len && !tok[i].ptr)
            return fail(err, errcap, SKV_ERR_INVALID_ARG, "token %zu: NULL text with length %zu", i, len);
        if (len > ((size_t)1 << 30))
            return fail(err, errcap, SKV_ERR_FORMAT, "token %zu: text of %zu bytes is absurd", i, len);
        total += len ? len : sizeof tmp;
        if (total > ((size_t)1 << 40)) return fail(err, errcap, SKV_ERR_FORMAT, "token texts too large");
    }
    t->off = malloc((n + 1) * sizeof *t->off);
    t->blob = malloc(total ? total : 1);
    if (!t->off || !t->blob) return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
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

static int build_hash(skv_tokenizer *t, char *err, size_t errcap)
{
    size_t cap = table_cap(t->n_vocab);
    if (!cap) return fail(err, errcap, SKV_ERR_NOMEM, "vocabulary too large");
    t->slots = calloc(cap, sizeof *t->slots);
    if (!t->slots) return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
    t->slot_mask = cap - 1;
    for (size_t id = 0; id < t->n_vocab; id++) {
        size_t len, i;
        const uint8_t *s = tok_text(t, (int32_t)id, &len);
        for (i = (size_t)hash_bytes(s, len) & t->slot_mask; t->slots[i]; i = (i + 1) & t->slot_mask) {
            size_t olen;
            uint32_t other = t->slots[i] - 1;
            const uint8_t *o = tok_text(t, (int32_t)other, &olen);
            if (olen == len && memcmp(o, s, len) == 0)
                return fail(err, errcap, SKV_ERR_FORMAT,
                            "duplicate token in vocabulary: ids %u and %zu have the same text",
                            other, id);
        }
        t->slots[i] = (uint32_t)id + 1;
    }
    return SKV_OK;
}

/* llama.cpp's load-time fix-ups that depend on token texts (llama-vocab.cpp,
 * "auto-detect special tokens by text" and the workarounds after it). The
 * end-of-turn/FIM detection there marks only the first match found for each
 * role; we mark every match. */
static void fixup_attrs(skv_tokenizer *t)
{
    static const char *const force_control[] = {
        /* end-of-generation / end-of-turn / end-of-message */
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
        /* fill-in-the-middle */
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
        "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
        "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
        "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
        "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
    };
    static const char *const force_user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    int32_t end_id, s_id;
    for (size_t i = 0; i < sizeof force_control / sizeof force_control[0]; i++) {
        int32_t id = tok_find_str(t, force_control[i]);
        if (id >= 0) t->attr[id] |= A_CONTROL;
    }
    for (size_t i = 0; i < sizeof force_user / sizeof force_user[0]; i++) {
        int32_t id = tok_find_str(t, force_user[i]);
        if (id >= 0) t->attr[id] = A_USER;
    }
    /* o200k_harmony / solar-open: "<|end|>" is not end-of-generation */
    end_id = tok_find_str(t, "<|end|>");
    if (end_id >= 0) {
        int has_return = tok_find_str(t, "<|return|>") >= 0;
        int has_call = tok_find_str(t, "<|call|>") >= 0 || tok_find_str(t, "<|calls|>") >= 0;
        int has_flush = tok_find_str(t, "<|flush|>") >= 0;
        if ((has_return && has_call) || (has_call && has_flush)) t->attr[end_id] = A_USER;
    }
    /* gemma4 / paddleocr: "</s>" is a normal token */
    s_id = tok_find_str(t, "</s>");
    if (s_id >= 0 && tok_find_str(t, "<|tool_response>") >= 0) t->attr[s_id] = A_NORMAL;
}

typedef struct {
    const char *name;
    skv_pretok kind;
    int ignore_merges;
    int add_bos;
} pre_entry;

/* tokenizer.ggml.pre names whose llama.cpp pre-tokenizer we implement, with
 * the flags llama.cpp sets for them (llama_vocab::impl::load). */
static const pre_entry pre_table[] = {
    {"default", SKV_PRETOK_DEFAULT, 0, 0},
    {"gpt2", SKV_PRETOK_GPT2, 0, 0}, /* our alias; llama.cpp spells it "gpt-2" */
    {"gpt-2", SKV_PRETOK_GPT2, 0, 0}, {"phi-2", SKV_PRETOK_GPT2, 0, 0},
    {"jina-es", SKV_PRETOK_GPT2, 0, 0}, {"jina-de", SKV_PRETOK_GPT2, 0, 0},
    {"gigachat", SKV_PRETOK_GPT2, 0, 0}, {"jina-v2-es", SKV_PRETOK_GPT2, 0, 0},
    {"jina-v2-de", SKV_PRETOK_GPT2, 0, 0}, {"a.x-4.0", SKV_PRETOK_GPT2, 0, 0},
    {"mellum", SKV_PRETOK_GPT2, 0, 0}, {"modern-bert", SKV_PRETOK_GPT2, 0, 0},
    {"exaone4", SKV_PRETOK_GPT2, 0, 0}, {"jina-v1-en", SKV_PRETOK_GPT2, 0, 0},
    {"jina-v2-code", SKV_PRETOK_GPT2, 0, 0}, {"roberta-bpe", SKV_PRETOK_GPT2, 0, 0},
    {"mpt", SKV_PRETOK_GPT2, 0, 0}, {"olmo", SKV_PRETOK_GPT2, 0, 0},
    {"jais", SKV_PRETOK_GPT2, 0, 0}, {"trillion", SKV_PRETOK_GPT2, 0, 0},
    {"granite-docling", SKV_PRETOK_GPT2, 0, 0},
    {"llama3", SKV_PRETOK_LLAMA3, 1, 1}, {"llama-v3", SKV_PRETOK_LLAMA3, 1, 1},
    {"llama-bpe", SKV_PRETOK_LLAMA3, 1, 1}, {"falcon3", SKV_PRETOK_LLAMA3, 1, 1},
    {"falcon-h1", SKV_PRETOK_LLAMA3, 1, 1}, {"pixtral", SKV_PRETOK_LLAMA3, 1, 1},
    {"midm-2.0", SKV_PRETOK_LLAMA3, 1, 1}, {"lfm2", SKV_PRETOK_LLAMA3, 1, 1},
    {"jina-v5-nano", SKV_PRETOK_LLAMA3, 1, 1},
    {"dbrx", SKV_PRETOK_LLAMA3, 0, 0}, {"smaug-bpe", SKV_PRETOK_LLAMA3, 0, 0},
    {"qwen2", SKV_PRETOK_QWEN2, 0, 0}, {"deepseek-r1-qwen", SKV_PRETOK_QWEN2, 0, 0},
    {"kormo", SKV_PRETOK_QWEN2, 0, 0}, {"f2llmv2", SKV_PRETOK_QWEN2, 0, 0},
    {"megrez", SKV_PRETOK_QWEN2, 0, 0}, {"stablelm2", SKV_PRETOK_QWEN2, 0, 0},
    {"hunyuan", SKV_PRETOK_QWEN2, 0, 0}, {"solar-open", SKV_PRETOK_QWEN2, 0, 0},
    {"grok-2", SKV_PRETOK_QWEN2, 0, 0},
    {"smollm", SKV_PRETOK_SMOLLM, 0, 0}, {"starcoder", SKV_PRETOK_SMOLLM, 0, 0},
    {"refact", SKV_PRETOK_SMOLLM, 0, 0}, {"command-r", SKV_PRETOK_SMOLLM, 0, 0},
    {"codeshell", SKV_PRETOK_SMOLLM, 0, 0}, {"exaone", SKV_PRETOK_SMOLLM, 0, 0},
    {"minerva-7b", SKV_PRETOK_SMOLLM, 0, 0}, {"mellum2", SKV_PRETOK_SMOLLM, 0, 0},
};

static int resolve_special(int32_t *dst, int32_t v, int32_t dflt, size_t n_vocab, const char *what,
                           char *err, size_t errcap)
{
    if (v == SKV_TOKEN_DEFAULT) v = (dflt >= 0 && (size_t)dflt < n_vocab) ? dflt : -1;
    if (v < -1 || (v >= 0 && (size_t)v >= n_vocab))
        return fail(err, errcap, SKV_ERR_INVALID_ARG, "%s %d out of range (vocabulary of %zu tokens)",
                    what, (int)v, n_vocab);
    *dst = v;
    return SKV_OK;
}

static int resolve_flag(int *dst, int v, int dflt, const char *what, char *err, size_t errcap)
{
    if (v < -1 || v > 1) return fail(err, errcap, SKV_ERR_INVALID_ARG, "%s must be -1, 0 or 1, not %d", what, v);
    *dst = v < 0 ? dflt : v;
    return SKV_OK;
}

static int setup_specials(skv_tokenizer *t, const skv_tokenizer_desc *d, const pre_entry *pre,
                          char *err, size_t errcap)
{
    int spm = t->kind == SKV_TOKENIZER_SPM;
    int rc;
    if ((rc = resolve_special(&t->bos, d->bos_id, spm ? 1 : 11, t->n_vocab, "bos_id", err, errcap)) ||
        (rc = resolve_special(&t->eos, d->eos_id, spm ? 2 : 11, t->n_vocab, "eos_id", err, errcap)) ||
        (rc = resolve_special(&t->unk, d->unk_id, spm ? 0 : -1, t->n_vocab, "unk_id", err, errcap)) ||
        (rc = resolve_special(&t->pad, d->pad_id, -1, t->n_vocab, "pad_id", err, errcap)) ||
        (rc = resolve_flag(&t->add_bos, d->add_bos, spm ? 1 : pre->add_bos, "add_bos", err, errcap)) ||
        (rc = resolve_flag(&t->add_eos, d->add_eos, 0, "add_eos", err, errcap)) ||
        (rc = resolve_flag(&t->add_space_prefix, d->add_space_prefix, spm, "add_space_prefix", err, errcap)))
        return rc;
    if (t->add_bos && t->bos < 0)
        return fail(err, errcap, SKV_ERR_FORMAT, "add_bos is true, but there is no bos token");
    if (t->add_eos && t->eos < 0)
        return fail(err, errcap, SKV_ERR_FORMAT, "add_eos is true, but there is no eos token");
    return SKV_OK;
}

/* Packs one character (1..4 bytes) into a uint32 for the nocut set. */
static uint32_t pack_char(const uint8_t *s, size_t n)
{
    uint32_t v = 0;
    for (size_t i = 0; i < n && i < 4; i++) v |= (uint32_t)s[i] << (8 * i);
    return v;
}

static const uint8_t SEP[3] = {0xE2, 0x96, 0x81}; /* U+2581, SentencePiece's space */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* SPM: byte fallback table and the set of characters that precede U+2581
 * inside some token (split into characters the way the encoder splits). */
static int setup_spm(skv_tokenizer *t, char *err, size_t errcap)
{
    size_t cap = 16, n = 0;
    uint32_t *set = malloc(cap * sizeof *set);
    if (!set) return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
    for (int b = 0; b < 256; b++) {
        char hex[8];
        uint8_t one = (uint8_t)b;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_tok[b] = tok_find_str(t, hex);
        if (t->byte_tok[b] < 0) t->byte_tok[b] = tok_find(t, &one, 1);
    }
    for (size_t id = 0; id < t->n_vocab; id++) {
        size_t len, pos = 0, prev = 0, prev_len = 0;
        const uint8_t *s = tok_text(t, (int32_t)id, &len);
        while (pos < len) {
            size_t cl = skv_utf8_seq_len(s[pos]);
            if (cl > len - pos) cl = len - pos;
            if (pos > 0 && cl == 3 && memcmp(s + pos, SEP, 3) == 0) {
                if (n == cap) {
                    uint32_t *g = realloc(set, 2 * cap * sizeof *set);
                    if (!g) {
                        free(set);
                        return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
                    }
                    set = g;
                    cap *= 2;
                }
                set[n++] = pack_char(s + prev, prev_len);
            }
            prev = pos;
            prev_len = cl;
            pos += cl;
        }
    }
    qsort(set, n, sizeof *set, cmp_u32);
    t->n_nocut = 0;
    for (size_t i = 0; i < n; i++)
        if (t->n_nocut == 0 || set[t->n_nocut - 1] != set[i]) set[t->n_nocut++] = set[i];
    t->nocut = set;
    return SKV_OK;
}

/* GPT2: byte tables and the merge table. */
static int setup_gpt2(skv_tokenizer *t, const skv_tokenizer_desc *d, char *err, size_t errcap)
{
    uint8_t *buf;
    size_t bufcap = 2 * t->max_token_len + 8;
    int rc;
    for (int b = 0; b < 256; b++) {
        uint8_t u[4], one = (uint8_t)b;
        size_t n = skv_utf8_encode(skv_unicode_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = tok_find(t, u, n);
        t->raw1_tok[b] = tok_find(t, &one, 1);
    }
    if (d->n_merges == 0) return SKV_OK;
    if (!d->merges) return fail(err, errcap, SKV_ERR_INVALID_ARG, "n_merges is %zu but merges is NULL", d->n_merges);
    if (d->n_merges > INT32_MAX) return fail(err, errcap, SKV_ERR_FORMAT, "%zu merges is absurd", d->n_merges);
    t->n_merges = d->n_merges;
    t->merge_res = malloc(d->n_merges * sizeof *t->merge_res);
    buf = malloc(bufcap);
    if (!t->merge_res || !buf || u64map_init(&t->merges, d->n_merges) != SKV_OK) {
        free(buf);
        return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
    }
    rc = SKV_OK;
    for (size_t i = 0; i < d->n_merges && rc == SKV_OK; i++) {
        const uint8_t *m = (const uint8_t *)d->merges[i].ptr;
        size_t len = d->merges[i].len, sp = 1;
        int32_t l, r;
        if (len && !m) {
            rc = fail(err, errcap, SKV_ERR_INVALID_ARG, "merge %zu: NULL text", i);
            break;
        }
        while (sp < len && m[sp] != ' ') sp++; /* first space after the first byte */
        if (len < 3 || sp >= len - 1) {
            rc = fail(err, errcap, SKV_ERR_FORMAT, "merge %zu is not of the form \"a b\"", i);
            break;
        }
        l = tok_find(t, m, sp);
        r = tok_find(t, m + sp + 1, len - sp - 1);
        if (l < 0 || r < 0) {
            rc = fail(err, errcap, SKV_ERR_FORMAT, "merge %zu (\"%.*s\") names a token not in the vocabulary",
                      i, (int)(len > 64 ? 64 : len), (const char *)m);
            break;
        }
        if (len - 1 > bufcap) {
            t->merge_res[i] = -1; /* longer than any token */
        } else {
            memcpy(buf, m, sp);
            memcpy(buf + sp, m + sp + 1, len - sp - 1);
            t->merge_res[i] = tok_find(t, buf, len - 1);
        }
        u64map_put_first(&t->merges, ((uint64_t)(uint32_t)l << 32) | (uint32_t)r, (uint32_t)i);
    }
    free(buf);
    return rc;
}

typedef struct {
    size_t len;
    int32_t id;
} ud_key;

/* Longest first; equal lengths by id (llama.cpp's std::sort leaves them unordered). */
static int cmp_ud(const void *a, const void *b)
{
    const ud_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* User-defined tokens (neither control nor unknown) are cut out of the raw
 * text before tokenizing, longest first; a byte trie tells which occur. */
static int setup_user_defined(skv_tokenizer *t, char *err, size_t errcap)
{
    size_t n = 0, nodes = 1, total = 0;
    ud_key *keys;
    for (size_t id = 0; id < t->n_vocab; id++)
        if ((t->attr[id] & A_USER) && !(t->attr[id] & (A_CONTROL | A_UNKNOWN))) {
            n++;
            total += t->off[id + 1] - t->off[id];
        }
    if (n == 0) return SKV_OK;
    t->ud = malloc(n * sizeof *t->ud);
    t->trie_ud = malloc((total + 1) * sizeof *t->trie_ud);
    keys = malloc(n * sizeof *keys);
    if (!t->ud || !t->trie_ud || !keys || u64map_init(&t->trie, total) != SKV_OK) {
        free(keys);
        return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
    }
    for (size_t id = 0; id < t->n_vocab; id++)
        if ((t->attr[id] & A_USER) && !(t->attr[id] & (A_CONTROL | A_UNKNOWN))) {
            keys[t->n_ud].len = t->off[id + 1] - t->off[id];
            keys[t->n_ud++].id = (int32_t)id;
        }
    qsort(keys, t->n_ud, sizeof *keys, cmp_ud);
    for (size_t k = 0; k < t->n_ud; k++) t->ud[k] = keys[k].id;
    free(keys);
    t->trie_ud[0] = -1;
    for (int b = 0; b < 256; b++) t->trie_root[b] = -1;
    for (size_t k = 0; k < t->n_ud; k++) {
        size_t len;
        const uint8_t *s = tok_text(t, t->ud[k], &len);
        uint32_t node = 0;
        if (len > t->max_ud_len) t->max_ud_len = len;
        for (size_t i = 0; i < len; i++) {
            uint64_t key = ((uint64_t)node << 8) | s[i];
            const uint32_t *child = u64map_get(&t->trie, key);
            if (!child) {
                t->trie_ud[nodes] = -1;
                u64map_put_first(&t->trie, key, (uint32_t)nodes);
                node = (uint32_t)nodes++;
            } else {
                node = *child;
            }
            if (i == 0) t->trie_root[s[0]] = (int32_t)node;
        }
        t->trie_ud[node] = (int32_t)k;
    }
    return SKV_OK;
}

static const pre_entry *find_pre(const char *name)
{
    if (!name || !*name) return &pre_table[0];
    for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++)
        if (strcmp(pre_table[i].name, name) == 0) return &pre_table[i];
    return NULL;
}

int skv_tokenizer_create(const skv_tokenizer_desc *d, skv_tokenizer **out, char *err, size_t errcap)
{
    skv_tokenizer *t;
    const pre_entry *pre = &pre_table[0];
    int rc;
    if (err && errcap) err[0] = 0;
    if (!out) return fail(err, errcap, SKV_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!d) return fail(err, errcap, SKV_ERR_INVALID_ARG, "desc is NULL");
    if (d->kind != SKV_TOKENIZER_SPM && d->kind != SKV_TOKENIZER_GPT2)
        return fail(err, errcap, SKV_ERR_UNSUPPORTED, "unsupported tokenizer kind %d", d->kind);
    if (d->n_vocab == 0) return fail(err, errcap, SKV_ERR_INVALID_ARG, "empty vocabulary (n_vocab = 0)");
    if (d->n_vocab >= INT32_MAX) return fail(err, errcap, SKV_ERR_FORMAT, "vocabulary of %zu tokens is absurd", d->n_vocab);
    if (!d->tokens) return fail(err, errcap, SKV_ERR_INVALID_ARG, "tokens is NULL");
    if (d->kind == SKV_TOKENIZER_GPT2 && !(pre = find_pre(d->pre)))
        return fail(err, errcap, SKV_ERR_UNSUPPORTED, "unknown pre-tokenizer '%.64s'", d->pre);

    t = calloc(1, sizeof *t);
    if (!t) return fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
    t->kind = d->kind;
    t->n_vocab = d->n_vocab;
    t->pretok = pre->kind;
    t->ignore_merges = pre->ignore_merges;
    t->score = malloc(d->n_vocab * sizeof *t->score);
    t->attr = malloc(d->n_vocab);
    if (!t->score || !t->attr) {
        rc = fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
        goto bad;
    }
    for (size_t i = 0; i < d->n_vocab; i++) {
        float s = d->scores ? d->scores[i] : 0.0f;
        t->score[i] = isnan(s) ? -INFINITY : s; /* NaN would break the heap order */
        t->attr[i] = d->types ? attr_of_type(d->types[i]) : A_NORMAL;
    }
    if ((rc = copy_texts(t, d->tokens, err, errcap)) || (rc = build_hash(t, err, errcap))) goto bad;
    fixup_attrs(t);
    if ((rc = setup_specials(t, d, pre, err, errcap))) goto bad;
    rc = t->kind == SKV_TOKENIZER_SPM ? setup_spm(t, err, errcap) : setup_gpt2(t, d, err, errcap);
    if (rc || (rc = setup_user_defined(t, err, errcap))) goto bad;
    *out = t;
    return SKV_OK;
bad:
    skv_tokenizer_free(t);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* llama2.c tokenizer files                                                 */

static uint32_t rd_u32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static int is_hex(uint8_t c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); }

static int is_byte_piece(const uint8_t *s, size_t n)
{
    return n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && is_hex(s[3]) && is_hex(s[4]) && s[5] == '>';
}

int skv_tokenizer_load_llama2c(const void *data, size_t size, size_t vocab_size,
                               skv_tokenizer **out, char *err, size_t errcap)
{
    const uint8_t *p = data;
    size_t pos = 4, total = 0;
    uint32_t max_len;
    skv_strref *toks = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    char *texts = NULL;
    skv_tokenizer_desc d;
    int rc;
    if (err && errcap) err[0] = 0;
    if (!out) return fail(err, errcap, SKV_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!data && size) return fail(err, errcap, SKV_ERR_INVALID_ARG, "data is NULL");
    if (size < 4) return fail(err, errcap, SKV_ERR_FORMAT, "llama2.c tokenizer: %zu bytes is too short", size);
    max_len = rd_u32(p);
    if (max_len == 0 || max_len > (1u << 20))
        return fail(err, errcap, SKV_ERR_FORMAT, "llama2.c tokenizer: max_token_length %u is absurd", max_len);
    if (vocab_size == 0 || vocab_size > (size - 4) / 8)
        return fail(err, errcap, SKV_ERR_FORMAT,
                    "llama2.c tokenizer: %zu bytes cannot hold %zu tokens", size, vocab_size);
    /* pass 1: validate and measure */
    for (size_t i = 0; i < vocab_size; i++) {
        uint32_t len;
        if (size - pos < 8)
            return fail(err, errcap, SKV_ERR_FORMAT, "llama2.c tokenizer: truncated at token %zu", i);
        len = rd_u32(p + pos + 4);
        if (len > max_len)
            return fail(err, errcap, SKV_ERR_FORMAT,
                        "llama2.c tokenizer: token %zu has length %u > max_token_length %u", i, len, max_len);
        pos += 8;
        if (size - pos < len)
            return fail(err, errcap, SKV_ERR_FORMAT, "llama2.c tokenizer: truncated in token %zu", i);
        pos += len;
        total += 3 * (size_t)len + 8; /* ' ' -> U+2581 triples at most; "</s>" */
    }
    toks = malloc(vocab_size * sizeof *toks);
    scores = malloc(vocab_size * sizeof *scores);
    types = malloc(vocab_size * sizeof *types);
    texts = malloc(total);
    if (!toks || !scores || !types || !texts) {
        rc = fail(err, errcap, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* pass 2: convert as llama.cpp's convert-llama2c-to-ggml does */
    pos = 4;
    total = 0;
    for (size_t i = 0; i < vocab_size; i++) {
        uint32_t bits = rd_u32(p + pos), len = rd_u32(p + pos + 4);
        const uint8_t *s = p + pos + 8;
        char *dst = texts + total;
        size_t n = 0;
        memcpy(&scores[i], &bits, sizeof bits);
        pos += 8 + len;
        if (i <= 2) {
            static const char *const names[3] = {"<unk>", "<s>", "</s>"};
            n = strlen(names[i]);
            memcpy(dst, names[i], n);
            types[i] = i == 0 ? SKV_TOKEN_TYPE_UNKNOWN : SKV_TOKEN_TYPE_CONTROL;
        } else if (is_byte_piece(s, len)) {
            memcpy(dst, s, len);
            n = len;
            types[i] = SKV_TOKEN_TYPE_BYTE;
        } else {
            for (uint32_t k = 0; k < len; k++) {
                if (s[k] == ' ') {
                    memcpy(dst + n, SEP, 3);
                    n += 3;
                } else {
                    dst[n++] = (char)s[k];
                }
            }
            types[i] = SKV_TOKEN_TYPE_NORMAL;
        }
        toks[i].ptr = dst;
        toks[i].len = n;
        total += n;
    }
    memset(&d, 0, sizeof d);
    d.kind = SKV_TOKENIZER_SPM;
    d.n_vocab = vocab_size;
    d.tokens = toks;
    d.scores = scores;
    d.types = types;
    d.bos_id = vocab_size > 1 ? 1 : -1;
    d.eos_id = vocab_size > 2 ? 2 : -1;
    d.unk_id = 0;
    d.pad_id = -1;
    d.add_bos = vocab_size > 1 ? -1 : 0;
    d.add_eos = -1;
    d.add_space_prefix = -1;
    rc = skv_tokenizer_create(&d, out, err, errcap);
done:
    free(toks);
    free(scores);
    free(types);
    free(texts);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* encoding: shared machinery                                               */

typedef struct {
    void *p;
    size_t cap;
} scratch;

/* Room for n bytes in b (contents are not preserved). */
static void *scratch_get(scratch *b, size_t n)
{
    if (n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        void *q;
        while (cap < n) cap = cap > SIZE_MAX / 2 ? n : cap * 2;
        q = malloc(cap);
        if (!q) return NULL;
        free(b->p);
        b->p = q;
        b->cap = cap;
    }
    return b->p;
}

/* Grows b to n bytes keeping its contents. */
static void *scratch_grow(scratch *b, size_t n)
{
    if (n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        void *q;
        while (cap < n) cap = cap > SIZE_MAX / 2 ? n : cap * 2;
        q = realloc(b->p, cap);
        if (!q) return NULL;
        b->p = q;
        b->cap = cap;
    }
    return b->p;
}

/* Per-call memo of short pieces (SPM segments, BPE words) -> ids. A piece's
 * ids depend only on its bytes, so this is exact; natural text repeats its
 * words, which makes encoding several times faster. Bounded in size; off on
 * the reference paths. */
#define CACHE_MAX_PIECE 64      /* bytes; at most 2 ids per byte */
#define CACHE_MAX_SLOTS (1u << 16)
#define CACHE_MAX_ARENA ((size_t)4 << 20)

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t text_off, ids_off;
    uint16_t text_len, n_ids;
} cache_slot;

typedef struct {
    cache_slot *slot;
    size_t mask, fill;
    scratch text, ids;
    size_t text_n, ids_n;
} piece_cache;

typedef struct {
    const skv_tokenizer *t;
    unsigned flags;
    int32_t *out;
    size_t cap, n;
    int capture;                        /* also record ids into seg */
    size_t seg_n;
    int32_t seg[2 * CACHE_MAX_PIECE + 8];
    piece_cache cache;
    scratch text, sym, heap, cps, cls, lens, tmp, word;
} enc;

static void enc_free(enc *e)
{
    scratch *all[] = {&e->text, &e->sym, &e->heap, &e->cps, &e->cls, &e->lens, &e->tmp, &e->word,
                      &e->cache.text, &e->cache.ids};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->p);
    free(e->cache.slot);
}

static inline void put(enc *e, int32_t id)
{
    if (e->capture) {
        if (e->seg_n < sizeof e->seg / sizeof e->seg[0]) e->seg[e->seg_n] = id;
        e->seg_n++;
    }
    if (e->n < e->cap) e->out[e->n] = id;
    e->n++;
}

static const cache_slot *cache_find(const piece_cache *c, uint64_t h, const uint8_t *s, size_t n)
{
    if (!c->slot) return NULL;
    for (size_t i = (size_t)h & c->mask; c->slot[i].hash; i = (i + 1) & c->mask) {
        const cache_slot *q = &c->slot[i];
        if (q->hash == h && q->text_len == n && memcmp((const uint8_t *)c->text.p + q->text_off, s, n) == 0)
            return q;
    }
    return NULL;
}

/* Grows the slot table to keep it at most half full; 0 if it may not grow. */
static int cache_room(piece_cache *c)
{
    size_t cap = c->slot ? c->mask + 1 : 0, ncap;
    cache_slot *ns;
    if (c->slot && 2 * (c->fill + 1) <= cap) return 1;
    ncap = cap ? 2 * cap : 256;
    if (ncap > CACHE_MAX_SLOTS) return 0;
    ns = calloc(ncap, sizeof *ns);
    if (!ns) return 0;
    for (size_t i = 0; i < cap; i++) {
        size_t j;
        if (!c->slot[i].hash) continue;
        for (j = (size_t)c->slot[i].hash & (ncap - 1); ns[j].hash; j = (j + 1) & (ncap - 1)) {
        }
        ns[j] = c->slot[i];
    }
    free(c->slot);
    c->slot = ns;
    c->mask = ncap - 1;
    return 1;
}

static void cache_insert(piece_cache *c, uint64_t h, const uint8_t *s, size_t n, const int32_t *ids, size_t k)
{
    uint8_t *tx;
    int32_t *iv;
    size_t j;
    if (c->text_n + n > CACHE_MAX_ARENA || !cache_room(c)) return;
    if (!(tx = scratch_grow(&c->text, c->text_n + n)) || !(iv = scratch_grow(&c->ids, (c->ids_n + k + 1) * sizeof *iv)))
        return;
    memcpy(tx + c->text_n, s, n);
    memcpy(iv + c->ids_n, ids, k * sizeof *ids);
    for (j = (size_t)h & c->mask; c->slot[j].hash; j = (j + 1) & c->mask) {
    }
    c->slot[j].hash = h;
    c->slot[j].text_off = (uint32_t)c->text_n;
    c->slot[j].text_len = (uint16_t)n;
    c->slot[j].ids_off = (uint32_t)c->ids_n;
    c->slot[j].n_ids = (uint16_t)k;
    c->text_n += n;
    c->ids_n += k;
    c->fill++;
}

typedef int (*piece_fn)(enc *e, const uint8_t *s, size_t n);

/* Runs fn on the piece s[0..n), through the memo when allowed. */
static int cached(enc *e, const uint8_t *s, size_t n, piece_fn fn)
{
    uint64_t h;
    const cache_slot *q;
    int rc;
    if (n > CACHE_MAX_PIECE || (e->flags & (SKV_TOKENIZER_NO_SEGMENT | SKV_TOKENIZER_NAIVE))) return fn(e, s, n);
    h = hash_bytes(s, n) | 1;
    if ((q = cache_find(&e->cache, h, s, n)) != NULL) {
        const int32_t *ids = (const int32_t *)e->cache.ids.p + q->ids_off;
        for (size_t i = 0; i < q->n_ids; i++) put(e, ids[i]);
        return SKV_OK;
    }
    e->capture = 1;
    e->seg_n = 0;
    rc = fn(e, s, n);
    e->capture = 0;
    if (rc == SKV_OK && e->seg_n <= sizeof e->seg / sizeof e->seg[0])
        cache_insert(&e->cache, h, s, n, e->seg, e->seg_n);
    return rc;
}

/* A symbol: a run of text being merged. Symbols form a doubly linked list
 * (prev/next indices, -1 at the ends); a symbol absorbed by its left
 * neighbour keeps len 0. */
typedef struct {
    int32_t prev, next;
    int32_t id; /* vocabulary id of the text, -1 if none */
    uint32_t len;
    size_t start;
} sym;

/* A candidate merge of symbols left and right. */
typedef struct {
    float score;    /* SPM: vocab score of the merged token (higher first) */
    uint32_t rank;  /* BPE: merge rank (lower first) */
    int32_t left, right;
    int32_t id;     /* SPM: merged token; BPE: id of the left symbol when pushed */
    int32_t rid;    /* BPE: id of the right symbol when pushed */
    uint32_t size;  /* SPM: merged length */
} bigram;

/* Heap order: does a pop before b? Ties go to the leftmost pair. */
static inline int before(int spm, const bigram *a, const bigram *b)
{
    if (spm) {
        if (a->score != b->score) return a->score > b->score;
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;
    }
    return a->left < b->left;
}

typedef struct {
    bigram *v;
    size_t n, cap;
    scratch *mem;
    int spm;
} heap;

static int heap_push(heap *h, const bigram *b)
{
    size_t i;
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *v = scratch_grow(h->mem, cap * sizeof *v);
        if (!v) return SKV_ERR_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(h->spm, b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = *b;
    return SKV_OK;
}

static bigram heap_pop(heap *h)
{
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(h->spm, &h->v[c + 1], &h->v[c])) c++;
        if (!before(h->spm, &h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* Absorbs symbol r into its left neighbour l. */
static void sym_merge(sym *s, int32_t l, int32_t r, int32_t id)
{
    s[l].len += s[r].len;
    s[l].id = id;
    s[r].len = 0;
    s[l].next = s[r].next;
    if (s[r].next >= 0) s[s[r].next].prev = l;
}

/* ------------------------------------------------------------------------ */
/* SPM                                                                      */

/* Candidate merge of two SPM symbols over text x (NULL if the concatenation
 * is not a token). */
static int spm_candidate(const skv_tokenizer *t, const uint8_t *x, const sym *s, int32_t l, int32_t r,
                         bigram *b)
{
    size_t len;
    int32_t id;
    if (l < 0 || r < 0) return 0;
    len = (size_t)s[l].len + s[r].len;
    id = tok_find(t, x + s[l].start, len);
    if (id < 0) return 0;
    b->score = t->score[id];
    b->rank = 0;
    b->left = l;
    b->right = r;
    b->id = id;
    b->rid = -1;
    b->size = (uint32_t)len;
    return 1;
}

static int spm_try_push(enc *e, heap *h, const uint8_t *x, const sym *s, int32_t l, int32_t r)
{
    bigram b;
    return spm_candidate(e->t, x, s, l, r, &b) ? heap_push(h, &b) : SKV_OK;
}

static int spm_merge_heap(enc *e, const uint8_t *x, sym *s, int32_t n)
{
    heap h = {NULL, 0, 0, &e->heap, 1};
    int rc = SKV_OK;
    for (int32_t i = 1; i < n && rc == SKV_OK; i++) rc = spm_try_push(e, &h, x, s, i - 1, i);
    while (rc == SKV_OK && h.n) {
        bigram b = heap_pop(&h);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        sym_merge(s, b.left, b.right, b.id);
        rc = spm_try_push(e, &h, x, s, l->prev, b.left);
        if (rc == SKV_OK) rc = spm_try_push(e, &h, x, s, b.left, l->next);
    }
    return rc;
}

/* Reference: rescan all adjacent pairs for the best one, merge, repeat. */
static int spm_merge_naive(enc *e, const uint8_t *x, sym *s, int32_t n)
{
    for (;;) {
        bigram best, b;
        memset(&best, 0, sizeof best);
        int found = 0;
        for (int32_t i = 0; i >= 0 && i < n; i = s[i].next)
            if (spm_candidate(e->t, x, s, i, s[i].next, &b) && (!found || before(1, &b, &best))) {
                best = b;
                found = 1;
            }
        if (!found) return SKV_OK;
        sym_merge(s, best.left, best.right, best.id);
    }
}

/* Merges and emits one segment x[0..len) (whole characters). */
static int spm_segment(enc *e, const uint8_t *x, size_t len)
{
    const skv_tokenizer *t = e->t;
    int32_t n = 0;
    size_t pos = 0;
    sym *s = scratch_get(&e->sym, (len + 1) * sizeof *s);
    int rc;
    if (!s) return SKV_ERR_NOMEM;
    while (pos < len) {
        size_t cl = skv_utf8_seq_len(x[pos]);
        if (cl > len - pos) cl = len - pos;
        s[n].prev = n - 1;
        s[n].next = pos + cl < len ? n + 1 : -1;
        s[n].start = pos;
        s[n].len = (uint32_t)cl;
        s[n].id = -1; /* looked up at the end */
        n++;
        pos += cl;
    }
    rc = (e->flags & SKV_TOKENIZER_NAIVE) ? spm_merge_naive(e, x, s, n) : spm_merge_heap(e, x, s, n);
    if (rc) return rc;
    for (int32_t i = 0; i >= 0 && i < n; i = s[i].next) {
        int32_t id = s[i].id >= 0 ? s[i].id : tok_find(t, x + s[i].start, s[i].len);
        if (id >= 0) {
            put(e, id);
            continue;
        }
        for (uint32_t k = 0; k < s[i].len; k++) { /* byte fallback */
            int32_t b = t->byte_tok[x[s[i].start + k]];
            if (b >= 0) put(e, b);
            else if (t->unk >= 0) put(e, t->unk); /* llama.cpp throws here */
        }
    }
    return SKV_OK;
}

static int spm_may_cut(const skv_tokenizer *t, const uint8_t *c, size_t n)
{
    uint32_t key = pack_char(c, n);
    return bsearch(&key, t->nocut, t->n_nocut, sizeof key, cmp_u32) == NULL;
}

static int spm_fragment(enc *e, const uint8_t *text, size_t len, int prefix)
{
    size_t n = 0, pos = 0, seg = 0, prev = 0, prev_len = 0;
    uint8_t *x = scratch_get(&e->text, 3 * len + 3);
    int rc;
    if (!x) return SKV_ERR_NOMEM;
    if (prefix) {
        memcpy(x, SEP, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(x + n, SEP, 3);
            n += 3;
        } else {
            x[n++] = text[i];
        }
    }
    while (pos < n) {
        size_t cl = skv_utf8_seq_len(x[pos]);
        if (cl > n - pos) cl = n - pos;
        if (pos > seg && cl == 3 && memcmp(x + pos, SEP, 3) == 0 &&
            !(e->flags & SKV_TOKENIZER_NO_SEGMENT) && spm_may_cut(e->t, x + prev, prev_len)) {
            if ((rc = cached(e, x + seg, pos - seg, spm_segment))) return rc;
            seg = pos;
        }
        prev = pos;
        prev_len = cl;
        pos += cl;
    }
    return n > seg ? cached(e, x + seg, n - seg, spm_segment) : SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* GPT2 byte-level BPE                                                      */

static int bpe_candidate(const skv_tokenizer *t, const sym *s, int32_t l, int32_t r, bigram *b)
{
    const uint32_t *rank;
    if (l < 0 || r < 0 || s[l].id < 0 || s[r].id < 0) return 0;
    rank = u64map_get(&t->merges, ((uint64_t)(uint32_t)s[l].id << 32) | (uint32_t)s[r].id);
    if (!rank) return 0;
    b->score = 0;
    b->rank = *rank;
    b->left = l;
    b->right = r;
    b->id = s[l].id;
    b->rid = s[r].id;
    b->size = 0;
    return 1;
}

static int bpe_try_push(enc *e, heap *h, const sym *s, int32_t l, int32_t r)
{
    bigram b;
    return bpe_candidate(e->t, s, l, r, &b) ? heap_push(h, &b) : SKV_OK;
}

static int bpe_merge_heap(enc *e, sym *s, int32_t n)
{
    heap h = {NULL, 0, 0, &e->heap, 0};
    int rc = SKV_OK;
    for (int32_t i = 1; i < n && rc == SKV_OK; i++) rc = bpe_try_push(e, &h, s, i - 1, i);
    while (rc == SKV_OK && h.n) {
        bigram b = heap_pop(&h);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->len == 0 || r->len == 0 || l->next != b.right || l->id != b.id || r->id != b.rid) continue;
        sym_merge(s, b.left, b.right, e->t->merge_res[b.rank]);
        rc = bpe_try_push(e, &h, s, l->prev, b.left);
        if (rc == SKV_OK) rc = bpe_try_push(e, &h, s, b.left, l->next);
    }
    return rc;
}

static int bpe_merge_naive(enc *e, sym *s, int32_t n)
{
    for (;;) {
        bigram best, b;
        memset(&best, 0, sizeof best);
        int found = 0;
        for (int32_t i = 0; i >= 0 && i < n; i = s[i].next)
            if (bpe_candidate(e->t, s, i, s[i].next, &b) && (!found || before(0, &b, &best))) {
                best = b;
                found = 1;
            }
        if (!found) return SKV_OK;
        sym_merge(s, best.left, best.right, e->t->merge_res[best.rank]);
    }
}

/* Emits a symbol that is not a token: every byte of its byte-level text
 * that is itself a one-byte token (llama.cpp's fallback; usually nothing). */
static void bpe_fallback(enc *e, const uint8_t *w, const sym *s)
{
    for (uint32_t k = 0; k < s->len; k++) {
        uint8_t u[4];
        size_t m = skv_utf8_encode(skv_unicode_byte_to_cp(w[s->start + k]), u);
        for (size_t j = 0; j < m; j++)
            if (e->t->raw1_tok[u[j]] >= 0) put(e, e->t->raw1_tok[u[j]]);
    }
}

/* Tokenizes one pre-token word given as UTF-8 bytes w[0..m). */
static int bpe_word(enc *e, const uint8_t *w, size_t m)
{
    const skv_tokenizer *t = e->t;
    sym *s;
    int rc;
    if (m > INT32_MAX) return SKV_ERR_RANGE;
    if (t->ignore_merges && m <= t->max_token_len) {
        uint8_t *x = scratch_get(&e->text, 2 * m);
        size_t n = 0;
        int32_t id;
        if (!x) return SKV_ERR_NOMEM;
        for (size_t i = 0; i < m; i++) n += skv_utf8_encode(skv_unicode_byte_to_cp(w[i]), x + n);
        if ((id = tok_find(t, x, n)) >= 0) {
            put(e, id);
            return SKV_OK;
        }
    }
    s = scratch_get(&e->sym, m * sizeof *s);
    if (!s) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < m; i++) {
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
        s[i].start = i;
        s[i].len = 1;
        s[i].id = t->byte_tok[w[i]];
    }
    if (m > 1) {
        rc = (e->flags & SKV_TOKENIZER_NAIVE) ? bpe_merge_naive(e, s, (int32_t)m) : bpe_merge_heap(e, s, (int32_t)m);
        if (rc) return rc;
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) {
        if (s[i].id >= 0) put(e, s[i].id);
        else bpe_fallback(e, w, &s[i]);
    }
    return SKV_OK;
}

/* Pre-tokenizes and encodes text[0..len), a piece that starts and ends on
 * code point boundaries. */
static int bpe_block(enc *e, const uint8_t *text, size_t len)
{
    uint32_t *cp = scratch_get(&e->cps, len * sizeof *cp);
    uint8_t *cls = scratch_get(&e->cls, len);
    size_t *lens = scratch_get(&e->lens, len * sizeof *lens);
    size_t *tmp = scratch_get(&e->tmp, len * sizeof *tmp);
    size_t n = 0, pos = 0, k, at = 0;
    if (!cp || !cls || !lens || !tmp) return SKV_ERR_NOMEM;
    while (pos < len) {
        size_t adv;
        cp[n] = skv_utf8_decode(text + pos, len - pos, &adv);
        cls[n] = skv_unicode_class(cp[n]);
        n++;
        pos += adv;
    }
    k = skv_unicode_pretokenize(e->t->pretok, cp, cls, n, lens, tmp);
    for (size_t i = 0; i < k; i++) {
        size_t m = 0;
        uint8_t *w = scratch_get(&e->word, 4 * lens[i]);
        int rc;
        if (!w) return SKV_ERR_NOMEM;
        for (size_t j = 0; j < lens[i]; j++) m += skv_utf8_encode(cp[at + j], w + m);
        at += lens[i];
        if ((rc = cached(e, w, m, bpe_word))) return rc;
    }
    return SKV_OK;
}

static int is_alpha(uint8_t c) { return (uint8_t)((c | 32) - 'a') < 26; }

#define BPE_BLOCK_MIN 4096

static int bpe_fragment(enc *e, const uint8_t *text, size_t len)
{
    size_t a = 0;
    while (a < len) {
        size_t b = len;
        int rc;
        if (!(e->flags & SKV_TOKENIZER_NO_SEGMENT))
            for (size_t p = a + BPE_BLOCK_MIN; p + 1 < len; p++)
                if (text[p] == ' ' && is_alpha(text[p - 1]) && is_alpha(text[p + 1])) {
                    b = p;
                    break;
                }
        if ((rc = bpe_block(e, text + a, b - a))) return rc;
        a = b;
    }
    return SKV_OK;
}

/* ------------------------------------------------------------------------ */
/* partition by user-defined tokens                                          */

typedef struct {
    size_t a, n;  /* raw text text[a .. a+n) when tok < 0 */
    int32_t tok;
} frag;

static const uint8_t *find_bytes(const uint8_t *h, size_t hn, const uint8_t *needle, size_t nn)
{
    if (nn == 0 || nn > hn) return NULL;
    for (const uint8_t *p = h, *end = h + hn - nn + 1; p < end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, needle, nn) == 0) return p;
    }
    return NULL;
}

/* llama.cpp's tokenizer_st_partition with parse_special = false: for each
 * user-defined token, longest first, cut every occurrence (left to right,
 * non-overlapping) out of the remaining raw fragments. */
static int partition(const skv_tokenizer *t, const uint8_t *text, size_t len, frag **out, size_t *n_out)
{
    uint8_t *seen = calloc(t->n_ud, 1);
    frag *f = NULL, *g = NULL;
    size_t n = 1, cap = 16;
    int rc = SKV_ERR_NOMEM;
    if (!seen) return rc;
    for (size_t i = 0; i < len; i++) { /* which user-defined tokens occur at all */
        uint32_t node;
        if (t->trie_root[text[i]] < 0) continue;
        node = (uint32_t)t->trie_root[text[i]];
        if (t->trie_ud[node] >= 0) seen[t->trie_ud[node]] = 1;
        for (size_t j = i + 1; j < len && j - i < t->max_ud_len; j++) {
            const uint32_t *c = u64map_get(&t->trie, ((uint64_t)node << 8) | text[j]);
            if (!c) break;
            node = *c;
            if (t->trie_ud[node] >= 0) seen[t->trie_ud[node]] = 1;
        }
    }
    f = malloc(cap * sizeof *f);
    if (!f) goto done;
    f[0].a = 0;
    f[0].n = len;
    f[0].tok = -1;
    for (size_t k = 0; k < t->n_ud; k++) {
        size_t tl, m = 0, gcap = n + 16;
        const uint8_t *tx;
        if (!seen[k]) continue;
        tx = tok_text(t, t->ud[k], &tl);
        g = malloc(gcap * sizeof *g);
        if (!g) goto done;
        for (size_t i = 0; i < n; i++) {
            size_t a = f[i].a, end = f[i].a + f[i].n;
            const uint8_t *hit;
            if (f[i].tok >= 0) {
                hit = NULL;
            } else {
                while ((hit = find_bytes(text + a, end - a, tx, tl)) != NULL) {
                    size_t at = (size_t)(hit - text);
                    if (m + 2 >= gcap) {
                        frag *h2 = realloc(g, 2 * gcap * sizeof *g);
                        if (!h2) goto done;
                        g = h2;
                        gcap *= 2;
                    }
                    if (at > a) g[m++] = (frag){a, at - a, -1};
                    g[m++] = (frag){at, tl, t->ud[k]};
                    a = at + tl;
                }
            }
            if (m + 1 >= gcap) {
                frag *h2 = realloc(g, 2 * gcap * sizeof *g);
                if (!h2) goto done;
                g = h2;
                gcap *= 2;
            }
            if (f[i].tok >= 0) g[m++] = f[i];
            else if (end > a) g[m++] = (frag){a, end - a, -1};
        }
        free(f);
        f = g;
        g = NULL;
        n = m;
    }
    *out = f;
    *n_out = n;
    f = NULL;
    rc = SKV_OK;
done:
    free(seen);
    free(f);
    free(g);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* public encode                                                            */

int skv_tokenizer_encode_ex(const skv_tokenizer *t, const char *text, size_t len, unsigned flags,
                            int32_t *out, size_t cap, size_t *n_out)
{
    enc e;
    frag one, *frags = &one;
    size_t n_frags = 0;
    int rc = SKV_OK, prev_special = 1;
    const uint8_t *x = (const uint8_t *)text;
    if (!t || !n_out || (len && !text) || (cap && !out)) return SKV_ERR_INVALID_ARG;
    *n_out = 0;
    if (len >= INT32_MAX) return SKV_ERR_RANGE;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.flags = flags;
    e.out = out;
    e.cap = cap;
    if (len && t->n_ud) {
        if ((rc = partition(t, x, len, &frags, &n_frags))) return rc;
    } else if (len) {
        one.a = 0;
        one.n = len;
        one.tok = -1;
        n_frags = 1;
    }
    if ((flags & SKV_TOKENIZER_ADD_SPECIAL) && t->add_bos) put(&e, t->bos);
    for (size_t i = 0; i < n_frags && rc == SKV_OK; i++) {
        if (frags[i].tok >= 0) {
            put(&e, frags[i].tok);
            prev_special = 1;
        } else if (t->kind == SKV_TOKENIZER_SPM) {
            rc = spm_fragment(&e, x + frags[i].a, frags[i].n, t->add_space_prefix && prev_special);
            prev_special = 0;
        } else {
            rc = bpe_fragment(&e, x + frags[i].a, frags[i].n);
        }
    }
    if ((flags & SKV_TOKENIZER_ADD_SPECIAL) && t->add_eos) put(&e, t->eos);
    if (frags != &one) free(frags);
    enc_free(&e);
    if (rc) return rc;
    *n_out = e.n;
    return e.n > cap ? SKV_ERR_RANGE : SKV_OK;
}

int skv_tokenizer_encode(const skv_tokenizer *t, const char *text, size_t len, int add_special,
                         int32_t *out, size_t cap, size_t *n_out)
{
    return skv_tokenizer_encode_ex(t, text, len, add_special ? SKV_TOKENIZER_ADD_SPECIAL : 0, out, cap, n_out);
}

/* ------------------------------------------------------------------------ */
/* pieces                                                                   */

typedef struct {
    char *buf; /* NULL: count only */
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

static void render(const skv_tokenizer *t, int32_t id, piece_w *w)
{
    size_t n;
    const uint8_t *s = tok_text(t, id, &n);
    uint8_t a = t->attr[id];
    if (a & (A_UNKNOWN | A_CONTROL)) return;
    if (a & A_USER) {
        pw_bytes(w, s, n);
    } else if (a & A_NORMAL) {
        if (t->kind == SKV_TOKENIZER_SPM) {
            for (size_t i = 0; i < n; i++) {
                if (i + 3 <= n && memcmp(s + i, SEP, 3) == 0) {
                    pw_bytes(w, " ", 1);
                    i += 2;
                } else {
                    pw_bytes(w, s + i, 1);
                }
            }
        } else {
            for (size_t i = 0, adv; i < n; i += adv) {
                uint32_t cp = skv_utf8_decode(s + i, n - i, &adv);
                int b = skv_unicode_cp_to_byte(cp);
                if (b >= 0) {
                    uint8_t c = (uint8_t)b;
                    pw_bytes(w, &c, 1);
                } else { /* llama_decode_text's marker for a non-byte-level character */
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
            }
        }
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
