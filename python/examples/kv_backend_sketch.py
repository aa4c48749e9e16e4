#!/usr/bin/python3
"""SKETCH -- NOT TESTED AGAINST LMCACHE OR SGLANG (neither can be installed here).

A KV storage backend in the shape LMCache's storage backends and SGLang's HiCache storage
(`batch_set` / `batch_get` / `batch_exists`) take: chunks of KV, keyed by a hash of their
token prefix, stored compressed with seqkv's model-free codecs (no seqkv model needed).
Their real interfaces pass framework tensors and objects (LMCache's CacheEngineKey and
MemoryObj, SGLang's page tensors); here a chunk is a numpy array [layers, 2, kv_heads,
positions, head_dim] and keys are strings. Adapting it means converting at the two
marked places. The self-check at the bottom runs with numpy only:

    PYTHONPATH=build/python python3 python/examples/kv_backend_sketch.py
"""
import hashlib
import os
import tempfile

import numpy as np

import seqkv


class SeqkvKVBackend:
    """Chunks of KV as files of engine-free seqkv blobs (docs/kvblob.md) in a directory."""

    def __init__(self, root, scheme="pred", dtype=np.float16):
        self.root, self.scheme, self.dtype = root, scheme, dtype
        os.makedirs(root, exist_ok=True)

    def _path(self, key):
        return os.path.join(self.root, hashlib.sha256(key.encode()).hexdigest() + ".skvb")

    # -- LMCache-style single-chunk calls --
    def put(self, key, kv):
        # adapt: kv = memory_obj.tensor.float().cpu().numpy() in the engine's layout, transposed to ours
        blob = seqkv.encode_kv(kv, self.scheme)
        tmp = self._path(key) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, self._path(key))  # atomic: a reader sees the old chunk or the new one

    def get(self, key):
        try:
            with open(self._path(key), "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return None
        try:
            # adapt: torch.from_numpy(...) into the engine's layout and dtype
            return seqkv.decode_kv(blob, dtype=self.dtype)
        except seqkv.Error:  # damaged chunk (checksum, format): a miss, never wrong KV
            return None

    def contains(self, key):
        return os.path.exists(self._path(key))

    # -- SGLang HiCache-style batch calls --
    def batch_set(self, keys, values):
        for k, v in zip(keys, values):
            self.put(k, v)
        return True

    def batch_get(self, keys):
        return [self.get(k) for k in keys]

    def batch_exists(self, keys):
        """How many of keys, from the first, are stored (a prefix of chunks)."""
        n = 0
        while n < len(keys) and self.contains(keys[n]):
            n += 1
        return n


def prefix_keys(tokens, chunk):
    """One key per full chunk: the hash of every token up to the chunk's end."""
    h = hashlib.sha256()
    keys = []
    for i in range(0, len(tokens) - chunk + 1, chunk):
        h.update(np.asarray(tokens[i:i + chunk], np.int32).tobytes())
        keys.append(h.copy().hexdigest())
    return keys


if __name__ == "__main__":
    rng = np.random.default_rng(3)
    L, H, D, CHUNK = 2, 2, 32, 16
    tokens = rng.integers(0, 1000, 64)
    kv = np.cumsum(rng.standard_normal((L, 2, H, 64, D)), axis=3).astype(np.float32) * 0.1
    chunks = [kv[:, :, :, i:i + CHUNK] for i in range(0, 64, CHUNK)]
    with tempfile.TemporaryDirectory() as d:
        be = SeqkvKVBackend(d)
        keys = prefix_keys(tokens, CHUNK)
        be.batch_set(keys[:3], chunks[:3])
        assert be.batch_exists(keys) == 3
        got = be.batch_get(keys)
        assert got[3] is None
        for a, b in zip(chunks[:3], got[:3]):
            err = float(((a - b.astype(np.float32)) ** 2).sum() / (a ** 2).sum())
            assert err < 1e-3, err
        stored = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print("3 chunks: %d bytes stored for %d bytes of float16 KV" % (stored, 3 * chunks[0].size * 2))
    print("kv_backend_sketch: OK (a sketch: not tested against LMCache or SGLang)")
