#!/bin/sh
# Makes the random-weight GGUFs of the side-by-side benchmark (docs/bench.md), cached:
#
#   scripts/peer/models.sh [GEOMETRY...]     default: tinyllama-1.1b llama-3.2-1b
#
# For each geometry: GEOMETRY-F16.gguf by scripts/peer/gen_model.py, then GEOMETRY-Q8_0,
# -Q4_0 and -Q4_K_M.gguf by llama.cpp's own quantizer (skv-oracle-quantize, the
# llama-quantize presets; scripts/oracle/setup.sh builds it). Files that exist are kept.
# Into $SEQKV_PEER_MODELS (default /work/llama/peer-models if /work/llama exists, else
# ~/.cache/seqkv-oracle/peer-models): about 4.7 GB for TinyLlama, 5.4 GB for Llama-3.2-1B.
# PEER_TYPES limits the types made from the F16 file (default: every type of bench_peer.py's
# TYPES but F16; each ~0.5-1.2 GB for TinyLlama, a minute or two of quantizing).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${SEQKV_ORACLE_DIR:-}" ]; then
    if [ -d /work/llama/src ]; then SEQKV_ORACLE_DIR=/work/llama
    else SEQKV_ORACLE_DIR="$HOME/.cache/seqkv-oracle"; fi
fi
out=${SEQKV_PEER_MODELS:-"$SEQKV_ORACLE_DIR/peer-models"}
quant="$SEQKV_ORACLE_DIR/bin/skv-oracle-quantize"
[ -x "$quant" ] || SEQKV_ORACLE_DIR="$SEQKV_ORACLE_DIR" "$here/../oracle/setup.sh"
mkdir -p "$out"
[ $# -gt 0 ] || set -- tinyllama-1.1b llama-3.2-1b
for g in "$@"; do
    f16="$out/$g-F16.gguf"
    if [ ! -f "$f16" ]; then
        echo "models.sh: writing $f16"
        /usr/bin/python3 "$here/gen_model.py" "$g" "$f16"
    fi
    for t in ${PEER_TYPES:-BF16 Q8_0 Q6_K Q5_K_M Q5_0 Q5_1 Q4_K_M Q4_0 Q4_1 IQ4_NL IQ4_XS Q3_K_M Q2_K}; do
        [ "$t" = F16 ] && continue
        q="$out/$g-$t.gguf"
        [ -f "$q" ] && continue
        echo "models.sh: quantizing $q"
        "$quant" "$f16" "$q.tmp" "$t" 2 >"$q.log" 2>&1 || { cat "$q.log" >&2; rm -f "$q.tmp"; exit 1; }
        mv "$q.tmp" "$q"
        rm -f "$q.log"
    done
done
