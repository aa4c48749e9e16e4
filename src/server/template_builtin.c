/* Chat templates: the named built-ins of --chat-template NAME, for models whose file has
 * no tokenizer.chat_template. One row per template, written here in the Jinja subset;
 * tests/test_template.c checks each against llama.cpp's built-in formatter's rendering
 * of its test conversation (tests/data/templates). "simple" is the bundled model's. */
#include <string.h>
#include "core/fpguard.h"

#include "server/template.h"

static const struct { const char *name, *src; } tmpl_builtins[] = {
    {"simple",
     "{% for m in messages %}{{ m.role | capitalize }}: {{ m.content }}\n{% endfor %}"
     "{% if add_generation_prompt %}Assistant:{% endif %}"},
    {"command-r", /* each message's content trimmed, as llama.cpp's formatter */
     "{% for m in messages %}{% if m.role == 'system' %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + m.content | trim + "
     "'<|END_OF_TURN_TOKEN|>' }}{% elif m.role == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + m.content | trim + "
     "'<|END_OF_TURN_TOKEN|>' }}{% elif m.role == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + "
     "m.content | trim + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"},
    {"chatml",
     "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
     "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
    {"llama2", /* no system role: it is merged into the first user message */
     "{% for m in messages %}{% if m.role == 'user' %}{{ '[INST] ' + m.content + ' [/INST]' }}"
     "{% elif m.role == 'assistant' %}{{ m.content + '</s>' }}{% endif %}{% endfor %}"},
    {"llama3",
     "{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + "
     "m.content | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"},
    {"mistral-v7",
     "{% for m in messages %}{% if m.role == 'system' %}{{ '[SYSTEM_PROMPT] ' + m.content + "
     "'[/SYSTEM_PROMPT]' }}{% elif m.role == 'user' %}{{ '[INST] ' + m.content + '[/INST]' }}"
     "{% else %}{{ ' ' + m.content + '</s>' }}{% endif %}{% endfor %}"},
    {"zephyr",
     "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|endoftext|>\\n' }}"
     "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"},
    {"gemma",
     "{% set ns = namespace(sys='') %}{% for m in messages %}{% if m.role == 'system' %}"
     "{% set ns.sys = m.content + '\\n\\n' %}{% else %}{{ '<start_of_turn>' + ('model' if "
     "m.role == 'assistant' else m.role) + '\\n' + ns.sys + m.content | trim + "
     "'<end_of_turn>\\n' }}{% set ns.sys = '' %}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"},
    {"phi3",
     "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"},
    {"phi4",
     "{% for m in messages %}{{ '<|im_start|>' + m.role + '<|im_sep|>' + m.content + "
     "'<|im_end|>' }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"},
    {"monarch",
     "{% for m in messages %}{% if not loop.first %}{{ '<s>' }}{% endif %}{{ m.role + '\\n' + "
     "m.content + '</s>\\n' }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<s>assistant\\n' }}{% endif %}"},
    {"vicuna",
     "{% for m in messages %}{% if m.role == 'system' %}{{ m.content + '\\n\\n' }}"
     "{% elif m.role == 'user' %}{{ 'USER: ' + m.content + '\\n' }}{% elif m.role == "
     "'assistant' %}{{ 'ASSISTANT: ' + m.content + '</s>\\n' }}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"},
    {"bailing",
     "{% for m in messages %}{% set role = 'HUMAN' if m.role == 'user' else m.role | upper %}"
     "{{ '<role>' + role + '</role>' + m.content }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<role>ASSISTANT</role>' }}{% endif %}"},
};

#define TMPL_N_BUILTINS (sizeof tmpl_builtins / sizeof tmpl_builtins[0])

const char *skv_tmpl_builtin(const char *name)
{
    for (size_t i = 0; name && i < TMPL_N_BUILTINS; i++)
        if (strcmp(tmpl_builtins[i].name, name) == 0) return tmpl_builtins[i].src;
    return NULL;
}

const char *skv_tmpl_builtin_name(size_t i)
{
    return i < TMPL_N_BUILTINS ? tmpl_builtins[i].name : NULL;
}
