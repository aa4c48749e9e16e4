/* The server both HTTP fuzz targets drive (fuzz_http.c without a socket, fuzz_http_mhd.c
 * through libmicrohttpd): the fuzzing model fuzz/models/tiny.gguf (2 layers, n_embd 16;
 * SEQKV_FUZZ_HTTP_MODEL overrides), one slot of 64 positions, API key "fuzzkey", a
 * temporary --slot-save-path (emptied after each input), and a small working-memory budget
 * so the refusals (413, 503) are reached, and Vertex AI's POST /predict on (gcp.c). Its
 * chat template knows a thought block (<think>, opened by the prompt unless enable_thinking
 * is false), so chats reach the thoughts' split and budget (think.c). Not a fuzz target
 * itself. */
#ifndef SKV_FUZZ_HTTP_SERVER_H
#define SKV_FUZZ_HTTP_SERVER_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/srv.h"

#define FUZZ_HTTP_MEM_BUDGET (16u << 20)
#define FUZZ_HTTP_TEMPLATE                                                                                   \
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"                \
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"                                                  \
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% else %}<think>\n" \
    "{% endif %}{% endif %}"

static void fuzz_http_server(srv *s, char *dir, size_t dircap)
{
    const char *m = getenv("SEQKV_FUZZ_HTTP_MODEL");
    snprintf(dir, dircap, "/tmp/fuzz-http-XXXXXX");
    if (!mkdtemp(dir)) abort();
    s->p = (skv_server_params){.model_path = m && *m ? m : "fuzz/models/tiny.gguf", .host = "127.0.0.1",
                               .api_key = "fuzzkey", .parallel = 1, .n_ctx = 64, .n_threads = 1, .cache_budget = -1,
                               .slot_save_path = dir, .mem_budget = FUZZ_HTTP_MEM_BUDGET, .max_conns_per_client = 64,
                               .slots_endpoint = 1, .metrics_endpoint = 1, .defaults = skv_sampling_defaults_init(),
                               .chat_template_text = FUZZ_HTTP_TEMPLATE, .reasoning_format = SRV_REASON_AUTO,
                               .reasoning_budget = -1};
    s->t_start = srv_unix_now();
    snprintf(s->gcp_predict, sizeof s->gcp_predict, "/predict"); /* Vertex AI's route too (gcp.c) */
    srv_mem_install_json();
    srv_mem_configure(FUZZ_HTTP_MEM_BUDGET);
    if (srv_load(s)) abort();
    atomic_store(&s->ready, 1);
}

static void fuzz_http_empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
}

#endif
