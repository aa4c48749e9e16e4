#!/bin/sh
# Regenerates tests/data/types/*.bin, the weight-type fixtures that
# tests/test_types_oracle.c checks seqkv's dequantization against (bit for bit).
#
# The oracle is llama.cpp's ggml, taken from the npm package node-llama-cpp
# (the version the fixtures were made with: 3.21.1):
#   npm pack node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1
#   mkdir -p a b && tar -xzf node-llama-cpp-3.21.1.tgz -C a && tar -xzf node-llama-cpp-linux-x64-3.21.1.tgz -C b
#   git clone a/package/llama/gitRelease.bundle src     # llama.cpp source: ggml.h
# then point GGML_LIB at b/package/bins/linux-x64 (libggml-base.so) and
# GGML_INCLUDE at src/ggml/include.  Defaults: the unpacked copies in /work/llama.
#
# Usage: scripts/oracle/types_fixtures.sh [OUTDIR]   (default tests/data/types)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../tests/data/types}
lib=${GGML_LIB:-/work/llama/b/package/bins/linux-x64}
inc=${GGML_INCLUDE:-/work/llama/src/ggml/include}
[ -f "$lib/libggml-base.so" ] || { echo "no libggml-base.so in $lib (set GGML_LIB)" >&2; exit 1; }
[ -f "$inc/ggml.h" ] || { echo "no ggml.h in $inc (set GGML_INCLUDE)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -O1 -I"$inc" "$here/types_fixtures.c" -L"$lib" -lggml-base -Wl,-rpath,"$lib" -lm -o "$tmp/gen"
mkdir -p "$out"
"$tmp/gen" "$out"
echo "wrote $(ls "$out"/*.bin | wc -l) fixtures to $out"
