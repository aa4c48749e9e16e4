#!/bin/bash
# The one prepared device call of issue 47: train the ~31M-parameter Llama model on the
# packed Debian corpus on one GPU, evaluate held-out loss per source, export GGUF, and leave
# the file in pieces of at most 16 MiB under $OUT with the training log.
#
# Prepare (here, once):  tools/train/build_corpus.py     # -> tools/train/pack/ (git-ignored)
# Device call:           run(command="scripts/train_gpu.sh", carry=["tools/train/pack"], timeout_s=600)
# CPU test (tiny):       TRAIN_PRESET=tiny TRAIN_TOKENS=20000 TRAIN_BATCH=4 TRAIN_SEQ=128 \
#                        OUT=/tmp/o PYTHON=/usr/bin/python3 scripts/train_gpu.sh
# Afterwards:            tools/train/pieces.py join FILES_AT/NAME.gguf.sha256 models/NAME.gguf
#
# Everything it needs travels in the working tree: tools/train/*.py and the pack (carried).
# It needs python3 with torch and numpy (the device image's); no sentencepiece, no network.
# Environment (defaults are the device run; docs/train.md explains the budget):
#   OUT             where the returned files go (the device sets it; required)
#   PYTHON          python3
#   PACK            tools/train/pack
#   TRAIN_PRESET    gpu30m (8 layers, dim 512, 8 query / 2 KV heads of 64, FFN 1408, vocab 16384)
#   TRAIN_TOKENS    160000000 (fixed token budget; steps = tokens / (batch x seq))
#   TRAIN_BATCH     64     TRAIN_SEQ 1024     TRAIN_LR 1.5e-3     TRAIN_WARMUP 150
#   TRAIN_TIME_MIN  5.5 (wall-clock guard: if the GPU is slower than planned, the cosine
#                   schedule ends early so that training + export still fit in 8 minutes)
#   TRAIN_DEVICE    auto (cuda when available)
#   TRAIN_EVAL_MAX  0 (held-out tokens scored per source; 0 = all. For CPU checks only)
#   PIECE_BYTES     16777216 (16 MiB)
#   MODEL_NAME      seqkv-deb-31m
#   TRAIN_WORK      scratch folder (checkpoint, unsplit GGUF); default a temporary one, removed
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the folder for the returned files}"
PY=${PYTHON:-python3}
PACK=${PACK:-tools/train/pack}
PRESET=${TRAIN_PRESET:-gpu30m}
TOKENS=${TRAIN_TOKENS:-160000000}
BATCH=${TRAIN_BATCH:-64}
SEQ=${TRAIN_SEQ:-1024}
LR=${TRAIN_LR:-1.5e-3}
WARMUP=${TRAIN_WARMUP:-150}
TIME_MIN=${TRAIN_TIME_MIN:-5.5}
DEVICE=${TRAIN_DEVICE:-auto}
PIECE=${PIECE_BYTES:-16777216}
NAME=${MODEL_NAME:-seqkv-deb-31m}
T=tools/train
mkdir -p "$OUT"
if [ -n "${TRAIN_WORK:-}" ]; then
    WORK=$TRAIN_WORK; mkdir -p "$WORK"; rm -f "$WORK/train.log"
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/seqkv-train.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
fi
LOG=$OUT/train_gpu.log
t0=$(date +%s)
say() { echo "train_gpu: $* [$(( $(date +%s) - t0 ))s]" | tee -a "$LOG"; }

say "start $(date -u +%FT%TZ) preset $PRESET tokens $TOKENS batch $BATCH seq $SEQ lr $LR time guard ${TIME_MIN} min"
{ command -v nvidia-smi >/dev/null && nvidia-smi -L; nproc; } 2>&1 | tee -a "$LOG" || true
"$PY" -c 'import sys, numpy, torch; print("python", sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available(), "compile", hasattr(torch, "compile"))' 2>&1 | tee -a "$LOG"
"$PY" $T/build_corpus.py --verify "$PACK" 2>&1 | tee -a "$LOG"

"$PY" $T/train.py --pack "$PACK" --out-dir "$WORK" --preset "$PRESET" --tokens "$TOKENS" \
    --batch "$BATCH" --seq-len "$SEQ" --lr "$LR" --lr-min 1e-4 --warmup "$WARMUP" --wd 0.1 \
    --time-budget-min "$TIME_MIN" --eval-every 500 --seed 1337 --threads "$(nproc)" \
    --device "$DEVICE" --eval-max-tokens "${TRAIN_EVAL_MAX:-0}" 2>&1 | tee -a "$LOG"
say "trained"
cp "$WORK/train.log" "$OUT/train.log"
cp "$WORK/results.json" "$OUT/results.json"

"$PY" $T/export_gguf.py --ckpt "$WORK/ckpt.pt" --vocab-json "$PACK/vocab.json.xz" \
    --out "$WORK/$NAME.gguf" --ftype auto --name "$NAME" \
    --description "seqkv research model (issue 47): Llama architecture trained on Debian-packaged text (KJV, fortunes, Jargon File, GCIDE, Linux and Python documentation)" \
    2>&1 | tee -a "$LOG"
"$PY" $T/pieces.py split "$WORK/$NAME.gguf" "$OUT" --max-bytes "$PIECE" 2>&1 | tee -a "$LOG"
cp "$PACK/manifest.json" "$OUT/corpus-manifest.json"
cp "$PACK/tokenizer.model" "$OUT/$NAME-tokenizer.model"
total=$(du -cb "$OUT"/* | tail -n 1 | cut -f1)
say "done: $OUT holds $total bytes"
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
    say "ERROR: more than 64 MiB to return"; exit 1
fi
