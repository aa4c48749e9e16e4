/* Fuzz target for the chat-template interpreter (src/server/template*.c).
 *
 * The input is a template source. It is parsed under tight limits (so the fuzzer finds
 * limit paths quickly) and, when it parses, rendered with a small conversation, both
 * through skv_tmpl_render and skv_tmpl_render_chat. Any status is fine; a crash, a
 * sanitizer report, a leak or an output that breaks its limit is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"
#include "server/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const skv_tmpl_msg msgs[] = {{"system", "sys"}, {"user", "Hello"},
                                        {"assistant", " hi "}, {"user", "again"}};
    skv_tmpl_limits lim = skv_tmpl_default_limits();
    lim.max_steps = 20000, lim.max_output = 1 << 16, lim.max_memory = 16 << 20, lim.max_depth = 64;
    skv_tmpl *t;
    skv_tmpl_error err;
    if (skv_tmpl_parse((const char *)data, size, &lim, &t, &err) != SKV_OK) return 0;
    skv_tmpl_var v = {.name = "enable_thinking", .kind = SKV_TMPL_VAR_BOOL, .b = 1};
    skv_tmpl_input in = {.msgs = msgs, .n_msgs = 4, .add_generation_prompt = 1,
                         .bos_token = "<s>", .eos_token = "</s>", .vars = &v, .n_vars = 1};
    for (int chat = 0; chat < 2; chat++) {
        char *out = NULL;
        size_t n = 0;
        int st = chat ? skv_tmpl_render_chat(t, &in, &out, &n, &err)
                      : skv_tmpl_render(t, &in, &out, &n, &err);
        if (st == SKV_OK && (n > lim.max_output || strlen(out) > n)) abort();
        free(out);
    }
    skv_tmpl_free(t);
    return 0;
}
