#!/usr/bin/python3
"""Codec cmvd through the CLI (issue 16): --cm-dict TEXT keeps the dictionary's ids
(TEXT.skvids) and its primed model (TEXT.skvcm, docs/coder.md 4.8) next to TEXT.

Prints `PASS test_cm_cli:<case>` / `FAIL ...` / `SKIP ...` lines (counted by tests/run.sh).
What is checked, on the bundled model:
- compress --codec cmvd writes both caches; a restore in a fresh process (which loads them)
  gives the original text, verified against the stored KV digests;
- a damaged snapshot is reported on stderr and rebuilt, the restore still succeeds; a damaged
  or truncated ids cache is rebuilt silently; a changed TEXT invalidates both caches (the
  restore is then refused: the file names another dictionary) and never restores wrong text;
- the bytes of the .skv file do not depend on whether the caches existed.
"""
import os
import sys

from clitest import ROOT, SEQKV, Reporter, Skip, check, run, run_cases

NAME = "test_cm_cli"
REPORTER = Reporter(NAME)
KJV = os.path.join(ROOT, "models", "kjv-4m.gguf")
HELD = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")


def setup(tmp):
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    held = open(HELD, "rb").read()
    text, dic = os.path.join(tmp, "t.txt"), os.path.join(tmp, "d.txt")
    open(text, "wb").write(held[:3000])
    open(dic, "wb").write(held[30000:50000])
    return text, dic


def compress(text, dic, out):
    rc, _, err = run("compress", "-m", KJV, "-f", text, "--codec", "cmvd", "--cm-dict", dic, "--segment", "-c", "256",
                     "-o", out)
    check(rc == 0, "compress failed: %s" % err)
    return open(out, "rb").read()


def restore(skv, dic, out):
    rc, _, err = run("restore", "-m", KJV, skv, "--cm-dict", dic, "-o", out)
    return rc, err


def test_caches_written_and_used(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    first = compress(text, dic, skv)
    check(os.path.getsize(dic + ".skvcm") > 100 and os.path.getsize(dic + ".skvids") > 36, "caches not written")
    check(compress(text, dic, skv) == first, "the .skv bytes changed once the caches existed")
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore with caches failed: %s" % err)
    check(not [f for f in os.listdir(tmp) if f.endswith(".tmp")], "temporary files left")


def test_damaged_caches_rebuilt(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    compress(text, dic, skv)
    snap = bytearray(open(dic + ".skvcm", "rb").read())
    snap[len(snap) // 2] ^= 0x10
    open(dic + ".skvcm", "wb").write(bytes(snap))
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore after a damaged snapshot: %s" % err)
    check("damaged" in err, "no note about the damaged snapshot: %r" % err)
    rc, err = restore(skv, dic, out)
    check(rc == 0 and "damaged" not in err, "the snapshot was not rebuilt: %r" % err)
    ids = open(dic + ".skvids", "rb").read()
    for bad in (ids[:len(ids) // 2], ids[:40] + bytes([ids[40] ^ 1]) + ids[41:]):
        open(dic + ".skvids", "wb").write(bad)
        rc, err = restore(skv, dic, out)
        check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore after a damaged ids cache: %s" % err)


def test_changed_dictionary_refused(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    compress(text, dic, skv)
    open(dic, "ab").write(b" and more words")
    rc, err = restore(skv, dic, out)
    check(rc != 0 and "dictionary" in err, "a changed dictionary was not refused: rc %d, %r" % (rc, err))


def main():
    cases = [test_caches_written_and_used, test_damaged_caches_rebuilt, test_changed_dictionary_refused]
    return run_cases(REPORTER, cases, "skv_cmcli_")


if __name__ == "__main__":
    sys.exit(main())
