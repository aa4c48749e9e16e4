#!/usr/bin/python3
"""seqkv serve end to end: starts the real server on a free port and drives it with curl
(llama-server's endpoints) and with the official openai npm client (tests/server/).

Checks: health/models/props/tokenize/detokenize shapes, greedy determinism (string and
token-array prompts, streamed and not), llama-server's stream format (no [DONE]) and
OpenAI's (role chunk, deltas, finish chunk, usage chunk, [DONE]), stop strings (never
streamed), the prompt cache (a repeat reuses n-1 positions), the error envelope with
status = code (400, 401, 404, 413), every limit, a full queue answering 503 while /health
still answers, and the store as a persistent prompt cache: after kill -9 and a restart a
returning conversation is served from the store with the same output.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import ROOT, Fail, Reporter, Skip, check  # noqa: E402
from harness import Server, sse  # noqa: E402

NAME = "test_server"
PROMPT = "In the beginning God created the heaven and the earth. And the earth was"


def completion(srv, **kw):
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0}
    body.update(kw)
    code, r = srv.json("/completion", body)
    check(code == 200, "completion: %d %s" % (code, r))
    return r


def case_endpoints(srv, tmp):
    code, r = srv.json("/health")
    check(code == 200 and r == {"status": "ok"}, "health: %d %s" % (code, r))
    code, r = srv.json("/v1/models")
    check(code == 200 and r["object"] == "list" and r["data"][0]["meta"]["n_vocab"] == 4096, "models: %s" % r)
    code, r = srv.json("/props")
    check(code == 200 and r["total_slots"] == 2 and r["default_generation_settings"]["n_ctx"] == 512, "props: %s" % r)
    code, r = srv.json("/slots")
    check(code == 200 and len(r) == 2 and r[1]["id"] == 1, "slots: %s" % r)
    code, m = srv.curl("/metrics")
    check(code == 200 and "llamacpp:prompt_tokens_total" in m and "seqkv:store_sessions" in m, "metrics: " + m[:200])


def case_tokenize_roundtrip(srv, tmp):
    code, r = srv.json("/tokenize", {"content": "And God said, Let there be light"})
    check(code == 200 and len(r["tokens"]) > 3 and all(isinstance(t, int) for t in r["tokens"]), "tokenize: %s" % r)
    code, d = srv.json("/detokenize", {"tokens": r["tokens"]})
    check(code == 200 and d["content"].strip() == "And God said, Let there be light", "detokenize: %s" % d)
    code, p = srv.json("/tokenize", {"content": "light", "with_pieces": True})
    check(code == 200 and "light" in "".join(x["piece"] for x in p["tokens"]), "with_pieces: %s" % p)


def case_greedy_deterministic(srv, tmp):
    a, b = completion(srv), completion(srv, cache_prompt=False)
    check(a["content"] and a["content"] == b["content"], "two greedy runs differ: %r %r" % (a["content"], b["content"]))
    check(a["tokens_predicted"] == 12 and a["stop_type"] == "limit", "n_predict not honoured: %s" % a)
    code, t = srv.json("/tokenize", {"content": PROMPT, "add_special": True})
    c = completion(srv, prompt=t["tokens"])
    check(c["content"] == a["content"], "token-array prompt differs: %r" % c["content"])
    s = completion(srv, temperature=0.9, seed=7, top_k=20)
    check(s == s and completion(srv, temperature=0.9, seed=7, top_k=20)["content"] == s["content"],
          "same seed, different text")


def case_prompt_cache(srv, tmp):
    completion(srv, id_slot=0)
    r = completion(srv, id_slot=0)
    n = r["tokens_evaluated"]
    check(r["timings"]["cache_n"] == n - 1 and r["timings"]["prompt_n"] == 1, "repeat not cached: %s" % r["timings"])
    r = completion(srv, id_slot=0, cache_prompt=False)
    check(r["timings"]["cache_n"] == 0, "cache_prompt false still reused: %s" % r["timings"])


def case_llama_stream(srv, tmp):
    whole = completion(srv, n_predict=20)
    code, text = srv.curl("/completion", {"prompt": PROMPT, "n_predict": 20, "temperature": 0, "stream": True})
    events = [json.loads(e) for e in sse(text)]
    check(code == 200 and events and "[DONE]" not in text, "stream: %d %s" % (code, text[:300]))
    check(all(not e["stop"] for e in events[:-1]) and events[-1]["stop"], "stop flags: %s" % events)
    got = "".join(e["content"] for e in events)
    check(got == whole["content"], "stream %r != %r" % (got, whole["content"]))
    check(events[-1]["tokens_predicted"] == 20 and "timings" in events[-1], "final chunk: %s" % events[-1])


def case_oai_stream_shape(srv, tmp):
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    code, text = srv.curl("/v1/chat/completions", body)
    ev = sse(text)
    check(code == 200 and ev[-1] == "[DONE]", "no [DONE]: %s" % text[-200:])
    ch = [json.loads(e) for e in ev[:-1]]
    check(ch[0]["choices"][0]["delta"]["role"] == "assistant", "no role chunk: %s" % ch[0])
    check(ch[-2]["choices"][0]["finish_reason"] == "length" and ch[-2]["choices"][0]["delta"] == {}, "finish: %s" % ch[-2])
    u = ch[-1]["usage"]
    check(ch[-1]["choices"] == [] and u["completion_tokens"] == 6 and "cached_tokens" in u["prompt_tokens_details"],
          "usage chunk: %s" % ch[-1])
    check(all(c["id"] == ch[0]["id"] and c["object"] == "chat.completion.chunk" for c in ch), "ids/objects differ")


def case_stop_strings(srv, tmp):
    whole = completion(srv, n_predict=24)["content"]
    words = whole.split()
    check(len(words) > 3, "too little text: %r" % whole)
    stop = " " + words[2]
    cut = whole[:whole.index(stop)]
    r = completion(srv, n_predict=24, stop=[stop, "zzzzqqq"])
    check(r["content"] == cut and r["stop_type"] == "word" and r["stopping_word"] == stop, "stop: %s" % r)
    code, text = srv.curl("/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0, "stream": True,
                                          "stop": stop})
    got = "".join(json.loads(e)["content"] for e in sse(text))
    check(got == cut, "streamed %r != %r (a stop string leaked)" % (got, cut))


def case_errors(srv, tmp):
    cases = [
        (srv.json("/nope"), 404),
        (srv.json("/completion", raw=b"{not json"), 400),
        (srv.json("/completion", raw=b"[" * 100 + b"]" * 100), 400),
        (srv.json("/completion", raw=b"[1,2]"), 400),
        (srv.json("/completion", raw=b'{"prompt":"' + b"a" * (5 << 20) + b'"}'), 413),
        (srv.json("/completion", {"prompt": "x", "n_predict": 100000}), 400),
        (srv.json("/completion", {"prompt": [1, 99999]}), 400),
        (srv.json("/completion", {"prompt": "x " * 2000}), 400),
        (srv.json("/completion", {"prompt": "x", "temperature": "hot"}), 400),
        (srv.json("/completion", {"prompt": "x", "stop": [""]}), 400),
        (srv.json("/completion", {"prompt": "x", "id_slot": 9}), 400),
        (srv.json("/v1/chat/completions", {"messages": [{"role": "user"}]}), 400),
        (srv.json("/completion", {}), 400),
    ]
    for i, ((code, r), want) in enumerate(cases):
        check(code == want, "case %d: status %d, want %d: %s" % (i, code, want, r))
        e = r.get("error") if isinstance(r, dict) else None
        check(e and e["code"] == want and e["message"] and e["type"], "case %d: envelope %s" % (i, r))
    code, r = srv.json("/health")
    check(code == 200, "the server stopped answering after bad requests")


def case_api_key(srv, tmp):
    k = Server("--api-key", "s3cret", "-c", "256", log=os.path.join(tmp, "key.log"))
    try:
        code, r = k.json("/completion", {"prompt": "x", "n_predict": 1})
        check(code == 401 and r["error"]["type"] == "authentication_error", "no key: %d %s" % (code, r))
        code, r = k.json("/completion", {"prompt": "x", "n_predict": 1}, headers=["Authorization: Bearer wrong"])
        check(code == 401, "wrong key: %d" % code)
        code, r = k.json("/completion", {"prompt": "x", "n_predict": 1}, headers=["Authorization: Bearer s3cret"])
        check(code == 200, "right key: %d %s" % (code, r))
        check(k.json("/health")[0] == 200, "/health needs no key")
    finally:
        k.stop()


def case_queue_full_503(srv, tmp):
    """--parallel 1: 80 long streamed requests at once; the queue holds 64, the rest get 503
    at once; /health answers. The clients hang up after a few seconds (cancelling)."""
    q = Server("--parallel", "1", "-c", "512", log=os.path.join(tmp, "q.log"))
    codes, lock = [], threading.Lock()

    def one():
        c, _ = q.curl("/completion", {"prompt": PROMPT, "n_predict": 400, "temperature": 0, "stream": True},
                      timeout=4)
        with lock:
            codes.append(c)
    try:
        th = [threading.Thread(target=one) for _ in range(80)]
        for t in th:
            t.start()
        health = q.json("/health")[0]
        for t in th:
            t.join()
        check(health == 200, "/health under load: %d" % health)
        check(set(codes) <= {200, 503} and codes.count(503) >= 1 and codes.count(200) >= 65,
              "codes: %s" % sorted(codes))
    finally:
        q.stop()


def case_store_restart(srv, tmp):
    """The store is the prompt cache: kill -9, restart, a returning conversation hits it."""
    store = os.path.join(tmp, "store")
    s = Server("--store", store, "-c", "512", log=os.path.join(tmp, "s1.log"))
    try:
        first = completion(s, n_predict=16)
        check(first["timings"]["cache_n"] == 0, "fresh store hit: %s" % first["timings"])
        chat = {"messages": [{"role": "user", "content": "And the LORD spake unto Moses"}], "max_tokens": 8,
                "temperature": 0}
        code, c1 = s.json("/v1/chat/completions", chat)
        check(code == 200, "chat: %s" % c1)
        code, _ = s.json("/health")  # the puts run after the replies; the next request waits for none
        for _ in range(100):
            m = s.curl("/metrics")[1]
            if "seqkv:store_sessions 2" in m:
                break
            threading.Event().wait(0.05)
        check("seqkv:store_sessions 2" in m, "conversations not stored: " + m)
    finally:
        s.kill()
    s = Server("--store", store, "-c", "512", log=os.path.join(tmp, "s2.log"))
    try:
        again = completion(s, n_predict=16)
        n = again["tokens_evaluated"]
        check(again["timings"]["cache_n"] == n - 1, "restart: not served from the store: %s" % again["timings"])
        check(again["content"] == first["content"], "restored KV gives other text: %r" % again["content"])
        chat["messages"] += [{"role": "assistant", "content": c1["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "Speak unto the children of Israel"}]
        code, c2 = s.json("/v1/chat/completions", chat)
        cached = c2["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(code == 200 and cached >= c1["usage"]["prompt_tokens"], "returning chat cached %d of %s" %
              (cached, c2["usage"]))
    finally:
        s.stop()


def metric(srv, name):
    for line in srv.curl("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_metric(srv, name, want):
    for _ in range(200):
        if metric(srv, name) >= want:
            return True
        threading.Event().wait(0.05)
    return False


def case_stream_put(srv, tmp):
    """A streamed conversation goes back into the store too (the stream's end is no cancel)."""
    before = metric(srv, "seqkv:store_puts_total")
    for i in range(8):
        code, text = srv.curl("/completion", {"prompt": "Streamed and stored %d %s" % (i, tmp), "n_predict": 2,
                                              "temperature": 0, "stream": True})
        check(code == 200 and json.loads(sse(text)[-1])["stop"], "stream: %s" % text[-200:])
    check(wait_metric(srv, "seqkv:store_puts_total", before + 8), "a streamed conversation was not stored")


def store_cli(*args):
    from clitest import run
    rc, out, err = run("store", *args)
    check(rc == 0, "seqkv store %s: %s" % (" ".join(args), out + err))
    return out


def case_put_takes_slot_work(srv, tmp):
    """The store writer puts what the slot ran (its KV and each token's surprisal) instead of
    running the model again: across chat turns (history re-rendered), chunked prefills with
    return_progress, sampling and a slot-prefix reuse, every put takes the slot's work (but
    a chat whose context shifted: its put runs the model), the prompts' surprisals computed
    by the writer from the slot's hidden states (or, SEQKV_SERVE_SLOT_SURPRISAL=1, in the
    slot's prefill), and the store holds exactly what a server whose puts run the model holds (sessions, KV
    digests, trie, surprisal total); with no KV materialised (budget 0), every session
    restores verified from tokens, so the slot's KV was the model's."""
    stores = {}
    for mode, env in (("given", None), ("slot", {"SEQKV_SERVE_SLOT_SURPRISAL": "1"}),
                      ("recompute", {"SEQKV_SERVE_PUT_RECOMPUTE": "1"})):
        store = os.path.join(tmp, "puts-" + mode)
        stores[mode] = store
        s = Server("--store", store, "-c", "512", "--cache-budget", "0", "-b", "7", "--context-shift",
                   log=os.path.join(tmp, "puts-%s.log" % mode), env=env)
        try:
            chat = {"messages": [{"role": "user", "content": "And the LORD spake unto Moses"}], "max_tokens": 8,
                    "temperature": 0}
            for turn in range(3):
                code, c = s.json("/v1/chat/completions", chat)
                check(code == 200, "chat: %s" % c)
                chat["messages"] += [{"role": "assistant", "content": c["choices"][0]["message"]["content"]},
                                     {"role": "user", "content": "Speak unto the children of Israel %d" % turn}]
            code, text = s.curl("/completion", {"prompt": PROMPT + " without form", "n_predict": 6, "stream": True,
                                                "return_progress": True, "temperature": 0})
            check(code == 200 and "prompt_progress" in text, "progress stream: %s" % text[-300:])
            completion(s, prompt=PROMPT + " without form, and void", n_predict=5, temperature=0.9, seed=3)
            completion(s, n_predict=4)
            # a chat that fills the context: shifted, its surprisals are not the slot's to give
            code, c = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "And it came to pass"}],
                                                      "max_tokens": 600, "temperature": 0, "logit_bias": [[2, False]]})
            check(code == 200, "shifted chat: %s" % c)
            check(wait_metric(s, "seqkv:store_puts_total", 7), "the conversations were not all put")
            puts, given = metric(s, "seqkv:store_puts_total"), metric(s, "seqkv:store_puts_given_total")
            hidden = metric(s, "seqkv:store_puts_hidden_total")
            if mode != "recompute":
                check(given == puts - 1, "%d of %d puts took the slot's work (all but the shifted one)" % (given, puts))
                # by default the writer computes the prompts' surprisals from the slot's hidden states
                check(hidden == (given if mode == "given" else 0), "%s: %d puts with hidden states" % (mode, hidden))
            else:
                check(given == 0, "SEQKV_SERVE_PUT_RECOMPUTE=1 still took the slot's work %d times" % given)
        finally:
            s.stop()
    ls = {m: [line.split("\t")[:2] + line.split("\t")[3:] for line in store_cli("ls", d).splitlines()]
          for m, d in stores.items()}
    check(ls["given"] == ls["recompute"] == ls["slot"] and len(ls["given"]) >= 7, "sessions differ: %s" % ls)
    keep = ("sessions:", "unique stored positions:", "model-coded token floor:")
    st = {m: [line for line in store_cli("stats", d).splitlines() if line.startswith(keep)]
          for m, d in stores.items()}
    check(st["given"] == st["recompute"] == st["slot"] and len(st["given"]) == 3, "stores differ: %s" % st)
    for name, _n, _digest in ls["given"]:
        out = store_cli("get", stores["given"], name)
        check("verified" in out and "tokens: 0 positions loaded" in out, "get %s: %s" % (name, out))


def case_shared_store_keeps_slot(srv, tmp):
    """Two servers on one store: B's slot keeps its own prefix when the store's longer match
    is a conversation B does not know (put by A after B started)."""
    store = os.path.join(tmp, "shared")
    b = Server("--store", store, "-c", "512", log=os.path.join(tmp, "b.log"))
    a = None
    try:
        base = PROMPT + " And God said, Let there be light: and there was light."
        completion(b, prompt=base + " And God saw the light", n_predict=2)
        a = Server("--store", store, "-c", "512", log=os.path.join(tmp, "a.log"))
        completion(a, prompt=base + " And God called the light Day", n_predict=2)
        check(wait_metric(a, "seqkv:store_puts_total", 1), "A did not store its conversation")
        r = completion(b, prompt=base + " And God called the darkness Night", n_predict=2)
        check(r["timings"]["cache_n"] > 20, "B lost its slot's prefix: %s" % r["timings"])
    finally:
        b.stop()
        if a:
            a.stop()


def case_conversation_moves_between_servers(srv, tmp):
    """Two servers on one store (a fleet): a conversation started on A is a store hit on B at
    its next turn, the history and reply included, with the text B would give cold."""
    store = os.path.join(tmp, "fleet")
    a = Server("--store", store, "-c", "512", log=os.path.join(tmp, "fa.log"))
    b = Server("--store", store, "-c", "512", log=os.path.join(tmp, "fb.log"))
    cold = Server("-c", "512", log=os.path.join(tmp, "fcold.log"))
    try:
        chat = {"messages": [{"role": "user", "content": "And the LORD spake unto Moses, saying"}], "max_tokens": 12,
                "temperature": 0}
        c1 = a.json("/v1/chat/completions", chat)[1]
        check(wait_metric(a, "seqkv:store_puts_total", 1), "A did not store its conversation")
        chat["messages"] += [{"role": "assistant", "content": c1["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "Speak unto the children of Israel"}]
        c2 = b.json("/v1/chat/completions", chat)[1]
        want = c1["usage"]["prompt_tokens"] + c1["usage"]["completion_tokens"]
        cached = c2["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached >= want and metric(b, "seqkv:store_hits_total") >= 1,
              "B cached %d of the %d+ history tokens A served" % (cached, want))
        c3 = cold.json("/v1/chat/completions", chat)[1]
        check(c2["choices"][0]["message"]["content"] == c3["choices"][0]["message"]["content"],
              "B's reply from the store differs from a cold server's: %r vs %r" % (c2["choices"], c3["choices"]))
    finally:
        for s in (a, b, cold):
            s.stop()


def case_parallel_greedy(srv, tmp):
    """8 concurrent requests over 2 slots: all succeed, every greedy text is the same."""
    out, lock = [], threading.Lock()

    def one(i):
        r = srv.json("/completion", {"prompt": PROMPT, "n_predict": 10, "temperature": 0, "stream": i % 2 == 1})
        with lock:
            out.append((i, r))
    th = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    want = completion(srv, n_predict=10)["content"]
    for i, (code, r) in out:
        check(code == 200, "request %d: %d" % (i, code))
        got = r["content"] if isinstance(r, dict) else "".join(json.loads(e)["content"] for e in sse(r))
        check(got == want, "request %d: %r != %r" % (i, got, want))


def case_openai_client(srv, tmp):
    mods = os.path.join(ROOT, "tests", "server", "node_modules", "openai")
    if not shutil.which("node") or not os.path.isdir(mods):
        raise testenv.missing(Skip, Fail)("node or tests/server/node_modules missing: run scripts/install-deps.sh")
    k = Server("--api-key", "k3y", "--parallel", "2", "-c", "1024", log=os.path.join(tmp, "oai.log"))
    try:
        env = dict(os.environ, SEQKV_URL=k.url, SEQKV_KEY="k3y")
        p = subprocess.run(["node", os.path.join(ROOT, "tests", "server", "openai_test.mjs")], env=env,
                           capture_output=True, timeout=120, cwd=ROOT)
        sys.stdout.write(p.stdout.decode())
        check(p.returncode == 0, "openai client cases failed: " + p.stderr.decode()[-500:])
    finally:
        k.stop()


def case_slot_save_restore(srv, tmp):
    """POST /slots/{id}?action=save|erase|restore (llama-server's shapes): the file is a .skv of
    a few bytes per token; an erased slot prefills everything again; a restored slot (also
    another one) serves the same prompt from its KV with the same greedy text; hostile file
    names and bad ids/actions get 400, a server without --slot-save-path 501."""
    d = os.path.join(tmp, "slots")
    s = Server("--parallel", "2", "-c", "512", "--slot-save-path", d, log=os.path.join(tmp, "slots.log"))
    try:
        first = completion(s, id_slot=1)
        n = first["tokens_evaluated"] + first["tokens_predicted"] - 1  # the last token is sampled, not run
        code, r = s.json("/slots/1?action=save", {"filename": "slot1.skv"})
        check(code == 200 and r["id_slot"] == 1 and r["filename"] == "slot1.skv" and r["n_saved"] == n and
              "save_ms" in r["timings"], "save: %d %s" % (code, r))
        size = os.path.getsize(os.path.join(d, "slot1.skv"))
        check(r["n_written"] == size and size < 256 + 2 * n, "n_written %s vs file %d bytes" % (r, size))
        with open(os.path.join(d, "slot1.skv"), "rb") as f:
            check(f.read(8) == b"\x89SKV\r\n\x1a\n", "not a .skv file")
        code, r = s.json("/slots/1?action=erase", method="POST")
        check(code == 200 and r == {"id_slot": 1, "n_erased": n}, "erase: %d %s" % (code, r))
        again = completion(s, id_slot=1)
        check(again["timings"]["cache_n"] == 0, "erased slot still reused: %s" % again["timings"])
        for slot in (0, 1):
            code, r = s.json("/slots/%d?action=restore" % slot, {"filename": "slot1.skv"})
            check(code == 200 and r["n_restored"] == n and r["n_read"] == size and "restore_ms" in r["timings"],
                  "restore into %d: %d %s" % (slot, code, r))
            hit = completion(s, id_slot=slot)
            check(hit["timings"]["cache_n"] == first["tokens_evaluated"] - 1 and hit["timings"]["prompt_n"] == 1,
                  "restored slot %d missed: %s" % (slot, hit["timings"]))
            check(hit["content"] == first["content"], "restored KV gives other text: %r" % hit["content"])
        hostile = ["../slot1.skv", "/etc/passwd", "a/b", ".hidden", "..", "", "x" * 256, "a\\b", "nul\u0000x",
                   "sp ace", 7, None]
        for name in hostile:
            for act in ("save", "restore"):
                code, r = s.json("/slots/0?action=" + act, {"filename": name})
                check(code == 400 and r["error"]["type"] == "invalid_request_error",
                      "%s %r: %d %s" % (act, name, code, r))
        check(sorted(os.listdir(d)) == ["slot1.skv"] and not os.path.exists(os.path.join(tmp, "slot1.skv")),
              "a hostile name wrote a file: %s" % os.listdir(d))
        with open(os.path.join(d, "junk.skv"), "wb") as f:
            f.write(b"SKV\x00" + os.urandom(200))
        bad = [("/slots/0?action=restore", {"filename": "junk.skv"}), ("/slots/0?action=restore", {"filename": "no.skv"}),
               ("/slots/9?action=save", {"filename": "x"}), ("/slots/x?action=save", {"filename": "x"}),
               ("/slots/0?action=fly", {"filename": "x"}), ("/slots/0", {"filename": "x"})]
        for path, body in bad:
            code, r = s.json(path, body)
            check(code == 400 and r["error"]["code"] == 400, "%s: %d %s" % (path, code, r))
        code, r = s.json("/slots/0?action=erase", method="POST")
        check(code == 200 and r["n_erased"] == 0, "the failed restore left tokens in the slot: %s" % r)
    finally:
        s.stop()
    plain = Server("-c", "256", log=os.path.join(tmp, "plain.log"))
    try:
        code, r = plain.json("/slots/0?action=save", {"filename": "x.skv"})
        check(code == 501 and r["error"]["type"] == "not_supported_error" and "--store" in r["error"]["message"],
              "neither --slot-save-path nor --store: %d %s" % (code, r))
    finally:
        plain.stop()


def case_slot_save_in_store(srv, tmp):
    """Two servers on one store, without --slot-save-path: a slot saved on A is a session
    "slot:NAME" of the store, restored verified into another slot on B, which then serves the
    same prompt from it (the whole prompt a cache hit) with A's greedy text; a second save of
    the name replaces the first; unknown names, names too long for the store (250 bytes
    left after the prefix) and hostile names get 400; a failed restore leaves the slot empty."""
    store = os.path.join(tmp, "slotstore")
    a = Server("--parallel", "2", "-c", "512", "--store", store, log=os.path.join(tmp, "sa.log"))
    b = Server("--parallel", "2", "-c", "512", "--store", store, log=os.path.join(tmp, "sb.log"))
    try:
        first = completion(a, id_slot=1)
        n = first["tokens_evaluated"] + first["tokens_predicted"] - 1
        code, r = a.json("/slots/1?action=save", {"filename": "conv.1"})
        check(code == 200 and r["n_saved"] == n and 0 < r["n_written"] < 2 * n and "save_ms" in r["timings"],
              "save: %d %s" % (code, r))
        ls = [line.split("\t") for line in store_cli("ls", store).splitlines()]
        check(any(x[0] == "slot:conv.1" and x[1] == str(n) for x in ls), "the store lacks slot:conv.1: %s" % ls)
        code, r = b.json("/slots/0?action=restore", {"filename": "conv.1"})
        check(code == 200 and r["n_restored"] == n and r["n_read"] > 0 and "restore_ms" in r["timings"],
              "restore on B: %d %s" % (code, r))
        store_hits = metric(b, "seqkv:store_hits_total")
        hit = completion(b, id_slot=0)
        check(hit["timings"]["cache_n"] == first["tokens_evaluated"] - 1 and hit["timings"]["prompt_n"] == 1,
              "B's restored slot missed: %s" % hit["timings"])
        check(metric(b, "seqkv:store_hits_total") == store_hits, "the hit came from the store, not the restored slot")
        check(hit["content"] == first["content"], "B's restored KV gives other text: %r" % hit["content"])
        other = completion(a, id_slot=1, prompt=PROMPT + " And the evening and the morning were the first day.")
        m = other["tokens_evaluated"] + other["tokens_predicted"] - 1
        code, r = a.json("/slots/1?action=save", {"filename": "conv.1"})
        check(code == 200 and r["n_saved"] == m != n, "second save: %d %s" % (code, r))
        code, r = b.json("/slots/1?action=restore", {"filename": "conv.1"})
        check(code == 200 and r["n_restored"] == m, "restore of the replaced save: %d %s" % (code, r))
        code, r = b.json("/slots/1?action=save", {"filename": "x" * 250})
        check(code == 200, "a 250-byte name: %d %s" % (code, r))
        for name in ("x" * 251, "../conv.1", "a/b", ".conv", "", 7):
            code, r = b.json("/slots/0?action=save", {"filename": name})
            check(code == 400 and r["error"]["type"] == "invalid_request_error", "save %r: %d %s" % (name, code, r))
        code, r = b.json("/slots/0?action=restore", {"filename": "nothing.here"})
        check(code == 400 and "no session" in r["error"]["message"], "restore of an unknown name: %d %s" % (code, r))
        code, r = b.json("/slots/0?action=erase", method="POST")
        check(code == 200 and r["n_erased"] == 0, "the failed restore left tokens in the slot: %s" % r)
    finally:
        a.stop()
        b.stop()


def case_jobs_together_start_together(srv, tmp):
    """A request of three prompts (three jobs queued at once) on four idle slots runs them at
    once: a slot that looked at the queue while another slot was still the best one for a
    job must look again when that slot takes a job (before, it slept until the next request
    arrived or the first job ended: the prompts ran one after another)."""
    s = Server("--parallel", "4", "-c", "2048", log=os.path.join(tmp, "together.log"))
    try:
        seen = []
        for word in ("Lily", "Tom", "Sam", "Ben", "Sue", "Max", "Anna", "Bob", "Jack", "Mia"):
            # a first word no slot holds yet: every slot matches the prompts equally, so all
            # three jobs first name the same (lowest) slot, the case that needs the re-look
            done = []
            body = {"prompt": [word + " " + PROMPT, word + " said so. " + PROMPT, word + " ran. " + PROMPT],
                    "n_predict": 240, "temperature": 0,
                    "ignore_eos": True, "cache_prompt": False}
            th = threading.Thread(target=lambda: done.append(s.json("/completion", body)[0]))
            th.start()
            most, t0 = 0, time.time()
            while time.time() - t0 < 10 and not done and most < 3:
                code, slots = s.json("/slots")
                if code == 200:
                    most = max(most, sum(1 for x in slots if x["is_processing"]))
            th.join()
            check(done == [200], "reply: %s" % done)
            seen.append(most)
        # the poller sees a moment, not the schedule: on a loaded 2-core machine a slot thread can
        # finish its prompt before another's is first run (CI once saw 2 in one round). Without the
        # re-look, 3 showed only when the slots happened to wake in order (2-5 of 10 rounds); with
        # it, in every round here: 8 of 10 tells them apart
        check(seen.count(3) >= 8, "three prompts queued together ran at once in %d of 10 rounds (most at "
              "once per round: %s)" % (seen.count(3), seen))
    finally:
        s.stop()


def simulate_shift(prompt, gen, n_ctx, n_keep, n_discard, bos):
    """The tokens a slot holds after generating gen from prompt with --context-shift."""
    held = list(prompt)
    for tok in gen[:-1]:  # the last sampled token is never run
        if len(held) + 1 >= n_ctx:
            keep = n_keep + (1 if n_keep >= 0 and held[0] == bos else 0) if n_keep >= 0 else len(prompt)
            keep = max(0, min(keep, n_ctx - 4))
            left = len(held) - keep
            drop = min(n_discard or left // 2, left - 1)
            held = held[:keep] + held[keep + drop:]
        held.append(tok)
    return held


def shift_matches_fresh_prefill(s):
    """After shifts the slot holds exactly the shifted token list, and its KV is a fresh
    prefill of it: continuing from the slot's KV gives the text a cold prefill gives."""
    code, with_bos = s.json("/tokenize", {"content": PROMPT, "add_special": True})
    code, without = s.json("/tokenize", {"content": PROMPT, "add_special": False})
    bos = with_bos["tokens"][0] if len(with_bos["tokens"]) > len(without["tokens"]) else None
    for n_keep, n_discard in ((4, 0), (-1, 0), (0, 7)):
        code, r = s.json("/completion", {"prompt": with_bos["tokens"], "n_predict": 140, "temperature": 0,
                                         "n_keep": n_keep, "n_discard": n_discard, "id_slot": 0,
                                         "return_tokens": True})
        check(code == 200 and r["truncated"] and len(r["tokens"]) == 140, "shift: %s" % r)
        held = simulate_shift(with_bos["tokens"], r["tokens"], 64, n_keep, n_discard, bos)
        code, slots = s.json("/slots")
        check(slots[0]["n_past"] == len(held), "slot holds %d, the shift should leave %d" % (slots[0]["n_past"],
                                                                                            len(held)))
        body = {"prompt": held, "n_predict": 6, "temperature": 0, "id_slot": 0}
        warm = s.json("/completion", body)[1]
        cold = s.json("/completion", dict(body, cache_prompt=False, id_slot=1))[1]
        check(warm["timings"]["cache_n"] == len(held) - 1, "the shifted KV was not reused: %s" % warm["timings"])
        check(warm["content"] == cold["content"], "n_keep %d: shifted KV continues %r, a fresh prefill %r" %
              (n_keep, warm["content"], cold["content"]))


def case_context_shift(srv, tmp):
    """--context-shift: a full context keeps n_keep tokens, drops half the rest, goes on
    (llama-server's semantics; the moved tokens are prefilled again, deterministically).
    Without it generation stops at the full context (finish "length", not truncated)."""
    s = Server("--parallel", "2", "-c", "128", "--context-shift", log=os.path.join(tmp, "shift.log"))
    try:
        base = {"prompt": PROMPT, "n_predict": 150, "temperature": 0}
        outs = []
        for body in (dict(base, n_keep=4, id_slot=0), dict(base, n_keep=4, id_slot=1), dict(base, n_keep=-1),
                     dict(base, n_keep=0, n_discard=8)):
            code, r = s.json("/completion", body)
            check(code == 200 and r["tokens_predicted"] == 150 and r["truncated"] is True and
                  r["stop_type"] == "limit", "shift %s: %d %s" % (body, code, r))
            outs.append(r["content"])
        check(outs[0] == outs[1], "two slots shifted differently: %r %r" % (outs[0][-80:], outs[1][-80:]))
        shift_matches_fresh_prefill(s)
        n_prompt = r["tokens_evaluated"]
        code, r = s.json("/completion", dict(base, n_predict=20))
        check(r["truncated"] is False, "no shift needed, truncated: %s" % r)
    finally:
        s.stop()
    code, r = srv.json("/completion", {"prompt": PROMPT, "n_predict": -1, "temperature": 0})
    # as llama-server: a generation stopped by the full context is "truncated"
    check(code == 200 and r["tokens_predicted"] == 512 - r["tokens_evaluated"] and r["truncated"] is True and
          r["stop_type"] in ("limit", "eos"), "no --context-shift: %s" % {k: r[k] for k in ("tokens_predicted",
                                                                                             "tokens_evaluated")})
    check(n_prompt < 64, "prompt too long for the test: %d" % n_prompt)


def case_health_loading(srv, tmp):
    """/health answers 503 {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}
    while the model loads (SEQKV_SERVE_TEST_LOAD_DELAY_MS widens the window), then 200."""
    s = Server("-c", "128", log=os.path.join(tmp, "loading.log"), env={"SEQKV_SERVE_TEST_LOAD_DELAY_MS": "3000"},
               until="answers 503 until")
    try:
        code, r = s.json("/health")
        check(code == 503 and r == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
              "health while loading: %d %s" % (code, r))
        code, r = s.json("/completion", {"prompt": "x", "n_predict": 1})
        check(code == 503 and r["error"]["type"] == "unavailable_error", "completion while loading: %d %s" % (code, r))
        for _ in range(200):
            code, r = s.json("/health")
            if code == 200:
                break
            threading.Event().wait(0.05)
        check(code == 200 and r == {"status": "ok"}, "health after loading: %d %s" % (code, r))
    finally:
        s.stop()


def case_store_map_size_env(srv, tmp):
    """$SEQKV_STORE_MAP_SIZE reaches the server's store too (scripts/reliability.sh runs the
    server under Valgrind with 1 GiB: it cannot map the 64 GiB default): with a 128 KiB map
    the reply is served and the put that does not fit is logged as a full store."""
    log = os.path.join(tmp, "mapsize.log")
    s = Server("--store", os.path.join(tmp, "small"), "-c", "512", log=log, env={"SEQKV_STORE_MAP_SIZE": str(128 << 10)})
    try:
        completion(s, prompt=PROMPT * 8, n_predict=2)  # ~1 MB of KV: more than the map
        for _ in range(200):
            if "the store is full" in open(log, errors="replace").read():
                break
            threading.Event().wait(0.05)
        check("the store is full" in open(log, errors="replace").read(), "no full store in the log: " +
              open(log, errors="replace").read()[-1000:])
    finally:
        s.stop()


CASES = [case_endpoints, case_tokenize_roundtrip, case_greedy_deterministic, case_prompt_cache, case_llama_stream,
         case_oai_stream_shape, case_stop_strings, case_errors, case_parallel_greedy, case_api_key,
         case_queue_full_503, case_store_restart, case_stream_put, case_put_takes_slot_work,
         case_shared_store_keeps_slot,
         case_conversation_moves_between_servers, case_openai_client,
         case_slot_save_restore, case_slot_save_in_store, case_jobs_together_start_together, case_context_shift, case_health_loading, case_store_map_size_env]


def main():
    rep = Reporter(NAME)
    tmp = tempfile.mkdtemp(prefix="seqkv-serve-")
    try:
        srv = Server("--parallel", "2", "-c", "1024", "--store", os.path.join(tmp, "main"),
                     log=os.path.join(tmp, "main.log"))
    except Exception as e:
        rep.report("start", "FAIL", str(e))
        return 1
    try:
        for c in CASES:
            rep.run_case(c, srv, tmp)
        rc = srv.stop()
        tail = "" if rc == 0 else open(srv.log, errors="replace").read()[-3000:]
        rep.report("clean_shutdown", "PASS" if rc == 0 else "FAIL", "" if rc == 0 else "exit status %s:\n%s" % (rc, tail))
    finally:
        if srv.p.poll() is None:
            srv.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
