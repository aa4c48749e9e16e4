/* AVX-512 VNNI twins of the integer dot kernels of the types without a tuned kernel:
 * dot_ext_x86.h built with vpdpbusd (Makefile flags as dot_avx512.c); run only where
 * skv_dot_level() allows SKV_DOT_AVX512.  A compiler without the flags gets the AVX2
 * kernels under these names. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX2__) && \
    defined(__FMA__) && defined(__F16C__)
#define SKV_DOT_VNNI 1
#define SKV_DOT_FN(name) skv_gemm_##name##_avx512
#include "quant/dot_ext_x86.h"
#elif defined(__x86_64__)
SKV_GEMM_AVX512_ALIAS(q4_1)
SKV_GEMM_AVX512_ALIAS(q5_0)
SKV_GEMM_AVX512_ALIAS(q5_1)
SKV_GEMM_AVX512_ALIAS(iq4_nl)
SKV_GEMM_AVX512_ALIAS(q2_k)
SKV_GEMM_AVX512_ALIAS(q3_k)
SKV_GEMM_AVX512_ALIAS(q5_k)
SKV_GEMM_AVX512_ALIAS(iq4_xs)
#endif
