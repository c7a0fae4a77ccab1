#!/usr/bin/env python3
"""spans.py: what marking a transaction costs the application, through the thread context
(OpenTelemetry's otel_thread_ctx_v1, which profd reads at each sample) and through messages,
in the same run.

    python3 tests/bench/spans.py --build BUILD_DIR [--runs 5] [--n 3000]

Each run: a fresh profd, then tests/bench/txnbench SOCKET spans N twice, alternating which
goes first: once as shipped (after its first finish, starts and discards publish in the
thread context without a message; a finish asks for its profile by span id), once with
$PROFD_THREAD_CONTEXT=0 (every start and end a message, as before). Beside 4 threads that
spin, N transactions of 200 us of work on one thread, every tenth finished with its profile.
The daemon's request counters say which path each took. Prints a Markdown table: medians
over the runs of each run's p50 and p99 (nanoseconds), and their ratio.

Run as root on the machine the figures are for, never under meson test."""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402


def one(build, ctx, n):
    tmp = tempfile.mkdtemp()
    d = bench.Daemon(build, tmp, ("--config", "/dev/null"))
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "client"))
    if not ctx:
        env["PROFD_THREAD_CONTEXT"] = "0"
    try:
        out = subprocess.run([os.path.join(build, "tests", "bench", "txnbench"), d.socket,
                              "spans", str(n)], capture_output=True, text=True, env=env,
                             timeout=600)
        st = d._call({"cmd": "status"})["daemon"]["transactions"]
    finally:
        d.stop()
    vals = dict(l.split() for l in out.stdout.splitlines() if len(l.split()) == 2)
    if "start_p50_ns" not in vals:
        raise RuntimeError("txnbench spans: %r %r" % (out.stdout, out.stderr))
    r = {k: int(v) for k, v in vals.items()}
    r["messages"] = st["txn_start"]
    r["by_context"] = st["txn_profile"]
    return r


def fmt(ns):
    return "%.0f ns" % ns if ns < 10000 else "%.1f us" % (ns / 1e3) if ns < 1e7 else \
        "%.1f ms" % (ns / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=3000)
    a = ap.parse_args()
    res = {True: [], False: []}
    for i in range(a.runs):
        for ctx in ((True, False) if i % 2 == 0 else (False, True)):
            r = one(a.build, ctx, a.n)
            bench.log("run %d %s: %s" % (i, "context" if ctx else "messages", r))
            res[ctx].append(r)
    print("| %d transactions beside 4 spinning threads (medians of %d runs) | thread context | "
          "messages | ratio |" % (a.n, a.runs))
    print("|---|---|---|---|")
    for key, label in (("start", "start"), ("discard", "discard (no profile)"),
                       ("finish", "finish with its profile")):
        for q in ("p50", "p99"):
            k = "%s_%s_ns" % (key, q)
            c, m = bench.median([r[k] for r in res[True]]), bench.median([r[k] for r in res[False]])
            print("| %s %s | %s | %s | %.3g |" % (label, q, fmt(c), fmt(m), m / c if c else 0))
    print("| txn_start messages (of %d starts) | %d | %d | |"
          % (a.n + 20, bench.median([r["messages"] for r in res[True]]),
             bench.median([r["messages"] for r in res[False]])))
    print("| finishes asked by span id (txn_profile) | %d | %d | |"
          % (bench.median([r["by_context"] for r in res[True]]),
             bench.median([r["by_context"] for r in res[False]])))


if __name__ == "__main__":
    main()
