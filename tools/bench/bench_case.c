/* seqkv bench: one model x text case. The text, cut to one context, is run once exactly (its
 * logits, KV cache and digest kept); every representation is then a way to store that cache,
 * measured against it, followed by Corollary 5 and the store workload. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

skv_ctx *bench_new_ctx(const bench_run *r, const char *kv_quant)
{
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = (int)r->n;
    p.n_threads = (int)r->threads;
    p.kv_quant = kv_quant;
    skv_ctx *c = NULL;
    if (skv_ctx_create(r->m, &p, &c)) cli_error("cannot create a context (kv_quant '%s')", kv_quant ? kv_quant : "");
    return c;
}

/* Logits, KV and digest of the exact run; r->load is then a context holding that KV. */
static int exact_run(bench_run *r)
{
    size_t V = (size_t)r->info.n_vocab;
    skv_ctx *c = bench_new_ctx(r, NULL);
    r->kv_len = 2 * (size_t)r->info.n_layer * (size_t)r->info.n_head_kv * r->n * (size_t)r->info.head_dim;
    r->lf = malloc(r->n * V * sizeof *r->lf);
    r->kv = malloc(r->kv_len * sizeof *r->kv);
    int rc = c && r->lf && r->kv && !skv_ctx_prefill(c, r->tok, r->n, SKV_LOGITS_ALL, r->lf) &&
             !skv_ctx_kv_read(c, 0, (int)r->n, r->kv) && !skv_ctx_kv_digest(c, (int)r->n, r->digest) ? 0 : -1;
    if (rc) cli_error("the exact run failed");
    skv_ctx_free(c);
    r->load = rc ? NULL : bench_new_ctx(r, NULL);
    if (!rc && (!r->load || skv_ctx_kv_write(r->load, 0, (int)r->n, r->kv))) rc = -1;
    return rc;
}

static const char *const schemes_full[] = {"f32", "f16", "q8_0", "q4_0", "tq4", "tq3", "tq2", "tq4p", "tq3p", "tq2p", "tq3.5"};
static const char *const schemes_quick[] = {"f32", "f16", "q8_0", "q4_0", "tq3", "tq3.5"};

static int per_vector_rows(const bench_run *r, bench_case *bc, int quick, float *y)
{
    size_t ns = quick ? sizeof schemes_quick / sizeof *schemes_quick : sizeof schemes_full / sizeof *schemes_full;
    int rc = 0;
    for (size_t i = 0; !rc && i < ns; i++) {
        const char *sc = quick ? schemes_quick[i] : schemes_full[i];
        bench_progress("  %s", sc);
        rc = bench_per_vector_row(r, bc, sc, y);
    }
    return rc;
}

static int run_representations(const bench_run *r, bench_case *bc, const bench_opts *o)
{
    float *y = calloc(r->kv_len, sizeof *y); /* touched now, so no row's timing pays the page faults */
    int rc = y ? per_vector_rows(r, bc, o->quick, y) : -1;
    bench_progress("  zstd");
    if (!rc) rc = bench_zstd_row(r, bc, 0, 3, y);
    if (!rc) rc = bench_zstd_row(r, bc, 1, 3, y);
    if (!rc && !o->quick) rc = bench_zstd_row(r, bc, 1, 19, y);
    if (!rc && o->kv_files) bench_kv_codec_rows(r, bc);
    bench_progress("  .skv codecs (encode, restore, verify)");
    if (!rc) rc = bench_sequential_rows(r, bc, SKV_CODEC_TOKENS, 0);
    if (!rc) rc = bench_sequential_rows(r, bc, SKV_CODEC_MODEL, 1);
    free(y);
    return rc;
}

/* r->tok = BOS + the first tokens of the text, cut to --tokens and the model's context. */
static int case_tokens(bench_run *r, const int32_t *all, size_t n_all, const bench_opts *o)
{
    size_t n = (size_t)(o->tokens ? o->tokens : r->info.n_ctx_train);
    if (n > (size_t)r->info.n_ctx_train) n = (size_t)r->info.n_ctx_train;
    if (n > n_all + 1) n = n_all + 1;
    r->n = n;
    r->tok = malloc(n * sizeof *r->tok);
    if (!r->tok) return -1;
    r->tok[0] = r->info.bos_id;
    memcpy(r->tok + 1, all, (n - 1) * sizeof *r->tok);
    return 0;
}

/* Perplexity and cross-entropy (bits/token) of the exact run. */
static void case_entropy(const bench_run *r, bench_case *bc)
{
    cli_score sc = {0};
    double xs = 0.0;
    size_t V = (size_t)r->info.n_vocab;
    for (size_t j = 0; j + 1 < r->n; j++) {
        cli_score_row(r->lf + j * V, r->lf + j * V, r->info.n_vocab, r->tok[j + 1], &sc);
        xs += skv_token_surprisal(r->lf + j * V, r->info.n_vocab, r->tok[j + 1]);
    }
    bc->ppl = exp(sc.nll / (double)sc.n);
    bc->xent = xs / (double)(r->n - 1);
}

/* Corollary 5 and the store workload: the measurements over the whole text. */
static int whole_text(const bench_run *r, bench_case *bc, const int32_t *all, size_t n_all, const bench_opts *o)
{
    double *mean = malloc(r->n * sizeof *mean);
    bench_progress("  corollary 5 (%ld windows)", o->windows);
    int rc = mean ? bench_c5_measure(r, all, n_all, (int)o->windows, mean, &bc->c5_windows) : -1;
    if (!rc) {
        bench_c5_sample(bc, mean, r->n);
        case_entropy(r, bc);
        bench_progress("  store workload");
        rc = bench_store_workload(r, bc, all, n_all, o);
    }
    free(mean);
    return rc;
}

static void case_start(bench_case *bc, const bench_run *r, const char *mlabel, const char *tlabel)
{
    memset(bc, 0, sizeof *bc);
    snprintf(bc->model, sizeof bc->model, "%.63s", mlabel);
    snprintf(bc->text, sizeof bc->text, "%.47s", tlabel);
    bc->n = r->n;
    skv_kv_position_bytes(r->m, "f16", &bc->f16_bits);
    skv_kv_position_bytes(r->m, "tq3.5", &bc->tq35_bits);
    bc->f16_bits *= 8.0, bc->tq35_bits *= 8.0;
    bench_progress("%s x %s: %zu tokens", mlabel, tlabel, r->n);
}

static int run_case(skv_model *m, const char *mlabel, const bench_text *tx, const bench_opts *o, bench_case *bc)
{
    bench_run r = {.m = m, .threads = o->threads, .reps = o->quick ? 1 : 3};
    size_t n_all = 0;
    skv_model_get_info(m, &r.info);
    int32_t *all = cli_tokenize(m, tx->bytes, tx->len, 0, &n_all);
    int rc = -1;
    if (!all || n_all < 2 || r.info.bos_id < 0) cli_error("%s: too little text or no BOS token", tx->label);
    else rc = case_tokens(&r, all, n_all, o);
    if (!rc) {
        case_start(bc, &r, mlabel, tx->label);
        rc = exact_run(&r);
    }
    if (!rc) rc = run_representations(&r, bc, o);
    if (!rc) rc = whole_text(&r, bc, all, n_all, o);
    free(all);
    free(r.tok);
    free(r.lf);
    free(r.kv);
    skv_ctx_free(r.load);
    return rc;
}

int bench_run_all(bench_opts *o, const bench_text *tx, int n_tx, bench_case *cs, int *n_cases)
{
    cli_progress pr;
    size_t total = (size_t)o->models.n * (size_t)n_tx;
    *n_cases = 0;
    cli_progress_start(&pr, "bench");
    pr.unit = "cases";
    for (int mi = 0; mi < o->models.n; mi++) {
        skv_model *m = cli_load_model(o->models.v[mi]);
        char label[64];
        if (!m) return -1;
        bench_base_label(o->models.v[mi], label, sizeof label);
        for (int ti = 0; ti < n_tx; ti++) {
            int rc = run_case(m, label, &tx[ti], o, &cs[(*n_cases)++]);
            cli_progress_update(&pr, (size_t)*n_cases, total);
            if (rc) {
                skv_model_free(m);
                return -1;
            }
        }
        skv_model_free(m);
    }
    cli_progress_end(&pr);
    return 0;
}
