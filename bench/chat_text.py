#!/usr/bin/python3
"""Writes a chat-like English text assembled from Debian documentation (issue 16's third
test text): for each README.Debian / README under /usr/share/doc (sorted, plain text
only), a user turn asking about the package and an assistant turn holding the first
paragraphs of that file. Deterministic for a given /usr/share/doc.
Usage: bench/chat_text.py [MAX_BYTES] > chat.txt"""
import os
import sys


def paragraphs(path, limit):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(20000)
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for p in text.split("\n\n"):
        p = " ".join(p.split())
        if len(p) > 40 and not p.startswith("--") and "@" not in p:
            out.append(p)
        if len(out) >= limit:
            break
    return out


def main():
    cap = int(sys.argv[1]) if len(sys.argv) > 1 else 60000
    root = "/usr/share/doc"
    total = 0
    for pkg in sorted(os.listdir(root)):
        for name in ("README.Debian", "README", "README.md"):
            path = os.path.join(root, pkg, name)
            if not os.path.isfile(path):
                continue
            paras = paragraphs(path, 8)
            if not paras:
                continue
            turn = "User: What should I know about %s on Debian?\nAssistant: %s\n\n" % (pkg, "\n".join(paras))
            sys.stdout.write(turn)
            total += len(turn)
            break
        if total >= cap:
            break


main()
