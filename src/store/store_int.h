/* Internal to the session store (src/store/store*.c): the handle, a transaction, the
 * records and the steps the files share. Not part of the public API.
 *
 * The files form a one-way chain, lowest first: each calls only files above it in this
 * list (`make check-layers` checks it; scripts/file_cycles.py build/obj/store --order
 * prints the calls):
 *
 *   store_tx.c       errors, the state record, transactions over the backend's tables
 *   backend.h        the storage seam: tables in transactions (backend_lmdb.c,
 *                    backend_redis*.c implement it)
 *   store_matindex.c the placement index: the materialised set, kept by every node write
 *   store_dict.c     store-kept cmvd dictionaries: records, snapshots, lookup
 *   store_tier.c     node tiers: which form a token-only node's record takes (raw or
 *                    cheap-coded), the coded record, the "tier" meta record
 *   store_kv.c       KV blobs and the trie's storage (skv_trie_io) over the backend
 *   store_load.c     a trie path's KV into a context: load the materialised, prefill the rest
 *   store_model.c    the "model" meta record, skv_store_model_info
 *   store_policy.c   placement policy: which nodes keep their KV materialised
 *   store_session.c  session records, put, get
 *   store_retier.c   what gc and training change in the tiers: retier, skv_store_train_dict
 *   store_admin.c    match, remove, list, stats, gc, bulk insert
 *   near_*.c, store_draft.c, store_prefix.c   nearest sessions, drafts from the store,
 *                    the KV of a stored prefix (skv_store_get_prefix)
 *   store.c          the top: open (create, check, upgrade) and close
 *
 * store_tx.c begins a transaction with the trie's storage of store_kv.c, above it, through
 * st->io_init (set by skv_store_open): the one call that goes up, made through a pointer.
 */
#ifndef SKV_STORE_INT_H
#define SKV_STORE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "core/util.h"
#include "store/backend.h"
#include "store/trie.h"

#define STORE_MAGIC "SKVSTORE"
#define STORE_VERSION 4     /* 4: session records carry a checksum of the session's tokens;
                             * 3: node tiers (coded node records), "tier" and "dict.*" meta records */
#define STORE_VERSION_MIN 2 /* a version-2 or -3 store opens; its first write transaction upgrades it */
#define STORE_KEY_VERSION 2 /* Redis key namespace "P:skv2:": unchanged by versions 3 and 4 (same keys) */
#define HEADER_SIZE 168
#define STATE_SIZE 64   /* version 2 */
#define STATE_SIZE3 80  /* version 3: + cm decode speed, cm bytes per position */
#define SESSION_SIZE 64  /* session record version 2 (store version 4): + token checksum */
#define SESSION_SIZE1 56 /* session record version 1 (store versions 2, 3): no token checksum */
#define BLOB_HDR 16
#define MODEL_MAGIC 0x4d564b53u /* "SKVM" */
#define MODEL_PATH_MAX 4095
#define KV_MAGIC 0x4b564b53u   /* "SKVK" */
#define SES_MAGIC 0x53564b53u  /* "SKVS" */
#define DEFAULT_BUDGET (64ull << 20)
#define DEFAULT_MAP (64ull << 30)
/* Materialised KV: byte-shuffled f32 compresses smaller and faster at level 1 than at 3
 * (600 positions of kjv-4m: 0.780 vs 0.800 of the raw bytes, 577 vs 436 MB/s; AMD EPYC,
 * 2026-12-06); the frame format does not depend on the level. */
#define ZSTD_KV_LEVEL 1
/* The largest compressed-to-raw KV ratio a state record may hold: the running mean of
 * blob bytes / raw bytes stays near 1 (zstd never expands much); a larger one is damage. */
#define STORE_MAX_COMP_RATIO 1024.0
#define STORE_CM_TPS0 100000.0 /* cheap-coding speed before any is measured, positions/s */
enum { STORE_TIER_KV, STORE_TIER_TOKENS, STORE_TIER_CMV, STORE_TIER_CMVD, STORE_TIER_N };
#define STORE_CM_BPP0 1.5      /* cheap-coded bytes per position before any is measured */

typedef struct store_state {
    uint64_t next_id, clock, budget;
    double prefill_tps, load_bps, prior_weight, comp_ratio;
    double cm_tps, cm_bpp; /* measured cheap-coding speed (positions/s, setup included), bytes/position */
} store_state;

/* Surprisals are stored on a grid of 2^-9 bits (0 .. 65535/512), so a cheap-coded record
 * keeps them exactly in 16 bits and every d_end stays the sum of what is stored. */
#define STORE_SUR_SCALE 512.0f
static inline float store_sur_q(float s)
{
    float m = 65535.0f / STORE_SUR_SCALE;
    if (!(s > 0)) return 0.0f;
    if (s > m) return m;
    return (float)(uint32_t)(s * STORE_SUR_SCALE + 0.5f) / STORE_SUR_SCALE;
}

static inline int store_version_ok(uint32_t v) { return v >= STORE_VERSION_MIN && v <= STORE_VERSION; }

struct tx;

struct skv_store {
    store_backend *be;
    skv_model *model;
    skv_model_info info;
    uint8_t fp[16];
    uint8_t tok_fp[16];      /* the model's tokenizer fingerprint (the header records 8 bytes) */
    int readonly, n_threads;
    size_t blocks, head_dim; /* KV of one position = blocks x head_dim floats */
    char *model_path;        /* the model file (absolute) to record, or NULL */
    skv_ctx *work;           /* put's context: used only inside the write transaction */
    pthread_mutex_t write_mu; /* one write transaction at a time (store_run) */
    struct store_shards *sh;  /* a sharded store's shards (store_shard.c), or NULL */
    skv_store *parent;        /* a shard's router: its work context and write lock are the router's */
    skv_errbox *err;         /* last error, per thread (skv_store_last_error) */
    struct store_memo *memo; /* coded nodes decoded lately (store_tier.c; its own lock) */
    struct store_planes *planes; /* a KV blob's byte planes, kept (store_kv.c; its own lock) */
    /* Sets a transaction's trie storage (store_io_init, store_kv.c): set at open, so that
     * store_tx.c, the bottom of the store, calls no file above it. */
    void (*io_init)(struct tx *t);
    void (*progress)(void *user, uint64_t done, uint64_t total); /* skv_store_set_progress */
    void *progress_user;
};

/* One transaction with its trie view. */
typedef struct tx {
    skv_store *st;
    store_btx *bt;
    int write;
    store_state s, s0; /* s0: as loaded (saved only when changed) */
    uint64_t miss[2];  /* records found evicted: [0] KV blobs, [1] trie nodes / sessions */
    skv_trie_io io;
    int tier_ok;       /* tier loaded (read once per transaction) */
    int damaged;       /* a record was found damaged (not evicted): never reported as a miss */
    struct store_tier_rec {
        double price;      /* seconds of restore time one stored byte is worth */
        uint64_t dict_id;  /* the dictionary new cheap-coded nodes use (0: none) */
        uint32_t dict_n;
    } tier;
} tx;

typedef struct ses_rec {
    uint64_t end;
    uint32_t n_tokens;
    uint8_t digest[16];
    uint64_t put_time;
    uint64_t tok_sum; /* store_tokens_sum of the session's tokens (valid iff has_sum) */
    int has_sum;      /* 0: a version-1 record (an older store's), checked as before */
} ses_rec;



static inline void be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static inline void be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static inline uint64_t rbe64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

/* ---- store_tx.c: errors and transactions ---- */
/* Sets the calling thread's message of st and returns status. */
int store_err(skv_store *st, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A public call's result: a failure without a message gets one from its status. */
int store_done(skv_store *st, int status);
/* A trie error either set a message already or is a bare status from trie.c. */
int store_trie_err(skv_store *st, int rc, const char *what);
/* Begins a (read or write) transaction, loads the state record and clears the calling
 * thread's message: every public call starts here, so a success leaves "". */
int store_tx_begin(skv_store *st, int write, tx *t);
void store_tx_abort(tx *t);
/* Records st->model_path in the "model" meta record if none is recorded yet. */
int store_model_note(tx *t);
int store_model_init(tx *t); /* the same at creation (store_model.c) */
int store_tx_commit(tx *t); /* saves the state record, then commits; STORE_CONFLICT: redo */
/* A read transaction's end: STORE_CONFLICT when what it read was not consistent. */
int store_tx_end(tx *t);
/* The backend's tables through t (backend.h). */
int store_get(tx *t, int tb, const void *k, size_t kn, const uint8_t **v, size_t *vn); /* 1 = absent */
int store_put(tx *t, int tb, const void *k, size_t kn, const void *v, size_t vn);
int store_del(tx *t, int tb, const void *k, size_t kn);
int store_scan(tx *t, int tb, const void *prefix, size_t pn, store_scan_fn fn, void *u);
/* Runs fn(t, u) in write (or read) transactions until one commits without a conflict. */
int store_run(skv_store *st, int write, int (*fn)(tx *t, void *u), void *u);

/* ---- store_kv.c: KV blobs, trie storage ---- */
void store_io_init(tx *t); /* t->io: the trie's storage callbacks over t's transaction */
size_t store_pos_floats(const skv_store *st);
/* Copies positions [p0, p0+n) of a [blocks][len][head_dim] array into dst (its own
 * [blocks][dlen][head_dim] layout at position d0). */
void store_kv_copy(const skv_store *st, const float *src, size_t len, size_t p0, size_t n, float *dst, size_t dlen,
                   size_t d0);
int store_blob_put(tx *t, uint64_t id, const float *kv, uint32_t len, uint64_t *bytes);
/* malloc'ed array; 1 = evicted (Redis only: counted as a miss; recompute) */
int store_blob_get(tx *t, uint64_t id, uint32_t len, float **out);
/* The same in a buffer the handle keeps (no fresh pages to fault in): give it back with
 * store_blob_give before the next blob is loaded (one kept at a time; a second taker gets
 * a malloc'ed one, which store_blob_give frees). */
int store_blob_get_kept(tx *t, uint64_t id, uint32_t len, float **out);
void store_blob_give(skv_store *st, float *kv);
int store_blob_del(tx *t, uint64_t id, uint32_t len);
int store_io_get_node(void *u, uint64_t id, skv_trie_node *out); /* 1 = absent */
int store_io_put_node(void *u, const skv_trie_node *n);
/* Calls fn for every node record (decoded) until it returns nonzero (returned). */
int store_scan_nodes(tx *t, int (*fn)(void *u, const skv_trie_node *nd), void *u);

/* ---- store_matindex.c: the placement index (TB_MAT, TB_MATORD, meta "mat") ---- */
/* Updated by every node write (store_io_put_node). */
typedef struct mat_meta {
    uint64_t total;
    double prefill_tps, load_bps; /* the speeds every rank in the index was computed with */
} mat_meta;
typedef struct mat_ent {
    uint64_t rank, bytes, parent;
} mat_ent;
/* A node's rank (its score without the common denominator) at the speeds in mm. */
double store_mat_rank(const store_state *s, const mat_meta *mm, const skv_trie_node *nd, double bytes);
double store_mat_bits_rank(uint64_t u); /* the rank whose bits sort as u */
int store_mat_meta_get(tx *t, mat_meta *mm); /* meta "mat" */
int store_mat_meta_set(tx *t, const mat_meta *mm);
int store_mat_ent_get(tx *t, uint64_t id, mat_ent *e); /* 1 = absent */
int store_mat_note(tx *t, const skv_trie_node *n); /* n written: indexed iff materialised */
int store_mat_forget(tx *t, uint64_t id);          /* node id deleted */
int store_mat_total(tx *t, uint64_t *total);       /* bytes of materialised KV */
typedef int (*store_mat_fn)(void *u, uint64_t id, uint64_t parent, uint64_t bytes);
int store_mat_each(tx *t, store_mat_fn fn, void *u); /* lowest score first */
typedef struct store_ids {
    uint64_t *id;
    size_t n, cap;
} store_ids;
int store_ids_add(store_ids *l, uint64_t id); /* appends (grows l->id); SKV_ERR_NOMEM */
int store_mat_ids(tx *t, store_ids *l); /* every materialised node id (l->id malloc'ed) */

/* ---- store_load.c: a path's KV into a context ---- */
uint32_t store_loadable(const skv_trie_path *p, uint32_t upto);
/* Loads positions [0, upto) of the path (materialised there) into ctx; *got: the
 * positions loaded (less than upto when a blob was evicted: the rest is recomputed). */
int store_load_prefix(tx *t, const skv_trie_path *p, uint32_t upto, skv_ctx *ctx, uint32_t *got);
/* Prefills positions [from, upto) of the path's tokens into ctx (which holds [0, from)). */
int store_path_prefill(tx *t, const skv_trie_path *p, uint32_t from, uint32_t upto, skv_ctx *ctx);
int store_work_ctx(skv_store *st); /* creates st->work on first use */
#define STORE_PROGRESS_CHUNK 256 /* positions prefilled between two progress reports */
/* Reports `done` of `total` positions to the handle's progress callback, if one is set. */
void store_progress(const skv_store *st, uint64_t done, uint64_t total);
/* Prefills tokens[from, to) into ctx (which holds [0, from)), in STORE_PROGRESS_CHUNK
 * pieces reported as done of total when a progress callback is set (any chunking gives
 * the same KV: seqkv.h, skv_ctx_prefill); message set. */
int store_prefill(skv_store *st, skv_ctx *ctx, const int32_t *tokens, size_t from, size_t to, size_t total);

/* ---- store_policy.c: placement decisions ---- */
int store_mat_build(tx *t); /* builds the index of an older store */
int store_evict_to(tx *t, uint64_t budget, uint32_t *n_demoted);
/* Materialises path nodes from ctx (which holds the whole path's KV) as the budget allows. */
int store_place(tx *t, const skv_trie_path *p, skv_ctx *ctx, uint32_t *n_mat, uint32_t *n_dem);
/* The other direction (gc): materialises the best-scoring token-only nodes whose parent is
 * materialised (or the root) while they fit the budget, computing their KV with st->work. */
int store_fill_to(tx *t, uint64_t budget, uint32_t *n_mat, uint32_t *n_dem);

/* ---- store_tier.c: node tiers ---- */
#define STORE_PRICE0 2e-5 /* default price: seconds of restore per stored byte (docs/store.md) */
int store_tier_get(tx *t, struct store_tier_rec *r);
int store_tier_put(tx *t, const struct store_tier_rec *r);
/* A node's record in its tier (malloc'ed): materialised nodes and the ones the rule keeps
 * raw in the trie's codec, the others cheap-coded. */
int store_node_encode(tx *t, const skv_trie_node *n, uint8_t **buf, size_t *size);
int store_node_decode(tx *t, const uint8_t *v, size_t n, skv_trie_node *out); /* message set */
int store_node_tier(const uint8_t *v, size_t n); /* STORE_TIER_* of a record, -1 if unknown */
/* The tier the rule picks now for a stored node record v (either layout; header read only). */
int store_node_want(const tx *t, const uint8_t *v);
int store_tier_count(tx *t, skv_store_stats *s);
void store_tier_free(skv_store *st); /* the decoded-node cache, at close */
void store_kv_free(skv_store *st);   /* the kept blob buffer, at close */

/* ---- store_dict.c: dictionaries (meta "dict.<16 hex>") ---- */
#define STORE_DICT_MAX (1u << 20) /* ids of a store dictionary */
#define STORE_DICT_DEFAULT 65536u /* ids a training takes when not told */
int store_dict_get(tx *t, uint64_t id, uint32_t n, int32_t **ids); /* malloc'ed; message set */
int store_dict_put(tx *t, const int32_t *ids, uint32_t n, uint64_t *id);
/* Writes dictionary (id, ids[n])'s "dictcm" record (the model primed now if need be). */
int store_dict_snap_put(tx *t, uint64_t id, const int32_t *ids, uint32_t n);

/* ---- store_retier.c: what gc and training change in the tiers ---- */
int store_retier(tx *t, uint32_t *n_changed); /* rewrites nodes whose tier the rule changed */

/* ---- store_session.c: session records ---- */
void store_ses_encode(const ses_rec *r, uint8_t *p);
int store_ses_decode(const uint8_t *p, size_t n, ses_rec *r);
int store_check_name(skv_store *st, const char *name);
int store_check_tokens(skv_store *st, const int32_t *tokens, size_t n);
int store_ses_get(tx *t, const char *name, ses_rec *r); /* 1 = absent */
/* XXH3-64 of the ids as little-endian int32, seeded with their count: what binds a
 * session record to the tokens its trie path holds (node records are checked one by one,
 * the KV digest covers the KV only; nothing else ties a path's tokens to the session). */
uint64_t store_tokens_sum(const int32_t *tokens, size_t n);
/* SKV_ERR_FORMAT (message: the store is damaged, what to do) when the record has a token
 * checksum and tokens[0..n) do not match it. */
int store_ses_check_tokens(skv_store *st, const char *name, const ses_rec *r, const int32_t *tokens, size_t n);
/* The same for the tokens along path p (copied; the count must be the record's). */
int store_ses_check_path(tx *t, const char *name, const ses_rec *r, const skv_trie_path *p);
/* SKV_ERR_FORMAT (message as above) unless a session ends at path p's last node (its
 * n_end): a session record naming an inner node was never written by the store. */
int store_ses_check_end(skv_store *st, const char *name, const skv_trie_path *p);

/* ---- one store handle's calls, as the public API's (store_shard.c routes the public calls
 * of a sharded store to its shards' handles, and every other handle's here) ---- */
int store_open_one(const char *dir, skv_model *m, int flags, const skv_store_params *p, int router, skv_store **out,
                   skv_err *err); /* router: the handle only (errors, model, work context, lock), no backend */
void store_close_one(skv_store *st);
int store_model_info_one(const char *dir, skv_store_model *out, skv_err *err);
int store_put_one(skv_store *st, const char *name, const int32_t *tokens, size_t n, skv_store_put_report *rep);
int store_put_kv_one(skv_store *st, const char *name, const int32_t *tokens, size_t n, const float *kv,
                     const float *sur, size_t from, skv_store_put_report *rep);
int store_get_one(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap,
                  size_t *n_tokens, skv_store_get_report *rep);
int store_remove_one(skv_store *st, const char *name);
int store_match_one(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r);
int store_get_prefix_one(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, skv_store_prefix_report *rep);
size_t store_draft_one(void *store, const int32_t *hist, size_t n, int32_t *out, size_t max);
int store_get_near_one(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, const skv_store_near_params *p,
                       float *logits, skv_store_near_report *rep);
int store_list_one(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user);
int store_get_stats_one(skv_store *st, skv_store_stats *s);
int store_get_near_stats_one(skv_store *st, skv_store_near_stats *s);
int store_gc_one(skv_store *st, skv_store_gc_report *r);
int store_set_budget_one(skv_store *st, uint64_t bytes);
int store_set_price_one(skv_store *st, double seconds_per_byte);
int store_set_progress_one(skv_store *st, void (*fn)(void *user, uint64_t done, uint64_t total), void *user);
int store_train_dict_one(skv_store *st, size_t max_ids, uint64_t *id, size_t *n_ids);

#endif
