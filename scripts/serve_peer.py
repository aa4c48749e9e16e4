#!/usr/bin/python3
"""seqkv serve against llama.cpp's llama-server on the same model, slots and load (issue 48;
figures in bench/results/serve.md, "Side by side with llama-server").

    scripts/serve_peer.py [--model M] [--servers seqkv-store,seqkv,llama] [--parallel 4]
                          [--threads 2] [--requests 32] [--concurrency 4] [--prompt-chars 420]
                          [--n-predict 32] [--restart-convs 4] [--restart-chars 1800] [--json OUT]

Servers: `seqkv` (seqkv serve without a store), `seqkv-store` (with a fresh --store), `llama`
(llama-server from scripts/peer/build_llama_server.sh, or $LLAMA_SERVER). Each gets
-np PARALLEL, -c PARALLEL x 1024, -t THREADS, the same model file.

1. Throughput: REQUESTS streamed /completion requests, CONCURRENCY at a time, each a
   distinct prompt (PROMPT_CHARS of tests/data/model_ref/heldout.txt from a different
   offset: ~100 tokens on the bundled model), temperature 0, N_PREDICT tokens. Reports
   generated tokens/s over the wall time and time to first token p50/p99 (request sent to the
   first chunk with text).
2. Returning conversations: RESTART_CONVS conversations get a long first turn
   (RESTART_CHARS characters, default 1,800), the server is restarted (SIGTERM, start again: what a deploy or a crash
   does), and each conversation's next turn (its history plus a new line) is sent one at
   a time: time to first token after the restart. seqkv with a store serves the history
   from it; llama-server (and seqkv without a store) prefill it again.

Wall-clock figures depend on the machine's load: run it on an idle machine (the script
prints the load average before and after) and record the CPU (lscpu)."""
import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


class Peer:
    """One server process (seqkv serve or llama-server) on a free port."""

    def __init__(self, kind, args, tmp):
        self.kind, self.tmp, self.port = kind, tmp, free_port()
        self.store = os.path.join(tmp, "store") if kind == "seqkv-store" else None
        if kind == "llama":
            binary = os.environ.get("LLAMA_SERVER") or subprocess.run(
                [os.path.join(ROOT, "scripts", "peer", "build_llama_server.sh"), "--path"], capture_output=True,
                text=True).stdout.strip()
            self.cmd = [binary, "-m", args.model, "--no-webui", "--jinja"]
        else:
            seqkv = os.path.join(ROOT, os.environ.get("SEQKV_BUILD", "build"), "seqkv")
            self.cmd = [seqkv, "serve", "-m", args.model, "--chat-template", "simple"]
            if self.store:
                self.cmd += ["--store", self.store, "--cache-budget", args.cache_budget]
        self.cmd += ["--host", "127.0.0.1", "--port", str(self.port), "-np", str(args.parallel), "-c",
                     str(args.parallel * args.ctx), "-t", str(args.threads)]
        self.start()

    def start(self):
        self.log = open(os.path.join(self.tmp, "%s.log" % self.kind), "a")
        self.p = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 120:
            if self.p.poll() is not None:
                raise RuntimeError("%s exited: see %s" % (self.kind, self.log.name))
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("%s did not answer /health" % self.kind)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)  # seqkv drains its queue of puts first
        try:
            self.p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()

    def cpu_s(self):
        with open("/proc/%d/stat" % self.p.pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def stream_completion(port, prompt, n_predict):
    """-> (seconds to the first chunk with text, tokens generated, total seconds)."""
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "temperature": 0, "stream": True,
                       "cache_prompt": True})
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/completion", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    first, n, buf = None, 0, b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(4096)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            d = json.loads(ev[6:])
            if d.get("content") and first is None:
                first = time.time() - t0
            if d.get("stop"):
                n = d.get("tokens_predicted") or d.get("timings", {}).get("predicted_n", 0)
    return (first if first is not None else time.time() - t0), n, time.time() - t0


def client_proc(port, prompts, n_predict, nxt, lock, out):
    """One client process: takes the next request index until none is left; sends
    (index, seconds to the first chunk, tokens) or (index, None, error text) to out."""
    while True:
        with lock:
            i = nxt.value
            nxt.value += 1
        if i >= len(prompts):
            out.put(None)
            return
        try:
            f, n, _ = stream_completion(port, prompts[i], n_predict)
            out.put((i, f, n))
        except (OSError, RuntimeError) as e:
            out.put((i, None, str(e)))


def throughput(peer, args, text):
    """CONCURRENCY client processes (not threads: a Python thread waiting for the GIL while
    the others parse their streams would count that wait as the server's latency)."""
    prompts = [text[i * 997 % (len(text) - args.prompt_chars):][:args.prompt_chars] for i in range(args.requests)]
    ctx = multiprocessing.get_context("fork")
    nxt, lock, out = ctx.Value("i", 0), ctx.Lock(), ctx.Queue()
    cpu0, t0 = peer.cpu_s(), time.time()
    procs = [ctx.Process(target=client_proc, args=(peer.port, prompts, args.n_predict, nxt, lock, out))
             for _ in range(args.concurrency)]
    for p in procs:
        p.start()
    ttft, toks, errors, order, done = [], 0, [], [], 0
    while done < len(procs):
        r = out.get()
        if r is None:
            done += 1
        elif r[1] is None:
            errors.append(r[2])
        else:
            ttft.append(r[1])
            order.append((r[0], round(r[1] * 1e3, 1)))
            toks += r[2]
    wall = time.time() - t0
    for p in procs:
        p.join()
    return {"requests": args.requests, "errors": len(errors), "tokens": toks, "wall_s": round(wall, 3),
            "tokens_per_s": round(toks / wall, 1), "ttft_p50_ms": round(pct(ttft, 50) * 1e3, 1),
            "ttft_p99_ms": round(pct(ttft, 99) * 1e3, 1), "server_cpu_s": round(peer.cpu_s() - cpu0, 2),
            "ttft_ms_by_request": [f for _, f in sorted(order)]}


def returning(peer, args, text):
    n = args.restart_chars
    convs = [text[i * 3001 % (len(text) - n):][:n] for i in range(args.restart_convs)]
    hist = []
    for c in convs:
        _, _, _ = stream_completion(peer.port, c, 8)
        hist.append(c)
    time.sleep(1.0)  # seqkv puts a finished conversation after its reply
    peer.stop()
    peer.start()
    ttft = []
    for h in hist:
        f, _, _ = stream_completion(peer.port, h + " And", 8)
        ttft.append(f)
    return {"conversations": len(hist), "ttft_after_restart_ms": [round(x * 1e3, 1) for x in ttft],
            "ttft_p50_ms": round(pct(ttft, 50) * 1e3, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-4m.gguf"))
    ap.add_argument("--servers", default="seqkv-store,seqkv,llama")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--prompt-chars", type=int, default=420)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--restart-convs", type=int, default=4)
    ap.add_argument("--restart-chars", type=int, default=1800)
    ap.add_argument("--cache-budget", default="1G", help="seqkv-store's --cache-budget (materialised KV kept)")
    ap.add_argument("--json")
    args = ap.parse_args()
    text = open(TEXT).read()
    out = {"model": os.path.basename(args.model), "load_before": os.getloadavg()[0], "args": vars(args), "servers": {}}
    for kind in args.servers.split(","):
        tmp = tempfile.mkdtemp(prefix="skv-peer-")
        try:
            peer = Peer(kind, args, tmp)
            stream_completion(peer.port, text[:200], 4)  # warm-up (page-in, first allocations)
            r = {"throughput": throughput(peer, args, text)}
            if args.restart_convs:
                r["returning"] = returning(peer, args, text)
            peer.stop()
            out["servers"][kind] = r
            print("%-12s %s" % (kind, json.dumps(r)), flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out["load_after"] = os.getloadavg()[0]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
