#!/usr/bin/python3
"""seqkv compress / restore / inspect end to end, through the built CLI (build/seqkv).

Prints `PASS test_session_cli:<case>` / `FAIL ...: <why>` / `SKIP ...: <why>` lines like
the C harness (counted by tests/run.sh). Needs the stories260K model (../shared, or
$SEQKV_SHARED) and, for the texts, Debian's `bible` command (bible-kjv); cases SKIP
without them. Runs in a few seconds.

What is checked: exit codes (0 ok, 1 failure, 2 usage), that `restore --verify` succeeds
and gives back the input text byte for byte, that `restore --kv` writes exactly the dump
`kv-dump` writes for the same text, segmenting, the three input forms of compress (text,
token ids, a KV dump), clear errors for corrupt files and for a different model (naming
both fingerprints), and --help for each command; the quantized-KV codecs (tq3, kvq) on the
bundled KJV model: report, inspect, model-free restore of text and a lossy KV dump; the
transform codec kvtc with its calibration (--kvtc-cal).
"""
import os
import re
import shutil
import subprocess
import sys

from clitest import ROOT, SEQKV, Fail, Reporter, Skip, check, perturbed_copy, run, run_cases
from testenv import missing

NAME = "test_session_cli"
REPORTER = Reporter(NAME)
report = REPORTER.report


def shared_dir():
    env = os.environ.get("SEQKV_SHARED")
    if env:
        return env
    for cand in (os.path.join(ROOT, "..", "shared"), os.path.join(ROOT, "..", "..", "shared")):
        if os.path.isfile(os.path.join(cand, "models", "stories260K", "stories260K.gguf")):
            return cand
    return None


SHARED = shared_dir()
MODEL = os.path.join(SHARED, "models", "stories260K", "stories260K.gguf") if SHARED else None


def bible(ref):
    out = subprocess.run(["bible", "-f", ref], capture_output=True, timeout=60)
    if out.returncode != 0 or not out.stdout:
        raise RuntimeError("bible -f %s failed" % ref)
    return out.stdout


def need_model():
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    if not MODEL:
        raise missing(Skip, Fail)("stories260K not found (../shared/models/stories260K)")


def need_texts():
    need_model()
    if not shutil.which("bible"):
        raise Skip("the `bible` command (Debian bible-kjv) is not installed")


def fingerprint_of(model):
    rc, out, err = run("info", "-m", model)
    check(rc == 0, "info -m %s: exit %d: %s" % (model, rc, err.strip()))
    m = re.search(r"^fingerprint:\s+([0-9a-f]{32})\s*$", out, re.M)
    check(m, "info printed no fingerprint")
    return m.group(1)


def file_field(out, label):
    m = re.search(r"^%s:\s+(.*)$" % re.escape(label), out, re.M)
    return m.group(1).strip() if m else None


# ---- cases -------------------------------------------------------------------------


def help_and_usage_errors(tmp):
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    for cmd in ("compress", "restore", "inspect"):
        for flag in ("--help", "-h"):
            rc, out, err = run(cmd, flag)
            check(rc == 0, "%s %s: exit %d" % (cmd, flag, rc))
            check(out.startswith("usage: seqkv %s" % cmd), "%s %s: no usage on stdout: %r" % (cmd, flag, out[:80]))
    usage_errors = [
        ("compress", "--bogus"),
        ("compress", "-f", "x.txt"),                                   # no -o
        ("compress", "-f", "x.txt", "--ids", "y", "-o", "z.skv"),      # two inputs
        ("compress", "-f", "x.txt", "-o", "z.skv", "--codec", "lzma"),
        ("compress", "-f", "x.txt", "-o", "z.skv", "-t", "0"),
        ("compress", "-f"),                                            # missing value
        ("restore",),                                                  # no input
        ("restore", "a.skv", "--bogus"),
        ("restore", "a.skv", "b.skv"),
        ("restore", "a.skv", "-t", "many"),
        ("inspect",),
        ("inspect", "a.skv", "b.skv"),
    ]
    for args in usage_errors:
        rc, out, err = run(*args)
        check(rc == 2, "%s: exit %d, want 2 (usage)" % (" ".join(args), rc))
        check(err.strip(), "%s: no message on stderr" % " ".join(args))


def roundtrip_text_and_kv(tmp):
    """Single-segment text: restore --verify gives it back; --kv equals kv-dump's file."""
    need_texts()
    text = bible("Gen1:1-Gen1:5")
    src = os.path.join(tmp, "gen.txt")
    open(src, "wb").write(text)
    ref_kv = os.path.join(tmp, "ref.kv")
    rc, out, err = run("kv-dump", "-m", MODEL, "-f", src, "-o", ref_kv)
    check(rc == 0, "kv-dump: exit %d: %s" % (rc, err.strip()))
    ref = open(ref_kv, "rb").read()
    fp = fingerprint_of(MODEL)
    for codec in ("model", "tokens"):
        skv = os.path.join(tmp, "gen_%s.skv" % codec)
        rc, out, err = run("compress", "-m", MODEL, "-f", src, "-o", skv, "--codec", codec)
        check(rc == 0, "compress --codec %s: exit %d: %s" % (codec, rc, err.strip()))
        size = os.path.getsize(skv)
        check(file_field(out, "codec") == codec, "compress did not report codec %s" % codec)
        check(re.search(r"^file:\s+.*, %d bytes$" % size, out, re.M), "compress reported a wrong file size")
        n_tok = int(file_field(out, "tokens"))
        check(n_tok > 50, "only %d tokens" % n_tok)
        if codec == "model":
            check(re.search(r"^coder overhead:\s+[-+]\d", out, re.M), "compress --codec model printed no overhead")
        check("TQ-3.5" in out and "f16" in out, "compress printed no f16 / TQ-3.5 comparison")
        rc, out, err = run("inspect", skv)
        check(rc == 0, "inspect: exit %d: %s" % (rc, err.strip()))
        check(file_field(out, "fingerprint") == fp, "inspect fingerprint differs from the model's")
        check(file_field(out, "tokens") == str(n_tok), "inspect token count differs")
        check(file_field(out, "segments").startswith("1"), "inspect: not one segment")
        check(file_field(out, "codec").startswith(codec), "inspect codec")
        for threads in ("1", "2"):
            back, kv = os.path.join(tmp, "back.txt"), os.path.join(tmp, "back.kv")
            for p in (back, kv):
                if os.path.exists(p):
                    os.remove(p)
            rc, out, err = run("restore", "-m", MODEL, skv, "-o", back, "--kv", kv, "--verify", "-t", threads)
            check(rc == 0, "restore --verify (%s, -t %s): exit %d: %s" % (codec, threads, rc, err.strip()))
            check("verified" in out, "restore --verify did not say it verified: %r" % out)
            check(open(back, "rb").read() == text, "restored text differs from the input (%s, -t %s)" % (codec, threads))
            check(open(kv, "rb").read() == ref, "restore --kv differs from kv-dump of the same text (%s)" % codec)
        rc, out, err = run("restore", "-m", MODEL, skv, "-o", "-")
        check(rc == 0 and out.encode() == text, "restore -o - (stdout) differs")


def other_inputs(tmp):
    """compress --ids (from `seqkv tokenize`), --kv-in (a kv-dump) and -f - (stdin)."""
    need_texts()
    text = bible("Gen2:1-Gen2:3")
    src = os.path.join(tmp, "gen2.txt")
    open(src, "wb").write(text)
    rc, ids, err = run("tokenize", "-m", MODEL, "-f", src)
    check(rc == 0, "tokenize: exit %d: %s" % (rc, err.strip()))
    ids_path = os.path.join(tmp, "gen2.ids")
    open(ids_path, "w").write(ids)
    ref_kv = os.path.join(tmp, "gen2.kv")
    rc, out, err = run("kv-dump", "-m", MODEL, "-f", src, "-o", ref_kv)
    check(rc == 0, "kv-dump: exit %d" % rc)
    files = []
    for i, args in enumerate((["--ids", ids_path], ["--kv-in", ref_kv], ["-f", "-"], ["-f", src])):
        skv = os.path.join(tmp, "in%d.skv" % i)
        rc, out, err = run("compress", "-m", MODEL, *args, "-o", skv, stdin=text if args[1] == "-" else None)
        check(rc == 0, "compress %s: exit %d: %s" % (args[0], rc, err.strip()))
        files.append(open(skv, "rb").read())
        kv = os.path.join(tmp, "in%d.kv" % i)
        rc, out, err = run("restore", "-m", MODEL, skv, "--kv", kv, "--verify")
        check(rc == 0, "restore of the %s session: exit %d: %s" % (args[0], rc, err.strip()))
        check(open(kv, "rb").read() == open(ref_kv, "rb").read(), "%s: restored KV differs from kv-dump" % args[0])
    check(all(f == files[0] for f in files), "the four input forms gave different .skv files")
    bad_ids = os.path.join(tmp, "bad.ids")
    for content in ("1 2 banana 4", "1 -5 3", "1 99999 3"):
        open(bad_ids, "w").write(content)
        rc, out, err = run("compress", "-m", MODEL, "--ids", bad_ids, "-o", os.path.join(tmp, "bad.skv"))
        check(rc == 1 and err.strip(), "compress --ids %r: exit %d (want 1 with a message)" % (content, rc))


def segments(tmp):
    """Longer than the context: refused without --segment, segmented with it."""
    need_texts()
    text = bible("Gen1:1-Gen1:31")
    src = os.path.join(tmp, "gen1.txt")
    open(src, "wb").write(text)
    skv = os.path.join(tmp, "gen1.skv")
    rc, out, err = run("compress", "-m", MODEL, "-f", src, "-o", skv)
    check(rc == 1, "compress of a text longer than the context: exit %d, want 1" % rc)
    check("--segment" in err and "context" in err, "unhelpful message: %r" % err)
    check(not os.path.exists(skv), "a refused compress left a file")
    for codec in ("model", "tokens"):
        rc, out, err = run("compress", "-m", MODEL, "-f", src, "-o", skv, "--segment", "--codec", codec, "-t", "2")
        check(rc == 0, "compress --segment: exit %d: %s" % (rc, err.strip()))
        n_tok = int(file_field(out, "tokens"))
        rc, out, err = run("inspect", skv)
        seg = file_field(out, "segments")
        want = (n_tok + 511) // 512
        check(rc == 0 and seg == "%d (segmented session)" % want, "inspect segments: %r (want %d)" % (seg, want))
        check(len(re.findall(r"^  \[\d+\] \d+ tokens, payload", out, re.M)) == want, "inspect lists no segments")
        back = os.path.join(tmp, "gen1.back")
        rc, out, err = run("restore", "-m", MODEL, skv, "-o", back, "--verify")
        check(rc == 0, "restore --verify of a segmented session: exit %d: %s" % (rc, err.strip()))
        check(open(back, "rb").read() == text, "segmented restore: text differs (%s)" % codec)
        rc, out, err = run("restore", "-m", MODEL, skv, "--kv", os.path.join(tmp, "x.kv"))
        check(rc == 2 and "segment" in err, "restore --kv of a segmented session: exit %d, want 2" % rc)


def corrupt_files(tmp):
    need_texts()
    text = bible("Gen1:1-Gen1:3")
    src = os.path.join(tmp, "c.txt")
    open(src, "wb").write(text)
    skv = os.path.join(tmp, "c.skv")
    rc, out, err = run("compress", "-m", MODEL, "-f", src, "-o", skv)
    check(rc == 0, "compress: exit %d" % rc)
    good = open(skv, "rb").read()
    bad = os.path.join(tmp, "bad.skv")
    cases = {
        "flipped payload bit": good[:len(good) - 20] + bytes([good[-20] ^ 0x10]) + good[len(good) - 19:],
        "flipped header bit": good[:40] + bytes([good[40] ^ 1]) + good[41:],
        "truncated": good[:len(good) - 3],
        "extended": good + b"\0",
        "header only": good[:128],
        "empty": b"",
        "not a session": b"In the beginning God created the heaven and the earth.\n" * 4,
    }
    for what, data in cases.items():
        open(bad, "wb").write(data)
        for cmd in (["restore", "-m", MODEL, bad, "--verify"], ["inspect", bad]):
            rc, out, err = run(*cmd)
            check(rc == 1, "%s, %s: exit %d, want 1" % (what, cmd[0], rc))
            check("not a valid .skv file" in err and "bad.skv" in err,
                  "%s, %s: unclear message %r" % (what, cmd[0], err.strip()))
    rc, out, err = run("restore", "-m", MODEL, os.path.join(tmp, "missing.skv"))
    check(rc == 1 and "missing.skv" in err, "missing file: exit %d, %r" % (rc, err.strip()))
    v2 = bytearray(good)
    v2[8] = 2  # version 2: the header checksum fails first; either way a clear refusal
    open(bad, "wb").write(bytes(v2))
    rc, out, err = run("inspect", bad)
    check(rc == 1 and err.strip(), "version 2: exit %d" % rc)


def wrong_model(tmp):
    """One weight changed in a copy of the GGUF: restore refuses it, naming both fingerprints."""
    need_texts()
    other = perturbed_copy(MODEL, os.path.join(tmp, "perturbed.gguf"))
    fp1, fp2 = fingerprint_of(MODEL), fingerprint_of(other)
    check(fp1 != fp2, "one weight changed but the fingerprint did not")
    src = os.path.join(tmp, "w.txt")
    open(src, "wb").write(bible("Gen1:1-Gen1:2"))
    for codec in ("model", "tokens"):
        skv = os.path.join(tmp, "w.skv")
        rc, out, err = run("compress", "-m", MODEL, "-f", src, "-o", skv, "--codec", codec)
        check(rc == 0, "compress: exit %d" % rc)
        rc, out, err = run("restore", "-m", other, skv, "--verify", "-o", os.path.join(tmp, "w.out"))
        check(rc == 1, "restore with another model (%s): exit %d, want 1" % (codec, rc))
        check("wrong model" in err and fp1 in err and fp2 in err,
              "the refusal does not name both models: %r" % err.strip())
        rc, out, err = run("restore", "-m", MODEL, skv, "--verify")
        check(rc == 0, "restore with the right model: exit %d" % rc)


def read_kvdump(path):
    """-> (n_pos, tokens, values as a list of floats) of a docs/kvdump.md f32 dump."""
    import struct
    d = open(path, "rb").read()
    check(d[:8] == b"SKVDUMP\0" and struct.unpack_from("<I", d, 16)[0] == 0, "%s is not an f32 dump" % path)
    n_layer, n_head_kv, head_dim, n_pos = struct.unpack_from("<4I", d, 20)
    tokens = list(struct.unpack_from("<%di" % n_pos, d, 64))
    n = n_layer * 2 * n_head_kv * n_pos * head_dim
    return n_pos, tokens, struct.unpack_from("<%df" % n, d, 64 + 4 * n_pos), n_layer


def quantized_kv_codec(tmp):
    """--codec tq3 on the bundled KJV model: the report splits tokens and KV, inspect shows
    the scheme, restore gives the text back without running the model, --kv writes the
    lossy KV (close to kv-dump's exact one, at the reported error), corruption and misuse
    are refused. Also --codec kvq with a K/V split."""
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    kjv = os.path.join(ROOT, "models", "kjv-4m.gguf")
    text = open(os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"), "rb").read()[:1500]
    text = text[:text.rindex(b" ")]
    src = os.path.join(tmp, "h.txt")
    open(src, "wb").write(text)
    skv = os.path.join(tmp, "h.skv")
    rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, "--codec", "tq3")
    check(rc == 0, "compress --codec tq3: exit %d: %s" % (rc, err.strip()))
    check((file_field(out, "codec") or "").startswith("tq3"), "compress did not report codec tq3")
    n = int(file_field(out, "tokens"))
    check(re.search(r"^KV part:\s+%d bytes = 3328\.0 bits/position$" % (416 * n), out, re.M),
          "KV part line missing or wrong: %r" % out)
    m = re.search(r"^tokens part:\s+(\d+) bytes = ([\d.]+) bits/position", out, re.M)
    check(m, "tokens part line missing")
    size = os.path.getsize(skv)
    check(size == 128 + 32 + 56 + int(m.group(1)) + 416 * n + 8, "file size %d is not the computed one" % size)
    check(re.search(r"^vs f16 KV:\s+4\.\d\dx smaller", out, re.M), "ratio vs f16 missing: %r" % out)
    mse = re.search(r"^KV relative MSE:\s+K ([\d.e-]+), V ([\d.e-]+)", out, re.M)
    check(mse, "relative MSE missing")
    rc, out, err = run("inspect", skv)
    check(rc == 0, "inspect: exit %d" % rc)
    check("k=tq3,v=tq3, seed 0; 4 layers x 2 KV heads x head_dim 64; 416 bytes/position" in out,
          "inspect shows no KV scheme: %r" % out)
    check(re.search(r"^\s+tokens %s bytes .* KV %d bytes" % (m.group(1), 416 * n), out, re.M), "inspect segment sizes")
    back, kv, ref_kv = os.path.join(tmp, "back.txt"), os.path.join(tmp, "q.kv"), os.path.join(tmp, "ref.kv")
    rc, out, err = run("restore", "-m", kjv, skv, "-o", back, "--kv", kv)
    check(rc == 0, "restore --kv: exit %d: %s" % (rc, err.strip()))
    check(open(back, "rb").read() == text, "restored text differs from the input")
    check("codec tq3" in out and "decoded KV verified" in out and "without running the model" in out,
          "restore report: %r" % out)
    rc, out, err = run("restore", "-m", kjv, skv)
    check(rc == 0 and "the KV is lossy" in out and "not written" in out, "restore without --kv: %r" % out)
    rc, out, err = run("kv-dump", "-m", kjv, "-f", src, "-o", ref_kv)
    check(rc == 0, "kv-dump: exit %d: %s" % (rc, err.strip()))
    nq, tq, vq, n_layer = read_kvdump(kv)
    ne, te, ve, _ = read_kvdump(ref_kv)
    check(nq == ne == n and tq == te, "dump positions/tokens differ")
    check(vq != ve, "the restored KV is exact: it should be the tq3 round trip")
    # relative error per kind, against the number compress reported (f32 stored as f32)
    blk = len(ve) // (2 * n_layer)
    for kind in (0, 1):
        num = den = 0.0
        for layer in range(n_layer):
            o = (2 * layer + kind) * blk
            for a, b in zip(ve[o:o + blk], vq[o:o + blk]):
                num += (a - b) * (a - b)
                den += a * a
        rel = num / den
        want = float(mse.group(1 + kind))
        check(abs(rel - want) <= 2e-3 * want + 1e-6, "kind %d: relative MSE %.5g, compress said %.5g" % (kind, rel, want))
    # corruption: one KV byte
    data = bytearray(open(skv, "rb").read())
    data[size - 100] ^= 4
    bad = os.path.join(tmp, "bad.skv")
    open(bad, "wb").write(bytes(data))
    rc, out, err = run("restore", "-m", kjv, bad)
    check(rc == 1 and "checksum mismatch" in err, "corrupt file: exit %d: %r" % (rc, err))
    # kvq: a K/V split and misuse
    rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, "--codec", "kvq", "--kv-quant", "k=tq4,v=tq3")
    check(rc == 0 and re.search(r"^KV part:\s+%d bytes" % (480 * n), out, re.M), "kvq k=tq4,v=tq3: %r %r" % (out, err))
    rc, out, err = run("restore", "-m", kjv, skv, "-o", back)
    check(rc == 0 and open(back, "rb").read() == text, "kvq restore")
    for args in (("--codec", "kvq"), ("--codec", "tq3", "--kv-quant", "tq3"), ("--codec", "kvq", "--kv-quant", "tq9")):
        rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, *args)
        check(rc == 2 and err.strip(), "compress %s: exit %d, want 2" % (" ".join(args), rc))


def pred_layer0_restore(tmp):
    """--codec pred with layer0: compress says layer 0 is not stored, inspect and restore say
    the model regenerates it (not "without running the model"), and the restored dump's layer 0
    is kv-dump's exactly while layers 1.. are the lossy decode. A pred file without layer0
    restores "without running the model"."""
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    kjv = os.path.join(ROOT, "models", "kjv-4m.gguf")
    text = open(os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"), "rb").read()[:1200]
    text = text[:text.rindex(b" ")]
    src, skv = os.path.join(tmp, "p.txt"), os.path.join(tmp, "p.skv")
    open(src, "wb").write(text)
    rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, "--codec", "pred", "--kv-quant", "tok,ramp,layer0")
    check(rc == 0 and "layer 0 not stored: the restore regenerates it with the model" in out,
          "compress pred layer0: exit %d: %r %r" % (rc, out, err))
    rc, out, err = run("inspect", skv)
    check(rc == 0 and "layer 0 regenerated by the model at restore" in out and "restored without the model" not in out,
          "inspect pred layer0: %r" % out)
    back, kv, ref_kv = os.path.join(tmp, "p_back.txt"), os.path.join(tmp, "p.kv"), os.path.join(tmp, "p_ref.kv")
    rc, out, err = run("restore", "-m", kjv, skv, "-o", back, "--kv", kv)
    check(rc == 0 and open(back, "rb").read() == text, "restore pred layer0: exit %d: %s" % (rc, err.strip()))
    check("decoded KV verified" in out and "layer 0 regenerated exactly by the model" in out and
          "layers 1..3 decoded" in out and "without running the model" not in out, "restore report: %r" % out)
    rc, out, err = run("kv-dump", "-m", kjv, "-f", src, "-o", ref_kv)
    check(rc == 0, "kv-dump: exit %d: %s" % (rc, err.strip()))
    nq, tq, vq, n_layer = read_kvdump(kv)
    ne, te, ve, _ = read_kvdump(ref_kv)
    blk = len(ve) // (2 * n_layer)
    check(nq == ne and tq == te and vq[:2 * blk] == ve[:2 * blk], "layer 0 of the restore is not the exact one")
    check(vq[2 * blk:] != ve[2 * blk:], "layers 1.. are exact: they should be the lossy decode")
    rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, "--codec", "pred", "--kv-quant", "tok,ramp")
    check(rc == 0 and "layer 0 not stored" not in out, "compress pred: %r" % out)
    rc, out, err = run("restore", "-m", kjv, skv)
    check(rc == 0 and "without running the model" in out and "regenerated" not in out, "restore pred: %r" % out)


def batch_restore_of_segments(tmp):
    """--ctx cuts the bundled model's sessions into short segments; restore decodes them
    together (--batch, default 16) and gives the same text and verified KV as one by one."""
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    KJV = os.path.join(ROOT, "models", "kjv-4m.gguf")
    held = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")
    text = open(held, "rb").read()[:6000]
    text = text[:text.rindex(b" ")]
    src = os.path.join(tmp, "h.txt")
    open(src, "wb").write(text)
    skv = os.path.join(tmp, "h.skv")
    rc, out, err = run("compress", "-m", KJV, "-f", src, "-o", skv, "--segment", "--ctx", "64")
    check(rc == 0, "compress --ctx 64: exit %d: %s" % (rc, err.strip()))
    n_tok = int(file_field(out, "tokens"))
    rc, out, err = run("inspect", skv)
    check("%d (segmented session)" % ((n_tok + 63) // 64) in out, "inspect: not cut into 64-token segments")
    passes = {}
    for b in ("1", "16", "64"):
        back = os.path.join(tmp, "back" + b)
        rc, out, err = run("restore", "-m", KJV, skv, "-o", back, "--batch", b)
        check(rc == 0, "restore --batch %s: exit %d: %s" % (b, rc, err.strip()))
        check(open(back, "rb").read() == text, "restore --batch %s: text differs" % b)
        check("verified bit-exact" in out, "restore --batch %s did not verify" % b)
        m = re.search(r"^(\d+) forward passes", out, re.M)
        check(m is not None, "no pass count in %r" % out)
        passes[b] = int(m.group(1))
    check(passes["1"] == n_tok and passes["16"] < n_tok // 8, "passes: %r for %d tokens" % (passes, n_tok))
    for bad in ("0", "65", "x"):
        rc, out, err = run("restore", "-m", KJV, skv, "--batch", bad)
        check(rc == 2, "--batch %s: exit %d, want 2" % (bad, rc))
    rc, out, err = run("compress", "-m", KJV, "-f", src, "-o", skv, "--ctx", "0")
    check(rc == 2, "--ctx 0: exit %d, want 2" % rc)


def generation_stored_as_it_runs(tmp):
    """generate -o stores the prompt + generation through the encoder; the session restores
    verified to exactly the printed text, and the text is the same as without -o."""
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    kjv = os.path.join(ROOT, "models", "kjv-4m.gguf")
    args = ["generate", "-m", kjv, "-p", "And the LORD said", "-n", "60", "--temp", "0.9", "--seed", "7"]
    rc, plain, err = run(*args)
    check(rc == 0, "generate: exit %d: %s" % (rc, err.strip()))
    for codec in ("model", "tq3"):
        skv = os.path.join(tmp, "g_%s.skv" % codec)
        rc, out, err = run(*(args + ["-o", skv, "--codec", codec]))
        check(rc == 0, "generate -o: exit %d: %s" % (rc, err.strip()))
        check(out == plain, "the text changed when the session is stored (%s)" % codec)
        check("stored the session" in err, "no report of the stored session: %r" % err)
        back = os.path.join(tmp, "g.txt")
        rc, o2, err = run("restore", "-m", kjv, skv, "-o", back)
        check(rc == 0 and "verified" in o2, "restore of the generation: exit %d: %s" % (rc, err.strip()))
        check(open(back, encoding="utf-8").read() == plain.rstrip("\n"), "restored text differs (%s)" % codec)
    rc, out, err = run("generate", "-m", kjv, "-p", "x", "--codec", "model")
    check(rc == 2 and "-o" in err, "--codec without -o: exit %d" % rc)
    rc, out, err = run("generate", "-m", kjv, "-p", "x", "-o", os.path.join(tmp, "y.skv"), "--codec", "zip")
    check(rc == 2 and "codec" in err, "bad --codec: exit %d, want 2" % rc)


def f16_kv_cache_sessions(tmp):
    """compress --kv-cache f16 records the type; restore takes the file's type by default
    (batched or one by one, verified, same text), refuses the other type by name (exit 1),
    and generate --kv-cache f16 -o stores a session that restores the same way."""
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    kjv = os.path.join(ROOT, "models", "kjv-4m.gguf")
    text = open(os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"), "rb").read()[:3000]
    text = text[:text.rindex(b" ")]
    src = os.path.join(tmp, "f.txt")
    open(src, "wb").write(text)
    for codec in ("model", "tokens"):
        skv = os.path.join(tmp, "f16_%s.skv" % codec)
        rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, "--segment", "--ctx", "96", "--codec", codec,
                           "--kv-cache", "f16")
        check(rc == 0, "compress --kv-cache f16: exit %d: %s" % (rc, err.strip()))
        for extra in ([], ["--batch", "1"], ["--kv-cache", "f16"]):
            back = os.path.join(tmp, "f16_back")
            rc, out, err = run("restore", "-m", kjv, skv, "-o", back, *extra)
            check(rc == 0 and "verified bit-exact" in out, "restore %s %r: exit %d: %s" % (codec, extra, rc, err.strip()))
            check(open(back, "rb").read() == text, "restore %s %r: text differs" % (codec, extra))
        for extra in ([], ["--batch", "1"]):
            rc, out, err = run("restore", "-m", kjv, skv, "-o", os.path.join(tmp, "no"), "--kv-cache", "f32", *extra)
            check(rc == 1 and "kv_cache_type f16" in err, "restore --kv-cache f32 of an f16 file: exit %d: %s" % (rc, err))
    rc, out, err = run("restore", "-m", kjv, skv, "--kv-cache", "f8")
    check(rc == 2, "--kv-cache f8: exit %d, want 2" % rc)
    g = os.path.join(tmp, "g16.skv")
    rc, plain, err = run("generate", "-m", kjv, "-p", "And God said", "-n", "40", "--kv-cache", "f16", "-o", g)
    check(rc == 0, "generate --kv-cache f16: exit %d: %s" % (rc, err.strip()))
    rc, out, err = run("restore", "-m", kjv, g, "-o", os.path.join(tmp, "g16.txt"))
    check(rc == 0 and "verified" in out, "restore of the f16 generation: exit %d: %s" % (rc, err.strip()))
    check(open(os.path.join(tmp, "g16.txt"), encoding="utf-8").read() == plain.rstrip("\n"), "restored text differs")


def kvtc_codec(tmp):
    """--codec kvtc on the bundled KJV model with a calibration from `kvtc-calib` (on text
    the session does not hold): inspect names the calibration, restore (file or directory)
    verifies the decoded KV against the stored digest and gives the text back, two restores
    write the same lossy dump, and a missing, another or a damaged calibration or stream is
    refused naming the file."""
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)
    kjv = os.path.join(ROOT, "models", "kjv-4m.gguf")
    held = open(os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"), "rb").read()
    cal_txt, other_txt, src = (os.path.join(tmp, n) for n in ("cal.txt", "other.txt", "h.txt"))
    open(cal_txt, "wb").write(held[:6000])
    open(other_txt, "wb").write(held[6000:9000])
    text = held[20000:21500]
    open(src, "wb").write(text[:text.rindex(b" ")])
    cdir, odir = os.path.join(tmp, "cal"), os.path.join(tmp, "other")
    os.makedirs(cdir), os.makedirs(odir)
    rc, out, err = run("kvtc-calib", "-m", kjv, "-f", cal_txt, "-c", "256", "--dir", cdir)
    check(rc == 0 and out.strip().endswith(".cal"), "kvtc-calib: exit %d %r %r" % (rc, out, err))
    cal = out.strip()
    cal_id = os.path.basename(cal)
    rc, out, err = run("kvtc-calib", "-m", kjv, "-f", other_txt, "-c", "256", "--dir", odir)
    other = out.strip()
    skv = os.path.join(tmp, "h.skv")
    rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, "--codec", "kvtc", "--kvtc-cal", cal)
    check(rc == 0 and "KV part:" in out, "compress --codec kvtc: exit %d: %s" % (rc, err.strip()))
    rc, out, err = run("inspect", skv)
    check(rc == 0 and ("calibration:  %s" % cal_id) in out and "k=tc:tok,v=tc:tok" in out, "inspect: %r" % out)
    back, kv1, kv2 = (os.path.join(tmp, n) for n in ("back.txt", "a.kv", "b.kv"))
    rc, out, err = run("restore", "-m", kjv, skv, "-o", back, "--kv", kv1, "--kvtc-cal", cal)
    check(rc == 0 and "decoded KV verified" in out, "restore --kvtc-cal FILE: exit %d: %s" % (rc, err.strip()))
    check(open(back, "rb").read() == open(src, "rb").read(), "restored text differs")
    rc, out, err = run("restore", "-m", kjv, skv, "--kv", kv2, "--kvtc-cal", cdir)
    check(rc == 0 and open(kv1, "rb").read() == open(kv2, "rb").read(), "restore --kvtc-cal DIR: %d %s" % (rc, err))
    rc, out, err = run("restore", "-m", kjv, skv)
    check(rc == 2 and cal_id in err and "--kvtc-cal" in err, "restore without the calibration: %d %r" % (rc, err))
    rc, out, err = run("restore", "-m", kjv, skv, "--kvtc-cal", other)
    check(rc == 1 and cal_id in err and os.path.basename(other) in err, "another calibration: %d %r" % (rc, err))
    rc, out, err = run("restore", "-m", kjv, skv, "--kvtc-cal", odir)
    check(rc == 1 and cal_id in err, "a directory without it: %d %r" % (rc, err))
    data = bytearray(open(cal, "rb").read())
    data[len(data) // 2] ^= 1
    bad_cal = os.path.join(tmp, "bad.cal")
    open(bad_cal, "wb").write(bytes(data))
    rc, out, err = run("restore", "-m", kjv, skv, "--kvtc-cal", bad_cal)
    check(rc == 1 and "checksum" in err, "a damaged calibration: %d %r" % (rc, err))
    data = bytearray(open(skv, "rb").read())
    data[len(data) - 100] ^= 4
    bad = os.path.join(tmp, "bad.skv")
    open(bad, "wb").write(bytes(data))
    rc, out, err = run("restore", "-m", kjv, bad, "--kvtc-cal", cal)
    check(rc == 1 and "checksum mismatch" in err, "a damaged stream: %d %r" % (rc, err))
    for args in (("--codec", "kvtc"), ("--codec", "pred", "--kvtc-cal", cal),
                 ("--codec", "kvtc", "--kvtc-cal", cal, "--kv-quant", "lpc2")):
        rc, out, err = run("compress", "-m", kjv, "-f", src, "-o", skv, *args)
        check(rc != 0 and err.strip(), "compress %s: exit %d" % (" ".join(args), rc))


CASES = [help_and_usage_errors, roundtrip_text_and_kv, other_inputs, segments, corrupt_files, wrong_model,
         quantized_kv_codec, pred_layer0_restore, batch_restore_of_segments, generation_stored_as_it_runs,
         f16_kv_cache_sessions, kvtc_codec]


if __name__ == "__main__":
    sys.exit(run_cases(REPORTER, CASES, "seqkv_cli_"))
