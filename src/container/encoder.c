/* The .skv encoder: runs the tokens through the model (its context is the live KV cache)
 * and writes each segment as the codec says (layout in session.c, docs/format.md). */
#include <pthread.h>
#include <stdio.h>
#include "core/fpguard.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/util.h"
#include "engine/engine.h"
#include "coder/probq.h"
#include "container/codecs.h"

/* Floats of logits rows one append holds at once (16 MiB): the prefill chunk shrinks for
 * huge vocabularies instead of the buffer growing (chunking never changes a result). */
#define LOGITS_BUDGET ((size_t)1 << 22)
#define ENC_BATCH 256

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
    size_t batch;           /* tokens per prefill when every logits row is needed */
    float *logits;          /* [batch][V], only when every row is needed (needs_all_logits) */
    float *prev;            /* [V] logits after the segment's last token (valid: prev_valid) */
    int prev_valid;
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
    const skv_codec_row *row; /* the codec (codecs.c) */
    skv_codec_state cs;     /* its state: quantizers, predictor, dictionary */
    float *seg_sur;         /* [n_ctx] the model's surprisal (bits) of each segment token (cs.want_sur), 0 at the first */
    int finished;
    pthread_t fp_th;        /* the model's first fingerprint, computed beside the prefills */
    int fp_on;              /* fp_th runs (joined at finish or free) */
    skv_err err;
};

skv_encoder_params skv_encoder_default_params(void)
{
    skv_encoder_params p = {.codec = SKV_CODEC_MODEL, .n_threads = 1};
    return p;
}

const char *skv_encoder_last_error(const skv_encoder *e) { return e ? e->err.msg : "NULL encoder"; }
const skv_ctx *skv_encoder_ctx(const skv_encoder *e) { return e ? e->ctx : NULL; }

int skv_encoder_get_stats(const skv_encoder *e, skv_encoder_stats *st)
{
    if (!e || !st) return SKV_ERR_INVALID_ARG;
    *st = e->st;
    return SKV_OK;
}

static int enc_fail(skv_encoder *e, int rc, const char *msg)
{
    skv_fail(&e->err, 0, "%s", msg);
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

/* The model's first fingerprint (every weight converted and hashed: ~0.5 s on a 1.1B F16
 * model) is needed only by skv_encoder_finish's header: a thread started at creation
 * computes it while the segments prefill (skv_model_fingerprint serialises it with any
 * other caller, e.g. a cmv codec's cache). */
static void *fp_main(void *m)
{
    uint8_t fp[16];
    (void)skv_model_fingerprint(m, fp); /* a failure is met again at finish */
    return NULL;
}

static void fp_join(skv_encoder *e)
{
    if (e->fp_on) pthread_join(e->fp_th, NULL);
    e->fp_on = 0;
}

void skv_encoder_free(skv_encoder *e)
{
    if (!e) return;
    fp_join(e);
    skv_ctx_free(e->ctx);
    skv_codec_state_free(&e->cs);
    free(e->logits);
    free(e->prev);
    free(e->freq);
    free(e->cum);
    free(e->seg_tok);
    free(e->seg_sur);
    free(e->rc_buf);
    free(e->out);
    free(e);
}

/* The codec is coded under the model (its ids need the logits; a frequency total). */
static int model_coded(const skv_encoder *e) { return (e->row->d.flags & SKV_CODEC_F_MODEL) != 0; }

/* Codec and frequency total of p, checked; the codec's state (its setup operation). */
static int setup_codec(skv_encoder *e, const skv_encoder_params *p, skv_err *err)
{
    const skv_model_info *mi = skv_model_info_of(e->m);
    int rc;
    e->row = skv_codec_row_of(p->codec);
    if (!e->row || (p->total_bits && (p->total_bits < 16 || p->total_bits > 28)))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "unknown codec %d or total_bits %u outside 16..28", p->codec,
                        p->total_bits);
    e->p = *p;
    e->p.kv_quant = NULL; /* parsed now: the string need not outlive this call */
    e->V = (uint32_t)mi->n_vocab;
    if (!(e->row->d.flags & SKV_CODEC_F_DICT) && (p->cm_dict || p->n_cm_dict))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "cm_dict is for codec cmvd only");
    if (!(e->row->d.flags & SKV_CODEC_F_CAL) && (p->kvtc_cal || p->kvtc_cal_bytes))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "kvtc_cal is for codec kvtc only");
    if (e->row->setup && (rc = e->row->setup(p, mi, &e->cs, err))) return rc;
    e->p.cm_dict = e->cs.dict;
    e->p.kvtc_cal = NULL, e->p.kvtc_cal_bytes = 0; /* parsed into the state */
    if (!e->p.total_bits) e->p.total_bits = auto_total_bits(e->V);
    if (!model_coded(e)) e->p.total_bits = 0;
    else if (((uint64_t)1 << e->p.total_bits) < e->V) e->p.total_bits = auto_total_bits(e->V);
    e->first_bits = bits_for(e->V);
    return SKV_OK;
}

/* Every token's logits are needed when tokens are coded under the model or their
 * surprisal is measured; otherwise at most the last row (next_logits) is asked for. */
static int needs_all_logits(const skv_encoder *e)
{
    return model_coded(e) || !e->p.skip_entropy || e->cs.want_sur;
}

/* The encoder's context (its live KV cache) and its buffers for segments of n_ctx tokens. */
static int setup_buffers(skv_encoder *e, const skv_encoder_params *p, skv_err *err)
{
    skv_ctx_params cp = skv_ctx_default_params();
    int rc;
    cp.n_ctx = p->n_ctx;
    cp.n_threads = p->n_threads;
    cp.kv_cache_type = p->kv_cache_type;
    if ((rc = skv_ctx_create(e->m, &cp, &e->ctx)))
        return skv_fail(err, rc, "cannot create the context (n_ctx %d, n_threads %d): %s", p->n_ctx,
                        p->n_threads, skv_status_str(rc));
    e->p.n_ctx = skv_ctx_n_ctx(e->ctx);
    size_t V = e->V, S = (size_t)e->p.n_ctx;
    e->batch = V > LOGITS_BUDGET / ENC_BATCH ? (V >= LOGITS_BUDGET ? 1 : LOGITS_BUDGET / V) : ENC_BATCH;
    e->rc_cap = skv_rangecoder_bound(S, e->p.total_bits > e->first_bits ? e->p.total_bits : e->first_bits);
    e->logits = needs_all_logits(e) ? malloc(e->batch * V * sizeof(float)) : NULL;
    e->prev = malloc(V * sizeof(float));
    e->freq = malloc(V * sizeof(uint32_t));
    e->cum = malloc((V + 1) * sizeof(uint32_t));
    e->seg_tok = malloc(S * sizeof(int32_t));
    e->rc_buf = malloc(e->rc_cap);
    e->seg_sur = e->cs.want_sur ? calloc(S, sizeof(float)) : NULL;
    if ((e->cs.want_sur && !e->seg_sur) || (needs_all_logits(e) && !e->logits) || !e->prev || !e->freq || !e->cum || !e->seg_tok || !e->rc_buf || out_reserve(e, HDR_SIZE))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory for the encoder's buffers");
    e->out_len = HDR_SIZE;
    skv_rangecoder_enc_init(&e->rc, e->rc_buf, e->rc_cap);
    return SKV_OK;
}

static int skv_encoder_create_e(skv_model *m, const skv_encoder_params *p, skv_encoder **out, skv_err *err)
{
    skv_encoder_params d = skv_encoder_default_params();
    skv_encoder *e;
    int rc;
    if (!m || !out) return skv_fail(err, SKV_ERR_INVALID_ARG, "skv_encoder_create: NULL model or out");
    *out = NULL;
    if (!p) p = &d;
    if (!(e = calloc(1, sizeof *e))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    e->m = m;
    if ((rc = setup_codec(e, p, err)) || (rc = setup_buffers(e, p, err))) {
        skv_encoder_free(e);
        return rc;
    }
    e->fp_on = !skv_model_fingerprint_ready(m) && pthread_create(&e->fp_th, NULL, fp_main, m) == 0;
    *out = e;
    return SKV_OK;
}

int skv_encoder_create(skv_model *m, const skv_encoder_params *p, skv_encoder **out, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_encoder_create_e(m, p, out, &e), err, errcap);
}

/* Codes token t (segment position pos) under the distribution `logits` (the model's prediction for it). */
static int code_token(skv_encoder *e, const float *logits, int32_t t, size_t pos)
{
    int rc;
    if (e->seg_sur) e->seg_sur[pos] = (float)fmax(0.0, skv_token_surprisal(logits, (int)e->V, t));
    if (!e->p.skip_entropy) e->st.model_bits += skv_token_surprisal(logits, (int)e->V, t);
    e->st.n_model_coded++;
    if (!model_coded(e)) return SKV_OK;
    if ((rc = skv_probq_freqs(logits, e->V, e->p.total_bits, e->freq, e->cum)))
        return enc_fail(e, rc, "the model produced non-finite logits: cannot code under it");
    e->st.coded_bits += skv_probq_cost_bits(e->freq[t], e->p.total_bits);
    if ((rc = skv_rangecoder_enc_put_pow2(&e->rc, e->cum[t], e->freq[t], e->p.total_bits)))
        return enc_fail(e, rc, "range coder output overflow (internal bound violated)");
    return SKV_OK;
}

int skv_codec_model_encode(skv_codec_seg *x)
{
    int rc = skv_codec_ctx_digest(x);
    if (!rc && (rc = skv_rangecoder_enc_finish(x->rc, &x->len)))
        return skv_fail(x->err, rc, "range coder finish failed");
    x->payload = *x->buf;
    return rc;
}

/* The segment record (docs/format.md 2): header, the codec's payload, checksum. */
static int put_segment(skv_encoder *e, const skv_codec_seg *x)
{
    int rc = out_reserve(e, SEG_HDR + x->len + 8);
    if (rc) return enc_fail(e, rc, "out of memory");
    uint8_t *s = e->out + e->out_len;
    memcpy(s, SEG_MAGIC, 4);
    skv_wr32(s + 4, (uint32_t)e->seg_n);
    skv_wr64(s + 8, x->len);
    memcpy(s + 16, x->digest, 16);
    memcpy(s + SEG_HDR, x->payload, x->len);
    skv_wr64(s + SEG_HDR + x->len, XXH3_64bits(s, SEG_HDR + x->len));
    e->out_len += SEG_HDR + x->len + 8;
    e->n_segments++;
    return SKV_OK;
}

/* The current segment, written as its codec says; the context emptied for the next. */
static int flush_segment(skv_encoder *e)
{
    skv_codec_seg x = {.st = &e->cs, .m = e->m, .mi = skv_model_info_of(e->m), .ctx = e->ctx, .tok = e->seg_tok,
                       .sur = e->seg_sur, .n = e->seg_n, .V = e->V, .rc = &e->rc, .buf = &e->rc_buf,
                       .cap = &e->rc_cap, .err = &e->err};
    if (!e->seg_n) return SKV_OK;
    int rc = e->row->encode(&x);
    if (!rc) rc = put_segment(e, &x);
    free(x.owned);
    if (rc) return rc;
    e->seg_n = 0;
    e->prev_valid = 0;
    skv_ctx_truncate(e->ctx, 0);
    skv_rangecoder_enc_init(&e->rc, e->rc_buf, e->rc_cap);
    return SKV_OK;
}

/* Appends k tokens that fit in the current segment (and in one batch when every logits
 * row is needed); want_last: leave the logits after the last of them in e->prev. */
static int append_chunk(skv_encoder *e, const int32_t *t, size_t k, int want_last)
{
    int all = needs_all_logits(e), rc;
    int mode = all ? SKV_LOGITS_ALL : want_last ? SKV_LOGITS_LAST : SKV_LOGITS_NONE;
    if (e->seg_n == 0) {
        if (model_coded(e) && (rc = skv_rangecoder_enc_put_bits(&e->rc, (uint32_t)t[0], e->first_bits)))
            return enc_fail(e, rc, "range coder output overflow");
    } else if ((rc = code_token(e, e->prev, t[0], e->seg_n))) { /* reads e->prev only when all */
        return rc;
    }
    if ((rc = skv_ctx_prefill(e->ctx, t, k, mode, all ? e->logits : want_last ? e->prev : NULL)))
        return enc_fail(e, rc, skv_ctx_last_error(e->ctx));
    e->st.n_logit_rows += all ? k : want_last ? 1 : 0;
    for (size_t j = 1; all && j < k; j++)
        if ((rc = code_token(e, e->logits + (j - 1) * e->V, t[j], e->seg_n + j))) return rc;
    if (all) memcpy(e->prev, e->logits + (k - 1) * e->V, e->V * sizeof(float));
    e->prev_valid = all || want_last;
    memcpy(e->seg_tok + e->seg_n, t, k * sizeof *t);
    e->seg_n += k;
    e->st.n_tokens += k;
    return SKV_OK;
}

/* e->prev for next_logits when no chunk left it: the segment's last token is run again
 * (the cache it rebuilds is bit-identical: docs/determinism.md). */
static int ensure_prev(skv_encoder *e)
{
    int rc;
    if (e->prev_valid || !e->seg_n) return SKV_OK;
    if ((rc = skv_ctx_truncate(e->ctx, (int)e->seg_n - 1)) ||
        (rc = skv_ctx_decode(e->ctx, e->seg_tok[e->seg_n - 1], e->prev)))
        return enc_fail(e, rc, skv_ctx_last_error(e->ctx));
    e->st.n_logit_rows++;
    e->prev_valid = 1;
    return SKV_OK;
}

int skv_encoder_append(skv_encoder *e, const int32_t *tokens, size_t n, float *next_logits)
{
    int rc;
    if (!e) return SKV_ERR_INVALID_ARG;
    skv_err_clear(&e->err);
    if (!tokens && n) return enc_fail(e, SKV_ERR_INVALID_ARG, "NULL tokens");
    if (e->finished) return enc_fail(e, SKV_ERR_INVALID_ARG, "encoder already finished");
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= e->V) return enc_fail(e, SKV_ERR_INVALID_ARG, "token id outside the vocabulary");
    for (size_t done = 0; done < n;) {
        if (e->seg_n == (size_t)e->p.n_ctx) {
            if (!e->p.segment) {
                return skv_fail(&e->err, SKV_ERR_RANGE,
                                "the session exceeds the context of %d tokens (enable segmenting to store consecutive independent segments)",
                                e->p.n_ctx);
            }
            if ((rc = flush_segment(e))) return rc;
        }
        size_t k = n - done, room = (size_t)e->p.n_ctx - e->seg_n;
        if (k > room) k = room;
        if (k > e->batch && needs_all_logits(e)) k = e->batch;
        if ((rc = append_chunk(e, tokens + done, k, next_logits && done + k == n))) return rc;
        done += k;
    }
    if (next_logits && e->seg_n) {
        if ((rc = ensure_prev(e))) return rc;
        memcpy(next_logits, e->prev, e->V * sizeof(float));
    }
    return SKV_OK;
}

int skv_encoder_append_kvdump(skv_encoder *e, const skv_kvdump *d)
{
    if (!e) return SKV_ERR_INVALID_ARG;
    if (!d) return enc_fail(e, SKV_ERR_INVALID_ARG, "NULL KV dump");
    int rc = skv_kvdump_check_model_e(d, e->m, &e->err);
    return rc ? rc : skv_encoder_append(e, d->tokens, d->n_pos, NULL);
}

/* The header's name field (48 bytes, zeroed): general.name cut to 47 bytes, each byte
 * the reader refuses (a control byte: < 0x20 or 0x7f) written as '?', so that a model
 * named with a tab still writes files that open. */
static void put_model_name(uint8_t *dst, const char *name)
{
    size_t n = strlen(name);
    if (n > 47) n = 47;
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = (uint8_t)name[i];
        dst[i] = ch < 0x20 || ch == 0x7f ? (uint8_t)'?' : ch;
    }
}

int skv_encoder_finish(skv_encoder *e, uint8_t **data, size_t *size)
{
    uint8_t fp[16];
    int rc;
    if (!e) return SKV_ERR_INVALID_ARG;
    skv_err_clear(&e->err);
    if (!data || !size) return enc_fail(e, SKV_ERR_INVALID_ARG, "NULL data or size");
    if (e->finished) return enc_fail(e, SKV_ERR_INVALID_ARG, "encoder already finished");
    if ((rc = flush_segment(e))) return rc;
    fp_join(e);
    uint8_t tf[16];
    if ((rc = skv_model_fingerprint(e->m, fp))) return enc_fail(e, rc, "model fingerprint failed");
    if ((rc = skv_model_tokenizer_fingerprint(e->m, tf))) return enc_fail(e, rc, "tokenizer fingerprint failed");
    uint8_t *h = e->out;
    memset(h, 0, HDR_SIZE);
    memcpy(h, SKV_MAGIC, 8);
    skv_wr16(h + 8, SKV_VERSION);
    skv_wr16(h + 10, HDR_SIZE);
    skv_wr32(h + 12, (uint32_t)e->p.codec);
    skv_wr32(h + 16, (e->p.segment ? 1u : 0u) | (skv_ctx_kv_cache_type(e->ctx) == SKV_KV_CACHE_F16 ? 2u : 0u) |
                         SKV_HDR_TOKENIZER);
    skv_wr32(h + 20, e->n_segments);
    skv_wr64(h + 24, e->st.n_tokens);
    skv_wr32(h + 32, (uint32_t)e->p.n_ctx);
    skv_wr32(h + 36, e->V);
    skv_wr32(h + 40, e->p.total_bits);
    skv_wr32(h + 44, (uint32_t)skv_model_info_of(e->m)->bos_id);
    memcpy(h + 48, fp, 16);
    put_model_name(h + 64, skv_model_info_of(e->m)->name);
    memcpy(h + 112, tf, 8);
    skv_wr64(h + 120, XXH3_64bits(h, 120));
    e->finished = 1;
    *data = e->out;
    *size = e->out_len;
    e->out = NULL;
    e->out_len = e->out_cap = 0;
    return SKV_OK;
}

