/* The server's sampling chain (src/server/sample.c): top-k keeps exactly the first k
 * candidates of the full order (logit descending, ties by id), however it selects them,
 * and the greedy and seeded draws follow from that list. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "server/srv.h"

enum { N_VOCAB = 32000 };

static uint64_t g_rng = 0x243F6A8885A308D3ull;

static uint32_t next_u32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

typedef struct ref_cand {
    float logit;
    int32_t id;
} ref_cand;

static int ref_order(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* spread values evenly over [-8, 8): a small spread gives many exact ties; distinct logits
 * differ by at least 2^-16, so their probabilities at temperature 1 are distinct floats
 * (probability order = logit order) and none underflows. */
static void fill_logits(float *l, int n, int spread)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)((int)(next_u32() % (uint32_t)spread) - spread / 2) * (16.0f / (float)spread);
}

static void sampler_job(srv_job *j, int top_k, double temp)
{
    memset(j, 0, sizeof *j);
    j->top_k = top_k, j->top_p = 1.0, j->min_p = 0.0, j->temp = temp;
    j->repeat_penalty = 1.0, j->repeat_last_n = 64, j->typ_p = 1.0;
}

/* After a draw at temperature 1 the kept candidates, by probability, are the reference's
 * first k (for k below and above the selection's cut-over to a full sort). */
static void top_k_is_the_sorted_prefix(void)
{
    static const int ks[] = {1, 2, 5, 40, 100, 3999, 4001, 31999, 32000, 40000};
    static const int spreads[] = {4, 128, 1 << 20};
    float *l = malloc(N_VOCAB * sizeof *l);
    ref_cand *r = malloc(N_VOCAB * sizeof *r);
    void *scratch = malloc(srv_sample_scratch_bytes(N_VOCAB));
    struct srv_prob *out = malloc((N_VOCAB + 1) * sizeof *out);
    CHECK(l && r && scratch && out);
    for (size_t si = 0; si < sizeof spreads / sizeof spreads[0]; si++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            srv_job j;
            srv_rng rng;
            int k = ks[ki], kept = k < N_VOCAB ? k : N_VOCAB;
            fill_logits(l, N_VOCAB, spreads[si]);
            for (int i = 0; i < N_VOCAB; i++) r[i] = (ref_cand){l[i], i};
            qsort(r, N_VOCAB, sizeof *r, ref_order);
            sampler_job(&j, k, 1.0);
            srv_rng_seed(&rng, 42);
            int32_t tok = srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch);
            int n = srv_sample_post(scratch, kept, tok, out);
            CHECK_MSG(n == kept, "k %d spread %d: %d candidates left", k, spreads[si], n);
            int found = 0;
            for (int i = 0; i < n; i++) {
                CHECK_MSG(out[1 + i].id == r[i].id, "k %d spread %d: candidate %d is %d, the full sort's %d", k,
                          spreads[si], i, out[1 + i].id, r[i].id);
                found |= out[1 + i].id == tok;
            }
            CHECK_MSG(found, "k %d: the drawn token %d is not among the kept", k, tok);
        }
    free(l), free(r), free(scratch), free(out);
}

/* Greedy with top-k: the first highest logit (the lowest id among ties). */
static void greedy_is_the_first_maximum(void)
{
    float *l = malloc(N_VOCAB * sizeof *l);
    void *scratch = malloc(srv_sample_scratch_bytes(N_VOCAB));
    CHECK(l && scratch);
    for (int round = 0; round < 20; round++) {
        srv_job j;
        srv_rng rng;
        int best = 0;
        fill_logits(l, N_VOCAB, round % 2 ? 16 : 1 << 12);
        for (int i = 1; i < N_VOCAB; i++) best = l[i] > l[best] ? i : best;
        sampler_job(&j, round % 3 ? 40 : 0, 0.0);
        srv_rng_seed(&rng, 7);
        CHECK_EQ_INT(srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch), best);
    }
    free(l), free(scratch);
}

/* The same seed and logits give the same token whatever k's selection path. */
static void seeded_draws_repeat(void)
{
    float *l = malloc(N_VOCAB * sizeof *l);
    void *scratch = malloc(srv_sample_scratch_bytes(N_VOCAB));
    CHECK(l && scratch);
    fill_logits(l, N_VOCAB, 256);
    for (int k = 1; k <= 64; k *= 2) {
        srv_job j;
        srv_rng a, b;
        sampler_job(&j, k, 0.8);
        srv_rng_seed(&a, 1234), srv_rng_seed(&b, 1234);
        for (int step = 0; step < 50; step++) {
            int32_t x = srv_sample(l, N_VOCAB, &j, NULL, 0, &a, scratch);
            int32_t y = srv_sample(l, N_VOCAB, &j, NULL, 0, &b, scratch);
            CHECK_MSG(x == y, "k %d step %d: %d then %d", k, step, x, y);
        }
    }
    free(l), free(scratch);
}

/* The survivors' ids after a draw (srv_sample_post), sorted by id, into ids; their count. */
static int survivors(const void *scratch, int32_t tok, int32_t *ids)
{
    static struct srv_prob out[N_VOCAB + 1];
    int n = srv_sample_post(scratch, N_VOCAB, tok, out);
    for (int i = 0; i < n; i++) ids[i] = out[1 + i].id;
    for (int i = 1; i < n; i++) /* insertion sort: n is small here */
        for (int k = i; k > 0 && ids[k - 1] > ids[k]; k--) {
            int32_t t = ids[k];
            ids[k] = ids[k - 1], ids[k - 1] = t;
        }
    return n;
}

typedef struct typ_ref {
    double d;
    int at;
} typ_ref;

static int typ_ref_order(const void *a, const void *b)
{
    const typ_ref *x = a, *y = b;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return x->at - y->at;
}

/* Locally typical sampling's survivors from first principles, in double: the candidates by
 * |-ln p - H| ascending, the fewest whose mass passes p (at least min_keep); ids sorted. */
static int typical_reference(const float *l, int n, double p, int min_keep, int32_t *ids)
{
    double max = l[0], sum = 0, h = 0, cum = 0;
    double *pr = malloc((size_t)n * sizeof *pr);
    typ_ref *k = malloc((size_t)n * sizeof *k);
    for (int i = 1; i < n; i++) max = l[i] > max ? l[i] : max;
    for (int i = 0; i < n; i++) sum += pr[i] = exp((double)l[i] - max);
    for (int i = 0; i < n; i++) pr[i] /= sum, h -= pr[i] > 0 ? pr[i] * log(pr[i]) : 0;
    for (int i = 0; i < n; i++) k[i] = (typ_ref){fabs(-log(pr[i]) - h), i};
    qsort(k, (size_t)n, sizeof *k, typ_ref_order);
    int m = n;
    for (int i = 0; i < n; i++)
        if ((cum += pr[k[i].at]) > p && i + 1 >= min_keep) {
            m = i + 1;
            break;
        }
    for (int i = 0; i < m; i++) ids[i] = k[i].at;
    for (int i = 1; i < m; i++)
        for (int q = i; q > 0 && ids[q - 1] > ids[q]; q--) {
            int32_t t = ids[q];
            ids[q] = ids[q - 1], ids[q - 1] = t;
        }
    free(pr), free(k);
    return m;
}

/* typical_p keeps the reference's set (logits spread so that no two candidates' distances
 * are within float rounding of each other: the float and double orders agree), min_keep
 * holds, p >= 1 keeps everything. */
static void typical_p_keeps_the_typical_set(void)
{
    enum { N = 4096 };
    static float l[N];
    static int32_t got[N_VOCAB], want[N];
    void *scratch = malloc(srv_sample_scratch_bytes(N));
    static const double ps[] = {0.05, 0.3, 0.7, 0.95, 1.0};
    CHECK(scratch);
    for (int sharp = 1; sharp <= 16; sharp *= 16) /* a flat distribution, then a peaked one */
    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++)
        for (int mk = 0; mk <= 50; mk += 50) {
            for (int i = 0; i < N; i++) l[i] = ((float)(i % 97) * 0.071f + (float)(i / 97) * 0.0013f - 3.0f) * (float)sharp;
            srv_job j;
            srv_rng rng;
            sampler_job(&j, 0, 1.0);
            j.typ_p = ps[pi], j.min_keep = mk, j.min_p = 0.0;
            srv_rng_seed(&rng, 7);
            int32_t tok = srv_sample(l, N, &j, NULL, 0, &rng, scratch);
            int n = survivors(scratch, tok, got);
            int m = ps[pi] >= 1.0 ? N : typical_reference(l, N, ps[pi], mk, want);
            CHECK_MSG(n == m, "typical_p %.2f min_keep %d sharpness %d: %d kept, the reference %d", ps[pi], mk, sharp, n, m);
            CHECK_MSG(n < m || ps[pi] >= 1.0 || !memcmp(got, want, (size_t)m * sizeof *got),
                      "typical_p %.2f: another set", ps[pi]);
            CHECK(n >= mk);
        }
    free(scratch);
}

/* The chain's order ("samplers"): temperature before top-k leaves top-k's set as it is,
 * temperature 0 first leaves one candidate (the first maximum); an empty chain draws from
 * the whole vocabulary; ignore_eos never picks the end token, even when it is the
 * maximum; min_keep holds top-p open. */
static void sampler_order_and_options(void)
{
    float *l = malloc(N_VOCAB * sizeof *l);
    void *scratch = malloc(srv_sample_scratch_bytes(N_VOCAB));
    static int32_t ids[N_VOCAB];
    srv_job j;
    srv_rng rng;
    CHECK(l && scratch);
    fill_logits(l, N_VOCAB, 4096);
    sampler_job(&j, 7, 2.0);
    j.samplers[0] = SRV_SMP_TEMP, j.samplers[1] = SRV_SMP_TOP_K, j.n_samplers = 2;
    srv_rng_seed(&rng, 1);
    CHECK_EQ_INT(survivors(scratch, srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch), ids), 7);
    j.temp = 0.0;
    int32_t first = srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch);
    CHECK_EQ_INT(survivors(scratch, first, ids), 1);
    sampler_job(&j, 7, 0.0);
    CHECK_EQ_INT(srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch), first); /* the default chain: the same greedy pick */
    j.samplers[0] = SRV_SMP_NOOP, j.n_samplers = 1, j.temp = 1.0;
    CHECK_EQ_INT(survivors(scratch, srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch), ids), N_VOCAB);
    sampler_job(&j, 0, 0.0);
    j.ignore_eos = 1, j.eos_id = first;
    CHECK(srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch) != first);
    sampler_job(&j, 0, 1.0);
    j.top_p = 1e-6, j.min_p = 0.0, j.min_keep = 9;
    CHECK_EQ_INT(survivors(scratch, srv_sample(l, N_VOCAB, &j, NULL, 0, &rng, scratch), ids), 9);
    free(l), free(scratch);
}

int main(void)
{
    TEST_BEGIN("test_sample");
    RUN(top_k_is_the_sorted_prefix);
    RUN(greedy_is_the_first_maximum);
    RUN(seeded_draws_repeat);
    RUN(typical_p_keeps_the_typical_set);
    RUN(sampler_order_and_options);
    TEST_END();
}
