/* The completion routes: llama-server's POST /completion and OpenAI's /v1/completions and
 * /v1/chat/completions. Each parses and validates its body into a job (prompt tokens,
 * sampling, stops), hands it to the slots and replies with the finished result or a stream. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/chat.h"
#include "server/srv.h"

/* What tokenizing len bytes may allocate: the tokenizer's scratch and the id array (twice:
 * it may be reallocated). Charged before the tokenizer runs (limits.h). */
static size_t tokenize_cost(size_t len)
{
    return len * SRV_TOK_SCRATCH_PER_BYTE + 2 * (len + 8) * sizeof(int32_t);
}

int32_t *srv_tokenize(const srv *s, const char *text, size_t len, int add_special, size_t *n)
{
    size_t cost = tokenize_cost(len);
    if (len > SIZE_MAX / (2 * SRV_TOK_SCRATCH_PER_BYTE) || srv_mem_take(NULL, cost)) return NULL;
    size_t cap = len + 8, need = 0;
    int32_t *t = malloc(cap * sizeof *t);
    int rc = t ? skv_tokenize(s->model, text, len, add_special, t, cap, &need) : SKV_ERR_NOMEM;
    if (rc == SKV_ERR_RANGE) {
        int32_t *big = realloc(t, (need + 1) * sizeof *t);
        rc = big ? skv_tokenize(s->model, text, len, add_special, big, need + 1, &need) : SKV_ERR_NOMEM;
        t = big ? big : t;
    }
    srv_mem_give(NULL, cost);
    if (rc) {
        free(t);
        return NULL;
    }
    *n = need;
    return t;
}

char *srv_detokenize(const srv *s, const int32_t *tok, size_t n, size_t *len)
{
    size_t cap = 64, at = 0;
    char *raw = malloc(cap), piece[256];
    for (size_t i = 0; i < n && raw; i++) {
        size_t k = 0;
        if (skv_token_piece(s->model, tok[i], piece, sizeof piece, &k)) k = 0;
        if (at + k > cap) {
            char *r = realloc(raw, cap = (at + k) * 2);
            if (!r) free(raw);
            raw = r;
        }
        if (raw) memcpy(raw + at, piece, k);
        at += k;
    }
    char *out = raw ? srv_utf8_valid(raw, at, len) : NULL;
    free(raw);
    return out;
}

static int32_t *ids_of(const srv *s, const json_t *a, size_t *n, skv_err *err)
{
    size_t i, cnt = json_array_size(a);
    json_t *v;
    if (cnt >= (size_t)s->n_ctx) /* checked before the copy is made */
        return *n = cnt, skv_fail(err, SKV_ERR_INVALID_ARG, "the prompt has %zu tokens: 1 .. %d fit; more exceeds the available context "
                        "size (%d tokens a slot)", cnt, s->n_ctx - 1, s->n_ctx), NULL;
    int32_t *t = malloc((cnt ? cnt : 1) * sizeof *t);
    if (!t) return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), NULL;
    json_array_foreach(a, i, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= s->info.n_vocab) {
            skv_fail(err, SKV_ERR_INVALID_ARG, "prompt token %zu is not a token id in [0, %d)", i, s->info.n_vocab);
            free(t);
            return NULL;
        }
        t[i] = (int32_t)id;
    }
    *n = cnt;
    return t;
}

static int all_ints(const json_t *a)
{
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) if (!json_is_integer(v)) return 0;
    return 1;
}

/* 1 when every item of a is a number or a string and some are numbers: llama-server's one
 * prompt of ids and texts mixed. */
static int is_mixed(const json_t *a)
{
    size_t i;
    const json_t *v;
    int ints = 0;
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) && !json_is_string(v)) return 0;
        ints |= json_is_integer(v);
    }
    return ints;
}

/* A mixed prompt: the ids as they are, each text tokenized (with BOS when it comes first). */
static int32_t *mixed_tokens(const srv *s, const json_t *a, size_t *n, skv_err *err)
{
    size_t i, at = 0, cap = 16;
    const json_t *v;
    int32_t *out = malloc(cap * sizeof *out);
    json_array_foreach(a, i, v) {
        size_t k = 1;
        int32_t one = (int32_t)json_integer_value(v), *t = &one;
        if (json_is_integer(v) && (json_integer_value(v) < 0 || json_integer_value(v) >= s->info.n_vocab)) {
            free(out);
            return skv_fail(err, SKV_ERR_INVALID_ARG, "prompt token %zu is not a token id in [0, %d)", i, s->info.n_vocab), NULL;
        }
        if (json_is_string(v)) t = srv_tokenize(s, json_string_value(v), json_string_length(v), i == 0, &k);
        int32_t *grown = out && t && at + k > cap ? realloc(out, (cap = (at + k) * 2) * sizeof *out) : out;
        if (!grown || !t || at + k >= (size_t)s->n_ctx) {
            *n = at + k;
            if (t != &one) free(t);
            free(grown ? grown : out);
            return skv_fail(err, SKV_ERR_INVALID_ARG, "the prompt could not be tokenized, or exceeds the context (%d tokens a slot)",
                            s->n_ctx), NULL;
        }
        out = grown;
        memcpy(out + at, t, k * sizeof *t);
        at += k;
        if (t != &one) free(t);
    }
    *n = at;
    return out;
}

int32_t *srv_prompt_tokens(const srv *s, const json_t *prompt, size_t *n, skv_err *err)
{
    int32_t *t = NULL;
    *n = 0;
    if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
        prompt = json_array_get(prompt, 0);
    if (json_is_object(prompt)) { /* llama-server's {"prompt_string", "multimodal_data"} */
        if (json_object_get(prompt, "multimodal_data"))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "multimodal_data is not supported by seqkv serve"), NULL;
        prompt = json_object_get(prompt, "prompt_string");
        if (!json_is_string(prompt)) return skv_fail(err, SKV_ERR_INVALID_ARG, "a prompt object needs a \"prompt_string\""), NULL;
    }
    size_t len = json_string_length(prompt), least = len / (2 * s->max_piece);
    if (json_is_string(prompt) && least >= (size_t)s->n_ctx) { /* cheap: no tokenizer run */
        *n = least;
        skv_fail(err, SKV_ERR_INVALID_ARG, "the prompt has at least %zu tokens (%zu bytes): 1 .. %d fit; more exceeds the available "
                 "context size (%d tokens a slot)", least, len, s->n_ctx - 1, s->n_ctx);
    } else if (json_is_string(prompt)) {
        t = srv_tokenize(s, json_string_value(prompt), len, 1, n);
        if (!t) skv_fail(err, SKV_ERR_INVALID_ARG, "the prompt could not be tokenized");
    } else if (json_is_array(prompt) && is_mixed(prompt) && !json_is_integer(json_array_get(prompt, 0))) {
        t = mixed_tokens(s, prompt, n, err);
    } else if (json_is_array(prompt) && is_mixed(prompt)) {
        t = all_ints(prompt) ? ids_of(s, prompt, n, err) : mixed_tokens(s, prompt, n, err);
    } else if (json_is_array(prompt) && !json_array_size(prompt)) {
        t = ids_of(s, prompt, n, err);
    } else {
        skv_fail(err, SKV_ERR_INVALID_ARG, "\"prompt\" must be a string, an array of token ids, or ids and strings mixed");
    }
    if (t && (*n == 0 || *n >= (size_t)s->n_ctx)) {
        skv_fail(err, SKV_ERR_INVALID_ARG, "the prompt has %zu tokens: 1 .. %d fit; more exceeds the available context size (%d tokens a slot)",
                 *n, s->n_ctx - 1, s->n_ctx);
        free(t);
        t = NULL;
    }
    return t;
}

static int parse_stop(srv_job *j, json_t *stop, skv_err *err)
{
    size_t i;
    json_t *v;
    if (!stop || json_is_null(stop)) return 0;
    if (json_is_string(stop)) stop = json_pack("[O]", stop);
    else json_incref(stop);
    int bad = !json_is_array(stop) || json_array_size(stop) > SRV_MAX_STOP;
    json_array_foreach(stop, i, v) {
        size_t len = json_string_length(v);
        if (bad || !json_is_string(v) || !len || len > SRV_MAX_STOP_LEN) bad = 1;
        else if ((j->stop[j->n_stop] = strdup(json_string_value(v)))) j->n_stop++;
    }
    json_decref(stop);
    if (bad) skv_fail(err, SKV_ERR_INVALID_ARG, "\"stop\": a string or up to %d strings of 1..%d bytes", SRV_MAX_STOP, SRV_MAX_STOP_LEN);
    return bad ? -1 : 0;
}

/* n_keep (-1 = the whole prompt) and n_discard (0 = half) of a context shift. */
static int parse_keep(const srv *s, srv_job *j, json_t *b, skv_err *err)
{
    json_int_t keep = s->p.defaults.n_keep, discard = 0;
    int tokens = 0;
    if (json_unpack(b, "{s?I,s?I,s?b}", "n_keep", &keep, "n_discard", &discard, "return_tokens", &tokens) ||
        keep < -1 || keep > INT32_MAX || discard < 0 || discard > INT32_MAX)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "n_keep: an integer >= -1; n_discard: an integer >= 0; return_tokens: a boolean"),
               -1;
    j->n_keep = (int)keep, j->n_discard = (int)discard, j->return_tokens = tokens;
    return 0;
}

/* The request's seed + 1, else the server's --seed + 1, else a fresh one (never 0). */
static uint64_t seed_of(const srv *s, const json_t *v)
{
    static atomic_ullong counter;
    if (json_is_integer(v) && json_integer_value(v) >= 0) return (uint64_t)json_integer_value(v) + 1;
    if (s->p.defaults.seed >= 0) return (uint64_t)s->p.defaults.seed + 1;
    return ((uint64_t)time(NULL) << 20) ^ (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull) ^ 1;
}

/* The repetition penalties and min-p (defaults: the server's flags). */
static int parse_penalties(const srv *s, srv_job *j, json_t *b, skv_err *err)
{
    const skv_sampling_defaults *d = &s->p.defaults;
    json_int_t last_n = d->repeat_last_n;
    j->min_p = d->min_p, j->repeat_penalty = d->repeat_penalty, j->presence_penalty = d->presence_penalty;
    j->frequency_penalty = d->frequency_penalty;
    if (json_unpack(b, "{s?F,s?F,s?F,s?F,s?I}", "min_p", &j->min_p, "repeat_penalty", &j->repeat_penalty,
                    "presence_penalty", &j->presence_penalty, "frequency_penalty", &j->frequency_penalty,
                    "repeat_last_n", &last_n) ||
        !(j->min_p >= 0 && j->min_p <= 1) || !(j->repeat_penalty > 0 && j->repeat_penalty <= 100) ||
        !(j->presence_penalty >= -100 && j->presence_penalty <= 100) ||
        !(j->frequency_penalty >= -100 && j->frequency_penalty <= 100) || last_n < -1 || last_n > INT32_MAX)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "out of range or not a number: min_p 0..1, repeat_penalty (0, 100], "
                        "presence_penalty and frequency_penalty -100..100, repeat_last_n >= -1"), -1;
    j->repeat_last_n = (int)last_n;
    return 0;
}

/* "samplers": a list of names or one string of characters (llama-server's two forms). */
static int parse_samplers(srv_job *j, const json_t *v, skv_err *err)
{
    if (json_is_string(v)) return srv_samplers_parse(json_string_value(v), 0, j->samplers, &j->n_samplers, err);
    if (!json_is_array(v)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"samplers\" must be a list of names or a string"), -1;
    j->n_samplers = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *x = json_array_get(v, i);
        if (!json_is_string(x)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"samplers\" must be a list of names"), -1;
        if (srv_samplers_add_name(json_string_value(x), json_string_length(x), j->samplers, &j->n_samplers, err)) return -1;
    }
    return 0;
}

/* The chain: typical_p, min_keep, samplers, and ignore_eos, t_max_predict_ms (defaults:
 * the server's flags). An empty "samplers" list samples from the biased logits alone. */
static int parse_chain(const srv *s, srv_job *j, json_t *b, skv_err *err)
{
    const skv_sampling_defaults *d = &s->p.defaults;
    json_int_t keep = d->min_keep, tmax = 0;
    int ignore = d->ignore_eos;
    j->typ_p = d->typ_p;
    if (json_unpack(b, "{s?F,s?I,s?I,s?b}", "typical_p", &j->typ_p, "min_keep", &keep, "t_max_predict_ms", &tmax,
                    "ignore_eos", &ignore) ||
        !(j->typ_p >= 0) || keep < 0 || keep > INT32_MAX || tmax < 0 || tmax > INT32_MAX)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "out of range or the wrong type: typical_p >= 0, min_keep and "
                        "t_max_predict_ms 0..%d, ignore_eos a boolean", INT32_MAX), -1;
    j->min_keep = (int)keep, j->t_max_predict_ms = (int)tmax, j->ignore_eos = ignore, j->eos_id = s->info.eos_id;
    const json_t *v = json_object_get(b, "samplers");
    if (v && !json_is_null(v)) {
        if (parse_samplers(j, v, err)) return -1;
        if (!j->n_samplers) j->samplers[0] = SRV_SMP_NOOP, j->n_samplers = 1; /* none: only the draw */
        return 0;
    }
    memcpy(j->samplers, s->chain, (size_t)s->n_chain);
    j->n_samplers = s->n_chain;
    return 0;
}

/* Sampling and limits shared by every completion route (defaults: the server's flags). */
static int parse_params(const srv *s, srv_job *j, json_t *b, const char *n_key, skv_err *err)
{
    const skv_sampling_defaults *d = &s->p.defaults;
    json_int_t n_predict = d->n_predict, top_k = d->top_k, id_slot = -1;
    double temp = d->temp, top_p = d->top_p;
    int cache = 1, stream = 0;
    json_t *opts = json_object_get(b, "stream_options");
    if (json_unpack(b, "{s?I,s?F,s?I,s?F,s?b,s?I,s?b}", n_key, &n_predict, "temperature", &temp, "top_k",
                    &top_k, "top_p", &top_p, "cache_prompt", &cache, "id_slot", &id_slot, "stream", &stream))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "a field has the wrong type (%s, temperature, top_k, top_p: numbers; "
                        "cache_prompt, stream: booleans)", n_key), -1;
    if (n_predict < 0) n_predict = d->n_predict; /* as llama-server: the request's, else the server's -n */
    if (n_predict < 0) n_predict = s->n_ctx < SRV_MAX_N_PREDICT ? s->n_ctx : SRV_MAX_N_PREDICT;
    if (n_predict > SRV_MAX_N_PREDICT)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "%s %lld exceeds the limit %d", n_key, (long long)n_predict, SRV_MAX_N_PREDICT), -1;
    if (temp < 0 || temp > 100 || top_p < 0 || top_p > 1 || top_k < 0 || top_k > INT32_MAX || id_slot < -1 ||
        id_slot >= s->p.parallel)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "out of range: temperature 0..100, top_p 0..1, top_k 0..%d, id_slot -1..%d",
                        INT32_MAX, s->p.parallel - 1), -1;
    *j = (srv_job){.n_predict = (int)n_predict, .top_k = (int)top_k, .temp = temp, .top_p = top_p, .cache_prompt = cache,
                   .id_slot = (int)id_slot, .stream = stream, .seed = seed_of(s, json_object_get(b, "seed")),
                   .usage_chunk = json_is_true(json_object_get(opts, "include_usage")), .created = srv_unix_now()};
    if (parse_penalties(s, j, b, err) || parse_chain(s, j, b, err) || parse_keep(s, j, b, err)) return -1;
    return parse_stop(j, json_object_get(b, "stop"), err);
}

/* ---- fields llama-server documents that seqkv does not implement yet: refused, never
 * ignored (a client relying on JSON output must not get unconstrained text). A field with
 * its neutral value (absent, null, false, 0, 1 for n, {} for logit_bias, ...) passes. ---- */
static int is_off(const json_t *v) { return !v || json_is_null(v) || json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0); }
static int is_neg(const json_t *v) { return !v || json_is_null(v) || (json_is_number(v) && json_number_value(v) <= 0); }
static int is_empty(const json_t *v)
{
    return is_off(v) || ((json_is_object(v) || json_is_array(v)) && json_object_size(v) + json_array_size(v) == 0);
}
static const struct unsupported {
    const char *field;
    int (*neutral)(const json_t *v);
} k_unsupported[] = {
    {"echo", is_off},              {"dry_multiplier", is_off},    {"xtc_probability", is_off},
    {"mirostat", is_off},          {"top_n_sigma", is_neg},       {"lora", is_empty},
    {"multimodal_data", is_empty}, {"grammar_lazy", is_off},
};

/* 0, or -1 with err naming the first field of b that is set and not implemented. */
static int refuse_unsupported(const json_t *b, skv_err *err)
{
    for (size_t i = 0; i < sizeof k_unsupported / sizeof *k_unsupported; i++) {
        const json_t *v = json_object_get(b, k_unsupported[i].field);
        if (v && !k_unsupported[i].neutral(v))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "\"%s\" is not supported by seqkv serve yet (docs/server.md, \"Not done "
                            "yet\"); leave it out", k_unsupported[i].field), -1;
    }
    return 0;
}

/* ---- logit_bias, in llama-server's forms: [[KEY, VALUE], ...] or {"KEY": VALUE, ...};
 * KEY a token id (a number, or in an object a string of digits) or a text whose every
 * token gets VALUE; VALUE a number, or false for "never". ---- */
static int bias_add(srv_job *j, int32_t id, double v, int n_vocab)
{
    if (id < 0 || id >= n_vocab || j->n_bias >= SRV_MAX_LOGIT_BIAS) return -1;
    j->bias[j->n_bias++] = (struct srv_bias){id, (float)v};
    return 0;
}

/* One entry: key an id (text NULL) or a text whose every token gets the value. */
static int bias_entry(const srv *s, srv_job *j, json_int_t id, const char *text, const json_t *val)
{
    double v = json_is_false(val) ? -INFINITY : json_number_value(val);
    size_t n = 0;
    if (!json_is_number(val) && !json_is_false(val)) return -1;
    if (!text) return id < 0 || id > INT32_MAX ? -1 : bias_add(j, (int32_t)id, v, s->info.n_vocab);
    if (strlen(text) > SRV_MAX_STOP_LEN * 4) return -1;
    int32_t *t = srv_tokenize(s, text, strlen(text), 0, &n);
    int rc = t ? 0 : -1;
    for (size_t i = 0; t && i < n && !rc; i++) rc = bias_add(j, t[i], v, s->info.n_vocab);
    free(t);
    return rc;
}

/* An object's key: a token id when it is all digits (OpenAI's form), else a text. */
static int bias_key(const srv *s, srv_job *j, const char *k, const json_t *v)
{
    size_t d = strspn(k, "0123456789");
    return *k && !k[d] && d < 10 ? bias_entry(s, j, strtol(k, NULL, 10), NULL, v) : bias_entry(s, j, 0, k, v);
}

static int parse_bias(const srv *s, srv_job *j, const json_t *b, skv_err *err)
{
    json_t *lb = json_object_get(b, "logit_bias"), *v;
    const char *k;
    size_t i;
    int bad = 0;
    if (!lb || json_is_null(lb) || (json_is_array(lb) && !json_array_size(lb)) || (json_is_object(lb) && !json_object_size(lb)))
        return 0;
    if (!(j->bias = calloc(SRV_MAX_LOGIT_BIAS, sizeof *j->bias))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1;
    if (json_is_object(lb)) {
        json_object_foreach(lb, k, v) bad |= bias_key(s, j, k, v);
    } else if (json_is_array(lb)) {
        json_array_foreach(lb, i, v) {
            const json_t *key = json_array_get(v, 0);
            bad |= json_array_size(v) != 2 || (!json_is_integer(key) && !json_is_string(key)) ||
                   bias_entry(s, j, json_integer_value(key), json_string_value(key), json_array_get(v, 1));
        }
    } else {
        bad = 1;
    }
    if (bad) skv_fail(err, SKV_ERR_INVALID_ARG, "\"logit_bias\": [[token id or text, number or false], ...] or {\"id or text\": "
                      "number or false}, at most %d tokens in the vocabulary", SRV_MAX_LOGIT_BIAS);
    return bad ? -1 : 0;
}

/* n_probs (llama-server) or logprobs + top_logprobs (OpenAI chat): what to record. */
static int parse_probs(srv_job *j, json_t *b, int fmt, skv_err *err)
{
    json_int_t n = 0, top = 0;
    int lp = 0;
    if (fmt == SRV_FMT_LLAMA) {
        if (json_unpack(b, "{s?I}", "n_probs", &n) || n < 0 || n > SRV_MAX_N_PROBS)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "\"n_probs\": an integer 0..%d", SRV_MAX_N_PROBS), -1;
    } else if (fmt == SRV_FMT_OAI_CHAT) {
        if (json_unpack(b, "{s?b,s?I}", "logprobs", &lp, "top_logprobs", &top) || top < 0 ||
            top > SRV_MAX_N_PROBS || (top && !lp))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "\"logprobs\": a boolean; \"top_logprobs\": 0..%d with logprobs true",
                            SRV_MAX_N_PROBS), -1;
        n = top;
    } else if (!is_off(json_object_get(b, "logprobs"))) {
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"logprobs\" of /v1/completions is not supported by seqkv serve yet; leave it out"), -1;
    }
    j->n_probs = (int)n, j->want_probs = n > 0 || lp;
    j->post_probs = json_is_true(json_object_get(b, "post_sampling_probs"));
    if (j->want_probs && !(j->tok_end = malloc(((size_t)j->n_predict + 1) * sizeof *j->tok_end)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1;
    for (int i = 0; j->tok_end && i <= j->n_predict; i++) j->tok_end[i] = SIZE_MAX; /* not appended yet */
    return 0;
}

/* response_fields: a list of paths, kept '\n'-joined (llama-server's /completion). */
static int parse_fields(srv_job *j, const json_t *b, skv_err *err)
{
    const json_t *f = json_object_get(b, "response_fields"), *v;
    size_t i, len = 0;
    if (!f || json_is_null(f) || (json_is_array(f) && !json_array_size(f))) return 0;
    int bad = !json_is_array(f) || json_array_size(f) > SRV_MAX_FIELDS;
    json_array_foreach(f, i, v) bad |= !json_is_string(v) || !json_string_length(v) ||
                                       json_string_length(v) > SRV_MAX_FIELD_PATH || strchr(json_string_value(v), '\n');
    if (bad) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"response_fields\": up to %d paths of 1..%d bytes", SRV_MAX_FIELDS,
                             SRV_MAX_FIELD_PATH), -1;
    json_array_foreach(f, i, v) len += json_string_length(v) + 1;
    if (!(j->fields = malloc(len))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1;
    len = 0;
    json_array_foreach(f, i, v) {
        memcpy(j->fields + len, json_string_value(v), json_string_length(v));
        len += json_string_length(v);
        j->fields[len++] = '\n';
    }
    j->fields[len - 1] = 0;
    return 0;
}

/* A new job from body b (n_key: the field that caps the generated tokens). */
static srv_job *job_from(srv_req *r, int fmt, const char *n_key, skv_err *err)
{
    srv_job *j = srv_job_new(), req = {0};
    if (!j) return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), NULL;
    if (refuse_unsupported(r->body, err) || parse_params(r->s, &req, r->body, n_key, err) ||
        parse_bias(r->s, &req, r->body, err)) {
        for (int i = 0; i < req.n_stop; i++) free(req.stop[i]);
        free(req.bias);
        srv_job_unref(j);
        return NULL;
    }
    j->bias = req.bias, j->n_bias = req.n_bias;
    j->verbose = r->s->p.verbose || json_is_true(json_object_get(r->body, "verbose"));
    j->return_progress = json_is_true(json_object_get(r->body, "return_progress"));
    j->timings_per_token = json_is_true(json_object_get(r->body, "timings_per_token"));
    j->n_predict = req.n_predict, j->top_k = req.top_k, j->temp = req.temp, j->top_p = req.top_p;
    j->min_p = req.min_p, j->repeat_penalty = req.repeat_penalty, j->presence_penalty = req.presence_penalty;
    j->frequency_penalty = req.frequency_penalty, j->repeat_last_n = req.repeat_last_n;
    j->typ_p = req.typ_p, j->min_keep = req.min_keep, j->t_max_predict_ms = req.t_max_predict_ms;
    j->ignore_eos = req.ignore_eos, j->eos_id = req.eos_id, j->n_samplers = req.n_samplers;
    memcpy(j->samplers, req.samplers, sizeof j->samplers);
    j->cache_prompt = req.cache_prompt, j->id_slot = req.id_slot, j->stream = req.stream, j->seed = req.seed;
    j->usage_chunk = req.usage_chunk, j->created = req.created, j->fmt = fmt, j->n_stop = req.n_stop;
    j->think_format = r->s->p.reasoning_format; /* a chat says its own (think_of) */
    j->n_keep = req.n_keep, j->n_discard = req.n_discard, j->return_tokens = req.return_tokens;
    memcpy(j->stop, req.stop, sizeof j->stop);
    int misplaced = fmt != SRV_FMT_OAI_CHAT && !is_empty(json_object_get(r->body, "tools"));
    if (fmt != SRV_FMT_LLAMA && !is_empty(json_object_get(r->body, "response_fields")))
        skv_fail(err, SKV_ERR_INVALID_ARG, "\"response_fields\" is /completion's (llama-server's); leave it out here");
    if (misplaced) skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools\" belong to /v1/chat/completions; leave them out here");
    if (misplaced || parse_probs(j, r->body, fmt, err) || parse_fields(j, r->body, err) ||
        (fmt != SRV_FMT_LLAMA && j->fields) || srv_grammar_parse(j, r->body, err)) {
        srv_job_unref(j);
        return NULL;
    }
    static atomic_ullong ids;
    snprintf(j->id, sizeof j->id, "%s-%llx-%llu", fmt == SRV_FMT_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)j->created, (unsigned long long)atomic_fetch_add(&ids, 1));
    return j;
}

/* Queues j and replies: a stream, or the finished result. Takes the caller's reference. */
static int run(srv_req *r, srv_job *j)
{
    int code = srv_pool_submit(r->s->pool, j);
    if (code) {
        srv_job_unref(j);
        return code == 503 ? srv_reply_error(r, 503, "all %d slots busy and %d requests queued: retry later",
                                             r->s->p.parallel, SRV_QUEUE_MAX)
                           : srv_reply_error(r, 400, "no slot with that id_slot");
    }
    if (j->stream) return srv_reply_stream(r, j);
    srv_job_wait(j, r->sink->alive, r);
    int rc = j->status ? srv_reply_error(r, j->status, "generation failed: %s", j->err)
                       : srv_reply_json(r, 200, srv_reply_final(r->s, j));
    srv_job_unref(j);
    return rc;
}

/* A list of prompts rather than one: its items are strings, token lists or llama-server's
 * {"prompt_string", "multimodal_data"} objects (a single string in a list is one prompt). */
int srv_prompt_is_batch(const json_t *p)
{
    const json_t *first = json_array_get(p, 0);
    if (!json_is_array(p) || !first || is_mixed(p)) return 0;
    return !(json_array_size(p) == 1 && json_is_string(first));
}

/* One prompt of a batch as tokens (an object's prompt_string; its media refused). */
int32_t *srv_batch_item(const srv *s, const json_t *p, size_t *n, skv_err *err)
{
    if (json_is_object(p)) {
        if (json_array_size(json_object_get(p, "multimodal_data")))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "multimodal_data is not supported by seqkv serve"), NULL;
        p = json_object_get(p, "prompt_string");
        if (!json_is_string(p)) return skv_fail(err, SKV_ERR_INVALID_ARG, "a prompt object needs a \"prompt_string\""), NULL;
    }
    return srv_prompt_tokens(s, p, n, err);
}

/* j's thoughts as like's (think_of): the choices of one chat split and budget alike. */
static int think_like(srv_job *j, const srv_job *like)
{
    j->think = like->think, j->think_opened = like->think_opened, j->think_legacy = like->think_legacy;
    j->think_mark = like->think_mark, j->think_budget = like->think_budget;
    if (!like->n_force) return 0;
    if (!(j->think_force = malloc(like->n_force * sizeof *j->think_force))) return -1;
    memcpy(j->think_force, like->think_force, like->n_force * sizeof *j->think_force);
    j->n_force = like->n_force;
    return 0;
}

/* The jobs of a request that asks for several completions: a batch of prompts, or OpenAI's
 * n copies of one (its tokens tok given; like: the chat's job whose thoughts they share, or
 * NULL), run together. */
static int run_several(srv_req *r, int fmt, const char *n_key, const json_t *batch, const int32_t *tok, size_t n_tok,
                       size_t n, const srv_job *like)
{
    skv_err err = {0};
    srv_job *jobs[SRV_MAX_CHOICES] = {0};
    size_t made = 0, at = 0;
    if (n > SRV_MAX_CHOICES) return srv_reply_error(r, 400, "at most %d prompts or choices (n)", SRV_MAX_CHOICES);
    for (; made < n; made++) {
        srv_job *j = job_from(r, fmt, n_key, &err);
        if (!(jobs[made] = j)) break;
        if (like && think_like(j, like)) {
            skv_fail(&err, SKV_ERR_NOMEM, "out of memory");
            made++;
            break;
        }
        j->prompt = batch ? srv_batch_item(r->s, json_array_get(batch, made), &at, &err) : malloc(n_tok * sizeof *tok);
        if (!j->prompt) {
            made++;
            break;
        }
        if (!batch) memcpy(j->prompt, tok, n_tok * sizeof *tok), at = n_tok;
        j->n_prompt = at;
    }
    if (made == n && jobs[n - 1] && jobs[n - 1]->prompt) return srv_run_many(r, jobs, n);
    for (size_t i = 0; i < made; i++) srv_job_unref(jobs[i]);
    return srv_reply_error(r, 400, "%.255s", err.msg);
}

static int completion(srv_req *r, int fmt, const char *n_key)
{
    skv_err err = {0};
    json_t *prompt = json_object_get(r->body, "prompt");
    json_int_t n = 1;
    if (!prompt) return srv_reply_error(r, 400, "\"prompt\" is required");
    if (json_unpack(r->body, "{s?I}", "n", &n) || n < 1 || n > SRV_MAX_CHOICES)
        return srv_reply_error(r, 400, "\"n\": an integer 1..%d", SRV_MAX_CHOICES);
    if (srv_prompt_is_batch(prompt)) return run_several(r, fmt, n_key, prompt, NULL, 0, json_array_size(prompt), NULL);
    srv_job *j = job_from(r, fmt, n_key, &err);
    if (!j) return srv_reply_error(r, 400, "%.255s", err.msg);
    if (!(j->prompt = srv_prompt_tokens(r->s, prompt, &j->n_prompt, &err))) {
        size_t np = j->n_prompt;
        srv_job_unref(j);
        return np >= (size_t)r->s->n_ctx ? srv_reply_ctx_error(r, np, err.msg) : srv_reply_error(r, 400, "%.255s", err.msg);
    }
    if (n > 1) {
        int rc = run_several(r, fmt, n_key, NULL, j->prompt, j->n_prompt, (size_t)n, NULL);
        srv_job_unref(j);
        return rc;
    }
    return run(r, j);
}

int srv_rt_completion(srv_req *r) { return completion(r, SRV_FMT_LLAMA, "n_predict"); }

/* /infill's inputs as llama-server checks them; 0, or -1 with err. */
static int infill_inputs(const json_t *b, skv_err *err)
{
    const json_t *p = json_object_get(b, "prompt"), *x = json_object_get(b, "input_extra"), *c;
    size_t i;
    if (p && !json_is_string(p)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"prompt\" must be a string"), -1;
    if (!json_is_string(json_object_get(b, "input_prefix"))) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"input_prefix\" is required"), -1;
    if (!json_is_string(json_object_get(b, "input_suffix"))) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"input_suffix\" is required"), -1;
    if (x && !json_is_array(x))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}"), -1;
    json_array_foreach(x, i, c) {
        if (!json_is_string(json_object_get(c, "text")))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "extra_context chunk must contain a \"text\" field with a string value"), -1;
        const json_t *f = json_object_get(c, "filename");
        if (f && !json_is_string(f)) return skv_fail(err, SKV_ERR_INVALID_ARG, "extra_context chunk's \"filename\" field must be a string"), -1;
    }
    return 0;
}

/* A growing token list. */
typedef struct toks { int32_t *t; size_t n, cap; int bad; } toks;

static void toks_add(toks *l, const int32_t *t, size_t n)
{
    if (l->bad || !n) return;
    if (l->n + n > l->cap) {
        size_t cap = (l->n + n) * 2;
        int32_t *g = realloc(l->t, cap * sizeof *g);
        if (!g) return (void)(l->bad = 1);
        l->t = g, l->cap = cap;
    }
    memcpy(l->t + l->n, t, n * sizeof *t);
    l->n += n;
}

static void toks_text(const srv *s, toks *l, const char *text, size_t len)
{
    size_t k = 0;
    int32_t *t = srv_tokenize(s, text, len, 0, &k);
    if (!t && len) l->bad = 1;
    toks_add(l, t, k);
    free(t);
}

static void toks_id(toks *l, int32_t id) { toks_add(l, &id, 1); }

/* The repository context of input_extra as llama-server lays it out: FIM_REP "myproject\n",
 * then per chunk FIM_SEP filename "\n" (or, without FIM_SEP, a "--- snippet ---" line) and
 * its text, then FIM_SEP "filename\n" for the file being completed. */
static void infill_extra(const srv *s, const json_t *x, const int32_t fim[5], toks *e)
{
    static const char snippet[] = "\n\n--- snippet ---\n\n";
    size_t i;
    const json_t *c;
    if (fim[3] >= 0) toks_id(e, fim[3]), toks_text(s, e, "myproject\n", 10);
    json_array_foreach(x, i, c) {
        const char *f = json_string_value(json_object_get(c, "filename")), *t = json_string_value(json_object_get(c, "text"));
        char name[SRV_MAX_FILENAME + 2];
        if (fim[4] >= 0) {
            int k = snprintf(name, sizeof name, "%.*s\n", SRV_MAX_FILENAME, f ? f : "tmp");
            toks_id(e, fim[4]), toks_text(s, e, name, (size_t)k);
        } else {
            toks_text(s, e, snippet, sizeof snippet - 1);
        }
        toks_text(s, e, t, strlen(t));
    }
    if (fim[4] >= 0) toks_id(e, fim[4]), toks_text(s, e, "filename\n", 9);
}

/* llama-server's infill prompt: the tail of the repository context that fits, BOS,
 * FIM_PRE, the prefix's last 3/4 of a batch, the prompt, FIM_SUF, the suffix's first
 * (batch/4 - 2 - prompt) tokens, FIM_MID. */
static int32_t *infill_prompt(const srv *s, const json_t *b, const int32_t fim[5], size_t *n)
{
    const char *pre = json_string_value(json_object_get(b, "input_prefix")), *suf = json_string_value(json_object_get(b, "input_suffix"));
    const char *prompt = json_string_value(json_object_get(b, "prompt"));
    toks e = {0}, p = {0}, q = {0}, m = {0}, out = {0};
    long batch = s->p.n_batch > 0 ? s->p.n_batch : SRV_DEFAULT_BATCH, np = s->p.defaults.n_predict;
    infill_extra(s, json_object_get(b, "input_extra"), fim, &e);
    toks_text(s, &p, pre, strlen(pre));
    toks_text(s, &q, suf, strlen(suf));
    toks_text(s, &m, prompt ? prompt : "", prompt ? strlen(prompt) : 0);
    size_t take_p = p.n < (size_t)(3 * (batch / 4)) ? p.n : (size_t)(3 * (batch / 4));
    long room_q = batch / 4 - 2 - (long)m.n;
    size_t take_q = room_q <= 0 ? 0 : q.n < (size_t)room_q ? q.n : (size_t)room_q;
    long room_e = (long)s->n_ctx - batch - 2 * np;
    size_t take_e = room_e <= 0 ? 0 : e.n < (size_t)room_e ? e.n : (size_t)room_e;
    toks_add(&out, e.t + e.n - take_e, take_e);
    if (s->info.bos_id >= 0) toks_id(&out, s->info.bos_id);
    toks_id(&out, fim[0]), toks_add(&out, p.t + p.n - take_p, take_p), toks_add(&out, m.t, m.n);
    toks_id(&out, fim[1]), toks_add(&out, q.t, take_q), toks_id(&out, fim[2]);
    int bad = e.bad || p.bad || q.bad || m.bad || out.bad;
    free(e.t), free(p.t), free(q.t), free(m.t);
    if (bad) return free(out.t), NULL;
    *n = out.n;
    return out.t;
}

int srv_rt_infill(srv_req *r)
{
    skv_err err = {0};
    int32_t fim[5];
    if (infill_inputs(r->body, &err)) return srv_reply_error(r, 400, "%.255s", err.msg); /* before the model's
                                                        * support (llama-server checks it first): a bad request is one anyway */
    int missing = srv_model_fim(r->s->model, fim);
    if (missing)
        return srv_reply_error(r, 501, "Infill is not supported by this model: %s%s%s", missing & 1 ? "prefix token is "
                               "missing. " : "", missing & 2 ? "suffix token is missing. " : "", missing & 4 ?
                               "middle token is missing. " : "");
    srv_job *j = job_from(r, SRV_FMT_LLAMA, "n_predict", &err);
    if (!j) return srv_reply_error(r, 400, "%.255s", err.msg);
    j->prompt = infill_prompt(r->s, r->body, fim, &j->n_prompt);
    if (!j->prompt || j->n_prompt >= (size_t)r->s->n_ctx) {
        size_t n = j->prompt ? j->n_prompt : 0;
        srv_job_unref(j);
        return n ? srv_reply_ctx_error(r, n, "the infill prompt exceeds the available context size")
                 : srv_reply_error(r, 500, "the infill prompt could not be tokenized");
    }
    return run(r, j);
}
int srv_rt_oai_completion(srv_req *r) { return completion(r, SRV_FMT_OAI_TEXT, "max_tokens"); }

/* A message's text: a string, or the text parts of an array of content parts joined with
 * delim ("\n" as llama-server joins them for the template, "\n\n" for a continued final
 * message) (one pass to size it, one to copy: linear in the parts); its bytes are charged
 * to the request (*charged grows by them; given back after the render). NULL for another
 * type, or a part that is not text (*err says which). */
static char *content_of(const json_t *c, const char *delim, size_t *charged, skv_err *err)
{
    size_t i, total = 0, at = 0, dn = strlen(delim);
    json_t *part;
    if (json_is_string(c)) total = json_string_length(c);
    else if (json_is_null(c)) total = 0; /* an assistant turn without text */
    else if (!json_is_array(c)) return NULL;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (type && (!strcmp(type, "image_url") || !strcmp(type, "input_audio") || !strcmp(type, "video_url")))
            return skv_fail(err, SKV_ERR_UNSUPPORTED, "%s input is not supported - hint: if this is unexpected, you may "
                            "need to provide the mmproj (seqkv serve runs text models only)",
                            !strcmp(type, "image_url") ? "image" : !strcmp(type, "input_audio") ? "audio" : "video"), NULL;
        if (type && strcmp(type, "text"))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "content parts of type \"%.40s\" are not supported (text only)", type), NULL;
        total += json_string_length(json_object_get(part, "text")) + dn;
    }
    char *out = srv_mem_take(NULL, total + 1) ? NULL : malloc(total + 1);
    if (!out) return NULL;
    *charged += total + 1;
    if (json_is_string(c)) memcpy(out, json_string_value(c), at = total);
    json_array_foreach(c, i, part) {
        const json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) continue;
        if (at) memcpy(out + at, delim, dn), at += dn;
        memcpy(out + at, json_string_value(t), json_string_length(t));
        at += json_string_length(t);
    }
    out[at] = 0;
    return out;
}

/* The memory a render of messages of `bytes` bytes may use (charged before it runs): the
 * template's arena and its output, half each. */
static size_t render_arena(size_t bytes)
{
    size_t lim = srv_mem_request_limit();
    return bytes >= (lim - SRV_TMPL_MEM_MIN) / SRV_TMPL_MEM_PER_BYTE ? lim : SRV_TMPL_MEM_MIN + bytes * SRV_TMPL_MEM_PER_BYTE;
}

/* How the messages end, as llama-server reads a request: add_generation_prompt (default
 * true), and continue_final_message (true or "content"), which a final assistant message
 * implies (an assistant prefill: the reply continues its text). 0, or -1 with a message. */
typedef struct render_mode { int gen_prompt, cont; } render_mode;

static int render_mode_of(const json_t *body, const json_t *msgs, render_mode *md, skv_err *err)
{
    const json_t *g = json_object_get(body, "add_generation_prompt"), *c = json_object_get(body, "continue_final_message");
    size_t n = json_array_size(msgs);
    const char *last = n ? json_string_value(json_object_get(json_array_get(msgs, n - 1), "role")) : NULL;
    const char *prev = n > 1 ? json_string_value(json_object_get(json_array_get(msgs, n - 2), "role")) : NULL;
    if ((g && !json_is_boolean(g)) || (c && !json_is_boolean(c) && !json_is_string(c)))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"add_generation_prompt\": a boolean; \"continue_final_message\": a boolean or "
                                     "\"content\""), -1;
    if (json_is_string(c) && strcmp(json_string_value(c), "content"))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"continue_final_message\": \"%.40s\" is not supported (true or \"content\")",
                        json_string_value(c)), -1;
    md->gen_prompt = g ? json_is_true(g) : 1;
    md->cont = json_is_true(c) || json_is_string(c);
    if (!md->cont && last && !strcmp(last, "assistant")) { /* llama-server's assistant prefill */
        if (prev && !strcmp(prev, "assistant"))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "Cannot have 2 or more assistant messages at the end of the list."), -1;
        md->cont = 1, md->gen_prompt = 0;
    }
    if (md->cont && md->gen_prompt)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Cannot set both add_generation_prompt and continue_final_message to true."), -1;
    return 0;
}

/* The rendered prompt with the continued message's text appended: *out replaced. */
static int append_continuation(char **out, const char *text, skv_err *err)
{
    size_t a = strlen(*out), b = strlen(text);
    char *t = srv_mem_take(NULL, a + b + 1) ? NULL : malloc(a + b + 1);
    if (!t) return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1;
    memcpy(t, *out, a);
    memcpy(t + a, text, b + 1);
    free(*out);
    *out = t;
    srv_mem_give(NULL, a + b + 1);
    return 0;
}

/* The generic tools' instructions (sys, taken) in the system message: appended to a leading
 * one, else a new one first (cm, texts: room for one more at the front). Returns the count. */
static size_t with_system(skv_chat_msg *cm, char **texts, size_t n, char *sys, size_t *charged)
{
    if (!sys) return n;
    if (n && !strcmp(cm[0].role, "system")) {
        size_t a = strlen(texts[0]), b = strlen(sys);
        char *j = srv_mem_take(NULL, a + b + 3) ? NULL : malloc(a + b + 3);
        if (!j) return free(sys), n; /* rendered without: the grammar still holds the reply */
        *charged += a + b + 3;
        memcpy(j, texts[0], a), memcpy(j + a, a ? "\n\n" : "", a ? 2 : 0), memcpy(j + a + (a ? 2 : 0), sys, b + 1);
        free(texts[0]), free(sys);
        cm[0].content = texts[0] = j;
        return n;
    }
    memmove(cm + 1, cm, n * sizeof *cm), memmove(texts + 1, texts, n * sizeof *texts);
    cm[0] = (skv_chat_msg){"system", sys, NULL};
    texts[0] = sys;
    return n + 1;
}

/* The template's extra globals, as llama-server sets them: date_string ("26 Jul 2024") and
 * datetime ("Jul 26 2024") of today, enable_thinking (--reasoning, then the request's
 * chat_template_kwargs.enable_thinking, then its reasoning_effort "none" for off), then
 * --chat-template-kwargs and the request's chat_template_kwargs (later ones win). body may
 * be NULL (the server's defaults). The JSON text (malloc'ed) and *thinking, or NULL with err. */
static char *render_globals(const srv *s, const json_t *body, int *thinking, skv_err *err)
{
    json_t *kw = json_object_get(body, "chat_template_kwargs"), *eff = json_object_get(body, "reasoning_effort");
    if (kw && !json_is_object(kw) && !json_is_null(kw))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"chat_template_kwargs\": an object of the template's variables"), NULL;
    if (eff && !json_is_string(eff) && !json_is_null(eff))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"reasoning_effort\": a string (\"none\" turns thinking off)"), NULL;
    const json_t *et = json_object_get(kw, "enable_thinking");
    if (et && !json_is_boolean(et))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "invalid type for \"enable_thinking\" (expected boolean, got %s)",
                        json_is_string(et) ? "string" : "another type"), NULL;
    *thinking = s->p.reasoning != -1;
    if (et) *thinking = json_is_true(et);
    if (json_is_string(eff) && !strcmp(json_string_value(eff), "none")) *thinking = 0;
    char date[32] = "", datetime[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) {
        strftime(date, sizeof date, "%d %b %Y", &tm);
        strftime(datetime, sizeof datetime, "%b %d %Y", &tm);
    }
    json_t *g = json_pack("{s:s,s:s}", "date_string", date, "datetime", datetime);
    if (g && s->kwargs) json_object_update(g, s->kwargs);
    if (g && json_is_object(kw)) json_object_update(g, kw);
    if (g && json_is_string(eff) && strcmp(json_string_value(eff), "none"))
        json_object_set(g, "reasoning_effort", eff);
    if (g) json_object_set_new(g, "enable_thinking", json_boolean(*thinking));
    char *text = g ? srv_json_text(g, NULL, 1) : NULL;
    json_decref(g);
    if (!text) skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    return text;
}

/* Thinking off with a generation prompt: the thought block the prompt opened closed, as
 * llama-server does ("<think>\n" -> "<think>\n</think>"; command-r7b's markers given empty). */
static int close_thinking(char **out, const char *tmpl, skv_err *err)
{
    size_t n = strlen(*out);
    const char *add = NULL;
    if ((n >= 8 && !strcmp(*out + n - 8, "<think>\n")) || (n >= 7 && !strcmp(*out + n - 7, "<think>")))
        add = "</think>";
    else if (tmpl && strstr(tmpl, "<|START_THINKING|>") && !(n >= 16 && !strcmp(*out + n - 16, "<|END_THINKING|>")))
        add = "<|START_THINKING|><|END_THINKING|>";
    return add ? append_continuation(out, add, err) : 0;
}

/* The messages rendered with the chat template as md says (a continued final message: the
 * others with the generation prompt, then its text), with the request's tools (tl, NULL:
 * none) and template variables (body's chat_template_kwargs, ...; NULL: the defaults); NULL
 * with a message in err. */
static char *render_msgs(const srv *s, const json_t *msgs, render_mode md, const srv_tools *tl, const json_t *body,
                         skv_err *err)
{
    size_t n = json_array_size(msgs), i, cap = n + 1; /* one more: the tools' system message */
    json_t *m;
    skv_chat_msg *cm = calloc(cap, sizeof *cm);
    char **texts = calloc(cap, sizeof *texts), **fields = calloc(cap, sizeof *fields), *out = NULL;
    int bad = !cm || !texts || !fields;
    size_t charged = 0;
    int thinking = 1;
    char *globals = bad ? NULL : render_globals(s, body, &thinking, err);
    bad |= !globals;
    json_array_foreach(msgs, i, m) {
        if (bad) break;
        const char *delim = md.cont && i == n - 1 ? "\n\n" : "\n";
        cm[i].role = json_string_value(json_object_get(m, "role"));
        cm[i].content = texts[i] = content_of(json_object_get(m, "content"), delim, &charged, err);
        if (texts[i] && !texts[i][0] && !(s->tool_caps & SKV_CHAT_TOOLS_CALLS)) { /* the calls as the model wrote them */
            char *calls = srv_tools_calls_text(m);
            if (calls) free(texts[i]), cm[i].content = texts[i] = calls;
        }
        bad |= !cm[i].role || !cm[i].content || srv_tools_msg_fields(s->tool_caps, m, &fields[i], err);
        cm[i].fields_json = fields[i];
    }
    if (!bad && !md.cont) n = with_system(cm, texts, n, tl ? srv_tools_system_text(tl) : NULL, &charged);
    size_t bytes = tl && tl->tools_json ? strlen(tl->tools_json) : 0;
    for (i = 0; !bad && i < n; i++)
        bytes += strlen(cm[i].content) + strlen(cm[i].role) + (cm[i].fields_json ? strlen(cm[i].fields_json) : 0);
    size_t arena = render_arena(bytes);
    if (bad) {
        if (!err->msg[0]) skv_fail(err, SKV_ERR_INVALID_ARG, "each message needs a \"role\" string and a \"content\" string or parts");
    } else if (srv_mem_take(NULL, arena)) skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    else {
        int gen = md.cont ? 1 : md.gen_prompt;
        if (skv_chat_render_ext(s->chat_template, cm, n - (size_t)md.cont, tl ? tl->tools_json : NULL, globals, gen,
                                arena, &out, err))
            out = NULL;
        if (out && md.cont && append_continuation(&out, cm[n - 1].content, err)) free(out), out = NULL;
        if (out && !thinking && md.gen_prompt && !md.cont && close_thinking(&out, s->chat_template, err))
            free(out), out = NULL;
        srv_mem_give(NULL, arena);
    }
    for (i = 0; texts && i < cap; i++) free(texts[i]);
    for (i = 0; fields && i < cap; i++) free(fields[i]);
    srv_mem_give(NULL, charged);
    free(texts), free(fields);
    free(cm);
    free(globals);
    return out;
}

/* allow_empty: no messages render too (Anthropic's route, as llama-server; OpenAI's refuses them). */
static char *render(const srv *s, const json_t *body, const srv_tools *tl, int allow_empty, skv_err *err)
{
    const json_t *msgs = json_object_get(body, "messages");
    render_mode md;
    skv_err_clear(err);
    if (!json_is_array(msgs) || (!allow_empty && !json_array_size(msgs)) || json_array_size(msgs) > SRV_MAX_MESSAGES)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"messages\": an array of %d..%d messages", !allow_empty,
                        SRV_MAX_MESSAGES), NULL;
    if (render_mode_of(body, msgs, &md, err)) return NULL;
    return render_msgs(s, msgs, md, tl, body, err);
}

/* render with the request's tools, tools, tool_choice and parallel_tool_calls read into tl
 * (srv_tools_free'd by the caller, whatever the outcome). */
static char *render_req(const srv *s, const json_t *body, srv_tools *tl, int allow_empty, skv_err *err)
{
    skv_err_clear(err);
    if (srv_tools_parse(s, body, tl, err)) return NULL;
    return render(s, body, tl, allow_empty, err);
}

int32_t *srv_chat_history_tokens(const srv *s, json_t *msgs, const char *reply, size_t len, size_t *n)
{
    skv_err err = {0};
    json_t *all = json_copy(msgs), *turn = json_pack("{s:s,s:s%}", "role", "assistant", "content", reply, len);
    char *text = NULL;
    int32_t *t = NULL;
    *n = 0;
    if (all && turn && !json_array_append(all, turn) && json_array_size(all) <= SRV_MAX_MESSAGES)
        text = render_msgs(s, all, (render_mode){0, 0}, NULL, NULL, &err);
    if (text) t = srv_tokenize(s, text, strlen(text), 1, n);
    free(text);
    json_decref(turn);
    json_decref(all);
    return t;
}

/* POST /apply-template: the prompt the chat template makes of the messages, not run. */
int srv_rt_apply_template(srv_req *r)
{
    skv_err err = {0};
    srv_tools tl;
    char *text = render_req(r->s, r->body, &tl, 0, &err);
    srv_tools_free(&tl);
    if (!text) return srv_reply_error(r, 400, "%.255s", err.msg);
    json_t *o = json_pack("{s:s}", "prompt", text);
    free(text);
    return srv_reply_json(r, 200, o);
}

int srv_rt_chat_input_tokens(srv_req *r)
{
    skv_err err = {0};
    size_t n = 0;
    srv_tools tl;
    char *text = render_req(r->s, r->body, &tl, 0, &err);
    srv_tools_free(&tl);
    int32_t *t = text ? srv_tokenize(r->s, text, strlen(text), 1, &n) : NULL;
    free(text);
    if (!t)
        return srv_reply_error(r, err.status == SKV_ERR_UNSUPPORTED ? 500 : 400, "%s",
                               err.msg[0] ? err.msg : "the prompt could not be tokenized");
    free(t);
    return srv_reply_json(r, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n));
}

/* How j's reply splits its thoughts from its content and how long a thought may be
 * (think.c): the request's "reasoning_format", else --reasoning-format; the template's
 * markers; whether the rendered prompt opened the block; the request's
 * "reasoning_budget_tokens" (or "thinking_budget_tokens", Anthropic's budget_tokens), else
 * --reasoning-budget, and "reasoning_budget_message". 0, or -1 with err. */
static int think_of(const srv_req *r, srv_job *j, const char *prompt, skv_err *err)
{
    const json_t *v = json_object_get(r->body, "reasoning_format");
    int f = r->s->p.reasoning_format;
    if (v && !json_is_null(v) && (f = srv_think_format(json_string_value(v))) < 0)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"reasoning_format\": one of none, auto, deepseek, deepseek-legacy"), -1;
    int marker = srv_think_marker(r->s->chat_template);
    j->think_format = f;
    j->think = f == SRV_REASON_NONE ? 0 : marker + 1;
    j->think_legacy = f == SRV_REASON_LEGACY;
    j->think_opened = srv_think_opened(marker, prompt, strlen(prompt));
    j->think_mark = marker + 1;
    j->think_budget = r->s->p.reasoning_budget;
    const char *key = json_object_get(r->body, "reasoning_budget_tokens") ? "reasoning_budget_tokens" : "thinking_budget_tokens";
    const json_t *b = json_object_get(r->body, key), *msg = json_object_get(r->body, "reasoning_budget_message");
    if (b && !json_is_null(b)) {
        if (!json_is_integer(b) || json_integer_value(b) < -1 || json_integer_value(b) > INT_MAX)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "\"%s\": an integer, -1 (unlimited) or more", key), -1;
        if (json_integer_value(b) >= 0) j->think_budget = (int)json_integer_value(b); /* -1: the server's */
    }
    if (msg && !json_is_null(msg) && (!json_is_string(msg) || json_string_length(msg) > SRV_MAX_BUDGET_MESSAGE))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"reasoning_budget_message\": a string of at most %d bytes",
                        SRV_MAX_BUDGET_MESSAGE), -1;
    if (j->think_budget < 0 || marker < 0) return 0;
    char forced[SRV_MAX_BUDGET_MESSAGE + 32];
    const char *m = json_is_string(msg) ? json_string_value(msg) : r->s->p.reasoning_budget_message;
    int n = snprintf(forced, sizeof forced, "%.*s%s", SRV_MAX_BUDGET_MESSAGE, m ? m : "", srv_think_close_marker(marker));
    if (!(j->think_force = srv_tokenize(r->s, forced, (size_t)n, 0, &j->n_force)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1;
    return 0;
}

/* A chat request (OpenAI's; fmt SRV_FMT_ANTHROPIC: one rewritten from Anthropic's, answered
 * in its shapes). */
static int chat(srv_req *r, int fmt)
{
    skv_err err = {0};
    const char *n_key = json_object_get(r->body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    json_int_t n = 1;
    if (json_unpack(r->body, "{s?I}", "n", &n) || n < 1 || n > SRV_MAX_CHOICES)
        return srv_reply_error(r, 400, "\"n\": an integer 1..%d", SRV_MAX_CHOICES);
    srv_job *j = job_from(r, SRV_FMT_OAI_CHAT, n_key, &err);
    if (!j) return srv_reply_error(r, 400, "%.255s", err.msg);
    if (fmt == SRV_FMT_ANTHROPIC) j->fmt = fmt, j->return_progress = 0;
    if (fmt == SRV_FMT_RESPONSES) j->fmt = fmt;
    srv_tools tl;
    char *text = render_req(r->s, r->body, &tl, fmt == SRV_FMT_ANTHROPIC, &err);
    if (text && think_of(r, j, text, &err)) free(text), text = NULL;
    json_t *p = text ? json_string(text) : NULL;
    free(text);
    if (p) j->prompt = srv_prompt_tokens(r->s, p, &j->n_prompt, &err);
    json_decref(p);
    if (j->prompt && (srv_tools_grammar(j, &tl, &err) || (j->tool_fmt && n > 1))) {
        if (j->tool_fmt && n > 1) skv_fail(&err, SKV_ERR_INVALID_ARG, "\"n\" > 1 with \"tools\" is not supported by seqkv serve");
        free(j->prompt), j->prompt = NULL, j->n_prompt = 0;
    }
    srv_tools_free(&tl);
    /* a reply with tools is re-rendered otherwise (its calls, the instructions): no history */
    if (j->prompt && n == 1 && !j->tool_fmt) j->chat_msgs = json_deep_copy(json_object_get(r->body, "messages"));
    if (!j->prompt) {
        size_t np = j->n_prompt;
        srv_job_unref(j);
        return np >= (size_t)r->s->n_ctx ? srv_reply_ctx_error(r, np, err.msg)
                                         : srv_reply_error(r, err.status == SKV_ERR_UNSUPPORTED ? 500 : 400, "%.255s", err.msg);
    }
    if (n > 1) {
        int rc = run_several(r, SRV_FMT_OAI_CHAT, n_key, NULL, j->prompt, j->n_prompt, (size_t)n, j);
        srv_job_unref(j);
        return rc;
    }
    return run(r, j);
}

int srv_rt_oai_chat(srv_req *r) { return chat(r, SRV_FMT_OAI_CHAT); }

/* r's body rewritten by conv (from Anthropic's Messages API, OpenAI's Responses API) into a
 * chat request for the time of fn(r). */
static int as_anthropic(srv_req *r, json_t *(*conv)(const json_t *, skv_err *), int (*fn)(srv_req *r))
{
    skv_err err = {0};
    json_t *orig = r->body, *oai = conv(orig, &err);
    if (!oai) return srv_reply_error(r, err.status == SKV_ERR_NOMEM ? 500 : 400, "%.255s", err.msg);
    r->body = oai;
    int rc = fn(r);
    r->body = orig;
    json_decref(oai);
    return rc;
}

static int anthropic_chat(srv_req *r) { return chat(r, SRV_FMT_ANTHROPIC); }
int srv_rt_anthropic_messages(srv_req *r) { return as_anthropic(r, srv_anthropic_to_oai, anthropic_chat); }
int srv_rt_anthropic_count_tokens(srv_req *r) { return as_anthropic(r, srv_anthropic_to_oai, srv_rt_chat_input_tokens); }
static int responses_chat(srv_req *r) { return chat(r, SRV_FMT_RESPONSES); }
int srv_rt_responses(srv_req *r) { return as_anthropic(r, srv_responses_to_chat, responses_chat); }
int srv_rt_responses_input_tokens(srv_req *r) { return as_anthropic(r, srv_responses_to_chat, srv_rt_chat_input_tokens); }
