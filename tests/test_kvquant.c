/* Quantized KV cache in the engine (src/quant/kvquant.c, kv_quant in skv_ctx_params): spec
 * parsing, bit-exact invariance to batching/chunking/threads with quantization on, the
 * window / keep-layer rules, truncation, and a quality-ordering sanity check on the bundled
 * model. Every engine comparison is bit-for-bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/kvquant.h"
#include "quant/quant.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define N 40

static skv_model *load_bundled(void)
{
    char err[256];
    skv_model *m = NULL;
    if (skv_model_load(MODEL, NULL, &m, err, sizeof err) != SKV_OK) {
        fprintf(stderr, "load %s: %s\n", MODEL, err);
        return NULL;
    }
    return m;
}

static void make_tokens(int32_t *t, size_t n, int vocab, unsigned seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    t[0] = 1;
    for (size_t i = 1; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        t[i] = (int32_t)(s % (uint64_t)vocab);
    }
}

typedef struct {
    float *logits; /* n x vocab */
    uint8_t digest[16];
} run_result;

/* chunks: NULL = one prefill, else sizes summing to n (0-terminated; 1 = skv_decode). */
static int run(const skv_model *m, const char *spec, const int32_t *tok, size_t n, int threads,
               const size_t *chunks, run_result *r)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    skv_model_info info;
    int rc = -1;
    skv_model_get_info(m, &info);
    size_t V = (size_t)info.n_vocab, done = 0;
    p.n_threads = threads;
    p.n_ctx = 128;
    p.kv_quant = spec;
    r->logits = malloc(n * V * sizeof(float));
    if (!r->logits || skv_ctx_create(m, &p, &c) != SKV_OK) goto out;
    if (!chunks) {
        if (skv_prefill(c, tok, n, SKV_LOGITS_ALL, r->logits)) goto out;
    } else {
        for (size_t i = 0; chunks[i]; i++) {
            if (chunks[i] == 1 ? skv_decode(c, tok[done], r->logits + done * V)
                               : skv_prefill(c, tok + done, chunks[i], SKV_LOGITS_ALL, r->logits + done * V))
                goto out;
            done += chunks[i];
        }
    }
    if (skv_ctx_kv_digest(c, (int)n, r->digest)) goto out;
    rc = 0;
out:
    skv_ctx_free(c);
    return rc;
}

static int same(const run_result *a, const run_result *b, size_t nf)
{
    return !memcmp(a->logits, b->logits, nf * sizeof(float)) && !memcmp(a->digest, b->digest, 16);
}

/* Mean KL(p_a || p_b) in nats over n rows of logits, in double. */
static double mean_kl(const float *a, const float *b, size_t n, size_t V)
{
    double tot = 0.0;
    for (size_t t = 0; t < n; t++) {
        const float *x = a + t * V, *y = b + t * V;
        double mx = x[0], my = y[0], zx = 0.0, zy = 0.0, kl = 0.0;
        for (size_t i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx, my = y[i] > my ? y[i] : my;
        for (size_t i = 0; i < V; i++) zx += exp((double)x[i] - mx), zy += exp((double)y[i] - my);
        for (size_t i = 0; i < V; i++) {
            double lp = (double)x[i] - mx - log(zx), lq = (double)y[i] - my - log(zy);
            kl += exp(lp) * (lp - lq);
        }
        tot += kl;
    }
    return tot / (double)n;
}

static void spec_parsing(void)
{
    skv_kvq_spec s;
    char buf[128];
    skv_err err = {0};
    CHECK(skv_kvquant_parse("k=tq4,v=tq3,keep-first=1,keep-last=2,window=64,seed=7", &s, &err) == SKV_OK);
    CHECK_EQ_INT(s.scheme[0], SKV_QUANT_TQ4);
    CHECK_EQ_INT(s.scheme[1], SKV_QUANT_TQ3);
    CHECK_EQ_INT(s.keep_first, 1);
    CHECK_EQ_INT(s.keep_last, 2);
    CHECK_EQ_INT(s.window, 64);
    CHECK(s.seed == 7);
    CHECK(skv_kvquant_format(&s, buf, sizeof buf) == SKV_OK);
    CHECK_MSG(!strcmp(buf, "k=tq4,v=tq3,keep-first=1,keep-last=2,window=64,seed=7"), "%s", buf);
    CHECK(skv_kvquant_parse("tq3p", &s, &err) == SKV_OK);
    CHECK(s.scheme[0] == SKV_QUANT_TQ3P && s.scheme[1] == SKV_QUANT_TQ3P && s.window == 0 && s.keep_first == 0);
    CHECK(skv_kvquant_parse("v=q4_0", &s, &err) == SKV_OK);
    CHECK(s.scheme[0] == -1 && s.scheme[1] == SKV_QUANT_Q4_0);
    CHECK(skv_kvquant_format(&s, buf, sizeof buf) == SKV_OK);
    CHECK_MSG(!strcmp(buf, "v=q4_0,keep-first=0,keep-last=0,window=0,seed=0"), "%s", buf);
    CHECK(skv_kvquant_parse("kv=f16,seed=18446744073709551615", &s, &err) == SKV_OK);
    CHECK(s.seed == UINT64_MAX);
    static const char *const bad[] = {"", ",", "k=tq3,", ",k=tq3", "k=tq9", "k=", "k=tq3,k=tq4", "kv=tq3,v=tq2",
                                      "window=4", "k=tq3,window=-1", "k=tq3,window=1x", "k=tq3,window=",
                                      "k=tq3,keep-first=99999999", "k=tq3, v=tq3", "K=tq3", "q=tq3", "k=tq3,seed=18446744073709551616",
                                      "k=tq3,window=3,window=4", "tq3.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        CHECK_MSG(skv_kvquant_parse(bad[i], &s, &err) == SKV_ERR_INVALID_ARG, "accepted '%s'", bad[i]);
        CHECK_MSG(err.msg[0] != 0, "no message for '%s'", bad[i]);
    }
    CHECK(skv_kvquant_parse(NULL, &s, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_kv_quant_check("k=tq4,v=tq3", NULL, err.msg, sizeof err.msg) == SKV_OK);
    CHECK(skv_kv_quant_check("k=tq4,v=zz", NULL, err.msg, sizeof err.msg) == SKV_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "zz") != NULL);

    skv_model *m = load_bundled();
    CHECK(m != NULL);
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 16;
    p.kv_quant = "k=tq3,bogus=1";
    CHECK(skv_ctx_create(m, &p, &c) == SKV_ERR_INVALID_ARG && c == NULL);
    p.kv_quant = "";
    CHECK(skv_ctx_create(m, &p, &c) == SKV_OK);
    skv_ctx_free(c);
    CHECK(skv_kv_quant_check("k=tq4p,v=q8_0", m, err.msg, sizeof err.msg) == SKV_OK);
    skv_model_free(m);
    /* the quantizer module's limits are enforced when building the state */
    skv_kvquant *q = NULL;
    CHECK(skv_kvquant_parse("kv=tq3p", &s, NULL) == SKV_OK);
    CHECK(skv_kvquant_create(&q, &s, 4, 4096) == SKV_ERR_RANGE && q == NULL);
    CHECK(skv_kvquant_create(&q, &s, 4, 64) == SKV_OK);
    CHECK(skv_kvquant_active(q, 0, 0) && skv_kvquant_active(q, 3, 1) && !skv_kvquant_active(q, 4, 0));
    skv_kvquant_free(q);
    CHECK(skv_kvquant_parse("v=tq2,keep-first=1,keep-last=1", &s, NULL) == SKV_OK);
    CHECK(skv_kvquant_create(&q, &s, 4, 64) == SKV_OK);
    CHECK(!skv_kvquant_layer_active(q, 0) && !skv_kvquant_layer_active(q, 3));
    CHECK(!skv_kvquant_active(q, 1, 0) && skv_kvquant_active(q, 1, 1) && skv_kvquant_active(q, 2, 1));
    skv_kvquant_free(q);
}

/* f32 goes through the whole quantized-cache machinery (view copies, per-token attention
 * with a window) and must change nothing at all. */
static void f32_is_bit_identical(void)
{
    skv_model *m = load_bundled();
    int32_t tok[N];
    run_result ref, r;
    skv_model_info info;
    size_t chunks[] = {3, 1, 9, 1, 12, 14, 0};
    CHECK(m != NULL);
    skv_model_get_info(m, &info);
    size_t nf = N * (size_t)info.n_vocab;
    make_tokens(tok, N, info.n_vocab, 11);
    CHECK(run(m, NULL, tok, N, 1, NULL, &ref) == 0);
    static const char *const specs[] = {"kv=f32", "kv=f32,window=5", "k=f32,window=1", "v=f32,keep-first=1,window=20"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        CHECK(run(m, specs[i], tok, N, 2, NULL, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "%s prefill differs from the unquantized run", specs[i]);
        free(r.logits);
        CHECK(run(m, specs[i], tok, N, 1, chunks, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "%s chunked differs from the unquantized run", specs[i]);
        free(r.logits);
    }
    free(ref.logits);
    skv_model_free(m);
}

/* Prefill == token by token == chunked (any threads), bit-exact, with quantization on. */
static void batch_invariance(void)
{
    skv_model *m = load_bundled();
    int32_t tok[N];
    skv_model_info info;
    size_t one[N + 1], chunks[] = {1, 7, 1, 1, 13, 2, 15, 0}, chunks2[] = {9, 9, 9, 13, 0};
    CHECK(m != NULL);
    skv_model_get_info(m, &info);
    size_t nf = N * (size_t)info.n_vocab;
    for (int i = 0; i < N; i++) one[i] = 1;
    one[N] = 0;
    make_tokens(tok, N, info.n_vocab, 5);
    static const char *const specs[] = {"kv=tq3", "kv=tq3,window=4", "k=tq4p,v=q4_0,keep-first=1,window=9",
                                        "k=tq2,v=tq3p,keep-last=1,window=1", "v=q8_0,window=13,seed=3"};
    run_result full;
    CHECK(run(m, NULL, tok, N, 1, NULL, &full) == 0);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        run_result ref, r;
        CHECK(run(m, specs[s], tok, N, 1, NULL, &ref) == 0);
        CHECK_MSG(memcmp(ref.logits, full.logits, nf * sizeof(float)) != 0, "%s changed nothing", specs[s]);
        CHECK(run(m, specs[s], tok, N, 1, one, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "%s: token-by-token differs from prefill", specs[s]);
        free(r.logits);
        CHECK(run(m, specs[s], tok, N, 2, chunks, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "%s: chunked (2 threads) differs from prefill", specs[s]);
        free(r.logits);
        CHECK(run(m, specs[s], tok, N, 2, chunks2, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "%s: chunks of 9 (2 threads) differ from prefill", specs[s]);
        free(r.logits);
        free(ref.logits);
    }
    free(full.logits);
    skv_model_free(m);
}

/* The window keeps exactly the W most recent rows exact, the others are the public round
 * trip of the exact rows (layer 0's K/V do not depend on quantization); keep-first/last and
 * a window covering everything leave the run untouched. */
static void window_and_keep_rules(void)
{
    skv_model *m = load_bundled();
    int32_t tok[N];
    skv_model_info info;
    run_result full, r;
    CHECK(m != NULL);
    skv_model_get_info(m, &info);
    size_t nf = N * (size_t)info.n_vocab, hd = (size_t)info.head_dim;
    make_tokens(tok, N, info.n_vocab, 7);
    CHECK(run(m, NULL, tok, N, 1, NULL, &full) == 0);
    char spec[96];
    snprintf(spec, sizeof spec, "kv=tq2,window=%d", N);
    CHECK(run(m, spec, tok, N, 1, NULL, &r) == 0);
    CHECK_MSG(same(&full, &r, nf), "window >= n_pos must leave the run exact");
    free(r.logits);
    snprintf(spec, sizeof spec, "kv=tq2,keep-first=%d", info.n_layer);
    CHECK(run(m, spec, tok, N, 1, NULL, &r) == 0);
    CHECK_MSG(same(&full, &r, nf), "keep-first = n_layer must leave the run exact");
    free(r.logits);
    snprintf(spec, sizeof spec, "kv=tq2,keep-first=2,keep-last=%d", info.n_layer - 2);
    CHECK(run(m, spec, tok, N, 1, NULL, &r) == 0);
    CHECK_MSG(same(&full, &r, nf), "keep-first + keep-last covering all layers must leave the run exact");
    free(r.logits);
    snprintf(spec, sizeof spec, "kv=tq2,window=%d", N - 1);
    CHECK(run(m, spec, tok, N, 1, NULL, &r) == 0);
    CHECK_MSG(memcmp(full.logits, r.logits, (N - 1) * (size_t)info.n_vocab * sizeof(float)) == 0,
              "tokens before the first eviction must be exact");
    CHECK_MSG(memcmp(full.logits + nf - info.n_vocab, r.logits + nf - info.n_vocab, info.n_vocab * sizeof(float)),
              "the last token must see position 0 quantized");
    free(r.logits);
    free(full.logits);

    /* row-level view of layer 0 (its K/V do not depend on earlier quantization) */
    const int W = 6;
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *cq = NULL, *cf = NULL;
    p.n_ctx = 64;
    CHECK(skv_ctx_create(m, &p, &cf) == SKV_OK);
    p.kv_quant = "k=tq3,v=q4_0,window=6";
    CHECK(skv_ctx_create(m, &p, &cq) == SKV_OK);
    CHECK(skv_prefill(cf, tok, N, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_prefill(cq, tok, 17, SKV_LOGITS_NONE, NULL) == SKV_OK);
    for (int t = 17; t < N; t++) CHECK(skv_decode(cq, tok[t], NULL) == SKV_OK);
    float *rt = malloc(N * hd * sizeof(float));
    CHECK(rt != NULL);
    for (int kind = 0; kind < 2; kind++)
        for (int h = 0; h < info.n_head_kv; h++) {
            const float *xf, *xq;
            CHECK(skv_ctx_kv_view(cf, 0, kind, h, &xf) == SKV_OK && skv_ctx_kv_view(cq, 0, kind, h, &xq) == SKV_OK);
            CHECK(skv_kv_quant_roundtrip(kind ? "q4_0" : "tq3", hd, 0, kind, xf, N, rt, NULL) == SKV_OK);
            CHECK_MSG(!memcmp(xq, rt, (N - W) * hd * sizeof(float)), "kind %d head %d: old rows are not the round trip", kind, h);
            CHECK_MSG(!memcmp(xq + (N - W) * hd, xf + (N - W) * hd, W * hd * sizeof(float)),
                      "kind %d head %d: window rows are not exact", kind, h);
            CHECK(memcmp(rt, xf, (N - W) * hd * sizeof(float)) != 0);
        }
    free(rt);
    skv_ctx_free(cq);
    skv_ctx_free(cf);
    skv_model_free(m);
}

/* Truncating and re-appending gives exactly the cache of a fresh run of the same tokens
 * (rows that re-enter the window get their exact values back). */
static void truncate_restores_window(void)
{
    skv_model *m = load_bundled();
    int32_t tok[N], tok2[N];
    skv_model_info info;
    run_result ref;
    CHECK(m != NULL);
    skv_model_get_info(m, &info);
    size_t V = (size_t)info.n_vocab, nf = N * V;
    make_tokens(tok, N, info.n_vocab, 9);
    make_tokens(tok2, N, info.n_vocab, 10);
    memcpy(tok2, tok, 20 * sizeof(int32_t)); /* same first 20 tokens, different continuation */
    const char *spec = "k=tq3,v=tq4,window=8";
    CHECK(run(m, spec, tok2, N, 1, NULL, &ref) == 0);
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 128;
    p.kv_quant = spec;
    float *lg = malloc(nf * sizeof(float));
    uint8_t dg[16];
    CHECK(lg && skv_ctx_create(m, &p, &c) == SKV_OK);
    CHECK(skv_prefill(c, tok, N, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_ctx_truncate(c, 20) == SKV_OK);
    CHECK(skv_prefill(c, tok2 + 20, N - 20, SKV_LOGITS_ALL, lg + 20 * V) == SKV_OK);
    CHECK(skv_ctx_kv_digest(c, N, dg) == SKV_OK);
    CHECK_MSG(!memcmp(dg, ref.digest, 16), "KV after truncate + append differs from a fresh run");
    CHECK_MSG(!memcmp(lg + 20 * V, ref.logits + 20 * V, (N - 20) * V * sizeof(float)), "logits after truncate differ");
    CHECK(skv_ctx_truncate(c, 0) == SKV_OK);
    CHECK(skv_prefill(c, tok2, N, SKV_LOGITS_ALL, lg) == SKV_OK);
    CHECK_MSG(!memcmp(lg, ref.logits, nf * sizeof(float)), "logits after truncate(0) differ");
    free(lg);
    free(ref.logits);
    skv_ctx_free(c);
    skv_model_free(m);
}

/* On real text: more bits, less damage. */
static void quality_ordering(void)
{
    skv_model *m = load_bundled();
    char *text = NULL;
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    CHECK(m != NULL);
    if (!f) SKIP("tests/data/model_ref/heldout.txt not found");
    text = calloc(1, 1501);
    size_t len = text ? fread(text, 1, 1500, f) : 0;
    fclose(f);
    CHECK(len > 1000);
    int32_t tok[512];
    size_t n = 0;
    skv_model_info info;
    skv_model_get_info(m, &info);
    CHECK(skv_tokenize(m, text, len, 1, tok, 512, &n) == SKV_OK);
    if (n > 120) n = 120;
    CHECK(n >= 100);
    run_result full, r;
    double kl[3];
    static const char *const specs[] = {"kv=tq2", "kv=tq3", "kv=tq4"};
    CHECK(run(m, NULL, tok, n, 1, NULL, &full) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK(run(m, specs[i], tok, n, 1, NULL, &r) == 0);
        kl[i] = mean_kl(full.logits, r.logits, n, (size_t)info.n_vocab);
        free(r.logits);
    }
    CHECK(run(m, "kv=q8_0", tok, n, 1, NULL, &r) == 0);
    double kl8 = mean_kl(full.logits, r.logits, n, (size_t)info.n_vocab);
    free(r.logits);
    CHECK_MSG(kl[0] > kl[1] && kl[1] > kl[2] && kl[2] > kl8 && kl8 > 0.0, "KL tq2 %g tq3 %g tq4 %g q8_0 %g", kl[0],
              kl[1], kl[2], kl8);
    free(full.logits);
    free(text);
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_kvquant");
    RUN(spec_parsing);
    RUN(f32_is_bit_identical);
    RUN(batch_invariance);
    RUN(window_and_keep_rules);
    RUN(truncate_restores_window);
    RUN(quality_ordering);
    TEST_END();
}
