/* Writes the weight-type fixtures tests/data/types/<type>.bin with llama.cpp's
 * ggml as the oracle: rows quantized by ggml_quantize_chunk (the quantizers
 * llama-quantize runs, no importance matrix) plus rows of random block bytes
 * (every field value, finite binary16 scales), and the floats ggml's
 * reference to_float gives for them.  Built and run by types_fixtures.sh;
 * not part of the seqkv build (it links libggml-base).
 *
 * File layout (little-endian), see tests/data/types/README.md:
 *   "SKVTYPE1", u32 type id, u32 n (values per row), u32 rows, u32 row_bytes,
 *   rows * row_bytes block bytes, rows * n binary32 expected values. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#define N_VALUES 512
#define N_QUANT 3  /* rows from ggml_quantize_chunk */
#define N_RANDOM 3 /* rows of random bytes */

typedef struct {
    enum ggml_type type;
    const char *file;
    int half_at[2]; /* byte offsets of binary16 fields in a block, -1: none */
} spec;

static const spec k_specs[] = {
    {GGML_TYPE_F16, "f16", {-1, -1}},     {GGML_TYPE_BF16, "bf16", {-1, -1}},
    {GGML_TYPE_Q4_0, "q4_0", {0, -1}},    {GGML_TYPE_Q4_1, "q4_1", {0, 2}},
    {GGML_TYPE_Q5_0, "q5_0", {0, -1}},    {GGML_TYPE_Q5_1, "q5_1", {0, 2}},
    {GGML_TYPE_Q8_0, "q8_0", {0, -1}},    {GGML_TYPE_Q2_K, "q2_k", {80, 82}},
    {GGML_TYPE_Q3_K, "q3_k", {108, -1}},  {GGML_TYPE_Q4_K, "q4_k", {0, 2}},
    {GGML_TYPE_Q5_K, "q5_k", {0, 2}},     {GGML_TYPE_Q6_K, "q6_k", {208, -1}},
    {GGML_TYPE_IQ4_NL, "iq4_nl", {0, -1}}, {GGML_TYPE_IQ4_XS, "iq4_xs", {0, -1}},
};

static uint64_t g_state = 0x5eedc0de2024ull;

static uint64_t next_u64(void)
{
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(void) { return ((double)(next_u64() >> 11) + 0.5) / 9007199254740992.0; }

static float gauss(void) { return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform())); }

/* Row r of the quantizer input: plain gaussian, gaussian with outliers, tiny values. */
static void source_row(int r, float *x)
{
    for (int i = 0; i < N_VALUES; i++) {
        float v = gauss();
        if (r == 1 && next_u64() % 37 == 0) v *= 20.0f;
        if (r == 2) v *= 1e-3f;
        x[i] = v;
    }
}

/* A random finite binary16 of magnitude below 2^-2 (a plausible scale). */
static uint16_t random_half(void)
{
    uint16_t h = (uint16_t)next_u64();
    return (uint16_t)((h & 0x83ffu) | ((uint16_t)(next_u64() % 13) << 10));
}

static void random_row(const spec *s, size_t row_bytes, uint8_t *p)
{
    const struct ggml_type_traits *t = ggml_get_type_traits(s->type);
    for (size_t i = 0; i < row_bytes; i++) p[i] = (uint8_t)next_u64();
    if (t->blck_size == 1) { /* f16 / bf16 values: finite */
        for (size_t i = 0; i < row_bytes; i += 2) p[i + 1] &= 0xbb;
        return;
    }
    for (size_t b = 0; b < row_bytes; b += t->type_size)
        for (int k = 0; k < 2; k++)
            if (s->half_at[k] >= 0) {
                uint16_t h = random_half();
                p[b + (size_t)s->half_at[k]] = (uint8_t)h;
                p[b + (size_t)s->half_at[k] + 1] = (uint8_t)(h >> 8);
            }
}

static void put_u32(FILE *f, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fwrite(b, 1, 4, f);
}

static int write_fixture(const char *dir, const spec *s)
{
    const struct ggml_type_traits *t = ggml_get_type_traits(s->type);
    size_t row_bytes = ggml_row_size(s->type, N_VALUES), rows = N_QUANT + N_RANDOM;
    uint8_t *q = malloc(rows * row_bytes);
    float *x = malloc(rows * N_VALUES * sizeof *x), *y = malloc(rows * N_VALUES * sizeof *y);
    char path[1024];
    FILE *f;
    for (int r = 0; r < N_QUANT; r++) source_row(r, x + (size_t)r * N_VALUES);
    ggml_quantize_chunk(s->type, x, q, 0, N_QUANT, N_VALUES, NULL);
    for (size_t r = N_QUANT; r < rows; r++) random_row(s, row_bytes, q + r * row_bytes);
    t->to_float(q, y, (int64_t)(rows * N_VALUES));
    snprintf(path, sizeof path, "%s/%s.bin", dir, s->file);
    if (!(f = fopen(path, "wb"))) return perror(path), 1;
    fwrite("SKVTYPE1", 1, 8, f);
    put_u32(f, (uint32_t)s->type), put_u32(f, N_VALUES), put_u32(f, (uint32_t)rows), put_u32(f, (uint32_t)row_bytes);
    fwrite(q, 1, rows * row_bytes, f);
    for (size_t i = 0; i < rows * N_VALUES; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        put_u32(f, u);
    }
    free(q), free(x), free(y);
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    int bad = 0;
    if (argc != 2) return fprintf(stderr, "usage: %s OUTDIR\n", argv[0]), 2;
    for (size_t i = 0; i < sizeof k_specs / sizeof k_specs[0]; i++) bad |= write_fixture(argv[1], &k_specs[i]);
    return bad;
}
