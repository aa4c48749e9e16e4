/* Fuzz target for the range coder and probq.
 *
 * Input: 4 header bytes, then a body.
 *   h[0] bit 0: logits from raw float bits of the body (NaN/Inf must be
 *               rejected; then int8 logits are used instead)
 *        bit 1: also decode with a non-power-of-two model (get_freq path)
 *        bit 2: interleave raw bits in the round trip
 *   h[1] % 13 + 16: total_bits;  h[2..3]: vocabulary size 1 + (v % 4096 >> (v >> 12)),
 *               v = h[2] | h[3] << 8: 1..4096, smaller sizes more often (15 of 16 values
 *               of the top nibble shift the size down: each input costs about its size)
 * (a) The body is decoded as a stream: every decoded symbol must lie in
 *     range and its interval must hold the target; update must accept it. Past the
 *     body the decoder reads zeros: decoding stops TAIL bytes after a real stream's
 *     end (MAXSYM symbols of zeros cost most of the time on short bodies and add
 *     nothing the first TAIL bytes of zeros do not).
 * (b) Symbols derived from the body are encoded and decoded back: any
 *     mismatch aborts. Encoding into one byte less than needed must fail
 *     with SKV_ERR_RANGE without writing outside the buffer (ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coder/probq.h"
#include "coder/rangecoder.h"

#define MAXV 4096
#define MAXSYM 600
#define TAIL 8 /* virtual zero bytes decoded beyond a stream's end (SKV_RC_INIT_BYTES) */

static float logits[MAXV];
static uint32_t freq[MAXV], cum[MAXV + 1], freq2[MAXV], cum2[MAXV + 1];
static uint32_t syms[MAXSYM], raw[MAXSYM];

static void make_logits(const uint8_t *body, size_t size, size_t n, int raw_bits)
{
    for (size_t i = 0; i < n; i++) {
        if (size == 0) {
            logits[i] = 0.0f;
        } else if (raw_bits) {
            uint8_t b[4];
            for (int k = 0; k < 4; k++) b[k] = body[(4 * i + (size_t)k) % size];
            memcpy(&logits[i], b, sizeof b);
        } else {
            logits[i] = (float)(int8_t)body[i % size] * 0.25f;
        }
    }
}

/* (a): decode arbitrary bytes; returns nothing, aborts on an inconsistency. */
static void decode_garbage(const uint8_t *body, size_t size, size_t n, unsigned bits,
                           const uint32_t *f, const uint32_t *c, int pow2)
{
    skv_rangecoder_dec d;
    skv_rangecoder_dec_init(&d, body, size);
    for (int i = 0; i < MAXSYM && d.pos <= size + SKV_RC_INIT_BYTES + TAIL; i++) {
        uint32_t t = 0;
        size_t s;
        int st = pow2 ? skv_rangecoder_dec_get_freq_pow2(&d, bits, &t)
                      : skv_rangecoder_dec_get_freq(&d, c[n], &t);
        if (st != SKV_OK) {
            if (st != SKV_ERR_FORMAT) abort();
            return;
        }
        if (t >= c[n]) abort();
        s = skv_probq_find(c, n, t);
        if (s >= n || c[s] > t || t - c[s] >= f[s]) abort();
        if (skv_rangecoder_dec_update(&d, c[s], f[s]) != SKV_OK) abort();
    }
    (void)skv_rangecoder_dec_finish(&d);
}

static int encode(uint8_t *dst, size_t cap, size_t nsym, unsigned bits, int with_raw, size_t *size)
{
    skv_rangecoder_enc e;
    int st = SKV_OK;
    skv_rangecoder_enc_init(&e, dst, cap);
    for (size_t i = 0; i < nsym && st == SKV_OK; i++) {
        st = skv_rangecoder_enc_put_pow2(&e, cum[syms[i]], freq[syms[i]], bits);
        if (st == SKV_OK && with_raw) st = skv_rangecoder_enc_put_bits(&e, raw[i], (unsigned)(i % 33));
    }
    return st != SKV_OK ? st : skv_rangecoder_enc_finish(&e, size);
}

/* (b): round trip. */
static void roundtrip(const uint8_t *body, size_t size, size_t n, unsigned bits, int with_raw)
{
    size_t nsym = size < MAXSYM ? size : MAXSYM, cap, len = 0, len2 = 0;
    uint8_t *buf;
    skv_rangecoder_dec d;
    for (size_t i = 0; i < nsym; i++) {
        uint32_t x = (uint32_t)body[i] * 2654435761u ^ (uint32_t)i * 40503u;
        unsigned w = (unsigned)(i % 33);
        syms[i] = (body[i] & 1) ? (uint32_t)(x % n) /* any symbol, likely or not */
                                : (uint32_t)skv_probq_find(cum, n, x >> (32 - bits)); /* by mass */
        raw[i] = w == 32 ? x : (uint32_t)(x & (((uint32_t)1 << w) - 1));
    }
    cap = skv_rangecoder_bound(nsym, bits) + (with_raw ? skv_rangecoder_bound(nsym, 32) : 0);
    if (!(buf = malloc(cap))) return;
    if (encode(buf, cap, nsym, bits, with_raw, &len) != SKV_OK) abort();
    skv_rangecoder_dec_init(&d, buf, len);
    for (size_t i = 0; i < nsym; i++) {
        uint32_t t = 0, v = 0;
        size_t s;
        if (skv_rangecoder_dec_get_freq_pow2(&d, bits, &t) != SKV_OK) abort();
        s = skv_probq_find(cum, n, t);
        if (s != syms[i] || skv_rangecoder_dec_update(&d, cum[s], freq[s]) != SKV_OK) abort();
        if (with_raw) {
            if (skv_rangecoder_dec_get_bits(&d, (unsigned)(i % 33), &v) != SKV_OK || v != raw[i]) abort();
        }
    }
    if (skv_rangecoder_dec_finish(&d) != SKV_OK) abort();
    free(buf);
    if (len > 0) { /* one byte short: clean failure, nothing written outside */
        if (!(buf = malloc(len - 1 > 0 ? len - 1 : 1))) return;
        if (encode(buf, len - 1, nsym, bits, with_raw, &len2) != SKV_ERR_RANGE) abort();
        free(buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *body = data + 4;
    size_t n, bsize;
    unsigned bits;
    int st;
    if (size < 4) return 0;
    bits = 16 + data[1] % 13;
    n = (size_t)data[2] | (size_t)data[3] << 8;
    n = 1 + ((n % MAXV) >> (n >> 12));
    bsize = size - 4;

    make_logits(body, bsize, n, data[0] & 1);
    st = skv_probq_freqs(logits, n, bits, freq, cum);
    if (st == SKV_ERR_INVALID_ARG && (data[0] & 1)) {
        make_logits(body, bsize, n, 0);
        st = skv_probq_freqs(logits, n, bits, freq, cum);
    }
    if (st != SKV_OK || cum[n] != ((uint32_t)1 << bits)) abort();
    for (size_t i = 0; i < n; i++)
        if (freq[i] == 0) abort();

    decode_garbage(body, bsize, n, bits, freq, cum, 1);
    if (data[0] & 2) { /* a model with a non-power-of-two total */
        for (size_t i = 0; i < n; i++) freq2[i] = 1 + (bsize ? body[i % bsize] : 0) * (uint32_t)(i % 7 + 1);
        if (skv_probq_cum(freq2, n, cum2) != SKV_OK) abort();
        decode_garbage(body, bsize, n, bits, freq2, cum2, 0);
    }
    roundtrip(body, bsize, n, bits, (data[0] & 4) != 0);
    return 0;
}
