#!/usr/bin/python3
"""The Python binding's overhead on a restore (issue 45: under 2% of the C call).

The session is scripts/demo.sh's: the first 3600 bytes of tests/data/model_ref/heldout.txt
on the bundled model, compressed by the CLI with codecs tokens (one prefill), model (one
forward pass per token) and tq3 (no model run: the smallest C time, so the largest share
of overhead). Each is restored, verified, REPEAT times by build/bench/bench_restore_call
(the C calls the binding makes, in the same order) and REPEAT times by seqkv.restore()
(Context closed inside the timing, as the C side frees its context), in alternating
rounds, each after one untimed warm-up restore; the overhead is (Python - C) / C of the minimum and of the median times.

Usage: bench/python_overhead.py [BUILD=build] [--repeat N] [--rounds R] [--write]
--write rewrites bench/results/python.md with the table and the CPU model.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
TEXT = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")


def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def c_times(build, path, n):
    """n timed restores by the C program, after one untimed (warm-up) restore."""
    out = subprocess.run([os.path.join(build, "bench", "bench_restore_call"), MODEL, path, str(n + 1)], check=True,
                         capture_output=True, text=True).stdout
    return [float(line.split()[1]) for line in out.splitlines() if line.startswith("seconds ")][1:]


def py_times(seqkv, m, data, n):
    """n timed restores by the binding, after one untimed (warm-up) restore."""
    with seqkv.restore(m, data):
        pass
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        with seqkv.restore(m, data):
            pass
        t.append(time.perf_counter() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    sys.path.insert(0, os.path.join(build, "python"))
    import seqkv
    m = seqkv.Model(MODEL)
    m.fingerprint()  # computed once, as in the C program, before any timing
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        txt = os.path.join(tmp, "session.txt")
        with open(TEXT, "rb") as f, open(txt, "wb") as g:
            g.write(f.read(3600))
        for codec, scale in (("tokens", 1), ("model", 1), ("tq3", 8)):
            path = os.path.join(tmp, codec + ".skv")
            subprocess.run([os.path.join(build, "seqkv"), "compress", "-m", MODEL, "-f", txt, "-o", path, "--codec",
                            codec], check=True, capture_output=True)
            with open(path, "rb") as f:
                data = f.read()
            n_tok = seqkv.inspect(data)["n_tokens"]
            ct, pt = [], []
            for _ in range(a.rounds):
                ct += c_times(build, path, a.repeat * scale)
                pt += py_times(seqkv, m, data, a.repeat * scale)
            row = (codec, n_tok, min(ct), min(pt), statistics.median(ct), statistics.median(pt))
            rows.append(row)
            print("%-6s %4d tokens  C min %.4f s  Python min %.4f s (%+.2f%%)  medians %.4f / %.4f (%+.2f%%)" %
                  (row[0], row[1], row[2], row[3], 100 * (row[3] / row[2] - 1), row[4], row[5],
                   100 * (row[5] / row[4] - 1)))
    if a.write:
        write_md(rows, a)


def write_md(rows, a):
    lines = [
        "# The Python binding's overhead on a restore",
        "",
        "Measured by `bench/python_overhead.py --write` (repeat %d, x8 for tq3; rounds %d) on %s, one thread." %
        (a.repeat, a.rounds, cpu_model()),
        "The session is scripts/demo.sh's (3600 bytes of tests/data/model_ref/heldout.txt, bundled model",
        "kjv-4m), compressed by the CLI; each restore is verified (KV digest). C: build/bench/bench_restore_call,",
        "the calls `seqkv.restore()` makes (session open, context, skv_session_restore_segment, frees);",
        "Python: `with seqkv.restore(m, data): pass`, in the same alternating rounds. Overhead = Python / C - 1.",
        "",
        "| codec | tokens | C min (s) | Python min (s) | overhead (min) | C median (s) | Python median (s) | overhead (median) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append("| %s | %d | %.4f | %.4f | %+.2f%% | %.4f | %.4f | %+.2f%% |" %
                     (r[0], r[1], r[2], r[3], 100 * (r[3] / r[2] - 1), r[4], r[5], 100 * (r[5] / r[4] - 1)))
    lines += ["", "The goal (issue 45) is an overhead under 2% of the C call; a negative figure is noise (the",
              "two sides run the same C code; the machine is shared)."]
    with open(os.path.join(ROOT, "bench", "results", "python.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
