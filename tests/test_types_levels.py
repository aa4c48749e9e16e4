#!/usr/bin/python3
"""Every weight type the engine loads, through the whole forward pass, at every kernel level
and thread count: the same bits (issue 42, docs/determinism.md).

For each type a small Llama (tests/ref/make_gguf.py: 2 layers, n_embd 256, n_ff 768, GQA;
the quantized types as random blocks with small scales, f16/bf16/q8_0/q4_0 from random
floats) is run through `seqkv kv-dump --logits` on a 252-token text four ways:

  scalar   SEQKV_CPU=scalar, 1 thread (the reference kernels)
  avx2     SEQKV_CPU=avx2, 2 threads (the AVX2 kernels; packed rows where the type has them)
  native   the CPU's best level, 1 thread (AVX-512 where present)
  file     the CPU's best level, 2 threads, SEQKV_REPACK=0 (the file-layout kernels)

and the KV dump and every position's logits must be byte-identical to the scalar run's.
The prefill reaches every kernel shape: the batch tiles (252 tokens: whole tiles and a
remainder) and, through the last layer's single kept row, the decode kernels. Levels the
CPU lacks are skipped (reported), never faked: on an AVX2-only CPU "native" is "avx2".
Needs numpy (Debian python3-numpy); SKIP without it, FAIL in CI."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "ref"))
from clitest import Reporter  # noqa: E402
from testenv import missing  # noqa: E402

NAME = "test_types_levels"
R = Reporter(NAME)
TEXT = ("Once upon a time there was a little girl who lived by the sea. Every day she walked to the "
        "shore with her dog, and they looked for shells in the sand until the sun went down. ") * 2

def report(case, ok, why=""):
    """ok: True (PASS), False (FAIL) or None (SKIP)."""
    R.report(case, "SKIP" if ok is None else "PASS" if ok else "FAIL", why)


def seqkv_path():
    build = os.environ.get("SEQKV_BUILD", "build")
    return os.path.join(build if os.path.isabs(build) else os.path.join(ROOT, build), "seqkv")


def dump(model, text, out, env, threads):
    """kv-dump of text -> (dump bytes, logits bytes); raises on a non-zero exit."""
    kv, lg = out + ".kv", out + ".f32"
    e = dict(os.environ)
    e.pop("SEQKV_CPU", None)
    e.pop("SEQKV_REPACK", None)
    e.update(env)
    p = subprocess.run([seqkv_path(), "kv-dump", "-q", "-m", model, "-f", text, "-o", kv, "--logits", lg,
                        "-t", str(threads)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("kv-dump exited %d: %s" % (p.returncode, p.stderr.decode("utf-8", "replace").strip()))
    with open(kv, "rb") as f:
        k = f.read()
    with open(lg, "rb") as f:
        return k, f.read()


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main():
    try:
        import numpy as np
        import make_gguf as mg
    except ImportError as ex:
        report("every_type", missing(None, False), "needs numpy (Debian python3-numpy): %s" % ex)
        return
    flags = cpu_flags()
    has_avx2 = {"avx2", "fma", "f16c"} <= flags
    has_avx512 = {"avx512f", "avx512bw", "avx512vl"} <= flags
    types = [("f16", mg.GGML_F16), ("bf16", mg.GGML_BF16), ("q8_0", mg.GGML_Q8_0), ("q4_0", mg.GGML_Q4_0),
             ("q4_1", mg.GGML_Q4_1), ("q5_0", mg.GGML_Q5_0), ("q5_1", mg.GGML_Q5_1), ("q2_k", mg.GGML_Q2_K),
             ("q3_k", mg.GGML_Q3_K), ("q4_k", mg.GGML_Q4_K), ("q5_k", mg.GGML_Q5_K), ("q6_k", mg.GGML_Q6_K),
             ("iq4_nl", mg.GGML_IQ4_NL), ("iq4_xs", mg.GGML_IQ4_XS)]
    runs = [("avx2", {"SEQKV_CPU": "avx2"}, 2, has_avx2),
            ("native", {}, 1, has_avx512),
            ("file", {"SEQKV_REPACK": "0"}, 2, has_avx2)]
    skipped = [name for name, _, _, ok in runs if not ok]
    with tempfile.TemporaryDirectory(prefix="skv-types-") as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        for name, t in types:
            case = "levels_agree_" + name
            try:
                model = os.path.join(tmp, name + ".gguf")
                # the norms stay f32; the embeddings and every matrix in the type
                mg.llama_gguf(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, n_ff=768, n_vocab=300,
                              n_ctx=256, wtype=t, seed=40 + t).write(model)
                ref = dump(model, text, os.path.join(tmp, name + "-scalar"), {"SEQKV_CPU": "scalar"}, 1)
                logits = np.frombuffer(ref[1], dtype="<f4")
                if not np.all(np.isfinite(logits)) or float(np.abs(logits).max()) == 0.0:
                    report(case, False, "the scalar run's logits are not finite and non-zero: the fixture is broken")
                    continue
                bad = []
                for run, env, threads, ok in runs:
                    if ok and dump(model, text, os.path.join(tmp, name + "-" + run), env, threads) != ref:
                        bad.append(run)
                n_pos = len(logits) // 300
                report(case, not bad, ("%s differ from the scalar run" % ", ".join(bad)) if bad else
                       "%d positions, KV and logits identical at %s" %
                       (n_pos, ", ".join(["scalar"] + [r for r, _, _, ok in runs if ok])))
            except Exception as ex:  # one type's failure must not hide the others
                report(case, False, repr(ex))
        if skipped:
            print("# %s: this CPU lacks the level(s) of run(s) %s" % (NAME, ", ".join(skipped)))


main()
sys.exit(1 if R.failed else 0)
