/* AVX-512 VNNI twins of the integer dot kernels: dot_x86.h built with
 * vpdpbusd (-mavx512f -mavx512bw -mavx512vl -mavx512vnni, Makefile); run only
 * where skv_dot_level() allows SKV_DOT_AVX512 (SKV_CPU_AVX512_SET).  A build
 * whose compiler lacks the flags gets the AVX2 kernels under these names. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX2__) && \
    defined(__FMA__) && defined(__F16C__)
#define SKV_DOT_VNNI 1
#define SKV_DOT_FN(name) skv_gemm_##name##_avx512
#include "quant/dot_x86.h"
#elif defined(__x86_64__)
#define SKV_DOT_ALIAS(name)                                                                                  \
    void skv_gemm_##name##_avx512(float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa,     \
                                  size_t qa_stride, size_t K, size_t T, size_t n_rows)                      \
    {                                                                                                        \
        skv_gemm_##name##_avx2(y, ldy, W, row_bytes, qa, qa_stride, K, T, n_rows);                           \
    }
SKV_DOT_ALIAS(q8_0)
SKV_DOT_ALIAS(q4_0)
SKV_DOT_ALIAS(q4_k)
SKV_DOT_ALIAS(q6_k)
#endif
