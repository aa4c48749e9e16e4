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

#include "quant/types.h"
#include "core/util.h"

enum skv_gguf_type {
    SKV_GGUF_U8 = 0, SKV_GGUF_I8 = 1, SKV_GGUF_U16 = 2, SKV_GGUF_I16 = 3,
    SKV_GGUF_U32 = 4, SKV_GGUF_I32 = 5, SKV_GGUF_F32 = 6, SKV_GGUF_BOOL = 7,
    SKV_GGUF_STRING = 8, SKV_GGUF_ARRAY = 9, SKV_GGUF_U64 = 10, SKV_GGUF_I64 = 11,
    SKV_GGUF_F64 = 12, SKV_GGUF_NTYPES
};

/* Tensor types (ids, names, block sizes) are the type table's: quant/types.h. */

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

/* Opens a model file. A model split by llama.cpp's gguf-split is opened from its first
 * shard (PREFIX-00001-of-0000N.gguf; the others beside it): the handle then reads the first
 * shard's metadata and the tensors of all N, and skv_gguf_file_size is their sum. */
int skv_gguf_open(const char *path, skv_gguf **out, skv_err *err);
/* Parses a buffer the caller keeps alive (used by the fuzzer and tests). */
int skv_gguf_open_mem(const void *data, size_t size, skv_gguf **out, skv_err *err);
void skv_gguf_close(skv_gguf *g);

uint32_t skv_gguf_version(const skv_gguf *g);
size_t skv_gguf_n_tensors(const skv_gguf *g);
const skv_gguf_tensor *skv_gguf_tensor_at(const skv_gguf *g, size_t i);
const skv_gguf_tensor *skv_gguf_find_tensor(const skv_gguf *g, const char *name);
size_t skv_gguf_file_size(const skv_gguf *g);

/* Overrides one metadata key, as llama.cpp's --override-kv: spec "KEY=TYPE:VALUE", TYPE
 * int (a 64-bit integer), float (a double), bool (true or false) or str (the rest of the
 * spec, at most SKV_GGUF_MAX_OVERRIDE bytes). Later lookups of KEY read the value (a key the
 * file lacks is added; a later override of the same key wins); the getters convert as for
 * the file's own values (an int where a float is read; a float where an int is read is
 * SKV_ERR_FORMAT). SKV_ERR_INVALID_ARG with a message for a malformed spec. */
#define SKV_GGUF_MAX_OVERRIDE 65536
int skv_gguf_override(skv_gguf *g, const char *spec, skv_err *err);

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

#endif
