/* Anthropic's Messages API, as llama-server serves it: POST /v1/messages and
 * /v1/messages/count_tokens. A request is rewritten into an OpenAI chat request and runs the
 * chat path (template, tools, grammar, sampling); the reply is written in Anthropic's shapes
 * (reply.c, SRV_FMT_ANTHROPIC: a "message" with content blocks, or the stream's
 * message_start / content_block_* / message_delta / message_stop events).
 *
 * The rewrite (llama-server's): `system` (a string or text blocks) becomes a leading system
 * message; content blocks become OpenAI parts: text as text, image as image_url (refused
 * downstream: no multimodal model here), tool_use as the assistant's tool_calls (input as
 * the JSON arguments), tool_result as role "tool" messages after the message that held them
 * (text parts joined), thinking as the message's reasoning_content; `tools` (name,
 * description, input_schema) as functions; tool_choice auto -> "auto", any / tool ->
 * "required"; stop_sequences -> stop; max_tokens (4096 when absent); temperature, top_p,
 * top_k, stream, chat_template_kwargs as they are; thinking {"type": "enabled" | "disabled"}
 * -> enable_thinking (its budget_tokens is not enforced); metadata is not used. */
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

/* A text or image block as an OpenAI content part (NULL: not such a block). */
static json_t *oai_part(json_t *block)
{
    const char *type = json_string_value(json_object_get(block, "type"));
    if (!type) return NULL;
    if (!strcmp(type, "text")) return json_pack("{s:s,s:O?}", "type", "text", "text", json_object_get(block, "text"));
    if (strcmp(type, "image")) return NULL;
    json_t *src = json_object_get(block, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    if (st && !strcmp(st, "url"))
        return json_pack("{s:s,s:{s:O?}}", "type", "image_url", "image_url", "url", json_object_get(src, "url"));
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    json_t *url = json_sprintf("data:%s;base64,%s", mt ? mt : "image/jpeg",
                               json_string_value(json_object_get(src, "data")) ? json_string_value(json_object_get(src, "data")) : "");
    return url ? json_pack("{s:s,s:{s:o}}", "type", "image_url", "image_url", "url", url) : NULL;
}

/* A tool_result block as a role "tool" message. */
static json_t *tool_result(json_t *block)
{
    json_t *c = json_object_get(block, "content"), *part, *id = json_object_get(block, "tool_use_id");
    size_t i;
    if (json_is_string(c)) return json_pack("{s:s,s:O?,s:O}", "role", "tool", "tool_call_id", id, "content", c);
    if (!json_is_array(c)) return json_pack("{s:s,s:O?,s:s}", "role", "tool", "tool_call_id", id, "content", "");
    json_t *parts = json_array();
    int images = 0;
    json_array_foreach(c, i, part) {
        json_t *p = oai_part(part);
        if (!p) continue;
        images |= !strcmp(json_string_value(json_object_get(p, "type")), "image_url");
        json_array_append_new(parts, p);
    }
    if (!images) { /* text only: one string, as llama-server */
        json_t *joined = json_string("");
        json_array_foreach(parts, i, part) {
            json_t *t = json_sprintf("%s%s", json_string_value(joined), json_string_value(json_object_get(part, "text")) ?
                                                                            json_string_value(json_object_get(part, "text")) : "");
            json_decref(joined);
            joined = t;
        }
        json_decref(parts);
        parts = joined;
    }
    return json_pack("{s:s,s:O?,s:o}", "role", "tool", "tool_call_id", id, "content", parts);
}

/* One Anthropic message appended to out as OpenAI messages: 0, or -1 (no memory). */
static int add_message(json_t *out, json_t *m)
{
    json_t *content = json_object_get(m, "content"), *block;
    const char *role = json_string_value(json_object_get(m, "role"));
    size_t i;
    if (!content) return role && !strcmp(role, "assistant") ? 0 : json_array_append(out, m);
    if (!json_is_array(content)) return json_array_append(out, m);
    json_t *parts = json_array(), *calls = json_array(), *results = json_array();
    json_t *reasoning = json_string("");
    json_array_foreach(content, i, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        if (!type) continue;
        if (!strcmp(type, "text") || !strcmp(type, "image")) {
            json_t *p = oai_part(block);
            if (p) json_array_append_new(parts, p);
        } else if (!strcmp(type, "thinking")) {
            const char *t = json_string_value(json_object_get(block, "thinking"));
            json_t *r = json_sprintf("%s%s", json_string_value(reasoning), t ? t : "");
            json_decref(reasoning);
            reasoning = r ? r : json_string("");
        } else if (!strcmp(type, "tool_use")) {
            json_t *in = json_object_get(block, "input");
            char *args = in ? srv_json_text(in, NULL, 0) : NULL; /* plain malloc (json_dumps' is jansson's) */
            json_array_append_new(calls, json_pack("{s:O?,s:s,s:{s:O?,s:s}}", "id", json_object_get(block, "id"), "type",
                                                   "function", "function", "name", json_object_get(block, "name"),
                                                   "arguments", args ? args : "{}"));
            free(args);
        } else if (!strcmp(type, "tool_result")) {
            json_t *t = tool_result(block);
            if (t) json_array_append_new(results, t);
        }
    }
    int rc = 0;
    if (json_array_size(parts) || json_array_size(calls) || json_string_length(reasoning)) {
        json_t *o = json_pack("{s:s}", "role", role ? role : "user");
        rc |= !o || json_object_set_new(o, "content", json_array_size(parts) ? json_incref(parts) : json_string(""));
        if (o && json_array_size(calls)) rc |= json_object_set(o, "tool_calls", calls);
        if (o && json_string_length(reasoning)) rc |= json_object_set(o, "reasoning_content", reasoning);
        rc |= json_array_append_new(out, o);
    }
    json_array_foreach(results, i, block) rc |= json_array_append(out, block);
    json_decref(parts), json_decref(calls), json_decref(results), json_decref(reasoning);
    return rc ? -1 : 0;
}

json_t *srv_anthropic_to_oai(const json_t *body, skv_err *err)
{
    json_t *msgs = json_object_get(body, "messages"), *sys = json_object_get(body, "system"), *m;
    size_t i;
    if (!msgs) return skv_fail(err, SKV_ERR_INVALID_ARG, "'messages' is required"), NULL;
    if (!json_is_array(msgs)) return skv_fail(err, SKV_ERR_INVALID_ARG, "\"messages\": an array of messages"), NULL;
    json_t *out = json_object(), *list = json_array();
    if (json_is_string(sys) || json_is_array(sys)) {
        json_t *text = json_is_string(sys) ? json_incref(sys) : json_string(""), *b;
        json_array_foreach(json_is_array(sys) ? sys : NULL, i, b) {
            const char *ty = json_string_value(json_object_get(b, "type"));
            const char *t = json_string_value(json_object_get(b, "text"));
            if (!ty || strcmp(ty, "text") || !t) continue;
            json_t *x = json_sprintf("%s%s", json_string_value(text), t);
            json_decref(text);
            text = x ? x : json_string("");
        }
        json_array_append_new(list, json_pack("{s:s,s:o}", "role", "system", "content", text));
    }
    int oom = !out || !list;
    json_array_foreach(msgs, i, m) if (!oom) oom = add_message(list, m);
    json_object_set_new(out, "messages", list);
    json_t *tools = json_object_get(body, "tools"), *t;
    if (json_is_array(tools)) {
        json_t *ot = json_array();
        json_array_foreach(tools, i, t) {
            json_t *schema = json_object_get(t, "input_schema"); /* "o" takes the reference: a new {} is not leaked */
            json_array_append_new(ot, json_pack("{s:s,s:{s:O?,s:O?,s:o}}", "type", "function", "function", "name",
                                                json_object_get(t, "name"), "description", json_object_get(t, "description"),
                                                "parameters", schema ? json_incref(schema) : json_object()));
        }
        json_object_set_new(out, "tools", ot);
    }
    json_t *tc = json_object_get(body, "tool_choice");
    const char *tct = json_string_value(json_object_get(tc, "type"));
    if (tct && !strcmp(tct, "auto")) json_object_set_new(out, "tool_choice", json_string("auto"));
    else if (tct && (!strcmp(tct, "any") || !strcmp(tct, "tool"))) json_object_set_new(out, "tool_choice", json_string("required"));
    else if (tct && !strcmp(tct, "none")) json_object_set_new(out, "tool_choice", json_string("none"));
    if (json_object_get(body, "stop_sequences")) json_object_set(out, "stop", json_object_get(body, "stop_sequences"));
    json_t *mt = json_object_get(body, "max_tokens");
    json_object_set_new(out, "max_tokens", mt ? json_incref(mt) : json_integer(4096));
    static const char *const same[] = {"temperature", "top_p", "top_k", "stream", "chat_template_kwargs"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++)
        if (json_object_get(body, same[k])) json_object_set(out, same[k], json_object_get(body, same[k]));
    const char *think = json_string_value(json_object_get(json_object_get(body, "thinking"), "type"));
    if (think && (!strcmp(think, "enabled") || !strcmp(think, "disabled"))) {
        json_t *kw = json_object_get(out, "chat_template_kwargs");
        kw = json_is_object(kw) ? json_copy(kw) : json_object();
        if (!json_object_get(kw, "enable_thinking"))
            json_object_set_new(kw, "enable_thinking", json_boolean(!strcmp(think, "enabled")));
        json_object_set_new(out, "chat_template_kwargs", kw);
    }
    if (think && !strcmp(think, "enabled")) { /* llama-server's: budget_tokens, else 10000 */
        json_t *bt = json_object_get(json_object_get(body, "thinking"), "budget_tokens");
        json_object_set_new(out, "thinking_budget_tokens", json_is_integer(bt) ? json_incref(bt) : json_integer(10000));
    }
    if (oom) {
        json_decref(out);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory"), NULL;
    }
    return out;
}
