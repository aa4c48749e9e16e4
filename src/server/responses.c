/* OpenAI's Responses API, as llama-server serves it: POST /v1/responses (/responses) and
 * /v1/responses/input_tokens. A request is rewritten into a chat request and runs the chat
 * path; the reply is a "response" object, or streamed as response.* events (reply.c,
 * SRV_FMT_RESPONSES).
 *
 * The rewrite (llama-server's): `instructions` becomes a leading system message; `input` a
 * user message (a string) or a list of items: messages of user / system / developer with a
 * string or input_text / input_image parts (input_file refused), the assistant's output
 * messages (output_text or refusal parts; merged into an assistant turn just before),
 * function_call items (the assistant's tool_calls), function_call_output items (role "tool"
 * messages), reasoning items (the assistant's reasoning_content); function `tools` become
 * chat tools (other tool types are dropped); `max_output_tokens` -> max_tokens;
 * `reasoning.effort` -> reasoning_effort; every other field is passed on as it is.
 * `previous_response_id` is refused (no stored responses). */
#include "core/fpguard.h"
#include <stdint.h>
#include <string.h>

#include "server/srv.h"

static int fail(skv_err *err, const char *msg) { return skv_fail(err, SKV_ERR_INVALID_ARG, "%s", msg), -1; }

/* A user / system / developer message's parts as chat parts: 0, or -1 with err. */
static int input_parts(json_t *content, json_t *out, skv_err *err)
{
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (type && !strcmp(type, "input_text")) {
            if (!json_object_get(p, "text")) return fail(err, "'Input text' requires 'text'");
            json_array_append_new(out, json_pack("{s:O,s:s}", "text", json_object_get(p, "text"), "type", "text"));
        } else if (type && !strcmp(type, "input_image")) {
            if (!json_object_get(p, "image_url")) return fail(err, "'image_url' is required");
            json_array_append_new(out, json_pack("{s:{s:O},s:s}", "image_url", "url", json_object_get(p, "image_url"),
                                                 "type", "image_url"));
        } else if (type && !strcmp(type, "input_file")) {
            return fail(err, "'input_file' is not supported by seqkv serve");
        } else {
            return fail(err, "'type' must be one of 'input_text', 'input_image', or 'input_file'");
        }
    }
    return 0;
}

/* The last message when it is the assistant's (items after it merge into it), else NULL. */
static json_t *assistant_tail(json_t *msgs)
{
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    return role && !strcmp(role, "assistant") ? last : NULL;
}

static int add_item(json_t *msgs, json_t *item, skv_err *err)
{
    const char *role = json_string_value(json_object_get(item, "role"));
    const char *type = json_string_value(json_object_get(item, "type"));
    json_t *content = json_object_get(item, "content"), *prev = assistant_tail(msgs);
    if (role && (!strcmp(role, "user") || !strcmp(role, "system") || !strcmp(role, "developer")) &&
        (json_is_string(content) || json_is_array(content))) {
        json_t *parts = json_array();
        if (json_is_string(content)) json_array_append_new(parts, json_pack("{s:O,s:s}", "text", content, "type", "text"));
        else if (input_parts(content, parts, err)) return json_decref(parts), -1;
        return json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", parts));
    }
    if (role && !strcmp(role, "assistant") && type && !strcmp(type, "message")) {
        json_t *parts = json_array(), *p;
        size_t i;
        if (json_is_string(content)) json_array_append_new(parts, json_pack("{s:O,s:s}", "text", content, "type", "text"));
        json_array_foreach(json_is_array(content) ? content : NULL, i, p) {
            const char *pt = json_string_value(json_object_get(p, "type"));
            if (pt && (!strcmp(pt, "output_text") || !strcmp(pt, "input_text")) && json_is_string(json_object_get(p, "text")))
                json_array_append_new(parts, json_pack("{s:O,s:s}", "text", json_object_get(p, "text"), "type", "text"));
            else if (pt && !strcmp(pt, "refusal") && json_is_string(json_object_get(p, "refusal")))
                json_array_append_new(parts, json_pack("{s:O,s:s}", "text", json_object_get(p, "refusal"), "type", "text"));
            else return json_decref(parts), fail(err, "'type' must be one of 'output_text' or 'refusal' (with its text)");
        }
        if (prev) {
            json_t *pc = json_object_get(prev, "content");
            if (!json_is_array(pc)) json_object_set_new(prev, "content", pc = json_array());
            json_array_extend(pc, parts);
            json_decref(parts);
            return 0;
        }
        return json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "assistant", "content", parts));
    }
    if (type && !strcmp(type, "function_call") && json_is_string(json_object_get(item, "arguments")) &&
        json_is_string(json_object_get(item, "call_id")) && json_is_string(json_object_get(item, "name"))) {
        json_t *call = json_pack("{s:{s:O,s:O},s:O,s:s}", "function", "arguments", json_object_get(item, "arguments"),
                                 "name", json_object_get(item, "name"), "id", json_object_get(item, "call_id"), "type",
                                 "function");
        if (prev) {
            json_t *calls = json_object_get(prev, "tool_calls");
            if (!json_is_array(calls)) json_object_set_new(prev, "tool_calls", calls = json_array());
            return json_array_append_new(calls, call);
        }
        return json_array_append_new(msgs, json_pack("{s:s,s:s,s:[o]}", "role", "assistant", "content", "", "tool_calls",
                                                     call));
    }
    json_t *out = json_object_get(item, "output");
    if (type && !strcmp(type, "function_call_output") && json_is_string(json_object_get(item, "call_id")) &&
        (json_is_string(out) || json_is_array(out))) {
        json_t *c = json_is_string(out) ? json_incref(out) : json_array(), *p;
        size_t i;
        json_array_foreach(json_is_array(out) ? out : NULL, i, p) {
            const char *pt = json_string_value(json_object_get(p, "type"));
            if (!pt || strcmp(pt, "input_text")) return json_decref(c), fail(err, "Output of tool call should be 'Input text'");
            json_array_append_new(c, json_pack("{s:O?,s:s}", "text", json_object_get(p, "text"), "type", "text"));
        }
        return json_array_append_new(msgs, json_pack("{s:o,s:s,s:O}", "content", c, "role", "tool", "tool_call_id",
                                                     json_object_get(item, "call_id")));
    }
    if (type && !strcmp(type, "reasoning") && json_is_array(json_object_get(item, "summary"))) {
        json_t *text = json_object_get(json_array_get(content, 0), "text");
        if (!json_is_string(text)) return fail(err, "a reasoning item needs content[0].text");
        if (prev) return json_object_set(prev, "reasoning_content", text);
        return json_array_append_new(msgs, json_pack("{s:s,s:[],s:O}", "role", "assistant", "content",
                                                     "reasoning_content", text));
    }
    return fail(err, "Cannot determine type of 'item'");
}

json_t *srv_responses_to_chat(const json_t *body, skv_err *err)
{
    json_t *input = json_object_get(body, "input"), *item;
    size_t i;
    const char *prev_id = json_string_value(json_object_get(body, "previous_response_id"));
    if (!input) return skv_fail(err, SKV_ERR_INVALID_ARG, "'input' is required"), NULL;
    if (prev_id && *prev_id)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "seqkv serve does not support 'previous_response_id' (send the "
                        "whole conversation as input)"), NULL;
    if (!json_is_string(input) && !json_is_array(input))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "'input' must be a string or array of objects"), NULL;
    json_t *out = json_copy((json_t *)(uintptr_t)body), *msgs = json_array();
    if (!out || !msgs) return json_decref(out), json_decref(msgs), skv_fail(err, SKV_ERR_NOMEM, "out of memory"), NULL;
    json_object_del(out, "input");
    json_object_del(out, "instructions");
    json_t *ins = json_object_get(body, "instructions");
    if (ins) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content",
                                                   json_is_string(ins) ? json_string_value(ins) : ""));
    if (json_is_string(input)) json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
    int rc = 0;
    json_array_foreach(json_is_array(input) ? input : NULL, i, item) if (!rc) rc = add_item(msgs, item, err);
    json_object_set_new(out, "messages", msgs);
    json_t *tools = json_object_get(body, "tools"), *t;
    if (!rc && tools && !json_is_array(tools)) rc = fail(err, "'tools' must be an array of objects");
    if (!rc && tools) {
        json_t *ct = json_array();
        json_array_foreach(tools, i, t) {
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!ty || strcmp(ty, "function")) continue; /* no chat equivalent (llama-server drops them too) */
            json_t *f = json_copy(t);
            json_object_del(f, "type");
            json_array_append_new(ct, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
        json_object_del(out, "tools");
        if (json_array_size(ct)) json_object_set(out, "tools", ct);
        json_decref(ct);
    }
    json_t *mot = json_object_get(body, "max_output_tokens");
    if (mot) json_object_set(out, "max_tokens", mot), json_object_del(out, "max_output_tokens");
    json_t *effort = json_object_get(json_object_get(body, "reasoning"), "effort");
    if (effort) json_object_set(out, "reasoning_effort", effort);
    json_object_del(out, "reasoning");
    if (rc) json_decref(out), out = NULL;
    return out;
}
