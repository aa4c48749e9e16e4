#!/bin/sh
# scripts/gpu_check.sh - the device check of the CUDA backend (docs/cuda.md).
#
# From a clean build folder (build-gpucheck/, removed first) it builds the library with
# CUDA=1 and warnings as errors, runs tests/test_cuda_order (the host model, on this CPU)
# and tests/test_cuda_gpu (the kernels on the device vs the CPU reference, bit for bit),
# then bench/bench_cuda; each step under its own time limit, so the whole check ends
# within 8 minutes on a fresh 16-core GPU machine (two tries fit in 15 minutes).
# Results, small text files under $OUT (default ./build-gpucheck-out):
#   env.txt      date, GPU (nvidia-smi), driver, nvcc, CPU, commit
#   build.txt    the build's last lines and its status
#   tests.txt    the PASS / FAIL / SKIP lines of both tests
#   bench.csv    bench_cuda's table (or its SKIP line)
#   ptx.txt      scripts/cuda_ptx_check.sh on the kernels' PTX
#   summary.txt  one line per step: ok / FAILED / SKIPPED and seconds; last line overall
# Where the build fails (a device image without the library's dependencies), the binaries
# of a `make CUDA=1` build carried to the machine (GPU_PREBUILT, default build-cuda/) run
# instead, and the check still reports FAILED for the build.
# Exit status: 0 when nothing failed (a machine without a GPU reports SKIPPED and exits 0),
# 1 when a step failed. Environment: OUT, JOBS (default nproc), CUDA_ARCH (default sm_90a),
# BENCH_ITERS (default 20).
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$(pwd)/build-gpucheck-out}
JOBS=${JOBS:-$(nproc)}
B=build-gpucheck
mkdir -p "$OUT" || exit 2
summary="$OUT/summary.txt"
: >"$summary"
failed=0
skipped=0

now() { date +%s; }
note() { echo "$1" | tee -a "$summary"; }

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | wc -l) changed files"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "nvcc: $(${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc} --version 2>&1 | tail -2 | head -1)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv 2>&1
    else
        echo "nvidia-smi: not found"
    fi
} >"$OUT/env.txt" 2>&1

# ---- build: CUDA=1, -Werror, from nothing ----
t0=$(now)
rm -rf "$B"
targets="lib $B/tests/test_cuda_order $B/tests/test_cuda_gpu $B/bench/bench_cuda"
# shellcheck disable=SC2086
timeout 210 make -j"$JOBS" CUDA=1 BUILD="$B" WERROR=-Werror ${CUDA_ARCH:+CUDA_ARCH=$CUDA_ARCH} $targets \
    >"$OUT/build.log" 2>&1
rc=$?
tail -n 40 "$OUT/build.log" >"$OUT/build.txt"
echo "exit status $rc" >>"$OUT/build.txt"
rm -f "$OUT/build.log"
if [ $rc -eq 0 ]; then
    note "build: ok ($(($(now) - t0)) s, CUDA=1 WERROR=-Werror, $JOBS jobs)"
else
    note "build: FAILED (exit $rc, $(($(now) - t0)) s; build.txt)"
    # A device image without the library's dependencies (lmdb, zstd, ... headers) cannot
    # build it; binaries built elsewhere with `make CUDA=1` and carried here still run
    # (they need only libc, libm and libstdc++: the CUDA runtime is linked statically).
    pre=${GPU_PREBUILT:-build-cuda}
    if [ -x "$pre/tests/test_cuda_gpu" ] && [ -x "$pre/tests/test_cuda_order" ] && [ -x "$pre/bench/bench_cuda" ]; then
        failed=1
        B=$pre
        note "build: running the binaries carried in $pre/ instead"
    else
        note "overall: FAILED"
        exit 1
    fi
fi

# ---- the device code's PTX: explicit roundings only, no .approx, no .ftz ----
if timeout 60 make CUDA=1 BUILD="$B" ${CUDA_ARCH:+CUDA_ARCH=$CUDA_ARCH} cuda-ptx-check >"$OUT/ptx.txt" 2>&1; then
    note "ptx: ok ($(tail -n 1 "$OUT/ptx.txt" | sed 's/.*: ok (//; s/)$//'))"
else
    failed=1
    note "ptx: FAILED (ptx.txt)"
fi

# ---- tests ----
t0=$(now)
: >"$OUT/tests.txt"
for t in test_cuda_order test_cuda_gpu; do
    timeout 60 "$B/tests/$t" >>"$OUT/tests.txt" 2>&1
    rc=$?
    [ $rc -ne 0 ] && echo "EXIT $t: $rc" >>"$OUT/tests.txt"
done
np=$(grep -c '^PASS' "$OUT/tests.txt")
nf=$(grep -c '^FAIL\|^EXIT' "$OUT/tests.txt")
ns=$(grep -c '^SKIP' "$OUT/tests.txt")
if [ "$nf" -ne 0 ]; then
    failed=1
    note "tests: FAILED ($np passed, $nf failed, $ns skipped, $(($(now) - t0)) s; tests.txt)"
elif grep -q '^SKIP test_cuda_gpu' "$OUT/tests.txt"; then
    skipped=1
    note "tests: SKIPPED on the device: $(grep -m1 '^SKIP test_cuda_gpu' "$OUT/tests.txt" | cut -d: -f3- | sed 's/^ //') ($np passed)"
else
    note "tests: ok ($np passed, 0 failed, $(($(now) - t0)) s)"
fi

# ---- benchmark ----
t0=$(now)
timeout 90 "$B/bench/bench_cuda" "${BENCH_ITERS:-20}" >"$OUT/bench.csv" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    failed=1
    note "bench: FAILED (exit $rc, $(($(now) - t0)) s; bench.csv)"
elif grep -q '^SKIP' "$OUT/bench.csv"; then
    skipped=1
    note "bench: SKIPPED: $(sed -n 's/^SKIP: //p' "$OUT/bench.csv")"
else
    note "bench: ok ($(($(now) - t0)) s; bench.csv)"
fi

if [ $failed -ne 0 ]; then note "overall: FAILED"; exit 1; fi
if [ $skipped -ne 0 ]; then note "overall: SKIPPED (no device ran the kernels; the build and the host model passed)"; exit 0; fi
note "overall: ok"
