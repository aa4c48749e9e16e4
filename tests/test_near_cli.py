#!/usr/bin/python3
"""seqkv store get --reuse near through the built CLI (build/seqkv), on the bundled model.

Prints `PASS test_near_cli:<case>` / `FAIL ...: <why>` lines like the C harness. Checks: a
near restore of an edited text is reported APPROXIMATE with its donor and counts, writes the
text back with -o and a KV dump that differs from the exact one; --recompute 1 gives a dump
equal to `kv-dump` of the text (exact, reported "exact"); --quality picks a fraction; the
stats line counts near gets; a plain get of the stored session stays verified; bad values
and a missing text fail cleanly. Runs in a few seconds.
"""
import os
import re
import shutil
import sys
import tempfile

from clitest import ROOT, SEQKV, Reporter, run

NAME = "test_near_cli"
REPORTER = Reporter(NAME)
report = REPORTER.report


def case(fn):
    try:
        why = fn()
        report(fn.__name__, "FAIL" if why else "PASS", why or "")
    except Exception as e:  # a crash of the case is a failure, not of the script
        report(fn.__name__, "FAIL", repr(e))


TMP = tempfile.mkdtemp(prefix="seqkv-near-cli-")
STORE = os.path.join(TMP, "st")
with open(os.path.join(ROOT, "tests/data/model_ref/heldout.txt"), encoding="utf-8") as f:
    TEXT = f.read()
A = os.path.join(TMP, "a.txt")
B = os.path.join(TMP, "b.txt")
with open(A, "w", encoding="utf-8") as f:
    f.write(TEXT[:1200])
with open(B, "w", encoding="utf-8") as f:  # one edit early on: the rest moves by a few positions
    f.write(TEXT[:150] + " in those days of old" + TEXT[150:1200])


def near_approximate():
    rc, out, err = run("store", "init", STORE)
    if rc:
        return "init: " + err
    rc, out, err = run("store", "put", STORE, "-f", A)
    if rc:
        return "put: " + err
    o, kv = os.path.join(TMP, "out.txt"), os.path.join(TMP, "near.kv")
    rc, out, err = run("store", "get", STORE, B, "--reuse", "near", "-o", o, "--kv", kv)
    if rc or not out.startswith("APPROXIMATE near restore of") or "from 'a.txt'" not in out:
        return "near get: %d %s %s" % (rc, out, err)
    m = re.search(r"(\d+) exact \(common prefix\), (\d+) reused from other positions", out)
    if not m or int(m.group(2)) == 0:
        return "no approximate reuse reported: " + out
    if open(o, encoding="utf-8").read() != open(B, encoding="utf-8").read():
        return "-o does not give the text back"
    ref = os.path.join(TMP, "b.kv")
    rc, _, err = run("kv-dump", "-f", B, "-o", ref)
    if rc:
        return "kv-dump: " + err
    if open(kv, "rb").read() == open(ref, "rb").read():
        return "an approximate restore gave the exact KV: nothing was reused?"
    return None


def near_exact_when_all_recomputed():
    kv, ref = os.path.join(TMP, "all.kv"), os.path.join(TMP, "b.kv")
    rc, out, err = run("store", "get", STORE, B, "--reuse", "near", "--recompute", "1", "--kv", kv)
    if rc or not out.startswith("exact near restore") or "APPROXIMATE" in out:
        return "recompute 1: %d %s %s" % (rc, out, err)
    if open(kv, "rb").read() != open(ref, "rb").read():
        return "--recompute 1 differs from kv-dump"
    rc, out, err = run("store", "get", STORE, B, "--reuse", "near", "--quality", "1e-9")
    if rc or "recompute fraction 1.00" not in out:
        return "quality below every calibrated bound: %s %s" % (out, err)
    rc, out, err = run("store", "get", STORE, B, "--reuse", "near", "--quality", "1")
    if rc or "recompute fraction 0.00" not in out:
        return "quality 1: %s %s" % (out, err)
    return None


def stats_and_exact_get():
    rc, out, err = run("store", "stats", STORE)
    m = re.search(r"near reuse \(APPROXIMATE\):\s+(\d+) near gets, (\d+) approximate", out)
    if rc or not m or m.group(1) != "4" or m.group(2) != "2":
        return "stats: " + out + err
    rc, out, err = run("store", "get", STORE, "a.txt")
    if rc or "KV digest verified" not in out or "APPROXIMATE" in out:
        return "exact get: " + out + err
    return None


def errors():
    rc, out, err = run("store", "get", STORE, B, "--reuse", "far")
    if rc != 2:
        return "bad --reuse: %d %s" % (rc, err)
    rc, out, err = run("store", "get", STORE, B, "--reuse", "near", "--recompute", "1.5")
    if rc != 2:
        return "bad --recompute: %d %s" % (rc, err)
    rc, out, err = run("store", "get", STORE, "a.txt", "--recompute", "0.5")
    if rc != 2 or "--reuse near" not in err:
        return "--recompute without --reuse near: %d %s" % (rc, err)
    rc, out, err = run("store", "get", STORE, B, "--reuse", "near", "--recompute", "0.5", "--quality", "0.1")
    if rc != 2:
        return "--recompute with --quality: %d %s" % (rc, err)
    rc, out, err = run("store", "get", STORE, os.path.join(TMP, "missing.txt"), "--reuse", "near")
    if rc != 1 or not err:
        return "missing text: %d %s" % (rc, err)
    return None


if not os.path.isfile(SEQKV):
    report("all", "SKIP", "no %s (build first)" % SEQKV)
    sys.exit(0)
try:
    for fn in (near_approximate, near_exact_when_all_recomputed, stats_and_exact_get, errors):
        case(fn)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if REPORTER.failed else 0)
