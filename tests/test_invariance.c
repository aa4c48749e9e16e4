/* Bit-exactness on the bundled model (models/kjv-4m.gguf), so a fresh clone without
 * ../shared proves it too (docs/determinism.md), and on every committed llama-quantize'd
 * fixture of it (the .gguf files in tests/data/oracle: q8_0, q4_0, q4_1, q5_0, q2_k, q3_k, q4_k, q6_k,
 * iq4_xs weights), so each weight type's kernels are checked the same way: one prefill vs
 * threads, batch sizes, token by token, chunks, scalar vs AVX2 vs the fastest kernels.
 * Public API only (include/seqkv.h).
 *
 * One reference run (one prefill, 1 thread, fastest kernels) over N_TOK held-out tokens
 * gives every position's logits, the whole KV cache (skv_ctx_kv_read) and its digest.
 * Every other way of running the same tokens must give the same bytes: 2 threads, random
 * chunkings at 1 and 2 threads, token by token (skv_decode), a small max_batch, the
 * scalar reference kernels, and a run resumed from a KV prefix loaded with
 * skv_ctx_kv_write. Compared with memcmp: not a tolerance, the very same bits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "test.h"

/* The models, bundled first; the fixtures are in git, so a missing one is a failure. */
static const char *const MODELS[] = {
    "models/kjv-4m.gguf", "tests/data/oracle/Q8_0.gguf", "tests/data/oracle/Q4_0_PURE.gguf",
    "tests/data/oracle/Q4_0.gguf", "tests/data/oracle/Q4_1.gguf", "tests/data/oracle/Q5_0.gguf",
    "tests/data/oracle/Q2_K.gguf", "tests/data/oracle/Q3_K_M.gguf", "tests/data/oracle/IQ4_XS.gguf",
};
static const char *MODEL;
/* Under AddressSanitizer (make san) the bundled model and two fixtures: the others are the
 * same code on other weight types, checked by the release and clang runs. */
#if defined(__SANITIZE_ADDRESS__)
enum { N_MODELS = 3 };
#else
enum { N_MODELS = sizeof MODELS / sizeof MODELS[0] };
#endif
#define TEXT "tests/data/model_ref/heldout.txt"
#define N_TOK 128 /* BOS + 127 held-out tokens: crosses the 8-token threading threshold many times */

/* How one run feeds the tokens. chunks: sizes ending with 0 (NULL: one prefill). */
typedef struct plan {
    int threads;
    int kernels;          /* SKV_KERNELS_* */
    int max_batch;        /* 0 = the default */
    int by_decode;        /* 1: skv_decode per token instead of prefill */
    const size_t *chunks;
    int resume_at;        /* > 0: load the reference KV of positions [0, resume_at) first */
} plan;

typedef struct result {
    float *logits;        /* (N_TOK, n_vocab) */
    float *kv;            /* canonical order: (layer, kind, kv_head, N_TOK, head_dim) */
    uint8_t digest[16];   /* skv_ctx_kv_digest of all N_TOK positions */
} result;

static skv_model *g_m;
static skv_model_info g_info;
static int32_t g_tok[N_TOK];
static result g_ref;
static char g_why[512];

static size_t n_logits(void) { return (size_t)N_TOK * (size_t)g_info.n_vocab; }

static size_t n_kv(size_t n_pos)
{
    return (size_t)g_info.n_layer * 2 * (size_t)g_info.n_head_kv * n_pos * (size_t)g_info.head_dim;
}

static void result_free(result *r)
{
    free(r->logits);
    free(r->kv);
    memset(r, 0, sizeof *r);
}

/* Reads the first bytes of TEXT and tokenizes them with BOS into g_tok. */
static int load_tokens(void)
{
    char text[4096];
    size_t got, need = 0;
    FILE *f = fopen(TEXT, "rb");
    if (!f) return 0;
    got = fread(text, 1, sizeof text, f);
    fclose(f);
    int32_t *all = malloc(got * sizeof *all + 16 * sizeof *all);
    int ok = all && skv_tokenize(g_m, text, got, 1, all, got + 16, &need) == SKV_OK && need >= N_TOK;
    if (ok) memcpy(g_tok, all, sizeof g_tok);
    free(all);
    return ok;
}

/* Feeds tokens [pos, pos + n) one way or the other; logits rows land at their positions. */
static int feed(skv_ctx *c, const plan *p, size_t pos, size_t n, float *logits)
{
    size_t nv = (size_t)g_info.n_vocab;
    if (!p->by_decode) return skv_prefill(c, g_tok + pos, n, SKV_LOGITS_ALL, logits + pos * nv);
    for (size_t i = pos; i < pos + n; i++) {
        int rc = skv_decode(c, g_tok[i], logits + i * nv);
        if (rc != SKV_OK) return rc;
    }
    return SKV_OK;
}

/* Loads the reference KV of the first p->resume_at positions and its logits rows. */
static int resume(skv_ctx *c, const plan *p, float *logits)
{
    size_t n = (size_t)p->resume_at, nv = (size_t)g_info.n_vocab;
    size_t hd = (size_t)g_info.head_dim, blocks = n_kv(1) / hd; /* (layer, kind, kv_head) blocks */
    float *kv = malloc(n_kv(n) * sizeof *kv);
    if (!kv) return SKV_ERR_NOMEM;
    /* the canonical order puts positions inside each block: copy each block's prefix */
    for (size_t b = 0; b < blocks; b++)
        memcpy(kv + b * n * hd, g_ref.kv + b * N_TOK * hd, n * hd * sizeof *kv);
    int rc = skv_ctx_kv_write(c, 0, p->resume_at, kv);
    free(kv);
    memcpy(logits, g_ref.logits, n * nv * sizeof *logits);
    return rc;
}

static int feed_plan(skv_ctx *c, const plan *p, float *logits)
{
    size_t pos = p->resume_at > 0 ? (size_t)p->resume_at : 0;
    int rc = pos ? resume(c, p, logits) : SKV_OK;
    for (size_t i = 0; rc == SKV_OK && pos < N_TOK; i++) {
        size_t n = p->chunks ? p->chunks[i] : N_TOK - pos;
        if (n == 0 || n > N_TOK - pos) n = N_TOK - pos;
        rc = feed(c, p, pos, n, logits);
        pos += n;
    }
    return rc;
}

/* Runs the N_TOK tokens as p says into a fresh context; 0 on success. */
static int run_plan(const plan *p, result *out)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    cp.n_ctx = N_TOK;
    cp.n_threads = p->threads;
    cp.kernels = p->kernels;
    cp.max_batch = p->max_batch;
    memset(out, 0, sizeof *out);
    out->logits = malloc(n_logits() * sizeof *out->logits);
    out->kv = malloc(n_kv(N_TOK) * sizeof *out->kv);
    int rc = out->logits && out->kv ? skv_ctx_create(g_m, &cp, &c) : SKV_ERR_NOMEM;
    if (rc == SKV_OK) rc = feed_plan(c, p, out->logits);
    if (rc == SKV_OK) rc = skv_ctx_kv_read(c, 0, N_TOK, out->kv);
    if (rc == SKV_OK) rc = skv_ctx_kv_digest(c, N_TOK, out->digest);
    if (rc != SKV_OK) snprintf(g_why, sizeof g_why, "%s", c ? skv_ctx_last_error(c) : skv_status_str(rc));
    skv_ctx_free(c);
    if (rc != SKV_OK) result_free(out);
    return rc == SKV_OK ? 0 : -1;
}

/* Which part of r differs from the reference, or NULL when every byte agrees. */
static const char *diff_from_ref(const result *r)
{
    if (memcmp(r->logits, g_ref.logits, n_logits() * sizeof *r->logits)) return "the logits differ";
    if (memcmp(r->kv, g_ref.kv, n_kv(N_TOK) * sizeof *r->kv)) return "the KV cache differs";
    if (memcmp(r->digest, g_ref.digest, sizeof r->digest)) return "the KV digest differs";
    return NULL;
}

/* Runs p: NULL when it gives the reference's bytes, else what went wrong. */
static const char *plan_differs(const plan *p)
{
    result r;
    if (run_plan(p, &r) != 0) return g_why;
    const char *d = diff_from_ref(&r);
    result_free(&r);
    return d;
}

/* A plan in words, for failure messages. */
static const char *plan_str(const plan *p)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%d thread(s), %s kernels, %s%s, max_batch %d, resumed at %d", p->threads,
             p->kernels == SKV_KERNELS_SCALAR ? "scalar" : p->kernels == SKV_KERNELS_AVX2 ? "AVX2" : "fastest", p->by_decode ? "skv_decode" : "skv_prefill",
             p->chunks ? " in chunks" : "", p->max_batch, p->resume_at);
    return buf;
}

/* Fails the case unless plan p gives the very bytes of the reference run. */
#define CHECK_SAME(p)                                                          \
    do {                                                                       \
        const char *d_ = plan_differs(&(p));                                   \
        CHECK_MSG(!d_, "%s vs one prefill at 1 thread: %s", plan_str(&(p)), d_); \
    } while (0)

/* CHECK_SAME for every plan of a static array. */
#define CHECK_ALL(plans)                                                       \
    for (size_t k_ = 0; k_ < sizeof(plans) / sizeof(plans)[0]; k_++) CHECK_SAME((plans)[k_])

/* The bundled model is part of the repository: its absence is a failure, not a skip. */
#define NEED_MODEL() CHECK_MSG(g_ref.logits != NULL, "no reference run: %s", g_why)

static void reference_is_sane(void)
{
    NEED_MODEL();
    int nonzero = 0;
    for (size_t i = 0; i < n_kv(N_TOK) && !nonzero; i++) nonzero = g_ref.kv[i] != 0.0f;
    CHECK_MSG(nonzero, "the reference KV cache is all zeros");
    CHECK_EQ_INT(g_tok[0], g_info.bos_id);
}

static void prefill_threads_and_batch(void)
{
    static const plan plans[] = {{.threads = 2}, {.threads = 1, .max_batch = 9}, {.threads = 2, .max_batch = 9}};
    NEED_MODEL();
    CHECK_ALL(plans);
}

static void token_by_token(void)
{
    static const plan plans[] = {{.threads = 1, .by_decode = 1}, {.threads = 2, .by_decode = 1}};
    NEED_MODEL();
    CHECK_ALL(plans);
}

/* Chunk sizes 1..37 from a fixed xorshift stream; out ends with 0. */
static void random_chunks(uint64_t seed, size_t *out)
{
    size_t left = N_TOK, i = 0;
    while (left) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        size_t c = 1 + (size_t)(seed % 37);
        out[i++] = c < left ? c : left;
        left -= out[i - 1];
    }
    out[i] = 0;
}

static void chunked_prefill(void)
{
    size_t chunks[N_TOK + 1];
    NEED_MODEL();
    for (int trial = 0; trial < 4; trial++) {
        random_chunks(0x9e3779b97f4a7c15ull + (uint64_t)trial, chunks);
        plan p = {.threads = 1 + trial % 2, .chunks = chunks};
        CHECK_SAME(p);
    }
}

static void scalar_kernels(void)
{
    static const size_t chunks[] = {1, 7, 64, 0};
    static const plan plans[] = {{.threads = 2, .kernels = SKV_KERNELS_SCALAR},
                                 {.threads = 1, .kernels = SKV_KERNELS_SCALAR, .chunks = chunks}};
    NEED_MODEL();
    CHECK_ALL(plans);
}

/* The AVX2 kernels (the fastest is AVX-512 where the CPU has it): same bytes. */
static void avx2_kernels(void)
{
    static const size_t chunks[] = {3, 50, 0};
    static const plan plans[] = {{.threads = 2, .kernels = SKV_KERNELS_AVX2},
                                 {.threads = 1, .kernels = SKV_KERNELS_AVX2, .chunks = chunks}};
    NEED_MODEL();
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    cp.kernels = SKV_KERNELS_AVX2;
    if (skv_ctx_create(g_m, &cp, &c) == SKV_ERR_UNSUPPORTED) SKIP("this CPU has no AVX2");
    skv_ctx_free(c);
    CHECK_ALL(plans);
}

/* skv_ctx_kv_write of the reference's first positions, then the rest run on top. */
static void resume_from_loaded_kv(void)
{
    static const plan plans[] = {{.threads = 2, .resume_at = 77}, {.threads = 1, .resume_at = 100, .by_decode = 1}};
    NEED_MODEL();
    CHECK_ALL(plans);
}

static int setup(void)
{
    char err[256] = "";
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        snprintf(g_why, sizeof g_why, "%s: %s", MODEL, err);
        return 0;
    }
    skv_model_get_info(g_m, &g_info);
    if (!load_tokens()) {
        snprintf(g_why, sizeof g_why, "cannot read and tokenize %d tokens of %s", N_TOK, TEXT);
        return 0;
    }
    plan ref = {.threads = 1};
    return run_plan(&ref, &g_ref) == 0;
}

/* Runs every case on one model; case names carry the model's file name. */
static void run_model(const char *path)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"reference_is_sane", reference_is_sane}, {"prefill_threads_and_batch", prefill_threads_and_batch},
        {"token_by_token", token_by_token},       {"chunked_prefill", chunked_prefill},
        {"scalar_kernels", scalar_kernels},       {"avx2_kernels", avx2_kernels},
        {"resume_from_loaded_kv", resume_from_loaded_kv},
    };
    const char *base = strrchr(path, '/');
    char name[160];
    MODEL = path;
    g_m = NULL;
    memset(&g_ref, 0, sizeof g_ref);
    setup();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (path == MODELS[0]) snprintf(name, sizeof name, "%s", cases[i].name);
        else snprintf(name, sizeof name, "%s[%s]", cases[i].name, base ? base + 1 : path);
        test_run_case(name, cases[i].fn);
    }
    result_free(&g_ref);
    skv_model_free(g_m);
}

int main(void)
{
    TEST_BEGIN("test_invariance");
    for (size_t i = 0; i < (size_t)N_MODELS; i++) run_model(MODELS[i]);
    TEST_END();
}
