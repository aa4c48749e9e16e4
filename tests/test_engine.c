/* Engine determinism: GGUF vs llama2.c forms, prefill vs decode vs random chunkings,
 * thread counts, scalar vs AVX2 kernels. Every comparison is bit-for-bit. */
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "engine/arch.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "seqkv.h"
#include "test.h"

#define NTOK 200

static skv_model *load(const char *file)
{
    char path[1024], err[256];
    skv_model *m = NULL;
    if (!test_stories_path(path, sizeof path, file)) return NULL;
    if (skv_model_load(path, NULL, &m, err, sizeof err) != SKV_OK) {
        fprintf(stderr, "load %s: %s\n", path, err);
        return NULL;
    }
    return m;
}

/* Deterministic pseudo-random token ids (BOS first). */
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

/* chunks: NULL = one prefill; otherwise sizes summing to n (0-terminated). */
static int run(const skv_model *m, const int32_t *tok, size_t n, int threads, int kernels, const size_t *chunks,
               run_result *r)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c;
    skv_model_info info;
    skv_model_get_info(m, &info);
    p.n_threads = threads;
    p.kernels = kernels;
    if (skv_ctx_create(m, &p, &c) != SKV_OK) return -1;
    r->logits = malloc(n * (size_t)info.n_vocab * sizeof(float));
    size_t done = 0;
    if (!chunks) {
        if (skv_prefill(c, tok, n, SKV_LOGITS_ALL, r->logits)) return -1;
    } else {
        for (size_t i = 0; chunks[i]; i++) {
            if (chunks[i] == 1) {
                if (skv_decode(c, tok[done], r->logits + done * (size_t)info.n_vocab)) return -1;
            } else if (skv_prefill(c, tok + done, chunks[i], SKV_LOGITS_ALL, r->logits + done * (size_t)info.n_vocab)) {
                return -1;
            }
            done += chunks[i];
        }
    }
    skv_ctx_kv_digest(c, (int)n, r->digest);
    skv_ctx_free(c);
    return 0;
}

static int same(const run_result *a, const run_result *b, size_t nfloats)
{
    return !memcmp(a->logits, b->logits, nfloats * sizeof(float)) && !memcmp(a->digest, b->digest, 16);
}

static void gguf_and_llama2c_forms_agree(void)
{
    skv_model *g = load("stories260K.gguf"), *b = load("stories260K.bin");
    int32_t tok[NTOK];
    run_result rg, rb;
    skv_model_info ig, ib;
    if (!g || !b) {
        skv_model_free(g);
        skv_model_free(b);
        SKIP("../shared/models/stories260K not available");
    }
    skv_model_get_info(g, &ig);
    skv_model_get_info(b, &ib);
    CHECK_EQ_INT(ig.n_vocab, ib.n_vocab);
    CHECK_EQ_INT(ig.n_layer, ib.n_layer);
    CHECK_EQ_INT(ig.n_head_kv, ib.n_head_kv);
    CHECK_MSG(!strcmp(ig.arch, "llama") && !strcmp(ib.arch, "llama"), "arch names %s / %s", ig.arch, ib.arch);
    make_tokens(tok, NTOK, ig.n_vocab, 1);
    CHECK(run(g, tok, NTOK, 1, SKV_KERNELS_AUTO, NULL, &rg) == 0);
    CHECK(run(b, tok, NTOK, 1, SKV_KERNELS_AUTO, NULL, &rb) == 0);
    CHECK_MSG(same(&rg, &rb, (size_t)NTOK * (size_t)ig.n_vocab), "GGUF and llama2.c logits/KV differ");
    uint8_t fg[16], fb[16];
    CHECK(skv_model_fingerprint(g, fg) == SKV_OK && skv_model_fingerprint(b, fb) == SKV_OK);
    CHECK_MSG(!memcmp(fg, fb, 16), "fingerprints of the two forms differ");
    free(rg.logits);
    free(rb.logits);
    skv_model_free(g);
    skv_model_free(b);
}

static void batch_and_thread_invariance(void)
{
    skv_model *m = load("stories260K.gguf");
    int32_t tok[NTOK];
    run_result ref, r;
    skv_model_info info;
    size_t chunks[NTOK + 1];
    if (!m) SKIP("../shared/models/stories260K not available");
    skv_model_get_info(m, &info);
    size_t nf = (size_t)NTOK * (size_t)info.n_vocab;
    make_tokens(tok, NTOK, info.n_vocab, 2);
    CHECK(run(m, tok, NTOK, 1, SKV_KERNELS_AUTO, NULL, &ref) == 0);
    for (size_t i = 0; i < NTOK; i++) chunks[i] = 1; /* token by token */
    chunks[NTOK] = 0;
    /* the scalar reference kernels (slow): one batched and one token-by-token run */
    CHECK(run(m, tok, NTOK, 1, SKV_KERNELS_SCALAR, NULL, &r) == 0);
    CHECK_MSG(same(&ref, &r, nf), "scalar prefill differs from the SIMD prefill");
    free(r.logits);
    CHECK(run(m, tok, NTOK, 2, SKV_KERNELS_SCALAR, chunks, &r) == 0);
    CHECK_MSG(same(&ref, &r, nf), "scalar token-by-token (2 threads) differs");
    free(r.logits);
    for (int threads = 1; threads <= 3; threads++) {
        CHECK(run(m, tok, NTOK, threads, SKV_KERNELS_AUTO, NULL, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "prefill differs at %d threads", threads);
        free(r.logits);
        CHECK(run(m, tok, NTOK, threads, SKV_KERNELS_AUTO, chunks, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "token-by-token differs at %d threads", threads);
        free(r.logits);
    }
    /* random chunkings */
    uint64_t s = 12345;
    for (int trial = 0; trial < 6; trial++) {
        size_t left = NTOK, i = 0;
        while (left) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            size_t c = 1 + (size_t)(s % 37);
            if (c > left) c = left;
            chunks[i++] = c;
            left -= c;
        }
        chunks[i] = 0;
        CHECK(run(m, tok, NTOK, 1 + trial % 2, SKV_KERNELS_AUTO, chunks, &r) == 0);
        CHECK_MSG(same(&ref, &r, nf), "chunking trial %d differs", trial);
        free(r.logits);
    }
    free(ref.logits);
    skv_model_free(m);
}

/* stories260K's README: greedy decoding of "Once upon a time" begins with this text. */
static void stories_greedy_known_text(void)
{
    static const char want[] = "Once upon a time, there was a little girl named Lily. She loved to play outside in "
                               "the park. One day, she saw a big, red ball.";
    skv_model *m = load("stories260K.gguf");
    skv_model_info info;
    skv_ctx *c = NULL;
    int32_t tok[64];
    size_t n = 0;
    char text[1024] = "Once upon a time";
    if (!m) SKIP("../shared/models/stories260K not available");
    skv_model_get_info(m, &info);
    CHECK(skv_tokenize(m, text, strlen(text), 1, tok, 64, &n) == SKV_OK);
    CHECK_EQ_INT(tok[0], info.bos_id);
    CHECK(skv_ctx_create(m, NULL, &c) == SKV_OK);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    CHECK(skv_prefill(c, tok, n, SKV_LOGITS_LAST, logits) == SKV_OK);
    size_t tl = strlen(text);
    while (tl < sizeof want - 1) {
        int32_t best = 0;
        char piece[64];
        size_t len = 0;
        for (int32_t i = 1; i < info.n_vocab; i++)
            if (logits[i] > logits[best]) best = i;
        CHECK(skv_token_piece(m, best, piece, sizeof piece, &len) == SKV_OK);
        CHECK(tl + len < sizeof text);
        memcpy(text + tl, piece, len);
        tl += len;
        text[tl] = 0;
        CHECK(skv_decode(c, best, logits) == SKV_OK);
    }
    CHECK_MSG(!strncmp(text, want, sizeof want - 1), "greedy text: %s", text);
    free(logits);
    skv_ctx_free(c);
    skv_model_free(m);
}

/* The bundled model (F16 weights, head_dim 64, GQA) is in the repository: no skip. */
static void bundled_model_kernels_and_chunking_agree(void)
{
    char err[256];
    skv_model *m = NULL;
    int32_t tok[40];
    run_result ref, r;
    skv_model_info info;
    size_t chunks[] = {1, 7, 1, 1, 13, 2, 15, 0};
    CHECK_MSG(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK, "%s", err);
    skv_model_get_info(m, &info);
    CHECK_EQ_INT(info.head_dim, 64);
    CHECK(info.n_head_kv < info.n_head);
    size_t nf = 40 * (size_t)info.n_vocab;
    make_tokens(tok, 40, info.n_vocab, 3);
    CHECK(run(m, tok, 40, 1, SKV_KERNELS_AUTO, NULL, &ref) == 0);
    CHECK(run(m, tok, 40, 2, SKV_KERNELS_SCALAR, chunks, &r) == 0);
    CHECK_MSG(same(&ref, &r, nf), "scalar chunked run differs from the SIMD prefill");
    free(r.logits);
    CHECK(run(m, tok, 40, 2, SKV_KERNELS_AUTO, chunks, &r) == 0);
    CHECK_MSG(same(&ref, &r, nf), "SIMD chunked run at 2 threads differs");
    free(r.logits);
    free(ref.logits);
    skv_model_free(m);
}

/* SEQKV_RESIDENT=1 copies the matrices out of the file's mapping (model.c, resident
 * weights; a large model does it by default), and where the CPU has AVX2 the f16 matrices
 * get a packed copy instead (quant/repack.h; SEQKV_REPACK=0: none): the same fingerprint,
 * the same logits and KV, and the copies freed with the model (ASan and Valgrind runs check
 * the frees). Model k: 0 neither copy, 1 resident, 2 packed (kjv-4m is f16). */
static void resident_weights_change_nothing(void)
{
    char err[256];
    skv_model *m[3] = {NULL, NULL, NULL};
    int32_t tok[40];
    run_result r[3];
    uint8_t fp[3][16];
    skv_model_info info;
    const char *resident[3] = {"0", "1", "0"}, *repack[3] = {"0", "0", "1"};
    int n = skv_cpu_has(SKV_CPU_AVX2_SET) ? 3 : 2;
    for (int k = 0; k < n; k++) {
        setenv("SEQKV_RESIDENT", resident[k], 1);
        setenv("SEQKV_REPACK", repack[k], 1);
        CHECK_MSG(skv_model_load("models/kjv-4m.gguf", NULL, &m[k], err, sizeof err) == SKV_OK, "%s", err);
        CHECK_EQ_INT(m[k]->layers[0].wq.resident, k == 1);
        CHECK_EQ_INT(m[k]->layers[m[k]->info.n_layer - 1].w2.resident, k == 1);
        CHECK_EQ_INT(m[k]->layers[0].wq.packed != NULL, k == 2);
        CHECK_EQ_INT(m[k]->layers[m[k]->info.n_layer - 1].w2.packed != NULL, k == 2);
        skv_model_get_info(m[k], &info); /* the public count of the copied bytes */
        CHECK(k == 1 ? info.resident_bytes > 0 && info.resident_bytes < info.file_bytes : info.resident_bytes == 0);
    }
    unsetenv("SEQKV_RESIDENT");
    unsetenv("SEQKV_REPACK");
    skv_model_get_info(m[0], &info);
    make_tokens(tok, 40, info.n_vocab, 5);
    for (int k = 0; k < n; k++) {
        CHECK(skv_model_fingerprint(m[k], fp[k]) == SKV_OK);
        CHECK(run(m[k], tok, 40, 1, SKV_KERNELS_AUTO, NULL, &r[k]) == 0);
    }
    for (int k = 1; k < n; k++) {
        CHECK(!memcmp(fp[0], fp[k], 16));
        CHECK_MSG(same(&r[0], &r[k], 40 * (size_t)info.n_vocab), "%s weights changed a result",
                  k == 1 ? "resident" : "packed");
    }
    for (int k = 0; k < n; k++) {
        free(r[k].logits);
        skv_model_free(m[k]);
    }
}

static void context_limits_and_bad_tokens(void)
{
    skv_model *m = load("stories260K.gguf");
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c;
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (!m) SKIP("../shared/models/stories260K not available");
    p.n_ctx = 6;
    CHECK(skv_ctx_create(m, &p, &c) == SKV_OK);
    CHECK(skv_prefill(c, tok, 8, SKV_LOGITS_NONE, NULL) == SKV_ERR_RANGE);
    CHECK(strstr(skv_ctx_last_error(c), "context full") != NULL);
    CHECK_EQ_INT(skv_ctx_n_pos(c), 0);
    tok[2] = 100000;
    CHECK(skv_prefill(c, tok, 4, SKV_LOGITS_NONE, NULL) == SKV_ERR_INVALID_ARG);
    tok[2] = -1;
    CHECK(skv_decode(c, -1, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_prefill(c, tok, 2, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK_EQ_INT(skv_ctx_n_pos(c), 2);
    CHECK(skv_prefill(c, tok, 2, SKV_LOGITS_ALL, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_ctx_truncate(c, 1) == SKV_OK);
    CHECK_EQ_INT(skv_ctx_n_pos(c), 1);
    skv_ctx_free(c);
    skv_ctx_free(NULL);
    skv_model_free(m);
}

/* A prefix's KV read out of one context and loaded into another continues exactly like the
 * original run: same logits for the following tokens, same digest. */
static void kv_read_write_continue_exactly(void)
{
    char err[256];
    skv_model *m = NULL;
    skv_model_info info;
    skv_ctx *a = NULL, *b = NULL, *q = NULL;
    skv_ctx_params p = skv_ctx_default_params();
    int32_t tok[48];
    uint8_t da[16], db[16];
    CHECK_MSG(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK, "%s", err);
    skv_model_get_info(m, &info);
    make_tokens(tok, 48, info.n_vocab, 11);
    p.n_ctx = 64;
    CHECK(skv_ctx_create(m, &p, &a) == SKV_OK);
    CHECK(skv_ctx_create(m, &p, &b) == SKV_OK);
    size_t V = (size_t)info.n_vocab, per_pos = (size_t)info.n_layer * 2 * info.n_head_kv * info.head_dim;
    float *la = malloc(16 * V * sizeof(float)), *lb = malloc(16 * V * sizeof(float));
    float *kv = malloc(32 * per_pos * sizeof(float)), *kv2 = malloc(32 * per_pos * sizeof(float));
    CHECK(la && lb && kv && kv2);
    CHECK(skv_prefill(a, tok, 48, SKV_LOGITS_ALL, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_prefill(a, tok, 32, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_ctx_kv_read(a, 0, 33, kv) == SKV_ERR_INVALID_ARG); /* beyond n_pos */
    CHECK(skv_ctx_kv_read(a, 0, 32, kv) == SKV_OK);
    CHECK(skv_prefill(a, tok + 32, 16, SKV_LOGITS_ALL, la) == SKV_OK);
    /* load in two pieces, the second overwriting a stale tail */
    CHECK(skv_prefill(b, tok + 5, 20, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_ctx_kv_write(b, 21, 1, kv) == SKV_ERR_INVALID_ARG); /* hole after n_pos */
    CHECK(skv_ctx_kv_read(a, 0, 10, kv2) == SKV_OK);
    CHECK(skv_ctx_kv_write(b, 0, 10, kv2) == SKV_OK);
    CHECK_EQ_INT(skv_ctx_n_pos(b), 10);
    CHECK(skv_ctx_kv_read(a, 10, 22, kv2) == SKV_OK);
    CHECK(skv_ctx_kv_write(b, 10, 22, kv2) == SKV_OK);
    CHECK_EQ_INT(skv_ctx_n_pos(b), 32);
    for (int i = 0; i < 16; i++) CHECK(skv_decode(b, tok[32 + i], lb + (size_t)i * V) == SKV_OK);
    CHECK_MSG(memcmp(la, lb, 16 * V * sizeof(float)) == 0, "logits after a loaded prefix differ");
    CHECK(skv_ctx_kv_digest(a, 48, da) == SKV_OK && skv_ctx_kv_digest(b, 48, db) == SKV_OK);
    CHECK(memcmp(da, db, 16) == 0);
    p.kv_quant = "tq4";
    CHECK(skv_ctx_create(m, &p, &q) == SKV_OK);
    CHECK(skv_ctx_kv_write(q, 0, 1, kv) == SKV_ERR_UNSUPPORTED);
    skv_ctx_free(q);
    free(la); free(lb); free(kv); free(kv2);
    skv_ctx_free(a);
    skv_ctx_free(b);
    skv_model_free(m);
}

/* skv_ctx_prefill_embd (the server's embeddings): rows bit-identical in any chunking and
 * thread count, the KV it leaves the same as skv_prefill's, bad arguments refused. */
static void hidden_states_chunk_invariant(void)
{
    skv_model *m = NULL;
    skv_model_info info;
    skv_ctx *a, *b, *d;
    char err[256];
    int32_t tok[40];
    uint8_t da[16], dd[16];
    CHECK_MSG(skv_model_load("models/kjv-4m.gguf", NULL, &m, err, sizeof err) == SKV_OK, "%s", err);
    skv_model_get_info(m, &info);
    make_tokens(tok, 40, info.n_vocab, 5);
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = 64;
    CHECK(skv_ctx_create(m, &p, &a) == SKV_OK && skv_ctx_create(m, &p, &d) == SKV_OK);
    p.n_threads = 2;
    CHECK(skv_ctx_create(m, &p, &b) == SKV_OK);
    size_t D = (size_t)info.n_embd;
    float *ea = calloc(40 * D, sizeof(float)), *eb = calloc(40 * D, sizeof(float));
    CHECK(ea && eb);
    CHECK(skv_ctx_prefill_embd(a, tok, 40, ea) == SKV_OK);
    CHECK(skv_ctx_prefill_embd(b, tok, 13, eb) == SKV_OK);
    CHECK(skv_ctx_prefill_embd(b, tok + 13, 1, eb + 13 * D) == SKV_OK);
    CHECK(skv_ctx_prefill_embd(b, tok + 14, 26, eb + 14 * D) == SKV_OK);
    CHECK_MSG(memcmp(ea, eb, 40 * D * sizeof(float)) == 0, "hidden states differ between chunkings/threads");
    int nonzero = 0;
    for (size_t i = 0; i < 40 * D; i++) nonzero += ea[i] != 0.0f;
    CHECK(nonzero > (int)(20 * D));
    CHECK(skv_prefill(d, tok, 40, SKV_LOGITS_NONE, NULL) == SKV_OK);
    CHECK(skv_ctx_kv_digest(a, 40, da) == SKV_OK && skv_ctx_kv_digest(d, 40, dd) == SKV_OK);
    CHECK_MSG(memcmp(da, dd, 16) == 0, "prefill_embd left another KV than prefill");
    CHECK(skv_ctx_prefill_embd(a, tok, 2, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(skv_ctx_prefill_embd(NULL, tok, 2, ea) == SKV_ERR_INVALID_ARG);
    free(ea);
    free(eb);
    skv_ctx_free(a);
    skv_ctx_free(b);
    skv_ctx_free(d);
    skv_model_free(m);
}

/* The table: lookups by exact name, every row's required tensors, and tensor descriptions
 * that name distinct fields with sane shapes (a name may serve two kinds of different
 * shapes: phi3's fused ffn_up). */
static void architecture_table_rows(void)
{
    static const char *rows[] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"};
    const skv_arch *a = skv_arch_find("llama", 5);
    char list[128];
    CHECK(a != NULL && !strcmp(a->name, "llama") && a->rope == SKV_ROPE_NORM && a->flags == SKV_ARCH_NONE);
    CHECK(skv_arch_llama2c() == a);
    CHECK(skv_arch_find("llama2", 6) == NULL && skv_arch_find("llam", 4) == NULL && skv_arch_find("", 0) == NULL);
    CHECK(skv_arch_find("llamaX", 5) == a); /* a length-delimited name, as GGUF strings are */
    skv_arch_list(list, sizeof list);
    CHECK_MSG(!strcmp(list, "llama, qwen2, qwen3, phi3, gemma2, gemma3"), "list '%s'", list);
    skv_arch_list(list, 3);
    CHECK(!strcmp(list, "ll"));
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const skv_arch *b = skv_arch_find(rows[r], strlen(rows[r]));
        CHECK_MSG(b && (r == 0 || b->rope == SKV_ROPE_NEOX), "row %s", rows[r]);
        if (!b) continue;
        CHECK_MSG(b->use[SKV_LT_ATTN_NORM] == SKV_USE_REQUIRED && b->use[SKV_LT_O] == SKV_USE_REQUIRED &&
                      b->use[SKV_LT_DOWN] == SKV_USE_REQUIRED,
                  "%s lacks a base tensor", rows[r]);
        CHECK_MSG(!b->use[SKV_LT_QKV] == !!b->use[SKV_LT_Q] && !b->use[SKV_LT_GATE_UP] == !!b->use[SKV_LT_UP],
                  "%s must use either the fused or the split matrices", rows[r]);
    }
    for (int t = 0; t < SKV_LT_COUNT; t++) {
        const skv_tensor_desc *d = &skv_layer_tensors[t];
        CHECK_MSG(d->gguf && d->k != SKV_DIM_1, "tensor %d", t);
        CHECK_MSG(a->use[t] == (t <= SKV_LT_UP ? SKV_USE_REQUIRED : SKV_USE_NONE), "llama's use of tensor %s", d->gguf);
        for (int u = 0; u < t; u++)
            CHECK_MSG(skv_layer_tensors[u].field != d->field &&
                          (strcmp(skv_layer_tensors[u].gguf, d->gguf) || skv_layer_tensors[u].n != d->n),
                      "tensors %d and %d share a field or a name and shape", u, t);
    }
}

/* NEOX rotates pairs (i, i + n/2) by pair i's angle with the same arithmetic as the
 * kernel's adjacent pairs; NORM is the kernel itself. Both bit-exact. */
static void rope_styles(void)
{
    enum { NP = 8, HD = 20 };
    const skv_kernels *k = skv_kernels_scalar();
    float x[HD], y[HD], ref[HD], cs[NP], sn[NP], tmp[2 * NP];
    for (int i = 0; i < HD; i++) x[i] = (float)(i * 37 % 11) - 5.25f;
    for (int i = 0; i < NP; i++) {
        cs[i] = 0.125f * (float)(i + 1) - 0.5f;
        sn[i] = 0.75f - 0.0625f * (float)(i * i);
    }
    memcpy(ref, x, sizeof x);
    for (int i = 0; i < NP; i++) {
        float x0 = x[i], x1 = x[i + NP];
        ref[i] = x0 * cs[i] - x1 * sn[i];
        ref[i + NP] = x0 * sn[i] + x1 * cs[i];
    }
    memcpy(y, x, sizeof x);
    skv_rope_apply(SKV_ROPE_NEOX, k->rope, y, cs, sn, NP, tmp);
    CHECK_MSG(!memcmp(y, ref, sizeof y), "NEOX rotation differs from its definition");
    memcpy(y, x, sizeof x);
    memcpy(ref, x, sizeof x);
    k->rope(ref, cs, sn, NP);
    skv_rope_apply(SKV_ROPE_NORM, k->rope, y, cs, sn, NP, tmp);
    CHECK_MSG(!memcmp(y, ref, sizeof y), "NORM rotation is not the kernel's");
}

int main(void)
{
    TEST_BEGIN("test_engine");
    RUN(gguf_and_llama2c_forms_agree);
    RUN(batch_and_thread_invariance);
    RUN(stories_greedy_known_text);
    RUN(bundled_model_kernels_and_chunking_agree);
    RUN(resident_weights_change_nothing);
    RUN(context_limits_and_bad_tokens);
    RUN(kv_read_write_continue_exactly);
    RUN(hidden_states_chunk_invariant);
    RUN(architecture_table_rows);
    RUN(rope_styles);
    TEST_END();
}
