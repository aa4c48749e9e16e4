/* seqkv kv-quality: what per-vector KV quantization costs on a real text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_score_row(const float *ref, const float *q, int n_vocab, int32_t target, cli_score *s)
{
    double mr, mq, zr = 0.0, zq = 0.0, kl = 0.0;
    int ar = 0, aq = 0;
    for (int i = 1; i < n_vocab; i++) {
        if (ref[i] > ref[ar]) ar = i;
        if (q[i] > q[aq]) aq = i;
    }
    mr = ref[ar], mq = q[aq];
    for (int i = 0; i < n_vocab; i++) zr += exp((double)ref[i] - mr);
    for (int i = 0; q != ref && i < n_vocab; i++) zq += exp((double)q[i] - mq);
    double lzr = log(zr), lzq = q != ref ? log(zq) : lzr;
    for (int i = 0; q != ref && i < n_vocab; i++) { /* KL(ref || q); 0 against itself */
        double lp = (double)ref[i] - mr - lzr, lq = (double)q[i] - mq - lzq;
        kl += exp(lp) * (lp - lq);
    }
    s->kl += kl > 0.0 ? kl : 0.0; /* rounding can make an exact match a hair negative */
    s->nll += lzq - ((double)q[target] - mq);
    s->top1 += ar == aq;
    s->n++;
}

void cli_score_rows(const float *ref, const float *q, int n_vocab, const int32_t *win, size_t from, size_t to,
                    cli_score *s)
{
    for (size_t j = from; j < to; j++)
        cli_score_row(ref + j * (size_t)n_vocab, q + j * (size_t)n_vocab, n_vocab, win[j + 1], s);
}

int cli_bos_window(skv_ctx *c, int32_t bos, const int32_t *tok, size_t k, int32_t *win, float *logits)
{
    win[0] = bos;
    memcpy(win + 1, tok, k * sizeof *win);
    skv_ctx_truncate(c, 0);
    return skv_ctx_prefill(c, win, k + 1, SKV_LOGITS_ALL, logits);
}

#define MAX_SCHEMES 16

typedef struct {
    char name[16], spec[160];
    double bits, err2[2], norm2[2], lerr2, lnorm2;
    skv_ctx *c;
    cli_score s;
} scheme_row;

/* Vector errors and key-as-query logit errors of one (layer, kind, head) block of n rows. */
static int block_errors(scheme_row *r, const float *x, size_t n, size_t hd, int layer, int kind, float *y)
{
    if (skv_kv_quant_roundtrip(r->name, hd, layer, kind, x, n, y, &r->bits)) return -1;
    for (size_t i = 0; i < n * hd; i++) {
        double d = (double)x[i] - (double)y[i];
        r->err2[kind] += d * d;
        r->norm2[kind] += (double)x[i] * (double)x[i];
    }
    if (kind != 0) return 0;
    double sc = 1.0 / sqrt((double)hd);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            double a = 0.0, b = 0.0;
            for (size_t k = 0; k < hd; k++) {
                a += (double)x[i * hd + k] * (double)x[j * hd + k];
                b += (double)x[i * hd + k] * (double)y[j * hd + k];
            }
            r->lerr2 += (b - a) * sc * (b - a) * sc;
            r->lnorm2 += a * sc * a * sc;
        }
    return 0;
}

static int kv_errors(skv_ctx *c, const skv_model_info *h, scheme_row *rows, int n_rows)
{
    size_t n = (size_t)skv_ctx_n_pos(c), hd = (size_t)h->head_dim;
    float *y = malloc(n * hd * sizeof *y);
    int rc = y ? 0 : -1;
    for (int l = 0; !rc && l < h->n_layer; l++)
        for (int kind = 0; !rc && kind < 2; kind++)
            for (int hh = 0; !rc && hh < h->n_head_kv; hh++) {
                const float *x;
                rc = skv_ctx_kv_view(c, l, kind, hh, &x) ? -1 : 0;
                for (int s = 0; !rc && s < n_rows; s++) rc = block_errors(&rows[s], x, n, hd, l, kind, y);
            }
    free(y);
    return rc;
}

static int parse_schemes(const char *list, const char *with, scheme_row *rows, int *n_rows)
{
    char err[256];
    *n_rows = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (*n_rows == MAX_SCHEMES || len == 0 || len >= sizeof rows[0].name) {
            cli_error("bad --schemes list '%s'", list);
            return -1;
        }
        scheme_row *r = &rows[(*n_rows)++];
        memset(r, 0, sizeof *r);
        memcpy(r->name, p, len);
        int w = snprintf(r->spec, sizeof r->spec, "kv=%s%s%.100s", r->name, with ? "," : "", with ? with : "");
        if (w < 0 || (size_t)w >= sizeof r->spec || (with && strlen(with) > 100)) {
            cli_error("--with '%s' is too long", with);
            return -1;
        }
        if (skv_kv_quant_check(r->spec, NULL, err, sizeof err)) {
            cli_error("%s", err);
            return -1;
        }
        p += len + (p[len] == ',');
    }
    return *n_rows ? 0 : -1;
}

static void print_table(const scheme_row *rows, int n_rows, double full_nll, size_t n_scored)
{
    double ppl = exp(full_nll / (double)n_scored);
    printf("| scheme | bits/value | K rel. MSE | V rel. MSE | logit rel. RMS err | ppl | delta ppl | KL nats/token | top-1 agree |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    printf("| f32 (reference) | 32.00 | 0 | 0 | 0 | %.4f | 0 | 0 | 100.00%% |\n", ppl);
    for (int s = 0; s < n_rows; s++) {
        const scheme_row *r = &rows[s];
        double p = exp(r->s.nll / (double)r->s.n);
        printf("| %s | %.3f | %.5f | %.5f | %.5f | %.4f | %+.4f | %.5f | %.2f%% |\n", r->spec, r->bits,
               r->norm2[0] > 0 ? r->err2[0] / r->norm2[0] : 0.0, r->norm2[1] > 0 ? r->err2[1] / r->norm2[1] : 0.0,
               r->lnorm2 > 0 ? sqrt(r->lerr2 / r->lnorm2) : 0.0, p, p - ppl, r->s.kl / (double)r->s.n,
               100.0 * (double)r->s.top1 / (double)r->s.n);
    }
}

typedef struct {
    const char *model, *file, *schemes, *with;
    long ctx, threads, max_tok;
} quality_opts;

#define F(x) offsetof(quality_opts, x)

static const cli_opt quality_opts_table[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_FILE(F(file), "TEXT", "the text ('-' = stdin)"),
    {"schemes", 0, CLI_STR, "LIST", 0, 0, F(schemes), "comma-separated (default f16,q8_0,q4_0,tq2,tq3,tq4,tq2p,tq3p,tq4p)"},
    {"with", 0, CLI_STR, "OPTS", 0, 0, F(with), "kv_quant options appended to every scheme, e.g.\n"
                                                "keep-first=1,keep-last=1,window=64"},
    CLI_OPT_CTX(F(ctx), 2, "window length (default: the model's context)"),
    {"tokens", 'n', CLI_INT, "N", -1, 1 << 30, F(max_tok), "text tokens used (default 4096; -1 or 0 = all)"},
    CLI_OPT_THREADS(F(threads)),
    {0},
};

static const cli_cmd quality_cmd = {
    "kv-quality", "[-m MODEL] -f TEXT [--schemes LIST] [--with OPTS] [-c N] [-n N] [-t N]\n",
    "Measures per-vector KV quantization schemes on the model's real KV cache of TEXT and prints a\n"
    "Markdown table, one row per scheme:\n"
    "  bits/value     stored bits per cached value, norms and scales included\n"
    "  K/V rel. MSE   sum ||x - x~||^2 / sum ||x||^2 over every head vector of the first window\n"
    "  logit err      RMS error of the attention logits q.k/sqrt(d) relative to their RMS, with the\n"
    "                 cached keys themselves as queries (q = k_i exact, keys k_j~ for j <= i, same head)\n"
    "  ppl, KL, top-1 the text coded as in `perplexity` protocol (b) (segments of CTX-1 tokens after\n"
    "                 BOS, every token scored) with the whole KV cache held in the scheme (kv=SCHEME),\n"
    "                 against the full-precision run: perplexity, mean KL(p_full || p_quant) in nats\n"
    "                 per token, top-1 agreement\n",
    quality_opts_table, 0, NULL};

/* One kv-quality run: the full-precision context, one per scheme, shared buffers. */
typedef struct {
    skv_model_info info;
    size_t seg;
    skv_ctx *c;
    int32_t *win;
    float *lf, *lq;
    scheme_row rows[MAX_SCHEMES];
    int n_rows;
    cli_score full;
} quality_run;

static int quality_setup(quality_run *r, const skv_model *m, long ctx, long threads)
{
    skv_ctx_params p = skv_ctx_default_params();
    size_t V = (size_t)r->info.n_vocab;
    p.n_ctx = (int)ctx;
    p.n_threads = (int)threads;
    r->seg = (size_t)ctx - 1;
    r->win = malloc((size_t)ctx * sizeof *r->win);
    r->lf = malloc((size_t)ctx * V * sizeof *r->lf);
    r->lq = malloc((size_t)ctx * V * sizeof *r->lq);
    if (!r->win || !r->lf || !r->lq || skv_ctx_create(m, &p, &r->c)) {
        cli_error("cannot create a context of %ld positions", ctx);
        return -1;
    }
    for (int s = 0; s < r->n_rows; s++) {
        char err[256] = "cannot create a context";
        p.kv_quant = r->rows[s].spec;
        if (skv_kv_quant_check(r->rows[s].spec, m, err, sizeof err) || skv_ctx_create(m, &p, &r->rows[s].c)) {
            cli_error("%s: %s", r->rows[s].spec, err);
            return -1;
        }
    }
    return 0;
}

/* Protocol (b) over the text, every scheme against the full-precision run. */
static int quality_segments(quality_run *r, const int32_t *tok, size_t n)
{
    cli_progress pr;
    int V = r->info.n_vocab, bos = r->info.bos_id;
    cli_progress_start(&pr, "kv-quality");
    for (size_t s0 = 0; s0 < n; s0 += r->seg) {
        size_t k = n - s0 < r->seg ? n - s0 : r->seg;
        if (cli_bos_window(r->c, bos, tok + s0, k, r->win, r->lf)) return -1;
        if (s0 == 0 && kv_errors(r->c, &r->info, r->rows, r->n_rows)) return -1;
        cli_score_rows(r->lf, r->lf, V, r->win, 0, k, &r->full);
        for (int s = 0; s < r->n_rows; s++) {
            if (cli_bos_window(r->rows[s].c, bos, tok + s0, k, r->win, r->lq)) return -1;
            cli_score_rows(r->lf, r->lq, V, r->win, 0, k, &r->rows[s].s);
        }
        cli_progress_update(&pr, s0 + k, n);
    }
    cli_progress_end(&pr);
    return 0;
}

static void quality_report(const quality_run *r, const quality_opts *o, size_t n, double secs)
{
    printf("model: %s, head_dim %d; text: %s, %zu tokens in segments of %zu after BOS\n", r->info.name,
           r->info.head_dim, o->file, n, r->seg);
    printf("vector errors and logit errors: the first segment's KV cache (%d layers x 2 x %d heads x %zu positions)\n\n",
           r->info.n_layer, r->info.n_head_kv, (n < r->seg ? n : r->seg) + 1);
    if (o->with)
        printf("(bits and errors are those of the scheme on every vector; '%s' applies to ppl/KL/top-1 only)\n\n",
               o->with);
    print_table(r->rows, r->n_rows, r->full.nll, r->full.n);
    printf("\ntime: %.1f s\n", secs);
}

/* The text's tokens (no BOS), cut to -n; NULL after a message. */
static int32_t *quality_tokens(const quality_opts *o, const skv_model *m, const skv_model_info *info, size_t *n)
{
    size_t len = 0;
    char *text = cli_read_file(o->file, &len);
    int32_t *tok = text ? cli_tokenize(m, text, len, 0, n) : NULL;
    free(text);
    if (tok && o->max_tok > 0 && *n > (size_t)o->max_tok) *n = (size_t)o->max_tok;
    if (tok && (info->bos_id < 0 || *n == 0)) {
        cli_error(*n ? "the model has no BOS token" : "the text has no tokens");
        free(tok);
        return NULL;
    }
    return tok;
}

int cmd_kvquality(int argc, char **argv)
{
    quality_opts o = {.schemes = "f16,q8_0,q4_0,tq2,tq3,tq4,tq2p,tq3p,tq4p", .threads = 1, .max_tok = 4096};
    quality_run r = {.n_rows = 0};
    int rc = cli_parse(&quality_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (!o.file) return cli_usage(&quality_cmd, "needs a text file (-f FILE)");
    if (parse_schemes(o.schemes, o.with, r.rows, &r.n_rows)) return CLI_USAGE;
    size_t n = 0;
    skv_model *m = cli_load_model(o.model);
    int32_t *tok = NULL;
    double t0 = cli_now();
    rc = CLI_FAIL;
    if (m) skv_model_get_info(m, &r.info);
    if (m && (tok = quality_tokens(&o, m, &r.info, &n)) &&
        !quality_setup(&r, m, o.ctx ? o.ctx : r.info.n_ctx_train, o.threads) && !quality_segments(&r, tok, n)) {
        quality_report(&r, &o, n, cli_now() - t0);
        rc = CLI_OK;
    }
    for (int s = 0; s < r.n_rows; s++) skv_ctx_free(r.rows[s].c);
    skv_ctx_free(r.c);
    free(tok);
    free(r.win);
    free(r.lf);
    free(r.lq);
    skv_model_free(m);
    return rc;
}
