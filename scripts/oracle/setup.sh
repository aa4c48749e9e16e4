#!/bin/sh
# Builds seqkv's llama.cpp oracle (docs/oracle.md) from the node-llama-cpp npm
# packages: the prebuilt CPU libraries of @node-llama-cpp/linux-x64 and the
# headers of the llama.cpp source bundled in node-llama-cpp, both of one
# release, so the structs the programs pass match the libraries.
#
#   scripts/oracle/setup.sh          (into $SEQKV_ORACLE_DIR, default ~/.cache/seqkv-oracle)
#
# Leaves: $DIR/a (node-llama-cpp), $DIR/b (the linux-x64 binaries), $DIR/src
# (llama.cpp cloned from the bundle), $DIR/bin/skv-oracle-quantize and
# $DIR/bin/skv-oracle-eval. Steps already done are skipped; needs npm, git, cc.
set -eu
VERSION=3.21.1
here=$(cd "$(dirname "$0")" && pwd)
dir=${SEQKV_ORACLE_DIR:-"$HOME/.cache/seqkv-oracle"}
mkdir -p "$dir/bin"
cd "$dir"

if [ ! -f "node-llama-cpp-$VERSION.tgz" ] || [ ! -f "node-llama-cpp-linux-x64-$VERSION.tgz" ]; then
    npm pack "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64@$VERSION" >pack.log 2>&1
fi
for p in a:node-llama-cpp b:node-llama-cpp-linux-x64; do
    sub=${p%%:*}
    if [ ! -d "$sub/package" ]; then
        mkdir -p "$sub"
        tar -xzf "${p#*:}-$VERSION.tgz" -C "$sub"
    fi
done
[ -d src/include ] || git -c advice.detachedHead=false clone -q a/package/llama/gitRelease.bundle src

lib="$dir/b/package/bins/linux-x64"
# The AVX2 variant only: ggml's AMX kernels (the sapphirerapids variant, which
# ggml_backend_load_all would pick on an AMX Xeon) crashed on quantized models.
cpu="$lib/libggml-cpu-haswell.so"
for prog in quantize eval; do
    ${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra \
        -I src/include -I src/ggml/include -DSKV_ORACLE_CPU_LIB="\"$cpu\"" \
        "$here/$prog.c" "$here/common.c" -o "bin/skv-oracle-$prog" \
        -L"$lib" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -lm \
        -Wl,-rpath,"$lib"
done
echo "oracle built: $dir/bin/skv-oracle-quantize, $dir/bin/skv-oracle-eval"
