/* Restore of one segment into a context: codecs tokens and cm by one batched prefill, the
 * quantized-KV codecs by decoding the stored KV (the model is not run), codec model one
 * forward pass per token or per verified block of drafted tokens. */
#include <pthread.h>
#include <stdlib.h>
#include "core/fpguard.h"
#include <string.h>

#include "core/util.h"
#include "engine/draft.h"
#include "engine/layer0.h"
#include "engine/engine.h"
#include "coder/probq.h"
#include "container/codecs.h"

/* Decodes a quantized-KV segment into ctx (skv_ctx_kv_write: the model is not run). */
static int load_kv_segment(const skv_session *s, const seg_view *g, skv_model *m, skv_ctx *ctx, int32_t *tok,
                           skv_err *err)
{
    const skv_kvc_header *h = &g->kvh;
    size_t nf = skv_session_kv_floats(g);
    float *kv;
    int rc;
    if (h->n_layer != (uint32_t)skv_model_info_of(m)->n_layer || h->n_head_kv != (uint32_t)skv_model_info_of(m)->n_head_kv ||
        h->head_dim != (uint32_t)skv_model_info_of(m)->head_dim)
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "KV geometry mismatch: the session stores %u layers x %u KV heads x %u, the model has %d x %d x %d",
                        h->n_layer, h->n_head_kv, h->head_dim, skv_model_info_of(m)->n_layer, skv_model_info_of(m)->n_head_kv, skv_model_info_of(m)->head_dim);
    if (!(kv = malloc(nf * sizeof *kv))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    rc = skv_session_decode_kv(s, g, 0, kv, nf, tok, err);
    /* a pred segment of flag bit 1: layer 0 from the tokens (engine/layer0.h); kph is zero for other codecs */
    if (!rc && (g->kph.flags & 2) &&
        (rc = skv_ctx_layer0_kv(ctx, tok, g->n_tokens, 0, kv)))
        rc = skv_fail(err, rc, "cannot regenerate layer 0: %s", skv_ctx_last_error(ctx));
    if (!rc && (rc = skv_ctx_kv_write(ctx, 0, (int)g->n_tokens, kv)))
        rc = skv_fail(err, rc, "cannot load the KV into the context: %s", skv_ctx_last_error(ctx));
    free(kv);
    return rc;
}

static void report(const skv_restore_params *p, uint64_t done, uint64_t total)
{
    if (p && p->progress) p->progress(p->user, done, total);
}

/* Decodes one token under the frequencies of one logits row. */
static int decode_symbol(skv_rangecoder_dec *d, const float *logits, uint32_t V, unsigned tb, uint32_t *freq,
                         uint32_t *cum, int32_t *tok, skv_err *err)
{
    uint32_t target = 0;
    skv_probq_sym q;
    if (skv_rangecoder_dec_get_freq_pow2(d, tb, &target)) return skv_session_bad(err, "corrupt model-coded stream");
    /* the symbol found by a pass that stops at it: no table built (cum is work space) */
    if (skv_probq_decode(logits, V, tb, target, freq, cum, &q))
        return skv_fail(err, SKV_ERR_MISMATCH, "the model produced non-finite logits");
    if (skv_rangecoder_dec_update(d, q.lo, q.freq)) return skv_session_bad(err, "corrupt model-coded stream");
    *tok = (int32_t)q.sym;
    return SKV_OK;
}

static int forward_failed(skv_ctx *ctx, int rc, skv_err *err)
{
    return skv_fail(err, rc, "forward pass failed: %s", skv_ctx_last_error(ctx));
}

/* Opens a segment's model-coded stream and reads its first token (raw bits). */
static int start_stream(skv_rangecoder_dec *d, const seg_view *g, uint32_t V, int32_t *tok, skv_err *err)
{
    uint32_t v = 0;
    skv_rangecoder_dec_init(d, g->payload, g->payload_bytes);
    if (skv_rangecoder_dec_get_bits(d, bits_for(V), &v) || v >= V)
        return skv_session_bad(err, "corrupt model-coded stream (first token)");
    tok[0] = (int32_t)v;
    return SKV_OK;
}

int skv_session_stream_open(const skv_session *s, uint32_t i, skv_rangecoder_dec *d, int32_t *tok0, skv_err *err)
{
    return start_stream(d, &s->segs[i], s->info.n_vocab, tok0, err);
}

int skv_session_stream_next(const skv_session *s, skv_rangecoder_dec *d, const float *logits, uint32_t *freq,
                            uint32_t *cum, int32_t *tok, skv_err *err)
{
    return decode_symbol(d, logits, s->info.n_vocab, s->info.total_bits, freq, cum, tok, err);
}

int skv_session_verify_segment(const skv_session *s, uint32_t i, const skv_ctx *ctx, skv_err *err)
{
    const seg_view *g = &s->segs[i];
    uint8_t d[16];
    int rc = skv_ctx_kv_digest(ctx, (int)g->n_tokens, d);
    if (rc) return skv_fail(err, rc, "digest failed");
    if (memcmp(d, g->digest, 16))
        return skv_session_digest_mismatch(g->digest, d, i, skv_codec_is_kv(s->info.codec) ? "decoded" : "regenerated", err);
    return SKV_OK;
}

/* Token by token: one forward pass per token. */
static int restore_model_codec(const skv_session *s, const seg_view *g, skv_ctx *ctx, const skv_restore_params *p,
                               int32_t *tok, skv_restore_stats *st, skv_err *err)
{
    uint32_t V = s->info.n_vocab;
    unsigned tb = s->info.total_bits;
    skv_rangecoder_dec d;
    float *logits = malloc(V * sizeof(float));
    uint32_t *freq = malloc(V * sizeof(uint32_t)), *cum = malloc(((size_t)V + 1) * sizeof(uint32_t));
    int rc = SKV_ERR_NOMEM;
    if (!logits || !freq || !cum) {
        skv_fail(err, rc, "out of memory");
        goto done;
    }
    if ((rc = start_stream(&d, g, V, tok, err))) goto done;
    for (uint32_t i = 1; i <= g->n_tokens; i++) {
        int last = i == g->n_tokens;
        if ((rc = skv_ctx_decode(ctx, tok[i - 1], last ? NULL : logits))) {
            rc = forward_failed(ctx, rc, err);
            goto done;
        }
        st->n_passes++;
        if (last) break;
        if ((rc = decode_symbol(&d, logits, V, tb, freq, cum, &tok[i], err))) goto done;
        if ((i & 255) == 0) report(p, i, g->n_tokens);
    }
    if (skv_rangecoder_dec_finish(&d)) rc = skv_session_bad(err, "model-coded stream has trailing or missing bytes");
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

/* Drafting state of one speculative restore. Per match-length class (1, 2, 3, 4..7, 8+):
 * first drafts tried / confirmed (starting optimistic) and skips since the last probe. */
typedef struct spec {
    size_t kmax, k_cur;   /* block size limit, current block size */
    uint32_t gate_try[5], gate_hit[5], gate_skip[5];
    skv_draft *dr;
    uint32_t V;
    skv_draft_fn ext;     /* SKV_DRAFT_EXTERN's source (NULL: n-gram only) */
    void *ext_user;
    float *logits;        /* [kmax][V] */
    uint32_t *freq, *cum; /* [V], [V + 1] */
    int32_t *batch;       /* [kmax] */
} spec;

static int spec_init(spec *sp, const skv_restore_params *p, uint32_t V, uint32_t n)
{
    *sp = (spec){.kmax = p && p->draft_max > 0 ? (size_t)p->draft_max : DRAFT_MAX_DEFAULT, .k_cur = 4,
                 .gate_try = {1, 1, 1, 1, 1}, .gate_hit = {1, 1, 1, 1, 1}, .V = V};
    if (sp->kmax * V > LOGITS_BUDGET) sp->kmax = V >= LOGITS_BUDGET ? 1 : LOGITS_BUDGET / V; /* huge vocabularies */
    if (sp->k_cur > sp->kmax) sp->k_cur = sp->kmax;
    if (p && p->draft == SKV_DRAFT_EXTERN) sp->ext = p->draft_fn, sp->ext_user = p->draft_user;
    sp->freq = malloc(V * sizeof(uint32_t));
    sp->cum = malloc(((size_t)V + 1) * sizeof(uint32_t));
    sp->logits = malloc(sp->kmax * V * sizeof(float));
    sp->batch = malloc(sp->kmax * sizeof *sp->batch);
    if (!sp->logits || !sp->freq || !sp->cum || !sp->batch || skv_draft_create(n, &sp->dr)) return SKV_ERR_NOMEM;
    return SKV_OK;
}

static void spec_free(spec *sp)
{
    skv_draft_free(sp->dr);
    free(sp->logits);
    free(sp->freq);
    free(sp->cum);
    free(sp->batch);
}

/* Fills batch = [tok[pos], drafts...] for a block of at most k rows; returns the number of
 * drafts and in *cls their match-length class (-1: none, or not counted). */
static size_t spec_propose(spec *sp, const int32_t *tok, uint32_t pos, size_t k, int *cls)
{
    unsigned ml = 0;
    /* the history is tok[0..pos]: push what is not in the draft yet */
    for (size_t i = skv_draft_len(sp->dr); i <= pos; i++) skv_draft_push(sp->dr, tok[i]);
    sp->batch[0] = tok[pos];
    *cls = -1;
    if (sp->ext && k > 1) { /* the external source, trusted while its blocks are confirmed */
        size_t ne = sp->ext(sp->ext_user, tok, (size_t)pos + 1, sp->batch + 1, k - 1), ok = 0;
        if (ne > k - 1) ne = k - 1;
        while (ok < ne && sp->batch[ok + 1] >= 0 && (uint32_t)sp->batch[ok + 1] < sp->V) ok++; /* ids in range only */
        if (ok) return ok;
    }
    size_t nd = k > 1 ? skv_draft_propose(sp->dr, sp->batch + 1, k - 1, &ml) : 0;
    if (nd) {
        /* Gate by how often drafts of this match length were right lately: a wrong
         * draft costs a batch row. Gated-off classes still get an occasional probe. */
        *cls = ml >= 8 ? 4 : ml >= 4 ? 3 : (int)ml - 1;
        if (sp->gate_try[*cls] * GATE_PCT > sp->gate_hit[*cls] * 100) {
            if (++sp->gate_skip[*cls] & 15) nd = 0, *cls = -1;
            else nd = 1; /* a probe: one draft token */
        }
    }
    return nd;
}

/* After a block of nd drafts of which j were confirmed: the gate's counts and the block size. */
static void spec_adapt(spec *sp, int cls, size_t nd, size_t j)
{
    if (cls >= 0) {
        sp->gate_try[cls]++;
        sp->gate_hit[cls] += j > 0;
        if (sp->gate_try[cls] >= 64) sp->gate_try[cls] /= 2, sp->gate_hit[cls] /= 2; /* recent history weighs more */
    }
    if (nd > 0 && j == nd) sp->k_cur = sp->k_cur * 2 > sp->kmax ? sp->kmax : sp->k_cur * 2;
    else if (nd > 0) sp->k_cur = j + 2 > 2 ? j + 2 : 2;
    if (sp->k_cur > sp->kmax) sp->k_cur = sp->kmax;
}

/* Decodes from the block's rows while the drafts are confirmed; *j = drafts confirmed. */
static int spec_decode_rows(spec *sp, const skv_session *s, skv_rangecoder_dec *d, int32_t *next, size_t k, size_t *j,
                            skv_err *err)
{
    uint32_t V = s->info.n_vocab;
    int rc;
    for (*j = 0;; ++*j) { /* row j decodes next[j] */
        rc = decode_symbol(d, sp->logits + *j * V, V, s->info.total_bits, sp->freq, sp->cum, &next[*j], err);
        if (rc || *j + 1 >= k || next[*j] != sp->batch[*j + 1]) return rc;
    }
}

/* One block at pos: one pass over [tok[pos], drafts...], then the rows it confirms;
 * *adv = tokens the cache advanced by (drafts confirmed + 1). */
static int spec_block(spec *sp, const skv_session *s, skv_rangecoder_dec *d, skv_ctx *ctx, int32_t *tok, uint32_t pos,
                      uint32_t n, skv_restore_stats *st, size_t *adv, skv_err *err)
{
    size_t k = sp->k_cur, left = (size_t)(n - 1 - pos), j; /* tokens still to decode */
    int cls, rc;
    if (k > left) k = left;
    size_t nd = spec_propose(sp, tok, pos, k, &cls);
    k = nd + 1;
    if ((rc = skv_ctx_prefill(ctx, sp->batch, k, SKV_LOGITS_ALL, sp->logits))) return forward_failed(ctx, rc, err);
    st->n_passes++;
    st->n_drafted += nd;
    if ((rc = spec_decode_rows(sp, s, d, tok + pos + 1, k, &j, err))) return rc;
    /* confirmed: batch[0..j] = tok[pos..pos+j]; tok[pos+j+1] decoded */
    st->n_accepted += j;
    spec_adapt(sp, cls, nd, j);
    if (j + 1 < k && (rc = skv_ctx_truncate(ctx, (int)(pos + j + 1)))) return forward_failed(ctx, rc, err);
    *adv = j + 1;
    return SKV_OK;
}

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
                                    const skv_restore_params *p, int32_t *tok, skv_restore_stats *st, skv_err *err)
{
    uint32_t n = g->n_tokens, next_report = 256, pos = 0; /* cache holds tok[0..pos); tok[pos] decoded */
    skv_rangecoder_dec d;
    spec sp;
    int rc = spec_init(&sp, p, s->info.n_vocab, n);
    if (rc) {
        skv_fail(err, rc, "out of memory");
        goto done;
    }
    if ((rc = start_stream(&d, g, s->info.n_vocab, tok, err))) goto done;
    while (pos + 1 < n) {
        size_t adv = 0;
        if ((rc = spec_block(&sp, s, &d, ctx, tok, pos, n, st, &adv, err))) goto done;
        pos += (uint32_t)adv;
        if (pos >= next_report) {
            report(p, pos, n);
            next_report = (pos | 255) + 1;
        }
    }
    /* the last token needs no logits */
    if ((rc = skv_ctx_decode(ctx, tok[n - 1], NULL))) {
        rc = forward_failed(ctx, rc, err);
        goto done;
    }
    st->n_passes++;
    if (skv_rangecoder_dec_finish(&d)) rc = skv_session_bad(err, "model-coded stream has trailing or missing bytes");
done:
    spec_free(&sp);
    return rc;
}

/* A context with kv_quant runs attention on round trips of its KV, not on the exact
 * cache a session's digest and model codec were made from. The probe is a KV load of no
 * positions: the engine refuses it for exactly those contexts (skv_ctx_kv_write,
 * SKV_ERR_UNSUPPORTED) and it changes nothing in any other. */
int skv_session_check_ctx(skv_ctx *ctx, skv_err *err)
{
    if (skv_ctx_kv_write(ctx, skv_ctx_n_pos(ctx), 0, NULL) != SKV_ERR_UNSUPPORTED) return SKV_OK;
    return skv_fail(err, SKV_ERR_UNSUPPORTED,
                    "the context has a quantized KV cache (kv_quant): a restore needs exact KV; create the context without kv_quant");
}

/* Codecs that store the token ids and are restored by one prefill of them. */
static int prefill_codec(int codec) { return (skv_codec_flags(codec) & SKV_CODEC_F_PREFILL) != 0; }

/* check_restore's model check: the fingerprints (`deferred`: the vocabulary size and the
 * tokenizer's, cheap; the model's is compared after the prefill, see fp_overlap). */
static int check_model_now(const skv_session *s, skv_model *m, int deferred, skv_err *err)
{
    if (deferred && (uint32_t)skv_model_info_of(m)->n_vocab == s->info.n_vocab) return skv_session_check_tokenizer(s, m, err);
    return skv_session_check_model(s, m, err);
}

/* The arguments of a restore of segment i into ctx, before anything is changed. */
static int check_restore(const skv_session *s, skv_model *m, uint32_t i, skv_ctx *ctx, const skv_restore_params *p,
                         int32_t *tokens, size_t cap, int deferred, skv_err *err)
{
    if (!s || !m || !tokens || i >= s->info.n_segments || skv_ctx_model(ctx) != m)
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "invalid argument (NULL session, model or tokens, segment out of range, or a context of another model)");
    if (p && (p->draft < SKV_DRAFT_AUTO || p->draft > SKV_DRAFT_EXTERN || p->draft_max < 0 ||
              (p->draft == SKV_DRAFT_EXTERN && !p->draft_fn) ||
              p->draft_max > DRAFT_MAX_LIMIT))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "invalid restore parameters (draft %d, draft_max %d)",
                        p->draft, p->draft_max);
    const seg_view *g = &s->segs[i];
    if (cap < g->n_tokens) return skv_fail(err, SKV_ERR_RANGE, "token buffer too small (%u needed)", g->n_tokens);
    if (p && p->decoded) {
        char names[128];
        skv_codec_list(names, sizeof names, SKV_CODEC_F_PREFILL, ", ");
        if (!prefill_codec(s->info.codec))
            return skv_fail(err, SKV_ERR_INVALID_ARG,
                            "decoded ids given for a codec %s segment (only %s are restored from ids)",
                            skv_codec_name(s->info.codec), names);
        if (p->n_decoded != g->n_tokens)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "decoded ids: %zu given, segment %u has %u", p->n_decoded,
                            i, g->n_tokens);
        for (size_t k = 0; k < p->n_decoded; k++)
            if (p->decoded[k] < 0 || (uint32_t)p->decoded[k] >= s->info.n_vocab)
                return skv_fail(err, SKV_ERR_INVALID_ARG, "decoded id %zu (%d) outside the vocabulary of %u", k,
                                p->decoded[k], s->info.n_vocab);
    }
    if ((uint32_t)skv_ctx_n_ctx(ctx) < g->n_tokens)
        return skv_fail(err, SKV_ERR_RANGE, "context of %d positions cannot hold a segment of %u tokens",
                        skv_ctx_n_ctx(ctx), g->n_tokens);
    int rc = skv_session_check_ctx(ctx, err);
    if (!rc) rc = skv_session_check_kv_type(s, ctx, err);
    return rc ? rc : check_model_now(s, m, deferred, err);
}

int skv_session_check_kv_type(const skv_session *s, const skv_ctx *ctx, skv_err *err)
{
    if (skv_ctx_kv_cache_type(ctx) == s->info.kv_cache_type) return SKV_OK;
    return skv_fail(err, SKV_ERR_MISMATCH,
                    "the session was made with an %s KV cache and verifies only in one: create the context with "
                    "kv_cache_type %s (this one is %s)", s->info.kv_cache_type ? "f16" : "f32",
                    s->info.kv_cache_type ? "f16" : "f32", skv_ctx_kv_cache_type(ctx) ? "f16" : "f32");
}

/* The ids of a segment of a codec that stores them (prefill_codec), decoded; nf: told when
 * the first ids are final (codecs whose row is `pipelined`; NULL: not told). */
static int decode_ids(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                      int32_t *tokens, const skv_id_notify *nf, skv_err *err)
{
    return skv_codec_row_of(s->info.codec)->decode_ids(s, g, m, p, tokens, nf, err);
}

static int skv_session_segment_tokens_e(const skv_session *s, skv_model *m, uint32_t i, const skv_restore_params *p,
                               int32_t *tokens, size_t cap, uint32_t *n_out, skv_err *err)
{
    if (!s || !m || !tokens || !n_out || i >= s->info.n_segments)
        return skv_fail(err, SKV_ERR_INVALID_ARG,
                        "invalid argument (NULL session, model, tokens or n_out, or segment out of range)");
    const seg_view *g = &s->segs[i];
    char names[128];
    skv_codec_list(names, sizeof names, SKV_CODEC_F_IDS, ", ");
    if (!prefill_codec(s->info.codec))
        return skv_fail(err, SKV_ERR_UNSUPPORTED,
                        "codec %s does not store token ids alone (only %s do): restore the segment",
                        skv_codec_name(s->info.codec), names);
    if (cap < g->n_tokens) return skv_fail(err, SKV_ERR_RANGE, "token buffer too small (%u needed)", g->n_tokens);
    int rc = skv_session_check_model(s, m, err);
    if (!rc) rc = decode_ids(s, g, m, p, tokens, NULL, err);
    *n_out = rc ? 0 : g->n_tokens;
    return rc;
}

int skv_session_segment_tokens(const skv_session *s, skv_model *m, uint32_t i, const skv_restore_params *p,
                               int32_t *tokens, size_t cap, uint32_t *n_out, char *err, size_t errcap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_session_segment_tokens_e(s, m, i, p, tokens, cap, n_out, &e), err, errcap);
}

/* The model's fingerprint on a thread of its own (see "the model's fingerprint beside a
 * prefill" below): wanted, then started where the restore has begun its own threads. */
typedef struct skv_fp_job {
    skv_model *m;
    uint8_t fp[16];
    int want, started;
    pthread_t th;
} fp_job; /* struct skv_fp_job: codecs.h passes it on opaque */

static void *fp_main(void *arg)
{
    fp_job *j = arg;
    (void)skv_model_fingerprint(j->m, j->fp); /* a failure is met again by the check after */
    return NULL;
}

/* Starts the fingerprint's thread if wanted and not yet started (fj may be NULL). */
static void fp_start(fp_job *fj)
{
    if (fj && fj->want && !fj->started) fj->started = pthread_create(&fj->th, NULL, fp_main, fj) == 0;
}

/* ---- a cmv / cmvd segment decoded while its first ids prefill ---- */

#define PIPE_MIN 256 /* ids: shorter segments decode in well under a millisecond */

typedef struct pipe_job {
    const skv_session *s;
    const seg_view *g;
    skv_model *m;
    const skv_restore_params *p;
    int32_t *tok;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int first, done, rc; /* the first ids are ready; the decode has ended, with rc */
    skv_err err;
} pipe_job;

static void pipe_ready(void *user)
{
    pipe_job *j = user;
    pthread_mutex_lock(&j->mu);
    j->first = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void *pipe_main(void *arg)
{
    pipe_job *j = arg;
    skv_id_notify nf = {j->g->n_tokens / 8 > 64 ? j->g->n_tokens / 8 : 64, pipe_ready, j};
    int rc = decode_ids(j->s, j->g, j->m, j->p, j->tok, &nf, &j->err);
    pthread_mutex_lock(&j->mu);
    j->rc = rc, j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Decodes the ids on a thread of its own and prefills the first eighth (at least 64) as
 * soon as they are known, the rest once the decode has ended: the cm decode (~6 us per id)
 * runs beside the prefill (~100 us per token on the bundled model) instead of before it.
 * Two prefill calls give the KV of one (the engine's chunking guarantee; the digest is
 * verified after). 1 when no thread could be started (*rc untouched: decode serially). */
static int restore_pipelined(const skv_session *s, const seg_view *g, skv_model *m, skv_ctx *ctx,
                             const skv_restore_params *p, int32_t *tok, skv_restore_stats *st, fp_job *fj, int *rc,
                             skv_err *err)
{
    pipe_job j = {.s = s, .g = g, .m = m, .p = p, .tok = tok};
    size_t at = g->n_tokens / 8 > 64 ? g->n_tokens / 8 : 64;
    pthread_t th;
    if (pthread_mutex_init(&j.mu, NULL)) return 1;
    if (pthread_cond_init(&j.cv, NULL)) {
        pthread_mutex_destroy(&j.mu);
        return 1;
    }
    if (pthread_create(&th, NULL, pipe_main, &j)) {
        pthread_cond_destroy(&j.cv);
        pthread_mutex_destroy(&j.mu);
        return 1;
    }
    /* the fingerprint after the decode's thread: started first, it had the idle core and
     * the decode waited for a time slice (1-2 ms) before the first ids */
    fp_start(fj);
    pthread_mutex_lock(&j.mu);
    while (!j.first && !j.done) pthread_cond_wait(&j.cv, &j.mu);
    int first = j.first;
    pthread_mutex_unlock(&j.mu);
    int frc = first ? skv_ctx_prefill(ctx, tok, at, SKV_LOGITS_NONE, NULL) : SKV_OK;
    pthread_join(th, NULL);
    if (j.rc) *rc = skv_fail(err, j.rc, "%s", j.err.msg);
    else if (frc) *rc = forward_failed(ctx, frc, err);
    else if ((frc = skv_ctx_prefill(ctx, tok + at, g->n_tokens - at, SKV_LOGITS_NONE, NULL)))
        *rc = forward_failed(ctx, frc, err);
    else *rc = SKV_OK, st->n_passes = 2;
    if (*rc) skv_ctx_truncate(ctx, 0); /* part of a segment is not a restore */
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    return 0;
}

/* Codecs of SKV_CODEC_F_PREFILL: the ids decoded (beside their prefill for a `pipelined`
 * row), or given (p->decoded), then one prefill. */
int skv_codec_restore_prefill(const skv_codec_restore *r)
{
    const seg_view *g = r->g;
    const skv_restore_params *p = r->p;
    int rc;
    if (skv_codec_row_of(r->s->info.codec)->pipelined && !(p && p->decoded) && g->n_tokens >= PIPE_MIN &&
        !restore_pipelined(r->s, g, r->m, r->ctx, p, r->tok, r->st, r->fj, &rc, r->err))
        return rc;
    fp_start(r->fj);
    if (p && p->decoded) { /* decoded before (skv_session_segment_tokens), checked by check_restore */
        if (r->tok != p->decoded) memmove(r->tok, p->decoded, g->n_tokens * sizeof *r->tok);
    } else if ((rc = decode_ids(r->s, g, r->m, p, r->tok, NULL, r->err))) {
        return rc;
    }
    if ((rc = skv_ctx_prefill(r->ctx, r->tok, g->n_tokens, SKV_LOGITS_NONE, NULL)))
        return forward_failed(r->ctx, rc, r->err);
    r->st->n_passes = 1;
    return SKV_OK;
}

/* Codecs of SKV_CODEC_F_KV: the stored KV decoded and loaded (the model is not run). */
int skv_codec_restore_kv(const skv_codec_restore *r)
{
    return load_kv_segment(r->s, r->g, r->m, r->ctx, r->tok, r->err);
}

/* Codec model: one forward pass per token, or per verified block of drafted tokens. AUTO
 * = token by token: measured faster than n-gram drafts on non-repetitive text. */
int skv_codec_restore_model(const skv_codec_restore *r)
{
    const skv_restore_params *p = r->p;
    if (p && (p->draft == SKV_DRAFT_NGRAM || p->draft == SKV_DRAFT_EXTERN))
        return restore_model_codec_spec(r->s, r->g, r->ctx, p, r->tok, r->st, r->err);
    return restore_model_codec(r->s, r->g, r->ctx, p, r->tok, r->st, r->err);
}

static void add_stats(skv_restore_stats *to, const skv_restore_stats *st)
{
    to->n_tokens += st->n_tokens;
    to->n_passes += st->n_passes;
    to->n_drafted += st->n_drafted;
    to->n_accepted += st->n_accepted;
}

/* ---- the model's fingerprint beside a prefill ----
 * The first fingerprint of a model converts and hashes every weight (~0.5 s on a 1.1B F16
 * model, about the prefill of a short segment), and a segment whose ids are coded without
 * the model (tokens, cm, cmv, cmvd: the last two key their caches by the tokenizer's
 * fingerprint) needs nothing of it to prefill: it is computed on a thread of its own
 * meanwhile, and compared after (a wrong model's prefill is then thrown away: the context
 * is emptied and the error is the fingerprint's). The vocabulary size is checked before, so
 * every id is in range. A model codec segment runs the model under its own coding: it
 * checks first, as before. */

static int fp_overlap(const skv_session *s, skv_model *m, const skv_restore_params *p)
{
    return prefill_codec(s->info.codec) && !(p && p->decoded) && m && !skv_model_fingerprint_ready(m);
}

int skv_session_restore_segment(const skv_session *s, skv_model *m, uint32_t i, skv_ctx *ctx,
                                const skv_restore_params *p, int32_t *tokens, size_t cap)
{
    skv_restore_stats st = {0, 0, 0, 0};
    skv_err err = {0};
    int rc;
    if (!ctx) return SKV_ERR_INVALID_ARG;
    int deferred = s && fp_overlap(s, m, p);
    if ((rc = check_restore(s, m, i, ctx, p, tokens, cap, deferred, &err)))
        return skv_ctx_set_error(ctx, rc, err.msg);
    skv_ctx_truncate(ctx, 0); /* clears ctx's last error too */
    fp_job fj = {.m = m, .want = deferred};
    skv_codec_restore r = {s, &s->segs[i], m, ctx, p, tokens, &st, &fj, &err};
    rc = skv_codec_row_of(s->info.codec)->restore(&r);
    if (fj.started) pthread_join(fj.th, NULL);
    if (!rc && deferred && (rc = skv_session_check_model(s, m, &err))) skv_ctx_truncate(ctx, 0);
    if (rc) return skv_ctx_set_error(ctx, rc, err.msg);
    report(p, s->segs[i].n_tokens, s->segs[i].n_tokens);
    if (p && p->verify && (rc = skv_session_verify_segment(s, i, ctx, &err)))
        return skv_ctx_set_error(ctx, rc, err.msg);
    st.n_tokens = s->segs[i].n_tokens;
    if (p && p->stats) add_stats(p->stats, &st);
    return SKV_OK;
}
