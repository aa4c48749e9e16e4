/* Cyclic Jacobi eigen-decomposition of a small symmetric matrix (kvtc.h).
 *
 * Each sweep visits the pairs (p, q), p < q, in row order and zeroes a[p][q] with the
 * plane rotation [c s; -s c] (t = tan of the angle, the smaller root of
 * t^2 + 2 theta t - 1 = 0, theta = (a_qq - a_pp) / (2 a_pq)), applied to the rows and
 * columns p, q of a and to the rows p, q of the eigenvector matrix. The off-diagonal mass
 * falls quadratically once small; we stop when it is below 1e-30 of the total. Every
 * operation is an IEEE double operation in a fixed order (sqrt is correctly rounded; no
 * FMA contraction), so the result is the same on every machine. */
#include "container/kvtc.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

static double off_mass(const double *a, size_t d, double *total)
{
    double off = 0.0, all = 0.0;
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) {
            double v = a[i * d + j] * a[i * d + j];
            all += v;
            if (i != j) off += v;
        }
    *total = all;
    return off;
}

/* Rotates rows/columns p, q of a and rows p, q of v so that a[p][q] becomes 0. */
static void rotate(double *a, double *v, size_t d, size_t p, size_t q)
{
    double apq = a[p * d + q];
    if (apq == 0.0) return;
    double theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
    double t = 1.0 / (fabs(theta) + sqrt(theta * theta + 1.0));
    if (theta < 0.0) t = -t;
    double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
    for (size_t k = 0; k < d; k++) { /* columns p, q */
        double akp = a[k * d + p], akq = a[k * d + q];
        a[k * d + p] = c * akp - s * akq;
        a[k * d + q] = s * akp + c * akq;
    }
    for (size_t k = 0; k < d; k++) { /* rows p, q */
        double apk = a[p * d + k], aqk = a[q * d + k];
        a[p * d + k] = c * apk - s * aqk;
        a[q * d + k] = s * apk + c * aqk;
    }
    for (size_t k = 0; k < d; k++) { /* eigenvector rows p, q */
        double vp = v[p * d + k], vq = v[q * d + k];
        v[p * d + k] = c * vp - s * vq;
        v[q * d + k] = s * vp + c * vq;
    }
    a[p * d + q] = a[q * d + p] = 0.0;
}

/* Index order of eig descending (ties: lower index first): insertion sort, stable. */
static void order_desc(const double *ev, size_t d, size_t *idx)
{
    for (size_t i = 0; i < d; i++) {
        size_t j = i;
        for (; j > 0 && ev[idx[j - 1]] < ev[i]; j--) idx[j] = idx[j - 1];
        idx[j] = i;
    }
}

/* Sign convention: the first largest-magnitude component positive. */
static void orient(double *row, size_t d)
{
    size_t m = 0;
    for (size_t k = 1; k < d; k++) m = fabs(row[k]) > fabs(row[m]) ? k : m;
    if (row[m] < 0.0)
        for (size_t k = 0; k < d; k++) row[k] = -row[k];
}

static int sweep_until_converged(double *a, double *v, size_t d)
{
    for (int sw = 0; sw < 64; sw++) {
        double total, off = off_mass(a, d, &total);
        if (off <= 1e-30 * total || total == 0.0) return SKV_OK;
        for (size_t p = 0; p + 1 < d; p++)
            for (size_t q = p + 1; q < d; q++) rotate(a, v, d, p, q);
    }
    return SKV_ERR_RANGE;
}

int skv_kvtc_jacobi(double *a, size_t d, double *eig, double *vec)
{
    double *v = malloc(d * d * sizeof *v), *ev = malloc(d * sizeof *ev);
    size_t *idx = malloc(d * sizeof *idx);
    int rc = v && ev && idx ? SKV_OK : SKV_ERR_NOMEM;
    for (size_t i = 0; !rc && i < d * d; i++) v[i] = i / d == i % d ? 1.0 : 0.0;
    if (!rc) rc = sweep_until_converged(a, v, d);
    for (size_t i = 0; !rc && i < d; i++) ev[i] = a[i * d + i];
    if (!rc) order_desc(ev, d, idx);
    for (size_t j = 0; !rc && j < d; j++) {
        eig[j] = ev[idx[j]];
        memcpy(vec + j * d, v + idx[j] * d, d * sizeof *vec);
        orient(vec + j * d, d);
    }
    free(v), free(ev), free(idx);
    return rc;
}
