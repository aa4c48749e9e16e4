#!/usr/bin/python3
"""Writes bench/results/peer.md from bench/results/peer.csv (scripts/peer/bench_peer.py).

    /usr/bin/python3 scripts/peer/peer_report.py [LLAMA_BENCH]     (regenerates the report)

Ratios are seqkv / llama.cpp: above 1.00 seqkv is faster (pp, tg) or uses more memory (RSS).
"""
import csv
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_peer import TYPES, OLD_CPU, OLD_COMMIT, models_dir  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GEOM_TEXT = {"tinyllama-1.1b": "TinyLlama-1.1B geometry (22 layers, 2048 wide, 32/4 heads, FFN 5632, "
                               "vocabulary 32000, untied output)",
             "llama-3.2-1b": "Llama-3.2-1B geometry (16 layers, 2048 wide, 32/8 heads, FFN 8192, "
                             "vocabulary 128256, tied output)"}
# Read bandwidth of one thread in GB per CPU-second, per CPU label (bench_peer.cpu_label):
# scripts/peer/membw.c (eight interleaved streams over 1 GiB, best of 5 passes, process CPU
# time), measured on the machine of that section.
MEMBW = {
    "AMD EPYC (AVX-512)": {
        "gb_per_cpu_s": 32.6, "when": "2026-12-06 08:51 UTC, load 1-2, pinned, with one stream (`membw 1`), the "
        "best of 6 runs (27.8-32.6); eight interleaved streams read only 17-19 GB per CPU-second here and 16 "
        "streams 23.5, but a packed decode group is one contiguous stream, so the one-stream figure is the bound"},
    "Intel(R) Xeon(R) Processor (AVX-512)": {
        "gb_per_cpu_s": 13.8, "when": "2026-12-01 ~16:30 UTC with eight interleaved streams, load ~9, the best of "
        "the runs; re-measured "
        "2026-12-02 00:34 UTC during a CI run at load 2.2: 11.3-12.1 GB per CPU-second with 4-16 streams, "
        "so the percentages below, taken against 13.8, are the conservative ones"},
}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return ""


def cpu_model():
    for line in sh("lscpu").splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def cell(r, field):
    if r is None:
        return "-"
    if r["status"] != "ok":
        return "timeout" if r["status"] == "timeout" else "fails"
    return r[field] or "-"


def num(r, field):
    return r[field] if r is not None and r["status"] == "ok" and r[field] else None


def table_rows(rows, geom, field, depth="0"):
    """Markdown rows: per type and thread count, pp and tg in `field` (avg_ts or cpu_ts), RSS."""
    rows = [r for r in rows if r["geometry"] == geom and r["depth"] == depth]
    idx = {(r["engine"], r["type"], r["threads"], r["test"]): r for r in rows}
    threads = sorted({r["threads"] for r in rows}, key=lambda t: -int(t))
    out = []
    for t in TYPES:
        for th in threads:
            g = lambda e, test: idx.get((e, t, th, test))
            lp, sp, lt, st = g("llama", "pp512"), g("seqkv", "pp512"), g("llama", "tg128"), g("seqkv", "tg128")
            if not any((lp, sp, lt, st)):
                continue
            cells = [t, th, cell(lp, field), cell(sp, field), rat(sp, lp, field),
                     cell(lt, field), cell(st, field), rat(st, lt, field),
                     cell(lp or lt, "peak_rss_mib"), cell(sp or st, "peak_rss_mib"),
                     rat(sp or st, lp or lt, "peak_rss_mib")]
            out.append("| " + " | ".join(cells) + " |")
    return out


TABLE_HEAD = ["| type | threads | pp512 llama.cpp | pp512 seqkv | pp ratio | tg128 llama.cpp | "
              "tg128 seqkv | tg ratio | RSS llama.cpp | RSS seqkv | RSS ratio |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
CPU_TEXT = ("Tokens per CPU-second of the process (all its threads; `cpu_ts` in peer.csv). On a "
            "machine shared with other jobs this moves far less than wall time, so its ratios are "
            "the better guide to the kernels; at 2 threads it also charges each engine for time "
            "its threads spend waiting on each other (llama.cpp's spin, seqkv's handoffs), so it "
            "is efficiency, not speed.")


def rat(a, b, field):
    x, y = num(a, field), num(b, field)
    if x is None or y is None or float(y) == 0:
        return "-"
    return "%.2fx" % (float(x) / float(y))


def llama_text(programs, llama_bench):
    """Which llama.cpp program made the llama.cpp columns, in words."""
    said = []
    if any(p.endswith("-native") for p in programs):
        said.append("`peer_llama` (scripts/peer/peer_llama.c: llama-bench's pp and tg tests, and "
                    "its `-d`, re-implemented on llama.cpp's C API) linked statically against "
                    "llama.cpp v0.4.0 built from the npm bundle with `-march=native`, AMX off "
                    "(`PEER_LLAMA=native`, scripts/peer/build_peer_llama.sh); it reports CPU "
                    "seconds per repetition as peer_seqkv does")
        programs = [p for p in programs if not p.endswith("-native")]
    if any(p.endswith("-avx2") for p in programs):
        said.append("`peer_llama` linked statically against llama.cpp v0.4.0 built from the npm "
                    "bundle for AVX2 + FMA + F16C only (no AVX-512, not `-march=native`; "
                    "`PEER_LLAMA=avx2`, scripts/peer/build_peer_llama.sh), standing in for an "
                    "AVX2-only CPU on this AVX-512 one; seqkv ran with `SEQKV_CPU=avx2` (its AVX2 "
                    "kernels only)")
        programs = [p for p in programs if not p.endswith("-avx2")]
    if any("llama-bench" in p for p in programs):
        said.append("`llama-bench` built from the llama.cpp source of the npm package "
                    "node-llama-cpp@3.21.1 (scripts/peer/build_llama_bench.sh: AVX2+FMA+F16C+"
                    "AVX-512+VNNI, AMX off)")
    if any("llama-bench" not in p for p in programs):
        said.append("`peer_llama` (scripts/peer/peer_llama.c: llama-bench's pp and tg tests "
                    "re-implemented on llama.cpp's C API) linked to the prebuilt libllama v0.4.0 "
                    "of @node-llama-cpp/linux-x64@3.21.1 with the fastest CPU variant "
                    "that runs here, AMX excepted (`icelake` on the Xeon: AVX-512 VNNI+VBMI), because building llama-bench takes over an hour on this machine")
    return " and ".join(said) or (llama_bench or "llama-bench")


TOP = [
    "# Side by side with llama.cpp on 1B geometries",
    "",
    "One section per CPU measured (bench_peer.py's `cpu` column: lscpu's model name and the widest "
    "vector ISA); never compare figures across sections. Reproduce: `make bench-peer` "
    "(docs/bench.md), which adds or replaces the rows of the CPU it runs on.",
    "",
    "Models: random weights (scripts/peer/gen_model.py) written in F16 and converted by llama.cpp's "
    "own quantizer (llama-quantize's presets: the `_M` mixes carry q6_k / q5_k / q4_k / q3_k tensors "
    "as llama-quantize chooses them); both engines read the same files. pp512: one batch of 512 "
    "tokens; tg128: 128 tokens one at a time; at depth d (llama-bench's `-d`) both run after d "
    "tokens already in the cache, else into an empty cache. Tokens/s, mean of the repetitions "
    "(column `reps` in peer.csv), after one warm-up. Peak RSS (MiB) of the whole process "
    "(/usr/bin/time -v), mmap'd weights included. Ratios are seqkv / llama.cpp: above 1.00x seqkv "
    "is faster (pp, tg) or uses more memory (RSS). \"fails\": the engine refused the file or "
    "crashed (peer.csv has the message); \"-\": not measured.",
    "",
]


def cpu_header(cpu, rows, llama_bench):
    loads = [float(r["load1"]) for r in rows if r["load1"]]
    whens = sorted(r["when"] for r in rows if r["when"])
    commits = sorted({r["commit"] for r in rows if r["commit"]})
    programs = sorted({r.get("program", "") for r in rows if r["engine"] == "llama"})
    kvs = sorted({r.get("kv") or "f32" for r in rows if r["engine"] == "seqkv"})
    kv_text = " and ".join(kvs) + " KV cache" + (" (column `kv` of peer.csv says which row)" if len(kvs) > 1 else "")
    return [
        "## " + cpu,
        "",
        "Measured %s to %s UTC; seqkv commit %s (\"+\": with uncommitted changes). Load average "
        "(1 min) at the start of each process: %s to %s (the machine is shared: the per-CPU-second "
        "tables are the steadier guide)." % (
            whens[0] if whens else "?", whens[-1] if whens else "?", ", ".join(commits) or "?",
            "%.2f" % min(loads) if loads else "?", "%.2f" % max(loads) if loads else "?"),
        "",
        "llama.cpp: %s; llama-bench's default settings (n_batch 2048, n_ubatch 512, F16 KV cache, "
        "flash attention auto, mmap, weight repacking). seqkv: scripts/peer/peer_seqkv.c through "
        "the public API (%s, max_batch 512, kernels auto)." % (llama_text(programs, llama_bench), kv_text),
        "",
    ]


def model_bytes(geom, typ):
    try:
        return os.path.getsize(os.path.join(models_dir(), "%s-%s.gguf" % (geom, typ)))
    except OSError:
        return None


def bound_rows(rows, geom, bw):
    """Per type: the decode bound (weight bytes per token over the bandwidth) and both engines' tg128."""
    idx = {(r["engine"], r["type"]): r for r in rows
           if r["geometry"] == geom and r["threads"] == "1" and r["test"] == "tg128" and r["depth"] == "0"}
    out = []
    for t in TYPES:
        size = model_bytes(geom, t)
        if not size or not any(k[1] == t for k in idx):
            continue
        bound = bw["gb_per_cpu_s"] * 1e9 / size
        cells = [t, "%.0f" % (size / 1e6), "%.1f" % bound]
        for e in ("seqkv", "llama"):
            v = num(idx.get((e, t)), "cpu_ts")
            cells += [v or "-", "%.0f%%" % (100 * float(v) / bound) if v else "-"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def bandwidth_section(cpu, rows):
    bw = MEMBW.get(cpu)
    if not bw:
        return []
    out = ["### Decode against the memory-bandwidth bound", "",
           "One thread of this machine reads %.1f GB per CPU-second (`scripts/peer/membw.c` over 1 GiB, "
           "timed in process CPU time so that it compares with the per-CPU-second columns; measured %s). A decoded token reads every weight once (the "
           "file's size), so the bound is that bandwidth over the file's bytes (slightly low where the output is untied: the token embedding table is read one row per token, 6%% of the TinyLlama file). tg128 at 1 thread, "
           "tokens per CPU-second:" % (bw["gb_per_cpu_s"], bw["when"]), ""]
    for geom in GEOM_TEXT:
        body = bound_rows(rows, geom, bw)
        if body:
            out += ["%s:" % geom, "", "| type | MB per token | bound | seqkv | of bound | llama.cpp | "
                    "of bound |", "|---|--:|--:|--:|--:|--:|--:|"] + body + [""]
    return out if len(out) > 3 else []


# Sections after this line of peer.md are written by hand (other CPUs, runs without llama.cpp)
# and kept when the report is regenerated.
KEEP_MARK = "<!-- hand-written sections below: kept by scripts/peer/peer_report.py -->"


def kept_sections(path):
    """The hand-written tail of the current report (from KEEP_MARK on), or []."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return []
    at = text.find(KEEP_MARK)
    return text[at:].rstrip("\n").split("\n") + [""] if at >= 0 else []


def cpu_sections(cpu, rows, llama_bench):
    out = cpu_header(cpu, rows, llama_bench)
    for geom in GEOM_TEXT:
        for depth in sorted({r["depth"] for r in rows if r["geometry"] == geom}, key=int):
            body = table_rows(rows, geom, "avg_ts", depth)
            if not body:
                continue
            at = "" if depth == "0" else ", depth %s (both tests after %s tokens in the cache)" % (depth, depth)
            out += ["### " + GEOM_TEXT[geom] + at, "", "Tokens per second (wall clock, llama-bench's measure):",
                    ""] + TABLE_HEAD + body + ["", CPU_TEXT, ""] + TABLE_HEAD
            out += table_rows(rows, geom, "cpu_ts", depth) + [""]
    out += bandwidth_section(cpu, rows)
    fails = sorted({(r["engine"], r["geometry"], r["type"], r["status"]) for r in rows if r["status"] != "ok"})
    if fails:
        out += ["Failures:", ""] + ["- %s on %s %s: %s" % f for f in fails] + [""]
    return out


def write(rows, path, llama_bench=""):
    for r in rows:  # rows from before the cpu, commit and depth columns
        r["cpu"] = r.get("cpu") or OLD_CPU
        r["commit"] = r.get("commit") or OLD_COMMIT
        r["depth"] = r.get("depth") or "0"
    latest = {}
    for r in rows:
        latest[r["cpu"]] = max(latest.get(r["cpu"], ""), r["when"])
    out = list(TOP)
    for cpu in sorted(latest, key=lambda c: latest[c], reverse=True):
        out += cpu_sections(cpu, [r for r in rows if r["cpu"] == cpu], llama_bench)
    out += kept_sections(path)
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out).rstrip("\n") + "\n")
    os.replace(path + ".tmp", path)


def main(argv):
    with open(os.path.join(ROOT, "bench", "results", "peer.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    write(rows, os.path.join(ROOT, "bench", "results", "peer.md"), argv[1] if len(argv) > 1 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
