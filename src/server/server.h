/* seqkv serve: an HTTP server (llama-server's and OpenAI's API) over the library, whose
 * prompt cache is the session store (docs/server.md). Used by tools/cmd_serve.c only;
 * not part of libseqkv. */
#ifndef SKV_SERVER_H
#define SKV_SERVER_H

#include "seqkv.h"

/* Sampling defaults a request inherits when it does not say (llama-server's --temp, ...). */
typedef struct skv_sampling_defaults {
    double temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int top_k, repeat_last_n; /* repeat_last_n: -1 = the whole context */
    long long seed;           /* -1: a new one per request */
    int n_predict;            /* -1: until the context is full (at most SRV_MAX_N_PREDICT) */
    int n_keep;               /* --keep: prompt tokens a context shift keeps (-1: all) */
    double typ_p;             /* typical_p (1: off) */
    int min_keep, ignore_eos;
    const char *samplers;     /* --samplers "name;name" or NULL */
    const char *sampling_seq; /* --sampling-seq "ekyptm..." or NULL (samplers wins) */
} skv_sampling_defaults;

typedef struct skv_server_params {
    const char *model_path; /* model file */
    const char *store_dir;  /* session store directory (created if absent), or NULL: RAM only */
    const char *host;       /* IPv4 address to bind, "127.0.0.1" by default */
    const char *api_key;    /* required as "Authorization: Bearer KEY" when non-NULL; several
                             * keys separated by '\n' (any one is accepted) */
    const char *alias;      /* the model's names in /v1/models, comma-separated (llama-server's
                             * --alias): the id is the first in byte order; NULL: the file name */
    const char *tags;       /* comma-separated labels /v1/models lists (--tags), or NULL */
    const char *chat_template; /* a built-in template's name (docs/templates.md), NULL: the model's own */
    const char *chat_template_text; /* a Jinja template's text (wins over chat_template) */
    int port;               /* 0 = any free port (printed) */
    int parallel;           /* slots decoding at once */
    int n_batch;            /* -b: prompt tokens between two prompt_progress events (0: 2048) */
    int n_ctx;              /* positions of all slots together (each gets n_ctx / parallel);
                             * 0 = the model's trained context */
    int kv_unified;         /* 1: every slot gets the whole n_ctx */
    int n_threads;          /* threads per slot */
    long long cache_budget; /* store budget in bytes; < 0 = the store's own */
    const char *slot_save_path; /* directory of POST /slots/{id}?action=save|restore files, or NULL: the store's sessions "slot:NAME" (none: 501) */
    int ctx_shift;          /* 1: a full context drops half of what follows n_keep and goes on */
    int reuse_near;         /* 1: --reuse near: prompts the exact caches cover badly are built by
                             * skv_store_get_near (APPROXIMATE, marked in every reply; docs/near.md) */
    double near_recompute;  /* --recompute F (< 0: the library's default) */
    double near_quality;    /* --quality KL (> 0: the fraction from the calibration) */
    unsigned long long store_map_size; /* the store's LMDB map size in bytes; 0: the library's default */
    unsigned long long mem_budget; /* working memory of all requests together; 0: SRV_MEM_TOTAL */
    int max_conns_per_client;      /* open connections from one address; 0: SRV_MAX_CONN_PER_CLIENT */
    int slots_endpoint;            /* GET /slots answers (else 501) */
    int metrics_endpoint;          /* GET /metrics answers (else 501) */
    int verbose;                   /* --verbose: replies carry llama-server's "__verbose" result */
    int no_ui;                     /* --no-ui: "/" and the web app files answer 404 */
    int embedding;                 /* --embedding: the embedding routes answer (else 501) */
    int pooling;                   /* --pooling: SRV_POOL_* (embed.c) */
    const char *cors_origins;      /* "*" (NULL), "localhost" or a comma-separated list (cors.c) */
    const char *cors_methods;      /* the preflight's Allow-Methods (NULL: llama-server's) */
    const char *cors_headers;      /* the preflight's Allow-Headers (NULL: "*") */
    int cors_no_credentials;       /* --no-cors-credentials */
    int ui_mcp_proxy;              /* --ui-mcp-proxy: /cors-proxy forwards (else 403; proxy.c) */
    unsigned agent_tools;          /* --tools: the built-in agent tools /tools runs, a mask of
                                    * skv_server_tools_parse's (0: 403; agent.c) */
    int reasoning;                 /* --reasoning: 0 auto (the template's default), 1 on, -1 off
                                    * (enable_thinking false, an opened thought block closed) */
    int reasoning_budget;          /* --reasoning-budget: tokens a chat reply's thought may take
                                    * (-1 unlimited, as the command line's default; think.c) */
    const char *reasoning_budget_message; /* --reasoning-budget-message: before the forced marker, or NULL */
    int reasoning_format;          /* --reasoning-format: 0 none, 1 auto, 2 deepseek, 3 deepseek-legacy
                                    * (a chat reply's thoughts apart from its content; think.c) */
    const char *chat_template_kwargs; /* --chat-template-kwargs: a JSON object of template
                                       * variables every chat render sees, or NULL */
    int sleep_idle_s;              /* --sleep-idle-seconds: sleep (slots freed) after this idle time; 0: never */
    int log_disable, log_timestamps; /* --log-disable (no log lines), --log-timestamps (each starts with UTC time) */
    const char *api_prefix;        /* --api-prefix: every route under this path ("/v2"), or NULL */
    const char *gcp_predict;       /* Vertex AI (AIP_MODE=PREDICTION): the predict route (gcp.c), or NULL */
    const char *gcp_health;        /* and its health route alias, or NULL */
    const char *mcp_config;        /* --mcp-servers-config: a file of MCP servers (mcp.c), or NULL */
    const char *mcp_json;          /* --mcp-servers-json: the same as text, or NULL */
    skv_sampling_defaults defaults; /* all zero: seqkv's own (skv_sampling_defaults_init) */
    skv_model_params model;        /* --override-kv, --rope-*: how the model loads (its
                                    * tokenizer_path is not used) */
} skv_server_params;

/* llama-server's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties over
 * the last 64 tokens, a new seed per request, n_predict -1. */
skv_sampling_defaults skv_sampling_defaults_init(void);

/* --tools LIST ("all" or names separated by commas) as agent_tools' mask: 0, or a status with
 * err's message naming the unknown tool. */
struct skv_err;
int skv_server_tools_parse(const char *list, unsigned *mask, struct skv_err *err);

/* Runs until SIGINT or SIGTERM. Prints its address and errors to stderr. 0 = clean exit. */
int skv_server_run(const skv_server_params *p);

#endif
