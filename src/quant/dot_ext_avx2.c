/* AVX2 twins of the integer dot kernels of the types without a tuned kernel
 * (dot_ext_x86.h); compiled with -mavx2 -mfma -mf16c, run only where
 * skv_dot_level() allows SKV_DOT_AVX2. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SKV_DOT_VNNI 0
#define SKV_DOT_FN(name) skv_gemm_##name##_avx2
#include "quant/dot_ext_x86.h"
#endif
