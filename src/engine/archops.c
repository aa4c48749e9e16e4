/* GELU, soft-capping and capped attention (archops.h). */
#include "engine/archops.h"
#include "core/fpguard.h"

#include <math.h>
#include <string.h>

float skv_tanh_ref(float x)
{
    float a = fabsf(x), r;
    if (a < 0.0625f) { /* x - x^3/3 + 2x^5/15 - 17x^7/315: the 1 - 2/(e+1) form cancels here */
        float x2 = x * x;
        return x + x * x2 * (-0.33333334f + x2 * (0.13333334f + x2 * -0.053968254f));
    }
    if (a > 9.0f) return x > 0.0f ? 1.0f : -1.0f;
    r = 1.0f - 2.0f / (skv_exp_ref(2.0f * a) + 1.0f);
    return x > 0.0f ? r : -r;
}

void skv_gelu_mul(float *h, const float *g, size_t n)
{
    const float c = 0.7978845608f, a = 0.044715f; /* sqrt(2/pi) */
    for (size_t i = 0; i < n; i++) {
        float x = h[i];
        float t = skv_tanh_ref(c * (x * (1.0f + a * (x * x))));
        h[i] = ((0.5f * x) * (1.0f + t)) * g[i];
    }
}

void skv_softcap(float *x, size_t n, float cap)
{
    float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++) x[i] = cap * skv_tanh_ref(x[i] * inv);
}

void skv_attn_capped_row(const skv_kernels *k, float *out, const float *q, size_t n, const float *K, const float *V,
                         size_t hd, float scale, float cap, float *scores)
{
    float mx = -INFINITY, inv;
    for (size_t j = 0; j < n; j++) scores[j] = k->dot(q, K + j * hd, hd) * scale;
    skv_softcap(scores, n, cap);
    for (size_t j = 0; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
    k->exp_sub(scores, scores, mx, n);
    inv = 1.0f / k->sum(scores, n);
    memset(out, 0, hd * sizeof(float));
    for (size_t j = 0; j < n; j++) k->axpy(out, scores[j] * inv, V + j * hd, hd);
}
