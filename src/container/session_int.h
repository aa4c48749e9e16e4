/* Library-internal parts of the .skv format (src/container/): the layout constants, the
 * opened session, and the steps the files share. The stream format lives here and in
 * session.c / encoder.c / restore.c only; restore_batch.c drives the decoding of many
 * model-coded segments in lockstep through the stream steps below, exactly as
 * skv_session_restore_segment uses them. Not part of the public API.
 *
 *   codecs.c    the codec table (codecs.h): one row per codec, its flags and operations
 *   session.c   the reader: parse and validate, info, token/KV payloads
 *   encoder.c   the encoder: tokens -> file bytes
 *   restore.c   restore of a segment into a context (model codec: plain or speculative)
 *   codec_*.c   the codecs' operations (codec_ids.c: tokens cm cmv cmvd; codec_kv.c: f16..kvq;
 *               codec_kvtc.c: kvtc)
 *   cmv_model.c the cm-family id coders (coder/cmvcodec.h) given a model's vocabulary
 */
#ifndef SKV_SESSION_INT_H
#define SKV_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>

#include "coder/cmvcodec.h"
#include "coder/rangecoder.h"
#include "container/kvcodec.h"
#include "container/kvpred.h"
#include "core/util.h"
#include "seqkv.h"

#define SKV_MAGIC "\x89SKV\r\n\x1a\n"
#define SKV_VERSION 1
#define HDR_SIZE 128
#define SKV_HDR_TOKENIZER 4u /* header flag: bytes 112..120 hold the tokenizer's fingerprint (8 bytes) */
#define SEG_HDR 32
#define SEG_MAGIC "SKVS"
#define ZSTD_LEVEL 19

/* Bits of a raw token id: ceil(log2 n_vocab), at least 1. */
static inline unsigned bits_for(uint32_t n_vocab)
{
    unsigned b = 1;
    while (b < 32 && ((uint64_t)1 << b) < n_vocab) b++;
    return b;
}

typedef struct {
    uint32_t n_tokens;
    uint64_t payload_bytes;
    const uint8_t *payload;
    uint8_t digest[16];
    skv_kvc_header kvh;     /* quantized-KV codecs: the validated sub-header (codec pred: its geometry) */
    skv_kvp_header kph;     /* codec pred: the validated sub-header */
    uint64_t cal_id;        /* codec kvtc: the calibration the segment's stream names */
    uint8_t kvtc_pred;      /* codec kvtc: the stream's predictor (SKV_KVTC_*) */
} seg_view;

struct skv_session {
    uint8_t *data;          /* a copy of the file */
    size_t size;
    skv_session_info info;
    seg_view *segs;
    skv_errbox *err;        /* last error, per thread (skv_session_last_error) */
    struct skv_kvtc_calib *tc; /* codec kvtc: the calibration given (skv_session_set_kvtc_cal), owned */
};

/* ---- session.c ---- */
int skv_codec_is_kv(int codec);     /* codecs.c: the codec stores the KV (SKV_CODEC_F_KV) */
int skv_codec_scheme(int codec);    /* codec_kv.c: the one scheme of a fixed KV codec; -1 for KVQ and the others */
/* XXH3-128 (canonical bytes) of n floats as little-endian binary32. */
int skv_digest_f32(const float *x, size_t n, uint8_t out[16]);
int skv_session_bad(skv_err *err, const char *what); /* SKV_ERR_FORMAT "not a valid .skv file: ..." */
int skv_session_digest_mismatch(const uint8_t *stored, const uint8_t *got, uint32_t i, const char *what, skv_err *err);
/* A tokens payload (zstd of LEB128 ids) of g's n_tokens ids < V into tok. */
int skv_session_decode_tokens(const seg_view *g, uint32_t V, int32_t *tok, skv_err *err);
size_t skv_session_kv_floats(const seg_view *g); /* floats of a KV segment, canonical order */
/* Tokens and dequantized KV (skv_session_kv_floats(g) floats) of a quantized-KV segment.
 * model_free: refuse (SKV_ERR_RANGE) a header whose quantizer setup exceeds the limit of
 * kvcodec.h (with a model, its geometry was checked against the model's first). */
int skv_session_decode_kv(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                          int32_t *tok, skv_err *err);

/* ---- kvpred_session.c: codec pred ---- */
/* "PREDICTOR[,ramp][,surprisal][,step=S][,kstep=S][,vstep=S][,rate=BITS]" (NULL or "":
 * tok,ramp,step=1) -> p, *want_sur (surprisal asked for); SKV_ERR_INVALID_ARG. */
int skv_session_pred_spec(const char *spec, skv_kvp_params *p, int *want_sur);
/* The payload of ctx's first n positions (tokens tok, surprisals sur: NULL or n bits,
 * token frame tframe of tlen bytes) into *out (malloc'ed, *plen bytes); digest: that of
 * the decoded KV. */
int skv_session_pred_payload(const skv_kvp_params *p, const skv_ctx *ctx, const int32_t *tok, const float *sur, size_t n,
                             const uint8_t *tframe, size_t tlen, uint8_t **out, size_t *plen, uint8_t digest[16]);
/* Segment i's SKVP sub-header into segs[i].kph (and its geometry into segs[i].kvh). */
int skv_session_check_pred(skv_session *s, uint32_t i, skv_err *err);
/* Tokens and decoded KV (skv_session_kv_floats(g) floats) of a codec pred segment; with
 * flag bit 1 layer 0 is left zero (model_free: SKV_ERR_UNSUPPORTED): the caller regenerates it. */
int skv_session_decode_pred(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                            int32_t *tok, skv_err *err);

/* ---- restore.c: the steps restore_batch.c shares ---- */
/* SKV_OK if m is the model s was written with (fingerprint and vocabulary), else
 * SKV_ERR_MISMATCH naming both. */
int skv_session_check_model(const skv_session *s, skv_model *m, skv_err *err);
/* The tokenizer's fingerprint against the header's (files that record it; SKV_ERR_MISMATCH
 * "wrong tokenizer ..."); skv_session_check_model includes it. */
int skv_session_check_tokenizer(const skv_session *s, skv_model *m, skv_err *err);
/* SKV_OK if ctx holds exact KV, else SKV_ERR_UNSUPPORTED (a context with kv_quant): every
 * restore refuses such a context before changing it. */
int skv_session_check_ctx(skv_ctx *ctx, skv_err *err);
/* SKV_OK when ctx's kv_cache_type is the session's, else SKV_ERR_MISMATCH with a message. */
int skv_session_check_kv_type(const skv_session *s, const skv_ctx *ctx, skv_err *err);
/* Opens segment i's model-coded stream (i < n_segments) and reads its first token. */
int skv_session_stream_open(const skv_session *s, uint32_t i, skv_rangecoder_dec *d, int32_t *tok0, skv_err *err);
/* Decodes the next token from the logits that predict it (freq, cum: n_vocab and
 * n_vocab + 1 scratch entries). */
int skv_session_stream_next(const skv_session *s, skv_rangecoder_dec *d, const float *logits, uint32_t *freq,
                            uint32_t *cum, int32_t *tok, skv_err *err);
/* Compares ctx's first n_tokens positions of segment i with the stored digest. */
int skv_session_verify_segment(const skv_session *s, uint32_t i, const skv_ctx *ctx, skv_err *err);

#endif
