/* Tests of .skv sessions (src/container/session.c, docs/format.md) through the public API.
 *
 * Texts no one here wrote: the KJV Bible (Debian bible-kjv, `bible -f ...`) and the
 * stories260K samples in ../shared/corpus; the model is stories260K (cases SKIP when
 * the shared assets or the `bible` command are missing).
 *
 * What is proven:
 * - round trips of both codecs: identical tokens, the stored KV digest equals the
 *   restored context's digest, and the restored KV equals a fresh one-batch prefill's
 *   bit for bit (skv_ctx_kv_view + memcmp) -- with the encoder appending in random chunk
 *   sizes (batched prefill) at 1 or 2 threads while the model-codec decoder runs token by
 *   token (or speculatively, any draft_max) at 2 or 1 threads, and with scalar kernels;
 * - the file bytes depend only on the tokens, the model and the parameters (not on chunking
 *   or threads);
 * - segmenting (n_ctx 64): segment boundaries, each segment a fresh context; without
 *   segmenting an overflow is SKV_ERR_RANGE with a helpful message and leaves the session
 *   usable;
 * - the model codec's payload is within 1% + 16 bytes per segment of sum(-log2 p) plus the
 *   raw first tokens (and not below the coded ideal); the quantized cost is at most 0.5%
 *   above sum(-log2 p) (and, on in-distribution text, at most 0.5% below it);
 * - an inference loop (append one token at a time, greedy choice from next_logits);
 * - hostile input: every truncation and every bit flip of small valid files (also with the
 *   checksums recomputed so that the deeper checks run), random bytes, absurd counts,
 *   crafted payloads of both codecs: always an error or the original tokens with verify on;
 * - a different model (one weight perturbed in a copy of the GGUF) is refused with
 *   SKV_ERR_MISMATCH naming both; the llama2.c form of the same model is accepted;
 * - API misuse: NULLs, append after finish, token ids outside the vocabulary. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "seqkv.h"
#include "gguf_edit.h"
#include "test.h"
#include "core/util.h"

/* Under AddressSanitizer the engine runs ~15x slower: the costliest loops sample less. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define HDR 128   /* header bytes */
#define SEGHDR 32 /* segment header bytes (the payload follows, then an 8-byte checksum) */

static skv_model *g_m;
static skv_model_info g_info;
static char g_gguf[1024], g_bin[1024];
static int32_t *g_kjv, *g_sto; /* Gen1:1-Gen3:24 and the first stories, BOS first */
static size_t g_kjv_n, g_sto_n;
static char g_kjv_why[256] = "the `bible` command (Debian bible-kjv) is not installed";

#define NEED_MODEL()                                                                   \
    do {                                                                               \
        if (!g_m) SKIP("stories260K not found (../shared/models/stories260K)");        \
    } while (0)
#define NEED_KJV()                                                                     \
    do {                                                                               \
        NEED_MODEL();                                                                  \
        if (!g_kjv) SKIP("%s", g_kjv_why);                                             \
    } while (0)
/* Runs a helper that may fail or skip the case, and stops the case if it did. */
#define SUB(call)                                                                      \
    do {                                                                               \
        call;                                                                          \
        if (test_cur_failed || test_cur_skipped) return;                               \
    } while (0)

/* ---- small helpers ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}


/* Recomputes the header checksum (XXH3-64 of bytes 0..119, at 120). */
static void fix_header_checksum(uint8_t *d) { skv_wr64(d + 120, XXH3_64bits(d, 120)); }

/* Recomputes the header checksum and the checksum of every segment record that fits. */
static void fix_checksums(uint8_t *d, size_t size)
{
    size_t pos = HDR;
    if (size < HDR) return;
    fix_header_checksum(d);
    while (size - pos >= SEGHDR + 8) {
        uint64_t plen = skv_rd64(d + pos + 8);
        if (plen > size - pos - SEGHDR - 8) return;
        skv_wr64(d + pos + SEGHDR + plen, XXH3_64bits(d + pos, SEGHDR + (size_t)plen));
        pos += SEGHDR + (size_t)plen + 8;
    }
}

/* Offset of segment record i of a valid file. */
static size_t seg_offset(const uint8_t *d, uint32_t i)
{
    size_t pos = HDR;
    while (i--) pos += SEGHDR + (size_t)skv_rd64(d + pos + 8) + 8;
    return pos;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = 0;
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

static char *run_cmd(const char *cmd, size_t *len)
{
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 16, n = 0, k;
    char *buf;
    if (!p) return NULL;
    if (!(buf = malloc(cap))) {
        pclose(p);
        return NULL;
    }
    while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
    }
    buf[n] = 0;
    if (pclose(p) != 0 || n == 0) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int32_t *tokenize(const char *text, size_t len, size_t *n)
{
    size_t need = 0;
    int32_t *t = malloc((len + 16) * sizeof *t);
    if (!t || skv_tokenize(g_m, text, len, 1, t, len + 16, &need) != SKV_OK) {
        free(t);
        return NULL;
    }
    *n = need;
    return t;
}

static void hex16(const uint8_t *d, char *out)
{
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Every K and V row of the first n positions equal, bit for bit. */
static int kv_same(const skv_ctx *a, const skv_ctx *b, int n)
{
    for (int l = 0; l < g_info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < g_info.n_head_kv; h++) {
                const float *pa, *pb;
                if (skv_ctx_kv_view(a, l, kind, h, &pa) || skv_ctx_kv_view(b, l, kind, h, &pb)) return 0;
                if (memcmp(pa, pb, (size_t)n * (size_t)g_info.head_dim * sizeof(float))) return 0;
            }
    return 1;
}

static skv_encoder_params enc_params(int codec, int n_ctx, int threads, int segment)
{
    skv_encoder_params p = skv_encoder_default_params();
    p.codec = codec;
    p.n_ctx = n_ctx;
    p.n_threads = threads;
    p.segment = segment;
    return p;
}

/* ---- encode / restore --------------------------------------------------------------- */

/* Encodes tok[0..n): chunk 0 appends everything at once, chunk > 0 in pieces of that size,
 * chunk < 0 in random pieces of 1..-chunk tokens. */
static void encode(const int32_t *tok, size_t n, const skv_encoder_params *p, long chunk, uint8_t **data,
                   size_t *size, skv_encoder_stats *st)
{
    skv_encoder *e = NULL;
    int rc;
    *data = NULL;
    *size = 0;
    CHECK_EQ_INT(skv_encoder_create(g_m, p, &e, NULL, 0), SKV_OK);
    for (size_t done = 0; done < n;) {
        size_t k = chunk == 0 ? n - done : chunk > 0 ? (size_t)chunk : 1 + (size_t)(rng() % (uint64_t)-chunk);
        if (k > n - done) k = n - done;
        if ((rc = skv_encoder_append(e, tok + done, k, NULL)) != SKV_OK) {
            test_fail_at(__FILE__, __LINE__, "append: %s: %s", skv_status_str(rc), skv_encoder_last_error(e));
            skv_encoder_free(e);
            return;
        }
        done += k;
    }
    if (st) skv_encoder_get_stats(e, st);
    rc = skv_encoder_finish(e, data, size);
    if (rc) test_fail_at(__FILE__, __LINE__, "finish: %s: %s", skv_status_str(rc), skv_encoder_last_error(e));
    skv_encoder_free(e);
}

typedef struct {
    int n_threads, kernels, verify;
    int fresh;   /* compare each restored segment's KV with a fresh one-batch prefill */
    int dirty;   /* put unrelated tokens in the context before restoring (it must be cleared) */
    int draft, draft_max; /* skv_restore_params' (model codec: SKV_DRAFT_NONE = token by token) */
    skv_restore_stats *stats;
} restore_opts;

/* Restores every segment; checks n_pos, that the digest of the restored KV equals the stored
 * one, and (fresh) the KV against a fresh prefill. Returns the concatenated tokens. */
static void restore_all(const uint8_t *data, size_t size, const restore_opts *o, int32_t **out, size_t *n_out)
{
    skv_session *s = NULL;
    skv_session_info si;
    skv_ctx *c = NULL, *ref = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    char err[512] = "";
    uint32_t maxseg = 1;
    int32_t *tok = NULL;
    size_t n = 0;
    *out = NULL;
    *n_out = 0;
    int rc = skv_session_open(data, size, &s, err, sizeof err);
    CHECK_MSG(rc == SKV_OK, "open: %s: %s", skv_status_str(rc), err);
    skv_session_get_info(s, &si);
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        if (nt > maxseg) maxseg = nt;
    }
    cp.n_ctx = (int)maxseg;
    cp.n_threads = o->n_threads;
    cp.kernels = o->kernels;
    tok = malloc(((size_t)si.n_tokens + 1) * sizeof *tok);
    if (!tok || skv_ctx_create(g_m, &cp, &c) || (o->fresh && skv_ctx_create(g_m, &cp, &ref))) {
        test_fail_at(__FILE__, __LINE__, "cannot create the contexts");
        goto done;
    }
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        uint8_t stored[16], got[16];
        skv_restore_params rp = {.verify = o->verify, .draft = o->draft, .draft_max = o->draft_max, .stats = o->stats};
        skv_session_segment_info(s, i, &nt, NULL, stored);
        if (o->dirty) {
            int32_t junk[3] = {5, 77, 300};
            skv_ctx_truncate(c, 0);
            skv_prefill(c, junk, maxseg < 3 ? maxseg : 3, SKV_LOGITS_NONE, NULL);
        }
        if ((rc = skv_session_restore_segment(s, g_m, i, c, &rp, tok + n, si.n_tokens - n))) {
            test_fail_at(__FILE__, __LINE__, "restore segment %u: %s: %s", i, skv_status_str(rc), skv_ctx_last_error(c));
            goto done;
        }
        if (skv_ctx_n_pos(c) != (int)nt) {
            test_fail_at(__FILE__, __LINE__, "segment %u: context holds %d positions, not %u", i, skv_ctx_n_pos(c), nt);
            goto done;
        }
        skv_ctx_kv_digest(c, (int)nt, got);
        if (memcmp(got, stored, 16)) {
            test_fail_at(__FILE__, __LINE__, "segment %u: restored KV digest differs from the stored one", i);
            goto done;
        }
        if (o->fresh) {
            skv_ctx_truncate(ref, 0);
            if (skv_prefill(ref, tok + n, nt, SKV_LOGITS_NONE, NULL) || !kv_same(c, ref, (int)nt)) {
                test_fail_at(__FILE__, __LINE__, "segment %u: restored KV differs from a fresh prefill's", i);
                goto done;
            }
        }
        n += nt;
    }
    if (n != si.n_tokens) {
        test_fail_at(__FILE__, __LINE__, "restored %zu tokens, header says %llu", n, (unsigned long long)si.n_tokens);
        goto done;
    }
    *out = tok;
    *n_out = n;
    tok = NULL;
done:
    free(tok);
    skv_ctx_free(c);
    skv_ctx_free(ref);
    skv_session_free(s);
}

/* Encode with (enc_threads, chunking), restore with (dec_threads), compare everything. */
static void roundtrip(const int32_t *tok, size_t n, int codec, int n_ctx, int segment, int enc_threads,
                      int dec_threads, long chunk, int draft)
{
    skv_encoder_params p = enc_params(codec, n_ctx, enc_threads, segment);
    restore_opts o = {dec_threads, SKV_KERNELS_AUTO, 1, 1, 1, draft, 0, NULL};
    uint8_t *data = NULL;
    size_t size = 0, m = 0;
    int32_t *back = NULL;
    skv_encoder_stats st;
    SUB(encode(tok, n, &p, chunk, &data, &size, &st));
    CHECK_EQ_INT(st.n_tokens, n);
    restore_all(data, size, &o, &back, &m);
    free(data);
    if (test_cur_failed) return;
    int same = m == n && !memcmp(back, tok, n * sizeof *tok);
    free(back);
    CHECK_MSG(same, "restored tokens differ (%zu restored, %zu written)", m, n);
}

/* ---- round trips -------------------------------------------------------------------- */

/* Round trips use the first RT_TOKENS tokens (two or three segments of the trained context, 512);
 * the size measurements use all of Gen1:1-Gen3:24. */
#define RT_TOKENS (SANITIZED ? 600 : 1200)
#define RT_N(n) ((n) < RT_TOKENS ? (n) : RT_TOKENS)

static void roundtrip_model_kjv_enc1_dec2(void)
{
    NEED_KJV();
    roundtrip(g_kjv, RT_N(g_kjv_n), SKV_CODEC_MODEL, 0, 1, 1, 2, -300, SKV_DRAFT_NONE);
}

static void roundtrip_model_kjv_enc2_dec1(void)
{
    NEED_KJV();
    roundtrip(g_kjv, RT_N(g_kjv_n), SKV_CODEC_MODEL, 0, 1, 2, 1, -97, SKV_DRAFT_AUTO);
}

static void roundtrip_tokens_kjv_enc2_dec1(void)
{
    NEED_KJV();
    roundtrip(g_kjv, RT_N(g_kjv_n), SKV_CODEC_TOKENS, 0, 1, 2, 1, -300, 0);
}

static void roundtrip_tokens_kjv_enc1_dec2(void)
{
    NEED_KJV();
    roundtrip(g_kjv, RT_N(g_kjv_n), SKV_CODEC_TOKENS, 0, 1, 1, 2, 1, 0);
}

static void roundtrip_stories_both_codecs(void)
{
    NEED_MODEL();
    if (!g_sto) SKIP("../shared/corpus/stories260K_samples.txt not found");
    SUB(roundtrip(g_sto, RT_N(g_sto_n), SKV_CODEC_MODEL, 0, 1, 1, 2, -500, SKV_DRAFT_NONE));
    SUB(roundtrip(g_sto, RT_N(g_sto_n), SKV_CODEC_MODEL, 0, 1, 2, 1, -500, SKV_DRAFT_NGRAM));
    SUB(roundtrip(g_sto, RT_N(g_sto_n), SKV_CODEC_TOKENS, 0, 1, 2, 1, -500, 0));
}

/* An unsegmented session that fills its context (256) exactly, restored token by token with
 * scalar kernels (the encoder used the fastest ones: the engine's kernels agree bit for bit). */
static void roundtrip_full_context_scalar_restore(void)
{
    NEED_KJV();
    size_t n = g_kjv_n < 256 ? g_kjv_n : 256;
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params p = enc_params(codec, 256, 1, 0);
        restore_opts o = {1, SKV_KERNELS_SCALAR, 1, 1, 0, SKV_DRAFT_NONE, 0, NULL};
        uint8_t *data = NULL;
        size_t size = 0, m = 0;
        int32_t *back = NULL;
        SUB(encode(g_kjv, n, &p, -64, &data, &size, NULL));
        restore_all(data, size, &o, &back, &m);
        free(data);
        if (test_cur_failed) return;
        int same = m == n && !memcmp(back, g_kjv, n * sizeof *back);
        free(back);
        CHECK_MSG(same, "codec %d: restored tokens differ", codec);
    }
}

/* The file is a function of (tokens, model, parameters) only. */
static void file_bytes_independent_of_chunking_and_threads(void)
{
    NEED_KJV();
    size_t n = g_kjv_n < 700 ? g_kjv_n : 700;
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params p1 = enc_params(codec, 0, 1, 1), p2 = enc_params(codec, 0, 2, 1);
        uint8_t *a = NULL, *b = NULL, *c = NULL;
        size_t sa = 0, sb = 0, sc = 0;
        SUB(encode(g_kjv, n, &p1, 0, &a, &sa, NULL));
        encode(g_kjv, n, &p2, -41, &b, &sb, NULL);
        if (!test_cur_failed) encode(g_kjv, n, &p1, 1, &c, &sc, NULL);
        int same = !test_cur_failed && sa == sb && sa == sc && !memcmp(a, b, sa) && !memcmp(a, c, sa);
        free(a);
        free(b);
        free(c);
        if (test_cur_failed) return;
        CHECK_MSG(same, "codec %d: the file bytes depend on chunking or threads (%zu, %zu, %zu bytes)", codec, sa, sb, sc);
    }
}

/* The llama2.c checkpoint of the same weights has the same fingerprint: it restores a
 * session written with the GGUF form. */
static void restore_with_llama2c_form(void)
{
    NEED_KJV();
    skv_model *m2 = NULL;
    char err[512] = "";
    if (!g_bin[0]) SKIP("stories260K.bin not found (../shared/models/stories260K)");
    int rc = skv_model_load(g_bin, NULL, &m2, err, sizeof err);
    if (rc) SKIP("cannot load %.200s: %.200s", g_bin, err);
    size_t n = g_kjv_n < 200 ? g_kjv_n : 200;
    skv_encoder_params p = enc_params(SKV_CODEC_MODEL, 0, 1, 0);
    uint8_t *data = NULL;
    size_t size = 0;
    skv_session *s = NULL;
    skv_ctx *c = NULL;
    int32_t *back = malloc(n * sizeof *back);
    skv_restore_params rp = {.verify = 1};
    encode(g_kjv, n, &p, 0, &data, &size, NULL);
    if (!test_cur_failed && back) {
        rc = skv_session_open(data, size, &s, err, sizeof err);
        if (!rc) rc = skv_ctx_create(m2, NULL, &c);
        if (!rc) rc = skv_session_restore_segment(s, m2, 0, c, &rp, back, n);
    }
    int same = !test_cur_failed && rc == SKV_OK && !memcmp(back, g_kjv, n * sizeof *back);
    free(data);
    free(back);
    skv_ctx_free(c);
    skv_session_free(s);
    skv_model_free(m2);
    if (test_cur_failed) return;
    CHECK_MSG(same, "llama2.c form: %s: %s", skv_status_str(rc), err);
}

/* ---- segments ----------------------------------------------------------------------- */

static void segmented_boundaries_small_ctx(void)
{
    NEED_KJV();
    static const size_t lens[] = {1, 2, 63, 64, 65, 128, 129, 700};
    for (int codec = 0; codec < 2; codec++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li] < g_kjv_n ? lens[li] : g_kjv_n, size = 0;
            skv_encoder_params p = enc_params(codec, 64, 1 + (int)(li & 1), 1);
            uint8_t *data = NULL;
            skv_session *s = NULL;
            skv_session_info si;
            skv_encoder_stats st;
            SUB(encode(g_kjv, n, &p, li & 1 ? -150 : 0, &data, &size, &st));
            int rc = skv_session_open(data, size, &s, NULL, 0);
            free(data);
            CHECK_EQ_INT(rc, SKV_OK);
            skv_session_get_info(s, &si);
            uint32_t want = (uint32_t)((n + 63) / 64), bad_seg = 0;
            for (uint32_t i = 0; i < si.n_segments; i++) {
                uint32_t nt = 0;
                skv_session_segment_info(s, i, &nt, NULL, NULL);
                if (nt != (i + 1 < want ? 64u : (uint32_t)(n - 64 * (size_t)i))) bad_seg = i + 1;
            }
            skv_session_free(s);
            CHECK_MSG(si.n_segments == want && si.segmented && si.n_ctx == 64 && si.n_tokens == n && !bad_seg,
                      "codec %d, %zu tokens: %u segments (want %u), segment %u wrong", codec, n, si.n_segments,
                      want, bad_seg);
            CHECK_EQ_INT(st.n_model_coded, n - want); /* each segment's first token is coded raw */
            SUB(roundtrip(g_kjv, n, codec, 64, 1, 1 + (int)(li & 1), 2 - (int)(li & 1), li & 1 ? -150 : 0,
                          li & 1 ? SKV_DRAFT_NONE : SKV_DRAFT_AUTO));
        }
}

static void unsegmented_overflow_is_range(void)
{
    NEED_KJV();
    CHECK(g_kjv_n > 65);
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params p = enc_params(codec, 64, 1, 0);
        skv_encoder *e = NULL;
        uint8_t *data = NULL;
        size_t size = 0;
        CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_OK);
        int rc = skv_encoder_append(e, g_kjv, 65, NULL); /* one call past the end */
        const char *msg = skv_encoder_last_error(e);
        int ok = rc == SKV_ERR_RANGE && strstr(msg, "64") && strstr(msg, "context") && strstr(msg, "segment");
        skv_encoder_free(e);
        CHECK_MSG(ok, "append of 65 tokens into 64: %s, '%s'", skv_status_str(rc), msg);
        /* Filling the context exactly works; one more token is refused and the session
         * stays finishable with what it holds. */
        CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_OK);
        rc = skv_encoder_append(e, g_kjv, 64, NULL);
        int rc2 = skv_encoder_append(e, g_kjv + 64, 1, NULL);
        int rc3 = skv_encoder_finish(e, &data, &size);
        skv_encoder_free(e);
        CHECK_EQ_INT(rc, SKV_OK);
        CHECK_EQ_INT(rc2, SKV_ERR_RANGE);
        CHECK_EQ_INT(rc3, SKV_OK);
        restore_opts o = {1, SKV_KERNELS_AUTO, 1, 1, 0, 0, 0, NULL};
        int32_t *back = NULL;
        size_t m = 0;
        restore_all(data, size, &o, &back, &m);
        free(data);
        if (test_cur_failed) return;
        int same = m == 64 && !memcmp(back, g_kjv, 64 * sizeof *back);
        free(back);
        CHECK_MSG(same, "codec %d: the 64 tokens before the refused one did not round-trip", codec);
    }
}

/* ---- size: the model codec against the Shannon floor ------------------------------- */

/* two_sided: also require the quantized cost to be no more than 0.5% BELOW sum(-log2 p). It can
 * be lower legitimately: the frequency floor (1 / 2^total_bits) caps the cost of tokens the
 * model gives p < 2^-total_bits, which out-of-distribution text has (KJV verse numbers under a
 * TinyStories model: 118 of 5,920 coded tokens have p < 2^-20 and account for the -0.55%). */
static void check_overhead(const char *what, const int32_t *tok, size_t n, int two_sided)
{
    skv_encoder_params p = enc_params(SKV_CODEC_MODEL, 0, 1, 1);
    uint8_t *data = NULL;
    size_t size = 0;
    skv_encoder_stats st;
    skv_session *s = NULL;
    skv_session_info si;
    unsigned first_bits = 1;
    uint64_t payload = 0;
    SUB(encode(tok, n, &p, -256, &data, &size, &st));
    int rc = skv_session_open(data, size, &s, NULL, 0);
    free(data);
    CHECK_EQ_INT(rc, SKV_OK);
    skv_session_get_info(s, &si);
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint64_t pb = 0;
        skv_session_segment_info(s, i, NULL, &pb, NULL);
        payload += pb;
    }
    skv_session_free(s);
    while (((uint32_t)1 << first_bits) < si.n_vocab) first_bits++;
    double pbits = 8.0 * (double)payload, raw = (double)si.n_segments * first_bits;
    double floor_bits = st.model_bits + raw;
    fprintf(stderr,
            "%s: %llu tokens, %u segments, total 2^%u: payload %llu bytes = %.4f bits/token; "
            "sum(-log2 p) %.1f bits (%.4f bits/coded token), quantized %.1f bits (%+.4f%%), "
            "raw first tokens %.0f bits; payload vs floor %+.4f%%; file %zu bytes\n",
            what, (unsigned long long)st.n_tokens, si.n_segments, si.total_bits, (unsigned long long)payload,
            pbits / (double)n, st.model_bits, st.model_bits / (double)st.n_model_coded, st.coded_bits,
            100.0 * (st.coded_bits - st.model_bits) / st.model_bits, raw,
            100.0 * (pbits - floor_bits) / floor_bits, size);
    CHECK_EQ_INT(st.n_model_coded, n - si.n_segments);
    CHECK_MSG(pbits <= st.model_bits * 1.01 + raw + 128.0 * si.n_segments,
              "payload %.0f bits exceeds 1%% + 16 bytes/segment over the floor %.0f bits", pbits, floor_bits);
    CHECK_MSG(st.coded_bits <= 1.005 * st.model_bits,
              "quantized cost %.1f bits exceeds sum(-log2 p) %.1f bits by more than 0.5%%", st.coded_bits,
              st.model_bits);
    CHECK_MSG(!two_sided || st.coded_bits >= 0.995 * st.model_bits,
              "quantized cost %.1f bits is more than 0.5%% below sum(-log2 p) %.1f bits", st.coded_bits,
              st.model_bits);
    /* A range coder cannot beat the ideal cost of what it coded (less at most one byte of
     * flush slack per segment): the reported stats must be honest. */
    CHECK_MSG(pbits >= st.coded_bits + raw - 8.0 * si.n_segments,
              "payload %.0f bits is below the coded ideal %.0f bits: stats inconsistent", pbits, st.coded_bits + raw);
}

static void model_codec_overhead_kjv(void)
{
    NEED_KJV();
    check_overhead("KJV Gen1:1-Gen3:24", g_kjv, g_kjv_n, 0);
}

static void model_codec_overhead_stories(void)
{
    NEED_MODEL();
    if (!g_sto) SKIP("../shared/corpus/stories260K_samples.txt not found");
    check_overhead("stories260K samples", g_sto, g_sto_n, 1);
}

/* Every allowed frequency total round-trips (16: coarsest, 28: finest). */
static void model_codec_total_bits(void)
{
    NEED_KJV();
    static const unsigned tb[] = {16, 20, 28};
    size_t n = g_kjv_n < 300 ? g_kjv_n : 300;
    for (size_t k = 0; k < sizeof tb / sizeof tb[0]; k++) {
        skv_encoder_params p = enc_params(SKV_CODEC_MODEL, 128, 1, 1);
        restore_opts o = {2, SKV_KERNELS_AUTO, 1, 0, 0, k & 1 ? SKV_DRAFT_NONE : SKV_DRAFT_NGRAM, 0, NULL};
        uint8_t *data = NULL;
        size_t size = 0, m = 0;
        skv_session *s = NULL;
        skv_session_info si;
        int32_t *back = NULL;
        p.total_bits = tb[k];
        SUB(encode(g_kjv, n, &p, -50, &data, &size, NULL));
        CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK);
        skv_session_get_info(s, &si);
        skv_session_free(s);
        CHECK_EQ_INT(si.total_bits, tb[k]);
        restore_all(data, size, &o, &back, &m);
        free(data);
        if (test_cur_failed) return;
        int same = m == n && !memcmp(back, g_kjv, n * sizeof *back);
        free(back);
        CHECK_MSG(same, "total_bits %u: tokens differ", tb[k]);
    }
}

/* ---- incremental use --------------------------------------------------------------- */

/* An inference loop: append one token at a time, choose the next greedily from next_logits.
 * next_logits must be exactly what a plain context decoding the same tokens produces
 * (with a fresh context at every segment start). */
static void incremental_greedy_loop(void)
{
    NEED_MODEL();
    enum { STEPS = 300, SEG = 128 };
    size_t V = (size_t)g_info.n_vocab;
    float *lg = malloc(V * sizeof *lg), *ref_lg = malloc(V * sizeof *ref_lg);
    int32_t *tok = malloc((STEPS + 1) * sizeof *tok);
    CHECK(lg && ref_lg && tok);
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params p = enc_params(codec, SEG, 1, 1);
        skv_encoder *e = NULL;
        skv_ctx_params cp = skv_ctx_default_params();
        skv_ctx *ref = NULL;
        uint8_t *data = NULL;
        size_t size = 0, n = 0;
        int bad = -1;
        cp.n_ctx = SEG;
        if (skv_encoder_create(g_m, &p, &e, NULL, 0) || skv_ctx_create(g_m, &cp, &ref)) bad = -2;
        tok[n++] = g_info.bos_id >= 0 ? g_info.bos_id : 1;
        for (int step = 0; bad == -1; step++) {
            if (skv_ctx_n_pos(ref) == SEG) skv_ctx_truncate(ref, 0);
            if (skv_encoder_append(e, tok + n - 1, 1, lg) || skv_decode(ref, tok[n - 1], ref_lg)) {
                bad = -3;
                break;
            }
            if (memcmp(lg, ref_lg, V * sizeof *lg)) {
                bad = step;
                break;
            }
            if (n == STEPS) break;
            size_t best = 0;
            for (size_t i = 1; i < V; i++)
                if (lg[i] > lg[best]) best = i;
            tok[n++] = (int32_t)best;
        }
        if (bad == -1 && skv_encoder_finish(e, &data, &size)) bad = -4;
        skv_encoder_free(e);
        skv_ctx_free(ref);
        if (bad != -1) {
            free(data);
            free(lg);
            free(ref_lg);
            free(tok);
            CHECK_MSG(0, "codec %d: loop failed (%d: -2 create, -3 append, -4 finish, >= 0 logits differ at that step)",
                      codec, bad);
        }
        restore_opts o = {1, SKV_KERNELS_AUTO, 1, 1, 0, codec ? SKV_DRAFT_AUTO : 0, 0, NULL};
        int32_t *back = NULL;
        size_t m = 0;
        restore_all(data, size, &o, &back, &m);
        free(data);
        int same = !test_cur_failed && m == n && !memcmp(back, tok, n * sizeof *tok);
        free(back);
        if (!same) {
            free(lg);
            free(ref_lg);
            free(tok);
            if (test_cur_failed) return;
            CHECK_MSG(0, "codec %d: restored tokens differ from the generated ones", codec);
        }
    }
    free(lg);
    free(ref_lg);
    free(tok);
}

/* Speculative restore (n-gram drafts verified by batched passes) gives exactly the tokens
 * and KV of the token-by-token decode, for any block limit; its stats add up: every pass
 * but the last confirms one decoded token plus the drafts it accepted, so
 * n_passes + n_accepted == n_tokens. */
static void greedy_tokens(int32_t *tok, size_t n)
{
    size_t V = (size_t)g_info.n_vocab;
    float *lg = malloc(V * sizeof *lg);
    skv_ctx *c = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = (int)n;
    tok[0] = g_info.bos_id >= 0 ? g_info.bos_id : 1;
    CHECK(lg && !skv_ctx_create(g_m, &cp, &c));
    for (size_t i = 1; i < n; i++) {
        size_t best = 0;
        if (skv_decode(c, tok[i - 1], lg)) break;
        for (size_t k = 1; k < V; k++)
            if (lg[k] > lg[best]) best = k;
        tok[i] = (int32_t)best;
    }
    skv_ctx_free(c);
    free(lg);
}

static void speculative_restore_matches_token_by_token(void)
{
    NEED_KJV();
    enum { NG = 400 };
    static const int limits[] = {1, 2, 16, 256};
    int32_t greedy[NG];
    SUB(greedy_tokens(greedy, NG));
    for (int text = 0; text < 2; text++) {
        const int32_t *tok = text ? g_kjv : greedy;
        size_t n = text ? RT_N(g_kjv_n) * 7 / 12 : NG, m = 0; /* KJV: 2 segments of 300 */
        skv_encoder_params p = enc_params(SKV_CODEC_MODEL, text ? 300 : 0, 1, 1);
        uint8_t *data = NULL;
        size_t size = 0;
        int32_t *ref = NULL;
        skv_restore_stats st0 = {0, 0, 0, 0};
        restore_opts o = {1, SKV_KERNELS_AUTO, 1, 1, 0, SKV_DRAFT_NONE, 0, &st0};
        SUB(encode(tok, n, &p, -64, &data, &size, NULL));
        restore_all(data, size, &o, &ref, &m);
        int ok = !test_cur_failed && m == n && !memcmp(ref, tok, n * sizeof *tok);
        free(ref);
        if (!ok) free(data);
        if (test_cur_failed) return;
        CHECK_MSG(ok, "text %d: token-by-token restore differs", text);
        CHECK_MSG(st0.n_tokens == n && st0.n_passes == n && st0.n_drafted == 0 && st0.n_accepted == 0,
                  "text %d, no draft: stats %llu tokens, %llu passes, %llu drafted", text,
                  (unsigned long long)st0.n_tokens, (unsigned long long)st0.n_passes,
                  (unsigned long long)st0.n_drafted);
        for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++) {
            skv_restore_stats st = {0, 0, 0, 0};
            restore_opts os = {2 - (int)(li & 1), SKV_KERNELS_AUTO, 1, li == 2, 1, SKV_DRAFT_NGRAM, limits[li], &st};
            int32_t *back = NULL;
            restore_all(data, size, &os, &back, &m);
            ok = !test_cur_failed && m == n && !memcmp(back, tok, n * sizeof *tok);
            free(back);
            if (!ok) free(data);
            if (test_cur_failed) return;
            CHECK_MSG(ok, "text %d, draft_max %d: tokens differ", text, limits[li]);
            fprintf(stderr, "speculative restore, %s, draft_max %d: %llu tokens in %llu passes (%llu drafted, %llu accepted)\n",
                    text ? "KJV" : "greedy text", limits[li], (unsigned long long)st.n_tokens,
                    (unsigned long long)st.n_passes, (unsigned long long)st.n_drafted,
                    (unsigned long long)st.n_accepted);
            ok = st.n_tokens == n && st.n_passes + st.n_accepted == n && st.n_accepted <= st.n_drafted &&
                 (limits[li] > 1 || st.n_drafted == 0) && (text || limits[li] < 16 || st.n_accepted > 0);
            if (!ok) free(data);
            CHECK_MSG(ok, "text %d, draft_max %d: stats %llu tokens, %llu passes, %llu drafted, %llu accepted", text,
                      limits[li], (unsigned long long)st.n_tokens, (unsigned long long)st.n_passes,
                      (unsigned long long)st.n_drafted, (unsigned long long)st.n_accepted);
        }
        free(data);
    }
}

typedef struct {
    uint64_t last, total, calls;
    int bad;
} progress_log;

static void on_progress(void *user, uint64_t done, uint64_t total)
{
    progress_log *pl = user;
    if (done < pl->last || done > total || (pl->calls && total != pl->total)) pl->bad = 1;
    pl->last = done;
    pl->total = total;
    pl->calls++;
}

static void progress_is_monotone_and_complete(void)
{
    NEED_KJV();
    size_t n = g_kjv_n < 600 ? g_kjv_n : 600;
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params p = enc_params(codec, 512, 1, 1);
        uint8_t *data = NULL;
        size_t size = 0;
        skv_session *s = NULL;
        skv_ctx *c = NULL;
        skv_ctx_params cp = skv_ctx_default_params();
        int32_t *back = malloc(512 * sizeof *back);
        progress_log pl = {0, 0, 0, 0};
        skv_restore_params rp = {.progress = on_progress, .user = &pl, .draft = codec ? SKV_DRAFT_NGRAM : 0};
        uint32_t nt = 0;
        int rc = -100;
        cp.n_ctx = 512;
        encode(g_kjv, n, &p, 0, &data, &size, NULL);
        if (!test_cur_failed && back && !skv_session_open(data, size, &s, NULL, 0) && !skv_ctx_create(g_m, &cp, &c)) {
            skv_session_segment_info(s, 0, &nt, NULL, NULL);
            rc = skv_session_restore_segment(s, g_m, 0, c, &rp, back, 512);
        }
        free(data);
        free(back);
        skv_ctx_free(c);
        skv_session_free(s);
        if (test_cur_failed) return;
        CHECK_EQ_INT(rc, SKV_OK);
        CHECK_MSG(!pl.bad && pl.calls >= 1 && pl.last == nt && pl.total == nt,
                  "codec %d: progress calls %llu, last %llu/%llu, segment %u, bad %d", codec,
                  (unsigned long long)pl.calls, (unsigned long long)pl.last, (unsigned long long)pl.total, nt, pl.bad);
    }
}

/* Finishing without tokens gives a valid empty session (no segments). */
static void empty_session(void)
{
    NEED_MODEL();
    for (int codec = 0; codec < 2; codec++) {
        skv_encoder_params p = enc_params(codec, 0, 1, 0);
        skv_encoder *e = NULL;
        uint8_t *data = NULL;
        size_t size = 0;
        skv_session *s = NULL;
        skv_session_info si;
        char err[256] = "";
        CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_OK);
        CHECK_EQ_INT(skv_encoder_append(e, NULL, 0, NULL), SKV_OK);
        int rc = skv_encoder_finish(e, &data, &size);
        skv_encoder_free(e);
        CHECK_EQ_INT(rc, SKV_OK);
        CHECK_EQ_INT(size, HDR);
        rc = skv_session_open(data, size, &s, err, sizeof err);
        free(data);
        CHECK_MSG(rc == SKV_OK, "%s", err);
        skv_session_get_info(s, &si);
        rc = skv_session_segment_info(s, 0, NULL, NULL, NULL);
        skv_session_free(s);
        CHECK(si.n_segments == 0 && si.n_tokens == 0 && si.codec == codec && si.n_vocab == (uint32_t)g_info.n_vocab);
        CHECK_EQ_INT(rc, SKV_ERR_INVALID_ARG);
    }
}

/* ---- hostile input ------------------------------------------------------------------ */

enum { R_OPEN = 0, R_RESTORE = 1, R_SAME = 2, R_WRONG = 3 };
static int g_last_rc; /* status of try_restore's failing call */

/* Opens and restores data with a context of at most 1024 positions; classifies the outcome
 * against the original tokens. err receives the first error message. */
static int try_restore(const uint8_t *data, size_t size, skv_ctx *c, const int32_t *orig, size_t orig_n, int verify,
                       int draft, char *err, size_t errcap)
{
    skv_session *s = NULL;
    skv_session_info si;
    int32_t tok[1024];
    size_t n = 0;
    int res = R_SAME;
    err[0] = 0;
    if ((g_last_rc = skv_session_open(data, size, &s, err, errcap)) != SKV_OK) return R_OPEN;
    skv_session_get_info(s, &si);
    for (uint32_t i = 0; i < si.n_segments; i++) {
        skv_restore_params rp = {.verify = verify, .draft = draft};
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        if ((g_last_rc = skv_session_restore_segment(s, g_m, i, c, &rp, tok, sizeof tok / sizeof tok[0]))) {
            if (err && errcap) snprintf(err, errcap, "%s", skv_ctx_last_error(c));
            res = R_RESTORE;
            break;
        }
        if (n + nt > orig_n || memcmp(tok, orig + n, nt * sizeof *tok)) res = R_WRONG;
        n += nt;
    }
    if (res == R_SAME && n != orig_n) res = R_WRONG;
    skv_session_free(s);
    return res;
}

typedef struct {
    uint8_t *data;
    size_t size;
    int codec;
} sample_file;

/* Small valid files of 14 tokens: both codecs, a 3-segment (n_ctx 6) and a 1-segment session. */
static void make_samples(sample_file *f, size_t *nf, const int32_t **tok, size_t *ntok)
{
    *nf = 0;
    *tok = g_kjv;
    *ntok = 14;
    for (int codec = 0; codec < 2; codec++)
        for (int seg = 0; seg < 2; seg++) {
            skv_encoder_params p = enc_params(codec, seg ? 6 : 32, 1, seg);
            f[*nf].codec = codec;
            encode(g_kjv, 14, &p, -5, &f[*nf].data, &f[*nf].size, NULL);
            if (test_cur_failed) return;
            (*nf)++;
        }
}

static void free_samples(sample_file *f, size_t nf)
{
    for (size_t i = 0; i < nf; i++) free(f[i].data);
}

static skv_ctx *small_ctx(void)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    cp.n_ctx = 1024;
    return skv_ctx_create(g_m, &cp, &c) ? NULL : c;
}

static void hostile_truncations(void)
{
    NEED_KJV();
    sample_file f[4];
    size_t nf = 0, ntok = 0;
    const int32_t *tok = NULL;
    char err[512];
    SUB(make_samples(f, &nf, &tok, &ntok));
    for (size_t k = 0; k < nf; k++)
        for (size_t len = 0; len < f[k].size; len++) {
            skv_session *s = NULL;
            int rc = skv_session_open(f[k].data, len, &s, err, sizeof err);
            skv_session_free(s);
            if (rc != SKV_ERR_FORMAT || !strstr(err, ".skv")) {
                free_samples(f, nf);
                CHECK_MSG(0, "file %zu truncated to %zu bytes: %s, '%s'", k, len, skv_status_str(rc), err);
            }
        }
    free_samples(f, nf);
}

static void hostile_bit_flips(void)
{
    NEED_KJV();
    sample_file f[4];
    size_t nf = 0, ntok = 0, flips = 0;
    const int32_t *tok = NULL;
    char err[512];
    skv_ctx *c = small_ctx();
    CHECK(c);
    SUB(make_samples(f, &nf, &tok, &ntok));
    for (size_t k = 0; k < nf; k++)
        for (size_t bit = 0; bit < f[k].size * 8; bit++) {
            f[k].data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            int res = try_restore(f[k].data, f[k].size, c, tok, ntok, 1, 0, err, sizeof err);
            f[k].data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            flips++;
            /* Every byte of a v1 file is under a checksum: no flip gets past open. */
            if (res != R_OPEN || !err[0]) {
                free_samples(f, nf);
                skv_ctx_free(c);
                CHECK_MSG(0, "file %zu, bit %zu flipped: outcome %d ('%s')", k, bit, res, err);
            }
        }
    fprintf(stderr, "bit flips: %zu, all rejected by skv_session_open\n", flips);
    free_samples(f, nf);
    skv_ctx_free(c);
}

/* Bit flips with the checksums recomputed: the structural checks, the model check, the
 * payload decoders and the KV verification must catch what the checksums no longer do. */
static void hostile_bit_flips_rechecksummed(void)
{
    NEED_KJV();
    sample_file f[4];
    size_t nf = 0, ntok = 0, count[4] = {0, 0, 0, 0};
    const int32_t *tok = NULL;
    char err[512];
    skv_ctx *c = small_ctx();
    CHECK(c);
    SUB(make_samples(f, &nf, &tok, &ntok));
    for (size_t k = 0; k < nf; k += 3) { /* tokens codec 1 segment, model codec 3 segments */
        uint8_t *d = malloc(f[k].size);
        CHECK(d);
        for (size_t bit = 0; bit < f[k].size * 8; bit += SANITIZED ? 3 : 1) {
            memcpy(d, f[k].data, f[k].size);
            d[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            fix_checksums(d, f[k].size);
            int res = try_restore(d, f[k].size, c, tok, ntok, 1, bit & 1 ? SKV_DRAFT_NONE : SKV_DRAFT_AUTO, err,
                                  sizeof err);
            count[res]++;
            if (res == R_WRONG || (res < R_SAME && !err[0])) {
                free(d);
                free_samples(f, nf);
                skv_ctx_free(c);
                CHECK_MSG(0, "file %zu (codec %d), bit %zu flipped and re-checksummed: %s", k, f[k].codec, bit,
                          res == R_WRONG ? "restored WRONG tokens with verify on" : "error without a message");
            }
        }
        free(d);
    }
    fprintf(stderr,
            "re-checksummed bit flips: %zu rejected by open, %zu by restore/verify, %zu harmless (same tokens), 0 wrong\n",
            count[R_OPEN], count[R_RESTORE], count[R_SAME]);
    free_samples(f, nf);
    skv_ctx_free(c);
}

static void hostile_random_bytes(void)
{
    NEED_KJV();
    skv_ctx *c = small_ctx();
    uint8_t buf[700];
    char err[512];
    const int32_t *tok = g_kjv;
    size_t opened = 0;
    CHECK(c);
    for (int it = 0; it < 3000; it++) {
        size_t len = (size_t)(rng() % sizeof buf);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rng();
        int mode = it % 3;
        if (mode >= 1 && len >= 8) memcpy(buf, "\x89SKV\r\n\x1a\n", 8);
        if (mode == 2 && len >= HDR) { /* a plausible header with a valid checksum */
            skv_wr16(buf + 8, 1);
            skv_wr16(buf + 10, HDR);
            skv_wr32(buf + 12, (uint32_t)(rng() % 2));
            skv_wr32(buf + 16, (uint32_t)(rng() % 2));
            skv_wr32(buf + 20, (uint32_t)(rng() % 4));
            skv_wr64(buf + 24, rng() % 64);
            skv_wr32(buf + 32, (uint32_t)(1 + rng() % 64));
            skv_wr32(buf + 36, (uint32_t)g_info.n_vocab);
            skv_wr32(buf + 40, skv_rd32(buf + 12) ? 24u : 0u);
            fix_checksums(buf, len);
        }
        int res = try_restore(buf, len, c, tok, 0, 1, 0, err, sizeof err);
        if (res != R_OPEN) opened++;
        if (res == R_WRONG || (mode == 0 && res != R_OPEN) || (res < R_SAME && !err[0])) {
            skv_ctx_free(c);
            CHECK_MSG(0, "random input %d (mode %d, %zu bytes): outcome %d ('%s')", it, mode, len, res, err);
        }
    }
    fprintf(stderr, "random inputs: 3000, %zu opened (then refused by restore)\n", opened);
    skv_ctx_free(c);
}

/* A valid header/segments with absurd counts, re-checksummed: clean format errors. */
static void hostile_absurd_counts(void)
{
    NEED_KJV();
    sample_file f[4];
    size_t nf = 0, ntok = 0;
    const int32_t *tok = NULL;
    char err[512];
    SUB(make_samples(f, &nf, &tok, &ntok));
    /* f[3]: model codec, 14 tokens in 3 segments of n_ctx 6 (6, 6, 2) */
    const uint8_t *base = f[3].data;
    size_t size = f[3].size, s1 = seg_offset(base, 1);
    uint8_t *d = malloc(size);
    struct {
        size_t off;
        int width;
        uint64_t v;
        int want; /* status open must return */
        int fix_seg;
    } cases[] = {
        {8, 2, 2, SKV_ERR_UNSUPPORTED, 0},           /* version */
        {10, 2, 64, SKV_ERR_FORMAT, 0},              /* header size */
        {12, 4, 1000, SKV_ERR_UNSUPPORTED, 0},       /* codec (2..8: quantized-KV codecs, 9: cm, 10: pred) */
        {12, 4, 0xFFFFFFFF, SKV_ERR_UNSUPPORTED, 0}, /* codec */
        {16, 4, 2, SKV_ERR_FORMAT, 0},               /* flags */
        {16, 4, 0, SKV_ERR_FORMAT, 0},               /* unsegmented with 3 segments */
        {20, 4, 0xFFFFFFFF, SKV_ERR_FORMAT, 0},      /* n_segments */
        {20, 4, 0x10000000, SKV_ERR_FORMAT, 0},
        {20, 4, 4, SKV_ERR_FORMAT, 0},
        {20, 4, 2, SKV_ERR_FORMAT, 0},
        {20, 4, 0, SKV_ERR_FORMAT, 0},
        {24, 8, UINT64_MAX, SKV_ERR_FORMAT, 0},      /* n_tokens */
        {24, 8, 0, SKV_ERR_FORMAT, 0},
        {24, 8, 15, SKV_ERR_FORMAT, 0},
        {32, 4, 0, SKV_ERR_FORMAT, 0},               /* n_ctx */
        {32, 4, 5, SKV_ERR_FORMAT, 0},
        {32, 4, 0xFFFFFFFF, SKV_ERR_FORMAT, 0},
        {36, 4, 0, SKV_ERR_FORMAT, 0},               /* n_vocab */
        {36, 4, 0xFFFFFFFF, SKV_ERR_FORMAT, 0},
        {36, 4, (1u << 24) + 1, SKV_ERR_FORMAT, 0},
        {40, 4, 0, SKV_ERR_FORMAT, 0},               /* total_bits */
        {40, 4, 15, SKV_ERR_FORMAT, 0},
        {40, 4, 29, SKV_ERR_FORMAT, 0},
        {40, 4, 255, SKV_ERR_FORMAT, 0},
        {HDR, 4, 0x534B5653, SKV_ERR_FORMAT, 1},        /* segment magic "SKVS" -> "SVKS" */
        {HDR + 4, 4, 0, SKV_ERR_FORMAT, 1},             /* segment n_tokens */
        {HDR + 4, 4, 7, SKV_ERR_FORMAT, 1},
        {HDR + 4, 4, 0xFFFFFFFF, SKV_ERR_FORMAT, 1},
        {HDR + 8, 8, UINT64_MAX, SKV_ERR_FORMAT, 0},    /* segment payload bytes */
        {HDR + 8, 8, (uint64_t)1 << 63, SKV_ERR_FORMAT, 0},
        {HDR + 8, 8, 0xFFFFFFFFu, SKV_ERR_FORMAT, 0},
        {0, 0, 0, 0, 0},
    };
    CHECK(d);
    for (int k = 0; cases[k].width; k++) {
        memcpy(d, base, size);
        for (int b = 0; b < cases[k].width; b++) d[cases[k].off + (size_t)b] = (uint8_t)(cases[k].v >> (8 * b));
        fix_header_checksum(d);
        if (cases[k].fix_seg) skv_wr64(d + s1 - 8, XXH3_64bits(d + HDR, s1 - 8 - HDR));
        skv_session *s = NULL;
        int rc = skv_session_open(d, size, &s, err, sizeof err);
        skv_session_free(s);
        if (rc != cases[k].want || !err[0]) {
            free(d);
            free_samples(f, nf);
            CHECK_MSG(0, "case %d (offset %zu := %llu): %s (want %s), '%s'", k, cases[k].off,
                      (unsigned long long)cases[k].v, skv_status_str(rc), skv_status_str(cases[k].want), err);
        }
    }
    /* Well-formed but for another vocabulary / a huge segment capacity: opens, and restore
     * refuses the model (vocabulary) or works (capacity is only an upper bound). */
    skv_ctx *c = small_ctx();
    int res1 = -1, res2 = -1;
    if (c) {
        memcpy(d, base, size);
        skv_wr32(d + 36, (1u << 24));
        fix_header_checksum(d);
        res1 = try_restore(d, size, c, tok, ntok, 1, 0, err, sizeof err);
        int named = strstr(err, "wrong model") != NULL;
        memcpy(d, base, size);
        skv_wr32(d + 32, (1u << 24));
        fix_header_checksum(d);
        res2 = try_restore(d, size, c, tok, ntok, 1, 0, err, sizeof err);
        if (!named) res1 = -2;
    }
    skv_ctx_free(c);
    free(d);
    free_samples(f, nf);
    CHECK_MSG(res1 == R_RESTORE, "n_vocab 2^24: outcome %d (want a refused model)", res1);
    CHECK_MSG(res2 == R_SAME, "n_ctx 2^24: outcome %d ('%s')", res2, err);
}

/* Builds a one-segment file from a valid file's header and the given payload. */
static uint8_t *assemble(const uint8_t *hdr, uint32_t n_tokens, const uint8_t *digest, const void *payload,
                         size_t plen, size_t *size)
{
    uint8_t *d = malloc(HDR + SEGHDR + plen + 8);
    if (!d) return NULL;
    memcpy(d, hdr, HDR);
    skv_wr32(d + 20, 1);
    skv_wr64(d + 24, n_tokens);
    memcpy(d + HDR, "SKVS", 4);
    skv_wr32(d + HDR + 4, n_tokens);
    skv_wr64(d + HDR + 8, plen);
    memcpy(d + HDR + 16, digest, 16);
    if (plen) memcpy(d + HDR + SEGHDR, payload, plen);
    *size = HDR + SEGHDR + plen + 8;
    fix_checksums(d, *size);
    return d;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t k = 0;
    while (v >= 0x80) {
        p[k++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[k++] = (uint8_t)v;
    return k;
}

/* Crafted token-codec payloads (valid checksums): each must be a format error. */
static void hostile_tokens_payloads(void)
{
    NEED_KJV();
    enum { N = 12 };
    skv_encoder_params p = enc_params(SKV_CODEC_TOKENS, 32, 1, 0);
    uint8_t *good = NULL, raw[256], z[1024], digest[16];
    size_t gsize = 0, rlen = 0, zlen, size = 0;
    char err[512];
    skv_ctx *c = small_ctx();
    CHECK(c);
    encode(g_kjv, N, &p, 0, &good, &gsize, NULL);
    if (test_cur_failed) {
        skv_ctx_free(c);
        return;
    }
    memcpy(digest, good + HDR + 16, 16);
    for (int k = 0; k < 9; k++) {
        rlen = 0;
        for (int i = 0; i < N; i++) {
            uint64_t v = (uint64_t)g_kjv[i];
            if (k == 1 && i == 5) v = (uint64_t)g_info.n_vocab;      /* outside the vocabulary */
            if (k == 2 && i == 5) {                                  /* over-long: 6 bytes */
                memcpy(raw + rlen, "\x80\x80\x80\x80\x80\x01", 6);
                rlen += 6;
                continue;
            }
            if (k == 3 && i == N - 1) continue;                      /* one varint missing */
            if (k == 5 && i == 3) v = 0xFFFFFFFFu;                   /* 32-bit maximum */
            rlen += put_varint(raw + rlen, v);
        }
        if (k == 4) raw[rlen++] = 7;                                 /* trailing byte */
        if (k == 6) raw[rlen - 1] |= 0x80;                           /* last varint unterminated */
        if (k == 7) { /* content larger than 5 bytes per token */
            memset(raw, 0, 5 * N + 1);
            rlen = 5 * N + 1;
        }
        if (k == 8) { /* a frame that does not declare its content size */
            ZSTD_CCtx *cc = ZSTD_createCCtx();
            ZSTD_inBuffer in = {raw, rlen, 0};
            ZSTD_outBuffer out = {z, sizeof z, 0};
            ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
            size_t r = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end);
            ZSTD_freeCCtx(cc);
            CHECK(r == 0);
            zlen = out.pos;
        } else {
            zlen = ZSTD_compress(z, sizeof z, raw, rlen, 3);
            CHECK(!ZSTD_isError(zlen));
        }
        uint8_t *d = assemble(good, N, digest, z, zlen, &size);
        CHECK(d);
        int res = try_restore(d, size, c, g_kjv, N, 0, 0, err, sizeof err);
        free(d);
        if (k == 0 ? res != R_SAME : res != R_RESTORE || g_last_rc != SKV_ERR_FORMAT) {
            free(good);
            skv_ctx_free(c);
            CHECK_MSG(0, "crafted tokens payload %d: outcome %d, '%s'", k, res, err);
        }
    }
    /* not a zstd frame at all; an empty payload */
    for (int k = 0; k < 2; k++) {
        uint8_t *d = assemble(good, N, digest, "not zstd at all", k ? 0 : 15, &size);
        CHECK(d);
        int res = try_restore(d, size, c, g_kjv, N, 0, 0, err, sizeof err);
        free(d);
        if (res != R_RESTORE || g_last_rc != SKV_ERR_FORMAT) {
            free(good);
            skv_ctx_free(c);
            CHECK_MSG(0, "%s payload: outcome %d, '%s'", k ? "empty" : "non-zstd", res, err);
        }
    }
    free(good);
    skv_ctx_free(c);
}

/* Model-codec payloads with bytes added or removed, checksums recomputed, over several texts.
 * With verification on, the outcome is an error or the original tokens, never other tokens.
 * Without it, wrong tokens can come out: the range decoder's byte-count check (dec_finish)
 * is exact only when the decoded symbols are the encoder's, and a truncated stream decodes
 * its last symbols from zeros, so the count matches by chance (measured below; the segment
 * checksum stops accidental truncation, so only a crafted file gets here). */
static void hostile_model_payload_length(void)
{
    NEED_KJV();
    enum { WINDOWS = SANITIZED ? 4 : 10 };
    uint8_t buf[1024], digest[16];
    char err[512];
    int fails = 0, silent[9] = {0}, rejected[9] = {0};
    skv_ctx *c = small_ctx();
    CHECK(c);
    CHECK(g_kjv_n > 400);
    for (int w = 0; w < WINDOWS && !fails; w++) {
        size_t start = (size_t)w * 31, n = 16 + (size_t)w * 9, gsize = 0, size = 0;
        skv_encoder_params p = enc_params(SKV_CODEC_MODEL, 256, 1, 0);
        uint8_t *good = NULL;
        encode(g_kjv + start, n, &p, 0, &good, &gsize, NULL);
        if (test_cur_failed) break;
        size_t plen = (size_t)skv_rd64(good + HDR + 8);
        memcpy(digest, good + HDR + 16, 16);
        memcpy(buf, good + HDR + SEGHDR, plen);
        for (size_t i = 0; i < 8; i++) buf[plen + i] = (uint8_t)(0x5A + 77 * i);
        for (int delta = -4; delta <= 4; delta++) {
            if ((long)plen + delta < 0) continue;
            for (int verify = 0; verify < 2; verify++) {
                uint8_t *d = assemble(good, (uint32_t)n, digest, buf, plen + (size_t)(long)delta, &size);
                int draft = w & 1 ? SKV_DRAFT_NONE : SKV_DRAFT_AUTO;
                int res = d ? try_restore(d, size, c, g_kjv + start, n, verify, draft, err, sizeof err) : -1;
                free(d);
                if (res < 0 || (delta == 0 && res != R_SAME) || (verify && res == R_WRONG) ||
                    (res == R_RESTORE && !err[0])) {
                    fprintf(stderr, "window %d, payload %+d bytes, verify %d: outcome %d '%s'\n", w, delta, verify,
                            res, err);
                    fails++;
                }
                if (!verify) silent[delta + 4] += res == R_WRONG, rejected[delta + 4] += res < R_SAME;
            }
        }
        free(good);
    }
    skv_ctx_free(c);
    if (test_cur_failed) return;
    fprintf(stderr, "model payload length changes without verification (%d texts): ", WINDOWS);
    for (int k = 0; k < 9; k++)
        if (k != 4) fprintf(stderr, "%+d: %d rejected, %d wrong tokens; ", k - 4, rejected[k], silent[k]);
    fprintf(stderr, "\n");
    CHECK_MSG(!fails, "%d payload length cases misbehaved (see stderr)", fails);
}

/* A tokens segment restored into a model whose fingerprint nobody has computed yet: it is
 * computed beside the prefill and compared after (restore.c fp_overlap). The perturbed
 * model at `other` (same vocabulary) is still refused as the wrong model, with the
 * context left empty; a fresh load of the right model restores verified. */
static void fresh_model_case(const char *other, size_t n, int codec)
{
    skv_encoder_params p = enc_params(codec, 0, 1, 0);
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    char err[512] = "";
    int rc = skv_encoder_create(g_m, &p, &e, NULL, 0);
    if (!rc) rc = skv_encoder_append(e, g_kjv, n, NULL);
    if (!rc) rc = skv_encoder_finish(e, &data, &size);
    if (!rc) rc = skv_session_open(data, size, &s, err, sizeof err);
    CHECK_MSG(rc == SKV_OK, "%s session: %s %s", skv_codec_name(codec), skv_status_str(rc), err);
    for (int right = 0; right < 2 && !test_cur_failed; right++) {
        skv_model *fresh = NULL;
        skv_ctx *c = NULL;
        int32_t back[128];
        skv_restore_params rp = {.verify = 1};
        rc = skv_model_load(right ? g_gguf : other, NULL, &fresh, err, sizeof err);
        if (!rc) rc = skv_ctx_create(fresh, NULL, &c);
        if (!rc && (rc = skv_session_restore_segment(s, fresh, 0, c, &rp, back, 128)))
            snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
        if (right)
            CHECK_MSG(rc == SKV_OK && skv_ctx_n_pos(c) == (int)n && !memcmp(back, g_kjv, n * sizeof *back),
                      "%s, the right model, fresh: %s %s", skv_codec_name(codec), skv_status_str(rc), err);
        else
            CHECK_MSG(rc == SKV_ERR_MISMATCH && strstr(err, "wrong model") && c && skv_ctx_n_pos(c) == 0,
                      "%s, the wrong model, fresh: %s '%s', %d positions left", skv_codec_name(codec),
                      skv_status_str(rc), err, c ? skv_ctx_n_pos(c) : -1);
        skv_ctx_free(c);
        skv_model_free(fresh);
    }
    skv_session_free(s);
    skv_encoder_free(e);
    free(data);
}

/* A segment coded without the model (tokens, cm, cmv: cmv's caches are keyed by the
 * tokenizer's fingerprint, which the perturbed model shares) restored into a model whose
 * fingerprint was never computed: it prefills while a thread computes it, and is checked
 * after. */
static void fresh_model_checked_after_prefill(const char *other, size_t n)
{
    const int codecs[] = {SKV_CODEC_TOKENS, SKV_CODEC_CM, SKV_CODEC_CMV};
    for (size_t i = 0; i < sizeof codecs / sizeof *codecs && !test_cur_failed; i++) fresh_model_case(other, n, codecs[i]);
}

/* Different weights: refused by fingerprint, naming both models. */
static void wrong_model_is_refused(void)
{
    NEED_KJV();
    size_t len = 0, n = g_kjv_n < 100 ? g_kjv_n : 100;
    char *bytes = slurp(g_gguf, &len), path[256], err[512] = "";
    skv_model *m2 = NULL;
    uint8_t fp1[16], fp2[16];
    char h1[33], h2[33];
    int rc = -100;
    CHECK(bytes && len > 64);
    snprintf(path, sizeof path, "/tmp/seqkv_test_session_%ld.gguf", (long)getpid());
    /* The tensor data (all f32, 32-byte aligned) ends the file: flip the lowest mantissa bit
     * of the last non-zero word. */
    size_t off = (len & ~(size_t)3) - 4;
    while (off > 64 && !skv_rd32((const uint8_t *)bytes + off)) off -= 4;
    bytes[off] ^= 1;
    FILE *f = fopen(path, "wb");
    if (f) {
        if (fwrite(bytes, 1, len, f) == len) rc = 0;
        if (fclose(f)) rc = -100;
    }
    free(bytes);
    CHECK_MSG(rc == 0, "cannot write %s", path);
    rc = skv_model_load(path, NULL, &m2, err, sizeof err);
    if (rc == SKV_OK) fresh_model_checked_after_prefill(path, n);
    remove(path);
    CHECK_MSG(rc == SKV_OK, "perturbed model: %s", err);
    skv_model_fingerprint(g_m, fp1);
    skv_model_fingerprint(m2, fp2);
    hex16(fp1, h1);
    hex16(fp2, h2);
    if (!memcmp(fp1, fp2, 16)) {
        skv_model_free(m2);
        CHECK_MSG(0, "one weight changed but the fingerprint did not");
    }
    uint8_t tf1[16], tf2[16];
    CHECK(skv_model_tokenizer_fingerprint(g_m, tf1) == SKV_OK && skv_model_tokenizer_fingerprint(m2, tf2) == SKV_OK);
    CHECK_MSG(!memcmp(tf1, tf2, 16), "the same tokenizer, another weight: the tokenizer's fingerprint changed");
    skv_model_info i2;
    skv_model_get_info(m2, &i2);
    for (int codec = 0; codec < 2 && !test_cur_failed; codec++)
        for (int dir = 0; dir < 2 && !test_cur_failed; dir++) {
            skv_model *wm = dir ? m2 : g_m, *rm = dir ? g_m : m2;
            skv_encoder_params p = enc_params(codec, 0, 1, 0);
            skv_encoder *e = NULL;
            skv_session *s = NULL;
            skv_ctx *c = NULL;
            uint8_t *data = NULL;
            size_t size = 0;
            int32_t back[128];
            skv_restore_params rp = {.verify = 1};
            rc = skv_encoder_create(wm, &p, &e, NULL, 0);
            if (!rc) rc = skv_encoder_append(e, g_kjv, n, NULL);
            if (!rc) rc = skv_encoder_finish(e, &data, &size);
            if (!rc) rc = skv_session_open(data, size, &s, err, sizeof err);
            if (!rc) rc = skv_ctx_create(rm, NULL, &c);
            if (!rc && (rc = skv_session_restore_segment(s, rm, 0, c, &rp, back, 128))) snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
            skv_encoder_free(e);
            skv_session_free(s);
            skv_ctx_free(c);
            free(data);
            CHECK_MSG(rc == SKV_ERR_MISMATCH && strstr(err, h1) && strstr(err, h2) && strstr(err, g_info.name) &&
                          strstr(err, i2.name) && strstr(err, "wrong model"),
                      "codec %d, direction %d: %s, '%s'", codec, dir, skv_status_str(rc), err);
        }
    skv_model_free(m2);
}

/* ---- API misuse --------------------------------------------------------------------- */

/* .skv files record the first 8 bytes of the tokenizer's fingerprint (header flag 4): a
 * model with the same weights and another tokenizer restores the KV bit-exactly, but the
 * ids would render to other text, so it is refused ("wrong tokenizer"); the model's own
 * fingerprint does not see it (its vocabulary part is the size only). A file without the
 * field (the flag clear, the bytes zero, as before) restores as before. */
static void wrong_tokenizer_is_refused(void)
{
    NEED_KJV();
    char path[256], err[512] = "";
    skv_model *m2 = NULL;
    uint8_t fp1[16], fp2[16], tf1[16], tf2[16];
    size_t n = g_kjv_n < 60 ? g_kjv_n : 60, size = 0;
    snprintf(path, sizeof path, "/tmp/seqkv_test_session_tok_%ld.gguf", (long)getpid());
    CHECK_MSG(gguf_other_tokenizer(g_gguf, g_m, path) == 0, "no token to change in %s", g_gguf);
    int rc = skv_model_load(path, NULL, &m2, err, sizeof err);
    remove(path);
    CHECK_MSG(rc == SKV_OK, "the copy: %s", err);
    CHECK(skv_model_fingerprint(g_m, fp1) == SKV_OK && skv_model_fingerprint(m2, fp2) == SKV_OK && !memcmp(fp1, fp2, 16));
    CHECK(skv_model_tokenizer_fingerprint(g_m, tf1) == SKV_OK && skv_model_tokenizer_fingerprint(m2, tf2) == SKV_OK);
    CHECK_MSG(memcmp(tf1, tf2, 16) != 0, "one token's text changed, the tokenizer's fingerprint did not");
    skv_encoder_params p = enc_params(SKV_CODEC_TOKENS, 0, 1, 0);
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    uint8_t *data = NULL;
    skv_session_info si;
    rc = skv_encoder_create(g_m, &p, &e, NULL, 0);
    if (!rc) rc = skv_encoder_append(e, g_kjv, n, NULL);
    if (!rc) rc = skv_encoder_finish(e, &data, &size);
    skv_encoder_free(e);
    CHECK(rc == SKV_OK && size > 128);
    for (int old = 0; old < 2 && !test_cur_failed; old++) {
        if (old) { /* as written before the field: flag clear, bytes zero, header checksum */
            data[16] &= (uint8_t)~4u;
            memset(data + 112, 0, 8);
            uint64_t h = XXH3_64bits(data, 120);
            for (int i = 0; i < 8; i++) data[120 + i] = (uint8_t)(h >> (8 * i));
        }
        rc = skv_session_open(data, size, &s, err, sizeof err);
        CHECK_MSG(rc == SKV_OK, "open: %s", err);
        if (rc) break;
        CHECK(skv_session_get_info(s, &si) == SKV_OK && si.has_tokenizer == !old &&
              (old || !memcmp(si.tokenizer, tf1, 8)));
        for (int into = 0; into < 2 && !test_cur_failed; into++) {
            skv_ctx *c = NULL;
            int32_t back[128];
            skv_restore_params rp = {.verify = 1};
            rc = skv_ctx_create(into ? m2 : g_m, NULL, &c);
            if (!rc && (rc = skv_session_restore_segment(s, into ? m2 : g_m, 0, c, &rp, back, 128)))
                snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
            if (into && !old)
                CHECK_MSG(rc == SKV_ERR_MISMATCH && strstr(err, "wrong tokenizer") && c && skv_ctx_n_pos(c) == 0,
                          "another tokenizer: %s '%s'", skv_status_str(rc), err);
            else
                CHECK_MSG(rc == SKV_OK && !memcmp(back, g_kjv, n * sizeof *back), "old %d, into %d: %s %s", old, into,
                          skv_status_str(rc), err);
            skv_ctx_free(c);
        }
        skv_session_free(s);
        s = NULL;
    }
    /* the field without the flag is damage, as the reserved bytes were */
    data[112] = 1;
    uint64_t h = XXH3_64bits(data, 120);
    for (int i = 0; i < 8; i++) data[120 + i] = (uint8_t)(h >> (8 * i));
    CHECK(skv_session_open(data, size, &s, err, sizeof err) == SKV_ERR_FORMAT && strstr(err, "reserved"));
    free(data);
    skv_model_free(m2);
}

static void api_misuse(void)
{
    NEED_KJV();
    skv_encoder *e = NULL;
    skv_encoder_params p = enc_params(SKV_CODEC_MODEL, 32, 1, 0);
    skv_encoder_stats st;
    uint8_t *data = NULL;
    size_t size = 0;
    int32_t bad[2] = {5, 0};
    char err[256];

    CHECK_EQ_INT(skv_encoder_create(NULL, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, NULL, NULL, 0), SKV_ERR_INVALID_ARG);
    p.codec = 1000; /* unknown (2..8: quantized-KV codecs, tests/test_session_kv.c; 9: cm; 10..: pred and others) */
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG);
    CHECK(e == NULL);
    p.codec = -1;
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG);
    p = enc_params(SKV_CODEC_MODEL, 32, 1, 0);
    p.total_bits = 15;
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG);
    p.total_bits = 29;
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_ERR_INVALID_ARG);
    p = enc_params(SKV_CODEC_MODEL, -1, 1, 0);
    CHECK(skv_encoder_create(g_m, &p, &e, NULL, 0) < 0 && e == NULL);
    p = enc_params(SKV_CODEC_MODEL, 32, -3, 0);
    CHECK(skv_encoder_create(g_m, &p, &e, NULL, 0) < 0 && e == NULL);
    skv_encoder_free(NULL);
    CHECK(skv_encoder_last_error(NULL) != NULL);
    CHECK(skv_encoder_ctx(NULL) == NULL);
    CHECK_EQ_INT(skv_encoder_append(NULL, g_kjv, 1, NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_encoder_get_stats(NULL, &st), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_encoder_finish(NULL, &data, &size), SKV_ERR_INVALID_ARG);

    CHECK_EQ_INT(skv_encoder_create(g_m, NULL, &e, NULL, 0), SKV_OK); /* NULL params: defaults */
    skv_encoder_free(e);
    p = enc_params(SKV_CODEC_MODEL, 32, 1, 0);
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, NULL, 0), SKV_OK);
    CHECK(skv_encoder_ctx(e) != NULL);
    int r1 = skv_encoder_append(e, NULL, 1, NULL);
    int r2 = skv_encoder_get_stats(e, NULL);
    bad[1] = -1;
    int r3 = skv_encoder_append(e, bad, 2, NULL);
    int msg3 = strstr(skv_encoder_last_error(e), "vocabulary") != NULL;
    bad[1] = g_info.n_vocab;
    int r4 = skv_encoder_append(e, bad, 2, NULL);
    int r5 = skv_encoder_append(e, g_kjv, 10, NULL); /* refused appends changed nothing */
    int r6 = skv_encoder_finish(e, NULL, &size);
    int r7 = skv_encoder_finish(e, &data, NULL);
    int r8 = skv_encoder_finish(e, &data, &size);
    int r9 = skv_encoder_append(e, g_kjv, 1, NULL);
    int msg9 = strstr(skv_encoder_last_error(e), "finished") != NULL;
    int r10 = skv_encoder_finish(e, &data, &size);
    skv_encoder_get_stats(e, &st);
    skv_encoder_free(e);
    CHECK_EQ_INT(r1, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r2, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r3, SKV_ERR_INVALID_ARG);
    CHECK(msg3);
    CHECK_EQ_INT(r4, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r5, SKV_OK);
    CHECK_EQ_INT(r6, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r7, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(r8, SKV_OK);
    CHECK_EQ_INT(r9, SKV_ERR_INVALID_ARG);
    CHECK(msg9);
    CHECK_EQ_INT(r10, SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(st.n_tokens, 10);

    /* reader */
    skv_session *s = NULL;
    skv_session_info si;
    skv_ctx *c = NULL, *c_small = NULL, *c_other = NULL;
    skv_model *m2 = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    int32_t tok[32];
    skv_restore_params rp = {.verify = 1};
    CHECK_EQ_INT(skv_session_open(NULL, 5, &s, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_open(data, size, NULL, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_open(NULL, 0, &s, err, sizeof err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_session_open(data, size, &s, NULL, 0), SKV_OK); /* no error buffer: fine */
    skv_session_free(NULL);
    CHECK_EQ_INT(skv_session_get_info(NULL, &si), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_get_info(s, NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_segment_info(NULL, 0, NULL, NULL, NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_segment_info(s, 1, NULL, NULL, NULL), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_session_segment_info(s, 0, NULL, NULL, NULL), SKV_OK);
    cp.n_ctx = 32;
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    cp.n_ctx = 9;
    int rc = skv_ctx_create(g_m, &cp, &c_small);
    if (!rc) rc = skv_model_load(g_gguf, NULL, &m2, err, sizeof err);
    if (!rc) rc = skv_ctx_create(m2, NULL, &c_other);
    int q[10];
    q[0] = skv_session_restore_segment(NULL, g_m, 0, c, &rp, tok, 32);
    q[1] = skv_session_restore_segment(s, NULL, 0, c, &rp, tok, 32);
    q[2] = skv_session_restore_segment(s, g_m, 0, NULL, &rp, tok, 32);
    q[3] = skv_session_restore_segment(s, g_m, 0, c, &rp, NULL, 32);
    q[4] = skv_session_restore_segment(s, g_m, 1, c, &rp, tok, 32);
    q[5] = skv_session_restore_segment(s, g_m, 0, c, &rp, tok, 9);        /* buffer too small */
    q[6] = skv_session_restore_segment(s, g_m, 0, c_small, &rp, tok, 32); /* context too small */
    q[7] = skv_session_restore_segment(s, g_m, 0, c_other, &rp, tok, 32); /* ctx of another model */
    q[8] = skv_session_restore_segment(s, g_m, 0, c, NULL, tok, 32);              /* NULL params: fine */
    q[9] = skv_session_restore_segment(s, m2, 0, c_other, &rp, tok, 32);  /* same weights, own ctx */
    skv_restore_params bad_p[4] = {{.draft = -1}, {.draft = SKV_DRAFT_NGRAM + 1}, {.draft_max = -1}, {.draft_max = 257}};
    int qd[4];
    for (int k = 0; k < 4; k++) qd[k] = skv_session_restore_segment(s, g_m, 0, c, &bad_p[k], tok, 32);
    skv_ctx_free(c);
    skv_ctx_free(c_small);
    skv_ctx_free(c_other);
    skv_model_free(m2);
    skv_session_free(s);
    free(data);
    CHECK_EQ_INT(rc, SKV_OK);
    CHECK_EQ_INT(q[0], SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(q[1], SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(q[2], SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(q[3], SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(q[4], SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(q[5], SKV_ERR_RANGE);
    CHECK_EQ_INT(q[6], SKV_ERR_RANGE);
    CHECK_EQ_INT(q[7], SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(q[8], SKV_OK);
    CHECK_EQ_INT(q[9], SKV_OK);
    for (int k = 0; k < 4; k++) CHECK_EQ_INT(qd[k], SKV_ERR_INVALID_ARG);
    CHECK(!memcmp(tok, g_kjv, 10 * sizeof *tok));
}

/* skip_entropy drops only the reported cross-entropy: the same file, the same coded bits. */
static void skip_entropy_changes_only_the_report(void)
{
    NEED_KJV();
    skv_encoder_params p = enc_params(SKV_CODEC_MODEL, 256, 1, 1);
    skv_encoder_stats a, b;
    uint8_t *da = NULL, *db = NULL;
    size_t na = 0, nb = 0, n = g_kjv_n < 600 ? g_kjv_n : 600;
    SUB(encode(g_kjv, n, &p, 0, &da, &na, &a));
    p.skip_entropy = 1;
    SUB(encode(g_kjv, n, &p, 0, &db, &nb, &b));
    CHECK(na == nb && !memcmp(da, db, na));
    CHECK(a.model_bits > 0 && b.model_bits == 0);
    CHECK(a.coded_bits == b.coded_bits && a.n_model_coded == b.n_model_coded);
    free(da);
    free(db);
}

/* ---- setup -------------------------------------------------------------------------- */

#define CHECK_EQ_STR0(msg) CHECK_MSG((msg)[0] == 0, "message left after a success: '%s'", (msg))

/* ---- the error convention ---------------------------------------------------------- */

typedef struct {
    const skv_session *s;
    uint32_t seg; /* a segment index: out of range -> every call fails */
    int problems;
} ses_err_arg;

static void *ses_err_thread(void *a_)
{
    ses_err_arg *a = a_;
    for (int i = 0; i < 2000; i++) {
        uint32_t nt;
        int rc = skv_session_segment_info(a->s, a->seg, &nt, NULL, NULL);
        const char *msg = skv_session_last_error(a->s);
        a->problems += rc == SKV_OK ? msg[0] != 0 : strstr(msg, "out of range") == NULL;
    }
    return NULL;
}

/* Every call returns a status; the message is the handle's last error (set on failure,
 * "" after a success), per thread for shared handles; creation failures say why in err. */
static void errors_one_convention(void)
{
    if (!g_m) SKIP("no model");
    int32_t tok[40], bad_tok[1] = {-3}, back[40];
    for (int i = 0; i < 40; i++) tok[i] = (int32_t)(1 + (i * 37) % (g_info.n_vocab - 1));
    CHECK(!strcmp(skv_status_name(SKV_ERR_FORMAT), "SKV_ERR_FORMAT") && !strcmp(skv_status_name(SKV_OK), "SKV_OK"));
    CHECK(!strcmp(skv_status_name(SKV_ERR_INTERNAL), "SKV_ERR_INTERNAL") && !strcmp(skv_status_name(-99), "SKV_ERR_UNKNOWN"));
    /* creation failure: a message in err */
    skv_encoder_params p = enc_params(77, 64, 1, 0);
    skv_encoder *e = NULL;
    char err[256] = "";
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err, "codec") != NULL, "'%s'", err);
    p = enc_params(SKV_CODEC_Q8, 64, 1, 0);
    p.kv_quant = "tq3";
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, err, sizeof err), SKV_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err, "kv_quant") != NULL, "'%s'", err);
    /* encoder: set on failure, cleared by the next success */
    p = enc_params(SKV_CODEC_MODEL, 64, 1, 0);
    CHECK_EQ_INT(skv_encoder_create(g_m, &p, &e, err, sizeof err), SKV_OK);
    CHECK_EQ_INT(skv_encoder_append(e, bad_tok, 1, NULL), SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_encoder_last_error(e), "vocabulary") != NULL);
    CHECK_EQ_INT(skv_encoder_append(e, tok, 40, NULL), SKV_OK);
    CHECK_EQ_STR0(skv_encoder_last_error(e));
    uint8_t *data = NULL;
    size_t size = 0;
    skv_session *s = NULL;
    CHECK_EQ_INT(skv_encoder_finish(e, &data, &size), SKV_OK);
    skv_encoder_free(e);
    CHECK_EQ_INT(skv_session_open(data, size, &s, err, sizeof err), SKV_OK);
    /* session: per thread */
    CHECK_EQ_INT(skv_session_segment_info(s, 5, NULL, NULL, NULL), SKV_ERR_INVALID_ARG);
    CHECK(strstr(skv_session_last_error(s), "out of range") != NULL);
    pthread_t th[2];
    ses_err_arg a[2] = {{.s = s, .seg = 9}, {.s = s, .seg = 0}};
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, ses_err_thread, &a[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK_MSG(a[0].problems == 0 && a[1].problems == 0, "%d / %d", a[0].problems, a[1].problems);
    CHECK(strstr(skv_session_last_error(s), "out of range") != NULL); /* this thread's own, untouched */
    /* a restore reports on the context it fills */
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    cp.n_ctx = 64;
    CHECK_EQ_INT(skv_ctx_create(g_m, &cp, &c), SKV_OK);
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, NULL, back, 10), SKV_ERR_RANGE);
    CHECK(strstr(skv_ctx_last_error(c), "too small") != NULL);
    CHECK_EQ_INT(skv_session_restore_segment(s, g_m, 0, c, NULL, back, 40), SKV_OK);
    CHECK_EQ_STR0(skv_ctx_last_error(c));
    CHECK_EQ_INT(skv_prefill(c, bad_tok, 1, SKV_LOGITS_NONE, NULL), SKV_ERR_INVALID_ARG);
    CHECK(skv_ctx_last_error(c)[0] != 0);
    CHECK_EQ_INT(skv_ctx_truncate(c, 0), SKV_OK);
    CHECK_EQ_STR0(skv_ctx_last_error(c));
    skv_ctx_free(c);
    skv_session_free(s);
    free(data);
}

static void load_assets(void)
{
    char err[512];
    size_t len = 0;
    /* stories260K (../shared) when present; else the bundled model, so a fresh clone
     * still runs the round trips (the .bin-form test skips) */
    if (!test_stories_path(g_gguf, sizeof g_gguf, "stories260K.gguf")) {
        const char *b = getenv("SEQKV_BUILD");
        if (b && strstr(b, "san")) return; /* 4M-parameter model under sanitizers: too slow; skip */
        snprintf(g_gguf, sizeof g_gguf, "models/kjv-4m.gguf");
    } else {
        test_stories_path(g_bin, sizeof g_bin, "stories260K.bin");
    }
    if (skv_model_load(g_gguf, NULL, &g_m, err, sizeof err)) {
        fprintf(stderr, "cannot load %s: %s\n", g_gguf, err);
        g_m = NULL;
        return;
    }
    skv_model_get_info(g_m, &g_info);
    if (system("command -v bible >/dev/null 2>&1") == 0) {
        char *text = run_cmd("bible -f 'Gen1:1-Gen3:24' 2>/dev/null", &len);
        if (text) g_kjv = tokenize(text, len, &g_kjv_n);
        else snprintf(g_kjv_why, sizeof g_kjv_why, "`bible -f 'Gen1:1-Gen3:24'` failed");
        free(text);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/corpus/stories260K_samples.txt", test_shared_dir() ? test_shared_dir() : "/nonexistent");
    char *text = slurp(path, &len);
    if (text) g_sto = tokenize(text, len < 12000 ? len : 12000, &g_sto_n); /* ~3,000 tokens */
    free(text);
}

int main(void)
{
    TEST_BEGIN("test_session");
    load_assets();
    RUN(roundtrip_model_kjv_enc1_dec2);
    RUN(roundtrip_model_kjv_enc2_dec1);
    RUN(roundtrip_tokens_kjv_enc2_dec1);
    RUN(roundtrip_tokens_kjv_enc1_dec2);
    RUN(roundtrip_stories_both_codecs);
    RUN(roundtrip_full_context_scalar_restore);
    RUN(file_bytes_independent_of_chunking_and_threads);
    RUN(restore_with_llama2c_form);
    RUN(segmented_boundaries_small_ctx);
    RUN(unsegmented_overflow_is_range);
    RUN(model_codec_overhead_kjv);
    RUN(model_codec_overhead_stories);
    RUN(model_codec_total_bits);
    RUN(incremental_greedy_loop);
    RUN(speculative_restore_matches_token_by_token);
    RUN(progress_is_monotone_and_complete);
    RUN(empty_session);
    RUN(hostile_truncations);
    RUN(hostile_bit_flips);
    RUN(hostile_bit_flips_rechecksummed);
    RUN(hostile_random_bytes);
    RUN(hostile_absurd_counts);
    RUN(hostile_tokens_payloads);
    RUN(hostile_model_payload_length);
    RUN(wrong_model_is_refused);
    RUN(wrong_tokenizer_is_refused);
    RUN(api_misuse);
    RUN(skip_entropy_changes_only_the_report);
    RUN(errors_one_convention);
    skv_model_free(g_m);
    free(g_kjv);
    free(g_sto);
    TEST_END();
}
