#!/usr/bin/env python3
"""The bundled model (models/kjv-4m.gguf) against the PyTorch reference data that
tools/train/make_ref.py wrote into tests/data/model_ref/ (see its README.md):
logits, long-range log-probabilities, tokenizer ids vs SentencePiece, the model card's
held-out perplexity, and greedy generation. Drives build/seqkv; numpy only."""
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SEQKV_BUILD", "build")
SEQKV = os.path.join(ROOT, BUILD, "seqkv")
MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
REF = os.path.join(ROOT, "tests", "data", "model_ref")
SANITIZED = "san" in os.path.basename(BUILD.rstrip("/"))
failed = 0


def report(name, ok, why=""):
    global failed
    if ok is None:
        print(f"SKIP test_model_ref:{name}: {why}")
    elif ok:
        print(f"PASS test_model_ref:{name}")
    else:
        failed += 1
        print(f"FAIL test_model_ref:{name}: {why}")


def seqkv(*args, stdin=None):
    r = subprocess.run([SEQKV, *args, "-m", MODEL] if args[0] != "inspect" else [SEQKV, *args],
                       input=stdin, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"seqkv {' '.join(args)} failed: {r.stderr.decode(errors='replace')}")
    return r.stdout.decode()


def expected():
    out = {}
    with open(os.path.join(REF, "expected.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                k, v = line.split()
                out[k] = float(v)
    return out


def logits_match():
    with open(os.path.join(REF, "logits.bin"), "rb") as f:
        n, V = struct.unpack("<II", f.read(8))
        toks = np.frombuffer(f.read(4 * n), dtype="<i4")
        ref = np.frombuffer(f.read(4 * n * V), dtype="<f4").reshape(n, V).astype(np.float64)
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "t.txt")
        with open(os.path.join(REF, "heldout.txt"), "rb") as f:
            open(text, "wb").write(f.read(400))
        seqkv("kv-dump", "-f", text, "-o", os.path.join(d, "t.kv"), "--logits", os.path.join(d, "t.f32"))
        raw = open(os.path.join(d, "t.kv"), "rb").read()
        n_pos = struct.unpack_from("<I", raw, 32)[0]
        got_toks = np.frombuffer(raw, dtype="<i4", count=n_pos, offset=64)
        got = np.fromfile(os.path.join(d, "t.f32"), dtype="<f4").reshape(n_pos, V)[:n].astype(np.float64)
    if not np.array_equal(got_toks[:n], toks):
        return False, f"tokens differ: {got_toks[:n].tolist()} vs {toks.tolist()}"
    err = max(np.abs(got[i] - ref[i]).max() / np.abs(ref[i]).max() for i in range(n))
    print(f"# logits vs PyTorch float64: max relative error {err:.2e} over {n} positions")
    return err < 1e-4, f"max relative error {err:.2e}"


def tokenizer_matches_sentencepiece():
    bad = []
    n = 0
    with open(os.path.join(REF, "tokenizer_cases.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip("\n"):
                continue
            hexs, _, ids = line.rstrip("\n").partition("\t")
            text = bytes.fromhex(hexs)
            with tempfile.NamedTemporaryFile() as t:
                t.write(text)
                t.flush()
                got = seqkv("tokenize", "-f", t.name, "--no-bos").split()
            n += 1
            if got != ids.split():
                bad.append(text[:40])
    return not bad, f"{len(bad)} of {n} cases differ, e.g. {bad[:2]}"


def card_perplexity():
    exp = expected()
    if SANITIZED:
        return None, "19k-token evaluation skipped under sanitizers (run by make test)"
    out = seqkv("perplexity", "-f", os.path.join(REF, "heldout.txt"))
    ppl = float(re.search(r"perplexity ([0-9.]+) over", out).group(1))
    bits = float(re.search(r"cross-entropy: ([0-9.]+) bits/token", out).group(1))
    card = open(os.path.join(ROOT, "models", "README.md")).read()
    print(f"# held-out perplexity {ppl:.4f} (reference {exp['ppl']:.4f}), {bits:.4f} bits/token "
          f"(reference {exp['seq_bits_per_token']:.4f})")
    ok = abs(ppl / exp["ppl"] - 1) < 0.01 and abs(bits / exp["seq_bits_per_token"] - 1) < 0.01
    ok = ok and (f"{exp['ppl']:.2f}" in card)
    return ok, f"perplexity {ppl} vs {exp['ppl']}, bits {bits} vs {exp['seq_bits_per_token']} (card must state {exp['ppl']:.2f})"


def greedy_generation():
    lines = dict(l.rstrip("\n").split(" ", 1) for l in open(os.path.join(REF, "greedy.txt")) if " " in l)
    out = seqkv("generate", "-p", lines["prompt_text"], "-n", "64")
    # greedy.txt's "key value" lines lose the text's leading space: compare word sequences
    want = (lines["prompt_text"] + " " + lines["greedy_text"]).split()
    got = out.split()
    return got[:len(want)] == want, f"got {' '.join(got)[:120]!r}, want {' '.join(want)[:120]!r}"


def main():
    if not os.access(SEQKV, os.X_OK):
        report("all", None, f"{SEQKV} not built")
        return 0
    for name, fn in [("logits_match_pytorch", logits_match), ("tokenizer_matches_sentencepiece", tokenizer_matches_sentencepiece),
                     ("model_card_heldout_perplexity", card_perplexity), ("greedy_generation", greedy_generation)]:
        try:
            ok, why = fn()
        except Exception as e:  # a crash of the tool is a failure, not an error of the runner
            ok, why = False, str(e)
        report(name, ok, why)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
