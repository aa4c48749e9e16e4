/* seqkv serve: startup (the HTTP side first, so /health answers 503 while the model
 * loads), the model, the store, the slots; then waits for SIGINT/SIGTERM. */
#include <errno.h>
#include "core/fpguard.h"
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "server/chat.h"
#include "server/srv.h"
#include "server/template.h"

static atomic_int g_log_off, g_log_time; /* --log-disable, --log-timestamps */

void srv_log(const char *fmt, ...)
{
    char msg[1024], when[40] = "";
    if (atomic_load(&g_log_off)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (atomic_load(&g_log_time)) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + n, sizeof when - n, ".%03ldZ ", ts.tv_nsec / 1000000L);
    }
    fprintf(stderr, "%sseqkv serve: %s\n", when, msg);
}

int64_t srv_unix_now(void) { return (int64_t)time(NULL); }

static int open_store(srv *s)
{
    char err[512];
    skv_store_params sp = skv_store_default_params();
    sp.budget = s->p.cache_budget < 0 ? -1 : s->p.cache_budget;
    sp.n_threads = s->p.n_threads;
    sp.model_path = s->p.model_path;
    if (s->p.store_map_size) sp.map_size = s->p.store_map_size;
    if (skv_store_open(s->p.store_dir, s->model, SKV_STORE_CREATE, &sp, &s->store, err, sizeof err)) {
        srv_log("cannot open the store %s: %s", s->p.store_dir, err);
        return -1;
    }
    return 0;
}

/* SEQKV_SERVE_TEST_LOAD_DELAY_MS (tests only): waits that long before loading the model,
 * so a test can see /health answer 503 "Loading model" (the bundled model loads in ms). */
static void test_load_delay(void)
{
    const char *v = getenv("SEQKV_SERVE_TEST_LOAD_DELAY_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms <= 0 || ms > 60000) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* --slot-save-path: created (one level) if absent. */
static int slot_dir(const srv *s)
{
    const char *d = s->p.slot_save_path;
    if (!d || !mkdir(d, 0755) || errno == EEXIST) return 0;
    srv_log("--slot-save-path %s: %s", d, strerror(errno));
    return -1;
}

/* The longest token's bytes: a text of L bytes has at least L / max_piece tokens, so a
 * prompt too long for the context is refused before it is tokenized. */
/* The non-empty names of a comma-separated list, as a JSON array; NULL list: []. */
static json_t *name_list(const char *list)
{
    json_t *a = json_array();
    for (const char *p = list; a && p && *p;) {
        size_t n = strcspn(p, ",");
        if (n && json_array_append_new(a, json_stringn(p, n))) {
            json_decref(a);
            return NULL;
        }
        p += n + (p[n] == ',');
    }
    return a;
}

/* The model's id and the lists /v1/models shows: the id is the first alias in byte order
 * (llama-server keeps its aliases in a std::set), else the file name. */
static int model_names(srv *s, const char *file_name)
{
    const char *id = file_name;
    size_t i;
    json_t *v;
    s->aliases = name_list(s->p.alias), s->tags = name_list(s->p.tags);
    if (!s->aliases || !s->tags) return -1;
    json_array_foreach(s->aliases, i, v) {
        const char *a = json_string_value(v);
        if (id == file_name || strcmp(a, id) < 0) id = a;
    }
    snprintf(s->model_id, sizeof s->model_id, "%s", id);
    return 0;
}

static size_t max_piece_bytes(const skv_model *m, int n_vocab)
{
    size_t best = 1;
    char piece[1024];
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t k = 0;
        int rc = skv_token_piece(m, id, piece, sizeof piece, &k);
        if ((rc == SKV_OK || rc == SKV_ERR_RANGE) && k > best) best = k;
    }
    return best;
}

int srv_load(srv *s)
{
    char err[512];
    skv_model_params mp = s->p.model;
    mp.tokenizer_path = NULL;
    if (skv_model_load_params(s->p.model_path, &mp, &s->model, err, sizeof err)) {
        srv_log("cannot load model: %s", err);
        return -1;
    }
    skv_model_get_info(s->model, &s->info);
    int total = s->p.n_ctx > 0 ? s->p.n_ctx : s->info.n_ctx_train;
    s->n_ctx = s->p.kv_unified ? total : total / s->p.parallel; /* llama-server: -c is shared by the slots */
    if (s->n_ctx < SRV_MIN_SLOT_CTX) {
        srv_log("-c %d gives each of %d slots %d positions: at least %d are needed (raise -c, or lower --parallel)",
                total, s->p.parallel, s->n_ctx, SRV_MIN_SLOT_CTX);
        return -1;
    }
    s->max_piece = max_piece_bytes(s->model, s->info.n_vocab);
    const char *base = strrchr(s->p.model_path, '/');
    if (model_names(s, base ? base + 1 : s->p.model_path)) return -1;
    if (s->p.chat_template_text) {
        if (!(s->chat_template = strdup(s->p.chat_template_text))) return -1;
    } else if (s->p.chat_template) {
        const char *src = skv_tmpl_builtin(s->p.chat_template);
        if (!src || !(s->chat_template = strdup(src))) {
            srv_log("unknown chat template '%s' (docs/templates.md lists the built-in names)", s->p.chat_template);
            return -1;
        }
    } else {
        s->chat_template = srv_model_chat_template(s->model);
    }
    if (s->p.chat_template_kwargs) {
        json_error_t je;
        s->kwargs = json_loads(s->p.chat_template_kwargs, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(s->kwargs)) {
            srv_log("--chat-template-kwargs: a JSON object of template variables is needed (%s)",
                    s->kwargs ? "not an object" : je.text);
            return -1;
        }
    }
    s->tool_caps = skv_chat_tool_caps(s->chat_template);
    s->tool_fmt = srv_tools_format(s->chat_template, s->tool_caps);
    if (s->p.store_dir && open_store(s)) return -1;
    if (slot_dir(s)) return -1;
    if (srv_pool_start(s, &s->pool)) {
        srv_log("cannot create %d slots of %d positions", s->p.parallel, s->n_ctx);
        return -1;
    }
    return 0;
}

void srv_unload(srv *s)
{
    srv_pool_stop(s->pool);
    skv_store_close(s->store);
    skv_model_free(s->model);
    json_decref(s->aliases);
    json_decref(s->tags);
    json_decref(s->kwargs);
    free(s->chat_template);
    s->pool = NULL, s->store = NULL, s->model = NULL, s->chat_template = NULL, s->kwargs = NULL;
}

static void shutdown_all(srv *s, void *daemon)
{
    srv_http_stop(daemon);
    srv_sleep_stop(s); /* before the pool it may have freed or may free goes */
    srv_unload(s);
    srv_mcp_free(s->mcp); /* after the routes that call its servers */
    s->mcp = NULL;
}

/* Refuses what cannot be meant (an empty API key would let an empty header in), warns about
 * an open door, and fills the defaults of the limits. -1 after a message. */
skv_sampling_defaults skv_sampling_defaults_init(void)
{
    return (skv_sampling_defaults){.temp = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, .repeat_penalty = 1.0,
                                   .repeat_last_n = 64, .seed = -1, .n_predict = -1, .typ_p = 1.0};
}

/* 1 when keys ('\n'-separated) hold at least one non-empty key. */
static int has_key(const char *keys)
{
    for (; *keys; keys++)
        if (*keys != '\n' && *keys != '\r' && *keys != ' ') return 1;
    return 0;
}

/* s->gcp_*: a route from p (a leading '/' added, as llama-server); -1 after a message. */
static int gcp_route(char *out, size_t cap, const char *route, const char *what)
{
    if (!route || !*route) return 0;
    if (strlen(route) + 2 > cap || strspn(route, "/") > 1 || strpbrk(route, "?# \t")) {
        srv_log("%s=%.100s: a path such as /predict (at most %zu characters)", what, route, cap - 2);
        return -1;
    }
    snprintf(out, cap, "%s%s", route[0] == '/' ? "" : "/", route);
    return 0;
}

static int check_params(skv_server_params *p)
{
    if (p->api_key && !has_key(p->api_key)) {
        srv_log("--api-key is empty: give a non-empty key (or leave the option out)");
        return -1;
    }
    if (!p->api_key && strcmp(p->host, "127.0.0.1") && strncmp(p->host, "127.", 4))
        srv_log("warning: listening on %s (not loopback) without --api-key: anyone who can reach it may use it",
                p->host);
    if (!p->mem_budget) p->mem_budget = SRV_MEM_TOTAL;
    if (p->mem_budget < (1u << 20)) {
        srv_log("--mem-budget %llu: at least 1 MiB", p->mem_budget);
        return -1;
    }
    if (p->max_conns_per_client <= 0) p->max_conns_per_client = SRV_MAX_CONN_PER_CLIENT;
    return 0;
}

/* The default sampler chain of --samplers / --sampling-seq (else llama-server's). */
static int default_chain(srv *s)
{
    skv_err err = {0};
    const skv_sampling_defaults *d = &s->p.defaults;
    if (d->samplers ? srv_samplers_parse(d->samplers, ';', s->chain, &s->n_chain, &err)
                    : d->sampling_seq && srv_samplers_parse(d->sampling_seq, 0, s->chain, &s->n_chain, &err)) {
        srv_log("--%s: %s", d->samplers ? "samplers" : "sampling-seq", err.msg);
        return -1;
    }
    if (!d->samplers && !d->sampling_seq) { /* llama-server's order */
        memcpy(s->chain, srv_default_samplers, sizeof srv_default_samplers);
        s->n_chain = SRV_N_DEFAULT_SAMPLERS;
    }
    return 0;
}

int skv_server_run(const skv_server_params *p)
{
    srv s = {.p = *p, .t_start = srv_unix_now()};
    void *daemon = NULL;
    int port = 0, sig = 0;
    if (check_params(&s.p) || default_chain(&s)) return 1;
    atomic_store(&g_log_time, s.p.log_timestamps);
    if (gcp_route(s.gcp_predict, sizeof s.gcp_predict, s.p.gcp_predict, "AIP_PREDICT_ROUTE") ||
        gcp_route(s.gcp_health, sizeof s.gcp_health, s.p.gcp_health, "AIP_HEALTH_ROUTE"))
        return 1;
    srv_route conflict;
    if (s.gcp_predict[0] && srv_route_find(&(srv){0}, "POST", s.gcp_predict, &conflict)) {
        srv_log("AIP_PREDICT_ROUTE=%s conflicts with an existing route", s.gcp_predict);
        return 1;
    }
    if (s.gcp_predict[0]) srv_log("Vertex AI mode (AIP_MODE=PREDICTION): POST %s runs instances", s.gcp_predict);
    if (s.p.ui_mcp_proxy && srv_proxy_init()) {
        srv_log("--ui-mcp-proxy: libcurl cannot be initialised");
        return 1;
    }
    if (s.p.ui_mcp_proxy)
        srv_log("--ui-mcp-proxy: /cors-proxy forwards requests to any http(s) URL it is given (do not enable "
                "it where untrusted clients reach the server)");
    if (s.p.mcp_config || s.p.mcp_json)
        srv_log("MCP servers: POST /tools runs their tools (programs started as this user: do not enable it where "
                "untrusted clients reach the server; CORS: %s)",
                s.p.cors_origins ? s.p.cors_origins : "*");
    if (s.p.agent_tools)
        srv_log("--tools: POST /tools reads and writes files and runs shell commands as this user (do not enable "
                "it where untrusted clients reach the server; CORS: %s)",
                s.p.cors_origins ? s.p.cors_origins : "*");
    srv_mem_install_json(); /* before any JSON value exists */
    srv_mem_configure((size_t)s.p.mem_budget);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* every thread started below inherits it */
    signal(SIGPIPE, SIG_IGN);
    if (srv_mcp_start(&s)) return 1; /* after the allocator (its tool list is JSON) and SIGPIPE */
    atomic_init(&s.ready, 0);
    if (srv_http_start(&s, &daemon, &port)) {
        srv_mcp_free(s.mcp);
        return 1;
    }
    srv_log("loading %s (http://%s:%d answers 503 until it is loaded)", p->model_path, p->host, port);
    test_load_delay();
    if (srv_load(&s)) {
        shutdown_all(&s, daemon);
        return 1;
    }
    atomic_store(&s.ready, 1);
    if (srv_sleep_start(&s)) {
        srv_log("--sleep-idle-seconds: cannot start the idle watcher");
        shutdown_all(&s, daemon);
        return 1;
    }
    srv_log("listening on http://%s:%d (%d slots x %d positions%s%s)", p->host, port, p->parallel, s.n_ctx,
            s.store ? ", store " : "", s.store ? p->store_dir : "");
    atomic_store(&g_log_off, s.p.log_disable); /* after the address: a port 0 is told */
    sigwait(&set, &sig);
    srv_log("signal %d: shutting down", sig);
    shutdown_all(&s, daemon);
    return 0;
}
