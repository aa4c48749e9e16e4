#!/usr/bin/python3
"""Load test of seqkv serve (not part of make test; docs/server.md records its figures).

    tests/server/load.py [--clients 32] [--turns 32] [--parallel 4] [--n-predict 24]

Starts the server (with a fresh store), runs CLIENTS threads, each a conversation of TURNS
streamed chat requests (each turn's prompt is the whole conversation so far, as a chat
client sends it), while one more thread polls /health. Prints errors, request latency
p50/p99, time to first token p50/p99, generated tokens/s, the server's peak RSS, and the
cached share of prompt tokens. Then the restart figure: kill -9, restart, and compare the
time to first token of a returning conversation with a cold prefill of the same prompt."""
import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

OPENERS = ["In the beginning", "And the LORD said unto Moses", "Blessed is the man", "The LORD is my shepherd",
           "Now the serpent was more subtil", "And it came to pass", "Hear, O Israel", "Vanity of vanities"]


def chat(port, messages, n_predict, stats):
    body = json.dumps({"messages": messages, "max_tokens": n_predict, "temperature": 0.7, "seed": len(messages),
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        stats["errors"].append(r.status)
        r.read()
        return ""
    text, ttft, usage, buf = "", None, None, b""
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        usage = ev.get("usage") or usage
        for ch in ev["choices"]:
            piece = ch.get("delta", {}).get("content")
            if piece:
                ttft = ttft or time.time() - t0
                text += piece
    c.close()
    stats["lat"].append(time.time() - t0)
    stats["ttft"].append(ttft or time.time() - t0)
    if usage:
        stats["gen"] += usage["completion_tokens"]
        stats["prompt"] += usage["prompt_tokens"]
        stats["cached"] += usage["prompt_tokens_details"]["cached_tokens"]
    return text


def client(port, i, turns, n_predict, stats, lock):
    msgs = [{"role": "user", "content": OPENERS[i % len(OPENERS)] + " (%d)" % i}]
    for _ in range(turns):
        local = {"errors": [], "lat": [], "ttft": [], "gen": 0, "prompt": 0, "cached": 0}
        try:
            reply = chat(port, msgs, n_predict, local)
        except Exception as e:  # a dropped connection is an error
            local["errors"].append(repr(e))
            reply = ""
        with lock:
            for k, v in local.items():
                stats[k] = stats[k] + v
        msgs = msgs + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
        if len(msgs) > 16:  # keep the conversation inside the context
            msgs = msgs[:1] + msgs[-3:]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


def rss_peak_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def health_poller(port, stop, out):
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            out.append(c.getresponse().status)
            c.close()
        except Exception:
            out.append(0)
        time.sleep(0.2)


def ttft_once(srv, prompt):
    t0 = time.time()
    code, text = srv.curl("/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0})
    r = json.loads(text)
    return time.time() - t0, r["timings"]["cache_n"]


def restart_figure(args, store, tmp):
    """TTFT of a long returning prompt after kill -9 + restart vs. a cold prefill."""
    text = open(os.path.join(os.path.dirname(__file__), "..", "data", "model_ref", "heldout.txt")).read()
    prompt = text[:1800]
    s = Server("--store", store, "-c", str(args.ctx), "--parallel", "1", log=os.path.join(tmp, "r1.log"))
    ttft_once(s, prompt)
    time.sleep(1.0)  # the put runs after the reply
    s.kill()
    s = Server("--store", store, "-c", str(args.ctx), "--parallel", "1", log=os.path.join(tmp, "r2.log"))
    warm, cached = ttft_once(s, prompt)
    s.stop()
    c = Server("-c", str(args.ctx), "--parallel", "1", log=os.path.join(tmp, "r3.log"))
    cold, _ = ttft_once(c, prompt)
    c.stop()
    print("restart: prompt of %d cached positions: TTFT %.1f ms after kill -9 + restart vs %.1f ms cold prefill"
          % (cached, warm * 1e3, cold * 1e3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--turns", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=24)
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="seqkv-load-")
    store = os.path.join(tmp, "store")
    srv = Server("--store", store, "--parallel", args.parallel, "-c", args.ctx, "--cache-budget", "16M",
                 log=os.path.join(tmp, "load.log"))
    stats = {"errors": [], "lat": [], "ttft": [], "gen": 0, "prompt": 0, "cached": 0}
    lock, stop, health = threading.Lock(), threading.Event(), []
    hp = threading.Thread(target=health_poller, args=(srv.port, stop, health))
    hp.start()
    t0 = time.time()
    th = [threading.Thread(target=client, args=(srv.port, i, args.turns, args.n_predict, stats, lock))
          for i in range(args.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    stop.set()
    hp.join()
    rss, cpu = rss_peak_mib(srv.p.pid), cpu_seconds(srv.p.pid)
    srv.stop()
    n = len(stats["lat"])
    print("requests %d (%d clients x %d turns, --parallel %d, n_predict %d), errors %d %s" %
          (n + len(stats["errors"]), args.clients, args.turns, args.parallel, args.n_predict, len(stats["errors"]),
           stats["errors"][:5]))
    print("latency p50 %.0f ms p99 %.0f ms; TTFT p50 %.0f ms p99 %.0f ms; wall %.1f s" %
          (pct(stats["lat"], 50) * 1e3, pct(stats["lat"], 99) * 1e3, pct(stats["ttft"], 50) * 1e3,
           pct(stats["ttft"], 99) * 1e3, wall))
    print("generated %d tokens: %.0f tokens/s; prompt tokens %d, cached %d (%.0f%%)" %
          (stats["gen"], stats["gen"] / wall, stats["prompt"], stats["cached"],
           100.0 * stats["cached"] / max(1, stats["prompt"])))
    print("server peak RSS %.0f MiB, CPU %.1f s in %.1f s wall; /health answered %d/%d polls with 200" %
          (rss, cpu, wall, health.count(200), len(health)))
    restart_figure(args, os.path.join(tmp, "restart"), tmp)


if __name__ == "__main__":
    main()
