/* seqkv bench: the rate-distortion section. Per model, kv-rd's curves (tools/bench/bench_rd.c) on
 * its held-out text: stories260K on the stories samples when loaded, every other model on the
 * first text (held-out KJV by default). Per-vector points (q8_0, q4_0, tq2..4, TQ-3.5, tq3p,
 * +window) and each predictive codec over a list of steps (and, without --quick, the paper's
 * top-k predictor), all restored and continued over as kv-rd does, with the restore CPU time
 * of each point (the layer-0 regeneration counted for the +layer0 points). Writes rd.md (every
 * table), rd.csv (every point; scripts/plot_rd.gp draws rd.png) and a summary at TQ-3.5's KL
 * into report.md. --quick: one window of 64 positions and three predictive points. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"
#include "bench_rd.h"

#define RD_STEPS "0.03,0.05,0.1,0.2,0.35,0.7,1,1.5,2,3"
#define RD_PREDS "none,lpc2,tok,tok+ramp,tok+ramp+rot,tok+layer0,tok+ramp+layer0"
#define RD_MAX_SUM 16

/* One codec at the KL of TQ-3.5 (log-linear interpolation between its two steps around it). */
typedef struct {
    char codec[48];
    double bits, ratio, restore_us;
} rd_sum;

typedef struct {
    char label[48];
    double ref_bits, ref_kl, ref_us;
    rd_sum s[RD_MAX_SUM];
    int n;
} rd_model_sum;

static const bench_text *rd_text(const char *label, const bench_text *tx, int n_tx)
{
    for (int i = 0; strstr(label, "stories") && i < n_tx; i++)
        if (!strcmp(tx[i].label, "stories")) return &tx[i];
    return &tx[0];
}

static double pt_bits(const rd_point *p) { return p->bits / (double)p->positions; }
static double pt_kl(const rd_point *p) { return p->s.kl / (double)p->s.n; }
static double pt_us(const rd_point *p) { return 1e6 * p->dec_cpu / (double)p->positions; }

/* The points of one codec (name "codec@step"), finest first: their indices into idx. */
static int codec_points(const rd_point *pts, int np, const char *codec, int *idx)
{
    int k = 0;
    size_t l = strlen(codec);
    for (int i = 0; i < np; i++)
        if (!strncmp(pts[i].name, codec, l) && pts[i].name[l] == '@') idx[k++] = i;
    for (int a = 1; a < k; a++) /* insertion sort by bits, descending */
        for (int b = a; b > 0 && pt_bits(&pts[idx[b]]) > pt_bits(&pts[idx[b - 1]]); b--) {
            int t = idx[b];
            idx[b] = idx[b - 1], idx[b - 1] = t;
        }
    return k;
}

/* 1 and *out when two successive points of codec bracket kl. */
static int at_kl(const rd_point *pts, int np, const char *codec, double kl, rd_sum *out)
{
    int idx[RD_MAX_POINTS], k = codec_points(pts, np, codec, idx);
    for (int i = 0; i + 1 < k; i++) {
        const rd_point *a = &pts[idx[i]], *b = &pts[idx[i + 1]];
        double ka = pt_kl(a), kb = pt_kl(b);
        if (!(ka > 0 && kb > ka && ka <= kl && kl <= kb)) continue;
        double f = (log(kl) - log(ka)) / (log(kb) - log(ka));
        snprintf(out->codec, sizeof out->codec, "%s", codec);
        out->bits = exp(log(pt_bits(a)) + f * (log(pt_bits(b)) - log(pt_bits(a))));
        out->restore_us = pt_us(a) + f * (pt_us(b) - pt_us(a));
        return 1;
    }
    return 0;
}

static void summarize(const rd_point *pts, int np, rd_model_sum *ms)
{
    static const char *const codecs[] = {"none", "lpc2", "tok", "tok+ramp", "tok+ramp+rot", "tok+layer0",
                                         "tok+ramp+layer0", "topk4"};
    for (int i = 0; i < np; i++)
        if (!strncmp(pts[i].name, "TQ-3.5", 6))
            ms->ref_bits = pt_bits(&pts[i]), ms->ref_kl = pt_kl(&pts[i]), ms->ref_us = pt_us(&pts[i]);
    for (size_t c = 0; c < sizeof codecs / sizeof *codecs && ms->n < RD_MAX_SUM && ms->ref_bits > 0; c++)
        if (at_kl(pts, np, codecs[c], ms->ref_kl, &ms->s[ms->n])) ms->s[ms->n].ratio = ms->s[ms->n].bits / ms->ref_bits, ms->n++;
}

static void write_summary(FILE *f, const rd_model_sum *ms, int n_models)
{
    fprintf(f, "Bits per position each codec needs for the KL of TQ-3.5 (k=tq4 v=tq3), log-linear interpolation\n"
               "between its two measured steps around it (a codec absent from a table did not bracket that KL);\n"
               "restore: CPU us per stored position at that point (+layer0: with the model's regeneration of layer 0;\n"
               "topk4: with its forward passes).\n\n");
    for (int m = 0; m < n_models; m++) {
        fprintf(f, "| %s | bits/position | vs TQ-3.5 | restore CPU us/position |\n|---|---:|---:|---:|\n", ms[m].label);
        fprintf(f, "| TQ-3.5 (KL %.5f) | %.0f | 1 | %.2f |\n", ms[m].ref_kl, ms[m].ref_bits, ms[m].ref_us);
        for (int i = 0; i < ms[m].n; i++)
            fprintf(f, "| %s | %.0f | %.3fx | %.2f |\n", ms[m].s[i].codec, ms[m].s[i].bits, ms[m].s[i].ratio,
                    ms[m].s[i].restore_us);
        fputc('\n', f);
    }
}

static rd_opts section_opts(const bench_opts *o, const char *label, const char *text, const char *csv)
{
    rd_opts ro = {.steps = RD_STEPS, .topk_steps = "0.1,0.35,1,2", .preds = RD_PREDS, .max_tok = 4096, .threads = o->threads,
                  .label = label, .csv = csv, .file = text};
    if (o->quick) ro.ctx = 64, ro.prefix = 48, ro.max_tok = 63, ro.steps = "1", ro.topk_steps = "",
                  ro.preds = "tok,tok+ramp,tok+ramp+layer0";
    return ro;
}

/* One model: its curves into md and csv, its summary into ms. */
static int section_model(bench_opts *o, const char *path, const bench_text *tx, int n_tx, FILE *md, const char *csv,
                         rd_model_sum *ms)
{
    skv_model *m = cli_load_model(path);
    bench_base_label(path, ms->label, sizeof ms->label);
    const bench_text *t = rd_text(ms->label, tx, n_tx);
    rd_opts ro = section_opts(o, ms->label, t->label, csv);
    size_t n = 0;
    int np = 0, rc = -1;
    int32_t *tok = m ? cli_tokenize(m, t->bytes, t->len, 0, &n) : NULL;
    rd_point *pts = calloc(RD_MAX_POINTS, sizeof *pts);
    bench_progress("rate-distortion: %s on %s", ms->label, t->label);
    fprintf(md, "## %s on %s (%s)\n\n", ms->label, t->label, t->source);
    if (tok && pts && !(rc = rd_run(&ro, m, tok, n, pts, &np, md))) summarize(pts, np, ms);
    fputc('\n', md);
    free(pts), free(tok);
    skv_model_free(m);
    return rc;
}

static void render_rd_plot(bench_opts *o)
{
    char script[4096], e[8400];
    if (!o->plots) return;
    if (!bench_find_path("scripts/plot_rd.gp", script, sizeof script) || strchr(o->out, '\'')) {
        bench_note(o, "rd.png skipped: scripts/plot_rd.gp not found or a quote in the output directory");
        return;
    }
    snprintf(e, sizeof e, "csv='%s/rd.csv'; out='%s/rd.png'", o->out, o->out);
    if (bench_gnuplot(script, e)) bench_note(o, "rd.png not drawn (gnuplot missing or failed: scripts/install-deps.sh --bench)");
}

static void write_md_head(FILE *md, const bench_opts *o)
{
    fprintf(md, "# Rate-distortion of stored KV caches (`seqkv bench`%s)\n\n%s.\n\n", o->quick ? " --quick" : "", o->machine);
    fprintf(md, "Per window (BOS + tokens): the KV of the first 3/4 of the positions is stored with each codec,\n"
                "restored (decoded without the model, except +layer0: layer 0 regenerated by the model, and topk4),\n"
                "loaded with skv_ctx_kv_write, and the rest of the window is run over it and scored against the exact\n"
                "run (KL(p_exact || p_restored) nats/token). Bits: every stored bit of the prefix's KV per position.\n"
                "Restore: CPU time (CLOCK_PROCESS_CPUTIME_ID) of the decode per stored position, same run. Every\n"
                "point: rd.csv; plot: rd.png (scripts/plot_rd.gp). Protocol and codecs: docs/kvpred.md.\n\n");
}

int bench_rd_section(bench_opts *o, const bench_text *tx, int n_tx, int append_report)
{
    char csv[4200];
    rd_model_sum ms[BENCH_MAX_MODELS];
    int nm = 0, rc = 0;
    FILE *md = bench_open_out(o->out, "rd.md");
    snprintf(csv, sizeof csv, "%s/rd.csv", o->out);
    remove(csv);
    if (!md) return -1;
    memset(ms, 0, sizeof ms);
    write_md_head(md, o);
    for (int i = 0; i < o->models.n && !rc; i++, nm++) rc = section_model(o, o->models.v[i], tx, n_tx, md, csv, &ms[i]);
    fprintf(md, "## At TQ-3.5's quality\n\n");
    write_summary(md, ms, nm);
    if (ferror(md) | fclose(md)) rc = -1;
    if (!rc) render_rd_plot(o);
    char rp[4200];
    snprintf(rp, sizeof rp, "%s/report.md", o->out);
    FILE *rep = append_report && !rc ? fopen(rp, "a") : NULL;
    if (rep) {
        fprintf(rep, "\n## Rate-distortion: bits per position vs KL (rd.md, rd.csv, rd.png)\n\n");
        write_summary(rep, ms, nm);
        if (ferror(rep) | fclose(rep)) rc = -1;
    }
    return rc;
}
