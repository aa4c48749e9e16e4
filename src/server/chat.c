/* The built-in chat templates (chat.h) and reading the model's own template. */
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "server/chat.h"
#include "server/srv.h"
#include "server/template.h"

int skv_chat_render(const char *tmpl, const skv_chat_msg *msgs, size_t n, int add_generation_prompt, size_t memory,
                    char **out, skv_err *err)
{
    return skv_chat_render_tools(tmpl, msgs, n, NULL, add_generation_prompt, memory, out, err);
}

int skv_chat_render_tools(const char *tmpl, const skv_chat_msg *msgs, size_t n, const char *tools_json,
                          int add_generation_prompt, size_t memory, char **out, skv_err *err)
{
    return skv_chat_render_ext(tmpl, msgs, n, tools_json, NULL, add_generation_prompt, memory, out, err);
}

int skv_chat_render_ext(const char *tmpl, const skv_chat_msg *msgs, size_t n, const char *tools_json,
                        const char *globals_json, int add_generation_prompt, size_t memory, char **out, skv_err *err)
{
    const char *src = tmpl ? tmpl : skv_tmpl_builtin("chatml"); /* llama-server's fallback */
    skv_tmpl *t = NULL;
    skv_tmpl_error e = {0};
    skv_tmpl_limits lim = skv_tmpl_default_limits();
    if (memory) {
        lim.max_memory = memory / 2 < lim.max_memory ? memory / 2 : lim.max_memory;
        lim.max_output = memory / 2 < lim.max_output ? memory / 2 : lim.max_output;
    }
    skv_tmpl_msg *m = calloc(n ? n : 1, sizeof *m);
    const char **fields = calloc(n ? n : 1, sizeof *fields);
    int rc = m && fields ? skv_tmpl_parse(src, strlen(src), &lim, &t, &e) : SKV_ERR_NOMEM;
    for (size_t i = 0; m && i < n; i++) m[i] = (skv_tmpl_msg){msgs[i].role, msgs[i].content};
    for (size_t i = 0; fields && i < n; i++) fields[i] = msgs[i].fields_json;
    skv_tmpl_input in = {.msgs = m, .n_msgs = n, .add_generation_prompt = add_generation_prompt,
                         .bos_token = "", .eos_token = "", .tools_json = tools_json,
                         .msg_fields = fields, .globals_json = globals_json};
    if (rc == SKV_OK) rc = skv_tmpl_render_chat(t, &in, out, NULL, &e);
    if (rc != SKV_OK)
        skv_fail(err, SKV_ERR_INVALID_ARG, "chat template: %s (line %d, column %d)", m ? e.msg : "out of memory", e.line, e.col);
    skv_tmpl_free(t);
    free(m);
    free(fields);
    return rc == SKV_OK ? 0 : -1;
}

/* The probes: a tool whose name the prompt shows only if the template describes tools, and
 * a call whose string arguments show unescaped only if the template prints them as they are. */
#define PROBE_TOOLS "[{\"type\": \"function\", \"function\": {\"name\": \"skv_probe_tool\", \"description\": " \
                    "\"\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}]"
#define PROBE_ARGS "{\"skv_probe_arg\": 1}"

int skv_chat_tool_caps(const char *tmpl)
{
    static const char call[] = "{\"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": "
                               "{\"name\": \"skv_probe_tool\", \"arguments\": \"{\\\"skv_probe_arg\\\": 1}\"}}]}";
    skv_chat_msg m[] = {{"user", "hi", NULL}, {"assistant", "", call}, {"tool", "1", "{\"tool_call_id\": \"call_0\"}"},
                        {"user", "bye", NULL}};
    skv_err err;
    char *out = NULL;
    int caps = 0;
    if (!skv_chat_render_tools(tmpl, m, 1, PROBE_TOOLS, 1, 0, &out, &err) && strstr(out, "skv_probe_tool"))
        caps |= SKV_CHAT_TOOLS_NATIVE;
    free(out), out = NULL;
    int ok = !skv_chat_render_tools(tmpl, m, 4, NULL, 1, 0, &out, &err);
    if (ok && strstr(out, "skv_probe_tool")) caps |= SKV_CHAT_TOOLS_CALLS;
    if (ok && strstr(out, "skv_probe_arg") && !strstr(out, PROBE_ARGS)) caps |= SKV_CHAT_TOOLS_OBJECT_ARGS;
    if (!ok) caps |= SKV_CHAT_TOOLS_OBJECT_ARGS; /* it may fail on string arguments (.items()) */
    free(out);
    return caps;
}

char *srv_model_chat_template(const skv_model *m) { return skv_model_chat_template(m); }

int srv_model_fim(const skv_model *m, int32_t ids[5]) { return skv_model_fim_tokens(m, ids); }
