/* Codecs cmv (20) and cmvd (21), issue 16: the cm model with the vocabulary's side
 * information (coder/cm_vocab.c) and primed by a dictionary. Proves: the side information
 * is a permutation with a well-formed prior; cmv and primed streams round-trip on
 * synthetic vocabularies and on real text; the bytes are pinned (known answer); hostile
 * streams decode to ids < V or an error; a cmv / cmvd session restores the bit-exact KV
 * (the same digests as codec tokens); cmvd is smaller than cm; a restore without the
 * dictionary, with another one, or with a corrupted payload is refused.
 * Model: the bundled models/kjv-4m.gguf (held-out KJV: the first 6000 bytes are the
 * session, the text from byte 30000 on is the dictionary). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "coder/cm.h"
#include "coder/cm_vocab.h"
#include "coder/cmvcodec.h"
#include "core/util.h"
#include "seqkv.h"
#include "test.h"

#define HDR 128
#define SEGHDR 32
#define KA_SIZE 1856
#define KA_HASH 0xe7cd0ef9af17b32aull
#define KA2_SIZE 1794 /* revision 2 */
#define KA2_HASH 0xb258244e424e557aull
#define KA2_CHECK 0x7297aff028c4de17ull
#define KA3_SIZE 1773 /* revision 3 */
#define KA3_HASH 0x59e861849c4c7a8cull
#define KA3_CHECK 0x90799adfb9a67098ull

static skv_model *g_m;
static int32_t *g_text, *g_dict; /* held-out KJV: the session, the dictionary */
static size_t g_text_n, g_dict_n;

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Du;
}

/* V synthetic pieces: 1..4 letters of a small alphabet, some with a leading space, some
 * empty (control tokens); scores decreasing with the id when scored. */
static skv_cm_vocab *synthetic_vocab(uint32_t V, int scored)
{
    char **p = malloc(V * sizeof *p);
    size_t *len = malloc(V * sizeof *len);
    float *sc = malloc(V * sizeof *sc);
    skv_cm_vocab *vb = NULL;
    for (uint32_t i = 0; i < V; i++) {
        p[i] = malloc(6);
        len[i] = i % 97 == 3 ? 0 : 1 + i % 4;
        for (size_t k = 0; k < len[i]; k++) p[i][k] = (char)(k == 0 && i % 3 == 0 ? ' ' : 'a' + (i >> (3 * k)) % 7);
        sc[i] = -(float)i / 100.0f;
    }
    if (skv_cm_vocab_create(V, (const char *const *)p, len, scored ? sc : NULL, &vb) != SKV_OK) vb = NULL;
    for (uint32_t i = 0; i < V; i++) free(p[i]);
    free(p);
    free(len);
    free(sc);
    return vb;
}

static void side_information_well_formed(void)
{
    static const uint32_t vocab[] = {1, 2, 3, 255, 4096, 5000, 32000};
    for (size_t vi = 0; vi < sizeof vocab / sizeof *vocab; vi++) {
        skv_cm_vocab *vb = synthetic_vocab(vocab[vi], (int)(vi & 1));
        CHECK(vb);
        uint8_t *seen = calloc(vb->V, 1);
        for (uint32_t i = 0; i < vb->V; i++) {
            CHECK(vb->code[i] < vb->V && !seen[vb->code[i]]);
            seen[vb->code[i]] = 1;
            CHECK_EQ_INT(vb->id[vb->code[i]], i);
        }
        for (size_t n = 1; n < ((size_t)1 << vb->B); n++) CHECK(vb->prior[n] >= 1 && vb->prior[n] <= 4095);
        free(seen);
        skv_cm_vocab_free(vb);
        if (test_cur_failed) return;
    }
    skv_cm_vocab *vb = NULL;
    const char *p[2] = {"a", NULL};
    size_t len[2] = {1, 2};
    CHECK_EQ_INT(skv_cm_vocab_create(2, p, len, NULL, &vb), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_vocab_create(0, p, len, NULL, &vb), SKV_ERR_INVALID_ARG);
    CHECK(vb == NULL);
}

/* Encodes n ids (after the primed model's dictionary when dict) and decodes them back. */
static void roundtrip(const skv_cm_vocab *vb, unsigned rev, const int32_t *dict, size_t nd, const int32_t *t, size_t n)
{
    size_t cap = skv_cm_bound(n, vb->V), size = 0;
    uint8_t *buf = malloc(cap);
    int32_t *h = malloc((nd + n + 1) * sizeof *h);
    skv_cm *cm = NULL;
    skv_rangecoder_enc e;
    skv_rangecoder_dec d;
    if (nd) memcpy(h, dict, nd * sizeof *h);
    memcpy(h + nd, t, n * sizeof *h);
    for (int pass = 0; pass < 2 && !test_cur_failed; pass++) {
        CHECK_EQ_INT(skv_cm_create_vocab(vb, rev, nd ? SKV_CMV_DICT_SLOT_BITS : SKV_CMV_SLOT_BITS, &cm), SKV_OK);
        CHECK_EQ_INT(skv_cm_prime(cm, h, nd), SKV_OK);
        if (pass == 0) skv_rangecoder_enc_init(&e, buf, cap);
        else CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, size), SKV_OK);
        for (size_t i = 0; i < n && !test_cur_failed; i++)
            CHECK_EQ_INT(pass ? skv_cm_decode(cm, &d, h, nd + i) : skv_cm_encode(cm, &e, h, nd + i), SKV_OK);
        if (pass == 0) CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
        else CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_OK);
        skv_cm_free(cm);
        if (pass == 0) memset(h + nd, 0, n * sizeof *h);
    }
    CHECK_MSG(!memcmp(h + nd, t, n * sizeof *t), "decoded ids differ (V %u, rev %u, dict %zu)", vb->V, rev, nd);
    free(buf);
    free(h);
}

static void roundtrip_synthetic(void)
{
    static const uint32_t vocab[] = {1, 2, 3, 255, 4096, 5000, 32000, 128256};
    int32_t t[2000], dict[500];
    for (size_t vi = 0; vi < sizeof vocab / sizeof *vocab && !test_cur_failed; vi++) {
        uint32_t V = vocab[vi];
        skv_cm_vocab *vb = synthetic_vocab(V, (int)(vi & 1));
        CHECK(vb);
        for (size_t i = 0; i < 2000; i++) t[i] = (int32_t)(rng() % (i % 3 ? 50 : V) % V);
        for (size_t i = 0; i < 500; i++) dict[i] = (int32_t)(rng() % V);
        for (unsigned rev = 1; rev <= SKV_CMV_REV; rev++) {
            roundtrip(vb, rev, NULL, 0, t, (size_t)(rng() % 2000) + 1);
            roundtrip(vb, rev, dict, 500, t, (size_t)(rng() % 2000) + 1);
            roundtrip(vb, rev, NULL, 0, t, 0);
        }
        skv_cm_vocab_free(vb);
    }
}

/* The coded bytes are a format (docs/coder.md 4.6, 4.9): pinned like codec cm's, for each
 * model revision (revision 1's answer is the one files written before revision 2 hold). */
static void known_answer(void)
{
    static const struct {
        size_t size;
        unsigned long long hash, check;
    } ka[SKV_CMV_REV + 1] = {{0, 0, 0}, {KA_SIZE, KA_HASH, 0}, {KA2_SIZE, KA2_HASH, KA2_CHECK}, {KA3_SIZE, KA3_HASH, KA3_CHECK}};
    int32_t t[2000];
    uint8_t buf[8192];
    size_t size = 0;
    skv_cm_vocab *vb = synthetic_vocab(4096, 1);
    CHECK(vb);
    for (size_t i = 0; i < 2000; i++) t[i] = (int32_t)((i * i + 3 * (i / 7)) % 97 + (i % 5 == 0 ? 3000 : 0));
    for (unsigned rev = 1; rev <= SKV_CMV_REV && !test_cur_failed; rev++) {
        CHECK_EQ_INT(skv_cmv_encode_tokens(vb, rev, t, 2000, buf, sizeof buf, &size), SKV_OK);
        printf("# cmv revision %u known answer: %zu bytes, xxh3-64 %016llx, model check %016llx\n", rev, size,
               (unsigned long long)XXH3_64bits(buf, size), (unsigned long long)skv_cm_model_check(vb, rev));
        CHECK_EQ_INT(size, ka[rev].size);
        CHECK_MSG(XXH3_64bits(buf, size) == ka[rev].hash, "cmv revision %u stream bytes changed: %016llx", rev,
                  (unsigned long long)XXH3_64bits(buf, size));
        CHECK(skv_cm_model_check(vb, rev) == (rev == 1 ? vb->check : ka[rev].check));
        int32_t back[2000];
        CHECK_EQ_INT(skv_cmv_decode_tokens(vb, rev, buf, size, 2000, back), SKV_OK);
        CHECK(!memcmp(back, t, sizeof t));
    }
    skv_cm_vocab_free(vb);
}

/* skv_cmv_payload without a dictionary keeps one blank model per vocabulary and codes in
 * place under its undo log: the bytes of a segment are the same whatever was coded before
 * it (another segment, a longer one, a decode), equal to a fresh model's
 * (skv_cmv_encode_tokens), and so are two threads' at once (one of them on a fresh model). */
static int build_synthetic(const void *user, skv_cm_vocab **out)
{
    (void)user;
    return (*out = synthetic_vocab(4096, 1)) ? SKV_OK : SKV_ERR_NOMEM;
}

typedef struct blank_job {
    const skv_cmv_src *src;
    const int32_t *t;
    size_t n;
    uint8_t *buf;
    size_t cap, len;
    int rc;
} blank_job;

static void *blank_main(void *arg)
{
    blank_job *j = arg;
    for (int k = 0; k < 20 && !j->rc; k++) j->rc = skv_cmv_payload(j->src, NULL, 0, j->t, j->n, &j->buf, &j->cap, &j->len);
    return NULL;
}

static void blank_model_reused(void)
{
    skv_cmv_src src = {.fp = {0xb1, 0xa2, 0x4c}, .n_vocab = 4096, .build = build_synthetic};
    static int32_t a[3000], b[700];
    for (size_t i = 0; i < 3000; i++) a[i] = (int32_t)((i * 7919 + i / 13) % 4096);
    for (size_t i = 0; i < 700; i++) b[i] = (int32_t)((i * i + 11) % 300);
    skv_cm_vocab *vb = synthetic_vocab(4096, 1);
    uint8_t fresh[8192], *buf = NULL;
    size_t fresh_len = 0, cap = 0, len = 0;
    CHECK(vb && skv_cmv_encode_tokens(vb, SKV_CMV_REV, b, 700, fresh, sizeof fresh, &fresh_len) == SKV_OK);
    size_t uses = skv_cmv_blank_uses();
    const int32_t *seq[] = {b, a, b, a, b}; /* b first (a new model), after a, after b itself */
    size_t ns[] = {700, 3000, 700, 3000, 700};
    for (int k = 0; k < 5 && !test_cur_failed; k++) {
        CHECK_EQ_INT(skv_cmv_payload(&src, NULL, 0, seq[k], ns[k], &buf, &cap, &len), SKV_OK);
        int32_t back[3000];
        skv_err err = {0};
        CHECK_EQ_INT(skv_cmv_payload_decode(&src, buf, len, ns[k], 0, NULL, 0, back, NULL, &err), SKV_OK);
        CHECK(!memcmp(back, seq[k], ns[k] * sizeof *back));
        if (ns[k] == 700) { /* the payload: an 8-byte model check, then the stream */
            CHECK_EQ_INT(len, fresh_len + 8);
            CHECK_MSG(len == fresh_len + 8 && !memcmp(buf + 8, fresh, fresh_len), "segment %d: not a fresh model's bytes", k);
        }
    }
    CHECK_MSG(skv_cmv_blank_uses() >= uses + 9, "%zu of 10 codings on the kept blank model", skv_cmv_blank_uses() - uses);
    blank_job j[2] = {{&src, b, 700, NULL, 0, 0, 0}, {&src, b, 700, NULL, 0, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, blank_main, &j[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(j[i].rc, SKV_OK);
        CHECK(j[i].len == fresh_len + 8 && !memcmp(j[i].buf + 8, fresh, fresh_len));
        free(j[i].buf);
    }
    free(buf);
    skv_cm_vocab_free(vb);
}

static void hostile_streams(void)
{
    skv_cm_vocab *vb = synthetic_vocab(5000, 1);
    uint8_t bad[3000];
    int32_t back[800];
    CHECK(vb);
    for (int trial = 0; trial < 20; trial++) {
        size_t size = (size_t)(rng() % sizeof bad);
        for (size_t i = 0; i < size; i++) bad[i] = (uint8_t)rng();
        int rc = skv_cmv_decode_tokens(vb, 1 + (unsigned)trial % SKV_CMV_REV, bad, size, 800, back);
        CHECK(rc == SKV_OK || rc == SKV_ERR_FORMAT);
        for (size_t i = 0; rc == SKV_OK && i < 800; i++) CHECK(back[i] >= 0 && back[i] < 5000);
    }
    skv_cm *cm = NULL;
    int32_t out_of_range[2] = {1, 5000};
    CHECK_EQ_INT(skv_cm_create_vocab(vb, SKV_CMV_REV, 8, &cm), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_create_vocab(vb, 0, SKV_CMV_SLOT_BITS, &cm), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_create_vocab(vb, SKV_CMV_REV + 1, SKV_CMV_SLOT_BITS, &cm), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_create_vocab(vb, SKV_CMV_REV, SKV_CMV_SLOT_BITS, &cm), SKV_OK);
    CHECK_EQ_INT(skv_cm_prime(cm, out_of_range, 2), SKV_ERR_INVALID_ARG);
    skv_cm_free(cm);
    skv_cm_vocab_free(vb);
}

/* ---- the .skv codecs ------------------------------------------------------------- */

static int encode_session(int codec, const int32_t *dict, size_t nd, uint8_t **data, size_t *size)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = codec;
    ep.n_ctx = 512;
    ep.segment = 1;
    ep.skip_entropy = 1;
    ep.cm_dict = dict;
    ep.n_cm_dict = nd;
    int rc = skv_encoder_create(g_m, &ep, &e, NULL, 0);
    if (!rc) rc = skv_encoder_append(e, g_text, g_text_n, NULL);
    if (!rc) rc = skv_encoder_finish(e, data, size);
    skv_encoder_free(e);
    return rc;
}

/* Restores every segment verified; SKV_OK only if all ids are the text's; digest of the
 * last segment's KV into dg. */
static int restore_all(const uint8_t *data, size_t size, const int32_t *dict, size_t nd, skv_ctx *c, uint8_t dg[16])
{
    skv_session *s = NULL;
    skv_session_info si;
    skv_restore_params rp = {.verify = 1, .cm_dict = dict, .n_cm_dict = nd};
    int rc = skv_session_open(data, size, &s, NULL, 0);
    int32_t *out = rc ? NULL : malloc(512 * sizeof *out);
    size_t at = 0;
    if (!rc) skv_session_get_info(s, &si);
    for (uint32_t i = 0; !rc && i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        rc = skv_session_restore_segment(s, g_m, i, c, &rp, out, 512);
        if (!rc && memcmp(out, g_text + at, nt * sizeof *out)) rc = SKV_ERR_INTERNAL;
        at += nt;
    }
    if (!rc && dg) rc = skv_ctx_kv_digest(c, skv_ctx_n_pos(c), dg);
    free(out);
    skv_session_free(s);
    return rc;
}

static skv_ctx *new_ctx(void)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 512;
    return skv_ctx_create(g_m, &p, &c) == SKV_OK ? c : NULL;
}

static void session_roundtrip_bit_exact(void)
{
    uint8_t *tk = NULL, *cm = NULL, *cmv = NULL, *cmvd = NULL, d0[16], d1[16], d2[16];
    size_t st = 0, sc = 0, sv = 0, sd = 0;
    skv_ctx *c = new_ctx();
    CHECK(c);
    CHECK_EQ_INT(encode_session(SKV_CODEC_TOKENS, NULL, 0, &tk, &st), SKV_OK);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CM, NULL, 0, &cm, &sc), SKV_OK);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMV, NULL, 0, &cmv, &sv), SKV_OK);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMVD, g_dict, g_dict_n, &cmvd, &sd), SKV_OK);
    printf("# held-out KJV, %zu ids: tokens %zu, cm %zu, cmv %zu, cmvd %zu bytes (dictionary %zu ids)\n", g_text_n, st,
           sc, sv, sd, g_dict_n);
    CHECK_MSG(sd * 100 < sc * 97, "cmvd %zu bytes vs cm %zu", sd, sc);
    CHECK_EQ_INT(restore_all(tk, st, NULL, 0, c, d0), SKV_OK);
    CHECK_EQ_INT(restore_all(cmv, sv, NULL, 0, c, d1), SKV_OK);
    CHECK(!memcmp(d0, d1, 16));
    CHECK_EQ_INT(restore_all(cmvd, sd, g_dict, g_dict_n, c, d2), SKV_OK);
    CHECK(!memcmp(d0, d2, 16));
    CHECK(!memcmp(cmvd + HDR + 16, tk + HDR + 16, 16)); /* the same segment digests */
    /* the dictionary must be the one the file names */
    CHECK_EQ_INT(restore_all(cmvd, sd, NULL, 0, c, NULL), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(restore_all(cmvd, sd, g_dict, g_dict_n - 1, c, NULL), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(restore_all(cmvd, sd, g_text, g_dict_n < g_text_n ? g_dict_n : g_text_n, c, NULL), SKV_ERR_MISMATCH);
    skv_ctx_free(c);
    free(tk);
    free(cm);
    free(cmv);
    free(cmvd);
}

static void fix_segment0(uint8_t *d, uint64_t plen);

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = f ? malloc(1 << 16) : NULL;
    *size = b ? fread(b, 1, 1 << 16, f) : 0;
    if (f) fclose(f);
    return b;
}

/* Files of older model revisions still restore bit-exact, with the revision their model
 * check names: tests/data/cmv_rev1 (`seqkv compress -c 512 --segment` of 391ad3d, revision
 * 1) and tests/data/cmv_rev2 (this test's encode_session at c6cb54b, revision 2), codecs
 * cmv and cmvd, of this text and dictionary. A check naming no revision is refused; today's
 * files of the same session are of revision SKV_CMV_REV and smaller than both. */
static void older_revision_restores(void)
{
    static const char *const path[2][2] = {
        {"tests/data/cmv_rev1/heldout6000.cmv.skv", "tests/data/cmv_rev1/heldout6000.cmvd.skv"},
        {"tests/data/cmv_rev2/heldout6000.cmv.skv", "tests/data/cmv_rev2/heldout6000.cmvd.skv"}};
    uint8_t d0[16], d1[16], *tk = NULL;
    size_t st = 0;
    skv_ctx *c = new_ctx();
    CHECK(c);
    CHECK_EQ_INT(encode_session(SKV_CODEC_TOKENS, NULL, 0, &tk, &st), SKV_OK);
    CHECK_EQ_INT(restore_all(tk, st, NULL, 0, c, d0), SKV_OK);
    for (int k = 0; k < 2 && !test_cur_failed; k++) {
        size_t sn = 0;
        uint8_t *now = NULL, le[8] = {0};
        const int32_t *dict = k ? g_dict : NULL;
        size_t nd = k ? g_dict_n : 0;
        CHECK_EQ_INT(encode_session(k ? SKV_CODEC_CMVD : SKV_CODEC_CMV, dict, nd, &now, &sn), SKV_OK);
        for (int r = 0; r < 2 && !test_cur_failed; r++) {
            size_t size = 0;
            uint8_t *b = slurp(path[r][k], &size);
            CHECK_MSG(b && size > HDR, "%s missing", path[r][k]);
            if (!b) break;
            CHECK_EQ_INT(restore_all(b, size, dict, nd, c, d1), SKV_OK);
            CHECK(!memcmp(d0, d1, 16));
            printf("# %s: %zu bytes (revision %d); written today: %zu bytes (revision %d)\n", path[r][k], size, r + 1,
                   sn, SKV_CMV_REV);
            CHECK_MSG(sn < size, "revision %d file %zu bytes, revision %d %zu", SKV_CMV_REV, sn, r + 1, size);
            /* a segment's payload starts with its model check: revision 1's is the vocabulary
             * check, revision r's XXH64 of it (seed r) */
            uint64_t v = skv_rd64(b + HDR + SEGHDR);
            if (r == 0) {
                for (int j = 0; j < 8; j++) le[j] = (uint8_t)(v >> (8 * j));
                /* one naming a revision this build does not know is refused */
                uint8_t *bad = malloc(size);
                CHECK(bad);
                if (bad) {
                    memcpy(bad, b, size);
                    skv_wr64(bad + HDR + SEGHDR, XXH64(le, 8, SKV_CMV_REV + 1));
                    fix_segment0(bad, skv_rd64(bad + HDR + 8));
                    CHECK_EQ_INT(restore_all(bad, size, dict, nd, c, NULL), SKV_ERR_MISMATCH);
                }
                free(bad);
            } else {
                CHECK(v == XXH64(le, 8, (uint64_t)r + 1));
            }
            free(b);
        }
        CHECK(skv_rd64(now + HDR + SEGHDR) == XXH64(le, 8, SKV_CMV_REV));
        free(now);
    }
    skv_ctx_free(c);
    free(tk);
}

/* skv_session_segment_tokens on a thread of its own, for segment i + 1 while segment i
 * prefills (what seqkv restore does), then restored from those ids. */
typedef struct ahead {
    const skv_session *s;
    const skv_restore_params *p;
    uint32_t seg, n;
    int32_t ids[512];
    int rc;
    char err[256];
} ahead;

static void *ahead_main(void *arg)
{
    ahead *a = arg;
    a->rc = skv_session_segment_tokens(a->s, g_m, a->seg, a->p, a->ids, 512, &a->n, a->err, sizeof a->err);
    return NULL;
}

/* Pipelined restore of every segment (ids of i + 1 decoded concurrently with the prefill of
 * i): the same ids as the text and, segment by segment, the same KV digest as a plain
 * restore; SKV_OK or the first failure. */
static int restore_pipelined(const uint8_t *data, size_t size, const int32_t *dict, size_t nd, skv_ctx *c)
{
    skv_session *s = NULL;
    skv_session_info si;
    skv_restore_params rp = {.verify = 1, .cm_dict = dict, .n_cm_dict = nd}, pi;
    int rc = skv_session_open(data, size, &s, NULL, 0);
    ahead *a = calloc(2, sizeof *a);
    int32_t out[512];
    size_t at = 0;
    if (!rc && !a) rc = SKV_ERR_NOMEM;
    if (!rc) skv_session_get_info(s, &si);
    /* segment 0 decoded up front, then each segment's successor while it prefills */
    if (!rc) {
        a[0] = (ahead){.s = s, .p = &rp, .seg = 0};
        ahead_main(&a[0]);
        rc = a[0].rc;
    }
    for (uint32_t i = 0; !rc && i < si.n_segments; i++) {
        ahead *cur = &a[i & 1], *nxt = &a[(i + 1) & 1];
        pthread_t th;
        int started = 0;
        if (i + 1 < si.n_segments) {
            *nxt = (ahead){.s = s, .p = &rp, .seg = i + 1};
            if (pthread_create(&th, NULL, ahead_main, nxt)) rc = SKV_ERR_INTERNAL;
            else started = 1;
        }
        if (!rc && memcmp(cur->ids, g_text + at, cur->n * sizeof *cur->ids)) rc = SKV_ERR_INTERNAL;
        pi = rp;
        pi.decoded = cur->ids, pi.n_decoded = cur->n;
        if (!rc) rc = skv_session_restore_segment(s, g_m, i, c, &pi, out, 512);
        if (!rc && memcmp(out, cur->ids, cur->n * sizeof *out)) rc = SKV_ERR_INTERNAL;
        if (started) pthread_join(th, NULL);
        if (!rc && started) rc = nxt->rc;
        at += cur->n;
    }
    if (!rc && at != g_text_n) rc = SKV_ERR_INTERNAL;
    free(a);
    skv_session_free(s);
    return rc;
}

static void pipelined_restore(void)
{
    static const int codecs[] = {SKV_CODEC_TOKENS, SKV_CODEC_CM, SKV_CODEC_CMV, SKV_CODEC_CMVD};
    uint8_t *data = NULL, *model = NULL, dg[16], dp[16];
    size_t size = 0, msize = 0;
    int32_t ids[512], out[512];
    uint32_t n = 0;
    char err[256];
    skv_session *s = NULL;
    skv_ctx *c = new_ctx();
    CHECK(c);
    for (size_t k = 0; k < sizeof codecs / sizeof *codecs; k++) {
        const int32_t *dict = codecs[k] == SKV_CODEC_CMVD ? g_dict : NULL;
        size_t nd = dict ? g_dict_n : 0;
        CHECK_EQ_INT(encode_session(codecs[k], dict, nd, &data, &size), SKV_OK);
        CHECK_EQ_INT(restore_pipelined(data, size, dict, nd, c), SKV_OK);
        CHECK_EQ_INT(skv_ctx_kv_digest(c, skv_ctx_n_pos(c), dp), SKV_OK);
        CHECK_EQ_INT(restore_all(data, size, dict, nd, c, dg), SKV_OK);
        CHECK_MSG(!memcmp(dg, dp, 16), "codec %d: the pipelined restore's KV differs", codecs[k]);
        free(data);
        data = NULL;
    }
    /* a queue of cmvd segments (skv_session_restore_batch) takes the dictionary from p too */
    {
        skv_session *q = NULL;
        skv_session_info qi;
        skv_restore_job jobs[8];
        skv_ctx *cs[8] = {NULL};
        int32_t *tb = malloc(8 * 512 * sizeof *tb);
        skv_restore_params bp = {.verify = 1, .cm_dict = g_dict, .n_cm_dict = g_dict_n};
        CHECK(tb);
        CHECK_EQ_INT(encode_session(SKV_CODEC_CMVD, g_dict, g_dict_n, &data, &size), SKV_OK);
        CHECK_EQ_INT(skv_session_open(data, size, &q, NULL, 0), SKV_OK);
        skv_session_get_info(q, &qi);
        CHECK(qi.n_segments >= 2 && qi.n_segments <= 8);
        for (uint32_t k = 0; k < qi.n_segments; k++) {
            CHECK((cs[k] = new_ctx()) != NULL);
            jobs[k] = (skv_restore_job){.session = q, .segment = k, .ctx = cs[k], .tokens = tb + 512 * k, .cap = 512};
        }
        int brc = skv_session_restore_batch(g_m, jobs, qi.n_segments, &bp);
        CHECK_MSG(brc == SKV_OK, "batch restore of cmvd segments: %d (%s)", brc, skv_ctx_last_error(cs[0]));
        for (uint32_t k = 0, at = 0; k < qi.n_segments; k++) {
            uint32_t nt = 0;
            skv_session_segment_info(q, k, &nt, NULL, NULL);
            CHECK(!memcmp(tb + 512 * k, g_text + at, nt * sizeof *tb));
            at += nt;
            skv_ctx_free(cs[k]);
        }
        skv_session_free(q);
        free(tb);
        free(data);
        data = NULL;
    }
    /* refusals, on a cmv file: ids of the wrong length, outside the vocabulary, or not the file's */
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMV, NULL, 0, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK);
    CHECK_EQ_INT(skv_session_segment_tokens(s, g_m, 0, NULL, ids, 512, &n, err, sizeof err), SKV_OK);
    CHECK(n > 2 && !memcmp(ids, g_text, n * sizeof *ids));
    CHECK_EQ_INT(skv_session_segment_tokens(s, g_m, 0, NULL, ids, n - 1, &n, err, sizeof err), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_session_segment_tokens(s, g_m, 99, NULL, ids, 512, &n, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_segment_tokens(s, g_m, 0, NULL, ids, 512, &n, NULL, 0), SKV_OK);
    skv_restore_params pi = {.verify = 1, .decoded = ids, .n_decoded = n - 1};
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, &pi, out, 512), SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_ctx_last_error(c), "decoded ids"));
    pi.n_decoded = n;
    ids[1] = 4096;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, &pi, out, 512), SKV_ERR_INVALID_ARG);
    ids[1] = g_text[1] == 7 ? 8 : 7; /* a valid id, but not the file's: the digest says so */
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, &pi, out, 512), SKV_ERR_MISMATCH);
    ids[1] = g_text[1];
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, &pi, out, 512), SKV_OK);
    skv_session_free(s);
    s = NULL;
    /* a model-coded file stores no ids to decode alone, and takes none */
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = SKV_CODEC_MODEL;
    ep.n_ctx = 512;
    CHECK_EQ_INT(skv_encoder_create(g_m, &ep, &e, NULL, 0), SKV_OK);
    CHECK_EQ_INT(skv_encoder_append(e, g_text, 64, NULL), SKV_OK);
    CHECK_EQ_INT(skv_encoder_finish(e, &model, &msize), SKV_OK);
    skv_encoder_free(e);
    CHECK_EQ_INT(skv_session_open(model, msize, &s, NULL, 0), SKV_OK);
    CHECK_EQ_INT(skv_session_segment_tokens(s, g_m, 0, NULL, ids, 512, &n, err, sizeof err), SKV_ERR_UNSUPPORTED);
    CHECK(strstr(err, "codec model"));
    memcpy(ids, g_text, 64 * sizeof *ids);
    pi.n_decoded = 64;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, &pi, out, 512), SKV_ERR_INVALID_ARG);
    skv_session_free(s);
    skv_ctx_free(c);
    free(data);
    free(model);
}

static void encoder_refuses_bad_dictionaries(void)
{
    uint8_t *d = NULL;
    size_t size = 0;
    int32_t bad[2] = {1, 4096};
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMVD, NULL, 0, &d, &size), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMVD, bad, 2, &d, &size), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMV, bad, 1, &d, &size), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_codec_parse("cmv"), SKV_CODEC_CMV);
    CHECK_EQ_INT(skv_codec_parse("cmvd"), SKV_CODEC_CMVD);
    CHECK(!strcmp(skv_codec_name(SKV_CODEC_CMVD), "cmvd"));
    CHECK(skv_codec_name(15) == NULL || strcmp(skv_codec_name(15), "cmv"));
    CHECK(d == NULL);
}

static void fix_segment0(uint8_t *d, uint64_t plen)
{
    skv_wr64(d + HDR + 8, plen);
    skv_wr64(d + HDR + SEGHDR + plen, XXH3_64bits(d + HDR, SEGHDR + (size_t)plen));
}

/* Flipped bytes (checksums recomputed) of a cmvd payload (segments of 512 ids: decoded on a
 * thread while their first 64 prefill): refused (corrupt stream, another dictionary or
 * vocabulary, KV digest mismatch) or, for the flush byte, the same ids. */
static void session_corruption_refused(void)
{
    uint8_t *d = NULL, *bad;
    size_t size = 0;
    skv_ctx *c = new_ctx();
    CHECK(c);
    CHECK_EQ_INT(encode_session(SKV_CODEC_CMVD, g_dict, g_dict_n, &d, &size), SKV_OK);
    uint64_t plen = skv_rd64(d + HDR + 8);
    CHECK((bad = malloc(size)) != NULL);
    for (size_t i = HDR + SEGHDR; i < HDR + SEGHDR + plen; i += 13) {
        memcpy(bad, d, size);
        bad[i] ^= 0x10;
        CHECK_EQ_INT(restore_all(bad, size, g_dict, g_dict_n, c, NULL), SKV_ERR_FORMAT);
        fix_segment0(bad, plen);
        int rc = restore_all(bad, size, g_dict, g_dict_n, c, NULL);
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH, "flip at %zu: rc %d", i, rc);
        /* a stream that fails past the first eighth, whose ids were prefilled beside the
         * decode (restore_pipelined), leaves no positions behind */
        if (rc == SKV_ERR_FORMAT) CHECK_MSG(skv_ctx_n_pos(c) == 0, "flip at %zu: %d positions left", i, skv_ctx_n_pos(c));
    }
    skv_ctx_free(c);
    free(d);
    free(bad);
}

static int32_t *tokenize_part(const char *path, long off, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *text = f ? malloc(max + 1) : NULL;
    size_t len = text && !fseek(f, off, SEEK_SET) ? fread(text, 1, max, f) : 0;
    if (f) fclose(f);
    int32_t *t = len ? malloc((len + 2) * sizeof *t) : NULL;
    if (t && skv_tokenize(g_m, text, len, 1, t, len + 2, n) != SKV_OK) free(t), t = NULL;
    free(text);
    return t;
}

int main(void)
{
    char err[256];
    TEST_BEGIN("test_cmv");
    if (skv_model_load("models/kjv-4m.gguf", NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_cmv:<load>: %s\n", err);
        return 1;
    }
    g_text = tokenize_part("tests/data/model_ref/heldout.txt", 0, 6000, &g_text_n);
    g_dict = tokenize_part("tests/data/model_ref/heldout.txt", 30000, 40000, &g_dict_n);
    if (!g_text || !g_dict || g_text_n < 1000 || g_dict_n < 5000) {
        printf("FAIL test_cmv:<text>: cannot tokenize tests/data/model_ref/heldout.txt\n");
        return 1;
    }
    RUN(side_information_well_formed);
    RUN(roundtrip_synthetic);
    RUN(known_answer);
    RUN(blank_model_reused);
    RUN(hostile_streams);
    RUN(session_roundtrip_bit_exact);
    RUN(older_revision_restores);
    RUN(pipelined_restore);
    RUN(encoder_refuses_bad_dictionaries);
    RUN(session_corruption_refused);
    free(g_text);
    free(g_dict);
    skv_model_free(g_m);
    TEST_END();
}
