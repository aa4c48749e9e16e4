/* seqkv command-line tool: dispatch and shared helpers. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"generate", cmd_generate, "generate text from a prompt"},
    {"perplexity", cmd_perplexity, "perplexity and bits/token of a text under the model"},
    {"info", cmd_info, "model architecture and KV-cache size per position"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"kv-dump", cmd_kvdump, "run a text and write its KV cache as a raw dump"},
    {"kv-rd", cmd_kvrd, "rate-distortion of stored KV caches: per-vector vs predictive codecs"},
    {"kvtc-calib", cmd_kvtc_calib, "calibration of the transform KV codec (kvtc-<id>.cal)"},
    {"kv-quality", cmd_kvquality, "error and perplexity/KL cost of per-vector KV quantization schemes"},
    {"compress", cmd_compress, "store a session's KV cache as a .skv file"},
    {"restore", cmd_restore, "regenerate tokens and KV cache from a .skv file (--verify)"},
    {"inspect", cmd_inspect, "show a .skv file's header and segments"},
    {"store", cmd_store, "a persistent prefix-sharing store of sessions (init, put, get, match, ls, stats, rm, gc)"},
    {"serve", cmd_serve, "HTTP server (llama-server / OpenAI API) with the store as prompt cache"},
    {"bench", cmd_bench, "measure every KV representation of texts: bits, ratios, quality, restore speed"},
};

static void cli_log(void *user, int level, const char *msg);

static void usage(FILE *f)
{
    fprintf(f, "seqkv %s - store transformer KV caches as sequences\n\n"
               "usage: seqkv COMMAND [options]   (seqkv COMMAND --help for details)\n\ncommands:\n",
            skv_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nThe model defaults to $SEQKV_MODEL, else the bundled model (see README).\n");
}

int main(int argc, char **argv)
{
    skv_set_log(cli_log, NULL);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("seqkv %s\n", skv_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s' (run 'seqkv --help' for the list)", argv[1]);
    return CLI_USAGE;
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("seqkv: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = 1 << 16, n = 0;
    char *buf;
    if (!f) {
        cli_error("cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap) {
            if (ferror(f)) {
                cli_error("error reading '%s': %s", path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
        char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            cli_error("'%s' is too large to read into memory", path);
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (f != stdin) fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

const char *cli_default_model(void)
{
    static char path[4096];
    const char *env = getenv("SEQKV_MODEL");
    char exe[4096];
    ssize_t n;
    if (env && *env) return env;
    /* the bundled model: <exe>/../models/ (build tree), <exe>/../share/seqkv/ (installed), ./models/ */
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"/../models/" SEQKV_DEFAULT_MODEL, "/../share/seqkv/" SEQKV_DEFAULT_MODEL};
        for (size_t i = 0; i < 2; i++) {
            int len = snprintf(path, sizeof path, "%s%s", exe, rel[i]);
            if (len > 0 && (size_t)len < sizeof path && access(path, R_OK) == 0) return path;
        }
    }
    snprintf(path, sizeof path, "models/%s", SEQKV_DEFAULT_MODEL);
    return path;
}

skv_model *cli_load_model(const char *path)
{
    char err[512];
    skv_model *m = NULL;
    if (!path) path = cli_default_model();
    int rc = skv_model_load(path, NULL, &m, err, sizeof err);
    if (rc) {
        cli_error("cannot load model: %s", err);
        return NULL;
    }
    return m;
}

skv_model *cli_load_model_unrun(const char *path) { return cli_load_model_sweeps(path, 0); }

uint64_t cli_text_sweeps(const char *path, int ids, long ctx)
{
    struct stat st;
    if (!path || !strcmp(path, "-") || stat(path, &st) || !S_ISREG(st.st_mode)) return UINT64_MAX;
    uint64_t n = ids ? (uint64_t)st.st_size / 2 + 1 : (uint64_t)st.st_size + 2;
    uint64_t c = ctx > 0 ? (uint64_t)ctx : 0, chunk = c && c < 512 ? c : 512;
    return (n + chunk - 1) / chunk + (c > 512 ? (n + c - 1) / c : 0);
}

void cli_resident_note(FILE *rep, const skv_model *m)
{
    skv_model_info mi;
    if (!skv_model_get_info(m, &mi) && mi.resident_bytes)
        fprintf(rep, "weights: %.2f GB copied into memory at load (SEQKV_RESIDENT=0 reads them from the file's pages "
                     "instead)\n",
                (double)mi.resident_bytes / 1e9);
}

skv_model *cli_load_model_sweeps(const char *path, uint64_t sweeps)
{
    if (sweeps < CLI_RESIDENT_MIN_SWEEPS && !getenv("SEQKV_RESIDENT"))
        setenv("SEQKV_RESIDENT", "0", 1); /* an explicit choice of the user's stands */
    return cli_load_model(path);
}

int32_t *cli_tokenize(const skv_model *m, const char *text, size_t len, int add_special, size_t *n)
{
    size_t cap = len + 16, need = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    int rc;
    if (!ids) return NULL;
    rc = skv_model_tokenize(m, text, len, add_special, ids, cap, &need);
    if (rc == SKV_ERR_RANGE) {
        int32_t *bigger = realloc(ids, (need + 1) * sizeof *ids);
        if (!bigger) {
            free(ids);
            return NULL;
        }
        ids = bigger;
        rc = skv_model_tokenize(m, text, len, add_special, ids, need + 1, &need);
    }
    if (rc) {
        cli_error("tokenization failed: %s", skv_status_str(rc));
        free(ids);
        return NULL;
    }
    *n = need;
    return ids;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static cli_progress *progress_shown; /* the line on the terminal now, if any */

void cli_progress_start(cli_progress *p, const char *what)
{
    p->what = what;
    p->unit = "tokens";
    p->t0 = p->last = cli_now();
    p->enabled = isatty(2) && !cli_quiet;
    p->shown = 0;
}

/* ", ETA 1m05s" for s seconds left ("" when unknown). */
static void eta_text(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e7) snprintf(buf, cap, "%s", "");
    else if (s < 60) snprintf(buf, cap, ", ETA %.0fs", s);
    else snprintf(buf, cap, ", ETA %.0fm%02.0fs", floor(s / 60), fmod(s, 60));
}

void cli_progress_update(cli_progress *p, size_t done, size_t total)
{
    double t = cli_now();
    if (!p->enabled || (t - p->last < 0.2 && done < total)) return;
    p->last = t;
    double rate = (double)done / (t - p->t0 + 1e-9);
    char eta[32] = "";
    if (done < total && done > 0) eta_text(eta, sizeof eta, (double)(total - done) / rate);
    snprintf(p->line, sizeof p->line, "%s: %zu/%zu %s (%.1f%%), %.*f %s/s%s", p->what, done, total, p->unit,
             total ? 100.0 * (double)done / (double)total : 100.0, rate < 10 ? 2 : 0, rate,
             strcmp(p->unit, "tokens") ? p->unit : "tok", eta);
    fprintf(stderr, "\r%s\033[K", p->line);
    fflush(stderr);
    p->shown = 1;
    progress_shown = p;
}

void cli_progress_end(cli_progress *p)
{
    if (p->enabled && p->shown) fputs("\r\033[K", stderr);
    p->shown = 0;
    if (progress_shown == p) progress_shown = NULL;
}

void cli_progress_clear(void)
{
    if (progress_shown) fputs("\r\033[K", stderr);
}

void cli_progress_redraw(void)
{
    if (progress_shown) fprintf(stderr, "%s", progress_shown->line);
    fflush(stderr);
}

void cli_progress_cb(void *user, uint64_t done, uint64_t total) { cli_progress_update(user, (size_t)done, (size_t)total); }

char *cli_detokenize(const skv_model *m, const int32_t *tok, size_t n, int after_bos, size_t *len)
{
    int flags = after_bos ? SKV_DETOK_AFTER_BOS : 0;
    int rc = skv_model_detokenize(m, tok, n, flags, NULL, 0, len);
    char *text = rc == SKV_ERR_RANGE ? malloc(*len + 1) : NULL;
    if (text && (rc = skv_model_detokenize(m, tok, n, flags, text, *len + 1, len)) == SKV_OK) return text;
    cli_error("cannot turn %zu tokens into text: %s", n, text ? skv_status_str(rc) : "out of memory");
    free(text);
    return NULL;
}

int cli_write_tokens(FILE *f, const skv_model *m, const int32_t *tok, size_t n, int *after_bos)
{
    skv_model_info info;
    size_t len = 0;
    char *text = cli_detokenize(m, tok, n, *after_bos, &len);
    int ok = text && fwrite(text, 1, len, f) == len;
    free(text);
    skv_model_get_info(m, &info);
    if (n) *after_bos = tok[n - 1] == info.bos_id;
    return ok ? 0 : -1;
}

/* The library's log (skv_set_log): warnings and notes on stderr, as errors are. */
static void cli_log(void *user, int level, const char *msg)
{
    (void)user;
    fprintf(stderr, "seqkv: %s: %s\n", level == SKV_LOG_WARN ? "warning" : "note", msg);
}
