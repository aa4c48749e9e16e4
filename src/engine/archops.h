/* Element-wise steps of the architectures beyond llama (arch.h SKV_ARCH_*): GELU, tanh
 * soft-capping, and causal attention with capped scores. Scalar, one fixed sequence of
 * binary32 operations per element (ops.h's contract), so they cannot depend on the batch
 * or the thread count; the exponential is skv_exp_ref, never libm's. */
#ifndef SKV_ARCHOPS_H
#define SKV_ARCHOPS_H

#include <stddef.h>

#include "engine/ops.h"

/* tanh(x) from skv_exp_ref: an odd polynomial near 0, 1 - 2 / (exp(2|x|) + 1) beyond,
 * +-1 past |x| = 9 (where tanh rounds to 1 in binary32). A few ulp. */
float skv_tanh_ref(float x);
/* h = gelu(h) * g with gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void skv_gelu_mul(float *h, const float *g, size_t n);
/* x = cap * tanh(x * (1 / cap)), n values. */
void skv_softcap(float *x, size_t n, float cap);
/* One query row's causal attention over n rows of K, V [n][hd] as ops.h's attn kernel
 * does it, with each score s = dot(q, k_j) * scale capped to cap * tanh(s / cap) before
 * the softmax. scores: n floats of scratch. */
void skv_attn_capped_row(const skv_kernels *k, float *out, const float *q, size_t n, const float *K, const float *V,
                         size_t hd, float scale, float cap, float *scores);

#endif
