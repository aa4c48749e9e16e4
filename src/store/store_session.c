/* Session records and the two operations that run the model: put (store a session:
 * longest stored prefix, compute the rest, insert, place) and get (restore a session:
 * load the longest materialised prefix, recompute the rest, record the access). */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack (big-endian hosts) */
#include <xxhash.h>

#include "store/store_int.h"

/* ---- sessions ----------------------------------------------------------- */


/* Session record, little-endian:
 *   0 "SKVS" | 4 u32 version | 8 u64 end node | 16 u32 n_tokens | 20 u32 0 | 24 digest[16]
 *   | 40 u64 put time | version 2: 48 u64 store_tokens_sum | last: u64 XXH3-64 of the rest
 * (version 1, 56 bytes, has no token checksum: an older store's, read as it is). */
void store_ses_encode(const ses_rec *r, uint8_t *p)
{
    memset(p, 0, SESSION_SIZE);
    skv_wr32(p, SES_MAGIC);
    skv_wr32(p + 4, 2);
    skv_wr64(p + 8, r->end);
    skv_wr32(p + 16, r->n_tokens);
    memcpy(p + 24, r->digest, 16);
    skv_wr64(p + 40, r->put_time);
    skv_wr64(p + 48, r->tok_sum);
    skv_wr64(p + 56, XXH3_64bits(p, 56));
}

int store_ses_decode(const uint8_t *p, size_t n, ses_rec *r)
{
    uint32_t ver = n >= 8 ? skv_rd32(p + 4) : 0;
    if (!(ver == 1 && n == SESSION_SIZE1) && !(ver == 2 && n == SESSION_SIZE)) return SKV_ERR_FORMAT;
    if (skv_rd32(p) != SES_MAGIC || XXH3_64bits(p, n - 8) != skv_rd64(p + n - 8)) return SKV_ERR_FORMAT;
    r->end = skv_rd64(p + 8);
    r->n_tokens = skv_rd32(p + 16);
    /* put stores at least one token, so a session ends below the root: a record saying
     * otherwise was never written by the store */
    if (r->end == SKV_TRIE_ROOT || r->n_tokens == 0) return SKV_ERR_FORMAT;
    memcpy(r->digest, p + 24, 16);
    r->put_time = skv_rd64(p + 40);
    r->has_sum = ver == 2;
    r->tok_sum = ver == 2 ? skv_rd64(p + 48) : 0;
    return SKV_OK;
}

uint64_t store_tokens_sum(const int32_t *tokens, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return XXH3_64bits_withSeed(tokens, n * sizeof *tokens, (uint64_t)n); /* the ids are their own LE bytes */
#else
    XXH3_state_t s;
    uint8_t b[1024];
    XXH3_64bits_reset_withSeed(&s, (uint64_t)n);
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof b / 4 && i < n; k++, i++) skv_wr32(b + 4 * k, (uint32_t)tokens[i]);
        XXH3_64bits_update(&s, b, 4 * k);
    }
    return XXH3_64bits_digest(&s);
#endif
}

int store_ses_check_tokens(skv_store *st, const char *name, const ses_rec *r, const int32_t *tokens, size_t n)
{
    if (!r->has_sum || (n == r->n_tokens && store_tokens_sum(tokens, n) == r->tok_sum)) return SKV_OK;
    return store_err(st, SKV_ERR_FORMAT,
                     "session '%s': the tokens of its trie path do not match its record's token checksum: the "
                     "store is damaged ('seqkv store gc DIR' checks it); remove the session "
                     "('seqkv store rm DIR %s') and put it again", name, name);
}

int store_ses_check_path(tx *t, const char *name, const ses_rec *r, const skv_trie_path *p)
{
    if (!r->has_sum) return SKV_OK;
    int32_t *tok = malloc((p->matched ? p->matched : 1) * sizeof *tok);
    if (!tok) return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0, k = 0; i < p->n; i++)
        for (uint32_t j = 0; j < p->nodes[i].len && k < p->matched; j++) tok[k++] = p->nodes[i].tokens[j];
    int rc = store_ses_check_tokens(t->st, name, r, tok, p->matched);
    free(tok);
    return rc;
}

int store_ses_check_end(skv_store *st, const char *name, const skv_trie_path *p)
{
    if (p->n && p->nodes[p->n - 1].n_end >= 1) return SKV_OK;
    return store_err(st, SKV_ERR_FORMAT,
                     "session '%s': its record names a trie node where no session ends: the store is damaged "
                     "('seqkv store gc DIR' checks it); remove the session ('seqkv store rm DIR %s') and put it "
                     "again", name, name);
}

int store_check_name(skv_store *st, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > 255) return store_err(st, SKV_ERR_INVALID_ARG, "session names are 1..255 bytes");
    return SKV_OK;
}

/* 1 = absent. */
int store_ses_get(tx *t, const char *name, ses_rec *r)
{
    const uint8_t *v;
    size_t n;
    int rc = store_get(t, TB_SESSIONS, name, strlen(name), &v, &n);
    if (rc) return rc;
    if (store_ses_decode(v, n, r)) return store_err(t->st, SKV_ERR_FORMAT, "session '%s': record damaged", name);
    return SKV_OK;
}

/* ---- put ---------------------------------------------------------------- */

int store_check_tokens(skv_store *st, const int32_t *tokens, size_t n)
{
    if (!tokens || n < 1) return store_err(st, SKV_ERR_INVALID_ARG, "a session needs at least one token");
    if (n > (size_t)st->info.n_ctx_train)
        return store_err(st, SKV_ERR_RANGE, "session of %zu tokens exceeds the model's context of %d", n,
                       st->info.n_ctx_train);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= st->info.n_vocab)
            return store_err(st, SKV_ERR_INVALID_ARG, "token %zu (%d) is outside the vocabulary", i, (int)tokens[i]);
    return SKV_OK;
}

/* Rows of logits put computes at a time: put needs each row only for one token's
 * surprisal, so the buffer is bounded (LOGIT_CHUNK_BYTES, at least LOGIT_MIN_ROWS rows)
 * instead of n x n_vocab floats (4 GB for 8K tokens of a 128K vocabulary). Prefill gives
 * the same logits and KV in any chunking (docs/determinism.md). */
#define LOGIT_CHUNK_BYTES (4u << 20)
#define LOGIT_MIN_ROWS 16u

static size_t logit_rows(int n_vocab)
{
    size_t r = LOGIT_CHUNK_BYTES / ((size_t)n_vocab * sizeof(float));
    return r < LOGIT_MIN_ROWS ? LOGIT_MIN_ROWS : r;
}

/* Prefills tokens[q0, q0+c) (ctx holds [0, q0)); row r predicts token q0+r+1, whose
 * surprisal goes to sur[] for positions >= m (the new ones). */
static int surprisal_chunk(skv_store *st, const int32_t *tokens, size_t n, size_t q0, size_t c, uint32_t m,
                           float *logits, float *sur)
{
    int V = st->info.n_vocab, rc = skv_ctx_prefill(st->work, tokens + q0, c, SKV_LOGITS_ALL, logits);
    if (rc) return store_err(st, rc, "prefill: %s", skv_ctx_last_error(st->work));
    for (size_t r = 0; r < c; r++) { /* rounding never makes a cost negative */
        size_t j = q0 + r + 1;
        if (j >= m && j < n) sur[j] = store_sur_q((float)skv_token_bits(logits + r * (size_t)V, V, tokens[j]));
    }
    return SKV_OK;
}

/* Runs the model so ctx holds positions [0, n) and sur[m..n) the new tokens' surprisal
 * (position 0 has no prediction: 0). */
static int compute_new(tx *t, const skv_trie_path *p, const int32_t *tokens, size_t n, float *sur,
                       skv_store_put_report *r)
{
    skv_store *st = t->st;
    uint32_t m = p->matched, lm = store_loadable(p, m);
    uint32_t start = m ? (lm < m - 1 ? lm : m - 1) : 0; /* logits predicting token m need m-1 run */
    size_t rows = logit_rows(st->info.n_vocab);
    int rc;
    float *logits = malloc(rows * (size_t)st->info.n_vocab * sizeof *logits);
    if (!logits) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    /* put's prefill computes every row of logits, so its speed is not a restore's: the
     * cost model's recompute speed comes from the store's creation and from gets */
    uint32_t got = 0;
    rc = store_load_prefix(t, p, start, st->work, &got);
    if (!rc && got < start) rc = store_path_prefill(t, p, got, start, st->work); /* evicted KV */
    for (size_t q = start; !rc && q < n; q += rows) {
        rc = surprisal_chunk(st, tokens, n, q, n - q < rows ? n - q : rows, m, logits, sur);
        store_progress(st, q + (n - q < rows ? n - q : rows), n);
    }
    r->n_loaded = got;
    r->n_computed = (uint32_t)(n - got);
    free(logits);
    return rc;
}

/* What skv_store_put_kv's caller computed: the KV of every position, the surprisals of
 * positions [from, n). */
typedef struct put_given {
    const float *kv, *sur;
    size_t from;
} put_given;

/* compute_new without the model: ctx takes the caller's KV, sur[m..n) its surprisals
 * (rounded as surprisal_chunk rounds them). */
static int given_new(tx *t, const put_given *g, const int32_t *tokens, size_t n, uint32_t m, float *sur,
                     skv_store_put_report *r)
{
    skv_store *st = t->st;
    (void)tokens;
    if (n > (size_t)skv_ctx_n_ctx(st->work))
        return store_err(st, SKV_ERR_RANGE, "put: %zu positions exceed the work context", n);
    int rc = skv_ctx_kv_write(st->work, 0, (int)n, g->kv);
    if (rc) return store_err(st, rc, "put: %s", skv_ctx_last_error(st->work));
    for (size_t j = m ? m : 1; j < n; j++) sur[j] = store_sur_q(g->sur[j]);
    r->n_given = (uint32_t)n;
    return SKV_OK;
}

/* A session whose trie path was evicted (Redis) is a miss: put may store it again. */
static int ses_evicted(tx *t, const ses_rec *sr)
{
    skv_trie_path p;
    if (!t->st->be->evicts) return 0;
    if (skv_trie_path_to(&t->io, sr->end, &p)) {
        t->miss[1]++;
        skv_errbox_clear(t->st->err);
        return 1;
    }
    int gone = p.matched != sr->n_tokens;
    skv_trie_path_free(&p);
    return gone;
}

/* 1 when record r is of exactly these tokens (their count and checksum). */
static int ses_same(const ses_rec *r, const int32_t *tokens, size_t n)
{
    return r->n_tokens == n && r->has_sum && r->tok_sum == store_tokens_sum(tokens, n);
}

static int put_tx(tx *t, const char *name, const int32_t *tokens, size_t n, const put_given *g,
                  skv_store_put_report *r)
{
    skv_store *st = t->st;
    skv_trie_path p = {0};
    ses_rec sr = {0};
    float *sur = calloc(n, sizeof *sur);
    int rc;
    if (!sur) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    if ((rc = store_model_note(t))) goto out;
    if ((rc = store_ses_get(t, name, &sr)) == 0 && !ses_evicted(t, &sr)) {
        if (ses_same(&sr, tokens, n)) { /* a retry of a put that committed: done already */
            r->n_shared = r->n_tokens, r->existed = 1;
            goto out;
        }
        rc = store_err(st, SKV_ERR_INVALID_ARG, "a session named '%s' exists already (with other tokens)", name);
    }
    if (rc <= 0) goto out;
    if ((rc = skv_trie_match(&t->io, tokens, n, &p))) { rc = store_trie_err(st, rc, "lookup"); goto out; }
    r->n_shared = p.matched;
    if (g && g->kv && p.matched >= g->from) rc = given_new(t, g, tokens, n, p.matched, sur, r);
    else rc = compute_new(t, &p, tokens, n, sur, r);
    if (rc) goto out;
    skv_trie_path_free(&p);
    if ((rc = skv_trie_insert(&t->io, tokens, n, sur, ++t->s.clock, &sr.end))) { rc = store_trie_err(st, rc, "insert"); goto out; }
    if ((rc = skv_ctx_kv_digest(st->work, (int)n, sr.digest))) goto out;
    sr.n_tokens = (uint32_t)n;
    sr.put_time = (uint64_t)time(NULL);
    sr.tok_sum = store_tokens_sum(tokens, n);
    sr.has_sum = 1;
    uint8_t rec[SESSION_SIZE];
    store_ses_encode(&sr, rec);
    if ((rc = store_put(t, TB_SESSIONS, name, strlen(name), rec, SESSION_SIZE))) goto out;
    if ((rc = skv_trie_path_to(&t->io, sr.end, &p))) { rc = store_trie_err(st, rc, "path"); goto out; }
    r->bits = p.bits;
    rc = store_place(t, &p, st->work, &r->n_materialised, &r->n_demoted);
out:
    skv_trie_path_free(&p);
    free(sur);
    return rc;
}

typedef struct put_args {
    const char *name;
    const int32_t *tokens;
    size_t n;
    skv_store_put_report r;
    const put_given *given; /* NULL: skv_store_put */
} put_args;

static int put_run(tx *t, void *u)
{
    put_args *a = u;
    a->r = (skv_store_put_report){.n_tokens = (uint32_t)a->n};
    int rc = store_work_ctx(t->st);
    return rc ? rc : put_tx(t, a->name, a->tokens, a->n, a->given, &a->r);
}

static int settle_tx(tx *t, void *u)
{
    put_args *a = u;
    ses_rec sr;
    int rc = store_ses_get(t, a->name, &sr);
    if (rc < 0) return rc;
    return rc == 0 && ses_same(&sr, a->tokens, a->n) ? SKV_OK : 1;
}

/* A put whose commit lost its connection (the outcome unknown, or applied on a master that
 * then failed before its replicas confirmed it): the session record, read on the master
 * there is now, says whether the store has it. SKV_OK when it does; 1 when it does not
 * (nothing of the put is there: the caller runs it again); an error when the store cannot
 * be asked. */
static int put_settle(skv_store *st, put_args *a)
{
    int rc = store_run(st, 0, settle_tx, a);
    if (rc == SKV_OK) {
        skv_errbox_clear(st->err);
        return SKV_OK;
    }
    if (rc == 1) return 1;
    char why[300];
    snprintf(why, sizeof why, "%s", skv_errbox_get(st->err));
    return store_err(st, SKV_ERR_IO, "the connection to the store was lost during the commit of '%s' and the store "
                     "cannot be asked whether it was applied (%s): retry the put (a retry of a put that committed "
                     "succeeds)", a->name, why);
}

static int put_call(skv_store *st, const char *name, const int32_t *tokens, size_t n, const put_given *g,
                    skv_store_put_report *rep)
{
    put_args a = {name, tokens, n, {0}, g};
    double t0 = skv_now();
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = store_check_name(st, name)) || (rc = store_check_tokens(st, tokens, n))) return rc;
    rc = store_run(st, 1, put_run, &a);
    if (rc == SKV_ERR_IO && store_commit_unknown_take() && (rc = put_settle(st, &a)) == 1) {
        skv_errbox_clear(st->err); /* not in the store: the put runs again, once */
        rc = store_run(st, 1, put_run, &a);
        if (rc == SKV_ERR_IO && store_commit_unknown_take() && (rc = put_settle(st, &a)) == 1)
            rc = store_err(st, SKV_ERR_IO, "the connection to the store was lost during the commit, twice, and the "
                           "session '%s' is not in the store: nothing was committed; retry", a.name);
    }
    if (rc) return rc;
    a.r.seconds = skv_now() - t0;
    if (rep) *rep = a.r;
    return SKV_OK;
}

/* ---- get ---------------------------------------------------------------- */

/* Checks the session's path against its record and the caller's room, and copies its tokens. */
static int path_tokens(tx *t, const char *name, const skv_trie_path *p, const ses_rec *sr, skv_ctx *ctx,
                       int32_t *tokens, size_t cap, size_t *n_out)
{
    if (p->matched != sr->n_tokens)
        return store_err(t->st, SKV_ERR_FORMAT, "session '%s': path of %u tokens, record says %u", name, p->matched,
                         sr->n_tokens);
    if (n_out) *n_out = p->matched;
    if (p->matched > cap || p->matched > (uint32_t)skv_ctx_n_ctx(ctx))
        return store_err(t->st, SKV_ERR_RANGE, "session '%s' has %u tokens: buffer %zu / context %d too small", name,
                         p->matched, cap, skv_ctx_n_ctx(ctx));
    for (size_t i = 0, k = 0; i < p->n; i++)
        for (uint32_t j = 0; j < p->nodes[i].len; j++) tokens[k++] = p->nodes[i].tokens[j];
    return SKV_OK;
}

/* Compares ctx's first n positions with the session's stored KV digest. */
static int verify_digest(skv_store *st, const char *name, skv_ctx *ctx, uint32_t n, const ses_rec *sr)
{
    uint8_t d[16];
    int rc = skv_ctx_kv_digest(ctx, (int)n, d);
    if (rc) return rc;
    if (memcmp(d, sr->digest, 16) != 0)
        return store_err(st, SKV_ERR_MISMATCH, "session '%s': restored KV digest differs from the stored one", name);
    return SKV_OK;
}

/* A session's path that cannot be read: damage in LMDB, an eviction (a miss) in Redis. */
static int path_err(tx *t, const char *name, int rc)
{
    if (!t->st->be->evicts || rc == SKV_ERR_NOMEM || t->damaged) return store_trie_err(t->st, rc, "session path");
    t->miss[1]++;
    return store_err(t->st, SKV_ERR_IO, "session '%s' was evicted from the Redis store (a miss, counted in stats): "
                     "store it again", name);
}

typedef struct get_args {
    const char *name;
    skv_ctx *ctx;
    int flags;
    int32_t *tokens;
    size_t cap, *n_out;
    skv_store_get_report r;
    ses_rec sr;
} get_args;

static int get_tx(tx *t, void *u)
{
    get_args *g = u;
    skv_store *st = t->st;
    skv_trie_path p;
    uint32_t got = 0;
    int rc = store_ses_get(t, g->name, &g->sr);
    if (rc == 1) return store_err(st, SKV_ERR_INVALID_ARG, "no session named '%s'", g->name);
    if (rc) return rc;
    if ((rc = skv_trie_path_to(&t->io, g->sr.end, &p))) return path_err(t, g->name, rc);
    if ((rc = store_ses_check_end(st, g->name, &p)) ||
        (rc = path_tokens(t, g->name, &p, &g->sr, g->ctx, g->tokens, g->cap, g->n_out)))
        goto out;
    /* verified or not: the tokens returned are the session's (the KV digest cannot tell) */
    if ((rc = store_ses_check_tokens(st, g->name, &g->sr, g->tokens, p.matched))) goto out;
    uint32_t l = store_loadable(&p, p.matched);
    double t0 = skv_now();
    if ((rc = store_load_prefix(t, &p, l, g->ctx, &got))) goto out;
    store_progress(st, got, p.matched);
    double t1 = skv_now();
    if (p.matched > got && (rc = store_prefill(st, g->ctx, g->tokens, got, p.matched, p.matched))) goto out;
    double t2 = skv_now();
    g->r = (skv_store_get_report){.n_tokens = p.matched, .n_loaded = got, .n_computed = p.matched - got,
                                  .load_seconds = t1 - t0, .compute_seconds = t2 - t1};
    if ((g->flags & SKV_STORE_VERIFY) && !(rc = verify_digest(st, g->name, g->ctx, p.matched, &g->sr)))
        g->r.verified = 1;
out:
    skv_trie_path_free(&p);
    return rc;
}

/* Records the access (hits, clock) and the measured speeds, and lets the placement policy
 * promote nodes of the session's path now that ctx holds its whole KV (the session's
 * tokens never change, so the KV fits whatever splits happened meanwhile): a short write
 * transaction after the read. */
static int touch_tx(tx *t, void *u)
{
    get_args *g = u;
    skv_store *st = t->st;
    skv_store_get_report *r = &g->r;
    ses_rec now;
    skv_trie_path p;
    uint32_t n_dem = 0;
    if (store_ses_get(t, g->name, &now) != 0 || now.end != g->sr.end) return SKV_OK; /* removed meanwhile */
    int rc = skv_trie_touch(&t->io, now.end, ++t->s.clock);
    if (!rc) rc = skv_trie_path_to(&t->io, now.end, &p);
    if (rc && st->be->evicts) return SKV_OK; /* evicted meanwhile: nothing to record */
    if (rc) return store_trie_err(st, rc, "touch");
    if (r->n_loaded >= 16 && r->load_seconds > 0)
        t->s.load_bps = 0.5 * t->s.load_bps + 0.5 * (double)r->n_loaded * (double)store_pos_floats(st) * 4.0 *
                                                  t->s.comp_ratio / r->load_seconds;
    if (r->n_computed >= 16 && r->compute_seconds > 0)
        t->s.prefill_tps = 0.5 * t->s.prefill_tps + 0.5 * (double)r->n_computed / r->compute_seconds;
    r->n_materialised = 0;
    rc = store_place(t, &p, g->ctx, &r->n_materialised, &n_dem);
    skv_trie_path_free(&p);
    return rc;
}

/* A context with kv_quant holds a quantized view of its KV, which the store would take
 * for the exact KV (materialising lossy values that every later verified get rejects).
 * Loading no positions is the public probe: refused (SKV_ERR_UNSUPPORTED) exactly for
 * such a context, a no-op for any other. */
static int ctx_exact(skv_store *st, skv_ctx *ctx)
{
    float none = 0;
    if (skv_ctx_kv_write(ctx, skv_ctx_n_pos(ctx), 0, &none) == SKV_ERR_UNSUPPORTED)
        return store_err(st, SKV_ERR_UNSUPPORTED,
                         "skv_store_get needs a context without kv_quant: the store restores and keeps exact KV");
    return SKV_OK;
}

static int get_call(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap,
                    size_t *n_tokens, skv_store_get_report *rep)
{
    get_args g = {.name = name, .ctx = ctx, .flags = flags, .tokens = tokens, .cap = cap, .n_out = n_tokens};
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!ctx || !tokens || skv_ctx_model(ctx) != st->model)
        return store_err(st, SKV_ERR_INVALID_ARG, "skv_store_get needs a context of the store's model and a buffer");
    if ((rc = ctx_exact(st, ctx)) || (rc = store_check_name(st, name))) return rc;
    rc = store_run(st, 0, get_tx, &g);
    if (!rc && !st->readonly) rc = store_run(st, STORE_TX_CACHE, touch_tx, &g);
    if (!rc && rep) *rep = g.r;
    return rc;
}

int store_put_one(skv_store *st, const char *name, const int32_t *tokens, size_t n, skv_store_put_report *rep)
{
    return st ? store_done(st, put_call(st, name, tokens, n, NULL, rep)) : SKV_ERR_INVALID_ARG;
}

int store_put_kv_one(skv_store *st, const char *name, const int32_t *tokens, size_t n, const float *kv,
                     const float *sur, size_t from, skv_store_put_report *rep)
{
    put_given g = {kv, sur, from};
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!kv || (!sur && (from > 1 ? from : 1) < n) || from > n)
        return store_done(st, store_err(st, SKV_ERR_INVALID_ARG, "skv_store_put_kv needs the KV, the surprisals "
                                        "and from <= n"));
    return store_done(st, put_call(st, name, tokens, n, &g, rep));
}

int store_get_one(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap, size_t *n_tokens,
                    skv_store_get_report *rep)
{
    return st ? store_done(st, get_call(st, name, ctx, flags, tokens, cap, n_tokens, rep)) : SKV_ERR_INVALID_ARG;
}
