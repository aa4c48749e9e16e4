/* A block of KV positions stored with a per-vector scheme (src/quant.h): the
 * serialized form of the quantized-KV payloads of .skv sessions (docs/format.md
 * section 2.3).
 *
 * READ ME FIRST
 * - Byte layout of n_pos positions: the canonical KV order (layer, kind, kv_head,
 *   position) of head vectors, each encoded alone as skv_quant_bytes(scheme[kind],
 *   head_dim) bytes, back to back, no padding:
 *       for layer: for kind K, V: for kv_head: for position: encoded vector
 *   So the block of one (layer, kind) is n_head_kv * n_pos vectors, exactly the
 *   [kv_head][pos][dim] floats skv_ctx_kv_read gives for that (layer, kind).
 * - The quantizer of (layer, kind) has seed skv_kvquant_seed(seed, layer, kind), the
 *   convention of the engine's quantized cache (src/kvquant.c): with seed 0 a decoded
 *   block equals skv_kv_quant_roundtrip() of the exact KV bit for bit.
 * - The sub-header (SKV_KVC_HDR bytes) names the schemes, seed, geometry and the byte
 *   sizes of the two parts that follow it; skv_kvc_header_parse checks everything a
 *   reader can check without the data.
 * - Encoding fails (no fallback) on a vector the scheme cannot code (non-finite, fp16
 *   overflow): a file stores only what its scheme can say.
 */
#ifndef SKV_KVCODEC_H
#define SKV_KVCODEC_H

#include <stddef.h>
#include <stdint.h>
#include "core/util.h"

#define SKV_KVC_HDR 56          /* bytes of the KV sub-header */
#define SKV_KVC_MAX_LAYERS 4096 /* geometry limits a reader accepts */
#define SKV_KVC_MAX_HEADS 4096

/* The KV sub-header of one quantized-KV segment payload. */
typedef struct skv_kvc_header {
    int scheme[2];          /* skv_quant ids for K and V */
    uint32_t n_layer, n_head_kv, head_dim;
    uint64_t seed;          /* base seed: quantizer of (layer, kind) = skv_kvquant_seed(seed, layer, kind) */
    uint64_t tokens_bytes;  /* the zstd token frame that follows the sub-header */
    uint64_t kv_bytes;      /* the encoded KV that follows the tokens */
    float rel_mse[2];       /* informational: sum |x - x~|^2 / sum |x|^2 over the segment, K and V */
} skv_kvc_header;

/* Writes h to out[SKV_KVC_HDR]. */
void skv_kvc_header_write(const skv_kvc_header *h, uint8_t *out);
/* Reads and validates a sub-header from p[0..size): magic, size, schemes, geometry, the
 * sizes (tokens_bytes + kv_bytes == size - SKV_KVC_HDR, kv_bytes == n_pos * bytes per
 * position). SKV_OK or SKV_ERR_FORMAT with a message (no "not a valid" prefix). */
int skv_kvc_header_parse(const uint8_t *p, size_t size, uint32_t n_pos, skv_kvc_header *h, skv_err *err);

/* Encoded bytes of one position (all layers, K and V, all KV heads); 0 if the schemes do
 * not support head_dim or the size overflows. */
size_t skv_kvc_position_bytes(const int scheme[2], uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim);

/* What a model-free decoder may spend building quantizers (mostly the head_dim^2 QJL
 * matrix of each tq*p (layer, kind)): at most the larger of a floor that covers every
 * real model's single-token session and a multiple of the payload bytes. A header that
 * asks for more is refused before anything is built; with the model (whose geometry the
 * header must match) the model's own size bounds it instead. */
#define SKV_KVC_SETUP_FLOOR ((uint64_t)1 << 24) /* table entries (~0.5 s, never all held) */
#define SKV_KVC_SETUP_PER_BYTE 16u             /* table entries per byte of encoded KV */

/* Table entries building the quantizers of every (layer, kind) of a geometry takes. */
uint64_t skv_kvc_setup_entries(const int scheme[2], uint32_t n_layer, uint32_t head_dim);
/* SKV_OK, or SKV_ERR_RANGE with a message when h's setup exceeds the limit above. */
int skv_kvc_check_budget(const skv_kvc_header *h, skv_err *err);

/* Quantizers for one (schemes, seed, geometry), built on first use: encode keeps the
 * ones it builds (for the next segments), decode builds one per (layer, kind) block and
 * frees it, so a decoder holds one quantizer's tables at a time. One thread at a time. */
typedef struct skv_kvcodec skv_kvcodec;

/* SKV_ERR_INVALID_ARG (bad scheme/geometry), SKV_ERR_RANGE (head_dim unsupported), SKV_ERR_NOMEM. */
int skv_kvcodec_create(skv_kvcodec **out, const int scheme[2], uint64_t seed, uint32_t n_layer,
                       uint32_t n_head_kv, uint32_t head_dim);
void skv_kvcodec_free(skv_kvcodec *c);
size_t skv_kvcodec_position_bytes(const skv_kvcodec *c);

/* kv: canonical f32 of n_pos positions -> dst (n_pos * position bytes). deq (optional,
 * same size as kv) receives the decoded values; rel_mse (optional) the relative squared
 * error per kind. Errors: SKV_ERR_RANGE (dst too small, fp16 overflow), SKV_ERR_INVALID_ARG
 * (non-finite values), SKV_ERR_NOMEM. */
int skv_kvcodec_encode(skv_kvcodec *c, const float *kv, size_t n_pos, uint8_t *dst, size_t dst_cap,
                       float *deq, double rel_mse[2]);
/* src (exactly n_pos * position bytes) -> kv (canonical f32, kv_cap floats). SKV_ERR_FORMAT
 * for invalid bytes (a non-finite norm, non-zero padding), SKV_ERR_RANGE for a short buffer. */
int skv_kvcodec_decode(skv_kvcodec *c, const uint8_t *src, size_t src_size, size_t n_pos, float *kv,
                       size_t kv_cap);

#endif
