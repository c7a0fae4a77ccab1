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
          and dd["limit"] == NOFILE and dd["threads"] <= NOFILE - dd["reserved"]
          and dd["threads_refused"] >= st["threads_without_files"],
          "threads beyond the budget go without their /proc files (%d of 101; %d descriptors "
          "for threads, %d kept for the rest)" % (st["threads_without_files"], dd["threads"],
                                                  dd["reserved"]))
    check("goes without its /proc files" in d.log(), "... and the log says why")
    check("result" in c.call({"cmd": "attach", "pid": small.pid}),
          "another process attaches: the reserve is left for it")

    # Clients until the descriptors are used up (no slice yet: the symbolizer that builds
    # them is started by the first one).
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
    for s in socks:
        hdr = s.recv(4)
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
    check(refused and all(e["code"] == "limit" and "out of file descriptors" in e["message"]
                          for e in refused),
          "%d of %d connections refused with an error saying profd is out of file "
          "descriptors (%r)" % (len(refused), len(socks), refused[0] if refused else None))
    c0 = cpu_s(d.pid)
    time.sleep(1.0)
    used = cpu_s(d.pid) - c0
    check_timing(used < 0.5, "the daemon does not spin meanwhile (%.2f s of CPU in 1 s)" % used)
    r = c.call({"cmd": "attach", "pid": third.pid})
    check(err(r).get("code") == "limit" and "out of file descriptors" in err(r).get("message", ""),
          "an attach meanwhile fails as a limit naming the shortage (%r)" % err(r))
    # One descriptor free: a request is read and answered, but the symbolizer's socketpair
    # (two) cannot be made.
    full = nfds(d.pid)
    served.pop().close()
    wait_until(lambda: nfds(d.pid) < full, 10, "profd to close that client")
    r = c.call({"cmd": "slice", "pid": small.pid, "last_ns": 10**9})
    res = r.get("result") or {}
    log("slice with one descriptor free: %s" % ({k: v for k, v in res.items() if k != "data"}
                                                or err(r)))
    check(res.get("samples", 0) > 0 and "socketpair: Too many open files"
          in res.get("symbols_error", ""),
          "a slice then comes back, its frames unsymbolized, saying why (%r)"
          % res.get("symbols_error"))
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
