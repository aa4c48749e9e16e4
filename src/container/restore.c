/* Restore of one segment into a context: codec tokens by one batched prefill, the
 * quantized-KV codecs by decoding the stored KV (the model is not run), codec model one
 * forward pass per token or per verified block of drafted tokens. */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "engine/draft.h"
#include "engine/model.h"
#include "coder/probq.h"
#include "container/session_int.h"

/* Decodes a quantized-KV segment into ctx (skv_ctx_kv_write: the model is not run). */
static int load_kv_segment(const skv_session *s, const seg_view *g, skv_model *m, skv_ctx *ctx, int32_t *tok,
                           char *err, size_t cap)
{
    const skv_kvc_header *h = &g->kvh;
    size_t nf = skv_session_kv_floats(g);
    float *kv;
    int rc;
    if (h->n_layer != (uint32_t)m->info.n_layer || h->n_head_kv != (uint32_t)m->info.n_head_kv ||
        h->head_dim != (uint32_t)m->info.head_dim)
        return skv_errf(err, cap, SKV_ERR_MISMATCH,
                        "KV geometry mismatch: the session stores %u layers x %u KV heads x %u, the model has %d x %d x %d",
                        h->n_layer, h->n_head_kv, h->head_dim, m->info.n_layer, m->info.n_head_kv, m->info.head_dim);
    if (!(kv = malloc(nf * sizeof *kv))) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    if (!(rc = skv_session_decode_kv(s, g, kv, nf, tok, err, cap)) && (rc = skv_ctx_kv_write(ctx, 0, (int)g->n_tokens, kv)))
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
    if (skv_rangecoder_dec_get_freq_pow2(d, tb, &target)) return skv_session_bad(err, cap, "corrupt model-coded stream");
    size_t sym = skv_probq_find(cum, V, target);
    if (skv_rangecoder_dec_update(d, cum[sym], freq[sym])) return skv_session_bad(err, cap, "corrupt model-coded stream");
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
        return skv_session_bad(err, cap, "corrupt model-coded stream (first token)");
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
        return skv_session_digest_mismatch(g->digest, d, i, skv_codec_is_kv(s->info.codec) ? "decoded" : "regenerated", err, cap);
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
    if (skv_rangecoder_dec_finish(&d)) rc = skv_session_bad(err, cap, "model-coded stream has trailing or missing bytes");
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
    if (skv_rangecoder_dec_finish(&d)) rc = skv_session_bad(err, cap, "model-coded stream has trailing or missing bytes");
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
        if ((rc = skv_session_decode_tokens(g, s->info.n_vocab, tokens, err, errcap))) return rc;
        if ((rc = skv_prefill(ctx, tokens, g->n_tokens, SKV_LOGITS_NONE, NULL)))
            return skv_errf(err, errcap, rc, "forward pass failed: %s", skv_ctx_last_error(ctx));
        stats.n_passes = 1;
    } else if (skv_codec_is_kv(s->info.codec)) {
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
