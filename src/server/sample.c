/* Sampling (greedy at temperature 0, else temperature + top-k + top-p with a per-request
 * seeded generator), the UTF-8 rules of streamed text, and stop strings.
 *
 * Streamed text is released up to j->safe only: never a cut UTF-8 character, and never
 * a tail that could still grow into a stop string (so a client never sees part of one).
 * safe only grows: a held tail is either released by the next bytes or cut with its stop. */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

typedef struct scored {
    float logit;
    int32_t id;
} scored;

/* xorshift64*: a small generator whose stream is fixed by the request's seed. */
static uint64_t rng_u64(srv_rng *r)
{
    uint64_t x = r->s ? r->s : 0x2545F4914F6CDD1Dull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

size_t srv_sample_scratch_bytes(int n_vocab) { return (size_t)n_vocab * sizeof(scored); }

static int by_logit(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t argmax(const float *logits, int n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int32_t srv_sample(const float *logits, int n_vocab, const srv_job *j, srv_rng *rng, void *scratch)
{
    scored *c = scratch;
    if (j->temp <= 0.0 || j->top_k == 1) return argmax(logits, n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) c[i] = (scored){logits[i], i};
    qsort(c, (size_t)n_vocab, sizeof *c, by_logit);
    int k = j->top_k > 0 && j->top_k < n_vocab ? j->top_k : n_vocab;
    double *w = malloc((size_t)k * sizeof *w), total = 0.0, kept = 0.0;
    if (!w) return c[0].id;
    for (int i = 0; i < k; i++) total += w[i] = exp(((double)c[i].logit - (double)c[0].logit) / j->temp);
    int m = 0;
    while (m < k && (m == 0 || kept < j->top_p * total)) kept += w[m++];
    double u = (double)(rng_u64(rng) >> 11) * 0x1.0p-53 * kept;
    int32_t pick = c[m - 1].id;
    for (int i = 0; i < m; i++) {
        if ((u -= w[i]) < 0.0) {
            pick = c[i].id;
            break;
        }
    }
    free(w);
    return pick;
}

/* Length of the UTF-8 character at p (n bytes left): 1..4 when valid, 0 when invalid,
 * -1 when cut short (valid so far). Same rules as jansson: no overlong forms, surrogates
 * or values above U+10FFFF. */
static int utf8_len(const unsigned char *p, size_t n)
{
    int len = p[0] < 0x80 ? 1 : p[0] < 0xC2 ? 0 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : p[0] < 0xF5 ? 4 : 0;
    if (len <= 1) return len;
    uint32_t v = p[0] & (0x7Fu >> len);
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3Fu);
        if (i == 1 && len == 3 && (v < 0x20 || (v >= 0x360 && v < 0x380))) return 0; /* overlong, surrogate */
        if (i == 1 && len == 4 && (v < 0x10 || v > 0x10F)) return 0;                   /* overlong, > U+10FFFF */
    }
    return len;
}

size_t srv_utf8_complete(const char *text, size_t len)
{
    const unsigned char *t = (const unsigned char *)text;
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        if ((t[len - back] & 0xC0) == 0x80) continue;
        return utf8_len(t + len - back, back) < 0 ? len - back : len;
    }
    return len;
}

char *srv_utf8_valid(const char *s, size_t n, size_t *out_len)
{
    char *o = malloc(n * 3 + 1);
    size_t at = 0;
    if (!o) return NULL;
    for (size_t i = 0; i < n;) {
        int l = utf8_len((const unsigned char *)s + i, n - i);
        if (l > 0) {
            memcpy(o + at, s + i, (size_t)l);
            at += (size_t)l;
            i += (size_t)l;
        } else {
            memcpy(o + at, "\xEF\xBF\xBD", 3);
            at += 3;
            i++;
        }
    }
    o[at] = 0;
    if (out_len) *out_len = at;
    return o;
}

static int text_add(srv_job *j, const char *p, size_t n)
{
    if (j->len + n + 1 > j->cap) {
        size_t cap = (j->len + n + 1) * 2;
        char *t = realloc(j->text, cap);
        if (!t) return -1;
        j->text = t;
        j->cap = cap;
    }
    memcpy(j->text + j->len, p, n);
    j->len += n;
    j->text[j->len] = 0;
    return 0;
}

/* The longest tail of the text that is a proper prefix of a stop string. */
static size_t stop_hold(const srv_job *j)
{
    size_t hold = 0;
    for (int s = 0; s < j->n_stop; s++) {
        size_t sl = strlen(j->stop[s]);
        for (size_t k = sl - 1 < j->len ? sl - 1 : j->len; k > hold; k--)
            if (!memcmp(j->text + j->len - k, j->stop[s], k)) hold = k;
    }
    return hold;
}

static const char *find(const char *hay, size_t n, const char *needle, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(hay + i, needle, k)) return hay + i;
    return NULL;
}

/* Cuts the text at the first stop string that ends in the bytes from `from` on; 1 = cut. */
static int stop_cut(srv_job *j, size_t from)
{
    for (int s = 0; s < j->n_stop; s++) {
        size_t sl = strlen(j->stop[s]), lo = from >= sl ? from - sl + 1 : 0;
        if (j->len < sl) continue;
        const char *hit = find(j->text + lo, j->len - lo, j->stop[s], sl);
        if (!hit) continue;
        j->len = (size_t)(hit - j->text);
        j->text[j->len] = 0;
        memcpy(j->stopping_word, j->stop[s], sl + 1);
        return 1;
    }
    return 0;
}

int srv_job_append(srv_job *j, const skv_model *m, int32_t tok)
{
    char piece[256];
    size_t n = 0;
    if (skv_token_piece(m, tok, piece, sizeof piece, &n)) n = 0;
    pthread_mutex_lock(&j->mu);
    size_t from = j->len;
    int stop = text_add(j, piece, n) ? 1 : stop_cut(j, from);
    if (!stop) {
        size_t safe = srv_utf8_complete(j->text, j->len - stop_hold(j));
        if (safe > j->safe) j->safe = safe;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return stop;
}
