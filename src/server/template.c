/* Chat templates: the entry points (template.h). Each sets up the arena and runs its work
 * under tp_run, the landing point that every error of the lexer, parser and evaluator
 * returns through. */
#include <stdlib.h>
#include "core/fpguard.h"

#include <stdio.h>
#include <string.h>

#include "seqkv.h"
#include "server/template_int.h"

skv_tmpl_limits skv_tmpl_default_limits(void)
{
    skv_tmpl_limits l = {
        .max_source = (size_t)1 << 20,   /* real chat templates are < 64 KiB */
        .max_depth = 128,
        .max_steps = 1000000,
        .max_output = (size_t)4 << 20,
        .max_memory = (size_t)256 << 20,
    };
    return l;
}

static void tmpl_err_clear(skv_tmpl_error *err)
{
    if (err) err->line = err->col = 0, err->msg[0] = 0;
}

static int tmpl_probe_system(const skv_tmpl *t)
{
    static const skv_tmpl_msg probe[] = {{"system", "SKV-SYSTEM-PROBE"}, {"user", "SKV-USER-PROBE"}};
    skv_tmpl_input in = {.msgs = probe, .n_msgs = 2, .add_generation_prompt = 1};
    char *out = NULL;
    if (skv_tmpl_render(t, &in, &out, NULL, NULL) != SKV_OK) return 0;
    int yes = strstr(out, "SKV-SYSTEM-PROBE") != NULL;
    free(out);
    return yes;
}

typedef struct {
    skv_tmpl *t;
    const char *src;
    size_t len;
} tmpl_parse_job;

static void tmpl_parse_in(tp_arena *a, void *arg)
{
    tmpl_parse_job *j = arg;
    size_t n;
    tp_tok *toks = tp_lex(a, j->src, j->len, &n);
    j->t->body = tp_parse(a, toks, n, j->t->lim.max_depth);
}

int skv_tmpl_parse(const char *src, size_t len, const skv_tmpl_limits *limits, skv_tmpl **out,
                   skv_tmpl_error *err)
{
    tmpl_err_clear(err);
    *out = NULL;
    skv_tmpl_limits lim = limits ? *limits : skv_tmpl_default_limits();
    if (!src && len) return SKV_ERR_INVALID_ARG;
    if (len > lim.max_source) {
        if (err) snprintf(err->msg, sizeof err->msg, "template larger than %zu bytes", lim.max_source);
        return SKV_ERR_RANGE;
    }
    skv_tmpl *t = calloc(1, sizeof *t);
    if (!t) return SKV_ERR_NOMEM;
    t->lim = lim;
    t->arena.limit = lim.max_memory, t->arena.err = err;
    tmpl_parse_job job = {.t = t, .src = src ? src : "", .len = len};
    int st = tp_run(&t->arena, tmpl_parse_in, &job);
    t->arena.err = NULL;
    if (st != SKV_OK) {
        tp_arena_free(&t->arena);
        free(t);
        return st;
    }
    t->supports_system = tmpl_probe_system(t);
    *out = t;
    return SKV_OK;
}

void skv_tmpl_free(skv_tmpl *t)
{
    if (!t) return;
    tp_arena_free(&t->arena);
    free(t);
}

int skv_tmpl_supports_system(const skv_tmpl *t) { return t && t->supports_system; }

/* The members of a JSON object set on d (a message's structured fields, the extra globals). */
static void tmpl_merge(tp_arena *a, tv_dict *d, const char *json)
{
    tv o = tp_json_value(a, json, strlen(json), 64);
    if (o.k != V_DICT) tp_fail(a, SKV_ERR_FORMAT, 0, 0, "a message's fields (or the extra globals) must be a JSON object");
    for (size_t k = 0; k < o.u.d->n; k++) tv_dict_set(a, d, o.u.d->key[k]->s, o.u.d->key[k]->len, o.u.d->val[k]);
}

static tv tmpl_messages(tp_arena *a, const skv_tmpl_input *in)
{
    tv list = tv_list_new(a);
    for (size_t i = 0; i < in->n_msgs; i++) {
        tv m = tv_dict_new(a);
        const char *role = in->msgs[i].role ? in->msgs[i].role : "";
        const char *content = in->msgs[i].content ? in->msgs[i].content : "";
        tv_dict_set(a, m.u.d, "role", 4, tv_cstr(a, role));
        tv_dict_set(a, m.u.d, "content", 7, tv_cstr(a, content));
        if (in->msg_fields && in->msg_fields[i]) tmpl_merge(a, m.u.d, in->msg_fields[i]);
        tv_list_push(a, list.u.l, m);
    }
    return list;
}

static tv_dict *tmpl_globals(tp_arena *a, const skv_tmpl_input *in)
{
    tv_dict *g = tv_dict_new(a).u.d;
    tv_dict_set(a, g, "messages", 8, tmpl_messages(a, in));
    tv_dict_set(a, g, "add_generation_prompt", 21, tv_bool(in->add_generation_prompt));
    tv_dict_set(a, g, "bos_token", 9, tv_cstr(a, in->bos_token ? in->bos_token : ""));
    tv_dict_set(a, g, "eos_token", 9, tv_cstr(a, in->eos_token ? in->eos_token : ""));
    if (in->tools_json) tv_dict_set(a, g, "tools", 5, tp_json_value(a, in->tools_json, strlen(in->tools_json), 64));
    for (size_t i = 0; i < in->n_vars; i++) {
        const skv_tmpl_var *v = &in->vars[i];
        if (!v->name) continue;
        tv val = v->kind == SKV_TMPL_VAR_BOOL ? tv_bool(v->b) : tv_cstr(a, v->str ? v->str : "");
        tv_dict_set(a, g, v->name, strlen(v->name), val);
    }
    if (in->globals_json) tmpl_merge(a, g, in->globals_json);
    return g;
}

typedef struct {
    const skv_tmpl *t;
    const skv_tmpl_input *in;
    tp_buf buf;
} tmpl_render_job;

static void tmpl_render_in(tp_arena *a, void *arg)
{
    tmpl_render_job *j = arg;
    tp_scope root = {.vars = tmpl_globals(a, j->in)};
    tp_ctx c = {.a = a, .lim = &j->t->lim, .out = &j->buf, .globals = &root, .scope = &root};
    tp_exec(&c, j->t->body);
}

int skv_tmpl_render(const skv_tmpl *t, const skv_tmpl_input *in, char **out, size_t *out_len,
                    skv_tmpl_error *err)
{
    tmpl_err_clear(err);
    if (!t || !in || !out || (in->n_msgs && !in->msgs) || (in->n_vars && !in->vars))
        return SKV_ERR_INVALID_ARG;
    *out = NULL;
    tp_arena a = {.limit = t->lim.max_memory, .err = err};
    tmpl_render_job job = {.t = t, .in = in, .buf = {.limit = t->lim.max_output}};
    int st = tp_run(&a, tmpl_render_in, &job);
    if (st == SKV_OK && !(*out = malloc(job.buf.n + 1))) st = SKV_ERR_NOMEM;
    if (st == SKV_OK) {
        if (job.buf.n) memcpy(*out, job.buf.p, job.buf.n);
        (*out)[job.buf.n] = 0;
        if (out_len) *out_len = job.buf.n;
    }
    tp_arena_free(&a);
    return st;
}

int skv_tmpl_render_chat(const skv_tmpl *t, const skv_tmpl_input *in, char **out,
                         size_t *out_len, skv_tmpl_error *err)
{
    if (!t || !in || !in->n_msgs || t->supports_system || !in->msgs[0].role ||
        strcmp(in->msgs[0].role, "system") != 0)
        return skv_tmpl_render(t, in, out, out_len, err);
    skv_tmpl_input merged = *in;
    skv_tmpl_msg *msgs = malloc(in->n_msgs * sizeof *msgs);
    char *joined = NULL;
    if (!msgs) return SKV_ERR_NOMEM;
    memcpy(msgs, in->msgs, in->n_msgs * sizeof *msgs);
    if (in->n_msgs > 1) { /* "system\nfirst" replaces the first two messages */
        const char *s = in->msgs[0].content ? in->msgs[0].content : "";
        const char *u = in->msgs[1].content ? in->msgs[1].content : "";
        size_t ns = strlen(s), nu = strlen(u);
        joined = malloc(ns + nu + 2);
        if (!joined) { free(msgs); return SKV_ERR_NOMEM; }
        memcpy(joined, s, ns), joined[ns] = '\n', memcpy(joined + ns + 1, u, nu + 1);
        msgs[1].content = joined;
    }
    merged.msgs = msgs + 1, merged.n_msgs = in->n_msgs - 1;
    merged.msg_fields = in->msg_fields ? in->msg_fields + 1 : NULL;
    int st = skv_tmpl_render(t, &merged, out, out_len, err);
    free(joined);
    free(msgs);
    return st;
}
