#!/usr/bin/python3
"""The oracle fixtures (docs/oracle.md): one table row per GGUF file, and how each is made
from the bundled model models/kjv-4m.gguf.

  F16          the bundled model itself
  F32, BF16    re-typed here (retype(): F16 -> F32 exactly, F16 -> BF16 round-to-nearest-even),
               by tests/test_oracle.py too, so they are never committed
  the others   llama.cpp's quantizer (skv-oracle-quantize, scripts/oracle/setup.sh) with a
               llama-quantize preset; "pure" = --pure (no per-tensor upgrades)

Committed fixtures live in tests/data/oracle/<name>.gguf; the rest are written to
$SEQKV_ORACLE_DIR/fixtures/ (default ~/.cache/seqkv-oracle) by record.py --all. Each has
tests/data/oracle/<name>.json with its sha256, its tensor types and llama.cpp's numbers.
numpy only; importable (tests/test_oracle.py uses FIXTURES, census, retype, path_of).
"""
import collections
import hashlib
import os
import struct

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(ROOT, "models", "kjv-4m.gguf")
DATA = os.path.join(ROOT, "tests", "data", "oracle")
CACHE = os.environ.get("SEQKV_ORACLE_DIR", os.path.expanduser("~/.cache/seqkv-oracle"))

# name: (how it is made, llama-quantize preset, pure, committed to tests/data/oracle/)
FIXTURES = {
    "F16": ("bundled", None, False, False),
    "F32": ("retype", "F32", False, False),
    "BF16": ("retype", "BF16", False, False),
    "Q8_0": ("quantize", "Q8_0", False, True),
    "Q4_0_PURE": ("quantize", "Q4_0", True, True),
    "Q4_0": ("quantize", "Q4_0", False, True),
    "Q4_1": ("quantize", "Q4_1", False, True),
    "Q5_0": ("quantize", "Q5_0", False, True),
    "Q5_1": ("quantize", "Q5_1", False, False),
    "Q2_K": ("quantize", "Q2_K", False, True),
    "Q3_K_S": ("quantize", "Q3_K_S", False, False),
    "Q3_K_M": ("quantize", "Q3_K_M", False, True),
    "Q3_K_L": ("quantize", "Q3_K_L", False, False),
    "Q4_K_S": ("quantize", "Q4_K_S", False, False),
    "Q4_K_M": ("quantize", "Q4_K_M", False, False),
    "Q5_K_S": ("quantize", "Q5_K_S", False, False),
    "Q5_K_M": ("quantize", "Q5_K_M", False, False),
    "Q6_K": ("quantize", "Q6_K", False, False),
    "IQ4_NL": ("quantize", "IQ4_NL", False, False),
    "IQ4_XS": ("quantize", "IQ4_XS", False, True),
}

# ggml type ids -> names (ggml.h's enum ggml_type), for the ones a fixture may hold
GGML_NAMES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0",
              10: "q2_k", 11: "q3_k", 12: "q4_k", 13: "q5_k", 14: "q6_k", 20: "iq4_nl",
              23: "iq4_xs", 30: "bf16"}
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class Header:
    """The parsed head of a GGUF v3 file: the raw metadata bytes, the tensor infos
    [(name, ne, ggml_type, offset)], where the data section starts, the alignment."""

    def __init__(self, buf):
        if buf[:4] != b"GGUF" or struct.unpack_from("<I", buf, 4)[0] != 3:
            raise ValueError("not a GGUF v3 file")
        self.buf = buf
        n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
        self.kv_start = pos = 24
        self.alignment = 32
        self.kv_offsets = {}
        for _ in range(n_kv):
            key, pos = self._string(pos)
            vtype = struct.unpack_from("<I", buf, pos)[0]
            self.kv_offsets[key] = (vtype, pos + 4)
            pos = self._skip_value(vtype, pos + 4)
        self.kv_end = pos
        if "general.alignment" in self.kv_offsets:
            self.alignment = struct.unpack_from("<I", buf, self.kv_offsets["general.alignment"][1])[0]
        self.tensors = []
        for _ in range(n_tensors):
            name, pos = self._string(pos)
            nd = struct.unpack_from("<I", buf, pos)[0]
            ne = list(struct.unpack_from("<%dQ" % nd, buf, pos + 4))
            gt, off = struct.unpack_from("<IQ", buf, pos + 4 + 8 * nd)
            self.tensors.append((name, ne, gt, off))
            pos += 4 + 8 * nd + 12
        self.data_start = pos + (-pos) % self.alignment

    def _string(self, pos):
        n = struct.unpack_from("<Q", self.buf, pos)[0]
        return self.buf[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n

    def _skip_value(self, vtype, pos):
        if vtype == _STRING:
            return self._string(pos)[1]
        if vtype == _ARRAY:
            et, n = struct.unpack_from("<IQ", self.buf, pos)
            pos += 12
            if et in _SCALAR_SIZE:
                return pos + n * _SCALAR_SIZE[et]
            for _ in range(n):
                pos = self._skip_value(et, pos)
            return pos
        return pos + _SCALAR_SIZE[vtype]


def census(path):
    """-> {"tensors": {type name: count}, "by_tensor": {name: type name}} of a GGUF file."""
    with open(path, "rb") as f:
        h = Header(f.read())
    by = {name: GGML_NAMES.get(gt, "type%d" % gt) for name, _, gt, _ in h.tensors}
    return {"tensors": dict(sorted(collections.Counter(by.values()).items())), "by_tensor": by}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _to_bf16(f32):
    """float32 -> bfloat16 bits, round to nearest even (no NaN in these weights)."""
    u = f32.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def _retyped(arr_f16, target):
    f32 = arr_f16.astype("<f4")
    return f32 if target == "F32" else _to_bf16(f32)


def retype(src, dst, target):
    """Writes dst = src with every F16 tensor turned into F32 (exact) or BF16 (RNE) and
    general.file_type set to match; metadata bytes are copied verbatim otherwise."""
    with open(src, "rb") as f:
        h = Header(f.read())
    buf, gt_new = h.buf, GGML_F32 if target == "F32" else GGML_BF16
    meta = bytearray(buf[h.kv_start:h.kv_end])
    if "general.file_type" in h.kv_offsets:
        struct.pack_into("<I", meta, h.kv_offsets["general.file_type"][1] - h.kv_start,
                         0 if target == "F32" else 32)
    infos, blobs, off = bytearray(), [], 0
    for name, ne, gt, toff in h.tensors:
        count, start = int(np.prod(ne)), h.data_start + toff
        if gt == GGML_F16:
            data, gt = _retyped(np.frombuffer(buf, "<f2", count, start), target).tobytes(), gt_new
        elif gt == GGML_F32:
            data = buf[start:start + 4 * count]
        else:
            raise ValueError("%s: tensor %s is not F16/F32" % (src, name))
        nb = name.encode("utf-8")
        infos += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
        infos += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", gt, off)
        blobs.append(data + b"\0" * ((-len(data)) % h.alignment))
        off += len(blobs[-1])
    head = buf[:24] + bytes(meta) + bytes(infos)
    with open(dst, "wb") as f:
        f.write(head + b"\0" * ((-len(head)) % h.alignment) + b"".join(blobs))


def path_of(name):
    """-> where fixture `name` is read from (it may not exist yet)."""
    how, _, _, committed = FIXTURES[name]
    if how == "bundled":
        return BUNDLED
    if committed:
        return os.path.join(DATA, name + ".gguf")
    return os.path.join(CACHE, "fixtures", name + ".gguf")


if __name__ == "__main__":
    # fixtures.py --uncommitted: the llama-quantize'd fixtures made by record.py into the
    # cache rather than committed (what .ci/run records before the suite).
    import sys
    if sys.argv[1:] != ["--uncommitted"]:
        sys.exit("usage: scripts/oracle/fixtures.py --uncommitted")
    print(" ".join(n for n, (how, _, _, committed) in FIXTURES.items() if how == "quantize" and not committed))
