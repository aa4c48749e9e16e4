/* seqkv bench: what the files of the command share (tools/cmd/cmd_bench.c and tools/bench_*.c).
 *
 *   cmd_bench.c          options, the order of the steps, where the output goes
 *   bench_case.c         one model x text: the exact run and everything measured against it
 *   bench_pervector.c    per-vector schemes and zstd on the KV (in memory)
 *   bench_skv.c          .skv files: token codecs and quantized-KV codecs, through the library
 *   bench_c5.c           Corollary 5 (surprisal per position vs context length)
 *   bench_workload.c     the multi-session store workload, computed and in a real store
 *   bench_inputs.c       default texts and models
 *   bench_report*.c      report.md, one section per function (c5 and store in their own files)
 *   bench_csv.c          the CSV files
 *   bench_plot.c         plot data and gnuplot
 *   bench_rd_section.c   rate-distortion curves (kv-rd's machinery, bench_rd.c) per model
 *   bench_util.c         paths, directories, notes, progress
 *
 * Everything measured goes through the public API (include/seqkv.h): the command never runs
 * another process to measure, and reads no numbers back from printed text.
 */
#ifndef SKV_BENCH_INTERNAL_H
#define SKV_BENCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "cli_opt.h"

#define BENCH_MAX_MODELS 4
#define BENCH_MAX_TEXTS 8
#define BENCH_MAX_ROWS 32
#define BENCH_MAX_CASES (BENCH_MAX_MODELS * BENCH_MAX_TEXTS)
#define BENCH_MAX_NOTES 16
#define BENCH_MAX_C5 64

typedef struct {
    char label[48];   /* short name used in tables and CSV */
    char source[256]; /* where it came from, for the report */
    char *bytes;
    size_t len;
} bench_text;

typedef struct {
    char repr[48];
    char family[16];   /* per-vector | generic | stored KV | sequential */
    double bits;       /* per token position, everything stored counted */
    int lossless;      /* 1: restores the exact f32 KV */
    int has_quality;   /* ppl_delta / kl measured */
    double ppl_delta, kl;
    double restore_tps;
    char measured[96]; /* what the restore speed measures */
    const char *verified; /* "yes", "no (lossy)", ... */
} bench_row;

typedef struct {
    double p_bits;   /* per-position bucket mean at this sample */
    double run_mean; /* running mean over positions 1..L */
    int L;
} c5_point;

/* The real store holding the workload's sessions (skv_store_get_stats after the puts). */
typedef struct {
    int ok;
    double bytes, tokens, unique; /* disk_bytes, session_tokens, unique_positions */
} bench_store_run;

typedef struct {
    char model[64], text[48];
    size_t n;                              /* tokens (BOS included) */
    double f16_bits, tq35_bits, ppl, xent; /* xent: mean -log2 p over positions 1..n-1 */
    bench_row rows[BENCH_MAX_ROWS];
    int n_rows;
    c5_point c5[BENCH_MAX_C5];
    int n_c5, c5_windows;
    /* store workload */
    int wl_ok;
    size_t wl_sessions, wl_positions, wl_unique;
    double wl_floor_all, wl_floor_unique;
    int wl_prompt, wl_turn, wl_reply, wl_groups;
    bench_store_run store[2]; /* [0] budget 0 (tokens only), [1] default budget */
    int kv_codec_missing;     /* the library refused a quantized-KV codec */
} bench_case;

typedef struct {
    cli_list models;  /* -m, repeatable (at most BENCH_MAX_MODELS) */
    cli_list files;   /* -f, repeatable (at most BENCH_MAX_TEXTS) */
    const char *out;
    int quick, plots, store, kv_files, rd, rd_only;
    long threads, tokens, windows;
    char notes[BENCH_MAX_NOTES][256];
    int n_notes;
    char machine[160];  /* date, CPUs and load when the run started */
    char out_tmp[4096]; /* --quick without --out: the fresh directory written to */
} bench_opts;

/* One model x text: the exact run, which every representation is measured against. */
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

/* bench_util.c */
void bench_note(bench_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *bench_repo_root(void);
const char *bench_find_path(const char *rel, char *buf, size_t cap);
int bench_mkdir_p(const char *path);
FILE *bench_open_out(const char *dir, const char *name);
void bench_base_label(const char *path, char *out, size_t cap);
void bench_machine_line(char *buf, size_t cap);
/* A fresh directory "<$TMPDIR or /tmp>/seqkv-bench-<what>-XXXXXX" in buf; -1 if none. */
int bench_temp_dir(const char *what, char *buf, size_t cap);
void bench_remove_tree(const char *dir);
const bench_row *bench_find_row(const bench_case *bc, const char *repr);
bench_row *bench_new_row(bench_case *bc, const char *repr, const char *family);
void bench_fmt_ratio(char *buf, size_t cap, double x);

/* bench_inputs.c */
int bench_load_texts(bench_opts *o, bench_text *tx, int *n_tx);
void bench_default_models(bench_opts *o, char *buf, size_t cap);

/* bench_case.c */
skv_ctx *bench_new_ctx(const bench_run *r, const char *kv_quant);
int bench_run_all(bench_opts *o, const bench_text *tx, int n_tx, bench_case *cs, int *n_cases);

/* bench_pervector.c: per-vector and zstd rows; y: scratch of kv_len floats */
int bench_per_vector_row(const bench_run *r, bench_case *bc, const char *scheme, float *y);
int bench_zstd_row(const bench_run *r, bench_case *bc, int f16, int level, float *y);

/* bench_skv.c */
int bench_sequential_rows(const bench_run *r, bench_case *bc, int codec, int with_ngram);
void bench_kv_codec_rows(const bench_run *r, bench_case *bc);

/* bench_c5.c: mean[n] receives the mean surprisal of each position over the windows */
int bench_c5_measure(const bench_run *r, const int32_t *all, size_t n_all, int windows, double *mean, int *used);
void bench_c5_sample(bench_case *bc, const double *mean, size_t n);

/* bench_workload.c */
int bench_store_workload(const bench_run *r, bench_case *bc, const int32_t *all, size_t n_all, const bench_opts *o);

/* bench_csv.c */
void bench_csv_str(FILE *f, const char *s, const char *sep);
void bench_write_csvs(FILE *rep, FILE *c5, const bench_case *cs, int n_cases);

/* bench_report.c, bench_report_c5.c, bench_report_store.c */
int bench_write_report(bench_opts *o, const bench_text *tx, int n_tx, const bench_case *cs, int n_cases, double secs);
const c5_point *bench_c5_at(const bench_case *bc, int L);
void bench_report_c5(FILE *f, const bench_case *cs, int n_cases);
void bench_report_store(FILE *f, FILE *csv, const bench_case *cs, int n_cases);

/* bench_plot.c */
int bench_write_plot_data(const char *dir, const bench_case *cs, int n_cases);
/* Removes a previous run's PNGs, then renders the plots (or notes why not). */
void bench_plots(bench_opts *o, int n_cases);
/* gnuplot -e expr script: its exit status, 127 when gnuplot is missing, -1 on a failure. */
int bench_gnuplot(const char *script, const char *expr);

/* bench_rd_section.c: rd.md, rd.csv, rd.png in o->out; append_report: a summary appended to
 * report.md. 0 or -1 after a message. */
int bench_rd_section(bench_opts *o, const bench_text *tx, int n_tx, int append_report);

#endif
