/* tok_int.h - what the tokenizer's files share (internal; not installed).
 *
 * The tokenizer is one object, struct skv_tokenizer, built once by
 * skv_tokenizer_create (tokenizer.c) and read-only afterwards. Its files:
 *
 *   tok_common.c     hashing, the uint64 map, vocabulary lookup, scratch buffers
 *   tokenizer.c      create/free: token texts, attributes, the text -> id hash,
 *                    pre-tokenizer names; accessors
 *   tok_special.c    special ids, flags, llama.cpp's text-based type fix-ups
 *   tok_llama2c.c    llama2.c tokenizer files -> a desc -> create
 *   tok_partition.c  user-defined tokens: the byte trie and the cut of raw text
 *   tok_encode.c     encode: fragments, the per-call memo, the merge heap
 *   tok_spm.c        SentencePiece merging (and its create-time tables)
 *   tok_bpe.c        GPT-2 byte-level BPE (and its merge table)
 *   tok_render.c     token -> bytes (token_to_piece)
 *
 * Internal functions are prefixed tok_; the library is built with hidden
 * visibility, so none of them is exported.
 */
#ifndef SKV_TOK_INT_H
#define SKV_TOK_INT_H

#include "tokenizer/tokenizer.h"

#include "core/util.h"
#include "seqkv.h"
#include "tokenizer/unicode.h"

#include <stddef.h>
#include <stdint.h>

/* Token attributes (llama_token_attr subset), a bit set per token. */
enum {
    A_UNKNOWN = 1,
    A_UNUSED = 2,
    A_NORMAL = 4,
    A_CONTROL = 8,
    A_USER = 16,
    A_BYTE = 32
};

/* U+2581, SentencePiece's escaped space (3 bytes). */
#define TOK_SEP "\xE2\x96\x81"

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
/* tok_common.c                                                             */

/* Failures are reported with core's skv_fail (core/util.h), as in every other layer. */

/* A quick non-cryptographic hash (only ever compared within one process). */
uint64_t tok_hash_bytes(const uint8_t *s, size_t n);
/* Smallest power of two >= 2n (at least 16), or 0 on overflow. */
size_t tok_table_cap(size_t n);

int tok_map_init(u64map *m, size_t n); /* room for n keys */
void tok_map_free(u64map *m);
const uint32_t *tok_map_get(const u64map *m, uint64_t k);
/* Inserts k -> v unless k is present (first wins). */
void tok_map_put_first(u64map *m, uint64_t k, uint32_t v);

static inline const uint8_t *tok_text(const skv_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->off[id + 1] - t->off[id];
    return (const uint8_t *)t->blob + t->off[id];
}

/* Vocabulary id of the exact text s[0..n), or -1. */
int32_t tok_find(const skv_tokenizer *t, const uint8_t *s, size_t n);
int32_t tok_find_str(const skv_tokenizer *t, const char *s);

/* A growable buffer owned by one encode call. */
typedef struct {
    void *p;
    size_t cap;
} scratch;

/* Doubles an array of elem-byte elements (from 16) and updates *cap;
 * NULL on failure, v then untouched. */
void *tok_grow_array(void *v, size_t *cap, size_t elem);

void *tok_scratch_get(scratch *b, size_t n);  /* room for n bytes, contents lost */
void *tok_scratch_grow(scratch *b, size_t n); /* room for n bytes, contents kept */

/* ------------------------------------------------------------------------ */
/* create-time steps (tok_special.c, tok_partition.c, tok_spm.c, tok_bpe.c) */

/* tokenizer.ggml.pre names: the pre-tokenizer and the flags llama.cpp sets. */
typedef struct {
    const char *names; /* space-separated */
    skv_pretok kind;
    int ignore_merges;
    int add_bos;
} pre_entry;

void tok_fixup_attrs(skv_tokenizer *t);
int tok_setup_specials(skv_tokenizer *t, const skv_tokenizer_desc *d, const pre_entry *pre,
                       skv_err *err);
int tok_setup_user_defined(skv_tokenizer *t, skv_err *err);
int tok_setup_spm(skv_tokenizer *t, skv_err *err);
int tok_setup_gpt2(skv_tokenizer *t, const skv_tokenizer_desc *d, skv_err *err);

/* ------------------------------------------------------------------------ */
/* encoding (tok_encode.c)                                                  */

/* Per-call memo of short pieces (SPM segments, BPE words) -> ids. A piece's
 * ids depend only on its bytes, so this is exact; natural text repeats its
 * words, which makes encoding several times faster. Bounded in size; off on
 * the reference paths. */
#define CACHE_MAX_PIECE 64 /* bytes; at most 2 ids per byte */

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

/* One encode call: the output and all scratch. */
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

/* Appends one id (counting past cap; the memo records it when capturing). */
static inline void tok_put(enc *e, int32_t id)
{
    if (e->capture) {
        if (e->seg_n < sizeof e->seg / sizeof e->seg[0]) e->seg[e->seg_n] = id;
        e->seg_n++;
    }
    if (e->n < e->cap) e->out[e->n] = id;
    e->n++;
}

typedef int (*piece_fn)(enc *e, const uint8_t *s, size_t n);

/* Runs fn on the piece s[0..n), through the memo when allowed. */
int tok_cached(enc *e, const uint8_t *s, size_t n, piece_fn fn);

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
static inline int tok_before(int spm, const bigram *a, const bigram *b)
{
    if (spm) {
        if (a->score != b->score) return a->score > b->score;
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;
    }
    return a->left < b->left;
}

/* Binary heap of bigrams in tok_before order, storage in mem. */
typedef struct {
    bigram *v;
    size_t n, cap;
    scratch *mem;
    int spm;
} heap;

int tok_heap_push(heap *h, const bigram *b);
bigram tok_heap_pop(heap *h); /* h->n > 0 */

/* Absorbs symbol r into its left neighbour l, which becomes token id. */
void tok_sym_merge(sym *s, int32_t l, int32_t r, int32_t id);

/* A piece of the input: raw text text[a .. a+n) when tok < 0, else one
 * user-defined token. */
typedef struct {
    size_t a, n;
    int32_t tok;
} frag;

/* Cuts text at user-defined tokens (tok_partition.c); *out is malloc'ed. */
int tok_partition(const skv_tokenizer *t, const uint8_t *text, size_t len, frag **out, size_t *n_out);

/* Encodes one raw fragment (tok_spm.c, tok_bpe.c). */
int tok_spm_fragment(enc *e, const uint8_t *text, size_t len, int prefix);
int tok_bpe_fragment(enc *e, const uint8_t *text, size_t len);

#endif
