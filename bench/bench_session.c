/* Session codecs vs the plain engine: encode and restore tokens/s for the model and
 * tokens codecs, next to plain prefill and token-by-token decode of the same tokens,
 * so the coder's own share of the time is visible.
 * Usage: bench_session MODEL TEXT [n_ctx=0] [threads=1]
 * Prints Markdown rows: | what | tokens | seconds | tokens/s | bits/token | */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "seqkv.h"
#include "core/util.h"

static void row(const char *what, size_t n, double secs, double bits)
{
    printf("| %s | %zu | %.3f | %.0f | ", what, n, secs, (double)n / secs);
    if (bits > 0) printf("%.3f |\n", bits / (double)n);
    else printf("- |\n");
}

int main(int argc, char **argv)
{
    char err[512];
    skv_model *m;
    skv_model_info info;
    size_t len = 0, n = 0;
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TEXT [n_ctx] [threads]\n", argv[0]);
        return 2;
    }
    int n_ctx = argc > 3 ? atoi(argv[3]) : 0, threads = argc > 4 ? atoi(argv[4]) : 1;
    char *text = bench_slurp(argv[2], 0, &len);
    if (!text || skv_model_load(argv[1], NULL, &m, err, sizeof err)) {
        fprintf(stderr, "bench_session: cannot load %s\n", text ? argv[1] : argv[2]);
        return 1;
    }
    skv_model_get_info(m, &info);
    int32_t *tok = malloc((len + 16) * sizeof *tok);
    skv_model_tokenize(m, text, len, 1, tok, len + 16, &n);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    skv_ctx *c;
    if (skv_ctx_create(m, &cp, &c)) return 1;
    size_t S = (size_t)skv_ctx_n_ctx(c);
    /* plain engine over the same segments */
    double t0 = skv_now();
    for (size_t s0 = 0; s0 < n; s0 += S) {
        size_t k = n - s0 < S ? n - s0 : S;
        skv_ctx_truncate(c, 0);
        skv_ctx_prefill(c, tok + s0, k, SKV_LOGITS_NONE, NULL);
    }
    row("plain prefill (engine)", n, skv_now() - t0, 0);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    t0 = skv_now();
    for (size_t s0 = 0; s0 < n; s0 += S) {
        size_t k = n - s0 < S ? n - s0 : S;
        skv_ctx_truncate(c, 0);
        for (size_t i = 0; i < k; i++) skv_ctx_decode(c, tok[s0 + i], i + 1 < k ? logits : NULL);
    }
    row("plain decode, token by token (engine)", n, skv_now() - t0, 0);
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params ep = skv_encoder_default_params();
        skv_encoder *e;
        uint8_t *data;
        size_t size;
        ep.codec = codec ? SKV_CODEC_MODEL : SKV_CODEC_TOKENS;
        ep.n_ctx = n_ctx;
        ep.n_threads = threads;
        ep.segment = 1;
        skv_encoder_create(m, &ep, &e, NULL, 0);
        t0 = skv_now();
        skv_encoder_append(e, tok, n, NULL);
        skv_encoder_finish(e, &data, &size);
        double te = skv_now() - t0;
        const char *name = codec ? "model" : "tokens";
        char label[96];
        snprintf(label, sizeof label, "encode, codec %s", name);
        row(label, n, te, (double)size * 8);
        skv_session *s;
        skv_session_info si;
        if (skv_session_open(data, size, &s, err, sizeof err)) return 1;
        skv_session_get_info(s, &si);
        int32_t *out = malloc(si.n_ctx * sizeof *out);
        skv_restore_params rp = {.verify = 1};
        t0 = skv_now();
        for (uint32_t i = 0; i < si.n_segments; i++)
            if (skv_session_restore_segment(s, m, i, c, &rp, out, si.n_ctx)) {
                fprintf(stderr, "bench_session: %s\n", skv_ctx_last_error(c));
                return 1;
            }
        snprintf(label, sizeof label, "restore + verify, codec %s", name);
        row(label, n, skv_now() - t0, (double)size * 8);
        free(out);
        free(data);
        skv_session_free(s);
        skv_encoder_free(e);
    }
    free(logits);
    free(tok);
    free(text);
    skv_ctx_free(c);
    skv_model_free(m);
    return 0;
}
