#!/usr/bin/python3
"""Queued model-coded sessions on the 1.1B model against their raw-token prefill (issue 16's
"aggregate restore throughput of 32 model-coded sessions at least 0.8x raw-token prefill
throughput on the 1.1B model"; bench/results/restore.md, the README).

    /usr/bin/python3 bench/queue_restore.py [--rounds N] [--threads T] [--model GGUF]
                                            [--bytes B] [--ctx C] [--work DIR] [--build DIR]

The model is the random-weight TinyLlama-1.1B geometry in F16 (scripts/peer/gen_model.py
tinyllama-1.1b, 2.2 GB), written to --model when that file is missing (~20 s). The first B
bytes of held-out KJV (tests/data/model_ref/heldout.txt; default 2,700: 34 sessions of up to
64 tokens, 2,117 tokens) are stored twice with `seqkv compress --segment -c C`, once with
codec tokens and once with codec model (about a minute each), in --work (default: a
temporary directory, removed after). Then N rounds (default 3) restore both files with
`seqkv restore -m MODEL FILE -t T -o /dev/null`, the order alternating, every restore
verified against the stored KV digests (the command's default). Per round: the command's
own "restored ... in S s" (the restore after the load) and the wall time of the process;
then model vs tokens on the best and the median of each.

A round takes ~1.5-2 minutes at 1 thread on the project's 2-core VMs. Random weights give
no draft a chance, so the model-coded restore runs one token per session per pass: the
queue in lockstep, as the library's batch width chooses (all 34 in one wave).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESTORED = re.compile(r"restored (\d+) tokens .* in ([0-9.]+) s")


def fail(msg):
    print("queue_restore: " + msg, file=sys.stderr)
    sys.exit(1)


def cpu_line():
    name, flags = "unknown CPU", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "unknown CPU":
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = line
    except OSError:
        pass
    isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
    return "%s, %d cores, %s" % (name, os.cpu_count() or 0, isa)


def run(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        fail("%s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return wall, r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default=os.path.join(os.environ.get("SEQKV_PEER_DIR", "/tmp"), "tinyllama-1.1b-F16.gguf"))
    ap.add_argument("--bytes", type=int, default=2700)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--work", default=None, help="keep the .skv files here (reused when present)")
    ap.add_argument("--build", default=os.environ.get("SEQKV_BUILD", "build"))
    a = ap.parse_args()
    if a.rounds < 1 or a.threads < 1 or a.bytes < 1 or a.ctx < 2:
        fail("--rounds, --threads and --bytes must be >= 1, --ctx >= 2")
    seqkv = os.path.join(a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build), "seqkv")
    if not os.access(seqkv, os.X_OK):
        fail("%s not built (make)" % seqkv)
    if not os.path.exists(a.model):
        print("writing the random-weight 1.1B model to %s (2.2 GB) ..." % a.model, file=sys.stderr)
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/peer/gen_model.py"), "tinyllama-1.1b", a.model],
                       check=True)
    work = a.work or tempfile.mkdtemp(prefix="queue_restore.")
    os.makedirs(work, exist_ok=True)
    try:
        text = os.path.join(work, "queue.txt")
        with open(os.path.join(ROOT, "tests/data/model_ref/heldout.txt"), "rb") as f:
            data = f.read()[:a.bytes]
        with open(text, "wb") as f:
            f.write(data)
        files = {}
        for codec in ("tokens", "model"):
            files[codec] = os.path.join(work, "queue.%s.%d.skv" % (codec, a.ctx))
            if not os.path.exists(files[codec]):
                print("compress --codec %s ..." % codec, file=sys.stderr)
                run([seqkv, "compress", "-m", a.model, "-f", text, "-o", files[codec], "--codec", codec,
                     "--segment", "-c", str(a.ctx)])
        load = os.getloadavg()
        rows, res = [], {c: ([], []) for c in files}
        n_tokens = 0
        for r in range(a.rounds):
            order = ["tokens", "model"] if r % 2 == 0 else ["model", "tokens"]
            got = {}
            for codec in order:
                wall, out = run([seqkv, "restore", "-m", a.model, files[codec], "-t", str(a.threads), "-o", "/dev/null"])
                m = RESTORED.search(out)
                if not m or "verified" not in out:
                    fail("unexpected restore report: " + out.strip())
                n_tokens = int(m.group(1))
                got[codec] = (float(m.group(2)), wall)
                res[codec][0].append(got[codec][0])
                res[codec][1].append(wall)
                print("round %d %s: restore %.2f s, wall %.2f s" % (r + 1, codec, got[codec][0], wall), file=sys.stderr)
            t, mo = got["tokens"], got["model"]
            rows.append("| %d | %.2f (%.0f), %.2f | %.2f (%.0f), %.2f | %.2f / %.2f |"
                        % (r + 1, t[0], n_tokens / t[0], t[1], mo[0], n_tokens / mo[0], mo[1], t[0] / mo[0], t[1] / mo[1]))
        print("Measured %s UTC on %s; load average before: %.2f %.2f %.2f; `bench/queue_restore.py --rounds %d "
              "--threads %d` (%d tokens in sessions of up to %d, codecs tokens and model, every restore verified)."
              % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), cpu_line(), load[0], load[1], load[2], a.rounds,
                 a.threads, n_tokens, a.ctx))
        print()
        print("| round | tokens: restore s (tokens/s), wall s | model: restore s (tokens/s), wall s | "
              "model vs tokens (restore / wall) |")
        print("|---|---:|---:|---:|")
        for row in rows:
            print(row)
        bt, bm = min(res["tokens"][0]), min(res["model"][0])
        mt, mm = statistics.median(res["tokens"][0]), statistics.median(res["model"][0])
        print()
        print("model vs tokens, restore phase: %.2f (best vs best), %.2f (median vs median); wall: %.2f / %.2f"
              % (bt / bm, mt / mm, min(res["tokens"][1]) / min(res["model"][1]),
                 statistics.median(res["tokens"][1]) / statistics.median(res["model"][1])))
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
