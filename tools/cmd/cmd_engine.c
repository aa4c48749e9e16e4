/* seqkv generate | perplexity | info | kv-dump | tokenize */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Options of the commands below (each table uses the fields it needs). */
typedef struct {
    const char *model, *prompt, *file, *out, *logits, *kv_quant, *codec;
    long n_predict, ctx, threads, seed, top_k;
    double temp, top_p;
    int f16, truncate, no_bos, kv_cache;
} opts;

#define F(x) offsetof(opts, x)

static skv_ctx *make_ctx_q(const skv_model *m, long n_ctx, long threads, const char *kv_quant)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = (int)n_ctx;
    p.n_threads = (int)threads;
    p.kv_quant = kv_quant;
    int rc = skv_ctx_create(m, &p, &c);
    if (rc) cli_error("cannot create a context of %ld positions: %s", n_ctx, skv_status_str(rc));
    return c;
}

static skv_ctx *make_ctx(const skv_model *m, long n_ctx, long threads) { return make_ctx_q(m, n_ctx, threads, NULL); }

/* The text of -p TEXT or of -f FILE (malloc'ed; *len its length), NULL after a message. */
static char *text_of(const opts *o, size_t *len)
{
    if (o->file) return cli_read_file(o->file, len);
    *len = strlen(o->prompt);
    char *t = malloc(*len + 1);
    if (t) memcpy(t, o->prompt, *len + 1);
    else cli_error("out of memory");
    return t;
}

static void print_piece(const skv_model *m, int32_t tok)
{
    char buf[256];
    size_t len = 0;
    if (skv_model_token_piece(m, tok, buf, sizeof buf, &len) == SKV_OK) fwrite(buf, 1, len, stdout);
}

/* ---- generate ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    double p;
    int32_t id;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* How many of the sorted candidates top-k and top-p keep (at least one). */
static int kept(const cand *buf, int n, double z, const opts *o)
{
    int keep = o->top_k > 0 && o->top_k < n ? (int)o->top_k : n;
    double acc = 0.0;
    for (int i = 0; i < keep; i++) {
        acc += buf[i].p / z;
        if (acc >= o->top_p) return i + 1;
    }
    return keep;
}

/* Greedy (ties: lowest id) at temp 0, else temperature + top-k + nucleus sampling. */
static int32_t sample(const float *logits, int n, const opts *o, uint64_t *rng, cand *buf)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->temp <= 0.0) return best;
    double z = 0.0, mass = 0.0;
    for (int i = 0; i < n; i++) {
        buf[i].id = i;
        buf[i].p = exp(((double)logits[i] - (double)logits[best]) / o->temp);
        z += buf[i].p;
    }
    qsort(buf, (size_t)n, sizeof *buf, cand_cmp);
    int keep = kept(buf, n, z, o);
    for (int i = 0; i < keep; i++) mass += buf[i].p;
    double u = (double)(rng_next(rng) >> 11) * 0x1.0p-53 * mass;
    for (int i = 0; i < keep; i++) {
        u -= buf[i].p;
        if (u < 0.0) return buf[i].id;
    }
    return buf[keep - 1].id;
}

static const cli_opt gen_opts[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_PROMPT(F(prompt), "the prompt"),
    CLI_OPT_FILE(F(file), "FILE", "read the prompt from FILE ('-' = stdin) instead of -p"),
    {"n-predict", 'n', CLI_INT, "N", -1, 1 << 24, F(n_predict), "tokens to generate (default 128; -1 = until the\n"
                                                                "end-of-sequence token or a full context)"},
    {"predict", 0, CLI_INT, "N", -1, 1 << 24, F(n_predict), NULL},
    {"temp", 0, CLI_FLOAT, "T", 0, 100, F(temp), "temperature; 0 (default) = greedy"},
    {"top-k", 0, CLI_INT, "K", 0, 1 << 24, F(top_k), "sample among the K most likely tokens only (default 0 = all)"},
    {"top-p", 0, CLI_FLOAT, "P", 0, 1, F(top_p), "nucleus sampling mass (default 0.95)"},
    {"seed", 's', CLI_INT, "S", 0, (double)LONG_MAX, F(seed), "sampling seed (default 42); same seed, same text"},
    CLI_OPT_CTX(F(ctx), 2, "context in positions (default: the model's)"),
    CLI_OPT_THREADS(F(threads)),
    CLI_OPT_OUTPUT(F(out), "OUT.skv", "also store the session (prompt + generation) as it is generated:\n"
                                      "the .skv encoder is the inference loop's context (docs/format.md)"),
    {"codec", 0, CLI_STR, "CODEC", 0, 0, F(codec), "codec of OUT.skv (default model; 'seqkv compress --help' lists them)"},
    {"kv-cache", 0, CLI_CHOICE, "f32|f16", 0, 0, F(kv_cache),
     "KV cache type (default f32; f16: binary16, half the memory; recorded in OUT.skv)"},
    {0},
};

static const cli_cmd gen_cmd = {
    "generate", "[-m MODEL] (-p PROMPT | -f FILE) [-n N] [--temp T] [--top-k K] [--top-p P]\n"
                "[-s SEED] [-c N] [-t N] [-o OUT.skv [--codec CODEC]] [--kv-cache f32|f16]\n",
    "Generates up to N tokens after the prompt and prints the prompt and the text (stdout);\n"
    "stops at the end-of-sequence token or when the context is full.\n", gen_opts, 0,
    "With -o, a line on stderr reports the stored session's size.\n"};

/* The context a generation runs in: a plain one, or a .skv encoder's when the session is
 * stored (same logits either way: the encoder runs the same engine). */
typedef struct {
    skv_ctx *ctx;
    skv_encoder *enc;
} gen_sink;

static int sink_open(gen_sink *g, skv_model *m, const opts *o)
{
    if (!o->out) {
        skv_ctx_params p = skv_ctx_default_params();
        p.n_ctx = (int)o->ctx;
        p.n_threads = (int)o->threads;
        p.kv_cache_type = o->kv_cache;
        int rc = skv_ctx_create(m, &p, &g->ctx);
        if (rc) cli_error("cannot create a context of %ld positions: %s", o->ctx, skv_status_str(rc));
        return rc;
    }
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = skv_codec_parse(o->codec ? o->codec : "model"); /* checked by gen_check */
    ep.skip_entropy = 1; /* the loop reports the file's size, not the cross-entropy */
    ep.n_threads = (int)o->threads;
    ep.n_ctx = (int)o->ctx;
    ep.kv_cache_type = o->kv_cache;
    char err[256] = "";
    int rc = skv_encoder_create(m, &ep, &g->enc, err, sizeof err);
    if (rc) cli_error("cannot create the session encoder: %s", err[0] ? err : skv_status_str(rc));
    return rc;
}

/* Appends tokens and returns the next-token logits. */
static int sink_append(gen_sink *g, const int32_t *t, size_t n, float *logits)
{
    if (g->enc) return skv_encoder_append(g->enc, t, n, logits);
    return n == 1 ? skv_ctx_decode(g->ctx, t[0], logits) : skv_ctx_prefill(g->ctx, t, n, SKV_LOGITS_LAST, logits);
}

static const skv_ctx *sink_ctx(const gen_sink *g) { return g->enc ? skv_encoder_ctx(g->enc) : g->ctx; }

/* Writes OUT.skv (the encoder's bytes) and reports its size. */
static int sink_finish(gen_sink *g, cli_out *out)
{
    uint8_t *data = NULL;
    size_t size = 0;
    skv_encoder_stats st;
    if (!g->enc) return CLI_OK;
    skv_encoder_get_stats(g->enc, &st);
    if (skv_encoder_finish(g->enc, &data, &size)) {
        cli_error("cannot finish the session: %s", skv_encoder_last_error(g->enc));
        return CLI_FAIL;
    }
    const char *dest = out->dest;
    int ok = fwrite(data, 1, size, out->f) == size;
    free(data);
    if (!ok) cli_error("cannot write '%s': %s (check the disk has room)", dest, strerror(errno));
    if (!ok || cli_out_commit(out)) return CLI_FAIL;
    fprintf(stderr, "stored the session (%llu tokens) in %s: %zu bytes, %.2f bits/position\n",
            (unsigned long long)st.n_tokens, dest, size, 8.0 * (double)size / (double)(st.n_tokens ? st.n_tokens : 1));
    return CLI_OK;
}

static int gen_check(const opts *o)
{
    if (!o->prompt == !o->file) return cli_usage(&gen_cmd, "needs a prompt: -p TEXT or -f FILE (one of them)");
    if (o->codec && !o->out) return cli_usage(&gen_cmd, "--codec needs -o OUT.skv");
    if (o->out && !strcmp(o->out, "-")) return cli_usage(&gen_cmd, "-o - would mix the session with the text on stdout");
    char names[256];
    /* generate takes no --kv-quant, --cm-dict or --kvtc-cal: the codecs that need one are not offered */
    const skv_codec_desc *cd = o->codec ? skv_codec_desc_of(skv_codec_parse(o->codec)) : NULL;
    if (o->codec && (!cd || (cd->flags & (SKV_CODEC_F_NEEDS | SKV_CODEC_F_CAL))))
        return cli_usage(&gen_cmd, "--codec '%s' is not one of %s", o->codec,
                         cli_codec_names(names, sizeof names, 0, SKV_CODEC_F_NEEDS | SKV_CODEC_F_CAL));
    return CLI_CONTINUE;
}

/* Samples and prints tokens until -n, the end-of-sequence token or a full context. */
static void gen_loop(const opts *o, const skv_model *m, const skv_model_info *info, gen_sink *g, float *logits,
                     cand *buf)
{
    uint64_t rng = (uint64_t)o->seed;
    int n_ctx = skv_ctx_n_ctx(sink_ctx(g));
    for (long i = 0; (o->n_predict < 0 || i < o->n_predict) && skv_ctx_n_pos(sink_ctx(g)) < n_ctx; i++) {
        int32_t next = sample(logits, info->n_vocab, o, &rng, buf);
        if (next == info->eos_id) break;
        print_piece(m, next);
        fflush(stdout);
        if (sink_append(g, &next, 1, logits)) break;
    }
    putchar('\n');
    fflush(stdout);
}

static int gen_run(const opts *o, skv_model *m, const char *prompt, size_t plen, cli_out *out)
{
    skv_model_info info;
    size_t n = 0;
    gen_sink g = {NULL, NULL};
    skv_model_get_info(m, &info);
    int32_t *tok = cli_tokenize(m, prompt, plen, 1, &n);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    cand *buf = malloc((size_t)info.n_vocab * sizeof *buf);
    int rc = CLI_FAIL;
    if (!tok || !logits || !buf || sink_open(&g, m, o)) goto done;
    if ((size_t)skv_ctx_n_ctx(sink_ctx(&g)) <= n) {
        cli_error("the prompt (%zu tokens) does not fit the context of %d", n, skv_ctx_n_ctx(sink_ctx(&g)));
        goto done;
    }
    if (sink_append(&g, tok, n, logits)) goto done;
    fwrite(prompt, 1, plen, stdout);
    gen_loop(o, m, &info, &g, logits, buf);
    rc = sink_finish(&g, out);
done:
    free(tok);
    free(logits);
    free(buf);
    skv_encoder_free(g.enc);
    skv_ctx_free(g.ctx);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    opts o = {.n_predict = 128, .threads = 1, .seed = 42, .top_p = 0.95};
    int rc = cli_parse(&gen_cmd, argc, argv, &o, NULL, NULL);
    if (rc == CLI_CONTINUE) rc = gen_check(&o);
    if (rc != CLI_CONTINUE) return rc;
    cli_out out;
    size_t plen = 0;
    skv_model *m = NULL;
    char *prompt = NULL;
    rc = CLI_FAIL;
    /* passes: the prompt's prefill (a token covers a byte at least) and one per token generated */
    if (!cli_out_open(&out, o.out) && (prompt = text_of(&o, &plen)) &&
        (m = cli_load_model_sweeps(o.model, o.n_predict < 0 ? UINT64_MAX : (plen + 513) / 512 + (uint64_t)o.n_predict)))
        rc = gen_run(&o, m, prompt, plen, &out);
    if (rc) cli_out_discard(&out);
    free(prompt);
    skv_model_free(m);
    return rc;
}

/* ---- perplexity --------------------------------------------------------------------- */

static const cli_opt ppl_opts[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_FILE(F(file), "FILE", "the text ('-' = stdin)"),
    CLI_OPT_CTX(F(ctx), 1, "window length in tokens, at least 3 (default: the model's context)"),
    CLI_OPT_THREADS(F(threads)),
    {"kv-quant", 0, CLI_STR, "SPEC", 0, 0, F(kv_quant),
     "also run with the KV cache quantized as SPEC (e.g.\n"
     "\"k=tq4,v=tq3,window=64\"; docs/kvquant.md) and report, for both\n"
     "protocols, its perplexity, the mean KL divergence KL(p_full || p_quant)\n"
     "of the next-token distributions and the top-1 agreement"},
    {0},
};

static const cli_cmd ppl_cmd = {
    "perplexity", "[-m MODEL] -f FILE [-c N] [-t N] [--kv-quant SPEC]\n",
    "Reports two measures of how well the model predicts FILE:\n"
    "  (a) perplexity with llama.cpp's llama-perplexity protocol: non-overlapping windows of\n"
    "      CTX tokens (default: the model's context), the first token of each replaced by BOS,\n"
    "      only the second half of each window scored. Comparable with llama.cpp's numbers.\n"
    "  (b) cross-entropy in bits per token of the whole text coded sequentially: segments of\n"
    "      CTX-1 text tokens, each after a fresh BOS, every text token scored. This is the\n"
    "      floor that seqkv's lossless model codec reaches.\n", ppl_opts, 0, NULL};

/* One perplexity run: the full-precision context and, with --kv-quant, the quantized one. */
typedef struct {
    skv_model_info info;
    size_t ctx, n_chunk;
    skv_ctx *c, *cq;
    float *lf, *lq; /* ctx x n_vocab logits of each */
    int32_t *win;
    cli_score fa, fb, qa, qb; /* full and quantized; protocols (a) and (b) */
} ppl_run;

/* Runs [BOS] + tok[0..k) in both contexts and scores rows [from, k). */
static int ppl_window(ppl_run *r, const int32_t *tok, size_t k, size_t from, cli_score *full, cli_score *quant)
{
    int V = r->info.n_vocab;
    if (cli_bos_window(r->c, r->info.bos_id, tok, k, r->win, r->lf)) return -1;
    cli_score_rows(r->lf, r->lf, V, r->win, from, k, full);
    if (!r->cq) return 0;
    if (cli_bos_window(r->cq, r->info.bos_id, tok, k, r->win, r->lq)) return -1;
    cli_score_rows(r->lf, r->lq, V, r->win, from, k, quant);
    return 0;
}

/* (a) windows of ctx tokens of [BOS] + text, each starting with BOS, second half scored;
 * (b) segments of ctx - 1 text tokens after BOS, every token scored. */
static int ppl_protocols(ppl_run *r, const int32_t *tok, size_t n)
{
    cli_progress pr;
    r->n_chunk = (n + 1) / r->ctx;
    cli_progress_start(&pr, "perplexity (a)");
    for (size_t ch = 0; ch < r->n_chunk; ch++) {
        if (ppl_window(r, tok + ch * r->ctx, r->ctx - 1, r->ctx / 2, &r->fa, &r->qa)) return -1;
        cli_progress_update(&pr, (ch + 1) * r->ctx, r->n_chunk * r->ctx);
    }
    cli_progress_end(&pr);
    cli_progress_start(&pr, "cross-entropy (b)");
    for (size_t s0 = 0, seg = r->ctx - 1; s0 < n; s0 += seg) {
        size_t k = n - s0 < seg ? n - s0 : seg;
        if (ppl_window(r, tok + s0, k, 0, &r->fb, &r->qb)) return -1;
        cli_progress_update(&pr, s0 + k, n);
    }
    cli_progress_end(&pr);
    return 0;
}

static void ppl_report(const ppl_run *r, const opts *o, size_t len, size_t n, double secs)
{
    double ppl_a = exp(r->fa.nll / (double)r->fa.n), bits_b = r->fb.nll / log(2.0);
    printf("model: %s\ntext: %s (%zu bytes, %zu tokens)\n", r->info.name, o->file, len, n);
    if (r->n_chunk)
        printf("(a) llama.cpp protocol: perplexity %.4f over %zu windows of %zu (%zu scored tokens)\n", ppl_a,
               r->n_chunk, r->ctx, r->fa.n);
    else
        printf("(a) llama.cpp protocol: text shorter than one window of %zu tokens: not computed\n", r->ctx);
    if (n)
        printf("(b) sequential cross-entropy: %.4f bits/token (perplexity %.4f), %.4f bits/byte, %.0f bits total\n",
               bits_b / (double)n, exp2(bits_b / (double)n), len ? bits_b / (double)len : 0.0, bits_b);
    if (r->cq) {
        const cli_score *a = &r->qa, *b = &r->qb;
        printf("kv-quant %s:\n", o->kv_quant);
        if (r->n_chunk && a->n)
            printf("(a) perplexity %.4f (%+.4f), KL(full||quant) %.6f nats/token, top-1 agreement %.2f%%\n",
                   exp(a->nll / (double)a->n), exp(a->nll / (double)a->n) - ppl_a, a->kl / (double)a->n,
                   100.0 * (double)a->top1 / (double)a->n);
        if (b->n)
            printf("(b) %.4f bits/token (%+.4f), perplexity %.4f, KL(full||quant) %.6f nats/token, top-1 agreement "
                   "%.2f%%\n",
                   b->nll / log(2.0) / (double)b->n, b->nll / log(2.0) / (double)b->n - bits_b / (double)n,
                   exp(b->nll / (double)b->n), b->kl / (double)b->n, 100.0 * (double)b->top1 / (double)b->n);
    }
    printf("time: %.2f s\n", secs);
}

/* Contexts and buffers of a run; 0, or -1 after a message. */
static int ppl_setup(ppl_run *r, const skv_model *m, const opts *o)
{
    char err[256];
    size_t rows = r->ctx * (size_t)r->info.n_vocab;
    if (r->info.bos_id < 0) {
        cli_error("the model has no BOS token; both protocols start windows with BOS");
        return -1;
    }
    if (o->kv_quant && skv_kv_quant_check(o->kv_quant, m, err, sizeof err)) {
        cli_error("%s", err);
        return -1;
    }
    r->lf = malloc(rows * sizeof *r->lf);
    r->lq = o->kv_quant ? malloc(rows * sizeof *r->lq) : NULL;
    r->win = malloc(r->ctx * sizeof *r->win);
    if (!r->lf || !r->win || (o->kv_quant && !r->lq)) {
        cli_error("out of memory (%zu x %d logits)", r->ctx, r->info.n_vocab);
        return -1;
    }
    if (o->kv_quant && !(r->cq = make_ctx_q(m, (long)r->ctx, o->threads, o->kv_quant))) return -1;
    return (r->c = make_ctx(m, (long)r->ctx, o->threads)) ? 0 : -1;
}

/* The text to score; NULL after a message (an empty text has nothing to score). */
static char *ppl_text(const char *path, size_t *len)
{
    char *text = cli_read_file(path, len);
    if (text && !*len) {
        cli_error("'%s' is empty: there is nothing to score (give a non-empty text)", path);
        free(text);
        text = NULL;
    }
    return text;
}

int cmd_perplexity(int argc, char **argv)
{
    opts o = {.threads = 1};
    int rc = cli_parse(&ppl_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (!o.file) return cli_usage(&ppl_cmd, "needs a text file (-f FILE)");
    if (o.ctx && o.ctx < 3)
        return cli_usage(&ppl_cmd, "-c %ld leaves protocol (a) no token to score (it scores the second half of each "
                                   "window after BOS): give -c 3 or more", o.ctx);
    size_t len = 0, n = 0;
    char *text = ppl_text(o.file, &len);
    if (!text) return CLI_FAIL;
    uint64_t sweeps = cli_text_sweeps(o.file, 0, o.ctx); /* per protocol and context: (a), (b), each quantized */
    skv_model *m = cli_load_model_sweeps(o.model, sweeps > UINT64_MAX / 4 ? UINT64_MAX : sweeps * (o.kv_quant ? 4 : 2));
    int32_t *tok = m ? cli_tokenize(m, text, len, 0, &n) : NULL; /* text tokens; BOS added per window */
    ppl_run r = {.ctx = 0};
    rc = CLI_FAIL;
    if (tok) {
        skv_model_get_info(m, &r.info);
        r.ctx = (size_t)(o.ctx ? o.ctx : r.info.n_ctx_train);
        double t0 = cli_now();
        if (!ppl_setup(&r, m, &o) && !ppl_protocols(&r, tok, n)) {
            ppl_report(&r, &o, len, n, cli_now() - t0);
            rc = CLI_OK;
        }
    }
    free(text);
    free(tok);
    free(r.lf);
    free(r.lq);
    free(r.win);
    skv_ctx_free(r.cq);
    skv_ctx_free(r.c);
    skv_model_free(m);
    return rc;
}

/* ---- info ------------------------------------------------------------------------ */

static const cli_opt info_opts[] = {CLI_OPT_MODEL(F(model)), {0}};

static const cli_cmd info_cmd = {
    "info", "[MODEL | -m MODEL]\n",
    "Prints the model's architecture, sizes, fingerprint, and what one token position of its\n"
    "KV cache costs as f32, f16, q8_0, q4_0 and TurboQuant.\n", info_opts, 1, NULL};

static void print_architecture(const skv_model *m, const skv_model_info *h, const uint8_t fp[16])
{
    printf("model:        %s (%s, %s)\n", h->name, h->format, h->arch);
    printf("parameters:   %lld (%s weights), file %.2f MiB\n", (long long)h->n_params, skv_weight_type_name(h->weight_type),
           (double)h->file_bytes / 1048576.0);
    printf("layers:       %d\nwidth:        %d\nheads:        %d query, %d key/value (%s), head_dim %d\n", h->n_layer,
           h->n_embd, h->n_head, h->n_head_kv, h->n_head_kv < h->n_head ? "grouped-query" : "multi-head", h->head_dim);
    printf("ffn:          %d (%s)\nvocabulary:   %d (%s tokenizer, BOS %d, EOS %d)\n", h->n_ff,
           !strncmp(h->arch, "gemma", 5) ? "GELU-gated" : "SwiGLU", h->n_vocab,
           h->tokenizer_kind == SKV_TOKENIZER_KIND_GPT2 ? "gpt2 byte-level BPE" : "SentencePiece BPE", h->bos_id,
           h->eos_id);
    printf("context:      %d (trained)\nrope:         base %g, %d dims per head\nnorm eps:     %g\n", h->n_ctx_train,
           (double)h->rope_base, h->rope_dim, (double)h->norm_eps);
    char steps[512];
    skv_model_arch_steps(m, steps, sizeof steps);
    printf("architecture: %s\n", steps);
    printf("output:       %s\nfingerprint:  ", h->tied_output ? "tied to token embeddings" : "separate matrix");
    for (int i = 0; i < 16; i++) printf("%02x", fp[i]);
    printf("\n");
}

static void print_kv_costs(const skv_model *m, const skv_model_info *h)
{
    const char *schemes[] = {"f32", "f16", "q8_0", "q4_0", "tq4p", "tq4", "tq3.5", "tq3p", "tq3", "tq2p", "tq2", "tq1"};
    double f16 = 0;
    printf("\nKV cache per token position (%d layers x 2 x %d heads x %d values = %d scalars):\n", h->n_layer,
           h->n_head_kv, h->head_dim, 2 * h->n_layer * h->n_head_kv * h->head_dim);
    skv_kv_position_bytes(m, "f16", &f16);
    printf("  %-8s %12s %12s %10s\n", "scheme", "bytes", "bits", "vs f16");
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        double b;
        if (skv_kv_position_bytes(m, schemes[i], &b)) continue;
        printf("  %-8s %12.1f %12.0f %9.2fx\n", schemes[i], b, b * 8, f16 / b);
    }
    printf("  (every stored byte counted: q8_0/q4_0 one fp16 scale per 32 values; TurboQuant one fp16\n"
           "   norm per vector, the prod variants tqNp also a residual norm and a 1-bit sketch;\n"
           "   tq3.5 = half the vectors at 3, half at 4 bits)\n");
}

int cmd_info(int argc, char **argv)
{
    opts o = {0};
    const char *pos = NULL;
    int n_pos = 0, rc = cli_parse(&info_cmd, argc, argv, &o, &pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (n_pos && o.model) return cli_usage(&info_cmd, "give the model once: MODEL or -m MODEL");
    skv_model *m = cli_load_model_unrun(n_pos ? pos : o.model);
    if (!m) return CLI_FAIL;
    skv_model_info h;
    uint8_t fp[16];
    skv_model_get_info(m, &h);
    skv_model_fingerprint(m, fp);
    print_architecture(m, &h, fp);
    print_kv_costs(m, &h);
    skv_model_free(m);
    return CLI_OK;
}

/* ---- kv-dump ------------------------------------------------------------------------ */

static const cli_opt dump_opts[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_FILE(F(file), "FILE", "the text, run with BOS first ('-' = stdin)"),
    CLI_OPT_OUTPUT(F(out), "OUT.kv", "the dump: KV cache and token ids (docs/kvdump.md; '-' = stdout)"),
    {"f16", 0, CLI_FLAG, NULL, 0, 0, F(f16), "store values as IEEE half precision (default f32)"},
    {"truncate", 0, CLI_FLAG, NULL, 0, 0, F(truncate), "keep the first context-length tokens of a longer text"},
    {"logits", 0, CLI_PATH, "OUT.f32", 0, 0, F(logits), "also write every position's logits: n_pos x n_vocab\n"
                                                         "little-endian f32 ('-' = stdout)"},
    CLI_OPT_THREADS(F(threads)),
    {0},
};

static const cli_cmd dump_cmd = {
    "kv-dump", "[-m MODEL] -f FILE -o OUT.kv [--f16] [--truncate] [--logits OUT.f32] [-t N]\n",
    "Runs FILE's text (BOS first) through the model and writes the KV cache with the token\n"
    "ids as a raw dump (format: docs/kvdump.md). Texts longer than the context are refused\n"
    "unless --truncate keeps the first context-length tokens.\n", dump_opts, 0, NULL};

/* n little-endian f32 values to out->f. */
static int write_f32(cli_out *out, const float *v, size_t n)
{
    unsigned char b[4];
    int ok = 1;
    for (size_t i = 0; ok && i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        b[0] = (unsigned char)u, b[1] = (unsigned char)(u >> 8), b[2] = (unsigned char)(u >> 16), b[3] = (unsigned char)(u >> 24);
        ok = fwrite(b, 1, 4, out->f) == 4;
    }
    if (!ok) cli_error("cannot write '%s': %s (check the disk has room)", out->dest, strerror(errno));
    return ok ? 0 : -1;
}

/* The forward pass over n tokens and both outputs (committed by the caller); the seconds
 * the pass took, or -1 after a message. */
static double dump_run(const opts *o, skv_ctx *c, const int32_t *tok, size_t n, cli_out *kv, cli_out *lg)
{
    skv_model_info info;
    char err[512];
    skv_model_get_info(skv_ctx_model(c), &info);
    float *logits = o->logits ? malloc(n * (size_t)info.n_vocab * sizeof *logits) : NULL;
    const char *kv_path = NULL;
    double t0 = cli_now(), secs = -1;
    if (o->logits && !logits) cli_error("out of memory");
    else if (skv_ctx_prefill(c, tok, n, o->logits ? SKV_LOGITS_ALL : SKV_LOGITS_NONE, logits))
        cli_error("forward pass failed: %s", skv_ctx_last_error(c));
    else if (secs = cli_now() - t0, o->logits && write_f32(lg, logits, n * (size_t)info.n_vocab)) secs = -1;
    else if (!(kv_path = cli_out_path(kv))) secs = -1;
    else if (skv_kvdump_write(c, tok, n, o->f16 ? SKV_KVDUMP_F16 : SKV_KVDUMP_F32, kv_path, err, sizeof err)) {
        cli_error("%s", err);
        secs = -1;
    }
    free(logits);
    return secs;
}

/* The text's tokens, cut to the context with --truncate; NULL after a message. */
static int32_t *dump_tokens(const opts *o, const skv_model *m, int n_ctx, size_t *n)
{
    size_t len = 0;
    char *text = cli_read_file(o->file, &len);
    int32_t *tok = text ? cli_tokenize(m, text, len, 1, n) : NULL;
    free(text);
    if (tok && *n > (size_t)n_ctx && !o->truncate) {
        cli_error("'%s' is %zu tokens, more than the model's context of %d (use --truncate to keep the first %d)",
                  o->file, *n, n_ctx, n_ctx);
        free(tok);
        return NULL;
    }
    if (*n > (size_t)n_ctx) *n = (size_t)n_ctx;
    return tok;
}

int cmd_kvdump(int argc, char **argv)
{
    opts o = {.threads = 1};
    int rc = cli_parse(&dump_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (!o.file || !o.out) return cli_usage(&dump_cmd, "needs -f FILE and -o OUT.kv");
    if (cli_stdout_clash(&dump_cmd, "-o", o.out, "--logits", o.logits)) return CLI_USAGE;
    cli_out kv, lg = {0};
    size_t n = 0;
    skv_model *m = NULL;
    skv_ctx *c = NULL;
    int32_t *tok = NULL;
    double secs = -1;
    if (!cli_out_open(&kv, o.out) && !cli_out_open(&lg, o.logits) &&
        (m = cli_load_model_sweeps(o.model, cli_text_sweeps(o.file, 0, 0))) &&
        (c = make_ctx(m, 0, o.threads)) && (tok = dump_tokens(&o, m, skv_ctx_n_ctx(c), &n)) &&
        (secs = dump_run(&o, c, tok, n, &kv, &lg)) >= 0 && (cli_out_commit(&lg) || cli_out_commit(&kv)))
        secs = -1;
    if (secs >= 0)
        fprintf(cli_report_stream(o.out, o.logits), "wrote %s: %zu positions, %s, prefill %.0f tok/s\n", o.out, n,
                o.f16 ? "f16" : "f32", (double)n / (secs + 1e-12));
    cli_out_discard(&kv);
    cli_out_discard(&lg);
    free(tok);
    skv_ctx_free(c);
    skv_model_free(m);
    return secs >= 0 ? CLI_OK : CLI_FAIL;
}

/* ---- tokenize ------------------------------------------------------------------------ */

static const cli_opt tok_opts[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_PROMPT(F(prompt), "the text"),
    CLI_OPT_FILE(F(file), "FILE", "read the text from FILE ('-' = stdin)"),
    {"no-bos", 0, CLI_FLAG, NULL, 0, 0, F(no_bos), "do not put BOS first"},
    {0},
};

static const cli_cmd tok_cmd = {"tokenize", "[-m MODEL] (-p TEXT | -f FILE) [--no-bos]\n",
                                "Prints the token ids of the text, space-separated (BOS first unless --no-bos).\n",
                                tok_opts, 0, NULL};

int cmd_tokenize(int argc, char **argv)
{
    opts o = {0};
    int rc = cli_parse(&tok_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (!o.prompt == !o.file) return cli_usage(&tok_cmd, "needs exactly one of -p TEXT or -f FILE");
    size_t len = 0, n = 0;
    char *text = text_of(&o, &len);
    skv_model *m = text ? cli_load_model_unrun(o.model) : NULL;
    int32_t *tok = m ? cli_tokenize(m, text, len, !o.no_bos, &n) : NULL;
    if (tok) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", tok[i]);
        putchar('\n');
    }
    free(text);
    free(tok);
    skv_model_free(m);
    return tok ? CLI_OK : CLI_FAIL;
}
