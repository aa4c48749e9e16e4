"""Models split over several GGUF files (llama.cpp's gguf-split; issue 48): opened from the
first shard, the same model as the whole file, and every way a split can be broken refused
with an error that says what to do.

The shards are written by tests/ref/gguf_split.py (llama.cpp's layout: every metadata entry
in the first shard, split.no / split.count / split.tensors.count in each, tensor offsets per
shard's own data section) from the shared stories260K.

- same_bits: split in 2, 3 and 5 (and with gguf-split's --no-tensor-first-split layout,
  a first shard that holds only metadata), `seqkv kv-dump --logits` of a text through the
  first shard is byte for byte the whole file's (the dump carries the model's fingerprint,
  so the fingerprint is the same too).
- serve_split: `seqkv serve -m FIRST-SHARD` answers a greedy /completion with the whole
  file's text, and /props names the model.
- broken_splits: a later shard given as the model, a missing shard, a renamed first shard,
  a shard numbered wrongly, a count that disagrees, a split.tensors.count that disagrees,
  a tensor in two shards: each a clean error naming the problem, never a load.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import gguf_split  # noqa: E402
import testenv  # noqa: E402
from clitest import SEQKV, Reporter, check  # noqa: E402
from harness import Server  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")
TEXT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def dump(tmp, model, tag):
    """(KV dump bytes, logits bytes) of TEXT through model."""
    txt, kv, lg = os.path.join(tmp, "text.txt"), os.path.join(tmp, tag + ".kv"), os.path.join(tmp, tag + ".f32")
    with open(txt, "w") as f:
        f.write(TEXT)
    p = subprocess.run([SEQKV, "kv-dump", "-q", "-m", model, "-f", txt, "-o", kv, "--logits", lg],
                       capture_output=True, timeout=120)
    check(p.returncode == 0, "%s: kv-dump exited %d: %s" % (tag, p.returncode, p.stderr.decode()[-300:]))
    with open(kv, "rb") as f, open(lg, "rb") as g:
        return f.read(), g.read()


def load_error(model):
    """The stderr of a kv-dump through model, which must fail."""
    p = subprocess.run([SEQKV, "kv-dump", "-q", "-m", model, "-f", "/dev/null", "-o", "/dev/null"],
                       capture_output=True, timeout=60)
    check(p.returncode != 0, "%s loaded" % model)
    return p.stderr.decode()


def fresh(tmp, name):
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return os.path.join(d, "stories")


def same_bits(tmp):
    whole = dump(tmp, MODEL, "whole")
    tensors = gguf_split.read(MODEL)[3]

    def meta_first(i, kvs, part):
        """gguf-split --no-tensor-first-split: shard 1 only metadata, its tensors in shard 2."""
        return kvs, [] if i == 0 else (tensors[:len(tensors) // 3] + part if i == 1 else part)

    for n, edit, label in ((2, None, "2"), (3, None, "3"), (5, None, "5"), (3, meta_first, "3-meta-first")):
        paths = gguf_split.split(MODEL, fresh(tmp, "s" + label), n, edit)
        check(len(paths) == n and all(os.path.getsize(p) < os.path.getsize(MODEL) for p in paths),
              "%s: the shards are not parts of the file" % label)
        check(dump(tmp, paths[0], "split" + label) == whole, "split in %s: not the whole file's KV and logits" % label)


def serve_split(tmp):
    paths = gguf_split.split(MODEL, fresh(tmp, "serve"), 3)
    body = {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0}
    texts = []
    for m in (MODEL, paths[0]):
        s = Server("-m", m, log=os.path.join(tmp, "serve.log"))
        try:
            code, r = s.json("/completion", body)
            check(code == 200 and r["tokens_predicted"] == 24, "%s: %d %s" % (m, code, r))
            texts.append(r["content"])
            code, p = s.json("/props")
            check(code == 200 and os.path.basename(m) in json.dumps(p), "/props does not name %s" % m)
        finally:
            s.stop()
    check(texts[0] == texts[1], "the split model's text differs: %r vs %r" % tuple(texts))


def broken_splits(tmp):
    def kv_set(key, fmt, t, value):
        def edit(kvs):
            return [(k, t, struct.pack(fmt, value)) if k == key else (k, kt, raw) for k, kt, raw in kvs]
        return edit

    paths = gguf_split.split(MODEL, fresh(tmp, "b1"), 3)
    e = load_error(paths[1])
    check("shard 2 of 3" in e and "-00001-of-00003.gguf" in e, "a later shard: %s" % e)
    renamed = os.path.join(os.path.dirname(paths[0]), "model.gguf")
    shutil.copy(paths[0], renamed)
    e = load_error(renamed)
    check("does not end in -00001-of-00003.gguf" in e, "a renamed first shard: %s" % e)
    os.unlink(paths[2])
    e = load_error(paths[0])
    check("shard 3 of 3" in e and "cannot open" in e, "a missing shard: %s" % e)

    cases = (
        ("numbered wrongly", {2: kv_set(b"split.no", "<H", gguf_split.T_U16, 1)}, "says it is shard 2 of 3, not 3 of 3"),
        ("count disagrees", {1: kv_set(b"split.count", "<H", gguf_split.T_U16, 4)}, "says it is shard 2 of 4"),
        ("tensor count", {0: kv_set(b"split.tensors.count", "<i", gguf_split.T_I32, 7)}, "split.tensors.count says 7"),
        ("no out of range", {1: kv_set(b"split.no", "<H", gguf_split.T_U16, 9)}, "not a shard number"),
    )
    for label, kv_edits, want in cases:
        def edit(i, kvs, part, kv_edits=kv_edits):
            return (kv_edits[i](kvs) if i in kv_edits else kvs), part
        paths = gguf_split.split(MODEL, fresh(tmp, "b-" + label.replace(" ", "-")), 3, edit)
        e = load_error(paths[0])
        check(want in e, "%s: %s" % (label, e))

    # a tensor in two shards (the first shard's first tensor again in the third)
    tensors = gguf_split.read(MODEL)[3]
    dup = lambda i, kvs, part: (kvs, part + [tensors[0]] if i == 2 else part)  # noqa: E731
    fix_count = kv_set(b"split.tensors.count", "<i", gguf_split.T_I32, len(tensors) + 1)
    paths = gguf_split.split(MODEL, fresh(tmp, "b-dup"), 3,
                             lambda i, kvs, part: dup(i, fix_count(kvs), part))
    e = load_error(paths[0])
    check("duplicate tensor name" in e, "a tensor in two shards: %s" % e)


def main():
    cases = [same_bits, serve_split, broken_splits]
    return testenv.run_stories_cases(Reporter("test_gguf_split"), cases, MODEL, "skv-split-")


if __name__ == "__main__":
    sys.exit(main())
