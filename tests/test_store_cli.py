#!/usr/bin/python3
"""seqkv store end to end through the built CLI (build/seqkv), on the bundled model.

Prints `PASS test_store_cli:<case>` / `FAIL ...: <why>` / `SKIP ...: <why>` lines like the
C harness. Checks: exit codes (0 ok, 1 failure, 2 usage), put/get --verify giving back the
text byte for byte, --kv writing the same dump as `kv-dump`, match numbers, ls/rm/gc/stats,
a duplicate name, a missing store, a foreign directory, and --help for every subcommand.
Runs in a few seconds.
"""
import os
import re
import shutil
import sys
import tempfile

from clitest import ROOT, SEQKV, Reporter, run

NAME = "test_store_cli"
REPORTER = Reporter(NAME)
report = REPORTER.report


def case(fn):
    try:
        why = fn()
        report(fn.__name__, "FAIL" if why else "PASS", why or "")
    except Exception as e:  # a crash of the case is a failure, not of the script
        report(fn.__name__, "FAIL", repr(e))


TMP = tempfile.mkdtemp(prefix="seqkv-store-cli-")
STORE = os.path.join(TMP, "st")
with open(os.path.join(ROOT, "tests/data/model_ref/heldout.txt"), encoding="utf-8") as f:
    TEXT = f.read()
A = os.path.join(TMP, "a.txt")
B = os.path.join(TMP, "b.txt")
with open(A, "w", encoding="utf-8") as f:
    f.write(TEXT[:700])
with open(B, "w", encoding="utf-8") as f:
    f.write(TEXT[:400] + " And they went on their way rejoicing.")


def put_get():
    rc, out, err = run("store", "init", STORE, "--budget", "1M")
    if rc:
        return "init: " + err
    for p in (A, B):
        rc, out, err = run("store", "put", STORE, "-f", p)
        if rc or "stored '%s'" % os.path.basename(p) not in out:
            return "put %s: %d %s" % (p, rc, err)
    if "shared with stored sessions" not in out or re.search(r", (\d+) shared", out).group(1) == "0":
        return "the second put shares nothing: " + out
    for p in (A, B):
        o = os.path.join(TMP, "out.txt")
        rc, out, err = run("store", "get", STORE, os.path.basename(p), "--verify", "-o", o)
        if rc or "KV digest verified" not in out:
            return "get: %d %s %s" % (rc, out, err)
        if open(o, encoding="utf-8").read() != open(p, encoding="utf-8").read():
            return "get -o does not give the text back"
    return None


def kv_dump_same():
    k1, k2 = os.path.join(TMP, "s.kv"), os.path.join(TMP, "d.kv")
    rc, out, err = run("store", "get", STORE, "a.txt", "--kv", k1)
    if rc:
        return err
    rc, out, err = run("kv-dump", "-f", A, "-o", k2)
    if rc:
        return "kv-dump: " + err
    return None if open(k1, "rb").read() == open(k2, "rb").read() else "store get --kv differs from kv-dump"


def match_ls_rm_gc():
    rc, out, err = run("store", "match", STORE, "-f", B)
    m = re.search(r"longest stored prefix: (\d+) of (\d+)", out)
    if rc or not m or m.group(1) != m.group(2):
        return "match: " + out + err
    if not re.search(r"d_T: [1-9][\d.]* bits", out):
        return "match d_T: " + out
    rc, out, err = run("store", "ls", STORE)
    if rc or [l.split("\t")[0] for l in out.splitlines()] != ["a.txt", "b.txt"]:
        return "ls: " + out
    rc, out, err = run("store", "put", STORE, "-f", A)
    if rc != 0 or "stored already" not in out:
        return "the same put again (a retry): %d %s %s" % (rc, out, err)
    rc, out, err = run("store", "put", STORE, "-f", B, "--name", "a.txt")
    if rc != 1 or "exists already" not in err:
        return "duplicate name: %d %s" % (rc, err)
    rc, out, err = run("store", "rm", STORE, "b.txt")
    if rc:
        return "rm: " + err
    rc, out, err = run("store", "gc", STORE, "--budget", "0")
    if rc or "materialised KV now 0 bytes" not in out:
        return "gc: " + out + err
    rc, out, err = run("store", "get", STORE, "a.txt", "--verify")
    if rc or not re.search(r": 0 positions loaded", out):
        return "get after gc: " + out + err
    rc, out, err = run("store", "stats", STORE)
    if rc or not re.search(r"sessions:\s+1\n", out) or "TQ-3.5" not in out:
        return "stats: " + out
    return None


def errors():
    rc, out, err = run("store", "get", os.path.join(TMP, "nothing"), "x")
    if rc != 1 or "store init" not in err:
        return "missing store: %d %s" % (rc, err)
    d = os.path.join(TMP, "foreign")
    os.makedirs(d)
    with open(os.path.join(d, "data.mdb"), "wb") as f:
        f.write(b"not an lmdb file" * 1000)
    rc, out, err = run("store", "ls", d)
    if rc != 1 or "not a seqkv store" not in err:
        return "foreign file: %d %s" % (rc, err)
    rc, out, err = run("store", "get", STORE, "nope")
    if rc != 1 or "no session named 'nope'" not in err:
        return "unknown session: %d %s" % (rc, err)
    rc, out, err = run("store", "frobnicate", STORE)
    if rc != 2:
        return "unknown command: %d" % rc
    rc, out, err = run("store", "put", STORE)
    if rc != 2:
        return "put without input: %d" % rc
    for sub in ("init", "put", "get", "match", "ls", "stats", "rm", "gc"):
        rc, out, err = run("store", sub, "--help")
        if rc or "usage: seqkv store " + sub not in out:
            return "--help of " + sub
    return None


def map_size_env():
    """$SEQKV_STORE_MAP_SIZE reaches the store (make valgrind-cli sets 1 GiB: Valgrind cannot
    map the 64 GiB default): a 128 KiB map is full after one put, and says so."""
    d = os.path.join(TMP, "small")
    prev = os.environ.get("SEQKV_STORE_MAP_SIZE")
    os.environ["SEQKV_STORE_MAP_SIZE"] = str(128 << 10)
    try:
        rc, out, err = run("store", "init", d)
        if rc:
            return "init with a 128 KiB map: %d %s" % (rc, err)
        rc, out, err = run("store", "put", d, "-f", A)
        if rc != 1 or "the store is full" not in err:
            return "put into a 128 KiB map: %d %s" % (rc, err)
    finally:
        if prev is None:
            del os.environ["SEQKV_STORE_MAP_SIZE"]
        else:
            os.environ["SEQKV_STORE_MAP_SIZE"] = prev
    rc, out, err = run("store", "put", d, "-f", A)
    if rc:
        return "put with the usual map after the full one: %d %s" % (rc, err)
    return None


if not os.path.isfile(SEQKV):
    report("all", "SKIP", "no %s (build first)" % SEQKV)
    sys.exit(0)
try:
    for fn in (put_get, kv_dump_same, match_ls_rm_gc, errors, map_size_env):
        case(fn)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if REPORTER.failed else 0)
