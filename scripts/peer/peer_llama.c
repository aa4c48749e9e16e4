/* peer_llama: llama.cpp's half of the side-by-side benchmark when llama-bench is not built
 * (docs/bench.md). Times the pp and tg tests the way llama-bench defines them, through
 * llama.cpp's public C API, linked to the PREBUILT libllama of the npm package
 * @node-llama-cpp/linux-x64@3.21.1 with one CPU backend variant loaded (scripts/oracle/common.c;
 * scripts/peer/build_peer_llama.sh picks the fastest variant the CPU runs, never the AMX one):
 *
 *   peer_llama MODEL THREADS [N_PROMPT=512] [N_GEN=128] [REPS=2] [DEPTH=0]
 *
 * Context as llama-bench makes it: n_ctx = DEPTH + N_PROMPT + N_GEN, n_batch 2048, n_ubatch 512,
 * the library's defaults otherwise (F16 KV cache, flash attention auto, mmap, repacking).
 * pp: N_PROMPT random tokens (the first BOS) in one llama_decode into an empty cache.
 * tg: N_GEN single-token llama_decode calls into an empty cache. One warm-up of each first.
 * DEPTH > 0 (llama-bench's -d): both tests run after DEPTH random tokens already in the
 * cache, prefilled once untimed; each repetition removes what the last one added.
 * Prints llama-bench's CSV columns that the driver reads, and cpu_ts (N / the process's CPU
 * seconds, all threads, per repetition; llama.cpp's threads spin while they wait):
 *   n_prompt,n_gen,n_threads,avg_ts,stddev_ts,cpu_ts */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../oracle/common.h"
#include "llama.h"

struct run {
    struct llama_context *ctx;
    llama_token *tok; /* (n_prompt) */
    int n_prompt, n_gen, reps, n_vocab, bos, depth;
};

/* clock: CLOCK_MONOTONIC (wall) or CLOCK_PROCESS_CPUTIME_ID (all threads' CPU time) */
static double clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int test_pp(struct run *r)
{
    for (int i = 0; i < r->n_prompt; i++) r->tok[i] = i == 0 ? r->bos : rand() % r->n_vocab;
    if (llama_decode(r->ctx, llama_batch_get_one(r->tok, r->n_prompt))) return -1;
    llama_synchronize(r->ctx);
    return 0;
}

static int test_tg_n(struct run *r, int n)
{
    llama_token t = r->bos;
    for (int i = 0; i < n; i++) {
        if (llama_decode(r->ctx, llama_batch_get_one(&t, 1))) return -1;
        llama_synchronize(r->ctx);
        t = rand() % r->n_vocab;
    }
    return 0;
}

static int test_tg(struct run *r)
{
    return test_tg_n(r, r->n_gen);
}

/* Runs one test reps times into an empty cache; prints its CSV row. */
static int report(struct run *r, int n_p, int n_g, int threads, int (*fn)(struct run *))
{
    double sum = 0, sum2 = 0, cpu = 0;
    int n = n_p + n_g;
    for (int i = 0; i < r->reps; i++) {
        if (r->depth)
            llama_memory_seq_rm(llama_get_memory(r->ctx), 0, r->depth, -1);
        else
            llama_memory_clear(llama_get_memory(r->ctx), false);
        double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (fn(r)) return 1;
        double ts = n / (clock_s(CLOCK_MONOTONIC) - t0);
        cpu += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        sum += ts;
        sum2 += ts * ts;
    }
    double avg = sum / r->reps, var = r->reps > 1 ? (sum2 - sum * avg) / (r->reps - 1) : 0;
    printf("%d,%d,%d,%.3f,%.3f,%.3f\n", n_p, n_g, threads, avg, var > 0 ? sqrt(var) : 0, n * r->reps / cpu);
    fflush(stdout);
    return 0;
}

/* The untimed context of a depth run: DEPTH random tokens in batches of n_ubatch. */
static int fill_depth(struct run *r)
{
    llama_token *t = malloc(512 * sizeof *t);
    int rc = !t;
    llama_memory_clear(llama_get_memory(r->ctx), false);
    for (int p = 0; !rc && p < r->depth; p += 512) {
        int n = r->depth - p < 512 ? r->depth - p : 512;
        for (int i = 0; i < n; i++) t[i] = p + i == 0 ? r->bos : rand() % r->n_vocab;
        rc = llama_decode(r->ctx, llama_batch_get_one(t, n)) != 0;
    }
    llama_synchronize(r->ctx);
    free(t);
    return rc;
}

static int bench(struct llama_model *model, int threads, struct run *r)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(r->depth + r->n_prompt + r->n_gen);
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = 1;
    r->ctx = llama_init_from_model(model, cp);
    if (!r->ctx) return 1;
    printf("n_prompt,n_gen,n_threads,avg_ts,stddev_ts,cpu_ts\n");
    int rc = r->n_prompt > 0 && test_pp(r); /* warm-ups, as llama-bench does */
    if (!rc && r->n_gen > 0) rc = test_tg_n(r, 1);
    if (!rc && r->depth > 0) rc = fill_depth(r);
    if (!rc && r->n_prompt > 0) rc = report(r, r->n_prompt, 0, threads, test_pp);
    if (!rc && r->n_gen > 0) rc = report(r, 0, r->n_gen, threads, test_tg);
    llama_free(r->ctx);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: peer_llama MODEL THREADS [N_PROMPT=512] [N_GEN=128] [REPS=2] [DEPTH=0]\n");
        return 2;
    }
    struct run r = {.n_prompt = argc > 3 ? atoi(argv[3]) : 512, .n_gen = argc > 4 ? atoi(argv[4]) : 128,
                    .reps = argc > 5 ? atoi(argv[5]) : 2, .depth = argc > 6 ? atoi(argv[6]) : 0};
    int threads = atoi(argv[2]);
    if (threads < 1 || r.n_prompt < 0 || r.n_gen < 0 || r.reps < 1 || r.depth < 0 || r.depth > (1 << 20)) return 2;
    oracle_quiet_log();
    if (oracle_load_cpu_backend()) return 1;
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    r.n_vocab = llama_vocab_n_tokens(vocab);
    r.bos = llama_vocab_get_add_bos(vocab) ? llama_vocab_bos(vocab) : 0;
    r.tok = malloc((size_t)(r.n_prompt + 1) * sizeof *r.tok);
    int rc = !r.tok || bench(model, threads, &r);
    free(r.tok);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
