/* The store as near-reuse sees it (near.h): every session's tokens and surprisals read
 * from the trie in one snapshot, and the near-reuse counter record. Small accessors over
 * store_int.h so the store's own files need no change.
 *
 *   meta "near" -> "SKVR" | u32 version 1 | u64 gets | u64 approximate | u64 positions exact
 *                  | u64 positions approx | u64 positions recomputed | u64 XXH3-64 of the 48 bytes before */
#include "store/near_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NEAR_MAGIC 0x52564b53u /* "SKVR" */
#define NEAR_REC 56

void near_set_free(near_set *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->names[i]);
        free(s->toks[i]);
        free(s->surs[i]);
    }
    free(s->toks);
    free(s->surs);
    free(s->names);
    free(s->seqs);
    memset(s, 0, sizeof *s);
}

static int set_grow(near_set *s)
{
    size_t nc = s->cap ? 2 * s->cap : 16;
    char **nn = realloc(s->names, nc * sizeof *nn);
    if (!nn) return SKV_ERR_NOMEM;
    s->names = nn;
    near_seq *ns = realloc(s->seqs, nc * sizeof *ns);
    if (!ns) return SKV_ERR_NOMEM;
    s->seqs = ns;
    int32_t **nt = realloc(s->toks, nc * sizeof *nt);
    if (!nt) return SKV_ERR_NOMEM;
    s->toks = nt;
    float **nf = realloc(s->surs, nc * sizeof *nf);
    if (!nf) return SKV_ERR_NOMEM;
    s->surs = nf, s->cap = nc;
    return SKV_OK;
}

/* Copies a path's tokens and surprisals into owned arrays. */
static int path_arrays(const skv_trie_path *p, int32_t **tok, float **sur)
{
    size_t n = p->matched ? p->matched : 1, j = 0;
    *tok = malloc(n * sizeof **tok);
    *sur = malloc(n * sizeof **sur);
    if (!*tok || !*sur) return SKV_ERR_NOMEM;
    for (size_t i = 0; i < p->n; i++) {
        memcpy(*tok + j, p->nodes[i].tokens, p->nodes[i].len * sizeof **tok);
        memcpy(*sur + j, p->nodes[i].surprisal, p->nodes[i].len * sizeof **sur);
        j += p->nodes[i].len;
    }
    return SKV_OK;
}

/* Appends one session: its name and the tokens and surprisals along its trie path. */
static int add_session(tx *t, near_set *s, const MDB_val *k, const MDB_val *v)
{
    ses_rec r;
    skv_trie_path p;
    int32_t *tok = NULL;
    float *sur = NULL;
    char *name = NULL;
    int rc;
    if (store_ses_decode(v, &r)) return store_err(t->st, SKV_ERR_FORMAT, "a session record is damaged");
    if ((rc = skv_trie_path_to(&t->io, r.end, &p))) return store_trie_err(t->st, rc, "session path");
    if (!(rc = s->n == s->cap ? set_grow(s) : SKV_OK) && !(rc = path_arrays(&p, &tok, &sur)) &&
        !(name = malloc(k->mv_size + 1)))
        rc = SKV_ERR_NOMEM;
    if (!rc) {
        memcpy(name, k->mv_data, k->mv_size);
        name[k->mv_size] = 0;
        s->names[s->n] = name, s->toks[s->n] = tok, s->surs[s->n] = sur;
        s->seqs[s->n++] = (near_seq){tok, sur, p.matched};
    } else {
        free(tok), free(sur), free(name);
    }
    skv_trie_path_free(&p);
    return rc;
}

int near_set_load(skv_store *st, near_set *s)
{
    tx t;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc;
    memset(s, 0, sizeof *s);
    if ((rc = store_tx_begin(st, 0, &t))) return rc;
    if ((rc = mdb_cursor_open(t.txn, st->sessions, &cur))) {
        store_tx_abort(&t);
        return store_lmdb_err(st, rc, "sessions");
    }
    int r = SKV_OK;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !r; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        r = add_session(&t, s, &k, &v);
    mdb_cursor_close(cur);
    store_tx_abort(&t);
    if (!r && rc != MDB_NOTFOUND) r = store_lmdb_err(st, rc, "sessions");
    if (r) near_set_free(s);
    return r;
}

/* ---- the counter record ------------------------------------------------- */

static int stats_decode(const MDB_val *v, skv_store_near_stats *s)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size != NEAR_REC || skv_rd32(p) != NEAR_MAGIC || skv_rd32(p + 4) != 1 ||
        XXH3_64bits(p, NEAR_REC - 8) != skv_rd64(p + NEAR_REC - 8))
        return SKV_ERR_FORMAT;
    *s = (skv_store_near_stats){skv_rd64(p + 8), skv_rd64(p + 16), skv_rd64(p + 24), skv_rd64(p + 32), skv_rd64(p + 40)};
    return SKV_OK;
}

static void stats_encode(const skv_store_near_stats *s, uint8_t *p)
{
    skv_wr32(p, NEAR_MAGIC);
    skv_wr32(p + 4, 1);
    skv_wr64(p + 8, s->n_gets);
    skv_wr64(p + 16, s->n_approximate);
    skv_wr64(p + 24, s->positions_exact);
    skv_wr64(p + 32, s->positions_approx);
    skv_wr64(p + 40, s->positions_recomputed);
    skv_wr64(p + NEAR_REC - 8, XXH3_64bits(p, NEAR_REC - 8));
}

static int stats_read(tx *t, skv_store_near_stats *s)
{
    MDB_val k = {4, (void *)"near"}, v;
    int rc = mdb_get(t->txn, t->st->meta, &k, &v);
    memset(s, 0, sizeof *s);
    if (rc == MDB_NOTFOUND) return SKV_OK;
    if (rc) return store_lmdb_err(t->st, rc, "near-reuse record");
    if (stats_decode(&v, s)) return store_err(t->st, SKV_ERR_FORMAT, "the near-reuse record (meta \"near\") is damaged");
    return SKV_OK;
}

int near_stats_add(skv_store *st, const skv_store_near_report *r)
{
    tx t;
    skv_store_near_stats s;
    uint8_t buf[NEAR_REC];
    int rc = store_tx_begin(st, 1, &t);
    if (rc) return rc;
    if ((rc = stats_read(&t, &s))) {
        store_tx_abort(&t);
        return rc;
    }
    s.n_gets++;
    s.n_approximate += r->approximate != 0;
    s.positions_exact += r->n_exact;
    s.positions_approx += r->n_approx;
    s.positions_recomputed += r->n_recomputed;
    stats_encode(&s, buf);
    MDB_val k = {4, (void *)"near"}, v = {NEAR_REC, buf};
    if ((rc = mdb_put(t.txn, st->meta, &k, &v, 0))) {
        store_tx_abort(&t);
        return store_lmdb_err(st, rc, "near-reuse record");
    }
    return store_tx_commit(&t);
}

int skv_store_get_near_stats(skv_store *st, skv_store_near_stats *s)
{
    tx t;
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!s) return store_done(st, store_err(st, SKV_ERR_INVALID_ARG, "skv_store_get_near_stats: NULL output"));
    if ((rc = store_tx_begin(st, 0, &t))) return store_done(st, rc);
    rc = stats_read(&t, s);
    store_tx_abort(&t);
    return store_done(st, rc);
}
