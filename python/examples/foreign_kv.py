#!/usr/bin/python3
"""Store another engine's KV cache with seqkv's model-free codecs, and measure the error.

    PYTHONPATH=build/python python3 python/examples/foreign_kv.py

No seqkv model is involved: the KV comes from a tiny attention stack written in numpy,
standing in for a PyTorch model (K with RoPE applied, as engines cache it), in the
layout [layers, 2, kv_heads, positions, head_dim]. With torch installed the same calls
take `k.float().numpy()` (or bfloat16 bits: `t.view(torch.int16).numpy()` with
dtype="bfloat16"). Prints each scheme's size against the bfloat16 cache and its
relative squared error, and checks bfloat16 input round-trips through "f32".
"""
import numpy as np

import seqkv

L, H, P, D, E = 4, 2, 256, 64, 256   # layers, KV heads, positions, head_dim, model width
rng = np.random.default_rng(0)


def rope(x, pos):
    """Rotary embedding over pairs (2i, 2i+1) of the last axis, base 10000."""
    inv = 10000.0 ** (-np.arange(0, D, 2) / D)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    y = x.copy()
    y[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    y[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return y


def toy_kv():
    """Hidden states that drift like a text's, projected to K (rotated) and V per layer."""
    h = np.cumsum(rng.standard_normal((P, E)) * 0.3, axis=0) + rng.standard_normal((P, E))
    kv = np.empty((L, 2, H, P, D), np.float32)
    pos = np.arange(P, dtype=np.float64)
    for l in range(L):
        wk, wv = (rng.standard_normal((E, H * D)) / np.sqrt(E) for _ in range(2))
        k = (h @ wk).reshape(P, H, D).transpose(1, 0, 2)
        v = (h @ wv).reshape(P, H, D).transpose(1, 0, 2)
        kv[l, 0] = rope(k, pos)
        kv[l, 1] = v
        h = h + 0.5 * np.tanh(h @ (rng.standard_normal((E, E)) / np.sqrt(E)))
    return kv


kv = toy_kv()
bf16 = (kv.view(np.uint32) >> 16).astype(np.uint16)           # the engine's bfloat16 cache (truncated)
ref = (bf16.astype(np.uint32) << 16).view(np.float32)           # its values
assert np.array_equal(seqkv.decode_kv(seqkv.encode_kv(bf16, "f32", dtype="bfloat16"), dtype="bfloat16"), bf16)
print("KV [layers %d, 2, kv_heads %d, positions %d, head_dim %d]: %d bytes as bfloat16" % (L, H, P, D, bf16.nbytes))
print("%-22s %9s %8s %12s" % ("scheme", "bytes", "ratio", "rel. error"))
for scheme in ("f16", "q8_0", "tq4", "tq3", "k=tq4,v=tq3", "pred:lpc2,step=0.02", "pred", "pred:lpc2,step=0.2"):
    blob = seqkv.encode_kv(bf16, scheme, dtype="bfloat16")
    out = seqkv.decode_kv(blob)
    err = float(((out - ref) ** 2).sum() / (ref ** 2).sum())
    print("%-22s %9d %7.2fx %12.3g" % (scheme, len(blob), bf16.nbytes / len(blob), err))
    assert err < 0.05
info = seqkv.inspect(seqkv.encode_kv(bf16, "pred", dtype="bfloat16"))
print("inspect(pred blob):", {k: info[k] for k in ("geometry", "n_pos", "predictor", "rel_mse")})
print("foreign_kv: OK")
