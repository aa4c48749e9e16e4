/* The architectures of the table (src/engine/arch.c) on the fixtures of tests/data/arch/
 * (scripts/gguf_write.py): seqkv's logits against llama.cpp's recorded ones
 * (scripts/oracle/arch_logits.sh), and per architecture the bit-exactness the llama
 * tests prove for stories260K: one prefill == ragged chunkings == token by token,
 * 1 == 2 threads, scalar == AVX2 kernels, decode_multi == decode (logits and KV digest,
 * byte for byte).
 *
 * Agreement bounds, per row (docs/architectures.md "Fixtures"). All fixtures are F32 and
 * the oracle keeps an F32 KV cache, so llama.cpp differs from seqkv only by summation
 * order and its own RoPE angles (f32 theta *= step): measured max |diff| <= 7.4e-6 on
 * logits of sd ~2, KL <= 2.3e-12 (llama, qwen2, qwen3, phi3). gemma adds llama.cpp's
 * GELU, read from an f16 table (ggml's GGML_GELU_FP16: the input rounded to f16, the
 * output an f16): measured 4.2e-3 / 5.7e-7, and 1.6e-3 when seqkv emulates those two
 * roundings. The bounds are ~5-15x the worst measured; every deliberately broken step
 * (no bias, no Q/K norm, no soft-cap, no window, the other RoPE pairing, the long phi3
 * factors, ...) measured >= 0.5 max |diff| and >= 0.01 KL, far outside them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "test.h"

#define TOP1_MIN 0.99 /* fraction of positions whose argmax agrees */

typedef struct {
    const char *name;
    double max_abs, max_kl; /* max |seqkv - llama.cpp| over every logit; worst per-position KL */
} arch_case;

static const arch_case archs[] = {
    {"llama", 1e-4, 1e-10}, {"qwen2", 1e-4, 1e-10},  {"qwen3", 1e-4, 1e-10},
    {"phi3", 1e-4, 1e-10},  {"gemma2", 0.02, 1e-5}, {"gemma3", 0.02, 1e-5},
};
#define N_ARCH (sizeof archs / sizeof archs[0])

typedef struct {
    skv_model *m;
    int32_t *tok;
    size_t n, V;
    float *want; /* [n][V] llama.cpp's logits */
} fixture;

/* Reads a whole file of elem-byte items; NULL when absent. */
static void *slurp(const char *arch, const char *ext, size_t elem, size_t *n)
{
    char path[256];
    FILE *f;
    long len;
    void *buf;
    snprintf(path, sizeof path, "tests/data/arch/%s.%s", arch, ext);
    if (!(f = fopen(path, "rb"))) return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    buf = malloc(len > 0 ? (size_t)len : 1);
    *n = buf && len > 0 && fread(buf, 1, (size_t)len, f) == (size_t)len ? (size_t)len / elem : 0;
    fclose(f);
    return buf;
}

static void fixture_free(fixture *fx)
{
    skv_model_free(fx->m);
    free(fx->tok);
    free(fx->want);
    memset(fx, 0, sizeof *fx);
}

static int fixture_load(const char *arch, fixture *fx)
{
    char path[256], err[256];
    skv_model_info info;
    size_t nl = 0;
    memset(fx, 0, sizeof *fx);
    snprintf(path, sizeof path, "tests/data/arch/%s.gguf", arch);
    if (skv_model_load(path, NULL, &fx->m, err, sizeof err) != SKV_OK) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    skv_model_get_info(fx->m, &info);
    fx->V = (size_t)info.n_vocab;
    fx->tok = slurp(arch, "tokens", 4, &fx->n);
    fx->want = slurp(arch, "logits", 4, &nl);
    if (!fx->tok || !fx->want || !fx->n || nl != fx->n * fx->V) return -1;
    return 0;
}

/* Logits of all n tokens: chunks NULL = one prefill, else sizes summing to n (0-terminated;
 * 1 = skv_decode). digest: the KV digest after the last token. */
static float *run(const fixture *fx, int threads, int kernels, const size_t *chunks, uint8_t digest[16])
{
    skv_ctx_params p = skv_ctx_default_params();
    size_t one[] = {fx->n, 0}, done = 0;
    skv_ctx *c;
    float *lg = malloc(fx->n * fx->V * sizeof *lg);
    int rc = SKV_OK;
    p.n_ctx = 256;
    p.n_threads = threads;
    p.kernels = kernels;
    if (!lg || skv_ctx_create(fx->m, &p, &c) != SKV_OK) {
        free(lg);
        return NULL;
    }
    for (size_t i = 0; (chunks ? chunks : one)[i] && rc == SKV_OK; i++) {
        size_t k = (chunks ? chunks : one)[i];
        if (k == 1) rc = skv_decode(c, fx->tok[done], lg + done * fx->V);
        else rc = skv_prefill(c, fx->tok + done, k, SKV_LOGITS_ALL, lg + done * fx->V);
        done += k;
    }
    if (rc == SKV_OK) rc = skv_ctx_kv_digest(c, (int)fx->n, digest);
    skv_ctx_free(c);
    if (rc != SKV_OK) {
        free(lg);
        return NULL;
    }
    return lg;
}

typedef struct {
    double max_abs, max_kl, top1;
} agreement;

static size_t argmax(const float *x, size_t n)
{
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* log-sum-exp of a row, in double */
static double lse(const float *x, size_t n)
{
    double mx = x[argmax(x, n)], s = 0;
    for (size_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

/* KL(p || q) of the softmaxes of two logit rows */
static double kl_rows(const float *p, const float *q, size_t n)
{
    double lp = lse(p, n), lq = lse(q, n), kl = 0;
    for (size_t i = 0; i < n; i++) kl += exp(p[i] - lp) * ((p[i] - lp) - (q[i] - lq));
    return kl > 0 ? kl : 0;
}

static agreement compare(const float *want, const float *got, size_t n, size_t V)
{
    agreement a = {0, 0, 0};
    for (size_t t = 0; t < n; t++) {
        const float *w = want + t * V, *g = got + t * V;
        double kl = kl_rows(w, g, V);
        for (size_t i = 0; i < V; i++)
            if (fabs((double)w[i] - g[i]) > a.max_abs) a.max_abs = fabs((double)w[i] - g[i]);
        if (kl > a.max_kl) a.max_kl = kl;
        a.top1 += argmax(w, V) == argmax(g, V);
    }
    a.top1 /= (double)n;
    return a;
}

static int within(const arch_case *c, agreement a)
{
    return a.max_abs <= c->max_abs && a.max_kl <= c->max_kl && a.top1 >= TOP1_MIN;
}

/* seqkv vs llama.cpp on every fixture; the measurements go to the log as "#" lines. */
static void logits_match_llama_cpp(void)
{
    char bad[256] = "";
    for (size_t i = 0; i < N_ARCH; i++) {
        fixture fx;
        uint8_t d[16];
        float *got;
        if (fixture_load(archs[i].name, &fx)) {
            CHECK_MSG(0, "fixture %s missing or unreadable (scripts/gguf_write.py, scripts/oracle/arch_logits.sh)",
                      archs[i].name);
            fixture_free(&fx);
            continue;
        }
        got = run(&fx, 1, SKV_KERNELS_AUTO, NULL, d);
        CHECK_MSG(got != NULL, "%s: run failed", archs[i].name);
        if (got) {
            agreement a = compare(fx.want, got, fx.n, fx.V);
            printf("# %-6s vs llama.cpp: %zu positions, top-1 %.4f, max|diff| %.3g, max KL %.3g\n", archs[i].name, fx.n,
                   a.top1, a.max_abs, a.max_kl);
            if (!within(&archs[i], a)) snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " %s", archs[i].name);
        }
        free(got);
        fixture_free(&fx);
    }
    CHECK_MSG(!bad[0], "outside the bounds (see the # lines):%s", bad);
}

/* Chunkings of the 100 fixture tokens (0-terminated): ragged prefills and single decodes. */
static const size_t chunks_a[] = {7, 1, 1, 13, 2, 33, 1, 42, 0};
static const size_t chunks_b[] = {50, 50, 0};

static int same_run(const fixture *fx, const float *ref, const uint8_t *dref, int threads, int kernels,
                    const size_t *chunks)
{
    uint8_t d[16];
    float *lg = run(fx, threads, kernels, chunks, d);
    int ok = lg && !memcmp(lg, ref, fx->n * fx->V * sizeof *lg) && !memcmp(d, dref, 16);
    free(lg);
    return ok;
}

/* Two contexts at positions 50 and 30 stepped together by skv_decode_multi: each row's
 * logits are the single-context run's at that position (windowed layers included). */
static int multi_matches(const fixture *fx, const float *ref)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c[2] = {NULL, NULL};
    size_t at[2] = {50, 30}, V = fx->V;
    float *lg = malloc(2 * V * sizeof *lg);
    int ok = lg != NULL;
    p.n_ctx = 256;
    for (int i = 0; i < 2 && ok; i++)
        ok = skv_ctx_create(fx->m, &p, &c[i]) == SKV_OK && skv_prefill(c[i], fx->tok, at[i], SKV_LOGITS_NONE, NULL) == SKV_OK;
    for (size_t step = 0; step < 20 && ok; step++) {
        int32_t t[2] = {fx->tok[at[0] + step], fx->tok[at[1] + step]};
        ok = skv_decode_multi(c, t, 2, lg) == SKV_OK && !memcmp(lg, ref + (at[0] + step) * V, V * sizeof *lg) &&
             !memcmp(lg + V, ref + (at[1] + step) * V, V * sizeof *lg);
    }
    skv_ctx_free(c[0]);
    skv_ctx_free(c[1]);
    free(lg);
    return ok;
}

static void check_invariance(const char *arch, const fixture *fx)
{
    size_t *tbt = malloc((fx->n + 1) * sizeof *tbt);
    uint8_t dref[16];
    float *ref = run(fx, 1, SKV_KERNELS_SCALAR, NULL, dref);
    CHECK_MSG(ref && tbt, "%s: reference run failed", arch);
    if (ref && tbt) {
        for (size_t i = 0; i < fx->n; i++) tbt[i] = 1;
        tbt[fx->n] = 0;
        CHECK_MSG(same_run(fx, ref, dref, 1, SKV_KERNELS_AUTO, NULL), "%s: scalar and AUTO kernels differ", arch);
        CHECK_MSG(same_run(fx, ref, dref, 2, SKV_KERNELS_AUTO, NULL), "%s: 1 and 2 threads differ", arch);
        CHECK_MSG(same_run(fx, ref, dref, 2, SKV_KERNELS_AUTO, chunks_a), "%s: ragged chunks differ", arch);
        CHECK_MSG(same_run(fx, ref, dref, 1, SKV_KERNELS_AUTO, chunks_b), "%s: two halves differ", arch);
        CHECK_MSG(same_run(fx, ref, dref, 1, SKV_KERNELS_AUTO, tbt), "%s: token-by-token differs", arch);
        CHECK_MSG(multi_matches(fx, ref), "%s: decode_multi differs from single decodes", arch);
    }
    free(ref);
    free(tbt);
}

static void bit_exact_per_architecture(void)
{
    for (size_t i = 0; i < N_ARCH; i++) {
        fixture fx;
        if (fixture_load(archs[i].name, &fx) == 0) check_invariance(archs[i].name, &fx);
        else CHECK_MSG(0, "fixture %s missing", archs[i].name);
        fixture_free(&fx);
    }
}

/* seqkv info's "architecture:" line names each row's steps; a short buffer is RANGE. */
static void arch_steps_describe_the_rows(void)
{
    static const char *const want[N_ARCH] = {"adjacent-pair RoPE", "Q/K/V biases", "per-head Q/K RMSNorm",
                                             "fused QKV, fused gate|up, RoPE attention factor 1.19",
                                             "attention soft-cap 1.5, logit soft-cap 6, sliding window 8 on 2 of 4",
                                             "sliding window 8 on 5 of 6 layers (own RoPE base)"};
    for (size_t i = 0; i < N_ARCH; i++) {
        fixture fx;
        char buf[512], small[8];
        if (fixture_load(archs[i].name, &fx)) {
            CHECK_MSG(0, "fixture %s missing", archs[i].name);
            fixture_free(&fx);
            continue;
        }
        CHECK(skv_model_arch_steps(fx.m, buf, sizeof buf) == SKV_OK);
        CHECK_MSG(strstr(buf, want[i]) != NULL, "%s: '%s' lacks '%s'", archs[i].name, buf, want[i]);
        CHECK(skv_model_arch_steps(fx.m, small, sizeof small) == SKV_ERR_RANGE && strlen(small) < sizeof small);
        fixture_free(&fx);
    }
    CHECK(skv_model_arch_steps(NULL, NULL, 0) == SKV_ERR_INVALID_ARG);
}

int main(void)
{
    TEST_BEGIN("test_arch");
    RUN(logits_match_llama_cpp);
    RUN(bit_exact_per_architecture);
    RUN(arch_steps_describe_the_rows);
    TEST_END();
}
