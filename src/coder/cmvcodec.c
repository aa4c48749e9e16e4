/* Codecs cmv (20) and cmv with a dictionary (21), docs/format.md section 2.6: a segment's
 * ids range-coded under the cm model with the vocabulary's side information
 * (coder/cm_vocab.h), optionally primed by a dictionary of ids (a store's own sessions).
 * Restored like codec tokens: decode the ids, one batched prefill, digest verified.
 *
 * Payload: u64 model check (skv_cm_model_check: the vocabulary's side information and the
 * model revision, 1 to SKV_CMV_REV; a file is decoded with the revision it names), then for
 * codec 21 u64 dictionary id (XXH3-64 of its ids as little-endian u32) and u32 its length,
 * then the range-coded stream. A decoder refuses a file whose model check (vocabulary or
 * revision) or dictionary it does not have (the file never carries the dictionary).
 *
 * Side information and primed models are built once per vocabulary (per dictionary) and
 * kept for the life of the process in a small table (never freed while the process
 * runs, so a model copied from one is never pulled away). A segment is coded by the primed
 * model itself under an undo log (skv_cm_undo_begin / skv_cm_undo: one thread at a time
 * per dictionary, the others wait), or, when it is too long for the log, by a copy. */
#include <pthread.h>
#include <stdatomic.h>
#include "core/fpguard.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "coder/cm.h"
#include "coder/cm_snap.h"
#include "coder/cm_vocab.h"
#include "coder/cmvcodec.h"
#include "coder/rangecoder.h"
#include "core/util.h"

#define CACHE_N 12
#define CACHE_KEEP_FREE 4 /* entries a blank model (no dictionary) leaves to dictionaries */
#define HIST_ROOM 8192 /* ids of room after a cached dictionary: a segment's, without a realloc */

typedef struct {
    uint8_t fp[16];        /* tokenizer fingerprint the entry was built for */
    skv_cm_vocab *vb;
    unsigned rev;          /* primed entries: the model revision, else 0 */
    uint64_t dict_id;      /* primed entries: the dictionary, else 0 */
    size_t n_dict;
    skv_cm *primed;        /* NULL: side information only */
    skv_cm *spare;         /* primed entries: a model to copy the primed state into (its pages are
                              already faulted in: a fresh clone per segment cost ~0.02 s of page
                              faults for 36 MiB), or NULL while a coder uses it */
    int busy;              /* primed is in use: coding in place, being copied or written */
    int32_t *hist;         /* primed entries: the dictionary's ids, then a segment's (in place) */
    size_t hist_cap;
} cache_entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static cache_entry g_cache[CACHE_N];
static int g_n;
static size_t g_primings; /* dictionaries primed by this process (skv_cmv_primings) */
static size_t g_blank_uses; /* segments coded on a kept blank model (skv_cmv_blank_uses) */

uint64_t skv_cmv_dict_id(const int32_t *dict, size_t n)
{
    XXH3_state_t *s = XXH3_createState();
    uint64_t h = 0;
    uint8_t b[4096]; /* the ids as little-endian u32, a block at a time (the same hash) */
    if (!s) return 0;
    XXH3_64bits_reset(s);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n) XXH3_64bits_update(s, dict, n * 4); /* the ids are their own little-endian bytes */
    n = 0;
#endif
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof b / 4 && i < n; k++, i++) skv_wr32(b + 4 * k, (uint32_t)dict[i]);
        XXH3_64bits_update(s, b, 4 * k);
    }
    h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

static cache_entry *find(const uint8_t fp[16], unsigned rev, uint64_t dict_id, size_t n_dict)
{
    for (int i = 0; i < g_n; i++)
        if (!memcmp(g_cache[i].fp, fp, 16) && g_cache[i].rev == rev && g_cache[i].dict_id == dict_id &&
            g_cache[i].n_dict == n_dict)
            return &g_cache[i];
    return NULL;
}

/* The side information of v's vocabulary (built on first use), keyed by the tokenizer's
 * fingerprint: it depends on the ids' pieces and scores only, so it never waits for the
 * model's fingerprint (every weight hashed: seconds on a large model), which a restore
 * then computes beside the prefill (restore.c fp_overlap). */
static int vocab_of(const skv_cmv_src *v, const skv_cm_vocab **out)
{
    int rc = SKV_OK;
    pthread_mutex_lock(&g_lock);
    cache_entry *c = find(v->fp, 0, 0, 0);
    if (!c && g_n < CACHE_N) {
        skv_cm_vocab *vb = NULL;
        if ((rc = v->build(v->user, &vb)) == SKV_OK) {
            c = &g_cache[g_n++];
            *c = (cache_entry){.vb = vb};
            memcpy(c->fp, v->fp, 16);
        }
    } else if (!c) {
        rc = SKV_ERR_NOMEM; /* more vocabularies than the table holds */
    }
    if (c) *out = c->vb;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int skv_cmv_prepare(const skv_cmv_src *v)
{
    const skv_cm_vocab *vb = NULL;
    return v ? vocab_of(v, &vb) : SKV_ERR_INVALID_ARG;
}

/* Files the primed model cm as (fp, its revision, id, n), keeping a copy of the dictionary's
 * ids; a model already there wins (cm is freed). Called with g_lock held. */
static int cache_add(const uint8_t fp[16], uint64_t id, const int32_t *dict, size_t n, skv_cm *cm, cache_entry **out)
{
    unsigned rev = skv_cm_rev(cm);
    cache_entry *c = find(fp, rev, id, n);
    size_t cap = n + 1 + HIST_ROOM;
    int32_t *h = c ? NULL : skv_big_alloc(cap * sizeof *h);
    if (c || !h || g_n >= CACHE_N) {
        skv_cm_free(cm);
        skv_big_free(h);
        if (!c) return SKV_ERR_NOMEM; /* more dictionaries than the table holds, or no memory */
    } else {
        if (n) memcpy(h, dict, n * sizeof *h);
        c = &g_cache[g_n++];
        *c = (cache_entry){.vb = NULL, .rev = rev, .dict_id = id, .n_dict = n, .primed = cm, .hist = h, .hist_cap = cap};
        memcpy(c->fp, fp, 16);
    }
    if (out) *out = c;
    return SKV_OK;
}

/* A model of revision rev primed by the dictionary (id = its skv_cmv_dict_id), built on
 * first use; dict ids < V checked. */
static int primed_of(const skv_cmv_src *v, const skv_cm_vocab *vb, unsigned rev, const int32_t *dict, size_t n,
                     uint64_t id, cache_entry **out)
{
    const uint8_t *fp = v->fp;
    int rc = SKV_OK;
    pthread_mutex_lock(&g_lock);
    cache_entry *c = find(fp, rev, id, n);
    if (!c && !n && g_n + CACHE_KEEP_FREE >= CACHE_N) rc = SKV_ERR_NOMEM; /* blank models never crowd out dictionaries */
    else if (!c) {
        skv_cm *cm = NULL;
        rc = skv_cm_create_vocab(vb, rev, n ? SKV_CMV_DICT_SLOT_BITS : SKV_CMV_SLOT_BITS, &cm);
        if (rc == SKV_OK && (rc = skv_cm_prime(cm, dict, n)) == SKV_OK) rc = cache_add(fp, id, dict, n, cm, &c), g_primings += n != 0;
        else skv_cm_free(cm);
    }
    if (c) *out = c;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The entry's primed model for this thread alone (waits while another thread has it). */
static void primed_take(cache_entry *c)
{
    pthread_mutex_lock(&g_lock);
    while (c->busy) pthread_cond_wait(&g_cond, &g_lock);
    c->busy = 1;
    pthread_mutex_unlock(&g_lock);
}

/* primed_take if no other thread has it: 1 (taken) or 0. */
static int primed_try_take(cache_entry *c)
{
    pthread_mutex_lock(&g_lock);
    int ok = !c->busy;
    if (ok) c->busy = 1;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

static void primed_give(cache_entry *c)
{
    pthread_mutex_lock(&g_lock);
    c->busy = 0;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

/* A copy of the primed model (taken by the caller): into the entry's spare when it is free. */
static int copy_primed(cache_entry *c, skv_cm **cm)
{
    pthread_mutex_lock(&g_lock);
    *cm = c->spare;
    c->spare = NULL;
    pthread_mutex_unlock(&g_lock);
    if (*cm) return skv_cm_copy(*cm, c->primed);
    int rc = skv_cm_clone(c->primed, cm);
    return rc ? rc : skv_cm_journal(*cm, c->primed);
}

/* Gives a copy back: kept as the entry's spare, or freed. */
static void model_done(skv_cm *cm, cache_entry *pool)
{
    if (pool && cm) {
        pthread_mutex_lock(&g_lock);
        if (!pool->spare) pool->spare = cm, cm = NULL;
        pthread_mutex_unlock(&g_lock);
    }
    skv_cm_free(cm);
}

/* hist = dict ++ tok (n_dict + n ids), or NULL on overflow / no memory. */
static int32_t *history(const int32_t *dict, size_t n_dict, const int32_t *tok, size_t n)
{
    if (n_dict > SIZE_MAX / 4 - n) return NULL;
    int32_t *h = malloc((n_dict + n + 1) * sizeof *h);
    if (!h) return NULL;
    if (n_dict) memcpy(h, dict, n_dict * sizeof *h);
    if (n && tok) memcpy(h + n_dict, tok, n * sizeof *h);
    return h;
}

/* The model a segment of n ids is coded with, and its history (dict ++ the ids). */
typedef struct cmv_coder {
    skv_cm *cm;
    cache_entry *pool; /* primed entries */
    int in_place;      /* cm is pool->primed under its undo log, h is pool->hist */
    int32_t *h;
} cmv_coder;

/* Room in c->hist (taken) for n_dict + n ids; 0 if there is none. */
static int hist_room(cache_entry *c, size_t need)
{
    if (need <= c->hist_cap) return 1;
    int32_t *h = need < SIZE_MAX / 4 - HIST_ROOM ? skv_big_alloc((need + HIST_ROOM) * sizeof *h) : NULL;
    if (!h) return 0;
    memcpy(h, c->hist, c->n_dict * sizeof *h); /* the dictionary; the segment's ids come after */
    skv_big_free(c->hist);
    c->hist = h, c->hist_cap = need + HIST_ROOM;
    return 1;
}

/* Without a dictionary: the blank model of (vocabulary, rev), kept like a primed one (an
 * empty dictionary) and coded in place under its undo log, which puts it back blank; a
 * fresh model per segment cost ~2-4 ms of page faults, zeroing and unmapping its 5 MiB of
 * tables, half of a server's put. While another thread codes with it, or for a segment too
 * long for the log, an older revision's stream (rare: files written before it), or no room
 * in the table, a fresh model as before: never a wait. */
static int blank_open(const skv_cmv_src *v, const skv_cm_vocab *vb, unsigned rev, const int32_t *tok, size_t n,
                      cmv_coder *k)
{
    cache_entry *c = NULL;
    if (rev == SKV_CMV_REV && !primed_of(v, vb, rev, NULL, 0, 0, &c) && primed_try_take(c)) {
        if (hist_room(c, n + 1) && !skv_cm_undo_begin(c->primed, n)) {
            k->cm = c->primed, k->pool = c, k->in_place = 1, k->h = c->hist;
            if (n && tok) memcpy(k->h, tok, n * sizeof *tok);
            g_blank_uses++; /* under the entry (busy): one thread at a time, read under g_lock */
            return SKV_OK;
        }
        primed_give(c);
    }
    int rc = skv_cm_create_vocab(vb, rev, SKV_CMV_SLOT_BITS, &k->cm);
    if (!rc && !(k->h = history(NULL, 0, tok, n))) rc = SKV_ERR_NOMEM;
    return rc;
}

/* A cmv model of revision rev: the blank one (above), the primed one in place, or (too long
 * for the undo log) a copy. */
static int coder_open(const skv_cmv_src *v, unsigned rev, const int32_t *dict, size_t n_dict, uint64_t dict_id,
                      const int32_t *tok, size_t n, const skv_cm_vocab **vb, cmv_coder *k)
{
    cache_entry *c = NULL;
    int rc = vocab_of(v, vb);
    *k = (cmv_coder){NULL, NULL, 0, NULL};
    if (!rc && !n_dict) return blank_open(v, *vb, rev, tok, n, k);
    if (!rc && !(rc = primed_of(v, *vb, rev, dict, n_dict, dict_id, &c))) {
        k->pool = c;
        primed_take(c);
        if (n_dict < SIZE_MAX / 4 - n && hist_room(c, n_dict + n + 1) && !skv_cm_undo_begin(c->primed, n)) {
            k->cm = c->primed, k->in_place = 1, k->h = c->hist;
            if (n && tok) memcpy(k->h + n_dict, tok, n * sizeof *tok);
            return SKV_OK;
        }
        rc = copy_primed(c, &k->cm);
        primed_give(c);
    }
    if (!rc && !(k->h = history(dict, n_dict, tok, n))) rc = SKV_ERR_NOMEM;
    return rc;
}

static void coder_close(cmv_coder *k)
{
    if (k->in_place) {
        skv_cm_undo(k->cm);
        primed_give(k->pool);
        return;
    }
    free(k->h);
    model_done(k->cm, k->pool);
}

static size_t header_bytes(size_t n_dict) { return n_dict ? 20 : 8; }

static int encode_ids(skv_cm *cm, const int32_t *h, size_t n_dict, size_t n, uint8_t *dst, size_t cap, size_t *len)
{
    skv_rangecoder_enc e;
    int rc = SKV_OK;
    skv_rangecoder_enc_init(&e, dst, cap);
    for (size_t i = 0; i < n && rc == SKV_OK; i++) rc = skv_cm_encode(cm, &e, h, n_dict + i);
    return rc ? rc : skv_rangecoder_enc_finish(&e, len);
}

int skv_cmv_payload(const skv_cmv_src *v, const int32_t *dict, size_t n_dict, const int32_t *tok, size_t n,
                    uint8_t **buf, size_t *cap, size_t *len)
{
    const skv_cm_vocab *vb = NULL;
    size_t hb = header_bytes(n_dict), need = skv_cm_bound(n, v->n_vocab), body = 0;
    if (need == SIZE_MAX || need > SIZE_MAX - hb) return SKV_ERR_NOMEM;
    if (need + hb > *cap) {
        uint8_t *nb = realloc(*buf, need + hb);
        if (!nb) return SKV_ERR_NOMEM;
        *buf = nb;
        *cap = need + hb;
    }
    uint64_t id = n_dict ? skv_cmv_dict_id(dict, n_dict) : 0;
    cmv_coder k;
    int rc = coder_open(v, SKV_CMV_REV, dict, n_dict, id, tok, n, &vb, &k);
    if (rc == SKV_OK) rc = encode_ids(k.cm, k.h, n_dict, n, *buf + hb, *cap - hb, &body);
    if (rc == SKV_OK) {
        skv_wr64(*buf, skv_cm_model_check(vb, SKV_CMV_REV));
        if (n_dict) skv_wr64(*buf + 8, id), skv_wr32(*buf + 16, (uint32_t)n_dict);
        *len = hb + body;
    }
    coder_close(&k);
    return rc == SKV_ERR_RANGE ? SKV_ERR_INTERNAL : rc;
}

/* The payload's header against this vocabulary and dictionary (id, n_dict); *rev: the model
 * revision it names. */
static int check_header(const uint8_t *p, size_t len, const skv_cm_vocab *vb, uint64_t id, size_t n_dict,
                        unsigned *rev, skv_err *err)
{
    size_t hb = header_bytes(n_dict);
    if (len < hb) return skv_fail(err, SKV_ERR_FORMAT, "cmv payload shorter than its header");
    uint64_t check = skv_rd64(p);
    for (*rev = SKV_CMV_REV; *rev >= 1 && check != skv_cm_model_check(vb, *rev); --*rev) {}
    if (*rev < 1)
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "cmv segment coded with another vocabulary side information or a newer model revision");
    if (n_dict && (skv_rd64(p + 8) != id || skv_rd32(p + 16) != n_dict))
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "cmv segment primed by dictionary %016llx (%u ids), not the one given",
                        (unsigned long long)skv_rd64(p + 8), skv_rd32(p + 16));
    return SKV_OK;
}

/* The n ids of the range-coded stream src[0..len) into h[n_dict ..] under cm; with nf,
 * each id is also stored at out[i] as it comes and nf told after the first nf->at. */
static int decode_ids(skv_cm *cm, const uint8_t *src, size_t len, int32_t *h, size_t n_dict, size_t n,
                      int32_t *out, const skv_id_notify *nf, skv_err *err)
{
    skv_rangecoder_dec d;
    int rc = skv_rangecoder_dec_init(&d, src, len);
    for (size_t i = 0; rc == SKV_OK && i < n; i++) {
        rc = skv_cm_decode(cm, &d, h, n_dict + i);
        if (!nf || rc) continue;
        out[i] = h[n_dict + i];
        if (i + 1 == nf->at) nf->ready(nf->user);
    }
    if (rc == SKV_OK && skv_rangecoder_dec_finish(&d)) rc = SKV_ERR_FORMAT;
    return rc ? skv_fail(err, SKV_ERR_FORMAT, "corrupt cmv token stream") : SKV_OK;
}

int skv_cmv_payload_decode(const skv_cmv_src *v, const uint8_t *p, size_t len, size_t n, int with_dict,
                           const int32_t *dict, size_t n_dict, int32_t *tok, const skv_id_notify *nf, skv_err *err)
{
    if (!with_dict) dict = NULL, n_dict = 0;
    else if (!dict || !n_dict)
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "codec cmvd: the dictionary the payload was coded with is needed");
    if (n_dict > SKV_CMV_DICT_MAX) return skv_fail(err, SKV_ERR_INVALID_ARG, "cm_dict longer than 2^24 ids");
    const skv_cm_vocab *vb = NULL;
    size_t hb = header_bytes(n_dict);
    uint64_t id = n_dict ? skv_cmv_dict_id(dict, n_dict) : 0;
    cmv_coder k = {NULL, NULL, 0, NULL};
    unsigned rev = 0;
    int rc = vocab_of(v, &vb);
    if (rc) return skv_fail(err, rc, "cannot build the cmv side information (out of memory)");
    if ((rc = check_header(p, len, vb, id, n_dict, &rev, err))) return rc;
    rc = coder_open(v, rev, dict, n_dict, id, NULL, n, &vb, &k);
    if (rc == SKV_ERR_INVALID_ARG) rc = skv_fail(err, SKV_ERR_FORMAT, "cmv dictionary holds an id outside the vocabulary");
    else if (rc) rc = skv_fail(err, rc, "cannot build the cmv model (out of memory)");
    if (rc == SKV_OK)
        rc = decode_ids(k.cm, p + hb, len - hb, k.h, n_dict, n, tok, nf, err);
    if (rc == SKV_OK && !nf) memcpy(tok, k.h + n_dict, n * sizeof *tok);
    coder_close(&k);
    return rc;
}

int skv_cmv_dict_copy(uint32_t V, const int32_t *dict, size_t n, int32_t **copy, skv_err *err)
{
    *copy = NULL;
    if (!dict || n < 1 || n > SKV_CMV_DICT_MAX)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "codec cmvd needs a dictionary of 1..%u ids (cm_dict)",
                        (unsigned)SKV_CMV_DICT_MAX);
    for (size_t i = 0; i < n; i++)
        if (dict[i] < 0 || (uint32_t)dict[i] >= V)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "cm_dict[%zu] = %d is outside the vocabulary", i, dict[i]);
    if (!(*copy = malloc(n * sizeof **copy))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    memcpy(*copy, dict, n * sizeof **copy);
    return SKV_OK;
}

/* ---- primed-state snapshots (skv_cm_dict_load / _save, docs/coder.md 4.8) ---- */

/* The vocabulary, the tokenizer's fingerprint and the snapshot identity of (v, dict). */
static int snap_who(const skv_cmv_src *v, const int32_t *dict, size_t n, const skv_cm_vocab **vb, uint8_t fp[16],
                    skv_cm_snap_id *id, skv_err *err)
{
    if (!v || !dict || n < 1 || n > SKV_CMV_DICT_MAX)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "a cmvd dictionary of 1..%u ids is needed",
                        (unsigned)SKV_CMV_DICT_MAX);
    for (size_t i = 0; i < n; i++)
        if (dict[i] < 0 || (uint32_t)dict[i] >= v->n_vocab)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "dictionary id %zu (%d) is outside the vocabulary", i,
                            dict[i]);
    int rc = vocab_of(v, vb);
    memcpy(fp, v->fp, 16);
    if (rc) return skv_fail(err, rc, "cannot build the cmv side information (out of memory)");
    *id = (skv_cm_snap_id){skv_cm_model_check(*vb, SKV_CMV_REV), skv_cmv_dict_id(dict, n), (uint32_t)n};
    return SKV_OK;
}

size_t skv_cmv_blank_uses(void)
{
    pthread_mutex_lock(&g_lock);
    size_t n = g_blank_uses;
    pthread_mutex_unlock(&g_lock);
    return n;
}

size_t skv_cmv_primings(void)
{
    pthread_mutex_lock(&g_lock);
    size_t n = g_primings;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int skv_cmv_dict_have(const skv_cmv_src *v, uint64_t id, size_t n)
{
    if (!v) return 0;
    pthread_mutex_lock(&g_lock);
    int have = find(v->fp, SKV_CMV_REV, id, n) != NULL;
    pthread_mutex_unlock(&g_lock);
    return have;
}

/* After the model cm (new, for the snapshot id) read a snapshot (status rc) from the file
 * or store record `what`: it joins the cache of primed models, or is freed on error. */
static int snap_done(skv_cm *cm, int rc, const uint8_t fp[16], const skv_cm_snap_id *id, const int32_t *dict, size_t n,
                     const char *what, skv_err *err)
{
    if (rc == SKV_ERR_MISMATCH || rc == SKV_ERR_UNSUPPORTED)
        rc = skv_fail(err, SKV_ERR_MISMATCH, "cmvd snapshot %s is for another model, dictionary or version", what);
    else if (rc == SKV_ERR_FORMAT)
        rc = skv_fail(err, rc, "cmvd snapshot %s is damaged (delete it: it is rebuilt from the dictionary)", what);
    else if (rc) rc = skv_fail(err, rc, "cannot load the cmvd snapshot %s", what);
    if (rc) {
        skv_cm_free(cm);
        return rc;
    }
    pthread_mutex_lock(&g_lock);
    rc = cache_add(fp, id->dict_id, dict, n, cm, NULL);
    pthread_mutex_unlock(&g_lock);
    return rc ? skv_fail(err, rc, "more than %d cmv models in this process", CACHE_N) : SKV_OK;
}

/* The snapshot identity of (v, dict) and a new model to read it into; with skip_held, *cm
 * stays NULL when the process holds that primed model already (nothing to load). */
static int snap_target(const skv_cmv_src *v, const int32_t *dict, size_t n, int skip_held, int mapped, uint8_t fp[16],
                       skv_cm_snap_id *id, skv_cm **cm, skv_err *err)
{
    const skv_cm_vocab *vb = NULL;
    int rc = snap_who(v, dict, n, &vb, fp, id, err);
    *cm = NULL;
    if (rc || (skip_held && skv_cmv_dict_have(v, id->dict_id, n))) return rc;
    /* blank: the snapshot reader writes every element once (it resets the model if it fails) */
    rc = mapped ? skv_cm_create_blank_mapped(vb, SKV_CMV_REV, SKV_CMV_DICT_SLOT_BITS, cm)
                   : skv_cm_create_blank(vb, SKV_CMV_REV, SKV_CMV_DICT_SLOT_BITS, cm);
    if (rc) return skv_fail(err, rc, "out of memory");
    return SKV_OK;
}

int skv_cmv_dict_load_mem(const skv_cmv_src *v, const int32_t *dict, size_t n, const uint8_t *buf, size_t len,
                                 skv_err *err)
{
    uint8_t fp[16];
    skv_cm_snap_id id;
    skv_cm *cm = NULL;
    if (!buf && len) return skv_fail(err, SKV_ERR_INVALID_ARG, "no snapshot bytes");
    int rc = snap_target(v, dict, n, 1, 0, fp, &id, &cm, err);
    if (rc || !cm) return rc;
    rc = len > skv_cm_snap_bound(cm) ? SKV_ERR_FORMAT : skv_cm_snap_read(cm, &id, buf, len);
    return snap_done(cm, rc, fp, &id, dict, n, "(store record)", err);
}

/* A version 2 file is mapped (skv_cm_snap_map_fd): its slot tables stay the page cache's
 * pages, read-only, and a segment coded in place keeps what it changes in an overlay; a
 * copy of them (~36 MiB of fresh memory, cleared by the kernel, then filled) was most of a
 * short restore's time on the project's VMs. Anything else (version 1, no mmap) is read
 * through a small window (skv_cm_snap_read_fd), as before (docs/coder.md 4.8). */
int skv_cmv_dict_load_file(const skv_cmv_src *v, const int32_t *dict, size_t n, const char *path, skv_err *err)
{
    uint8_t fp[16];
    skv_cm_snap_id id;
    skv_cm *cm = NULL;
    struct stat st;
    int rc = path ? snap_target(v, dict, n, 0, 1, fp, &id, &cm, err)
                  : skv_fail(err, SKV_ERR_INVALID_ARG, "no snapshot path");
    if (rc || !cm) return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC), bad = fd < 0 || fstat(fd, &st) != 0;
    if (bad || !S_ISREG(st.st_mode)) {
        rc = skv_fail(err, SKV_ERR_IO, "cannot read the cmvd snapshot %s: %s", path,
                      bad ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        skv_cm_free(cm);
        return rc;
    }
    rc = (uint64_t)st.st_size > skv_cm_snap_bound(cm) ? SKV_ERR_FORMAT
                                                       : skv_cm_snap_map_fd(cm, &id, fd, (uint64_t)st.st_size);
    if (rc == SKV_ERR_UNSUPPORTED) { /* read instead, into a model with tables of its own */
        skv_cm_free(cm);
        cm = NULL;
        if ((rc = snap_target(v, dict, n, 0, 0, fp, &id, &cm, err))) {
            close(fd);
            return rc;
        }
        rc = skv_cm_snap_read_fd(cm, &id, fd, (uint64_t)st.st_size);
    }
    close(fd);
    return snap_done(cm, rc, fp, &id, dict, n, path, err);
}

/* buf[0..len) into path through a temporary file of this call's own and a rename: never
 * half a file, and two processes or threads writing the same path never share a temporary
 * ("path.tmp.PID.N", created exclusively, mode 0666 less the umask). */
static int write_whole(const char *path, const uint8_t *buf, size_t len, skv_err *err)
{
    static atomic_uint seq;
    size_t pn = strlen(path), tn = pn + 40;
    char *tmp = malloc(tn);
    int fd = -1;
    if (!tmp) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (int tries = 0; fd < 0 && tries < 64; tries++) {
        snprintf(tmp, tn, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd);
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    if (ok && rename(tmp, path)) ok = 0;
    if (!ok && fd >= 0) remove(tmp);
    free(tmp);
    return ok ? SKV_OK : skv_fail(err, SKV_ERR_IO, "cannot write the cmvd snapshot %s", path);
}

int skv_cmv_dict_snapshot(const skv_cmv_src *v, const int32_t *dict, size_t n, uint32_t version, uint8_t **buf,
                          size_t *len, skv_err *err)
{
    const skv_cm_vocab *vb = NULL;
    uint8_t fp[16];
    skv_cm_snap_id id;
    cache_entry *c = NULL;
    size_t bound = 0;
    int rc = snap_who(v, dict, n, &vb, fp, &id, err);
    *buf = NULL;
    if (!rc && (rc = primed_of(v, vb, SKV_CMV_REV, dict, n, id.dict_id, &c)))
        rc = skv_fail(err, rc, "cannot prime the cmvd model");
    if (rc) return rc;
    primed_take(c);
    if (!(*buf = malloc(bound = skv_cm_snap_bound(c->primed)))) rc = skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    else if ((rc = skv_cm_snap_write_version(c->primed, &id, version, *buf, bound, len))) rc = skv_fail(err, rc, "cannot snapshot the cmvd model");
    primed_give(c);
    if (rc) free(*buf), *buf = NULL;
    return rc;
}

int skv_cmv_dict_save_file(const skv_cmv_src *v, const int32_t *dict, size_t n, const char *path, skv_err *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    /* version 2 (whole tables, read by two threads): the file is a cache a process reads
     * before every restore; a store's record stays version 1 (smaller, read once) */
    int rc = path ? skv_cmv_dict_snapshot(v, dict, n, SKV_CM_SNAP_RAW, &buf, &len, err)
                  : skv_fail(err, SKV_ERR_INVALID_ARG, "no snapshot path");
    if (!rc) rc = write_whole(path, buf, len, err);
    free(buf);
    return rc;
}

int skv_cmv_snap_file_current(const char *path)
{
    uint8_t h[8];
    FILE *f = path ? fopen(path, "rb") : NULL;
    int ok = f && fread(h, 1, 8, f) == 8;
    if (f) fclose(f);
    return ok && skv_rd32(h + 4) == SKV_CM_SNAP_RAW; /* the version after the magic, as _save writes it */
}

int skv_cmv_payload_dict(const uint8_t *p, size_t len, uint64_t *id, uint32_t *n)
{
    if (len < header_bytes(1)) return SKV_ERR_FORMAT;
    *id = skv_rd64(p + 8);
    *n = skv_rd32(p + 16);
    return SKV_OK;
}
