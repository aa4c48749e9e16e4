/* The store as near-reuse sees it (near.h): every session's tokens and surprisals read
 * from the trie in one read transaction (store_run: LMDB or Redis, backend.h), and the
 * near-reuse counter record. Small accessors over store_int.h.
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

typedef struct {
    tx *t;
    near_set *s;
} load_args;

/* Appends one session (a TB_SESSIONS record): its name and the tokens and surprisals along
 * its trie path. */
static int add_session(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    load_args *a = u;
    near_set *s = a->s;
    ses_rec r;
    skv_trie_path p;
    int32_t *tok = NULL;
    float *sur = NULL;
    char *name = NULL;
    int rc;
    if (store_ses_decode(v, vn, &r)) return store_err(a->t->st, SKV_ERR_FORMAT, "a session record is damaged");
    if ((rc = skv_trie_path_to(&a->t->io, r.end, &p))) return store_trie_err(a->t->st, rc, "session path");
    if (!(rc = s->n == s->cap ? set_grow(s) : SKV_OK) && !(rc = path_arrays(&p, &tok, &sur)) &&
        !(name = malloc(kn + 1)))
        rc = SKV_ERR_NOMEM;
    if (!rc) {
        memcpy(name, k, kn);
        name[kn] = 0;
        /* the tokens reused are the session's; a path cut short (a Redis eviction) is a
         * prefix, as before */
        if (p.matched == r.n_tokens && !(rc = store_ses_check_end(a->t->st, name, &p)))
            rc = store_ses_check_tokens(a->t->st, name, &r, tok, p.matched);
    }
    if (!rc) {
        s->names[s->n] = name, s->toks[s->n] = tok, s->surs[s->n] = sur;
        s->seqs[s->n++] = (near_seq){tok, sur, p.matched};
    } else {
        free(tok), free(sur), free(name);
    }
    skv_trie_path_free(&p);
    return rc;
}

/* One read transaction over the sessions; run again from an empty set on a conflict. */
static int load_tx(tx *t, void *u)
{
    near_set *s = u;
    near_set_free(s);
    load_args a = {t, s};
    int rc = store_scan(t, TB_SESSIONS, NULL, 0, add_session, &a);
    return rc < 0 ? rc : SKV_OK;
}

int near_set_load(skv_store *st, near_set *s)
{
    memset(s, 0, sizeof *s);
    int rc = store_run(st, 0, load_tx, s);
    if (rc) near_set_free(s);
    return rc;
}

/* ---- the counter record ------------------------------------------------- */

static int stats_decode(const uint8_t *p, size_t n, skv_store_near_stats *s)
{
    if (n != NEAR_REC || skv_rd32(p) != NEAR_MAGIC || skv_rd32(p + 4) != 1 ||
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
    const uint8_t *v;
    size_t vn;
    int rc = store_get(t, TB_META, "near", 4, &v, &vn);
    memset(s, 0, sizeof *s);
    if (rc == 1) return SKV_OK;
    if (rc) return rc;
    if (stats_decode(v, vn, s)) return store_err(t->st, SKV_ERR_FORMAT, "the near-reuse record (meta \"near\") is damaged");
    return SKV_OK;
}

static int stats_add_tx(tx *t, void *u)
{
    const skv_store_near_report *r = *(const skv_store_near_report **)u;
    skv_store_near_stats s;
    uint8_t buf[NEAR_REC];
    int rc = stats_read(t, &s);
    if (rc) return rc;
    s.n_gets++;
    s.n_approximate += r->approximate != 0;
    s.positions_exact += r->n_exact;
    s.positions_approx += r->n_approx;
    s.positions_recomputed += r->n_recomputed;
    stats_encode(&s, buf);
    return store_put(t, TB_META, "near", 4, buf, NEAR_REC);
}

int near_stats_add(skv_store *st, const skv_store_near_report *r)
{
    return store_run(st, 1, stats_add_tx, &r);
}

static int stats_get_tx(tx *t, void *u) { return stats_read(t, u); }

int store_get_near_stats_one(skv_store *st, skv_store_near_stats *s)
{
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!s) return store_done(st, store_err(st, SKV_ERR_INVALID_ARG, "skv_store_get_near_stats: NULL output"));
    return store_done(st, store_run(st, 0, stats_get_tx, s));
}
