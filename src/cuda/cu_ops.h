/* The CUDA backend's operations (docs/cuda.md), in two forms with the same arguments:
 *   skv_cumodel_*  the host model: the kernels' per-thread steps (cuda/cu_kern.h) run on
 *                  the CPU in the kernels' structure (lanes, tree, tail, block chains);
 *                  plain C, in every build. tests/test_cuda_order.c checks it bit for
 *                  bit against the CPU engine's scalar reference.
 *   skv_cuda_*     the same on the device (cu_ops.cu, built by `make CUDA=1`; without it
 *                  cu_stub.c answers SKV_CUDA_UNAVAILABLE). tests/test_cuda_gpu.c checks
 *                  them against the CPU reference bit for bit where a GPU is present.
 *
 * Shapes (row-major, every array on the host):
 *   matvec_f16  y[T][n_rows] = W[n_rows][K] (binary16) . x[T][K]      (canonical dot)
 *   qmatmul     the same for q8_0 / q4_0 rows (K % 32 == 0): x quantized per block of
 *               32 (quant/dot.h's act32), integer dot per block, the float chain
 *               over the blocks ascending
 *   rmsnorm     y[T][n] = (x * inv) * w,  inv = 1 / sqrt(dot(x, x) / n + eps)
 *   rope        rows of x[rows][hd], row i at position pos[i]: pairs (2k, 2k+1), or
 *               (k, k+np) with neox, rotated by cos_t/sin_t[pos][np]
 *   silu_mul    h[i] = (h[i] / (1 + exp(-h[i]))) * g[i]
 *   attn        query row i (q[i][hd]) over the first n[i] rows of its KV head kvh[i]
 *               (K, V: [n_kv][n_ctx][hd], f32 or binary16): engine/ops.h's attn. */
#ifndef SKV_CUDA_CU_OPS_H
#define SKV_CUDA_CU_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct skv_cu_attn_args {
    float *out;           /* [nq][hd] */
    const float *q;       /* [nq][hd] */
    const uint32_t *n;    /* [nq]: keys attended, 1 .. n_ctx */
    const uint32_t *kvh;  /* [nq]: KV head of each query row, < n_kv (GQA) */
    size_t nq;
    const void *K, *V;    /* [n_kv][n_ctx][hd], float or uint16_t (kv_f16) */
    int kv_f16;
    size_t n_kv, n_ctx, hd;
    float scale;
} skv_cu_attn_args;

/* The weight types of qmatmul. */
enum { SKV_CU_Q8_0 = 0, SKV_CU_Q4_0 = 1 };

/* ---- the host model ---- */
void skv_cumodel_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows);
void skv_cumodel_qmatmul(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows);
void skv_cumodel_rmsnorm(float *y, const float *x, const float *w, size_t n, size_t T, float eps);
void skv_cumodel_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *cos_t,
                      const float *sin_t, const uint32_t *pos);
void skv_cumodel_silu_mul(float *h, const float *g, size_t n);
/* scores: scratch of nq * n_ctx floats. */
void skv_cumodel_attn(const skv_cu_attn_args *a, float *scores);

/* ---- the device (status: SKV_CUDA_OK or one below; skv_cuda_error() says why) ---- */
enum { SKV_CUDA_OK = 0, SKV_CUDA_UNAVAILABLE = -1, SKV_CUDA_BADARG = -2, SKV_CUDA_FAILED = -3 };
/* SKV_CUDA_OK when a CUDA device can run the kernels; else why not (no driver, no device,
 * built without CUDA). */
int skv_cuda_probe(void);
/* The message of this thread's last failed skv_cuda_* call ("" when none). */
const char *skv_cuda_error(void);
/* The device's name and compute capability, after a successful probe. */
const char *skv_cuda_device_name(void);
int skv_cuda_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows);
int skv_cuda_qmatmul(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows);
int skv_cuda_rmsnorm(float *y, const float *x, const float *w, size_t n, size_t T, float eps);
int skv_cuda_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *cos_t, const float *sin_t,
                  const uint32_t *pos, size_t n_pos);
int skv_cuda_silu_mul(float *h, const float *g, size_t n);
int skv_cuda_attn(const skv_cu_attn_args *a);
/* Times `iters` launches of the matvec kernels on device-resident data (seconds per
 * launch in *sec): the benchmark of scripts/gpu_check.sh. wtype: -1 f16, else SKV_CU_*. */
int skv_cuda_bench_matvec(int wtype, size_t K, size_t n_rows, size_t T, int iters, double *sec);

#ifdef __cplusplus
}
#endif

#endif
