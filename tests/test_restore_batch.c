/* Multi-sequence decoding and batch restore (issue 6): one forward pass over the next
 * token of several independent sequences must give each sequence exactly the logits and
 * KV cache that decoding it alone gives, whatever the mix of positions, capacities and
 * thread counts; and restoring a queue of model-coded sessions together must yield the
 * same tokens and KV digests as restoring them one by one.
 * Model: the bundled models/kjv-4m.gguf; text: held-out KJV (tests/data/model_ref). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "test.h"

#define NSEQ 5

static skv_model *g_m;
static skv_model_info g_info;
static int g_kv; /* SKV_KV_CACHE_* of new_ctx's contexts and encode's sessions */

static void make_tokens(int32_t *t, size_t n, unsigned seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        t[i] = (int32_t)(s % (uint64_t)g_info.n_vocab);
    }
}

static skv_ctx *new_ctx(int n_ctx, int threads, int max_batch)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = n_ctx;
    p.n_threads = threads;
    p.max_batch = max_batch;
    p.kv_cache_type = g_kv;
    return skv_ctx_create(g_m, &p, &c) == SKV_OK ? c : NULL;
}

/* Sequences at different positions (and capacities) step together; a few drop out and
 * come back; every row's logits and every cache's digest equal the solo runs'. */
static void multi_equals_solo(int threads, int max_batch)
{
    static const int prefix[NSEQ] = {0, 1, 17, 40, 9}, n_ctx[NSEQ] = {64, 96, 80, 128, 64};
    enum { STEPS = 24, LEN = 160 };
    size_t V = (size_t)g_info.n_vocab;
    skv_ctx *multi[NSEQ], *solo[NSEQ], *step[NSEQ];
    int32_t tok[NSEQ][LEN], next[NSEQ];
    float *lm = malloc(NSEQ * V * sizeof(float)), *ls = malloc(V * sizeof(float));
    CHECK(lm && ls);
    for (int i = 0; i < NSEQ; i++) {
        make_tokens(tok[i], LEN, (unsigned)i + 1);
        CHECK((multi[i] = new_ctx(n_ctx[i], threads, max_batch)) && (solo[i] = new_ctx(n_ctx[i], 1, 8)));
        CHECK(skv_prefill(multi[i], tok[i], (size_t)prefix[i], SKV_LOGITS_NONE, NULL) == SKV_OK);
        CHECK(skv_prefill(solo[i], tok[i], (size_t)prefix[i], SKV_LOGITS_NONE, NULL) == SKV_OK);
    }
    for (int s = 0; s < STEPS; s++) {
        size_t n = 0;
        int who[NSEQ];
        for (int i = 0; i < NSEQ; i++) {
            if ((s + i) % 4 == 3) continue; /* this sequence sits the step out */
            who[n] = i;
            step[n] = multi[i];
            next[n] = tok[i][skv_ctx_n_pos(multi[i])];
            n++;
        }
        CHECK(skv_decode_multi(step, next, n, lm) == SKV_OK);
        for (size_t k = 0; k < n; k++) {
            int i = who[k];
            CHECK(skv_decode(solo[i], next[k], ls) == SKV_OK);
            CHECK_MSG(memcmp(ls, lm + k * V, V * sizeof(float)) == 0, "step %d row %zu (sequence %d): logits differ", s,
                      k, i);
        }
    }
    for (int i = 0; i < NSEQ; i++) {
        uint8_t a[16], b[16];
        CHECK_EQ_INT(skv_ctx_n_pos(multi[i]), skv_ctx_n_pos(solo[i]));
        CHECK(skv_ctx_kv_digest(multi[i], skv_ctx_n_pos(multi[i]), a) == SKV_OK);
        CHECK(skv_ctx_kv_digest(solo[i], skv_ctx_n_pos(solo[i]), b) == SKV_OK);
        CHECK_MSG(memcmp(a, b, 16) == 0, "sequence %d: KV differs", i);
        skv_ctx_free(multi[i]);
        skv_ctx_free(solo[i]);
    }
    free(lm);
    free(ls);
}

static void decode_multi_equals_solo_1_thread(void) { multi_equals_solo(1, 8); }
static void decode_multi_equals_solo_2_threads(void) { multi_equals_solo(2, 8); }
/* more rows than the lead's batch: the step runs in chunks */
static void decode_multi_in_chunks_equals_solo(void) { multi_equals_solo(2, 2); }

/* f16 KV caches: the attention reads the halves (AVX2: converted in registers) */
static void decode_multi_f16_equals_solo(void)
{
    g_kv = SKV_KV_CACHE_F16;
    multi_equals_solo(1, 8);
    multi_equals_solo(2, 2);
    g_kv = SKV_KV_CACHE_F32;
}

static void decode_multi_rejects_bad_calls(void)
{
    skv_ctx *a = new_ctx(8, 1, 2), *b = new_ctx(8, 1, 2), *c = new_ctx(4, 1, 2), *q = NULL;
    skv_ctx *v[3];
    int32_t t[3] = {5, 6, 7};
    skv_ctx_params p = skv_ctx_default_params();
    CHECK(a && b && c);
    v[0] = a; v[1] = a;
    CHECK(skv_decode_multi(v, t, 2, NULL) == SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_ctx_last_error(a), "twice") != NULL);
    v[1] = b; v[2] = c;
    t[1] = -3;
    CHECK(skv_decode_multi(v, t, 2, NULL) == SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_ctx_n_pos(a), 0);
    t[1] = 6;
    CHECK(skv_decode_multi(v, t, 0, NULL) == SKV_OK);
    CHECK(skv_decode_multi(NULL, t, 1, NULL) == SKV_ERR_INVALID_ARG);
    for (int i = 0; i < 4; i++) CHECK(skv_decode(c, 9, NULL) == SKV_OK);
    v[0] = c; v[1] = a;
    CHECK(skv_decode_multi(v, t, 2, NULL) == SKV_ERR_RANGE); /* c is full */
    CHECK(strstr(skv_ctx_last_error(c), "context full") != NULL);
    CHECK_EQ_INT(skv_ctx_n_pos(a), 0);
    p.n_ctx = 8;
    p.kv_quant = "tq4";
    CHECK(skv_ctx_create(g_m, &p, &q) == SKV_OK);
    v[0] = a; v[1] = q;
    CHECK(skv_decode_multi(v, t, 2, NULL) == SKV_ERR_UNSUPPORTED);
    v[1] = b;
    CHECK(skv_decode_multi(v, t, 2, NULL) == SKV_OK);
    CHECK_EQ_INT(skv_ctx_n_pos(a), 1);
    CHECK_EQ_INT(skv_ctx_n_pos(b), 1);
    skv_ctx_free(a);
    skv_ctx_free(b);
    skv_ctx_free(c);
    skv_ctx_free(q);
}


/* ---- batch restore -------------------------------------------------------------------- */

static int32_t *heldout_tokens(size_t max, size_t *n)
{
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    char *text = malloc(1 << 20);
    size_t len = 0, need = 0;
    int32_t *tok = NULL;
    if (f && text) {
        len = fread(text, 1, (1 << 20) - 1, f);
        text[len] = 0;
        tok = malloc((len + 2) * sizeof *tok);
        if (tok && skv_tokenize(g_m, text, len, 1, tok, len + 2, &need) != SKV_OK) need = 0;
    }
    if (f) fclose(f);
    free(text);
    *n = need < max ? need : max;
    return tok;
}

static skv_session *encode(const int32_t *tok, size_t n, int codec, int n_ctx)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    char err[256];
    ep.codec = codec;
    ep.n_ctx = n_ctx;
    ep.segment = 1;
    ep.kv_cache_type = g_kv;
    if (skv_encoder_create(g_m, &ep, &e, NULL, 0) == SKV_OK && skv_encoder_append(e, tok, n, NULL) == SKV_OK &&
        skv_encoder_finish(e, &data, &size) == SKV_OK)
        skv_session_open(data, size, &s, err, sizeof err);
    skv_encoder_free(e);
    free(data);
    return s;
}

/* Every segment of two model-coded sessions and one raw-token session, restored as one
 * queue (more segments than the 64 decoded at once), equals the solo restores. */
static void batch_restore_equals_solo(void)
{
    size_t n = 0;
    int32_t *tok = heldout_tokens(2400, &n);
    skv_session *s[3];
    skv_session_info si[3];
    skv_restore_job *jobs;
    skv_restore_stats st = {0, 0, 0, 0};
    skv_restore_params rp = {.verify = 1, .stats = &st};
    enum { NC = 24 };
    int32_t solo_tok[NC];
    CHECK_MSG(tok && n == 2400, "held-out text missing or short");
    CHECK((s[0] = encode(tok, 1800, SKV_CODEC_MODEL, NC)) != NULL);
    CHECK((s[1] = encode(tok + 1800, 600, SKV_CODEC_MODEL, 17)) != NULL); /* last segment is short */
    CHECK((s[2] = encode(tok + 100, 50, SKV_CODEC_TOKENS, NC)) != NULL);
    size_t nj = 0;
    for (int k = 0; k < 3; k++) skv_session_get_info(s[k], &si[k]), nj += si[k].n_segments;
    CHECK(nj > 64);
    CHECK((jobs = calloc(nj, sizeof *jobs)) != NULL);
    for (int k = 0, j = 0; k < 3; k++)
        for (uint32_t i = 0; i < si[k].n_segments; i++, j++) {
            jobs[j].session = s[k];
            jobs[j].segment = i;
            jobs[j].ctx = new_ctx(NC, j % 2 ? 2 : 1, 0);
            jobs[j].tokens = malloc(NC * sizeof(int32_t));
            jobs[j].cap = NC;
            CHECK(jobs[j].ctx && jobs[j].tokens);
        }
    CHECK_MSG(skv_session_restore_batch(g_m, jobs, nj, &rp) == SKV_OK, "%s", skv_ctx_last_error(jobs[0].ctx));
    CHECK_EQ_INT(st.n_tokens, 2450);
    CHECK(st.n_passes < 2450 / 4); /* steps, not tokens */
    skv_ctx *solo = new_ctx(NC, 1, 0);
    CHECK(solo);
    for (size_t j = 0; j < nj; j++) {
        uint32_t nt = 0;
        uint8_t a[16], b[16];
        skv_restore_params sp = {.verify = 1};
        CHECK_EQ_INT(jobs[j].status, SKV_OK);
        skv_session_segment_info(jobs[j].session, jobs[j].segment, &nt, NULL, NULL);
        CHECK(skv_session_restore_segment(jobs[j].session, g_m, jobs[j].segment, solo, &sp, solo_tok, NC) == SKV_OK);
        CHECK_MSG(memcmp(solo_tok, jobs[j].tokens, nt * sizeof(int32_t)) == 0, "job %zu: tokens differ", j);
        CHECK(skv_ctx_kv_digest(solo, (int)nt, a) == SKV_OK && skv_ctx_kv_digest(jobs[j].ctx, (int)nt, b) == SKV_OK);
        CHECK_MSG(memcmp(a, b, 16) == 0, "job %zu: KV differs", j);
    }
    CHECK(memcmp(jobs[0].tokens, tok, NC * sizeof(int32_t)) == 0);
    skv_ctx_free(solo);
    for (size_t j = 0; j < nj; j++) skv_ctx_free(jobs[j].ctx), free(jobs[j].tokens);
    free(jobs);
    for (int k = 0; k < 3; k++) skv_session_free(s[k]);
    free(tok);
}

/* A bad job fails alone, with its own message; the others restore. */
static void batch_restore_job_errors_are_per_job(void)
{
    size_t n = 0;
    int32_t *tok = heldout_tokens(100, &n), out[4][64];
    skv_session *s = encode(tok, 100, SKV_CODEC_MODEL, 50);
    skv_ctx *c[4] = {new_ctx(64, 1, 0), new_ctx(64, 1, 0), new_ctx(16, 1, 0), new_ctx(64, 1, 0)};
    skv_restore_job jobs[4];
    skv_restore_params rp = {.verify = 1};
    CHECK(s && c[0] && c[1] && c[2] && c[3]);
    memset(jobs, 0, sizeof jobs);
    for (int j = 0; j < 4; j++) {
        jobs[j].session = s;
        jobs[j].segment = (uint32_t)(j % 2);
        jobs[j].ctx = c[j];
        jobs[j].tokens = out[j];
        jobs[j].cap = 64;
    }
    jobs[1].cap = 10;      /* too small for 50 tokens */
    jobs[3].segment = 7;   /* no such segment */
    int rc = skv_session_restore_batch(g_m, jobs, 4, &rp);
    CHECK_EQ_INT(rc, SKV_ERR_RANGE);
    CHECK_EQ_INT(jobs[0].status, SKV_OK);
    CHECK_EQ_INT(jobs[1].status, SKV_ERR_RANGE);
    CHECK(strstr(skv_ctx_last_error(jobs[1].ctx), "too small") != NULL);
    CHECK(skv_ctx_last_error(jobs[0].ctx)[0] == 0); /* a job that succeeded: cleared */
    CHECK(strstr(skv_ctx_last_error(jobs[3].ctx), "segment") != NULL);
    CHECK_EQ_INT(jobs[2].status, SKV_ERR_RANGE); /* a 16-position context cannot hold 50 tokens */
    CHECK_EQ_INT(jobs[3].status, SKV_ERR_INVALID_ARG);
    CHECK(memcmp(out[0], tok, 50 * sizeof(int32_t)) == 0);
    jobs[1].ctx = c[0]; /* the same context twice */
    CHECK(skv_session_restore_batch(g_m, jobs, 2, &rp) == SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_ctx_last_error(jobs[1].ctx), "same context") != NULL);
    CHECK(skv_session_restore_batch(g_m, jobs, 0, &rp) == SKV_OK);
    CHECK(skv_session_restore_batch(NULL, jobs, 1, &rp) == SKV_ERR_INVALID_ARG);
    for (int j = 0; j < 4; j++) skv_ctx_free(c[j]);
    skv_session_free(s);
    free(tok);
}

/* A context with kv_quant is refused alone (SKV_ERR_UNSUPPORTED, before any pass): it
 * neither joins a step (where it used to fail every job of the step) nor, for codec
 * tokens, "succeeds" with its quantized view; the exact contexts restore. */
static void batch_restore_refuses_kv_quant_contexts(void)
{
    size_t n = 0;
    int32_t *tok = heldout_tokens(100, &n), out[4][64];
    skv_session *sm = encode(tok, 100, SKV_CODEC_MODEL, 50), *st = encode(tok, 40, SKV_CODEC_TOKENS, 64);
    skv_ctx_params qp = skv_ctx_default_params();
    skv_ctx *c[4] = {new_ctx(64, 1, 0), NULL, new_ctx(64, 1, 0), NULL};
    skv_restore_job jobs[4];
    skv_restore_params rp = {.verify = 0};
    qp.n_ctx = 64;
    qp.kv_quant = "tq3";
    CHECK(skv_ctx_create(g_m, &qp, &c[1]) == SKV_OK && skv_ctx_create(g_m, &qp, &c[3]) == SKV_OK);
    CHECK(sm && st && c[0] && c[2]);
    memset(jobs, 0, sizeof jobs);
    for (int j = 0; j < 4; j++) {
        jobs[j].session = j < 2 ? sm : st;
        jobs[j].ctx = c[j];
        jobs[j].tokens = out[j];
        jobs[j].cap = 64;
    }
    CHECK_EQ_INT(skv_session_restore_batch(g_m, jobs, 4, &rp), SKV_ERR_UNSUPPORTED);
    CHECK_EQ_INT(jobs[0].status, SKV_OK);
    CHECK_EQ_INT(jobs[2].status, SKV_OK);
    for (int j = 1; j < 4; j += 2) {
        CHECK_EQ_INT(jobs[j].status, SKV_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(skv_ctx_last_error(c[j]), "kv_quant") != NULL, "%s", skv_ctx_last_error(c[j]));
        CHECK_EQ_INT(skv_ctx_n_pos(c[j]), 0);
    }
    CHECK(memcmp(out[0], tok, 50 * sizeof(int32_t)) == 0 && memcmp(out[2], tok, 40 * sizeof(int32_t)) == 0);
    /* the solo restore refuses it the same way, for every codec */
    CHECK_EQ_INT(skv_session_restore_segment(st, g_m, 0, c[1], &rp, out[1], 64), SKV_ERR_UNSUPPORTED);
    CHECK_EQ_INT(skv_session_restore_segment(sm, g_m, 0, c[1], &rp, out[1], 64), SKV_ERR_UNSUPPORTED);
    CHECK(strstr(skv_ctx_last_error(c[1]), "kv_quant") != NULL);
    for (int j = 0; j < 4; j++) skv_ctx_free(c[j]);
    skv_session_free(sm);
    skv_session_free(st);
    free(tok);
}

/* Sessions written with an f16 KV cache restore as a queue into f16 contexts (verified
 * against their digests, equal to the solo restore); an f32 context is refused alone, by
 * name, before any pass. */
static void batch_restore_f16_sessions(void)
{
    size_t n = 0;
    int32_t *tok = heldout_tokens(300, &n), out[5][64], solo_tok[64];
    g_kv = SKV_KV_CACHE_F16;
    skv_session *s = encode(tok, 300, SKV_CODEC_MODEL, 64);
    skv_ctx *c[5] = {new_ctx(64, 1, 0), new_ctx(64, 2, 0), new_ctx(64, 1, 0), new_ctx(64, 1, 0), NULL};
    skv_ctx *solo = new_ctx(64, 1, 0);
    g_kv = SKV_KV_CACHE_F32;
    c[4] = new_ctx(64, 1, 0);
    skv_restore_job jobs[5];
    skv_restore_params rp = {.verify = 1};
    CHECK(n == 300 && s && c[0] && c[1] && c[2] && c[3] && c[4] && solo);
    memset(jobs, 0, sizeof jobs);
    for (int j = 0; j < 5; j++) {
        jobs[j].session = s;
        jobs[j].segment = (uint32_t)(j % 4);
        jobs[j].ctx = c[j];
        jobs[j].tokens = out[j];
        jobs[j].cap = 64;
    }
    CHECK_EQ_INT(skv_session_restore_batch(g_m, jobs, 5, &rp), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(jobs[4].status, SKV_ERR_MISMATCH);
    CHECK_MSG(strstr(skv_ctx_last_error(c[4]), "kv_cache_type f16") != NULL, "%s", skv_ctx_last_error(c[4]));
    CHECK_EQ_INT(skv_ctx_n_pos(c[4]), 0);
    for (int j = 0; j < 4; j++) {
        uint8_t a[16], b[16];
        uint32_t nt = 0;
        skv_session_segment_info(s, (uint32_t)j, &nt, NULL, NULL);
        CHECK_MSG(jobs[j].status == SKV_OK, "job %d: %s", j, skv_ctx_last_error(c[j]));
        CHECK(skv_session_restore_segment(s, g_m, (uint32_t)j, solo, &rp, solo_tok, 64) == SKV_OK);
        CHECK(memcmp(out[j], solo_tok, nt * sizeof(int32_t)) == 0);
        CHECK(skv_ctx_kv_digest(solo, (int)nt, a) == SKV_OK && skv_ctx_kv_digest(c[j], (int)nt, b) == SKV_OK);
        CHECK_MSG(memcmp(a, b, 16) == 0, "job %d: KV differs from the solo restore", j);
    }
    CHECK(memcmp(out[0], tok, 64 * sizeof(int32_t)) == 0);
    for (int j = 0; j < 5; j++) skv_ctx_free(c[j]);
    skv_ctx_free(solo);
    skv_session_free(s);
    free(tok);
}

/* The library's batch width: never 0, capped by the queue and 64, 1 for a queue of one;
 * kjv-4m's 8.5 MB of weights do not stay in cache, so a queue is batched; a context too
 * big for the KV budget gives 1. */
static void batch_width_rule(void)
{
    CHECK_EQ_INT((int)skv_restore_batch_width(NULL, 8, 800), 1);
    CHECK_EQ_INT((int)skv_restore_batch_width(g_m, 0, 800), 1);
    CHECK_EQ_INT((int)skv_restore_batch_width(g_m, 1, 800), 1);
    CHECK_EQ_INT((int)skv_restore_batch_width(g_m, 8, 800), 8);
    CHECK_EQ_INT((int)skv_restore_batch_width(g_m, 1000, 800), 64);
    CHECK_EQ_INT((int)skv_restore_batch_width(g_m, 8, 0), 1);
    CHECK_EQ_INT((int)skv_restore_batch_width(g_m, 8, 1 << 30), 1);
}

int main(void)
{
    char err[256];
    TEST_BEGIN("test_restore_batch");
    if (skv_model_load("models/kjv-4m.gguf", NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_restore_batch:<load>: %s\n", err);
        return 1;
    }
    skv_model_get_info(g_m, &g_info);
    RUN(decode_multi_equals_solo_1_thread);
    RUN(decode_multi_equals_solo_2_threads);
    RUN(decode_multi_in_chunks_equals_solo);
    RUN(decode_multi_f16_equals_solo);
    RUN(decode_multi_rejects_bad_calls);
    RUN(batch_restore_equals_solo);
    RUN(batch_restore_job_errors_are_per_job);
    RUN(batch_restore_refuses_kv_quant_contexts);
    RUN(batch_restore_f16_sessions);
    RUN(batch_width_rule);
    skv_model_free(g_m);
    return test_n_fail ? 1 : 0;
}
