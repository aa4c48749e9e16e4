/* seqkv bench: a deterministic multi-session workload from the text's tokens, its sizes
 * computed (prefix sharing, token floor) and, unless --no-store, held in a real store.
 *
 * Session (g, k) = one P-token system prompt (BOS + text) + turn g (A tokens) + reply (g, k)
 * (B tokens): G groups x K replies, every piece taken from the text in order.
 */
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

typedef struct {
    int P, A, B, G, K; /* prompt, turn and reply lengths; groups, replies per group */
} wl_shape;

typedef struct {
    const int32_t *t;
    size_t n;
    const double *s; /* surprisal of each position (s[0] = 0: BOS) */
} wl_session;

static wl_shape shape_of(int quick)
{
    return quick ? (wl_shape){.P = 48, .A = 16, .B = 16, .G = 2, .K = 2}
                 : (wl_shape){.P = 300, .A = 100, .B = 60, .G = 4, .K = 5};
}

static int wl_cmp(const void *a, const void *b)
{
    const wl_session *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    for (size_t i = 0; i < n; i++)
        if (x->t[i] != y->t[i]) return x->t[i] < y->t[i] ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

/* Session i's tokens into t (len = P + A + B). */
static void wl_tokens(const bench_run *r, const int32_t *all, wl_shape w, size_t i, int32_t *t)
{
    size_t g = i / (size_t)w.K, k = i % (size_t)w.K;
    t[0] = r->tok[0];
    memcpy(t + 1, all, (size_t)(w.P - 1) * sizeof *t);
    memcpy(t + w.P, all + w.P - 1 + g * (size_t)w.A, (size_t)w.A * sizeof *t);
    memcpy(t + w.P + w.A, all + w.P - 1 + (size_t)w.G * w.A + (g * (size_t)w.K + k) * (size_t)w.B,
           (size_t)w.B * sizeof *t);
}

/* Runs each session through the model (c): tokens into tok, surprisals into sur, ss[] pointing at them. */
static int wl_build(const bench_run *r, skv_ctx *c, const int32_t *all, wl_shape w, int32_t *tok, double *sur,
                    wl_session *ss)
{
    size_t len = (size_t)(w.P + w.A + w.B), S = (size_t)w.G * (size_t)w.K, V = (size_t)r->info.n_vocab;
    float *lg = malloc(len * V * sizeof *lg);
    int rc = lg ? 0 : -1;
    for (size_t i = 0; !rc && i < S; i++) {
        int32_t *t = tok + i * len;
        double *s = sur + i * len;
        wl_tokens(r, all, w, i, t);
        skv_ctx_truncate(c, 0);
        if (skv_ctx_prefill(c, t, len, SKV_LOGITS_ALL, lg)) rc = -1;
        for (size_t p = 1; !rc && p < len; p++) s[p] = skv_token_surprisal(lg + (p - 1) * V, (int)V, t[p]);
        ss[i] = (wl_session){.t = t, .n = len, .s = s};
    }
    free(lg);
    return rc;
}

/* Unique trie positions (sort + longest common prefix with the predecessor) and token floors. */
static void wl_count(bench_case *bc, wl_session *ss, size_t S)
{
    qsort(ss, S, sizeof *ss, wl_cmp);
    bc->wl_positions = bc->wl_unique = 0;
    bc->wl_floor_all = bc->wl_floor_unique = 0.0;
    for (size_t i = 0; i < S; i++) {
        size_t lcp = 0;
        while (i && lcp < ss[i].n && lcp < ss[i - 1].n && ss[i].t[lcp] == ss[i - 1].t[lcp]) lcp++;
        bc->wl_positions += ss[i].n;
        bc->wl_unique += ss[i].n - lcp;
        for (size_t p = 0; p < ss[i].n; p++)
            bc->wl_floor_all += ss[i].s[p], bc->wl_floor_unique += p >= lcp ? ss[i].s[p] : 0.0;
    }
}

/* ---- the real store (skv_store_*) ------------------------------------------------- */

/* Session t[0..n) as `seqkv store put -f` receives it: written out as text (cli_write_tokens),
 * tokenized again with BOS. The store rows have always measured these (their token counts can
 * differ from the computed rows' by a token or two). malloc'ed; *n_out its length. */
static int32_t *as_put_from_text(const skv_model *m, const int32_t *t, size_t n, size_t *n_out)
{
    char *text = NULL;
    size_t len = 0;
    int after_bos = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    cli_write_tokens(f, m, t, n, &after_bos);
    int32_t *tok = fclose(f) || !text ? NULL : cli_tokenize(m, text, len, 1, n_out);
    free(text);
    return tok;
}

static int put_sessions(const bench_run *r, skv_store *st, const int32_t *tok, size_t S, size_t len)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < S; i++) {
        char name[32];
        size_t n = 0;
        int32_t *t = as_put_from_text(r->m, tok + i * len, len, &n);
        snprintf(name, sizeof name, "s%zu", i);
        rc = t && !skv_store_put(st, name, t, n, NULL) ? 0 : -1;
        free(t);
    }
    return rc;
}

/* A fresh store in dir (budget 0: tokens only; else the default budget) holding every session. */
static int store_one(const bench_run *r, const char *dir, const int32_t *tok, size_t S, size_t len, int budget0,
                     bench_store_run *out)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st = NULL;
    skv_store_stats s;
    char err[600] = "";
    p.budget = budget0 ? 0 : -1;
    p.map_size = cli_store_map_size();
    int rc = skv_store_open(dir, r->m, SKV_STORE_CREATE, &p, &st, err, sizeof err) ? -1 : 0;
    if (!rc) rc = put_sessions(r, st, tok, S, len) || skv_store_get_stats(st, &s) ? -1 : 0;
    if (rc) bench_progress("  (store failed: %s)", st ? skv_store_last_error(st) : err);
    else *out = (bench_store_run){.ok = 1, .bytes = (double)s.disk_bytes, .tokens = (double)s.session_tokens,
                                  .unique = (double)s.unique_positions};
    skv_store_close(st);
    return rc;
}

static void store_real(const bench_run *r, bench_case *bc, const int32_t *tok, size_t S, size_t len)
{
    char tmp[4096], dir[4200];
    if (bench_temp_dir("store", tmp, sizeof tmp)) return;
    for (int b = 0; b < 2; b++) {
        bench_progress("  seqkv store (%s budget)", b ? "default" : "zero");
        snprintf(dir, sizeof dir, "%s/store%d", tmp, !b);
        store_one(r, dir, tok, S, len, !b, &bc->store[b]);
    }
    bench_remove_tree(tmp);
}

int bench_store_workload(const bench_run *r, bench_case *bc, const int32_t *all, size_t n_all, const bench_opts *o)
{
    wl_shape w = shape_of(o->quick);
    size_t len = (size_t)(w.P + w.A + w.B), S = (size_t)w.G * (size_t)w.K;
    if (len > (size_t)r->info.n_ctx_train || (size_t)(w.P - 1 + w.G * w.A + w.G * w.K * w.B) > n_all) return 0;
    int32_t *tok = malloc(S * len * sizeof *tok);
    double *sur = calloc(S * len, sizeof *sur);
    wl_session *ss = malloc(S * sizeof *ss);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = (int)len;
    cp.n_threads = (int)r->threads;
    skv_ctx *c = NULL;
    int rc = tok && sur && ss && !skv_ctx_create(r->m, &cp, &c) ? wl_build(r, c, all, w, tok, sur, ss) : -1;
    if (!rc) {
        wl_count(bc, ss, S);
        if (o->store) store_real(r, bc, tok, S, len);
        bc->wl_ok = 1, bc->wl_sessions = S, bc->wl_prompt = w.P, bc->wl_groups = w.G, bc->wl_turn = w.A;
        bc->wl_reply = w.B;
    }
    skv_ctx_free(c);
    free(tok);
    free(sur);
    free(ss);
    return rc;
}
