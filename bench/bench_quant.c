/* Quantizer throughput and distortion, one Markdown row per (scheme, d).
 *   bench_quant [seconds per measurement, default 0.2]
 * Input: random Gaussian vectors (a fixed seed), 4096 per batch, encoded and
 * decoded in one call per batch (the KV-cache use: a head's positions are
 * contiguous).  "rel. MSE" is sum ||x - x~||^2 / sum ||x||^2 over the batch,
 * which for Gaussian vectors equals TurboQuant's E||u - u~||^2 on unit u. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/cpu.h"
#include "quant/quant.h"
#include "seqkv.h"
#include "core/util.h"

#define NVEC 4096

/* Vectors per second of enc (1) or dec (0), repeating for at least budget s. */
static double rate(skv_quant_ctx *c, int enc, const float *x, uint8_t *buf, size_t cap, float *y,
                   double budget)
{
    size_t d = skv_quant_ctx_dim(c);
    long reps = 0;
    double t0 = skv_now(), t;
    do {
        int rc = enc ? skv_quant_ctx_encode(c, x, NVEC, buf, cap)
                     : skv_quant_ctx_decode(c, buf, cap, NVEC, y, NVEC * d);
        if (rc != SKV_OK) return -1.0;
        reps++;
        t = skv_now() - t0;
    } while (t < budget);
    return (double)reps * NVEC / t;
}

int main(int argc, char **argv)
{
    static const size_t dims[] = {64, 128};
    double budget = argc > 1 ? atof(argv[1]) : 0.2;
    float *x = malloc(NVEC * 128 * sizeof *x), *y = malloc(NVEC * 128 * sizeof *y);
    uint8_t *buf = malloc(NVEC * 128 * 4);
    uint64_t st = 12345;
    double spare = 0;
    int has = 0;
    if (!x || !y || !buf) return 1;
    if (budget <= 0) budget = 0.2;
    for (size_t i = 0; i < NVEC * 128; i++) x[i] = (float)skv_quant_gauss(&st, &spare, &has);
    printf("Quantizer throughput (AVX2 path: %s, CPU level %s), %d vectors per call.\n\n",
           skv_quant_simd_available() ? "yes" : "no", skv_cpu_level(), NVEC);
    printf("| scheme | d | bits/value | encode vec/s | decode vec/s | encode GB/s of f32 | decode GB/s of f32 | encode ns/vec | rel. MSE |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t di = 0; di < 2; di++) {
        size_t d = dims[di];
        for (int s = 0; s < SKV_QUANT_COUNT; s++) {
            skv_quant_ctx *c;
            size_t cap = NVEC * skv_quant_bytes(s, d);
            double e = 0, n = 0, re, rd;
            if (skv_quant_ctx_create(&c, s, d, 7) != SKV_OK) return 1;
            re = rate(c, 1, x, buf, cap, y, budget);
            rd = rate(c, 0, x, buf, cap, y, budget);
            for (size_t i = 0; i < NVEC * d; i++) {
                e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
                n += (double)x[i] * x[i];
            }
            printf("| %s | %zu | %.3f | %.3g | %.3g | %.2f | %.2f | %.0f | %.5f |\n", skv_quant_name(s), d,
                   skv_quant_bits_per_value(s, d), re, rd, re * (double)d * 4e-9, rd * (double)d * 4e-9, 1e9 / re,
                   e / n);
            skv_quant_ctx_free(c);
        }
    }
    free(x);
    free(y);
    free(buf);
    return 0;
}
