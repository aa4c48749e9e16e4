/* skv-oracle-eval: llama.cpp's numbers for a GGUF and a text, as JSON on stdout,
 * computed by the prebuilt libllama of the node-llama-cpp npm package. The
 * oracle that tests/test_oracle.py compares seqkv against (docs/oracle.md).
 *
 *   skv-oracle-eval ppl  -m MODEL -f TEXT [-c CTX] [-t THREADS]
 *   skv-oracle-eval top1 -m MODEL -f TEXT [-c CTX] [-t THREADS]
 *
 * ppl: llama-perplexity's protocol (tools/perplexity in llama.cpp, read as the
 *   spec): tokenize TEXT with BOS; n = n_tokens / CTX non-overlapping chunks of
 *   CTX tokens, the first token of each replaced by BOS, the KV cache cleared
 *   between chunks; the logits at positions CTX/2 .. CTX-2 of a chunk score the
 *   next token (CTX/2 - 1 tokens per chunk); ppl = exp(mean negative log-prob).
 * top1: one sequence, BOS + TEXT's tokens, cut to CTX; the argmax id of the
 *   logits at every position (lowest id on a tie) and its margin over the
 *   runner-up.
 * Only the AVX2 CPU variant is loaded (never the AMX one, see common.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "llama.h"

struct opts {
    const char *mode, *model, *text;
    int ctx, threads;
};

struct oracle {
    struct llama_model *model;
    struct llama_context *lctx;
    const struct llama_vocab *vocab;
    int n_vocab;
    llama_token *tok; /* (n_tok) TEXT's tokens, BOS first */
    int n_tok;
};

static int parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->threads = 2;
    if (argc < 2)
        return -1;
    o->mode = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "-m") == 0)
            o->model = v;
        else if (strcmp(k, "-f") == 0)
            o->text = v;
        else if (strcmp(k, "-c") == 0)
            o->ctx = atoi(v);
        else if (strcmp(k, "-t") == 0)
            o->threads = atoi(v);
        else
            return -1;
    }
    if (argc % 2 != 0 || !o->model || !o->text || o->ctx < 4 || o->threads < 1)
        return -1;
    return strcmp(o->mode, "ppl") == 0 || strcmp(o->mode, "top1") == 0 ? 0 : -1;
}

/* -> the whole file in a malloc'd buffer, *len its size; NULL on failure. */
static char *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)*len + 1);
        if (buf && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

static int tokenize_file(struct oracle *or, const char *path)
{
    long len = 0;
    char *text = read_file(path, &len);
    if (!text || len > 0x3fffffff) {
        free(text);
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    int cap = (int)len + 8; /* SPM with byte fallback: at most a token per byte, + BOS + dummy prefix */
    or->tok = malloc(sizeof *or->tok * (size_t)cap);
    or->n_tok = or->tok ? llama_tokenize(or->vocab, text, (int32_t)len, or->tok, cap, true, false) : -1;
    free(text);
    if (or->n_tok < 1) {
        fprintf(stderr, "tokenizing %s failed\n", path);
        return -1;
    }
    return 0;
}

static int oracle_open(struct oracle *or, const struct opts *o)
{
    memset(or, 0, sizeof *or);
    struct llama_model_params mp = llama_model_default_params();
    or->model = llama_model_load_from_file(o->model, mp);
    if (!or->model)
        return -1;
    or->vocab = llama_model_get_vocab(or->model);
    or->n_vocab = llama_vocab_n_tokens(or->vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)o->ctx;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    or->lctx = llama_init_from_model(or->model, cp);
    if (!or->lctx)
        return -1;
    return tokenize_file(or, o->text);
}

static void oracle_close(struct oracle *or)
{
    free(or->tok);
    if (or->lctx)
        llama_free(or->lctx);
    if (or->model)
        llama_model_free(or->model);
}

/* Decodes tok[0..n) at positions 0..n-1 after clearing the KV cache; logits
 * are kept for positions >= first. */
static int decode_window(struct oracle *or, const llama_token *tok, int n, int first)
{
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int k = 0; k < n; k++) {
        b.token[k] = tok[k];
        b.pos[k] = k;
        b.n_seq_id[k] = 1;
        b.seq_id[k][0] = 0;
        b.logits[k] = k >= first;
    }
    b.n_tokens = n;
    llama_memory_clear(llama_get_memory(or->lctx), true);
    int rc = llama_decode(or->lctx, b);
    llama_batch_free(b);
    return rc;
}

/* -> natural log of softmax(logits)[tok], the max taken in float and the sum
 * of exponentials in double, as llama-perplexity does. */
static double log_prob(const float *logits, int n_vocab, int tok)
{
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++)
        sum += expf(logits[i] - mx);
    return (double)(logits[tok] - mx) - log(sum);
}

/* Scores one chunk starting at token `start`; adds its negative log-likelihood. */
static int ppl_chunk(struct oracle *or, int start, int ctx, double *nll)
{
    int first = ctx / 2;
    llama_token *win = malloc(sizeof *win * (size_t)ctx);
    if (!win)
        return -1;
    memcpy(win, or->tok + start, sizeof *win * (size_t)ctx);
    win[0] = llama_vocab_bos(or->vocab);
    int rc = decode_window(or, win, ctx, first);
    free(win);
    if (rc != 0)
        return -1;
    for (int k = first; k < ctx - 1; k++)
        *nll -= log_prob(llama_get_logits_ith(or->lctx, k), or->n_vocab, or->tok[start + k + 1]);
    return 0;
}

static int run_ppl(struct oracle *or, int ctx)
{
    int n_chunk = or->n_tok / ctx, per = ctx - ctx / 2 - 1;
    if (n_chunk < 1) {
        fprintf(stderr, "the text has %d tokens, fewer than one chunk of %d\n", or->n_tok, ctx);
        return -1;
    }
    double nll = 0.0;
    printf("{\"mode\": \"ppl\", \"ctx\": %d, \"n_tokens\": %d, \"chunks\": %d, \"scored\": %d, \"chunk_ppl\": [",
           ctx, or->n_tok, n_chunk, n_chunk * per);
    for (int c = 0; c < n_chunk; c++) {
        double before = nll;
        if (ppl_chunk(or, c * ctx, ctx, &nll) != 0)
            return -1;
        printf("%s%.6f", c ? ", " : "", exp((nll - before) / per));
    }
    printf("], \"nll\": %.9f, \"ppl\": %.6f}\n", nll / (n_chunk * per), exp(nll / (n_chunk * per)));
    return 0;
}

/* Prints the argmax id of a row (lowest id on a tie) and its margin over the runner-up. */
static void print_top1(const float *l, int n_vocab, int sep, FILE *ids, FILE *margins)
{
    int best = 0;
    for (int i = 1; i < n_vocab; i++)
        best = l[i] > l[best] ? i : best;
    float second = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        if (i != best && l[i] > second)
            second = l[i];
    fprintf(ids, "%s%d", sep ? ", " : "", best);
    fprintf(margins, "%s%.4f", sep ? ", " : "", (double)(l[best] - second));
}

static int run_top1(struct oracle *or, int ctx)
{
    int n = or->n_tok < ctx ? or->n_tok : ctx;
    if (decode_window(or, or->tok, n, 0) != 0)
        return -1;
    char *mbuf = NULL;
    size_t mlen = 0;
    FILE *margins = open_memstream(&mbuf, &mlen);
    if (!margins)
        return -1;
    printf("{\"mode\": \"top1\", \"ctx\": %d, \"n_positions\": %d, \"tokens\": [", ctx, n);
    for (int k = 0; k < n; k++)
        printf("%s%d", k ? ", " : "", or->tok[k]);
    printf("], \"top1\": [");
    for (int k = 0; k < n; k++)
        print_top1(llama_get_logits_ith(or->lctx, k), or->n_vocab, k, stdout, margins);
    fclose(margins);
    printf("], \"margin\": [%s]}\n", mbuf);
    free(mbuf);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: skv-oracle-eval ppl|top1 -m MODEL -f TEXT [-c CTX] [-t THREADS]\n");
        return 2;
    }
    oracle_quiet_log();
    if (oracle_load_cpu_backend() != 0)
        return 1;
    llama_backend_init();
    struct oracle or;
    int rc = oracle_open(&or, &o);
    if (rc == 0)
        rc = strcmp(o.mode, "ppl") == 0 ? run_ppl(&or, o.ctx) : run_top1(&or, o.ctx);
    oracle_close(&or);
    llama_backend_free();
    if (rc != 0)
        fprintf(stderr, "skv-oracle-eval: failed (%s)\n", o.model);
    return rc != 0;
}
