#!/usr/bin/env python3
"""bench.py: what sampling costs, profd against the alternatives, measured in one run.

    python3 tests/bench/bench.py --build BUILD_DIR [--quick] [--out FILE] [--parts LIST]
                                 [--profd-nice N] [--raw FILE] [--report-from FILE...]

Run as root on the machine the numbers are for (never under `meson test`: a shared, noisy
machine makes timings meaningless as pass/fail). Prints a Markdown report (and writes it to
--out). Compares, in the same run and interleaved repetition by repetition:

  profd         the daemon from BUILD_DIR on a private socket, driven by profctl, with
                `--sampler perf` (running threads sampled from the kernel's copy of their
                registers and stack, never stopped), in the `cputime` and `alarm` modes
  profd-ptrace  the same with `--sampler ptrace` (running threads stopped with
                PTRACE_INTERRUPT for their sample), in the same two modes
  perf          `perf record -e cpu-clock -F HZ --call-graph dwarf -k CLOCK_MONOTONIC -p PID`
  gperftools    libprofiler.so preloaded (CPUPROFILE, CPUPROFILE_FREQUENCY=HZ)
  nothing       the same target with no profiler

Measurements, each a part that --parts can select (the report states next to each figure
how it was measured):
  busy    1. pause per sample of a busy thread (tests/bench/pausemeter: a spin on
             CLOCK_MONOTONIC recording every gap above a threshold with its start), p50/p99,
             and the mean excess stolen time per sample, at 101 and 999 Hz;
          2. profiler CPU per sample once warm, and profd's unwind completeness;
  pair    1b. the pause per sample of profd (perf) and of perf record sampling the same
             pausemeter at once (perf at 1 Hz more): the two compared under the same
             conditions, at 101 and 999 Hz, cputime and alarm;
  idlers  3. a process with 50 idle threads and 1 busy one (tests/programs/idlers): threads
             stopped per tick, daemon CPU per tick and per sample, at 101 and 999 Hz;
  floor   4. the floor: tests/bench/ptrace_floor, one bare ptrace stop per period (1 ms,
             9.9 ms);
  scale   5. 100 mostly idle services of 5 threads (tests/programs/idlesvc) attached at
             101 Hz alarm within the default CPU budget, and of 10 threads: throttling,
             daemon CPU and memory, the cost of one more idle thread per tick; both samplers;
  host    6. a busy host: one tests/programs/busy process per CPU, each with a busy thread,
             at 101 and 999 Hz, alarm and cputime, both samplers: the achieved rate against
             the requested one, daemon CPU and memory, and unwind completeness on the 8 KiB
             array frame of busy.c;
  where   7. where profd (perf)'s CPU goes: `perf record --call-graph dwarf` of profd itself
             while it samples the busy target, shares of the parts of its tick.
--profd-nice N runs profd (alone) as profd.service does (Nice=-10), --raw keeps the
measurements, --report-from prints their report again (merging files part by part).
Only processes this script starts are signalled, by pid.
"""

import argparse
import json
import os
import pickle
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

MONO = time.CLOCK_MONOTONIC
# A profd sample's pause is the longest gap that starts within [tick - BEFORE, tick + AFTER]:
# the stop follows the tick (/proc reads, PTRACE_INTERRUPT, the IPI), except when the daemon
# runs on the target's CPU: its timer wake-up then preempts the target a few tens of us
# before the daemon reads the tick time.
PROFD_WINDOW_NS = 300_000
PROFD_BEFORE_NS = 100_000
WARM_MS = 1000
RATES = (101, 999)
# The CPU window of a busy run ends this long before the target's end (run_busy).
CPU_END_MARGIN_S = 0.3
# profd's configurations in the busy runs: (tool, mode). cputime is the closest to perf
# record's own cpu-clock sampling; alarm is profd's default (a wall-clock tick).
PROFD_TOOLS = ("profd", "profd-ptrace")
PROFD_MODES = ("cputime", "alarm")
SAMPLER = {"profd": "perf", "profd-ptrace": "ptrace"}
# profd (perf sampler) in a wall-clock mode enables a one-shot event at the tick
# (PERF_EVENT_IOC_REFRESH, a function call on the target's CPU: an interrupt of the target
# when it is running there), and the kernel samples after 100 us of the thread's CPU: the
# arming pause is the longest gap starting in [sample - ARM_BEFORE, sample - ARM_AFTER].
ARM_BEFORE_NS = 250_000
ARM_AFTER_NS = 50_000
PARTS = ("busy", "pair", "idlers", "floor", "scale", "host", "where")
# The pair part: a profd (perf) sample and a perf sample this close together may share a gap
# (the containing rule would give both the same one): both are left out. perf samples at
# 1 Hz more than profd: two task clocks of one period keep their phase while the thread
# spins, and where it put them together every sample would be left out (all of a run at
# 999 Hz in a trial); 1 Hz apart, they pass each other once a second.
PAIR_APART_NS = 200_000
PAIR_PERF_EXTRA_HZ = 1
# The where part: parts of profd's tick, each the functions whose presence in a perf sample's
# call chain puts the sample in it (inclusive; the unwind's sigprocmask is also in the
# unwind, the rest do not nest).
WHERE = (
    ("wait", {"epoll_wait"}),
    ("timer", {"arm_alarm", "timerfd_settime", "__timerfd_settime"}),
    ("accounting", {"thread_cpu_ns", "cpu_now"}),
    ("proc", {"proc_read_schedstat", "proc_read_syscall"}),
    ("arm", {"perfs_arm"}),
    ("drain", {"perfs_drain"}),
    ("unwind", {"unwinder_unwind"}),
    ("sigprocmask_in_unwind", {"__GI___sigprocmask", "__GI___pthread_sigmask",
                               "pthread_sigmask@GLIBC_2.2.5", "__sigprocmask"}),
)
WHERE_TOP = ("wait", "timer", "accounting", "proc", "arm", "drain")
WHERE_LABEL = {
    "wait": "waiting in epoll_wait, and the wake-up (context switch into profd)",
    "timer": "re-arming the tick's timerfd (`arm_alarm`, timerfd_settime)",
    "accounting": "profd's own cost accounting (CPU-time clocks: `thread_cpu_ns`, `cpu_now`)",
    "proc": "/proc reads of the thread (`proc_read_schedstat`, `proc_read_syscall`)",
    "arm": "arming the one-shot event (`perfs_arm`: PERF_EVENT_IOC_REFRESH)",
    "drain": "reading the ring (`perfs_drain`: copy, unwind, intern)",
    "unwind": "- of which the unwind (`unwinder_unwind`)",
    "sigprocmask_in_unwind": "- - of which libunwind's sigprocmask (its global cache lock)",
    "other": "the rest (the event loop, scheduling the next tick, the budget)",
}
# The scale part: seconds between the last attach and the window (the budget re-divides
# every 0.25 s; a hundred first samples read every thread's maps and stacks).
SCALE_SETTLE_S = 5
LIBPROFILER_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libprofiler.so.0",
                          "/usr/lib/x86_64-linux-gnu/libprofiler.so",
                          "/usr/lib/libprofiler.so.0")


def now_ns():
    return time.clock_gettime_ns(MONO)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# statistics


def pctl(values, p):
    """Nearest-rank percentile of a list (p in 0..1); None when empty."""
    if not values:
        return None
    v = sorted(values)
    return v[int(round(p * (len(v) - 1)))]


def perf_script_chains(text):
    """The call chains (leaf first, function names, inlined ones as their own) of `perf
    script -F ip,sym` output, one per sample that has any."""
    for block in text.split("\n\n"):
        chain = []
        for line in block.splitlines():
            f = line.split(None, 1)
            if len(f) == 2:
                chain.append(f[1].replace(" (inlined)", "").strip())
        if chain:
            yield chain


def median(values):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def med(rs, key):
    """Median of r[key] over result dicts (None values left out)."""
    return median([r.get(key) for r in rs])


def fmt_us(ns, digits=1):
    if ns is None:
        return "n/a"
    return "%.*f" % (digits, ns / 1e3)


# ---------------------------------------------------------------------------------------
# processes


def proc_cpu_ns(pid):
    """CPU time of every thread of pid, in ns, from /proc/PID/task/*/schedstat (the
    scheduler's exact run time: /proc/PID/stat's utime+stime count 10 ms clock ticks, too
    coarse for a 5 s window of a process using a few per cent of a CPU)."""
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except FileNotFoundError:
        return None
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            pass
    return total


def proc_tree(pid):
    """pid and its descendants (profd's symbolizer helpers are its children), from
    /proc/PID/task/*/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir("/proc/%d/task" % p):
                try:
                    with open("/proc/%d/task/%s/children" % (p, tid)) as f:
                        todo.extend(int(x) for x in f.read().split())
                except (FileNotFoundError, ProcessLookupError):
                    pass
        except FileNotFoundError:
            pass
    return out


def proc_tree_cpu_ns(pid):
    """CPU of every thread of pid and of its descendants, in ns (schedstat)."""
    return sum(proc_cpu_ns(p) or 0 for p in proc_tree(pid))


def proc_tree_rss_kib(pid):
    """(VmRSS, VmHWM) of pid and its descendants, in KiB."""
    rss = hwm = 0
    for p in proc_tree(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
                    elif line.startswith("VmHWM:"):
                        hwm += int(line.split()[1])
        except FileNotFoundError:
            pass
    return rss, hwm


def thread_cpu_ns(pid, tid):
    try:
        with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
            return int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def proc_stat_cpu_ns(pid):
    """utime+stime of pid from /proc/PID/stat, in ns (clock-tick granularity)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except FileNotFoundError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    hz = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // hz


def machine_busy_ns():
    """(busy, steal) CPU time of the whole machine so far, in ns, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) * tick, steal * tick


class LoadMeter:
    """CPU used on the machine during a window by everything but the given processes (other
    people's work on a shared machine), as a fraction of one CPU; and the steal time."""

    def __init__(self, *pids):
        self.pids = [p for p in pids if p]
        self.b0, self.s0 = machine_busy_ns()
        self.p0 = sum(proc_cpu_ns(p) or 0 for p in self.pids)
        self.t0 = now_ns()

    def done(self):
        b1, s1 = machine_busy_ns()
        p1 = sum(proc_cpu_ns(p) or 0 for p in self.pids)
        dt = max(1, now_ns() - self.t0)
        return max(0.0, (b1 - self.b0 - (p1 - self.p0)) / dt), (s1 - self.s0) / dt


def end_process(p, sig=signal.SIGKILL):
    if p is not None and p.poll() is None:
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Daemon:
    """profd on a private socket, driven with profctl; status over the socket directly so
    a status in a measurement window costs no process start."""

    # --profd-nice: profd alone at this nice value, in a session (autogroup) of its own at
    # the same value, as profd.service runs it (Nice=-10); None: as everything else.
    nice = None

    def __init__(self, build, tmp, extra=()):
        self.build = build
        self.socket = os.path.join(tmp, "profd.sock")
        self.logf = open(os.path.join(tmp, "profd.log"), "w")
        self.proc = subprocess.Popen([os.path.join(build, "daemon", "profd"), "--socket",
                                      self.socket] + list(extra), stdout=self.logf,
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=None if Daemon.nice is None else Daemon._renice)
        deadline = time.monotonic() + 20
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("profd did not start (see %s)" % self.logf.name)
            time.sleep(0.01)
        self.sock = None

    def attach(self, pid, hz, mode=None, sampler=None):
        """Attach over the socket (no profctl process started: the scale part attaches a
        hundred targets)."""
        req = {"cmd": "attach", "pid": pid, "hz": hz}
        if mode:
            req["mode"] = mode
        if sampler:
            req["sampler"] = sampler
        return self._call(req)

    def status_all(self):
        res = self._call({"cmd": "status"})
        return res["daemon"], {t["pid"]: t for t in res["targets"]}

    def status_all_at(self):
        """status_all, and the midpoint of its request and reply (CLOCK_MONOTONIC ns): the
        moment its counts stand for."""
        a = now_ns()
        d, st = self.status_all()
        return d, st, (a + now_ns()) / 2

    @staticmethod
    def _renice():
        # Nice values only order processes within one autogroup: a session of its own whose
        # autogroup has the same nice value.
        os.setsid()
        os.setpriority(os.PRIO_PROCESS, 0, Daemon.nice)
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(Daemon.nice))
        except OSError:
            pass

    @property
    def pid(self):
        return self.proc.pid

    def ctl(self, *args):
        cmd = [os.path.join(self.build, "client", "profctl"), "--socket", self.socket]
        r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError("profctl %s: %s" % (" ".join(map(str, args)), r.stderr.strip()))
        return r

    def _call(self, obj):
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(30)
            self.sock.connect(self.socket)
            self._call({"cmd": "hello", "version": 1, "client": "bench.py"})
        payload = json.dumps(obj).encode()
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)
        hdr = self._recv(4)
        (n,) = struct.unpack(">I", hdr)
        reply = json.loads(self._recv(n))
        if "error" in reply:
            raise RuntimeError("profd: %s" % reply["error"])
        return reply["result"]

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RuntimeError("profd closed the connection")
            buf += chunk
        return buf

    def status(self, pid):
        res = self._call({"cmd": "status", "pid": pid})
        for t in res["targets"]:
            if t["pid"] == pid:
                return res["daemon"], t
        return res["daemon"], None

    def stop(self):
        if self.sock is not None:
            self.sock.close()
        end_process(self.proc, signal.SIGTERM)
        self.logf.close()


class Target:
    """A benchmark target with a line protocol on stdin/stdout."""

    def __init__(self, argv, env=None, stderr=subprocess.DEVNULL, wait_ready=True):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr, text=True, bufsize=1, env=env)
        if wait_ready:
            self.ready()

    def ready(self):
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError("%s did not start: %r" % (self.proc.args[0], line))
        self.pid = int(line.split()[1])

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, word):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("target exited before %r" % word)
            if line.startswith(word):
                return line.split()

    def end(self):
        end_process(self.proc)


# ---------------------------------------------------------------------------------------
# attribution of pauses to samples


def pauses_in_window(gaps, ticks, window_ns, threshold, before_ns=PROFD_BEFORE_NS):
    """profd: for each tick, the longest gap starting in [tick - before, tick + window].
    Returns (pauses, matched, delays): unmatched ticks count as a pause of `threshold` (an
    upper bound); delays are gap start - tick of the matched ones."""
    import bisect
    starts = [g[0] for g in gaps]
    out, delays, matched = [], [], 0
    for t in ticks:
        i = bisect.bisect_left(starts, t - before_ns)
        best = None
        while i < len(gaps) and gaps[i][0] <= t + window_ns:
            if best is None or gaps[i][1] > best[1]:
                best = gaps[i]
            i += 1
        if best is None:
            out.append(threshold)
        else:
            out.append(best[1])
            delays.append(best[0] - t)
            matched += 1
    return out, matched, delays


def pauses_containing(gaps, times, threshold):
    """perf, gperftools: the sample is taken inside the target, so its time lies inside the
    gap it causes: the gap with start <= t <= start + length."""
    import bisect
    starts = [g[0] for g in gaps]
    out, matched = [], 0
    for t in times:
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and gaps[i][0] + gaps[i][1] >= t:
            out.append(gaps[i][1])
            matched += 1
        else:
            out.append(threshold)
    return out, matched


def gaps_before(gaps, times, before_ns, after_ns):
    """For each time t, the longest gap starting in [t - before, t - after]; 0 if none."""
    import bisect
    starts = [g[0] for g in gaps]
    out = []
    for t in times:
        i = bisect.bisect_left(starts, t - before_ns)
        best = 0
        while i < len(gaps) and gaps[i][0] <= t - after_ns:
            best = max(best, gaps[i][1])
            i += 1
        out.append(best)
    return out


def paths_delta(st0, st1):
    """Samples and profd's CPU (ns, its own accounting in the sample path) per path between
    two statuses of a target."""
    out = {}
    for k in ("perf", "proc", "ptrace"):
        a, b = st0["paths"][k], st1["paths"][k]
        n = b["samples"] - a["samples"]
        ns = (b["samples"] * b["us_per_sample"] - a["samples"] * a["us_per_sample"]) * 1e3
        out[k] = (n, ns)
    return out


def unwind_delta(st0, st1):
    """(complete, all) unwinds between two statuses of a target."""
    u0, u1 = st0["unwind"], st1["unwind"]
    c = u1["complete"] - u0["complete"]
    n = c + sum(u1[k] - u0[k] for k in ("truncated", "too_deep"))
    return c, n


# ---------------------------------------------------------------------------------------
# measurement 1 + 2: the busy target


class Bench:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.tmp = tempfile.mkdtemp(prefix="profd-bench-")
        self.pausemeter = os.path.join(self.build, "tests", "bench", "pausemeter")
        self.floor = os.path.join(self.build, "tests", "bench", "ptrace_floor")
        self.timer_floor = os.path.join(self.build, "tests", "bench", "timer_floor")
        self.shim = os.path.join(self.build, "tests", "bench", "libsigprof_times.so")
        self.idlers = os.path.join(self.build, "tests", "programs", "idlers")
        self.idlesvc = os.path.join(self.build, "tests", "programs", "idlesvc")
        self.busy = os.path.join(self.build, "tests", "programs", "busy")
        self.libprofiler = next((p for p in LIBPROFILER_CANDIDATES if os.path.exists(p)), None)
        self.perf = shutil.which("perf")
        self.notes = []
        self.waited = 0.0
        self.retries = 0
        self.raw = {}
        self.started = time.monotonic()

    # -- one run of the busy target under one profiler -----------------------------------
    def run_busy(self, tool, hz, rep=0, mode=None):
        a = self.args
        secs, thr = a.secs, a.threshold
        argv = [self.pausemeter, str(WARM_MS), str(secs), str(thr)]
        env = None
        tmp = tempfile.mkdtemp(dir=self.tmp)
        sigtimes = os.path.join(tmp, "sigprof.times")
        if tool == "gperftools":
            env = dict(os.environ)
            env.update({"LD_PRELOAD": self.shim + " " + self.libprofiler,
                        "CPUPROFILE": os.path.join(tmp, "x.prof"),
                        "CPUPROFILE_FREQUENCY": str(hz),
                        "SIGPROF_TIMES_OUT": sigtimes})
        daemon = perf = target = None
        res = {"tool": tool, "hz": hz, "rep": rep, "mode": mode}
        try:
            target = Target(argv, env=env, stderr=subprocess.PIPE if tool == "gperftools"
                            else subprocess.DEVNULL)
            if tool in PROFD_TOOLS:
                daemon = Daemon(self.build, tmp)
                daemon.ctl("attach", target.pid, "--hz", hz, "--mode", mode, "--sampler",
                           SAMPLER[tool])
                prof_pid = daemon.pid
            elif tool == "perf":
                perf, pdata = self.perf_record(target.pid, hz, tmp)
                prof_pid = perf.pid
            else:
                prof_pid = None
            target.send("go")
            t0 = int(target.expect("measuring")[1])
            # The CPU window: from profd's first status (its samples so far taken: alarm
            # defers a running thread's ticks and takes them in batches, or at a status) to
            # just after its second, which takes the samples of the window, their unwinds
            # counted in it (and the status itself, ~150 us). It ends CPU_END_MARGIN_S
            # before the target's end: then its thread blocks writing its gaps out, and the
            # ticks of a blocking thread (the deferral's end, the first /proc sample) are
            # not the cost of the busy thread's samples (they were 1-1.5 ms of a 4 s window
            # at 101 Hz, 3 us per sample).
            st0 = daemon.status(target.pid) if daemon else None
            c0 = proc_tree_cpu_ns(prof_pid) if prof_pid else None
            s0 = proc_stat_cpu_ns(prof_pid) if prof_pid else None
            w0 = now_ns()
            lm = LoadMeter(target.pid, prof_pid)
            time.sleep(max(0.5, (t0 + secs * 1_000_000_000 - now_ns()) / 1e9 - CPU_END_MARGIN_S))
            st1 = daemon.status(target.pid) if daemon else None
            c1 = proc_tree_cpu_ns(prof_pid) if prof_pid else None
            s1 = proc_stat_cpu_ns(prof_pid) if prof_pid else None
            w1 = now_ns()
            res["other_load"], res["steal"] = lm.done()
            done = target.expect("done")
            t1, ngaps = int(done[1]), int(done[2])
            times = None
            if daemon:
                times = self.profd_times(daemon, target.pid, t0, t1, tmp)
                _, fin = daemon.status(target.pid)
                res["status"] = fin
                res["window_samples"] = st1[1]["samples"] - st0[1]["samples"]
                res["window_ticks"] = st1[1]["ticks"] - st0[1]["ticks"]
                res["cpu_getrusage_ns"] = (st1[0]["cpu_s"] - st0[0]["cpu_s"]) * 1e9
                res["paths"] = paths_delta(st0[1], st1[1])
                res["unwind"] = unwind_delta(st0[1], st1[1])
                res["lost"] = st1[1]["perf"]["lost"] - st0[1]["perf"]["lost"]
                daemon.ctl("detach", target.pid)
            gaps = self.read_gaps(target, ngaps)
            if perf is not None:
                times = self.perf_times(perf, pdata, target.pid)
                res["window_samples"] = sum(1 for t in times if w0 <= t <= w1)
            if tool == "gperftools":
                err = target.proc.stderr.read()
                m = re.search(r"interrupts/evictions/bytes = (\d+)/", err)
                res["gperf_interrupts"] = int(m.group(1)) if m else None
                with open(sigtimes) as f:
                    times = sorted(int(x) for x in f.read().split())
        finally:
            end_run(target, perf, daemon)
        dur = t1 - t0
        res.update(t0=t0, t1=t1, dur_ns=dur, ngaps=len(gaps),
                   gap_total_ns=sum(g[1] for g in gaps),
                   gap_p50=pctl([g[1] for g in gaps], .5))
        if prof_pid:
            res["cpu_ns"] = c1 - c0
            res["cpu_stat_ns"] = s1 - s0
            if res.get("window_samples"):
                res["cpu_per_sample_ns"] = res["cpu_ns"] / res["window_samples"]
                res["cpu_stat_per_sample_ns"] = res["cpu_stat_ns"] / res["window_samples"]
        if tool == "nothing":
            # Control: virtual ticks at each rate, attributed by each rule: what the
            # attribution picks up with no profiler at all.
            res["control"], res["control_in"], res["control_arm"] = {}, {}, {}
            for rate in RATES:
                step = 1_000_000_000 // rate
                vt = list(range(t0 + PROFD_BEFORE_NS, t1 - PROFD_WINDOW_NS, step))
                p, m, _ = pauses_in_window(gaps, vt, PROFD_WINDOW_NS, self.args.threshold)
                res["control"][rate] = (m / len(vt), pctl(p, .5), pctl(p, .99))
                p, m = pauses_containing(gaps, vt, self.args.threshold)
                res["control_in"][rate] = (m / len(vt), pctl(p, .5), pctl(p, .99))
                pa = gaps_before(gaps, vt, ARM_BEFORE_NS, ARM_AFTER_NS)
                both = [x + y for x, y in zip(p, pa)]
                res["control_arm"][rate] = (sum(1 for x in pa if x) / len(vt), pctl(pa, .5),
                                            pctl(both, .5), pctl(both, .99))
            return res
        res["n_all"] = sum(1 for t in times if t0 <= t <= t1)
        # Samples whose attribution window lies inside the measured window.
        times = [t for t in times if t0 + PROFD_BEFORE_NS <= t <= t1 - PROFD_WINDOW_NS]
        if tool == "profd-ptrace":
            # The tick is profd's time; the stop follows it.
            p, m, delays = pauses_in_window(gaps, times, PROFD_WINDOW_NS, thr)
            res["delay_p50"] = pctl(delays, .5)
            res["delay_p99"] = pctl(delays, .99)
        else:
            # The kernel's sample time (perf, profd's perf sampler) or the handler's entry
            # (gperftools): inside the pause it causes.
            p, m = pauses_containing(gaps, times, thr)
        if tool == "profd" and mode != "cputime":
            # The one-shot event's arming, before the sample (see ARM_BEFORE_NS).
            pa = gaps_before(gaps, times, ARM_BEFORE_NS, ARM_AFTER_NS)
            both = [x + y for x, y in zip(p, pa)]
            res.update(arm_share=sum(1 for x in pa if x) / max(1, len(pa)),
                       arm_p50=pctl(pa, .5), both_p50=pctl(both, .5),
                       both_p99=pctl(both, .99))
        res.update(n=len(times), matched=m, p50=pctl(p, .5), p99=pctl(p, .99),
                   rate=len(times) * 1e9 / max(1, dur - PROFD_WINDOW_NS - PROFD_BEFORE_NS))
        return res

    def perf_record(self, pid, hz, tmp):
        """perf record --call-graph dwarf of pid at hz, as users run it: (its Popen, its data
        file)."""
        pdata = os.path.join(tmp, "perf.data")
        perf = subprocess.Popen([self.perf, "record", "-q", "-e", "cpu-clock", "-F", str(hz),
                                 "--call-graph", "dwarf", "-k", "CLOCK_MONOTONIC", "-p",
                                 str(pid), "-o", pdata], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # perf opens its events; the target's warm-up covers the rest
        if perf.poll() is not None:
            raise RuntimeError("perf record failed: " + perf.stderr.read()[-500:])
        return perf, pdata

    def perf_times(self, perf, pdata, pid):
        """After the target's end: the times of perf record's samples of pid, sorted."""
        perf.wait(timeout=120)
        if perf.returncode != 0:
            raise RuntimeError("perf record: " + perf.stderr.read()[-500:])
        sc = subprocess.run([self.perf, "script", "-i", pdata, "-F", "tid,time", "--ns"],
                            capture_output=True, text=True, timeout=300)
        times = []
        for line in sc.stdout.splitlines():
            m = re.match(r"\s*(\d+)\s+(\d+)\.(\d{9}):", line)
            if m and int(m.group(1)) == pid:
                times.append(int(m.group(2)) * 1_000_000_000 + int(m.group(3)))
        if not times:
            log("  perf: no samples of %d in %s (perf record: %r; perf script: %r)"
                % (pid, pdata, perf.stderr.read()[-300:], sc.stderr[-300:]))
        return sorted(times)

    @staticmethod
    def profd_times(daemon, pid, t0, t1, tmp):
        """The times of profd's samples of thread pid in [t0, t1], sorted (sentry format:
        the kernel's sample time for a kernel copy)."""
        out = os.path.join(tmp, "slice.json")
        daemon.ctl("slice", pid, "--from", t0, "--to", t1, "--format", "sentry", "-o", out)
        with open(out) as f:
            prof = json.load(f)["profile"]
        return sorted(t0 + int(s["elapsed_since_start_ns"]) for s in prof["samples"]
                      if int(s["thread_id"]) == pid)

    @staticmethod
    def read_gaps(target, ngaps):
        """pausemeter's gaps (start, length), then its end."""
        gaps = []
        for _ in range(ngaps):
            s, l = target.proc.stdout.readline().split()
            gaps.append((int(s), int(l)))
        target.expect("end")
        target.proc.wait(timeout=30)
        return gaps

    # -- measurement 1b: profd and perf on the same thread at once --------------------------
    def run_pair(self, hz, rep, mode):
        """profd (perf sampler) and perf record sample one pausemeter at once, at the rate
        (perf at PAIR_PERF_EXTRA_HZ more): each pause measured under the same conditions
        (the same moment of the host, the same CPUs), which separate runs on a nested VM
        are not (a run's p50 moves by 2x from one to the next). Samples of the two closer
        than PAIR_APART_NS are left out."""
        a = self.args
        tmp = tempfile.mkdtemp(dir=self.tmp)
        res = {"tool": "pair", "hz": hz, "rep": rep, "mode": mode}
        daemon = perf = target = None
        try:
            target = Target([self.pausemeter, str(WARM_MS), str(a.secs), str(a.threshold)])
            daemon = Daemon(self.build, tmp)
            daemon.ctl("attach", target.pid, "--hz", hz, "--mode", mode, "--sampler", "perf")
            perf, pdata = self.perf_record(target.pid, hz + PAIR_PERF_EXTRA_HZ, tmp)
            lm = LoadMeter(target.pid, daemon.pid, perf.pid)
            target.send("go")
            t0 = int(target.expect("measuring")[1])
            time.sleep(a.secs / 2)
            _, mid = daemon.status(target.pid)
            res["copy_bytes"] = mid["perf"].get("copy_bytes")
            done = target.expect("done")
            res["other_load"], res["steal"] = lm.done()
            t1, ngaps = int(done[1]), int(done[2])
            mine = self.profd_times(daemon, target.pid, t0, t1, tmp)
            daemon.ctl("detach", target.pid)
            gaps = self.read_gaps(target, ngaps)
            theirs = self.perf_times(perf, pdata, target.pid)
        finally:
            end_run(target, perf, daemon)
        import bisect

        def apart(times, other):
            keep = []
            for t in times:
                if not t0 + PROFD_BEFORE_NS <= t <= t1 - PROFD_WINDOW_NS:
                    continue
                i = bisect.bisect_left(other, t - PAIR_APART_NS)
                if i < len(other) and other[i] <= t + PAIR_APART_NS:
                    continue
                keep.append(t)
            return keep

        for who, times, other in (("profd", mine, theirs), ("perf", theirs, mine)):
            kept = apart(times, other)
            p, m = pauses_containing(gaps, kept, a.threshold)
            res[who] = {"n": len(kept), "n_all": sum(1 for t in times if t0 <= t <= t1),
                        "matched": m, "pauses": p, "p50": pctl(p, .5), "p99": pctl(p, .99)}
        res.update(t0=t0, t1=t1, dur_ns=t1 - t0, ngaps=len(gaps))
        return res

    # -- measurement 3: idle threads ------------------------------------------------------
    def run_idlers(self, hz):
        secs = self.args.secs
        tmp = tempfile.mkdtemp(dir=self.tmp)
        daemon = target = None
        res = {"hz": hz}
        try:
            target = Target([self.idlers, str(WARM_MS / 1000 + secs + 1.5), "50"])
            daemon = Daemon(self.build, tmp)
            daemon.ctl("attach", target.pid, "--hz", hz)
            time.sleep(WARM_MS / 1000)
            c0 = proc_cpu_ns(daemon.pid)
            lm = LoadMeter(target.pid, daemon.pid)
            d0, st0 = daemon.status(target.pid)
            time.sleep(secs)
            d1, st1 = daemon.status(target.pid)
            res["other_load"], res["steal"] = lm.done()
            c1 = proc_cpu_ns(daemon.pid)
            daemon.ctl("detach", target.pid)
            rep = target.expect("report")
            kv = dict(x.split("=") for x in rep[1:])
            target.proc.wait(timeout=30)
        finally:
            if target:
                target.end()
            if daemon:
                daemon.stop()
        ticks = st1["ticks"] - st0["ticks"]
        samples = st1["samples"] - st0["samples"]
        stopped = st1["threads_stopped"] - st0["threads_stopped"]
        cpu = c1 - c0
        k0, k1 = st0["sampled"], st1["sampled"]
        res.update(threads=st1["threads"], ticks=ticks, samples=samples, stopped=stopped,
                   stopped_per_tick=stopped / ticks if ticks else None,
                   status_stopped_per_tick=st1["threads_stopped_per_tick"],
                   cpu_per_tick=cpu / ticks if ticks else None,
                   cpu_per_sample=cpu / samples if samples else None,
                   achieved_hz=ticks / secs,
                   blocked=k1["blocked_without_stop"] - k0["blocked_without_stop"],
                   reused=k1["idle_reused"] - k0["idle_reused"],
                   stopped_samples=k1["stopped"] - k0["stopped"],
                   eintr=int(kv.get("eintr", -1)), wakeups=int(kv.get("wakeups", -1)),
                   still_stopping=st1["skipped"]["still_stopping"] - st0["skipped"]["still_stopping"],
                   complete_pct=st1["unwind"]["complete_pct"],
                   restarted=st1["syscalls_restarted"])
        return res

    # -- measurement 5: many mostly idle services ----------------------------------------
    def run_scale(self, sampler, nthreads, rep=0, budget=True):
        """a.scale_procs copies of tests/programs/idlesvc with nthreads threads, all attached
        at 101 Hz alarm with the daemon's default budget (or none: --max-cpu 0); deltas of
        status over a window after SCALE_SETTLE_S (the budget re-divides every 0.25 s)."""
        a = self.args
        secs = a.secs
        tmp = tempfile.mkdtemp(dir=self.tmp)
        daemon = None
        targets = []
        res = {"sampler": sampler, "threads": nthreads, "rep": rep, "procs": a.scale_procs,
               "budget": budget}
        try:
            for _ in range(a.scale_procs):
                # Killed at the end; long-lived in case attaching takes long on a busy host.
                targets.append(Target([self.idlesvc, "3600", str(nthreads)], wait_ready=False))
            for t in targets:
                t.ready()
            pids = [t.pid for t in targets]
            daemon = Daemon(self.build, tmp, () if budget else ("--max-cpu", "0"))
            ta = now_ns()
            for pid in pids:
                daemon.attach(pid, 101, "alarm", sampler)
            res["attach_s"] = (now_ns() - ta) / 1e9
            time.sleep(SCALE_SETTLE_S)
            # profd's CPU between its two statuses (a status of 100 targets is 15-50 ms of
            # its CPU, not the ticks'); their counts over the span between the statuses'
            # midpoints, scaled to the CPU window.
            d0, st0, mid0 = daemon.status_all_at()
            tc0 = sum(proc_cpu_ns(p) or 0 for p in pids)
            c0 = proc_tree_cpu_ns(daemon.pid)
            lm = LoadMeter(daemon.pid, *pids)
            w0 = now_ns()
            time.sleep(secs)
            w1 = now_ns()
            c1 = proc_tree_cpu_ns(daemon.pid)
            tc1 = sum(proc_cpu_ns(p) or 0 for p in pids)
            d1, st1, mid1 = daemon.status_all_at()
            res["other_load"], res["steal"] = lm.done()
            res["rss_kib"], res["hwm_kib"] = proc_tree_rss_kib(daemon.pid)
            res["accounted_bytes"] = d1["memory"]["total_bytes"]
        finally:
            for t in targets:
                t.end()
            if daemon:
                daemon.stop()
        dur = w1 - w0
        span = max(1, mid1 - mid0)
        ticks = samples = 0
        sampled = {}
        paths = {"perf": [0, 0], "proc": [0, 0], "ptrace": [0, 0]}
        rates, effs, thr_end, thr_win, thr_s, ring, missed = [], [], 0, 0, 0.0, 0, 0
        for pid in pids:
            x0, x1 = st0.get(pid), st1.get(pid)
            if not x0 or not x1:
                continue
            ticks += x1["ticks"] - x0["ticks"]
            samples += x1["samples"] - x0["samples"]
            for k in x1["sampled"]:
                sampled[k] = sampled.get(k, 0) + x1["sampled"][k] - x0["sampled"][k]
            for k, (n, ns) in paths_delta(x0, x1).items():
                paths[k][0] += n
                paths[k][1] += ns
            rates.append((x1["ticks"] - x0["ticks"]) * 1e9 / span)
            effs.append(x1["sampling"]["effective_hz"])
            thr_end += bool(x1["sampling"]["throttled"])
            thr_win += x1["sampling"]["throttled_s"] > x0["sampling"]["throttled_s"]
            thr_s += x1["sampling"]["throttled_s"]
            missed += x1["sampling"]["missed"] - x0["sampling"]["missed"]
            ring += x1["perf"]["ring_bytes"]
        cpu = c1 - c0
        # (The counts over the CPU window.)
        ticks, samples, missed = (round(x * dur / span) for x in (ticks, samples, missed))
        sampled = {k: round(v * dur / span) for k, v in sampled.items()}
        res.update(dur_ns=dur, targets=len(rates), ticks=ticks, samples=samples,
                   sampled=sampled, paths=paths, throttled_end=thr_end,
                   throttled_window=thr_win, throttled_s=thr_s, ring_bytes=ring,
                   rate_p50=median(rates), rate_min=min(rates) if rates else None,
                   eff_p50=median(effs), eff_min=min(effs) if effs else None,
                   cpu_pct=100 * cpu / dur, cpu_per_tick=cpu / ticks if ticks else None,
                   cpu_per_sample=cpu / samples if samples else None,
                   samples_per_s=samples * 1e9 / dur, missed_per_s=missed * 1e9 / dur,
                   targets_cpu_pct=100 * (tc1 - tc0) / dur,
                   budget_pct=d1["budget_cpu_pct"])
        return res

    # -- measurement 6: a busy host ------------------------------------------------------
    def run_host(self, sampler, mode, hz, rep=0):
        """One tests/programs/busy process with one busy thread per CPU (a.host_procs),
        all attached at hz in mode with sampler; over a window after WARM_MS: the busy
        threads' samples (from a slice of the window) per second of wall time (alarm) or per
        second of their CPU (cputime), daemon CPU and memory, unwinds."""
        a = self.args
        secs = a.secs
        n = a.host_procs or os.cpu_count()
        tmp = tempfile.mkdtemp(dir=self.tmp)
        daemon = None
        targets = []
        res = {"sampler": sampler, "mode": mode, "hz": hz, "rep": rep, "procs": n}
        try:
            for _ in range(n):
                targets.append(Target([self.busy, "1", "3600"]))  # killed at the end
            pids = [t.pid for t in targets]
            busy = {}  # every thread but main (asleep): busy.c's workers, started by now
            for pid in pids:
                for tid in os.listdir("/proc/%d/task" % pid):
                    if int(tid) != pid:
                        busy[int(tid)] = pid
            daemon = Daemon(self.build, tmp)
            for pid in pids:
                daemon.attach(pid, hz, mode, sampler)
            time.sleep(WARM_MS / 1000)
            d0, st0 = daemon.status_all()
            c0 = proc_tree_cpu_ns(daemon.pid)
            b0 = {tid: thread_cpu_ns(pid, tid) for tid, pid in busy.items()}
            lm = LoadMeter(daemon.pid, *pids)
            w0 = now_ns()
            time.sleep(secs)
            w1 = now_ns()
            c1 = proc_tree_cpu_ns(daemon.pid)
            b1 = {tid: thread_cpu_ns(pid, tid) for tid, pid in busy.items()}
            d1, st1 = daemon.status_all()
            res["other_load"], res["steal"] = lm.done()
            res["rss_kib"], res["hwm_kib"] = proc_tree_rss_kib(daemon.pid)
            res["accounted_bytes"] = d1["memory"]["total_bytes"]
            counts = {tid: 0 for tid in busy}
            gamma = gamma_whole = 0
            for pid in pids:
                out = os.path.join(tmp, "slice-%d.json" % pid)
                daemon.ctl("slice", pid, "--from", w0, "--to", w1, "--format", "sentry",
                           "-o", out)
                with open(out) as f:
                    prof = json.load(f)["profile"]
                funcs = [fr.get("function") for fr in prof["frames"]]
                for s in prof["samples"]:
                    tid = int(s["thread_id"])
                    if tid not in counts:
                        continue
                    counts[tid] += 1
                    names = [funcs[i] for i in prof["stacks"][s["stack_id"]]]
                    if "work_gamma" in names:
                        gamma += 1
                        # Below work_gamma's 8 KiB array: its caller, then the thread's start.
                        gamma_whole += "worker" in names and "start_thread" in names
        finally:
            for t in targets:
                t.end()
            if daemon:
                daemon.stop()
        dur = w1 - w0
        per = []
        for tid, c in counts.items():
            if mode == "cputime":
                cpu = (b1[tid] or 0) - (b0[tid] or 0)
                per.append(c * 1e9 / cpu / hz if cpu else None)
            else:
                per.append(c * 1e9 / dur / hz)
        ticks = samples = lost = comp = unw = 0
        paths = {"perf": [0, 0], "proc": [0, 0], "ptrace": [0, 0]}
        ring = missed = thr = 0
        for pid in pids:
            x0, x1 = st0[pid], st1[pid]
            ticks += x1["ticks"] - x0["ticks"]
            samples += x1["samples"] - x0["samples"]
            lost += x1["perf"]["lost"] - x0["perf"]["lost"]
            missed += x1["sampling"]["missed"] - x0["sampling"]["missed"]
            thr += bool(x1["sampling"]["throttled"])
            ring += x1["perf"]["ring_bytes"]
            c, u = unwind_delta(x0, x1)
            comp += c
            unw += u
            for k, (m, ns) in paths_delta(x0, x1).items():
                paths[k][0] += m
                paths[k][1] += ns
        cpu = c1 - c0
        res.update(dur_ns=dur, achieved=per, achieved_p50=median(per),
                   achieved_min=min(x for x in per if x is not None) if per else None,
                   busy_samples=sum(counts.values()),
                   busy_cpu_pct=100 * sum((b1[t] or 0) - (b0[t] or 0) for t in busy) / dur,
                   ticks_per_s=ticks * 1e9 / dur / n, samples=samples, lost=lost,
                   missed=missed, throttled=thr, ring_bytes=ring, paths=paths,
                   unwind_complete=comp, unwinds=unw,
                   gamma=gamma, gamma_whole=gamma_whole,
                   cpu_pct=100 * cpu / dur, cpu_per_sample=cpu / samples if samples else None)
        return res

    # -- measurement 7: where profd's CPU goes -------------------------------------------
    def run_where(self, mode, hz):
        """profd (perf) on pausemeter at hz in mode while `perf record --call-graph dwarf`
        samples profd's own threads: the share of profd's CPU samples under each part of the
        tick (WHERE), inclusive. perf's own sampling of profd perturbs it: only shares are
        kept."""
        secs = 2 * self.args.secs  # profd uses ~1% of a CPU: room for enough samples of it
        tmp = tempfile.mkdtemp(dir=self.tmp)
        target = daemon = rec = None
        pdata = os.path.join(tmp, "profd.data")
        res = {"mode": mode, "hz": hz}
        try:
            target = Target([self.pausemeter, str(WARM_MS), str(secs + 1), "1000000"])
            daemon = Daemon(self.build, tmp)
            daemon.ctl("attach", target.pid, "--hz", hz, "--mode", mode, "--sampler", "perf")
            target.send("go")
            target.expect("measuring")
            rec = subprocess.Popen([self.perf, "record", "-q", "-e", "cpu-clock", "-F", "9999",
                                    "--call-graph", "dwarf,16384", "-p", str(daemon.pid),
                                    "-o", pdata], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
            lm = LoadMeter(target.pid, daemon.pid)
            time.sleep(secs)
            res["other_load"], res["steal"] = lm.done()
            end_process(rec, signal.SIGINT)
            target.expect("done")
        finally:
            end_process(rec, signal.SIGINT)
            if target:
                target.end()
            if daemon:
                daemon.stop()
        sc = subprocess.run([self.perf, "script", "-i", pdata, "-F", "ip,sym"],
                            capture_output=True, text=True, timeout=600)
        counts = {k: 0 for k, _ in WHERE}
        counts["other"] = 0
        total = 0
        for chain in perf_script_chains(sc.stdout):
            syms = set(chain)
            total += 1
            for k, fns in WHERE:
                if k == "sigprocmask_in_unwind":
                    hit = "unwinder_unwind" in syms and bool(syms & fns)
                else:
                    hit = bool(syms & fns)
                counts[k] += hit
            counts["other"] += not any(syms & fns for k, fns in WHERE if k in WHERE_TOP)
        res.update(samples=total, shares={k: counts[k] / total if total else None
                                          for k in counts})
        return res

    def run_timer_floor(self, hz):
        """CPU per wake-up of an empty libev timer at hz, ns (2 s of wake-ups)."""
        r = subprocess.run([self.timer_floor, str(hz), str(2 * hz)], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0 or not r.stdout.startswith("wake_ns="):
            raise RuntimeError("timer_floor: " + r.stderr)
        return float(r.stdout.split("=")[1])

    # -- measurement 4: the floor ---------------------------------------------------------
    def run_floor(self, pin, interval_us, busy=False):
        n = 1000 if self.args.quick else 1500
        if interval_us > 1000:
            n //= 5
        r = subprocess.run([self.floor, "-n", str(n), "-i", str(interval_us), "-c", "16384",
                            "-t", str(self.args.threshold), "-p", pin] + (["-b"] if busy else []),
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("ptrace_floor: " + r.stderr)
        return {k: float(v) for k, v in (l.split() for l in r.stdout.splitlines() if l)}

    def wait_quiet(self):
        """Before a run, wait (within a total budget) until the rest of the machine uses
        under 20% of a CPU over 0.3 s: other people's builds and tests on a 2-vCPU machine
        would otherwise compete with the target and the profiler."""
        while True:
            b0, _ = machine_busy_ns()
            t0 = now_ns()
            time.sleep(0.3)
            b1, _ = machine_busy_ns()
            if (b1 - b0) / (now_ns() - t0) < 0.2 or self.waited >= self.args.max_wait:
                return
            time.sleep(1)
            self.waited += 1.3

    def save_raw(self, **parts):
        """Keep the measurements so far (--raw): a failure late in a long run loses none."""
        if not self.args.raw:
            return
        self.raw.update(parts)
        self.raw.update(waited=self.waited, retries=self.retries, notes=self.notes,
                        args=vars(self.args), load1=os.getloadavg(),
                        elapsed=time.monotonic() - self.started)
        tmp = self.args.raw + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(self.raw, f)
        os.replace(tmp, self.args.raw)

    def retrying(self, fn, what, into):
        """Run fn after waiting for a quiet machine; if the rest of the machine still used
        over half a CPU during the run, run it again once (within a budget of retries) and
        keep the second result whatever it is. Retries are counted in the report."""
        self.wait_quiet()
        log(what)
        r = fn()
        if r.get("other_load", 0) > 0.5 and self.retries < self.args.max_retries:
            self.retries += 1
            log("  others used %.0f%% of a CPU meanwhile: once more" % (100 * r["other_load"]))
            self.wait_quiet()
            r = fn()
        into.append(r)
        self.save_raw()
        return r

    # -------------------------------------------------------------------------------------
    def check_tools(self):
        tools = ["nothing", "profd", "profd-ptrace"]
        if os.geteuid() != 0:
            sys.exit("bench.py: run as root (ptrace of other processes, perf)")
        for p in (self.pausemeter, self.floor, self.timer_floor, self.idlers, self.idlesvc,
                  self.busy, os.path.join(self.build, "daemon", "profd")):
            if not os.path.exists(p):
                sys.exit("bench.py: %s is not built (ninja -C %s)" % (p, self.build))
        if self.perf:
            r = subprocess.run([self.perf, "record", "-q", "-e", "cpu-clock", "-k",
                                "CLOCK_MONOTONIC", "-o", "/dev/null", "--", "true"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                tools.append("perf")
            else:
                self.notes.append("perf cannot record here: " + r.stderr.strip()[:200])
        else:
            self.notes.append("perf is not installed (Debian: linux-perf)")
        if self.libprofiler and os.path.exists(self.shim):
            tools.append("gperftools")
        else:
            self.notes.append("gperftools' libprofiler.so not found (Debian: libgoogle-perftools4)")
        return tools

    def busy_configs(self, tools):
        """(tool, mode) of every busy run of one rate, in the order they run."""
        out = [("nothing", None)]
        for tool in PROFD_TOOLS:
            out += [(tool, m) for m in PROFD_MODES]
        out += [(t, None) for t in ("perf", "gperftools") if t in tools]
        return out

    def run(self):
        a = self.args
        tools = self.check_tools()
        self.started = time.monotonic()
        load0 = os.getloadavg()
        busy, idle, scale, host, where, pair = [], [], [], [], [], []  # result dicts
        self.raw = {"tools": tools, "busy": busy, "idle": idle, "scale": scale, "host": host,
                    "where": where, "pair": pair, "floors": None, "load0": load0}
        if "busy" in a.parts:
            for rep in range(a.runs):
                # Interleaved, so drifting background load touches every configuration alike.
                for hz in RATES:
                    for tool, mode in self.busy_configs(tools):
                        if tool == "nothing" and hz != RATES[0]:
                            continue
                        self.retrying(lambda: self.run_busy(tool, hz, rep, mode),
                                      "busy run %d/%d: %s%s at %d Hz"
                                      % (rep + 1, a.runs, tool, " " + mode if mode else "", hz),
                                      busy)
            # The floor of an alarm tick: an empty event loop's wake-up (timer_floor.c).
            wakes = {hz: median([self.run_timer_floor(hz) for _ in range(3)]) for hz in RATES}
            self.notes.append("the floor of a wall-clock tick here: an empty libev timer costs "
                              + " and ".join("%.1f us of CPU per wake-up at %d Hz"
                                             % (wakes[hz] / 1e3, hz) for hz in RATES)
                              + " (tests/bench/timer_floor, median of 3); profd in alarm "
                              "wakes at each tick")
        if "pair" in a.parts and "perf" in tools:
            for rep in range(a.runs):
                for hz in RATES:
                    for mode in PROFD_MODES:
                        self.retrying(lambda: self.run_pair(hz, rep, mode),
                                      "pair run %d/%d: profd (perf) %s and perf at %d Hz"
                                      % (rep + 1, a.runs, mode, hz), pair)
        if "idlers" in a.parts:
            for rep in range(a.runs):
                for hz in RATES:
                    self.retrying(lambda: self.run_idlers(hz),
                                  "idlers run %d/%d at %d Hz" % (rep + 1, a.runs, hz), idle)
        if "scale" in a.parts:
            # (sampler, budget): both samplers under the default budget; the perf sampler
            # without one too (--max-cpu 0), for what the full rate costs.
            for rep in range(a.scale_runs):
                for sampler, budget in (("perf", True), ("ptrace", True), ("perf", False)):
                    for nth in (5, 10):
                        self.retrying(lambda: self.run_scale(sampler, nth, rep, budget),
                                      "scale run %d/%d: %d services of %d threads, sampler %s%s"
                                      % (rep + 1, a.scale_runs, a.scale_procs, nth, sampler,
                                         "" if budget else ", no budget"), scale)
        if "host" in a.parts:
            for rep in range(a.runs):
                for hz in RATES:
                    for mode in ("alarm", "cputime"):
                        for sampler in ("perf", "ptrace"):
                            self.retrying(lambda: self.run_host(sampler, mode, hz, rep),
                                          "busy host run %d/%d: %s at %d Hz, sampler %s"
                                          % (rep + 1, a.runs, mode, hz, sampler), host)
        if "where" in a.parts and "perf" in tools:
            for mode in ("alarm", "cputime"):
                for hz in RATES:
                    self.retrying(lambda: self.run_where(mode, hz),
                                  "where profd's CPU goes: %s at %d Hz" % (mode, hz), where)
        floors = None
        if "floor" in a.parts:
            variants = (("0,1", 1000, False), ("0,1", 9901, False), ("0,1", 9901, True),
                        ("0,0", 1000, False))
            floor_runs = {v: [] for v in variants}
            for rep in range(a.floor_runs):
                for v in variants:
                    self.wait_quiet()
                    log("ptrace floor %d/%d: cpus %s, every %d us%s"
                        % (rep + 1, a.floor_runs, v[0], v[1],
                           ", tracer's CPU busy" if v[2] else ""))
                    floor_runs[v].append(self.run_floor(*v))
            # Median of each figure over the repetitions.
            floors = tuple({k: median([r[k] for r in floor_runs[v]]) for k in floor_runs[v][0]}
                           for v in variants)
            self.save_raw(floors=floors)
        load1 = os.getloadavg()
        elapsed = time.monotonic() - self.started
        self.save_raw()
        return self.report(tools, busy, idle, floors, scale, host, load0, load1, elapsed,
                           where, pair)

    def report_raw(self, paths):
        """The report of earlier runs' measurements (--raw), without measuring again. With
        several files, each part's measurements come from the last file that has them (a
        part run again separately replaces the earlier run's)."""
        d = None
        for path in paths:
            with open(path, "rb") as f:
                x = pickle.load(f)
            x.setdefault("load1", x["load0"])
            x.setdefault("elapsed", 0.0)
            if d is None:
                d = x
                d["args"]["parts"] = list(d["args"]["parts"])
                continue
            for k in ("busy", "idle", "scale", "host", "where", "floors", "pair"):
                if x.get(k):
                    d[k] = x[k]
            for k in ("elapsed", "waited", "retries"):
                d[k] += x[k]
            d["notes"] += [n for n in x["notes"] if n not in d["notes"]]
            d["load1"] = x["load1"]
            d["args"]["parts"] += [p for p in x["args"]["parts"] if p not in d["args"]["parts"]]
            if x.get("scale"):
                d["args"]["scale_runs"] = x["args"]["scale_runs"]
                d["args"]["scale_procs"] = x["args"]["scale_procs"]
        for k in ("runs", "secs", "scale_runs", "scale_procs", "parts", "floor_runs", "quick",
                  "renice", "threshold", "profd_nice"):
            setattr(self.args, k, d["args"].get(k))
        self.waited, self.retries, self.notes = d["waited"], d["retries"], d["notes"]
        self.invocations = len(paths)
        return self.report(d["tools"], d["busy"], d["idle"], d["floors"], d["scale"],
                           d["host"], d["load0"], d["load1"], d["elapsed"], d.get("where", []),
                           d.get("pair", []))

    # -------------------------------------------------------------------------------------
    def report(self, tools, busy, idle, floors, scale, host, load0, load1, elapsed, where=(),
               pair=()):
        a = self.args
        L = []
        w = L.append

        def sel(tool, hz=None, mode=None):
            return [r for r in busy if r["tool"] == tool and (hz is None or r["hz"] == hz)
                    and (mode is None or r["mode"] == mode)]

        def med(rs, key):
            return median([r.get(key) for r in rs])

        def paired(tool, hz, key, mode=None, perf_key=None):
            """Median over repetitions of tool's key / perf's key (or perf_key) in the same
            repetition."""
            pk = perf_key or key
            ratios = []
            for r in sel(tool, hz, mode):
                for q in sel("perf", hz):
                    if q["rep"] == r["rep"] and r.get(key) is not None and q.get(pk):
                        ratios.append(r[key] / q[pk])
            return median(ratios)

        def label(tool, mode):
            if tool in PROFD_TOOLS:
                return "profd (%s) %s" % (SAMPLER[tool], mode)
            return tool

        configs = [c for c in self.busy_configs(tools) if c[0] != "nothing"]
        base = sel("nothing")
        base_rate = median([r["gap_total_ns"] / r["dur_ns"] for r in base])  # ns per ns
        for r in busy:
            if r["tool"] != "nothing" and r.get("n_all") and base_rate is not None:
                r["excess_ns"] = (r["gap_total_ns"] - base_rate * r["dur_ns"]) / r["n_all"]

        cpu = open("/proc/cpuinfo").read()
        m = re.search(r"model name\s*:\s*(.*)", cpu)
        perf_ver = subprocess.run([self.perf, "--version"], capture_output=True,
                                  text=True).stdout.strip() if self.perf else "absent"
        gp_ver = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libgoogle-perftools4"],
                                capture_output=True, text=True).stdout.strip() or "?"
        w("## Sampling overhead: profd (both samplers) vs perf vs gperftools")
        w("")
        w("Measured by `tests/bench/bench.py%s%s`%s on %s, %d vCPUs, kernel %s, %s, gperftools "
          "%s; %d run(s) of %g s per configuration (scale: %d run(s)), interleaved; medians "
          "over runs. Load average %.2f at the start, %.2f at the end; the benchmark took "
          "%.0f s, of which %.0f s waiting for other work on the machine to pause, and "
          "repeated %d run(s) during which the rest of the machine used over half a CPU."
          % (" --quick" if a.quick else "",
             "" if set(a.parts) == set(PARTS) else " --parts " + ",".join(a.parts),
             "" if getattr(self, "invocations", 1) == 1 else
             " (in %d invocations, a part measured again replacing the earlier one's)"
             % self.invocations,
             m.group(1) if m else "?", os.cpu_count(),
             platform.release(), perf_ver, gp_ver, a.runs, a.secs, a.scale_runs, load0[0],
             load1[0], elapsed, self.waited, self.retries))
        allr = busy + idle + scale + host + list(where) + list(pair)
        others = median([r.get("other_load") for r in allr])
        steal = median([r.get("steal") for r in allr])
        if others is not None and others > 0.15:
            self.notes.append("the rest of the machine used a median %.0f%% of a CPU during "
                              "the measurements (steal %.1f%%): on %d vCPUs that competes with "
                              "the target and the profiler, and pauses, rates and stop "
                              "latencies below are inflated by it. Re-run on a quiet machine."
                              % (100 * others, 100 * steal, os.cpu_count()))
        w("")
        w("Targets and profilers %s%s. Every process measured here was started by the "
          "benchmark; the profd under test is `%s`. *profd (perf)* is `--sampler perf` (a "
          "running thread sampled from the kernel's copy of its registers and stack, never "
          "stopped), *profd (ptrace)* `--sampler ptrace` (a running thread stopped with "
          "PTRACE_INTERRUPT)."
          % ("ran at nice 0" if not a.renice else
             "ran at nice -20 (all of them alike, `--renice`), to shield them from other "
             "work on this shared machine",
             "" if getattr(a, "profd_nice", None) is None else
             "; profd itself at nice %d in an autogroup of its own at the same value "
             "(`--profd-nice`; profd.service runs it with Nice=-10)" % a.profd_nice,
             os.path.join(self.build, "daemon", "profd")))
        for n in self.notes:
            w("")
            w("**Note:** " + n)
        w("")

        if busy:
            self.report_busy(w, tools, configs, sel, med, paired, label, base, base_rate)
        if pair:
            self.report_pair(w, pair)
        if idle:
            self.report_idle(w, idle, sel, med)
        if floors:
            self.report_floor(w, floors, sel, med)
        if scale:
            self.report_scale(w, scale)
        if host:
            self.report_host(w, host)
        if where:
            self.report_where(w, where, sel, med)
        self.report_targets(w, busy, scale, host, sel, med, paired, idle, pair)
        return "\n".join(L) + "\n"

    def report_busy(self, w, tools, configs, sel, med, paired, label, base, base_rate):
        a = self.args
        # -- 1. pauses ----------------------------------------------------------------
        w("### 1. Pause per sample of a busy thread")
        w("")
        w("Target: `tests/bench/pausemeter`, one thread spinning on `CLOCK_MONOTONIC` that "
          "records every gap above %d ns with its start time. Each sample is matched to the "
          "gap it caused. Where the sample's time is taken inside the target, that is the "
          "gap that contains the sample time: perf (`-k CLOCK_MONOTONIC`, `perf script -F "
          "time`), gperftools (a preloaded shim timestamps each SIGPROF handler entry and "
          "calls gperftools' handler) and profd (perf), whose samples carry the kernel's "
          "`CLOCK_MONOTONIC` sample time, taken in the sampling interrupt (`profctl slice "
          "--format sentry`). profd (ptrace) samples carry profd's tick time and the stop "
          "follows it: the longest gap starting between %d us before and %d us after the "
          "tick (before: when the daemon runs on the target's CPU its own wake-up preempts "
          "the target just before it reads the clock). A sample with no gap above the "
          "threshold counts as a pause of %d ns (an upper bound). *Excess* is the "
          "cross-check free of attribution: (all gap time - the no-profiler median gap time "
          "for the same duration) / samples. *matched* is the share of samples attributed a "
          "gap; the control rows apply each rule to no-profiler runs at virtual ticks: what "
          "background noise alone would attribute. *others* is the CPU the rest of the "
          "machine used meanwhile (share of one CPU, /proc/stat minus the target and the "
          "profiler). *samples/s* for cputime is also per CPU-second: the target spins."
          % (a.threshold, PROFD_BEFORE_NS // 1000, PROFD_WINDOW_NS // 1000, a.threshold))
        w("")
        w("| rate | profiler | runs | samples/s | matched | pause p50 (us) | pause p99 (us) | "
          "excess/sample (us) | p50 vs perf | excess vs perf | others |")
        w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for hz in RATES:
            for tool, mode in configs:
                rs = sel(tool, hz, mode)
                if not rs:
                    continue
                w("| %d Hz | %s | %d | %.0f | %.0f%% | %s | %s | %s | %s | %s | %.0f%% |"
                  % (hz, label(tool, mode), len(rs), med(rs, "rate") or 0,
                     100 * (median([r["matched"] / r["n"] for r in rs if r["n"]]) or 0),
                     fmt_us(med(rs, "p50")), fmt_us(med(rs, "p99")),
                     fmt_us(med(rs, "excess_ns")),
                     fmt_x(paired(tool, hz, "p50", mode)),
                     fmt_x(paired(tool, hz, "excess_ns", mode)),
                     100 * med(rs, "other_load")))
        if base:
            for hz in RATES:
                for key, rule in (("control_in", "the containing rule"),
                                  ("control", "profd (ptrace)'s window rule")):
                    w("| %d Hz | nothing (control: virtual ticks, %s) | %d | %d | %.0f%% | %s "
                      "| %s | - | | | %.0f%% |"
                      % (hz, rule, len(base), hz, 100 * median([r[key][hz][0] for r in base]),
                         fmt_us(median([r[key][hz][1] for r in base])),
                         fmt_us(median([r[key][hz][2] for r in base])),
                         100 * med(base, "other_load")))
        w("")
        if base:
            w("No-profiler background: median %.2f ms of gaps per second (%.0f gaps/s above "
              "%d ns, p50 gap %s us: mostly the %d Hz scheduler tick's own interrupt) on the "
              "spinning thread. gperftools' SIGPROF is raised by that very tick, so its pause "
              "includes the tick's own interrupt, which a run without profiler pays too."
              % (base_rate * 1e3, median([r["ngaps"] * 1e9 / r["dur_ns"] for r in base]),
                 a.threshold, fmt_us(med(base, "gap_p50")), kernel_hz()))
        pr = sel("profd-ptrace")
        if pr:
            w("profd (ptrace)'s stop as seen by the target: the gap starts a median %s us "
              "after the tick (p99 %s us); the daemon reports %s us from PTRACE_INTERRUPT to "
              "the stop on average."
              % (fmt_us(med(pr, "delay_p50")), fmt_us(med(pr, "delay_p99")),
                 "%.1f" % median([r["status"]["stop_latency_us_avg"] for r in pr])))
        gp = sel("gperftools")
        if gp:
            w("gperftools' SIGPROF comes from `ITIMER_PROF`, checked at the kernel tick "
              "(CONFIG_HZ): its achieved rate is capped there whatever CPUPROFILE_FREQUENCY "
              "asks (above: samples/s).")
        w("")
        pa = [r for r in sel("profd") if r["mode"] != "cputime"]
        if pa:
            w("profd (perf) in `alarm` takes a running thread's tick from the newest sample "
              "of its task clock, asking nothing of the kernel; where there is none recent "
              "(the thread's first tick, or little CPU since) it enables a one-shot event at "
              "the tick (PERF_EVENT_IOC_REFRESH), which the kernel does by a function call on "
              "the target's CPU, an interrupt of the running target, a second, earlier pause "
              "that the containing rule does not see; that sample follows after 100 us of the "
              "thread's CPU (before 2026-12-02 every tick did this). Here: the longest gap "
              "starting %d to %d us before each sample (the *arming* gap; 0 if none), and the "
              "sample's pause plus it. The control rows apply the same rule to no-profiler "
              "runs at virtual ticks: the share of samples with such a gap is what the "
              "background alone gives. (In `cputime` the event runs continuously: no arming.)"
              % (ARM_BEFORE_NS // 1000, ARM_AFTER_NS // 1000))
            w("")
            w("| rate | | runs | samples with an arming gap | arming gap p50 (us) | pause + arming "
              "p50 (us) | p99 (us) | p50 vs perf's pause |")
            w("|---:|---|---:|---:|---:|---:|---:|---:|")
            for hz in RATES:
                rs = sel("profd", hz, "alarm")
                if rs:
                    w("| %d Hz | profd (perf) alarm | %d | %.0f%% | %s | %s | %s | %s |"
                      % (hz, len(rs), 100 * med(rs, "arm_share"), fmt_us(med(rs, "arm_p50")),
                         fmt_us(med(rs, "both_p50")), fmt_us(med(rs, "both_p99")),
                         fmt_x(paired("profd", hz, "both_p50", "alarm", "p50"))))
                if base:
                    w("| %d Hz | nothing (control) | %d | %.0f%% | %s | %s | %s | |"
                      % (hz, len(base), 100 * median([r["control_arm"][hz][0] for r in base]),
                         fmt_us(median([r["control_arm"][hz][1] for r in base])),
                         fmt_us(median([r["control_arm"][hz][2] for r in base])),
                         fmt_us(median([r["control_arm"][hz][3] for r in base]))))
            w("")

        # -- 2. CPU --------------------------------------------------------------------
        w("### 2. Profiler CPU per sample (busy target, warm)")
        w("")
        w("CPU of every thread of the profiler process and of its child processes (profd's "
          "symbolizer helpers; `/proc/PID/task/*/schedstat` run time; `/proc/PID/stat` "
          "utime+stime of the profiler process count 10 ms ticks, too coarse for these "
          "windows, and are shown as a cross-check) over the measurement window, which "
          "starts after the target has spun %d ms under the profiler and ends %g s before "
          "the target's %g s do (when it stops spinning to write its gaps out), divided by "
          "the samples taken in that window (profd: `status` samples delta, the window "
          "from just after one status to just after the next, which takes the deferred "
          "ticks up to it; perf: samples in `perf script` with times in the window). "
          "perf's figure is only the `perf record` process: the kernel's copy of "
          "registers and 8 KiB of stack happens in the target's interrupt and shows up in the pause above instead (so does profd "
          "(perf)'s, of 16 KiB). gperftools runs in the target: its cost is its pause. "
          "*In the sample path* is profd's own accounting (`status` `paths`, "
          "CLOCK_THREAD_CPUTIME_ID around the read of the kernel's copy and its unwind, or "
          "around the stop, copy and unwind): the rest of profd's CPU is the tick itself "
          "(timer wake-up, the event loop, the thread's schedstat, arming the one-shot "
          "event). *lost*: samples the kernel dropped for want of room in the ring "
          "(PERF_RECORD_LOST) over the window." % (WARM_MS, CPU_END_MARGIN_S, a.secs))
        w("")
        w("| rate | profiler | runs | CPU/sample (us) | same from /proc/PID/stat (us) | vs perf | "
          "CPU % of one core | in the sample path (us) | unwinds complete | lost |")
        w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for hz in RATES:
            for tool, mode in configs:
                if tool == "gperftools":
                    continue
                rs = sel(tool, hz, mode)
                if not rs:
                    continue
                if tool in PROFD_TOOLS:
                    sp = median([sum(v[1] for v in r["paths"].values()) /
                                 max(1, sum(v[0] for v in r["paths"].values())) for r in rs])
                    comp = fmt_pct(median([100 * r["unwind"][0] / r["unwind"][1]
                                           for r in rs if r["unwind"][1]]))
                    lost = "%d" % median([r["lost"] for r in rs])
                else:
                    sp, comp, lost = None, "-", "-"
                w("| %d Hz | %s | %d | %s | %s | %s | %.2f%% | %s | %s | %s |"
                  % (hz, label(tool, mode), len(rs), fmt_us(med(rs, "cpu_per_sample_ns")),
                     fmt_us(med(rs, "cpu_stat_per_sample_ns"), 0),
                     fmt_x(paired(tool, hz, "cpu_per_sample_ns", mode)),
                     100 * median([r["cpu_ns"] / r["dur_ns"] for r in rs]),
                     fmt_us(sp) if sp is not None else "-", comp, lost))
        w("")
        pr = sel("profd") + sel("profd-ptrace")
        if pr:
            w("profd's own accounting agrees: `status` cpu_s (getrusage, the daemon process "
              "without its helpers) per sample: %s."
              % "; ".join("%s at %d Hz %s us" % (label(t, m), hz, fmt_us(median(
                  [r["cpu_getrusage_ns"] / r["window_samples"] for r in sel(t, hz, m)
                   if r.get("window_samples")])))
                  for t in PROFD_TOOLS for m in PROFD_MODES for hz in RATES if sel(t, hz, m)))
            w("")

    def report_pair(self, w, pair):
        a = self.args
        w("### 1b. Pause per sample, profd (perf) and perf side by side")
        w("")
        w("The pauses of separate runs (section 1) move by up to 2x from one run to the next on "
          "this nested VM, more than any difference between profd and perf. Here profd "
          "(`--sampler perf`, the mode shown) and `perf record --call-graph dwarf` sample the "
          "same pausemeter at once (perf at %d Hz more, or their task clocks could keep "
          "the same phase throughout), so their pauses are measured under the same "
          "conditions. Each sample's pause is the gap containing its kernel sample time (the "
          "containing rule of section 1); a sample of either closer than %d us to one of "
          "the other is left out of both (they could share a gap). *profd/perf*: the ratio of "
          "the two p50s of each run, median over runs; *pooled*: p50 of all runs' pauses "
          "together. profd copies what the thread's unwinds need (*copy*, bytes, in the "
          "middle of a run), perf 8 KiB; perf also records the kernel's call chain at each sample."
          % (PAIR_PERF_EXTRA_HZ, PAIR_APART_NS // 1000))
        w("")
        w("| rate | mode | runs | samples profd / perf (left out) | pause p50 profd (us) | "
          "perf (us) | profd/perf | runs at most 1x | pooled p50 profd / perf (us) | "
          "p99 profd / perf (us) | copy | others |")
        w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for hz, mode, rs, f in pair_groups(pair):
            n = [sum(r[k]["n"] for r in rs) for k in ("profd", "perf")]
            left = [sum(r[k]["n_all"] - r[k]["n"] for r in rs) for k in ("profd", "perf")]
            copies = sorted({(r.get("copy_bytes") or {}).get("max") for r in rs} - {None})
            w("| %d Hz | %s | %d | %d / %d (%d / %d) | %s | %s | %s | %d of %d | %s / %s | "
              "%s / %s | %s | %s |"
              % (hz, mode, len(rs), n[0], n[1], left[0], left[1],
                 fmt_us(median([r["profd"]["p50"] for r in rs])),
                 fmt_us(median([r["perf"]["p50"] for r in rs])), fmt_x(f["ratio"]),
                 f["le"], len(rs), fmt_us(f["p50_profd"]), fmt_us(f["p50_perf"]),
                 fmt_us(pctl([p for r in rs for p in r["profd"]["pauses"]], .99)),
                 fmt_us(pctl([p for r in rs for p in r["perf"]["pauses"]], .99)),
                 ", ".join(str(c) for c in copies) or "-",
                 fmt_pct(None if median([r.get("other_load") for r in rs]) is None
                         else 100 * median([r.get("other_load") for r in rs]))))
        w("")

    def report_idle(self, w, idle, sel, med):
        a = self.args
        w("### 3. 50 idle threads and 1 busy one (`tests/programs/idlers`)")
        w("")
        w("Idle threads block in `pthread_cond_wait`/`timedwait`, `nanosleep`, `read` on a "
          "pipe and `epoll_wait`; half of them wake every 20-100 ms. profd's default sampler "
          "(auto: perf here), alarm. Deltas of `status` "
          "over a %g s window after %d ms of warm-up; daemon CPU as above. *stopped/tick* is "
          "threads stopped (PTRACE_INTERRUPT) per tick; a sample is one thread at one tick "
          "(reused, read from /proc, from the kernel's copy, or stopped). *EINTR* counts idle "
          "threads' system calls that failed with EINTR (the target's own count)."
          % (a.secs, WARM_MS))
        w("")
        w("| rate | ticks/s | samples/tick | stopped/tick | from /proc (no stop) | reused | "
          "daemon CPU/tick (us) | daemon CPU/sample (us) | CPU % of one core | EINTR | "
          "others |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for hz in RATES:
            rs = [r for r in idle if r["hz"] == hz]
            w("| %d Hz | %.0f | %.1f | %.3f | %.1f%% | %.1f%% | %s | %s | %.2f%% | %d | %.0f%% |"
              % (hz, med(rs, "achieved_hz"),
                 median([r["samples"] / r["ticks"] for r in rs]),
                 med(rs, "stopped_per_tick"),
                 100 * median([r["blocked"] / r["samples"] for r in rs]),
                 100 * median([r["reused"] / r["samples"] for r in rs]),
                 fmt_us(med(rs, "cpu_per_tick")), fmt_us(med(rs, "cpu_per_sample"), 2),
                 100 * median([r["cpu_per_tick"] * r["achieved_hz"] / 1e9 for r in rs]),
                 max(r["eintr"] for r in rs), 100 * med(rs, "other_load")))
        w("")
        for hz in RATES:
            rs = [r for r in idle if r["hz"] == hz]
            busy_only = med(sel("profd", hz, "alarm"), "cpu_per_sample_ns")
            if busy_only is not None and rs:
                nidle = median([r["threads"] for r in rs]) - 1
                w("At %d Hz a tick costs the daemon %s us here against %s us for the busy "
                  "target alone (profd (perf) alarm, section 2): the %d idle threads add %s us "
                  "per tick, %s us each, though none is stopped (each tick reads every "
                  "thread's schedstat)."
                  % (hz, fmt_us(med(rs, "cpu_per_tick")), fmt_us(busy_only), nidle,
                     fmt_us(med(rs, "cpu_per_tick") - busy_only),
                     fmt_us((med(rs, "cpu_per_tick") - busy_only) / nidle, 2)))
        w("")

    def report_floor(self, w, floors, sel, med):
        a = self.args
        fx, fx10, fxb, fs = floors
        w("### 4. The floor: one bare ptrace stop (`tests/bench/ptrace_floor`)")
        w("")
        w("A tracer that only does PTRACE_INTERRUPT, waitpid (sleeping until the stop), "
          "PTRACE_GETREGS, a 16 KiB `process_vm_readv` and PTRACE_CONT against a spinning "
          "child, on an absolute `clock_nanosleep` period, after a warm-up: no /proc reads, "
          "no unwinding, no event loop. Tracer CPU from `CLOCK_THREAD_CPUTIME_ID` over the "
          "whole loop, so it includes the timer wake-up, as every sampler tick does; the "
          "bare wake-up is measured alone too (the same loop without ptrace). The child's "
          "pause is its gap overlapping [interrupt, cont]. The step rows come from a second "
          "pass that reads both clocks around every step (which adds ~1 us of CPU). Pinned "
          "with sched_setaffinity; medians of %d run(s) of each variant (sample counts in "
          "the header)." % a.floor_runs)
        w("")
        w("| | different CPUs, every 1 ms (%d) | different CPUs, every 9.9 ms (%d) | "
          "the same, tracer's CPU kept busy (%d) | same CPU, every 1 ms (%d) |"
          % (fx["samples"], fx10["samples"], fxb["samples"], fs["samples"]))
        w("|---|---:|---:|---:|---:|")
        F = (fx, fx10, fxb, fs)
        w("| tracer CPU per sample (us) | %s | %s | %s | %s |"
          % tuple(fmt_us(f["tracer_cpu_ns"]) for f in F))
        w("| a bare timer wake-up (us) | %s | %s | %s | %s |"
          % tuple(fmt_us(f["timer_cpu_ns"]) for f in F))
        w("| the ptrace steps alone, split pass (us) | %s | %s | %s | %s |"
          % tuple(fmt_us(f["split_ptrace_cpu_mean_ns"]) for f in F))
        for st in ("interrupt", "waitpid", "getregs", "readv", "cont"):
            w("| - %s: CPU / wall p50 (us) | %s |" % (st, " | ".join(
                "%s / %s" % (fmt_us(f["step_%s_cpu_mean_ns" % st]),
                             fmt_us(f["step_%s_wall_p50_ns" % st])) for f in F)))
        w("| child pause p50 / p99 (us) | %s |" % " | ".join(
            "%s / %s" % (fmt_us(f["pause_p50_ns"]), fmt_us(f["pause_p99_ns"])) for f in F))
        w("")
        w("Cross-CPU, PTRACE_INTERRUPT sends an inter-processor interrupt to kick the "
          "running child, the child's stop wakes the sleeping tracer (another IPI), and "
          "PTRACE_CONT wakes the child on its CPU (a third); on a VM each IPI and each timer "
          "programming is a VM exit. On one CPU none of these cross CPUs. In the \"kept "
          "busy\" column a nice 19 spinner occupies the tracer's CPU between samples, so "
          "the tracer never wakes an idle vCPU. The child's pause in the last two columns "
          "includes waiting for the CPU (the spinner, or the tracer itself) and is not "
          "comparable.")
        w("")
        c101 = med(sel("profd-ptrace", 101, "alarm"), "cpu_per_sample_ns")
        c999 = med(sel("profd-ptrace", 999, "alarm"), "cpu_per_sample_ns")
        if c999 is not None and c101 is not None:
            w("What the floor says: one bare cross-CPU ptrace stop costs a tracer %s us of "
              "CPU per sample at 1 ms (%s us at 9.9 ms), of which %s us (%s us) is only the "
              "timer wake-up. profd (ptrace) alarm spends %s us per stopped sample at 999 Hz "
              "(%s the 1 ms floor) and %s us at 101 Hz (%s the 9.9 ms floor)."
              % (fmt_us(fx["tracer_cpu_ns"]), fmt_us(fx10["tracer_cpu_ns"]),
                 fmt_us(fx["timer_cpu_ns"]), fmt_us(fx10["timer_cpu_ns"]), fmt_us(c999),
                 above(c999, fx["tracer_cpu_ns"]), fmt_us(c101),
                 above(c101, fx10["tracer_cpu_ns"])))
            w("")

    def report_scale(self, w, scale):
        a = self.args
        w("### 5. Scale: %d mostly idle services at 101 Hz (`tests/programs/idlesvc`)"
          % a.scale_procs)
        w("")
        w("%d copies of `tests/programs/idlesvc` (-O2, no frame pointers), each with one "
          "thread computing 1%% of the time (a burst of 1 ms of its CPU every 100 ms, phased "
          "by pid), the main thread in `clock_nanosleep`, and the others in turn in "
          "`epoll_wait` (1 s timeout), `read` on a pipe nobody writes, and `nanosleep` (1 s); "
          "5 threads (main, work, epoll, read, sleep) or 10. All attached at 101 Hz `alarm` "
          "to one profd with its default budget (`--max-cpu 25`: 25%% of one CPU), the "
          "attaches over the socket one after the other; %d s after the last attach, deltas "
          "of `status` over a %g s window. *throttled* counts targets whose rate the budget "
          "lowered: at the window's end (`sampling.throttled`) / at some time in the window "
          "(`throttled_s` grew); *throttled s* is the sum of `throttled_s` since attach. "
          "profd CPU: all threads of profd and its helpers (schedstat), %% of one CPU; RSS: "
          "VmRSS of the same at the window's end (HWM: peak); *accounted*: profd's own "
          "`memory.total_bytes`. A sample is one thread at one tick: *reused* (not run "
          "since its last sample: its last stack), */proc* (blocked, read and copied without "
          "a stop), *kernel copy* (running: perf), *stopped* (running: ptrace)."
          % (a.scale_procs, SCALE_SETTLE_S, a.secs))
        w("")
        w("| sampler | budget | threads | runs | throttled (end / window) | throttled s | "
          "ticks/s per target p50 (min) | effective Hz p50 (min) | missed/s | samples/s | "
          "reused | /proc | kernel copy | stopped | profd CPU | CPU/tick (us) | "
          "CPU/sample (us) | RSS MiB (HWM) | accounted MiB | targets' CPU | others |")
        w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|---:|---:|---:|")
        groups = (("perf", True), ("ptrace", True), ("perf", False))
        for sampler, budget in groups:
            for nth in (5, 10):
                rs = [r for r in scale if r["sampler"] == sampler and r["threads"] == nth
                      and r.get("budget", True) == budget]
                if not rs:
                    continue

                def share(k):
                    return "%.1f%%" % (100 * median([r["sampled"].get(k, 0) / r["samples"]
                                                     for r in rs if r["samples"]]))
                w("| %s | %s | %d | %d | %d / %d | %.1f | %.1f (%.1f) | %.1f (%.1f) | %s | "
                  "%.0f | %s | %s | %s | %s | %.1f%% | %s | %s | %.1f (%.1f) | %.1f | %.0f%% | "
                  "%.0f%% |"
                  % (sampler, "25%" if budget else "none", nth, len(rs),
                     max(r["throttled_end"] for r in rs),
                     max(r["throttled_window"] for r in rs), med(rs, "throttled_s"),
                     med(rs, "rate_p50"), min(r["rate_min"] for r in rs),
                     med(rs, "eff_p50"), min(r["eff_min"] for r in rs),
                     "%.0f" % med(rs, "missed_per_s") if med(rs, "missed_per_s") is not None
                     else "n/a",
                     med(rs, "samples_per_s"), share("idle_reused"),
                     share("blocked_without_stop"), share("kernel_copy"), share("stopped"),
                     med(rs, "cpu_pct"), fmt_us(med(rs, "cpu_per_tick")),
                     fmt_us(med(rs, "cpu_per_sample"), 2),
                     med(rs, "rss_kib") / 1024, med(rs, "hwm_kib") / 1024,
                     med(rs, "accounted_bytes") / 2**20, med(rs, "targets_cpu_pct"),
                     100 * med(rs, "other_load")))
        w("")
        w("*throttled (end / window)* is the most over the runs; the rest are medians. "
          "*missed/s*: ticks of all targets together that profd counted as missed (too late "
          "for them), per second.")
        w("")
        for sampler, budget in groups:
            r5 = [r for r in scale if r["sampler"] == sampler and r["threads"] == 5
                  and r.get("budget", True) == budget]
            r10 = [r for r in scale if r["sampler"] == sampler and r["threads"] == 10
                   and r.get("budget", True) == budget]
            if not r5 or not r10:
                continue
            d = med(r10, "cpu_per_tick") - med(r5, "cpu_per_tick")
            pp = [r["paths"]["proc"][1] / r["paths"]["proc"][0] for r in r5 + r10
                  if r["paths"]["proc"][0]]
            rate5, rate10 = med(r5, "rate_p50"), med(r10, "rate_p50")
            same = abs(rate5 / rate10 - 1) < 0.05 and rate5 > 0.95 * 101
            w("- One more idle thread per tick, sampler %s, %s: (CPU per target tick with 10 "
              "threads %s us - with 5 threads %s us) / 5 = **%s us**; at %.1f and %.1f ticks/s "
              "per target%s. Its samples are %s reused (not run since the last tick: a "
              "schedstat read, or with sampler perf mostly an unmoved switch watch), the rest read from /proc at %s us each "
              "(`paths.proc.us_per_sample`, mostly when the 1 s timers woke it)."
              % (sampler, "default budget" if budget else "no budget",
                 fmt_us(med(r10, "cpu_per_tick")), fmt_us(med(r5, "cpu_per_tick")),
                 fmt_us(d / 5, 2), rate5, rate10,
                 "" if same else " — *not comparable*: the two ran at different (throttled or "
                 "late) rates, and a tick costs more at a lower rate (more threads have run "
                 "since the last one)",
                 "%.1f%%" % (100 * median([r["sampled"].get("idle_reused", 0) / r["samples"]
                                            for r in r10])),
                 fmt_us(median(pp))))
        w("")

    def report_host(self, w, host):
        a = self.args
        n = host[0]["procs"]
        w("### 6. A busy host: %d busy threads on %d CPUs (`tests/programs/busy`)"
          % (n, os.cpu_count()))
        w("")
        w("%d processes of `tests/programs/busy 1` (one thread each looping over "
          "work_alpha/beta/gamma 60/30/10, work_gamma holding an 8 KiB array on its stack; "
          "the main thread asleep): every CPU kept busy by the targets, and profd competes "
          "with them for a CPU (so does the rest of the machine: *others*). All attached to "
          "one profd at the rate and mode; over a %g s window after %d ms: *achieved* is a "
          "busy thread's samples in a slice of the window per second of wall time "
          "(`alarm`), or per second of its own CPU time (`cputime`), over the requested "
          "rate (median over threads and runs; *worst* the lowest thread of any run); "
          "*ticks/s* the target's ticks (alarm) per second; *missed* ticks (or CPU "
          "intervals) profd counted as missed and *lost* the kernel's dropped samples, both "
          "per second over all targets. profd CPU and memory as in section 5. *unwinds "
          "complete*: `status` unwind counts over the window, all threads; *8 KiB frame "
          "whole*: of the busy threads' samples in work_gamma (under its array), the share "
          "whose stack reaches `worker` and `start_thread`."
          % (n, a.secs, WARM_MS))
        w("")
        w("| rate | mode | sampler | runs | achieved p50 | worst | ticks/s | missed/s | lost/s "
          "| profd CPU | CPU/sample (us) | RSS MiB (HWM) | accounted MiB | perf rings KiB | "
          "unwinds complete | in work_gamma | 8 KiB frame whole | busy threads' CPU | others |")
        w("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|---:|")
        for hz in RATES:
            for mode in ("alarm", "cputime"):
                for sampler in ("perf", "ptrace"):
                    rs = [r for r in host if r["hz"] == hz and r["mode"] == mode
                          and r["sampler"] == sampler]
                    if not rs:
                        continue
                    ach = [x for r in rs for x in r["achieved"] if x is not None]
                    w("| %d Hz | %s | %s | %d | %+.2f%% | %+.2f%% | %s | %.1f | %.1f | %.1f%% | "
                      "%s | %.1f (%.1f) | %.1f | %.0f | %.2f%% | %.1f%% | %.2f%% | %.0f%% | "
                      "%.0f%% |"
                      % (hz, mode, sampler, len(rs), 100 * (median(ach) - 1),
                         100 * (min(ach) - 1),
                         "%.1f" % med(rs, "ticks_per_s") if mode == "alarm" else "-",
                         median([r["missed"] * 1e9 / r["dur_ns"] for r in rs]),
                         median([r["lost"] * 1e9 / r["dur_ns"] for r in rs]),
                         med(rs, "cpu_pct"), fmt_us(med(rs, "cpu_per_sample")),
                         med(rs, "rss_kib") / 1024, med(rs, "hwm_kib") / 1024,
                         med(rs, "accounted_bytes") / 2**20, med(rs, "ring_bytes") / 1024,
                         100 * median([r["unwind_complete"] / r["unwinds"] for r in rs
                                       if r["unwinds"]]),
                         100 * median([r["gamma"] / r["busy_samples"] for r in rs
                                       if r["busy_samples"]]),
                         100 * median([r["gamma_whole"] / r["gamma"] for r in rs
                                       if r["gamma"]]),
                         med(rs, "busy_cpu_pct"), 100 * med(rs, "other_load")))
        w("")

    def report_where(self, w, where, sel, med):
        w("### 7. Where profd's CPU goes (profd (perf), busy target)")
        w("")
        w("One run of each: profd (perf) on `tests/bench/pausemeter` while `perf record -e "
          "cpu-clock -F 9999 --call-graph dwarf -p PROFD` samples profd's own threads for "
          "%g s; the share of those samples whose call chain passes through each part of the "
          "tick (inclusive; the parts do not nest except where marked). In parentheses: that "
          "share of profd (perf)'s median CPU per sample in section 2 (perf's sampling of "
          "profd perturbs profd, so only the shares are taken from this run)."
          % (2 * self.args.secs))
        w("")
        cols = [(r["mode"], r["hz"]) for r in where]
        w("| part of the tick | %s |" % " | ".join("%s %d Hz" % c for c in cols))
        w("|---|%s" % ("---:|" * len(cols)))
        for k in [k for k, _ in WHERE] + ["other"]:
            cells = []
            for r in where:
                sh = r["shares"].get(k)
                c = med(sel("profd", r["hz"], r["mode"]), "cpu_per_sample_ns")
                cells.append("n/a" if sh is None else "%.0f%%%s" % (
                    100 * sh, " (%s us)" % fmt_us(sh * c) if c is not None else ""))
            w("| %s | %s |" % (WHERE_LABEL[k], " | ".join(cells)))
        w("| profd samples (others) | %s |" % " | ".join(
            "%d (%.0f%%)" % (r["samples"], 100 * r["other_load"]) for r in where))
        w("")

    def report_targets(self, w, busy, scale, host, sel, med, paired, idle, pair=()):
        w("### Targets (issue 10)")
        w("")
        for hz, mode, rs, f in pair_groups(pair, by_mode=True):
            w("- Busy thread's pause p50 at most perf's, side by side (section 1b), profd "
              "(perf) %s, %d Hz: **%s** — profd/perf p50 in the same run: median %s (%d "
              "of %d runs at most 1x); all runs' pauses together: profd %s us, perf %s us."
              % (mode, hz, "met" if f["ratio"] is not None and f["ratio"] <= 1 else "not met",
                 fmt_x(f["ratio"]),
                 f["le"], len(rs), fmt_us(f["p50_profd"]), fmt_us(f["p50_perf"])))
        for mode in PROFD_MODES:
            for hz in RATES:
                p50 = med(sel("profd", hz, mode), "p50")
                pp50 = med(sel("perf", hz), "p50")
                if p50 is None or pp50 is None:
                    continue
                ratio = paired("profd", hz, "p50", mode)
                ok = p50 <= pp50
                extra = ""
                if mode == "alarm":
                    extra = ("; with the arming gap before the sample (section 1): %s us, "
                             "%s perf's" % (fmt_us(med(sel("profd", hz, mode), "both_p50")),
                                            fmt_x(paired("profd", hz, "both_p50", mode, "p50"))))
                w("- Busy thread's pause p50 at most perf's, profd (perf) %s, %d Hz: **%s** "
                  "— profd %s us, perf %s us (medians); profd/perf in the same repetition: "
                  "median %s%s."
                  % (mode, hz, "met" if ok else "not met", fmt_us(p50), fmt_us(pp50),
                     fmt_x(ratio), extra))
        for mode in PROFD_MODES:
            for hz in RATES:
                c = med(sel("profd", hz, mode), "cpu_per_sample_ns")
                if c is None:
                    continue
                ok = c <= 10_000
                w("- profd CPU per sample at most 10 us once warm, profd (perf) %s, %d Hz: "
                  "**%s** — %s us%s." % (mode, hz, "met" if ok else "not met", fmt_us(c),
                                        "" if ok else " (%.1fx the target)" % (c / 10_000)))
        for sampler in ("perf", "ptrace"):
            rs = [r for r in scale if r["sampler"] == sampler and r["threads"] == 5
                  and r.get("budget", True)]
            if rs:
                thr = max(max(r["throttled_end"], r["throttled_window"]) for r in rs)
                w("- %d services of 5 threads at 101 Hz within the default budget, none "
                  "throttled, sampler %s: **%s** — at most %d of %d throttled in a run; profd "
                  "used %.1f%% of a CPU (median)."
                  % (rs[0]["procs"], sampler, "met" if thr == 0 else "not met", thr,
                     rs[0]["procs"], med(rs, "cpu_pct")))
        for hz in RATES:
            for sampler in ("perf", "ptrace"):
                rs = [r for r in host if r["hz"] == hz and r["mode"] == "alarm"
                      and r["sampler"] == sampler]
                if not rs:
                    continue
                ach = median([x for r in rs for x in r["achieved"] if x is not None])
                ok = abs(ach - 1) <= 0.02
                w("- Busy host, achieved rate within 2%% of the requested, alarm, %d Hz, "
                  "sampler %s: **%s** — %+.2f%% (median of busy threads)."
                  % (hz, sampler, "met" if ok else "not met", 100 * (ach - 1)))
        for sampler in ("perf", "ptrace"):
            rs = [r for r in host if r["sampler"] == sampler]
            if not rs:
                continue
            worst = min(100 * r["unwind_complete"] / r["unwinds"] for r in rs if r["unwinds"])
            medc = median([100 * r["unwind_complete"] / r["unwinds"] for r in rs
                           if r["unwinds"]])
            w("- Unwinds at least 99.5%% complete on `busy` (8 KiB frame), sampler %s: **%s** "
              "— median %.2f%%, worst run %.2f%% (%d runs, both modes and rates)."
              % (sampler, "met" if worst >= 99.5 else "not met", medc, worst, len(rs)))
        if idle:
            spt = max(med([r for r in idle if r["hz"] == hz], "stopped_per_tick")
                      for hz in RATES)
            eintr = max(r["eintr"] for r in idle)
            ok = spt <= 1.02 and eintr == 0
            w("- Idle threads never stopped: **%s** — at most %.3f threads stopped per tick "
              "with 1 busy thread and 50 idle ones, %d EINTR in idle threads."
              % ("met" if ok else "not met", spt, eintr))
        w("")


def end_run(target, perf, daemon):
    """End what a busy or pair run started (any may be None)."""
    if target:
        target.end()
    end_process(perf, signal.SIGINT)
    if daemon:
        daemon.stop()


def pair_groups(pair, by_mode=False):
    """(hz, mode, runs, pair_figures of them) of the pair part's runs, by rate then mode (or
    by mode then rate)."""
    keys = ([(hz, m) for m in PROFD_MODES for hz in RATES] if by_mode else
            [(hz, m) for hz in RATES for m in PROFD_MODES])
    for hz, mode in keys:
        rs = [r for r in pair if r["hz"] == hz and r["mode"] == mode]
        if rs:
            yield hz, mode, rs, pair_figures(rs)


def pair_figures(rs):
    """Side by side runs of one rate and mode: the median over runs of profd's p50 / perf's,
    the runs where it is at most 1, and the p50s of all runs' pauses together."""
    ratios = [r["profd"]["p50"] / r["perf"]["p50"] for r in rs
              if r["profd"]["p50"] and r["perf"]["p50"]]
    return {"ratio": median(ratios), "le": sum(1 for x in ratios if x <= 1),
            "p50_profd": pctl([p for r in rs for p in r["profd"]["pauses"]], .5),
            "p50_perf": pctl([p for r in rs for p in r["perf"]["pauses"]], .5)}


def kernel_hz():
    """CONFIG_HZ of the running kernel, from its config if readable (0 if not)."""
    for path in ("/boot/config-" + platform.release(), "/proc/config.gz"):
        try:
            if path.endswith(".gz"):
                import gzip
                text = gzip.open(path, "rt").read()
            else:
                text = open(path).read()
        except OSError:
            continue
        m = re.search(r"^CONFIG_HZ=(\d+)", text, re.M)
        if m:
            return int(m.group(1))
    return 0


def above(x, floor):
    d = x - floor
    return "%s us %s" % (fmt_us(abs(d)), "above" if d >= 0 else "below")


def fmt_x(v):
    return "n/a" if v is None else "%.2fx" % v


def fmt_pct(v):
    return "n/a" if v is None else "%.1f%%" % v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="meson build directory")
    ap.add_argument("--quick", action="store_true", help="2 runs of 3 s per configuration")
    ap.add_argument("--runs", type=int, help="repetitions per configuration (default 5)")
    ap.add_argument("--secs", type=float, help="seconds measured per run (default 5)")
    ap.add_argument("--threshold", type=int, default=1000,
                    help="shortest gap recorded by the targets, ns (default 1000)")
    ap.add_argument("--out", help="also write the report to this file")
    ap.add_argument("--max-wait", type=float, default=None,
                    help="most seconds spent in all waiting for a quiet machine before runs "
                         "(default 60, --quick 30)")
    ap.add_argument("--floor-runs", type=int, default=None,
                    help="repetitions of each floor variant (default 3, --quick 1)")
    ap.add_argument("--renice", action="store_true",
                    help="run targets and profilers at nice -20 (in a session and autogroup of "
                         "their own) to shield them from other work; on a shared machine this "
                         "takes a whole CPU from everyone else for the benchmark's duration")
    ap.add_argument("--profd-nice", type=int, default=None,
                    help="run profd alone at this nice value in an autogroup of its own at the "
                         "same value (profd.service has Nice=-10); targets and the other "
                         "profilers stay at nice 0")
    ap.add_argument("--max-retries", type=int, default=None,
                    help="most runs repeated because the machine was busy during them "
                         "(default 8, --quick 3)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="which measurements, comma-separated (default all: %s)"
                         % ",".join(PARTS))
    ap.add_argument("--scale-procs", type=int, default=100,
                    help="services in the scale part (default 100)")
    ap.add_argument("--scale-runs", type=int, default=None,
                    help="repetitions of each scale configuration (default 3, --quick 1)")
    ap.add_argument("--host-procs", type=int, default=0,
                    help="busy processes in the busy-host part (default: one per CPU)")
    ap.add_argument("--raw", help="also save the measurements to this file (pickle)")
    ap.add_argument("--report-from", metavar="RAW", action="append",
                    help="print the report of measurements saved with --raw; measure nothing "
                         "(repeated: parts measured again in a later file replace the "
                         "earlier file's)")
    a = ap.parse_args()
    a.parts = [x for x in a.parts.split(",") if x]
    for x in a.parts:
        if x not in PARTS:
            ap.error("unknown part %r (parts: %s)" % (x, ",".join(PARTS)))
    if a.scale_runs is None:
        a.scale_runs = 1 if a.quick else 3
    if a.runs is None:
        a.runs = 2 if a.quick else 5
    if a.secs is None:
        a.secs = 3 if a.quick else 5
    if a.max_wait is None:
        a.max_wait = 30 if a.quick else 60
    if a.floor_runs is None:
        a.floor_runs = 1 if a.quick else 3
    if a.max_retries is None:
        a.max_retries = 3 if a.quick else 8
    if a.renice and os.environ.get("PROFD_BENCH_SESSION") != "1":
        # Nice values only order processes within one autogroup (one session): run in a
        # session of our own whose autogroup is at -20. Everything measured is started by
        # that process and inherits it.
        child = subprocess.Popen([sys.executable] + sys.argv,
                                 env=dict(os.environ, PROFD_BENCH_SESSION="1"),
                                 start_new_session=True)
        try:
            sys.exit(child.wait())
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            sys.exit(child.wait())
    if a.renice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -20)
            with open("/proc/self/autogroup", "w") as f:
                f.write("-20")
        except OSError as e:
            log("bench.py: cannot renice to -20: %s" % e)
    Daemon.nice = a.profd_nice
    b = Bench(a)
    try:
        text = b.report_raw(a.report_from) if a.report_from else b.run()
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)
    print(text, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
