#!/bin/sh
# cuda_ptx_check.sh PTX... - fails unless the CUDA kernels' PTX keeps the determinism
# contract (docs/cuda.md): every f32 mul / add / sub carries an explicit rounding mode (.rn; .rz in roundf) (ptxas never
# fuses an instruction with an explicit rounding mode into an fma: -fmad=false), so the only
# fmas are the fmaf calls of the source; no .approx instruction (fast division, sqrt, exp)
# and no .ftz (flush to zero) anywhere; and k_rope, whose pair is written as two products
# and a difference, holds no fma at all. Prints one line per file.
bad=0
for f in "$@"; do
    [ -s "$f" ] || { echo "$f: missing or empty (make CUDA=1 cuda-ptx-check builds it)"; bad=1; continue; }
    awk -v file="$f" '
        /^\.visible \.entry|^\.entry/ { fn = $3; sub(/\(.*/, "", fn) }
        /^[ \t]+(mul|add|sub)(\.[a-z]+)*\.f32[ \t]/ { nr++; if ($1 !~ /\.(rn|rz|rm|rp)\./) { print file ": unrounded " $1 " in " fn; bad = 1 } }
        /^[ \t]+fma\.rn\.f32[ \t]/ { nf++; if (fn ~ /k_rope/) { print file ": fma in " fn; bad = 1 } }
        /\.approx|\.ftz/ { print file ": " $1 " in " fn; bad = 1 }
        END {
            if (nr == 0) { print file ": no f32 arithmetic found (not the kernels PTX?)"; bad = 1 }
            if (!bad) printf "%s: ok (%d fma from fmaf, %d mul/add/sub all explicitly rounded, no .approx, no .ftz)\n", file, nf, nr
            exit bad
        }' "$f" || bad=1
done
exit $bad
