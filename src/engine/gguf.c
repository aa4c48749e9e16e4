/* GGUF reader: structure validation and typed metadata access. See gguf.h. */
#include "engine/gguf.h"
#include "core/fpguard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
/* Sanity caps: far above any real model, low enough to stop allocation bombs. */
#define GGUF_MAX_KV ((uint64_t)1 << 20)
#define GGUF_MAX_TENSORS ((uint64_t)1 << 20)
#define GGUF_MAX_SPLITS 9999 /* shards of one model (gguf-split numbers them with 5 digits) */

typedef struct {
    skv_gguf_str key;
    uint32_t type;
    uint32_t arr_type; /* for arrays */
    uint64_t arr_n;
    const uint8_t *val; /* value bytes (for arrays: first element) */
} gguf_kv;

struct skv_gguf {
    skv_mmap map; /* owned when opened from a path */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    size_t n_kv, n_tensors;
    gguf_kv *kv;
    skv_gguf_tensor *tensors;
    /* Lookups by name in O(log n): the keys and tensor names sorted (each points at the
     * first member of its gguf_kv / skv_gguf_tensor). A linear search per lookup made a
     * model load O(layers x tensors): minutes for a crafted 30 MB file. */
    const skv_gguf_str **kv_idx, **t_idx;
    /* A model split over several files (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf,
     * ...): this handle is the first shard, whose metadata is the model's; the others are
     * kept open here and their tensors merged into tensors / t_idx above. */
    struct skv_gguf **shards;
    size_t n_shards;
    /* Metadata overrides (skv_gguf_override): looked up before the file's keys, the last
     * given first; each value (and its key) in a buffer of its own. */
    gguf_kv *ovr;
    uint8_t **ovr_buf;
    size_t n_ovr;
};

/* Size of one scalar metadata value of a fixed-size type; 0 for STRING/ARRAY/unknown. */
static size_t scalar_size(uint32_t t)
{
    static const uint8_t sz[SKV_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < SKV_GGUF_NTYPES ? sz[t] : 0;
}

/* ---- bounded cursor ------------------------------------------------------ */

typedef struct {
    const uint8_t *p, *end;
    skv_err *err;
} cursor;

static int need(cursor *c, size_t n, const char *what)
{
    if ((size_t)(c->end - c->p) < n)
        return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF truncated while reading %s", what);
    return SKV_OK;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what)
{
    int rc = need(c, 4, what);
    if (rc) return rc;
    *v = skv_rd32(c->p);
    c->p += 4;
    return SKV_OK;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what)
{
    int rc = need(c, 8, what);
    if (rc) return rc;
    *v = skv_rd64(c->p);
    c->p += 8;
    return SKV_OK;
}

static int rd_str(cursor *c, skv_gguf_str *s, const char *what)
{
    uint64_t len;
    int rc = rd_u64(c, &len, what);
    if (rc) return rc;
    if (len > (uint64_t)(c->end - c->p))
        return skv_fail(c->err, SKV_ERR_FORMAT,
                        "GGUF %s: string length %llu exceeds the %zu bytes left", what,
                        (unsigned long long)len, (size_t)(c->end - c->p));
    s->ptr = (const char *)c->p;
    s->len = (size_t)len;
    c->p += len;
    return SKV_OK;
}

static int str_eq(skv_gguf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && memcmp(s.ptr, z, n) == 0;
}

/* Skips over one value of type t (arrays: validated element by element). */
static int parse_value(cursor *c, gguf_kv *kv, const char *what)
{
    size_t sz = scalar_size(kv->type);
    kv->val = c->p;
    if (kv->type == SKV_GGUF_STRING) {
        skv_gguf_str s;
        return rd_str(c, &s, what);
    }
    if (kv->type == SKV_GGUF_ARRAY) {
        uint32_t at;
        uint64_t n;
        int rc;
        if ((rc = rd_u32(c, &at, what)) || (rc = rd_u64(c, &n, what))) return rc;
        kv->arr_type = at;
        kv->arr_n = n;
        kv->val = c->p;
        if (at == SKV_GGUF_STRING) {
            /* each string needs at least its 8-byte length: bound n before looping */
            if (n > (uint64_t)(c->end - c->p) / 8)
                return skv_fail(c->err, SKV_ERR_FORMAT,
                                "GGUF %s: array of %llu strings cannot fit in the file", what,
                                (unsigned long long)n);
            for (uint64_t i = 0; i < n; i++) {
                skv_gguf_str s;
                if ((rc = rd_str(c, &s, what))) return rc;
            }
            return SKV_OK;
        }
        sz = scalar_size(at);
        if (!sz)
            return skv_fail(c->err, SKV_ERR_UNSUPPORTED,
                            "GGUF %s: arrays of type %u are not supported", what, at);
        if (n > (uint64_t)(c->end - c->p) / sz)
            return skv_fail(c->err, SKV_ERR_FORMAT,
                            "GGUF %s: array of %llu elements exceeds the file", what,
                            (unsigned long long)n);
        if (at == SKV_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->p[i] > 1)
                    return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF %s: bool array element %u", what,
                                    c->p[i]);
        c->p += (size_t)n * sz;
        return SKV_OK;
    }
    if (!sz)
        return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF %s: unknown value type %u", what,
                        kv->type);
    if (kv->type == SKV_GGUF_BOOL && need(c, 1, what) == SKV_OK && c->p[0] > 1)
        return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF %s: bool value %u", what, c->p[0]);
    int rc = need(c, sz, what);
    if (rc) return rc;
    c->p += sz;
    return SKV_OK;
}

static int parse_kvs(skv_gguf *g, cursor *c)
{
    for (size_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        char what[96];
        int rc;
        snprintf(what, sizeof what, "metadata entry %zu", i);
        if ((rc = rd_str(c, &kv->key, what))) return rc;
        snprintf(what, sizeof what, "metadata '%.*s'", (int)(kv->key.len > 64 ? 64 : kv->key.len),
                 kv->key.ptr);
        if ((rc = rd_u32(c, &kv->type, what))) return rc;
        if ((rc = parse_value(c, kv, what))) return rc;
    }
    return SKV_OK;
}

static int parse_tensor_info(skv_gguf *g, cursor *c, skv_gguf_tensor *t, size_t i)
{
    char what[96];
    uint64_t off, nel = 1;
    int rc;
    snprintf(what, sizeof what, "tensor info %zu", i);
    if ((rc = rd_str(c, &t->name, what)) || (rc = rd_u32(c, &t->n_dims, what))) return rc;
    snprintf(what, sizeof what, "tensor '%.*s'", (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr);
    if (t->n_dims < 1 || t->n_dims > 4)
        return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF %s: %u dimensions (1..4 allowed)", what,
                        t->n_dims);
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((rc = rd_u64(c, &t->ne[d], what))) return rc;
        if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) || nel > ((uint64_t)1 << 50) / t->ne[d])
            return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF %s: absurd dimension %llu", what,
                            (unsigned long long)t->ne[d]);
        nel *= t->ne[d];
    }
    t->n_elements = nel;
    if ((rc = rd_u32(c, &t->type, what)) || (rc = rd_u64(c, &off, what))) return rc;
    size_t bs = skv_ggml_blck_size(t->type), ts = skv_ggml_type_size(t->type);
    if (!bs)
        return skv_fail(c->err, SKV_ERR_UNSUPPORTED, "GGUF %s: unknown tensor type %u", what,
                        t->type);
    if (t->ne[0] % bs)
        return skv_fail(c->err, SKV_ERR_FORMAT,
                        "GGUF %s: row length %llu is not a multiple of the %s block size %zu", what,
                        (unsigned long long)t->ne[0], skv_ggml_type_name(t->type), bs);
    t->nbytes = (size_t)(nel / bs) * ts; /* nel < 2^50, ts < 2^9: no overflow */
    t->data = (const uint8_t *)(uintptr_t)off; /* resolved after the data section is known */
    (void)g;
    return SKV_OK;
}

static int resolve_tensors(skv_gguf *g, cursor *c, size_t data_start, size_t alignment)
{
    size_t data_size = g->size - data_start;
    for (size_t i = 0; i < g->n_tensors; i++) {
        skv_gguf_tensor *t = &g->tensors[i];
        uint64_t off = (uint64_t)(uintptr_t)t->data;
        if (off % alignment)
            return skv_fail(c->err, SKV_ERR_FORMAT, "GGUF tensor '%.*s': offset %llu not aligned to %zu",
                            (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr, (unsigned long long)off,
                            alignment);
        if (off > data_size || t->nbytes > data_size - off)
            return skv_fail(c->err, SKV_ERR_FORMAT,
                            "GGUF tensor '%.*s': data [%llu, +%zu) lies past the end of the file (data section %zu bytes)",
                            (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr, (unsigned long long)off,
                            t->nbytes, data_size);
        t->data = g->base + data_start + off;
    }
    return SKV_OK;
}

/* Duplicate names in O(n log n): sort references, compare neighbours. */
static int str_cmp(const void *a, const void *b)
{
    const skv_gguf_str *x = *(const skv_gguf_str *const *)a, *y = *(const skv_gguf_str *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->ptr, y->ptr, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* names[i] at (char *)base + i*stride, sorted into *idx (malloc'ed); returns the first
 * duplicate or NULL. */
static int sort_names(const void *base, size_t n, size_t stride, const skv_gguf_str ***idx, const skv_gguf_str **dup)
{
    const skv_gguf_str **v = malloc((n ? n : 1) * sizeof *v);
    *idx = v;
    *dup = NULL;
    if (!v) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) v[i] = (const skv_gguf_str *)(const void *)((const char *)base + i * stride);
    qsort(v, n, sizeof *v, str_cmp);
    for (size_t i = 1; i < n && !*dup; i++)
        if (!str_cmp(&v[i - 1], &v[i])) *dup = v[i];
    return SKV_OK;
}

/* (Re)builds the sorted index of the tensor names; a name given twice is an error. */
static int index_tensors(skv_gguf *g, skv_err *err)
{
    const skv_gguf_str *dt = NULL;
    free(g->t_idx);
    g->t_idx = NULL;
    if (sort_names(&g->tensors[0].name, g->n_tensors, sizeof g->tensors[0], &g->t_idx, &dt))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory reading GGUF");
    if (dt)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: duplicate tensor name '%.*s'",
                        (int)(dt->len > 64 ? 64 : dt->len), dt->ptr);
    return SKV_OK;
}

static int check_duplicates(skv_gguf *g, skv_err *err)
{
    const skv_gguf_str *d = NULL;
    if (sort_names(&g->kv[0].key, g->n_kv, sizeof g->kv[0], &g->kv_idx, &d))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory reading GGUF");
    if (d)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: duplicate key '%.*s'", (int)(d->len > 64 ? 64 : d->len),
                        d->ptr);
    return index_tensors(g, err);
}

/* The entry of a sorted index named z, or NULL. */
static const skv_gguf_str *index_find(const skv_gguf_str *const *idx, size_t n, const char *z)
{
    skv_gguf_str key = {z, strlen(z)};
    const skv_gguf_str *kp = &key;
    const skv_gguf_str *const *hit = bsearch(&kp, idx, n, sizeof *idx, str_cmp);
    return hit ? *hit : NULL;
}

static int by_data(const void *a, const void *b)
{
    const skv_gguf_tensor *x = *(const skv_gguf_tensor *const *)a, *y = *(const skv_gguf_tensor *const *)b;
    return (x->data > y->data) - (x->data < y->data);
}

/* Tensor data may not overlap: otherwise a small file declares any number of layers over
 * the same bytes, and a model's size (its load, fingerprint and every forward pass) is no
 * longer bounded by the file's. */
static int check_overlap(const skv_gguf *g, skv_err *err)
{
    const skv_gguf_tensor **v = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *v), *a = NULL, *b = NULL;
    if (!v) return skv_fail(err, SKV_ERR_NOMEM, "out of memory reading GGUF");
    for (size_t i = 0; i < g->n_tensors; i++) v[i] = &g->tensors[i];
    qsort(v, g->n_tensors, sizeof *v, by_data);
    for (size_t i = 1; i < g->n_tensors && !a; i++)
        if ((size_t)(v[i]->data - v[i - 1]->data) < v[i - 1]->nbytes) a = v[i - 1], b = v[i];
    free(v);
    if (!a) return SKV_OK;
    return skv_fail(err, SKV_ERR_FORMAT, "GGUF tensors '%.*s' and '%.*s' share data bytes (overlapping offsets)",
                    (int)(a->name.len > 64 ? 64 : a->name.len), a->name.ptr, (int)(b->name.len > 64 ? 64 : b->name.len),
                    b->name.ptr);
}

static int parse(skv_gguf *g, skv_err *err)
{
    if (!g->base) return skv_fail(err, SKV_ERR_FORMAT, "not a GGUF file (bad magic)"); /* NULL, 0 bytes */
    cursor c = {g->base, g->base + g->size, err};
    uint32_t magic;
    uint64_t n_t, n_kv;
    int64_t align = GGUF_DEFAULT_ALIGNMENT;
    int rc;
    if (g->size < 4 || (magic = skv_rd32(g->base)) != GGUF_MAGIC)
        return skv_fail(err, SKV_ERR_FORMAT, "not a GGUF file (bad magic)");
    c.p += 4;
    if ((rc = rd_u32(&c, &g->version, "header"))) return rc;
    if (g->version != 2 && g->version != 3)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "GGUF version %u is not supported (2 and 3 are)",
                        g->version);
    if ((rc = rd_u64(&c, &n_t, "header")) || (rc = rd_u64(&c, &n_kv, "header"))) return rc;
    /* each kv needs >= 12 bytes, each tensor info >= 28: bound counts by the file size */
    if (n_kv > GGUF_MAX_KV || n_kv > g->size / 12 || n_t > GGUF_MAX_TENSORS || n_t > g->size / 28)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF header claims %llu tensors and %llu metadata entries: impossible for a %zu-byte file",
                        (unsigned long long)n_t, (unsigned long long)n_kv, g->size);
    g->n_kv = (size_t)n_kv;
    g->n_tensors = (size_t)n_t;
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return skv_fail(err, SKV_ERR_NOMEM, "out of memory reading GGUF");
    if ((rc = parse_kvs(g, &c))) return rc;
    rc = skv_gguf_get_int(g, "general.alignment", &align);
    if (rc == SKV_ERR_FORMAT || align < 1 || align > 65536 || (align & (align - 1)))
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF general.alignment must be a power of two <= 65536");
    for (size_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(g, &c, &g->tensors[i], i))) return rc;
    size_t pos = (size_t)(c.p - g->base);
    size_t data_start = (pos + (size_t)align - 1) / (size_t)align * (size_t)align;
    if (data_start > g->size) {
        if (g->n_tensors) return skv_fail(err, SKV_ERR_FORMAT, "GGUF truncated before the tensor data");
        data_start = g->size;
    }
    if ((rc = resolve_tensors(g, &c, data_start, (size_t)align)) || (rc = check_overlap(g, err))) return rc;
    return check_duplicates(g, err);
}

int skv_gguf_open_mem(const void *data, size_t size, skv_gguf **out, skv_err *err)
{
    skv_gguf *g;
    int rc;
    *out = NULL;
    if (!data && size) return skv_fail(err, SKV_ERR_INVALID_ARG, "NULL buffer");
    if (!(g = calloc(1, sizeof *g))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    g->base = data;
    g->size = size;
    if ((rc = parse(g, err)) != SKV_OK) {
        skv_gguf_close(g);
        return rc;
    }
    *out = g;
    return SKV_OK;
}

static int open_file(const char *path, skv_gguf **out, skv_err *err)
{
    skv_mmap m;
    int rc = skv_mmap_open(path, &m, err);
    *out = NULL;
    if (rc) return rc;
    if ((rc = skv_gguf_open_mem(m.data, m.size, out, err)) != SKV_OK) {
        skv_mmap_close(&m);
        return rc;
    }
    (*out)->map = m;
    return SKV_OK;
}

/* A file's split.no and split.count (0 and 1 when it is not a shard). */
static int split_info(const skv_gguf *g, const char *path, int64_t *no, int64_t *count, skv_err *err)
{
    int rc_c = skv_gguf_get_int(g, "split.count", count), rc_n = skv_gguf_get_int(g, "split.no", no);
    if (rc_c == SKV_ERR_RANGE) *count = 1;
    if (rc_n == SKV_ERR_RANGE) *no = 0;
    if (rc_c == SKV_ERR_FORMAT || rc_n == SKV_ERR_FORMAT || *count < 1 || *count > GGUF_MAX_SPLITS || *no < 0 ||
        *no >= *count)
        return skv_fail(err, SKV_ERR_FORMAT, "'%s': split.no / split.count are not a shard number and count (1..%d)",
                        path, GGUF_MAX_SPLITS);
    return SKV_OK;
}

/* Opens the other shards of a split model whose first shard g was opened from path, and
 * merges their tensors into g's table (the metadata stays the first shard's, as llama.cpp
 * reads it). The shards are found by name: PREFIX-00001-of-0000N.gguf -> PREFIX-0000i-of-
 * 0000N.gguf; each must say it is shard i of the same N, and the names must be unique
 * across all of them. */
static int open_shards(skv_gguf *g, const char *path, skv_err *err)
{
    int64_t no, count, total_hint;
    char tail[40];
    int rc = split_info(g, path, &no, &count, err);
    if (rc || count == 1) return rc;
    size_t plen = strlen(path), tlen = (size_t)snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", 1, (int)count);
    if (no != 0)
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "'%s' is shard %lld of %lld of a split model: give the first one (its name ends in %s)", path,
                        (long long)no + 1, (long long)count, tail);
    if (plen <= tlen || strcmp(path + plen - tlen, tail))
        return skv_fail(err, SKV_ERR_FORMAT,
                        "'%s' is the first of %lld shards of a split model, but its name does not end in %s, so "
                        "the others cannot be found (keep gguf-split's file names)",
                        path, (long long)count, tail);
    char *p = malloc(plen + 1);
    size_t total = g->n_tensors;
    if (!p || !(g->shards = calloc((size_t)count - 1, sizeof *g->shards))) {
        free(p);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory opening a split model");
    }
    for (int64_t i = 1; i < count && !rc; i++) {
        int64_t sno, scount;
        snprintf(p, plen + 1, "%.*s-%05d-of-%05d.gguf", (int)(plen - tlen), path, (int)i + 1, (int)count);
        if ((rc = open_file(p, &g->shards[g->n_shards], err))) {
            char why[SKV_ERR_MSG];
            snprintf(why, sizeof why, "%s", err ? err->msg : "");
            rc = skv_fail(err, rc, "split model '%s': shard %lld of %lld: %s", path, (long long)i + 1,
                          (long long)count, why);
            break;
        }
        skv_gguf *sh = g->shards[g->n_shards++];
        if ((rc = split_info(sh, p, &sno, &scount, err))) break;
        if (sno != i || scount != count)
            rc = skv_fail(err, SKV_ERR_FORMAT, "'%s' says it is shard %lld of %lld, not %lld of %lld", p,
                          (long long)sno + 1, (long long)scount, (long long)i + 1, (long long)count);
        total += sh->n_tensors;
        g->size += sh->size;
    }
    free(p);
    if (rc) return rc;
    if (skv_gguf_get_int(g, "split.tensors.count", &total_hint) == SKV_OK && (uint64_t)total_hint != total)
        return skv_fail(err, SKV_ERR_FORMAT, "split model '%s': split.tensors.count says %lld tensors, its %lld shards hold %zu",
                        path, (long long)total_hint, (long long)count, total);
    skv_gguf_tensor *t = malloc((total ? total : 1) * sizeof *t);
    if (!t) return skv_fail(err, SKV_ERR_NOMEM, "out of memory opening a split model");
    size_t at = g->n_tensors;
    memcpy(t, g->tensors, at * sizeof *t);
    for (size_t i = 0; i < g->n_shards; i++) {
        memcpy(t + at, g->shards[i]->tensors, g->shards[i]->n_tensors * sizeof *t);
        at += g->shards[i]->n_tensors;
    }
    free(g->tensors);
    g->tensors = t;
    g->n_tensors = total;
    return index_tensors(g, err);
}

int skv_gguf_open(const char *path, skv_gguf **out, skv_err *err)
{
    int rc = open_file(path, out, err);
    if (rc == SKV_OK && (rc = open_shards(*out, path, err))) {
        skv_gguf_close(*out);
        *out = NULL;
    }
    return rc;
}

void skv_gguf_close(skv_gguf *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n_shards; i++) skv_gguf_close(g->shards[i]);
    free(g->shards);
    for (size_t i = 0; i < g->n_ovr; i++) free(g->ovr_buf[i]);
    free(g->ovr), free(g->ovr_buf);
    free(g->kv);
    free(g->tensors);
    free(g->kv_idx);
    free(g->t_idx);
    skv_mmap_close(&g->map);
    free(g);
}

uint32_t skv_gguf_version(const skv_gguf *g) { return g->version; }
size_t skv_gguf_n_tensors(const skv_gguf *g) { return g->n_tensors; }
size_t skv_gguf_file_size(const skv_gguf *g) { return g->size; }

const skv_gguf_tensor *skv_gguf_tensor_at(const skv_gguf *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

/* (The index entries are the first members of their structs.) */
const skv_gguf_tensor *skv_gguf_find_tensor(const skv_gguf *g, const char *name)
{
    return (const skv_gguf_tensor *)(const void *)index_find(g->t_idx, g->n_tensors, name);
}

/* During parse (general.alignment) the index is not built yet: a linear search then. */
static const gguf_kv *find_kv(const skv_gguf *g, const char *key)
{
    for (size_t i = g->n_ovr; i-- > 0;)
        if (str_eq(g->ovr[i].key, key)) return &g->ovr[i];
    if (g->kv_idx) return (const gguf_kv *)(const void *)index_find(g->kv_idx, g->n_kv, key);
    for (size_t i = 0; i < g->n_kv; i++)
        if (str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

int skv_gguf_has(const skv_gguf *g, const char *key) { return find_kv(g, key) != NULL; }

/* The value of an override spec's TYPE:VALUE as GGUF bytes in buf (at most 8 + the text's
 * length): its GGUF type, or -1 when the value does not parse. */
static int ovr_value(const char *type, size_t tl, const char *v, uint8_t *buf, size_t *n)
{
    char *end;
    if (tl == 3 && !memcmp(type, "int", 3)) {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return -1;
        skv_wr64(buf, (uint64_t)x), *n = 8;
        return SKV_GGUF_I64;
    }
    if (tl == 5 && !memcmp(type, "float", 5)) {
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) return -1;
        uint64_t u;
        memcpy(&u, &x, 8);
        skv_wr64(buf, u), *n = 8;
        return SKV_GGUF_F64;
    }
    if (tl == 4 && !memcmp(type, "bool", 4)) {
        if (strcmp(v, "true") && strcmp(v, "false")) return -1;
        buf[0] = !strcmp(v, "true"), *n = 1;
        return SKV_GGUF_BOOL;
    }
    if (tl == 3 && !memcmp(type, "str", 3)) {
        size_t len = strlen(v);
        skv_wr64(buf, (uint64_t)len);
        memcpy(buf + 8, v, len), *n = 8 + len;
        return SKV_GGUF_STRING;
    }
    return -1;
}

int skv_gguf_override(skv_gguf *g, const char *spec, skv_err *err)
{
    const char *eq = spec ? strchr(spec, '=') : NULL, *colon = eq ? strchr(eq + 1, ':') : NULL;
    size_t kl = eq ? (size_t)(eq - spec) : 0, vl = colon ? strlen(colon + 1) : 0;
    if (!colon || !kl || kl > 255 || vl > SKV_GGUF_MAX_OVERRIDE)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "metadata override '%.80s': expected KEY=TYPE:VALUE (TYPE int, float, bool or str)",
                        spec ? spec : "(null)");
    uint8_t *buf = malloc(kl + 8 + vl + 1);
    gguf_kv *o = buf ? realloc(g->ovr, (g->n_ovr + 1) * sizeof *o) : NULL;
    if (o) g->ovr = o;
    uint8_t **b = o ? realloc(g->ovr_buf, (g->n_ovr + 1) * sizeof *b) : NULL;
    if (!b) return free(buf), skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    g->ovr_buf = b;
    size_t n = 0;
    int t = ovr_value(eq + 1, (size_t)(colon - eq - 1), colon + 1, buf + kl, &n);
    if (t < 0) {
        free(buf);
        return skv_fail(err, SKV_ERR_INVALID_ARG, "metadata override '%.80s': '%.40s' is not a value of type '%.*s' (int, float, bool: true or false, str)",
                        spec, colon + 1, (int)(colon - eq - 1 > 10 ? 10 : colon - eq - 1), eq + 1);
    }
    memcpy(buf, spec, kl);
    g->ovr[g->n_ovr] = (gguf_kv){{(const char *)buf, kl}, (uint32_t)t, 0, 0, buf + kl};
    g->ovr_buf[g->n_ovr++] = buf;
    return SKV_OK;
}

/* Reads a scalar integer of GGUF type t at p; returns 0 if t is not an integer type. */
static int int_at(uint32_t t, const uint8_t *p, int64_t *out)
{
    switch (t) {
    case SKV_GGUF_U8: *out = p[0]; return 1;
    case SKV_GGUF_I8: *out = (int8_t)p[0]; return 1;
    case SKV_GGUF_BOOL: *out = p[0]; return 1;
    case SKV_GGUF_U16: *out = skv_rd16(p); return 1;
    case SKV_GGUF_I16: *out = (int16_t)skv_rd16(p); return 1;
    case SKV_GGUF_U32: *out = skv_rd32(p); return 1;
    case SKV_GGUF_I32: *out = (int32_t)skv_rd32(p); return 1;
    case SKV_GGUF_I64: *out = (int64_t)skv_rd64(p); return 1;
    case SKV_GGUF_U64:
        if (skv_rd64(p) > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)skv_rd64(p);
        return 1;
    default: return 0;
    }
}

int skv_gguf_get_int(const skv_gguf *g, const char *key, int64_t *out)
{
    const gguf_kv *kv = find_kv(g, key);
    int64_t v;
    if (!kv) return SKV_ERR_RANGE;
    if (!int_at(kv->type, kv->val, &v)) return SKV_ERR_FORMAT;
    *out = v;
    return SKV_OK;
}

int skv_gguf_get_float(const skv_gguf *g, const char *key, double *out)
{
    const gguf_kv *kv = find_kv(g, key);
    int64_t v;
    if (!kv) return SKV_ERR_RANGE;
    if (kv->type == SKV_GGUF_F32) {
        *out = skv_rdf32(kv->val);
    } else if (kv->type == SKV_GGUF_F64) {
        uint64_t u = skv_rd64(kv->val);
        double d;
        memcpy(&d, &u, 8);
        *out = d;
    } else if (int_at(kv->type, kv->val, &v)) {
        *out = (double)v;
    } else {
        return SKV_ERR_FORMAT;
    }
    return SKV_OK;
}

int skv_gguf_get_bool(const skv_gguf *g, const char *key, int *out)
{
    int64_t v;
    int rc = skv_gguf_get_int(g, key, &v);
    if (rc) return rc;
    *out = v != 0;
    return SKV_OK;
}

int skv_gguf_get_str(const skv_gguf *g, const char *key, skv_gguf_str *out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return SKV_ERR_RANGE;
    if (kv->type != SKV_GGUF_STRING) return SKV_ERR_FORMAT;
    out->len = (size_t)skv_rd64(kv->val);
    out->ptr = (const char *)kv->val + 8;
    return SKV_OK;
}

int skv_gguf_get_arr(const skv_gguf *g, const char *key, uint32_t *elem_type, size_t *n)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return SKV_ERR_RANGE;
    if (kv->type != SKV_GGUF_ARRAY) return SKV_ERR_FORMAT;
    *elem_type = kv->arr_type;
    *n = (size_t)kv->arr_n;
    return SKV_OK;
}

static const gguf_kv *find_arr(const skv_gguf *g, const char *key, uint32_t t, size_t n)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != SKV_GGUF_ARRAY || kv->arr_type != t || kv->arr_n != n) return NULL;
    return kv;
}

int skv_gguf_arr_strings(const skv_gguf *g, const char *key, skv_gguf_str *out, size_t n)
{
    const gguf_kv *kv = find_arr(g, key, SKV_GGUF_STRING, n);
    const uint8_t *p;
    if (!kv) return SKV_ERR_FORMAT;
    p = kv->val;
    for (size_t i = 0; i < n; i++) { /* lengths were validated by parse() */
        out[i].len = (size_t)skv_rd64(p);
        out[i].ptr = (const char *)p + 8;
        p += 8 + out[i].len;
    }
    return SKV_OK;
}

int skv_gguf_arr_f32(const skv_gguf *g, const char *key, float *out, size_t n)
{
    const gguf_kv *kv = find_arr(g, key, SKV_GGUF_F32, n);
    if (!kv) return SKV_ERR_FORMAT;
    for (size_t i = 0; i < n; i++) out[i] = skv_rdf32(kv->val + 4 * i);
    return SKV_OK;
}

int skv_gguf_arr_i32(const skv_gguf *g, const char *key, int32_t *out, size_t n)
{
    const gguf_kv *kv = find_kv(g, key);
    size_t sz;
    int64_t v;
    if (!kv || kv->type != SKV_GGUF_ARRAY || kv->arr_n != n) return SKV_ERR_FORMAT;
    sz = scalar_size(kv->arr_type);
    if (!sz || kv->arr_type == SKV_GGUF_F32 || kv->arr_type == SKV_GGUF_F64) return SKV_ERR_FORMAT;
    for (size_t i = 0; i < n; i++) {
        if (!int_at(kv->arr_type, kv->val + sz * i, &v) || v < INT32_MIN || v > INT32_MAX) return SKV_ERR_FORMAT;
        out[i] = (int32_t)v;
    }
    return SKV_OK;
}
