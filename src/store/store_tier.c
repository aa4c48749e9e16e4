/* Node tiers (docs/store.md "Tiers"): the form a trie node's record takes. A materialised
 * node keeps its KV (the placement policy, store_policy.c) and its tokens raw; a
 * token-only node's span is kept raw (the trie's codec, trie.c) or cheap-coded (codec cmv,
 * or cmvd primed by the store's dictionary, store_dict.c), whichever costs less:
 *
 *   E        = hits + refcount + kappa 2^-d_T              expected restores through it
 *   cost(t)  = price x bytes(t) + E x decode_seconds(t)
 *   raw:  bytes = 80 + 8 len,                  decode 0
 *   cm:   bytes = 88 + (2 + cm_bpp) len,       decode len / cm_tps
 *
 * cm_tps (positions per second, model setup included) and cm_bpp are measured on every
 * node this file codes (state record); price is stored in the "tier" meta record. The
 * rule runs on every node write, so a node whose hits grow goes back to raw the next time
 * it is written, and gc rewrites every node whose tier the rule changed.
 *
 * Coded node record (little-endian, 88 + 2 len + P bytes):
 *
 *   0  u32 magic "SKVC"   4 u8 version (1)   5 u8 codec (20 cmv, 21 cmvd)   6 u16 0
 *   8  u64 id             16 u64 parent      24 u32 depth   28 u32 len (1 .. 2^24)
 *   32 u32 refcount       36 u32 n_end       40 u64 hits    48 u64 last_access
 *   56 f64 d_end          64 u64 dictionary id (cmvd; else 0)   72 u32 its ids (cmvd; else 0)
 *   76 u32 P              80 u16 surprisal[len] (units of 2^-9 bits: the store's grid, exact)
 *   .. payload[P] (codec cmv/cmvd payload of the span's ids, docs/format.md 2.6)
 *   .. u64 XXH3-64 of every byte before it
 *
 * Fields 8..63 sit where the raw record has them, so the rule reads either record's
 * header without decoding the tokens. */
#include <math.h>
#include "core/fpguard.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "container/cmv_model.h"
#include "store/store_int.h"

#define CODED_MAGIC 0x43564b53u /* "SKVC" */
#define CODED_VERSION 1
#define CODED_HDR 80u
#define RAW_MAGIC 0x4e564b53u /* "SKVN": trie.c's record */
#define TIER_MAGIC 0x54564b53u /* "SKVT" */
#define TIER_REC 40
#define SPAN_MAX (1u << 24)

/* ---- the "tier" meta record: "SKVT" | u32 1 | f64 price | u64 dict id | u32 dict n | u32 0 | u64 XXH3 */

int store_tier_get(tx *t, struct store_tier_rec *r)
{
    const uint8_t *v;
    size_t n;
    if (t->tier_ok) return *r = t->tier, SKV_OK;
    int rc = store_get(t, TB_META, "tier", 4, &v, &n);
    t->tier = (struct store_tier_rec){STORE_PRICE0, 0, 0};
    if (rc < 0) return rc;
    if (rc == 0) {
        uint64_t u = n == TIER_REC ? skv_rd64(v + 8) : 0;
        if (n != TIER_REC || skv_rd32(v) != TIER_MAGIC || skv_rd32(v + 4) != 1 ||
            XXH3_64bits(v, 32) != skv_rd64(v + 32))
            return store_err(t->st, SKV_ERR_FORMAT, "store tier record damaged");
        memcpy(&t->tier.price, &u, 8);
        t->tier.dict_id = skv_rd64(v + 16);
        t->tier.dict_n = skv_rd32(v + 24);
        if (!(t->tier.price > 0) || !isfinite(t->tier.price) || t->tier.dict_n > STORE_DICT_MAX ||
            !t->tier.dict_id != !t->tier.dict_n)
            return store_err(t->st, SKV_ERR_FORMAT, "store tier record damaged");
    }
    t->tier_ok = 1;
    *r = t->tier;
    return SKV_OK;
}

int store_tier_put(tx *t, const struct store_tier_rec *r)
{
    uint8_t b[TIER_REC] = {0};
    uint64_t u;
    memcpy(&u, &r->price, 8);
    skv_wr32(b, TIER_MAGIC);
    skv_wr32(b + 4, 1);
    skv_wr64(b + 8, u);
    skv_wr64(b + 16, r->dict_id);
    skv_wr32(b + 24, r->dict_n);
    skv_wr64(b + 32, XXH3_64bits(b, 32));
    t->tier = *r;
    t->tier_ok = 1;
    return store_put(t, TB_META, "tier", 4, b, TIER_REC);
}

/* ---- memo: the ids of coded records decoded lately, per handle. A record is named by
 * its node id and its checksum (records are written whole, never patched), so a get's
 * second read of a node (the access it records) decodes nothing, and a node written back
 * with the same ids (an access, a put through it) keeps its payload instead of being
 * coded again. -------------------------------------------------------------------------- */

#define MEMO_N 64

typedef struct memo_ent {
    uint64_t id, sum, dict_id;
    uint32_t len;
    int codec;
    int32_t *tok;
    uint8_t *payload;
    size_t P;
} memo_ent;

struct store_memo {
    pthread_mutex_t lock;
    memo_ent e[MEMO_N];
    size_t next; /* round robin */
};

void store_tier_free(skv_store *st)
{
    if (!st->memo) return;
    for (size_t i = 0; i < MEMO_N; i++) free(st->memo->e[i].tok), free(st->memo->e[i].payload);
    pthread_mutex_destroy(&st->memo->lock);
    free(st->memo);
    st->memo = NULL;
}

/* The handle's memo, made on first use (NULL without memory: then nothing is kept). */
static struct store_memo *memo_of(skv_store *st)
{
    static pthread_mutex_t make = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&make);
    if (!st->memo && (st->memo = calloc(1, sizeof *st->memo)) && pthread_mutex_init(&st->memo->lock, NULL)) {
        free(st->memo);
        st->memo = NULL;
    }
    pthread_mutex_unlock(&make);
    return st->memo;
}

/* Best effort: without memory the node is simply decoded / coded again. */
static void memo_add(skv_store *st, const uint8_t *v, size_t n, uint32_t len, uint32_t P, const int32_t *tok)
{
    struct store_memo *m = memo_of(st);
    int32_t *tk = malloc((size_t)len * 4);
    uint8_t *pl = malloc(P ? P : 1);
    if (!m || !tk || !pl) {
        free(tk), free(pl);
        return;
    }
    memcpy(tk, tok, (size_t)len * 4);
    memcpy(pl, v + CODED_HDR + 2u * len, P);
    pthread_mutex_lock(&m->lock);
    memo_ent *e = &m->e[m->next++ % MEMO_N];
    free(e->tok), free(e->payload);
    *e = (memo_ent){skv_rd64(v + 8), skv_rd64(v + n - 8), skv_rd64(v + 64), len, v[5], tk, pl, P};
    pthread_mutex_unlock(&m->lock);
}

/* The ids of the record v (checked by coded_check) if decoded lately: 1, tok filled. */
static int memo_tokens(skv_store *st, const uint8_t *v, size_t n, uint32_t len, int32_t *tok)
{
    struct store_memo *m = memo_of(st);
    int hit = 0;
    if (!m) return 0;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < MEMO_N && !hit; i++) {
        memo_ent *e = &m->e[i];
        if (e->tok && e->id == skv_rd64(v + 8) && e->sum == skv_rd64(v + n - 8) && e->len == len && e->codec == v[5])
            memcpy(tok, e->tok, (size_t)len * 4), hit = 1;
    }
    pthread_mutex_unlock(&m->lock);
    return hit;
}

/* A copy of n's payload under (codec, dictionary) if its ids were decoded lately, else NULL. */
static uint8_t *memo_payload(tx *t, const skv_trie_node *n, int codec, size_t *P)
{
    struct store_memo *m = memo_of(t->st);
    uint64_t did = codec == SKV_CODEC_CMVD ? t->tier.dict_id : 0;
    uint8_t *pl = NULL;
    if (!m) return NULL;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < MEMO_N && !pl; i++) {
        memo_ent *e = &m->e[i];
        if (e->tok && e->id == n->id && e->len == n->len && e->codec == codec && e->dict_id == did &&
            !memcmp(e->tok, n->tokens, (size_t)n->len * 4) && (pl = malloc(e->P ? e->P : 1)))
            memcpy(pl, e->payload, *P = e->P);
    }
    pthread_mutex_unlock(&m->lock);
    return pl;
}

/* ---- the rule ------------------------------------------------------------ */

typedef struct tier_in {
    uint32_t len, refcount, flags;
    uint64_t hits;
    double d_end;
} tier_in;

static int rule(const tx *t, const tier_in *n)
{
    if (n->flags & SKV_TRIE_MAT) return STORE_TIER_KV;
    double E = (double)n->hits + (double)n->refcount + t->s.prior_weight * exp2(-n->d_end);
    double raw = 80.0 + 8.0 * n->len, cm = 88.0 + (2.0 + t->s.cm_bpp) * n->len;
    double c_raw = t->tier.price * raw, c_cm = t->tier.price * cm + E * (double)n->len / t->s.cm_tps;
    if (!(c_cm < c_raw)) return STORE_TIER_TOKENS;
    return t->tier.dict_id ? STORE_TIER_CMVD : STORE_TIER_CMV;
}

/* ---- records ------------------------------------------------------------- */

/* Surprisals on the store's grid (store_sur_q) as u16; 1 when one is off it (written
 * by an older version): such a node stays raw, or its d_end would no longer add up. */
static int sur_u16(const skv_trie_node *n, uint8_t *p)
{
    for (uint32_t i = 0; i < n->len; i++) {
        float s = n->surprisal[i];
        if (store_sur_q(s) != s) return 1;
        uint32_t u = (uint32_t)(s * STORE_SUR_SCALE);
        p[2 * i] = (uint8_t)u;
        p[2 * i + 1] = (uint8_t)(u >> 8);
    }
    return 0;
}

static int on_grid(const skv_trie_node *n)
{
    for (uint32_t i = 0; i < n->len; i++)
        if (store_sur_q(n->surprisal[i]) != n->surprisal[i]) return 0;
    return 1;
}

static int raw_encode(tx *t, const skv_trie_node *n, uint8_t **buf, size_t *size)
{
    *size = skv_trie_node_size(n->len);
    if (!(*buf = malloc(*size))) return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    skv_trie_node_encode(n, *buf);
    return SKV_OK;
}

/* The coded header: fields 8..63 as the raw record (trie.c) has them. */
static int coded_header(tx *t, const skv_trie_node *n, int codec, size_t P, uint8_t *p)
{
    uint8_t *raw;
    size_t rn;
    int rc = raw_encode(t, n, &raw, &rn);
    if (rc) return rc;
    memset(p, 0, CODED_HDR);
    skv_wr32(p, CODED_MAGIC);
    p[4] = CODED_VERSION;
    p[5] = (uint8_t)codec;
    memcpy(p + 8, raw + 8, 56);
    free(raw);
    skv_wr64(p + 64, codec == SKV_CODEC_CMVD ? t->tier.dict_id : 0);
    skv_wr32(p + 72, codec == SKV_CODEC_CMVD ? t->tier.dict_n : 0);
    skv_wr32(p + 76, (uint32_t)P);
    sur_u16(n, p + CODED_HDR);
    return SKV_OK;
}

/* The span's ids as a cmv / cmvd payload (malloc'ed); measures the coder's speed. */
static int cm_payload(tx *t, const skv_trie_node *n, int codec, uint8_t **pl, size_t *P)
{
    int32_t *dict = NULL;
    size_t cap = 0;
    double t0 = skv_now();
    skv_cmv_src src;
    int rc = codec == SKV_CODEC_CMVD ? store_dict_get(t, t->tier.dict_id, t->tier.dict_n, &dict) : SKV_OK;
    *pl = NULL;
    if (!rc) rc = skv_cmv_src_of(t->st->model, &src);
    if (!rc) rc = skv_cmv_payload(&src, dict, dict ? t->tier.dict_n : 0, n->tokens, n->len, pl, &cap, P);
    free(dict);
    if (rc) {
        free(*pl);
        return store_err(t->st, rc, "cannot cheap-code node %llu (%s)", (unsigned long long)n->id, skv_status_str(rc));
    }
    double dt = skv_now() - t0;
    if (dt > 0) t->s.cm_tps = 0.8 * t->s.cm_tps + 0.2 * ((double)n->len / dt);
    t->s.cm_bpp = 0.8 * t->s.cm_bpp + 0.2 * ((double)*P / (double)n->len);
    return SKV_OK;
}

static int coded_encode(tx *t, const skv_trie_node *n, int codec, uint8_t **buf, size_t *size)
{
    uint8_t *pl;
    size_t P;
    int rc = SKV_OK;
    if (!(pl = memo_payload(t, n, codec, &P)) && (rc = cm_payload(t, n, codec, &pl, &P))) return rc;
    *size = CODED_HDR + 2u * (size_t)n->len + P + 8;
    if (!(*buf = malloc(*size))) {
        free(pl);
        return store_err(t->st, SKV_ERR_NOMEM, "out of memory");
    }
    if ((rc = coded_header(t, n, codec, P, *buf))) {
        free(pl);
        free(*buf);
        return rc;
    }
    memcpy(*buf + CODED_HDR + 2u * n->len, pl, P);
    skv_wr64(*buf + *size - 8, XXH3_64bits(*buf, *size - 8));
    free(pl);
    return SKV_OK;
}

static void tier_of(const skv_trie_node *n, tier_in *in)
{
    *in = (tier_in){n->len, n->refcount, n->flags, n->hits, n->d_end};
}

int store_node_encode(tx *t, const skv_trie_node *n, uint8_t **buf, size_t *size)
{
    struct store_tier_rec r;
    tier_in in;
    int rc = store_tier_get(t, &r);
    if (rc) return rc;
    tier_of(n, &in);
    int tier = n->len <= SPAN_MAX ? rule(t, &in) : STORE_TIER_TOKENS;
    if (tier != STORE_TIER_KV && tier != STORE_TIER_TOKENS && !on_grid(n)) tier = STORE_TIER_TOKENS;
    if (tier == STORE_TIER_CMV) return coded_encode(t, n, SKV_CODEC_CMV, buf, size);
    if (tier == STORE_TIER_CMVD) return coded_encode(t, n, SKV_CODEC_CMVD, buf, size);
    return raw_encode(t, n, buf, size);
}

/* ---- decoding ------------------------------------------------------------ */

static int coded_check(tx *t, const uint8_t *v, size_t n, uint32_t *len, uint32_t *P)
{
    skv_store *st = t->st;
    if (n < CODED_HDR + 10) return store_err(st, SKV_ERR_FORMAT, "coded node record truncated (%zu bytes)", n);
    if (v[4] != CODED_VERSION)
        return store_err(st, SKV_ERR_UNSUPPORTED, "coded node record version %u (this build reads %d)", v[4],
                         CODED_VERSION);
    *len = skv_rd32(v + 28);
    *P = skv_rd32(v + 76);
    if (*len < 1 || *len > SPAN_MAX || (uint64_t)CODED_HDR + 2ull * *len + *P + 8 != n)
        return store_err(st, SKV_ERR_FORMAT, "coded node record: sizes do not fit %zu bytes", n);
    if (XXH3_64bits(v, n - 8) != skv_rd64(v + n - 8))
        return store_err(st, SKV_ERR_FORMAT, "coded node record: checksum mismatch");
    int codec = v[5];
    uint64_t did = skv_rd64(v + 64);
    uint32_t dn = skv_rd32(v + 72);
    if ((codec != SKV_CODEC_CMV && codec != SKV_CODEC_CMVD) || (codec == SKV_CODEC_CMV && (did || dn)) ||
        (codec == SKV_CODEC_CMVD && (!did || !dn || dn > STORE_DICT_MAX)))
        return store_err(st, SKV_ERR_FORMAT, "coded node record: bad codec or dictionary fields");
    return SKV_OK;
}

/* The raw record (trie.c's codec) of a coded one whose ids are tok[]: decoding it checks
 * every field as for any raw record. */
static uint8_t *as_raw(const uint8_t *v, uint32_t len, const int32_t *tok, size_t *rn)
{
    uint8_t *r = malloc(*rn = skv_trie_node_size(len));
    if (!r) return NULL;
    memset(r, 0, 72);
    memcpy(r, "SKVN", 4);
    r[4] = 1;
    memcpy(r + 8, v + 8, 56);
    for (uint32_t i = 0; i < len; i++) {
        uint32_t u = (uint32_t)v[CODED_HDR + 2 * i] | (uint32_t)v[CODED_HDR + 2 * i + 1] << 8;
        skv_wr32(r + 72 + 4u * i, (uint32_t)tok[i]);
        skv_wrf32(r + 72 + 4u * len + 4u * i, (float)u / STORE_SUR_SCALE);
    }
    skv_wr64(r + *rn - 8, XXH3_64bits(r, *rn - 8));
    return r;
}

/* The span's ids of a checked coded record: from the memo, else decoded (and memoised). */
static int coded_ids(tx *t, const uint8_t *v, size_t n, uint32_t len, uint32_t P, int32_t *tok, skv_err *e)
{
    int32_t *dict = NULL;
    int codec = v[5], rc;
    if (memo_tokens(t->st, v, n, len, tok)) return SKV_OK;
    if (codec == SKV_CODEC_CMVD && (rc = store_dict_get(t, skv_rd64(v + 64), skv_rd32(v + 72), &dict))) {
        return skv_fail(e, rc, "%s", skv_errbox_get(t->st->err));
    }
    skv_cmv_src src;
    if ((rc = skv_cmv_src_of(t->st->model, &src))) skv_fail(e, rc, "cannot fingerprint the model's tokenizer");
    else rc = skv_cmv_payload_decode(&src, v + CODED_HDR + 2u * len, P, len, codec == SKV_CODEC_CMVD, dict,
                                     dict ? skv_rd32(v + 72) : 0, tok, NULL, e);
    free(dict);
    if (!rc) memo_add(t->st, v, n, len, P, tok);
    return rc;
}

static int coded_decode(tx *t, const uint8_t *v, size_t n, skv_trie_node *out)
{
    uint32_t len = 0, P = 0;
    int32_t *tok = NULL;
    uint8_t *raw = NULL;
    size_t rn = 0;
    skv_err e = {0};
    int rc = coded_check(t, v, n, &len, &P);
    if (rc) return t->damaged = 1, rc;
    if (!(tok = malloc((size_t)len * sizeof *tok))) rc = skv_fail(&e, SKV_ERR_NOMEM, "out of memory");
    if (!rc) rc = coded_ids(t, v, n, len, P, tok, &e);
    if (!rc && !(raw = as_raw(v, len, tok, &rn))) rc = skv_fail(&e, SKV_ERR_NOMEM, "out of memory");
    if (!rc) rc = skv_trie_node_decode(raw, rn, out, &e);
    free(tok);
    free(raw);
    if (rc && rc != SKV_ERR_NOMEM) t->damaged = 1;
    if (rc) return store_err(t->st, rc == SKV_ERR_NOMEM ? rc : SKV_ERR_FORMAT, "%s%.419s",
                             strncmp(e.msg, "store dictionary", 16) ? "coded node record: " : "", e.msg);
    return SKV_OK;
}

int store_node_decode(tx *t, const uint8_t *v, size_t n, skv_trie_node *out)
{
    skv_err e = {0};
    int rc;
    if (n >= 4 && skv_rd32(v) == CODED_MAGIC) return coded_decode(t, v, n, out);
    if ((rc = skv_trie_node_decode(v, n, out, &e))) return store_err(t->st, rc, "%.159s", e.msg);
    return SKV_OK;
}

int store_node_tier(const uint8_t *v, size_t n)
{
    if (n < CODED_HDR) return -1;
    if (skv_rd32(v) == CODED_MAGIC) return v[5] == SKV_CODEC_CMVD ? STORE_TIER_CMVD : STORE_TIER_CMV;
    if (skv_rd32(v) == RAW_MAGIC) return (v[5] & SKV_TRIE_MAT) ? STORE_TIER_KV : STORE_TIER_TOKENS;
    return -1;
}

/* ---- the rule over stored records, stats -------------------------------------------------------- */

static void header_in(const uint8_t *v, tier_in *in)
{
    uint64_t db = skv_rd64(v + 56);
    in->len = skv_rd32(v + 28);
    in->refcount = skv_rd32(v + 32);
    in->hits = skv_rd64(v + 40);
    in->flags = skv_rd32(v) == RAW_MAGIC ? v[5] : 0;
    memcpy(&in->d_end, &db, 8);
}

int store_node_want(const tx *t, const uint8_t *v)
{
    tier_in in;
    header_in(v, &in);
    return in.len <= SPAN_MAX ? rule(t, &in) : STORE_TIER_TOKENS;
}

static int count_rec(void *u, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    skv_store_stats *s = u;
    int tier = store_node_tier(v, vn);
    (void)k;
    (void)kn;
    if (tier < 0) return 0;
    s->tier_nodes[tier]++;
    s->tier_positions[tier] += skv_rd32(v + 28);
    s->tier_bytes[tier] += vn + (tier == STORE_TIER_KV ? skv_rd64(v + 64) : 0);
    return 0;
}

int store_tier_count(tx *t, skv_store_stats *s)
{
    struct store_tier_rec tr;
    int rc = store_tier_get(t, &tr);
    if (rc) return rc;
    s->price = tr.price;
    s->dict_id = tr.dict_id;
    s->dict_ids = tr.dict_n;
    return store_scan(t, TB_NODES, NULL, 0, count_rec, s);
}

static int price_tx(tx *t, void *u)
{
    struct store_tier_rec r;
    int rc = store_tier_get(t, &r);
    r.price = *(const double *)u;
    return rc ? rc : store_tier_put(t, &r);
}

int store_set_price_one(skv_store *st, double seconds_per_byte)
{
    if (!st) return SKV_ERR_INVALID_ARG;
    if (!(seconds_per_byte > 0) || !isfinite(seconds_per_byte))
        return store_err(st, SKV_ERR_INVALID_ARG, "the storage price must be a positive number of seconds per byte");
    return store_done(st, store_run(st, 1, price_tx, &seconds_per_byte));
}
