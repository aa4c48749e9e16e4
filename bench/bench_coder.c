/* Benchmarks of the entropy-coding core, as Markdown tables:
 *   1. range coder encode / decode throughput (symbols/s) for vocabularies
 *      512, 4096, 32000 under LM-like skewed distributions, with the coded
 *      size against the ideal sum of -log2(freq/total);
 *   2. probq throughput (vocabulary entries/s, time per token);
 *   3. the cost of probq's floor of 1 (KL(softmax || quantised), bits per
 *      token) for 32k-152k vocabularies at totals 2^24..2^28.
 * The distributions are synthetic LM-like ones (a Gaussian bulk of logits
 * and a head of 8 tokens) tuned to a target softmax entropy.
 * Usage: bench_coder [scale]   (scale multiplies the work, default 1) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coder/probq.h"
#include "coder/rangecoder.h"
#include "core/util.h"

static uint64_t rng_state = 0x853C49E6748FEA9Bu;

static uint64_t rng(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static double urand(void) { return ((double)(rng() >> 11) + 0.5) / 9007199254740992.0; }
static double gauss(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

static double softmax_entropy(const float *l, size_t n, double *p)
{
    double s = 0, mx = -INFINITY, h = 0;
    for (size_t i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (size_t i = 0; i < n; i++) { p[i] = exp((double)l[i] - mx); s += p[i]; }
    for (size_t i = 0; i < n; i++) { p[i] /= s; if (p[i] > 0) h -= p[i] * log2(p[i]); }
    return h;
}

/* LM-like logits with softmax entropy ~h_target bits: a N(0, 2.5^2) bulk
 * and a head of 8 tokens lifted by b nats, b found by bisection. p gets the
 * softmax (n doubles). Returns the entropy. */
static double lm_logits(float *l, size_t n, double h_target, double *p)
{
    float *bulk = malloc(n * sizeof *bulk);
    size_t head[8];
    double lo = 0, hi = 60, h = 0;
    if (!bulk) exit(1);
    for (size_t i = 0; i < n; i++) bulk[i] = (float)(2.5 * gauss());
    for (int k = 0; k < 8; k++) head[k] = (size_t)(rng() % n);
    for (int it = 0; it < 40; it++) {
        double b = 0.5 * (lo + hi);
        memcpy(l, bulk, n * sizeof *l);
        for (int k = 0; k < 8; k++) l[head[k]] = (float)(bulk[head[k]] + b - 2.0 * k);
        h = softmax_entropy(l, n, p);
        if (h > h_target) lo = b; else hi = b;
    }
    free(bulk);
    return h;
}

static double entropy_bits(const uint32_t *f, size_t n, unsigned bits)
{
    double h = 0, t = ldexp(1.0, (int)bits);
    for (size_t i = 0; i < n; i++) h -= (f[i] / t) * log2(f[i] / t);
    return h;
}

/* ---- 1. coder throughput ------------------------------------------------ */

static void bench_coder(double scale)
{
    static const size_t vocab[] = {512, 4096, 32000};
    const unsigned bits = 24;
    size_t nsym = (size_t)(2000000 * scale);
    uint32_t *syms = malloc(nsym * sizeof *syms), *back = malloc(nsym * sizeof *back);
    uint8_t *buf = malloc(skv_rangecoder_bound(nsym, bits));
    if (!syms || !back || !buf) { fprintf(stderr, "bench_coder: out of memory\n"); exit(1); }

    printf("| coder | vocab | total | H (bits/sym) | coded (bits/sym) | over ideal | encode (Msym/s) | decode (Msym/s) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t vi = 0; vi < sizeof vocab / sizeof vocab[0]; vi++) {
        size_t n = vocab[vi], size = 0;
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f), *cum = malloc((n + 1) * sizeof *cum);
        double ideal = 0, h, best_enc = 1e30, best_dec = 1e30, *p = malloc(n * sizeof *p);
        int ok = 1;
        if (!l || !f || !cum || !p) exit(1);
        lm_logits(l, n, 3.0, p);
        free(p);
        if (skv_probq_freqs(l, n, bits, f, cum) != SKV_OK) exit(1);
        h = entropy_bits(f, n, bits);
        for (size_t i = 0; i < nsym; i++) {
            syms[i] = (uint32_t)skv_probq_find(cum, n, (uint32_t)(rng() >> 40));
            ideal += skv_probq_cost_bits(f[syms[i]], bits);
        }
        for (int rep = 0; rep < 3; rep++) {
            skv_rangecoder_enc e;
            skv_rangecoder_dec d;
            double t0 = skv_now(), t1, t2;
            skv_rangecoder_enc_init(&e, buf, skv_rangecoder_bound(nsym, bits));
            for (size_t i = 0; i < nsym; i++) skv_rangecoder_enc_put_pow2(&e, cum[syms[i]], f[syms[i]], bits);
            ok &= skv_rangecoder_enc_finish(&e, &size) == SKV_OK;
            t1 = skv_now();
            skv_rangecoder_dec_init(&d, buf, size);
            for (size_t i = 0; i < nsym; i++) {
                uint32_t t = 0;
                size_t s;
                skv_rangecoder_dec_get_freq_pow2(&d, bits, &t);
                s = skv_probq_find(cum, n, t);
                skv_rangecoder_dec_update(&d, cum[s], f[s]);
                back[i] = (uint32_t)s;
            }
            ok &= skv_rangecoder_dec_finish(&d) == SKV_OK;
            t2 = skv_now();
            if (t1 - t0 < best_enc) best_enc = t1 - t0;
            if (t2 - t1 < best_dec) best_dec = t2 - t1;
        }
        ok &= memcmp(syms, back, nsym * sizeof *syms) == 0;
        printf("| rangecoder%s | %zu | 2^%u | %.3f | %.5f | %+.4f%% | %.1f | %.1f |\n", ok ? "" : " (MISMATCH)", n,
               bits, h, 8.0 * (double)size / (double)nsym, 100.0 * (8.0 * (double)size - ideal) / ideal,
               (double)nsym / best_enc / 1e6, (double)nsym / best_dec / 1e6);
        free(l);
        free(f);
        free(cum);
    }
    free(syms);
    free(back);
    free(buf);
}

/* ---- 2. probq throughput ------------------------------------------------- */

static void bench_probq(double scale)
{
    static const size_t vocab[] = {512, 4096, 32000, 151936};
    printf("\n| probq | vocab | total | entries/s (M) | us/token |\n");
    printf("|---|---|---|---|---|\n");
    for (size_t vi = 0; vi < sizeof vocab / sizeof vocab[0]; vi++) {
        size_t n = vocab[vi];
        int reps = (int)(2e7 * scale / (double)n) + 1;
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f), *cum = malloc((n + 1) * sizeof *cum);
        double best = 1e30, *p = malloc(n * sizeof *p);
        if (!l || !f || !cum || !p) exit(1);
        lm_logits(l, n, 3.0, p);
        free(p);
        for (int round = 0; round < 3; round++) {
            double t0 = skv_now();
            for (int r = 0; r < reps; r++) {
                l[(size_t)r % n] += 0.01f; /* a slightly different token each call */
                if (skv_probq_freqs(l, n, 24, f, cum) != SKV_OK) exit(1);
            }
            if (skv_now() - t0 < best) best = skv_now() - t0;
        }
        printf("| skv_probq_freqs (+cum) | %zu | 2^24 | %.1f | %.1f |\n", n, (double)n * reps / best / 1e6,
               best / reps * 1e6);
        free(l);
        free(f);
        free(cum);
    }
}

/* ---- 3. the floor's cost -------------------------------------------------- */

static void bench_floor(void)
{
    static const size_t vocab[] = {32000, 50257, 128256, 151936};
    static const double htarget[] = {1.0, 2.0, 3.0, 4.0};
    printf("\n| floor cost | vocab | H (bits/token) | KL at 2^24 | KL/H at 2^24 | bound V/2^24/ln2 | KL at 2^26 | KL at 2^28 |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t vi = 0; vi < sizeof vocab / sizeof vocab[0]; vi++) {
        size_t n = vocab[vi];
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f);
        double *p = malloc(n * sizeof *p);
        if (!l || !f || !p) exit(1);
        for (size_t hi = 0; hi < sizeof htarget / sizeof htarget[0]; hi++) {
            double h = lm_logits(l, n, htarget[hi], p), kl[3] = {0, 0, 0};
            for (unsigned bits = 24; bits <= 28; bits += 2) {
                double t = ldexp(1.0, (int)bits);
                if (skv_probq_freqs(l, n, bits, f, NULL) != SKV_OK) exit(1);
                for (size_t i = 0; i < n; i++)
                    if (p[i] > 0) kl[(bits - 24) / 2] += p[i] * log2(p[i] * t / f[i]);
            }
            printf("| probq | %zu | %.2f | %.5f | %.3f%% | %.5f | %.5f | %.5f |\n", n, h, kl[0],
                   100.0 * kl[0] / h, (double)n / ldexp(1.0, 24) / log(2.0), kl[1], kl[2]);
        }
        free(l);
        free(f);
        free(p);
    }
}

int main(int argc, char **argv)
{
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(scale > 0)) scale = 1.0;
    bench_coder(scale);
    bench_probq(scale);
    bench_floor();
    return 0;
}
