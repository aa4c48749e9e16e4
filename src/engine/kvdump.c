/* Raw KV-cache dumps: a checksummed, little-endian interchange format (docs/kvdump.md).
 *
 *   [0,64)    header: "SKVDUMP\0", u32 version=1, u32 header_size=64, u32 dtype,
 *             u32 n_layer, u32 n_head_kv, u32 head_dim, u32 n_pos, u32 reserved=0,
 *             u8 fingerprint[16], u64 XXH3-64 of bytes [0,56)
 *   [64, ..)  i32 tokens[n_pos]
 *             values [n_layer][2 (K,V)][n_head_kv][n_pos][head_dim] as f32 or f16
 *   last 8    u64 XXH3-64 of everything between the header and this trailer */
#include <errno.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/f16.h"
#include "engine/engine.h"
#include "engine/model.h"

#define KVD_MAGIC "SKVDUMP\0"
#define KVD_VERSION 1
#define KVD_HEADER 64
#define KVD_MAX_DIM (1u << 20)

typedef struct {
    FILE *f;
    XXH3_state_t *st;
    int failed;
} hashed_writer;

static void hw_put(hashed_writer *w, const void *p, size_t n)
{
    if (w->failed) return;
    if (fwrite(p, 1, n, w->f) != n) w->failed = 1;
    XXH3_64bits_update(w->st, p, n);
}

static int write_values(hashed_writer *w, const skv_ctx *c, size_t n, int dtype)
{
    const skv_model *m = skv_ctx_model(c);
    size_t hd = (size_t)m->info.head_dim;
    uint8_t buf[4096];
    for (int l = 0; l < m->info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < m->info.n_head_kv; h++) {
                const float *p;
                skv_ctx_kv_view(c, l, kind, h, &p);
                size_t total = n * hd, k = 0;
                for (size_t i = 0; i < total; i++) {
                    if (dtype == SKV_KVDUMP_F16) {
                        skv_wr16(buf + k, skv_f32_to_f16(p[i]));
                        k += 2;
                    } else {
                        skv_wrf32(buf + k, p[i]);
                        k += 4;
                    }
                    if (k == sizeof buf) {
                        hw_put(w, buf, k);
                        k = 0;
                    }
                }
                hw_put(w, buf, k);
            }
    return w->failed ? SKV_ERR_IO : SKV_OK;
}

static void header_fill(uint8_t hdr[KVD_HEADER], const skv_model *m, size_t n, int dtype, const uint8_t fp[16])
{
    memset(hdr, 0, KVD_HEADER);
    memcpy(hdr, KVD_MAGIC, 8);
    skv_wr32(hdr + 8, KVD_VERSION);
    skv_wr32(hdr + 12, KVD_HEADER);
    skv_wr32(hdr + 16, (uint32_t)dtype);
    skv_wr32(hdr + 20, (uint32_t)m->info.n_layer);
    skv_wr32(hdr + 24, (uint32_t)m->info.n_head_kv);
    skv_wr32(hdr + 28, (uint32_t)m->info.head_dim);
    skv_wr32(hdr + 32, (uint32_t)n);
    memcpy(hdr + 40, fp, 16);
    skv_wr64(hdr + 56, XXH3_64bits(hdr, 56));
}

/* Header, tokens, values and trailer into the open w.f; SKV_ERR_IO on a short write. */
static int write_body(hashed_writer *w, const skv_ctx *c, const uint8_t *hdr, const int32_t *tokens, size_t n,
                      int dtype)
{
    uint8_t b[8];
    int rc;
    XXH3_64bits_reset(w->st);
    if (fwrite(hdr, 1, KVD_HEADER, w->f) != KVD_HEADER) w->failed = 1;
    for (size_t i = 0; i < n; i++) {
        skv_wr32(b, (uint32_t)tokens[i]);
        hw_put(w, b, 4);
    }
    if ((rc = write_values(w, c, n, dtype))) return rc;
    skv_wr64(b, XXH3_64bits_digest(w->st));
    return fwrite(b, 1, 8, w->f) == 8 ? SKV_OK : SKV_ERR_IO;
}

static int skv_kvdump_write_e(const skv_ctx *c, const int32_t *tokens, size_t n, int dtype, const char *path, skv_err *err)
{
    const skv_model *m;
    uint8_t hdr[KVD_HEADER], fp[16];
    char tmp[4096];
    hashed_writer w = {0};
    int rc;
    if (!c || (!tokens && n) || !path || (dtype != SKV_KVDUMP_F32 && dtype != SKV_KVDUMP_F16))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "invalid argument");
    if (skv_ctx_kv_cache_type(c) != SKV_KV_CACHE_F32) /* dumps read the f32 views (kv_view) */
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "KV dumps need an f32 KV cache (the context has kv_cache_type f16)");
    if (n > (size_t)skv_ctx_n_pos(c))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "asked to dump %zu positions but the cache holds %d", n,
                        skv_ctx_n_pos(c));
    m = skv_ctx_model(c);
    if ((rc = skv_model_fingerprint((skv_model *)(uintptr_t)m, fp))) return skv_fail(err, rc, "fingerprint failed");
    header_fill(hdr, m, n, dtype, fp);
    int tlen = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (tlen < 0 || (size_t)tlen >= sizeof tmp) return skv_fail(err, SKV_ERR_INVALID_ARG, "output path too long");
    if (!(w.f = fopen(tmp, "wb"))) return skv_fail(err, SKV_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    if (!(w.st = XXH3_createState())) {
        fclose(w.f);
        remove(tmp);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    rc = write_body(&w, c, hdr, tokens, n, dtype);
    XXH3_freeState(w.st);
    if (fclose(w.f) != 0) rc = SKV_ERR_IO;
    if (rc || rename(tmp, path) != 0) {
        remove(tmp);
        return skv_fail(err, SKV_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    }
    return SKV_OK;
}

int skv_kvdump_write(const skv_ctx *c, const int32_t *tokens, size_t n, int dtype, const char *path,
                     char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kvdump_write_e(c, tokens, n, dtype, path, &e), err, errcap);
}

/* Magic, version, header size and header checksum. */
static int check_header(const skv_mmap *map, const char *path, skv_err *err)
{
    const uint8_t *p = map->data;
    if (map->size < KVD_HEADER + 8 || memcmp(p, KVD_MAGIC, 8))
        return skv_fail(err, SKV_ERR_FORMAT, "'%s' is not a seqkv KV dump (bad magic)", path);
    if (skv_rd32(p + 8) != KVD_VERSION)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "'%s': KV dump version %u is not supported (1 is)", path,
                        skv_rd32(p + 8));
    if (skv_rd32(p + 12) != KVD_HEADER)
        return skv_fail(err, SKV_ERR_FORMAT, "'%s': header size %u is not %d (corrupt file)", path,
                        skv_rd32(p + 12), KVD_HEADER);
    if (skv_rd64(p + 56) != XXH3_64bits(p, 56))
        return skv_fail(err, SKV_ERR_FORMAT, "'%s': header checksum mismatch (corrupt file)", path);
    return SKV_OK;
}

/* The header's geometry into d (no arrays yet); the file must be exactly that long and
 * its data checksum must hold. *nval receives the number of values. */
static int check_geometry(const skv_mmap *map, const char *path, skv_kvdump *d, size_t *nval, skv_err *err)
{
    const uint8_t *p = map->data;
    uint32_t dtype = skv_rd32(p + 16), L = skv_rd32(p + 20), H = skv_rd32(p + 24), hd = skv_rd32(p + 28);
    uint32_t n = skv_rd32(p + 32);
    size_t vsz = dtype == SKV_KVDUMP_F16 ? 2 : 4, need;
    if (dtype > 1 || !L || !H || !hd || L > 4096 || H > 4096 || hd > 4096 || n > KVD_MAX_DIM * 16u ||
        !skv_mul_ok((size_t)L * 2 * H * hd, n, nval) || !skv_mul_ok(*nval, vsz, &need) ||
        !skv_add_ok(need, KVD_HEADER + 8 + (size_t)n * 4, &need) || need != map->size)
        return skv_fail(err, SKV_ERR_FORMAT,
                        "'%s': header sizes do not match the file (%zu bytes): truncated or corrupt", path, map->size);
    if (skv_rd64(p + map->size - 8) != XXH3_64bits(p + KVD_HEADER, map->size - KVD_HEADER - 8))
        return skv_fail(err, SKV_ERR_FORMAT, "'%s': data checksum mismatch (corrupt file)", path);
    d->dtype = (int)dtype;
    d->n_layer = (int)L;
    d->n_head_kv = (int)H;
    d->head_dim = (int)hd;
    d->n_pos = n;
    memcpy(d->fingerprint, p + 40, 16);
    return SKV_OK;
}

/* Tokens and values (f16 widened to f32) from a checked file into d's arrays. */
static void read_arrays(const uint8_t *p, skv_kvdump *d, size_t nval)
{
    const uint8_t *v = p + KVD_HEADER + (size_t)d->n_pos * 4;
    for (size_t i = 0; i < d->n_pos; i++) d->tokens[i] = (int32_t)skv_rd32(p + KVD_HEADER + 4 * i);
    for (size_t i = 0; i < nval; i++)
        d->kv[i] = d->dtype == SKV_KVDUMP_F16 ? skv_f16_to_f32(skv_rd16(v + 2 * i)) : skv_rdf32(v + 4 * i);
}

/* A dump with geom's fields and room for its tokens and nval values. */
static skv_kvdump *dump_alloc(const skv_kvdump *geom, size_t nval)
{
    skv_kvdump *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    *d = *geom;
    d->tokens = malloc(((size_t)d->n_pos + 1) * sizeof *d->tokens);
    d->kv = malloc((nval + 1) * sizeof *d->kv);
    if (d->tokens && d->kv) return d;
    skv_kvdump_free(d);
    return NULL;
}

static int skv_kvdump_read_e(const char *path, skv_kvdump **out, skv_err *err)
{
    skv_mmap map;
    skv_kvdump geom = {0}, *d;
    size_t nval = 0;
    int rc;
    if (!path || !out) return skv_fail(err, SKV_ERR_INVALID_ARG, "invalid argument");
    *out = NULL;
    if ((rc = skv_mmap_open(path, &map, err))) return rc;
    if ((rc = check_header(&map, path, err)) == SKV_OK &&
        (rc = check_geometry(&map, path, &geom, &nval, err)) == SKV_OK) {
        if ((d = dump_alloc(&geom, nval))) {
            read_arrays(map.data, d, nval);
            *out = d;
        } else {
            rc = skv_fail(err, SKV_ERR_NOMEM, "out of memory reading '%s'", path);
        }
    }
    skv_mmap_close(&map);
    return rc;
}

int skv_kvdump_read(const char *path, skv_kvdump **out, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kvdump_read_e(path, out, &e), err, errcap);
}

static void hex16(const uint8_t *d, char *out)
{
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The first token of d outside [0, n_vocab), or -1. */
static long long bad_token(const skv_kvdump *d, int n_vocab)
{
    for (uint32_t i = 0; i < d->n_pos; i++)
        if (d->tokens[i] < 0 || d->tokens[i] >= n_vocab) return (long long)i;
    return -1;
}

int skv_kvdump_check_model_e(const skv_kvdump *d, skv_model *m, skv_err *err)
{
    uint8_t fp[16];
    char a[33], b[33];
    long long bad;
    int rc;
    if (!d || !m) return skv_fail(err, SKV_ERR_INVALID_ARG, "kvdump_check_model: NULL dump or model");
    if ((rc = skv_model_fingerprint(m, fp))) return skv_fail(err, rc, "cannot fingerprint the model");
    hex16(d->fingerprint, a);
    hex16(fp, b);
    if (d->n_layer != m->info.n_layer || d->n_head_kv != m->info.n_head_kv || d->head_dim != m->info.head_dim)
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "wrong model: the KV dump holds %d layers x %d KV heads x %d (model fingerprint %s), the model '%s' has %d x %d x %d (fingerprint %s)",
                        d->n_layer, d->n_head_kv, d->head_dim, a, m->info.name, m->info.n_layer, m->info.n_head_kv,
                        m->info.head_dim, b);
    if (memcmp(fp, d->fingerprint, 16))
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "wrong model: the KV dump was written with model fingerprint %s, but the model given is '%s' (fingerprint %s)",
                        a, m->info.name, b);
    if ((bad = bad_token(d, m->info.n_vocab)) >= 0)
        return skv_fail(err, SKV_ERR_MISMATCH, "KV dump token %lld (id %d) is outside the model's vocabulary of %d",
                        bad, (int)d->tokens[bad], m->info.n_vocab);
    return SKV_OK;
}

int skv_kvdump_check_model(const skv_kvdump *d, skv_model *m, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_kvdump_check_model_e(d, m, &e), err, errcap);
}

void skv_kvdump_free(skv_kvdump *d)
{
    if (!d) return;
    free(d->tokens);
    free(d->kv);
    free(d);
}
