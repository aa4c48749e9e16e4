/* The type table (types.h): one row per ggml tensor type. */
#include "quant/types.h"
#include "core/fpguard.h"

#include <assert.h>
#include <string.h>

#include "quant/qblocks.h"
#include "quant/dot_int.h"
#include "quant/types_kernels.h"

/* Block layouts, pinned: these sizes are ggml's on-disk formats. */
static_assert(sizeof(uint16_t) + 32 * sizeof(int8_t) == 34, "q8_0 block = fp16 scale + 32 x int8");
static_assert(sizeof(uint16_t) + 32 / 2 == 18, "q4_0 block = fp16 scale + 16 bytes of nibble pairs");
static_assert(SKV_GGML_NTYPES == 43, "ggml type ids: append only");

/* The SIMD twins exist only in x86-64 builds (types_avx2.c). */
#if defined(__x86_64__)
#define AVX2(fn) fn
#else
#define AVX2(fn) NULL
#endif

/* A type the loader can size but the engine cannot read (integers, i-quants
 * with codebooks, ternary and fp4 types): a load names it in its refusal. */
#define SIZE_ONLY(nm, blck, size) {.name = nm, .blck_size = blck, .type_size = size}
/* A weight-only type: readable, not a KV storage target, every byte pattern valid. */
#define WEIGHT(nm, blck, size, ref, dot) {.name = nm, .blck_size = blck, .type_size = size, .to_float = ref, dot}
#define WEIGHT_SIMD(nm, blck, size, ref, simd, dot)                                                  \
    {.name = nm, .blck_size = blck, .type_size = size, .to_float = ref, .to_float_simd = AVX2(simd), \
     .simd_needs = SKV_CPU_AVX2_SET, dot}
/* The integer dot columns (quant/dot.h): activation format, reference gemm [, SIMD twins]. */
#define DOT(act, nm) .act_type = SKV_ACT_##act, .gemm = {skv_gemm_##nm##_ref}
#define DOT_SIMD(act, nm) \
    .act_type = SKV_ACT_##act, .gemm = {skv_gemm_##nm##_ref, AVX2(skv_gemm_##nm##_avx2), AVX2(skv_gemm_##nm##_avx512)}

static const skv_type_traits k_types[SKV_GGML_NTYPES] = {
    [SKV_GGML_F32] = {.name = "f32", .blck_size = 1, .type_size = 4,
                      .to_float = skv_f32_to_float_ref, .from_float = skv_f32_from_float_ref,
                      .check = skv_f32_check},
    [SKV_GGML_F16] = {.name = "f16", .blck_size = 1, .type_size = 2,
                      .to_float = skv_f16_to_float_ref, .from_float = skv_f16_from_float_ref,
                      .check = skv_f16_check,
                      .to_float_simd = AVX2(skv_f16_to_float_avx2),
                      .from_float_simd = AVX2(skv_f16_from_float_avx2),
                      .matvec_simd = AVX2(skv_f16_matvec_avx2), .matmul_simd = AVX2(skv_f16_matmul_avx2),
                      .matmul_packed_simd = AVX2(skv_f16_matmul_packed_avx2),
                      .simd_needs = SKV_CPU_AVX2_SET},
    [SKV_GGML_BF16] = {.name = "bf16", .blck_size = 1, .type_size = 2, .to_float = skv_bf16_to_float_ref,
                       .to_float_simd = AVX2(skv_bf16_to_float_avx2),
                       .matvec_simd = AVX2(skv_bf16_matvec_avx2), .matmul_simd = AVX2(skv_bf16_matmul_avx2),
                       .matmul_packed_simd = AVX2(skv_bf16_matmul_packed_avx2),
                       .simd_needs = SKV_CPU_AVX2_SET},
    [SKV_GGML_Q8_0] = {.name = "q8_0", .blck_size = 32, .type_size = 34, .short_bytes = skv_q8_0_short_bytes,
                       .to_float = skv_q8_0_to_float_ref, .from_float = skv_q8_0_from_float_ref,
                       .check = skv_q8_0_check, .to_float_simd = AVX2(skv_q8_0_to_float_avx2),
                       .simd_needs = SKV_CPU_AVX2_SET, DOT_SIMD(Q8_32, q8_0)},
    [SKV_GGML_Q4_0] = {.name = "q4_0", .blck_size = 32, .type_size = 18, .short_bytes = skv_q4_0_short_bytes,
                       .to_float = skv_q4_0_to_float_ref, .from_float = skv_q4_0_from_float_ref,
                       .check = skv_q4_0_check, .to_float_simd = AVX2(skv_q4_0_to_float_avx2),
                       .simd_needs = SKV_CPU_AVX2_SET, DOT_SIMD(Q8_32, q4_0)},
    [SKV_GGML_Q4_1] = WEIGHT("q4_1", 32, sizeof(skv_block_q4_1), skv_q4_1_to_float_ref, DOT_SIMD(Q8_32, q4_1)),
    [SKV_GGML_Q5_0] = WEIGHT("q5_0", 32, sizeof(skv_block_q5_0), skv_q5_0_to_float_ref, DOT_SIMD(Q8_32, q5_0)),
    [SKV_GGML_Q5_1] = WEIGHT("q5_1", 32, sizeof(skv_block_q5_1), skv_q5_1_to_float_ref, DOT_SIMD(Q8_32, q5_1)),
    [SKV_GGML_Q8_1] = SIZE_ONLY("q8_1", 32, 36),
    [SKV_GGML_Q2_K] = WEIGHT("q2_k", 256, sizeof(skv_block_q2_k), skv_q2_k_to_float_ref, DOT_SIMD(Q8_256, q2_k)),
    [SKV_GGML_Q3_K] = WEIGHT("q3_k", 256, sizeof(skv_block_q3_k), skv_q3_k_to_float_ref, DOT_SIMD(Q8_256, q3_k)),
    [SKV_GGML_Q4_K] = WEIGHT_SIMD("q4_k", 256, sizeof(skv_block_q4_k), skv_q4_k_to_float_ref, skv_q4_k_to_float_avx2, DOT_SIMD(Q8_256, q4_k)),
    [SKV_GGML_Q5_K] = WEIGHT_SIMD("q5_k", 256, sizeof(skv_block_q5_k), skv_q5_k_to_float_ref, skv_q5_k_to_float_avx2, DOT_SIMD(Q8_256, q5_k)),
    [SKV_GGML_Q6_K] = WEIGHT_SIMD("q6_k", 256, sizeof(skv_block_q6_k), skv_q6_k_to_float_ref, skv_q6_k_to_float_avx2, DOT_SIMD(Q8_256, q6_k)),
    [SKV_GGML_Q8_K] = SIZE_ONLY("q8_k", 256, 292),
    [SKV_GGML_IQ2_XXS] = SIZE_ONLY("iq2_xxs", 256, 66),
    [SKV_GGML_IQ2_XS] = SIZE_ONLY("iq2_xs", 256, 74),
    [SKV_GGML_IQ3_XXS] = SIZE_ONLY("iq3_xxs", 256, 98),
    [SKV_GGML_IQ1_S] = SIZE_ONLY("iq1_s", 256, 50),
    [SKV_GGML_IQ4_NL] = WEIGHT("iq4_nl", 32, sizeof(skv_block_iq4_nl), skv_iq4_nl_to_float_ref, DOT_SIMD(Q8_32, iq4_nl)),
    [SKV_GGML_IQ3_S] = SIZE_ONLY("iq3_s", 256, 110),
    [SKV_GGML_IQ2_S] = SIZE_ONLY("iq2_s", 256, 82),
    [SKV_GGML_IQ4_XS] = WEIGHT("iq4_xs", 256, sizeof(skv_block_iq4_xs), skv_iq4_xs_to_float_ref, DOT_SIMD(Q8_256, iq4_xs)),
    [SKV_GGML_I8] = SIZE_ONLY("i8", 1, 1),
    [SKV_GGML_I16] = SIZE_ONLY("i16", 1, 2),
    [SKV_GGML_I32] = SIZE_ONLY("i32", 1, 4),
    [SKV_GGML_I64] = SIZE_ONLY("i64", 1, 8),
    [SKV_GGML_F64] = SIZE_ONLY("f64", 1, 8),
    [SKV_GGML_IQ1_M] = SIZE_ONLY("iq1_m", 256, 56),
    [SKV_GGML_TQ1_0] = SIZE_ONLY("tq1_0", 256, 54),
    [SKV_GGML_TQ2_0] = SIZE_ONLY("tq2_0", 256, 66),
    [SKV_GGML_MXFP4] = SIZE_ONLY("mxfp4", 32, 17),
    [SKV_GGML_NVFP4] = SIZE_ONLY("nvfp4", 64, 36),
    [SKV_GGML_Q1_0] = SIZE_ONLY("q1_0", 128, 18),
    [SKV_GGML_Q2_0] = SIZE_ONLY("q2_0", 64, 18),
};

const skv_type_traits *skv_type_traits_of(uint32_t type)
{
    return type < SKV_GGML_NTYPES && k_types[type].name ? &k_types[type] : NULL;
}

size_t skv_type_row_bytes(uint32_t type, size_t n)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    size_t rest;
    if (!t) return 0;
    rest = n % t->blck_size;
    if (rest && !t->short_bytes) return 0;
    return n / t->blck_size * t->type_size + (rest ? t->short_bytes(rest) : 0);
}

int skv_type_readable(uint32_t type)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    return t && t->to_float;
}

size_t skv_type_readable_names(char *buf, size_t cap)
{
    size_t len = 0, kept = 0; /* kept: the prefix that fits in buf */
    if (cap) buf[0] = 0;
    for (uint32_t i = 0; i < SKV_GGML_NTYPES; i++) {
        const char *sep = len ? ", " : "";
        if (!skv_type_readable(i)) continue;
        if (kept == len && len + strlen(sep) + strlen(k_types[i].name) < cap) {
            strcat(strcat(buf, sep), k_types[i].name);
            kept = strlen(buf);
        }
        len += strlen(sep) + strlen(k_types[i].name);
    }
    return len;
}

static int simd_ok(const skv_type_traits *t, int simd) { return simd && skv_cpu_has(t->simd_needs); }

skv_to_float_fn skv_type_to_float(const skv_type_traits *t, int simd)
{
    return t->to_float_simd && simd_ok(t, simd) ? t->to_float_simd : t->to_float;
}

skv_from_float_fn skv_type_from_float(const skv_type_traits *t, int simd)
{
    return t->from_float_simd && simd_ok(t, simd) ? t->from_float_simd : t->from_float;
}

skv_matvec_fn skv_type_matvec(const skv_type_traits *t, int simd)
{
    return t->matvec_simd && simd_ok(t, simd) ? t->matvec_simd : NULL;
}

skv_matmul_fn skv_type_matmul(const skv_type_traits *t, int simd)
{
    return t->matmul_simd && simd_ok(t, simd) ? t->matmul_simd : NULL;
}

skv_matmul_packed_fn skv_type_matmul_packed(const skv_type_traits *t, int simd)
{
    return t->matmul_packed_simd && simd_ok(t, simd) ? t->matmul_packed_simd : NULL;
}

size_t skv_ggml_blck_size(uint32_t type)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    return t ? t->blck_size : 0;
}

size_t skv_ggml_type_size(uint32_t type)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    return t ? t->type_size : 0;
}

const char *skv_ggml_type_name(uint32_t type)
{
    const skv_type_traits *t = skv_type_traits_of(type);
    return t ? t->name : "unknown";
}
