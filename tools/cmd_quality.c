/* seqkv kv-quality: what per-vector KV quantization costs on a real text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_score_row(const float *ref, const float *q, int n_vocab, int32_t target, cli_score *s)
{
    double mr = ref[0], mq = q[0], zr = 0.0, zq = 0.0, kl = 0.0;
    int ar = 0, aq = 0;
    for (int i = 1; i < n_vocab; i++) {
        if (ref[i] > ref[ar]) ar = i;
        if (q[i] > q[aq]) aq = i;
    }
    mr = ref[ar], mq = q[aq];
    for (int i = 0; i < n_vocab; i++) zr += exp((double)ref[i] - mr), zq += exp((double)q[i] - mq);
    double lzr = log(zr), lzq = log(zq);
    for (int i = 0; i < n_vocab; i++) {
        double lp = (double)ref[i] - mr - lzr, lq = (double)q[i] - mq - lzq;
        kl += exp(lp) * (lp - lq);
    }
    s->kl += kl > 0.0 ? kl : 0.0; /* rounding can make an exact match a hair negative */
    s->nll += lzq - ((double)q[target] - mq);
    s->top1 += ar == aq;
    s->n++;
}

static const char quality_help[] =
    "usage: seqkv kv-quality [-m MODEL] -f TEXT [--schemes LIST] [--with OPTS] [-c CTX] [-n TOKENS] [-t THREADS]\n\n"
    "Measures per-vector KV quantization schemes on the model's real KV cache of TEXT and prints a\n"
    "Markdown table, one row per scheme:\n"
    "  bits/value     stored bits per cached value, norms and scales included\n"
    "  K/V rel. MSE   sum ||x - x~||^2 / sum ||x||^2 over every head vector of the first window\n"
    "  logit err      RMS error of the attention logits q.k/sqrt(d) relative to their RMS, with the\n"
    "                 cached keys themselves as queries (q = k_i exact, keys k_j~ for j <= i, same head)\n"
    "  ppl, KL, top-1 the text coded as in `perplexity` protocol (b) (segments of CTX-1 tokens after\n"
    "                 BOS, every token scored) with the whole KV cache held in the scheme (kv=SCHEME),\n"
    "                 against the full-precision run: perplexity, mean KL(p_full || p_quant) in nats\n"
    "                 per token, top-1 agreement\n"
    "  --schemes LIST comma-separated (default f16,q8_0,q4_0,tq2,tq3,tq4,tq2p,tq3p,tq4p)\n"
    "  --with OPTS    kv_quant options appended to every scheme, e.g. keep-first=1,keep-last=1,window=64\n"
    "  -c CTX         window length (default: the model's context)\n"
    "  -n TOKENS      text tokens used (default 4096; 0 = all)\n";

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

int cmd_kvquality(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *schemes = "f16,q8_0,q4_0,tq2,tq3,tq4,tq2p,tq3p,tq4p", *with = NULL;
    long ctx = 0, threads = 1, max_tok = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(quality_help, stdout);
            return CLI_OK;
        }
        int takes = !strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "--schemes") || !strcmp(a, "--with") ||
                    !strcmp(a, "-c") || !strcmp(a, "-t") || !strcmp(a, "-n");
        if (!takes) {
            cli_error("unknown option '%s' (see --help)", a);
            return CLI_USAGE;
        }
        if (!v) {
            cli_error("option %s needs a value", a);
            return CLI_USAGE;
        }
        i++;
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-f")) file = v;
        else if (!strcmp(a, "--schemes")) schemes = v;
        else if (!strcmp(a, "--with")) with = v;
        else if (!strcmp(a, "-c") ? cli_parse_int(a, v, 2, 1 << 24, &ctx)
                 : !strcmp(a, "-t") ? cli_parse_int(a, v, 1, 256, &threads)
                                    : cli_parse_int(a, v, 0, 1 << 30, &max_tok))
            return CLI_USAGE;
    }
    if (!file) {
        cli_error("kv-quality needs a text file (-f FILE)");
        return CLI_USAGE;
    }
    scheme_row rows[MAX_SCHEMES];
    int n_rows = 0;
    if (parse_schemes(schemes, with, rows, &n_rows)) return CLI_USAGE;
    size_t len = 0, n = 0;
    char *text = cli_read_file(file, &len);
    skv_model *m = text ? cli_load_model(model) : NULL;
    int32_t *tok = m ? cli_tokenize(m, text, len, 0, &n) : NULL, *win = NULL;
    float *lf = NULL, *lq = NULL;
    skv_ctx *c = NULL;
    int rc = CLI_FAIL;
    skv_model_info info;
    cli_score full = {0};
    cli_progress pr;
    if (!tok) goto done;
    skv_model_get_info(m, &info);
    if (!ctx) ctx = info.n_ctx_train;
    if (max_tok && n > (size_t)max_tok) n = (size_t)max_tok;
    if (info.bos_id < 0 || n == 0) {
        cli_error(n ? "the model has no BOS token" : "the text has no tokens");
        goto done;
    }
    size_t V = (size_t)info.n_vocab, seg = (size_t)ctx - 1;
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = (int)ctx;
    p.n_threads = (int)threads;
    win = malloc((size_t)ctx * sizeof *win);
    lf = malloc((size_t)ctx * V * sizeof *lf);
    lq = malloc((size_t)ctx * V * sizeof *lq);
    if (!win || !lf || !lq || skv_ctx_create(m, &p, &c)) goto done;
    for (int s = 0; s < n_rows; s++) {
        char err[256] = "cannot create a context";
        p.kv_quant = rows[s].spec;
        if (skv_kv_quant_check(rows[s].spec, m, err, sizeof err) || skv_ctx_create(m, &p, &rows[s].c)) {
            cli_error("%s: %s", rows[s].spec, err);
            goto done;
        }
    }
    double t0 = cli_now();
    cli_progress_start(&pr, "kv-quality");
    for (size_t s0 = 0; s0 < n; s0 += seg) {
        size_t k = n - s0 < seg ? n - s0 : seg;
        win[0] = info.bos_id;
        memcpy(win + 1, tok + s0, k * sizeof *win);
        skv_ctx_truncate(c, 0);
        if (skv_prefill(c, win, k + 1, SKV_LOGITS_ALL, lf)) goto done;
        if (s0 == 0 && kv_errors(c, &info, rows, n_rows)) goto done;
        for (size_t j = 0; j < k; j++) cli_score_row(lf + j * V, lf + j * V, info.n_vocab, win[j + 1], &full);
        for (int s = 0; s < n_rows; s++) {
            skv_ctx_truncate(rows[s].c, 0);
            if (skv_prefill(rows[s].c, win, k + 1, SKV_LOGITS_ALL, lq)) goto done;
            for (size_t j = 0; j < k; j++) cli_score_row(lf + j * V, lq + j * V, info.n_vocab, win[j + 1], &rows[s].s);
        }
        cli_progress_update(&pr, s0 + k, n);
    }
    cli_progress_end(&pr);
    printf("model: %s, head_dim %d; text: %s, %zu tokens in segments of %zu after BOS\n", info.name, info.head_dim,
           file, n, seg);
    printf("vector errors and logit errors: the first segment's KV cache (%d layers x 2 x %d heads x %zu positions)\n\n",
           info.n_layer, info.n_head_kv, (n < seg ? n : seg) + 1);
    if (with) printf("(bits and errors are those of the scheme on every vector; '%s' applies to ppl/KL/top-1 only)\n\n", with);
    print_table(rows, n_rows, full.nll, full.n);
    printf("\ntime: %.1f s\n", cli_now() - t0);
    rc = CLI_OK;
done:
    for (int s = 0; s < n_rows; s++) skv_ctx_free(rows[s].c);
    skv_ctx_free(c);
    free(text);
    free(tok);
    free(win);
    free(lf);
    free(lq);
    skv_model_free(m);
    return rc;
}
