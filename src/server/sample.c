/* Sampling as llama-server samples: its default chain (logit biases, repetition penalties, top-k, top-p,
 * min-p, temperature, then a draw), each step in llama.cpp's order of float operations, the
 * draw from std::mt19937 seeded with the request's seed (core/mt19937.h); temperature 0 is
 * greedy. The exponentials are core/detmath's rounded to float, so a seed gives the same
 * tokens on every machine, and on llama-server's logits the tokens llama-server picks.
 * Also the UTF-8 rules of streamed text, and stop strings.
 *
 * Streamed text is released up to j->safe only: never a cut UTF-8 character, and never
 * a tail that could still grow into a stop string (so a client never sees part of one).
 * safe only grows: a held tail is either released by the next bytes or cut with its stop. */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "core/detmath.h"
#include "core/mt19937.h"
#include "server/srv.h"

/* One candidate token, as llama.cpp's llama_token_data. */
typedef struct cand {
    float logit, p;
    int32_t id;
} cand;

/* The candidates left, and whether they are sorted by logit, highest first. */
typedef struct cands {
    cand *c;
    size_t n;
    int sorted;
} cands;

/* The scratch: the count of candidates the last srv_sample left (for post-sampling
 * probabilities), then the candidates, then the penalties' counts. */
#define SCRATCH_HEAD 16
static cand *scratch_cands(void *scratch) { return (cand *)(void *)((char *)scratch + SCRATCH_HEAD); }

size_t srv_sample_scratch_bytes(int n_vocab) { return SCRATCH_HEAD + (size_t)n_vocab * (sizeof(cand) + sizeof(int32_t)); }

void srv_rng_seed(srv_rng *r, uint64_t seed) { skv_mt_seed(&r->mt, (uint32_t)(seed - 1)); }

/* expf / logf without libm: the deterministic double functions rounded to float, the same
 * on every machine (glibc's expf may differ in the last bit between its code paths). */
static float exp_f(float x) { return (float)skv_det_exp((double)x); }
static float log_f(float x) { return (float)skv_det_log((double)x); }

static int by_logit(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void sort_all(cands *s)
{
    if (!s->sorted) qsort(s->c, s->n, sizeof *s->c, by_logit);
    s->sorted = 1;
}

/* The repetition penalties over the last repeat_last_n tokens of hist, as llama.cpp applies
 * them: each token seen is divided (positive logit) or multiplied (negative) by
 * repeat_penalty once, and lowered by count x frequency_penalty + presence_penalty.
 * count: n_vocab zeros on entry and on return. */
static float penalty(float l, const srv_job *j, int32_t count)
{
    float rp = (float)j->repeat_penalty;
    l = l > 0.0f ? l / rp : l * rp;
    return l - (float)((double)count * j->frequency_penalty + j->presence_penalty);
}

static void penalize(cands *s, const srv_job *j, const int32_t *hist, size_t n_hist, int32_t *count)
{
    size_t n = j->repeat_last_n < 0 || (size_t)j->repeat_last_n > n_hist ? n_hist : (size_t)j->repeat_last_n;
    if (!n || (j->repeat_penalty == 1.0 && j->frequency_penalty == 0.0 && j->presence_penalty == 0.0)) return;
    const int32_t *h = hist + n_hist - n; /* hist may be NULL when n_hist is 0 */
    cand *c = s->c;
    for (size_t i = 0; i < n; i++) count[h[i]]++;
    /* by id: after another sampler (samplers) the candidates are a subset in any order */
    for (size_t i = 0; i < s->n; i++)
        if (count[c[i].id]) c[i].logit = penalty(c[i].logit, j, count[c[i].id]);
    for (size_t i = 0; i < n; i++) count[h[i]] = 0;
}

/* Heap of the k best candidates seen, the worst (the last in by_logit's order) at the root:
 * moves h[i] down to its place. */
static void sift_down(cand *h, size_t k, size_t i)
{
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && by_logit(&h[l], &h[w]) > 0) w = l;
        if (r < k && by_logit(&h[r], &h[w]) > 0) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w], h[w] = t;
        i = w;
    }
}

/* The k first candidates of by_logit's order, sorted, in front: exactly what sorting all n
 * and keeping k gives (the order is total: ties go by id), in O(n log k) instead of
 * O(n log n). A vocabulary of 32,000 with llama-server's default k = 40 was sorted whole
 * for every generated token, a third of a small model's serving time. */
static void top_k(cands *s, int k)
{
    size_t kk = (size_t)k;
    if (k <= 0) return;
    if (s->sorted || kk * 8 >= s->n) { /* little to skip: sort everything */
        sort_all(s);
        if (kk < s->n) s->n = kk;
        return;
    }
    for (size_t i = kk / 2; i-- > 0;) sift_down(s->c, kk, i);
    for (size_t i = kk; i < s->n; i++)
        if (by_logit(&s->c[i], &s->c[0]) < 0) {
            s->c[0] = s->c[i];
            sift_down(s->c, kk, 0);
        }
    s->n = kk;
    qsort(s->c, s->n, sizeof *s->c, by_logit);
    s->sorted = 1;
}

/* p of every candidate: a float softmax, in llama.cpp's order of operations. */
static void softmax(cands *s)
{
    float max = s->c[0].logit, sum = 0.0f;
    for (size_t i = 1; !s->sorted && i < s->n; i++) max = s->c[i].logit > max ? s->c[i].logit : max;
    for (size_t i = 0; i < s->n; i++) sum += s->c[i].p = exp_f(s->c[i].logit - max);
    for (size_t i = 0; i < s->n; i++) s->c[i].p /= sum;
}

static void top_p(cands *s, float p, size_t min_keep)
{
    float cum = 0.0f;
    if (p >= 1.0f) return;
    softmax(s);
    sort_all(s);
    for (size_t i = 0; i < s->n; i++)
        if ((cum += s->c[i].p) >= p && i + 1 >= min_keep) {
            s->n = i + 1;
            return;
        }
}

static void min_p(cands *s, float p, size_t min_keep)
{
    if (p <= 0.0f) return;
    if (!s->sorted) { /* llama.cpp keeps the order of an unsorted list, when that keeps min_keep */
        float max = s->c[0].logit;
        size_t kept = 0;
        for (size_t i = 1; i < s->n; i++) max = s->c[i].logit > max ? s->c[i].logit : max;
        float floor = max + log_f(p);
        for (size_t i = 0; i < s->n; i++) kept += s->c[i].logit >= floor;
        if (kept && kept >= min_keep) {
            kept = 0;
            for (size_t i = 0; i < s->n; i++)
                if (s->c[i].logit >= floor) s->c[kept++] = s->c[i];
            s->n = kept;
            return;
        }
        sort_all(s);
    }
    float floor = s->c[0].logit + log_f(p);
    size_t i = 1;
    while (i < s->n && (s->c[i].logit >= floor || i < min_keep)) i++;
    s->n = i;
}

/* Locally typical sampling (Meister et al.): the candidates ordered by how far their
 * surprisal -ln p lies from the entropy H of the distribution, nearest first, and the
 * fewest of them whose probabilities sum past p kept (at least min_keep). The softmax runs
 * over the list sorted by logit, so its float sums go in llama.cpp's order; ties of the
 * distance go by the sorted position (a total order: the same list on every machine). */
typedef struct typ_key {
    float d;
    uint32_t at;
} typ_key;

static int by_distance(const void *a, const void *b)
{
    const typ_key *x = a, *y = b;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

static void typical(cands *s, float p, size_t min_keep)
{
    if (p >= 1.0f || s->n < 2) return;
    sort_all(s);
    softmax(s);
    typ_key *k = malloc(s->n * sizeof *k);
    cand *kept = malloc(s->n * sizeof *kept);
    if (!k || !kept) { /* out of memory: the list unfiltered (the draw still works) */
        free(k), free(kept);
        return;
    }
    float h = 0.0f, cum = 0.0f;
    for (size_t i = 0; i < s->n; i++) h += -s->c[i].p * log_f(s->c[i].p);
    for (size_t i = 0; i < s->n; i++) k[i] = (typ_key){fabsf(-log_f(s->c[i].p) - h), (uint32_t)i};
    qsort(k, s->n, sizeof *k, by_distance);
    size_t n = s->n;
    for (size_t i = 0; i < s->n; i++)
        if ((cum += s->c[k[i].at].p) > p && (min_keep == 0 || i + 1 >= min_keep)) {
            n = i + 1;
            break;
        }
    for (size_t i = 0; i < n; i++) kept[i] = s->c[k[i].at];
    memcpy(s->c, kept, n * sizeof *kept);
    s->n = n;
    s->sorted = 0;
    free(k), free(kept);
}

/* Temperature at its place in the chain: the logits divided by it, or, at 0, the first
 * highest candidate alone (llama.cpp sets the others to -infinity; the draw then picks it). */
static void temperature(cands *s, double temp)
{
    if (temp > 0.0) {
        for (size_t i = 0; i < s->n; i++) s->c[i].logit /= (float)temp;
        return;
    }
    size_t best = 0;
    for (size_t i = 1; i < s->n; i++) best = s->c[i].logit > s->c[best].logit ? i : best;
    s->c[0] = s->c[best];
    s->n = 1;
    s->sorted = 1;
}

/* llama-server's sampler names and characters ("samplers": names, or one string of
 * characters). dry, top_n_sigma and xtc are steps whose parameters seqkv refuses unless
 * they leave them no-ops (complete.c), so in a chain they are no-ops; infill and
 * adaptive_p are not implemented (refused). */
static const struct sampler_name {
    const char *name;
    int code; /* SRV_SMP_*, or -1: not implemented */
    char chr;
} k_samplers[] = {
    {"penalties", SRV_SMP_PENALTIES, 'e'}, {"dry", SRV_SMP_NOOP, 'd'},   {"top_n_sigma", SRV_SMP_NOOP, 's'},
    {"top_k", SRV_SMP_TOP_K, 'k'},         {"typ_p", SRV_SMP_TYP_P, 'y'}, {"top_p", SRV_SMP_TOP_P, 'p'},
    {"min_p", SRV_SMP_MIN_P, 'm'},         {"xtc", SRV_SMP_NOOP, 'x'},    {"temperature", SRV_SMP_TEMP, 't'},
    {"infill", -1, 'i'},                   {"adaptive_p", -1, 'a'},
};
#define N_SAMPLER_NAMES (sizeof k_samplers / sizeof *k_samplers)

/* name (len bytes) in any case as a canonical name, its kebab-case ("top-k") or no-dash
 * ("topk") form, or an alias (nucleus, temp, typ): its row, or NULL. */
static const struct sampler_name *sampler_named(const char *name, size_t len)
{
    static const struct { const char *alias, *name; } aliases[] = {{"nucleus", "top_p"}, {"temp", "temperature"}, {"typ", "typ_p"}};
    char low[32], kebab[32], flat[32];
    if (len >= sizeof low) return NULL;
    for (size_t i = 0; i < len; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    low[len] = 0;
    for (size_t a = 0; a < sizeof aliases / sizeof *aliases; a++)
        if (!strcmp(low, aliases[a].alias)) return sampler_named(aliases[a].name, strlen(aliases[a].name));
    for (size_t k = 0; k < N_SAMPLER_NAMES; k++) {
        size_t m = 0, n = strlen(k_samplers[k].name);
        for (size_t i = 0; i <= n; i++) {
            char ch = k_samplers[k].name[i];
            kebab[i] = ch == '_' ? '-' : ch;
            if (ch != '_') flat[m++] = ch;
        }
        if (!strcmp(low, k_samplers[k].name) || !strcmp(low, kebab) || !strcmp(low, flat)) return &k_samplers[k];
    }
    return NULL;
}

static int sampler_add(const struct sampler_name *r, const char *what, size_t len, uint8_t *out, int *n, skv_err *err)
{
    if (!r) return skv_fail(err, SKV_ERR_INVALID_ARG, "samplers: unknown sampler \"%.*s\" (names: penalties, dry, top_n_sigma, "
                            "top_k, typ_p, top_p, min_p, xtc, temperature; or characters ekyptmdsx)", (int)(len > 32 ? 32 : len), what);
    if (r->code < 0) return skv_fail(err, SKV_ERR_INVALID_ARG, "samplers: \"%s\" is not supported by seqkv serve", r->name);
    if (*n >= SRV_MAX_SAMPLERS) return skv_fail(err, SKV_ERR_INVALID_ARG, "samplers: more than %d", SRV_MAX_SAMPLERS);
    out[(*n)++] = (uint8_t)r->code;
    return 0;
}

const char *srv_sampler_name(int code)
{
    for (size_t k = 0; k < N_SAMPLER_NAMES; k++)
        if (k_samplers[k].code == code && code != SRV_SMP_NOOP) return k_samplers[k].name;
    return NULL;
}

int srv_samplers_add_name(const char *name, size_t len, uint8_t *out, int *n, skv_err *err)
{
    return sampler_add(sampler_named(name, len), name, len, out, n, err);
}

int srv_samplers_parse(const char *text, char sep, uint8_t *out, int *n, skv_err *err)
{
    *n = 0;
    for (const char *p = text; *p;) {
        const struct sampler_name *r = NULL;
        size_t len = 1;
        if (sep) {
            len = strcspn(p, (char[]){sep, 0});
            r = sampler_named(p, len);
        } else {
            for (size_t k = 0; k < N_SAMPLER_NAMES && !r; k++) r = k_samplers[k].chr == *p ? &k_samplers[k] : NULL;
        }
        if (len && sampler_add(r, p, len, out, n, err)) return -1;
        p += len;
        if (sep && *p == sep) p++;
    }
    return 0;
}

const uint8_t srv_default_samplers[SRV_N_DEFAULT_SAMPLERS] = {SRV_SMP_PENALTIES, SRV_SMP_TOP_K, SRV_SMP_TYP_P,
                                                              SRV_SMP_TOP_P, SRV_SMP_MIN_P, SRV_SMP_TEMP};

/* The draw: a float softmax summed in double, the first candidate whose running sum reaches
 * the uniform draw times the total. */
static int32_t draw(cands *s, srv_rng *rng)
{
    float max = s->c[0].logit;
    double sum = 0.0, run = 0.0;
    for (size_t i = 1; i < s->n; i++) max = s->c[i].logit > max ? s->c[i].logit : max;
    for (size_t i = 0; i < s->n; i++) sum += s->c[i].p = exp_f(s->c[i].logit - max);
    double target = sum * skv_mt_uniform(&rng->mt);
    for (size_t i = 0; i < s->n; i++)
        if ((run += s->c[i].p) >= target) return s->c[i].id;
    return s->c[s->n - 1].id;
}

int32_t srv_sample(const float *logits, int n_vocab, const srv_job *j, const int32_t *hist, size_t n_hist, srv_rng *rng,
                   void *scratch)
{
    cands s = {scratch_cands(scratch), (size_t)n_vocab, 0};
    int32_t *count = (int32_t *)(void *)(s.c + n_vocab);
    size_t *left = scratch;
    for (int32_t i = 0; i < n_vocab; i++) s.c[i] = (cand){logits[i], 0.0f, i};
    for (size_t i = 0; i < j->n_bias; i++) s.c[j->bias[i].id].logit += j->bias[i].bias; /* llama.cpp: first */
    if (j->ignore_eos && j->eos_id >= 0 && j->eos_id < n_vocab) s.c[j->eos_id].logit = -INFINITY; /* as its -inf bias */
    const uint8_t *chain = j->n_samplers ? j->samplers : srv_default_samplers;
    size_t n_chain = j->n_samplers ? (size_t)j->n_samplers : SRV_N_DEFAULT_SAMPLERS, keep = (size_t)j->min_keep;
    for (size_t k = 0; k < n_chain; k++) switch (chain[k]) {
        case SRV_SMP_PENALTIES: penalize(&s, j, hist, n_hist, count); break;
        case SRV_SMP_TOP_K: top_k(&s, j->top_k); break;
        case SRV_SMP_TYP_P: typical(&s, (float)j->typ_p, keep); break;
        case SRV_SMP_TOP_P: top_p(&s, (float)j->top_p, keep); break;
        case SRV_SMP_MIN_P: min_p(&s, (float)j->min_p, keep); break;
        case SRV_SMP_TEMP: temperature(&s, j->temp); break;
        default: break; /* a sampler whose parameters leave it a no-op (dry, xtc, top_n_sigma) */
        }
    if (s.n == 1) { /* greedy (or one left): it alone, certain; the generator still draws, as llama.cpp's */
        skv_mt_uniform(&rng->mt);
        s.c[0].p = 1.0f;
        *left = 1;
        return s.c[0].id;
    }
    int32_t tok = draw(&s, rng);
    *left = s.n;
    return tok;
}

static int prob_above(struct srv_prob a, struct srv_prob b)
{
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
}

int srv_sample_post(const void *scratch, int n, int32_t tok, struct srv_prob *out)
{
    size_t left = *(const size_t *)scratch;
    const cand *c = (const cand *)(const void *)((const char *)scratch + SCRATCH_HEAD);
    double sum = 0.0;
    for (size_t i = 0; i < left; i++) sum += (double)c[i].p;
    out[0] = (struct srv_prob){tok, 0.0f};
    int k = 0;
    for (size_t i = 0; i < left; i++) { /* out[1..k]: the n most probable, highest first (ties: lower id) */
        struct srv_prob e = {c[i].id, sum > 0 ? (float)((double)c[i].p / sum) : 0.0f};
        if (e.id == tok) out[0].logprob = e.logprob;
        int at;
        if (k < n) at = ++k;
        else if (n > 0 && prob_above(e, out[n])) at = n;
        else continue;
        out[at] = e;
        for (; at > 1 && prob_above(out[at], out[at - 1]); at--) {
            struct srv_prob t = out[at];
            out[at] = out[at - 1], out[at - 1] = t;
        }
    }
    return k;
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
    if (j->tok_end && j->n_gen) j->tok_end[j->n_gen - 1] = j->len; /* one token a stream chunk (n_probs) */
    if (!stop) {
        size_t safe = srv_utf8_complete(j->text, j->len - stop_hold(j));
        if (safe > j->safe) j->safe = safe;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return stop;
}
