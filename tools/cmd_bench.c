/* seqkv bench: every representation of the same KV cache, measured end to end.
 *
 * For each model x text the command runs the text (cut to one context) once exactly and keeps
 * its logits and KV cache; every representation below is a way to store that one cache:
 *
 *   per-vector   f32 f16 q8_0 q4_0 tq2..tq4 tq2p..tq4p tq3.5   bits from skv_kv_position_bytes,
 *                quality from a run with kv_quant (ppl delta, KL vs the exact run), restore =
 *                quantize->dequantize round trip of the real KV + loading it (skv_ctx_kv_write)
 *   generic      zstd -3 on the f32 KV, zstd -3/-19 on the f16 KV: real compressed bytes,
 *                restore = decompress (+ f16->f32) + load, verified by comparing values
 *   sequential   .skv files (codec tokens, codec model): real file bytes, restore through
 *                skv_session_restore_segment(verify=1), and the regenerated KV's digest compared
 *                with the exact run's
 *
 * plus Corollary 5 (per-position surprisal vs context length, averaged over windows of the
 * text), a computed multi-session store workload and a labelled projection to large models.
 * Output: report.md, CSV files and plot data in --out; PNGs by scripts/plot_bench.gp (gnuplot).
 * docs/bench.md defines every column.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "cli.h"
#include "core/f16.h" /* header-only binary16 conversions (src/): the engine's own rounding */

#define MAX_MODELS 4
#define MAX_TEXTS 8
#define MAX_ROWS 32
#define MAX_CASES (MAX_MODELS * MAX_TEXTS)
#define MAX_NOTES 16

typedef struct {
    char label[48];   /* short name used in tables and CSV */
    char source[256]; /* where it came from, for the report */
    char *bytes;
    size_t len;
} bench_text;

typedef struct {
    char repr[48];
    char family[16];   /* per-vector | generic | sequential */
    double bits;       /* per token position, everything stored counted */
    int lossless;      /* 1: restores the exact f32 KV */
    int has_quality;   /* ppl_delta / kl measured */
    double ppl_delta, kl;
    double restore_tps;
    char measured[96]; /* what the restore speed measures */
    const char *verified; /* "yes", "no (lossy)", ... */
} bench_row;

typedef struct {
    double p_bits;          /* per-position bucket mean at this sample */
    double run_mean;        /* running mean over positions 1..L */
    int L;
} c5_point;

typedef struct {
    char model[64], text[48];
    size_t n;              /* tokens (BOS included) */
    double f16_bits, tq35_bits, ppl, xent; /* xent: mean -log2 p over positions 1..n-1 */
    bench_row rows[MAX_ROWS];
    int n_rows;
    c5_point c5[64];
    int n_c5, c5_windows;
    /* store workload */
    int wl_ok;
    size_t wl_sessions, wl_positions, wl_unique;
    double wl_floor_all, wl_floor_unique;
    int wl_prompt, wl_turn, wl_reply, wl_groups;
    /* `seqkv store` run on the same sessions (as text): [0] budget 0 (tokens only), [1] default budget */
    int st_ok[2];
    int kv_codec_missing; /* this binary's compress lacked a quantized-KV codec */
    double st_bytes[2], st_tokens[2], st_unique[2];
} bench_case;

typedef struct {
    const char *models[MAX_MODELS];
    int n_models;
    const char *files[MAX_TEXTS];
    int n_files;
    const char *out;
    int quick, plots, store, kv_files;
    long threads, tokens, windows;
    char notes[MAX_NOTES][256];
    int n_notes;
    char machine[160]; /* date, CPUs and load when the run started */
} bench_opts;

/* ---- small utilities ------------------------------------------------------------ */

static void add_note(bench_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(bench_opts *o, const char *fmt, ...)
{
    if (o->n_notes == MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->notes[o->n_notes++], sizeof o->notes[0], fmt, ap);
    va_end(ap);
}

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
    va_list ap;
    fputs("bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The repository root as seen from the binary (<root>/build/seqkv), or "." */
static const char *repo_root(void)
{
    static char root[4096];
    ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
    if (n <= 0) return ".";
    root[n] = 0;
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(root, '/');
        if (!slash) return ".";
        *slash = 0;
    }
    return root;
}

/* First readable candidate among "<root>/rel" and "rel"; NULL if none. */
static const char *find_path(const char *rel, char *buf, size_t cap)
{
    int len = snprintf(buf, cap, "%s/%s", repo_root(), rel);
    if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return buf;
    len = snprintf(buf, cap, "%s", rel);
    if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return buf;
    return NULL;
}

static int mkdir_p(const char *path)
{
    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s", path);
    if (len <= 0 || (size_t)len >= sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0777) && errno != EEXIST ? -1 : 0;
}

static FILE *open_out(const char *dir, const char *name)
{
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = len > 0 && (size_t)len < sizeof path ? fopen(path, "w") : NULL;
    if (!f) cli_error("cannot create '%s/%s': %s", dir, name, strerror(errno));
    return f;
}

static void base_label(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    snprintf(out, cap, "%s", b ? b + 1 : path);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

/* ---- the exact run and everything measured against it ----------------------------- */

typedef struct {
    skv_model *m;
    skv_model_info info;
    int32_t *tok;  /* n tokens, BOS first */
    size_t n;
    float *lf;     /* n x V logits of the exact run */
    float *kv;     /* canonical KV of the exact run */
    size_t kv_len; /* floats */
    uint8_t digest[16];
    long threads;
    int reps;
    skv_ctx *load; /* target of every KV load, created (and written once) outside the timings */
} bench_run;

static skv_ctx *new_ctx(const bench_run *r, const char *kv_quant)
{
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = (int)r->n;
    p.n_threads = (int)r->threads;
    p.kv_quant = kv_quant;
    skv_ctx *c = NULL;
    if (skv_ctx_create(r->m, &p, &c)) cli_error("cannot create a context (kv_quant '%s')", kv_quant ? kv_quant : "");
    return c;
}

static int exact_run(bench_run *r)
{
    size_t V = (size_t)r->info.n_vocab;
    skv_ctx *c = new_ctx(r, NULL);
    r->kv_len = 2 * (size_t)r->info.n_layer * (size_t)r->info.n_head_kv * r->n * (size_t)r->info.head_dim;
    r->lf = malloc(r->n * V * sizeof *r->lf);
    r->kv = malloc(r->kv_len * sizeof *r->kv);
    int rc = c && r->lf && r->kv && !skv_prefill(c, r->tok, r->n, SKV_LOGITS_ALL, r->lf) &&
             !skv_ctx_kv_read(c, 0, (int)r->n, r->kv) && !skv_ctx_kv_digest(c, (int)r->n, r->digest) ? 0 : -1;
    if (rc) cli_error("the exact run failed");
    skv_ctx_free(c);
    r->load = rc ? NULL : new_ctx(r, NULL);
    if (!rc && (!r->load || skv_ctx_kv_write(r->load, 0, (int)r->n, r->kv))) rc = -1;
    return rc;
}

/* ppl and KL of a run whose KV cache is held in kv_quant, against the exact logits. */
static int quality(const bench_run *r, const char *spec, double *ppl_delta, double *kl)
{
    size_t V = (size_t)r->info.n_vocab;
    float *lq = malloc(r->n * V * sizeof *lq);
    skv_ctx *c = lq ? new_ctx(r, spec) : NULL;
    int rc = c && !skv_prefill(c, r->tok, r->n, SKV_LOGITS_ALL, lq) ? 0 : -1;
    cli_score ref = {0}, q = {0};
    for (size_t j = 0; !rc && j + 1 < r->n; j++) {
        cli_score_row(r->lf + j * V, r->lf + j * V, r->info.n_vocab, r->tok[j + 1], &ref);
        cli_score_row(r->lf + j * V, lq + j * V, r->info.n_vocab, r->tok[j + 1], &q);
    }
    if (!rc && q.n) {
        *ppl_delta = exp(q.nll / (double)q.n) - exp(ref.nll / (double)ref.n);
        *kl = q.kl / (double)q.n;
    }
    skv_ctx_free(c);
    free(lq);
    return rc;
}

/* Loads kv into the (reused, already warm) load context; 1 if its digest equals the exact
 * run's, 0 if not, -1 error. *secs receives the load time. */
static int load_kv(const bench_run *r, const float *kv, double *secs)
{
    uint8_t d[16];
    double t0 = cli_now();
    int rc = skv_ctx_kv_write(r->load, 0, (int)r->n, kv) ? -1 : 0;
    *secs = cli_now() - t0;
    if (!rc) rc = skv_ctx_kv_digest(r->load, (int)r->n, d) ? -1 : !memcmp(d, r->digest, 16);
    return rc;
}

/* Round trip of the whole canonical KV through the per-vector scheme(s); seconds spent. */
static int roundtrip_kv(const bench_run *r, const char *k_scheme, const char *v_scheme, float *y, double *secs)
{
    size_t hd = (size_t)r->info.head_dim, blk = r->n * hd;
    double t0 = cli_now();
    for (int l = 0; l < r->info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < r->info.n_head_kv; h++) {
                size_t off = (((size_t)l * 2 + (size_t)kind) * (size_t)r->info.n_head_kv + (size_t)h) * blk;
                if (skv_kv_quant_roundtrip(kind ? v_scheme : k_scheme, hd, l, kind, r->kv + off, r->n, y + off, NULL))
                    return -1;
            }
    *secs = cli_now() - t0;
    return 0;
}

static bench_row *new_row(bench_case *bc, const char *repr, const char *family)
{
    bench_row *w = &bc->rows[bc->n_rows++];
    memset(w, 0, sizeof *w);
    snprintf(w->repr, sizeof w->repr, "%s", repr);
    snprintf(w->family, sizeof w->family, "%s", family);
    return w;
}

/* One per-vector scheme: "tq3.5" is k=tq4,v=tq3 (the same bytes as half the vectors at each). */
static int per_vector_row(const bench_run *r, bench_case *bc, const char *scheme, float *y)
{
    int split = !strcmp(scheme, "tq3.5");
    const char *ks = split ? "tq4" : scheme, *vs = split ? "tq3" : scheme;
    char spec[64], label[48];
    double bytes = 0, rt = 0, load = 0;
    snprintf(spec, sizeof spec, "k=%s,v=%s", ks, vs);
    snprintf(label, sizeof label, "%s%s", scheme, split ? " (k=tq4,v=tq3)" : "");
    bench_row *w = new_row(bc, label, "per-vector");
    if (skv_kv_position_bytes(r->m, scheme, &bytes)) {
        cli_error("scheme %s does not fit this model", scheme);
        return -1;
    }
    w->bits = bytes * 8.0;
    int exact = !strcmp(scheme, "f32");
    if (!exact && quality(r, spec, &w->ppl_delta, &w->kl)) return -1;
    w->has_quality = 1;
    double best = 1e30;
    int same = 0;
    for (int k = 0; k < r->reps; k++) {
        if (roundtrip_kv(r, ks, vs, y, &rt) || (same = load_kv(r, y, &load)) < 0) return -1;
        best = rt + load < best ? rt + load : best;
    }
    w->restore_tps = (double)r->n / best;
    snprintf(w->measured, sizeof w->measured, "quantize+dequantize round trip + load");
    w->lossless = same == 1;
    w->verified = same == 1 ? "yes" : "no (lossy)";
    return 0;
}

/* zstd over the KV as f32 or f16 bytes. */
static int zstd_row(const bench_run *r, bench_case *bc, int f16, int level, float *y)
{
    size_t nb = r->kv_len * (f16 ? 2 : 4), cap = ZSTD_compressBound(nb);
    uint16_t *h = f16 ? malloc(nb) : NULL;
    uint8_t *z = malloc(cap), *back = malloc(nb);
    const void *src = f16 ? (const void *)h : (const void *)r->kv;
    char label[48];
    int rc = -1;
    snprintf(label, sizeof label, "zstd -%d (%s KV)", level, f16 ? "f16" : "f32");
    bench_row *w = new_row(bc, label, "generic");
    if (!z || !back || (f16 && !h)) goto done;
    for (size_t i = 0; f16 && i < r->kv_len; i++) h[i] = skv_f32_to_f16(r->kv[i]);
    size_t zn = ZSTD_compress(z, cap, src, nb, level);
    if (ZSTD_isError(zn)) goto done;
    w->bits = (double)zn * 8.0 / (double)r->n;
    double best = 1e30, load = 0;
    int same = 0;
    for (int k = 0; k < r->reps; k++) {
        double t0 = cli_now();
        size_t got = ZSTD_decompress(back, nb, z, zn);
        if (ZSTD_isError(got) || got != nb || memcmp(back, src, nb)) goto done;
        const uint16_t *hb = (const uint16_t *)(const void *)back;
        for (size_t i = 0; f16 && i < r->kv_len; i++) y[i] = skv_f16_to_f32(hb[i]);
        double t = cli_now() - t0;
        if ((same = load_kv(r, f16 ? y : (const float *)(const void *)back, &load)) < 0) goto done;
        best = t + load < best ? t + load : best;
    }
    w->restore_tps = (double)r->n / best;
    snprintf(w->measured, sizeof w->measured, "decompress%s + load", f16 ? " + f16->f32" : "");
    w->lossless = same == 1;
    w->verified = same == 1 ? "yes" : "yes (f16 bytes); no (f32 KV)";
    /* quality of the f16 KV = the f16 row's, measured there */
    for (int i = 0; f16 && i < bc->n_rows; i++)
        if (!strcmp(bc->rows[i].repr, "f16")) w->has_quality = 1, w->ppl_delta = bc->rows[i].ppl_delta, w->kl = bc->rows[i].kl;
    rc = 0;
done:
    if (rc) cli_error("%s failed", label);
    free(h);
    free(z);
    free(back);
    return rc;
}

/* Encodes the tokens as a .skv file with `codec`. */
static int encode(const bench_run *r, int codec, uint8_t **data, size_t *size, skv_encoder_stats *st)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = codec;
    ep.n_threads = (int)r->threads;
    int rc = skv_encoder_create(r->m, &ep, &e, NULL, 0) || skv_encoder_append(e, r->tok, r->n, NULL) ||
             skv_encoder_get_stats(e, st) || skv_encoder_finish(e, data, size) ? -1 : 0;
    if (rc) cli_error("encoding failed: %s", e ? skv_encoder_last_error(e) : "cannot create the encoder");
    skv_encoder_free(e);
    return rc;
}

/* Restores segment 0 with verify=1; 1 if verified and equal to the exact run, 0 if not. */
static int restore_once(const bench_run *r, const skv_session *s, int draft, double *secs)
{
    skv_ctx *c = new_ctx(r, NULL);
    int32_t *tok = malloc((r->n + 1) * sizeof *tok);
    uint8_t d[16];
    skv_restore_params p = {.verify = 1, .draft = draft};
    double t0 = cli_now();
    int rc = c && tok ? skv_session_restore_segment(s, r->m, 0, c, &p, tok, r->n + 1) : -1;
    *secs = cli_now() - t0;
    int ok = rc == SKV_OK && skv_ctx_n_pos(c) == (int)r->n && !memcmp(tok, r->tok, r->n * sizeof *tok) &&
             !skv_ctx_kv_digest(c, (int)r->n, d) && !memcmp(d, r->digest, 16);
    if (rc) cli_error("restore failed: %s", c ? skv_ctx_last_error(c) : skv_status_str(rc));
    skv_ctx_free(c);
    free(tok);
    return rc && rc != SKV_ERR_MISMATCH ? -1 : ok;
}

static int sequential_rows(const bench_run *r, bench_case *bc, int codec, int with_ngram)
{
    uint8_t *data = NULL;
    size_t size = 0;
    skv_encoder_stats st;
    skv_session *s = NULL;
    int rc = encode(r, codec, &data, &size, &st);
    if (!rc && skv_session_open(data, size, &s, NULL, 0)) rc = -1;
    for (int d = 0; !rc && d < 1 + with_ngram; d++) {
        int draft = codec == SKV_CODEC_TOKENS ? SKV_DRAFT_AUTO : d ? SKV_DRAFT_NGRAM : SKV_DRAFT_NONE;
        bench_row *w = new_row(bc, codec == SKV_CODEC_TOKENS ? "raw tokens + prefill"
                                   : d ? "model-coded (n-gram drafts)" : "model-coded tokens", "sequential");
        w->bits = (double)size * 8.0 / (double)r->n;
        w->has_quality = 1; /* exact by construction, and verified below */
        double best = 1e30, t = 0;
        int ok = 1;
        for (int k = 0; k < r->reps && ok == 1; k++) {
            ok = restore_once(r, s, draft, &t);
            best = t < best ? t : best;
        }
        if (ok < 0) rc = -1;
        w->restore_tps = (double)r->n / best;
        snprintf(w->measured, sizeof w->measured, "%s",
                 codec == SKV_CODEC_TOKENS ? "parse + one batched prefill, verify"
                 : d ? "decode with n-gram drafts, verify" : "decode token by token, verify");
        w->lossless = ok == 1;
        w->verified = ok == 1 ? "yes" : "NO";
    }
    skv_session_free(s);
    free(data);
    return rc;
}

/* ---- Corollary 5 ---------------------------------------------------------------- */

/* Mean surprisal of each position over `windows` windows of n tokens (BOS + text) of all[]. */
static int c5_measure(const bench_run *r, const int32_t *all, size_t n_all, int windows, double *mean, int *used)
{
    size_t n = r->n, V = (size_t)r->info.n_vocab, step = n - 1;
    float *lg = malloc(n * V * sizeof *lg);
    int32_t *win = malloc(n * sizeof *win);
    skv_ctx *c = lg && win ? new_ctx(r, NULL) : NULL;
    int rc = c ? 0 : -1, w = 0;
    for (size_t i = 0; i < n; i++) mean[i] = 0.0;
    for (; !rc && w < windows && (size_t)(w + 1) * step <= n_all; w++) {
        const float *src = r->lf;
        if (w > 0) {
            win[0] = r->tok[0];
            memcpy(win + 1, all + (size_t)w * step, step * sizeof *win);
            skv_ctx_truncate(c, 0);
            if (skv_prefill(c, win, n, SKV_LOGITS_ALL, lg)) rc = -1;
            src = lg;
        }
        const int32_t *t = w > 0 ? win : r->tok;
        for (size_t p = 1; !rc && p < n; p++) mean[p] += skv_token_surprisal(src + (p - 1) * V, r->info.n_vocab, t[p]);
    }
    for (size_t p = 1; w && p < n; p++) mean[p] /= w;
    *used = w;
    skv_ctx_free(c);
    free(lg);
    free(win);
    return rc;
}

/* Sample points: 1, 2, 4, ... up to n/16, then every n/16 (n-1 last). */
static void c5_sample(bench_case *bc, const double *mean, size_t n)
{
    int Ls[64], k = 0;
    size_t B = n / 16 ? n / 16 : 1;
    for (size_t L = 1; L < B && k < 48; L *= 2) Ls[k++] = (int)L;
    for (size_t L = B; L < n - 1 && k < 63; L += B) Ls[k++] = (int)L;
    Ls[k++] = (int)(n - 1);
    double sum = 0.0;
    int prev = 0;
    for (int i = 0; i < k; i++) {
        double bucket = 0.0;
        for (int p = prev + 1; p <= Ls[i]; p++) bucket += mean[p];
        sum += bucket;
        bc->c5[i] = (c5_point){.L = Ls[i], .p_bits = bucket / (Ls[i] - prev), .run_mean = sum / Ls[i]};
        prev = Ls[i];
    }
    bc->n_c5 = k;
}

/* ---- store workload (computed) ---------------------------------------------------- */

typedef struct {
    const int32_t *t;
    size_t n;
    const double *s; /* surprisal of each position (s[0] = 0: BOS) */
} wl_session;

static int wl_cmp(const void *a, const void *b)
{
    const wl_session *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    for (size_t i = 0; i < n; i++)
        if (x->t[i] != y->t[i]) return x->t[i] < y->t[i] ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

/* ---- the real store, through this binary's `store` command (optional) --------------- */

/* Runs this binary with argv (argv[0] ignored); stdout into out (NUL-terminated); exit status or -1. */
static int run_self(const char *const *argv, char *out, size_t cap)
{
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        dup2(fd[1], 1);
        if (dn >= 0) dup2(dn, 2);
        close(fd[0]);
        execv("/proc/self/exe", (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t got;
    while (pid > 0 && (got = read(fd[0], out + n, cap - 1 - n)) > 0) n += (size_t)got;
    close(fd[0]);
    out[n] = 0;
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* The number after "label:" in text, or -1. */
static double field_num(const char *text, const char *label)
{
    const char *p = strstr(text, label);
    return p ? strtod(p + strlen(label), NULL) : -1.0;
}

/* Text of tokens t[1..n) (t[0] = BOS), as `seqkv restore` writes it. */
static int write_session_text(const skv_model *m, const int32_t *t, size_t n, const char *path)
{
    FILE *f = fopen(path, "w");
    char buf[256];
    if (!f) return -1;
    for (size_t i = 1; i < n; i++) {
        size_t len = 0;
        if (skv_token_piece(m, t[i], buf, sizeof buf, &len)) continue;
        size_t skip = i == 1 && len && buf[0] == ' '; /* the tokenizer adds this space back */
        fwrite(buf + skip, 1, len - skip, f);
    }
    return fclose(f) ? -1 : 0;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4096];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove(p)) remove_tree(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* Puts every session into a fresh store (budget 0 or default) and reads `store stats`. */
static int store_one(const bench_run *r, const char *model, const char *tmp, const int32_t *tok, size_t S, int len,
                     int budget0, double *bytes, double *tokens, double *unique)
{
    char dir[4200], txt[4200], name[32], out[8192];
    snprintf(dir, sizeof dir, "%s/store%d", tmp, budget0);
    const char *init[] = {"seqkv", "store", "init", dir, "-m", model, budget0 ? "--budget" : NULL, "0", NULL};
    if (run_self(init, out, sizeof out)) return -1;
    for (size_t i = 0; i < S; i++) {
        snprintf(txt, sizeof txt, "%s/s%zu.txt", tmp, i);
        snprintf(name, sizeof name, "s%zu", i);
        const char *put[] = {"seqkv", "store", "put", dir, "-f", txt, "--name", name, "-m", model, NULL};
        if (write_session_text(r->m, tok + i * (size_t)len, (size_t)len, txt) || run_self(put, out, sizeof out)) return -1;
    }
    const char *stats[] = {"seqkv", "store", "stats", dir, "-m", model, NULL};
    if (run_self(stats, out, sizeof out)) return -1;
    *bytes = field_num(out, "bytes on disk:");
    *tokens = field_num(out, "session tokens:");
    *unique = field_num(out, "unique stored positions:");
    return *bytes > 0 ? 0 : -1;
}

static void store_real(const bench_run *r, bench_case *bc, const char *model, const int32_t *tok, size_t S, int len)
{
    char tmp[] = "/tmp/seqkv-bench-XXXXXX";
    if (!mkdtemp(tmp)) return;
    for (int b = 0; b < 2; b++) {
        progress("  seqkv store (%s budget)", b ? "default" : "zero");
        bc->st_ok[b] = !store_one(r, model, tmp, tok, S, len, !b, &bc->st_bytes[b], &bc->st_tokens[b], &bc->st_unique[b]);
    }
    remove_tree(tmp);
}

/* ---- quantized-KV .skv files, through this binary's compress/restore (optional) ------- */

static const struct {
    const char *codec, *spec, *per_vector;
} kv_codecs[] = {
    {"kvq", "kv=f32", "f32"}, {"f16", NULL, "f16"}, {"q8", NULL, "q8_0"}, {"q4", NULL, "q4_0"},
    {"tq4", NULL, "tq4"},     {"tq3", NULL, "tq3"}, {"kvq", "k=tq4,v=tq3", "tq3.5"},
};

/* 1 if the dump at path holds exactly the exact run's KV, 0 if not, -1 if unreadable. */
static int dump_is_exact(const bench_run *r, const char *path)
{
    skv_kvdump *d = NULL;
    if (skv_kvdump_read(path, &d, NULL, 0)) return -1;
    int same = d->n_pos == r->n && !memcmp(d->kv, r->kv, r->kv_len * sizeof *r->kv);
    skv_kvdump_free(d);
    return same;
}

/* Compresses the tokens with one KV codec and restores the file (verified), via the CLI. */
static int kv_codec_row(const bench_run *r, bench_case *bc, const char *model, const char *tmp, size_t i)
{
    char ids[4200], skv[4200], kv[4200], out[8192], label[48];
    snprintf(ids, sizeof ids, "%s/ids.txt", tmp);
    snprintf(skv, sizeof skv, "%s/kv%zu.skv", tmp, i);
    snprintf(kv, sizeof kv, "%s/kv%zu.kv", tmp, i);
    const char *comp[] = {"seqkv", "compress", "-m", model, "--ids", ids, "-o", skv, "--codec", kv_codecs[i].codec,
                          kv_codecs[i].spec ? "--kv-quant" : NULL, kv_codecs[i].spec, NULL};
    const char *rest[] = {"seqkv", "restore", "-m", model, skv, "--verify", NULL};
    const char *rest_kv[] = {"seqkv", "restore", "-m", model, skv, "--kv", kv, NULL};
    struct stat st;
    if (run_self(comp, out, sizeof out) || stat(skv, &st)) return -1;
    double best = 0.0;
    for (int k = 0; k < r->reps; k++) { /* timed without --kv: writing the dump is not part of a restore */
        if (run_self(rest, out, sizeof out)) return -1;
        const char *tps = strstr(out, " tokens/s)"), *open_paren = tps;
        while (open_paren && open_paren > out && *open_paren != '(') open_paren--;
        double v = tps ? strtod(open_paren + 1, NULL) : 0.0;
        if (v <= 0.0) return -1;
        best = v > best ? v : best;
    }
    int exact = run_self(rest_kv, out, sizeof out) ? -1 : dump_is_exact(r, kv);
    if (exact < 0) return -1;
    snprintf(label, sizeof label, ".skv codec %s%s%s", kv_codecs[i].codec, kv_codecs[i].spec ? " " : "",
             kv_codecs[i].spec ? kv_codecs[i].spec : "");
    bench_row *w = new_row(bc, label, "stored KV");
    w->bits = (double)st.st_size * 8.0 / (double)r->n;
    w->restore_tps = best;
    w->lossless = exact;
    w->verified = exact ? "yes" : "yes (stored digest); no (f32 KV)";
    snprintf(w->measured, sizeof w->measured, "seqkv restore: decode file + load, no model run, verify");
    for (int k = 0; !exact && k < bc->n_rows; k++)
        if (!strncmp(bc->rows[k].repr, kv_codecs[i].per_vector, strlen(kv_codecs[i].per_vector)) &&
            (bc->rows[k].repr[strlen(kv_codecs[i].per_vector)] == 0 || bc->rows[k].repr[strlen(kv_codecs[i].per_vector)] == ' ') &&
            !strcmp(bc->rows[k].family, "per-vector"))
            w->has_quality = 1, w->ppl_delta = bc->rows[k].ppl_delta, w->kl = bc->rows[k].kl;
    return 0;
}

/* The rows of the quantized-KV .skv codecs; none (and a message) if the CLI lacks them. */
static void kv_codec_rows(const bench_run *r, bench_case *bc, const char *model)
{
    char tmp[] = "/tmp/seqkv-bench-XXXXXX", ids[64];
    if (!mkdtemp(tmp)) return;
    snprintf(ids, sizeof ids, "%s/ids.txt", tmp);
    FILE *f = fopen(ids, "w");
    for (size_t i = 0; f && i < r->n; i++) fprintf(f, "%d ", r->tok[i]);
    int ok = f && !fclose(f);
    progress("  .skv quantized-KV codecs (seqkv compress/restore)");
    for (size_t i = 0; ok && i < sizeof kv_codecs / sizeof *kv_codecs; i++)
        if (kv_codec_row(r, bc, model, tmp, i)) {
            progress("  (codec %s unavailable: rows skipped)", kv_codecs[i].codec);
            bc->kv_codec_missing = 1;
        }
    remove_tree(tmp);
}

/* Sessions (g, k) = prompt + turn g + reply (g, k): G groups x K replies, all from all[]. */
static int store_workload(const bench_run *r, bench_case *bc, const int32_t *all, size_t n_all, const bench_opts *o,
                          const char *model)
{
    int quick = o->quick;
    int P = quick ? 48 : 300, A = quick ? 16 : 100, B = quick ? 16 : 60, G = quick ? 2 : 4, K = quick ? 2 : 5;
    int len = P + A + B;
    if (len > r->info.n_ctx_train || (size_t)(P - 1 + G * A + G * K * B) > n_all) return 0;
    size_t S = (size_t)G * (size_t)K, V = (size_t)r->info.n_vocab;
    int32_t *tok = malloc(S * (size_t)len * sizeof *tok);
    double *sur = calloc(S * (size_t)len, sizeof *sur);
    float *lg = malloc((size_t)len * V * sizeof *lg);
    wl_session *ss = malloc(S * sizeof *ss);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = len;
    cp.n_threads = (int)r->threads;
    skv_ctx *c = NULL;
    int rc = tok && sur && lg && ss && !skv_ctx_create(r->m, &cp, &c) ? 0 : -1;
    for (size_t i = 0; !rc && i < S; i++) {
        size_t g = i / (size_t)K, k = i % (size_t)K;
        int32_t *t = tok + i * (size_t)len;
        t[0] = r->tok[0];
        memcpy(t + 1, all, (size_t)(P - 1) * sizeof *t);
        memcpy(t + P, all + P - 1 + g * (size_t)A, (size_t)A * sizeof *t);
        memcpy(t + P + A, all + P - 1 + (size_t)G * A + (g * (size_t)K + k) * (size_t)B, (size_t)B * sizeof *t);
        skv_ctx_truncate(c, 0);
        if (skv_prefill(c, t, (size_t)len, SKV_LOGITS_ALL, lg)) rc = -1;
        for (int p = 1; !rc && p < len; p++) sur[i * (size_t)len + (size_t)p] = skv_token_surprisal(lg + (size_t)(p - 1) * V, (int)V, t[p]);
        ss[i] = (wl_session){.t = t, .n = (size_t)len, .s = sur + i * (size_t)len};
    }
    if (!rc) {
        qsort(ss, S, sizeof *ss, wl_cmp);
        bc->wl_positions = bc->wl_unique = 0;
        bc->wl_floor_all = bc->wl_floor_unique = 0.0;
        for (size_t i = 0; i < S; i++) {
            size_t lcp = 0;
            while (i && lcp < ss[i].n && lcp < ss[i - 1].n && ss[i].t[lcp] == ss[i - 1].t[lcp]) lcp++;
            bc->wl_positions += ss[i].n;
            bc->wl_unique += ss[i].n - lcp;
            for (size_t p = 0; p < ss[i].n; p++) bc->wl_floor_all += ss[i].s[p], bc->wl_floor_unique += p >= lcp ? ss[i].s[p] : 0.0;
        }
        if (o->store) store_real(r, bc, model, tok, S, len);
        bc->wl_ok = 1, bc->wl_sessions = S, bc->wl_prompt = P, bc->wl_groups = G, bc->wl_turn = A, bc->wl_reply = B;
    }
    skv_ctx_free(c);
    free(tok);
    free(sur);
    free(lg);
    free(ss);
    return rc;
}

/* ---- one model x text ------------------------------------------------------------ */

static const char *const schemes_full[] = {"f32", "f16", "q8_0", "q4_0", "tq4", "tq3", "tq2", "tq4p", "tq3p", "tq2p", "tq3.5"};
static const char *const schemes_quick[] = {"f32", "f16", "q8_0", "q4_0", "tq3", "tq3.5"};

static int run_representations(const bench_run *r, bench_case *bc, const bench_opts *o, const char *model)
{
    int quick = o->quick;
    float *y = calloc(r->kv_len, sizeof *y); /* touched now, so no row's timing pays the page faults */
    int rc = y ? 0 : -1;
    size_t ns = quick ? sizeof schemes_quick / sizeof *schemes_quick : sizeof schemes_full / sizeof *schemes_full;
    for (size_t i = 0; !rc && i < ns; i++) {
        const char *sc = quick ? schemes_quick[i] : schemes_full[i];
        progress("  %s", sc);
        rc = per_vector_row(r, bc, sc, y);
    }
    progress("  zstd");
    if (!rc) rc = zstd_row(r, bc, 0, 3, y);
    if (!rc) rc = zstd_row(r, bc, 1, 3, y);
    if (!rc && !quick) rc = zstd_row(r, bc, 1, 19, y);
    if (!rc && o->kv_files) kv_codec_rows(r, bc, model);
    progress("  .skv codecs (encode, restore, verify)");
    if (!rc) rc = sequential_rows(r, bc, SKV_CODEC_TOKENS, 0);
    if (!rc) rc = sequential_rows(r, bc, SKV_CODEC_MODEL, 1);
    free(y);
    return rc;
}

static int run_case(skv_model *m, const char *model, const char *mlabel, const bench_text *tx, const bench_opts *o,
                    bench_case *bc)
{
    bench_run r = {.m = m, .threads = o->threads, .reps = o->quick ? 1 : 3};
    size_t n_all = 0;
    skv_model_get_info(m, &r.info);
    int32_t *all = cli_tokenize(m, tx->bytes, tx->len, 0, &n_all);
    memset(bc, 0, sizeof *bc);
    snprintf(bc->model, sizeof bc->model, "%.63s", mlabel);
    snprintf(bc->text, sizeof bc->text, "%.47s", tx->label);
    size_t n = (size_t)(o->tokens ? o->tokens : r.info.n_ctx_train);
    if (n > (size_t)r.info.n_ctx_train) n = (size_t)r.info.n_ctx_train;
    if (!all || n_all < 2 || r.info.bos_id < 0) {
        cli_error("%s: too little text or no BOS token", tx->label);
        free(all);
        return -1;
    }
    if (n > n_all + 1) n = n_all + 1;
    r.n = n;
    r.tok = malloc(n * sizeof *r.tok);
    double *mean = malloc(n * sizeof *mean);
    int rc = r.tok && mean ? 0 : -1;
    if (!rc) {
        r.tok[0] = r.info.bos_id;
        memcpy(r.tok + 1, all, (n - 1) * sizeof *r.tok);
        bc->n = n;
        skv_kv_position_bytes(m, "f16", &bc->f16_bits);
        skv_kv_position_bytes(m, "tq3.5", &bc->tq35_bits);
        bc->f16_bits *= 8.0, bc->tq35_bits *= 8.0;
        progress("%s x %s: %zu tokens", mlabel, tx->label, n);
        rc = exact_run(&r);
    }
    if (!rc) rc = run_representations(&r, bc, o, model);
    if (!rc) {
        progress("  corollary 5 (%ld windows)", o->windows);
        rc = c5_measure(&r, all, n_all, (int)o->windows, mean, &bc->c5_windows);
    }
    if (!rc) {
        c5_sample(bc, mean, n);
        cli_score sc = {0};
        double xs = 0.0;
        size_t V = (size_t)r.info.n_vocab;
        for (size_t j = 0; j + 1 < n; j++) {
            cli_score_row(r.lf + j * V, r.lf + j * V, r.info.n_vocab, r.tok[j + 1], &sc);
            xs += skv_token_surprisal(r.lf + j * V, r.info.n_vocab, r.tok[j + 1]);
        }
        bc->ppl = exp(sc.nll / (double)sc.n);
        bc->xent = xs / (double)(n - 1);
        progress("  store workload");
        rc = store_workload(&r, bc, all, n_all, o, model);
    }
    free(all);
    free(mean);
    free(r.tok);
    free(r.lf);
    free(r.kv);
    skv_ctx_free(r.load);
    return rc;
}

/* ---- texts and models ------------------------------------------------------------- */

static int text_from_file(bench_text *t, const char *path)
{
    t->bytes = cli_read_file(path, &t->len);
    if (!t->bytes) return -1;
    base_label(path, t->label, sizeof t->label);
    const char *root = repo_root();
    size_t rl = strlen(root);
    /* relative to the repository when inside it, so committed reports do not name this machine */
    if (!strncmp(path, root, rl) && path[rl] == '/') path += rl + 1;
    snprintf(t->source, sizeof t->source, "%.255s", path);
    return 0;
}

/* Debian fortunes (different genre): a few prose files, '%' separators dropped. */
static int text_fortunes(bench_text *t, size_t cap)
{
    static const char *const files[] = {"literature", "wisdom", "science", "people"};
    char path[256];
    t->bytes = malloc(cap + 1);
    t->len = 0;
    if (!t->bytes) return -1;
    snprintf(t->label, sizeof t->label, "fortunes");
    snprintf(t->source, sizeof t->source, "/usr/share/games/fortunes/{literature,wisdom,science,people} (Debian fortunes)");
    for (size_t i = 0; i < sizeof files / sizeof *files && t->len < cap; i++) {
        snprintf(path, sizeof path, "/usr/share/games/fortunes/%s", files[i]);
        FILE *f = fopen(path, "r");
        char line[1024];
        while (f && t->len < cap && fgets(line, sizeof line, f)) {
            size_t l = strlen(line);
            if (!strcmp(line, "%\n")) continue;
            if (l > cap - t->len) l = cap - t->len;
            memcpy(t->bytes + t->len, line, l);
            t->len += l;
        }
        if (f) fclose(f);
    }
    t->bytes[t->len] = 0;
    return t->len ? 0 : -1;
}

static int default_texts(bench_opts *o, bench_text *tx, int *n)
{
    char buf[4096];
    const char *p = find_path("tests/data/model_ref/heldout.txt", buf, sizeof buf);
    *n = 0;
    if (!p || text_from_file(&tx[(*n)++], p)) {
        cli_error("cannot find tests/data/model_ref/heldout.txt (run from the repository)");
        return -1;
    }
    snprintf(tx[0].label, sizeof tx[0].label, "kjv-heldout");
    if (o->quick) return 0;
    if (access("/usr/share/games/fortunes/literature", R_OK) == 0) {
        if (text_fortunes(&tx[*n], 96 * 1024) == 0) (*n)++;
    } else {
        add_note(o, "fortunes skipped: /usr/share/games/fortunes absent (scripts/install-deps.sh --bench)");
    }
    const char *sh = getenv("SEQKV_SHARED");
    int len = sh && *sh ? snprintf(buf, sizeof buf, "%s/corpus/stories260K_samples.txt", sh) : 0;
    p = len > 0 && access(buf, R_OK) == 0 ? buf : find_path("../shared/corpus/stories260K_samples.txt", buf, sizeof buf);
    if (p && text_from_file(&tx[*n], p) == 0) {
        snprintf(tx[*n].label, sizeof tx[*n].label, "stories");
        size_t l = strlen(tx[*n].source);
        snprintf(tx[*n].source + l, sizeof tx[*n].source - l, " (sampled from stories260K itself: in-distribution for that model)");
        (*n)++;
    } else {
        add_note(o, "stories samples skipped: ../shared/corpus/stories260K_samples.txt absent");
    }
    return 0;
}

static void default_models(bench_opts *o, char *buf, size_t cap)
{
    o->models[o->n_models++] = cli_default_model();
    if (o->quick) return;
    const char *sh = getenv("SEQKV_SHARED");
    int len = sh && *sh ? snprintf(buf, cap, "%s/models/stories260K/stories260K.gguf", sh) : 0;
    const char *p = len > 0 && access(buf, R_OK) == 0 ? buf : find_path("../shared/models/stories260K/stories260K.gguf", buf, cap);
    if (p) o->models[o->n_models++] = p;
    else add_note(o, "stories260K model skipped: ../shared/models/stories260K/stories260K.gguf absent");
}

/* ---- output ------------------------------------------------------------------------ */

static const bench_row *find_row(const bench_case *bc, const char *repr)
{
    for (int i = 0; i < bc->n_rows; i++)
        if (!strcmp(bc->rows[i].repr, repr)) return &bc->rows[i];
    return NULL;
}

/* A CSV field: quoted (with "" escapes) when it holds a comma or a quote. */
static void csv_str(FILE *f, const char *s, const char *sep)
{
    if (!strpbrk(s, ",\"\n")) {
        fprintf(f, "%s%s", s, sep);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fprintf(f, "\"%s", sep);
}

static void write_csvs(FILE *rep, FILE *c5, const bench_case *cs, int n_cases)
{
    fprintf(rep, "model,text,tokens,representation,family,bits_per_position,ratio_vs_f16,ratio_vs_tq3.5,lossless,"
                 "ppl_delta,kl_nats_per_token,restore_tokens_per_s,restore_measures,verified_bit_exact\n");
    fprintf(c5, "model,text,windows,L,bucket_mean_bits,running_mean_bits,f16_bits,tq3.5_bits,ratio_tq3.5_running,ratio_tq3.5_bucket\n");
    for (int i = 0; i < n_cases; i++) {
        const bench_case *bc = &cs[i];
        for (int k = 0; k < bc->n_rows; k++) {
            const bench_row *w = &bc->rows[k];
            csv_str(rep, bc->model, ",");
            csv_str(rep, bc->text, ",");
            fprintf(rep, "%zu,", bc->n);
            csv_str(rep, w->repr, ",");
            fprintf(rep, "%s,%.4f,%.6g,%.6g,%s,", w->family, w->bits, bc->f16_bits / w->bits, bc->tq35_bits / w->bits,
                    w->lossless ? "yes" : "no");
            if (w->has_quality || w->lossless) fprintf(rep, "%.6f,%.6f,", w->ppl_delta, w->kl);
            else fprintf(rep, ",,");
            fprintf(rep, "%.1f,", w->restore_tps);
            csv_str(rep, w->measured, ",");
            csv_str(rep, w->verified, "\n");
        }
        for (int k = 0; k < bc->n_c5; k++) {
            const c5_point *p = &bc->c5[k];
            csv_str(c5, bc->model, ",");
            csv_str(c5, bc->text, ",");
            fprintf(c5, "%d,%d,%.5f,%.5f,%.1f,%.1f,%.4f,%.4f\n", bc->c5_windows, p->L, p->p_bits,
                    p->run_mean, bc->f16_bits, bc->tq35_bits, bc->tq35_bits / p->run_mean, bc->tq35_bits / p->p_bits);
        }
    }
}

static void fmt_ratio(char *buf, size_t cap, double x)
{
    if (x >= 100) snprintf(buf, cap, "%.0fx", x);
    else if (x >= 1) snprintf(buf, cap, "%.2fx", x);
    else snprintf(buf, cap, "%.4fx", x);
}

static void report_table(FILE *f, const bench_case *bc)
{
    fprintf(f, "\n### %s on %s (%zu tokens, perplexity %.3f, %.3f bits/token)\n\n", bc->model, bc->text, bc->n, bc->ppl, bc->xent);
    fprintf(f, "| representation | bits/position | vs f16 | vs TQ-3.5 | lossless | delta ppl | KL nats/token | restore tok/s | restore measures | verified bit-exact |\n");
    fprintf(f, "|---|---:|---:|---:|---|---:|---:|---:|---|---|\n");
    for (int k = 0; k < bc->n_rows; k++) {
        const bench_row *w = &bc->rows[k];
        char a[32], b[32], q[64];
        fmt_ratio(a, sizeof a, bc->f16_bits / w->bits);
        fmt_ratio(b, sizeof b, bc->tq35_bits / w->bits);
        if (w->lossless) snprintf(q, sizeof q, "0 (exact) | 0 (exact)");
        else if (!w->has_quality) snprintf(q, sizeof q, " | ");
        else snprintf(q, sizeof q, "%+.4f | %.5f", w->ppl_delta, w->kl);
        fprintf(f, "| %s | %.2f | %s | %s | %s | %s | %.0f | %s | %s |\n", w->repr, w->bits, a, b, w->lossless ? "yes" : "no",
                q, w->restore_tps, w->measured, w->verified);
    }
    if (bc->kv_codec_missing) fprintf(f, "\n(some `.skv codec` rows are missing: this binary's `compress` lacks those codecs)\n");
}

static void report_ratios(FILE *f, const bench_case *cs, int n_cases)
{
    fprintf(f, "\n## Ratio over TurboQuant-3.5, per model and text\n\n");
    for (int i = 0; i < n_cases; i++) {
        const bench_case *bc = &cs[i];
        const bench_row *mc = find_row(bc, "model-coded tokens"), *rt = find_row(bc, "raw tokens + prefill");
        if (!mc || !rt) continue;
        fprintf(f, "- **%s on %s**: the model-coded .skv file takes %.2f bits per position (cross-entropy floor %.2f), "
                   "%.0fx smaller than TurboQuant-3.5 (%.0f bits/position) and %.0fx smaller than f16; raw tokens take "
                   "%.2f bits (%.0fx vs TQ-3.5). Restore: %.0f tokens/s token by token vs %.0f tokens/s by prefill, both "
                   "verified bit-exact: %s / %s.\n",
                bc->model, bc->text, mc->bits, bc->xent, bc->tq35_bits / mc->bits, bc->tq35_bits, bc->f16_bits / mc->bits,
                rt->bits, bc->tq35_bits / rt->bits, mc->restore_tps, rt->restore_tps, mc->verified, rt->verified);
    }
}

static const c5_point *c5_at(const bench_case *bc, int L)
{
    const c5_point *best = &bc->c5[0];
    for (int k = 0; k < bc->n_c5; k++)
        if (bc->c5[k].L <= L) best = &bc->c5[k];
    return best;
}

static const char *trend(double x)
{
    return x > 1.05 ? "grows" : x < 0.95 ? "shrinks" : "stays flat";
}

/* One sentence per case: the curve's numbers and a verdict against the paper's claim. */
static void report_c5_shape(FILE *f, const bench_case *bc)
{
    if (!bc->n_c5) return;
    const c5_point *z = &bc->c5[bc->n_c5 - 1], *a16 = c5_at(bc, 16), *a64 = c5_at(bc, 64);
    int rises = 0;
    for (int k = 1; k < bc->n_c5; k++)
        if (bc->c5[k].L > 64 && bc->c5[k].p_bits > bc->c5[k - 1].p_bits * 1.05) rises++;
    double g_all = a16->run_mean / z->run_mean, g_late = a64->run_mean / z->run_mean;
    fprintf(f, "- %s on %s (%d windows): %.2f bits at position 1, %.2f bits in the last bucket (L up to %d); the running "
               "mean goes %.2f (L=16) -> %.2f (L=64) -> %.2f (L=%d), so the ratio over TQ-3.5 %s from L=16 to L=%d "
               "(x%.2f: %.0fx -> %.0fx) and %s from L=64 on (x%.2f). %s\n",
            bc->model, bc->text, bc->c5_windows, bc->c5[0].p_bits, z->p_bits, z->L, a16->run_mean, a64->run_mean,
            z->run_mean, z->L, trend(g_all), z->L, g_all, bc->tq35_bits / a16->run_mean, bc->tq35_bits / z->run_mean,
            trend(g_late), g_late,
            rises ? "Past L=64 some buckets rise by more than 5% over the previous one: the measured cost is not "
                    "monotone (the corollary bounds an expected entropy, a finite text's surprisal varies by passage)."
                  : "Past L=64 no bucket rises by more than 5% over the previous one.");
}

static void report_c5(FILE *f, const bench_case *cs, int n_cases)
{
    fprintf(f, "\n## Corollary 5: bits per position vs context length\n\n"
               "Per-position surprisal -log2 p(token | prefix) under the model's softmax (double precision),"
               " averaged over W disjoint windows of the text (each BOS + one context). `bucket` = mean over the"
               " positions since the previous sample point, `running` = mean over positions 1..L; the per-vector"
               " costs are constant per position. Full curves: corollary5.csv, corollary5.png.\n\n");
    fprintf(f, "| model | text | W | bits @1-8 | bits last bucket | running @16 | running @128 | running @n | TQ-3.5 / running: @16 -> @n |\n");
    fprintf(f, "|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < n_cases; i++) {
        const bench_case *bc = &cs[i];
        if (!bc->n_c5) continue;
        const c5_point *a = c5_at(bc, 8), *b16 = c5_at(bc, 16), *b128 = c5_at(bc, 128), *z = &bc->c5[bc->n_c5 - 1];
        fprintf(f, "| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f (L=%d) | %.0fx -> %.0fx (x%.2f) |\n", bc->model, bc->text,
                bc->c5_windows, a->run_mean, z->p_bits, b16->run_mean, b128->run_mean, z->run_mean, z->L,
                bc->tq35_bits / b16->run_mean, bc->tq35_bits / z->run_mean, b16->run_mean / z->run_mean);
    }
    fprintf(f, "\nMeasured shape:\n\n");
    int n = 0, grow16 = 0, grow64 = 0;
    double lo = 1e30, hi = 0;
    for (int i = 0; i < n_cases; i++) {
        const bench_case *bc = &cs[i];
        if (!bc->n_c5) continue;
        report_c5_shape(f, bc);
        double z = bc->c5[bc->n_c5 - 1].run_mean, g = c5_at(bc, 64)->run_mean / z;
        n++;
        grow16 += c5_at(bc, 16)->run_mean / z > 1.05;
        grow64 += g > 1.05;
        lo = g < lo ? g : lo, hi = g > hi ? g : hi;
    }
    if (!n) return;
    fprintf(f, "\nIn short: from L=16 to the full context the ratio over TQ-3.5 grows by more than 5%% in %d of %d "
               "model x text cases; from L=64 on, in %d of %d (factor x%.2f to x%.2f). Still growing past L=64:",
            grow16, n, grow64, n, lo, hi);
    for (int pass = 0; pass < 2; pass++) {
        int any = 0;
        if (pass) fprintf(f, "; not growing past L=64:");
        for (int i = 0; i < n_cases; i++) {
            const bench_case *bc = &cs[i];
            if (!bc->n_c5 || (c5_at(bc, 64)->run_mean / bc->c5[bc->n_c5 - 1].run_mean > 1.05) == pass) continue;
            fprintf(f, "%s %s on %s", any++ ? "," : "", bc->model, bc->text);
        }
        if (!any) fprintf(f, " none");
    }
    fprintf(f, ". Where it does not grow, what the model gains from context it gains in the first few dozen positions: the "
               "per-position cost then stays level (the paper's 'falls or stays flat'), so the ratio stops improving.\n");
}

static void report_store(FILE *f, FILE *csv, const bench_case *cs, int n_cases)
{
    fprintf(f, "\n## Store workload (computed)\n\n");
    fprintf(csv, "model,text,sessions,session_positions,unique_positions,representation,total_bytes,bits_per_session_position,ratio_vs_f16_per_session\n");
    for (int i = 0; i < n_cases; i++) {
        const bench_case *bc = &cs[i];
        if (!bc->wl_ok) continue;
        double pos = (double)bc->wl_positions, uq = (double)bc->wl_unique, f16 = bc->f16_bits / 8, tq = bc->tq35_bits / 8;
        struct {
            const char *name;
            double bytes;
        } rows[] = {
            {"f16 KV per session", pos * f16},
            {"TQ-3.5 KV per session", pos * tq},
            {"exact prefix sharing, f16 KV", uq * f16},
            {"exact prefix sharing, TQ-3.5 KV", uq * tq},
            {"model-coded per session (token floor, no sharing)", bc->wl_floor_all / 8},
            {"prefix sharing at the token floor", bc->wl_floor_unique / 8},
        };
        fprintf(f, "**%s on %s**: %zu sessions = one %d-token system prompt (BOS + text) + one of %zu %d-token turns + "
                   "a %d-token reply each (all taken from the text in order); %zu session positions, %zu unique trie positions "
                   "(sort + longest common prefix).\n\n",
                bc->model, bc->text, bc->wl_sessions, bc->wl_prompt, (size_t)bc->wl_groups,
                bc->wl_turn, bc->wl_reply, bc->wl_positions, bc->wl_unique);
        fprintf(f, "| representation | total bytes | bits per session position | vs f16 per session |\n|---|---:|---:|---:|\n");
        for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
            char a[32];
            fmt_ratio(a, sizeof a, rows[0].bytes / rows[k].bytes);
            fprintf(f, "| %s | %.0f | %.3f | %s |\n", rows[k].name, rows[k].bytes, rows[k].bytes * 8 / pos, a);
            csv_str(csv, bc->model, ",");
            csv_str(csv, bc->text, ",");
            fprintf(csv, "%zu,%zu,%zu,", bc->wl_sessions, bc->wl_positions, bc->wl_unique);
            csv_str(csv, rows[k].name, ",");
            fprintf(csv, "%.0f,%.4f,%.6g\n", rows[k].bytes, rows[k].bytes * 8 / pos, rows[0].bytes / rows[k].bytes);
        }
        for (int b = 0; b < 2; b++) {
            if (!bc->st_ok[b]) continue;
            char a[32], name[160];
            fmt_ratio(a, sizeof a, rows[0].bytes / bc->st_bytes[b]);
            snprintf(name, sizeof name, "`seqkv store`, %s: bytes on disk (%.0f session tokens, %.0f unique)",
                     b ? "default budget (materialised KV)" : "budget 0 (tokens only)", bc->st_tokens[b], bc->st_unique[b]);
            fprintf(f, "| %s | %.0f | %.3f | %s |\n", name, bc->st_bytes[b], bc->st_bytes[b] * 8 / bc->st_tokens[b], a);
            csv_str(csv, bc->model, ",");
            csv_str(csv, bc->text, ",");
            fprintf(csv, "%zu,%.0f,%.0f,", bc->wl_sessions, bc->st_tokens[b], bc->st_unique[b]);
            csv_str(csv, b ? "seqkv store, default budget (bytes on disk)" : "seqkv store, budget 0 (bytes on disk)", ",");
            fprintf(csv, "%.0f,%.4f,%.6g\n", bc->st_bytes[b], bc->st_bytes[b] * 8 / bc->st_tokens[b],
                    rows[0].bytes / bc->st_bytes[b]);
        }
        if (!bc->st_ok[0] && !bc->st_ok[1]) fprintf(f, "| `seqkv store` bytes on disk | not measured (--quick, --no-store, or the store command failed) | | |\n");
        fprintf(f, "\n");
    }
    fprintf(f, "The token-floor rows are sums of the model's surprisal (computed, not files). The `seqkv store` rows "
               "(when present) are a real store (issue 5, LMDB) holding the same sessions, written out as text and "
               "re-tokenized by `store put` (so its token counts can differ slightly); its bytes on disk are LMDB pages "
               "in use, as its `stats` reports them, index and free pages included.\n");
}

static const struct {
    const char *name;
    int layers, kv_heads, head_dim;
} geometries[] = {
    {"Llama-2-7B (MHA)", 32, 32, 128},
    {"Llama-3-8B (GQA)", 32, 8, 128},
    {"70B-class GQA (Llama-2/3-70B)", 80, 8, 128},
};

static void report_projection(FILE *f, FILE *csv, const bench_case *cs, int n_cases)
{
    fprintf(f, "\n## PROJECTION to large-model geometries (not a measurement)\n\n"
               "Assumptions: per-position KV bits = 2 (K, V) x layers x KV heads x (head_dim x bits + 16 for one fp16 "
               "norm per vector, TurboQuant as counted above; f16 without norms); the sequential cost is *our small models'* "
               "measured model-coded bits per position (file bytes incl. headers) on each text. A 7B model's "
               "surprisal on the same text would be lower (better prediction), so these ratios understate what a "
               "large model would reach on text it predicts well, and a model-coded restore of a 7B model costs one "
               "7B forward pass per token. The paper's ~914,000x compares 80 layers x 64 heads x 128 x 2 x 3 bits "
               "(3.93 Mbit, no norms) with ~4.3 bits/token.\n\n");
    fprintf(f, "| geometry | f16 bits/position | TQ-3.5 bits/position | model | text | model-coded bits | vs f16 | vs TQ-3.5 |\n");
    fprintf(f, "|---|---:|---:|---|---|---:|---:|---:|\n");
    fprintf(csv, "geometry,layers,kv_heads,head_dim,f16_bits,tq3.5_bits,model,text,model_coded_bits,ratio_vs_f16,ratio_vs_tq3.5\n");
    for (size_t g = 0; g < sizeof geometries / sizeof *geometries; g++) {
        double vecs = 2.0 * geometries[g].layers * geometries[g].kv_heads, hd = geometries[g].head_dim;
        double f16 = vecs * hd * 16, tq = vecs * (hd * 3.5 + 16);
        for (int i = 0; i < n_cases; i++) {
            const bench_row *mc = find_row(&cs[i], "model-coded tokens");
            if (!mc) continue;
            fprintf(f, "| %s | %.0f | %.0f | %s | %s | %.2f | %.0fx | %.0fx |\n", geometries[g].name, f16, tq, cs[i].model,
                    cs[i].text, mc->bits, f16 / mc->bits, tq / mc->bits);
            csv_str(csv, geometries[g].name, ",");
            fprintf(csv, "%d,%d,%d,%.0f,%.0f,", geometries[g].layers, geometries[g].kv_heads, geometries[g].head_dim, f16, tq);
            csv_str(csv, cs[i].model, ",");
            csv_str(csv, cs[i].text, ",");
            fprintf(csv, "%.4f,%.1f,%.1f\n", mc->bits, f16 / mc->bits, tq / mc->bits);
        }
    }
    fprintf(f, "| paper: 70B MHA, 3 bits, no norms | | 3932160 | (paper) | (paper) | ~4.3 | | ~914,000x |\n");
}

/* Plot data: plot_bits.tsv (representation x case), plot_c5.tsv and plot_restore.tsv (one block per case). */
static int write_plot_data(const char *dir, const bench_case *cs, int n_cases)
{
    FILE *b = open_out(dir, "plot_bits.tsv"), *c = open_out(dir, "plot_c5.tsv"), *r = open_out(dir, "plot_restore.tsv");
    if (!b || !c || !r) {
        if (b) fclose(b);
        if (c) fclose(c);
        if (r) fclose(r);
        return -1;
    }
    fprintf(b, "representation");
    for (int i = 0; i < n_cases; i++) fprintf(b, "\t\"%s/%s\"", cs[i].model, cs[i].text);
    fprintf(b, "\n");
    for (int k = 0; n_cases && k < cs[0].n_rows; k++) {
        fprintf(b, "\"%s\"", cs[0].rows[k].repr);
        for (int i = 0; i < n_cases; i++) {
            const bench_row *w = find_row(&cs[i], cs[0].rows[k].repr);
            fprintf(b, "\t%.4f", w ? w->bits : NAN);
        }
        fprintf(b, "\n");
    }
    for (int i = 0; i < n_cases; i++) {
        fprintf(c, "\"%s/%s\"\tbucket\trunning\tratio\ttq35\tf16\n", cs[i].model, cs[i].text);
        for (int k = 0; k < cs[i].n_c5; k++)
            fprintf(c, "%d\t%.5f\t%.5f\t%.3f\t%.1f\t%.1f\n", cs[i].c5[k].L, cs[i].c5[k].p_bits, cs[i].c5[k].run_mean,
                    cs[i].tq35_bits / cs[i].c5[k].run_mean, cs[i].tq35_bits, cs[i].f16_bits);
        fprintf(c, "\n\n");
        fprintf(r, "\"%s/%s\"\tbits\ttps\n", cs[i].model, cs[i].text);
        for (int k = 0; k < cs[i].n_rows; k++) {
            /* labels for one row per kind of representation, so they stay readable */
            static const char *const labelled[] = {"f32", "f16", "q8_0", "tq3", "zstd -3 (f16 KV)", ".skv codec kvq k=tq4,v=tq3",
                                                   "raw tokens + prefill", "model-coded tokens"};
            const char *lab = "";
            for (size_t j = 0; j < sizeof labelled / sizeof *labelled; j++)
                if (!strcmp(cs[i].rows[k].repr, labelled[j])) lab = labelled[j];
            fprintf(r, "%.4f\t%.1f\t\"%s\"\n", cs[i].rows[k].bits, cs[i].rows[k].restore_tps, lab);
        }
        fprintf(r, "\n\n");
    }
    int bad = ferror(b) | ferror(c) | ferror(r);
    bad |= fclose(b) | fclose(c) | fclose(r);
    return bad ? -1 : 0;
}

/* Runs gnuplot on scripts/plot_bench.gp; a note (not an error) when it cannot. */
static void render_plots(bench_opts *o, int n_cases)
{
    char script[4096], e[4300];
    if (!find_path("scripts/plot_bench.gp", script, sizeof script)) {
        add_note(o, "plots skipped: scripts/plot_bench.gp not found");
        return;
    }
    if (strchr(o->out, '\'') || strchr(o->out, '"')) {
        add_note(o, "plots skipped: the output directory name contains a quote");
        return;
    }
    snprintf(e, sizeof e, "outdir='%s'; ncases=%d", o->out, n_cases);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", "-e", e, script, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) st = -1;
    if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) == 127)
        add_note(o, "plots skipped: gnuplot not found (install gnuplot-nox: scripts/install-deps.sh --bench)");
    else if (WEXITSTATUS(st)) add_note(o, "plots incomplete: gnuplot exited with status %d", WEXITSTATUS(st));
}

/* "2026-11-30 01:03 UTC on 2 CPUs, load average before the run: ..." */
static void machine_line(char *buf, size_t cap)
{
    char load[64] = "unknown";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        double a = 0, b = 0, c = 0;
        if (fscanf(lf, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(load, sizeof load, "%.2f %.2f %.2f", a, b, c);
        fclose(lf);
    }
    time_t t = time(NULL);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    snprintf(buf, cap, "%s on %ld CPUs, load average before the run: %s", when, sysconf(_SC_NPROCESSORS_ONLN), load);
}

static void report_header(FILE *f, const bench_opts *o, const bench_text *tx, int n_tx, double secs)
{
    fprintf(f, "# seqkv bench report\n\nGenerated by `seqkv bench%s%s --threads %ld` (seqkv %s) in %.0f s on this machine; "
               "timings depend on its load. Measured %s. Definitions: docs/bench.md.\n\n",
            o->quick ? " --quick" : "", o->tokens && !o->quick ? " --tokens N" : "", o->threads, skv_version(), secs,
            o->machine);
    fprintf(f, "Texts (each cut to one context, BOS first):\n\n");
    for (int i = 0; i < n_tx; i++) fprintf(f, "- `%s`: %s (%zu bytes)\n", tx[i].label, tx[i].source, tx[i].len);
    for (int i = 0; i < o->n_notes; i++) fprintf(f, "%s- note: %s\n", i ? "" : "\n", o->notes[i]);
}

static int write_report(bench_opts *o, const bench_text *tx, int n_tx, const bench_case *cs, int n_cases, double secs)
{
    FILE *rep = open_out(o->out, "report.md"), *c1 = open_out(o->out, "representations.csv"),
         *c2 = open_out(o->out, "corollary5.csv"), *c3 = open_out(o->out, "store_workload.csv"),
         *c4 = open_out(o->out, "projection.csv");
    int rc = rep && c1 && c2 && c3 && c4 ? 0 : -1;
    if (!rc) {
        write_csvs(c1, c2, cs, n_cases);
        report_header(rep, o, tx, n_tx, secs);
        fprintf(rep, "\n## Every representation of the same KV cache\n\nRatios: how many times smaller than f16 / "
                     "TurboQuant-3.5 per position (>1 = smaller).\n");
        for (int i = 0; i < n_cases; i++) report_table(rep, &cs[i]);
        report_ratios(rep, cs, n_cases);
        report_c5(rep, cs, n_cases);
        report_store(rep, c3, cs, n_cases);
        report_projection(rep, c4, cs, n_cases);
        fprintf(rep, "\n## Plots\n\n");
        char p[4200];
        snprintf(p, sizeof p, "%s/bits.png", o->out);
        if (access(p, R_OK) == 0) fprintf(rep, "![bits per position](bits.png)\n\n![Corollary 5](corollary5.png)\n\n![restore speed vs size](restore.png)\n");
        else fprintf(rep, "(no plots: see the notes above)\n");
    }
    FILE *fs[] = {rep, c1, c2, c3, c4};
    for (size_t i = 0; i < 5; i++)
        if (fs[i] && (ferror(fs[i]) | fclose(fs[i]))) rc = -1;
    if (rc) cli_error("cannot write the report in '%s'", o->out);
    return rc;
}

/* ---- command ------------------------------------------------------------------------- */

static const char bench_help[] =
    "usage: seqkv bench [-m MODEL ...] [-f TEXT ...] [--out DIR] [--quick] [--threads N]\n"
    "                   [--tokens N] [--windows W] [--no-plots] [--no-store]\n"
    "                   [--no-kv-files]\n\n"
    "Measures every representation of the same KV cache (per-vector f32/f16/q8_0/q4_0/TurboQuant,\n"
    "zstd on the KV, raw tokens + prefill, model-coded tokens) on each model x text: bits per\n"
    "position, ratios to f16 and TurboQuant-3.5, quality cost, restore speed, bit-exact verification;\n"
    "plus Corollary 5 (bits per position vs context length), a multi-session store workload and a\n"
    "labelled projection to 7B/8B/70B geometries. Writes report.md, CSVs and PNG plots (gnuplot).\n"
    "  -m MODEL     model (repeatable; default: the bundled model + stories260K when present)\n"
    "  -f TEXT      text file (repeatable; default: held-out KJV, Debian fortunes, stories samples)\n"
    "  --out DIR    output directory (default bench/results/report)\n"
    "  --quick      one model, one text, 128 tokens, a subset of schemes (CI smoke test)\n"
    "  --threads N  threads for prefill/restore (default 1)\n"
    "  --tokens N   tokens per text, BOS included (default: the model's context; capped by it)\n"
    "  --windows W  windows averaged for Corollary 5 (default 16, as many as the text holds; --quick 1)\n"
    "  --no-plots   do not run gnuplot\n"
    "  --no-store   skip the real `seqkv store` rows of the store workload (never run with --quick)\n"
    "  --no-kv-files  skip the quantized-KV .skv rows (seqkv compress --codec f16|q8|...; not with --quick)\n"
    "Definitions of every column: docs/bench.md.\n";

static int parse_args(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(bench_help, stdout);
            return 1;
        }
        if (!strcmp(a, "--quick")) o->quick = 1;
        else if (!strcmp(a, "--no-plots")) o->plots = 0;
        else if (!strcmp(a, "--no-store")) o->store = 0;
        else if (!strcmp(a, "--no-kv-files")) o->kv_files = 0;
        else if (!strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "--out")) {
            if (!v) {
                cli_error("option %s needs a value", a);
                return -1;
            }
            if ((a[1] == 'm' && o->n_models == MAX_MODELS) || (a[1] == 'f' && o->n_files == MAX_TEXTS)) {
                cli_error("too many %s options (at most %d)", a, a[1] == 'm' ? MAX_MODELS : MAX_TEXTS);
                return -1;
            }
            if (a[1] == 'm') o->models[o->n_models++] = v;
            else if (a[1] == 'f') o->files[o->n_files++] = v;
            else o->out = v;
            i++;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (cli_parse_int(a, v, 1, 256, &o->threads)) return -1;
            i++;
        } else if (!strcmp(a, "--tokens")) {
            if (cli_parse_int(a, v, 16, 1 << 20, &o->tokens)) return -1;
            i++;
        } else if (!strcmp(a, "--windows")) {
            if (cli_parse_int(a, v, 1, 1024, &o->windows)) return -1;
            i++;
        } else {
            cli_error("unknown option '%s' (see seqkv bench --help)", a);
            return -1;
        }
    }
    return 0;
}

static int load_texts(bench_opts *o, bench_text *tx, int *n_tx)
{
    if (!o->n_files) return default_texts(o, tx, n_tx);
    for (*n_tx = 0; *n_tx < o->n_files; (*n_tx)++)
        if (text_from_file(&tx[*n_tx], o->files[*n_tx])) return -1;
    return 0;
}

static int run_all(bench_opts *o, const bench_text *tx, int n_tx, bench_case *cs, int *n_cases)
{
    *n_cases = 0;
    for (int mi = 0; mi < o->n_models; mi++) {
        skv_model *m = cli_load_model(o->models[mi]);
        char label[64];
        if (!m) return -1;
        base_label(o->models[mi], label, sizeof label);
        for (int ti = 0; ti < n_tx; ti++)
            if (run_case(m, o->models[mi], label, &tx[ti], o, &cs[(*n_cases)++])) {
                skv_model_free(m);
                return -1;
            }
        skv_model_free(m);
    }
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o = {.out = "bench/results/report", .plots = 1, .store = 1, .kv_files = 1, .threads = 1};
    bench_text tx[MAX_TEXTS];
    char mbuf[4096];
    int n_tx = 0, n_cases = 0, rc = CLI_FAIL;
    memset(tx, 0, sizeof tx);
    int pa = parse_args(argc, argv, &o);
    if (pa) return pa > 0 ? CLI_OK : CLI_USAGE;
    if (o.quick && !o.tokens) o.tokens = 128;
    if (o.quick) o.store = 0, o.kv_files = 0;
    if (!o.windows) o.windows = o.quick ? 1 : 16;
    if (!o.n_models) default_models(&o, mbuf, sizeof mbuf);
    bench_case *cs = calloc(MAX_CASES, sizeof *cs);
    double t0 = cli_now();
    machine_line(o.machine, sizeof o.machine);
    if (!cs || load_texts(&o, tx, &n_tx)) goto done;
    if (mkdir_p(o.out)) {
        cli_error("cannot create the output directory '%s': %s", o.out, strerror(errno));
        goto done;
    }
    if (run_all(&o, tx, n_tx, cs, &n_cases)) goto done;
    if (write_plot_data(o.out, cs, n_cases)) goto done;
    static const char *const pngs[] = {"bits.png", "corollary5.png", "restore.png"};
    for (size_t i = 0; i < sizeof pngs / sizeof *pngs; i++) { /* never embed a previous run's plots */
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", o.out, pngs[i]);
        remove(p);
    }
    if (o.plots) render_plots(&o, n_cases);
    else add_note(&o, "plots skipped (--no-plots)");
    if (write_report(&o, tx, n_tx, cs, n_cases, cli_now() - t0)) goto done;
    printf("bench: %d model x text cases in %.0f s; report: %s/report.md\n", n_cases, cli_now() - t0, o.out);
    for (int i = 0; i < o.n_notes; i++) printf("note: %s\n", o.notes[i]);
    rc = CLI_OK;
done:
    for (int i = 0; i < MAX_TEXTS; i++) free(tx[i].bytes);
    free(cs);
    return rc;
}
