/* AVX2 twins of the integer dot kernels (dot_x86.h); compiled with -mavx2
 * -mfma -mf16c, run only where skv_dot_level() allows SKV_DOT_AVX2. */
#include "quant/dot_int.h"
#include "core/fpguard.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SKV_DOT_VNNI 0
#define SKV_DOT_FN(name) skv_gemm_##name##_avx2
#define SKV_DOT_PFN(name) skv_gemv_##name##_pk_avx2
#include "quant/dot_x86.h"
#include "quant/dot_pack_x86.h"
#include "quant/dot_pack32_x86.h"
#include "quant/dot_pack2_x86.h"
#endif
