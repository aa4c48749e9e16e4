#!/usr/bin/python3
"""Cross-checks src/quant/tq_codebooks.h against tools/gen_codebooks.py (numpy),
and runs the same work under every SEQKV_CPU cap (core/cpu.h): the scalar
references and the SIMD twins must write the same bytes.

Prints `PASS test_quant_py:<case>` / `FAIL test_quant_py:<case>: <why>` lines
(counted by tests/run.sh).  The C library is not loaded: its quantizer symbols
are internal (hidden); tests/test_quant.c covers the runtime.
"""
import filecmp
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

failed = 0


def report(case, ok, why=""):
    global failed
    if ok:
        print("PASS test_quant_py:%s" % case)
    else:
        failed += 1
        print("FAIL test_quant_py:%s: %s" % (case, why))
    sys.stdout.flush()


def parse_header(path):
    """-> {d: [30 floats]}, {d: [4 mse]} (d = 0 for the Gaussian row)."""
    text = open(path).read()
    dims = [int(v) for v in re.search(r"skv_tq_cb_dims\[SKV_TQ_CB_ROWS\] = \{([^}]*)\}", text).group(1).split(",")]
    body = text[text.index("skv_tq_cb[SKV_TQ_CB_ROWS]"):text.index("static const double skv_tq_cb_mse")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    vals = [float.fromhex(v.rstrip("f")) for v in re.findall(r"-?0x[0-9a-f.]+p[-+]\d+f", body)]
    mse_body = text[text.index("static const double skv_tq_cb_mse"):]
    mse_rows = re.findall(r"\{([0-9., ]+)\}, /\*", mse_body)
    cb = {d: vals[30 * i:30 * i + 30] for i, d in enumerate(dims)}
    mse = {d: [float(v) for v in mse_rows[i].split(",")] for i, d in enumerate(dims)}
    return cb, mse


CAPS = ("native", "avx2", "scalar")


def run_capped(cap, argv):
    env = dict(os.environ, SEQKV_CPU=cap)
    return subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)


def cpu_paths():
    """The kernel twins' tests pass under each cap, and a session compressed
    with each cap (f16 weights, q8_0/f16 KV rows) is the same file."""
    build = os.environ.get("SEQKV_BUILD", "build")
    for name in ("test_quant", "test_ops"):
        bad = []
        for cap in CAPS[1:]:  # native: the suite runs them already
            p = run_capped(cap, [os.path.join(build, "tests", name)])
            if p.returncode != 0 or "FAIL" in p.stdout:
                bad.append("%s: %s" % (cap, [l for l in p.stdout.splitlines() if l.startswith("FAIL")][:2]))
        report("%s_under_capped_cpu" % name, not bad, "; ".join(bad))
    seqkv = os.path.join(build, "seqkv")
    with tempfile.TemporaryDirectory() as work:
        text = os.path.join(work, "s.txt")
        with open(os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"), "rb") as f:
            open(text, "wb").write(f.read(120))
        for codec, extra in (("model", []), ("kvq", ["--kv-quant", "k=q8_0,v=f16"])):
            outs, why = [], ""
            for cap in CAPS:
                out = os.path.join(work, "%s-%s.skv" % (codec, cap))
                p = run_capped(cap, [seqkv, "compress", "-f", text, "-o", out, "--codec", codec] + extra)
                if p.returncode != 0:
                    why = "%s: exit %d: %s" % (cap, p.returncode, p.stderr.strip()[-200:])
                outs.append(out)
            same = not why and all(filecmp.cmp(outs[0], o, shallow=False) for o in outs[1:])
            report("compress_%s_same_bytes_every_cpu_cap" % codec, same, why or "files differ")


def main():
    cpu_paths()
    try:
        import numpy as np
        import gen_codebooks as gen
    except Exception as e:  # numpy missing: report instead of crashing
        report("import", False, repr(e))
        return 1
    trapz = getattr(np, "trapezoid", None) or np.trapz
    cb, mse = parse_header(os.path.join(ROOT, "src", "quant", "tq_codebooks.h"))
    report("header_shape", len(cb) == len(gen.DIMS) + 1 and all(len(v) == 30 for v in cb.values()),
           "rows %d" % len(cb))
    off = {1: 0, 2: 2, 3: 6, 4: 14}

    # 1. the committed header is what the generator computes (a subset of d
    #    to keep the suite fast; the rest are produced by the same code path)
    worst = 0.0
    for d in (8, 64, 128, 0):
        ref = gen.codebooks(d)
        for b in (1, 2, 3, 4):
            got = np.array(cb[d][off[b]:off[b] + (1 << b)])
            worst = max(worst, float(np.max(np.abs(got - ref[b][0]))), abs(mse[d][b - 1] - ref[b][1]))
    report("header_matches_generator", worst < 2e-6, "max deviation %g" % worst)

    # 2. Lloyd-Max optimality of the committed values: each centroid is the
    #    conditional mean of its cell (cells bounded by midpoints), checked by
    #    an independent trapezoid integration of the density
    bad = []
    for d in (16, 96, 256, 0):
        if d:
            r = np.sqrt(d)
            t = np.linspace(-r, r, 200001)
            f = np.clip(1 - t * t / d, 0, None) ** ((d - 3) / 2.0)
        else:
            t = np.linspace(-12, 12, 200001)
            f = np.exp(-t * t / 2)
        for b in (1, 2, 3, 4):
            c = np.array(cb[d][off[b]:off[b] + (1 << b)])
            edges = np.concatenate(([t[0]], (c[1:] + c[:-1]) / 2, [t[-1]]))
            for k in range(len(c)):
                m = (t >= edges[k]) & (t <= edges[k + 1])
                mean = trapz(t[m] * f[m], t[m]) / trapz(f[m], t[m])
                # the masks cut each cell at a grid point up to one step (~1.6e-4
                # in t) from the true edge, so this estimate agrees to ~1e-4;
                # 5e-4 still flags a codebook that is off its fixed point
                # (an unconverged or wrong codebook is off by 1e-2 or more)
                if abs(mean - c[k]) > 5e-4:
                    bad.append((d, b, k, float(mean), float(c[k])))
    report("centroids_are_conditional_means", not bad, str(bad[:3]))

    # 3. the known Gaussian values and symmetry
    g = cb[0]
    known = abs(g[1] - np.sqrt(2 / np.pi)) < 1e-6 and abs(g[4] - 0.4527800) < 1e-6 \
        and abs(g[5] - 1.5104176) < 1e-6
    report("gaussian_known_values", known, "b1 %r b2 %r" % (g[1], g[4:6]))
    sym = all(cb[d][i] == -cb[d][off_b + (1 << b) - 1 - (i - off_b)]
              for d in cb for b, off_b in off.items() for i in range(off_b, off_b + (1 << b)))
    report("codebooks_symmetric", sym)
    # distortion falls ~4x per bit and sits inside TurboQuant's bounds
    inside = all(4.0 ** -b <= mse[d][b - 1] <= np.sqrt(3) * np.pi / 2 * 4.0 ** -b
                 for d in mse if d >= 16 or d == 0 for b in (1, 2, 3, 4))
    report("mse_within_paper_bounds", inside)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
