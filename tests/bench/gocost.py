#!/usr/bin/env python3
"""gocost.py: profd's CPU per sample of a Go program against a C program of the same shape,
measured side by side in one run.

    python3 tests/bench/gocost.py --build BUILD_DIR [--runs 5] [--secs 4] [--warm 1.5]
                                  [--workers 2] [--idle N] [--go GO] [--where]
                                  [--where-secs 10] [--c-runtime WAKERS,HZ,SIGNAL]

Run as root, by hand (never under `meson test`: timings on a shared machine are not pass or
fail). Prints a Markdown report on stdout, progress on stderr.

  Go  tests/programs/go/goprog.go built as test_go builds it (GOTOOLCHAIN=local GOPROXY=off
      GOFLAGS=-mod=mod CGO_ENABLED=0, `go build`), `goprog WORKERS`: WORKERS busy
      goroutines each locked to its thread (work -> timed -> leafHeavy/leafLight/leafC ->
      spin, in Go), a goroutine blocked in read(2) on a pipe, the main goroutine reading
      stdin, and the runtime's own threads (sysmon, idle Ms in futex waits).
  C   tests/bench/gotwin.c built here with `cc -O2 -fomit-frame-pointer
      -fno-optimize-sibling-calls -pthread` (no frame pointers: DWARF CFI) and goprog's
      leaves' rounds and clock read from its sources (-D), `gotwin WORKERS IDLE`: the same
      busy chain in C, a thread blocked in read(2) on a pipe, the main thread
      reading stdin, IDLE threads in pthread_cond_wait. IDLE defaults to goprog's thread
      count less its workers, blocker and main thread (counted in a first start of goprog),
      so both processes have as many threads.
  C+rt  (--c-runtime WAKERS,HZ,SIGNAL, a control) gotwin with WAKERS of those idle threads
      in nanosleep(2) waking HZ times a second, the first sending SIGURG to a worker at each
      wake with SIGNAL 1: what the Go runtime does beside the goroutines (sysmon, the Ms
      woken to hand a preempted locked goroutine back to its thread, sysmon's preemption
      signals), in C.

Each run: a fresh profd (private socket, --config /dev/null, its default budget) attached
at HZ in alarm with the default sampler (running threads from the kernel's perf copy,
blocked ones read from /proc), --warm seconds, then a window of --secs seconds between two
status replies: profd's CPU (every thread of the daemon, /proc/PID/task/*/schedstat) over
the window / the samples the window took; the per-path figures profd measures itself
(`paths.perf` and `paths.proc`: samples and us_per_sample, differenced between the two
statuses); unwind completeness over the window (complete / complete + truncated + too_deep).
Runs are interleaved Go, C, Go, C... at 101 then 999 Hz in each repetition; the figures are
medians over the runs and the ratio the median of the runs' Go/C ratios (each Go run paired
with the C run right after it). Before each pair (Go, C) the script waits (--max-wait in all)
for the rest of the machine to use under 20% of a CPU; a pair during which it used over half
a CPU is run again (--max-retries in all).

--where: afterwards, one run of each program at each rate while `perf record --call-graph
dwarf` samples profd's own threads: the shares of profd's samples in each part of its work
(WHERE), as microseconds of the runs' median CPU per sample, Go against C.
Only processes this script starts are signalled, by pid.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench import (Daemon, LoadMeter, end_process, log, median, paths_delta,  # noqa: E402
                   proc_cpu_ns, proc_tree_cpu_ns, unwind_delta)

GOSRC = os.path.join(HERE, "..", "programs", "go")
TWINSRC = os.path.join(HERE, "gotwin.c")
RATES = (101, 999)
PROGS = ("go", "c")  # (and "crt" with --c-runtime)
NAMES = {"go": "Go", "c": "C", "crt": "C+rt"}
# --where: parts of profd's work, each the functions whose presence in a perf sample's call
# chain puts the sample in it; the first that matches (the order matters: a blocked thread's
# read under the tick is in "proc", not in "tick").
WHERE = (
    ("reap", "signal-delivery stops reaped and the signal passed on (`on_sigchld`, "
             "`sampler_reap`: SIGCHLD, waitpid, PTRACE_CONT)",
     {"on_sigchld", "sampler_reap", "targets_wait_event"}),
    ("proc", "blocked threads that ran since their last sample read from /proc "
             "(`read_blocked`: syscall file, stack copy, schedstat, unwind)",
     {"read_blocked"}),
    ("perf", "running threads from the kernel's copy (`sample_running`: ring, unwind)",
     {"sample_running"}),
    ("watch", "idle threads spared by their switch watch (`watch_spares`)",
     {"watch_spares", "watch_open", "watch_quiet"}),
    ("schedstat", "did a blocked thread run? its schedstat read (`proc_read_schedstat` "
                  "outside `read_blocked`)",
     {"proc_read_schedstat"}),
    ("tick", "the rest of the tick (`sampler_tick`, `alarm_run`: timers, clocks, pushes)",
     {"sampler_tick", "alarm_run", "sched_alarm_tick", "on_alarm_timer"}),
    ("wait", "waiting in epoll_wait, and the wake-up", {"epoll_wait"}),
    ("vmread", "stack copies (`process_vm_readv`) whose user-space chain perf lost (all in "
               "`read_blocked`'s `snapshot_copy_stack` where the chain is whole)",
     {"__x64_sys_process_vm_readv"}),
)


# ---------------------------------------------------------------------------------------
# the two programs


def build_go(go, outdir):
    ver = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                         check=True).stdout.strip()
    exe = os.path.join(outdir, "goprog")
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOPROXY="off",
               GOFLAGS="-mod=mod", GOTELEMETRY="off",
               # test_go's cache: the standard library compiled once for the machine.
               GOCACHE=os.path.join(tempfile.gettempdir(), "profd-test-go-cache", ver),
               GOPATH=os.path.join(outdir, "gopath"))
    r = subprocess.run([go, "build", "-o", exe, "."], cwd=GOSRC, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("go build: %s" % r.stderr.strip()[-1000:])
    return exe, ver


def goprog_shape():
    """The twin's -D options from goprog's sources: its leaves' rounds, and its clock (the
    thread's CPU clock, or the wall clock of time.Now)."""
    with open(os.path.join(GOSRC, "goprog.go")) as f:
        main = f.read()
    with open(os.path.join(GOSRC, "nocgo.go")) as f:
        nocgo = f.read()
    out = []
    for macro, fn, src in (("HEAVY", "leafHeavy", main), ("LIGHT", "leafLight", main),
                           ("LEAFC", "leafC", nocgo)):
        m = re.search(r"func %s\(\) uint64 \{ return spin\((\d+)\) \}" % fn, src)
        if not m:
            raise RuntimeError("%s's rounds not found in goprog's sources: update gocost.py"
                               % fn)
        out.append("-D%s=%s" % (macro, m.group(1)))
    timed = re.search(r"func timed\(.*?\n}", main, re.S)
    cpu = timed and "threadCPU()" in timed.group(0)
    out.append("-DTWIN_CLOCK=%s" % ("CLOCK_THREAD_CPUTIME_ID" if cpu else "CLOCK_MONOTONIC"))
    return out


def build_twin(cc, outdir):
    exe = os.path.join(outdir, "gotwin")
    cmd = [cc, "-O2", "-g", "-fomit-frame-pointer", "-fno-optimize-sibling-calls",
           "-pthread"] + goprog_shape() + ["-o", exe, TWINSRC]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    return exe, " ".join(cmd[:-3] + [os.path.relpath(TWINSRC)])


class Prog:
    """goprog or gotwin: "ready" on stdout once started; exits at the end of its stdin."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            end_process(self.proc)
            raise RuntimeError("%s did not start: %r" % (argv[0], line))
        self.pid = self.proc.pid

    def threads(self):
        """{tid: (state, wchan)} of its threads."""
        out = {}
        for tid in os.listdir("/proc/%d/task" % self.pid):
            try:
                with open("/proc/%d/task/%s/stat" % (self.pid, tid)) as f:
                    s = f.read()
                with open("/proc/%d/task/%s/wchan" % (self.pid, tid)) as f:
                    w = f.read().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            out[int(tid)] = (s[s.rindex(")") + 2], w)
        return out

    def end(self):
        try:
            self.proc.stdin.close()  # both exit at the end of stdin
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        end_process(self.proc)


# ---------------------------------------------------------------------------------------
# one run


def prog_argv(a, prog):
    if prog == "go":
        return [a.goprog, str(a.workers)]
    if prog == "c":
        return [a.gotwin, str(a.workers), str(a.idle)]
    wakers, hz, sig = a.c_runtime
    return [a.gotwin, str(a.workers), str(max(0, a.idle - wakers)), str(wakers), str(hz),
            str(sig)]


def attach(daemon, pid, hz):
    """Attach in alarm with the default sampler. (Daemon() returns once the socket's path
    exists: profd may not listen on it yet.)"""
    deadline = time.monotonic() + 10
    while True:
        try:
            return daemon.attach(pid, hz, "alarm")
        except ConnectionRefusedError:
            if daemon.sock is not None:
                daemon.sock.close()
                daemon.sock = None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def one_run(a, prog, hz):
    tmp = tempfile.mkdtemp(prefix="gocost.", dir=a.tmp)
    argv = prog_argv(a, prog)
    target = daemon = None
    try:
        target = Prog(argv)
        daemon = Daemon(a.build, tmp, ("--config", "/dev/null"))
        attach(daemon, target.pid, hz)
        time.sleep(a.warm)
        nthreads = len(target.threads())
        # The window: from a status (alarm defers a running thread's ticks and takes their
        # samples in batches, or at a status) to just after the next, whose samples and
        # unwinds are the window's (the status itself counted in it).
        d0, st0 = daemon.status(target.pid)
        c0 = proc_cpu_ns(daemon.pid)
        ct0 = proc_tree_cpu_ns(daemon.pid)
        w0 = time.monotonic()
        lm = LoadMeter(target.pid, daemon.pid)
        time.sleep(a.secs)
        d1, st1 = daemon.status(target.pid)
        c1 = proc_cpu_ns(daemon.pid)
        ct1 = proc_tree_cpu_ns(daemon.pid)
        w1 = time.monotonic()
        other, steal = lm.done()
    finally:
        if daemon:
            daemon.stop()
        if target:
            target.end()
        shutil.rmtree(tmp, ignore_errors=True)
    n = st1["samples"] - st0["samples"]
    ticks = st1["ticks"] - st0["ticks"]
    paths = paths_delta(st0, st1)
    comp, unw = unwind_delta(st0, st1)
    sa0, sa1 = st0["sampled"], st1["sampled"]
    r = dict(prog=prog, hz=hz, samples=n, ticks=ticks, secs=w1 - w0, threads=nthreads,
             cpu_ns=c1 - c0, tree_cpu_ns=ct1 - ct0,
             cpu_us=(c1 - c0) / n / 1e3 if n else None,
             cpu_pct=100.0 * (c1 - c0) / 1e9 / (w1 - w0),
             perf_n=paths["perf"][0], proc_n=paths["proc"][0],
             perf_us=paths["perf"][1] / paths["perf"][0] / 1e3 if paths["perf"][0] else None,
             proc_us=paths["proc"][1] / paths["proc"][0] / 1e3 if paths["proc"][0] else None,
             unwind_pct=100.0 * comp / unw if unw else None, unwinds=unw,
             reused=sa1.get("idle_reused", 0) - sa0.get("idle_reused", 0),
             stopped=sa1.get("stopped", 0) - sa0.get("stopped", 0),
             signals=st1.get("signals_forwarded", 0) - st0.get("signals_forwarded", 0),
             missed=st1["sampling"]["missed"] - st0["sampling"]["missed"],
             throttled=st1["sampling"]["throttled"] or st0["sampling"]["throttled"],
             other_load=other, steal=steal)
    log("%-2s %4d Hz: %6d samples (%d ticks, %d threads; perf %d, proc %d, reused %d, "
        "stopped %d), profd %.2f us/sample (%.2f%% CPU; tree %.2f us), perf path %s us, "
        "proc path %s us, unwinds complete %s%%, signals %d, missed %d%s, others %.2f CPU"
        % (prog, hz, n, ticks, nthreads, r["perf_n"], r["proc_n"], r["reused"], r["stopped"],
           r["cpu_us"] or 0, r["cpu_pct"], r["tree_cpu_ns"] / n / 1e3 if n else 0,
           fmt(r["perf_us"]), fmt(r["proc_us"]), fmt(r["unwind_pct"]), r["signals"],
           r["missed"], " THROTTLED" if r["throttled"] else "", other))
    return r


def wait_quiet(a):
    """Wait (within --max-wait in all) until the rest of the machine uses under 20% of a CPU
    over 0.3 s (bench.py's rule)."""
    while a.waited < a.max_wait:
        b0, _ = bench.machine_busy_ns()
        t0 = time.monotonic()
        time.sleep(0.3)
        b1, _ = bench.machine_busy_ns()
        if (b1 - b0) / 1e9 / (time.monotonic() - t0) < 0.2:
            return
        time.sleep(1)
        a.waited += 1.3


def fmt(v, d=2):
    return "n/a" if v is None else "%.*f" % (d, v)


# ---------------------------------------------------------------------------------------
# --where: perf record of profd itself


def where_run(a, prog, hz, secs):
    """profd on prog at hz while perf record samples profd's threads: {function: (inclusive
    share, self share)} of perf's samples of profd, perf's sample count, and profd's CPU per
    sample over the same window (perturbed by perf's sampling of it: only the shares are
    meant, the CPU per sample turns them into microseconds)."""
    tmp = tempfile.mkdtemp(prefix="gocost-where.", dir=a.tmp)
    argv = prog_argv(a, prog)
    pdata = os.path.join(tmp, "profd.data")
    target = daemon = rec = None
    try:
        target = Prog(argv)
        daemon = Daemon(a.build, tmp, ("--config", "/dev/null"))
        attach(daemon, target.pid, hz)
        time.sleep(a.warm)
        rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "9999",
                                "--call-graph", "dwarf,16384", "-p", str(daemon.pid),
                                "-o", pdata], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        _, st0 = daemon.status(target.pid)
        c0 = proc_cpu_ns(daemon.pid)
        time.sleep(secs)
        _, st1 = daemon.status(target.pid)
        c1 = proc_cpu_ns(daemon.pid)
        end_process(rec, signal.SIGINT)
    finally:
        end_process(rec, signal.SIGINT)
        if daemon:
            daemon.stop()
        if target:
            target.end()
    n = st1["samples"] - st0["samples"]
    sc = subprocess.run(["perf", "script", "-i", pdata, "-F", "ip,sym"], capture_output=True,
                        text=True, timeout=600)
    shutil.rmtree(tmp, ignore_errors=True)
    parts = {k: 0 for k, _, _ in WHERE}
    parts["other"] = 0
    selfs = {}
    total = 0
    for chain in bench.perf_script_chains(sc.stdout):
        total += 1
        selfs[chain[0]] = selfs.get(chain[0], 0) + 1
        syms = set(chain)
        for k, _, fns in WHERE:
            if syms & fns:
                parts[k] += 1
                break
        else:
            parts["other"] += 1
    res = dict(parts={k: v / total for k, v in parts.items()} if total else {},
               selfs=sorted(((v / total, k) for k, v in selfs.items()), reverse=True)[:12]
               if total else [], perf_samples=total, samples=n,
               cpu_us=(c1 - c0) / n / 1e3 if n else None)
    log("where %s %d Hz: %d perf samples of profd, profd %.2f us/sample (under perf); %s"
        % (prog, hz, total, res["cpu_us"] or 0,
           ", ".join("%s %.1f%%" % (k, 100 * v) for k, v in res["parts"].items())))
    return res


# ---------------------------------------------------------------------------------------
# report


ROWS = (
    ("cpu_us", "**profd CPU per sample** (its CPU over the window / samples), us", 2),
    ("perf_us", "running threads: the kernel's copy (`paths.perf.us_per_sample`), us", 2),
    ("proc_us", "blocked threads read from /proc (`paths.proc.us_per_sample`), us", 2),
    ("unwind_pct", "unwinds complete (`unwind`: complete / all), %", 1),
    ("cpu_pct", "profd CPU, % of one CPU", 2),
    ("per_tick", "samples per tick", 2),
    ("perf_tick", "- of which the kernel's copy", 2),
    ("proc_tick", "- of which read from /proc", 2),
    ("reused_tick", "- of which an idle thread's last stack reused", 2),
    ("signals_s", "signals forwarded to the target per second", 0),
    ("threads", "threads of the target", 0),
)


def derive(r):
    t = r["ticks"] or None
    r["per_tick"] = r["samples"] / t if t else None
    r["perf_tick"] = r["perf_n"] / t if t else None
    r["proc_tick"] = r["proc_n"] / t if t else None
    r["reused_tick"] = r["reused"] / t if t else None
    r["signals_s"] = r["signals"] / r["secs"]


def report(a, res, where, ver, twin_cmd, other, started):
    lines = []
    w = lines.append
    progs = a.progs
    w("## profd's CPU per sample: a Go program against its C twin (gocost.py)\n")
    w("`python3 tests/bench/gocost.py --build %s --runs %d --secs %g%s` (warm-up %g s; "
      "`goprog %d` built by %s with CGO_ENABLED=0; `%s` built with `%s`%s; alarm, default "
      "sampler; %d runs of each, interleaved %s...; medians; Go/C: the median of the same "
      "repetition's ratios)\n"
      % (a.build_arg, a.runs, a.secs,
         " --c-runtime %s" % ",".join(map(str, a.c_runtime)) if a.c_runtime else "",
         a.warm, a.workers, ver, " ".join(os.path.basename(x) for x in prog_argv(a, "c")),
         twin_cmd,
         "; C+rt: `%s`, the twin with the Go runtime's activity mimicked (%d threads waking "
         "%d times a second in nanosleep%s)" % (
             " ".join(os.path.basename(x) for x in prog_argv(a, "crt")), a.c_runtime[0],
             a.c_runtime[1], ", the first sending SIGURG to a worker at each wake"
             if a.c_runtime[2] else "") if a.c_runtime else "",
         a.runs, ", ".join(NAMES[p] for p in progs * 2)))
    hdr = []
    for hz in RATES:
        hdr += ["%s %d Hz" % (NAMES[p], hz) for p in progs]
        hdr += ["Go/%s" % NAMES[p] for p in progs[1:]]
    w("| | %s |" % " | ".join(hdr))
    w("|---|%s" % ("---:|" * len(hdr)))
    for key, label, d in ROWS:
        cells = []
        for hz in RATES:
            vals = {p: [r.get(key) for r in res[(p, hz)]] for p in progs}
            cells += [fmt(median(vals[p]), d) for p in progs]
            for p in progs[1:]:
                ratios = [x / y for x, y in zip(vals["go"], vals[p]) if x is not None and y]
                cells.append("" if not ratios else (
                    "**%.2fx**" if key in ("cpu_us", "perf_us", "proc_us") else "%.2fx")
                    % median(ratios))
        w("| %s | %s |" % (label, " | ".join(cells)))
    w("")
    for hz in RATES:
        w("Runs at %d Hz, profd CPU per sample %s (us): %s." % (
            hz, " / ".join(NAMES[p] for p in progs), ", ".join(
                " / ".join(fmt(r["cpu_us"]) for r in rs)
                for rs in zip(*(res[(p, hz)] for p in progs)))))
    thr = sum(r["throttled"] for rs in res.values() for r in rs)
    stopped = sum(r["stopped"] for rs in res.values() for r in rs)
    w("")
    w("Throttled runs: %d; threads stopped (ptrace): %d; the rest of the machine: median %.2f "
      "of a CPU during the windows (max %.2f); %.0f s waited for a quiet machine, %d "
      "repetitions run again; load average %s at the end; %.0f s in all."
      % (thr, stopped, median(other), max(other), a.waited, a.retried,
         open("/proc/loadavg").read().split()[0], time.monotonic() - started))
    if os.stat(os.path.join(a.build, "daemon", "profd")).st_mtime != a.profd_mtime:
        w("")
        w("**%s/daemon/profd was rebuilt during the run: its runs mix two daemons.**"
          % a.build_arg)
    w("")
    if where:
        w("### Where profd's CPU goes (--where)\n")
        w("One run of each program at each rate while `perf record -e cpu-clock -F 9999 "
          "--call-graph dwarf -p PROFD` samples profd's threads for %g s: the share of "
          "those samples in each part of profd's work (the first part in this order whose "
          "function is in the sample's chain), and that share of the median CPU per sample "
          "above (perf's sampling of profd perturbs it: only the shares are taken from "
          "these runs).\n" % a.where_secs)
        cols = [(p, hz) for hz in RATES for p in progs]
        w("| part | %s |" % " | ".join("%s %d Hz" % (NAMES[p], hz) for p, hz in cols))
        w("|---|%s" % ("---:|" * len(cols)))
        for k, label, _ in WHERE + (("other", "the rest (the event loop, status requests, "
                                             "housekeeping)", None),):
            cells = []
            for prog, hz in cols:
                sh = where[(prog, hz)]["parts"].get(k)
                c = median([r["cpu_us"] for r in res[(prog, hz)]])
                cells.append("n/a" if sh is None else "%.0f%% (%.2f us)" % (100 * sh, sh * c))
            w("| %s | %s |" % (label, " | ".join(cells)))
        w("| perf's samples of profd (profd's CPU per sample under perf) | %s |" % " | ".join(
            "%d (%s us)" % (where[c]["perf_samples"], fmt(where[c]["cpu_us"])) for c in cols))
        w("")
        for hz in RATES:
            w("Top functions by self share, %d Hz: %s.\n" % (hz, "; ".join(
                "%s: %s" % (NAMES[p], ", ".join("`%s` %.0f%%" % (f, 100 * v)
                                               for v, f in where[(p, hz)]["selfs"][:8]))
                for p in progs)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="meson build directory")
    ap.add_argument("--runs", type=int, default=5, help="repetitions (default 5)")
    ap.add_argument("--secs", type=float, default=4, help="seconds measured per run (4)")
    ap.add_argument("--warm", type=float, default=1.5,
                    help="seconds between the attach and the window (1.5)")
    ap.add_argument("--workers", type=int, default=2, help="busy threads of each (2)")
    ap.add_argument("--idle", type=int, default=None,
                    help="gotwin's idle threads (default: as many as make its thread count "
                         "goprog's)")
    ap.add_argument("--go", default=shutil.which("go") or "/usr/bin/go",
                    help="the Go toolchain (default: go on PATH)")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"), help="the C compiler")
    ap.add_argument("--max-wait", type=float, default=120,
                    help="most seconds spent in all waiting for a quiet machine (120)")
    ap.add_argument("--max-retries", type=int, default=6,
                    help="most repetitions of a rate run again because the machine was busy "
                         "(6)")
    ap.add_argument("--c-runtime", metavar="WAKERS,HZ,SIGNAL",
                    help="also a third program: gotwin with WAKERS of its idle threads waking "
                         "HZ times a second, the first sending SIGURG to a worker at each "
                         "wake if SIGNAL is 1 (the Go runtime's sysmon, its Ms woken for "
                         "handoffs, its preemption signals), e.g. 2,80,1")
    ap.add_argument("--where", action="store_true",
                    help="also perf record profd itself on each program at 999 Hz")
    ap.add_argument("--where-secs", type=float, default=10,
                    help="seconds of perf record per --where run (10)")
    a = ap.parse_args()
    a.build_arg = a.build
    a.progs = PROGS
    if a.c_runtime:
        try:
            a.c_runtime = tuple(int(x) for x in a.c_runtime.split(","))
            assert len(a.c_runtime) == 3
        except (ValueError, AssertionError):
            ap.error("--c-runtime WAKERS,HZ,SIGNAL")
        a.progs = PROGS + ("crt",)
    a.build = os.path.abspath(a.build)
    if os.geteuid() != 0:
        ap.error("run as root (profd attaches with ptrace and perf events)")
    started = time.monotonic()
    profd = os.path.join(a.build, "daemon", "profd")
    a.profd_mtime = os.stat(profd).st_mtime
    a.tmp = tempfile.mkdtemp(prefix="profd-gocost-")
    try:
        a.goprog, ver = build_go(a.go, a.tmp)
        a.gotwin, twin_cmd = build_twin(a.cc, a.tmp)
        if a.idle is None:
            p = Prog([a.goprog, str(a.workers)])
            try:
                time.sleep(a.warm)
                th = p.threads()
            finally:
                p.end()
            a.idle = max(0, len(th) - a.workers - 2)
            log("goprog %d: %d threads (%s): gotwin gets %d idle threads"
                % (a.workers, len(th), ", ".join(sorted("%s/%s" % v for v in th.values())),
                   a.idle))
        res = {(p, hz): [] for p in a.progs for hz in RATES}
        other = []
        a.waited = 0.0
        a.retried = 0
        for rep in range(a.runs):
            for hz in RATES:
                # A pair (Go, then C; C+rt too) under the same conditions: after a wait for a quiet
                # machine, and once more if the rest of it used over half a CPU meanwhile.
                while True:
                    wait_quiet(a)
                    pair = [one_run(a, prog, hz) for prog in a.progs]
                    busy = max(r["other_load"] for r in pair)
                    if busy <= 0.5 or a.retried >= a.max_retries:
                        break
                    a.retried += 1
                    log("  others used %.0f%% of a CPU meanwhile: the pair once more"
                        % (100 * busy))
                for r in pair:
                    derive(r)
                    other.append(r["other_load"])
                    res[(r["prog"], hz)].append(r)
        where = None
        if a.where:
            where = {(prog, hz): where_run(a, prog, hz, a.where_secs)
                     for hz in RATES for prog in a.progs}
        print(report(a, res, where, ver, twin_cmd, other, started))
    finally:
        shutil.rmtree(a.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
