#!/bin/sh
# The fuzzing figures of docs/reliability.md, measured and regenerated.
#
#   scripts/reliability.sh run TARGET SECONDS  one libFuzzer run of build-fuzz/fuzz/fuzz_TARGET
#                                              (make fuzz) for SECONDS, niced; appends a row to
#                                              fuzz/results.tsv; exit 1 if it found a crash
#   scripts/reliability.sh merge TARGET        adds to fuzz/corpus/TARGET only the inputs of the
#                                              working corpus that add coverage (-merge=1)
#   scripts/reliability.sh record TARGET LOG SECONDS  a row from the log of a run started by hand
#   scripts/reliability.sh valgrind [TEST.py...]  the CLI tests (default: every one that runs
#                                              seqkv through clitest.run, and test_example.py)
#                                              with seqkv under Valgrind memcheck
#   scripts/reliability.sh table               the per-target table (sums over the runs)
#   scripts/reliability.sh doc                 rewrites the table in docs/reliability.md
#                                              (between the fuzz-table markers)
#
# A run works on build-fuzz/work/TARGET (seeded with the committed corpus, kept between
# runs, so runs add up) and leaves its log in build-fuzz/logs/ and any crashing input in
# build-fuzz/artifacts/TARGET/. A row: target, date, commit, seconds, executions, cov, ft,
# crashes, peak RSS (MB), CPU.
set -eu
cd "$(dirname "$0")/.."
RESULTS=fuzz/results.tsv
DOC=docs/reliability.md

run_one() {
    t=$1 secs=$2 bin=build-fuzz/fuzz/fuzz_$1
    # a fuzzer older than any source it is built from is rebuilt first (a stale one would
    # fuzz old code under the current commit's name; seen 2026-12-04: a fix of 07:34 was
    # not in the binaries fuzzing until 11:20)
    if [ ! -x "$bin" ] || [ -n "$(find src include fuzz/fuzz_"$t".c Makefile -newer "$bin" -print -quit)" ]; then
        echo "reliability: $bin missing or older than the sources: make fuzz" >&2
        make -s fuzz >/dev/null || { echo "reliability: make fuzz failed" >&2; exit 2; }
    fi
    # the commit the binary was built from, taken now: the tree may move on while it runs
    # (2026-12-05: two rows were written under a commit checked out after their start)
    commit=$(git rev-parse --short HEAD)
    mkdir -p "build-fuzz/work/$t" "build-fuzz/artifacts/$t" build-fuzz/logs
    log=build-fuzz/logs/$t.$(date +%Y%m%d-%H%M%S).log
    before=$(findings "$t")
    start=$(date +%s)
    rc=0
    # shellcheck disable=SC2046 # the options are words
    env $(target_env "$t") nice -n 19 "$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=120 \
        -rss_limit_mb=2048 $(target_opts "$t") -artifact_prefix="build-fuzz/artifacts/$t/" \
        "build-fuzz/work/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    wall=$(( $(date +%s) - start ))
    crashes=$(( $(findings "$t") - before ))
    row "$t" "$wall" "$log" "$crashes" "$commit" >>"$RESULTS"
    tail -n 1 "$RESULTS"
    [ "$rc" -eq 0 ] || { echo "reliability: fuzz_$t exited $rc: see $log" >&2; exit 1; }
}

# Per-target libFuzzer options. trie: a program's cost grows with the square of its length
# (skv_trie_check after every operation over a trie that grows with it: a 4,096-byte program
# took 100 ms, a 1,024-byte one 11 ms); 1,024 bytes still fill the 64 sessions the model
# keeps and leave room for removes and matches.
target_opts() {
    case $1 in
    trie) echo -max_len=1024 ;;
    http_mhd) echo -max_len=131072 ;; # the seeds up to 300 KB replay whole in make test
    esac
}

# Per-target environment. http, store and session run the fuzzing model
# fuzz/models/tiny.gguf by default (their harnesses load it: 2 layers, n_embd 16, so the
# model's forward no longer dominates; docs/reliability.md "2026-12-02"), the replays in
# make test too; SEQKV_FUZZ_{HTTP,STORE,SESSION}_MODEL would override it (nothing here
# does: the store and session corpora are tied to the tiny model's fingerprint).
# Every finding stops the run and counts (issue 41): without halt_on_error a UBSan report
# printed and the run went on with "0 crashes". The fuzzers are also built with
# -fno-sanitize-recover=all (make fuzz); these options make the runtime agree.
SAN_ENV="ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
target_env() {
    case $1 in
    *) echo "$SAN_ENV" ;;
    esac
}

# Crashes, leaks, timeouts and OOMs kept so far (slow-unit-* files are not findings). The
# timeout is wall-clock and the runs are niced: at load 14 a 0.4 CPU-second session input
# (a kv-limit floor decode) took over 25 s, so the limit is 120 s.
findings() {
    ls "build-fuzz/artifacts/$1" | grep -c '^\(crash\|leak\|timeout\|oom\)-' || true
}

# One results row from a log: the last "cov:" line gives coverage, the final stats the count;
# $5: the commit (default: HEAD's now). Column 11, "halt": run with every sanitizer finding
# fatal (since 2026-12-06); rows without it ran with UBSan recovering (its reports not counted).
row() {
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$3" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$3" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$3" | tail -n 1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$3" | tail -n 1 | cut -d' ' -f2)
    cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\thalt\n' "$1" "$(date -u +%Y-%m-%dT%H:%MZ)" \
        "${5:-$(git rev-parse --short HEAD)}" "$2" "${execs:-0}" "${cov:-0}" "${ft:-0}" "$4" "${rss:-0}" "$cpu"
}

# The CLI tests with every seqkv run under memcheck (tests/clitest.py: $SEQKV_WRAP); a
# memcheck error makes seqkv exit 99 (so the case fails) and is kept in build/valgrind/.
valgrind_cli() {
    [ $# -gt 0 ] || set -- $(grep -l 'from clitest import.*\<run\>' tests/test_*.py) tests/test_example.py
    vdir=${SEQKV_BUILD:-build}/valgrind
    rm -rf "$vdir"; mkdir -p "$vdir"
    export SEQKV_STORE_MAP_SIZE=1073741824 # Valgrind 3.19 cannot map the stores' 64 GiB default
    export SEQKV_WRAP="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --log-file=$vdir/vg.%p.log"
    start=$(date +%s)
    for t in "$@"; do
        t0=$(date +%s)
        nice -n 19 /usr/bin/python3 "$t" | tee -a "$vdir/results.txt" | grep -v '^PASS' || true
        echo "valgrind-cli: $t: $(( $(date +%s) - t0 )) s, $(ls "$vdir" | grep -c '^vg\.' || true) runs so far" | tee -a "$vdir/times.txt"
    done
    pass=$(grep -c '^PASS' "$vdir/results.txt" || true)
    fail=$(grep -c '^FAIL' "$vdir/results.txt" || true)
    errs=$(cat "$vdir"/vg.*.log 2>/dev/null | grep -c '^==[0-9]*== [A-Z]' || true)
    runs=$(ls "$vdir" | grep -c '^vg\.' || true)
    echo "valgrind-cli: $* : $pass passed, $fail failed; $runs seqkv runs under memcheck, $errs error lines; $(( $(date +%s) - start )) s"
    [ "$fail" -eq 0 ] && [ "$errs" -eq 0 ]
}

merge() {
    nice -n 19 "build-fuzz/fuzz/fuzz_$1" -merge=1 "fuzz/corpus/$1" "build-fuzz/work/$1" 2>&1 | tail -n 2
}

# Sums per target: executions and hours add up over runs; cov/ft are the last run's.
# "counted": executions with every sanitizer finding fatal (column 11 "halt"); "older":
# executions before that, when a UBSan report did not stop the run or count as a crash.
table() {
    echo '| target | counted executions | older executions | hours | exec/s | cov | ft | crashes | 10^7 counted | commit |'
    echo '|---|---:|---:|---:|---:|---:|---:|---:|---|---|'
    awk -F'\t' '!/^#/ { h = ($11 == "halt"); n[$1] += h ? $5 : 0; o[$1] += h ? 0 : $5; s[$1] += $4;
                        c[$1] = $6; f[$1] = $7; k[$1] += $8; g[$1] = $3;
                        if (!($1 in seen)) { seen[$1] = 1; order[++m] = $1 } }
        END { for (i = 1; i <= m; i++) { t = order[i];
                printf "| %s | %d | %d | %.2f | %d | %d | %d | %d | %s | %s |\n", t, n[t], o[t], s[t] / 3600,
                       (s[t] ? (n[t] + o[t]) / s[t] : 0), c[t], f[t], k[t], (n[t] >= 1e7 ? "yes" : "no"), g[t] } }' "$RESULTS"
    echo
    echo "CPU: $(awk -F'\t' '!/^#/ { print $10 }' "$RESULTS" | sort -u | paste -sd';' -); every run under"
    echo "\`nice -n 19\` on a machine shared with other jobs; rows in \`$RESULTS\`."
}

doc() {
    tmp=$DOC.tmp
    table >"$tmp.table"
    awk -v tf="$tmp.table" '/<!-- fuzz-table begin/ { print; while ((getline l < tf) > 0) print l; skip = 1; next }
        /<!-- fuzz-table end/ { skip = 0 } !skip' "$DOC" >"$tmp"
    mv "$tmp" "$DOC"
    rm -f "$tmp.table"
}

# The whole dispatch is one command, parsed before it runs: editing this file while a long
# run is in progress cannot make the shell read on from a shifted offset.
main() {
    case "${1:-}" in
    run) run_one "$2" "$3" ;;
    merge) merge "$2" ;;
    record) row "$2" "$4" "$3" "$(grep -c '^==[0-9]*==ERROR\|^SUMMARY: libFuzzer' "$3" || true)" >>"$RESULTS" ;;
    valgrind) shift; valgrind_cli "$@" ;;
    table) table ;;
    doc) doc ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
}
main "$@"; exit $?
