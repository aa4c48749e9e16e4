/* Near-duplicate reuse (docs/near.md): quality and cost of skv_store_get_near against the
 * exact cache, on three workloads built from real text (KJV books held out from kjv-4m's
 * training, tests/data/model_ref/heldout.txt):
 *   template  a system prompt (a fixed passage) whose date and user-name fields differ;
 *   rag       the same four retrieved passages in another order (labels renumbered);
 *   chat      a five-turn chat whose second user message was edited.
 * Each workload has 3 instances; every donor is put into one store (budget 1 GiB: all KV
 * materialised) with 4 unrelated distractor sessions, so the candidate search must find it.
 * For each instance and recompute fraction F: the query's KV from skv_store_get_near, then a
 * 48..80-token continuation (the text that follows) prefilled over it; its next-token
 * distributions against the same continuation over a fresh prefill of the query (the exact
 * cache): mean KL(exact || near) in nats, top-1 agreement, perplexity delta; against
 * TurboQuant-4 as a storage format on the same rows (issue 44's fair baseline: only what is
 * stored is quantized): the exact KV of query positions 0 .. nq-2 quantized per vector
 * (k=tq4 v=tq4) and restored into a full-precision context, then the last query token and
 * the continuation run over it with KV of their own (the near get likewise recomputes the
 * last position). Time: CPU time of the process (single-threaded), best of 3, of the near
 * get (donor restore + copy + re-rotation + recompute) vs a fresh prefill of the query.
 * A model with a context under 1024 gets half-length workloads (passages of fewer sentences).
 * Usage: bench_near MODEL TEXT CSV_OUT [SVG_OUT] > near.md (SVG: the KL curves vs F). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "seqkv.h"
#include "bench.h"
#include "container/kvcodec.h"
#include "core/util.h"
#include "quant/quant.h"

#define N_INST 3
#define N_FRAC 8
#define MAXT 1024
static const double fracs[N_FRAC] = {0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0};
static const char *const wl_names[3] = {"template", "rag", "chat"};

typedef struct {
    char **s; /* sentences of the text */
    size_t n;
} sentences;

typedef struct {
    int32_t q[MAXT], c[256];
    size_t nq, nc;
    char name[32];
} instance;

typedef struct {
    double kl, top1, ppl_ref, ppl, reused, exact, cpu, cpu_ref, approx, wall, wall_ref;
    double tq_kl, tq_top1, tq_ppl, kv_all, kv0;
    int n;
} acc;

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Splits text into sentences (ending at '.', '?' or '!' before a space or the end). */
static int split(char *text, sentences *s)
{
    size_t cap = 8192;
    char *b = text;
    s->s = malloc(cap * sizeof *s->s), s->n = 0;
    for (char *p = text; s->s && *p; p++) {
        if (*p == '\n') *p = ' ';
        if ((*p != '.' && *p != '?' && *p != '!') || (p[1] != ' ' && p[1] != '\n' && p[1])) continue;
        int end = !p[1];
        p[1] = 0;
        if (s->n < cap && *b) s->s[s->n++] = b;
        if (end) break;
        for (b = p + 2; *b == ' ' || *b == '\n';) b++;
        p = b - 1;
    }
    return s->s && s->n > 300 ? 0 : -1;
}

static size_t cat(char *buf, size_t cap, size_t at, const char *txt)
{
    int k = snprintf(buf + at, at < cap ? cap - at : 0, "%s", txt);
    return at + (k > 0 ? (size_t)k : 0);
}

/* Sentences [a, a + k) joined by spaces. */
static size_t cat_sent(char *buf, size_t cap, size_t at, const sentences *s, size_t a, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        at = cat(buf, cap, at, s->s[(a + i) % s->n]);
        if (i + 1 < k) at = cat(buf, cap, at, " ");
    }
    return at;
}

static int g_short; /* a model with a context under 1024: half-length workloads */

static const char *const dates[] = {"Monday, the 3rd of March", "Friday, the 21st of November",
                                    "Sunday, the 9th of June", "Tuesday, the 30th of September"};
static const char *const users[] = {"Elizabeth", "Tom", "Nathaniel", "Ann", "Bartholomew", "Sue"};

static void text_template(const sentences *s, size_t base, int variant, int inst, char *b, size_t cap)
{
    size_t at = 0;
    char hdr[160];
    snprintf(hdr, sizeof hdr, "Today is %s. The user's name is %s. Answer in the words of the book.\n",
             dates[(inst + variant * 2) % 4], users[(inst * 2 + variant) % 6]);
    at = cat(b, cap, at, hdr);
    at = cat_sent(b, cap, at, s, base, g_short ? 6 : 12);
    at = cat(b, cap, at, "\nQuestion: ");
    at = cat_sent(b, cap, at, s, base + 12, 1);
    cat(b, cap, at, "\nAnswer:");
}

static void text_rag(const sentences *s, size_t base, int variant, char *b, size_t cap)
{
    static const int order[2][4] = {{0, 1, 2, 3}, {2, 0, 3, 1}};
    size_t at = cat(b, cap, 0, "Read the passages, then answer.\n");
    for (int k = 0; k < 4; k++) {
        char lab[16];
        snprintf(lab, sizeof lab, "[%d] ", k + 1);
        at = cat(b, cap, at, lab);
        at = cat_sent(b, cap, at, s, base + 3 * (size_t)order[variant][k], g_short ? 2 : 3);
        at = cat(b, cap, at, "\n");
    }
    at = cat(b, cap, at, "Question: ");
    at = cat_sent(b, cap, at, s, base + 12, 1);
    cat(b, cap, at, "\nAnswer:");
}

static void text_chat(const sentences *s, size_t base, int variant, char *b, size_t cap)
{
    size_t at = 0;
    for (size_t t = 0; t < 5; t++) {
        at = cat(b, cap, at, "User: ");
        at = cat_sent(b, cap, at, s, t == 1 && variant ? base + 200 : base + 3 * t, 1); /* turn 2 edited */
        at = cat(b, cap, at, "\nAssistant: ");
        at = cat_sent(b, cap, at, s, base + 3 * t + 1, g_short ? 1 : 2);
        at = cat(b, cap, at, "\n");
    }
    cat(b, cap, at, "User: ");
}

/* The text of workload w, instance i; variant 0 = stored, 1 = the near-duplicate query. */
static void wl_text(const sentences *s, int w, int i, int variant, char *b, size_t cap)
{
    size_t base = 40 + (size_t)(w * N_INST + i) * 30;
    if (w == 0) text_template(s, base, variant, i, b, cap);
    else if (w == 1) text_rag(s, base, variant, b, cap);
    else text_chat(s, base, variant, b, cap);
}

static int tokenize(skv_model *m, const char *t, int bos, int32_t *out, size_t cap, size_t *n)
{
    return skv_model_tokenize(m, t, strlen(t), bos, out, cap, n);
}

/* Puts every donor and the distractors; fills the queries and their continuations. */
static int build(skv_model *m, skv_store *st, const sentences *s, instance inst[3][N_INST])
{
    static char buf[16384];
    int32_t tok[MAXT];
    size_t n;
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < N_INST; i++) {
            instance *x = &inst[w][i];
            snprintf(x->name, sizeof x->name, "%s-%d", wl_names[w], i);
            wl_text(s, w, i, 0, buf, sizeof buf);
            if (tokenize(m, buf, 1, tok, MAXT, &n) || skv_store_put(st, x->name, tok, n, NULL)) return -1;
            wl_text(s, w, i, 1, buf, sizeof buf);
            if (tokenize(m, buf, 1, x->q, MAXT, &x->nq)) return -1;
            cat_sent(buf, sizeof buf, cat(buf, sizeof buf, 0, " "), s, 40 + (size_t)(w * N_INST + i) * 30 + 16, 3);
            if (tokenize(m, buf, 0, x->c, 256, &x->nc)) return -1;
            if (x->nc > 80) x->nc = 80;
        }
    for (int d = 0; d < 4; d++) { /* distractors: unrelated passages */
        char name[24];
        snprintf(name, sizeof name, "other-%d", d);
        cat_sent(buf, sizeof buf, 0, s, 700 + 20 * (size_t)d, 10);
        if (tokenize(m, buf, 1, tok, MAXT, &n) || skv_store_put(st, name, tok, n, NULL)) return -1;
    }
    return 0;
}

/* Continuation logits over whatever ctx holds: row 0 = last (the query's last position),
 * rows 1.. = the continuation's own rows; rows[nc] predict c[0..nc). */
static int cont_logits(skv_ctx *c, const instance *x, const float *last, float *rows, size_t V)
{
    memcpy(rows, last, V * sizeof *rows);
    float *all = malloc(x->nc * V * sizeof *all);
    int rc = all ? skv_ctx_prefill(c, x->c, x->nc, SKV_LOGITS_ALL, all) : -1;
    if (!rc) memcpy(rows + V, all, (x->nc - 1) * V * sizeof *rows);
    free(all);
    return rc;
}

/* KL(ref || q) in nats, the target's NLL under q, and whether the argmaxes agree. */
static void score_row(const float *ref, const float *q, size_t V, int32_t target, double *kl, double *nll, double *nll_ref,
                      int *agree)
{
    double mr = ref[0], mq = q[0], zr = 0, zq = 0, k = 0;
    size_t ar = 0, aq = 0;
    for (size_t i = 1; i < V; i++) {
        if (ref[i] > ref[ar]) ar = i;
        if (q[i] > q[aq]) aq = i;
    }
    mr = ref[ar], mq = q[aq];
    for (size_t i = 0; i < V; i++) zr += exp((double)ref[i] - mr), zq += exp((double)q[i] - mq);
    double lzr = log(zr), lzq = log(zq);
    for (size_t i = 0; i < V; i++) {
        double lp = (double)ref[i] - mr - lzr, lq = (double)q[i] - mq - lzq;
        k += exp(lp) * (lp - lq);
    }
    *kl += k > 0 ? k : 0;
    *nll += lzq - ((double)q[target] - mq);
    *nll_ref += lzr - ((double)ref[target] - mr);
    *agree += ar == aq;
}

typedef struct {
    double kl, nll, nll_ref;
    int top1;
} quality;

static quality compare(const float *ref, const float *q, const instance *x, size_t V)
{
    quality r = {0};
    for (size_t j = 0; j < x->nc; j++) score_row(ref + j * V, q + j * V, V, x->c[j], &r.kl, &r.nll, &r.nll_ref, &r.top1);
    return r;
}

/* The exact rows (fresh prefill) and TurboQuant-4's, and the fresh prefill's CPU time. */
static float *ref_kv; /* the exact cache of the current query */

/* Relative L2 error of ctx's first n positions' KV against ref_kv: all layers, and layer 0. */
static void kv_error(skv_model *m, const skv_ctx *c, size_t n, double *all, double *l0)
{
    skv_model_info h;
    skv_model_get_info(m, &h);
    size_t per = 2 * (size_t)h.n_head_kv * (size_t)h.head_dim * n, tot = per * (size_t)h.n_layer;
    float *kv = malloc(tot * sizeof *kv);
    double e[2] = {0, 0}, z[2] = {0, 0};
    if (!kv || skv_ctx_kv_read(c, 0, (int)n, kv)) { *all = *l0 = NAN; free(kv); return; }
    for (size_t i = 0; i < tot; i++) {
        double d = (double)kv[i] - (double)ref_kv[i];
        e[0] += d * d, z[0] += (double)ref_kv[i] * ref_kv[i];
        if (i < per) e[1] += d * d, z[1] += (double)ref_kv[i] * ref_kv[i];
    }
    *all = sqrt(e[0] / z[0]), *l0 = sqrt(e[1] / z[1]);
    free(kv);
}

/* The first n - 1 of kv's n positions, canonical order, quantized with TurboQuant-4 and
 * decoded into out (same layout with n - 1 positions). */
static int tq4_first(const skv_model_info *h, const float *kv, size_t n, float *out)
{
    size_t d = (size_t)h->head_dim, ns = (size_t)h->n_layer * 2 * (size_t)h->n_head_kv, P = n - 1;
    int sc[2] = {skv_quant_parse("tq4"), skv_quant_parse("tq4")};
    skv_kvcodec *kc = NULL;
    for (size_t s = 0; s < ns; s++) memcpy(out + s * P * d, kv + s * n * d, P * d * sizeof *out);
    if (skv_kvcodec_create(&kc, sc, 0, (uint32_t)h->n_layer, (uint32_t)h->n_head_kv, (uint32_t)d)) return -1;
    size_t pb = skv_kvcodec_position_bytes(kc);
    uint8_t *buf = malloc(pb * P);
    int rc = !buf || skv_kvcodec_encode(kc, out, P, buf, pb * P, NULL, NULL) ||
             skv_kvcodec_decode(kc, buf, pb * P, P, out, ns * P * d);
    free(buf);
    skv_kvcodec_free(kc);
    return rc ? -1 : 0;
}

/* TQ-4 as stored: positions 0 .. nq-2 restored quantized into cq, the last query token and
 * the continuation run in full precision; the continuation's rows into tq. */
static int tq4_stored(const skv_model_info *h, skv_ctx *cq, const instance *x, const float *kv, float *last, float *tq)
{
    float *st = malloc((size_t)h->n_layer * 2 * (size_t)h->n_head_kv * (size_t)h->head_dim * x->nq * sizeof *st);
    int rc = !st || x->nq < 2 || tq4_first(h, kv, x->nq, st) || skv_ctx_kv_write(cq, 0, (int)x->nq - 1, st) ||
             skv_prefill(cq, x->q + x->nq - 1, 1, SKV_LOGITS_LAST, last) || cont_logits(cq, x, last, tq, (size_t)h->n_vocab);
    free(st);
    return rc;
}

static int reference(skv_model *m, const instance *x, float *ref, float *tq, double *cpu_ref, double *wall_ref)
{
    skv_model_info h;
    skv_model_get_info(m, &h);
    size_t V = (size_t)h.n_vocab;
    float *last = malloc(V * sizeof *last);
    skv_ctx *c = NULL, *cq = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    int rc = !last || skv_ctx_create(m, &cp, &c);
    rc = rc || skv_ctx_create(m, &cp, &cq);
    *cpu_ref = *wall_ref = 1e9;
    for (int r = 0; r < 3 && !rc; r++) {
        double t0 = cpu_now(), w0 = skv_now();
        rc = skv_ctx_truncate(c, 0) || skv_ctx_prefill(c, x->q, x->nq, SKV_LOGITS_LAST, last);
        double dt = cpu_now() - t0, dw = skv_now() - w0;
        *cpu_ref = dt < *cpu_ref ? dt : *cpu_ref;
        *wall_ref = dw < *wall_ref ? dw : *wall_ref;
    }
    free(ref_kv);
    ref_kv = malloc((size_t)h.n_layer * 2 * (size_t)h.n_head_kv * (size_t)h.head_dim * x->nq * sizeof *ref_kv);
    rc = rc || !ref_kv || skv_ctx_kv_read(c, 0, (int)x->nq, ref_kv);
    rc = rc || cont_logits(c, x, last, ref, V);
    rc = rc || tq4_stored(&h, cq, x, ref_kv, last, tq);
    skv_ctx_free(c);
    skv_ctx_free(cq);
    free(last);
    return rc;
}

static FILE *csv;

static int near_point(skv_model *m, skv_store *st, const instance *x, int w, int f, const float *ref, acc *a)
{
    skv_model_info h;
    skv_model_get_info(m, &h);
    size_t V = (size_t)h.n_vocab;
    float *rows = malloc(x->nc * V * sizeof *rows), *last = malloc(V * sizeof *last);
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_store_near_params np = skv_store_near_default_params();
    skv_store_near_report r = {0};
    double best = 1e9, best_w = 1e9;
    int rc = !rows || !last || skv_ctx_create(m, &cp, &c);
    np.recompute = fracs[f];
    for (int k = 0; k < 3 && !rc; k++) {
        double t0 = cpu_now(), w0 = skv_now();
        if ((rc = skv_store_get_near(st, x->q, x->nq, c, &np, last, &r))) fprintf(stderr, "%s\n", skv_store_last_error(st));
        double dt = cpu_now() - t0, dw = skv_now() - w0;
        best = dt < best ? dt : best;
        best_w = dw < best_w ? dw : best_w;
    }
    double ea = 0, e0 = 0;
    if (!rc) kv_error(m, c, x->nq, &ea, &e0);
    rc = rc || cont_logits(c, x, last, rows, V);
    if (!rc) {
        quality q = compare(ref, rows, x, V);
        double n = (double)x->nc, reused = (double)(r.n_exact + r.n_approx) / (double)r.n_tokens;
        a->kl += q.kl / n, a->top1 += q.top1 / n, a->ppl += exp(q.nll / n), a->ppl_ref += exp(q.nll_ref / n);
        a->reused += reused, a->exact += (double)r.n_exact / (double)r.n_tokens, a->cpu += best, a->wall += best_w;
        a->approx += r.approximate, a->n++, a->kv_all += ea, a->kv0 = e0 > a->kv0 ? e0 : a->kv0;
        fprintf(csv, "%s,%s,%.2f,%s,%u,%u,%u,%u,%.4f,%.6g,%.4f,%.4f,%.4f,%.6f,%.4g,%.4g\n", wl_names[w], x->name, fracs[f], r.donor,
                r.n_tokens, r.n_exact, r.n_approx, r.n_recomputed, reused, q.kl / n, q.top1 / n, exp(q.nll / n),
                exp(q.nll_ref / n), best, ea, e0);
    }
    skv_ctx_free(c);
    free(rows);
    free(last);
    return rc;
}

static void print_row(int w, int f, const acc *a, const acc *t)
{
    double n = a->n ? a->n : 1;
    printf("| %s | %.2f | %.1f%% | %.1f%% | %.3g | %.3g | %.4g | %.4g | %.3f | %+.3f | %.1f / %.1f | %.1f / %.1f | %.0f%% | %s |\n",
           wl_names[w], fracs[f], 100 * a->reused / n, 100 * a->exact / n, a->kv_all / n, a->kv0, a->kl / n, t->tq_kl / N_INST, a->top1 / n, (a->ppl - a->ppl_ref) / n,
           1e3 * a->cpu / n, 1e3 * a->wall / n, 1e3 * t->cpu_ref / N_INST, 1e3 * t->wall_ref / N_INST,
           100 * (1 - (a->cpu / n) / (t->cpu_ref / N_INST)), a->approx == a->n ? "yes" : a->approx ? "some" : "no");
}

static double tq_kl[3], goal_reuse[3], goal_kl[3];

static int run_workload(skv_model *m, skv_store *st, instance *inst, int w, acc res[N_FRAC])
{
    skv_model_info h;
    skv_model_get_info(m, &h);
    size_t V = (size_t)h.n_vocab;
    acc t = {0};
    for (int i = 0; i < N_INST; i++) {
        const instance *x = &inst[i];
        float *ref = malloc(x->nc * V * sizeof *ref), *tq = malloc(x->nc * V * sizeof *tq);
        double cr, wr;
        if (!ref || !tq || reference(m, x, ref, tq, &cr, &wr)) return -1;
        quality q = compare(ref, tq, x, V);
        t.tq_kl += q.kl / (double)x->nc, t.tq_top1 += q.top1 / (double)x->nc, t.cpu_ref += cr, t.wall_ref += wr;
        t.tq_ppl += exp(q.nll / (double)x->nc) - exp(q.nll_ref / (double)x->nc);
        for (int f = 0; f < N_FRAC; f++)
            if (near_point(m, st, x, w, f, ref, &res[f])) return -1;
        free(ref);
        free(tq);
    }
    tq_kl[w] = t.tq_kl / N_INST;
    goal_reuse[w] = 0;
    for (int f = 0; f < N_FRAC; f++) /* the most reuse whose KL is below TQ-4's */
        if (res[f].n && res[f].kl / res[f].n < tq_kl[w] && res[f].reused / res[f].n > goal_reuse[w])
            goal_reuse[w] = res[f].reused / res[f].n, goal_kl[w] = res[f].kl / res[f].n;
    for (int f = 0; f < N_FRAC; f++) print_row(w, f, &res[f], &t);
    printf("| %s | TQ-4 | 0%% | | | | %.4g | | %.3f | %+.3f | | | | (per-vector baseline) |\n", wl_names[w], t.tq_kl / N_INST,
           t.tq_top1 / N_INST, t.tq_ppl / N_INST);
    return 0;
}

/* KL vs recompute fraction per workload (log scale), TQ-4's KL as dashed lines. */
static void write_svg(const char *path, const char *model, acc res[3][N_FRAC], const double tq[3])
{
    static const char *const col[3] = {"#1f77b4", "#d62728", "#2ca02c"};
    FILE *f = fopen(path, "w");
    double lo = -7, hi = -1; /* log10 KL axis */
    if (!f) return;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='640' height='400' font-family='sans-serif' "
               "font-size='12'>\n<rect width='640' height='400' fill='white'/>\n"
               "<text x='320' y='20' text-anchor='middle'>mean KL (nats) over the continuation vs recompute fraction "
               "(%s; dashed: TQ-4)</text>\n<line x1='60' y1='360' x2='620' y2='360' stroke='black'/>\n"
               "<line x1='60' y1='40' x2='60' y2='360' stroke='black'/>\n", model);
    for (int e = (int)lo; e <= (int)hi; e++)
        fprintf(f, "<text x='55' y='%.0f' text-anchor='end'>1e%d</text>\n", 360 - (e - lo) / (hi - lo) * 320 + 4, e);
    for (int k = 0; k <= 10; k += 2)
        fprintf(f, "<text x='%d' y='378' text-anchor='middle'>%.1f</text>\n", 60 + k * 56, k / 10.0);
    for (int w = 0; w < 3; w++) {
        double yt = 360 - (log10(tq[w]) - lo) / (hi - lo) * 320;
        fprintf(f, "<line x1='60' y1='%.1f' x2='620' y2='%.1f' stroke='%s' stroke-dasharray='6,4'/>\n", yt, yt, col[w]);
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", col[w]);
        for (int i = 0; i < N_FRAC; i++) {
            double kl = res[w][i].kl / (res[w][i].n ? res[w][i].n : 1);
            if (kl > 0) fprintf(f, "%.1f,%.1f ", 60 + fracs[i] * 560, 360 - (log10(kl) - lo) / (hi - lo) * 320);
        }
        fprintf(f, "'/>\n<text x='480' y='%d' fill='%s'>%s</text>\n", 60 + 16 * w, col[w], wl_names[w]);
    }
    fprintf(f, "<text x='340' y='396' text-anchor='middle'>recompute fraction F (F = 1: exact, KL 0)</text>\n</svg>\n");
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_near MODEL TEXT CSV_OUT\n");
        return 2;
    }
    size_t len;
    char *text = bench_slurp(argv[2], 0, &len), dir[] = "/tmp/bench_near_XXXXXX", cmd[64];
    sentences s;
    skv_model *m = NULL;
    skv_store *st = NULL;
    skv_store_params sp = skv_store_default_params();
    static instance inst[3][N_INST];
    static acc res[3][N_FRAC];
    sp.budget = 1ll << 30;
    if (!skv_model_load(argv[1], NULL, &m, NULL, 0)) {
        skv_model_info h;
        skv_model_get_info(m, &h);
        g_short = h.n_ctx_train < 1024;
    }
    if (!text || split(text, &s) || !mkdtemp(dir) || !m ||
        skv_store_open(dir, m, SKV_STORE_CREATE, &sp, &st, NULL, 0) || !(csv = fopen(argv[3], "w")) ||
        build(m, st, &s, inst)) {
        fprintf(stderr, "bench_near: cannot set up (%s)\n", st ? skv_store_last_error(st) : "model, text or store");
        return 1;
    }
    fprintf(csv, "workload,instance,fraction,donor,tokens,exact,approx,recomputed,reused,kl,top1,ppl,ppl_exact,cpu_s,kv_rel_err,kv_rel_err_layer0\n");
    printf("| workload | recompute F | positions reused | of which exact | KV rel. error | layer-0 KV max rel. error | "
           "KL (nats) | TQ-4 KL | top-1 | delta ppl | near get CPU / wall ms | full prefill CPU / wall ms | CPU saved | "
           "approximate |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (int w = 0; w < 3 && !rc; w++) rc = run_workload(m, st, inst[w], w, res[w]);
    printf("\nGoal (>= 70%% of positions reused at a KL below TurboQuant-4's on the same rows):\n\n");
    for (int w = 0; w < 3 && !rc; w++)
        printf("- %s: %.1f%% reused at KL %.3g vs TQ-4's %.3g: %s\n", wl_names[w], 100 * goal_reuse[w], goal_kl[w],
               tq_kl[w], goal_reuse[w] >= 0.7 ? "met" : "NOT met");
    for (int w = 0; w < 3; w++)
        fprintf(stderr, "%s: query %zu tokens, continuation %zu (%zu sentences)\n", wl_names[w], inst[w][0].nq, inst[w][0].nc, s.n);
    fclose(csv);
    skv_model_info h;
    skv_model_get_info(m, &h);
    if (!rc && argc > 4) write_svg(argv[4], h.name, res, tq_kl);
    skv_store_close(st);
    skv_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
    free(s.s);
    free(text);
    free(ref_kv);
    return rc ? 1 : 0;
}
