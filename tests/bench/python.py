#!/usr/bin/env python3
"""python.py: a running Python thread's sample, read in the kernel (eBPF) against a stop and
against a native thread's sample, measured in one run (issue 26's figures).

    python3 tests/bench/python.py --build BUILD_DIR [--runs 5] [--secs 5] [--python PY]
                                  [--shares-secs 20] [--parts pause,shares]

Run as root, by hand (never under `meson test`: timings on a shared machine are not pass or
fail). Prints a Markdown report. Parts:

  pause   at 101 and 999 Hz (alarm), interleaved run by run: tests/bench/pausemeter (C,
          sampled from the kernel's copy), tests/bench/pypause.py under PY with profd's
          default path (its Python frames read by the eBPF program), and the same with
          PROFD_PYTHON_BPF=0 (stopped for its frames). Each records every gap in its spin
          above a threshold; a sample's pause is the gap that contains the sample's time
          (the kernel's time of a kernel copy, the stop's of a stop), as bench.py's pair
          part matches them. Also profd's CPU per sample (its CPU over the window / the
          samples of the window).
  shares  tests/integration/pyapp.py (60/30/10 by its own clock) at 101 and 999 Hz on the
          eBPF path, alone and beside two CPU hogs: each phase's share of the work thread's
          samples against the program's own measure; every work-thread sample checked whole
          (start_thread ... Thread._bootstrap ... handle ... the phase, no evaluation loop
          left), and the program's records that failed a check, faulted or went missing.
Only processes this script starts are signalled, by pid.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench import Daemon, Target, end_process, log, median, pctl, proc_cpu_ns  # noqa: E402

WARM_MS = 1500
THRESHOLD_NS = 5000


def start_daemon(build, tmp, stops):
    old = os.environ.get("PROFD_PYTHON_BPF")
    if stops:
        os.environ["PROFD_PYTHON_BPF"] = "0"
    try:
        return Daemon(build, tmp)
    finally:
        if stops:
            if old is None:
                del os.environ["PROFD_PYTHON_BPF"]
            else:
                os.environ["PROFD_PYTHON_BPF"] = old


def pause_run(a, kind, hz):
    """One run: (pauses of matched samples, samples, profd CPU ns, status)."""
    tmp = tempfile.mkdtemp(prefix="pybench.")
    if kind == "native":
        argv = [os.path.join(a.build, "tests", "bench", "pausemeter"), str(WARM_MS),
                str(a.secs), str(THRESHOLD_NS)]
    else:
        argv = [a.python, os.path.join(HERE, "pypause.py"), str(WARM_MS), str(a.secs),
                str(THRESHOLD_NS)]
    target = daemon = None
    try:
        target = Target(argv)
        daemon = start_daemon(a.build, tmp, kind == "py-stop")
        daemon.ctl("attach", target.pid, "--hz", hz)
        target.send("go")
        t0 = int(target.expect("measuring")[1])
        c0 = proc_cpu_ns(daemon.pid)
        done = target.expect("done")
        c1 = proc_cpu_ns(daemon.pid)
        t1, n = int(done[1]), int(done[2])
        gaps = bench.Bench.read_gaps(target, n)
        times = bench.Bench.profd_times(daemon, target.pid, t0, t1, tmp)
        _, st = daemon.status(target.pid)
        pauses, matched = bench.pauses_containing(gaps, times, 0)
        got = [p for p in pauses if p > 0]
        return got, len(times), c1 - c0, st
    finally:
        if target:
            target.end()
        if daemon:
            daemon.stop()


def part_pause(a, out):
    kinds = ["native", "py-ebpf", "py-stop"]
    res = {(k, hz): [] for k in kinds for hz in (101, 999)}
    for rep in range(a.runs):
        for hz in (101, 999):
            for k in kinds:
                pauses, n, cpu, st = pause_run(a, k, hz)
                paths = st["paths"]
                stopped = st["sampled"].get("stopped", 0)
                res[(k, hz)].append(dict(p50=median(pauses) if pauses else None,
                                         p99=pctl(pauses, 0.99) if pauses else None,
                                         matched=len(pauses), samples=n,
                                         cpu_us=cpu / 1e3 / n if n else None,
                                         stopped=stopped,
                                         kcopy=paths["perf"]["samples"]))
                r = res[(k, hz)][-1]
                log("run %d %s %d Hz: pause p50 %s us (%d of %d samples matched), profd CPU "
                    "%.1f us/sample, stopped %d" % (rep, k, hz,
                                                    "%.1f" % (r["p50"] / 1e3) if r["p50"] else "-",
                                                    r["matched"], n, r["cpu_us"] or 0, stopped))
    out.append("### A busy thread's pause per sample and profd's CPU per sample\n")
    out.append("`python3 tests/bench/python.py --build BUILD --parts pause --runs %d --secs %g` "
               "(%s; alarm; medians of the runs' p50s; ratio: the median of the runs' ratios "
               "to the same run's native figure)\n" % (a.runs, a.secs, a.python))
    out.append("| | 101 Hz pause p50 | ratio | CPU/sample | 999 Hz pause p50 | ratio | CPU/sample |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for k, name in (("native", "native thread, kernel copy"),
                    ("py-ebpf", "Python thread, eBPF (default)"),
                    ("py-stop", "Python thread, stopped (PROFD_PYTHON_BPF=0)")):
        row = ["%s" % name]
        for hz in (101, 999):
            rs = res[(k, hz)]
            nat = res[("native", hz)]
            p50 = median([r["p50"] for r in rs if r["p50"]])
            ratios = [r["p50"] / b["p50"] for r, b in zip(rs, nat) if r["p50"] and b["p50"]]
            cpu = median([r["cpu_us"] for r in rs if r["cpu_us"]])
            row += ["%.1f us" % (p50 / 1e3), "%.2fx" % median(ratios), "%.1f us" % cpu]
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    return res


def collapsed_shares(prof):
    """pyapp's work thread: phase shares, and (whole, all) samples (test_python's check)."""
    share = {"a": 0, "b": 0, "c": 0}
    whole = total = 0
    for s, c in prof.items():
        fr = s.split(";")[1:]
        if "__main__.work" not in fr:
            continue
        total += c
        ok = ("start_thread" in fr and "threading.Thread._bootstrap" in fr and
              "__main__.handle" in fr and "_PyEval_EvalFrameDefault" not in fr)
        for k in share:
            if "__main__.phase_" + k in fr:
                share[k] += c
        whole += c if ok else 0
    return share, whole, total


def shares_run(a, hz, hogs):
    tmp = tempfile.mkdtemp(prefix="pybench.")
    app = subprocess.Popen([a.python, os.path.join(HERE, "..", "integration", "pyapp.py")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hog = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    daemon = None
    try:
        if app.stdout.readline().strip() != "ready":
            raise RuntimeError("pyapp did not start")
        daemon = start_daemon(a.build, tmp, False)
        daemon.ctl("attach", app.pid, "--hz", hz)
        time.sleep(1)
        app.stdin.write("reset\n")
        app.stdin.flush()
        t0 = bench.now_ns()
        time.sleep(a.shares_secs if hz < 500 else a.shares_secs / 2)
        app.stdin.write("report\n")
        app.stdin.flush()
        spent = json.loads(app.stdout.readline())
        t1 = bench.now_ns()
        r = daemon.ctl("slice", app.pid, "--from", t0, "--to", t1)
        prof = {}
        for line in r.stdout.splitlines():
            stack, _, n = line.rpartition(" ")
            if stack:
                prof[stack] = prof.get(stack, 0) + int(n)
        _, st = daemon.status(app.pid)
        share, whole, total = collapsed_shares(prof)
        named = sum(share.values()) or 1
        tot = sum(spent.values()) or 1
        dev = max(abs(100.0 * share[k] / named - 100.0 * spent[k] / tot) for k in share)
        k = st["python"]["kernel"]
        return dict(dev=dev, whole=whole, total=total, shares={x: 100.0 * share[x] / named
                                                               for x in share},
                    truth={x: 100.0 * spent[x] / tot for x in spent}, kernel=k,
                    stopped=st["sampled"].get("stopped", 0))
    finally:
        for h in hog:
            end_process(h)
        end_process(app)
        if daemon:
            daemon.stop()


def part_shares(a, out):
    out.append("### Known shares and whole chains, eBPF path\n")
    out.append("`python3 tests/bench/python.py --build BUILD --parts shares --runs %d "
               "--shares-secs %g` (%s, pyapp.py; the largest of the three phases' deviations "
               "from the program's own clock, per run)\n" % (a.runs, a.shares_secs, a.python))
    out.append("| | runs' largest deviation (points) | work-thread samples whole | records paired | failed a check / faulted / missing | stopped |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for hz in (101, 999):
        for hogs in (0, 2):
            rs = [shares_run(a, hz, hogs) for _ in range(a.runs)]
            for r in rs:
                log("%d Hz, %d hogs: shares %s truth %s dev %.2f whole %d/%d kernel %s"
                    % (hz, hogs, {k: round(v, 1) for k, v in r["shares"].items()},
                       {k: round(v, 1) for k, v in r["truth"].items()}, r["dev"], r["whole"],
                       r["total"], r["kernel"]))
            whole = sum(r["whole"] for r in rs)
            total = sum(r["total"] for r in rs)
            paired = sum(r["kernel"]["paired"] for r in rs)
            bad = [sum(r["kernel"][k] for r in rs) for k in ("failed_check", "faulted", "missing")]
            out.append("| %d Hz%s | %s | %d of %d | %d | %d / %d / %d | %d |"
                       % (hz, " beside 2 CPU hogs" if hogs else " alone",
                          ", ".join("%.1f" % r["dev"] for r in rs), whole, total, paired,
                          bad[0], bad[1], bad[2], sum(r["stopped"] for r in rs)))
    out.append("")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--secs", type=float, default=5)
    ap.add_argument("--shares-secs", type=float, default=20)
    ap.add_argument("--python", default=os.path.expanduser(
        "~/.pyenv/versions/3.12.1/bin/python3.12"))
    ap.add_argument("--parts", default="pause,shares")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    out = ["## Python frames at the sample's instant (python.py)\n"]
    parts = a.parts.split(",")
    if "pause" in parts:
        part_pause(a, out)
    if "shares" in parts:
        part_shares(a, out)
    print("\n".join(out))


if __name__ == "__main__":
    main()
