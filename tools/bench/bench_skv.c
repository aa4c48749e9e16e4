/* seqkv bench: .skv files of the exact run's tokens, written and restored through the library
 * (skv_encoder_*, skv_session_restore_segment with verify=1); bits = the real file's bytes.
 *
 *   sequential   codec tokens (restored by one batched prefill) and codec model (token by token,
 *                or with n-gram drafts): the restored tokens and the regenerated KV's digest are
 *                compared with the exact run's
 *   stored KV    the quantized-KV codecs (docs/format.md 2.3): restored without running the
 *                model; lossless when the decoded KV holds the exact run's values
 */
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

/* Encodes the exact run's tokens with codec (kv_quant: the SKV_CODEC_KVQ spec, else NULL) and
 * opens the file: *s, its size in *size. err receives why it failed. */
static int encode(const bench_run *r, int codec, const char *kv_quant, skv_session **s, size_t *size, char *err,
                  size_t cap)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    uint8_t *data = NULL;
    ep.codec = codec;
    ep.kv_quant = kv_quant;
    ep.n_threads = (int)r->threads;
    int st = skv_encoder_create(r->m, &ep, &e, err, cap);
    if (!st) st = skv_encoder_append(e, r->tok, r->n, NULL);
    if (!st) st = skv_encoder_finish(e, &data, size);
    if (st && e) snprintf(err, cap, "%s", skv_encoder_last_error(e));
    else if ((st = skv_session_open(data, *size, s, err, cap))) *s = NULL;
    skv_encoder_free(e);
    free(data);
    return st ? -1 : 0;
}

/* What a restore gave back, judged: 1 right, 0 wrong, -1 could not tell. */
typedef int (*restore_check)(const bench_run *r, skv_ctx *c, const int32_t *tok);

/* Tokens and KV digest equal the exact run's. */
static int same_as_exact_run(const bench_run *r, skv_ctx *c, const int32_t *tok)
{
    uint8_t d[16];
    return skv_ctx_n_pos(c) == (int)r->n && !memcmp(tok, r->tok, r->n * sizeof *tok) &&
           !skv_ctx_kv_digest(c, (int)r->n, d) && !memcmp(d, r->digest, 16);
}

/* The context holds the exact run's KV values (a lossy codec's decoded KV does not). */
static int kv_is_exact(const bench_run *r, skv_ctx *c, const int32_t *tok)
{
    (void)tok;
    float *kv = skv_ctx_n_pos(c) == (int)r->n ? malloc(r->kv_len * sizeof *kv) : NULL;
    int same = kv && !skv_ctx_kv_read(c, 0, (int)r->n, kv) ? !memcmp(kv, r->kv, r->kv_len * sizeof *kv) : -1;
    free(kv);
    return same;
}

/* Restores segment 0 of s (verify=1) into a fresh context; *secs: the restore call alone.
 * Returns its status; on SKV_OK *verdict is check's. err receives the detail of a failure. */
static int restore_once(const bench_run *r, const skv_session *s, int draft, restore_check check, double *secs,
                        int *verdict, char *err, size_t cap)
{
    skv_ctx *c = bench_new_ctx(r, NULL);
    int32_t *tok = malloc((r->n + 1) * sizeof *tok);
    skv_restore_params p = {.verify = 1, .draft = draft};
    err[0] = 0;
    double t0 = cli_now();
    int st = c && tok ? skv_session_restore_segment(s, r->m, 0, c, &p, tok, r->n + 1) : SKV_ERR_NOMEM;
    *secs = cli_now() - t0;
    if (st) snprintf(err, cap, "%s", c && skv_ctx_last_error(c)[0] ? skv_ctx_last_error(c) : skv_status_str(st));
    *verdict = st ? 0 : check(r, c, tok);
    if (!st && *verdict < 0) st = SKV_ERR_NOMEM, snprintf(err, cap, "cannot read the restored KV");
    skv_ctx_free(c);
    free(tok);
    return st;
}

/* Restore speed (best of r->reps) and verdict of one token-codec decoder into w. */
static int sequential_restore(const bench_run *r, const skv_session *s, int draft, bench_row *w)
{
    char err[512];
    double best = 1e30, t = 0;
    int ok = 1;
    for (int k = 0; k < r->reps && ok == 1; k++) {
        int st = restore_once(r, s, draft, same_as_exact_run, &t, &ok, err, sizeof err);
        if (st) cli_error("restore failed: %s", err);
        if (st && st != SKV_ERR_MISMATCH) return -1; /* a digest mismatch is a result: "NO" */
        best = t < best ? t : best;
    }
    w->restore_tps = (double)r->n / best;
    w->lossless = ok == 1;
    w->verified = ok == 1 ? "yes" : "NO";
    return 0;
}

int bench_sequential_rows(const bench_run *r, bench_case *bc, int codec, int with_ngram)
{
    char err[512];
    size_t size = 0;
    skv_session *s = NULL;
    int tokens = codec == SKV_CODEC_TOKENS, rc = encode(r, codec, NULL, &s, &size, err, sizeof err);
    if (rc) cli_error("encoding failed: %s", err);
    for (int d = 0; !rc && d < 1 + with_ngram; d++) {
        int draft = tokens ? SKV_DRAFT_AUTO : d ? SKV_DRAFT_NGRAM : SKV_DRAFT_NONE;
        bench_row *w = bench_new_row(bc, tokens ? "raw tokens + prefill" : d ? "model-coded (n-gram drafts)"
                                                                             : "model-coded tokens", "sequential");
        w->bits = (double)size * 8.0 / (double)r->n;
        w->has_quality = 1; /* exact by construction, and verified */
        snprintf(w->measured, sizeof w->measured, "%s", tokens ? "parse + one batched prefill, verify"
                                                         : d ? "decode with n-gram drafts, verify"
                                                             : "decode token by token, verify");
        rc = sequential_restore(r, s, draft, w);
    }
    skv_session_free(s);
    return rc;
}

/* ---- quantized-KV codecs ---------------------------------------------------------- */

static const struct {
    const char *codec, *spec, *per_vector; /* codec name, its kv_quant, the per-vector row of the same scheme */
} kv_codecs[] = {
    {"kvq", "kv=f32", "f32"}, {"f16", NULL, "f16"}, {"q8", NULL, "q8_0"}, {"q4", NULL, "q4_0"},
    {"tq4", NULL, "tq4"},     {"tq3", NULL, "tq3"}, {"kvq", "k=tq4,v=tq3", "tq3.5"},
};

/* The per-vector row of scheme ("tq3.5" matches "tq3.5 (k=tq4,v=tq3)"); NULL if not measured. */
static const bench_row *per_vector_row_of(const bench_case *bc, const char *scheme)
{
    size_t l = strlen(scheme);
    for (int k = 0; k < bc->n_rows; k++) {
        const bench_row *w = &bc->rows[k];
        if (!strncmp(w->repr, scheme, l) && (!w->repr[l] || w->repr[l] == ' ') && !strcmp(w->family, "per-vector"))
            return w;
    }
    return NULL;
}

/* Best restore speed of r->reps restores (tokens/s) and whether the KV came back exact. */
static int kv_restore(const bench_run *r, const skv_session *s, double *tps, int *exact, char *err, size_t cap)
{
    double t = 0;
    *tps = 0.0;
    for (int k = 0; k < r->reps; k++) {
        if (restore_once(r, s, SKV_DRAFT_AUTO, kv_is_exact, &t, exact, err, cap)) return -1;
        double v = (double)r->n / (t + 1e-12);
        *tps = v > *tps ? v : *tps;
    }
    return 0;
}

static void kv_codec_fill(bench_row *w, const bench_case *bc, size_t i, int exact)
{
    w->lossless = exact;
    w->verified = exact ? "yes" : "yes (stored digest); no (f32 KV)";
    snprintf(w->measured, sizeof w->measured, "seqkv restore: decode file + load, no model run, verify");
    const bench_row *q = exact ? NULL : per_vector_row_of(bc, kv_codecs[i].per_vector);
    if (q) w->has_quality = 1, w->ppl_delta = q->ppl_delta, w->kl = q->kl;
}

/* Writes the tokens with quantized-KV codec i and restores the file (verified). */
static int kv_codec_row(const bench_run *r, bench_case *bc, size_t i, char *err, size_t cap)
{
    skv_session *s = NULL;
    size_t size = 0;
    double tps = 0;
    int exact = 0, codec = skv_codec_parse(kv_codecs[i].codec);
    int rc = encode(r, codec, kv_codecs[i].spec, &s, &size, err, cap) || kv_restore(r, s, &tps, &exact, err, cap);
    skv_session_free(s);
    if (rc) return -1;
    char label[48];
    snprintf(label, sizeof label, ".skv codec %s%s%s", kv_codecs[i].codec, kv_codecs[i].spec ? " " : "",
             kv_codecs[i].spec ? kv_codecs[i].spec : "");
    bench_row *w = bench_new_row(bc, label, "stored KV");
    w->bits = (double)size * 8.0 / (double)r->n;
    w->restore_tps = tps;
    kv_codec_fill(w, bc, i, exact);
    return 0;
}

/* The rows of the quantized-KV .skv codecs; a codec the library refuses is skipped (noted). */
void bench_kv_codec_rows(const bench_run *r, bench_case *bc)
{
    char err[512];
    bench_progress("  .skv quantized-KV codecs");
    for (size_t i = 0; i < sizeof kv_codecs / sizeof *kv_codecs; i++)
        if (kv_codec_row(r, bc, i, err, sizeof err)) {
            bench_progress("  (codec %s unavailable: %s; row skipped)", kv_codecs[i].codec, err);
            bc->kv_codec_missing = 1;
        }
}
