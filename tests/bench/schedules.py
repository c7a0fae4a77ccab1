#!/usr/bin/env python3
"""The schedules benchmark: what each sampling mode achieves, and what the budget does.

    sudo python3 tests/bench/schedules.py --build BUILD_DIR [--secs 10] [--out FILE]

In one run on the machine at hand (about 4 minutes with the default 10 s per run):
1. each mode (alarm, sleep, event, cputime) at 101 and 999 Hz on a target with one busy
   thread (tests/programs/sleeper 1): the achieved rate against the requested one (ticks per
   second of wall time; for cputime samples per CPU-second of the busy thread) and the
   jitter of the busy thread's sample intervals (|interval - 1/rate|, p50 and p99), from the
   samples' own timestamps;
2. cputime at 101 Hz on targets with 0, 1 and 2 busy threads: samples per second and per
   CPU-second, against perf record -e task-clock -F 101 on the same target (what a perf user
   would run for CPU time);
3. the budget: 20 targets of 8 threads (1 busy, 6 sleeping, the main thread blocked) at
   999 Hz, alarm: the daemon's CPU against its --max-cpu budget, and each target's rate.
Prints a Markdown report. Not a test: a shared machine's timings are not pass/fail material.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def wait_quiet(max_wait=30):
    """Wait until the machine uses under 20% of a CPU over 0.3 s (or max_wait passed)."""
    t_end = time.monotonic() + max_wait
    tick = os.sysconf("SC_CLK_TCK")
    while time.monotonic() < t_end:
        b0, _ = machine_busy()
        time.sleep(0.3)
        b1, _ = machine_busy()
        if (b1 - b0) / tick / 0.3 < 0.2:
            return
        time.sleep(0.7)


def proc_cpu_ns(pid, tids=None):
    total = 0
    for p in glob.glob("/proc/%d/task/*/schedstat" % pid):
        if tids is not None and int(p.split("/")[4]) not in tids:
            continue
        try:
            with open(p) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def daemon_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(v, q):
    v = sorted(v)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(q / 100 * len(v)))]


class Client:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.call({"cmd": "hello", "version": 1})

    def call(self, obj):
        data = json.dumps(obj).encode()
        self.s.sendall(struct.pack(">I", len(data)) + data)
        n = struct.unpack(">I", self._recv(4))[0]
        r = json.loads(self._recv(n))
        if "error" in r:
            raise RuntimeError("%s: %s" % (obj.get("cmd"), r["error"]["message"]))
        return r["result"]

    def _recv(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise RuntimeError("profd closed the connection")
            b += c
        return b


class Bench:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.profd = os.path.join(self.build, "daemon", "profd")
        self.sleeper = os.path.join(self.build, "tests", "programs", "sleeper")
        self.dir = tempfile.mkdtemp(prefix="profd-sched-bench-")
        self.perf = shutil.which("perf")

    def daemon(self, *extra, nice=0):
        sock = os.path.join(self.dir, "profd.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        logf = open(os.path.join(self.dir, "profd.log"), "a")
        p = subprocess.Popen([self.profd, "--socket", sock] + list(extra), stdout=logf,
                             stderr=subprocess.STDOUT,
                             preexec_fn=(lambda: os.nice(nice)) if nice else None)
        for _ in range(300):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        return p, Client(sock)

    def target(self, busy, naps=1):
        p = subprocess.Popen([self.sleeper, str(busy), str(naps)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        p.stdout.readline()  # ready
        return p

    @staticmethod
    def stop(*procs):
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def burner_tids(self, pid):
        tids = set()
        for d in glob.glob("/proc/%d/task/*" % pid):
            try:
                with open(d + "/comm") as f:
                    if f.read().startswith("burner"):
                        tids.add(int(d.rsplit("/", 1)[1]))
            except OSError:
                pass
        return tids

    # 1. each mode at each rate
    def mode_run(self, mode, hz):
        secs = self.args.secs
        d, c = self.daemon()
        t = self.target(1)
        try:
            c.call({"cmd": "attach", "pid": t.pid, "mode": mode, "hz": hz, "buffer_s": 60})
            time.sleep(1.0)
            burners = self.burner_tids(t.pid)
            s0 = c.call({"cmd": "status", "pid": t.pid})["targets"][0]
            cpu0, t0 = proc_cpu_ns(t.pid, burners), mono_ns()
            time.sleep(secs)
            s1 = c.call({"cmd": "status", "pid": t.pid})["targets"][0]
            cpu1, t1 = proc_cpu_ns(t.pid, burners), mono_ns()
            res = c.call({"cmd": "slice", "pid": t.pid, "from_ns": t0, "to_ns": t1,
                          "format": "sentry"})
            prof = res["profile"]
            start = res["start_ns"]
            tid = str(next(iter(burners)))
            ts = sorted(start + int(x["elapsed_since_start_ns"])
                        for x in prof["profile"]["samples"] if x["thread_id"] == tid)
            gaps = [(b - a) for a, b in zip(ts, ts[1:])]
            wall = (t1 - t0) / 1e9
            ticks = s1["sampling"]["ticks"] - s0["sampling"]["ticks"]
            burner_samples = len(ts)
            cpu_s = (cpu1 - cpu0) / 1e9
            if mode == "cputime":
                achieved = burner_samples / cpu_s if cpu_s else 0
            else:
                achieved = ticks / wall
            iv = 1e9 / hz
            jit = [abs(g - iv) / 1e3 for g in gaps]
            dcpu = s1["sampling"]["cpu_ms"] - s0["sampling"]["cpu_ms"]
            return dict(mode=mode, hz=hz, achieved=achieved, ticks_per_s=ticks / wall,
                        missed=s1["sampling"]["missed"] - s0["sampling"]["missed"],
                        jit50=pct(jit, 50), jit99=pct(jit, 99),
                        mean_gap_ms=statistics.mean(gaps) / 1e6 if gaps else float("nan"),
                        source=s1["sampling"].get("cputime_source", ""),
                        cpu_s=cpu_s, wall=wall, daemon_ms_per_s=dcpu / wall)
        finally:
            self.stop(t)
            d.terminate()
            d.wait()

    # 2. cputime with 0, 1, 2 busy threads, and perf record -e task-clock
    def cputime_run(self, busy, hz=101):
        secs = self.args.secs / 2
        d, c = self.daemon()
        t = self.target(busy)
        try:
            c.call({"cmd": "attach", "pid": t.pid, "mode": "cputime", "hz": hz})
            time.sleep(0.5)
            s0 = c.call({"cmd": "status", "pid": t.pid})["targets"][0]
            cpu0, t0 = proc_cpu_ns(t.pid), mono_ns()
            time.sleep(secs)
            s1 = c.call({"cmd": "status", "pid": t.pid})["targets"][0]
            cpu1, t1 = proc_cpu_ns(t.pid), mono_ns()
            n = s1["samples"] - s0["samples"]
            cpu_s = (cpu1 - cpu0) / 1e9
            out = dict(busy=busy, samples_per_s=n / ((t1 - t0) / 1e9),
                       per_cpu_s=n / cpu_s if cpu_s > 0.01 else None, cpu_s=cpu_s,
                       source=s1["sampling"]["cputime_source"])
        finally:
            self.stop(t)
            d.terminate()
            d.wait()
        out["perf_per_s"] = out["perf_per_cpu_s"] = None
        if self.perf:
            t = self.target(busy)
            data = os.path.join(self.dir, "perf.data")
            try:
                cpu0, t0 = proc_cpu_ns(t.pid), mono_ns()
                r = subprocess.run([self.perf, "record", "-q", "-e", "task-clock",
                                    "-c", str(10**9 // hz),
                                    "-p", str(t.pid), "-o", data, "--", "sleep", str(secs)],
                                   capture_output=True, text=True)
                cpu1, t1 = proc_cpu_ns(t.pid), mono_ns()
                if r.returncode == 0:
                    # perf takes a while to start: count over the span of its own samples
                    # (per thread, from the first sample to the last).
                    s = subprocess.run([self.perf, "script", "-i", data, "-F", "tid,time"],
                                       capture_output=True, text=True)
                    per = {}
                    for l in s.stdout.splitlines():
                        f = l.split()
                        if len(f) >= 2:
                            per.setdefault(f[0], []).append(float(f[1].rstrip(":")))
                    rate = sum((len(v) - 1) / (v[-1] - v[0]) for v in per.values()
                               if len(v) > 2 and v[-1] > v[0])
                    cpu_per_s = (cpu1 - cpu0) / (t1 - t0)
                    out["perf_per_s"] = rate
                    out["perf_per_cpu_s"] = rate / cpu_per_s if cpu_per_s > 0.01 else None
            finally:
                self.stop(t)
        return out

    # 3. the budget
    def budget_run(self, ntargets=20, hz=999, nice=0):
        secs = self.args.secs
        d, c = self.daemon(nice=nice)
        targets = [self.target(1, 6) for _ in range(ntargets)]
        try:
            budget = c.call({"cmd": "status"})["daemon"]["budget_cpu_pct"]
            for t in targets:
                c.call({"cmd": "attach", "pid": t.pid, "hz": hz})
            time.sleep(2.0)
            st0 = {x["pid"]: x for x in c.call({"cmd": "status"})["targets"]}
            c0, t0 = daemon_cpu_s(d.pid), mono_ns()
            time.sleep(secs)
            c1, t1 = daemon_cpu_s(d.pid), mono_ns()
            st1 = {x["pid"]: x for x in c.call({"cmd": "status"})["targets"]}
            wall = (t1 - t0) / 1e9
            rates = sorted((st1[p]["sampling"]["ticks"] - st0[p]["sampling"]["ticks"]) / wall
                           for p in st1)
            eff = sorted(st1[p]["sampling"]["effective_hz"] for p in st1)
            threads = statistics.median(st1[p]["threads"] for p in st1)
            return dict(budget=budget, daemon_pct=100 * (c1 - c0) / wall, rates=rates, eff=eff,
                        throttled=sum(st1[p]["sampling"]["throttled"] for p in st1),
                        n=len(st1), threads=threads, hz=hz)
        finally:
            self.stop(*targets)
            d.terminate()
            d.wait()

    def run(self):
        out = []
        w = out.append
        w("# profd schedules benchmark\n")
        w("Machine: %d CPUs, kernel %s. %g s per run; each run waits for the machine to be "
          "quiet first. Target: `tests/programs/sleeper` (one thread spinning in burn(), one "
          "sleeping, the main thread blocked in read()).\n" % (os.cpu_count(),
                                                               os.uname().release,
                                                               self.args.secs))
        w("## 1. Each mode: achieved rate and interval jitter\n")
        w("Achieved: ticks per second of wall time (cputime: samples of the busy thread per "
          "CPU-second it used). Jitter: |interval - 1/rate| between consecutive samples of the "
          "busy thread, from their timestamps. Missed: ticks (alarm) or CPU intervals "
          "(cputime) the daemon counted as missed.\n")
        w("| mode | requested | achieved | vs requested | jitter p50 | jitter p99 | mean interval | missed | daemon CPU |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for hz in (101, 999):
            for mode in ("alarm", "sleep", "event", "cputime"):
                wait_quiet()
                log("mode %s at %d Hz" % (mode, hz))
                r = self.mode_run(mode, hz)
                w("| %s%s | %d Hz | %.1f | %+.2f%% | %.0f us | %.0f us | %.3f ms | %d | %.1f%% |"
                  % (mode, " (%s)" % r["source"] if r["source"] else "", hz, r["achieved"],
                     100 * (r["achieved"] - hz) / hz, r["jit50"], r["jit99"], r["mean_gap_ms"],
                     r["missed"], r["daemon_ms_per_s"] / 10))
        w("\n`sleep` drifts by the cost of each sample, as designed: its mean interval is "
          "the requested one plus that cost. `event` behaves as `sleep` when nothing "
          "happens.\n")
        w("## 2. cputime: samples per CPU-second, against perf\n")
        w("cputime at 101 Hz; perf: `perf record -e task-clock -c 9900990 -p PID` on the "
          "same program (a sample per 9.9 ms of each thread's CPU time, what a perf user "
          "would run for CPU time), counted over the span of its own samples.\n")
        w("| busy threads | profd samples/s | profd per CPU-second | perf samples/s | perf per CPU-second |")
        w("|---:|---:|---:|---:|---:|")
        for busy in (0, 1, 2):
            wait_quiet()
            log("cputime with %d busy" % busy)
            r = self.cputime_run(busy)
            f = lambda v: "-" if v is None else "%.1f" % v
            w("| %d | %s | %s | %s | %s |" % (busy, f(r["samples_per_s"]), f(r["per_cpu_s"]),
                                            f(r["perf_per_s"]), f(r["perf_per_cpu_s"])))
        w("\n(source: %s; per CPU-second is blank where the process used no CPU.)\n"
          % r["source"])
        w("## 3. The budget: 20 targets of 8 threads at 999 Hz\n")
        w("Each target: 1 busy thread, 6 sleeping, the main thread blocked (8 threads): 20 "
          "busy threads on %d CPUs. Daemon budget: the default, 25%% of one CPU. The daemon at "
          "nice 0, and at nice -10 as systemd/profd.service runs it.\n" % os.cpu_count())
        w("| daemon | daemon CPU | targets throttled | ticks/s per target: min / median / max | effective rate set by the budget: min / max |")
        w("|---|---:|---:|---:|---:|")
        for nice in (0, -10):
            wait_quiet()
            log("budget, nice %d" % nice)
            b = self.budget_run(nice=nice)
            w("| nice %d | %.1f%% of a CPU | %d of %d | %.0f / %.0f / %.0f | %.0f / %.0f Hz |"
              % (nice, b["daemon_pct"], b["throttled"], b["n"], b["rates"][0],
                 statistics.median(b["rates"]), b["rates"][-1], b["eff"][0], b["eff"][-1]))
        text = "\n".join(out) + "\n"
        if self.args.out:
            with open(self.args.out, "w") as f:
                f.write(text)
        print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--secs", type=float, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("schedules.py: run as root (ptrace of other processes)")
    b = Bench(args)
    try:
        b.run()
    finally:
        shutil.rmtree(b.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
