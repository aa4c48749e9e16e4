/* The CUDA kernels of cu_ops.h and their host plumbing (built by `make CUDA=1`).
 * Every float step is a cu_kern.h function, the code cu_model.c runs on the CPU; this file
 * adds only the grids, shared memory and shuffles that move those steps' results. Built
 * with -fmad=false -prec-div=true -prec-sqrt=true -ftz=false, never fast math.
 * Each skv_cuda_* call copies its inputs to the device, runs the kernel and copies the
 * result back: the plumbing of tests/test_cuda_gpu.c, not yet of the forward pass
 * (docs/cuda.md says what remains). */
#include "cuda/cu_ops.h"
#include "core/fpguard.h"

/* nvcc announces no fast-math mode to the preprocessor: the Makefile refuses such flags by
 * name (UNSAFE_NV) and `make CUDA=1 cuda-ptx-check` reads the PTX for their traces. */

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cu_kern.h"

#define FULL_MASK 0xffffffffu
#define MV_ROWS 32 /* k_matvec_f16: rows per block, 8 lane threads each */
#define QD_ROWS 8  /* k_qdot: rows per block, a warp each */
#define NT 256     /* threads per block */

static thread_local char g_err[256];
static char g_name[360];

static int fail(int code, const char *what, cudaError_t e)
{
    snprintf(g_err, sizeof g_err, "%s: %s", what, e == cudaSuccess ? "bad arguments" : cudaGetErrorString(e));
    return code;
}

extern "C" const char *skv_cuda_error(void) { return g_err; }
extern "C" const char *skv_cuda_device_name(void) { return g_name; }

/* ---- kernels ------------------------------------------------------------------------- */

__global__ void k_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t n_rows)
{
    __shared__ float acc[MV_ROWS][8];
    unsigned l = threadIdx.x % 8, rr = threadIdx.x / 8;
    size_t t = blockIdx.y, r = (size_t)blockIdx.x * MV_ROWS + rr, n8 = K & ~(size_t)7;
    const float *xt = x + t * K;
    if (r < n_rows) acc[rr][l] = skv_cu_lane_dot_h(W + r * K, xt, n8, l);
    __syncthreads();
    if (r < n_rows && l == 0) y[t * n_rows + r] = skv_cu_tail_dot_h(skv_cu_tree8(acc[rr]), W + r * K, xt, n8, K);
}

__global__ void k_act32(float *d, int8_t *q, const float *x, size_t n_blocks)
{
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over T * nb blocks */
    if (b < n_blocks) d[b] = skv_cu_act32(x + 32 * b, q + 32 * b);
}

__global__ void k_qdot(float *y, const uint8_t *W, size_t bytes, int is_q4, size_t K, const float *d,
                       const int8_t *q, size_t n_rows)
{
    unsigned lane = threadIdx.x % 32;
    size_t t = blockIdx.y, r = (size_t)blockIdx.x * QD_ROWS + threadIdx.x / 32, nb = K / 32;
    if (r >= n_rows) return; /* the whole warp: r is the warp's */
    float acc = 0.0f;
    for (size_t c = 0; c < nb; c += 32) {
        size_t b = c + lane, m = nb - c < 32 ? nb - c : 32;
        float dw = 0.0f, dx = 0.0f;
        int32_t is = 0;
        if (b < nb) {
            uint32_t wq[8];
            dw = skv_cu_wblock(W + (r * nb + b) * bytes, is_q4, wq);
            is = skv_cu_isum(wq, q + t * K + 32 * b);
            dx = d[t * nb + b];
        }
        for (unsigned s = 0; s < m; s++)
            acc = skv_cu_qchain(acc, __shfl_sync(FULL_MASK, dw, s), __shfl_sync(FULL_MASK, dx, s),
                                __shfl_sync(FULL_MASK, is, s));
    }
    if (lane == 0) y[t * n_rows + r] = acc;
}

__global__ void k_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps)
{
    __shared__ float acc[8];
    __shared__ float inv;
    const float *xt = x + (size_t)blockIdx.x * n;
    size_t n8 = n & ~(size_t)7;
    if (threadIdx.x < 8) acc[threadIdx.x] = skv_cu_lane_dot(xt, xt, n8, threadIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) inv = skv_cu_rms_inv(skv_cu_tail_dot(skv_cu_tree8(acc), xt, xt, n8, n), n, eps);
    __syncthreads();
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) y[(size_t)blockIdx.x * n + i] = (xt[i] * inv) * w[i];
}

__global__ void k_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *c, const float *s,
                       const uint32_t *pos)
{
    size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x, i = g / (np ? np : 1), k = g % (np ? np : 1);
    if (g >= rows * np) return;
    float *xr = x + i * hd;
    size_t a = neox ? k : 2 * k, b = neox ? k + np : 2 * k + 1;
    skv_cu_rope_pair(xr + a, xr + b, c[pos[i] * np + k], s[pos[i] * np + k]);
}

__global__ void k_silu_mul(float *h, const float *g, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = skv_cu_silu_mul(h[i], g[i]);
}

__device__ static float attn_score(const skv_cu_attn_args &a, const float *q, size_t kv, size_t j)
{
    size_t off = (kv * a.n_ctx + j) * a.hd;
    if (a.kv_f16) return skv_cu_dot_h((const uint16_t *)a.K + off, q, a.hd) * a.scale;
    return skv_cu_dot((const float *)a.K + off, q, a.hd) * a.scale;
}

__global__ void k_attn(skv_cu_attn_args a, float *scores)
{
    __shared__ float red[NT];
    __shared__ float acc[8];
    __shared__ float inv;
    size_t i = blockIdx.x, n = a.n[i], kv = a.kvh[i], n8 = n & ~(size_t)7, tid = threadIdx.x;
    const float *q = a.q + i * a.hd;
    float *s = scores + i * a.n_ctx, mx = -INFINITY;
    for (size_t j = tid; j < n; j += NT) {
        s[j] = attn_score(a, q, kv, j);
        mx = skv_cu_max(mx, s[j]);
    }
    red[tid] = mx;
    __syncthreads();
    for (unsigned h = NT / 2; h > 0; h /= 2) {
        if (tid < h) red[tid] = skv_cu_max(red[tid], red[tid + h]);
        __syncthreads();
    }
    mx = red[0];
    for (size_t j = tid; j < n; j += NT) s[j] = skv_cu_exp(s[j] - mx);
    __syncthreads();
    if (tid < 8) acc[tid] = skv_cu_lane_sum(s, n8, (unsigned)tid);
    __syncthreads();
    if (tid == 0) inv = 1.0f / skv_cu_tail_sum(skv_cu_tree8(acc), s, n8, n);
    __syncthreads();
    for (size_t d = tid; d < a.hd; d += NT) {
        float od = 0.0f;
        for (size_t j = 0; j < n; j++) {
            size_t off = (kv * a.n_ctx + j) * a.hd + d;
            float v = a.kv_f16 ? skv_cu_f16_to_f32(((const uint16_t *)a.V)[off]) : ((const float *)a.V)[off];
            od = fmaf(s[j] * inv, v, od);
        }
        a.out[i * a.hd + d] = od;
    }
}

/* ---- host plumbing ------------------------------------------------------------------- */

/* Device buffers of one call, freed together. */
struct bufs {
    void *p[8];
    int n;
};

static cudaError_t up(bufs &b, void **dst, const void *src, size_t bytes)
{
    cudaError_t e = cudaMalloc(dst, bytes ? bytes : 1);
    if (e != cudaSuccess) return e;
    b.p[b.n++] = *dst;
    return src ? cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice) : cudaSuccess;
}

static void release(bufs &b)
{
    for (int i = 0; i < b.n; i++) cudaFree(b.p[i]);
    b.n = 0;
}

/* After a launch: its error, then the device's, then the result copied back. */
static int finish(bufs &b, void *dst, const void *src, size_t bytes, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess && dst) e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    release(b);
    return e == cudaSuccess ? SKV_CUDA_OK : fail(SKV_CUDA_FAILED, what, e);
}

#define UP(dst, src, bytes)                                                           \
    do {                                                                              \
        cudaError_t e_ = up(b, (void **)&(dst), (src), (bytes));                      \
        if (e_ != cudaSuccess) return release(b), fail(SKV_CUDA_FAILED, "cudaMalloc/cudaMemcpy", e_); \
    } while (0)

extern "C" int skv_cuda_probe(void)
{
    int n = 0;
    cudaDeviceProp p;
    cudaFuncAttributes fa;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return fail(SKV_CUDA_UNAVAILABLE, "no usable CUDA device", e);
    if (n == 0) return fail(SKV_CUDA_UNAVAILABLE, "no CUDA device", cudaSuccess);
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) return fail(SKV_CUDA_UNAVAILABLE, "device 0", e);
    snprintf(g_name, sizeof g_name, "%s (compute capability %d.%d, %d SMs)", p.name, p.major, p.minor,
             p.multiProcessorCount);
    /* the kernels were compiled for one architecture (CUDA_ARCH): is there an image for this one? */
    if ((e = cudaFuncGetAttributes(&fa, k_matvec_f16)) != cudaSuccess)
        return fail(SKV_CUDA_UNAVAILABLE, "no kernel image for this device (rebuild with CUDA_ARCH=sm_XY)", e);
    return SKV_CUDA_OK;
}

static unsigned blocks(size_t n, size_t per) { return (unsigned)((n + per - 1) / per); }

extern "C" int skv_cuda_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    bufs b = {{0}, 0};
    uint16_t *dW;
    float *dx, *dy;
    if (!K || !T || !n_rows || T > 65535) return fail(SKV_CUDA_BADARG, "matvec_f16", cudaSuccess);
    UP(dW, W, n_rows * K * 2);
    UP(dx, x, T * K * 4);
    UP(dy, NULL, T * n_rows * 4);
    k_matvec_f16<<<dim3(blocks(n_rows, MV_ROWS), (unsigned)T), NT>>>(dy, dW, K, dx, n_rows);
    return finish(b, y, dy, T * n_rows * 4, "k_matvec_f16");
}

/* Quantizes T activation rows into (d, q) on the device and launches k_qdot. */
static void launch_qdot(int wtype, float *dy, const uint8_t *dW, size_t K, const float *dx, float *dd, int8_t *dq,
                        size_t T, size_t n_rows)
{
    size_t nblk = T * (K / 32), bytes = wtype == SKV_CU_Q4_0 ? SKV_CU_Q4_0_BYTES : SKV_CU_Q8_0_BYTES;
    k_act32<<<blocks(nblk, NT), NT>>>(dd, dq, dx, nblk);
    k_qdot<<<dim3(blocks(n_rows, QD_ROWS), (unsigned)T), NT>>>(dy, dW, bytes, wtype == SKV_CU_Q4_0, K, dd, dq,
                                                               n_rows);
}

extern "C" int skv_cuda_qmatmul(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    bufs b = {{0}, 0};
    uint8_t *dW;
    float *dx, *dy, *dd;
    int8_t *dq;
    size_t bytes = wtype == SKV_CU_Q4_0 ? SKV_CU_Q4_0_BYTES : SKV_CU_Q8_0_BYTES;
    if ((wtype != SKV_CU_Q8_0 && wtype != SKV_CU_Q4_0) || !K || K % 32 || !T || !n_rows || T > 65535)
        return fail(SKV_CUDA_BADARG, "qmatmul", cudaSuccess);
    UP(dW, W, n_rows * (K / 32) * bytes);
    UP(dx, x, T * K * 4);
    UP(dy, NULL, T * n_rows * 4);
    UP(dd, NULL, T * (K / 32) * 4);
    UP(dq, NULL, T * K);
    launch_qdot(wtype, dy, dW, K, dx, dd, dq, T, n_rows);
    return finish(b, y, dy, T * n_rows * 4, "k_act32/k_qdot");
}

extern "C" int skv_cuda_rmsnorm(float *y, const float *x, const float *w, size_t n, size_t T, float eps)
{
    bufs b = {{0}, 0};
    float *dx, *dw, *dy;
    if (!n || !T || T > 0x7fffffff) return fail(SKV_CUDA_BADARG, "rmsnorm", cudaSuccess);
    UP(dx, x, T * n * 4);
    UP(dw, w, n * 4);
    UP(dy, NULL, T * n * 4);
    k_rmsnorm<<<(unsigned)T, NT>>>(dy, dx, dw, n, eps);
    return finish(b, y, dy, T * n * 4, "k_rmsnorm");
}

extern "C" int skv_cuda_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *cos_t,
                             const float *sin_t, const uint32_t *pos, size_t n_pos)
{
    bufs b = {{0}, 0};
    float *dx, *dc, *ds;
    uint32_t *dp;
    if (!rows || !np || 2 * np > hd) return fail(SKV_CUDA_BADARG, "rope", cudaSuccess);
    for (size_t i = 0; i < rows; i++)
        if (pos[i] >= n_pos) return fail(SKV_CUDA_BADARG, "rope: position beyond the tables", cudaSuccess);
    UP(dx, x, rows * hd * 4);
    UP(dc, cos_t, n_pos * np * 4);
    UP(ds, sin_t, n_pos * np * 4);
    UP(dp, pos, rows * 4);
    k_rope<<<blocks(rows * np, NT), NT>>>(dx, rows, hd, np, neox, dc, ds, dp);
    return finish(b, x, dx, rows * hd * 4, "k_rope");
}

extern "C" int skv_cuda_silu_mul(float *h, const float *g, size_t n)
{
    bufs b = {{0}, 0};
    float *dh, *dg;
    if (!n) return fail(SKV_CUDA_BADARG, "silu_mul", cudaSuccess);
    UP(dh, h, n * 4);
    UP(dg, g, n * 4);
    k_silu_mul<<<blocks(n, NT), NT>>>(dh, dg, n);
    return finish(b, h, dh, n * 4, "k_silu_mul");
}

static int attn_args_ok(const skv_cu_attn_args *a)
{
    if (!a->nq || !a->hd || !a->n_kv || !a->n_ctx || a->nq > 0x7fffffff) return 0;
    for (size_t i = 0; i < a->nq; i++)
        if (a->n[i] == 0 || a->n[i] > a->n_ctx || a->kvh[i] >= a->n_kv) return 0;
    return 1;
}

extern "C" int skv_cuda_attn(const skv_cu_attn_args *a)
{
    bufs b = {{0}, 0};
    skv_cu_attn_args d = *a;
    size_t el = a->kv_f16 ? 2 : 4, kvb = a->n_kv * a->n_ctx * a->hd * el;
    float *dout, *dsc;
    if (!attn_args_ok(a)) return fail(SKV_CUDA_BADARG, "attn", cudaSuccess);
    UP(dout, NULL, a->nq * a->hd * 4);
    UP(d.q, a->q, a->nq * a->hd * 4);
    UP(d.n, a->n, a->nq * 4);
    UP(d.kvh, a->kvh, a->nq * 4);
    UP(d.K, a->K, kvb);
    UP(d.V, a->V, kvb);
    UP(dsc, NULL, a->nq * a->n_ctx * 4);
    d.out = dout;
    k_attn<<<(unsigned)a->nq, NT>>>(d, dsc);
    return finish(b, a->out, dout, a->nq * a->hd * 4, "k_attn");
}

extern "C" int skv_cuda_bench_matvec(int wtype, size_t K, size_t n_rows, size_t T, int iters, double *sec)
{
    bufs b = {{0}, 0};
    uint8_t *dW;
    float *dx, *dy, *dd, ms = 0.0f;
    int8_t *dq;
    cudaEvent_t e0, e1;
    size_t wbytes = wtype < 0 ? n_rows * K * 2 : n_rows * (K / 32) * (wtype == SKV_CU_Q4_0 ? 18 : 34);
    if (!K || K % 32 || !T || !n_rows || T > 65535 || iters < 1) return fail(SKV_CUDA_BADARG, "bench", cudaSuccess);
    UP(dW, NULL, wbytes);
    UP(dx, NULL, T * K * 4);
    UP(dy, NULL, T * n_rows * 4);
    UP(dd, NULL, T * (K / 32) * 4);
    UP(dq, NULL, T * K);
    cudaMemset(dW, 0x11, wbytes); /* finite halves and scales (0x1111), small int8 values */
    cudaMemset(dx, 0, T * K * 4);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = -1; i < iters; i++) { /* the first launch warms up, untimed */
        if (i == 0) cudaEventRecord(e0);
        if (wtype < 0)
            k_matvec_f16<<<dim3(blocks(n_rows, MV_ROWS), (unsigned)T), NT>>>(dy, (const uint16_t *)dW, K, dx, n_rows);
        else launch_qdot(wtype, dy, dW, K, dx, dd, dq, T, n_rows);
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    *sec = (double)ms / 1e3 / iters;
    return finish(b, NULL, NULL, 0, "bench");
}
