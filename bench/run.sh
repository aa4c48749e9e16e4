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
stories_text="$shared/corpus/stories260K_samples.txt"
kjv_text=$(mktemp)
trap 'rm -f "$kjv_text"' EXIT
if command -v bible >/dev/null 2>&1; then bible -f 'Mat1:1-Mat28:20' >"$kjv_text"; else : >"$kjv_text"; fi

stamp() {
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
    echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg). Reproduce: make bench."
    echo
}

{
    echo "# Engine throughput"
    echo
    stamp
    echo "Prefill: one batch of 512 tokens into an empty cache (like llama-bench pp512)."
    echo "Decode: 256 tokens one at a time into an empty cache (like llama-bench tg256). Best of 5."
    echo "Peak RSS is the process's maximum resident set so far."
    echo
    echo "| model | kernels | threads | prefill tok/s | decode tok/s | peak RSS MiB |"
    echo "|---|---|---:|---:|---:|---:|"
    for m in $models; do "$build/bench/bench_engine" "$m" 512 256 5; done
} >"$out/engine.md"
echo "wrote $out/engine.md"

{
    echo "# Session codecs vs the plain engine"
    echo
    stamp
    echo "Same tokens, same segments (the model's context), 1 thread. 'restore + verify' includes"
    echo "recomputing the KV digest. bits/token counts the whole .skv file."
    for m in $models; do
        for t in "$stories_text" "$kjv_text"; do
            [ -s "$t" ] || continue
            echo
            echo "## $(basename "$m") on $(case "$t" in *stories*) echo "stories260K samples (in-domain for stories260K)";; *) echo "KJV Matthew (Debian bible-kjv)";; esac)"
            echo
            echo "| what | tokens | seconds | tokens/s | bits/token |"
            echo "|---|---:|---:|---:|---:|"
            "$build/bench/bench_session" "$m" "$t" 0 1
        done
    done
} >"$out/session.md"
echo "wrote $out/session.md"

{
    echo "# Entropy coder and probability quantizer"
    echo
    stamp
    "$build/bench/bench_coder"
} >"$out/coder.md"
echo "wrote $out/coder.md"

{
    echo "# Per-vector quantizers"
    echo
    stamp
    "$build/bench/bench_quant"
} >"$out/quant.md"
echo "wrote $out/quant.md"
