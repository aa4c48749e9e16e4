/* Crash safety of the session store (docs/reliability.md "Crash safety"); `make crashtest`.
 *
 *   crashtest [KILLS [MODEL]]      (default 1000 kills, models/kjv-4m.gguf)
 *
 * Rounds of three worker processes on one store, each with its own handle:
 *   putter  puts sessions (and removes every fourth one's elder), reporting each commit
 *           on a pipe after the call returned ("+name"; "-name" before a remove);
 *   getter  restores random listed sessions verified (exits 7 on a digest mismatch);
 *   gcer    switches the budget between small and large and runs gc (demote / fill).
 * After a random delay (within a few puts' time) all three are SIGKILLed (3 kills). Then
 * the parent opens the store and checks: every session reported committed (and not
 * being removed) is listed ("lost" otherwise), every listed session restores verified
 * with the tokens its name stands for ("corrupted" otherwise), and gc passes. Every 25
 * rounds it starts a fresh store, so a check covers a bounded number of sessions.
 * Prints the figures; exits 1 if anything was lost or corrupted. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqkv.h"

double skv_now(void); /* src/core/util.h */

#define MAX_NAMES 4096
#define ROUNDS_PER_STORE 25

static skv_model *g_m;
static int32_t g_text[20000];
static size_t g_n_text;
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static uint32_t rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

/* The tokens of session "c<w>_<k>": 8..40 tokens sharing openings with the others. */
static size_t session_tokens(int w, int k, int32_t *out)
{
    uint64_t h = (uint64_t)w * 1000003u + (uint64_t)k * 7919u;
    size_t shared = 4 + h % 12, n = 8 + (h / 13) % 33;
    if (n < shared + 2) n = shared + 2;
    memcpy(out, g_text, shared * sizeof *out);
    memcpy(out + shared, g_text + 50 + h % 3000, (n - shared) * sizeof *out);
    return n;
}

static skv_store *open_store(const char *dir)
{
    skv_store *st;
    char err[512];
    return skv_store_open(dir, g_m, 0, NULL, &st, err, sizeof err) ? NULL : st;
}

static void say(int fd, char c, const char *name)
{
    char line[48];
    int n = snprintf(line, sizeof line, "%c%s\n", c, name);
    if (write(fd, line, (size_t)n) != n) _exit(6);
}

static void putter(const char *dir, int w, int fd)
{
    skv_store *st = open_store(dir);
    if (!st) _exit(3);
    for (int k = 0;; k++) {
        int32_t tok[64];
        char name[32], old[32];
        size_t n = session_tokens(w, k, tok);
        snprintf(name, sizeof name, "c%d_%d", w, k);
        if (skv_store_put(st, name, tok, n, NULL)) _exit(4);
        say(fd, '+', name);
        if (k % 4 == 3) {
            snprintf(old, sizeof old, "c%d_%d", w, k - 2);
            say(fd, '-', old); /* announced before: a remove killed before its commit leaves it */
            if (skv_store_remove(st, old)) _exit(5);
        }
    }
}

typedef struct {
    char (*names)[32];
    int n;
} name_set;

static int collect(void *user, const skv_store_session_info *si)
{
    name_set *s = user;
    if (s->n < MAX_NAMES) snprintf(s->names[s->n++], 32, "%s", si->name);
    return 0;
}

static int find(const name_set *s, const char *nm)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], nm)) return i;
    return -1;
}

/* Restores name verified, with the tokens it stands for: 0, 1 = gone, or a status. */
static int check_session(skv_store *st, skv_ctx *c, const char *name)
{
    int32_t want[64], got[64];
    int w, k;
    size_t n = 0;
    skv_store_get_report r;
    if (sscanf(name, "c%d_%d", &w, &k) != 2) return SKV_ERR_FORMAT;
    size_t wn = session_tokens(w, k, want);
    int rc = skv_store_get(st, name, c, SKV_STORE_VERIFY, got, 64, &n, &r);
    if (rc == SKV_ERR_INVALID_ARG) return 1; /* removed meanwhile */
    if (!rc && (n != wn || memcmp(got, want, n * sizeof *got) || !r.verified)) rc = SKV_ERR_MISMATCH;
    return rc;
}

static skv_ctx *new_ctx(void)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 64;
    return skv_ctx_create(g_m, &p, &c) ? NULL : c;
}

static void getter(const char *dir)
{
    skv_store *st = open_store(dir);
    skv_ctx *c = new_ctx();
    name_set s = {calloc(MAX_NAMES, 32), 0};
    if (!st || !c || !s.names) _exit(3);
    for (;;) {
        s.n = 0;
        if (skv_store_list(st, collect, &s)) _exit(4);
        for (int i = 0; i < 8 && s.n; i++)
            if (check_session(st, c, s.names[rnd((uint32_t)s.n)]) == SKV_ERR_MISMATCH) _exit(7);
        if (!s.n) usleep(1000);
    }
}

static void gcer(const char *dir)
{
    skv_store *st = open_store(dir);
    skv_store_gc_report g;
    if (!st) _exit(3);
    for (int i = 0;; i++) {
        if (skv_store_set_budget(st, i % 2 ? 64u << 20 : 40u << 10) || skv_store_gc(st, &g)) _exit(4);
        usleep(2000);
    }
}

typedef struct {
    long kills, rounds, committed, verified, lost, corrupted, worker_errors;
} figures;

static void read_reports(int fd, name_set *committed)
{
    static char buf[1 << 16];
    ssize_t got, len = 0;
    while ((got = read(fd, buf + len, sizeof buf - 1 - (size_t)len)) > 0) len += got;
    buf[len] = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        int i = find(committed, line + 1);
        if (line[0] == '+' && i < 0 && committed->n < MAX_NAMES) snprintf(committed->names[committed->n++], 32, "%s", line + 1);
        if (line[0] == '-' && i >= 0) memcpy(committed->names[i], committed->names[--committed->n], 32);
    }
}

static pid_t spawn(int role, const char *dir, int w, int fd)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (role == 0) putter(dir, w, fd);
    if (role == 1) getter(dir);
    gcer(dir);
    _exit(0);
}

/* One round: three workers, a random delay, three SIGKILLs. */
static void round_run(const char *dir, int w, long window_ms, name_set *committed, figures *f)
{
    int fds[2];
    pid_t pid[3];
    if (pipe(fds)) exit(2);
    for (int r = 0; r < 3; r++) pid[r] = spawn(r, dir, w, fds[1]);
    close(fds[1]);
    long ms = 1 + (long)rnd((uint32_t)window_ms);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    for (int r = 0; r < 3; r++) {
        int status;
        kill(pid[r], SIGKILL);
        waitpid(pid[r], &status, 0);
        if (WIFSIGNALED(status)) f->kills++;
        else {
            fprintf(stderr, "round %d: worker %d exited with %d\n", w, r, WEXITSTATUS(status));
            f->worker_errors++;
            f->corrupted += WEXITSTATUS(status) == 7;
        }
    }
    read_reports(fds[0], committed);
    close(fds[0]);
    f->rounds++;
}

/* After the kills: nothing committed lost, everything listed whole, gc passes. */
static void verify(const char *dir, const name_set *committed, figures *f)
{
    skv_store *st = open_store(dir);
    skv_ctx *c = new_ctx();
    name_set listed = {calloc(MAX_NAMES, 32), 0};
    skv_store_gc_report g;
    if (!st || !c || !listed.names || skv_store_list(st, collect, &listed)) {
        fprintf(stderr, "cannot open or list the store after a kill\n");
        f->corrupted++;
    } else {
        for (int i = 0; i < committed->n; i++)
            if (find(&listed, committed->names[i]) < 0) {
                fprintf(stderr, "lost: %s\n", committed->names[i]);
                f->lost++;
            }
        for (int i = 0; i < listed.n; i++) {
            int rc = check_session(st, c, listed.names[i]);
            if (rc) fprintf(stderr, "corrupted: %s (%d %s)\n", listed.names[i], rc, skv_store_last_error(st));
            f->corrupted += rc != 0;
            f->verified += rc == 0;
        }
        if (skv_store_gc(st, &g)) {
            fprintf(stderr, "gc after the kills: %s\n", skv_store_last_error(st));
            f->corrupted++;
        }
    }
    skv_ctx_free(c);
    skv_store_close(st);
    free(listed.names);
}

static int load(const char *model)
{
    char err[512];
    static char text[80001];
    FILE *fp = fopen("tests/data/model_ref/heldout.txt", "rb");
    size_t len = fp ? fread(text, 1, 80000, fp) : 0;
    if (fp) fclose(fp);
    if (skv_model_load(model, NULL, &g_m, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    return skv_tokenize(g_m, text, len, 1, g_text, 20000, &g_n_text) || g_n_text < 3200;
}

static int new_store(const char *dir)
{
    char cmd[400], err[512];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) return 1;
    p.budget = 96 << 10;
    if (skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    skv_store_close(st);
    return 0;
}

/* A few puts' time: the kill moments are drawn from it. */
static long put_window_ms(const char *dir)
{
    int32_t tok[64];
    skv_store *st = open_store(dir);
    double t0 = skv_now();
    size_t n = session_tokens(99999, 0, tok);
    if (!st || skv_store_put(st, "warm", tok, n, NULL) || skv_store_remove(st, "warm")) return 200;
    skv_store_close(st);
    return (long)((skv_now() - t0) * 1000 * 4) + 10;
}

int main(int argc, char **argv)
{
    long want = argc > 1 ? atol(argv[1]) : 1000;
    char dir[256];
    figures f = {0};
    name_set committed = {calloc(MAX_NAMES, 32), 0};
    if (!committed.names || load(argc > 2 ? argv[2] : "models/kjv-4m.gguf")) return 2;
    snprintf(dir, sizeof dir, "/tmp/seqkv_crashtest_%d", (int)getpid());
    double t0 = skv_now();
    long window = 0;
    for (int w = 0; f.kills < want; w++) {
        if (w % ROUNDS_PER_STORE == 0) {
            if (new_store(dir)) return 2;
            window = put_window_ms(dir);
            committed.n = 0;
        }
        round_run(dir, w, window, &committed, &f);
        verify(dir, &committed, &f);
        f.committed = f.committed > committed.n ? f.committed : committed.n;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
    printf("crashtest: %ld SIGKILLs in %ld rounds (3 workers: put+rm, verified get, gc), %.0f s, kill window %ld ms\n"
           "  sessions restored verified after kills: %ld (largest committed set %ld)\n"
           "  lost: %ld  corrupted: %ld  worker errors: %ld\n",
           f.kills, f.rounds, skv_now() - t0, window, f.verified, f.committed, f.lost, f.corrupted, f.worker_errors);
    skv_model_free(g_m);
    free(committed.names);
    return f.lost || f.corrupted || f.worker_errors ? 1 : 0;
}
