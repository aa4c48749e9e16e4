#!/usr/bin/python3
"""Prepare the training and held-out text for seqkv's default model.

Source: the King James Bible as shipped by Debian's bible-kjv package (public
domain), printed with `bible -f 'Gen1:1-Rev22:21'`.  That command prints one
verse per line in the form

    <BookAbbrev><chapter>:<verse> <text>

e.g. "Ge1:1 In the beginning God created the heaven and the earth.".

Exact transformation (the engine's perplexity test depends on it, so it is
pinned here and in models/README.md):
  1. Every line must match  ^([1-3]?[A-Za-z]+)([0-9]+):([0-9]+) (.*)$ ; the
     verse reference is dropped (the text of this edition contains no digits,
     so references would be the only digits the model ever saw).
  2. The verse text has runs of whitespace collapsed to one space and is
     stripped (the package has a few double and trailing spaces).
  3. The verses of one chapter are joined by single spaces into one line: one
     chapter per line, lines separated by "\\n", the file ends with "\\n".
     (One chapter per line rather than one verse per line: SentencePiece
     gives the first word of a line no leading-space piece, so verse-per-line
     would spend extra tokens on 31k line starts; chapters give 1.2k.)
  4. The books listed in tools/train/heldout_books.txt go, in canonical order,
     to work/heldout.txt; all other books, in canonical order, to
     work/train.txt.  work/spm_train.txt holds the training verses one per line
     (SentencePiece's trainer reads one sentence per line; its pieces never
     cross a space, so verse lines and chapter lines give the same pieces).

Usage: prepare_data.py [--out DIR]   (default tools/train/work)
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VERSE_RE = re.compile(r"^([1-3]?[A-Za-z]+)([0-9]+):([0-9]+) (.*)$")
# Canonical order of the 66 book abbreviations used by bible-kjv.
BOOKS = ("Ge Exo Lev Num Deu Josh Jdgs Ruth 1Sm 2Sm 1Ki 2Ki 1Chr 2Chr Ezra Neh "
         "Est Job Psa Prv Eccl SSol Isa Jer Lam Eze Dan Hos Joel Amos Obad "
         "Jonah Mic Nahum Hab Zep Hag Zec Mal Mat Mark Luke John Acts Rom 1Cor "
         "2Cor Gal Eph Phi Col 1Th 2Th 1Tim 2Tim Titus Phmn Heb Jas 1Pet 2Pet "
         "1Jn 2Jn 3Jn Jude Rev").split()


def read_heldout_list(path):
    books = []
    with open(path, encoding="ascii") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                books.append(line)
    for b in books:
        if b not in BOOKS:
            sys.exit("prepare_data: unknown held-out book %r" % b)
    return books


def read_bible():
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         stdout=subprocess.PIPE).stdout
    text = out.decode("ascii")  # the edition is pure ASCII; fail loudly if not
    chapters = {}   # (book, chapter) -> [verse text]
    order = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        m = VERSE_RE.match(line)
        if not m:
            sys.exit("prepare_data: line %d has an unexpected form: %r" % (n, line))
        book, chap = m.group(1), int(m.group(2))
        verse = " ".join(m.group(4).split())
        if not verse:
            sys.exit("prepare_data: empty verse at line %d" % n)
        key = (book, chap)
        if key not in chapters:
            chapters[key] = []
            order.append(key)
        chapters[key].append(verse)
    books_seen = []
    for b, _ in order:
        if not books_seen or books_seen[-1] != b:
            books_seen.append(b)
    if books_seen != BOOKS:
        sys.exit("prepare_data: unexpected book list %r" % books_seen)
    return order, chapters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "work"))
    ap.add_argument("--heldout-list", default=os.path.join(HERE, "heldout_books.txt"))
    args = ap.parse_args()
    heldout = set(read_heldout_list(args.heldout_list))
    order, chapters = read_bible()
    os.makedirs(args.out, exist_ok=True)
    tr_lines, ho_lines, spm_lines = [], [], []
    for key in order:
        line = " ".join(chapters[key])
        if key[0] in heldout:
            ho_lines.append(line)
        else:
            tr_lines.append(line)
            spm_lines.extend(chapters[key])
    for name, lines in (("train.txt", tr_lines), ("heldout.txt", ho_lines),
                        ("spm_train.txt", spm_lines)):
        with open(os.path.join(args.out, name), "w", encoding="ascii", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
    ntr = sum(len(s) + 1 for s in tr_lines)
    nho = sum(len(s) + 1 for s in ho_lines)
    print("prepare_data: train %d chapters %d bytes; heldout %d chapters %d bytes (%s)"
          % (len(tr_lines), ntr, len(ho_lines), nho, " ".join(b for b in BOOKS if b in heldout)))


if __name__ == "__main__":
    main()
