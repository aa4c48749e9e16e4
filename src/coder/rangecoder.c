/* rangecoder.c - the range coder's cold paths: init, carry, flush, checks.
 * The per-symbol hot paths are static inline in rangecoder.h, which also
 * holds the derivation; docs/coder.md specifies the byte stream. */
#include "coder/rangecoder.h"
#include "core/fpguard.h"

#include <string.h>

size_t skv_rangecoder_bound(uint64_t nsym, unsigned max_bits)
{
    /* bytes <= floor(I / 8) + 1 with I <= nsym * (max_bits + 2.2015e-5)
     * (rangecoder.h); 2.2015e-5 / 8 < 2^-18, plus 1 byte of rounding slack. */
    uint64_t bits, bytes;
    if (max_bits > 32 || nsym > UINT64_MAX / 33) return SIZE_MAX;
    bits = nsym * max_bits;
    bytes = bits / 8 + 1 + (nsym >> 18) + 1 + 1;
    if (bytes > SIZE_MAX) return SIZE_MAX;
    return (size_t)bytes;
}

void skv_rangecoder_enc_init(skv_rangecoder_enc *e, void *dst, size_t cap)
{
    e->dst = dst;
    e->cap = dst ? cap : 0;
    e->pos = 0;
    e->low = 0;
    e->range = SKV_RC_TOP; /* the whole window: [0, 1) */
    e->err = SKV_OK;
}

int skv_rangecoder_enc_fail_(skv_rangecoder_enc *e, int status)
{
    if (e->err == SKV_OK) e->err = status;
    return e->err;
}

/* low reached 2^56: add 1 to the number dst[0..pos), i.e. turn the trailing
 * run of FF bytes into 00 and increment the byte before it. Amortised O(1):
 * a byte is zeroed again only after 255 more carries stopped on it. */
int skv_rangecoder_enc_carry_(skv_rangecoder_enc *e)
{
    size_t i = e->pos;
    e->low -= SKV_RC_TOP;
    while (i > 0 && e->dst[i - 1] == 0xFF) e->dst[--i] = 0;
    /* A carry out of dst[0] would put the code at >= 1: impossible unless
     * the state was corrupted. */
    if (i == 0) return skv_rangecoder_enc_fail_(e, SKV_ERR_INTERNAL);
    e->dst[i - 1]++;
    return SKV_OK;
}

/* Flush: pick the value v in [low, low + range) with the most trailing zero
 * bits among multiples of 2^k, k in {56, 48}; since range >= 2^48, k = 48
 * always works. Emit the bytes of v above bit k (0 or 1 byte); the decoder
 * supplies the zeros below. */
int skv_rangecoder_enc_finish(skv_rangecoder_enc *e, size_t *size)
{
    uint64_t v;
    unsigned k;
    if (size) *size = 0;
    if (e->err != SKV_OK) return e->err;
    if (e->range < SKV_RC_BOT || e->range > SKV_RC_TOP || e->low >= SKV_RC_TOP)
        return skv_rangecoder_enc_fail_(e, SKV_ERR_INTERNAL);
    k = SKV_RC_TOP_BITS;
    v = (e->low + (SKV_RC_TOP - 1)) & ~(SKV_RC_TOP - 1); /* 0 or 2^56 */
    if (v >= e->low + e->range) {
        k = SKV_RC_TOP_BITS - 8;
        v = (e->low + (SKV_RC_BOT - 1)) & ~(SKV_RC_BOT - 1);
    }
    if (v >= SKV_RC_TOP) {
        int st;
        e->low = v; /* enc_carry_ subtracts 2^56 */
        if ((st = skv_rangecoder_enc_carry_(e)) != SKV_OK) return st;
        v -= SKV_RC_TOP;
    }
    if (k < SKV_RC_TOP_BITS) {
        if (e->pos >= e->cap) return skv_rangecoder_enc_fail_(e, SKV_ERR_RANGE);
        e->dst[e->pos++] = (uint8_t)(v >> k);
    }
    if (size) *size = e->pos;
    e->err = SKV_ERR_INVALID_ARG; /* finished: no more symbols */
    return SKV_OK;
}

int skv_rangecoder_dec_fail_(skv_rangecoder_dec *d, int status)
{
    if (d->err == SKV_OK) d->err = status;
    return d->err;
}

int skv_rangecoder_dec_init(skv_rangecoder_dec *d, const void *src, size_t size)
{
    memset(d, 0, sizeof *d);
    d->src = src;
    d->size = src ? size : 0;
    d->range = SKV_RC_TOP;
    for (int i = 0; i < SKV_RC_INIT_BYTES; i++) {
        uint64_t byte = d->pos < d->size ? d->src[d->pos] : 0;
        d->pos++;
        d->code = (d->code << 8) | byte;
    }
    d->err = SKV_OK;
    return SKV_OK;
}

int skv_rangecoder_dec_finish(const skv_rangecoder_dec *d)
{
    /* consumed = 7 + S, stream = S + F with F in {0, 1} flush bytes. */
    if (d->err != SKV_OK) return d->err;
    if (d->r != 0) return SKV_ERR_INVALID_ARG; /* a get_freq without its update */
    if (d->pos < d->size || d->pos - d->size < SKV_RC_INIT_BYTES - 1 ||
        d->pos - d->size > SKV_RC_INIT_BYTES)
        return SKV_ERR_FORMAT;
    return SKV_OK;
}
