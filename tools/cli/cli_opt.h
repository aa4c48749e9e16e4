/* seqkv's command-line option parser (tools/cli/cli_opt.c): one table row per option, the
 * same spelling for the same thing in every command, --help generated from the table.
 *
 * A command declares its options as a table at file scope whose rows name a field of the
 * command's options struct by offset, and a cli_cmd with its synopsis and description:
 *
 *     typedef struct { const char *model, *file; long threads; int verify; } my_opts;
 *     #define F(x) offsetof(my_opts, x)
 *     static const cli_opt my_table[] = {
 *         CLI_OPT_MODEL(F(model)),
 *         CLI_OPT_FILE(F(file), "TEXT", "text file ('-' = stdin)"),
 *         CLI_OPT_THREADS(F(threads)),
 *         {"verify", 0, CLI_FLAG, NULL, 0, 0, F(verify), "check the KV digest"},
 *         {0},
 *     };
 *     static const cli_cmd my_cmd = {"mycmd", "[-m MODEL] -f TEXT", "What it does.\n", my_table, 0, NULL};
 *     ...
 *     my_opts o = {.threads = 1};
 *     int rc = cli_parse(&my_cmd, argc, argv, &o, NULL, NULL);
 *     if (rc != CLI_CONTINUE) return rc;   (0 after --help, 2 after a usage error)
 *
 * Accepted forms: -x VALUE, --long VALUE, --long=VALUE; "-" alone is a value or a positional
 * argument (stdin / stdout); "--" ends the options. Values may start with '-' (-n -1). */
#ifndef SKV_CLI_OPT_H
#define SKV_CLI_OPT_H

#include <stddef.h>
#include <stdio.h>

/* What an option takes, and so the type of its destination field. */
enum {
    CLI_END = 0, /* ends a table */
    CLI_FLAG,    /* no value; int field set to 1 */
    CLI_UNSET,   /* no value; int field set to 0 (--no-verify) */
    CLI_INT,     /* decimal integer in [lo, hi]; long field */
    CLI_FLOAT,   /* number in [lo, hi]; double field */
    CLI_STR,     /* a string; const char * field */
    CLI_PATH,    /* a non-empty file name, "-" = stdin or stdout; const char * field */
    CLI_BYTES,   /* byte count in [lo, hi], suffixes K, M, G (powers of 1024); long long field */
    CLI_CHOICE,  /* one of the words of `arg` ("none|ngram"); int field = the word's index */
    CLI_LIST,    /* repeatable file name, at most hi of them; cli_list field */
};

#define CLI_LIST_MAX 16

/* Set by -q / --quiet, which every table-driven command accepts: no progress line. */
extern int cli_quiet;

typedef struct {
    int n;
    const char *v[CLI_LIST_MAX];
} cli_list;

typedef struct {
    const char *name; /* long name without the dashes ("model"), or NULL */
    char letter;      /* short name ('m'), or 0 */
    int kind;         /* CLI_* */
    const char *arg;  /* the value's name in --help ("MODEL"); for CLI_CHOICE the words, '|'-separated */
    double lo, hi;    /* accepted range (CLI_INT, CLI_FLOAT, CLI_BYTES; CLI_LIST: hi = most values) */
    size_t off;       /* offset of the destination field in the command's options struct */
    const char *help; /* one line or several ('\n'); NULL = a hidden alias: accepted, not listed */
} cli_opt;

typedef struct {
    const char *name;    /* "compress", "store put" */
    const char *usage;   /* synopsis after "usage: seqkv NAME "; '\n' starts an aligned continuation line */
    const char *about;   /* what the command does, printed before the options (ends with '\n') */
    const cli_opt *opts; /* the table, ended by a {0} row */
    int max_pos;         /* positional arguments accepted */
    const char *notes;   /* printed after the options, or NULL */
} cli_cmd;

/* The rows every command spells the same way (README "Option conventions"). CLI_OPT_CTX
 * adds llama.cpp's --ctx-size as a hidden alias; CLI_OPT_VERIFY is --verify and --no-verify
 * on one int field (a NULL help hides that spelling). */
#define CLI_OPT_MODEL(off)                                                                                        \
    {"model", 'm', CLI_PATH, "MODEL", 0, 0, off, "model file (GGUF, or llama2.c .bin); default: $SEQKV_MODEL,\n" \
                                                 "else the bundled model"}
#define CLI_OPT_THREADS(off) {"threads", 't', CLI_INT, "N", 1, 256, off, "worker threads, 1..256 (default 1)"}
#define CLI_OPT_FILE(off, arg, help) {"file", 'f', CLI_PATH, arg, 0, 0, off, help}
#define CLI_OPT_OUTPUT(off, arg, help) {"output", 'o', CLI_PATH, arg, 0, 0, off, help}
#define CLI_OPT_PROMPT(off, help) {"prompt", 'p', CLI_STR, "TEXT", 0, 0, off, help}
#define CLI_OPT_CTX(off, lo, help) {"ctx", 'c', CLI_INT, "N", lo, 1 << 24, off, help}, \
    {"ctx-size", 0, CLI_INT, "N", lo, 1 << 24, off, NULL} /* llama.cpp's spelling */
#define CLI_OPT_VERIFY(off, help_verify, help_no_verify) {"verify", 0, CLI_FLAG, NULL, 0, 0, off, help_verify}, \
    {"no-verify", 0, CLI_UNSET, NULL, 0, 0, off, help_no_verify}

/* --lossy-text (compress, store put): store a text that does not survive tokenization. */
#define CLI_OPT_LOSSY_TEXT(off) {"lossy-text", 0, CLI_FLAG, NULL, 0, 0, off, \
    "store a text even if its tokens do not give it back unchanged\n" \
    "(invalid UTF-8, a literal U+2581): refused otherwise"}

/* cli_parse's result when the command should go on; otherwise it returns the exit code. */
enum { CLI_CONTINUE = -1 };

/* Parses argv[1..argc) (argv[0] is the command's name) into the struct at opts and the
 * positional arguments into pos[0..cmd->max_pos) (*n_pos: how many; either may be NULL when
 * max_pos is 0). Returns CLI_CONTINUE, CLI_OK after printing --help to stdout, or CLI_USAGE
 * after an error message that says what to do. */
int cli_parse(const cli_cmd *cmd, int argc, char **argv, void *opts, const char **pos, int *n_pos);
/* Prints the command's help, generated from its table. */
void cli_help(const cli_cmd *cmd, FILE *f);
/* Prints "seqkv NAME: MESSAGE (see seqkv NAME --help)" to stderr; returns CLI_USAGE. */
int cli_usage(const cli_cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
