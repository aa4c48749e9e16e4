/* Engine throughput: prefill and decode tokens/s at 1 and 2 threads, peak RSS.
 * Usage: bench_engine MODEL [n_prompt=512] [n_decode=256] [reps=5] [auto]
 * With "auto" only the fastest kernels at 1 and 2 threads run (real model sizes, where the
 * scalar and quantized-KV rows would take minutes).
 * Prefill: one batch of n_prompt tokens into an empty cache (like llama-bench pp512).
 * Decode: n_decode tokens one by one into an empty cache (like llama-bench tg). Best of reps.
 * Prints Markdown table rows: | model | kernels | threads | prefill tok/s | decode tok/s | peak RSS MiB | */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "seqkv.h"
#include "core/util.h"

static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

int main(int argc, char **argv)
{
    char err[256];
    skv_model *m;
    skv_model_info info;
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [n_prompt] [n_decode] [reps]\n", argv[0]);
        return 2;
    }
    int n_prompt = argc > 2 ? atoi(argv[2]) : 512, n_dec = argc > 3 ? atoi(argv[3]) : 256;
    int reps = argc > 4 ? atoi(argv[4]) : 5, n_configs = argc > 5 && !strcmp(argv[5], "auto") ? 1 : 5;
    if (skv_model_load(argv[1], NULL, &m, err, sizeof err)) {
        fprintf(stderr, "bench_engine: %s\n", err);
        return 1;
    }
    skv_model_get_info(m, &info);
    if (n_prompt > info.n_ctx_train) n_prompt = info.n_ctx_train;
    if (n_dec > info.n_ctx_train) n_dec = info.n_ctx_train;
    if (n_dec < 1 || n_prompt < 1) {
        fprintf(stderr, "bench_engine: context too small\n");
        return 1;
    }
    int32_t *tok = malloc((size_t)(n_prompt + n_dec) * sizeof *tok);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < n_prompt + n_dec; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        tok[i] = (int32_t)(s % (uint64_t)info.n_vocab);
    }
    /* kernels x threads, then the AVX2 path with a quantized KV cache (attention over it) */
    const char *kname[] = {"auto", "scalar", "auto", "auto", "auto"};
    const char *kvq[] = {NULL, NULL, "kv=q8_0", "kv=tq4", "k=tq4,v=tq3,window=64"};
    for (int kk = 0; kk < n_configs; kk++)
        for (int threads = 1; threads <= 2; threads++) {
            skv_ctx_params p = skv_ctx_default_params();
            if (kk >= 2 && threads == 2) continue;
            p.kv_quant = kvq[kk];
            skv_ctx *c;
            double best_pf = 1e30, best_dec = 1e30;
            p.n_threads = threads;
            p.kernels = kk == 1 ? SKV_KERNELS_SCALAR : SKV_KERNELS_AUTO;
            if (skv_ctx_create(m, &p, &c)) return 1;
            int r_used = kk == 1 ? 1 : reps;
            for (int r = 0; r < r_used; r++) {
                skv_ctx_truncate(c, 0);
                double t0 = skv_now();
                skv_ctx_prefill(c, tok, (size_t)n_prompt, SKV_LOGITS_LAST, logits);
                double t1 = skv_now();
                skv_ctx_truncate(c, 0);
                for (int i = 0; i < n_dec; i++) skv_ctx_decode(c, tok[n_prompt + i], logits);
                double t2 = skv_now();
                if (t1 - t0 < best_pf) best_pf = t1 - t0;
                if (t2 - t1 < best_dec) best_dec = t2 - t1;
            }
            printf("| %s | %s%s%s | %d | %.1f | %.2f | %.1f |\n", info.name, kname[kk], kvq[kk] ? ", KV " : "",
                   kvq[kk] ? kvq[kk] : "", threads, n_prompt / best_pf, n_dec / best_dec, peak_rss_mib());
            fflush(stdout);
            skv_ctx_free(c);
        }
    free(tok);
    free(logits);
    skv_model_free(m);
    return 0;
}
