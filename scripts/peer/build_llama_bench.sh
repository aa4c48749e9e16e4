#!/bin/sh
# Builds llama.cpp's llama-bench once from the llama.cpp source bundled in the
# npm package node-llama-cpp@3.21.1 (cloned by scripts/oracle/setup.sh into
# $SEQKV_ORACLE_DIR/src), cached outside the repository:
#
#   scripts/peer/build_llama_bench.sh          -> $SEQKV_PEER_BUILD/bin/llama-bench
#   scripts/peer/build_llama_bench.sh --path   prints that path, builds nothing
#
# SEQKV_ORACLE_DIR defaults to /work/llama if it exists, else
# ~/.cache/seqkv-oracle; SEQKV_PEER_BUILD defaults to $SEQKV_ORACLE_DIR/build-bench.
# Skips everything when the binary exists. The CPU backend is built statically
# for a fixed ISA (AVX2+FMA+F16C+AVX-512+VNNI, no -march=native) so the result
# does not depend on which host compiled it; AMX is off because ggml's AMX
# kernels crashed on quantized models on the Xeon this was measured on.
# Slow (15+ min on 2 cores); run it nice'd in the background.
set -eu
if [ -z "${SEQKV_ORACLE_DIR:-}" ]; then
    if [ -d /work/llama/src ]; then SEQKV_ORACLE_DIR=/work/llama
    else SEQKV_ORACLE_DIR="$HOME/.cache/seqkv-oracle"; fi
fi
src="$SEQKV_ORACLE_DIR/src"
build=${SEQKV_PEER_BUILD:-"$SEQKV_ORACLE_DIR/build-bench"}
jobs=${SEQKV_PEER_JOBS:-2}
if [ "${1:-}" = --path ]; then echo "$build/bin/llama-bench"; exit 0; fi
if [ -x "$build/bin/llama-bench" ]; then
    echo "llama-bench cached: $build/bin/llama-bench"
    exit 0
fi
if [ ! -f "$src/CMakeLists.txt" ]; then
    here=$(cd "$(dirname "$0")/.." && pwd)
    SEQKV_ORACLE_DIR="$SEQKV_ORACLE_DIR" "$here/oracle/setup.sh"
fi
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S "$src" -B "$build" $gen -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AMX_TILE=OFF \
    -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
cmake --build "$build" --target llama-bench -j "$jobs"
echo "llama-bench built: $build/bin/llama-bench"
