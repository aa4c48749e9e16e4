/* Fuzz target for .skv sessions (src/container/session.c, docs/format.md).
 *
 * Input: one mode byte, then the file.
 *   mode bit 0: recompute the header checksum and the checksum of every segment record
 *               that fits, so that mutations get past the checksums to the structural
 *               checks, the payload decoders and the restore
 *   mode bit 1: write the loaded model's fingerprint and vocabulary size into the header,
 *               and its tokenizer's fingerprint where the header records one (flags bit
 *               2), then re-checksum it, so that restore gets past the model check
 *   mode bits 2-3: draft_max of the speculative restore: automatic, 1, 3, 256
 *   mode bit 4: open only (no restore): fast, for the structural checks
 * Checks (abort on violation):
 * - skv_session_open accepts, or rejects with a non-empty message; what it accepts is
 *   consistent (segment counts add up, codec known, one segment unless segmented);
 * - with the fuzzing model fuzz/models/tiny.gguf ($SEQKV_FUZZ_SESSION_MODEL overrides), every
 *   segment (at most MAX_TOKENS in all, each at most CTX) is restored twice: token by token without
 *   verification, and speculatively with verification. Differential oracle: the
 *   speculative decoder must fail exactly when the token-by-token one does (same status),
 *   and otherwise give the same tokens, succeeding iff the regenerated KV matches the
 *   stored digest (else SKV_ERR_MISMATCH). Restored tokens are in the vocabulary and the
 *   context holds exactly the segment's positions.
 * Without the model only skv_session_open is exercised.
 * The KV codecs (2..8, pred and kvtc) are also decoded without any model (skv_session_restore_kv,
 * with verification, whatever the mode): it fails with a known status and a message, or
 * returns tokens in the vocabulary; a second decode gives the same bits. The other codecs
 * have no KV description (SKV_ERR_UNSUPPORTED).
 *
 * Corpus (fuzz/corpus/session, each file = mode byte + file): valid_* are files of both
 * codecs written by `seqkv compress` (KJV Gen 1:1, Gen 3:1, a stories sentence) and by the
 * encoder API (segmented with n_ctx 16 or 8, total_bits 16 and 28, one token, no token);
 * fix_* are crafted from them (payload shortened or extended, digest, total_bits and count
 * fields changed) for mode 1, which recomputes the checksums; fix_model_payload_minus1/3
 * decode silently to other tokens without verification and are caught by it.
 * valid_kv_* are stories260K files of the quantized-KV codecs (f16 q8 q4 tq2 tq3 tq4, kvq
 * k=tq4,v=tq2p,seed=3), openonly_kv_kjv_tq3 one of the bundled KJV model; fix_kv_* are
 * crafted from valid_kv_tq3 (sub-header sizes, schemes, geometry, codec id, a KV byte, a
 * NaN norm, the token frame). Those were made with stories260K (the restores ran it until
 * 2026-12-02): under the tiny model their model-coded segments decode to other tokens and
 * fail verification, the rest of each input is read as before. tiny_* are the tiny
 * model's (written by the harness itself: FUZZ_SESSION_SEEDS=DIR, fuzz/models/make_seeds.sh):
 * every codec but cmvd, one and several segments, verified success, a digest mismatch;
 * tiny_tok_* the same files written since the header records the tokenizer's fingerprint
 * (flags bit 2, 2026-12-05; the tiny_* ones predate it and keep the older header).
 * rev1_cmv_* are the tiny_cmv_* files of before cmv's model revision 2 (docs/coder.md 4.9),
 * rev2_cmv_* and rev2_tok_cmv_* those of revision 2 (until revision 3, 4.10), kept under
 * names make_seeds.sh does not rewrite: their segments decode under revisions 1 and 2.
 * kvtc sessions are given the harness's calibration of the model (tests/kvtc_fixture.h,
 * deterministic: the tiny_kvtc_* seeds name it); one naming another is restored without
 * it and must fail with SKV_ERR_INVALID_ARG and a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "seqkv.h"
#include "core/util.h"
#include "../tests/kvtc_fixture.h"

#define HDR 128
#define SEGHDR 32
#define CTX 128        /* positions of the restore context: longer segments are refused (RANGE) */
#define MAX_TOKENS 48  /* restore at most this many tokens per input: bounds the work (two model
                        * decodes per token) so the target runs at hundreds of inputs a second */
#define MAX_INPUT (1 << 16)

static skv_model *g_model;
static skv_ctx *g_ctx;
static uint8_t g_fp[16], g_tokfp[16];
static int g_init;
static uint8_t *g_cal;  /* a kvtc calibration of the model (kvtc_fixture_cal: 32 ids, seed 1) */
static size_t g_cal_len;
static int g_no_cal;    /* this input is a kvtc session without its calibration: restores say so */

static void write_seeds(const char *dir);

/* The model the restores run: $SEQKV_FUZZ_SESSION_MODEL, else the fuzzing model
 * fuzz/models/tiny.gguf (2 layers, n_embd 16: the restores' forward costs little; the
 * tiny_* seeds are tied to its fingerprint). */
static void load_model(void)
{
    const char *env = getenv("SEQKV_FUZZ_SESSION_MODEL");
    g_init = 1;
    if (skv_model_load(env && *env ? env : "fuzz/models/tiny.gguf", NULL, &g_model, NULL, 0) != SKV_OK) g_model = NULL;
    if (!g_model) return;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = CTX;
    if (skv_ctx_create(g_model, &cp, &g_ctx) != SKV_OK || skv_model_fingerprint(g_model, g_fp) != SKV_OK ||
        skv_model_tokenizer_fingerprint(g_model, g_tokfp) != SKV_OK) {
        skv_ctx_free(g_ctx);
        skv_model_free(g_model);
        g_ctx = NULL;
        g_model = NULL;
        return;
    }
    g_cal = kvtc_fixture_cal(g_model, 32, 1, &g_cal_len);
    if (getenv("FUZZ_SESSION_SEEDS")) write_seeds(getenv("FUZZ_SESSION_SEEDS"));
}

static void fix_checksums(uint8_t *d, size_t size)
{
    size_t pos = HDR;
    if (size < HDR) return;
    skv_wr64(d + 120, XXH3_64bits(d, 120));
    while (size - pos >= SEGHDR + 8) {
        uint64_t plen = skv_rd64(d + pos + 8);
        if (plen > size - pos - SEGHDR - 8) return;
        skv_wr64(d + pos + SEGHDR + plen, XXH3_64bits(d + pos, SEGHDR + (size_t)plen));
        pos += SEGHDR + (size_t)plen + 8;
    }
}

static int known_status(int rc)
{
    return rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH || rc == SKV_ERR_RANGE || rc == SKV_ERR_UNSUPPORTED ||
           rc == SKV_ERR_NOMEM || (g_no_cal && rc == SKV_ERR_INVALID_ARG);
}

static void restore_all(const skv_session *s, const skv_session_info *si, int draft_max)
{
    static int32_t tok1[CTX], tok2[CTX];
    uint64_t budget = MAX_TOKENS;
    for (uint32_t i = 0; i < si->n_segments; i++) {
        uint32_t nt = 0;
        uint8_t stored[16], got[16];
        skv_session_segment_info(s, i, &nt, NULL, stored);
        if (nt > budget) return;
        budget -= nt;
        skv_restore_params p1 = {.verify = 0, .draft = SKV_DRAFT_NONE};
        skv_restore_params p2 = {.verify = 1, .draft = SKV_DRAFT_NGRAM, .draft_max = draft_max};
        int rc1 = skv_session_restore_segment(s, g_model, i, g_ctx, &p1, tok1, CTX);
        int match = 0;
        if (rc1 == SKV_OK) {
            if (skv_ctx_n_pos(g_ctx) != (int)nt || skv_ctx_kv_digest(g_ctx, (int)nt, got) != SKV_OK) abort();
            for (uint32_t k = 0; k < nt; k++)
                if (tok1[k] < 0 || (uint32_t)tok1[k] >= si->n_vocab) abort();
            match = !memcmp(got, stored, 16);
        } else if (!known_status(rc1) || !skv_ctx_last_error(g_ctx)[0]) { /* a failure says why */
            abort();
        }
        if (rc1 == SKV_OK && skv_ctx_last_error(g_ctx)[0]) abort(); /* a success leaves no message */
        int rc2 = skv_session_restore_segment(s, g_model, i, g_ctx, &p2, tok2, CTX);
#ifdef FUZZ_SESSION_VERBOSE /* outcomes, to see what a corpus exercises */
        fprintf(stderr, "  segment %u (%u tokens): token by token %d, speculative+verify %d %s\n", i, nt, rc1, rc2,
                skv_ctx_last_error(g_ctx));
#endif
        if (rc1 != SKV_OK) {
            if (rc2 != rc1) abort(); /* both decoders fail at the same place */
            return;
        }
        if (match ? rc2 != SKV_OK : rc2 != SKV_ERR_MISMATCH) abort();
        if (memcmp(tok1, tok2, nt * sizeof *tok1)) abort(); /* the decoded stream is draft-independent */
        if (rc2 != SKV_OK) return;
        if (skv_ctx_n_pos(g_ctx) != (int)nt) abort();
    }
}

/* Codecs whose payload holds the KV (skv_session_segment_kv_info describes it). */
static int kv_codec(int codec)
{
    return (codec >= SKV_CODEC_F16 && codec <= SKV_CODEC_KVQ) || codec == SKV_CODEC_PRED || codec == SKV_CODEC_KVTC;
}

/* Model-free decoding of every segment of a quantized-KV session; the other codecs have
 * no KV description (SKV_ERR_UNSUPPORTED). */
static void restore_kv_all(const skv_session *s, const skv_session_info *si)
{
    static int32_t tok[1 << 16];
    for (uint32_t i = 0; i < si->n_segments; i++) {
        skv_session_kv_info ki;
        uint32_t nt = 0;
        int krc = skv_session_segment_kv_info(s, i, &ki);
        if (!kv_codec(si->codec)) {
            if (krc != SKV_ERR_UNSUPPORTED) abort();
            return;
        }
        if (krc != SKV_OK) abort();
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        size_t nf = (size_t)ki.n_layer * 2 * (size_t)ki.n_head_kv * nt * (size_t)ki.head_dim;
        /* per-vector codecs: a fixed size per position; pred, kvtc: the mean, rounded up */
        int mean = si->codec == SKV_CODEC_PRED || si->codec == SKV_CODEC_KVTC;
        uint64_t lo = mean ? nt * (ki.position_bytes - 1) + 1 : nt * ki.position_bytes;
        if (nt == 0 || ki.position_bytes == 0 || ki.kv_bytes < lo || ki.kv_bytes > nt * ki.position_bytes ||
            nt > sizeof tok / sizeof *tok)
            abort();
        if (nf > ((size_t)1 << 24)) continue; /* speed: bounded by the input size anyway */
        float *a = malloc(nf * sizeof *a), *b = malloc(nf * sizeof *b);
        if (!a || !b) abort();
        int rc = skv_session_restore_kv(s, i, a, nf, tok, nt, 1);
        /* a failure says why; a success clears the message */
        if (rc != SKV_OK && (!known_status(rc) || !skv_session_last_error(s)[0])) abort();
        if (rc == SKV_OK && skv_session_last_error(s)[0]) abort();
        for (uint32_t k = 0; rc == SKV_OK && k < nt; k++)
            if (tok[k] < 0 || (uint32_t)tok[k] >= si->n_vocab) abort();
        int rc2 = skv_session_restore_kv(s, i, b, nf, tok, nt, 0);
        if (rc == SKV_OK && (rc2 != SKV_OK || memcmp(a, b, nf * sizeof *a))) abort(); /* deterministic */
        free(a);
        free(b);
    }
}

/* ---- seeds tied to the model ($FUZZ_SESSION_SEEDS=DIR writes them: fuzz/models/make_seeds.sh) */

static void write_seed(const char *dir, const char *name, uint8_t mode, const uint8_t *d, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (fputc(mode, f) == EOF || fwrite(d, 1, n, f) != n) fprintf(stderr, "fuzz_session: cannot write %s\n", path);
    fclose(f);
}

/* The file of tokens tok[0..n) under codec name (n_ctx > 0: segmented at n_ctx). */
static int encode(const char *codec, const int32_t *tok, size_t n, int n_ctx, unsigned total_bits, uint8_t **d,
                  size_t *size)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = skv_codec_parse(codec);
    ep.n_ctx = n_ctx > 0 ? n_ctx : CTX;
    ep.segment = n_ctx > 0;
    ep.total_bits = total_bits;
    ep.n_threads = 1;
    if (ep.codec == SKV_CODEC_KVQ) ep.kv_quant = "k=tq4,v=tq2p,seed=3";
    if (ep.codec == SKV_CODEC_KVTC) ep.kvtc_cal = g_cal, ep.kvtc_cal_bytes = g_cal_len;
    char err[256] = "";
    int rc = skv_encoder_create(g_model, &ep, &e, err, sizeof err);
    if (!rc) rc = skv_encoder_append(e, tok, n, NULL);
    if (!rc) rc = skv_encoder_finish(e, d, size);
    if (rc) fprintf(stderr, "fuzz_session: no %s seed (%d %s)\n", codec, rc, e ? skv_encoder_last_error(e) : err);
    skv_encoder_free(e);
    return rc;
}

/* tiny_<codec>_<seq>: every codec the harness restores (cmvd needs a dictionary the restore
 * is not given) over a 12-token text, and segmented (20 tokens, n_ctx 8); for tokens and
 * model also one token, a repeating text (n-gram drafts accepted) and total_bits 16; and
 * model-codec files damaged after encoding for mode 1 (checksums recomputed): a flipped
 * digest (decodes, then SKV_ERR_MISMATCH) and a flipped payload bit. */
static void write_seeds(const char *dir)
{
    static const char *const codecs[] = {"tokens", "model", "f16", "q8", "q4", "tq2", "tq3", "tq4", "kvq",
                                         "cm", "pred", "cmv", "kvtc"};
    skv_model_info mi;
    int32_t a[20], rep[30];
    uint8_t *d = NULL;
    size_t n = 0;
    char name[128];
    skv_model_get_info(g_model, &mi);
    a[0] = rep[0] = 1;
    for (int i = 1; i < 20; i++) a[i] = (int32_t)(3 + (i * 37 + 11) % (mi.n_vocab - 3));
    for (int i = 1; i < 30; i++) rep[i] = (int32_t)(3 + (i % 5) * 41);
    for (size_t c = 0; c < sizeof codecs / sizeof *codecs; c++) {
        const char *cn = codecs[c];
        int tm = !strcmp(cn, "tokens") || !strcmp(cn, "model");
        struct { const char *seq; const int32_t *tok; size_t n; int n_ctx; unsigned tb; int on; } v[] = {
            {"a", a, 12, 0, 0, 1}, {"seg", a, 20, 8, 0, 1}, {"one", a, 1, 0, 0, tm}, {"rep", rep, 30, 0, 0, tm},
            {"tb16", a, 12, 0, 16, !strcmp(cn, "model")}};
        for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
            if (!v[k].on || encode(cn, v[k].tok, v[k].n, v[k].n_ctx, v[k].tb, &d, &n)) continue;
            snprintf(name, sizeof name, "tiny_%s_%s", cn, v[k].seq);
            write_seed(dir, name, 0, d, n);
            if (!strcmp(cn, "model") && !strcmp(v[k].seq, "a") && n > HDR + SEGHDR + 8) {
                d[HDR + 16] ^= 1; /* the segment's kv_digest */
                write_seed(dir, "tiny_model_a_digest_flip", 1, d, n);
                d[HDR + 16] ^= 1;
                d[n - 9] ^= 0x10; /* the payload's last byte */
                write_seed(dir, "tiny_model_a_payload_flip", 1, d, n);
            }
            free(d);
            d = NULL;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int draft_max[4] = {0, 1, 3, 256};
    skv_session *s = NULL;
    skv_session_info si;
    char err[512];
    uint8_t *d;
    if (!g_init) load_model();
    if (size < 1 || size - 1 > MAX_INPUT) return 0;
    uint8_t mode = data[0];
    size_t n = size - 1;
    if (!(d = malloc(n ? n : 1))) return 0;
    if (n) memcpy(d, data + 1, n);
    if ((mode & 2) && g_model && n >= HDR) {
        skv_model_info mi;
        skv_model_get_info(g_model, &mi);
        memcpy(d + 48, g_fp, 16);
        if (d[16] & 4) memcpy(d + 112, g_tokfp, 8);
        for (int i = 0; i < 4; i++) d[36 + i] = (uint8_t)((uint32_t)mi.n_vocab >> (8 * i));
        skv_wr64(d + 120, XXH3_64bits(d, 120));
    }
    if (mode & 1) fix_checksums(d, n);
    err[0] = 0;
    int rc = skv_session_open(d, n, &s, err, sizeof err);
    free(d); /* the session keeps its own copy */
#ifdef FUZZ_SESSION_VERBOSE
    fprintf(stderr, "mode %u, %zu bytes: open %d %s\n", mode, n, rc, rc ? err : "");
#endif
    if (rc != SKV_OK) {
        if (!known_status(rc) || !skv_session_last_error(s)[0]) abort();
        return 0;
    }
    if (skv_session_get_info(s, &si) != SKV_OK) abort();
    uint64_t total = 0;
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        uint64_t pb = 0;
        if (skv_session_segment_info(s, i, &nt, &pb, NULL) != SKV_OK) abort();
        if (nt == 0 || nt > si.n_ctx || pb > n) abort();
        total += nt;
    }
    if (total != si.n_tokens || !skv_codec_name(si.codec) ||
        (!si.segmented && si.n_segments > 1) || si.file_bytes != n)
        abort();
    /* kvtc: the harness's calibration, which the tiny_kvtc_* seeds name (another: MISMATCH) */
    g_no_cal = si.codec == SKV_CODEC_KVTC;
    if (g_no_cal && g_cal) {
        int crc = skv_session_set_kvtc_cal(s, g_cal, g_cal_len);
        if (crc != SKV_OK && crc != SKV_ERR_MISMATCH) abort();
        g_no_cal = crc != SKV_OK;
    }
    restore_kv_all(s, &si);
    if (g_model && !(mode & 16)) restore_all(s, &si, draft_max[(mode >> 2) & 3]);
    skv_session_free(s);
    return 0;
}
