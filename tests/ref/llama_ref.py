#!/usr/bin/python3
"""An independent float64 numpy reference for seqkv's Llama forward pass.

Written from the model definition, not from seqkv's C code, so that the two can
be compared: a minimal GGUF v2/v3 reader (metadata + F32/F16/BF16/Q8_0/Q4_0
tensors), a reader for seqkv's raw KV dumps, and LlamaRef.forward(tokens), which
returns every position's logits and the whole K/V cache (K after RoPE).

The model, per layer l, for the row x of each token at position p:
    h   = rmsnorm(x) * attn_norm             rmsnorm(x) = x / sqrt(mean(x^2) + eps)
    q, k, v = Wq h, Wk h, Wv h               split into heads of head_dim
    RoPE on q and k: pairs (x[2i], x[2i+1]), i < rope_dim/2, rotated by
        p * base^(-2i/rope_dim) (divided by rope_freqs[i] when the file has them);
        dims beyond rope_dim are untouched
    query head h attends causally to KV head h // (n_head / n_head_kv),
        softmax(q.k / sqrt(head_dim)) over positions 0..p, weights applied to v
    x  += Wo att
    x  += W2 (silu(W1 h') * W3 h'),          h' = rmsnorm(x) * ffn_norm
logits = Wout (rmsnorm(x) * output_norm), Wout = token_embd when output.weight is absent.

`bug` (forward's keyword) deliberately breaks one step; tests use it to show that
their error metric notices each kind of mistake. None means the correct model.
"""
import struct

import numpy as np

# GGUF metadata value types
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STRING, _ARRAY, _U64, _I64, _F64 = range(13)
_SCALAR = {_U8: "<u1", _I8: "<i1", _U16: "<u2", _I16: "<i2", _U32: "<u4", _I32: "<i4",
           _F32: "<f4", _BOOL: "<u1", _U64: "<u8", _I64: "<i8", _F64: "<f8"}
# GGML tensor types: (elements per block, bytes per block)
_LAYOUT = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18)}

BUGS = ("rope_neox_pairs", "gqa_modulo", "no_ffn_norm", "transposed_wo")


class GGUFFile:
    """Parses a GGUF file: .version, .meta {key: value}, .tensors {name: (ne, type, bytes)}."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self.buf[:4] != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        self.pos = 4
        self.version, n_tensors, n_kv = self._unpack("<IQQ")
        if self.version not in (2, 3):
            raise ValueError("GGUF version %d" % self.version)
        self.meta = {}
        for _ in range(n_kv):
            key = self._str()
            (vtype,) = self._unpack("<I")
            self.meta[key] = self._value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            (n_dims,) = self._unpack("<I")
            ne = list(self._unpack("<%dQ" % n_dims))
            ttype, off = self._unpack("<IQ")
            infos.append((name, ne, ttype, off))
        align = int(self.meta.get("general.alignment", 32))
        data_start = (self.pos + align - 1) // align * align
        self.tensors = {}
        for name, ne, ttype, off in infos:
            if ttype not in _LAYOUT:
                self.tensors[name] = (ne, ttype, None)
                continue
            blk, size = _LAYOUT[ttype]
            n = int(np.prod(ne))
            start = data_start + off
            nbytes = n // blk * size
            if start + nbytes > len(self.buf):
                raise ValueError("tensor %s extends past the end of the file" % name)
            self.tensors[name] = (ne, ttype, self.buf[start:start + nbytes])

    def _unpack(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        (n,) = self._unpack("<Q")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "replace")

    def _value(self, vtype):
        if vtype == _STRING:
            return self._str()
        if vtype == _ARRAY:
            et, n = self._unpack("<IQ")
            if et == _STRING:
                return [self._str() for _ in range(n)]
            if et == _ARRAY:
                return [self._value(_ARRAY) for _ in range(n)]
            dt = np.dtype(_SCALAR[et])
            a = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
            self.pos += n * dt.itemsize
            return a
        dt = np.dtype(_SCALAR[vtype])
        v = np.frombuffer(self.buf, dtype=dt, count=1, offset=self.pos)[0]
        self.pos += dt.itemsize
        return v.item()

    def tensor(self, name):
        """Dequantized tensor as float64, shape = reversed ne (rows last axis)."""
        ne, ttype, raw = self.tensors[name]
        if raw is None:
            raise ValueError("tensor %s has unsupported type %d" % (name, ttype))
        return dequantize(raw, ttype, int(np.prod(ne))).reshape(list(reversed(ne)))


def dequantize(raw, ttype, n):
    """Bytes of n elements of GGML type ttype -> float64 vector."""
    if ttype == 0:
        return np.frombuffer(raw, "<f4", n).astype(np.float64)
    if ttype == 1:
        return np.frombuffer(raw, "<f2", n).astype(np.float64)
    if ttype == 30:  # bfloat16: the top half of an f32
        u = np.frombuffer(raw, "<u2", n).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    if ttype == 8:  # Q8_0: f16 scale + 32 signed bytes
        b = np.frombuffer(raw, np.dtype([("d", "<f2"), ("q", "i1", 32)]), n // 32)
        return (b["d"].astype(np.float64)[:, None] * b["q"].astype(np.float64)).reshape(-1)
    if ttype == 2:  # Q4_0: f16 scale + 16 bytes; low nibbles elements 0..15, high 16..31
        b = np.frombuffer(raw, np.dtype([("d", "<f2"), ("q", "u1", 16)]), n // 32)
        q = np.concatenate([b["q"] & 15, b["q"] >> 4], axis=1).astype(np.float64) - 8.0
        return (b["d"].astype(np.float64)[:, None] * q).reshape(-1)
    raise ValueError("unsupported GGML type %d" % ttype)


class LlamaRef:
    """Hyper-parameters and float64 weights of a GGUF Llama model."""

    def __init__(self, path):
        g = GGUFFile(path)
        m = g.meta
        if m.get("general.architecture") != "llama":
            raise ValueError("architecture %r" % m.get("general.architecture"))
        self.n_embd = int(m["llama.embedding_length"])
        self.n_layer = int(m["llama.block_count"])
        self.n_ff = int(m["llama.feed_forward_length"])
        self.n_head = int(m["llama.attention.head_count"])
        self.n_head_kv = int(m.get("llama.attention.head_count_kv", self.n_head))
        self.head_dim = int(m.get("llama.attention.key_length", self.n_embd // self.n_head))
        self.rope_dim = int(m.get("llama.rope.dimension_count", self.head_dim))
        self.rope_base = float(m.get("llama.rope.freq_base", 10000.0))
        self.eps = float(m.get("llama.attention.layer_norm_rms_epsilon", 1e-5))
        self.n_ctx = int(m.get("llama.context_length", 2048))
        self.n_vocab = len(m["tokenizer.ggml.tokens"])
        self.tok_embd = g.tensor("token_embd.weight")
        self.output = g.tensor("output.weight") if "output.weight" in g.tensors else self.tok_embd
        self.tied = "output.weight" not in g.tensors
        self.output_norm = g.tensor("output_norm.weight")
        self.rope_factors = g.tensor("rope_freqs.weight") if "rope_freqs.weight" in g.tensors else None
        names = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                 "ffn_up", "ffn_down")
        self.layers = [{k: g.tensor("blk.%d.%s.weight" % (l, k)) for k in names} for l in range(self.n_layer)]

    def _rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos, bug):
        """x: [T][H][head_dim], rotated in place on the first rope_dim dims."""
        half = self.rope_dim // 2
        freq = self.rope_base ** (-2.0 * np.arange(half) / self.rope_dim)
        if self.rope_factors is not None:
            freq = freq / self.rope_factors
        ang = pos[:, None] * freq[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if bug == "rope_neox_pairs":  # (x[i], x[i + rope_dim/2]) instead of adjacent pairs
            i0, i1 = np.arange(half), np.arange(half) + half
        else:
            i0, i1 = 2 * np.arange(half), 2 * np.arange(half) + 1
        x0, x1 = x[:, :, i0].copy(), x[:, :, i1].copy()
        x[:, :, i0] = x0 * c - x1 * s
        x[:, :, i1] = x0 * s + x1 * c

    def forward(self, tokens, bug=None):
        """tokens at positions 0..T-1 -> (logits [T][n_vocab], K, V [n_layer][n_head_kv][T][head_dim])."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T, hd, Hq, Hkv = len(tokens), self.head_dim, self.n_head, self.n_head_kv
        group = Hq // Hkv
        pos = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        x = self.tok_embd[tokens].copy()
        K = np.zeros((self.n_layer, Hkv, T, hd))
        V = np.zeros((self.n_layer, Hkv, T, hd))
        for l, L in enumerate(self.layers):
            h = self._rmsnorm(x, L["attn_norm"])
            q = (h @ L["attn_q"].T).reshape(T, Hq, hd)
            k = (h @ L["attn_k"].T).reshape(T, Hkv, hd)
            v = (h @ L["attn_v"].T).reshape(T, Hkv, hd)
            self._rope(q, pos, bug)
            self._rope(k, pos, bug)
            K[l] = k.transpose(1, 0, 2)
            V[l] = v.transpose(1, 0, 2)
            att = np.empty((T, Hq, hd))
            for hq in range(Hq):
                kvh = hq % Hkv if bug == "gqa_modulo" else hq // group
                s = q[:, hq, :] @ K[l, kvh].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                att[:, hq, :] = (s / s.sum(axis=1, keepdims=True)) @ V[l, kvh]
            wo = L["attn_output"].T if bug == "transposed_wo" else L["attn_output"]
            x = x + att.reshape(T, Hq * hd) @ wo.T
            h = x if bug == "no_ffn_norm" else self._rmsnorm(x, L["ffn_norm"])
            g = h @ L["ffn_gate"].T
            u = h @ L["ffn_up"].T
            x = x + (g / (1.0 + np.exp(-g)) * u) @ L["ffn_down"].T
        logits = self._rmsnorm(x, self.output_norm) @ self.output.T
        return logits, K, V


def read_kvdump(path):
    """seqkv KV dump -> dict(tokens, K, V [n_layer][n_head_kv][n_pos][head_dim] float32, ...)."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 72 or b[:8] != b"SKVDUMP\0":
        raise ValueError("%s: not a seqkv KV dump" % path)
    version, hsize, dtype, n_layer, n_head_kv, head_dim, n_pos, _ = struct.unpack_from("<8I", b, 8)
    if version != 1 or hsize != 64 or dtype not in (0, 1):
        raise ValueError("%s: version %d, header %d, dtype %d" % (path, version, hsize, dtype))
    esize = 4 if dtype == 0 else 2
    n_vals = n_layer * 2 * n_head_kv * n_pos * head_dim
    if len(b) != 64 + 4 * n_pos + esize * n_vals + 8:
        raise ValueError("%s: %d bytes, expected %d" % (path, len(b), 64 + 4 * n_pos + esize * n_vals + 8))
    tokens = np.frombuffer(b, "<i4", n_pos, 64)
    vals = np.frombuffer(b, "<f4" if dtype == 0 else "<f2", n_vals, 64 + 4 * n_pos)
    vals = vals.reshape(n_layer, 2, n_head_kv, n_pos, head_dim)
    return {"tokens": tokens, "K": vals[:, 0], "V": vals[:, 1], "dtype": dtype, "n_layer": n_layer,
            "n_head_kv": n_head_kv, "head_dim": head_dim, "n_pos": n_pos, "fingerprint": b[40:56]}


def read_logits(path, n_vocab):
    a = np.fromfile(path, dtype="<f4")
    if a.size % n_vocab:
        raise ValueError("%s: %d floats is not a multiple of n_vocab %d" % (path, a.size, n_vocab))
    return a.reshape(-1, n_vocab)
