/* Constrained sampling: a request's "grammar" (GBNF), "json_schema" or "response_format"
 * (json_object, json_schema) as a grammar (src/grammar/, JSON schemas through schema.c),
 * and the sampling step that keeps to it.
 *
 * The step follows llama.cpp's common_sampler_sample: the token is drawn by the usual chain
 * first; if the grammar accepts it, it stands; if not, every token the grammar refuses gets
 * a logit of -infinity (the allowed set is an integer mask, computed by trying each token's
 * text on the recognizer) and the chain draws again. A seed therefore gives the same tokens
 * as llama-server's on the same logits, and the generator advances one draw more on each
 * refusal, as there. The end-of-sequence token is allowed only where the grammar accepts
 * the text so far. */
#include "core/fpguard.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "server/schema.h"
#include "server/srv.h"

/* The model's token texts as a mask vocabulary (built on a job's first refusal). */
static skv_gvocab *vocab_new(const srv *s)
{
    int n = s->info.n_vocab;
    char *buf = malloc((size_t)n * 256), **texts = malloc((size_t)n * sizeof *texts);
    uint32_t *lens = malloc((size_t)n * sizeof *lens);
    skv_gvocab *v = NULL;
    for (int i = 0; buf && texts && lens && i < n; i++) {
        size_t len = 0;
        texts[i] = buf + (size_t)i * 256;
        if (skv_token_piece(s->model, i, texts[i], 256, &len) || len >= 256) len = 0;
        lens[i] = (uint32_t)len;
    }
    if (buf && texts && lens) v = skv_gvocab_new((const char *const *)texts, lens, (size_t)n);
    free(buf), free(texts), free(lens);
    return v;
}

void srv_grammar_free(srv_job *j)
{
    skv_gmatch_free(j->gmatch);
    skv_gbnf_free(j->grammar);
    skv_gvocab_free(j->gvocab);
    j->gmatch = NULL, j->grammar = NULL, j->gvocab = NULL;
}

/* ---- the request ---- */
static int is_null(const json_t *v) { return !v || json_is_null(v); }

/* The schema a response_format asks for (else `schema`); *bad on an unknown type. A bare
 * json_object gets a new empty schema (any object, as llama-server), left in *owned. */
static const json_t *format_schema(const json_t *rf, const json_t *schema, json_t **owned, skv_err *err, int *bad)
{
    const char *t = json_string_value(json_object_get(rf, "type"));
    *bad = 0;
    if (is_null(rf) || !t || !*t || !strcmp(t, "text")) return schema;
    if (!strcmp(t, "json_object")) {
        const json_t *sc = json_object_get(rf, "schema");
        if (sc) return sc;
        return is_null(schema) ? (*owned = json_object()) : schema;
    }
    if (!strcmp(t, "json_schema")) {
        const json_t *w = json_object_get(rf, "json_schema"), *sc = json_object_get(w, "schema");
        sc = sc ? sc : json_object_get(rf, "schema"); /* {type: json_schema, schema: ...} */
        if (sc) return sc;
        return skv_fail(err, SKV_ERR_INVALID_ARG, "response_format json_schema: give {\"json_schema\": {\"schema\": {...}}}"), *bad = 1, NULL;
    }
    *bad = 1;
    skv_fail(err, SKV_ERR_INVALID_ARG, "response_format type must be one of \"text\", \"json_object\" or \"json_schema\", but got: %.40s", t);
    return NULL;
}

int srv_grammar_set(srv_job *j, const char *gbnf, const char *start, skv_err *err)
{
    skv_err sub = {0};
    if (skv_gbnf_parse(gbnf, strlen(gbnf), start, &j->grammar, &sub)) {
        skv_fail(err, SKV_ERR_INVALID_ARG, "tools grammar: %.239s", sub.msg);
        return -1;
    }
    return 0;
}

static int parse_text(srv_job *j, const char *text, size_t len, skv_err *err)
{
    skv_err sub = {0};
    if (skv_gbnf_parse(text, len, "root", &j->grammar, &sub)) {
        skv_fail(err, SKV_ERR_INVALID_ARG, "invalid grammar: %.239s", sub.msg);
        return -1;
    }
    return 0;
}

int srv_grammar_parse(srv_job *j, const json_t *b, skv_err *err)
{
    const json_t *g = json_object_get(b, "grammar"), *schema = json_object_get(b, "json_schema");
    json_t *owned = NULL;
    int bad;
    if (!is_null(g) && !json_is_string(g)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"grammar\" must be a string (GBNF)"), -1;
    if (json_string_length(g) && !is_null(schema)) return skv_fail(err, SKV_ERR_INVALID_ARG, "Cannot use both json_schema and grammar"), -1;
    schema = format_schema(json_object_get(b, "response_format"), schema, &owned, err, &bad);
    if (bad) return -1;
    if (!is_null(schema)) {
        skv_err sub = {0};
        char *text = srv_schema_to_gbnf(schema, &sub);
        json_decref(owned);
        if (!text) return skv_fail(err, SKV_ERR_INVALID_ARG, "%.239s", sub.msg), -1;
        int rc = parse_text(j, text, strlen(text), err);
        free(text);
        return rc;
    }
    return json_string_length(g) ? parse_text(j, json_string_value(g), json_string_length(g), err) : 0;
}

/* ---- sampling ---- */
static int token_ok(const srv *s, srv_job *j, int32_t tok)
{
    char piece[256];
    size_t len = 0;
    if (tok == s->info.eos_id) return skv_gmatch_accepting(j->gmatch);
    if (skv_token_piece(s->model, tok, piece, sizeof piece, &len) || !len || len >= sizeof piece) return 0;
    return skv_gmatch_accepts(j->gmatch, piece, len);
}

/* logits of refused tokens to -infinity; 0, or -1 when nothing at all is allowed. */
static int apply_mask(const srv *s, srv_job *j, float *logits)
{
    int n = s->info.n_vocab, any = 0;
    uint8_t *allow = malloc((size_t)n);
    if (!allow || (!j->gvocab && !(j->gvocab = vocab_new(s)))) return free(allow), -1;
    skv_gmatch_mask(j->gmatch, j->gvocab, allow);
    if (s->info.eos_id >= 0 && s->info.eos_id < n) allow[s->info.eos_id] = (uint8_t)skv_gmatch_accepting(j->gmatch);
    for (int i = 0; i < n; i++) {
        if (!allow[i]) logits[i] = -INFINITY;
        any |= allow[i];
    }
    free(allow);
    return any ? 0 : -1;
}

int32_t srv_sample_constrained(const srv *s, srv_job *j, const float *logits, const int32_t *hist, size_t n_hist, srv_rng *rng,
                               void *scratch)
{
    int32_t tok = srv_sample(logits, s->info.n_vocab, j, hist, n_hist, rng, scratch);
    if (!j->grammar) return tok;
    if (!j->gmatch && !(j->gmatch = skv_gmatch_new(j->grammar))) return s->info.eos_id;
    if (!token_ok(s, j, tok)) { /* the mask goes on a copy: n_probs reports the model's logits */
        float *masked = malloc((size_t)s->info.n_vocab * sizeof *masked);
        if (masked) memcpy(masked, logits, (size_t)s->info.n_vocab * sizeof *masked);
        int none = !masked || apply_mask(s, j, masked);
        if (j->gmatch && skv_gmatch_exhausted(j->gmatch)) return free(masked), -1;
        if (none) return free(masked), s->info.eos_id; /* nothing fits: end */
        tok = srv_sample(masked, s->info.n_vocab, j, hist, n_hist, rng, scratch);
        free(masked);
    }
    char piece[256];
    size_t len = 0;
    if (tok != s->info.eos_id && !skv_token_piece(s->model, tok, piece, sizeof piece, &len) && len < sizeof piece)
        skv_gmatch_feed(j->gmatch, piece, len);
    return tok;
}
