/* Weight blocks in integer form (dot_int.h): value i = d * sc[i/16] * q[i]
 * - m * mn[i/16], exactly the values the type's to_float gives (types_ref.c,
 * qlegacy.c, kquants.c), written as integers so that the dot kernels can sum
 * them exactly.  Layouts in qblocks.h. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#include <string.h>

#include "core/f16.h"
#include "quant/fbits.h"
#include "quant/qblocks.h"

static float half_at(const uint8_t p[2]) { return skv_f16_to_f32(skv_rd16le(p)); }

/* Scales of 1 for the groups of a 32-value block; no min unless set later. */
static void plain32(skv_iblock *o, float d)
{
    o->d = d;
    o->m = 0.0f;
    o->has_min = 0;
    o->sc[0] = o->sc[1] = 1;
    o->mn[0] = o->mn[1] = 0;
}

/* The min term of the affine blocks: value = d*q + m_file = d*q - (-m_file)*1. */
static void affine_min(skv_iblock *o, float m_file)
{
    o->m = -m_file;
    o->has_min = 1;
    o->mn[0] = o->mn[1] = 1;
}

/* q[j] = nibble j of a 32-value block (low nibbles first) + bit j of h as bit 4, minus bias. */
static void nibbles32(const uint8_t qs[16], uint32_t h, int bias, int8_t *q)
{
    for (unsigned j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 15) | (int)((h >> j) & 1) << 4) - bias);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4) - bias);
    }
}

static uint32_t rd32(const uint8_t p[4])
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void skv_unpack_q8_0(const uint8_t *blk, skv_iblock *o)
{
    plain32(o, half_at(blk));
    memcpy(o->q, blk + 2, 32);
}

void skv_unpack_q4_0(const uint8_t *blk, skv_iblock *o)
{
    plain32(o, half_at(blk));
    nibbles32(blk + 2, 0, 8, o->q);
}

void skv_unpack_q4_1(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q4_1 *b = (const skv_block_q4_1 *)(const void *)blk;
    plain32(o, half_at(b->d));
    affine_min(o, half_at(b->m));
    nibbles32(b->qs, 0, 0, o->q);
}

void skv_unpack_q5_0(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q5_0 *b = (const skv_block_q5_0 *)(const void *)blk;
    plain32(o, half_at(b->d));
    nibbles32(b->qs, rd32(b->qh), 16, o->q);
}

void skv_unpack_q5_1(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q5_1 *b = (const skv_block_q5_1 *)(const void *)blk;
    plain32(o, half_at(b->d));
    affine_min(o, half_at(b->m));
    nibbles32(b->qs, rd32(b->qh), 0, o->q);
}

/* 32 iq4_nl levels from 16 bytes of nibble pairs. */
static void iq4_levels32(const uint8_t qs[16], int8_t *q)
{
    for (unsigned j = 0; j < 16; j++) {
        q[j] = skv_iq4nl_levels[qs[j] & 15];
        q[j + 16] = skv_iq4nl_levels[qs[j] >> 4];
    }
}

void skv_unpack_iq4_nl(const uint8_t *blk, skv_iblock *o)
{
    plain32(o, half_at(blk));
    iq4_levels32(blk + 2, o->q);
}

/* The 2-bit field of value l of 16-run s (q2_k, q3_k; kquants.c). */
static inline int two_bits(const uint8_t qs[64], unsigned s, unsigned l)
{
    return (qs[32 * (s / 8) + 16 * (s % 2) + l] >> (2 * ((s % 8) / 2))) & 3;
}

void skv_unpack_q2_k(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q2_k *b = (const skv_block_q2_k *)(const void *)blk;
    o->d = half_at(b->d);
    o->m = half_at(b->dmin);
    o->has_min = 1;
    for (unsigned s = 0; s < 16; s++) {
        o->sc[s] = b->scales[s] & 15;
        o->mn[s] = b->scales[s] >> 4;
        for (unsigned l = 0; l < 16; l++) o->q[16 * s + l] = (int8_t)two_bits(b->qs, s, l);
    }
}

void skv_unpack_q3_k(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q3_k *b = (const skv_block_q3_k *)(const void *)blk;
    o->d = half_at(b->d);
    o->m = 0.0f;
    o->has_min = 0;
    for (unsigned s = 0; s < 16; s++) {
        int lo = s < 8 ? (b->scales[s] & 15) : (b->scales[s - 8] >> 4);
        int hi = (b->scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        unsigned bit = 4 * (s / 8) + (s % 8) / 2;
        o->sc[s] = (int16_t)((lo | hi << 4) - 32);
        o->mn[s] = 0;
        for (unsigned l = 0; l < 16; l++) {
            int high = (b->hmask[16 * (s % 2) + l] >> bit) & 1;
            o->q[16 * s + l] = (int8_t)(two_bits(b->qs, s, l) - (high ? 0 : 4));
        }
    }
}

/* q4_k / q5_k: 8 runs of 32; run s is the nibble 4*(s%2) of qs[32*(s/2) + l] (+ bit s of qh[l]). */
static void k4_unpack(const uint8_t *d, const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                      skv_iblock *o)
{
    uint8_t sc[8], mn[8];
    skv_k4_scales8(scales, sc, mn);
    o->d = half_at(d);
    o->m = half_at(d + 2);
    o->has_min = 1;
    for (unsigned s = 0; s < 8; s++) {
        o->sc[2 * s] = o->sc[2 * s + 1] = sc[s];
        o->mn[2 * s] = o->mn[2 * s + 1] = mn[s];
        for (unsigned l = 0; l < 32; l++) {
            int v = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
            if (qh) v |= ((qh[l] >> s) & 1) << 4;
            o->q[32 * s + l] = (int8_t)v;
        }
    }
}

void skv_unpack_q4_k(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q4_k *b = (const skv_block_q4_k *)(const void *)blk;
    k4_unpack(b->d, b->scales, b->qs, NULL, o);
}

void skv_unpack_q5_k(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q5_k *b = (const skv_block_q5_k *)(const void *)blk;
    k4_unpack(b->d, b->scales, b->qs, b->qh, o);
}

void skv_unpack_q6_k(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_q6_k *b = (const skv_block_q6_k *)(const void *)blk;
    o->d = half_at(b->d);
    o->m = 0.0f;
    o->has_min = 0;
    for (unsigned s = 0; s < 16; s++) {
        unsigned g = s / 8, k = (s % 8) / 2;
        o->sc[s] = (int8_t)b->scales[s];
        o->mn[s] = 0;
        for (unsigned l = 0; l < 16; l++) {
            unsigned at = 16 * (s % 2) + l;
            int lo = (b->ql[64 * g + 32 * (k % 2) + at] >> (k < 2 ? 0 : 4)) & 15;
            int hi = (b->qh[32 * g + at] >> (2 * k)) & 3;
            o->q[16 * s + l] = (int8_t)((lo | hi << 4) - 32);
        }
    }
}

void skv_unpack_iq4_xs(const uint8_t *blk, skv_iblock *o)
{
    const skv_block_iq4_xs *b = (const skv_block_iq4_xs *)(const void *)blk;
    unsigned sh = skv_rd16le(b->scales_h);
    o->d = half_at(b->d);
    o->m = 0.0f;
    o->has_min = 0;
    for (unsigned r = 0; r < 8; r++) {
        int ls = (int)(((b->scales_l[r / 2] >> (4 * (r % 2))) & 15) | (((sh >> (2 * r)) & 3) << 4));
        o->sc[2 * r] = o->sc[2 * r + 1] = (int16_t)(ls - 32);
        o->mn[2 * r] = o->mn[2 * r + 1] = 0;
        iq4_levels32(b->qs + 16 * r, o->q + 32 * r);
    }
}
