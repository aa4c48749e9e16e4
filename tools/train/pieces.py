#!/usr/bin/python3
"""Split a file into pieces of at most N bytes, or join them back, checked.

  pieces.py split FILE DIR [--max-bytes N]   writes DIR/NAME.partNN (NN = 00, 01, ...)
                                             and DIR/NAME.sha256 ("HASH  NAME")
  pieces.py join DIR/NAME.sha256 OUT         concatenates DIR/NAME.part* in order
                                             into OUT; fails unless its sha256 matches

The device machine returns at most 16 MiB per file (64 MiB in all), so the
trained GGUF comes back in pieces (scripts/train_gpu.sh).  The same join is
`cat NAME.part* > NAME && sha256sum -c NAME.sha256`.
"""
import argparse
import glob
import hashlib
import os
import sys

MIB16 = 16 * 2 ** 20


def split(path, out_dir, max_bytes=MIB16):
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    name = os.path.basename(path)
    os.makedirs(out_dir, exist_ok=True)
    h = hashlib.sha256()
    parts = []
    with open(path, "rb") as f:
        while True:
            b = f.read(max_bytes)
            if not b and parts:
                break
            h.update(b)
            part = os.path.join(out_dir, "%s.part%02d" % (name, len(parts)))
            with open(part, "wb") as g:
                g.write(b)
            parts.append(part)
            if len(b) < max_bytes:
                break
    with open(os.path.join(out_dir, name + ".sha256"), "w", encoding="ascii") as f:
        f.write("%s  %s\n" % (h.hexdigest(), name))
    return parts


def join(sha_file, out):
    with open(sha_file, encoding="ascii") as f:
        want, name = f.read().split()
    d = os.path.dirname(os.path.abspath(sha_file))
    parts = sorted(glob.glob(os.path.join(d, glob.escape(name) + ".part[0-9][0-9]")))
    if not parts:
        raise ValueError("no pieces %s.partNN beside %s" % (name, sha_file))
    for i, p in enumerate(parts):
        if not p.endswith(".part%02d" % i):
            raise ValueError("piece %02d of %s is missing" % (i, name))
    h = hashlib.sha256()
    with open(out, "wb") as g:
        for p in parts:
            with open(p, "rb") as f:
                b = f.read()
            h.update(b)
            g.write(b)
    if h.hexdigest() != want:
        os.remove(out)
        raise ValueError("%s: sha256 %s, expected %s" % (out, h.hexdigest(), want))
    return parts


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split")
    s.add_argument("file")
    s.add_argument("dir")
    s.add_argument("--max-bytes", type=int, default=MIB16)
    j = sub.add_parser("join")
    j.add_argument("sha_file")
    j.add_argument("out")
    args = ap.parse_args()
    try:
        if args.cmd == "split":
            parts = split(args.file, args.dir, args.max_bytes)
            print("pieces: %s -> %d pieces of at most %d bytes" % (args.file, len(parts), args.max_bytes))
        else:
            parts = join(args.sha_file, args.out)
            print("pieces: %s <- %d pieces, sha256 ok" % (args.out, len(parts)))
    except (OSError, ValueError) as e:
        sys.exit("pieces: %s" % e)


if __name__ == "__main__":
    main()
