/* Predictive KV coding (src/container/kvpred.c): closed-loop round trips are bit-exact for
 * every predictor with and without levels, the error is bounded by the step, the sub-header
 * refuses what it must, damaged streams fail cleanly or decode to finite values, and on the
 * bundled model's real KV the predictors beat coding each position alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "container/kvpred.h"
#include "core/util.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* A RoPE-like series: pairs rotating by a per-pair angle, plus noise. */
static float *make_series(size_t L, size_t H, size_t d, size_t n)
{
    float *kv = malloc(L * 2 * H * n * d * sizeof *kv);
    for (size_t b = 0; b < L * 2 * H; b++)
        for (size_t i = 0; i < d; i += 2) {
            double th = 0.02 + 0.5 * (double)i / (double)d, r = 1.0 + (double)i, ph = urand() * 6.28;
            for (size_t t = 0; t < n; t++) {
                float *x = kv + (b * n + t) * d;
                x[i] = (float)(r * cos(ph + th * (double)t) + 0.05 * (urand() - 0.5));
                if (i + 1 < d) x[i + 1] = (float)(r * sin(ph + th * (double)t) + 0.05 * (urand() - 0.5));
            }
        }
    return kv;
}

/* Encodes, decodes, and checks decode == the encoder's reconstruction: *len body bytes
 * (0 on a failure), *err the largest absolute error. */
static void roundtrip_check(const skv_kvp_params *p, const float *kv, size_t L, size_t H, size_t d, size_t n,
                            double *err, size_t *blen)
{
    size_t tot = L * 2 * H * d * n, len = 0;
    *blen = 0;
    float *deq = malloc(tot * sizeof *deq), *out = malloc(tot * sizeof *out);
    uint8_t *body = NULL, hb[SKV_KVP_HDR];
    skv_kvp_header h, h2;
    CHECK_EQ_INT(skv_kvp_encode(p, (uint32_t)L, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, deq), SKV_OK);
    h.tokens_bytes = 0;
    skv_kvp_header_write(&h, hb);
    uint8_t *pay = malloc(SKV_KVP_HDR + len);
    memcpy(pay, hb, SKV_KVP_HDR);
    memcpy(pay + SKV_KVP_HDR, body, len);
    CHECK_EQ_INT(skv_kvp_header_parse(pay, SKV_KVP_HDR + len, &h2, NULL), SKV_OK);
    CHECK_EQ_INT(skv_kvp_decode(&h2, pay + SKV_KVP_HDR, len, n, p->tokens, out, tot), SKV_OK);
    CHECK(memcmp(out, deq, tot * sizeof *out) == 0);
    *err = 0;
    for (size_t i = 0; i < tot; i++) *err = fmax(*err, fabs((double)out[i] - kv[i]));
    *blen = len;
    free(pay);
    free(body);
    free(deq);
    free(out);
}

static size_t roundtrip(const skv_kvp_params *p, const float *kv, size_t L, size_t H, size_t d, size_t n, double *err)
{
    size_t len = 0;
    roundtrip_check(p, kv, L, H, d, n, err, &len);
    return len;
}

static void roundtrip_every_predictor(void)
{
    size_t L = 2, H = 2, d = 16, n = 50;
    float *kv = make_series(L, H, d, n);
    uint8_t lv[50];
    int32_t tok[50];
    for (size_t t = 0; t < n; t++) tok[t] = (int32_t)((t * 7) % 11);
    for (int pr = 0; pr < SKV_KVP_N_PRED; pr++)
        for (int withlv = 0; withlv < 2; withlv++) {
            skv_kvp_params p = {.predictor = pr, .step = {0.01f, 0.02f}, .level = withlv ? lv : NULL, .tokens = tok};
            for (size_t t = 0; t < n; t++) lv[t] = (uint8_t)(t % 8);
            double e = 0;
            size_t len = roundtrip(&p, kv, L, H, d, n, &e);
            CHECK(len > 0);
            /* step = rel * RMS, RMS <= 16 here: error <= step * 2^3.5 / 2 */
            if (!withlv) CHECK_MSG(e < 0.02 * 17 * 0.5 + 1e-3, "predictor %d err %g", pr, e);
        }
    free(kv);
}

static void lpc2_learns_rotation(void)
{
    size_t L = 1, H = 1, d = 32, n = 200, b[SKV_KVP_TOK];
    float *kv = make_series(L, H, d, n);
    for (int pr = 0; pr < SKV_KVP_TOK; pr++) {
        skv_kvp_params p = {.predictor = pr, .step = {0.005f, 0.005f}};
        double e;
        b[pr] = roundtrip(&p, kv, L, H, d, n, &e);
    }
    CHECK_MSG(b[SKV_KVP_LPC2] * 2 < b[SKV_KVP_NONE], "lpc2 %zu none %zu", b[SKV_KVP_LPC2], b[SKV_KVP_NONE]);
    CHECK_MSG(b[SKV_KVP_LPC2] < b[SKV_KVP_LPC], "lpc2 %zu lpc %zu", b[SKV_KVP_LPC2], b[SKV_KVP_LPC]);
    free(kv);
}

/* Repeated tokens with identical vectors: the tok predictor codes the repeats almost free. */
static void tok_predicts_repeats(void)
{
    size_t d = 16, n = 120, len[2];
    float *kv = malloc(2 * n * d * sizeof *kv);
    int32_t tok[120];
    for (size_t t = 0; t < n; t++) {
        tok[t] = (int32_t)(t % 10);
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < d; c++) kv[(b * n + t) * d + c] = (float)sin(1.0 + (double)(tok[t] * 17 + (int)c) * (b ? 0.3 : 0.7));
    }
    for (int i = 0; i < 2; i++) {
        skv_kvp_params p = {.predictor = i ? SKV_KVP_TOK : SKV_KVP_LPC, .step = {0.01f, 0.01f}, .tokens = tok};
        double e;
        len[i] = roundtrip(&p, kv, 1, 1, d, n, &e);
    }
    CHECK_MSG(len[1] * 3 < len[0], "tok %zu lpc %zu", len[1], len[0]);
    skv_kvp_params p = {.predictor = SKV_KVP_TOK, .step = {0.01f, 0.01f}};
    uint8_t *body = NULL;
    size_t bl;
    skv_kvp_header h;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, (uint32_t)d, kv, n, &body, &bl, &h, NULL), SKV_ERR_INVALID_ARG);
    free(kv);
}

static void skip_level_codes_nothing(void)
{
    size_t L = 1, H = 1, d = 8, n = 64;
    float *kv = make_series(L, H, d, n);
    uint8_t lv[64];
    memset(lv, SKV_KVP_SKIP, sizeof lv);
    skv_kvp_params p = {.predictor = SKV_KVP_DELTA, .step = {0.01f, 0.01f}, .level = lv};
    double e;
    size_t len = roundtrip(&p, kv, L, H, d, n, &e);
    CHECK_MSG(len < 16 + 20, "all-skip body %zu bytes", len); /* side 16 bytes + the levels */
    free(kv);
}

/* The recency ramp: 0 at the sink and the last positions, rising with the distance,
 * at most 7; an encode with it round-trips and refuses explicit levels beside it. */
static void ramp_levels(void)
{
    uint8_t lv[200];
    skv_kvp_ramp_levels(200, lv);
    CHECK(lv[0] == 0 && lv[199] == 0 && lv[195] == 0 && lv[194] == 1 && lv[1] == 7);
    for (size_t t = 2; t < 200; t++) CHECK(lv[t] <= lv[t - 1] && lv[t] <= 7);
    size_t L = 1, H = 2, d = 8, n = 90, len;
    float *kv = make_series(L, H, d, n);
    skv_kvp_params p = {.predictor = SKV_KVP_LPC, .step = {0.2f, 0.2f}, .ramp = 1};
    double e;
    roundtrip_check(&p, kv, L, H, d, n, &e, &len);
    CHECK(len > 0);
    p.level = lv;
    uint8_t *body = NULL;
    skv_kvp_header h;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 2, 8, kv, n, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    free(kv);
}

static void bad_params_refused(void)
{
    float x[64] = {0};
    uint8_t *body = NULL, lv[2] = {9, 0};
    size_t len;
    skv_kvp_header h;
    skv_kvp_params p = {.predictor = 4, .step = {0.1f, 0.1f}};
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 8, x, 1, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    p.predictor = SKV_KVP_LPC2;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 7, x, 1, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    p.predictor = SKV_KVP_DELTA, p.step[0] = 0.0f;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 8, x, 1, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    p.step[0] = 0.1f, p.level = lv;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 8, x, 1, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    p.level = NULL, x[3] = NAN;
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 8, x, 1, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    x[3] = 1e30f, x[4] = -1e30f, p.step[0] = 1e-6f; /* the residual needs > 2^20 steps */
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 8, x, 2, &body, &len, &h, NULL), SKV_ERR_RANGE);
    CHECK(body == NULL);
}

/* Every truncation and many byte flips of a payload: a clean error or finite output. */
static void damaged_payloads(void)
{
    size_t L = 1, H = 2, d = 8, n = 20, tot = L * 2 * H * d * n, len;
    float *kv = make_series(L, H, d, n), *out = malloc(tot * sizeof *out);
    uint8_t *body = NULL, *pay;
    skv_kvp_header h;
    skv_kvp_params p = {.predictor = SKV_KVP_LPC2, .step = {0.05f, 0.05f}};
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 2, 8, kv, n, &body, &len, &h, NULL), SKV_OK);
    h.tokens_bytes = 0;
    pay = malloc(SKV_KVP_HDR + len);
    skv_kvp_header_write(&h, pay);
    memcpy(pay + SKV_KVP_HDR, body, len);
    for (size_t cut = 0; cut < SKV_KVP_HDR + len; cut++) {
        skv_kvp_header g;
        CHECK(skv_kvp_header_parse(pay, cut, &g, NULL) == SKV_ERR_FORMAT);
    }
    for (size_t i = 0; i < (SKV_KVP_HDR + len) * 8; i += 3) {
        skv_kvp_header g;
        pay[i / 8] ^= (uint8_t)(1u << (i % 8));
        if (!skv_kvp_header_parse(pay, SKV_KVP_HDR + len, &g, NULL)) {
            int rc = skv_kvp_decode(&g, pay + SKV_KVP_HDR, len, n, NULL, out, tot);
            CHECK(rc == SKV_OK || rc == SKV_ERR_FORMAT || rc == SKV_ERR_RANGE);
            for (size_t j = 0; rc == SKV_OK && j < tot; j++) CHECK(isfinite(out[j]));
        }
        pay[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    free(pay);
    free(body);
    free(kv);
    free(out);
}

/* Real KV of the bundled model: bit-exact, and prediction across positions pays. */
static void bundled_model_kv(void)
{
    skv_model *m = NULL;
    skv_ctx *c = NULL;
    skv_model_info mi;
    skv_ctx_params cp = skv_ctx_default_params();
    int32_t tok[700];
    size_t n = 0, bytes[SKV_KVP_N_PRED];
    if (skv_model_load(MODEL, NULL, &m, NULL, 0)) SKIP("%s not loadable", MODEL);
    skv_model_get_info(m, &mi);
    cp.n_ctx = 512;
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &c), SKV_OK);
    char text[2400];
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    size_t tl = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    if (tl < sizeof text) SKIP("tests/data/model_ref/heldout.txt missing");
    CHECK_EQ_INT(skv_tokenize(m, text, tl, 1, tok, 700, &n), SKV_OK);
    if (n > 500) n = 500;
    CHECK_EQ_INT(skv_prefill(c, tok, n, SKV_LOGITS_NONE, NULL), SKV_OK);
    size_t tot = (size_t)mi.n_layer * 2 * mi.n_head_kv * mi.head_dim * n;
    float *kv = malloc(tot * sizeof *kv);
    CHECK_EQ_INT(skv_ctx_kv_read(c, 0, (int)n, kv), SKV_OK);
    for (int pr = 0; pr < SKV_KVP_N_PRED; pr++) {
        skv_kvp_params p = {.predictor = pr, .step = {0.5f, 0.5f}, .tokens = tok};
        double e;
        bytes[pr] = roundtrip(&p, kv, (size_t)mi.n_layer, (size_t)mi.n_head_kv, (size_t)mi.head_dim, n, &e);
    }
    /* measured (kv-rd): on this model's KV the previous position predicts little, a
     * repeated token much more; the side information of lpc/lpc2 costs 4-6 bytes a channel */
    CHECK_MSG(bytes[SKV_KVP_TOK] < bytes[SKV_KVP_NONE], "tok %zu none %zu", bytes[SKV_KVP_TOK], bytes[SKV_KVP_NONE]);
    CHECK_MSG(bytes[SKV_KVP_NONE] < bytes[SKV_KVP_DELTA], "none %zu delta %zu", bytes[SKV_KVP_NONE], bytes[SKV_KVP_DELTA]);
    free(kv);
    skv_ctx_free(c);
    skv_model_free(m);
}

/* Codec pred in a .skv file: written by the encoder, opened, restored without the model
 * (verified), restored into a context, and refused when crafted. */
static void skv_codec_pred(void)
{
    skv_model *m = NULL;
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    skv_ctx *c = NULL;
    uint8_t *data = NULL;
    size_t size = 0, n = 0;
    int32_t tok[200], back[200];
    char err[256];
    if (skv_model_load(MODEL, NULL, &m, NULL, 0)) SKIP("%s not loadable", MODEL);
    const char *text = "And God said, Let there be light: and there was light. And God saw the light, that it was good: "
                       "and God divided the light from the darkness. And God called the light Day.";
    CHECK_EQ_INT(skv_tokenize(m, text, strlen(text), 1, tok, 200, &n), SKV_OK);
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = SKV_CODEC_PRED;
    ep.kv_quant = "lpc2,ramp,step=3";
    CHECK_EQ_INT(skv_encoder_create(m, &ep, &e, err, sizeof err), SKV_OK);
    ep.kv_quant = "tok,step=0";
    skv_encoder *bad = NULL;
    CHECK_EQ_INT(skv_encoder_create(m, &ep, &bad, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_encoder_append(e, tok, n, NULL), SKV_OK);
    CHECK_EQ_INT(skv_encoder_finish(e, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    skv_session_kv_info ki;
    CHECK_EQ_INT(skv_session_segment_kv_info(s, 0, &ki), SKV_OK);
    CHECK(!strcmp(ki.scheme[0], "lpc2") && ki.n_layer == 4 && ki.kv_bytes > 0);
    size_t nf = (size_t)4 * 2 * 2 * 64 * n;
    float *kv = malloc(nf * sizeof *kv), *kv2 = malloc(nf * sizeof *kv2);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, nf, back, 200, 1), SKV_OK);
    CHECK(memcmp(back, tok, n * sizeof *tok) == 0);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 256;
    skv_restore_params rp = {.verify = 1};
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &c), SKV_OK);
    CHECK_EQ_INT(skv_session_restore_segment(s, m, 0, c, &rp, back, 200), SKV_OK);
    CHECK_EQ_INT(skv_ctx_kv_read(c, 0, (int)n, kv2), SKV_OK);
    CHECK(memcmp(kv, kv2, nf * sizeof *kv) == 0);
    skv_session_free(s);
    s = NULL;
    /* flipped payload bytes, checksum recomputed: refused when opened or restored, never silent */
    for (size_t at = 128 + 32; at < size - 8; at += 97) {
        data[at] ^= 0x10;
        skv_wr64(data + size - 8, XXH3_64bits(data + 128, size - 8 - 128));
        int rc = skv_session_open(data, size, &s, err, sizeof err);
        if (!rc) rc = skv_session_restore_kv(s, 0, kv2, nf, back, 200, 1);
        /* a success must give the very same KV (a flipped low bit of a tiny coefficient can
         * vanish in the rounding of the prediction) */
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH || (rc == SKV_OK && !memcmp(kv, kv2, nf * sizeof *kv)),
                  "byte %zu: %d", at, rc);
        skv_session_free(s);
        s = NULL;
        data[at] ^= 0x10;
    }
    skv_encoder_free(e);
    skv_ctx_free(c);
    free(kv), free(kv2), free(data);
    skv_model_free(m);
}

/* What "layer 0 regenerated from the token and its position" rests on: in this engine the
 * first layer's K/V row of a position depends on that token and position only (bit for
 * bit, whatever came before), while layer 1's depends on the context. */
static void layer0_is_token_and_position(void)
{
    skv_model *m = NULL;
    skv_ctx *c = NULL;
    skv_model_info mi;
    skv_ctx_params cp = skv_ctx_default_params();
    if (skv_model_load(MODEL, NULL, &m, NULL, 0)) SKIP("%s not loadable", MODEL);
    skv_model_get_info(m, &mi);
    cp.n_ctx = 16;
    CHECK_EQ_INT(skv_ctx_create(m, &cp, &c), SKV_OK);
    size_t row = (size_t)mi.n_head_kv * (size_t)mi.head_dim, n = 4;
    int32_t a[4] = {1, 100, 200, 300}, b[4] = {1, 999, 77, 300};
    float *ka = malloc((size_t)mi.n_layer * 2 * row * n * sizeof *ka), *kb = malloc((size_t)mi.n_layer * 2 * row * n * sizeof *kb);
    CHECK_EQ_INT(skv_prefill(c, a, n, SKV_LOGITS_NONE, NULL), SKV_OK);
    CHECK_EQ_INT(skv_ctx_kv_read(c, 0, (int)n, ka), SKV_OK);
    skv_ctx_truncate(c, 0);
    CHECK_EQ_INT(skv_prefill(c, b, n, SKV_LOGITS_NONE, NULL), SKV_OK);
    CHECK_EQ_INT(skv_ctx_kv_read(c, 0, (int)n, kb), SKV_OK);
    for (size_t blk = 0; blk < (size_t)mi.n_layer * 2 * mi.n_head_kv; blk++) {
        size_t off = (blk * n + 3) * (size_t)mi.head_dim; /* position 3, token 300 in both */
        int same = !memcmp(ka + off, kb + off, (size_t)mi.head_dim * sizeof *ka);
        CHECK_MSG(same == (blk < 2 * (size_t)mi.n_head_kv), "block %zu same %d", blk, same);
    }
    free(ka), free(kb);
    skv_ctx_free(c);
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_kvpred");
    RUN(roundtrip_every_predictor);
    RUN(lpc2_learns_rotation);
    RUN(tok_predicts_repeats);
    RUN(skip_level_codes_nothing);
    RUN(ramp_levels);
    RUN(bad_params_refused);
    RUN(damaged_payloads);
    RUN(bundled_model_kv);
    RUN(skv_codec_pred);
    RUN(layer0_is_token_and_position);
    TEST_END();
}
