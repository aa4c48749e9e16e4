/* Raw KV dumps (src/engine/kvdump.c, docs/kvdump.md) and the KV digest.
 *
 * With stories260K: a dump written through the public API reads back with the
 * same tokens and values (f32 bit-exact, f16 equal to the f16 rounding), and
 * its bytes match the spec as parsed here independently. Every truncation,
 * every flipped bit pattern, wrong magic/version and forged header is refused
 * with a clear message. A dump written by this file's own spec-following
 * writer (no model needed) is read back too.
 *
 * SEQKV_WRITE_CORPUS=<dir> also writes seed inputs for fuzz/fuzz_kvdump.c to
 * <dir>/kvdump/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/f16.h"
#include "seqkv.h"
#include "test.h"
#include "core/util.h"

#define NPOS 20

static char tmpdir[512];
static skv_model *g_model; /* stories260K.gguf, or NULL */

/* ---- helpers ----------------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long len;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc((size_t)len + 1)) != NULL) {
        if (fread(b, 1, (size_t)len, f) != (size_t)len) {
            free(b);
            b = NULL;
        }
        *n = (size_t)len;
    }
    fclose(f);
    return b;
}

static int spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

/* Writes bytes to a temp file and reads it as a dump; status, *d and err as skv_kvdump_read. */
static int read_bytes(const uint8_t *p, size_t n, skv_kvdump **d, char *err, size_t cap)
{
    char path[700];
    int rc;
    tmp_path(path, sizeof path, "probe.skvd");
    if (!spit(path, p, n)) return snprintf(err, cap, "cannot write probe"), SKV_ERR_IO;
    rc = skv_kvdump_read(path, d, err, cap);
    return rc; /* the probe file is reused, removed at exit */
}

/* 1 if bytes are refused with status and phrase (and no dump returned). */
static int dump_refused(const uint8_t *p, size_t n, int status, const char *phrase, char *why, size_t cap)
{
    char err[1024] = "";
    skv_kvdump *d = (skv_kvdump *)&err; /* must come back NULL */
    int rc = read_bytes(p, n, &d, err, sizeof err), ok = rc == status && d == NULL && strstr(err, phrase);
    if (!ok) snprintf(why, cap, "expected %d with '%s'; got %d '%s'", status, phrase, rc, err);
    if (rc == SKV_OK) skv_kvdump_free(d);
    return ok;
}

static void make_tokens(int32_t *t, size_t n, int vocab, unsigned seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    t[0] = 1;
    for (size_t i = 1; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        t[i] = (int32_t)(s % (uint64_t)vocab);
    }
}

static skv_ctx *prefilled(const int32_t *tok, size_t n)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 64;
    if (skv_ctx_create(g_model, &p, &c) != SKV_OK) return NULL;
    if (skv_prefill(c, tok, n, SKV_LOGITS_NONE, NULL) != SKV_OK) {
        skv_ctx_free(c);
        return NULL;
    }
    return c;
}

/* ---- spec-following writer (independent of src/engine/kvdump.c) ------------------------- */

typedef struct {
    uint32_t dtype, n_layer, n_head_kv, head_dim, n_pos;
    uint8_t fp[16];
} dump_hdr;

/* vals: n_layer*2*n_head_kv*n_pos*head_dim floats in file order. Exact-size heap block. */
static uint8_t *spec_dump(const dump_hdr *h, const int32_t *tok, const float *vals, size_t *len)
{
    size_t nval = (size_t)h->n_layer * 2 * h->n_head_kv * h->n_pos * h->head_dim;
    size_t vsz = h->dtype == SKV_KVDUMP_F16 ? 2 : 4, n = 64 + 4 * (size_t)h->n_pos + nval * vsz + 8;
    uint8_t *b = calloc(1, n), *p;
    if (!b) abort();
    memcpy(b, "SKVDUMP", 8);
    skv_wr32(b + 8, 1);
    skv_wr32(b + 12, 64);
    skv_wr32(b + 16, h->dtype);
    skv_wr32(b + 20, h->n_layer);
    skv_wr32(b + 24, h->n_head_kv);
    skv_wr32(b + 28, h->head_dim);
    skv_wr32(b + 32, h->n_pos);
    memcpy(b + 40, h->fp, 16);
    skv_wr64(b + 56, XXH3_64bits(b, 56));
    p = b + 64;
    for (uint32_t i = 0; i < h->n_pos; i++, p += 4) skv_wr32(p, (uint32_t)tok[i]);
    for (size_t i = 0; i < nval; i++, p += vsz) {
        if (vsz == 2) skv_wr16(p, skv_f32_to_f16(vals[i]));
        else skv_wrf32(p, vals[i]);
    }
    skv_wr64(p, XXH3_64bits(b + 64, n - 72));
    *len = n;
    return b;
}

static void resign_header(uint8_t *b) { skv_wr64(b + 56, XXH3_64bits(b, 56)); }
static void resign_data(uint8_t *b, size_t n) { skv_wr64(b + n - 8, XXH3_64bits(b + 64, n - 72)); }

static uint8_t *small_synthetic(uint32_t dtype, size_t *len)
{
    dump_hdr h = {dtype, 2, 1, 2, 3, {0}};
    const int32_t tok[3] = {1, 7, -5};
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = (float)(i - 12) * 0.375f;
    for (int i = 0; i < 16; i++) h.fp[i] = (uint8_t)(0xA0 + i);
    return spec_dump(&h, tok, v, len);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- cases ------------------------------------------------------------------- */

static void synthetic_dump_reads_back(void)
{
    for (uint32_t dtype = 0; dtype < 2; dtype++) {
        size_t len;
        uint8_t *b = small_synthetic(dtype, &len);
        char err[512] = "";
        skv_kvdump *d = NULL;
        int rc = read_bytes(b, len, &d, err, sizeof err), ok = rc == SKV_OK;
        if (ok) {
            ok = d->dtype == (int)dtype && d->n_layer == 2 && d->n_head_kv == 1 && d->head_dim == 2 && d->n_pos == 3 &&
                 d->tokens[0] == 1 && d->tokens[1] == 7 && d->tokens[2] == -5 && d->fingerprint[0] == 0xA0 &&
                 d->fingerprint[15] == 0xAF;
            for (int i = 0; i < 24; i++) ok &= d->kv[i] == (float)(i - 12) * 0.375f; /* exact in f16 too */
        }
        skv_kvdump_free(d);
        free(b);
        CHECK_MSG(rc == SKV_OK, "dtype %u: %s", dtype, err);
        CHECK_MSG(ok, "dtype %u: fields or values differ", dtype);
    }
    /* zero positions: header + trailer only */
    {
        dump_hdr h = {SKV_KVDUMP_F32, 1, 1, 1, 0, {0}};
        size_t len;
        uint8_t *b = spec_dump(&h, NULL, NULL, &len);
        char err[512] = "";
        skv_kvdump *d = NULL;
        int rc = read_bytes(b, len, &d, err, sizeof err);
        int ok = rc == SKV_OK && d->n_pos == 0 && len == 72;
        skv_kvdump_free(d);
        free(b);
        CHECK_MSG(ok, "empty dump: rc %d %s", rc, err);
    }
}

/* Checks one dump file's bytes against the spec and the context it came from. */
static int check_dump_bytes(const uint8_t *b, size_t len, const skv_ctx *c, const int32_t *tok, uint32_t n,
                            uint32_t dtype, const uint8_t fp[16], char *why, size_t cap)
{
    skv_model_info info;
    skv_model_get_info(skv_ctx_model(c), &info);
    size_t hd = (size_t)info.head_dim, vsz = dtype ? 2 : 4;
    size_t nval = (size_t)info.n_layer * 2 * (size_t)info.n_head_kv * n * hd;
    const uint8_t *v = b + 64 + 4 * (size_t)n;
    if (len != 64 + 4 * (size_t)n + nval * vsz + 8) return snprintf(why, cap, "file size %zu", len), 0;
    if (memcmp(b, "SKVDUMP\0", 8) || skv_rd32(b + 8) != 1 || skv_rd32(b + 12) != 64 || skv_rd32(b + 16) != dtype ||
        skv_rd32(b + 20) != (uint32_t)info.n_layer || skv_rd32(b + 24) != (uint32_t)info.n_head_kv ||
        skv_rd32(b + 28) != hd || skv_rd32(b + 32) != n || skv_rd32(b + 36) != 0 || memcmp(b + 40, fp, 16))
        return snprintf(why, cap, "header fields"), 0;
    if (skv_rd64(b + 56) != XXH3_64bits(b, 56)) return snprintf(why, cap, "header checksum"), 0;
    if (skv_rd64(b + len - 8) != XXH3_64bits(b + 64, len - 72)) return snprintf(why, cap, "data checksum"), 0;
    for (uint32_t i = 0; i < n; i++)
        if ((int32_t)skv_rd32(b + 64 + 4 * i) != tok[i]) return snprintf(why, cap, "token %u", i), 0;
    /* values: [layer][K,V][kv_head][pos][dim] */
    for (int l = 0; l < info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < info.n_head_kv; h++) {
                const float *p;
                if (skv_ctx_kv_view(c, l, kind, h, &p) != SKV_OK) return snprintf(why, cap, "kv_view"), 0;
                for (size_t i = 0; i < n * hd; i++, v += vsz) {
                    int same = dtype ? skv_rd16(v) == skv_f32_to_f16(p[i]) : skv_rd32(v) == f32_bits(p[i]);
                    if (!same) return snprintf(why, cap, "value l%d k%d h%d i%zu", l, kind, h, i), 0;
                }
            }
    return 1;
}

static void dump_round_trip(void)
{
    int32_t tok[NPOS];
    uint8_t fp[16];
    skv_ctx *c;
    skv_model_info info;
    if (!g_model) SKIP("stories260K not found (../shared/models)");
    skv_model_get_info(g_model, &info);
    make_tokens(tok, NPOS, info.n_vocab, 3);
    CHECK((c = prefilled(tok, NPOS)) != NULL);
    CHECK(skv_model_fingerprint(g_model, fp) == SKV_OK);
    for (int dtype = 0; dtype < 2; dtype++) {
        char path[700], err[512] = "", why[256] = "";
        skv_kvdump *d = NULL;
        uint8_t *bytes;
        size_t len = 0;
        int ok;
        uint32_t n = dtype ? NPOS : NPOS - 3; /* a prefix of the cache, and all of it */
        tmp_path(path, sizeof path, dtype ? "rt16.skvd" : "rt32.skvd");
        int rc = skv_kvdump_write(c, tok, n, dtype, path, err, sizeof err);
        if (rc) skv_ctx_free(c);
        CHECK_MSG(rc == SKV_OK, "write: %s", err);
        bytes = slurp(path, &len);
        ok = bytes && check_dump_bytes(bytes, len, c, tok, n, (uint32_t)dtype, fp, why, sizeof why);
        free(bytes);
        rc = skv_kvdump_read(path, &d, err, sizeof err);
        unlink(path);
        if (!ok || rc) skv_ctx_free(c), skv_kvdump_free(d);
        CHECK_MSG(ok, "dtype %d bytes: %s", dtype, why);
        CHECK_MSG(rc == SKV_OK, "read: %s", err);
        ok = d->dtype == dtype && d->n_layer == info.n_layer && d->n_head_kv == info.n_head_kv &&
             d->head_dim == info.head_dim && d->n_pos == n && !memcmp(d->fingerprint, fp, 16) &&
             !memcmp(d->tokens, tok, n * sizeof *tok);
        const float *kv = d->kv;
        for (int l = 0; ok && l < info.n_layer; l++)
            for (int kind = 0; kind < 2; kind++)
                for (int h = 0; h < info.n_head_kv; h++) {
                    const float *p;
                    skv_ctx_kv_view(c, l, kind, h, &p);
                    for (size_t i = 0; i < (size_t)n * (size_t)info.head_dim; i++, kv++) {
                        float want = dtype ? skv_f16_to_f32(skv_f32_to_f16(p[i])) : p[i];
                        ok &= f32_bits(*kv) == f32_bits(want);
                    }
                }
        skv_kvdump_free(d);
        if (!ok) skv_ctx_free(c);
        CHECK_MSG(ok, "dtype %d: read-back fields or values differ", dtype);
    }
    /* an empty dump of a non-empty cache */
    {
        char path[700], err[512] = "";
        skv_kvdump *d = NULL;
        int rc;
        tmp_path(path, sizeof path, "empty.skvd");
        rc = skv_kvdump_write(c, NULL, 0, SKV_KVDUMP_F16, path, err, sizeof err);
        if (rc == SKV_OK) rc = skv_kvdump_read(path, &d, err, sizeof err);
        unlink(path);
        int ok = rc == SKV_OK && d->n_pos == 0 && d->n_layer == info.n_layer;
        skv_kvdump_free(d);
        if (!ok) skv_ctx_free(c);
        CHECK_MSG(ok, "empty dump: rc %d %s", rc, err);
    }
    skv_ctx_free(c);
}

static void write_refuses_bad_arguments(void)
{
    int32_t tok[4] = {1, 2, 3, 4};
    char path[700], err[512] = "";
    skv_ctx *c;
    if (!g_model) SKIP("stories260K not found (../shared/models)");
    CHECK((c = prefilled(tok, 4)) != NULL);
    tmp_path(path, sizeof path, "w.skvd");
    int r1 = skv_kvdump_write(c, tok, 5, SKV_KVDUMP_F32, path, err, sizeof err);
    int p1 = strstr(err, "5 positions but the cache holds 4") != NULL;
    int r2 = skv_kvdump_write(c, tok, 4, 2, path, err, sizeof err);
    int r3 = skv_kvdump_write(c, NULL, 4, SKV_KVDUMP_F32, path, err, sizeof err);
    int r4 = skv_kvdump_write(NULL, tok, 0, SKV_KVDUMP_F32, path, err, sizeof err);
    int r5 = skv_kvdump_write(c, tok, 4, SKV_KVDUMP_F32, NULL, err, sizeof err);
    tmp_path(path, sizeof path, "no-such-dir/w.skvd");
    int r6 = skv_kvdump_write(c, tok, 4, SKV_KVDUMP_F32, path, err, sizeof err);
    int p6 = strstr(err, "cannot create") != NULL;
    skv_ctx_free(c);
    CHECK_EQ_INT(r1, SKV_ERR_INVALID_ARG);
    CHECK(p1);
    CHECK_EQ_INT(r2, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r3, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r4, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r5, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r6, SKV_ERR_IO);
    CHECK(p6);
}

static void read_refuses_bad_arguments(void)
{
    char path[700], err[512] = "";
    skv_kvdump *d = (skv_kvdump *)&err;
    tmp_path(path, sizeof path, "absent.skvd");
    CHECK(skv_kvdump_read(path, &d, err, sizeof err) == SKV_ERR_IO && d == NULL && strstr(err, "cannot open"));
    CHECK(skv_kvdump_read(tmpdir, &d, err, sizeof err) == SKV_ERR_IO && d == NULL);
    CHECK(skv_kvdump_read(NULL, &d, err, sizeof err) == SKV_ERR_INVALID_ARG);
    CHECK(skv_kvdump_read(path, NULL, err, sizeof err) == SKV_ERR_INVALID_ARG);
    skv_kvdump_free(NULL);
}

/* The expected refusal for a dump whose byte i was corrupted. */
static void flip_expectation(size_t i, int *status, const char **phrase)
{
    if (i < 8) *status = SKV_ERR_FORMAT, *phrase = "bad magic";
    else if (i < 12) *status = SKV_ERR_UNSUPPORTED, *phrase = "is not supported (1 is)";
    else if (i < 16) *status = SKV_ERR_FORMAT, *phrase = "is not 64 (corrupt file)";
    else if (i < 64) *status = SKV_ERR_FORMAT, *phrase = "header checksum mismatch";
    else *status = SKV_ERR_FORMAT, *phrase = "data checksum mismatch";
}

/* Every prefix and every single-byte corruption of b (mask xored in) is refused. */
static int corruptions_refused(const uint8_t *b, size_t len, char *why, size_t cap)
{
    uint8_t *c = malloc(len + 1);
    int ok = 1;
    if (!c) abort();
    for (size_t k = 0; ok && k < len; k++)
        ok = dump_refused(b, k, SKV_ERR_FORMAT, k < 72 ? "bad magic" : "header sizes do not match", why, cap);
    memcpy(c, b, len);
    c[len] = 0;
    if (ok) ok = dump_refused(c, len + 1, SKV_ERR_FORMAT, "header sizes do not match", why, cap);
    static const uint8_t masks[] = {0x01, 0x80, 0xFF, 0x10, 0x42};
    for (size_t i = 0; ok && i < len; i++) {
        uint8_t m = masks[i % sizeof masks]; /* one corruption per byte, patterns rotating */
        int status;
        const char *phrase;
        flip_expectation(i, &status, &phrase);
        c[i] ^= m;
        ok = dump_refused(c, len, status, phrase, why, cap);
        c[i] ^= m;
        if (!ok) {
            size_t w = strlen(why);
            snprintf(why + w, cap - w, " (byte %zu ^ 0x%02x)", i, m);
        }
    }
    free(c);
    return ok;
}

static void read_refuses_corruption(void)
{
    /* synthetic dumps (no model needed) */
    for (uint32_t dtype = 0; dtype < 2; dtype++) {
        size_t len;
        char why[1200] = "";
        uint8_t *b = small_synthetic(dtype, &len);
        int ok = corruptions_refused(b, len, why, sizeof why);
        free(b);
        CHECK_MSG(ok, "synthetic dtype %u: %s", dtype, why);
    }
    /* real dumps of 3 positions */
    if (!g_model) SKIP("stories260K not found (../shared/models)");
    int32_t tok[3] = {1, 100, 200};
    skv_ctx *c;
    CHECK((c = prefilled(tok, 3)) != NULL);
    for (int dtype = 0; dtype < 2; dtype++) {
        char path[700], err[512] = "", why[1200] = "";
        size_t len = 0;
        uint8_t *b;
        int ok;
        tmp_path(path, sizeof path, "small.skvd");
        int rc = skv_kvdump_write(c, tok, 3, dtype, path, err, sizeof err);
        b = rc ? NULL : slurp(path, &len);
        unlink(path);
        if (!b) skv_ctx_free(c);
        CHECK_MSG(b != NULL, "write: %s", err);
        ok = corruptions_refused(b, len, why, sizeof why);
        free(b);
        if (!ok) skv_ctx_free(c);
        CHECK_MSG(ok, "dtype %d: %s", dtype, why);
    }
    skv_ctx_free(c);
}

static void read_refuses_forged_headers(void)
{
    size_t len;
    uint8_t *b = small_synthetic(SKV_KVDUMP_F32, &len), *c = malloc(len);
    char why[1024];
    if (!c) abort();
    /* header fields changed with a correct header checksum */
    static const struct { size_t off; uint32_t v; int status; const char *phrase; } forged[] = {
        {8, 2, SKV_ERR_UNSUPPORTED, "KV dump version 2 is not supported"},
        {8, 0, SKV_ERR_UNSUPPORTED, "KV dump version 0 is not supported"},
        {12, 72, SKV_ERR_FORMAT, "header size 72 is not 64"},
        {16, 2, SKV_ERR_FORMAT, "header sizes do not match"},
        {16, 1, SKV_ERR_FORMAT, "header sizes do not match"}, /* f16 claimed for f32 data */
        {20, 0, SKV_ERR_FORMAT, "header sizes do not match"},
        {20, 3, SKV_ERR_FORMAT, "header sizes do not match"},
        {20, 0x80000000u, SKV_ERR_FORMAT, "header sizes do not match"},
        {24, 0, SKV_ERR_FORMAT, "header sizes do not match"},
        {24, 0xFFFFFFFFu, SKV_ERR_FORMAT, "header sizes do not match"},
        {28, 4097, SKV_ERR_FORMAT, "header sizes do not match"},
        {32, 4, SKV_ERR_FORMAT, "header sizes do not match"},
        {32, 0xFFFFFFFFu, SKV_ERR_FORMAT, "header sizes do not match"},
    };
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        memcpy(c, b, len);
        skv_wr32(c + forged[i].off, forged[i].v);
        resign_header(c);
        int ok = dump_refused(c, len, forged[i].status, forged[i].phrase, why, sizeof why);
        if (!ok) free(b), free(c);
        CHECK_MSG(ok, "forgery %zu: %s", i, why);
    }
    /* a changed value with a recomputed data checksum is read as written: the checksum
     * detects corruption, it does not authenticate */
    {
        skv_kvdump *d = NULL;
        char err[512] = "";
        memcpy(c, b, len);
        skv_wrf32(c + 64 + 12, 42.0f);
        resign_data(c, len);
        int rc = read_bytes(c, len, &d, err, sizeof err), ok = rc == SKV_OK && d->kv[0] == 42.0f;
        skv_kvdump_free(d);
        if (!ok) free(b), free(c);
        CHECK_MSG(ok, "re-signed dump: rc %d %s", rc, err);
    }
    /* a file of only the magic, and an empty file */
    CHECK_MSG(dump_refused(b, 8, SKV_ERR_FORMAT, "bad magic", why, sizeof why), "%s", why);
    CHECK_MSG(dump_refused(b, 0, SKV_ERR_FORMAT, "bad magic", why, sizeof why), "%s", why);
    free(b);
    free(c);
}

/* Digest recomputed from the spec in seqkv.h: XXH3-128 over layer, kind, kv_head,
 * position, dimension as little-endian f32, canonical (big-endian) bytes. */
static void spec_digest(const skv_ctx *c, int n, uint8_t out[16])
{
    skv_model_info info;
    XXH3_state_t *st = XXH3_createState();
    XXH128_canonical_t cn;
    skv_model_get_info(skv_ctx_model(c), &info);
    if (!st) abort();
    XXH3_128bits_reset(st);
    for (int l = 0; l < info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < info.n_head_kv; h++) {
                const float *p;
                skv_ctx_kv_view(c, l, kind, h, &p);
                for (size_t i = 0; i < (size_t)n * (size_t)info.head_dim; i++) {
                    uint8_t b[4];
                    skv_wrf32(b, p[i]);
                    XXH3_128bits_update(st, b, 4);
                }
            }
    XXH128_canonicalFromHash(&cn, XXH3_128bits_digest(st));
    memcpy(out, cn.digest, 16);
    XXH3_freeState(st);
}

static void kv_digest_tracks_the_cache(void)
{
    int32_t tok[NPOS], tok2[NPOS];
    uint8_t da[16], da1[16], db[16], dc[16], dc1[16], ds[16], dm[16], d0a[16], d0c[16];
    skv_ctx *a, *b, *c;
    skv_model_info info;
    if (!g_model) SKIP("stories260K not found (../shared/models)");
    skv_model_get_info(g_model, &info);
    make_tokens(tok, NPOS, info.n_vocab, 11);
    memcpy(tok2, tok, sizeof tok);
    tok2[NPOS - 1] = (tok[NPOS - 1] + 1) % info.n_vocab; /* differs in the last position only */
    a = prefilled(tok, NPOS);
    b = prefilled(tok, NPOS);
    c = prefilled(tok2, NPOS);
    int ok = a && b && c;
    if (ok) {
        ok = !skv_ctx_kv_digest(a, NPOS, da) && !skv_ctx_kv_digest(a, NPOS - 1, da1) && !skv_ctx_kv_digest(b, NPOS, db) &&
             !skv_ctx_kv_digest(c, NPOS, dc) && !skv_ctx_kv_digest(c, NPOS - 1, dc1) &&
             !skv_ctx_kv_digest(a, 0, d0a) && !skv_ctx_kv_digest(c, 0, d0c);
        spec_digest(a, NPOS, ds);
    }
    int same_ab = ok && !memcmp(da, db, 16), spec = ok && !memcmp(da, ds, 16);
    int npos_differs = ok && memcmp(da, da1, 16) != 0, last_differs = ok && memcmp(da, dc, 16) != 0;
    int prefix_same = ok && !memcmp(da1, dc1, 16) && !memcmp(d0a, d0c, 16);
    int bad_args = a && skv_ctx_kv_digest(a, NPOS + 1, dm) == SKV_ERR_INVALID_ARG &&
                   skv_ctx_kv_digest(a, -1, dm) == SKV_ERR_INVALID_ARG && skv_ctx_kv_digest(NULL, 0, dm) == SKV_ERR_INVALID_ARG;
    /* one value changed in place (the last V value of the last layer), then restored */
    int one_value = 0, restored = 0;
    if (ok) {
        const float *p;
        skv_ctx_kv_view(a, info.n_layer - 1, 1, info.n_head_kv - 1, &p);
        float *w = (float *)(uintptr_t)p + (size_t)(NPOS - 1) * (size_t)info.head_dim + (size_t)info.head_dim - 1;
        uint32_t u = f32_bits(*w) ^ 1u, orig;
        float nv;
        memcpy(&orig, w, 4);
        memcpy(&nv, &u, 4);
        *w = nv;
        one_value = !skv_ctx_kv_digest(a, NPOS, dm) && memcmp(dm, da, 16) != 0;
        memcpy(w, &orig, 4);
        restored = !skv_ctx_kv_digest(a, NPOS, dm) && !memcmp(dm, da, 16);
        /* the first value of layer 0's K too */
        skv_ctx_kv_view(a, 0, 0, 0, &p);
        w = (float *)(uintptr_t)p;
        memcpy(&orig, w, 4);
        *w = -*w == *w ? 1.0f : -*w;
        one_value &= !skv_ctx_kv_digest(a, NPOS, dm) && memcmp(dm, da, 16) != 0;
        memcpy(w, &orig, 4);
    }
    skv_ctx_free(a);
    skv_ctx_free(b);
    skv_ctx_free(c);
    CHECK_MSG(ok, "contexts or digests failed");
    CHECK_MSG(same_ab, "same tokens, different digests");
    CHECK_MSG(spec, "digest differs from the XXH3-128 of the canonical order");
    CHECK_MSG(npos_differs, "digest ignores n_pos");
    CHECK_MSG(last_differs, "digest ignores a different last token");
    CHECK_MSG(prefix_same, "digest of an equal prefix differs");
    CHECK_MSG(bad_args, "bad n_pos not refused");
    CHECK_MSG(one_value, "digest ignores a one-bit change of one KV value");
    CHECK_MSG(restored, "digest not restored with the value");
}

/* ---- fuzz seed corpus ------------------------------------------------------------ */

static void put_seed(const char *root, const char *name, const uint8_t *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/kvdump", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/kvdump/%s", root, name);
    if (!spit(path, p, n)) fprintf(stderr, "cannot write %s\n", path);
}

static void write_corpus(const char *root)
{
    size_t len;
    uint8_t *b;
    for (uint32_t dtype = 0; dtype < 2; dtype++) {
        b = small_synthetic(dtype, &len);
        put_seed(root, dtype ? "synthetic_f16" : "synthetic_f32", b, len);
        b[70] ^= 4;
        put_seed(root, dtype ? "synthetic_f16_badsum" : "synthetic_f32_badsum", b, len);
        b[70] ^= 4;
        put_seed(root, dtype ? "synthetic_f16_cut" : "synthetic_f32_cut", b, len - 5);
        free(b);
    }
    b = small_synthetic(SKV_KVDUMP_F32, &len);
    skv_wr32(b + 8, 2);
    resign_header(b);
    put_seed(root, "version2", b, len);
    skv_wr32(b + 8, 1);
    skv_wr32(b + 32, 0xFFFFFFFFu);
    resign_header(b);
    put_seed(root, "npos_huge", b, len);
    free(b);
    {
        dump_hdr h = {SKV_KVDUMP_F16, 1, 1, 1, 0, {0}};
        b = spec_dump(&h, NULL, NULL, &len);
        put_seed(root, "empty_f16", b, len);
        free(b);
    }
    if (g_model) {
        int32_t tok[2] = {1, 300};
        skv_ctx *c = prefilled(tok, 2);
        char path[700], err[256];
        for (int dtype = 0; c && dtype < 2; dtype++) {
            tmp_path(path, sizeof path, "seed.skvd");
            if (skv_kvdump_write(c, tok, (size_t)(2 - dtype), dtype, path, err, sizeof err) == SKV_OK &&
                (b = slurp(path, &len)) != NULL) {
                put_seed(root, dtype ? "stories_f16_n1" : "stories_f32_n2", b, len);
                free(b);
            }
            unlink(path);
        }
        skv_ctx_free(c);
    }
}

/* A dump read back and checked against the bundled model: 0 = SKV_OK, else the status
 * with the message in err. */
static int check_bytes(skv_model *m, const uint8_t *b, size_t n, char *err, size_t cap)
{
    skv_kvdump *d = NULL;
    int rc = read_bytes(b, n, &d, err, cap);
    if (rc == SKV_OK) rc = skv_kvdump_check_model(d, m, err, cap);
    skv_kvdump_free(d);
    return rc;
}

/* A dump made with one model is refused under another (geometry, fingerprint) and one
 * with token ids outside the vocabulary, by skv_kvdump_check_model and by the encoder
 * (skv_encoder_append_kvdump); the model's own dump is accepted. Model: the bundled one. */
static void dump_of_another_model_refused(void)
{
    skv_model *m = NULL;
    skv_model_info mi;
    uint8_t fp[16], *b;
    char err[512] = "";
    size_t n = 0;
    CHECK_MSG(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK, "%s", err);
    skv_model_get_info(m, &mi);
    skv_model_fingerprint(m, fp);
    dump_hdr h = {SKV_KVDUMP_F16, (uint32_t)mi.n_layer, (uint32_t)mi.n_head_kv, (uint32_t)mi.head_dim, 4, {0}};
    size_t nval = (size_t)h.n_layer * 2 * h.n_head_kv * 4 * h.head_dim;
    float *v = calloc(3 * nval, sizeof *v); /* room for each case's larger geometry */
    int32_t tok[4] = {1, 2, 3, 4};
    struct { int field, delta; const char *phrase; } cases[] = {
        {-1, 0, NULL}, {0, 1, "layers"}, {1, 1, "KV heads"}, {2, 2, "KV heads"}, {3, 0, "fingerprint"}, {4, 0, "vocabulary"},
    };
    for (size_t k = 0; v && k < sizeof cases / sizeof cases[0] && !test_cur_failed; k++) {
        dump_hdr c = h;
        int32_t t[4] = {1, 2, 3, 4};
        memcpy(c.fp, fp, 16);
        if (cases[k].field == 0) c.n_layer += (uint32_t)cases[k].delta;
        if (cases[k].field == 1) c.n_head_kv += (uint32_t)cases[k].delta;
        if (cases[k].field == 2) c.head_dim *= (uint32_t)cases[k].delta;
        if (cases[k].field == 3) c.fp[5] ^= 1;
        if (cases[k].field == 4) t[2] = mi.n_vocab;
        b = spec_dump(&c, t, v, &n);
        int rc = check_bytes(m, b, n, err, sizeof err);
        free(b);
        if (!cases[k].phrase) CHECK_MSG(rc == SKV_OK, "own dump: %s", err);
        else CHECK_MSG(rc == SKV_ERR_MISMATCH && strstr(err, cases[k].phrase), "case %zu: %s: %s", k,
                       skv_status_str(rc), err);
    }
    /* through the encoder: refused with its message, the model's own dump appended */
    memcpy(h.fp, fp, 16);
    skv_kvdump *own = NULL, *other = NULL;
    skv_encoder *e = NULL;
    skv_encoder_stats st;
    skv_encoder_params p = skv_encoder_default_params();
    p.codec = SKV_CODEC_TOKENS;
    b = v ? spec_dump(&h, tok, v, &n) : NULL;
    CHECK(b && read_bytes(b, n, &own, err, sizeof err) == SKV_OK);
    b[40] ^= 0x80; /* another model's fingerprint */
    resign_header(b);
    int ro = read_bytes(b, n, &other, err, sizeof err);
    free(b);
    CHECK(ro == SKV_OK && skv_encoder_create(m, &p, &e, err, sizeof err) == SKV_OK);
    CHECK_EQ_INT(skv_encoder_append_kvdump(e, other), SKV_ERR_MISMATCH);
    CHECK_MSG(strstr(skv_encoder_last_error(e), "wrong model") != NULL, "%s", skv_encoder_last_error(e));
    CHECK_EQ_INT(skv_encoder_append_kvdump(e, NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_encoder_append_kvdump(e, own), SKV_OK);
    skv_encoder_get_stats(e, &st);
    CHECK_EQ_INT(st.n_tokens, 4);
    CHECK_EQ_INT(skv_kvdump_check_model(NULL, m, NULL, 0), SKV_ERR_INVALID_ARG);
    skv_encoder_free(e);
    skv_kvdump_free(own);
    skv_kvdump_free(other);
    skv_model_free(m);
    free(v);
}

int main(void)
{
    const char *t = getenv("TMPDIR"), *corpus = getenv("SEQKV_WRITE_CORPUS");
    char path[1024], err[256];
    TEST_BEGIN("test_kvdump");
    /* many small files are written: prefer a RAM file system */
    if (!t || !*t) t = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/skv_test_kvdump_XXXXXX", t);
    if (!mkdtemp(tmpdir)) {
        printf("FAIL test_kvdump:setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    if (test_stories_path(path, sizeof path, "stories260K.gguf") &&
        skv_model_load(path, NULL, &g_model, err, sizeof err) != SKV_OK) {
        printf("FAIL test_kvdump:setup: cannot load %s: %s\n", path, err);
        rmdir(tmpdir);
        return 1;
    }
    if (corpus && *corpus) write_corpus(corpus);
    RUN(synthetic_dump_reads_back);
    RUN(dump_round_trip);
    RUN(write_refuses_bad_arguments);
    RUN(read_refuses_bad_arguments);
    RUN(read_refuses_corruption);
    RUN(read_refuses_forged_headers);
    RUN(kv_digest_tracks_the_cache);
    RUN(dump_of_another_model_refused);
    skv_model_free(g_model);
    tmp_path(path, sizeof path, "probe.skvd");
    unlink(path);
    rmdir(tmpdir);
    TEST_END();
}
