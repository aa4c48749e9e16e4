/* Chat messages to a prompt. The real renderer (a Jinja-subset interpreter of the model's
 * tokenizer.chat_template) comes from src/server/template*.c; until it is wired in,
 * skv_chat_render renders with a built-in template:
 *   - ChatML ("<|im_start|>role\ncontent<|im_end|>\n") when tmpl mentions <|im_start|>;
 *   - otherwise one "role: content\n" line per message, then "assistant:" when
 *     add_generation_prompt (the bundled model has no template). */
#ifndef SKV_SERVER_CHAT_H
#define SKV_SERVER_CHAT_H

#include <stddef.h>

typedef struct skv_chat_msg {
    const char *role;    /* "system" | "user" | "assistant" | ... */
    const char *content; /* UTF-8 text */
} skv_chat_msg;

/* *out: the rendered prompt (malloc'ed, NUL-terminated). 0, or -1 with a message in err. */
int skv_chat_render(const char *tmpl, const skv_chat_msg *msgs, size_t n, int add_generation_prompt, char **out,
                    char *err, size_t errcap);

#endif
