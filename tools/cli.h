/* Shared helpers of the seqkv command-line tool. */
#ifndef SKV_CLI_H
#define SKV_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "seqkv.h"

/* Exit codes: 0 ok, 1 failure (bad input, mismatch), 2 usage error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out);
/* Reads a whole file ("-" = stdin); NUL-terminated; NULL + message on error. */
char *cli_read_file(const char *path, size_t *len);
/* Default model path when -m is not given (SEQKV_MODEL, then the bundled model). */
const char *cli_default_model(void);
/* Loads the model named by path (NULL = default), printing an error on failure. */
skv_model *cli_load_model(const char *path);
/* Tokenizes text (add_special as the model says); malloc'ed ids. */
int32_t *cli_tokenize(const skv_model *m, const char *text, size_t len, int add_special, size_t *n);
/* Writes tokens as text to f. BOS tokens are dropped, and with SentencePiece the one space
 * the tokenizer put after BOS too, so tokenize -> write gives the text back. *after_bos
 * carries that state across calls (start with 1 if a BOS came before, else 0). */
void cli_write_tokens(FILE *f, const skv_model *m, const int32_t *tok, size_t n, int *after_bos);

/* Progress line on stderr, shown only when stderr is a terminal. */
typedef struct {
    const char *what;
    double t0, last;
    int enabled;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what);
void cli_progress_update(cli_progress *p, size_t done, size_t total);
void cli_progress_end(cli_progress *p);
double cli_now(void);

/* Comparison of a run's next-token distributions with a reference run (tools/cmd_quality.c).
 * nll: sum of -ln p_q(target); kl: sum of KL(p_ref || p_q) in nats; top1: rows whose argmax
 * agree (ties: lowest id); n: rows. */
typedef struct {
    double nll, kl;
    size_t n, top1;
} cli_score;
void cli_score_row(const float *ref, const float *q, int n_vocab, int32_t target, cli_score *s);

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
int cmd_store(int argc, char **argv);   /* tools/cmd_store.c */
int cmd_bench(int argc, char **argv);   /* tools/cmd_bench.c */

#endif
