/* Transform KV coding (src/container/kvtc*.c): the Jacobi solver against a slow reference,
 * calibration images round trip and refuse damage, streams decode to the encoder's
 * reconstruction bit for bit (a golden digest pins the bytes), errors stay within the
 * allocated distortion, another calibration is refused, damaged streams fail cleanly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "container/kvtc.h"
#include "core/util.h"
#include "seqkv.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* ---- Jacobi ------------------------------------------------------------------------ */

/* The slow reference: power iteration with deflation (a positive definite, distinct
 * eigenvalues): eigenvalue j and its unit vector. */
static void power_ref(const double *a0, size_t d, double *eig, double *vec)
{
    double a[64], v[8], w[8];
    memcpy(a, a0, d * d * sizeof *a);
    for (size_t j = 0; j < d; j++) {
        for (size_t i = 0; i < d; i++) v[i] = 1.0 + 0.1 * (double)i;
        double lam = 0.0;
        for (int it = 0; it < 20000; it++) {
            double n = 0.0;
            for (size_t r = 0; r < d; r++) {
                w[r] = 0.0;
                for (size_t c = 0; c < d; c++) w[r] += a[r * d + c] * v[c];
                n += w[r] * w[r];
            }
            lam = sqrt(n);
            for (size_t r = 0; r < d; r++) v[r] = w[r] / lam;
        }
        eig[j] = lam;
        memcpy(vec + j * d, v, d * sizeof *v);
        for (size_t r = 0; r < d; r++)
            for (size_t c = 0; c < d; c++) a[r * d + c] -= lam * v[r] * v[c];
    }
}

/* a = Q diag(lam) Q^T with a random orthogonal Q (Gram-Schmidt) and spread eigenvalues. */
static void random_spd(double *a, size_t d)
{
    double q[64];
    for (size_t j = 0; j < d; j++) {
        for (size_t i = 0; i < d; i++) q[j * d + i] = urand() - 0.5;
        for (size_t k = 0; k < j; k++) {
            double dot = 0.0;
            for (size_t i = 0; i < d; i++) dot += q[j * d + i] * q[k * d + i];
            for (size_t i = 0; i < d; i++) q[j * d + i] -= dot * q[k * d + i];
        }
        double n = 0.0;
        for (size_t i = 0; i < d; i++) n += q[j * d + i] * q[j * d + i];
        for (size_t i = 0; i < d; i++) q[j * d + i] /= sqrt(n);
    }
    for (size_t r = 0; r < d; r++)
        for (size_t c = 0; c < d; c++) {
            a[r * d + c] = 0.0;
            for (size_t j = 0; j < d; j++) a[r * d + c] += q[j * d + r] * q[j * d + c] * (8.0 / (double)(1u << j) + 0.01 * (double)j);
        }
}

static void jacobi_matches_reference(void)
{
    for (size_t d = 1; d <= 8; d++)
        for (int rep = 0; rep < 4; rep++) {
            double a[64], a2[64], eig[8], vec[64], re[8], rv[64];
            random_spd(a, d);
            memcpy(a2, a, sizeof a);
            power_ref(a, d, re, rv);
            CHECK_EQ_INT(skv_kvtc_jacobi(a2, d, eig, vec), SKV_OK);
            for (size_t j = 0; j < d; j++) {
                CHECK_MSG(fabs(eig[j] - re[j]) <= 1e-9 * re[0], "d=%zu eig %zu: %g vs %g", d, j, eig[j], re[j]);
                double dot = 0.0;
                for (size_t i = 0; i < d; i++) dot += vec[j * d + i] * rv[j * d + i];
                CHECK_MSG(fabs(fabs(dot) - 1.0) < 1e-7, "d=%zu vector %zu: |dot| %g", d, j, dot);
                if (j) CHECK(eig[j] <= eig[j - 1]);
            }
        }
}

static void jacobi_degenerate(void)
{
    double z[9] = {0}, id[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, eig[3], vec[9];
    CHECK_EQ_INT(skv_kvtc_jacobi(z, 3, eig, vec), SKV_OK);
    CHECK(eig[0] == 0.0 && vec[0] == 1.0);
    CHECK_EQ_INT(skv_kvtc_jacobi(id, 3, eig, vec), SKV_OK);
    CHECK(eig[0] == 1.0 && eig[2] == 1.0);
}

/* ---- synthetic KV with correlated channels ----------------------------------------- */

#define L 2
#define H 2
#define D 16
#define S (L * 2 * H)

/* n positions: each series mixes 4 latent factors into D channels, plus small noise. */
static float *make_kv(size_t n, uint64_t seed)
{
    float *kv = malloc((size_t)S * n * D * sizeof *kv);
    double mix[S][4][D];
    rng = 1234567; /* the same mixing for every seed: a calibration fits any text */
    for (size_t s = 0; s < S; s++)
        for (int f = 0; f < 4; f++)
            for (size_t i = 0; i < D; i++) mix[s][f][i] = (urand() - 0.5) * (4.0 - f);
    rng = seed;
    for (size_t s = 0; s < S; s++)
        for (size_t t = 0; t < n; t++) {
            double z[4];
            for (int f = 0; f < 4; f++) z[f] = urand() - 0.5;
            for (size_t i = 0; i < D; i++) {
                double v = 0.3 * (double)i + 0.01 * (urand() - 0.5);
                for (int f = 0; f < 4; f++) v += z[f] * mix[s][f][i];
                kv[(s * n + t) * D + i] = (float)v;
            }
        }
    return kv;
}

static skv_kvtc_calib *make_calib_rope(uint64_t seed, int style)
{
    skv_kvtc_calib *c = NULL;
    float *kv = make_kv(500, seed);
    if (skv_kvtc_calib_create(L, H, D, &c) || (style && skv_kvtc_calib_set_rope(c, style, D - 4, 100.0f)) ||
        skv_kvtc_calib_add(c, kv, 500) || skv_kvtc_calib_finish(c)) {
        skv_kvtc_calib_free(c);
        c = NULL;
    }
    free(kv);
    return c;
}

static skv_kvtc_calib *make_calib(uint64_t seed) { return make_calib_rope(seed, SKV_KVTC_ROPE_NONE); }

static void calib_roundtrip(void)
{
    skv_kvtc_calib *c = make_calib(7), *c2 = NULL;
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    skv_err err = {0};
    CHECK(c != NULL);
    CHECK_EQ_INT(skv_kvtc_calib_save(c, &buf, &len), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_load(buf, len, &c2, &err), SKV_OK);
    CHECK(skv_kvtc_calib_id(c) == skv_kvtc_calib_id(c2) && skv_kvtc_calib_id(c) != 0);
    CHECK_EQ_INT(skv_kvtc_calib_save(c2, &buf2, &len2), SKV_OK);
    CHECK(len == len2 && !memcmp(buf, buf2, len));
    const float *e = skv_kvtc_calib_eig(c, 0);
    CHECK(e[0] > e[3] && e[4] < 1e-3 * e[0]); /* four factors: the rest is the noise */
    skv_kvtc_calib_free(c2);
    for (size_t i = 0; i < len; i += 97) { /* every damaged byte refused */
        buf[i] ^= 0x10;
        CHECK_EQ_INT(skv_kvtc_calib_load(buf, len, &c2, &err), SKV_ERR_FORMAT);
        buf[i] ^= 0x10;
    }
    CHECK_EQ_INT(skv_kvtc_calib_load(buf, len - 1, &c2, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "length") != NULL);
    free(buf), free(buf2);
    skv_kvtc_calib_free(c);
}

/* Step weights (version 2 files): the id changes, the image round trips, out-of-range
 * weights are refused by the setter and the reader, and a stream's side step of each
 * (layer, kind) is the unweighted one times its weight, decoded bit for bit. */
static void calib_weights(void)
{
    skv_kvtc_calib *c = make_calib(7), *c2 = NULL;
    float w[L * 2] = {0.5f, 2.0f, 1.0f, 0.25f}, bad[L * 2] = {1.0f, 1.0f, 100.0f, 1.0f};
    uint8_t *buf = NULL, *buf2 = NULL, *s0 = NULL, *s1 = NULL;
    size_t len = 0, len2 = 0, l0 = 0, l1 = 0, n = 40, nf = (size_t)S * n * D;
    skv_err err = {0};
    float *kv = make_kv(n, 3), *deq = malloc(nf * sizeof *deq), *out = malloc(nf * sizeof *out);
    skv_kvtc_params p = {.predictor = SKV_KVTC_NONE, .step = {0.1f, 0.1f}};
    CHECK(c != NULL);
    uint64_t id0 = skv_kvtc_calib_id(c);
    CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &s0, &l0, NULL), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_set_weights(c, bad), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kvtc_calib_set_weights(c, w), SKV_OK);
    CHECK(skv_kvtc_calib_id(c) != id0);
    CHECK_EQ_INT(skv_kvtc_calib_save(c, &buf, &len), SKV_OK);
    CHECK_EQ_INT((int)buf[8], 2);
    CHECK_EQ_INT(skv_kvtc_calib_load(buf, len, &c2, &err), SKV_OK);
    CHECK(skv_kvtc_calib_id(c2) == skv_kvtc_calib_id(c));
    CHECK_EQ_INT(skv_kvtc_calib_save(c2, &buf2, &len2), SKV_OK);
    CHECK(len2 == len && !memcmp(buf, buf2, len));
    CHECK_EQ_INT(skv_kvtc_encode(&p, c2, kv, n, &s1, &l1, deq), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_decode(s1, l1, c2, NULL, out, nf, &err), SKV_OK);
    CHECK(!memcmp(out, deq, nf * sizeof *out));
    for (int lk = 0; lk < L * 2; lk++) { /* side steps at 56 + 4 lk */
        float a = skv_rdf32(s0 + 56 + 4 * lk), b = skv_rdf32(s1 + 56 + 4 * lk);
        CHECK_MSG(fabsf(b - a * w[lk]) <= 1e-6f * b, "lk %d: step %g, unweighted %g x %g", lk, b, a, w[lk]);
    }
    skv_kvtc_calib_free(c2);
    c2 = NULL;
    skv_wrf32(buf + 48, 100.0f); /* the first weight out of range, checksum fixed up */
    skv_wr64(buf + len - 8, XXH3_64bits(buf, len - 8));
    CHECK_EQ_INT(skv_kvtc_calib_load(buf, len, &c2, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "weight") != NULL);
    free(buf), free(buf2), free(s0), free(s1), free(kv), free(deq), free(out);
    skv_kvtc_calib_free(c);
}

/* ---- streams ------------------------------------------------------------------------ */

static double rel_mse(const float *a, const float *b, size_t n)
{
    double e = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)a[i] * a[i];
    return e / s;
}

static void roundtrip_style(int style)
{
    skv_kvtc_calib *c = make_calib_rope(7, style);
    size_t n = 64, nf = (size_t)S * n * D;
    float *kv = make_kv(n, 99), *deq = malloc(nf * sizeof *deq), *out = malloc(nf * sizeof *out);
    int32_t tok[64];
    for (size_t t = 0; t < n; t++) tok[t] = (int32_t)(t % 9);
    for (int pred = 0; pred < SKV_KVTC_N_PRED; pred++)
        for (int ramp = 0; ramp < 2; ramp++) {
            skv_kvtc_params p = {.predictor = pred, .step = {0.02f, 0.03f}, .ramp = ramp, .tokens = tok};
            uint8_t *b = NULL, *b2 = NULL;
            size_t len = 0, len2 = 0;
            skv_err err = {0};
            CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b, &len, deq), SKV_OK);
            CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b2, &len2, NULL), SKV_OK);
            CHECK(len == len2 && !memcmp(b, b2, len)); /* deterministic, deq or not */
            CHECK_EQ_INT(skv_kvtc_decode(b, len, c, tok, out, nf, &err), SKV_OK);
            CHECK(!memcmp(out, deq, nf * sizeof *out));
            CHECK_MSG(rel_mse(kv, out, nf) < 1e-3, "pred %d ramp %d rel mse %g", pred, ramp, rel_mse(kv, out, nf));
            free(b), free(b2);
        }
    free(kv), free(deq), free(out);
    skv_kvtc_calib_free(c);
}

/* RoPE (pairs over the first D - 4 channels, base 100) applied to the K series of x (n
 * positions) at positions p0 + t: the synthetic rows taken as pre-RoPE keys. */
static void rope_rows(float *x, size_t n, size_t p0)
{
    for (size_t s = 0; s < S; s++)
        for (size_t t = 0; (s / H) % 2 == 0 && t < n; t++)
            for (size_t i = 0; i + 2 <= D - 4; i += 2) {
                float *r = x + (s * n + t) * D;
                double a = (double)(p0 + t) * pow(100.0, -(double)i / (double)(D - 4)), u = r[i], w = r[i + 1];
                r[i] = (float)(u * cos(a) - w * sin(a)), r[i + 1] = (float)(u * sin(a) + w * cos(a));
            }
}

static size_t coded_len(const skv_kvtc_calib *c, const float *x, size_t n, uint32_t pos0)
{
    skv_kvtc_params p = {.predictor = SKV_KVTC_NONE, .step = {0.05f, 0.05f}, .pos0 = pos0};
    size_t nf = (size_t)S * n * D, len = 0;
    uint8_t *b = NULL;
    float *out = malloc(nf * sizeof *out), *deq = malloc(nf * sizeof *deq);
    int ok = !skv_kvtc_encode(&p, c, x, n, &b, &len, deq) && !skv_kvtc_decode(b, len, c, NULL, out, nf, NULL) &&
             !memcmp(out, deq, nf * sizeof *out);
    free(b), free(out), free(deq);
    return ok ? len : 0; /* 0: not bit-exact (the caller's checks fail) */
}

/* A segment that starts later: its K rows carry RoPE at pos0 + t. Coded with its pos0 it
 * costs what the same rows at 0 cost; coded as if it started at 0 it costs more. */
static void later_segment(void)
{
    skv_kvtc_calib *c = NULL;
    size_t n = 32;
    float *cal = make_kv(500, 7), *x0 = make_kv(n, 21), *x1 = make_kv(n, 21);
    rope_rows(cal, 500, 0), rope_rows(x0, n, 0), rope_rows(x1, n, 500);
    CHECK(!skv_kvtc_calib_create(L, H, D, &c) && !skv_kvtc_calib_set_rope(c, SKV_KVTC_ROPE_PAIRS, D - 4, 100.0f) &&
          !skv_kvtc_calib_add(c, cal, 500) && !skv_kvtc_calib_finish(c));
    size_t l0 = coded_len(c, x0, n, 0), l1 = coded_len(c, x1, n, 500), lw = coded_len(c, x1, n, 0);
    CHECK_MSG(l0 && l1 && lw && l1 < l0 + l0 / 20 && l1 + l1 / 20 > l0 && lw > l1, "bytes at 0 %zu, at 500 %zu, 500 coded as 0 %zu", l0, l1, lw);
    skv_kvtc_params bad = {.predictor = SKV_KVTC_NONE, .step = {0.05f, 0.05f}, .pos0 = SKV_KVTC_MAX_POS};
    uint8_t *b = NULL;
    size_t len = 0;
    CHECK_EQ_INT(skv_kvtc_encode(&bad, c, x0, n, &b, &len, NULL), SKV_ERR_INVALID_ARG);
    free(cal), free(x0), free(x1);
    skv_kvtc_calib_free(c);
}

/* Every predictor, with and without the ramp, K's RoPE undone (pairs, halves) or not. */
static void roundtrip_bit_exact(void)
{
    for (int style = 0; style < 3; style++) roundtrip_style(style);
}

static void rope_refused(void)
{
    skv_kvtc_calib *c = NULL;
    CHECK_EQ_INT(skv_kvtc_calib_create(L, H, D, &c), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_set_rope(c, 3, 8, 100.0f), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kvtc_calib_set_rope(c, 1, 7, 100.0f), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kvtc_calib_set_rope(c, 1, D + 2, 100.0f), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kvtc_calib_set_rope(c, 2, 8, 1.0f), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kvtc_calib_set_rope(c, 2, 8, 1e4f), SKV_OK);
    skv_kvtc_calib_free(c);
}

/* The error of each kept coefficient is at most half a step (ramp off), the dropped ones
 * below theta x step^2 in variance: the relative MSE follows the step. */
static void error_follows_step(void)
{
    skv_kvtc_calib *c = make_calib(7);
    size_t n = 64, nf = (size_t)S * n * D;
    float *kv = make_kv(n, 5), *out = malloc(nf * sizeof *out);
    double prev = 0.0;
    for (int i = 0; i < 4; i++) {
        float st = 0.01f * (float)(1 << (2 * i));
        skv_kvtc_params p = {.predictor = SKV_KVTC_NONE, .step = {st, st}};
        uint8_t *b = NULL;
        size_t len = 0;
        CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b, &len, out), SKV_OK);
        double e = rel_mse(kv, out, nf);
        CHECK_MSG(e > prev && e < 0.5 * (double)st * (double)st + 1e-4, "step %g: rel mse %g", st, e);
        prev = e;
        free(b);
    }
    free(kv), free(out);
    skv_kvtc_calib_free(c);
}

/* Pins the stream bytes of a fixed input: a change of the format or its arithmetic shows. */
static void golden_digest(void)
{
    skv_kvtc_calib *c = make_calib_rope(7, SKV_KVTC_ROPE_PAIRS);
    size_t n = 32;
    float *kv = make_kv(n, 11);
    skv_kvtc_params p = {.predictor = SKV_KVTC_NONE, .step = {0.05f, 0.05f}, .ramp = 1};
    uint8_t *b = NULL, *cb = NULL;
    size_t len = 0, clen = 0;
    CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b, &len, NULL), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_save(c, &cb, &clen), SKV_OK);
    uint64_t h = XXH3_64bits(b, len), hc = XXH3_64bits(cb, clen);
    printf("    golden: stream %zu bytes %016llx, calibration %016llx\n", len, (unsigned long long)h, (unsigned long long)hc);
    CHECK_MSG(len == 2744 && h == 0xedb5c816f8862926ull, "stream digest %016llx", (unsigned long long)h);
    CHECK_MSG(hc == 0xb974ab7b7dd90614ull, "calibration digest %016llx", (unsigned long long)hc);
    free(b), free(cb), free(kv);
    skv_kvtc_calib_free(c);
}

static void refusals(void)
{
    skv_kvtc_calib *c = make_calib(7), *other = make_calib(8);
    size_t n = 16, nf = (size_t)S * n * D;
    float *kv = make_kv(n, 3), *out = malloc(nf * sizeof *out);
    skv_kvtc_params p = {.predictor = SKV_KVTC_NONE, .step = {0.05f, 0.05f}};
    uint8_t *b = NULL;
    size_t len = 0;
    skv_err err = {0};
    CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b, &len, NULL), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_decode(b, len, other, NULL, out, nf, &err), SKV_ERR_MISMATCH);
    CHECK(strstr(err.msg, "calibration") != NULL);
    CHECK_EQ_INT(skv_kvtc_decode(b, len, c, NULL, out, nf - 1, &err), SKV_ERR_RANGE);
    for (size_t i = 0; i < len; i++) { /* every single damaged byte: refused, never a crash */
        b[i] ^= 0x41;
        int rc = skv_kvtc_decode(b, len, c, NULL, out, nf, &err);
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH, "byte %zu: rc %d", i, rc);
        b[i] ^= 0x41;
    }
    CHECK_EQ_INT(skv_kvtc_decode(b, len - 1, c, NULL, out, nf, &err), SKV_ERR_FORMAT);
    free(b);
    p.step[0] = 0.0f;
    CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b, &len, NULL), SKV_ERR_INVALID_ARG);
    p.step[0] = 0.05f, p.predictor = SKV_KVTC_TOK;
    CHECK_EQ_INT(skv_kvtc_encode(&p, c, kv, n, &b, &len, NULL), SKV_ERR_INVALID_ARG); /* tok without tokens */
    free(kv), free(out);
    skv_kvtc_calib_free(c), skv_kvtc_calib_free(other);
}

int main(void)
{
    TEST_BEGIN("test_kvtc");
    RUN(jacobi_matches_reference);
    RUN(jacobi_degenerate);
    RUN(calib_roundtrip);
    RUN(calib_weights);
    RUN(roundtrip_bit_exact);
    RUN(rope_refused);
    RUN(later_segment);
    RUN(error_follows_step);
    RUN(golden_digest);
    RUN(refusals);
    TEST_END();
}
