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
    const char *src = tmpl ? tmpl : skv_tmpl_builtin("chatml"); /* llama-server's fallback */
    skv_tmpl *t = NULL;
    skv_tmpl_error e = {0};
    skv_tmpl_limits lim = skv_tmpl_default_limits();
    if (memory) {
        lim.max_memory = memory / 2 < lim.max_memory ? memory / 2 : lim.max_memory;
        lim.max_output = memory / 2 < lim.max_output ? memory / 2 : lim.max_output;
    }
    skv_tmpl_msg *m = calloc(n ? n : 1, sizeof *m);
    int rc = m ? skv_tmpl_parse(src, strlen(src), &lim, &t, &e) : SKV_ERR_NOMEM;
    for (size_t i = 0; m && i < n; i++) m[i] = (skv_tmpl_msg){msgs[i].role, msgs[i].content};
    skv_tmpl_input in = {.msgs = m, .n_msgs = n, .add_generation_prompt = add_generation_prompt,
                         .bos_token = "", .eos_token = ""};
    if (rc == SKV_OK) rc = skv_tmpl_render_chat(t, &in, out, NULL, &e);
    if (rc != SKV_OK)
        skv_fail(err, SKV_ERR_INVALID_ARG, "chat template: %s (line %d, column %d)", m ? e.msg : "out of memory", e.line, e.col);
    skv_tmpl_free(t);
    free(m);
    return rc == SKV_OK ? 0 : -1;
}

char *srv_model_chat_template(const skv_model *m) { return skv_model_chat_template(m); }

int srv_model_fim(const skv_model *m, int32_t ids[5]) { return skv_model_fim_tokens(m, ids); }
