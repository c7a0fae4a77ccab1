#!/usr/bin/env python3
"""test_export.py: profiles leave the host, and nothing is lost on the way.

profd exports every attached process to the three backends of tests/integration/
receivers.py (Sentry envelopes of profile chunks, Pyroscope's /ingest of pprof, OTLP), which
judge each body strictly: relay's rules for the chunks, the query and multipart form for
Pyroscope, and the bodies are decoded here (pprof also by `go tool pprof -raw`).

Scenarios, each with a daemon, a receiver and a target of its own, side by side:
- plain: a process with transactions (txnapp), exported as it runs and after it exits;
- 503: the receiver answers 503 for 30 s from the start;
- reset: it resets every connection for 8 s;
- hang: it never answers for 8 s (export_timeout 2 s);
- down: nothing listens for 6 s after profd starts;
- sigkill: the receiver answers 503; profd is killed with SIGKILL in the middle and started
  again on the same spool, which it sends once the receiver is back.
And before them: the DSN's key shown nowhere, and TLS verified (a self-signed backend gets
nothing). After each scenario, for every backend: the windows delivered cover the whole time the process was
attached (from its attach to its exit; for sigkill, up to the last window spooled before
the kill) back to back, with no gap and no overlap; their samples add up to what status
counted; no window is delivered under two ids; and status counts what happened (sent,
retried, failed, queued 0)."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from harness import (SLOW, SOURCE, Daemon, Program, check, fail, log, wait_until)
import receivers

HZ = 49
KINDS = ("sentry", "pyroscope", "otlp")


def exporter_args(rx, spool, interval="1", timeout="2"):
    u = rx.urls()
    return ["--export-sentry", u["sentry"], "--export-pyroscope", u["pyroscope"],
            "--export-otlp", u["otlp"], "--export-interval", interval, "--export-timeout", timeout,
            "--export-spool", spool, "--hz", str(HZ)]


def target_status(d, pid):
    for t in d.status().get("targets", []):
        if t["pid"] == pid:
            return t
    return None


def drained(d):
    """Every exporter's queue empty, no window being built."""
    ex = d.status()["daemon"].get("export", {})
    return ex.get("windows_building") == 0 and all(ex[k]["queued"] == 0 for k in KINDS)


def samples_of(body):
    if body.kind == "sentry":
        return sum(len(c["profile"]["samples"]) for c in body.chunks)
    if body.kind == "otlp":
        return len(body.timestamps)
    return sum(n for n, _ in receivers.pprof_samples(body.data))


def judge(rx, kind, attach_rt, end_rt, samples, empty=0):
    """Problems with what rx took of kind: windows, ids, samples. empty: windows status says
    had no samples (they send nothing: a busy machine can leave a short window without a
    tick): that many holes between the windows, or at their ends, are theirs; an overlap
    never is, and the samples must add up all the same."""
    bodies = rx.taken(kind)
    problems = []
    by_window = {}
    for b in bodies:
        by_window.setdefault(b.window, set()).add(b.id)
        n = samples_of(b)
        if n != b.samples_said:
            problems.append("%s %s holds %d samples, its header says %d"
                            % (kind, b.id, n, b.samples_said))
    twice = {w: ids for w, ids in by_window.items() if len(ids) > 1}
    if twice:
        problems.append("%s: windows delivered under several ids: %s" % (kind, twice))
    ws = sorted(by_window)
    if not ws:
        return ["%s: nothing delivered" % kind], 0
    overlaps = [(a, b) for a, b in zip(ws, ws[1:]) if b[0] <= a[1]]
    holes = [(a, b) for a, b in zip(ws, ws[1:]) if b[0] > a[1] + 1]
    if overlaps:
        problems.append("%s: windows overlap: %s" % (kind, overlaps[:3]))
    # The first window begins at the attach, the last ends at the end (real time, as this
    # test's clocks convert profd's CLOCK_MONOTONIC: within 50 ms).
    late = abs(ws[0][0] - attach_rt) > 50e6
    early = end_rt is not None and abs(ws[-1][1] - end_rt) > 50e6
    if len(holes) + late + early > empty:
        problems.append("%s: windows not back to back from the attach to the end: holes %s, "
                        "the first begins %.1f ms from the attach, the last ends %s ms from "
                        "the end (%d empty windows)"
                        % (kind, holes[:3], (ws[0][0] - attach_rt) / 1e6,
                           "%.1f" % ((ws[-1][1] - end_rt) / 1e6) if end_rt else "?", empty))
    seen = {}
    for b in bodies:
        seen.setdefault(b.window, samples_of(b))
    total = sum(seen.values())
    if samples is not None and total != samples:
        problems.append("%s: %d samples delivered, status counted %d" % (kind, total, samples))
    return problems, len(ws)


def rt_offset():
    return time.time_ns() - time.monotonic_ns()


class Scenario:
    def __init__(self, name):
        self.name = name
        self.problems = []
        self.notes = []
        self.rx = receivers.Receiver()
        self.tmp = tempfile.mkdtemp(prefix="profd-export-")
        self.spool = os.path.join(self.tmp, "spool")

    def run(self):
        try:
            getattr(self, "run_" + self.name)()
        except SystemExit:
            self.problems.append("a check failed inside the scenario (above)")
        except Exception as e:  # reported by the main thread
            self.problems.append("%s: %r" % (type(e).__name__, e))
        finally:
            self.rx.stop()

    def busy_target(self, d, seconds, extra=()):
        p = Program("busy", 1, seconds, 2)
        d.ctl("attach", p.pid, "--service", "svc-" + self.name, "--label",
              "scenario=" + self.name, *extra)
        return p

    def finish(self, d, p, attach_rt_of=None):
        """Wait for p's exit and every queue to drain; judge every backend."""
        p.proc.wait()
        wait_until(lambda: (target_status(d, p.pid) or {}).get("state") == "exited", 30,
                   "the target's exit (%s)" % self.name)
        wait_until(lambda: drained(d), 120, "the export queues to drain (%s)" % self.name,
                   interval=0.2)
        t = target_status(d, p.pid)
        off = rt_offset()
        attach_rt = t["attach_ns"] + off
        end_rt = attach_rt + int(t["attached_s"] * 1e9)
        for k in KINDS:
            problems, n = self.judge(k, attach_rt, end_rt, t["samples"],
                                     t["export"]["empty_windows"])
            self.problems += problems
            self.notes.append("%s: %d windows, %d samples" % (k, n, t["samples"]))
        return d.status()["daemon"]["export"], t

    def judge(self, kind, attach_rt, end_rt, samples, empty):
        return judge(self.rx, kind, attach_rt, end_rt, samples, empty)

    # -- the scenarios --
    def run_plain(self):
        """A process with transactions, labelled, exported as it runs."""
        self.rx.start()
        with Daemon(*exporter_args(self.rx, self.spool)) as d:
            outdir = os.path.join(self.tmp, "out")
            os.mkdir(outdir)
            with Program("txnapp", d.socket, outdir, 2, 60, 40,
                         env=dict(os.environ, TXNAPP_SPANS="1")) as p:
                wait_until(lambda: target_status(d, p.pid), 30, "txnapp's attach")
                ex, t = self.finish(d, p)
            st = t.get("export", {})
            if not st.get("service"):
                self.problems.append("status shows no export for the target: %s" % t)
            # Transactions: pprof's label, and every chunk one profiler_id, status's.
            labels = {lab.get("transaction") for b in self.rx.taken("pyroscope")
                      for _, lab in receivers.pprof_samples(b.data)}
            if not any(v and v.startswith("request-") for v in labels):
                self.problems.append("no pprof sample carries a transaction label: %s"
                                     % sorted(map(str, labels))[:5])
            # Its later transactions are published in its thread context (libprofd, once a
            # finish said profd reads it): their samples carry their trace and span ids.
            labs = [lab for b in self.rx.taken("pyroscope")
                    for _, lab in receivers.pprof_samples(b.data)]
            if not any(len(lab.get("span_id", "")) == 16 and
                       lab.get("transaction.name", "").startswith("request-") for lab in labs):
                self.problems.append("no pprof sample carries its thread context's span_id "
                                     "and transaction.name (attribute 0, named by libprofd's "
                                     "process context)")
            ids = {c["profiler_id"] for b in self.rx.taken("sentry") for c in b.chunks}
            if ids != {st.get("profiler_id")}:
                self.problems.append("chunks' profiler_ids %s, status's %s"
                                     % (ids, st.get("profiler_id")))
            for k in KINDS:
                if ex[k]["sent"] != len(self.rx.taken(k)) or ex[k]["failed"] or \
                        ex[k]["dropped"]:
                    self.problems.append("%s status %s, %d delivered"
                                         % (k, ex[k], len(self.rx.taken(k))))
            # pprof read by go's own reader.
            for b in self.rx.taken("pyroscope")[:2]:
                path = os.path.join(self.tmp, "w.pb")
                with open(path, "wb") as f:
                    f.write(b.data)
                r = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True,
                                   text=True, timeout=120)
                if r.returncode != 0 or "Samples:" not in r.stdout:
                    self.problems.append("go tool pprof -raw: %s" % r.stderr[:300])
            # OTLP: the resource, and samples inside requests linked to their trace and
            # span (txnapp's: trace 00..0<thread>00<k>, span <k + 1>).
            otlp = self.rx.taken("otlp")
            text = otlp[0].text if otlp else ""
            for want in ('key: "service.name"\n', 'string_value: "txnapp"',
                         'key: "process.pid"', "int_value: %d" % p.pid):
                if want not in text:
                    self.problems.append("the OTLP resource lacks %r" % want)
            links = re.findall(r'trace_id: "((?:\\[0-7]{3}|[^"])*)"\s*span_id: "((?:\\[0-7]{3}|[^"])*)"',
                               "".join(b.text for b in otlp))
            linked = sum(len(re.findall(r"link_index: [1-9]", b.text)) for b in otlp)
            if len(links) < 10 or not linked:
                self.problems.append("OTLP: %d links with trace and span ids, %d samples "
                                     "linked" % (len(links), linked))
            q = self.rx.taken("pyroscope")[0].query
            if "service_name=txnapp" not in q["name"] or "pid=%d" % p.pid not in q["name"]:
                self.problems.append("Pyroscope's name %r" % q["name"])

    def run_fault(self, fault, seconds, length, timeout="2"):
        self.rx.start()
        self.rx.set_fault(fault, seconds)
        with Daemon(*exporter_args(self.rx, self.spool, timeout=timeout)) as d:
            with self.busy_target(d, length) as p:
                ex, t = self.finish(d, p)
        for k in KINDS:
            if not ex[k]["retried"] or not ex[k]["failed"] or ex[k]["dropped"] or \
                    not ex[k]["last_error"]:
                self.problems.append("%s: status after the fault: %s" % (k, ex[k]))
        q = self.rx.taken("pyroscope")[0].query if self.rx.taken("pyroscope") else {}
        if "scenario=%s" % self.name not in q.get("name", "") or \
                not q.get("name", "").startswith("svc-%s{" % self.name):
            self.problems.append("Pyroscope's name %r" % q.get("name"))

    def run_503(self):
        self.run_fault("503", 30, 33)

    def run_reset(self):
        self.run_fault("reset", 8, 10)

    def run_hang(self):
        self.run_fault("hang", 8, 10)

    def run_down(self):
        """Nothing listens when profd starts; the receiver comes up once every backend has
        failed to get an answer (and 6 s at least: several windows queued meanwhile)."""
        with Daemon(*exporter_args(self.rx, self.spool)) as d:
            with self.busy_target(d, 9) as p:
                t0 = time.monotonic()
                # (Not a fixed wait alone: a sanitized daemon's first windows wait for its
                # symbolizer's first look at libc's debug information, seconds; CI once sent
                # nothing in the first 6 s.)
                deadline = time.monotonic() + 60 * SLOW
                while not all(d.status()["daemon"]["export"][k]["failed"] for k in KINDS):
                    if time.monotonic() > deadline:
                        log("export status: %s" % d.status()["daemon"]["export"])
                        log("target status: %s" % d.target_status(p.pid))
                        log(d.log())
                        fail("every backend found nothing listening within 60 s")
                    time.sleep(0.2)
                time.sleep(max(0.0, 6 - (time.monotonic() - t0)))
                self.rx.start()
                ex, t = self.finish(d, p)
        for k in KINDS:
            if not ex[k]["failed"] or "no answer" not in ex[k]["last_error"]:
                self.problems.append("%s: status after the outage: %s" % (k, ex[k]))

    def run_429(self):
        """Rate limited (429, Retry-After and X-Sentry-Rate-Limits: 2 s) for 6 s: held, then
        everything delivered."""
        self.run_fault("429", 6, 8)

    def run_400(self):
        """A final 4xx for 4 s: those windows are dropped, counted and logged once per
        backend; the rest are delivered."""
        self.rx.start()
        with Daemon(*exporter_args(self.rx, self.spool)) as d:
            with self.busy_target(d, 3) as p:
                time.sleep(1.5)
                self.rx.set_fault("400", 4)
                p.proc.wait()
                wait_until(lambda: drained(d), 60, "the queues to drain (400)", interval=0.2)
                ex = d.status()["daemon"]["export"]
                t = target_status(d, p.pid)
            log_text = d.log()
        refused = {k: sum(1 for r in self.rx.requests if r[0] == k and r[2] == 400)
                   for k in KINDS}
        for k in KINDS:
            n = len({b.window for b in self.rx.taken(k)})
            logged = log_text.count("export: %s" % ex[k]["url"])
            if not refused[k] or ex[k]["dropped"] != refused[k] or \
                    n + ex[k]["dropped"] != t["export"]["windows"] - t["export"]["empty_windows"] or \
                    ex[k]["retried"] or \
                    "HTTP 400: bad request" not in ex[k]["last_error"]:
                self.problems.append("%s: %d refused with 400, %d delivered, status %s, "
                                     "target %s" % (k, refused[k], n, ex[k], t["export"]))
            if log_text.count("refused a profile for good") != len(KINDS):
                self.problems.append("the final refusal is not logged once per backend: %d "
                                     "lines" % log_text.count("refused a profile for good"))
            self.notes.append("%s: %d windows dropped by 400, %d delivered (%d log lines)"
                              % (k, ex[k]["dropped"], n, logged))

    def run_bound(self):
        """The spool bounded at 64 KiB through a 503 outage: the oldest windows are dropped
        and counted, the newest kept and delivered back to back up to the exit."""
        self.rx.start()
        self.rx.set_fault("503", 3600)
        args = exporter_args(self.rx, self.spool, interval="0.2") + ["--export-spool-max", "64K"]
        with Daemon(*args) as d:
            with self.busy_target(d, 6) as p:
                p.proc.wait()
                wait_until(lambda: (target_status(d, p.pid) or {}).get("state") == "exited" and
                           not d.status()["daemon"]["export"]["windows_building"], 30,
                           "the last window spooled (bound)")
                ex0 = d.status()["daemon"]["export"]
                spool_bytes = sum(os.path.getsize(os.path.join(self.spool, f))
                                  for f in os.listdir(self.spool))
                self.rx.set_fault(None, 0)
                wait_until(lambda: drained(d), 120, "the queues to drain (bound)", interval=0.2)
                ex = d.status()["daemon"]["export"]
                t = target_status(d, p.pid)
        if not 0 < spool_bytes <= 64 * 1024 or ex0["spool_bytes"] > 64 * 1024:
            self.problems.append("the spool held %d bytes (status %d) past its bound of 64 KiB"
                                 % (spool_bytes, ex0["spool_bytes"]))
        end_rt = t["attach_ns"] + rt_offset() + int(t["attached_s"] * 1e9)
        for k in KINDS:
            ws = sorted({b.window for b in self.rx.taken(k)})
            gaps = [(a, b) for a, b in zip(ws, ws[1:]) if b[0] != a[1] + 1]
            # (A window without samples sends nothing.)
            empty = t["export"]["empty_windows"]
            sent = t["export"]["windows"] - empty
            if not ex[k]["dropped"] or len(ws) + ex[k]["dropped"] != sent or \
                    len(gaps) > empty or not ws or \
                    (abs(ws[-1][1] - end_rt) > 50e6 and not empty):
                self.problems.append("%s: %d delivered, status %s, %d windows, gaps %s"
                                     % (k, len(ws), ex[k], t["export"]["windows"], gaps[:2]))
            self.notes.append("%s: %d oldest windows dropped at the bound, the %d newest "
                              "delivered (of %d, %d empty)" % (k, ex[k]["dropped"], len(ws),
                                                               t["export"]["windows"],
                                                               t["export"]["empty_windows"]))

    def run_sigkill(self):
        """503 throughout the first daemon's life; SIGKILL; a second daemon on the same
        spool sends what the first one spooled once the receiver is back."""
        self.rx.start()
        self.rx.set_fault("503", 3600)
        args = exporter_args(self.rx, self.spool, interval="3")
        d = Daemon(*args)
        p = Program("busy", 1, 30, 2)
        try:
            d.ctl("attach", p.pid, "--service", "svc-sigkill")
            # Two windows spooled, the next one 3 s away: the kill falls between windows. The
            # count seen to change (not only to be 2 or more: CI's ASan pass once read the
            # status just before the next window, which was spooled before the kill).
            def spooled_now(least):
                t = target_status(d, p.pid)
                if t and t["export"]["windows"] >= least and not t["export"]["windows_building"]:
                    return t
                return None
            before = wait_until(lambda: spooled_now(1), 30, "a window spooled")
            st = wait_until(lambda: spooled_now(max(2, before["export"]["windows"] + 1)), 30,
                            "two windows spooled")
            exported_to = st["export"]["exported_to_ns"]
            windows, samples = st["export"]["windows"], st["export"]["samples"]
            attach_rt = st["attach_ns"] + rt_offset()
            os.kill(d.pid, signal.SIGKILL)
            d.proc.wait()
        finally:
            d.logf.close()
        spooled = sorted(os.listdir(self.spool))
        if len(spooled) < 2 * windows:
            self.problems.append("%d files in the spool after the kill for %d windows: %s"
                                 % (len(spooled), windows, spooled))
        if not p.alive():
            self.problems.append("the target died with the daemon")
        p.kill()
        self.rx.set_fault(None, 0)
        with Daemon(*args) as d2:
            wait_until(lambda: drained(d2), 120, "the spool sent by the second daemon",
                       interval=0.2)
            ex = d2.status()["daemon"]["export"]
        end_rt = exported_to + rt_offset()
        for k in KINDS:
            problems, n = judge(self.rx, k, attach_rt, end_rt, samples,
                                st["export"]["empty_windows"])
            self.problems += problems
            if n != windows or ex[k]["sent"] != windows:
                self.problems.append("%s: %d windows delivered, %d spooled, the second daemon "
                                     "sent %s" % (k, n, windows, ex[k]))
            self.notes.append("%s: %d windows, %d samples" % (k, n, samples))
        if os.listdir(self.spool):
            self.problems.append("the spool is not empty after the sends: %s"
                                 % os.listdir(self.spool))


def secrets():
    """A DSN's key is never shown: not in --show-config, status, the log, the process list
    (profd hides its flag's value), nor an error; export_sentry_file must be root's alone."""
    from harness import PROFD
    rx = receivers.Receiver().start()
    key = receivers.KEY
    dsn = rx.urls()["sentry"]
    try:
        r = subprocess.run([PROFD, "--config", "/dev/null", "--export-sentry", dsn,
                            "--show-config"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and key not in r.stdout and
              "export_sentry = http://***@127.0.0.1:%d/42" % rx.port in r.stdout,
              "--show-config shows the DSN without its key")
        bad = dsn.replace("/42", "/x42")
        r = subprocess.run([PROFD, "--config", "/dev/null", "--export-sentry", bad],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode != 0 and key not in r.stderr and "project" in r.stderr,
              "a bad DSN is refused without quoting it (%r)" % r.stderr.strip())
        tmp = tempfile.mkdtemp(prefix="profd-secret-")
        with Daemon("--export-sentry", dsn, "--export-spool", os.path.join(tmp, "spool")) as d:
            with open("/proc/%d/cmdline" % d.pid, "rb") as f:
                cmdline = f.read()
            st = d.ctl("status", "--json").stdout
            check(key.encode() not in cmdline and b"--export-sentry" in cmdline,
                  "the process list shows --export-sentry without its value")
            check(key not in st and key not in d.log() and
                  "http://***@127.0.0.1" in st,
                  "status and the log show the DSN without its key")
        path = os.path.join(tmp, "sentry.dsn")
        with open(path, "w") as f:
            f.write(dsn + "\n")
        if os.geteuid() == 0:
            os.chmod(path, 0o644)
            r = subprocess.run([PROFD, "--config", "/dev/null", "--export-sentry-file", path,
                                "--show-config"], capture_output=True, text=True, timeout=30)
            check(r.returncode != 0 and "chmod 600" in r.stderr and key not in r.stderr,
                  "export_sentry_file readable by others: refused (%r)" % r.stderr.strip())
            os.chmod(path, 0o600)
            r = subprocess.run([PROFD, "--config", "/dev/null", "--export-sentry-file", path,
                                "--show-config"], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0 and key not in r.stdout and
                  "export_sentry = http://***@127.0.0.1" in r.stdout,
                  "export_sentry_file (root's, mode 0600): its DSN taken, shown without its key")
        else:
            log("not root: export_sentry_file's owner check not tried")
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        rx.stop()


def tls():
    """TLS is verified: a backend whose certificate no CA of the system signed (a self-signed
    one, as a man in the middle would show) gets nothing, and status says why."""
    tmp = tempfile.mkdtemp(prefix="profd-tls-")
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True, timeout=60)
    if r.returncode != 0:
        log("openssl could not make a certificate: TLS verification not tried (%s)"
            % r.stderr[-200:])
        return
    rx = receivers.Receiver().start(tls=(cert, key))
    try:
        with Daemon("--export-pyroscope", "https://127.0.0.1:%d" % rx.port,
                    "--export-interval", "0.5", "--export-spool",
                    os.path.join(tmp, "spool")) as d:
            with Program("busy", 1, 3, 1) as p:
                d.ctl("attach", p.pid, "--hz", str(HZ))
                ex = wait_until(lambda: (lambda x: x if x["failed"] else None)(
                    d.status()["daemon"]["export"]["pyroscope"]), 30, "a refused TLS send")
        check(not rx.taken("pyroscope") and "certificate" in ex["last_error"] and
              not ex["sent"],
              "TLS is verified: a self-signed backend gets nothing (%s)" % ex["last_error"])
    finally:
        rx.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    secrets()
    tls()
    names = ["plain", "503", "reset", "hang", "down", "sigkill", "429", "400", "bound"]
    scenarios = [Scenario(n) for n in names]
    threads = [threading.Thread(target=s.run) for s in scenarios]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in scenarios:
        log("%s: %s" % (s.name, "; ".join(s.notes)))
        check(not s.problems and not s.rx.problems,
              "%s: every backend got every window of the attach back to back, once, with "
              "the samples status counted (%s)" % (s.name, (s.problems + s.rx.problems)[:4]))
        shutil.rmtree(s.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
