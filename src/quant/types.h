/* One table of tensor / block types: everything the GGUF loader, the weight
 * kernels and the KV quantizers need to know about a type is one row of it.
 *
 * READ ME FIRST
 * - Type ids are ggml's (they are stored in GGUF files): never renumber.  The
 *   table is indexed by id; a row without a name is an id nobody knows.
 * - A row of n values is stored in whole blocks of blck_size values
 *   (type_size bytes each).  Types with short_bytes also allow a short last
 *   block of L = n % blck_size values (the KV quantizers' layout for a head
 *   dimension that is not a multiple of 32); GGUF rows are always whole blocks.
 *   skv_type_row_bytes() gives the size of a row either way.
 * - to_float is the scalar reference; to_float_simd / from_float_simd /
 *   matvec_simd compute exactly the same bits faster (tests compare) and may
 *   only run where skv_cpu_has(simd_needs): use skv_type_to_float() and
 *   friends, which pick the reference otherwise.
 * - to_float never fails: a weight file may hold any bits.  Stored KV rows are
 *   hostile and go through check() first.
 * - Every id ggml defines has a row with its name and size, readable or not,
 *   so a file is sized and a refusal names the type ("has type iq2_xxs").
 * - Adding a type is one row here plus its kernels (types_ref.c, qlegacy.c,
 *   kquants.c, block layouts in qblocks.h; types_avx2.c / kquants_avx2.c for
 *   a SIMD twin); no switch anywhere else names types. */
#ifndef SKV_TYPES_H
#define SKV_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "quant/dot.h"

/* GGML tensor type ids (the GGUF on-disk numbering). */
enum skv_ggml_type {
    SKV_GGML_F32 = 0, SKV_GGML_F16 = 1, SKV_GGML_Q4_0 = 2, SKV_GGML_Q4_1 = 3,
    SKV_GGML_Q5_0 = 6, SKV_GGML_Q5_1 = 7, SKV_GGML_Q8_0 = 8, SKV_GGML_Q8_1 = 9,
    SKV_GGML_Q2_K = 10, SKV_GGML_Q3_K = 11, SKV_GGML_Q4_K = 12, SKV_GGML_Q5_K = 13,
    SKV_GGML_Q6_K = 14, SKV_GGML_Q8_K = 15, SKV_GGML_IQ2_XXS = 16, SKV_GGML_IQ2_XS = 17,
    SKV_GGML_IQ3_XXS = 18, SKV_GGML_IQ1_S = 19, SKV_GGML_IQ4_NL = 20, SKV_GGML_IQ3_S = 21,
    SKV_GGML_IQ2_S = 22, SKV_GGML_IQ4_XS = 23, SKV_GGML_I8 = 24, SKV_GGML_I16 = 25,
    SKV_GGML_I32 = 26, SKV_GGML_I64 = 27, SKV_GGML_F64 = 28, SKV_GGML_IQ1_M = 29,
    SKV_GGML_BF16 = 30, SKV_GGML_TQ1_0 = 34, SKV_GGML_TQ2_0 = 35, SKV_GGML_MXFP4 = 39,
    SKV_GGML_NVFP4 = 40, SKV_GGML_Q1_0 = 41, SKV_GGML_Q2_0 = 42,
    SKV_GGML_NTYPES = 43
};

/* dst[0..n) = the n values stored at src. */
typedef void (*skv_to_float_fn)(const void *src, float *dst, size_t n);
/* Stores n values; SKV_OK, SKV_ERR_INVALID_ARG (a non-finite input) or
 * SKV_ERR_RANGE (a value or scale the format cannot hold). */
typedef int (*skv_from_float_fn)(const float *src, void *dst, size_t n);
/* SKV_OK when the n stored values at src are valid (finite scales and values,
 * zero padding), else SKV_ERR_FORMAT. */
typedef int (*skv_check_fn)(const void *src, size_t n);
/* y[r] = dot(f32(W_r), x, K) for n_rows rows W_r of row_bytes each, in the
 * engine's canonical dot order (engine/ops.h), i.e. exactly to_float followed
 * by the f32 matrix-vector product, without the f32 copy. */
typedef void (*skv_matvec_fn)(float *y, const void *W, size_t row_bytes, size_t K, const float *x,
                              size_t n_rows);

/* y[t*ldy + r] = dot(f32(W_r), x + t*ldx, K) for t < T and n_rows rows: the same
 * bits as T calls of the matvec (the canonical dot), weights read once per tile.
 * scratch: NULL or room for 8 * K floats (lets a wide kernel convert rows once). */
typedef void (*skv_matmul_fn)(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                              size_t ldx, size_t T, size_t n_rows, float *scratch);

/* The matmul on rows packed by quant/repack.h (f16, bf16: 8-row groups of 16-byte
 * chunks), n_rows a multiple of 16, K of 8: the same bits as skv_matmul_fn on the file's
 * rows. scratch: room for 16 * K floats. */
typedef void (*skv_matmul_packed_fn)(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx,
                                     size_t T, size_t n_rows, float *scratch);

typedef struct skv_type_traits {
    const char *name;               /* ggml's lower-case name ("q8_0") */
    uint32_t blck_size;             /* values per block */
    uint32_t type_size;             /* bytes per whole block */
    size_t (*short_bytes)(size_t L);  /* bytes of a short last block, 0 < L < blck_size; NULL: none */
    skv_to_float_fn to_float;       /* scalar reference; NULL: values not readable (size only) */
    skv_from_float_fn from_float;   /* scalar reference quantizer; NULL: not a storage target */
    skv_check_fn check;             /* NULL: every byte pattern is valid */
    /* SIMD twins, same bits as the references; NULL: none */
    skv_to_float_fn to_float_simd;
    skv_from_float_fn from_float_simd;
    skv_matvec_fn matvec_simd;
    skv_matmul_fn matmul_simd;
    skv_matmul_packed_fn matmul_packed_simd;
    uint32_t simd_needs;            /* SKV_CPU_* bits the SIMD twins execute */
    /* Integer dot kernels (quant/dot.h): the activation format and the gemm by
     * skv_dot_level, [SKV_DOT_REF] the reference (NULL: no integer dot), higher
     * levels bit-identical twins (NULL: the next lower one runs) */
    uint8_t act_type;
    skv_gemm_fn gemm[3];
} skv_type_traits;

/* The row of a known type, NULL for an unknown id. */
const skv_type_traits *skv_type_traits_of(uint32_t type);

/* Bytes of a row of n values; 0 when the type is unknown or n is not a
 * multiple of the block size for a type without short blocks. */
size_t skv_type_row_bytes(uint32_t type, size_t n);

/* 1 when rows of the type can be converted to f32 (weights the engine runs). */
int skv_type_readable(uint32_t type);

/* Writes the comma-separated names of the readable types ("f32, f16, ...",
 * table order) to buf[cap] for error messages; returns the full length (a
 * name that does not fit is left out whole, like snprintf's truncation). */
size_t skv_type_readable_names(char *buf, size_t cap);

/* The kernels to run: the SIMD twin where simd is set, the row has one and the
 * CPU has its features; otherwise the reference (NULL for the matvec). */
skv_to_float_fn skv_type_to_float(const skv_type_traits *t, int simd);
skv_from_float_fn skv_type_from_float(const skv_type_traits *t, int simd);
skv_matvec_fn skv_type_matvec(const skv_type_traits *t, int simd);
skv_matmul_fn skv_type_matmul(const skv_type_traits *t, int simd);
skv_matmul_packed_fn skv_type_matmul_packed(const skv_type_traits *t, int simd);

/* ggml-style accessors (GGUF loader): elements per block and bytes per block,
 * 0 for unknown types; "unknown" as the name of an unknown type. */
size_t skv_ggml_blck_size(uint32_t type);
size_t skv_ggml_type_size(uint32_t type);
const char *skv_ggml_type_name(uint32_t type);

#endif
