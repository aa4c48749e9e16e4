/* Fuzz target for the server's tool calls (src/server/tools.c): what a model's reply turns
 * into and what a request's tools, tool_choice and messages turn into.
 *
 * The first byte picks the path, the rest is its input:
 *   0-2  a generated reply parsed for tool calls in the generic, hermes or llama3 format
 *        (srv_tools_parse_reply): the model may write anything;
 *   3    a request body (JSON): tools / tool_choice / parallel_tool_calls parsed, then the
 *        generic format's system text and the tools' grammar (JSON schemas to GBNF);
 *   4    a chat message (JSON): its tool fields for the template and its tool_calls as
 *        the generic format writes them.
 * Any status is fine; a crash, a sanitizer report or a leak is a bug. Input that is not
 * JSON where JSON is expected ends there (jansson's parser is not ours to fuzz). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const char *text, size_t len)
{
    json_t *b = json_loadb(text, len, 0, NULL);
    srv s;
    srv_tools t;
    skv_err err = {0};
    if (!b) return;
    memset(&s, 0, sizeof s);
    s.tool_fmt = SRV_TOOLS_GENERIC;
    s.tool_caps = 0;
    if (!srv_tools_parse(&s, b, &t, &err)) {
        free(srv_tools_system_text(&t));
        srv_job *j = srv_job_new();
        if (j) {
            (void)srv_tools_grammar(j, &t, &err);
            srv_job_unref(j);
        }
    }
    srv_tools_free(&t);
    json_decref(b);
}

static void message(const char *text, size_t len)
{
    json_t *m = json_loadb(text, len, 0, NULL);
    skv_err err = {0};
    char *out = NULL;
    if (!m) return;
    for (int caps = 0; caps < 2; caps++) {
        if (!srv_tools_msg_fields(caps ? ~0 : 0, m, &out, &err)) free(out);
        out = NULL;
    }
    free(srv_tools_calls_text(m));
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int mode = data[0] % 5;
    if (mode < 3) {
        char *content = NULL;
        json_t *calls = srv_tools_parse_reply(SRV_TOOLS_GENERIC + mode, text, len, &content);
        json_decref(calls);
        free(content);
    } else if (mode == 3) {
        request(text, len);
    } else {
        message(text, len);
    }
    return 0;
}
