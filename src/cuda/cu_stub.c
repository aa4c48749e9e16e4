/* The device entry points of cu_ops.h in a build without CUDA (the default `make`): every
 * call answers SKV_CUDA_UNAVAILABLE and says how to build the backend. `make CUDA=1`
 * compiles cu_ops.cu instead of this file. */
#include "cuda/cu_ops.h"
#include "core/fpguard.h"

static const char k_why[] = "built without CUDA (make CUDA=1 builds the CUDA backend; docs/cuda.md)";

const char *skv_cuda_error(void) { return k_why; }
const char *skv_cuda_device_name(void) { return ""; }
int skv_cuda_probe(void) { return SKV_CUDA_UNAVAILABLE; }

int skv_cuda_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    (void)y, (void)W, (void)K, (void)x, (void)T, (void)n_rows;
    return SKV_CUDA_UNAVAILABLE;
}

int skv_cuda_qmatmul(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    (void)wtype, (void)y, (void)W, (void)K, (void)x, (void)T, (void)n_rows;
    return SKV_CUDA_UNAVAILABLE;
}

int skv_cuda_rmsnorm(float *y, const float *x, const float *w, size_t n, size_t T, float eps)
{
    (void)y, (void)x, (void)w, (void)n, (void)T, (void)eps;
    return SKV_CUDA_UNAVAILABLE;
}

int skv_cuda_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *cos_t, const float *sin_t,
                  const uint32_t *pos, size_t n_pos)
{
    (void)x, (void)rows, (void)hd, (void)np, (void)neox, (void)cos_t, (void)sin_t, (void)pos, (void)n_pos;
    return SKV_CUDA_UNAVAILABLE;
}

int skv_cuda_silu_mul(float *h, const float *g, size_t n)
{
    (void)h, (void)g, (void)n;
    return SKV_CUDA_UNAVAILABLE;
}

int skv_cuda_attn(const skv_cu_attn_args *a)
{
    (void)a;
    return SKV_CUDA_UNAVAILABLE;
}

int skv_cuda_bench_matvec(int wtype, size_t K, size_t n_rows, size_t T, int iters, double *sec)
{
    (void)wtype, (void)K, (void)n_rows, (void)T, (void)iters, (void)sec;
    return SKV_CUDA_UNAVAILABLE;
}
