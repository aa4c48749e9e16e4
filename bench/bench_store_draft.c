/* Store-prefix drafts (issue 16): speculative restore of model-coded sessions whose
 * beginning the store already holds, vs raw tokens + prefill and vs token by token.
 * The store gets `stored` sessions of `len` tokens cut from TEXT; the restored sessions
 * are: 'copy' (a stored session again), 'edit' (a stored session's first 3/4, then
 * other text) and 'new' (text the store does not hold: drafts fall back to n-grams).
 * Usage: bench_store_draft MODEL TEXT [len=800] [stored=4]
 * CPU seconds of the process and wall seconds, best of 3; every restore is verified
 * (KV digest) and checked to give the session's tokens.
 * Prints Markdown rows: | session | restore | tokens | CPU s | wall s | vs raw (CPU) |
 * vs raw (wall) | drafted | accepted | tokens/pass | */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "seqkv.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    skv_model *m;
    skv_store *st;
    int n_ctx;
} bench;

static int encode(bench *b, int codec, const int32_t *tok, size_t n, skv_session **out, uint8_t **data)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e;
    size_t size = 0;
    char err[256];
    int rc;
    ep.codec = codec;
    ep.n_ctx = b->n_ctx;
    if ((rc = skv_encoder_create(b->m, &ep, &e, NULL, 0))) return rc;
    if (!(rc = skv_encoder_append(e, tok, n, NULL))) rc = skv_encoder_finish(e, data, &size);
    skv_encoder_free(e);
    return rc ? rc : skv_session_open(*data, size, out, err, sizeof err);
}

/* One verified restore: CPU and wall seconds, or -1. */
static int restore_once(bench *b, const skv_session *s, int draft, const int32_t *want, size_t n,
                        skv_restore_stats *st, double *cpu, double *wall)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_restore_params p = {.verify = 1, .draft = draft, .draft_max = 64, .stats = st, .draft_fn = skv_store_draft,
                            .draft_user = b->st};
    skv_ctx *c = NULL;
    int32_t *tok = malloc(n * sizeof *tok);
    int rc;
    cp.n_ctx = b->n_ctx;
    if (!tok || (rc = skv_ctx_create(b->m, &cp, &c))) return -1;
    memset(st, 0, sizeof *st);
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
    rc = skv_session_restore_segment(s, b->m, 0, c, &p, tok, n);
    *cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    *wall = clock_s(CLOCK_MONOTONIC) - w0;
    if (!rc && memcmp(tok, want, n * sizeof *tok)) rc = SKV_ERR_MISMATCH;
    if (rc) fprintf(stderr, "bench_store_draft: restore failed (%d): %s\n", rc, skv_ctx_last_error(c));
    skv_ctx_free(c);
    free(tok);
    return rc;
}

static int row(bench *b, const char *label, const char *how, const skv_session *s, int draft, const int32_t *want,
               size_t n, double raw[2])
{
    skv_restore_stats st, best_st = {0, 0, 0, 0};
    double cpu = 0, wall = 0, bc = -1, bw = -1;
    for (int r = 0; r < 3; r++) {
        if (restore_once(b, s, draft, want, n, &st, &cpu, &wall)) return -1;
        if (bc < 0 || cpu < bc) bc = cpu, best_st = st;
        if (bw < 0 || wall < bw) bw = wall;
    }
    if (raw[0] <= 0) raw[0] = bc, raw[1] = bw;
    printf("| %s | %s | %zu | %.3f | %.3f | %.2f | %.2f | %llu | %llu | %.2f |\n", label, how, n, bc, bw, raw[0] / bc,
           raw[1] / bw, (unsigned long long)best_st.n_drafted, (unsigned long long)best_st.n_accepted,
           best_st.n_passes ? (double)n / (double)best_st.n_passes : 0.0);
    fflush(stdout);
    return 0;
}

/* The three restores of one session's tokens. */
static int rows(bench *b, const char *label, const int32_t *tok, size_t n)
{
    skv_session *sr = NULL, *sm = NULL;
    uint8_t *dr = NULL, *dm = NULL;
    double raw[2] = {0, 0};
    int rc = encode(b, SKV_CODEC_TOKENS, tok, n, &sr, &dr);
    if (!rc) rc = encode(b, SKV_CODEC_MODEL, tok, n, &sm, &dm);
    if (!rc) rc = row(b, label, "raw tokens + prefill", sr, SKV_DRAFT_AUTO, tok, n, raw);
    if (!rc) rc = row(b, label, "model-coded, token by token", sm, SKV_DRAFT_NONE, tok, n, raw);
    if (!rc) rc = row(b, label, "model-coded, speculative, store-prefix drafts", sm, SKV_DRAFT_EXTERN, tok, n, raw);
    skv_session_free(sr);
    skv_session_free(sm);
    free(dr);
    free(dm);
    return rc;
}

int main(int argc, char **argv)
{
    char err[512], dir[] = "/tmp/skv_bench_store_draft_XXXXXX", cmd[600];
    size_t len = 0, n = 0;
    bench b = {0};
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TEXT [len=800] [stored=4]\n", argv[0]);
        return 2;
    }
    size_t L = argc > 3 ? (size_t)atol(argv[3]) : 800, k = argc > 4 ? (size_t)atol(argv[4]) : 4;
    char *text = bench_slurp(argv[2], 0, &len);
    int32_t *tok = text ? malloc((len + 16) * sizeof *tok) : NULL, *ses = malloc(L * sizeof *ses);
    if (!tok || !ses || L < 8 || skv_model_load(argv[1], NULL, &b.m, err, sizeof err) ||
        skv_model_tokenize(b.m, text, len, 1, tok, len + 16, &n) || n < L * (k + 2) || !mkdtemp(dir) ||
        skv_store_open(dir, b.m, SKV_STORE_CREATE, NULL, &b.st, err, sizeof err)) {
        fprintf(stderr, "bench_store_draft: cannot set up (model, text of >= %zu tokens, store)\n", L * (k + 2));
        return 1;
    }
    b.n_ctx = (int)L;
    for (size_t i = 0; i < k; i++) { /* stored: sessions i = tokens [i L, (i + 1) L), BOS first */
        char name[32];
        memcpy(ses, tok + i * L, L * sizeof *ses);
        ses[0] = tok[0];
        snprintf(name, sizeof name, "s%zu", i);
        if (skv_store_put(b.st, name, ses, L, NULL)) return 1;
    }
    int rc = 0;
    memcpy(ses, tok + L, L * sizeof *ses); /* copy: stored session 1 */
    ses[0] = tok[0];
    rc |= rows(&b, "copy of a stored session", ses, L);
    memcpy(ses + 3 * L / 4, tok + (k + 1) * L, (L - 3 * L / 4) * sizeof *ses); /* edit: its first 3/4 */
    rc |= rows(&b, "stored session's first 3/4, then new text", ses, L);
    memcpy(ses, tok + k * L, L * sizeof *ses); /* new: not in the store */
    ses[0] = tok[0];
    rc |= rows(&b, "text the store does not hold", ses, L);
    skv_store_close(b.st);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) rc = 1;
    skv_model_free(b.m);
    free(tok);
    free(ses);
    free(text);
    return rc ? 1 : 0;
}
