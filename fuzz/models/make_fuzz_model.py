#!/usr/bin/python3
"""Writes fuzz/models/tiny.gguf, the model the http, store and session fuzz targets run.

Those targets fuzz what surrounds the model (the request path, the store's records, the
.skv reader and its two decoders), and every input runs the model: prefills, decodes,
digests, restores, verified gets. With a real model the forward was most of their time, so
they run this one: a Llama of 2 layers, n_embd 16, 2 query heads sharing 1 KV head
(GQA) of head_dim 8, n_ff 16, the 300-token SentencePiece vocabulary of tests/ref/make_gguf.py,
128 positions, f32 weights from a fixed seed (rerunning writes the same bytes). Real weights
are fuzzed elsewhere: fuzz_model (every weight type, real architectures' fixtures) and
tests/ with the bundled model.

    /usr/bin/python3 fuzz/models/make_fuzz_model.py [OUT]    (default fuzz/models/tiny.gguf)

The corpora tied to this model's fingerprint (fuzz/corpus/session's tiny_* seeds, the
store's records) are written by fuzz/models/make_seeds.sh.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "ref"))
sys.dont_write_bytecode = True
import make_gguf as mg  # noqa: E402  (the project's GGUF writer and vocabulary)


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join(HERE, "tiny.gguf")
    w = mg.llama_gguf(n_embd=16, n_layer=2, n_head=2, n_head_kv=1, head_dim=8, n_ff=16, n_vocab=300,
                      n_ctx=128, tied=True, seed=7)
    w.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
