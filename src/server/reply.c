/* The JSON shapes of completions: finished (llama-server's /completion, OpenAI's
 * text_completion and chat.completion) and streamed as server-sent events:
 *   llama:  data: {"content":DELTA,"stop":false,...} ... data: {"content":"","stop":true,...}
 *   OpenAI: a role chunk (chat), content deltas, the finish chunk, the usage chunk when
 *           stream_options.include_usage, then data: [DONE]
 * and ": keep-alive" comments while a slot is busy elsewhere. */
#include <math.h>
#include <stdlib.h>
#include "core/fpguard.h"
#include <string.h>
#include <time.h>

#include "server/srv.h"

enum { ST_START = 0, ST_BODY = 1, ST_END = 2 };

static const char *stop_type(const srv_job *j)
{
    if (strcmp(j->finish, "stop")) return "limit";
    return j->stopping_word[0] ? "word" : "eos";
}

static json_t *usage(const srv_job *j)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)j->n_prompt, "completion_tokens",
                     (json_int_t)j->n_gen, "total_tokens", (json_int_t)(j->n_prompt + j->n_gen), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)j->n_cached);
}

/* usage with the prompt cache's APPROXIMATE mark (--reuse near), in replies and chunks. */
static json_t *usage_marked(const srv_job *j)
{
    json_t *u = usage(j), *d = u ? json_object_get(u, "prompt_tokens_details") : NULL;
    if (d) json_object_set_new(d, "cached_approximate", json_boolean(j->cache_approx));
    return u;
}

/* llama-server's timings: cache_n, prompt_n (positions run), prompt_ms, predicted_n and
 * predicted_ms, with the per-token times and rates derived as it derives them (the first
 * generated token comes with the prompt's logits: the rate is over n - 1 decode steps;
 * 0 where a divisor is 0). */
static json_t *timings_of(size_t cache_n, size_t prompt_n, double prompt_ms, size_t gen_n, double gen_ms)
{
    double pn = (double)prompt_n, steps = gen_n ? (double)(gen_n - 1) : 0.0;
    return json_pack("{s:I,s:I,s:f,s:f,s:f,s:I,s:f,s:f,s:f}", "cache_n", (json_int_t)cache_n, "prompt_n",
                     (json_int_t)prompt_n, "prompt_ms", prompt_ms, "prompt_per_token_ms", pn > 0 ? prompt_ms / pn : 0.0,
                     "prompt_per_second", prompt_ms > 0 ? pn * 1e3 / prompt_ms : 0.0, "predicted_n", (json_int_t)gen_n,
                     "predicted_ms", gen_ms, "predicted_per_token_ms", steps > 0 ? gen_ms / steps : 0.0,
                     "predicted_per_second", gen_ms > 0 ? 1e3 / gen_ms * steps : 0.0);
}

/* gen_ms: the generation time to report (j->t_gen_ms once it is done). */
static json_t *timings_at(const srv_job *j, double gen_ms)
{
    json_t *t = timings_of(j->n_cached, j->n_prompt - j->n_cached, j->t_prompt_ms, j->n_gen, gen_ms);
    if (!t) return NULL;
    json_object_set_new(t, "cached_bits", json_real(j->cached_bits));
    /* --reuse near (docs/near.md): reused KV computed in another context is APPROXIMATE */
    json_object_set_new(t, "cache_approximate", json_boolean(j->cache_approx));
    json_object_set_new(t, "cache_n_approx", json_integer((json_int_t)j->n_cache_approx));
    json_object_set_new(t, "cache_n_recomputed", json_integer((json_int_t)j->n_near_recomputed));
    return t;
}

static json_t *timings(const srv_job *j) { return timings_at(j, j->t_gen_ms); }

/* text[from..to) of the job as a JSON string (valid UTF-8). Caller holds j->mu. */
static json_t *text_slice(const srv_job *j, size_t from, size_t to)
{
    size_t n = 0;
    char *t = srv_utf8_valid(j->text ? j->text + from : "", to - from, &n);
    json_t *s = t ? json_stringn(t, n) : NULL;
    free(t);
    return s;
}

/* 1 when j's stream sends its thoughts as they grow (think_stream): split, not deepseek-legacy. */
static int think_streamed(const srv_job *j) { return j->think && !j->think_legacy; }

/* The split of j's text [0, n) into thoughts and content (think.c; a job without one: all
 * content). Caller holds j->mu. */
static void think_parts(const srv_job *j, size_t n, int final, srv_think_parts *p)
{
    srv_think_split(j->think - 1, j->think_opened, j->text ? j->text : "", n, final, p);
}

/* llama-server's generation_settings (the sampler fields seqkv has; adaptive-p disabled). */
static json_t *gen_settings(const srv *s, const srv_job *j)
{
    json_t *o = json_pack("{s:i,s:I,s:f,s:i,s:f,s:f,s:i,s:f,s:f,s:f,s:i,s:i,s:b,s:i}", "n_predict", j->n_predict,
                          "seed", (json_int_t)(uint32_t)(j->seed - 1), "temperature", j->temp, "top_k", j->top_k,
                          "top_p", j->top_p, "min_p", j->min_p, "repeat_last_n", j->repeat_last_n, "repeat_penalty",
                          j->repeat_penalty, "presence_penalty", j->presence_penalty, "frequency_penalty",
                          j->frequency_penalty, "n_keep", j->n_keep, "n_discard", j->n_discard, "cache_prompt",
                          j->cache_prompt, "n_ctx", s->n_ctx);
    json_object_set_new(o, "adaptive_target", json_real(-1.0));
    json_object_set_new(o, "adaptive_decay", json_real(0.9));
    json_object_set_new(o, "typical_p", json_real(j->typ_p));
    json_object_set_new(o, "min_keep", json_integer(j->min_keep));
    json_object_set_new(o, "ignore_eos", json_boolean(j->ignore_eos));
    /* llama-server's list: the request's biases, then ignore_eos's end token at -inf (null) */
    json_t *lb = json_array();
    for (size_t i = 0; lb && i < j->n_bias; i++)
        json_array_append_new(lb, json_pack("{s:o,s:i}", "bias", isfinite(j->bias[i].bias) ? json_real(j->bias[i].bias)
                                                                                          : json_null(),
                                            "token", (int)j->bias[i].id));
    if (lb && j->ignore_eos && j->eos_id >= 0)
        json_array_append_new(lb, json_pack("{s:n,s:i}", "bias", "token", (int)j->eos_id));
    json_object_set_new(o, "logit_bias", lb);
    json_object_set_new(o, "t_max_predict_ms", json_integer(j->t_max_predict_ms));
    json_t *names = json_array();
    for (int i = 0; i < j->n_samplers; i++) {
        const char *name = srv_sampler_name(j->samplers[i]);
        if (name) json_array_append_new(names, json_string(name));
    }
    json_object_set_new(o, "samplers", names);
    json_t *stop = json_array();
    for (int i = 0; stop && i < j->n_stop; i++) json_array_append_new(stop, json_string(j->stop[i]));
    json_object_set_new(o, "stop", stop);
    json_object_set_new(o, "max_tokens", json_integer(j->n_predict));
    json_object_set_new(o, "stream", json_boolean(j->stream));
    json_object_set_new(o, "n_probs", json_integer(j->n_probs));
    json_object_set_new(o, "timings_per_token", json_boolean(j->timings_per_token));
    json_object_set_new(o, "post_sampling_probs", json_boolean(j->post_probs));
    json_object_set_new(o, "reasoning_format", json_string(srv_think_format_name(j->think_format)));
    json_object_set_new(o, "reasoning_in_content", json_boolean(j->stream && j->think_format == SRV_REASON_LEGACY));
    /* the samplers seqkv refuses to run, at the values that leave them off (llama.cpp's defaults) */
    json_t *off = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:i,s:f,s:f,s:b,s:b,s:[],s:[],s:[]}",
                            "dynatemp_range", 0.0, "dynatemp_exponent", 1.0, "top_n_sigma", -1.0, "xtc_probability", 0.0,
                            "xtc_threshold", 0.1, "dry_multiplier", 0.0, "dry_base", 1.75, "dry_allowed_length", 2,
                            "dry_penalty_last_n", -1, "mirostat", 0, "mirostat_tau", 5.0, "mirostat_eta", 0.1,
                            "backend_sampling", 0, "grammar_lazy", 0, "grammar_triggers", "preserved_tokens",
                            "lora");
    json_object_update_missing(o, off);
    json_decref(off);
    return o;
}

/* The generated token ids when the request asked for return_tokens, else []. */
static json_t *gen_tokens(const srv_job *j)
{
    json_t *a = json_array();
    for (size_t i = 0; j->return_tokens && a && i < j->n_gen; i++) json_array_append_new(a, json_integer(j->gen[i]));
    return a;
}

/* llama-server's extra fields of a finished /completion: has_new_line, tokens,
 * generation_settings. */
/* The prompt as llama.cpp prints it with its special tokens: each token's piece, a control
 * token (whose piece is empty) as its vocabulary text ("<s>"). */
static json_t *prompt_text(const srv *s, const srv_job *j)
{
    size_t cap = 64, at = 0, n, tl;
    char *raw = malloc(cap), piece[256];
    for (size_t i = 0; raw && i < j->n_prompt; i++) {
        const char *p = piece, *t;
        if (skv_token_piece(s->model, j->prompt[i], piece, sizeof piece, &n)) n = 0;
        if (!n && !skv_token_text(s->model, j->prompt[i], &t, &tl)) p = t, n = tl;
        if (at + n > cap) {
            char *g = realloc(raw, cap = (at + n) * 2);
            if (!g) free(raw);
            raw = g;
        }
        if (raw) memcpy(raw + at, p, n), at += n;
    }
    char *v = raw ? srv_utf8_valid(raw, at, &n) : NULL;
    json_t *o = v ? json_stringn(v, n) : json_string("");
    free(raw);
    free(v);
    return o;
}

static json_t *llama_extra(const srv *s, const srv_job *j, json_t *o)
{
    json_object_set_new(o, "prompt", prompt_text(s, j));
    json_object_set_new(o, "has_new_line", json_boolean(j->text && memchr(j->text, '\n', j->len)));
    json_object_set_new(o, "tokens", gen_tokens(j));
    json_object_set_new(o, "generation_settings", gen_settings(s, j));
    return o;
}

static json_t *llama_final_base(const srv *s, const srv_job *j, json_t *content)
{
    return llama_extra(s, j, json_pack("{s:o,s:b,s:i,s:s,s:I,s:I,s:I,s:b,s:s,s:s,s:o}", "content", content, "stop", 1, "id_slot", j->slot,
                     "model", s->model_id, "tokens_predicted", (json_int_t)j->n_gen, "tokens_evaluated",
                     (json_int_t)j->n_prompt, "tokens_cached", (json_int_t)(j->n_prompt + j->n_gen), "truncated", j->truncated,
                     "stop_type", stop_type(j), "stopping_word", j->stopping_word, "timings", timings(j)));
}

static json_t *llama_final(const srv *s, const srv_job *j, json_t *content)
{
    json_t *o = llama_final_base(s, j, content);
    if (o && j->want_probs && !j->stream)
        json_object_set_new(o, "completion_probabilities", srv_probs_json(s, j, 0, j->n_gen));
    return o;
}

static json_t *oai_choice(const srv_job *j, json_t *text, int delta)
{
    if (j->fmt == SRV_FMT_OAI_TEXT)
        return json_pack("{s:o,s:i,s:n,s:s?}", "text", text, "index", 0, "logprobs", "finish_reason", delta ? NULL : j->finish);
    if (delta) return json_pack("{s:{s:o},s:i,s:n}", "delta", "content", text, "index", 0, "finish_reason");
    return json_pack("{s:{s:s,s:o},s:i,s:s}", "message", "role", "assistant", "content", text, "index", 0,
                     "finish_reason", j->finish);
}

static json_t *oai_object(const srv *s, const srv_job *j, json_t *choices, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", j->id, "object", object, "created", (json_int_t)j->created,
                     "model", s->model_id, "system_fingerprint", SRV_FINGERPRINT, "choices", choices);
}

/* llama-server's response_fields: only the fields named ('/' walks into objects), each under
 * its path as the key; a path that leads nowhere is left out. */
static json_t *only_fields(json_t *o, const char *fields)
{
    json_t *out = json_object();
    for (const char *f = fields; out && f && *f;) {
        size_t n = strcspn(f, "\n");
        char path[SRV_MAX_FIELD_PATH + 1];
        snprintf(path, sizeof path, "%.*s", (int)(n < SRV_MAX_FIELD_PATH ? n : SRV_MAX_FIELD_PATH), f);
        json_t *v = o;
        for (char *save = NULL, *k = strtok_r(path, "/", &save); v && k; k = strtok_r(NULL, "/", &save))
            v = json_object_get(v, k);
        snprintf(path, sizeof path, "%.*s", (int)(n < SRV_MAX_FIELD_PATH ? n : SRV_MAX_FIELD_PATH), f);
        if (v) json_object_set(out, path, v);
        f += n + (f[n] == '\n');
    }
    json_decref(o);
    return out;
}

/* A chat reply with tools: its content (text, or null beside calls) and tool_calls, in a
 * message or (delta) a stream chunk's delta; *finish: "tool_calls" when it has calls. */
static json_t *tool_message(srv_job *j, int delta, const char **finish)
{
    char *content = NULL;
    srv_think_parts tp;
    if (!delta) pthread_mutex_lock(&j->mu); /* a stream's caller holds it */
    think_parts(j, j->len, 1, &tp);
    size_t c0 = j->think_legacy ? 0 : tp.c0;
    json_t *calls = srv_tools_parse_reply(j->tool_fmt, (j->text ? j->text : "") + c0, j->len - c0, &content);
    json_t *text = calls || content ? NULL : text_slice(j, c0, j->len);
    /* a stream's thoughts went out as they grew (think_stream), not in this last delta */
    json_t *reason = tp.r1 > tp.r0 && !(delta && think_streamed(j)) ? text_slice(j, tp.r0, tp.r1) : NULL;
    if (!delta) pthread_mutex_unlock(&j->mu);
    json_t *m = delta ? json_object() : json_pack("{s:s}", "role", "assistant");
    if (content) text = json_string(content);
    free(content);
    if (!delta || (text && json_string_length(text))) json_object_set_new(m, "content", text ? text : json_null());
    else json_decref(text);
    if (reason) json_object_set_new(m, "reasoning_content", reason);
    *finish = j->finish;
    if (calls) {
        *finish = strcmp(j->finish, "length") ? "tool_calls" : j->finish;
        for (size_t i = 0; delta && i < json_array_size(calls); i++)
            json_object_set_new(json_array_get(calls, i), "index", json_integer((json_int_t)i));
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}

/* ---- Anthropic's Messages API (SRV_FMT_ANTHROPIC; llama-server's to_json_anthropic) ---- */

static const char *anth_stop_reason(const srv_job *j, int calls)
{
    if (!strcmp(j->finish, "length")) return "max_tokens";
    return calls ? "tool_use" : "end_turn";
}

static json_t *anth_usage(const srv_job *j)
{
    return json_pack("{s:I,s:I,s:I}", "cache_read_input_tokens", (json_int_t)j->n_cached, "input_tokens",
                     (json_int_t)(j->n_prompt - j->n_cached), "output_tokens", (json_int_t)j->n_gen);
}

/* An OpenAI tool call as a tool_use block (its arguments parsed: an object, else {}). */
static json_t *anth_tool_use(json_t *call)
{
    json_t *f = json_object_get(call, "function");
    const char *args = json_string_value(json_object_get(f, "arguments"));
    json_t *in = args ? json_loads(args, 0, NULL) : NULL;
    if (!json_is_object(in)) json_decref(in), in = json_object();
    return json_pack("{s:s,s:O?,s:O?,s:o}", "type", "tool_use", "id", json_object_get(call, "id"), "name",
                     json_object_get(f, "name"), "input", in);
}

/* The reply's thoughts (reasoning, "" when none), text (content) and tool calls (NULL:
 * none): the held-back text parsed when the request had tools. Caller does not hold j->mu. */
static void anth_parts(srv_job *j, json_t **reason, json_t **text, json_t **calls)
{
    *calls = NULL;
    if (j->tool_fmt) {
        const char *fin;
        json_t *m = tool_message(j, 0, &fin);
        json_t *c = json_object_get(m, "content"), *r = json_object_get(m, "reasoning_content");
        *text = json_is_string(c) ? json_incref(c) : json_string("");
        *reason = json_is_string(r) ? json_incref(r) : json_string("");
        *calls = json_incref(json_object_get(m, "tool_calls"));
        json_decref(m);
        return;
    }
    srv_think_parts tp;
    pthread_mutex_lock(&j->mu);
    think_parts(j, j->len, 1, &tp);
    *text = j->think_legacy ? text_slice(j, 0, j->len) : text_slice(j, tp.c0, tp.c1);
    *reason = text_slice(j, tp.r0, tp.r1);
    pthread_mutex_unlock(&j->mu);
}

static json_t *anth_final(const srv *s, srv_job *j)
{
    json_t *reason, *text, *calls, *content = json_array(), *c;
    size_t i;
    anth_parts(j, &reason, &text, &calls);
    if (json_string_length(reason)) /* thinking first; a local model signs nothing (llama-server's "") */
        json_array_append_new(content, json_pack("{s:s,s:O,s:s}", "type", "thinking", "thinking", reason, "signature", ""));
    json_decref(reason);
    if (json_string_length(text)) json_array_append_new(content, json_pack("{s:s,s:O}", "type", "text", "text", text));
    json_array_foreach(calls, i, c) json_array_append_new(content, anth_tool_use(c));
    json_t *o = json_pack("{s:s+,s:s,s:s,s:o,s:s,s:s,s:o,s:o}", "id", "msg_", j->id + strcspn(j->id, "-") + 1, "type",
                          "message", "role", "assistant", "content", content, "model", s->model_id, "stop_reason",
                          anth_stop_reason(j, json_array_size(calls) > 0), "stop_sequence",
                          j->stopping_word[0] ? json_string(j->stopping_word) : json_null(), "usage", anth_usage(j));
    json_decref(text);
    json_decref(calls);
    return o;
}

/* "event: NAME\ndata: JSON\n\n" appended to *acc (steals o). */
static void aevent(char **acc, size_t *len, const char *name, json_t *o)
{
    size_t n = 0, k = strlen(name);
    char *t = srv_json_text(o, &n, 0);
    json_decref(o);
    if (!t) return;
    char *a = realloc(*acc, *len + k + n + 17);
    if (a) {
        memcpy(a + *len, "event: ", 7);
        memcpy(a + *len + 7, name, k);
        memcpy(a + *len + 7 + k, "\ndata: ", 7);
        memcpy(a + *len + 14 + k, t, n);
        memcpy(a + *len + 14 + k + n, "\n\n", 3);
        *acc = a;
        *len += k + n + 16;
    }
    free(t);
}

static void anth_block_start(char **acc, size_t *len, int index, json_t *block)
{
    aevent(acc, len, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", index,
                                                      "content_block", block));
}

static void anth_block_stop(char **acc, size_t *len, int index)
{
    aevent(acc, len, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", index));
}

/* Thoughts as a thinking_delta of block 0, opening it first. */
static void anth_think_delta(char **acc, size_t *len, srv_job *j, json_t *text)
{
    if (!json_string_length(text)) {
        json_decref(text);
        return;
    }
    if (!j->think_block)
        anth_block_start(acc, len, 0, json_pack("{s:s,s:s}", "type", "thinking", "thinking", "")), j->think_block = 1;
    aevent(acc, len, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", 0,
                                                      "delta", "type", "thinking_delta", "thinking", text));
}

/* The thinking block closed: its (empty) signature_delta first, as Anthropic's API wants. */
static void anth_think_close(char **acc, size_t *len, srv_job *j)
{
    if (j->think_block != 1) return;
    aevent(acc, len, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", 0,
                                                      "delta", "type", "signature_delta", "signature", ""));
    anth_block_stop(acc, len, 0);
    j->think_block = 2;
}

/* Text as a text_delta of the text block (0, or 1 after a thinking block), opening it first. */
static void anth_text_delta(char **acc, size_t *len, srv_job *j, json_t *text)
{
    if (!json_string_length(text)) {
        json_decref(text);
        return;
    }
    anth_think_close(acc, len, j);
    int at = j->think_block ? 1 : 0;
    if (!j->anth_text) anth_block_start(acc, len, at, json_pack("{s:s,s:s}", "type", "text", "text", "")), j->anth_text = 1;
    aevent(acc, len, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", at,
                                                      "delta", "type", "text_delta", "text", text));
}

static void anth_start(const srv *s, srv_job *j, char **acc, size_t *len)
{
    json_t *u = json_pack("{s:i,s:I,s:i}", "cache_read_input_tokens", 0, "input_tokens", (json_int_t)j->n_prompt,
                          "output_tokens", 0);
    aevent(acc, len, "message_start", json_pack("{s:s,s:{s:s+,s:s,s:s,s:[],s:s,s:n,s:n,s:o}}", "type", "message_start",
                                                "message", "id", "msg_", j->id + strcspn(j->id, "-") + 1, "type",
                                                "message", "role", "assistant", "content", "model", s->model_id,
                                                "stop_reason", "stop_sequence", "usage", u));
}

/* The end of an Anthropic stream (caller holds j->mu): the text block closed, the tool calls
 * (a request with tools: its whole reply parsed now) as tool_use blocks, message_delta with
 * the stop reason and usage, message_stop; or an error event. */
static void think_stream(const srv *s, srv_job *j, char **acc, size_t *len, size_t to, size_t tok, int final);

static void anth_finish(const srv *s, srv_job *j, char **acc, size_t *len)
{
    if (j->status) {
        aevent(acc, len, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                                            srv_error_type(j->status), "message", j->err));
        return;
    }
    json_t *calls = NULL, *c;
    size_t i;
    if (j->tool_fmt) {
        pthread_mutex_unlock(&j->mu); /* tool_message locks */
        json_t *reason, *text;
        anth_parts(j, &reason, &text, &calls);
        pthread_mutex_lock(&j->mu);
        if (think_streamed(j)) json_decref(reason), think_stream(s, j, acc, len, j->len, j->n_gen, 1);
        else anth_think_delta(acc, len, j, reason);
        anth_text_delta(acc, len, j, text);
    } else if (think_streamed(j)) {
        think_stream(s, j, acc, len, j->len, j->n_gen, 1); /* what was held back */
    }
    anth_think_close(acc, len, j);
    int at = j->think_block ? 1 : 0;
    if (j->anth_text) anth_block_stop(acc, len, at);
    at += j->anth_text;
    json_array_foreach(calls, i, c) {
        json_t *tu = anth_tool_use(c), *in = json_object_get(tu, "input");
        char *args = in ? srv_json_text(in, NULL, 0) : NULL;
        json_object_set_new(tu, "input", json_object()); /* the input comes as input_json_delta */
        anth_block_start(acc, len, at, tu);
        aevent(acc, len, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                                                          at, "delta", "type", "input_json_delta", "partial_json",
                                                          args ? args : "{}"));
        free(args);
        anth_block_stop(acc, len, at++);
    }
    aevent(acc, len, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:{s:I}}", "type", "message_delta", "delta",
                                                "stop_reason", anth_stop_reason(j, json_array_size(calls) > 0),
                                                "stop_sequence", j->stopping_word[0] ? json_string(j->stopping_word)
                                                                                     : json_null(),
                                                "usage", "output_tokens", (json_int_t)j->n_gen));
    aevent(acc, len, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    json_decref(calls);
}

/* ---- OpenAI's Responses API (SRV_FMT_RESPONSES; llama-server's to_json_oaicompat_resp) ---- */

static json_t *timings_now(const srv_job *j);

static const char *id_tail(const srv_job *j) { return j->id + strcspn(j->id, "-") + 1; }

static json_t *resp_usage(const srv_job *j)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "input_tokens", (json_int_t)j->n_prompt, "output_tokens",
                     (json_int_t)j->n_gen, "total_tokens", (json_int_t)(j->n_prompt + j->n_gen), "input_tokens_details",
                     "cached_tokens", (json_int_t)j->n_cached);
}

static json_t *resp_text_part(json_t *text)
{
    return json_pack("{s:s,s:[],s:[],s:O}", "type", "output_text", "annotations", "logprobs", "text", text);
}

static json_t *resp_message(const srv_job *j, json_t *text, const char *status)
{
    return json_pack("{s:[o],s:s+,s:s,s:s,s:s}", "content", resp_text_part(text), "id", "msg_", id_tail(j), "role",
                     "assistant", "status", status, "type", "message");
}

static json_t *resp_call(json_t *call)
{
    json_t *f = json_object_get(call, "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    return json_pack("{s:s+,s:s,s:s,s:O?,s:s+,s:O?}", "id", "fc_", id ? id : "", "type", "function_call", "status",
                     "completed", "arguments", json_object_get(f, "arguments"), "call_id", "call_", id ? id : "", "name",
                     json_object_get(f, "name"));
}

/* A reasoning item of the reply's thoughts (status NULL: none, as llama-server's stream). */
static json_t *resp_reason_item(const srv_job *j, json_t *reason, const char *status)
{
    json_t *o = json_pack("{s:s+,s:[],s:s,s:[{s:O,s:s}],s:s}", "id", "rs_", id_tail(j), "summary", "type", "reasoning",
                          "content", "text", reason, "type", "reasoning_text", "encrypted_content", "");
    if (o && status) json_object_set_new(o, "status", json_string(status));
    return o;
}

/* The output items: the reasoning (when there are thoughts), the message (when it has
 * text), then the function calls. */
static json_t *resp_output(srv_job *j)
{
    json_t *reason, *text, *calls, *c, *out = json_array();
    size_t i;
    anth_parts(j, &reason, &text, &calls);
    if (json_string_length(reason)) json_array_append_new(out, resp_reason_item(j, reason, "completed"));
    json_decref(reason);
    if (json_string_length(text)) json_array_append_new(out, resp_message(j, text, "completed"));
    json_array_foreach(calls, i, c) json_array_append_new(out, resp_call(c));
    json_decref(text);
    json_decref(calls);
    return out;
}

static json_t *resp_object(const srv *s, srv_job *j, json_t *output)
{
    json_int_t now = (json_int_t)srv_unix_now();
    return json_pack("{s:I,s:I,s:s+,s:s,s:s,s:o,s:s,s:o}", "completed_at", now, "created_at", (json_int_t)j->created,
                     "id", "resp_", id_tail(j), "model", s->model_id, "object", "response", "output", output, "status",
                     "completed", "usage", resp_usage(j));
}

static json_t *resp_in_progress(const srv_job *j, const char *type)
{
    return json_pack("{s:s,s:{s:s+,s:s,s:s}}", "type", type, "response", "id", "resp_", id_tail(j), "object", "response",
                     "status", "in_progress");
}

/* Thoughts as a reasoning_text delta of the reasoning item, adding it first. */
static void resp_reason_delta(char **acc, size_t *len, srv_job *j, json_t *text)
{
    if (!json_string_length(text)) {
        json_decref(text);
        return;
    }
    if (!j->think_block) {
        aevent(acc, len, "response.output_item.added",
               json_pack("{s:s,s:{s:s+,s:[],s:s,s:[],s:s,s:s}}", "type", "response.output_item.added", "item", "id",
                         "rs_", id_tail(j), "summary", "type", "reasoning", "content", "encrypted_content", "",
                         "status", "in_progress"));
        j->think_block = 1;
    }
    aevent(acc, len, "response.reasoning_text.delta", json_pack("{s:s,s:o,s:s+}", "type", "response.reasoning_text.delta",
                                                                "delta", text, "item_id", "rs_", id_tail(j)));
}

/* The reasoning item done (its whole text: the thoughts are complete once text follows or
 * the reply ended). Caller holds j->mu. */
static void resp_reason_close(char **acc, size_t *len, srv_job *j)
{
    if (j->think_block != 1) return;
    srv_think_parts tp;
    think_parts(j, j->len, 1, &tp);
    json_t *reason = text_slice(j, tp.r0, tp.r1);
    aevent(acc, len, "response.output_item.done", json_pack("{s:s,s:o}", "type", "response.output_item.done", "item",
                                                            resp_reason_item(j, reason, NULL)));
    json_decref(reason);
    j->think_block = 2;
}

/* Text as an output_text delta of the message item, opening it first. */
static void resp_text_delta(char **acc, size_t *len, srv_job *j, json_t *text)
{
    if (!json_string_length(text)) {
        json_decref(text);
        return;
    }
    resp_reason_close(acc, len, j);
    if (!j->anth_text) {
        aevent(acc, len, "response.output_item.added",
               json_pack("{s:s,s:{s:[],s:s+,s:s,s:s,s:s}}", "type", "response.output_item.added", "item", "content",
                         "id", "msg_", id_tail(j), "role", "assistant", "status", "in_progress", "type", "message"));
        aevent(acc, len, "response.content_part.added",
               json_pack("{s:s,s:s+,s:{s:s,s:s}}", "type", "response.content_part.added", "item_id", "msg_", id_tail(j),
                         "part", "type", "output_text", "text", ""));
        j->anth_text = 1;
    }
    json_t *e = json_pack("{s:s,s:s+,s:o}", "type", "response.output_text.delta", "item_id", "msg_", id_tail(j), "delta",
                          text);
    if (e && j->timings_per_token) json_object_set_new(e, "timings", timings_now(j));
    aevent(acc, len, "response.output_text.delta", e);
}

static void resp_progress(char **acc, size_t *len, srv_job *j)
{
    const struct srv_progress *p = &j->prog[j->n_prog_sent++];
    json_t *e = resp_in_progress(j, "response.in_progress");
    if (e) json_object_set_new(e, "prompt_progress", json_pack("{s:I,s:I,s:I,s:I}", "total", (json_int_t)j->n_prompt,
                                                                "cache", (json_int_t)j->prog_cache, "processed",
                                                                (json_int_t)p->processed, "time_ms", (json_int_t)p->ms));
    if (e && j->timings_per_token)
        json_object_set_new(e, "timings", timings_of(j->prog_cache, p->processed > j->prog_cache ? p->processed -
                                                     j->prog_cache : 0, p->processed > j->prog_cache ? p->ms : 0.0, 0, 0.0));
    aevent(acc, len, "response.in_progress", e);
}

/* The end of a Responses stream (caller holds j->mu). */
static void resp_finish(const srv *s, srv_job *j, char **acc, size_t *len)
{
    if (j->status) {
        aevent(acc, len, "error", json_pack("{s:s,s:{s:i,s:s,s:s}}", "type", "error", "error", "code", j->status, "message",
                                            j->err, "type", srv_error_type(j->status)));
        return;
    }
    json_t *reason, *text, *calls, *c, *output = json_array();
    size_t i;
    pthread_mutex_unlock(&j->mu); /* tool_message and text_slice lock */
    anth_parts(j, &reason, &text, &calls);
    pthread_mutex_lock(&j->mu);
    if (j->tool_fmt) {
        if (think_streamed(j)) think_stream(s, j, acc, len, j->len, j->n_gen, 1);
        else resp_reason_delta(acc, len, j, json_incref(reason));
        resp_text_delta(acc, len, j, json_incref(text));
    } else if (think_streamed(j)) {
        think_stream(s, j, acc, len, j->len, j->n_gen, 1); /* what was held back */
    }
    if (j->think_block) json_array_append_new(output, resp_reason_item(j, reason, NULL));
    resp_reason_close(acc, len, j);
    json_decref(reason);
    if (j->anth_text) {
        aevent(acc, len, "response.output_text.done", json_pack("{s:s,s:s+,s:O}", "type", "response.output_text.done",
                                                                 "item_id", "msg_", id_tail(j), "text", text));
        aevent(acc, len, "response.content_part.done",
               json_pack("{s:s,s:s+,s:o}", "type", "response.content_part.done", "item_id", "msg_", id_tail(j), "part",
                         resp_text_part(text)));
        json_t *m = resp_message(j, text, "completed");
        aevent(acc, len, "response.output_item.done", json_pack("{s:s,s:O}", "type", "response.output_item.done", "item", m));
        json_array_append_new(output, m);
    }
    json_array_foreach(calls, i, c) {
        json_t *item = resp_call(c);
        aevent(acc, len, "response.output_item.done",
               json_pack("{s:s,s:O}", "type", "response.output_item.done", "item", item));
        json_array_append_new(output, item);
    }
    json_t *done = json_pack("{s:s,s:o}", "type", "response.completed", "response", resp_object(s, j, output));
    if (done) json_object_set_new(done, "timings", timings(j));
    aevent(acc, len, "response.completed", done);
    json_decref(text);
    json_decref(calls);
}

json_t *srv_reply_final(const srv *s, srv_job *j)
{
    if (j->fmt == SRV_FMT_ANTHROPIC) return anth_final(s, j);
    if (j->fmt == SRV_FMT_RESPONSES) return resp_object(s, j, resp_output(j));
    if (j->fmt == SRV_FMT_OAI_CHAT && j->tool_fmt) {
        const char *finish;
        json_t *m = tool_message(j, 0, &finish);
        json_t *o = oai_object(s, j, json_pack("[{s:o,s:i,s:s}]", "message", m, "index", 0, "finish_reason", finish),
                               "chat.completion");
        json_object_set_new(o, "usage", usage_marked(j));
        json_object_set_new(o, "timings", timings(j));
        return o;
    }
    pthread_mutex_lock(&j->mu);
    json_t *text = text_slice(j, 0, j->len);
    pthread_mutex_unlock(&j->mu);
    if (j->fmt == SRV_FMT_LLAMA) {
        json_t *o = llama_final(s, j, text);
        if (o && j->verbose) json_object_set_new(o, "__verbose", json_deep_copy(o));
        return j->fields ? only_fields(o, j->fields) : o;
    }
    json_t *reason = NULL;
    if (j->fmt == SRV_FMT_OAI_CHAT && j->think) { /* the thoughts apart (deepseek-legacy: also in content) */
        srv_think_parts tp;
        pthread_mutex_lock(&j->mu);
        think_parts(j, j->len, 1, &tp);
        reason = tp.r1 > tp.r0 ? text_slice(j, tp.r0, tp.r1) : NULL;
        if (!j->think_legacy) json_decref(text), text = text_slice(j, tp.c0, tp.c1);
        pthread_mutex_unlock(&j->mu);
    }
    json_t *c = oai_choice(j, text, 0);
    if (c && reason) json_object_set_new(json_object_get(c, "message"), "reasoning_content", reason);
    else json_decref(reason);
    if (c && j->want_probs)
        json_object_set_new(c, "logprobs", json_pack("{s:o}", "content", srv_probs_json(s, j, 0, j->n_gen)));
    json_t *o = oai_object(s, j, json_pack("[o]", c), j->fmt == SRV_FMT_OAI_CHAT ? "chat.completion" : "text_completion");
    json_object_set_new(o, "usage", usage_marked(j));
    json_object_set_new(o, "timings", timings(j));
    if (o && j->verbose) { /* --verbose or "verbose": llama-server's own result beside OpenAI's */
        pthread_mutex_lock(&j->mu);
        json_t *t = text_slice(j, 0, j->len);
        pthread_mutex_unlock(&j->mu);
        json_object_set_new(o, "__verbose", llama_final_base(s, j, t));
    }
    return o;
}

/* "data: JSON\n\n" appended to *acc (steals o). */
static void event(char **acc, size_t *len, json_t *o)
{
    size_t n = 0;
    char *t = srv_json_text(o, &n, 0);
    json_decref(o);
    if (!t) return;
    char *a = realloc(*acc, *len + n + 9);
    if (a) {
        memcpy(a + *len, "data: ", 6);
        memcpy(a + *len + 6, t, n);
        memcpy(a + *len + 6 + n, "\n\n", 3);
        *acc = a;
        *len += n + 8;
    }
    free(t);
}

static json_t *chunk(const srv *s, const srv_job *j, json_t *choice)
{
    const char *object = j->fmt == SRV_FMT_OAI_CHAT ? "chat.completion.chunk" : "text_completion";
    return oai_object(s, j, choice ? json_pack("[o]", choice) : json_array(), object);
}

/* The timings of a job still running (timings_per_token): generation time so far. Caller
 * holds j->mu (t_gen_start is set under it, before the first token). */
static json_t *timings_now(const srv_job *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    return timings_at(j, !j->done && j->t_gen_start > 0 ? now - j->t_gen_start : j->t_gen_ms);
}

/* The next prompt_progress event (return_progress), as llama-server sends it: an empty
 * chunk (chat: the assistant's role) with {total, cache, processed, time_ms}. */
static json_t *progress_event(const srv *s, srv_job *j)
{
    const struct srv_progress *p = &j->prog[j->n_prog_sent++];
    json_t *o;
    if (j->fmt == SRV_FMT_LLAMA)
        o = json_pack("{s:s,s:[],s:b,s:i,s:i,s:i}", "content", "", "tokens", "stop", 0, "id_slot", j->slot,
                      "tokens_predicted", 0, "index", 0);
    else if (j->fmt == SRV_FMT_OAI_CHAT)
        o = chunk(s, j, json_pack("{s:{s:s,s:n},s:i,s:n}", "delta", "role", "assistant", "content", "index", 0,
                                  "finish_reason"));
    else
        o = chunk(s, j, oai_choice(j, json_string(""), 1));
    json_object_set_new(o, "prompt_progress", json_pack("{s:I,s:I,s:I,s:I}", "total", (json_int_t)j->n_prompt, "cache",
                                                        (json_int_t)j->prog_cache, "processed", (json_int_t)p->processed,
                                                        "time_ms", (json_int_t)p->ms));
    if (o && j->timings_per_token) /* the prompt so far: none of it run at the first event */
        json_object_set_new(o, "timings", timings_of(j->prog_cache, p->processed > j->prog_cache ? p->processed -
                                                     j->prog_cache : 0, p->processed > j->prog_cache ? p->ms : 0.0, 0, 0.0));
    return o;
}

/* ids [n_streamed, to) as a JSON array. */
static json_t *ids_json(const srv_job *j, size_t to)
{
    json_t *a = json_array();
    for (size_t k = j->n_streamed; a && k < to; k++) json_array_append_new(a, json_integer(j->gen[k]));
    return a;
}

/* The next chunk: text, and the tokens [n_streamed, to) with their probabilities when asked
 * (llama-server sends each chunk's "tokens" and "completion_probabilities"). */
static json_t *delta(const srv *s, srv_job *j, json_t *text, size_t to)
{
    json_t *o;
    if (j->fmt == SRV_FMT_LLAMA) {
        o = json_pack("{s:o,s:o,s:b,s:i,s:I,s:i}", "content", text, "tokens", ids_json(j, to), "stop", 0, "id_slot",
                      j->slot, "tokens_predicted", (json_int_t)j->n_gen, "index", 0);
        if (o && j->want_probs) json_object_set_new(o, "completion_probabilities", srv_probs_json(s, j, j->n_streamed, to));
    } else {
        json_t *c = oai_choice(j, text, 1);
        if (c && j->want_probs)
            json_object_set_new(c, "logprobs", json_pack("{s:o}", "content", srv_probs_json(s, j, j->n_streamed, to)));
        o = chunk(s, j, c);
    }
    if (o && j->timings_per_token) json_object_set_new(o, "timings", timings_now(j));
    j->n_streamed = to;
    return o;
}

/* A piece of a stream's thoughts (reasoning) or content, in the route's shape; an OpenAI
 * chunk asked for logprobs carries those of the tokens [think_p_sent, tok). */
static void think_out(const srv *s, srv_job *j, char **acc, size_t *len, int reasoning, json_t *text, size_t tok)
{
    if (j->fmt == SRV_FMT_ANTHROPIC) return (reasoning ? anth_think_delta : anth_text_delta)(acc, len, j, text);
    if (j->fmt == SRV_FMT_RESPONSES) return (reasoning ? resp_reason_delta : resp_text_delta)(acc, len, j, text);
    json_t *c = reasoning ? json_pack("{s:{s:o},s:i,s:n}", "delta", "reasoning_content", text, "index", 0, "finish_reason")
                          : oai_choice(j, text, 1);
    if (c && j->want_probs && tok > j->think_p_sent) {
        json_object_set_new(c, "logprobs", json_pack("{s:o}", "content", srv_probs_json(s, j, j->think_p_sent, tok)));
        j->think_p_sent = tok;
    }
    json_t *o = chunk(s, j, c);
    if (o && j->timings_per_token) json_object_set_new(o, "timings", timings_now(j));
    event(acc, len, o);
}

/* A stream's text [0, to) split (think.c): the thoughts and the content not sent yet, as far
 * as they are decided (final: all of them). Caller holds j->mu. */
static void think_stream(const srv *s, srv_job *j, char **acc, size_t *len, size_t to, size_t tok, int final)
{
    srv_think_parts tp;
    think_parts(j, to, final, &tp);
    size_t r = j->think_r_sent > tp.r0 ? j->think_r_sent : tp.r0;
    if (tp.r1 > r) think_out(s, j, acc, len, 1, text_slice(j, r, tp.r1), tok), j->think_r_sent = tp.r1;
    size_t c = j->think_c_sent > tp.c0 ? j->think_c_sent : tp.c0;
    if (tp.c1 > c && !j->tool_fmt) /* with tools the content goes out parsed, at the end */
        think_out(s, j, acc, len, 0, text_slice(j, c, tp.c1), tok), j->think_c_sent = tp.c1;
}

static void finish(const srv *s, srv_job *j, char **acc, size_t *len)
{
    if (j->fmt == SRV_FMT_ANTHROPIC) return anth_finish(s, j, acc, len);
    if (j->fmt == SRV_FMT_RESPONSES) return resp_finish(s, j, acc, len);
    if (j->status) {
        event(acc, len, json_pack("{s:{s:i,s:s,s:s}}", "error", "code", j->status, "message", j->err, "type",
                                  srv_error_type(j->status)));
        return;
    }
    if (j->fmt == SRV_FMT_LLAMA) return event(acc, len, llama_final(s, j, json_string("")));
    int with_usage = j->usage_chunk;
    const char *fin = j->finish;
    if (think_streamed(j)) think_stream(s, j, acc, len, j->len, j->n_gen, 1); /* what was held back */
    if (j->fmt == SRV_FMT_OAI_CHAT && j->tool_fmt) { /* the held-back reply, parsed: one delta */
        json_t *m = tool_message(j, 1, &fin);
        if (json_object_size(m)) event(acc, len, chunk(s, j, json_pack("{s:o,s:i,s:n}", "delta", m, "index", 0, "finish_reason")));
        else json_decref(m);
    }
    json_t *c = j->fmt == SRV_FMT_OAI_TEXT ? oai_choice(j, json_string(""), 0)
                                           : json_pack("{s:{},s:i,s:s}", "delta", "index", 0, "finish_reason", fin);
    event(acc, len, chunk(s, j, c));
    if (with_usage) {
        json_t *u = chunk(s, j, NULL);
        json_object_set_new(u, "usage", usage_marked(j));
        json_object_set_new(u, "timings", timings(j));
        event(acc, len, u);
    }
    char *a = realloc(*acc, *len + 15);
    if (a) memcpy(a + *len, "data: [DONE]\n\n", 15), *len += 14, *acc = a;
}

/* 1 when a chunk can go out: its text ends at *to, its tokens end at *tok. With
 * probabilities a chunk carries exactly one token (llama-server's), once the token's text is
 * released; otherwise all released text and every token so far. Caller holds j->mu. */
static int pending(const srv_job *j, size_t sent, size_t *to, size_t *tok)
{
    if (j->n_prog_sent < j->n_prog) return 1;
    /* a reply with tools goes out parsed, at the end (finish); only its thoughts stream */
    if (j->tool_fmt && !think_streamed(j)) return 0;
    if (!j->tok_end) {
        *to = j->safe, *tok = j->n_gen;
        return j->safe > sent;
    }
    size_t k = j->n_streamed, e = k < j->n_gen ? j->tok_end[k] : SIZE_MAX;
    if (e == SIZE_MAX || (e > j->safe && !j->done)) return 0; /* not appended yet, or held back */
    e = e < j->safe ? e : j->safe;
    *to = e > sent ? e : sent, *tok = k + 1;
    return 1;
}

int srv_reply_stream_ready(srv_job *j, int state, size_t sent)
{
    size_t to, tok;
    if (state == ST_END) return 1;
    if (state == ST_START && ((j->fmt == SRV_FMT_OAI_CHAT && !(j->return_progress && j->stream)) ||
                              j->fmt == SRV_FMT_ANTHROPIC || j->fmt == SRV_FMT_RESPONSES))
        return 1; /* a start event goes out at once */
    pthread_mutex_lock(&j->mu);
    int r = j->done || pending(j, sent, &to, &tok);
    pthread_mutex_unlock(&j->mu);
    return r;
}

/* Waits for a chunk, the end, or the keep-alive interval; caller holds j->mu. */
static int wait_news(srv_job *j, size_t sent)
{
    struct timespec until;
    size_t to, tok;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SRV_KEEPALIVE_S;
    while (!pending(j, sent, &to, &tok) && !j->done)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until)) return 0;
    return 1;
}

char *srv_reply_stream_next(const srv *s, srv_job *j, int *state, size_t *sent, size_t *len)
{
    char *acc = NULL;
    *len = 0;
    if (*state == ST_END) return NULL;
    if (*state == ST_START && j->fmt == SRV_FMT_OAI_CHAT && !(j->return_progress && j->stream))
        event(&acc, len, chunk(s, j, json_pack("{s:{s:s,s:n},s:i,s:n}", "delta", "role", "assistant", "content",
                                                "index", 0, "finish_reason")));
    if (*state == ST_START && j->fmt == SRV_FMT_ANTHROPIC) anth_start(s, j, &acc, len);
    if (*state == ST_START && j->fmt == SRV_FMT_RESPONSES) {
        aevent(&acc, len, "response.created", resp_in_progress(j, "response.created"));
        aevent(&acc, len, "response.in_progress", resp_in_progress(j, "response.in_progress"));
    }
    *state = ST_BODY;
    if (acc) return acc;
    pthread_mutex_lock(&j->mu);
    if (!wait_news(j, *sent)) {
        pthread_mutex_unlock(&j->mu);
        char *k = strdup(": keep-alive\n\n");
        if (k) *len = strlen(k);
        return k;
    }
    size_t to, tok;
    if (j->n_prog_sent < j->n_prog && j->fmt == SRV_FMT_RESPONSES) {
        resp_progress(&acc, len, j);
    } else if (j->n_prog_sent < j->n_prog) {
        event(&acc, len, progress_event(s, j));
    } else if (think_streamed(j) && pending(j, *sent, &to, &tok)) { /* thoughts apart */
        think_stream(s, j, &acc, len, to, tok, 0);
        j->n_streamed = tok;
        *sent = to;
        if (!acc) acc = strdup(""), *len = 0; /* all held back: not the end */
    } else if (pending(j, *sent, &to, &tok) && (j->fmt == SRV_FMT_ANTHROPIC || j->fmt == SRV_FMT_RESPONSES)) {
        if (j->fmt == SRV_FMT_ANTHROPIC) anth_text_delta(&acc, len, j, text_slice(j, *sent, to));
        else resp_text_delta(&acc, len, j, text_slice(j, *sent, to));
        j->n_streamed = tok;
        *sent = to;
        if (!acc) acc = strdup(""), *len = 0; /* an empty slice: not the end */
    } else if (pending(j, *sent, &to, &tok)) {
        event(&acc, len, delta(s, j, text_slice(j, *sent, to), tok));
        *sent = to;
    } else {
        finish(s, j, &acc, len);
        *state = ST_END;
    }
    pthread_mutex_unlock(&j->mu);
    return acc ? acc : (*state = ST_END, NULL);
}
