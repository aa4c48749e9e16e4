"""seqkv serve as a drop-in for llama-server (issue 48): the defects a llama-server user hit,
each a case, on the model llama.cpp's own server tests use (stories260K, no chat template).

- llama_server_command_line_starts: llama-server's flags (--temp, --seed, -n, --jinja,
  --no-slots, -np, -ngl, -fa, --top-k, --min-p, --repeat-penalty, --api-key-file, --metrics)
  start the server; an unknown flag is still an error; -c is the total shared by the slots.
- chat_template_sources: --chat-template-file and a template's text given to
  --chat-template are used as templates; POST /apply-template shows the prompt.
- template_variables: llama-server's template globals (date_string, datetime,
  enable_thinking) and chat_template_kwargs / --chat-template-kwargs / --reasoning /
  reasoning_effort; a thought block the prompt opens is closed when thinking is off.
- vertex_ai_predict: with AIP_MODE=PREDICTION, POST /predict runs instances through their
  routes (path or camelCase alias, not streamed), errors per instance, AIP_HEALTH_ROUTE,
  AIP_HTTP_PORT, a predict route that shadows one refused.
- sleep_when_idle: --sleep-idle-seconds frees the slots when idle (is_sleeping), GET routes
  answer without waking it, a POST wakes it with the same reply, the store's conversation
  survives the sleep.
- chatml_fallback: a model without a template renders chatml, as llama-server.
- unsupported_fields_refused: echo and post-sampling probabilities are 400s naming the
  field, image parts llama-server's 500 ("image input is not supported") (grammars: tests/test_server_grammar.py), never a
  silent 200; their neutral values pass; /infill on a model without FIM tokens is
  llama-server's 501; logit_bias works in llama-server's three forms and
  a malformed one is a 400; a batch of prompts gives a list of results, n > 1 n choices;
  response_fields and verbose shape the reply as llama-server's.
- cors_preflight: OPTIONS answers without a key, with llama-server's headers.
- cors_origins: --cors-origins localhost reflects only localhost origins, a list only its
  members; --no-cors-credentials says so in the preflight and answers "*".
- assistant_prefill: a final assistant message is continued (its text after the generation
  prompt), continue_final_message the same; two final assistant turns and
  add_generation_prompt with continue_final_message are 400s.
- prompt_progress_and_timings: return_progress streams prompt_progress events every -b
  tokens (total, cache, processed rising to total), the reply the same as without;
  timings_per_token puts timings in every chunk (the progress events' too); timings carry
  llama-server's per-token times and rates (over n - 1 decode steps);
  generation_settings.logit_bias lists the biases and ignore_eos's end token.
- embeddings: --embedding with --pooling none, mean and last: rows per token, the pooled
  vectors computed from those rows, unit norm, base64 the same floats, same input same
  vector; 501 without --embedding, 400 for pooling none on /v1/embeddings, /rerank 501.
- history_is_a_cache_hit: with every built-in chat template, a conversation's next turn
  reuses its whole history, the reply included (the slot re-renders the reply as the
  template does, also where it adds or trims a space), from the slot and, after a
  restart, from the store.
- infill_layout: on a model with FIM tokens (a small random one written here), /infill's
  prompt is llama-server's: repository context (FIM_REP, FIM_SEP file chunks), BOS,
  FIM_PRE prefix prompt, FIM_SUF suffix, FIM_MID; malformed input_extra chunks are 400s,
  also on a model without FIM tokens.
- web_ui_and_token_count: "/" serves a page (and the web app's files) without a key,
  --no-ui makes it 404; /chat/completions/input_tokens counts a chat's prompt tokens.
- context_errors: a prompt over the context is exceed_context_size_error with
  n_prompt_tokens and n_ctx; a generation stopped by a full context is "truncated".
- abandoned_request_frees_slot: a client that hangs up on a long non-streamed request
  frees its slot within a moment (the bundled model, slower than stories260K).
- token_probabilities: n_probs (llama-server) and logprobs + top_logprobs (OpenAI chat),
  and post_sampling_probs (the chain's survivors as probabilities summing to 1),
  streamed one token a chunk or not: log-probabilities <= 0 that sum (over the top ones)
  to at most 1, the chosen greedy token the most likely.
- streamed_several: n > 1 and batches of prompts streamed (chat, /completion,
  /v1/completions): each choice's events carry its index, one id, one usage chunk summing
  the choices, one [DONE]; each choice's streamed text is the non-streamed one's; a client
  that leaves mid-stream frees all its slots.
- model_overrides: --override-kv (a tokenizer flag off: no BOS) and the --rope-* flags
  (none / linear on an unscaled model: the same top token probabilities; a base, a scale
  or the key's override: others); yarn, a bad value, a malformed item and two scales are
  refused at start with a message.
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
              "--api-key-file", keys, "-t", "1", "--cont-batching", "--no-context-shift", "-tb", "2", "--threads-http", "4",
              "--cache-ram", "100", "-sps", "0.5", "--log-colors", "off", "--reasoning-format", "none",
              "--reasoning-budget", "-1", "--log-timestamps", "--prio", "2", "--swa-full")
    try:
        log = open(os.path.join(tmp, "serve.log")).read()
        check("do nothing here" in log, "no note about the GPU flags: " + log[-300:])
        check("scheduling, cache and log-style knobs" in log, "no note about the tuning flags: " + log[-300:])
        import re
        check(re.search(r"^20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z seqkv serve: listening", log, re.M),
              "--log-timestamps: " + log[-300:])
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
    # --api-prefix puts every route under it; --keep is the requests' default n_keep
    s = serve(tmp, "--api-prefix", "/v2", "--keep", "5", name="prefix.log")
    try:
        code, r = s.json("/v2/completion", {"prompt": "Once upon a time", "n_predict": 2})
        code2, r2 = s.json("/v2/completion", {"prompt": "Once upon a time", "n_predict": 2, "n_keep": 2})
        check(code == 200 and r["generation_settings"]["n_keep"] == 5 and r2["generation_settings"]["n_keep"] == 2,
              "--keep: %s %s" % (r.get("generation_settings"), r2.get("generation_settings")))
        check(s.curl("/v2/health")[0] == 200 and s.curl("/health")[0] == 404 and s.curl("/v2x/health")[0] == 404,
              "--api-prefix routes")
    finally:
        s.stop()
    for flags in (["--reasoning-format", "thoughts"], ["--reasoning-budget", "-2"], ["--api-prefix", "v2/"]):
        p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0"] + flags, capture_output=True, timeout=30)
        check(p.returncode != 0 and flags[0].encode() in p.stderr, "%s started: %r" % (flags, p.stderr[-200:]))
    # --log-file takes the log; --log-disable silences it once the address is told
    import signal
    import time
    lf = os.path.join(tmp, "own.log")
    p = subprocess.Popen([SEQKV, "serve", "-m", MODEL, "--port", "0", "--log-file", lf, "--log-disable"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.time()
    while time.time() - t0 < 30 and not (os.path.exists(lf) and "listening on" in open(lf).read()):
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    own = open(lf).read()
    check(p.returncode == 0 and "listening on" in own and "shutting down" not in own and not err,
          "--log-file / --log-disable: %d %r %r" % (p.returncode, own[-300:], err[-200:]))
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


def template_variables(tmp):
    """llama-server's template globals: date_string / datetime of today, enable_thinking from
    --reasoning and the request, --chat-template-kwargs and chat_template_kwargs, a thought
    block the prompt opens closed when thinking is off, {% filter %} blocks."""
    import datetime
    f = os.path.join(tmp, "think.jinja")
    open(f, "w").write("{% filter trim %} {{ date_string }}|{{ datetime }}|{{ enable_thinking }}|{{ effort }}|"
                       "{{ reasoning_effort | default('-') }} {% endfilter %}"
                       "{% if add_generation_prompt %}<think>\n{% endif %}")
    today = datetime.date.today()
    base = "%s|%s|" % (today.strftime("%d %b %Y"), today.strftime("%b %d %Y"))
    msgs = [{"role": "user", "content": "hi"}]
    s = serve(tmp, "--chat-template-file", f, "--chat-template-kwargs", '{"effort": "low"}')
    try:
        for extra, want in (({}, base + "True|low|-<think>\n"),
                            ({"chat_template_kwargs": {"enable_thinking": False}}, base + "False|low|-<think>\n</think>"),
                            ({"chat_template_kwargs": {"effort": "high"}}, base + "True|high|-<think>\n"),
                            ({"reasoning_effort": "none"}, base + "False|low|-<think>\n</think>"),
                            ({"reasoning_effort": "medium"}, base + "True|low|medium<think>\n"),
                            ({"add_generation_prompt": False, "chat_template_kwargs": {"enable_thinking": False}},
                             base + "False|low|-")):
            code, r = s.json("/apply-template", dict({"messages": msgs}, **extra))
            check(code == 200 and r["prompt"] == want, "%s: %d %s" % (extra, code, r))
        for bad in ({"chat_template_kwargs": [1]}, {"chat_template_kwargs": {"enable_thinking": "false"}},
                    {"reasoning_effort": 3}):
            code, r = s.json("/apply-template", dict({"messages": msgs}, **bad))
            check(code == 400, "%s: %d %s" % (bad, code, r))
    finally:
        s.stop()
    s = serve(tmp, "--chat-template-file", f, "--reasoning", "off")
    try:
        code, r = s.json("/apply-template", {"messages": msgs})
        check(code == 200 and r["prompt"] == base + "False||-<think>\n</think>", "--reasoning off: %s" % r)
        code, r = s.json("/apply-template", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": True}})
        check(code == 200 and r["prompt"] == base + "True||-<think>\n", "a request turning it back on: %s" % r)
    finally:
        s.stop()
    p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0", "--chat-template-kwargs", "[1]"],
                       capture_output=True, timeout=30)
    check(p.returncode != 0 and b"--chat-template-kwargs" in p.stderr, "kwargs not an object: %r" % p.stderr[-200:])


def vertex_ai_predict(tmp):
    """Vertex AI's contract (AIP_MODE=PREDICTION): POST /predict runs each instance's route
    (@requestFormat: a path or its camelCase alias), never streamed; AIP_HEALTH_ROUTE aliases
    /health; AIP_HTTP_PORT sets the port; a predict route that shadows a route is refused."""
    env = {"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "alive", "AIP_HTTP_PORT": "0"}
    s = Server("-m", MODEL, env=env, log=os.path.join(tmp, "gcp.log"))
    try:
        msgs = [{"role": "user", "content": "Once upon a time"}]
        code, r = s.json("/predict", {"instances": [
            {"@requestFormat": "chatCompletions", "max_tokens": 4, "temperature": 0, "messages": msgs, "stream": True},
            {"@requestFormat": "/completion", "prompt": "Once", "n_predict": 3},
            {"@requestFormat": "applyTemplate", "messages": msgs},
            {"max_tokens": 1}, {"@requestFormat": "noSuchRoute"}, 7,
            {"@requestFormat": "/tokenize", "content": [1, 2]}]})
        p = r.get("predictions", [])
        code2, direct = s.json("/v1/chat/completions", {"max_tokens": 4, "temperature": 0, "messages": msgs})
        check(code == 200 and len(p) == 7 and p[0]["object"] == "chat.completion" and
              p[0]["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"] and
              p[1]["tokens_predicted"] == 3 and "prompt" in p[2] and "@requestFormat" in p[3]["error"]["message"] and
              "noSuchRoute" in p[4]["error"]["message"] and "JSON object" in p[5]["error"]["message"] and
              "error" in p[6], "predictions: %d %s" % (code, json.dumps(r)[:600]))
        code, r = s.json("/predict", {"instances": [{}] * 129})
        check(code == 400 and "128" in r["error"]["message"], "129 instances: %d %s" % (code, r))
        code, r = s.json("/predict", {"nothing": 1})
        check(code == 400 and "instances" in r["error"]["message"], "no instances: %d %s" % (code, r))
        check(s.curl("/alive")[0] == 200, "AIP_HEALTH_ROUTE is not /health's alias")
    finally:
        s.stop()
    s = serve(tmp, name="plain.log")
    try:
        check(s.curl("/predict", {"instances": []})[0] == 404, "/predict without AIP_MODE")
    finally:
        s.stop()
    for extra, want in (({"AIP_PREDICT_ROUTE": "/completion"}, b"conflicts"), ({"AIP_HTTP_PORT": "http"}, b"AIP_HTTP_PORT")):
        p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0"], capture_output=True, timeout=30,
                           env=dict(os.environ, AIP_MODE="PREDICTION", **extra))
        check(p.returncode != 0 and want in p.stderr, "%s: %r" % (extra, p.stderr[-200:]))


def sleep_when_idle(tmp):
    """--sleep-idle-seconds: idle, the server frees its slots (is_sleeping); GET routes answer
    without waking it; a POST wakes it and replies as before; with a store the conversation
    is still a cache hit after the sleep."""
    import time
    s = serve(tmp, "--sleep-idle-seconds", "1", "--metrics", "--store", os.path.join(tmp, "store"), name="sleep.log")
    try:
        body = {"prompt": "Once upon a time there was a girl", "n_predict": 8, "temperature": 0}
        code, before = s.json("/completion", body)
        check(code == 200 and s.json("/props")[1]["is_sleeping"] is False, "awake: %s" % before)
        t0 = time.time()
        while time.time() - t0 < 10 and not s.json("/props")[1]["is_sleeping"]:
            time.sleep(0.1)
        check(s.json("/props")[1]["is_sleeping"] is True and time.time() - t0 >= 0.5, "did not sleep")
        s.curl("/metrics")  # the first scrape takes the rate windows
        m1 = s.curl("/metrics")[1]
        check(s.curl("/health")[0] == 200 and s.json("/slots")[1] == [] and s.curl("/metrics")[1] == m1 and
              s.json("/props")[1]["is_sleeping"], "GET routes woke it or failed")
        code, after = s.json("/completion", body)
        check(code == 200 and after["content"] == before["content"] and not s.json("/props")[1]["is_sleeping"],
              "woken: %s vs %s" % (after, before))
        check(after["timings"]["cache_n"] > 0, "the store's conversation lost in the sleep: %s" % after["timings"])
        log = open(os.path.join(tmp, "sleep.log")).read()
        check("sleeping" in log and "woken up" in log, "no log lines: " + log[-400:])
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
        refused = [("echo", True), ("samplers", ["top_k", "infill"]), ("samplers", ["top_k", "nosuch"]),
                   ("samplers", "kz"), ("typical_p", -1), ("mirostat", 2)]
        for field, value in refused:
            code, r = s.json("/completion", {"prompt": "hi", "n_predict": 2, field: value})
            check(code == 400 and field in r["error"]["message"], "%s: %d %s" % (field, code, r))
        sampler_chain_fields(s)
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
        for bad in ({"n": 0}, {"n": 17}, {"response_fields": ["content"]}):
            code, r = s.json("/v1/chat/completions", dict(bad, messages=[{"role": "user", "content": "hi"}]))
            check(code == 400, "%s: %d %s" % (bad, code, r))
        code, r = s.json("/v1/chat/completions", dict(neutral, messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=2))
        check(code == 200, "neutral values refused: %s" % r)
        code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}]})
        # llama-server's answer on a model without a multimodal projector: 500, "image input is not supported"
        check(code == 500 and "image input is not supported" in r["error"]["message"], "image part: %d %s" % (code, r))
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


def sampler_chain_fields(s):
    """typical_p, min_keep, samplers (names, aliases, characters), ignore_eos and
    t_max_predict_ms are taken and echoed in generation_settings; the order changes the
    sample; ignore_eos runs to n_predict."""
    base = {"prompt": "Once upon a time", "n_predict": 24, "seed": 42, "temperature": 1.5, "top_k": 0, "top_p": 1,
            "min_p": 0}
    code, r = s.json("/completion", dict(base, typical_p=0.3, min_keep=2, samplers=["Top-K", "typ", "nucleus", "temp"],
                                         t_max_predict_ms=60000, ignore_eos=True))
    g = r.get("generation_settings", {}) if code == 200 else {}
    check(code == 200 and g.get("typical_p") == 0.3 and g.get("min_keep") == 2 and g.get("ignore_eos") is True and
          g.get("t_max_predict_ms") == 60000 and g.get("samplers") == ["top_k", "typ_p", "top_p", "temperature"],
          "chain fields: %d %s" % (code, g))
    plain = s.json("/completion", base)[1]["content"]
    typical = s.json("/completion", dict(base, typical_p=0.2))[1]["content"]
    chars = s.json("/completion", dict(base, typical_p=0.2, samplers="kypmt"))[1]["content"]
    names = s.json("/completion", dict(base, typical_p=0.2, samplers=["top_k", "typ_p", "top_p", "min_p", "temperature"]))[1]
    check(typical != plain and chars == typical == names["content"],
          "typical_p 0.2 (%r) vs off (%r); as characters %r" % (typical, plain, chars))
    # the temperature before typical-p: a softer distribution when typical-p chooses
    early = s.json("/completion", dict(base, typical_p=0.2, samplers="tkypm"))[1]["content"]
    check(early != typical, "temperature first gave the same text: %r" % early)
    code, r = s.json("/completion", {"prompt": "Once upon a time", "n_predict": 300, "temperature": 0,
                                     "ignore_eos": True})
    check(code == 200 and r["tokens_predicted"] == 300 and r["stop_type"] == "limit",
          "ignore_eos: %s" % {k: r.get(k) for k in ("tokens_predicted", "stop_type")})
    code, r = s.json("/completion", {"prompt": "Once upon a time", "n_predict": 300, "temperature": 0,
                                     "ignore_eos": True, "t_max_predict_ms": 1})
    check(code == 200 and r["tokens_predicted"] < 300 and r["content"].endswith("\n") and r["stop_type"] == "limit",
          "t_max_predict_ms 1: %s" % {k: r.get(k) for k in ("tokens_predicted", "stop_type", "content")})


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


def cors_origins(tmp):
    def origin(s, o):
        p = subprocess.run(["curl", "-s", "-i", "-X", "OPTIONS", "-H", "Origin: " + o, s.url + "/completion"],
                           capture_output=True, timeout=30)
        head = p.stdout.decode()
        check(head.startswith("HTTP/1.1 200"), "preflight: " + head[:200])
        m = re.search(r"Access-Control-Allow-Origin: (\S+)", head)
        return (m.group(1) if m else None), head
    s = serve(tmp, "--cors-origins", "localhost")
    try:
        for o in ("http://localhost", "http://127.0.0.1:3000", "https://[::1]:8080"):
            check(origin(s, o)[0] == o, "localhost origin %s not reflected" % o)
        for o in ("http://localhost.evil.com", "http://evil.com", "http://notlocalhost", "localhost"):
            check(origin(s, o)[0] is None, "origin %s reflected" % o)
        code, text = s.curl("/health", headers=["Origin: http://evil.com"])
        check(code == 200, "health with a foreign origin: %d" % code)
    finally:
        s.stop()
    s = serve(tmp, "--cors-origins", "http://a.example, http://b.example", "--no-cors-credentials", name="s2.log")
    try:
        got, head = origin(s, "http://b.example")
        check(got == "http://b.example" and "Access-Control-Allow-Credentials: false" in head, "list: " + head[:300])
        check(origin(s, "http://c.example")[0] is None, "an origin off the list was reflected")
    finally:
        s.stop()
    s = serve(tmp, "--no-cors-credentials", name="s3.log")
    try:
        check(origin(s, "http://x.example")[0] == "*", "without credentials * is not sent")
    finally:
        s.stop()


def assistant_prefill(tmp):
    s = serve(tmp)
    try:
        base = [{"role": "user", "content": "Tell me a story"}]
        code, r = s.json("/apply-template", {"messages": base + [{"role": "assistant", "content": "Once upon"}]})
        check(code == 200 and r["prompt"].endswith("<|im_start|>assistant\nOnce upon"), "prefill: %s" % r)
        code, r2 = s.json("/apply-template", {"messages": base + [{"role": "assistant", "content": [
            {"type": "text", "text": "Once"}, {"type": "text", "text": "upon"}]}], "add_generation_prompt": False,
            "continue_final_message": True})
        check(code == 200 and r2["prompt"].endswith("<|im_start|>assistant\nOnce\n\nupon"), "parts: %s" % r2)
        code, r3 = s.json("/apply-template", {"messages": base, "add_generation_prompt": False})
        check(code == 200 and r3["prompt"].endswith("Tell me a story<|im_end|>\n"), "no generation prompt: %s" % r3)
        bad = [{"messages": base + [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]},
               {"messages": base, "add_generation_prompt": True, "continue_final_message": True},
               {"messages": base, "continue_final_message": "reasoning_content", "add_generation_prompt": False},
               {"messages": base, "add_generation_prompt": "yes"}]
        for b in bad:
            code, r = s.json("/v1/chat/completions", dict(b, max_tokens=2))
            check(code == 400 and "error" in r, "%s: %d %s" % (b, code, r))
        code, r = s.json("/v1/chat/completions", {"messages": base + [{"role": "assistant", "content": "Once upon"}],
                                                  "max_tokens": 4, "temperature": 0, "verbose": True})
        check(code == 200 and r["__verbose"]["prompt"].endswith("assistant\nOnce upon"), "chat prefill: %s" % r)
    finally:
        s.stop()


def prompt_progress_and_timings(tmp):
    from harness import sse as sse_all

    def sse(text):
        return [d for d in sse_all(text) if d != "[DONE]"]
    s = serve(tmp, "-b", "8", "-c", "512")
    try:
        msgs = [{"role": "user", "content": "Once upon a time there was a little girl who liked to play. " * 2}]
        body = {"messages": msgs, "max_tokens": 8, "temperature": 0, "stream": True, "cache_prompt": False}
        plain = [json.loads(d) for d in sse(s.curl("/v1/chat/completions", body)[1])]
        evs = [json.loads(d) for d in sse(s.curl("/v1/chat/completions", dict(body, return_progress=True))[1])]
        prog = [e["prompt_progress"] for e in evs if "prompt_progress" in e]
        total = prog[0]["total"] if prog else 0
        check(len(prog) == (total + 7) // 8 + 1 and prog[0]["processed"] == prog[0]["cache"] == 0 and
              all(p["total"] == total for p in prog) and prog[-1]["processed"] == total and
              all(a["processed"] < b["processed"] for a, b in zip(prog, prog[1:])), "progress: %s" % prog)
        text = lambda ev: "".join((e["choices"][0]["delta"].get("content") or "") for e in ev if e.get("choices"))
        check(text(evs) == text(plain) and text(plain), "progress changed the reply: %r vs %r" % (text(evs), text(plain)))
        code, out = s.curl("/completion", {"prompt": "Once upon a time", "n_predict": 4, "stream": True,
                                           "return_progress": True, "cache_prompt": False})
        lp = [json.loads(d).get("prompt_progress") for d in sse(out)]
        check(code == 200 and lp[0] and lp[0]["processed"] == 0, "/completion progress: %s" % lp)
        evs = [json.loads(d) for d in sse(s.curl("/v1/chat/completions", dict(body, timings_per_token=True,
                                                                              stream_options={"include_usage": True}))[1])]
        content = [e for e in evs if e.get("choices") and e["choices"][0]["delta"].get("content")]
        check(content and all("predicted_n" in e.get("timings", {}) for e in content) and "timings" in evs[-1],
              "timings_per_token: %s" % evs[:3])
        check("timings" not in evs[0], "the first (role) chunk carries timings")
        # llama-server's timings: per-token times, the generation's rate over its n - 1 decode steps
        code, r = s.json("/completion", {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0,
                                         "cache_prompt": False})
        t = r["timings"]
        check(code == 200 and t["predicted_n"] == 8 and abs(t["predicted_per_second"] - 7e3 / t["predicted_ms"]) < 1e-6
              and abs(t["predicted_per_token_ms"] - t["predicted_ms"] / 7) < 1e-9 and
              abs(t["prompt_per_token_ms"] - t["prompt_ms"] / t["prompt_n"]) < 1e-9, "timings: %s" % t)
        code, r = s.json("/completion", {"prompt": "Once", "n_predict": 1, "cache_prompt": False})
        check(r["timings"]["predicted_per_second"] == 0 and r["timings"]["predicted_per_token_ms"] == 0,
              "one token costs no decode step: %s" % r["timings"])
        # progress events with timings_per_token carry the prompt's timings so far (none run at the first)
        code, out = s.curl("/completion", {"prompt": "Once upon a time there was a girl " * 4, "n_predict": 2,
                                           "stream": True, "return_progress": True, "timings_per_token": True,
                                           "cache_prompt": False})
        pt = [json.loads(d)["timings"] for d in sse(out) if "prompt_progress" in json.loads(d)]
        check(len(pt) > 1 and pt[0]["prompt_n"] == 0 and pt[0]["prompt_ms"] == 0 and pt[-1]["prompt_n"] > 0 and
              all(a["prompt_ms"] <= b["prompt_ms"] for a, b in zip(pt, pt[1:])), "progress timings: %s" % pt)
        # generation_settings.logit_bias: the request's biases, then ignore_eos's end token at -inf (null)
        code, r = s.json("/completion", {"prompt": "Once", "n_predict": 2, "ignore_eos": True,
                                         "logit_bias": [[5, 1.5], [6, False]]})
        lb = r["generation_settings"]["logit_bias"]
        check(code == 200 and lb[:2] == [{"bias": 1.5, "token": 5}, {"bias": None, "token": 6}] and len(lb) == 3 and
              lb[2]["bias"] is None, "logit_bias: %s" % lb)
        code, r = s.json("/completion", {"prompt": "Once", "n_predict": 2})
        check(r["generation_settings"]["logit_bias"] == [], "no biases: %s" % r["generation_settings"]["logit_bias"])
    finally:
        s.stop()


def embeddings(tmp):
    import base64
    import math
    import struct
    s = serve(tmp)
    try:
        code, r = s.json("/v1/embeddings", {"input": "hi"})
        check(code == 501, "without --embedding: %d %s" % (code, r))
    finally:
        s.stop()
    text = "Once upon a time there was a cat"
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
    s = serve(tmp, "--embedding", "--pooling", "none", name="none.log")
    try:
        ids = s.json("/tokenize", {"content": text, "add_special": True})[1]["tokens"]
        code, r = s.json("/embedding", {"content": text})
        rows = r[0]["embedding"] if code == 200 else []
        check(len(rows) == len(ids) and all(len(x) == len(rows[0]) > 1 for x in rows), "pooling none: %d %s" % (code, r))
        code, r = s.json("/v1/embeddings", {"input": text})
        check(code == 400, "pooling none on /v1/embeddings: %d" % code)
        check(s.json("/rerank", {"query": "a", "documents": ["b"]})[0] == 501, "/rerank answered")
    finally:
        s.stop()
    D = len(rows[0])
    mean = [f32(sum(x[d] for x in rows) / len(rows)) for d in range(D)]
    for pooling, want in (("mean", mean), ("last", rows[-1])):
        s = serve(tmp, "--embedding", "--pooling", pooling, "-np", "2", name=pooling + ".log")
        try:
            norm = math.sqrt(sum(x * x for x in want))
            code, r = s.json("/v1/embeddings", {"input": [text, text, [ids[0], 12, 34]]})
            check(code == 200 and len(r["data"]) == 3 and r["usage"]["prompt_tokens"] == 2 * len(ids) + 3,
                  "%s: %d %s" % (pooling, code, str(r)[:300]))
            v = r["data"][0]["embedding"]
            check(v == r["data"][1]["embedding"] and abs(sum(x * x for x in v) - 1) < 1e-5, "%s: not unit or unequal" %
                  pooling)
            check(max(abs(a - b / norm) for a, b in zip(v, want)) < 1e-5, "%s: not the pooled rows" % pooling)
            code, r2 = s.json("/v1/embeddings", {"input": text, "encoding_format": "base64"})
            b = base64.b64decode(r2["data"][0]["embedding"])
            check(list(struct.unpack("<%df" % D, b)) == [f32(x) for x in v], "base64 differs from the floats")
            code, r3 = s.json("/embedding", {"content": text, "embd_normalize": -1})
            check(code == 200 and max(abs(a - f32(b)) for a, b in zip(r3[0]["embedding"][0], want)) < 1e-6,
                  "%s unnormalized: %s" % (pooling, str(r3)[:200]))
            for bad in ({"input": text, "embd_normalize": 3}, {"input": text, "encoding_format": "hex"}, {},
                        {"input": "word " * 5000}):
                code, r = s.json("/v1/embeddings", bad)
                check(code in (400, 413) and "error" in r, "%s: %d" % (str(bad)[:60], code))
        finally:
            s.stop()


def history_is_a_cache_hit(tmp):
    names = ["simple", "command-r", "chatml", "llama2", "llama3", "mistral-v7", "zephyr", "gemma", "phi3", "phi4",
             "monarch", "vicuna", "bailing"]
    store = os.path.join(tmp, "store")

    def two_turns(s):
        msgs = [{"role": "user", "content": "Tell me about the little cat"}]
        a = s.json("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0})[1]
        msgs += [{"role": "assistant", "content": a["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "And then?"}]
        b = s.json("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "temperature": 0})[1]
        return a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"], b, msgs
    for name in names:
        s = serve(tmp, "--chat-template", name, *(("--store", store) if name == "vicuna" else ()), name=name + ".log")
        try:
            first, b, msgs = two_turns(s)
            cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
            check(cached >= first, "%s: %d of the history's %d+ tokens cached" % (name, cached, first))
            if name == "vicuna":
                kept = first, b, msgs
        finally:
            s.stop()
    first, b, msgs = kept
    s = serve(tmp, "--chat-template", "vicuna", "--store", store, name="again.log")
    try:
        b2 = s.json("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "temperature": 0})[1]
        cached = b2["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached >= first and b2["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"],
              "after a restart: %d cached (history %d+), %r vs %r" % (cached, first, b2["choices"], b["choices"]))
    finally:
        s.stop()


def infill_layout(tmp):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
    import make_gguf as mg
    w = mg.llama_gguf(n_embd=64, n_layer=1, n_head=2, n_head_kv=1, head_dim=32, n_ff=64, n_ctx=256, n_vocab=310, seed=3)
    names = ["pre", "suf", "mid", "rep", "sep"]
    toks = w.kv[[k for k, _, _, _ in w.kv].index("tokenizer.ggml.tokens")][2]
    for i, n in enumerate(names):  # filler pieces q0z..q4z, which no text forms
        w.add("tokenizer.ggml.fim_%s_token_id" % n, mg.U32, toks.index("q%dz" % i))
    path = os.path.join(tmp, "fim.gguf")
    w.write(path)
    s = Server("-m", path, "-c", "256", "-b", "64", log=os.path.join(tmp, "fim.log"))
    try:
        body = {"input_prefix": "int main", "prompt": "ret", "input_suffix": "end", "n_predict": 2,
                "input_extra": [{"filename": "a.c", "text": "int x;"}, {"text": "int y;"}]}
        code, r = s.json("/infill", body)
        p = r.get("prompt", "") if code == 200 else ""
        want = r"^q3z.*myproject.*q4z.*a\.c.*int.*x;.*q4z.*tmp.*int.*y;.*q4z.*filename\s*<s>\s*q0z.*int.*main.*ret.*q1z.*end.*q2z$"
        check(re.match(want, p, re.S), "infill prompt: %d %r" % (code, p or r))
    finally:
        s.stop()
    s = serve(tmp, name="nofim.log")
    try:
        for extra in ([{}], [{"filename": "ok"}], [{"filename": 1, "text": "a"}], {"text": "a"}):
            code, r = s.json("/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": extra})
            check(code == 400 and "error" in r, "input_extra %s: %d %s" % (extra, code, r))
        code, r = s.json("/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "c"}]})
        check(code == 501, "a valid infill on a model without FIM tokens: %d" % code)
    finally:
        s.stop()


def web_ui_and_token_count(tmp):
    s = serve(tmp, "--api-key", "k")
    try:
        code, page = s.curl("/")
        check(code == 200 and page.startswith("<!doctype html>") and "v1/chat/completions" in page, "/: %d" % code)
        for path in ("/sw.js", "/manifest.webmanifest", "/_app/version.json", "/index.html"):
            check(s.curl(path)[0] == 200, path)
        check(s.curl("/nothing")[0] == 404, "/nothing answered")
        msgs = {"messages": [{"role": "user", "content": "Tell me a story"}]}
        code, r = s.json("/chat/completions/input_tokens", msgs, headers=["Authorization: Bearer k"])
        code2, c = s.json("/v1/chat/completions", dict(msgs, max_tokens=1), headers=["Authorization: Bearer k"])
        check(code == 200 and r["input_tokens"] == c["usage"]["prompt_tokens"], "input_tokens %s vs %s" % (r, c))
        check(s.json("/chat/completions/input_tokens", msgs)[0] == 401, "input_tokens without the key")
    finally:
        s.stop()
    s = serve(tmp, "--no-ui", name="noui.log")
    try:
        check(s.curl("/")[0] == 404, "--no-ui: / answered")
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


def streamed_several(tmp):
    """n > 1 and batches streamed: every choice's events interleaved, each with its index."""
    import socket
    import time
    from harness import sse
    s = serve(tmp, "-np", "3", "-c", "3072", name="several.log")
    try:
        msgs = [{"role": "user", "content": "hi"}]
        code, whole = s.json("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "n": 3, "temperature": 0})
        check(code == 200, "n 3: %d %s" % (code, whole))
        code, text = s.curl("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "n": 3, "temperature": 0,
                                                     "stream": True, "stream_options": {"include_usage": True}})
        data = sse(text)
        check(code == 200 and data and data[-1] == "[DONE]" and data.count("[DONE]") == 1, "one [DONE] at the end: %s" % data[-2:])
        events = [json.loads(d) for d in data if d != "[DONE]"]
        check(len({e["id"] for e in events}) == 1, "one id for the request: %s" % {e["id"] for e in events})
        usage = [e for e in events if not e["choices"]]
        check(len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"] and
              usage[0]["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"], "one usage chunk, summed: %s %s" %
              (usage, whole["usage"]))
        for i in range(3):
            mine = [e["choices"][0] for e in events if e["choices"] and e["choices"][0]["index"] == i]
            got = "".join(c["delta"].get("content") or "" for c in mine)
            check(mine and mine[0]["delta"].get("role") == "assistant" and mine[-1]["finish_reason"] == "length" and
                  got == whole["choices"][i]["message"]["content"], "choice %d: %r vs %r" %
                  (i, got, whole["choices"][i]["message"]["content"]))
        # a batch of prompts on /completion and OpenAI's /v1/completions
        prompts = ["Once upon a time", "The little dog", "One day"]
        code, whole = s.json("/completion", {"prompt": prompts, "n_predict": 10, "temperature": 0})
        code, text = s.curl("/completion", {"prompt": prompts, "n_predict": 10, "temperature": 0, "stream": True})
        events = [json.loads(d) for d in sse(text)]
        check(code == 200 and "[DONE]" not in text and len([e for e in events if e["stop"]]) == 3,
              "/completion batch streamed: %s" % events[-1:])
        for i in range(3):
            got = "".join(e["content"] for e in events if e["index"] == i)
            check(got == whole[i]["content"], "prompt %d: %r vs %r" % (i, got, whole[i]["content"]))
        code, text = s.curl("/v1/completions", {"prompt": "Once upon", "max_tokens": 5, "n": 2, "stream": True})
        data = sse(text)
        idx = sorted({json.loads(d)["choices"][0]["index"] for d in data if d != "[DONE]" and json.loads(d)["choices"]})
        check(code == 200 and idx == [0, 1] and data[-1] == "[DONE]", "/v1/completions n 2: %s" % data[-3:])
        # a client that leaves frees every slot of its request
        body = json.dumps({"messages": msgs, "max_tokens": 900, "n": 3, "stream": True, "temperature": 1,
                           "ignore_eos": True}).encode()
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        c.recv(4096)
        c.close()
        deadline, slots = time.time() + 5, []
        while time.time() < deadline:
            slots = s.json("/slots")[1]
            if not any(sl["is_processing"] for sl in slots):
                break
            time.sleep(0.05)
        check(not any(sl["is_processing"] for sl in slots) and all(sl["n_past"] < 600 for sl in slots),
              "slots generated on for a client that left: %s" % [(sl["id"], sl["n_past"]) for sl in slots])
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
        # post_sampling_probs: what the chain left, as probabilities ("prob", "top_probs")
        code, r = s.json("/completion", {"prompt": "Once upon a time", "n_predict": 6, "temperature": 1.0, "top_k": 3,
                                         "n_probs": 5, "post_sampling_probs": True, "seed": 7})
        cp = r.get("completion_probabilities", []) if code == 200 else []
        check(len(cp) == 6, "post_sampling_probs: %d %s" % (code, r))
        for t in cp:
            top = t["top_probs"]
            check(0 < len(top) <= 3 and abs(sum(x["prob"] for x in top) - 1) < 1e-4 and
                  t["id"] in [x["id"] for x in top] and 0 < t["prob"] <= 1 and
                  all(top[i]["prob"] >= top[i + 1]["prob"] for i in range(len(top) - 1)), "post-sampling: %s" % t)
        code, r = s.json("/completion", dict(body, post_sampling_probs=True))
        check(code == 200 and all(t["prob"] == 1.0 and len(t["top_probs"]) == 1 for t in r["completion_probabilities"]),
              "greedy post-sampling: %s" % r.get("completion_probabilities", r)[:2])
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


def model_overrides(tmp):
    """--override-kv and the --rope-* flags change the model as llama-server's do; bad ones stop the start."""
    def probs(s):
        code, r = s.json("/completion", {"prompt": "Once upon a time", "n_predict": 1, "temperature": 0, "n_probs": 3})
        check(code == 200, "completion: %d %s" % (code, r))
        return [(p["id"], round(p["logprob"], 5)) for p in r["completion_probabilities"][0]["top_logprobs"]]

    def bos_first(s):
        code, r = s.json("/tokenize", {"content": "Once", "add_special": True})
        check(code == 200, "tokenize: %d %s" % (code, r))
        return r["tokens"][0] == 1

    s = serve(tmp, "--port", "0", name="plain.log")
    try:
        plain, plain_bos = probs(s), bos_first(s)
    finally:
        s.stop()
    check(plain_bos, "the model adds BOS")
    s = serve(tmp, "--port", "0", "--override-kv", "tokenizer.ggml.add_bos_token=bool:false,general.name=str:renamed",
              name="ovr.log")
    try:
        check(not bos_first(s), "--override-kv add_bos_token=bool:false: BOS still added")
    finally:
        s.stop()
    for flags, same in ((["--rope-scaling", "none"], True), (["--rope-scaling", "linear"], True),
                        (["--rope-freq-base", "20000"], False), (["--rope-scale", "2"], False),
                        (["--rope-freq-scale", "0.5"], False), (["--override-kv", "llama.rope.freq_base=float:20000"], False)):
        s = serve(tmp, "--port", "0", *flags, name="rope.log")
        try:
            check((probs(s) == plain) == same, "%s: %s" % (flags, "changed the model" if same else "changed nothing"))
        finally:
            s.stop()
    for flags, what in ((["--rope-scaling", "yarn"], b"YaRN"), (["--rope-scaling", "cubic"], b"--rope-scaling"),
                        (["--override-kv", "llama.context_length=int:x"], b"not a value of type"),
                        (["--override-kv", "no-equals-sign"], b"KEY=TYPE:VALUE"),
                        (["--rope-scale", "2", "--rope-freq-scale", "0.5"], b"give one")):
        p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0"] + flags, capture_output=True, timeout=30)
        check(p.returncode != 0 and what in p.stderr, "%s: %d %r" % (flags, p.returncode, p.stderr[-300:]))


def main():
    rep = Reporter("test_server_dropin")
    cases = [llama_server_command_line_starts, chat_template_sources, template_variables, vertex_ai_predict,
             sleep_when_idle, chatml_fallback, unsupported_fields_refused,
             cors_preflight, cors_origins, assistant_prefill, prompt_progress_and_timings, embeddings, history_is_a_cache_hit, infill_layout,
             web_ui_and_token_count,
             context_errors, abandoned_request_frees_slot, token_probabilities,
             seeded_sampling_is_llama_servers, model_overrides, streamed_several]
    if not os.path.isfile(MODEL):
        for c in cases:
            rep.report(c.__name__, testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0
    return testenv.run_cases(rep, cases, "skv-dropin-")


if __name__ == "__main__":
    sys.exit(main())
