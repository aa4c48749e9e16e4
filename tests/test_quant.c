/* Tests for src/quant/quant.c: layouts, hostile input, baselines against a plain
 * reference, the rotation, SIMD == scalar, TurboQuant distortion and the
 * unbiasedness of the inner-product variant. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "quant/quant.h"
#include "quant/types.h"
#include "quant/types_kernels.h"
#include "core/cpu.h"
#include "seqkv.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct rng {
    uint64_t st;
    double spare;
    int has;
} rng;

static rng rng_make(uint64_t seed)
{
    rng r = {seed, 0.0, 0};
    return r;
}

static double rng_gauss(rng *r) { return skv_quant_gauss(&r->st, &r->spare, &r->has); }

static void gauss_vec(rng *r, float *x, size_t d, double sigma)
{
    for (size_t i = 0; i < d; i++) x[i] = (float)(sigma * rng_gauss(r));
}

/* Uniformly random unit vector (normalised in double, stored as float). */
static void unit_vec(rng *r, float *x, size_t d)
{
    double n = 0.0;
    double tmp[4096];
    for (size_t i = 0; i < d; i++) {
        tmp[i] = rng_gauss(r);
        n += tmp[i] * tmp[i];
    }
    n = sqrt(n);
    for (size_t i = 0; i < d; i++) x[i] = (float)(tmp[i] / n);
}

static double sqdist(const float *a, const float *b, size_t d)
{
    double s = 0.0;
    for (size_t i = 0; i < d; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}

static double dotd(const float *a, const float *b, size_t d)
{
    double s = 0.0;
    for (size_t i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static const int k_tq_schemes[] = {SKV_QUANT_TQ1,  SKV_QUANT_TQ2,  SKV_QUANT_TQ3, SKV_QUANT_TQ4,
                                   SKV_QUANT_TQ2P, SKV_QUANT_TQ3P, SKV_QUANT_TQ4P};
#define N_TQ (sizeof k_tq_schemes / sizeof k_tq_schemes[0])

/* ---- names, sizes, hostile arguments ------------------------------------- */

static void names_roundtrip(void)
{
    static const char *names[SKV_QUANT_COUNT] = {"f32", "f16", "q8_0", "q4_0", "tq1", "tq2",
                                                 "tq3", "tq4", "tq2p", "tq3p", "tq4p"};
    for (int i = 0; i < SKV_QUANT_COUNT; i++) {
        CHECK(skv_quant_name(i) != NULL);
        CHECK_MSG(strcmp(skv_quant_name(i), names[i]) == 0, "id %d is %s", i, skv_quant_name(i));
        CHECK_EQ_INT(skv_quant_parse(names[i]), i);
    }
    CHECK(skv_quant_name(-1) == NULL);
    CHECK(skv_quant_name(SKV_QUANT_COUNT) == NULL);
    CHECK_EQ_INT(skv_quant_parse(NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_parse(""), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_parse("tq5"), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_parse("TQ3"), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_parse("tq3 "), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_parse("tq1p"), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_tq_bits(SKV_QUANT_TQ3P), 3);
    CHECK_EQ_INT(skv_quant_tq_bits(SKV_QUANT_Q8_0), 0);
    CHECK_EQ_INT(skv_quant_is_prod(SKV_QUANT_TQ2P), 1);
    CHECK_EQ_INT(skv_quant_is_prod(SKV_QUANT_TQ2), 0);
}

static void layout_sizes(void)
{
    struct {
        int s;
        size_t d, bytes;
    } t[] = {
        {SKV_QUANT_F32, 128, 512},  {SKV_QUANT_F16, 128, 256},  {SKV_QUANT_F16, 1, 2},
        {SKV_QUANT_Q8_0, 32, 34},   {SKV_QUANT_Q8_0, 128, 136}, {SKV_QUANT_Q8_0, 8, 10},
        {SKV_QUANT_Q8_0, 40, 44},   {SKV_QUANT_Q4_0, 32, 18},   {SKV_QUANT_Q4_0, 128, 72},
        {SKV_QUANT_Q4_0, 8, 6},     {SKV_QUANT_Q4_0, 33, 21},   {SKV_QUANT_Q4_0, 7, 6},
        {SKV_QUANT_TQ1, 128, 18},   {SKV_QUANT_TQ2, 128, 34},   {SKV_QUANT_TQ3, 128, 50},
        {SKV_QUANT_TQ4, 128, 66},   {SKV_QUANT_TQ3, 64, 26},    {SKV_QUANT_TQ3, 8, 5},
        {SKV_QUANT_TQ3, 5, 4},      {SKV_QUANT_TQ1, 1, 3},      {SKV_QUANT_TQ2P, 128, 36},
        {SKV_QUANT_TQ3P, 128, 52},  {SKV_QUANT_TQ4P, 128, 68},  {SKV_QUANT_TQ4P, 3, 6},
        {SKV_QUANT_TQ4, 4096, 2050}, {SKV_QUANT_TQ2P, 1024, 260}, {SKV_QUANT_F32, 65536, 262144},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        CHECK_MSG(skv_quant_bytes(t[i].s, t[i].d) == t[i].bytes, "%s d=%zu: %zu != %zu",
                  skv_quant_name(t[i].s), t[i].d, skv_quant_bytes(t[i].s, t[i].d), t[i].bytes);
    CHECK(skv_quant_bits_per_value(SKV_QUANT_Q8_0, 128) == 8.5);
    CHECK(skv_quant_bits_per_value(SKV_QUANT_Q4_0, 128) == 4.5);
    CHECK(skv_quant_bits_per_value(SKV_QUANT_TQ3, 128) == 3.125);
    CHECK(skv_quant_bits_per_value(SKV_QUANT_TQ3P, 128) == 3.25);
    CHECK(skv_quant_bits_per_value(SKV_QUANT_TQ3, 0) == 0.0);
}

static void hostile_args(void)
{
    float x[64] = {0}, y[64];
    uint8_t buf[512];
    skv_quant_ctx *c = (skv_quant_ctx *)&c; /* must be reset to NULL on failure */
    for (int s = 0; s < SKV_QUANT_COUNT; s++) {
        CHECK_EQ_INT(skv_quant_check(s, 0), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_quant_bytes(s, 0), 0);
        CHECK_EQ_INT(skv_quant_check(s, (size_t)1 << 40), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_bytes(s, SIZE_MAX), 0);
        CHECK_EQ_INT(skv_quant_encode(s, 0, 1, x, 1, buf, sizeof buf), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_quant_encode(s, SIZE_MAX, 1, x, 1, buf, sizeof buf), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, NULL, 1, buf, sizeof buf), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, 1, NULL, sizeof buf), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, 0, NULL, 0), SKV_OK); /* empty batch */
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, NULL, 0, 0, NULL, 0), SKV_OK);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, 1, buf, skv_quant_bytes(s, 64) - 1), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, SIZE_MAX / 2, buf, sizeof buf), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, 1, buf, sizeof buf), SKV_OK);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, skv_quant_bytes(s, 64) - 1, 1, y, 64), SKV_ERR_FORMAT);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, sizeof buf, 1, y, 63), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, NULL, sizeof buf, 1, y, 64), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, sizeof buf, 1, NULL, 64), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, sizeof buf, SIZE_MAX / 2, y, SIZE_MAX), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, sizeof buf, 1, y, 64), SKV_OK);
    }
    CHECK_EQ_INT(skv_quant_check(-1, 8), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_check(SKV_QUANT_COUNT, 8), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_check(SKV_QUANT_TQ3, SKV_QUANT_MAX_D_TQ), SKV_OK);
    CHECK_EQ_INT(skv_quant_check(SKV_QUANT_TQ3, SKV_QUANT_MAX_D_TQ + 1), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_quant_check(SKV_QUANT_TQ3P, SKV_QUANT_MAX_D_TQP + 1), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_quant_check(SKV_QUANT_F16, SKV_QUANT_MAX_D + 1), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_quant_ctx_create(NULL, SKV_QUANT_TQ3, 64, 0), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_ctx_create(&c, 99, 64, 0), SKV_ERR_INVALID_ARG);
    CHECK(c == NULL);
    CHECK_EQ_INT(skv_quant_ctx_encode(NULL, x, 1, buf, sizeof buf), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_quant_ctx_decode(NULL, buf, sizeof buf, 1, y, 64), SKV_ERR_INVALID_ARG);
    skv_quant_ctx_free(NULL);
}

static void nonfinite_and_overflow(void)
{
    float x[40];
    uint8_t buf[256];
    for (int s = 0; s < SKV_QUANT_COUNT; s++) {
        for (size_t i = 0; i < 40; i++) x[i] = 0.25f * (float)i;
        x[7] = NAN;
        CHECK_EQ_INT(skv_quant_encode(s, 40, 3, x, 1, buf, sizeof buf), SKV_ERR_INVALID_ARG);
        x[7] = -INFINITY;
        CHECK_EQ_INT(skv_quant_encode(s, 40, 3, x, 1, buf, sizeof buf), SKV_ERR_INVALID_ARG);
        x[7] = 3e38f; /* finite: overflows f16 (and the tq norm^2) */
        CHECK_MSG(skv_quant_encode(s, 40, 3, x, 1, buf, sizeof buf) ==
                      (s == SKV_QUANT_F32 ? SKV_OK : SKV_ERR_RANGE),
                  "%s", skv_quant_name(s));
    }
    /* just inside / outside each scheme's fp16 limit */
    for (size_t i = 0; i < 40; i++) x[i] = 0.0f;
    x[0] = 65504.0f;
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_F16, 40, 0, x, 1, buf, sizeof buf), SKV_OK);
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_TQ3, 40, 0, x, 1, buf, sizeof buf), SKV_OK);
    x[0] = 65536.0f;
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_F16, 40, 0, x, 1, buf, sizeof buf), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_TQ3, 40, 0, x, 1, buf, sizeof buf), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_Q4_0, 40, 0, x, 1, buf, sizeof buf), SKV_OK); /* 8192 */
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_Q8_0, 40, 0, x, 1, buf, sizeof buf), SKV_OK);
    x[0] = 8.4e6f;
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_Q8_0, 40, 0, x, 1, buf, sizeof buf), SKV_ERR_RANGE);
}

/* ---- baselines ------------------------------------------------------------ */

static void f32_f16_roundtrip(void)
{
    rng r = rng_make(11);
    float x[100], y[100];
    uint8_t buf[400];
    gauss_vec(&r, x, 100, 3.0);
    x[0] = -0.0f;
    x[1] = 1e-40f; /* subnormal */
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_F32, 100, 0, x, 1, buf, sizeof buf), SKV_OK);
    CHECK(buf[0] == 0x00 && buf[1] == 0x00 && buf[2] == 0x00 && buf[3] == 0x80); /* -0.0f, LE */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_F32, 100, 0, buf, sizeof buf, 1, y, 100), SKV_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_F16, 100, 0, x, 1, buf, sizeof buf), SKV_OK);
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_F16, 100, 0, buf, sizeof buf, 1, y, 100), SKV_OK);
    for (int i = 0; i < 100; i++) {
        uint16_t h = skv_f32_to_f16(x[i]);
        CHECK(buf[2 * i] == (h & 0xff) && buf[2 * i + 1] == (h >> 8));
        CHECK(y[i] == skv_f16_to_f32(h));
        CHECK(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f);
    }
}

/* Straightforward q8_0 reference, one block of L values (see docs/quant.md). */
static void ref_q8_block(const float *x, size_t L, uint8_t *out)
{
    float amax = 0.0f;
    for (size_t j = 0; j < L; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    uint16_t h = skv_f32_to_f16(d);
    memset(out, 0, 2 + L);
    if (h == 0) return;
    out[0] = (uint8_t)h;
    out[1] = (uint8_t)(h >> 8);
    for (size_t j = 0; j < L; j++) {
        float v = roundf(x[j] * (1.0f / d));
        int iv = (int)v;
        if (iv > 127) iv = 127;
        if (iv < -127) iv = -127;
        out[2 + j] = (uint8_t)(int8_t)iv;
    }
}

static void ref_q4_block(const float *x, size_t L, uint8_t *out)
{
    float amax = 0.0f, mx = 0.0f;
    size_t h2 = (L + 1) / 2;
    int q[32];
    for (size_t j = 0; j < L; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            mx = x[j];
        }
    float d = mx / -8.0f;
    uint16_t h = skv_f32_to_f16(d);
    memset(out, 0, 2 + h2);
    for (size_t j = 0; j < L; j++) {
        if ((h & 0x7fff) == 0) {
            q[j] = 8;
            continue;
        }
        int v = (int)floorf(x[j] * (1.0f / d) + 8.5f);
        q[j] = v < 0 ? 0 : v > 15 ? 15 : v;
    }
    if (h & 0x7fff) {
        out[0] = (uint8_t)h;
        out[1] = (uint8_t)(h >> 8);
    }
    for (size_t j = 0; j < L; j++) {
        if (j < h2) out[2 + j] |= (uint8_t)q[j];
        else out[2 + j - h2] |= (uint8_t)(q[j] << 4);
    }
}

static void fill_blocky(rng *r, float *x, size_t d, int round)
{
    gauss_vec(r, x, d, round % 3 == 0 ? 1.0 : round % 3 == 1 ? 0.01 : 50.0);
    if (round % 5 == 1) memset(x, 0, d * sizeof *x);          /* zero blocks */
    if (round % 5 == 2) for (size_t i = 0; i < d; i++) x[i] = 1e-30f * (float)i; /* tiny */
    if (round % 5 == 3 && d > 3) {                            /* ties of the max magnitude */
        x[1] = 2.0f;
        x[2] = -2.0f;
    }
    if (round % 7 == 4) for (size_t i = 0; i < d; i++) x[i] = (float)((int)i % 17 - 8) * 0.5f; /* exact halves */
}

static void q8_q4_match_reference(void)
{
    static const size_t dims[] = {8, 32, 33, 40, 64, 100, 128};
    rng r = rng_make(22);
    float x[128], y[128];
    uint8_t got[160], want[160];
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        size_t d = dims[di];
        for (int round = 0; round < 60; round++) {
            fill_blocky(&r, x, d, round);
            for (int q4 = 0; q4 < 2; q4++) {
                int s = q4 ? SKV_QUANT_Q4_0 : SKV_QUANT_Q8_0;
                size_t nb = skv_quant_bytes(s, d), o = 0;
                CHECK_EQ_INT(skv_quant_encode(s, d, 0, x, 1, got, sizeof got), SKV_OK);
                for (size_t i = 0; i < d; i += 32) {
                    size_t L = d - i < 32 ? d - i : 32;
                    if (q4) ref_q4_block(x + i, L, want + o);
                    else ref_q8_block(x + i, L, want + o);
                    o += q4 ? 2 + (L + 1) / 2 : 2 + L;
                }
                CHECK_EQ_INT(o, nb);
                CHECK_MSG(memcmp(got, want, nb) == 0, "%s d=%zu round %d differs", skv_quant_name(s), d, round);
                CHECK_EQ_INT(skv_quant_decode(s, d, 0, got, nb, 1, y, d), SKV_OK);
                /* reference dequantization, and the error bound: half a step (q8) or a
                 * full step (q4: its grid [-8, 7] clamps +8 to 7), plus the fp16
                 * rounding of the scale times the largest level (127 or 8) */
                for (size_t i = 0; i < d; i++) {
                    size_t blk = i / 32, L = d - blk * 32 < 32 ? d - blk * 32 : 32, j = i % 32;
                    size_t bo = blk * (q4 ? 18 : 34), h2 = (L + 1) / 2;
                    float s16 = skv_f16_to_f32((uint16_t)(got[bo] | got[bo + 1] << 8));
                    float want_y;
                    if (q4) {
                        int nib = j < h2 ? got[bo + 2 + j] & 15 : got[bo + 2 + j - h2] >> 4;
                        want_y = (float)(nib - 8) * s16;
                    } else {
                        want_y = (float)(int8_t)got[bo + 2 + j] * s16;
                    }
                    CHECK(y[i] == want_y);
                    CHECK_MSG(fabsf(y[i] - x[i]) <= fabsf(s16) * (q4 ? 1.0f + 8 * 0x1p-11f : 0.5f + 127 * 0x1p-11f) * 1.001f + 4e-6f,
                              "%s d=%zu i=%zu x=%g y=%g s=%g", skv_quant_name(s), d, i, x[i], y[i], s16);
                }
            }
        }
    }
}

static void q8_ggml_layout_example(void)
{
    /* a hand-checked block: values k/4 for k = -16..15, amax 4 -> scale 4/127 */
    float x[32];
    uint8_t b[34];
    for (int k = 0; k < 32; k++) x[k] = (float)(k - 16) * 0.25f;
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_Q8_0, 32, 0, x, 1, b, sizeof b), SKV_OK);
    uint16_t h = skv_f32_to_f16(4.0f / 127.0f);
    CHECK(b[0] == (h & 0xff) && b[1] == (h >> 8));
    CHECK_EQ_INT((int8_t)b[2], -127); /* -4 */
    CHECK_EQ_INT((int8_t)b[2 + 16], 0);
    CHECK_EQ_INT((int8_t)b[2 + 17], 8); /* 0.25 * 127/4 = 7.94 */
    CHECK_EQ_INT((int8_t)b[2 + 31], 119); /* 3.75 * 127/4 = 119.06 */
    CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_Q4_0, 32, 0, x, 1, b, sizeof b), SKV_OK);
    /* the largest magnitude is x0 = -4: scale = -4 / -8 = 0.5 */
    CHECK(b[0] == (skv_f32_to_f16(0.5f) & 0xff) && b[1] == (skv_f32_to_f16(0.5f) >> 8));
    CHECK_EQ_INT(b[2] & 15, 0);  /* x0 = -4 -> -8 + 8 */
    CHECK_EQ_INT(b[2] >> 4, 8);  /* x16 = 0 */
    CHECK_EQ_INT(b[17] >> 4, 15); /* x31 = 3.75 -> 7.5 + 8.5 = 16 -> clamp 15 */
}

/* ---- PRNG ------------------------------------------------------------------- */

static void prng_reference_values(void)
{
    /* splitmix64 from state 0: the published reference sequence */
    uint64_t st = 0;
    CHECK(skv_quant_splitmix64(&st) == 0xE220A8397B1DCDAFull);
    CHECK(skv_quant_splitmix64(&st) == 0x6E789E6AA1B965F4ull);
    CHECK(skv_quant_splitmix64(&st) == 0x06C45D188009454Full);
    /* Gaussian moments over 200k draws: mean, variance, 2-sigma tail mass */
    rng r = rng_make(1234);
    double s1 = 0, s2 = 0, s4 = 0;
    int tail = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double g = rng_gauss(&r);
        s1 += g;
        s2 += g * g;
        s4 += g * g * g * g;
        tail += fabs(g) > 2.0;
    }
    s1 /= n;
    s2 /= n;
    s4 /= n;
    CHECK_MSG(fabs(s1) < 0.012, "mean %g", s1);       /* 5 sigma: 5/sqrt(n) = 0.011 */
    CHECK_MSG(fabs(s2 - 1.0) < 0.016, "var %g", s2);  /* sd of s2 is sqrt(2/n) = 0.0032 */
    CHECK_MSG(fabs(s4 - 3.0) < 0.12, "kurt %g", s4);  /* sd sqrt(96/n) = 0.022 */
    CHECK_MSG(fabs((double)tail / n - 0.0455) < 0.0025, "tail %g", (double)tail / n);
}

/* ---- rotation --------------------------------------------------------------- */

static void rotation_orthonormal(void)
{
    static const size_t dims[] = {1, 2, 3, 5, 8, 16, 64, 80, 96, 100, 128, 130, 256, 1000, 4096};
    static float x[4096], y[4096], z[4096], w[4096];
    rng r = rng_make(33);
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        size_t d = dims[di];
        skv_quant_ctx *c;
        CHECK_EQ_INT(skv_quant_ctx_create(&c, SKV_QUANT_TQ2, d, 77), SKV_OK);
        for (int t = 0; t < 5; t++) {
            gauss_vec(&r, x, d, 1.0);
            gauss_vec(&r, w, d, 1.0);
            CHECK_EQ_INT(skv_quant_ctx_rotate(c, x, y), SKV_OK);
            double nx = dotd(x, x, d), ny = dotd(y, y, d);
            CHECK_MSG(fabs(ny - nx) <= 1e-5 * nx, "d=%zu norm %g -> %g", d, nx, ny);
            CHECK_EQ_INT(skv_quant_ctx_unrotate(c, y, z), SKV_OK);
            CHECK_MSG(sqdist(x, z, d) <= 1e-11 * nx, "d=%zu inverse err %g", d, sqdist(x, z, d));
            /* inner products preserved: <Rx, Rw> = <x, w> */
            CHECK_EQ_INT(skv_quant_ctx_rotate(c, w, z), SKV_OK);
            CHECK(fabs(dotd(y, z, d) - dotd(x, w, d)) <= 1e-5 * sqrt(nx * dotd(w, w, d)));
        }
        /* every basis vector is spread out: no coordinate keeps more than 36/d
         * of the energy (a Gaussian's extremes over 4096 x 4096 draws stay
         * below 5.6 sd); with d a power of two exactly +-1/sqrt(d) everywhere */
        for (size_t k = 0; k < d; k += (d > 300 ? 37 : 1)) {
            double mx = 0;
            memset(x, 0, d * sizeof *x);
            x[k] = 1.0f;
            CHECK_EQ_INT(skv_quant_ctx_rotate(c, x, y), SKV_OK);
            for (size_t i = 0; i < d; i++) mx = fmax(mx, fabs(y[i]));
            if ((d & (d - 1)) == 0)
                CHECK_MSG(fabs(mx - 1.0 / sqrt((double)d)) < 1e-6, "d=%zu e_%zu max %g", d, k, mx);
            else
                CHECK_MSG(mx <= 6.0 / sqrt((double)d), "d=%zu e_%zu max %g", d, k, mx);
        }
        skv_quant_ctx_free(c);
    }
    /* baselines: identity */
    skv_quant_ctx *c;
    CHECK_EQ_INT(skv_quant_ctx_create(&c, SKV_QUANT_Q8_0, 10, 1), SKV_OK);
    for (int i = 0; i < 10; i++) x[i] = (float)i;
    CHECK_EQ_INT(skv_quant_ctx_rotate(c, x, y), SKV_OK);
    CHECK(memcmp(x, y, 10 * sizeof *x) == 0);
    skv_quant_ctx_free(c);
}

/* ---- SIMD twin ---------------------------------------------------------------- */

static void simd_kernels_match_reference(void)
{
    if (!skv_quant_simd_available()) SKIP("no AVX2 on this CPU");
    static float a[1100], b[1100], c1[1100], c2[1100];
    uint8_t i1[1100], i2[1100];
    uint32_t mask[1100];
    rng r = rng_make(44);
    float bound[15], cent[16];
    for (size_t n = 0; n <= 1030; n += (n < 40 ? 1 : 97)) {
        gauss_vec(&r, a, n + 1, 1.0);
        gauss_vec(&r, b, n + 1, 1.0);
        float d1 = skv_quant_dot_ref(a, b, n), d2 = skv_quant_dot_avx2(a, b, n);
        CHECK_MSG(memcmp(&d1, &d2, 4) == 0, "dot n=%zu %a %a", n, d1, d2);
        skv_quant_scale_ref(a, 0.3f, c1, n);
        skv_quant_scale_avx2(a, 0.3f, c2, n);
        CHECK(memcmp(c1, c2, n * 4) == 0);
        for (size_t i = 0; i < n; i++) mask[i] = (skv_quant_splitmix64(&r.st) & 1) ? 0x80000000u : 0;
        memcpy(c1, a, n * 4);
        memcpy(c2, a, n * 4);
        skv_quant_xorsign_ref(c1, mask, n);
        skv_quant_xorsign_avx2(c2, mask, n);
        CHECK(memcmp(c1, c2, n * 4) == 0);
        for (int nb = 1; nb <= 15; nb = nb * 2 + 1) {
            for (int k = 0; k < nb; k++) bound[k] = -1.5f + 3.0f * (float)k / (float)nb;
            memcpy(c1, a, n * 4);
            if (n > 3) c1[3] = bound[nb / 2]; /* a tie goes to the lower cell */
            skv_quant_index_ref(c1, bound, nb, i1, n);
            skv_quant_index_avx2(c1, bound, nb, i2, n);
            CHECK(memcmp(i1, i2, n) == 0);
            for (int k = 0; k <= nb; k++) cent[k] = (float)k * 0.1f - 0.7f;
            skv_quant_lookup_ref(i1, cent, nb + 1, c1, n);
            skv_quant_lookup_avx2(i1, cent, nb + 1, c2, n);
            CHECK(memcmp(c1, c2, n * 4) == 0);
        }
    }
    /* QJL kernels on a d x d matrix, d with and without tails */
    for (size_t d = 1; d <= 72; d += (d < 12 ? 1 : 15)) {
        static float S[72 * 72];
        uint8_t z1[72], z2[72];
        gauss_vec(&r, S, d * d, 1.0);
        gauss_vec(&r, a, d, 1.0);
        skv_quant_qjl_signs_ref(S, a, d, z1);
        skv_quant_qjl_signs_avx2(S, a, d, z2);
        CHECK_MSG(memcmp(z1, z2, d) == 0, "qjl_signs d=%zu", d);
        skv_quant_qjl_accum_ref(S, z1, d, c1);
        skv_quant_qjl_accum_avx2(S, z1, d, c2);
        CHECK_MSG(memcmp(c1, c2, d * 4) == 0, "qjl_accum d=%zu", d);
    }
    /* f16 conversion: random magnitudes over the whole range, ties, subnormals,
     * the overflow boundary; also the inf/NaN flags both ways */
    for (int round = 0; round < 50; round++) {
        size_t n = 1 + (size_t)round * 7;
        uint8_t h1[800], h2[800];
        for (size_t i = 0; i < n; i++) {
            uint64_t u = skv_quant_splitmix64(&r.st);
            uint32_t e = 100 + (uint32_t)((u >> 32) % 46), man = (uint32_t)u & 0x7fffffu, bits;
            switch ((u >> 56) & 3) {
            case 1: man = (man & ~0x1fffu) | 0x1000u; break; /* exact tie at f16 precision */
            case 2: e = 142; man |= 0x7fe000u; break;        /* around 65504 .. 65536 */
            case 3: e = 103 + (uint32_t)((u >> 40) % 10); break; /* f16 subnormal range */
            default: break;
            }
            bits = (uint32_t)(u >> 63) << 31 | e << 23 | man;
            memcpy(&c1[i], &bits, 4);
        }
        int b1 = skv_f16enc_ref(c1, h1, n), b2 = skv_f16enc_avx2(c1, h2, n);
        CHECK_EQ_INT(b1, b2);
        CHECK_MSG(memcmp(h1, h2, 2 * n) == 0, "f16enc round %d", round);
        for (size_t i = 0; i < 2 * n; i++) h1[i] = (uint8_t)skv_quant_splitmix64(&r.st);
        b1 = skv_f16dec_ref(h1, c1, n);
        b2 = skv_f16dec_avx2(h1, c2, n);
        CHECK_EQ_INT(b1, b2);
        if (!b1) CHECK(memcmp(c1, c2, n * 4) == 0);
    }
    for (size_t m = 8; m <= 1024; m *= 2) {
        gauss_vec(&r, a, m, 1.0);
        a[0] = 0.0f;
        a[m / 2] = -0.0f; /* signed zeros must come out the same too */
        memcpy(c1, a, m * 4);
        memcpy(c2, a, m * 4);
        skv_quant_fwht_ref(c1, m);
        skv_quant_fwht_avx2(c2, m);
        CHECK_MSG(memcmp(c1, c2, m * 4) == 0, "fwht m=%zu", m);
    }
}

static void simd_codec_matches_scalar(void)
{
    if (!skv_quant_simd_available()) SKIP("no AVX2 on this CPU");
    static const size_t dims[] = {8, 13, 64, 96, 128, 130, 256, 1000};
    static float x[1000 * 8], y1[1000 * 8], y2[1000 * 8];
    static uint8_t e1[8 * 1000], e2[8 * 1000];
    rng r = rng_make(55);
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        size_t d = dims[di];
        gauss_vec(&r, x, 8 * d, 2.0);
        for (size_t t = 0; t < N_TQ; t++) {
            int s = k_tq_schemes[t];
            skv_quant_ctx *c;
            size_t nb;
            if (skv_quant_check(s, d) != SKV_OK) continue;
            CHECK_EQ_INT(skv_quant_ctx_create(&c, s, d, 0xC0FFEEull + d), SKV_OK);
            nb = skv_quant_ctx_bytes(c) * 8;
            skv_quant_ctx_force_scalar(c, 1);
            CHECK_EQ_INT(skv_quant_ctx_encode(c, x, 8, e1, sizeof e1), SKV_OK);
            CHECK_EQ_INT(skv_quant_ctx_decode(c, e1, nb, 8, y1, 8 * d), SKV_OK);
            skv_quant_ctx_force_scalar(c, 0);
            CHECK_EQ_INT(skv_quant_ctx_encode(c, x, 8, e2, sizeof e2), SKV_OK);
            CHECK_EQ_INT(skv_quant_ctx_decode(c, e1, nb, 8, y2, 8 * d), SKV_OK);
            CHECK_MSG(memcmp(e1, e2, nb) == 0, "%s d=%zu: encodings differ", skv_quant_name(s), d);
            CHECK_MSG(memcmp(y1, y2, 8 * d * 4) == 0, "%s d=%zu: decodings differ", skv_quant_name(s), d);
            skv_quant_ctx_free(c);
        }
    }
}

/* ---- the type table ------------------------------------------------------------- */

/* Every row is consistent: a SIMD twin comes with its reference and says which
 * features it runs; the KV schemes' sizes are the table's row sizes. */
static void type_table_rows(void)
{
    static const uint32_t readable[] = {SKV_GGML_F32, SKV_GGML_F16, SKV_GGML_BF16, SKV_GGML_Q8_0, SKV_GGML_Q4_0};
    static const char all[] = "f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, bf16";
    char names[sizeof all];
    for (uint32_t id = 0; id < SKV_GGML_NTYPES + 3; id++) {
        const skv_type_traits *t = skv_type_traits_of(id);
        if (!t) continue;
        CHECK_MSG(t->blck_size > 0 && t->type_size > 0, "row %u", id);
        CHECK_MSG(!t->to_float_simd || t->to_float, "%s: SIMD to_float without a reference", t->name);
        CHECK_MSG(!t->from_float_simd || t->from_float, "%s: SIMD from_float without a reference", t->name);
        CHECK_MSG(!(t->to_float_simd || t->from_float_simd || t->matvec_simd) || t->simd_needs == SKV_CPU_AVX2_SET,
                  "%s: the AVX2 twins need AVX2+FMA+F16C", t->name);
        CHECK_MSG(!t->from_float || t->to_float, "%s: stored but not readable", t->name);
    }
    for (size_t i = 0; i < sizeof readable / sizeof readable[0]; i++) CHECK(skv_type_readable(readable[i]));
    CHECK(!skv_type_readable(SKV_GGML_IQ2_XXS) && !skv_type_readable(SKV_GGML_I32) && !skv_type_readable(4));
    CHECK(skv_type_traits_of(SKV_GGML_NTYPES) == NULL && skv_type_traits_of(0xFFFFFFFFu) == NULL);
    CHECK_EQ_INT(skv_type_row_bytes(SKV_GGML_Q8_0, 64), 68);
    CHECK_EQ_INT(skv_type_row_bytes(SKV_GGML_Q4_0, 33), 18 + 3);
    CHECK_EQ_INT(skv_type_row_bytes(SKV_GGML_Q4_K, 300), 0); /* no short blocks */
    CHECK_EQ_INT(skv_type_row_bytes(SKV_GGML_Q4_K, 512), 288);
    for (size_t d = 1; d <= 200; d += 7) {
        CHECK_EQ_INT(skv_quant_bytes(SKV_QUANT_Q8_0, d), skv_type_row_bytes(SKV_GGML_Q8_0, d));
        CHECK_EQ_INT(skv_quant_bytes(SKV_QUANT_Q4_0, d), skv_type_row_bytes(SKV_GGML_Q4_0, d));
        CHECK_EQ_INT(skv_quant_bytes(SKV_QUANT_F16, d), skv_type_row_bytes(SKV_GGML_F16, d));
    }
    CHECK_EQ_INT(skv_type_readable_names(names, sizeof names), strlen(all));
    CHECK(!strcmp(names, all));
    CHECK_EQ_INT(skv_type_readable_names(names, 12), strlen(all));
    CHECK(!strcmp(names, "f32, f16")); /* whole names only, and no later one */
}

/* Random stored rows with finite fp16 scales / values (check() accepts them). */
static void random_row(rng *r, uint32_t type, uint8_t *buf, size_t n)
{
    size_t bytes = skv_type_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)skv_quant_splitmix64(&r->st);
    if (type == SKV_GGML_F32)
        for (size_t i = 0; i < n; i++) buf[4 * i + 3] &= 0xbf; /* exponent never all ones */
    if (type == SKV_GGML_F16)
        for (size_t i = 0; i < n; i++) buf[2 * i + 1] &= 0xbb;
    if (type == SKV_GGML_Q8_0 || type == SKV_GGML_Q4_0)
        for (size_t i = 0, o = 0; i < n; i += 32) {
            size_t L = n - i < 32 ? n - i : 32;
            buf[o + 1] &= 0xbb;
            o += skv_type_row_bytes(type, L);
        }
    if (type == SKV_GGML_Q4_0 && n % 32 % 2) buf[bytes - 1] &= 0x0f; /* pad nibble */
}

/* Each row's SIMD twins give the reference's bits, with tails and short blocks. */
static void type_simd_twins_match(void)
{
    static float x[700], y1[700], y2[700];
    static uint8_t b1[3000], b2[3000];
    rng r = rng_make(77);
    if (!skv_quant_simd_available()) SKIP("no AVX2+FMA+F16C on this CPU");
    for (uint32_t id = 0; id < SKV_GGML_NTYPES; id++) {
        const skv_type_traits *t = skv_type_traits_of(id);
        if (!t || !t->to_float) continue;
        for (size_t n = t->blck_size; n <= 700; n += (n < 70 ? t->blck_size : 97 * t->blck_size)) {
            if (!skv_type_row_bytes(id, n)) continue;
            random_row(&r, id, b1, n);
            CHECK_MSG(!t->check || t->check(b1, n) == SKV_OK, "%s n=%zu: valid row refused", t->name, n);
            t->to_float(b1, y1, n);
            skv_type_to_float(t, 1)(b1, y2, n);
            CHECK_MSG(!memcmp(y1, y2, n * sizeof *y1), "%s n=%zu: to_float twins differ", t->name, n);
            if (!t->from_float) continue;
            gauss_vec(&r, x, n, 3.0);
            CHECK_EQ_INT(t->from_float(x, b1, n), SKV_OK);
            CHECK_EQ_INT(skv_type_from_float(t, 1)(x, b2, n), SKV_OK);
            CHECK_MSG(!memcmp(b1, b2, skv_type_row_bytes(id, n)), "%s n=%zu: from_float twins differ", t->name, n);
        }
        CHECK(skv_type_to_float(t, 0) == t->to_float && skv_type_matvec(t, 0) == NULL);
    }
}

/* The CPU report is one consistent answer; SIMD twins are only offered with
 * every feature they are compiled for. */
static void cpu_features_consistent(void)
{
    uint32_t f = skv_cpu_features();
    const char *lvl = skv_cpu_level();
    CHECK(f == skv_cpu_features());
    CHECK(skv_cpu_has(0));
    CHECK_EQ_INT(skv_quant_simd_available(), skv_cpu_has(SKV_CPU_AVX2_SET));
    if (skv_cpu_has(SKV_CPU_AVX2_SET | SKV_CPU_AVX512F)) CHECK(!strcmp(lvl, "avx512"));
    else if (skv_cpu_has(SKV_CPU_AVX2_SET)) CHECK(!strcmp(lvl, "avx2"));
    else CHECK(!strcmp(lvl, "scalar"));
    const char *cap = getenv("SEQKV_CPU");
    if (cap && !strcmp(cap, "scalar")) CHECK_EQ_INT(f, 0);
    if (cap && !strcmp(cap, "avx2")) CHECK_EQ_INT(f & ~SKV_CPU_AVX2_SET, 0);
    fprintf(stderr, "# cpu level %s (features 0x%x, SEQKV_CPU %s)\n", lvl, (unsigned)f, cap ? cap : "unset");
}

/* ---- TurboQuant quality --------------------------------------------------------- */

/* Measured E||u - u~||^2 over n random unit vectors; also its standard error. */
static double tq_mse(int s, size_t d, int n, uint64_t seed, double *se)
{
    static float x[4096], y[4096];
    uint8_t buf[4096];
    skv_quant_ctx *c;
    rng r = rng_make(seed * 7 + d);
    double sum = 0, sum2 = 0;
    if (skv_quant_ctx_create(&c, s, d, seed) != SKV_OK) return -1;
    for (int i = 0; i < n; i++) {
        unit_vec(&r, x, d);
        if (skv_quant_ctx_encode(c, x, 1, buf, sizeof buf) != SKV_OK ||
            skv_quant_ctx_decode(c, buf, sizeof buf, 1, y, d) != SKV_OK) {
            skv_quant_ctx_free(c);
            return -1;
        }
        double e = sqdist(x, y, d);
        sum += e;
        sum2 += e * e;
    }
    skv_quant_ctx_free(c);
    sum /= n;
    *se = sqrt((sum2 / n - sum * sum) / n);
    return sum;
}

/* TurboQuant's reported distortions for b = 1..4 and its bounds:
 * 4^-b <= D <= (sqrt(3) pi / 2) 4^-b. */
static const double k_paper_mse[4] = {0.36, 0.117, 0.03, 0.009};

static void tq_mse_matches_theory(void)
{
    static const size_t dims[] = {64, 128};
    for (size_t di = 0; di < 2; di++) {
        size_t d = dims[di];
        for (int b = 1; b <= 4; b++) {
            double se, got = tq_mse(SKV_QUANT_TQ1 + b - 1, d, 3000, 5, &se);
            double want = skv_quant_tq_expected_mse(d, b), lo = 1.0 / (double)(1 << 2 * b);
            printf("# tq%d d=%zu: E||x-x~||^2 = %.5f (se %.5f), Lloyd-Max theory %.5f, paper %.3f\n",
                   b, d, got, se, want, k_paper_mse[b - 1]);
            CHECK(got > 0);
            /* 1. the codebook's own distortion: the sampling error is ~0.3% (se
             *    printed above); 2% leaves room for the fp16 norm (~1e-7) and
             *    float rounding while catching any wrong codebook or rotation. */
            CHECK_MSG(fabs(got - want) <= 0.02 * want, "tq%d d=%zu mse %g vs %g", b, d, got, want);
            /* 2. the paper's rounded figures (0.03 for 0.0345 at b=3): within 20% */
            CHECK_MSG(fabs(got - k_paper_mse[b - 1]) <= 0.2 * k_paper_mse[b - 1], "vs paper");
            /* 3. its theorem's bounds */
            CHECK(got >= lo && got <= 2.7207 * lo);
        }
    }
}

static void tq_mse_other_dims(void)
{
    /* non-power-of-two rotation (3 windows) and untabulated d (Gaussian codebook) */
    static const size_t dims[] = {8, 96, 100, 200};
    for (size_t di = 0; di < 4; di++) {
        size_t d = dims[di];
        for (int b = 1; b <= 4; b += 3) {
            double se, got = tq_mse(SKV_QUANT_TQ1 + b - 1, d, 1500, 9, &se);
            double want = skv_quant_tq_expected_mse(d, b);
            printf("# tq%d d=%zu: %.5f (se %.5f) theory %.5f\n", b, d, got, se, want);
            CHECK_MSG(fabs(got - want) <= 0.03 * want + 4 * se, "tq%d d=%zu %g vs %g", b, d, got, want);
        }
    }
}

/* Vectors a rotation must fix: a few huge outlier channels plus small noise
 * (like real keys).  Unrotated, a 3-bit scalar code would spend everything on
 * the outliers; rotated, the distortion stays near the random-vector figure. */
static void tq_outlier_vectors(void)
{
    static const size_t dims[] = {128, 96};
    static float x[128 * 200], y[128 * 200];
    static uint8_t buf[128 * 200];
    for (size_t di = 0; di < 2; di++) {
        size_t d = dims[di];
        rng r = rng_make(66);
        double err = 0, nrm = 0;
        for (int i = 0; i < 200; i++) {
            float *xi = x + (size_t)i * d;
            gauss_vec(&r, xi, d, 0.1);
            xi[3] += 20.0f;
            xi[d - 1] -= 12.0f;
            xi[d / 2] += (float)(i % 7);
        }
        CHECK_EQ_INT(skv_quant_encode(SKV_QUANT_TQ3, d, 99, x, 200, buf, sizeof buf), SKV_OK);
        CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3, d, 99, buf, sizeof buf, 200, y, 200 * d), SKV_OK);
        for (int i = 0; i < 200; i++) {
            err += sqdist(x + (size_t)i * d, y + (size_t)i * d, d);
            nrm += dotd(x + (size_t)i * d, x + (size_t)i * d, d);
        }
        printf("# tq3 outlier vectors d=%zu: relative error %.5f\n", d, err / nrm);
        CHECK_MSG(err / nrm < 1.5 * skv_quant_tq_expected_mse(d, 3), "d=%zu rel err %g", d, err / nrm);
    }
}

/* The prod variant's inner-product estimate is unbiased over the random
 * (seeded) rotation and QJL matrix; the MSE variant's is not (it shrinks). */
static void tq_prod_unbiased(void)
{
    const size_t d = 64;
    const int trials = 1500;
    float x[64], q[64], y[64];
    uint8_t buf[64];
    rng r = rng_make(77);
    unit_vec(&r, x, d);
    unit_vec(&r, q, d);
    for (size_t k = 0; k < d; k++) q[k] = 0.6f * q[k] + 0.8f * x[k]; /* <q, x> ~ 0.8 */
    double truth = dotd(q, x, d);
    int schemes[] = {SKV_QUANT_TQ2P, SKV_QUANT_TQ3P, SKV_QUANT_TQ4P, SKV_QUANT_TQ1, SKV_QUANT_TQ2};
    for (int si = 0; si < 5; si++) {
        int s = schemes[si];
        double m = 0, m2 = 0;
        for (int t = 0; t < trials; t++) {
            skv_quant_ctx *c;
            CHECK_EQ_INT(skv_quant_ctx_create(&c, s, d, 1000 + (uint64_t)t), SKV_OK);
            CHECK_EQ_INT(skv_quant_ctx_encode(c, x, 1, buf, sizeof buf), SKV_OK);
            CHECK_EQ_INT(skv_quant_ctx_decode(c, buf, sizeof buf, 1, y, d), SKV_OK);
            skv_quant_ctx_free(c);
            double e = dotd(q, y, d) - truth;
            m += e;
            m2 += e * e;
        }
        m /= trials;
        double sd = sqrt(m2 / trials - m * m), se = sd / sqrt((double)trials);
        printf("# %s d=%zu: <q,x>=%.4f mean error %+.5f (se %.5f), sd %.4f\n", skv_quant_name(s), d,
               truth, m, se, sd);
        if (skv_quant_is_prod(s)) /* 4.5 se: a false failure has probability < 1e-5 */
            CHECK_MSG(fabs(m) <= 4.5 * se + 5e-4 * fabs(truth), "%s biased: %g (se %g)", skv_quant_name(s), m, se);
        else /* the MSE stage shrinks: E<q,x~> = (1 - D) <q,x> roughly; far outside noise */
            CHECK_MSG(m < -10 * se, "%s unexpectedly unbiased: %g (se %g)", skv_quant_name(s), m, se);
    }
}

/* ---- codec properties ---------------------------------------------------------- */

static void codebooks_known_values(void)
{
    float cb[16];
    skv_quant_ctx *c;
    struct {
        size_t d;
        double tol;
    } t[] = {{128, 0.005}, {512, 0.0015}, {1000, 1e-4}};
    for (int k = 0; k < 3; k++) {
        size_t d = t[k].d;
        double sd = sqrt((double)d);
        CHECK_EQ_INT(skv_quant_ctx_create(&c, SKV_QUANT_TQ1, d, 0), SKV_OK);
        CHECK_EQ_INT(skv_quant_ctx_codebook(c, cb, 16), 2);
        skv_quant_ctx_free(c);
        CHECK(cb[0] == -cb[1]);
        CHECK_MSG(fabs(cb[1] * sd / sqrt(2.0 / 3.14159265358979) - 1) < t[k].tol, "d=%zu b=1 %g", d, cb[1] * sd);
        CHECK_EQ_INT(skv_quant_ctx_create(&c, SKV_QUANT_TQ2, d, 0), SKV_OK);
        CHECK_EQ_INT(skv_quant_ctx_codebook(c, cb, 16), 4);
        skv_quant_ctx_free(c);
        CHECK(cb[0] == -cb[3] && cb[1] == -cb[2]);
        CHECK_MSG(fabs(cb[2] * sd / 0.4527800 - 1) < t[k].tol, "d=%zu b=2 %g", d, cb[2] * sd);
        CHECK_MSG(fabs(cb[3] * sd / 1.5104176 - 1) < t[k].tol, "d=%zu b=2 %g", d, cb[3] * sd);
        CHECK_EQ_INT(skv_quant_ctx_create(&c, SKV_QUANT_TQ4P, d, 0), SKV_OK); /* 3-bit MSE stage */
        CHECK_EQ_INT(skv_quant_ctx_codebook(c, cb, 4), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_quant_ctx_codebook(c, cb, 16), 8);
        skv_quant_ctx_free(c);
        for (int i = 0; i < 7; i++) CHECK(cb[i] < cb[i + 1]);
    }
    CHECK_EQ_INT(skv_quant_ctx_create(&c, SKV_QUANT_F16, 8, 0), SKV_OK);
    CHECK_EQ_INT(skv_quant_ctx_codebook(c, cb, 16), SKV_ERR_UNSUPPORTED);
    skv_quant_ctx_free(c);
    CHECK(skv_quant_tq_expected_mse(0, 2) < 0 && skv_quant_tq_expected_mse(64, 5) < 0);
}

static void batch_equals_single_and_seeds(void)
{
    const size_t d = 96, n = 37;
    static float x[37 * 96], y[37 * 96], y1[96];
    static uint8_t all[37 * 400], one[400], other[37 * 400];
    rng r = rng_make(88);
    gauss_vec(&r, x, n * d, 0.7);
    for (int s = 0; s < SKV_QUANT_COUNT; s++) {
        size_t nb = skv_quant_bytes(s, d);
        CHECK_EQ_INT(skv_quant_encode(s, d, 5, x, n, all, sizeof all), SKV_OK);
        CHECK_EQ_INT(skv_quant_decode(s, d, 5, all, n * nb, n, y, n * d), SKV_OK);
        for (size_t i = 0; i < n; i += 6) {
            CHECK_EQ_INT(skv_quant_encode(s, d, 5, x + i * d, 1, one, sizeof one), SKV_OK);
            CHECK(memcmp(one, all + i * nb, nb) == 0);
            CHECK_EQ_INT(skv_quant_decode(s, d, 5, one, nb, 1, y1, d), SKV_OK);
            CHECK(memcmp(y1, y + i * d, d * 4) == 0);
        }
        CHECK_EQ_INT(skv_quant_encode(s, d, 6, x, n, other, sizeof other), SKV_OK);
        if (skv_quant_tq_bits(s)) {
            /* another seed: other bytes, and decoding with the wrong seed is garbage */
            double good = 0, bad = 0, nx = 0;
            CHECK(memcmp(all, other, n * nb) != 0);
            CHECK_EQ_INT(skv_quant_decode(s, d, 6, all, n * nb, n, y, n * d), SKV_OK);
            for (size_t i = 0; i < n * d; i++) bad += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            CHECK_EQ_INT(skv_quant_decode(s, d, 5, all, n * nb, n, y, n * d), SKV_OK);
            for (size_t i = 0; i < n * d; i++) good += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            for (size_t i = 0; i < n * d; i++) nx += (double)x[i] * x[i];
            CHECK_MSG(good < (skv_quant_is_prod(s) ? 0.7 : 0.4) * nx && bad > 0.8 * nx, "%s good %g bad %g", skv_quant_name(s), good / nx, bad / nx);
        } else {
            CHECK(memcmp(all, other, n * nb) == 0); /* baselines ignore the seed */
        }
    }
}

static void zero_and_tiny_vectors(void)
{
    float x[64] = {0}, y[64];
    uint8_t buf[100], zero[100] = {0};
    for (size_t t = 0; t < N_TQ; t++) {
        int s = k_tq_schemes[t];
        size_t nb = skv_quant_bytes(s, 64);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < 64; i++) x[i] = k ? 1e-20f * (float)(i - 30) : 0.0f;
            CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, 1, buf, sizeof buf), SKV_OK);
            CHECK(memcmp(buf, zero, nb) == 0);
            CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, nb, 1, y, 64), SKV_OK);
            for (int i = 0; i < 64; i++) CHECK(y[i] == 0.0f);
        }
        /* smallest representable norm still round-trips to a small vector */
        for (int i = 0; i < 64; i++) x[i] = 1e-5f * (float)(i % 3);
        CHECK_EQ_INT(skv_quant_encode(s, 64, 1, x, 1, buf, sizeof buf), SKV_OK);
        CHECK_EQ_INT(skv_quant_decode(s, 64, 1, buf, nb, 1, y, 64), SKV_OK);
        CHECK_MSG(sqdist(x, y, 64) < (skv_quant_is_prod(s) ? 1.0 : 0.5) * dotd(x, x, 64), "%s %g",
                  skv_quant_name(s), sqdist(x, y, 64) / dotd(x, x, 64));
    }
}

static void hostile_payloads(void)
{
    uint8_t buf[4 + 3 * 5];
    float y[5];
    /* tq3 at d=5: 2-byte norm + 15 bits of indices; bit 15 is padding */
    memset(buf, 0, sizeof buf);
    buf[0] = 0x00;
    buf[1] = 0x3c; /* 1.0 */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3, 5, 0, buf, 4, 1, y, 5), SKV_OK);
    buf[3] = 0x80;
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3, 5, 0, buf, 4, 1, y, 5), SKV_ERR_FORMAT);
    buf[3] = 0;
    buf[1] = 0xbc; /* -1.0 */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3, 5, 0, buf, 4, 1, y, 5), SKV_ERR_FORMAT);
    buf[1] = 0x7c; /* +inf */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3, 5, 0, buf, 4, 1, y, 5), SKV_ERR_FORMAT);
    buf[1] = 0x7e; /* NaN */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3, 5, 0, buf, 4, 1, y, 5), SKV_ERR_FORMAT);
    /* tq3p: residual norm must be finite and non-negative too */
    memset(buf, 0, sizeof buf);
    buf[1] = 0x3c;
    buf[3] = 0xfc; /* -inf */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_TQ3P, 5, 0, buf, 6, 1, y, 5), SKV_ERR_FORMAT);
    /* f16 scheme: inf value */
    memset(buf, 0, sizeof buf);
    buf[3] = 0x7c;
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_F16, 5, 0, buf, 10, 1, y, 5), SKV_ERR_FORMAT);
    /* q8_0 NaN scale; q4_0 odd tail's pad nibble */
    memset(buf, 0, sizeof buf);
    buf[1] = 0x7e;
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_Q8_0, 5, 0, buf, 7, 1, y, 5), SKV_ERR_FORMAT);
    memset(buf, 0, sizeof buf);
    buf[1] = 0x3c;
    buf[4] = 0x10; /* d=5: 3 bytes of nibbles, the last high nibble is padding */
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_Q4_0, 5, 0, buf, 5, 1, y, 5), SKV_ERR_FORMAT);
    buf[4] = 0x01;
    CHECK_EQ_INT(skv_quant_decode(SKV_QUANT_Q4_0, 5, 0, buf, 5, 1, y, 5), SKV_OK);
}

/* Random bytes: every decode either succeeds with finite output or reports
 * SKV_ERR_FORMAT; nothing else (ASan/UBSan watch the memory accesses). */
static void random_payloads_decode_safely(void)
{
    static const size_t dims[] = {1, 5, 8, 33, 64, 96};
    static uint8_t buf[64 * 70];
    static float y[64 * 96];
    rng r = rng_make(99);
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        size_t d = dims[di];
        for (int s = 0; s < SKV_QUANT_COUNT; s++) {
            skv_quant_ctx *c;
            size_t nb = skv_quant_bytes(s, d);
            int ok = 0, bad = 0;
            CHECK_EQ_INT(skv_quant_ctx_create(&c, s, d, 3), SKV_OK);
            for (int t = 0; t < 200; t++) {
                for (size_t i = 0; i < nb; i++) buf[i] = (uint8_t)skv_quant_splitmix64(&r.st);
                if (t & 1) { /* half the time: finite non-negative fields, zero padding */
                    for (size_t i = 1; i < nb; i += 2) buf[i] &= 0x3f;
                    if (skv_quant_tq_bits(s)) {
                        size_t used = (skv_quant_is_prod(s) ? 32 : 16) + (size_t)skv_quant_tq_bits(s) * d;
                        buf[nb - 1] &= (uint8_t)(0xffu >> (nb * 8 - used));
                    }
                    if (s == SKV_QUANT_Q4_0 && (d % 32) % 2) buf[nb - 1] &= 0x0f;
                }
                int rc = skv_quant_ctx_decode(c, buf, nb, 1, y, d);
                CHECK_MSG(rc == SKV_OK || rc == SKV_ERR_FORMAT, "%s rc %d", skv_quant_name(s), rc);
                if (rc == SKV_OK) {
                    ok++;
                    for (size_t i = 0; i < d; i++) CHECK_MSG(isfinite(y[i]), "%s d=%zu", skv_quant_name(s), d);
                } else {
                    bad++;
                }
            }
            CHECK_MSG(ok >= 50 && bad >= (s == SKV_QUANT_F32 || s == SKV_QUANT_F16 ? 0 : 1),
                      "%s d=%zu ok %d bad %d", skv_quant_name(s), d, ok, bad);
            skv_quant_ctx_free(c);
        }
    }
}

/* Pinned output: the same bytes (and decoded floats) on every machine and
 * compiler; a change here is a format break.  Input: integer-derived floats,
 * no libm involved.  d = 96 exercises the multi-round rotation. */
static void golden_bytes(void)
{
    static float x[4 * 128], y[4 * 128];
    static uint8_t buf[4 * 128 * 4];
    static const struct {
        int s;
        size_t d;
        uint64_t enc, dec;
    } want[] = {
        {SKV_QUANT_Q8_0, 128, 0x0bd01ee1810feb09ull, 0xc1d7f3e7d8ee8799ull},
        {SKV_QUANT_Q4_0, 128, 0x827d97393b4b1e9bull, 0xddb2e11cc177c60full},
        {SKV_QUANT_TQ1, 128, 0x5492befb405ccc58ull, 0xfad0c5bad3097cf2ull},
        {SKV_QUANT_TQ3, 128, 0x656789e4501b78dcull, 0x25f7503e89d86aa2ull},
        {SKV_QUANT_TQ4, 128, 0x98b39dd9949566e8ull, 0x852c5a969a80b1f9ull},
        {SKV_QUANT_TQ2P, 128, 0x05c94b24f9ceec7dull, 0x0fb7bb8c154378beull},
        {SKV_QUANT_TQ3P, 128, 0x510080d610baccbaull, 0x8f4493de082a9e74ull},
        {SKV_QUANT_TQ3, 96, 0xce616d9371a978efull, 0x8f247663b8eb1d1full},
        {SKV_QUANT_TQ4P, 96, 0x546ce67183ed66deull, 0xffaff43c30835affull},
        {SKV_QUANT_TQ2, 8, 0x2a175b4ace288437ull, 0x4e1c51457be30cf3ull},
    };
    uint64_t st = 2024;
    for (size_t i = 0; i < 4 * 128; i++)
        x[i] = (float)((int64_t)(skv_quant_splitmix64(&st) >> 40) - (1 << 23)) * 0x1p-22f;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int s = want[k].s;
        size_t d = want[k].d, nb = skv_quant_bytes(s, d) * 4;
        CHECK_EQ_INT(skv_quant_encode(s, d, 42, x, 4, buf, sizeof buf), SKV_OK);
        CHECK_EQ_INT(skv_quant_decode(s, d, 42, buf, nb, 4, y, 4 * d), SKV_OK);
        uint64_t he = fnv1a(buf, nb), hd = fnv1a((const uint8_t *)y, 4 * d * sizeof *y);
        printf("# golden %s d=%zu: enc 0x%016llxull dec 0x%016llxull\n", skv_quant_name(s), d,
               (unsigned long long)he, (unsigned long long)hd);
        CHECK_MSG(he == want[k].enc, "%s d=%zu: encoding changed", skv_quant_name(s), d);
        CHECK_MSG(hd == want[k].dec, "%s d=%zu: decoding changed", skv_quant_name(s), d);
    }
}

int main(void)
{
    TEST_BEGIN("test_quant");
    (void)test_stories_path; /* the harness helper is unused here */
    RUN(names_roundtrip);
    RUN(layout_sizes);
    RUN(hostile_args);
    RUN(nonfinite_and_overflow);
    RUN(f32_f16_roundtrip);
    RUN(q8_q4_match_reference);
    RUN(q8_ggml_layout_example);
    RUN(prng_reference_values);
    RUN(rotation_orthonormal);
    RUN(simd_kernels_match_reference);
    RUN(simd_codec_matches_scalar);
    RUN(type_table_rows);
    RUN(type_simd_twins_match);
    RUN(cpu_features_consistent);
    RUN(tq_mse_matches_theory);
    RUN(tq_mse_other_dims);
    RUN(tq_outlier_vectors);
    RUN(tq_prod_unbiased);
    RUN(codebooks_known_values);
    RUN(batch_equals_single_and_seeds);
    RUN(zero_and_tiny_vectors);
    RUN(hostile_payloads);
    RUN(random_payloads_decode_safely);
    RUN(golden_bytes);
    TEST_END();
}
