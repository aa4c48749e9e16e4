/* Restore speed of a session: raw tokens + one batched prefill (codec tokens) vs the
 * model codec decoded token by token vs decoded speculatively with n-gram drafts
 * (several block limits), with the drafts' acceptance, vs every segment restored together
 * as one queue (skv_session_restore_batch). Every restore verifies the KV
 * digest, and the speculative ones are checked to give the same tokens.
 * Usage: bench_restore MODEL TEXT [label] [max_bytes=24000] [n_ctx=0] [threads=1] [repeat=1] [nospec]
 * repeat > 1 stores the first max_bytes of TEXT that many times in a row (a session that
 * quotes earlier content again: the case n-gram drafts are made for).
 * Seconds are CPU seconds of the process (see now()), best of enough repetitions to
 * restore about 20000 tokens.
 * Prints Markdown rows:
 * | model | text | restore | tokens | seconds | tokens/s | vs raw | drafted | accepted | tokens/pass | */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "seqkv.h"

/* CPU time of the process: on a shared, loaded machine it tracks the work done far
 * better than wall time (restores run on the calling thread at threads=1). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int encode(skv_model *m, int codec, const int32_t *tok, size_t n, int n_ctx, int threads, uint8_t **data,
                  size_t *size)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e;
    int rc;
    ep.codec = codec;
    ep.n_ctx = n_ctx;
    ep.n_threads = threads;
    ep.segment = 1;
    if ((rc = skv_encoder_create(m, &ep, &e, NULL, 0))) return rc;
    if (!(rc = skv_encoder_append(e, tok, n, NULL))) rc = skv_encoder_finish(e, data, size);
    skv_encoder_free(e);
    return rc;
}

/* Restores every segment; returns seconds, or -1 on error (message on stderr). */
static double restore_once(skv_model *m, const uint8_t *data, size_t size, skv_ctx *c, int draft, int draft_max,
                           int32_t *out, skv_restore_stats *st)
{
    char err[512];
    skv_session *s;
    skv_session_info si;
    if (skv_session_open(data, size, &s, err, sizeof err)) {
        fprintf(stderr, "bench_restore: %s\n", skv_ctx_last_error(c));
        return -1;
    }
    skv_session_get_info(s, &si);
    skv_restore_params rp;
    memset(&rp, 0, sizeof rp);
    rp.verify = 1;
    rp.draft = draft;
    rp.draft_max = draft_max;
    rp.stats = st;
    memset(st, 0, sizeof *st);
    double t0 = now();
    size_t at = 0;
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        if (skv_session_restore_segment(s, m, i, c, &rp, out + at, si.n_tokens - at)) {
            fprintf(stderr, "bench_restore: %s\n", skv_ctx_last_error(c));
            skv_session_free(s);
            return -1;
        }
        at += nt;
    }
    double t = now() - t0;
    skv_session_free(s);
    return t;
}

/* Best of enough repetitions to restore about 20000 tokens in all (short texts are noisy). */
static double restore(skv_model *m, const uint8_t *data, size_t size, size_t n, skv_ctx *c, int draft,
                      int draft_max, int32_t *out, skv_restore_stats *st)
{
    size_t reps = n >= 20000 ? 1 : 20000 / n;
    double best = -1;
    if (reps > 20) reps = 20;
    for (size_t r = 0; r < reps; r++) {
        double t = restore_once(m, data, size, c, draft, draft_max, out, st);
        if (t < 0) return -1;
        if (best < 0 || t < best) best = t;
    }
    return best;
}

/* Every segment restored as one queue with skv_session_restore_batch (each its own
 * context): seconds of the best repetition, or -1. */
static double restore_batch(skv_model *m, const uint8_t *data, size_t size, size_t n, int threads, int32_t *out,
                            skv_restore_stats *st, uint32_t *n_seg)
{
    char err[512];
    skv_session *s;
    skv_session_info si;
    if (skv_session_open(data, size, &s, err, sizeof err)) return -1;
    skv_session_get_info(s, &si);
    *n_seg = si.n_segments;
    skv_restore_job *jobs = calloc(si.n_segments, sizeof *jobs);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = (int)si.n_ctx;
    cp.n_threads = threads;
    size_t at = 0, reps = n >= 20000 ? 1 : 20000 / n;
    double best = -1;
    for (uint32_t i = 0; jobs && i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        jobs[i] = (skv_restore_job){.session = s, .segment = i, .tokens = out + at, .cap = nt};
        if (skv_ctx_create(m, &cp, &jobs[i].ctx)) return -1;
        at += nt;
    }
    skv_restore_params rp = {.verify = 1, .stats = st};
    for (size_t r = 0; jobs && r < (reps > 20 ? 20 : reps); r++) {
        memset(st, 0, sizeof *st);
        double t0 = now();
        if (skv_session_restore_batch(m, jobs, si.n_segments, &rp)) {
            for (uint32_t i = 0; i < si.n_segments; i++)
                if (jobs[i].status) fprintf(stderr, "bench_restore: batch job %u: %s\n", i, skv_ctx_last_error(jobs[i].ctx));
            best = -1;
            break;
        }
        double t = now() - t0;
        if (best < 0 || t < best) best = t;
    }
    for (uint32_t i = 0; jobs && i < si.n_segments; i++) skv_ctx_free(jobs[i].ctx);
    free(jobs);
    skv_session_free(s);
    return best;
}

int main(int argc, char **argv)
{
    char err[512];
    skv_model *m;
    skv_model_info info;
    size_t len = 0, n = 0;
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TEXT [label] [max_bytes] [n_ctx] [threads]\n", argv[0]);
        return 2;
    }
    const char *label = argc > 3 ? argv[3] : argv[2];
    size_t max_bytes = argc > 4 ? (size_t)atol(argv[4]) : 24000;
    int n_ctx = argc > 5 ? atoi(argv[5]) : 0, threads = argc > 6 ? atoi(argv[6]) : 1;
    int repeat = argc > 7 ? atoi(argv[7]) : 1;
    int no_spec = argc > 8 && !strcmp(argv[8], "nospec"); /* skip the speculative rows */
    char *text = bench_slurp(argv[2], max_bytes ? max_bytes : 24000, &len);
    if (text && repeat > 1 && repeat < 100) {
        char *r = malloc(len * (size_t)repeat + 1);
        if (!r) return 1;
        for (int i = 0; i < repeat; i++) memcpy(r + len * (size_t)i, text, len);
        len *= (size_t)repeat;
        r[len] = 0;
        free(text);
        text = r;
    }
    if (!text || skv_model_load(argv[1], NULL, &m, err, sizeof err)) {
        fprintf(stderr, "bench_restore: cannot load %s\n", text ? argv[1] : argv[2]);
        return 1;
    }
    skv_model_get_info(m, &info);
    int32_t *tok = malloc((len + 16) * sizeof *tok), *out = malloc((len + 16) * sizeof *out);
    if (!tok || !out || skv_model_tokenize(m, text, len, 1, tok, len + 16, &n) || n < 2) {
        fprintf(stderr, "bench_restore: cannot tokenize %s\n", argv[2]);
        return 1;
    }
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    skv_ctx *c;
    if (skv_ctx_create(m, &cp, &c)) return 1;
    uint8_t *raw = NULL, *coded = NULL;
    size_t raw_size = 0, coded_size = 0;
    if (encode(m, SKV_CODEC_TOKENS, tok, n, n_ctx, threads, &raw, &raw_size) ||
        encode(m, SKV_CODEC_MODEL, tok, n, n_ctx, threads, &coded, &coded_size)) {
        fprintf(stderr, "bench_restore: encoding failed\n");
        return 1;
    }
    skv_restore_stats st;
    double t_raw = restore(m, raw, raw_size, n, c, SKV_DRAFT_AUTO, 0, out, &st);
    if (t_raw < 0) return 1;
    printf("| %s | %s | raw tokens + prefill (%.2f bits/token) | %zu | %.3f | %.0f | 1.00 | - | - | - |\n", info.name,
           label, 8.0 * (double)raw_size / (double)n, n, t_raw, (double)n / t_raw);
    static const struct { const char *name; int draft, draft_max; } runs[] = {
        {"model-coded, token by token", SKV_DRAFT_NONE, 0},
        {"model-coded, speculative n-gram, block <= 4", SKV_DRAFT_NGRAM, 4},
        {"model-coded, speculative n-gram, block <= 16", SKV_DRAFT_NGRAM, 16},
        {"model-coded, speculative n-gram, block <= 64", SKV_DRAFT_NGRAM, 64},
    };
    for (size_t k = 0; k < (no_spec ? 1 : sizeof runs / sizeof runs[0]); k++) {
        memset(out, 0, n * sizeof *out);
        double t = restore(m, coded, coded_size, n, c, runs[k].draft, runs[k].draft_max, out, &st);
        if (t < 0) return 1;
        if (memcmp(out, tok, n * sizeof *tok)) {
            fprintf(stderr, "bench_restore: %s restored different tokens\n", runs[k].name);
            return 1;
        }
        printf("| %s | %s | %s", info.name, label, runs[k].name);
        if (k == 0) printf(" (%.2f bits/token)", 8.0 * (double)coded_size / (double)n);
        printf(" | %zu | %.3f | %.0f | %.2f | ", n, t, (double)n / t, t_raw / t);
        if (st.n_drafted)
            printf("%llu | %llu (%.0f%%) | %.2f |\n", (unsigned long long)st.n_drafted,
                   (unsigned long long)st.n_accepted, 100.0 * (double)st.n_accepted / (double)st.n_drafted,
                   (double)st.n_tokens / (double)st.n_passes);
        else
            printf("0 | 0 | %.2f |\n", (double)st.n_tokens / (double)st.n_passes);
        fflush(stdout);
    }
    uint32_t n_seg = 0;
    memset(out, 0, n * sizeof *out);
    double tb = restore_batch(m, coded, coded_size, n, threads, out, &st, &n_seg);
    if (tb < 0 || memcmp(out, tok, n * sizeof *tok)) {
        fprintf(stderr, "bench_restore: batch restore failed or restored different tokens\n");
        return 1;
    }
    printf("| %s | %s | model-coded, batch restore of the %u segments together | %zu | %.3f | %.0f | %.2f | 0 | 0 | "
           "%.2f |\n",
           info.name, label, n_seg, n, tb, (double)n / tb, t_raw / tb, (double)st.n_tokens / (double)st.n_passes);
    free(raw);
    free(coded);
    free(out);
    free(tok);
    free(text);
    skv_ctx_free(c);
    skv_model_free(m);
    return 0;
}
