/* seqkv bench: plot data (plot_bits.tsv, plot_c5.tsv, plot_restore.tsv) and the PNGs that
 * scripts/plot_bench.gp renders from them with gnuplot. */
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_internal.h"

/* plot_bits.tsv: one line per representation (the first case's rows), one column per case. */
static void plot_bits(FILE *b, const bench_case *cs, int n_cases)
{
    fprintf(b, "representation");
    for (int i = 0; i < n_cases; i++) fprintf(b, "\t\"%s/%s\"", cs[i].model, cs[i].text);
    fprintf(b, "\n");
    for (int k = 0; n_cases && k < cs[0].n_rows; k++) {
        fprintf(b, "\"%s\"", cs[0].rows[k].repr);
        for (int i = 0; i < n_cases; i++) {
            const bench_row *w = bench_find_row(&cs[i], cs[0].rows[k].repr);
            fprintf(b, "\t%.4f", w ? w->bits : NAN);
        }
        fprintf(b, "\n");
    }
}

/* plot_c5.tsv: one block per case. */
static void plot_c5(FILE *c, const bench_case *bc)
{
    fprintf(c, "\"%s/%s\"\tbucket\trunning\tratio\ttq35\tf16\n", bc->model, bc->text);
    for (int k = 0; k < bc->n_c5; k++)
        fprintf(c, "%d\t%.5f\t%.5f\t%.3f\t%.1f\t%.1f\n", bc->c5[k].L, bc->c5[k].p_bits, bc->c5[k].run_mean,
                bc->tq35_bits / bc->c5[k].run_mean, bc->tq35_bits, bc->f16_bits);
    fprintf(c, "\n\n");
}

/* plot_restore.tsv: one block per case; labels on one row per kind of representation, so they stay readable. */
static void plot_restore(FILE *r, const bench_case *bc)
{
    static const char *const labelled[] = {"f32", "f16", "q8_0", "tq3", "zstd -3 (f16 KV)", ".skv codec kvq k=tq4,v=tq3",
                                           "raw tokens + prefill", "model-coded tokens"};
    fprintf(r, "\"%s/%s\"\tbits\ttps\n", bc->model, bc->text);
    for (int k = 0; k < bc->n_rows; k++) {
        const char *lab = "";
        for (size_t j = 0; j < sizeof labelled / sizeof *labelled; j++)
            if (!strcmp(bc->rows[k].repr, labelled[j])) lab = labelled[j];
        fprintf(r, "%.4f\t%.1f\t\"%s\"\n", bc->rows[k].bits, bc->rows[k].restore_tps, lab);
    }
    fprintf(r, "\n\n");
}

int bench_write_plot_data(const char *dir, const bench_case *cs, int n_cases)
{
    static const char *const names[3] = {"plot_bits.tsv", "plot_c5.tsv", "plot_restore.tsv"};
    FILE *fs[3];
    int bad = 0;
    for (int i = 0; i < 3; i++)
        if (!(fs[i] = bench_open_out(dir, names[i]))) bad = 1;
    if (!bad) {
        plot_bits(fs[0], cs, n_cases);
        for (int i = 0; i < n_cases; i++) plot_c5(fs[1], &cs[i]), plot_restore(fs[2], &cs[i]);
    }
    for (int i = 0; i < 3; i++)
        if (fs[i] && (ferror(fs[i]) | fclose(fs[i]))) bad = 1;
    return bad ? -1 : 0;
}

/* Runs gnuplot on scripts/plot_bench.gp; a note (not an error) when it cannot. */
static void render_plots(bench_opts *o, int n_cases)
{
    char script[4096], e[4300];
    if (!bench_find_path("scripts/plot_bench.gp", script, sizeof script)) {
        bench_note(o, "plots skipped: scripts/plot_bench.gp not found");
        return;
    }
    if (strchr(o->out, '\'') || strchr(o->out, '"')) {
        bench_note(o, "plots skipped: the output directory name contains a quote");
        return;
    }
    snprintf(e, sizeof e, "outdir='%s'; ncases=%d", o->out, n_cases);
    int st = bench_gnuplot(script, e);
    if (st < 0 || st == 127)
        bench_note(o, "plots skipped: gnuplot not found (install gnuplot-nox: scripts/install-deps.sh --bench)");
    else if (st) bench_note(o, "plots incomplete: gnuplot exited with status %d", st);
}

int bench_gnuplot(const char *script, const char *expr)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", "-e", expr, script, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

void bench_plots(bench_opts *o, int n_cases)
{
    static const char *const pngs[] = {"bits.png", "corollary5.png", "restore.png"};
    for (size_t i = 0; i < sizeof pngs / sizeof *pngs; i++) { /* never embed a previous run's plots */
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", o->out, pngs[i]);
        remove(p);
    }
    if (o->plots) render_plots(o, n_cases);
    else bench_note(o, "plots skipped (--no-plots)");
}
