/* seqkv bench: every representation of the same KV cache, measured end to end.
 *
 * For each model x text the command runs the text (cut to one context) once exactly and keeps
 * its logits and KV cache; every representation is a way to store that one cache: per-vector
 * schemes, zstd on the KV, quantized-KV .skv files, raw and model-coded token .skv files. Plus
 * Corollary 5 (per-position surprisal vs context length, averaged over windows of the text), a
 * multi-session store workload (computed, and in a real store) and a labelled projection to
 * large models. Output: report.md, CSV files and plot data in --out; PNGs by
 * scripts/plot_bench.gp (gnuplot). docs/bench.md defines every column; tools/bench_internal.h
 * lists the files of the command.
 *
 * This file: the options, the order of the steps and where the output goes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

#define DEFAULT_OUT "bench/results/report"

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
    "  --out DIR    output directory (default " DEFAULT_OUT "; with --quick a fresh\n"
    "               temporary directory, named on stdout)\n"
    "  --quick      one model, one text, 128 tokens, a subset of schemes (CI smoke test)\n"
    "  --threads N  threads for prefill/restore (default 1)\n"
    "  --tokens N   tokens per text, BOS included (default: the model's context; capped by it)\n"
    "  --windows W  windows averaged for Corollary 5 (default 16, as many as the text holds; --quick 1)\n"
    "  --no-plots   do not run gnuplot\n"
    "  --no-store   skip the real store rows of the store workload (never run with --quick)\n"
    "  --no-kv-files  skip the quantized-KV .skv rows (codecs f16|q8|...; not with --quick)\n"
    "Definitions of every column: docs/bench.md.\n";

/* -m, -f, --out; 0 ok, -1 error (printed). */
static int string_opt(bench_opts *o, const char *a, const char *v)
{
    int m = !strcmp(a, "-m"), f = !strcmp(a, "-f");
    if (!v) {
        cli_error("option %s needs a value", a);
        return -1;
    }
    if ((m && o->n_models == BENCH_MAX_MODELS) || (f && o->n_files == BENCH_MAX_TEXTS)) {
        cli_error("too many %s options (at most %d)", a, m ? BENCH_MAX_MODELS : BENCH_MAX_TEXTS);
        return -1;
    }
    if (m) o->models[o->n_models++] = v;
    else if (f) o->files[o->n_files++] = v;
    else o->out = v;
    return 0;
}

enum { NOT_MINE = 2 };

/* A flag (an option without a value) named a: sets its field; NOT_MINE if a is none. */
static int flag_opt(bench_opts *o, const char *a)
{
    const struct {
        const char *name;
        int *field, value;
    } t[] = {
        {"--quick", &o->quick, 1},
        {"--no-plots", &o->plots, 0},
        {"--no-store", &o->store, 0},
        {"--no-kv-files", &o->kv_files, 0},
    };
    for (size_t k = 0; k < sizeof t / sizeof *t; k++)
        if (!strcmp(a, t[k].name)) return *t[k].field = t[k].value, 0;
    return NOT_MINE;
}

/* An integer option named a: parses v into its field (0, or -1 with a message); NOT_MINE if a is none. */
static int int_opt(bench_opts *o, const char *a, const char *v)
{
    const struct {
        const char *name, *alias;
        long *field, lo, hi;
    } t[] = {
        {"--threads", "-t", &o->threads, 1, 256},
        {"--tokens", NULL, &o->tokens, 16, 1 << 20},
        {"--windows", NULL, &o->windows, 1, 1024},
    };
    for (size_t k = 0; k < sizeof t / sizeof *t; k++)
        if (!strcmp(a, t[k].name) || (t[k].alias && !strcmp(a, t[k].alias)))
            return cli_parse_int(a, v, t[k].lo, t[k].hi, t[k].field) ? -1 : 0;
    return NOT_MINE;
}

/* Option argv[*i] (and its value, *i then moved past it); 1 help printed, 0 ok, -1 error (printed). */
static int parse_one(int argc, char **argv, int *i, bench_opts *o)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return fputs(bench_help, stdout), 1;
    if (flag_opt(o, a) == 0) return 0;
    int rc = int_opt(o, a, v);
    if (rc == NOT_MINE && (!strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "--out"))) rc = string_opt(o, a, v);
    if (rc != NOT_MINE) return (*i)++, rc;
    cli_error("unknown option '%s' (see seqkv bench --help)", a);
    return -1;
}

/* 0 ok, 1 help printed, -1 usage error (printed). */
static int parse_args(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        int rc = parse_one(argc, argv, &i, o);
        if (rc) return rc;
    }
    return 0;
}

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
    if (!o->n_models) bench_default_models(o, mbuf, cap);
}

/* Measures every case, then writes the plot data, the plots and the report. */
static int run_and_report(bench_opts *o, const bench_text *tx, int n_tx, bench_case *cs, double t0)
{
    int n_cases = 0;
    if (bench_run_all(o, tx, n_tx, cs, &n_cases) || bench_write_plot_data(o->out, cs, n_cases)) return -1;
    bench_plots(o, n_cases);
    if (bench_write_report(o, tx, n_tx, cs, n_cases, cli_now() - t0)) return -1;
    printf("bench: %d model x text cases in %.0f s; report: %s/report.md\n", n_cases, cli_now() - t0, o->out);
    for (int i = 0; i < o->n_notes; i++) printf("note: %s\n", o->notes[i]);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o = {.plots = 1, .store = 1, .kv_files = 1, .threads = 1};
    bench_text tx[BENCH_MAX_TEXTS];
    char mbuf[4096];
    int n_tx = 0, rc = CLI_FAIL;
    memset(tx, 0, sizeof tx);
    int pa = parse_args(argc, argv, &o);
    if (pa) return pa > 0 ? CLI_OK : CLI_USAGE;
    apply_defaults(&o, mbuf, sizeof mbuf);
    bench_case *cs = calloc(BENCH_MAX_CASES, sizeof *cs);
    double t0 = cli_now();
    bench_machine_line(o.machine, sizeof o.machine);
    if (cs && !bench_load_texts(&o, tx, &n_tx) && !output_dir(&o) && !run_and_report(&o, tx, n_tx, cs, t0)) rc = CLI_OK;
    for (int i = 0; i < BENCH_MAX_TEXTS; i++) free(tx[i].bytes);
    free(cs);
    return rc;
}
