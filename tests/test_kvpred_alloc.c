/* Surprisal-adaptive allocation and target rates of the predictive KV coder
 * (src/container/kvpred_alloc.c): the levels follow the surprisal, a target rate is met
 * from below and decodes bit for bit, and in a .skv file (codec pred, kv_quant
 * "tok,surprisal,rate=BITS") the encoder's own surprisals drive it through a verified restore;
 * and with layer0 (flag bit 1) layer 0 is not stored, the model regenerates it exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container/kvpred.h"
#include "core/util.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void levels_follow_surprisal(void)
{
    float sur[6] = {0.0f, 8.0f, 2.0f, 0.5f, 0.001f, 1.5f}; /* mean of 1..5: 2.4, s_ref 9.6 */
    uint8_t lv[6], base[6] = {3, 0, 0, 0, 6, 0};
    skv_kvp_surprisal_levels(sur, 6, NULL, lv);
    CHECK_EQ_INT(lv[0], 0);
    CHECK_EQ_INT(lv[1], 1); /* 2 log2(9.6 / 8) = 0.53 */
    CHECK_EQ_INT(lv[2], 5); /* 4.53 */
    CHECK_EQ_INT(lv[3], 7); /* 8.53, capped */
    CHECK_EQ_INT(lv[4], 7); /* floored at s_ref / 16: 8 -> 7 */
    skv_kvp_surprisal_levels(sur, 6, base, base);
    CHECK_EQ_INT(base[0], 3);
    CHECK_EQ_INT(base[4], 7);
    CHECK_EQ_INT(base[2], 5);
    float flat[3] = {0.0f, 0.0f, 0.0f};
    skv_kvp_surprisal_levels(flat, 3, NULL, lv); /* no surprisal at all: s_ref 1, floor 1/16 */
    CHECK_EQ_INT(lv[0], 0);
    CHECK_EQ_INT(lv[1], 7);
}

/* Encodes with p; checks decode == the encoder's output; *bits: KV bits per position. */
static void coded(const skv_kvp_params *p, const float *kv, size_t H, size_t d, size_t n, double *rms_err, double *bits)
{
    size_t tot = 2 * H * d * n, len = 0;
    *bits = 0;
    float *deq = malloc(tot * sizeof *deq), *out = malloc(tot * sizeof *out);
    uint8_t *body = NULL;
    skv_kvp_header h;
    CHECK_EQ_INT(skv_kvp_encode(p, 1, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, deq), SKV_OK);
    CHECK_EQ_INT(h.flags, p->surprisal ? 1 : 0);
    CHECK_EQ_INT(skv_kvp_decode(&h, body, len, n, p->tokens, out, tot), SKV_OK);
    CHECK(memcmp(out, deq, tot * sizeof *out) == 0);
    double e = 0;
    for (size_t i = 0; i < tot; i++) e += ((double)out[i] - kv[i]) * ((double)out[i] - kv[i]);
    *rms_err = sqrt(e / (double)tot);
    *bits = (double)(len + SKV_KVP_HDR) * 8.0 / (double)n;
    free(body), free(deq), free(out);
}

static void rate_is_met(void)
{
    size_t H = 2, d = 16, n = 120, tot = 2 * H * d * n;
    float *kv = malloc(tot * sizeof *kv), sur[120];
    int32_t tok[120];
    for (size_t i = 0; i < tot; i++) kv[i] = (float)(urand() - 0.5);
    for (size_t t = 0; t < n; t++) sur[t] = (float)(urand() * 6.0), tok[t] = (int32_t)(t % 17);
    double prev_bits = 0, prev_err = HUGE_VAL, e;
    for (float rate = 150.0f; rate <= 600.0f; rate *= 2.0f) {
        for (int ramp = 0; ramp < 2; ramp++) {
            skv_kvp_params p = {.predictor = SKV_KVP_TOK, .step = {1.0f, 1.0f}, .tokens = tok, .surprisal = sur,
                                .rate = rate, .ramp = ramp};
            double b;
            coded(&p, kv, H, d, n, &e, &b);
            CHECK_MSG(b <= rate && b > 0.8 * rate, "rate %.0f ramp %d: %.1f bits per position", rate, ramp, b);
            if (ramp) continue;
            CHECK(b > prev_bits && e < prev_err);
            prev_bits = b, prev_err = e;
        }
    }
    skv_kvp_params p = {.predictor = SKV_KVP_NONE, .step = {1.0f, 1.0f}, .rate = 1e9f};
    double b;
    coded(&p, kv, H, d, n, &e, &b);
    CHECK(b > 0 && b < 1e9); /* the finest scale tried fits */
    uint8_t lv[120] = {0}, *body = NULL;
    size_t len = 0;
    skv_kvp_header h;
    p.surprisal = sur, p.level = lv;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    p.level = NULL, p.rate = -1.0f;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    free(kv);
}

/* *size of the .skv of tok[0..n) with codec and kv_quant, restored and verified when pred. */
static void skv_size(skv_model *m, int codec, const char *kvq, const int32_t *tok, size_t n, size_t *out)
{
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    size_t size = 0, nf = (size_t)4 * 2 * 2 * 64 * n;
    int32_t back[256];
    char err[256];
    *out = 0;
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = codec;
    ep.kv_quant = kvq;
    ep.skip_entropy = 1; /* the surprisal is recorded all the same */
    CHECK_EQ_INT(skv_encoder_create(m, &ep, &e, err, sizeof err), SKV_OK);
    CHECK_EQ_INT(skv_encoder_append(e, tok, n, NULL), SKV_OK);
    CHECK_EQ_INT(skv_encoder_finish(e, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    float *kv = malloc(nf * sizeof *kv);
    if (codec == SKV_CODEC_PRED) CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, nf, back, 256, 1), SKV_OK);
    if (codec == SKV_CODEC_PRED) CHECK(memcmp(back, tok, n * sizeof *tok) == 0);
    free(kv), free(data);
    skv_session_free(s);
    skv_encoder_free(e);
    *out = size;
}

static void skv_surprisal_rate(void)
{
    skv_model *m = NULL;
    int32_t tok[256];
    size_t n = 0;
    char spec[64];
    if (skv_model_load(MODEL, NULL, &m, NULL, 0)) SKIP("%s not loadable", MODEL);
    const char *text = "And God said, Let there be light: and there was light. And God saw the light, that it was good: "
                       "and God divided the light from the darkness. And God called the light Day, and the darkness "
                       "he called Night. And the evening and the morning were the first day.";
    CHECK_EQ_INT(skv_tokenize(m, text, strlen(text), 1, tok, 256, &n), SKV_OK);
    size_t base, sz, sz2;
    skv_size(m, SKV_CODEC_TOKENS, NULL, tok, n, &base);
    for (int r = 0; r < 2; r++) {
        double rate = r ? 6000.0 : 2000.0;
        snprintf(spec, sizeof spec, "tok,%ssurprisal,rate=%.0f", r ? "ramp," : "", rate);
        skv_size(m, SKV_CODEC_PRED, spec, tok, n, &sz);
        double bits = (double)(sz - base) * 8.0 / (double)n; /* SKVP sub-header + side + stream */
        CHECK_MSG(bits <= rate && bits > 0.8 * rate, "%s: %.1f bits per position", spec, bits);
    }
    skv_size(m, SKV_CODEC_PRED, "tok,surprisal", tok, n, &sz);
    skv_size(m, SKV_CODEC_PRED, "tok", tok, n, &sz2);
    CHECK(sz != sz2 && sz > 0 && sz2 > 0);
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *bad = NULL;
    char err[256];
    ep.codec = SKV_CODEC_PRED;
    ep.kv_quant = "tok,rate=0";
    CHECK_EQ_INT(skv_encoder_create(m, &ep, &bad, err, sizeof err), SKV_ERR_INVALID_ARG);
    ep.kv_quant = "tok,surprise";
    CHECK_EQ_INT(skv_encoder_create(m, &ep, &bad, err, sizeof err), SKV_ERR_INVALID_ARG);
    skv_model_free(m);
}

static void layer0_not_stored(void)
{
    size_t L = 3, H = 2, d = 8, n = 40, tot = L * 2 * H * d * n, l0 = 2 * H * d * n, len = 0, len2 = 0;
    float *kv = malloc(tot * sizeof *kv), *deq = malloc(tot * sizeof *deq), *out = malloc(tot * sizeof *out);
    uint8_t *body = NULL, *body2 = NULL, pay[SKV_KVP_HDR];
    skv_kvp_header h, h2;
    for (size_t i = 0; i < tot; i++) kv[i] = (float)(urand() - 0.5);
    skv_kvp_params p = {.predictor = SKV_KVP_LPC, .step = {0.05f, 0.05f}, .layer0 = 1};
    CHECK_EQ_INT(skv_kvp_encode(&p, (uint32_t)L, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, deq), SKV_OK);
    CHECK(h.flags == 2 && h.n_layer == L && memcmp(deq, kv, l0 * sizeof *kv) == 0);
    h.tokens_bytes = 0;
    skv_kvp_header_write(&h, pay);
    uint8_t *full = malloc(SKV_KVP_HDR + len);
    memcpy(full, pay, SKV_KVP_HDR), memcpy(full + SKV_KVP_HDR, body, len);
    CHECK_EQ_INT(skv_kvp_header_parse(full, SKV_KVP_HDR + len, &h2, NULL), SKV_OK);
    for (size_t i = 0; i < tot; i++) out[i] = 1.0f;
    CHECK_EQ_INT(skv_kvp_decode(&h2, full + SKV_KVP_HDR, len, n, NULL, out, tot), SKV_OK);
    CHECK(memcmp(out + l0, deq + l0, (tot - l0) * sizeof *out) == 0);
    for (size_t i = 0; i < l0; i++) CHECK(out[i] == 0.0f);
    CHECK_EQ_INT(skv_kvp_decode(&h2, full + SKV_KVP_HDR, len, n, NULL, out, tot - 1), SKV_ERR_RANGE);
    p.layer0 = 0;
    CHECK_EQ_INT(skv_kvp_encode(&p, (uint32_t)L, (uint32_t)H, (uint32_t)d, kv, n, &body2, &len2, &h, NULL), SKV_OK);
    CHECK(len < len2);
    full[7] = 2; /* a one-layer header with bit 1 is refused */
    skv_wr32(full + 8, 1);
    CHECK_EQ_INT(skv_kvp_header_parse(full, SKV_KVP_HDR + len, &h2, NULL), SKV_ERR_FORMAT);
    p.layer0 = 1;
    free(body), free(body2);
    body = NULL;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    free(full), free(kv), free(deq), free(out);
}

/* A .skv with layer0: smaller, refused by the model-free restore, restored with the model
 * (digest verified): layers 1.. as in the same file with layer 0 stored, layer 0 exact. */
static void skv_layer0(void)
{
    skv_model *m = NULL;
    int32_t tok[256], back[256];
    size_t n = 0, sz[2];
    uint8_t *data[2];
    char err[256];
    if (skv_model_load(MODEL, NULL, &m, NULL, 0)) SKIP("%s not loadable", MODEL);
    const char *text = "In the beginning God created the heaven and the earth. And the earth was without form, and void.";
    CHECK_EQ_INT(skv_tokenize(m, text, strlen(text), 1, tok, 256, &n), SKV_OK);
    size_t nf = (size_t)4 * 2 * 2 * 64 * n, l0 = (size_t)2 * 2 * 64 * n;
    float *kv[2] = {malloc(nf * sizeof(float)), malloc(nf * sizeof(float))};
    skv_ctx *c = NULL, *ref = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 128;
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &c), SKV_OK);
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &ref), SKV_OK);
    CHECK_EQ_INT(skv_prefill(ref, tok, n, SKV_LOGITS_NONE, NULL), SKV_OK);
    for (int i = 0; i < 2; i++) {
        skv_encoder *e = NULL;
        skv_session *s = NULL;
        skv_encoder_params ep = skv_encoder_default_params();
        skv_restore_params rp = {.verify = 1};
        ep.codec = SKV_CODEC_PRED;
        ep.kv_quant = i ? "tok,ramp,layer0" : "tok,ramp";
        CHECK_EQ_INT(skv_encoder_create(m, &ep, &e, err, sizeof err), SKV_OK);
        CHECK_EQ_INT(skv_encoder_append(e, tok, n, NULL), SKV_OK);
        CHECK_EQ_INT(skv_encoder_finish(e, &data[i], &sz[i]), SKV_OK);
        CHECK_EQ_INT(skv_session_open(data[i], sz[i], &s, err, sizeof err), SKV_OK);
        CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv[i], nf, back, 256, 1), i ? SKV_ERR_UNSUPPORTED : SKV_OK);
        skv_ctx_truncate(c, 0);
        CHECK_EQ_INT(skv_session_restore_segment(s, m, 0, c, &rp, back, 256), SKV_OK);
        CHECK_EQ_INT(skv_ctx_kv_read(c, 0, (int)n, kv[i]), SKV_OK);
        skv_session_free(s);
        skv_encoder_free(e);
    }
    CHECK(sz[1] < sz[0]);
    CHECK(memcmp(kv[0] + l0, kv[1] + l0, (nf - l0) * sizeof(float)) == 0); /* layers 1.. coded alike */
    CHECK_EQ_INT(skv_ctx_kv_read(ref, 0, (int)n, kv[0]), SKV_OK);
    CHECK(memcmp(kv[0], kv[1], l0 * sizeof(float)) == 0);
    free(kv[0]), free(kv[1]), free(data[0]), free(data[1]);
    skv_ctx_free(c);
    skv_ctx_free(ref);
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_kvpred_alloc");
    RUN(levels_follow_surprisal);
    RUN(rate_is_met);
    RUN(skv_surprisal_rate);
    RUN(layer0_not_stored);
    RUN(skv_layer0);
    TEST_END();
}
