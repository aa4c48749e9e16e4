#!/usr/bin/env python3
"""funclen.py [--list N] [DIR...] - function lengths of the C sources (default: src tools).

A function is a top-level brace block whose opening line looks like a definition
(an identifier followed by a parameter list, not a struct/enum/union/initializer).
Its length counts lines from the signature's first line to the closing brace.
Prints the count, median, 90th percentile and maximum, the files over 1,000 lines,
and with --list N the N longest functions. Generated headers (a first comment that
says "Generated") are skipped. Recorded in docs/metrics.md.
"""
import os, re, sys

def strip(src):
    """Blank out comments, strings and character literals, keeping newlines."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('/*', i):
            j = src.find('*/', i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif c in '"\'':
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append(c + re.sub(r'[^\n]', ' ', src[i + 1:j]) + c); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)

SIG = re.compile(r'([A-Za-z_]\w*)\s*\([^;{}]*\)\s*$', re.S)

def functions(path):
    src = open(path, encoding='utf-8', errors='replace').read()
    if 'Generated' in src[:300]:
        return [], src.count('\n')
    s = strip(src)
    res, depth, i, start = [], 0, 0, 0
    lines = s.count('\n')
    # Top-level scan: at depth 0, the text since the last ';' or '}' is a declarator.
    for m in re.finditer(r'[{};]', s):
        ch = m.group()
        if ch == '{':
            if depth == 0:
                head = s[start:m.start()]
                # drop preprocessor lines from the head
                head_clean = '\n'.join(l for l in head.split('\n') if not l.lstrip().startswith('#'))
                sm = SIG.search(head_clean.rstrip())
                is_fn = sm and not re.search(r'\b(struct|union|enum)\b[^()]*$', head_clean.split('(')[0]) \
                    and '=' not in head_clean.split('(')[0] and sm.group(1) not in ('if', 'for', 'while', 'switch')
                if is_fn:
                    # first non-blank line of the head
                    off = start + len(head) - len(head.lstrip())
                    fstart = s.count('\n', 0, off) + 1
                    fname = sm.group(1)
                else:
                    fname = None
            depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0:
                if fname:
                    fend = s.count('\n', 0, m.start()) + 1
                    res.append((fend - fstart + 1, path, fstart, fname))
                fname = None
                start = m.end()
        elif depth == 0:
            start = m.end()
    return res, lines

def main(argv):
    top = 0
    if len(argv) >= 2 and argv[0] == '--list':
        top = int(argv[1]); argv = argv[2:]
    dirs = argv or ['src', 'tools']
    fns, big = [], []
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith(('.c', '.h')):
                    p = os.path.join(root, f)
                    r, n = functions(p)
                    fns += r
                    if n > 1000 and r is not None and 'Generated' not in open(p, errors='replace').read()[:300]:
                        big.append((n, p))
    lens = sorted(l for l, *_ in fns)
    if not lens:
        print('no functions'); return 1
    pct = lambda q: lens[min(len(lens) - 1, int(q * len(lens)))]
    print('functions: %d  median: %d  p90: %d  max: %d  (lines, %s)'
          % (len(lens), pct(0.5), pct(0.9), lens[-1], ' '.join(dirs)))
    print('files over 1,000 lines: %s' % (', '.join('%s (%d)' % (p, n) for n, p in sorted(big, reverse=True)) or 'none'))
    for l, p, ln, name in sorted(fns, reverse=True)[:top]:
        print('%5d  %s:%d  %s' % (l, p, ln, name))
    return 0

if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
