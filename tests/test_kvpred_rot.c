/* Residual mode rot of the predictive KV coder (SKVP flag bit 2, docs/format.md 2.5): the
 * residual is rotated with TurboQuant's rotation before the uniform quantizer. Round trips
 * are bit-exact for every predictor, with levels, with layer 0 not stored and for a head_dim
 * that is not a power of two; the error of a vector is bounded by the rotated grid; the
 * sub-header refuses what it must; damaged payloads fail cleanly or decode to finite values;
 * a .skv written with `rot` restores verified. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container/kvpred.h"
#include "core/util.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static float *make_kv(size_t tot)
{
    float *kv = malloc(tot * sizeof *kv);
    for (size_t i = 0; i < tot; i++) kv[i] = (float)(2.0 * urand() - 1.0 + (double)(i % 7) * 0.3);
    return kv;
}

/* header + body as one payload (tokens_bytes 0): malloc'ed, *size bytes. */
static uint8_t *payload(skv_kvp_header *h, const uint8_t *body, size_t len, size_t *size)
{
    uint8_t *pay = malloc(SKV_KVP_HDR + len);
    h->tokens_bytes = 0;
    skv_kvp_header_write(h, pay);
    memcpy(pay + SKV_KVP_HDR, body, len);
    *size = SKV_KVP_HDR + len;
    return pay;
}

/* Encode, parse, decode: decode == the encoder's reconstruction (layers from l0 on); *len body bytes. */
static void rot_roundtrip(const skv_kvp_params *p, const float *kv, size_t L, size_t H, size_t d, size_t n, float *deq,
                          size_t *len_out)
{
    size_t tot = L * 2 * H * d * n, len = 0, size = 0, l0 = p->layer0 ? tot / L : 0;
    *len_out = 0;
    float *out = malloc(tot * sizeof *out);
    uint8_t *body = NULL;
    skv_kvp_header h, h2;
    CHECK_EQ_INT(skv_kvp_encode(p, (uint32_t)L, (uint32_t)H, (uint32_t)d, kv, n, &body, &len, &h, deq), SKV_OK);
    CHECK(((h.flags >> 2) & 1) == (p->rot != 0));
    uint8_t *pay = payload(&h, body, len, &size);
    CHECK_EQ_INT(skv_kvp_header_parse(pay, size, &h2, NULL), SKV_OK);
    CHECK_EQ_INT(skv_kvp_decode(&h2, pay + SKV_KVP_HDR, len, n, p->tokens, out, tot), SKV_OK);
    CHECK(memcmp(out + l0, deq + l0, (tot - l0) * sizeof *out) == 0);
    free(pay), free(body), free(out);
    *len_out = len;
}

static void roundtrip_every_predictor_rotated(void)
{
    size_t L = 2, H = 2, n = 40;
    static const size_t dims[] = {16, 12, 2};
    uint8_t lv[40];
    int32_t tok[40];
    for (size_t t = 0; t < n; t++) tok[t] = (int32_t)((t * 5) % 9), lv[t] = (uint8_t)(t % 9);
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        size_t d = dims[di], tot = L * 2 * H * d * n;
        float *kv = make_kv(tot), *deq = malloc(tot * sizeof *deq);
        for (int pr = 0; pr < SKV_KVP_N_PRED; pr++)
            for (int mode = 0; mode < 3; mode++) {
                skv_kvp_params p = {.predictor = pr, .step = {0.02f, 0.03f}, .tokens = tok, .rot = 1,
                                    .level = mode == 1 ? lv : NULL, .layer0 = mode == 2};
                size_t len = 0;
                rot_roundtrip(&p, kv, L, H, d, n, deq, &len);
                CHECK_MSG(len > 0, "d %zu predictor %d mode %d", d, pr, mode);
            }
        free(kv), free(deq);
    }
}

/* An orthogonal R and a grid of step s in the rotated domain: ||x~ - x|| <= sqrt(d) s / 2
 * (plus binary32 rounding) for every vector. */
static void rotated_error_bounded(void)
{
    size_t L = 1, H = 1, d = 64, n = 30, tot = L * 2 * H * d * n;
    float *kv = make_kv(tot), *deq = malloc(tot * sizeof *deq);
    float abs_step[2] = {0.05f, 0.08f};
    skv_kvp_params p = {.predictor = SKV_KVP_LPC, .step = {1.0f, 1.0f}, .abs_step = abs_step, .rot = 1};
    size_t len = 0;
    rot_roundtrip(&p, kv, L, H, d, n, deq, &len);
    for (size_t v = 0; v < tot / d; v++) {
        double e2 = 0;
        for (size_t c = 0; c < d; c++) e2 += pow((double)deq[v * d + c] - kv[v * d + c], 2);
        double bound = sqrt((double)d) * abs_step[v / n] / 2 * 1.001 + 1e-5;
        CHECK_MSG(sqrt(e2) <= bound, "vector %zu error %g bound %g", v, sqrt(e2), bound);
    }
    free(kv), free(deq);
}

static void rot_refused(void)
{
    float x[2 * 4097] = {0};
    uint8_t *body = NULL, hb[SKV_KVP_HDR];
    size_t len = 0;
    skv_kvp_header h;
    skv_kvp_params p = {.predictor = SKV_KVP_NONE, .step = {0.1f, 0.1f}, .rot = 1};
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 1, 4097, x, 1, &body, &len, &h, NULL), SKV_ERR_INVALID_ARG);
    CHECK(body == NULL);
    /* a hand-made sub-header: flag bit 2 with head_dim 4097, and the unknown flag bit 3 */
    h = (skv_kvp_header){.predictor = SKV_KVP_NONE, .flags = 4, .n_layer = 1, .n_head_kv = 1, .head_dim = 4097,
                         .side_bytes = skv_kvp_side_bytes(SKV_KVP_NONE, 1, 1, 4097)};
    uint8_t *pay = malloc(SKV_KVP_HDR + h.side_bytes);
    memset(pay, 0, SKV_KVP_HDR + h.side_bytes);
    skv_kvp_header_write(&h, pay);
    skv_err err = {0};
    CHECK_EQ_INT(skv_kvp_header_parse(pay, SKV_KVP_HDR + h.side_bytes, &h, &err), SKV_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "4096") != NULL, "%s", err.msg);
    h.head_dim = 8, h.flags = 8, h.side_bytes = skv_kvp_side_bytes(SKV_KVP_NONE, 1, 1, 8);
    skv_kvp_header_write(&h, hb);
    memcpy(pay, hb, SKV_KVP_HDR);
    CHECK_EQ_INT(skv_kvp_header_parse(pay, SKV_KVP_HDR + h.side_bytes, &h, NULL), SKV_ERR_FORMAT);
    free(pay);
}

/* Every truncation and many bit flips (flag bit 2 among them) of a rot payload. */
static void damaged_rot_payloads(void)
{
    size_t L = 1, H = 2, d = 8, n = 20, tot = L * 2 * H * d * n, len = 0, size = 0;
    float *kv = make_kv(tot), *out = malloc(tot * sizeof *out);
    uint8_t *body = NULL;
    skv_kvp_header h;
    skv_kvp_params p = {.predictor = SKV_KVP_LPC2, .step = {0.05f, 0.05f}, .rot = 1};
    CHECK_EQ_INT(skv_kvp_encode(&p, 1, 2, 8, kv, n, &body, &len, &h, NULL), SKV_OK);
    uint8_t *pay = payload(&h, body, len, &size);
    for (size_t cut = 0; cut < size; cut++) {
        skv_kvp_header g;
        CHECK(skv_kvp_header_parse(pay, cut, &g, NULL) == SKV_ERR_FORMAT);
    }
    for (size_t i = 0; i < size * 8; i += 3) {
        skv_kvp_header g;
        pay[i / 8] ^= (uint8_t)(1u << (i % 8));
        if (!skv_kvp_header_parse(pay, size, &g, NULL)) {
            int rc = skv_kvp_decode(&g, pay + SKV_KVP_HDR, len, n, NULL, out, tot);
            CHECK(rc == SKV_OK || rc == SKV_ERR_FORMAT || rc == SKV_ERR_RANGE);
            for (size_t j = 0; rc == SKV_OK && j < tot; j++) CHECK(isfinite(out[j]));
        }
        pay[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    free(pay), free(body), free(kv), free(out);
}

/* A .skv written with `--kv-quant tok,ramp,rot`: restored without the model and verified. */
static void skv_file_rot(void)
{
    skv_model *m = NULL;
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    size_t size = 0, n = 0;
    int32_t tok[200], back[200];
    char err[256];
    if (skv_model_load(MODEL, NULL, &m, NULL, 0)) SKIP("%s not loadable", MODEL);
    const char *text = "In the beginning God created the heaven and the earth. And the earth was without form.";
    CHECK_EQ_INT(skv_tokenize(m, text, strlen(text), 1, tok, 200, &n), SKV_OK);
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = SKV_CODEC_PRED;
    ep.kv_quant = "tok,ramp,rot,step=2";
    CHECK_EQ_INT(skv_encoder_create(m, &ep, &e, err, sizeof err), SKV_OK);
    CHECK_EQ_INT(skv_encoder_append(e, tok, n, NULL), SKV_OK);
    CHECK_EQ_INT(skv_encoder_finish(e, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    size_t nf = (size_t)4 * 2 * 2 * 64 * n;
    float *kv = malloc(nf * sizeof *kv);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, nf, back, 200, 1), SKV_OK);
    CHECK(memcmp(back, tok, n * sizeof *tok) == 0);
    free(kv), free(data);
    skv_session_free(s);
    skv_encoder_free(e);
    skv_model_free(m);
}

int main(void)
{
    TEST_BEGIN("test_kvpred_rot");
    RUN(roundtrip_every_predictor_rotated);
    RUN(rotated_error_bounded);
    RUN(rot_refused);
    RUN(damaged_rot_payloads);
    RUN(skv_file_rot);
    TEST_END();
}
