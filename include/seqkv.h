/* seqkv - store transformer KV caches as sequences.
 *
 * The only public header.
 *
 * ERRORS: one convention everywhere.
 * - Every function that can fail returns an int status: SKV_OK (0) or a negative
 *   skv_status. skv_status_name() gives the enumerator's name ("SKV_ERR_FORMAT"),
 *   skv_status_str() a short text ("malformed input").
 * - The message (what failed and what to do) has one channel: skv_last_error(), the
 *   message of the calling thread's most recent failing call, whatever the call and
 *   whatever handle it worked on. Read it right after the call that failed (like errno, it
 *   is meaningful only then: a call that succeeds may leave it as it was). A call given a
 *   NULL handle may fail with SKV_ERR_INVALID_ARG alone and leave it unchanged.
 * - Compatibility: the same message is also kept where earlier versions kept it, and
 *   those functions stay:
 *     skv_ctx_last_error(ctx)         skv_ctx_* calls, skv_ctx_prefill, skv_ctx_decode,
 *                                     skv_ctx_decode_multi (on ctxs[0]), and the restores,
 *                                     which report on the context they fill:
 *                                     skv_session_restore_segment, and each job of
 *                                     skv_session_restore_batch (job.status + its ctx)
 *     skv_encoder_last_error(e)       skv_encoder_append / skv_encoder_finish
 *     skv_session_last_error(s)       skv_session_get_info, skv_session_segment_info,
 *                                     skv_session_segment_kv_info, skv_session_restore_kv
 *     skv_store_last_error(st)        every skv_store_* call on an open store
 *     skv_model_last_error(m)         skv_ctx_create (per model AND per thread)
 *     (char *err, size_t errcap)      the creations (skv_model_load, skv_encoder_create,
 *                                     skv_session_open, skv_store_open), skv_kvdump_read /
 *                                     skv_kvdump_write, skv_kv_quant_check, the engine-free KV blob
 *                                     calls skv_kv_encode / skv_kv_blob_inspect /
 *                                     skv_kv_decode: written there
 *                                     when err is non-NULL
 *   A failure sets the handle's message; a success leaves "" there (calls that only read
 *   a const context -- skv_ctx_kv_view/kv_digest/kv_read, the skv_*_get_stats getters --
 *   fail only on NULL or out-of-range arguments and leave the message as it was).
 * - A model is otherwise immutable and shared: the other calls on it (get_info,
 *   fingerprint, tokenize, token_piece, kv_position_bytes) keep no message of their own
 *   (skv_last_error() has theirs); each documents its few statuses.
 * - Threads: skv_last_error() is per thread. A context or an encoder is used by one
 *   thread at a time, so its message is that thread's. A session and a store may be
 *   shared by threads: their message is kept per handle AND per thread, so each thread
 *   reads the message of its own last call, whatever the others do.
 *
 * Other conventions:
 * - Handles are opaque, created by the _create, _open or _load functions and released by
 *   _free / _close (which accept NULL).
 * - The library never prints and never exits.
 * - Parameter structs (skv_ctx_params, skv_encoder_params, skv_restore_params,
 *   skv_store_params) gain fields at their end in later versions, zero meaning "the
 *   default": start from the *_default_params() function or a designated initializer
 *   ({.verify = 1}), never a positional one.
 */
#ifndef SEQKV_H
#define SEQKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SKV_API __attribute__((visibility("default")))
#else
#define SKV_API
#endif

#define SEQKV_VERSION_STRING "0.1.0"

typedef enum skv_status {
    SKV_OK = 0,
    SKV_ERR_INVALID_ARG = -1, /* caller passed something invalid */
    SKV_ERR_NOMEM = -2,       /* allocation failed */
    SKV_ERR_IO = -3,          /* open/read/write/mmap failed */
    SKV_ERR_FORMAT = -4,      /* input is malformed, truncated or corrupt */
    SKV_ERR_UNSUPPORTED = -5, /* well-formed but not supported (arch, type, version) */
    SKV_ERR_MISMATCH = -6,    /* wrong model, digest or checksum mismatch */
    SKV_ERR_RANGE = -7,       /* a limit was exceeded (context length, buffer size) */
    SKV_ERR_INTERNAL = -8     /* a bug: please report */
} skv_status;

/* "SKV_ERR_FORMAT" for SKV_ERR_FORMAT (the enumerator's name; "SKV_ERR_UNKNOWN" for any
 * other value) and a short text ("malformed input"). Both are static strings. */
SKV_API const char *skv_status_name(int status);
SKV_API const char *skv_status_str(int status);
/* The calling thread's last error message: the message of its most recent failing call
 * ("" when none has failed). The one error channel (see ERRORS above); valid until the
 * thread's next call into the library. */
SKV_API const char *skv_last_error(void);
SKV_API const char *skv_version(void);

/* ---- Logging ------------------------------------------------------------
 * The library never prints. What a caller may want to know that is not an error goes to
 * a log callback, if one is set (none by default: nothing is said):
 *   SKV_LOG_WARN  a result may not be what you expect: a context beyond the model's
 *                 trained length (skv_ctx_create), a GGUF key that is ignored
 *   SKV_LOG_INFO  a fallback taken: e.g. a store without a model-path record, whose model
 *                 is then known by name and fingerprint only (skv_store_model_info)
 * msg is one line (no newline, at most 1023 bytes), valid during the call only.
 * Process-wide. Thread safety: skv_set_log may be called at any time from any thread (the
 * pair fn, user is swapped atomically); each message goes to the pair set when it was
 * logged, so after skv_set_log returns no message that starts later reaches the old
 * callback (one already being delivered on another thread may still finish). fn runs on
 * the thread that called the library, possibly on several threads at once: it must be
 * thread-safe; it may call skv_set_log. fn NULL switches the log off. */
enum { SKV_LOG_WARN = 1, SKV_LOG_INFO = 2 };
typedef void (*skv_log_fn)(void *user, int level, const char *msg);
SKV_API void skv_set_log(skv_log_fn fn, void *user);

/* ---- Models ------------------------------------------------------------- */

/* An immutable loaded model (weights memory-mapped, tokenizer). Thread-safe to share
 * between contexts once loaded. */
typedef struct skv_model skv_model;

enum { SKV_TOKENIZER_KIND_SPM = 1, SKV_TOKENIZER_KIND_GPT2 = 2 };

typedef struct skv_model_info {
    char arch[32];           /* "llama" */
    char name[96];           /* general.name or file name */
    char format[16];         /* "gguf" or "llama2c" */
    int n_layer;
    int n_embd;              /* model width */
    int n_head;              /* query heads */
    int n_head_kv;           /* key/value heads (GQA when < n_head) */
    int head_dim;
    int n_ff;                /* FFN hidden size */
    int n_vocab;
    int n_ctx_train;         /* trained context length */
    int rope_dim;            /* rotated dimensions per head */
    float rope_base;
    float norm_eps;
    int tied_output;         /* output matrix shares token_embd */
    int weight_type;         /* dominant matrix type: SKV_DTYPE_* */
    int64_t n_params;
    uint64_t file_bytes;
    int tokenizer_kind;      /* SKV_TOKENIZER_KIND_* */
    int32_t bos_id, eos_id;  /* -1 if none */
    int add_bos;
    /* Weight bytes copied at load out of the file's mapping into the process's own memory
     * (huge pages where granted), 0 when every matrix is read from the mapping: a model
     * whose matrices read as stored total 256 MiB or more is copied (prefill passes ~20%
     * faster on a 1.1B F16 model, at the price of the copy at load); $SEQKV_RESIDENT=0
     * never copies, =1 always does (docs/determinism.md: the bits are the same). */
    uint64_t resident_bytes;
} skv_model_info;

/* Tensor element types (GGML numbering). */
enum { SKV_DTYPE_F32 = 0, SKV_DTYPE_F16 = 1, SKV_DTYPE_Q4_0 = 2, SKV_DTYPE_Q8_0 = 8 };
/* The name of a weight type (skv_model_info.weight_type: GGML's type ids) as GGML spells it
 * ("q8_0", "q4_k", "iq4_xs"), read from the type table (src/quant/types.c); "unknown" for
 * an id it does not know. Static strings. */
SKV_API const char *skv_weight_type_name(int type);

/* Loads a GGUF v2/v3 file, or a llama2.c checkpoint (.bin) whose tokenizer is found
 * at tokenizer_path (NULL: "tokenizer.bin" or "tok<vocab>.bin" beside the checkpoint).
 * On failure returns a status and writes a message to err (if non-NULL). */
SKV_API int skv_model_load(const char *path, const char *tokenizer_path, skv_model **out,
                           char *err, size_t errcap);

/* skv_model_load with options (zero fields: the defaults, as skv_model_load). */
typedef struct skv_model_params {
    const char *tokenizer_path; /* llama2.c checkpoints: as skv_model_load's */
    /* GGUF metadata overrides, llama.cpp's --override-kv: n_overrides items "KEY=TYPE:VALUE",
     * TYPE int, float, bool (true / false) or str, read by the loader in place of the file's
     * value (a key the file lacks is added; the last item of a key wins), e.g.
     * "tokenizer.ggml.add_bos_token=bool:false". The fingerprints cover what they change. */
    const char *const *overrides;
    size_t n_overrides;
    /* RoPE, as llama.cpp's --rope-scaling / --rope-freq-base / --rope-freq-scale: NULL or ""
     * the file's scaling, else "none" or "linear" ("yarn" is SKV_ERR_UNSUPPORTED); a base
     * > 0 replaces the file's; a freq_scale > 0 multiplies positions (linear scaling by a
     * factor of 1 / freq_scale). Applied as overrides of the architecture's keys. */
    const char *rope_scaling;
    double rope_freq_base;
    double rope_freq_scale;
} skv_model_params;
/* SKV_ERR_INVALID_ARG for a malformed override or, on a llama2.c checkpoint, any override. */
SKV_API int skv_model_load_params(const char *path, const skv_model_params *params, skv_model **out,
                                  char *err, size_t errcap);
SKV_API void skv_model_free(skv_model *m);
SKV_API int skv_model_get_info(const skv_model *m, skv_model_info *info);
/* Why this thread's last skv_ctx_create on m failed ("" after a success; never NULL). */
SKV_API const char *skv_model_last_error(const skv_model *m);
/* What the loader recognised beyond info.arch, in words for `seqkv info`: the RoPE pairing
 * and each forward-pass step of the architecture's row with its parameters, e.g. "NEOX
 * RoPE, Q/K/V biases" (docs/architectures.md). SKV_ERR_RANGE when cap is too small (the
 * text is cut). */
SKV_API int skv_model_arch_steps(const skv_model *m, char *buf, size_t cap);
/* 128-bit fingerprint of everything that determines the model's outputs: hyper-parameters,
 * every weight value (as the f32 numbers the forward pass uses, so a GGUF and a llama2.c file
 * holding the same weights agree) and the vocabulary's size (its pieces are not part of it:
 * the ids' texts do not change the KV; skv_model_tokenizer_fingerprint covers them). Computed
 * once (under a lock: safe from several threads sharing the model), then cached. */
SKV_API int skv_model_fingerprint(skv_model *m, uint8_t out[16]);
/* 128-bit fingerprint of the tokenizer alone: everything that makes text into ids and ids
 * into text (the kind and pre-tokenizer, every token's text, score and attributes, the
 * merges, the special ids and flags). Models that tokenize alike share it whatever their
 * weights; what depends on the ids only (the side information and primed models of codecs
 * cmv / cmvd, the CLI's cached dictionary ids) is keyed by it, so it never waits for
 * skv_model_fingerprint. A pass over the vocabulary (milliseconds for 128K ids), then
 * cached (under a lock of its own). SKV_ERR_NOMEM. */
SKV_API int skv_model_tokenizer_fingerprint(skv_model *m, uint8_t out[16]);

/* Tokenizes text. add_special: prepend BOS (and append EOS) as the model's tokenizer says.
 * Writes at most cap ids to out; *n_out receives the number needed (SKV_ERR_RANGE if > cap). */
SKV_API int skv_model_tokenize(const skv_model *m, const char *text, size_t len, int add_special,
                         int32_t *out, size_t cap, size_t *n_out);
/* The bytes of one token (control tokens render as nothing). *len receives the length. */
SKV_API int skv_model_token_piece(const skv_model *m, int32_t token, char *buf, size_t cap, size_t *len);
/* A token's text as its vocabulary stores it, control tokens included ("<s>"), in the
 * vocabulary's own spelling (SentencePiece's U+2581 for a space): *text points into the
 * model (valid while it lives), not NUL-terminated, *len bytes. */
SKV_API int skv_model_token_text(const skv_model *m, int32_t token, const char **text, size_t *len);
/* The text of n token ids, as the seqkv CLI writes it: the tokens' pieces (skv_model_token_piece)
 * concatenated, every BOS dropped, and for SentencePiece vocabularies the one space the
 * tokenizer puts before the text (its dummy prefix) dropped from the first piece after a
 * BOS. So skv_model_tokenize(text, add_special = 1) -> skv_model_detokenize gives the text back, byte
 * for byte, whenever the text can round-trip at all: invalid UTF-8 and a literal U+2581
 * (SentencePiece's space mark) come back changed. flags: SKV_DETOK_AFTER_BOS when the ids
 * continue a sequence whose last earlier token was BOS (a long sequence decoded in parts).
 * Writes the text and a terminating NUL when they fit in cap bytes (text may be NULL when
 * cap is 0, to ask the size); *len receives the text's length (without the NUL), also on
 * SKV_ERR_RANGE. Errors: SKV_ERR_RANGE (cap < *len + 1), SKV_ERR_INVALID_ARG (NULL
 * arguments, an id outside the vocabulary), SKV_ERR_NOMEM. */
enum { SKV_DETOK_AFTER_BOS = 1 };
SKV_API int skv_model_detokenize(const skv_model *m, const int32_t *tokens, size_t n, int flags, char *text, size_t cap,
                           size_t *len);

/* ---- Contexts: one KV cache + scratch, used by one thread at a time ---------- */

typedef struct skv_ctx skv_ctx;

enum {
    SKV_KERNELS_AUTO = 0,   /* fastest available (AVX2+FMA when the CPU has it) */
    SKV_KERNELS_SCALAR = 1, /* portable reference kernels (bit-identical to AVX2: see docs/determinism.md) */
    SKV_KERNELS_AVX2 = 2    /* AVX2; SKV_ERR_UNSUPPORTED if the CPU lacks it */
};

typedef struct skv_ctx_params {
    int n_ctx;       /* KV capacity in positions; 0 = the model's trained context */
    int n_threads;   /* worker threads for prefill/decode; 0 or 1 = the calling thread only */
    int kernels;     /* SKV_KERNELS_* */
    int max_batch;   /* largest prefill chunk processed at once (memory vs speed); 0 = 512 */
    /* Quantized KV cache (docs/kvquant.md). NULL or "" = full precision. Otherwise items
     * separated by commas: k=SCHEME, v=SCHEME (or kv=SCHEME / a bare SCHEME for both), keep-first=N
     * and keep-last=N (layers kept exact), window=W (the W most recent positions kept exact),
     * seed=S; e.g. "k=tq4,v=tq3,keep-first=1,keep-last=1,window=64". Attention then reads each
     * quantized vector's quantize->dequantize round trip (memory is not saved yet). The string
     * is parsed by skv_ctx_create and need not outlive it. */
    const char *kv_quant;
    /* SKV_KV_CACHE_*: how the KV cache stores K and V (docs/determinism.md, "f16 KV cache").
     * F16: every K (after RoPE) and V value is rounded to binary16 (nearest, ties to even)
     * when written, by the forward pass and by skv_ctx_kv_write alike, and attention computes
     * over exactly those values; half the memory of F32. kv_read, kv_digest and sessions see
     * the stored values as f32 (exact); kv_view is refused (SKV_ERR_UNSUPPORTED), and so is
     * kv_quant with an f16 cache; skv_ctx_decode_multi steps f16 contexts (all of one type). */
    int kv_cache_type;
} skv_ctx_params;

enum { SKV_KV_CACHE_F32 = 0, SKV_KV_CACHE_F16 = 1 };

SKV_API skv_ctx_params skv_ctx_default_params(void);
/* The context's SKV_KV_CACHE_* (SKV_KV_CACHE_F32 for NULL). */
SKV_API int skv_ctx_kv_cache_type(const skv_ctx *c);
/* Validates a kv_quant spec (and, when m is non-NULL, that its schemes support m's head_dim):
 * SKV_OK, or SKV_ERR_INVALID_ARG / SKV_ERR_RANGE with a message in err. */
SKV_API int skv_kv_quant_check(const char *spec, const skv_model *m, char *err, size_t errcap);
/* y = the round trip of n_vec vectors of d floats through the per-vector scheme named
 * `scheme`, exactly as a context with kv_quant (seed 0) codes the head vectors of (layer,
 * kind: 0 = K, 1 = V). bits_per_value (optional) receives the stored bits per value, norms and
 * scales included. x and y may not overlap. Errors: SKV_ERR_INVALID_ARG, SKV_ERR_RANGE (d, or an
 * fp16 overflow), SKV_ERR_NOMEM. */
SKV_API int skv_kv_quant_roundtrip(const char *scheme, size_t d, int layer, int kind, const float *x,
                                   size_t n_vec, float *y, double *bits_per_value);
SKV_API int skv_ctx_create(const skv_model *m, const skv_ctx_params *p, skv_ctx **out);
SKV_API void skv_ctx_free(skv_ctx *c);
SKV_API const char *skv_ctx_last_error(const skv_ctx *c);
SKV_API const skv_model *skv_ctx_model(const skv_ctx *c);
SKV_API int skv_ctx_n_pos(const skv_ctx *c);   /* positions currently in the cache */
SKV_API int skv_ctx_n_ctx(const skv_ctx *c);   /* capacity */
/* Drops positions >= n_pos (0 clears the cache). */
SKV_API int skv_ctx_truncate(skv_ctx *c, int n_pos);

enum { SKV_LOGITS_NONE = 0, SKV_LOGITS_LAST = 1, SKV_LOGITS_ALL = 2 };

/* Runs n tokens as one batched prefill, appending them to the KV cache.
 * logits: NULL or room for n_vocab floats (LAST) or n*n_vocab floats (ALL), row per token.
 * Results are bit-identical to running the same tokens one by one with skv_ctx_decode(),
 * in any chunking and at any thread count (docs/determinism.md). */
SKV_API int skv_ctx_prefill(skv_ctx *c, const int32_t *tokens, size_t n, int logits_mode, float *logits);
/* As skv_ctx_prefill, but writes each token's final hidden state (after the output norm: the
 * input of the output matrix, what llama.cpp pools into embeddings) into embd, n * n_embd
 * floats, row per token; no logits. Bit-identical in any chunking and thread count. */
SKV_API int skv_ctx_prefill_embd(skv_ctx *c, const int32_t *tokens, size_t n, float *embd);
/* As skv_ctx_prefill, but instead of logits rows writes sur[i] = (float)skv_token_bits
 * of tokens[i + 1] under row i's logits, for i < n - 1 (sur: room for n - 1 floats), and the
 * last row's logits into last_logits (NULL: none): what skv_store_put_kv takes, from rows
 * computed a few at a time (a bounded scratch of 4 MiB, not n * n_vocab floats).
 * Bit-identical to SKV_LOGITS_ALL's rows in any chunking and thread count. */
SKV_API int skv_ctx_prefill_surprisal(skv_ctx *c, const int32_t *tokens, size_t n, float *sur, float *last_logits);
/* The same split in two, for a caller that wants the prompt's first token soon and the
 * surprisals later (a server's slot, whose store writer computes them off the request
 * path): skv_ctx_prefill_hidden is skv_ctx_prefill_embd plus the last row's logits
 * (NULL: none), bit-identical to skv_ctx_prefill's; skv_ctx_hidden_surprisal writes
 * sur[i] = (float)skv_token_bits of next[i] under the logits of hidden row i (n rows of
 * n_embd floats as skv_ctx_prefill_hidden wrote them), bit-identical to
 * skv_ctx_prefill_surprisal's. It touches no KV: any context of the model runs it, a block
 * of rows per output matmul as its batch allows (min(n_ctx, max_batch); 64 rows suffice). */
SKV_API int skv_ctx_prefill_hidden(skv_ctx *c, const int32_t *tokens, size_t n, float *hidden, float *last_logits);
SKV_API int skv_ctx_hidden_surprisal(skv_ctx *c, const float *hidden, size_t n, const int32_t *next, float *sur);
/* Appends one token; logits: NULL or room for n_vocab floats. */
SKV_API int skv_ctx_decode(skv_ctx *c, int32_t token, float *logits);
/* -log2 of token's probability under softmax(logits) (n_vocab values), computed in double:
 * the bits a perfect coder would spend on it. For reports only: the model codec uses its
 * own integer quantization of the logits (docs/coder.md), never this. */
SKV_API double skv_token_surprisal(const float *logits, int n_vocab, int32_t token);
/* The same quantity as the store prices tokens with (its trie, skv_store_put_kv's
 * surprisals): exp in float by a fixed polynomial, summed in double over 16 lanes in a
 * fixed order, so the same bits on every machine and compiler, about 10x faster than
 * skv_token_surprisal; within ~1e-6 bits of it. */
SKV_API double skv_token_bits(const float *logits, int n_vocab, int32_t token);
/* One decoding step of n independent sequences at once: token i is appended to ctxs[i]
 * (distinct contexts of the same model and kv_cache_type, without kv_quant; else
 * SKV_ERR_UNSUPPORTED) and logits row i (NULL, or room
 * for n * n_vocab floats) is that context's next-token logits. The weights are read once
 * for all n rows, so a queue of sequences decodes at nearly prefill speed; every row's
 * result is bit-identical to skv_ctx_decode on its own context. The context with the largest
 * capacity runs the step (its threads and scratch), in chunks of its max_batch rows.
 * Errors are described by skv_ctx_last_error(ctxs[0]); on error no context changes. */
SKV_API int skv_ctx_decode_multi(skv_ctx *const *ctxs, const int32_t *tokens, size_t n, float *logits);

/* Read-only view of the KV cache: the n_pos x head_dim f32 block of one layer, kind
 * (0 = K after RoPE, 1 = V) and KV head, rows contiguous. Valid until the next call
 * that modifies the context. With kv_quant these are the values attention reads (round
 * trips outside the full-precision window/layers); skv_ctx_kv_digest hashes the same. */
SKV_API int skv_ctx_kv_view(const skv_ctx *c, int layer, int kind, int kv_head, const float **data);
/* 128-bit digest (XXH3-128) of the KV cache's first n_pos positions in the canonical order
 * layer, kind, kv_head, position, dimension as little-endian f32. */
SKV_API int skv_ctx_kv_digest(const skv_ctx *c, int n_pos, uint8_t out[16]);

/* Bulk KV access in the canonical order (layer, kind, kv_head, position, dimension; f32):
 * n_layer * 2 * n_head_kv * n * head_dim floats for positions [pos0, pos0 + n).
 * skv_ctx_kv_read copies out positions the cache holds (pos0 + n <= n_pos).
 * skv_ctx_kv_write loads positions [pos0, pos0 + n) with pos0 <= n_pos (a prefix already in
 * the cache stays; anything after pos0 + n is dropped) and sets n_pos = pos0 + n; running
 * more tokens then continues from that cache. Loading the exact values a run produced gives
 * bit-identical results to that run (the forward pass reads the cache only). Refused
 * (SKV_ERR_UNSUPPORTED) for a context with kv_quant. */
SKV_API int skv_ctx_kv_read(const skv_ctx *c, int pos0, int n, float *out);
SKV_API int skv_ctx_kv_write(skv_ctx *c, int pos0, int n, const float *kv);

/* ---- Raw KV dumps (docs/kvdump.md) ------------------------------------- */

enum { SKV_KVDUMP_F32 = 0, SKV_KVDUMP_F16 = 1 };

/* Writes the first n positions of the cache and their token ids (tokens[0..n)) to path. */
SKV_API int skv_kvdump_write(const skv_ctx *c, const int32_t *tokens, size_t n, int dtype,
                             const char *path, char *err, size_t errcap);

typedef struct skv_kvdump {
    int dtype;               /* SKV_KVDUMP_* */
    int n_layer, n_head_kv, head_dim;
    uint32_t n_pos;
    uint8_t fingerprint[16]; /* model fingerprint */
    int32_t *tokens;         /* n_pos */
    float *kv;               /* [n_layer][2][n_head_kv][n_pos][head_dim], converted to f32 */
} skv_kvdump;
/* Reads and validates a dump (checksum included). Free with skv_kvdump_free. */
SKV_API int skv_kvdump_read(const char *path, skv_kvdump **out, char *err, size_t errcap);
SKV_API void skv_kvdump_free(skv_kvdump *d);
/* SKV_OK when d was written with model m: the same fingerprint and KV geometry (layers,
 * KV heads, head_dim) and every token inside m's vocabulary; else SKV_ERR_MISMATCH with a
 * message naming both (the KV and tokens of another model's dump mean nothing under m).
 * SKV_ERR_INVALID_ARG for NULL arguments. */
SKV_API int skv_kvdump_check_model(const skv_kvdump *d, skv_model *m, char *err, size_t errcap);

/* ---- Sizes of per-vector representations -------------------------------- */

/* Bytes that one token position of m's KV cache (every layer, K and V, every KV head)
 * takes when each head vector is stored with a per-vector scheme: "f32", "f16", "q8_0",
 * "q4_0", "tq1".."tq4" (TurboQuant-MSE), "tq2p".."tq4p" (TurboQuant-prod), or "tq3.5"
 * (half the vectors at tq3, half at tq4: the paper's 3.5-bit operating point).
 * Counts every stored byte (norms, scales). SKV_ERR_INVALID_ARG for unknown names. */
SKV_API int skv_kv_position_bytes(const skv_model *m, const char *scheme, double *bytes);

/* ---- Sessions: the .skv format (docs/format.md) ----------------------------
 * A session is one KV cache (a token sequence of at most the context length), or with
 * `segment` several consecutive independent ones. Its file stores the tokens -- raw
 * (codec "tokens", restored by one batched prefill) or arithmetic-coded under the model
 * (codec "model", restored one forward pass per token, or per verified block of drafted
 * tokens: see skv_restore_params) -- plus a digest of each segment's KV so a restore can
 * prove it regenerated exactly the same cache. */

enum { SKV_CODEC_TOKENS = 0, SKV_CODEC_MODEL = 1 };
/* -- quantized-KV codecs (docs/format.md section 2.3) --
 * The payload holds the tokens (exactly as codec "tokens") AND every position's KV (all
 * layers, K and V, every KV head) quantized per vector; a restore decodes the KV without
 * running the model (lossy: it is the quantize->dequantize round trip of the exact KV, bit
 * for bit what skv_kv_quant_roundtrip gives with seed 0). kv_digest is then the XXH3-128
 * of the dequantized KV, so verify proves the stored payload was decoded correctly. */
enum {
    SKV_CODEC_F16 = 2, /* binary16 */
    SKV_CODEC_Q8 = 3,  /* q8_0 */
    SKV_CODEC_Q4 = 4,  /* q4_0 */
    SKV_CODEC_TQ2 = 5, /* TurboQuant-MSE, 2 bits */
    SKV_CODEC_TQ3 = 6,
    SKV_CODEC_TQ4 = 7,
    SKV_CODEC_KVQ = 8  /* schemes per kind from skv_encoder_params.kv_quant ("k=tq4,v=tq3", "tq3p", seed=S) */
};
/* -- codec "cm" (docs/format.md section 2.4) --
 * Lossless like "tokens" and restored the same way (decode the ids, ONE batched prefill,
 * digest verified), but the ids are range-coded under a cheap adaptive context-mixing
 * model of the ids themselves (orders 0-4 and a match model; no weights, any vocabulary):
 * fewer bits than "tokens", decoded in microseconds per token, no model run to decode. */
enum { SKV_CODEC_CM = 9 };
/* -- codec "pred" (docs/format.md section 2.5) --
 * Lossy, restored without the model like the quantized-KV codecs: the tokens plus the KV
 * coded predictively across positions (closed loop: each vector predicted from the
 * reconstructed earlier ones -- the previous position, or the last position holding the
 * same token -- the residual uniformly quantized and range-coded under adaptive models).
 * skv_encoder_params.kv_quant takes "PREDICTOR[,ramp][,step=S][,kstep=S][,vstep=S]"
 * (predictors none, delta, lpc, lpc2, tok; ramp: coarser steps far from the segment's end;
 * S = the quantizer step relative to the RMS of each (layer, kind); NULL = "tok,ramp,step=1").
 * Ids 11..15 are reserved for predictive and transform KV codecs (11: kvtc). */
enum { SKV_CODEC_PRED = 10 };
/* -- codec "kvtc" (docs/format.md section 2.8, docs/kvtc.md) --
 * Lossy, restored without the model like "pred": the tokens plus the KV transform-coded
 * (per (layer, kind, kv_head): the mean and principal components of a calibration
 * measured once per model, the coefficients quantized and range-coded). The encoder
 * takes the calibration file's image (skv_encoder_params.kvtc_cal, written by
 * `seqkv kvtc-calib`); a restore needs the same one (skv_session_set_kvtc_cal).
 * skv_encoder_params.kv_quant takes "[none|tok][,ramp][,step=S][,kstep=S][,vstep=S]
 * [,theta=X]" (NULL = "tok,ramp,step=1"). */
enum { SKV_CODEC_KVTC = 11 };
/* -- codecs "cmv" and "cmvd" (docs/format.md section 2.6) --
 * cm with what the vocabulary itself tells (ids ordered by their text, a static prior
 * from the vocabulary's scores or merge order, contexts over the text); "cmvd" primes
 * the model with a dictionary of ids (skv_encoder_params.cm_dict; the same dictionary
 * must be given to the restore: skv_restore_params.cm_dict), e.g. earlier sessions of a
 * store. Restored like "cm": decode, one batched prefill, digest verified. A segment
 * names the revision of the model it was coded with (docs/coder.md 4.9, 4.10): encoders
 * write the newest, restores read every revision the build knows, so older files keep
 * restoring. */
enum { SKV_CODEC_CMV = 20, SKV_CODEC_CMVD = 21 };
/* Codec cmvd's primed model, kept in a snapshot file (docs/coder.md 4.8): priming walks
 * every dictionary id (~10 us each); loading its snapshot takes milliseconds (_save writes
 * format version 2, which _load reads on two threads it starts and joins; _load also reads
 * version 1, a store's records). _save primes
 * (once per process) and writes path (atomically, through a temporary file of its own,
 * so concurrent writers of one path are safe); _load reads path into this process's
 * cache of primed models, so that encoders and restores with this (m, dict) skip priming.
 * A file _save wrote is mapped read-only, not copied (its pages are the model's large
 * tables until the process ends): replace it by rename, as _save does, never truncate it
 * in place while a process uses it (that raises SIGBUS there, as for any mapped file).
 * _load: SKV_ERR_IO (cannot read), SKV_ERR_FORMAT (damaged: delete and _save again),
 * SKV_ERR_MISMATCH (written for another vocabulary, dictionary, version or model revision:
 * a snapshot of an older build's revision is refused, then rebuilt by _save). The message is
 * written to err[0..cap). */
SKV_API int skv_cm_dict_save(skv_model *m, const int32_t *dict, size_t n, const char *path, char *err, size_t cap);
SKV_API int skv_cm_dict_load(skv_model *m, const int32_t *dict, size_t n, const char *path, char *err, size_t cap);
/* 1 when the file at path is a snapshot in the format skv_cm_dict_save writes now; 0 when it
 * is unreadable or older (an older one still loads: save it again to get the faster form). */
SKV_API int skv_cm_dict_file_current(const char *path);
/* Builds what every cmv/cmvd coder, load or save for m needs first (the vocabulary's side
 * information: ~5 ms for a 4K vocabulary, more for 128K) and keeps it for the process,
 * keyed by skv_model_tokenizer_fingerprint; optional (done on first use otherwise),
 * thread-safe: call it on a thread of its own beside other work (the CLI: while the
 * dictionary's text is hashed and its cached ids read). SKV_ERR_NOMEM. */
SKV_API int skv_cm_dict_prepare(skv_model *m);
/* "tokens" "model" "f16" "q8" "q4" "tq2" "tq3" "tq4" "kvq" "cm" "pred" "kvtc" "cmv" "cmvd" <-> SKV_CODEC_*; NULL / SKV_ERR_INVALID_ARG if unknown. */
SKV_API const char *skv_codec_name(int codec);
SKV_API int skv_codec_parse(const char *name);
/* The codec table (src/container/codecs.c): one row per codec. The CLI's --help, its
 * errors and `inspect` list the codecs from it; a program can too. Flags: */
enum {
    SKV_CODEC_F_IDS = 1u << 0,     /* the payload is the ids alone, decoded without running the model */
    SKV_CODEC_F_KV = 1u << 1,      /* the payload stores the KV (lossy), restored without running the model */
    SKV_CODEC_F_PREFILL = 1u << 2, /* restored by decoding the ids, then one batched prefill of them */
    SKV_CODEC_F_MODEL = 1u << 3,   /* the ids are coded under the model: a restore runs it token by token */
    SKV_CODEC_F_DICT = 1u << 4,    /* takes a dictionary of ids (skv_encoder_params.cm_dict) */
    SKV_CODEC_F_SPEC = 1u << 5,    /* takes a kv_quant spec (skv_encoder_params.kv_quant) */
    SKV_CODEC_F_NEEDS = 1u << 6,   /* the dictionary or spec it takes must be given */
    SKV_CODEC_F_CAL = 1u << 7      /* needs a kvtc calibration to encode and to decode (skv_encoder_params.kvtc_cal,
                                      skv_session_set_kvtc_cal) */
};
typedef struct skv_codec_desc {
    int id;              /* SKV_CODEC_*: the file's codec field */
    const char *name;    /* skv_codec_name's */
    const char *help;    /* one line: what the payload holds and how it is restored */
    const char *payload; /* a few words on the payload, for `inspect` ("zstd varints") */
    unsigned flags;      /* SKV_CODEC_F_* */
} skv_codec_desc;
/* Row i of the table in listing order (NULL past the last); the row of codec id (NULL if
 * unknown). Rows are static: the pointers stay valid for the life of the process. */
SKV_API const skv_codec_desc *skv_codec_at(size_t i);
SKV_API const skv_codec_desc *skv_codec_desc_of(int codec);

typedef struct skv_encoder skv_encoder;

typedef struct skv_encoder_params {
    int codec;            /* SKV_CODEC_* */
    int n_ctx;            /* segment capacity; 0 = the model's trained context */
    int n_threads;
    int segment;          /* 1: split sessions longer than n_ctx into fresh-context segments */
    unsigned total_bits;  /* model codec: log2 of the frequency total; 0 = automatic (24..28) */
    /* codec SKV_CODEC_KVQ: k=SCHEME, v=SCHEME (or kv=/bare SCHEME) and seed=S of the kv_quant
     * grammar (skv_ctx_params), both kinds given; NULL for the other codecs (their seed is 0) */
    const char *kv_quant;
    /* 1: leave skv_encoder_stats.model_bits at 0 and save its double-precision softmax over
     * the vocabulary per token (an inference loop that stores as it generates needs no
     * cross-entropy report); 0 = measure it */
    int skip_entropy;
    /* codec SKV_CODEC_CMVD: the dictionary of ids (each < n_vocab) the model is primed
     * with; copied by skv_encoder_create. NULL/0 for the other codecs. */
    const int32_t *cm_dict;
    size_t n_cm_dict;
    /* SKV_KV_CACHE_* of the encoder's context (skv_ctx_params): the digests then cover the
     * f16 cache, and the file says so (header flag, docs/format.md): it restores only into
     * contexts of the same kv_cache_type. */
    int kv_cache_type;
    /* codec SKV_CODEC_KVTC: the image of a calibration file (kvtc-<id>.cal, docs/kvtc.md)
     * of the model's geometry; parsed by skv_encoder_create. NULL/0 for the other codecs. */
    const void *kvtc_cal;
    size_t kvtc_cal_bytes;
} skv_encoder_params;

typedef struct skv_encoder_stats {
    uint64_t n_tokens;      /* tokens appended */
    uint64_t n_model_coded; /* tokens coded under the model (all but each segment's first) */
    double model_bits;      /* sum of -log2 p(token) of those under the model's softmax (0 with skip_entropy) */
    double coded_bits;      /* sum of -log2(freq/total) actually coded (model codec) */
    /* Rows of logits the model computed. Only the rows something reads are
     * asked for: every token's for codec model or the model_bits report, else none but
     * the last of an append given next_logits. */
    uint64_t n_logit_rows;
} skv_encoder_stats;

SKV_API skv_encoder_params skv_encoder_default_params(void);
/* The encoder owns a context that runs the model; it is the session's live KV cache.
 * A failure (unknown codec, a kv_quant spec the codec does not take, no memory) is
 * described in err. When the model's fingerprint (which the file records) was never
 * computed, a thread the encoder starts computes it while the tokens prefill
 * (skv_encoder_finish or skv_encoder_free joins it; the model must outlive the encoder). */
SKV_API int skv_encoder_create(skv_model *m, const skv_encoder_params *p, skv_encoder **out, char *err,
                               size_t errcap);
SKV_API void skv_encoder_free(skv_encoder *e);
SKV_API const char *skv_encoder_last_error(const skv_encoder *e);
/* Appends tokens (runs them through the model). Memory is bounded per encoder, not by
 * n: tokens are run in chunks, and logits are computed only where they are read (at most
 * 16 MiB of them at a time). next_logits (optional, n_vocab floats)
 * receives the model's logits after the last token, for an inference loop that samples
 * the next token from them and appends it. SKV_ERR_RANGE when the context is full and
 * segmenting is off. */
SKV_API int skv_encoder_append(skv_encoder *e, const int32_t *tokens, size_t n, float *next_logits);
/* Appends the tokens of a KV dump (skv_kvdump_read) after checking it was written with
 * this encoder's model: SKV_ERR_MISMATCH (message naming both) for another model's dump,
 * as skv_kvdump_check_model says. */
SKV_API int skv_encoder_append_kvdump(skv_encoder *e, const skv_kvdump *d);
SKV_API const skv_ctx *skv_encoder_ctx(const skv_encoder *e);
SKV_API int skv_encoder_get_stats(const skv_encoder *e, skv_encoder_stats *st);
/* Produces the .skv file bytes (malloc'ed; free() them). The encoder cannot be appended to afterwards. */
SKV_API int skv_encoder_finish(skv_encoder *e, uint8_t **data, size_t *size);

typedef struct skv_session skv_session;

typedef struct skv_session_info {
    int version;
    int codec;               /* SKV_CODEC_* */
    int segmented;
    uint32_t n_segments;
    uint32_t n_ctx;          /* segment capacity the encoder used */
    uint32_t n_vocab;
    uint32_t total_bits;     /* model codec's frequency total (log2) */
    int32_t bos_id;
    uint64_t n_tokens;
    uint8_t fingerprint[16]; /* model */
    char model_name[49];
    uint64_t file_bytes;
    int kv_cache_type;       /* SKV_KV_CACHE_* of the contexts it was made with and restores into */
    int has_tokenizer;       /* 1: tokenizer holds the first 8 bytes of the writing model's
                                skv_model_tokenizer_fingerprint (a restore checks it: the
                                text the ids render to), 0: not recorded (an older file) */
    uint8_t tokenizer[8];
} skv_session_info;

/* Parses and validates a .skv file (structure and checksums); copies what it needs. */
SKV_API int skv_session_open(const void *data, size_t size, skv_session **out, char *err, size_t errcap);
SKV_API void skv_session_free(skv_session *s);
/* The calling thread's message of its last call on s (a session may be shared by threads). */
SKV_API const char *skv_session_last_error(const skv_session *s);
SKV_API int skv_session_get_info(const skv_session *s, skv_session_info *info);
SKV_API int skv_session_segment_info(const skv_session *s, uint32_t i, uint32_t *n_tokens, uint64_t *payload_bytes,
                                     uint8_t kv_digest[16]);

/* How a model-coded segment is decoded. Every choice restores exactly the same tokens and
 * KV cache; they differ only in speed. Speculative decoding: a cheap draft proposes the
 * next tokens, one batched forward pass verifies the block (yielding every position's
 * logits), the arithmetic decoder keeps the proposals while they match what it decodes
 * and the cache is truncated at the first mismatch (docs/determinism.md: batch
 * invariance makes the KV bit-identical to a token-by-token decode). */
enum {
    SKV_DRAFT_AUTO = 0,  /* the default: currently SKV_DRAFT_NONE (n-gram drafts pay only on
                            sessions that repeat themselves: bench/results/restore.md) */
    SKV_DRAFT_NONE = 1,  /* token by token: one forward pass per token */
    SKV_DRAFT_NGRAM = 2, /* n-gram drafts from the segment's own decoded tokens (orders 1..4) */
    SKV_DRAFT_EXTERN = 3 /* the params' draft_fn first (e.g. skv_store_draft: the continuation of
                            the longest stored prefix), the n-gram draft when it proposes nothing */
};

/* A draft source: writes up to max proposed tokens to follow hist[0..n) (a segment's
 * decoded tokens so far) to out and returns how many (0: none). Any answer is safe. */
typedef size_t (*skv_draft_fn)(void *user, const int32_t *hist, size_t n, int32_t *out, size_t max);

typedef struct skv_restore_stats {
    uint64_t n_tokens;   /* tokens restored */
    uint64_t n_passes;   /* forward passes (skv_ctx_prefill calls) run */
    uint64_t n_drafted;  /* draft tokens verified */
    uint64_t n_accepted; /* of those, the ones the decoded stream confirmed */
} skv_restore_stats;

typedef struct skv_restore_params {
    int verify; /* compare the regenerated KV with the stored digest (SKV_ERR_MISMATCH if not equal) */
    void (*progress)(void *user, uint64_t done, uint64_t total); /* optional */
    void *user;
    /* Speculative restore; zero means the defaults. */
    int draft;                /* model codec: SKV_DRAFT_* (0 = automatic) */
    int draft_max;            /* most tokens verified by one forward pass, 1..256; 0 = automatic (16) */
    skv_restore_stats *stats; /* optional: each restore ADDS its counts (zero it first) */
    /* codec SKV_CODEC_CMVD: the dictionary the file was written with (SKV_ERR_MISMATCH if
     * another one or none is given) */
    const int32_t *cm_dict;
    size_t n_cm_dict;
    /* draft SKV_DRAFT_EXTERN: the draft source and its user pointer */
    skv_draft_fn draft_fn;
    void *draft_user;
    /* The segment's ids as skv_session_segment_tokens decoded them
     * (e.g. on another thread while the previous segment prefilled): a restore of a
     * tokens, cm, cmv or cmvd segment prefills these instead of decoding its payload again
     * (any other codec: SKV_ERR_INVALID_ARG). n_decoded must be the segment's length and
     * every id < n_vocab (SKV_ERR_INVALID_ARG). The KV is regenerated from these ids, so
     * only a verified restore proves they are the file's: other ids are a digest mismatch.
     * NULL: decode as usual. Not used by skv_session_restore_batch. */
    const int32_t *decoded;
    size_t n_decoded;
} skv_restore_params;

/* Restores segment i into ctx (cleared first; its capacity must hold the segment):
 * the KV cache is regenerated and the segment's tokens written to tokens[0..n).
 * Refuses (SKV_ERR_MISMATCH, naming both) a model other than the one that wrote the file:
 * before any work, except that a codec tokens or cm segment restored into a model whose
 * fingerprint was never computed prefills while it is computed, on a thread the call
 * starts and joins (~0.5 s of a 1.1B F16 model's first restore), and is refused after
 * (ctx left empty). The message of a failure is skv_ctx_last_error(ctx) (ctx NULL:
 * SKV_ERR_INVALID_ARG only).
 * A cmv or cmvd segment of 256 ids or more (p->decoded NULL) is decoded on a thread the
 * call starts and joins, while its first eighth prefills; a failure leaves ctx empty. */
SKV_API int skv_session_restore_segment(const skv_session *s, skv_model *m, uint32_t i, skv_ctx *ctx,
                                        const skv_restore_params *p, int32_t *tokens, size_t cap);

/* The token ids of segment i of a session whose codec stores them
 * (tokens, cm, cmv, cmvd: the codecs a restore regenerates with one prefill), decoded
 * without a context and without running the model: the first half of
 * skv_session_restore_segment, so that a caller restoring many segments can decode the
 * next one on another thread while the current one prefills, and hand the ids over in
 * skv_restore_params.decoded (seqkv restore does: docs/format.md 2.7).
 * m: the model the file was written with (SKV_ERR_MISMATCH otherwise); p: only cm_dict
 * is used (cmvd); tokens receives the segment's *n_out ids (cap too small: SKV_ERR_RANGE).
 * Other codecs: SKV_ERR_UNSUPPORTED. The session and the model are only read, so this may
 * run on one thread while another prefills with the same model (a cmvd dictionary's primed
 * coder is shared under a lock). Messages go to err (errcap bytes), not to the session. */
SKV_API int skv_session_segment_tokens(const skv_session *s, skv_model *m, uint32_t i, const skv_restore_params *p,
                                       int32_t *tokens, size_t cap, uint32_t *n_out, char *err, size_t errcap);

/* Batch restore: one job per segment to restore, each with its own context. */
typedef struct skv_restore_job {
    const skv_session *session;
    uint32_t segment;
    skv_ctx *ctx;       /* distinct per job; cleared first; must hold the segment */
    int32_t *tokens;    /* receives the segment's tokens */
    size_t cap;         /* room in tokens */
    int status;         /* out: SKV_OK or this job's error (its message: skv_ctx_last_error(ctx)) */
} skv_restore_job;

/* Restores a queue of segments (any sessions written with model m) as
 * skv_session_restore_segment would, one by one, with identical results (tokens and KV).
 * Model-coded segments are decoded together: each step runs the next token of up to 64
 * of them as one forward pass (skv_ctx_decode_multi), so the queue decodes at close to
 * prefill speed instead of one pass per token per session; a finished segment makes room
 * for the next queued one. Other codecs are restored on their own. p: verify, progress
 * (tokens of the whole queue), stats (n_passes counts steps) and cm_dict (cmvd jobs) are
 * honoured; draft settings and decoded ids are not used. Returns SKV_OK when every job succeeded, else the first failed
 * job's status (every job's own status is set, and a failed job's message is
 * skv_ctx_last_error(job.ctx); a failed job's context is left undefined, the others are
 * unaffected). */
SKV_API int skv_session_restore_batch(skv_model *m, skv_restore_job *jobs, size_t n, const skv_restore_params *p);

/* The number of model-coded segments worth decoding together (skv_session_restore_batch)
 * for a queue of n_queued segments of contexts of n_ctx positions on model m: 1 when the
 * weights are small enough to stay in a core's cache (a pass then costs about the same per
 * row alone or batched: bench/results/restore.md), else min(n_queued, 64, contexts fitting
 * in 1 GiB of KV). Never 0. */
SKV_API uint32_t skv_restore_batch_width(const skv_model *m, size_t n_queued, int n_ctx);

/* Quantized-KV sessions (codecs SKV_CODEC_F16 .. SKV_CODEC_KVQ, and SKV_CODEC_PRED: its
 * scheme[] are "pred", its predictor name; position_bytes the mean, rounded up). */
typedef struct skv_session_kv_info {
    char scheme[2][8];       /* per-vector scheme of K and V: "f16" "q8_0" "q4_0" "tq2".."tq4" "tq2p".."tq4p" ... */
    uint64_t seed;           /* base seed of the tq quantizers (layer/kind seeds as in kv_quant) */
    int n_layer, n_head_kv, head_dim;
    uint64_t position_bytes; /* encoded KV bytes of one position */
    uint64_t tokens_bytes;   /* this segment's zstd token frame */
    uint64_t kv_bytes;       /* this segment's encoded KV = n_tokens * position_bytes */
    float rel_mse[2];        /* this segment's sum |x - x~|^2 / sum |x|^2 for K and V, as the writer measured
                                (codec pred with model_layers 1: layers 1.. only) */
    int model_layers;        /* codec pred: leading layers not stored but regenerated by the model at restore
                                (1 with `layer0`: only skv_session_restore_segment restores it), else 0 */
} skv_session_kv_info;

/* Codecs taking a dictionary (SKV_CODEC_F_DICT: cmvd): the id (XXH3-64 of its ids as
 * little-endian u32) and the number of ids of the dictionary segment i was coded with,
 * which a restore must be given; SKV_ERR_UNSUPPORTED for the other codecs. */
SKV_API int skv_session_segment_dict(const skv_session *s, uint32_t i, uint64_t *id, uint32_t *n_ids);
/* Codecs needing a calibration (SKV_CODEC_F_CAL: kvtc): the id every segment names (the
 * file kvtc-<16 hex digits of id>.cal); SKV_ERR_UNSUPPORTED for the other codecs. */
SKV_API int skv_session_kvtc_cal_id(const skv_session *s, uint64_t *id);
/* Gives a kvtc session the calibration its segments need (image: the file's bytes,
 * copied and checked): SKV_ERR_FORMAT (a damaged image), SKV_ERR_MISMATCH (another
 * calibration than the one the session names; the message names both files),
 * SKV_ERR_UNSUPPORTED (another codec). Call it before any restore of the session (it is
 * not synchronized with them); restores and skv_session_restore_kv of a kvtc session
 * without it fail with SKV_ERR_INVALID_ARG naming the file needed. */
SKV_API int skv_session_set_kvtc_cal(skv_session *s, const void *image, size_t len);
/* Segment i's KV payload description; SKV_ERR_UNSUPPORTED for codecs tokens/model. */
SKV_API int skv_session_segment_kv_info(const skv_session *s, uint32_t i, skv_session_kv_info *out);
/* Restores segment i of a quantized-KV session without any model: kv receives the
 * dequantized KV in the canonical order (layer, kind, kv_head, position, dimension; f32,
 * n_layer*2*n_head_kv*n_tokens*head_dim floats, kv_cap floats of room) and tokens its
 * tokens (tok_cap of room). verify: compare the digest of the decoded KV with the stored
 * one (SKV_ERR_MISMATCH if not equal). SKV_ERR_UNSUPPORTED for codecs tokens/model,
 * SKV_ERR_RANGE for short buffers, SKV_ERR_FORMAT for a payload that does not decode
 * (messages: skv_session_last_error(s)).
 * (skv_session_restore_segment also restores these codecs: it decodes the same way and
 * loads the KV into the context with skv_ctx_kv_write, never running the model.) */
SKV_API int skv_session_restore_kv(const skv_session *s, uint32_t i, float *kv, size_t kv_cap, int32_t *tokens,
                                   size_t tok_cap, int verify);

/* ---- Engine-free KV blobs (docs/kvblob.md) --------------------------------
 * Any engine's KV cache -- not only one seqkv's engine computed -- stored with a
 * per-vector scheme (the quantizers of the kvq codec: f32 f16 q8_0 q4_0 tq1..tq4
 * tq2p..tq4p) or the model-free predictive coder (codec pred's, without its
 * token-dependent predictor), and decoded without any model. Added for issue 45.
 * The KV is canonical f32 [n_layer][2 (K, V)][n_head_kv][n_pos][head_dim], as
 * skv_ctx_kv_read gives it; K is stored as given (RoPE applied or not: the codec
 * does not care). The blob is self-describing (geometry, schemes, checksum). */
typedef struct skv_kv_geometry {
    int n_layer;    /* 1..4096 */
    int n_head_kv;  /* 1..4096 */
    int head_dim;   /* 1..65536 (each scheme has its own limits: tq* and pred's lpc2 want it even) */
} skv_kv_geometry;

typedef struct skv_kv_blob_info {
    skv_kv_geometry geometry;
    uint32_t n_pos;
    char scheme[2][8];   /* K and V: a per-vector scheme name ("tq3", "f16"), or "pred" */
    char predictor[8];   /* pred: "none" "delta" "lpc" "lpc2"; else "" */
    uint64_t seed;       /* tq quantizers' base seed (per-vector schemes) */
    float rel_mse[2];    /* sum |x - x~|^2 / sum |x|^2 of K and V as the encoder measured */
} skv_kv_blob_info;

/* Encodes n_pos positions (1 .. 2^24) of kv (geometry g) into *out (malloc'ed: free() it,
 * *size bytes). scheme: a kv_quant spec naming both kinds and an optional seed ("tq3",
 * "k=tq4,v=tq3,seed=7", "f16", "q8_0"), or "pred" (= "pred:lpc2,step=0.05") or
 * "pred:PREDICTOR[,ramp][,rot][,step=S][,kstep=S][,vstep=S][,rate=BITS]" with PREDICTOR
 * none, delta, lpc or lpc2 (steps relative to the RMS of each (layer, kind): the
 * grammar of codec pred, docs/format.md 2.5). Deterministic: the same input gives the same
 * bytes on every machine. Errors (message in err): SKV_ERR_INVALID_ARG (scheme, geometry,
 * non-finite values), SKV_ERR_RANGE (n_pos, an fp16 overflow, head_dim a scheme cannot
 * take), SKV_ERR_NOMEM. */
SKV_API int skv_kv_encode(const char *scheme, const skv_kv_geometry *g, const float *kv, size_t n_pos, uint8_t **out,
                          size_t *size, char *err, size_t errcap);
/* Validates a blob's frame and sub-header (checksum included) and describes it.
 * SKV_ERR_FORMAT (malformed, truncated), SKV_ERR_MISMATCH (checksum), SKV_ERR_UNSUPPORTED
 * (a later version). */
SKV_API int skv_kv_blob_inspect(const void *data, size_t size, skv_kv_blob_info *info, char *err, size_t errcap);
/* Decodes a blob into kv (kv_cap floats of room; it needs n_layer*2*n_head_kv*n_pos*head_dim):
 * the encoder's reconstruction, bit for bit. Errors as skv_kv_blob_inspect, and
 * SKV_ERR_RANGE (kv_cap too small, or a per-vector blob whose quantizer tables would be
 * out of proportion to its size: kvcodec.h), SKV_ERR_NOMEM. */
SKV_API int skv_kv_decode(const void *data, size_t size, float *kv, size_t kv_cap, char *err, size_t errcap);

/* ---- Session store: the probabilistic-language-trie store (docs/store.md) ----
 * A directory (an LMDB environment) holding many named sessions' token sequences in a
 * radix trie over token ids, so a prefix shared by several sessions is stored once. Each
 * trie node carries the model's cumulative surprisal of its prefix (d_T, bits) and may
 * hold its span's KV materialised (exact f32, zstd). A restore loads the longest
 * materialised prefix and recomputes the rest, bit-identical to a fresh run. A placement
 * policy keeps the most valuable prefixes materialised within a byte budget. ACID,
 * crash-safe (every put/remove is one LMDB transaction), many readers and one writer at
 * a time, across threads (one handle) and processes (one handle each). */

typedef struct skv_store skv_store;

enum { SKV_STORE_CREATE = 1, SKV_STORE_READONLY = 2 };

typedef struct skv_store_params {
    uint64_t map_size;  /* LMDB map size (upper bound of the store; sparse); 0 = 64 GiB */
    int64_t budget;     /* bytes of materialised KV; < 0: keep the stored one (64 MiB on create) */
    int n_threads;      /* threads for the model runs of put/get; 0 = 1 */
    /* The file m was loaded from, recorded (as an absolute path)
     * when the store is created or, for a store without one, at the next put; NULL = not
     * known. skv_store_model_info reads it back. */
    const char *model_path;
} skv_store_params;

SKV_API skv_store_params skv_store_default_params(void);
/* Opens (or with SKV_STORE_CREATE creates) the store in directory dir for model m (which
 * must outlive the handle). dir may instead name a Redis store shared by many processes
 * and machines: "redis://HOST:PORT/PREFIX" or "unix:///path/redis.sock?prefix=PREFIX",
 * through Sentinel "redis+sentinel://H:P,.../MASTER/PREFIX", on a Redis Cluster
 * "redis+cluster://H:P,.../PREFIX", with "?shards=N" spread over all of its masters
 * (docs/store.md "Redis layout", "One store over all masters"; created on first use). Errors: SKV_ERR_IO (no store there), SKV_ERR_FORMAT (a foreign
 * or damaged file), SKV_ERR_MISMATCH (the store was made with another model: both named). */
SKV_API int skv_store_open(const char *dir, skv_model *m, int flags, const skv_store_params *p, skv_store **out,
                           char *err, size_t errcap);
SKV_API void skv_store_close(skv_store *st);

/* The model a store was made with, read without loading any model (so a caller can open
 * the right one, or say which to pass): the name and fingerprint every open checks, the
 * geometry, and the model file's path when one was recorded (skv_store_params.model_path;
 * "" for stores made without it: then name and fingerprint are all there is). Errors as
 * skv_store_open's (err/errcap: no handle exists). */
typedef struct skv_store_model {
    char name[96];
    uint8_t fingerprint[16];  /* skv_model_fingerprint of the model */
    int n_layer, n_head_kv, head_dim, n_vocab, n_ctx_train;
    char path[4096];          /* absolute path of the model file, or "" */
} skv_store_model;
SKV_API int skv_store_model_info(const char *dir, skv_store_model *out, char *err, size_t errcap);
/* The calling thread's message of its last call on st ("" after a success; threads
 * sharing the handle each read their own). */
SKV_API const char *skv_store_last_error(const skv_store *st);

typedef struct skv_store_put_report {
    uint32_t n_tokens;
    uint32_t n_shared;     /* tokens already stored (longest stored prefix) */
    uint32_t n_loaded;     /* positions loaded from materialised KV to continue from */
    uint32_t n_computed;   /* positions run through the model */
    uint32_t n_materialised, n_demoted; /* nodes the placement policy changed */
    double bits;           /* surprisal of the whole session, bits */
    double seconds;
    int existed;           /* 1: name held these very tokens already (a retry): nothing was written */
    uint32_t n_given;      /* skv_store_put_kv: positions whose KV the caller gave (0: computed) */
} skv_store_put_report;

/* Stores tokens (1 .. model context) under name (1..255 bytes, unique: SKV_ERR_INVALID_ARG
 * if taken by other tokens; a put of the same tokens under the same name succeeds without
 * writing, so a put retried after an error is safe). One transaction: all or nothing. When
 * the connection to a Redis store is lost during the commit, the session record is read
 * back to say truthfully whether it was applied (SKV_OK if it was). rep may be NULL. */
SKV_API int skv_store_put(skv_store *st, const char *name, const int32_t *tokens, size_t n,
                          skv_store_put_report *rep);
/* skv_store_put for a caller that ran the model over tokens already (a server's slot): kv
 * holds the KV of tokens[0, n) as skv_ctx_kv_read gives it (n positions) from a context of
 * the store's model with an F32 cache and no kv_quant that ran exactly these tokens from an
 * empty cache (never near-duplicate reuse), and sur[i], for from <= i < n, the surprisal of
 * tokens[i] as skv_ctx_prefill_surprisal or skv_token_bits over the previous
 * position's logits gives it (sur[0] is never read: the first token has no prediction).
 * The store runs no model: it takes the KV and the surprisals as they are (the caller
 * vouches for them) and stores exactly what skv_store_put would have. When the store holds
 * fewer than `from` of the tokens (its longest stored prefix), the surprisals between are
 * missing and the put runs the model as skv_store_put does (rep->n_given says 0). */
SKV_API int skv_store_put_kv(skv_store *st, const char *name, const int32_t *tokens, size_t n, const float *kv,
                             const float *sur, size_t from, skv_store_put_report *rep);

enum { SKV_STORE_VERIFY = 1 };

typedef struct skv_store_get_report {
    uint32_t n_tokens, n_loaded, n_computed;
    double load_seconds, compute_seconds;
    int verified;          /* 1: the KV digest was checked and matched */
    uint32_t n_materialised; /* nodes of its path the policy materialised from this restore */
} skv_store_get_report;

/* Restores session name into ctx (cleared; kv_quant must be off; capacity >= its length):
 * tokens[0..n) receive its tokens (cap of room; *n_tokens the length, also on
 * SKV_ERR_RANGE). flags: SKV_STORE_VERIFY compares the KV digest (SKV_ERR_MISMATCH).
 * SKV_ERR_INVALID_ARG (with a message) when no such session. Unless the store is
 * read-only, the access is then recorded and the placement policy may materialise nodes
 * of the session's path from ctx (a short write transaction). */
SKV_API int skv_store_get(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap,
                          size_t *n_tokens, skv_store_get_report *rep);

typedef struct skv_store_match_result {
    uint32_t n_matched;    /* longest stored prefix, tokens */
    double bits;           /* its d_T = -log2 P_M(prefix), bits */
    uint32_t n_load, n_compute; /* a restore of that prefix: positions loaded vs recomputed */
} skv_store_match_result;
SKV_API int skv_store_match(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r);

/* Restores into ctx (cleared) the KV of the longest stored prefix of tokens[0..n), whatever
 * session holds it: materialised KV loaded, the rest recomputed from tokens (bit-identical
 * to a prefill of that prefix; at most ctx's capacity). A read transaction: a prompt cache
 * shared by every process on the store (docs/store.md). n_matched 0: nothing stored. */
typedef struct skv_store_prefix_report {
    uint32_t n_matched, n_loaded, n_computed; /* positions ctx holds; of them loaded, recomputed */
    double bits;                              /* d_T of the matched prefix */
    double load_seconds, compute_seconds;
} skv_store_prefix_report;
SKV_API int skv_store_get_prefix(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx,
                                 skv_store_prefix_report *rep);
/* Store-prefix drafts, an skv_draft_fn (restore params draft SKV_DRAFT_EXTERN, draft_user =
 * the skv_store): when the store holds sessions beginning with hist[0..n), up to max of the
 * tokens that follow it there (down the path most stored sessions take); else 0. */
SKV_API size_t skv_store_draft(void *store, const int32_t *hist, size_t n, int32_t *out, size_t max);

/* Removes a session; nodes no other session needs (and their KV) go. */
SKV_API int skv_store_remove(skv_store *st, const char *name);

typedef struct skv_store_session_info {
    const char *name;      /* valid during the callback */
    uint32_t n_tokens;
    uint8_t digest[16];    /* XXH3-128 of the session's KV (skv_ctx_kv_digest) */
    uint64_t put_time;     /* unix seconds */
} skv_store_session_info;
/* Calls cb for each session in name order (one read snapshot) until it returns nonzero. */
SKV_API int skv_store_list(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user);

typedef struct skv_store_stats {
    char model_name[96];
    uint64_t n_sessions, session_tokens;   /* total tokens over all sessions */
    uint64_t n_nodes, unique_positions;    /* trie nodes, sum of their spans */
    double dedup_ratio;                    /* session_tokens / unique_positions */
    uint64_t disk_bytes;                   /* LMDB pages in use x page size */
    uint64_t mat_nodes, mat_positions, mat_bytes; /* materialised KV */
    double bits_per_position;              /* disk_bytes * 8 / session_tokens */
    double token_floor_bits;               /* sum of the unique positions' surprisal */
    double f16_bytes, tq35_bytes;          /* the sessions' KV as f16 / TurboQuant-3.5 */
    /* policy */
    uint64_t budget;
    double prefill_tps;                    /* measured recompute speed, tokens/s */
    double load_bps;                       /* measured KV load speed, bytes/s */
    double prior_weight;                   /* kappa: pseudo-operations given to the model prior */
    uint64_t clock;                        /* operations so far (puts + gets) */
    /* Shared (Redis) stores, whose maxmemory policy may evict any record: each
     * is a miss (recomputed or reported), never a wrong restore. Always 0 for LMDB. */
    uint64_t kv_misses;                    /* materialised KV found evicted: recomputed */
    uint64_t node_misses;                  /* trie nodes / sessions found evicted */
    /* The tier of every node (docs/store.md "Tiers"), indexed by
     * SKV_STORE_TIER_*: nodes, positions and stored bytes (node records, + KV blobs for
     * the materialised tier); the storage price the rule uses and the store's dictionary. */
    uint64_t tier_nodes[4], tier_positions[4], tier_bytes[4];
    double price;                          /* seconds of restore time one stored byte is worth */
    uint64_t dict_id;                      /* dictionary new cheap-coded nodes use (0: none) */
    uint32_t dict_ids;                     /* its length, ids */
    double cm_tps;                         /* measured cheap-coding speed, positions/s (setup included) */
    double cm_bpp;                         /* measured cheap-coded payload bytes per position */
} skv_store_stats;
/* Tiers of a node: materialised KV (+ raw tokens), raw tokens, tokens coded with codec cmv,
 * tokens coded with cmvd primed by a dictionary the store keeps. */
enum { SKV_STORE_TIER_KV, SKV_STORE_TIER_TOKENS, SKV_STORE_TIER_CMV, SKV_STORE_TIER_CMVD };
SKV_API int skv_store_get_stats(skv_store *st, skv_store_stats *s);

typedef struct skv_store_gc_report {
    uint32_t n_demoted;
    uint64_t bytes_freed;
    uint64_t mat_bytes;    /* materialised KV after */
    uint32_t n_materialised; /* nodes materialised (the budget allowed more) */
    uint32_t n_retiered;   /* token-only nodes whose tier the rule changed */
} skv_store_gc_report;
/* Checks the trie's invariants and every stored KV blob, then applies the placement policy
 * in both directions: demotes the lowest-valued nodes while over the budget, and (running
 * the model) materialises the most valuable token-only nodes next to materialised ones
 * while they fit. A damaged trie or blob is SKV_ERR_FORMAT with a message saying what is
 * damaged and how to repair it (damaged KV: gc with budget 0 drops all materialised KV,
 * the sessions stay whole). One write transaction. */
SKV_API int skv_store_gc(skv_store *st, skv_store_gc_report *r);
/* A progress callback for skv_store_put and skv_store_get: called on the calling thread
 * with the positions of the session done so far out of its total (loaded, then computed),
 * a few times a second on long sessions. fn NULL: none (the default). Not stored; set it
 * before the handle is shared by threads (it applies to every thread's calls). */
SKV_API int skv_store_set_progress(skv_store *st, void (*fn)(void *user, uint64_t done, uint64_t total),
                                   void *user);
/* Changes the budget (stored); takes effect at the next put or gc. */
SKV_API int skv_store_set_budget(skv_store *st, uint64_t bytes);
/* The storage price of the tier rule: seconds of restore time one
 * stored byte is worth (> 0, finite; stored; default 2e-5); takes effect as nodes are
 * written and at the next gc. */
SKV_API int skv_store_set_price(skv_store *st, double seconds_per_byte);
/* Trains a cmvd dictionary on the store's own sessions (the trie's unique positions,
 * depth first, at most max_ids ids; 0 = 65536), records it (versioned, checksummed) and
 * makes it the one new cheap-coded nodes are primed with; nodes coded with an older one
 * keep naming theirs. *id / *n_ids (optional) receive it. SKV_ERR_INVALID_ARG on an
 * empty store. */
SKV_API int skv_store_train_dict(skv_store *st, size_t max_ids, uint64_t *id, size_t *n_ids);

/* ---- Near-duplicate reuse (docs/near.md; opt-in, APPROXIMATE) -------------
 * Builds the KV of a NEW token sequence from the stored session that shares the most
 * information with it, not only a prefix: an index of token n-grams over the store finds
 * the sessions sharing long spans; the best one by (bits of the shared spans - bits of the
 * positions left to recompute) is restored (exact, digest verified) and its spans are
 * copied to their new positions (K re-rotated for the position change, V copied). The
 * first positions after each seam, a fraction chosen by a cheap deviation estimate and the
 * last position are recomputed over the cache built so far, in position order.
 * Positions of the common prefix are exact; every other reused position is the donor's KV
 * from ANOTHER context, so the result is not what a fresh prefill gives: the report says
 * so (approximate = 1), the store counts it (skv_store_get_near_stats), and nothing of it
 * is ever stored or materialised. skv_store_get stays exact. */
typedef struct skv_store_near_params {
    double recompute;   /* fraction of all positions to recompute, 0..1 (at least the forced
                         * ones: unmatched, seams, the last); < 0: the default 0.15 */
    double kl_target;   /* > 0: pick the fraction for this mean KL (nats) from the calibration
                         * measured in bench/results/near.md instead of `recompute` */
    int seam;           /* positions recomputed at the start of every reused span; 0: 2, < 0: none */
    int ngram;          /* n-gram length of the index (2..64); 0: 8 */
} skv_store_near_params;
SKV_API skv_store_near_params skv_store_near_default_params(void);

typedef struct skv_store_near_report {
    int approximate;         /* 1: some positions reuse KV computed in another context */
    char donor[256];         /* the session reused; "" when none shared anything (full prefill) */
    uint32_t n_tokens;
    uint32_t n_exact;        /* reused from the common prefix: exact */
    uint32_t n_approx;       /* reused from other positions/contexts: approximate */
    uint32_t n_recomputed;   /* run through the model (unmatched + seams + estimate + last) */
    uint32_t n_seam, n_extra; /* of those: seam positions; chosen by the deviation estimate */
    uint32_t n_spans;        /* matched spans */
    double fraction;         /* the recompute fraction asked for (after kl_target) */
    double shared_bits;      /* the donor's surprisal over the reused positions */
    double donor_seconds, reuse_seconds, compute_seconds;
} skv_store_near_report;

/* Fills ctx (cleared; kv_quant off; capacity >= n) with an approximate KV of tokens[0..n)
 * as above. logits: NULL or room for n_vocab floats, the last position's next-token logits.
 * With no stored session sharing anything, a plain prefill (approximate = 0). Errors:
 * SKV_ERR_INVALID_ARG (arguments, out-of-range tokens), SKV_ERR_RANGE (n > the context),
 * the restore's and the model's errors. Unless the store is read-only, the call is counted
 * in the store's near-reuse record (a short write transaction). rep may be NULL. */
SKV_API int skv_store_get_near(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx,
                               const skv_store_near_params *p, float *logits, skv_store_near_report *rep);

typedef struct skv_store_near_stats {
    uint64_t n_gets;          /* skv_store_get_near calls counted */
    uint64_t n_approximate;   /* of those, marked approximate */
    uint64_t positions_exact, positions_approx, positions_recomputed;
} skv_store_near_stats;
/* The store's near-reuse record (all zero when none was ever written). */
SKV_API int skv_store_get_near_stats(skv_store *st, skv_store_near_stats *s);

/* ---- Compatibility names ------------------------------------------------------------
 * Earlier names of calls that now carry their object's prefix (docs/api-history.md). Each
 * is an exported function that does exactly what its new name does, so programs built
 * against an older seqkv.h keep linking and running; new code uses the new names. */
SKV_API int skv_prefill(skv_ctx *c, const int32_t *tokens, size_t n, int logits_mode,
                        float *logits);                               /* skv_ctx_prefill */
SKV_API int skv_decode(skv_ctx *c, int32_t token, float *logits);   /* skv_ctx_decode */
SKV_API int skv_decode_multi(skv_ctx *const *ctxs, const int32_t *tokens, size_t n,
                             float *logits);                          /* skv_ctx_decode_multi */
SKV_API int skv_tokenize(const skv_model *m, const char *text, size_t len, int add_special,
                         int32_t *out, size_t cap, size_t *n_out);    /* skv_model_tokenize */
SKV_API int skv_token_piece(const skv_model *m, int32_t token, char *buf, size_t cap,
                            size_t *len);                             /* skv_model_token_piece */
SKV_API int skv_token_text(const skv_model *m, int32_t token, const char **text,
                           size_t *len);                              /* skv_model_token_text */
SKV_API int skv_detokenize(const skv_model *m, const int32_t *tokens, size_t n, int flags,
                           char *text, size_t cap, size_t *len);      /* skv_model_detokenize */

/* @@API-END@@ */
#ifdef __cplusplus
}
#endif
#endif /* SEQKV_H */
