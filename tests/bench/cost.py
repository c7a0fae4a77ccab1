#!/usr/bin/env python3
"""cost.py: what profd's wall-clock modes cost, all of its CPU counted, against perf record in
the same run; and how long a new process's first transaction waits for its profile.

    python3 tests/bench/cost.py --build BUILD_DIR [--runs 5] [--secs 8] [--parts LIST]
                                [--out FILE]

Parts (--parts, comma-separated; all by default):
  mixed  a process of 2 busy threads and 2 idle ones (tests/programs/busy 2 3600 1: two
         workers, the main thread asleep, one thread blocked in a read) at 101 and 999 Hz:
         profd in alarm (sampler auto), and `perf record -e cpu-clock -F HZ --call-graph dwarf`
         of the same program, one after the other in each repetition. CPU: every thread of
         profd and of its helpers (or of perf), from /proc/PID/task/*/schedstat, over a
         window after a warm-up; per sample, all samples (profd samples every thread at each
         tick, perf only the running ones: both are given).
  scale  100 copies of tests/programs/idlesvc (5 threads: one computes a 1 ms burst every
         100 ms, the rest blocked) attached at 101 Hz alarm to one profd with its default
         budget; and perf record of the same 100 processes (-p with every pid) at 101 Hz:
         % of a CPU.
  cold   a fresh profd and a fresh process (tests/bench/txnbench cold 40 5): the process's
         first transaction (its start attaches it) of 40 ms, and the time its finish takes;
         the later ones' too. --runs x 4 fresh daemons.

Run as root on the machine the figures are for, never under meson test. Prints a Markdown
report; medians over the runs (the machine is shared: separate runs move by up to 2x)."""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (Daemon, Target, proc_tree_cpu_ns, median, pctl)

WARM_S = 1.5


def perf_samples(pdata, pids):
    """Samples of perf.data whose process is one of pids."""
    sc = subprocess.run(["perf", "script", "-i", pdata, "-F", "pid"], capture_output=True,
                        text=True, timeout=600)
    want = {str(p) for p in pids}
    return sum(1 for line in sc.stdout.split() if line in want)


def perf_record(pids, hz, tmp):
    pdata = os.path.join(tmp, "perf.data")
    p = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(hz),
                          "--call-graph", "dwarf", "-p", ",".join(map(str, pids)), "-o", pdata],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return p, pdata


def stop_perf(p):
    p.send_signal(2)  # SIGINT: perf writes its data and exits
    p.wait(timeout=120)


def run_mixed(build, tool, hz, secs):
    tmp = tempfile.mkdtemp()
    t = bench.Target([os.path.join(build, "tests", "programs", "busy"), "2", "3600", "1"])
    d = rec = None
    try:
        if tool == "profd":
            d = bench.Daemon(build, tmp, ("--config", "/dev/null"))
            d.attach(t.pid, hz, "alarm")
            pid = d.pid
        else:
            rec, pdata = perf_record([t.pid], hz, tmp)
            pid = rec.pid
        time.sleep(WARM_S)
        s0 = d.status(t.pid)[1]["samples"] if d else None
        c0 = bench.proc_tree_cpu_ns(pid)
        w0 = time.monotonic()
        time.sleep(secs)
        c1 = bench.proc_tree_cpu_ns(pid)
        w1 = time.monotonic()
        if d:
            st = d.status(t.pid)[1]
            n = st["samples"] - s0
            running = n * 2 / 4  # two of the four threads run: one sample of each per tick
            extra = {"deferred_ticks": st["sampling"]["deferred"]["ticks"]}
        else:
            stop_perf(rec)
            # (perf's samples over its whole run, scaled to the window.)
            total = perf_samples(pdata, [t.pid])
            n = running = total * (w1 - w0) / (w1 - w0 + WARM_S + 0.3)
            extra = {}
    finally:
        if rec and rec.poll() is None:
            rec.kill()
        t.end()
        if d:
            d.stop()
    cpu = c1 - c0
    return dict(tool=tool, hz=hz, cpu_pct=100 * cpu / ((w1 - w0) * 1e9), samples=n,
                us_per_sample=cpu / n / 1e3 if n else None,
                us_per_running_sample=cpu / running / 1e3 if running else None, **extra)


def run_scale(build, tool, secs, procs=100):
    tmp = tempfile.mkdtemp()
    ts = [bench.Target([os.path.join(build, "tests", "programs", "idlesvc"), "3600", "5"],
                       wait_ready=False) for _ in range(procs)]
    d = rec = None
    try:
        for x in ts:
            x.ready()
        pids = [x.pid for x in ts]
        if tool == "profd":
            d = bench.Daemon(build, tmp, ("--config", "/dev/null"))
            for p in pids:
                d.attach(p, 101, "alarm")
            pid = d.pid
            time.sleep(5)  # (the budget looks every 0.25 s; the attaches' cost settles)
        else:
            rec, pdata = perf_record(pids, 101, tmp)
            pid = rec.pid
            time.sleep(5)
        if d:
            _, st0 = d.status_all()
        c0 = bench.proc_tree_cpu_ns(pid)
        w0 = time.monotonic()
        time.sleep(secs)
        c1 = bench.proc_tree_cpu_ns(pid)
        w1 = time.monotonic()
        res = {}
        if d:
            _, st1 = d.status_all()
            n = sum(st1[p]["samples"] - st0[p]["samples"] for p in pids if p in st0 and p in st1)
            res = dict(samples_per_s=n / (w1 - w0),
                       throttled=sum(bool(st1[p]["sampling"]["throttled"]) for p in st1),
                       housekeeping_spared=sum(st1[p]["housekeeping"]["spared"] for p in st1))
        else:
            stop_perf(rec)
    finally:
        if rec and rec.poll() is None:
            rec.kill()
        for x in ts:
            x.end()
        if d:
            d.stop()
    return dict(tool=tool, cpu_pct=100 * (c1 - c0) / ((w1 - w0) * 1e9), **res)


def run_cold(build):
    tmp = tempfile.mkdtemp()
    sock = os.path.join(tmp, "profd.sock")
    d = bench.Daemon(build, tmp, ("--config", "/dev/null"))
    try:
        out = subprocess.run([os.path.join(build, "tests", "bench", "txnbench"), d.socket,
                              "cold", "40", "5"], capture_output=True, text=True,
                             timeout=120).stdout
    finally:
        d.stop()
    rows = [l.split() for l in out.splitlines() if l.startswith("finish_ms")]
    if not rows:
        raise RuntimeError("txnbench cold: %r" % out)
    return dict(first_ms=float(rows[0][2]), first_pending=rows[0][3] == "1",
                later_ms=[float(r[2]) for r in rows[1:]],
                later_pending=sum(r[3] == "1" for r in rows[1:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--secs", type=float, default=8)
    ap.add_argument("--parts", default="mixed,scale,cold")
    ap.add_argument("--out")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    parts = a.parts.split(",")
    mixed, scale, cold = [], [], []
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    for rep in range(a.runs):
        if "mixed" in parts:
            for hz in (101, 999):
                for tool in ("profd", "perf"):
                    bench.log("mixed %d/%d: %s at %d Hz" % (rep + 1, a.runs, tool, hz))
                    mixed.append(run_mixed(build, tool, hz, a.secs))
        if "scale" in parts:
            for tool in ("profd", "perf"):
                bench.log("scale %d/%d: %s" % (rep + 1, a.runs, tool))
                scale.append(run_scale(build, tool, a.secs))
        if "cold" in parts:
            for _ in range(4):
                cold.append(run_cold(build))
    lines = []
    w = lines.append
    w("## profd's CPU in the wall-clock modes, and a new process's first transaction")
    w("")
    w("Measured by `python3 tests/bench/cost.py --build %s --runs %d --secs %g --parts %s` "
      "on %d vCPUs, kernel %s; load average %.2f at the start, %.2f at the end; %.0f s. "
      "Medians over the runs. CPU: every thread of the profiler and its helpers." %
      (a.build, a.runs, a.secs, a.parts, os.cpu_count(), os.uname().release, load0,
       os.getloadavg()[0], time.monotonic() - t0))
    if mixed:
        w("")
        w("### 2 busy threads and 2 idle ones (`busy 2 3600 1`)")
        w("")
        w("| profiler | Hz | CPU % | samples/s | CPU/sample (us) | CPU/running thread's "
          "sample (us) |")
        w("|---|---:|---:|---:|---:|---:|")
        for tool in ("profd", "perf"):
            for hz in (101, 999):
                rs = [r for r in mixed if r["tool"] == tool and r["hz"] == hz]
                w("| %s | %d | %.2f | %.0f | %.2f | %.2f |" % (
                    "profd (alarm)" if tool == "profd" else "perf record --call-graph dwarf",
                    hz, bench.median([r["cpu_pct"] for r in rs]),
                    bench.median([r["samples"] for r in rs]) / a.secs,
                    bench.median([r["us_per_sample"] for r in rs]),
                    bench.median([r["us_per_running_sample"] for r in rs])))
    if scale:
        w("")
        w("### 100 services of 5 threads at 101 Hz (`idlesvc 3600 5`)")
        w("")
        w("| profiler | CPU % (runs) | samples/s | throttled |")
        w("|---|---:|---:|---:|")
        for tool in ("profd", "perf"):
            rs = [r for r in scale if r["tool"] == tool]
            w("| %s | %.1f (%s) | %s | %s |" % (
                "profd (alarm, default budget)" if tool == "profd"
                else "perf record --call-graph dwarf -p (all 100)",
                bench.median([r["cpu_pct"] for r in rs]),
                ", ".join("%.1f" % r["cpu_pct"] for r in rs),
                "%.0f" % bench.median([r["samples_per_s"] for r in rs]) if tool == "profd"
                else "", max(r.get("throttled", 0) for r in rs) if tool == "profd" else ""))
    if cold:
        firsts = sorted(r["first_ms"] for r in cold)
        later = sorted(x for r in cold for x in r["later_ms"])
        w("")
        w("### A new process's first transaction (`txnbench cold 40 5`, a fresh daemon each)")
        w("")
        w("- first finish: p50 %.1f ms, p99 (max of %d) %.1f ms; built without symbols "
          "(`symbols_pending`) %d of %d" % (bench.pctl(firsts, .5), len(firsts), firsts[-1],
                                            sum(r["first_pending"] for r in cold), len(cold)))
        w("- the next four: p50 %.1f ms, max %.1f ms; without symbols %d of %d" % (
            bench.pctl(later, .5), later[-1], sum(r["later_pending"] for r in cold),
            len(later)))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
