/* Which model a store was made with: the header's name, fingerprint and geometry (store.c)
 * and the "model" meta record, the model file's path, so a caller can open the model
 * without being told which (skv_store_model_info needs no model).
 *
 *   "model" record:  0 u32 "SKVM" | 4 u32 path length L (1..4095) | 8 path[L] (no NUL) |
 *                    8+L u64 XXH3-64 of the bytes before it
 *
 * The path is recorded when the store is created, or by the first put of a handle that
 * knows it (skv_store_params.model_path), and is never changed after. */
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/log.h"
#include "store/store_int.h"

/* Writes st->model_path as the record unless one exists (or no path is known). */
static int model_rec_write(tx *t)
{
    skv_store *st = t->st;
    const uint8_t *v;
    size_t n, L = st->model_path ? strlen(st->model_path) : 0;
    if (L == 0 || L > MODEL_PATH_MAX) return SKV_OK;
    int rc = store_get(t, TB_META, "model", 5, &v, &n);
    if (rc != 1) return rc;
    uint8_t *buf = malloc(16 + L);
    if (!buf) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    skv_wr32(buf, MODEL_MAGIC);
    skv_wr32(buf + 4, (uint32_t)L);
    memcpy(buf + 8, st->model_path, L);
    skv_wr64(buf + 8 + L, XXH3_64bits(buf, 8 + L));
    rc = store_put(t, TB_META, "model", 5, buf, 16 + L);
    free(buf);
    return rc;
}

int store_model_note(tx *t) { return model_rec_write(t); }

int store_model_init(tx *t) { return model_rec_write(t); }

/* The recorded path (p, n: the record) into out; SKV_ERR_FORMAT when damaged. */
static int model_rec_parse(const uint8_t *p, size_t n, char *out, size_t cap)
{
    out[0] = 0;
    if (n < 17 || skv_rd32(p) != MODEL_MAGIC) return SKV_ERR_FORMAT;
    size_t L = skv_rd32(p + 4);
    if (L < 1 || L >= cap || n != 16 + L || XXH3_64bits(p, 8 + L) != skv_rd64(p + 8 + L) || memchr(p + 8, 0, L))
        return SKV_ERR_FORMAT;
    memcpy(out, p + 8, L);
    out[L] = 0;
    return SKV_OK;
}

/* The header's model fields (layout in store.c). */
static int header_read(const uint8_t *p, size_t n, skv_store_model *out)
{
    if (n != HEADER_SIZE || memcmp(p, STORE_MAGIC, 8) != 0 || XXH3_64bits(p, 160) != skv_rd64(p + 160))
        return SKV_ERR_FORMAT;
    if (!store_version_ok(skv_rd32(p + 8))) return SKV_ERR_UNSUPPORTED;
    memcpy(out->fingerprint, p + 16, 16);
    memcpy(out->name, p + 32, 95);
    out->name[95] = 0;
    out->n_layer = (int)skv_rd32(p + 128);
    out->n_head_kv = (int)skv_rd32(p + 132);
    out->head_dim = (int)skv_rd32(p + 136);
    out->n_vocab = (int)skv_rd32(p + 140);
    out->n_ctx_train = (int)skv_rd32(p + 144);
    return SKV_OK;
}

/* One meta record of the store at `where`, read without opening it for use: 1 = absent. */
static int peek(const char *where, const char *name, uint8_t **v, size_t *vn, skv_err *err)
{
    return store_is_redis_url(where) ? store_redis_peek(where, name, v, vn, err)
                                     : store_lmdb_peek(where, name, v, vn, err);
}

/* The header's and the model record's fields of the store at `where` (either backend). */
static int read_info(const char *where, skv_store_model *out, skv_err *err)
{
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = peek(where, "header", &v, &n, err);
    if (rc == 1)
        rc = store_is_redis_url(where)
                 ? skv_fail(err, SKV_ERR_IO, "no seqkv store at '%s' (create one with 'seqkv store init')", where)
                 : skv_fail(err, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store", where);
    else if (!rc && (rc = header_read(v, n, out)))
        rc = skv_fail(err, rc, "store '%s': header damaged or of another version", where);
    free(v);
    v = NULL;
    if (!rc && (rc = peek(where, "model", &v, &n, err)) == 1) rc = SKV_OK;
    else if (!rc && model_rec_parse(v, n, out->path, sizeof out->path))
        rc = skv_fail(err, SKV_ERR_FORMAT, "store '%s': model record damaged", where);
    free(v);
    return rc;
}

int store_model_info_one(const char *dir, skv_store_model *out, skv_err *err)
{
    if (!dir || !out) return skv_fail(err, SKV_ERR_INVALID_ARG, "skv_store_model_info: invalid arguments");
    memset(out, 0, sizeof *out);
    int rc = read_info(dir, out, err);
    if (rc == SKV_OK && !out->path[0])
        skv_log(SKV_LOG_INFO, "store '%s' has no model-path record (made without skv_store_params.model_path): "
                "its model is known by name and fingerprint only", dir);
    return rc;
}
