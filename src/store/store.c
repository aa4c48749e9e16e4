/* The session store: the probabilistic-language trie of trie.c persisted through a
 * backend (backend.h: LMDB or Redis), with materialised KV per node and a placement
 * policy (docs/store.md).
 *
 * Tables (backend.h): meta ("header": magic "SKVSTORE", version, model fingerprint + name
 * + geometry; "state": next node id, clock, budget, measured speeds, prior weight;
 * "model": the model file; "mat": materialised bytes), nodes, children, sessions, kv,
 * and the placement index (mat, matord).
 *
 *   KV blob:  0 u32 "SKVK" | 4 u32 positions | 8 u64 XXH3-64 of the f32 bytes |
 *             16 zstd frame of the byte-shuffled f32 values, canonical order
 *             [layer][K,V][kv_head][position][dim] over the span's positions only
 *
 * This file is the top of the store's chain: it opens (creates, checks, upgrades) and
 * closes a store; the transactions it runs are store_tx.c's.
 */
#include <errno.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store/store_int.h"

skv_store_params skv_store_default_params(void)
{
    return (skv_store_params){.map_size = 0, .budget = -1, .n_threads = 1};
}


/* header: 0 magic[8] | 8 u32 version | 12 u32 flags | 16 fingerprint[16] | 32 name[96] |
 *         128 u32 n_layer, n_head_kv, head_dim, n_vocab, n_ctx | 148 tokenizer[8] | 156 u32 0
 *         | 160 u64 XXH3-64
 * flags bit 0 (HDR_TOKENIZER): bytes 148..155 hold the first 8 bytes of the model's
 * tokenizer fingerprint (stores made since 2026-12-05; older ones have flags 0 and zeros
 * there, and keep them through an upgrade: the tokenizer they were made with is unknown). */
#define HDR_TOKENIZER 1u

static void header_encode(const skv_store *st, uint8_t *p, int with_tokenizer)
{
    memset(p, 0, HEADER_SIZE);
    memcpy(p, STORE_MAGIC, 8);
    skv_wr32(p + 8, STORE_VERSION);
    if (with_tokenizer) {
        skv_wr32(p + 12, HDR_TOKENIZER);
        memcpy(p + 148, st->tok_fp, 8);
    }
    memcpy(p + 16, st->fp, 16);
    memcpy(p + 32, st->info.name, strnlen(st->info.name, 95));
    skv_wr32(p + 128, (uint32_t)st->info.n_layer);
    skv_wr32(p + 132, (uint32_t)st->info.n_head_kv);
    skv_wr32(p + 136, (uint32_t)st->info.head_dim);
    skv_wr32(p + 140, (uint32_t)st->info.n_vocab);
    skv_wr32(p + 144, (uint32_t)st->info.n_ctx_train);
    skv_wr64(p + 160, XXH3_64bits(p, 160));
}

static int header_check(skv_store *st, const uint8_t *p, size_t n, const char *dir)
{
    char name[97];
    if (n != HEADER_SIZE || memcmp(p, STORE_MAGIC, 8) != 0)
        return store_err(st, SKV_ERR_FORMAT, "'%s' is an LMDB environment but not a seqkv store (bad header)", dir);
    if (XXH3_64bits(p, 160) != skv_rd64(p + 160))
        return store_err(st, SKV_ERR_FORMAT, "store '%s': header checksum mismatch (damaged)", dir);
    if (!store_version_ok(skv_rd32(p + 8)))
        return store_err(st, SKV_ERR_UNSUPPORTED, "store '%s' has format version %u (this build reads %d..%d)", dir,
                         skv_rd32(p + 8), STORE_VERSION_MIN, STORE_VERSION);
    memcpy(name, p + 32, 96);
    name[96] = 0;
    if (memcmp(p + 16, st->fp, 16) != 0)
        return store_err(st, SKV_ERR_MISMATCH, "store '%s' was made with model '%s', not with the loaded model '%s'",
                       dir, name, st->info.name);
    uint32_t flags = skv_rd32(p + 12);
    if (flags & ~HDR_TOKENIZER)
        return store_err(st, SKV_ERR_UNSUPPORTED, "store '%s': unknown header flags %#x (a newer seqkv made it?)", dir,
                         flags);
    if ((flags & HDR_TOKENIZER) && memcmp(p + 148, st->tok_fp, 8) != 0)
        return store_err(st, SKV_ERR_MISMATCH,
                         "store '%s' was made with model '%s', whose tokenizer is not the one of the loaded model "
                         "'%s' (same weights, other token texts or rules: its sessions would render to other "
                         "text)",
                         dir, name, st->info.name);
    return SKV_OK;
}
/* Restore speed for the cost model: a 128-token prefill of the model (no logits). */
static double measure_prefill(skv_store *st)
{
    int32_t tok[128];
    double best = 0;
    if (store_work_ctx(st)) return 2000.0;
    for (int i = 0; i < 128; i++) tok[i] = (int32_t)((i * 7919) % st->info.n_vocab);
    for (int rep = 0; rep < 2; rep++) {
        double t0 = skv_now();
        if (skv_ctx_truncate(st->work, 0) || skv_ctx_prefill(st->work, tok, 128, SKV_LOGITS_NONE, NULL)) return 2000.0;
        double dt = skv_now() - t0;
        if (dt > 0 && 128 / dt > best) best = 128 / dt;
    }
    return best > 0 ? best : 2000.0;
}

/* A new store: header, state, model record and the (empty) placement index. */
static int init_store(tx *t, const skv_store_params *p)
{
    uint8_t hdr[HEADER_SIZE];
    const uint8_t *v;
    size_t n;
    int rc = store_get(t, TB_META, "header", 6, &v, &n); /* (Redis: watched, so one creator wins) */
    if (rc <= 0) return rc;
    t->s = (store_state){.next_id = 1, .clock = 0, .budget = p->budget >= 0 ? (uint64_t)p->budget : DEFAULT_BUDGET,
                         .prefill_tps = measure_prefill(t->st), .load_bps = 200e6, .prior_weight = 16.0,
                         .comp_ratio = 0.8, .cm_tps = STORE_CM_TPS0, .cm_bpp = STORE_CM_BPP0};
    memset(&t->s0, 0xff, sizeof t->s0);
    header_encode(t->st, hdr, 1);
    rc = store_put(t, TB_META, "header", 6, hdr, HEADER_SIZE);
    if (!rc) rc = store_model_init(t);
    if (!rc) rc = store_mat_build(t);
    return rc;
}

/* The first transaction on a new store has no state record to load. */
static int create_store(skv_store *st, const skv_store_params *p)
{
    tx t = {.st = st, .write = 1};
    int rc = st->be->ops->begin(st->be, 1, &t.bt);
    if (rc) return rc;
    store_io_init(&t);
    if ((rc = init_store(&t, p))) {
        store_tx_abort(&t);
        return rc;
    }
    rc = store_tx_commit(&t);
    return rc == STORE_CONFLICT ? SKV_OK : rc; /* another process created it meanwhile */
}

/* The header matches this build and model; an index missing (an older store) is built. */
static int check_store(tx *t, void *u)
{
    const char *dir = *(const char **)u;
    const uint8_t *v;
    size_t n;
    int rc = store_get(t, TB_META, "header", 6, &v, &n);
    if (rc == 1) return store_err(t->st, SKV_ERR_FORMAT, "'%s' holds no seqkv store header", dir);
    if (rc || (rc = header_check(t->st, v, n, dir))) return rc;
    /* versions 2 and 3: upgrade. The header says 4 and the state record is rewritten in the
     * 80-byte layout; session records stay as they are (version 1: no token checksum, read
     * and checked as before) until the session is put again (docs/store.md "LMDB layout"). */
    if (t->write && skv_rd32(v + 8) < STORE_VERSION) {
        uint8_t hdr[HEADER_SIZE];
        header_encode(t->st, hdr, (skv_rd32(v + 12) & HDR_TOKENIZER) != 0);
        if ((rc = store_put(t, TB_META, "header", 6, hdr, HEADER_SIZE))) return rc;
        memset(&t->s0, 0xff, sizeof t->s0); /* rewrite the state record */
    }
    if (t->write && (rc = store_get(t, TB_META, "mat", 3, &v, &n)) == 1) return store_mat_build(t);
    return rc;
}

static int open_store(skv_store *st, const char *dir, int flags, const skv_store_params *p)
{
    int rc, fresh = 0;
    if ((rc = store_backend_open(st, dir, flags, p, &st->be, &fresh))) return rc;
    if (fresh && (rc = create_store(st, p))) return rc;
    if ((rc = store_run(st, !st->readonly, check_store, &dir))) return rc;
    if (p->budget >= 0 && !st->readonly) return store_set_budget_one(st, (uint64_t)p->budget);
    return SKV_OK;
}

/* The model file's absolute path (as given when it cannot be resolved); malloc'ed. */
static char *abs_path(const char *path)
{
    char *r = realpath(path, NULL);
    if (r || !(r = malloc(strlen(path) + 1))) return r;
    return strcpy(r, path);
}

int store_open_one(const char *dir, skv_model *m, int flags, const skv_store_params *p, int router, skv_store **out,
                   skv_err *err)
{
    skv_store_params dp = skv_store_default_params();
    skv_store *st;
    int rc;
    *out = NULL;
    if (!dir || !m || !out || (flags & ~(SKV_STORE_CREATE | SKV_STORE_READONLY)) ||
        ((flags & SKV_STORE_CREATE) && (flags & SKV_STORE_READONLY)))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "skv_store_open: invalid arguments");
    if (!p) p = &dp;
    if (!(st = calloc(1, sizeof *st))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&st->write_mu, NULL);
    if (!(st->err = skv_errbox_create()) || (p->model_path && !(st->model_path = abs_path(p->model_path)))) {
        store_close_one(st);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    st->model = m;
    st->io_init = store_io_init;
    st->readonly = !!(flags & SKV_STORE_READONLY);
    st->n_threads = p->n_threads > 0 ? p->n_threads : 1;
    if ((rc = skv_model_get_info(m, &st->info)) || (rc = skv_model_fingerprint(m, st->fp)) ||
        (rc = skv_model_tokenizer_fingerprint(m, st->tok_fp))) {
        store_err(st, rc, "cannot read the model's info/fingerprint");
    } else {
        st->blocks = (size_t)st->info.n_layer * 2 * (size_t)st->info.n_head_kv;
        st->head_dim = (size_t)st->info.head_dim;
        rc = router ? SKV_OK : open_store(st, dir, flags, p); /* a router's shards are opened by its caller */
    }
    if (rc) {
        skv_fail(err, rc, "%s", skv_errbox_get(st->err));
        store_close_one(st);
        return rc;
    }
    *out = st;
    return SKV_OK;
}

void store_close_one(skv_store *st)
{
    if (!st) return;
    if (st->be) st->be->ops->close(st->be);
    if (st->parent) st->work = NULL; /* the router's */
    skv_ctx_free(st->work);
    store_tier_free(st);
    store_kv_free(st);
    skv_errbox_free(st->err);
    free(st->model_path);
    pthread_mutex_destroy(&st->write_mu);
    free(st);
}

static int set_budget_tx(tx *t, void *u)
{
    t->s.budget = *(const uint64_t *)u;
    return SKV_OK;
}

int store_set_budget_one(skv_store *st, uint64_t bytes)
{
    return st ? store_done(st, store_run(st, 1, set_budget_tx, &bytes)) : SKV_ERR_INVALID_ARG;
}

int store_backend_open(skv_store *st, const char *where, int flags, const skv_store_params *p, store_backend **out,
                       int *fresh)
{
    if (store_is_redis_url(where)) return store_backend_redis_open(st, where, flags, out, fresh);
    return store_backend_lmdb_open(st, where, flags, p, out, fresh);
}
