#!/bin/sh
# make bench-peer (docs/bench.md, "Side by side with llama.cpp"):
#
#   scripts/peer/run.sh PEER_SEQKV
#
# builds llama.cpp's llama-bench once (scripts/peer/build_llama_bench.sh, cached outside the
# repository), makes the models (scripts/peer/models.sh, cached), then runs both engines on
# them (scripts/peer/bench_peer.py). PEER_LLAMA=prebuilt uses peer_llama on the prebuilt
# libllama instead of llama-bench (no hour-long build), PEER_LLAMA=native peer_llama on a
# -march=native static build (build_peer_llama.sh), PEER_LLAMA=avx2 on an AVX2-only build
# with seqkv held to its AVX2 kernels (SEQKV_CPU=avx2); PEER_GEOMS, PEER_TYPES, PEER_THREADS,
# PEER_REPS narrow the run (bench_peer.py).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
seqkv=$1
case ${PEER_LLAMA:-bench} in prebuilt|native|avx2) peer=1 ;; *) peer=0 ;; esac
if [ "$peer" = 1 ]; then
    "$here/build_peer_llama.sh"
    llama=$("$here/build_peer_llama.sh" --path)
else
    nice "$here/build_llama_bench.sh"
    llama=$("$here/build_llama_bench.sh" --path)
fi
# shellcheck disable=SC2086
nice "$here/models.sh" ${PEER_GEOMS:-}
[ "${PEER_LLAMA:-}" = avx2 ] && export SEQKV_CPU=avx2
exec /usr/bin/python3 "$here/bench_peer.py" "$seqkv" "$llama"
