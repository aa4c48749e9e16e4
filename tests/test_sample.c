/* The server's sampling chain (src/server/sample.c): top-k keeps exactly the first k
 * candidates of the full order (logit descending, ties by id), however it selects them,
 * and the greedy and seeded draws follow from that list. */
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
    j->repeat_penalty = 1.0, j->repeat_last_n = 64;
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

int main(void)
{
    TEST_BEGIN("test_sample");
    RUN(top_k_is_the_sorted_prefix);
    RUN(greedy_is_the_first_maximum);
    RUN(seeded_draws_repeat);
    TEST_END();
}
