#!/usr/bin/python3
"""Minimal GGUF v3 writer and reader (little-endian), written from the spec.

File layout:
  u32 magic "GGUF" (bytes 47 47 55 46), u32 version = 3,
  u64 tensor_count, u64 metadata_kv_count,
  metadata_kv_count x { string key, u32 value_type, value },
  tensor_count x { string name, u32 n_dims, u64 ne[n_dims] (fastest first),
                   u32 ggml_type, u64 offset (relative to the data section) },
  zero padding to a multiple of the alignment (general.alignment, default 32),
  the data section: each tensor at its offset, a multiple of the alignment.
A string is u64 byte length + UTF-8 bytes (no terminator); an array is
u32 element type + u64 count + elements; a bool is one byte.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
           FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
# ggml tensor types used here
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
_GGML_NP = {GGML_F32: np.dtype("<f4"), GGML_F16: np.dtype("<f2")}
# Q8_0: blocks of 32 consecutive values of a row, each stored as an F16 scale d
# then 32 int8 q; the value is d * q.
Q8_0_BLOCK, Q8_0_BYTES = 32, 34


def quantize_q8_0(a):
    """float array (..., n), n a multiple of 32 -> uint8 array of the Q8_0
    blocks, row-major.  As ggml's reference quantizer: d = max|x| / 127,
    q = round-half-away-from-zero(x / d) (x * (1/d)), d stored as F16."""
    x = np.asarray(a, dtype=np.float32).reshape(-1, Q8_0_BLOCK)
    amax = np.abs(x).max(axis=1)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1.0) / np.where(d > 0, d, 1), np.float32(0.0)).astype(np.float32)
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
    out = np.empty((x.shape[0], Q8_0_BYTES), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").reshape(-1, 1).view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def dequantize_q8_0(raw, count):
    """uint8 Q8_0 bytes of `count` values -> float32 array of `count`."""
    b = np.asarray(raw, dtype=np.uint8).reshape(-1, Q8_0_BYTES)
    d = b[:, :2].copy().view("<f2").astype(np.float32)
    q = b[:, 2:].view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)[:count]


def _pad(n, align=ALIGNMENT):
    return (align - n % align) % align


class Writer:
    """Collects typed metadata and tensors, then writes the file in one go."""

    def __init__(self):
        self.kv = []        # (key, type, value, elem_type)
        self.tensors = []   # (name, np.ndarray in file dtype, ggml_type)

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value, None))

    def add_array(self, key, elem_type, values):
        self.kv.append((key, ARRAY, list(values), elem_type))

    def add_tensor(self, name, array, ggml_type):
        """array: numpy array in PyTorch (row-major) order; its shape is
        reversed into GGUF ne (fastest-varying dimension first)."""
        ne = list(reversed(np.shape(array)))
        if ggml_type == GGML_Q8_0:
            if ne[0] % Q8_0_BLOCK:
                raise ValueError("Q8_0 tensor %s: row length %d is not a multiple of 32" % (name, ne[0]))
            arr = quantize_q8_0(array)
        else:
            arr = np.ascontiguousarray(array, dtype=_GGML_NP[ggml_type])
        self.tensors.append((name, arr, ggml_type, ne))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value):
        if vtype == STRING:
            return self._str(value)
        return struct.pack(_SCALAR[vtype], value)

    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, vtype, value, et in self.kv:
            out += self._str(key) + struct.pack("<I", vtype)
            if vtype == ARRAY:
                out += struct.pack("<IQ", et, len(value))
                if et == STRING:
                    for v in value:
                        out += self._str(v)
                else:
                    out += np.asarray(value, dtype=np.dtype(_SCALAR[et])).tobytes()
            else:
                out += self._value(vtype, value)
        offset = 0
        for name, arr, gt, ne in self.tensors:
            out += self._str(name) + struct.pack("<I", len(ne))
            out += struct.pack("<%dQ" % len(ne), *ne)
            out += struct.pack("<IQ", gt, offset)
            offset += arr.nbytes + _pad(arr.nbytes)
        out += b"\0" * _pad(len(out))
        for name, arr, gt, _ in self.tensors:
            out += arr.tobytes()
            out += b"\0" * _pad(arr.nbytes)
        with open(path, "wb") as f:
            f.write(out)


class Reader:
    """Parses a GGUF file (strictly: any inconsistency raises ValueError)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise ValueError("not a GGUF file")
        self.version, n_tensors, n_kv = self._unpack("<IQQ")
        if self.version != GGUF_VERSION:
            raise ValueError("GGUF version %d" % self.version)
        self.meta = {}
        self.meta_types = {}
        for _ in range(n_kv):
            key = self._string()
            vtype = self._unpack("<I")[0]
            if key in self.meta:
                raise ValueError("duplicate key " + key)
            self.meta[key] = self._read_value(vtype)
            self.meta_types[key] = vtype
        align = self.meta.get("general.alignment", ALIGNMENT)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            nd = self._unpack("<I")[0]
            ne = list(self._unpack("<%dQ" % nd))
            gt, off = self._unpack("<IQ")
            infos.append((name, ne, gt, off))
        self.data_start = self.pos + _pad(self.pos, align)
        self.tensors = {}
        self.tensor_types = {}
        self.tensor_order = []
        for name, ne, gt, off in infos:
            if (gt not in _GGML_NP and gt != GGML_Q8_0) or off % align:
                raise ValueError("tensor %s: type %d offset %d" % (name, gt, off))
            count = int(np.prod(ne))
            start = self.data_start + off
            if gt == GGML_Q8_0:   # dequantized to float32 on reading
                if ne[0] % Q8_0_BLOCK:
                    raise ValueError("tensor %s: Q8_0 row length %d" % (name, ne[0]))
                nbytes = count // Q8_0_BLOCK * Q8_0_BYTES
            else:
                nbytes = count * _GGML_NP[gt].itemsize
            if start + nbytes > len(self.buf):
                raise ValueError("tensor %s runs past the end of the file" % name)
            if gt == GGML_Q8_0:
                raw = np.frombuffer(self.buf, dtype=np.uint8, count=nbytes, offset=start)
                arr = dequantize_q8_0(raw, count)
            else:
                arr = np.frombuffer(self.buf, dtype=_GGML_NP[gt], count=count, offset=start)
            self.tensors[name] = arr.reshape(list(reversed(ne)))
            self.tensor_types[name] = gt
            self.tensor_order.append(name)

    def _take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError("truncated file")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _unpack(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))

    def _string(self):
        n = self._unpack("<Q")[0]
        return self._take(n).decode("utf-8")

    def _read_value(self, vtype):
        if vtype == STRING:
            return self._string()
        if vtype == ARRAY:
            et, n = self._unpack("<IQ")
            return [self._read_value(et) for _ in range(n)]
        if vtype not in _SCALAR:
            raise ValueError("bad value type %d" % vtype)
        return self._unpack(_SCALAR[vtype])[0]
