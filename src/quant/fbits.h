/* Bit-level helpers of the quant layer: little-endian 16-bit fields, float
 * bits, finiteness tests.  Internal (static inline, no state). */
#ifndef SKV_QUANT_FBITS_H
#define SKV_QUANT_FBITS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Byte order only picks fast copies; every layout is little-endian regardless. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SKV_LITTLE_ENDIAN 1
#else
#define SKV_LITTLE_ENDIAN 0
#endif

static inline void skv_wr16le(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline uint16_t skv_rd16le(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t skv_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float skv_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline int skv_f32_finite(float f) { return (skv_f32_bits(f) & 0x7f800000u) != 0x7f800000u; }
static inline int skv_f16_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

static inline int skv_any_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!skv_f32_finite(x[i])) return 1;
    return 0;
}

#endif
