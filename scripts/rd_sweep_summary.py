#!/usr/bin/env python3
"""Summarize a kv-rd sweep (scripts/kvtc_sweep.sh): per setup (model:P:text label), the bits
per position each codec family needs at TQ-3.5's KL in that setup (log-linear interpolation
in KL between the two points of the family around it; none when its points do not bracket
it), as a ratio to TQ-3.5's bits; then per model the median, min and max over setups.
    usage: rd_sweep_summary.py sweep.csv [--setups]"""
import csv, math, statistics, sys
from collections import defaultdict

FAMILIES = ["none", "tok", "tok+ramp", "kvtc", "kvtc+ramp", "kvtc+tok+ramp"]


def at_kl(points, kl):
    """Bits at KL kl from (kl, bits) points (finer steps: lower KL), or None."""
    pts = sorted(points)
    for (k1, b1), (k2, b2) in zip(pts, pts[1:]):
        if k1 <= kl <= k2 and k1 > 0 and k2 > k1:
            f = (math.log(kl) - math.log(k1)) / (math.log(k2) - math.log(k1))
            return b1 + f * (b2 - b1)
    return None


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    setups = defaultdict(lambda: defaultdict(list))
    ref, top1 = {}, defaultdict(dict)
    for r in rows:
        name, kl, bits = r["codec"], float(r["kl"]), float(r["bits_pos"])
        if name.startswith("TQ-3.5"):
            ref[r["model"]] = (kl, bits, float(r["top1"]))
        fam = name.split("@")[0]
        setups[r["model"]][fam].append((kl, bits))
        top1[r["model"]][name] = float(r["top1"])
    ratios = defaultdict(lambda: defaultdict(list))
    show = "--setups" in sys.argv
    if show:
        print("| setup (model:P:text) | TQ-3.5 KL | TQ-3.5 top-1 | " + " | ".join(FAMILIES) + " |")
        print("|---|---:|---:|" + "---:|" * len(FAMILIES))
    for s in sorted(setups, key=lambda x: (x.split(":")[0], int(x.split(":")[1]), x.split(":")[2])):
        kl, bits, t1 = ref[s]
        cells = []
        for f in FAMILIES:
            b = at_kl(setups[s][f], kl)
            if b is not None:
                ratios[s.split(":")[0]][f].append(b / bits)
            cells.append("%.3fx" % (b / bits) if b is not None else "n/b")
        if show:
            print("| %s | %.5f | %.1f%% | %s |" % (s, kl, 100 * t1, " | ".join(cells)))
    print()
    print("| model | codec | setups bracketed | median vs TQ-3.5 bits | min | max |")
    print("|---|---|---:|---:|---:|---:|")
    for m in sorted(ratios):
        n_setups = len([s for s in setups if s.startswith(m + ":")])
        for f in FAMILIES:
            v = ratios[m][f]
            if v:
                print("| %s | %s | %d of %d | %.3fx | %.3fx | %.3fx |" % (m, f, len(v), n_setups, statistics.median(v), min(v), max(v)))


if __name__ == "__main__":
    main()
