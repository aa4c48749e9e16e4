/* Fuzz target for the transform KV coder (src/container/kvtc*.c).
 *
 * Input: byte 0 picks the calibration (bit 0: K's RoPE undone, and step weights 0.5 and 2
 * (a version 2 file), or neither; both built once from fixed synthetic data, 1 layer x 1 KV
 * head x head_dim 8), the rest is a payload. Seed calibration_v2: a version 2 image.
 * (a) The payload is decoded as a stream. Streams carry an XXH3-64 over header and body,
 *     which random bytes never match, so the harness first writes the calibration's id,
 *     the body length and the checksum into the header (when it is long enough): the
 *     decoder's side and stream checks are what get fuzzed. Every call must return SKV_OK,
 *     SKV_ERR_FORMAT, SKV_ERR_MISMATCH or SKV_ERR_RANGE, and every decoded value be finite.
 * (b) The payload is parsed as a calibration image (its checksum fixed up the same way):
 *     SKV_OK or SKV_ERR_FORMAT only.
 * (c) A small KV made from the bytes is encoded (predictor, ramp, steps from the first
 *     bytes) and decoded: the decode must equal the encoder's reconstruction bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "container/kvtc.h"
#include "core/util.h"
#include "seqkv.h"

#define D 8
#define MAX_POS 64

static skv_kvtc_calib *cal[2];

static skv_kvtc_calib *build(int rope)
{
    static float kv[2 * 200 * D];
    skv_kvtc_calib *c = NULL;
    uint32_t r = 12345;
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++) {
        r = r * 1103515245u + 12345u;
        kv[i] = (float)((r >> 16) & 1023) / 256.0f - 2.0f + (float)(i % D) * 0.25f;
    }
    static const float w[2] = {0.5f, 2.0f}; /* the RoPE one also carries step weights (version 2) */
    if (skv_kvtc_calib_create(1, 1, D, &c) || (rope && skv_kvtc_calib_set_rope(c, SKV_KVTC_ROPE_PAIRS, D, 100.0f)) ||
        skv_kvtc_calib_add(c, kv, 200) || skv_kvtc_calib_finish(c) || (rope && skv_kvtc_calib_set_weights(c, w)))
        abort();
    return c;
}

static void decode_stream(const skv_kvtc_calib *c, const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1);
    float *kv = malloc(2 * MAX_POS * D * sizeof *kv);
    int32_t tok[MAX_POS];
    if (!p || !kv) abort();
    memcpy(p, data, size);
    if (size >= SKV_KVTC_HDR) {
        skv_wr64(p + 8, skv_kvtc_calib_id(c));
        skv_wr64(p + 32, size - SKV_KVTC_HDR);
        skv_wr64(p + 48, XXH3_64bits_withSeed(p + SKV_KVTC_HDR, size - SKV_KVTC_HDR, XXH3_64bits(p, 48)));
    }
    for (size_t t = 0; t < MAX_POS; t++) tok[t] = (int32_t)(t < size ? data[t] & 7 : 0);
    size_t n = 0;
    uint64_t id = 0;
    int rc = skv_kvtc_peek(p, size, &n, &id, NULL), decoded = 0;
    if (!rc && n <= MAX_POS) rc = skv_kvtc_decode(p, size, c, tok, kv, 2 * MAX_POS * D, NULL), decoded = 1;
    if (rc != SKV_OK && rc != SKV_ERR_FORMAT && rc != SKV_ERR_MISMATCH && rc != SKV_ERR_RANGE) abort();
    for (size_t i = 0; decoded && rc == SKV_OK && i < 2 * n * D; i++)
        if (!isfinite(kv[i])) abort();
    free(p), free(kv);
}

static void load_calib(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1);
    skv_kvtc_calib *c = NULL;
    if (!p) abort();
    memcpy(p, data, size);
    if (size >= SKV_KVTC_CAL_HDR + 8) skv_wr64(p + size - 8, XXH3_64bits(p, size - 8));
    int rc = skv_kvtc_calib_load(p, size, &c, NULL);
    if (rc != SKV_OK && rc != SKV_ERR_FORMAT) abort();
    skv_kvtc_calib_free(c);
    free(p);
}

static void roundtrip(const skv_kvtc_calib *c, const uint8_t *data, size_t size)
{
    if (size < 6) return;
    size_t n = 1 + data[0] % MAX_POS, nf = 2 * n * D;
    float kv[2 * MAX_POS * D], deq[2 * MAX_POS * D], out[2 * MAX_POS * D];
    int32_t tok[MAX_POS];
    skv_kvtc_params p = {.predictor = data[1] & 1, .ramp = (data[1] >> 1) & 1, .theta = (float)(data[1] >> 2) / 16.0f,
                         .step = {0.01f + (float)data[2] / 32.0f, 0.01f + (float)data[3] / 32.0f}, .tokens = tok,
                         .pos0 = (uint32_t)data[4] * 997u};
    for (size_t t = 0; t < n; t++) tok[t] = data[(4 + t) % size] & 7;
    for (size_t i = 0; i < nf; i++) kv[i] = (float)((int)data[(5 + i) % size] - 128) / 32.0f + (float)(i % D) * 0.25f;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (skv_kvtc_encode(&p, c, kv, n, &buf, &len, deq) == SKV_OK) {
        if (skv_kvtc_decode(buf, len, c, tok, out, nf, NULL) != SKV_OK || memcmp(out, deq, nf * sizeof *out)) abort();
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!cal[0]) cal[0] = build(0), cal[1] = build(1);
    const skv_kvtc_calib *c = cal[data[0] & 1];
    decode_stream(c, data + 1, size - 1);
    load_calib(data + 1, size - 1);
    roundtrip(c, data + 1, size - 1);
    return 0;
}
