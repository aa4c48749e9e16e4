#!/usr/bin/python3
"""The side-by-side benchmark (make bench-peer; docs/bench.md "Side by side with llama.cpp").

    /usr/bin/python3 scripts/peer/bench_peer.py PEER_SEQKV LLAMA_EXE

LLAMA_EXE is llama-bench (scripts/peer/build_llama_bench.sh) or, when its name does not
contain "llama-bench", peer_llama (scripts/peer/peer_llama.c: the same tests on the
prebuilt libllama), which takes peer_seqkv's arguments and prints llama-bench's CSV columns.

Runs llama.cpp's llama-bench and seqkv (scripts/peer/peer_seqkv.c, built by the Makefile)
on the same random-weight GGUFs (scripts/peer/models.sh) in one run: pp512 and tg128 at each
thread count, each engine in its own process per (model, type, threads) under
/usr/bin/time -v for the peak RSS. Results merge into bench/results/peer.csv (a rerun of a
subset replaces only its rows) and bench/results/peer.md is rewritten from the CSV.

Environment (all optional):
  PEER_GEOMS    geometries to run, default "tinyllama-1.1b llama-3.2-1b"
  PEER_TYPES    weight types, default every type the engine loads, in llama-quantize's
                presets (TYPES below; scripts/peer/models.sh makes the files)
  PEER_THREADS  thread counts, default "2 1"
  PEER_DEPTHS   context depths (llama-bench's -d: both tests run after that many tokens
                already in the cache), default "0"; e.g. "0 4096 16384"
  PEER_REPS     repetitions per test (mean and stddev over them), default 2
  PEER_ENGINES  "llama seqkv" (default) or one of them
  PEER_TIMEOUT  seconds per process before it is killed and recorded as a timeout (1800)
  SEQKV_CPU     avx2 on an AVX-512 CPU (set by PEER_LLAMA=avx2, scripts/peer/run.sh): the rows
                go to their own section, "... (AVX-512 CPU held to AVX2 in both engines)"
  PEER_KV       seqkv's KV cache type, f32 (default) or f16 (llama.cpp's default is F16)
  PEER_JOBS     processes at once (default 1). Above 1 the wall-clock columns mean nothing;
                only on a machine already overloaded, for the per-CPU-second columns (docs/bench.md)
  SEQKV_PEER_MODELS  where the GGUFs are (default /work/llama/peer-models if it exists,
                else ~/.cache/seqkv-oracle/peer-models)
"""
import concurrent.futures
import csv
import io
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CSV_PATH = os.path.join(ROOT, "bench", "results", "peer.csv")
MD_PATH = os.path.join(ROOT, "bench", "results", "peer.md")
FIELDS = ["cpu", "commit", "engine", "program", "geometry", "type", "threads", "depth", "test", "avg_ts", "stddev_ts", "cpu_ts",
          "reps", "peak_rss_mib", "cpu_pct", "load1", "when", "status", "kv"]
# Every weight type the engine loads, as the llama-quantize presets users download (the _M
# mixes carry q6_k / q5_k / q4_k / q3_k tensors as llama-quantize chooses them).
TYPES = ["F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q5_1", "Q4_K_M", "Q4_0", "Q4_1", "IQ4_NL",
         "IQ4_XS", "Q3_K_M", "Q2_K"]
# Rows measured before the cpu column existed were all on this machine.
OLD_CPU, OLD_COMMIT = "Intel(R) Xeon(R) Processor (AVX-512)", "c2ad794"
N_PROMPT, N_GEN = 512, 128


def env_list(name, default):
    return os.environ.get(name, default).split()


def cpu_label():
    """lscpu's model name and the widest vector ISA: one report section per label."""
    name, flags = "unknown CPU", ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        if line.startswith("Model name:"):
            name = line.split(":", 1)[1].strip()
        if line.startswith("Flags:"):
            flags = " " + line.split(":", 1)[1] + " "
    isa = "AVX-512" if " avx512f " in flags else "AVX2, no AVX-512" if " avx2 " in flags else "no AVX2"
    if isa == "AVX-512" and os.environ.get("SEQKV_CPU") == "avx2":
        # PEER_LLAMA=avx2 (scripts/peer/run.sh): llama.cpp built without AVX-512, seqkv's AVX2 kernels
        isa = "AVX-512 CPU held to AVX2 in both engines"
    return "%s (%s)" % (name, isa)


def models_dir():
    d = os.environ.get("SEQKV_PEER_MODELS")
    if d:
        return d
    if os.path.isdir("/work/llama/peer-models"):
        return "/work/llama/peer-models"
    return os.path.expanduser("~/.cache/seqkv-oracle/peer-models")


def load1():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def timed(cmd, timeout):
    """Runs cmd under /usr/bin/time -v -> (rc, stdout, stderr, peak RSS MiB or None, CPU %)."""
    try:
        p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "timeout after %d s" % timeout, None, ""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    pct = re.search(r"Percent of CPU this job got: (\d+)%", p.stderr)
    return (p.returncode, p.stdout, p.stderr, (int(m.group(1)) / 1024.0 if m else None),
            pct.group(1) if pct else "")


def llama_rows(out):
    """llama-bench -o csv (or peer_llama) output -> [(test, avg_ts, stddev_ts, cpu_ts or "")]."""
    rows = []
    for r in csv.DictReader(io.StringIO(out)):
        n_p, n_g = int(r["n_prompt"]), int(r["n_gen"])
        test = "pp%d" % n_p if n_p else "tg%d" % n_g
        cpu = float(r["cpu_ts"]) if r.get("cpu_ts") else ""
        rows.append((test, float(r["avg_ts"]), float(r["stddev_ts"]), cpu))
    return rows


def seqkv_rows(out):
    """peer_seqkv output (seqkv,TEST,THREADS,N,REPS,AVG,STDDEV,CPU) -> [(test, avg, stddev, cpu)]."""
    rows = []
    for line in out.splitlines():
        f = line.split(",")
        if len(f) == 8 and f[0] == "seqkv":
            rows.append((f[1], float(f[5]), float(f[6]), float(f[7])))
    return rows


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip() and "time -v" not in l]
    lines = [l for l in lines if not re.match(r"\s+\S.*: ", l)]  # drop /usr/bin/time's report
    return (lines[-1] if lines else "failed")[:120].replace(",", ";")


def run_one(engine, exe, path, threads, depth, reps, timeout):
    """One process for one (engine, model file, threads, depth) -> [row dicts] (failures included)."""
    if engine == "llama" and "llama-bench" in os.path.basename(exe):
        cmd = [exe, "-m", path, "-p", str(N_PROMPT), "-n", str(N_GEN), "-t", str(threads),
               "-d", str(depth), "-r", str(reps), "-o", "csv"]
    elif engine == "llama":
        cmd = [exe, path, str(threads), str(N_PROMPT), str(N_GEN), str(reps), str(depth)]
    else:
        cmd = [exe, path, str(threads), str(N_PROMPT), str(N_GEN), str(reps), str(depth),
               os.environ.get("PEER_KV", "f32")]
    base = {"cpu": CPU, "commit": COMMIT, "engine": engine, "program": os.path.basename(exe), "threads": threads, "depth": depth,
            "reps": reps, "kv": os.environ.get("PEER_KV", "f32") if engine == "seqkv" else "f16",
            "load1": load1(), "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    rc, out, err, rss, pct = timed(cmd, timeout)
    rows = (llama_rows if engine == "llama" else seqkv_rows)(out) if rc == 0 else []
    status = "ok" if rc == 0 and rows else ("timeout" if rc is None else "failed: " + last_line(err))
    if not rows:
        rows = [("pp%d" % N_PROMPT, "", "", ""), ("tg%d" % N_GEN, "", "", "")]
    rss_s = "%.0f" % rss if rss is not None and rc == 0 else ""
    f2 = lambda v: "%.2f" % v if v != "" else ""
    return [dict(base, test=t, avg_ts=f2(a), stddev_ts=f2(s), cpu_ts=f2(c), peak_rss_mib=rss_s,
                 cpu_pct=pct, status=status) for t, a, s, c in rows]


def read_csv():
    if not os.path.exists(CSV_PATH):
        return []
    with open(CSV_PATH, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:  # rows from before the cpu and depth columns
        r["cpu"] = r.get("cpu") or OLD_CPU
        r["depth"] = r.get("depth") or "0"
        r["kv"] = r.get("kv") or ("f32" if r["engine"] == "seqkv" else "f16")
        r["commit"] = r.get("commit") or OLD_COMMIT
    return rows


def write_csv(rows):
    key = lambda r: (r["cpu"], r["geometry"], int(r["depth"]), ORDER_T.get(r["type"], 99), -int(r["threads"]),
                     r["test"], r["engine"])
    rows.sort(key=key)
    with open(CSV_PATH + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    os.replace(CSV_PATH + ".tmp", CSV_PATH)


ORDER_T = {t: i for i, t in enumerate(TYPES)}
CPU = cpu_label()


def git_commit():
    """The seqkv commit measured, "+" when the tracked files differ from it."""
    def git(*a):
        return subprocess.run(["git"] + list(a), cwd=ROOT, capture_output=True, text=True).stdout.strip()
    c = git("rev-parse", "--short", "HEAD") or "?"
    return c + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


COMMIT = git_commit()


def merge(old, new):
    k = lambda r: (r["cpu"], r["engine"], r["geometry"], r["type"], str(r["threads"]), str(r["depth"]), r["test"])
    seen = {k(r): r for r in old}
    for r in new:
        seen[k(r)] = {f: str(r[f]) for f in FIELDS}
    return list(seen.values())


def tasks(mdir, engines):
    """[(geometry, type, threads, depth, engine, path)] in run order; missing files are skipped."""
    out = []
    for depth in [int(d) for d in env_list("PEER_DEPTHS", "0")]:
        for geom in env_list("PEER_GEOMS", "tinyllama-1.1b llama-3.2-1b"):
            for wtype in env_list("PEER_TYPES", " ".join(TYPES)):
                path = os.path.join(mdir, "%s-%s.gguf" % (geom, wtype))
                if not os.path.exists(path):
                    print("bench_peer: %s missing (scripts/peer/models.sh); skipped" % path, file=sys.stderr)
                    continue
                for threads in [int(t) for t in env_list("PEER_THREADS", "2 1")]:
                    out += [(geom, wtype, threads, depth, e, path) for e in engines]
    return out


def run_task(task, exes, reps, timeout):
    geom, wtype, threads, depth, engine, path = task
    new = run_one(engine, exes[engine], path, threads, depth, reps, timeout)
    for r in new:
        r.update(geometry=geom, type=wtype)
        print("%(engine)s %(geometry)s %(type)s t=%(threads)s d=%(depth)s %(test)s: %(avg_ts)s t/s (%(cpu_ts)s per "
              "CPU-s), RSS %(peak_rss_mib)s MiB, CPU %(cpu_pct)s%%, load %(load1)s, %(status)s" % r, flush=True)
    with LOCK:  # read-merge-write, so that concurrent tasks (and runs) keep each other's rows
        write_csv(merge(read_csv(), new))


LOCK = threading.Lock()


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    exes = {"seqkv": argv[1], "llama": argv[2] if len(argv) > 2 else ""}
    reps, timeout = int(os.environ.get("PEER_REPS", "2")), int(os.environ.get("PEER_TIMEOUT", "1800"))
    jobs = int(os.environ.get("PEER_JOBS", "1"))
    todo = tasks(models_dir(), env_list("PEER_ENGINES", "llama seqkv"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        list(pool.map(lambda t: run_task(t, exes, reps, timeout), todo))
    import peer_report  # noqa: E402  (the Markdown report, from the CSV)
    peer_report.write(read_csv(), MD_PATH, exes["llama"])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(sys.argv))
