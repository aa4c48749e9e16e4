#!/usr/bin/python3
"""Writes a random-weight Llama GGUF (F16 matrices, F32 norms) of a real model's geometry.

    /usr/bin/python3 scripts/peer/gen_model.py GEOMETRY OUT.gguf [--seed N] [--type TYPE]

GEOMETRY is a row of GEOMETRIES below (tinyllama-1.1b, llama-3.2-1b; resident-test for a test). The file is for
speed comparisons only (docs/bench.md, "Side by side with llama.cpp"): the weights are
N(0, 1/K) noise, so the model computes nothing meaningful, but every matrix has the
shape, type and byte size of the real one, which is all that throughput depends on.
Quantized versions are made from it by llama.cpp's own quantizer (scripts/peer/models.sh).

--type TYPE (a block type of BLOCK_TYPES below: q4_1, q5_k, iq4_xs, ...) writes every matrix
as random blocks of that type instead, with small finite binary16 scales: a "pure" file of
one weight type for timing that type's kernels where no quantizer is at hand (the kernels'
work does not depend on the values; llama.cpp's mixed presets such as Q5_K_M are not made).

The tokenizer section is a SentencePiece ("llama") vocabulary of the model's size
(<unk> <s> </s>, the 256 byte tokens, then merged and filler pieces; tests/ref/make_gguf.py):
neither llama-bench nor the seqkv benchmark tokenizes text, but both loaders want a vocab.
Llama-3.2's own vocabulary is BPE; its size is what matters here, not its merges.

The file is streamed: header first (every tensor's size is known from its shape), then
one tensor at a time, so memory stays at one tensor (~0.5 GB for a 128K x 2048 embedding).
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
import make_gguf as mg  # noqa: E402  (GGUF value encoding, constants, the vocabulary)

# name -> the geometry of the real model (context kept at 2048 for both: only pp512/tg128 run)
GEOMETRIES = {
    "tinyllama-1.1b": dict(n_layer=22, n_embd=2048, n_head=32, n_head_kv=4, n_ff=5632,
                           n_vocab=32000, rope_base=10000.0, tied=False),
    "llama-3.2-1b": dict(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192,
                         n_vocab=128256, rope_base=500000.0, tied=True),
    # not a real model: TinyLlama's layers, three of them, and a 4,096-token vocabulary, so
    # that its matrices (281 MB) just pass the engine's 256 MiB resident-copy threshold
    # (tests/test_cli_options.py: resident_copy_only_when_it_pays)
    "resident-test": dict(n_layer=3, n_embd=2048, n_head=32, n_head_kv=4, n_ff=5632,
                          n_vocab=4096, rope_base=10000.0, tied=False),
}
ALIGN = 32
# name -> (ggml type id, values per block, bytes per block, offsets of the binary16 scales)
BLOCK_TYPES = {
    "q4_0": (2, 32, 18, (0,)), "q4_1": (3, 32, 20, (0, 2)), "q5_0": (6, 32, 22, (0,)),
    "q5_1": (7, 32, 24, (0, 2)), "q8_0": (8, 32, 34, (0,)), "q2_k": (10, 256, 84, (80, 82)),
    "q3_k": (11, 256, 110, (108,)), "q4_k": (12, 256, 144, (0, 2)), "q5_k": (13, 256, 176, (0, 2)),
    "q6_k": (14, 256, 210, (208,)), "iq4_nl": (20, 32, 18, (0,)), "iq4_xs": (23, 256, 136, (0,)),
}
BLOCK_BY_ID = {v[0]: v for v in BLOCK_TYPES.values()}
N_CTX = 2048


def metadata(name, g):
    """[(key, type, value, elem_type)] of a llama model with geometry g."""
    p = "llama."
    kv = [("general.architecture", mg.STRING, "llama", None),
          ("general.name", mg.STRING, "random-" + name, None),
          ("general.alignment", mg.U32, ALIGN, None),
          ("general.file_type", mg.U32, 1, None),  # LLAMA_FTYPE_MOSTLY_F16
          (p + "context_length", mg.U32, N_CTX, None),
          (p + "embedding_length", mg.U32, g["n_embd"], None),
          (p + "block_count", mg.U32, g["n_layer"], None),
          (p + "feed_forward_length", mg.U32, g["n_ff"], None),
          (p + "attention.head_count", mg.U32, g["n_head"], None),
          (p + "attention.head_count_kv", mg.U32, g["n_head_kv"], None),
          (p + "rope.freq_base", mg.F32, g["rope_base"], None),
          (p + "rope.dimension_count", mg.U32, g["n_embd"] // g["n_head"], None),
          (p + "attention.layer_norm_rms_epsilon", mg.F32, 1e-5, None)]
    toks, scores, types = mg.spm_vocab(g["n_vocab"])
    kv += [("tokenizer.ggml.model", mg.STRING, "llama", None),
           ("tokenizer.ggml.tokens", mg.ARRAY, toks, mg.STRING),
           ("tokenizer.ggml.scores", mg.ARRAY, scores, mg.F32),
           ("tokenizer.ggml.token_type", mg.ARRAY, types, mg.I32),
           ("tokenizer.ggml.bos_token_id", mg.U32, 1, None),
           ("tokenizer.ggml.eos_token_id", mg.U32, 2, None),
           ("tokenizer.ggml.unknown_token_id", mg.U32, 0, None)]
    return kv


def tensor_list(g, wt=mg.GGML_F16):
    """[(name, (n_rows, row_len) or (n,), ggml type)] in file order; matrices of type wt."""
    d, hd = g["n_embd"], g["n_embd"] // g["n_head"]
    q, kvd, ff = g["n_head"] * hd, g["n_head_kv"] * hd, g["n_ff"]
    out = [("token_embd.weight", (g["n_vocab"], d), wt)]
    for layer in range(g["n_layer"]):
        b = "blk.%d." % layer
        out += [(b + "attn_norm.weight", (d,), mg.GGML_F32),
                (b + "attn_q.weight", (q, d), wt),
                (b + "attn_k.weight", (kvd, d), wt),
                (b + "attn_v.weight", (kvd, d), wt),
                (b + "attn_output.weight", (d, q), wt),
                (b + "ffn_norm.weight", (d,), mg.GGML_F32),
                (b + "ffn_gate.weight", (ff, d), wt),
                (b + "ffn_up.weight", (ff, d), wt),
                (b + "ffn_down.weight", (d, ff), wt)]
    out.append(("output_norm.weight", (d,), mg.GGML_F32))
    if not g["tied"]:
        out.append(("output.weight", (g["n_vocab"], d), wt))
    return out


def nbytes(ne, t):
    if t in BLOCK_BY_ID:
        _, blk, size, _ = BLOCK_BY_ID[t]
        return int(np.prod(ne)) // blk * size
    return mg.tensor_nbytes(ne, t)


def padded(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def header(name, g, tensors):
    w = mg.GGUFWriter(ALIGN)  # used only for its value encoding
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata(name, g)))]
    for key, vtype, value, et in metadata(name, g):
        out += [w._str(key), struct.pack("<I", vtype), w._value(vtype, value, et)]
    off = 0
    for tname, shape, t in tensors:
        ne = list(reversed(shape))
        out += [w._str(tname), struct.pack("<I", len(ne)), struct.pack("<%dQ" % len(ne), *ne),
                struct.pack("<IQ", t, off)]
        off = padded(off + nbytes(ne, t))
    head = b"".join(out)
    return head + b"\0" * ((-len(head)) % ALIGN)


def block_bytes(rng, shape, t):
    """Random blocks of a block type; every binary16 scale ~ N(0, 1/K) / 8, finite."""
    _, blk, size, offs = BLOCK_BY_ID[t]
    nb = shape[0] * shape[1] // blk
    a = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for o in offs:
        h = (rng.standard_normal(nb, dtype=np.float32) / np.float32(8 * np.sqrt(shape[1]))).astype("<f2")
        a[:, o:o + 2] = h.view(np.uint8).reshape(nb, 2)
    return a.tobytes()


def tensor_bytes(rng, shape, t):
    if t in BLOCK_BY_ID:
        return block_bytes(rng, shape, t)
    if t == mg.GGML_F32:  # a norm weight
        return (1.0 + 0.1 * rng.standard_normal(shape[0], dtype=np.float32)).astype("<f4").tobytes()
    a = rng.standard_normal(shape, dtype=np.float32)
    a *= np.float32(1.0 / np.sqrt(shape[1]))
    return a.astype("<f2").tobytes()


def write(name, path, seed, wt=mg.GGML_F16):
    g = GEOMETRIES[name]
    tensors = tensor_list(g, wt)
    rng = np.random.default_rng(seed)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header(name, g, tensors))
        for _, shape, t in tensors:
            raw = tensor_bytes(rng, shape, t)
            f.write(raw + b"\0" * (padded(len(raw)) - len(raw)))
    os.replace(tmp, path)


def main(argv):
    if len(argv) < 3 or argv[1] not in GEOMETRIES:
        print(__doc__, file=sys.stderr)
        print("geometries: " + " ".join(GEOMETRIES), file=sys.stderr)
        return 2
    opts = dict(zip(argv[3::2], argv[4::2]))
    if set(opts) - {"--seed", "--type"} or opts.get("--type", "q4_0") not in BLOCK_TYPES:
        print(__doc__, file=sys.stderr)
        print("types: " + " ".join(BLOCK_TYPES), file=sys.stderr)
        return 2
    wt = BLOCK_TYPES[opts["--type"]][0] if "--type" in opts else mg.GGML_F16
    write(argv[1], argv[2], int(opts.get("--seed", 1)), wt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
