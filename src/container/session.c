/* .skv sessions: the encoder (tokens -> file) and the reader/restorer (file -> tokens
 * + bit-exact KV). Byte layout in docs/format.md; summary:
 *
 *   header (128 bytes)                       segment (repeated n_segments times)
 *   +--------------------------------+       +----------------------------------+
 *   | magic 89 'SKV' 0D 0A 1A 0A     |       | "SKVS" | u32 n_tokens            |
 *   | u16 version | u16 header size  |       | u64 payload bytes                |
 *   | u32 codec | u32 flags          |       | u8 kv_digest[16] (XXH3-128)      |
 *   | u32 n_segments | u64 n_tokens  |       | payload                          |
 *   | u32 n_ctx | u32 n_vocab        |       | u64 XXH3-64(segment header+payload)|
 *   | u32 total_bits | i32 bos       |       +----------------------------------+
 *   | u8 fingerprint[16]             |
 *   | char model_name[48] | 8 zero   |       payload, codec tokens: zstd(LEB128 ids)
 *   | u64 XXH3-64(bytes 0..119)      |       payload, codec model: range-coded stream:
 *   +--------------------------------+         first id in ceil(log2 V) raw bits, then
 *                                              each id under probq(logits of the previous)
 *                                            payload, quantized-KV codecs (2..8):
 *                                              KV sub-header (src/kvcodec.h) | zstd(LEB128
 *                                              ids) | per-vector encoded KV, canonical order
 *                                            payload, codec cm (9): range-coded stream of the
 *                                              ids under the context-mixing model (coder/cmcodec.c)
 *                                            codecs cmv / cmvd (20, 21): the same model with the
 *                                              vocabulary's side information (coder/cmvcodec.c)
 * Every segment is an independent KV cache: it starts from an empty context. */
#include <stdarg.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "core/util.h"
#include "quant/quant.h"
#include "engine/engine.h"
#include "container/codecs.h"

/* ---- digests ----------------------------------------------------------------------- */

/* XXH3-128 (canonical bytes) of n floats as little-endian binary32: the digest
 * skv_ctx_kv_digest computes over a cache, here over a canonical-order buffer. */
int skv_digest_f32(const float *x, size_t n, uint8_t out[16])
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return SKV_ERR_NOMEM;
    XXH3_128bits_reset(st);
    skv_digest_f32_update(st, x, n);
    skv_digest_finish(st, out);
    return SKV_OK;
}


/* ---- reader ------------------------------------------------------------------------ */

int skv_session_bad(skv_err *err, const char *what)
{
    return skv_fail(err, SKV_ERR_FORMAT, "not a valid .skv file: %s", what);
}

/* The header's fields into s->info (magic, version, size and checksum verified first). */
static int read_header(skv_session *s, uint32_t *flags, skv_err *err)
{
    const uint8_t *h = s->data;
    skv_session_info *in = &s->info;
    if (s->size < 8 || memcmp(h, SKV_MAGIC, 8)) return skv_session_bad(err, "bad magic (not a seqkv session)");
    if (s->size < HDR_SIZE) return skv_session_bad(err, "truncated header");
    if (skv_rd16(h + 8) != SKV_VERSION)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, ".skv version %u is not supported (this build reads version %d)",
                        skv_rd16(h + 8), SKV_VERSION);
    if (skv_rd16(h + 10) != HDR_SIZE) return skv_session_bad(err, "unexpected header size");
    if (skv_rd64(h + 120) != XXH3_64bits(h, 120)) return skv_session_bad(err, "header checksum mismatch (corrupt)");
    in->version = SKV_VERSION;
    in->codec = (int)skv_rd32(h + 12);
    *flags = skv_rd32(h + 16);
    in->segmented = (int)(*flags & 1);
    in->kv_cache_type = (*flags & 2) ? SKV_KV_CACHE_F16 : SKV_KV_CACHE_F32;
    in->n_segments = skv_rd32(h + 20);
    in->n_tokens = skv_rd64(h + 24);
    in->n_ctx = skv_rd32(h + 32);
    in->n_vocab = skv_rd32(h + 36);
    in->total_bits = skv_rd32(h + 40);
    in->bos_id = (int32_t)skv_rd32(h + 44);
    memcpy(in->fingerprint, h + 48, 16);
    memcpy(in->model_name, h + 64, 48);
    in->model_name[48] = 0;
    in->has_tokenizer = (*flags & SKV_HDR_TOKENIZER) != 0;
    memcpy(in->tokenizer, h + 112, 8);
    in->file_bytes = s->size;
    return SKV_OK;
}

/* The name is printed by tools: printable bytes, NUL-padded; bytes 112..120 zero unless
 * they hold the tokenizer's fingerprint (flag SKV_HDR_TOKENIZER). */
static int check_name_field(const uint8_t *h, uint32_t flags, skv_err *err)
{
    for (size_t i = 0, end = 0; i < 48; i++) {
        uint8_t ch = h[64 + i];
        if (!ch) end = 1;
        else if (end || ch < 0x20 || ch == 0x7f) return skv_session_bad(err, "model name field is not printable text");
    }
    for (size_t i = 112; i < 120 && !(flags & SKV_HDR_TOKENIZER); i++)
        if (h[i]) return skv_session_bad(err, "reserved header bytes are not zero");
    return SKV_OK;
}

static int parse_header(skv_session *s, skv_err *err)
{
    skv_session_info *in = &s->info;
    uint32_t flags = 0;
    int rc;
    if ((rc = read_header(s, &flags, err)) || (rc = check_name_field(s->data, flags, err))) return rc;
    if (!skv_codec_name(in->codec))
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "unknown codec id %d", in->codec);
    if (flags & ~(3u | SKV_HDR_TOKENIZER)) return skv_session_bad(err, "unknown flags");
    if (in->n_vocab < 1 || in->n_vocab > (1u << 24) || in->n_ctx < 1 || in->n_ctx > (1u << 24))
        return skv_session_bad(err, "vocabulary or context size out of range");
    if (skv_codec_flags(in->codec) & SKV_CODEC_F_MODEL
            ? (in->total_bits < 16 || in->total_bits > 28 || ((uint64_t)1 << in->total_bits) < in->n_vocab)
            : in->total_bits != 0)
        return skv_session_bad(err, "invalid frequency total");
    if (!in->segmented && in->n_segments > 1) return skv_session_bad(err, "several segments in an unsegmented session");
    if (in->n_segments > (s->size - HDR_SIZE) / (SEG_HDR + 8)) return skv_session_bad(err, "segment count exceeds the file");
    if (skv_codec_is_kv(in->codec) && in->n_segments > (s->size - HDR_SIZE) / (SEG_HDR + 8 + SKV_KVC_HDR))
        return skv_session_bad(err, "segment count exceeds the file");
    if (in->n_tokens > (uint64_t)in->n_segments * in->n_ctx) return skv_session_bad(err, "token count exceeds the segments");
    return SKV_OK;
}

static int parse_segments(skv_session *s, skv_err *err)
{
    skv_codec_check_fn check = skv_codec_row_of(s->info.codec)->check; /* the codec's sub-header */
    size_t pos = HDR_SIZE;
    uint64_t total = 0;
    int rc;
    if (!(s->segs = calloc(s->info.n_segments ? s->info.n_segments : 1, sizeof *s->segs)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < s->info.n_segments; i++) {
        const uint8_t *p = s->data + pos;
        seg_view *g = &s->segs[i];
        if (s->size - pos < SEG_HDR + 8 || memcmp(p, SEG_MAGIC, 4)) return skv_session_bad(err, "truncated or missing segment");
        g->n_tokens = skv_rd32(p + 4);
        g->payload_bytes = skv_rd64(p + 8);
        if (g->n_tokens < 1 || g->n_tokens > s->info.n_ctx) return skv_session_bad(err, "segment token count out of range");
        if (g->payload_bytes > s->size - pos - SEG_HDR - 8) return skv_session_bad(err, "segment payload runs past the end");
        size_t len = SEG_HDR + (size_t)g->payload_bytes;
        if (skv_rd64(p + len) != XXH3_64bits(p, len)) {
            char msg[96];
            snprintf(msg, sizeof msg, "segment %u checksum mismatch (corrupt)", i);
            return skv_session_bad(err, msg);
        }
        memcpy(g->digest, p + 16, 16);
        g->payload = p + SEG_HDR;
        if (check && (rc = check(s, i, err))) return rc;
        total += g->n_tokens;
        pos += len + 8;
    }
    if (pos != s->size) return skv_session_bad(err, "unexpected bytes after the last segment");
    if (total != s->info.n_tokens) return skv_session_bad(err, "segment token counts do not add up");
    return SKV_OK;
}

static int skv_session_open_e(const void *data, size_t size, skv_session **out, skv_err *err)
{
    skv_session *s;
    int rc;
    if (!out || (!data && size)) return skv_fail(err, SKV_ERR_INVALID_ARG, "invalid argument");
    *out = NULL;
    if (!(s = calloc(1, sizeof *s)) || !(s->data = malloc(size ? size : 1)) || !(s->err = skv_errbox_create())) {
        skv_session_free(s);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    if (size) memcpy(s->data, data, size);
    s->size = size;
    if ((rc = parse_header(s, err)) || (rc = parse_segments(s, err))) {
        skv_session_free(s);
        return rc;
    }
    *out = s;
    return SKV_OK;
}

int skv_session_open(const void *data, size_t size, skv_session **out, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_session_open_e(data, size, out, &e), err, errcap);
}

void skv_session_free(skv_session *s)
{
    if (!s) return;
    free(s->data);
    free(s->segs);
    skv_errbox_free(s->err);
    skv_kvtc_calib_free(s->tc);
    free(s);
}

const char *skv_session_last_error(const skv_session *s) { return s ? skv_errbox_get(s->err) : "NULL session"; }

/* Every call on a session ends in one of these: "" after a success, else the message. */
static int ses_ok(const skv_session *s)
{
    skv_errbox_clear(s->err);
    return SKV_OK;
}

static int ses_status(const skv_session *s, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int ses_status(const skv_session *s, int status, const char *fmt, ...)
{
    va_list ap;
    if (status == SKV_OK) return ses_ok(s);
    va_start(ap, fmt);
    skv_errbox_vset(s->err, status, fmt, ap);
    va_end(ap);
    return status;
}

int skv_session_get_info(const skv_session *s, skv_session_info *info)
{
    if (!s) return SKV_ERR_INVALID_ARG;
    if (!info) return ses_status(s, SKV_ERR_INVALID_ARG, "get_info: NULL info");
    *info = s->info;
    return ses_ok(s);
}

int skv_session_segment_info(const skv_session *s, uint32_t i, uint32_t *n_tokens, uint64_t *payload_bytes,
                             uint8_t kv_digest[16])
{
    if (!s) return SKV_ERR_INVALID_ARG;
    if (i >= s->info.n_segments)
        return ses_status(s, SKV_ERR_INVALID_ARG, "segment %u out of range (%u segments)", i, s->info.n_segments);
    if (n_tokens) *n_tokens = s->segs[i].n_tokens;
    if (payload_bytes) *payload_bytes = s->segs[i].payload_bytes;
    if (kv_digest) memcpy(kv_digest, s->segs[i].digest, 16);
    return ses_ok(s);
}

static void hex16(const uint8_t *d, char *out)
{
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int skv_session_digest_mismatch(const uint8_t *stored, const uint8_t *got, uint32_t i, const char *what, skv_err *err)
{
    char a[33], b[33];
    hex16(stored, a);
    hex16(got, b);
    return skv_fail(err, SKV_ERR_MISMATCH, "KV verification failed for segment %u: stored digest %s, %s %s", i, a,
                    what, b);
}

int skv_session_check_tokenizer(const skv_session *s, skv_model *m, skv_err *err)
{
    uint8_t tf[16];
    char a[33], b[33];
    if (!s->info.has_tokenizer) return SKV_OK; /* an older file: the model's fingerprint only */
    int rc = skv_model_tokenizer_fingerprint(m, tf);
    if (rc) return skv_fail(err, rc, "cannot fingerprint the model's tokenizer");
    if (!memcmp(tf, s->info.tokenizer, 8)) return SKV_OK;
    for (int i = 0; i < 8; i++) {
        snprintf(a + 2 * i, 3, "%02x", s->info.tokenizer[i]);
        snprintf(b + 2 * i, 3, "%02x", tf[i]);
    }
    return skv_fail(err, SKV_ERR_MISMATCH,
                    "wrong tokenizer: this session was written with model '%s' whose tokenizer (fingerprint %s) is not "
                    "the one of model '%s' (%s): its ids would render to other text; use the model it was written with",
                    s->info.model_name, a, skv_model_info_of(m)->name, b);
}

int skv_session_check_model(const skv_session *s, skv_model *m, skv_err *err)
{
    uint8_t fp[16];
    char a[33], b[33];
    int rc = skv_session_check_tokenizer(s, m, err);
    if (rc) return rc;
    rc = skv_model_fingerprint(m, fp);
    if (rc) return skv_fail(err, rc, "cannot fingerprint the model");
    if (memcmp(fp, s->info.fingerprint, 16) || (uint32_t)skv_model_info_of(m)->n_vocab != s->info.n_vocab) {
        hex16(s->info.fingerprint, a);
        hex16(fp, b);
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "wrong model: this session was written with model '%s' (fingerprint %s), but the model given is '%s' (fingerprint %s)",
                        s->info.model_name, a, skv_model_info_of(m)->name, b);
    }
    return SKV_OK;
}

/* The canonical LEB128 varint at raw[*k] (ids < 2^24 take at most 4 bytes; only the
 * shortest encoding is valid): NULL, or what is wrong with it. */
static const char *read_varint(const uint8_t *raw, size_t raw_len, size_t *k, uint32_t *out)
{
    uint32_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (*k >= raw_len || shift > 21) return "token payload is truncated or has an over-long varint";
        uint8_t byte = raw[(*k)++];
        v |= (uint32_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            if (byte == 0 && shift) return "token payload has a padded (non-canonical) varint";
            *out = v;
            return NULL;
        }
    }
}

/* The n ids of raw[0..raw_len), each < V, and nothing after them. */
static int parse_varints(const uint8_t *raw, size_t raw_len, uint32_t n, uint32_t V, int32_t *tok, skv_err *err)
{
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = 0;
        const char *why = read_varint(raw, raw_len, &k, &v);
        if (why) return skv_session_bad(err, why);
        if (v >= V) return skv_session_bad(err, "token id outside the vocabulary");
        tok[i] = (int32_t)v;
    }
    return k != raw_len ? skv_session_bad(err, "trailing bytes in the token payload") : SKV_OK;
}

int skv_session_decode_tokens(const seg_view *g, uint32_t V, int32_t *tok, skv_err *err)
{
    size_t maxraw = (size_t)g->n_tokens * 5, raw_len;
    unsigned long long content = ZSTD_getFrameContentSize(g->payload, g->payload_bytes);
    uint8_t *raw;
    int rc;
    if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN || content > maxraw ||
        ZSTD_findFrameCompressedSize(g->payload, g->payload_bytes) != g->payload_bytes)
        return skv_session_bad(err, "token payload is not exactly one zstd frame of the expected size");
    if (!(raw = malloc(maxraw))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    raw_len = ZSTD_decompress(raw, maxraw, g->payload, g->payload_bytes);
    if (ZSTD_isError(raw_len) || raw_len != content) rc = skv_session_bad(err, "token payload does not decompress");
    else rc = parse_varints(raw, raw_len, g->n_tokens, V, tok, err);
    free(raw);
    return rc;
}

/* ---- quantized-KV codecs: decoded without the model ---------------------------- */

/* Floats of a KV segment in canonical order (bounded: kv_bytes fits in the file). */
size_t skv_session_kv_floats(const seg_view *g)
{
    const skv_kvc_header *h = &g->kvh;
    return (size_t)h->n_layer * 2 * h->n_head_kv * g->n_tokens * h->head_dim;
}

/* Tokens and decoded KV (skv_session_kv_floats(g) floats) of a segment of a codec storing KV. */
int skv_session_decode_kv(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                          int32_t *tok, skv_err *err)
{
    return skv_codec_row_of(s->info.codec)->decode_kv(s, g, model_free, kv, kv_cap, tok, err);
}

int skv_session_segment_dict(const skv_session *s, uint32_t i, uint64_t *id, uint32_t *n_ids)
{
    if (!s) return SKV_ERR_INVALID_ARG;
    if (!id || !n_ids || i >= s->info.n_segments)
        return ses_status(s, SKV_ERR_INVALID_ARG, "segment_dict: NULL out or segment %u out of range", i);
    if (!(skv_codec_flags(s->info.codec) & SKV_CODEC_F_DICT))
        return ses_status(s, SKV_ERR_UNSUPPORTED, "codec %s takes no dictionary", skv_codec_name(s->info.codec));
    const seg_view *g = &s->segs[i];
    if (skv_cmv_payload_dict(g->payload, (size_t)g->payload_bytes, id, n_ids))
        return ses_status(s, SKV_ERR_FORMAT, "not a valid .skv file: segment %u is shorter than its header", i);
    return ses_ok(s);
}

int skv_session_kvtc_cal_id(const skv_session *s, uint64_t *id)
{
    skv_err e = {0};
    if (!s) return SKV_ERR_INVALID_ARG;
    if (!id) return ses_status(s, SKV_ERR_INVALID_ARG, "kvtc_cal_id: NULL id");
    int rc = skv_codec_kvtc_cal_of(s, id, &e);
    return rc ? ses_status(s, rc, "%s", e.msg) : ses_ok(s);
}

int skv_session_set_kvtc_cal(skv_session *s, const void *image, size_t len)
{
    skv_err e = {0};
    if (!s) return SKV_ERR_INVALID_ARG;
    if (!image) return ses_status(s, SKV_ERR_INVALID_ARG, "set_kvtc_cal: NULL image");
    int rc = skv_codec_kvtc_attach(s, image, len, &e);
    return rc ? ses_status(s, rc, "%s", e.msg) : ses_ok(s);
}

int skv_session_segment_kv_info(const skv_session *s, uint32_t i, skv_session_kv_info *out)
{
    if (!s) return SKV_ERR_INVALID_ARG;
    if (!out || i >= s->info.n_segments)
        return ses_status(s, SKV_ERR_INVALID_ARG, "segment_kv_info: NULL out or segment %u out of range", i);
    if (!skv_codec_is_kv(s->info.codec))
        return ses_status(s, SKV_ERR_UNSUPPORTED, "codec %s stores no KV", skv_codec_name(s->info.codec));
    const skv_kvc_header *h = &s->segs[i].kvh;
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 2; k++) {
        snprintf(out->scheme[k], sizeof out->scheme[k], "%s", skv_quant_name(h->scheme[k]));
        out->rel_mse[k] = h->rel_mse[k];
    }
    out->seed = h->seed;
    out->n_layer = (int)h->n_layer;
    out->n_head_kv = (int)h->n_head_kv;
    out->head_dim = (int)h->head_dim;
    out->position_bytes = skv_kvc_position_bytes(h->scheme, h->n_layer, h->n_head_kv, h->head_dim);
    out->tokens_bytes = h->tokens_bytes;
    out->kv_bytes = h->kv_bytes;
    skv_codec_kv_info_fn refine = skv_codec_row_of(s->info.codec)->kv_info;
    if (refine) refine(&s->segs[i], out); /* a payload other than per-vector quantized KV */
    return ses_ok(s);
}

static int restore_kv(const skv_session *s, uint32_t i, float *kv, size_t kv_cap, int32_t *tokens, size_t tok_cap,
                      int verify, skv_err *err)
{
    const seg_view *g;
    uint8_t d[16];
    int rc;
    if (!kv || !tokens || i >= s->info.n_segments)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "invalid argument (NULL buffer or segment out of range)");
    if (!skv_codec_is_kv(s->info.codec))
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "codec %s stores no KV: restore it with the model",
                        skv_codec_name(s->info.codec));
    g = &s->segs[i];
    if (tok_cap < g->n_tokens) return skv_fail(err, SKV_ERR_RANGE, "token buffer too small (%u needed)", g->n_tokens);
    if (kv_cap < skv_session_kv_floats(g))
        return skv_fail(err, SKV_ERR_RANGE, "KV buffer too small (%zu floats needed)", skv_session_kv_floats(g));
    if ((rc = skv_session_decode_kv(s, g, 1, kv, kv_cap, tokens, err))) return rc;
    if (!verify) return SKV_OK;
    if ((rc = skv_digest_f32(kv, skv_session_kv_floats(g), d))) return skv_fail(err, rc, "digest failed");
    return memcmp(d, g->digest, 16) ? skv_session_digest_mismatch(g->digest, d, i, "decoded", err) : SKV_OK;
}

int skv_session_restore_kv(const skv_session *s, uint32_t i, float *kv, size_t kv_cap, int32_t *tokens,
                           size_t tok_cap, int verify)
{
    skv_err err = {0};
    if (!s) return SKV_ERR_INVALID_ARG;
    return ses_status(s, restore_kv(s, i, kv, kv_cap, tokens, tok_cap, verify, &err), "%s", err.msg);
}

