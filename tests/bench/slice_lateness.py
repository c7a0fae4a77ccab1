#!/usr/bin/env python3
"""Tick lateness while a large buffer is sliced.

    sudo python3 tests/bench/slice_lateness.py --build BUILD_DIR [--fill 60] [--runs 5]
                                               [--formats collapsed,sentry] [--out FILE]

One daemon, two targets, both sampled at 999 Hz on the alarm schedule:
- the big one, tests/programs/fanout (8 threads: 7 sleeping at the bottom of some 3000
  different call paths, the main thread blocked in read), with a 60 s buffer: after --fill
  seconds it holds fill x 999 x 8 samples (60 s: about 480 000) in thousands of stacks;
- the other, tests/programs/sleeper 1 (one busy thread, one sleeping, the main thread
  blocked), whose ticks are watched.
Each run slices the big buffer whole (--last 60) in collapsed form and its last 30 s (the
most a Sentry profile holds) in Sentry's, and compares the other
target's ticks while the slice was being answered (from the request to the reply) with its
ticks over a window of the same length without a slice, right after: how late they ran
(status "tick_lateness": the daemon's histogram of tick time minus due time, diffed between
two status replies; the reply is read whole but parsed only after the second), and how many
were missed (a tick whose whole interval passed is
missed, not run late). Medians over the runs. The daemon runs with --max-cpu 0 so that the
budget does not change the rates between runs, and at nice -10 as systemd/profd.service runs
it (--nice; the targets and this script at 0).

Not a test: a shared machine's timings are not pass/fail material. The daemon's counters of
its loop's work on slices (status "slice_loop", where the daemon has them) are printed too.
"""
import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]


def wait_quiet(max_wait):
    """Wait until the rest of the machine uses under 60% of a CPU over 0.3 s (or max_wait)."""
    t_end = time.monotonic() + max_wait
    tick = os.sysconf("SC_CLK_TCK")
    while time.monotonic() < t_end:
        b0 = machine_busy()
        time.sleep(0.3)
        if (machine_busy() - b0) / tick / 0.3 < 0.6:
            return True
        time.sleep(0.2)
    return False


class Client:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.call({"cmd": "hello", "version": 1})

    def call(self, obj):
        return self.parse(obj, self.call_raw(obj))

    def call_raw(self, obj):
        """The reply's bytes, unparsed (parsing a Sentry profile of tens of megabytes takes
        this process's CPU, which the daemon's loop thread would then compete for)."""
        data = json.dumps(obj).encode()
        self.s.sendall(struct.pack(">I", len(data)) + data)
        n = struct.unpack(">I", self._recv(4))[0]
        return self._recv(n)

    @staticmethod
    def parse(obj, raw):
        r = json.loads(raw)
        if "error" in r:
            raise RuntimeError("%s: %s" % (obj.get("cmd"), r["error"]["message"]))
        return r["result"]

    def _recv(self, n):
        parts, got = [], 0
        while got < n:
            c = self.s.recv(min(n - got, 1 << 20))
            if not c:
                raise RuntimeError("profd closed the connection")
            parts.append(c)
            got += len(c)
        return b"".join(parts)


def hist_of(status):
    """{(lo_us, hi_us): count} from a target's tick_lateness."""
    return {(b[0], b[1]): b[2] for b in status["tick_lateness"]["histogram_us"]}


def hist_diff(a, b):
    """The ticks between two histograms: sorted [(lo, hi, count)]."""
    out = []
    for k, n in b.items():
        d = n - a.get(k, 0)
        if d > 0:
            out.append((k[0], k[1], d))
    return sorted(out)


def quantile(h, q):
    """Upper bound of the bucket holding the q quantile (the last bucket: its lower bound)."""
    n = sum(c for _, _, c in h)
    if not n:
        return float("nan")
    want, seen = max(1, int(n * q + 0.999999)), 0
    for lo, hi, c in h:
        seen += c
        if seen >= want:
            return hi if hi >= 0 else lo
    return h[-1][1]


def window_stats(s0, s1):
    h = hist_diff(hist_of(s0), hist_of(s1))
    ticks = sum(c for _, _, c in h)
    return dict(ticks=ticks,
                missed=s1["sampling"]["missed"] - s0["sampling"]["missed"],
                p50=quantile(h, 0.50), p99=quantile(h, 0.99),
                max=quantile(h, 1.0))


def med(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--fill", type=float, default=60, help="seconds of samples before slicing")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--formats", default="collapsed,sentry")
    ap.add_argument("--hz", type=int, default=999)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--max-wait", type=float, default=20,
                    help="most seconds to wait for a quiet machine before each run")
    ap.add_argument("--nice", type=int, default=-10,
                    help="the daemon's nice value (systemd/profd.service: -10)")
    ap.add_argument("--out")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    d = tempfile.mkdtemp(prefix="profd-slice-bench-")
    sock = os.path.join(d, "profd.sock")
    logf = open(os.environ.get("BENCH_LOG", os.path.join(d, "profd.log")), "w")
    daemon = subprocess.Popen([os.path.join(build, "daemon", "profd"), "--socket", sock,
                               "--config", "/dev/null", "--max-cpu", "0"],
                              stdout=logf, stderr=subprocess.STDOUT,
                              preexec_fn=(lambda: os.nice(args.nice)) if args.nice else None)
    progs = []
    try:
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        time.sleep(0.1)
        c = Client(sock)
        big = subprocess.Popen([os.path.join(build, "tests", "programs", "fanout"),
                                str(args.threads)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        progs.append(big)
        big.stdout.readline()
        other = subprocess.Popen([os.path.join(build, "tests", "programs", "sleeper"), "1"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        progs.append(other)
        other.stdout.readline()
        c.call({"cmd": "attach", "pid": big.pid, "hz": args.hz, "mode": "alarm",
                "buffer_s": 60})
        c.call({"cmd": "attach", "pid": other.pid, "hz": args.hz, "mode": "alarm",
                "buffer_s": 10})
        log("filling %.0f s of samples of %d threads at %d Hz..." % (args.fill, args.threads,
                                                                   args.hz))
        time.sleep(args.fill + 0.5)
        bs = c.call({"cmd": "status", "pid": big.pid})["targets"][0]
        log("buffer: %d samples, %d stacks" % (bs["buffered"], bs["stacks"]))
        formats = args.formats.split(",")
        rows = {f: [] for f in formats}
        for run in range(args.runs):
            for fmt in formats:
                quiet = wait_quiet(args.max_wait)
                st = lambda: c.call({"cmd": "status", "pid": other.pid})["targets"][0]
                s0 = st()
                t0 = time.monotonic()
                # Sentry profiles hold at most 30 s (relay's limit): slice that much.
                last = 30 if fmt == "sentry" else 60
                req = {"cmd": "slice", "pid": big.pid, "last_ns": last * 10**9, "format": fmt}
                raw = c.call_raw(req)
                t1 = time.monotonic()
                s1 = st()
                res = c.parse(req, raw)
                del raw
                during = window_stats(s0, s1)
                # The same length without a slice.
                b0 = st()
                time.sleep(t1 - t0)
                b1 = st()
                base = window_stats(b0, b1)
                row = dict(run=run, fmt=fmt, secs=t1 - t0, samples=res["samples"],
                           stacks=res["stacks"], build_ms=res.get("build_ms", 0),
                           quiet=quiet, during=during, base=base)
                rows[fmt].append(row)
                log("run %d %-9s %.3f s, %d samples, %d stacks: during p50/p99/max %.0f/%.0f/"
                    "%.0f us, %d missed of %d; without %.0f/%.0f/%.0f us, %d missed of %d%s" % (
                        run, fmt, row["secs"], row["samples"], row["stacks"],
                        during["p50"], during["p99"], during["max"], during["missed"],
                        during["ticks"] + during["missed"], base["p50"], base["p99"],
                        base["max"], base["missed"], base["ticks"] + base["missed"],
                        "" if quiet else " (machine busy)"))
        final = c.call({"cmd": "status"})
        loopstats = final["daemon"].get("slice_loop")
        out = []
        out.append("## Tick lateness while a %d-sample buffer is sliced\n" % bs["buffered"])
        out.append("Build `%s`, %s, daemon at nice %d; the big target: %d threads at %d Hz, %d samples in %d "
                   "stacks; the watched target: `sleeper 1` at %d Hz, alarm. %d runs, medians "
                   "(lateness in us; a bucket's upper bound, 9%% wide).\n" % (
                       build, time.strftime("%Y-%m-%d %H:%M"), args.nice, args.threads, args.hz,
                       bs["buffered"], bs["stacks"], args.hz, args.runs))
        out.append("| format | slice took | during: p50 / p99 / max | missed | without: p50 / "
                   "p99 / max | missed |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for fmt in formats:
            r = rows[fmt]
            g = lambda w, k: med([x[w][k] for x in r])
            out.append("| %s | %.0f ms | %.0f / %.0f / %.0f | %.0f | %.0f / %.0f / %.0f | %.0f |" % (
                fmt, med([x["secs"] for x in r]) * 1e3,
                g("during", "p50"), g("during", "p99"), g("during", "max"),
                g("during", "missed"),
                g("base", "p50"), g("base", "p99"), g("base", "max"), g("base", "missed")))
        out.append("")
        out.append("Per run (during / without): " + "; ".join(
            "%s max %.0f/%.0f us, missed %d/%d" % (x["fmt"], x["during"]["max"],
                                                 x["base"]["max"], x["during"]["missed"],
                                                 x["base"]["missed"])
            for f in formats for x in rows[f]))
        if loopstats:
            out.append("\nThe daemon's loop on slices (`status` `slice_loop`): " +
                       json.dumps(loopstats))
        text = "\n".join(out) + "\n"
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
    finally:
        for p in progs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        logf.close()


if __name__ == "__main__":
    main()
