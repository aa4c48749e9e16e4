/* seqkv serve: the HTTP server (src/server/, docs/server.md), with llama-server's flags:
 * the same spellings, short forms and meanings (-c is the total context divided among the
 * slots, -t the threads a computation uses, as llama-server's), the sampling defaults requests inherit, and
 * the GPU-only flags accepted with one line saying they do nothing here. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/util.h"
#include "server/limits.h"
#include "server/server.h"
#include "server/template.h"

typedef struct {
    const char *model, *store, *host, *api_key, *api_key_file, *alias, *tags, *chat_template, *chat_template_file;
    const char *slot_save_path, *gpu_value, *cors_origins, *cors_methods, *cors_headers, *samplers, *sampling_seq;
    const char *tools, *tools_runtime, *mcp_config, *mcp_json, *tmpl_kwargs;
    const char *tune_value, *log_file, *api_prefix, *budget_message, *rope_scaling;
    cli_list override_kv;
    double rope_scale, rope_freq_base, rope_freq_scale;
    long keep; /* tune_*: llama.cpp's own tuning knobs (a note) */
    long reasoning_budget;
    int tune_flag, log_disable, log_timestamps;
    long sleep_idle;
    long port, batch, parallel, ctx, threads, top_k, seed, n_predict, repeat_last_n, cache_reuse, conns_per_client, min_keep;
    int reasoning_format, ignore_eos, ctx_shift, no_ui, mcp_proxy, agent, reuse, reranking, kv_unified, cors_no_cred, jinja, slots, metrics, gpu_flag, embedding, pooling, verbose, reasoning;
    double recompute, quality, temp, top_p, min_p, typ_p, repeat_penalty, presence_penalty, frequency_penalty;
    long long budget, mem_budget;
} serve_opts;

#define F(x) offsetof(serve_opts, x)
/* llama-server's GPU and batching flags: accepted (existing command lines start), ignored. */
#define GPU_VALUE(name, letter) {name, letter, CLI_STR, "V", 0, 0, F(gpu_value), NULL}
#define GPU_FLAG(name) {name, 0, CLI_FLAG, NULL, 0, 0, F(gpu_flag), NULL}
/* llama.cpp's scheduling and cache knobs: accepted, one line says what seqkv does instead. */
#define TUNE_VALUE(name) {name, 0, CLI_STR, "V", 0, 0, F(tune_value), NULL}
#define TUNE_FLAG(name) {name, 0, CLI_FLAG, NULL, 0, 0, F(tune_flag), NULL}
static const cli_opt serve_table[] = {
    CLI_OPT_MODEL(F(model)),
    {"store", 0, CLI_PATH, "DIR", 0, 0, F(store), "session store used as the prompt cache (created if absent);\n"
                                                   "default: none (each slot keeps only its own KV, in RAM)"},
    {"host", 0, CLI_STR, "ADDR", 0, 0, F(host), "IPv4 address to listen on (default 127.0.0.1: loopback only)"},
    {"port", 0, CLI_INT, "N", 0, 65535, F(port), "TCP port (default 8080; 0 = any free port, printed)"},
    {"parallel", 0, CLI_INT, "N", 1, SRV_MAX_PARALLEL, F(parallel), "slots decoding at once (default 1); also -np"},
    {"np", 0, CLI_INT, "N", 1, SRV_MAX_PARALLEL, F(parallel), NULL}, /* llama-server's short form */
    CLI_OPT_CTX(F(ctx), 0, "context positions of all slots together, each slot getting\n"
                           "N / --parallel (default 0: the model's trained context)"),
    {"batch-size", 'b', CLI_INT, "N", 1, 1 << 24, F(batch), "prompt tokens between two prompt_progress events of a\n"
     "request with return_progress (default 2048; the KV is the same)"},
    {"kv-unified", 0, CLI_FLAG, NULL, 0, 0, F(kv_unified), "every slot gets the whole -c (llama-server's unified KV;\n"
                                                              "here each slot still has its own: --parallel x the memory)"},
    {"kvu", 0, CLI_FLAG, NULL, 0, 0, F(kv_unified), NULL},
    {"threads", 't', CLI_INT, "N", 1, 256, F(threads), "threads a slot computes with (default: the cores present);\n"
     "the batched decode step of all slots runs on them, a lone\nprefill gets them all"},
    {"n-predict", 'n', CLI_INT, "N", -1, SRV_MAX_N_PREDICT, F(n_predict), "tokens to generate when a request does not say\n"
                                                                         "(default -1: until the context is full, at most 4096)"},
    {"predict", 0, CLI_INT, "N", -1, SRV_MAX_N_PREDICT, F(n_predict), NULL},
    {"temp", 0, CLI_FLOAT, "T", 0, 100, F(temp), "default temperature (0.8)"},
    {"temperature", 0, CLI_FLOAT, "T", 0, 100, F(temp), NULL},
    {"top-k", 0, CLI_INT, "N", 0, INT_MAX, F(top_k), "default top-k (40; 0 = the whole vocabulary)"},
    {"top-p", 0, CLI_FLOAT, "P", 0, 1, F(top_p), "default top-p (0.95)"},
    {"min-p", 0, CLI_FLOAT, "P", 0, 1, F(min_p), "default min-p (0.05)"},
    {"typical", 0, CLI_FLOAT, "P", 0, 1, F(typ_p), "default typical-p (1.0 = off)"},
    {"min-keep", 0, CLI_INT, "N", 0, INT_MAX, F(min_keep), "candidates top-p, min-p and typical-p always keep (0)"},
    {"samplers", 0, CLI_STR, "NAMES", 0, 0, F(samplers), "the sampler chain's order, names separated by ';' (default\n"
     "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)"},
    {"sampling-seq", 0, CLI_STR, "CHARS", 0, 0, F(sampling_seq), "the same as characters (default edskypmxt)"},
    {"sampler-seq", 0, CLI_STR, "CHARS", 0, 0, F(sampling_seq), NULL},
    {"ignore-eos", 0, CLI_FLAG, NULL, 0, 0, F(ignore_eos), "never end a generation at the end-of-text token"},
    {"repeat-penalty", 0, CLI_FLOAT, "F", 0, 100, F(repeat_penalty), "default repeat penalty (1.0 = none)"},
    {"repeat-last-n", 0, CLI_INT, "N", -1, 1 << 24, F(repeat_last_n), "tokens the penalties look back over (64; -1 = the context)"},
    {"presence-penalty", 0, CLI_FLOAT, "F", -100, 100, F(presence_penalty), "default presence penalty (0)"},
    {"frequency-penalty", 0, CLI_FLOAT, "F", -100, 100, F(frequency_penalty), "default frequency penalty (0)"},
    {"seed", 's', CLI_INT, "N", -1, 4294967295.0, F(seed), "default sampling seed (-1: a new one per request)"},
    {"api-key", 0, CLI_STR, "KEY", 0, 0, F(api_key), "require \"Authorization: Bearer KEY\" (or X-Api-Key) on every\n"
                                                     "route but /health and /v1/models; KEY,KEY2 for several"},
    {"api-key-file", 0, CLI_PATH, "FILE", 0, 0, F(api_key_file), "API keys, one per line (with or besides --api-key)"},
    {"alias", 'a', CLI_STR, "NAME[,NAME]", 0, 0, F(alias), "the model's names in /v1/models; the id is the first in\n"
                                                        "byte order (default: the file name)"},
    {"tags", 0, CLI_STR, "TAG[,TAG]", 0, 0, F(tags), "labels /v1/models lists for the model"},
    {"chat-template", 0, CLI_STR, "NAME|TEMPLATE", 0, 0, F(chat_template),
     "a built-in chat template (chatml, llama2, llama3, mistral-v7,\ngemma, phi3, phi4, zephyr, vicuna, monarch, bailing, "
     "command-r,\nsimple) or a Jinja template's text, instead of the model's own"},
    {"chat-template-file", 0, CLI_PATH, "FILE", 0, 0, F(chat_template_file), "a Jinja chat template read from FILE"},
    {"jinja", 0, CLI_FLAG, NULL, 0, 0, F(jinja), "templates are always Jinja here (accepted for llama-server's\n"
                                                 "command lines; --no-jinja too)"},
    {"no-jinja", 0, CLI_UNSET, NULL, 0, 0, F(jinja), NULL},
    {"chat-template-kwargs", 0, CLI_STR, "JSON", 0, 0, F(tmpl_kwargs), "template variables every chat render sees, a JSON\n"
     "object (a request's chat_template_kwargs add to them)"},
    {"reasoning", 0, CLI_CHOICE, "on|off|auto", 0, 0, F(reasoning), "thinking in chats: off sets enable_thinking false and\n"
     "closes a thought block the prompt opens (default auto: the\ntemplate's own)"},
    {"rea", 0, CLI_CHOICE, "on|off|auto", 0, 0, F(reasoning), NULL},
    {"sleep-idle-seconds", 0, CLI_INT, "N", 0, 86400 * 365, F(sleep_idle), "after N seconds without requests, free the slots\n"
     "and the RAM prompt cache until the next request (default 0:\nnever; the store keeps every conversation)"},
    {"slots", 0, CLI_FLAG, NULL, 0, 0, F(slots), "GET /slots answers (the default)"},
    {"no-slots", 0, CLI_UNSET, NULL, 0, 0, F(slots), "GET /slots answers 501"},
    {"verbose", 'v', CLI_FLAG, NULL, 0, 0, F(verbose), "replies carry llama-server's \"__verbose\" result (the prompt as\n"
     "text with its special tokens, ...)"},
    {"cors-origins", 0, CLI_STR, "ORIGINS", 0, 0, F(cors_origins), "origins browsers may call from: * (default, any), localhost\n"
     "(only http(s)://localhost, 127.0.0.1, [::1]) or A,B,..."},
    {"cors-methods", 0, CLI_STR, "METHODS", 0, 0, F(cors_methods), "a preflight's allowed methods (GET, POST, DELETE, OPTIONS)"},
    {"cors-headers", 0, CLI_STR, "HEADERS", 0, 0, F(cors_headers), "a preflight's allowed headers (default *)"},
    {"cors-credentials", 0, CLI_UNSET, NULL, 0, 0, F(cors_no_cred), "credentials allowed (the default)"},
    {"no-cors-credentials", 0, CLI_FLAG, NULL, 0, 0, F(cors_no_cred), "credentials not allowed"},
    {"no-ui", 0, CLI_FLAG, NULL, 0, 0, F(no_ui), "no web UI: / answers 404 (default: a small chat page)"},
    {"no-webui", 0, CLI_FLAG, NULL, 0, 0, F(no_ui), NULL},
    {"ui", 0, CLI_UNSET, NULL, 0, 0, F(no_ui), NULL},
    {"webui", 0, CLI_UNSET, NULL, 0, 0, F(no_ui), NULL},
    {"ui-mcp-proxy", 0, CLI_FLAG, NULL, 0, 0, F(mcp_proxy), "GET and POST /cors-proxy?url=URL forward to URL (the web\n"
     "UI's CORS proxy for MCP servers; default off: 403). Do not\nenable where untrusted clients reach the server"},
    {"webui-mcp-proxy", 0, CLI_FLAG, NULL, 0, 0, F(mcp_proxy), NULL},
    {"no-ui-mcp-proxy", 0, CLI_UNSET, NULL, 0, 0, F(mcp_proxy), NULL},
    {"no-webui-mcp-proxy", 0, CLI_UNSET, NULL, 0, 0, F(mcp_proxy), NULL},
    {"tools", 0, CLI_STR, "LIST", 0, 0, F(tools), "POST /tools runs llama-server's built-in agent tools on this\n"
     "host: all, or some of read_file, file_glob_search, grep_search,\nexec_shell_command, write_file, edit_file, "
     "get_info (default\nnone: 403). They read and write files and run commands as\nthis user: do not enable where "
     "untrusted clients reach the\nserver. CORS then defaults to localhost"},
    {"tools-runtime", 0, CLI_STR, "SPEC", 0, 0, F(tools_runtime), NULL}, /* refused: check_opts says why */
    {"mcp-servers-config", 0, CLI_STR, "PATH", 0, 0, F(mcp_config), "a JSON file of MCP servers (Cursor's format:\n"
     "{\"mcpServers\": {NAME: {\"command\": ..., \"args\": [...]}}}): each\nis started when one of its tools is "
     "called; /tools lists and\nruns their tools as NAME_TOOL. They run as this user: do not\nenable where untrusted "
     "clients reach the server. CORS then\ndefaults to localhost"},
    {"mcp-servers-json", 0, CLI_STR, "JSON", 0, 0, F(mcp_json), "the same servers as inline JSON"},
    {"agent", 0, CLI_FLAG, NULL, 0, 0, F(agent), "--tools all and --ui-mcp-proxy together (also -ag)"},
    {"ag", 0, CLI_FLAG, NULL, 0, 0, F(agent), NULL},
    {"no-agent", 0, CLI_UNSET, NULL, 0, 0, F(agent), NULL},
    {"no-ag", 0, CLI_UNSET, NULL, 0, 0, F(agent), NULL},
    {"metrics", 0, CLI_FLAG, NULL, 0, 0, F(metrics), "GET /metrics answers (default: 501, as llama-server)"},
    {"embedding", 0, CLI_FLAG, NULL, 0, 0, F(embedding), "/embedding and /v1/embeddings answer (the model's final\n"
     "hidden state, pooled; a slot's cache is cleared by each)"},
    {"embeddings", 0, CLI_FLAG, NULL, 0, 0, F(embedding), NULL},
    {"reranking", 0, CLI_FLAG, NULL, 0, 0, F(reranking), NULL},
    {"pooling", 0, CLI_CHOICE, "none|mean|cls|last|rank", 0, 0, F(pooling), "how --embedding pools the positions (default last;\n"
     "none: one row per token, /embedding only)"},
    {"cache-reuse", 0, CLI_INT, "N", 0, 1 << 24, F(cache_reuse), "accepted; every stored prefix is reused here"},
    {"cache-budget", 0, CLI_BYTES, "BYTES", 0, 9e18, F(budget), "bytes of materialised KV the store may keep\n"
                                                                "(default: the store's own; 64M for a new one)"},
    {"mem-budget", 0, CLI_BYTES, "BYTES", 1 << 20, 9e18, F(mem_budget), "working memory of all requests together (bodies, JSON,\n"
     "tokenizing, rendering; default 256M): beyond it 503, beyond\nmin(64M, BYTES) for one request 413"},
    {"max-conns-per-client", 0, CLI_INT, "N", 1, SRV_MAX_CONNECTIONS, F(conns_per_client),
     "open connections from one address (default 128)"},
    {"slot-save-path", 0, CLI_PATH, "DIR", 0, 0, F(slot_save_path), "directory of POST /slots/{id}?action=save|restore\n"
                                                                      "files (.skv; created if absent); default: with --store,\n"
                                                                      "sessions slot:NAME in the store, else none (501)"},
    {"context-shift", 0, CLI_FLAG, NULL, 0, 0, F(ctx_shift), "a full context keeps n_keep tokens, drops half the rest\n"
                                                             "and goes on (default: generation stops at a full context)"},
    {"no-context-shift", 0, CLI_UNSET, NULL, 0, 0, F(ctx_shift), NULL},
    {"keep", 0, CLI_INT, "N", -1, INT32_MAX, F(keep), "prompt tokens a context shift keeps when a request does\n"
     "not say (n_keep; default 0, -1: all)"},
    {"api-prefix", 0, CLI_STR, "PATH", 0, 0, F(api_prefix), "serve every route under PATH (\"/v2\": /v2/completion, ...)"},
    {"log-disable", 0, CLI_FLAG, NULL, 0, 0, F(log_disable), "no log lines once it listens (the start's lines and its\nerrors still print)"},
    {"log-file", 0, CLI_PATH, "FILE", 0, 0, F(log_file), "append the log to FILE instead of stderr"},
    {"log-timestamps", 0, CLI_FLAG, NULL, 0, 0, F(log_timestamps), "each log line starts with the UTC time"},
    {"reasoning-format", 0, CLI_CHOICE, "none|auto|deepseek|deepseek-legacy", 0, 0, F(reasoning_format),
     "a chat reply's thoughts (the template's <think> block, ...):\n"
     "auto / deepseek in reasoning_content, deepseek-legacy there and\nin content, none left in content (default auto)"},
    {"reasoning-budget", 0, CLI_INT, "N", -1, INT_MAX, F(reasoning_budget), "tokens a chat reply's thought may take, then its\n"
     "closing marker is forced (-1 unlimited, the default; 0: at once)"},
    {"reasoning-budget-message", 0, CLI_STR, "TEXT", 0, 0, F(budget_message), "written before the forced closing marker\n"
     "(default none)"},
    {"reuse", 0, CLI_CHOICE, "exact|near", 0, 0, F(reuse), "near (needs --store): prompts the exact caches cover badly\n"
     "reuse a near-duplicate stored session: APPROXIMATE, marked in every reply (docs/near.md)"},
    {"recompute", 0, CLI_FLOAT, "F", 0, 1, F(recompute), "--reuse near: fraction of positions to recompute (default 0.15)"},
    {"quality", 0, CLI_FLOAT, "KL", 1e-12, 100, F(quality),
     "--reuse near: target mean KL (nats); picks the fraction from the measured calibration"},
    {"override-kv", 0, CLI_LIST, "KEY=TYPE:VALUE,...", 0, CLI_LIST_MAX, F(override_kv),
     "model metadata read in place of the file's (TYPE int, float,\n"
     "bool or str; repeatable, or comma-separated), e.g.\ntokenizer.ggml.add_bos_token=bool:false"},
    {"rope-scaling", 0, CLI_STR, "none|linear|yarn", 0, 0, F(rope_scaling),
     "RoPE position scaling (default: the model's; yarn is not\nsupported)"},
    {"rope-scale", 0, CLI_FLOAT, "N", 1e-6, 1e6, F(rope_scale), "linear RoPE scaling: positions divided by N"},
    {"rope-freq-base", 0, CLI_FLOAT, "N", 1e-6, 1e30, F(rope_freq_base), "RoPE base frequency (default: the model's)"},
    {"rope-freq-scale", 0, CLI_FLOAT, "N", 1e-6, 1e6, F(rope_freq_scale), "linear RoPE scaling: positions multiplied by N"},
    GPU_VALUE("n-gpu-layers", 0), GPU_VALUE("ngl", 0), GPU_VALUE("gpu-layers", 0), GPU_VALUE("flash-attn", 0),
    GPU_VALUE("fa", 0), GPU_VALUE("split-mode", 0), GPU_VALUE("sm", 0), GPU_VALUE("main-gpu", 0), GPU_VALUE("mg", 0),
    GPU_VALUE("tensor-split", 0), GPU_VALUE("ts", 0), GPU_VALUE("device", 0), GPU_VALUE("dev", 0),
    GPU_VALUE("ubatch-size", 0), GPU_VALUE("ub", 0), GPU_VALUE("cache-type-k", 0),
    GPU_VALUE("ctk", 0), GPU_VALUE("cache-type-v", 0), GPU_VALUE("ctv", 0), GPU_FLAG("cont-batching"), GPU_FLAG("backend_sampling"), GPU_FLAG("backend-sampling"),
    GPU_FLAG("cb"), GPU_FLAG("no-cont-batching"), GPU_FLAG("nocb"), GPU_FLAG("no-mmap"), GPU_FLAG("mlock"),
    GPU_FLAG("no-warmup"), GPU_FLAG("offline"),
    TUNE_VALUE("threads-batch"), TUNE_VALUE("tb"), TUNE_VALUE("threads-http"), TUNE_VALUE("numa"), TUNE_VALUE("prio"),
    TUNE_VALUE("prio-batch"), TUNE_VALUE("poll"), TUNE_VALUE("poll-batch"), TUNE_VALUE("cpu-mask"), TUNE_VALUE("C"),
    TUNE_VALUE("cpu-range"), TUNE_VALUE("Cr"), TUNE_VALUE("cpu-mask-batch"), TUNE_VALUE("Cb"), TUNE_VALUE("cpu-range-batch"),
    TUNE_VALUE("Crb"), TUNE_VALUE("cpu-strict"), TUNE_VALUE("cpu-strict-batch"), TUNE_VALUE("timeout"), TUNE_VALUE("to"),
    TUNE_VALUE("slot-prompt-similarity"), TUNE_VALUE("sps"), TUNE_VALUE("cache-ram"), TUNE_VALUE("cram"),
    TUNE_VALUE("ctx-checkpoints"), TUNE_VALUE("swa-checkpoints"), TUNE_VALUE("log-colors"), TUNE_VALUE("verbosity"),
    TUNE_VALUE("lv"), TUNE_VALUE("log-verbosity"), TUNE_FLAG("no-cache-idle-slots"), TUNE_FLAG("cache-idle-slots"),
    TUNE_FLAG("swa-full"), TUNE_FLAG("log-prefix"), TUNE_FLAG("no-perf"), TUNE_FLAG("perf"),
    {0},
};
static const cli_cmd serve_cmd = {
    "serve", "[-m MODEL] [--store DIR] [--host 127.0.0.1] [--port 8080] [-np N] [-c CTX] [-t N]\n"
             "[--temp T] [--seed N] [-n N] [--api-key KEY] [--chat-template NAME|TEMPLATE] [--metrics]",
    "Serves the model over HTTP with llama-server's and OpenAI's API (/completion,\n"
    "/v1/completions, /v1/chat/completions, /tokenize, /health, ...) and llama-server's\n"
    "flags. With --store, every prompt is looked up in the session store and only its\n"
    "unmatched tail is computed; finished conversations are put back, so the cache\n"
    "survives restarts. SIGINT/SIGTERM stop it.\n",
    serve_table, 0,
    "llama-server's GPU and batching flags (-ngl, -fa, -sm, -mg, -ts, -dev, -ub, -ctk,\n"
    "-ctv, -cb, --no-mmap, --mlock, ...) are accepted and do nothing here.\n"
    "See docs/server.md for the endpoints, limits and measured figures.\n"};

static long cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

/* The keys of --api-key (comma-separated) and --api-key-file (one per line), '\n'-joined
 * into *out (malloc'ed; NULL when neither was given). 0, or -1 after a message. */
static int api_keys(const serve_opts *o, char **out)
{
    size_t n = 0;
    char *file = o->api_key_file ? cli_read_file(o->api_key_file, &n) : NULL;
    *out = NULL;
    if (o->api_key_file && !file) return -1;
    if (!o->api_key && !file) return 0;
    const char *key = o->api_key ? o->api_key : "";
    char *k = malloc(strlen(key) + n + 2);
    if (!k) return free(file), -1;
    snprintf(k, strlen(key) + n + 2, "%s%s%s", key, *key && file ? "\n" : "", file ? file : "");
    for (char *c = k; *c; c++) if (*c == ',' && c < k + strlen(key)) *c = '\n';
    free(file);
    *out = k;
    return 0;
}

/* The chat template: --chat-template-file's text, a --chat-template that is no built-in
 * name (a Jinja template's text, as llama-server reads it), or the built-in name (NULL: the
 * model's own). */
static int chat_template(const serve_opts *o, skv_server_params *p, char **owned)
{
    size_t n;
    *owned = NULL;
    if (o->chat_template && o->chat_template_file)
        return cli_usage(&serve_cmd, "give --chat-template or --chat-template-file, not both"), -1;
    if (o->chat_template_file) {
        if (!(*owned = cli_read_file(o->chat_template_file, &n))) return -1;
        p->chat_template_text = *owned;
    } else if (o->chat_template && !skv_tmpl_builtin(o->chat_template)) { /* as llama-server --jinja: the text */
        p->chat_template_text = o->chat_template;
    } else {
        p->chat_template = o->chat_template;
    }
    return 0;
}

static int check_opts(const serve_opts *o)
{
    if (o->recompute >= 0 && o->quality > 0) return cli_usage(&serve_cmd, "give --recompute F or --quality KL, not both");
    if (!o->reuse && (o->recompute >= 0 || o->quality > 0))
        return cli_usage(&serve_cmd, "--recompute and --quality need --reuse near");
    if (o->reuse && !o->store) return cli_usage(&serve_cmd, "--reuse near needs --store DIR");
    if (o->gpu_value || o->gpu_flag)
        fprintf(stderr, "seqkv serve: GPU and batching flags (-ngl, -fa, -b, -ctk, ...) do nothing here: seqkv runs on "
                        "the CPU and batches by itself\n");
    if (o->tune_value || o->tune_flag)
        fprintf(stderr, "seqkv serve: llama.cpp's scheduling, cache and log-style knobs (-tb, --threads-http, --numa, "
                        "--prio, --poll, -C, --timeout, -sps, --cache-ram, --ctx-checkpoints, --swa-full, --log-colors, "
                        "-lv, ...) do nothing here: -t threads run prompts and generation, connections have their own "
                        "limits, the slots and --store are the prompt cache\n");
    if (o->reranking || o->pooling == 4)
        fprintf(stderr, "seqkv serve: --reranking / --pooling rank need a reranker model, which seqkv does not run: "
                        "/rerank answers 501\n");
    if (o->tools_runtime)
        return cli_usage(&serve_cmd, "--tools-runtime: tool runtimes (containers, SSH) are not supported; the tools "
                                     "act on the host seqkv serve runs on (run it there)");
    if (o->cache_reuse) fprintf(stderr, "seqkv serve: --cache-reuse does nothing here: every stored prefix is reused\n");
    if (o->rope_scaling && strcmp(o->rope_scaling, "none") && strcmp(o->rope_scaling, "linear"))
        return cli_usage(&serve_cmd, "--rope-scaling %s: %s", o->rope_scaling,
                         strcmp(o->rope_scaling, "yarn") ? "one of none, linear, yarn"
                                                         : "YaRN scaling is not supported by seqkv's engine (none, linear are)");
    if (o->rope_scale > 0 && o->rope_freq_scale > 0)
        return cli_usage(&serve_cmd, "--rope-scale and --rope-freq-scale say the same thing: give one");
    return CLI_CONTINUE;
}

/* --override-kv's items (each option a comma-separated list, as llama-server's) in *out
 * (NULL-ended, strings in *buf); -1 after a message. */
static int kv_overrides(const serve_opts *o, char ***out, char **buf, size_t *n)
{
    size_t total = 0, k = 0;
    for (int i = 0; i < o->override_kv.n; i++) total += strlen(o->override_kv.v[i]) + 1;
    *out = NULL, *n = 0;
    if (!total) return 0;
    *buf = malloc(total), *out = calloc(total + 1, sizeof **out);
    if (!*buf || !*out) return fprintf(stderr, "seqkv serve: out of memory\n"), -1;
    char *at = *buf;
    for (int i = 0; i < o->override_kv.n; i++) {
        strcpy(at, o->override_kv.v[i]);
        for (char *save = NULL, *item = strtok_r(at, ",", &save); item; item = strtok_r(NULL, ",", &save)) (*out)[k++] = item;
        at += strlen(at) + 1;
    }
    *n = k;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 1, .threads = 0, .budget = -1, .recompute = -1,
                    .temp = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, .typ_p = 1.0, .repeat_penalty = 1.0,
                    .repeat_last_n = 64,
                    .seed = -1, .n_predict = -1, .slots = 1, .jinja = 1, .pooling = -1, .reasoning = 2, .reasoning_format = 1, .reasoning_budget = -1};
    int rc = cli_parse(&serve_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE || (rc = check_opts(&o)) != CLI_CONTINUE) return rc;
    char *keys = NULL, *tmpl = NULL;
    long threads = o.threads ? o.threads : cores();
    skv_server_params p = {.model_path = o.model ? o.model : cli_default_model(), .store_dir = o.store,
                           .host = o.host, .alias = o.alias, .tags = o.tags, .port = (int)o.port, .parallel = (int)o.parallel,
                           .n_ctx = (int)o.ctx, .n_batch = (int)o.batch, .kv_unified = o.kv_unified,
                           .n_threads = (int)threads,
                           .cache_budget = o.budget, .slot_save_path = o.slot_save_path, .ctx_shift = o.ctx_shift,
                           .reuse_near = o.reuse, .near_recompute = o.recompute, .near_quality = o.quality,
                           .store_map_size = cli_store_map_size(), .mem_budget = (unsigned long long)o.mem_budget,
                           .max_conns_per_client = (int)o.conns_per_client, .slots_endpoint = o.slots,
                           .metrics_endpoint = o.metrics, .verbose = o.verbose, .embedding = o.embedding, .no_ui = o.no_ui,
                           .ui_mcp_proxy = o.mcp_proxy,
                           .pooling = o.pooling < 0 || o.pooling == 4 ? 3 /* SRV_POOL_LAST */ : o.pooling,
                           .cors_origins = o.cors_origins, .cors_methods = o.cors_methods,
                           .cors_headers = o.cors_headers, .cors_no_credentials = o.cors_no_cred,
                           .defaults = {.temp = o.temp, .top_k = (int)o.top_k, .top_p = o.top_p, .min_p = o.min_p,
                                        .repeat_penalty = o.repeat_penalty, .repeat_last_n = (int)o.repeat_last_n,
                                        .presence_penalty = o.presence_penalty,
                                        .frequency_penalty = o.frequency_penalty, .seed = o.seed,
                                        .n_predict = (int)o.n_predict, .typ_p = o.typ_p, .min_keep = (int)o.min_keep,
                                        .ignore_eos = o.ignore_eos, .samplers = o.samplers,
                                        .sampling_seq = o.sampling_seq, .n_keep = (int)o.keep}};
    if (o.agent) {
        p.ui_mcp_proxy = 1;
        if (!o.tools) o.tools = "all";
    }
    if (o.tools) {
        skv_err err = {0};
        unsigned mask;
        if (skv_server_tools_parse(o.tools, &mask, &err)) return cli_usage(&serve_cmd, "--tools: %s", err.msg);
        p.agent_tools = mask;
    }
    p.mcp_config = o.mcp_config, p.mcp_json = o.mcp_json;
    p.reasoning = o.reasoning == 0 ? 1 : o.reasoning == 1 ? -1 : 0; /* on, off, auto */
    p.reasoning_format = o.reasoning_format;
    p.reasoning_budget = (int)o.reasoning_budget;
    p.reasoning_budget_message = o.budget_message;
    if (o.budget_message && strlen(o.budget_message) > SRV_MAX_BUDGET_MESSAGE)
        return cli_usage(&serve_cmd, "--reasoning-budget-message: at most %d bytes", SRV_MAX_BUDGET_MESSAGE);
    const char *aip = getenv("AIP_MODE"); /* Vertex AI's custom-container contract (llama-server's) */
    if (aip && !strcmp(aip, "PREDICTION")) {
        const char *route = getenv("AIP_PREDICT_ROUTE"), *port = getenv("AIP_HTTP_PORT");
        p.gcp_predict = route && *route ? route : "/predict";
        p.gcp_health = getenv("AIP_HEALTH_ROUTE");
        if (port && *port) {
            char *end;
            long v = strtol(port, &end, 10);
            if (*end || v < 0 || v > 65535) return cli_usage(&serve_cmd, "AIP_HTTP_PORT=%s: a port 0..65535", port);
            p.port = (int)v;
        }
    }
    p.chat_template_kwargs = o.tmpl_kwargs;
    p.sleep_idle_s = (int)o.sleep_idle;
    p.log_disable = o.log_disable, p.log_timestamps = o.log_timestamps;
    if (o.api_prefix && *o.api_prefix) { /* as llama-server: without the trailing slash */
        size_t n = strlen(o.api_prefix);
        if (o.api_prefix[0] != '/' || o.api_prefix[n - 1] == '/' || n > 64 || strpbrk(o.api_prefix, "?# "))
            return cli_usage(&serve_cmd, "--api-prefix %s: a path such as /v2 (leading slash, none trailing)", o.api_prefix);
        p.api_prefix = o.api_prefix;
    }
    if (o.log_file && !freopen(o.log_file, "a", stderr))
        return fprintf(stdout, "seqkv serve: --log-file %s: cannot open it for appending\n", o.log_file), CLI_FAIL;
    if (o.log_file) setvbuf(stderr, NULL, _IOLBF, 0);
    if ((o.tools || o.mcp_config || o.mcp_json) && !o.cors_origins) {
        p.cors_origins = "localhost"; /* as llama-server: tools make the browser default localhost */
        fprintf(stderr, "seqkv serve: %s on: CORS allows localhost origins only (change with --cors-origins)\n",
                o.tools ? "--tools is" : "MCP servers are");
    }
    if (api_keys(&o, &keys) || chat_template(&o, &p, &tmpl)) {
        free(keys);
        return CLI_FAIL;
    }
    p.api_key = keys;
    char **ovr = NULL, *ovr_buf = NULL;
    if (kv_overrides(&o, &ovr, &ovr_buf, &p.model.n_overrides)) {
        free(keys), free(tmpl), free(ovr), free(ovr_buf);
        return CLI_FAIL;
    }
    p.model.overrides = (const char *const *)ovr;
    p.model.rope_scaling = o.rope_scaling;
    p.model.rope_freq_base = o.rope_freq_base;
    p.model.rope_freq_scale = o.rope_scale > 0 ? 1.0 / o.rope_scale : o.rope_freq_scale;
    rc = skv_server_run(&p) ? CLI_FAIL : CLI_OK;
    free(keys);
    free(tmpl);
    free(ovr), free(ovr_buf);
    return rc;
}
