/* Scalar reference dequantization of the 32-value weight blocks q4_1, q5_0,
 * q5_1, iq4_nl and of iq4_xs (qblocks.h has the layouts).
 *
 * READ ME FIRST: each value is computed with exactly the binary32 operations
 * of ggml's reference dequantization, in the same order (q*d + m is a
 * product then a sum, never fused; d*kv[q] with the scale first), because
 * the engine's logits must match llama.cpp's bit for bit on the same file.
 * tests/test_types_oracle.c checks every type against llama.cpp's output. */
#include "quant/types_kernels.h"
#include "core/fpguard.h"

#include "core/f16.h"
#include "quant/fbits.h"
#include "quant/qblocks.h"

const int8_t skv_iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float half_at(const uint8_t p[2]) { return skv_f16_to_f32(skv_rd16le(p)); }

/* q[j] = the 4-bit value j of a 32-value block: nibble pairs, low half first. */
static void unpack_nibbles(const uint8_t qs[16], int q[32])
{
    for (int j = 0; j < 16; j++) {
        q[j] = qs[j] & 15;
        q[j + 16] = qs[j] >> 4;
    }
}

/* q[j] = the 5-bit value j: the nibble plus bit j of the little-endian qh as bit 4. */
static void unpack_fives(const uint8_t qh[4], const uint8_t qs[16], int q[32])
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    unpack_nibbles(qs, q);
    for (int j = 0; j < 32; j++) q[j] |= (int)((h >> j) & 1) << 4;
}

/* y = q*d + m: the affine blocks (q4_1, q5_1). */
static void affine(const int q[32], float d, float m, float *y)
{
    for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
}

static void q4_1_block(const uint8_t *p, float *y)
{
    const skv_block_q4_1 *b = (const skv_block_q4_1 *)(const void *)p;
    int q[32];
    unpack_nibbles(b->qs, q);
    affine(q, half_at(b->d), half_at(b->m), y);
}

static void q5_0_block(const uint8_t *p, float *y)
{
    const skv_block_q5_0 *b = (const skv_block_q5_0 *)(const void *)p;
    float d = half_at(b->d);
    int q[32];
    unpack_fives(b->qh, b->qs, q);
    for (int j = 0; j < 32; j++) y[j] = (float)(q[j] - 16) * d;
}

static void q5_1_block(const uint8_t *p, float *y)
{
    const skv_block_q5_1 *b = (const skv_block_q5_1 *)(const void *)p;
    int q[32];
    unpack_fives(b->qh, b->qs, q);
    affine(q, half_at(b->d), half_at(b->m), y);
}

/* 32 values d * level[nibble] from 16 bytes of nibble pairs. */
static void iq4_run(const uint8_t qs[16], float d, float *y)
{
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)skv_iq4nl_levels[qs[j] & 15];
        y[j + 16] = d * (float)skv_iq4nl_levels[qs[j] >> 4];
    }
}

static void iq4_nl_block(const uint8_t *p, float *y)
{
    const skv_block_iq4_nl *b = (const skv_block_iq4_nl *)(const void *)p;
    iq4_run(b->qs, half_at(b->d), y);
}

/* iq4_xs: eight runs of 32 iq4_nl values; run r's 6-bit scale has its low
 * nibble in scales_l[r/2] (low nibble first) and its top two bits at bit 2r of
 * the little-endian scales_h; the run scale is d * (scale - 32). */
static void iq4_xs_block(const uint8_t *p, float *y)
{
    const skv_block_iq4_xs *b = (const skv_block_iq4_xs *)(const void *)p;
    float d = half_at(b->d);
    unsigned sh = skv_rd16le(b->scales_h);
    for (unsigned r = 0; r < 8; r++) {
        int ls = (int)(((b->scales_l[r / 2] >> (4 * (r % 2))) & 15) | (((sh >> (2 * r)) & 3) << 4));
        iq4_run(b->qs + 16 * r, d * (float)(ls - 32), y + 32 * r);
    }
}

SKV_ROW_TO_FLOAT(skv_q4_1_to_float_ref, 32, skv_block_q4_1, q4_1_block)
SKV_ROW_TO_FLOAT(skv_q5_0_to_float_ref, 32, skv_block_q5_0, q5_0_block)
SKV_ROW_TO_FLOAT(skv_q5_1_to_float_ref, 32, skv_block_q5_1, q5_1_block)
SKV_ROW_TO_FLOAT(skv_iq4_nl_to_float_ref, 32, skv_block_iq4_nl, iq4_nl_block)
SKV_ROW_TO_FLOAT(skv_iq4_xs_to_float_ref, SKV_QK_K, skv_block_iq4_xs, iq4_xs_block)
