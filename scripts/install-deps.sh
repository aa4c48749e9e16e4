#!/bin/sh
# Install the Debian packages seqkv needs to build and test.
#   scripts/install-deps.sh          build + test dependencies (gcc and clang: CI tests both)
#   scripts/install-deps.sh --train  also the training toolchain (tools/train/)
#   scripts/install-deps.sh --corpus also the evaluation texts (KJV Bible, fortunes)
#   scripts/install-deps.sh --bench  also what `seqkv bench` uses (gnuplot for plots, the texts)
#   scripts/install-deps.sh --help   this text
# Options combine (--train --bench). Idempotent: packages already present are skipped;
# run as root (or via sudo). Also installs the server tests' npm client (tests/server:
# `npm ci`, from its lockfile). When another apt or dpkg holds the package lock (an
# unattended upgrade on a fresh machine), it waits for it: up to $APT_LOCK_WAIT seconds
# (default 600), polling every $APT_LOCK_POLL (default 5).
set -eu
pkgs="build-essential clang pkg-config python3 python3-dev python3-setuptools python3-numpy python3-pip python3-venv bible-kjv python3-regex liblmdb-dev libzstd-dev libxxhash-dev
      libmicrohttpd-dev libjansson-dev libhiredis-dev libcurl4-openssl-dev redis-server redis-sentinel haproxy curl
      python3-pytest python3-requests python3-aiohttp python3-jsonschema python3-wget python3-filelock
      python3-prometheus-client"
for arg in "$@"; do
    case "$arg" in
        --train)  pkgs="$pkgs python3-torch python3-sentencepiece sentencepiece libopenblas0-pthread bible-kjv" ;;
        --corpus) pkgs="$pkgs bible-kjv fortunes" ;;
        --bench)  pkgs="$pkgs gnuplot-nox bible-kjv fortunes" ;;
        -h|--help) sed -n '2,10p' "$0" | cut -c3-; exit 0 ;;
        *) echo "install-deps.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done
# apt_run CMD...: runs an apt-get command line; while it fails because another process
# holds apt's or dpkg's lock, waits and tries again instead of failing at once.
apt_run() {
    waited=0
    while :; do
        if out=$("$@" -o DPkg::Lock::Timeout=0 2>&1); then return 0; fi
        case "$out" in
            *"Could not get lock"*|*"Unable to acquire the dpkg frontend lock"*|*"Unable to lock"*) ;;
            *) printf '%s\n' "$out" >&2; return 1 ;;
        esac
        if [ "$waited" -ge "${APT_LOCK_WAIT:-600}" ]; then
            printf '%s\n' "$out" >&2
            echo "install-deps.sh: the package lock was still held after ${waited} s; try again later" >&2
            return 1
        fi
        [ "$waited" -eq 0 ] && echo "install-deps.sh: another apt or dpkg holds the package lock; waiting for it (up to ${APT_LOCK_WAIT:-600} s)" >&2
        sleep "${APT_LOCK_POLL:-5}"
        waited=$((waited + ${APT_LOCK_POLL:-5}))
        [ "${APT_LOCK_POLL:-5}" -gt 0 ] || waited=$((waited + 1))
    done
}
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node for the server tests: Debian's packages only when no node/npm is installed at all.
{ command -v node && command -v npm; } >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "install-deps.sh: installing$missing" >&2
    apt_run $SUDO apt-get update -qq
    apt_run $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi
# The official openai client for tests/test_server.py, pinned by tests/server/package-lock.json.
srvtests="$(dirname "$0")/../tests/server"
if [ ! -d "$srvtests/node_modules/openai" ]; then
    echo "install-deps.sh: npm ci in tests/server" >&2
    (cd "$srvtests" && npm ci --no-audit --no-fund >/dev/null)
fi
