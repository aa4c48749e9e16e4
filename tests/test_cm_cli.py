#!/usr/bin/python3
"""Codec cmvd through the CLI (issue 16): --cm-dict TEXT keeps the dictionary's ids
(cm-H-F.skvids) and its primed model (cm-H-F.skvcm, docs/coder.md 4.8) in the cache
directory, $XDG_CACHE_HOME/seqkv (else ~/.cache/seqkv), named by TEXT's hash and the
tokenizer's fingerprint.

Prints `PASS test_cm_cli:<case>` / `FAIL ...` / `SKIP ...` lines (counted by tests/run.sh).
What is checked, on the bundled model:
- compress --codec cmvd writes both caches; a restore in a fresh process (which loads them)
  gives the original text, verified against the stored KV digests;
- a damaged snapshot is reported on stderr and rebuilt, the restore still succeeds; a damaged
  or truncated ids cache is rebuilt silently; a changed TEXT invalidates both caches (the
  restore is then refused: the file names another dictionary) and never restores wrong text;
- the bytes of the .skv file do not depend on whether the caches existed;
- nothing is written beside TEXT; ~/.cache/seqkv without XDG_CACHE_HOME; --no-cm-cache and
  SEQKV_NO_CM_CACHE=1 read and write no cache and still restore;
- each process writes a cache through a temporary file of its own (a directory where a fixed
  temporary name would go does not stop it; nothing is left over);
- a model with other weights and the same tokenizer uses the same caches (no new file), its
  sessions restore, and a session of the other model is refused as written with another
  model (its fingerprint is checked after the prefill).
"""
import glob
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
    os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "xdg")
    os.environ.pop("SEQKV_NO_CM_CACHE", None)
    return text, dic


def cached(tmp, ext, root=None):
    """The cache files with this extension (one per dictionary and model)."""
    return glob.glob(os.path.join(root or os.path.join(tmp, "xdg"), "seqkv", "cm-*" + ext))


def compress(text, dic, out, *extra):
    rc, _, err = run("compress", "-m", KJV, "-f", text, "--codec", "cmvd", "--cm-dict", dic, "--segment", "-c", "256",
                     "-o", out, *extra)
    check(rc == 0, "compress failed: %s" % err)
    return open(out, "rb").read()


def restore(skv, dic, out, *extra):
    rc, _, err = run("restore", "-m", KJV, skv, "--cm-dict", dic, "-o", out, *extra)
    return rc, err


def test_caches_written_and_used(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    first = compress(text, dic, skv)
    snaps, ids = cached(tmp, ".skvcm"), cached(tmp, ".skvids")
    check(len(snaps) == 1 and len(ids) == 1, "caches not written: %r %r" % (snaps, ids))
    check(os.path.getsize(snaps[0]) > 100 and os.path.getsize(ids[0]) > 36, "caches too short")
    check(snap_version(snaps[0]) == 2, "the snapshot is not version 2: %d" % snap_version(snaps[0]))
    check(not os.path.exists(dic + ".skvcm") and not os.path.exists(dic + ".skvids"), "a cache beside the text")
    check(compress(text, dic, skv) == first, "the .skv bytes changed once the caches existed")
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore with caches failed: %s" % err)
    other = os.path.join(tmp, "copy.txt")  # the same text elsewhere: the same cache
    open(other, "wb").write(open(dic, "rb").read())
    rc, err = restore(skv, other, out)
    check(rc == 0 and len(cached(tmp, ".skvcm")) == 1, "a copy of the text got its own cache: %s" % err)
    check(not glob.glob(os.path.join(tmp, "xdg", "seqkv", "*.tmp*")), "temporary files left")


def test_own_temporary_files(tmp):
    """Each process writes the caches through a temporary file of its own (cache.tmp.PID.N):
    a directory where a fixed "cache.tmp" would go (another writer's file, or junk) does not
    stop them from being written, and nothing is left over."""
    text, dic = setup(tmp)
    skv = os.path.join(tmp, "s.skv")
    compress(text, dic, skv)
    caches = cached(tmp, ".skvcm") + cached(tmp, ".skvids")
    check(len(caches) == 2, "caches not written: %r" % caches)
    for c in caches:
        os.remove(c)
        os.mkdir(c + ".tmp")
    compress(text, dic, skv)
    for c in caches:
        check(os.path.isfile(c), "%s not rewritten beside a directory named %s.tmp" % (c, c))
        os.rmdir(c + ".tmp")
    left = [f for f in glob.glob(os.path.join(tmp, "xdg", "seqkv", "*.tmp.*"))]
    check(not left, "temporary files left: %r" % left)


def test_home_and_opt_out(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    del os.environ["XDG_CACHE_HOME"]
    home = os.environ.get("HOME")
    os.environ["HOME"] = os.path.join(tmp, "home")
    try:
        first = compress(text, dic, skv)
        check(len(cached(tmp, ".skvcm", os.path.join(tmp, "home", ".cache"))) == 1, "no cache under ~/.cache/seqkv")
        os.environ["HOME"] = os.path.join(tmp, "home2")
        check(compress(text, dic, skv, "--no-cm-cache") == first, "--no-cm-cache changed the .skv bytes")
        rc, err = restore(skv, dic, out, "--no-cm-cache")
        check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore --no-cm-cache: %s" % err)
        os.environ["SEQKV_NO_CM_CACHE"] = "1"
        rc, err = restore(skv, dic, out)
        check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore, SEQKV_NO_CM_CACHE: %s" % err)
        check(not os.path.exists(os.path.join(tmp, "home2")), "a cache was written despite the opt-out")
    finally:
        os.environ.pop("SEQKV_NO_CM_CACHE", None)
        if home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = home


def test_damaged_caches_rebuilt(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    compress(text, dic, skv)
    snap_path, ids_path = cached(tmp, ".skvcm")[0], cached(tmp, ".skvids")[0]
    snap = bytearray(open(snap_path, "rb").read())
    snap[len(snap) // 2] ^= 0x10
    open(snap_path, "wb").write(bytes(snap))
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore after a damaged snapshot: %s" % err)
    check("damaged" in err, "no note about the damaged snapshot: %r" % err)
    rc, err = restore(skv, dic, out)
    check(rc == 0 and "damaged" not in err, "the snapshot was not rebuilt: %r" % err)
    # a header byte too (its own checksum)
    snap = bytearray(open(snap_path, "rb").read())
    snap[40] ^= 0x10
    open(snap_path, "wb").write(bytes(snap))
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read() and "damaged" in err,
          "restore after a damaged snapshot header: %s" % err)
    rc, err = restore(skv, dic, out)
    check(rc == 0 and "damaged" not in err, "the snapshot was not rebuilt after a damaged header: %r" % err)
    ids = open(ids_path, "rb").read()
    for bad in (ids[:len(ids) // 2], ids[:40] + bytes([ids[40] ^ 1]) + ids[41:]):
        open(ids_path, "wb").write(bad)
        rc, err = restore(skv, dic, out)
        check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore after a damaged ids cache: %s" % err)


def test_shared_by_tokenizer(tmp):
    text, dic = setup(tmp)
    data = bytearray(open(KJV, "rb").read())
    at = len(data) // 4 * 4 - 4  # the tensor data ends the file: one mantissa bit of its last non-zero word
    while at > 64 and data[at:at + 4] == b"\0\0\0\0":
        at -= 4
    data[at] ^= 1
    other = os.path.join(tmp, "other.gguf")
    open(other, "wb").write(bytes(data))
    mine, theirs, out = os.path.join(tmp, "a.skv"), os.path.join(tmp, "b.skv"), os.path.join(tmp, "out.txt")
    compress(text, dic, mine)
    before = sorted(cached(tmp, ".skvcm") + cached(tmp, ".skvids"))
    rc, _, err = run("compress", "-m", other, "-f", text, "--codec", "cmvd", "--cm-dict", dic, "-o", theirs)
    check(rc == 0, "compress with the other weights: %s" % err)
    after = sorted(cached(tmp, ".skvcm") + cached(tmp, ".skvids"))
    check(after == before and len(after) == 2, "another model with the same tokenizer: caches %r, were %r" % (after, before))
    rc, _, err = run("restore", "-m", other, theirs, "--cm-dict", dic, "-o", out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore with the other weights: %s" % err)
    rc, _, err = run("restore", "-m", other, mine, "--cm-dict", dic, "-o", out)
    check(rc != 0 and "wrong model" in err, "a session of another model restored: rc %d, %r" % (rc, err))


def snap_version(path):
    return int.from_bytes(open(path, "rb").read(8)[4:8], "little")


def as_version1(v2):
    """A version 2 snapshot (docs/coder.md 4.8) as version 1: the same header, each section
    one run of all its elements, one XXH3-64 (libxxhash through ctypes) over every byte."""
    import ctypes
    xxh = ctypes.CDLL("libxxhash.so.0")
    xxh.XXH3_64bits.restype = ctypes.c_uint64
    xxh.XXH3_64bits.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
    u32 = lambda b, at: int.from_bytes(b[at:at + 4], "little")
    ns = u32(v2, 36)
    out, at = bytearray(v2[:96]), 96 + 16 * ns + 8
    out[4:8] = (1).to_bytes(4, "little")
    for k in range(ns):
        n, size = u32(v2, 96 + 16 * k), u32(v2, 100 + 16 * k)
        for v in (n, size, 1, 0, n):
            out += v.to_bytes(4, "little")
        out += v2[at:at + n * size]
        at += n * size
    check(at == len(v2), "not a version 2 snapshot")
    return bytes(out) + xxh.XXH3_64bits(bytes(out), len(out)).to_bytes(8, "little")


def test_version1_cache_rewritten(tmp):
    """A cache of an older build (snapshot version 1) is read, then rewritten as version 2."""
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    compress(text, dic, skv)
    snap_path = cached(tmp, ".skvcm")[0]
    v1 = as_version1(open(snap_path, "rb").read())
    open(snap_path, "wb").write(v1)
    check(snap_version(snap_path) == 1, "not written as version 1")
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore from a version 1 cache: %s" % err)
    check("damaged" not in err, "the version 1 cache was refused: %r" % err)
    check(snap_version(snap_path) == 2, "the version 1 cache was not rewritten")
    rc, err = restore(skv, dic, out)
    check(rc == 0 and open(out, "rb").read() == open(text, "rb").read(), "restore from the rewritten cache: %s" % err)


def test_changed_dictionary_refused(tmp):
    text, dic = setup(tmp)
    skv, out = os.path.join(tmp, "s.skv"), os.path.join(tmp, "out.txt")
    compress(text, dic, skv)
    open(dic, "ab").write(b" and more words")
    rc, err = restore(skv, dic, out)
    check(rc != 0 and "dictionary" in err, "a changed dictionary was not refused: rc %d, %r" % (rc, err))


def main():
    cases = [test_caches_written_and_used, test_home_and_opt_out, test_damaged_caches_rebuilt,
             test_version1_cache_rewritten, test_changed_dictionary_refused, test_own_temporary_files,
             test_shared_by_tokenizer]
    return run_cases(REPORTER, cases, "skv_cmcli_")


if __name__ == "__main__":
    sys.exit(main())
