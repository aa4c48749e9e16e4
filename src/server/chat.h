/* Chat messages to a prompt: the model's tokenizer.chat_template (or the one named by
 * --chat-template) rendered by the Jinja-subset interpreter of src/server/template*.c
 * (docs/templates.md), as llama.cpp applies templates (a leading system message merged into
 * the next one when the template has no system role). A model without a template gets the
 * built-in "chatml" one, as llama-server. bos_token and eos_token render as "":
 * the prompt is tokenized with the model's own BOS rule afterwards. */
#ifndef SKV_SERVER_CHAT_H
#define SKV_SERVER_CHAT_H

#include <stddef.h>
#include "core/util.h"

typedef struct skv_chat_msg {
    const char *role;    /* "system" | "user" | "assistant" | ... */
    const char *content; /* UTF-8 text */
    const char *fields_json; /* NULL, or a JSON object of the message's other fields the
                                template sees (tool_calls, tool_call_id, name) */
} skv_chat_msg;

/* *out: the rendered prompt (malloc'ed, NUL-terminated). memory: bytes the render may use
 * (its arena and its output, half each; 0: the template engine's defaults). 0, or -1 with a
 * message in err. */
int skv_chat_render(const char *tmpl, const skv_chat_msg *msgs, size_t n, int add_generation_prompt, size_t memory,
                    char **out, skv_err *err);

/* skv_chat_render with OpenAI's tools (tools_json: a JSON array, or NULL) as the template's
 * `tools` global. */
int skv_chat_render_tools(const char *tmpl, const skv_chat_msg *msgs, size_t n, const char *tools_json,
                          int add_generation_prompt, size_t memory, char **out, skv_err *err);

/* skv_chat_render_tools with extra globals: globals_json NULL or a JSON object whose members
 * the template sees as variables (llama-server's date_string, enable_thinking,
 * chat_template_kwargs, ...), set after the others. */
int skv_chat_render_ext(const char *tmpl, const skv_chat_msg *msgs, size_t n, const char *tools_json,
                        const char *globals_json, int add_generation_prompt, size_t memory, char **out, skv_err *err);

/* What a template does with tools, probed by rendering it (as llama.cpp reads a template's
 * capabilities): SKV_CHAT_TOOLS_NATIVE when a tool's name reaches the prompt (the template
 * describes the tools itself), SKV_CHAT_TOOLS_OBJECT_ARGS when a tool call's arguments must be
 * an object rather than a JSON string for the template to render them as JSON,
 * SKV_CHAT_TOOLS_CALLS when it renders an assistant message's tool_calls. */
enum { SKV_CHAT_TOOLS_NATIVE = 1, SKV_CHAT_TOOLS_OBJECT_ARGS = 2, SKV_CHAT_TOOLS_CALLS = 4 };
int skv_chat_tool_caps(const char *tmpl);

#endif
