/* IEEE 754 binary16 <-> binary32 conversion, scalar and exact.
 * f32 -> f16 rounds to nearest, ties to even (the same rounding as the F16C
 * instruction VCVTPS2PH with imm 0), so scalar and SIMD paths agree bit for bit.
 * NaN stays NaN (quiet), infinities and signed zeros are preserved.
 * Under nvcc these are __host__ __device__: the CUDA kernels (cuda/cu_kern.h) convert with
 * this very code. */
#ifndef SKV_F16_H
#define SKV_F16_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SKV_F16_FN __host__ __device__ static inline
#else
#define SKV_F16_FN static inline
#endif

SKV_F16_FN float skv_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    float f;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        uint32_t e = 113;
        while (!(man & 0x400u)) { man <<= 1; e--; }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

SKV_F16_FN uint16_t skv_f32_to_f16(float f)
{
    uint32_t x, sign, exp, man;
    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000u;
    exp = (x >> 23) & 0xffu;
    man = x & 0x7fffffu;
    if (exp == 0xff) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (e <= 0) {                                      /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = man & ((1u << shift) - 1);
        uint32_t r = man >> shift;
        if (rest > half || (rest == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++; /* may carry into exp: correct */
    return (uint16_t)(sign | r);
}

#endif
