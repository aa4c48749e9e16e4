/* Fuzz target for the GGUF reader (src/engine/gguf.c).
 *
 * Opens the input with skv_gguf_open_mem (on an exact-size copy, so every
 * read past the end is an ASan report). When the reader refuses, the handle
 * must be NULL and the message non-empty. When it accepts, the structure is
 * walked again here, independently, and every accessor is called on every
 * key and tensor. Invariants (abort on violation):
 *   - every tensor's extent lies inside the input and is read in full;
 *     nbytes = n_elements / block size * type size; names are unique;
 *   - every key found by the walk is found by the accessors, whose answers
 *     agree with the value type the walk saw; strings point inside the input;
 *   - scalar bools are 0 or 1; absent keys give SKV_ERR_RANGE. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "seqkv.h"
#include "core/util.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static volatile uint64_t sink;

typedef struct {
    const uint8_t *base, *end;
} span;

static void touch(const span *s, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t acc = 0;
    CHECK(n == 0 || (b >= s->base && n <= (size_t)(s->end - b)));
    for (size_t i = 0; i < n; i++) acc += b[i];
    sink += acc;
}

static size_t scalar_size(uint32_t t)
{
    static const uint8_t sz[SKV_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < SKV_GGUF_NTYPES ? sz[t] : 0;
}

/* Bounded reads for the walk: the reader validated the file, so these never fail
 * unless it is wrong. */
static uint64_t take(const span *s, const uint8_t **p, size_t n)
{
    uint64_t v = 0;
    CHECK(n <= (size_t)(s->end - *p));
    if (n == 4) v = skv_rd32(*p);
    else if (n == 8) v = skv_rd64(*p);
    *p += n;
    return v;
}

static void exercise_strings(const skv_gguf *g, const span *s, const char *key, size_t n)
{
    skv_gguf_str *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return;
    CHECK(skv_gguf_arr_strings(g, key, v, n) == SKV_OK);
    for (size_t i = 0; i < n; i++) touch(s, v[i].ptr, v[i].len);
    if (n) CHECK(skv_gguf_arr_strings(g, key, v, n - 1) == SKV_ERR_FORMAT);
    free(v);
}

static void exercise_numbers(const skv_gguf *g, const char *key, uint32_t et, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    int32_t *i32 = malloc((n ? n : 1) * sizeof *i32);
    if (f && i32) {
        int rc = skv_gguf_arr_f32(g, key, f, n);
        CHECK(et == SKV_GGUF_F32 ? rc == SKV_OK : rc == SKV_ERR_FORMAT);
        rc = skv_gguf_arr_i32(g, key, i32, n);
        CHECK(rc == SKV_OK || rc == SKV_ERR_FORMAT);
        if (et == SKV_GGUF_F32 || et == SKV_GGUF_F64) CHECK(rc == SKV_ERR_FORMAT);
        if (rc == SKV_OK && et == SKV_GGUF_BOOL)
            for (size_t i = 0; i < n; i++) sink += (uint64_t)i32[i];
        rc = skv_gguf_arr_strings(g, key, NULL, n);
        CHECK(rc == SKV_ERR_FORMAT);
    }
    free(f);
    free(i32);
}

/* Calls every accessor on one key whose value has type t (arrays: et x n). */
static void exercise_key(const skv_gguf *g, const span *s, const char *key, uint32_t t, uint32_t et, uint64_t n)
{
    int64_t iv;
    double dv;
    int bv, rc;
    skv_gguf_str sv;
    uint32_t at;
    size_t an;
    CHECK(skv_gguf_has(g, key) == 1);
    rc = skv_gguf_get_int(g, key, &iv);
    if (t == SKV_GGUF_STRING || t == SKV_GGUF_ARRAY || t == SKV_GGUF_F32 || t == SKV_GGUF_F64)
        CHECK(rc == SKV_ERR_FORMAT);
    else if (t != SKV_GGUF_U64)
        CHECK(rc == SKV_OK);
    if (rc == SKV_OK && t == SKV_GGUF_BOOL) CHECK(iv == 0 || iv == 1);
    rc = skv_gguf_get_float(g, key, &dv);
    if (t == SKV_GGUF_F32 || t == SKV_GGUF_F64) CHECK(rc == SKV_OK);
    if (t == SKV_GGUF_STRING || t == SKV_GGUF_ARRAY) CHECK(rc == SKV_ERR_FORMAT);
    rc = skv_gguf_get_bool(g, key, &bv);
    if (rc == SKV_OK) CHECK(bv == 0 || bv == 1);
    rc = skv_gguf_get_str(g, key, &sv);
    CHECK(t == SKV_GGUF_STRING ? rc == SKV_OK : rc == SKV_ERR_FORMAT);
    if (rc == SKV_OK) touch(s, sv.ptr, sv.len);
    rc = skv_gguf_get_arr(g, key, &at, &an);
    CHECK(t == SKV_GGUF_ARRAY ? rc == SKV_OK : rc == SKV_ERR_FORMAT);
    if (rc != SKV_OK) return;
    CHECK(at == et && an == n);
    if (et == SKV_GGUF_STRING) exercise_strings(g, s, key, an);
    else exercise_numbers(g, key, et, an);
}

#define PROBE "\x01no such key"

/* Walks the metadata section again (independently of src/engine/gguf.c); returns 1 if
 * one of the keys is PROBE. */
static int walk_kvs(const skv_gguf *g, const span *s)
{
    int probe_seen = 0;
    const uint8_t *p = s->base + 24;
    uint64_t n_kv = skv_rd64(s->base + 16);
    char key[256];
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t klen = take(s, &p, 8), n = 0;
        const uint8_t *k = p;
        uint32_t t, et = 0;
        take(s, &p, (size_t)klen);
        t = (uint32_t)take(s, &p, 4);
        if (t == SKV_GGUF_STRING) {
            take(s, &p, (size_t)take(s, &p, 8));
        } else if (t == SKV_GGUF_ARRAY) {
            et = (uint32_t)take(s, &p, 4);
            n = take(s, &p, 8);
            for (uint64_t j = 0; j < n; j++)
                take(s, &p, et == SKV_GGUF_STRING ? (size_t)take(s, &p, 8) : scalar_size(et));
            CHECK(et == SKV_GGUF_STRING || scalar_size(et));
        } else {
            CHECK(scalar_size(t));
            if (t == SKV_GGUF_BOOL) CHECK(*p <= 1);
            take(s, &p, scalar_size(t));
        }
        probe_seen |= klen == sizeof PROBE - 1 && !memcmp(k, PROBE, sizeof PROBE - 1);
        if (klen < sizeof key && !memchr(k, 0, (size_t)klen)) {
            memcpy(key, k, (size_t)klen);
            key[klen] = 0;
            exercise_key(g, s, key, t, et, n);
        }
    }
    return probe_seen;
}

static void check_tensors(const skv_gguf *g, const span *s)
{
    size_t n = skv_gguf_n_tensors(g);
    char name[256];
    for (size_t i = 0; i < n; i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        uint64_t nel = 1;
        size_t bs, ts;
        CHECK(t && t->n_dims >= 1 && t->n_dims <= 4);
        for (int d = 0; d < 4; d++) {
            CHECK(t->ne[d] >= 1);
            if ((uint32_t)d >= t->n_dims) CHECK(t->ne[d] == 1);
            nel *= t->ne[d];
        }
        bs = skv_ggml_blck_size(t->type);
        ts = skv_ggml_type_size(t->type);
        CHECK(bs && ts && nel == t->n_elements && t->ne[0] % bs == 0 && t->nbytes == nel / bs * ts);
        touch(s, t->data, t->nbytes);
        touch(s, t->name.ptr, t->name.len);
        if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            CHECK(skv_gguf_find_tensor(g, name) == t);
        }
    }
    CHECK(skv_gguf_tensor_at(g, n) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    skv_gguf *g = (skv_gguf *)&size;
    skv_err err = {0};
    int rc;
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    rc = skv_gguf_open_mem(copy, size, &g, &err);
    if (rc != SKV_OK) {
        CHECK(g == NULL && rc < 0 && rc >= SKV_ERR_INTERNAL && err.msg[0] && memchr(err.msg, 0, sizeof err.msg));
        free(copy);
        return 0;
    }
    span s = {copy, copy + size};
    int64_t iv = 7;
    CHECK(skv_gguf_version(g) == 2 || skv_gguf_version(g) == 3);
    CHECK(skv_gguf_file_size(g) == size);
    if (!walk_kvs(g, &s)) CHECK(skv_gguf_get_int(g, PROBE, &iv) == SKV_ERR_RANGE && iv == 7);
    check_tensors(g, &s);
    skv_gguf_close(g);
    free(copy);
    return 0;
}
