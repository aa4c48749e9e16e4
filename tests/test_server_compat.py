#!/usr/bin/python3
"""seqkv serve against the assertions of llama.cpp's own server tests
(tools/server/tests/unit/test_*.py in its source), ported where they apply to this server
and the bundled model: the same requests, the same fields and relations checked (shapes,
counts, cache reuse, stream framing, error envelopes), with this model's own numbers in
place of the tinyllama ones. Written from scratch; nothing is copied.

Ported from: test_basic (health, props, models, slots), test_tokenize, test_completion
(shapes, streaming vs not, seeds, cache vs no cache, token prompts, parallel slots,
too-long prompt), test_ctx_shift (disabled: length stop, long prompt refused),
test_chat_completion (shape, cached_tokens, streaming, invalid messages, timings),
test_security (public endpoints, API key), test_metrics (Prometheus format),
test_slot_save (save/restore/erase), test_stream (OpenAI /v1/completions stream).
Not applicable here: grammars, JSON schema, tools, logprobs / n_probs, multimodal,
LoRA, embeddings, rerank, infill, speculative, the web UI, CORS origins, router mode.
"""
import json
import os
import shutil
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
from clitest import Reporter, check  # noqa: E402
from harness import Server, sse  # noqa: E402

NAME = "test_server_compat"
N_CTX, N_SLOTS = 256, 2
LIFE = "I believe the meaning of life is"


def post(srv, path, body, **kw):
    code, r = srv.json(path, body, **kw)
    check(code == 200, "%s: %d %s" % (path, code, r))
    return r


def tokens_of(srv, text, special=True):
    return post(srv, "/tokenize", {"content": text, "add_special": special})["tokens"]


def common(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def case_basic(srv, tmp):
    code, r = srv.json("/health")
    check(code == 200, "health %d" % code)
    p = post(srv, "/props", None)
    check(".gguf" in p["model_path"] and p["total_slots"] == N_SLOTS, "props: %s" % p)
    check(p["default_generation_settings"]["n_ctx"] == N_CTX, "props n_ctx: %s" % p)
    m = post(srv, "/models", None)
    check(len(m["data"]) == 1 and m["data"][0]["id"] == "compat-model", "models: %s" % m)
    sl = post(srv, "/slots", None)
    check(len(sl) == N_SLOTS and sl[0]["n_ctx"] == N_CTX and "params" not in sl[0], "slots: %s" % sl)


def case_tokenize(srv, tmp):
    content = "What is the capital of France ?"
    tok = tokens_of(srv, content, special=False)
    check(len(tok) > 5, "tokenize: %s" % tok)
    d = post(srv, "/detokenize", {"tokens": tok})
    check(d["content"].strip() == content, "detokenize: %r" % d["content"])
    with_bos = tokens_of(srv, content)
    check(len(with_bos) == len(tok) + 1 and with_bos[1:] == tok, "add_special adds the BOS: %s" % with_bos)
    pieces = post(srv, "/tokenize", {"content": content, "with_pieces": True})["tokens"]
    check(all("id" in t and t["id"] > 0 and "piece" in t and len(t["piece"]) > 0 for t in pieces), "pieces: %s" % pieces)


def case_completion_shape(srv, tmp):
    for n_predict, return_tokens in ((8, False), (16, True)):
        r = post(srv, "/completion", {"prompt": LIFE, "n_predict": n_predict, "return_tokens": return_tokens,
                                      "temperature": 0, "cache_prompt": False})
        check(r["timings"]["prompt_n"] == len(tokens_of(srv, LIFE)) and r["timings"]["predicted_n"] == n_predict,
              "counts: %s" % r["timings"])
        check(r["truncated"] is False and type(r["has_new_line"]) is bool and r["stop_type"] == "limit", "shape: %s" % r)
        check((len(r["tokens"]) == n_predict and all(type(t) is int for t in r["tokens"])) if return_tokens
              else r["tokens"] == [], "tokens: %s" % r["tokens"])


def case_completion_stream(srv, tmp):
    body = {"prompt": LIFE, "n_predict": 8, "temperature": 0}
    code, text = srv.curl("/completion", dict(body, stream=True, return_tokens=True))
    events = [json.loads(e) for e in sse(text)]
    check(code == 200 and events and all(type(e["stop"]) is bool for e in events), "stream: %s" % text[:200])
    last = events[-1]
    check(last["stop"] and last["timings"]["predicted_n"] == 8 and last["truncated"] is False and
          last["stop_type"] == "limit" and type(last["has_new_line"]) is bool, "final event: %s" % last)
    check(last["generation_settings"]["n_predict"] == 8, "generation_settings: %s" % last["generation_settings"])
    streamed = "".join(e["content"] for e in events)
    check(streamed == post(srv, "/completion", body)["content"], "stream and non-stream differ")


def case_seeds(srv, tmp):
    body = {"prompt": LIFE, "seed": 42, "temperature": 0.0, "cache_prompt": False, "n_predict": 12}
    same = {post(srv, "/completion", body)["content"] for _ in range(3)}
    check(len(same) == 1, "same seed, different results: %s" % same)
    outs = [post(srv, "/completion", dict(body, seed=s, temperature=1.0))["content"] for s in range(4)]
    check(len(set(outs)) > 1, "different seeds, one result: %s" % outs)
    hot = dict(body, temperature=1.0)
    check(post(srv, "/completion", dict(hot, cache_prompt=True))["content"] ==
          post(srv, "/completion", hot)["content"], "cache vs no cache differ")


def case_token_prompt(srv, tmp):
    tok = tokens_of(srv, LIFE)
    a = post(srv, "/completion", {"prompt": tok, "n_predict": 8, "temperature": 0})
    b = post(srv, "/completion", {"prompt": LIFE, "n_predict": 8, "temperature": 0})
    check(type(a["content"]) is str and a["content"] == b["content"], "token prompt: %r %r" % (a["content"],
                                                                                              b["content"]))


def case_too_long_prompt(srv, tmp):
    code, r = srv.json("/completion", {"prompt": LIFE * 64, "cache_prompt": False, "n_predict": 4})
    check(code == 400 and "exceeds the available context size" in r["error"]["message"], "long prompt: %d %s" %
          (code, r))


def case_ctx_full_no_shift(srv, tmp):
    r = post(srv, "/completion", {"prompt": "Hi how are you", "n_predict": -1, "temperature": 0})
    n = len(tokens_of(srv, "Hi how are you"))
    check(r["timings"]["predicted_n"] == N_CTX - n or r["stop_type"] == "eos", "n_predict -1: %s" % r["timings"])
    r = post(srv, "/completion", {"prompt": "Hi how are you", "n_predict": 64, "temperature": 0})
    check(r["timings"]["predicted_n"] == 64 and r["truncated"] is False, "n_predict 64: %s" % r["timings"])
    code, text = srv.curl("/v1/completions", {"prompt": "Once", "max_tokens": N_CTX, "stream": True, "temperature": 0})
    ch = [json.loads(e) for e in sse(text) if e != "[DONE]"]
    content = "".join(c["choices"][0]["text"] for c in ch if c["choices"][0]["finish_reason"] is None)
    check(ch[-1]["choices"][0]["finish_reason"] == "length" and content, "stream to a full context: %s" % ch[-1])


def case_parallel_slots(srv, tmp):
    out, lock = [], threading.Lock()

    def one(i):
        r = srv.json("/completion", {"prompt": "Once upon a time %d" % i, "seed": 42, "temperature": 1.0,
                                     "n_predict": 16})
        with lock:
            out.append(r)
    th = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    check(all(code == 200 and type(r["content"]) is str and len(r["content"]) > 10 for code, r in out),
          "parallel: %s" % out)


def case_chat_shape(srv, tmp):
    for user in ("What is the best book", [{"type": "text", "text": "What is"}, {"type": "text", "text": " the best book"}]):
        r = post(srv, "/chat/completions", {"max_tokens": 8, "temperature": 0, "messages": [
            {"role": "system", "content": "Book"}, {"role": "user", "content": user}]})
        check("cmpl" in r["id"] and r["system_fingerprint"] and r["object"] == "chat.completion", "ids: %s" % r)
        u, ch = r["usage"], r["choices"][0]
        check(u["completion_tokens"] == 8 and u["prompt_tokens"] > 4 and u["total_tokens"] == u["prompt_tokens"] + 8,
              "usage: %s" % u)
        check(ch["message"]["role"] == "assistant" and ch["finish_reason"] == "length", "choice: %s" % ch)


def case_chat_cached_tokens(srv, tmp):
    """llama-server: a repeat reuses n - 1 tokens; a changed tail reuses the common prefix."""
    s = Server("--parallel", "1", "-c", N_CTX, log=os.path.join(tmp, "one.log"))
    try:
        prev = None
        for user in ("1 2 3 4 5 6", "1 2 3 4 5 6", "1 2 3 4 5 9", "1 2 3 9 9 9"):
            body = {"prompt": "Test. " + user, "n_predict": 8, "temperature": 0, "return_tokens": True}
            r = post(s, "/completion", body)
            tok = tokens_of(s, body["prompt"])
            want = 0 if prev is None else min(common(prev, tok), len(tok) - 1)
            check(r["timings"]["cache_n"] == want and r["timings"]["prompt_n"] == len(tok) - want,
                  "%r: cache_n %d, want %d" % (user, r["timings"]["cache_n"], want))
            prev = tok + r["tokens"][:-1]  # the slot holds the prompt and all but the last generated token
        msgs = [{"role": "system", "content": "Test"}, {"role": "user", "content": "1 2 3 4 5 6"}]
        a = post(s, "/chat/completions", {"max_tokens": 8, "messages": msgs, "temperature": 0})
        b = post(s, "/chat/completions", {"max_tokens": 8, "messages": msgs, "temperature": 0})
        check(a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"] and
              b["usage"]["prompt_tokens_details"]["cached_tokens"] == b["usage"]["prompt_tokens"] - 1,
              "chat repeat: %s" % b["usage"])
    finally:
        s.stop()


def case_chat_stream(srv, tmp):
    code, text = srv.curl("/chat/completions", {"max_tokens": 8, "temperature": 0, "stream": True, "messages": [
        {"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]})
    ev = sse(text)
    check(code == 200 and ev[-1] == "[DONE]", "stream end: %s" % ev[-1:])
    data = [json.loads(e) for e in ev[:-1]]
    first = data[0]["choices"][0]
    check(first["delta"]["role"] == "assistant" and first["delta"]["content"] is None and "timings" not in data[0],
          "first event: %s" % data[0])
    content = ""
    for d in data[1:]:
        check(d["id"] == data[0]["id"] and d["system_fingerprint"], "id changed: %s" % d)
        c = d["choices"][0]
        check("role" not in c["delta"], "role repeated: %s" % d)
        if c["finish_reason"] in ("stop", "length"):
            check("content" not in c["delta"] and c["finish_reason"] == "length", "finish: %s" % d)
        else:
            check(c["finish_reason"] is None, "finish_reason before the end: %s" % d)
            content += c["delta"]["content"] or ""
    check(content, "no content streamed")


def case_chat_invalid(srv, tmp):
    for messages in (None, "string", [123], [{}], [{"role": 123}], [{"role": "system", "content": 123}],
                     [{"role": "system", "content": "test"}, {}]):
        code, r = srv.json("/chat/completions", {"messages": messages})
        check(code in (400, 500) and "error" in r, "messages %r: %d %s" % (messages, code, r))


def case_security(srv, tmp):
    s = Server("-c", "128", "--api-key", "my-secret-key", log=os.path.join(tmp, "key.log"))
    try:
        for path in ("/health", "/models", "/v1/models"):
            code, r = s.json(path)
            check(code == 200 and "error" not in r, "public %s: %d %s" % (path, code, r))
        for key in ("invalid-key", "Bearer invalid-key", ""):
            code, r = s.json("/completion", {"prompt": "Hello", "n_predict": 2},
                             headers=["Authorization: Bearer " + key] if key else [])
            check(code == 401 and r["error"]["type"] == "authentication_error", "key %r: %d %s" % (key, code, r))
        for h in ("Authorization: Bearer my-secret-key", "X-Api-Key: my-secret-key"):
            code, r = s.json("/completion", {"prompt": "Hello", "n_predict": 2}, headers=[h])
            check(code == 200 and "error" not in r and "content" in r, "%s: %d %s" % (h, code, r))
    finally:
        s.stop()


def case_metrics(srv, tmp):
    post(srv, "/completion", {"prompt": LIFE, "n_predict": 2})
    code, text = srv.curl("/metrics")
    check(code == 200 and isinstance(text, str), "metrics: %d" % code)
    types, seen = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        elif line and not line.startswith("#"):
            seen.add(line.split()[0])
    for name in seen:
        check(name in types and "# HELP %s " % name in text, "%s: no # TYPE / # HELP" % name)
        want = "counter" if name.endswith("_total") or name == "llamacpp:n_tokens_max" else "gauge"  # llama-server's types
        check(types[name] == want, "%s is a %s" % (name, types[name]))
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:requests_processing",
                 "llamacpp:prompt_tokens_cached_total", "llamacpp:n_decode_total", "llamacpp:n_busy_slots_per_decode"):
        check(name in seen, "missing " + name)


def case_slot_save(srv, tmp):
    d = os.path.join(tmp, "slots")
    s = Server("--parallel", "2", "-c", 2 * int(N_CTX), "--slot-save-path", d, log=os.path.join(tmp, "slot.log"))
    try:
        france, germany = "What is the capital of France?", "What is the capital of Germany?"
        r = post(s, "/completion", {"prompt": france, "id_slot": 1, "cache_prompt": True, "temperature": 0})
        n_france = len(tokens_of(s, france))
        check(r["timings"]["prompt_n"] == n_france, "first: %s" % r["timings"])
        saved = post(s, "/slots/1?action=save", {"filename": "slot1.bin"})
        check(saved["n_saved"] == n_france + r["tokens_predicted"] - 1, "n_saved: %s" % saved)
        n_tail = len(tokens_of(s, germany)) - common(tokens_of(s, france), tokens_of(s, germany))
        r = post(s, "/completion", {"prompt": germany, "id_slot": 1, "cache_prompt": True, "temperature": 0})
        check(r["timings"]["prompt_n"] == n_tail, "slot 1 reuse: %s" % r["timings"])
        rest = post(s, "/slots/0?action=restore", {"filename": "slot1.bin"})
        check(rest["n_restored"] == saved["n_saved"] and rest["n_read"] == saved["n_written"], "restore: %s" % rest)
        r0 = post(s, "/completion", {"prompt": germany, "id_slot": 0, "cache_prompt": True, "temperature": 0})
        check(r0["timings"]["prompt_n"] == n_tail and r0["content"] == r["content"], "slot 0: %s" % r0["timings"])
        r1 = post(s, "/completion", {"prompt": germany, "id_slot": 1, "cache_prompt": True, "temperature": 0})
        check(r1["timings"]["prompt_n"] == 1, "slot 1 corrupted by the restore into 0: %s" % r1["timings"])
        post(s, "/slots/1?action=erase", None, method="POST")
        r = post(s, "/completion", {"prompt": france, "id_slot": 1, "cache_prompt": True, "temperature": 0})
        check(r["timings"]["prompt_n"] == n_france, "after erase: %s" % r["timings"])
    finally:
        s.stop()


CASES = [case_basic, case_tokenize, case_completion_shape, case_completion_stream, case_seeds, case_token_prompt,
         case_too_long_prompt, case_ctx_full_no_shift, case_parallel_slots, case_chat_shape, case_chat_cached_tokens,
         case_chat_stream, case_chat_invalid, case_security, case_metrics, case_slot_save]


def main():
    rep = Reporter(NAME)
    tmp = tempfile.mkdtemp(prefix="seqkv-compat-")
    try:
        srv = Server("--parallel", N_SLOTS, "-c", int(N_SLOTS) * int(N_CTX), "-a", "compat-model", log=os.path.join(tmp, "main.log"))
    except Exception as e:
        rep.report("start", "FAIL", str(e))
        return 1
    try:
        for c in CASES:
            rep.run_case(c, srv, tmp)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
