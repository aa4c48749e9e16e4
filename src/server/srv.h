/* Internal to the server (src/server/): the shared state, requests, jobs and slots.
 *
 *   http.c      libmicrohttpd glue: bodies, limits, auth, replies, streamed replies
 *   routes.c    the routes table and the small endpoints (health, models, props, tokens)
 *   complete.c  /completion, /v1/completions, /v1/chat/completions: parse into a job
 *   reply.c     the JSON shapes of finished and streamed completions
 *   slots.c     the slots (one context each), the bounded job queue, the decode loop
 *   sample.c    llama-server's sampler chain (std::mt19937), stop strings, UTF-8
 *   cache.c     the prompt cache: the slot's own KV, then the session store
 *   slotfile.c  POST /slots/{id}?action=save|restore|erase (.skv files in --slot-save-path)
 *   request.c   the request path without the socket: route, key, body, handler
 *   chat.c      chat messages to a prompt (the template engine; chat.h), the model's FIM tokens
 *   mem.c       working memory: per-request and server-wide budgets, jansson's allocator
 *   conns.c     connections: header/body deadlines, the reserve that keeps /health reachable
 *   probs.c     token probabilities (n_probs, logprobs)
 *   multi.c     several completions for one request (batches of prompts, OpenAI's n)
 *   grammar.c   constrained sampling: grammar, json_schema, response_format (schema*.c)
 *   server.c    startup, model loading, shutdown
 *
 * A job is shared by the HTTP thread that made it and the slot that runs it: refs counts
 * both, mu/cv guard its output fields; the last unref frees it. */
#ifndef SKV_SERVER_SRV_H
#define SKV_SERVER_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "core/mt19937.h"
#include "grammar/gbnf.h"
#include "seqkv.h"
#include "server/limits.h"
#include "server/server.h"
#include "core/util.h"

struct MHD_Connection;
typedef struct srv_pool srv_pool;

typedef struct srv_metrics {
    atomic_ullong n_requests, n_prompt_tokens, n_gen_tokens, n_cached_tokens;
    atomic_ullong n_store_hits, n_store_puts, n_slot_hits, n_rejected;
    atomic_ullong n_store_puts_given; /* puts that took the slot's KV and surprisals (no model run) */
    atomic_ullong n_store_puts_hidden; /* of those, puts whose prompt surprisals the writer computed */
    atomic_ullong n_near_approx, n_near_positions; /* --reuse near: approximate prompts, positions */
    atomic_ullong prompt_us, gen_us; /* microseconds spent */
    atomic_ullong n_decode;          /* model passes: prefill chunks and decode steps (all slots in one) */
    atomic_ullong n_busy;            /* slots those passes served (n_busy / n_decode: slots per pass) */
    atomic_ullong n_tokens_max;      /* the longest sequence (prompt + generation) seen */
    atomic_ullong win_prompt_tokens, win_prompt_us, win_gen_tokens, win_gen_us; /* since the last scrape */
} srv_metrics;
/* One model pass serving n slots; a sequence of len tokens done. */
void srv_metrics_pass(srv_metrics *m, size_t n);
void srv_metrics_seq(srv_metrics *m, size_t len);

/* The sampler chain's steps (the request's "samplers", llama-server's names), in
 * llama-server's default order; logit biases always come first, the draw last. */
enum { SRV_SMP_PENALTIES, SRV_SMP_TOP_K, SRV_SMP_TYP_P, SRV_SMP_TOP_P, SRV_SMP_MIN_P, SRV_SMP_TEMP, SRV_SMP_NOOP };
#define SRV_MAX_SAMPLERS 32
#define SRV_N_DEFAULT_SAMPLERS 6
extern const uint8_t srv_default_samplers[SRV_N_DEFAULT_SAMPLERS];
/* A chain from text: names separated by sep (llama-server's --samplers "a;b"), or, sep 0,
 * one character per sampler (--sampling-seq, a string "samplers"); or one name of len
 * bytes appended. 0, or -1 with err naming the sampler (unknown, or not implemented). */
int srv_samplers_parse(const char *text, char sep, uint8_t *out, int *n, skv_err *err);
int srv_samplers_add_name(const char *name, size_t len, uint8_t *out, int *n, skv_err *err);
/* llama-server's name of a step (NULL for SRV_SMP_NOOP). */
const char *srv_sampler_name(int code);

typedef struct srv_mcp srv_mcp;

typedef struct srv {
    skv_server_params p;
    skv_model *model;
    skv_model_info info;
    uint8_t chain[SRV_MAX_SAMPLERS]; /* the default sampler chain (SRV_SMP_*): --samplers, else llama-server's */
    int n_chain;
    char model_id[256];  /* the first alias in byte order, or the file name */
    json_t *aliases, *tags; /* /v1/models' lists (--alias, --tags): arrays of strings */
    char *chat_template; /* the model's tokenizer.chat_template, or NULL */
    int tool_caps, tool_fmt; /* what the template does with tools (SKV_CHAT_TOOLS_*), SRV_TOOLS_* */
    skv_store *store;    /* NULL without --store */
    int n_ctx;
    size_t max_piece;    /* bytes of the longest token piece (>= 1) */
    atomic_int ready;    /* 0 while loading: 503 */
    srv_pool *pool;
    srv_metrics m;
    int64_t t_start;
    srv_mcp *mcp;        /* MCP servers' tools (mcp.c), or NULL */
    json_t *kwargs;      /* --chat-template-kwargs (an object), or NULL */
    char gcp_predict[128], gcp_health[128]; /* AIP_MODE=PREDICTION: Vertex AI's routes (gcp.c; "": off) */
    /* --sleep-idle-seconds (sleep.c): pool NULL while sleeping */
    pthread_rwlock_t sleep_lock;
    pthread_t sleep_th;
    int sleep_on;
    atomic_int sleeping, sleep_quit;
    atomic_llong active_ms; /* the last request that needed the model (monotonic ms) */
} srv;

/* What a finished or running job reports. */
enum { SRV_FMT_LLAMA = 0, SRV_FMT_OAI_TEXT = 1, SRV_FMT_OAI_CHAT = 2, SRV_FMT_ANTHROPIC = 3, /* a chat, Anthropic's replies */
       SRV_FMT_RESPONSES = 4 /* a chat, OpenAI's Responses API replies */ };
enum { SRV_ACT_NONE = 0, SRV_ACT_SAVE = 1, SRV_ACT_RESTORE = 2, SRV_ACT_ERASE = 3 };

typedef struct srv_job {
    /* request (immutable once queued) */
    int32_t *prompt;
    size_t n_prompt;
    int n_predict, top_k, cache_prompt, id_slot, fmt, stream, usage_chunk, n_probs;
    int want_probs;            /* n_probs > 0 or OpenAI's logprobs: record srv_prob per token */
    int post_probs;            /* post_sampling_probs: probabilities after the sampler chain ("prob") */
    double temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int repeat_last_n;
    double typ_p;              /* typical_p (1: off) */
    int min_keep;              /* candidates top_p, min_p and typical_p always keep */
    uint8_t samplers[SRV_MAX_SAMPLERS]; /* the chain's order (SRV_SMP_*), n_samplers of them; */
    int n_samplers;            /* 0: srv_default_samplers */
    int t_max_predict_ms;      /* > 0: generation stops at a newline once it ran this long */
    int ignore_eos;            /* the end-of-generation token (eos_id) never sampled */
    int32_t eos_id;
    struct srv_bias { int32_t id; float bias; } *bias; /* logit_bias: added to the logits first */
    size_t n_bias;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    char id[48];      /* "chatcmpl-..." */
    int64_t created;  /* unix seconds */
    /* output, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;       /* generated bytes (valid UTF-8 up to `safe`) */
    size_t len, cap, safe;
    int32_t *gen;     /* generated tokens */
    size_t n_gen, gen_cap;
    size_t n_streamed;         /* of gen, ids already sent in stream chunks */
    struct srv_prob { int32_t id; float logprob; } *probs; /* n_probs: per token, it and the top n */
    size_t probs_cap;
    size_t *tok_end;           /* n_probs: text length after each generated token (one token a chunk) */
    int verbose;               /* --verbose or the request's "verbose": the reply carries "__verbose" */
    int return_progress;       /* streamed: prompt_progress events while the prompt runs */
    float *embd;               /* an embedding job: n_prompt x n_embd hidden states (owned; NULL: none) */
    json_t *chat_msgs;         /* a chat's messages (a copy): the slot re-renders them with the reply */
    int timings_per_token;     /* streamed: every chunk carries "timings" */
    struct srv_progress { size_t processed; double ms; } prog[SRV_MAX_PROGRESS]; /* under mu */
    int n_prog, n_prog_sent;   /* progress events recorded, sent (by the stream reader) */
    size_t prog_cache;         /* prompt positions reused, as the progress events report them */
    double t_gen_start;        /* when generation began (monotonic ms; timings_per_token) */
    char *fields;              /* response_fields, '\n'-separated paths, or NULL: the whole reply */
    int started, done, status; /* status: HTTP code of a failure, 0 = ok */
    char err[256];
    const char *finish;        /* "stop" | "length" */
    char stopping_word[SRV_MAX_STOP_LEN + 1];
    int anth_text;             /* an Anthropic / Responses stream: its text block (message item) was opened */
    size_t n_cached;           /* prompt positions reused */
    double cached_bits;        /* d_T of the store match */
    int cache_approx;          /* 1: reused KV is APPROXIMATE (--reuse near; docs/near.md) */
    size_t n_cache_approx, n_near_recomputed; /* near reuse: positions reused approximately, recomputed */
    int slot;
    double t_prompt_ms, t_gen_ms;
    int return_tokens;         /* the reply lists the generated token ids */
    int n_keep, n_discard;     /* context shift (--context-shift): positions kept, dropped */
    int truncated;             /* the context was shifted */
    /* slot actions (POST /slots/{id}?action=): SRV_ACT_*, the file, what moved */
    int action;
    char filename[SRV_MAX_FILENAME + 1];
    size_t act_tokens, act_bytes;
    double t_act_ms;
    /* constrained sampling (grammar.c): the request's grammar; its recognizer and the
     * vocabulary's texts, the running slot's */
    skv_gbnf *grammar;
    skv_gmatch *gmatch;
    skv_gvocab *gvocab;
    int tool_fmt;              /* SRV_TOOLS_*: the reply is parsed for tool calls (tools.c) */
    /* a chat reply's thoughts (think.c): the template's marker pair + 1 (0: no split), the
     * prompt opened the block, deepseek-legacy (the content keeps the block); a stream's
     * reasoning and content sent so far (offsets into text), its reasoning block or item
     * (Anthropic, Responses): 1 opened, 2 closed; the tokens whose logprobs went out */
    int think, think_opened, think_legacy;
    int think_format;          /* the reasoning format asked for (SRV_REASON_*), for generation_settings */
    size_t think_r_sent, think_c_sent, think_p_sent;
    int think_block;
    /* the thinking budget (think.c; not with a grammar): the template's marker pair + 1 (0:
     * none), the tokens a thought may take (-1: unlimited), the thought's state
     * (SRV_THINK_*) and tokens so far, where the text's next marker may start and whether
     * a thought has begun; the tokens forced when it runs out (the budget message and the
     * closing marker), the next of them */
    int think_mark, think_budget, think_state, think_started;
    size_t think_count, think_scan;
    int32_t *think_force;
    size_t n_force, force_at;
    atomic_int cancel;         /* the client went away */
    atomic_int refs;
} srv_job;

/* ---- working memory (mem.c): the per-request and server-wide budgets ---- */
typedef struct srv_mem_scope {
    uint64_t tag;       /* unique per scope: marks the jansson blocks it paid for */
    size_t used, limit; /* bytes charged now; the request's limit */
    size_t peak;        /* the most charged at once */
    size_t held;        /* of used, bytes given back only by srv_mem_scope_end (body, reply) */
    int refused;        /* the last refusal: 413 (the request's limit) or 503 (the total) */
} srv_mem_scope;
void srv_mem_configure(size_t total); /* the server-wide total (--mem-budget) */
size_t srv_mem_total(void);
size_t srv_mem_request_limit(void);
size_t srv_mem_in_use(void);
void srv_mem_install_json(void);      /* jansson allocates through the budget (once, first) */
void srv_mem_scope_init(srv_mem_scope *sc);
void srv_mem_scope_end(srv_mem_scope *sc); /* gives back what it holds */
/* Binds sc (NULL: none) to this thread; returns the previous one. */
srv_mem_scope *srv_mem_bind(srv_mem_scope *sc);
srv_mem_scope *srv_mem_current(void);
/* Charges n bytes (sc NULL: the thread's scope): 0, or 413 / 503 (also in sc->refused). */
int srv_mem_take(srv_mem_scope *sc, size_t n);
void srv_mem_give(srv_mem_scope *sc, size_t n);
/* srv_mem_take, given back at srv_mem_scope_end (no scope: not charged, 0). */
int srv_mem_hold(srv_mem_scope *sc, size_t n);
/* o as compact JSON in plain malloc'ed memory; hold: charged until the request ends. */
char *srv_json_text(const json_t *o, size_t *len, int hold);

/* ---- CORS (cors.c): --cors-origins and friends, as llama-server ---- */
const char *srv_cors_origin(const skv_server_params *p, const char *origin); /* NULL: no header */
const char *srv_cors_methods(const skv_server_params *p);
const char *srv_cors_headers(const skv_server_params *p);
int srv_origin_is_localhost(const char *origin);

/* ---- connections (conns.c): deadlines, the reserve for /health ---- */
typedef struct srv_conn srv_conn;
enum { SRV_CONN_HEADERS = 0, SRV_CONN_BODY = 1, SRV_CONN_BUSY = 2 };
typedef struct srv_conns_stats_t {
    size_t open;                          /* connections open now */
    unsigned long long reaped;            /* shut down for missing a deadline */
    unsigned long long reserve_refused;   /* reserved connections answered 503 */
} srv_conns_stats_t;
int srv_conns_start(void);                /* the reaper thread */
void srv_conns_stop(void);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION events (http.c): *ctx is its socket context. */
void srv_conn_started(struct MHD_Connection *mc, void **ctx);
void srv_conn_closed(void **ctx);
srv_conn *srv_conn_of(struct MHD_Connection *mc); /* NULL if untracked */
void srv_conn_phase(srv_conn *c, int phase);       /* SRV_CONN_*: restarts its deadline */
int srv_conn_reserved(const srv_conn *c);
void srv_conn_note_refused(void);
void srv_conns_stats(srv_conns_stats_t *st);

/* ---- jobs and slots (slots.c) ---- */
srv_job *srv_job_new(void);
void srv_job_unref(srv_job *j);
/* Hands the job to a slot (takes a reference). 0, or 503 when the queue is full, 400 when
 * id_slot names no slot. */
int srv_pool_submit(srv_pool *p, srv_job *j);
/* Blocks until the job is done; every SRV_ALIVE_CHECK_MS asks alive(arg) (NULL: never) and
 * cancels the job when the client is gone, so an abandoned request frees its slot. */
void srv_job_wait(srv_job *j, int (*alive)(void *), void *arg);
int srv_pool_start(srv *s, srv_pool **out);
void srv_pool_stop(srv_pool *p);
/* GET /slots: one object per slot. */
json_t *srv_pool_slots_json(srv_pool *p);
size_t srv_pool_queued(srv_pool *p);
int srv_pool_busy(srv_pool *p);

/* ---- sampling, text (sample.c) ---- */
typedef struct srv_rng { skv_mt19937 mt; } srv_rng;
/* seed: the job's (its request's seed + 1; the generator gets seed - 1, as llama-server). */
void srv_rng_seed(srv_rng *r, uint64_t seed);
/* hist[0..n_hist): the slot's tokens so far (the penalties look at the last ones). */
int32_t srv_sample(const float *logits, int n_vocab, const srv_job *j, const int32_t *hist, size_t n_hist, srv_rng *rng,
                   void *scratch);
size_t srv_sample_scratch_bytes(int n_vocab);

/* ---- constrained sampling (grammar.c) ---- */
/* The request's grammar / json_schema / response_format into j->grammar: 0, or -1 with err. */
int srv_grammar_parse(srv_job *j, const json_t *b, skv_err *err);
void srv_grammar_free(srv_job *j);
/* GBNF text (start: its start rule) into j->grammar: 0, or -1 with err. */
int srv_grammar_set(srv_job *j, const char *gbnf, const char *start, skv_err *err);

/* ---- OpenAI tools (tools.c) ---- */
enum { SRV_TOOLS_OFF = 0, SRV_TOOLS_GENERIC = 1, SRV_TOOLS_HERMES = 2, SRV_TOOLS_LLAMA3 = 3 };
enum { SRV_TOOL_AUTO = 0, SRV_TOOL_NONE = 1, SRV_TOOL_REQUIRED = 2 };
typedef struct srv_tools {
    const json_t *tools;  /* the request's tools (borrowed), NULL: none */
    char *tools_json;     /* them as the template's `tools` global (malloc'd) */
    const char *named;    /* tool_choice's function (borrowed), or NULL: any tool */
    int choice, parallel; /* SRV_TOOL_*; parallel_tool_calls */
    int fmt, caps;        /* the template's SRV_TOOLS_* and SKV_CHAT_TOOLS_* */
} srv_tools;
/* The format a template's replies take (its source and skv_chat_tool_caps). */
int srv_tools_format(const char *tmpl, int caps);
/* tools, tool_choice and parallel_tool_calls of request b into t (freed with
 * srv_tools_free, also on failure): 0, or -1 with err naming the field. */
int srv_tools_parse(const srv *s, const json_t *b, srv_tools *t, skv_err *err);
void srv_tools_free(srv_tools *t);
/* A message's fields besides role and content that the template sees (tool_calls,
 * tool_call_id, name) as a JSON object (*out malloc'd; NULL: none): 0, or -1 with err. */
int srv_tools_msg_fields(int caps, const json_t *m, char **out, skv_err *err);
/* An assistant message's tool_calls as the generic format writes them ({"tool_call": ...}
 * or {"tool_calls": [...]}; malloc'd), for a template that does not render tool_calls;
 * NULL: none. */
char *srv_tools_calls_text(const json_t *m);
/* What the generic format adds to the system message (malloc'd), or NULL: nothing. */
char *srv_tools_system_text(const srv_tools *t);
/* j's grammar and tool_fmt for t: 0, or -1 with err. */
int srv_tools_grammar(srv_job *j, const srv_tools *t, skv_err *err);
/* A reply's tool calls (OpenAI's [{"id", "type", "function": {"name", "arguments"}}]), or
 * NULL when it holds none; *content: the text that goes with them or instead of them
 * (malloc'd), NULL: none (or the reply's text as it is, when no calls). */
json_t *srv_tools_parse_reply(int fmt, const char *text, size_t len, char **content);

/* ---- a chat reply's thoughts (think.c) ---- */
enum { SRV_REASON_NONE, SRV_REASON_AUTO, SRV_REASON_DEEPSEEK, SRV_REASON_LEGACY };
int srv_think_format(const char *name);  /* SRV_REASON_*, or -1: not a format */
const char *srv_think_format_name(int f);
int srv_think_marker(const char *tmpl);  /* the template's marker pair, or -1: it has none */
int srv_think_opened(int marker, const char *prompt, size_t n); /* the prompt opens the block */
/* Of a reply's text t[0, n): its reasoning [r0, r1) and its content [c0, c1); unless final,
 * only as far as is decided (a marker's possible start, a thought's trailing whitespace are
 * held back). marker -1: all content. */
enum { SRV_THINK_UNDECIDED, SRV_THINK_IN, SRV_THINK_OUT }; /* where the text so far ends */
typedef struct srv_think_parts {
    size_t r0, r1, c0, c1;
    int state; /* SRV_THINK_*: in the thought (opened, not closed), past it (or none), not known yet */
} srv_think_parts;
void srv_think_split(int marker, int opened, const char *t, size_t n, int final, srv_think_parts *p);
/* The thinking budget, before each token of j is sampled (by its slot's thread, the text's
 * only writer): 1 with *tok the token it forces, 0 when the token is sampled. */
int srv_think_budget_next(srv_job *j, int32_t *tok);
const char *srv_think_close_marker(int marker);
/* After srv_sample: out[0] = tok and its probability among the candidates the chain left
 * (temperature applied, normalized), out[1..k] the n most probable of them; returns k. */
int srv_sample_post(const void *scratch, int n, int32_t tok, struct srv_prob *out);
/* srv_sample kept to j's grammar (if any), llama.cpp's way (grammar.c); -1 when the
 * grammar ran out of its work budget for this token (SKV_GBNF_MAX_WORK: too costly). */
int32_t srv_sample_constrained(const srv *s, srv_job *j, const float *logits, const int32_t *hist, size_t n_hist, srv_rng *rng,
                               void *scratch);
/* Bytes of text[0..len) that form whole UTF-8 characters (a cut one at the end waits). */
size_t srv_utf8_complete(const char *text, size_t len);
/* A NUL-terminated copy of s[0..n) with every invalid UTF-8 byte replaced by U+FFFD. */
char *srv_utf8_valid(const char *s, size_t n, size_t *out_len);
/* Appends a token's bytes to the job (under its lock), applies stop strings; 1 = stop. */
int srv_job_append(srv_job *j, const skv_model *m, int32_t tok);

/* ---- token probabilities (probs.c) ---- */
typedef struct srv_prob srv_prob;
/* Records, for generated token n_gen (not yet pushed), tok's log-probability and the
 * j->n_probs most likely tokens' under logits. 0, or -1 when out of memory. */
int srv_probs_record(srv_job *j, const float *logits, int n_vocab, int32_t tok);
/* post_sampling_probs: the same from what the sampler left (srv_sample's scratch). */
int srv_probs_record_post(srv_job *j, const void *scratch, int32_t tok);
/* llama-server's completion_probabilities of tokens [from, to) ({"id","token","bytes",
 * "logprob","top_logprobs"}; OpenAI's logprobs.content has the same items). */
json_t *srv_probs_json(const srv *s, const srv_job *j, size_t from, size_t to);

/* ---- prompt cache (cache.c) ---- */
typedef struct srv_cache srv_cache;
srv_cache *srv_cache_create(srv *s); /* with a store: starts the writer thread */
void srv_cache_free(srv_cache *c);
/* What a prompt reused. approx_from: in, the slot's first position whose KV is approximate
 * (SIZE_MAX: none); out, the same for ctx after srv_cache_prepare. */
typedef struct srv_reuse {
    double bits;            /* the store's d_T of the match (0 if none) */
    size_t approx_from;
    size_t n_reused;        /* positions not computed for this prompt (exact or approximate) */
    int approximate;        /* 1: some of them are approximate */
    size_t n_approx, n_recomputed; /* near reuse: reused from other positions/contexts; recomputed */
} srv_reuse;
/* Makes ctx hold the longest reusable prefix of prompt (at most n - 1 positions, so one is
 * left to prefill): the slot's own tokens (have[0..n_have)), else the store's longest
 * match; with --reuse near, a prompt those leave >= SRV_NEAR_MIN positions of is built by
 * skv_store_get_near instead. Returns the positions ctx holds; *u what was reused. */
size_t srv_cache_prepare(srv *s, srv_cache *c, skv_ctx *ctx, const int32_t *have, size_t n_have,
                         const int32_t *prompt, size_t n, srv_reuse *u);
/* What a slot computed for a put: sur[i] each token's surprisal for sur_from <= i < n
 * (SIZE_MAX: none known), except where pend[i] (pend NULL: nowhere): there the writer
 * computes it from hid[i - 1], that row's final hidden state (skv_ctx_hidden_surprisal). */
typedef struct srv_put_work {
    const float *sur;
    size_t sur_from;
    const float *hid;    /* [n][n_embd] */
    const uint8_t *pend; /* [n] */
} srv_put_work;
/* Puts a finished conversation into the store (if any); errors are logged, not fatal.
 * ctx holds the exact KV of tokens[0, n); with w's surprisals the writer puts that work
 * (skv_store_put_kv) instead of running the model over the conversation again, while the
 * queued KV stays within SRV_PUT_KV_SLOTS slots' worth of positions. */
void srv_cache_put(srv *s, srv_cache *c, skv_ctx *ctx, const int32_t *tokens, size_t n, const srv_put_work *w);
/* 1 when the writer computes the prompt rows' surprisals from their hidden states (the
 * slots then prefill without logits rows): a store, a writer thread with a context of its
 * own, a slot's hidden states within SRV_HIDDEN_MAX_BYTES, not SEQKV_SERVE_SLOT_SURPRISAL=1. */
int srv_cache_takes_hidden(const srv_cache *c);
/* A slot's prompt prefill starts waiting (+1) or ends (-1): the writer does not start a put
 * meanwhile (up to SRV_WRITER_YIELD_MS). */
void srv_cache_prefill(srv_cache *c, int d);

/* ---- replies (reply.c) ---- */
json_t *srv_reply_final(const srv *s, srv_job *j);
/* The next bytes of a streamed reply ("data: ...\n\n" events); NULL when the stream ended.
 * *state: 0 at the start. Blocks until there is something to send. */
char *srv_reply_stream_next(const srv *s, srv_job *j, int *state, size_t *sent, size_t *len);
/* 1 when srv_reply_stream_next(j, state, sent) would not wait: a start event, news, the end. */
int srv_reply_stream_ready(srv_job *j, int state, size_t sent);

/* ---- requests (request.c: the socket-free path; http.c: libmicrohttpd) ---- */
typedef struct srv_req srv_req;
typedef struct srv_proxy srv_proxy;
/* A reply body made as it is sent (agent.c's streamed command output): read blocks until
 * it has bytes for out (alive(a) says whether the client is still there), 0 with *end 1 at
 * the end or -1 on a failure; close frees cls. */
typedef struct srv_source {
    size_t (*read)(void *cls, char *out, size_t max, int *end, int (*alive)(void *), void *a);
    void (*close)(void *cls);
    void *cls;
} srv_source;
/* A source's read: copies what is left of buf[*pos..len) into out (at most max bytes). */
static inline size_t srv_source_copy(char *out, size_t max, const char *buf, size_t len, size_t *pos)
{
    size_t n = len - *pos < max ? len - *pos : max;
    memcpy(out, buf + *pos, n);
    *pos += n;
    return n;
}
typedef struct srv_sink {
    int (*text)(srv_req *r, int code, const char *type, char *text); /* takes text (malloc'ed) */
    int (*stream)(srv_req *r, srv_job *j);                           /* takes j's reference */
    int (*alive)(void *r);                                            /* 0: the client is gone (NULL: never) */
    int (*proxy)(srv_req *r, srv_proxy *px); /* streams a proxied reply, takes px (NULL: no proxy here) */
    int (*source)(srv_req *r, int code, const char *type, srv_source src); /* takes src (NULL: none here) */
} srv_sink;
typedef struct srv_header {
    const char *name, *value;
} srv_header;
struct srv_req {
    srv *s;
    struct MHD_Connection *conn; /* http.c's; NULL elsewhere */
    const char *method, *url;    /* url without the query string */
    const char *auth, *x_api_key; /* the Authorization and X-Api-Key headers, or NULL */
    const char *action;          /* the ?action= argument, or NULL */
    const char *proxy_url;       /* /cors-proxy's ?url= argument, or NULL */
    const srv_header *headers;   /* /cors-proxy, /tools: the request's headers [n_headers] (else none) */
    size_t n_headers;
    const char *data;            /* the raw body [len] (not NUL-terminated) */
    size_t len;
    int too_big;                 /* the body was over SRV_MAX_BODY (and dropped) */
    const srv_sink *sink;
    json_t *body;                /* POST body (an object) once parsed, or NULL */
    srv_header reply_header;     /* one more header on a text reply (name NULL: none) */
    int inner;                   /* a request made inside another (/predict's): url has no --api-prefix */
};
/* Routes, checks (key, loading, body) and runs the request; 0 when a reply was queued. */
int srv_dispatch(srv_req *r);
/* The reply to a request whose body's memory was refused (the thread's scope says why). */
int srv_dispatch_refused(srv_req *r);
int srv_reply_json(srv_req *r, int code, json_t *obj);   /* steals obj */
int srv_reply_error(srv_req *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int srv_reply_text(srv_req *r, int code, const char *type, char *text); /* takes text (malloc'ed) */
int srv_reply_stream(srv_req *r, srv_job *j);            /* takes j's reference */
const char *srv_error_type(int code);
/* llama-server's 400 for a prompt over the context: exceed_context_size_error with
 * n_prompt_tokens (the count, or a lower bound when it was refused untokenized) and n_ctx. */
int srv_reply_ctx_error(srv_req *r, size_t n_prompt, const char *msg);
int srv_http_start(srv *s, void **daemon, int *port);
void srv_http_stop(void *daemon);

/* ---- routes (routes.c, complete.c, slotfile.c) ---- */
typedef int (*srv_handler)(srv_req *r);
typedef struct srv_route {
    srv_handler fn;
    int open;     /* needs no API key */
    int early;    /* answers while the model loads */
    int empty_ok; /* a POST without a body reads as {} */
    int raw;      /* the POST body is not JSON: handed on as is (r->data) */
} srv_route;
/* The route for method + url on server s (0 = none: 404): the table's, and with Vertex AI's
 * AIP_MODE=PREDICTION its predict route and health alias (gcp.c). */
int srv_route_find(const srv *s, const char *method, const char *url, srv_route *out);
/* A POST route's path for an @requestFormat: the path itself, or its camelCase alias
 * ("chatCompletions"); 0 when none. */
int srv_route_alias(const char *format, char *path, size_t cap);
int srv_rt_gcp_predict(srv_req *r); /* gcp.c */
/* sleep.c: the idle watcher of --sleep-idle-seconds (nothing when it is 0); around each
 * request's handler, enter (wakes: a POST, which wakes a sleeping server first: -1 if the
 * slots cannot be made) and leave. */
int srv_sleep_start(srv *s);
void srv_sleep_stop(srv *s);
int srv_sleep_enter(srv *s, int wakes);
void srv_sleep_leave(srv *s, int wakes);
int srv_rt_completion(srv_req *r);
int srv_rt_oai_completion(srv_req *r);
int srv_rt_oai_chat(srv_req *r);
int srv_rt_apply_template(srv_req *r);
/* Runs jobs[0..n) and replies with all of them: llama-server's list of results, or one
 * OpenAI object with n choices; streamed jobs: their events interleaved, each with its
 * index (multi.c). Takes the references. */
int srv_run_many(srv_req *r, srv_job **jobs, size_t n);
/* POST /slots/{id}?action=save|restore|erase */
int srv_rt_slot_action(srv_req *r);
/* Runs a slot action job on its slot (the slot's thread, between jobs): 0 or the HTTP
 * status of a failure (message in j->err). tokens/n: the slot's tokens, updated. */
int srv_slot_action(srv *s, srv_job *j, skv_ctx *ctx, int32_t *tokens, size_t *n);
/* Tokenizes text (add_special as the model says when asked) into a malloc'ed array. */
int32_t *srv_tokenize(const srv *s, const char *text, size_t len, int add_special, size_t *n);
/* Token ids of a prompt: a string or an array of ids (checked against the vocabulary and
 * the context). NULL with a message in err (a 400); *n is then the prompt's token count
 * (or a lower bound) when the context is what it exceeds, else 0. */
int32_t *srv_prompt_tokens(const srv *s, const json_t *prompt, size_t *n, skv_err *err);
/* The bytes of tokens as text (malloc'ed, NUL-terminated, UTF-8 made valid). */
char *srv_detokenize(const srv *s, const int32_t *tok, size_t n, size_t *len);

/* The model's fill-in-the-middle tokens (prefix, suffix, middle; -1 when absent): a mask of
 * the missing ones (bit 0 prefix, 1 suffix, 2 middle), 0 when the model can infill. */
int srv_model_fim(const skv_model *m, int32_t ids[5]); /* pre, suf, mid, rep, sep; missing mask */
/* POST /infill (complete.c). */
int srv_rt_infill(srv_req *r);
/* A prompt field that is a list of prompts (not one prompt of ids and strings), and one of them. */
int srv_prompt_is_batch(const json_t *p);
/* The messages with an assistant turn of reply[0..len) appended, rendered without a
 * generation prompt and tokenized as a chat prompt: the tokens a client's next turn starts
 * with (malloc'ed; NULL if it cannot be rendered). */
int32_t *srv_chat_history_tokens(const srv *s, json_t *msgs, const char *reply, size_t len, size_t *n);
int32_t *srv_batch_item(const srv *s, const json_t *p, size_t *n, skv_err *err);

/* ---- embeddings (embed.c): /embedding, /embeddings, /v1/embeddings with --embedding ---- */
enum { SRV_POOL_NONE = 0, SRV_POOL_MEAN = 1, SRV_POOL_CLS = 2, SRV_POOL_LAST = 3 };
/* ---- the CORS proxy (proxy.c): GET and POST /cors-proxy?url= with --ui-mcp-proxy ---- */
int srv_proxy_init(void); /* once at start: libcurl's global state */
int srv_rt_cors_proxy(srv_req *r);
int srv_proxy_status(const srv_proxy *px);
/* Calls fn for each header of the upstream reply (those this server sets itself left out). */
void srv_proxy_headers(srv_proxy *px, void (*fn)(void *u, const char *name, const char *value), void *u);
/* Up to max body bytes into out (waits for some, asking alive(a) every 200 ms whether the
 * client is still there); 0 with *end 1 at the end, -1 after a failed transfer or a client
 * gone. */
size_t srv_proxy_read(srv_proxy *px, char *out, size_t max, int *end, int (*alive)(void *), void *a);
void srv_proxy_close(srv_proxy *px); /* the reply is done or its client gone */
/* ---- the built-in agent tools (agent.c): GET and POST /tools with --tools ---- */
int srv_rt_tools_get(srv_req *r);
int srv_rt_tools_post(srv_req *r);
/* posix_spawnp of argv in a process group of its own, signals default and unblocked, with
 * in (< 0: /dev/null), out and err as its 0, 1, 2 and no other descriptor; envp NULL: ours;
 * cwd NULL: ours. 0 or an errno. */
int srv_spawn(pid_t *pid, char *const argv[], char *const envp[], const char *cwd, int in, int out, int err);
/* 1 when an enabled built-in tool has this name. */
int srv_tools_builtin(const srv *s, const char *name);
/* ---- MCP servers (mcp.c): their tools in /tools, with --mcp-servers-config / -json ---- */
/* Parses the configs and lists every server's tools (s->mcp: NULL when none is declared);
 * -1 after a message. */
int srv_mcp_start(srv *s);
void srv_mcp_free(srv_mcp *m);
int srv_mcp_n_tools(const srv_mcp *m);
int srv_mcp_find(const srv_mcp *m, const char *name); /* a tool's index, or -1 */
json_t *srv_mcp_tool_json(const srv_mcp *m, int i);    /* its GET /tools entry (NULL: no memory) */
/* Runs tool i with args (an object): {"plain_text_response": ...} or {"error": ...}, NULL
 * when the request's working memory ran out. alive(a) is asked while it waits. */
json_t *srv_mcp_call(srv_mcp *m, int i, json_t *args, int (*alive)(void *), void *a);
/* b[0..n) as base64 (malloc'ed, NUL-terminated; *len its length when len is not NULL). */
char *srv_base64(const unsigned char *b, size_t n, size_t *len);
int srv_rt_webui(srv_req *r);          /* webui.c: "/" and the web app files (--no-ui: 404) */
int srv_rt_chat_input_tokens(srv_req *r); /* the prompt tokens a chat request would make */
/* Anthropic's Messages API (anthropic.c, complete.c): /v1/messages, /v1/messages/count_tokens. */
int srv_rt_anthropic_messages(srv_req *r);
int srv_rt_anthropic_count_tokens(srv_req *r);
/* An Anthropic Messages request as an OpenAI chat request (new), or NULL with err. */
json_t *srv_anthropic_to_oai(const json_t *body, skv_err *err);
/* OpenAI's Responses API (responses.c, complete.c): /v1/responses, /v1/responses/input_tokens. */
int srv_rt_responses(srv_req *r);
int srv_rt_responses_input_tokens(srv_req *r);
json_t *srv_responses_to_chat(const json_t *body, skv_err *err); /* the chat request (new), or NULL with err */
int srv_rt_embedding(srv_req *r);     /* llama-server's: per input, rows (pooling none) or one row */
int srv_rt_oai_embeddings(srv_req *r); /* OpenAI's: one pooled, normalized vector per input */
/* Slot side: the job's prompt through a cleared context into j->embd (the slot's KV is lost). */
int srv_embed_run(skv_ctx *ctx, srv_job *j);
/* The model's tokenizer.chat_template (malloc'ed), or NULL (chat.c). */
char *srv_model_chat_template(const skv_model *m);

/* server.c: the model, template, store, slot directory and slots of s->p (s->ready is
 * left to the caller); -1 after a message (srv_unload then frees what was made). */
int srv_load(srv *s);
void srv_unload(srv *s);

void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t srv_unix_now(void);

#endif
