/* The CUDA kernels' arithmetic, shared by the device (cu_ops.cu, compiled by nvcc with
 * -fmad=false) and the host model of their reduction order (cu_model.c, plain C in every
 * build): one source for both, so the model that tests/test_cuda_order.c checks against
 * the CPU engine bit for bit is the very code the GPU runs.
 *
 * READ ME FIRST
 *  - Every function here is one step of docs/determinism.md's canonical order, written
 *    with explicit fmaf and nothing else fused: C builds use -ffp-contract=off, nvcc
 *    -fmad=false -prec-div=true -prec-sqrt=true -ftz=false (no fast math), so a*b+c is a
 *    multiply then an add on both sides, '/' and sqrtf are correctly rounded, and fmaf is
 *    the correctly rounded fused multiply-add (fma.rn.f32 on the device).
 *  - A canonical dot of n values is 8 lanes: lane l runs skv_cu_lane_dot over
 *    j = l, l+8, ... < n & ~7; then skv_cu_tree8 over the 8 partial sums; then
 *    skv_cu_tail_dot over the leftover j in order. The kernels give each lane to one
 *    thread and the tree and the tail to one thread; the host model loops over the lanes.
 *  - Integer sums (dp4a) are exact, so their order is free; the float chain over the
 *    blocks (skv_cu_qchain) is sequential, blocks ascending.
 *  - Nothing here depends on the launch shape: a kernel's grid decides only which thread
 *    runs which of these calls. */
#ifndef SKV_CUDA_CU_KERN_H
#define SKV_CUDA_CU_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "core/detf32.h"
#include "core/f16.h"

#if defined(__CUDACC__)
#define SKV_HD __host__ __device__ static inline
#else
#include <math.h>
#include <string.h>
#define SKV_HD static inline
#endif

/* Bytes per block of the weight types the device reads (ggml's layouts). */
#define SKV_CU_Q8_0_BYTES 34u /* d (f16), qs[32] int8 */
#define SKV_CU_Q4_0_BYTES 18u /* d (f16), qs[16]: value j low nibble, j+16 high, minus 8 */

SKV_HD float skv_cu_bits_f32(uint32_t b)
{
#if defined(__CUDA_ARCH__)
    return __int_as_float((int)b);
#else
    float f;
    memcpy(&f, &b, 4);
    return f;
#endif
}

SKV_HD uint32_t skv_cu_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return (uint32_t)__float_as_int(f);
#else
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
#endif
}

/* binary16 -> binary32 (exact) and binary32 rounded to binary16 and back: core/f16.h. */
SKV_HD float skv_cu_f16_to_f32(uint16_t h) { return skv_f16_to_f32(h); }
SKV_HD float skv_cu_round_f16(float x) { return skv_f16_to_f32(skv_f32_to_f16(x)); }

SKV_HD uint16_t skv_cu_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* ---- the canonical dot: lanes, tree, tail ---------------------------------------- */

/* Lane l's chain of a . b: acc = fma(a[j], b[j], acc) for j = l, l+8, ... < n8. */
SKV_HD float skv_cu_lane_dot(const float *a, const float *b, size_t n8, unsigned l)
{
    float acc = 0.0f;
    for (size_t j = l; j < n8; j += 8) acc = fmaf(a[j], b[j], acc);
    return acc;
}

/* The same with a binary16 first operand (an f16 weight row or KV row). */
SKV_HD float skv_cu_lane_dot_h(const uint16_t *a, const float *b, size_t n8, unsigned l)
{
    float acc = 0.0f;
    for (size_t j = l; j < n8; j += 8) acc = fmaf(skv_cu_f16_to_f32(a[j]), b[j], acc);
    return acc;
}

/* Lane l's chain of a plain sum: acc = a[j] + acc. */
SKV_HD float skv_cu_lane_sum(const float *a, size_t n8, unsigned l)
{
    float acc = 0.0f;
    for (size_t j = l; j < n8; j += 8) acc = a[j] + acc;
    return acc;
}

/* The fixed tree: h[l] = acc[l] + acc[l+4], g[l] = h[l] + h[l+2], s = g[0] + g[1]. */
SKV_HD float skv_cu_tree8(const float acc[8])
{
    float h0 = acc[0] + acc[4], h1 = acc[1] + acc[5], h2 = acc[2] + acc[6], h3 = acc[3] + acc[7];
    float g0 = h0 + h2, g1 = h1 + h3;
    return g0 + g1;
}

/* The leftover elements, in order: s = fma(a[j], b[j], s) for j = n8 .. n-1. */
SKV_HD float skv_cu_tail_dot(float s, const float *a, const float *b, size_t n8, size_t n)
{
    for (size_t j = n8; j < n; j++) s = fmaf(a[j], b[j], s);
    return s;
}

SKV_HD float skv_cu_tail_dot_h(float s, const uint16_t *a, const float *b, size_t n8, size_t n)
{
    for (size_t j = n8; j < n; j++) s = fmaf(skv_cu_f16_to_f32(a[j]), b[j], s);
    return s;
}

SKV_HD float skv_cu_tail_sum(float s, const float *a, size_t n8, size_t n)
{
    for (size_t j = n8; j < n; j++) s = a[j] + s;
    return s;
}

/* A whole canonical dot in one thread (attention scores: one key per thread). */
SKV_HD float skv_cu_dot(const float *a, const float *b, size_t n)
{
    float acc[8];
    size_t n8 = n & ~(size_t)7;
    for (unsigned l = 0; l < 8; l++) acc[l] = skv_cu_lane_dot(a, b, n8, l);
    return skv_cu_tail_dot(skv_cu_tree8(acc), a, b, n8, n);
}

SKV_HD float skv_cu_dot_h(const uint16_t *a, const float *b, size_t n)
{
    float acc[8];
    size_t n8 = n & ~(size_t)7;
    for (unsigned l = 0; l < 8; l++) acc[l] = skv_cu_lane_dot_h(a, b, n8, l);
    return skv_cu_tail_dot_h(skv_cu_tree8(acc), a, b, n8, n);
}

/* ---- element-wise steps ------------------------------------------------------------ */

/* skv_exp_ref (engine/ops.c): the same source, core/detf32.h. */
SKV_HD float skv_cu_exp(float x) { return skv_detf32_exp(x); }

/* SiLU(h) * g = (h / (1 + exp(-h))) * g. */
SKV_HD float skv_cu_silu_mul(float h, float g) { return (h / (1.0f + skv_cu_exp(-h))) * g; }

/* RMSNorm's scale from the canonical sum of squares: 1 / sqrt(ss / n + eps). */
SKV_HD float skv_cu_rms_inv(float ss, size_t n, float eps) { return 1.0f / sqrtf(ss / (float)n + eps); }

/* One RoPE pair: x0*c - x1*s, x0*s + x1*c (no fusion). */
SKV_HD void skv_cu_rope_pair(float *x0, float *x1, float c, float s)
{
    float a = *x0, b = *x1;
    *x0 = a * c - b * s;
    *x1 = a * s + b * c;
}

/* ---- integer dots (quant/dot.h): activation blocks of 32, q8_0 and q4_0 weights ---- */

/* quantize_row_q8_0's arithmetic for one block of 32 (quant/dot.c act32_block):
 * d = max|x| / 127 kept as binary16, q = roundf(x / d) clamped to +-127 (NaN -> 127).
 * Returns d. */
SKV_HD float skv_cu_act32(const float *x, int8_t q[32])
{
    uint32_t m = 0;
    for (unsigned j = 0; j < 32; j++) {
        uint32_t a = skv_cu_f32_bits(x[j]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    float d = skv_cu_bits_f32(m) / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (unsigned j = 0; j < 32; j++) {
        float r = roundf(x[j] * id);
        r = r < 127.0f ? r : 127.0f;
        r = r > -127.0f ? r : -127.0f;
        q[j] = (int8_t)(int)r;
    }
    return skv_cu_round_f16(d);
}

/* Four signed bytes of a times four of b, added to c: __dp4a on the device, the same
 * exact int32 on the host. */
SKV_HD int32_t skv_cu_dp4a(uint32_t a, uint32_t b, int32_t c)
{
#if defined(__CUDA_ARCH__)
    return __dp4a((int)a, (int)b, c);
#else
    for (unsigned i = 0; i < 4; i++) c += (int32_t)(int8_t)(a >> 8 * i) * (int32_t)(int8_t)(b >> 8 * i);
    return c;
#endif
}

SKV_HD uint32_t skv_cu_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 32 weights of a block as eight words of four int8 (q8_0: as stored; q4_0: the
 * nibbles minus 8, values 0..15 low nibbles, 16..31 high), and its scale. */
SKV_HD float skv_cu_wblock(const uint8_t *blk, int is_q4, uint32_t w[8])
{
    for (unsigned i = 0; i < 8; i++) {
        if (!is_q4) {
            w[i] = skv_cu_rd32(blk + 2 + 4 * i);
            continue;
        }
        uint32_t v = 0;
        for (unsigned k = 0; k < 4; k++) {
            unsigned j = 4 * i + k;
            uint8_t byte = blk[2 + (j & 15)];
            int q = (j < 16 ? byte & 15 : byte >> 4) - 8;
            v |= (uint32_t)(uint8_t)(int8_t)q << 8 * k;
        }
        w[i] = v;
    }
    return skv_cu_f16_to_f32(skv_cu_rd16(blk));
}

/* The exact integer sum of a weight block with an activation block. */
SKV_HD int32_t skv_cu_isum(const uint32_t w[8], const int8_t *qa)
{
    int32_t s = 0;
    for (unsigned i = 0; i < 8; i++) s = skv_cu_dp4a(w[i], skv_cu_rd32((const uint8_t *)qa + 4 * i), s);
    return s;
}

/* One step of the chain over the blocks, ascending: acc = fma(d_w * d_x, isum, acc). */
SKV_HD float skv_cu_qchain(float acc, float dw, float dx, int32_t isum) { return fmaf(dw * dx, (float)isum, acc); }

/* Attention's running max (exact in any order; NaN scores are skipped as the CPU's
 * `s > m ? s : m` skips them). A -0 / +0 tie may pick either zero: the max is only used
 * in exp(s - m), whose value is the same for both (skv_cu_exp(+-0) == 1 and s - (+-0) ==
 * s for s != 0). */
SKV_HD float skv_cu_max(float m, float s) { return s > m ? s : m; }

#endif
