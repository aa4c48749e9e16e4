/* OpenAI tools on /v1/chat/completions: the request's `tools`, `tool_choice` and
 * `parallel_tool_calls` checked, the prompt they make (the template's `tools` global, and
 * for a template that does not describe tools itself the tools and the reply format in the
 * system message), the grammar that keeps the reply to a call, and the reply parsed back
 * into OpenAI's `tool_calls`.
 *
 * Formats (one per template, chosen once at startup from what the template renders):
 *  - generic: the reply is one JSON object, {"tool_call": {"name", "arguments"}} (or
 *    {"tool_calls": [...]} when parallel calls are allowed) or {"response": "..."}; the
 *    grammar (a JSON schema made of the tools' parameters, schema.c) forces that shape, so
 *    even a tiny model's call is well-formed and its arguments match the tool's schema.
 *    tool_choice "required" (or a named function) leaves only the call.
 *  - hermes: templates that show `<tool_call>` (Hermes 2 Pro, Qwen 2.5, ...): calls are
 *    <tool_call>{"name": ..., "arguments": {...}}</tool_call>, text before them is content.
 *  - llama3: Llama 3.x templates with tools (an "ipython" environment): a call is the whole
 *    reply, {"name": ..., "parameters": {...}}.
 * With a native format (or a template that describes tools in a format seqkv does not know,
 * which gets the generic one for "required") and tool_choice "auto" the model is free (llama.cpp constrains only
 * once a call has begun, a lazy grammar seqkv does not have) and a reply that does not parse
 * as a call is content; "required" constrains it to calls. */
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/chat.h"
#include "server/schema.h"
#include "server/srv.h"

/* v as JSON text in plain malloc'ed memory (json_dumps' would belong to the server's
 * jansson allocator), or NULL. */
static char *dump(const json_t *v, size_t flags)
{
    size_t n = v ? json_dumpb(v, NULL, 0, flags | JSON_ENCODE_ANY) : 0;
    char *t = n ? malloc(n + 1) : NULL;
    if (t && json_dumpb(v, t, n, flags | JSON_ENCODE_ANY) != n) free(t), t = NULL;
    if (t) t[n] = 0;
    return t;
}

int srv_tools_format(const char *tmpl, int caps)
{
    const char *src = tmpl ? tmpl : "";
    if (!(caps & SKV_CHAT_TOOLS_NATIVE)) return SRV_TOOLS_GENERIC;
    if (strstr(src, "<tool_call>")) return SRV_TOOLS_HERMES;
    if (strstr(src, "<|start_header_id|>") && strstr(src, "ipython")) return SRV_TOOLS_LLAMA3;
    return SRV_TOOLS_GENERIC;
}

void srv_tools_free(srv_tools *t)
{
    free(t->tools_json);
    t->tools_json = NULL;
}

/* ---- the request ---- */
static int bad_tool(const json_t *tool, size_t i, skv_err *err)
{
    const json_t *f = json_object_get(tool, "function"), *name = json_object_get(f, "name");
    const json_t *desc = json_object_get(f, "description"), *par = json_object_get(f, "parameters");
    const char *type = json_string_value(json_object_get(tool, "type"));
    if (!json_is_object(tool)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools[%zu]\": an object {\"type\": \"function\", \"function\": "
                                               "{...}}", i), -1;
    if (!type || strcmp(type, "function"))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools[%zu].type\": must be \"function\"", i), -1;
    if (!json_is_object(f)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools[%zu].function\": an object is required", i), -1;
    if (!json_string_length(name) || json_string_length(name) > SRV_MAX_TOOL_NAME)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools[%zu].function.name\": a string of 1..%d bytes is required", i,
                        SRV_MAX_TOOL_NAME), -1;
    if (desc && !json_is_string(desc) && !json_is_null(desc))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools[%zu].function.description\": must be a string", i), -1;
    if (par && !json_is_object(par) && !json_is_null(par))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools[%zu].function.parameters\": must be a JSON schema object", i), -1;
    return 0;
}

/* The named function of tool_choice {"type": "function", "function": {"name": ...}}. */
static const char *named_choice(const json_t *c, const json_t *tools)
{
    const char *name = json_string_value(json_object_get(json_object_get(c, "function"), "name")), *type;
    type = json_string_value(json_object_get(c, "type"));
    size_t i;
    const json_t *tool;
    if (!name || !type || strcmp(type, "function")) return NULL;
    json_array_foreach(tools, i, tool) {
        if (!strcmp(name, json_string_value(json_object_get(json_object_get(tool, "function"), "name")))) return name;
    }
    return NULL;
}

static int parse_choice(srv_tools *t, const json_t *c, const json_t *tools, skv_err *err)
{
    const char *s = json_string_value(c);
    t->choice = SRV_TOOL_AUTO;
    if (!c || json_is_null(c) || (s && !strcmp(s, "auto"))) return 0;
    if (s && !strcmp(s, "none")) return t->choice = SRV_TOOL_NONE, 0;
    if (s && !strcmp(s, "required")) return t->choice = SRV_TOOL_REQUIRED, 0;
    if (json_is_object(c) && (t->named = named_choice(c, tools))) return t->choice = SRV_TOOL_REQUIRED, 0;
    return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tool_choice\": \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                    "\"function\": {\"name\": NAME}} naming one of the tools"), -1;
}

static int grammar_asked(const json_t *b)
{
    const json_t *g = json_object_get(b, "grammar"), *s = json_object_get(b, "json_schema");
    const char *rf = json_string_value(json_object_get(json_object_get(b, "response_format"), "type"));
    return json_string_length(g) || (s && !json_is_null(s)) || (rf && strcmp(rf, "text"));
}

int srv_tools_parse(const srv *s, const json_t *b, srv_tools *t, skv_err *err)
{
    const json_t *tools = json_object_get(b, "tools"), *par = json_object_get(b, "parallel_tool_calls"), *tool;
    size_t i;
    *t = (srv_tools){.fmt = s->tool_fmt, .caps = s->tool_caps};
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools\": an array of {\"type\": \"function\", \"function\": {\"name\", "
                        "\"description\", \"parameters\"}}"), -1;
    if (json_array_size(tools) > SRV_MAX_TOOLS) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools\": at most %d", SRV_MAX_TOOLS), -1;
    json_array_foreach(tools, i, tool) if (bad_tool(tool, i, err)) return -1;
    if (par && !json_is_boolean(par) && !json_is_null(par))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"parallel_tool_calls\": a boolean"), -1;
    t->parallel = json_is_true(par);
    if (parse_choice(t, json_object_get(b, "tool_choice"), tools, err)) return -1;
    if (!json_array_size(tools)) {
        if (t->choice == SRV_TOOL_REQUIRED) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tool_choice\": \"required\" needs \"tools\""), -1;
        return t->choice = SRV_TOOL_NONE, 0;
    }
    if (t->choice != SRV_TOOL_NONE && grammar_asked(b))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "Cannot use custom grammar constraints with tools (\"grammar\", \"json_schema\" or "
                        "\"response_format\" with \"tools\")"), -1;
    t->tools = tools;
    if (!(t->tools_json = dump(tools, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1;
    return 0;
}

/* A template that describes tools in a format seqkv does not know, with tool_choice auto:
 * the model answers its own way, unconstrained (a reply in the generic JSON still parses). */
static int free_native(const srv_tools *t)
{
    return t->fmt == SRV_TOOLS_GENERIC && (t->caps & SKV_CHAT_TOOLS_NATIVE) && t->choice == SRV_TOOL_AUTO;
}

/* ---- the prompt ---- */
char *srv_tools_calls_text(const json_t *m)
{
    const json_t *calls = json_object_get(m, "tool_calls"), *c;
    size_t i;
    if (!json_array_size(calls)) return NULL;
    json_t *list = json_array();
    json_array_foreach(calls, i, c) {
        const json_t *f = json_object_get(c, "function"), *args = json_object_get(f, "arguments");
        json_t *a = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : json_deep_copy(args);
        json_array_append_new(list, json_pack("{s:O,s:o}", "name", json_object_get(f, "name"), "arguments",
                                              a ? a : json_object()));
    }
    json_t *o = json_array_size(list) == 1 ? json_pack("{s:O}", "tool_call", json_array_get(list, 0))
                                           : json_pack("{s:O}", "tool_calls", list);
    char *text = dump(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o), json_decref(list);
    return text;
}

/* A call's arguments as the template wants them: an object (a JSON string parsed; one that
 * is not an object stays a string) or a JSON string (an object dumped). */
static json_t *call_args(int caps, const json_t *args)
{
    if (caps & SKV_CHAT_TOOLS_OBJECT_ARGS) {
        if (!args) return json_object();
        if (json_is_object(args)) return json_deep_copy(args);
        json_t *a = json_loads(json_string_value(args), 0, NULL);
        if (json_is_object(a)) return a;
        json_decref(a);
        return json_deep_copy(args);
    }
    if (!args) return json_string("{}");
    if (json_is_string(args)) return json_deep_copy(args);
    char *d = dump(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_t *out = d ? json_string(d) : NULL;
    free(d);
    return out;
}

/* A call of an assistant message as the template sees it: type, function {name,
 * arguments} (an object when the template needs one), id. NULL when malformed. */
static json_t *msg_call(int caps, const json_t *c)
{
    const json_t *f = json_object_get(c, "function"), *args = json_object_get(f, "arguments");
    const json_t *id = json_object_get(c, "id");
    if (!json_is_object(f) || !json_string_length(json_object_get(f, "name")) || (id && !json_is_string(id)) ||
        (args && !json_is_string(args) && !json_is_object(args)))
        return NULL;
    json_t *a = call_args(caps, args);
    json_t *o = a ? json_pack("{s:s,s:{s:O,s:o}}", "type", "function", "function", "name", json_object_get(f, "name"),
                              "arguments", a) : NULL;
    if (o && id) json_object_set_new(o, "id", json_deep_copy(id));
    return o;
}

int srv_tools_msg_fields(int caps, const json_t *m, char **out, skv_err *err)
{
    const json_t *calls = json_object_get(m, "tool_calls"), *id = json_object_get(m, "tool_call_id"), *c;
    const json_t *name = json_object_get(m, "name"), *reasoning = json_object_get(m, "reasoning_content");
    size_t i;
    *out = NULL;
    if ((!calls || json_is_null(calls)) && !json_is_string(id) && !json_is_string(name) && !json_is_string(reasoning))
        return 0;
    json_t *o = json_object(), *list = json_array();
    if (calls && !json_is_null(calls) && !json_is_array(calls)) {
        json_decref(o), json_decref(list);
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tool_calls\" of a message: an array of {\"id\", \"type\": \"function\", "
                        "\"function\": {\"name\", \"arguments\"}}"), -1;
    }
    json_array_foreach(calls, i, c) {
        json_t *x = msg_call(caps, c);
        if (!x) {
            json_decref(o), json_decref(list);
            return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tool_calls[%zu]\" of a message: needs \"function\": {\"name\": a string, "
                            "\"arguments\": a JSON string or object}", i), -1;
        }
        json_array_append_new(list, x);
    }
    if (json_array_size(list)) json_object_set(o, "tool_calls", list);
    if (json_is_string(id)) json_object_set_new(o, "tool_call_id", json_deep_copy(id));
    if (json_is_string(name)) json_object_set_new(o, "name", json_deep_copy(name));
    if (json_is_string(reasoning)) json_object_set_new(o, "reasoning_content", json_deep_copy(reasoning));
    json_decref(list);
    *out = dump(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return *out ? 0 : (skv_fail(err, SKV_ERR_NOMEM, "out of memory"), -1);
}

char *srv_tools_system_text(const srv_tools *t)
{
    static const char head[] = "You may call the tools listed below to answer the user's request.\n\n";
    static const char one[] = "\n\nReply with one JSON object and nothing else: either {\"tool_call\": {\"name\": "
                              "TOOL NAME, \"arguments\": {ARGUMENTS}}} to call a tool, or {\"response\": \"YOUR "
                              "ANSWER\"} to answer the user directly.";
    static const char many[] = "\n\nReply with one JSON object and nothing else: either {\"tool_calls\": [{\"name\": "
                               "TOOL NAME, \"arguments\": {ARGUMENTS}}, ...]} to call one or more tools, or "
                               "{\"response\": \"YOUR ANSWER\"} to answer the user directly.";
    if (!t->tools || t->choice == SRV_TOOL_NONE || t->fmt != SRV_TOOLS_GENERIC || free_native(t)) return NULL;
    char *list = (t->caps & SKV_CHAT_TOOLS_NATIVE) ? strdup("") : dump(t->tools, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    const char *tail = t->parallel ? many : one;
    size_t n = (list ? strlen(list) : 0) + sizeof head + strlen(tail) + 1;
    char *out = list ? malloc(n) : NULL;
    if (out) snprintf(out, n, "%s%s%s", *list ? head : "", list, *list ? tail : tail + 2);
    free(list);
    return out;
}

/* A tool's call as a JSON schema: {"name": const NAME, "arguments": PARAMETERS} (llama3:
 * "parameters" holds them). */
static json_t *call_schema(const json_t *tool, const char *args_key)
{
    const json_t *f = json_object_get(tool, "function"), *par = json_object_get(f, "parameters");
    json_t *p = json_is_object(par) ? json_deep_copy(par) : json_pack("{s:s}", "type", "object");
    return json_pack("{s:s,s:{s:{s:s,s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "type", "string",
                     "const", json_object_get(f, "name"), args_key, p, "required", "name", args_key,
                     "additionalProperties", 0);
}

static json_t *calls_any_of(const srv_tools *t, const char *args_key)
{
    json_t *any = json_array();
    size_t i;
    const json_t *tool;
    json_array_foreach(t->tools, i, tool) {
        const char *name = json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
        if (!t->named || !strcmp(t->named, name)) json_array_append_new(any, call_schema(tool, args_key));
    }
    if (json_array_size(any) != 1) return json_pack("{s:o}", "anyOf", any);
    json_t *one = json_incref(json_array_get(any, 0));
    json_decref(any);
    return one;
}

/* The generic reply's schema: the call (or calls), or with tool_choice auto a response. */
static json_t *generic_schema(const srv_tools *t)
{
    json_t *call = calls_any_of(t, "arguments"), *calls;
    if (t->parallel)
        calls = json_pack("{s:s,s:{s:{s:s,s:o,s:i}},s:[s],s:b}", "type", "object", "properties", "tool_calls", "type",
                          "array", "items", call, "minItems", 1, "required", "tool_calls", "additionalProperties", 0);
    else
        calls = json_pack("{s:s,s:{s:o},s:[s],s:b}", "type", "object", "properties", "tool_call", call, "required",
                          "tool_call", "additionalProperties", 0);
    if (t->choice == SRV_TOOL_REQUIRED) return calls;
    json_t *resp = json_pack("{s:s,s:{s:{s:s}},s:[s],s:b}", "type", "object", "properties", "response", "type", "string",
                             "required", "response", "additionalProperties", 0);
    return json_pack("{s:[o,o]}", "anyOf", calls, resp);
}

/* The grammar text (malloc'd) and its start rule; NULL text: no constraint. */
static char *tools_gbnf(const srv_tools *t, const char **start, skv_err *err)
{
    json_t *schema = NULL;
    *start = "root";
    if (t->choice == SRV_TOOL_NONE || !t->tools) return NULL;
    if (free_native(t)) return NULL;
    if (t->fmt == SRV_TOOLS_GENERIC) schema = generic_schema(t);
    else if (t->choice == SRV_TOOL_REQUIRED) schema = calls_any_of(t, t->fmt == SRV_TOOLS_LLAMA3 ? "parameters" : "arguments");
    if (!schema) return NULL;
    char *g = srv_schema_to_gbnf(schema, err);
    json_decref(schema);
    if (!g || t->fmt != SRV_TOOLS_HERMES) return g;
    /* no free whitespace after a call: the model ends there (or starts the next call) */
    static const char wrap[] = "\nskv-tool-calls ::= skv-tool-call%s\nskv-tool-call ::= \"<tool_call>\\n\" root "
                               "\"\\n</tool_call>\"\n";
    const char *more = t->parallel ? " (\"\\n\" skv-tool-call)*" : "";
    size_t n = strlen(g) + sizeof wrap + strlen(more);
    char *w = malloc(n);
    if (w) snprintf(w, n, "%s", g), snprintf(w + strlen(g), n - strlen(g), wrap, more);
    free(g);
    *start = "skv-tool-calls";
    return w;
}

int srv_tools_grammar(srv_job *j, const srv_tools *t, skv_err *err)
{
    const char *start;
    skv_err sub = {0};
    skv_err_clear(err);
    char *g = tools_gbnf(t, &start, &sub);
    if (!g && sub.msg[0]) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"tools\" parameters: %.239s", sub.msg), -1;
    int rc = g ? srv_grammar_set(j, g, start, err) : 0;
    free(g);
    j->tool_fmt = t->tools && t->choice != SRV_TOOL_NONE ? t->fmt : SRV_TOOLS_OFF;
    return rc;
}

/* ---- the reply ---- */
static json_t *new_call(const char *name, const json_t *args)
{
    static atomic_ullong n;
    char id[40];
    unsigned long long k = atomic_fetch_add(&n, 1) + 1, x = ((unsigned long long)time(NULL) << 24) ^ (k * 0x9E3779B97F4A7C15ull);
    snprintf(id, sizeof id, "call_%016llx%04llx", x, k & 0xffff);
    char *a = !args ? strdup("{}") : json_is_string(args) ? strdup(json_string_value(args))
                                   : dump(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_t *c = a ? json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", name,
                              "arguments", a) : NULL;
    free(a);
    return c;
}

/* One call object {"name", args_key} appended to calls; -1 when it is not one. */
static int add_call(json_t *calls, const json_t *o, const char *args_key)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    const json_t *args = json_object_get(o, args_key);
    if (!name || !*name || (args && !json_is_object(args) && !json_is_string(args))) return -1;
    json_t *c = new_call(name, args);
    return c ? json_array_append_new(calls, c) : -1;
}

static json_t *load(const char *text, size_t len)
{
    return json_loadb(text, len, 0, NULL);
}

/* generic: {"tool_call": ...} | {"tool_calls": [...]} | {"response": ...}. */
static int parse_generic(const char *text, size_t len, json_t *calls, char **content)
{
    json_t *o = load(text, len), *v;
    size_t i;
    int rc = -1;
    if (json_is_object(json_object_get(o, "tool_call"))) {
        rc = add_call(calls, json_object_get(o, "tool_call"), "arguments");
    } else if (json_array_size(json_object_get(o, "tool_calls"))) {
        rc = 0;
        json_array_foreach(json_object_get(o, "tool_calls"), i, v) rc |= add_call(calls, v, "arguments");
    } else if ((v = json_object_get(o, "response"))) {
        *content = json_is_string(v) ? strdup(json_string_value(v)) : dump(v, JSON_COMPACT);
        rc = *content ? 0 : -1;
    }
    json_decref(o);
    return rc;
}

/* hermes: content, then <tool_call>JSON</tool_call> blocks (whitespace between); a last
 * block that the token limit cut is dropped. */
static int parse_hermes(const char *text, size_t len, json_t *calls, char **content)
{
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *at = strstr(text, open), *end = text + len;
    if (!at) return -1;
    size_t pre = (size_t)(at - text);
    while (at && at < end) {
        const char *body = at + sizeof open - 1, *stop = strstr(body, close);
        if (!stop && json_array_size(calls)) break; /* cut by the token limit: the whole calls stand */
        json_t *o = stop ? load(body, (size_t)(stop - body)) : NULL;
        int bad = !json_is_object(o) || add_call(calls, o, json_object_get(o, "arguments") ? "arguments" : "parameters");
        json_decref(o);
        if (bad) return -1;
        at = stop + sizeof close - 1;
        while (at < end && strchr(" \t\r\n", *at)) at++;
        size_t rest = (size_t)(end - at);
        if (rest < sizeof open - 1 && !strncmp(at, open, rest)) break; /* a tag the limit cut */
        if (at < end && strncmp(at, open, sizeof open - 1)) return -1; /* text after a call: not a call reply */
    }
    while (pre && strchr(" \t\r\n", text[pre - 1])) pre--;
    if (pre && !(*content = strndup(text, pre))) return -1;
    return 0;
}

/* llama3: the reply is {"name": ..., "parameters": {...}} (or "arguments"). */
static int parse_llama3(const char *text, size_t len, json_t *calls)
{
    json_t *o = load(text, len);
    int rc = !json_is_object(o) ? -1 : add_call(calls, o, json_object_get(o, "parameters") ? "parameters" : "arguments");
    json_decref(o);
    return rc;
}

json_t *srv_tools_parse_reply(int fmt, const char *raw, size_t len, char **content)
{
    char *own = malloc(len + 1), *text = own; /* NUL-terminated: the parsers search it */
    json_t *calls = own ? json_array() : NULL;
    *content = NULL;
    int rc = -1;
    if (own) memcpy(own, raw, len), own[len] = 0;
    while (own && len && strchr(" \t\r\n", *text)) text++, len--;
    if (calls && fmt == SRV_TOOLS_GENERIC) rc = parse_generic(text, len, calls, content);
    else if (calls && fmt == SRV_TOOLS_HERMES) rc = parse_hermes(text, len, calls, content);
    else if (calls && fmt == SRV_TOOLS_LLAMA3) rc = parse_llama3(text, len, calls);
    free(own);
    if (rc || !json_array_size(calls)) { /* not a call: the text is the content */
        json_decref(calls);
        if (rc) free(*content), *content = NULL;
        return NULL;
    }
    return calls;
}
