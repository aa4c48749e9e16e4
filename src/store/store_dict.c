/* Store-kept cmvd dictionaries (docs/store.md "Dictionaries"): the store trains one on its
 * own sessions (store_retier.c), records it here, and cheap-coded nodes name it by id
 * (store_tier.c); a node is
 * decoded with exactly the dictionary it names or not at all.
 *
 *   meta "dict.<id: 16 hex digits>" -> "SKVD" | u32 version 1 | u64 id | u32 n | u32 0
 *                                      | u32 ids[n] | u64 XXH3-64 of every byte before it
 *
 * id = XXH3-64 of the ids as little-endian u32 (skv_cmv_dict_id, what a cmvd payload
 * names); n is 1 .. 2^20, every id < n_vocab. Records are never changed (a new training
 * writes a new one); the "tier" record names the current one.
 *
 *   meta "dictcm.<id>" -> the snapshot of the cm model primed by that dictionary (codec
 *                         cmvd's coder, docs/coder.md 4.8: its own magic, version, model
 *                         kind, dictionary id and length, XXH3-64), written by training
 *
 * A process that needs the primed model and does not hold it yet loads the snapshot
 * instead of priming (~10 us per id); a missing or unusable one (an older store, another
 * build's format) costs the priming, never the restore. */
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "coder/cm_snap.h"
#include "container/cmv_model.h"
#include "store/store_int.h"

#define DICT_MAGIC 0x44564b53u /* "SKVD" */
#define DICT_HDR 24u

static void dict_key(char key[22], uint64_t id) { snprintf(key, 22, "dict.%016llx", (unsigned long long)id); }
static void snap_key(char key[24], uint64_t id) { snprintf(key, 24, "dictcm.%016llx", (unsigned long long)id); }

/* Writes dictionary (id, ids[n])'s "dictcm" record (the model primed now if need be). */
int store_dict_snap_put(tx *t, uint64_t id, const int32_t *ids, uint32_t n)
{
    char key[24];
    skv_err err = {0};
    uint8_t *b = NULL;
    size_t len = 0;
    skv_cmv_src src;
    int rc = skv_cmv_src_of(t->st->model, &src);
    if (!rc) rc = skv_cmv_dict_snapshot(&src, ids, n, SKV_CM_SNAP_VERSION, &b, &len, &err);
    else skv_fail(&err, rc, "cannot fingerprint the model's tokenizer");
    snap_key(key, id);
    if (rc) return store_err(t->st, rc, "cannot snapshot the dictionary's cm model: %.255s", err.msg);
    rc = store_put(t, TB_META, key, 23, b, len);
    free(b);
    return rc;
}

static int dict_bad(tx *t, uint64_t id, const char *what)
{
    t->damaged = 1;
    return store_err(t->st, SKV_ERR_FORMAT,
                     "store dictionary %016llx %s: the nodes coded with it cannot be restored (restore the store "
                     "from a backup)", (unsigned long long)id, what);
}

/* The primed model of dictionary (id, ids[n]) from its "dictcm" record, unless the process
 * holds it already. A record that is missing or unusable (a store trained by an older
 * build) is left to the priming, and written by a write transaction (the next process
 * loads it). */
static int snap_load(tx *t, uint64_t id, const int32_t *ids, uint32_t n)
{
    char key[24];
    const uint8_t *v;
    size_t vn;
    skv_cmv_src src;
    if (skv_cmv_src_of(t->st->model, &src)) return t->write ? store_dict_snap_put(t, id, ids, n) : SKV_OK; /* met again there */
    if (skv_cmv_dict_have(&src, id, n)) return SKV_OK;
    snap_key(key, id);
    if (t->st->be->ops->get(t->bt, TB_META, key, 23, STORE_NOWATCH, &v, &vn) == SKV_OK &&
        skv_cmv_dict_load_mem(&src, ids, n, v, vn, NULL) == SKV_OK)
        return SKV_OK;
    return t->write ? store_dict_snap_put(t, id, ids, n) : SKV_OK;
}

int store_dict_get(tx *t, uint64_t id, uint32_t n, int32_t **ids)
{
    char key[22];
    const uint8_t *v;
    size_t vn;
    dict_key(key, id);
    *ids = NULL;
    int rc = store_get(t, TB_META, key, 21, &v, &vn);
    if (rc == 1) return dict_bad(t, id, "is missing");
    if (rc) return rc;
    if (n < 1 || n > STORE_DICT_MAX || vn != DICT_HDR + 4ull * n + 8 || skv_rd32(v) != DICT_MAGIC ||
        skv_rd32(v + 4) != 1 || skv_rd64(v + 8) != id || skv_rd32(v + 16) != n ||
        XXH3_64bits(v, vn - 8) != skv_rd64(v + vn - 8))
        return dict_bad(t, id, "is damaged");
    if (!(*ids = malloc((size_t)n * sizeof **ids))) return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = skv_rd32(v + DICT_HDR + 4u * i);
        if (x >= (uint32_t)t->st->info.n_vocab) {
            free(*ids);
            *ids = NULL;
            return dict_bad(t, id, "holds an id outside the vocabulary");
        }
        (*ids)[i] = (int32_t)x;
    }
    if (skv_cmv_dict_id(*ids, n) != id) {
        free(*ids);
        *ids = NULL;
        return dict_bad(t, id, "does not match its id");
    }
    if ((rc = snap_load(t, id, *ids, n))) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

int store_dict_put(tx *t, const int32_t *ids, uint32_t n, uint64_t *id)
{
    char key[22];
    size_t vn = DICT_HDR + 4ull * n + 8;
    uint8_t *b = malloc(vn);
    if (!b) return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    *id = skv_cmv_dict_id(ids, n);
    memset(b, 0, DICT_HDR);
    skv_wr32(b, DICT_MAGIC);
    skv_wr32(b + 4, 1);
    skv_wr64(b + 8, *id);
    skv_wr32(b + 16, n);
    for (uint32_t i = 0; i < n; i++) skv_wr32(b + DICT_HDR + 4u * i, (uint32_t)ids[i]);
    skv_wr64(b + vn - 8, XXH3_64bits(b, vn - 8));
    dict_key(key, *id);
    int rc = store_put(t, TB_META, key, 21, b, vn);
    free(b);
    return rc;
}
