#!/usr/bin/env python3
"""file_cycles.py DIR [--order] - fails when the objects in DIR (one folder's *.o) call
one another in a cycle: file A calls a function defined in file B while B, directly or
through others, calls one defined in A. With --order, prints the files lowest first (each
calls only files printed before it) and what each calls. `make check-layers` runs it on
the folders whose files must form a one-way chain (src/store/, docs/architecture.md)."""
import collections
import glob
import os
import subprocess
import sys


def graph(d):
    defs, uses = {}, collections.defaultdict(set)
    for o in sorted(glob.glob(os.path.join(d, '*.o'))):
        f = os.path.basename(o)[:-2]
        out = subprocess.run(['nm', o], capture_output=True, text=True, check=True).stdout
        uses[f]  # every object is a node, calls or not
        for line in out.splitlines():
            p = line.split()
            if len(p) == 2 and p[0] == 'U':
                uses[f].add(p[1])
            elif len(p) == 3 and p[1] in 'TDBR':
                defs[p[2]] = f
    g = {f: {defs[s] for s in us if s in defs and defs[s] != f} for f, us in uses.items()}
    return g


def sccs(g):
    idx, low, st, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        idx[v] = low[v] = n[0]
        n[0] += 1
        st.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in idx:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(g):
        if v not in idx:
            visit(v)
    return out  # reverse topological: callees first


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    g = graph(d)
    if not g:
        sys.exit('file_cycles: no objects in %s' % d)
    comps = sccs(g)
    bad = [c for c in comps if len(c) > 1]
    for c in bad:
        print('%s: files call one another in a cycle: %s' % (d, ' '.join(c)))
    if '--order' in sys.argv[2:]:
        for c in comps:
            for f in c:
                print('%-20s -> %s' % (f, ' '.join(sorted(g[f])) or '(none)'))
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
