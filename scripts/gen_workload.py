#!/usr/bin/env python3
"""Multi-session workload for the session store (docs/store.md), from real text.

Each session is one long shared "system prompt" passage followed by a few turns (KJV
passages). Conversations branch: most sessions continue the first k turns of an earlier
session and then go their own way, so sessions share the system prompt and often some
turns too, like chat sessions forked from shared history. Deterministic for a seed.

usage: scripts/gen_workload.py OUT_DIR [--sessions 60] [--seed 1]
                               [--text tests/data/model_ref/heldout.txt] [--max-chars 3400]
Writes OUT_DIR/s000.txt ... and prints one line per session (name, turns, parent, chars).

With --report SEQKV (the CLI binary) it instead runs the workload through
`seqkv store` at several budgets (in temporary directories) and prints a Markdown report:
the exact commands, `store stats` output, put and verified-restore times, and how many
positions the restores loaded vs recomputed (bench/results/store.md).
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time


def passages(text, lo=150, hi=380):
    """Splits text into sentence-aligned chunks of about lo..hi characters."""
    sentences = re.split(r"(?<=[.;:?!])\s+", " ".join(text.split()))
    out, cur = [], ""
    for s in sentences:
        cur = (cur + " " + s).strip()
        if len(cur) >= lo:
            out.append(cur[:hi].rsplit(" ", 1)[0] if len(cur) > hi else cur)
            cur = ""
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--report", metavar="SEQKV", help="run the workload through this seqkv binary and report")
    ap.add_argument("--budgets", default="64M,4M,0", help="budgets for --report")
    ap.add_argument("--sessions", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--text", default="tests/data/model_ref/heldout.txt")
    ap.add_argument("--max-chars", type=int, default=3400, help="longest session (keep under the model's context)")
    ap.add_argument("--system-chars", type=int, default=1100, help="length of the shared system prompt")
    a = ap.parse_args()
    if not a.out_dir and not a.report:
        ap.error("OUT_DIR or --report is needed")
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    rng = random.Random(a.seed)
    system = text[: a.system_chars].rsplit(" ", 1)[0]
    pool = passages(text[a.system_chars :])
    if len(pool) < 10:
        sys.exit("gen_workload: the text is too short")
    sessions = []  # (turns, parent)
    seen = set()
    for i in range(a.sessions):
        turns, parent = [], -1
        if sessions and rng.random() < 0.75:
            parent = rng.randrange(len(sessions))
            ptur = sessions[parent][0]
            turns = ptur[: rng.randint(1, len(ptur))]
        for _ in range(rng.randint(1, 3)):
            t = rng.choice(pool)
            if len(system) + sum(len(x) + 2 for x in turns) + len(t) + 2 > a.max_chars:
                break
            turns = turns + [t]
        while tuple(turns) in seen or not turns:  # every session distinct
            turns = turns[:-1] + [rng.choice(pool)] if turns else [rng.choice(pool)]
        seen.add(tuple(turns))
        sessions.append((turns, parent))
    if a.report:
        report(a, sessions, system)
        return
    os.makedirs(a.out_dir, exist_ok=True)
    for i, (turns, parent) in enumerate(sessions):
        body = system + "\n\n" + "\n\n".join(turns) + "\n"
        with open(os.path.join(a.out_dir, "s%03d.txt" % i), "w", encoding="utf-8") as f:
            f.write(body)
        print("s%03d.txt turns=%d parent=%s chars=%d" % (i, len(turns), ("s%03d" % parent) if parent >= 0 else "-", len(body)))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("gen_workload: %s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    return r.stdout


def report(a, sessions, system):
    tmp = tempfile.mkdtemp(prefix="seqkv-wl-")
    try:
        wl = os.path.join(tmp, "wl")
        os.makedirs(wl)
        for i, (turns, _) in enumerate(sessions):
            with open(os.path.join(wl, "s%03d.txt" % i), "w", encoding="utf-8") as f:
                f.write(system + "\n\n" + "\n\n".join(turns) + "\n")
        names = sorted(os.listdir(wl))
        print("Workload: `scripts/gen_workload.py WL --sessions %d --seed %d` (%d sessions from %s: a shared"
              " %d-character opening passage plus 1-%d KJV passages as turns, 75%% of the sessions forked from"
              " an earlier one's first turns). Model: the default (kjv-4m). For each budget:"
              % (a.sessions, a.seed, len(names), a.text, len(system), max(len(t) for t, _ in sessions)))
        print()
        print("    seqkv store init DIR --budget B")
        print("    for f in WL/*.txt; do seqkv store put DIR -f $f; done")
        print("    seqkv store stats DIR")
        print("    for n in $(seqkv store ls DIR | cut -f1); do seqkv store get DIR $n --verify; done")
        print()
        rows = []
        for b in a.budgets.split(","):
            d = os.path.join(tmp, "store-" + b)
            run([a.report, "store", "init", d, "--budget", b])
            t0 = time.time()
            for n in names:
                run([a.report, "store", "put", d, "-f", os.path.join(wl, n)])
            t_put = time.time() - t0
            stats = run([a.report, "store", "stats", d])
            loaded = computed = 0
            t_load = t_comp = 0.0
            t0 = time.time()
            for n in names:
                out = run([a.report, "store", "get", d, n, "--verify"])
                m = re.search(r"(\d+) positions loaded from materialised KV \(([\d.]+) ms\), (\d+) recomputed \(([\d.]+) ms\)"
                              r"; KV digest verified", out)
                if not m:
                    sys.exit("gen_workload: unexpected get output: " + out)
                loaded += int(m.group(1))
                t_load += float(m.group(2))
                computed += int(m.group(3))
                t_comp += float(m.group(4))
            t_get = time.time() - t0
            print("## budget %s" % b)
            print()
            print("```")
            print(stats.rstrip())
            print("```")
            print()
            print("Puts: %d sessions in %.1f s of wall time (one CLI process each: model load included)." % (len(names), t_put))
            print("Verified restores of all %d sessions: %d positions loaded (%.0f ms in total), %d recomputed"
                  " (%.0f ms in total); every KV digest matched." % (len(names), loaded, t_load, computed, t_comp))
            print()
            kv = dict(re.findall(r"^([a-z][^:]*):\s+(.*)$", stats, re.M))
            rows.append((b, kv, loaded, computed))
        print("## Summary")
        print()
        print("| budget | sessions | session tokens | unique positions | dedup | bytes on disk | bits/position |"
              " materialised KV | f16 KV | TQ-3.5 KV | restores: loaded / computed |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for b, kv, lo, co in rows:
            def first(k):
                return kv.get(k, "?").split(" (")[0].split(" in ")[0]
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d / %d |" % (
                b, first("sessions"), first("session tokens"), first("unique stored positions"), first("dedup ratio"),
                first("bytes on disk"), first("bits per session position"), first("materialised KV").split(" bytes")[0],
                first("same sessions as f16 KV").split(" bytes")[0], first("same sessions as TQ-3.5").split(" bytes")[0],
                lo, co))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
