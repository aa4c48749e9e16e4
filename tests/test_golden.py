#!/usr/bin/python3
"""Golden cross-machine fixtures (tests/data/golden/, docs/determinism.md "Golden fixtures").

The .skv files there were written once, on the machine docs/determinism.md names, from
text.txt (330 tokens of held-out KJV text, BOS first) under the bundled model, with the
`model` and `tokens` codecs; digests.txt holds the SHA-256 of the KV dump and of the logits
that machine computed for the same text. On any other machine this test restores those
files, verified, and compares every byte:

  fixtures_intact       the fixture files are the ones digests.txt was made with
  restore_<codec>       `restore --verify` succeeds (the stored XXH3 KV digest matches), gives
                        back text.txt, and `--kv` writes the recorded KV dump; the model codec
                        also at 2 threads and with speculative (ngram) decoding
  kv_dump_and_logits    `kv-dump --logits` of text.txt gives the recorded KV and logits
  compress_same_bytes   compressing text.txt here writes the very same .skv bytes, but for
                        the header's tokenizer field (flags bit 2, bytes 112..119 and so
                        the header checksum, docs/format.md), which the fixtures predate:
                        they also prove that files written before it still restore

A machine whose arithmetic differs from the recording one fails here instead of silently
writing files nobody else can read. Prints PASS/FAIL/SKIP lines for tests/run.sh.

    tests/test_golden.py            check (SEQKV_BUILD selects the build, default build/)
    tests/test_golden.py --regen    rewrite the fixtures (only after a deliberate format,
                                    model or arithmetic change; then list the CPU again)
"""
import hashlib
import os
import shutil
import sys
import tempfile

from clitest import ROOT, SEQKV, Reporter, check, run
from testenv import run_cases

NAME = "test_golden"
REPORTER = Reporter(NAME)
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")
MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
HELDOUT = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")
CODECS = ("model", "tokens")
TEXT = os.path.join(GOLDEN, "text.txt")
TEXT_BYTES = 1300  # of heldout.txt, cut at the last space before it: 330 tokens with BOS


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def skv(codec):
    return os.path.join(GOLDEN, codec + ".skv")


def read_digests():
    """digests.txt: `NAME SHA256` lines ('#' lines are comments) -> dict."""
    out = {}
    with open(os.path.join(GOLDEN, "digests.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, hexd = line.split()[:2]
                out[name] = hexd
    return out


def seqkv_ok(*args):
    rc, out, err = run(*args)
    check(rc == 0, "seqkv %s: exit %d: %s" % (" ".join(map(str, args[:2])), rc, err.strip()[-300:]))
    return out


def fixtures_intact(tmp):
    want = read_digests()
    for name in ("text.txt",) + tuple(c + ".skv" for c in CODECS):
        got = sha256_file(os.path.join(GOLDEN, name))
        check(got == want.get(name), "%s: SHA-256 %s, digests.txt says %s" % (name, got, want.get(name)))


def check_restore(tmp, codec, *extra):
    """restore --verify of the golden file: exit 0, the text back, the recorded KV dump."""
    want = read_digests()
    stem = os.path.join(tmp, "-".join((codec,) + extra))  # a fresh name per run: no stale output
    txt, kv = stem + ".txt", stem + ".kv"
    seqkv_ok("restore", "-m", MODEL, skv(codec), "--verify", "-o", txt, "--kv", kv, *extra)
    check(open(txt, "rb").read() == open(TEXT, "rb").read(), "%s %s: restored text differs" % (codec, extra))
    got = sha256_file(kv)
    check(got == want["kv"], "%s %s: restored KV SHA-256 %s, recorded %s" % (codec, extra, got, want["kv"]))


def restore_model(tmp):
    check_restore(tmp, "model")
    check_restore(tmp, "model", "-t", "2")
    check_restore(tmp, "model", "--draft", "ngram")


def restore_tokens(tmp):
    check_restore(tmp, "tokens")
    check_restore(tmp, "tokens", "-t", "2")


def kv_dump_and_logits(tmp):
    want = read_digests()
    kv, logits = os.path.join(tmp, "t.kv"), os.path.join(tmp, "t.f32")
    seqkv_ok("kv-dump", "-m", MODEL, "-f", TEXT, "-o", kv, "--logits", logits)
    for name, path in (("kv", kv), ("logits", logits)):
        got = sha256_file(path)
        check(got == want[name], "kv-dump %s SHA-256 %s, recorded %s" % (name, got, want[name]))


def compress_same_bytes(tmp):
    for codec in CODECS:
        out = os.path.join(tmp, codec + ".skv")
        seqkv_ok("compress", "-m", MODEL, "-f", TEXT, "-o", out, "--codec", codec)
        new, old = open(out, "rb").read(), open(skv(codec), "rb").read()
        flags_new, flags_old = int.from_bytes(new[16:20], "little"), int.from_bytes(old[16:20], "little")
        check(flags_old & 4 == 0 and flags_new == flags_old | 4, "flags %#x, golden %#x" % (flags_new, flags_old))
        check(old[112:120] == bytes(8), "the golden %s.skv has a tokenizer field" % codec)
        shown = [l.split()[1] for l in seqkv_ok("inspect", out).splitlines() if l.startswith("tokenizer:")]
        check(shown == [new[112:120].hex()], "tokenizer field %s, inspect shows %r" % (new[112:120].hex(), shown))
        check(len(new) == len(old) and new[:16] == old[:16] and new[20:112] == old[20:112] and new[128:] == old[128:],
              "compress --codec %s here writes other bytes than the golden %s.skv" % (codec, codec))


CASES = [fixtures_intact, restore_model, restore_tokens, kv_dump_and_logits, compress_same_bytes]


def regen():
    """Writes text.txt, the .skv files and digests.txt from this machine's build."""
    os.makedirs(GOLDEN, exist_ok=True)
    text = open(HELDOUT, "rb").read()[:TEXT_BYTES]
    open(TEXT, "wb").write(text[:text.rfind(b" ")] + b"\n")
    tmp = tempfile.mkdtemp(prefix="seqkv_golden_")
    try:
        for codec in CODECS:
            seqkv_ok("compress", "-m", MODEL, "-f", TEXT, "-o", skv(codec), "--codec", codec)
        kv, logits = os.path.join(tmp, "t.kv"), os.path.join(tmp, "t.f32")
        seqkv_ok("kv-dump", "-m", MODEL, "-f", TEXT, "-o", kv, "--logits", logits)
        rows = [(n, sha256_file(os.path.join(GOLDEN, n))) for n in ("text.txt",) + tuple(c + ".skv" for c in CODECS)]
        rows += [("kv", sha256_file(kv)), ("logits", sha256_file(logits))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(GOLDEN, "digests.txt"), "w") as f:
        f.write("# SHA-256 of the golden fixtures and of what the recording machine computed from text.txt\n")
        f.write("# (kv: `seqkv kv-dump` f32 dump = `seqkv restore --kv` of each .skv; logits: kv-dump --logits).\n")
        f.write("# Written by tests/test_golden.py --regen; the machines that verified them: docs/determinism.md.\n")
        for name, hexd in rows:
            f.write("%s %s\n" % (name, hexd))


def main():
    if not os.access(SEQKV, os.X_OK):
        REPORTER.report("all", "FAIL", "%s not built" % SEQKV)
        return 1
    if sys.argv[1:] == ["--regen"]:
        regen()
    return run_cases(REPORTER, CASES, "seqkv_golden_")  # each file written has its own name


if __name__ == "__main__":
    sys.exit(main())
