#!/bin/sh
# Builds llama.cpp's llama-server once from the llama.cpp source bundled in the npm package
# node-llama-cpp@3.21.1 (cloned by scripts/oracle/setup.sh into $SEQKV_ORACLE_DIR/src),
# cached outside the repository, for the side-by-side of bench/results/serve.md
# (scripts/serve_peer.sh):
#
#   scripts/peer/build_llama_server.sh          -> $SEQKV_PEER_SERVER_BUILD/bin/llama-server
#   scripts/peer/build_llama_server.sh --path   prints that path, builds nothing
#
# SEQKV_ORACLE_DIR as scripts/peer/build_llama_bench.sh; SEQKV_PEER_SERVER_BUILD defaults to
# $SEQKV_ORACLE_DIR/build-server. Built with -march=native (GGML_NATIVE): llama-server at its
# best on the CPU at hand, which is what a user would run. Slow (20+ min on 2 cores): run it
# nice'd in the background. Skips everything when the binary exists.
set -eu
if [ -z "${SEQKV_ORACLE_DIR:-}" ]; then
    if [ -d /work/llama/src ]; then SEQKV_ORACLE_DIR=/work/llama
    else SEQKV_ORACLE_DIR="$HOME/.cache/seqkv-oracle"; fi
fi
src="$SEQKV_ORACLE_DIR/src"
build=${SEQKV_PEER_SERVER_BUILD:-"$SEQKV_ORACLE_DIR/build-server"}
jobs=${SEQKV_PEER_JOBS:-2}
if [ "${1:-}" = --path ]; then echo "$build/bin/llama-server"; exit 0; fi
if [ -x "$build/bin/llama-server" ]; then
    echo "llama-server cached: $build/bin/llama-server"
    exit 0
fi
if [ ! -f "$src/CMakeLists.txt" ]; then
    here=$(cd "$(dirname "$0")/.." && pwd)
    SEQKV_ORACLE_DIR="$SEQKV_ORACLE_DIR" "$here/oracle/setup.sh"
fi
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S "$src" -B "$build" $gen -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON
cmake --build "$build" --target llama-server -j "$jobs"
echo "llama-server built: $build/bin/llama-server"
