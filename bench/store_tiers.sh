#!/bin/sh
# Store tiers (docs/store.md "Tiers", "Dictionaries"): bytes per position and restore CPU
# time per tier, and cmvd with a store-trained dictionary vs cmv on held-out text.
# Usage: bench/store_tiers.sh [SEQKV] [MODEL]  (Markdown on stdout; bench/results/store.md)
set -eu
if [ "${1:-}" = --gets ]; then # internal: SEQKV MODEL DIR: a verified get of every session
    for n in $("$2" store ls "$4" -m "$3" | cut -f1); do "$2" store get "$4" "$n" -m "$3" -o /dev/null >/dev/null; done
    exit 0
fi
seqkv=${1:-build/seqkv}
model=${2:-models/kjv-4m.gguf}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cpu() { /usr/bin/time -f "%U %S" -o "$w/t" sh "$0" --gets "$seqkv" "$model" "$1" >/dev/null && awk '{printf "%.2f", $1 + $2}' "$w/t"; }
tier() { # STATS TIER -> "nodes positions bytes"
    awk -v t="$2" '$1 == t || ($1 " " $2) == t { for (i = 1; i <= NF; i++) if ($i == "nodes") n = $(i-1);
        for (i = 1; i <= NF; i++) if ($i == "positions") p = $(i-1); for (i = 1; i <= NF; i++) if ($i == "bytes") b = $(i-1);
        print n, p, b }' "$1"
}
puts() { for f in "$2"/*.txt; do "$seqkv" store put "$1" -m "$model" -f "$f" --name "${3:-}$(basename "$f")" >/dev/null; done; }
half() { # FILE FIRST|SECOND OUT
    n=$(wc -c <"$1"); h=$((n / 2))
    if [ "$2" = first ]; then head -c $h "$1" >"$3"; else tail -c +$((h + 1)) "$1" >"$3"; fi
}

echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'),"
echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg). Model: $(basename "$model"). Reproduce: bench/store_tiers.sh."
echo "Times are CPU seconds (user+sys, /usr/bin/time) of one \`seqkv store get\` process per session (model load"
echo "included), every restore digest-verified (the default)."
echo

# ---- per tier: the same 30 sessions in four stores -------------------------------------
if [ -z "${ONLY:-}" ]; then
python3 scripts/gen_workload.py "$w/wl" --sessions 30 --seed 1 >/dev/null
echo "## Tiers: 30 workload sessions (scripts/gen_workload.py --sessions 30 --seed 1, held-out KJV)"
echo
echo "| tier | how | nodes | positions | bytes | bytes/position | CPU s, 30 verified gets | vs tokens |"
echo "|---|---|---|---|---|---|---|---|"
mk() { # NAME BUDGET PRICE [dict]
    d="$w/$1"; "$seqkv" store init "$d" -m "$model" --budget "$2" >/dev/null
    "$seqkv" store gc "$d" -m "$model" --price "$3" >/dev/null; puts "$d" "$w/wl"
    if [ "${4:-}" = dict ]; then "$seqkv" store dict "$d" -m "$model" >/dev/null; "$seqkv" store gc "$d" -m "$model" >/dev/null; fi
    "$seqkv" store stats "$d" -m "$model" >"$w/$1.stats"
}
mk tok 0 1e-12; mk cmv 0 1; mk cmvd 0 1 dict; mk kv 64M 1e-12
base=$(cpu "$w/tok")
for t in tok cmv cmvd kv; do
    case $t in tok) label="tokens (raw)"; how="price 1e-12";; cmv) label=cmv; how="price 1";;
        cmvd) label=cmvd; how="price 1, dictionary trained on these sessions";; kv) label="kv (materialised)"; how="budget 64M";; esac
    set -- $(tier "$w/$t.stats" "$label")
    c=$( [ $t = tok ] && echo "$base" || cpu "$w/$t")
    echo "| $label | $how | $1 | $2 | $3 | $(awk -v b="$3" -v p="$2" 'BEGIN{printf "%.2f", p ? b/p : 0}') | $c | $(awk -v a="$c" -v b="$base" 'BEGIN{printf "%.2fx", a/b}') |"
done
echo
echo "kv row: the materialised nodes' KV blobs (+ their raw records); the other tiers hold node records only."
echo
fi

# ---- dictionaries on held-out text ---------------------------------------------------------
dict_case() { # NAME TEXT MAX_CHARS
    cname=$1
    half "$2" first "$w/$1.a"; half "$2" second "$w/$1.b"
    python3 scripts/gen_workload.py "$w/$1.wa" --sessions 20 --seed 1 --text "$w/$1.a" --max-chars "$3" >/dev/null
    python3 scripts/gen_workload.py "$w/$1.wb" --sessions 20 --seed 2 --text "$w/$1.b" --max-chars "$3" >/dev/null
    for v in nod dic; do
        d="$w/$1.$v"; "$seqkv" store init "$d" -m "$model" --budget 0 >/dev/null
        "$seqkv" store gc "$d" -m "$model" --price 1 >/dev/null; puts "$d" "$w/$1.wa"
        if [ $v = dic ]; then "$seqkv" store dict "$d" -m "$model" >/dev/null; "$seqkv" store gc "$d" -m "$model" >/dev/null; fi
        "$seqkv" store stats "$d" -m "$model" >"$w/$1.$v.s0"; puts "$d" "$w/$1.wb" b-
        "$seqkv" store stats "$d" -m "$model" >"$w/$1.$v.s1"
    done
    # held-out nodes: what the second half's puts added to the tier (after - before)
    for v in nod dic; do
        c=$([ $v = nod ] && echo cmv || echo cmvd); lab=$([ $v = nod ] && echo "cmv (no dictionary)" || echo "cmvd (store dictionary)")
        set -- $(tier "$w/$1.$v.s0" $c) $(tier "$w/$1.$v.s1" $c)
        awk -v n0="$1" -v p0="$2" -v b0="$3" -v n1="$4" -v p1="$5" -v b1="$6" -v name="$name" -v lab="$lab" 'BEGIN {
            n = n1 - n0; p = p1 - p0; b = b1 - b0
            printf "| %s | %s | %d | %d | %.2f | %.2f |\n", name, lab, n, p, b / p, (b - 88 * n - 2 * p) * 8 / p }'
        set -- "$cname"
    done
}
echo "## Store-trained dictionary on held-out text"
echo
echo "Each text is cut in two halves: 20 workload sessions (--max-chars 2400; chat 1400, its tokens are shorter)"
echo "from the first half are put"
echo "(price 1: every node cheap-coded); in the dictionary store \`store dict\` then trains the dictionary on"
echo "them (the store's unique positions, 65536 ids at most) and \`store gc\` re-codes them under it; then 20"
echo "sessions (seed 2) from the second half are put. The rows are what those puts added to the tier (the"
echo "second half's nodes, and the split of the shared BOS node). payload bits/position: the coded"
echo "record's bytes less its 88-byte header and 2-byte surprisals (the cmv/cmvd header of 8/20 bytes included)."
echo "Raw token ids of this vocabulary: $(python3 -c "import math,sys; print(math.ceil(math.log2(4096)))") bits; the raw tier's record: 64 bits/position + 80 bytes/node."
echo
echo "| text | codec | nodes | positions | record bytes/position | payload bits/position |"
echo "|---|---|---|---|---|---|"
head -c 76000 tests/data/model_ref/heldout.txt >"$w/kjv.txt"
[ "${ONLY:-}" = chat ] || { name="held-out KJV"; dict_case kjv "$w/kjv.txt" 2400; }
python3 bench/chat_text.py 76000 >"$w/chat.txt"
name="chat-like (Debian docs)"; dict_case chat "$w/chat.txt" 1400
