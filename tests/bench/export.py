#!/usr/bin/env python3
"""export.py: what exporting costs profd: 100 services exported every 10 s to Sentry,
Pyroscope and OTLP at once, against the same 100 services sampled without export, in the
same repetition (one after the other, the order alternating).

    python3 tests/bench/export.py --build BUILD_DIR [--runs 3] [--secs 60] [--out FILE]

Each run: 100 copies of tests/programs/idlesvc (5 threads: one computes a 1 ms burst every
100 ms, the rest blocked) attached at 101 Hz alarm to one profd with its default budget;
with export, profd sends every target's windows of 10 s to the three backends of
tests/integration/receivers.py on the loopback (here taking without judging: their CPU is
this script's, not profd's). Measured over --secs after a warm-up of one interval: profd's
CPU (all its threads and its helpers', % of one CPU), its RSS at the end, the bodies sent
and their bytes. Medians over the runs. Run as root on the machine the figures are for,
never under meson test."""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import bench  # noqa: E402
import receivers  # noqa: E402

PROCS = 100
INTERVAL = 10


def run(build, export, secs):
    tmp = tempfile.mkdtemp()
    rx = receivers.Receiver(strict=False).start() if export else None
    args = ["--config", "/dev/null"]
    if export:
        u = rx.urls()
        args += ["--export-sentry", u["sentry"], "--export-pyroscope", u["pyroscope"],
                 "--export-otlp", u["otlp"], "--export-interval", str(INTERVAL),
                 "--export-spool", os.path.join(tmp, "spool")]
    ts = [bench.Target([os.path.join(build, "tests", "programs", "idlesvc"), "3600", "5"],
                       wait_ready=False) for _ in range(PROCS)]
    d = None
    try:
        for x in ts:
            x.ready()
        d = bench.Daemon(build, tmp, args)
        for x in ts:
            d.attach(x.pid, 101, "alarm")
        time.sleep(INTERVAL + 2)  # a first round of windows sent: the spool and queues warm
        n0 = len(rx.bodies) if rx else 0
        b0 = sum(b.wire for b in rx.bodies) if rx else 0
        c0 = bench.proc_tree_cpu_ns(d.pid)
        w0 = time.monotonic()
        time.sleep(secs)
        c1 = bench.proc_tree_cpu_ns(d.pid)
        w1 = time.monotonic()
        rss, hwm = bench.proc_tree_rss_kib(d.pid)
        ds, st = d.status_all()
        res = dict(export=export, cpu_pct=100 * (c1 - c0) / ((w1 - w0) * 1e9), rss_kib=rss,
                   hwm_kib=hwm, throttled=sum(bool(t["sampling"]["throttled"])
                                              for t in st.values()))
        if rx:
            with rx.lock:
                bodies = rx.bodies[n0:]
            res.update(bodies_per_min=len(bodies) * 60 / (w1 - w0),
                       kib_per_min=(sum(b.wire for b in rx.bodies) - b0) / 1024 * 60 /
                       (w1 - w0),
                       queued=sum(ds["export"][k]["queued"] for k in ("sentry", "pyroscope",
                                                                        "otlp")),
                       failed=sum(ds["export"][k]["failed"] for k in ("sentry", "pyroscope",
                                                                        "otlp")))
        return res
    finally:
        for x in ts:
            x.end()
        if d:
            d.stop()
        if rx:
            rx.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=float, default=60)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for i in range(a.runs):
        for export in ((True, False) if i % 2 == 0 else (False, True)):
            r = run(a.build, export, a.secs)
            bench.log("run %d: %s" % (i, r))
            rows.append(r)
    ex = [r for r in rows if r["export"]]
    no = [r for r in rows if not r["export"]]
    m = bench.median
    lines = [
        "### Export: 100 services (`idlesvc 3600 5`) at 101 Hz, every 10 s to Sentry, "
        "Pyroscope and OTLP",
        "",
        "| | with export | without | export's share |",
        "|---|---:|---:|---:|",
        "| profd's CPU, %% of one CPU (median of %d) | %.2f | %.2f | %.2f |"
        % (a.runs, m([r["cpu_pct"] for r in ex]), m([r["cpu_pct"] for r in no]),
           m([r["cpu_pct"] for r in ex]) - m([r["cpu_pct"] for r in no])),
        "| profd's RSS at the end, MiB | %.1f | %.1f | %.1f |"
        % (m([r["rss_kib"] for r in ex]) / 1024, m([r["rss_kib"] for r in no]) / 1024,
           (m([r["rss_kib"] for r in ex]) - m([r["rss_kib"] for r in no])) / 1024),
        "| bodies sent per minute (3 per target per window) | %.0f | | |"
        % m([r["bodies_per_min"] for r in ex]),
        "| KiB sent per minute (on the wire: pprof, Sentry and OTLP gzipped) | %.0f | | |"
        % m([r["kib_per_min"] for r in ex]),
        "| targets throttled by the budget | %d | %d | |"
        % (max(r["throttled"] for r in ex), max(r["throttled"] for r in no)),
        "| queued at the end, failed sends | %d, %d | | |"
        % (max(r["queued"] for r in ex), max(r["failed"] for r in ex)),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
