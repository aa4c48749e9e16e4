#!/usr/bin/python3
"""Issue 16's early-exit candidate, measured: how many bits per token would an arithmetic
coder spend under the model's own first k layers (the residual after layer k through the
final norm and the output head: the "logit lens"), for k = 1 .. n_layer?

A restore under such a predictor would run layers 1..k token by token (the coder needs each
token's prediction before it can decode the next), then layers k+1..n_layer as one batched
prefill. This script measures only the bits: the reference float32 engine of
tools/train/numpy_engine.py runs the text once, token by token, and every exit is scored on
the same positions (cross-entropy of the next token, bits; the first token is not scored).

Usage: bench/early_exit.py [--model models/kjv-4m.gguf] [--text FILE] [--bytes N]
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
from numpy_engine import Engine  # noqa: E402


class ExitEngine(Engine):
    """Engine.step, keeping the logits of every exit (the residual after each layer)."""

    def step_exits(self, token):
        p, d, rep = self.pos, self.dim, self.n_head // self.n_kv
        x = self.t["token_embd.weight"][token * d:(token + 1) * d].copy()
        out = []
        for L in range(self.n_layers):
            b = "blk.%d." % L
            n = self.rmsnorm(x, b + "attn_norm.weight")
            q = self.rope(self.matvec(b + "attn_q.weight", n), p)
            self.kc[L, p] = self.rope(self.matvec(b + "attn_k.weight", n), p)
            self.vc[L, p] = self.matvec(b + "attn_v.weight", n)
            y = np.zeros(self.n_head * self.hd, np.float32)
            for h in range(self.n_head):
                g = h // rep
                qh = q[h * self.hd:(h + 1) * self.hd]
                K = self.kc[L, :p + 1, g * self.hd:(g + 1) * self.hd]
                V = self.vc[L, :p + 1, g * self.hd:(g + 1) * self.hd]
                w = np.exp((K @ qh) / np.float32(np.sqrt(self.hd)) - np.max((K @ qh) / np.float32(np.sqrt(self.hd))))
                y[h * self.hd:(h + 1) * self.hd] = (w / w.sum()) @ V
            x = x + self.matvec(b + "attn_output.weight", y)
            n = self.rmsnorm(x, b + "ffn_norm.weight")
            g1 = self.matvec(b + "ffn_gate.weight", n)
            x = x + self.matvec(b + "ffn_down.weight", (g1 / (1 + np.exp(-g1))) * self.matvec(b + "ffn_up.weight", n))
            out.append(self.matvec(self.out_name, self.rmsnorm(x, "output_norm.weight")))
        self.pos += 1
        return out


def bits_of(logits, tok):
    z = logits.astype(np.float64)
    z -= z.max()
    return (math.log(np.exp(z).sum()) - z[tok]) / math.log(2.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-4m.gguf"))
    ap.add_argument("--text", default=os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"))
    ap.add_argument("--bytes", type=int, default=3000)
    ap.add_argument("--seqkv", default=os.path.join(ROOT, "build", "seqkv"))
    a = ap.parse_args()
    text = open(a.text, "rb").read()[:a.bytes]
    ids = subprocess.run([a.seqkv, "tokenize", "-m", a.model, "-f", "-"], input=text, check=True,
                         stdout=subprocess.PIPE).stdout.split()
    ids = [int(x) for x in ids]
    e = ExitEngine(a.model)
    n = min(len(ids), e.ctx)
    total = np.zeros(e.n_layers)
    for i in range(n - 1):
        outs = e.step_exits(ids[i])
        for k, lg in enumerate(outs):
            total[k] += bits_of(lg, ids[i + 1])
    print("model %s, %d tokens of %s (%d predicted), reference float32 engine" % (
        os.path.basename(a.model), n, os.path.basename(a.text), n - 1))
    print()
    print("| exit after layer | of | bits/token |")
    print("|---:|---:|---:|")
    for k in range(e.n_layers):
        print("| %d | %d | %.3f |" % (k + 1, e.n_layers, total[k] / (n - 1)))


if __name__ == "__main__":
    main()
