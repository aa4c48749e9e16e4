#!/usr/bin/env python3
"""Summarize a kv-rd sweep (scripts/kvtc_sweep.sh): per setup (model:P:text label), the bits
per position each codec family needs at TQ-3.5's KL in that setup (log-linear interpolation
in KL between the two points of the family around it; none when its points do not bracket
it), as a ratio to TQ-3.5's bits; then per model the median, min and max over setups, and
the top-1 agreement and greedy match length (when the CSV has them) interpolated the same way.
    usage: rd_sweep_summary.py sweep.csv [--setups]"""
import csv, math, statistics, sys
from collections import defaultdict

FAMILIES = ["none", "tok", "tok+ramp", "kvtc", "kvtc+ramp", "kvtc+tok+ramp"]


def at_kl(points, kl, col=1):
    """Column col (1 bits, 2 top-1, 3 greedy) at KL kl from (kl, bits, top1, greedy) points
    (finer steps: lower KL), or None."""
    pts = sorted(points)
    for p1, p2 in zip(pts, pts[1:]):
        k1, k2 = p1[0], p2[0]
        if k1 <= kl <= k2 and k1 > 0 and k2 > k1:
            f = (math.log(kl) - math.log(k1)) / (math.log(k2) - math.log(k1))
            return p1[col] + f * (p2[col] - p1[col])
    return None


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    setups = defaultdict(lambda: defaultdict(list))
    ref = {}
    for r in rows:
        name, kl, bits = r["codec"], float(r["kl"]), float(r["bits_pos"])
        g = float(r.get("greedy_match") or "nan")
        if name.startswith("TQ-3.5"):
            ref[r["model"]] = (kl, bits, float(r["top1"]), g)
        fam = name.split("@")[0]
        setups[r["model"]][fam].append((kl, bits, float(r["top1"]), g))
    ratios = defaultdict(lambda: defaultdict(list))
    quality = defaultdict(lambda: defaultdict(list))
    show = "--setups" in sys.argv
    if show:
        print("| setup (model:P:text) | TQ-3.5 KL | TQ-3.5 top-1 | " + " | ".join(FAMILIES) + " |")
        print("|---|---:|---:|" + "---:|" * len(FAMILIES))
    for s in sorted(setups, key=lambda x: (x.split(":")[0], int(x.split(":")[1]), x.split(":")[2])):
        kl, bits, t1, g = ref[s]
        cells = []
        quality[s.split(":")[0]]["TQ-3.5"].append((t1, g))
        for f in FAMILIES:
            b = at_kl(setups[s][f], kl)
            if b is not None:
                ratios[s.split(":")[0]][f].append(b / bits)
                quality[s.split(":")[0]][f].append((at_kl(setups[s][f], kl, 2), at_kl(setups[s][f], kl, 3)))
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
    print()
    print("| model | codec | top-1 agreement at TQ-3.5's KL, median (min-max) | greedy match length, of 32 |")
    print("|---|---|---:|---:|")
    for m in sorted(quality):
        for f in ["TQ-3.5"] + FAMILIES:
            q = quality[m][f]
            if q:
                t = [x[0] for x in q]
                g = [x[1] for x in q]
                print("| %s | %s | %.1f%% (%.1f-%.1f) | %.1f (%.1f-%.1f) |" % (m, f, 100 * statistics.median(t), 100 * min(t), 100 * max(t),
                                                                         statistics.median(g), min(g), max(g)))


if __name__ == "__main__":
    main()
