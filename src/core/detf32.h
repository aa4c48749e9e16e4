/* The engine's own binary32 exponential (docs/determinism.md, contract 5), one source for
 * the CPU (engine/ops.c skv_exp_ref) and the CUDA kernels (cuda/cu_kern.h): under nvcc it
 * is a __host__ __device__ function, so the GPU runs these very operations.
 * exp(x) = 2^k * exp(r), k = round(x / ln2) with the 1.5*2^23 trick (exact under
 * round-to-nearest-even), r = x - k*ln2 with ln2 split hi/lo so that k*ln2_hi is exact;
 * exp(r) a degree-6 Taylor polynomial by Horner with fma; 2^k applied as two exact powers
 * of two so that every intermediate stays normal. exp(x) for x in [-87, 88]; 0 below, +inf
 * above; about 2 ulp. Needs -ffp-contract=off (C) / -fmad=false (nvcc). */
#ifndef SKV_CORE_DETF32_H
#define SKV_CORE_DETF32_H

#include <stdint.h>
#include <string.h>
#if !defined(__CUDACC__)
#include <math.h>
#endif

#if defined(__CUDACC__)
#define SKV_DETF32_FN __host__ __device__ static inline
#else
#define SKV_DETF32_FN static inline
#endif

SKV_DETF32_FN float skv_detf32_exp(float x)
{
    if (x < -87.0f) return 0.0f;
    if (x > 88.0f) return INFINITY;
    if (x != x) return x;
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* log2(e), 1.5 * 2^23 */
    float r = fmaf(-k, 0.693359375f, x);                               /* ln2 hi */
    r = fmaf(-k, -2.12194440e-4f, r);                                  /* ln2 lo */
    float p = 1.3888889e-3f;                                           /* 1/720 */
    p = fmaf(p, r, 8.3333333e-3f);
    p = fmaf(p, r, 4.1666667e-2f);
    p = fmaf(p, r, 1.6666667e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    /* 2^k as a float; k in [-126, 127] here. Multiply in two steps to stay normal. */
    int32_t ki = (int32_t)k, k1 = ki / 2, k2 = ki - k1;
    uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return (p * s1) * s2;
}

#endif
