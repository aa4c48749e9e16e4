/* seqkv serve: the HTTP server (src/server/, docs/server.md), with llama-server's flags. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "server/limits.h"
#include "server/server.h"

typedef struct {
    const char *model, *store, *host, *api_key, *alias, *chat_template, *slot_save_path;
    long port, parallel, ctx, threads;
    int ctx_shift, reuse;
    double recompute, quality;
    long long budget, mem_budget;
    long conns_per_client;
} serve_opts;

#define F(x) offsetof(serve_opts, x)
static const cli_opt serve_table[] = {
    CLI_OPT_MODEL(F(model)),
    {"store", 0, CLI_PATH, "DIR", 0, 0, F(store), "session store used as the prompt cache (created if absent);\n"
                                                   "default: none (each slot keeps only its own KV, in RAM)"},
    {"host", 0, CLI_STR, "ADDR", 0, 0, F(host), "IPv4 address to listen on (default 127.0.0.1: loopback only)"},
    {"port", 0, CLI_INT, "N", 0, 65535, F(port), "TCP port (default 8080; 0 = any free port, printed)"},
    {"parallel", 0, CLI_INT, "N", 1, SRV_MAX_PARALLEL, F(parallel), "slots decoding at once (default 1)"},
    {"np", 0, CLI_INT, "N", 1, SRV_MAX_PARALLEL, F(parallel), NULL}, /* llama-server's short form */
    CLI_OPT_CTX(F(ctx), 0, "positions per slot (default: the model's trained context)"),
    CLI_OPT_THREADS(F(threads)),
    {"api-key", 0, CLI_STR, "KEY", 0, 0, F(api_key), "require \"Authorization: Bearer KEY\" (or X-Api-Key)\n"
                                                     "on every route but /health and /v1/models"},
    {"alias", 'a', CLI_STR, "NAME", 0, 0, F(alias), "model id reported by /v1/models (default: the file name)"},
    {"chat-template", 0, CLI_STR, "NAME", 0, 0, F(chat_template), "built-in chat template (chatml, llama2, llama3, mistral-v7,\n"
     "gemma, phi3, phi4, zephyr, vicuna, monarch, bailing, simple) instead of\nthe model's tokenizer.chat_template"},
    {"cache-budget", 0, CLI_BYTES, "BYTES", 0, 9e18, F(budget), "bytes of materialised KV the store may keep\n"
                                                                "(default: the store's own; 64M for a new one)"},
    {"mem-budget", 0, CLI_BYTES, "BYTES", 1 << 20, 9e18, F(mem_budget), "working memory of all requests together (bodies, JSON,\n"
     "tokenizing, rendering; default 256M): beyond it 503, beyond\nmin(64M, BYTES) for one request 413"},
    {"max-conns-per-client", 0, CLI_INT, "N", 1, SRV_MAX_CONNECTIONS, F(conns_per_client),
     "open connections from one address (default 128)"},
    {"slot-save-path", 0, CLI_PATH, "DIR", 0, 0, F(slot_save_path), "directory of POST /slots/{id}?action=save|restore\n"
                                                                      "files (.skv; created if absent); default: none (501)"},
    {"context-shift", 0, CLI_FLAG, NULL, 0, 0, F(ctx_shift), "a full context keeps n_keep tokens, drops half the rest\n"
                                                             "and goes on (default: generation stops at a full context)"},
    {"reuse", 0, CLI_CHOICE, "exact|near", 0, 0, F(reuse), "near (needs --store): prompts the exact caches cover badly\n"
     "reuse a near-duplicate stored session: APPROXIMATE, marked in every reply (docs/near.md)"},
    {"recompute", 0, CLI_FLOAT, "F", 0, 1, F(recompute), "--reuse near: fraction of positions to recompute (default 0.15)"},
    {"quality", 0, CLI_FLOAT, "KL", 1e-12, 100, F(quality),
     "--reuse near: target mean KL (nats); picks the fraction from the measured calibration"},
    {0},
};
static const cli_cmd serve_cmd = {
    "serve", "[-m MODEL] [--store DIR] [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX]\n"
             "[--api-key KEY] [--cache-budget BYTES] [--reuse near [--recompute F | --quality KL]]",
    "Serves the model over HTTP with llama-server's and OpenAI's API (/completion,\n"
    "/v1/completions, /v1/chat/completions, /tokenize, /health, ...). With --store, every\n"
    "prompt is looked up in the session store and only its unmatched tail is computed;\n"
    "finished conversations are put back, so the cache survives restarts. SIGINT/SIGTERM stop it.\n",
    serve_table, 0, "See docs/server.md for the endpoints, limits and measured figures.\n"};

int cmd_serve(int argc, char **argv)
{
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 1, .threads = 1, .budget = -1, .recompute = -1};
    int rc = cli_parse(&serve_cmd, argc, argv, &o, NULL, NULL);
    if (rc != CLI_CONTINUE) return rc;
    if (o.recompute >= 0 && o.quality > 0) return cli_usage(&serve_cmd, "give --recompute F or --quality KL, not both");
    if (!o.reuse && (o.recompute >= 0 || o.quality > 0))
        return cli_usage(&serve_cmd, "--recompute and --quality need --reuse near");
    if (o.reuse && !o.store) return cli_usage(&serve_cmd, "--reuse near needs --store DIR");
    skv_server_params p = {.model_path = o.model ? o.model : cli_default_model(), .store_dir = o.store,
                           .host = o.host, .api_key = o.api_key, .alias = o.alias, .chat_template = o.chat_template, .port = (int)o.port,
                           .parallel = (int)o.parallel, .n_ctx = (int)o.ctx, .n_threads = (int)o.threads,
                           .cache_budget = o.budget, .slot_save_path = o.slot_save_path, .ctx_shift = o.ctx_shift,
                           .reuse_near = o.reuse, .near_recompute = o.recompute, .near_quality = o.quality,
                           .store_map_size = cli_store_map_size(), .mem_budget = (unsigned long long)o.mem_budget,
                           .max_conns_per_client = (int)o.conns_per_client};
    return skv_server_run(&p) ? CLI_FAIL : CLI_OK;
}
