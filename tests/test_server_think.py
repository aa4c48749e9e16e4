"""A chat reply's thoughts apart from its content, as llama-server's --reasoning-format does
(issue 48; docs/server.md "Thoughts"): a real `seqkv serve` with a chat template that knows
<think>, the bundled model held to a thought block by a grammar.

- split: the reply with reasoning_format none is the raw text; auto (the default; each of n
  choices too) puts the block's text in reasoning_content and the rest in content, exactly as
  the raw text splits;
  deepseek-legacy keeps the raw content beside reasoning_content; --reasoning-format none on
  the command line keeps it unsplit; a template without the markers never splits; a bad
  reasoning_format is a 400.
- opened: a template whose generation prompt opens the block (`<think>\\n`) starts the reply
  in it: unconstrained, all of it is reasoning; closed by the grammar, the rest is content.
- stream: the OpenAI chunks' reasoning_content deltas add up to the non-streamed reasoning
  and their content deltas to its content (several reasoning chunks: streamed as it grows;
  no chunk carries a marker); deepseek-legacy streams the raw text as content.
- anthropic: a thinking block (signature "") of the chat's reasoning; streamed, block 0 is
  the thinking (thinking_delta, signature_delta, stop); closed by a thinking budget, the text
  follows as block 1. (Anthropic's route passes no grammar, as llama-server's: the case runs
  where the prompt opens the block.)
- budget: --reasoning-budget 6 (or the request's reasoning_budget_tokens, or Anthropic's
  budget_tokens) closes the thought after exactly that many of the model's tokens (the
  unbudgeted reply's first tokens, by its logprobs), with reasoning_budget_message before the
  forced marker; 0 closes it at once; a bad budget is a 400.
- tools_stream: with tools (a Hermes-style template, tool_choice auto) the thoughts still
  stream as they grow, and the parsed content comes once at the end.
- responses: a reasoning item (reasoning_text) before the message; streamed,
  response.reasoning_text.delta events, the reasoning item done before the message item.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import Server, request  # noqa: E402
from test_server_anthropic import events  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")
THINK = """{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{%- if enable_thinking is defined and not enable_thinking %}
<think>

</think>
{%- endif %}
{% endif %}"""
OPENED = """{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}"""
TOOLS = """{%- if tools %}<|im_start|>system
Tools: {{ tools | tojson }} Call one as <tool_call>{"name": "NAME", "arguments": {}}</tool_call><|im_end|>
{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}"""
PLAIN = """{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
GRAMMAR = 'root ::= "<think>" [a-z ]{8,40} "</think>" " "? [a-z .]{3,40}'
MSGS = [{"role": "user", "content": "Tell me a story"}]
BODY = {"messages": MSGS, "grammar": GRAMMAR, "max_tokens": 90, "temperature": 0}


def post(s, path, body):
    code, _, raw = request(s, "POST", path, body)
    return code, (json.loads(raw) if code != 200 or not body.get("stream") else raw)


def chunks(raw):
    return [json.loads(line[6:]) for line in raw.decode().split("\n")
            if line.startswith("data: ") and line != "data: [DONE]"]


def expected(raw):
    """The split of a raw reply that opens with <think>: (reasoning, content)."""
    check(raw.startswith("<think>") and "</think>" in raw, "the grammar's reply: %r" % raw)
    body, rest = raw[len("<think>"):].split("</think>", 1)
    return body.strip(), rest.lstrip()


def message(s, **kw):
    code, r = post(s, "/v1/chat/completions", dict(BODY, **kw))
    check(code == 200, "%d %s" % (code, r))
    return r["choices"][0]["message"]


def split(s):
    raw = message(s, reasoning_format="none")
    check("reasoning_content" not in raw, "none: %s" % raw)
    want_r, want_c = expected(raw["content"])
    check(want_r and want_c, "a reply with both parts: %r" % raw["content"])
    m = message(s)
    check(m.get("reasoning_content") == want_r and m["content"] == want_c, "auto: %s, want %r / %r" % (m, want_r, want_c))
    m = message(s, reasoning_format="deepseek")
    check(m.get("reasoning_content") == want_r and m["content"] == want_c, "deepseek: %s" % m)
    m = message(s, reasoning_format="deepseek-legacy")
    check(m.get("reasoning_content") == want_r and m["content"] == raw["content"], "deepseek-legacy: %s" % m)
    code, r = post(s, "/v1/chat/completions", dict(BODY, n=2))
    check(code == 200 and len(r["choices"]) == 2 and
          all(c["message"].get("reasoning_content") == want_r and c["message"]["content"] == want_c for c in r["choices"]),
          "n = 2: %s" % r)
    code, r = post(s, "/v1/chat/completions", dict(BODY, reasoning_format="thoughts"))
    check(code == 400 and "reasoning_format" in r["error"]["message"], "bad format: %d %s" % (code, r))
    code, r = post(s, "/completion", {"prompt": "Once", "grammar": GRAMMAR, "n_predict": 60, "temperature": 0})
    check(code == 200 and r["content"].startswith("<think>"), "/completion never splits: %s" % r)
    # generation_settings and /props say the format, as llama-server's
    check(r["generation_settings"]["reasoning_format"] == "auto", "/completion: %s" % r["generation_settings"])
    for fmt in ("none", "deepseek-legacy"):
        code, r = post(s, "/v1/chat/completions", dict(BODY, reasoning_format=fmt, verbose=True))
        gs = r.get("__verbose", {}).get("generation_settings", {})
        check(gs.get("reasoning_format") == fmt and gs.get("reasoning_in_content") is False, "%s: %s" % (fmt, gs))
    code, r = s.json("/props")
    check(r["default_generation_settings"]["params"]["reasoning_format"] == "auto", "/props: %s" % r)


def stream(s):
    m = message(s)
    # logprobs: a chunk per token (else a fast model's text arrives in one or two chunks)
    code, raw = post(s, "/v1/chat/completions", dict(BODY, stream=True, logprobs=True))
    check(code == 200, "stream: %d" % code)
    deltas = [c["choices"][0]["delta"] for c in chunks(raw) if c.get("choices")]
    n_probs = sum(len((c["choices"][0].get("logprobs") or {}).get("content") or []) for c in chunks(raw) if c.get("choices"))
    check(n_probs > 20, "logprobs of the streamed tokens: %d" % n_probs)
    reason = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    n_reason = sum(1 for d in deltas if d.get("reasoning_content"))
    check(reason == m["reasoning_content"] and content == m["content"],
          "streamed %r / %r, replied %r / %r" % (reason, content, m["reasoning_content"], m["content"]))
    check(n_reason >= 3, "reasoning streamed as it grew: %d chunks" % n_reason)
    check(not any("think>" in (d.get("content") or "") + (d.get("reasoning_content") or "") for d in deltas),
          "a marker in a chunk: %s" % deltas)
    code, raw = post(s, "/v1/chat/completions", dict(BODY, stream=True, reasoning_format="deepseek-legacy"))
    deltas = [c["choices"][0]["delta"] for c in chunks(raw) if c.get("choices")]
    whole = message(s, reasoning_format="none")["content"]
    check("".join(d.get("content") or "" for d in deltas) == whole and
          not any("reasoning_content" in d for d in deltas), "legacy stream: %s" % deltas)


def anthropic(s):
    """(a template that opens the block: Anthropic's route passes no grammar, so the bundled
    model never closes it and the reply is all thought)"""
    m = message(s, grammar=None, max_tokens=30)
    body = {"messages": MSGS, "max_tokens": 30, "temperature": 0}
    code, r = post(s, "/v1/messages", body)
    check(code == 200 and r["content"] == [{"type": "thinking", "thinking": m["reasoning_content"], "signature": ""}],
          "blocks: %s, chat %s" % (r, m))
    code, raw = post(s, "/v1/messages", dict(body, stream=True))
    ev = events(raw)
    starts = [(d["index"], d["content_block"]["type"]) for n, d in ev if n == "content_block_start"]
    check(starts == [(0, "thinking")], "block starts: %s" % starts)
    thinking = "".join(d["delta"]["thinking"] for n, d in ev if n == "content_block_delta" and
                       d["delta"]["type"] == "thinking_delta")
    check(thinking == m["reasoning_content"], "streamed %r, replied %r" % (thinking, m["reasoning_content"]))
    order = [(n, d.get("index"), d.get("delta", {}).get("type")) for n, d in ev if n.startswith("content_block")]
    check(order[-2:] == [("content_block_delta", 0, "signature_delta"), ("content_block_stop", 0, None)],
          "the thinking block closes, signature first: %s" % order)
    # a thinking budget closes the thought: block 1 is the text
    body = dict(body, thinking={"type": "enabled", "budget_tokens": 4})
    code, r = post(s, "/v1/messages", body)
    check(code == 200 and [b["type"] for b in r["content"]] == ["thinking", "text"], "budgeted: %s" % r)
    ev = events(post(s, "/v1/messages", dict(body, stream=True))[1])
    starts = [(d["index"], d["content_block"]["type"]) for n, d in ev if n == "content_block_start"]
    thinking = "".join(d["delta"].get("thinking", "") for n, d in ev if n == "content_block_delta" and d["index"] == 0)
    text = "".join(d["delta"].get("text", "") for n, d in ev if n == "content_block_delta" and d["index"] == 1)
    order = [(n, d.get("index"), d.get("delta", {}).get("type")) for n, d in ev if n.startswith("content_block")]
    sig = order.index(("content_block_delta", 0, "signature_delta"))
    check(starts == [(0, "thinking"), (1, "text")] and thinking == r["content"][0]["thinking"] and
          text == r["content"][1]["text"] and order[sig + 1:sig + 3] == [("content_block_stop", 0, None),
                                                                         ("content_block_start", 1, None)] and
          order[-1] == ("content_block_stop", 1, None), "budgeted stream: %s, reply %s" % (order, r["content"]))


def responses(s):
    m = message(s)
    body = {"input": "Tell me a story", "grammar": GRAMMAR, "max_output_tokens": 90, "temperature": 0}
    code, r = post(s, "/v1/responses", body)
    check(code == 200 and [o["type"] for o in r["output"]] == ["reasoning", "message"], "items: %s" % r)
    check(r["output"][0]["content"][0] == {"type": "reasoning_text", "text": m["reasoning_content"]} and
          r["output"][1]["content"][0]["text"] == m["content"], "items %s, chat %s" % (r["output"], m))
    code, raw = post(s, "/v1/responses", dict(body, stream=True))
    ev = events(raw)
    reason = "".join(d["delta"] for n, d in ev if n == "response.reasoning_text.delta")
    text = "".join(d["delta"] for n, d in ev if n == "response.output_text.delta")
    check(reason == m["reasoning_content"] and text == m["content"], "streamed %r / %r" % (reason, text))
    items = [(n, d["item"]["type"]) for n, d in ev if n.startswith("response.output_item")]
    check(items == [("response.output_item.added", "reasoning"), ("response.output_item.done", "reasoning"),
                    ("response.output_item.added", "message"), ("response.output_item.done", "message")],
          "item order: %s" % items)
    done = [d for n, d in ev if n == "response.completed"][0]["response"]["output"]
    check([o["type"] for o in done] == ["reasoning", "message"] and
          done[0]["content"][0]["text"] == m["reasoning_content"], "completed: %s" % done)


def opened(s):
    m = message(s, grammar=None, max_tokens=30)
    check(m["content"] == "" and len(m.get("reasoning_content") or "") > 10, "an opened block, unclosed: %s" % m)
    m = message(s, grammar='root ::= [a-z ]{8,40} "</think>" " "? [a-z .]{3,40}')
    check(m.get("reasoning_content") and m["content"] and "think" not in m["content"] + m["reasoning_content"],
          "an opened block, closed: %s" % m)


def budget(s):
    """(a template that opens the block, --reasoning-budget 6)"""
    free = dict(grammar=None, max_tokens=40, logprobs=True)
    code, r = post(s, "/v1/chat/completions", dict(BODY, **dict(free, reasoning_format="none", reasoning_budget_tokens=9999)))
    check(code == 200, "%d %s" % (code, r))
    pieces = [t["token"] for t in r["choices"][0]["logprobs"]["content"]]
    check("</think>" not in "".join(pieces) and len(pieces) > 12, "an unbudgeted thought: %r" % pieces)
    for n, kw in ((6, {}), (6, {"reasoning_budget_tokens": -1}), (3, {"reasoning_budget_tokens": 3}),
                  (10, {"thinking_budget_tokens": 10})):
        m = message(s, **dict(free, **kw))
        check(m.get("reasoning_content") == "".join(pieces[:n]).strip() and m["content"],
              "budget %d (%s): %s, the model's tokens %r" % (n, kw, m, pieces[:n + 2]))
    code, r = post(s, "/v1/chat/completions", dict(BODY, **dict(free, reasoning_budget_tokens=3, n=2)))
    check(code == 200 and [c["message"].get("reasoning_content") for c in r["choices"]] == ["".join(pieces[:3]).strip()] * 2,
          "n = 2, budget 3: %s" % r)
    m = message(s, **dict(free, reasoning_budget_tokens=0))
    check("reasoning_content" not in m and m["content"], "budget 0 closes at once: %s" % m)
    m = message(s, **dict(free, reasoning_budget_tokens=3, reasoning_format="none"))
    check(m["content"].startswith("".join(pieces[:3])) and "</think>" in m["content"], "the forced marker: %s" % m)
    m = message(s, **dict(free, reasoning_budget_tokens=3, reasoning_budget_message=" Time is up."))
    # (tokenized as llama-server does: an SPM vocabulary's leading space is added to the message)
    check(m.get("reasoning_content", "").startswith("".join(pieces[:3]).strip()) and
          m["reasoning_content"].endswith(" Time is up.") and len(m["reasoning_content"]) <= len("".join(pieces[:3])) + 14,
          "the message: %s" % m)
    code, r = post(s, "/v1/messages", {"messages": MSGS, "max_tokens": 40, "temperature": 0,
                                       "thinking": {"type": "enabled", "budget_tokens": 4}})
    check(code == 200 and r["content"][0] == {"type": "thinking", "thinking": "".join(pieces[:4]).strip(),
                                              "signature": ""} and r["content"][1]["type"] == "text",
          "Anthropic's budget_tokens: %s" % r)
    for bad in ("x", -2, 1.5):
        code, r = post(s, "/v1/chat/completions", dict(BODY, reasoning_budget_tokens=bad))
        check(code == 400 and "reasoning_budget_tokens" in r["error"]["message"], "budget %r: %d %s" % (bad, code, r))


def tools_stream(s):
    """(a Hermes-style template that opens the block; tools with tool_choice auto leave the
    model free, a budget of 8 closes its thought)"""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    body = {"messages": MSGS, "tools": [tool], "tool_choice": "auto", "max_tokens": 40, "temperature": 0,
            "reasoning_budget_tokens": 8}
    m = message(s, **dict(body, grammar=None))
    check(m.get("reasoning_content") and m["content"], "tools and thoughts: %s" % m)
    code, raw = post(s, "/v1/chat/completions", dict(body, stream=True, logprobs=True))
    deltas = [c["choices"][0]["delta"] for c in chunks(raw) if c.get("choices")]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    reason = "".join(d.get("reasoning_content") or "" for d in deltas)
    check(code == 200 and reason == m["reasoning_content"] and kinds.count("content") == 1 and kinds[-1] == "content"
          and kinds.count("reasoning_content") >= 3 and [d["content"] for d in deltas if d.get("content")] == [m["content"]],
          "the thoughts stream as they grow, the parsed content comes last, once: %s" % deltas)


def unsplit(s):
    m = message(s)
    check("reasoning_content" not in m and m["content"].startswith("<think>"), "no split: %s" % m)


CASES = [(split, THINK, ()), (stream, THINK, ()), (anthropic, OPENED, ()), (responses, THINK, ()),
         (opened, OPENED, ()), (budget, OPENED, ("--reasoning-budget", "6")),
         (tools_stream, TOOLS, ()), (unsplit, THINK, ("--reasoning-format", "none")), (unsplit, PLAIN, ())]


def main():
    rep = Reporter("test_server_think")
    if not os.path.isfile(MODEL):
        for fn, _, _ in CASES:
            rep.report(fn.__name__, testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0

    def with_server(fn, tmpl, args):
        def run(tmp):
            path = os.path.join(tmp, "template.jinja")
            with open(path, "w") as f:
                f.write(tmpl)
            s = Server("-m", MODEL, "-c", "1024", "--chat-template-file", path, *args, log=os.path.join(tmp, "serve.log"))
            try:
                fn(s)
            finally:
                s.stop()
        run.__name__ = fn.__name__ + ("_plain_template" if tmpl == PLAIN else "_format_none" if fn == unsplit
                                      and args else "")
        return run
    return testenv.run_cases(rep, [with_server(*c) for c in CASES], "skv-think-")


if __name__ == "__main__":
    sys.exit(main())
