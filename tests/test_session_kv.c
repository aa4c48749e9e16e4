/* .skv sessions with a quantized KV payload (codecs f16 q8 q4 tq2 tq3 tq4 kvq;
 * docs/format.md section 2.3): restored without running the model, bit-exact against
 * the reference quantize->dequantize of the exact KV, digest-verified, sized exactly,
 * and hostile sub-headers / payloads refused.
 *
 * Model: the bundled models/kjv-4m.gguf; text: the start of the held-out KJV text
 * (tests/data/model_ref/heldout.txt), N_TOK tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "quant/kvquant.h"
#include "quant/quant.h"
#include "seqkv.h"
#include "test.h"
#include "core/util.h"

#define MODEL "models/kjv-4m.gguf"
#define TEXT "tests/data/model_ref/heldout.txt"
#define N_TOK 300
#define HDR 128
#define SEGHDR 32
#define KVHDR 56

static skv_model *g_m;
static skv_model_info g_info;
static int32_t g_tok[N_TOK];
static size_t g_n;
static float *g_exact; /* canonical KV of g_tok[0..g_n) from a fresh context */
static size_t g_nf;    /* floats in g_exact */
static char g_why[400];
static uint64_t g_tokens_payload; /* payload bytes of the codec-tokens file of g_tok */

/* Recomputes the header checksum and that of a single-segment file's segment. */
static void fix_checksums(uint8_t *d, size_t size)
{
    skv_wr64(d + 120, XXH3_64bits(d, 120));
    skv_wr64(d + size - 8, XXH3_64bits(d + HDR, size - 8 - HDR));
}

static int setup(void)
{
    char err[256] = "", *text = calloc(1, 4097);
    int32_t *big = malloc(4097 * sizeof *big);
    FILE *f = fopen(TEXT, "rb");
    size_t len = f && text ? fread(text, 1, 4096, f) : 0, n = 0;
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    int ok = 0;
    if (f) fclose(f);
    if (g_m || g_why[0]) goto done;
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        snprintf(g_why, sizeof g_why, "%s: %s", MODEL, err);
        goto done;
    }
    skv_model_get_info(g_m, &g_info);
    while (len && text[len - 1] != ' ') len--; /* cut at a space: no token straddles the cut */
    if (!big || !len || skv_tokenize(g_m, text, len, 1, big, 4097, &n) || n < N_TOK) {
        snprintf(g_why, sizeof g_why, "cannot read and tokenize %d tokens of %s", N_TOK, TEXT);
        goto done;
    }
    g_n = N_TOK;
    memcpy(g_tok, big, sizeof g_tok);
    g_nf = (size_t)g_info.n_layer * 2 * (size_t)g_info.n_head_kv * g_n * (size_t)g_info.head_dim;
    cp.n_ctx = N_TOK;
    g_exact = malloc(g_nf * sizeof *g_exact);
    if (!g_exact || skv_ctx_create(g_m, &cp, &c) || skv_prefill(c, g_tok, g_n, SKV_LOGITS_NONE, NULL) ||
        skv_ctx_kv_read(c, 0, (int)g_n, g_exact)) {
        snprintf(g_why, sizeof g_why, "running the model failed");
        goto done;
    }
    ok = 1;
done:
    skv_ctx_free(c);
    free(text);
    free(big);
    if (!ok && g_why[0] && g_m) {
        skv_model_free(g_m);
        g_m = NULL;
    }
    return g_m != NULL && g_exact != NULL && !g_why[0];
}

#define NEED_SETUP()                          \
    do {                                      \
        if (!setup()) SKIP("%s", g_why);      \
    } while (0)

/* Encodes tokens[0..n) with codec (+ kv_quant spec) at capacity n_ctx (segmenting on). */
static int encode(int codec, const char *kvq, const int32_t *tok, size_t n, int n_ctx, uint8_t **data, size_t *size)
{
    skv_encoder_params p = skv_encoder_default_params();
    skv_encoder *e = NULL;
    int rc;
    p.codec = codec;
    p.kv_quant = kvq;
    p.n_ctx = n_ctx;
    p.segment = 1;
    if ((rc = skv_encoder_create(g_m, &p, &e, NULL, 0))) return rc;
    if (!(rc = skv_encoder_append(e, tok, n, NULL))) rc = skv_encoder_finish(e, data, size);
    skv_encoder_free(e);
    return rc;
}

/* The reference: each (layer, kind) block of `exact` through its per-vector round trip. */
static int reference(const float *exact, size_t n, const int scheme[2], uint64_t seed, float *out)
{
    size_t hd = (size_t)g_info.head_dim, nvec = (size_t)g_info.n_head_kv * n, off = 0;
    for (int l = 0; l < g_info.n_layer; l++)
        for (int k = 0; k < 2; k++, off += nvec * hd) {
            int rc;
            if (seed == 0) {
                /* the public path the engine's kv_quant uses */
                rc = skv_kv_quant_roundtrip(skv_quant_name(scheme[k]), hd, l, k, exact + off, nvec, out + off, NULL);
            } else {
                size_t nb = skv_quant_bytes(scheme[k], hd) * nvec;
                uint8_t *buf = malloc(nb);
                uint64_t s = skv_kvquant_seed(seed, l, k);
                rc = buf ? skv_quant_encode(scheme[k], hd, s, exact + off, nvec, buf, nb) : SKV_ERR_NOMEM;
                if (!rc) rc = skv_quant_decode(scheme[k], hd, s, buf, nb, nvec, out + off, nvec * hd);
                free(buf);
            }
            if (rc) return rc;
        }
    return SKV_OK;
}

/* One codec end to end on the g_n tokens: size, model-free restore, reference, verify,
 * restore into a context. */
static void check_codec(int codec, const char *kvq, const int scheme[2], uint64_t seed)
{
    uint8_t *data = NULL, *tdata = NULL, dg[16];
    size_t size = 0, tsize = 0;
    skv_session *s = NULL, *ts = NULL;
    skv_session_kv_info ki;
    float *kv = malloc(g_nf * sizeof *kv), *ref = malloc(g_nf * sizeof *ref), *back = malloc(g_nf * sizeof *back);
    int32_t tok[N_TOK];
    char err[512] = "";
    double pb[2];
    uint64_t tpb = 0;
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    CHECK(kv && ref && back);
    CHECK_EQ_INT(encode(codec, kvq, g_tok, g_n, 0, &data, &size), SKV_OK);
    if (!g_tokens_payload) { /* the codec-tokens payload of the same tokens (encoded once) */
        CHECK_EQ_INT(encode(SKV_CODEC_TOKENS, NULL, g_tok, g_n, 0, &tdata, &tsize), SKV_OK);
        CHECK_EQ_INT(skv_session_open(tdata, tsize, &ts, err, sizeof err), SKV_OK);
        skv_session_segment_info(ts, 0, NULL, &g_tokens_payload, NULL);
        skv_session_free(ts);
        free(tdata);
    }
    tpb = g_tokens_payload;
    CHECK_MSG(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK, "%s", err);
    CHECK_EQ_INT(skv_session_segment_kv_info(s, 0, &ki), SKV_OK);
    CHECK(!strcmp(ki.scheme[0], skv_quant_name(scheme[0])) && !strcmp(ki.scheme[1], skv_quant_name(scheme[1])));
    CHECK(ki.seed == seed && ki.n_layer == g_info.n_layer && ki.n_head_kv == g_info.n_head_kv &&
          ki.head_dim == g_info.head_dim);
    /* sizes: the per-position cost is exactly the sum of the two schemes' skv_kv_position_bytes halves */
    CHECK_EQ_INT(skv_kv_position_bytes(g_m, skv_quant_name(scheme[0]), &pb[0]), SKV_OK);
    CHECK_EQ_INT(skv_kv_position_bytes(g_m, skv_quant_name(scheme[1]), &pb[1]), SKV_OK);
    CHECK((double)ki.position_bytes == (pb[0] + pb[1]) / 2);
    CHECK_MSG(ki.tokens_bytes == tpb, "token part %llu bytes, codec tokens payload %llu",
              (unsigned long long)ki.tokens_bytes, (unsigned long long)tpb);
    CHECK(ki.kv_bytes == g_n * ki.position_bytes);
    CHECK_EQ_INT(size, HDR + SEGHDR + KVHDR + tpb + g_n * ki.position_bytes + 8);
    /* restore without a model, against the reference round trip */
    CHECK_MSG(skv_session_restore_kv(s, 0, kv, g_nf, tok, N_TOK, 1) == SKV_OK, "%s", skv_session_last_error(s));
    CHECK(!memcmp(tok, g_tok, g_n * sizeof *tok));
    CHECK_EQ_INT(reference(g_exact, g_n, scheme, seed, ref), SKV_OK);
    CHECK_MSG(!memcmp(kv, ref, g_nf * sizeof *kv), "restored KV differs from the reference round trip");
    /* the stored quality numbers are those of this round trip */
    for (int k = 0; k < 2; k++) CHECK(ki.rel_mse[k] >= 0 && ki.rel_mse[k] < 0.5f);
    /* into a context: no forward pass, the same values, the digest verified */
    skv_restore_stats st = {0, 0, 0, 0};
    skv_restore_params rp = {.verify = 1, .stats = &st};
    cp.n_ctx = N_TOK;
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    int rc = skv_session_restore_segment(s, g_m, 0, c, &rp, tok, N_TOK);
    if (rc) snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
    if (rc == SKV_OK) rc = skv_ctx_kv_read(c, 0, (int)g_n, back);
    if (rc == SKV_OK) rc = skv_ctx_kv_digest(c, (int)g_n, dg);
    skv_ctx_free(c);
    CHECK_MSG(rc == SKV_OK, "%s", err);
    CHECK(st.n_passes == 0 && st.n_tokens == g_n);
    CHECK(!memcmp(back, ref, g_nf * sizeof *back));
    uint8_t stored[16];
    skv_session_segment_info(s, 0, NULL, NULL, stored);
    CHECK(!memcmp(dg, stored, 16));
    if (scheme[0] != SKV_QUANT_F32) CHECK(memcmp(kv, g_exact, g_nf * sizeof *kv)); /* lossy indeed */
    printf("  %-4s k=%s,v=%s: %zu bytes for %zu tokens = %.1f bits/position (tokens %.2f, KV %.1f); rel MSE K %.3g V %.3g\n",
           skv_codec_name(codec), ki.scheme[0], ki.scheme[1], size, g_n, (double)size * 8 / (double)g_n,
           (double)ki.tokens_bytes * 8 / (double)g_n, (double)ki.kv_bytes * 8 / (double)g_n, ki.rel_mse[0],
           ki.rel_mse[1]);
    skv_session_free(s);
    free(data);
    free(kv);
    free(ref);
    free(back);
}

static void codec_f16(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_F16, SKV_QUANT_F16};
    check_codec(SKV_CODEC_F16, NULL, sc, 0);
}

static void codec_q8(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_Q8_0, SKV_QUANT_Q8_0};
    check_codec(SKV_CODEC_Q8, NULL, sc, 0);
}

static void codec_q4(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_Q4_0, SKV_QUANT_Q4_0};
    check_codec(SKV_CODEC_Q4, NULL, sc, 0);
}

static void codec_tq2(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_TQ2, SKV_QUANT_TQ2};
    check_codec(SKV_CODEC_TQ2, NULL, sc, 0);
}

static void codec_tq3(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_TQ3, SKV_QUANT_TQ3};
    check_codec(SKV_CODEC_TQ3, NULL, sc, 0);
}

static void codec_tq4(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_TQ4, SKV_QUANT_TQ4};
    check_codec(SKV_CODEC_TQ4, NULL, sc, 0);
}

/* K/V split, a prod variant and a non-zero seed (reference built from the quantizer directly). */
static void codec_kvq_split_seed(void)
{
    NEED_SETUP();
    int sc[2] = {SKV_QUANT_TQ4, SKV_QUANT_TQ3P};
    check_codec(SKV_CODEC_KVQ, "k=tq4,v=tq3p,seed=77", sc, 77);
}

/* Lossless through the same path: f32 for both kinds restores the exact KV, and its digest
 * is the context's own digest of the run. */
static void codec_kvq_f32_is_exact(void)
{
    NEED_SETUP();
    uint8_t *data = NULL, d_exact[16], stored[16];
    size_t size = 0;
    skv_session *s = NULL;
    float *kv = malloc(g_nf * sizeof *kv);
    int32_t tok[N_TOK];
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = N_TOK;
    CHECK(kv);
    CHECK_EQ_INT(encode(SKV_CODEC_KVQ, "f32", g_tok, g_n, 0, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, g_nf, tok, N_TOK, 1), SKV_OK);
    CHECK(!memcmp(kv, g_exact, g_nf * sizeof *kv));
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    int rc = skv_prefill(c, g_tok, g_n, SKV_LOGITS_NONE, NULL);
    if (!rc) rc = skv_ctx_kv_digest(c, (int)g_n, d_exact);
    skv_ctx_free(c);
    CHECK_EQ_INT(rc, SKV_OK);
    skv_session_segment_info(s, 0, NULL, NULL, stored);
    CHECK(!memcmp(stored, d_exact, 16));
    skv_session_free(s);
    free(data);
    free(kv);
}

/* Segments: each is an independent cache, restored and checked on its own. */
static void segmented(void)
{
    NEED_SETUP();
    uint8_t *data = NULL;
    size_t size = 0, seg = 128;
    skv_session *s = NULL;
    skv_session_info si;
    int sc[2] = {SKV_QUANT_TQ3, SKV_QUANT_TQ3};
    size_t per = (size_t)g_info.n_layer * 2 * (size_t)g_info.n_head_kv * (size_t)g_info.head_dim;
    float *kv = malloc(per * seg * sizeof *kv), *ref = malloc(per * seg * sizeof *ref), *ex = malloc(per * seg * sizeof *ex);
    int32_t tok[128];
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = (int)seg;
    CHECK(kv && ref && ex);
    CHECK_EQ_INT(encode(SKV_CODEC_TQ3, NULL, g_tok, g_n, (int)seg, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK);
    skv_session_get_info(s, &si);
    CHECK_EQ_INT(si.n_segments, (g_n + seg - 1) / seg);
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    for (uint32_t i = 0; i < si.n_segments; i++) {
        size_t n = i + 1 < si.n_segments ? seg : g_n - i * seg;
        int rc = skv_ctx_truncate(c, 0);
        if (!rc) rc = skv_prefill(c, g_tok + i * seg, n, SKV_LOGITS_NONE, NULL);
        if (!rc) rc = skv_ctx_kv_read(c, 0, (int)n, ex);
        if (!rc) rc = reference(ex, n, sc, 0, ref);
        if (!rc) rc = skv_session_restore_kv(s, i, kv, per * seg, tok, 128, 1);
        if (rc) skv_ctx_free(c);
        CHECK_EQ_INT(rc, SKV_OK);
        if (memcmp(kv, ref, per * n * sizeof *kv) || memcmp(tok, g_tok + i * seg, n * sizeof *tok)) {
            skv_ctx_free(c);
            CHECK_MSG(0, "segment %u differs", i);
        }
    }
    skv_ctx_free(c);
    skv_session_free(s);
    free(data);
    free(kv);
    free(ref);
    free(ex);
}

/* A small tq2 file of the first 40 tokens (the hostile tests mutate it). */
static int small_file(int codec, const char *kvq, uint8_t **data, size_t *size)
{
    return encode(codec, kvq, g_tok, 40, 0, data, size);
}

static int open_status(const uint8_t *d, size_t n, char *err, size_t cap)
{
    skv_session *s = NULL;
    err[0] = 0;
    int rc = skv_session_open(d, n, &s, err, cap);
    skv_session_free(s);
    return rc;
}

/* Accidental damage: every bit flip and many truncations are refused at open (checksums). */
static void corruption_is_caught(void)
{
    NEED_SETUP();
    uint8_t *data = NULL, *d;
    size_t size = 0;
    char err[512];
    CHECK_EQ_INT(small_file(SKV_CODEC_TQ2, NULL, &data, &size), SKV_OK);
    CHECK((d = malloc(size)) != NULL);
    for (size_t bit = 0; bit < size * 8; bit += 61) { /* every bit of small files: test_session.c */
        memcpy(d, data, size);
        d[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = open_status(d, size, err, sizeof err);
        if (rc != SKV_ERR_FORMAT && rc != SKV_ERR_UNSUPPORTED) {
            free(d);
            free(data);
            CHECK_MSG(0, "bit %zu flipped: %s", bit, skv_status_str(rc));
        }
    }
    for (size_t len = 0; len < size; len += len < 300 ? 1 : 97) {
        int rc = open_status(data, len, err, sizeof err);
        if (rc != SKV_ERR_FORMAT) {
            free(d);
            free(data);
            CHECK_MSG(0, "truncated to %zu: %s", len, skv_status_str(rc));
        }
    }
    free(d);
    free(data);
}

typedef struct {
    size_t off; /* from the start of the KV sub-header */
    int width;
    uint64_t v;
    const char *what;
} mutation;

/* Crafted sub-headers (checksums recomputed): every field out of line is refused by open. */
static void crafted_subheaders_refused(void)
{
    NEED_SETUP();
    static const mutation muts[] = {
        {0, 4, 0x51564B54, "magic"},
        {4, 2, 48, "sub-header size"},
        {4, 2, 0xFFFF, "sub-header size"},
        {6, 1, SKV_QUANT_TQ3, "K scheme differs from the codec"},
        {7, 1, SKV_QUANT_TQ4, "V scheme differs from the codec"},
        {6, 1, 200, "unknown scheme"},
        {8, 4, 0, "n_layer 0"},
        {8, 4, 5, "n_layer"},
        {8, 4, 0xFFFFFFFF, "n_layer huge"},
        {12, 4, 0, "n_head_kv 0"},
        {12, 4, 0x80000000u, "n_head_kv huge"},
        {16, 4, 32, "head_dim"},
        {16, 4, 0xFFFFFFFF, "head_dim huge"},
        {20, 4, 1, "reserved"},
        {32, 8, 0, "tokens_bytes 0"},
        {32, 8, UINT64_MAX, "tokens_bytes huge"},
        {40, 8, 0, "kv_bytes 0"},
        {40, 8, UINT64_MAX, "kv_bytes huge"},
        {48, 4, 0x7FC00000, "rel_mse NaN"},
        {52, 4, 0xBF800000, "rel_mse negative"},
        {52, 4, 0x7F800000, "rel_mse inf"},
        {0, 0, 0, NULL},
    };
    uint8_t *data = NULL, *d;
    size_t size = 0;
    char err[512];
    CHECK_EQ_INT(small_file(SKV_CODEC_TQ2, NULL, &data, &size), SKV_OK);
    CHECK((d = malloc(size)) != NULL);
    for (int k = 0; muts[k].what; k++) {
        uint8_t *h = d + HDR + SEGHDR;
        memcpy(d, data, size);
        for (int b = 0; b < muts[k].width; b++) h[muts[k].off + (size_t)b] = (uint8_t)(muts[k].v >> (8 * b));
        fix_checksums(d, size);
        int rc = open_status(d, size, err, sizeof err);
        if (rc != SKV_ERR_FORMAT || !strstr(err, "not a valid .skv file")) {
            free(d);
            free(data);
            CHECK_MSG(0, "%s: %s '%s'", muts[k].what, skv_status_str(rc), err);
        }
    }
    /* token/KV split moved by one byte: the sizes no longer add up, or the frame breaks */
    memcpy(d, data, size);
    skv_wr64(d + HDR + SEGHDR + 32, skv_rd64(d + HDR + SEGHDR + 32) + 1);
    fix_checksums(d, size);
    int rc = open_status(d, size, err, sizeof err);
    free(d);
    free(data);
    CHECK_MSG(rc == SKV_ERR_FORMAT, "tokens_bytes + 1: %s", skv_status_str(rc));
}

/* Crafted payload bytes (checksums recomputed): a changed KV byte is caught by verify
 * (or refused as an invalid value); a changed token frame is refused; with a codec id
 * changed to another fixed scheme the file is refused, to kvq it still opens. */
static void crafted_payloads(void)
{
    NEED_SETUP();
    uint8_t *data = NULL, *d;
    size_t size = 0;
    skv_session *s = NULL;
    skv_session_kv_info ki;
    float *kv = malloc(g_nf * sizeof *kv);
    int32_t tok[N_TOK];
    char err[512];
    int caught = 0, silent = 0;
    CHECK(kv);
    CHECK_EQ_INT(small_file(SKV_CODEC_TQ3, NULL, &data, &size), SKV_OK);
    CHECK((d = malloc(size)) != NULL);
    CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK);
    skv_session_segment_kv_info(s, 0, &ki);
    skv_session_free(s);
    size_t kv0 = HDR + SEGHDR + KVHDR + (size_t)ki.tokens_bytes;
    for (size_t off = kv0; off < size - 8; off += 97) {
        memcpy(d, data, size);
        d[off] ^= 0x10;
        fix_checksums(d, size);
        s = NULL;
        int rc = skv_session_open(d, size, &s, err, sizeof err);
        if (!rc) rc = skv_session_restore_kv(s, 0, kv, g_nf, tok, N_TOK, 1);
        skv_session_free(s);
        if (rc == SKV_ERR_MISMATCH || rc == SKV_ERR_FORMAT) caught++;
        else silent++;
    }
    CHECK_MSG(silent == 0 && caught > 0, "KV byte changes: %d caught, %d silent", caught, silent);
    /* the token frame: one byte changed inside it */
    memcpy(d, data, size);
    d[HDR + SEGHDR + KVHDR + 5] ^= 0x01;
    fix_checksums(d, size);
    s = NULL;
    int rc = skv_session_open(d, size, &s, err, sizeof err);
    if (!rc) rc = skv_session_restore_kv(s, 0, kv, g_nf, tok, N_TOK, 1);
    skv_session_free(s);
    CHECK_MSG(rc != SKV_OK || memcmp(tok, g_tok, 40 * sizeof *tok) == 0, "a changed token frame restored other tokens");
    /* codec id -> tq4: schemes disagree with the codec; -> kvq: valid (the sub-header rules) */
    memcpy(d, data, size);
    skv_wr32(d + 12, SKV_CODEC_TQ4);
    fix_checksums(d, size);
    CHECK_EQ_INT(open_status(d, size, err, sizeof err), SKV_ERR_FORMAT);
    skv_wr32(d + 12, SKV_CODEC_KVQ);
    fix_checksums(d, size);
    CHECK_EQ_INT(open_status(d, size, err, sizeof err), SKV_OK);
    skv_wr32(d + 12, 1000);
    fix_checksums(d, size);
    CHECK_EQ_INT(open_status(d, size, err, sizeof err), SKV_ERR_UNSUPPORTED);
    CHECK(strstr(err, "unknown codec id 1000") != NULL);
    free(d);
    free(data);
    free(kv);
}

/* Same byte count, other geometry (8 layers x 1 head instead of 4 x 2): opens; the model's
 * context refuses it (MISMATCH naming both shapes); model-free decoding gives other values,
 * caught by verify. */
static void geometry_mismatch(void)
{
    NEED_SETUP();
    uint8_t *data = NULL;
    size_t size = 0;
    skv_session *s = NULL;
    float *kv = malloc(g_nf * sizeof *kv);
    int32_t tok[N_TOK];
    char err[512] = "";
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    CHECK(kv);
    if (g_info.n_head_kv != 2) SKIP("the test model is expected to have 2 KV heads");
    CHECK_EQ_INT(small_file(SKV_CODEC_TQ3, NULL, &data, &size), SKV_OK);
    skv_wr32(data + HDR + SEGHDR + 8, (uint32_t)g_info.n_layer * 2);
    skv_wr32(data + HDR + SEGHDR + 12, 1);
    fix_checksums(data, size);
    CHECK_MSG(skv_session_open(data, size, &s, err, sizeof err) == SKV_OK, "%s", err);
    cp.n_ctx = 64;
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    skv_restore_params rp = {.verify = 1};
    int rc = skv_session_restore_segment(s, g_m, 0, c, &rp, tok, N_TOK);
    snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
    skv_ctx_free(c);
    CHECK_MSG(rc == SKV_ERR_MISMATCH && strstr(err, "geometry"), "%s: %s", skv_status_str(rc), err);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, g_nf, tok, N_TOK, 1), SKV_ERR_MISMATCH);
    CHECK(strstr(skv_session_last_error(s), "KV verification failed") != NULL);
    skv_session_free(s);
    free(data);
    free(kv);
}

static void api_errors(void)
{
    NEED_SETUP();
    uint8_t *data = NULL, *tdata = NULL;
    size_t size = 0, tsize = 0;
    skv_session *s = NULL, *ts = NULL;
    skv_session_kv_info ki;
    skv_encoder *e = NULL;
    skv_encoder_params p = skv_encoder_default_params();
    float kv[16];
    int32_t tok[N_TOK];
    char err[512];
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();

    /* names */
    CHECK(!strcmp(skv_codec_name(SKV_CODEC_TQ3), "tq3") && skv_codec_name(1000) == NULL && skv_codec_name(-1) == NULL);
    CHECK_EQ_INT(skv_codec_parse("q8"), SKV_CODEC_Q8);
    CHECK_EQ_INT(skv_codec_parse("q8_0"), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_codec_parse(NULL), SKV_ERR_INVALID_ARG);
    /* encoder parameters */
    p.codec = SKV_CODEC_KVQ;
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG); /* no spec */
    p.kv_quant = "k=tq4";
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG); /* one kind only */
    p.kv_quant = "tq4,window=8";
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG); /* not a storage option */
    p.kv_quant = "tq9";
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG);
    p.codec = SKV_CODEC_TQ3;
    p.kv_quant = "tq3";
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG); /* fixed codecs take no spec */
    CHECK(e == NULL);
    /* restore_kv on a token codec, short buffers */
    CHECK_EQ_INT(small_file(SKV_CODEC_Q4, NULL, &data, &size), SKV_OK);
    CHECK_EQ_INT(encode(SKV_CODEC_TOKENS, NULL, g_tok, 40, 0, &tdata, &tsize), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK);
    CHECK_EQ_INT(skv_session_open(tdata, tsize, &ts, NULL, 0), SKV_OK);
    CHECK_EQ_INT(skv_session_segment_kv_info(ts, 0, &ki), SKV_ERR_UNSUPPORTED);
    CHECK_EQ_INT(skv_session_restore_kv(ts, 0, kv, 16, tok, N_TOK, 1), SKV_ERR_UNSUPPORTED);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, 16, tok, N_TOK, 1), SKV_ERR_RANGE);
    CHECK(strstr(skv_session_last_error(s), "KV buffer too small") != NULL);
    CHECK_EQ_INT(skv_session_restore_kv(s, 0, kv, 16, tok, 39, 1), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_session_restore_kv(s, 1, kv, 16, tok, N_TOK, 1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_restore_kv(NULL, 0, kv, 16, tok, N_TOK, 1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_segment_kv_info(s, 1, &ki), SKV_ERR_INVALID_ARG);
    /* a context with a quantized cache cannot be loaded */
    cp.n_ctx = 64;
    cp.kv_quant = "tq3";
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    skv_restore_params rp = {.verify = 1};
    int rc = skv_session_restore_segment(s, g_m, 0, c, &rp, tok, N_TOK);
    snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
    skv_ctx_free(c);
    CHECK_MSG(rc == SKV_ERR_UNSUPPORTED, "%s: %s", skv_status_str(rc), err);
    skv_session_free(s);
    skv_session_free(ts);
    free(data);
    free(tdata);
}

/* ---- crafted geometry: what a model-free decode may cost ---------------------------- */

/* A codec-kvq file from scratch: one segment of one token (id 0), K and V in `scheme` at
 * head_dim d for L layers x H KV heads, every vector the all-zero code (valid: norm 0). */
static uint8_t *craft_kvq(uint32_t L, uint32_t H, uint32_t d, int scheme, size_t *size)
{
    uint8_t raw = 0, tz[64];
    size_t tl = ZSTD_compress(tz, sizeof tz, &raw, 1, 1), vb = skv_quant_bytes(scheme, d);
    size_t kvb = (size_t)L * 2 * H * vb, pl = KVHDR + tl + kvb, n = HDR + SEGHDR + pl + 8;
    uint8_t *f = ZSTD_isError(tl) || !vb ? NULL : calloc(1, n), *g = f + HDR, *q = g + SEGHDR;
    if (!f) return NULL;
    memcpy(f, "\x89SKV\r\n\x1a\n", 8);
    skv_wr16(f + 8, 1);
    skv_wr16(f + 10, HDR);
    skv_wr32(f + 12, SKV_CODEC_KVQ);
    skv_wr32(f + 20, 1);     /* segments */
    skv_wr64(f + 24, 1);     /* tokens */
    skv_wr32(f + 32, 1);     /* n_ctx */
    skv_wr32(f + 36, 256);   /* n_vocab */
    memcpy(f + 64, "crafted", 7);
    skv_wr64(f + 120, XXH3_64bits(f, 120));
    memcpy(g, "SKVS", 4);
    skv_wr32(g + 4, 1);
    skv_wr64(g + 8, pl);
    memcpy(q, "SKVQ", 4);
    skv_wr16(q + 4, KVHDR);
    q[6] = q[7] = (uint8_t)scheme;
    skv_wr32(q + 8, L);
    skv_wr32(q + 12, H);
    skv_wr32(q + 16, d);
    skv_wr64(q + 32, tl);
    skv_wr64(q + 40, kvb);
    memcpy(q + KVHDR, tz, tl);
    skv_wr64(g + SEGHDR + pl, XXH3_64bits(g, SEGHDR + pl));
    *size = n;
    return f;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* skv_session_restore_kv of a crafted file: its status, message and seconds. */
static int crafted_restore(uint32_t L, uint32_t H, uint32_t d, int scheme, float **kv, char *err, size_t cap,
                           double *secs)
{
    size_t size = 0, nf = (size_t)L * 2 * H * d;
    uint8_t *f = craft_kvq(L, H, d, scheme, &size);
    skv_session *s = NULL;
    int32_t tok[1] = {-1};
    int rc = f ? skv_session_open(f, size, &s, err, cap) : SKV_ERR_NOMEM;
    *kv = malloc(nf * sizeof **kv);
    if (rc == SKV_OK && !*kv) rc = SKV_ERR_NOMEM;
    if (rc == SKV_OK) {
        double t0 = now_s();
        rc = skv_session_restore_kv(s, 0, *kv, nf, tok, 1, 0);
        *secs = now_s() - t0;
        snprintf(err, cap, "%s", skv_session_last_error(s));
        if (rc == SKV_OK && tok[0] != 0) rc = SKV_ERR_INTERNAL;
    }
    skv_session_free(s);
    free(f);
    return rc;
}

/* A 33 KB file declaring 63 layers of tq2p at head_dim 1024 asked a model-free decode for
 * 126 QJL matrices of 4 MiB (516 MB, ~4 s); a 2 MB one with 4096 layers for 32 GiB. Both
 * are refused before any table is built, and quickly. */
static void crafted_qjl_geometry_refused(void)
{
    static const uint32_t layers[] = {63, 4096};
    for (int k = 0; k < 2; k++) {
        float *kv = NULL;
        char err[512] = "";
        double secs = 0;
        int rc = crafted_restore(layers[k], 1, 1024, SKV_QUANT_TQ2P, &kv, err, sizeof err, &secs);
        free(kv);
        CHECK_MSG(rc == SKV_ERR_RANGE && strstr(err, "with its model"), "%u layers: %s: %s", layers[k],
                  skv_status_str(rc), err);
        CHECK_MSG(secs < 0.5, "%u layers: refused after %.2f s", layers[k], secs);
    }
}

/* Within the limit the same crafted shape decodes (to zeros), one table at a time. */
static void crafted_qjl_geometry_within_limit(void)
{
    float *kv = NULL;
    char err[512] = "";
    double secs = 0;
    int rc = crafted_restore(2, 2, 1024, SKV_QUANT_TQ3P, &kv, err, sizeof err, &secs);
    int zero = 1;
    for (size_t i = 0; rc == SKV_OK && i < (size_t)2 * 2 * 2 * 1024; i++) zero &= kv[i] == 0.0f;
    free(kv);
    CHECK_MSG(rc == SKV_OK, "%s: %s", skv_status_str(rc), err);
    CHECK(zero);
}

/* ---- the model name field ---------------------------------------------------------- */

/* A copy of the bundled model whose general.name (12 bytes in place: NULs end it early)
 * is `name`; NULL if the file cannot be written or loaded. */
static skv_model *model_named(const char *name, size_t len)
{
    FILE *f = fopen(MODEL, "rb");
    char path[256], *b = malloc(16 << 20);
    size_t n = f && b ? fread(b, 1, 16 << 20, f) : 0, at = 0;
    skv_model *m = NULL;
    if (f) fclose(f);
    for (size_t i = 0; n > 40 && i + 36 < n && !at; i++)
        if (!memcmp(b + i, "general.name", 12) && skv_rd64((const uint8_t *)b + i + 16) == 12) at = i + 24;
    snprintf(path, sizeof path, "/tmp/seqkv_test_kvname_%ld.gguf", (long)getpid());
    if (at && len <= 12 && (f = fopen(path, "wb"))) {
        memset(b + at, 0, 12);
        memcpy(b + at, name, len);
        int ok = fwrite(b, 1, n, f) == n;
        if (!fclose(f) && ok) skv_model_load(path, NULL, &m, NULL, 0);
        remove(path);
    }
    free(b);
    return m;
}

/* Names with control bytes (which the reader refuses) still write files that open: the
 * writer puts '?' for each such byte; printable names are kept byte for byte. */
static void odd_model_names_round_trip(void)
{
    NEED_SETUP();
    static const struct { const char *name, *want; size_t len; } cases[] = {
        {"seq\tkv-4m", "seq?kv-4m", 9}, {"a\nb\rc\x7f" "d\x01" "e\x1f", "a?b?c?d?e?", 10},
        {"\t\t\t\t\t\t\t\t\t\t\t\t", "????????????", 12}, {"caf\xc3\xa9 kjv", "caf\xc3\xa9 kjv", 9},
        {"x", "x", 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        skv_model *m = model_named(cases[k].name, cases[k].len);
        skv_encoder_params p = skv_encoder_default_params();
        skv_encoder *e = NULL;
        skv_session *s = NULL;
        skv_session_info si;
        uint8_t *data = NULL;
        size_t size = 0;
        char err[512] = "";
        p.codec = SKV_CODEC_TOKENS;
        CHECK_MSG(m != NULL, "case %zu: cannot write or load the renamed model", k);
        int rc = skv_encoder_create(m, &p, &e, err, sizeof err);
        if (!rc && !(rc = skv_encoder_append(e, g_tok, 20, NULL))) rc = skv_encoder_finish(e, &data, &size);
        if (!rc) rc = skv_session_open(data, size, &s, err, sizeof err);
        if (!rc) skv_session_get_info(s, &si);
        skv_session_free(s);
        skv_encoder_free(e);
        skv_model_free(m);
        free(data);
        CHECK_MSG(rc == SKV_OK, "case %zu: %s: %s", k, skv_status_str(rc), err);
        CHECK_MSG(!strcmp(si.model_name, cases[k].want), "case %zu: name '%s'", k, si.model_name);
    }
}

/* ---- the encoder asks only for the logits it reads ----------------------------------- */

static int logit_rows(int codec, int skip, size_t chunk, int want_next, uint64_t *rows, uint8_t **data, size_t *size)
{
    skv_encoder_params p = skv_encoder_default_params();
    skv_encoder *e = NULL;
    skv_encoder_stats st;
    float *next = want_next ? malloc((size_t)g_info.n_vocab * sizeof *next) : NULL;
    int rc;
    p.codec = codec;
    p.skip_entropy = skip;
    if ((rc = skv_encoder_create(g_m, &p, &e, NULL, 0))) return rc;
    for (size_t done = 0; !rc && done < g_n; done += chunk)
        rc = skv_encoder_append(e, g_tok + done, g_n - done < chunk ? g_n - done : chunk,
                                 done && done + chunk < g_n ? next : NULL);
    if (!rc && next) rc = skv_encoder_append(e, NULL, 0, next); /* again, with no tokens */
    skv_encoder_get_stats(e, &st);
    *rows = st.n_logit_rows;
    if (!rc) rc = skv_encoder_finish(e, data, size);
    skv_encoder_free(e);
    free(next);
    return rc;
}

/* Codec model and the entropy report read every row; codec tokens / KV codecs with
 * skip_entropy read none but next_logits' (one per append asking -- all but the first and
 * the last --, and an empty append after one that did not ask runs its last token again);
 * the files are the same. */
static void encoder_logits_only_when_read(void)
{
    NEED_SETUP();
    static const int codecs[] = {SKV_CODEC_TOKENS, SKV_CODEC_Q8};
    for (int k = 0; k < 2; k++) {
        uint8_t *a = NULL, *b = NULL, *c = NULL;
        size_t na = 0, nb = 0, nc = 0;
        uint64_t ra = 0, rb = 0, rc = 0;
        CHECK_EQ_INT(logit_rows(codecs[k], 0, 64, 0, &ra, &a, &na), SKV_OK);
        CHECK_EQ_INT(logit_rows(codecs[k], 1, 64, 0, &rb, &b, &nb), SKV_OK);
        CHECK_EQ_INT(logit_rows(codecs[k], 1, 50, 1, &rc, &c, &nc), SKV_OK);
        int same = na == nb && nb == nc && !memcmp(a, b, na) && !memcmp(a, c, na);
        free(a), free(b), free(c);
        CHECK_EQ_INT(ra, g_n);
        CHECK_EQ_INT(rb, 0);
        CHECK_EQ_INT(rc, (g_n + 49) / 50 - 2 + 1); /* the appends asking, and the empty one */
        CHECK(same);
    }
    uint8_t *m = NULL;
    size_t nm = 0;
    uint64_t rm = 0;
    CHECK_EQ_INT(logit_rows(SKV_CODEC_MODEL, 1, 64, 0, &rm, &m, &nm), SKV_OK);
    free(m);
    CHECK_EQ_INT(rm, g_n);
}

int main(void)
{
    TEST_BEGIN("test_session_kv");
    RUN(codec_f16);
    RUN(codec_q8);
    RUN(codec_q4);
    RUN(codec_tq2);
    RUN(codec_tq3);
    RUN(codec_tq4);
    RUN(codec_kvq_split_seed);
    RUN(codec_kvq_f32_is_exact);
    RUN(segmented);
    RUN(corruption_is_caught);
    RUN(crafted_subheaders_refused);
    RUN(crafted_payloads);
    RUN(geometry_mismatch);
    RUN(api_errors);
    RUN(crafted_qjl_geometry_refused);
    RUN(crafted_qjl_geometry_within_limit);
    RUN(odd_model_names_round_trip);
    RUN(encoder_logits_only_when_read);
    free(g_exact);
    skv_model_free(g_m);
    TEST_END();
}
