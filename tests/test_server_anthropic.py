"""Anthropic's Messages API as llama-server serves it (issue 48; docs/server.md "Anthropic's
Messages API"): POST /v1/messages and /v1/messages/count_tokens on a real `seqkv serve`.

- rewrite: a request in Anthropic's shapes (system blocks, text / tool_use / tool_result /
  thinking content blocks, tools with input_schema) costs exactly the prompt tokens of the
  OpenAI chat request llama-server rewrites it into (count_tokens against
  /v1/chat/completions/input_tokens), and greedy replies are the same text.
- reply: a "message" with a text block, stop_reason max_tokens / end_turn, stop_sequence
  when a stop sequence ended it, usage (input, cached, output tokens), no timings; a request
  whose tool_choice is any gets a tool_use block (its input an object, stop_reason tool_use).
- stream: message_start (usage.input_tokens), content_block_start / text_delta deltas /
  content_block_stop on block 0 whose text is the non-streamed reply's, message_delta with
  the stop reason and output tokens, message_stop; with tools the tool_use block after it.
- errors: no messages is a 400, an image block llama-server's 500, count_tokens needs no
  max_tokens.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import Server, request  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")
TOOL = {"name": "get_weather", "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def post(s, path, body):
    code, _, raw = request(s, "POST", path, body)
    return code, json.loads(raw)


def events(raw):
    """[(event name, data)] of an SSE body."""
    out, name = [], None
    for line in raw.decode().split("\n"):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[6:])))
            name = None
    return out


def rewrite(s):
    anth = {"system": [{"type": "text", "text": "You tell stories."}, {"type": "text", "text": " Short ones."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Once"}, {"type": "text", "text": " upon"}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
                                                  {"type": "tool_use", "id": "c1", "name": "get_weather",
                                                   "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "text", "text": "Here:"},
                                             {"type": "tool_result", "tool_use_id": "c1",
                                              "content": [{"type": "text", "text": "sun"}, {"type": "text", "text": "ny"}]}]},
            ], "tools": [TOOL]}
    oai = {"messages": [
        {"role": "system", "content": "You tell stories. Short ones."},
        {"role": "user", "content": [{"type": "text", "text": "Once"}, {"type": "text", "text": " upon"}]},
        {"role": "assistant", "content": "", "reasoning_content": "hmm",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "user", "content": [{"type": "text", "text": "Here:"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                   "parameters": TOOL["input_schema"]}}]}
    code, a = post(s, "/v1/messages/count_tokens", anth)
    code2, o = post(s, "/v1/chat/completions/input_tokens", oai)
    check(code == 200 and code2 == 200 and a == {"input_tokens": o["input_tokens"]} and a["input_tokens"] > 20,
          "count_tokens %d %s vs OpenAI's %d %s" % (code, a, code2, o))
    code, without = post(s, "/v1/messages/count_tokens", {"messages": anth["messages"][:1]})
    check(code == 200 and without["input_tokens"] < a["input_tokens"], "no max_tokens needed: %d %s" % (code, without))
    msgs = [{"role": "user", "content": "Once upon a time"}]
    code, r = post(s, "/v1/messages", {"max_tokens": 12, "temperature": 0, "messages": msgs})
    code2, c = post(s, "/v1/chat/completions", {"max_tokens": 12, "temperature": 0, "messages": msgs})
    check(code == 200 and r["content"][0]["text"] == c["choices"][0]["message"]["content"],
          "same reply as the chat route: %s vs %s" % (r, c))


def reply(s):
    msgs = [{"role": "user", "content": "Once upon a time"}]
    code, r = post(s, "/v1/messages", {"model": "x", "max_tokens": 8, "temperature": 0, "messages": msgs})
    u = r.get("usage", {})
    check(code == 200 and r["type"] == "message" and r["role"] == "assistant" and r["id"].startswith("msg_") and
          r["content"][0]["type"] == "text" and r["stop_reason"] == "max_tokens" and r["stop_sequence"] is None and
          u["output_tokens"] == 8 and u["input_tokens"] + u["cache_read_input_tokens"] > 0 and "timings" not in r,
          "reply: %d %s" % (code, r))
    code, r2 = post(s, "/v1/messages", {"max_tokens": 8, "temperature": 0, "messages": msgs})
    check(r2["usage"]["cache_read_input_tokens"] > 0 and r2["content"] == r["content"], "cached: %s" % r2)
    word = r["content"][0]["text"].split()[1] if len(r["content"][0]["text"].split()) > 1 else "."
    code, r3 = post(s, "/v1/messages", {"max_tokens": 8, "temperature": 0, "messages": msgs, "stop_sequences": [word]})
    check(code == 200 and r3["stop_reason"] == "end_turn" and r3["stop_sequence"] == word, "stop sequence: %s" % r3)
    code, r4 = post(s, "/v1/messages", {"max_tokens": 400, "messages": [{"role": "user", "content": "Weather?"}],
                                        "tools": [TOOL], "tool_choice": {"type": "any"}})
    uses = [b for b in r4.get("content", []) if b["type"] == "tool_use"]
    check(code == 200 and uses and uses[0]["name"] == "get_weather" and isinstance(uses[0]["input"], dict) and
          r4["stop_reason"] == "tool_use", "tool use: %d %s" % (code, r4))


def stream(s):
    msgs = [{"role": "user", "content": "Once upon a time"}]
    code, r = post(s, "/v1/messages", {"max_tokens": 10, "temperature": 0, "messages": msgs})
    code, _, raw = request(s, "POST", "/v1/messages", {"max_tokens": 10, "temperature": 0, "messages": msgs,
                                                       "stream": True})
    ev = events(raw)
    names = [n for n, _ in ev]
    check(code == 200 and names[0] == "message_start" and names[1] == "content_block_start" and
          names[-3:] == ["content_block_stop", "message_delta", "message_stop"] and
          all(n == d["type"] for n, d in ev), "events: %s" % names)
    start = ev[0][1]["message"]
    text = "".join(d["delta"]["text"] for n, d in ev if n == "content_block_delta")
    md = [d for n, d in ev if n == "message_delta"][0]
    check(start["content"] == [] and start["usage"]["input_tokens"] > 0 and text == r["content"][0]["text"] and
          md["delta"]["stop_reason"] == "max_tokens" and md["usage"]["output_tokens"] == 10 and
          all(d["index"] == 0 for n, d in ev if n.startswith("content_block")), "stream: %s" % ev[:4])
    code, _, raw = request(s, "POST", "/v1/messages", {"max_tokens": 400, "stream": True, "tools": [TOOL],
                                                       "tool_choice": {"type": "any"},
                                                       "messages": [{"role": "user", "content": "Weather?"}]})
    ev = events(raw)
    tu = [d for n, d in ev if n == "content_block_start" and d["content_block"]["type"] == "tool_use"]
    js = "".join(d["delta"].get("partial_json", "") for n, d in ev if n == "content_block_delta")
    starts = [d["index"] for n, d in ev if n == "content_block_start"]
    stops = [d["index"] for n, d in ev if n == "content_block_stop"]
    md = [d for n, d in ev if n == "message_delta"]
    check(code == 200 and tu and tu[0]["content_block"]["name"] == "get_weather" and
          isinstance(json.loads(js), dict) and starts == list(range(len(starts))) and starts == stops and
          md and md[0]["delta"]["stop_reason"] == "tool_use", "tool stream: %s" % ev)


def errors(s):
    code, r = post(s, "/v1/messages", {"max_tokens": 5})
    check(code == 400 and "messages" in r["error"]["message"], "no messages: %d %s" % (code, r))
    code, r = post(s, "/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]})
    check(code == 500 and "image input is not supported" in r["error"]["message"], "image: %d %s" % (code, r))
    code, r = post(s, "/v1/messages", {"max_tokens": 5, "messages": []})
    check(code == 200 and r["type"] == "message", "empty messages (llama-server renders them): %d %s" % (code, r))


CASES = [rewrite, reply, stream, errors]


def run_with_server(name, cases, *args):
    """Each case fn(server) against its own `seqkv serve -m stories260K ARGS`."""
    rep = Reporter(name)
    if not os.path.isfile(MODEL):
        for c in cases:
            rep.report(c.__name__, testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0

    def with_server(fn):
        def run(tmp):
            s = Server("-m", MODEL, *args, log=os.path.join(tmp, "serve.log"))
            try:
                fn(s)
            finally:
                s.stop()
        run.__name__ = fn.__name__
        return run
    return testenv.run_cases(rep, [with_server(c) for c in cases], "skv-%s-" % name)


if __name__ == "__main__":
    sys.exit(run_with_server("test_server_anthropic", CASES, "-c", "1024"))
