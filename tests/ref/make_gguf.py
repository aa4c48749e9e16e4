#!/usr/bin/python3
"""Writes tiny synthetic Llama-family models as GGUF v3 files (numpy only).

Used by tests/test_reference.py to exercise seqkv's loader and forward pass on
shapes and weight types that the one real test model (stories260K, all F32)
does not cover: grouped-query attention with head_dim 64, partial rotary
embeddings, untied output matrices, and F16 / BF16 / Q8_0 / Q4_0 weights.

File layout written (all little-endian):
    "GGUF" u32 version=3 | u64 n_tensors | u64 n_kv
    n_kv    x { str key | u32 value type | value }            str = u64 len + bytes
    n_tensors x { str name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
    zero padding to `alignment`, then each tensor's bytes at data_start + offset
    (every offset a multiple of `alignment`).
ne lists dimensions fastest-first, so a matrix with N rows of K values has ne=[K, N].

Command line (for poking at seqkv by hand):
    /usr/bin/python3 tests/ref/make_gguf.py OUT.gguf [--type f32|f16|bf16|q8_0|q4_0] [--tied]
        [--rope-dim 32] [--ff 704]     (Q8_0/Q4_0 need --ff a multiple of 32)
"""
import struct
import sys

import numpy as np

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)

# GGML tensor types: (elements per block, bytes per block)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_Q4_K, GGML_BF16 = 0, 1, 2, 8, 12, 30
GGML_IQ2_XXS = 16  # sized only (error-path tests: a type seqkv does not read)
# Types written as random blocks (RANDOM_BLOCKS): block values, bytes, the offsets of the
# block's binary16 scales and the largest scale drawn (so that |weight| stays below ~0.3).
GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_Q2_K, GGML_Q3_K, GGML_Q5_K, GGML_Q6_K = 3, 6, 7, 10, 11, 13, 14
GGML_IQ4_NL, GGML_IQ4_XS = 20, 23
RANDOM_BLOCKS = {GGML_Q4_1: (32, 20, (0, 2), 0.01), GGML_Q5_0: (32, 22, (0,), 0.02),
                 GGML_Q5_1: (32, 24, (0, 2), 0.01), GGML_Q2_K: (256, 84, (80, 82), 0.005),
                 GGML_Q3_K: (256, 110, (108,), 0.002), GGML_Q4_K: (256, 144, (0, 2), 0.0003),
                 GGML_Q5_K: (256, 176, (0, 2), 0.0002), GGML_Q6_K: (256, 210, (208,), 0.0001),
                 GGML_IQ4_NL: (32, 18, (0,), 0.002), GGML_IQ4_XS: (256, 136, (0,), 0.0001)}
TYPE_LAYOUT = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2),
               GGML_Q8_0: (32, 34), GGML_Q4_0: (32, 18), GGML_IQ2_XXS: (256, 66)}
TYPE_LAYOUT.update({t: v[:2] for t, v in RANDOM_BLOCKS.items()})
TYPE_BY_NAME = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16,
                "q8_0": GGML_Q8_0, "q4_0": GGML_Q4_0, "q4_k": GGML_Q4_K}

_SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
               F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


# ---- quantisers: float matrix [N][K] -> bytes of N rows -------------------------

def _f16_bits(v):
    return np.asarray(v, dtype=np.float32).astype(np.float16).view(np.uint16)


def quantize(w, ggml_type):
    """Encodes w (2-D, rows of K values) in the given GGML type; returns bytes."""
    w = np.ascontiguousarray(w, dtype=np.float64)
    n, k = w.shape
    if ggml_type == GGML_F32:
        return w.astype("<f4").tobytes()
    if ggml_type == GGML_F16:
        return w.astype(np.float32).astype("<f2").tobytes()
    if ggml_type == GGML_BF16:  # round f32 to nearest-even bf16
        u = w.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return u.astype("<u2").tobytes()
    if ggml_type in (GGML_Q8_0, GGML_Q4_0):
        if k % 32:
            raise ValueError("row length %d is not a multiple of 32" % k)
        blocks = w.reshape(n * k // 32, 32)
        if ggml_type == GGML_Q8_0:
            amax = np.abs(blocks).max(axis=1)
            d16 = _f16_bits(amax / 127.0)
            d = d16.view(np.float16).astype(np.float64)
            inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
            q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
            rec = np.zeros(len(blocks), dtype=[("d", "<u2"), ("q", "i1", 32)])
            rec["d"], rec["q"] = d16, q
            return rec.tobytes()
        # Q4_0: the signed value of largest magnitude maps to nibble 0 (-8)
        idx = np.abs(blocks).argmax(axis=1)
        mx = blocks[np.arange(len(blocks)), idx]
        d16 = _f16_bits(mx / -8.0)
        d = d16.view(np.float16).astype(np.float64)
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.clip(np.rint(blocks * inv[:, None]) + 8, 0, 15).astype(np.uint8)
        rec = np.zeros(len(blocks), dtype=[("d", "<u2"), ("q", "u1", 16)])
        rec["d"], rec["q"] = d16, q[:, :16] | (q[:, 16:] << 4)
        return rec.tobytes()
    if ggml_type in RANDOM_BLOCKS:  # random blocks (every byte pattern is a valid block)
        return random_blocks(n, k, ggml_type, int(np.abs(w).sum() * 1e6) % (1 << 32))
    raise ValueError("cannot quantize to GGML type %d" % ggml_type)


def random_blocks(n, k, ggml_type, seed):
    """n rows of k values of a RANDOM_BLOCKS type: random bytes, the binary16 scales drawn
    uniformly in +-(the type's largest scale), so the weights are finite and small."""
    blk, size, offs, dmax = RANDOM_BLOCKS[ggml_type]
    if k % blk:
        raise ValueError("row length %d is not a multiple of %d" % (k, blk))
    rng = np.random.default_rng(seed)
    nb = n * k // blk
    b = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for o in offs:
        b[:, o:o + 2] = _f16_bits(rng.uniform(-dmax, dmax, nb)).view(np.uint8).reshape(nb, 2)
    return b.tobytes()


def tensor_nbytes(ne, ggml_type):
    blk, size = TYPE_LAYOUT[ggml_type]
    n = 1
    for v in ne:
        n *= int(v)
    return n // blk * size


# ---- writer ------------------------------------------------------------------------

class GGUFWriter:
    """Collects metadata and tensors, then writes one GGUF v3 file."""

    def __init__(self, alignment=32):
        self.alignment = alignment
        self.kv = []       # (key, type, value, elem_type)
        self.tensors = []  # (name, ne, ggml_type, payload bytes)

    def add(self, key, vtype, value, elem_type=None):
        self.kv.append((key, vtype, value, elem_type))

    def add_tensor(self, name, array=None, ggml_type=GGML_F32, raw=None, ne=None):
        """array: numpy array in math order (rows last index fastest); or raw bytes + ne."""
        if raw is None:
            a = np.asarray(array)
            ne = list(reversed(a.shape))
            raw = quantize(a.reshape(-1, a.shape[-1]), ggml_type)
        if len(raw) != tensor_nbytes(ne, ggml_type):
            raise ValueError("tensor %s: %d bytes for ne=%s" % (name, len(raw), ne))
        self.tensors.append((name, [int(v) for v in ne], ggml_type, bytes(raw)))

    def replace_tensor(self, name, ggml_type, raw, ne=None):
        """Swaps the named tensor's type and bytes (ne kept unless given); for error-path tests."""
        for i, (nm, old_ne, _, _) in enumerate(self.tensors):
            if nm == name:
                ne = old_ne if ne is None else [int(v) for v in ne]
                if len(raw) != tensor_nbytes(ne, ggml_type):
                    raise ValueError("tensor %s: %d bytes for ne=%s" % (name, len(raw), ne))
                self.tensors[i] = (name, ne, ggml_type, bytes(raw))
                return
        raise KeyError(name)

    @staticmethod
    def _str(s):
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value, elem_type):
        if vtype == STRING:
            return self._str(value)
        if vtype == ARRAY:
            out = [struct.pack("<IQ", elem_type, len(value))]
            if elem_type == STRING:
                out += [self._str(v) for v in value]
            else:
                out.append(np.asarray(value).astype(np.dtype(_SCALAR_FMT[elem_type])).tobytes())
            return b"".join(out)
        return struct.pack(_SCALAR_FMT[vtype], value)

    def tobytes(self):
        out = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, vtype, value, et in self.kv:
            out += [self._str(key), struct.pack("<I", vtype), self._value(vtype, value, et)]
        a = self.alignment
        off = 0
        offsets = []
        for name, ne, t, raw in self.tensors:
            offsets.append(off)
            out += [self._str(name), struct.pack("<I", len(ne)), struct.pack("<%dQ" % len(ne), *ne),
                    struct.pack("<IQ", t, off)]
            off = (off + len(raw) + a - 1) // a * a
        head = b"".join(out)
        data = bytearray()
        for (_, _, _, raw), o in zip(self.tensors, offsets):
            data += b"\0" * (o - len(data))
            data += raw
        return head + b"\0" * ((-len(head)) % a) + bytes(data)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.tobytes())


# ---- vocabulary ----------------------------------------------------------------------

# Merged SentencePiece pieces beyond the byte tokens ("\u2581" stands for a space).
_PIECES = ["\u2581", "e", "t", "h", "a", "o", "n", "s", "r", "i", "d", "l", "u", "c", "m", "w",
           "y", "g", ",", ".", "\u2581t", "he", "\u2581the", "in", "er", "an", "\u2581a",
           "on", "\u2581s", "\u2581w", "at", "en", "\u2581o", "nd", "\u2581and", "ed", "re",
           "\u2581he", "or", "\u2581b", "is"]


def spm_vocab(n_vocab):
    """<unk>, <s>, </s>, <0x00>..<0xFF>, then merged pieces (padded with rarer ones)."""
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    pieces = list(_PIECES)
    extra = 0
    while len(toks) + len(pieces) < n_vocab:  # filler pieces that text rarely forms
        pieces.append("q%dz" % extra)
        extra += 1
    pieces = pieces[:n_vocab - len(toks)]
    for i, p in enumerate(pieces):
        toks.append(p)
        types.append(1)
        scores.append(-float(i))  # earlier pieces merge first
    return toks, scores, types


# ---- a Llama model ---------------------------------------------------------------------

def llama_gguf(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, n_ff=688, n_vocab=300,
               n_ctx=128, rope_dim=None, rope_base=10000.0, eps=1e-5, wtype=GGML_F32, types=None,
               tied=False, seed=1, arch="llama"):
    """Returns a GGUFWriter holding a random Llama model.

    wtype: GGML type of every matrix; types: optional {name: type} overrides, layer tensors
    named without "blk.N.", e.g. {"ffn_down.weight": GGML_Q8_0, "output_norm.weight":
    GGML_F16} (norms stay F32 unless overridden). Weights ~ N(0, 1/K) so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    rope_dim = head_dim if rope_dim is None else rope_dim

    def ttype(name, default):  # a key names a tensor, without "blk.N." for layer tensors
        short = name.split(".", 2)[2] if name.startswith("blk.") else name
        return (types or {}).get(short, default)

    w = GGUFWriter()
    w.add("general.architecture", STRING, arch)
    w.add("general.name", STRING, "synthetic-%s" % arch)
    w.add("general.alignment", U32, 32)
    p = arch + "."
    w.add(p + "context_length", U32, n_ctx)
    w.add(p + "embedding_length", U32, n_embd)
    w.add(p + "block_count", U32, n_layer)
    w.add(p + "feed_forward_length", U32, n_ff)
    w.add(p + "attention.head_count", U32, n_head)
    w.add(p + "attention.head_count_kv", U32, n_head_kv)
    if head_dim * n_head != n_embd:
        w.add(p + "attention.key_length", U32, head_dim)
        w.add(p + "attention.value_length", U32, head_dim)
    w.add(p + "rope.freq_base", F32, rope_base)
    w.add(p + "rope.dimension_count", U32, rope_dim)
    w.add(p + "attention.layer_norm_rms_epsilon", F32, eps)
    toks, scores, ttypes = spm_vocab(n_vocab)
    w.add("tokenizer.ggml.model", STRING, "llama")
    w.add("tokenizer.ggml.tokens", ARRAY, toks, STRING)
    w.add("tokenizer.ggml.scores", ARRAY, scores, F32)
    w.add("tokenizer.ggml.token_type", ARRAY, ttypes, I32)
    w.add("tokenizer.ggml.bos_token_id", U32, 1)
    w.add("tokenizer.ggml.eos_token_id", U32, 2)
    w.add("tokenizer.ggml.unknown_token_id", U32, 0)

    def mat(name, n_out, k_in):
        a = rng.standard_normal((n_out, k_in)) / np.sqrt(k_in)
        w.add_tensor(name, a, ttype(name, wtype))

    def norm(name, n):
        w.add_tensor(name, 1.0 + 0.1 * rng.standard_normal(n), ttype(name, GGML_F32))

    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, n_embd)),
                 ttype("token_embd.weight", wtype))
    for l in range(n_layer):
        b = "blk.%d." % l
        norm(b + "attn_norm.weight", n_embd)
        mat(b + "attn_q.weight", q_dim, n_embd)
        mat(b + "attn_k.weight", kv_dim, n_embd)
        mat(b + "attn_v.weight", kv_dim, n_embd)
        mat(b + "attn_output.weight", n_embd, q_dim)
        norm(b + "ffn_norm.weight", n_embd)
        mat(b + "ffn_gate.weight", n_ff, n_embd)
        mat(b + "ffn_up.weight", n_ff, n_embd)
        mat(b + "ffn_down.weight", n_embd, n_ff)
    norm("output_norm.weight", n_embd)
    if not tied:
        mat("output.weight", n_vocab, n_embd)
    return w


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__)
        return 2
    kw = {}
    args = argv[2:]
    while args:
        a = args.pop(0)
        if a == "--type":
            kw["wtype"] = TYPE_BY_NAME[args.pop(0)]
        elif a == "--tied":
            kw["tied"] = True
        elif a == "--rope-dim":
            kw["rope_dim"] = int(args.pop(0))
        elif a == "--ff":
            kw["n_ff"] = int(args.pop(0))
        else:
            print("unknown option %s" % a, file=sys.stderr)
            return 2
    try:
        llama_gguf(**kw).write(argv[1])
    except ValueError as ex:
        print("make_gguf: %s" % ex, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
