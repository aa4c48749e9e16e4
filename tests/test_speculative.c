/* Speculative restore of model-coded sessions (issue 6): the n-gram draft, and the
 * speculative decoder against the token-by-token one. The property under test is the
 * format's: whatever the draft proposes, a restore yields exactly the tokens and KV cache
 * (digest) the token-by-token decoder yields, at 1 and 2 threads, for every block limit;
 * and a corrupted stream fails the same clean way in both decoders.
 *
 * Models: the bundled models/kjv-4m.gguf (always present) and stories260K from
 * ../shared (cases SKIP without it). Texts no one here wrote: held-out KJV
 * (tests/data/model_ref/heldout.txt), KJV Genesis via `bible` (Debian bible-kjv; SKIP
 * without it) and the stories260K samples in ../shared/corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/draft.h"
#include "seqkv.h"
#include "test.h"

/* ---- helpers ---------------------------------------------------------------------- */

static char *slurp(const char *path, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *b;
    if (!f) return NULL;
    if (!(b = malloc(max + 1))) {
        fclose(f);
        return NULL;
    }
    *n = fread(b, 1, max, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static char *run_cmd(const char *cmd, size_t max, size_t *n)
{
    FILE *f = popen(cmd, "r");
    char *b;
    if (!f) return NULL;
    if (!(b = malloc(max + 1))) {
        pclose(f);
        return NULL;
    }
    *n = fread(b, 1, max, f);
    b[*n] = 0;
    char drain[4096];
    while (fread(drain, 1, sizeof drain, f) > 0) continue; /* keep the command from dying of SIGPIPE */
    if (pclose(f) != 0 || *n == 0) {
        free(b);
        return NULL;
    }
    return b;
}

static skv_model *g_kjv, *g_sto;
static char *g_heldout, *g_bible, *g_stories;
static size_t g_heldout_n, g_bible_n, g_stories_n;

/* Encodes tokens with the model codec into a segmented session of n_ctx positions. */
static int encode(skv_model *m, const int32_t *tok, size_t n, int n_ctx, uint8_t **data, size_t *size)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e;
    int rc;
    ep.codec = SKV_CODEC_MODEL;
    ep.n_ctx = n_ctx;
    ep.segment = 1;
    if ((rc = skv_encoder_create(m, &ep, &e, NULL, 0))) return rc;
    if (!(rc = skv_encoder_append(e, tok, n, NULL))) rc = skv_encoder_finish(e, data, size);
    skv_encoder_free(e);
    return rc;
}

static size_t tokenize(skv_model *m, const char *text, size_t len, int32_t **out)
{
    size_t n = 0;
    *out = malloc((len + 16) * sizeof **out);
    if (!*out || skv_tokenize(m, text, len, 1, *out, len + 16, &n)) return 0;
    return n;
}

typedef struct {
    int32_t *tok;            /* all segments' tokens, concatenated */
    uint8_t (*digest)[16];   /* per segment, recomputed from the context */
    skv_restore_stats st;
    int rc;
    char err[512];
} restored;

static void restored_free(restored *r)
{
    free(r->tok);
    free(r->digest);
}

/* Restores every segment with the given decoder, block limit and thread count. */
static void restore_all(const skv_session *s, skv_model *m, int draft, int draft_max, int threads, restored *r)
{
    skv_session_info si;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    memset(r, 0, sizeof *r);
    skv_session_get_info(s, &si);
    cp.n_ctx = (int)si.n_ctx;
    cp.n_threads = threads;
    r->tok = calloc(si.n_tokens + 1, sizeof *r->tok);
    r->digest = calloc(si.n_segments + 1, 16);
    if (!r->tok || !r->digest || (r->rc = skv_ctx_create(m, &cp, &c))) {
        if (!r->rc) r->rc = SKV_ERR_NOMEM;
        return;
    }
    skv_restore_params rp;
    memset(&rp, 0, sizeof rp);
    rp.verify = 1;
    rp.draft = draft;
    rp.draft_max = draft_max;
    rp.stats = &r->st;
    size_t at = 0;
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        if ((r->rc = skv_session_restore_segment(s, m, i, c, &rp, r->tok + at, si.n_tokens - at))) {
            snprintf(r->err, sizeof r->err, "%s", skv_ctx_last_error(c));
            break;
        }
        if (skv_ctx_n_pos(c) != (int)nt) {
            r->rc = SKV_ERR_INTERNAL;
            snprintf(r->err, sizeof r->err, "segment %u: context holds %d positions, expected %u", i, skv_ctx_n_pos(c), nt);
            break;
        }
        if ((r->rc = skv_ctx_kv_digest(c, (int)nt, r->digest[i]))) break;
        at += nt;
    }
    skv_ctx_free(c);
}

/* Encodes text[0..len) under m with segments of n_ctx, restores it token by token and
 * speculatively (several block limits, 1 and 2 threads) and compares everything. */
static void check_identical(skv_model *m, const char *text, size_t len, int n_ctx, int expect_accepts)
{
    int32_t *tok = NULL;
    uint8_t *data = NULL;
    size_t size = 0, n = tokenize(m, text, len, &tok);
    skv_session *s = NULL;
    skv_session_info si;
    char err[256];
    restored ref, r;
    CHECK(n > 10);
    CHECK_EQ_INT(encode(m, tok, n, n_ctx, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    skv_session_get_info(s, &si);
    CHECK(si.n_segments >= 1);
    restore_all(s, m, SKV_DRAFT_NONE, 0, 1, &ref);
    CHECK_MSG(ref.rc == SKV_OK, "token-by-token restore: %s", ref.err);
    CHECK(memcmp(ref.tok, tok, n * sizeof *tok) == 0);
    CHECK_EQ_INT(ref.st.n_tokens, n);
    CHECK_EQ_INT(ref.st.n_passes, n);
    CHECK_EQ_INT(ref.st.n_drafted, 0);
    static const struct { int draft, draft_max, threads; } runs[] = {
        {SKV_DRAFT_AUTO, 0, 1}, {SKV_DRAFT_NGRAM, 0, 2}, {SKV_DRAFT_NGRAM, 1, 1},
        {SKV_DRAFT_NGRAM, 3, 2}, {SKV_DRAFT_NGRAM, 64, 1}, {SKV_DRAFT_NONE, 0, 2},
    };
    uint64_t accepted = 0;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        restore_all(s, m, runs[k].draft, runs[k].draft_max, runs[k].threads, &r);
        int ok = r.rc == SKV_OK && memcmp(r.tok, ref.tok, n * sizeof *tok) == 0 &&
                 memcmp(r.digest, ref.digest, (size_t)si.n_segments * 16) == 0;
        char why[600];
        snprintf(why, sizeof why, "draft %d, max %d, %d threads: rc %d (%s)", runs[k].draft, runs[k].draft_max,
                 runs[k].threads, r.rc, r.err);
        uint64_t passes = r.st.n_passes, acc = r.st.n_accepted, drafted = r.st.n_drafted, nt = r.st.n_tokens;
        accepted += acc;
        restored_free(&r);
        CHECK_MSG(ok, "restore differs from token by token: %s", why);
        CHECK_EQ_INT(nt, n);
        /* every pass confirms one token plus its accepted drafts */
        CHECK_MSG(passes + acc == n, "%s: passes %llu + accepted %llu != %zu", why, (unsigned long long)passes,
                  (unsigned long long)acc, n);
        CHECK(acc <= drafted);
        if (runs[k].draft_max == 1 || runs[k].draft == SKV_DRAFT_NONE) CHECK_EQ_INT(drafted, 0);
    }
    if (expect_accepts) CHECK_MSG(accepted > 0, "no draft was ever accepted");
    restored_free(&ref);
    skv_session_free(s);
    free(data);
    free(tok);
}

/* ---- the n-gram draft ------------------------------------------------------------- */

static void draft_basics(void)
{
    skv_draft *d;
    int32_t out[16];
    CHECK_EQ_INT(skv_draft_create(0, &d), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_draft_create(8, &d), SKV_OK);
    CHECK_EQ_INT(skv_draft_propose(d, out, 4, NULL), 0); /* empty history */
    /* 5 6 7 5 6 -> the suffix "5 6" was followed by 7, and then by 5 6 again */
    static const int32_t h[] = {5, 6, 7, 5, 6};
    for (size_t i = 0; i < 5; i++) CHECK_EQ_INT(skv_draft_push(d, h[i]), SKV_OK);
    CHECK_EQ_INT(skv_draft_len(d), 5);
    unsigned ml = 0;
    CHECK_EQ_INT(skv_draft_propose(d, out, 6, &ml), 6);
    CHECK_EQ_INT(ml, 2);
    static const int32_t want[] = {7, 5, 6, 7, 5, 6};
    CHECK(memcmp(out, want, sizeof want) == 0);
    CHECK_EQ_INT(skv_draft_propose(d, out, 0, NULL), 0);
    /* a context never seen: 9 */
    CHECK_EQ_INT(skv_draft_push(d, 9), SKV_OK);
    CHECK_EQ_INT(skv_draft_propose(d, out, 3, NULL), 0);
    CHECK_EQ_INT(skv_draft_push(d, -1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_draft_push(d, 1), SKV_OK);
    CHECK_EQ_INT(skv_draft_push(d, 2), SKV_OK);
    CHECK_EQ_INT(skv_draft_push(d, 3), SKV_ERR_RANGE); /* cap 8 */
    skv_draft_reset(d);
    CHECK_EQ_INT(skv_draft_len(d), 0);
    CHECK_EQ_INT(skv_draft_propose(d, out, 3, NULL), 0);
    skv_draft_free(d);
    skv_draft_free(NULL);
}

/* The longest matching context wins, and the most recent occurrence of it. */
static void draft_longest_match(void)
{
    skv_draft *d;
    int32_t out[4];
    /* 1 2 3 | 4 2 3 | 8 ... then "1 2 3": order 3 says 4 (after "1 2 3"),
     * order 2 ("2 3") would say 8 (most recent). */
    static const int32_t h[] = {1, 2, 3, 4, 2, 3, 8, 1, 2, 3};
    CHECK_EQ_INT(skv_draft_create(64, &d), SKV_OK);
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) CHECK_EQ_INT(skv_draft_push(d, h[i]), SKV_OK);
    unsigned ml = 0;
    CHECK_EQ_INT(skv_draft_propose(d, out, 3, &ml), 3);
    CHECK_EQ_INT(ml, 3);
    CHECK_EQ_INT(out[0], 4);
    CHECK_EQ_INT(out[1], 2);
    CHECK_EQ_INT(out[2], 3);
    CHECK_EQ_INT(skv_draft_push(d, 5), SKV_OK); /* "3 5" unseen, "5" unseen */
    CHECK_EQ_INT(skv_draft_propose(d, out, 2, NULL), 0);
    CHECK_EQ_INT(skv_draft_push(d, 2), SKV_OK); /* "2": most recent follower is 3 */
    CHECK_EQ_INT(skv_draft_propose(d, out, 1, NULL), 1);
    CHECK_EQ_INT(out[0], 3);
    skv_draft_free(d);
}

/* A long pseudo-random history over a large vocabulary: every proposal must really
 * continue an earlier occurrence of the current suffix (no hash-collision answers). */
static void draft_proposals_are_real_matches(void)
{
    enum { N = 5000 };
    skv_draft *d;
    int32_t *h = malloc(N * sizeof *h), out[8];
    uint32_t x = 12345;
    CHECK(h);
    CHECK_EQ_INT(skv_draft_create(N, &d), SKV_OK);
    size_t proposals = 0;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        h[i] = (int32_t)((x >> 16) % (i % 3 ? 40u : 100000u));
        skv_draft_push(d, h[i]);
        size_t k = skv_draft_propose(d, out, 8, NULL);
        if (!k) continue;
        proposals++;
        /* some j <= i with h[j-1] == h[i] (order >= 1) and out[0] == h[j] */
        int found = 0;
        for (size_t j = 1; j <= i && !found; j++) found = h[j - 1] == h[i] && h[j] == out[0];
        if (!found) {
            free(h);
            skv_draft_free(d);
            CHECK_MSG(0, "proposal %d at %zu continues no earlier occurrence", out[0], i);
        }
    }
    free(h);
    skv_draft_free(d);
    CHECK(proposals > 100);
}

/* ---- speculative restore vs token by token --------------------------------------- */

static void kjv4m_heldout_identical(void)
{
    if (!g_kjv) SKIP("models/kjv-4m.gguf not loadable");
    if (!g_heldout) SKIP("tests/data/model_ref/heldout.txt not found");
    /* segments of 256 positions: several fresh contexts, each restored independently */
    check_identical(g_kjv, g_heldout, g_heldout_n, 256, 1);
}

static void kjv4m_bible_identical(void)
{
    if (!g_kjv) SKIP("models/kjv-4m.gguf not loadable");
    if (!g_bible) SKIP("the `bible` command (Debian bible-kjv) is not installed");
    check_identical(g_kjv, g_bible, g_bible_n, 0, 1);
}

static void kjv4m_stories_identical(void)
{
    if (!g_kjv) SKIP("models/kjv-4m.gguf not loadable");
    if (!g_stories) SKIP("../shared/corpus/stories260K_samples.txt not found");
    check_identical(g_kjv, g_stories, g_stories_n, 300, 0);
}

/* Highly repetitive text: long blocks get accepted, truncation rarely needed. */
static void kjv4m_repetitive_identical(void)
{
    if (!g_kjv) SKIP("models/kjv-4m.gguf not loadable");
    char text[4096];
    size_t len = 0;
    for (int i = 0; len + 80 < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "And the LORD said unto Moses, %s. ",
                                i % 5 == 4 ? "Go forth" : "Speak unto the children of Israel");
    check_identical(g_kjv, text, len, 0, 1);
}

static void stories260k_stories_identical(void)
{
    if (!g_sto) SKIP("stories260K not found (../shared/models/stories260K)");
    if (!g_stories) SKIP("../shared/corpus/stories260K_samples.txt not found");
    check_identical(g_sto, g_stories, g_stories_n, 0, 1);
}

static void stories260k_bible_identical(void)
{
    if (!g_sto) SKIP("stories260K not found (../shared/models/stories260K)");
    if (!g_bible) SKIP("the `bible` command (Debian bible-kjv) is not installed");
    check_identical(g_sto, g_bible, g_bible_n, 200, 0);
}

/* ---- errors ------------------------------------------------------------------------ */

static void bad_params_rejected(void)
{
    if (!g_kjv) SKIP("models/kjv-4m.gguf not loadable");
    static const char text[] = "In the beginning God created the heaven and the earth.";
    int32_t *tok = NULL;
    uint8_t *data = NULL;
    size_t size = 0, n = tokenize(g_kjv, text, sizeof text - 1, &tok);
    skv_session *s = NULL;
    skv_ctx *c = NULL;
    char err[256];
    int32_t out[256];
    CHECK(n > 3 && n < 256);
    CHECK_EQ_INT(encode(g_kjv, tok, n, 64, &data, &size), SKV_OK);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 64;
    CHECK_EQ_INT(skv_ctx_create(g_kjv, &cp, &c), SKV_OK);
    skv_restore_params rp;
    memset(&rp, 0, sizeof rp);
    rp.draft = 3;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_kjv, 0, c, &rp, out, 256), SKV_ERR_INVALID_ARG);
    rp.draft = -1;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_kjv, 0, c, &rp, out, 256), SKV_ERR_INVALID_ARG);
    rp.draft = SKV_DRAFT_NGRAM;
    rp.draft_max = 257;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_kjv, 0, c, &rp, out, 256), SKV_ERR_INVALID_ARG);
    rp.draft_max = -1;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_kjv, 0, c, &rp, out, 256), SKV_ERR_INVALID_ARG);
    rp.draft_max = 256;
    rp.verify = 1;
    CHECK_EQ_INT(skv_session_restore_segment(s, g_kjv, 0, c, &rp, out, 256), SKV_OK);
    CHECK(memcmp(out, tok, n * sizeof *tok) == 0);
    /* NULL params: the default (speculative) decoder */
    CHECK_EQ_INT(skv_session_restore_segment(s, g_kjv, 0, c, NULL, out, 256), SKV_OK);
    CHECK(memcmp(out, tok, n * sizeof *tok) == 0);
    skv_ctx_free(c);
    skv_session_free(s);
    free(data);
    free(tok);
}

/* Payload corruption with the segment checksum fixed up (so the reader accepts the file):
 * both decoders must fail cleanly, with the same status, or restore the same tokens. */
static void corrupted_stream_fails_cleanly(void)
{
    if (!g_kjv) SKIP("models/kjv-4m.gguf not loadable");
    if (!g_heldout) SKIP("tests/data/model_ref/heldout.txt not found");
    int32_t *tok = NULL;
    uint8_t *data = NULL;
    size_t size = 0, n = tokenize(g_kjv, g_heldout, g_heldout_n < 1200 ? g_heldout_n : 1200, &tok);
    CHECK(n > 50);
    if (n > 120) n = 120;
    CHECK_EQ_INT(encode(g_kjv, tok, n, 0, &data, &size), SKV_OK);
    /* one segment: header 128 bytes, segment header 32, payload, 8-byte checksum */
    const size_t H = 128, SH = 32;
    CHECK(size > H + SH + 8 + 16);
    size_t payload = size - H - SH - 8;
    uint8_t *bad = malloc(size);
    CHECK(bad);
    uint32_t x = 99;
    int failures = 0;
    for (int trial = 0; trial < 16; trial++) {
        memcpy(bad, data, size);
        x = x * 1664525u + 1013904223u;
        size_t at = H + SH + (x >> 8) % payload;
        if (trial % 3 == 2) bad[at] ^= 0xff;
        else bad[at] ^= (uint8_t)(1u << (trial % 8));
        if (trial == 0) bad[H + SH] ^= 0x80; /* the first token's bits */
        if (trial == 1) bad[H + SH + payload - 1] ^= 0x01;
        uint64_t sum = XXH3_64bits(bad + H, SH + payload);
        for (int b = 0; b < 8; b++) bad[H + SH + payload + (size_t)b] = (uint8_t)(sum >> (8 * b));
        skv_session *s = NULL;
        char err[256];
        CHECK_EQ_INT(skv_session_open(bad, size, &s, err, sizeof err), SKV_OK);
        restored a, b;
        restore_all(s, g_kjv, SKV_DRAFT_NONE, 0, 1, &a);
        restore_all(s, g_kjv, SKV_DRAFT_NGRAM, 0, 1, &b);
        int rca = a.rc, rcb = b.rc;
        int same_tok = memcmp(a.tok, b.tok, n * sizeof *tok) == 0;
        restored_free(&a);
        restored_free(&b);
        skv_session_free(s);
        CHECK_MSG(rca == rcb, "trial %d: token by token %d, speculative %d", trial, rca, rcb);
        CHECK(rca == SKV_OK || rca == SKV_ERR_FORMAT || rca == SKV_ERR_MISMATCH);
        if (rca == SKV_OK) CHECK(same_tok);
        else failures++;
    }
    free(bad);
    CHECK(failures >= 13); /* with verify on, almost every corruption is caught */
    /* truncated payload (checksum fixed): a clean error */
    {
        size_t cut = payload / 2, nsize = H + SH + cut + 8;
        uint8_t *t = malloc(nsize);
        CHECK(t);
        memcpy(t, data, H + SH + cut);
        for (int b = 0; b < 8; b++) t[H + 8 + (size_t)b] = (uint8_t)((uint64_t)cut >> (8 * b));
        uint64_t sum = XXH3_64bits(t + H, SH + cut);
        for (int b = 0; b < 8; b++) t[H + SH + cut + (size_t)b] = (uint8_t)(sum >> (8 * b));
        skv_session *s = NULL;
        char err[256];
        int rc = skv_session_open(t, nsize, &s, err, sizeof err);
        if (rc == SKV_OK) {
            restored a;
            restore_all(s, g_kjv, SKV_DRAFT_NGRAM, 5, 2, &a);
            rc = a.rc;
            restored_free(&a);
            skv_session_free(s);
            free(t);
            CHECK(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH);
        } else {
            free(t);
            CHECK_EQ_INT(rc, SKV_ERR_FORMAT);
        }
    }
    free(data);
    free(tok);
}

int main(void)
{
    TEST_BEGIN("test_speculative");
    char err[512], path[1024];
    size_t len;
    if (skv_model_load("models/kjv-4m.gguf", NULL, &g_kjv, err, sizeof err)) g_kjv = NULL;
    if (test_stories_path(path, sizeof path, "stories260K.gguf") &&
        skv_model_load(path, NULL, &g_sto, err, sizeof err))
        g_sto = NULL;
    g_heldout = slurp("tests/data/model_ref/heldout.txt", 3000, &g_heldout_n);
    if (test_shared_dir()) {
        snprintf(path, sizeof path, "%s/corpus/stories260K_samples.txt", test_shared_dir());
        g_stories = slurp(path, 3000, &g_stories_n);
    }
    if (system("command -v bible >/dev/null 2>&1") == 0)
        g_bible = run_cmd("bible -f 'Gen1:1-Gen3:24' 2>/dev/null", 3000, &g_bible_n);
    (void)len;
    RUN(draft_basics);
    RUN(draft_longest_match);
    RUN(draft_proposals_are_real_matches);
    RUN(kjv4m_heldout_identical);
    RUN(kjv4m_bible_identical);
    RUN(kjv4m_stories_identical);
    RUN(kjv4m_repetitive_identical);
    RUN(stories260k_stories_identical);
    RUN(stories260k_bible_identical);
    RUN(bad_params_rejected);
    RUN(corrupted_stream_fails_cleanly);
    skv_model_free(g_kjv);
    skv_model_free(g_sto);
    free(g_heldout);
    free(g_bible);
    free(g_stories);
    TEST_END();
}
