/* The prompt cache. A request's prompt reuses, in this order:
 *   1. the slot's own KV (the tokens it ran last): the common prefix stays in place;
 *   2. the session store: the trie's longest stored prefix (skv_store_match gives its
 *      length and d_T); the stored conversation that holds it is restored by the store
 *      (materialised KV loaded, the rest recomputed, bit-identical) and cut to the prefix.
 * Only the rest of the prompt is prefilled. Finished conversations are put back under
 * the name "srv-<xxh64 of the tokens>-<n>".
 *
 * Which stored conversation holds a prefix: the store finds prefixes, not names, so the
 * server keeps the token lists of its last SRV_RECENT conversations (a ring) and persists
 * them in DIR/server-index.skvi (docs/server.md "Index file"): an append-only log of
 * checksummed records, so a kill -9 loses at most the record being written, and a restart
 * finds every committed conversation again. The index is a hint: a name the store lacks
 * is simply a miss.
 *
 * Puts run on a writer thread, off the request path: a slot hands its finished
 * conversation to a bounded queue (SRV_PUT_QUEUE; a full queue makes the slot wait, so every
 * finished conversation is still put) and takes its next request at once, while the
 * writer encodes, commits and syncs (a put was ~0.1 s of fsync on the slot before). A
 * prompt that a queued or running put would cover better than the slot's own KV waits for
 * that put, so a lookup still sees every finished conversation; shutdown drains the queue. */
#include <fcntl.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "server/srv.h"

#define INDEX_FILE "server-index.skvi"
#define INDEX_MAGIC "SKVSRVIX"
#define INDEX_VERSION 1u

typedef struct conv {
    int32_t *tok;
    size_t n;
} conv;

struct srv_cache {
    pthread_mutex_t mu;
    conv ring[SRV_RECENT];
    size_t next;
    int fd; /* the index file, or -1 */
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
};

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
    c->fd = -1;
    c->s = s;
    if (s->store && pthread_create(&c->writer, NULL, writer_main, c) == 0) c->started = 1;
    return c;
}

void srv_cache_free(srv_cache *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->started) pthread_join(c->writer, NULL); /* after it drained the queue */
    for (size_t i = 0; i < SRV_RECENT; i++) free(c->ring[i].tok);
    for (size_t i = 0; i < c->q_n; i++) free(c->q[(c->q_head + i) % SRV_PUT_QUEUE].tok);
    if (c->fd >= 0) close(c->fd);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Waits until no queued or running put covers more than `have` positions of p[0..n) (the
 * slot's own KV covers `have`): the store lookup that follows then sees it. */
static void put_wait(srv_cache *c, const int32_t *p, size_t n, size_t have)
{
    pthread_mutex_lock(&c->mu);
    uint64_t want = 0;
    if (c->busy.tok && common(c->busy.tok, c->busy.n, p, n) > have) want = c->seq_done + 1;
    for (size_t i = 0; i < c->q_n; i++) {
        const conv *v = &c->q[(c->q_head + i) % SRV_PUT_QUEUE];
        if (common(v->tok, v->n, p, n) > have) want = c->seq_next - c->q_n + i + 1;
    }
    while (c->seq_done < want) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* Adds a copy of t to the ring (the oldest entry goes); caller holds mu. */
static void ring_add(srv_cache *c, const int32_t *t, size_t n)
{
    int32_t *copy = malloc(n * sizeof *copy);
    if (!copy) return;
    memcpy(copy, t, n * sizeof *t);
    conv *slot = &c->ring[c->next];
    free(slot->tok);
    *slot = (conv){copy, n};
    c->next = (c->next + 1) % SRV_RECENT;
}

/* The remembered conversation sharing the longest prefix with p[0..n); 0 if none. */
static size_t ring_best(srv_cache *c, const int32_t *p, size_t n, int32_t *out, size_t *n_out)
{
    size_t best = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < SRV_RECENT; i++) {
        const conv *v = &c->ring[i];
        size_t k = v->tok ? common(v->tok, v->n, p, n) : 0;
        if (k <= best) continue;
        best = k;
        memcpy(out, v->tok, v->n * sizeof *out);
        *n_out = v->n;
    }
    pthread_mutex_unlock(&c->mu);
    return best;
}

/* Restores the stored conversation that best covers prompt[0..limit) into ctx, cut to the
 * shared prefix, if one covers more than floor positions: 1 (*kept: positions kept),
 * 0 (none does: ctx untouched), -1 (the restore failed: ctx cleared). */
static int store_restore(srv *s, srv_cache *c, skv_ctx *ctx, const int32_t *prompt, size_t limit, size_t floor,
                         size_t *kept)
{
    int32_t *buf = malloc((size_t)s->n_ctx * sizeof *buf);
    size_t n = 0, got = 0;
    char name[64];
    if (!buf || ring_best(c, prompt, limit, buf, &n) <= floor) {
        free(buf);
        return 0;
    }
    conv_name(buf, n, name, sizeof name);
    int rc = skv_store_get(s->store, name, ctx, 0, buf, (size_t)s->n_ctx, &got, NULL);
    if (rc) {
        srv_log("store: %s: %s", name, skv_store_last_error(s->store));
        skv_ctx_truncate(ctx, 0);
        free(buf);
        return -1;
    }
    *kept = common(buf, got, prompt, limit);
    skv_ctx_truncate(ctx, (int)*kept);
    atomic_fetch_add(&s->m.n_store_hits, 1);
    free(buf);
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
    size_t best = m.n_matched > keep ? m.n_matched : keep;
    *near = s->p.reuse_near && s->store && limit - best >= SRV_NEAR_MIN;
    if (*near) return 0;
    skv_ctx_truncate(ctx, (int)keep);
    int r = m.n_matched > keep ? store_restore(s, c, ctx, prompt, limit, keep, &got) : 0;
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

/* ---- the index file ---- */

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Record: u32 n, u64 xxh64 of the tokens (as tokens_hash), n x i32; little-endian. */
static int index_append(int fd, const int32_t *t, size_t n)
{
    uint8_t hdr[12];
    uint64_t h = tokens_hash(t, n);
    for (int b = 0; b < 4; b++) hdr[b] = (uint8_t)(n >> (8 * b));
    for (int b = 0; b < 8; b++) hdr[4 + b] = (uint8_t)(h >> (8 * b));
    uint8_t *rec = malloc(12 + 4 * n);
    if (!rec) return -1;
    memcpy(rec, hdr, 12);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) rec[12 + 4 * i + (size_t)b] = (uint8_t)((uint32_t)t[i] >> (8 * b));
    int rc = write_all(fd, rec, 12 + 4 * n);
    free(rec);
    return rc ? rc : fdatasync(fd);
}

/* The writer's put of one conversation: the store, then the ring and the index. */
static void put_now(srv *s, srv_cache *c, const int32_t *tokens, size_t n)
{
    char name[64];
    conv_name(tokens, n, name, sizeof name);
    int rc = skv_store_put(s->store, name, tokens, n, NULL);
    if (rc && rc != SKV_ERR_INVALID_ARG) {
        srv_log("store put %s: %s", name, skv_store_last_error(s->store));
        return;
    }
    atomic_fetch_add(&s->m.n_store_puts, rc == 0);
    pthread_mutex_lock(&c->mu);
    ring_add(c, tokens, n);
    if (rc == 0 && c->fd >= 0 && index_append(c->fd, tokens, n)) srv_log("cannot append to the cache index");
    pthread_mutex_unlock(&c->mu);
}

static void *writer_main(void *arg)
{
    srv_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_n && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
        if (!c->q_n) break; /* stopping, and drained */
        c->busy = c->q[c->q_head];
        c->q_head = (c->q_head + 1) % SRV_PUT_QUEUE;
        c->q_n--;
        pthread_cond_broadcast(&c->cv); /* room in the queue */
        pthread_mutex_unlock(&c->mu);
        put_now(c->s, c, c->busy.tok, c->busy.n);
        pthread_mutex_lock(&c->mu);
        free(c->busy.tok);
        c->busy = (conv){0};
        c->seq_done++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void srv_cache_put(srv *s, srv_cache *c, const int32_t *tokens, size_t n)
{
    if (!s->store || !n) return;
    int32_t *copy = c->started ? malloc(n * sizeof *copy) : NULL;
    if (!copy) { /* no writer thread (or no memory for the copy): put here */
        put_now(s, c, tokens, n);
        return;
    }
    memcpy(copy, tokens, n * sizeof *copy);
    pthread_mutex_lock(&c->mu);
    while (c->q_n == SRV_PUT_QUEUE) pthread_cond_wait(&c->cv, &c->mu); /* backpressure */
    c->q[(c->q_head + c->q_n) % SRV_PUT_QUEUE] = (conv){copy, n};
    c->q_n++;
    c->seq_next++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static uint64_t rd_le(const uint8_t *p, int nbytes)
{
    uint64_t v = 0;
    for (int b = nbytes - 1; b >= 0; b--) v = (v << 8) | p[b];
    return v;
}

/* Parses the records of data[0..size) into the ring; stops at the first torn or damaged
 * one (the tail a kill -9 may leave). Returns the records kept. */
static size_t index_parse(srv_cache *c, const uint8_t *data, size_t size, size_t max_tokens)
{
    size_t at = 12, n_ok = 0;
    if (size < 12 || memcmp(data, INDEX_MAGIC, 8) || rd_le(data + 8, 4) != INDEX_VERSION) return 0;
    while (size - at >= 12) {
        size_t n = (size_t)rd_le(data + at, 4);
        if (n == 0 || n > max_tokens || (size - at - 12) / 4 < n) break;
        int32_t *t = malloc(n * sizeof *t);
        if (!t) break;
        for (size_t i = 0; i < n; i++) t[i] = (int32_t)(uint32_t)rd_le(data + at + 12 + 4 * i, 4);
        int ok = tokens_hash(t, n) == rd_le(data + at + 4, 8);
        if (ok) ring_add(c, t, n);
        free(t);
        if (!ok) break;
        at += 12 + 4 * n;
        n_ok++;
    }
    return n_ok;
}

/* The whole file at path (NULL if absent or unreadable). */
static uint8_t *read_file(const char *path, size_t *size)
{
    struct stat sb;
    int fd = open(path, O_RDONLY);
    uint8_t *buf = NULL;
    size_t got = 0;
    if (fd < 0) return NULL;
    if (!fstat(fd, &sb) && sb.st_size > 0 && (buf = malloc((size_t)sb.st_size))) {
        ssize_t r;
        while (got < (size_t)sb.st_size && (r = read(fd, buf + got, (size_t)sb.st_size - got)) > 0) got += (size_t)r;
    }
    close(fd);
    *size = got;
    return buf;
}

/* Rewrites the index with the ring's conversations (oldest first), atomically. */
static int index_rewrite(srv_cache *c, const char *path)
{
    char tmp[4200];
    uint8_t hdr[12];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    memcpy(hdr, INDEX_MAGIC, 8);
    for (int b = 0; b < 4; b++) hdr[8 + b] = (uint8_t)(INDEX_VERSION >> (8 * b));
    int rc = write_all(fd, hdr, 12);
    for (size_t i = 0; i < SRV_RECENT && !rc; i++) {
        const conv *v = &c->ring[(c->next + i) % SRV_RECENT];
        if (v->tok) rc = index_append(fd, v->tok, v->n);
    }
    if (!rc) rc = fsync(fd);
    close(fd);
    return rc ? -1 : rename(tmp, path);
}

int srv_cache_open_index(srv_cache *c, const char *dir, size_t max_tokens)
{
    char path[4096];
    size_t size = 0, n = 0;
    if (snprintf(path, sizeof path, "%s/%s", dir, INDEX_FILE) >= (int)sizeof path) return -1;
    uint8_t *data = read_file(path, &size);
    if (data) n = index_parse(c, data, size, max_tokens);
    free(data);
    if (index_rewrite(c, path) || (c->fd = open(path, O_WRONLY | O_APPEND)) < 0) {
        srv_log("cannot write the cache index %s", path);
        return -1;
    }
    srv_log("cache index: %zu conversations", n);
    return 0;
}
