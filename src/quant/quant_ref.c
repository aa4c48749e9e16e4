/* Scalar reference kernels of the quantizers (quant.h): the specification of
 * every result; the AVX2 twins in quant_avx2.c compute the same bits.
 * Reductions use the 8-lane striped order of skv_quant_dot_ref(). */
#include "quant/quant.h"
#include "core/fpguard.h"
#include "quant/fbits.h"

float skv_quant_dot_ref(const float *a, const float *b, size_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
    return skv_quant_hsum8(l);
}

/* Unnormalised Walsh-Hadamard transform of v[m], m a power of two:
 * stage h pairs (j, j+h) -> (a+b, a-b). */
void skv_quant_fwht_ref(float *v, size_t m)
{
    for (size_t h = 1; h < m; h <<= 1)
        for (size_t i = 0; i < m; i += h << 1)
            for (size_t j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
}

void skv_quant_scale_ref(const float *x, float k, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = x[i] * k;
}

void skv_quant_xorsign_ref(float *v, const uint32_t *mask, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = skv_bits_f32(skv_f32_bits(v[i]) ^ mask[i]);
}

/* idx[i] = #{k < nb : y[i] > bound[k]} (bounds ascending). */
void skv_quant_index_ref(const float *y, const float *bound, int nb, uint8_t *idx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        for (int k = 0; k < nb; k++) c += y[i] > bound[k];
        idx[i] = (uint8_t)c;
    }
}

void skv_quant_lookup_ref(const uint8_t *idx, const float *cent, int levels, float *v, size_t n)
{
    (void)levels; /* indices are < levels by construction (b-bit fields) */
    for (size_t i = 0; i < n; i++) v[i] = cent[idx[i]];
}

/* QJL signs: z[i] = (S_i . r >= 0) with S_i row i of S[d][d]. */
void skv_quant_qjl_signs_ref(const float *S, const float *r, size_t d, uint8_t *z)
{
    for (size_t i = 0; i < d; i++) z[i] = skv_quant_dot_ref(S + i * d, r, d) >= 0.0f;
}

/* acc = S^T (2z - 1), summed over rows i = 0, 1, ... in order from +0:
 * acc[j] = acc[j] + S[i][j] where z[i] is 1, acc[j] - S[i][j] where 0. */
void skv_quant_qjl_accum_ref(const float *S, const uint8_t *z, size_t d, float *acc)
{
    for (size_t j = 0; j < d; j++) acc[j] = 0.0f;
    for (size_t i = 0; i < d; i++) {
        const float *row = S + i * d;
        if (z[i])
            for (size_t j = 0; j < d; j++) acc[j] = acc[j] + row[j];
        else
            for (size_t j = 0; j < d; j++) acc[j] = acc[j] - row[j];
    }
}
