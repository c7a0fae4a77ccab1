#!/usr/bin/env python3
"""soak.py: profd under load for a long time, and whether anything grows.

    python3 tests/bench/soak.py --build BUILD_DIR [--minutes 60] [--hz 499] [--out FILE]
                                [--csv FILE]

One profd (the build's, default configuration) samples 20 programs at HZ (alarm): 4 busy
(2 threads), 2 phases, 2 idlesvc (5 threads, mostly blocked), 1 blocker (epoll, select,
accept, signals), 3 churn (a thread a millisecond; each exits after its run and comes back as a
new process), 2 execer (exec a new program every 50-400 ms), 1 Python program
(tests/integration/pyapp.py, Python frames), 1 idlers (50 idle threads), and 4 clients of the
library running transactions in 1-3 threads each (txnapp, looping; they come and go too).
Every minute one program (not a client) is killed and started again, a new process. Every
10 s a slice of the last 10 s in every format, of programs in turn.

Every 30 s it records profd's RSS and descriptors (the daemon and its helpers), its own
accounting (memory.total_bytes and parts), the targets' RSS, and the samples lost (perf.lost,
missed ticks, buffer drops) and dropped; at the end, each series' first and last value after a
10-minute warm-up and its slope per hour (least squares). A series that keeps growing is a
defect.

Run as root, by hand (never under meson test). Only processes it starts are signalled."""

import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
FORMATS = ["collapsed", "sentry", "sentry-chunks", "pprof", "speedscope", "flamegraph", "summary"]
KINDS = (["busy"] * 4 + ["phases"] * 2 + ["idlesvc"] * 2 + ["blocker"] + ["churn"] * 3 +
         ["execer"] * 2 + ["python"] + ["idlers"])
CLIENTS = 4


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(120)
        self.s.connect(path)
        self.call({"cmd": "hello", "version": 1})

    def call(self, obj):
        data = json.dumps(obj).encode()
        self.s.sendall(struct.pack(">I", len(data)) + data)
        hdr = self._recv(4)
        (n,) = struct.unpack(">I", hdr)
        return json.loads(self._recv(n))

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            c = self.s.recv(min(1 << 20, n - len(buf)))
            if not c:
                raise ConnectionError("profd closed the connection")
            buf += c
        return buf


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def nfds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def slope_per_hour(points):
    """Least-squares slope of (t seconds, value) points, per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return 3600 * sum((t - mt) * (v - mv) for t, v in points) / den if den else 0.0


class Soak:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.tmp = tempfile.mkdtemp(prefix="profd-soak-")
        os.chmod(self.tmp, 0o755)
        self.sock = os.path.join(self.tmp, "profd.sock")
        self.rng = random.Random(1)
        self.procs = {}  # pid -> (kind, Popen)
        self.rows = []

    def prog(self, name):
        return os.path.join(self.build, "tests", "programs", name)

    def start_kind(self, kind):
        r = self.rng
        argv = {
            "busy": [self.prog("busy"), "2"],
            "phases": [self.prog("phases"), "2"],
            "idlesvc": [self.prog("idlesvc"), "100000", "5"],
            "blocker": [self.prog("blocker")],
            "churn": [self.prog("churn"), str(r.randint(20, 60))],
            "execer": [self.prog("execer"), str(r.randint(50, 400)), self.prog("busy"), "1"],
            "python": [sys.executable, os.path.join(SOURCE, "tests", "integration", "pyapp.py")],
            "idlers": [self.prog("idlers"), "100000", "50"],
            "client": [self.prog("txnapp"), self.sock, tempfile.mkdtemp(dir=self.tmp),
                       str(r.randint(1, 3)), "1000000", str(r.randint(2, 20)), "1"],
        }[kind]
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs[p.pid] = (kind, p)
        if kind != "client":
            time.sleep(0.05)
            r = self.conn.call({"cmd": "attach", "pid": p.pid, "hz": self.a.hz})
            if "error" in r and r["error"]["code"] not in ("no_such_process",):
                print("attach %s %d: %s" % (kind, p.pid, r["error"]), file=sys.stderr)
        return p.pid

    def reap(self):
        """Programs that exited (churn's runs, killed ones) come back as new processes."""
        for pid, (kind, p) in list(self.procs.items()):
            if p.poll() is not None:
                del self.procs[pid]
                self.start_kind(kind)

    def kill_one(self):
        pids = [pid for pid, (k, _) in self.procs.items() if k != "client"]
        if pids:
            pid = self.rng.choice(pids)
            os.kill(pid, signal.SIGKILL)

    def slice_round(self):
        pids = [pid for pid, (k, _) in self.procs.items()]
        for fmt in FORMATS:
            pid = self.rng.choice(pids)
            r = self.conn.call({"cmd": "slice", "pid": pid, "format": fmt,
                                "last_ns": 10 * 10 ** 9})
            if "error" in r and r["error"]["code"] not in ("not_attached", "no_such_process"):
                print("slice %s %d: %s" % (fmt, pid, r["error"]), file=sys.stderr)

    def record(self, t):
        st = self.conn.call({"cmd": "status"})["result"]
        d = st["daemon"]
        helpers = children(self.daemon.pid)
        lost = missed = dropped = 0
        for tg in st["targets"]:
            lost += tg.get("perf", {}).get("lost", 0)
            missed += tg.get("sampling", {}).get("missed", 0)
            dropped += tg.get("dropped_max_memory", 0)
        row = {
            "t": t,
            "profd_rss_kib": rss_kib(self.daemon.pid),
            "helpers_rss_kib": sum(rss_kib(p) for p in helpers),
            "profd_fds": nfds(self.daemon.pid),
            "accounted_kib": d["memory"]["total_bytes"] // 1024,
            "samples_kib": d["memory"]["samples_bytes"] // 1024,
            "targets_kib": d["memory"]["targets_bytes"] // 1024,
            "slices_kib": d["memory"]["slices_bytes"] // 1024,
            "txn_kib": d["memory"]["transactions_bytes"] // 1024,
            "symbolizer_kib": d["memory"]["symbolizer_bytes"] // 1024,
            "modules": d["modules"],
            "targets": d["targets"],
            "clients": d["clients"],
            "targets_rss_kib": sum(rss_kib(pid) for pid in self.procs),
            "lost_total": lost, "missed_total": missed, "dropped_max_memory": dropped,
            "samples_total": d["samples"],
        }
        self.rows.append(row)
        if self.a.csv:
            with open(self.a.csv, "a") as f:
                if len(self.rows) == 1:
                    f.write(",".join(row) + "\n")
                f.write(",".join(str(v) for v in row.values()) + "\n")
        print("%5.0f s: profd RSS %d KiB (helpers %d), fds %d, accounted %d KiB, targets %d, "
              "modules %d" % (t, row["profd_rss_kib"], row["helpers_rss_kib"], row["profd_fds"],
                              row["accounted_kib"], row["targets"], row["modules"]), flush=True)

    def run(self):
        log = open(os.path.join(self.tmp, "profd.log"), "w")
        self.daemon = subprocess.Popen([os.path.join(self.build, "daemon", "profd"), "--socket",
                                        self.sock, "--config", "/dev/null"], stdout=log,
                                       stderr=subprocess.STDOUT)
        while not os.path.exists(self.sock):
            time.sleep(0.05)
        time.sleep(0.2)
        self.conn = Conn(self.sock)
        for kind in KINDS:
            self.start_kind(kind)
        for _ in range(CLIENTS):
            self.start_kind("client")
        t0 = time.monotonic()
        end = t0 + 60 * self.a.minutes
        next_slice = next_record = next_kill = t0
        try:
            while time.monotonic() < end:
                now = time.monotonic()
                if self.daemon.poll() is not None:
                    raise RuntimeError("profd exited: %s" % self.daemon.returncode)
                self.reap()
                if now >= next_record:
                    self.record(now - t0)
                    next_record += 30
                if now >= next_slice:
                    self.slice_round()
                    next_slice += 10
                if now >= next_kill:
                    self.kill_one()
                    next_kill += 60
                time.sleep(0.5)
            self.record(time.monotonic() - t0)
        finally:
            for pid, (kind, p) in list(self.procs.items()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(60)
            log.close()
        return self.report()

    def report(self):
        a = self.a
        warm = [r for r in self.rows if r["t"] >= min(600, 60 * a.minutes / 6)]
        keys = ["profd_rss_kib", "helpers_rss_kib", "profd_fds", "accounted_kib", "samples_kib",
                "targets_kib", "slices_kib", "txn_kib", "symbolizer_kib", "modules",
                "targets_rss_kib"]
        lines = ["## Soak: %g minutes, 20 programs and 4 transaction clients at %d Hz" %
                 (a.minutes, a.hz), "",
                 "Measured by `python3 tests/bench/soak.py --build %s --minutes %g --hz %d` on "
                 "%d vCPUs, kernel %s. From the end of the warm-up (%.0f s) to the end: first, "
                 "last, least-squares slope per hour." % (a.build, a.minutes, a.hz,
                                                           os.cpu_count(), os.uname().release,
                                                           warm[0]["t"] if warm else 0),
                 "", "| series | start | end | slope per hour |", "|---|---:|---:|---:|"]
        for k in keys:
            pts = [(r["t"], r[k]) for r in warm]
            if not pts:
                continue
            lines.append("| %s | %s | %s | %+.1f |" % (k, pts[0][1], pts[-1][1],
                                                      slope_per_hour(pts)))
        last = self.rows[-1]
        lines += ["", "Samples taken: %d; lost by the kernel (perf.lost, live targets): %d; "
                  "ticks missed (live targets): %d; dropped for max_memory: %d." %
                  (last["samples_total"], last["lost_total"], last["missed_total"],
                   last["dropped_max_memory"])]
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--hz", type=int, default=499)
    ap.add_argument("--out")
    ap.add_argument("--csv")
    return Soak(ap.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
