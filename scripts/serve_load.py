#!/usr/bin/python3
"""Load and persistence run of `seqkv serve` (issue 17; figures in bench/results/serve.md).

    scripts/serve_load.py [--clients 32] [--turns 32] [--parallel 4] [--n-predict 24]
                          [--kill-clients 8] [--kill-turns 12] [--json OUT]

1. Load: the server on the bundled model with a fresh store (--cache-budget 16M). CLIENTS
   threads, each a streamed chat conversation of TURNS requests (each turn's prompt is the
   whole conversation so far, as chat clients send it), while a thread polls /health and
   another samples the server's RSS. Reports errors (0 required), latency and time to first
   token p50/p99, generated tokens/s, the cached share of prompt tokens, peak RSS against
   the bound the configured limits give, /health answers, the server's CPU seconds.
2. Persistence: a second server on a fresh store, KILL_CLIENTS greedy conversations, and
   `kill -9` once half of their requests are answered (requests in flight then fail: that
   is the point). Then every session the store committed restores verified (`seqkv store
   get`, KV digest checked),
   and after a restart every client's next turn is served from the store (cached_tokens >
   0) with exactly the text a server without any cache gives.
3. Resume: a long prompt put, kill -9, restart, the same prompt: time to first token and
   the server's CPU time for it, against a cold prefill on a server without the store.

Wall-clock figures depend on the machine's load; CPU seconds and ratios measured in the
same run are the comparable ones. The exit status is 1 when a required property fails."""
import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
from harness import Server  # noqa: E402

# The bundled model has no chat template of its own; seqkv serve falls back to chatml as
# llama-server does, whose markers its vocabulary lacks: the figures use its own "simple".
TEMPLATE = ("--chat-template", "simple")
from clitest import SEQKV  # noqa: E402

OPENERS = ["In the beginning", "And the LORD said unto Moses", "Blessed is the man", "The LORD is my shepherd",
           "Now the serpent was more subtil", "And it came to pass", "Hear, O Israel", "Vanity of vanities"]
CONN_MEMORY, MAX_BODY, PUT_QUEUE = 64 << 10, 4 << 20, 64  # src/server/limits.h


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


def proc_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chat(port, messages, n_predict, temperature, seed):
    """One streamed chat request: (text, ttft, latency, usage); raises on any failure."""
    body = json.dumps({"messages": messages, "max_tokens": n_predict, "temperature": temperature, "seed": seed,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError("HTTP %d %s" % (r.status, r.read()[:200]))
        text, ttft, usage, done = "", None, None, False
        for line in r:
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
            if not line.startswith(b"data: {"):
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError("stream error %s" % ev["error"])
            usage = ev.get("usage") or usage
            for ch in ev["choices"]:
                if ch.get("delta", {}).get("content"):
                    ttft = ttft or time.time() - t0
                    text += ch["delta"]["content"]
        if not done or not usage:
            raise RuntimeError("stream ended early")
        return text, ttft or time.time() - t0, time.time() - t0, usage
    finally:
        c.close()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.errors, self.lat, self.ttft = [], [], []
        self.gen = self.prompt = self.cached = 0

    def ok(self, ttft, lat, usage):
        with self.lock:
            self.lat.append(lat)
            self.ttft.append(ttft)
            self.gen += usage["completion_tokens"]
            self.prompt += usage["prompt_tokens"]
            self.cached += usage["prompt_tokens_details"]["cached_tokens"]

    def error(self, e):
        with self.lock:
            self.errors.append(repr(e)[:200])


def next_turn(msgs, reply):
    msgs = msgs + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    return msgs[:1] + msgs[-3:] if len(msgs) > 16 else msgs  # stay inside the context


def conversation(port, i, turns, args, stats, temperature, log=None, stop=None):
    msgs = [{"role": "user", "content": OPENERS[i % len(OPENERS)] + " (%d)" % i}]
    for t in range(turns):
        if stop is not None and stop.is_set():
            return
        try:
            reply, ttft, lat, usage = chat(port, msgs, args.n_predict, temperature, 1000 * i + t)
        except Exception as e:
            stats.error(e)
            return
        stats.ok(ttft, lat, usage)
        if log is not None:
            log.append((list(msgs), reply))
        msgs = next_turn(msgs, reply)


def poll(port, stop, health, rss, pid):
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            health.append(c.getresponse().status)
            c.close()
        except Exception:
            health.append(0)
        rss.append(proc_kib(pid, "VmRSS"))
        time.sleep(0.2)


def run_threads(fn, n):
    th = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    return th


def model_sizes():
    """(model file bytes, f32 KV bytes per position) from `seqkv info`."""
    out = subprocess.run([SEQKV, "info"], capture_output=True, text=True, timeout=60).stdout
    file_mib = float(out.split("file ")[1].split()[0])
    kv = next(float(line.split()[1]) for line in out.splitlines() if line.strip().startswith("f32 "))
    return int(file_mib * 2 ** 20), int(kv)


def load_phase(args, tmp, out):
    srv = Server(*TEMPLATE, "--store", os.path.join(tmp, "load"), "--parallel", args.parallel, "-c", args.ctx * args.parallel, "--cache-budget",
                 "16M", log=os.path.join(tmp, "load.log"))
    pid = srv.p.pid
    rss0 = proc_kib(pid, "VmRSS")
    stats, stop, health, rss = Stats(), threading.Event(), [], []
    hp = threading.Thread(target=poll, args=(srv.port, stop, health, rss, pid))
    hp.start()
    t0, cpu0 = time.time(), cpu_seconds(pid)
    for t in run_threads(lambda i: conversation(srv.port, i, args.turns, args, stats, 0.7), args.clients):
        t.join()
    wall, cpu = time.time() - t0, cpu_seconds(pid) - cpu0
    stop.set()
    hp.join()
    peak = proc_kib(pid, "VmHWM")
    rc = srv.stop()
    model_b, kv_pos_b = model_sizes()
    # what the configured limits allow above the startup RSS: the model file (mapped), each
    # slot's f32 KV, each connection's buffer and largest body, the store writer's queue, the budget
    parts = {"model_file": model_b, "slots_kv": args.parallel * args.ctx * kv_pos_b,
             "connections": args.clients * (CONN_MEMORY + MAX_BODY), "put_queue": PUT_QUEUE * args.ctx * 4,
             "cache_budget": 16 << 20}
    bound = rss0 + sum(parts.values()) // 1024
    out["load"] = {"requests": len(stats.lat) + len(stats.errors), "errors": len(stats.errors),
                   "error_samples": stats.errors[:5], "clients": args.clients, "turns": args.turns,
                   "parallel": args.parallel, "n_predict": args.n_predict, "ctx": args.ctx,
                   "lat_p50_ms": pct(stats.lat, 50) * 1e3, "lat_p99_ms": pct(stats.lat, 99) * 1e3,
                   "ttft_p50_ms": pct(stats.ttft, 50) * 1e3, "ttft_p99_ms": pct(stats.ttft, 99) * 1e3,
                   "wall_s": wall, "server_cpu_s": cpu, "gen_tokens": stats.gen, "tokens_per_s": stats.gen / wall,
                   "tokens_per_cpu_s": stats.gen / max(cpu, 1e-9), "prompt_tokens": stats.prompt,
                   "cached_tokens": stats.cached, "rss_start_mib": rss0 / 1024.0, "rss_peak_mib": peak / 1024.0,
                   "rss_last_quarter_max_mib": max(rss[len(rss) * 3 // 4:] or [0]) / 1024.0,
                   "rss_bound_mib": bound / 1024.0, "rss_bound_parts_mib": {k: v / 2.0 ** 20 for k, v in parts.items()}, "health_ok": health.count(200), "health_polls": len(health),
                   "clean_exit": rc == 0}


def store_sessions(store):
    p = subprocess.run([SEQKV, "store", "ls", store], capture_output=True, text=True, timeout=120)
    if p.returncode:
        raise RuntimeError("store ls: " + p.stderr)
    return [line.split()[0] for line in p.stdout.splitlines() if line.startswith("srv-")]


def verify_store(store):
    names = store_sessions(store)
    bad = []
    for name in names:
        p = subprocess.run([SEQKV, "store", "get", store, name], capture_output=True, text=True, timeout=300)
        if p.returncode:
            bad.append("%s: %s" % (name, p.stderr.strip()[-200:]))
    return names, bad


def kill_phase(args, tmp, out):
    store = os.path.join(tmp, "kill")
    srv = Server(*TEMPLATE, "--store", store, "--parallel", args.parallel, "-c", args.ctx * args.parallel, log=os.path.join(tmp, "kill1.log"))
    stats, logs, stop = Stats(), [[] for _ in range(args.kill_clients)], threading.Event()
    th = run_threads(lambda i: conversation(srv.port, i, args.kill_turns, args, stats, 0.0, logs[i], stop),
                     args.kill_clients)
    target = args.kill_clients * args.kill_turns // 2
    while len(stats.lat) < target and any(t.is_alive() for t in th):
        time.sleep(0.05)
    srv.kill()  # kill -9 with requests in flight
    stop.set()
    for t in th:
        t.join()
    answered = len(stats.lat)
    names, bad = verify_store(store)
    s2 = Server(*TEMPLATE, "--store", store, "--parallel", args.parallel, "-c", args.ctx * args.parallel, log=os.path.join(tmp, "kill2.log"))
    cold = Server(*TEMPLATE, "--parallel", 1, "-c", args.ctx, log=os.path.join(tmp, "cold.log"))
    resumed, wrong, uncached = 0, [], []
    try:
        for i, log in enumerate(logs):
            if not log:
                continue
            msgs = next_turn(*log[-1])
            a = chat(s2.port, msgs, args.n_predict, 0.0, 7)
            b = chat(cold.port, msgs, args.n_predict, 0.0, 7)
            resumed += 1
            if a[3]["prompt_tokens_details"]["cached_tokens"] == 0:
                uncached.append(i)
            if a[0] != b[0]:
                wrong.append(i)
    finally:
        s2.stop()
        cold.stop()
    out["kill"] = {"clients": args.kill_clients, "answered_before_kill": answered, "failed_in_flight": len(stats.errors),
                   "committed_sessions": len(names), "restore_failures": bad[:5], "n_restore_failures": len(bad),
                   "resumed_clients": resumed,
                   "resumed_uncached": uncached, "resumed_text_differs": wrong}


def ttft(srv, prompt):
    """(wall seconds, server CPU seconds, cached positions) of a 1-token completion."""
    cpu0, t0 = cpu_seconds(srv.p.pid), time.time()
    code, r = srv.json("/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0})
    if code != 200:
        raise RuntimeError("completion: %s" % r)
    return time.time() - t0, cpu_seconds(srv.p.pid) - cpu0, r["timings"]["cache_n"]


def resume_phase(args, tmp, out):
    text = open(os.path.join(HERE, "..", "tests", "data", "model_ref", "heldout.txt")).read()
    prompt = text[:args.resume_chars]
    store = os.path.join(tmp, "resume")
    s = Server(*TEMPLATE, "--store", store, "-c", args.ctx, "--parallel", 1, log=os.path.join(tmp, "r1.log"))
    ttft(s, prompt)
    for _ in range(200):  # the put runs after the reply
        if "seqkv:store_puts_total 1" in s.curl("/metrics")[1]:
            break
        time.sleep(0.05)
    s.kill()
    warm, cold = [], []
    for _ in range(args.resume_reps):
        s = Server(*TEMPLATE, "--store", store, "-c", args.ctx, "--parallel", 1, log=os.path.join(tmp, "r2.log"))
        warm.append(ttft(s, prompt))
        s.kill()
        c = Server(*TEMPLATE, "-c", args.ctx, "--parallel", 1, log=os.path.join(tmp, "r3.log"))
        cold.append(ttft(c, prompt))
        c.stop()
    med = lambda xs, k: sorted(x[k] for x in xs)[len(xs) // 2]  # noqa: E731
    out["resume"] = {"prompt_positions": warm[0][2] + 1, "cached": warm[0][2], "reps": args.resume_reps,
                     "warm_ttft_ms": med(warm, 0) * 1e3, "cold_ttft_ms": med(cold, 0) * 1e3,
                     "warm_cpu_ms": med(warm, 1) * 1e3, "cold_cpu_ms": med(cold, 1) * 1e3}


def report(out):
    ld, k, r = out.get("load"), out.get("kill"), out.get("resume")
    if ld:
        print("load: %d requests (%d clients x %d turns, --parallel %d, max_tokens %d), %d errors %s" %
              (ld["requests"], ld["clients"], ld["turns"], ld["parallel"], ld["n_predict"], ld["errors"],
               ld["error_samples"]))
        print("  latency p50 %.0f ms p99 %.0f ms; TTFT p50 %.0f ms p99 %.0f ms; %d tokens in %.1f s: %.1f tokens/s"
              " (%.1f per server CPU s; server CPU %.1f s)" % (ld["lat_p50_ms"], ld["lat_p99_ms"], ld["ttft_p50_ms"],
                                                              ld["ttft_p99_ms"], ld["gen_tokens"], ld["wall_s"],
                                                              ld["tokens_per_s"], ld["tokens_per_cpu_s"],
                                                              ld["server_cpu_s"]))
        print("  cached %d of %d prompt tokens; RSS start %.0f MiB, peak %.0f MiB (last quarter max %.0f), bound %.0f"
              " MiB; /health %d/%d answered 200" % (ld["cached_tokens"], ld["prompt_tokens"], ld["rss_start_mib"],
                                                   ld["rss_peak_mib"], ld["rss_last_quarter_max_mib"],
                                                   ld["rss_bound_mib"], ld["health_ok"], ld["health_polls"]))
    if k:
        print("kill -9: after %d answered requests (%d in flight failed); %d committed sessions, %d restore failures"
              " %s; %d clients resumed, uncached %s, text differs %s" %
              (k["answered_before_kill"], k["failed_in_flight"], k["committed_sessions"], k["n_restore_failures"],
               k["restore_failures"], k["resumed_clients"],
               k["resumed_uncached"], k["resumed_text_differs"]))
    if r:
        print("resume: %d-position prompt (%d from the store): TTFT %.1f ms after kill -9 + restart vs %.1f ms cold"
              " (%.1fx); server CPU %.1f ms vs %.1f ms (%.1fx); median of %d" %
              (r["prompt_positions"], r["cached"], r["warm_ttft_ms"], r["cold_ttft_ms"],
               r["cold_ttft_ms"] / max(r["warm_ttft_ms"], 1e-9), r["warm_cpu_ms"], r["cold_cpu_ms"],
               r["cold_cpu_ms"] / max(r["warm_cpu_ms"], 1e-9), r["reps"]))


def failures(out):
    f = []
    ld, k = out.get("load"), out.get("kill")
    if ld and (ld["errors"] or ld["health_ok"] != ld["health_polls"] or ld["rss_peak_mib"] > ld["rss_bound_mib"]
               or not ld["clean_exit"]):
        f.append("load")
    if k and (k["n_restore_failures"] or k["index_records_missing_from_store"] or k["resumed_uncached"] or
              k["resumed_text_differs"] or not k["committed_sessions"] or not k["resumed_clients"]):
        f.append("kill")
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--turns", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=24)
    ap.add_argument("--ctx", type=int, default=1024)  # per slot (serve -c gets ctx x parallel)
    ap.add_argument("--kill-clients", type=int, default=8)
    ap.add_argument("--kill-turns", type=int, default=12)
    ap.add_argument("--resume-chars", type=int, default=1800)
    ap.add_argument("--resume-reps", type=int, default=3)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="seqkv-serve-load-")
    out = {}
    try:
        if not args.skip_load:
            load_phase(args, tmp, out)
        kill_phase(args, tmp, out)
        resume_phase(args, tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    bad = failures(out)
    print("serve_load: " + ("FAILED: " + ", ".join(bad) if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
