#!/bin/sh
# make bench: runs the benchmarks and records Markdown results in bench/results/.
# Models: the bundled model (models/) and stories260K from ../shared when present.
# Numbers depend on the machine and its load: each file records both.
set -u
build=${1:-build}
cd "$(dirname "$0")/.." || exit 2
out=bench/results
mkdir -p "$out"
shared=${SEQKV_SHARED:-../shared}
models=""
for f in models/*.gguf "$shared/models/stories260K/stories260K.gguf"; do [ -f "$f" ] && models="$models $f"; done
kjv_text=$(mktemp)
stories_text=$(mktemp --suffix=-stories)
trap 'rm -f "$kjv_text" "$stories_text"' EXIT
# session texts are capped at 60,000 bytes so that token-by-token restores stay short
head -c 60000 tests/data/model_ref/heldout.txt >"$kjv_text" # KJV books held out from kjv-4m's training
if [ -f "$shared/corpus/stories260K_samples.txt" ]; then head -c 60000 "$shared/corpus/stories260K_samples.txt" >"$stories_text"; else : >"$stories_text"; fi

# BENCH_ONLY="engine quant" runs only those blocks (engine session coder quant restore store near).
want() {
    [ -z "${BENCH_ONLY:-}" ] && return 0
    case " $BENCH_ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}

stamp() {
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
    echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg). Reproduce: make bench."
    echo
}

if want engine; then
{
    echo "# Engine throughput"
    echo
    stamp
    echo "Prefill: one batch of 512 tokens into an empty cache (like llama-bench pp512)."
    echo "Decode: 256 tokens one at a time into an empty cache (like llama-bench tg256). Best of 5."
    echo "Peak RSS is the process's maximum resident set so far. 'KV ...' rows hold the KV cache in"
    echo "that per-vector scheme (docs/kvquant.md): attention reads dequantized values from an f32"
    echo "shadow, so they show the cost of quantizing on write, not a memory saving."
    echo
    echo "| model | kernels | threads | prefill tok/s | decode tok/s | peak RSS MiB |"
    echo "|---|---|---:|---:|---:|---:|"
    for m in $models; do "$build/bench/bench_engine" "$m" 512 256 5; done
} >"$out/engine.md"
echo "wrote $out/engine.md"
fi

if want session; then
{
    echo "# Session codecs vs the plain engine"
    echo
    stamp
    echo "Same tokens, same segments (the model's context), 1 thread. 'restore + verify' includes"
    echo "recomputing the KV digest; the model codec restores token by token (the default)."
    echo "bits/token counts the whole .skv file. Texts: the first 60,000 bytes of each."
    for m in $models; do
        for t in "$stories_text" "$kjv_text"; do
            [ -s "$t" ] || continue
            echo
            echo "## $(basename "$m") on $(case "$t" in *stories*) echo "stories260K samples (in-domain for stories260K)";; *) echo "held-out KJV (Ruth, Ecclesiastes, Jonah, Galatians, James; in-domain for kjv-4m)";; esac)"
            echo
            echo "| what | tokens | seconds | tokens/s | bits/token |"
            echo "|---|---:|---:|---:|---:|"
            "$build/bench/bench_session" "$m" "$t" 0 1
        done
    done
} >"$out/session.md"
echo "wrote $out/session.md"
fi

if want coder; then
{
    echo "# Entropy coder and probability quantizer"
    echo
    stamp
    "$build/bench/bench_coder"
} >"$out/coder.md"
echo "wrote $out/coder.md"
fi

if want quant; then
{
    echo "# Per-vector quantizers"
    echo
    stamp
    "$build/bench/bench_quant"
} >"$out/quant.md"
echo "wrote $out/quant.md"
fi

if want restore; then
{
    echo "# Restore speed: raw tokens vs model-coded, token by token vs speculative"
    echo
    stamp
    echo "1 thread, segments of the model's context, every restore verifies the KV digest and the"
    echo "speculative restores are checked to give the same tokens. Seconds are CPU seconds of the"
    echo "process (the machine is shared; wall time swings with the load). 'vs raw' = speed relative"
    echo "to the raw-token restore (one batched prefill). drafted/accepted: n-gram draft tokens"
    echo "verified / confirmed by the decoded stream; tokens/pass: tokens restored per forward pass."
    echo "Best of enough repetitions to restore about 20000 tokens. 'x2' rows store the first"
    echo "1800 (kjv-4m) or 500 (stories260K) bytes of the text twice, inside one segment: a session"
    echo "that quotes earlier content, the case the n-gram draft is made for. 'batch restore' rows"
    echo "restore all the text's segments as one queue (skv_session_restore_batch: one forward pass"
    echo "runs the next token of every segment); 'queue of 256-token sessions' rows cut the text into"
    echo "sessions of 256 tokens (a store restoring many short sessions)."
    echo
    echo "| model | text | restore | tokens | CPU s | tokens/s | vs raw | drafted | accepted | tokens/pass |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    for m in $models; do
        case "$m" in *stories*) ind=stories; rep=500;; *) ind=kjv; rep=1800;; esac
        for t in "$stories_text" tests/data/model_ref/heldout.txt; do
            [ -s "$t" ] || continue
            case "$t" in *stories*) tk=stories;; *) tk=kjv;; esac
            name=$(case $tk in stories) echo "stories260K samples";; *) echo "held-out KJV";; esac)
            dom=$([ $tk = $ind ] && echo "in-domain" || echo "out-of-domain")
            "$build/bench/bench_restore" "$m" "$t" "$name ($dom)" 24000 0 1
            "$build/bench/bench_restore" "$m" "$t" "$name x2 ($dom)" $rep 0 1 2
            "$build/bench/bench_restore" "$m" "$t" "$name, queue of 256-token sessions ($dom)" 24000 256 1 1 nospec
        done
    done
} >"$out/restore.md.new"
# The hand-written sections after the generated table (each starts with "## ": measured runs
# of codecs and protocols this script does not reproduce) are carried over, not lost.
if [ -f "$out/restore.md" ]; then
    sed -n '/^## /,$p' "$out/restore.md" | { read -r first || exit 0; echo; echo "$first"; cat; } >>"$out/restore.md.new"
fi
mv "$out/restore.md.new" "$out/restore.md"
echo "wrote $out/restore.md"
fi

# --- session store (issue 5): workload through the CLI + bench_store -----------------
if want store; then
{
    echo "# Session store: a multi-session workload, throughput, lookups"
    echo
    stamp
    /usr/bin/python3 scripts/gen_workload.py --report "$build/seqkv" --sessions 60 --seed 1 --budgets 64M,4M,0
    echo
    echo "## Throughput (bench/bench_store.c: what is measured is described in its header)"
    echo
    "$build/bench/bench_store" models/kjv-4m.gguf tests/data/model_ref/heldout.txt 24 100000
} >"$out/store.md"
echo "wrote $out/store.md"
fi

# --- near-duplicate reuse (issue 20): bench_near + TQ-4 cross-check --------------------
if want near; then
{
    echo "# Near-duplicate reuse: quality and cost against the exact cache"
    echo
    stamp
    echo "What is measured: bench/bench_near.c's header; the method: docs/near.md. Model kjv-4m"
    echo "(4 layers, GQA 4/2, head_dim 64); text: KJV books held out from its training. Every row is the"
    echo "mean of 3 instances; per instance in near.csv; the KL curves in near.svg. Times are CPU time"
    echo "(this process, one thread, best of 3) and wall time under the machine's load (shared cores)."
    echo "TQ-4 is the fair storage baseline (issue 44): only the stored KV (query positions 0 .. nq-2) is"
    echo "quantized; the last query token and the continuation run with full-precision KV of their own."
    echo
    "$build/bench/bench_near" models/kjv-4m.gguf tests/data/model_ref/heldout.txt "$out/near.csv" "$out/near.svg"
    echo
    echo "For contrast, \`seqkv kv-quality --schemes tq4\` on the first 20,000 bytes of the same text, which holds"
    echo "*every* position quantized as the text runs (the protocol the TQ-4 column used before issue 44):"
    echo
    head -c 20000 tests/data/model_ref/heldout.txt >"$kjv_text.near"
    "$build/seqkv" kv-quality -m models/kjv-4m.gguf -f "$kjv_text.near" --schemes tq4 | grep -E '^\|'
    rm -f "$kjv_text.near"
    st_model="$shared/models/stories260K/stories260K.gguf"
    if [ -f "$st_model" ] && [ -s "$stories_text" ]; then
        echo
        echo "## stories260K (5 layers, head_dim 8, context 512: half-length workloads) on its own samples"
        echo
        echo "Per instance in near_stories.csv, curves in near_stories.svg. Its head_dim of 8 is far below what"
        echo "TurboQuant is designed for, hence TQ-4's larger KL here."
        echo
        "$build/bench/bench_near" "$st_model" "$shared/corpus/stories260K_samples.txt" "$out/near_stories.csv" "$out/near_stories.svg"
    fi
} >"$out/near.md"
echo "wrote $out/near.md"
fi
