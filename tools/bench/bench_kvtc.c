/* The transform codec kvtc (src/container/kvtc.h) on kv-rd's curves, and `seqkv kvtc-calib`,
 * which measures a calibration on a text and writes it as DIR/kvtc-<id>.cal. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_rd.h"
#include "container/kvtc.h"
#include "core/detmath.h"

/* ---- kv-rd points ------------------------------------------------------------------ */

void rd_kvtc_points(rd_point *pts, int *n, const char *steps, double ratio)
{
    static const struct { int pred, ramp; const char *tag; } var[] = {
        {SKV_KVTC_NONE, 0, "kvtc"}, {SKV_KVTC_NONE, 1, "kvtc+ramp"}, {SKV_KVTC_TOK, 1, "kvtc+tok+ramp"}};
    for (size_t v = 0; v < sizeof var / sizeof *var; v++)
        for (const char *s = steps; s && *s;) {
            char *end;
            double st = strtod(s, &end);
            if (end == s) break;
            rd_point p = {.family = RD_KVTC, .pred = var[v].pred, .levels = var[v].ramp ? RD_LV_RAMP : 0,
                          .step = (float)st, .kv_ratio = (float)ratio};
            snprintf(p.name, sizeof p.name, "%s@%g", var[v].tag, st);
            if (*n < RD_MAX_POINTS) pts[*n] = p;
            (*n)++;
            s = *end == ',' ? end + 1 : end;
        }
}

int rd_kvtc_restore(rd_window *w, rd_point *pt)
{
    skv_kvtc_params p = {.predictor = pt->pred, .step = {pt->step * pt->kv_ratio, pt->step / pt->kv_ratio},
                         .theta = w->tc_theta, .ramp = pt->levels == RD_LV_RAMP, .tokens = w->win};
    uint8_t *buf = NULL;
    size_t len = 0;
    skv_err err = {0};
    if (!w->tc) return -1;
    double t0 = rd_cpu_now();
    int rc = skv_kvtc_encode(&p, w->tc, w->kv, w->P, &buf, &len, NULL);
    pt->enc_cpu += rd_cpu_now() - t0;
    t0 = rd_cpu_now();
    if (!rc) rc = skv_kvtc_decode(buf, len, w->tc, w->win, w->out, w->nf, &err);
    pt->dec_cpu += rd_cpu_now() - t0;
    if (rc) cli_error("kvtc: %s (%d)", err.msg, rc);
    pt->bits += 8.0 * (double)len;
    free(buf);
    return rc ? -1 : 0;
}

skv_kvtc_calib *rd_kvtc_load(const char *path)
{
    size_t len = 0;
    skv_err err = {0};
    skv_kvtc_calib *c = NULL;
    uint8_t *buf = (uint8_t *)cli_read_file(path, &len);
    if (buf && skv_kvtc_calib_load(buf, len, &c, &err)) cli_error("%s: %s", path, err.msg);
    free(buf);
    return c;
}

/* ---- seqkv kvtc-calib -------------------------------------------------------------- */

typedef struct {
    const char *model, *file, *dir, *rope;
    long ctx, max_tok, threads, weights;
    double weight_power;
} calib_opts;

#define F(x) offsetof(calib_opts, x)
static const cli_opt calib_table[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_FILE(F(file), "TEXT", "calibration text (never one the evaluation uses)"),
    CLI_OPT_CTX(F(ctx), 8, "window length, BOS included (default min(512, the model's context))"),
    {"tokens", 'n', CLI_INT, "N", -1, 1 << 30, F(max_tok), "text tokens used (default 8192; -1 or 0 = all)"},
    {"dir", 0, CLI_STR, "DIR", 0, 0, F(dir), "where kvtc-<id>.cal is written (default .)"},
    {"rope", 0, CLI_STR, "none|pairs|halves", 0, 0, F(rope), "undo K's RoPE before the transform: channel pairs (2i, 2i+1)\n"
                                                            "(llama), halves (i, i + d/2: NeoX), or none (default pairs)"},
    {"weights", 0, CLI_INT, "N", 0, 64, F(weights),
     "step weights per layer and kind from the model's KL sensitivity, measured\n"
     "on the first N windows of TEXT (0 = none, the steps of the calibration's RMS\n"
     "alone; default 4)"},
    {"weight-power", 0, CLI_FLOAT, "X", 0, 1, F(weight_power),
     "with --weights: the measured weights raised to X (default 0.5: half-way to\n"
     "none in the log, a hedge for texts unlike TEXT; 1: as measured)"},
    CLI_OPT_THREADS(F(threads)),
    {0},
};

static const cli_cmd calib_cmd = {
    "kvtc-calib", "[-m MODEL] -f TEXT [-c N] [-n N] [--dir DIR]\n",
    "Measures the transform codec's calibration (per layer, kind and KV head: the mean and the\n"
    "eigenvectors of the head vectors' covariance) over windows of TEXT and writes it to\n"
    "DIR/kvtc-<XXH3-64>.cal; prints that path. kv-rd --kvtc FILE reads it. With --weights N\n"
    "(default 4) it also measures, on N windows of TEXT, how much KL each layer and kind's\n"
    "coding error costs, and weights their steps so that the error goes where it costs less.\n",
    calib_table, 0, NULL};

/* Every window's KV (all its positions) into the accumulation. */
static int calib_windows(skv_model *m, const calib_opts *o, const int32_t *tok, size_t n, skv_kvtc_calib *c)
{
    skv_model_info mi;
    skv_model_get_info(m, &mi);
    skv_ctx_params cp = skv_ctx_default_params();
    size_t S = (size_t)o->ctx - 1, nf = (size_t)mi.n_layer * 2 * mi.n_head_kv * mi.head_dim * (size_t)o->ctx;
    cp.n_ctx = (int)o->ctx, cp.n_threads = (int)o->threads;
    skv_ctx *x = NULL;
    int32_t *win = malloc((size_t)o->ctx * sizeof *win);
    float *lg = malloc((size_t)o->ctx * (size_t)mi.n_vocab * sizeof *lg), *kv = malloc(nf * sizeof *kv);
    int rc = win && lg && kv && !skv_ctx_create(m, &cp, &x) ? 0 : -1;
    for (size_t s0 = 0; !rc && s0 + S <= n; s0 += S)
        rc = cli_bos_window(x, mi.bos_id, tok + s0, S, win, lg) || skv_ctx_kv_read(x, 0, (int)o->ctx, kv) ||
                     skv_kvtc_calib_add(c, kv, (size_t)o->ctx)
                 ? -1
                 : 0;
    skv_ctx_free(x);
    free(win), free(lg), free(kv);
    return rc;
}

/* ---- step weights from the model's KL sensitivity ---------------------------------- */

/* One calibration window for the weights: exact logits lf, prefix KV kv (P positions), its
 * kvtc reconstruction rec (no predictor, no ramp, relative step 1), scratch tmp. */
typedef struct {
    skv_model *m;
    skv_model_info mi;
    skv_ctx *c, *cq;
    int32_t *win;
    float *lf, *lq, *kv, *rec, *tmp;
    size_t S, P, nf, block; /* tokens after BOS, prefix, floats of the prefix, of one (layer, kind) */
    double kl[2 * 4096], se[2 * 4096]; /* per (layer, kind): summed KL (nats) and squared error */
} sens_win;

static int sens_alloc(sens_win *w, skv_model *m, const calib_opts *o)
{
    skv_ctx_params cp = skv_ctx_default_params();
    memset(w, 0, sizeof *w);
    w->m = m;
    skv_model_get_info(m, &w->mi);
    cp.n_ctx = (int)o->ctx, cp.n_threads = (int)o->threads;
    w->S = (size_t)o->ctx - 1, w->P = (size_t)o->ctx / 2;
    w->block = (size_t)w->mi.n_head_kv * w->P * (size_t)w->mi.head_dim;
    w->nf = (size_t)w->mi.n_layer * 2 * w->block;
    size_t V = (size_t)w->mi.n_vocab, rows = (size_t)o->ctx;
    w->win = malloc(rows * sizeof *w->win);
    w->lf = malloc(rows * V * sizeof *w->lf), w->lq = malloc(rows * V * sizeof *w->lq);
    w->kv = malloc(w->nf * sizeof *w->kv), w->rec = malloc(w->nf * sizeof *w->rec), w->tmp = malloc(w->nf * sizeof *w->tmp);
    if (!w->win || !w->lf || !w->lq || !w->kv || !w->rec || !w->tmp || skv_ctx_create(m, &cp, &w->c) ||
        skv_ctx_create(m, &cp, &w->cq))
        return -1;
    return 0;
}

static void sens_free(sens_win *w)
{
    skv_ctx_free(w->c), skv_ctx_free(w->cq);
    free(w->win), free(w->lf), free(w->lq), free(w->kv), free(w->rec), free(w->tmp);
}

/* KL summed over the continuation rows with block lk of the prefix coded, the rest exact. */
static int sens_block(sens_win *w, size_t lk)
{
    size_t V = (size_t)w->mi.n_vocab, off = lk * w->block;
    cli_score sc = {0, 0, 0, 0};
    memcpy(w->tmp, w->kv, w->nf * sizeof *w->tmp);
    memcpy(w->tmp + off, w->rec + off, w->block * sizeof *w->tmp);
    for (size_t i = off; i < off + w->block; i++) w->se[lk] += ((double)w->kv[i] - w->rec[i]) * ((double)w->kv[i] - w->rec[i]);
    if (skv_ctx_kv_write(w->cq, 0, (int)w->P, w->tmp) ||
        skv_ctx_prefill(w->cq, w->win + w->P, w->S + 1 - w->P, SKV_LOGITS_ALL, w->lq))
        return -1;
    for (size_t j = w->P; j < w->S; j++) cli_score_row(w->lf + j * V, w->lq + (j - w->P) * V, (int)V, w->win[j + 1], &sc);
    w->kl[lk] += sc.kl;
    return 0;
}

/* One window at token s0 of tok: every (layer, kind)'s KL and squared error. */
static int sens_window(sens_win *w, const skv_kvtc_calib *c, const int32_t *tok)
{
    skv_kvtc_params p = {.predictor = SKV_KVTC_NONE, .step = {1.0f, 1.0f}};
    uint8_t *buf = NULL;
    size_t len = 0;
    if (cli_bos_window(w->c, w->mi.bos_id, tok, w->S, w->win, w->lf) || skv_ctx_kv_read(w->c, 0, (int)w->P, w->kv) ||
        skv_kvtc_encode(&p, c, w->kv, w->P, &buf, &len, w->rec))
        return -1;
    free(buf);
    for (size_t lk = 0; lk < (size_t)w->mi.n_layer * 2; lk++)
        if (sens_block(w, lk)) return -1;
    return 0;
}

/* Weights from the sensitivities s = KL / squared error: the MSE-optimal steps under a KL
 * weighted by s are proportional to 1 / sqrt(s) (reverse water-filling with weights), so
 * w[lk] = s^-1/2 / the (layer, kind)'s RMS (the step's unit), scaled to a geometric mean of
 * 1, raised to `power` (--weight-power: 1 as measured, 0.5 half-way to none in the log, a
 * hedge for texts unlike the calibration's) and clamped to [1/64, 64]. */
static int sens_weights(const sens_win *w, skv_kvtc_calib *c, double power)
{
    size_t LK = (size_t)w->mi.n_layer * 2, H = (size_t)w->mi.n_head_kv, d = (size_t)w->mi.head_dim;
    float wt[2 * 4096];
    double lw[2 * 4096], mean = 0.0;
    for (size_t lk = 0; lk < LK; lk++) {
        double e = 0.0, s = w->kl[lk] / (w->se[lk] > 1e-30 ? w->se[lk] : 1e-30);
        for (size_t h = 0; h < H; h++)
            for (size_t j = 0; j < d; j++) e += (double)skv_kvtc_calib_eig(c, lk * H + h)[j];
        double rms = sqrt(e / (double)(H * d));
        lw[lk] = -0.5 * skv_det_log(s > 1e-30 ? s : 1e-30) - skv_det_log(rms > 1e-20 ? rms : 1.0);
        mean += lw[lk] / (double)LK;
    }
    for (size_t lk = 0; lk < LK; lk++) {
        double x = skv_det_exp(power * (lw[lk] - mean));
        wt[lk] = (float)(x < 1.0 / 64 ? 1.0 / 64 : x > 64.0 ? 64.0 : x);
        fprintf(stderr, "kvtc-calib: layer %zu %s: KL %.4g nats, squared error %.4g, step weight %.3f\n", lk / 2,
                lk & 1 ? "V" : "K", w->kl[lk], w->se[lk], (double)wt[lk]);
    }
    return skv_kvtc_calib_set_weights(c, wt) ? -1 : 0;
}

static int calib_weights(skv_model *m, const calib_opts *o, const int32_t *tok, size_t n, skv_kvtc_calib *c)
{
    sens_win *w = malloc(sizeof *w);
    int rc = w && !sens_alloc(w, m, o) ? 0 : -1;
    long done = 0;
    for (size_t s0 = 0; !rc && done < o->weights && s0 + w->S <= n; s0 += w->S, done++) rc = sens_window(w, c, tok + s0);
    if (!rc) rc = sens_weights(w, c, o->weight_power);
    if (rc) cli_error("cannot measure the step weights");
    if (w) sens_free(w);
    free(w);
    return rc;
}

static int calib_write(const skv_kvtc_calib *c, const char *dir)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    char path[4096];
    if (skv_kvtc_calib_save(c, &buf, &len)) return -1;
    snprintf(path, sizeof path, "%s/kvtc-%016" PRIx64 ".cal", dir ? dir : ".", skv_kvtc_calib_id(c));
    FILE *f = fopen(path, "wb");
    int rc = f && fwrite(buf, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(buf);
    if (rc) cli_error("cannot write %s: %s", path, strerror(errno));
    else printf("%s\n", path);
    return rc;
}

static int calib_main(skv_model *m, calib_opts *o)
{
    size_t n = 0, len = 0;
    skv_model_info mi;
    skv_model_get_info(m, &mi);
    if (!o->ctx) o->ctx = mi.n_ctx_train < 512 ? mi.n_ctx_train : 512;
    char *text = cli_read_file(o->file, &len);
    int32_t *tok = text ? cli_tokenize(m, text, len, 0, &n) : NULL;
    skv_kvtc_calib *c = NULL;
    if (o->max_tok > 0 && n > (size_t)o->max_tok) n = (size_t)o->max_tok;
    int rc = tok && !skv_kvtc_calib_create((uint32_t)mi.n_layer, (uint32_t)mi.n_head_kv, (uint32_t)mi.head_dim, &c) ? 0 : -1;
    int style = !o->rope || !strcmp(o->rope, "pairs") ? SKV_KVTC_ROPE_PAIRS : !strcmp(o->rope, "halves") ? SKV_KVTC_ROPE_HALVES : 0;
    if (!rc && style && skv_kvtc_calib_set_rope(c, style, (uint32_t)mi.rope_dim, mi.rope_base))
        rc = -1, cli_error("the model's RoPE (%d dims, base %g) is not one kvtc can undo", mi.rope_dim, (double)mi.rope_base);
    if (!rc && (n < (size_t)o->ctx - 1 || mi.bos_id < 0)) rc = -1, cli_error("no BOS, or fewer tokens (%zu) than one window", n);
    if (!rc) rc = calib_windows(m, o, tok, n, c);
    if (!rc && skv_kvtc_calib_finish(c)) rc = -1, cli_error("the eigen-decomposition did not converge");
    if (!rc && o->weights) rc = calib_weights(m, o, tok, n, c);
    if (!rc) rc = calib_write(c, o->dir);
    skv_kvtc_calib_free(c);
    free(text), free(tok);
    return rc;
}

int cmd_kvtc_calib(int argc, char **argv)
{
    calib_opts o = {.max_tok = 8192, .threads = 1, .weights = 4, .weight_power = 0.5};
    int rc = cli_parse(&calib_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (!o.file) return cli_usage(&calib_cmd, "needs a text file (-f FILE)");
    if (o.rope && strcmp(o.rope, "none") && strcmp(o.rope, "pairs") && strcmp(o.rope, "halves"))
        return cli_usage(&calib_cmd, "--rope is none, pairs or halves");
    skv_model *m = cli_load_model(o.model);
    rc = m && !calib_main(m, &o) ? CLI_OK : CLI_FAIL;
    skv_model_free(m);
    return rc;
}
