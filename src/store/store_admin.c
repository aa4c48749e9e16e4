/* The store's read and maintenance calls: match, remove, list, stats, gc, and the
 * model-free bulk insert the benchmarks use. */
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store_int.h"

/* ---- match, remove, list ------------------------------------------------ */

typedef struct match_args {
    const int32_t *tokens;
    size_t n;
    skv_store_match_result r;
} match_args;

static int match_tx(tx *t, void *u)
{
    match_args *a = u;
    skv_trie_path p;
    int rc = skv_trie_match(&t->io, a->tokens, a->n, &p);
    if (rc) return store_trie_err(t->st, rc, "lookup");
    uint32_t l = store_loadable(&p, p.matched);
    a->r = (skv_store_match_result){.n_matched = p.matched, .bits = p.bits, .n_load = l, .n_compute = p.matched - l};
    skv_trie_path_free(&p);
    return SKV_OK;
}

int store_match_one(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r)
{
    match_args a = {tokens, n, {0}};
    if (!st || !r || (n && !tokens)) return st ? store_err(st, SKV_ERR_INVALID_ARG, "match: bad arguments") : SKV_ERR_INVALID_ARG;
    int rc = store_run(st, 0, match_tx, &a);
    if (!rc) *r = a.r;
    return rc;
}

static int remove_tx(tx *t, void *u)
{
    const char *name = *(const char **)u;
    ses_rec sr;
    int rc = store_ses_get(t, name, &sr);
    if (rc == 1) return store_err(t->st, SKV_ERR_INVALID_ARG, "no session named '%s'", name);
    if (!rc && (rc = skv_trie_remove(&t->io, sr.end))) {
        if (!t->st->be->evicts || rc == SKV_ERR_NOMEM) return store_trie_err(t->st, rc, "remove");
        t->miss[1]++; /* its path was evicted (Redis): drop the record; the rest ages out */
        skv_errbox_clear(t->st->err);
        rc = SKV_OK;
    }
    return rc ? rc : store_del(t, TB_SESSIONS, name, strlen(name));
}

static int remove_call(skv_store *st, const char *name)
{
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = store_check_name(st, name))) return rc;
    return store_run(st, 1, remove_tx, &name);
}

typedef struct list_args {
    skv_store *st;
    int (*cb)(void *user, const skv_store_session_info *s);
    void *user;
} list_args;

static int list_rec(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    list_args *a = u;
    char name[256];
    ses_rec sr;
    if (kn < 1 || kn > 255 || store_ses_decode(v, vn, &sr))
        return store_err(a->st, SKV_ERR_FORMAT, "session record damaged");
    memcpy(name, k, kn);
    name[kn] = 0;
    skv_store_session_info si = {.name = name, .n_tokens = sr.n_tokens, .put_time = sr.put_time};
    memcpy(si.digest, sr.digest, 16);
    return a->cb(a->user, &si) ? 1 : SKV_OK;
}

/* One pass over the sessions (a callback's stop is not an error). In Redis the listing is
 * not one snapshot: sessions put or removed meanwhile may or may not appear. */
int store_list_one(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user)
{
    list_args a = {st, cb, user};
    tx t;
    if (!st || !cb) return SKV_ERR_INVALID_ARG;
    int rc = store_tx_begin(st, 0, &t);
    if (rc) return rc;
    rc = store_scan(&t, TB_SESSIONS, NULL, 0, list_rec, &a);
    store_tx_abort(&t);
    return rc < 0 ? rc : SKV_OK;
}

/* ---- stats and gc ------------------------------------------------------- */

static int count_node(void *u, const skv_trie_node *nd)
{
    skv_store_stats *s = u;
    s->n_nodes++;
    s->unique_positions += nd->len;
    for (uint32_t i = 0; i < nd->len; i++) s->token_floor_bits += nd->surprisal[i];
    if (nd->flags & SKV_TRIE_MAT) {
        s->mat_nodes++;
        s->mat_positions += nd->len;
        s->mat_bytes += nd->kv_bytes;
    }
    return 0;
}

static int sum_session(void *user, const skv_store_session_info *si)
{
    skv_store_stats *s = user;
    s->n_sessions++;
    s->session_tokens += si->n_tokens;
    return 0;
}

int store_get_stats_one(skv_store *st, skv_store_stats *s)
{
    tx t;
    double f16 = 0, tq = 0;
    int rc;
    if (!st || !s) return SKV_ERR_INVALID_ARG;
    memset(s, 0, sizeof *s);
    if ((rc = store_list_one(st, sum_session, s))) return rc;
    if ((rc = store_tx_begin(st, 0, &t))) return rc;
    rc = store_scan_nodes(&t, count_node, s);
    if (!rc) rc = store_tier_count(&t, s);
    store_tx_abort(&t);
    if (rc || (rc = st->be->ops->bytes(st->be, &s->disk_bytes))) return rc;
    uint64_t miss[2];
    st->be->ops->misses(st->be, NULL, miss);
    s->kv_misses = miss[0];
    s->node_misses = miss[1];
    snprintf(s->model_name, sizeof s->model_name, "%s", st->info.name);
    s->dedup_ratio = s->unique_positions ? (double)s->session_tokens / (double)s->unique_positions : 0;
    s->bits_per_position = s->session_tokens ? (double)s->disk_bytes * 8.0 / (double)s->session_tokens : 0;
    skv_kv_position_bytes(st->model, "f16", &f16);
    skv_kv_position_bytes(st->model, "tq3.5", &tq);
    s->f16_bytes = f16 * (double)s->session_tokens;
    s->tq35_bytes = tq * (double)s->session_tokens;
    s->budget = t.s.budget;
    s->prefill_tps = t.s.prefill_tps;
    s->load_bps = t.s.load_bps;
    s->prior_weight = t.s.prior_weight;
    s->clock = t.s.clock;
    s->cm_tps = t.s.cm_tps;
    s->cm_bpp = t.s.cm_bpp;
    return SKV_OK;
}

/* The trie's invariants; a failure always carries a message (the check's own, the
 * storage's, or a generic one). */
static int gc_check_trie(tx *t)
{
    skv_err e = {0};
    int rc = skv_trie_check(&t->io, &e);
    if (!rc) return SKV_OK;
    if (!e.msg[0]) skv_fail(&e, rc, "%.255s", skv_errbox_get(t->st->err)[0] ? skv_errbox_get(t->st->err)
                                                                           : "the trie could not be read");
    return store_err(t->st, rc == SKV_ERR_INTERNAL ? SKV_ERR_FORMAT : rc,
                     "store check failed: %.255s (the store is damaged)", e.msg);
}

/* Node id's KV decodes (length, zstd frame, checksum) and the node is marked materialised. */
static int check_blob(tx *t, uint64_t id)
{
    skv_trie_node nd;
    float *kv;
    int rc = store_io_get_node(t, id, &nd);
    if (rc == 1 && t->st->be->evicts) return SKV_OK;
    if (rc == 1) return store_err(t->st, SKV_ERR_FORMAT, "KV of missing node %llu", (unsigned long long)id);
    if (rc) return rc;
    if (!(nd.flags & SKV_TRIE_MAT))
        rc = store_err(t->st, SKV_ERR_FORMAT, "node %llu holds KV but is not marked materialised",
                       (unsigned long long)nd.id);
    if (!rc && !(rc = store_blob_get(t, nd.id, nd.len, &kv))) free(kv);
    skv_trie_node_clear(&nd);
    return rc == 1 ? SKV_OK : rc;
}

/* Every KV blob left decodes and belongs to a materialised node. */
static int gc_check_blobs(tx *t)
{
    store_ids l;
    int rc = store_mat_ids(t, &l);
    for (size_t i = 0; !rc && i < l.n; i++) rc = check_blob(t, l.id[i]);
    free(l.id);
    if (rc)
        return store_err(t->st, rc == SKV_ERR_NOMEM ? rc : SKV_ERR_FORMAT,
                         "%.300s. The sessions are intact: 'seqkv store gc DIR --budget 0' drops the "
                         "materialised KV (restores recompute it), then 'seqkv store gc DIR --budget BYTES' "
                         "materialises again", skv_errbox_get(t->st->err));
    return SKV_OK;
}

typedef struct ses_check {
    tx *t;
    store_ids ends; /* each session's end node, one entry per record (not on Redis) */
} ses_check;

/* One session's path ends where a session ends and holds its tokens (the record's token
 * checksum, version 2). On Redis a path cut short by an eviction is a miss, not damage. */
static int check_session(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    ses_check *c = u;
    tx *t = c->t;
    char name[256];
    ses_rec sr;
    skv_trie_path p;
    if (kn < 1 || kn > 255 || store_ses_decode(v, vn, &sr)) return store_err(t->st, SKV_ERR_FORMAT, "session record damaged");
    memcpy(name, k, kn);
    name[kn] = 0;
    int rc = skv_trie_path_to(&t->io, sr.end, &p), gone = t->st->be->evicts && !t->damaged;
    if (rc && gone && rc != SKV_ERR_NOMEM) return skv_errbox_clear(t->st->err), SKV_OK;
    if (rc) return store_trie_err(t->st, rc, "session path");
    if (p.matched != sr.n_tokens)
        rc = gone ? SKV_OK : store_err(t->st, SKV_ERR_FORMAT, "session '%s': path of %u tokens, record says %u",
                                       name, p.matched, sr.n_tokens);
    else if (!(rc = store_ses_check_end(t->st, name, &p)))
        rc = store_ses_check_path(t, name, &sr, &p);
    skv_trie_path_free(&p);
    if (!rc && !t->st->be->evicts && store_ids_add(&c->ends, sr.end)) rc = store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    return rc;
}

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct end_count {
    tx *t;
    const store_ids *ends; /* sorted */
} end_count;

/* A node's n_end is the number of session records ending there (a record redirected to
 * another session's end node, or a node's count changed, leaves them unequal). */
static int count_ends(void *u, const skv_trie_node *nd)
{
    end_count *e = u;
    size_t lo = 0, hi = e->ends->n;
    while (lo < hi) { /* the first entry >= nd->id */
        size_t mid = lo + (hi - lo) / 2;
        if (e->ends->id[mid] < nd->id) lo = mid + 1;
        else hi = mid;
    }
    uint32_t n = 0;
    while (lo + n < e->ends->n && e->ends->id[lo + n] == nd->id) n++;
    if (n == nd->n_end) return 0;
    return store_err(e->t->st, SKV_ERR_FORMAT, "node %llu: %u session record(s) end there, the node says %u",
                     (unsigned long long)nd->id, n, nd->n_end);
}

/* Every session's path holds the tokens its record was written for, and every node's
 * count of sessions ending there matches the records (LMDB; Redis evicts either). */
static int gc_check_sessions(tx *t)
{
    char e[480];
    ses_check c = {t, {0}};
    int rc = store_scan(t, TB_SESSIONS, NULL, 0, check_session, &c);
    if (rc >= 0 && !t->st->be->evicts) {
        qsort(c.ends.id, c.ends.n, sizeof *c.ends.id, cmp_id);
        end_count ec = {t, &c.ends};
        rc = store_scan_nodes(t, count_ends, &ec);
    }
    free(c.ends.id);
    if (rc >= 0) return SKV_OK;
    snprintf(e, sizeof e, "%s", skv_errbox_get(t->st->err)); /* the message is formatted into its own box */
    return store_err(t->st, rc, "store check failed: %s", e);
}

/* Check, demote down to the budget, check the KV left, materialise up to the budget. */
static int gc_tx(tx *t, void *u)
{
    skv_store_gc_report *g = u;
    uint64_t before, after;
    *g = (skv_store_gc_report){0};
    int rc = t->st->be->evicts ? SKV_OK : gc_check_trie(t); /* Redis: evictions break invariants */
    if (!rc) rc = gc_check_sessions(t);
    if (rc || (rc = store_mat_total(t, &before))) return rc;
    if (!(rc = store_evict_to(t, t->s.budget, &g->n_demoted)) && !(rc = gc_check_blobs(t)))
        rc = store_fill_to(t, t->s.budget, &g->n_materialised, &g->n_demoted);
    if (!rc) rc = store_retier(t, &g->n_retiered);
    if (!rc && !(rc = store_mat_total(t, &after))) {
        g->mat_bytes = after;
        g->bytes_freed = before > after ? before - after : 0;
    }
    return rc;
}

static int gc_call(skv_store *st, skv_store_gc_report *r)
{
    skv_store_gc_report g = {0};
    if (!st) return SKV_ERR_INVALID_ARG;
    int rc = store_run(st, 1, gc_tx, &g);
    if (!rc && r) *r = g;
    return rc;
}

/* ---- internal: model-free bulk insert (benchmarks) ----------------------- */

typedef struct bulk_args {
    size_t n;
    const char *const *names;
    const int32_t *const *tokens;
    const size_t *lens;
    const float *const *surprisal;
} bulk_args;

static int bulk_one(tx *t, const bulk_args *a, size_t i)
{
    skv_store *st = t->st;
    ses_rec sr = {.n_tokens = (uint32_t)a->lens[i], .put_time = (uint64_t)time(NULL), .has_sum = 1};
    uint8_t rec[SESSION_SIZE];
    const uint8_t *old;
    size_t on, nl = strlen(a->names[i]);
    int rc = store_check_name(st, a->names[i]);
    if (rc || (rc = store_check_tokens(st, a->tokens[i], a->lens[i]))) return rc;
    if ((rc = store_get(t, TB_SESSIONS, a->names[i], nl, &old, &on)) <= 0)
        return rc ? rc : store_err(st, SKV_ERR_INVALID_ARG, "session '%s' exists", a->names[i]);
    float *sq = malloc((a->lens[i] ? a->lens[i] : 1) * sizeof *sq); /* on the stored grid */
    if (!sq) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    for (size_t j = 0; j < a->lens[i]; j++) sq[j] = store_sur_q(a->surprisal[i][j]);
    rc = skv_trie_insert(&t->io, a->tokens[i], a->lens[i], sq, ++t->s.clock, &sr.end);
    free(sq);
    if (rc) return store_trie_err(st, rc, "insert");
    sr.tok_sum = store_tokens_sum(a->tokens[i], a->lens[i]);
    store_ses_encode(&sr, rec);
    return store_put(t, TB_SESSIONS, a->names[i], nl, rec, SESSION_SIZE);
}

static int bulk_tx(tx *t, void *u)
{
    const bulk_args *a = u;
    int rc = SKV_OK;
    for (size_t i = 0; i < a->n && !rc; i++) rc = bulk_one(t, a, i);
    return rc;
}

int skv_store__put_tokens(skv_store *st, size_t n_sessions, const char *const *names, const int32_t *const *tokens,
                          const size_t *lens, const float *const *surprisal)
{
    bulk_args a = {n_sessions, names, tokens, lens, surprisal};
    return st ? store_run(st, 1, bulk_tx, &a) : SKV_ERR_INVALID_ARG;
}

int store_remove_one(skv_store *st, const char *name)
{
    return st ? store_done(st, remove_call(st, name)) : SKV_ERR_INVALID_ARG;
}

int store_gc_one(skv_store *st, skv_store_gc_report *r)
{
    return st ? store_done(st, gc_call(st, r)) : SKV_ERR_INVALID_ARG;
}
