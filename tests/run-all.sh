#!/bin/sh
# run-all.sh: every test, three ways: the normal build; an ASan/UBSan build; valgrind (unit
# tests under valgrind, integration tests with the daemon under valgrind); every fuzz target
# under libFuzzer for a short fixed time (FUZZ_SECONDS each, 3 by default); and the stateful
# fuzzer against the ASan/UBSan daemon (STATEFUZZ_SECONDS, 60 by default). Expects
# .ci/setup to have run (packages installed, ./build configured).
#
# The integration tests run one at a time, in the foreground: the normal build's, then the
# ASan build's, then with the daemon under valgrind. What needs no quiet machine runs beside
# them, so that the whole run stays well under 30 minutes on a 2-CPU machine:
# - from the start, at SCHED_IDLE (a runnable test process always goes first): the ASan/UBSan
#   tree, the libFuzzer targets, then the unit tests under valgrind;
# - beside the daemon under valgrind (no timing is checked there), at nice 10: libFuzzer.
# Each background part's output is printed when the foreground waits for it.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n=== %s (at %d s)\n' "$*" $(($(date +%s) - start)); }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# wait_for PID NAME: wait for a background part, print its output, stop on its failure.
wait_for() {
    if wait "$1"; then
        cat "$logs/$2"
        printf '(%s: done at %d s)\n' "$2" $(($(date +%s) - start))
    else
        cat "$logs/$2" >&2
        echo "=== $2 FAILED" >&2
        exit 1
    fi
}

# The libFuzzer targets: clang with libFuzzer, ASan and UBSan; their libraries instrumented
# for coverage (-fsanitize=fuzzer-no-link), -fsanitize=fuzzer on the targets.
chrt --idle 0 sh -c '
    set -eu
    [ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
        -Db_lundef=false >/dev/null
    ninja -C build-asan >build-asan/ninja.log 2>&1 || { tail -60 build-asan/ninja.log; exit 1; }
    tail -1 build-asan/ninja.log
    [ -f build-fuzz/build.ninja ] || CC=clang CXX=clang++ meson setup build-fuzz \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args=-fsanitize=fuzzer-no-link -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null
    ninja -C build-fuzz $(ls tests/fuzz/fuzz_*.c | sed "s|^tests/fuzz/\(.*\)\.c$|tests/fuzz/\1-libfuzzer|") \
        >build-fuzz/ninja.log 2>&1 || { tail -60 build-fuzz/ninja.log; exit 1; }
    tail -1 build-fuzz/ninja.log
    echo "=== valgrind: unit tests"
    meson test -C build --no-rebuild --setup valgrind --print-errorlogs
' >"$logs/builds and valgrind unit tests" 2>&1 &
builds=$!

step "build and test (debugoptimized)"
ninja -C build
PROFD_CHAOS_BUDGET=30 meson test -C build --print-errorlogs

step "ASan + UBSan builds, the unit tests under valgrind (begun in the background)"
wait_for "$builds" "builds and valgrind unit tests"

step "ASan + UBSan tests"
# Not the ptrace suite (the transparency tests again on the forced ptrace path: that path's
# code runs here in test_sampler), nor the external one (tests/integration/meson.build), and
# test_chaos for 20 s (30 in the normal build, 60 by default).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    PROFD_CHAOS_BUDGET=20 meson test -C build-asan --no-rebuild --print-errorlogs \
    --no-suite ptrace --no-suite external --no-suite accuracy

step "stateful fuzzer: the ASan/UBSan daemon fed requests by several clients for ${STATEFUZZ_SECONDS:-60} s"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    python3 tests/fuzz/statefuzz.py --build build-asan --seconds "${STATEFUZZ_SECONDS:-60}"

step "valgrind: integration tests with the daemon under valgrind; libFuzzer beside them"
nice -n 10 tests/fuzz/run-libfuzzer.sh build-fuzz "${FUZZ_SECONDS:-3}" \
    >"$logs/libFuzzer, each target for ${FUZZ_SECONDS:-3} s" 2>&1 &
fuzz=$!
meson test -C build --no-rebuild --setup valgrinddaemon --print-errorlogs
step "libFuzzer: each fuzz target for ${FUZZ_SECONDS:-3} s from its corpus (clang, ASan + UBSan)"
wait_for "$fuzz" "libFuzzer, each target for ${FUZZ_SECONDS:-3} s"

step "all tests passed"
