"""Builds seqkv._seqkv, the C extension over libseqkv (the static library of this
repository's `make lib`). Offline, with Debian's python3-setuptools and python3-numpy:

    make lib && python3 -m pip install --no-build-isolation ./python

$SEQKV_LIB names another libseqkv.a (the Makefile passes its build directory's); without
one, build/libseqkv.a of the repository is used, and built with `make lib` when missing.
"""
import os
import subprocess

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def libseqkv():
    lib = os.environ.get("SEQKV_LIB") or os.path.join(ROOT, "build", "libseqkv.a")
    if not os.path.exists(lib) and not os.environ.get("SEQKV_LIB"):
        subprocess.check_call(["make", "-C", ROOT, "-j2", "lib"])
    if not os.path.exists(lib):
        raise SystemExit("seqkv: %s not found: run `make lib` in %s first" % (lib, ROOT))
    return lib


ext = Extension(
    "seqkv._seqkv",
    sources=[os.path.join("seqkv", "_seqkv.c")],
    include_dirs=[os.path.join(ROOT, "include"), numpy.get_include()],
    extra_objects=[libseqkv()],
    libraries=["lmdb", "hiredis", "zstd", "xxhash", "pthread", "m"],
    # the library's determinism contract (docs/determinism.md) holds in the binding too
    extra_compile_args=["-std=c11", "-D_DEFAULT_SOURCE", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
    + os.environ.get("SEQKV_CFLAGS", "").split(),
)

setup(ext_modules=[ext])
