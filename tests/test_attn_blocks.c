/* Position-blocked attention (docs/determinism.md, "Attention"): the kernels walk K and V in
 * blocks of absolute positions, and no result may depend on it.
 * - Kernel level: the AVX2 kernel equals the scalar reference bit for bit on random rows at
 *   lengths that cross several key blocks (head_dim 64: blocks of 64 positions; 40: 96;
 *   20, not a multiple of 8: the generic path), with groups of 1..16 rows of unequal
 *   lengths; and a row computed alone equals the same row computed inside any group.
 * - Engine level (bundled model, head_dim 64): a prefill of N_TOK tokens, the same tokens in
 *   chunks that end inside blocks, and token by token give the same logits and KV digest,
 *   at 1 and 2 threads, scalar and AVX2 kernels. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "seqkv.h"
#include "test.h"

#define MAXN 700 /* longest row of the kernel checks */
#define N_TOK 200 /* engine checks: 4 key blocks of 64 positions */

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

/* Feeds tok[0..N_TOK) in chunks of sizes sz[] (cycled; 0 ends a cycle), or one by one. */
static int run(const skv_model *m, int threads, int kernels, const size_t *sz, const int32_t *tok, outcome *o)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c;
    p.n_ctx = N_TOK;
    p.n_threads = threads;
    p.kernels = kernels;
    if (skv_ctx_create(m, &p, &c)) return 0;
    int rc = 0;
    for (size_t done = 0, i = 0, n; done < N_TOK && !rc; done += n, i++) {
        if (!sz[i]) i = 0;
        n = sz[i] < N_TOK - done ? sz[i] : N_TOK - done;
        rc = skv_prefill(c, tok + done, n, done + n == N_TOK ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, o->logits);
    }
    if (!rc) rc = skv_ctx_kv_digest(c, N_TOK, o->digest);
    skv_ctx_free(c);
    return rc == 0;
}

static void engine_orders(void)
{
    char err[256];
    skv_model *m;
    skv_model_info info;
    static int32_t tok[N_TOK];
    static outcome ref, o;
    static const size_t whole[] = {N_TOK, 0}, odd[] = {37, 64, 1, 90, 5, 0}, ones[] = {1, 0};
    static const size_t *const plans[] = {whole, odd, ones};
    CHECK(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK);
    skv_model_get_info(m, &info);
    CHECK(info.n_vocab <= 4096 && info.head_dim == 64);
    for (int i = 0; i < N_TOK; i++) tok[i] = (int32_t)(rnd() % (uint32_t)info.n_vocab);
    CHECK(run(m, 1, SKV_KERNELS_AUTO, whole, tok, &ref));
    int kernels[2] = {SKV_KERNELS_SCALAR, skv_kernels_avx2() ? SKV_KERNELS_AVX2 : SKV_KERNELS_SCALAR};
    for (int t = 1; t <= 2; t++)
        for (int k = 0; k < 2; k++)
            for (int pl = 0; pl < 3; pl++) {
                if (kernels[k] == SKV_KERNELS_SCALAR && (pl == 2 || t == 2)) continue; /* slow; the same code */
                CHECK(run(m, t, kernels[k], plans[pl], tok, &o));
                CHECK(memcmp(ref.logits, o.logits, (size_t)info.n_vocab * sizeof(float)) == 0);
                CHECK(memcmp(ref.digest, o.digest, 16) == 0);
            }
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_attn_blocks");
    RUN(kernel_twins);
    RUN(engine_orders);
    TEST_END();
}
