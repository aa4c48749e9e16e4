/* Every limit the server enforces, in one place (docs/server.md "Limits"). A request that
 * exceeds one gets a 400 (or 413/503) with a message naming the limit; none can make the
 * server allocate more than these bounds allow. */
#ifndef SKV_SERVER_LIMITS_H
#define SKV_SERVER_LIMITS_H

#define SRV_MAX_BODY (4u << 20)        /* request body bytes (413 beyond) */
#define SRV_PROXY_MAX_HEADERS 256      /* request headers /cors-proxy looks at (the rest: not forwarded) */
#define SRV_MAX_JSON_DEPTH 32          /* nesting of arrays/objects in a body */
#define SRV_MAX_N_PREDICT 4096         /* tokens one request may ask to generate */
#define SRV_MAX_FIELDS 64              /* response_fields entries */
#define SRV_MAX_FIELD_PATH 255         /* bytes of one response_fields path */
#define SRV_MAX_EMBED_INPUTS 256       /* inputs of one embeddings request */
#define SRV_MAX_CHOICES 16             /* OpenAI's n, and prompts of one /completion batch */
#define SRV_MAX_TOOLS 128              /* OpenAI tools per chat request */
#define SRV_MAX_TOOL_NAME 256          /* bytes of a tool's name */
#define SRV_MAX_N_PROBS 100            /* n_probs / top_logprobs */
#define SRV_MAX_LOGIT_BIAS 1024       /* logit_bias entries per request (a string's tokens count each) */
#define SRV_MAX_STOP 8                 /* stop strings per request */
#define SRV_MAX_STOP_LEN 256           /* bytes of one stop string */
#define SRV_MAX_BUDGET_MESSAGE 1024    /* bytes of reasoning_budget_message */
#define SRV_MAX_MESSAGES 1024          /* chat messages per request */
#define SRV_CONN_TIMEOUT_S 30          /* idle seconds before a connection is dropped */
#define SRV_MAX_CONNECTIONS 256        /* open connections (the rest are refused) */
#define SRV_CONN_MEMORY (64u << 10)    /* per-connection buffer: bounds the request headers */
#define SRV_QUEUE_MAX 64               /* requests waiting for a slot (503 beyond) */
#define SRV_MAX_PARALLEL 64            /* --parallel */
#define SRV_MIN_SLOT_CTX 8             /* positions a slot needs at least (-c / --parallel) */
#define SRV_ALIVE_CHECK_MS 200        /* a waiting non-streamed request checks its client this often */
#define SRV_MAX_PROGRESS 64           /* prompt_progress events of one request (batches grow to fit) */
#define SRV_DEFAULT_BATCH 2048         /* -b: prompt tokens between two prompt_progress events */
#define SRV_KEEPALIVE_S 5              /* a streamed ": keep-alive" comment after this idle time */
#define SRV_MAX_FILENAME 255          /* slot file names: [A-Za-z0-9._-], not starting with a dot */
#define SRV_MAX_SLOT_FILE (256u << 20) /* bytes of a slot file read back (restore) */
#define SRV_STORE_MIN_GAIN 8           /* positions a store restore (or a wait for a queued put)
                                        * must add to the slot's own KV: less is prefilled (a read
                                        * transaction and a blob decode cost about that much) */
#define SRV_PUT_QUEUE 64               /* finished conversations waiting for the store writer */
#define SRV_HIDDEN_MAX_BYTES (64u << 20) /* a slot keeps its prompt rows' hidden states for the
                                        * writer's surprisals up to this (n_ctx x n_embd floats);
                                        * a larger model computes them in the prefill */
#define SRV_WRITER_YIELD_MS 50         /* the store writer waits at most this for prompt prefills */
#define SRV_WRITER_GRACE_MS 10         /* and a put starts this long after its reply at the earliest */
#define SRV_STEP_GATHER_US 400         /* a decode step waits at most this for the other generating slots */
#define SRV_PUT_KV_SLOTS 2             /* KV queued for the writer: at most this many slots' worth
                                        * of positions (more is put by running the model again) */
/* system_fingerprint: llama-server's "b<build>-<commit>" shape, which clients check. */
#define SRV_FINGERPRINT "b1-seqkv-" SEQKV_VERSION_STRING
#define SRV_NEAR_MIN 8                 /* --reuse near: uncovered positions worth a near restore */

/* Working memory (src/server/mem.c): what grows with a request (body, JSON values, token
 * arrays, tokenizer scratch, chat render arena, reply text) is charged before it is
 * allocated; over the request's limit 413, over the total 503. */
#define SRV_MEM_TOTAL (256u << 20)     /* all requests together (--mem-budget) */
#define SRV_MEM_REQUEST (64u << 20)    /* one request (at most the total) */
#define SRV_TOK_SCRATCH_PER_BYTE 48    /* tokenizer bytes per input byte, worst case (measured 30:
                                        * one 1 MiB piece without spaces; docs/server.md) */
#define SRV_MEM_TRIM_AFTER (4u << 20)  /* a request that charged this much trims the heap at its end */
#define SRV_MALLOC_ARENAS 4             /* glibc heap arenas (M_ARENA_MAX) the threads share */
#define SRV_TMPL_MEM_PER_BYTE 8        /* chat render arena per body byte (+ SRV_TMPL_MEM_MIN) */
#define SRV_TMPL_MEM_MIN (4u << 20)    /* functionary v3.2 needs over 0.5 MiB of arena for a short chat */

/* Connections (src/server/conns.c). */
#define SRV_MAX_CONN_PER_CLIENT 128    /* open connections from one address */
#define SRV_RESERVED_CONNECTIONS 8     /* beyond SRV_MAX_CONNECTIONS: /health only, 503 else */
#define SRV_HEADER_DEADLINE_S 10       /* request line + headers, from connect or the last reply */
#define SRV_BODY_DEADLINE_S 60         /* the whole body, from the end of the headers */
#define SRV_RESERVE_DEADLINE_S 2       /* a reserved connection's headers */

#endif
