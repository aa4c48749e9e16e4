/* Scalar reference dequantization of the K-quants q2_k .. q6_k (layouts in
 * qblocks.h).  A super-block holds 256 values in sub-blocks ("runs") of 16
 * (q2_k, q3_k, q6_k) or 32 (q4_k, q5_k) values, each with its own small
 * integer scale (and min) times the binary16 super-block scales d, dmin.
 *
 * READ ME FIRST: every value is the same binary32 expression as ggml's
 * reference dequantization, evaluated in the same order:
 *   q2_k  (d*sc) * q - (dmin*m)        q3_k  (d*(sc - 32)) * q
 *   q4_k  (d*sc) * q - (dmin*m)        q5_k  likewise, q of 5 bits
 *   q6_k  (d*sc) * (q - 32)
 * with the run scale computed once per run (the same rounding as computing
 * it per value).  Products and differences are never fused.
 *
 * Where the bits are (run s of 16 values in q2_k / q3_k / q6_k; value l of
 * the run; g = s / 8 is the 128-value half, k = (s % 8) / 2, h = s % 2):
 *   2-bit fields (q2_k, q3_k): bits 2k..2k+1 of qs[32g + 16h + l]
 *   q3_k high bit: bit 4g + k of hmask[16h + l], clear means subtract 4
 *   q6_k: low nibble (k < 2) or high nibble (k >= 2) of ql[64g + 32(k%2) +
 *         16h + l], bits 2k..2k+1 of qh[32g + 16h + l] as bits 4..5
 * and in q4_k / q5_k run s of 32: the low (s even) or high nibble of
 * qs[32(s/2) + l], q5_k's bit 4 at bit s of qh[l]. */
#include "quant/types_kernels.h"
#include "core/fpguard.h"

#include "core/f16.h"
#include "quant/fbits.h"
#include "quant/qblocks.h"

static float half_at(const uint8_t p[2]) { return skv_f16_to_f32(skv_rd16le(p)); }

/* The 2-bit field of value l of 16-run s (q2_k, q3_k). */
static inline int two_bits(const uint8_t qs[64], unsigned s, unsigned l)
{
    return (qs[32 * (s / 8) + 16 * (s % 2) + l] >> (2 * ((s % 8) / 2))) & 3;
}

static void q2_k_block(const uint8_t *p, float *y)
{
    const skv_block_q2_k *b = (const skv_block_q2_k *)(const void *)p;
    float d = half_at(b->d), dmin = half_at(b->dmin);
    for (unsigned s = 0; s < 16; s++, y += 16) {
        float dl = d * (float)(b->scales[s] & 15), ml = dmin * (float)(b->scales[s] >> 4);
        for (unsigned l = 0; l < 16; l++) y[l] = dl * (float)two_bits(b->qs, s, l) - ml;
    }
}

/* The 6-bit scale of 16-run s of a q3_k block from its 12 packed bytes: the
 * low nibble in byte s (s < 8, low nibble) or s - 8 (high nibble), the top two
 * bits at bit 2(s/4) of byte 8 + s%4. */
static int q3_scale(const uint8_t sc[12], unsigned s)
{
    int lo = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
    int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return lo | hi << 4;
}

static void q3_k_block(const uint8_t *p, float *y)
{
    const skv_block_q3_k *b = (const skv_block_q3_k *)(const void *)p;
    float d = half_at(b->d);
    for (unsigned s = 0; s < 16; s++, y += 16) {
        float dl = d * (float)(q3_scale(b->scales, s) - 32);
        unsigned bit = 4 * (s / 8) + (s % 8) / 2;
        for (unsigned l = 0; l < 16; l++) {
            int high = (b->hmask[16 * (s % 2) + l] >> bit) & 1;
            y[l] = dl * (float)(two_bits(b->qs, s, l) - (high ? 0 : 4));
        }
    }
}

/* Run s of 32 of a q4_k / q5_k block: y = d1*q - m1 with q the nibble of qs
 * plus (q5_k, qh non-NULL) 16 when bit s of qh[l] is set. */
static void k4_run(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, float d, float dmin, unsigned s,
                   float *y)
{
    uint8_t sc, mn;
    skv_k4_scale_min(scales, s, &sc, &mn);
    float d1 = d * (float)sc, m1 = dmin * (float)mn;
    const uint8_t *q = qs + 32 * (s / 2);
    unsigned shift = 4 * (s % 2);
    for (unsigned l = 0; l < 32; l++) {
        int v = (q[l] >> shift) & 15;
        if (qh) v += ((qh[l] >> s) & 1) ? 16 : 0;
        y[l] = d1 * (float)v - m1;
    }
}

static void q4_k_block(const uint8_t *p, float *y)
{
    const skv_block_q4_k *b = (const skv_block_q4_k *)(const void *)p;
    float d = half_at(b->d), dmin = half_at(b->dmin);
    for (unsigned s = 0; s < 8; s++) k4_run(b->scales, b->qs, NULL, d, dmin, s, y + 32 * s);
}

static void q5_k_block(const uint8_t *p, float *y)
{
    const skv_block_q5_k *b = (const skv_block_q5_k *)(const void *)p;
    float d = half_at(b->d), dmin = half_at(b->dmin);
    for (unsigned s = 0; s < 8; s++) k4_run(b->scales, b->qs, b->qh, d, dmin, s, y + 32 * s);
}

/* The 6-bit value l of 16-run s of a q6_k block (0..63, before the - 32). */
static inline int q6_value(const skv_block_q6_k *b, unsigned s, unsigned l)
{
    unsigned g = s / 8, k = (s % 8) / 2, at = 16 * (s % 2) + l;
    int lo = (b->ql[64 * g + 32 * (k % 2) + at] >> (k < 2 ? 0 : 4)) & 15;
    int hi = (b->qh[32 * g + at] >> (2 * k)) & 3;
    return lo | hi << 4;
}

static void q6_k_block(const uint8_t *p, float *y)
{
    const skv_block_q6_k *b = (const skv_block_q6_k *)(const void *)p;
    float d = half_at(b->d);
    for (unsigned s = 0; s < 16; s++, y += 16) {
        float ds = d * (float)(int8_t)b->scales[s];
        for (unsigned l = 0; l < 16; l++) y[l] = ds * (float)(q6_value(b, s, l) - 32);
    }
}

SKV_ROW_TO_FLOAT(skv_q2_k_to_float_ref, SKV_QK_K, skv_block_q2_k, q2_k_block)
SKV_ROW_TO_FLOAT(skv_q3_k_to_float_ref, SKV_QK_K, skv_block_q3_k, q3_k_block)
SKV_ROW_TO_FLOAT(skv_q4_k_to_float_ref, SKV_QK_K, skv_block_q4_k, q4_k_block)
SKV_ROW_TO_FLOAT(skv_q5_k_to_float_ref, SKV_QK_K, skv_block_q5_k, q5_k_block)
SKV_ROW_TO_FLOAT(skv_q6_k_to_float_ref, SKV_QK_K, skv_block_q6_k, q6_k_block)
