/* Session store throughput (docs/store.md).
 * Usage: bench_store MODEL TEXT [n_sessions=24] [n_lookup_sessions=100000]
 *
 * Part 1 (with the model): n_sessions sessions of TEXT's tokens (a shared 200-token
 * opening + 80..160 tokens of their own, a third of them forking another session's first
 * 40 own tokens), stored with skv_store_put into a fresh store (budget 64 MiB: every
 * node materialised), then each restored with skv_store_get + verify, then the budget is
 * set to 0 (gc demotes everything) and each restored again (all recomputed). Wall time of
 * the calling thread, 1 model thread; every put commits (fsync) on its own.
 *
 * Part 2 (no model): n_lookup_sessions sessions put through the model-free internal path
 * skv_store__put_tokens (trie + session records in LMDB, no KV), in transactions of 10,000:
 * random token sequences of 24..96 tokens over a 4096-token vocabulary, forked from 1000
 * shared openings of 16..48 tokens and from each other. Then 20,000 skv_store_match calls
 * (each a read transaction walking the trie one LMDB lookup per edge) on queries that are
 * a stored session plus 8 foreign tokens; the same lookups on the in-memory trie.
 * Prints Markdown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"
#include "store/trie.h"
#include "core/util.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void rm_rf(const char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", d);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int32_t tok[400];
    size_t n;
    char name[16];
} sess;

static int restore_all(skv_model *m, skv_store *st, const sess *s, int n, const char *label)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c;
    int32_t tok[1024];
    uint64_t loaded = 0, computed = 0, total = 0;
    double tl = 0, tc = 0, t0 = skv_now();
    cp.n_ctx = 512;
    if (skv_ctx_create(m, &cp, &c)) return -1;
    for (int i = 0; i < n; i++) {
        skv_store_get_report r;
        size_t nt;
        if (skv_store_get(st, s[i].name, c, SKV_STORE_VERIFY, tok, 1024, &nt, &r) || !r.verified) {
            fprintf(stderr, "get %s: %s\n", s[i].name, skv_store_last_error(st));
            skv_ctx_free(c);
            return -1;
        }
        loaded += r.n_loaded;
        computed += r.n_computed;
        total += r.n_tokens;
        tl += r.load_seconds;
        tc += r.compute_seconds;
    }
    double dt = skv_now() - t0;
    skv_ctx_free(c);
    printf("| get + verify, %s | %d | %llu | %.3f | %.1f | %.0f | %llu loaded in %.3f s (%.0f pos/s) + %llu computed in %.3f s (%.0f pos/s) |\n",
           label, n, (unsigned long long)total, dt, n / dt, (double)total / dt, (unsigned long long)loaded, tl,
           tl > 0 ? (double)loaded / tl : 0.0, (unsigned long long)computed, tc, tc > 0 ? (double)computed / tc : 0.0);
    return 0;
}

static int part_model(skv_model *m, const int32_t *text, size_t n_text, int n_sess, const char *dir)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st;
    char err[512];
    sess *s = calloc((size_t)n_sess, sizeof *s);
    p.budget = 64 << 20;
    rm_rf(dir);
    if (!s || skv_store_open(dir, m, SKV_STORE_CREATE, &p, &st, err, sizeof err)) {
        fprintf(stderr, "open: %s\n", err);
        free(s);
        return -1;
    }
    for (int i = 0; i < n_sess; i++) {
        size_t own = 80 + rnd(81), off = 300 + rnd((uint32_t)(n_text - 700));
        memcpy(s[i].tok, text, 200 * sizeof *text);
        s[i].n = 200;
        if (i >= 3 && i % 3 == 0) { /* fork: another session's first 40 own tokens */
            memcpy(s[i].tok + 200, s[rnd((uint32_t)i)].tok + 200, 40 * sizeof *text);
            s[i].n = 240;
        }
        memcpy(s[i].tok + s[i].n, text + off, own * sizeof *text);
        s[i].n += own;
        snprintf(s[i].name, sizeof s[i].name, "b%d", i);
    }
    uint64_t total = 0, computed = 0;
    double t0 = skv_now();
    for (int i = 0; i < n_sess; i++) {
        skv_store_put_report r;
        if (skv_store_put(st, s[i].name, s[i].tok, s[i].n, &r)) {
            fprintf(stderr, "put: %s\n", skv_store_last_error(st));
            break;
        }
        total += s[i].n;
        computed += r.n_computed;
    }
    double dt = skv_now() - t0;
    printf("| what | sessions | tokens | seconds | sessions/s | tokens/s | restore: load vs compute |\n");
    printf("|---|---:|---:|---:|---:|---:|---|\n");
    printf("| put (budget 64 MiB) | %d | %llu | %.3f | %.1f | %.0f | %llu positions run through the model (the rest loaded) |\n",
           n_sess, (unsigned long long)total, dt, n_sess / dt, (double)total / dt, (unsigned long long)computed);
    int rc = restore_all(m, st, s, n_sess, "all materialised");
    skv_store_gc_report g;
    if (!rc && !(rc = skv_store_set_budget(st, 0)) && !(rc = skv_store_gc(st, &g)))
        rc = restore_all(m, st, s, n_sess, "budget 0 (token-only)");
    skv_store_close(st);
    rm_rf(dir);
    free(s);
    return rc;
}

/* ---- part 2: lookups among 10^5 sessions -------------------------------- */

static int part_lookup(skv_model *m, size_t n_sess, const char *dir)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st;
    char err[512];
    const size_t n_open = 1000, batch = 10000, n_q = 20000;
    int32_t **tok = calloc(n_sess, sizeof *tok);
    size_t *len = calloc(n_sess, sizeof *len);
    float *sur = malloc(128 * sizeof *sur);
    char (*names)[24] = calloc(n_sess, 24);
    const char **np = calloc(n_sess, sizeof *np);
    if (!tok || !len || !sur || !names || !np) return -1;
    for (size_t i = 0; i < 128; i++) sur[i] = 3.0f + (float)(i % 7);
    for (size_t i = 0; i < n_sess; i++) {
        len[i] = 24 + rnd(73);
        tok[i] = malloc(len[i] * sizeof **tok);
        size_t keep;
        if (i < n_open || rnd(2)) { /* one of the shared openings */
            keep = 16 + (i % n_open) % 33;
            for (size_t j = 0; j < keep && j < len[i]; j++)
                tok[i][j] = (int32_t)(((i % n_open) * 2654435761u + j * 40503u) % 4096);
        } else { /* fork a stored session */
            size_t o = rnd((uint32_t)i);
            keep = rnd((uint32_t)(len[o] < len[i] ? len[o] : len[i]));
            memcpy(tok[i], tok[o], keep * sizeof **tok);
        }
        for (size_t j = keep; j < len[i]; j++) tok[i][j] = (int32_t)rnd(4096);
        snprintf(names[i], 24, "k%zu", i);
        np[i] = names[i];
    }
    rm_rf(dir);
    p.budget = 0;
    if (skv_store_open(dir, m, SKV_STORE_CREATE, &p, &st, err, sizeof err)) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    const float **sp = malloc(batch * sizeof *sp);
    for (size_t i = 0; i < batch; i++) sp[i] = sur;
    double t0 = skv_now();
    int rc = 0;
    for (size_t i = 0; i < n_sess && !rc; i += batch) {
        size_t k = n_sess - i < batch ? n_sess - i : batch;
        if ((rc = skv_store__put_tokens(st, k, np + i, (const int32_t *const *)tok + i, len + i, sp)))
            fprintf(stderr, "bulk put: %s\n", skv_store_last_error(st));
    }
    double t_build = skv_now() - t0;
    skv_store_stats ss;
    if (!rc) rc = skv_store_get_stats(st, &ss);
    /* queries: a stored session + 8 foreign tokens */
    double *lat = malloc(n_q * sizeof *lat), sum = 0;
    int32_t q[128];
    uint64_t matched = 0;
    for (size_t i = 0; i < n_q && !rc; i++) {
        size_t s = rnd((uint32_t)n_sess);
        memcpy(q, tok[s], len[s] * sizeof *q);
        for (size_t j = 0; j < 8; j++) q[len[s] + j] = (int32_t)rnd(4096);
        skv_store_match_result r;
        double a = skv_now();
        rc = skv_store_match(st, q, len[s] + 8, &r);
        lat[i] = skv_now() - a;
        sum += lat[i];
        matched += r.n_matched;
        if (r.n_matched < len[s]) rc = -1;
    }
    /* the same on the in-memory trie */
    skv_trie_mem *mem;
    skv_trie_io io;
    double mem_sum = 0, t_mem_build;
    skv_trie_mem_create(&mem);
    skv_trie_mem_io(mem, &io);
    t0 = skv_now();
    for (size_t i = 0; i < n_sess && !rc; i++) {
        uint64_t e;
        rc = skv_trie_insert(&io, tok[i], len[i], sur, i + 1, &e);
    }
    t_mem_build = skv_now() - t0;
    for (size_t i = 0; i < n_q && !rc; i++) {
        size_t s = rnd((uint32_t)n_sess);
        skv_trie_path path;
        double a = skv_now();
        rc = skv_trie_match(&io, tok[s], len[s], &path);
        mem_sum += skv_now() - a;
        skv_trie_path_free(&path);
    }
    if (!rc) {
        qsort(lat, n_q, sizeof *lat, cmp_double);
        printf("\nLookups among %zu sessions (%llu session tokens, %llu unique positions in %llu trie nodes, "
               "%.1f MiB of LMDB pages, no KV); built in %.2f s through the model-free path "
               "(%.0f sessions/s, transactions of %zu).\n\n",
               n_sess, (unsigned long long)ss.session_tokens, (unsigned long long)ss.unique_positions,
               (unsigned long long)ss.n_nodes, (double)ss.disk_bytes / 1048576.0, t_build, (double)n_sess / t_build,
               batch);
        printf("| lookup | queries | mean us | p50 us | p99 us | mean matched tokens |\n|---|---:|---:|---:|---:|---:|\n");
        printf("| skv_store_match (LMDB, read txn per call) | %zu | %.1f | %.1f | %.1f | %.1f |\n", n_q, sum / n_q * 1e6,
               lat[n_q / 2] * 1e6, lat[n_q * 99 / 100] * 1e6, (double)matched / n_q);
        printf("| skv_trie_match (in-memory trie) | %zu | %.1f | | | |\n", n_q, mem_sum / n_q * 1e6);
        printf("\nIn-memory trie built in %.2f s (%zu nodes).\n", t_mem_build, skv_trie_mem_n_nodes(mem));
    }
    skv_trie_mem_free(mem);
    skv_store_close(st);
    rm_rf(dir);
    for (size_t i = 0; i < n_sess; i++) free(tok[i]);
    free(tok); free(len); free(sur); free(names); free(np); free(sp); free(lat);
    return rc;
}

int main(int argc, char **argv)
{
    skv_model *m;
    char err[512], dir[256];
    if (argc < 3) {
        fprintf(stderr, "usage: bench_store MODEL TEXT [n_sessions=24] [n_lookup_sessions=100000]\n");
        return 2;
    }
    int n_sess = argc > 3 ? atoi(argv[3]) : 24;
    size_t n_lookup = argc > 4 ? (size_t)atol(argv[4]) : 100000;
    if (skv_model_load(argv[1], NULL, &m, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    char *text = malloc(40001);
    size_t tl = f ? fread(text, 1, 40000, f) : 0, n_text = 0;
    if (f) fclose(f);
    text[tl] = 0;
    int32_t *tok = malloc(40000 * sizeof *tok);
    if (skv_model_tokenize(m, text, tl, 1, tok, 40000, &n_text) || n_text < 1200 || n_sess < 1) {
        fprintf(stderr, "bench_store: need a text of at least 1200 tokens\n");
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/seqkv_bench_store_%d", (int)getpid());
    int rc = part_model(m, tok, n_text, n_sess, dir);
    if (!rc && n_lookup) rc = part_lookup(m, n_lookup, dir);
    free(text);
    free(tok);
    skv_model_free(m);
    return rc ? 1 : 0;
}
