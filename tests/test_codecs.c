/* The codec table (src/container/codecs.c, issue 40) through the public API: every row is
 * found by its id and its name, the flags agree with one another and with what the codec
 * does (a KV codec restores without the model's ids, an id codec's ids decode alone), and
 * the row's names are what the file's readers report; also the type table's names that
 * `seqkv info` prints (skv_weight_type_name) and skv_session_segment_dict on a cmvd file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtc_fixture.h"
#include "seqkv.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static skv_model *g_m;

/* tok[0..n) written with ep and opened again; NULL after a FAIL line's message in err. */
static skv_session *encode_open(const skv_encoder_params *ep, const int32_t *tok, size_t n, char *err, size_t cap)
{
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    int rc = skv_encoder_create(g_m, ep, &e, err, cap);
    if (!rc) rc = skv_encoder_append(e, tok, n, NULL);
    if (!rc) rc = skv_encoder_finish(e, &data, &size);
    if (rc && e) snprintf(err, cap, "%s", skv_encoder_last_error(e));
    skv_encoder_free(e);
    if (!rc) rc = skv_session_open(data, size, &s, err, cap);
    free(data);
    return rc ? NULL : s;
}

/* Every row: a unique id and name, both lookups give the row back, help and payload words. */
static void test_rows_are_found(void)
{
    const skv_codec_desc *d;
    size_t n = 0;
    for (size_t i = 0; (d = skv_codec_at(i)); i++, n++) {
        CHECK_MSG(skv_codec_desc_of(d->id) == d, "row %zu (%s): skv_codec_desc_of(%d) is another row", i, d->name,
                  d->id);
        CHECK_EQ_INT(skv_codec_parse(d->name), d->id);
        CHECK(!strcmp(skv_codec_name(d->id), d->name));
        CHECK_MSG(d->help && *d->help && d->payload && *d->payload, "row %s: no help or payload words", d->name);
        for (size_t j = 0; j < i; j++)
            CHECK_MSG(skv_codec_at(j)->id != d->id && strcmp(skv_codec_at(j)->name, d->name),
                      "rows %zu and %zu share an id or a name", j, i);
    }
    CHECK_EQ_INT((int)n, 14);
    CHECK(skv_codec_at(n) == NULL && skv_codec_desc_of(-1) == NULL && skv_codec_desc_of(12) == NULL);
    CHECK(skv_codec_parse("nope") < 0 && skv_codec_name(99) == NULL);
}

/* The flags say one consistent thing per codec: a prefill restore needs the ids alone, a
 * KV codec has no prefill, a model-coded one neither, NEEDS only with what is needed. */
static void test_flags_agree(void)
{
    const skv_codec_desc *d;
    for (size_t i = 0; (d = skv_codec_at(i)); i++) {
        unsigned f = d->flags;
        CHECK_MSG(!(f & SKV_CODEC_F_PREFILL) || (f & SKV_CODEC_F_IDS), "%s: prefill without ids", d->name);
        CHECK_MSG(!!(f & SKV_CODEC_F_KV) + !!(f & SKV_CODEC_F_PREFILL) + !!(f & SKV_CODEC_F_MODEL) == 1,
                  "%s: not exactly one way to restore", d->name);
        CHECK_MSG(!(f & SKV_CODEC_F_NEEDS) || (f & (SKV_CODEC_F_DICT | SKV_CODEC_F_SPEC)), "%s: needs nothing it takes",
                  d->name);
    }
    CHECK(skv_codec_desc_of(SKV_CODEC_MODEL)->flags & SKV_CODEC_F_MODEL);
    CHECK(skv_codec_desc_of(SKV_CODEC_CMVD)->flags & SKV_CODEC_F_DICT);
    CHECK(skv_codec_desc_of(SKV_CODEC_TQ3)->flags & SKV_CODEC_F_KV);
    CHECK(skv_codec_desc_of(SKV_CODEC_KVTC)->flags & SKV_CODEC_F_CAL);
}

/* Each codec round-trips a short text through the encoder and the reader, and what the
 * reader says it can do matches the flags: token ids alone (skv_session_segment_tokens)
 * exactly for SKV_CODEC_F_IDS, stored KV (skv_session_segment_kv_info) exactly for _F_KV. */
static void test_flags_match_the_reader(void)
{
    static const int32_t dict[] = {1, 200, 300, 400, 500};
    int32_t tok[40], back[40];
    const skv_codec_desc *d;
    size_t cal_len = 0;
    uint8_t *cal = kvtc_fixture_cal(g_m, 64, 1, &cal_len);
    CHECK(cal != NULL);
    for (int i = 0; i < 40; i++) tok[i] = i ? 10 + (i * 37) % 3000 : 1;
    for (size_t i = 0; (d = skv_codec_at(i)); i++) {
        skv_encoder_params ep = skv_encoder_default_params();
        skv_session *s;
        skv_session_kv_info ki;
        skv_restore_params rp = {0};
        uint32_t nb = 0;
        char err[512];
        ep.codec = d->id, ep.n_ctx = 64;
        if (d->id == SKV_CODEC_KVQ) ep.kv_quant = "k=tq4,v=tq3";
        if (d->flags & SKV_CODEC_F_DICT) ep.cm_dict = dict, ep.n_cm_dict = 5, rp.cm_dict = dict, rp.n_cm_dict = 5;
        if (d->flags & SKV_CODEC_F_CAL) ep.kvtc_cal = cal, ep.kvtc_cal_bytes = cal_len;
        CHECK_MSG((s = encode_open(&ep, tok, 40, err, sizeof err)) != NULL, "%s: %s", d->name, err);
        int ids = skv_session_segment_tokens(s, g_m, 0, &rp, back, 40, &nb, err, sizeof err) == SKV_OK;
        int kv = skv_session_segment_kv_info(s, 0, &ki) == SKV_OK;
        skv_session_free(s);
        CHECK_MSG(ids == !!(d->flags & SKV_CODEC_F_IDS), "%s: ids alone %d, flag says %d", d->name, ids,
                  !!(d->flags & SKV_CODEC_F_IDS));
        CHECK_MSG(!ids || (nb == 40 && !memcmp(back, tok, sizeof tok)), "%s: ids differ", d->name);
        CHECK_MSG(kv == !!(d->flags & SKV_CODEC_F_KV), "%s: KV info %d, flag says %d", d->name, kv,
                  !!(d->flags & SKV_CODEC_F_KV));
    }
    free(cal);
}

/* A cmvd file names its dictionary (what `seqkv inspect` shows); other codecs have none. */
static void test_segment_dict(void)
{
    static const int32_t dict[] = {1, 200, 300, 400, 500};
    int32_t tok[20];
    skv_encoder_params ep = skv_encoder_default_params();
    skv_session *s;
    uint64_t id = 0;
    uint32_t n = 0;
    char err[512];
    for (int i = 0; i < 20; i++) tok[i] = i ? 100 + i : 1;
    ep.codec = SKV_CODEC_CMVD, ep.cm_dict = dict, ep.n_cm_dict = 5;
    CHECK_MSG((s = encode_open(&ep, tok, 20, err, sizeof err)) != NULL, "%s", err);
    CHECK_EQ_INT(skv_session_segment_dict(s, 0, &id, &n), SKV_OK);
    CHECK_EQ_INT((int)n, 5);
    CHECK(id != 0);
    CHECK_EQ_INT(skv_session_segment_dict(s, 1, &id, &n), SKV_ERR_INVALID_ARG);
    skv_session_free(s);
    ep.codec = SKV_CODEC_CM, ep.cm_dict = NULL, ep.n_cm_dict = 0;
    CHECK_MSG((s = encode_open(&ep, tok, 20, err, sizeof err)) != NULL, "%s", err);
    CHECK_EQ_INT(skv_session_segment_dict(s, 0, &id, &n), SKV_ERR_UNSUPPORTED);
    skv_session_free(s);
    CHECK_EQ_INT(skv_cm_dict_file_current("/nonexistent/seqkv.skvcm"), 0);
}

/* `seqkv info` printed "(other weights)" for these (issue 40): the type table names them. */
static void test_weight_type_names(void)
{
    static const struct {
        int id;
        const char *name;
    } want[] = {{0, "f32"}, {1, "f16"}, {2, "q4_0"}, {3, "q4_1"}, {6, "q5_0"}, {8, "q8_0"},
                {10, "q2_k"}, {11, "q3_k"}, {12, "q4_k"}, {14, "q6_k"}, {23, "iq4_xs"}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK_MSG(!strcmp(skv_weight_type_name(want[i].id), want[i].name), "type %d: '%s', want '%s'", want[i].id,
                  skv_weight_type_name(want[i].id), want[i].name);
    CHECK(!strcmp(skv_weight_type_name(-1), "unknown") && !strcmp(skv_weight_type_name(1000), "unknown"));
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_codecs");
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_codecs:setup: %s\n", err);
        return 1;
    }
    RUN(test_rows_are_found);
    RUN(test_flags_agree);
    RUN(test_flags_match_the_reader);
    RUN(test_segment_dict);
    RUN(test_weight_type_names);
    skv_model_free(g_m);
    TEST_END();
}
