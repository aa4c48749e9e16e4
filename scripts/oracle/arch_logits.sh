#!/bin/sh
# Records llama.cpp's logits for the architecture fixtures (tests/data/arch/, checked by
# tests/test_arch.c): rewrites the fixtures with scripts/gguf_write.py, then runs
# scripts/oracle/arch_logits.c, linked against node-llama-cpp's prebuilt llama.cpp
# (release v0.4.0, package 3.21.1), on each ARCH.gguf / ARCH.tokens into ARCH.logits.
#
# Usage: scripts/oracle/arch_logits.sh [WORKDIR]      (default /tmp/seqkv-oracle)
# Needs npm (or node-llama-cpp-3.21.1.tgz and node-llama-cpp-linux-x64-3.21.1.tgz already
# in WORKDIR), git, cc, and /usr/bin/python3 with numpy. The headers come from the
# llama.cpp git bundle inside the node-llama-cpp package, the libraries from
# @node-llama-cpp/linux-x64; only the haswell CPU backend is loaded (AMX crashes).
set -eu
ver=3.21.1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-/tmp/seqkv-oracle}
mkdir -p "$work"
cd "$work"
[ -f node-llama-cpp-$ver.tgz ] || npm pack --silent node-llama-cpp@$ver >/dev/null
[ -f node-llama-cpp-linux-x64-$ver.tgz ] || npm pack --silent @node-llama-cpp/linux-x64@$ver >/dev/null
if [ ! -d pkg ]; then
    mkdir -p pkg bins
    tar -xzf node-llama-cpp-$ver.tgz -C pkg
    tar -xzf node-llama-cpp-linux-x64-$ver.tgz -C bins
fi
[ -d src ] || git -c advice.detachedHead=false clone -q pkg/package/llama/gitRelease.bundle src
mkdir -p lib
for f in bins/package/bins/linux-x64/libggml-base.so bins/package/bins/linux-x64/libggml.v*.so \
         bins/package/bins/linux-x64/libllama.v*.so bins/package/bins/linux-x64/libggml-cpu-haswell.so; do
    cp "$f" lib/
done
llama=$(basename lib/libllama.v*.so)
ggml=$(basename lib/libggml.v*.so)
cc -O1 -o arch_logits "$root/scripts/oracle/arch_logits.c" -Isrc/include -Isrc/ggml/include -Llib \
    -l:"$llama" -l:"$ggml" -l:libggml-base.so -Wl,-rpath,"$work/lib"
data="$root/tests/data/arch"
/usr/bin/python3 "$root/scripts/gguf_write.py" "$data"
for a in llama qwen2 qwen3 phi3 gemma2 gemma3; do
    ./arch_logits "$data/$a.gguf" "$data/$a.tokens" "$data/$a.logits" "$work/lib/libggml-cpu-haswell.so" 2>&1 |
        grep -v '^\.*$' | grep -v 'full-size SWA cache' || true
done
