/* Codec kvtc (11) of .skv files (src/container/codec_kvtc.c, docs/format.md 2.8): a
 * session restores, with its calibration, to the encoder's reconstruction bit for bit
 * (skv_session_restore_kv and skv_session_restore_segment, digest verified); a missing or
 * another calibration is refused naming the file needed; the encoder refuses a missing
 * calibration, one of another geometry and bad specs; every flipped payload byte (segment
 * checksum fixed up) is refused or decodes to the same KV (the quality fields are
 * informational; the ids are covered by the segment checksum, the KV by the digest). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvtc_fixture.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define N 48

static skv_model *g_m;
static uint8_t *g_cal, *g_other;
static size_t g_cal_len, g_other_len;
static int32_t g_tok[N];

/* tok written with codec kvtc (spec, calibration image) into *data; the decoder's expected
 * output (skv_kvtc_encode on the encoder's exact KV) into want when not NULL. */
static int write_kvtc(const char *spec, const uint8_t *cal, size_t cal_len, uint8_t **data, size_t *size, float *want,
                      char *err, size_t cap)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = SKV_CODEC_KVTC, ep.n_ctx = 64, ep.kv_quant = spec, ep.kvtc_cal = cal, ep.kvtc_cal_bytes = cal_len;
    int rc = skv_encoder_create(g_m, &ep, &e, err, cap);
    if (!rc) rc = skv_encoder_append(e, g_tok, N, NULL);
    if (!rc && want) {
        skv_model_info mi;
        skv_kvtc_calib *c = NULL;
        skv_err sub = {0};
        uint8_t *buf = NULL;
        size_t len = 0, nf;
        skv_model_get_info(g_m, &mi);
        nf = (size_t)mi.n_layer * 2 * (size_t)mi.n_head_kv * N * (size_t)mi.head_dim;
        float *kv = malloc(nf * sizeof *kv);
        skv_kvtc_params p = {.predictor = SKV_KVTC_TOK, .step = {1.0f, 1.0f}, .ramp = 1, .tokens = g_tok};
        rc = kv ? skv_ctx_kv_read(skv_encoder_ctx(e), 0, N, kv) : SKV_ERR_NOMEM;
        if (!rc) rc = skv_kvtc_calib_load(cal, cal_len, &c, &sub);
        if (!rc) rc = skv_kvtc_encode(&p, c, kv, N, &buf, &len, want);
        skv_kvtc_calib_free(c);
        free(kv), free(buf);
    }
    if (!rc) rc = skv_encoder_finish(e, data, size);
    if (rc && e) snprintf(err, cap, "%s", skv_encoder_last_error(e));
    skv_encoder_free(e);
    return rc;
}

static size_t kv_floats(void)
{
    skv_model_info mi;
    skv_model_get_info(g_m, &mi);
    return (size_t)mi.n_layer * 2 * (size_t)mi.n_head_kv * N * (size_t)mi.head_dim;
}

/* Decode == the encoder's reconstruction, model-free and into a context. */
static void test_round_trip(void)
{
    size_t nf = kv_floats(), size = 0;
    float *want = calloc(nf, sizeof *want), *got = calloc(nf, sizeof *got), *ctxkv = calloc(nf, sizeof *ctxkv);
    uint8_t *data = NULL;
    int32_t back[N];
    char err[512] = "";
    skv_session *s = NULL;
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    CHECK_MSG(write_kvtc(NULL, g_cal, g_cal_len, &data, &size, want, err, sizeof err) == SKV_OK, "%s", err);
    CHECK_MSG(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK, "%s", err);
    CHECK_EQ_INT(skv_session_set_kvtc_cal(s, g_cal, g_cal_len), SKV_OK);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, got, nf, back, N, 1), SKV_OK);
    CHECK(!memcmp(got, want, nf * sizeof *got));
    CHECK(!memcmp(back, g_tok, sizeof back));
    cp.n_ctx = 64;
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    skv_restore_params rp = {.verify = 1};
    CHECK_MSG(skv_session_restore_segment(s, g_m, 0, c, &rp, back, N) == SKV_OK, "%s", skv_ctx_last_error(c));
    CHECK_EQ_INT(skv_ctx_kv_read(c, 0, N, ctxkv), SKV_OK);
    CHECK(!memcmp(ctxkv, want, nf * sizeof *ctxkv));
    uint64_t id = 0;
    CHECK_EQ_INT(skv_session_kvtc_cal_id(s, &id), SKV_OK);
    CHECK(id != 0);
    skv_ctx_free(c);
    skv_session_free(s);
    /* the same input gives the same bytes */
    uint8_t *again = NULL;
    size_t size2 = 0;
    CHECK(write_kvtc(NULL, g_cal, g_cal_len, &again, &size2, NULL, err, sizeof err) == SKV_OK);
    CHECK(size2 == size && again && !memcmp(again, data, size));
    free(again), free(data), free(want), free(got), free(ctxkv);
}

/* No calibration, or another one: refused, the message naming the file needed. */
static void test_calibration_refused(void)
{
    size_t nf = kv_floats(), size = 0;
    float *got = calloc(nf, sizeof *got);
    uint8_t *data = NULL;
    int32_t back[N];
    char err[512] = "", name[64];
    skv_session *s = NULL;
    uint64_t id = 0;
    CHECK(write_kvtc("none,step=0.7", g_cal, g_cal_len, &data, &size, NULL, err, sizeof err) == SKV_OK);
    CHECK(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK);
    CHECK_EQ_INT(skv_session_kvtc_cal_id(s, &id), SKV_OK);
    snprintf(name, sizeof name, "kvtc-%016llx.cal", (unsigned long long)id);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, got, nf, back, N, 1), SKV_ERR_INVALID_ARG);
    CHECK_MSG(strstr(skv_session_last_error(s), name) != NULL, "'%s' does not name %s", skv_session_last_error(s), name);
    CHECK_EQ_INT(skv_session_set_kvtc_cal(s, g_other, g_other_len), SKV_ERR_MISMATCH);
    CHECK_MSG(strstr(skv_session_last_error(s), name) != NULL, "'%s'", skv_session_last_error(s));
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, got, nf, back, N, 1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_set_kvtc_cal(s, g_cal, g_cal_len - 1), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_session_set_kvtc_cal(s, g_cal, g_cal_len), SKV_OK);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, got, nf, back, N, 1), SKV_OK);
    skv_session_free(s);
    free(data), free(got);
}

/* The encoder: no calibration, a damaged or misfit one, a bad spec, a calibration for another codec. */
static void test_encoder_refuses(void)
{
    uint8_t *data = NULL, *small = NULL;
    size_t size = 0, small_len = 0;
    char err[512] = "";
    skv_kvtc_calib *c = NULL;
    float kv[2 * 8 * 4];
    for (int i = 0; i < 64; i++) kv[i] = (float)((i * 37) % 11) - 5.0f;
    CHECK_EQ_INT(write_kvtc(NULL, NULL, 0, &data, &size, NULL, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err, "calibration") != NULL, "%s", err);
    CHECK_EQ_INT(write_kvtc(NULL, g_cal, g_cal_len / 2, &data, &size, NULL, err, sizeof err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(write_kvtc("tok,step=0", g_cal, g_cal_len, &data, &size, NULL, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(write_kvtc("lpc2", g_cal, g_cal_len, &data, &size, NULL, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_kvtc_calib_create(1, 1, 8, &c), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_add(c, kv, 4), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_finish(c), SKV_OK);
    CHECK_EQ_INT(skv_kvtc_calib_save(c, &small, &small_len), SKV_OK);
    CHECK_EQ_INT(write_kvtc(NULL, small, small_len, &data, &size, NULL, err, sizeof err), SKV_ERR_MISMATCH);
    CHECK_MSG(strstr(err, "head_dim 8") != NULL, "%s", err);
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = SKV_CODEC_PRED, ep.kvtc_cal = g_cal, ep.kvtc_cal_bytes = g_cal_len;
    CHECK_EQ_INT(skv_encoder_create(g_m, &ep, &e, err, sizeof err), SKV_ERR_INVALID_ARG);
    skv_encoder_free(e);
    skv_kvtc_calib_free(c);
    free(small);
}

/* Flips byte i of the one segment's payload (data[off + i]) and fixes up its checksum. */
static void flip(uint8_t *data, size_t seg, uint64_t pb, size_t i)
{
    data[seg + 32 + i] ^= 0x5a;
    uint64_t h = XXH3_64bits(data + seg, 32 + (size_t)pb);
    for (int k = 0; k < 8; k++) data[seg + 32 + pb + (size_t)k] = (uint8_t)(h >> (8 * k));
}

/* Every payload byte flipped: refused at open or restore, or the same KV. */
static void test_damage_refused(void)
{
    size_t nf = kv_floats(), size = 0;
    float *want = calloc(nf, sizeof *want), *got = calloc(nf, sizeof *got);
    uint8_t *data = NULL, *bad;
    int32_t back[N];
    char err[512] = "";
    uint64_t pb = 0;
    skv_session *s = NULL;
    CHECK(write_kvtc("tok,ramp,step=1.5", g_cal, g_cal_len, &data, &size, NULL, err, sizeof err) == SKV_OK);
    CHECK(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK);
    CHECK(skv_session_set_kvtc_cal(s, g_cal, g_cal_len) == SKV_OK);
    CHECK(skv_session_restore_kv(s, 0, want, nf, back, N, 1) == SKV_OK);
    skv_session_segment_info(s, 0, NULL, &pb, NULL);
    skv_session_free(s);
    bad = malloc(size);
    int accepted = 0;
    for (size_t i = 0; bad && i < pb; i++) {
        memcpy(bad, data, size);
        flip(bad, 128, pb, i);
        s = NULL;
        int rc = skv_session_open(bad, size, &s, err, sizeof err);
        if (!rc) rc = skv_session_set_kvtc_cal(s, g_cal, g_cal_len);
        if (!rc) rc = skv_session_restore_kv(s, 0, got, nf, back, N, 1);
        if (!rc) {
            accepted++;
            CHECK_MSG(!memcmp(got, want, nf * sizeof *got), "flipped byte %zu decodes to other KV", i);
        }
        skv_session_free(s);
    }
    /* the stream has its own checksum; a flipped id that zstd still decodes (a literal of
     * the token frame) is the segment checksum's to catch, as in every KV codec: the KV
     * digest covers the KV only */
    printf("    %d of %llu flips accepted (quality fields, token literals), all with the same KV\n", accepted,
           (unsigned long long)pb);
    free(bad), free(data), free(want), free(got);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_codec_kvtc");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_codec_kvtc:setup: %s\n", err);
        return 1;
    }
    for (int i = 0; i < N; i++) g_tok[i] = i ? 10 + (i * 37) % 300 : 1;
    g_cal = kvtc_fixture_cal(g_m, 64, 1, &g_cal_len);
    g_other = kvtc_fixture_cal(g_m, 64, 2, &g_other_len);
    if (!g_cal || !g_other) {
        printf("FAIL test_codec_kvtc:setup: no calibration\n");
        return 1;
    }
    RUN(test_round_trip);
    RUN(test_calibration_refused);
    RUN(test_encoder_refuses);
    RUN(test_damage_refused);
    free(g_cal), free(g_other);
    skv_model_free(g_m);
    TEST_END();
}
