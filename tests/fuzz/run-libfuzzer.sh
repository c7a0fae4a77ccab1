#!/bin/sh
# run-libfuzzer.sh BUILDDIR SECONDS [NAME...]: run each libFuzzer target (all of them if none
# is named) for SECONDS, one after another, starting from its committed corpus (never
# modified: new inputs go to a scratch directory). Fails on the first crash, leak, timeout or
# out-of-memory: the input that caused it is kept in $FUZZ_ARTIFACTS (default
# /tmp/profd-fuzz-artifacts) and the fuzzer's last lines are printed. Prints each target's
# final statistics (executions, coverage, corpus size). Expects BUILDDIR to be a clang build
# with the libFuzzer targets (see tests/run-all.sh).
set -eu
cd "$(dirname "$0")/../.."
build=$1
secs=$2
shift 2
names=${*:-$(ls tests/fuzz/fuzz_*.c | sed 's|.*/||; s|\.c$||')}
artifacts=${FUZZ_ARTIFACTS:-/tmp/profd-fuzz-artifacts}
mkdir -p "$artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
for name in $names; do
    exe=$build/tests/fuzz/$name-libfuzzer
    corpus=tests/fuzz/corpus/${name#fuzz_}
    dict=tests/fuzz/${name#fuzz_}.dict
    [ -x "$exe" ] || { echo "$exe: not built" >&2; exit 1; }
    mkdir -p "$scratch/$name"
    set -- -max_total_time="$secs" -timeout=20 -rss_limit_mb=2560 -print_final_stats=1 \
        -artifact_prefix="$artifacts/$name-"
    [ -f "$dict" ] && set -- "$@" -dict="$dict"
    log=$scratch/$name.log
    if ! "$exe" "$@" "$scratch/$name" "$corpus" >"$log" 2>&1; then
        echo "=== $name FAILED; the input is in $artifacts:" >&2
        tail -60 "$log" >&2
        exit 1
    fi
    # The last status line (cov, ft, corp, exec/s) and the total executions.
    status=$(grep -E '^#[0-9]+' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "$name: $execs executions; $status"
done
