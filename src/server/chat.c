/* The built-in chat templates (chat.h) and reading the model's own template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fpguard.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "server/chat.h"
#include "server/srv.h"

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

int skv_chat_render(const char *tmpl, const skv_chat_msg *msgs, size_t n, int add_generation_prompt, char **out,
                    char *err, size_t errcap)
{
    int chatml = tmpl && strstr(tmpl, "<|im_start|>");
    sbuf b = {0};
    put(&b, "");
    for (size_t i = 0; i < n; i++) {
        put(&b, chatml ? "<|im_start|>" : "");
        put(&b, msgs[i].role);
        put(&b, chatml ? "\n" : ": ");
        put(&b, msgs[i].content);
        put(&b, chatml ? "<|im_end|>\n" : "\n");
    }
    if (add_generation_prompt) put(&b, chatml ? "<|im_start|>assistant\n" : "assistant:");
    if (b.oom) {
        free(b.p);
        snprintf(err, errcap, "out of memory rendering %zu messages", n);
        return -1;
    }
    *out = b.p;
    return 0;
}

char *srv_model_chat_template(const skv_model *m)
{
    skv_gguf_str s;
    if (!m->gguf || skv_gguf_get_str(m->gguf, "tokenizer.chat_template", &s)) return NULL;
    char *t = malloc(s.len + 1);
    if (!t) return NULL;
    memcpy(t, s.ptr, s.len);
    t[s.len] = 0;
    return t;
}
