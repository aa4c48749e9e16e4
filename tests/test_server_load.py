#!/usr/bin/python3
"""The short version of scripts/serve_load.py (the load and persistence run of seqkv serve):
4 streamed chat clients x 10 turns (40 requests, 0 errors, /health answering, RSS under
the limits' bound, clean exit), then one kill -9 with requests in flight: every committed
session restores verified, every client's next
turn after the restart is served from the store with the text of a cold server; then a
long prompt resumed after kill -9 from the store (not a timing test: the figures are
bench/results/serve.md's)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ROOT, Reporter  # noqa: E402

NAME = "test_server_load"


def main():
    rep = Reporter(NAME)
    out = os.path.join(tempfile.mkdtemp(prefix="seqkv-load-test-"), "load.json")
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "serve_load.py"), "--clients", "4", "--turns", "10",
           "--parallel", "2", "--ctx", "512", "--kill-clients", "4", "--kill-turns", "6", "--resume-reps", "1",
           "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    if not os.path.exists(out):
        rep.report("run", "FAIL", "serve_load.py exited %d: %s" % (p.returncode, (p.stdout + p.stderr)[-2000:]))
        return 1
    r = json.load(open(out))
    ld, k, res = r["load"], r["kill"], r["resume"]
    checks = [
        ("load_40_requests_0_errors", ld["requests"] == 40 and ld["errors"] == 0, ld["error_samples"]),
        ("health_under_load", ld["health_polls"] > 0 and ld["health_ok"] == ld["health_polls"],
         "%d/%d" % (ld["health_ok"], ld["health_polls"])),
        ("rss_under_bound", ld["rss_peak_mib"] <= ld["rss_bound_mib"],
         "peak %.1f MiB, bound %.1f" % (ld["rss_peak_mib"], ld["rss_bound_mib"])),
        ("clean_exit", ld["clean_exit"], ""),
        ("kill9_committed_restore_verified", k["committed_sessions"] > 0 and k["n_restore_failures"] == 0,
         "%d sessions, failures %s" % (k["committed_sessions"], k["restore_failures"])),
        ("kill9_resume_cached_and_exact", k["resumed_clients"] > 0 and not k["resumed_uncached"] and
         not k["resumed_text_differs"], k),
        ("resume_long_prompt_from_store", res["cached"] == res["prompt_positions"] - 1, res),
    ]
    # under ASan the process's RSS is mostly shadow memory and the free quarantine
    sanitized = "san" in os.path.basename(os.environ.get("SEQKV_BUILD", "build").rstrip("/")) or \
        "ASAN_OPTIONS" in os.environ
    for name, ok, detail in checks:
        if name == "rss_under_bound" and sanitized:
            rep.report(name, "SKIP", "sanitizer build: its RSS is ASan's shadow memory and quarantine (%s)" % detail)
            continue
        rep.report(name, "PASS" if ok else "FAIL", "" if ok else str(detail))
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
