/* The store's read and maintenance calls: match, remove, list, stats, gc, and the
 * model-free bulk insert the benchmarks use. */
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store_int.h"

/* ---- match, remove, list ------------------------------------------------ */

int skv_store_match(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r)
{
    skv_trie_path p;
    tx t;
    int rc;
    if (!st || !r || (n && !tokens)) return st ? store_err(st, SKV_ERR_INVALID_ARG, "match: bad arguments") : SKV_ERR_INVALID_ARG;
    if ((rc = store_tx_begin(st, 0, &t))) return rc;
    rc = skv_trie_match(&t.io, tokens, n, &p);
    if (!rc) {
        uint32_t l = store_loadable(&p, p.matched);
        *r = (skv_store_match_result){.n_matched = p.matched, .bits = p.bits, .n_load = l, .n_compute = p.matched - l};
        skv_trie_path_free(&p);
    }
    store_tx_abort(&t);
    return rc ? store_trie_err(st, rc, "lookup") : SKV_OK;
}

static int remove_call(skv_store *st, const char *name)
{
    ses_rec sr;
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = store_check_name(st, name)) || (rc = store_tx_begin(st, 1, &t))) return rc;
    if ((rc = store_ses_get(&t, name, &sr)) == 1) rc = store_err(st, SKV_ERR_INVALID_ARG, "no session named '%s'", name);
    if (!rc && (rc = skv_trie_remove(&t.io, sr.end))) rc = store_trie_err(st, rc, "remove");
    if (!rc) {
        MDB_val k = store_name_key(name);
        if ((rc = mdb_del(t.txn, st->sessions, &k, NULL))) rc = store_lmdb_err(st, rc, "delete session");
    }
    if (rc) {
        store_tx_abort(&t);
        return rc;
    }
    return store_tx_commit(&t);
}

int skv_store_list(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user)
{
    MDB_cursor *cur;
    MDB_val k, v;
    tx t;
    char name[256];
    int rc, r = SKV_OK;
    if (!st || !cb) return SKV_ERR_INVALID_ARG;
    if ((rc = store_tx_begin(st, 0, &t))) return rc;
    if ((rc = mdb_cursor_open(t.txn, st->sessions, &cur))) {
        store_tx_abort(&t);
        return store_lmdb_err(st, rc, "cursor");
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ses_rec sr;
        if (k.mv_size < 1 || k.mv_size > 255 || store_ses_decode(&v, &sr)) {
            r = store_err(st, SKV_ERR_FORMAT, "session record damaged");
            break;
        }
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = 0;
        skv_store_session_info si = {.name = name, .n_tokens = sr.n_tokens, .put_time = sr.put_time};
        memcpy(si.digest, sr.digest, 16);
        r = cb(user, &si) ? 1 : SKV_OK;
    }
    mdb_cursor_close(cur);
    store_tx_abort(&t);
    if (rc && rc != MDB_NOTFOUND) return store_lmdb_err(st, rc, "list");
    return r < 0 ? r : SKV_OK;
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

/* Pages on LMDB's free list (reusable, so not "in use"): each record of the free
 * database (dbi 0) is a page-number list whose first word is its length. */
static uint64_t free_pages(tx *t)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint64_t n = 0;
    if (mdb_cursor_open(t->txn, 0, &cur)) return 0;
    while (!mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (v.mv_size >= sizeof(size_t)) {
            size_t cnt;
            memcpy(&cnt, v.mv_data, sizeof cnt);
            n += cnt;
        }
    mdb_cursor_close(cur);
    return n;
}

int skv_store_get_stats(skv_store *st, skv_store_stats *s)
{
    MDB_envinfo ei;
    MDB_stat ms;
    tx t;
    double f16 = 0, tq = 0;
    int rc;
    if (!st || !s) return SKV_ERR_INVALID_ARG;
    memset(s, 0, sizeof *s);
    if ((rc = skv_store_list(st, sum_session, s))) return rc;
    if ((rc = store_tx_begin(st, 0, &t))) return rc;
    rc = store_scan_nodes(&t, count_node, s);
    uint64_t unused = free_pages(&t);
    mdb_env_info(st->env, &ei);
    mdb_env_stat(st->env, &ms);
    store_tx_abort(&t);
    if (rc) return rc;
    snprintf(s->model_name, sizeof s->model_name, "%s", st->info.name);
    uint64_t pages = (uint64_t)ei.me_last_pgno + 1;
    s->disk_bytes = (pages > unused ? pages - unused : pages) * ms.ms_psize;
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
    return SKV_OK;
}

/* The trie's invariants; a failure always carries a message (the check's own, the
 * storage's, or a generic one). */
static int gc_check_trie(tx *t)
{
    char e[256] = "";
    int rc = skv_trie_check(&t->io, e, sizeof e);
    if (!rc) return SKV_OK;
    if (!e[0]) snprintf(e, sizeof e, "%s", skv_errbox_get(t->st->err)[0] ? skv_errbox_get(t->st->err)
                                                                        : "the trie could not be read");
    return store_err(t->st, rc == SKV_ERR_INTERNAL ? SKV_ERR_FORMAT : rc,
                     "store check failed: %s (the store is damaged)", e);
}

/* Every KV blob left decodes (length, zstd frame, checksum) and belongs to a materialised node. */
static int gc_check_blobs(tx *t, const mat_set *m)
{
    for (size_t i = 0; i < m->n; i++) {
        skv_trie_node nd;
        float *kv;
        if (!m->c[i].alive) continue;
        int rc = store_io_get_node(t, m->c[i].id, &nd);
        if (rc == 1) rc = store_err(t->st, SKV_ERR_FORMAT, "KV of missing node %llu", (unsigned long long)m->c[i].id);
        if (!rc && !(nd.flags & SKV_TRIE_MAT))
            rc = store_err(t->st, SKV_ERR_FORMAT, "node %llu holds KV but is not marked materialised",
                           (unsigned long long)nd.id);
        if (!rc && !(rc = store_blob_get(t, nd.id, nd.len, &kv))) free(kv);
        skv_trie_node_clear(&nd);
        if (rc)
            return store_err(t->st, rc == SKV_ERR_NOMEM ? rc : SKV_ERR_FORMAT,
                             "%.300s. The sessions are intact: 'seqkv store gc DIR --budget 0' drops the "
                             "materialised KV (restores recompute it), then 'seqkv store gc DIR --budget BYTES' "
                             "materialises again", skv_errbox_get(t->st->err));
    }
    return SKV_OK;
}

/* Check, demote down to the budget, check the KV left, materialise up to the budget. */
static int gc_tx(tx *t, skv_store_gc_report *g)
{
    mat_set m;
    int rc = gc_check_trie(t);
    if (rc || (rc = store_mat_load(t, &m))) return rc;
    uint64_t before = m.total;
    if (!(rc = store_evict_to(t, &m, t->s.budget, &g->n_demoted)) && !(rc = gc_check_blobs(t, &m)))
        rc = store_fill_to(t, &m, t->s.budget, &g->n_materialised, &g->n_demoted);
    g->mat_bytes = m.total;
    g->bytes_freed = before > m.total ? before - m.total : 0;
    free(m.c);
    return rc;
}

static int gc_call(skv_store *st, skv_store_gc_report *r)
{
    skv_store_gc_report g = {0};
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = store_tx_begin(st, 1, &t))) return rc;
    if ((rc = gc_tx(&t, &g))) {
        store_tx_abort(&t);
        return rc;
    }
    if ((rc = store_tx_commit(&t))) return rc;
    if (r) *r = g;
    return SKV_OK;
}

/* ---- internal: model-free bulk insert (benchmarks) ----------------------- */

int skv_store__put_tokens(skv_store *st, size_t n_sessions, const char *const *names, const int32_t *const *tokens,
                          const size_t *lens, const float *const *surprisal)
{
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if ((rc = store_tx_begin(st, 1, &t))) return rc;
    for (size_t i = 0; i < n_sessions && !rc; i++) {
        ses_rec sr = {.n_tokens = (uint32_t)lens[i], .put_time = (uint64_t)time(NULL)};
        uint8_t rec[SESSION_SIZE];
        if ((rc = store_check_name(st, names[i])) || (rc = store_check_tokens(st, tokens[i], lens[i]))) break;
        if ((rc = skv_trie_insert(&t.io, tokens[i], lens[i], surprisal[i], ++t.s.clock, &sr.end))) {
            rc = store_trie_err(st, rc, "insert");
            break;
        }
        store_ses_encode(&sr, rec);
        MDB_val k = store_name_key(names[i]), v = {SESSION_SIZE, rec};
        if ((rc = mdb_put(t.txn, st->sessions, &k, &v, MDB_NOOVERWRITE)))
            rc = rc == MDB_KEYEXIST ? store_err(st, SKV_ERR_INVALID_ARG, "session '%s' exists", names[i])
                                    : store_lmdb_err(st, rc, "write session");
    }
    if (rc) {
        store_tx_abort(&t);
        return rc;
    }
    return store_tx_commit(&t);
}

int skv_store_remove(skv_store *st, const char *name)
{
    return st ? store_done(st, remove_call(st, name)) : SKV_ERR_INVALID_ARG;
}

int skv_store_gc(skv_store *st, skv_store_gc_report *r)
{
    return st ? store_done(st, gc_call(st, r)) : SKV_ERR_INVALID_ARG;
}
