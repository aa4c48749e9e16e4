/* Integer dot kernels (quant/dot.h): every level (scalar reference, AVX2,
 * AVX-512 VNNI) gives the same bits for every type, row count and batch; the
 * reference is the dot of the dequantized weights with the dequantized
 * activations (checked in double precision); one token's result does not
 * depend on the batch around it; the activation quantizers follow
 * llama.cpp's arithmetic and survive non-finite inputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/f16.h"
#include "quant/dot.h"
#include "quant/repack.h"
#include "quant/types.h"
#include "test.h"

/* splitmix64: a fixed stream, so every run tests the same inputs. */
static uint64_t g_state = 1;

static uint32_t rnd(void)
{
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* Uniform in [-2, 2). */
static float rnd_float(void) { return (float)(rnd() >> 8) * (4.0f / 16777216.0f) - 2.0f; }

/* The binary16 scale fields of one block of each type (byte offsets; -1 ends). */
static const int *scale_offsets(uint32_t type)
{
    static const int d0[] = {0, -1}, dm[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1}, q6k[] = {208, -1};
    switch (type) {
    case SKV_GGML_Q4_1: case SKV_GGML_Q5_1: case SKV_GGML_Q4_K: case SKV_GGML_Q5_K: return dm;
    case SKV_GGML_Q2_K: return q2k;
    case SKV_GGML_Q3_K: return q3k;
    case SKV_GGML_Q6_K: return q6k;
    default: return d0;
    }
}

/* Sets every binary16 scale field of the blocks to v, or to random small values if v is 0. */
static void set_scales(uint32_t type, uint8_t *W, size_t n_bytes, float v)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    for (size_t b = 0; b + t->type_size <= n_bytes; b += t->type_size)
        for (const int *o = scale_offsets(type); *o >= 0; o++) {
            uint16_t h = skv_f32_to_f16(v != 0.0f ? v : rnd_float() * 0.01f);
            W[b + (size_t)*o] = (uint8_t)h;
            W[b + (size_t)*o + 1] = (uint8_t)(h >> 8);
        }
}

/* Random blocks with small finite scales (any other byte pattern is valid). */
static void random_rows(uint32_t type, uint8_t *W, size_t n_bytes)
{
    for (size_t i = 0; i < n_bytes; i++) W[i] = (uint8_t)rnd();
    set_scales(type, W, n_bytes, 0.0f);
}

static size_t act_block(uint32_t type) { return skv_type_traits_of(type)->blck_size; }

/* The dequantized value j of an activation row. */
static double act_value(uint32_t type, const void *qa, size_t j)
{
    if (act_block(type) == 32) {
        const skv_act32 *a = (const skv_act32 *)qa + j / 32;
        return (double)a->d * a->qs[j % 32];
    }
    const skv_act256 *a = (const skv_act256 *)qa + j / 256;
    return (double)a->d * a->qs[j % 256];
}

typedef struct {
    uint32_t type;
    size_t K, T, n, row_bytes;
    uint8_t *W, *qa, *ql; /* qa: reference-level activations; ql: those of the level run last */
    float *x, *y[3];
} fixture;

static int fixture_make(fixture *f, uint32_t type, size_t K, size_t T, size_t n)
{
    memset(f, 0, sizeof *f);
    f->type = type, f->K = K, f->T = T, f->n = n;
    f->row_bytes = skv_type_row_bytes(type, K);
    f->W = malloc(n * f->row_bytes);
    f->qa = malloc(T * skv_act_row_bytes(type, K));
    f->ql = malloc(T * skv_act_row_bytes(type, K));
    f->x = malloc(T * K * sizeof(float));
    for (int l = 0; l < 3; l++) f->y[l] = malloc(T * n * sizeof(float));
    if (!f->W || !f->qa || !f->ql || !f->x || !f->y[0] || !f->y[1] || !f->y[2]) return 0;
    random_rows(type, f->W, n * f->row_bytes);
    for (size_t i = 0; i < T * K; i++) f->x[i] = rnd_float() * (i % 7 == 0 ? 10.0f : 1.0f);
    skv_act_quantize(SKV_DOT_REF, type, f->x, K, T, K, f->qa);
    return 1;
}

static void fixture_free(fixture *f)
{
    free(f->W), free(f->qa), free(f->ql), free(f->x);
    for (int l = 0; l < 3; l++) free(f->y[l]);
}

/* The gemm of a level on the activations quantized at that level (their layout may
 * differ between levels: dot.h, skv_act_quantize). */
static void run_level(fixture *f, int level, float *y)
{
    skv_act_quantize(level, f->type, f->x, f->K, f->T, f->K, f->ql);
    skv_dot_gemm(level, f->type)(y, f->n, f->W, f->row_bytes, f->ql, skv_act_row_bytes(f->type, f->K), f->K, f->T,
                                 f->n);
}

static const uint32_t k_dot_types[] = {SKV_GGML_Q8_0, SKV_GGML_Q4_0, SKV_GGML_Q4_1, SKV_GGML_Q5_0,
                                       SKV_GGML_Q5_1, SKV_GGML_IQ4_NL, SKV_GGML_Q2_K, SKV_GGML_Q3_K,
                                       SKV_GGML_Q4_K, SKV_GGML_Q5_K, SKV_GGML_Q6_K, SKV_GGML_IQ4_XS};
#define N_DOT_TYPES (sizeof k_dot_types / sizeof k_dot_types[0])

/* Every level the CPU has gives the reference's bits (rows not a multiple of the tiles). */
static void levels_bit_identical(void)
{
    int top = skv_dot_level(SKV_DOT_AVX512);
    if (top == SKV_DOT_REF) SKIP("no AVX2 on this CPU: only the reference runs");
    for (size_t i = 0; i < N_DOT_TYPES; i++)
        for (size_t K = 256; K <= 768; K += 256)
            for (size_t T = 1; T <= 9; T += 1 + T / 3) {
                fixture f;
                size_t n = 1 + rnd() % 21;
                CHECK(fixture_make(&f, k_dot_types[i], K, T, n));
                for (int l = 0; l <= top; l++) run_level(&f, l, f.y[l]);
                for (int l = 1; l <= top; l++)
                    CHECK_MSG(!memcmp(f.y[0], f.y[l], T * n * sizeof(float)), "%s K %zu T %zu rows %zu: level %d differs",
                              skv_ggml_type_name(f.type), K, T, n, l);
                fixture_free(&f);
            }
}

/* The reference equals sum_j f32(w_j) * act_j up to float rounding (double check). */
static void reference_is_the_dequantized_dot(void)
{
    for (size_t i = 0; i < N_DOT_TYPES; i++) {
        fixture f;
        size_t K = 512, n = 6;
        float w[512];
        CHECK(fixture_make(&f, k_dot_types[i], K, 2, n));
        run_level(&f, SKV_DOT_REF, f.y[0]);
        for (size_t t = 0; t < 2; t++)
            for (size_t r = 0; r < n; r++) {
                double s = 0, mag = 0;
                const uint8_t *qa = f.qa + t * skv_act_row_bytes(f.type, K);
                skv_type_traits_of(f.type)->to_float(f.W + r * f.row_bytes, w, K);
                for (size_t j = 0; j < K; j++) {
                    s += (double)w[j] * act_value(f.type, qa, j);
                    mag += fabs((double)w[j] * act_value(f.type, qa, j));
                }
                CHECK_MSG(fabs(s - (double)f.y[0][t * n + r]) <= 1e-5 * mag + 1e-30, "%s row %zu: %g vs %g",
                          skv_ggml_type_name(f.type), r, (double)f.y[0][t * n + r], s);
            }
        fixture_free(&f);
    }
}

/* A token's outputs are the same alone and inside a batch, at every level. */
static void batch_invariant(void)
{
    for (size_t i = 0; i < N_DOT_TYPES; i++) {
        fixture f;
        size_t K = 256, T = 5, n = 11;
        float one[11];
        CHECK(fixture_make(&f, k_dot_types[i], K, T, n));
        for (int l = 0; l <= skv_dot_level(SKV_DOT_AVX512); l++) {
            run_level(&f, l, f.y[0]);
            for (size_t t = 0; t < T; t++) {
                size_t ab = skv_act_row_bytes(f.type, K);
                skv_dot_gemm(l, f.type)(one, n, f.W, f.row_bytes, f.qa + t * ab, ab, K, 1, n);
                CHECK_MSG(!memcmp(one, f.y[0] + t * n, sizeof one), "%s level %d token %zu", skv_ggml_type_name(f.type),
                          l, t);
            }
        }
        fixture_free(&f);
    }
}

/* Batches of 16 tokens and more (the AVX-512 lanes kernels of every type take full
 * groups of 16, the tile kernels the rest; rows in chunks of 64 blocks, groups in
 * batches of 32): every level gives the reference's bits, and a product run on the
 * tokens from a group boundary on (the engine's token blocks) gives the same rows. */
static void long_batches_bit_identical(void)
{
    static const size_t shapes[][3] = {{256, 16, 16}, {256, 17, 7}, {64, 33, 21}, {2560, 40, 9},
                                       {2048, 31, 16}, {64, 530, 3}, {4096, 48, 1}, {512, 150, 9}};
    int top = skv_dot_level(SKV_DOT_AVX512);
    if (top == SKV_DOT_REF) SKIP("no AVX2 on this CPU: only the reference runs");
    for (size_t i = 0; i < N_DOT_TYPES; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            fixture f;
            size_t K = shapes[s][0], T = shapes[s][1], n = shapes[s][2];
            if (K % act_block(k_dot_types[i])) continue;
            CHECK(fixture_make(&f, k_dot_types[i], K, T, n));
            run_level(&f, SKV_DOT_REF, f.y[0]);
            for (int l = 1; l <= top; l++) {
                size_t ab = skv_act_row_bytes(f.type, K);
                run_level(&f, l, f.y[1]);
                CHECK_MSG(!memcmp(f.y[0], f.y[1], T * n * sizeof(float)), "%s K %zu T %zu rows %zu: level %d differs",
                          skv_ggml_type_name(f.type), K, T, n, l);
                skv_dot_gemm(l, f.type)(f.y[2], n, f.W, f.row_bytes, f.ql + 16 * ab, ab, K, T - 16, n);
                CHECK_MSG(!memcmp(f.y[0] + 16 * n, f.y[2], (T - 16) * n * sizeof(float)),
                          "%s K %zu T %zu: level %d from token 16 differs", skv_ggml_type_name(f.type), K, T, l);
            }
            fixture_free(&f);
        }
}

/* q8_0 activations: binary16-exact scale amax/127, values roundf(x / d) in [-127, 127];
 * q8_K: the largest magnitude maps to -127, d = max / -127. */
static void act_quantizers_follow_llama(void)
{
    float x[256];
    skv_act32 a[8];
    skv_act256 b;
    for (int j = 0; j < 256; j++) x[j] = rnd_float();
    x[3] = 7.5f;
    skv_act_quantize(SKV_DOT_REF, SKV_GGML_Q8_0, x, 256, 1, 256, a);
    CHECK(a[0].d == skv_f16_to_f32(skv_f32_to_f16(7.5f / 127.0f)) && a[0].qs[3] == 127);
    for (int j = 0; j < 32; j++) CHECK(a[0].qs[j] == (int)roundf(x[j] * (1.0f / (7.5f / 127.0f))));
    skv_act_quantize(SKV_DOT_REF, SKV_GGML_Q4_K, x, 256, 1, 256, &b);
    CHECK(b.qs[3] == -127 && b.d == 1.0f / (-127.0f / 7.5f));
    int s = 0;
    for (int j = 0; j < 16; j++) s += b.qs[j];
    CHECK(b.bsum[0] == s);
    CHECK(skv_act_row_bytes(SKV_GGML_Q4_K, 255) == 0 && skv_act_row_bytes(SKV_GGML_F16, 256) == 0);
    CHECK(skv_dot_gemm(SKV_DOT_AVX512, SKV_GGML_F32) == NULL && skv_dot_gemm(SKV_DOT_REF, SKV_GGML_Q6_K) != NULL);
}

/* The activation quantizers give the same bytes at every level (the AVX2 twins of their
 * per-value steps): random rows, exact ties of roundf (x * id = k + 0.5), signed zeros,
 * subnormals, the largest floats, infinities, NaNs and all-zero blocks. */
static void act_quantizers_bit_identical(void)
{
    static const uint32_t wt[] = {SKV_GGML_Q4_0, SKV_GGML_Q4_K};
    static float x[3 * 512];
    static uint8_t q[3][3 * 512 * 2];
    int top = skv_dot_level(SKV_DOT_AVX512);
    if (top == SKV_DOT_REF) SKIP("no AVX2 on this CPU: only the reference runs");
    for (size_t r = 0; r < 12; r++) {
        for (size_t j = 0; j < 3 * 512; j++) x[j] = rnd_float() * (r % 3 == 0 ? 1e4f : 1.0f);
        if (r % 4 == 1) /* block amax 127 (d = 1): ties at +-0.5, 2.5, 126.5 */
            for (size_t j = 0; j < 3 * 512; j++) x[j] = j % 32 == 0 ? 127.0f : (float)((int)(rnd() % 255) - 127) + 0.5f;
        if (r % 4 == 2)
            for (size_t j = 0; j < 3 * 512; j += 7) x[j] = (float[]){-0.0f, 1e-40f, -3e38f, INFINITY, NAN, 0.0f}[j % 6];
        if (r % 4 == 3) memset(x + 512, 0, 512 * sizeof(float));
        for (size_t w = 0; w < 2; w++) {
            size_t rb = skv_act_row_bytes(wt[w], 512);
            for (int l = 0; l <= top; l++) skv_act_quantize(l, wt[w], x, 512, 3, 512, q[l]);
            for (int l = 1; l <= top; l++)
                CHECK_MSG(!memcmp(q[0], q[l], 3 * rb), "%s row set %zu: level %d quantizes differently",
                          skv_ggml_type_name(wt[w]), r, l);
        }
    }
}

/* Infinities and NaNs in the activations: defined conversions (UBSan), non-finite outputs
 * and the same bits at every level. */
static void non_finite_activations(void)
{
    for (size_t i = 0; i < N_DOT_TYPES; i++) {
        fixture f;
        CHECK(fixture_make(&f, k_dot_types[i], 256, 1, 9));
        f.x[5] = INFINITY, f.x[77] = NAN;
        skv_act_quantize(SKV_DOT_REF, f.type, f.x, 256, 1, 256, f.qa);
        run_level(&f, SKV_DOT_REF, f.y[0]);
        run_level(&f, skv_dot_level(SKV_DOT_AVX512), f.y[1]);
        for (size_t r = 0; r < 9; r++) CHECK(!isfinite(f.y[0][r]) || f.y[0][r] == 0.0f);
        fixture_free(&f);
    }
}

/* Weight blocks at the edges of their ranges (every byte 0x00, 0xFF, 0x88 or 0x77: the
 * largest and smallest values, scales and mins, all bits of the high masks) against
 * activations of the largest magnitude with both signs (q = +-127): no SIMD twin may
 * saturate an int16 pair or lose a bit.  Odd row counts, T = 1 and prefill shapes. */
static void extreme_blocks_bit_identical(void)
{
    static const uint8_t fill[] = {0x00, 0xFF, 0x88, 0x77};
    int top = skv_dot_level(SKV_DOT_AVX512);
    if (top == SKV_DOT_REF) SKIP("no AVX2 on this CPU: only the reference runs");
    for (size_t i = 0; i < N_DOT_TYPES; i++)
        for (size_t v = 0; v < sizeof fill; v++) {
            fixture f;
            size_t K = 512, T = v % 2 ? 1 : 19, n = 3 + 2 * v;
            CHECK(fixture_make(&f, k_dot_types[i], K, T, n));
            memset(f.W, fill[v], n * f.row_bytes);
            set_scales(f.type, f.W, n * f.row_bytes, v % 2 ? -0.001f : 0.002f);
            for (size_t j = 0; j < T * K; j++) f.x[j] = (j * 7 + v) % 3 == 0 ? -4.0f : 4.0f;
            for (int l = 0; l <= top; l++) run_level(&f, l, f.y[l]);
            for (int l = 1; l <= top; l++)
                CHECK_MSG(!memcmp(f.y[0], f.y[l], T * n * sizeof(float)), "%s fill %02x T %zu: level %d differs",
                          skv_ggml_type_name(f.type), fill[v], T, l);
            fixture_free(&f);
        }
}

/* Every type the engine reads runs SIMD code on an AVX2 CPU: a type with an integer dot
 * has a twin at every level (the table's gemm column, not a fallback to the reference);
 * one without runs the f32 matmul on its SIMD conversion (to_float_simd, or f16's own
 * matvec / matmul); f32 needs no conversion (engine/forward.c matmul_task). Decode of an
 * integer-dot type reads the packed layout (quant/repack.h): every such type has one. */
static void engine_types_have_simd_kernels(void)
{
#if defined(__x86_64__)
    int top = skv_dot_level(SKV_DOT_AVX512);
    for (uint32_t id = 0; id < SKV_GGML_NTYPES; id++) {
        const skv_type_traits *t = skv_type_traits_of(id);
        if (!t || !skv_type_readable(id)) continue;
        if (!t->gemm[SKV_DOT_REF]) {
            CHECK_MSG(id == SKV_GGML_F32 || t->to_float_simd || t->matmul_simd, "%s: scalar-only conversion",
                      t->name);
            continue;
        }
        CHECK_MSG(t->gemm[SKV_DOT_AVX2] && t->gemm[SKV_DOT_AVX512], "%s: gemm column has no SIMD twin", t->name);
        for (int l = SKV_DOT_AVX2; l <= top; l++)
            CHECK_MSG(skv_dot_gemm(l, id) != t->gemm[SKV_DOT_REF], "%s: level %d runs the scalar reference",
                      t->name, l);
        /* decode (one token) runs the packed layout's kernels; without one it would unpack */
        CHECK_MSG(skv_pack_row_bytes(id, 2048) > 0, "%s: no packed decode layout", t->name);
    }
#else
    SKIP("the SIMD twins are x86-64 only");
#endif
}

int main(void)
{
    TEST_BEGIN("test_dot");
    RUN(levels_bit_identical);
    RUN(reference_is_the_dequantized_dot);
    RUN(batch_invariant);
    RUN(long_batches_bit_identical);
    RUN(act_quantizers_follow_llama);
    RUN(act_quantizers_bit_identical);
    RUN(non_finite_activations);
    RUN(extreme_blocks_bit_identical);
    RUN(engine_types_have_simd_kernels);
    TEST_END();
}
