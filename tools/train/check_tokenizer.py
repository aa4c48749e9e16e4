#!/usr/bin/python3
"""Check that llama.cpp's SPM tokenization algorithm, driven only by the
vocabulary stored in the GGUF file (tokens, scores, token types), reproduces
SentencePiece's ids exactly on the reference cases and on the whole corpus.

The algorithm (an independent re-statement of what llama.cpp's SPM tokenizer
and seqkv's tokenizer do):
  1. Prefix one space (add_space_prefix), then replace every ' ' by U+2581.
  2. Split into UTF-8 characters: one symbol each, in a doubly linked list.
  3. For every adjacent pair whose concatenation is a token, queue a
     candidate keyed by (score of that token desc, left position asc).
  4. Pop the best candidate; skip it if either side changed since it was
     queued; otherwise merge the right symbol into the left one and queue the
     new pairs with the left and right neighbours.  Repeat until empty.
  5. Emit each remaining symbol's token id; a symbol that is not a token (a
     single character outside the vocabulary) is emitted as one <0xXX> byte
     token per UTF-8 byte.
Normal tokens are the only merge targets (byte/control/unknown pieces never
match text because their strings are "<0x41>", "<s>", ...).

Usage: check_tokenizer.py [--model models/kjv-4m.gguf] [--tokenizer ...spm.model]
"""
import argparse
import heapq
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gguf_io as G  # noqa: E402
from make_ref import TOKENIZER_CASES  # noqa: E402

SPACE = "\u2581"


class SpmTokenizer:
    def __init__(self, tokens, scores, types):
        self.id_of = {}
        for i, (t, ty) in enumerate(zip(tokens, types)):
            if ty == 1:  # normal tokens only take part in merges
                self.id_of[t] = i
        self.scores = scores
        self.byte_id = {}
        for i, t in enumerate(tokens):
            if types[i] == 6:
                self.byte_id[int(t[3:5], 16)] = i

    def encode(self, text):
        if not text:
            return []
        text = SPACE + text.replace(" ", SPACE)
        sym = list(text)                       # symbol strings (merged in place)
        nxt = list(range(1, len(sym) + 1))
        prv = list(range(-1, len(sym) - 1))
        nxt[-1] = -1
        heap = []

        def try_add(left, right):
            if left < 0 or right < 0:
                return
            s = sym[left] + sym[right]
            tid = self.id_of.get(s)
            if tid is not None:
                heapq.heappush(heap, (-self.scores[tid], left, len(s), right))

        for i in range(len(sym) - 1):
            try_add(i, i + 1)
        while heap:
            _, left, size, right = heapq.heappop(heap)
            if sym[left] == "" or sym[right] == "" or nxt[left] != right or \
                    len(sym[left]) + len(sym[right]) != size:
                continue
            sym[left] += sym[right]
            sym[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            try_add(prv[left], left)
            try_add(left, nxt[left])
        out = []
        i = 0
        while i >= 0:
            s = sym[i]
            tid = self.id_of.get(s)
            if tid is not None:
                out.append(tid)
            else:
                assert len(s) == 1, s  # merged symbols are always tokens
                out.extend(self.byte_id[b] for b in s.encode("utf-8"))
            i = nxt[i]
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-4m.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "kjv-4m-tokenizer.model"))
    ap.add_argument("--text", action="append", default=[],
                    help="also compare on this text file (tokenized whole)")
    args = ap.parse_args()
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    r = G.Reader(args.model)
    tok = SpmTokenizer(r.meta["tokenizer.ggml.tokens"], r.meta["tokenizer.ggml.scores"],
                       r.meta["tokenizer.ggml.token_type"])
    cases = list(TOKENIZER_CASES)
    for path in args.text:
        with open(path, encoding="utf-8") as f:
            cases.append(f.read())
    bad = 0
    for s in cases:
        a, b = tok.encode(s), sp.encode(s)
        if a != b:
            bad += 1
            print("MISMATCH on %r...\n  llama.cpp-style %s\n  sentencepiece   %s"
                  % (s[:60], a[:40], b[:40]))
    print("check_tokenizer: %d cases, %d mismatches, %d tokens total"
          % (len(cases), bad, sum(len(sp.encode(s)) for s in cases)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
