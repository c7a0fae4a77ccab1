"""profd short of file descriptors or of memory: clear errors, and the other targets and
clients are served.

Descriptors (profd started with RLIMIT_NOFILE 256, soft and hard):
- a process of 101 threads: the threads beyond profd's budget for per-thread descriptors
  (the limit less a reserve of 64) go without their /proc files, as status and the log say,
  and are sampled by stopping them: every thread shows in a slice, none sees an EINTR;
- clients connecting until the descriptors are used up: the extra connections get an error
  saying profd is out of file descriptors (not a hang in the backlog), the daemon does not
  spin, and a client already connected is answered: an attach fails as a limit naming the
  shortage, a slice whose symbolizer cannot start comes back with its frames unsymbolized
  and the reason; once the clients leave, everything works again.

Memory (--max-memory 2M):
- status gives the total and its parts (samples, slices, clients, transactions, the
  symbolizer's cache); the samples of a busy target at 999 Hz stop growing at their share
  (3/4 of max_memory): the oldest are overwritten (status counts them) and the total stays
  within max_memory;
- another attach is refused, and so is a slice or transaction profile that would take the
  total past max_memory, each naming max_memory; a small slice still works; the daemon
  does not crash."""
import errno
import resource
import threading

from harness import *

NOFILE = 256


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    v = s[s.rindex(")") + 2:].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def err(r):
    return (r or {}).get("error") or {}


# ---- descriptors ----
with Daemon(preexec_fn=low_nofile) as d, Program("idlers", 25, 100) as big, \
        Program("busy", 1) as small, Program("busy", 1) as third:
    c = RawClient(d.socket)
    r = c.call({"cmd": "attach", "pid": big.pid, "hz": 19})
    check("result" in r, "a process of 101 threads attaches under a limit of %d descriptors "
          "(%r)" % (NOFILE, err(r)))
    st = d.target_status(big.pid)
    dd = d.status()["daemon"]["descriptors"]
    log("descriptors: %s; threads without files: %d" % (dd, st["threads_without_files"]))
    check(st["threads"] == 101 and 0 < st["threads_without_files"] < 101
          # (valgrind keeps a few descriptors of the limit for itself)
          and NOFILE - 32 < dd["limit"] <= NOFILE and dd["threads"] <= dd["limit"] - dd["reserved"]
          and dd["threads_refused"] >= st["threads_without_files"],
          "threads beyond the budget go without their /proc files (%d of 101; %d descriptors "
          "for threads, %d kept for the rest)" % (st["threads_without_files"], dd["threads"],
                                                  dd["reserved"]))
    check("goes without its /proc files" in d.log(), "... and the log says why")
    check("result" in c.call({"cmd": "attach", "pid": small.pid}),
          "another process attaches: the reserve is left for it")
    # No descriptor left for a perf event: the big process's running main thread (it has
    # its /proc files, taken first) is sampled by stopping it, and status says why; the
    # small one's threads, without their files, are stopped (whether they run cannot be
    # seen), and counted so.
    d.wait_samples(small.pid, 200, timeout=60)
    bs, ss = d.target_status(big.pid), d.target_status(small.pid)
    log("big: paths %s, perf %s" % (bs["paths"], bs["perf"]))
    log("small: paths %s, perf %s" % (ss["paths"], ss["perf"]))
    # (Which of big's threads get their files depends on the order they were seized in, the
    # leader last: the running main thread may be one without. Either way it is stopped, for
    # a reason status gives.)
    why = ("no perf event, %s" % bs["perf"].get("error") if bs["perf"]["stopped_no_event"]
           else "without its files (%d)" % bs["perf"]["stopped_without_files"])
    check(bs["paths"]["ptrace"]["samples"] > 0 and bs["paths"]["perf"]["samples"] == 0 and
          ((bs["perf"]["stopped_no_event"] > 0 and
            bs["perf"].get("error") == os.strerror(errno.EMFILE)) or
           bs["perf"]["stopped_without_files"] >= bs["paths"]["ptrace"]["samples"] - 2),
          "no descriptor left for a perf event: the running thread is sampled by stopping it "
          "(%d stops), status says why (%s)" % (bs["paths"]["ptrace"]["samples"], why))
    check(ss["paths"]["ptrace"]["samples"] > 0 and ss["paths"]["perf"]["samples"] == 0 and
          ss["perf"]["stopped_without_files"] >= ss["paths"]["ptrace"]["samples"] and
          ss["unwind"]["complete_pct"] >= 99.0,
          "threads without their /proc files are sampled by stopping them, counted so (%d "
          "stops, %d without files), %.1f%% complete"
          % (ss["paths"]["ptrace"]["samples"], ss["perf"]["stopped_without_files"],
             ss["unwind"]["complete_pct"]))

    # profd loads a new target's symbols in the background at its attach, which starts the
    # symbolizer: let that finish, then end the symbolizer, so that the slice below must
    # start another (its socket stays open in profd until then).
    def symbols_helper():
        st = d.status()["daemon"]
        h = {x["role"]: x for x in st["symbolizers"]}.get("symbols", {})
        return h if st["slices_queued"] == 0 and h.get("pid", 0) > 0 else None
    helper = wait_until(symbols_helper, 30, "the warm-up's symbolizer")
    os.kill(helper["pid"], signal.SIGKILL)
    wait_until(lambda: not os.path.exists("/proc/%d" % helper["pid"]), 10,
               "profd to reap its symbolizer")
    # Clients until the descriptors are used up.
    socks, refused, served = [], [], []
    for i in range(NOFILE + 50):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10 * SLOW)
        s.connect(d.socket)
        socks.append(s)
    hello = json.dumps({"cmd": "hello", "version": 1}).encode()
    for s in socks:
        try:
            s.sendall(struct.pack(">I", len(hello)) + hello)
        except OSError:
            pass  # refused and closed already: its error is waiting to be read
    resets = 0
    for s in socks:
        try:
            hdr = s.recv(4)
        except ConnectionResetError:
            resets += 1  # closed without a word
            continue
        if len(hdr) < 4:
            continue
        body = b""
        n = struct.unpack(">I", hdr)[0]
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                break
            body += chunk
        e = json.loads(body).get("error")
        (refused if e else served).append(e or s)
    check(refused and not resets and
          all(e["code"] == "limit" and ("out of file descriptors" in e["message"] or
                                        "Too many open files" in e["message"])
              for e in refused),
          "%d of %d connections refused with an error saying profd is out of file "
          "descriptors (%r), none closed without a word (%d)"
          % (len(refused), len(socks), refused[0] if refused else None, resets))
    c0 = cpu_s(d.pid)
    time.sleep(1.0)
    used = cpu_s(d.pid) - c0
    check_timing(used < 0.5, "the daemon does not spin meanwhile (%.2f s of CPU in 1 s)" % used)
    # Exactly one descriptor free (counted below the limit: valgrind keeps its own above
    # it): a request is read and answered; the dead symbolizer's socket is closed when the
    # slice finds it gone, and a new one started, but then no file can be opened.
    limit = dd["limit"]
    def free_fds():
        return limit - sum(1 for f in os.listdir("/proc/%d/fd" % d.pid) if int(f) < limit)
    full = nfds(d.pid)
    for i in range(20):
        n = free_fds()
        if n == 1:
            break
        if n == 0:
            served.pop().close()
            wait_until(lambda: free_fds() > 0, 10, "profd to close that client")
        else:  # a client served takes one more
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            s.sendall(struct.pack(">I", len(hello)) + hello)
            s.recv(4096)
            served.append(s)
            socks.append(s)
    check(free_fds() == 1, "(set-up) exactly one descriptor free in profd")
    r = c.call({"cmd": "slice", "pid": small.pid, "last_ns": 10**9})
    res = r.get("result") or {}
    log("slice with one descriptor free: %s" % ({k: v for k, v in res.items() if k != "data"}
                                                or err(r)))
    # The symbolizer killed above is found gone, its socket closed, and another started in
    # the descriptors that frees: the slice comes back symbolized. (Under valgrind, whose
    # descriptors are its own, the new helper may not start: the reply then says why.)
    symbolized = ";work_alpha;spin" in res.get("data", "") and not res.get("symbols_error")
    said = "symbolizer" in res.get("symbols_error", "")
    check(res.get("samples", 0) > 0 and
          (symbolized or (said and os.environ.get("PROFD_WRAPPER"))),
          "a slice then comes back, symbolized by a symbolizer started again in the "
          "descriptors of the dead one (%r)" % res.get("symbols_error"))
    r = c.call({"cmd": "attach", "pid": third.pid})
    msg = err(r).get("message", "")
    check(err(r).get("code") in ("limit", "attach_failed") and
          ("out of file descriptors" in msg or "Too many open files" in msg),
          "an attach then fails, naming the shortage (%r)" % err(r))
    wait_until(lambda: all(v == 0 for v in tracer_pids(third.pid).values()), 10,
               "profd to release what it seized of it")
    for s in socks:
        s.close()
    wait_until(lambda: nfds(d.pid) < full - len(served) + 4, 10,
               "the clients' descriptors to be closed")
    r = RawClient(d.socket).call({"cmd": "attach", "pid": third.pid})
    check("result" in r, "once the clients are gone an attach works again (%r)" % err(r))
    r = c.call({"cmd": "slice", "pid": small.pid, "last_ns": 10**9})
    check(";work_alpha;spin" in r.get("result", {}).get("data", "")
          and not r["result"].get("symbols_error"),
          "... and so do symbols (%r)" % r.get("result", {}).get("symbols_error"))
    prof = d.ctl("slice", big.pid, "--last", 3).stdout
    names = {line.split(";")[0] for line in prof.splitlines() if line}
    idle = {n for n in names if n.split("-")[0] in ("cond", "sleep", "pipe", "epoll")}
    check(len(idle) >= 95, "threads with and without their files are sampled: %d of 100 idle "
          "threads in a slice" % len(idle))
    c.close()
    big.proc.wait(timeout=60 * SLOW)
    out = big.proc.stdout.read()
    check("report eintr=0" in out, "the threads sampled by stopping saw no EINTR (%s)"
          % out.strip())


# ---- memory ----
# A process of our own with transactions of the Python client (client/python): one is
# started before profd's memory fills and finished after, with a look-back over all of it.
TXN = r'''
import sys
sys.path.insert(0, sys.argv[2])
import profd
p = profd.Profd(sys.argv[1], timeout=10, finish_timeout=60)
print("ready", flush=True)
txn = None
for line in sys.stdin:
    if line.startswith("start"):
        txn = p.start("resources")
        print("started", flush=True)
    elif line.startswith("finish"):
        try:
            prof = p.finish(txn, lookback_s=3600)
            print("ok", len(prof), flush=True)
        except profd.ProfdError as e:
            print("err", e.code, e, flush=True)
'''
MAX = 2 << 20


def parts_sum(m):
    return sum(m[k] for k in ("samples_bytes", "targets_bytes", "slices_bytes", "clients_bytes",
                              "transactions_bytes", "symbolizer_bytes"))


with Daemon("--max-memory", "2M") as d, Program("busy", 1) as other:
    app = subprocess.Popen([sys.executable, "-c", TXN, d.socket,
                            os.path.join(SOURCE, "client", "python")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        check(app.stdout.readline().strip() == "ready", "(set-up) a process with transactions")
        app.stdin.write("start\n")
        check(app.stdout.readline().strip() == "started", "its transaction started")
        wait_until(lambda: any(t["pid"] == app.pid for t in d.status()["targets"]), 10,
                   "profd to attach it for its transaction")
        with Program("idlers", 60, 200) as big:
            c = RawClient(d.socket)
            r = c.call({"cmd": "attach", "pid": big.pid, "hz": 199})
            check("result" in r, "a process of 201 threads attaches at 199 Hz (%r)" % err(r))
            m = d.status()["daemon"]["memory"]
            check(m["max_bytes"] == MAX and m["samples_grow_below_bytes"] == MAX // 4 * 3
                  and m["total_bytes"] == parts_sum(m),
                  "status gives max_memory, the total and its parts (%r)" % m)
            wait_until(lambda: d.target_status(big.pid)["dropped_max_memory"] > 0, 60,
                       "the samples to reach their share of max_memory")
            st, m = d.target_status(big.pid), d.status()["daemon"]["memory"]
            log("memory: %s" % m)
            check(m["samples_growth_refused"] > 0 and m["total_bytes"] <= MAX,
                  "the samples stop growing at three quarters of max_memory (samples %d, total "
                  "%d of %d bytes), the oldest overwritten (%d so far)"
                  % (m["samples_bytes"], m["total_bytes"], MAX, st["dropped_max_memory"]))
            time.sleep(1.0)
            st2, m = d.target_status(big.pid), d.status()["daemon"]["memory"]
            check(st2["samples"] > st["samples"] and m["total_bytes"] <= MAX,
                  "sampling goes on within the bound (%d new samples; total %d of %d bytes)"
                  % (st2["samples"] - st["samples"], m["total_bytes"], MAX))
            r = c.call({"cmd": "attach", "pid": other.pid})
            check(err(r).get("code") == "limit" and "max_memory" in err(r).get("message", ""),
                  "another attach is refused, naming max_memory (%r)" % err(r).get("message"))
            r = c.call({"cmd": "slice", "pid": big.pid, "last_ns": 60 * 10**9, "format": "sentry"})
            check(err(r).get("code") == "limit" and "max_memory" in err(r).get("message", ""),
                  "a slice of everything, as a Sentry profile, is refused naming max_memory (%r)"
                  % err(r).get("message"))
            r = c.call({"cmd": "slice", "pid": big.pid, "last_ns": 50 * 10**6})
            # (Built, not refused: on a busy machine 50 ms may hold no sample.)
            check("result" in r, "a slice of the last 50 ms is built (%r)"
                  % (err(r) or r["result"]["samples"]))
            # A client that never reads: its replies pile up in profd (up to 1 MiB before
            # it stops reading it), and count.
            base_clients = d.status()["daemon"]["memory"]["clients_bytes"]
            hog = RawClient(d.socket)
            hog.s.setblocking(False)
            body = json.dumps({"cmd": "status"}).encode()
            frame = struct.pack(">I", len(body)) + body
            sent = 0
            t0 = time.monotonic()
            # (Not for long: profd drops a client that leaves its output unread for 30 s.)
            while time.monotonic() - t0 < 5 and sent < 3000:
                try:
                    hog.s.send(frame)
                    sent += 1
                except BlockingIOError:
                    time.sleep(0.01)
            def clients_heavy():
                m = d.status()["daemon"]["memory"]
                # Counted, and taking the total past max_memory (where profd stops reading
                # such a client depends on how far the samples have grown by then).
                return m if m["clients_bytes"] > MAX // 8 and m["total_bytes"] > MAX else None
            try:
                m = wait_until(clients_heavy, 20, "the unread replies to be counted")
            except SystemExit:
                log("memory then: %s; sent %d" % (d.status()["daemon"]["memory"], sent))
                raise
            log("memory with a client that does not read: %s" % m)
            r = c.call({"cmd": "slice", "pid": big.pid, "last_ns": 50 * 10**6})
            check(err(r).get("code") == "limit" and "max_memory" in err(r).get("message", ""),
                  "with those counted, even that small slice is refused (%r)"
                  % err(r).get("message"))
            app.stdin.write("finish\n")
            out = app.stdout.readline().strip()
            check(out.startswith("err limit") and "max_memory" in out,
                  "and so is the transaction's profile, naming max_memory (%s)" % out)
            hog.close()
            # (All of them: a quarter MiB still held would leave a profile of the last
            # transaction no room beside samples grown to three quarters of max_memory.)
            wait_until(lambda: d.status()["daemon"]["memory"]["clients_bytes"] <=
                       base_clients + (16 << 10), 20, "the client's buffers to be freed")
            r = c.call({"cmd": "slice", "pid": big.pid, "last_ns": 50 * 10**6})
            check("result" in r, "once it has gone, small slices are built again (%r)" % err(r))
            # The samples of 201 threads still hold three quarters of max_memory, beside
            # which a transaction's profile of a few hundred samples (0.3 MiB) may not fit:
            # detached, they leave room.
            r = c.call({"cmd": "detach", "pid": big.pid})
            check("result" in r, "the 201-thread process detached (%r)" % err(r))
            app.stdin.write("start\n")
            app.stdout.readline()
            time.sleep(0.1)
            app.stdin.write("finish\n")
            out = app.stdout.readline().strip()
            check(out.startswith("ok "), "and transactions' profiles too (%s)" % out)
            c.close()
        check(d.proc.poll() is None, "profd ran through it all")
    finally:
        app.kill()
        app.wait()
