/* seqkv bench: small utilities (paths, directories, notes, progress, rows). */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_internal.h"

void bench_note(bench_opts *o, const char *fmt, ...)
{
    if (o->n_notes == BENCH_MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->notes[o->n_notes++], sizeof o->notes[0], fmt, ap);
    va_end(ap);
}

void bench_progress(const char *fmt, ...)
{
    va_list ap;
    cli_progress_clear(); /* the message goes above the progress line, if one is shown */
    fputs("bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    cli_progress_redraw();
}

/* The repository root as seen from the binary (<root>/build/seqkv), or "." */
const char *bench_repo_root(void)
{
    static char root[4096];
    ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
    if (n <= 0) return ".";
    root[n] = 0;
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(root, '/');
        if (!slash) return ".";
        *slash = 0;
    }
    return root;
}

/* First readable candidate among "<root>/rel" and "rel"; NULL if none. */
const char *bench_find_path(const char *rel, char *buf, size_t cap)
{
    int len = snprintf(buf, cap, "%s/%s", bench_repo_root(), rel);
    if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return buf;
    len = snprintf(buf, cap, "%s", rel);
    if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return buf;
    return NULL;
}

int bench_mkdir_p(const char *path)
{
    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s", path);
    if (len <= 0 || (size_t)len >= sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0777) && errno != EEXIST ? -1 : 0;
}

FILE *bench_open_out(const char *dir, const char *name)
{
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = len > 0 && (size_t)len < sizeof path ? fopen(path, "w") : NULL;
    if (!f) cli_error("cannot create '%s/%s': %s", dir, name, strerror(errno));
    return f;
}

void bench_base_label(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    snprintf(out, cap, "%s", b ? b + 1 : path);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

/* "2026-11-30 01:03 UTC on 2 CPUs, load average before the run: ..." */
void bench_machine_line(char *buf, size_t cap)
{
    char load[64] = "unknown";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        double a = 0, b = 0, c = 0;
        if (fscanf(lf, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(load, sizeof load, "%.2f %.2f %.2f", a, b, c);
        fclose(lf);
    }
    time_t t = time(NULL);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    snprintf(buf, cap, "%s on %ld CPUs, load average before the run: %s", when, sysconf(_SC_NPROCESSORS_ONLN), load);
}

int bench_temp_dir(const char *what, char *buf, size_t cap)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    int len = snprintf(buf, cap, "%s/seqkv-bench-%s-XXXXXX", base, what);
    if (len <= 0 || (size_t)len >= cap || !mkdtemp(buf)) {
        cli_error("cannot create a temporary directory in '%s': %s", base, strerror(errno));
        return -1;
    }
    return 0;
}

void bench_remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4096];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove(p)) bench_remove_tree(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

const bench_row *bench_find_row(const bench_case *bc, const char *repr)
{
    for (int i = 0; i < bc->n_rows; i++)
        if (!strcmp(bc->rows[i].repr, repr)) return &bc->rows[i];
    return NULL;
}

bench_row *bench_new_row(bench_case *bc, const char *repr, const char *family)
{
    bench_row *w = &bc->rows[bc->n_rows++];
    memset(w, 0, sizeof *w);
    snprintf(w->repr, sizeof w->repr, "%s", repr);
    snprintf(w->family, sizeof w->family, "%s", family);
    return w;
}

void bench_fmt_ratio(char *buf, size_t cap, double x)
{
    if (x >= 100) snprintf(buf, cap, "%.0fx", x);
    else if (x >= 1) snprintf(buf, cap, "%.2fx", x);
    else snprintf(buf, cap, "%.4fx", x);
}
