/* Engine-free KV blobs (skv_kv_encode / skv_kv_blob_inspect / skv_kv_decode,
 * src/container/kvblob.c, docs/kvblob.md). No model needed.
 *
 * Every scheme round-trips a synthetic KV: f32 bit-exact, f16 equal to the binary16
 * rounding, tq3 equal to skv_kv_quant_roundtrip (the engine's own quantizer, seed 0),
 * pred within its step and deterministic; inspect reports what was encoded; the frame's
 * bytes are the documented ones; every truncation, every flipped byte, a forged header
 * with a recomputed checksum and every bad argument gets an error with a message. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/f16.h"
#include "seqkv.h"
#include "test.h"

#define NL 3
#define NH 2
#define HD 64
#define NP 24
#define NF ((size_t)NL * 2 * NH * NP * HD)

static const skv_kv_geometry geo = {NL, NH, HD};
static float g_kv[NF];

/* A KV-like series: per channel a mean and a slow rotation, plus noise (a fixed LCG). */
static void make_kv(void)
{
    uint32_t s = 12345;
    for (size_t i = 0; i < NF; i++) {
        size_t d = i % HD, t = (i / HD) % NP;
        s = s * 1664525u + 1013904223u;
        float noise = (float)((double)(s >> 8) / (double)(1u << 24) - 0.5);
        g_kv[i] = (float)(0.3 * (double)d / HD + sin(0.1 * (double)t + (double)d)) + 0.2f * noise;
    }
}

static uint8_t *enc(const char *scheme, size_t *n)
{
    uint8_t *b = NULL;
    char err[256] = "";
    int rc = skv_kv_encode(scheme, &geo, g_kv, NP, &b, n, err, sizeof err);
    if (rc != SKV_OK) test_fail_at(__FILE__, __LINE__, "%s: %s", scheme, err);
    return b;
}

static float *dec(const uint8_t *b, size_t n)
{
    float *y = malloc(NF * sizeof *y);
    char err[256] = "";
    int rc = skv_kv_decode(b, n, y, NF, err, sizeof err);
    if (rc != SKV_OK) test_fail_at(__FILE__, __LINE__, "decode: %s", err);
    return y;
}

static double rel_err(const float *y)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < NF; i++) {
        double e = (double)g_kv[i] - y[i];
        num += e * e;
        den += (double)g_kv[i] * g_kv[i];
    }
    return num / den;
}

static void f32_and_f16_exact(void)
{
    size_t n;
    uint8_t *b = enc("f32", &n);
    float *y = dec(b, n);
    CHECK(memcmp(y, g_kv, NF * sizeof *y) == 0);
    free(b);
    free(y);
    b = enc("f16", &n);
    y = dec(b, n);
    for (size_t i = 0; i < NF; i++) CHECK(y[i] == skv_f16_to_f32(skv_f32_to_f16(g_kv[i])));
    free(b);
    free(y);
}

/* tq3 with seed 0 is the engine's quantized cache: skv_kv_quant_roundtrip per (layer, kind). */
static void tq_matches_engine_roundtrip(void)
{
    size_t n;
    uint8_t *b = enc("tq3", &n);
    float *y = dec(b, n), *ref = malloc(NF * sizeof *ref);
    size_t blk = (size_t)NH * NP * HD;
    for (int l = 0; l < NL; l++)
        for (int k = 0; k < 2; k++) {
            size_t off = ((size_t)l * 2 + (size_t)k) * blk;
            CHECK_EQ_INT(skv_kv_quant_roundtrip("tq3", HD, l, k, g_kv + off, (size_t)NH * NP, ref + off, NULL), SKV_OK);
        }
    CHECK(memcmp(y, ref, NF * sizeof *y) == 0);
    free(b);
    free(y);
    free(ref);
}

static void inspect_reports(void)
{
    size_t n;
    skv_kv_blob_info in;
    char err[256] = "";
    uint8_t *b = enc("k=tq4,v=q8_0,seed=9", &n);
    CHECK_EQ_INT(skv_kv_blob_inspect(b, n, &in, err, sizeof err), SKV_OK);
    CHECK(in.geometry.n_layer == NL && in.geometry.n_head_kv == NH && in.geometry.head_dim == HD && in.n_pos == NP);
    CHECK(!strcmp(in.scheme[0], "tq4") && !strcmp(in.scheme[1], "q8_0") && in.seed == 9 && !in.predictor[0]);
    CHECK(in.rel_mse[0] > 0.0f && in.rel_mse[0] < 0.05f);
    /* the frame as docs/kvblob.md draws it */
    CHECK(!memcmp(b, "SKVB", 4) && b[4] == 1 && b[5] == 0 && b[6] == 1 && b[7] == 0);
    CHECK(b[8] == NP && b[9] == 0 && b[12] == 0);
    uint64_t h = XXH3_64bits(b + 24, n - 24);
    for (int i = 0; i < 8; i++) CHECK(b[16 + i] == (uint8_t)(h >> (8 * i)));
    free(b);
    b = enc("pred:lpc,step=0.02", &n);
    CHECK_EQ_INT(skv_kv_blob_inspect(b, n, &in, err, sizeof err), SKV_OK);
    CHECK(!strcmp(in.scheme[0], "pred") && !strcmp(in.predictor, "lpc") && b[6] == 2);
    free(b);
}

static void pred_quality_and_determinism(void)
{
    static const char *specs[] = {"pred", "pred:lpc,step=0.02", "pred:delta,ramp", "pred:lpc2,rot,step=0.1",
                                  "pred:none,step=0.01"};
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
        size_t n1, n2;
        uint8_t *a = enc(specs[s], &n1), *b = enc(specs[s], &n2);
        CHECK_MSG(n1 == n2 && !memcmp(a, b, n1), "%s: two encodings differ", specs[s]);
        float *y = dec(a, n1);
        double e = rel_err(y);
        CHECK_MSG(e > 0.0 && e < 0.02, "%s: relative error %g", specs[s], e);
        CHECK_MSG(n1 < NF * sizeof(float), "%s: %zu bytes, no smaller than f32", specs[s], n1);
        free(a);
        free(b);
        free(y);
    }
}

static void expect_err(int rc, int want, const char *err, const char *what)
{
    CHECK_MSG(rc == want, "%s: status %s, expected %s", what, skv_status_name(rc), skv_status_name(want));
    CHECK_MSG(err[0] != 0, "%s: no message", what);
}

static void bad_arguments(void)
{
    uint8_t *b = NULL;
    size_t n = 0;
    char err[256];
    static const char *bad[] = {"tq9", "k=tq3", "tq3,window=4", "pred:tok", "pred:lpc,kl=0.1", "pred:zzz", "",
                                "pred:lpc,step=-1", "predx"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        int rc = skv_kv_encode(bad[i], &geo, g_kv, NP, &b, &n, err, sizeof err);
        CHECK_MSG(rc == SKV_ERR_INVALID_ARG && err[0] && !b, "scheme '%s': %s", bad[i], skv_status_name(rc));
    }
    skv_kv_geometry g0 = {0, NH, HD};
    err[0] = 0;
    expect_err(skv_kv_encode("f16", &g0, g_kv, NP, &b, &n, err, sizeof err), SKV_ERR_INVALID_ARG, err, "0 layers");
    err[0] = 0;
    expect_err(skv_kv_encode("f16", &geo, g_kv, 0, &b, &n, err, sizeof err), SKV_ERR_RANGE, err, "0 positions");
    float saved = g_kv[7];
    g_kv[7] = NAN;
    static const char *nanok[] = {"tq3", "pred"};
    for (int i = 0; i < 2; i++) {
        err[0] = 0;
        int rc = skv_kv_encode(nanok[i], &geo, g_kv, NP, &b, &n, err, sizeof err);
        CHECK_MSG(rc != SKV_OK && err[0] && !b, "%s accepted a NaN", nanok[i]);
    }
    g_kv[7] = saved;
    b = enc("q4_0", &n);
    float *y = malloc(NF * sizeof *y);
    err[0] = 0;
    expect_err(skv_kv_decode(b, n, y, NF - 1, err, sizeof err), SKV_ERR_RANGE, err, "short output");
    free(y);
    free(b);
}

/* Every truncation and every single flipped byte is refused with a message; a forged
 * field whose checksum was recomputed is caught by the header checks. */
static void hostile_blobs(void)
{
    static const char *schemes[] = {"tq2", "pred"};
    float *y = malloc(2 * NF * sizeof *y);
    char err[256];
    skv_kv_blob_info in;
    for (int s = 0; s < 2; s++) {
        size_t n;
        uint8_t *b = enc(schemes[s], &n), *c = malloc(n);
        for (size_t cut = 0; cut < n; cut += (cut < 200 ? 1 : 97)) {
            err[0] = 0;
            CHECK_MSG(skv_kv_decode(b, cut, y, NF, err, sizeof err) != SKV_OK && err[0], "%s cut at %zu", schemes[s],
                      cut);
        }
        for (size_t i = 0; i < n; i += (i < 200 ? 1 : 31)) {
            memcpy(c, b, n);
            c[i] ^= 0x5a;
            err[0] = 0;
            CHECK_MSG(skv_kv_decode(c, n, y, NF, err, sizeof err) != SKV_OK && err[0], "%s byte %zu flipped",
                      schemes[s], i);
        }
        /* forged: the position count (then kv_bytes / sizes no longer add up), checksum fixed */
        memcpy(c, b, n);
        c[8] = NP + 1;
        uint64_t h = XXH3_64bits(c + 24, n - 24);
        for (int i = 0; i < 8; i++) c[16 + i] = (uint8_t)(h >> (8 * i));
        err[0] = 0;
        int rc = skv_kv_decode(c, n, y, NF * 2, err, sizeof err);
        if (s == 0) expect_err(rc, SKV_ERR_FORMAT, err, "forged n_pos");
        else CHECK_MSG(rc != SKV_OK ? err[0] != 0 : 1, "forged n_pos: no message");
        /* forged: an unknown kind */
        memcpy(c, b, n);
        c[6] = 7;
        err[0] = 0;
        expect_err(skv_kv_blob_inspect(c, n, &in, err, sizeof err), SKV_ERR_FORMAT, err, "kind 7");
        c[6] = b[6];
        c[4] = 2;
        err[0] = 0;
        expect_err(skv_kv_blob_inspect(c, n, &in, err, sizeof err), SKV_ERR_UNSUPPORTED, err, "version 2");
        free(b);
        free(c);
    }
    err[0] = 0;
    expect_err(skv_kv_blob_inspect(NULL, 0, &in, err, sizeof err), SKV_ERR_FORMAT, err, "NULL blob");
    free(y);
}

int main(void)
{
    TEST_BEGIN("test_kvblob");
    make_kv();
    RUN(f32_and_f16_exact);
    RUN(tq_matches_engine_roundtrip);
    RUN(inspect_reports);
    RUN(pred_quality_and_determinism);
    RUN(bad_arguments);
    RUN(hostile_blobs);
    TEST_END();
}
