/* Shared helpers of the seqkv command-line tool. */
#ifndef SKV_CLI_H
#define SKV_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "cli_opt.h"
#include "seqkv.h"

/* Exit codes: 0 ok, 1 failure (bad input, mismatch), 2 usage error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One value of option opt (tools/cli/cli_opt.c; commands use the table-driven cli_parse). */
int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out);
/* Reads a whole file ("-" = stdin); NUL-terminated; NULL + message on error. */
char *cli_read_file(const char *path, size_t *len);
/* An output file (tools/cli/cli_out.c). Written to a temporary file in the destination's
 * directory, created by cli_out_open (so an unwritable path fails before any long work),
 * and renamed over the destination by cli_out_commit only when the command succeeds: a
 * failed command leaves an existing file as it was. The new file keeps the mode of the one
 * it replaces; a read-only file is refused. "-" writes stdout directly; an existing device
 * or FIFO is written in place. A zeroed or NULL-opened cli_out is inert. */
typedef struct {
    const char *dest; /* the path asked for; NULL = none (every call a no-op) */
    FILE *f;          /* where to write */
    char tmp[4096];   /* the temporary file ("" when writing stdout or a device) */
    char target[4096]; /* what tmp is renamed to: dest, or the file a link at dest points to */
    int scratch;      /* tmp is a scratch file copied to f on commit (cli_out_path on stdout) */
} cli_out;
/* 0, or -1 after a message; dest NULL: nothing to open (0). */
int cli_out_open(cli_out *o, const char *dest);
/* A file name for writers that open files themselves (skv_kvdump_write); o->f is then
 * unused. NULL after a message. */
const char *cli_out_path(cli_out *o);
/* Moves the written file into place (or copies a scratch file to stdout); 0, or -1 after a
 * message (the temporary file removed). */
int cli_out_commit(cli_out *o);
/* Removes the temporary file; the destination is untouched. */
void cli_out_discard(cli_out *o);
/* The whole of data to dest, atomically as above. */
int cli_write_file(const char *dest, const void *data, size_t n);
/* Where a command's report goes: stdout, or stderr when out1 or out2 is "-" (data on stdout). */
FILE *cli_report_stream(const char *out1, const char *out2);
/* 1 after a usage message if out1 and out2 are both "-". */
int cli_stdout_clash(const cli_cmd *cmd, const char *what1, const char *out1, const char *what2, const char *out2);

/* Default model path when -m is not given (SEQKV_MODEL, then the bundled model). */
const char *cli_default_model(void);
/* Loads the model named by path (NULL = default), printing an error on failure. */
skv_model *cli_load_model(const char *path);
/* The same for a command that runs about `sweeps` forward passes (each reads every weight
 * once): below CLI_RESIDENT_MIN_SWEEPS a large model's weights stay in the file's mapping,
 * since their resident copy (docs/determinism.md, "Resident weights") costs more at load
 * than it saves (0.3-2 s for a 2.2 GB model against ~0.1 s a pass, 2026-12-04, AMD EPYC);
 * an explicit $SEQKV_RESIDENT is obeyed. */
#define CLI_RESIDENT_MIN_SWEEPS 16
skv_model *cli_load_model_sweeps(const char *path, uint64_t sweeps);
/* At most how many forward passes storing the text (ids: whitespace-separated ids) in the
 * file at path runs: the engine's prefill takes up to 512 tokens a pass, or ctx (> 0: the
 * segment capacity) when smaller, and each segment starts a pass; a token covers a byte
 * at least (byte fallback; BOS and EOS aside), an id a digit and a separator. UINT64_MAX
 * when the size says nothing (stdin "-", not a regular file). */
uint64_t cli_text_sweeps(const char *path, int ids, long ctx);
/* The line a report adds when the weights were copied (skv_model_info.resident_bytes). */
void cli_resident_note(FILE *rep, const skv_model *m);
/* A command that never runs the model (info, tokenize): cli_load_model_sweeps(path, 0). */
skv_model *cli_load_model_unrun(const char *path);
/* Tokenizes text (add_special as the model says); malloc'ed ids. */
int32_t *cli_tokenize(const skv_model *m, const char *text, size_t len, int add_special, size_t *n);
/* The text of n tokens (skv_model_detokenize: BOS dropped, the SentencePiece space after BOS
 * too, so tokenize -> detokenize gives the text back); malloc'ed, NUL-terminated, *len its
 * length; NULL after a message. after_bos: the tokens continue right after a BOS. */
char *cli_detokenize(const skv_model *m, const int32_t *tok, size_t n, int after_bos, size_t *len);
/* Writes tokens as text to f (cli_detokenize). *after_bos carries the state across calls
 * (start with 1 if a BOS came before, else 0). 0, or -1 after a message. */
int cli_write_tokens(FILE *f, const skv_model *m, const int32_t *tok, size_t n, int *after_bos);
/* 0 when text comes back unchanged from its tokens (tok, tokenized with BOS); otherwise
 * -1 after a message naming the first byte that changes and why (invalid UTF-8, a literal
 * U+2581, a character the vocabulary lacks), and what to do. what: the input's name. */
int cli_check_roundtrip(const skv_model *m, const char *what, const char *text, size_t len, const int32_t *tok,
                        size_t n);

/* The tokens (with BOS) of a text read from `what`: refused with a message when the text
 * is empty, or, unless lossy, when it does not round-trip (cli_check_roundtrip). */
int32_t *cli_text_tokens(const skv_model *m, const char *what, const char *text, size_t len, int lossy, size_t *n);

/* Progress line on stderr (done/total, percent, rate, ETA), shown only when stderr is a
 * terminal and -q was not given (cli_quiet); redrawn at most 5 times a second. unit: what
 * is counted, "tokens" unless set after cli_progress_start. */
typedef struct {
    const char *what, *unit;
    double t0, last;
    int enabled, shown;
    char line[192]; /* the line last drawn */
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what);
void cli_progress_update(cli_progress *p, size_t done, size_t total);
void cli_progress_end(cli_progress *p);
/* skv_store_set_progress's callback over a cli_progress (user). */
void cli_progress_cb(void *user, uint64_t done, uint64_t total);
/* Around a message written to stderr while a progress line is shown: clear the line, then
 * draw it again below the message (nothing when none is shown). */
void cli_progress_clear(void);
void cli_progress_redraw(void);
double cli_now(void);

/* Comparison of a run's next-token distributions with a reference run (tools/cmd/cmd_quality.c).
 * nll: sum of -ln p_q(target); kl: sum of KL(p_ref || p_q) in nats; top1: rows whose argmax
 * agree (ties: lowest id); n: rows. */
typedef struct {
    double nll, kl;
    size_t n, top1;
} cli_score;
void cli_score_row(const float *ref, const float *q, int n_vocab, int32_t target, cli_score *s);
/* Scores rows [from, to) of a window's logits (row j predicts win[j + 1]). */
void cli_score_rows(const float *ref, const float *q, int n_vocab, const int32_t *win, size_t from, size_t to,
                    cli_score *s);
/* Runs win = [bos] + tok[0..k) through c from an empty cache, every position's logits into
 * logits (k + 1 rows). */
int cli_bos_window(skv_ctx *c, int32_t bos, const int32_t *tok, size_t k, int32_t *win, float *logits);

/* Codecs, from the library's table (tools/cli/cli_codec.c). cli_codec_help: lead, then one
 * wrapped "name: help" paragraph per codec, into buf; cli_codec_names: the names of the
 * codecs having every flag of need and none of without, space-separated; both return buf.
 * cli_codec_has: codec has every flag of flags (SKV_CODEC_F_*). */
const char *cli_codec_help(char *buf, size_t cap, const char *lead);
const char *cli_codec_names(char *buf, size_t cap, unsigned need, unsigned without);
int cli_codec_has(int codec, unsigned flags);

/* Commands */
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_kvdump(int argc, char **argv);
int cmd_compress(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_kvquality(int argc, char **argv);
int cmd_kvrd(int argc, char **argv);     /* tools/bench/bench_rd.c */
int cmd_kvtc_calib(int argc, char **argv); /* tools/bench/bench_kvtc.c */
int cmd_store(int argc, char **argv);   /* tools/cmd/cmd_store.c */
/* $SEQKV_STORE_MAP_SIZE: the LMDB map size of the stores that store, bench and serve open,
 * in bytes (0 or unset: the library's 64 GiB default); a smaller one lets seqkv run under
 * Valgrind, which cannot map 64 GiB. */
uint64_t cli_store_map_size(void);
int cmd_bench(int argc, char **argv);   /* tools/cmd/cmd_bench.c */
int cmd_serve(int argc, char **argv);   /* tools/cmd/cmd_serve.c (src/server/) */

#endif
