/* Target-quality mode of the predictive KV writer (src/container/kvpred_quality.c): on the
 * bundled model's real KV the searched steps meet the target KL (as the writer measures it,
 * and as this test measures it again: its own encode of the prefix, softmax and context), a
 * looser target costs fewer bits, the stream decodes bit for bit without the model; bad
 * arguments are refused; a .skv written with kv_quant "tok,ramp,kl=X" restores verified. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container/kvpred.h"
#include "container/kvpred_quality.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define N_TOK 400

typedef struct qfix {
    skv_model *m;
    skv_model_info mi;
    int32_t tok[N_TOK];
    size_t n, nf;
    float *kv;
} qfix;

static int fix_load(qfix *f)
{
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    char text[900];
    FILE *fp = fopen("tests/data/model_ref/heldout.txt", "rb");
    size_t tl = fp ? fread(text, 1, sizeof text, fp) : 0;
    if (fp) fclose(fp);
    if (tl < sizeof text || skv_model_load(MODEL, NULL, &f->m, NULL, 0)) return -1;
    skv_model_get_info(f->m, &f->mi);
    if (skv_tokenize(f->m, text, tl, 1, f->tok, N_TOK, &f->n)) return -1;
    cp.n_ctx = N_TOK;
    f->nf = (size_t)f->mi.n_layer * 2 * (size_t)f->mi.n_head_kv * (size_t)f->mi.head_dim * f->n;
    f->kv = malloc(f->nf * sizeof *f->kv);
    int rc = skv_ctx_create(f->m, &cp, &c) || skv_prefill(c, f->tok, f->n, SKV_LOGITS_NONE, NULL) ||
             skv_ctx_kv_read(c, 0, (int)f->n, f->kv);
    skv_ctx_free(c);
    return rc ? -1 : 0;
}

/* The tail protocol of kvpred_quality.h, written again: the first P positions coded alone
 * with p at scale `scale`, decoded, the last m tokens run over them; mean KL of the m rows. */
static void tail_kl(const qfix *f, const skv_kvp_params *p0, double scale, double *out)
{
    size_t m = f->n / 4 < SKV_KVQ_TAIL ? f->n / 4 : SKV_KVQ_TAIL, P = f->n - m, d = (size_t)f->mi.head_dim;
    size_t V = (size_t)f->mi.n_vocab, ns = f->nf / (f->n * d), len = 0;
    float *pre = malloc(ns * P * d * sizeof *pre), *deq = malloc(ns * P * d * sizeof *deq);
    float *lg[2] = {malloc(m * V * sizeof(float)), malloc(m * V * sizeof(float))};
    skv_kvp_params p = *p0;
    skv_kvp_header h;
    uint8_t *body = NULL;
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    *out = HUGE_VAL;
    p.kl = 0.0f, p.step[0] = (float)(p0->step[0] * scale), p.step[1] = (float)(p0->step[1] * scale);
    for (size_t s = 0; s < ns; s++) memcpy(pre + s * P * d, f->kv + s * f->n * d, P * d * sizeof *pre);
    CHECK_EQ_INT(skv_kvp_encode(&p, (uint32_t)f->mi.n_layer, (uint32_t)f->mi.n_head_kv, (uint32_t)d, pre, P, &body, &len,
                                &h, deq), SKV_OK);
    cp.n_ctx = (int)f->n;
    CHECK_EQ_INT(skv_ctx_create(f->m, &cp, &c), SKV_OK);
    for (int k = 0; k < 2; k++) {
        skv_ctx_truncate(c, 0);
        CHECK_EQ_INT(skv_ctx_kv_write(c, 0, (int)P, k ? deq : pre), SKV_OK);
        CHECK_EQ_INT(skv_prefill(c, f->tok + P, m, SKV_LOGITS_ALL, lg[k]), SKV_OK);
    }
    double kl = 0;
    for (size_t j = 0; j < m; j++) {
        double za = 0, zb = 0;
        const float *a = lg[0] + j * V, *b = lg[1] + j * V;
        for (size_t i = 0; i < V; i++) za += exp((double)a[i]), zb += exp((double)b[i]);
        for (size_t i = 0; i < V; i++) kl += exp((double)a[i]) / za * (((double)a[i] - log(za)) - ((double)b[i] - log(zb)));
    }
    skv_ctx_free(c);
    free(pre), free(deq), free(body), free(lg[0]), free(lg[1]);
    *out = kl / (double)m;
}

static void target_met(void)
{
    qfix f = {0};
    if (fix_load(&f)) SKIP("%s or tests/data/model_ref/heldout.txt missing", MODEL);
    double bits[2] = {0, 0}, scale[2] = {0, 0};
    static const float target[2] = {0.0005f, 0.005f};
    float *deq = malloc(f.nf * sizeof *deq), *out = malloc(f.nf * sizeof *out);
    for (int i = 0; i < 2; i++) {
        skv_kvp_params p = {.predictor = SKV_KVP_TOK, .step = {1, 1}, .tokens = f.tok, .ramp = 1, .kl = target[i]};
        skv_kvp_header h;
        uint8_t *body = NULL;
        size_t len = 0;
        double kl = 0;
        CHECK_EQ_INT(skv_kvp_encode_quality(&p, f.m, f.tok, f.kv, f.n, &body, &len, &h, deq, &kl, &scale[i]), SKV_OK);
        CHECK_MSG(kl >= 0 && kl <= target[i], "target %g: writer measured %g", target[i], kl);
        double again = 0;
        tail_kl(&f, &p, scale[i], &again);
        CHECK_MSG(fabs(again - kl) <= 1e-6 + 1e-3 * kl, "writer %g, measured again %g", kl, again);
        CHECK_EQ_INT(skv_kvp_decode(&h, body, len, f.n, f.tok, out, f.nf), SKV_OK);
        CHECK(memcmp(out, deq, f.nf * sizeof *out) == 0);
        bits[i] = (double)len * 8.0 / (double)f.n;
        free(body);
    }
    CHECK_MSG(bits[1] < bits[0] && scale[1] > scale[0], "bits %g %g, scales %g %g", bits[0], bits[1], scale[0], scale[1]);
    free(deq), free(out), free(f.kv);
    skv_model_free(f.m);
}

static void bad_arguments(void)
{
    qfix f = {0};
    if (fix_load(&f)) SKIP("%s or tests/data/model_ref/heldout.txt missing", MODEL);
    skv_kvp_params p = {.predictor = SKV_KVP_TOK, .step = {1, 1}, .tokens = f.tok, .kl = 0.0f};
    skv_kvp_header h;
    uint8_t *body = (uint8_t *)&p;
    size_t len = 0;
    double kl = 0;
    CHECK_EQ_INT(skv_kvp_encode_quality(&p, f.m, f.tok, f.kv, f.n, &body, &len, &h, NULL, &kl, NULL), SKV_ERR_INVALID_ARG);
    CHECK(body == NULL);
    p.kl = 0.001f, p.rate = 500.0f;
    CHECK_EQ_INT(skv_kvp_encode_quality(&p, f.m, f.tok, f.kv, f.n, &body, &len, &h, NULL, &kl, NULL), SKV_ERR_INVALID_ARG);
    p.rate = 0.0f, p.kl = NAN;
    CHECK_EQ_INT(skv_kvp_encode_quality(&p, f.m, f.tok, f.kv, f.n, &body, &len, &h, NULL, &kl, NULL), SKV_ERR_INVALID_ARG);
    p.kl = 0.001f; /* too short to measure: encoded at the given step, KL -1 */
    float small[4 * 2 * 2 * 64 * 4];
    for (size_t i = 0; i < sizeof small / sizeof *small; i++) small[i] = (float)(i % 13) * 0.1f;
    CHECK_EQ_INT(skv_kvp_encode_quality(&p, f.m, f.tok, small, 4, &body, &len, &h, NULL, &kl, NULL), SKV_OK);
    CHECK(kl == -1.0 && len > 0);
    free(body);
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    char err[256];
    ep.codec = SKV_CODEC_PRED;
    ep.kv_quant = "tok,kl=0.001,rate=900";
    CHECK_EQ_INT(skv_encoder_create(f.m, &ep, &e, err, sizeof err), SKV_ERR_INVALID_ARG);
    ep.kv_quant = "tok,kl=-1";
    CHECK_EQ_INT(skv_encoder_create(f.m, &ep, &e, err, sizeof err), SKV_ERR_INVALID_ARG);
    free(f.kv);
    skv_model_free(f.m);
}

static void skv_file_with_target(void)
{
    qfix f = {0};
    if (fix_load(&f)) SKIP("%s or tests/data/model_ref/heldout.txt missing", MODEL);
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    char err[256];
    int32_t back[N_TOK];
    ep.codec = SKV_CODEC_PRED;
    ep.kv_quant = "tok,ramp,kl=0.002";
    CHECK_EQ_INT(skv_encoder_create(f.m, &ep, &e, err, sizeof err), SKV_OK);
    CHECK_EQ_INT(skv_encoder_append(e, f.tok, f.n, NULL), SKV_OK);
    CHECK_EQ_INT(skv_encoder_finish(e, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    float *kv = malloc(f.nf * sizeof *kv);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, f.nf, back, N_TOK, 1), SKV_OK);
    CHECK(memcmp(back, f.tok, f.n * sizeof *back) == 0);
    free(kv), free(data), free(f.kv);
    skv_session_free(s);
    skv_encoder_free(e);
    skv_model_free(f.m);
}

int main(void)
{
    TEST_BEGIN("test_kvpred_quality");
    RUN(target_met);
    RUN(bad_arguments);
    RUN(skv_file_with_target);
    TEST_END();
}
