/* Position-blocked attention (docs/determinism.md, "Attention"): the kernels walk K and V in
 * blocks of absolute positions, and no result may depend on it.
 * - Kernel level: the AVX2 kernel equals the scalar reference bit for bit on random rows at
 *   lengths that cross several key blocks (head_dim 64: blocks of 64 positions; 40: 96;
 *   20, not a multiple of 8: the generic path), with groups of 1..16 rows of unequal
 *   lengths; and a row computed alone equals the same row computed inside any group.
 * - Engine level (bundled model, head_dim 64): a prefill of N_TOK tokens, the same tokens in
 *   chunks that end inside blocks, and token by token give the same logits and KV digest,
 *   at 1 and 2 threads, scalar and AVX2 kernels.
 * Under AddressSanitizer (make san) the scalar engine runs were ~90% of this test's time
 * (the reference matmul: one fmaf call per weight, ASan- and UBSan-checked). There the
 * scalar kernels run once, on N_TOK_SCALAR tokens in chunks (37, 1, 29, 5: across the
 * block edge at 64, ending inside both blocks, one a single token), compared with an AVX2
 * prefill of the same tokens; the whole-prefill scalar run (the same batch code as the
 * 37- and 29-token chunks) is left out. The AVX2 runs keep N_TOK and every plan; the
 * release and clang builds run everything at N_TOK. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "engine/ops.h"
#include "seqkv.h"
#include "test.h"

#define MAXN 700 /* longest row of the kernel checks */
#define N_TOK 200 /* engine checks: 4 key blocks of 64 positions */

/* Tokens of the scalar engine runs: 2 key blocks under sanitizers (see the top). */
#define N_TOK_SCALAR (TEST_SANITIZED ? 72 : N_TOK)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static void fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = ((float)(rnd() & 0xffffff) / 16777216.0f - 0.5f) * 4.0f;
}

/* Rows i < nq of one call: out rows at out + i*hd, lengths n[i], queries at q + i*hd. */
static void call(const skv_kernels *k, float *out, const float *q, const size_t *n, size_t nq, const float *K,
                 const float *V, size_t hd, float *scores)
{
    float *op[SKV_ATTN_MAX_Q];
    const float *qp[SKV_ATTN_MAX_Q];
    size_t n_max = 0;
    for (size_t i = 0; i < nq; i++) {
        op[i] = out + i * hd;
        qp[i] = q + i * hd;
        n_max = n[i] > n_max ? n[i] : n_max;
    }
    k->attn(op, qp, n, nq, K, V, hd, 0.125f, scores, n_max);
}

/* One random group: avx2 == scalar, and every row == that row computed alone. */
static int group_ok(const skv_kernels *fast, size_t hd, const float *K, const float *V, const float *q,
                    float *scores)
{
    size_t nq = 1 + rnd() % SKV_ATTN_MAX_Q, n[SKV_ATTN_MAX_Q], base = 1 + rnd() % (MAXN - 20);
    float a[SKV_ATTN_MAX_Q * 64], b[SKV_ATTN_MAX_Q * 64], one[64];
    for (size_t i = 0; i < nq; i++) n[i] = base + rnd() % 20; /* unequal, some crossing a block edge */
    call(skv_kernels_scalar(), a, q, n, nq, K, V, hd, scores);
    call(fast, b, q, n, nq, K, V, hd, scores);
    if (memcmp(a, b, nq * hd * sizeof(float))) return 0;
    for (size_t i = 0; i < nq; i++) {
        call(fast, one, q + i * hd, n + i, 1, K, V, hd, scores);
        if (memcmp(one, b + i * hd, hd * sizeof(float))) return 0;
    }
    return 1;
}

static void kernel_twins(void)
{
    const skv_kernels *fast = skv_kernels_avx2() ? skv_kernels_avx2() : skv_kernels_scalar(); /* no AVX2: trivial */
    static const size_t hds[] = {64, 40, 20};
    float *K = malloc(MAXN * 64 * sizeof(float)), *V = malloc(MAXN * 64 * sizeof(float));
    float *q = malloc(SKV_ATTN_MAX_Q * 64 * sizeof(float)), *scores = malloc(SKV_ATTN_MAX_Q * MAXN * sizeof(float));
    CHECK(K && V && q && scores);
    fill(K, MAXN * 64);
    fill(V, MAXN * 64);
    fill(q, SKV_ATTN_MAX_Q * 64);
    int ok = 1;
    for (size_t h = 0; h < 3; h++)
        for (int it = 0; it < 40 && ok; it++) ok = group_ok(fast, hds[h], K, V, q, scores);
    CHECK(ok);
    free(K);
    free(V);
    free(q);
    free(scores);
}

typedef struct {
    float logits[4096]; /* last token's */
    uint8_t digest[16];
} outcome;

static int g_kv_type = SKV_KV_CACHE_F32; /* the cache type run() creates */

/* Feeds tok[0..n_tok) in chunks of sizes sz[] (cycled; 0 ends a cycle), or one by one. */
static int run(const skv_model *m, int threads, int kernels, const size_t *sz, const int32_t *tok, size_t n_tok,
               outcome *o)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c;
    p.n_ctx = N_TOK;
    p.kv_cache_type = g_kv_type;
    p.n_threads = threads;
    p.kernels = kernels;
    if (skv_ctx_create(m, &p, &c)) return 0;
    int rc = 0;
    for (size_t done = 0, i = 0, n; done < n_tok && !rc; done += n, i++) {
        if (!sz[i]) i = 0;
        n = sz[i] < n_tok - done ? sz[i] : n_tok - done;
        rc = skv_prefill(c, tok + done, n, done + n == n_tok ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, o->logits);
    }
    if (!rc) rc = skv_ctx_kv_digest(c, (int)n_tok, o->digest);
    skv_ctx_free(c);
    return rc == 0;
}

/* Every feeding order, thread count and kernel set gives the reference's bytes. */
static void engine_orders(void)
{
    char err[256];
    skv_model *m;
    skv_model_info info;
    static int32_t tok[N_TOK];
    static outcome ref, ref_s, o;
    static const size_t whole[] = {N_TOK, 0}, odd[] = {37, 64, 1, 90, 5, 0}, ones[] = {1, 0};
    static const size_t odd_short[] = {37, 1, 29, 5, 0}; /* 72 tokens: ends at 37, 38, 67, 72 */
    static const size_t *const plans[] = {whole, odd, ones};
    CHECK(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK);
    skv_model_get_info(m, &info);
    CHECK(info.n_vocab <= 4096 && info.head_dim == 64);
    for (int i = 0; i < N_TOK; i++) tok[i] = (int32_t)(rnd() % (uint32_t)info.n_vocab);
    CHECK(run(m, 1, SKV_KERNELS_AUTO, whole, tok, N_TOK, &ref));
    ref_s = ref;
    if (N_TOK_SCALAR != N_TOK) CHECK(run(m, 1, SKV_KERNELS_AUTO, whole, tok, N_TOK_SCALAR, &ref_s));
    int kernels[2] = {SKV_KERNELS_SCALAR, skv_kernels_avx2() ? SKV_KERNELS_AVX2 : SKV_KERNELS_SCALAR};
    for (int t = 1; t <= 2; t++)
        for (int k = 0; k < 2; k++)
            for (int pl = 0; pl < 3; pl++) {
                int scalar = kernels[k] == SKV_KERNELS_SCALAR;
                if (scalar && (pl == 2 || t == 2)) continue; /* slow; the same code */
                if (scalar && TEST_SANITIZED && pl == 0) continue;  /* see the top of the file */
                const size_t *plan = scalar && N_TOK_SCALAR != N_TOK && pl == 1 ? odd_short : plans[pl];
                const outcome *want = scalar ? &ref_s : &ref;
                CHECK(run(m, t, kernels[k], plan, tok, scalar ? N_TOK_SCALAR : N_TOK, &o));
                CHECK(memcmp(want->logits, o.logits, (size_t)info.n_vocab * sizeof(float)) == 0);
                CHECK(memcmp(want->digest, o.digest, 16) == 0);
            }
    skv_model_free(m);
}

static void engine_orders_f16(void)
{
    g_kv_type = SKV_KV_CACHE_F16;
    engine_orders();
    g_kv_type = SKV_KV_CACHE_F32;
}

static skv_ctx *new_ctx(const skv_model *m, int kv_type)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = N_TOK;
    p.kv_cache_type = kv_type;
    return skv_ctx_create(m, &p, &c) == SKV_OK ? c : NULL;
}

/* An f16 cache holds the f16 roundings of what is written (layer 0's K and V are those of
 * an f32 run, rounded; kv_write rounds too); a prefix read and loaded into a fresh f16
 * context continues exactly; the refused combinations say so. */
static void f16_semantics(void)
{
    char err[256];
    skv_model *m;
    skv_model_info info;
    static int32_t tok[N_TOK];
    static float a[N_TOK * 2 * 8 * 64 * 8], b[N_TOK * 2 * 8 * 64 * 8];
    static float la[4096], lb[4096];
    const float *view;
    uint8_t da[16], db[16];
    CHECK(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK);
    skv_model_get_info(m, &info);
    size_t per = (size_t)info.n_layer * 2 * (size_t)info.n_head_kv * (size_t)info.head_dim, hd = (size_t)info.head_dim;
    CHECK(per * 100 <= sizeof a / sizeof a[0]);
    for (int i = 0; i < N_TOK; i++) tok[i] = (int32_t)(rnd() % (uint32_t)info.n_vocab);
    skv_ctx *c32 = new_ctx(m, SKV_KV_CACHE_F32), *c16 = new_ctx(m, SKV_KV_CACHE_F16), *c2 = new_ctx(m, SKV_KV_CACHE_F16);
    CHECK(c32 && c16 && c2 && skv_ctx_kv_cache_type(c16) == SKV_KV_CACHE_F16 && skv_ctx_kv_cache_type(c32) == 0);
    CHECK(skv_prefill(c32, tok, 100, SKV_LOGITS_NONE, NULL) == SKV_OK && skv_prefill(c16, tok, 100, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_ctx_kv_read(c32, 0, 100, a) == SKV_OK && skv_ctx_kv_read(c16, 0, 100, b) == SKV_OK);
    for (size_t i = 0; i < 2 * (size_t)info.n_head_kv * 100 * hd; i++) /* layer 0: K heads, V heads */
        CHECK_MSG(b[i] == skv_f16_to_f32(skv_f32_to_f16(a[i])) || (a[i] != a[i] && b[i] != b[i]), "layer 0 value %zu: %g vs f16(%g)", i, (double)b[i], (double)a[i]);
    CHECK(skv_ctx_kv_write(c2, 0, 100, a) == SKV_OK && skv_ctx_kv_read(c2, 0, 100, a) == SKV_OK);
    for (size_t i = 0; i < per * 100; i++) CHECK(a[i] == skv_f16_to_f32(skv_f32_to_f16(a[i]))); /* kv_write rounded */
    /* resume: the f16 prefix reloaded continues bit for bit */
    CHECK(skv_ctx_kv_write(c2, 0, 100, b) == SKV_OK);
    CHECK(skv_prefill(c16, tok + 100, N_TOK - 100, SKV_LOGITS_LAST, la) == SKV_OK);
    CHECK(skv_prefill(c2, tok + 100, N_TOK - 100, SKV_LOGITS_LAST, lb) == SKV_OK);
    CHECK(memcmp(la, lb, (size_t)info.n_vocab * sizeof(float)) == 0);
    CHECK(skv_ctx_kv_digest(c16, N_TOK, da) == SKV_OK && skv_ctx_kv_digest(c2, N_TOK, db) == SKV_OK && !memcmp(da, db, 16));
    CHECK(skv_ctx_kv_view(c16, 0, 0, 0, &view) == SKV_ERR_UNSUPPORTED);
    skv_ctx *pair[2] = {c16, c32};
    int32_t two[2] = {1, 2};
    skv_ctx_truncate(c16, 10);
    skv_ctx_truncate(c32, 10);
    CHECK(skv_decode_multi(pair, two, 2, NULL) == SKV_ERR_UNSUPPORTED);
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *bad = NULL;
    p.kv_cache_type = SKV_KV_CACHE_F16;
    p.kv_quant = "kv=q8_0";
    CHECK(skv_ctx_create(m, &p, &bad) == SKV_ERR_INVALID_ARG && !bad);
    p.kv_quant = NULL;
    p.kv_cache_type = 7;
    CHECK(skv_ctx_create(m, &p, &bad) == SKV_ERR_INVALID_ARG && !bad);
    skv_ctx_free(c32);
    skv_ctx_free(c16);
    skv_ctx_free(c2);
    skv_model_free(m);
}

/* A session made with an f16 cache: flagged, verifies in an f16 context (tokens and model
 * codecs), refused with a clear message by an f32 one; an f32 session is refused by f16. */
static void f16_sessions(void)
{
    char err[256];
    skv_model *m;
    static int32_t tok[64], back[64];
    CHECK(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK);
    for (int i = 0; i < 64; i++) tok[i] = (int32_t)(1 + rnd() % 4000);
    for (int codec = 0; codec < 2; codec++)
        for (int made = 0; made < 2; made++) {
            skv_encoder_params ep = skv_encoder_default_params();
            skv_encoder *e;
            skv_session *s;
            skv_session_info info;
            uint8_t *data;
            size_t size;
            ep.codec = codec;
            ep.n_ctx = 64;
            ep.kv_cache_type = made;
            CHECK(skv_encoder_create(m, &ep, &e, err, sizeof err) == SKV_OK);
            CHECK(skv_encoder_append(e, tok, 64, NULL) == SKV_OK && skv_encoder_finish(e, &data, &size) == SKV_OK);
            skv_encoder_free(e);
            CHECK(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK);
            CHECK(skv_session_get_info(s, &info) == SKV_OK && info.kv_cache_type == made);
            for (int into = 0; into < 2; into++) {
                skv_ctx *c = new_ctx(m, into);
                skv_restore_params rp = {.verify = 1};
                CHECK(c);
                int rc = skv_session_restore_segment(s, m, 0, c, &rp, back, 64);
                CHECK_MSG(rc == (made == into ? SKV_OK : SKV_ERR_MISMATCH), "codec %d made %d into %d: %d %s", codec, made,
                          into, rc, skv_ctx_last_error(c));
                if (made != into) CHECK_MSG(strstr(skv_ctx_last_error(c), "kv_cache_type") != NULL, "%s", skv_ctx_last_error(c));
                else CHECK(memcmp(back, tok, sizeof tok) == 0);
                skv_ctx_free(c);
            }
            skv_session_free(s);
            free(data);
        }
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_attn_blocks");
    RUN(kernel_twins);
    RUN(engine_orders);
    RUN(engine_orders_f16);
    RUN(f16_semantics);
    RUN(f16_sessions);
    TEST_END();
}
