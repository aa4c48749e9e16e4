/* Chat templates: a Jinja-subset interpreter for a model's tokenizer.chat_template
 * (docs/templates.md).
 *
 * Parse once, render many times:
 *     skv_tmpl *t; skv_tmpl_error e;
 *     if (skv_tmpl_parse(src, strlen(src), NULL, &t, &e) != SKV_OK) ... e.line, e.col, e.msg
 *     skv_tmpl_render(t, &input, &text, &len, &e);   // text: malloc'd, NUL-terminated
 *     free(text); skv_tmpl_free(t);
 * The subset covers what real chat templates use: {{ }}, {% if/elif/else %}, {% for %}
 * (with loop.*, tuple targets, `if` filters, else), {% set %} (names, namespace
 * attributes, blocks), {% macro %}, namespace(), raise_exception(), range(), the
 * common string/list filters, tests and methods; whitespace control (-) and the
 * trim_blocks + lstrip_blocks settings Hugging Face renders with.
 * Hostile templates are bounded: source size, nesting depth, loop iterations,
 * output bytes and render memory all have limits (skv_tmpl_limits); a render that
 * exceeds one fails with SKV_ERR_RANGE. Nothing here prints or exits.
 * Depends only on libc. */
#ifndef SKV_SERVER_TEMPLATE_H
#define SKV_SERVER_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct skv_tmpl skv_tmpl;

typedef struct {
    int line, col;  /* 1-based position in the template source; 0 when not applicable */
    char msg[200];
} skv_tmpl_error;

typedef struct {
    size_t max_source;      /* template bytes */
    int max_depth;          /* nesting of expressions, blocks and macro calls */
    uint64_t max_steps;     /* loop iterations + macro calls per render */
    size_t max_output;      /* rendered bytes */
    size_t max_memory;      /* render arena bytes */
} skv_tmpl_limits;

/* The defaults (the only place the numbers live). */
skv_tmpl_limits skv_tmpl_default_limits(void);

typedef struct {
    const char *role;
    const char *content;
} skv_tmpl_msg;

enum { SKV_TMPL_VAR_STR = 0, SKV_TMPL_VAR_BOOL = 1 };
typedef struct {
    const char *name;
    int kind;           /* SKV_TMPL_VAR_* */
    const char *str;    /* SKV_TMPL_VAR_STR */
    int b;              /* SKV_TMPL_VAR_BOOL */
} skv_tmpl_var;

typedef struct {
    const skv_tmpl_msg *msgs;
    size_t n_msgs;
    int add_generation_prompt;
    const char *bos_token;  /* NULL: "" */
    const char *eos_token;
    const skv_tmpl_var *vars; /* extra globals (e.g. enable_thinking) */
    size_t n_vars;
    const char *tools_json;   /* NULL, or a JSON array: the `tools` global (OpenAI's tools) */
    const char *const *msg_fields; /* NULL, or per message NULL or a JSON object whose members
                                      are set on it after role and content (tool_calls, ...) */
    const char *globals_json; /* NULL, or a JSON object whose members are set as globals after
                                 all the others (llama-server's chat_template_kwargs, ...) */
} skv_tmpl_input;

/* Parses src[0..len) (need not be NUL-terminated). limits NULL: the defaults.
 * Returns SKV_OK, SKV_ERR_FORMAT (syntax: position in err), SKV_ERR_RANGE, SKV_ERR_NOMEM. */
int skv_tmpl_parse(const char *src, size_t len, const skv_tmpl_limits *limits, skv_tmpl **out,
                   skv_tmpl_error *err);
void skv_tmpl_free(skv_tmpl *t);

/* Renders the template with messages, add_generation_prompt, bos_token, eos_token and the
 * extra vars as globals. *out: malloc'd, NUL-terminated (the caller frees); *out_len may be
 * NULL. Errors: SKV_ERR_FORMAT (a runtime error, raise_exception included: message and
 * position in err), SKV_ERR_RANGE (a limit), SKV_ERR_NOMEM. */
int skv_tmpl_render(const skv_tmpl *t, const skv_tmpl_input *in, char **out, size_t *out_len,
                    skv_tmpl_error *err);

/* Does the template render a leading system message? (Probed once at parse time: a render
 * of [system, user] that fails or omits the system text says no.) */
int skv_tmpl_supports_system(const skv_tmpl *t);

/* skv_tmpl_render for a chat, as llama.cpp applies templates: when the template does not
 * support a system role, a leading system message is merged into the next message
 * ("system\nuser"). */
int skv_tmpl_render_chat(const skv_tmpl *t, const skv_tmpl_input *in, char **out,
                         size_t *out_len, skv_tmpl_error *err);

/* Named built-in templates (--chat-template NAME): the Jinja source, or NULL. */
const char *skv_tmpl_builtin(const char *name);
/* The i-th built-in's name (NULL past the end). */
const char *skv_tmpl_builtin_name(size_t i);

#endif
