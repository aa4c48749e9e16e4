/* peer_seqkv: seqkv's half of the side-by-side benchmark with llama.cpp (make bench-peer,
 * docs/bench.md). Times what llama-bench's pp and tg tests time, through the public API:
 *
 *   peer_seqkv MODEL THREADS [N_PROMPT=512] [N_GEN=128] [REPS=2] [DEPTH=0] [KV=f32|f16]
 *
 * DEPTH > 0 (llama-bench's -d): both tests run after DEPTH tokens already in the cache, one
 * untimed prefill; each repetition truncates back to DEPTH (the context holds DEPTH more
 * positions). KV: the context's
 * kv_cache_type (f16: K and V stored as binary16, llama.cpp's default cache type).
 * pp: one skv_ctx_prefill of N_PROMPT tokens into an empty cache (logits of the last only).
 * tg: N_GEN skv_ctx_decode calls, one token each, into an empty cache (logits every step).
 * Tokens are pseudo-random ids (llama-bench also feeds ids, not text). Before timing, one
 * decode touches every weight once (llama-bench's warm-up does the same). The context holds
 * N_PROMPT + N_GEN positions. Prints one CSV row per test:
 *   seqkv,TEST,THREADS,N,REPS,AVG_TS,STDEV_TS,CPU_TS
 * AVG_TS and STDEV_TS: llama-bench's, the mean and stddev over the repetitions of N / wall
 * seconds; CPU_TS: N / the process's CPU seconds (all threads) per repetition. Peak RSS is measured around
 * the whole process by the driver (scripts/peer/bench_peer.py), for both engines alike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seqkv.h"

struct run {
    skv_ctx *c;
    int32_t *tok;   /* (n_prompt + n_gen) pseudo-random token ids */
    float *logits;  /* (n_vocab) */
    int n_prompt, n_gen, reps, depth, kv_type;
};

/* clock: CLOCK_MONOTONIC (wall) or CLOCK_PROCESS_CPUTIME_ID (all threads' CPU time) */
static double clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill_tokens(int32_t *tok, int n, int n_vocab)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        tok[i] = (int32_t)(s % (uint64_t)n_vocab);
    }
}

/* One repetition of a test into an empty cache -> 0, or -1 on error. */
static int run_pp(struct run *r)
{
    skv_ctx_truncate(r->c, r->depth); /* keeps the untimed prefix of bench() */
    return skv_ctx_prefill(r->c, r->tok, (size_t)r->n_prompt, SKV_LOGITS_LAST, r->logits) ? -1 : 0;
}

static int run_tg(struct run *r)
{
    skv_ctx_truncate(r->c, r->depth); /* keeps the untimed prefix of bench() */
    for (int i = 0; i < r->n_gen; i++)
        if (skv_ctx_decode(r->c, r->tok[r->n_prompt + i], r->logits)) return -1;
    return 0;
}

/* Times reps repetitions: wall tokens/s (mean, stddev) and tokens per CPU-second of the
 * process (all threads; on a shared machine the one that a busy neighbour moves least). */
static int report(struct run *r, const char *name, int n, int threads, int (*fn)(struct run *))
{
    double sum = 0, sum2 = 0, cpu = 0;
    for (int i = 0; i < r->reps; i++) {
        double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (fn(r)) {
            fprintf(stderr, "peer_seqkv: %s: %s\n", name, skv_ctx_last_error(r->c));
            return 1;
        }
        double ts = n / (clock_s(CLOCK_MONOTONIC) - t0);
        cpu += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        sum += ts;
        sum2 += ts * ts;
    }
    double avg = sum / r->reps, var = r->reps > 1 ? (sum2 - sum * avg) / (r->reps - 1) : 0;
    printf("seqkv,%s%d,%d,%d,%d,%.3f,%.3f,%.3f\n", name, n, threads, n, r->reps, avg,
           var > 0 ? sqrt(var) : 0, n * r->reps / cpu);
    fflush(stdout);
    return 0;
}

static int bench(const skv_model *m, int threads, struct run *r)
{
    skv_ctx_params p = skv_ctx_default_params();
    p.n_threads = threads;
    p.n_ctx = r->n_prompt + r->n_gen + r->depth;
    p.kv_cache_type = r->kv_type;
    if (skv_ctx_create(m, &p, &r->c)) {
        fprintf(stderr, "peer_seqkv: cannot create a context\n");
        return 1;
    }
    int rc = skv_ctx_decode(r->c, r->tok[0], r->logits) != SKV_OK; /* warm-up */
    if (!rc && r->depth > 0) { /* untimed: the tokens after the pp and tg ones */
        skv_ctx_truncate(r->c, 0);
        rc = skv_ctx_prefill(r->c, r->tok + r->n_prompt + r->n_gen, (size_t)r->depth, SKV_LOGITS_NONE, NULL) != SKV_OK;
    }
    if (!rc && r->n_prompt > 0) rc = report(r, "pp", r->n_prompt, threads, run_pp);
    if (!rc && r->n_gen > 0) rc = report(r, "tg", r->n_gen, threads, run_tg);
    skv_ctx_free(r->c);
    return rc;
}

int main(int argc, char **argv)
{
    char err[256];
    skv_model *m;
    skv_model_info info;
    if (argc < 3) {
        fprintf(stderr, "usage: peer_seqkv MODEL THREADS [N_PROMPT=512] [N_GEN=128] [REPS=2] [DEPTH=0] [KV=f32|f16]\n");
        return 2;
    }
    struct run r = {.n_prompt = argc > 3 ? atoi(argv[3]) : 512, .n_gen = argc > 4 ? atoi(argv[4]) : 128,
                    .reps = argc > 5 ? atoi(argv[5]) : 2, .depth = argc > 6 ? atoi(argv[6]) : 0,
                    .kv_type = argc > 7 && !strcmp(argv[7], "f16") ? SKV_KV_CACHE_F16 : SKV_KV_CACHE_F32};
    int threads = atoi(argv[2]);
    if (threads < 1 || r.n_prompt < 0 || r.n_gen < 0 || r.reps < 1 || r.depth < 0 || r.depth > (1 << 20) ||
        (argc > 7 && strcmp(argv[7], "f16") && strcmp(argv[7], "f32")))
        return 2;
    if (skv_model_load(argv[1], NULL, &m, err, sizeof err)) {
        fprintf(stderr, "peer_seqkv: %s\n", err);
        return 1;
    }
    skv_model_get_info(m, &info);
    r.tok = malloc((size_t)(r.n_prompt + r.n_gen + r.depth + 1) * sizeof *r.tok);
    r.logits = malloc((size_t)info.n_vocab * sizeof *r.logits);
    int rc = !r.tok || !r.logits;
    if (!rc) {
        fill_tokens(r.tok, r.n_prompt + r.n_gen + r.depth + 1, info.n_vocab);
        rc = bench(m, threads, &r);
    }
    free(r.tok);
    free(r.logits);
    skv_model_free(m);
    return rc;
}
