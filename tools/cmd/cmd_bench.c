/* seqkv bench: every representation of the same KV cache, measured end to end.
 *
 * For each model x text the command runs the text (cut to one context) once exactly and keeps
 * its logits and KV cache; every representation is a way to store that one cache: per-vector
 * schemes, zstd on the KV, quantized-KV .skv files, raw and model-coded token .skv files. Plus
 * Corollary 5 (per-position surprisal vs context length, averaged over windows of the text), a
 * multi-session store workload (computed, and in a real store) and a labelled projection to
 * large models. Output: report.md, CSV files and plot data in --out; PNGs by
 * scripts/plot_bench.gp (gnuplot). docs/bench.md defines every column; tools/bench/bench_internal.h
 * lists the files of the command.
 *
 * This file: the options, the order of the steps and where the output goes.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

#define DEFAULT_OUT "bench/results/report"

#define F(x) offsetof(bench_opts, x)
static const cli_opt bench_table[] = {
    {"model", 'm', CLI_LIST, "MODEL", 0, BENCH_MAX_MODELS, F(models),
     "model (repeatable; default: the bundled model + stories260K when present)"},
    {"file", 'f', CLI_LIST, "TEXT", 0, BENCH_MAX_TEXTS, F(files),
     "text file (repeatable; default: held-out KJV, Debian fortunes, stories samples)"},
    {"output", 'o', CLI_PATH, "DIR", 0, 0, F(out),
     "output directory (default " DEFAULT_OUT ";\nwith --quick a fresh temporary directory, named on stderr)"},
    {"out", 0, CLI_PATH, "DIR", 0, 0, F(out), NULL}, /* the spelling before -o/--output */
    {"quick", 0, CLI_FLAG, NULL, 0, 0, F(quick), "one model, one text, 128 tokens, a subset of schemes (CI smoke test)"},
    CLI_OPT_THREADS(F(threads)),
    {"tokens", 'n', CLI_INT, "N", 16, 1 << 20, F(tokens),
     "tokens per text, BOS included (default: the model's context; capped by it)"},
    {"windows", 0, CLI_INT, "W", 1, 1024, F(windows),
     "windows averaged for Corollary 5 (default 16, as many as the text holds; --quick 1)"},
    {"no-plots", 0, CLI_UNSET, NULL, 0, 0, F(plots), "do not run gnuplot"},
    {"no-store", 0, CLI_UNSET, NULL, 0, 0, F(store), "skip the real store rows of the store workload (never run with --quick)"},
    {"no-rd", 0, CLI_UNSET, NULL, 0, 0, F(rd), "skip the rate-distortion curves (rd.md, rd.csv, rd.png)"},
    {"rd-only", 0, CLI_FLAG, NULL, 0, 0, F(rd_only), "only the rate-distortion curves (report.md is not written)"},
    {"no-kv-files", 0, CLI_UNSET, NULL, 0, 0, F(kv_files),
     "skip the quantized-KV .skv rows (codecs f16|q8|...; not with --quick)"},
    {0},
};
#undef F

static const cli_cmd bench_cmd = {
    "bench", "[-m MODEL ...] [-f TEXT ...] [-o DIR] [--quick] [-t N] [-n N]\n[--windows W] [--no-plots] [--no-store] [--no-kv-files]\n[--no-rd] [--rd-only]",
    "Measures every representation of the same KV cache (per-vector f32/f16/q8_0/q4_0/TurboQuant,\n"
    "zstd on the KV, raw tokens + prefill, model-coded tokens) on each model x text: bits per\n"
    "position, ratios to f16 and TurboQuant-3.5, quality cost, restore speed, bit-exact verification;\n"
    "plus Corollary 5 (bits per position vs context length), a multi-session store workload, a\n"
    "labelled projection to 7B/8B/70B geometries and rate-distortion curves of stored KV (bits per\n"
    "position vs KL, restore speed: rd.md). Writes report.md, CSVs and PNG plots (gnuplot).\n",
    bench_table, 0, "Definitions of every column: docs/bench.md.\n"};

/* The output directory: --out, else for --quick a fresh temporary one (a smoke run never
 * touches the committed report), else DEFAULT_OUT. Created if missing. */
static int output_dir(bench_opts *o)
{
    if (!o->out && o->quick) {
        if (bench_temp_dir("quick", o->out_tmp, sizeof o->out_tmp)) return -1;
        o->out = o->out_tmp;
        bench_progress("--quick without --out: writing to %s", o->out);
    }
    if (!o->out) o->out = DEFAULT_OUT;
    if (!bench_mkdir_p(o->out)) return 0;
    cli_error("cannot create the output directory '%s': %s", o->out, strerror(errno));
    return -1;
}

static void apply_defaults(bench_opts *o, char *mbuf, size_t cap)
{
    if (o->quick && !o->tokens) o->tokens = 128;
    if (o->quick) o->store = 0, o->kv_files = 0;
    if (!o->windows) o->windows = o->quick ? 1 : 16;
    if (!o->models.n) bench_default_models(o, mbuf, cap);
}

/* Measures every case, then writes the plot data, the plots and the report. */
static int run_and_report(bench_opts *o, const bench_text *tx, int n_tx, bench_case *cs, double t0)
{
    int n_cases = 0;
    if (bench_run_all(o, tx, n_tx, cs, &n_cases) || bench_write_plot_data(o->out, cs, n_cases)) return -1;
    bench_plots(o, n_cases);
    if (bench_write_report(o, tx, n_tx, cs, n_cases, cli_now() - t0)) return -1;
    if (o->rd && bench_rd_section(o, tx, n_tx, 1)) return -1;
    printf("bench: %d model x text cases in %.0f s; report: %s/report.md\n", n_cases, cli_now() - t0, o->out);
    for (int i = 0; i < o->n_notes; i++) printf("note: %s\n", o->notes[i]);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o = {.plots = 1, .store = 1, .kv_files = 1, .rd = 1, .threads = 1};
    bench_text tx[BENCH_MAX_TEXTS];
    char mbuf[4096];
    int n_tx = 0, rc = CLI_FAIL;
    memset(tx, 0, sizeof tx);
    int pa = cli_parse(&bench_cmd, argc, argv, &o, NULL, NULL);
    if (pa != CLI_CONTINUE) return pa;
    apply_defaults(&o, mbuf, sizeof mbuf);
    bench_case *cs = calloc(BENCH_MAX_CASES, sizeof *cs);
    double t0 = cli_now();
    bench_machine_line(o.machine, sizeof o.machine);
    if (cs && !bench_load_texts(&o, tx, &n_tx) && !output_dir(&o) &&
        !(o.rd_only ? bench_rd_section(&o, tx, n_tx, 0) : run_and_report(&o, tx, n_tx, cs, t0)))
        rc = CLI_OK;
    if (rc == CLI_OK && o.rd_only) printf("bench: rate-distortion curves in %.0f s; %s/rd.md\n", cli_now() - t0, o.out);
    for (int i = 0; i < BENCH_MAX_TEXTS; i++) free(tx[i].bytes);
    free(cs);
    return rc;
}
