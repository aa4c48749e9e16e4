#!/usr/bin/python3
"""An engine-style float32 forward pass in numpy, one token at a time with a
KV cache, reading the GGUF tensors exactly as a C engine would (flat
row-major data, ne = [in, out] so out[i] = sum_j W[i*in + j] * x[j]).

It shares no code with model.py, so agreeing with tests/data/model_ref/
checks the layout conventions (tensor names, ne order, adjacent-pair RoPE,
GQA head mapping, tied output) that seqkv's C engine must follow.

Usage: numpy_engine.py [--model models/kjv-4m.gguf] [--ref-dir tests/data/model_ref]
"""
import argparse
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gguf_io as G  # noqa: E402


class Engine:
    def __init__(self, path):
        r = G.Reader(path)
        m = r.meta
        self.dim = m["llama.embedding_length"]
        self.n_layers = m["llama.block_count"]
        self.n_head = m["llama.attention.head_count"]
        self.n_kv = m["llama.attention.head_count_kv"]
        self.hd = self.dim // self.n_head
        self.eps = np.float32(m["llama.attention.layer_norm_rms_epsilon"])
        self.base = float(m["llama.rope.freq_base"])
        self.ctx = m["llama.context_length"]
        self.t = {}
        for name, arr in r.tensors.items():
            flat = arr.reshape(-1).astype(np.float32)
            self.t[name] = flat
        self.ne = {n: list(reversed(a.shape)) for n, a in r.tensors.items()}
        self.out_name = "output.weight" if "output.weight" in self.t else "token_embd.weight"
        self.reset()

    def reset(self):
        self.kc = np.zeros((self.n_layers, self.ctx, self.n_kv * self.hd), np.float32)
        self.vc = np.zeros_like(self.kc)
        self.pos = 0

    def matvec(self, name, x):
        n_in, n_out = self.ne[name]
        return self.t[name].reshape(n_out, n_in) @ x

    def rmsnorm(self, x, name):
        ms = np.mean(x.astype(np.float64) ** 2)
        return (x / np.sqrt(ms + self.eps)).astype(np.float32) * self.t[name]

    def rope(self, v, pos):
        out = v.copy()
        for h in range(v.size // self.hd):
            for i in range(self.hd // 2):
                ang = pos * self.base ** (-2.0 * i / self.hd)
                c, s = np.cos(ang), np.sin(ang)
                a, b = v[h * self.hd + 2 * i], v[h * self.hd + 2 * i + 1]
                out[h * self.hd + 2 * i] = a * c - b * s
                out[h * self.hd + 2 * i + 1] = a * s + b * c
        return out

    def step(self, token):
        p = self.pos
        d = self.dim
        x = self.t["token_embd.weight"][token * d:(token + 1) * d].copy()
        rep = self.n_head // self.n_kv
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
                sc = (K @ qh) / np.float32(np.sqrt(self.hd))
                w = np.exp(sc - sc.max())
                y[h * self.hd:(h + 1) * self.hd] = (w / w.sum()) @ V
            x = x + self.matvec(b + "attn_output.weight", y)
            n = self.rmsnorm(x, b + "ffn_norm.weight")
            g1 = self.matvec(b + "ffn_gate.weight", n)
            up = self.matvec(b + "ffn_up.weight", n)
            x = x + self.matvec(b + "ffn_down.weight", (g1 / (1 + np.exp(-g1))) * up)
        self.pos += 1
        return self.matvec(self.out_name, self.rmsnorm(x, "output_norm.weight"))


def read_bin(path):
    with open(path, "rb") as f:
        n, v = struct.unpack("<II", f.read(8))
        toks = np.frombuffer(f.read(4 * n), "<i4").tolist()
        rest = np.frombuffer(f.read(), "<f4")
    return toks, v, rest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-4m.gguf"))
    ap.add_argument("--ref-dir", default=os.path.join(ROOT, "tests", "data", "model_ref"))
    args = ap.parse_args()
    eng = Engine(args.model)
    toks, v, ref = read_bin(os.path.join(args.ref_dir, "logits.bin"))
    ref = ref.reshape(len(toks), v)
    worst = 0.0
    for i, t in enumerate(toks):
        lg = eng.step(t)
        worst = max(worst, float(np.max(np.abs(lg - ref[i]) / (1e-3 + np.abs(ref[i])))))
    print("numpy_engine: logits.bin: %d positions, max rel diff %.2e" % (len(toks), worst))
    toks, v, ref = read_bin(os.path.join(args.ref_dir, "heldout_nll.bin"))
    eng.reset()
    lps = []
    for i, t in enumerate(toks[:-1]):
        lg = eng.step(t).astype(np.float64)
        mx = lg.max()
        lps.append(lg[toks[i + 1]] - mx - np.log(np.exp(lg - mx).sum()))
    diff = np.abs(np.asarray(lps) - ref)
    print("numpy_engine: heldout_nll.bin: %d positions, max |diff| %.2e nats, mean NLL %.5f vs %.5f"
          % (len(lps), diff.max(), -np.mean(lps), -np.mean(ref)))
    ok = worst < 1e-2 and diff.max() < 1e-3
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
