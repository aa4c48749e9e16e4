/* Fuzz target for the server's request path (src/server/request.c and the handlers
 * behind it: routes, API key, body limits, JSON, parameter validation, completions, slot
 * actions, replies and streams), without a socket.
 *
 * Input: a request as text,
 *     METHOD SP URL[?action=A] LF
 *     (Authorization: V | X-Api-Key: V) LF ...   (other header lines are ignored)
 *     LF
 *     BODY
 * The server is set up once: the fuzzing model fuzz/models/tiny.gguf (2 layers, n_embd 16:
 * the request path, not the model, is what is fuzzed; SEQKV_FUZZ_HTTP_MODEL overrides), one
 * slot of 64 positions, API key "fuzzkey", a temporary --slot-save-path (emptied after each
 * input). Every reply is checked: a status in 200..599, a JSON reply that parses, an
 * error reply in llama-server's envelope with code == status. A stream is read to its
 * end. Any violation, crash, sanitizer report or leak is a bug. SEQKV_FUZZ_HTTP_VERBOSE=1
 * prints each reply. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static srv S;
static char dir[64];

static void check_reply(int code, const char *type, const char *text)
{
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("SEQKV_FUZZ_HTTP_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "%d %.200s\n", code, text);
    if (code < 200 || code > 599) abort();
    if (strcmp(type, "application/json")) return;
    json_t *o = json_loads(text, 0, NULL);
    if (!o) abort();
    json_t *e = json_object_get(o, "error");
    if (code >= 400 && (json_integer_value(json_object_get(e, "code")) != code ||
                        !json_is_string(json_object_get(e, "message")) || !json_is_string(json_object_get(e, "type"))))
        abort();
    json_decref(o);
}

static int sink_text(srv_req *r, int code, const char *type, char *text)
{
    (void)r;
    check_reply(code, type, text);
    free(text);
    return 0;
}

static int sink_stream(srv_req *r, srv_job *j)
{
    int state = 0;
    size_t sent = 0, len = 0;
    char *piece;
    while ((piece = srv_reply_stream_next(r->s, j, &state, &sent, &len))) {
        if (strlen(piece) != len) abort();
        free(piece);
    }
    srv_job_unref(j);
    return 0;
}

static const srv_sink sink = {sink_text, sink_stream};

static void setup(void)
{
    const char *m = getenv("SEQKV_FUZZ_HTTP_MODEL");
    snprintf(dir, sizeof dir, "/tmp/fuzz-http-XXXXXX");
    if (!mkdtemp(dir)) abort();
    S.p = (skv_server_params){.model_path = m && *m ? m : "fuzz/models/tiny.gguf", .host = "127.0.0.1",
                              .api_key = "fuzzkey", .parallel = 1, .n_ctx = 64, .n_threads = 1, .cache_budget = -1,
                              .slot_save_path = dir};
    S.t_start = srv_unix_now();
    if (srv_load(&S)) abort();
    atomic_store(&S.ready, 1);
}

static void empty_dir(void)
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

/* The next line of data[*at..size) into out (NUL-terminated, cut at cap - 1); 0 at the end. */
static int line(const uint8_t *data, size_t size, size_t *at, char *out, size_t cap)
{
    size_t n = 0;
    if (*at >= size) return 0;
    while (*at < size && data[*at] != '\n') {
        if (n + 1 < cap) out[n++] = (char)data[*at];
        (*at)++;
    }
    (*at)++;
    out[n] = 0;
    return 1;
}

static void header(srv_req *r, char *h, char *auth, char *key)
{
    if (!strncmp(h, "Authorization: ", 15)) r->auth = strcpy(auth, h + 15);
    else if (!strncmp(h, "X-Api-Key: ", 11)) r->x_api_key = strcpy(key, h + 11);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    char first[1024], h[512], auth[512], key[512], *sp, *q;
    size_t at = 0;
    if (!ready) setup(), ready = 1;
    if (!line(data, size, &at, first, sizeof first) || !(sp = strchr(first, ' '))) return 0;
    *sp = 0;
    srv_req r = {.s = &S, .method = first, .url = sp + 1, .sink = &sink};
    if ((q = strchr(sp + 1, '?'))) {
        *q = 0;
        char *a = strstr(q + 1, "action=");
        if (a) r.action = a + 7, a[7 + strcspn(a + 7, "&")] = 0;
    }
    while (line(data, size, &at, h, sizeof h) && h[0]) header(&r, h, auth, key);
    r.data = (const char *)data + (at < size ? at : size);
    r.len = at < size ? size - at : 0;
    r.too_big = r.len > SRV_MAX_BODY;
    srv_dispatch(&r);
    empty_dir();
    return 0;
}
