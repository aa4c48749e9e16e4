#!/usr/bin/python3
"""How far the cheap token codecs are from a strong general-purpose compressor on the same
segments: codec cmvd (bench_cm) against zpaq -method 5 (Debian's zpaq, a context-mixing
compressor of bytes) given the same dictionary, per vocabulary and text (issue 16).

Usage: bench/cm_reference.py [--bytes B] [--texts kjv,fortunes,chat] [--vocabs kjv,spm,bpe]
                             [--build DIR]

Texts and dictionaries are those of bench/restore_wall.py (the first B bytes, default 24,000,
of held-out KJV, Debian's fortunes and bench/chat_text.py; dictionaries disjoint from them).
For each (vocabulary, text), build/bench/bench_cm codes the text's ids in 800-id segments,
each alone from the dictionary-primed model (codec cmvd), and reports bits per id; codec
tokens is the baseline (ratio = codec bits / tokens bits). The zpaq reference cuts the same
text into as many equal byte ranges as there are segments and codes each range after the
dictionary: bytes(zpaq(dictionary + range)) - bytes(zpaq(dictionary)), summed over the
ranges, per id of the vocabulary (so the reference, like cmvd, learns nothing from one
segment for the next). A second column codes the whole text after the dictionary at once.
zpaq is a reference, not a bound: a better model can beat it; it runs at about 1 MB/s, far
too slow to restore at prefill speed through a 2 MB dictionary, and is not a token codec.
Vocabularies: kjv = the bundled model's (4,096 ids), spm = llama.cpp's ggml-vocab-llama-spm
(32K), bpe = ggml-vocab-llama-bpe (Llama 3, 128K), from $SEQKV_ORACLE_DIR/src/models
(default ~/.cache/seqkv-oracle; scripts/oracle/setup.sh).
Needs: make, zpaq (apt-get install zpaq), fortunes and bible-kjv (scripts/install-deps.sh --corpus).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import restore_wall  # noqa: E402  (the texts and dictionaries)

ROOT = restore_wall.ROOT
SEG = 800
DICT_MAX = 2000000  # bench_cm -d: bytes of the dictionary used


def fail(msg):
    sys.exit("cm_reference: " + msg)


def vocab_paths(wanted):
    odir = os.path.join(os.environ.get("SEQKV_ORACLE_DIR", os.path.expanduser("~/.cache/seqkv-oracle")),
                        "src", "models")
    known = {"kjv": os.path.join(ROOT, "models", "kjv-4m.gguf"),
             "spm": os.path.join(odir, "ggml-vocab-llama-spm.gguf"),
             "bpe": os.path.join(odir, "ggml-vocab-llama-bpe.gguf")}
    out = []
    for v in wanted:
        if v not in known:
            fail("unknown vocabulary %r (known: kjv, spm, bpe)" % v)
        if not os.path.exists(known[v]):
            fail("%s missing (run scripts/oracle/setup.sh for spm and bpe)" % known[v])
        out.append((v, known[v]))
    return out


def zpaq_bytes(work, data):
    """Size of a zpaq -method 5 archive of data (one file)."""
    src, arc = os.path.join(work, "z.in"), os.path.join(work, "z.zpaq")
    with open(src, "wb") as f:
        f.write(data)
    if os.path.exists(arc):
        os.remove(arc)
    subprocess.run(["zpaq", "a", arc, src, "-method", "5"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return os.path.getsize(arc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=24000)
    ap.add_argument("--texts", default="kjv,fortunes,chat")
    ap.add_argument("--vocabs", default="kjv,spm,bpe")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    bench = os.path.join(a.build, "bench", "bench_cm")
    if not os.access(bench, os.X_OK):
        fail("%s missing: run make" % bench)
    if not shutil.which("zpaq"):
        fail("zpaq missing: apt-get install zpaq")
    vocabs = vocab_paths(a.vocabs.split(","))
    cpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    with tempfile.TemporaryDirectory(prefix="cm_reference.") as work:
        texts = restore_wall.texts(work, a.bytes, a.texts.split(","))
        print("Measured %s UTC, %s; `bench/cm_reference.py --bytes %d`; 800-id segments."
              % (subprocess.run(["date", "-u", "+%Y-%m-%d %H:%M"], stdout=subprocess.PIPE,
                                text=True).stdout.strip(), cpu, a.bytes))
        print()
        print("| vocabulary | text | ids | segments | tokens bits/id | cmvd bits/id (ratio) "
              "| zpaq -m5 per segment (ratio) | zpaq -m5 whole text (ratio) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        zcache = {}
        for vname, vpath in vocabs:
            for tname, tp, dp in texts:
                r = subprocess.run([bench, "-s", str(SEG), "-m", str(a.bytes), "-d", str(DICT_MAX), vpath + "," + vname,
                                    "%s,%s,%s,0" % (tp, tname.replace(" ", "-"), dp)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ")]
                if r.returncode != 0 or not rows:
                    fail("bench_cm failed:\n%s" % r.stderr)
                col = [c.strip() for c in rows[-1].strip("|").split("|")]
                ids, tok_bits, cmvd = int(col[3]), float(col[4]), float(col[7].split()[0])
                nseg = math.ceil(ids / SEG)
                if (tp, nseg) not in zcache:
                    text = open(tp, "rb").read()[:a.bytes]
                    d = open(dp, "rb").read()[:DICT_MAX]
                    base = zpaq_bytes(work, d)
                    step = math.ceil(len(text) / nseg)
                    per = sum(zpaq_bytes(work, d + text[i:i + step]) - base for i in range(0, len(text), step))
                    whole = zpaq_bytes(work, d + text) - base
                    zcache[(tp, nseg)] = (per, whole)
                per, whole = zcache[(tp, nseg)]
                zs, zw = 8.0 * per / ids, 8.0 * whole / ids
                print("| %s | %s | %d | %d | %.2f | %.2f (%.3f) | %.2f (%.3f) | %.2f (%.3f) |" % (
                    vname, tname, ids, nseg, tok_bits, cmvd, cmvd / tok_bits, zs, zs / tok_bits, zw, zw / tok_bits))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
