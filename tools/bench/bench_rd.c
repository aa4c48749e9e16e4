/* seqkv kv-rd: rate-distortion curves of stored KV caches. For each window of the text
 * (BOS + C-1 tokens): the exact run gives the reference logits; the KV of the first P
 * positions is stored with a codec and restored (decoded without the model, except the
 * points that say otherwise), loaded into a second context (skv_ctx_kv_write), and the
 * remaining tokens are run over that restored cache. Scored rows: P .. C-2, exactly as
 * kv-quality scores (cli_score_row): KL(p_exact || p_restored), perplexity, top-1.
 * Bits: every stored bit of the KV of the prefix (norms, scales, steps, coefficients,
 * headers) per prefix position. Restore: CPU time of the decode alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_rd.h"
#include "container/kvcodec.h"
#include "container/kvpred.h"
#include "container/kvpred_quality.h"
#include "container/kvtc.h"
#include "engine/layer0.h"
#include "quant/quant.h"

double rd_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double rd_surprisal(const rd_window *w, size_t t, double *p_top1, int *is_top1)
{
    size_t V = (size_t)w->mi.n_vocab;
    *p_top1 = 0.0, *is_top1 = 0;
    if (t == 0) return 0.0;
    const float *l = w->lf + (t - 1) * V;
    size_t am = 0;
    for (size_t i = 1; i < V; i++) am = l[i] > l[am] ? i : am;
    double z = 0.0;
    for (size_t i = 0; i < V; i++) z += exp((double)l[i] - l[am]);
    *p_top1 = 1.0 / z;
    *is_top1 = (size_t)w->win[t] == am;
    return (log(z) - ((double)l[w->win[t]] - l[am])) / log(2.0);
}

/* ---- the points ---------------------------------------------------------------- */

/* Adds p; past RD_MAX_POINTS the point is dropped and *n counts it (rd_main refuses). */
static void add_point(rd_point *pts, int *n, rd_point p)
{
    if (*n < RD_MAX_POINTS) pts[*n] = p;
    (*n)++;
}

static void pervec_points(rd_point *pts, int *n)
{
    static const char *sch[][2] = {{"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"tq2", "tq2"}, {"tq3", "tq3"},
                                   {"tq4", "tq3"}, {"tq4", "tq4"}, {"tq3p", "tq3p"}};
    for (size_t i = 0; i < sizeof sch / sizeof *sch; i++) {
        rd_point p = {.family = RD_PERVEC, .scheme = {skv_quant_parse(sch[i][0]), skv_quant_parse(sch[i][1])}};
        if (strcmp(sch[i][0], sch[i][1])) snprintf(p.name, sizeof p.name, "TQ-3.5 (k=%s v=%s)", sch[i][0], sch[i][1]);
        else snprintf(p.name, sizeof p.name, "%s", sch[i][0]);
        add_point(pts, n, p);
    }
    for (int i = 0; i < 2; i++) {
        int sc = skv_quant_parse(i ? "tq3" : "tq2");
        rd_point p = {.family = RD_PERVEC, .scheme = {sc, sc}, .window = 64};
        snprintf(p.name, sizeof p.name, "%s+window64", i ? "tq3" : "tq2");
        add_point(pts, n, p);
    }
}

/* 1 when the comma-separated list names tag exactly. */
static int rd_list_has(const char *list, const char *tag)
{
    size_t n = strlen(tag);
    for (const char *s = list; (s = strstr(s, tag)); s += n)
        if ((s == list || s[-1] == ',') && (s[n] == ',' || s[n] == 0)) return 1;
    return 0;
}

static void pred_points(rd_point *pts, int *n, const char *steps, const char *preds, double ratio)
{
    static const struct { int pred, levels, l0, rot; const char *tag; } var[] = {
        {SKV_KVP_NONE, 0, 0, 0, "none"}, {SKV_KVP_DELTA, 0, 0, 0, "delta"}, {SKV_KVP_LPC, 0, 0, 0, "lpc"},
        {SKV_KVP_LPC2, 0, 0, 0, "lpc2"}, {SKV_KVP_TOK, 0, 0, 0, "tok"},
        {SKV_KVP_TOK, RD_LV_SURPRISAL, 0, 0, "tok+surprisal"}, {SKV_KVP_TOK, RD_LV_SINK, 0, 0, "tok+sink"},
        {SKV_KVP_TOK, RD_LV_RECENT, 0, 0, "tok+sink+recent"}, {SKV_KVP_TOK, RD_LV_RAMP, 0, 0, "tok+ramp"},
        {SKV_KVP_TOK, 0, 1, 0, "tok+layer0"}, {SKV_KVP_TOK, RD_LV_RAMP, 1, 0, "tok+ramp+layer0"},
        {SKV_KVP_NONE, 0, 0, 1, "none+rot"}, {SKV_KVP_TOK, 0, 0, 1, "tok+rot"},
        {SKV_KVP_TOK, RD_LV_RAMP, 0, 1, "tok+ramp+rot"}, {SKV_KVP_TOK, RD_LV_RAMP, 1, 1, "tok+ramp+layer0+rot"}};
    for (size_t v = 0; v < sizeof var / sizeof *var; v++)
        for (const char *s = steps; *s;) {
            char *end;
            double st = strtod(s, &end);
            if (end == s) break;
            rd_point p = {.family = RD_PRED, .pred = var[v].pred, .levels = var[v].levels, .l0 = var[v].l0,
                          .rot = var[v].rot, .step = (float)st, .kv_ratio = (float)ratio};
            snprintf(p.name, sizeof p.name, "%s@%g", var[v].tag, st);
            if (!preds || rd_list_has(preds, var[v].tag)) add_point(pts, n, p);
            s = *end == ',' ? end + 1 : end;
        }
}

/* Target-quality points: tok+ramp and tok+ramp+layer0, the step searched by the writer. */
static void kl_points(rd_point *pts, int *n, const char *targets)
{
    for (const char *s = targets; s && *s;) {
        char *end;
        double kl = strtod(s, &end);
        if (end == s) break;
        for (int l0 = 0; l0 < 2; l0++) {
            rd_point p = {.family = RD_PRED, .pred = SKV_KVP_TOK, .levels = RD_LV_RAMP, .l0 = l0, .step = 1.0f,
                          .kv_ratio = 1.0f, .kl = (float)kl};
            snprintf(p.name, sizeof p.name, "tok+ramp%s@kl=%g", l0 ? "+layer0" : "", kl);
            add_point(pts, n, p);
        }
        s = *end == ',' ? end + 1 : end;
    }
}

static void topk_points(rd_point *pts, int *n, const char *steps)
{
    for (const char *s = steps; *s;) {
        char *end;
        double st = strtod(s, &end);
        if (end == s) break;
        rd_point p = {.family = RD_TOPK, .step = (float)st};
        snprintf(p.name, sizeof p.name, "topk4@%g", st);
        add_point(pts, n, p);
        s = *end == ',' ? end + 1 : end;
    }
}

/* ---- restoring one point ------------------------------------------------------ */

static int restore_pervec(rd_window *w, rd_point *pt)
{
    int sc[2] = {pt->scheme[0], pt->scheme[1]};
    skv_kvcodec *kc = NULL;
    size_t pb, P = w->P, d = (size_t)w->mi.head_dim, nser = w->nf / (P * d);
    uint8_t *buf;
    if (skv_kvcodec_create(&kc, sc, 0, (uint32_t)w->mi.n_layer, (uint32_t)w->mi.n_head_kv, (uint32_t)d)) return -1;
    pb = skv_kvcodec_position_bytes(kc);
    int rc = (buf = malloc(pb * P)) ? skv_kvcodec_encode(kc, w->kv, P, buf, pb * P, NULL, NULL) : -1;
    double t0 = rd_cpu_now();
    if (!rc) rc = skv_kvcodec_decode(kc, buf, pb * P, P, w->out, w->nf);
    pt->dec_cpu += rd_cpu_now() - t0;
    size_t W = (size_t)pt->window < P ? (size_t)pt->window : P;
    for (size_t b = 0; b < nser && W; b++) /* the window: exact values, counted as f16 */
        memcpy(w->out + (b * P + P - W) * d, w->kv + (b * P + P - W) * d, W * d * sizeof(float));
    pt->bits += 8.0 * (double)pb * (double)(P - W) + 16.0 * (double)(W * d * nser);
    free(buf);
    skv_kvcodec_free(kc);
    return rc ? -1 : 0;
}

/* Per-position levels (step x 2^(L/2)). RD_LV_SURPRISAL: the more surprising the token,
 * the finer the step (none below 4 bits of surprisal, up to 2^3 coarser for a certain one).
 * RD_LV_SINK: position 0 (BOS, the attention sink) at the base step, every other 4x
 * coarser (so the bulk step is 4x the base: points are named by the bulk step).
 * RD_LV_RECENT: as SINK, and the last 64 positions 2x coarser than the base.
 * RD_LV_RAMP: the step grows with the distance D from the end of the prefix, as
 * sqrt(D / 4) (L = 2 log2(D / 4), at most 7), BOS at the base step; the base is 1/8 of
 * the named step. */
static void position_levels(const rd_window *w, int mode, uint8_t *lv)
{
    for (size_t t = 0; t < w->P; t++) {
        double p1;
        int top;
        double s = rd_surprisal(w, t, &p1, &top), L = floor(4.0 - s);
        if (mode == RD_LV_SURPRISAL) lv[t] = (uint8_t)(t == 0 ? 0 : L < 0 ? 0 : L > 6 ? 6 : L);
        else lv[t] = t == 0 ? 0 : mode == RD_LV_RECENT && t + 64 >= w->P ? 2 : 4;
    }
}

/* Layer 0 of the prefix regenerated by the model (what a restore of a layer0 file does),
 * timed with the decode; it must be the exact rows. */
static int regen_layer0(rd_window *w, rd_point *pt)
{
    size_t l0 = 2 * (size_t)w->mi.n_head_kv * w->P * (size_t)w->mi.head_dim;
    double t0 = rd_cpu_now();
    int rc = skv_ctx_layer0_kv(w->cq, w->win, w->P, 0, w->out);
    pt->dec_cpu += rd_cpu_now() - t0;
    if (rc || memcmp(w->out, w->kv, l0 * sizeof(float))) {
        cli_error("layer 0 regenerated by the model differs from the prefill's");
        return -1;
    }
    return 0;
}

/* A target-quality point: the writer's search (it runs the window's prefix tail), then the
 * ordinary model-free decode (layer 0 copied exact for +layer0, as the model would). */
static int restore_pred_kl(rd_window *w, rd_point *pt)
{
    skv_kvp_params p = {.predictor = pt->pred, .step = {pt->step, pt->step}, .tokens = w->win, .ramp = 1,
                        .layer0 = pt->l0, .kl = pt->kl, .rot = pt->rot};
    skv_kvp_header h;
    uint8_t *body = NULL;
    size_t len = 0;
    double kl = 0, t0 = rd_cpu_now();
    int rc = skv_kvp_encode_quality(&p, w->m, w->win, w->kv, w->P, &body, &len, &h, NULL, &kl, NULL);
    pt->enc_cpu += rd_cpu_now() - t0;
    t0 = rd_cpu_now();
    if (!rc) rc = skv_kvp_decode(&h, body, len, w->P, w->win, w->out, w->nf);
    pt->dec_cpu += rd_cpu_now() - t0;
    if (!rc && pt->l0) rc = regen_layer0(w, pt);
    pt->kl_writer += kl;
    pt->bits += 8.0 * (double)(len + SKV_KVP_HDR);
    free(body);
    return rc ? -1 : 0;
}

static int restore_pred(rd_window *w, rd_point *pt)
{
    if (pt->kl > 0) return restore_pred_kl(w, pt);
    size_t L0 = pt->l0 ? 1 : 0, off = L0 * 2 * (size_t)w->mi.n_head_kv * w->P * (size_t)w->mi.head_dim, len = 0;
    uint8_t *body = NULL, *lv = pt->levels ? malloc(w->P) : NULL;
    skv_kvp_params p = {.predictor = pt->pred, .step = {pt->step * pt->kv_ratio, pt->step / pt->kv_ratio}, .level = lv,
                        .tokens = w->win, .rot = pt->rot};
    skv_kvp_header h;
    if (pt->levels && !lv) return -1;
    if (lv && pt->levels == RD_LV_RAMP) skv_kvp_ramp_levels(w->P, lv);
    else if (lv) position_levels(w, pt->levels, lv);
    if (pt->levels == RD_LV_SINK || pt->levels == RD_LV_RECENT) p.step[0] /= 4.0f, p.step[1] /= 4.0f;
    if (pt->levels == RD_LV_RAMP) p.step[0] /= 8.0f, p.step[1] /= 8.0f;
    double t0 = rd_cpu_now();
    int rc = skv_kvp_encode(&p, (uint32_t)(w->mi.n_layer - (int)L0), (uint32_t)w->mi.n_head_kv,
                            (uint32_t)w->mi.head_dim, w->kv + off, w->P, &body, &len, &h, NULL);
    pt->enc_cpu += rd_cpu_now() - t0;
    t0 = rd_cpu_now();
    if (!rc) rc = skv_kvp_decode(&h, body, len, w->P, w->win, w->out + off, w->nf - off);
    pt->dec_cpu += rd_cpu_now() - t0;
    if (!rc && L0) rc = regen_layer0(w, pt);
    pt->bits += 8.0 * (double)(len + SKV_KVP_HDR);
    free(body);
    free(lv);
    return rc ? -1 : 0;
}

/* Restores pt's prefix into w->cq, runs the rest of the window, scores it. */
static int eval_point(rd_window *w, rd_point *pt)
{
    size_t V = (size_t)w->mi.n_vocab, P = w->P;
    int rc = pt->family == RD_PERVEC ? restore_pervec(w, pt)
             : pt->family == RD_PRED ? restore_pred(w, pt)
             : pt->family == RD_KVTC ? rd_kvtc_restore(w, pt)
                                     : rd_topk_restore(w, pt, 4, 0.9);
    if (rc) return -1;
    pt->positions += P;
    pt->windows++;
    if (skv_ctx_kv_write(w->cq, 0, (int)P, w->out) ||
        skv_ctx_prefill(w->cq, w->win + P, w->k + 1 - P, SKV_LOGITS_ALL, w->lq))
        return -1;
    for (size_t j = P; j < w->k; j++) cli_score_row(w->lf + j * V, w->lq + (j - P) * V, (int)V, w->win[j + 1], &pt->s);
    int32_t g[RD_GREEDY];
    if (rd_greedy(w, w->cq, g)) return -1;
    pt->greedy += rd_greedy_match(w, g);
    return 0;
}

/* ---- the command ---------------------------------------------------------------- */

#define F(x) offsetof(rd_opts, x)
static const cli_opt rd_table[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_FILE(F(file), "TEXT", "held-out text"),
    CLI_OPT_CTX(F(ctx), 8, "window length, BOS included (default min(512, the model's context))"),
    {"prefix", 0, CLI_INT, "P", 1, 1 << 24, F(prefix), "positions stored and restored per window (default 3/4 of the window)"},
    {"tokens", 'n', CLI_INT, "N", -1, 1 << 30, F(max_tok), "text tokens used (default 4096; -1 or 0 = all)"},
    {"steps", 0, CLI_STR, "LIST", 0, 0, F(steps), "relative steps of the predictive codecs (default 0.05,0.1,0.2,0.35,0.6,1)"},
    {"topk-steps", 0, CLI_STR, "LIST", 0, 0, F(topk_steps), "steps of the top-k predictor (default 0.1,0.35,1; '' = none)"},
    {"predictors", 0, CLI_STR, "LIST", 0, 0, F(preds), "only the predictive variants named, comma-separated (none delta lpc lpc2\n"
                                                       "tok tok+surprisal tok+ramp tok+layer0 none+rot tok+rot tok+ramp+rot ...;\n"
                                                       "default all)"},
    {"kl-targets", 0, CLI_STR, "LIST", 0, 0, F(kl_targets), "target KLs of the writer's quality search (tok+ramp@kl=X and\n"
                                                            "tok+ramp+layer0@kl=X points; default none)"},
    {"kvtc", 0, CLI_STR, "FILE", 0, 0, F(kvtc), "add the transform codec's points (kvtc, kvtc+ramp, kvtc+tok+ramp) with\n"
                                                "this calibration (seqkv kvtc-calib; a text the evaluation does not use)"},
    {"kvtc-steps", 0, CLI_STR, "LIST", 0, 0, F(kvtc_steps), "relative steps of the kvtc points (default 0.05,0.1,0.2,0.4,0.8)"},
    {"kvtc-theta", 0, CLI_FLOAT, "T", 0, 100, F(kvtc_theta), "kvtc water level: keep components with variance > T step^2\n"
                                                           "(default 1/12)"},
    {"kv-ratio", 0, CLI_FLOAT, "R", 0.01, 100, F(ratio), "predictive codecs: K step x R, V step / R (default 1)"},
    {"pervector", 0, CLI_STR, "yes|no", 0, 0, F(pervec), "include the per-vector points (default yes)"},
    {"csv", 0, CLI_STR, "FILE", 0, 0, F(csv), "append the points to FILE as CSV"},
    {"label", 0, CLI_STR, "NAME", 0, 0, F(label), "model label in the CSV (default the model's name)"},
    CLI_OPT_THREADS(F(threads)),
    {0},
};

static const cli_cmd rd_cmd = {
    "kv-rd", "[-m MODEL] -f TEXT [-c N] [--prefix P] [-n N] [--steps LIST] [--csv FILE]\n",
    "Rate-distortion of stored KV caches: per window, the first P positions' KV is stored with\n"
    "each codec (per-vector q8_0/q4_0/tq*, +window; predictive delta/lpc/lpc2, surprisal levels,\n"
    "layer 0 from the model; the paper's top-k predictor), restored, and the rest of the window\n"
    "is run over the restored cache. Prints bits per position, KL(p_exact || p_restored), delta\n"
    "perplexity, top-1 agreement and the restore CPU time per position.\n",
    rd_table, 0, NULL};

static int window_setup(rd_window *w, skv_model *m, long ctx, long prefix, long threads)
{
    skv_ctx_params p = skv_ctx_default_params();
    w->m = m;
    skv_model_get_info(m, &w->mi);
    p.n_ctx = (int)ctx;
    p.n_threads = (int)threads;
    w->P = (size_t)prefix;
    w->nf = (size_t)w->mi.n_layer * 2 * (size_t)w->mi.n_head_kv * (size_t)w->mi.head_dim * w->P;
    w->win = malloc((size_t)ctx * sizeof *w->win);
    w->lf = malloc((size_t)ctx * (size_t)w->mi.n_vocab * sizeof(float));
    w->lq = malloc((size_t)ctx * (size_t)w->mi.n_vocab * sizeof(float));
    w->kv = malloc(w->nf * sizeof(float));
    w->out = malloc(w->nf * sizeof(float));
    if (!w->win || !w->lf || !w->lq || !w->kv || !w->out || skv_ctx_create(m, &p, &w->c) || skv_ctx_create(m, &p, &w->cq)) {
        cli_error("cannot set up windows of %ld positions", ctx);
        return -1;
    }
    return 0;
}

static void window_free(rd_window *w)
{
    skv_ctx_free(w->c);
    skv_ctx_free(w->cq);
    free(w->win), free(w->lf), free(w->lq), free(w->kv), free(w->out);
}

static int run_windows(rd_window *w, const int32_t *tok, size_t n, size_t S, rd_point *pts, int np, cli_score *full)
{
    size_t V = (size_t)w->mi.n_vocab;
    for (size_t s0 = 0; s0 + S <= n; s0 += S) {
        w->k = S;
        if (cli_bos_window(w->c, w->mi.bos_id, tok + s0, S, w->win, w->lf) || skv_ctx_kv_read(w->c, 0, (int)w->P, w->kv))
            return -1;
        for (size_t j = w->P; j < w->k; j++) cli_score_row(w->lf + j * V, w->lf + j * V, (int)V, w->win[j + 1], full);
        w->g_len = w->k + 1 - w->P < RD_GREEDY ? (int)(w->k + 1 - w->P) : RD_GREEDY;
        if (skv_ctx_kv_write(w->cq, 0, (int)w->P, w->kv) || rd_greedy(w, w->cq, w->greedy)) return -1;
        for (int i = 0; i < np; i++)
            if (eval_point(w, &pts[i])) {
                cli_error("point %s failed", pts[i].name);
                return -1;
            }
        fprintf(stderr, "kv-rd: window at token %zu done\n", s0);
    }
    return 0;
}

/* The target-quality points: what the writer measured on each window's own tail vs the held-out KL. */
static void report_kl(FILE *md, const rd_point *pts, int np)
{
    int any = 0;
    for (int i = 0; i < np; i++) {
        const rd_point *p = &pts[i];
        double nw = p->windows ? (double)p->windows : 1.0;
        if (!(p->kl > 0)) continue;
        if (!any++) fprintf(md, "\n| target point | target KL | writer-measured KL (mean of windows) | held-out KL | bits/position | encode CPU ms/window |\n|---|---:|---:|---:|---:|---:|\n");
        fprintf(md, "| %s | %.5f | %.5f | %.5f | %.1f | %.1f |\n", p->name, p->kl, p->kl_writer / nw, p->s.kl / (double)p->s.n,
               p->bits / (double)p->positions, 1e3 * p->enc_cpu / nw);
    }
}

static void report(FILE *md, const rd_window *w, const rd_point *pts, int np, const cli_score *full, const rd_opts *o)
{
    double ppl = exp(full->nll / (double)full->n), ref = 0;
    size_t vals = (size_t)w->mi.n_layer * 2 * (size_t)w->mi.n_head_kv * (size_t)w->mi.head_dim;
    for (int i = 0; i < np; i++)
        if (!strncmp(pts[i].name, "TQ-3.5", 6)) ref = pts[i].bits / (double)pts[i].positions;
    fprintf(md, "model %s (%d layers x %d KV heads x %d), text %s: %zu scored rows, prefix %zu of %zu positions, ppl %.4f\n\n",
           w->mi.name, w->mi.n_layer, w->mi.n_head_kv, w->mi.head_dim, o->file, full->n, w->P, w->k + 1, ppl);
    fprintf(md, "| codec | bits/position | bits/value | vs TQ-3.5 bits | KL nats/token | delta ppl | top-1 agree | greedy match (of %d) | restore CPU us/position | passes/position |\n", w->g_len);
    fprintf(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < np; i++) {
        const rd_point *p = &pts[i];
        double bp = p->bits / (double)p->positions, q = exp(p->s.nll / (double)p->s.n);
        fprintf(md, "| %s | %.1f | %.3f | %.3f | %.5f | %+.4f | %.2f%% | %.1f | %.2f | %.2f |\n", p->name, bp, bp / (double)vals,
               ref > 0 ? bp / ref : 0.0, p->s.kl / (double)p->s.n, q - ppl, 100.0 * (double)p->s.top1 / (double)p->s.n,
               p->greedy / (double)(p->windows ? p->windows : 1), 1e6 * p->dec_cpu / (double)p->positions,
               p->passes / (double)p->positions);
    }
    report_kl(md, pts, np);
}

static int write_csv(const rd_window *w, const rd_point *pts, int np, const cli_score *full, const rd_opts *o)
{
    FILE *f = fopen(o->csv, "a");
    size_t vals = (size_t)w->mi.n_layer * 2 * (size_t)w->mi.n_head_kv * (size_t)w->mi.head_dim;
    double ppl = exp(full->nll / (double)full->n);
    if (!f) {
        cli_error("cannot open %s", o->csv);
        return -1;
    }
    if (ftell(f) == 0) fprintf(f, "model,codec,family,bits_pos,bits_val,kl,dppl,top1,restore_us_pos,passes_pos,greedy_match\n");
    for (int i = 0; i < np; i++) {
        const rd_point *p = &pts[i];
        double bp = p->bits / (double)p->positions;
        fprintf(f, "%s,%s,%s,%.2f,%.4f,%.6f,%.5f,%.5f,%.3f,%.3f,%.2f\n", o->label ? o->label : w->mi.name, p->name,
                p->family == RD_PERVEC ? "pervector" : p->family == RD_PRED ? "predictive" : p->family == RD_KVTC ? "transform" : "topk", bp,
                bp / (double)vals, p->s.kl / (double)p->s.n, exp(p->s.nll / (double)p->s.n) - ppl,
                (double)p->s.top1 / (double)p->s.n, 1e6 * p->dec_cpu / (double)p->positions,
                p->passes / (double)p->positions, p->greedy / (double)(p->windows ? p->windows : 1));
    }
    return fclose(f) ? -1 : 0;
}

int rd_run(const rd_opts *o, skv_model *m, const int32_t *tok, size_t n, rd_point *pts, int *n_pts, FILE *md)
{
    rd_window w = {0};
    cli_score full = {0};
    int np = 0, rc = -1;
    skv_model_info mi;
    skv_model_get_info(m, &mi);
    long ctx = o->ctx ? o->ctx : (mi.n_ctx_train < 512 ? mi.n_ctx_train : 512);
    long prefix = o->prefix ? o->prefix : ctx * 3 / 4;
    if (o->max_tok > 0 && n > (size_t)o->max_tok) n = (size_t)o->max_tok;
    if (!pts || !tok || mi.bos_id < 0 || prefix >= ctx - 1 || n < (size_t)ctx - 1)
        cli_error("no BOS, --prefix >= the window, or fewer tokens (%zu) than one window (%ld)", n, ctx - 1);
    else {
        if (!o->pervec || strcmp(o->pervec, "no")) pervec_points(pts, &np);
        pred_points(pts, &np, o->steps, o->preds, o->ratio > 0 ? o->ratio : 1.0);
        kl_points(pts, &np, o->kl_targets);
        topk_points(pts, &np, o->topk_steps);
        if (o->kvtc) rd_kvtc_points(pts, &np, o->kvtc_steps ? o->kvtc_steps : "0.05,0.1,0.2,0.4,0.8", o->ratio > 0 ? o->ratio : 1.0);
        if (o->kvtc && !(w.tc = rd_kvtc_load(o->kvtc))) np = RD_MAX_POINTS + 1;
        w.tc_theta = (float)o->kvtc_theta;
        if (np > RD_MAX_POINTS) cli_error("%d points, at most %d: fewer --steps or --predictors", np, RD_MAX_POINTS);
        else if (!window_setup(&w, m, ctx, prefix, o->threads) && !run_windows(&w, tok, n, (size_t)ctx - 1, pts, np, &full)) {
            report(md, &w, pts, np, &full, o);
            rc = o->csv ? write_csv(&w, pts, np, &full, o) : 0;
        }
    }
    window_free(&w);
    skv_kvtc_calib_free(w.tc);
    *n_pts = np;
    return rc;
}

static int rd_main(const rd_opts *o, skv_model *m)
{
    size_t n = 0, len = 0;
    int np = 0;
    char *text = cli_read_file(o->file, &len);
    int32_t *tok = text ? cli_tokenize(m, text, len, 0, &n) : NULL;
    rd_point *pts = calloc(RD_MAX_POINTS, sizeof *pts);
    int rc = tok && pts ? rd_run(o, m, tok, n, pts, &np, stdout) : -1;
    free(pts), free(text), free(tok);
    return rc;
}

int cmd_kvrd(int argc, char **argv)
{
    rd_opts o = {.steps = "0.05,0.1,0.2,0.35,0.6,1", .topk_steps = "0.1,0.35,1", .max_tok = 4096, .threads = 1};
    int rc = cli_parse(&rd_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (!o.file) return cli_usage(&rd_cmd, "needs a text file (-f FILE)");
    skv_model *m = cli_load_model(o.model);
    rc = m && !rd_main(&o, m) ? CLI_OK : CLI_FAIL;
    skv_model_free(m);
    return rc;
}
