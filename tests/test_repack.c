/* Packed weight layouts (quant/repack.h): packing then unpacking gives the file's
 * bytes back; the packed gemm at every level (the T = 1 decode kernels, the
 * fallback that unpacks 8 rows for batches and for the scalar level) gives the
 * reference gemm's bits on the file's rows, for every type with a packed form, any batch;
 * shapes without a packed form are refused. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/f16.h"
#include "engine/ops.h"
#include "quant/dot.h"
#include "quant/repack.h"
#include "quant/types.h"
#include "test.h"

static uint64_t g_state = 7;

static uint32_t rnd(void)
{
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static float rnd_float(void) { return (float)(rnd() >> 8) * (4.0f / 16777216.0f) - 2.0f; }

static const uint32_t k_types[] = {SKV_GGML_Q8_0, SKV_GGML_Q4_0, SKV_GGML_Q4_1, SKV_GGML_Q5_0,
                                   SKV_GGML_Q5_1, SKV_GGML_IQ4_NL, SKV_GGML_Q2_K, SKV_GGML_Q3_K,
                                   SKV_GGML_Q4_K, SKV_GGML_Q5_K, SKV_GGML_Q6_K, SKV_GGML_IQ4_XS};

/* Random blocks whose binary16 scales are small and finite (other bytes: anything). */
static void random_rows(uint32_t type, uint8_t *W, size_t n_bytes)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    static const int q40[] = {0, -1}, q4k[] = {0, 2, -1}, q6k[] = {208, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1};
    const int *o = type == SKV_GGML_Q6_K   ? q6k
                   : type == SKV_GGML_Q2_K ? q2k
                   : type == SKV_GGML_Q3_K ? q3k
                   : type == SKV_GGML_Q4_K || type == SKV_GGML_Q5_K || type == SKV_GGML_Q4_1 || type == SKV_GGML_Q5_1
                       ? q4k
                       : q40;
    for (size_t i = 0; i < n_bytes; i++) W[i] = (uint8_t)rnd();
    for (size_t b = 0; b + t->type_size <= n_bytes; b += t->type_size)
        for (const int *p = o; *p >= 0; p++) {
            uint16_t h = skv_f32_to_f16(rnd_float() * 0.01f);
            W[b + (size_t)*p] = (uint8_t)h;
            W[b + (size_t)*p + 1] = (uint8_t)(h >> 8);
        }
}

typedef struct {
    uint32_t type;
    size_t K, T, n, rb, prb;
    uint8_t *W, *P, *qa;
    float *x, *y0, *y1;
} fixture;

static int fixture_make(fixture *f, uint32_t type, size_t K, size_t T, size_t n)
{
    memset(f, 0, sizeof *f);
    f->type = type, f->K = K, f->T = T, f->n = n;
    f->rb = skv_type_row_bytes(type, K);
    f->prb = skv_pack_row_bytes(type, K);
    f->W = malloc(n * f->rb);
    f->P = malloc(n * f->prb);
    f->qa = malloc(T * skv_act_row_bytes(type, K));
    f->x = malloc(T * K * sizeof(float));
    f->y0 = malloc(T * n * sizeof(float));
    f->y1 = malloc(T * n * sizeof(float));
    if (!f->prb || !f->W || !f->P || !f->qa || !f->x || !f->y0 || !f->y1) return 0;
    random_rows(type, f->W, n * f->rb);
    for (size_t i = 0; i < T * K; i++) f->x[i] = rnd_float() * (i % 7 == 0 ? 10.0f : 1.0f);
    skv_pack_rows(type, f->W, f->rb, K, n, f->P);
    return 1;
}

static void fixture_free(fixture *f)
{
    free(f->W), free(f->P), free(f->qa), free(f->x), free(f->y0), free(f->y1);
}

/* The reference on the file rows vs the packed gemm at level, each on the activations
 * quantized at its level. */
static int same_as_reference(fixture *f, int level)
{
    size_t ab = skv_act_row_bytes(f->type, f->K);
    skv_act_quantize(SKV_DOT_REF, f->type, f->x, f->K, f->T, f->K, f->qa);
    skv_dot_gemm(SKV_DOT_REF, f->type)(f->y0, f->n, f->W, f->rb, f->qa, ab, f->K, f->T, f->n);
    skv_act_quantize(level, f->type, f->x, f->K, f->T, f->K, f->qa);
    skv_gemm_packed(level, f->type, f->y1, f->n, f->P, f->prb, f->qa, ab, f->K, f->T, f->n);
    for (size_t i = 0; i < f->T * f->n; i++) {
        uint32_t a, b;
        memcpy(&a, &f->y0[i], 4);
        memcpy(&b, &f->y1[i], 4);
        if (a != b && !(isnan(f->y0[i]) && isnan(f->y1[i]))) return 0;
    }
    return 1;
}

static void round_trip(void)
{
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        fixture f;
        CHECK(fixture_make(&f, k_types[i], 512, 1, 32));
        uint8_t *back = malloc(16 * f.rb);
        CHECK(back != NULL);
        for (size_t g = 0; g < 2; g++) {
            skv_unpack_group_rows(f.type, f.P + 16 * g * f.prb, f.K, 0, 16, back);
            CHECK_MSG(!memcmp(back, f.W + 16 * g * f.rb, 16 * f.rb), "%s group %zu", skv_ggml_type_name(f.type), g);
            skv_unpack_group_rows(f.type, f.P + 16 * g * f.prb, f.K, 8, 3, back);
            CHECK(!memcmp(back, f.W + (16 * g + 8) * f.rb, 3 * f.rb));
        }
        free(back);
        fixture_free(&f);
    }
}

/* Every level, decode and batches (the lanes kernels take groups of 16 tokens). */
static void packed_gemm_is_the_reference(void)
{
    static const size_t shapes[][3] = {{256, 1, 16}, {512, 1, 48}, {2048, 1, 32}, {768, 2, 16},
                                       {256, 5, 32}, {512, 16, 16}, {256, 21, 32}, {1024, 1, 16},
                                       {256, 70, 32}};
    int top = skv_dot_level(SKV_DOT_AVX512);
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int l = 0; l <= top; l++) {
                fixture f;
                CHECK(fixture_make(&f, k_types[i], shapes[s][0], shapes[s][1], shapes[s][2]));
                CHECK_MSG(same_as_reference(&f, l), "%s K %zu T %zu rows %zu: level %d differs",
                          skv_ggml_type_name(f.type), f.K, f.T, f.n, l);
                fixture_free(&f);
            }
}

/* Extreme activations: the largest magnitudes (q8_K's -128) and non-finite values. */
static void extreme_activations(void)
{
    int top = skv_dot_level(SKV_DOT_AVX512);
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        for (int l = 0; l <= top; l++) {
            fixture f;
            CHECK(fixture_make(&f, k_types[i], 512, 1, 16));
            for (size_t j = 0; j < 512; j++) f.x[j] = j % 3 ? -1.0f : 1.0f;
            f.x[300] = 1.0f + 1.0f / 128.0f;
            CHECK_MSG(same_as_reference(&f, l), "%s level %d: extreme values", skv_ggml_type_name(f.type), l);
            f.x[5] = INFINITY, f.x[77] = NAN;
            CHECK_MSG(same_as_reference(&f, l), "%s level %d: non-finite", skv_ggml_type_name(f.type), l);
            fixture_free(&f);
        }
}

/* f16 / bf16: 8-row groups of 16-byte chunks (repack.h). Packing then unpacking gives the
 * file's bytes back, and the packed product (decode reads the packed rows, batches unpack
 * each group: the AVX2 tiles, the AVX-512 small and wide kernels) gives the bits of the
 * scalar dequant + matmul on the file's rows. */
static void half_case(uint32_t type, size_t K, size_t n, size_t T)
{
    const skv_kernels *ref = skv_kernels_scalar();
    skv_matmul_packed_fn mp = skv_type_matmul_packed(skv_type_traits_of(type), 1);
    size_t rb = 2 * K, ldx = K + T % 3, ldy = n + 2;
    uint16_t *W = malloc(n * rb), *P = malloc(n * rb), *back = malloc(16 * rb);
    float *x = malloc(T * ldx * sizeof *x), *Wf = malloc(n * K * sizeof *Wf), *scratch = malloc(16 * K * sizeof(float));
    float *y0 = calloc(T * ldy, sizeof *y0), *y1 = calloc(T * ldy, sizeof *y1);
    CHECK(mp && W && P && back && x && Wf && scratch && y0 && y1);
    CHECK(skv_pack_row_bytes(type, K) == rb);
    for (size_t i = 0; i < n * K; i++) {
        float f = rnd_float();
        uint32_t u;
        memcpy(&u, &f, 4);
        W[i] = type == SKV_GGML_F16 ? skv_f32_to_f16(f) : (uint16_t)(u >> 16);
    }
    for (size_t i = 0; i < T * ldx; i++) x[i] = rnd_float() * (i % 7 == 0 ? 10.0f : 1.0f);
    skv_pack_rows(type, W, rb, K, n, P);
    CHECK_MSG(memcmp(W, P, n * rb) || K == 8, "%s K %zu: the packed copy is the file's layout", skv_ggml_type_name(type), K);
    for (size_t g = 0; g < n; g += 16) {
        skv_unpack_group_rows(type, (uint8_t *)P + g * rb, K, 0, 16, back);
        CHECK_MSG(!memcmp(back, (uint8_t *)W + g * rb, 16 * rb), "%s K %zu group %zu", skv_ggml_type_name(type), K, g);
        skv_unpack_group_rows(type, (uint8_t *)P + g * rb, K, 5, 6, back); /* across the two 8-row halves */
        CHECK(!memcmp(back, (uint8_t *)W + (g + 5) * rb, 6 * rb));
    }
    ref->dequant(type, W, rb, K, n, Wf);
    ref->matmul(y0, ldy, Wf, K, x, ldx, T, n);
    mp(y1, ldy, P, K, x, ldx, T, n, scratch);
    CHECK_MSG(!memcmp(y0, y1, T * ldy * sizeof *y0), "%s packed K %zu rows %zu T %zu differs from the reference",
              skv_ggml_type_name(type), K, n, T);
    free(W), free(P), free(back), free(x), free(Wf), free(scratch), free(y0), free(y1);
}

static void half_types(void)
{
    static const size_t Ks[] = {8, 64, 264, 2048}, ns[] = {16, 48}, Ts[] = {1, 2, 5, 8, 24, 33, 70};
    if (!skv_cpu_has(SKV_CPU_AVX2_SET)) SKIP("no AVX2+FMA+F16C on this CPU");
    for (int h = 0; h < 2; h++)
        for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
                for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++)
                    half_case(h ? SKV_GGML_BF16 : SKV_GGML_F16, Ks[k], ns[i], Ts[t]);
}

static void shapes_without_a_packed_form(void)
{
    CHECK(skv_pack_row_bytes(SKV_GGML_Q4_0, 2048) == 64 * 18);
    CHECK(skv_pack_row_bytes(SKV_GGML_Q4_K, 2048) == 8 * 148);
    CHECK(skv_pack_row_bytes(SKV_GGML_Q6_K, 2048) == 8 * 210);
    CHECK(skv_pack_row_bytes(SKV_GGML_Q5_K, 2048) == 8 * 180);
    CHECK(skv_pack_row_bytes(SKV_GGML_IQ4_XS, 2048) == 8 * 138);
    CHECK(skv_pack_row_bytes(SKV_GGML_Q8_0, 2048) == 64 * 34 && skv_pack_row_bytes(SKV_GGML_F16, 2048) == 4096);
    CHECK(skv_pack_row_bytes(SKV_GGML_F16, 2044) == 0 && skv_pack_row_bytes(SKV_GGML_BF16, 0) == 0);
    CHECK(skv_pack_row_bytes(SKV_GGML_F32, 2048) == 0);
    CHECK(skv_pack_row_bytes(SKV_GGML_Q4_K, 200) == 0 && skv_pack_row_bytes(SKV_GGML_Q4_0, 0) == 0);
    CHECK(skv_pack_row_bytes(SKV_GGML_Q6_K, 8192) != 0 && skv_pack_row_bytes(SKV_GGML_Q6_K, 16384) == 0);
}

int main(void)
{
    TEST_BEGIN("test_repack");
    RUN(round_trip);
    RUN(packed_gemm_is_the_reference);
    RUN(extreme_activations);
    RUN(half_types);
    RUN(shapes_without_a_packed_form);
    TEST_END();
}
