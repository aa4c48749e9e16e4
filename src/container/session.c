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
 * Every segment is an independent KV cache: it starts from an empty context. */
#include <math.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "engine/draft.h"
#include "container/kvcodec.h"
#include "quant/kvquant.h"
#include "engine/model.h"
#include "coder/probq.h"
#include "quant/quant.h"
#include "coder/rangecoder.h"
#include "container/session_int.h"

#define SKV_MAGIC "\x89SKV\r\n\x1a\n"
#define SKV_VERSION 1
#define HDR_SIZE 128
#define SEG_HDR 32
#define SEG_MAGIC "SKVS"
#define ZSTD_LEVEL 19

/* ---- shared ---------------------------------------------------------------- */

static unsigned bits_for(uint32_t n_vocab)
{
    unsigned b = 1;
    while (b < 32 && ((uint64_t)1 << b) < n_vocab) b++;
    return b;
}

static unsigned auto_total_bits(uint32_t n_vocab)
{
    unsigned b = bits_for(n_vocab) + 8; /* the freq >= 1 floor then costs < 2^-8 of the mass */
    return b < 24 ? 24 : b > 28 ? 28 : b;
}

/* ---- encoder ------------------------------------------------------------------ */

struct skv_encoder {
    skv_model *m;
    skv_encoder_params p;
    skv_ctx *ctx;
    uint32_t V;
    unsigned first_bits;
    size_t batch;
    float *logits;          /* [batch][V] */
    float *prev;            /* [V] logits after the segment's last token */
    uint32_t *freq, *cum;   /* [V], [V+1] */
    int32_t *seg_tok;       /* current segment's tokens, [n_ctx] */
    size_t seg_n;
    skv_rangecoder_enc rc;
    uint8_t *rc_buf;
    size_t rc_cap;
    uint8_t *out;           /* header placeholder + finished segments */
    size_t out_len, out_cap;
    uint32_t n_segments;
    skv_encoder_stats st;
    skv_kvcodec *kvc;       /* quantized-KV codecs: the per-(layer, kind) quantizers */
    int kv_scheme[2];
    uint64_t kv_seed;
    int finished;
    char err[256];
};

skv_encoder_params skv_encoder_default_params(void)
{
    skv_encoder_params p = {.codec = SKV_CODEC_MODEL, .n_threads = 1};
    return p;
}

/* ---- codec names; quantized-KV codecs --------------------------------------------- */

static const char *const codec_names[] = {"tokens", "model", "f16", "q8", "q4", "tq2", "tq3", "tq4", "kvq"};
#define N_CODECS ((int)(sizeof codec_names / sizeof codec_names[0]))

const char *skv_codec_name(int codec) { return codec >= 0 && codec < N_CODECS ? codec_names[codec] : NULL; }

int skv_codec_parse(const char *name)
{
    for (int i = 0; name && i < N_CODECS; i++)
        if (!strcmp(name, codec_names[i])) return i;
    return SKV_ERR_INVALID_ARG;
}

static int is_kv_codec(int codec) { return codec >= SKV_CODEC_F16 && codec <= SKV_CODEC_KVQ; }

/* The one scheme of a fixed quantized-KV codec (both kinds); -1 for KVQ and the others. */
static int codec_scheme(int codec)
{
    static const int map[] = {SKV_QUANT_F16, SKV_QUANT_Q8_0, SKV_QUANT_Q4_0, SKV_QUANT_TQ2, SKV_QUANT_TQ3, SKV_QUANT_TQ4};
    return codec >= SKV_CODEC_F16 && codec <= SKV_CODEC_TQ4 ? map[codec - SKV_CODEC_F16] : -1;
}

/* Schemes and seed of a KV codec: fixed, or from the kv_quant spec (kinds and seed only). */
static int kv_codec_setup(skv_encoder *e, const skv_encoder_params *p)
{
    skv_kvq_spec sp;
    char err[160];
    e->kv_scheme[0] = e->kv_scheme[1] = codec_scheme(p->codec);
    e->kv_seed = 0;
    if (p->codec != SKV_CODEC_KVQ) return p->kv_quant ? SKV_ERR_INVALID_ARG : SKV_OK;
    if (!p->kv_quant || skv_kvquant_parse(p->kv_quant, &sp, err, sizeof err)) return SKV_ERR_INVALID_ARG;
    if (sp.scheme[0] < 0 || sp.scheme[1] < 0 || sp.keep_first || sp.keep_last || sp.window) return SKV_ERR_INVALID_ARG;
    e->kv_scheme[0] = sp.scheme[0];
    e->kv_scheme[1] = sp.scheme[1];
    e->kv_seed = sp.seed;
    return SKV_OK;
}

const char *skv_encoder_last_error(const skv_encoder *e) { return e ? e->err : "NULL encoder"; }
const skv_ctx *skv_encoder_ctx(const skv_encoder *e) { return e ? e->ctx : NULL; }

int skv_encoder_get_stats(const skv_encoder *e, skv_encoder_stats *st)
{
    if (!e || !st) return SKV_ERR_INVALID_ARG;
    *st = e->st;
    return SKV_OK;
}

static int enc_fail(skv_encoder *e, int rc, const char *msg)
{
    snprintf(e->err, sizeof e->err, "%s", msg);
    return rc;
}

static int out_reserve(skv_encoder *e, size_t more)
{
    size_t need;
    if (!skv_add_ok(e->out_len, more, &need)) return SKV_ERR_NOMEM;
    if (need <= e->out_cap) return SKV_OK;
    size_t cap = e->out_cap ? e->out_cap : 4096;
    while (cap < need) cap *= 2;
    uint8_t *nb = realloc(e->out, cap);
    if (!nb) return SKV_ERR_NOMEM;
    e->out = nb;
    e->out_cap = cap;
    return SKV_OK;
}

void skv_encoder_free(skv_encoder *e)
{
    if (!e) return;
    skv_ctx_free(e->ctx);
    skv_kvcodec_free(e->kvc);
    free(e->logits);
    free(e->prev);
    free(e->freq);
    free(e->cum);
    free(e->seg_tok);
    free(e->rc_buf);
    free(e->out);
    free(e);
}

int skv_encoder_create(skv_model *m, const skv_encoder_params *p, skv_encoder **out)
{
    skv_encoder_params d = skv_encoder_default_params();
    skv_ctx_params cp = skv_ctx_default_params();
    skv_encoder *e;
    int rc;
    if (!m || !out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if (!p) p = &d;
    if (!skv_codec_name(p->codec) || (p->total_bits && (p->total_bits < 16 || p->total_bits > 28)))
        return SKV_ERR_INVALID_ARG;
    if (!(e = calloc(1, sizeof *e))) return SKV_ERR_NOMEM;
    e->m = m;
    e->p = *p;
    e->p.kv_quant = NULL; /* parsed now: the string need not outlive this call */
    e->V = (uint32_t)m->info.n_vocab;
    if (is_kv_codec(p->codec) &&
        ((rc = kv_codec_setup(e, p)) ||
         (rc = skv_kvcodec_create(&e->kvc, e->kv_scheme, e->kv_seed, (uint32_t)m->info.n_layer,
                                  (uint32_t)m->info.n_head_kv, (uint32_t)m->info.head_dim)))) {
        free(e);
        return rc;
    }
    if (!e->p.total_bits) e->p.total_bits = auto_total_bits(e->V);
    if (e->p.codec != SKV_CODEC_MODEL) e->p.total_bits = 0;
    else if (((uint64_t)1 << e->p.total_bits) < e->V) e->p.total_bits = auto_total_bits(e->V);
    e->first_bits = bits_for(e->V);
    cp.n_ctx = p->n_ctx;
    cp.n_threads = p->n_threads;
    if ((rc = skv_ctx_create(m, &cp, &e->ctx))) {
        skv_kvcodec_free(e->kvc);
        free(e);
        return rc;
    }
    e->p.n_ctx = skv_ctx_n_ctx(e->ctx);
    e->batch = 256;
    size_t V = e->V, S = (size_t)e->p.n_ctx;
    e->rc_cap = skv_rangecoder_bound(S, e->p.total_bits > e->first_bits ? e->p.total_bits : e->first_bits);
    e->logits = malloc(e->batch * V * sizeof(float));
    e->prev = malloc(V * sizeof(float));
    e->freq = malloc(V * sizeof(uint32_t));
    e->cum = malloc((V + 1) * sizeof(uint32_t));
    e->seg_tok = malloc(S * sizeof(int32_t));
    e->rc_buf = malloc(e->rc_cap);
    if (!e->logits || !e->prev || !e->freq || !e->cum || !e->seg_tok || !e->rc_buf || out_reserve(e, HDR_SIZE)) {
        skv_encoder_free(e);
        return SKV_ERR_NOMEM;
    }
    e->out_len = HDR_SIZE;
    skv_rangecoder_enc_init(&e->rc, e->rc_buf, e->rc_cap);
    *out = e;
    return SKV_OK;
}

/* Codes token t under the distribution `logits` (the model's prediction for it). */
static int code_token(skv_encoder *e, const float *logits, int32_t t)
{
    int rc;
    if (!e->p.skip_entropy) e->st.model_bits += skv_token_surprisal(logits, (int)e->V, t);
    e->st.n_model_coded++;
    if (e->p.codec != SKV_CODEC_MODEL) return SKV_OK;
    if ((rc = skv_probq_freqs(logits, e->V, e->p.total_bits, e->freq, e->cum)))
        return enc_fail(e, rc, "the model produced non-finite logits: cannot code under it");
    e->st.coded_bits += skv_probq_cost_bits(e->freq[t], e->p.total_bits);
    if ((rc = skv_rangecoder_enc_put_pow2(&e->rc, e->cum[t], e->freq[t], e->p.total_bits)))
        return enc_fail(e, rc, "range coder output overflow (internal bound violated)");
    return SKV_OK;
}

static int put_varints(uint8_t *dst, const int32_t *t, size_t n, size_t *len)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        while (v >= 0x80) {
            dst[k++] = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        dst[k++] = (uint8_t)v;
    }
    *len = k;
    return SKV_OK;
}

/* XXH3-128 (canonical bytes) of n floats as little-endian binary32: the digest
 * skv_ctx_kv_digest computes over a cache, here over a canonical-order buffer. */
static int digest_f32(const float *x, size_t n, uint8_t out[16])
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return SKV_ERR_NOMEM;
    XXH3_128bits_reset(st);
    skv_digest_f32_update(st, x, n);
    skv_digest_finish(st, out);
    return SKV_OK;
}

/* zstd(LEB128 ids) of the current segment into e->rc_buf (codec tokens and the KV codecs). */
static int zstd_tokens(skv_encoder *e, size_t *plen)
{
    uint8_t *raw = malloc(e->seg_n * 5);
    size_t rlen = 0, bound;
    if (!raw) return enc_fail(e, SKV_ERR_NOMEM, "out of memory");
    put_varints(raw, e->seg_tok, e->seg_n, &rlen);
    bound = ZSTD_compressBound(rlen);
    if (bound > e->rc_cap) {
        uint8_t *nb = realloc(e->rc_buf, bound);
        if (!nb) {
            free(raw);
            return enc_fail(e, SKV_ERR_NOMEM, "out of memory");
        }
        e->rc_buf = nb;
        e->rc_cap = bound;
    }
    *plen = ZSTD_compress(e->rc_buf, e->rc_cap, raw, rlen, ZSTD_LEVEL);
    free(raw);
    if (ZSTD_isError(*plen)) return enc_fail(e, SKV_ERR_INTERNAL, "zstd compression failed");
    return SKV_OK;
}

/* Quantized-KV payload (malloc'ed): sub-header | the token frame (e->rc_buf, tlen bytes) |
 * the segment's exact KV encoded per vector. digest = that of the dequantized KV. */
static int kv_payload(skv_encoder *e, size_t tlen, uint8_t **out, size_t *plen, uint8_t digest[16])
{
    const skv_model_info *mi = &e->m->info;
    size_t n = e->seg_n, nf = (size_t)mi->n_layer * 2 * (size_t)mi->n_head_kv * n * (size_t)mi->head_dim;
    size_t kvb = skv_kvcodec_position_bytes(e->kvc) * n;
    float *kv = malloc(nf * sizeof *kv), *deq = malloc(nf * sizeof *deq);
    uint8_t *buf = malloc(SKV_KVC_HDR + tlen + kvb);
    double mse[2] = {0, 0};
    skv_kvc_header h;
    int rc = SKV_ERR_NOMEM;
    if (!kv || !deq || !buf) goto done;
    if ((rc = skv_ctx_kv_read(e->ctx, 0, (int)n, kv))) goto done;
    if ((rc = skv_kvcodec_encode(e->kvc, kv, n, buf + SKV_KVC_HDR + tlen, kvb, deq, mse))) goto done;
    if ((rc = digest_f32(deq, nf, digest))) goto done;
    h = (skv_kvc_header){.scheme = {e->kv_scheme[0], e->kv_scheme[1]}, .n_layer = (uint32_t)mi->n_layer,
                        .n_head_kv = (uint32_t)mi->n_head_kv, .head_dim = (uint32_t)mi->head_dim, .seed = e->kv_seed,
                        .tokens_bytes = tlen, .kv_bytes = kvb, .rel_mse = {(float)mse[0], (float)mse[1]}};
    skv_kvc_header_write(&h, buf);
    memcpy(buf + SKV_KVC_HDR, e->rc_buf, tlen);
    *out = buf;
    *plen = SKV_KVC_HDR + tlen + kvb;
    buf = NULL;
done:
    free(kv);
    free(deq);
    free(buf);
    if (rc == SKV_ERR_NOMEM) return enc_fail(e, rc, "out of memory");
    if (rc) {
        snprintf(e->err, sizeof e->err, "the KV cannot be stored as k=%s,v=%s (non-finite values or an fp16 overflow): %s",
                 skv_quant_name(e->kv_scheme[0]), skv_quant_name(e->kv_scheme[1]), skv_status_str(rc));
    }
    return rc;
}

static int flush_segment(skv_encoder *e)
{
    uint8_t digest[16], *payload = NULL, *owned = NULL;
    size_t plen = 0;
    int rc;
    if (!e->seg_n) return SKV_OK;
    if (e->p.codec == SKV_CODEC_MODEL) {
        if ((rc = skv_ctx_kv_digest(e->ctx, (int)e->seg_n, digest))) return enc_fail(e, rc, "KV digest failed");
        if ((rc = skv_rangecoder_enc_finish(&e->rc, &plen))) return enc_fail(e, rc, "range coder finish failed");
        payload = e->rc_buf;
    } else if ((rc = zstd_tokens(e, &plen))) {
        return rc;
    } else if (!e->kvc) {
        if ((rc = skv_ctx_kv_digest(e->ctx, (int)e->seg_n, digest))) return enc_fail(e, rc, "KV digest failed");
        payload = e->rc_buf;
    } else {
        if ((rc = kv_payload(e, plen, &owned, &plen, digest))) return rc;
        payload = owned;
    }
    if ((rc = out_reserve(e, SEG_HDR + plen + 8))) {
        free(owned);
        return enc_fail(e, rc, "out of memory");
    }
    uint8_t *s = e->out + e->out_len;
    memcpy(s, SEG_MAGIC, 4);
    skv_wr32(s + 4, (uint32_t)e->seg_n);
    skv_wr64(s + 8, plen);
    memcpy(s + 16, digest, 16);
    memcpy(s + SEG_HDR, payload, plen);
    skv_wr64(s + SEG_HDR + plen, XXH3_64bits(s, SEG_HDR + plen));
    free(owned);
    e->out_len += SEG_HDR + plen + 8;
    e->n_segments++;
    e->seg_n = 0;
    skv_ctx_truncate(e->ctx, 0);
    skv_rangecoder_enc_init(&e->rc, e->rc_buf, e->rc_cap);
    return SKV_OK;
}

/* Appends k tokens that fit in the current segment and in one batch. */
static int append_chunk(skv_encoder *e, const int32_t *t, size_t k)
{
    int rc;
    if (e->seg_n == 0) {
        if (e->p.codec == SKV_CODEC_MODEL && (rc = skv_rangecoder_enc_put_bits(&e->rc, (uint32_t)t[0], e->first_bits)))
            return enc_fail(e, rc, "range coder output overflow");
    } else if ((rc = code_token(e, e->prev, t[0]))) {
        return rc;
    }
    if ((rc = skv_prefill(e->ctx, t, k, SKV_LOGITS_ALL, e->logits))) return enc_fail(e, rc, skv_ctx_last_error(e->ctx));
    for (size_t j = 1; j < k; j++)
        if ((rc = code_token(e, e->logits + (j - 1) * e->V, t[j]))) return rc;
    memcpy(e->prev, e->logits + (k - 1) * e->V, e->V * sizeof(float));
    memcpy(e->seg_tok + e->seg_n, t, k * sizeof *t);
    e->seg_n += k;
    e->st.n_tokens += k;
    return SKV_OK;
}

int skv_encoder_append(skv_encoder *e, const int32_t *tokens, size_t n, float *next_logits)
{
    int rc;
    if (!e || (!tokens && n)) return SKV_ERR_INVALID_ARG;
    if (e->finished) return enc_fail(e, SKV_ERR_INVALID_ARG, "encoder already finished");
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= e->V) return enc_fail(e, SKV_ERR_INVALID_ARG, "token id outside the vocabulary");
    for (size_t done = 0; done < n;) {
        if (e->seg_n == (size_t)e->p.n_ctx) {
            if (!e->p.segment) {
                snprintf(e->err, sizeof e->err,
                         "the session exceeds the context of %d tokens (enable segmenting to store consecutive independent segments)",
                         e->p.n_ctx);
                return SKV_ERR_RANGE;
            }
            if ((rc = flush_segment(e))) return rc;
        }
        size_t k = n - done, room = (size_t)e->p.n_ctx - e->seg_n;
        if (k > room) k = room;
        if (k > e->batch) k = e->batch;
        if ((rc = append_chunk(e, tokens + done, k))) return rc;
        done += k;
    }
    if (next_logits && e->seg_n) memcpy(next_logits, e->prev, e->V * sizeof(float));
    return SKV_OK;
}

int skv_encoder_finish(skv_encoder *e, uint8_t **data, size_t *size)
{
    uint8_t fp[16];
    int rc;
    if (!e || !data || !size) return SKV_ERR_INVALID_ARG;
    if (e->finished) return enc_fail(e, SKV_ERR_INVALID_ARG, "encoder already finished");
    if ((rc = flush_segment(e))) return rc;
    if ((rc = skv_model_fingerprint(e->m, fp))) return enc_fail(e, rc, "model fingerprint failed");
    uint8_t *h = e->out;
    memset(h, 0, HDR_SIZE);
    memcpy(h, SKV_MAGIC, 8);
    skv_wr16(h + 8, SKV_VERSION);
    skv_wr16(h + 10, HDR_SIZE);
    skv_wr32(h + 12, (uint32_t)e->p.codec);
    skv_wr32(h + 16, e->p.segment ? 1u : 0u);
    skv_wr32(h + 20, e->n_segments);
    skv_wr64(h + 24, e->st.n_tokens);
    skv_wr32(h + 32, (uint32_t)e->p.n_ctx);
    skv_wr32(h + 36, e->V);
    skv_wr32(h + 40, e->p.total_bits);
    skv_wr32(h + 44, (uint32_t)e->m->info.bos_id);
    memcpy(h + 48, fp, 16);
    size_t name_len = strlen(e->m->info.name);
    memcpy(h + 64, e->m->info.name, name_len < 47 ? name_len : 47);
    skv_wr64(h + 120, XXH3_64bits(h, 120));
    e->finished = 1;
    *data = e->out;
    *size = e->out_len;
    e->out = NULL;
    e->out_len = e->out_cap = 0;
    return SKV_OK;
}

/* ---- reader ------------------------------------------------------------------------ */

typedef struct {
    uint32_t n_tokens;
    uint64_t payload_bytes;
    const uint8_t *payload;
    uint8_t digest[16];
    skv_kvc_header kvh;     /* quantized-KV codecs: the validated sub-header */
} seg_view;

struct skv_session {
    uint8_t *data;
    size_t size;
    skv_session_info info;
    seg_view *segs;
};

static int bad(char *err, size_t cap, const char *what)
{
    return skv_errf(err, cap, SKV_ERR_FORMAT, "not a valid .skv file: %s", what);
}

static int parse_header(skv_session *s, char *err, size_t cap)
{
    const uint8_t *h = s->data;
    skv_session_info *in = &s->info;
    if (s->size < 8 || memcmp(h, SKV_MAGIC, 8)) return bad(err, cap, "bad magic (not a seqkv session)");
    if (s->size < HDR_SIZE) return bad(err, cap, "truncated header");
    if (skv_rd16(h + 8) != SKV_VERSION)
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, ".skv version %u is not supported (this build reads version %d)",
                        skv_rd16(h + 8), SKV_VERSION);
    if (skv_rd16(h + 10) != HDR_SIZE) return bad(err, cap, "unexpected header size");
    if (skv_rd64(h + 120) != XXH3_64bits(h, 120)) return bad(err, cap, "header checksum mismatch (corrupt)");
    in->version = SKV_VERSION;
    in->codec = (int)skv_rd32(h + 12);
    uint32_t flags = skv_rd32(h + 16);
    in->segmented = (int)(flags & 1);
    in->n_segments = skv_rd32(h + 20);
    in->n_tokens = skv_rd64(h + 24);
    in->n_ctx = skv_rd32(h + 32);
    in->n_vocab = skv_rd32(h + 36);
    in->total_bits = skv_rd32(h + 40);
    in->bos_id = (int32_t)skv_rd32(h + 44);
    memcpy(in->fingerprint, h + 48, 16);
    memcpy(in->model_name, h + 64, 48);
    in->model_name[48] = 0;
    /* the name is printed by tools: printable bytes, NUL-padded; reserved bytes zero */
    for (size_t i = 0, end = 0; i < 48; i++) {
        uint8_t ch = h[64 + i];
        if (!ch) end = 1;
        else if (end || ch < 0x20 || ch == 0x7f) return bad(err, cap, "model name field is not printable text");
    }
    for (size_t i = 112; i < 120; i++)
        if (h[i]) return bad(err, cap, "reserved header bytes are not zero");
    in->file_bytes = s->size;
    if (!skv_codec_name(in->codec))
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "unknown codec id %d", in->codec);
    if (flags & ~1u) return bad(err, cap, "unknown flags");
    if (in->n_vocab < 1 || in->n_vocab > (1u << 24) || in->n_ctx < 1 || in->n_ctx > (1u << 24))
        return bad(err, cap, "vocabulary or context size out of range");
    if (in->codec == SKV_CODEC_MODEL
            ? (in->total_bits < 16 || in->total_bits > 28 || ((uint64_t)1 << in->total_bits) < in->n_vocab)
            : in->total_bits != 0)
        return bad(err, cap, "invalid frequency total");
    if (!in->segmented && in->n_segments > 1) return bad(err, cap, "several segments in an unsegmented session");
    if (in->n_segments > (s->size - HDR_SIZE) / (SEG_HDR + 8)) return bad(err, cap, "segment count exceeds the file");
    if (is_kv_codec(in->codec) && in->n_segments > (s->size - HDR_SIZE) / (SEG_HDR + 8 + SKV_KVC_HDR))
        return bad(err, cap, "segment count exceeds the file");
    if (in->n_tokens > (uint64_t)in->n_segments * in->n_ctx) return bad(err, cap, "token count exceeds the segments");
    return SKV_OK;
}

/* Segment i's KV sub-header: valid (kvcodec.c), the schemes the codec names, and the same
 * schemes, seed and geometry as segment 0 (one session, one cache layout). */
static int check_kv_subheader(skv_session *s, uint32_t i, char *err, size_t cap)
{
    seg_view *g = &s->segs[i];
    const skv_kvc_header *a = &s->segs[0].kvh, *h = &g->kvh;
    char msg[200];
    int fixed = codec_scheme(s->info.codec);
    if (skv_kvc_header_parse(g->payload, g->payload_bytes, g->n_tokens, &g->kvh, msg, sizeof msg)) {
        char full[240];
        snprintf(full, sizeof full, "segment %u: %s", i, msg);
        return bad(err, cap, full);
    }
    if (fixed >= 0 && (h->scheme[0] != fixed || h->scheme[1] != fixed))
        return bad(err, cap, "KV sub-header schemes differ from the codec's");
    if (i && (h->scheme[0] != a->scheme[0] || h->scheme[1] != a->scheme[1] || h->seed != a->seed ||
              h->n_layer != a->n_layer || h->n_head_kv != a->n_head_kv || h->head_dim != a->head_dim))
        return bad(err, cap, "segments disagree on the KV schemes, seed or geometry");
    return SKV_OK;
}

static int parse_segments(skv_session *s, char *err, size_t cap)
{
    size_t pos = HDR_SIZE;
    uint64_t total = 0;
    int rc;
    if (!(s->segs = calloc(s->info.n_segments ? s->info.n_segments : 1, sizeof *s->segs)))
        return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < s->info.n_segments; i++) {
        const uint8_t *p = s->data + pos;
        seg_view *g = &s->segs[i];
        if (s->size - pos < SEG_HDR + 8 || memcmp(p, SEG_MAGIC, 4)) return bad(err, cap, "truncated or missing segment");
        g->n_tokens = skv_rd32(p + 4);
        g->payload_bytes = skv_rd64(p + 8);
        if (g->n_tokens < 1 || g->n_tokens > s->info.n_ctx) return bad(err, cap, "segment token count out of range");
        if (g->payload_bytes > s->size - pos - SEG_HDR - 8) return bad(err, cap, "segment payload runs past the end");
        size_t len = SEG_HDR + (size_t)g->payload_bytes;
        if (skv_rd64(p + len) != XXH3_64bits(p, len)) {
            char msg[96];
            snprintf(msg, sizeof msg, "segment %u checksum mismatch (corrupt)", i);
            return bad(err, cap, msg);
        }
        memcpy(g->digest, p + 16, 16);
        g->payload = p + SEG_HDR;
        if (is_kv_codec(s->info.codec) && (rc = check_kv_subheader(s, i, err, cap))) return rc;
        total += g->n_tokens;
        pos += len + 8;
    }
    if (pos != s->size) return bad(err, cap, "unexpected bytes after the last segment");
    if (total != s->info.n_tokens) return bad(err, cap, "segment token counts do not add up");
    return SKV_OK;
}

int skv_session_open(const void *data, size_t size, skv_session **out, char *err, size_t errcap)
{
    skv_session *s;
    int rc;
    if (!out || (!data && size)) return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "invalid argument");
    *out = NULL;
    if (!(s = calloc(1, sizeof *s)) || !(s->data = malloc(size ? size : 1))) {
        free(s);
        return skv_errf(err, errcap, SKV_ERR_NOMEM, "out of memory");
    }
    if (size) memcpy(s->data, data, size);
    s->size = size;
    if ((rc = parse_header(s, err, errcap)) || (rc = parse_segments(s, err, errcap))) {
        skv_session_free(s);
        return rc;
    }
    *out = s;
    return SKV_OK;
}

void skv_session_free(skv_session *s)
{
    if (!s) return;
    free(s->data);
    free(s->segs);
    free(s);
}

int skv_session_get_info(const skv_session *s, skv_session_info *info)
{
    if (!s || !info) return SKV_ERR_INVALID_ARG;
    *info = s->info;
    return SKV_OK;
}

int skv_session_segment_info(const skv_session *s, uint32_t i, uint32_t *n_tokens, uint64_t *payload_bytes,
                             uint8_t kv_digest[16])
{
    if (!s || i >= s->info.n_segments) return SKV_ERR_INVALID_ARG;
    if (n_tokens) *n_tokens = s->segs[i].n_tokens;
    if (payload_bytes) *payload_bytes = s->segs[i].payload_bytes;
    if (kv_digest) memcpy(kv_digest, s->segs[i].digest, 16);
    return SKV_OK;
}

static void hex16(const uint8_t *d, char *out)
{
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int digest_mismatch(const uint8_t *stored, const uint8_t *got, uint32_t i, const char *what, char *err, size_t cap)
{
    char a[33], b[33];
    hex16(stored, a);
    hex16(got, b);
    return skv_errf(err, cap, SKV_ERR_MISMATCH, "KV verification failed for segment %u: stored digest %s, %s %s", i, a,
                    what, b);
}

int skv_session_check_model(const skv_session *s, skv_model *m, char *err, size_t cap)
{
    uint8_t fp[16];
    char a[33], b[33];
    int rc = skv_model_fingerprint(m, fp);
    if (rc) return skv_errf(err, cap, rc, "cannot fingerprint the model");
    if (memcmp(fp, s->info.fingerprint, 16) || (uint32_t)m->info.n_vocab != s->info.n_vocab) {
        hex16(s->info.fingerprint, a);
        hex16(fp, b);
        return skv_errf(err, cap, SKV_ERR_MISMATCH,
                        "wrong model: this session was written with model '%s' (fingerprint %s), but the model given is '%s' (fingerprint %s)",
                        s->info.model_name, a, m->info.name, b);
    }
    return SKV_OK;
}

static int decode_tokens_payload(const seg_view *g, uint32_t V, int32_t *tok, char *err, size_t cap)
{
    size_t maxraw = (size_t)g->n_tokens * 5, raw_len;
    unsigned long long content = ZSTD_getFrameContentSize(g->payload, g->payload_bytes);
    uint8_t *raw;
    if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN || content > maxraw ||
        ZSTD_findFrameCompressedSize(g->payload, g->payload_bytes) != g->payload_bytes)
        return bad(err, cap, "token payload is not exactly one zstd frame of the expected size");
    if (!(raw = malloc(maxraw))) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    raw_len = ZSTD_decompress(raw, maxraw, g->payload, g->payload_bytes);
    if (ZSTD_isError(raw_len) || raw_len != content) {
        free(raw);
        return bad(err, cap, "token payload does not decompress");
    }
    size_t k = 0;
    for (uint32_t i = 0; i < g->n_tokens; i++) {
        uint32_t v = 0;
        unsigned shift = 0;
        for (;;) {
            /* ids < 2^24 take at most 4 bytes; only the shortest (canonical) encoding is valid */
            if (k >= raw_len || shift > 21) {
                free(raw);
                return bad(err, cap, "token payload is truncated or has an over-long varint");
            }
            uint8_t byte = raw[k++];
            v |= (uint32_t)(byte & 0x7f) << shift;
            if (!(byte & 0x80)) {
                if (byte == 0 && shift) {
                    free(raw);
                    return bad(err, cap, "token payload has a padded (non-canonical) varint");
                }
                break;
            }
            shift += 7;
        }
        if (v >= V) {
            free(raw);
            return bad(err, cap, "token id outside the vocabulary");
        }
        tok[i] = (int32_t)v;
    }
    free(raw);
    if (k != raw_len) return bad(err, cap, "trailing bytes in the token payload");
    return SKV_OK;
}

/* ---- quantized-KV codecs: decoded without the model ---------------------------- */

/* Floats of a KV segment in canonical order (bounded: kv_bytes fits in the file). */
static size_t kv_floats(const seg_view *g)
{
    const skv_kvc_header *h = &g->kvh;
    return (size_t)h->n_layer * 2 * h->n_head_kv * g->n_tokens * h->head_dim;
}

/* Tokens and dequantized KV (kv_floats(g) floats) of a quantized-KV segment. */
static int decode_kv_payload(const skv_session *s, const seg_view *g, float *kv, size_t kv_cap, int32_t *tok,
                             char *err, size_t cap)
{
    const skv_kvc_header *h = &g->kvh;
    seg_view t = *g;
    skv_kvcodec *c = NULL;
    int rc;
    t.payload = g->payload + SKV_KVC_HDR;
    t.payload_bytes = h->tokens_bytes;
    if ((rc = decode_tokens_payload(&t, s->info.n_vocab, tok, err, cap))) return rc;
    if ((rc = skv_kvcodec_create(&c, h->scheme, h->seed, h->n_layer, h->n_head_kv, h->head_dim)))
        return skv_errf(err, cap, rc, "cannot set up the KV quantizers: %s", skv_status_str(rc));
    rc = skv_kvcodec_decode(c, t.payload + h->tokens_bytes, (size_t)h->kv_bytes, g->n_tokens, kv, kv_cap);
    skv_kvcodec_free(c);
    if (rc == SKV_ERR_FORMAT) return bad(err, cap, "the quantized KV payload holds invalid values");
    if (rc) return skv_errf(err, cap, rc, "KV decoding failed: %s", skv_status_str(rc));
    return SKV_OK;
}

int skv_session_segment_kv_info(const skv_session *s, uint32_t i, skv_session_kv_info *out)
{
    if (!s || !out || i >= s->info.n_segments) return SKV_ERR_INVALID_ARG;
    if (!is_kv_codec(s->info.codec)) return SKV_ERR_UNSUPPORTED;
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
    return SKV_OK;
}

int skv_session_restore_kv(const skv_session *s, uint32_t i, float *kv, size_t kv_cap, int32_t *tokens,
                           size_t tok_cap, int verify, char *err, size_t errcap)
{
    const seg_view *g;
    uint8_t d[16];
    int rc;
    if (!s || !kv || !tokens || i >= s->info.n_segments) return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "invalid argument");
    if (!is_kv_codec(s->info.codec))
        return skv_errf(err, errcap, SKV_ERR_UNSUPPORTED, "codec %s stores no KV: restore it with the model",
                        skv_codec_name(s->info.codec));
    g = &s->segs[i];
    if (tok_cap < g->n_tokens) return skv_errf(err, errcap, SKV_ERR_RANGE, "token buffer too small (%u needed)", g->n_tokens);
    if (kv_cap < kv_floats(g)) return skv_errf(err, errcap, SKV_ERR_RANGE, "KV buffer too small (%zu floats needed)", kv_floats(g));
    if ((rc = decode_kv_payload(s, g, kv, kv_cap, tokens, err, errcap))) return rc;
    if (!verify) return SKV_OK;
    if ((rc = digest_f32(kv, kv_floats(g), d))) return skv_errf(err, errcap, rc, "digest failed");
    return memcmp(d, g->digest, 16) ? digest_mismatch(g->digest, d, i, "decoded", err, errcap) : SKV_OK;
}

/* Decodes a quantized-KV segment into ctx (skv_ctx_kv_write: the model is not run). */
static int load_kv_segment(const skv_session *s, const seg_view *g, skv_model *m, skv_ctx *ctx, int32_t *tok,
                           char *err, size_t cap)
{
    const skv_kvc_header *h = &g->kvh;
    size_t nf = kv_floats(g);
    float *kv;
    int rc;
    if (h->n_layer != (uint32_t)m->info.n_layer || h->n_head_kv != (uint32_t)m->info.n_head_kv ||
        h->head_dim != (uint32_t)m->info.head_dim)
        return skv_errf(err, cap, SKV_ERR_MISMATCH,
                        "KV geometry mismatch: the session stores %u layers x %u KV heads x %u, the model has %d x %d x %d",
                        h->n_layer, h->n_head_kv, h->head_dim, m->info.n_layer, m->info.n_head_kv, m->info.head_dim);
    if (!(kv = malloc(nf * sizeof *kv))) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    if (!(rc = decode_kv_payload(s, g, kv, nf, tok, err, cap)) && (rc = skv_ctx_kv_write(ctx, 0, (int)g->n_tokens, kv)))
        rc = skv_errf(err, cap, rc, "cannot load the KV into the context: %s", skv_ctx_last_error(ctx));
    free(kv);
    return rc;
}

static void report(const skv_restore_params *p, uint64_t done, uint64_t total)
{
    if (p && p->progress) p->progress(p->user, done, total);
}

/* Decodes one token under the frequencies of one logits row. */
static int decode_symbol(skv_rangecoder_dec *d, const float *logits, uint32_t V, unsigned tb, uint32_t *freq,
                         uint32_t *cum, int32_t *tok, char *err, size_t cap)
{
    uint32_t target = 0;
    if (skv_probq_freqs(logits, V, tb, freq, cum))
        return skv_errf(err, cap, SKV_ERR_MISMATCH, "the model produced non-finite logits");
    if (skv_rangecoder_dec_get_freq_pow2(d, tb, &target)) return bad(err, cap, "corrupt model-coded stream");
    size_t sym = skv_probq_find(cum, V, target);
    if (skv_rangecoder_dec_update(d, cum[sym], freq[sym])) return bad(err, cap, "corrupt model-coded stream");
    *tok = (int32_t)sym;
    return SKV_OK;
}

static int forward_failed(skv_ctx *ctx, int rc, char *err, size_t cap)
{
    return skv_errf(err, cap, rc, "forward pass failed: %s", skv_ctx_last_error(ctx));
}

/* Opens a segment's model-coded stream and reads its first token (raw bits). */
static int start_stream(skv_rangecoder_dec *d, const seg_view *g, uint32_t V, int32_t *tok, char *err, size_t cap)
{
    uint32_t v = 0;
    skv_rangecoder_dec_init(d, g->payload, g->payload_bytes);
    if (skv_rangecoder_dec_get_bits(d, bits_for(V), &v) || v >= V)
        return bad(err, cap, "corrupt model-coded stream (first token)");
    tok[0] = (int32_t)v;
    return SKV_OK;
}

int skv_session_stream_open(const skv_session *s, uint32_t i, skv_rangecoder_dec *d, int32_t *tok0, char *err,
                            size_t cap)
{
    return start_stream(d, &s->segs[i], s->info.n_vocab, tok0, err, cap);
}

int skv_session_stream_next(const skv_session *s, skv_rangecoder_dec *d, const float *logits, uint32_t *freq,
                            uint32_t *cum, int32_t *tok, char *err, size_t cap)
{
    return decode_symbol(d, logits, s->info.n_vocab, s->info.total_bits, freq, cum, tok, err, cap);
}

int skv_session_verify_segment(const skv_session *s, uint32_t i, const skv_ctx *ctx, char *err, size_t cap)
{
    const seg_view *g = &s->segs[i];
    uint8_t d[16];
    int rc = skv_ctx_kv_digest(ctx, (int)g->n_tokens, d);
    if (rc) return skv_errf(err, cap, rc, "digest failed");
    if (memcmp(d, g->digest, 16))
        return digest_mismatch(g->digest, d, i, is_kv_codec(s->info.codec) ? "decoded" : "regenerated", err, cap);
    return SKV_OK;
}

/* Token by token: one forward pass per token. */
static int restore_model_codec(const skv_session *s, const seg_view *g, skv_ctx *ctx, const skv_restore_params *p,
                               int32_t *tok, skv_restore_stats *st, char *err, size_t cap)
{
    uint32_t V = s->info.n_vocab;
    unsigned tb = s->info.total_bits;
    skv_rangecoder_dec d;
    float *logits = malloc(V * sizeof(float));
    uint32_t *freq = malloc(V * sizeof(uint32_t)), *cum = malloc(((size_t)V + 1) * sizeof(uint32_t));
    int rc = SKV_ERR_NOMEM;
    if (!logits || !freq || !cum) {
        skv_errf(err, cap, rc, "out of memory");
        goto done;
    }
    if ((rc = start_stream(&d, g, V, tok, err, cap))) goto done;
    for (uint32_t i = 1; i <= g->n_tokens; i++) {
        int last = i == g->n_tokens;
        if ((rc = skv_decode(ctx, tok[i - 1], last ? NULL : logits))) {
            rc = forward_failed(ctx, rc, err, cap);
            goto done;
        }
        st->n_passes++;
        if (last) break;
        if ((rc = decode_symbol(&d, logits, V, tb, freq, cum, &tok[i], err, cap))) goto done;
        if ((i & 255) == 0) report(p, i, g->n_tokens);
    }
    if (skv_rangecoder_dec_finish(&d)) rc = bad(err, cap, "model-coded stream has trailing or missing bytes");
done:
    free(logits);
    free(freq);
    free(cum);
    return rc;
}

#define DRAFT_MAX_DEFAULT 16
#define DRAFT_MAX_LIMIT 256
#define LOGITS_BUDGET ((size_t)1 << 22) /* floats of logits rows per block (16 MiB) */
#define GATE_PCT 60 /* draft only from match lengths whose first drafts were right >= this often */

/* Speculative: invariant at the top of the loop: the cache holds tok[0..pos) and tok[pos]
 * is decoded (its logits row is the one that was used; no model call needed for it).
 * One pass runs [tok[pos], drafts...] with every logits row; row j decodes tok[pos+j+1],
 * and while that equals the draft at j+1 the next row is valid too. At the first mismatch
 * the cache is truncated after the last confirmed token. The stream, and so the tokens,
 * never depend on the drafts: only the number of passes does. Drafting is gated per
 * match-length class by its recent hit rate (a wrong draft costs a batch row, about as
 * much as a token of prefill), and the block grows while whole blocks are confirmed.
 * A decoder-side change only: the file format and the encoder are untouched. */
static int restore_model_codec_spec(const skv_session *s, const seg_view *g, skv_ctx *ctx,
                                    const skv_restore_params *p, int32_t *tok, skv_restore_stats *st, char *err,
                                    size_t cap)
{
    uint32_t V = s->info.n_vocab, n = g->n_tokens;
    unsigned tb = s->info.total_bits;
    size_t kmax = p && p->draft_max > 0 ? (size_t)p->draft_max : DRAFT_MAX_DEFAULT, k_cur = 4;
    skv_rangecoder_dec d;
    skv_draft *dr = NULL;
    float *logits = NULL;
    uint32_t *freq = malloc(V * sizeof(uint32_t)), *cum = malloc(((size_t)V + 1) * sizeof(uint32_t));
    int32_t *batch = NULL;
    uint32_t next_report = 256;
    /* per match-length class (1, 2, 3, 4..7, 8+): first drafts tried / confirmed; starts optimistic */
    uint32_t gate_try[5] = {1, 1, 1, 1, 1}, gate_hit[5] = {1, 1, 1, 1, 1}, gate_skip[5] = {0, 0, 0, 0, 0};
    int rc = SKV_ERR_NOMEM;
    if (kmax * V > LOGITS_BUDGET) kmax = V >= LOGITS_BUDGET ? 1 : LOGITS_BUDGET / V; /* huge vocabularies */
    if (k_cur > kmax) k_cur = kmax;
    logits = malloc(kmax * V * sizeof(float));
    batch = malloc(kmax * sizeof *batch);
    if (!logits || !freq || !cum || !batch || skv_draft_create(n, &dr)) {
        skv_errf(err, cap, rc, "out of memory");
        goto done;
    }
    if ((rc = start_stream(&d, g, V, tok, err, cap))) goto done;
    uint32_t pos = 0; /* cache holds tok[0..pos); tok[pos] decoded */
    while (pos + 1 < n) {
        size_t k = k_cur, left = (size_t)(n - 1 - pos); /* tokens still to decode */
        if (k > left) k = left;
        /* the history is tok[0..pos]: push what is not in the draft yet */
        for (size_t i = skv_draft_len(dr); i <= pos; i++) skv_draft_push(dr, tok[i]);
        batch[0] = tok[pos];
        unsigned ml = 0;
        size_t nd = k > 1 ? skv_draft_propose(dr, batch + 1, k - 1, &ml) : 0;
        int cls = -1;
        if (nd) {
            /* Gate by how often drafts of this match length were right lately: a wrong
             * draft costs a batch row. Gated-off classes still get an occasional probe. */
            cls = ml >= 8 ? 4 : ml >= 4 ? 3 : (int)ml - 1;
            if (gate_try[cls] * GATE_PCT > gate_hit[cls] * 100) {
                if (++gate_skip[cls] & 15) nd = 0, cls = -1;
                else nd = 1; /* a probe: one draft token */
            }
        }
        k = nd + 1;
        if ((rc = skv_prefill(ctx, batch, k, SKV_LOGITS_ALL, logits))) {
            rc = forward_failed(ctx, rc, err, cap);
            goto done;
        }
        st->n_passes++;
        st->n_drafted += nd;
        size_t j = 0; /* row j decodes tok[pos + 1 + j] */
        for (;;) {
            if ((rc = decode_symbol(&d, logits + j * V, V, tb, freq, cum, &tok[pos + 1 + j], err, cap))) goto done;
            if (j + 1 >= k || tok[pos + 1 + j] != batch[j + 1]) break;
            j++; /* draft confirmed: its row is valid */
        }
        /* confirmed: batch[0..j] = tok[pos..pos+j]; tok[pos+j+1] decoded */
        st->n_accepted += j;
        if (cls >= 0) {
            gate_try[cls]++;
            gate_hit[cls] += j > 0;
            if (gate_try[cls] >= 64) gate_try[cls] /= 2, gate_hit[cls] /= 2; /* recent history weighs more */
        }
        if (j + 1 < k && (rc = skv_ctx_truncate(ctx, (int)(pos + j + 1)))) {
            rc = forward_failed(ctx, rc, err, cap);
            goto done;
        }
        /* adapt the block to the recent acceptance */
        if (nd > 0 && j == nd) k_cur = k_cur * 2 > kmax ? kmax : k_cur * 2;
        else if (nd > 0) k_cur = j + 2 > 2 ? j + 2 : 2;
        if (k_cur > kmax) k_cur = kmax;
        pos += (uint32_t)j + 1;
        if (pos >= next_report) {
            report(p, pos, n);
            next_report = (pos | 255) + 1;
        }
    }
    /* the last token needs no logits */
    if ((rc = skv_decode(ctx, tok[n - 1], NULL))) {
        rc = forward_failed(ctx, rc, err, cap);
        goto done;
    }
    st->n_passes++;
    if (skv_rangecoder_dec_finish(&d)) rc = bad(err, cap, "model-coded stream has trailing or missing bytes");
done:
    skv_draft_free(dr);
    free(logits);
    free(freq);
    free(cum);
    free(batch);
    return rc;
}

int skv_session_restore_segment(const skv_session *s, skv_model *m, uint32_t i, skv_ctx *ctx,
                                const skv_restore_params *p, int32_t *tokens, size_t cap, char *err, size_t errcap)
{
    const seg_view *g;
    skv_restore_stats stats = {0, 0, 0, 0}, *st = &stats;
    int rc;
    if (!s || !m || !ctx || !tokens || i >= s->info.n_segments || skv_ctx_model(ctx) != m)
        return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "invalid argument");
    if (p && (p->draft < SKV_DRAFT_AUTO || p->draft > SKV_DRAFT_NGRAM || p->draft_max < 0 ||
              p->draft_max > DRAFT_MAX_LIMIT))
        return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "invalid restore parameters (draft %d, draft_max %d)",
                        p->draft, p->draft_max);
    g = &s->segs[i];
    if (cap < g->n_tokens) return skv_errf(err, errcap, SKV_ERR_RANGE, "token buffer too small (%u needed)", g->n_tokens);
    if ((uint32_t)skv_ctx_n_ctx(ctx) < g->n_tokens)
        return skv_errf(err, errcap, SKV_ERR_RANGE, "context of %d positions cannot hold a segment of %u tokens",
                        skv_ctx_n_ctx(ctx), g->n_tokens);
    if ((rc = skv_session_check_model(s, m, err, errcap))) return rc;
    skv_ctx_truncate(ctx, 0);
    if (s->info.codec == SKV_CODEC_TOKENS) {
        if ((rc = decode_tokens_payload(g, s->info.n_vocab, tokens, err, errcap))) return rc;
        if ((rc = skv_prefill(ctx, tokens, g->n_tokens, SKV_LOGITS_NONE, NULL)))
            return skv_errf(err, errcap, rc, "forward pass failed: %s", skv_ctx_last_error(ctx));
        stats.n_passes = 1;
    } else if (is_kv_codec(s->info.codec)) {
        if ((rc = load_kv_segment(s, g, m, ctx, tokens, err, errcap))) return rc;
    } else {
        int draft = p ? p->draft : SKV_DRAFT_AUTO;
        /* AUTO = token by token: measured faster than n-gram drafts on non-repetitive text */
        rc = draft == SKV_DRAFT_NGRAM ? restore_model_codec_spec(s, g, ctx, p, tokens, st, err, errcap)
                                      : restore_model_codec(s, g, ctx, p, tokens, st, err, errcap);
        if (rc) return rc;
    }
    report(p, g->n_tokens, g->n_tokens);
    if (p && p->verify && (rc = skv_session_verify_segment(s, i, ctx, err, errcap))) return rc;
    stats.n_tokens = g->n_tokens;
    if (p && p->stats) {
        p->stats->n_tokens += stats.n_tokens;
        p->stats->n_passes += stats.n_passes;
        p->stats->n_drafted += stats.n_drafted;
        p->stats->n_accepted += stats.n_accepted;
    }
    return SKV_OK;
}
