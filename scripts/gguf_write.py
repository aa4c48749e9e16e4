#!/usr/bin/python3
"""Writes the tiny random-weight GGUF fixtures of tests/data/arch/ (numpy only).

One file per row of the architecture table (src/engine/arch.c), with the tensor names,
shapes and metadata keys of the real files of that family, and small dimensions: a few
layers, n_embd 64, a 300-token SentencePiece vocabulary (tests/ref/make_gguf.py's, whose
GGUF writer this reuses). Weights ~ N(0, 1/K), norms ~ 1 + N(0, 0.1^2), all F32 (F16 would make llama.cpp round
activations to f16 in its matmuls, blurring the comparison);
every fixture comes from a fixed seed, so rerunning rewrites the same bytes.

    /usr/bin/python3 scripts/gguf_write.py [--tiny] OUTDIR [ARCH...]     (default: all)

--tiny writes ARCH_tiny.gguf seeds for fuzz/corpus/model/ instead (a few KB: n_embd 8,
head_dim 4, 2 query heads, 260 tokens, F16 matrices; no .tokens file).

Beside each ARCH.gguf it writes ARCH.tokens: N_TOKENS little-endian int32 ids (fixed
seed), the input whose logits scripts/oracle/arch_logits.sh records with llama.cpp.
What each fixture exercises is in docs/architectures.md ("Fixtures").
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
sys.dont_write_bytecode = True
import make_gguf as mg  # noqa: E402  (the project's GGUF writer and vocabulary)

N_VOCAB, N_TOKENS = 300, 100
TINY = False  # --tiny: fuzz seeds


class Model:
    """A GGUF under construction: metadata under the arch prefix, random tensors."""

    def __init__(self, arch, seed, n_layer, n_head, n_head_kv, head_dim, n_embd=64, n_ff=64):
        if TINY:
            n_head_kv, n_head, head_dim = (2 if n_head_kv == n_head else 1), 2, head_dim // 4
            n_embd, n_ff = 8, 8
        self.n_vocab = 260 if TINY else N_VOCAB
        self.arch, self.rng, self.w = arch, np.random.default_rng(seed), mg.GGUFWriter()
        self.n_layer, self.n_embd, self.n_ff = n_layer, n_embd, n_ff
        self.q, self.kv, self.hd = n_head * head_dim, n_head_kv * head_dim, head_dim
        w = self.w
        w.add("general.architecture", mg.STRING, arch)
        w.add("general.name", mg.STRING, "seqkv fixture")  # not "phi3": llama.cpp keys on the name
        w.add("general.alignment", mg.U32, 32)
        self.u32("context_length", 512)
        self.u32("embedding_length", n_embd)
        self.u32("block_count", n_layer)
        self.u32("feed_forward_length", n_ff)
        self.u32("attention.head_count", n_head)
        self.u32("attention.head_count_kv", n_head_kv)
        self.f32("attention.layer_norm_rms_epsilon", 1e-6)
        if head_dim * n_head != n_embd:
            self.u32("attention.key_length", head_dim)
            self.u32("attention.value_length", head_dim)
        toks, scores, types = mg.spm_vocab(self.n_vocab)
        w.add("tokenizer.ggml.model", mg.STRING, "llama")
        w.add("tokenizer.ggml.tokens", mg.ARRAY, toks, mg.STRING)
        w.add("tokenizer.ggml.scores", mg.ARRAY, scores, mg.F32)
        w.add("tokenizer.ggml.token_type", mg.ARRAY, types, mg.I32)
        w.add("tokenizer.ggml.bos_token_id", mg.U32, 1)
        w.add("tokenizer.ggml.eos_token_id", mg.U32, 2)
        w.add("tokenizer.ggml.unknown_token_id", mg.U32, 0)

    def u32(self, key, v):
        self.w.add(self.arch + "." + key, mg.U32, v)

    def f32(self, key, v):
        self.w.add(self.arch + "." + key, mg.F32, v)

    def str(self, key, v):
        self.w.add(self.arch + "." + key, mg.STRING, v)

    def mat(self, name, n_out, k_in, scale=1.0):
        a = scale * self.rng.standard_normal((n_out, k_in)) / np.sqrt(k_in)
        self.w.add_tensor(name, a, mg.GGML_F16 if TINY else mg.GGML_F32)

    def vec(self, name, n, mean=1.0, sd=0.1):
        self.w.add_tensor(name, mean + sd * self.rng.standard_normal(n), mg.GGML_F32)

    def embeddings(self, tied):
        # sd 0.25: logits of sd ~2 (tied), a softmax neither flat nor one-hot
        self.w.add_tensor("token_embd.weight", 0.25 * self.rng.standard_normal((self.n_vocab, self.n_embd)),
                          mg.GGML_F16 if TINY else mg.GGML_F32)
        self.vec("output_norm.weight", self.n_embd)
        if not tied:
            self.mat("output.weight", self.n_vocab, self.n_embd)

    def layers(self, extra=(), fused=False):
        """The per-layer tensors; extra: (name, length, mean, sd) vectors after each layer's."""
        D, F = self.n_embd, self.n_ff
        for l in range(self.n_layer):
            b = "blk.%d." % l
            self.vec(b + "attn_norm.weight", D)
            if fused:
                self.mat(b + "attn_qkv.weight", self.q + 2 * self.kv, D)
            else:
                self.mat(b + "attn_q.weight", self.q, D)
                self.mat(b + "attn_k.weight", self.kv, D)
                self.mat(b + "attn_v.weight", self.kv, D)
            self.mat(b + "attn_output.weight", D, self.q)
            self.vec(b + "ffn_norm.weight", D)
            if fused:
                self.mat(b + "ffn_up.weight", 2 * F, D)
            else:
                self.mat(b + "ffn_gate.weight", F, D)
                self.mat(b + "ffn_up.weight", F, D)
            self.mat(b + "ffn_down.weight", D, F)
            for name, n, mean, sd in extra:
                self.vec(b + name, n, mean, sd)


def llama():
    """Llama 3.x / Mistral / SmolLM shapes: GQA 4/2, rope_freqs factors, tied output."""
    m = Model("llama", 11, n_layer=3, n_head=4, n_head_kv=2, head_dim=16)
    m.f32("rope.freq_base", 500000.0)
    m.u32("rope.dimension_count", m.hd)
    m.str("rope.scaling.type", "none")
    m.u32("vocab_size", m.n_vocab)
    m.embeddings(tied=True)
    m.w.add_tensor("rope_freqs.weight", 1.0 + 3.0 * m.rng.random(m.hd // 2), mg.GGML_F32)
    m.layers()
    return m


def qwen2():
    """Q/K/V biases, NEOX RoPE with base 1e6, untied output."""
    m = Model("qwen2", 12, n_layer=3, n_head=4, n_head_kv=2, head_dim=16)
    m.f32("rope.freq_base", 1000000.0)
    m.embeddings(tied=False)
    m.layers([("attn_q.bias", m.q, 0.0, 0.5), ("attn_k.bias", m.kv, 0.0, 0.5), ("attn_v.bias", m.kv, 0.0, 0.5)])
    return m


def qwen3():
    """Per-head Q/K RMSNorm before RoPE; key_length 32 != n_embd / n_head."""
    m = Model("qwen3", 13, n_layer=3, n_head=4, n_head_kv=2, head_dim=32)
    m.f32("rope.freq_base", 1000000.0)
    m.embeddings(tied=True)
    m.layers([("attn_q_norm.weight", m.hd, 1.0, 0.1), ("attn_k_norm.weight", m.hd, 1.0, 0.1)])
    return m


def phi3():
    """Fused attn_qkv and gate|up ffn_up, NEOX RoPE, short/long factors, attn_factor."""
    m = Model("phi3", 14, n_layer=3, n_head=4, n_head_kv=4, head_dim=16)
    m.f32("rope.freq_base", 10000.0)
    m.u32("rope.dimension_count", m.hd)
    m.u32("rope.scaling.original_context_length", 4096)  # >= the oracle's context: short factors
    m.f32("rope.scaling.attn_factor", 1.1902380714238083)
    m.embeddings(tied=False)
    m.w.add_tensor("rope_factors_short.weight", 1.0 + m.rng.random(m.hd // 2), mg.GGML_F32)
    m.w.add_tensor("rope_factors_long.weight", 4.0 + 10.0 * m.rng.random(m.hd // 2), mg.GGML_F32)
    m.layers(fused=True)
    return m


def gemma_post_norms(m, qk):
    """gemma's extra per-layer vectors: post-norms, then (gemma3) the Q/K norms."""
    v = [("post_attention_norm.weight", m.n_embd, 1.0, 0.1), ("post_ffw_norm.weight", m.n_embd, 1.0, 0.1)]
    return v + ([("attn_q_norm.weight", m.hd, 1.0, 0.1), ("attn_k_norm.weight", m.hd, 1.0, 0.1)] if qk else [])


def gemma2():
    """Embedding scale, post-norms, GELU, attention and final soft-capping (small caps so
    they bite), sliding window 8 on even layers (the default pattern 2)."""
    m = Model("gemma2", 15, n_layer=4, n_head=4, n_head_kv=2, head_dim=32)
    m.f32("rope.freq_base", 10000.0)
    m.f32("attn_logit_softcapping", 1.5)
    m.f32("final_logit_softcapping", 6.0)
    m.u32("attention.sliding_window", 8)
    m.embeddings(tied=True)  # llama.cpp's gemma2 always reads token_embd as the output
    m.layers(gemma_post_norms(m, qk=False))
    return m


def gemma3():
    """Q/K norms, window 8 on 5 of 6 layers (the default pattern 6) with their own RoPE
    base 10000, global layers at base 1e6 with linear scaling 8."""
    m = Model("gemma3", 16, n_layer=6, n_head=4, n_head_kv=2, head_dim=16)
    m.f32("rope.freq_base", 1000000.0)
    m.str("rope.scaling.type", "linear")
    m.f32("rope.scaling.factor", 8.0)
    m.u32("attention.sliding_window", 8)
    m.embeddings(tied=True)
    m.layers(gemma_post_norms(m, qk=True))
    return m


BUILDERS = {f.__name__: f for f in (llama, qwen2, qwen3, phi3, gemma2, gemma3)}


def tokens(arch):
    """BOS, then ids from a seed of the architecture's name."""
    rng = np.random.default_rng(sum(arch.encode()))
    return np.concatenate([[1], rng.integers(3, N_VOCAB, N_TOKENS - 1)]).astype("<i4")


def main(argv):
    global TINY
    if len(argv) > 1 and argv[1] == "--tiny":
        TINY, argv = True, argv[1:]
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__)
        return 2
    names = argv[2:] or list(BUILDERS)
    for a in names:
        if a not in BUILDERS:
            print("gguf_write: unknown architecture %s (%s)" % (a, ", ".join(BUILDERS)), file=sys.stderr)
            return 2
        if TINY:
            BUILDERS[a]().w.write(os.path.join(argv[1], a + "_tiny"))
            continue
        BUILDERS[a]().w.write(os.path.join(argv[1], a + ".gguf"))
        tokens(a).tofile(os.path.join(argv[1], a + ".tokens"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
