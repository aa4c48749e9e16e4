#!/usr/bin/python3
"""Makes the oracle fixtures and records llama.cpp's numbers beside them (docs/oracle.md).

  scripts/oracle/setup.sh                 # once: npm packages + the two oracle programs
  scripts/oracle/record.py [NAME...]      # default: every fixture of fixtures.FIXTURES

For each fixture: writes the GGUF (tests/data/oracle/NAME.gguf if committed, else
$SEQKV_ORACLE_DIR/fixtures/NAME.gguf), then tests/data/oracle/NAME.json with its sha256,
its tensor types and skv-oracle-eval's output for tests/data/oracle/ppl.txt (perplexity,
llama-perplexity protocol, CTX 512) and tests/data/oracle/top1.txt (argmax per position).
The two texts are prefixes of tests/data/model_ref/heldout.txt, cut before a space, written
here if missing. Rerunning with the same npm packages reproduces the files byte for byte.
"""
import json
import os
import subprocess
import sys

import fixtures as F

BIN = os.path.join(F.CACHE, "bin")
HELDOUT = os.path.join(F.ROOT, "tests", "data", "model_ref", "heldout.txt")
TEXTS = {"ppl.txt": 9800, "top1.txt": 2000}  # name: at most this many bytes of heldout.txt
CTX = 512
ORACLE = "node-llama-cpp 3.21.1 prebuilt linux-x64 (llama.cpp release v0.4.0), CPU variant haswell"


def write_texts():
    with open(HELDOUT, "rb") as f:
        held = f.read()
    for name, limit in TEXTS.items():
        path = os.path.join(F.DATA, name)
        if not os.path.exists(path):
            cut = held.rindex(b" ", 0, limit)
            with open(path, "wb") as f:
                f.write(held[:cut])


def make(name):
    how, preset, pure, _ = F.FIXTURES[name]
    path = F.path_of(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if how == "retype":
        F.retype(F.BUNDLED, path, preset)
    elif how == "quantize":
        cmd = [os.path.join(BIN, "skv-oracle-quantize"), F.BUNDLED, path, preset, "2"]
        subprocess.run(cmd + (["pure"] if pure else []), check=True)
    return path


def oracle(mode, model, text):
    cmd = [os.path.join(BIN, "skv-oracle-eval"), mode, "-m", model, "-f", os.path.join(F.DATA, text),
           "-c", str(CTX), "-t", "2"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)


def to_json(obj):
    """One top-level key per line, each value compact: readable diffs, small files."""
    return "{\n" + ",\n".join(" %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in obj.items()) + "\n}\n"


def record(name):
    how, preset, pure, committed = F.FIXTURES[name]
    path = make(name)
    c = F.census(path)
    rec = {"name": name, "made": how, "preset": preset, "pure": pure, "committed": committed,
           "file_bytes": os.path.getsize(path), "sha256": F.sha256(path),
           "tensor_types": c["tensors"], "token_embd_type": c["by_tensor"]["token_embd.weight"],
           "oracle": ORACLE, "ppl": oracle("ppl", path, "ppl.txt"), "top1": oracle("top1", path, "top1.txt")}
    with open(os.path.join(F.DATA, name + ".json"), "w") as f:
        f.write(to_json(rec))
    print("%-10s %8d bytes  ppl %.4f  %s" % (name, rec["file_bytes"], rec["ppl"]["ppl"], c["tensors"]))


def main(names):
    os.makedirs(F.DATA, exist_ok=True)
    write_texts()
    for name in names or list(F.FIXTURES):
        record(name)


if __name__ == "__main__":
    main(sys.argv[1:])
