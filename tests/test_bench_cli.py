#!/usr/bin/python3
"""seqkv bench --quick end to end, through the built CLI ($SEQKV_BUILD/seqkv).

Prints `PASS test_bench_cli:<case>` / `FAIL ...: <why>` / `SKIP ...: <why>` lines like the C
harness (counted by tests/run.sh). Runs `seqkv bench --quick` once for the report cases (the
bundled model and the held-out KJV text, both always present; ~2 s, ~20 s under the
sanitizers) and checks that the
report, the CSVs and (with gnuplot) the plots exist and that the numbers are consistent:
f16 bits/position = 16 x the model's scalars per position, model-coded < raw tokens < f16,
every sequential restore verified bit-exact, the ratio columns equal the bits columns' ratios,
the model-coded file is not smaller than its own cross-entropy floor, the computed store
workload dedups. Also option errors (exit 2) and a missing text file (exit 1); that `--quick`
without `--out` writes a fresh temporary directory and leaves the committed bench/results/report/
as it was; and one short run with every row (the quantized-KV .skv files and the real store,
measured through the library).
"""
import csv
import hashlib
import os
import re
import shutil
import sys
import tempfile

from clitest import ROOT, SEQKV, Reporter, Skip, check, run

NAME = "test_bench_cli"
REPORTER = Reporter(NAME)
report = REPORTER.report


def need_binary():
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)


def close(a, b, rel=1e-4):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# One quick run shared by the report cases (the slow part).
QUICK = {}


def quick_run(tmp):
    if "dir" not in QUICK:
        need_binary()
        out = os.path.join(tmp, "quick")
        rc, so, se = run("bench", "--quick", "--out", out, timeout=300)
        check(rc == 0, "bench --quick: exit %d: %s" % (rc, se.strip()[-400:]))
        check("report:" in so, "bench --quick printed no summary: %r" % so)
        QUICK["dir"], QUICK["stdout"] = out, so
    return QUICK["dir"]


def scalars_per_position():
    rc, out, err = run("info")
    check(rc == 0, "info: exit %d" % rc)
    m = re.search(r"= (\d+) scalars\)", out)
    check(m, "info printed no scalar count")
    return int(m.group(1))


# ---- cases -------------------------------------------------------------------------


def outputs_exist(tmp):
    d = quick_run(tmp)
    for name in ("report.md", "representations.csv", "corollary5.csv", "store_workload.csv", "projection.csv"):
        p = os.path.join(d, name)
        check(os.path.isfile(p) and os.path.getsize(p) > 100, "%s missing or empty" % name)
    rep = open(os.path.join(d, "report.md")).read()
    for head in ("## Every representation", "## Ratio over TurboQuant-3.5", "## Corollary 5", "Measured shape",
                 "## Store workload", "## PROJECTION"):
        check(head in rep, "report.md lacks '%s'" % head)
    pngs = [os.path.join(d, n) for n in ("bits.png", "corollary5.png", "restore.png")]
    if shutil.which("gnuplot"):
        for p in pngs:
            check(os.path.isfile(p) and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % p)
        check("![Corollary 5](corollary5.png)" in rep, "report.md does not embed the plots")
    else:
        check("gnuplot not found" in rep, "without gnuplot the report must say why there are no plots")


def representation_invariants(tmp):
    d = quick_run(tmp)
    rows = rows_of(os.path.join(d, "representations.csv"))
    by = {r["representation"]: r for r in rows}
    for need in ("f32", "f16", "q8_0", "q4_0", "tq3", "tq3.5 (k=tq4,v=tq3)", "zstd -3 (f32 KV)", "zstd -3 (f16 KV)",
                 "raw tokens + prefill", "model-coded tokens", "model-coded (n-gram drafts)"):
        check(need in by, "no row '%s'" % need)
    bits = {k: float(r["bits_per_position"]) for k, r in by.items()}
    sc = scalars_per_position()
    check(bits["f16"] == 16 * sc, "f16 bits/position %g != 16 x %d scalars" % (bits["f16"], sc))
    check(bits["f32"] == 32 * sc, "f32 bits/position %g != 32 x %d" % (bits["f32"], sc))
    check(bits["model-coded tokens"] < bits["raw tokens + prefill"] < bits["f16"],
          "want model-coded < raw tokens < f16: %g, %g, %g" % (bits["model-coded tokens"], bits["raw tokens + prefill"], bits["f16"]))
    tq = bits["tq3.5 (k=tq4,v=tq3)"]
    for k, r in by.items():
        check(close(float(r["ratio_vs_f16"]), bits["f16"] / bits[k]), "%s: ratio_vs_f16 inconsistent" % k)
        check(close(float(r["ratio_vs_tq3.5"]), tq / bits[k]), "%s: ratio_vs_tq3.5 inconsistent" % k)
        check(float(r["restore_tokens_per_s"]) > 0, "%s: no restore speed" % k)
        if r["family"] == "sequential":
            check(r["verified_bit_exact"] == "yes" and r["lossless"] == "yes", "%s: restore not verified bit-exact" % k)
    for k in ("f32", "zstd -3 (f32 KV)"):
        check(by[k]["lossless"] == "yes" and by[k]["verified_bit_exact"] == "yes", "%s must restore the exact KV" % k)
    for k in ("f16", "q8_0", "q4_0", "tq3"):
        check(by[k]["lossless"] == "no" and by[k]["kl_nats_per_token"] != "", "%s: lossy row without quality" % k)
        check(float(by[k]["kl_nats_per_token"]) >= 0, "%s: negative KL" % k)
    check(float(by["tq3"]["kl_nats_per_token"]) > float(by["q8_0"]["kl_nats_per_token"]),
          "tq3 (3.25 bits/value) should cost more KL than q8_0 (8.5)")
    check(bits["zstd -3 (f16 KV)"] < bits["f16"], "zstd did not compress the f16 KV at all")


def corollary5_and_floor(tmp):
    d = quick_run(tmp)
    c5 = rows_of(os.path.join(d, "corollary5.csv"))
    check(len(c5) >= 5, "corollary5.csv has %d rows" % len(c5))
    Ls = [int(r["L"]) for r in c5]
    check(Ls == sorted(Ls) and Ls[0] == 1, "L not increasing from 1: %s" % Ls)
    for r in c5:
        check(close(float(r["ratio_tq3.5_running"]), float(r["tq3.5_bits"]) / float(r["running_mean_bits"]), 1e-2),
              "corollary5 ratio inconsistent at L=%s" % r["L"])
    # the running mean over all positions is the text's cross-entropy: the model-coded file cannot beat it
    reps = {r["representation"]: r for r in rows_of(os.path.join(d, "representations.csv"))}
    n = int(reps["model-coded tokens"]["tokens"])
    floor = float(c5[-1]["running_mean_bits"]) * Ls[-1]
    check(Ls[-1] == n - 1, "last L %d != tokens - 1 (%d)" % (Ls[-1], n - 1))
    file_bits = float(reps["model-coded tokens"]["bits_per_position"]) * n
    check(file_bits >= floor, "model-coded file (%g bits) below its cross-entropy floor (%g)" % (file_bits, floor))


def store_and_projection(tmp):
    d = quick_run(tmp)
    st = {r["representation"]: r for r in rows_of(os.path.join(d, "store_workload.csv"))}
    check(len(st) >= 6, "store_workload.csv has %d rows" % len(st))
    any_row = next(iter(st.values()))
    check(int(any_row["unique_positions"]) < int(any_row["session_positions"]), "the workload shares no prefix")
    f16 = float(st["f16 KV per session"]["total_bytes"])
    shared = float(st["exact prefix sharing, f16 KV"]["total_bytes"])
    check(close(shared / f16, int(any_row["unique_positions"]) / int(any_row["session_positions"])), "f16 sharing bytes")
    check(float(st["prefix sharing at the token floor"]["total_bytes"]) <
          float(st["model-coded per session (token floor, no sharing)"]["total_bytes"]), "token-floor sharing saves nothing")
    pr = rows_of(os.path.join(d, "projection.csv"))
    l7 = [r for r in pr if r["geometry"].startswith("Llama-2-7B")]
    check(l7 and float(l7[0]["f16_bits"]) == 2 * 32 * 32 * 128 * 16, "Llama-2-7B f16 bits per position")
    check(close(float(l7[0]["ratio_vs_tq3.5"]), float(l7[0]["tq3.5_bits"]) / float(l7[0]["model_coded_bits"]), 1e-3),
          "projection ratio inconsistent")


def custom_text(tmp):
    need_binary()
    src = os.path.join(tmp, "t.txt")
    with open(src, "w") as f:
        f.write("The quick brown fox jumps over the lazy dog. " * 8)
    out = os.path.join(tmp, "o")
    rc, so, se = run("bench", "--quick", "--no-plots", "-f", src, "--tokens", "40", "--out", out, timeout=300)
    check(rc == 0, "bench -f: exit %d: %s" % (rc, se.strip()[-300:]))
    reps = rows_of(os.path.join(out, "representations.csv"))
    check(reps and all(r["text"] == "t" and r["tokens"] == "40" for r in reps), "rows do not name text 't' at 40 tokens")
    check("--no-plots" in open(os.path.join(out, "report.md")).read(), "the report does not say plots were skipped")


def errors(tmp):
    need_binary()
    rc, out, err = run("bench", "--help")
    check(rc == 0 and out.startswith("usage: seqkv bench"), "bench --help: exit %d" % rc)
    for args in (("--bogus",), ("--tokens", "5"), ("--threads", "0"), ("-f",), ("--out",)):
        rc, out, err = run("bench", *args)
        check(rc == 2 and err.strip(), "bench %s: exit %d, want 2 with a message" % (" ".join(args), rc))
    missing = os.path.join(tmp, "no_such.txt")
    rc, out, err = run("bench", "--quick", "-f", missing, "--out", os.path.join(tmp, "x"))
    check(rc == 1 and "no_such.txt" in err, "missing text: exit %d, message %r" % (rc, err.strip()))


def info_sizes_exact(tmp):
    """seqkv info's bits per position for every scheme, from the bundled model's geometry
    (16 vectors of 64 values per position): scales and norms counted."""
    rc, out, err = run("info")
    check(rc == 0, "info: exit %d" % rc)
    got = dict(re.findall(r"^  (\S+)\s+[0-9.]+\s+(\d+)\s+[0-9.]+x$", out, re.M))
    vec, d = 16, 64
    want = {"f32": 32 * vec * d, "f16": 16 * vec * d, "q8_0": vec * (d * 8 + 2 * 16), "q4_0": vec * (d * 4 + 2 * 16)}
    for b in (1, 2, 3, 4):
        want["tq%d" % b] = vec * (b * d + 16)                       # codes + fp16 norm
    for b in (2, 3, 4):
        want["tq%dp" % b] = vec * ((b - 1) * d + d + 2 * 16)        # MSE codes + sketch + 2 norms
    want["tq3.5"] = (want["tq3"] + want["tq4"]) // 2
    for k, v in want.items():
        check(k in got, "info does not list %s" % k)
        check(int(got[k]) == v, "%s: info says %s bits, geometry gives %d" % (k, got[k], v))


def tree_digest(path):
    """SHA-256 over the names and bytes of every file below path; None if path is absent."""
    if not os.path.isdir(path):
        return None
    h = hashlib.sha256()
    for top, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(top, name)
            h.update(os.path.relpath(p, path).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def quick_keeps_committed_report(tmp):
    """`seqkv bench --quick` with no --out: a fresh directory under $TMPDIR, named in its summary,
    and bench/results/report/ (the committed report, PNGs included) left byte for byte as it was."""
    need_binary()
    committed = os.path.join(ROOT, "bench", "results", "report")
    before = tree_digest(committed)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = tmp
    try:
        rc, so, se = run("bench", "--quick", timeout=300)
    finally:
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old
    check(tree_digest(committed) == before, "bench --quick without --out changed bench/results/report/")
    check(rc == 0, "bench --quick: exit %d: %s" % (rc, se.strip()[-400:]))
    m = re.search(r"report: (\S+)/report\.md", so)
    check(m, "bench --quick printed no report path: %r" % so)
    out = os.path.realpath(m.group(1))
    check(out.startswith(os.path.realpath(tmp) + os.sep), "--quick wrote to %s, not a fresh directory in $TMPDIR" % out)
    check(os.path.isfile(os.path.join(out, "report.md")), "no report.md in %s" % out)
    check(m.group(1) in se, "stderr does not say where the report goes")


def small_model():
    """stories260K when the shared data is there (5x faster through the store workload), else the bundled model."""
    shared = os.environ.get("SEQKV_SHARED") or os.path.join(ROOT, "..", "shared")
    p = os.path.join(shared, "models", "stories260K", "stories260K.gguf")
    return p if os.path.isfile(p) else os.path.join(ROOT, "models", "kjv-4m.gguf")


def every_row(tmp):
    """A short non-quick run (one model, 32 tokens): the quantized-KV .skv rows and the real store's
    rows, both measured through the library."""
    need_binary()
    text = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")
    model = small_model()
    out = os.path.join(tmp, "full")
    rc, so, se = run("bench", "-m", model, "-f", text, "--tokens", "32", "--windows", "1", "--no-plots", "--out", out,
                     timeout=600)
    check(rc == 0, "bench: exit %d: %s" % (rc, se.strip()[-400:]))
    by = {r["representation"]: r for r in rows_of(os.path.join(out, "representations.csv"))}
    kv = [k for k, r in by.items() if r["family"] == "stored KV"]
    check(len(kv) == 7, "want 7 quantized-KV .skv rows, got %s" % kv)
    exact = by[".skv codec kvq kv=f32"]
    check(exact["lossless"] == "yes" and exact["verified_bit_exact"] == "yes", "kvq kv=f32 must restore the exact KV")
    check(float(exact["bits_per_position"]) > float(by["f32"]["bits_per_position"]), "kv=f32 file smaller than its KV")
    for k in kv:
        check(float(by[k]["restore_tokens_per_s"]) > 0, "%s: no restore speed" % k)
        if k != ".skv codec kvq kv=f32":
            check(by[k]["lossless"] == "no" and by[k]["kl_nats_per_token"] != "", "%s: lossy row without quality" % k)
    st = {r["representation"]: r for r in rows_of(os.path.join(out, "store_workload.csv"))}
    zero, full = st.get("seqkv store, budget 0 (bytes on disk)"), st.get("seqkv store, default budget (bytes on disk)")
    check(zero and full, "no real store rows: %s" % sorted(st))
    f16 = st["f16 KV per session"]
    check(abs(int(zero["session_positions"]) - int(f16["session_positions"])) <= 2 * int(f16["sessions"]),
          "the store holds %s session tokens, the workload %s" % (zero["session_positions"], f16["session_positions"]))
    check(0 < float(zero["total_bytes"]) < float(full["total_bytes"]), "budget 0 store not smaller than the default one")
    check(float(zero["total_bytes"]) < float(st["exact prefix sharing, TQ-3.5 KV"]["total_bytes"]),
          "a tokens-only store is larger than the shared TQ-3.5 KV")


def rd_section(tmp):
    """--quick runs a tiny rate-distortion section: rd.md, rd.csv (per-vector points with the
    exact bits of their layouts, predictive points with KL and restore time, +layer0 among them)
    and its summary in report.md; --rd-only writes only that section."""
    d = quick_run(tmp)
    rows = rows_of(os.path.join(d, "rd.csv"))
    by = {r["codec"]: r for r in rows}
    sc = scalars_per_position()
    for need in ("q8_0", "q4_0", "tq2", "tq3", "tq4", "TQ-3.5 (k=tq4 v=tq3)", "tok@1", "tok+ramp@1", "tok+ramp+layer0@1"):
        check(need in by, "rd.csv has no point '%s'" % need)
    check(close(float(by["TQ-3.5 (k=tq4 v=tq3)"]["bits_pos"]), 3.75 * sc), "TQ-3.5 bits/position != 3.75 x %d" % sc)
    check(close(float(by["q8_0"]["bits_pos"]), 8.5 * sc), "q8_0 bits/position != 8.5 x %d" % sc)
    for k, r in by.items():
        check(float(r["kl"]) >= 0 and float(r["restore_us_pos"]) > 0, "%s: no KL or restore time" % k)
    check(float(by["tq2"]["kl"]) > float(by["q8_0"]["kl"]), "tq2 should cost more KL than q8_0")
    md = open(os.path.join(d, "rd.md")).read()
    check("## At TQ-3.5's quality" in md and "restore CPU us/position" in md, "rd.md lacks its summary")
    rep = open(os.path.join(d, "report.md")).read()
    check("## Rate-distortion" in rep, "report.md lacks the rate-distortion summary")
    out = os.path.join(tmp, "rdonly")
    rc, so, se = run("bench", "--quick", "--rd-only", "--no-plots", "--out", out, timeout=300)
    check(rc == 0 and os.path.isfile(os.path.join(out, "rd.md")), "bench --rd-only: exit %d: %s" % (rc, se[-300:]))
    check(not os.path.exists(os.path.join(out, "report.md")), "--rd-only wrote report.md")


CASES = [outputs_exist, rd_section, representation_invariants, corollary5_and_floor, store_and_projection, custom_text, errors,
         info_sizes_exact, quick_keeps_committed_report, every_row]


def main():
    shared_tmp = tempfile.mkdtemp(prefix="seqkv_bench_")
    try:
        for case in CASES:
            tmp = tempfile.mkdtemp(prefix="case_", dir=shared_tmp)
            shared = case in (outputs_exist, representation_invariants, corollary5_and_floor, store_and_projection)
            REPORTER.run_case(case, shared_tmp if shared else tmp)
    finally:
        shutil.rmtree(shared_tmp, ignore_errors=True)
    return 1 if REPORTER.failed else 0


if __name__ == "__main__":
    sys.exit(main())
