#!/usr/bin/python3
"""Evaluate the exported model and write the engine's reference data.

Everything here is computed from the EXPORTED GGUF (F16 weights upcast
exactly), with the PyTorch model of model.py run in float64 (RoPE tables in
float64 too), so the numbers are what an exact engine would produce; seqkv's
float32 engine should agree to float32 rounding.

Outputs (tests/data/model_ref/ unless --ref-dir):
  logits.bin     u32 n_tokens, u32 n_vocab, i32 tokens[n_tokens],
                 f32 logits[n_tokens][n_vocab]   (all little-endian)
                 tokens = BOS + the first 31 tokens of the held-out text
                 (Ruth 1:1...), logits[i] = the model's output at position i.
  heldout_nll.bin  u32 n_tokens, u32 n_vocab, i32 tokens[n_tokens],
                 f32 logprob[n_tokens-1]: the first chunk of the perplexity
                 protocol (1024 tokens, BOS first); logprob[i] = natural-log
                 probability of tokens[i+1] at position i (long-context check).
  heldout.txt    the held-out text (what tools/train/prepare_data.py writes).
  tokenizer_cases.tsv  SentencePiece ids (no BOS) of test strings:
                 <hex of the UTF-8 bytes> TAB <ids separated by spaces>
  greedy.txt     a prompt's ids and its greedy continuation (float64 argmax).
  expected.txt   key value lines: perplexity (llama.cpp protocol) etc.

Evaluation protocols (held-out text tokenized whole, as seqkv/llama.cpp do):
  perplexity  llama.cpp's: tokens = [BOS] + ids; n_chunk = len // n_ctx
              non-overlapping windows of n_ctx = 1024 tokens, the first token
              of each window replaced by BOS, only positions n_ctx/2 ..
              n_ctx-2 scored (each predicting the next token of the window):
              511 tokens per chunk.  ppl = exp(mean NLL).
  sequential  every held-out token coded exactly once: the ids are cut into
              consecutive segments of n_ctx tokens; a segment s is evaluated
              as the window [BOS] + s[:-1], position i predicting s[i]; mean
              NLL in bits/token and bits/byte of text.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from export_gguf import model_from_gguf  # noqa: E402

BOS = 1
TOKENIZER_CASES = [
    "In the beginning God created the heaven and the earth.",
    "And Ruth said, Intreat me not to leave thee",
    "",
    " ",
    "  two leading spaces",
    "trailing spaces  ",
    "a  b   c",
    "line one\nline two\n",
    "\n\nAnd",
    "Hello, World! 1234567890",
    "tab\tseparated",
    "na\u00efve caf\u00e9 \u2014 \u201cquoted\u201d \u65e5\u672c\u8a9e \U0001F600",
    "Nebuchadnezzar Mahershalalhashbaz Jehoshaphat",
    "THE LORD IS MY SHEPHERD; I SHALL NOT WANT.",
    "https://example.org/a_b?c=d&e=f",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\u2581already a meta space",
    "<s> </s> <unk> <0x41>",
]


@torch.no_grad()
def logits_of(model, tokens):
    return model(torch.tensor([tokens], dtype=torch.long))[0]


@torch.no_grad()
def perplexity(model, ids, n_ctx):
    tokens = [BOS] + ids
    n_chunk = len(tokens) // n_ctx
    first = n_ctx // 2
    nll_sum, count, chunk_ppl = 0.0, 0, []
    for c in range(n_chunk):
        win = tokens[c * n_ctx:(c + 1) * n_ctx]
        win[0] = BOS
        lp = torch.log_softmax(logits_of(model, win), dim=-1)
        tgt = torch.tensor(win[first + 1:n_ctx])
        nll = -lp[first:n_ctx - 1].gather(1, tgt[:, None]).sum().item()
        nll_sum += nll
        count += len(tgt)
        chunk_ppl.append(math.exp(nll / len(tgt)))
    return math.exp(nll_sum / count), n_chunk, count, chunk_ppl


@torch.no_grad()
def sequential(model, ids, n_ctx):
    seg = n_ctx
    nll_sum = 0.0
    for s in range(0, len(ids), seg):
        part = ids[s:s + seg]
        x = [BOS] + part[:-1]
        lp = torch.log_softmax(logits_of(model, x), dim=-1)
        nll_sum -= lp.gather(1, torch.tensor(part)[:, None]).sum().item()
    return nll_sum


@torch.no_grad()
def greedy(model, prompt, n_new):
    toks = list(prompt)
    for _ in range(n_new):
        toks.append(int(torch.argmax(logits_of(model, toks)[-1]).item()))
    return toks[len(prompt):]


def write_bin(path, tokens, n_vocab, floats):
    with open(path, "wb") as f:
        f.write(struct.pack("<II", len(tokens), n_vocab))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(np.asarray(floats, dtype="<f4").tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-4m.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "kjv-4m-tokenizer.model"))
    ap.add_argument("--ref-dir", default=os.path.join(ROOT, "tests", "data", "model_ref"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    cfg, model, reader = model_from_gguf(args.model, torch.float64)
    assert reader.meta["tokenizer.ggml.tokens"] == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    os.makedirs(args.ref_dir, exist_ok=True)
    with open(os.path.join(args.work, "heldout.txt"), encoding="ascii") as f:
        held_text = f.read()
    with open(os.path.join(args.ref_dir, "heldout.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write(held_text)
    ids = sp.encode(held_text)
    n_ctx = cfg.max_seq_len
    V = cfg.vocab_size

    # 1. short logits reference
    toks = [BOS] + ids[:31]
    lg = logits_of(model, toks).numpy()
    write_bin(os.path.join(args.ref_dir, "logits.bin"), toks, V, lg)

    # 2. long-context per-position log-probabilities (first perplexity chunk)
    win = ([BOS] + ids)[:n_ctx]
    win[0] = BOS
    lp = torch.log_softmax(logits_of(model, win), dim=-1)
    tlp = lp[:-1].gather(1, torch.tensor(win[1:])[:, None])[:, 0].numpy()
    write_bin(os.path.join(args.ref_dir, "heldout_nll.bin"), win, V, tlp)

    # 3. tokenizer cases
    with open(os.path.join(args.ref_dir, "tokenizer_cases.tsv"), "w", encoding="ascii", newline="\n") as f:
        f.write("# SentencePiece ids (no BOS) of each string: <hex of UTF-8 bytes>\\t<ids>\n")
        for s in TOKENIZER_CASES + [held_text.split("\n")[0][:300]]:
            f.write("%s\t%s\n" % (s.encode("utf-8").hex(), " ".join(map(str, sp.encode(s)))))

    # 4. greedy continuation
    prompt_text = "In the beginning"
    prompt = [BOS] + sp.encode(prompt_text)
    cont = greedy(model, prompt, 64)
    with open(os.path.join(args.ref_dir, "greedy.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("prompt_text %s\n" % prompt_text)
        f.write("prompt_ids %s\n" % " ".join(map(str, prompt)))
        f.write("greedy_ids %s\n" % " ".join(map(str, cont)))
        f.write("greedy_text %s\n" % sp.decode(cont).replace("\n", "\\n"))

    # 5. evaluation
    ppl, n_chunk, n_scored, chunk_ppl = perplexity(model, ids, n_ctx)
    seq_nll = sequential(model, ids, n_ctx)
    n_bytes = len(held_text.encode("utf-8"))
    res = {
        "heldout_bytes": n_bytes, "heldout_tokens": len(ids),
        "ppl_ctx": n_ctx, "ppl_chunks": n_chunk, "ppl_scored_tokens": n_scored,
        "ppl": ppl, "ppl_chunk1": chunk_ppl[0] if chunk_ppl else float("nan"),
        "ppl_nll_nats": math.log(ppl),
        "seq_bits_per_token": seq_nll / math.log(2) / len(ids),
        "seq_bits_per_byte": seq_nll / math.log(2) / n_bytes,
        "seq_nats_per_token": seq_nll / len(ids),
    }
    with open(os.path.join(args.ref_dir, "expected.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write("# held-out evaluation of models/kjv-4m.gguf (PyTorch, float64; see tools/train/make_ref.py)\n")
        for k, v in res.items():
            f.write("%s %s\n" % (k, ("%.6f" % v) if isinstance(v, float) else v))
    with open(os.path.join(args.work, "eval.json"), "w") as f:
        json.dump(dict(res, chunk_ppl=chunk_ppl, greedy_text=sp.decode(cont)), f, indent=1)
    print(json.dumps(res, indent=1))
    print("greedy:", sp.decode(prompt[1:] + cont))


if __name__ == "__main__":
    main()
