"""OpenAI's Responses API as llama-server serves it (issue 48; docs/server.md "OpenAI's
Responses API"): POST /v1/responses and /v1/responses/input_tokens on a real `seqkv serve`.

- rewrite: instructions, message items (string and input_text parts), assistant output
  items merged with the function_call after them, function_call_output items: exactly the
  prompt tokens of the chat request llama-server rewrites them into; a string input is a
  user message; greedy replies are the chat route's.
- reply: a "response" (resp_ id, a msg_ message item with its output_text, usage with cached
  tokens); with tools and tool_choice required, a function_call item.
- stream: response.created / in_progress, the message item and part added, output_text
  deltas whose text is the reply's, the .done events, response.completed with the output,
  usage and timings; return_progress and timings_per_token add prompt_progress to
  in_progress events and timings to the deltas.
- errors: no input, previous_response_id, an input_file part, an unknown item: 400s.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
from clitest import check  # noqa: E402
from harness import request  # noqa: E402
from test_server_anthropic import events, post, run_with_server  # noqa: E402

FN = {"type": "function", "name": "get_weather", "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def rewrite(s):
    resp = {"instructions": "You tell stories.", "tools": [FN, {"type": "web_search"}], "input": [
        {"role": "user", "content": "Once"},
        {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]}
    chat = {"tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                        "parameters": FN["parameters"]}}], "messages": [
        {"role": "system", "content": "You tell stories."},
        {"role": "user", "content": [{"type": "text", "text": "Once"}]},
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}],
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}
    code, a = post(s, "/v1/responses/input_tokens", resp)
    code2, b = post(s, "/v1/chat/completions/input_tokens", chat)
    check(code == 200 and code2 == 200 and a == b and a["input_tokens"] > 20, "input_tokens %s vs chat's %s" % (a, b))
    code, r = post(s, "/v1/responses", {"input": "Once upon a time", "max_output_tokens": 10, "temperature": 0})
    code2, c = post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Once upon a time"}],
                                                "max_tokens": 10, "temperature": 0})
    m = r["output"][0]
    check(code == 200 and r["object"] == "response" and r["id"].startswith("resp_") and r["status"] == "completed" and
          m["type"] == "message" and m["id"].startswith("msg_") and
          m["content"][0]["text"] == c["choices"][0]["message"]["content"] and r["usage"]["output_tokens"] == 10,
          "reply: %s vs %s" % (r, c))
    code, r = post(s, "/v1/responses", {"input": "Weather?", "max_output_tokens": 400, "tools": [FN],
                                        "tool_choice": "required"})
    calls = [o for o in r.get("output", []) if o["type"] == "function_call"]
    check(code == 200 and calls and calls[0]["name"] == "get_weather" and isinstance(json.loads(calls[0]["arguments"]),
                                                                                     dict), "function call: %s" % r)


def stream(s):
    body = {"input": "Once upon a time there was a girl who " * 3, "max_output_tokens": 10, "temperature": 0}
    code, r = post(s, "/v1/responses", dict(body, cache_prompt=False))
    code, _, raw = request(s, "POST", "/v1/responses", dict(body, stream=True, return_progress=True,
                                                            timings_per_token=True, cache_prompt=False))
    ev = events(raw)
    names = [n for n, _ in ev]
    text = "".join(d["delta"] for n, d in ev if n == "response.output_text.delta")
    done = [d for n, d in ev if n == "response.completed"]
    prog = [d for n, d in ev if n == "response.in_progress" and "prompt_progress" in d]
    check(code == 200 and names[:2] == ["response.created", "response.in_progress"] and
          "response.output_item.added" in names and "response.content_part.added" in names and
          names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                         "response.completed"] and all(n == d["type"] for n, d in ev), "events: %s" % names)
    check(text == r["output"][0]["content"][0]["text"] and done and
          done[0]["response"]["output"][0]["content"][0]["text"] == text and "timings" in done[0] and prog and
          all("timings" in d for n, d in ev if n == "response.output_text.delta"), "stream: %s" % ev[-1:])


def errors(s):
    for body, want in (({"max_output_tokens": 2}, "input"),
                       ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
                       ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input_file"),
                       ({"input": [{"type": "mystery"}]}, "item"), ({"input": 3}, "input")):
        code, r = post(s, "/v1/responses", body)
        check(code == 400 and want in r["error"]["message"], "%s: %d %s" % (body, code, r))


CASES = [rewrite, stream, errors]


if __name__ == "__main__":
    sys.exit(run_with_server("test_server_responses", CASES, "-c", "1024", "-b", "16"))
