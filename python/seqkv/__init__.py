"""seqkv: store transformer KV caches as sequences (the Python binding of libseqkv).

Lossless sessions keep the tokens (arithmetic-coded under the model, or under a cheap
model of the ids) and regenerate the KV bit-exactly; lossy codecs keep the KV itself
(per-vector TurboQuant / q8 / q4 / f16, or the model-free predictive coder).

    import seqkv
    with seqkv.Model("models/kjv-4m.gguf") as m:
        data = seqkv.compress(m, "In the beginning God created", codec="model")
        with seqkv.restore(m, data) as ctx:          # digest-verified
            kv = ctx.kv()                            # float32 [layers, 2, kv_heads, positions, head_dim]

Engine-free (any engine's KV, no model):

    blob = seqkv.encode_kv(kv, "pred")               # or "tq3", "k=tq4,v=tq3", "q8_0", ...
    kv2 = seqkv.decode_kv(blob)

Errors are seqkv.Error (subclasses per status: FormatError, MismatchError, ...) carrying
the library's message (.message), .status and .status_name. Long calls release the GIL.
"""
import os

import numpy as np

from ._seqkv import (  # noqa: F401  (re-exported)
    Context,
    Error,
    FormatError,
    InternalError,
    InvalidArgumentError,
    IOError,
    MismatchError,
    Model,
    NoMemoryError,
    RangeError,
    Store,
    UnsupportedError,
    library_version,
)
from . import _seqkv

__version__ = "0.1.0"
__all__ = ["Model", "Context", "Store", "compress", "restore", "restore_kv", "inspect", "codecs", "encode_kv",
           "decode_kv", "Error", "FormatError", "InternalError", "InvalidArgumentError", "IOError", "MismatchError",
           "NoMemoryError", "RangeError", "UnsupportedError"]


def _bytes(data):
    """bytes-like as is; a str or os.PathLike is a file to read."""
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            return f.read()
    return data


def _tokens(model, tokens):
    """A str is tokenized as the CLI does (BOS added as the model says); else int ids."""
    if isinstance(tokens, str):
        return model.tokenize(tokens, add_special=True)
    return tokens


def compress(model, tokens, codec="model", *, n_ctx=0, n_threads=1, segment=False, kv_quant=None, dictionary=None,
             kv_cache="f32"):
    """Encodes a session and returns the .skv file's bytes.

    tokens: a str (tokenized like `seqkv compress -f`) or int token ids.
    codec: a name of seqkv.codecs() ("model", "tokens", "cm", "cmv", "cmvd", "f16", "q8", "q4",
    "tq2".."tq4", "kvq", "pred"); kv_quant: the spec of codecs kvq/pred; dictionary: the ids
    of codec cmvd's dictionary. segment=True splits sessions longer than n_ctx.
    Runs the model over the tokens with the GIL released.
    """
    return _seqkv.compress(model, _tokens(model, tokens), codec, n_ctx, n_threads, segment, kv_quant, dictionary,
                           kv_cache)


def restore(model, data, *, verify=True, segment=-1, n_threads=1, dictionary=None):
    """Restores one segment (default the last) of a .skv session (bytes or a path) into a
    new Context; with verify (the default) the KV digest is checked (MismatchError if not
    equal). The Context's .tokens are the segment's tokens."""
    return _seqkv.restore(model, _bytes(data), verify, segment, n_threads, dictionary)


def restore_kv(data, *, segment=-1, verify=True):
    """The KV of a lossy-codec session (f16 q8 q4 tq2..tq4 kvq pred) without any model:
    (float32 [layers, 2, kv_heads, positions, head_dim], int32 tokens)."""
    return _seqkv.restore_kv(_bytes(data), segment, verify)


def inspect(data):
    """A dict describing a .skv session or an engine-free KV blob (bytes or a path):
    codec, model, segments (each with its KV scheme for the lossy codecs), ...; the blob's
    geometry, schemes and measured error. Validates checksums (FormatError if damaged)."""
    return _seqkv.inspect(_bytes(data))


def codecs():
    """The codec table: [{'id', 'name', 'help', 'payload', 'lossless', 'needs_dictionary',
    'takes_spec', 'runs_model'}], in the CLI's listing order."""
    return _seqkv.codecs()


def _as_f32(kv, dtype):
    """float32 view or conversion of kv; bfloat16 given as a dtype named 'bfloat16'
    (ml_dtypes, torch's numpy bridge) or as uint16 bit patterns with dtype='bfloat16'."""
    a = np.asarray(kv)
    name = dtype or a.dtype.name
    if name == "bfloat16":
        bits = a.view(np.uint16) if a.dtype.itemsize == 2 else None
        if bits is None:
            raise TypeError("bfloat16 data must be 2-byte elements (uint16 bit patterns or a bfloat16 dtype)")
        return (np.ascontiguousarray(bits).astype(np.uint32) << 16).view(np.float32)
    if a.dtype == np.float32 or a.dtype == np.float16 or a.dtype == np.float64:
        return a  # float32 in place when C-contiguous; float16/64 converted by the extension
    raise TypeError("encode_kv takes float16, float32 or bfloat16 arrays, not %s" % a.dtype)


def encode_kv(kv, scheme="pred", *, dtype=None):
    """Encodes any engine's KV, float16/float32/bfloat16 [layers, 2, kv_heads, positions,
    head_dim] (transpose your engine's layout to this first), without a model.

    scheme: a per-vector scheme for both kinds ("f32", "f16", "q8_0", "q4_0", "tq2".."tq4",
    "tq2p".."tq4p"), "k=SCHEME,v=SCHEME[,seed=S]", or the predictive coder "pred" (=
    "pred:lpc2,step=0.05") / "pred:PREDICTOR[,ramp][,rot][,step=S][,kstep=S][,vstep=S]".
    Returns the blob's bytes (docs/kvblob.md). float32 C-order input is read in place.
    """
    return _seqkv.encode_kv(_as_f32(kv, dtype), scheme)


def decode_kv(data, *, dtype=np.float32):
    """Decodes a blob of encode_kv (bytes or a path) -> array [layers, 2, kv_heads,
    positions, head_dim] of dtype (float32: the decoder's output itself; float16; or
    'bfloat16' as uint16 bit patterns, rounded to nearest even)."""
    out = _seqkv.decode_kv(_bytes(data))
    if dtype == "bfloat16":
        u = out.view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return out if np.dtype(dtype) == np.float32 else out.astype(dtype)
