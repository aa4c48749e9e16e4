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
} skv_chat_msg;

/* *out: the rendered prompt (malloc'ed, NUL-terminated). memory: bytes the render may use
 * (its arena and its output, half each; 0: the template engine's defaults). 0, or -1 with a
 * message in err. */
int skv_chat_render(const char *tmpl, const skv_chat_msg *msgs, size_t n, int add_generation_prompt, size_t memory,
                    char **out, skv_err *err);

#endif
