"""seqkv serve as a drop-in for llama-server (issue 48): the defects a llama-server user hit,
each a case, on the model llama.cpp's own server tests use (stories260K, no chat template).

- llama_server_command_line_starts: llama-server's flags (--temp, --seed, -n, --jinja,
  --no-slots, -np, -ngl, -fa, --top-k, --min-p, --repeat-penalty, --api-key-file, --metrics)
  start the server; an unknown flag is still an error; -c is the total shared by the slots.
- chat_template_sources: --chat-template-file and a template's text given to
  --chat-template are used as templates; POST /apply-template shows the prompt.
- chatml_fallback: a model without a template renders chatml, as llama-server.
- unsupported_fields_refused: echo, post-sampling probabilities and image parts are
  400s naming the field (grammars: tests/test_server_grammar.py), never a
  silent 200; their neutral values pass; /infill on a model without FIM tokens is
  llama-server's 501; logit_bias works in llama-server's three forms and
  a malformed one is a 400; a batch of prompts gives a list of results, n > 1 n choices;
  response_fields and verbose shape the reply as llama-server's.
- cors_preflight: OPTIONS answers without a key, with llama-server's headers.
- context_errors: a prompt over the context is exceed_context_size_error with
  n_prompt_tokens and n_ctx; a generation stopped by a full context is "truncated".
- abandoned_request_frees_slot: a client that hangs up on a long non-streamed request
  frees its slot within a moment (the bundled model, slower than stories260K).
- token_probabilities: n_probs (llama-server) and logprobs + top_logprobs (OpenAI chat),
  streamed one token a chunk or not: log-probabilities <= 0 that sum (over the top ones)
  to at most 1, the chosen greedy token the most likely.
- seeded_sampling_is_llama_servers: a fixed seed gives the same text twice, and the default
  chain (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, std::mt19937) reproduces the
  sample llama.cpp's test_completion checks ("(going|bed)+").
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import SEQKV, Reporter, check  # noqa: E402
from harness import Server  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")


def serve(tmp, *args, name="serve.log"):
    return Server("-m", MODEL, *args, log=os.path.join(tmp, name))


def llama_server_command_line_starts(tmp):
    keys = os.path.join(tmp, "keys.txt")
    open(keys, "w").write("k1\nk2\n")
    s = serve(tmp, "--temp", "0.5", "--seed", "42", "-n", "16", "--jinja", "--no-slots", "-np", "2", "-c", "512",
              "-ngl", "99", "-fa", "on", "--top-k", "20", "--min-p", "0.1", "--repeat-penalty", "1.1",
              "--api-key-file", keys, "-t", "1", "--cont-batching")
    try:
        log = open(os.path.join(tmp, "serve.log")).read()
        check("do nothing here" in log, "no note about the GPU flags: " + log[-300:])
        check("2 slots x 256 positions" in log, "-c 512 -np 2 is not 256 a slot: " + log[-300:])
        code, props = s.json("/props", headers=["Authorization: Bearer k2"])
        p = props["default_generation_settings"]["params"]
        check(code == 200 and p["temperature"] == 0.5 and p["seed"] == 42 and p["top_k"] == 20 and p["n_predict"] == 16,
              "props: %s" % props)
        check(s.curl("/slots", headers=["Authorization: Bearer k1"])[0] == 501, "--no-slots: /slots answered")
        check(s.curl("/props", headers=["Authorization: Bearer k3"])[0] == 401, "a key not in the file was let in")
        code, r = s.json("/completion", {"prompt": "Once upon a time"}, headers=["Authorization: Bearer k1"])
        check(code == 200 and r["tokens_predicted"] == 16, "-n 16: %s" % r)
    finally:
        s.stop()
    p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--no-such-flag"], capture_output=True, timeout=30)
    check(p.returncode != 0 and b"unknown option" in p.stderr, "an unknown flag started: %r" % p.stderr[-200:])
    p = subprocess.run([SEQKV, "serve", "-m", MODEL, "-c", "8", "-np", "4", "--port", "0"], capture_output=True,
                       timeout=30)
    check(p.returncode != 0 and b"at least" in p.stderr, "-c 8 -np 4 started: %r" % p.stderr[-200:])


def chat_template_sources(tmp):
    f = os.path.join(tmp, "t.jinja")
    open(f, "w").write("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                       "{% if add_generation_prompt %}[assistant]{% endif %}")
    msgs = {"messages": [{"role": "user", "content": "hi"}]}
    for args, want in ((("--chat-template-file", f), "[user]hi[assistant]"),
                       (("--chat-template", "Q: {{ messages[0].content }} A:"), "Q: hi A:"),
                       (("--chat-template", "command-r"),
                        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>hi<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")):
        s = serve(tmp, *args)
        try:
            code, r = s.json("/apply-template", msgs)
            check(code == 200 and r["prompt"] == want, "%s: %d %s" % (args, code, r))
        finally:
            s.stop()


def chatml_fallback(tmp):
    s = serve(tmp)
    try:
        code, r = s.json("/apply-template", {"messages": [{"role": "system", "content": "Book"},
                                                          {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                                       {"type": "text", "text": "b"}]}]})
        check(code == 200 and r["prompt"] == "<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
              "<|im_start|>assistant\n", "fallback: %s" % r)
    finally:
        s.stop()


def unsupported_fields_refused(tmp):
    s = serve(tmp)
    try:
        refused = [("echo", True), ("post_sampling_probs", True)]
        for field, value in refused:
            code, r = s.json("/completion", {"prompt": "hi", "n_predict": 2, field: value})
            check(code == 400 and field in r["error"]["message"], "%s: %d %s" % (field, code, r))
        neutral = {"n": 1, "logprobs": False, "grammar": "", "response_format": {"type": "text"}}
        # several completions: a batch of prompts (a list of results), OpenAI's n (n choices)
        ids = s.json("/tokenize", {"content": "Once upon", "add_special": True})[1]["tokens"]
        code, r = s.json("/completion", {"prompt": [ids, "Once upon", {"prompt_string": "Once upon"}],
                                         "n_predict": 4, "temperature": 0})
        check(code == 200 and isinstance(r, list) and len(r) == 3 and r[0]["content"] == r[1]["content"] ==
              r[2]["content"], "batch: %s" % r)
        code, r = s.json("/completion", {"prompt": ids + ["a time"], "n_predict": 2, "temperature": 0})
        check(code == 200 and isinstance(r, dict), "ids and text mixed: %s" % r)
        code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                  "n": 3})
        check(code == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2], "n 3: %s" % r)
        code, r = s.json("/completion", {"prompt": "Once upon", "n_predict": 3, "verbose": True,
                                         "response_fields": ["content", "generation_settings/n_predict", "prompt"]})
        check(code == 200 and sorted(r) == ["content", "generation_settings/n_predict", "prompt"] and
              r["generation_settings/n_predict"] == 3 and r["prompt"] == "<s> Once upon", "response_fields: %s" % r)
        code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                  "verbose": True})
        check(code == 200 and "<|im_start|>user" in r.get("__verbose", {}).get("prompt", ""), "verbose: %s" % r)
        for bad in ({"n": 0}, {"n": 17}, {"n": 2, "stream": True}, {"response_fields": ["content"]}):
            code, r = s.json("/v1/chat/completions", dict(bad, messages=[{"role": "user", "content": "hi"}]))
            check(code == 400, "%s: %d %s" % (bad, code, r))
        code, r = s.json("/v1/chat/completions", dict(neutral, messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=2))
        check(code == 200, "neutral values refused: %s" % r)
        code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}]})
        check(code == 400 and "image_url" in r["error"]["message"], "image part: %d %s" % (code, r))
        code, r = s.json("/infill", {"input_prefix": "a", "input_suffix": "b"})
        check(code == 501 and "Infill is not supported by this model: prefix token is missing" in r["error"]["message"],
              "infill without FIM tokens: %d %s" % (code, r))
        for bad in ({"1": "x"}, [[1]], [["a", -1, 2]], 7, [[10 ** 6, -1]]):
            code, r = s.json("/completion", {"prompt": "hi", "n_predict": 2, "logit_bias": bad})
            check(code == 400 and "logit_bias" in r["error"]["message"], "logit_bias %s: %d %s" % (bad, code, r))
        # logit_bias in its three forms: the banned token never appears in a greedy run
        body = {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0}
        plain = s.json("/completion", dict(body, return_tokens=True))[1]
        first = plain["tokens"][0]
        for lb in ([[first, False]], {str(first): -100}, [[plain["content"][:3], -100]]):
            code, r = s.json("/completion", dict(body, return_tokens=True, logit_bias=lb))
            check(code == 200 and first not in r["tokens"], "logit_bias %s: %s" % (lb, r.get("tokens")))
    finally:
        s.stop()


def cors_preflight(tmp):
    s = serve(tmp, "--api-key", "k")
    try:
        p = subprocess.run(["curl", "-s", "-i", "-X", "OPTIONS", "-H", "Origin: http://example.com",
                            s.url + "/v1/chat/completions"], capture_output=True, timeout=30)
        head = p.stdout.decode()
        check(head.startswith("HTTP/1.1 200") and "Access-Control-Allow-Origin: http://example.com" in head and
              "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS" in head, "preflight: " + head[:400])
    finally:
        s.stop()


def context_errors(tmp):
    s = serve(tmp, "-c", "64")
    try:
        code, r = s.json("/completion", {"prompt": "Once upon a time " * 40})
        e = r.get("error", {})
        check(code == 400 and e.get("type") == "exceed_context_size_error" and e.get("n_prompt_tokens", 0) > 64 and
              e.get("n_ctx") == 64, "over the context: %d %s" % (code, r))
        code, r = s.json("/completion", {"prompt": "Once upon a time", "n_predict": -1, "temperature": 0})
        check(code == 200 and r["truncated"] is True and r["stop_type"] == "limit", "full context: %s" % r)
    finally:
        s.stop()


def abandoned_request_frees_slot(tmp):
    import socket
    import time
    s = Server("-c", "4096", log=os.path.join(tmp, "abandon.log"))
    try:
        body = json.dumps({"prompt": "In the beginning", "n_predict": 4000, "temperature": 0}).encode()
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.3)
        c.close()
        time.sleep(1.0)
        code, slots = s.json("/slots")
        check(code == 200 and not slots[0]["is_processing"] and slots[0]["n_past"] < 4000,
              "the slot still works for a client that left: %s" % slots)
    finally:
        s.stop()


def token_probabilities(tmp):
    import math
    from harness import sse
    s = serve(tmp)
    try:
        body = {"prompt": "Once upon a time", "n_predict": 6, "temperature": 0, "n_probs": 5}
        code, r = s.json("/completion", body)
        cp = r.get("completion_probabilities", [])
        check(code == 200 and len(cp) == 6, "n_probs: %d %s" % (code, r))
        for t in cp:
            top = t["top_logprobs"]
            check(len(top) == 5 and t["logprob"] <= 0 and top[0]["id"] == t["id"] and
                  sum(math.exp(x["logprob"]) for x in top) <= 1.0 + 1e-6 and
                  all(top[i]["logprob"] >= top[i + 1]["logprob"] for i in range(4)), "greedy token probs: %s" % t)
        code, text = s.curl("/completion", dict(body, stream=True))
        chunks = [json.loads(d) for d in sse(text)]
        body_chunks = [c for c in chunks if not c["stop"]]
        check(len(body_chunks) == 6 and all(len(c["completion_probabilities"]) == 1 for c in body_chunks) and
              [c["completion_probabilities"][0]["id"] for c in body_chunks] == [t["id"] for t in cp],
              "streamed: %s" % chunks[:2])
        code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                                  "logprobs": True, "top_logprobs": 2, "temperature": 0})
        check(isinstance(r, dict), "chat logprobs: %d %r" % (code, r))
        content = r["choices"][0].get("logprobs", {}).get("content", [])
        check(code == 200 and len(content) == 3 and all(len(c["top_logprobs"]) == 2 for c in content),
              "chat logprobs: %s" % r)
        code, r = s.json("/completion", dict(body, n_probs=1000))
        check(code == 400 and "n_probs" in r["error"]["message"], "n_probs 1000: %d %s" % (code, r))
    finally:
        s.stop()


def seeded_sampling_is_llama_servers(tmp):
    s = serve(tmp, "--seed", "42", "-np", "2", "-c", "512")
    try:
        body = {"prompt": "I believe the meaning of life is", "n_predict": 8}
        a, b = s.json("/completion", body)[1], s.json("/completion", body)[1]
        check(a["content"] == b["content"], "seed 42 twice: %r %r" % (a["content"], b["content"]))
        check(re.search("(going|bed)+", a["content"]) is not None, "llama.cpp's sample: %r" % a["content"])
    finally:
        s.stop()


def main():
    rep = Reporter("test_server_dropin")
    cases = [llama_server_command_line_starts, chat_template_sources, chatml_fallback, unsupported_fields_refused,
             cors_preflight, context_errors, abandoned_request_frees_slot, token_probabilities,
             seeded_sampling_is_llama_servers]
    if not os.path.isfile(MODEL):
        for c in cases:
            rep.report(c.__name__, testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0
    return testenv.run_cases(rep, cases, "skv-dropin-")


if __name__ == "__main__":
    sys.exit(main())
