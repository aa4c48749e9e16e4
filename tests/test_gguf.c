/* Hostile-input tests for the GGUF reader (src/engine/gguf.c) and the model loader
 * (src/engine/model.c, GGUF and llama2.c forms).
 *
 * Every file is built in memory by the small GGUF writer below, so each case
 * states exactly which bytes are wrong. Refusals are checked on the status
 * code AND on a phrase of the error text; buffers handed to the reader are
 * exact-size heap copies, so AddressSanitizer (make san) sees any over-read.
 *
 * SEQKV_WRITE_CORPUS=<dir> makes the binary also write the seed inputs of the
 * fuzz targets to <dir>/gguf/ and <dir>/model/ (used to make fuzz/corpus/). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/f16.h"
#include "engine/gguf.h"
#include "seqkv.h"
#include "test.h"

static char tmpdir[512];

/* ---- byte buffer ----------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        uint8_t *q;
        while (cap < b->n + n) cap *= 2;
        if (!(q = realloc(b->p, cap))) abort(); /* a test out of memory cannot go on */
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void b_u8(buf *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u16(buf *b, uint16_t v)
{
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    b_put(b, x, 2);
}
static void b_u32(buf *b, uint32_t v)
{
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    b_put(b, x, 4);
}
static void b_u64(buf *b, uint64_t v)
{
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}
static void b_f32(buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    b_u32(b, u);
}
static void b_f64(buf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    b_u64(b, u);
}
static void b_strn(buf *b, const char *s, size_t n)
{
    b_u64(b, n);
    b_put(b, s, n);
}
static void b_str(buf *b, const char *s) { b_strn(b, s, strlen(s)); }
static void b_zeros(buf *b, size_t n)
{
    static const uint8_t z[64];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        b_put(b, z, k);
        n -= k;
    }
}

/* Exact-size heap copy (so ASan catches any read past the end). */
static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    if (!q) abort();
    if (n) memcpy(q, p, n);
    return q;
}

/* ---- GGUF writer ------------------------------------------------------------- */

typedef struct {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    size_t align;  /* where gb_tensor places data (match general.alignment) */
    buf kv, ti, data;
} gguf_b;

static void gb_init(gguf_b *g, uint32_t version)
{
    memset(g, 0, sizeof *g);
    g->version = version;
    g->align = 32;
}

static void gb_free(gguf_b *g)
{
    free(g->kv.p);
    free(g->ti.p);
    free(g->data.p);
    memset(g, 0, sizeof *g);
}

/* Starts a metadata entry; the caller appends the value to the returned buffer. */
static buf *gb_key(gguf_b *g, const char *key, uint32_t type)
{
    b_str(&g->kv, key);
    b_u32(&g->kv, type);
    g->n_kv++;
    return &g->kv;
}

static void gb_u32(gguf_b *g, const char *k, uint32_t v) { b_u32(gb_key(g, k, SKV_GGUF_U32), v); }
static void gb_i32(gguf_b *g, const char *k, int32_t v) { b_u32(gb_key(g, k, SKV_GGUF_I32), (uint32_t)v); }
static void gb_f32(gguf_b *g, const char *k, float v) { b_f32(gb_key(g, k, SKV_GGUF_F32), v); }
static void gb_bool(gguf_b *g, const char *k, uint8_t v) { b_u8(gb_key(g, k, SKV_GGUF_BOOL), v); }
static void gb_str(gguf_b *g, const char *k, const char *v) { b_str(gb_key(g, k, SKV_GGUF_STRING), v); }

static buf *gb_arr(gguf_b *g, const char *k, uint32_t elem_type, uint64_t n)
{
    buf *b = gb_key(g, k, SKV_GGUF_ARRAY);
    b_u32(b, elem_type);
    b_u64(b, n);
    return b;
}

static void gb_arr_str(gguf_b *g, const char *k, size_t n, const char *const *v)
{
    buf *b = gb_arr(g, k, SKV_GGUF_STRING, n);
    for (size_t i = 0; i < n; i++) b_str(b, v[i]);
}

/* Tensor info only, at an explicit offset (data supplied separately). */
static void gb_tensor_info(gguf_b *g, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                           uint64_t off)
{
    b_str(&g->ti, name);
    b_u32(&g->ti, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) b_u64(&g->ti, ne[d]);
    b_u32(&g->ti, type);
    b_u64(&g->ti, off);
    g->n_tensors++;
}

/* Tensor info + data at the next offset aligned to g->align; returns the offset. */
static uint64_t gb_tensor(gguf_b *g, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                          const void *data, size_t nbytes)
{
    size_t off = (g->data.n + g->align - 1) / g->align * g->align;
    b_zeros(&g->data, off - g->data.n);
    gb_tensor_info(g, name, n_dims, ne, type, off);
    b_put(&g->data, data, nbytes);
    return off;
}

/* The file: header, metadata, tensor infos, padding to g->align, data.
 * Exact-size heap block; *data_start (optional) gets the data section offset. */
static uint8_t *gb_finish(const gguf_b *g, size_t *len, size_t *data_start)
{
    buf o = {0};
    uint8_t *out;
    b_put(&o, "GGUF", 4);
    b_u32(&o, g->version);
    b_u64(&o, g->n_tensors);
    b_u64(&o, g->n_kv);
    b_put(&o, g->kv.p, g->kv.n);
    b_put(&o, g->ti.p, g->ti.n);
    if (g->data.n) b_zeros(&o, (g->align - o.n % g->align) % g->align);
    if (data_start) *data_start = o.n;
    b_put(&o, g->data.p, g->data.n);
    *len = o.n;
    out = dup_exact(o.p, o.n);
    free(o.p);
    return out;
}

/* ---- refusal checks ---------------------------------------------------------- */

/* Opens an exact copy of bytes; 1 if it was refused with `status` and an error text
 * containing `phrase`, else 0 with the reason in why. */
static int refused(const uint8_t *bytes, size_t len, int status, const char *phrase, char *why, size_t whycap)
{
    skv_err err = {0};
    skv_gguf *g = NULL;
    uint8_t *copy = dup_exact(bytes, len);
    int rc = skv_gguf_open_mem(copy, len, &g, &err);
    int ok = rc == status && g == NULL && strstr(err.msg, phrase) != NULL;
    if (!ok)
        snprintf(why, whycap, "expected status %d with '%s'; got %d, handle %s, error '%s'", status, phrase, rc,
                 g ? "set" : "NULL", err.msg);
    skv_gguf_close(g);
    free(copy);
    return ok;
}

/* Finishes g (and frees it), then checks the refusal. */
static int gb_refused(gguf_b *g, int status, const char *phrase, char *why, size_t whycap)
{
    size_t len;
    uint8_t *f = gb_finish(g, &len, NULL);
    int ok = refused(f, len, status, phrase, why, whycap);
    free(f);
    gb_free(g);
    return ok;
}

#define CHECK_REFUSED(bytes, len, status, phrase)                                          \
    do {                                                                                   \
        char why_[768];                                                                    \
        CHECK_MSG(refused(bytes, len, status, phrase, why_, sizeof why_), "%s", why_);     \
    } while (0)

#define CHECK_GB_REFUSED(g, status, phrase)                                                \
    do {                                                                                   \
        char why_[768];                                                                    \
        CHECK_MSG(gb_refused(g, status, phrase, why_, sizeof why_), "%s", why_);           \
    } while (0)

/* ---- accepting valid files --------------------------------------------------- */

static void build_all_scalars(gguf_b *g)
{
    static const char *const strs[] = {"x", "", "yz"};
    buf *b;
    b_u8(gb_key(g, "t.u8", SKV_GGUF_U8), 200);
    b_u8(gb_key(g, "t.i8", SKV_GGUF_I8), (uint8_t)(int8_t)-7);
    b_u16(gb_key(g, "t.u16", SKV_GGUF_U16), 60000);
    b_u16(gb_key(g, "t.i16", SKV_GGUF_I16), (uint16_t)(int16_t)-30000);
    gb_u32(g, "t.u32", 4000000000u);
    gb_i32(g, "t.i32", -2000000000);
    gb_f32(g, "t.f32", 1.5f);
    gb_bool(g, "t.bool", 1);
    gb_bool(g, "t.bool0", 0);
    gb_str(g, "t.str", "hello");
    gb_str(g, "t.empty", "");
    b_u64(gb_key(g, "t.u64", SKV_GGUF_U64), ((uint64_t)1 << 40) + 3);
    b_u64(gb_key(g, "t.u64big", SKV_GGUF_U64), ((uint64_t)1 << 63) + 5);
    b_u64(gb_key(g, "t.i64", SKV_GGUF_I64), (uint64_t)-((int64_t)1 << 40));
    b_f64(gb_key(g, "t.f64", SKV_GGUF_F64), -2.25);
    gb_arr_str(g, "a.str", 3, strs);
    b = gb_arr(g, "a.f32", SKV_GGUF_F32, 3);
    b_f32(b, 1.0f), b_f32(b, 2.5f), b_f32(b, -3.0f);
    b = gb_arr(g, "a.i32", SKV_GGUF_I32, 2);
    b_u32(b, (uint32_t)-1), b_u32(b, 7);
    b = gb_arr(g, "a.u8", SKV_GGUF_U8, 2);
    b_u8(b, 1), b_u8(b, 255);
    b = gb_arr(g, "a.u32big", SKV_GGUF_U32, 2);
    b_u32(b, 1), b_u32(b, 3000000000u);
    gb_arr(g, "a.empty", SKV_GGUF_U8, 0);
    b = gb_arr(g, "a.bool", SKV_GGUF_BOOL, 2);
    b_u8(b, 0), b_u8(b, 1);
    b_u64(gb_arr(g, "a.u64", SKV_GGUF_U64, 1), 5);
    b_f64(gb_arr(g, "a.f64", SKV_GGUF_F64, 1), 1.0);
    b = gb_arr(g, "a.i16", SKV_GGUF_I16, 2);
    b_u16(b, (uint16_t)(int16_t)-5), b_u16(b, 9);
}

static int64_t get_i(const skv_gguf *g, const char *key, int *rc)
{
    int64_t v = 0x5a5a;
    *rc = skv_gguf_get_int(g, key, &v);
    return v;
}

static void metadata_of_every_type_is_read(void)
{
    gguf_b b;
    size_t len;
    uint8_t *f;
    skv_gguf *g = NULL;
    skv_err err = {0};
    int rc;
    gb_init(&b, 3);
    build_all_scalars(&b);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    rc = skv_gguf_open_mem(f, len, &g, &err);
    if (rc != SKV_OK) free(f);
    CHECK_MSG(rc == SKV_OK, "open: %d %s", rc, err.msg);
    {
        static const struct { const char *key; int64_t v; } ints[] = {
            {"t.u8", 200}, {"t.i8", -7}, {"t.u16", 60000}, {"t.i16", -30000}, {"t.u32", 4000000000ll},
            {"t.i32", -2000000000}, {"t.bool", 1}, {"t.bool0", 0}, {"t.u64", ((int64_t)1 << 40) + 3},
            {"t.i64", -((int64_t)1 << 40)},
        };
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
            int64_t v = get_i(g, ints[i].key, &rc);
            CHECK_MSG(rc == SKV_OK && v == ints[i].v, "%s: rc %d value %lld", ints[i].key, rc, (long long)v);
        }
    }
    /* not integers, or not representable: FORMAT and out untouched */
    static const char *const not_int[] = {"t.u64big", "t.f32", "t.f64", "t.str", "a.i32"};
    for (size_t i = 0; i < sizeof not_int / sizeof not_int[0]; i++) {
        int64_t v = get_i(g, not_int[i], &rc);
        CHECK_MSG(rc == SKV_ERR_FORMAT && v == 0x5a5a, "%s: rc %d", not_int[i], rc);
    }
    int64_t v = get_i(g, "t.absent", &rc);
    CHECK(rc == SKV_ERR_RANGE && v == 0x5a5a);
    CHECK(skv_gguf_has(g, "t.u8") && !skv_gguf_has(g, "t.absent") && !skv_gguf_has(g, "t.u"));
    {
        double d = 99;
        CHECK(skv_gguf_get_float(g, "t.f32", &d) == SKV_OK && d == 1.5);
        CHECK(skv_gguf_get_float(g, "t.f64", &d) == SKV_OK && d == -2.25);
        CHECK(skv_gguf_get_float(g, "t.u16", &d) == SKV_OK && d == 60000.0);
        d = 99;
        CHECK(skv_gguf_get_float(g, "t.str", &d) == SKV_ERR_FORMAT && d == 99);
        CHECK(skv_gguf_get_float(g, "t.u64big", &d) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_get_float(g, "nope", &d) == SKV_ERR_RANGE && d == 99);
    }
    {
        int bv = 7;
        CHECK(skv_gguf_get_bool(g, "t.bool", &bv) == SKV_OK && bv == 1);
        CHECK(skv_gguf_get_bool(g, "t.bool0", &bv) == SKV_OK && bv == 0);
        CHECK(skv_gguf_get_bool(g, "t.u8", &bv) == SKV_OK && bv == 1);
        CHECK(skv_gguf_get_bool(g, "t.str", &bv) == SKV_ERR_FORMAT);
    }
    {
        skv_gguf_str s = {NULL, 77};
        CHECK(skv_gguf_get_str(g, "t.str", &s) == SKV_OK && s.len == 5 && !memcmp(s.ptr, "hello", 5));
        CHECK((const uint8_t *)s.ptr > f && (const uint8_t *)s.ptr + s.len <= f + len);
        CHECK(skv_gguf_get_str(g, "t.empty", &s) == SKV_OK && s.len == 0);
        CHECK(skv_gguf_get_str(g, "t.u8", &s) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_get_str(g, "a.str", &s) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_get_str(g, "x", &s) == SKV_ERR_RANGE);
    }
    {
        uint32_t et = 99;
        size_t n = 99;
        skv_gguf_str s[3];
        float fv[3];
        int32_t iv[2];
        CHECK(skv_gguf_get_arr(g, "a.str", &et, &n) == SKV_OK && et == SKV_GGUF_STRING && n == 3);
        CHECK(skv_gguf_get_arr(g, "a.empty", &et, &n) == SKV_OK && et == SKV_GGUF_U8 && n == 0);
        CHECK(skv_gguf_get_arr(g, "t.u8", &et, &n) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_get_arr(g, "zz", &et, &n) == SKV_ERR_RANGE);
        CHECK(skv_gguf_arr_strings(g, "a.str", s, 3) == SKV_OK);
        CHECK(s[0].len == 1 && s[0].ptr[0] == 'x' && s[1].len == 0 && s[2].len == 2 && !memcmp(s[2].ptr, "yz", 2));
        CHECK(skv_gguf_arr_strings(g, "a.str", s, 2) == SKV_ERR_FORMAT);  /* count must match */
        CHECK(skv_gguf_arr_strings(g, "a.f32", s, 3) == SKV_ERR_FORMAT);  /* type must match */
        CHECK(skv_gguf_arr_f32(g, "a.f32", fv, 3) == SKV_OK && fv[0] == 1.0f && fv[1] == 2.5f && fv[2] == -3.0f);
        CHECK(skv_gguf_arr_f32(g, "a.i32", fv, 2) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_arr_f32(g, "a.f64", fv, 1) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_arr_i32(g, "a.i32", iv, 2) == SKV_OK && iv[0] == -1 && iv[1] == 7);
        CHECK(skv_gguf_arr_i32(g, "a.u8", iv, 2) == SKV_OK && iv[0] == 1 && iv[1] == 255);
        CHECK(skv_gguf_arr_i32(g, "a.i16", iv, 2) == SKV_OK && iv[0] == -5 && iv[1] == 9);
        CHECK(skv_gguf_arr_i32(g, "a.bool", iv, 2) == SKV_OK && iv[0] == 0 && iv[1] == 1);
        CHECK(skv_gguf_arr_i32(g, "a.u64", iv, 1) == SKV_OK && iv[0] == 5);
        CHECK(skv_gguf_arr_i32(g, "a.u32big", iv, 2) == SKV_ERR_FORMAT); /* 3e9 does not fit */
        CHECK(skv_gguf_arr_i32(g, "a.f32", iv, 3) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_arr_i32(g, "a.str", iv, 3) == SKV_ERR_FORMAT);
        CHECK(skv_gguf_arr_i32(g, "a.i32", iv, 1) == SKV_ERR_FORMAT);
    }
    CHECK(skv_gguf_n_tensors(g) == 0 && skv_gguf_tensor_at(g, 0) == NULL && skv_gguf_find_tensor(g, "x") == NULL);
    CHECK(skv_gguf_version(g) == 3 && skv_gguf_file_size(g) == len);
    skv_gguf_close(g);
    free(f);
}

static void type_traits_table(void)
{
    CHECK(skv_ggml_blck_size(SKV_GGML_F32) == 1 && skv_ggml_type_size(SKV_GGML_F32) == 4);
    CHECK(skv_ggml_blck_size(SKV_GGML_F16) == 1 && skv_ggml_type_size(SKV_GGML_F16) == 2);
    CHECK(skv_ggml_blck_size(SKV_GGML_Q8_0) == 32 && skv_ggml_type_size(SKV_GGML_Q8_0) == 34);
    CHECK(skv_ggml_blck_size(SKV_GGML_Q4_0) == 32 && skv_ggml_type_size(SKV_GGML_Q4_0) == 18);
    CHECK(skv_ggml_blck_size(SKV_GGML_Q4_K) == 256 && skv_ggml_type_size(SKV_GGML_Q4_K) == 144);
    CHECK(skv_ggml_blck_size(SKV_GGML_Q6_K) == 256 && skv_ggml_type_size(SKV_GGML_Q6_K) == 210);
    CHECK(skv_ggml_blck_size(SKV_GGML_BF16) == 1 && skv_ggml_type_size(SKV_GGML_BF16) == 2);
    CHECK(!strcmp(skv_ggml_type_name(SKV_GGML_Q4_K), "q4_k") && !strcmp(skv_ggml_type_name(SKV_GGML_F16), "f16"));
    /* 4, 5 (removed Q4_2/Q4_3), 31..33 and 36..38 (removed repacked types) and out-of-range types are unknown */
    static const uint32_t unknown[] = {4, 5, 31, 33, 36, 38, 43, 1000, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(skv_ggml_blck_size(unknown[i]) == 0 && skv_ggml_type_size(unknown[i]) == 0);
        CHECK(!strcmp(skv_ggml_type_name(unknown[i]), "unknown"));
    }
}

typedef struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    size_t nbytes;
} tspec;

static const tspec tensor_specs[] = {
    {"w.f32", 2, {3, 2}, SKV_GGML_F32, 24},
    {"w.f16", 1, {8}, SKV_GGML_F16, 16},
    {"w.q8_0", 2, {32, 2}, SKV_GGML_Q8_0, 68},
    {"w.q4_0", 1, {64}, SKV_GGML_Q4_0, 36},
    {"w.q4_k", 1, {256}, SKV_GGML_Q4_K, 144},
    {"w.bf16", 4, {2, 1, 1, 3}, SKV_GGML_BF16, 12},
    {"w.i32", 3, {5, 1, 2}, SKV_GGML_I32, 40},
    {"", 1, {1}, SKV_GGML_I8, 1}, /* an empty name is legal */
};
#define N_TSPEC (sizeof tensor_specs / sizeof tensor_specs[0])

/* A file holding every tensor of tensor_specs (data byte j of tensor i = 17*i + j). */
static uint8_t *build_tensor_file(uint32_t version, size_t align, int align_key_type, size_t *len,
                                  size_t *data_start, uint64_t *offs)
{
    gguf_b b;
    uint8_t *f;
    gb_init(&b, version);
    b.align = align;
    gb_str(&b, "general.name", "tensors");
    if (align_key_type >= 0) {
        buf *v = gb_key(&b, "general.alignment", (uint32_t)align_key_type);
        switch (align_key_type) {
        case SKV_GGUF_U8: b_u8(v, (uint8_t)align); break;
        case SKV_GGUF_U16: b_u16(v, (uint16_t)align); break;
        case SKV_GGUF_I64: case SKV_GGUF_U64: b_u64(v, align); break;
        default: b_u32(v, (uint32_t)align); break;
        }
    }
    for (size_t i = 0; i < N_TSPEC; i++) {
        const tspec *t = &tensor_specs[i];
        uint8_t data[256];
        for (size_t j = 0; j < t->nbytes; j++) data[j] = (uint8_t)(17 * i + j);
        offs[i] = gb_tensor(&b, t->name, t->n_dims, t->ne, t->type, data, t->nbytes);
    }
    f = gb_finish(&b, len, data_start);
    gb_free(&b);
    return f;
}

/* Checks every tensor of a build_tensor_file() file against tensor_specs. */
static int tensors_match(const skv_gguf *g, const uint8_t *f, size_t data_start, const uint64_t *offs,
                         size_t align, char *why, size_t cap)
{
    if (skv_gguf_n_tensors(g) != N_TSPEC) return snprintf(why, cap, "n_tensors %zu", skv_gguf_n_tensors(g)), 0;
    for (size_t i = 0; i < N_TSPEC; i++) {
        const tspec *s = &tensor_specs[i];
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        uint64_t nel = 1;
        if (!t || skv_gguf_find_tensor(g, s->name) != t) return snprintf(why, cap, "tensor %zu lookup", i), 0;
        for (uint32_t d = 0; d < 4; d++) {
            uint64_t want = d < s->n_dims ? s->ne[d] : 1;
            if (t->ne[d] != want) return snprintf(why, cap, "tensor %zu ne[%u]", i, d), 0;
            nel *= want;
        }
        if (t->n_dims != s->n_dims || t->type != s->type || t->nbytes != s->nbytes || t->n_elements != nel ||
            t->name.len != strlen(s->name) || memcmp(t->name.ptr, s->name, t->name.len))
            return snprintf(why, cap, "tensor %zu header fields", i), 0;
        if (t->data != f + data_start + offs[i] || (size_t)(t->data - f) % align)
            return snprintf(why, cap, "tensor %zu at file offset %td", i, t->data - f), 0;
        for (size_t j = 0; j < s->nbytes; j++)
            if (t->data[j] != (uint8_t)(17 * i + j)) return snprintf(why, cap, "tensor %zu byte %zu", i, j), 0;
    }
    if (skv_gguf_tensor_at(g, N_TSPEC) || skv_gguf_find_tensor(g, "w.f3") || skv_gguf_find_tensor(g, "w.f32x"))
        return snprintf(why, cap, "lookup past the table"), 0;
    return 1;
}

static void tensors_v2_v3_and_alignment(void)
{
    static const struct { uint32_t version; size_t align; int key_type; } cases[] = {
        {3, 32, -1}, {2, 32, -1}, {3, 32, SKV_GGUF_U32}, {3, 64, SKV_GGUF_U32}, {2, 128, SKV_GGUF_U64},
        {3, 16, SKV_GGUF_U8}, {3, 8, SKV_GGUF_I64}, {3, 4096, SKV_GGUF_U16}, {3, 65536, SKV_GGUF_U32},
        {3, 1, SKV_GGUF_U32},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len, ds;
        uint64_t offs[N_TSPEC];
        char why[256] = "";
        skv_err err = {0};
        skv_gguf *g = NULL;
        uint8_t *f = build_tensor_file(cases[c].version, cases[c].align, cases[c].key_type, &len, &ds, offs);
        int rc = skv_gguf_open_mem(f, len, &g, &err), ok = 0;
        if (rc == SKV_OK)
            ok = skv_gguf_version(g) == cases[c].version && ds % cases[c].align == 0 &&
                 tensors_match(g, f, ds, offs, cases[c].align, why, sizeof why);
        skv_gguf_close(g);
        free(f);
        CHECK_MSG(rc == SKV_OK, "case %zu: open failed: %s", c, err.msg);
        CHECK_MSG(ok, "case %zu (v%u, align %zu): %s", c, cases[c].version, cases[c].align, why);
    }
}

static void tiny_files_and_paths(void)
{
    gguf_b b;
    size_t len;
    uint8_t *f;
    skv_gguf *g = NULL;
    char path[600];
    skv_err err = {0};
    FILE *fp;
    int rc;
    /* header only: no metadata, no tensors */
    gb_init(&b, 3);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    rc = skv_gguf_open_mem(f, len, &g, &err);
    CHECK_MSG(rc == SKV_OK && len == 24 && skv_gguf_n_tensors(g) == 0, "rc %d %s", rc, err.msg);
    skv_gguf_close(g);
    /* the same through a file */
    snprintf(path, sizeof path, "%s/tiny.gguf", tmpdir);
    CHECK((fp = fopen(path, "wb")) != NULL);
    CHECK(fwrite(f, 1, len, fp) == len);
    fclose(fp);
    free(f);
    rc = skv_gguf_open(path, &g, &err);
    CHECK_MSG(rc == SKV_OK && skv_gguf_file_size(g) == 24, "rc %d %s", rc, err.msg);
    skv_gguf_close(g);
    unlink(path);
    g = (skv_gguf *)&b; /* must be reset to NULL on failure */
    rc = skv_gguf_open(path, &g, &err);
    CHECK(rc == SKV_ERR_IO && g == NULL && strstr(err.msg, "cannot open"));
    /* empty input and NULL buffer */
    CHECK_REFUSED((const uint8_t *)"", 0, SKV_ERR_FORMAT, "bad magic");
    CHECK(skv_gguf_open_mem(NULL, 0, &g, &err) == SKV_ERR_FORMAT && g == NULL);
    CHECK(skv_gguf_open_mem(NULL, 5, &g, &err) == SKV_ERR_INVALID_ARG && g == NULL);
    /* a NULL error buffer is allowed */
    CHECK(skv_gguf_open_mem("GGUX", 4, &g, NULL) == SKV_ERR_FORMAT && g == NULL);
    skv_gguf_close(NULL);
}

/* ---- refusing malformed files -------------------------------------------------- */

static void refuses_bad_magic_and_versions(void)
{
    gguf_b b;
    size_t len;
    uint8_t *f;
    gb_init(&b, 3);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    f[3] = 'X';
    CHECK_REFUSED(f, len, SKV_ERR_FORMAT, "bad magic");
    memcpy(f, "gguf", 4);
    CHECK_REFUSED(f, len, SKV_ERR_FORMAT, "bad magic");
    CHECK_REFUSED(f, 3, SKV_ERR_FORMAT, "bad magic");
    memcpy(f, "GGUF", 4);
    static const uint32_t bad[] = {0, 1, 4, 5, 0x03000000u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char phrase[64];
        f[4] = (uint8_t)bad[i], f[5] = (uint8_t)(bad[i] >> 8), f[6] = (uint8_t)(bad[i] >> 16), f[7] = (uint8_t)(bad[i] >> 24);
        snprintf(phrase, sizeof phrase, "GGUF version %u is not supported", bad[i]);
        CHECK_REFUSED(f, len, SKV_ERR_UNSUPPORTED, phrase);
    }
    free(f);
}

/* A small valid file: two metadata entries, two tensors, data ending at EOF. */
static uint8_t *build_small_valid(size_t *len)
{
    gguf_b b;
    uint8_t *f;
    static const char *const toks[] = {"a", "bc"};
    float v[3] = {1, 2, 3};
    uint8_t h[16] = {0};
    gb_init(&b, 3);
    gb_str(&b, "general.architecture", "llama");
    gb_arr_str(&b, "tokenizer.ggml.tokens", 2, toks);
    gb_u32(&b, "general.alignment", 32);
    gb_tensor(&b, "a", 1, (const uint64_t[]){3}, SKV_GGML_F32, v, sizeof v);
    gb_tensor(&b, "b", 2, (const uint64_t[]){4, 2}, SKV_GGML_F16, h, sizeof h);
    f = gb_finish(&b, len, NULL);
    gb_free(&b);
    return f;
}

static void refuses_every_truncation(void)
{
    size_t len;
    uint8_t *f = build_small_valid(&len);
    skv_gguf *g = NULL;
    skv_err err = {0};
    int rc = skv_gguf_open_mem(f, len, &g, &err);
    skv_gguf_close(g);
    if (rc != SKV_OK) free(f);
    CHECK_MSG(rc == SKV_OK, "the untruncated file must load: %s", err.msg);
    for (size_t k = 0; k < len; k++) {
        static const char *const phrases[] = {"truncated", "bad magic", "past the end", "exceeds", "cannot fit",
                                              "impossible for a"};
        uint8_t *copy = dup_exact(f, k);
        int known = 0;
        err.msg[0] = 0;
        g = (skv_gguf *)&k;
        rc = skv_gguf_open_mem(copy, k, &g, &err);
        for (size_t i = 0; i < sizeof phrases / sizeof phrases[0]; i++) known |= strstr(err.msg, phrases[i]) != NULL;
        if (rc == SKV_OK) skv_gguf_close(g);
        free(copy);
        if (rc != SKV_ERR_FORMAT || g != NULL || !known) free(f);
        CHECK_MSG(rc == SKV_ERR_FORMAT && g == NULL, "prefix of %zu/%zu bytes: rc %d (%s)", k, len, rc, err.msg);
        CHECK_MSG(known, "prefix of %zu bytes: unexpected message '%s'", k, err.msg);
    }
    free(f);
}

static void refuses_absurd_counts(void)
{
    static const uint64_t counts[] = {(uint64_t)1 << 63, (uint64_t)1 << 40, UINT64_MAX, (uint64_t)1 << 21, 1000};
    size_t len;
    uint8_t *f = build_small_valid(&len);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        for (int field = 0; field < 2; field++) { /* 0: n_tensors (offset 8), 1: n_kv (offset 16) */
            uint8_t *c = dup_exact(f, len);
            for (int j = 0; j < 8; j++) c[8 + 8 * field + j] = (uint8_t)(counts[i] >> (8 * j));
            char why[768];
            int ok = refused(c, len, SKV_ERR_FORMAT, "impossible for a", why, sizeof why);
            free(c);
            if (!ok) free(f);
            CHECK_MSG(ok, "count %llu in field %d: %s", (unsigned long long)counts[i], field, why);
        }
    }
    /* a count that passes the size bound but exceeds the entries present */
    f[16] = 4;
    CHECK_REFUSED(f, len, SKV_ERR_FORMAT, "");
    free(f);
}

static void refuses_bad_strings(void)
{
    static const uint64_t lens[] = {UINT64_MAX, UINT64_MAX - 7, (uint64_t)1 << 63, (uint64_t)1 << 40, 1000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        gguf_b b;
        buf *v;
        /* value string longer than the file */
        gb_init(&b, 3);
        v = gb_key(&b, "k", SKV_GGUF_STRING);
        b_u64(v, lens[i]);
        b_put(v, "abcdefgh", 8);
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "exceeds the");
        /* key length past the end */
        gb_init(&b, 3);
        b_u64(&b.kv, lens[i]);
        b_put(&b.kv, "abcdefghijkl", 12);
        b.n_kv = 1;
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "exceeds the");
        /* tensor name length past the end */
        gb_init(&b, 3);
        b_u64(&b.ti, lens[i]);
        b_zeros(&b.ti, 40);
        b.n_tensors = 1;
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "exceeds the");
        /* one string of an array */
        gb_init(&b, 3);
        v = gb_arr(&b, "arr", SKV_GGUF_STRING, 2);
        b_str(v, "ok");
        b_u64(v, lens[i]);
        b_zeros(v, 16);
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "exceeds the");
    }
}

static void refuses_huge_arrays(void)
{
    static const uint32_t types[] = {SKV_GGUF_U8, SKV_GGUF_U64, SKV_GGUF_F32, SKV_GGUF_BOOL, SKV_GGUF_STRING};
    static const uint64_t counts[] = {(uint64_t)1 << 62, UINT64_MAX, ((uint64_t)1 << 61) + 1, 100};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
            gguf_b b;
            gb_init(&b, 3);
            b_zeros(gb_arr(&b, "arr", types[t], counts[i]), 64);
            CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, types[t] == SKV_GGUF_STRING ? "" : "exceeds the file");
        }
    {
        gguf_b b; /* 2^62 strings: refused before the first string is read */
        gb_init(&b, 3);
        b_zeros(gb_arr(&b, "arr", SKV_GGUF_STRING, (uint64_t)1 << 62), 64);
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "cannot fit in the file");
    }
}

static void refuses_bad_value_types(void)
{
    static const uint32_t bad[] = {13, 14, 255, 0x80000000u, 0xFFFFFFFFu};
    gguf_b b;
    char phrase[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gb_init(&b, 3);
        b_zeros(gb_key(&b, "k", bad[i]), 16);
        snprintf(phrase, sizeof phrase, "unknown value type %u", bad[i]);
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, phrase);
        gb_init(&b, 3);
        b_zeros(gb_arr(&b, "k", bad[i], 1), 16);
        snprintf(phrase, sizeof phrase, "arrays of type %u are not supported", bad[i]);
        CHECK_GB_REFUSED(&b, SKV_ERR_UNSUPPORTED, phrase);
    }
    /* nested arrays */
    gb_init(&b, 3);
    {
        buf *v = gb_arr(&b, "nested", SKV_GGUF_ARRAY, 1);
        b_u32(v, SKV_GGUF_U8);
        b_u64(v, 1);
        b_u8(v, 3);
    }
    CHECK_GB_REFUSED(&b, SKV_ERR_UNSUPPORTED, "arrays of type 9 are not supported");
    /* bool values other than 0/1 */
    static const uint8_t bools[] = {2, 0x80, 0xFF};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        gb_init(&b, 3);
        gb_bool(&b, "flag", bools[i]);
        snprintf(phrase, sizeof phrase, "bool value %u", bools[i]);
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, phrase);
    }
    /* a scalar cut short by the end of the file */
    gb_init(&b, 3);
    b_u8(gb_key(&b, "k", SKV_GGUF_U64), 1);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "truncated while reading metadata 'k'");
}

static void refuses_duplicates(void)
{
    gguf_b b;
    float v[2] = {0};
    gb_init(&b, 3);
    gb_str(&b, "general.name", "a");
    gb_u32(&b, "x", 1);
    gb_u32(&b, "general.name", 2);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "duplicate key 'general.name'");
    /* keys differing only after an embedded NUL are distinct byte strings */
    gb_init(&b, 3);
    b_strn(&b.kv, "k\0a", 3), b_u32(&b.kv, SKV_GGUF_U8), b_u8(&b.kv, 1);
    b_strn(&b.kv, "k\0b", 3), b_u32(&b.kv, SKV_GGUF_U8), b_u8(&b.kv, 1);
    b.n_kv = 2;
    {
        size_t len;
        uint8_t *f = gb_finish(&b, &len, NULL);
        skv_gguf *g = NULL;
        int rc = skv_gguf_open_mem(f, len, &g, NULL);
        skv_gguf_close(g);
        free(f);
        gb_free(&b);
        CHECK(rc == SKV_OK);
    }
    gb_init(&b, 3);
    gb_tensor(&b, "t", 1, (const uint64_t[]){2}, SKV_GGML_F32, v, sizeof v);
    gb_tensor(&b, "u", 1, (const uint64_t[]){2}, SKV_GGML_F32, v, sizeof v);
    gb_tensor(&b, "t", 1, (const uint64_t[]){2}, SKV_GGML_F32, v, sizeof v);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "duplicate tensor name 't'");
}

/* One tensor with the given info; data = 64 zero bytes at offset 0 unless off says otherwise. */
static int one_tensor_refused(uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off, size_t data_bytes,
                              int status, const char *phrase, char *why, size_t cap)
{
    gguf_b b;
    gb_init(&b, 3);
    gb_tensor_info(&b, "t", n_dims, ne, type, off);
    b_zeros(&b.data, data_bytes);
    return gb_refused(&b, status, phrase, why, cap);
}

#define CHECK_TENSOR_REFUSED(nd, ne, type, off, bytes, status, phrase)                             \
    do {                                                                                           \
        char why_[768];                                                                            \
        CHECK_MSG(one_tensor_refused(nd, ne, type, off, bytes, status, phrase, why_, sizeof why_), \
                  "%s", why_);                                                                     \
    } while (0)

static void refuses_bad_tensor_infos(void)
{
    const uint64_t ne4[5] = {2, 2, 2, 2, 2};
    CHECK_TENSOR_REFUSED(0, ne4, SKV_GGML_F32, 0, 64, SKV_ERR_FORMAT, "0 dimensions (1..4 allowed)");
    CHECK_TENSOR_REFUSED(5, ne4, SKV_GGML_F32, 0, 64, SKV_ERR_FORMAT, "5 dimensions (1..4 allowed)");
    {   /* n_dims near 2^32 must not drive a loop */
        gguf_b b;
        gb_init(&b, 3);
        b_str(&b.ti, "t");
        b_u32(&b.ti, 0xFFFFFFFFu);
        b_zeros(&b.ti, 64);
        b.n_tensors = 1;
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "4294967295 dimensions");
    }
    static const uint64_t dims[][4] = {
        {0}, {4, 0}, {(uint64_t)1 << 50}, {(uint64_t)1 << 41}, {UINT64_MAX},
        {(uint64_t)1 << 30, (uint64_t)1 << 30},              /* product 2^60 */
        {(uint64_t)1 << 32, (uint64_t)1 << 32},              /* product wraps to 0 in u64 */
        {(uint64_t)1 << 16, (uint64_t)1 << 16, (uint64_t)1 << 16, (uint64_t)1 << 16}, /* wraps to 0 */
        {(uint64_t)1 << 25, (uint64_t)1 << 26},              /* each legal, product 2^51 */
        {(uint64_t)1 << 40, (uint64_t)1 << 11},              /* 2^51 */
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        uint32_t nd = 1;
        while (nd < 4 && dims[i][nd]) nd++;
        if (i == 1) nd = 2;
        CHECK_TENSOR_REFUSED(nd, dims[i], SKV_GGML_F32, 0, 64, SKV_ERR_FORMAT, "absurd dimension");
    }
    {   /* the largest legal product (2^50 elements) is accepted structurally, then refused by extent */
        const uint64_t ok[2] = {(uint64_t)1 << 40, (uint64_t)1 << 10};
        CHECK_TENSOR_REFUSED(2, ok, SKV_GGML_I8, 0, 64, SKV_ERR_FORMAT, "past the end of the file");
    }
    static const uint32_t bad_types[] = {4, 5, 31, 37, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        char phrase[64];
        snprintf(phrase, sizeof phrase, "unknown tensor type %u", bad_types[i]);
        CHECK_TENSOR_REFUSED(1, ne4, bad_types[i], 0, 64, SKV_ERR_UNSUPPORTED, phrase);
    }
    {
        const uint64_t r33[2] = {33, 1}, r32[1] = {32}, r255[1] = {255};
        CHECK_TENSOR_REFUSED(2, r33, SKV_GGML_Q4_0, 0, 64, SKV_ERR_FORMAT,
                             "row length 33 is not a multiple of the q4_0 block size 32");
        CHECK_TENSOR_REFUSED(1, r32, SKV_GGML_Q4_K, 0, 256, SKV_ERR_FORMAT, "q4_k block size 256");
        CHECK_TENSOR_REFUSED(1, r255, SKV_GGML_Q8_0, 0, 512, SKV_ERR_FORMAT, "q8_0 block size 32");
    }
}

static void refuses_bad_offsets(void)
{
    const uint64_t ne[1] = {4}; /* 16 bytes of f32 */
    static const uint64_t misaligned[] = {4, 16, 31, 33, 0x8000000000000001ull};
    for (size_t i = 0; i < sizeof misaligned / sizeof misaligned[0]; i++)
        CHECK_TENSOR_REFUSED(1, ne, SKV_GGML_F32, misaligned[i], 128, SKV_ERR_FORMAT, "not aligned to 32");
    static const uint64_t past[] = {64, 96, 4096, (uint64_t)1 << 40, UINT64_MAX - 31, (uint64_t)1 << 63};
    for (size_t i = 0; i < sizeof past / sizeof past[0]; i++)
        CHECK_TENSOR_REFUSED(1, ne, SKV_GGML_F32, past[i], 64, SKV_ERR_FORMAT, "past the end of the file");
    /* extent: offset fits but the tensor runs over the end by one byte */
    CHECK_TENSOR_REFUSED(1, ne, SKV_GGML_F32, 32, 47, SKV_ERR_FORMAT, "past the end of the file");
    /* tensor infos present but the data section missing entirely */
    CHECK_TENSOR_REFUSED(1, ne, SKV_GGML_F32, 0, 0, SKV_ERR_FORMAT, "truncated before the tensor data");
    /* the same tensors just inside the file are accepted */
    {
        gguf_b b;
        size_t len;
        uint8_t *f;
        skv_gguf *g = NULL;
        int rc;
        gb_init(&b, 3);
        gb_tensor_info(&b, "t", 1, ne, SKV_GGML_F32, 0);
        gb_tensor_info(&b, "next", 1, ne, SKV_GGML_F32, 32); /* adjacent: ends where "t" begins */
        b_zeros(&b.data, 48);
        f = gb_finish(&b, &len, NULL);
        gb_free(&b);
        rc = skv_gguf_open_mem(f, len, &g, NULL);
        skv_gguf_close(g);
        free(f);
        CHECK(rc == SKV_OK);
    }
    /* tensors sharing bytes are refused: a small file could otherwise declare any number
     * of layers over the same data (a model, its fingerprint and each forward pass would
     * cost far more than the file's size) */
    static const uint64_t second[] = {0, 32};
    for (int k = 0; k < 2; k++) {
        gguf_b b;
        char why[512] = "";
        const uint64_t big[1] = {16};
        gb_init(&b, 3);
        gb_tensor_info(&b, "t", 1, big, SKV_GGML_F32, 0); /* [0, 64) */
        gb_tensor_info(&b, "alias", 1, ne, SKV_GGML_F32, second[k]);
        b_zeros(&b.data, 96);
        CHECK_MSG(gb_refused(&b, SKV_ERR_FORMAT, "share data bytes", why, sizeof why), "offset %llu: %s",
                  (unsigned long long)second[k], why);
    }
}

/* Finding a tensor or key by name takes O(log n): 2^16 lookups in a file of 2^16 tensors
 * took seconds with a linear search (a model load looks up every layer's tensors). */
static void lookups_are_logarithmic(void)
{
    enum { N = 1 << 16 };
    const uint64_t ne[1] = {8};
    gguf_b b;
    char name[32];
    size_t len;
    skv_gguf *g = NULL;
    gb_init(&b, 3);
    gb_u32(&b, "general.alignment", 32);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        gb_tensor_info(&b, name, 1, ne, SKV_GGML_F32, (uint64_t)i * 32);
    }
    b_zeros(&b.data, (size_t)N * 32);
    uint8_t *f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    int rc = skv_gguf_open_mem(f, len, &g, NULL), found = 0;
    /* CPU seconds, not wall time, and a bound far from both sides: the linear scan this
     * replaced took ~60 s for these lookups, the binary search takes ~0.05 s. */
    clock_t t0 = clock();
    for (int i = 0; rc == SKV_OK && i < N; i++) {
        snprintf(name, sizeof name, "blk.%d.w", (i * 7919) % N);
        const skv_gguf_tensor *t = skv_gguf_find_tensor(g, name);
        found += t && t->name.len == strlen(name) && !memcmp(t->name.ptr, name, t->name.len);
        found -= skv_gguf_find_tensor(g, "blk.x.w") != NULL || skv_gguf_has(g, name);
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    int64_t a = 0;
    if (rc == SKV_OK) skv_gguf_get_int(g, "general.alignment", &a);
    skv_gguf_close(g);
    free(f);
    CHECK_EQ_INT(rc, SKV_OK);
    CHECK_EQ_INT(found, N);
    CHECK_EQ_INT(a, 32);
    CHECK_MSG(secs < 10.0, "%d lookups took %.2f CPU seconds (a linear scan?)", N, secs);
}

static void refuses_bad_alignment(void)
{
    static const uint64_t bad[] = {0, 3, 6, 48, 1u << 17, 1u << 20, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gguf_b b;
        gb_init(&b, 3);
        gb_u32(&b, "general.alignment", (uint32_t)bad[i]);
        CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "general.alignment must be a power of two");
    }
    gguf_b b;
    gb_init(&b, 3);
    gb_i32(&b, "general.alignment", -32);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "general.alignment");
    gb_init(&b, 3);
    b_u64(gb_key(&b, "general.alignment", SKV_GGUF_U64), ((uint64_t)1 << 63) + 32);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "general.alignment");
    gb_init(&b, 3);
    gb_str(&b, "general.alignment", "32");
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "general.alignment");
    gb_init(&b, 3);
    gb_f32(&b, "general.alignment", 32.0f);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "general.alignment");
    /* alignment 64 declared, tensor at offset 32: misaligned for this file */
    gb_init(&b, 3);
    gb_u32(&b, "general.alignment", 64);
    b.align = 64;
    gb_tensor_info(&b, "t", 1, (const uint64_t[]){4}, SKV_GGML_F32, 32);
    b_zeros(&b.data, 128);
    CHECK_GB_REFUSED(&b, SKV_ERR_FORMAT, "not aligned to 64");
}

/* ---- tiny llama models -------------------------------------------------------- */

typedef struct {
    const char *arch;         /* general.architecture; NULL: key absent */
    int n_layer, D, F, n_head, n_head_kv, V;
    int n_tokens;             /* entries in tokenizer.ggml.tokens (0: V) */
    int n_scores, n_types;    /* 0: V; -1: key absent */
    uint32_t wtype;           /* type of the 2-D weights */
    int untied;               /* write output.weight */
    const char *skip;         /* a tensor or metadata key left out */
    const char *reshape;      /* a tensor written one row (1-D: one element) too large */
    const char *retype;       /* a tensor written with type retype_to */
    uint32_t retype_to;
    const char *tok_model;    /* tokenizer.ggml.model (NULL: "llama") */
    int dup_token;            /* token 5 gets the text of token 4 */
    uint32_t align;           /* general.alignment written and used (0: key absent, 32) */
    void (*extra)(gguf_b *);  /* more metadata */
} lspec;

static lspec lspec_default(void)
{
    lspec s;
    memset(&s, 0, sizeof s);
    s.arch = "llama";
    s.n_layer = 1, s.D = 8, s.F = 16, s.n_head = 2, s.n_head_kv = 1, s.V = 16;
    s.wtype = SKV_GGML_F32;
    return s;
}

static int lskip(const lspec *s, const char *name) { return s->skip && !strcmp(s->skip, name); }

static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

/* Weight bytes of n elements of type t with small finite values. */
static void fill_weights(buf *b, uint32_t t, uint64_t n, uint32_t *st, int ones)
{
    for (uint64_t i = 0; i < n;) {
        float v = ones ? 1.0f : (float)((int)(lcg(st) % 2001) - 1000) * 2e-4f;
        switch (t) {
        case SKV_GGML_F32: b_f32(b, v); i++; break;
        case SKV_GGML_F16: b_u16(b, skv_f32_to_f16(v)); i++; break;
        case SKV_GGML_BF16: {
            uint32_t u;
            memcpy(&u, &v, 4);
            b_u16(b, (uint16_t)(u >> 16));
            i++;
            break;
        }
        case SKV_GGML_Q8_0:
            b_u16(b, skv_f32_to_f16(ones ? 1.0f / 64 : 0.002f));
            for (int k = 0; k < 32; k++) b_u8(b, (uint8_t)(ones ? 64 : (int)(lcg(st) % 41) - 20));
            i += 32;
            break;
        case SKV_GGML_Q4_0:
            b_u16(b, skv_f32_to_f16(0.01f));
            for (int k = 0; k < 16; k++) b_u8(b, (uint8_t)lcg(st));
            i += 32;
            break;
        default: /* any other type: arbitrary bytes of the right size; bits 2 and 6 of every
                  * byte clear, so any binary16 field is finite and below 1/8 */
            for (size_t k = 0; k < skv_ggml_type_size(t); k++) b_u8(b, (uint8_t)(lcg(st) & 0xbb));
            i += skv_ggml_blck_size(t);
            break;
        }
    }
}

static void ltensor(gguf_b *g, const lspec *s, const char *name, uint64_t ne0, uint64_t ne1, int norm, uint32_t *st)
{
    uint64_t ne[2] = {ne0, ne1};
    uint32_t type = norm ? SKV_GGML_F32 : s->wtype;
    buf data = {0};
    if (lskip(s, name)) return;
    if (s->reshape && !strcmp(s->reshape, name)) ne[norm ? 0 : 1]++;
    if (s->retype && !strcmp(s->retype, name)) type = s->retype_to;
    fill_weights(&data, type, ne[0] * ne[1], st, norm);
    gb_tensor(g, name, norm ? 1 : 2, ne, type, data.p, data.n);
    free(data.p);
}

static void lkv_u32(gguf_b *g, const lspec *s, const char *key, uint32_t v)
{
    if (!lskip(s, key)) gb_u32(g, key, v);
}

/* A complete tiny llama GGUF per s (exact-size heap block). */
static uint8_t *build_llama(const lspec *s, size_t *len)
{
    gguf_b g;
    uint32_t st = 12345;
    int nt = s->n_tokens ? s->n_tokens : s->V, hd = s->D / s->n_head;
    int Q = s->n_head * hd, KV = s->n_head_kv * hd;
    char name[64];
    uint8_t *f;
    gb_init(&g, 3);
    if (s->align) {
        g.align = s->align;
        gb_u32(&g, "general.alignment", s->align);
    }
    if (s->arch) gb_str(&g, "general.architecture", s->arch);
    gb_str(&g, "general.name", "tiny-test-llama");
    lkv_u32(&g, s, "llama.block_count", (uint32_t)s->n_layer);
    lkv_u32(&g, s, "llama.context_length", 64);
    lkv_u32(&g, s, "llama.embedding_length", (uint32_t)s->D);
    lkv_u32(&g, s, "llama.feed_forward_length", (uint32_t)s->F);
    lkv_u32(&g, s, "llama.attention.head_count", (uint32_t)s->n_head);
    lkv_u32(&g, s, "llama.attention.head_count_kv", (uint32_t)s->n_head_kv);
    if (!lskip(s, "llama.attention.layer_norm_rms_epsilon")) gb_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (!lskip(s, "tokenizer.ggml.model")) gb_str(&g, "tokenizer.ggml.model", s->tok_model ? s->tok_model : "llama");
    if (!lskip(s, "tokenizer.ggml.tokens")) {
        buf *b = gb_arr(&g, "tokenizer.ggml.tokens", SKV_GGUF_STRING, (uint64_t)nt);
        for (int i = 0; i < nt; i++) {
            char t[16];
            int id = s->dup_token && i == 5 ? 4 : i;
            if (id < 3) snprintf(t, sizeof t, "%s", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>");
            else if (id == 3) snprintf(t, sizeof t, "\xe2\x96\x81");
            else if (id < 30) snprintf(t, sizeof t, "%c", 'a' + id - 4);
            else snprintf(t, sizeof t, "x%d", id);
            b_str(b, t);
        }
    }
    if (s->n_scores >= 0) {
        int n = s->n_scores ? s->n_scores : nt;
        buf *b = gb_arr(&g, "tokenizer.ggml.scores", SKV_GGUF_F32, (uint64_t)n);
        for (int i = 0; i < n; i++) b_f32(b, -(float)i);
    }
    if (s->n_types >= 0) {
        int n = s->n_types ? s->n_types : nt;
        buf *b = gb_arr(&g, "tokenizer.ggml.token_type", SKV_GGUF_I32, (uint64_t)n);
        for (int i = 0; i < n; i++) b_u32(b, i == 0 ? 2 : i < 3 ? 3 : 1);
    }
    lkv_u32(&g, s, "tokenizer.ggml.unknown_token_id", 0);
    lkv_u32(&g, s, "tokenizer.ggml.bos_token_id", 1);
    lkv_u32(&g, s, "tokenizer.ggml.eos_token_id", 2);
    if (s->extra) s->extra(&g);
    ltensor(&g, s, "token_embd.weight", (uint64_t)s->D, (uint64_t)s->V, 0, &st);
    ltensor(&g, s, "output_norm.weight", (uint64_t)s->D, 1, 1, &st);
    if (s->untied) ltensor(&g, s, "output.weight", (uint64_t)s->D, (uint64_t)s->V, 0, &st);
    for (int l = 0; l < s->n_layer; l++) {
#define LT(nm, ne0, ne1, norm)                                   \
    snprintf(name, sizeof name, "blk.%d." nm ".weight", l);      \
    ltensor(&g, s, name, (uint64_t)(ne0), (uint64_t)(ne1), norm, &st)
        LT("attn_norm", s->D, 1, 1);
        LT("attn_q", s->D, Q, 0);
        LT("attn_k", s->D, KV, 0);
        LT("attn_v", s->D, KV, 0);
        LT("attn_output", Q, s->D, 0);
        LT("ffn_norm", s->D, 1, 1);
        LT("ffn_gate", s->D, s->F, 0);
        LT("ffn_up", s->D, s->F, 0);
        LT("ffn_down", s->F, s->D, 0);
#undef LT
    }
    f = gb_finish(&g, len, NULL);
    gb_free(&g);
    return f;
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Writes bytes to <tmpdir>/<name> and loads it; removes the file. */
static int load_bytes(const uint8_t *p, size_t n, const char *name, const char *tok, skv_model **m, char *err,
                      size_t cap)
{
    char path[700];
    int rc;
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    if (!write_file(path, p, n)) return snprintf(err, cap, "cannot write %.300s", path), SKV_ERR_IO;
    *m = NULL;
    rc = skv_model_load(path, tok, m, err, cap);
    unlink(path);
    return rc;
}

static int load_spec(const lspec *s, skv_model **m, char *err, size_t cap)
{
    size_t len;
    uint8_t *f = build_llama(s, &len);
    int rc = load_bytes(f, len, "m.gguf", NULL, m, err, cap);
    free(f);
    return rc;
}

/* 1 if the spec's model is refused with status and phrase (and no handle). */
static int model_refused(const lspec *s, int status, const char *phrase, char *why, size_t cap)
{
    char err[512] = "";
    skv_model *m = NULL;
    int rc = load_spec(s, &m, err, sizeof err), ok = rc == status && !m && strstr(err, phrase);
    if (!ok) snprintf(why, cap, "expected %d with '%s'; got %d: '%s'", status, phrase, rc, err);
    skv_model_free(m);
    return ok;
}

#define CHECK_MODEL_REFUSED(spec, status, phrase)                                            \
    do {                                                                                     \
        char why_[768];                                                                      \
        CHECK_MSG(model_refused(&(spec), status, phrase, why_, sizeof why_), "%s", why_);    \
    } while (0)

/* Loads and runs three tokens; 1 on success with finite logits. */
static int model_runs(const lspec *s, char *why, size_t cap)
{
    char err[512] = "";
    skv_model *m = NULL;
    skv_ctx *c = NULL;
    skv_model_info info;
    skv_ctx_params p = skv_ctx_default_params();
    int32_t tok[3] = {1, 5, 6};
    float *logits = NULL;
    int ok = 0, rc = load_spec(s, &m, err, sizeof err);
    int hd = s->D / s->n_head;
    if (rc) {
        snprintf(why, cap, "load failed (%d): %s", rc, err);
        return 0;
    }
    skv_model_get_info(m, &info);
    if (strcmp(info.arch, "llama") || strcmp(info.format, "gguf") || strcmp(info.name, "tiny-test-llama") ||
        info.n_layer != s->n_layer || info.n_embd != s->D || info.n_ff != s->F || info.n_head != s->n_head ||
        info.n_head_kv != s->n_head_kv || info.head_dim != hd || info.rope_dim != hd || info.n_vocab != s->V ||
        info.n_ctx_train != 64 || info.tied_output != !s->untied || info.weight_type != (int)s->wtype ||
        info.bos_id != 1 || info.eos_id != 2 || info.tokenizer_kind != SKV_TOKENIZER_KIND_SPM) {
        snprintf(why, cap, "info fields wrong (layers %d width %d heads %d/%d hd %d vocab %d type %d)", info.n_layer,
                 info.n_embd, info.n_head, info.n_head_kv, info.head_dim, info.n_vocab, info.weight_type);
        goto done;
    }
    p.n_ctx = 8;
    logits = malloc((size_t)s->V * sizeof *logits);
    if (!logits || skv_ctx_create(m, &p, &c) != SKV_OK || skv_prefill(c, tok, 3, SKV_LOGITS_LAST, logits) != SKV_OK) {
        snprintf(why, cap, "context or prefill failed");
        goto done;
    }
    for (int i = 0; i < s->V; i++)
        if (!isfinite(logits[i])) {
            snprintf(why, cap, "logit %d is not finite", i);
            goto done;
        }
    ok = 1;
done:
    free(logits);
    skv_ctx_free(c);
    skv_model_free(m);
    return ok;
}

#define CHECK_MODEL_RUNS(spec)                                              \
    do {                                                                    \
        char why_[512];                                                     \
        CHECK_MSG(model_runs(&(spec), why_, sizeof why_), "%s", why_);      \
    } while (0)

static void tiny_models_load_and_run(void)
{
    static const uint32_t types[] = {SKV_GGML_F32,  SKV_GGML_F16,  SKV_GGML_BF16,   SKV_GGML_Q8_0,  SKV_GGML_Q4_0,
                                     SKV_GGML_Q4_1, SKV_GGML_Q5_0, SKV_GGML_Q5_1,   SKV_GGML_Q2_K,  SKV_GGML_Q3_K,
                                     SKV_GGML_Q4_K, SKV_GGML_Q5_K, SKV_GGML_Q6_K,   SKV_GGML_IQ4_NL, SKV_GGML_IQ4_XS};
    lspec s = lspec_default();
    CHECK_MODEL_RUNS(s);
    s.untied = 1;
    s.n_layer = 2;
    CHECK_MODEL_RUNS(s);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        s = lspec_default();
        s.wtype = types[i];
        s.D = s.F = (int)skv_ggml_blck_size(types[i]) < 32 ? 32 : (int)skv_ggml_blck_size(types[i]);
        s.n_head = 4, s.n_head_kv = 2; /* K of every matrix a multiple of the block size */
        s.untied = (int)(i & 1);
        CHECK_MODEL_RUNS(s);
    }
    /* optional metadata absent: scores and token types default */
    s = lspec_default();
    s.n_scores = -1, s.n_types = -1;
    CHECK_MODEL_RUNS(s);
}

static void extra_bos_99(gguf_b *g) { gb_u32(g, "tokenizer.ggml.bos_token_id", 99); }
static void extra_no_bos_but_add(gguf_b *g)
{
    gb_i32(g, "tokenizer.ggml.bos_token_id", -1);
    gb_bool(g, "tokenizer.ggml.add_bos_token", 1);
}
static void extra_heads0(gguf_b *g) { gb_u32(g, "llama.attention.head_count", 0); }
static void extra_neg_width(gguf_b *g) { gb_i32(g, "llama.embedding_length", -8); }
static void extra_str_layers(gguf_b *g) { gb_str(g, "llama.block_count", "1"); }
static void extra_kv_lengths(gguf_b *g)
{
    gb_u32(g, "llama.attention.key_length", 4);
    gb_u32(g, "llama.attention.value_length", 8);
}
static void extra_yarn(gguf_b *g) { gb_str(g, "llama.rope.scaling.type", "yarn"); }
static void extra_bad_eps(gguf_b *g) { gb_f32(g, "llama.attention.layer_norm_rms_epsilon", 0.0f); }
static void extra_bad_rope_dim(gguf_b *g) { gb_u32(g, "llama.rope.dimension_count", 3); }
static void extra_tokens_i32(gguf_b *g)
{
    buf *b = gb_arr(g, "tokenizer.ggml.tokens", SKV_GGUF_I32, 16);
    for (int i = 0; i < 16; i++) b_u32(b, (uint32_t)i);
}
static void extra_rope_freqs(gguf_b *g)
{
    float v[3] = {1, 1, 1}; /* head_dim 4: 2 pairs expected */
    gb_tensor(g, "rope_freqs.weight", 1, (const uint64_t[]){3}, SKV_GGML_F32, v, sizeof v);
}

static void model_refuses_missing_and_misshapen_tensors(void)
{
    lspec s = lspec_default();
    static const char *const names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                                        "blk.0.attn_output.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                                        "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char phrase[96];
        s = lspec_default();
        s.skip = names[i];
        snprintf(phrase, sizeof phrase, "missing tensor '%s'", names[i]);
        CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, phrase);
        s.skip = NULL;
        s.reshape = names[i];
        snprintf(phrase, sizeof phrase, "'%s' has shape", names[i]);
        CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, phrase);
    }
    s = lspec_default();
    s.skip = "output_norm.weight";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "output_norm.weight");
    s.skip = NULL;
    s.reshape = "output_norm.weight";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "output_norm.weight");
    s = lspec_default();
    s.untied = 1;
    s.reshape = "output.weight";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "'output.weight' has shape");
    s = lspec_default();
    s.n_layer = 2;
    s.skip = "blk.1.ffn_gate.weight";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "missing tensor 'blk.1.ffn_gate.weight'");
    s = lspec_default();
    s.extra = extra_rope_freqs;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "rope_freqs.weight must be 2 f32 values");
}

static void model_refuses_architecture_and_types(void)
{
    lspec s = lspec_default();
    s.arch = "falcon";
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "architecture 'falcon' is not supported");
    s.arch = "llama2";
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "architecture 'llama2'");
    s.arch = "";
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "architecture ''");
    s.arch = NULL;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "missing general.architecture");
    /* an i-quant matrix: K = F must be a multiple of 256 for the file itself to be valid */
    s = lspec_default();
    s.F = 256;
    s.retype = "blk.0.ffn_down.weight";
    s.retype_to = SKV_GGML_IQ2_XXS;
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "'blk.0.ffn_down.weight' has type iq2_xxs");
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, /* the type table's */
                        "seqkv supports f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, "
                        "iq4_nl, iq4_xs, bf16");
    s.retype_to = SKV_GGML_TQ2_0;
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "has type tq2_0");
    s = lspec_default();
    s.retype = "blk.0.attn_q.weight";
    s.retype_to = SKV_GGML_I32;
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "has type i32");
    s.retype_to = SKV_GGML_F64;
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "has type f64");
}

static void model_refuses_bad_hparams(void)
{
    lspec s = lspec_default();
    s.D = 12, s.n_head = 4, s.n_head_kv = 3; /* 4 query heads cannot share 3 KV heads */
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "heads 4/3");
    s = lspec_default();
    s.n_head_kv = 4; /* more KV heads than query heads */
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "heads 2/4");
    s = lspec_default();
    s.skip = "llama.attention.head_count";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "missing metadata 'llama.attention.head_count'");
    s.extra = extra_heads0;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "head count is 0");
    static const char *const required[] = {"llama.block_count", "llama.embedding_length",
                                           "llama.feed_forward_length"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        char phrase[96];
        s = lspec_default();
        s.skip = required[i];
        snprintf(phrase, sizeof phrase, "missing metadata '%s'", required[i]);
        CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, phrase);
    }
    s = lspec_default();
    s.skip = "llama.embedding_length";
    s.extra = extra_neg_width;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "'llama.embedding_length' is not a valid integer");
    s = lspec_default();
    s.skip = "llama.block_count";
    s.extra = extra_str_layers;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "'llama.block_count' is not a valid integer");
    s = lspec_default();
    s.extra = extra_kv_lengths;
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "different key (4) and value (8) head sizes");
    s = lspec_default();
    s.extra = extra_yarn;
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "rope scaling 'yarn' is not supported");
    s = lspec_default();
    s.skip = "llama.attention.layer_norm_rms_epsilon";
    s.extra = extra_bad_eps;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "norm epsilon");
    s = lspec_default();
    s.extra = extra_bad_rope_dim;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "rope dimension 3 invalid");
}

static void model_refuses_bad_tokenizer(void)
{
    lspec s = lspec_default();
    s.n_tokens = 17; /* 17 token texts, 16 embedding rows */
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "'token_embd.weight' has shape [8, 16, 1], expected [8, 17]");
    s.n_tokens = 15;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "'token_embd.weight' has shape");
    s = lspec_default();
    s.n_scores = 15;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "tokenizer.ggml.scores must be 16 f32 values");
    s = lspec_default();
    s.n_types = 18;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "tokenizer.ggml.token_type must be 16 integers");
    s = lspec_default();
    s.tok_model = "bert";
    CHECK_MODEL_REFUSED(s, SKV_ERR_UNSUPPORTED, "tokenizer 'bert' is not supported");
    s = lspec_default();
    s.skip = "tokenizer.ggml.model";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "missing tokenizer.ggml.model");
    s = lspec_default();
    s.skip = "tokenizer.ggml.tokens";
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "missing or invalid tokenizer.ggml.tokens");
    s.extra = extra_tokens_i32;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "missing or invalid tokenizer.ggml.tokens");
    s = lspec_default();
    s.dup_token = 1;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "duplicate token in vocabulary");
    /* special ids outside the vocabulary: the tokenizer reports them as invalid arguments */
    s = lspec_default();
    s.skip = "tokenizer.ggml.bos_token_id";
    s.extra = extra_bos_99;
    CHECK_MODEL_REFUSED(s, SKV_ERR_INVALID_ARG, "bos_id 99 out of range (vocabulary of 16 tokens)");
    s.extra = extra_no_bos_but_add;
    CHECK_MODEL_REFUSED(s, SKV_ERR_FORMAT, "add_bos is true, but there is no bos token");
}

static void model_refuses_broken_files(void)
{
    lspec s = lspec_default();
    size_t len;
    uint8_t *f = build_llama(&s, &len);
    char err[512] = "";
    skv_model *m = NULL;
    int rc;
    /* the GGUF layer's refusals come through skv_model_load */
    rc = load_bytes(f, len - 1, "cut.gguf", NULL, &m, err, sizeof err);
    skv_model_free(m);
    if (rc != SKV_ERR_FORMAT || !strstr(err, "past the end")) free(f);
    CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(err, "past the end"), "rc %d: %s", rc, err);
    f[4] = 9;
    rc = load_bytes(f, len, "v9.gguf", NULL, &m, err, sizeof err);
    skv_model_free(m);
    free(f);
    CHECK_MSG(rc == SKV_ERR_UNSUPPORTED && strstr(err, "version 9"), "rc %d: %s", rc, err);
    {
        char path[700];
        snprintf(path, sizeof path, "%s/does-not-exist.gguf", tmpdir);
        m = (skv_model *)&len;
        rc = skv_model_load(path, NULL, &m, err, sizeof err);
        CHECK(rc == SKV_ERR_IO && m == NULL && strstr(err, "cannot open"));
        CHECK(skv_model_load(NULL, NULL, &m, err, sizeof err) == SKV_ERR_INVALID_ARG);
    }
}

/* ---- llama2.c checkpoints ------------------------------------------------------- */

/* Header + every f32 array for the header's sizes (+ extra floats, - cut bytes). */
static uint8_t *build_l2c(const int32_t hdr[7], size_t *len)
{
    buf b = {0};
    uint32_t st = 777;
    int64_t D = hdr[0], F = hdr[1], L = hdr[2], H = hdr[3], KVH = hdr[4], V = hdr[5] < 0 ? -(int64_t)hdr[5] : hdr[5];
    int64_t S = hdr[6], hd = D / H, KV = KVH * hd;
    int64_t n = V * D + L * D + 2 * L * D * D + 2 * L * KV * D + L * D + 3 * L * F * D + D + S * hd;
    uint8_t *out;
    if (hdr[5] < 0) n += V * D;
    for (int i = 0; i < 7; i++) b_u32(&b, (uint32_t)hdr[i]);
    fill_weights(&b, SKV_GGML_F32, (uint64_t)n, &st, 0);
    *len = b.n;
    out = dup_exact(b.p, b.n);
    free(b.p);
    return out;
}

/* A llama2.c tokenizer file of n tokens. */
static int write_l2c_tokenizer(const char *path, int n)
{
    buf b = {0};
    int ok;
    b_u32(&b, 8);
    for (int i = 0; i < n; i++) {
        char t[16];
        if (i < 26) snprintf(t, sizeof t, "%c", 'a' + i);
        else snprintf(t, sizeof t, "t%d", i);
        b_f32(&b, -(float)i);
        b_u32(&b, (uint32_t)strlen(t));
        b_put(&b, t, strlen(t));
    }
    ok = write_file(path, b.p, b.n);
    free(b.p);
    return ok;
}

static void llama2c_checkpoints(void)
{
    const int32_t good[7] = {8, 16, 1, 2, 1, 16, 4};
    char tok[700], err[512] = "";
    size_t len;
    skv_model *m = NULL;
    uint8_t *f;
    int rc;
    snprintf(tok, sizeof tok, "%s/tok16.bin", tmpdir);
    CHECK(write_l2c_tokenizer(tok, 16));
    f = build_l2c(good, &len);
    rc = load_bytes(f, len, "ok.bin", tok, &m, err, sizeof err);
    {
        skv_model_info info;
        int ok = rc == SKV_OK && skv_model_get_info(m, &info) == SKV_OK && !strcmp(info.format, "llama2c") &&
                 info.n_embd == 8 && info.n_head_kv == 1 && info.n_vocab == 16 && info.tied_output;
        skv_model_free(m);
        if (!ok) free(f);
        CHECK_MSG(ok, "valid checkpoint: rc %d %s", rc, err);
    }
    /* the tokenizer found beside the checkpoint (tok<vocab>.bin) */
    rc = load_bytes(f, len, "beside.bin", NULL, &m, err, sizeof err);
    skv_model_free(m);
    if (rc) free(f);
    CHECK_MSG(rc == SKV_OK, "tok16.bin beside: %s", err);
    /* every truncation is refused */
    for (size_t k = 0; k < len; k++) {
        rc = load_bytes(f, k, "cut.bin", tok, &m, err, sizeof err);
        skv_model_free(m);
        if (rc != SKV_ERR_FORMAT || (!strstr(err, "truncated") && !strstr(err, "too short"))) free(f);
        CHECK_MSG(rc == SKV_ERR_FORMAT, "prefix %zu: rc %d %s", k, rc, err);
        CHECK_MSG(strstr(err, "truncated") || strstr(err, "too short"), "prefix %zu: '%s'", k, err);
    }
    /* trailing garbage */
    {
        uint8_t *g = malloc(len + 5);
        if (!g) abort();
        memcpy(g, f, len);
        memset(g + len, 0xAB, 5);
        for (size_t extra = 1; extra <= 5; extra += 4) {
            rc = load_bytes(g, len + extra, "trail.bin", tok, &m, err, sizeof err);
            skv_model_free(m);
            if (rc != SKV_ERR_FORMAT || !strstr(err, "unexpected trailing bytes")) free(g), free(f);
            CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(err, "unexpected trailing bytes"), "+%zu: rc %d %s", extra, rc, err);
        }
        free(g);
    }
    free(f);
    /* untied classifier (negative vocab): valid with wcls, truncated without it */
    {
        int32_t h[7] = {8, 16, 1, 2, 1, -16, 4};
        f = build_l2c(h, &len);
        rc = load_bytes(f, len, "untied.bin", tok, &m, err, sizeof err);
        skv_model_free(m);
        if (rc) free(f);
        CHECK_MSG(rc == SKV_OK, "untied: %s", err);
        rc = load_bytes(f, len - 16 * 8 * 4, "nocls.bin", tok, &m, err, sizeof err);
        skv_model_free(m);
        free(f);
        CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(err, "truncated (classifier)"), "rc %d %s", rc, err);
    }
    /* headers with negative, zero, huge or inconsistent sizes */
    static const struct { int32_t h[7]; const char *phrase; } bad[] = {
        {{-8, 16, 1, 2, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, -16, 1, 2, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, 16, 0, 2, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, 16, -1, 2, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, 16, 1, 0, 1, 16, 4}, "header is invalid"},
        {{8, 16, 1, -2, 1, 16, 4}, "header is invalid"},
        {{8, 16, 1, 3, 1, 16, 4}, "header is invalid"},            /* 8 % 3 */
        {{8, 16, 1, 2, 0, 16, 4}, "implausible hyper-parameters"},
        {{8, 16, 1, 2, 3, 16, 4}, "implausible hyper-parameters"}, /* kv heads > heads */
        {{12, 16, 1, 4, 3, 16, 4}, "implausible hyper-parameters"}, /* 4 % 3 */
        {{8, 16, 1, 2, 1, 0, 4}, "implausible hyper-parameters"},
        {{8, 16, 1, 2, 1, INT32_MIN, 4}, "implausible hyper-parameters"},
        {{8, 16, 1, 2, 1, 16, 0}, "implausible hyper-parameters"},
        {{8, 16, 1, 2, 1, 16, -4}, "implausible hyper-parameters"},
        {{INT32_MAX, 16, 1, 1, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, INT32_MAX, 1, 2, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, 16, INT32_MAX, 2, 1, 16, 4}, "implausible hyper-parameters"},
        {{8, 16, 1, 2, 1, INT32_MAX, 4}, "implausible hyper-parameters"},
        {{8, 16, 1, 2, 1, 16, INT32_MAX}, "implausible hyper-parameters"},
        {{6, 16, 1, 2, 1, 16, 4}, "rope dimension 3 invalid"},     /* odd head_dim */
        {{1 << 20, 1 << 20, 4096, 256, 256, 1 << 24, 1 << 24}, "truncated for its header's sizes"}, /* huge, legal */
        {{1 << 20, 1 << 20, 4096, 256, 256, -(1 << 24), 1 << 24}, "truncated for its header's sizes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        buf b = {0};
        for (int j = 0; j < 7; j++) b_u32(&b, (uint32_t)bad[i].h[j]);
        b_zeros(&b, 4096);
        rc = load_bytes(b.p, b.n, "bad.bin", tok, &m, err, sizeof err);
        skv_model_free(m);
        free(b.p);
        CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(err, bad[i].phrase), "header %zu: rc %d '%s'", i, rc, err);
    }
    /* no tokenizer anywhere */
    {
        int32_t h[7] = {8, 16, 1, 2, 1, 12, 4}; /* tok12.bin does not exist */
        f = build_l2c(h, &len);
        rc = load_bytes(f, len, "notok.bin", NULL, &m, err, sizeof err);
        skv_model_free(m);
        free(f);
        CHECK_MSG(rc == SKV_ERR_IO && strstr(err, "no tokenizer found"), "rc %d %s", rc, err);
    }
    /* a tokenizer with fewer tokens than the header's vocabulary */
    {
        int32_t h[7] = {8, 16, 1, 2, 1, 32, 4};
        f = build_l2c(h, &len);
        rc = load_bytes(f, len, "bigvocab.bin", tok, &m, err, sizeof err);
        skv_model_free(m);
        free(f);
        CHECK_MSG(rc == SKV_ERR_FORMAT && strstr(err, "tokenizer"), "rc %d %s", rc, err);
    }
    unlink(tok);
}

/* ---- fuzz seed corpus ------------------------------------------------------------ */

static void put_seed(const char *root, const char *sub, const char *name, const uint8_t *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", root, sub, name);
    if (!write_file(path, p, n)) fprintf(stderr, "cannot write %s\n", path);
}

static void put_spec(const char *root, const char *name, const lspec *s)
{
    size_t len;
    uint8_t *f = build_llama(s, &len);
    put_seed(root, "model", name, f, len);
    free(f);
}

static void write_corpus(const char *root)
{
    gguf_b b;
    size_t len, ds;
    uint64_t offs[N_TSPEC];
    uint8_t *f;
    lspec s;
    f = build_small_valid(&len);
    put_seed(root, "gguf", "small_valid", f, len);
    f[16] = 9; /* n_kv too large */
    put_seed(root, "gguf", "small_bad_nkv", f, len);
    free(f);
    gb_init(&b, 3);
    build_all_scalars(&b);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    put_seed(root, "gguf", "all_types_v3", f, len);
    free(f);
    gb_init(&b, 2);
    build_all_scalars(&b);
    gb_bool(&b, "bad.bool", 2);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    put_seed(root, "gguf", "bool2_v2", f, len);
    free(f);
    f = build_tensor_file(3, 64, SKV_GGUF_U32, &len, &ds, offs);
    put_seed(root, "gguf", "tensors_align64", f, len);
    free(f);
    f = build_tensor_file(2, 32, -1, &len, &ds, offs);
    put_seed(root, "gguf", "tensors_v2", f, len);
    free(f);
    f = build_tensor_file(3, 1, SKV_GGUF_U32, &len, &ds, offs);
    put_seed(root, "gguf", "tensors_align1", f, len);
    free(f);
    gb_init(&b, 3);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    put_seed(root, "gguf", "header_only", f, len);
    free(f);
    gb_init(&b, 3);
    gb_tensor_info(&b, "t", 2, (const uint64_t[]){33, 1}, SKV_GGML_Q4_0, 0);
    b_zeros(&b.data, 64);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    put_seed(root, "gguf", "q4_0_row33", f, len);
    free(f);
    gb_init(&b, 3);
    gb_tensor_info(&b, "t", 1, (const uint64_t[]){4}, SKV_GGML_F32, 8);
    b_zeros(&b.data, 64);
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    put_seed(root, "gguf", "misaligned", f, len);
    free(f);
    gb_init(&b, 3);
    {
        buf *v = gb_arr(&b, "nested", SKV_GGUF_ARRAY, 1);
        b_u32(v, SKV_GGUF_U8), b_u64(v, 1), b_u8(v, 3);
    }
    f = gb_finish(&b, &len, NULL);
    gb_free(&b);
    put_seed(root, "gguf", "nested_array", f, len);
    free(f);
    /* models */
    s = lspec_default();
    put_spec(root, "tiny_f32", &s);
    s.n_layer = 2, s.untied = 1, s.V = 8, s.D = 4, s.F = 8, s.n_head = 2, s.n_head_kv = 2;
    put_spec(root, "tiny_f32_untied_2l", &s);
    s = lspec_default();
    s.wtype = SKV_GGML_F16;
    put_spec(root, "tiny_f16", &s);
    s.wtype = SKV_GGML_BF16;
    s.n_scores = -1, s.n_types = -1;
    put_spec(root, "tiny_bf16_noscores", &s);
    s = lspec_default();
    s.wtype = SKV_GGML_Q8_0, s.D = 32, s.F = 32, s.n_head = 4, s.n_head_kv = 2, s.V = 8;
    put_spec(root, "tiny_q8_0", &s);
    s.wtype = SKV_GGML_Q4_0;
    put_spec(root, "tiny_q4_0", &s);
    /* near misses, smaller still: V 8, width 4, FFN 8 */
    s = lspec_default();
    s.V = 8, s.D = 4, s.F = 8;
    s.skip = "blk.0.ffn_up.weight";
    put_spec(root, "missing_tensor", &s);
    s.skip = NULL;
    s.dup_token = 1;
    put_spec(root, "dup_token", &s);
    s.dup_token = 0;
    s.extra = extra_kv_lengths;
    put_spec(root, "kv_lengths", &s);
    s.extra = NULL;
    s.n_head = 4, s.n_head_kv = 3;
    put_spec(root, "heads_4_3", &s);
}

int main(void)
{
    const char *t = getenv("TMPDIR"), *corpus = getenv("SEQKV_WRITE_CORPUS");
    TEST_BEGIN("test_gguf");
    /* many small files are written: prefer a RAM file system */
    if (!t || !*t) t = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/skv_test_gguf_XXXXXX", t);
    if (!mkdtemp(tmpdir)) {
        printf("FAIL test_gguf:setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    if (corpus && *corpus) write_corpus(corpus);
    RUN(type_traits_table);
    RUN(metadata_of_every_type_is_read);
    RUN(tensors_v2_v3_and_alignment);
    RUN(tiny_files_and_paths);
    RUN(refuses_bad_magic_and_versions);
    RUN(refuses_every_truncation);
    RUN(refuses_absurd_counts);
    RUN(refuses_bad_strings);
    RUN(refuses_huge_arrays);
    RUN(refuses_bad_value_types);
    RUN(refuses_duplicates);
    RUN(refuses_bad_tensor_infos);
    RUN(refuses_bad_offsets);
    RUN(refuses_bad_alignment);
    RUN(lookups_are_logarithmic);
    RUN(tiny_models_load_and_run);
    RUN(model_refuses_missing_and_misshapen_tensors);
    RUN(model_refuses_architecture_and_types);
    RUN(model_refuses_bad_hparams);
    RUN(model_refuses_bad_tokenizer);
    RUN(model_refuses_broken_files);
    RUN(llama2c_checkpoints);
    {   /* files a failed case may have left behind */
        char path[700];
        snprintf(path, sizeof path, "%s/tok16.bin", tmpdir);
        unlink(path);
    }
    rmdir(tmpdir);
    TEST_END();
}
