"""pypause.py: the Python benchmark target: pausemeter.c's protocol, in Python.

One thread spins on time.monotonic_ns() eight Python calls deep (descend -> ... -> spin);
every gap between two consecutive readings longer than THRESHOLD_NS is a moment it did not
run (a sample's interrupt or stop, preemption) and is recorded with its CLOCK_MONOTONIC start.

Usage: python3 pypause.py WARM_MS SECONDS [THRESHOLD_NS]. Prints "ready PID", waits for a line
on stdin, spins WARM_MS without recording, prints "measuring T0", records gaps for SECONDS,
prints "done T1 N", then N lines "START_NS DURATION_NS", then "end"."""
import os
import sys
import time


def spin(end, threshold, gaps):
    mono = time.monotonic_ns
    prev = mono()
    while prev < end:
        now = mono()
        if now - prev > threshold:
            gaps.append((prev, now - prev))
        prev = now


def descend(depth, end, threshold, gaps):
    if depth:
        return descend(depth - 1, end, threshold, gaps)
    return spin(end, threshold, gaps)


def main():
    warm_ms, secs = int(sys.argv[1]), float(sys.argv[2])
    threshold = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    print("ready %d" % os.getpid(), flush=True)
    sys.stdin.readline()
    descend(6, time.monotonic_ns() + warm_ms * 1000000, threshold, [])
    print("measuring %d" % time.monotonic_ns(), flush=True)
    gaps = []
    descend(6, time.monotonic_ns() + int(secs * 1e9), threshold, gaps)
    out = ["done %d %d" % (time.monotonic_ns(), len(gaps))]
    out += ["%d %d" % g for g in gaps]
    out.append("end")
    # Written with os.write, each partial write's rest again: a stop that lands while a
    # large write fills the pipe makes it return short (as a signal would), and CPython's
    # sys.stdout then drops the rest (3.11 and 3.12 here, with a signal handler and no
    # profd too): the bench's reader lost gap lines under the stop path at 999 Hz.
    b = ("\n".join(out) + "\n").encode()
    while b:
        b = b[os.write(1, b):]


main()
