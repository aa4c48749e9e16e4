/* Fuzz target for the predictive KV coder (src/container/kvpred.c).
 *
 * Input: 1 byte n_pos - 1 (n_pos 1..64), then a payload: SKVP sub-header (64 bytes), a
 * token region (tokens_bytes; each byte is one token id, padded with 0), side, stream.
 * (a) The payload is parsed and decoded: every call must return SKV_OK, SKV_ERR_FORMAT or
 *     SKV_ERR_RANGE (an output above the fuzzer's cap), and every decoded value must be
 *     finite.
 * (b) A small KV made from the input bytes (geometry, predictor, steps, levels or
 *     surprisals, layer 0 stored or not, residuals rotated or not, from the first bytes) is
 *     encoded and decoded: the decode must equal the encoder's reconstruction bit for bit
 *     (layers 1.. when layer 0 is not stored). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "container/kvpred.h"
#include "seqkv.h"

#define MAX_FLOATS (1u << 18)

static void decode_payload(const uint8_t *p, size_t size, size_t n_pos)
{
    skv_kvp_header h;
    if (skv_kvp_header_parse(p, size, &h, NULL)) return;
    size_t nf = (size_t)h.n_layer * 2 * h.n_head_kv * h.head_dim * n_pos;
    if (nf > MAX_FLOATS) return;
    int32_t tok[64] = {0};
    for (size_t t = 0; t < n_pos && t < h.tokens_bytes; t++) tok[t] = p[SKV_KVP_HDR + t];
    float *kv = malloc((nf ? nf : 1) * sizeof *kv);
    if (!kv) return;
    const uint8_t *body = p + SKV_KVP_HDR + h.tokens_bytes;
    int rc = skv_kvp_decode(&h, body, (size_t)(h.side_bytes + h.stream_bytes), n_pos, tok, kv, nf);
    if (rc != SKV_OK && rc != SKV_ERR_FORMAT && rc != SKV_ERR_RANGE && rc != SKV_ERR_NOMEM) abort();
    for (size_t i = 0; rc == SKV_OK && i < nf; i++)
        if (!isfinite(kv[i])) abort();
    free(kv);
}

static void roundtrip(const uint8_t *data, size_t size)
{
    if (size < 8) return;
    uint32_t L = 1 + (data[0] & 1), H = 1 + ((data[0] >> 1) & 1), d = 2 * (1 + (data[1] & 7));
    size_t n = 1 + data[2] % 32, nf = (size_t)L * 2 * H * d * n;
    int32_t tok[32];
    uint8_t lv[32];
    float sur[32];
    float *kv = malloc(nf * sizeof *kv), *deq = malloc(nf * sizeof *deq), *out = malloc(nf * sizeof *out);
    skv_kvp_params p = {.predictor = data[3] % SKV_KVP_N_PRED, .step = {0.01f + (float)data[4] / 64.0f, 0.02f + (float)data[5] / 64.0f},
                        .level = (data[6] & 1) ? lv : NULL, .tokens = tok, .layer0 = L == 2 && (data[6] & 2),
                        .surprisal = (data[6] & 5) == 4 ? sur : NULL, .rot = (data[6] & 8) != 0};
    for (size_t t = 0; t < n; t++) tok[t] = data[(7 + t) % size] & 7, lv[t] = (uint8_t)(data[(9 + t) % size] % 9);
    for (size_t t = 0; t < n; t++) sur[t] = (float)data[(10 + t) % size] / 16.0f;
    for (size_t i = 0; kv && i < nf; i++) kv[i] = (float)((int)data[(8 + i) % size] - 128) / 16.0f + (float)(i % 5);
    uint8_t *body = NULL;
    size_t len = 0;
    skv_kvp_header h;
    size_t l0 = p.layer0 ? nf / L : 0; /* layer 0 not stored: decoded as zeros, deq holds kv's */
    if (kv && deq && out && skv_kvp_encode(&p, L, H, d, kv, n, &body, &len, &h, deq) == SKV_OK) {
        if (skv_kvp_decode(&h, body, len, n, tok, out, nf) != SKV_OK || memcmp(out + l0, deq + l0, (nf - l0) * sizeof *out))
            abort();
        if (l0 && memcmp(deq, kv, l0 * sizeof *kv)) abort();
    }
    free(body), free(kv), free(deq), free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    decode_payload(data + 1, size - 1, 1 + (size_t)(data[0] & 63));
    roundtrip(data, size);
    return 0;
}
