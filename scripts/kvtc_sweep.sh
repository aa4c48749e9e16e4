#!/bin/sh
# The rate-distortion sweep of issue 44 (bench/results/rd.md, "Sweep"): per model, a kvtc
# calibration on a text the evaluation never uses, then kv-rd (stored KV quantized, the
# continuation run with its own full-precision KV) over stored lengths x three held-out
# texts, every point appended to OUT/sweep.csv labelled model:P:text. Summarize with
# scripts/rd_sweep_summary.py OUT/sweep.csv.
#   usage: scripts/kvtc_sweep.sh OUT   (from the repository root, after make)
#   KJV_SET="kjv_c apache" ST_SET="st_c apache" scripts/kvtc_sweep.sh OUT: the confirmation
#   texts instead (never used to choose a parameter)
set -eu
OUT=${1:?usage: kvtc_sweep.sh OUT}
SKV=${SKV:-build/seqkv}
ST=${ST:-../shared/models/stories260K/stories260K.gguf}
SAMPLES=${SAMPLES:-../shared/corpus/stories260K_samples.txt}
mkdir -p "$OUT"
H=tests/data/model_ref/heldout.txt
# Calibration texts: kjv-4m heldout.txt bytes 0..20,000; stories260K samples bytes 0..60,000.
head -c 20000 $H > "$OUT/kjv_cal.txt"
head -c 60000 "$SAMPLES" > "$OUT/st_cal.txt"
# Held-out texts (disjoint from the calibration): two in-domain slices and the GPL-3 text.
tail -c +20001 $H | head -c 18000 > "$OUT/kjv_a.txt"
tail -c +38001 $H | head -c 18000 > "$OUT/kjv_b.txt"
tail -c +80001 "$SAMPLES" | head -c 40000 > "$OUT/st_a.txt"
tail -c +120001 "$SAMPLES" | head -c 40000 > "$OUT/st_b.txt"
cp /usr/share/common-licenses/GPL-3 "$OUT/gpl3.txt"
# A confirmation set never looked at while choosing anything (KJV_SET / ST_SET below):
# the rest of heldout.txt, a later slice of the samples, and the Apache-2.0 text.
tail -c +56001 $H | head -c 18000 > "$OUT/kjv_c.txt"
tail -c +160001 "$SAMPLES" | head -c 40000 > "$OUT/st_c.txt"
cp /usr/share/common-licenses/Apache-2.0 "$OUT/apache.txt"
# CALIB_OPTS: more kvtc-calib options (none: its defaults, step weights from 4 windows at power 0.5)
CK=$($SKV kvtc-calib -f "$OUT/kjv_cal.txt" -c 1024 --dir "$OUT" ${CALIB_OPTS:-})
CS=$($SKV kvtc-calib -m "$ST" -f "$OUT/st_cal.txt" -n 30000 --dir "$OUT" ${CALIB_OPTS:-})
run() { # model label calib P ctx windows text steps kvtc-steps
    n=$(( $6 * ($5 - 1) ))
    $SKV kv-rd -m "$1" -f "$OUT/$7.txt" -c "$5" --prefix "$4" -n "$n" --steps "$8" --predictors none,tok,tok+ramp \
        --topk-steps '' --kvtc "$3" --kvtc-steps "$9" --csv "$OUT/sweep.csv" --label "$2:$4:$7" > /dev/null 2>&1
    echo "done $2 P=$4 $7"
}
for t in ${KJV_SET:-kjv_a kjv_b gpl3}; do
    run models/kjv-4m.gguf kjv-4m "$CK" 128 256 8 $t 0.35,0.7,1,1.5,2,3 0.3,0.5,0.8,1.2,1.8,2.6
    run models/kjv-4m.gguf kjv-4m "$CK" 384 512 4 $t 0.35,0.7,1,1.5,2,3 0.3,0.5,0.8,1.2,1.8,2.6
    run models/kjv-4m.gguf kjv-4m "$CK" 896 1024 2 $t 0.35,0.7,1,1.5,2,3 0.3,0.5,0.8,1.2,1.8,2.6
done
for t in ${ST_SET:-st_a st_b gpl3}; do
    run "$ST" stories260K "$CS" 128 256 8 $t 0.03,0.05,0.1,0.2,0.35,0.5 0.2,0.4,0.8,1.2,1.6,2.4
    run "$ST" stories260K "$CS" 384 512 4 $t 0.03,0.05,0.1,0.2,0.35,0.5 0.2,0.4,0.8,1.2,1.6,2.4
done
