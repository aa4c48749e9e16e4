#!/usr/bin/python3
"""Llama-architecture model, computed exactly as llama.cpp's LLM_ARCH_LLAMA graph.

Per layer (x is the residual stream, one row per position):
    h  = x + Wo . Attn(RoPE(Wq . n), RoPE(Wk . n), Wv . n),   n = RMSNorm(x) * attn_norm
    x' = h + W2 . (silu(W1 . m) * (W3 . m)),                   m = RMSNorm(h) * ffn_norm
then logits = Wout . (RMSNorm(x_L) * output_norm), with Wout = token embedding
matrix when the output is tied.

  RMSNorm(v) = v / sqrt(mean(v^2) + eps), eps = 1e-5, then an elementwise weight.
  RoPE: llama.cpp's "normal" mode (as llama2.c run.c): within each head of
    head_dim, the ADJACENT pair (v[2i], v[2i+1]) is rotated by the angle
    pos * base^(-2i/head_dim), i = 0 .. head_dim/2-1, base 10000, pos = 0,1,...
      v'[2i]   = v[2i] cos - v[2i+1] sin
      v'[2i+1] = v[2i] sin + v[2i+1] cos
    Because this model is trained with adjacent pairs, the exported Wq/Wk need
    no permutation (HF-converted Llama checkpoints need one only because HF
    rotates the halves (v[i], v[i+head_dim/2]) instead).
  Attention: causal softmax of q.k / sqrt(head_dim); grouped-query attention,
    query head h uses KV head h // (n_heads / n_kv_heads).
  No biases anywhere.

Linear weights have PyTorch's (out, in) shape; GGUF stores them row-major as is
with ne = [in, out].
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTN_BLOCK = 256  # query block size of the causal attention loop
# PyTorch >= 2.0 has a fused (flash) causal attention; on CUDA the model uses it
# (same mathematics; used for training speed only, never for the references).
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
SDPA = "auto"   # "auto": on CUDA when PyTorch has it; True / False force it (tests)


@dataclass
class Config:
    vocab_size: int = 4096
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 768       # SwiGLU inner width (feed_forward_length)
    max_seq_len: int = 1024     # trained context length
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tied: bool = True

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        ms = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


def rope_tables(cfg, seq_len, dtype=torch.float32, device=None):
    """cos/sin tables of shape (seq_len, head_dim/2), computed in float64."""
    hd = cfg.head_dim
    i = torch.arange(0, hd // 2, dtype=torch.float64)
    inv_freq = cfg.rope_base ** (-2.0 * i / hd)
    pos = torch.arange(seq_len, dtype=torch.float64)
    ang = pos[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(dtype=dtype, device=device), torch.sin(ang).to(dtype=dtype, device=device)


def apply_rope(x, cos, sin):
    """x: (B, H, T, head_dim); rotates adjacent pairs (x[2i], x[2i+1])."""
    xe = x[..., 0::2]
    xo = x[..., 1::2]
    c = cos[None, None, :x.shape[2], :]
    s = sin[None, None, :x.shape[2], :]
    re = xe * c - xo * s
    ro = xe * s + xo * c
    return torch.stack((re, ro), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        cfg = self.cfg
        hd = cfg.head_dim
        kvh = cfg.n_kv_heads
        rep = cfg.n_heads // kvh
        # The 1/sqrt(head_dim) scale is applied to q (same product, cheaper).
        q = self.wq(x).view(B, T, cfg.n_heads, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, kvh, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, kvh, hd).transpose(1, 2)
        if (HAS_SDPA and x.is_cuda) if SDPA == "auto" else SDPA:
            # Query head h uses KV head h // rep: repeat each KV head rep times.
            # RoPE with float32 tables promotes to float32: back to v's dtype
            # (bf16 under autocast) so that the flash kernel applies.
            k = apply_rope(k, cos, sin).to(v.dtype).repeat_interleave(rep, dim=1)
            q = apply_rope(q, cos, sin).to(v.dtype)
            y = F.scaled_dot_product_attention(q, k, v.repeat_interleave(rep, dim=1), is_causal=True)
            return self.wo(y.transpose(1, 2).reshape(B, T, cfg.n_heads * hd))
        q = apply_rope(q, cos, sin) * (1.0 / math.sqrt(hd))
        k = apply_rope(k, cos, sin)
        # GQA without copying K/V: query heads h = g*rep .. g*rep+rep-1 share
        # KV head g, so group them as (B, kvh, rep, T, hd).
        q = q.reshape(B, kvh, rep, T, hd)
        kt = k.transpose(-2, -1).unsqueeze(2)          # (B, kvh, 1, hd, T)
        v = v.unsqueeze(2)                               # (B, kvh, 1, T, hd)
        # Causal attention in query blocks: block [a, b) only needs keys [0, b),
        # which skips most of the masked upper triangle.  Identical results:
        # masked scores are -inf and contribute exactly 0 either way.
        outs = []
        blk = ATTN_BLOCK if T > ATTN_BLOCK else T
        for a in range(0, T, blk):
            b = min(T, a + blk)
            att = torch.matmul(q[:, :, :, a:b], kt[..., :b])   # (B, kvh, rep, b-a, b)
            att = att.masked_fill(mask[a:b, :b], float("-inf"))
            att = F.softmax(att, dim=-1)
            outs.append(torch.matmul(att, v[:, :, :, :b]))     # (B, kvh, rep, b-a, hd)
        y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=3)
        y = y.reshape(B, cfg.n_heads, T, hd).transpose(1, 2).reshape(B, T, cfg.n_heads * hd)
        return self.wo(y)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)  # ffn_gate
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)  # ffn_down
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)  # ffn_up

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.dim % cfg.n_heads == 0 and cfg.n_heads % cfg.n_kv_heads == 0
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = None if cfg.tied else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg, cfg.max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        mask = torch.triu(torch.ones(cfg.max_seq_len, cfg.max_seq_len, dtype=torch.bool), 1)
        self.register_buffer("causal_mask", mask, persistent=False)
        self._init_weights()

    def _init_weights(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std
                if name.endswith("wo.weight") or name.endswith("w2.weight"):
                    s = std / math.sqrt(2 * self.cfg.n_layers)
                nn.init.normal_(p, mean=0.0, std=s)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin, self.causal_mask)
        x = self.norm(x)
        w = self.tok_embeddings.weight if self.output is None else self.output.weight
        return F.linear(x, w)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())
