/* On-disk block layouts of the GGUF weight types beyond q8_0 / q4_0 (ggml's
 * published formats; one struct per type, its size pinned).  Every field is
 * a byte array so the structs have no padding and no alignment needs: a
 * block may sit at any offset of a mapped file.  Scales are little-endian
 * binary16 read with skv_rd16le().  Internal to the quant layer.
 *
 *   type    values  bytes  layout
 *   q4_1      32     20    d, m, qs[16]              y = q*d + m
 *   q5_0      32     22    d, qh[4], qs[16]          y = (q - 16)*d
 *   q5_1      32     24    d, m, qh[4], qs[16]       y = q*d + m
 *   iq4_nl    32     18    d, qs[16]                 y = d*kv[q]
 *   q2_k     256     84    scales[16], qs[64], d, dmin
 *   q3_k     256    110    hmask[32], qs[64], scales[12], d
 *   q4_k     256    144    d, dmin, scales[12], qs[128]
 *   q5_k     256    176    d, dmin, scales[12], qh[32], qs[128]
 *   q6_k     256    210    ql[128], qh[64], scales[16] (int8), d
 *   iq4_xs   256    136    d, scales_h[2], scales_l[4], qs[128]
 *
 * In the 32-value blocks value j < 16 is the low nibble of qs[j] and value
 * j + 16 its high nibble; q5's fifth bit of value j is bit j of qh (LE u32).
 * The 256-value layouts are spelled out beside their kernels (kquants.c). */
#ifndef SKV_QBLOCKS_H
#define SKV_QBLOCKS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define SKV_QK_K 256u /* values per K-quant / iq4_xs super-block */

typedef struct { uint8_t d[2], m[2], qs[16]; } skv_block_q4_1;
typedef struct { uint8_t d[2], qh[4], qs[16]; } skv_block_q5_0;
typedef struct { uint8_t d[2], m[2], qh[4], qs[16]; } skv_block_q5_1;
typedef struct { uint8_t d[2], qs[16]; } skv_block_iq4_nl;
typedef struct { uint8_t scales[16], qs[64], d[2], dmin[2]; } skv_block_q2_k;
typedef struct { uint8_t hmask[32], qs[64], scales[12], d[2]; } skv_block_q3_k;
typedef struct { uint8_t d[2], dmin[2], scales[12], qs[128]; } skv_block_q4_k;
typedef struct { uint8_t d[2], dmin[2], scales[12], qh[32], qs[128]; } skv_block_q5_k;
typedef struct { uint8_t ql[128], qh[64], scales[16], d[2]; } skv_block_q6_k;
typedef struct { uint8_t d[2], scales_h[2], scales_l[4], qs[128]; } skv_block_iq4_xs;

static_assert(sizeof(skv_block_q4_1) == 20, "q4_1 block: 2 + 2 + 16 bytes");
static_assert(sizeof(skv_block_q5_0) == 22, "q5_0 block: 2 + 4 + 16 bytes");
static_assert(sizeof(skv_block_q5_1) == 24, "q5_1 block: 2 + 2 + 4 + 16 bytes");
static_assert(sizeof(skv_block_iq4_nl) == 18, "iq4_nl block: 2 + 16 bytes");
static_assert(sizeof(skv_block_q2_k) == 84, "q2_k block: 16 + 64 + 2 + 2 bytes");
static_assert(sizeof(skv_block_q3_k) == 110, "q3_k block: 32 + 64 + 12 + 2 bytes");
static_assert(sizeof(skv_block_q4_k) == 144, "q4_k block: 2 + 2 + 12 + 128 bytes");
static_assert(sizeof(skv_block_q5_k) == 176, "q5_k block: 2 + 2 + 12 + 32 + 128 bytes");
static_assert(sizeof(skv_block_q6_k) == 210, "q6_k block: 128 + 64 + 16 + 2 bytes");
static_assert(sizeof(skv_block_iq4_xs) == 136, "iq4_xs block: 2 + 2 + 4 + 128 bytes");

/* The 6-bit scale and min of sub-block j (0..7) of a q4_k / q5_k block from
 * its 12 packed bytes: j < 4 in the low six bits of bytes j and j + 4; j >= 4
 * in the nibbles of byte j + 4 with the high two bits in the top bits of
 * bytes j - 4 and j. */
static inline void skv_k4_scale_min(const uint8_t s[12], unsigned j, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Dequantizes a row of n values stored as blocks of qk values, bytes bytes
 * each, with block(b, y) writing the qk values of block b.  A trailing
 * partial block (n % qk values; never in a valid GGUF row) reads nothing and
 * gives zeros, so a caller's mistake cannot read past the row. */
static inline void skv_blocks_to_float(const void *src, float *dst, size_t n, size_t qk, size_t bytes,
                                       void (*block)(const uint8_t *b, float *y))
{
    const uint8_t *p = src;
    size_t nb = n / qk;
    for (size_t i = 0; i < nb; i++) block(p + i * bytes, dst + i * qk);
    for (size_t i = nb * qk; i < n; i++) dst[i] = 0.0f;
}

/* Defines the row function fname (an skv_to_float_fn) over blocks of qk
 * values of type block_t decoded by block_fn. */
#define SKV_ROW_TO_FLOAT(fname, qk, block_t, block_fn)                  \
    void fname(const void *src, float *dst, size_t n)                   \
    {                                                                   \
        skv_blocks_to_float(src, dst, n, qk, sizeof(block_t), block_fn); \
    }

/* The 16 non-linear levels of iq4_nl / iq4_xs. */
extern const int8_t skv_iq4nl_levels[16];

#endif
