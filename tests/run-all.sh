#!/bin/sh
# run-all.sh: every test, three ways: the normal build; an ASan/UBSan build; valgrind (unit
# tests under valgrind, integration tests with the daemon under valgrind); then every fuzz
# target under libFuzzer for a short fixed time (FUZZ_SECONDS each, 3 by default). Expects
# .ci/setup to have run (packages installed, ./build configured).
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n=== %s (at %d s)\n' "$*" $(($(date +%s) - start)); }

# The ASan/UBSan tree and the libFuzzer targets (clang with libFuzzer, ASan and UBSan; their
# libraries instrumented for coverage: -fsanitize=fuzzer-no-link, -fsanitize=fuzzer on the
# targets) are built while the normal build's tests run, on the CPU time those leave idle:
# SCHED_IDLE, so a runnable test process always goes first. On a 2-CPU machine that takes
# some 3 minutes off the run.
bglog=$(mktemp)
trap 'rm -f "$bglog"' EXIT
chrt --idle 0 sh -c '
    set -eu
    [ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
        -Db_lundef=false >/dev/null
    ninja -C build-asan
    [ -f build-fuzz/build.ninja ] || CC=clang CXX=clang++ meson setup build-fuzz \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args=-fsanitize=fuzzer-no-link -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null
    ninja -C build-fuzz $(ls tests/fuzz/fuzz_*.c | sed "s|^tests/fuzz/\(.*\)\.c$|tests/fuzz/\1-libfuzzer|")
' >"$bglog" 2>&1 &
builds=$!

step "build and test (debugoptimized)"
ninja -C build
PROFD_CHAOS_BUDGET=30 meson test -C build --print-errorlogs

step "ASan + UBSan build (begun in the background) and test"
if ! wait "$builds"; then
    echo "the ASan or libFuzzer build failed:" >&2
    tail -60 "$bglog" >&2
    exit 1
fi
tail -3 "$bglog"
# Not the ptrace suite (the transparency tests again on the forced ptrace path: that path's
# code runs here in test_sampler), nor the external one (tests/integration/meson.build), and
# test_chaos for 20 s (30 in the normal build, 60 by default): CI's whole run must stay well
# under 30 minutes on a 2-CPU machine.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    PROFD_CHAOS_BUDGET=20 meson test -C build-asan --print-errorlogs --no-suite ptrace \
    --no-suite external

step "valgrind: unit tests"
meson test -C build --setup valgrind --print-errorlogs

step "valgrind: integration tests with the daemon under valgrind"
meson test -C build --setup valgrinddaemon --print-errorlogs

step "libFuzzer: each fuzz target for ${FUZZ_SECONDS:-3} s from its corpus (clang, ASan + UBSan)"
tests/fuzz/run-libfuzzer.sh build-fuzz "${FUZZ_SECONDS:-3}"

step "all tests passed"
