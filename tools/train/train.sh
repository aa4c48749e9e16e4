#!/bin/sh
# Reproduce seqkv's default model from scratch:
#   tools/train/train.sh            deps, data, tokenizer, training, export, references
#   tools/train/train.sh --no-train  redo only export + references from work/ckpt.pt
# Outputs: models/kjv-4m.gguf, tools/train/kjv-4m-tokenizer.model, tools/train/kjv-4m-train.log,
#          tests/data/model_ref/*, scratch files in tools/train/work/.
# The training run is niced and bounded to 55 minutes of wall-clock time
# (--time-budget-min): on a busy machine the cosine schedule ends early rather
# than overrunning, so the exact weights depend on the machine's speed.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
T=tools/train
train=1
[ "${1:-}" = "--no-train" ] && train=0

scripts/install-deps.sh --train
if [ "$train" = 1 ]; then
    $PY $T/prepare_data.py
    $PY $T/train_tokenizer.py --vocab 4096
    rm -f $T/work/train.log $T/work/ckpt.pt
    start=$(date +%s)
    nice -n 10 $PY $T/train.py --steps 900 --batch 4 --seq-len 1024 --lr 2e-3 --lr-min 1e-4 \
        --warmup 30 --wd 0.1 --time-budget-min 55 --eval-every 100 --seed 1337 --threads 2 \
        --dim 256 --layers 4 --heads 4 --kv-heads 2 --hidden 768
    echo "train.sh: training took $(( $(date +%s) - start )) s"
    cp $T/work/train.log $T/kjv-4m-train.log
fi
cp $T/work/tokenizer.model $T/kjv-4m-tokenizer.model
$PY $T/export_gguf.py --out models/kjv-4m.gguf
nice -n 10 $PY $T/make_ref.py --model models/kjv-4m.gguf --tokenizer $T/kjv-4m-tokenizer.model \
    --ref-dir tests/data/model_ref
$PY $T/check_tokenizer.py --model models/kjv-4m.gguf --tokenizer $T/kjv-4m-tokenizer.model \
    --text $T/work/heldout.txt --text $T/work/train.txt
$PY $T/numpy_engine.py --model models/kjv-4m.gguf --ref-dir tests/data/model_ref
sha256sum models/kjv-4m.gguf
