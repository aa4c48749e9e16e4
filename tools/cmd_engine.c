/* seqkv generate | perplexity | info | kv-dump */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Options shared by the commands below. */
typedef struct {
    const char *model, *prompt, *file, *out, *logits, *kv_quant, *codec;
    long n_predict, ctx, threads, seed;
    double temp, top_p;
    int f16, truncate, no_bos;
} opts;

/* Parses argv into o; returns -1 on error, 1 if --help was printed. `allowed` lists the
 * accepted option letters/names so that each command rejects the others. */
static int parse_opts(int argc, char **argv, opts *o, const char *allowed, const char *help)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long lv;
#define IS(s) (!strcmp(a, s) && strstr(allowed, " " s " "))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help, stdout);
            return 1;
        } else if (IS("-m")) {
            if (!v) goto missing;
            o->model = argv[++i];
        } else if (IS("-p")) {
            if (!v) goto missing;
            o->prompt = argv[++i];
        } else if (IS("-f")) {
            if (!v) goto missing;
            o->file = argv[++i];
        } else if (IS("-o")) {
            if (!v) goto missing;
            o->out = argv[++i];
        } else if (IS("--logits")) {
            if (!v) goto missing;
            o->logits = argv[++i];
        } else if (IS("--kv-quant")) {
            if (!v) goto missing;
            o->kv_quant = argv[++i];
        } else if (IS("--codec")) {
            if (!v) goto missing;
            o->codec = argv[++i];
        } else if (IS("-n")) {
            if (cli_parse_int(a, v, 0, 1 << 24, &o->n_predict)) return -1;
            i++;
        } else if (IS("-c")) {
            if (cli_parse_int(a, v, 2, 1 << 24, &o->ctx)) return -1;
            i++;
        } else if (IS("-t")) {
            if (cli_parse_int(a, v, 1, 256, &o->threads)) return -1;
            i++;
        } else if (IS("--seed")) {
            if (cli_parse_int(a, v, 0, LONG_MAX, &lv)) return -1;
            o->seed = lv;
            i++;
        } else if (IS("--temp")) {
            if (cli_parse_float(a, v, 0.0, 100.0, &o->temp)) return -1;
            i++;
        } else if (IS("--top-p")) {
            if (cli_parse_float(a, v, 0.0, 1.0, &o->top_p)) return -1;
            i++;
        } else if (IS("--f16")) {
            o->f16 = 1;
        } else if (IS("--truncate")) {
            o->truncate = 1;
        } else if (a[0] == '-' && a[1]) {
            cli_error("unknown option '%s' (see --help)", a);
            return -1;
        } else if (!o->file && strstr(allowed, " MODEL ") && !o->model) {
            o->model = a;
        } else {
            cli_error("unexpected argument '%s' (see --help)", a);
            return -1;
        }
#undef IS
        continue;
    missing:
        cli_error("option %s needs a value", a);
        return -1;
    }
    return 0;
}

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

static void print_piece(const skv_model *m, int32_t tok)
{
    char buf[256];
    size_t len = 0;
    if (skv_token_piece(m, tok, buf, sizeof buf, &len) == SKV_OK) fwrite(buf, 1, len, stdout);
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

/* Greedy (ties: lowest id) at temp 0, else temperature + nucleus sampling. */
static int32_t sample(const float *logits, int n, double temp, double top_p, uint64_t *rng, cand *buf)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (temp <= 0.0) return best;
    double z = 0.0, acc = 0.0;
    for (int i = 0; i < n; i++) {
        buf[i].id = i;
        buf[i].p = exp(((double)logits[i] - (double)logits[best]) / temp);
        z += buf[i].p;
    }
    qsort(buf, (size_t)n, sizeof *buf, cand_cmp);
    int keep = n;
    for (int i = 0; i < n; i++) {
        acc += buf[i].p / z;
        if (acc >= top_p) {
            keep = i + 1;
            break;
        }
    }
    double mass = 0.0;
    for (int i = 0; i < keep; i++) mass += buf[i].p;
    double u = (double)(rng_next(rng) >> 11) * 0x1.0p-53 * mass;
    for (int i = 0; i < keep; i++) {
        u -= buf[i].p;
        if (u < 0.0) return buf[i].id;
    }
    return buf[keep - 1].id;
}

static const char gen_help[] =
    "usage: seqkv generate [-m MODEL] -p PROMPT [-n N] [--temp T] [--top-p P] [--seed S] [-t THREADS]\n"
    "                      [-o OUT.skv [--codec CODEC]]\n\n"
    "Generates up to N tokens (default 128) after PROMPT and prints the text.\n"
    "  --temp T    temperature; 0 (default) = greedy\n"
    "  --top-p P   nucleus sampling mass (default 0.95)\n"
    "  --seed S    sampling seed (default 42); same seed, same text\n"
    "  -t THREADS  worker threads (default 1)\n"
    "  -o OUT.skv  also store the session (prompt + generation) as it is generated: the\n"
    "              .skv encoder is the inference loop's context (docs/format.md)\n"
    "  --codec C   codec of OUT.skv: model (default), tokens, f16, q8, q4, tq2, tq3, tq4\n"
    "Stops at the end-of-sequence token or when the context is full.\n";

/* The context a generation runs in: a plain one, or a .skv encoder's when the session is
 * stored (same logits either way: the encoder runs the same engine). */
typedef struct {
    skv_ctx *ctx;
    skv_encoder *enc;
} gen_sink;

static int sink_open(gen_sink *g, skv_model *m, const opts *o)
{
    if (!o->out) return (g->ctx = make_ctx(m, 0, o->threads)) ? SKV_OK : SKV_ERR_NOMEM;
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = skv_codec_parse(o->codec ? o->codec : "model"); /* checked by cmd_generate */
    ep.skip_entropy = 1; /* the loop reports the file's size, not the cross-entropy */
    ep.n_threads = (int)o->threads;
    int rc = skv_encoder_create(m, &ep, &g->enc, NULL, 0);
    if (rc) cli_error("cannot create the session encoder: %s", skv_status_str(rc));
    return rc;
}

/* Appends tokens and returns the next-token logits. */
static int sink_append(gen_sink *g, const int32_t *t, size_t n, float *logits)
{
    if (g->enc) return skv_encoder_append(g->enc, t, n, logits);
    return n == 1 ? skv_decode(g->ctx, t[0], logits) : skv_prefill(g->ctx, t, n, SKV_LOGITS_LAST, logits);
}

static const skv_ctx *sink_ctx(const gen_sink *g) { return g->enc ? skv_encoder_ctx(g->enc) : g->ctx; }

/* Writes OUT.skv (the encoder's bytes) and reports its size. */
static int sink_finish(gen_sink *g, const char *out)
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
    FILE *f = fopen(out, "wb");
    int ok = f && fwrite(data, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = 0;
    free(data);
    if (!ok) {
        cli_error("cannot write '%s'", out);
        remove(out);
        return CLI_FAIL;
    }
    fprintf(stderr, "stored the session (%llu tokens) in %s: %zu bytes, %.2f bits/position\n",
            (unsigned long long)st.n_tokens, out, size, 8.0 * (double)size / (double)(st.n_tokens ? st.n_tokens : 1));
    return CLI_OK;
}

int cmd_generate(int argc, char **argv)
{
    opts o = {.n_predict = 128, .threads = 1, .seed = 42, .top_p = 0.95};
    int r = parse_opts(argc, argv, &o, " -m -p -n --temp --top-p --seed -t -o --codec ", gen_help);
    if (r) return r > 0 ? CLI_OK : CLI_USAGE;
    if (!o.prompt) {
        cli_error("generate needs a prompt (-p TEXT)");
        return CLI_USAGE;
    }
    if (o.codec && !o.out) {
        cli_error("--codec needs -o OUT.skv");
        return CLI_USAGE;
    }
    if (o.codec && (skv_codec_parse(o.codec) < 0 || skv_codec_parse(o.codec) == SKV_CODEC_KVQ)) {
        cli_error("--codec '%s' is not one of model tokens f16 q8 q4 tq2 tq3 tq4", o.codec);
        return CLI_USAGE;
    }
    skv_model *m = cli_load_model(o.model);
    if (!m) return CLI_FAIL;
    skv_model_info info;
    skv_model_get_info(m, &info);
    size_t n = 0;
    int32_t *tok = cli_tokenize(m, o.prompt, strlen(o.prompt), 1, &n);
    gen_sink g = {NULL, NULL};
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    cand *buf = malloc((size_t)info.n_vocab * sizeof *buf);
    int rc = CLI_FAIL;
    if (!tok || !logits || !buf || sink_open(&g, m, &o)) goto done;
    int n_ctx = skv_ctx_n_ctx(sink_ctx(&g));
    if ((size_t)n_ctx <= n) {
        cli_error("the prompt (%zu tokens) does not fit the context of %d", n, n_ctx);
        goto done;
    }
    if (sink_append(&g, tok, n, logits)) goto done;
    fputs(o.prompt, stdout);
    uint64_t rng = (uint64_t)o.seed;
    for (long i = 0; i < o.n_predict && skv_ctx_n_pos(sink_ctx(&g)) < n_ctx; i++) {
        int32_t next = sample(logits, info.n_vocab, o.temp, o.top_p, &rng, buf);
        if (next == info.eos_id) break;
        print_piece(m, next);
        fflush(stdout);
        if (sink_append(&g, &next, 1, logits)) break;
    }
    putchar('\n');
    fflush(stdout);
    rc = sink_finish(&g, o.out);
done:
    free(tok);
    free(logits);
    free(buf);
    skv_encoder_free(g.enc);
    skv_ctx_free(g.ctx);
    skv_model_free(m);
    return rc;
}

/* ---- perplexity --------------------------------------------------------------------- */

/* -log p(target) in nats from logits, in double. */
static double nll(const float *logits, int n, int32_t target)
{
    double mx = logits[0], z = 0.0;
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < n; i++) z += exp((double)logits[i] - mx);
    return log(z) - ((double)logits[target] - mx);
}

static const char ppl_help[] =
    "usage: seqkv perplexity [-m MODEL] -f FILE [-c CTX] [-t THREADS] [--kv-quant SPEC]\n\n"
    "Reports two measures of how well the model predicts FILE:\n"
    "  (a) perplexity with llama.cpp's llama-perplexity protocol: non-overlapping windows of\n"
    "      CTX tokens (default: the model's context), the first token of each replaced by BOS,\n"
    "      only the second half of each window scored. Comparable with llama.cpp's numbers.\n"
    "  (b) cross-entropy in bits per token of the whole text coded sequentially: segments of\n"
    "      CTX-1 text tokens, each after a fresh BOS, every text token scored. This is the\n"
    "      floor that seqkv's lossless model codec reaches.\n"
    "  --kv-quant SPEC  also run with the KV cache quantized as SPEC (e.g. \"k=tq4,v=tq3,window=64\";\n"
    "      docs/kvquant.md) and report, for both protocols, its perplexity, the mean KL divergence\n"
    "      KL(p_full || p_quant) of the next-token distributions and the top-1 agreement.\n";

int cmd_perplexity(int argc, char **argv)
{
    opts o = {.threads = 1};
    int r = parse_opts(argc, argv, &o, " -m -f -c -t --kv-quant ", ppl_help);
    if (r) return r > 0 ? CLI_OK : CLI_USAGE;
    if (!o.file) {
        cli_error("perplexity needs a text file (-f FILE)");
        return CLI_USAGE;
    }
    size_t len = 0, n = 0;
    char *text = cli_read_file(o.file, &len);
    if (!text) return CLI_FAIL;
    skv_model *m = cli_load_model(o.model);
    if (!m) {
        free(text);
        return CLI_FAIL;
    }
    skv_model_info info;
    skv_model_get_info(m, &info);
    long ctx = o.ctx ? o.ctx : info.n_ctx_train;
    int32_t *tok = cli_tokenize(m, text, len, 0, &n); /* text tokens; BOS added per window */
    skv_ctx *c = tok ? make_ctx(m, ctx, o.threads) : NULL, *cq = NULL;
    float *logits = malloc((size_t)ctx * (size_t)info.n_vocab * sizeof *logits), *lq = NULL;
    int32_t *win = malloc((size_t)ctx * sizeof *win);
    int rc = CLI_FAIL;
    cli_progress pr;
    cli_score sa = {0}, sb = {0}; /* quantized run vs full, protocols (a) and (b) */
    char err[256];
    if (!c || !logits || !win) goto done;
    if (o.kv_quant) {
        if (skv_kv_quant_check(o.kv_quant, m, err, sizeof err)) {
            cli_error("%s", err);
            goto done;
        }
        if (!(cq = make_ctx_q(m, ctx, o.threads, o.kv_quant)) ||
            !(lq = malloc((size_t)ctx * (size_t)info.n_vocab * sizeof *lq)))
            goto done;
    }
    if (info.bos_id < 0) {
        cli_error("the model has no BOS token; both protocols start windows with BOS");
        goto done;
    }
    /* (a) llama.cpp protocol on [BOS] + text tokens */
    size_t n_all = n + 1, n_chunk = n_all / (size_t)ctx, first = (size_t)ctx / 2, scored_a = 0;
    double nll_a = 0.0;
    double t0 = cli_now();
    cli_progress_start(&pr, "perplexity (a)");
    for (size_t ch = 0; ch < n_chunk; ch++) {
        for (long j = 0; j < ctx; j++) {
            size_t k = ch * (size_t)ctx + (size_t)j;
            win[j] = k == 0 ? info.bos_id : tok[k - 1];
        }
        win[0] = info.bos_id;
        skv_ctx_truncate(c, 0);
        if (skv_prefill(c, win, (size_t)ctx, SKV_LOGITS_ALL, logits)) goto done;
        if (cq && (skv_ctx_truncate(cq, 0) || skv_prefill(cq, win, (size_t)ctx, SKV_LOGITS_ALL, lq))) goto done;
        for (size_t j = first; j + 1 < (size_t)ctx; j++, scored_a++) {
            nll_a += nll(logits + j * (size_t)info.n_vocab, info.n_vocab, win[j + 1]);
            if (cq) cli_score_row(logits + j * (size_t)info.n_vocab, lq + j * (size_t)info.n_vocab, info.n_vocab,
                                  win[j + 1], &sa);
        }
        cli_progress_update(&pr, (ch + 1) * (size_t)ctx, n_chunk * (size_t)ctx);
    }
    cli_progress_end(&pr);
    /* (b) sequential coding cost */
    size_t seg = (size_t)ctx - 1;
    double bits_b = 0.0;
    cli_progress_start(&pr, "cross-entropy (b)");
    for (size_t s0 = 0; s0 < n; s0 += seg) {
        size_t k = n - s0 < seg ? n - s0 : seg;
        win[0] = info.bos_id;
        memcpy(win + 1, tok + s0, k * sizeof *win);
        skv_ctx_truncate(c, 0);
        if (skv_prefill(c, win, k + 1, SKV_LOGITS_ALL, logits)) goto done;
        if (cq && (skv_ctx_truncate(cq, 0) || skv_prefill(cq, win, k + 1, SKV_LOGITS_ALL, lq))) goto done;
        for (size_t j = 0; j < k; j++) {
            bits_b += nll(logits + j * (size_t)info.n_vocab, info.n_vocab, win[j + 1]) / log(2.0);
            if (cq) cli_score_row(logits + j * (size_t)info.n_vocab, lq + j * (size_t)info.n_vocab, info.n_vocab,
                                  win[j + 1], &sb);
        }
        cli_progress_update(&pr, s0 + k, n);
    }
    cli_progress_end(&pr);
    double secs = cli_now() - t0;
    printf("model: %s\ntext: %s (%zu bytes, %zu tokens)\n", info.name, o.file, len, n);
    if (n_chunk)
        printf("(a) llama.cpp protocol: perplexity %.4f over %zu windows of %ld (%zu scored tokens)\n",
               exp(nll_a / (double)scored_a), n_chunk, ctx, scored_a);
    else
        printf("(a) llama.cpp protocol: text shorter than one window of %ld tokens: not computed\n", ctx);
    if (n)
        printf("(b) sequential cross-entropy: %.4f bits/token (perplexity %.4f), %.4f bits/byte, %.0f bits total\n",
               bits_b / (double)n, exp2(bits_b / (double)n), len ? bits_b / (double)len : 0.0, bits_b);
    if (cq) {
        printf("kv-quant %s:\n", o.kv_quant);
        if (n_chunk && sa.n)
            printf("(a) perplexity %.4f (%+.4f), KL(full||quant) %.6f nats/token, top-1 agreement %.2f%%\n",
                   exp(sa.nll / (double)sa.n), exp(sa.nll / (double)sa.n) - exp(nll_a / (double)scored_a),
                   sa.kl / (double)sa.n, 100.0 * (double)sa.top1 / (double)sa.n);
        if (sb.n)
            printf("(b) %.4f bits/token (%+.4f), perplexity %.4f, KL(full||quant) %.6f nats/token, top-1 agreement "
                   "%.2f%%\n",
                   sb.nll / log(2.0) / (double)sb.n, sb.nll / log(2.0) / (double)sb.n - bits_b / (double)n,
                   exp(sb.nll / (double)sb.n), sb.kl / (double)sb.n, 100.0 * (double)sb.top1 / (double)sb.n);
    }
    printf("time: %.2f s\n", secs);
    rc = CLI_OK;
done:
    free(text);
    free(tok);
    free(logits);
    free(lq);
    free(win);
    skv_ctx_free(cq);
    skv_ctx_free(c);
    skv_model_free(m);
    return rc;
}

/* ---- info ------------------------------------------------------------------------ */

static const char info_help[] =
    "usage: seqkv info [MODEL | -m MODEL]\n\n"
    "Prints the model's architecture, sizes, fingerprint, and what one token position of its\n"
    "KV cache costs as f32, f16, q8_0 and TurboQuant at 3, 3.5 and 4 bits.\n";

static const char *dtype_name(int t)
{
    switch (t) {
    case SKV_DTYPE_F32: return "f32";
    case SKV_DTYPE_F16: return "f16";
    case SKV_DTYPE_Q8_0: return "q8_0";
    case SKV_DTYPE_Q4_0: return "q4_0";
    default: return "other";
    }
}

int cmd_info(int argc, char **argv)
{
    opts o = {0};
    int r = parse_opts(argc, argv, &o, " -m MODEL ", info_help);
    if (r) return r > 0 ? CLI_OK : CLI_USAGE;
    skv_model *m = cli_load_model(o.model);
    if (!m) return CLI_FAIL;
    skv_model_info h;
    uint8_t fp[16];
    skv_model_get_info(m, &h);
    skv_model_fingerprint(m, fp);
    printf("model:        %s (%s, %s)\n", h.name, h.format, h.arch);
    printf("parameters:   %lld (%s weights), file %.2f MiB\n", (long long)h.n_params, dtype_name(h.weight_type),
           (double)h.file_bytes / 1048576.0);
    printf("layers:       %d\nwidth:        %d\nheads:        %d query, %d key/value (%s), head_dim %d\n", h.n_layer,
           h.n_embd, h.n_head, h.n_head_kv, h.n_head_kv < h.n_head ? "grouped-query" : "multi-head", h.head_dim);
    printf("ffn:          %d (SwiGLU)\nvocabulary:   %d (%s tokenizer, BOS %d, EOS %d)\n", h.n_ff, h.n_vocab,
           h.tokenizer_kind == SKV_TOKENIZER_KIND_GPT2 ? "gpt2 byte-level BPE" : "SentencePiece BPE", h.bos_id, h.eos_id);
    printf("context:      %d (trained)\nrope:         base %g, %d dims per head\nnorm eps:     %g\n", h.n_ctx_train,
           (double)h.rope_base, h.rope_dim, (double)h.norm_eps);
    char steps[512];
    skv_model_arch_steps(m, steps, sizeof steps);
    printf("architecture: %s\n", steps);
    printf("output:       %s\nfingerprint:  ", h.tied_output ? "tied to token embeddings" : "separate matrix");
    for (int i = 0; i < 16; i++) printf("%02x", fp[i]);
    printf("\n\nKV cache per token position (%d layers x 2 x %d heads x %d values = %d scalars):\n", h.n_layer,
           h.n_head_kv, h.head_dim, 2 * h.n_layer * h.n_head_kv * h.head_dim);
    const char *schemes[] = {"f32", "f16", "q8_0", "q4_0", "tq4p", "tq4", "tq3.5", "tq3p", "tq3", "tq2p", "tq2", "tq1"};
    double f16 = 0;
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
    skv_model_free(m);
    return CLI_OK;
}

/* ---- kv-dump ------------------------------------------------------------------------ */

static const char dump_help[] =
    "usage: seqkv kv-dump [-m MODEL] -f FILE -o OUT.kv [--f16] [--truncate] [--logits OUT.f32] [-t THREADS]\n\n"
    "Runs FILE's text (BOS first) through the model and writes the KV cache with the token\n"
    "ids as a raw dump (format: docs/kvdump.md). Texts longer than the context are refused\n"
    "unless --truncate keeps the first context-length tokens.\n"
    "  --f16            store values as IEEE half precision (default f32)\n"
    "  --logits OUT.f32 also write every position's logits: n_pos x n_vocab little-endian f32\n";

static int write_f32(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    unsigned char b[4];
    int ok = f != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        b[0] = (unsigned char)u, b[1] = (unsigned char)(u >> 8), b[2] = (unsigned char)(u >> 16), b[3] = (unsigned char)(u >> 24);
        ok = fwrite(b, 1, 4, f) == 4;
    }
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) cli_error("cannot write '%s'", path);
    return ok ? 0 : -1;
}

int cmd_kvdump(int argc, char **argv)
{
    opts o = {.threads = 1};
    int r = parse_opts(argc, argv, &o, " -m -f -o --f16 --truncate --logits -t ", dump_help);
    if (r) return r > 0 ? CLI_OK : CLI_USAGE;
    if (!o.file || !o.out) {
        cli_error("kv-dump needs -f FILE and -o OUT.kv");
        return CLI_USAGE;
    }
    size_t len = 0, n = 0;
    char *text = cli_read_file(o.file, &len), err[512];
    if (!text) return CLI_FAIL;
    skv_model *m = cli_load_model(o.model);
    int32_t *tok = m ? cli_tokenize(m, text, len, 1, &n) : NULL;
    skv_ctx *c = tok ? make_ctx(m, 0, o.threads) : NULL;
    float *logits = NULL;
    int rc = CLI_FAIL;
    if (!c) goto done;
    if (n > (size_t)skv_ctx_n_ctx(c)) {
        if (!o.truncate) {
            cli_error("'%s' is %zu tokens, more than the model's context of %d (use --truncate to keep the first %d)",
                      o.file, n, skv_ctx_n_ctx(c), skv_ctx_n_ctx(c));
            goto done;
        }
        n = (size_t)skv_ctx_n_ctx(c);
    }
    skv_model_info info;
    skv_model_get_info(m, &info);
    if (o.logits && !(logits = malloc(n * (size_t)info.n_vocab * sizeof *logits))) goto done;
    double t0 = cli_now();
    if (skv_prefill(c, tok, n, o.logits ? SKV_LOGITS_ALL : SKV_LOGITS_NONE, logits)) {
        cli_error("forward pass failed: %s", skv_ctx_last_error(c));
        goto done;
    }
    double t1 = cli_now();
    if (o.logits && write_f32(o.logits, logits, n * (size_t)info.n_vocab)) goto done;
    if (skv_kvdump_write(c, tok, n, o.f16 ? SKV_KVDUMP_F16 : SKV_KVDUMP_F32, o.out, err, sizeof err)) {
        cli_error("%s", err);
        goto done;
    }
    printf("wrote %s: %zu positions, %s, prefill %.0f tok/s\n", o.out, n, o.f16 ? "f16" : "f32",
           (double)n / (t1 - t0 + 1e-12));
    rc = CLI_OK;
done:
    free(text);
    free(tok);
    free(logits);
    skv_ctx_free(c);
    skv_model_free(m);
    return rc;
}

/* ---- tokenize ------------------------------------------------------------------------ */

static const char tok_help[] =
    "usage: seqkv tokenize [-m MODEL] (-p TEXT | -f FILE) [--no-bos]\n\n"
    "Prints the token ids of the text, space-separated (BOS first unless --no-bos).\n";

int cmd_tokenize(int argc, char **argv)
{
    opts o = {0};
    int no_bos = 0;
    /* --no-bos is this command's own flag: strip it before the shared parser */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--no-bos")) {
            no_bos = 1;
            for (int k = i; k + 1 < argc; k++) argv[k] = argv[k + 1];
            argc--;
            i--;
        }
    int r = parse_opts(argc, argv, &o, " -m -p -f ", tok_help);
    if (r) return r > 0 ? CLI_OK : CLI_USAGE;
    if (!!o.prompt == !!o.file) {
        cli_error("tokenize needs exactly one of -p TEXT or -f FILE");
        return CLI_USAGE;
    }
    size_t len = 0, n = 0;
    char *text = o.file ? cli_read_file(o.file, &len) : NULL;
    if (o.file && !text) return CLI_FAIL;
    skv_model *m = cli_load_model(o.model);
    int32_t *tok = m ? cli_tokenize(m, text ? text : o.prompt, text ? len : strlen(o.prompt), !no_bos, &n) : NULL;
    if (tok) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", tok[i]);
        putchar('\n');
    }
    free(text);
    free(tok);
    skv_model_free(m);
    return tok ? CLI_OK : CLI_FAIL;
}
