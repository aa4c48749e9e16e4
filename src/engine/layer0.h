/* Layer 0's K/V regenerated from the tokens and their positions alone (src/engine/forward.c).
 *
 * The first layer's keys and values of a position are a function of that token and its
 * position only: embedding, the attention norm, the K/V projections (with their biases
 * and K norm) and RoPE of K -- no attention, nothing from other positions. This computes
 * exactly those operations with the engine's own kernels, so the result is bit for bit
 * the layer-0 rows a prefill leaves in the cache (tests/test_layer0.c). It is what lets
 * codec pred omit layer 0 (docs/format.md section 2.5, flag bit 1). */
#ifndef SKV_ENGINE_LAYER0_H
#define SKV_ENGINE_LAYER0_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

/* kv = layer 0 of the canonical KV order of skv_ctx_kv_read for tokens[0..n) at positions
 * p0 .. p0 + n - 1: [kind K, V][kv head][n][head_dim], 2 * n_head_kv * n * head_dim floats.
 * Uses c's scratch buffers only (its cache and n_pos are untouched). SKV_ERR_INVALID_ARG
 * (NULL, negative p0, a token outside the vocabulary), SKV_ERR_RANGE (past c's n_ctx). */
int skv_ctx_layer0_kv(skv_ctx *c, const int32_t *tokens, size_t n, int p0, float *kv);

#endif
