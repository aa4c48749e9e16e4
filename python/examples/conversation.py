#!/usr/bin/python3
"""Compress a conversation's KV cache into a few hundred bytes, restore it bit-exactly,
and continue the conversation from the restored cache.

    PYTHONPATH=build/python python3 python/examples/conversation.py [MODEL]

(default model: the bundled models/kjv-4m.gguf). Prints the sizes and checks that the
restored context gives the same next-token logits as the original one.
"""
import os
import sys

import numpy as np

import seqkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "kjv-4m.gguf")
TURNS = [
    "And Moses said unto God, Behold, when I come unto the children of Israel,",
    " and shall say unto them, The God of your fathers hath sent me unto you;",
    " and they shall say to me, What is his name? what shall I say unto them?",
]


def greedy(ctx, logits, n):
    """n tokens, greedily, continuing ctx from logits."""
    out = []
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        logits = ctx.decode(tok)
    return out


with seqkv.Model(MODEL) as model:
    text = "".join(TURNS)
    tokens = model.tokenize(text)
    with seqkv.Context(model) as live:
        logits = live.prefill(tokens)          # the conversation so far, as an engine would hold it
        kv_bytes = live.kv().astype(np.float16).nbytes
        data = seqkv.compress(model, tokens, "model")
        print("%d tokens: KV as f16 %d bytes, .skv (codec model) %d bytes (%.0fx smaller)" %
              (len(tokens), kv_bytes, len(data), kv_bytes / len(data)))
        with seqkv.restore(model, data) as ctx:  # digest-verified: the same KV, bit for bit
            assert ctx.digest() == live.digest()
            assert model.detokenize(ctx.tokens) == text
            # a restore holds the KV, not the last logits: re-run the last position for them
            ctx.truncate(len(tokens) - 1)
            again = ctx.decode(int(tokens[-1]))
            assert np.array_equal(again, logits)
            a = greedy(live, logits, 12)
            b = greedy(ctx, again, 12)
            assert a == b
            print("continued from the restored cache:", repr(model.detokenize(a)))
    for codec in ("tokens", "cm", "tq3", "pred"):
        print("codec %-6s %5d bytes  (%s)" % (codec, len(seqkv.compress(model, tokens, codec)),
                                              seqkv.inspect(seqkv.compress(model, tokens, codec))["codec_help"]))
print("conversation: OK")
