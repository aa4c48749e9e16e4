/* Codec cm (issue 16): the context-mixing token model of src/coder/cm.c and the .skv codec
 * built on it. Proves: round trips on real texts (the bundled model's tokenizer on held-out
 * KJV, Debian fortunes when installed, the shared stories corpus when present) and on
 * synthetic streams over many vocabulary sizes; the bytes are pinned (known answer) and
 * the same from several threads at once; hostile streams decode to ids < V or an error,
 * never a crash; a cm session restores the bit-exact KV (digest verified), smaller than
 * codec tokens; corrupted or truncated payloads are refused.
 * Model: the bundled models/kjv-4m.gguf. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "coder/cm.h"
#include "core/util.h"
#include "seqkv.h"
#include "test.h"

#define HDR 128
#define SEGHDR 32
#define KA_SIZE 1673
#define KA_HASH 0x1be6f4c4cfa52c24ull

static skv_model *g_m;
static skv_model_info g_info;
static int32_t *g_kjv; /* held-out KJV, BOS first */
static size_t g_kjv_n;

static uint64_t rng_state = 0x243F6A8885A308D3u;
static uint64_t rng(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Du;
}

static char *slurp(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b = f ? malloc(max + 1) : NULL;
    *len = b ? fread(b, 1, max, f) : 0;
    if (f) fclose(f);
    if (b) b[*len] = 0;
    return b;
}

/* The text's ids under the bundled model (BOS first), or NULL. */
static int32_t *tokenize_file(const char *path, size_t max, size_t *n)
{
    size_t len = 0;
    char *text = slurp(path, max, &len);
    int32_t *t = text ? malloc((len + 2) * sizeof *t) : NULL;
    if (t && skv_tokenize(g_m, text, len, 1, t, len + 2, n) != SKV_OK) free(t), t = NULL;
    free(text);
    return t;
}

/* Encodes n ids and decodes them back; *bytes = the stream size. */
static void roundtrip(const int32_t *t, size_t n, uint32_t V, size_t *bytes)
{
    size_t cap = skv_cm_bound(n, V), size = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    int32_t *back = malloc((n ? n : 1) * sizeof *back);
    CHECK(buf && back);
    CHECK_EQ_INT(skv_cm_encode_tokens(t, n, V, buf, cap, &size), SKV_OK);
    CHECK(size <= cap);
    CHECK_EQ_INT(skv_cm_decode_tokens(buf, size, n, V, back), SKV_OK);
    CHECK_MSG(!n || !memcmp(back, t, n * sizeof *t), "decoded ids differ (n %zu, V %u)", n, V);
    if (bytes) *bytes = size;
    free(buf);
    free(back);
}

/* ---- the coder alone ---------------------------------------------------------------- */

static void roundtrip_synthetic_vocabularies(void)
{
    static const uint32_t vocab[] = {1, 2, 3, 255, 256, 257, 4095, 4096, 5000, 32000, 128256, 151936, 1u << 24};
    int32_t t[3000];
    for (size_t vi = 0; vi < sizeof vocab / sizeof *vocab; vi++) {
        uint32_t V = vocab[vi];
        for (int kind = 0; kind < 4; kind++) { /* uniform, skewed, periodic, the largest id */
            for (size_t i = 0; i < 3000; i++) {
                uint64_t r = rng();
                t[i] = kind == 0   ? (int32_t)(r % V)
                       : kind == 1 ? (int32_t)((r % 8) * (r % 8) % V)
                       : kind == 2 ? (int32_t)((i % 37) * 7919 % V)
                                   : (int32_t)(V - 1);
            }
            size_t n = (size_t)(rng() % 3000) + 1;
            roundtrip(t, n, V, NULL);
            if (test_cur_failed) return;
        }
        roundtrip(t, 0, V, NULL);
    }
}

static void roundtrip_real_texts_smaller_than_raw(void)
{
    static const char *const files[] = {"tests/data/model_ref/heldout.txt", "/usr/share/games/fortunes/fortunes",
                                        "/usr/share/games/fortunes/debian", "../shared/corpus/stories260K_samples.txt"};
    int tested = 0;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        size_t n = 0, bytes = 0;
        int32_t *t = tokenize_file(files[f], 40000, &n);
        if (!t) continue; /* an optional text that is not installed */
        for (size_t at = 0; at < n; at += 800) {
            size_t k = n - at < 800 ? n - at : 800;
            roundtrip(t + at, k, (uint32_t)g_info.n_vocab, &bytes);
            if (test_cur_failed) break;
            /* raw ids take 12 bits here; the model must do much better on text */
            CHECK_MSG(k < 200 || bytes * 8 < k * 10, "%s at %zu: %zu bytes for %zu ids", files[f], at, bytes, k);
        }
        free(t);
        if (test_cur_failed) return;
        tested++;
    }
    CHECK(tested >= 1);
}

/* The stream's bytes are a format: pinned by their XXH3-64 (a deliberate change of the
 * model updates this value and docs/format.md together). */
static void known_answer(void)
{
    int32_t t[2000];
    uint8_t buf[8192];
    size_t size = 0;
    for (size_t i = 0; i < 2000; i++) t[i] = (int32_t)((i * i + 3 * (i / 7)) % 97 + (i % 5 == 0 ? 3000 : 0));
    CHECK_EQ_INT(skv_cm_encode_tokens(t, 2000, 4096, buf, sizeof buf, &size), SKV_OK);
    printf("# cm known answer: %zu bytes, xxh3-64 %016llx\n", size, (unsigned long long)XXH3_64bits(buf, size));
    CHECK_EQ_INT(size, KA_SIZE);
    CHECK_MSG(XXH3_64bits(buf, size) == KA_HASH, "cm stream bytes changed: %016llx",
              (unsigned long long)XXH3_64bits(buf, size));
}

typedef struct {
    const int32_t *t;
    size_t n, size;
    uint8_t *buf;
    int rc;
} enc_job;

static void *enc_thread(void *arg)
{
    enc_job *j = arg;
    j->rc = skv_cm_encode_tokens(j->t, j->n, (uint32_t)g_info.n_vocab, j->buf, skv_cm_bound(j->n, 4096), &j->size);
    return NULL;
}

/* Same bytes from 4 threads coding at once, and from a second run in this thread. */
static void deterministic_across_threads(void)
{
    enum { NT = 4 };
    size_t n = g_kjv_n < 3000 ? g_kjv_n : 3000;
    enc_job j[NT + 1];
    pthread_t th[NT];
    for (int i = 0; i <= NT; i++) {
        j[i] = (enc_job){.t = g_kjv, .n = n, .buf = malloc(skv_cm_bound(n, 4096))};
        CHECK(j[i].buf);
    }
    for (int i = 0; i < NT; i++) CHECK(pthread_create(&th[i], NULL, enc_thread, &j[i]) == 0);
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    enc_thread(&j[NT]);
    for (int i = 0; i <= NT; i++) {
        CHECK_EQ_INT(j[i].rc, SKV_OK);
        CHECK_EQ_INT(j[i].size, j[0].size);
        CHECK(!memcmp(j[i].buf, j[0].buf, j[0].size));
    }
    for (int i = 0; i <= NT; i++) free(j[i].buf);
}

/* Garbage, truncations and bit flips decode to ids < V or an error, never a crash; a
 * truncation that still decodes the same ids and passes the count check is only possible
 * for the flush byte. */
static void hostile_streams(void)
{
    size_t n = g_kjv_n < 600 ? g_kjv_n : 600, cap = skv_cm_bound(n, 4096), size = 0;
    uint8_t *buf = malloc(cap), *bad = malloc(cap);
    int32_t *back = malloc(n * sizeof *back);
    CHECK(buf && bad && back);
    CHECK_EQ_INT(skv_cm_encode_tokens(g_kjv, n, 4096, buf, cap, &size), SKV_OK);
    for (size_t len = 0; len < size; len++) {
        int rc = skv_cm_decode_tokens(buf, len, n, 4096, back);
        CHECK_MSG(rc == SKV_ERR_FORMAT || (rc == SKV_OK && len + 1 == size) ||
                      (rc == SKV_OK && memcmp(back, g_kjv, n * sizeof *back)),
                  "truncated to %zu of %zu bytes: rc %d", len, size, rc);
        for (size_t i = 0; rc == SKV_OK && i < n; i++) CHECK(back[i] >= 0 && back[i] < 4096);
    }
    for (int trial = 0; trial < 300; trial++) {
        memcpy(bad, buf, size);
        bad[rng() % size] ^= (uint8_t)(1u << (rng() % 8));
        int rc = skv_cm_decode_tokens(bad, size, n, 4096, back);
        CHECK(rc == SKV_OK || rc == SKV_ERR_FORMAT);
        for (size_t i = 0; rc == SKV_OK && i < n; i++) CHECK(back[i] >= 0 && back[i] < 4096);
    }
    for (size_t i = 0; i < size; i++) bad[i] = (uint8_t)rng();
    int rc = skv_cm_decode_tokens(bad, size, n, 4095, back);
    CHECK(rc == SKV_OK || rc == SKV_ERR_FORMAT);
    free(buf);
    free(bad);
    free(back);
}

static void bad_arguments(void)
{
    skv_cm *cm = NULL;
    skv_rangecoder_enc e;
    uint8_t buf[64];
    int32_t t[2] = {5, 4096};
    CHECK_EQ_INT(skv_cm_create(0, &cm), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_create(SKV_CM_MAX_VOCAB + 1, &cm), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_create(4096, &cm), SKV_OK);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_cm_encode(cm, &e, t, 1), SKV_ERR_INVALID_ARG); /* not in order */
    CHECK_EQ_INT(skv_cm_encode(cm, &e, t, 0), SKV_OK);
    CHECK_EQ_INT(skv_cm_encode(cm, &e, t, 1), SKV_ERR_INVALID_ARG); /* id outside V */
    skv_cm_free(cm);
    skv_cm_free(NULL);
    CHECK_EQ_INT(skv_cm_encode_tokens(t, 1, 4096, buf, 0, &(size_t){0}), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_codec_parse("cm"), SKV_CODEC_CM);
    CHECK(!strcmp(skv_codec_name(SKV_CODEC_CM), "cm"));
}

/* A kept model given another vocabulary size codes as a new model of that size would:
 * the same bytes as skv_cm_encode_tokens, after it coded a stream of another size. */
/* Codes t[0..n) with cm as it is and with a new model of V (skv_cm_encode_tokens); 1 when
 * both succeed with the same bytes. */
static int codes_as_new(skv_cm *cm, const int32_t *t, size_t n, uint32_t V)
{
    uint8_t want[4096], got[4096];
    size_t wsize = 0, gsize = 0;
    skv_rangecoder_enc e;
    skv_rangecoder_enc_init(&e, got, sizeof got);
    for (size_t i = 0; i < n; i++)
        if (skv_cm_encode(cm, &e, t, i) != SKV_OK) return 0;
    if (skv_rangecoder_enc_finish(&e, &gsize) || skv_cm_encode_tokens(t, n, V, want, sizeof want, &wsize)) return 0;
    return gsize == wsize && !memcmp(got, want, wsize);
}

static void set_vocab_is_a_new_model(void)
{
    static const uint32_t sizes[] = {4096, 300, 70000, 1, 4096};
    enum { N = 400 };
    int32_t t[N];
    skv_cm *cm = NULL;
    CHECK_EQ_INT(skv_cm_create(17, &cm), SKV_OK);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint32_t V = sizes[s];
        for (int i = 0; i < N; i++) t[i] = (int32_t)(((uint32_t)i * 2654435761u >> 7) % (i % 5 ? V : 1 + V / 64));
        CHECK_EQ_INT(skv_cm_set_vocab(cm, V), SKV_OK);
        CHECK_MSG(codes_as_new(cm, t, N, V), "V %u: the reused model coded otherwise", V);
    }
    CHECK_EQ_INT(skv_cm_set_vocab(cm, 0), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_set_vocab(cm, SKV_CM_MAX_VOCAB + 1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_set_vocab(NULL, 10), SKV_ERR_INVALID_ARG);
    skv_cm_free(cm);
}

/* A stream coded from the reset state under an undo log and undone leaves the model at the
 * reset state (skv_cm_fresh 1), so skv_cm_set_vocab keeps its tables: the model then codes
 * as a new one of the new size. A write outside the log (a section handed out) makes the
 * undone model not fresh. */
static void undo_back_to_reset(void)
{
    static const uint32_t sizes[] = {4096, 300, 70000, 1, 4096, 129};
    enum { N = 300 };
    int32_t t[N];
    skv_cm *cm = NULL;
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    CHECK_EQ_INT(skv_cm_create(17, &cm), SKV_OK);
    CHECK_EQ_INT(skv_cm_fresh(cm), 1);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint32_t V = sizes[s];
        for (int i = 0; i < N; i++) t[i] = (int32_t)(((uint32_t)i * 2246822519u >> 9) % (i % 3 ? V : 1 + V / 32));
        CHECK_EQ_INT(skv_cm_set_vocab(cm, V), SKV_OK);
        CHECK_EQ_INT(skv_cm_fresh(cm), 1);
        CHECK_EQ_INT(skv_cm_undo_begin(cm, N), SKV_OK);
        CHECK_MSG(codes_as_new(cm, t, N, V), "V %u: the kept model coded otherwise", V);
        CHECK_EQ_INT(skv_cm_fresh(cm), 0);
        skv_cm_undo(cm);
        CHECK_MSG(skv_cm_fresh(cm) == 1, "V %u: not fresh after the undo", V);
    }
    CHECK_EQ_INT(skv_cm_undo_begin(cm, N), SKV_OK);
    CHECK(skv_cm_sections(cm, sec) > 0); /* the tables may now be written outside the log */
    skv_cm_undo(cm);
    CHECK_EQ_INT(skv_cm_fresh(cm), 0);
    skv_cm_free(cm);
}

/* ---- the .skv codec ---------------------------------------------------------------- */

static int encode_session(int codec, const int32_t *t, size_t n, int n_ctx, uint8_t **data, size_t *size)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = codec;
    ep.n_ctx = n_ctx;
    ep.segment = 1;
    ep.skip_entropy = 1;
    int rc = skv_encoder_create(g_m, &ep, &e, NULL, 0);
    if (!rc) rc = skv_encoder_append(e, t, n, NULL);
    if (!rc) rc = skv_encoder_finish(e, data, size);
    skv_encoder_free(e);
    return rc;
}

/* Restores every segment verified; SKV_OK only if all ids equal t's. */
static int restore_all(const uint8_t *data, size_t size, const int32_t *t, skv_ctx *c)
{
    skv_session *s = NULL;
    skv_session_info si;
    skv_restore_params rp = {.verify = 1};
    int rc = skv_session_open(data, size, &s, NULL, 0);
    int32_t *out = rc ? NULL : malloc(4096 * sizeof *out);
    size_t at = 0;
    if (!rc) skv_session_get_info(s, &si);
    for (uint32_t i = 0; !rc && i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        rc = skv_session_restore_segment(s, g_m, i, c, &rp, out, 4096);
        if (!rc && memcmp(out, t + at, nt * sizeof *t)) rc = SKV_ERR_INTERNAL;
        at += nt;
    }
    free(out);
    skv_session_free(s);
    return rc;
}

static skv_ctx *new_ctx(int n_ctx)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = n_ctx;
    return skv_ctx_create(g_m, &p, &c) == SKV_OK ? c : NULL;
}

/* A 3-segment cm session restores the same ids and, digest verified, the same KV as the
 * tokens codec; its payload is smaller. */
static void session_roundtrip_bit_exact(void)
{
    size_t n = g_kjv_n < 1400 ? g_kjv_n : 1400, sc = 0, st = 0;
    uint8_t *cm = NULL, *tk = NULL, dc[16], dt[16];
    skv_ctx *c = new_ctx(512);
    CHECK(c);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CM, g_kjv, n, 512, &cm, &sc), SKV_OK);
    CHECK_EQ_INT(encode_session(SKV_CODEC_TOKENS, g_kjv, n, 512, &tk, &st), SKV_OK);
    CHECK_MSG(sc * 10 < st * 9, "cm file %zu bytes vs tokens %zu", sc, st);
    CHECK_EQ_INT(restore_all(cm, sc, g_kjv, c), SKV_OK);
    CHECK_EQ_INT(skv_ctx_kv_digest(c, skv_ctx_n_pos(c), dc), SKV_OK);
    CHECK_EQ_INT(restore_all(tk, st, g_kjv, c), SKV_OK);
    CHECK_EQ_INT(skv_ctx_kv_digest(c, skv_ctx_n_pos(c), dt), SKV_OK);
    CHECK(!memcmp(dc, dt, 16));
    /* the segment digests of the two files are the same cache's */
    CHECK(!memcmp(cm + HDR + 16, tk + HDR + 16, 16));
    skv_ctx_free(c);
    free(cm);
    free(tk);
}

/* Recomputes segment 0's checksum after its payload was changed (plen bytes now). */
static void fix_segment0(uint8_t *d, uint64_t plen)
{
    skv_wr64(d + HDR + 8, plen);
    skv_wr64(d + HDR + SEGHDR + plen, XXH3_64bits(d + HDR, SEGHDR + (size_t)plen));
}

/* Damaged payloads: without fixed checksums always SKV_ERR_FORMAT; with recomputed
 * checksums every flip and truncation is refused (corrupt stream or KV digest mismatch)
 * or, for the flush byte, restores the very same ids. */
static void session_corruption_refused(void)
{
    size_t n = g_kjv_n < 300 ? g_kjv_n : 300, size = 0;
    uint8_t *d = NULL, *bad;
    skv_ctx *c = new_ctx(512);
    CHECK(c);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CM, g_kjv, n, 512, &d, &size), SKV_OK);
    uint64_t plen = skv_rd64(d + HDR + 8);
    CHECK((bad = malloc(size)) != NULL);
    for (size_t i = HDR + SEGHDR; i < HDR + SEGHDR + plen; i += 7) {
        memcpy(bad, d, size);
        bad[i] ^= 0x10;
        CHECK_EQ_INT(restore_all(bad, size, g_kjv, c), SKV_ERR_FORMAT);
        fix_segment0(bad, plen);
        int rc = restore_all(bad, size, g_kjv, c);
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH, "flip at %zu: rc %d", i, rc);
    }
    for (uint64_t cut = 1; cut <= 4 && cut < plen; cut++) {
        memcpy(bad, d, size);
        memmove(bad + HDR + SEGHDR + plen - cut, bad + HDR + SEGHDR + plen, 8);
        fix_segment0(bad, plen - cut);
        int rc = restore_all(bad, size - cut, g_kjv, c);
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH || (rc == SKV_OK && cut == 1), "cut %llu: rc %d",
                  (unsigned long long)cut, rc);
    }
    skv_ctx_free(c);
    free(d);
    free(bad);
}

int main(void)
{
    char err[256];
    TEST_BEGIN("test_cm");
    (void)test_stories_path;
    if (skv_model_load("models/kjv-4m.gguf", NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_cm:<load>: %s\n", err);
        return 1;
    }
    skv_model_get_info(g_m, &g_info);
    if (!(g_kjv = tokenize_file("tests/data/model_ref/heldout.txt", 40000, &g_kjv_n)) || g_kjv_n < 3000) {
        printf("FAIL test_cm:<text>: cannot tokenize tests/data/model_ref/heldout.txt\n");
        return 1;
    }
    RUN(roundtrip_synthetic_vocabularies);
    RUN(roundtrip_real_texts_smaller_than_raw);
    RUN(known_answer);
    RUN(deterministic_across_threads);
    RUN(hostile_streams);
    RUN(bad_arguments);
    RUN(set_vocab_is_a_new_model);
    RUN(undo_back_to_reset);
    RUN(session_roundtrip_bit_exact);
    RUN(session_corruption_refused);
    free(g_kjv);
    skv_model_free(g_m);
    TEST_END();
}
