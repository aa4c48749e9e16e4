/* GGUF v2/v3 reader over a read-only memory map.
 *
 * File layout (little-endian throughout; docs/gguf.md):
 *
 *   u32 magic "GGUF" | u32 version (2,3) | u64 n_tensors | u64 n_kv
 *   n_kv x { str key | u32 type | value }          str = u64 len + bytes
 *   n_tensors x { str name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset (offset % alignment == 0)
 *
 * skv_gguf_open_mem() validates the whole structure before returning: every length,
 * count and offset is checked against the bytes that remain (no multiplication before
 * an overflow check), keys and tensor names are unique, tensor extents lie inside the
 * data section. Accessors afterwards never fail on memory safety, only on type. */
#ifndef SKV_GGUF_H
#define SKV_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum skv_gguf_type {
    SKV_GGUF_U8 = 0, SKV_GGUF_I8 = 1, SKV_GGUF_U16 = 2, SKV_GGUF_I16 = 3,
    SKV_GGUF_U32 = 4, SKV_GGUF_I32 = 5, SKV_GGUF_F32 = 6, SKV_GGUF_BOOL = 7,
    SKV_GGUF_STRING = 8, SKV_GGUF_ARRAY = 9, SKV_GGUF_U64 = 10, SKV_GGUF_I64 = 11,
    SKV_GGUF_F64 = 12, SKV_GGUF_NTYPES
};

/* GGML tensor types this reader knows the storage size of. */
enum skv_ggml_type {
    SKV_GGML_F32 = 0, SKV_GGML_F16 = 1, SKV_GGML_Q4_0 = 2, SKV_GGML_Q4_1 = 3,
    SKV_GGML_Q5_0 = 6, SKV_GGML_Q5_1 = 7, SKV_GGML_Q8_0 = 8, SKV_GGML_Q8_1 = 9,
    SKV_GGML_Q2_K = 10, SKV_GGML_Q3_K = 11, SKV_GGML_Q4_K = 12, SKV_GGML_Q5_K = 13,
    SKV_GGML_Q6_K = 14, SKV_GGML_Q8_K = 15, SKV_GGML_I8 = 24, SKV_GGML_I16 = 25,
    SKV_GGML_I32 = 26, SKV_GGML_I64 = 27, SKV_GGML_F64 = 28, SKV_GGML_BF16 = 30,
    SKV_GGML_NTYPES = 31
};

typedef struct { const char *ptr; size_t len; } skv_gguf_str;

typedef struct skv_gguf_tensor {
    skv_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[4];       /* ne[0] is the fastest-varying (row length) */
    uint32_t type;        /* skv_ggml_type */
    const uint8_t *data;  /* inside the mapping */
    size_t nbytes;
    uint64_t n_elements;
} skv_gguf_tensor;

typedef struct skv_gguf skv_gguf;

int skv_gguf_open(const char *path, skv_gguf **out, char *err, size_t errcap);
/* Parses a buffer the caller keeps alive (used by the fuzzer and tests). */
int skv_gguf_open_mem(const void *data, size_t size, skv_gguf **out, char *err, size_t errcap);
void skv_gguf_close(skv_gguf *g);

uint32_t skv_gguf_version(const skv_gguf *g);
size_t skv_gguf_n_tensors(const skv_gguf *g);
const skv_gguf_tensor *skv_gguf_tensor_at(const skv_gguf *g, size_t i);
const skv_gguf_tensor *skv_gguf_find_tensor(const skv_gguf *g, const char *name);
size_t skv_gguf_file_size(const skv_gguf *g);

/* Metadata accessors: SKV_OK, SKV_ERR_RANGE when the key is absent (out untouched),
 * SKV_ERR_FORMAT when present with an incompatible type. Integers of any width are
 * accepted where they fit; floats accept F32/F64. */
int skv_gguf_has(const skv_gguf *g, const char *key);
int skv_gguf_get_int(const skv_gguf *g, const char *key, int64_t *out);
int skv_gguf_get_float(const skv_gguf *g, const char *key, double *out);
int skv_gguf_get_bool(const skv_gguf *g, const char *key, int *out);
int skv_gguf_get_str(const skv_gguf *g, const char *key, skv_gguf_str *out);
/* Arrays: element type and count; then fetch elements converted. */
int skv_gguf_get_arr(const skv_gguf *g, const char *key, uint32_t *elem_type, size_t *n);
int skv_gguf_arr_strings(const skv_gguf *g, const char *key, skv_gguf_str *out, size_t n);
int skv_gguf_arr_f32(const skv_gguf *g, const char *key, float *out, size_t n);
int skv_gguf_arr_i32(const skv_gguf *g, const char *key, int32_t *out, size_t n);

/* Type traits: elements per block and bytes per block; 0 for unknown types. */
size_t skv_ggml_blck_size(uint32_t type);
size_t skv_ggml_type_size(uint32_t type);
const char *skv_ggml_type_name(uint32_t type);

#endif
