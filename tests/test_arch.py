#!/usr/bin/python3
"""Refusals of the architecture table's loader (src/engine/model.c) on broken variants of
the tests/data/arch fixtures (rebuilt by scripts/gguf_write.py): each must make
`seqkv info` exit non-zero with a message that names the problem, never crash.

Cases:
  refuses_arch_<name>       an architecture outside the table: the message names it and
                            lists the rows
  refuses_missing_<tensor>  a required tensor of a row removed (qwen2's K bias, qwen3's
                            Q norm, phi3's fused QKV, gemma2's post-FFN norm)
  refuses_bad_<what>        phi3 short factors of the wrong length, a gemma sliding-window
                            pattern past the limit, a negative soft-cap
  rope_scaling_keys         llama.cpp's reading of the scaling keys: no rope.scaling.type
                            means linear, rope.scale_linear stands in for
                            rope.scaling.factor, factor 0 means none (the model
                            fingerprint, which hashes the position scale, tells)
  fixtures_reproducible     gguf_write.py rewrites the committed fixtures byte for byte
"""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
failed = 0


def report(case, ok, why=""):
    global failed
    print("%s test_arch.py:%s%s" % ("PASS" if ok else "FAIL", case, "" if ok else ": " + why))
    failed += not ok


def seqkv():
    return os.path.join(ROOT, os.environ.get("SEQKV_BUILD", "build"), "seqkv")


def expect_refusal(case, model, path, words):
    model.w.write(path)
    r = subprocess.run([seqkv(), "info", "-m", path], capture_output=True, text=True, timeout=60)
    err = r.stderr.lower()
    missing = [w for w in words if w.lower() not in err]
    ok = r.returncode > 0 and not missing  # < 0: killed by a signal
    report(case, ok, "exit %d, stderr %r lacks %s" % (r.returncode, r.stderr.strip()[:200], missing))


def drop(model, name):
    model.w.tensors = [t for t in model.w.tensors if t[0] != name]
    return model


def set_kv(model, key, vtype, value):
    model.w.kv = [kv for kv in model.w.kv if kv[0] != key] + [(key, vtype, value, None)]
    return model


def fingerprint(model, path):
    model.w.write(path)
    r = subprocess.run([seqkv(), "info", "-m", path], capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        if line.startswith("fingerprint:"):
            return line.split()[1]
    return "error: " + r.stderr.strip()[:120]


def case_rope_scaling(gw, mg, p):
    def variant(keys):
        m = gw.llama()
        m.w.kv = [kv for kv in m.w.kv if kv[0] != "llama.rope.scaling.type"]
        for k, t, v in keys:
            set_kv(m, "llama." + k, t, v)
        return m
    fp = {name: fingerprint(variant(keys), p(name)) for name, keys in [
        ("none", []), ("typed", [("rope.scaling.type", mg.STRING, "linear"), ("rope.scaling.factor", mg.F32, 4.0)]),
        ("untyped", [("rope.scaling.factor", mg.F32, 4.0)]), ("old_key", [("rope.scale_linear", mg.F32, 4.0)]),
        ("zero", [("rope.scaling.type", mg.STRING, "linear"), ("rope.scaling.factor", mg.F32, 0.0)])]}
    ok = (fp["typed"] == fp["untyped"] == fp["old_key"] and fp["zero"] == fp["none"] and fp["typed"] != fp["none"]
          and not fp["none"].startswith("error"))
    report("rope_scaling_keys", ok, repr(fp))


def main():
    import gguf_write as gw
    import make_gguf as mg
    with tempfile.TemporaryDirectory(prefix="seqkv_arch_") as tmp:
        def p(n):
            return os.path.join(tmp, n + ".gguf")
        m = gw.qwen2()
        m.w.kv = [(k, t, "mamba" if k == "general.architecture" else v, e) for k, t, v, e in m.w.kv]
        expect_refusal("refuses_arch_mamba", m, p("mamba"), ["'mamba'", "qwen2", "gemma3"])
        expect_refusal("refuses_missing_k_bias", drop(gw.qwen2(), "blk.1.attn_k.bias"), p("a"),
                       ["blk.1.attn_k.bias"])
        expect_refusal("refuses_missing_q_norm", drop(gw.qwen3(), "blk.0.attn_q_norm.weight"), p("b"),
                       ["blk.0.attn_q_norm.weight"])
        expect_refusal("refuses_missing_qkv", drop(gw.phi3(), "blk.2.attn_qkv.weight"), p("c"),
                       ["blk.2.attn_qkv.weight"])
        expect_refusal("refuses_missing_post_ffw_norm", drop(gw.gemma2(), "blk.3.post_ffw_norm.weight"), p("d"),
                       ["blk.3.post_ffw_norm.weight"])
        m = drop(gw.phi3(), "rope_factors_short.weight")
        m.w.add_tensor("rope_factors_short.weight", [1.0] * 5, mg.GGML_F32)
        expect_refusal("refuses_bad_short_factors", m, p("e"), ["rope_factors_short.weight", "8"])
        m = set_kv(gw.gemma3(), "gemma3.attention.sliding_window_pattern", mg.U32, 5000)
        expect_refusal("refuses_bad_window_pattern", m, p("f"), ["pattern", "5000"])
        m = set_kv(gw.gemma2(), "gemma2.attn_logit_softcapping", mg.F32, -1.0)
        expect_refusal("refuses_bad_softcap", m, p("g"), ["soft-capping"])
        case_rope_scaling(gw, mg, p)
        same = []
        for name, build in gw.BUILDERS.items():
            with open(os.path.join(ROOT, "tests", "data", "arch", name + ".gguf"), "rb") as f:
                same.append(f.read() == build().w.tobytes() or name)
        report("fixtures_reproducible", all(s is True for s in same),
               "differ: %s" % [s for s in same if s is not True])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
