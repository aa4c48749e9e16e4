"""OpenAI tools in seqkv serve (issue 48): `tools`, `tool_choice`, `parallel_tool_calls` on
/v1/chat/completions, on the model llama.cpp's server tests use (stories260K, which has no
chat template: the built-in chatml, so the generic JSON format).

- generic_calls_are_valid: tool_choice "required" (and a named function, and parallel calls)
  gives tool_calls whose arguments are a JSON string that the tool's schema accepts (the
  grammar guarantees it even from a 260K-parameter model), content null, finish_reason
  "tool_calls", an id on each call; over several seeds and tools.
- none_gives_content: tool_choice "none" gives text content and no tool_calls, and the
  prompt carries no tool instructions; auto with the generic format gives either a call or
  a response, never raw JSON; an earlier call renders (chatml shows no tool_calls) as the
  generic JSON the model writes, and a `tool` message as its turn.
- streamed_deltas_reassemble: the streamed tool_calls deltas, joined as an OpenAI client
  joins them, are the same call (name, arguments) as the non-streamed reply of the same seed.
- native_template_sees_tools: a template that renders `tools` (Hermes-style, given with
  --chat-template-file) sees the tools, an assistant message's tool_calls (arguments as an
  object, as the template prints them with tojson) and a `tool` message's content and
  tool_call_id; with tool_choice "required" the reply is <tool_call>...</tool_call>, parsed
  back into tool_calls, also parallel ones; the generic instructions are not added. The
  same for a Llama 3-style template ({"name", "parameters"} replies, `ipython` results).
- invalid_tools_are_400s: a tool without a name, parameters that are not an object, an
  unknown type or tool_choice, tools with a grammar, tools on /completion, a malformed
  message tool_calls: 400 naming the field.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import Server, sse  # noqa: E402

try:
    import jsonschema
except ImportError:  # checked by hand below
    jsonschema = None

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")


def tool(name, params, desc=""):
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


TEST_TOOL = tool("test", {"type": "object", "properties": {"success": {"type": "boolean", "const": True}},
                          "required": ["success"]})
PYTHON_TOOL = tool("python", {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
                   "Runs code in an ipython interpreter.")
WEATHER_TOOL = tool("get_current_weather", {
    "type": "object", "properties": {"location": {"type": "string", "maxLength": 12},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["location", "days"]}, "Get the current weather in a given location")
TOOLS = {t["function"]["name"]: t for t in (TEST_TOOL, PYTHON_TOOL, WEATHER_TOOL)}

MESSAGES = [{"role": "system", "content": "You are a coding assistant."},
            {"role": "user", "content": "Write an example"}]

# A Hermes-style template: it describes the tools itself and renders calls and results.
HERMES = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}Functions: <tools>{% for t in tools %}{{ t.function | tojson }}{% endfor %}</tools>
Call one as <tool_call>{"name": NAME, "arguments": ARGS}</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role == 'system' and tools %}
{%- elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{% for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response id="{{ m.tool_call_id }}">{{ m.content }}</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


# A Llama 3.x-style template: tools in the user turn, calls as {"name", "parameters"}.
LLAMA3 = """{%- for m in messages %}<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>

{% if m.role == 'user' and tools %}Functions: {{ tools | tojson }}
{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "parameters": \
{{ c.function.arguments | tojson }}}{% endfor %}{% else %}{{ m.content }}{% endif %}<|eot_id|>
{%- endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""


def serve(tmp, *extra):
    return Server("-m", MODEL, "--seed", "42", "--temp", "0.8", "-c", "2048", *extra,
                  log=os.path.join(tmp, "serve.log"))


def valid(args, schema):
    """Whether args (a dict) is valid for schema."""
    if jsonschema is not None:
        try:
            jsonschema.validate(args, schema)
            return True
        except jsonschema.ValidationError:
            return False
    props = schema.get("properties", {})
    types = {"string": str, "boolean": bool, "integer": int, "object": dict}
    return all(k in args for k in schema.get("required", [])) and \
        all(isinstance(v, types.get(props.get(k, {}).get("type"), object)) for k, v in args.items())


def check_calls(msg, choice, names, what, finish="tool_calls"):
    """The calls of a reply: well-formed, of the given tools, arguments valid. -> the calls."""
    calls = msg.get("tool_calls")
    check(isinstance(calls, list) and len(calls) >= 1, "%s: tool_calls expected: %s" % (what, msg))
    check(msg.get("content") is None, "%s: content null beside calls: %s" % (what, msg))
    check(choice["finish_reason"] == finish, "%s: finish_reason: %s" % (what, choice["finish_reason"]))
    for c in calls:
        check(c["type"] == "function" and isinstance(c.get("id"), str) and len(c["id"]) > 5, "%s: %s" % (what, c))
        name, args = c["function"]["name"], c["function"]["arguments"]
        check(name in names, "%s: called %r, not one of %s" % (what, name, names))
        check(isinstance(args, str), "%s: arguments must be a JSON string: %r" % (what, args))
        parsed = json.loads(args)
        check(valid(parsed, TOOLS[name]["function"]["parameters"]), "%s: %s fails %s's schema" % (what, args, name))
    return calls


def generic_calls_are_valid(tmp):
    s = serve(tmp)
    try:
        for seed in (1, 2, 3):
            for t in (TEST_TOOL, PYTHON_TOOL, WEATHER_TOOL):
                body = {"messages": MESSAGES, "tools": [t], "tool_choice": "required", "max_tokens": 256,
                        "seed": seed}
                code, r = s.json("/v1/chat/completions", body)
                check(code == 200, "required: %d %s" % (code, r))
                ch = r["choices"][0]
                calls = check_calls(ch["message"], ch, [t["function"]["name"]], "seed %d" % seed)
                check(len(calls) == 1, "parallel_tool_calls absent: one call: %s" % calls)
        alone = [{"role": "user", "content": "Write an example"}]  # no system message: one is added
        body = {"messages": alone, "tools": [PYTHON_TOOL], "tool_choice": "required", "max_tokens": 256, "seed": 1}
        code, p = s.json("/apply-template", body)
        check(code == 200 and p["prompt"].startswith("<|im_start|>system\nYou may call the tools") and
              p["prompt"].count("<|im_start|>") == 3, "a system message with the tools: %s" % p)
        r = s.json("/v1/chat/completions", body)[1]
        check_calls(r["choices"][0]["message"], r["choices"][0], ["python"], "no system message")
        every = [TEST_TOOL, PYTHON_TOOL, WEATHER_TOOL]
        for seed in (4, 5):
            code, r = s.json("/v1/chat/completions", {"messages": MESSAGES, "tools": every, "max_tokens": 256,
                                                      "seed": seed, "tool_choice": {"type": "function", "function": {
                                                          "name": "get_current_weather"}}})
            ch = r["choices"][0]
            check_calls(ch["message"], ch, ["get_current_weather"], "named tool_choice")
            code, r = s.json("/v1/chat/completions", {"messages": MESSAGES, "tools": every, "max_tokens": 400,
                                                      "seed": seed, "tool_choice": "required",
                                                      "parallel_tool_calls": True})
            ch = r["choices"][0]
            check_calls(ch["message"], ch, list(TOOLS), "parallel")
    finally:
        s.stop()


def none_gives_content(tmp):
    s = serve(tmp)
    try:
        body = {"messages": MESSAGES, "tools": [PYTHON_TOOL], "tool_choice": "none", "max_tokens": 24, "seed": 3}
        code, r = s.json("/v1/chat/completions", body)
        msg = r["choices"][0]["message"]
        check(code == 200 and isinstance(msg.get("content"), str) and msg["content"], "none: %d %s" % (code, r))
        check(msg.get("tool_calls") is None and r["choices"][0]["finish_reason"] != "tool_calls", "none: %s" % msg)
        code, p = s.json("/apply-template", body)
        check(code == 200 and "python" not in p["prompt"], "none: no tool instructions: %s" % p)
        code, p = s.json("/apply-template", dict(body, tool_choice="auto"))
        check(code == 200 and '"python"' in p["prompt"] and "tool_call" in p["prompt"], "auto: instructions: %s" % p)
        history = MESSAGES + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "python", "arguments": "{\"code\": \"print(1)\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"}]
        code, p = s.json("/apply-template", dict(body, messages=history, tool_choice="auto"))
        check(code == 200 and '<|im_start|>assistant\n{"tool_call":{"name":"python","arguments":{"code":"print(1)"}}}'
              '<|im_end|>\n<|im_start|>tool\n1<|im_end|>' in p["prompt"],
              "chatml renders no tool_calls: the call as the generic format writes it, and the tool message: %s" % p)
        for seed in range(6, 12):
            code, r = s.json("/v1/chat/completions", dict(body, tool_choice="auto", seed=seed, max_tokens=256))
            ch = r["choices"][0]
            msg = ch["message"]
            if msg.get("tool_calls"):
                check_calls(msg, ch, ["python"], "auto seed %d" % seed)
            else:
                check(isinstance(msg.get("content"), str) and not msg["content"].lstrip().startswith('{"response"'),
                      "auto seed %d: a response is its text: %s" % (seed, msg))
    finally:
        s.stop()


def streamed_call(s, body):
    """The call an OpenAI client assembles from a stream's deltas, and the finish_reason."""
    code, text = s.curl("/v1/chat/completions", dict(body, stream=True))
    check(code == 200, "stream: %d %s" % (code, text[:300]))
    calls, finish, content = {}, None, ""
    for d in sse(text):
        if d == "[DONE]":
            continue
        for ch in json.loads(d)["choices"]:
            finish = ch.get("finish_reason") or finish
            content += ch["delta"].get("content") or ""
            for tc in ch["delta"].get("tool_calls", []):
                c = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                c["id"] += tc.get("id", "")
                c["name"] += tc.get("function", {}).get("name", "")
                c["arguments"] += tc.get("function", {}).get("arguments", "")
    return [calls[i] for i in sorted(calls)], finish, content


def streamed_deltas_reassemble(tmp):
    s = serve(tmp)
    try:
        for seed, t in ((7, WEATHER_TOOL), (8, PYTHON_TOOL)):
            body = {"messages": MESSAGES, "tools": [t], "tool_choice": "required", "max_tokens": 256, "seed": seed}
            r = s.json("/v1/chat/completions", body)[1]
            want = [(c["function"]["name"], c["function"]["arguments"]) for c in r["choices"][0]["message"]["tool_calls"]]
            calls, finish, content = streamed_call(s, body)
            check([(c["name"], c["arguments"]) for c in calls] == want, "stream %s != %s" % (calls, want))
            check(finish == "tool_calls" and content == "" and all(c["id"] for c in calls), "stream: %s %r" % (finish, content))
        body = {"messages": MESSAGES, "tools": [PYTHON_TOOL], "tool_choice": "none", "max_tokens": 16, "seed": 3}
        text = s.json("/v1/chat/completions", body)[1]["choices"][0]["message"]["content"]
        calls, finish, content = streamed_call(s, body)
        check(calls == [] and content == text, "stream, none: %r != %r" % (content, text))
    finally:
        s.stop()


def native_template_sees_tools(tmp):
    path = os.path.join(tmp, "hermes.jinja")
    with open(path, "w") as f:
        f.write(HERMES)
    s = serve(tmp, "--chat-template-file", path)
    try:
        history = MESSAGES + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_7", "type": "function", "function": {
                "name": "get_current_weather", "arguments": "{\"location\": \"Paris\", \"days\": 2}"}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 21C"}]
        body = {"messages": history, "tools": [WEATHER_TOOL], "max_tokens": 200, "seed": 5}
        code, p = s.json("/apply-template", body)
        prompt = p.get("prompt", "") if isinstance(p, dict) else ""
        check(code == 200, "apply-template: %d %s" % (code, p))
        check('"name": "get_current_weather"' in prompt and "You are a coding assistant." in prompt,
              "the template sees tools: %r" % prompt)
        check('"arguments": {"location": "Paris", "days": 2}' in prompt, "tool_calls, arguments an object: %r" % prompt)
        check('<tool_response id="call_7">sunny, 21C</tool_response>' in prompt, "the tool message: %r" % prompt)
        check("Reply with one JSON object" not in prompt, "no generic instructions on a native template")
        for seed in (5, 6):
            code, r = s.json("/v1/chat/completions", dict(body, tool_choice="required", seed=seed))
            ch = r["choices"][0]
            check_calls(ch["message"], ch, ["get_current_weather"], "hermes seed %d" % seed)
        calls, finish, _ = streamed_call(s, dict(body, tool_choice="required", seed=5))
        check(len(calls) == 1 and finish == "tool_calls", "hermes stream: %s" % calls)
        code, r = s.json("/v1/chat/completions", dict(body, tool_choice="auto", max_tokens=12))
        msg = r["choices"][0]["message"]
        check(code == 200 and msg.get("tool_calls") is None and isinstance(msg.get("content"), str),
              "auto on a native template: free text is content: %s" % r)
        code, r = s.json("/v1/chat/completions", dict(body, tools=[WEATHER_TOOL, PYTHON_TOOL], tool_choice="required",
                                                      parallel_tool_calls=True, max_tokens=400))
        ch = r["choices"][0]
        # stories260K never stops calling: the limit cuts the last call, the whole ones stand
        calls = check_calls(ch["message"], ch, ["get_current_weather", "python"], "hermes parallel", "length")
        check(len(calls) >= 2, "hermes parallel: several calls: %s" % calls)
    finally:
        s.stop()
    path = os.path.join(tmp, "llama3.jinja")
    with open(path, "w") as f:
        f.write(LLAMA3)
    s = serve(tmp, "--chat-template-file", path)
    try:
        code, p = s.json("/apply-template", body)
        check(code == 200 and '{"name": "get_current_weather", "parameters": {"location": "Paris", "days": 2}}'
              in p["prompt"] and "<|start_header_id|>ipython<|end_header_id|>\n\nsunny" in p["prompt"],
              "llama3: the call and the result: %s" % p)
        for seed in (5, 6):
            code, r = s.json("/v1/chat/completions", dict(body, tool_choice="required", seed=seed))
            ch = r["choices"][0]
            check_calls(ch["message"], ch, ["get_current_weather"], "llama3 seed %d" % seed)
    finally:
        s.stop()


def invalid_tools_are_400s(tmp):
    s = serve(tmp)
    try:
        good = {"messages": MESSAGES, "max_tokens": 2}
        bad = [({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name"),
               ({"tools": [TEST_TOOL, {"type": "function", "function": {"name": "f", "parameters": [1]}}]},
                "tools[1].function.parameters"),
               ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
               ({"tools": {"a": 1}}, "\"tools\""),
               ({"tools": [TEST_TOOL], "tool_choice": "sometimes"}, "tool_choice"),
               ({"tools": [TEST_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                "tool_choice"),
               ({"tools": [TEST_TOOL], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
               ({"tools": [TEST_TOOL], "grammar": 'root ::= "a"'}, "grammar"),
               ({"tools": [tool("f", {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}})],
                 "tool_choice": "required"}, "\"tools\" parameters: json schema: string format \"email\""),
               ({"tool_choice": "required"}, "tool_choice"),
               ({"messages": MESSAGES + [{"role": "assistant", "content": None, "tool_calls": {"x": 1}}]},
                "tool_calls"),
               ({"messages": MESSAGES + [{"role": "assistant", "content": None,
                                          "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]},
                "tool_calls[0]")]
        for extra, what in bad:
            code, r = s.json("/v1/chat/completions", dict(good, **extra))
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(code == 400 and what in msg, "%s: %d %s" % (extra, code, r))
        code, r = s.json("/completion", {"prompt": "hi", "n_predict": 2, "tools": [TEST_TOOL]})
        check(code == 400 and "tools" in r["error"]["message"], "tools on /completion: %d %s" % (code, r))
        code, r = s.json("/v1/chat/completions", dict(good, tools=[], tool_choice="auto"))
        check(code == 200 and r["choices"][0]["message"].get("tool_calls") is None, "empty tools: %d %s" % (code, r))
    finally:
        s.stop()


def main():
    rep = Reporter("test_server_tools")
    cases = [generic_calls_are_valid, none_gives_content, streamed_deltas_reassemble, native_template_sees_tools,
             invalid_tools_are_400s]
    if not os.path.isfile(MODEL):
        for c in cases:
            rep.report(c.__name__, testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0
    return testenv.run_cases(rep, cases, "skv-tools-")


if __name__ == "__main__":
    sys.exit(main())
