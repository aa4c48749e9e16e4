#!/usr/bin/python3
"""Train the SentencePiece BPE tokenizer of seqkv's default model.

Settings chosen so that llama.cpp's SPM tokenizer (and seqkv's, which follows
it) reproduces SentencePiece's encoding exactly:
  - model_type=bpe: encoding repeatedly merges the adjacent pair whose merged
    piece has the highest score, which is what llama.cpp does from the GGUF
    scores (a unigram model would need Viterbi instead).
  - normalization_rule_name=identity and remove_extra_whitespaces=false: the
    input bytes are used as they are (no NFKC, no whitespace collapsing);
    llama.cpp does neither.
  - add_dummy_prefix=true: one "\u2581" is put in front of the text, as
    llama.cpp does for SPM vocabularies; every space becomes "\u2581".
  - byte_fallback=true: a character without a piece becomes its UTF-8 bytes
    as <0xXX> pieces (e.g. "\\n" -> <0x0A>).
  - unk=0, bos=1, eos=2 as in Llama; no pad piece.
Determinism: all input sentences are used (no sampling), one trainer thread,
fixed random seed.

Usage: train_tokenizer.py [--work DIR] [--vocab N]
Writes DIR/tokenizer.model and DIR/tokenizer.vocab.
"""
import argparse
import os

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))


def train_spm(work, vocab, input_path=None):
    """Trains WORK/tokenizer.model (and .vocab) on input_path (default
    WORK/spm_train.txt, one sentence per line) with the settings above."""
    spm.set_random_generator_seed(1234)
    prefix = os.path.join(work, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=input_path or os.path.join(work, "spm_train.txt"),
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=vocab,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=True,
        split_by_whitespace=True,
        max_sentencepiece_length=16,
        max_sentence_length=16384,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    assert sp.get_piece_size() == vocab
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2)
    return sp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    prefix = os.path.join(args.work, "tokenizer")
    sp = train_spm(args.work, args.vocab)
    print("train_tokenizer: %s.model, vocab %d" % (prefix, sp.get_piece_size()))


if __name__ == "__main__":
    main()
