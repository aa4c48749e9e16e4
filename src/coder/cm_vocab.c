/* cm_vocab.c - the vocabulary side information of the cm model (see cm_vocab.h). */
#include "coder/cm_vocab.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "seqkv.h"

typedef struct {
    const char *p;
    size_t len;
    uint32_t id;
} by_text;

typedef struct {
    float s;
    uint32_t id;
} by_score;

/* Bytes (unsigned), a prefix first, then the id: a total order. */
static int cmp_text(const void *a, const void *b)
{
    const by_text *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Higher score first, NaN last, then the id. */
static int cmp_score(const void *a, const void *b)
{
    const by_score *x = a, *y = b;
    int xn = x->s != x->s, yn = y->s != y->s;
    if (xn != yn) return xn - yn;
    if (!xn && x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int order_by_text(skv_cm_vocab *v, const char *const *piece, const size_t *len)
{
    by_text *t = malloc((size_t)v->V * sizeof *t);
    if (!t) return SKV_ERR_NOMEM;
    for (uint32_t i = 0; i < v->V; i++) t[i] = (by_text){piece[i], len[i], i};
    qsort(t, v->V, sizeof *t, cmp_text);
    for (uint32_t r = 0; r < v->V; r++) v->id[r] = t[r].id, v->code[t[r].id] = r;
    free(t);
    return SKV_OK;
}

/* mass[coded value] = 2^32 / (rank + 16): Zipf over the score rank (the id without
 * informative scores). */
static int prior_mass(const skv_cm_vocab *v, const float *score, uint64_t *mass)
{
    int informative = 0;
    for (uint32_t i = 1; score && i < v->V && !informative; i++) informative = score[i] != score[0];
    by_score *s = informative ? malloc((size_t)v->V * sizeof *s) : NULL;
    if (informative && !s) return SKV_ERR_NOMEM;
    for (uint32_t i = 0; s && i < v->V; i++) s[i] = (by_score){score[i], i};
    if (s) qsort(s, v->V, sizeof *s, cmp_score);
    for (uint32_t r = 0; r < v->V; r++) mass[v->code[s ? s[r].id : r]] = ((uint64_t)1 << 32) / (r + 16);
    free(s);
    return SKV_OK;
}

/* prior[node] = 4096 * mass(1-branch) / mass(node), clamped to [1, 4095] (2048 when the
 * node holds no id). sum[] is the tree of masses, leaves at 2^B + value. */
static int build_prior(skv_cm_vocab *v, const float *score)
{
    size_t leaves = (size_t)1 << v->B;
    uint64_t *sum = calloc(2 * leaves, sizeof *sum);
    int rc = sum ? prior_mass(v, score, sum + leaves) : SKV_ERR_NOMEM;
    for (size_t n = leaves - 1; rc == SKV_OK && n >= 1; n--) sum[n] = sum[2 * n] + sum[2 * n + 1];
    for (size_t n = 1; rc == SKV_OK && n < leaves; n++) {
        uint64_t p = sum[n] ? sum[2 * n + 1] * 4096 / sum[n] : 2048;
        v->prior[n] = (uint16_t)(p < 1 ? 1 : p > 4095 ? 4095 : p);
    }
    free(sum);
    return rc;
}

static inline int is_boundary(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* last4, nlast, frag and boundary of one id's text. */
static void text_info(skv_cm_vocab *v, uint32_t i, const unsigned char *p, size_t len)
{
    size_t from = 0;
    uint32_t h = 0x811C9DC5u, l4 = 0;
    for (size_t k = 0; k < len; k++)
        if (is_boundary(p[k])) from = k + 1, v->boundary[i] = 1;
    for (size_t k = from; k < len; k++) h = (h ^ p[k]) * 0x01000193u;
    for (size_t k = len > 4 ? len - 4 : 0; k < len; k++) l4 = l4 << 8 | p[k];
    v->frag[i] = h;
    v->last4[i] = l4;
    v->nlast[i] = (uint8_t)(len < 4 ? len : 4);
}

static uint64_t vocab_check(const skv_cm_vocab *v)
{
    XXH64_state_t *s = XXH64_createState();
    uint64_t h = 0;
    if (!s) return 0;
    XXH64_reset(s, v->V);
    XXH64_update(s, v->id, (size_t)v->V * sizeof *v->id);
    XXH64_update(s, v->prior, ((size_t)1 << v->B) * sizeof *v->prior);
    XXH64_update(s, v->last4, (size_t)v->V * sizeof *v->last4);
    XXH64_update(s, v->nlast, v->V);
    XXH64_update(s, v->frag, (size_t)v->V * sizeof *v->frag);
    XXH64_update(s, v->boundary, v->V);
    h = XXH64_digest(s);
    XXH64_freeState(s);
    return h;
}

int skv_cm_vocab_create(uint32_t n, const char *const *piece, const size_t *len, const float *score,
                        skv_cm_vocab **out)
{
    skv_cm_vocab *v;
    if (!out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if (n < 1 || n > ((uint32_t)1 << 24) || !piece || !len) return SKV_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < n; i++)
        if (!piece[i] && len[i]) return SKV_ERR_INVALID_ARG;
    if (!(v = calloc(1, sizeof *v))) return SKV_ERR_NOMEM;
    v->V = n;
    v->B = 1;
    while (((uint32_t)1 << v->B) < n) v->B++;
    v->code = malloc((size_t)n * sizeof *v->code);
    v->id = malloc((size_t)n * sizeof *v->id);
    v->prior = calloc((size_t)1 << v->B, sizeof *v->prior);
    v->last4 = malloc((size_t)n * sizeof *v->last4);
    v->frag = malloc((size_t)n * sizeof *v->frag);
    v->nlast = malloc(n);
    v->boundary = calloc(n, 1);
    int rc = v->code && v->id && v->prior && v->last4 && v->frag && v->nlast && v->boundary ? SKV_OK : SKV_ERR_NOMEM;
    if (rc == SKV_OK) rc = order_by_text(v, piece, len);
    if (rc == SKV_OK) rc = build_prior(v, score);
    for (uint32_t i = 0; rc == SKV_OK && i < n; i++) text_info(v, i, (const unsigned char *)piece[i], len[i]);
    if (rc == SKV_OK && !(v->check = vocab_check(v))) rc = SKV_ERR_NOMEM;
    if (rc) {
        skv_cm_vocab_free(v);
        return rc;
    }
    *out = v;
    return SKV_OK;
}

uint64_t skv_cm_model_check(const skv_cm_vocab *v, unsigned rev)
{
    uint8_t b[8];
    if (rev <= 1) return v->check;
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)(v->check >> (8 * k));
    return XXH64(b, sizeof b, rev);
}

void skv_cm_vocab_free(skv_cm_vocab *v)
{
    if (!v) return;
    free(v->code);
    free(v->id);
    free(v->prior);
    free(v->last4);
    free(v->nlast);
    free(v->frag);
    free(v->boundary);
    free(v);
}
