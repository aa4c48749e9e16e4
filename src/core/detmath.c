/* See detmath.h. Derivations:
 * exp: x = k ln2 + r, |r| <= ln2/2; k rounded with the 1.5*2^52 trick; ln2 split so that
 *      k*LN2_HI is exact for |k| < 2^11; e^r by its Taylor series to r^14 (error < 1e-17);
 *      2^k assembled from its bit pattern.
 * log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1),
 *      |s| < 0.172, series to s^33 (error < 1e-26).
 * sin/cos: a = k pi/2 + r with a three-part pi/2 (Cody-Waite), |r| <= pi/4; Taylor series
 *      to r^21 / r^20 (error < 1e-20); quadrant from k mod 4. */
#include "core/detmath.h"
#include "core/fpguard.h"

#include <float.h>
#include <stdint.h>
#include <string.h>

_Static_assert(FLT_EVAL_METHOD == 0, "deterministic maths needs double evaluated as double");

#define ROUND_MAGIC 6755399441055744.0 /* 1.5 * 2^52 */

static double pow2i(int k) /* 2^k, k in [-1022, 1023] */
{
    uint64_t b = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &b, 8);
    return d;
}

double skv_det_exp(double x)
{
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    const double INV_LN2 = 1.44269504088896338700e+00;
    if (x != x) return x; /* NaN: (int)k below would be undefined */
    if (x > 700.0) x = 700.0;
    if (x < -700.0) x = -700.0;
    double k = (x * INV_LN2 + ROUND_MAGIC) - ROUND_MAGIC;
    double r = (x - k * LN2_HI) - k * LN2_LO;
    double term = 1.0, sum = 1.0;
    for (int i = 1; i <= 14; i++) {
        term = term * r / (double)i;
        sum = sum + term;
    }
    return sum * pow2i((int)k);
}

double skv_det_log(double x)
{
    const double LN2 = 6.93147180559945286227e-01, SQRT2 = 1.41421356237309514547e+00;
    uint64_t b;
    int e;
    double m;
    if (!(x > 0.0) || x > DBL_MAX) return 0.0;
    if (x < DBL_MIN) x = DBL_MIN;
    memcpy(&b, &x, 8);
    e = (int)((b >> 52) & 0x7ff) - 1023;
    b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* mantissa in [1, 2) */
    memcpy(&m, &b, 8);
    if (m > SQRT2) {
        m = m * 0.5;
        e++;
    }
    double s = (m - 1.0) / (m + 1.0), s2 = s * s, term = s, sum = 0.0;
    for (int i = 1; i <= 33; i += 2) {
        sum = sum + term / (double)i;
        term = term * s2;
    }
    return (double)e * LN2 + 2.0 * sum;
}

double skv_det_pow(double b, double y) { return skv_det_exp(y * skv_det_log(b)); }

void skv_det_sincos(double a, double *s, double *c)
{
    const double PIO2_1 = 1.57079632673412561417e+00, PIO2_2 = 6.07710050650619224932e-11,
                 PIO2_3 = 2.02226624879595063154e-21, INV_PIO2 = 6.36619772367581382433e-01;
    if (!(a > -0x1p30 && a < 0x1p30)) { /* out of range, NaN or infinite: no quadrant to take */
        *s = 0.0, *c = 1.0;
        return;
    }
    double k = (a * INV_PIO2 + ROUND_MAGIC) - ROUND_MAGIC;
    double r = ((a - k * PIO2_1) - k * PIO2_2) - k * PIO2_3, r2 = r * r;
    double sn = r, cs = 1.0, ts = r, tc = 1.0;
    for (int i = 1; i <= 10; i++) {
        ts = -ts * r2 / (double)((2 * i) * (2 * i + 1));
        tc = -tc * r2 / (double)((2 * i - 1) * (2 * i));
        sn = sn + ts;
        cs = cs + tc;
    }
    switch ((int64_t)k & 3) {
    case 0: *s = sn, *c = cs; break;
    case 1: *s = cs, *c = -sn; break;
    case 2: *s = -sn, *c = -cs; break;
    default: *s = -cs, *c = sn; break;
    }
}
