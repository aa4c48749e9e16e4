/* adbit.h - adaptive binary models over the range coder (rangecoder.h).
 *
 * One model is the probability p = P(bit = 1) in units of 2^-16, kept in
 * [SKV_ADBIT_MIN, 65536 - SKV_ADBIT_MIN], plus a count that makes it learn fast at
 * first: after its n-th bit a model moves by 1/2^shift(n) of the way to the bit
 * (shift 2, 2, 3, 3, 4, 4, then 5). Integer arithmetic only, so an encoder and a
 * decoder that see the same bits hold the same models on every machine.
 * A bit is the symbol put_pow2(cum, freq, 16) with, for p = the model's probability:
 *     1: cum = 65536 - p, freq = p          0: cum = 0, freq = 65536 - p
 * (the convention of codec cm, docs/coder.md section 4). Cost: at most
 * log2(65536 / SKV_ADBIT_MIN) = 11 bits per bit.
 */
#ifndef SKV_ADBIT_H
#define SKV_ADBIT_H

#include <stdint.h>

#include "coder/rangecoder.h"

#define SKV_ADBIT_MIN 32u

typedef struct skv_adbit {
    uint16_t p; /* P(bit = 1) * 65536 */
    uint16_t n; /* bits seen, saturating at 6 */
} skv_adbit;

static inline void skv_adbit_init(skv_adbit *m)
{
    m->p = 32768;
    m->n = 0;
}

static inline void skv_adbit_update(skv_adbit *m, int bit)
{
    static const uint8_t shift[7] = {2, 2, 3, 3, 4, 4, 5};
    int32_t p = m->p, s = shift[m->n];
    p += bit ? (65536 - p) >> s : -(p >> s);
    if (p < (int32_t)SKV_ADBIT_MIN) p = SKV_ADBIT_MIN;
    if (p > (int32_t)(65536 - SKV_ADBIT_MIN)) p = 65536 - SKV_ADBIT_MIN;
    m->p = (uint16_t)p;
    if (m->n < 6) m->n++;
}

static inline int skv_adbit_put(skv_rangecoder_enc *e, skv_adbit *m, int bit)
{
    uint32_t p = m->p;
    int rc = bit ? skv_rangecoder_enc_put_pow2(e, 65536 - p, p, 16) : skv_rangecoder_enc_put_pow2(e, 0, 65536 - p, 16);
    skv_adbit_update(m, bit);
    return rc;
}

/* Decodes one bit into *bit (0 on a decoder error, which is sticky). */
static inline int skv_adbit_get(skv_rangecoder_dec *d, skv_adbit *m, int *bit)
{
    uint32_t p = m->p, t = 0;
    int rc = skv_rangecoder_dec_get_freq_pow2(d, 16, &t);
    *bit = 0;
    if (rc) return rc;
    *bit = t >= 65536 - p;
    rc = *bit ? skv_rangecoder_dec_update(d, 65536 - p, p) : skv_rangecoder_dec_update(d, 0, 65536 - p);
    skv_adbit_update(m, *bit);
    return rc;
}

#endif
