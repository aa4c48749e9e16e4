/* n-gram chunk index, span finding, candidate scoring and the selective-recompute plan
 * (near.h, docs/near.md). Pure: sequences in memory, no LMDB, no model. */
#include "store/near.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

#define NEAR_CANDS 4 /* donors planned in full: the sequences sharing the most g-grams */

typedef struct near_ent {
    uint32_t seq, pos, next; /* next: index + 1 of the next entry in the bucket, 0 = end */
} near_ent;

struct near_index {
    const near_seq *seqs;
    size_t n_seqs;
    int g;
    near_ent *ent;
    size_t n_ent;
    uint32_t *head; /* [mask + 1] index + 1 of the bucket's first entry */
    size_t mask;
};

static uint64_t gram_hash(const int32_t *t, int g)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < g; i++) h = (h ^ (uint32_t)t[i]) * 0x100000001B3ull, h ^= h >> 29;
    return h;
}

static size_t count_grams(const near_seq *seqs, size_t n_seqs, int g)
{
    size_t k = 0;
    for (size_t s = 0; s < n_seqs; s++) k += seqs[s].n >= (size_t)g ? seqs[s].n - (size_t)g + 1 : 0;
    return k;
}

int near_index_build(const near_seq *seqs, size_t n_seqs, int g, near_index **out)
{
    near_index *ix;
    size_t k = count_grams(seqs, n_seqs, g), nb = 16;
    *out = NULL;
    if (g < 2 || (n_seqs && !seqs) || k >= UINT32_MAX || n_seqs >= UINT32_MAX) return SKV_ERR_INVALID_ARG;
    while (nb < 2 * k) nb *= 2;
    if (!(ix = calloc(1, sizeof *ix))) return SKV_ERR_NOMEM;
    *ix = (near_index){.seqs = seqs, .n_seqs = n_seqs, .g = g, .mask = nb - 1};
    ix->ent = malloc((k ? k : 1) * sizeof *ix->ent);
    ix->head = calloc(nb, sizeof *ix->head);
    if (!ix->ent || !ix->head) {
        near_index_free(ix);
        return SKV_ERR_NOMEM;
    }
    for (size_t s = 0; s < n_seqs; s++)
        for (size_t p = 0; p + (size_t)g <= seqs[s].n; p++) {
            size_t b = gram_hash(seqs[s].tok + p, g) & ix->mask;
            ix->ent[ix->n_ent] = (near_ent){(uint32_t)s, (uint32_t)p, ix->head[b]};
            ix->head[b] = (uint32_t)++ix->n_ent;
        }
    *out = ix;
    return SKV_OK;
}

void near_index_free(near_index *ix)
{
    if (!ix) return;
    free(ix->ent);
    free(ix->head);
    free(ix);
}

void near_plan_free(near_plan *p)
{
    if (!p) return;
    free(p->spans);
    free(p->act);
    free(p->src);
    memset(p, 0, sizeof *p);
}

/* Length of the common run of a[0..na) and b[0..nb). */
static size_t common_len(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* ---- candidates ---------------------------------------------------------- */

/* Adds one to hits[seq] for every stored g-gram equal to one of q's. */
static void count_hits(const near_index *ix, const int32_t *q, size_t n, uint32_t *hits)
{
    int g = ix->g;
    for (size_t i = 0; i + (size_t)g <= n; i++)
        for (uint32_t e = ix->head[gram_hash(q + i, g) & ix->mask]; e; e = ix->ent[e - 1].next) {
            const near_ent *en = &ix->ent[e - 1];
            if (!memcmp(ix->seqs[en->seq].tok + en->pos, q + i, (size_t)g * sizeof *q)) hits[en->seq]++;
        }
}

/* The k sequences with the most hits (ties: the first), plus any sharing q's first token. */
static size_t top_cands(const near_index *ix, const uint32_t *hits, const int32_t *q, size_t *cand)
{
    size_t k = 0;
    for (size_t s = 0; s < ix->n_seqs; s++) {
        if (!hits[s] && !(ix->seqs[s].n && ix->seqs[s].tok[0] == q[0])) continue;
        size_t j;
        if (k < NEAR_CANDS) j = k++;
        else if (hits[s] > hits[cand[NEAR_CANDS - 1]]) j = NEAR_CANDS - 1;
        else continue;
        while (j > 0 && hits[cand[j - 1]] < hits[s]) cand[j] = cand[j - 1], j--;
        cand[j] = s;
    }
    return k;
}

/* ---- spans --------------------------------------------------------------- */

/* The longest donor run starting at q[i] among the stored g-grams equal to q[i..i+g)
 * (ties: the previous span's delta, then the smallest |delta|). 0 when none. */
static size_t longest_at(const near_index *ix, size_t d, const int32_t *q, size_t n, size_t i, long prev_delta,
                         size_t *s0)
{
    const near_seq *s = &ix->seqs[d];
    size_t best = 0;
    long best_d = 0;
    for (uint32_t e = ix->head[gram_hash(q + i, ix->g) & ix->mask]; e; e = ix->ent[e - 1].next) {
        const near_ent *en = &ix->ent[e - 1];
        if (en->seq != d) continue;
        size_t L = common_len(q + i, n - i, s->tok + en->pos, s->n - en->pos);
        long dl = (long)i - (long)en->pos;
        int better = L > best || (L == best && L && dl != best_d &&
                                  (dl == prev_delta || (best_d != prev_delta && labs(dl) < labs(best_d))));
        if (L >= (size_t)ix->g && better) best = L, best_d = dl, *s0 = en->pos;
    }
    return best;
}

static int push_span(near_plan *p, size_t *cap, uint32_t q0, uint32_t s0, uint32_t len)
{
    if (p->n_spans == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        near_span *ns = realloc(p->spans, nc * sizeof *ns);
        if (!ns) return SKV_ERR_NOMEM;
        p->spans = ns, *cap = nc;
    }
    p->spans[p->n_spans++] = (near_span){q0, s0, len};
    return SKV_OK;
}

/* Greedy left to right: the common prefix first (exact), then at each position the longest
 * donor run, else one position left to compute. */
static int find_spans(const near_index *ix, size_t d, const int32_t *q, size_t n, near_plan *p)
{
    const near_seq *s = &ix->seqs[d];
    size_t cap = 0, i = common_len(q, n, s->tok, s->n), s0 = 0;
    long prev = 0;
    int rc = i ? push_span(p, &cap, 0, 0, (uint32_t)i) : SKV_OK;
    p->n_exact = (uint32_t)i;
    while (!rc && i + (size_t)ix->g <= n) {
        size_t L = longest_at(ix, d, q, n, i, prev, &s0);
        if (!L) { i++; continue; }
        rc = push_span(p, &cap, (uint32_t)i, (uint32_t)s0, (uint32_t)L);
        prev = (long)i - (long)s0;
        i += L;
    }
    return rc;
}

/* Marks the plan's actions from its spans: the exact prefix, seam_k computed positions at
 * the start of every other span, the rest of it reused approximately; the last position
 * of q is always computed (its logits predict what follows). */
static void mark(near_plan *p, int seam_k)
{
    for (size_t i = 0; i < p->n; i++) p->act[i] = NEAR_COMPUTE, p->src[i] = -1;
    for (size_t k = 0; k < p->n_spans; k++) {
        const near_span *sp = &p->spans[k];
        int exact = sp->q0 == 0 && sp->s0 == 0;
        for (uint32_t j = 0; j < sp->len; j++) {
            int seam = !exact && (int)j < seam_k;
            p->act[sp->q0 + j] = seam ? NEAR_COMPUTE : exact ? NEAR_EXACT : NEAR_APPROX;
            p->src[sp->q0 + j] = seam ? -1 : (int32_t)(sp->s0 + j);
            p->n_seam += seam;
        }
    }
    if (p->n && p->act[p->n - 1] != NEAR_COMPUTE) {
        p->n_exact -= p->act[p->n - 1] == NEAR_EXACT;
        p->act[p->n - 1] = NEAR_COMPUTE, p->src[p->n - 1] = -1;
    }
    for (size_t i = 0; i < p->n; i++) p->n_approx += p->act[i] == NEAR_APPROX;
}

/* score = the donor's surprisal over the reused positions (the information they share, the
 * d_T of the spans) - the bits of the computed ones, priced at the donor's mean surprisal. */
static void score(near_plan *p, const near_seq *s)
{
    double tot = 0.0, shared = 0.0;
    for (size_t j = 0; j < s->n; j++) tot += s->sur[j];
    double mean = s->n > 1 ? tot / (double)(s->n - 1) : 0.0;
    uint32_t computed = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->act[i] == NEAR_COMPUTE) computed++;
        else shared += s->sur[p->src[i]];
    }
    p->shared_bits = shared;
    p->score = shared - mean * computed;
}

static int plan_one(const near_index *ix, size_t d, const int32_t *q, size_t n, int seam_k, near_plan *p)
{
    int rc;
    memset(p, 0, sizeof *p);
    p->donor = d, p->n = (uint32_t)n;
    p->act = malloc(n);
    p->src = malloc(n * sizeof *p->src);
    if (!p->act || !p->src) rc = SKV_ERR_NOMEM;
    else if (!(rc = find_spans(ix, d, q, n, p))) {
        mark(p, seam_k);
        score(p, &ix->seqs[d]);
    }
    if (rc) near_plan_free(p);
    return rc;
}

int near_best(const near_index *ix, const int32_t *q, size_t n, int seam_k, near_plan *out)
{
    size_t cand[NEAR_CANDS], k;
    uint32_t *hits;
    int rc = SKV_OK, found = 0;
    memset(out, 0, sizeof *out);
    if (!ix || !q || !n || n >= UINT32_MAX) return SKV_ERR_INVALID_ARG;
    if (!(hits = calloc(ix->n_seqs ? ix->n_seqs : 1, sizeof *hits))) return SKV_ERR_NOMEM;
    count_hits(ix, q, n, hits);
    k = top_cands(ix, hits, q, cand);
    for (size_t c = 0; c < k && !rc; c++) {
        near_plan p;
        if ((rc = plan_one(ix, cand[c], q, n, seam_k, &p))) break;
        if (found && p.score <= out->score) { near_plan_free(&p); continue; }
        near_plan_free(out);
        *out = p, found = 1;
    }
    free(hits);
    if (!rc && found && out->n_exact + out->n_approx < (uint32_t)ix->g) {
        near_plan_free(out); /* fewer positions to reuse than one n-gram: not worth a donor restore */
        found = 0;
    }
    if (rc) near_plan_free(out);
    return rc ? rc : found ? SKV_OK : 1;
}

/* ---- selective recompute ------------------------------------------------- */

/* Deviation estimate of reusing position i of a span aligned with delta d (q0: its start):
 * how much of what it attended to in the donor is different now. Every earlier position j
 * before the span whose token differs from the donor's under this alignment counts with
 * weight 1 / (i - j): attention is mostly local, and the first positions after a seam see
 * the changed context closest (CacheBlend's observation). Cheap: tokens only, no model. */
static double deviation(const near_seq *s, const int32_t *q, size_t i, size_t q0, long d)
{
    double dev = 0.0;
    for (size_t j = 0; j < q0; j++) {
        long sj = (long)j - d;
        if (sj < 0 || (size_t)sj >= s->n || s->tok[sj] != q[j]) dev += 1.0 / (double)(i - j);
    }
    return dev;
}

typedef struct dev_pos {
    double dev;
    uint32_t pos;
} dev_pos;

static int by_dev(const void *a, const void *b)
{
    const dev_pos *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? 1 : -1;
    return x->pos > y->pos ? 1 : x->pos < y->pos ? -1 : 0; /* deterministic order */
}

/* The APPROX positions with their deviation estimates (n_out of them). */
static dev_pos *approx_devs(const near_plan *p, const near_seq *donor, const int32_t *q, size_t *n_out)
{
    dev_pos *v = malloc((p->n_approx ? p->n_approx : 1) * sizeof *v);
    size_t k = 0;
    if (!v) return NULL;
    for (size_t s = 0; s < p->n_spans; s++) {
        const near_span *sp = &p->spans[s];
        long d = (long)sp->q0 - (long)sp->s0;
        for (uint32_t j = 0; j < sp->len; j++)
            if (p->act[sp->q0 + j] == NEAR_APPROX)
                v[k++] = (dev_pos){deviation(donor, q, sp->q0 + j, sp->q0, d), sp->q0 + j};
    }
    *n_out = k;
    return v;
}

void near_select(near_plan *p, const near_seq *donor, const int32_t *q, double fraction)
{
    size_t computed = p->n - p->n_exact - p->n_approx, n_dev = 0;
    double want = ceil((fraction < 0 ? 0 : fraction > 1 ? 1 : fraction) * (double)p->n);
    if ((double)computed >= want || !p->n_approx) return;
    dev_pos *v = approx_devs(p, donor, q, &n_dev);
    if (!v) { /* out of memory: recompute every approximate position (exact, slower) */
        for (size_t i = 0; i < p->n; i++)
            if (p->act[i] == NEAR_APPROX) p->act[i] = NEAR_COMPUTE, p->src[i] = -1, p->n_extra++;
        p->n_approx = 0;
        return;
    }
    qsort(v, n_dev, sizeof *v, by_dev);
    for (size_t k = 0; k < n_dev && (double)computed < want; k++, computed++) {
        p->act[v[k].pos] = NEAR_COMPUTE, p->src[v[k].pos] = -1;
        p->n_extra++, p->n_approx--;
    }
    free(v);
}

/* Measured by bench/bench_near.c on its three workloads with kjv-4m (bench/results/near.md,
 * near.csv): the worst instance's mean KL (nats) over the continuation at each recompute
 * fraction, times 2 as a margin. A target picks the smallest fraction whose bound is below
 * it; a target below every bound recomputes everything (exact). Another model needs its
 * own calibration: run bench_near with it. */
static const struct {
    double fraction, kl;
} calib[] = {{0.0, 1.6e-4}, {0.1, 1.3e-4}, {0.15, 1.2e-4}, {0.2, 1.1e-4}, {0.3, 8.4e-5}, {0.5, 5.6e-5}};

double near_fraction_for_kl(double kl)
{
    for (size_t i = 0; i < sizeof calib / sizeof *calib; i++)
        if (calib[i].kl <= kl) return calib[i].fraction;
    return 1.0;
}
