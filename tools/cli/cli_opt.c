/* seqkv's table-driven option parser and --help generator (tools/cli/cli_opt.h). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opt.h"

#define HELP_COL 26 /* column where the options' help text starts */

static int takes_value(const cli_opt *o) { return o->kind != CLI_FLAG && o->kind != CLI_UNSET; }

/* "-t/--threads", "--codec" or "-x": how an option is named in messages. */
static const char *spell(const cli_opt *o, char *buf, size_t cap)
{
    if (o->letter && o->name) snprintf(buf, cap, "-%c/--%s", o->letter, o->name);
    else if (o->name) snprintf(buf, cap, "--%s", o->name);
    else snprintf(buf, cap, "-%c", o->letter);
    return buf;
}

int cli_usage(const cli_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "seqkv %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see seqkv %s --help)\n", cmd->name);
    return CLI_USAGE;
}

/* The row named by argument a ("-t", "--threads", "--threads=4"; llama.cpp's single-dash
 * words such as "-np" or "-ngl" name the row of that long name); *val: the text after '='. */
static const cli_opt *find_opt(const cli_opt *t, const char *a, const char **val)
{
    *val = NULL;
    for (; t->kind != CLI_END; t++) {
        if (a[1] != '-') {
            if (t->letter && a[1] == t->letter && !a[2]) return t;
            if (a[2] && t->name && !strcmp(a + 1, t->name)) return t;
            continue;
        }
        size_t n = t->name ? strlen(t->name) : 0;
        if (n && !strncmp(a + 2, t->name, n) && (a[2 + n] == 0 || a[2 + n] == '=')) {
            if (a[2 + n] == '=') *val = a + 3 + n;
            return t;
        }
    }
    return NULL;
}

/* Levenshtein distance of a[0..na) and b, capped at 9 (names are short). */
static int distance(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    int row[64];
    if (na >= 63 || nb >= 63) return 9;
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb] < 9 ? row[nb] : 9;
}

static int unknown_option(const cli_cmd *cmd, const char *a)
{
    const char *s = a + strspn(a, "-"), *best = NULL;
    size_t n = strcspn(s, "=");
    int bd = 3;
    for (const cli_opt *t = cmd->opts; t->kind != CLI_END; t++)
        if (t->name && t->help && distance(s, n, t->name) < bd) bd = distance(s, n, t->name), best = t->name;
    if (best) return cli_usage(cmd, "unknown option '%s'; did you mean --%s?", a, best);
    return cli_usage(cmd, "unknown option '%s'", a);
}

/* A decimal integer (CLI_INT) or a number (CLI_FLOAT) in [lo, hi]. */
static int parse_number(const char *s, int kind, double lo, double hi, long *iv, double *fv)
{
    char *end;
    errno = 0;
    if (kind == CLI_INT) {
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || (double)v < lo || (double)v > hi) return -1;
        *iv = v;
        return 0;
    }
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *fv = v;
    return 0;
}

/* lo/hi as written in messages (LONG_MAX does not survive the round trip through double). */
static long long as_ll(double x) { return x >= 9.2e18 ? LLONG_MAX : x <= -9.2e18 ? LLONG_MIN : (long long)x; }

/* "64M" -> 67108864: a number with an optional K, M or G suffix (powers of 1024). */
static int parse_bytes(const char *s, double lo, double hi, long long *out)
{
    static const char units[] = "KMG";
    char *end;
    errno = 0;
    double v = strtod(s, &end), mul = 1;
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u) mul = ldexp(1.0, 10 * (int)(u - units + 1)), end++;
    if (end == s || errno || *end || !(v * mul >= lo && v * mul <= hi)) return -1;
    *out = (long long)(v * mul);
    return 0;
}

/* The index of word v in the '|'-separated list words, or -1. */
static int choice_index(const char *words, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = words; *p; i++) {
        size_t len = strcspn(p, "|");
        if (len == n && !strncmp(p, v, n)) return i;
        p += len + (p[len] == '|');
    }
    return -1;
}

/* Stores value v (NULL for flags) of option o, spelt a on the command line. */
static int set_value(const cli_cmd *cmd, const cli_opt *o, const char *a, const char *v, void *opts)
{
    char *dst = (char *)opts + o->off, name[64];
    cli_list *l = (cli_list *)(void *)dst;
    spell(o, name, sizeof name);
    switch (o->kind) {
    case CLI_FLAG: case CLI_UNSET: *(int *)(void *)dst = o->kind == CLI_FLAG; return 0;
    case CLI_INT: case CLI_FLOAT:
        if (!parse_number(v, o->kind, o->lo, o->hi, (long *)(void *)dst, (double *)(void *)dst)) return 0;
        if (o->kind == CLI_INT)
            return cli_usage(cmd, "%s wants an integer from %lld to %lld, not '%s'", name, as_ll(o->lo), as_ll(o->hi), v);
        return cli_usage(cmd, "%s wants a number from %g to %g, not '%s'", name, o->lo, o->hi, v);
    case CLI_BYTES:
        if (!parse_bytes(v, o->lo, o->hi, (long long *)(void *)dst)) return 0;
        return cli_usage(cmd, "%s wants a byte count such as 4096, 512K or 64M, not '%s'", name, v);
    case CLI_CHOICE:
        if ((*(int *)(void *)dst = choice_index(o->arg, v)) >= 0) return 0;
        return cli_usage(cmd, "%s wants one of %s, not '%s'", name, o->arg, v);
    case CLI_LIST:
        if (l->n >= (int)o->hi || l->n >= CLI_LIST_MAX) return cli_usage(cmd, "at most %d %s options", l->n, name);
        l->v[l->n++] = v;
        return 0;
    default: /* CLI_STR, CLI_PATH */
        if (!*v && o->kind == CLI_PATH) return cli_usage(cmd, "%s needs a file name (%s), not ''", a, o->arg);
        *(const char **)(void *)dst = v;
        return 0;
    }
}

int cli_quiet;

int cli_parse(const cli_cmd *cmd, int argc, char **argv, void *opts, const char **pos, int *n_pos)
{
    int np = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (only_pos || a[0] != '-' || !a[1]) {
            if (np == cmd->max_pos) return cli_usage(cmd, "unexpected argument '%s'", a);
            pos[np++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_help(cmd, stdout);
            return CLI_OK;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            cli_quiet = 1;
            continue;
        }
        const cli_opt *o = find_opt(cmd->opts, a, &v);
        if (!o) return unknown_option(cmd, a);
        if (!takes_value(o) && v) return cli_usage(cmd, "%.*s takes no value", (int)(v - a - 1), a);
        if (takes_value(o) && !v && i + 1 == argc) return cli_usage(cmd, "%s needs a value (%s)", a, o->arg);
        if (takes_value(o) && !v) v = argv[++i];
        if (set_value(cmd, o, a, v, opts)) return CLI_USAGE;
    }
    if (n_pos) *n_pos = np;
    return CLI_CONTINUE;
}

/* text with every line after the first indented by `indent` spaces. */
static void put_indented(FILE *f, const char *text, int indent)
{
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(f, "%.*s\n", (int)len, p);
        p += len + (p[len] == '\n');
        if (*p) fprintf(f, "%*s", indent, "");
    }
}

static void help_row(FILE *f, const cli_opt *o)
{
    char left[128];
    int n = snprintf(left, sizeof left, "  %c%c%s%s%s%s%s", o->letter ? '-' : ' ', o->letter ? o->letter : ' ',
                     o->letter && o->name ? ", " : "  ", o->name ? "--" : "", o->name ? o->name : "",
                     o->arg ? " " : "", o->arg ? o->arg : "");
    if (n >= HELP_COL - 1) fprintf(f, "%s\n%*s", left, HELP_COL, "");
    else fprintf(f, "%-*s", HELP_COL, left);
    put_indented(f, o->help, HELP_COL);
}

void cli_help(const cli_cmd *cmd, FILE *f)
{
    int indent = (int)strlen("usage: seqkv  ") + (int)strlen(cmd->name);
    fprintf(f, "usage: seqkv %s ", cmd->name);
    put_indented(f, cmd->usage, indent);
    fprintf(f, "\n%s\noptions:\n", cmd->about);
    for (const cli_opt *o = cmd->opts; o->kind != CLI_END; o++)
        if (o->help) help_row(f, o);
    fprintf(f, "  -q, --quiet             no progress line on stderr (shown only on a terminal)\n");
    fprintf(f, "  -h, --help              print this help and exit\n");
    if (cmd->notes) fprintf(f, "\n%s", cmd->notes);
}

/* ---- single values, for parsers that are not table-driven (yet) -------------------- */

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    if (!s) cli_error("%s needs a value", opt);
    else if (parse_number(s, CLI_INT, (double)lo, (double)hi, out, NULL)) cli_error("%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo, hi);
    else return 0;
    return -1;
}

int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out)
{
    if (!s) cli_error("%s needs a value", opt);
    else if (parse_number(s, CLI_FLOAT, lo, hi, NULL, out)) cli_error("%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    else return 0;
    return -1;
}
