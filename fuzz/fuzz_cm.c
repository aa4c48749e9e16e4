/* Fuzz target for the context-mixing token model (src/coder/cm.c).
 *
 * Input: 4 header bytes, then a body.
 *   h[0..1]: vocabulary size 1..65536 (h[3] bit 0: times 256, up to 2^24)
 *   h[2]:    ids to decode, 1..256
 * (a) The body is decoded as a cm stream of that many ids: every call must return
 *     SKV_OK or SKV_ERR_FORMAT, and every decoded id must be < V.
 * (b) Whatever was decoded (or the body's bytes as ids when decoding failed) is encoded
 *     and decoded back: any difference aborts. Encoding into one byte less than the
 *     stream needs must fail with SKV_ERR_RANGE without writing outside (ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coder/cm.h"

#define MAXN 256

static void check_roundtrip(const int32_t *t, size_t n, uint32_t V)
{
    size_t cap = skv_cm_bound(n, V), size = 0;
    uint8_t *buf = malloc(cap), *tight;
    int32_t back[MAXN];
    if (!buf) return;
    if (skv_cm_encode_tokens(t, n, V, buf, cap, &size) != SKV_OK) abort();
    if (skv_cm_decode_tokens(buf, size, n, V, back) != SKV_OK || memcmp(back, t, n * sizeof *t)) abort();
    if (size > 0 && (tight = malloc(size - 1 ? size - 1 : 1)) != NULL) {
        size_t s2 = 0;
        if (skv_cm_encode_tokens(t, n, V, tight, size - 1, &s2) != SKV_ERR_RANGE) abort();
        free(tight);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t tok[MAXN];
    if (size < 4) return 0;
    uint32_t V = ((uint32_t)data[0] | (uint32_t)data[1] << 8) + 1;
    if (data[3] & 1) V = V * 256 > SKV_CM_MAX_VOCAB ? SKV_CM_MAX_VOCAB : V * 256;
    size_t n = (size_t)data[2] + 1;
    int rc = skv_cm_decode_tokens(data + 4, size - 4, n, V, tok);
    if (rc != SKV_OK && rc != SKV_ERR_FORMAT && rc != SKV_ERR_NOMEM) abort();
    for (size_t i = 0; rc == SKV_OK && i < n; i++)
        if (tok[i] < 0 || (uint32_t)tok[i] >= V) abort();
    for (size_t i = 0; rc != SKV_OK && i < n; i++) tok[i] = size > 4 ? (int32_t)(data[4 + i % (size - 4)] % V) : 0;
    check_roundtrip(tok, n, V);
    return 0;
}
