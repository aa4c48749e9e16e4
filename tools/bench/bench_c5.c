/* seqkv bench: Corollary 5, the per-position surprisal vs context length, averaged over
 * disjoint windows of the text (window 0 is the exact run; docs/bench.md). */
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

/* Adds the surprisal of each position 1..n-1 of tok (logits lg: n x V) to mean[]. */
static void add_surprisal(const bench_run *r, const float *lg, const int32_t *tok, double *mean)
{
    size_t V = (size_t)r->info.n_vocab;
    for (size_t p = 1; p < r->n; p++) mean[p] += skv_token_surprisal(lg + (p - 1) * V, r->info.n_vocab, tok[p]);
}

/* Window w >= 1: BOS + the text's tokens from w x (n-1) on, run from an empty cache. */
static int window_logits(const bench_run *r, skv_ctx *c, const int32_t *all, int w, int32_t *win, float *lg)
{
    size_t step = r->n - 1;
    win[0] = r->tok[0];
    memcpy(win + 1, all + (size_t)w * step, step * sizeof *win);
    skv_ctx_truncate(c, 0);
    return skv_ctx_prefill(c, win, r->n, SKV_LOGITS_ALL, lg) ? -1 : 0;
}

/* Mean surprisal of each position over `windows` windows of n tokens (BOS + text) of all[]. */
int bench_c5_measure(const bench_run *r, const int32_t *all, size_t n_all, int windows, double *mean, int *used)
{
    size_t n = r->n, V = (size_t)r->info.n_vocab, step = n - 1;
    float *lg = malloc(n * V * sizeof *lg);
    int32_t *win = malloc(n * sizeof *win);
    skv_ctx *c = lg && win ? bench_new_ctx(r, NULL) : NULL;
    int rc = c ? 0 : -1, w = 0;
    for (size_t i = 0; i < n; i++) mean[i] = 0.0;
    for (; !rc && w < windows && (size_t)(w + 1) * step <= n_all; w++) {
        if (w == 0) add_surprisal(r, r->lf, r->tok, mean);
        else if (!(rc = window_logits(r, c, all, w, win, lg))) add_surprisal(r, lg, win, mean);
    }
    for (size_t p = 1; w && p < n; p++) mean[p] /= w;
    *used = w;
    skv_ctx_free(c);
    free(lg);
    free(win);
    return rc;
}

/* Sample points: 1, 2, 4, ... up to n/16, then every n/16 (n-1 last). */
void bench_c5_sample(bench_case *bc, const double *mean, size_t n)
{
    int Ls[BENCH_MAX_C5], k = 0;
    size_t B = n / 16 ? n / 16 : 1;
    for (size_t L = 1; L < B && k < 48; L *= 2) Ls[k++] = (int)L;
    for (size_t L = B; L < n - 1 && k < BENCH_MAX_C5 - 1; L += B) Ls[k++] = (int)L;
    Ls[k++] = (int)(n - 1);
    double sum = 0.0;
    int prev = 0;
    for (int i = 0; i < k; i++) {
        double bucket = 0.0;
        for (int p = prev + 1; p <= Ls[i]; p++) bucket += mean[p];
        sum += bucket;
        bc->c5[i] = (c5_point){.L = Ls[i], .p_bits = bucket / (Ls[i] - prev), .run_mean = sum / Ls[i]};
        prev = Ls[i];
    }
    bc->n_c5 = k;
}
