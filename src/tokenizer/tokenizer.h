/* tokenizer - text <-> token ids, bit-compatible with llama.cpp (src/llama-vocab.cpp).
 *
 * Two vocabulary kinds:
 *   SPM  (GGUF tokenizer.ggml.model "llama"): SentencePiece-style BPE over
 *        UTF-8 characters, merges chosen by vocab score, spaces escaped as
 *        U+2581, optional leading space, <0xXX> byte fallback.
 *   GPT2 (GGUF "gpt2"): byte-level BPE with ranked merges after a
 *        regex-style pre-tokenizer chosen by tokenizer.ggml.pre.
 * Text is taken as plain text (llama.cpp's parse_special = false): control
 * tokens such as "<s>" or "<|endoftext|>" written in the text are tokenized
 * like any other characters. User-defined tokens (type 4) are matched in the
 * text first, as llama.cpp does. See docs/tokenizer.md.
 *
 * A tokenizer is immutable after creation; encode/piece may run concurrently
 * from several threads. Encoding allocates its scratch per call; memory is
 * linear in the input, and far smaller for text with spaces.
 */
#ifndef SKV_TOKENIZER_H
#define SKV_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "core/util.h"

typedef struct skv_tokenizer skv_tokenizer;

typedef struct {
    const char *ptr; /* not NUL-terminated; may be NULL when len == 0 */
    size_t len;
} skv_strref;

enum { SKV_TOKENIZER_SPM = 1, SKV_TOKENIZER_GPT2 = 2 };

/* llama.cpp token types (tokenizer.ggml.token_type). */
enum {
    SKV_TOKEN_TYPE_NORMAL = 1,
    SKV_TOKEN_TYPE_UNKNOWN = 2,
    SKV_TOKEN_TYPE_CONTROL = 3,
    SKV_TOKEN_TYPE_USER_DEFINED = 4,
    SKV_TOKEN_TYPE_UNUSED = 5,
    SKV_TOKEN_TYPE_BYTE = 6
};

/* Special-id values in skv_tokenizer_desc besides 0..n_vocab-1. */
#define SKV_TOKEN_NONE (-1)    /* no such token */
#define SKV_TOKEN_DEFAULT (-2) /* key absent from the file: use llama.cpp's default for the
                                  kind (SPM: bos 1, eos 2, unk 0; GPT2: bos 11, eos 11;
                                  pad: none; a default >= n_vocab means none) */

typedef struct {
    int kind;                 /* SKV_TOKENIZER_SPM ("llama") or SKV_TOKENIZER_GPT2 ("gpt2") */
    const char *pre;          /* tokenizer.ggml.pre, NUL-terminated, or NULL ("default") */
    size_t n_vocab;
    const skv_strref *tokens; /* n_vocab */
    const float *scores;      /* n_vocab, or NULL (all 0) */
    const int32_t *types;     /* n_vocab, or NULL (all normal); SKV_TOKEN_TYPE_* */
    size_t n_merges;
    const skv_strref *merges; /* n_merges "a b" strings, GPT2 only (ignored for SPM) */
    int32_t bos_id, eos_id, unk_id, pad_id; /* id, SKV_TOKEN_NONE or SKV_TOKEN_DEFAULT */
    int add_bos, add_eos, add_space_prefix; /* 0/1, or -1 = not given in the file:
                                               llama.cpp's default for kind/pre */
} skv_tokenizer_desc;

/* Builds a tokenizer; everything in d is copied. Rejects inconsistent
 * descriptions (SKV_ERR_INVALID_ARG / SKV_ERR_FORMAT / SKV_ERR_UNSUPPORTED)
 * with a message in err (when err is not NULL). */
int skv_tokenizer_create(const skv_tokenizer_desc *d, skv_tokenizer **out, skv_err *err);

/* llama2.c tokenizer file (tok512.bin style): int32 max_token_length, then per
 * token: f32 score, int32 len, bytes. vocab_size comes from the model
 * checkpoint header. Produces the same vocabulary as llama.cpp's
 * convert-llama2c-to-ggml: ids 0/1/2 become <unk>/<s>/</s>, <0xXX> pieces
 * byte tokens, ' ' -> U+2581. Trailing bytes after vocab_size tokens are
 * ignored. */
int skv_tokenizer_load_llama2c(const void *data, size_t size, size_t vocab_size,
                               skv_tokenizer **out, skv_err *err);

void skv_tokenizer_free(skv_tokenizer *t); /* accepts NULL */

/* Encodes text (any bytes, at most INT32_MAX - 1 of them). add_special: add
 * BOS/EOS as the tokenizer's flags say (llama.cpp's add_special). Writes up
 * to cap ids to out (may be NULL when cap == 0); *n_out = number of ids the
 * text needs. Returns SKV_OK, SKV_ERR_RANGE if cap is too small (out then
 * holds the first cap ids), or another negative status. */
int skv_tokenizer_encode(const skv_tokenizer *t, const char *text, size_t len, int add_special,
                         int32_t *out, size_t cap, size_t *n_out);

/* Flags of skv_tokenizer_encode_ex. The last two select slower reference
 * paths that must give identical ids (tests compare them). */
enum {
    SKV_TOKENIZER_ADD_SPECIAL = 1,
    SKV_TOKENIZER_NO_SEGMENT = 2, /* merge each text fragment as one piece */
    SKV_TOKENIZER_NAIVE = 4       /* O(n^2) rescanning merge instead of the heap */
};
int skv_tokenizer_encode_ex(const skv_tokenizer *t, const char *text, size_t len, unsigned flags,
                            int32_t *out, size_t cap, size_t *n_out);

/* Bytes of one token as llama.cpp's token_to_piece(special = false) renders
 * them: SPM U+2581 -> ' ', <0xXX> -> byte; GPT2 byte-level characters ->
 * bytes; user-defined tokens -> their text; control, unknown and unused
 * tokens -> empty. *len = the piece's length. Returns that length (>= 0),
 * SKV_ERR_RANGE if it exceeds cap (buf untouched), or SKV_ERR_INVALID_ARG. */
int skv_tokenizer_piece(const skv_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *len);

/* 128-bit fingerprint of what the tokenizer does (kind, pre-tokenizer, every token's
 * text, score and attributes, the merges by rank, the special ids and flags): equal
 * fingerprints encode and render alike. Cost: one pass over the vocabulary and merges.
 * SKV_ERR_NOMEM / SKV_ERR_INVALID_ARG. */
int skv_tokenizer_fingerprint(const skv_tokenizer *t, uint8_t out[16]);

/* Text of n token ids (tools/ and skv_model_detokenize): the pieces concatenated, every BOS
 * dropped, and with SPM one leading space dropped from the first piece after a BOS (the
 * encoder's dummy prefix); after_bos: the ids continue right after a BOS. Writes the text
 * and a NUL when it fits in cap; *len = its length (without the NUL). SKV_OK,
 * SKV_ERR_RANGE (*len + 1 > cap), SKV_ERR_INVALID_ARG (an id outside the vocabulary),
 * SKV_ERR_NOMEM. */
int skv_tokenizer_detokenize(const skv_tokenizer *t, const int32_t *tokens, size_t n, int after_bos, char *text,
                             size_t cap, size_t *len);

size_t skv_tokenizer_n_vocab(const skv_tokenizer *t);
int32_t skv_tokenizer_bos(const skv_tokenizer *t); /* -1 if none */
int32_t skv_tokenizer_eos(const skv_tokenizer *t);
int32_t skv_tokenizer_unk(const skv_tokenizer *t);
int32_t skv_tokenizer_pad(const skv_tokenizer *t);
int skv_tokenizer_add_bos(const skv_tokenizer *t);
int skv_tokenizer_add_eos(const skv_tokenizer *t);
int skv_tokenizer_kind(const skv_tokenizer *t);
/* The GPT2 pre-tokenizer in use, by llama.cpp's name for it ("llama3",
 * "deepseek-llm", ...; tokenizer.ggml.pre aliases map to one of these); "none"
 * for SPM. */
const char *skv_tokenizer_pre_name(const skv_tokenizer *t);

/* Raw vocabulary text of a token (NULL for a bad id); *len its length. */
const char *skv_tokenizer_token_text(const skv_tokenizer *t, int32_t id, size_t *len);
/* Effective token type (SKV_TOKEN_TYPE_*, 0 = undefined) after llama.cpp's
 * text-based fix-ups (e.g. "<|endoftext|>" is always control); -1 for a bad id. */
int skv_tokenizer_token_type(const skv_tokenizer *t, int32_t id);
/* The vocabulary score of a token (SPM: its unigram log-probability; 0 when the
 * vocabulary has none; -inf for a bad id). */
float skv_tokenizer_token_score(const skv_tokenizer *t, int32_t id);

#endif
