/* Quantized KV cache for the engine: which (layer, kind) vectors are held
 * quantized, with what scheme, and the per-vector round trip itself.
 *
 * READ ME FIRST
 * - The engine keeps its f32 cache exact and gives attention a second view in
 *   which every row that "would be stored quantized" has been replaced by its
 *   quantize -> dequantize round trip (src/quant.h).  Attention therefore runs
 *   on exactly the values a quantized cache would hold.  Memory is not saved
 *   (docs/kvquant.md: future work).
 * - A spec string fixes everything (grammar in skv_kvquant_parse).  Kinds or
 *   layers it does not quantize are untouched; a kind given as "f32" goes
 *   through the (lossless) round trip, which tests use to prove the plumbing
 *   changes nothing.
 * - Round trips are deterministic: one quantizer per (layer, kind) with seed
 *   skv_kvquant_seed(spec seed, layer, kind); each head vector is coded alone,
 *   so a stored value never depends on batching.
 */
#ifndef SKV_KVQUANT_H
#define SKV_KVQUANT_H

#include <stddef.h>
#include <stdint.h>
#include "core/util.h"

enum { SKV_KVQ_K = 0, SKV_KVQ_V = 1 };

#define SKV_KVQ_MAX_LAYERS 65536 /* bound on keep-first / keep-last */
#define SKV_KVQ_MAX_WINDOW (1 << 24)

typedef struct skv_kvq_spec {
    int scheme[2];          /* per kind (SKV_KVQ_K, SKV_KVQ_V): a skv_quant scheme id, -1 = not quantized */
    int keep_first;         /* first layers kept in full precision */
    int keep_last;          /* last layers kept in full precision */
    int window;             /* most recent positions kept in full precision (0: none) */
    uint64_t seed;          /* base seed of the tq rotations / QJL matrices */
} skv_kvq_spec;

/* Parses a spec: comma-separated items, no spaces, each one of
 *   k=SCHEME  v=SCHEME  kv=SCHEME  SCHEME (= kv=SCHEME)
 *   keep-first=N  keep-last=N  window=N  seed=N
 * SCHEME is a skv_quant name (f32 f16 q8_0 q4_0 tq1..tq4 tq2p..tq4p).  A key
 * may appear once.  At least one kind must be given.  Returns SKV_OK or
 * SKV_ERR_INVALID_ARG with a message in err (may be NULL). */
int skv_kvquant_parse(const char *s, skv_kvq_spec *out, skv_err *err);
/* The spec parses and, head_dim >= 0, each of its schemes takes vectors of head_dim
 * (skv_kv_quant_check's work; the engine supplies the model's head size). */
int skv_kvquant_check(const char *spec, int head_dim, skv_err *err);

/* Canonical text of a spec ("k=tq4,v=tq3,keep-first=1,keep-last=0,window=64,seed=0"). */
int skv_kvquant_format(const skv_kvq_spec *spec, char *buf, size_t cap);

/* The seed of the quantizer of (layer, kind). */
uint64_t skv_kvquant_seed(uint64_t base, int layer, int kind);

/* Per-context state: quantizers for the active (layer, kind) pairs. */
typedef struct skv_kvquant skv_kvquant;

/* Checks the spec against the model shape (head_dim supported by the
 * schemes) and builds the quantizers.  SKV_ERR_INVALID_ARG / SKV_ERR_RANGE
 * (head_dim unsupported) / SKV_ERR_NOMEM. */
int skv_kvquant_create(skv_kvquant **out, const skv_kvq_spec *spec, int n_layer, size_t head_dim);
void skv_kvquant_free(skv_kvquant *q);
const skv_kvq_spec *skv_kvquant_spec(const skv_kvquant *q);

/* 1 when rows of (layer, kind) are replaced by their round trip. */
int skv_kvquant_active(const skv_kvquant *q, int layer, int kind);
/* 1 when any kind of the layer is active. */
int skv_kvquant_layer_active(const skv_kvquant *q, int layer);

/* y[0..hd) = dequant(quant(x)) for the quantizer of (layer, kind); x and y
 * may alias.  Uses the handle's scratch: one thread at a time.  When the
 * vector cannot be coded (non-finite, or an fp16 norm/scale overflow) y = x
 * and the handle's fallback count is incremented; returns SKV_OK then too,
 * SKV_ERR_INVALID_ARG only for an inactive pair or bad arguments. */
int skv_kvquant_roundtrip(skv_kvquant *q, int layer, int kind, const float *x, float *y);
/* Number of vectors left in full precision because they could not be coded. */
uint64_t skv_kvquant_fallbacks(const skv_kvquant *q);

#endif
