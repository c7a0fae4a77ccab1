#!/usr/bin/env python3
"""statefuzz.py: a stateful fuzzer of the live daemon.

The libFuzzer targets feed each parser one input; this feeds a running profd sequences of
requests while it holds targets, transactions and slices in flight: several clients at once,
each sending valid requests (attach, configure, detach, slices of every format and window,
status, list, reload) and mutated ones (wrong types, huge and negative numbers, long and odd
strings, missing or unknown members, broken frames, requests pipelined and connections
dropped mid-reply), against real processes that run, block, churn threads, exec, exit and come
back, get stopped and continued, and run transactions through the client protocol (Python
clients, whose own processes profd attaches for them, and the C library's txnapp). The
configuration file is rewritten between reloads, sometimes with an error.

It fails (exit 1, with the seed and each client's last requests) when the daemon exits, a
sanitizer reports in its log, a reply does not come within the timeout, a reply is not one
JSON object with a result or one of the protocol's error codes, an `internal` error answers
a request, a target is found left stopped by profd, or, at the end, the daemon does not
answer, or a detached target is still traced. Run it on the ASan/UBSan build:

    tests/fuzz/statefuzz.py --build build-asan --seconds 60 [--seed N] [--clients 4]

Exit 77: the machine cannot run it (no ptrace for us)."""

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
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))

# A thread stopped this long, its process not stopped by us meanwhile, is left stopped.
LEFT_STOPPED_S = 10

CODES = {"bad_request", "too_large", "handshake_required", "unknown_command", "unsupported_version",
         "no_such_process", "permission_denied", "already_attached", "not_attached", "limit",
         "attach_failed", "internal", "busy", "unavailable"}
FORMATS = ["collapsed", "folded", "sentry", "sentry-chunks", "pprof", "speedscope", "flamegraph",
           "svg", "summary"]
MODES = ["alarm", "sleep", "event", "cputime"]
TXN_NAMES = ["GET /a", "POST /b", "inner", "batch", "x" * 512, "ünïcode ☃", "a;b c"]


class Failure(Exception):
    pass


def silent(q, hello):
    """Whether profd answers q with nothing at all: a transaction's start or discard with
    "noreply" (once the handshake is done and its id, if any, is one profd can copy)."""
    return (hello and isinstance(q, dict) and q.get("cmd") in ("txn_start", "txn_discard") and
            q.get("noreply") is True and
            ("id" not in q or (isinstance(q["id"], (int, float, str)) and
                               not isinstance(q["id"], bool))))


def frame(obj):
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(payload)) + payload


class Conn:
    """One connection: frames out, replies in, each with a timeout."""

    def __init__(self, path, timeout):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def recv(self):
        """A reply (parsed), or None at the end of the connection."""
        while len(self.buf) < 4:
            chunk = self.s.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        (n,) = struct.unpack(">I", self.buf[:4])
        while len(self.buf) < 4 + n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise Failure("connection closed inside a reply (%d of %d bytes)" %
                              (len(self.buf) - 4, n))
            self.buf += chunk
        body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
        try:
            reply = json.loads(body)
        except ValueError:
            raise Failure("a reply that is not JSON: %r" % body[:200])
        if not isinstance(reply, dict) or ("result" in reply) == ("error" in reply):
            raise Failure("a reply with neither or both of result and error: %r" % body[:300])
        if "error" in reply:
            e = reply["error"]
            if not isinstance(e, dict) or e.get("code") not in CODES:
                raise Failure("an error of no known code: %r" % body[:300])
        return reply

    def close(self):
        self.s.close()


class Fuzz:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed
        self.rng = random.Random(self.seed)
        self.build = os.path.abspath(args.build)
        self.dir = tempfile.mkdtemp(prefix="profd-statefuzz-")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "profd.sock")
        self.conf = os.path.join(self.dir, "profd.conf")
        self.logpath = os.path.join(self.dir, "profd.log")
        self.lock = threading.RLock()
        self.targets = {}      # pid -> (name, Popen)
        self.gone = []         # pids of targets that exited (for requests about dead pids)
        self.stopped = {}      # pid -> when we sent SIGSTOP
        self.failure = None
        self.counts = {}       # what was sent, by kind
        self.replies = {}      # replies, by result / error code
        self.history = {}      # client -> its last requests
        self.stop_at = time.monotonic() + args.seconds
        self.daemon = None
        self.stopped_since = {}  # (pid, tid) -> when first seen stopped, not by us
        self.longest_stopped = 0.0

    # ---- bookkeeping ----

    def count(self, table, key):
        with self.lock:
            table[key] = table.get(key, 0) + 1

    def note(self, who, what):
        with self.lock:
            h = self.history.setdefault(who, [])
            h.append("%.3f %s" % (time.monotonic(), what[:300]))
            del h[:-40]

    def fail(self, msg):
        with self.lock:
            if self.failure is None:
                self.failure = msg

    def running(self):
        return self.failure is None and time.monotonic() < self.stop_at

    # ---- the daemon ----

    def write_conf(self, r, bad=False):
        lines = ["hz = %d" % r.choice([19, 101, 499, 999]),
                 "mode = %s" % r.choice(MODES),
                 "buffer = %d" % r.choice([5, 30, 60]),
                 "max_cpu = %d" % r.choice([0, 10, 25, 50]),
                 "txn_linger = %d" % r.choice([0, 1, 5]),
                 "max_targets = %d" % r.choice([4, 16, 256]),
                 "max_memory = %s" % r.choice(["64M", "256M", "1G"])]
        if bad:
            lines.append(r.choice(["hz = many", "no_such_key = 1", "mode = sometimes",
                                   "max_memory = -1", "buffer", "=", "\x00"]))
        tmp = self.conf + ".new"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.rename(tmp, self.conf)

    def start_daemon(self):
        self.write_conf(self.rng)
        exe = os.path.join(self.build, "daemon", "profd")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
        env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        self.logf = open(self.logpath, "w")
        self.daemon = subprocess.Popen([exe, "--socket", self.sock, "--config", self.conf],
                                       stdout=self.logf, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise Failure("profd exited at start:\n" + self.log_tail())
            try:
                c = Conn(self.sock, 5)
                c.send(frame({"cmd": "hello", "version": 1}))
                if c.recv():
                    c.close()
                    return
            except OSError:
                time.sleep(0.05)
        raise Failure("profd did not answer within 60 s")

    def log_tail(self, n=6000):
        try:
            with open(self.logpath, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def check_daemon(self):
        if self.daemon.poll() is not None:
            self.fail("profd exited (status %s)" % self.daemon.returncode)
        text = self.log_tail(200000)
        for marker in ("runtime error:", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer"):
            if marker in text:
                self.fail("the sanitizer reported in profd's log")

    # ---- targets ----

    def program(self, name):
        return os.path.join(self.build, "tests", "programs", name)

    def spawn(self, kind):
        r = self.rng
        env = dict(os.environ)
        env["PROFD_SOCKET"] = self.sock
        if kind == "busy":
            cmd = [self.program("busy"), str(r.randint(1, 3))]
        elif kind == "phases":
            cmd = [self.program("phases"), "2"]
        elif kind == "blocker":
            cmd = [self.program("blocker")]
        elif kind == "idlers":
            cmd = [self.program("idlers"), "3600", str(r.choice([4, 20]))]
        elif kind == "churn":
            cmd = [self.program("churn"), str(r.randint(2, 8))]
        elif kind == "execer":
            cmd = [self.program("execer"), str(r.randint(50, 400)), self.program("busy"), "1"]
        elif kind == "idlesvc":
            cmd = [self.program("idlesvc"), str(r.randint(3, 20))]
        elif kind == "python":
            cmd = [sys.executable, os.path.join(SOURCE, "tests", "integration", "pyapp.py")]
        elif kind == "pytxn":
            cmd = [sys.executable, os.path.abspath(__file__), "--txn-client", self.sock,
                   "--seed", str(r.getrandbits(32))]
        elif kind == "txnapp":
            out = tempfile.mkdtemp(dir=self.dir)
            cmd = [self.program("txnapp"), self.sock, out, str(r.randint(1, 3)), "1000000",
                   str(r.randint(1, 5)), "1"]
        else:
            raise ValueError(kind)
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        with self.lock:
            self.targets[p.pid] = (kind, p)
        return p.pid

    def reap_targets(self):
        with self.lock:
            for pid, (kind, p) in list(self.targets.items()):
                if p.poll() is not None:
                    del self.targets[pid]
                    self.gone.append(pid)
                    self.stopped.pop(pid, None)
                    del self.gone[:-50]

    def pick_pid(self, r):
        with self.lock:
            live = list(self.targets)
            gone = list(self.gone)
        x = r.random()
        if live and x < 0.8:
            return r.choice(live)
        if gone and x < 0.9:
            return r.choice(gone)
        return r.choice([0, -1, 1, os.getpid(), self.daemon.pid, 2 ** 31 - 1, 4194304,
                         "12a", 1.5, None, True, [], {}, "", " 1", "-0"])

    def target_churn(self):
        """Now and then a target ends (killed: only ours, by pid) and another starts; a
        running one is stopped and continued (job control while it is sampled)."""
        r = self.rng
        self.reap_targets()
        with self.lock:
            live = list(self.targets.items())
        x = r.random()
        if live and x < 0.3:
            pid, (kind, p) = r.choice(live)
            if kind not in ("pytxn", "txnapp") or r.random() < 0.3:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif live and x < 0.55:
            pid, (kind, p) = r.choice(live)
            with self.lock:
                stopped = pid in self.stopped
                if stopped:
                    del self.stopped[pid]
                else:
                    self.stopped[pid] = time.monotonic()
            try:
                os.kill(pid, signal.SIGCONT if stopped else signal.SIGSTOP)
            except ProcessLookupError:
                pass
        if len(live) < self.args.targets:
            self.spawn(r.choice(["busy", "phases", "blocker", "idlers", "churn", "execer",
                                 "idlesvc", "python", "pytxn", "pytxn", "txnapp"]))

    def check_not_left_stopped(self):
        """A target we did not stop is never left stopped (T, t): profd's stops last
        microseconds, and a group-stop it parks ends at our SIGCONT once profd reads that
        event. A thread found stopped at every look for LEFT_STOPPED_S, while we had not
        stopped its process at any of them, is left stopped. (How long threads stayed so is
        reported: a loaded sanitized daemon may take a while to read a stop.)"""
        now = time.monotonic()
        seen = set()
        with self.lock:
            pids = [pid for pid in self.targets if pid not in self.stopped]
        for pid in pids:
            try:
                for tid in os.listdir("/proc/%d/task" % pid):
                    with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                        st = f.read()
                    if st[st.rindex(")") + 2] in "tT":
                        seen.add((pid, int(tid)))
            except (OSError, ValueError):
                pass
        with self.lock:
            ours = set(self.stopped)
        for key in list(self.stopped_since):
            if key not in seen or key[0] in ours:
                since = self.stopped_since.pop(key)
                self.longest_stopped = max(self.longest_stopped, now - since)
        for key in seen:
            if key[0] not in ours:
                self.stopped_since.setdefault(key, now)
        for key, since in self.stopped_since.items():
            if now - since > LEFT_STOPPED_S:
                self.fail("thread %d of %d left stopped for %.1f s" % (key[1], key[0],
                                                                        now - since))

    # ---- requests ----

    def valid_request(self, r):
        pid = self.pick_pid(r)
        kind = r.choices(["attach", "detach", "configure", "slice", "status", "list", "reload",
                          "hello", "txn"], weights=[14, 8, 6, 30, 10, 5, 2, 2, 4])[0]
        if kind == "attach":
            q = {"cmd": "attach", "pid": pid}
            if r.random() < 0.7:
                q["hz"] = r.choice([1, 19, 97, 101, 499, 999, 2000, 10000])
            if r.random() < 0.6:
                q["mode"] = r.choice(MODES)
            if r.random() < 0.3:
                q["buffer_s"] = r.choice([1, 5, 60, 3600])
            if r.random() < 0.3:
                q["sampler"] = r.choice(["auto", "perf", "ptrace"])
        elif kind == "detach":
            q = {"cmd": "detach", "pid": pid}
        elif kind == "configure":
            q = {"cmd": "configure", "pid": pid}
            if r.random() < 0.7:
                q["hz"] = r.choice([1, 19, 101, 499, 999])
            if r.random() < 0.7:
                q["mode"] = r.choice(MODES)
        elif kind == "slice":
            q = {"cmd": "slice", "pid": pid, "format": r.choice(FORMATS)}
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            w = r.random()
            if w < 0.4:
                q["last_ns"] = r.choice([0, 1, 10 ** 6, 10 ** 8, 10 ** 9, 5 * 10 ** 9,
                                         3600 * 10 ** 9, str(2 ** 62)])
            elif w < 0.8:
                a = now - r.randint(0, 20 * 10 ** 9)
                b = a + r.randint(-10 ** 6, 10 * 10 ** 9)
                if r.random() < 0.8:
                    q["from_ns"] = max(a, 0)
                if r.random() < 0.8:
                    q["to_ns"] = str(max(b, 0)) if r.random() < 0.5 else max(b, 0)
            if r.random() < 0.25:
                q["transaction"] = r.choice(TXN_NAMES + ["none such"])
            if r.random() < 0.25:
                q["by_transaction"] = True
            if r.random() < 0.2:
                q["thread_ids"] = True
            if q["format"] == "summary":
                if r.random() < 0.5:
                    q["limit"] = r.choice([0, 1, 5, 1000])
                if r.random() < 0.5:
                    q["sort"] = r.choice(["self", "total"])
                if r.random() < 0.3:
                    q["threads"] = r.choice(["busy", "1", "phases-1", ""])
        elif kind == "status":
            q = {"cmd": "status"}
            if r.random() < 0.5:
                q["pid"] = pid
        elif kind == "list":
            q = {"cmd": "list"}
        elif kind == "reload":
            self.write_conf(r, bad=r.random() < 0.3)
            q = {"cmd": "reload"}
        elif kind == "hello":
            q = {"cmd": "hello", "version": r.choice([1, 1, 2, 0])}
        else:
            # Transactions of this very process (the fuzzer is a client too: profd attaches
            # it for them), with ids of its own or another connection's.
            q = r.choice([{"cmd": "txn_start", "name": r.choice(TXN_NAMES)},
                          {"cmd": "txn_start", "name": r.choice(TXN_NAMES),
                           "txn_id": r.randint(1, 20), "noreply": True},
                          {"cmd": "txn_finish", "txn_id": r.randint(1, 20)},
                          {"cmd": "txn_discard", "txn_id": r.randint(1, 20)}])
        if r.random() < 0.3:
            q["id"] = r.choice([r.randint(0, 2 ** 53), "abc", -1, 2.5])
        return q

    def mutate(self, r, q):
        q = dict(q)
        odd = [None, True, False, -1, 0, 2 ** 63, -2 ** 63, 2 ** 64, 1e300, -1e300, 0.5, "",
               "x" * r.choice([1, 100, 70000]), "\u0000", "\udcff", "NaN", "1e999", [],
               [1, 2], {}, {"a": {"b": []}}, "9" * 40, " 12", "+3", "-0"]
        for _ in range(r.randint(1, 3)):
            x = r.random()
            keys = list(q)
            if x < 0.45 and keys:
                q[r.choice(keys)] = r.choice(odd)
            elif x < 0.6 and keys:
                del q[r.choice(keys)]
            elif x < 0.75:
                q[r.choice(["pid", "hz", "mode", "format", "last_ns", "from_ns", "to_ns",
                            "transaction", "txn_id", "name", "tid", "t_ns", "lookback_s",
                            "noreply", "sampler", "buffer_s", "limit", "sort", "threads",
                            "zzz"])] = r.choice(odd)
            elif x < 0.85:
                q["cmd"] = r.choice(["", "ATTACH", "slice ", "shutdown", "x" * 1000, 1, None])
            else:
                q = r.choice([[], "str", 1, None, [q]])
                break
        return q

    def raw_bytes(self, r, q):
        """Frames that are not one well-formed JSON object, or are split and joined oddly.
        Returns (bytes, replies expected, closes)."""
        body = json.dumps(q).encode() if not isinstance(q, bytes) else q
        x = r.random()
        if x < 0.15:
            return struct.pack(">I", 0), 1, True                       # empty frame
        if x < 0.25:
            return struct.pack(">I", (1 << 20) + r.randint(1, 1 << 30)), 1, True  # too large
        if x < 0.45:
            junk = r.choice([b"{", b"}", b"[1,2", b"\xff\xfe", b"null", b"{\"cmd\":",
                             body[:r.randint(0, len(body))], body + b"trailing",
                             b"{\"cmd\":\"status\"}{\"cmd\":\"list\"}",
                             bytes(r.getrandbits(8) for _ in range(r.randint(1, 64)))])
            return frame(junk), 1, False
        if x < 0.6:
            return frame(body) + frame(body), 2, False                 # two in one write
        if x < 0.7:
            return struct.pack(">I", len(body) + 10) + body, 0, True   # cut short, then closed
        return frame(body), 1, False

    # ---- a client ----

    def client(self, n):
        who = "client-%d" % n
        rng = random.Random((self.seed << 8) + n)
        conn = None
        hello = False
        while self.running():
            try:
                if conn is None:
                    conn = Conn(self.sock, self.args.timeout)
                    hello = False
                if not hello and rng.random() < 0.95:
                    conn.send(frame({"cmd": "hello", "version": 1}))
                    self.expect(conn, who, "hello")
                    hello = True
                q = self.valid_request(rng)
                if rng.random() < 0.3:
                    q = self.mutate(rng, q)
                mode = rng.random()
                if silent(q, hello):
                    mode = 1.0  # (no reply to count on: sent whole)
                data, nreplies, closes = (self.raw_bytes(rng, q) if mode < 0.15
                                          else (frame(q), 0 if silent(q, hello) else 1, False))
                kind = q.get("cmd") if isinstance(q, dict) else type(q).__name__
                self.count(self.counts, str(kind)[:20] if mode >= 0.15 else "raw")
                self.note(who, "send %r" % (data[:300],))
                if rng.random() < 0.1:
                    for i in range(0, len(data), 7):  # byte by byte, nearly
                        conn.send(data[i:i + 7])
                else:
                    conn.send(data)
                if rng.random() < 0.03:
                    # Gone before the answer: the daemon must carry on (a slice in flight
                    # is abandoned).
                    conn.close()
                    conn = None
                    continue
                for _ in range(nreplies):
                    self.expect(conn, who, kind)
                if closes:
                    conn.close()
                    conn = None
            except Failure as e:
                self.fail("%s: %s" % (who, e))
            except socket.timeout:
                self.fail("%s: no reply within %d s" % (who, self.args.timeout))
            except (ConnectionResetError, BrokenPipeError, ConnectionRefusedError,
                    FileNotFoundError) as e:
                self.check_daemon()
                self.note(who, "connection: %s" % e)
                if conn:
                    conn.close()
                conn = None
                time.sleep(0.01)
        if conn:
            conn.close()

    def expect(self, conn, who, kind):
        reply = conn.recv()
        if reply is None:
            # (Closed after an error frame for a bad frame, or a limit.)
            self.note(who, "closed")
            raise ConnectionResetError("closed by profd")
        key = "ok" if "result" in reply else reply["error"]["code"]
        self.count(self.replies, "%s:%s" % (str(kind)[:20], key))
        self.note(who, "reply %s %s" % (key, json.dumps(reply)[:200]))
        if key == "internal":
            raise Failure("an internal error: %s" % json.dumps(reply)[:500])

    # ---- the run ----

    def run(self):
        self.start_daemon()
        for kind in ["busy", "phases", "blocker", "idlers", "churn", "python", "pytxn",
                     "pytxn", "txnapp", "execer"][:self.args.targets]:
            self.spawn(kind)
        threads = [threading.Thread(target=self.client, args=(i,), daemon=True)
                   for i in range(self.args.clients)]
        for t in threads:
            t.start()
        last_look = 0
        while self.running():
            time.sleep(0.1)
            with self.lock:
                self.target_churn()
            self.check_daemon()
            if time.monotonic() - last_look > 0.5:
                last_look = time.monotonic()
                self.check_not_left_stopped()
            # A process we stopped is continued within a few seconds.
            with self.lock:
                for pid, when in list(self.stopped.items()):
                    if time.monotonic() - when > 2:
                        del self.stopped[pid]
                        try:
                            os.kill(pid, signal.SIGCONT)
                        except ProcessLookupError:
                            pass
        for t in threads:
            t.join(self.args.timeout + 5)
        if self.failure is None:
            self.finish()
        self.cleanup()
        return self.failure

    def finish(self):
        """The daemon still serves: it answers, detaches every target, and leaves none
        traced; then it exits cleanly on SIGTERM (leaks reported by LeakSanitizer fail)."""
        with self.lock:
            for pid in list(self.stopped):
                os.kill(pid, signal.SIGCONT)
            self.stopped.clear()
        try:
            c = Conn(self.sock, self.args.timeout)
            c.send(frame({"cmd": "hello", "version": 1}))
            c.recv()
            c.send(frame({"cmd": "list"}))
            lst = c.recv()
            for t in lst["result"]["targets"]:
                c.send(frame({"cmd": "detach", "pid": t["pid"]}))
                c.recv()
            c.send(frame({"cmd": "status"}))
            st = c.recv()
            if "result" not in st:
                self.fail("status at the end: %r" % st)
            c.close()
        except (OSError, Failure) as e:
            self.fail("the daemon at the end: %s" % e)
            return
        self.reap_targets()
        with self.lock:
            pids = list(self.targets)
        # (A transaction client's process may be attached again by its own next start.)
        traced = []
        for pid in pids:
            if self.targets.get(pid, ("",))[0] in ("pytxn", "txnapp"):
                continue
            try:
                with open("/proc/%d/status" % pid) as f:
                    for line in f:
                        if line.startswith("TracerPid:") and int(line.split()[1]) == self.daemon.pid:
                            traced.append(pid)
            except OSError:
                pass
        if traced:
            self.fail("still traced after every detach: %s" % traced)
        self.daemon.send_signal(signal.SIGTERM)
        try:
            rc = self.daemon.wait(60)
        except subprocess.TimeoutExpired:
            self.fail("profd did not exit on SIGTERM")
            return
        self.check_daemon_log_only()
        if rc != 0:
            self.fail("profd exited %s on SIGTERM" % rc)

    def check_daemon_log_only(self):
        text = self.log_tail(400000)
        for marker in ("runtime error:", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer"):
            if marker in text:
                self.fail("the sanitizer reported in profd's log")

    def cleanup(self):
        with self.lock:
            items = list(self.targets.items())
        for pid, (kind, p) in items:
            try:
                os.kill(pid, signal.SIGCONT)
                p.kill()
            except ProcessLookupError:
                pass
            p.wait()
        if self.daemon and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait()
        self.logf.close()


def txn_client(path, seed):
    """A process whose transactions profd attaches it for: starts, nests, finishes, discards,
    abandons them (closing its connection with some open), with valid and odd arguments."""
    rng = random.Random(seed)
    conn = None
    open_ids = []
    while True:
        try:
            if conn is None:
                conn = Conn(path, 120)
                conn.send(frame({"cmd": "hello", "version": 1}))
                conn.recv()
                open_ids = []
            x = rng.random()
            tid = threading.get_native_id()
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            if x < 0.4 or not open_ids:
                txn = rng.randint(1, 2 ** 20)
                q = {"cmd": "txn_start", "name": rng.choice(TXN_NAMES), "txn_id": txn,
                     "tid": rng.choice([tid, tid, 0, 1, -5]), "noreply": rng.random() < 0.7}
                if rng.random() < 0.3:
                    q["t_ns"] = rng.choice([now, now - 10 ** 9, 0, str(now + 10 ** 9)])
                if rng.random() < 0.2:
                    q["trace_id"] = rng.choice(["0" * 32, "f" * 32, "xyz", ""])
                conn.send(frame(q))
                if not q["noreply"]:
                    conn.recv()
                open_ids.append(txn)
            elif x < 0.8:
                txn = open_ids.pop(rng.randrange(len(open_ids)))
                q = {"cmd": "txn_finish", "txn_id": txn, "tid": tid,
                     "t_ns": now if rng.random() < 0.7 else 0}
                if rng.random() < 0.3:
                    q["lookback_s"] = rng.choice([0, 0.5, 3, 3600, -1, "2"])
                conn.send(frame(q))
                conn.recv()
            elif x < 0.93:
                txn = open_ids.pop(rng.randrange(len(open_ids)))
                q = {"cmd": "txn_discard", "txn_id": txn, "noreply": rng.random() < 0.5}
                conn.send(frame(q))
                if not q["noreply"]:
                    conn.recv()
            else:
                conn.close()  # with transactions open
                conn = None
                continue
            # Some work between calls, in Python (sampled with its Python frames).
            end = time.monotonic() + rng.choice([0, 0.001, 0.005, 0.02])
            while time.monotonic() < end:
                pass
        except (OSError, Failure):
            if conn:
                conn.close()
            conn = None
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--targets", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=120, help="seconds a reply may take")
    ap.add_argument("--txn-client", metavar="SOCKET")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    if args.txn_client:
        txn_client(args.txn_client, args.seed)
        return 0
    if os.geteuid() != 0:
        print("SKIP: needs root (ptrace and perf events over the targets it starts)")
        return 77
    # A hang is a failure to look at: every thread's stack after the run's time and more.
    import faulthandler
    faulthandler.dump_traceback_later(args.seconds + 3 * args.timeout + 120, exit=True)
    f = Fuzz(args)
    print("statefuzz: seed %d, %d clients, %d targets, %.0f s, %s" %
          (args.seed, args.clients, args.targets, args.seconds, f.build), flush=True)
    t0 = time.monotonic()
    try:
        failure = f.run()
    except Failure as e:
        failure = str(e)
        f.cleanup()
    except Exception:
        failure = traceback.format_exc()
        f.cleanup()
    sent = sum(f.counts.values())
    print("statefuzz: %d requests in %.0f s (%s)" % (
        sent, time.monotonic() - t0,
        ", ".join("%s %d" % kv for kv in sorted(f.counts.items(), key=lambda kv: -kv[1]))))
    print("statefuzz: longest a thread stayed stopped, not by us: %.2f s" % f.longest_stopped)
    print("statefuzz: replies: %s" % ", ".join(
        "%s %d" % kv for kv in sorted(f.replies.items(), key=lambda kv: -kv[1])[:40]))
    if failure:
        print("statefuzz: FAILED (seed %d): %s" % (args.seed, failure))
        for who, h in sorted(f.history.items()):
            print("---- %s, last requests:" % who)
            print("\n".join(h[-15:]))
        print("---- profd's log, last part:\n" + f.log_tail())
        return 1
    print("statefuzz: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
