#!/bin/sh
# Runs every test binary in BUILD/tests (and every tests/test_*.py with
# Debian's python3), prints their PASS/FAIL/SKIP lines, and ends with the
# summary line "N passed, M failed". Exit status 0 iff nothing failed.
# Usage: tests/run.sh [BUILD_DIR]   (default: build)
#        TESTS="test_store test_cli_options" tests/run.sh   runs only those (binary or .py names)
# Shared assets (README "Tests"): $SEQKV_SHARED, else ../shared. With
# SEQKV_REQUIRE_SHARED=1 (CI) their absence fails the run: tests/test.h and
# tests/testenv.py turn such skips into FAIL lines, and this script also
# counts any remaining SKIP line that names them as a failure.
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 2
py=/usr/bin/python3
[ -x "$py" ] || py=python3
log=$(mktemp) || exit 2
trap 'rm -f "$log"' EXIT
crashed=0
# shared_missing: prints why SEQKV_REQUIRE_SHARED=1 cannot be met here, if it cannot.
shared_missing() {
    [ "${SEQKV_REQUIRE_SHARED:-}" = 1 ] || return 0
    d=${SEQKV_SHARED:-../shared}
    [ -f "$d/models/stories260K/stories260K.gguf" ] && return 0
    echo "FAIL run.sh:shared: SEQKV_REQUIRE_SHARED=1 but $d/models/stories260K/stories260K.gguf is missing (set SEQKV_SHARED)"
}
shared_missing | tee -a "$log"
# selected NAME: whether $TESTS (space-separated names, without .py) asks for test NAME.
selected() {
    [ -z "${TESTS:-}" ] && return 0
    for x in $TESTS; do [ "$x" = "${1%.py}" ] && return 0; done
    return 1
}
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    selected "$(basename "$t")" || continue
    SEQKV_BUILD="$build" "$t" >"$t.out" 2>"$t.err"
    rc=$?
    cat "$t.out"; cat "$t.out" >>"$log"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL' "$t.out"; then
        echo "FAIL $(basename "$t"):<exit>: exited with status $rc"; sed 's/^/    /' "$t.err" | tail -n 20
        crashed=$((crashed + 1))
    elif grep -q '^FAIL' "$t.out"; then
        sed 's/^/    /' "$t.err" | tail -n 20
    fi
done
for t in tests/test_*.py; do
    [ -f "$t" ] || continue
    selected "$(basename "$t")" || continue
    SEQKV_BUILD="$build" "$py" "$t" >"$build/tests/$(basename "$t").out" 2>"$build/tests/$(basename "$t").err"
    rc=$?
    out="$build/tests/$(basename "$t").out"
    cat "$out"; cat "$out" >>"$log"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL' "$out"; then
        echo "FAIL $(basename "$t"):<exit>: exited with status $rc"; tail -n 20 "$build/tests/$(basename "$t").err" | sed 's/^/    /'
        crashed=$((crashed + 1))
    fi
done
if [ "${SEQKV_REQUIRE_SHARED:-}" = 1 ]; then
    # a skip for a missing shared asset that no helper turned into a FAIL
    req='^SKIP (.*(\.\./shared|stories260K|SEQKV_SHARED))'
    sed -i -E "s#$req#FAIL (SEQKV_REQUIRE_SHARED=1 forbids this skip) \\1#" "$log"
    grep '^FAIL (SEQKV_REQUIRE_SHARED' "$log"
fi
# Cases a clone without the shared assets skips (README "Tests and the shared assets").
noshared=$(grep -cE '^SKIP .*(\.\./shared|stories260K|SEQKV_SHARED)' "$log")
[ "$noshared" -gt 0 ] && echo "($noshared cases skipped for want of the shared assets: set SEQKV_SHARED, README \"Tests and the shared assets\")"
pass=$(grep -c '^PASS' "$log")
fail=$(( $(grep -c '^FAIL' "$log") + crashed ))
skip=$(grep -c '^SKIP' "$log")
[ "$skip" -gt 0 ] && echo "($skip skipped: see SKIP lines above)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
