/* Output files of the seqkv CLI: written to a temporary file next to the destination and
 * renamed over it only when the command succeeds (cli.h, cli_out). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* Temporary files in progress, removed if a signal ends the process. */
#define MAX_LIVE 8
static const char *volatile live[MAX_LIVE];

static void on_signal(int sig)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i]) unlink(live[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void track(const char *tmp, int on)
{
    static int installed;
    if (!installed) {
        const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
        for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], on_signal);
        installed = 1;
    }
    for (int i = 0; i < MAX_LIVE; i++)
        if (on ? !live[i] : live[i] == tmp) {
            live[i] = on ? tmp : NULL;
            return;
        }
}

/* Creates prefix + "." + base + ".XXXXXX", open for writing, with the given mode (-1: the
 * mode a new file gets). */
static FILE *make_temp(char *tmp, size_t cap, const char *prefix, int prefix_len, const char *base, int mode)
{
    int n = snprintf(tmp, cap, "%.*s.%s.XXXXXX", prefix_len, prefix, base);
    mode_t mask = umask(0);
    umask(mask);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        tmp[0] = 0;
        return NULL;
    }
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 && fchmod(fd, mode >= 0 ? (mode_t)mode : 0666 & ~mask) == 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd), unlink(tmp);
        tmp[0] = 0;
        return NULL;
    }
    track(tmp, 1);
    return f;
}

/* A regular file (or none yet): a temporary file next to the one a link points to, with
 * the mode of the file it replaces. A read-only file stays protected. */
static FILE *open_regular(cli_out *o, const char *dest, const struct stat *st, int exists)
{
    if (exists && access(dest, W_OK)) return NULL;
    if (!(exists && realpath(dest, o->target))) {
        int n = snprintf(o->target, sizeof o->target, "%s", dest);
        if (n < 0 || (size_t)n >= sizeof o->target) {
            errno = ENAMETOOLONG;
            return NULL;
        }
    }
    const char *slash = strrchr(o->target, '/');
    int dir_len = slash ? (int)(slash - o->target) + 1 : 0;
    return make_temp(o->tmp, sizeof o->tmp, o->target, dir_len, o->target + dir_len,
                     exists ? (int)(st->st_mode & 07777) : -1);
}

int cli_out_open(cli_out *o, const char *dest)
{
    struct stat st;
    memset(o, 0, sizeof *o);
    if (!dest) return 0;
    o->dest = dest;
    if (!strcmp(dest, "-")) {
        o->f = stdout;
        return 0;
    }
    int exists = stat(dest, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) errno = EISDIR;
    else if (exists && !S_ISREG(st.st_mode)) o->f = fopen(dest, "wb"); /* a device or FIFO: written in place */
    else o->f = open_regular(o, dest, &st, exists);
    if (o->f) return 0;
    cli_error("cannot write '%s': %s", dest, strerror(errno));
    o->dest = NULL;
    return -1;
}

const char *cli_out_path(cli_out *o)
{
    if (!o->dest) return NULL;
    if (o->tmp[0]) { /* the temporary file itself; the writer opens it by name */
        if (o->f) fclose(o->f);
        o->f = NULL;
        return o->tmp;
    }
    const char *dir = getenv("TMPDIR"); /* stdout or a device: a scratch file copied there on commit */
    char prefix[4096];
    int n = snprintf(prefix, sizeof prefix, "%s/", dir && *dir ? dir : "/tmp");
    FILE *f = n > 0 && (size_t)n < sizeof prefix ? make_temp(o->tmp, sizeof o->tmp, prefix, n, "seqkv-out", -1) : NULL;
    if (!f) {
        cli_error("cannot create a scratch file for '%s': %s", o->dest, strerror(errno));
        return NULL;
    }
    fclose(f);
    o->scratch = 1;
    return o->tmp;
}

/* Appends the file at path to f. */
static int copy_into(const char *path, FILE *f)
{
    FILE *in = fopen(path, "rb");
    char buf[1 << 16];
    size_t n;
    int ok = in != NULL;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, f) == n;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    return ok ? 0 : -1;
}

int cli_out_commit(cli_out *o)
{
    int ok = 1, err = 0;
    if (!o->dest) return 0;
    if (o->scratch) ok = copy_into(o->tmp, o->f) == 0;
    if (o->f) {
        ok = fflush(o->f) == 0 && ok;
        if (o->tmp[0] && !o->scratch) ok = fsync(fileno(o->f)) == 0 && ok; /* the data before the name */
        if (o->f != stdout) ok = fclose(o->f) == 0 && ok;
        o->f = NULL;
    }
    if (ok && o->tmp[0] && !o->scratch) ok = rename(o->tmp, o->target) == 0;
    err = errno;
    if (!ok) cli_error("cannot write '%s': %s", o->dest, strerror(err));
    if (o->tmp[0] && (!ok || o->scratch)) unlink(o->tmp);
    if (o->tmp[0]) track(o->tmp, 0);
    o->dest = NULL;
    return ok ? 0 : -1;
}

void cli_out_discard(cli_out *o)
{
    if (!o->dest) return;
    if (o->f && o->f != stdout) fclose(o->f);
    if (o->tmp[0]) unlink(o->tmp), track(o->tmp, 0);
    o->f = NULL;
    o->dest = NULL;
}

int cli_write_file(const char *dest, const void *data, size_t n)
{
    cli_out o;
    if (cli_out_open(&o, dest)) return -1;
    if (fwrite(data, 1, n, o.f) != n) {
        cli_error("cannot write '%s': %s", dest, strerror(errno));
        cli_out_discard(&o);
        return -1;
    }
    return cli_out_commit(&o);
}

FILE *cli_report_stream(const char *out1, const char *out2)
{
    return (out1 && !strcmp(out1, "-")) || (out2 && !strcmp(out2, "-")) ? stderr : stdout;
}

int cli_stdout_clash(const cli_cmd *cmd, const char *what1, const char *out1, const char *what2, const char *out2)
{
    if (!out1 || !out2 || strcmp(out1, "-") || strcmp(out2, "-")) return 0;
    cli_usage(cmd, "%s and %s cannot both go to stdout ('-'): name a file for one of them", what1, what2);
    return 1;
}
