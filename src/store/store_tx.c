/* The bottom of the session store: errors, the state record and transactions over the
 * backend's tables (backend.h). Every other store file calls down to this one; it calls
 * no other store file (the trie's storage, store_kv.c, is wired in by the opener through
 * st->io_init), so the store's files form a one-way chain (store_int.h).
 *
 * Every put / remove / gc is one write transaction: a crash leaves the store as of the
 * last commit, never half a session. A transaction that lost a race with another writer
 * (Redis) is run again from its start (store_run).
 */
#include "core/fpguard.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "store/store_int.h"

int store_err(skv_store *st, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    skv_errbox_vset(st->err, status, fmt, ap);
    va_end(ap);
    return status;
}

int store_done(skv_store *st, int status)
{
    if (status < 0 && !skv_errbox_get(st->err)[0])
        store_err(st, status, "%s%s", skv_status_str(status),
                  status == SKV_ERR_NOMEM ? " (nothing was changed; retry with more memory)" : "");
    return status;
}

const char *skv_store_last_error(const skv_store *st) { return st ? skv_errbox_get(st->err) : "no store"; }

/* ---- meta records ------------------------------------------------------- */

/* state (version 3, 80 bytes; version 2 stores hold the first 56 bytes + checksum):
 *   0 next_id | 8 clock | 16 budget | 24 f64 prefill_tps | 32 f64 load_bps | 40 f64 prior_weight
 *   | 48 f64 comp_ratio | 56 f64 cm_tps | 64 f64 cm_bpp | 72 u64 XXH3-64 */
static void wr_f64(uint8_t *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    skv_wr64(p, u);
}

static double rd_f64(const uint8_t *p)
{
    uint64_t u = skv_rd64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static void state_encode(const store_state *s, uint8_t *p)
{
    memset(p, 0, STATE_SIZE3);
    skv_wr64(p, s->next_id);
    skv_wr64(p + 8, s->clock);
    skv_wr64(p + 16, s->budget);
    wr_f64(p + 24, s->prefill_tps);
    wr_f64(p + 32, s->load_bps);
    wr_f64(p + 40, s->prior_weight);
    wr_f64(p + 48, s->comp_ratio);
    wr_f64(p + 56, s->cm_tps);
    wr_f64(p + 64, s->cm_bpp);
    skv_wr64(p + 72, XXH3_64bits(p, 72));
}

static int state_decode(const uint8_t *p, size_t n, store_state *s)
{
    if ((n != STATE_SIZE && n != STATE_SIZE3) || XXH3_64bits(p, n - 8) != skv_rd64(p + n - 8)) return SKV_ERR_FORMAT;
    s->next_id = skv_rd64(p);
    s->clock = skv_rd64(p + 8);
    s->budget = skv_rd64(p + 16);
    s->prefill_tps = rd_f64(p + 24);
    s->load_bps = rd_f64(p + 32);
    s->prior_weight = rd_f64(p + 40);
    s->comp_ratio = rd_f64(p + 48);
    s->cm_tps = n == STATE_SIZE3 ? rd_f64(p + 56) : STORE_CM_TPS0;
    s->cm_bpp = n == STATE_SIZE3 ? rd_f64(p + 64) : STORE_CM_BPP0;
    if (!(s->prefill_tps > 0) || !(s->load_bps > 0) || !(s->prior_weight >= 0) ||
        !(s->comp_ratio > 0 && s->comp_ratio <= STORE_MAX_COMP_RATIO) ||
        !(s->cm_tps > 0) || !(s->cm_bpp > 0) || s->next_id == 0)
        return SKV_ERR_FORMAT;
    return SKV_OK;
}

static int state_load(tx *t)
{
    const uint8_t *v;
    size_t n;
    int rc = t->st->be->ops->get(t->bt, TB_META, "state", 5, STORE_NOWATCH, &v, &n);
    if (rc == 1 && t->st->be->evicts) { /* evicted: start the statistics again */
        t->s = (store_state){.next_id = 1, .budget = DEFAULT_BUDGET, .prefill_tps = 2000.0, .load_bps = 200e6,
                             .prior_weight = 16.0, .comp_ratio = 0.8, .cm_tps = STORE_CM_TPS0,
                             .cm_bpp = STORE_CM_BPP0};
        memset(&t->s0, 0xff, sizeof t->s0);
        return SKV_OK;
    }
    if (rc == 1) return store_err(t->st, SKV_ERR_FORMAT, "store state record missing (damaged)");
    if (rc) return rc;
    if (state_decode(v, n, &t->s)) return store_err(t->st, SKV_ERR_FORMAT, "store state record damaged");
    t->s0 = t->s;
    return SKV_OK;
}

static int state_save(tx *t)
{
    uint8_t buf[STATE_SIZE3];
    if (!memcmp(&t->s, &t->s0, sizeof t->s)) return SKV_OK;
    state_encode(&t->s, buf);
    return store_put(t, TB_META, "state", 5, buf, STATE_SIZE3);
}

/* ---- transactions ------------------------------------------------------- */

int store_get(tx *t, int tb, const void *k, size_t kn, const uint8_t **v, size_t *vn)
{
    return t->st->be->ops->get(t->bt, tb, k, kn, 0, v, vn);
}
int store_put(tx *t, int tb, const void *k, size_t kn, const void *v, size_t vn)
{
    return t->st->be->ops->put(t->bt, tb, k, kn, v, vn);
}
int store_del(tx *t, int tb, const void *k, size_t kn) { return t->st->be->ops->del(t->bt, tb, k, kn); }
int store_scan(tx *t, int tb, const void *prefix, size_t pn, store_scan_fn fn, void *u)
{
    return t->st->be->ops->scan(t->bt, tb, prefix, pn, fn, u);
}

int store_tx_begin(skv_store *st, int write, tx *t)
{
    memset(t, 0, sizeof *t);
    t->st = st;
    t->write = write;
    skv_errbox_clear(st->err); /* a message left from an earlier call must not describe this one */
    if (write && st->readonly) return store_err(st, SKV_ERR_INVALID_ARG, "the store was opened read-only");
    if (!st->be) /* a sharded store's router, reached by a call whose arguments it could not route */
        return store_err(st, SKV_ERR_INVALID_ARG, "invalid arguments");
    int rc = st->be->ops->begin(st->be, write, &t->bt);
    if (rc) return rc;
    st->io_init(t); /* store_io_init (store_kv.c), set by skv_store_open */
    if ((rc = state_load(t))) store_tx_abort(t);
    return rc;
}

void store_tx_abort(tx *t)
{
    if (t->bt) t->st->be->ops->abort(t->bt);
    t->bt = NULL;
}

static void note_misses(tx *t)
{
    if (t->miss[0] || t->miss[1]) t->st->be->ops->misses(t->st->be, t->miss, NULL);
}

int store_tx_commit(tx *t)
{
    int rc = state_save(t);
    if (rc) {
        store_tx_abort(t);
        return rc;
    }
    rc = t->st->be->ops->commit(t->bt);
    t->bt = NULL;
    note_misses(t);
    return rc;
}

int store_tx_end(tx *t)
{
    int rc = t->st->be->ops->commit(t->bt);
    t->bt = NULL;
    note_misses(t);
    return rc;
}

/* 1 when a failed attempt may run again on a new connection (a Redis failover: the
 * backend marked the attempt's connection lost, or its write refused by a demoted master), at most
 * STORE_CONN_RETRIES times per call: each new connection waits for the new master. The
 * k-th retry waits 25 ms x 2^k first, so that the attempts spread over the failover's
 * reconfiguration instead of all falling into its first milliseconds. */
static int conn_retry(const skv_store *st, int rc, int *lost)
{
    int (*take)(void) = st->be->ops->retry_take;
    /* any failure of an attempt that lost its connection: the trie reports a record it
     * could not read as damage (SKV_ERR_FORMAT), which here is the lost connection */
    if (!(rc < 0 && take && take() && ++*lost < STORE_CONN_RETRIES)) return 0;
    long ms = 25L << (*lost < 6 ? *lost : 6);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 1;
}

/* Attempts of a call that saw the trie inconsistent on a backend whose reads are not a
 * snapshot (Redis: a transaction reads its records one GET at a time, and another
 * process's commit may land between two of them; its WATCH would fail the commit, but the
 * trie finds the mixed state first). Damage that stays is reported after these. */
#define STORE_INCONSISTENT_RETRIES 4

static int run_tx(skv_store *st, int write, int (*fn)(tx *t, void *u), void *u)
{
    int lost = 0, mixed = 0;
    if (st->be->ops->retry_take) (void)st->be->ops->retry_take(); /* a mark left by a call outside store_run */
    for (int attempt = 0; attempt < STORE_RETRIES; attempt++) {
        tx t;
        int rc = store_tx_begin(st, write, &t);
        if (rc) {
            if (conn_retry(st, rc, &lost)) continue; /* its state read lost the connection */
            return rc;
        }
        if ((rc = fn(&t, u))) {
            store_tx_abort(&t);
            if (conn_retry(st, rc, &lost)) continue; /* a failover: a new master */
            if ((rc == SKV_ERR_FORMAT || rc == SKV_ERR_INTERNAL) && st->be->evicts &&
                ++mixed < STORE_INCONSISTENT_RETRIES) { /* another writer's commit, seen half */
                struct timespec ts = {0, 5000000L * mixed};
                nanosleep(&ts, NULL);
                continue;
            }
            return rc;
        }
        rc = write ? store_tx_commit(&t) : store_tx_end(&t);
        if (conn_retry(st, rc, &lost)) continue;
        if (rc != STORE_CONFLICT) return rc;
    }
    return store_err(st, SKV_ERR_IO, "the store is too busy: %d attempts lost races with other writers; retry",
                     STORE_RETRIES);
}

/* A handle runs one write transaction at a time: a put's model runs use the handle's one
 * work context (LMDB serialised its writers anyway; on Redis, two threads' puts through
 * one handle ran the model in the same context at once and failed). Reads run beside. */
int store_run(skv_store *st, int write, int (*fn)(tx *t, void *u), void *u)
{
    if (!st->be) return store_err(st, SKV_ERR_INVALID_ARG, "invalid arguments"); /* a router (store_tx_begin) */
    if (!write) return run_tx(st, write, fn, u);
    pthread_mutex_t *mu = st->parent ? &st->parent->write_mu : &st->write_mu; /* a shard: the router's */
    pthread_mutex_lock(mu);
    int rc = run_tx(st, write, fn, u);
    pthread_mutex_unlock(mu);
    return rc;
}

int store_trie_err(skv_store *st, int rc, const char *what)
{
    char prev[512];
    snprintf(prev, sizeof prev, "%s", skv_errbox_get(st->err));
    if (rc == SKV_ERR_FORMAT || rc == SKV_ERR_INTERNAL)
        return store_err(st, rc, "%s: the store's trie is inconsistent (damaged?)%s%.400s", what, prev[0] ? ": " : "",
                       prev);
    if (rc == SKV_ERR_NOMEM) return store_err(st, rc, "%s: out of memory", what);
    return rc;
}

/* ---- open / close ------------------------------------------------------- */

