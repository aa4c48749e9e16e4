#!/bin/sh
# Builds peer_llama (scripts/peer/peer_llama.c), the llama.cpp timer that stands in for
# llama-bench when that is not built: a few seconds, against the prebuilt libllama of the
# npm package (scripts/oracle/setup.sh fetches it), with the fastest of its CPU variants that
# this CPU runs, AMX excepted (the "sapphirerapids" build crashed on quantized models): "icelake"
# where AVX-512 VNNI and VBMI are present, else "skylakex" with AVX-512, else "haswell";
# $SKV_ORACLE_CPU_LIB overrides at run time. (On the Xeon, icelake's pp128 on Q4_0 ran at 44.8
# tokens per CPU-second against skylakex's 35.4.)
#
#   scripts/peer/build_peer_llama.sh          -> $SEQKV_ORACLE_DIR/bin/skv-peer-llama
#   scripts/peer/build_peer_llama.sh --path   prints that path, builds nothing
#
# PEER_LLAMA=native: peer_llama linked statically against llama.cpp built from the same
# bundle with -march=native (the tree of scripts/peer/build_llama_server.sh, which also
# builds llama-bench there; built first if missing) -> $SEQKV_ORACLE_DIR/bin/skv-peer-llama-native.
# That is llama.cpp at its best on the CPU at hand, and unlike llama-bench it reports the
# CPU seconds of each repetition (cpu_ts), the measure that survives a shared machine.
#
# PEER_LLAMA=avx2: the same, but llama.cpp built for AVX2 + FMA + F16C only (no AVX-512, no
# -march=native; libllama and ggml alone, ~10 min on 2 cores) into $SEQKV_ORACLE_DIR/build-avx2
# -> $SEQKV_ORACLE_DIR/bin/skv-peer-llama-avx2: on an AVX-512 machine, with seqkv at
# SEQKV_CPU=avx2 (bench_peer.py labels such rows), the stand-in for an AVX2-only CPU.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${SEQKV_ORACLE_DIR:-}" ]; then
    if [ -d /work/llama/src ]; then SEQKV_ORACLE_DIR=/work/llama
    else SEQKV_ORACLE_DIR="$HOME/.cache/seqkv-oracle"; fi
fi
dir=$SEQKV_ORACLE_DIR
# link_static BUILD: peer_llama linked statically against the llama.cpp build tree BUILD -> $exe
link_static() {
    mkdir -p "$dir/bin"
    ${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -DSKV_ORACLE_STATIC \
        -I "$dir/src/include" -I "$dir/src/ggml/include" \
        "$here/peer_llama.c" "$here/../oracle/common.c" -o "$exe" \
        "$1/src/libllama.a" "$1/ggml/src/libggml.a" "$1/ggml/src/libggml-cpu.a" "$1/ggml/src/libggml-base.a" \
        -lstdc++ -lgomp -lm -lpthread
}
if [ "${PEER_LLAMA:-}" = native ]; then
    exe="$dir/bin/skv-peer-llama-native"
    if [ "${1:-}" = --path ]; then echo "$exe"; exit 0; fi
    SEQKV_ORACLE_DIR="$dir" "$here/build_llama_server.sh" >/dev/null
    b=${SEQKV_PEER_SERVER_BUILD:-"$dir/build-server"}
    link_static "$b"
    echo "peer_llama built: $exe (static, -march=native, from $b)"
    exit 0
fi
if [ "${PEER_LLAMA:-}" = avx2 ]; then
    exe="$dir/bin/skv-peer-llama-avx2"
    if [ "${1:-}" = --path ]; then echo "$exe"; exit 0; fi
    b="$dir/build-avx2"
    if [ ! -f "$b/src/libllama.a" ]; then
        [ -f "$dir/src/CMakeLists.txt" ] || SEQKV_ORACLE_DIR="$dir" "$here/../oracle/setup.sh"
        gen=""
        command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
        # shellcheck disable=SC2086
        cmake -S "$dir/src" -B "$b" $gen -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
            -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF \
            -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF >/dev/null
        cmake --build "$b" --target llama -j "${SEQKV_PEER_JOBS:-2}"
    fi
    link_static "$b"
    echo "peer_llama built: $exe (static, AVX2 + FMA + F16C, no AVX-512, from $b)"
    exit 0
fi
exe="$dir/bin/skv-peer-llama"
if [ "${1:-}" = --path ]; then echo "$exe"; exit 0; fi
[ -d "$dir/src/include" ] || SEQKV_ORACLE_DIR="$dir" "$here/../oracle/setup.sh"
lib="$dir/b/package/bins/linux-x64"
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { case " $flags " in *" $1 "*) return 0;; esac; return 1; }
if has avx512_vnni && has avx512vbmi; then variant=icelake
elif has avx512f && has avx512bw; then variant=skylakex
else variant=haswell; fi
${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra \
    -I "$dir/src/include" -I "$dir/src/ggml/include" \
    -DSKV_ORACLE_CPU_LIB="\"$lib/libggml-cpu-$variant.so\"" \
    "$here/peer_llama.c" "$here/../oracle/common.c" -o "$exe" \
    -L"$lib" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -lm \
    -Wl,-rpath,"$lib"
echo "peer_llama built: $exe (CPU variant $variant)"
