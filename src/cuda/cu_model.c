/* The host model of the CUDA kernels (cu_ops.h): each function runs its kernel's threads
 * one after the other, calling the same per-thread steps (cu_kern.h) the kernels call and
 * combining their results in the same fixed structure. The loops below are the kernels'
 * grids; the comment above each names the kernel in cu_ops.cu it models. Since a step's
 * result depends only on its inputs, running the threads in sequence gives the device's
 * bits, so tests/test_cuda_order.c comparing this model with the CPU engine's scalar
 * reference proves the kernels' order on a machine without a GPU. */
#include "cuda/cu_ops.h"
#include "core/fpguard.h"

#include <math.h>

#include "cuda/cu_kern.h"

/* k_matvec_f16: output (t, r) by 8 lane threads (their sums meet in shared memory), then
 * the row's lane 0 runs the tree and the tail. */
void skv_cumodel_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    size_t n8 = K & ~(size_t)7;
    for (size_t t = 0; t < T; t++)
        for (size_t r = 0; r < n_rows; r++) {
            float acc[8];
            const uint16_t *w = W + r * K;
            const float *xt = x + t * K;
            for (unsigned l = 0; l < 8; l++) acc[l] = skv_cu_lane_dot_h(w, xt, n8, l);
            y[t * n_rows + r] = skv_cu_tail_dot_h(skv_cu_tree8(acc), w, xt, n8, K);
        }
}

/* k_act32 (a thread per block of 32 activations) then k_qdot: output (t, r) by one warp;
 * lane l forms the integer sum of block 32c + l of each chunk c; every lane then runs the
 * chain over the chunk's blocks in ascending order (the values by shuffle). A block's
 * quantization depends on its 32 values only, so the model forms it where it is used. */
void skv_cumodel_qmatmul(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    size_t nb = K / 32, bytes = wtype == SKV_CU_Q4_0 ? SKV_CU_Q4_0_BYTES : SKV_CU_Q8_0_BYTES;
    const uint8_t *w8 = W;
    for (size_t t = 0; t < T; t++)
        for (size_t r = 0; r < n_rows; r++) {
            float acc = 0.0f;
            for (size_t c = 0; c < nb; c += 32) {
                float dw[32], dx[32];
                int32_t is[32];
                size_t m = nb - c < 32 ? nb - c : 32;
                for (size_t l = 0; l < m; l++) { /* the lanes */
                    uint32_t wq[8];
                    int8_t qa[32];
                    dx[l] = skv_cu_act32(x + t * K + 32 * (c + l), qa);
                    dw[l] = skv_cu_wblock(w8 + (r * nb + c + l) * bytes, wtype == SKV_CU_Q4_0, wq);
                    is[l] = skv_cu_isum(wq, qa);
                }
                for (size_t l = 0; l < m; l++) acc = skv_cu_qchain(acc, dw[l], dx[l], is[l]);
            }
            y[t * n_rows + r] = acc;
        }
}

/* k_rmsnorm: a block per row; threads 0..7 the lanes of the sum of squares, thread 0 the
 * tree, the tail and the scale; then every thread its elements. */
void skv_cumodel_rmsnorm(float *y, const float *x, const float *w, size_t n, size_t T, float eps)
{
    size_t n8 = n & ~(size_t)7;
    for (size_t t = 0; t < T; t++) {
        const float *xt = x + t * n;
        float acc[8];
        for (unsigned l = 0; l < 8; l++) acc[l] = skv_cu_lane_dot(xt, xt, n8, l);
        float inv = skv_cu_rms_inv(skv_cu_tail_dot(skv_cu_tree8(acc), xt, xt, n8, n), n, eps);
        for (size_t i = 0; i < n; i++) y[t * n + i] = (xt[i] * inv) * w[i];
    }
}

/* k_rope: a thread per pair. */
void skv_cumodel_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *cos_t,
                      const float *sin_t, const uint32_t *pos)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < np; k++) {
            float *xr = x + i * hd;
            size_t a = neox ? k : 2 * k, b = neox ? k + np : 2 * k + 1;
            skv_cu_rope_pair(xr + a, xr + b, cos_t[pos[i] * np + k], sin_t[pos[i] * np + k]);
        }
}

/* k_silu_mul: a thread per element. */
void skv_cumodel_silu_mul(float *h, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) h[i] = skv_cu_silu_mul(h[i], g[i]);
}

static float attn_score(const skv_cu_attn_args *a, const float *q, size_t kv, size_t j)
{
    size_t off = (kv * a->n_ctx + j) * a->hd;
    if (a->kv_f16) return skv_cu_dot_h((const uint16_t *)a->K + off, q, a->hd) * a->scale;
    return skv_cu_dot((const float *)a->K + off, q, a->hd) * a->scale;
}

static float attn_v(const skv_cu_attn_args *a, size_t kv, size_t j, size_t d)
{
    size_t off = (kv * a->n_ctx + j) * a->hd + d;
    return a->kv_f16 ? skv_cu_f16_to_f32(((const uint16_t *)a->V)[off]) : ((const float *)a->V)[off];
}

/* k_attn: a block per query row. A thread per key j: its score, a whole canonical dot;
 * the max (exact in any order); a thread per key: e_j = exp(s_j - max) in place; threads
 * 0..7 the lanes of the sum of the e_j, thread 0 the tree, the tail and 1 / Z; a thread
 * per dimension d: out[d] = fma(e_j * (1 / Z), v_j[d], out[d]), j ascending. */
void skv_cumodel_attn(const skv_cu_attn_args *a, float *scores)
{
    for (size_t i = 0; i < a->nq; i++) {
        size_t n = a->n[i], kv = a->kvh[i], n8 = n & ~(size_t)7;
        const float *q = a->q + i * a->hd;
        float *s = scores + i * a->n_ctx, *o = a->out + i * a->hd, mx = -INFINITY, acc[8];
        for (size_t j = 0; j < n; j++) s[j] = attn_score(a, q, kv, j);
        for (size_t j = 0; j < n; j++) mx = skv_cu_max(mx, s[j]);
        for (size_t j = 0; j < n; j++) s[j] = skv_cu_exp(s[j] - mx);
        for (unsigned l = 0; l < 8; l++) acc[l] = skv_cu_lane_sum(s, n8, l);
        float inv = 1.0f / skv_cu_tail_sum(skv_cu_tree8(acc), s, n8, n);
        for (size_t d = 0; d < a->hd; d++) {
            float od = 0.0f;
            for (size_t j = 0; j < n; j++) od = fmaf(s[j] * inv, attn_v(a, kv, j, d), od);
            o[d] = od;
        }
    }
}
