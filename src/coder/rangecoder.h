/* rangecoder.h - a byte-oriented range coder (integer arithmetic coder).
 *
 * Encodes a sequence of symbols, each given as an interval [cum, cum + freq)
 * of a scale `total`, into bytes; the decoder, driven with the same sequence
 * of totals, recovers the intervals. Depends on nothing but libc. The hot
 * paths are static inline over an explicit state struct; docs/coder.md
 * specifies the byte stream.
 *
 * ============================ READ ME FIRST ============================
 *  1. Symbols: 1 <= total <= 2^32 - 1 (put_pow2/get_freq_pow2: total =
 *     2^bits, bits <= 32), freq >= 1, cum + freq <= total. Anything else is
 *     SKV_ERR_INVALID_ARG. The probability model is the caller's business;
 *     encoder and decoder must see exactly the same (cum, freq, total).
 *  2. Decoding one symbol is TWO calls, in this order, exactly once each:
 *     get_freq(total) -> target in [0, total); find the symbol whose
 *     interval holds target; update(cum, freq). get_freq remembers
 *     range/total in the state for update (calling it again before update
 *     just recomputes it); update without a get_freq is an error.
 *  3. The stream is not self-delimiting: store its byte count. The decoder
 *     reads zeros past the end of src (never memory), so a truncated or
 *     corrupted stream decodes to garbage *within range* or to
 *     SKV_ERR_FORMAT (get_freq sees target >= total); dec_finish() then
 *     checks the byte count against what was consumed.
 *  4. Carries propagate backwards into bytes already in dst: dst[0..pos)
 *     is not final before enc_finish(). Do not stream it out early.
 *  5. Bounded output: the encoder never writes at or past dst + capacity;
 *     when it would, it fails with SKV_ERR_RANGE. Size dst with
 *     skv_rangecoder_bound() to make that impossible.
 *  6. Errors are sticky: after the first failure every call returns it.
 *     Once enc_finish() succeeded, further puts return SKV_ERR_INVALID_ARG.
 *  7. Uniform raw bits: put_bits(v, n) == put_pow2(v, 1, n), n <= 32.
 * =======================================================================
 *
 * Derivation. The code is a number V in [0, 1), written as bytes, most
 * significant first. The encoder keeps the interval [L, L + R) of numbers
 * that still encode the symbols seen so far; in units of 2^-(56 + 8*pos)
 * (pos = bytes already emitted), L = bytes_emitted . low and R = range.
 * Coding [cum, cum + freq) of total:
 *     r     = floor(range / total)        (r >= 2^16, see below)
 *     low  += r * cum
 *     range = r * freq
 * which nests the new interval inside the old one, since r * total <=
 * range. The slice [r * total, range) is never used: that truncation costs
 * log2(range / (r * total)) < -log2(1 - total / range) bits per symbol.
 * Normalisation keeps range in [2^48, 2^56] between calls (shift out the
 * top byte of the 56-bit window while range < 2^48), so with total < 2^32
 * the waste is < -log2(1 - 2^-16) = 2.2e-5 bits per symbol (8.6e-8 bits at
 * total = 2^24). If low + r * cum reaches 2^56 a carry ripples into the
 * emitted bytes (...xx FF FF -> ...xx+1 00 00); it can never ripple past
 * dst[0] because [L, L + R) stays inside the initial [0, 1).
 * The decoder tracks code = V - L (the offset of V inside the interval)
 * instead of L: target = floor(code / r) is the scaled symbol value, and
 * code -= r * cum, range = r * freq mirror the encoder; it shifts in one
 * byte whenever the encoder shifted one out.
 *
 * Size: with I = sum of log2(range / (r * freq)) over the symbols (the
 * ideal cost -log2(freq/total) plus the truncation waste above), the
 * encoder emits at most floor(I / 8) + 1 bytes (the +1 is the flush).
 */
#ifndef SKV_RANGECODER_H
#define SKV_RANGECODER_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#define SKV_RC_TOP_BITS 56                                   /* window width */
#define SKV_RC_TOP ((uint64_t)1 << SKV_RC_TOP_BITS)          /* range <= TOP */
#define SKV_RC_BOT ((uint64_t)1 << (SKV_RC_TOP_BITS - 8))    /* range >= BOT */
#define SKV_RC_MASK (SKV_RC_TOP - 1)
#define SKV_RC_INIT_BYTES 7 /* bytes the decoder reads before the first symbol */

typedef struct skv_rangecoder_enc {
    uint8_t *dst;   /* output, cap bytes; dst[0..pos) written (carries pending) */
    size_t cap;
    size_t pos;
    uint64_t low;   /* low end of the interval in the 56-bit window, < 2^56 */
    uint64_t range; /* interval width, in [2^48, 2^56] between calls */
    int err;        /* SKV_OK, or the first (sticky) error */
} skv_rangecoder_enc;

typedef struct skv_rangecoder_dec {
    const uint8_t *src; /* input, size bytes; bytes past the end read as 0 */
    size_t size;
    size_t pos;         /* bytes consumed, counting the virtual zeros */
    uint64_t code;      /* V - low, < range */
    uint64_t range;     /* in [2^48, 2^56] between symbols */
    uint64_t r;         /* range / total of the pending get_freq, 0 if none */
    uint64_t total;     /* total of the pending get_freq */
    int err;            /* SKV_OK, or the first (sticky) error */
} skv_rangecoder_dec;

/* Upper bound on the encoded size of nsym symbols costing at most max_bits
 * bits each (-log2(freq/total) <= max_bits; any freq >= 1 of total <=
 * 2^max_bits qualifies), flush included. SIZE_MAX on overflow or
 * max_bits > 32. Mixed streams: sum the bounds of their parts. */
size_t skv_rangecoder_bound(uint64_t nsym, unsigned max_bits);

/* dst may be NULL only with cap == 0 (then any emitted byte fails). */
void skv_rangecoder_enc_init(skv_rangecoder_enc *e, void *dst, size_t cap);

/* Writes the flush (0 or 1 byte) and returns the final size in *size.
 * Deterministic: the shortest byte string V such that V followed by zeros
 * lies inside the final interval (see docs/coder.md). */
int skv_rangecoder_enc_finish(skv_rangecoder_enc *e, size_t *size);

/* Bytes the decoder reads from src (or as zeros past its end). */
int skv_rangecoder_dec_init(skv_rangecoder_dec *d, const void *src, size_t size);

/* After the last symbol: SKV_OK iff the decoder consumed the stream exactly
 * as an encoder of the same symbols would have produced it (the byte count
 * is consistent with the flush rule), SKV_ERR_FORMAT otherwise (trailing
 * garbage, most truncations), or the sticky error. It cannot tell a
 * corrupted stream of the right length: use a checksum for that. */
int skv_rangecoder_dec_finish(const skv_rangecoder_dec *d);

/* Cold paths, out of line. */
int skv_rangecoder_enc_carry_(skv_rangecoder_enc *e);
int skv_rangecoder_enc_fail_(skv_rangecoder_enc *e, int status);
int skv_rangecoder_dec_fail_(skv_rangecoder_dec *d, int status);

/* ---- encoder -------------------------------------------------------- */

static inline int skv_rangecoder_enc_step_(skv_rangecoder_enc *e, uint64_t r,
                                           uint32_t cum, uint32_t freq)
{
    e->low += r * cum;   /* < 2^56 + 2^56: no overflow */
    e->range = r * freq; /* >= 2^16 */
    if (e->low >= SKV_RC_TOP) {
        int st = skv_rangecoder_enc_carry_(e);
        if (st != SKV_OK) return st;
    }
    while (e->range < SKV_RC_BOT) {
        if (e->pos >= e->cap) return skv_rangecoder_enc_fail_(e, SKV_ERR_RANGE);
        e->dst[e->pos++] = (uint8_t)(e->low >> (SKV_RC_TOP_BITS - 8));
        e->low = (e->low << 8) & SKV_RC_MASK;
        e->range <<= 8;
    }
    return SKV_OK;
}

/* Encodes [cum, cum + freq) of total. */
static inline int skv_rangecoder_enc_put(skv_rangecoder_enc *e, uint32_t cum,
                                         uint32_t freq, uint32_t total)
{
    if (e->err != SKV_OK) return e->err;
    if (freq == 0 || (uint64_t)cum + freq > total)
        return skv_rangecoder_enc_fail_(e, SKV_ERR_INVALID_ARG);
    return skv_rangecoder_enc_step_(e, e->range / total, cum, freq);
}

/* Same stream as enc_put(cum, freq, 1 << bits), without the division. */
static inline int skv_rangecoder_enc_put_pow2(skv_rangecoder_enc *e, uint32_t cum,
                                              uint32_t freq, unsigned bits)
{
    if (e->err != SKV_OK) return e->err;
    if (bits > 32 || freq == 0 || (uint64_t)cum + freq > ((uint64_t)1 << bits))
        return skv_rangecoder_enc_fail_(e, SKV_ERR_INVALID_ARG);
    return skv_rangecoder_enc_step_(e, e->range >> bits, cum, freq);
}

/* nbits uniform bits (value < 2^nbits, nbits <= 32). */
static inline int skv_rangecoder_enc_put_bits(skv_rangecoder_enc *e, uint32_t value,
                                              unsigned nbits)
{
    return skv_rangecoder_enc_put_pow2(e, value, 1, nbits);
}

/* Bytes written so far (not final before enc_finish: carries). */
static inline size_t skv_rangecoder_enc_size(const skv_rangecoder_enc *e)
{
    return e->pos;
}

/* ---- decoder -------------------------------------------------------- */

static inline int skv_rangecoder_dec_target_(skv_rangecoder_dec *d, uint64_t r,
                                             uint64_t total, uint32_t *target)
{
    uint64_t t = d->code / r;
    if (t >= total) return skv_rangecoder_dec_fail_(d, SKV_ERR_FORMAT);
    d->r = r;
    d->total = total;
    *target = (uint32_t)t;
    return SKV_OK;
}

/* The scaled value of the next symbol: *target in [0, total). Then find the
 * symbol with cum <= *target < cum + freq and call dec_update. */
static inline int skv_rangecoder_dec_get_freq(skv_rangecoder_dec *d, uint32_t total,
                                              uint32_t *target)
{
    if (d->err != SKV_OK) return d->err;
    if (total == 0) return skv_rangecoder_dec_fail_(d, SKV_ERR_INVALID_ARG);
    return skv_rangecoder_dec_target_(d, d->range / total, total, target);
}

static inline int skv_rangecoder_dec_get_freq_pow2(skv_rangecoder_dec *d, unsigned bits,
                                                   uint32_t *target)
{
    if (d->err != SKV_OK) return d->err;
    if (bits > 32) return skv_rangecoder_dec_fail_(d, SKV_ERR_INVALID_ARG);
    return skv_rangecoder_dec_target_(d, d->range >> bits, (uint64_t)1 << bits, target);
}

/* Consumes the symbol [cum, cum + freq) that holds the last target. */
static inline int skv_rangecoder_dec_update(skv_rangecoder_dec *d, uint32_t cum,
                                            uint32_t freq)
{
    uint64_t r = d->r, base;
    if (d->err != SKV_OK) return d->err;
    /* r == 0: no pending get_freq. Checking cum + freq <= total first keeps
     * r * (cum + freq) <= range: no overflow below. */
    if (r == 0 || freq == 0 || (uint64_t)cum + freq > d->total)
        return skv_rangecoder_dec_fail_(d, SKV_ERR_INVALID_ARG);
    base = r * cum;
    if (d->code < base || d->code - base >= r * freq) /* target not in the symbol */
        return skv_rangecoder_dec_fail_(d, SKV_ERR_INVALID_ARG);
    d->code -= base;
    d->range = r * freq;
    d->r = 0;
    while (d->range < SKV_RC_BOT) { /* code < range < 2^48: the shift fits */
        uint64_t byte = d->pos < d->size ? d->src[d->pos] : 0;
        d->pos++;
        d->code = (d->code << 8) | byte;
        d->range <<= 8;
    }
    return SKV_OK;
}

/* nbits uniform bits, the inverse of enc_put_bits. */
static inline int skv_rangecoder_dec_get_bits(skv_rangecoder_dec *d, unsigned nbits,
                                              uint32_t *value)
{
    uint32_t v = 0;
    int st = skv_rangecoder_dec_get_freq_pow2(d, nbits, &v);
    if (st == SKV_OK) st = skv_rangecoder_dec_update(d, v, 1);
    *value = v;
    return st;
}

#endif
