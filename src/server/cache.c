/* The prompt cache. A request's prompt reuses, in this order:
 *   1. the slot's own KV (the tokens it ran last): the common prefix stays in place;
 *   2. the session store: the KV of the trie's longest stored prefix of the prompt,
 *      whichever conversation put it (skv_store_get_prefix: materialised KV loaded, the
 *      rest recomputed from the prompt's own tokens, bit-identical). The lookup is the
 *      store itself, so every server sharing a store (a fleet on one Redis) hits what any
 *      of them put, and a restart finds everything committed.
 * Only the rest of the prompt is prefilled. Finished conversations are put back under
 * the name "srv-<xxh64 of the tokens>-<n>".
 *
 * Puts run on a writer thread, off the request path: a slot hands its finished
 * conversation to a bounded queue (SRV_PUT_QUEUE; a full queue makes the slot wait, so every
 * finished conversation is still put) and takes its next request at once, while the
 * writer encodes, commits and syncs (a put was ~0.1 s of fsync on the slot before). A
 * prompt that a queued or running put would cover better than the slot's own KV waits for
 * that put, so a lookup still sees every finished conversation; shutdown drains the queue. */
#include "core/fpguard.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "server/srv.h"

typedef struct conv {
    int32_t *tok;
    size_t n;
    float *kv, *sur; /* the slot's KV and surprisals (skv_store_put_kv), or NULL */
    size_t sur_from;
    uint8_t *pend;   /* [n] or NULL: sur[p] still to compute from the next row of hid */
    float *hid;      /* [pending positions][n_embd], in position order */
    struct timespec due; /* queued + SRV_WRITER_GRACE_MS (CLOCK_REALTIME, as the waits) */
} conv;

struct srv_cache {
    pthread_mutex_t mu;
    /* the put queue, under mu: items [q_head, q_head + q_n) mod SRV_PUT_QUEUE, then the one
     * the writer runs (busy); seq numbers grow by one per put, done = the last finished */
    srv *s;
    pthread_t writer;
    int started, stop;
    pthread_cond_t cv;     /* queue grew, shrank or a put finished */
    conv q[SRV_PUT_QUEUE];
    size_t q_head, q_n;
    conv busy;
    uint64_t seq_next, seq_done;
    size_t kv_queued, kv_cap; /* positions of KV held by queued puts, and their bound */
    int recompute;            /* SEQKV_SERVE_PUT_RECOMPUTE=1: every put runs the model (comparisons) */
    skv_ctx *wctx;            /* the writer's context (one thread, no KV kept): prompt surprisals */
    int pf_busy;              /* prompt prefills waiting or running (srv_cache_prefill): the writer yields */
    int put_waiters;          /* lookups waiting for a queued put (put_wait): no grace then */
};

static void conv_free(conv *v)
{
    free(v->tok);
    free(v->kv);
    free(v->sur);
    free(v->pend);
    free(v->hid);
    *v = (conv){0};
}

static uint64_t tokens_hash(const int32_t *t, size_t n)
{
    XXH64_state_t *st = XXH64_createState();
    uint8_t le[4 * 64];
    if (!st) return 0;
    XXH64_reset(st, 0);
    for (size_t i = 0; i < n; i += 64) {
        size_t k = n - i < 64 ? n - i : 64;
        for (size_t j = 0; j < k; j++)
            for (int b = 0; b < 4; b++) le[4 * j + (size_t)b] = (uint8_t)((uint32_t)t[i + j] >> (8 * b));
        XXH64_update(st, le, 4 * k);
    }
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

static void conv_name(const int32_t *t, size_t n, char *out, size_t cap)
{
    snprintf(out, cap, "srv-%016llx-%zu", (unsigned long long)tokens_hash(t, n), n);
}

static size_t common(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static void *writer_main(void *arg);

srv_cache *srv_cache_create(srv *s)
{
    srv_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->s = s;
    c->kv_cap = (size_t)SRV_PUT_KV_SLOTS * (size_t)s->n_ctx;
    const char *rc = getenv("SEQKV_SERVE_PUT_RECOMPUTE"), *ss = getenv("SEQKV_SERVE_SLOT_SURPRISAL");
    c->recompute = rc && !strcmp(rc, "1");
    if (!s->store) return c;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 64, cp.n_threads = 1, cp.max_batch = 64; /* rows of hidden states at a time (a batch is at most n_ctx) */
    size_t hid_bytes = (size_t)s->n_ctx * (size_t)s->info.n_embd * sizeof(float);
    if (!(ss && !strcmp(ss, "1")) && hid_bytes <= SRV_HIDDEN_MAX_BYTES && skv_ctx_create(s->model, &cp, &c->wctx))
        c->wctx = NULL;
    if (pthread_create(&c->writer, NULL, writer_main, c) == 0) c->started = 1;
    return c;
}

int srv_cache_takes_hidden(const srv_cache *c)
{
    return c && c->started && c->wctx;
}

void srv_cache_free(srv_cache *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->started) pthread_join(c->writer, NULL); /* after it drained the queue */
    for (size_t i = 0; i < c->q_n; i++) conv_free(&c->q[(c->q_head + i) % SRV_PUT_QUEUE]);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    skv_ctx_free(c->wctx);
    free(c);
}

/* Waits until no queued or running put covers SRV_STORE_MIN_GAIN positions of p[0..n) more
 * than `have` (what the slot's own KV covers): the store lookup that follows then sees it. */
static void put_wait(srv_cache *c, const int32_t *p, size_t n, size_t have)
{
    pthread_mutex_lock(&c->mu);
    uint64_t want = 0;
    if (c->busy.tok && common(c->busy.tok, c->busy.n, p, n) >= have + SRV_STORE_MIN_GAIN) want = c->seq_done + 1;
    for (size_t i = 0; i < c->q_n; i++) {
        const conv *v = &c->q[(c->q_head + i) % SRV_PUT_QUEUE];
        if (common(v->tok, v->n, p, n) >= have + SRV_STORE_MIN_GAIN) want = c->seq_next - c->q_n + i + 1;
    }
    if (c->seq_done < want) {
        c->put_waiters++;
        pthread_cond_broadcast(&c->cv); /* the writer skips its grace */
        while (c->seq_done < want) pthread_cond_wait(&c->cv, &c->mu);
        c->put_waiters--;
    }
    pthread_mutex_unlock(&c->mu);
}

/* The store's longest stored prefix of prompt[0..limit) into ctx, if it covers more than
 * floor positions: 1 (*kept: positions ctx holds), 0 (it does not: ctx untouched), -1 (the
 * restore failed: ctx cleared). */
static int store_restore(srv *s, skv_ctx *ctx, const int32_t *prompt, size_t limit, size_t floor, size_t *kept)
{
    skv_store_prefix_report r;
    if (skv_store_get_prefix(s->store, prompt, limit, ctx, &r)) {
        srv_log("store: %s", skv_store_last_error(s->store));
        skv_ctx_truncate(ctx, 0);
        return -1;
    }
    *kept = r.n_matched;
    if (r.n_matched <= floor) return 0; /* cannot happen after a match said more; ctx is the store's anyway */
    atomic_fetch_add(&s->m.n_store_hits, 1);
    return 1;
}

/* --reuse near: rebuilds ctx as skv_store_get_near's approximate KV of prompt[0..limit).
 * Returns the positions ctx holds (0 after a failure: ctx cleared, all is prefilled). */
static size_t near_restore(srv *s, skv_ctx *ctx, const int32_t *prompt, size_t limit, srv_reuse *u)
{
    skv_store_near_params np = skv_store_near_default_params();
    skv_store_near_report rep;
    np.recompute = s->p.near_recompute, np.kl_target = s->p.near_quality > 0 ? s->p.near_quality : 0;
    if (skv_store_get_near(s->store, prompt, limit, ctx, &np, NULL, &rep)) {
        srv_log("near reuse: %s", skv_store_last_error(s->store));
        skv_ctx_truncate(ctx, 0);
        u->n_reused = 0, u->approx_from = SIZE_MAX;
        return 0;
    }
    u->n_reused = rep.n_exact + rep.n_approx;
    u->approximate = rep.approximate;
    u->n_approx = rep.n_approx, u->n_recomputed = rep.n_recomputed;
    u->approx_from = rep.approximate ? rep.n_exact : SIZE_MAX;
    if (rep.approximate) atomic_fetch_add(&s->m.n_near_approx, 1);
    atomic_fetch_add(&s->m.n_near_positions, rep.n_approx);
    return limit;
}

/* The exact caches: the slot's own KV, else the store's longest stored prefix. With
 * --reuse near, when neither covers all but SRV_NEAR_MIN positions, *near is set and ctx
 * is left alone (the near restore replaces it). */
static size_t exact_prepare(srv *s, srv_cache *c, skv_ctx *ctx, const int32_t *have, size_t n_have,
                            const int32_t *prompt, size_t limit, srv_reuse *u, int *near)
{
    size_t keep = common(have, n_have, prompt, limit), got = 0;
    skv_store_match_result m = {0};
    if (s->store) put_wait(c, prompt, limit, keep);
    if (s->store && !skv_store_match(s->store, prompt, limit, &m)) u->bits = m.bits;
    int use = m.n_matched >= keep + SRV_STORE_MIN_GAIN; /* worth a restore */
    size_t best = use ? m.n_matched : keep;
    *near = s->p.reuse_near && s->store && limit - best >= SRV_NEAR_MIN;
    if (*near) return 0;
    skv_ctx_truncate(ctx, (int)keep);
    int r = use ? store_restore(s, ctx, prompt, limit, keep, &got) : 0;
    if (r == 0 && use) { /* restored less than the match said (a put removed meanwhile) */
        u->approx_from = SIZE_MAX;
        return got;
    }
    if (r != 0) {
        u->approx_from = SIZE_MAX; /* the store's KV replaced the slot's */
        return r > 0 ? got : 0;
    }
    if (keep) atomic_fetch_add(&s->m.n_slot_hits, 1);
    return keep;
}

size_t srv_cache_prepare(srv *s, srv_cache *c, skv_ctx *ctx, const int32_t *have, size_t n_have,
                         const int32_t *prompt, size_t n, srv_reuse *u)
{
    size_t limit = n - 1, from = u->approx_from;
    int near = 0;
    *u = (srv_reuse){.approx_from = from};
    size_t got = exact_prepare(s, c, ctx, have, n_have, prompt, limit, u, &near);
    if (near) return near_restore(s, ctx, prompt, limit, u);
    u->n_reused = got;
    if (u->approx_from >= got) u->approx_from = SIZE_MAX; /* what was approximate is cut off */
    u->approximate = u->approx_from != SIZE_MAX;
    return got;
}

/* The surprisals the slot left to the writer: each run of pending positions [p, q) from
 * its hidden rows (the rows of positions p - 1 .. q - 2). 0, or -1 when they cannot be had. */
static int resolve_pending(srv_cache *c, const int32_t *tok, conv *v)
{
    if (!v->pend) return 0;
    if (!c->wctx) return -1;
    size_t D = (size_t)c->s->info.n_embd, row = 0;
    for (size_t p = 0; p < v->n;) {
        if (!v->pend[p]) {
            p++;
            continue;
        }
        size_t q = p;
        while (q < v->n && v->pend[q]) q++;
        if (skv_ctx_hidden_surprisal(c->wctx, v->hid + row * D, q - p, tok + p, v->sur + p)) return -1;
        row += q - p, p = q;
    }
    return 0;
}

/* The writer's put of one conversation: with the slot's work when it came along. */
static void put_now(srv_cache *c, const int32_t *tok, size_t n, conv *work)
{
    srv *s = c->s;
    char name[64];
    conv_name(tok, n, name, sizeof name);
    skv_store_put_report r = {0};
    int given = work && work->kv && resolve_pending(c, tok, work) == 0;
    int rc = given ? skv_store_put_kv(s->store, name, tok, n, work->kv, work->sur, work->sur_from, &r)
                   : skv_store_put(s->store, name, tok, n, &r);
    if (rc && rc != SKV_ERR_INVALID_ARG) {
        srv_log("store put %s: %s", name, skv_store_last_error(s->store));
        return;
    }
    atomic_fetch_add(&s->m.n_store_puts, rc == 0 && !r.existed);
    atomic_fetch_add(&s->m.n_store_puts_given, rc == 0 && !r.existed && r.n_given);
    atomic_fetch_add(&s->m.n_store_puts_hidden, rc == 0 && !r.existed && r.n_given && work->pend);
}

void srv_cache_prefill(srv_cache *c, int d)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->pf_busy += d;
    if (!c->pf_busy) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* With mu held: waits while a prompt prefill waits or runs, at most SRV_WRITER_YIELD_MS
 * (a put is CPU work that slowed the prefill beside it: the first token comes first),
 * unless a lookup waits for a put (put_wait): then the prompt waiting on the put would
 * wait for the other prompts too (four arriving together: 69 ms to the first token for
 * the one continuing a queued conversation, against 10-40 ms for the others). */
static void yield_to_prefills(srv_cache *c)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += SRV_WRITER_YIELD_MS * 1000000L;
    dl.tv_sec += dl.tv_nsec / 1000000000L, dl.tv_nsec %= 1000000000L;
    while (c->pf_busy && !c->stop && !c->put_waiters) /* a lookup waiting for the put goes first */
        if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT) break;
}

/* With mu held and a put queued: waits until the oldest was queued SRV_WRITER_GRACE_MS ago,
 * unless a lookup waits for a put or the queue is half full. A client's next request comes
 * right after its reply, when the reply's put would start: the grace lets that request's
 * prefill announce itself first, and the put then yields to it (yield_to_prefills) instead
 * of sharing the cores with it. */
static void grace(srv_cache *c)
{
    while (c->q_n && !c->stop && !c->put_waiters && c->q_n < SRV_PUT_QUEUE / 2)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &c->q[c->q_head].due) == ETIMEDOUT) break;
}

static void *writer_main(void *arg)
{
    srv_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_n && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
        grace(c);
        yield_to_prefills(c);
        if (!c->q_n) break; /* stopping, and drained */
        c->busy = c->q[c->q_head];
        c->q_head = (c->q_head + 1) % SRV_PUT_QUEUE;
        c->q_n--;
        pthread_cond_broadcast(&c->cv); /* room in the queue */
        pthread_mutex_unlock(&c->mu);
        put_now(c, c->busy.tok, c->busy.n, &c->busy);
        pthread_mutex_lock(&c->mu);
        if (c->busy.kv) c->kv_queued -= c->busy.n;
        conv_free(&c->busy);
        c->seq_done++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The hidden rows of w's pending positions in [from, n) (from >= 1), in order, into v:
 * 0, or -1 out of memory. None pending: v->pend stays NULL. */
static int take_pending(srv *s, size_t n, const srv_put_work *w, size_t from, conv *v)
{
    size_t np = 0, D = (size_t)s->info.n_embd;
    for (size_t p = from; w->pend && p < n; p++) np += w->pend[p] != 0;
    if (!np) return 0;
    if (!(v->pend = calloc(n, 1)) || !(v->hid = malloc(np * D * sizeof *v->hid))) return -1;
    for (size_t p = from, row = 0; p < n; p++)
        if (w->pend[p]) {
            v->pend[p] = 1;
            memcpy(v->hid + row++ * D, w->hid + (p - 1) * D, D * sizeof *v->hid);
        }
    return 0;
}

/* The slot's work for the writer, when it may come along: its surprisals known (or its
 * hidden rows for those pending), its cache exact f32, and room within the queued-KV bound
 * (reserved here, given back by the writer or on failure). v->kv stays NULL otherwise: the
 * put runs the model. */
static void take_work(srv *s, srv_cache *c, skv_ctx *ctx, size_t n, const srv_put_work *w, conv *v)
{
    if (c->recompute || !ctx || !w || !w->sur || w->sur_from > n || skv_ctx_kv_cache_type(ctx) != SKV_KV_CACHE_F32)
        return;
    pthread_mutex_lock(&c->mu);
    int room = c->kv_queued + n <= c->kv_cap;
    if (room) c->kv_queued += n;
    pthread_mutex_unlock(&c->mu);
    if (!room) return;
    size_t per = (size_t)s->info.n_layer * 2 * (size_t)s->info.n_head_kv * (size_t)s->info.head_dim;
    v->kv = malloc(n * per * sizeof *v->kv);
    v->sur = malloc(n * sizeof *v->sur);
    if (v->kv && v->sur && !skv_ctx_kv_read(ctx, 0, (int)n, v->kv) &&
        !take_pending(s, n, w, w->sur_from ? w->sur_from : 1, v)) {
        memcpy(v->sur, w->sur, n * sizeof *w->sur);
        v->sur_from = w->sur_from;
        return;
    }
    free(v->kv), free(v->sur), free(v->pend), free(v->hid);
    v->kv = v->sur = v->hid = NULL;
    v->pend = NULL;
    pthread_mutex_lock(&c->mu);
    c->kv_queued -= n;
    pthread_mutex_unlock(&c->mu);
}

void srv_cache_put(srv *s, srv_cache *c, skv_ctx *ctx, const int32_t *tokens, size_t n, const srv_put_work *w)
{
    if (!s->store || !n) return;
    conv v = {.tok = malloc(n * sizeof *tokens), .n = n};
    if (v.tok) memcpy(v.tok, tokens, n * sizeof *tokens);
    if (v.tok) take_work(s, c, ctx, n, w, &v);
    if (!v.tok || !c->started) { /* no writer thread (or no memory for the copy): put here */
        put_now(c, tokens, n, &v);
        pthread_mutex_lock(&c->mu);
        if (v.kv) c->kv_queued -= n;
        pthread_mutex_unlock(&c->mu);
        if (v.tok) conv_free(&v);
        return;
    }
    clock_gettime(CLOCK_REALTIME, &v.due);
    v.due.tv_nsec += SRV_WRITER_GRACE_MS * 1000000L;
    v.due.tv_sec += v.due.tv_nsec / 1000000000L, v.due.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&c->mu);
    while (c->q_n == SRV_PUT_QUEUE) pthread_cond_wait(&c->cv, &c->mu); /* backpressure */
    c->q[(c->q_head + c->q_n) % SRV_PUT_QUEUE] = v;
    c->q_n++;
    c->seq_next++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}
