/* One store spread over a Redis Cluster's masters: `redis+cluster://.../PREFIX?shards=N`
 * (docs/store.md "One store over all masters").
 *
 * The store is N complete stores ("shards"), shard k under the prefix "PREFIX.N.B.k", so
 * under its own hash tag: each lands in its own hash slot, the slots spread over the
 * masters, and every transaction of a shard is still one slot's (Redis Cluster's rule).
 * A session lives in the shard its first B tokens choose (XXH3-64 of them mod N;
 * `shard_tokens=B`, default 16; a shorter session hashes all of its tokens), so every
 * session that shares its first B tokens with another is in that one's shard, and the
 * trie still stores each such prefix once. What is lost: prefixes shorter than B tokens are
 * stored once per shard that holds sessions beginning with them (at most N times), and a
 * prompt of fewer than B tokens is looked up in every shard (the longest match wins).
 *
 *   put, put_kv    the tokens' shard, after a look in the others for the name (a name is
 *                  unique in the store: one held elsewhere holds other tokens)
 *   get, remove    the shard holding the name (each is asked in turn)
 *   match, get_prefix, draft, get_near   the prompt's shard (every shard for a short one)
 *   list, stats, gc, budget, price, progress, dictionaries   every shard, summed
 *
 * The shards share the router's work context and its write lock (store_run), so a
 * process runs one write transaction at a time and holds one context for the model runs,
 * whatever N. N and B name the shards' prefixes: the same store opened with another N or
 * B is another (empty) store, never a misrouted one. */
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store/store_int.h"

#define SHARD_TOKENS_DEFAULT 16
#define SHARDS_MAX 256

struct store_shards {
    int n, block;
    skv_store **sub;
};

/* The value of option `key` in the URL's query (after '?'), or NULL; *len its length. */
static const char *opt_value(const char *q, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *o = q; o && *o;) {
        const char *amp = strchr(o, '&'), *end = amp ? amp : o + strlen(o);
        if ((size_t)(end - o) > kl && !strncmp(o, key, kl) && o[kl] == '=') {
            *len = (size_t)(end - o) - kl - 1;
            return o + kl + 1;
        }
        o = amp ? amp + 1 : NULL;
    }
    return NULL;
}

static int opt_int(const char *url, const char *q, const char *key, int lo, int hi, int dflt, int *out,
                   skv_err *err)
{
    size_t n;
    const char *v = opt_value(q, key, &n);
    *out = dflt;
    if (!v) return SKV_OK;
    long x = 0;
    size_t i = 0;
    for (; i < n && i < 6 && v[i] >= '0' && v[i] <= '9'; i++) x = x * 10 + (v[i] - '0');
    if (i == 0 || i != n || x < lo || x > hi)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': %s must be %d..%d", url, key, lo, hi);
    *out = (int)x;
    return SKV_OK;
}

static int store_shard_url(const char *url, int k, char *out, size_t cap, int *n_shards, skv_err *err)
{
    *n_shards = 0;
    if (strncmp(url, "redis+cluster://", 16)) return SKV_OK;
    const char *q = strchr(url, '?');
    int n, b, rc;
    if ((rc = opt_int(url, q ? q + 1 : NULL, "shards", 2, SHARDS_MAX, 0, &n, err)) ||
        (rc = opt_int(url, q ? q + 1 : NULL, "shard_tokens", 1, 4096, SHARD_TOKENS_DEFAULT, &b, err)))
        return rc;
    if (!q || (!opt_value(q + 1, "shards", &(size_t){0}) && !opt_value(q + 1, "shard_tokens", &(size_t){0})))
        return SKV_OK;
    if (n < 2) return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s': shard_tokens needs shards=N (2..%d)", url,
                               SHARDS_MAX);
    /* PREFIX.N.B.k, then the other options */
    size_t at = (size_t)snprintf(out, cap, "%.*s.%d.%d.%d", (int)(q - url), url, n, b, k);
    const char *sep = "?";
    for (const char *o = q + 1; at < cap && *o;) {
        const char *amp = strchr(o, '&'), *end = amp ? amp : o + strlen(o);
        if (strncmp(o, "shards=", 7) && strncmp(o, "shard_tokens=", 13)) {
            at += (size_t)snprintf(out + at, cap - at, "%s%.*s", sep, (int)(end - o), o);
            sep = "&";
        }
        o = amp ? amp + 1 : end;
    }
    if (at >= cap) return skv_fail(err, SKV_ERR_INVALID_ARG, "Redis URL '%s' is too long", url);
    *n_shards = n;
    return SKV_OK;
}

static int store_shard_open(skv_store *st, const char *url, int n, int flags, const skv_store_params *p, skv_err *err)
{
    struct store_shards *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->sub = calloc((size_t)n, sizeof *sh->sub))) {
        free(sh);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    st->sh = sh;
    sh->n = n;
    skv_store_params sp = *p;
    if (p->budget >= 0) sp.budget = p->budget / n; /* each shard its share */
    char sub[1024];
    for (int k = 0; k < n; k++) {
        int m, rc = store_shard_url(url, k, sub, sizeof sub, &m, err);
        if (!rc) {
            skv_err e = {0};
            const char *q = strchr(url, '?');
            (void)opt_int(url, q ? q + 1 : NULL, "shard_tokens", 1, 4096, SHARD_TOKENS_DEFAULT, &sh->block, err);
            if ((rc = store_open_one(sub, st->model, flags, &sp, 0, &sh->sub[k], &e)))
                skv_fail(err, rc, "shard %d of %d: %s", k, n, e.msg);
        }
        if (rc) return rc;
        skv_ctx_free(sh->sub[k]->work); /* made to measure a new shard's speed: the router's from now on */
        sh->sub[k]->work = NULL;
        sh->sub[k]->parent = st;
    }
    return SKV_OK;
}

static void store_shard_close(skv_store *st)
{
    struct store_shards *sh = st->sh;
    if (!sh) return;
    for (int k = 0; k < sh->n; k++) store_close_one(sh->sub[k]);
    free(sh->sub);
    free(sh);
    st->sh = NULL;
}

/* ---- routing ---- */

static int shard_of(const struct store_shards *sh, const int32_t *tokens, size_t n)
{
    size_t b = n < (size_t)sh->block ? n : (size_t)sh->block;
    return (int)(XXH3_64bits(tokens, b * sizeof *tokens) % (uint64_t)sh->n);
}

/* A shard's failure as the router's (the message is the calling thread's). */
static int relay(skv_store *st, const skv_store *sub, int rc)
{
    return rc ? store_err(st, rc, "%s", skv_store_last_error(sub)) : store_done(st, SKV_OK);
}

typedef struct {
    const char *name;
    int found;
} has_args;

static int has_tx(tx *t, void *u)
{
    has_args *a = u;
    ses_rec r;
    int rc = store_ses_get(t, a->name, &r);
    a->found = rc == 0;
    return rc == 1 ? SKV_OK : rc;
}

/* The shard holding session name: its index, -1 when none does, or -2 - status. */
static int holder(skv_store *st, const char *name, int skip)
{
    for (int k = 0; k < st->sh->n; k++) {
        if (k == skip) continue;
        has_args a = {name, 0};
        int rc = store_run(st->sh->sub[k], 0, has_tx, &a);
        if (rc) return store_err(st, rc, "shard %d: %s", k, skv_store_last_error(st->sh->sub[k])), -2 - rc;
        if (a.found) return k;
    }
    return -1;
}

static int store_shard_put(skv_store *st, const char *name, const int32_t *tokens, size_t n, const float *kv,
                    const float *sur, size_t from, skv_store_put_report *rep)
{
    if (!name || !tokens || n < 1) return store_err(st, SKV_ERR_INVALID_ARG, "skv_store_put: invalid arguments");
    int k = shard_of(st->sh, tokens, n), other = holder(st, name, k);
    if (other < -1) return -2 - other;
    if (other >= 0)
        return store_err(st, SKV_ERR_INVALID_ARG, "a session named '%s' exists already (with other tokens)", name);
    skv_store *s = st->sh->sub[k];
    return relay(st, s, kv ? store_put_kv_one(s, name, tokens, n, kv, sur, from, rep)
                           : store_put_one(s, name, tokens, n, rep));
}

static int store_shard_get(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap,
                    size_t *n_tokens, skv_store_get_report *rep)
{
    int k = name ? holder(st, name, -1) : -1;
    if (k < -1) return -2 - k;
    if (k < 0) return store_err(st, SKV_ERR_INVALID_ARG, "no session named '%s'", name ? name : "(null)");
    skv_store *s = st->sh->sub[k];
    return relay(st, s, store_get_one(s, name, ctx, flags, tokens, cap, n_tokens, rep));
}

static int store_shard_remove(skv_store *st, const char *name)
{
    int k = name ? holder(st, name, -1) : -1;
    if (k < -1) return -2 - k;
    if (k < 0) return store_err(st, SKV_ERR_INVALID_ARG, "no session named '%s'", name ? name : "(null)");
    return relay(st, st->sh->sub[k], store_remove_one(st->sh->sub[k], name));
}

/* The shard to ask about a prompt: its own, or for a prompt shorter than B tokens the
 * shard with the longest match (-1: none matches; -2 - status on an error). */
static int prompt_shard(skv_store *st, const int32_t *tokens, size_t n)
{
    if (n >= (size_t)st->sh->block) return shard_of(st->sh, tokens, n);
    int best = -1;
    uint32_t most = 0;
    for (int k = 0; k < st->sh->n; k++) {
        skv_store_match_result m;
        int rc = store_match_one(st->sh->sub[k], tokens, n, &m);
        if (rc) return relay(st, st->sh->sub[k], rc), -2 - rc;
        if (m.n_matched > most) best = k, most = m.n_matched;
    }
    return best;
}

static int store_shard_match(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r)
{
    int k = prompt_shard(st, tokens, n);
    if (k < -1) return -2 - k;
    if (k < 0) {
        memset(r, 0, sizeof *r);
        return store_done(st, SKV_OK);
    }
    return relay(st, st->sh->sub[k], store_match_one(st->sh->sub[k], tokens, n, r));
}

static int store_shard_get_prefix(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, skv_store_prefix_report *rep)
{
    int k = prompt_shard(st, tokens, n);
    if (k < -1) return -2 - k;
    skv_store *s = st->sh->sub[k < 0 ? 0 : k]; /* none matches: any shard restores nothing */
    return relay(st, s, store_get_prefix_one(s, tokens, n, ctx, rep));
}

static size_t store_shard_draft(skv_store *st, const int32_t *hist, size_t n, int32_t *out, size_t max)
{
    int k = prompt_shard(st, hist, n);
    return k < 0 ? 0 : store_draft_one(st->sh->sub[k], hist, n, out, max);
}

static int store_shard_get_near(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx,
                         const skv_store_near_params *p, float *weights, skv_store_near_report *rep)
{
    int k = prompt_shard(st, tokens, n);
    if (k < -1) return -2 - k;
    skv_store *s = st->sh->sub[k < 0 ? shard_of(st->sh, tokens, n) : k];
    return relay(st, s, store_get_near_one(s, tokens, n, ctx, p, weights, rep));
}

/* ---- every shard ---- */

static int store_shard_list(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user)
{
    for (int k = 0; k < st->sh->n; k++) {
        int rc = store_list_one(st->sh->sub[k], cb, user);
        if (rc) return relay(st, st->sh->sub[k], rc);
    }
    return store_done(st, SKV_OK);
}

static int store_shard_stats(skv_store *st, skv_store_stats *s)
{
    skv_store_stats one;
    for (int k = 0; k < st->sh->n; k++) {
        int rc = store_get_stats_one(st->sh->sub[k], k ? &one : s);
        if (rc) return relay(st, st->sh->sub[k], rc);
        if (!k) continue; /* model, speeds, price, dictionary: shard 0's */
        s->n_sessions += one.n_sessions, s->session_tokens += one.session_tokens;
        s->n_nodes += one.n_nodes, s->unique_positions += one.unique_positions;
        s->disk_bytes += one.disk_bytes, s->mat_nodes += one.mat_nodes, s->mat_positions += one.mat_positions;
        s->mat_bytes += one.mat_bytes, s->token_floor_bits += one.token_floor_bits;
        s->f16_bytes += one.f16_bytes, s->tq35_bytes += one.tq35_bytes, s->budget += one.budget;
        s->clock += one.clock, s->kv_misses += one.kv_misses, s->node_misses += one.node_misses;
        for (int i = 0; i < 4; i++)
            s->tier_nodes[i] += one.tier_nodes[i], s->tier_positions[i] += one.tier_positions[i],
                s->tier_bytes[i] += one.tier_bytes[i];
    }
    s->dedup_ratio = s->unique_positions ? (double)s->session_tokens / (double)s->unique_positions : 0.0;
    s->bits_per_position = s->session_tokens ? (double)s->disk_bytes * 8.0 / (double)s->session_tokens : 0.0;
    return store_done(st, SKV_OK);
}

static int store_shard_near_stats(skv_store *st, skv_store_near_stats *s)
{
    skv_store_near_stats one;
    memset(s, 0, sizeof *s);
    for (int k = 0; k < st->sh->n; k++) {
        int rc = store_get_near_stats_one(st->sh->sub[k], &one);
        if (rc) return relay(st, st->sh->sub[k], rc);
        s->n_gets += one.n_gets, s->n_approximate += one.n_approximate, s->positions_exact += one.positions_exact;
        s->positions_approx += one.positions_approx, s->positions_recomputed += one.positions_recomputed;
    }
    return store_done(st, SKV_OK);
}

static int store_shard_gc(skv_store *st, skv_store_gc_report *r)
{
    skv_store_gc_report one;
    memset(r, 0, sizeof *r);
    for (int k = 0; k < st->sh->n; k++) {
        int rc = store_gc_one(st->sh->sub[k], &one);
        if (rc) return relay(st, st->sh->sub[k], rc);
        r->n_demoted += one.n_demoted, r->bytes_freed += one.bytes_freed, r->mat_bytes += one.mat_bytes;
        r->n_materialised += one.n_materialised, r->n_retiered += one.n_retiered;
    }
    return store_done(st, SKV_OK);
}

static int store_shard_set_budget(skv_store *st, uint64_t bytes)
{
    for (int k = 0; k < st->sh->n; k++) {
        int rc = store_set_budget_one(st->sh->sub[k], bytes / (uint64_t)st->sh->n);
        if (rc) return relay(st, st->sh->sub[k], rc);
    }
    return store_done(st, SKV_OK);
}

static int store_shard_set_price(skv_store *st, double seconds_per_byte)
{
    for (int k = 0; k < st->sh->n; k++) {
        int rc = store_set_price_one(st->sh->sub[k], seconds_per_byte);
        if (rc) return relay(st, st->sh->sub[k], rc);
    }
    return store_done(st, SKV_OK);
}

static int store_shard_set_progress(skv_store *st, void (*fn)(void *user, uint64_t done, uint64_t total), void *user)
{
    for (int k = 0; k < st->sh->n; k++) (void)store_set_progress_one(st->sh->sub[k], fn, user);
    return SKV_OK;
}

static int store_shard_train_dict(skv_store *st, size_t max_ids, uint64_t *id, size_t *n_ids)
{
    for (int k = 0; k < st->sh->n; k++) { /* each shard its own dictionary; the last one's is reported */
        int rc = store_train_dict_one(st->sh->sub[k], max_ids, id, n_ids);
        if (rc) return relay(st, st->sh->sub[k], rc);
    }
    return store_done(st, SKV_OK);
}

/* ---- the public calls: a sharded store's routed, every other handle's as they are ---- */

static int open_e(const char *dir, skv_model *m, int flags, const skv_store_params *p, skv_store **out, skv_err *e)
{
    char sub[1024];
    skv_store_params dp = skv_store_default_params();
    int n = 0, rc = dir ? store_shard_url(dir, 0, sub, sizeof sub, &n, e) : SKV_OK;
    if (rc || !n) return rc ? rc : store_open_one(dir, m, flags, p, 0, out, e);
    if ((rc = store_open_one(dir, m, flags, p, 1, out, e))) return rc;
    if ((rc = store_shard_open(*out, dir, n, flags, p ? p : &dp, e))) {
        skv_store_close(*out);
        *out = NULL;
    }
    return rc;
}

int skv_store_open(const char *dir, skv_model *m, int flags, const skv_store_params *p, skv_store **out, char *err,
                   size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, open_e(dir, m, flags, p, out, &e), err, errcap);
}

void skv_store_close(skv_store *st)
{
    if (!st) return;
    store_shard_close(st);
    store_close_one(st);
}

static int model_info_e(const char *dir, skv_store_model *out, skv_err *e)
{
    char shard0[1024];
    int n = 0, rc = dir ? store_shard_url(dir, 0, shard0, sizeof shard0, &n, e) : SKV_OK;
    return rc ? rc : store_model_info_one(n ? shard0 : dir, out, e); /* shard 0 says for all */
}

int skv_store_model_info(const char *dir, skv_store_model *out, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, model_info_e(dir, out, &e), err, errcap);
}

int skv_store_put(skv_store *st, const char *name, const int32_t *tokens, size_t n, skv_store_put_report *rep)
{
    if (st && st->sh) return store_shard_put(st, name, tokens, n, NULL, NULL, 0, rep);
    return store_put_one(st, name, tokens, n, rep);
}

int skv_store_put_kv(skv_store *st, const char *name, const int32_t *tokens, size_t n, const float *kv,
                     const float *sur, size_t from, skv_store_put_report *rep)
{
    if (st && st->sh && kv && sur) return store_shard_put(st, name, tokens, n, kv, sur, from, rep);
    return store_put_kv_one(st, name, tokens, n, kv, sur, from, rep);
}

int skv_store_get(skv_store *st, const char *name, skv_ctx *ctx, int flags, int32_t *tokens, size_t cap,
                  size_t *n_tokens, skv_store_get_report *rep)
{
    if (st && st->sh) return store_shard_get(st, name, ctx, flags, tokens, cap, n_tokens, rep);
    return store_get_one(st, name, ctx, flags, tokens, cap, n_tokens, rep);
}

int skv_store_remove(skv_store *st, const char *name)
{
    return st && st->sh ? store_shard_remove(st, name) : store_remove_one(st, name);
}

int skv_store_match(skv_store *st, const int32_t *tokens, size_t n, skv_store_match_result *r)
{
    if (st && st->sh && r && (tokens || !n)) return store_shard_match(st, tokens, n, r);
    return store_match_one(st, tokens, n, r);
}

int skv_store_get_prefix(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, skv_store_prefix_report *rep)
{
    if (st && st->sh && (tokens || !n)) return store_shard_get_prefix(st, tokens, n, ctx, rep);
    return store_get_prefix_one(st, tokens, n, ctx, rep);
}

size_t skv_store_draft(void *store, const int32_t *hist, size_t n, int32_t *out, size_t max)
{
    skv_store *st = store;
    if (st && st->sh && out && max && (hist || !n)) return store_shard_draft(st, hist, n, out, max);
    return store_draft_one(store, hist, n, out, max);
}

int skv_store_get_near(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, const skv_store_near_params *p,
                       float *logits, skv_store_near_report *rep)
{
    if (st && st->sh && tokens && n && ctx) return store_shard_get_near(st, tokens, n, ctx, p, logits, rep);
    return store_get_near_one(st, tokens, n, ctx, p, logits, rep);
}

int skv_store_list(skv_store *st, int (*cb)(void *user, const skv_store_session_info *s), void *user)
{
    return st && st->sh && cb ? store_shard_list(st, cb, user) : store_list_one(st, cb, user);
}

int skv_store_get_stats(skv_store *st, skv_store_stats *s)
{
    return st && st->sh && s ? store_shard_stats(st, s) : store_get_stats_one(st, s);
}

int skv_store_get_near_stats(skv_store *st, skv_store_near_stats *s)
{
    return st && st->sh && s ? store_shard_near_stats(st, s) : store_get_near_stats_one(st, s);
}

int skv_store_gc(skv_store *st, skv_store_gc_report *r)
{
    return st && st->sh && r ? store_shard_gc(st, r) : store_gc_one(st, r);
}

int skv_store_set_budget(skv_store *st, uint64_t bytes)
{
    return st && st->sh ? store_shard_set_budget(st, bytes) : store_set_budget_one(st, bytes);
}

int skv_store_set_price(skv_store *st, double seconds_per_byte)
{
    if (st && st->sh && seconds_per_byte > 0 && seconds_per_byte < 1e300)
        return store_shard_set_price(st, seconds_per_byte);
    return store_set_price_one(st, seconds_per_byte);
}

int skv_store_set_progress(skv_store *st, void (*fn)(void *user, uint64_t done, uint64_t total), void *user)
{
    if (st && st->sh) (void)store_shard_set_progress(st, fn, user);
    return store_set_progress_one(st, fn, user);
}

int skv_store_train_dict(skv_store *st, size_t max_ids, uint64_t *id, size_t *n_ids)
{
    if (st && st->sh && max_ids <= STORE_DICT_MAX) return store_shard_train_dict(st, max_ids, id, n_ids);
    return store_train_dict_one(st, max_ids, id, n_ids);
}
