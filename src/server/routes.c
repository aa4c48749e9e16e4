/* The routes table (one row per endpoint) and the endpoints that need no slot: health,
 * models, props, tokenize, detokenize, slots, metrics. Routes parse and validate; the
 * library does the work. */
#include <ctype.h>
#include <inttypes.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

static int rt_health(srv_req *r)
{
    if (!atomic_load(&r->s->ready)) return srv_reply_error(r, 503, "Loading model");
    return srv_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static int rt_models(srv_req *r)
{
    const srv *s = r->s;
    json_t *meta = json_pack("{s:i,s:i,s:i,s:I,s:I}", "n_vocab", s->info.n_vocab, "n_ctx_train", s->info.n_ctx_train,
                             "n_embd", s->info.n_embd, "n_params", (json_int_t)s->info.n_params, "size",
                             (json_int_t)s->info.file_bytes);
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:O,s:O,s:o}", "id", s->model_id, "object", "model", "created",
                          (json_int_t)s->t_start, "owned_by", "seqkv", "aliases", s->aliases, "tags", s->tags,
                          "meta", meta);
    return srv_reply_json(r, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

static int rt_props(srv_req *r)
{
    const srv *s = r->s;
    const skv_sampling_defaults *d = &s->p.defaults;
    json_int_t seed = d->seed >= 0 ? (json_int_t)d->seed : (json_int_t)0xFFFFFFFFu; /* llama.cpp's "random" */
    json_t *params = json_pack("{s:i,s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:I}", "n_predict", d->n_predict, "temperature",
                               d->temp, "top_k", d->top_k, "top_p", d->top_p, "min_p", d->min_p, "repeat_penalty",
                               d->repeat_penalty, "repeat_last_n", d->repeat_last_n, "presence_penalty",
                               d->presence_penalty, "frequency_penalty", d->frequency_penalty, "seed", seed);
    json_t *more = json_pack("{s:i,s:i,s:f,s:i,s:b,s:s,s:b,s:b,s:i}", "max_tokens", d->n_predict, "n_keep", d->n_keep,
                             "typical_p", d->typ_p, "min_keep", d->min_keep, "ignore_eos", d->ignore_eos,
                             "reasoning_format", srv_think_format_name(s->p.reasoning_format), "reasoning_in_content", 0,
                             "stream", 0, "n_probs", 0);
    json_object_update(params, more);
    json_decref(more);
    json_t *gen = json_pack("{s:i,s:o}", "n_ctx", s->n_ctx, "params", params);
    json_t *o = json_pack("{s:o,s:i,s:s,s:s,s:s,s:b}", "default_generation_settings", gen, "total_slots",
                          s->p.parallel, "model_path", s->p.model_path, "chat_template",
                          s->chat_template ? s->chat_template : "", "build_info", "seqkv " SEQKV_VERSION_STRING,
                          "store", s->store != NULL);
    json_object_set_new(o, "is_sleeping", json_boolean(atomic_load(&r->s->sleeping)));
    return srv_reply_json(r, 200, o);
}

static json_t *pieces(const srv *s, const int32_t *tok, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n && a; i++) {
        size_t len = 0;
        char *p = srv_detokenize(s, tok + i, 1, &len);
        json_array_append_new(a, json_pack("{s:i,s:s%}", "id", tok[i], "piece", p ? p : "", len));
        free(p);
    }
    return a;
}

static int rt_tokenize(srv_req *r)
{
    const char *text = NULL;
    size_t len = 0, n = 0;
    int special = 0, with_pieces = 0;
    if (json_unpack(r->body, "{s:s%,s?b,s?b}", "content", &text, &len, "add_special", &special, "with_pieces",
                    &with_pieces))
        return srv_reply_error(r, 400, "\"content\" (a string) is required");
    int32_t *tok = srv_tokenize(r->s, text, len, special, &n);
    if (!tok) return srv_reply_error(r, 500, "tokenization failed");
    json_t *a = with_pieces ? pieces(r->s, tok, n) : json_array();
    for (size_t i = 0; !with_pieces && i < n; i++) json_array_append_new(a, json_integer(tok[i]));
    free(tok);
    return srv_reply_json(r, 200, json_pack("{s:o}", "tokens", a));
}

static int rt_detokenize(srv_req *r)
{
    json_t *a = json_object_get(r->body, "tokens");
    skv_err err = {0};
    size_t n = 0, len = 0;
    if (!json_is_array(a)) return srv_reply_error(r, 400, "\"tokens\" (an array of token ids) is required");
    int32_t *tok = json_array_size(a) ? srv_prompt_tokens(r->s, a, &n, &err) : calloc(1, 4);
    if (!tok) return srv_reply_error(r, 400, "%.255s", err.msg);
    char *text = srv_detokenize(r->s, tok, n, &len);
    free(tok);
    if (!text) return srv_reply_error(r, 500, "out of memory");
    json_t *o = json_pack("{s:s%}", "content", text, len);
    free(text);
    return srv_reply_json(r, 200, o);
}

static int rt_slots(srv_req *r)
{
    if (!r->s->p.slots_endpoint)
        return srv_reply_error(r, 501, "This server does not support slots endpoint. Start it with `--slots`");
    return srv_reply_json(r, 200, srv_pool_slots_json(r->s->pool));
}

static void metric(char *buf, size_t cap, size_t *at, const char *name, const char *type, const char *help, double v)
{
    if (*at >= cap) return;
    int n = snprintf(buf + *at, cap - *at, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    if (n > 0) *at += (size_t)n;
}

static void store_metrics(const srv *s, char *buf, size_t cap, size_t *at)
{
    skv_store_stats st;
    if (!s->store || skv_store_get_stats(s->store, &st)) return;
    metric(buf, cap, at, "seqkv:store_sessions", "gauge", "Sessions in the store.", (double)st.n_sessions);
    metric(buf, cap, at, "seqkv:store_disk_bytes", "gauge", "Bytes of the store on disk.", (double)st.disk_bytes);
    metric(buf, cap, at, "seqkv:store_kv_bytes", "gauge", "Bytes of materialised KV.", (double)st.mat_bytes);
    metric(buf, cap, at, "seqkv:store_budget_bytes", "gauge", "Budget of materialised KV.", (double)st.budget);
    metric(buf, cap, at, "seqkv:store_dedup_ratio", "gauge", "Session tokens per unique stored position.",
           st.dedup_ratio);
    metric(buf, cap, at, "seqkv:store_bits_per_position", "gauge", "Disk bits per session token.",
           st.bits_per_position);
}

void srv_metrics_pass(srv_metrics *m, size_t n)
{
    atomic_fetch_add(&m->n_decode, 1);
    atomic_fetch_add(&m->n_busy, n);
}

void srv_metrics_seq(srv_metrics *m, size_t len)
{
    unsigned long long cur = atomic_load(&m->n_tokens_max);
    while (len > cur && !atomic_compare_exchange_weak(&m->n_tokens_max, &cur, len)) {}
}

/* tokens per second over a window's counters, which the scrape takes (resets). */
static double window_rate(atomic_ullong *tokens, atomic_ullong *us)
{
    double n = (double)atomic_exchange(tokens, 0), t = (double)atomic_exchange(us, 0);
    return t > 0 ? n * 1e6 / t : 0.0;
}

static int rt_metrics(srv_req *r)
{
    srv_metrics *m = &r->s->m;
    size_t cap = 8192, at = 0;
    if (!r->s->p.metrics_endpoint)
        return srv_reply_error(r, 501, "This server does not support metrics endpoint. Start it with `--metrics`");
    char *buf = malloc(cap);
    if (!buf) return srv_reply_error(r, 500, "out of memory");
    /* llama-server's, with its names, types and help texts */
    metric(buf, cap, &at, "llamacpp:prompt_tokens_total", "counter",
           "Number of prompt tokens processed, excluding cached tokens", (double)m->n_prompt_tokens);
    metric(buf, cap, &at, "llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache",
           (double)m->n_cached_tokens);
    metric(buf, cap, &at, "llamacpp:prompt_seconds_total", "counter", "Total time spent processing prompts",
           (double)m->prompt_us / 1e6);
    metric(buf, cap, &at, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed",
           (double)m->n_gen_tokens);
    metric(buf, cap, &at, "llamacpp:tokens_predicted_seconds_total", "counter", "Total time spent generating tokens",
           (double)m->gen_us / 1e6);
    metric(buf, cap, &at, "llamacpp:n_decode_total", "counter",
           "Total number of model passes (prefill chunks and decode steps, the slots of a step in one)",
           (double)m->n_decode);
    metric(buf, cap, &at, "llamacpp:n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)",
           (double)m->n_tokens_max);
    metric(buf, cap, &at, "llamacpp:spec_decode_num_draft_tokens_total", "counter",
           "Speculative: Total draft tokens generated (no speculative decoding here: 0)", 0);
    metric(buf, cap, &at, "llamacpp:spec_decode_num_accepted_tokens_total", "counter",
           "Speculative: Total draft tokens accepted by the target model (0)", 0);
    metric(buf, cap, &at, "llamacpp:spec_decode_num_drafts_total", "counter",
           "Speculative: Total speculative decoding verification steps (0)", 0);
    metric(buf, cap, &at, "llamacpp:prompt_tokens_seconds", "gauge",
           "Average prompt throughput in tokens/s (since the last scrape)",
           window_rate(&m->win_prompt_tokens, &m->win_prompt_us));
    metric(buf, cap, &at, "llamacpp:predicted_tokens_seconds", "gauge",
           "Average generation throughput in tokens/s (since the last scrape)",
           window_rate(&m->win_gen_tokens, &m->win_gen_us));
    metric(buf, cap, &at, "llamacpp:requests_processing", "gauge", "Number of requests processing",
           (double)srv_pool_busy(r->s->pool));
    metric(buf, cap, &at, "llamacpp:requests_deferred", "gauge", "Number of requests deferred",
           (double)srv_pool_queued(r->s->pool));
    unsigned long long nd = atomic_load(&m->n_decode);
    metric(buf, cap, &at, "llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per model pass",
           (double)atomic_load(&m->n_busy) / (double)(nd ? nd : 1));
    metric(buf, cap, &at, "seqkv:cached_tokens_total", "counter", "Prompt tokens reused from a cache.",
           (double)m->n_cached_tokens);
    metric(buf, cap, &at, "seqkv:store_hits_total", "counter", "Prompts restored from the store.",
           (double)m->n_store_hits);
    metric(buf, cap, &at, "seqkv:slot_hits_total", "counter", "Prompts continued from a slot's KV.",
           (double)m->n_slot_hits);
    metric(buf, cap, &at, "seqkv:near_approximate_total", "counter",
           "Prompts built by --reuse near with APPROXIMATE KV.", (double)m->n_near_approx);
    metric(buf, cap, &at, "seqkv:near_approx_positions_total", "counter",
           "Prompt positions reused approximately by --reuse near.", (double)m->n_near_positions);
    metric(buf, cap, &at, "seqkv:store_puts_total", "counter", "Conversations put into the store.",
           (double)m->n_store_puts);
    metric(buf, cap, &at, "seqkv:store_puts_given_total", "counter",
           "Puts that took the slot's KV and surprisals instead of running the model again.",
           (double)m->n_store_puts_given);
    metric(buf, cap, &at, "seqkv:store_puts_hidden_total", "counter",
           "Puts whose prompt surprisals the writer computed from the slot's hidden states (off the request path).",
           (double)m->n_store_puts_hidden);
    metric(buf, cap, &at, "seqkv:requests_rejected_total", "counter", "Requests refused with 503 (queue full).",
           (double)m->n_rejected);
    store_metrics(r->s, buf, cap, &at);
    char t0[24];
    snprintf(t0, sizeof t0, "%lld", (long long)r->s->t_start);
    r->reply_header = (srv_header){"Process-Start-Time-Unix", t0}; /* llama-server's */
    int rc = srv_reply_text(r, 200, "text/plain; version=0.0.4", buf);
    r->reply_header = (srv_header){0};
    return rc;
}

static int rt_rerank(srv_req *r)
{
    return srv_reply_error(r, 501, "reranking needs a reranker model, which seqkv serve does not run");
}

typedef struct route {
    const char *method, *path; /* a path ending in '/' matches every url under it */
    srv_handler fn;
    int open;     /* no API key needed */
    int early;    /* answers while the model loads */
    int empty_ok; /* a POST without a body reads as {} */
    int raw;      /* the POST body is handed on as is */
} route;

static const route routes[] = {
    {"GET", "/", srv_rt_webui, 1, 0, 0, 0}, /* "/" matches only itself (path_matches) */
    {"GET", "/index.html", srv_rt_webui, 1, 0, 0, 0},
    {"GET", "/sw.js", srv_rt_webui, 1, 0, 0, 0},
    {"GET", "/manifest.webmanifest", srv_rt_webui, 1, 0, 0, 0},
    {"GET", "/_app/version.json", srv_rt_webui, 1, 0, 0, 0},
    {"POST", "/chat/completions/input_tokens", srv_rt_chat_input_tokens, 0, 0, 0, 0},
    {"POST", "/v1/chat/completions/input_tokens", srv_rt_chat_input_tokens, 0, 0, 0, 0},
    {"GET", "/health", rt_health, 1, 1, 0, 0},
    {"GET", "/v1/health", rt_health, 1, 1, 0, 0},
    {"GET", "/v1/models", rt_models, 1, 0, 0, 0},
    {"GET", "/models", rt_models, 1, 0, 0, 0},
    {"GET", "/props", rt_props, 0, 0, 0, 0},
    {"GET", "/slots", rt_slots, 0, 0, 0, 0},
    {"POST", "/slots/", srv_rt_slot_action, 0, 0, 1, 0},
    {"GET", "/metrics", rt_metrics, 0, 0, 0, 0},
    {"POST", "/tokenize", rt_tokenize, 0, 0, 0, 0},
    {"POST", "/detokenize", rt_detokenize, 0, 0, 0, 0},
    {"POST", "/completion", srv_rt_completion, 0, 0, 0, 0},
    {"POST", "/completions", srv_rt_completion, 0, 0, 0, 0},
    {"POST", "/v1/completions", srv_rt_oai_completion, 0, 0, 0, 0},
    {"POST", "/v1/chat/completions", srv_rt_oai_chat, 0, 0, 0, 0},
    {"POST", "/v1/messages", srv_rt_anthropic_messages, 0, 0, 0, 0},
    {"POST", "/v1/messages/count_tokens", srv_rt_anthropic_count_tokens, 0, 0, 0, 0},
    {"POST", "/v1/responses", srv_rt_responses, 0, 0, 0, 0},
    {"POST", "/responses", srv_rt_responses, 0, 0, 0, 0},
    {"POST", "/v1/responses/input_tokens", srv_rt_responses_input_tokens, 0, 0, 0, 0},
    {"POST", "/responses/input_tokens", srv_rt_responses_input_tokens, 0, 0, 0, 0},
    {"POST", "/chat/completions", srv_rt_oai_chat, 0, 0, 0, 0},
    {"POST", "/apply-template", srv_rt_apply_template, 0, 0, 0, 0},
    {"POST", "/infill", srv_rt_infill, 0, 0, 0, 0},
    {"POST", "/embedding", srv_rt_embedding, 0, 0, 0, 0},
    {"POST", "/embeddings", srv_rt_embedding, 0, 0, 0, 0},
    {"POST", "/v1/embeddings", srv_rt_oai_embeddings, 0, 0, 0, 0},
    {"POST", "/rerank", rt_rerank, 0, 0, 0, 0},
    {"POST", "/reranking", rt_rerank, 0, 0, 0, 0},
    {"POST", "/v1/rerank", rt_rerank, 0, 0, 0, 0},
    {"GET", "/cors-proxy", srv_rt_cors_proxy, 0, 0, 0, 0},
    {"POST", "/cors-proxy", srv_rt_cors_proxy, 0, 0, 1, 1},
    {"GET", "/tools", srv_rt_tools_get, 0, 0, 0, 0},
    {"POST", "/tools", srv_rt_tools_post, 0, 0, 0, 0},
};

static int path_matches(const char *path, const char *url)
{
    size_t n = strlen(path);
    if (n > 1 && path[n - 1] == '/') return !strncmp(path, url, n);
    return !strcmp(path, url);
}

/* llama-server's camelCase alias of a path: "/v1/chat/completions" -> "chatCompletions". */
static void camel(const char *path, char *out, size_t cap)
{
    size_t n = 0;
    int up = 0;
    if (!strncmp(path, "/v1", 3) && path[3]) path += 3;
    if (*path == '/') path++;
    for (; *path && *path != ':' && n + 1 < cap; path++) {
        if (*path == '/' || *path == '-' || *path == '_') up = 1;
        else out[n++] = up ? (char)toupper((unsigned char)*path) : *path, up = 0;
    }
    out[n] = 0;
}

int srv_route_alias(const char *format, char *path, size_t cap)
{
    char a[128];
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
            const char *p = routes[i].path;
            if (strcmp(routes[i].method, "POST") || p[strlen(p) - 1] == '/' || strlen(p) >= cap) continue;
            if (pass == 0) camel(p, a, sizeof a);
            if (!strcmp(pass == 0 ? a : p, format)) {
                memcpy(path, p, strlen(p) + 1);
                return 1;
            }
        }
    return 0;
}

int srv_route_find(const srv *s, const char *method, const char *url, srv_route *out)
{
    if (s->gcp_predict[0] && !strcmp(method, "POST") && !strcmp(url, s->gcp_predict)) {
        *out = (srv_route){srv_rt_gcp_predict, 0, 0, 0, 0};
        return 1;
    }
    if (s->gcp_health[0] && !strcmp(method, "GET") && !strcmp(url, s->gcp_health)) {
        *out = (srv_route){rt_health, 1, 1, 0, 0};
        return 1;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(routes[i].method, method) || !path_matches(routes[i].path, url)) continue;
        *out = (srv_route){routes[i].fn, routes[i].open, routes[i].early, routes[i].empty_ok, routes[i].raw};
        return 1;
    }
    return 0;
}
