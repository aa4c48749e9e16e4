/* The quantizers' deterministic PRNG: splitmix64 and a Gaussian built from
 * + - * / and sqrt only (docs/quant.md), so every IEEE machine draws the
 * same rotation signs, permutations and QJL matrices. */
#include <math.h>
#include "core/fpguard.h"
#include <string.h>

#include "quant/quant.h"

uint64_t skv_quant_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Natural log of a positive normal binary64 from + - * / only:
 * x = 2^e * m, m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(z), z = (m-1)/(m+1),
 * |z| <= 0.1716, series to z^25 (truncation < 1e-20).  Not correctly rounded
 * (~1 ulp), but the same bits on every IEEE machine, which is what matters. */
static double det_log(double x)
{
    uint64_t u;
    double m, z, z2, p;
    int e;
    memcpy(&u, &x, sizeof u);
    e = (int)((u >> 52) & 0x7ff) - 1023;
    u = (u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    memcpy(&m, &u, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    z = (m - 1.0) / (m + 1.0);
    z2 = z * z;
    p = 1.0 / 25.0;
    for (int k = 11; k >= 0; k--) p = p * z2 + 1.0 / (double)(2 * k + 1);
    return 2.0 * z * p + (double)e * 0.69314718055994530942;
}

double skv_quant_gauss(uint64_t *state, double *spare, int *has_spare)
{
    if (*has_spare) {
        *has_spare = 0;
        return *spare;
    }
    for (;;) {
        /* u, v uniform on [-1, 1) with 53-bit resolution (exact in binary64) */
        double u = (double)(skv_quant_splitmix64(state) >> 11) * 0x1p-52 - 1.0;
        double v = (double)(skv_quant_splitmix64(state) >> 11) * 0x1p-52 - 1.0;
        double s = u * u + v * v;
        double f;
        if (s >= 1.0 || s == 0.0) continue;
        f = sqrt(-2.0 * det_log(s) / s);
        *spare = v * f;
        *has_spare = 1;
        return u * f;
    }
}
