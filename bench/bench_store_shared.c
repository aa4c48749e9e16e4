/* The session store shared by client processes: LMDB directory vs Redis (docs/store.md).
 * Usage: bench_store_shared MODEL TEXT STORE [clients=1] [sessions_per_client=12] [budget=64MiB]
 *   STORE: a directory (LMDB) or redis://HOST:PORT/PREFIX | unix:///sock?prefix=P
 *
 * Each client process opens its own handle and runs three phases over its own sessions
 * (a shared opening, one of 3 of 64 tokens, + 32..63 tokens of its own; names per client):
 * put (skv_store_put: runs the model on the new tokens), match (skv_store_match of each
 * session's tokens), get (skv_store_get with verify). The clients start each phase
 * together (a pipe barrier). Per operation: wall latency; per phase: operations per
 * second of wall time over all clients, and the clients' CPU time (user+sys). One model
 * thread per client. Prints a Markdown row per phase, and the store's bytes per session
 * position next to f16 KV and TurboQuant-3.5 of the same sessions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "seqkv.h"

enum { PH_PUT, PH_MATCH, PH_GET, N_PH, MAX_OPS = 256 };
static const char *const ph_name[N_PH] = {"put", "match", "get"};

typedef struct {
    double lat[N_PH][MAX_OPS];
    int n[N_PH], fails[N_PH];
    double cpu[N_PH]; /* seconds of this client's CPU */
} client_res;

static int32_t *g_text;
static size_t g_n_text;

static double cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           (double)u.ru_stime.tv_usec * 1e-6;
}

static size_t make_sess(int32_t *tok, char *name, int c, int k)
{
    size_t open = 64, own = 32 + (size_t)((k * 7 + c * 3) % 32);
    snprintf(name, 32, "c%d-%d", c, k);
    memcpy(tok, g_text + 64 * (size_t)(k % 3), open * sizeof *tok);
    memcpy(tok + open, g_text + 200 + (37 * (size_t)(c * 64 + k)) % (g_n_text - 300), own * sizeof *tok);
    return open + own;
}

static int one_op(skv_store *st, skv_ctx *ctx, int ph, const char *name, const int32_t *tok, size_t n)
{
    int32_t buf[256];
    size_t got;
    skv_store_match_result mr;
    if (ph == PH_PUT) return skv_store_put(st, name, tok, n, NULL);
    if (ph == PH_MATCH) return skv_store_match(st, tok, n, &mr) || mr.n_matched != n;
    return skv_store_get(st, name, ctx, SKV_STORE_VERIFY, buf, 256, &got, NULL);
}

static int64_t g_budget = 64 << 20;

static void client(const char *model, const char *where, int c, int n, int go_fd, int out_fd, int res_fd)
{
    client_res *r = calloc(1, sizeof *r);
    skv_model *m = NULL;
    skv_store *st = NULL;
    skv_ctx *ctx = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_store_params sp = skv_store_default_params();
    char err[512], b;
    cp.n_ctx = 256;
    sp.budget = g_budget;
    if (skv_model_load(model, NULL, &m, err, sizeof err) || skv_ctx_create(m, &cp, &ctx) ||
        skv_store_open(where, m, SKV_STORE_CREATE, &sp, &st, err, sizeof err)) {
        fprintf(stderr, "client %d: %s\n", c, err);
        _exit(1);
    }
    for (int ph = 0; ph < N_PH; ph++) {
        if (read(go_fd, &b, 1) != 1) _exit(1);
        double c0 = cpu_now();
        for (int k = 0; k < n && k < MAX_OPS; k++) {
            int32_t tok[256];
            char name[32];
            size_t len = make_sess(tok, name, c, k);
            double t0 = skv_now();
            int rc = one_op(st, ctx, ph, name, tok, len);
            r->lat[ph][r->n[ph]++] = skv_now() - t0;
            if (rc) fprintf(stderr, "client %d %s %s: %s\n", c, ph_name[ph], name, skv_store_last_error(st));
            r->fails[ph] += rc != 0;
        }
        r->cpu[ph] = cpu_now() - c0;
        if (write(out_fd, &b, 1) != 1) _exit(1);
    }
    if (write(res_fd, r, sizeof *r) != (ssize_t)sizeof *r) _exit(1);
    skv_store_close(st);
    skv_ctx_free(ctx);
    skv_model_free(m);
    _exit(0);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int load_text(const char *model, const char *path)
{
    skv_model *m;
    char err[256];
    FILE *f = fopen(path, "rb");
    char *t = malloc(200001);
    size_t len = f ? fread(t, 1, 200000, f) : 0;
    if (f) fclose(f);
    t[len] = 0;
    g_text = malloc(200000 * sizeof *g_text);
    int rc = skv_model_load(model, NULL, &m, err, sizeof err);
    if (!rc) rc = skv_model_tokenize(m, t, len, 1, g_text, 200000, &g_n_text);
    free(t);
    if (!rc && g_n_text < 2000) rc = SKV_ERR_RANGE;
    if (!rc) skv_model_free(m);
    return rc;
}

static void report(const char *where, int nc, client_res *res, const double *wall)
{
    const char *kind = strstr(where, "://") ? "Redis" : "LMDB";
    for (int ph = 0; ph < N_PH; ph++) {
        double all[4 * MAX_OPS], cpu = 0;
        int n = 0, fails = 0;
        for (int c = 0; c < nc; c++) {
            for (int i = 0; i < res[c].n[ph]; i++) all[n++] = res[c].lat[ph][i];
            cpu += res[c].cpu[ph];
            fails += res[c].fails[ph];
        }
        qsort(all, (size_t)n, sizeof *all, cmp_d);
        printf("| %s | %d | %s | %d | %.1f | %.2f | %.2f | %.2f | %.3f | %d |\n", kind, nc, ph_name[ph], n,
               n / wall[ph], all[n / 2] * 1e3, all[(n * 95) / 100] * 1e3, all[n - 1] * 1e3, cpu, fails);
    }
}

static void footprint(const char *model, const char *where)
{
    skv_model *m;
    skv_store *st;
    skv_store_stats s;
    char err[256];
    if (skv_model_load(model, NULL, &m, err, sizeof err)) return;
    if (!skv_store_open(where, m, SKV_STORE_READONLY, NULL, &st, err, sizeof err) && !skv_store_get_stats(st, &s)) {
        double pos = (double)s.session_tokens;
        printf("\n%s: %llu sessions, %llu session positions, %llu unique; store %llu bytes = %.0f B/position "
               "(materialised KV %llu bytes); f16 KV %.0f B/position, TQ-3.5 %.0f B/position; "
               "token floor %.2f bits/position\n",
               strstr(where, "://") ? "Redis" : "LMDB", (unsigned long long)s.n_sessions,
               (unsigned long long)s.session_tokens, (unsigned long long)s.unique_positions,
               (unsigned long long)s.disk_bytes, (double)s.disk_bytes / pos, (unsigned long long)s.mat_bytes,
               s.f16_bytes / pos, s.tq35_bytes / pos, s.token_floor_bits / pos);
        skv_store_close(st);
    }
    skv_model_free(m);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_store_shared MODEL TEXT STORE [clients=1] [sessions_per_client=12] [budget]\n");
        return 2;
    }
    int nc = argc > 4 ? atoi(argv[4]) : 1, n = argc > 5 ? atoi(argv[5]) : 12;
    if (argc > 6) g_budget = atoll(argv[6]);
    if (nc < 1 || nc > 4 || n < 1 || n > 64 || load_text(argv[1], argv[2])) {
        fprintf(stderr, "bench_store_shared: bad arguments or text\n");
        return 2;
    }
    int go[2], done[2], rp[4][2];
    if (pipe(go) || pipe(done)) return 1;
    for (int c = 0; c < nc; c++) {
        if (pipe(rp[c])) return 1;
        if (fork() == 0) client(argv[1], argv[3], c, n, go[0], done[1], rp[c][1]);
    }
    client_res *res = calloc((size_t)nc, sizeof *res);
    double wall[N_PH];
    char b = 'g';
    for (int ph = 0; ph < N_PH; ph++) {
        double t0 = skv_now();
        for (int c = 0; c < nc; c++)
            if (write(go[1], &b, 1) != 1) return 1;
        for (int c = 0; c < nc; c++)
            if (read(done[0], &b, 1) != 1) return 1;
        wall[ph] = skv_now() - t0;
    }
    for (int c = 0; c < nc; c++) /* each client's results on its own pipe */
        for (size_t got = 0; got < sizeof *res;) {
            ssize_t k = read(rp[c][0], (char *)&res[c] + got, sizeof *res - got);
            if (k <= 0) return 1;
            got += (size_t)k;
        }
    while (wait(NULL) > 0) {}
    report(argv[3], nc, res, wall);
    footprint(argv[1], argv[3]);
    return 0;
}
