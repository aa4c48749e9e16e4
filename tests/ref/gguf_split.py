#!/usr/bin/python3
"""Splits a GGUF file into shards the way llama.cpp's gguf-split does (for tests of
split-model loading; no numpy needed).

    gguf_split.py IN.gguf OUT_PREFIX N   ->  OUT_PREFIX-00001-of-0000N.gguf, ...

The tensors are dealt out in file order, as evenly as their count allows. The first shard
carries every metadata entry of IN; every shard carries split.no (u16, from 0),
split.count (u16) and split.tensors.count (i32, the total), and nothing else besides its
tensors. Each shard's data section is aligned to its own general.alignment (the first:
IN's; the others: GGUF's default 32), tensor offsets relative to it.

As a module: split(src, prefix, n, edit=None) returns the shard paths; edit, if given, is
called as edit(i, kvs, tensors) -> (kvs, tensors) for each shard before it is written (to
write broken shards, or a first shard without tensors as gguf-split's
--no-tensor-first-split does)."""
import struct
import sys

GGUF_MAGIC = b"GGUF"
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: 1, T_I8: 1, T_U16: 2, T_I16: 2, T_U32: 4, T_I32: 4, T_F32: 4, T_BOOL: 1, T_U64: 8, T_I64: 8,
          T_F64: 8}


class Reader:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, n):
        v = self.b[self.p:self.p + n]
        if len(v) != n:
            raise ValueError("truncated GGUF")
        self.p += n
        return v

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())


def skip_value(r, t):
    """Consumes one value of type t; returns its raw bytes (type tag excluded)."""
    start = r.p
    if t == T_STR:
        r.string()
    elif t == T_ARR:
        at, n = r.u32(), r.u64()
        for _ in range(n):
            skip_value(r, at)
    else:
        r.take(SCALAR[t])
    return r.b[start:r.p]


def read(path):
    """(version, alignment, [(key, type, raw value)], [(name, dims, type, data bytes)])."""
    with open(path, "rb") as f:
        b = f.read()
    r = Reader(b)
    if r.take(4) != GGUF_MAGIC:
        raise ValueError("%s: not a GGUF file" % path)
    version, n_t, n_kv = r.u32(), r.u64(), r.u64()
    kvs, align = [], 32
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        raw = skip_value(r, t)
        if key == b"general.alignment":
            align = struct.unpack("<I", raw)[0]
        kvs.append((key, t, raw))
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.u32()
        dims = [r.u64() for _ in range(nd)]
        t, off = r.u32(), r.u64()
        infos.append((name, dims, t, off))
    data_start = (r.p + align - 1) // align * align
    offs = sorted(off for _, _, _, off in infos) + [len(b) - data_start]
    tensors = []
    for name, dims, t, off in infos:
        end = offs[offs.index(off) + 1]  # the next tensor's offset (or the end): size with its padding
        tensors.append((name, dims, t, b[data_start + off:data_start + end]))
    return version, align, kvs, tensors


def kv_bytes(key, t, raw):
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", t) + raw


def write(path, version, align, kvs, tensors):
    head = [GGUF_MAGIC, struct.pack("<IQQ", version, len(tensors), len(kvs))]
    head += [kv_bytes(*kv) for kv in kvs]
    off, blobs = 0, []
    for name, dims, t, data in tensors:
        head.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims)) +
                    b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off))
        pad = (-len(data)) % align
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    h = b"".join(head)
    h += b"\0" * ((-len(h)) % align)
    with open(path, "wb") as f:
        f.write(h + b"".join(blobs))


def shard_path(prefix, i, n):
    return "%s-%05d-of-%05d.gguf" % (prefix, i + 1, n)


def split(src, prefix, n, edit=None):
    version, align, kvs, tensors = read(src)
    kvs = [kv for kv in kvs if not kv[0].startswith(b"split.")]
    paths = []
    for i in range(n):
        part = tensors[len(tensors) * i // n:len(tensors) * (i + 1) // n]
        sk = [(b"split.no", T_U16, struct.pack("<H", i)), (b"split.count", T_U16, struct.pack("<H", n)),
              (b"split.tensors.count", T_I32, struct.pack("<i", len(tensors)))]
        shard_kvs = (kvs + sk) if i == 0 else sk
        if edit:
            shard_kvs, part = edit(i, shard_kvs, part)
        paths.append(shard_path(prefix, i, n))
        write(paths[-1], version, align if i == 0 else 32, shard_kvs, part)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: gguf_split.py IN.gguf OUT_PREFIX N")
    for p in split(sys.argv[1], sys.argv[2], int(sys.argv[3])):
        print(p)
