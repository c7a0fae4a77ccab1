"""Who may profile what. The daemon runs as root and anyone may connect to its socket; every
request naming a process is checked against the caller's SO_PEERCRED credentials with the
kernel's ptrace access rule (ptrace(2), "Ptrace access mode checking"): same uid and gid as
the target's real, effective and saved ids, a dumpable target, no capability the caller lacks,
or else a caller with CAP_SYS_PTRACE.

Checked here, as nobody (uid 65534) against the real daemon and the real profctl:
- the socket is 0666 and the directories profd creates for it are 0755 (whatever the umask),
  so that users can reach it at all;
- nobody may attach, slice, list, status and detach its own process;
- nobody is refused (exit 5, one line naming the uids) attach, slice, status and detach of a
  root-owned process, and list/status do not show root's targets; a refused attach leaves
  the process untraced and a refused detach leaves root's target attached;
- a process of nobody's uid but another gid, one that made itself non-dumpable
  (prctl(PR_SET_DUMPABLE, 0)) and one holding capabilities are refused with a reason;
- at the protocol level a connection from uid 65534 gets permission_denied;
- a uid-0 caller without CAP_SYS_PTRACE is held to the same rule as anyone else (the kernel
  would refuse it).
Failures found in the daemon are collected and reported at the end, so that one bug does not
hide the others.
"""
import atexit
import ctypes
import shutil
from harness import *

NOBODY = 65534
PR_SET_DUMPABLE, PR_GET_DUMPABLE, PR_SET_KEEPCAPS = 4, 3, 8
PTRACE_SEIZE = 0x4206
problems = []


def expect(cond, msg):
    """Like check, but carry on: the test fails at the end with every problem listed."""
    if cond:
        log("ok:", msg)
    else:
        log("FAIL:", msg)
        problems.append(msg)


def one_line(text):
    return text.count("\n") == 1 and text.endswith("\n")


def traced(pid):
    return any(v != 0 for v in tracer_pids(pid).values())


class PyTarget:
    """A python process started by this test as the target: `code` runs first, then it
    prints "ready" and sleeps."""

    def __init__(self, code, preexec_fn=None):
        script = "import ctypes, os, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\n" + \
            code + "\nprint('ready', flush=True)\ntime.sleep(600)\n"
        self.proc = subprocess.Popen([PYTHON, "-c", script], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            self.proc.wait()
            fail("python target did not start (%r)" % line)

    @property
    def pid(self):
        return self.proc.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


def in_child(fn):
    """Run fn() in a forked child (which may change its credentials); return what it returns
    (JSON-serializable), or {"exception": text}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                out = fn()
            except BaseException as e:  # report everything to the parent
                out = {"exception": "%s: %s" % (type(e).__name__, e)}
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    if not data:
        fail("child produced nothing")
    return json.loads(data)


def capset_zero():
    """Drop every capability (effective, permitted, inheritable) of the calling process."""
    libc = ctypes.CDLL(None, use_errno=True)
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(hdr, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def kernel_ptrace_answer(pid):
    """Ask the kernel whether the calling process may PTRACE_SEIZE pid (then let go)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_SEIZE, pid, None, None) != 0:
        return os.strerror(ctypes.get_errno())
    return "allowed"  # the child exits right after: the kernel detaches it


def ctl_as(sock, *args, user=None, env=None):
    cmd = [PROFCTL, "--socket", sock] + [str(a) for a in args]
    kw = {"preexec_fn": (lambda: drop_to(user))} if user is not None else {}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60 * SLOW, env=env, **kw)


def nobody_can_run(path):
    """Whether uid 65534 may execute path (every directory on the way included)."""
    pid = os.fork()
    if pid == 0:
        try:
            drop_to(NOBODY)
            os._exit(0 if os.access(path, os.X_OK) else 1)
        finally:
            os._exit(2)
    return os.waitpid(pid, 0)[1] == 0


# The build tree must be reachable by nobody (a build directory under /root is not).
for path in (PROFCTL, os.path.join(PROGRAMS, "busy")):
    if not nobody_can_run(path):
        skip("uid %d cannot run %s: build in a directory every user can reach" % (NOBODY, path))
# A python every user may run: the one running this test may live in /root (pyenv).
PYTHON = next((p for p in ("/usr/bin/python3", sys.executable) if nobody_can_run(p)), None)
if PYTHON is None:
    skip("no python3 that uid %d may run" % NOBODY)

# 1. The socket and the directories the daemon creates for it. The harness creates its
#    directory itself (0755), so start profd on a path whose directories do not exist yet,
#    once with the usual umask and once with a strict one (as a hardened root shell or a
#    unit with UMask=0077 has): the socket is chmod'ed 0666, the directories must be
#    reachable too, or users cannot connect.
base = tempfile.mkdtemp(prefix="profd-perm-")
atexit.register(shutil.rmtree, base, True)
os.chmod(base, 0o755)
for umask in (0o022, 0o077):
    sock = os.path.join(base, "u%03o" % umask, "run", "profd.sock")
    logf = open(os.path.join(base, "profd-%03o.log" % umask), "w")
    proc = subprocess.Popen([PROFD, "--socket", sock], stdout=logf, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: os.umask(umask))
    try:
        wait_until(lambda: listening(sock) or proc.poll() is not None, 30,
                   "profd to listen")
        check(proc.poll() is None, "umask %03o: profd listens on a path in new directories" % umask)
        modes = [os.stat(p).st_mode & 0o777 for p in (os.path.dirname(os.path.dirname(sock)),
                                                      os.path.dirname(sock))]
        check(os.stat(sock).st_mode & 0o777 == 0o666, "umask %03o: the socket is 0666" % umask)
        expect(modes == [0o755, 0o755], "umask %03o: the directories profd created are 0755 "
               "(they are %s)" % (umask, " ".join("%o" % m for m in modes)))
        r = ctl_as(sock, "list", user=NOBODY)
        expect(r.returncode == 0, "umask %03o: nobody can connect and list (%d: %s)"
               % (umask, r.returncode, r.stderr.strip()))
    finally:
        proc.terminate()
        proc.wait(timeout=30 * SLOW)
        logf.close()

with Daemon() as d, Program("busy", 1, user=NOBODY) as mine, Program("busy", 1) as roots, \
        Program("busy", 1) as other:
    check(os.stat(d.socket).st_mode & 0o777 == 0o666, "the harness daemon's socket is 0666")

    # 2. nobody on its own process: everything works.
    d.ctl("attach", roots.pid)
    r = d.ctl("attach", mine.pid, "--hz", 199, user=NOBODY, check_rc=False)
    check(r.returncode == 0 and ("attached to %d" % mine.pid) in r.stdout,
          "nobody attaches its own process (%d: %s)" % (r.returncode, r.stderr.strip()))
    d.wait_samples(mine.pid, 20)
    r = d.ctl("slice", mine.pid, "--last", "10", user=NOBODY, check_rc=False)
    counts = parse_collapsed(r.stdout) if r.returncode == 0 else {}
    check(r.returncode == 0 and sum(counts.values()) > 0,
          "nobody slices its own process (%d samples)" % sum(counts.values()))
    r = d.ctl("status", mine.pid, "--json", user=NOBODY, check_rc=False)
    check(r.returncode == 0 and [t["pid"] for t in json.loads(r.stdout)["targets"]] == [mine.pid],
          "nobody's status of its own process shows it")

    # 3. nobody on root's processes: refused, with exit 5 and one line naming both uids.
    r = d.ctl("attach", other.pid, user=NOBODY, check_rc=False)
    check(r.returncode == 5, "nobody's attach of a root process: exit 5 (got %d)" % r.returncode)
    check(one_line(r.stderr) and r.stdout == "", "  one line on stderr: %r" % r.stderr)
    check("uid 0/0/0" in r.stderr and "uid 65534" in r.stderr and "permission denied" in r.stderr,
          "  the message names the process's uids and the caller's")
    check(not traced(other.pid), "  the refused process was not attached, not even briefly")
    for args in (["slice", roots.pid], ["slice", roots.pid, "--format", "sentry"],
                 ["status", roots.pid], ["detach", roots.pid]):
        r = d.ctl(*args, user=NOBODY, check_rc=False)
        check(r.returncode == 5 and one_line(r.stderr) and "uid 0/0/0" in r.stderr
              and r.stdout == "",
              "nobody's %s of root's attached process: exit 5, one line naming the uids "
              "(%d: %r)" % (" ".join(map(str, args)), r.returncode, r.stderr))
    check(traced(roots.pid) and d.target_status(roots.pid)["state"] == "attached",
          "root's target is still attached after nobody's refused detach")

    # list and status show nobody only its own target; root sees both.
    r = d.ctl("list", "--json", user=NOBODY)
    check([t["pid"] for t in json.loads(r.stdout)["targets"]] == [mine.pid],
          "nobody's list --json shows only nobody's target")
    r = d.ctl("list", user=NOBODY)
    check(str(mine.pid) in r.stdout and str(roots.pid) not in r.stdout,
          "nobody's plain list shows only nobody's target")
    r = d.ctl("status", "--json", user=NOBODY)
    check([t["pid"] for t in json.loads(r.stdout)["targets"]] == [mine.pid],
          "nobody's status --json lists only nobody's target")
    check(sorted(t["pid"] for t in d.status()["targets"]) == sorted([mine.pid, roots.pid]),
          "root's status shows both targets")

    # 4. The rest of the rule, on python targets that set themselves up.
    def as_nobody_gid_100():
        os.setgroups([])
        os.setgid(100)
        os.setuid(NOBODY)
    with PyTarget("", preexec_fn=as_nobody_gid_100) as t:
        r = d.ctl("attach", t.pid, user=NOBODY, check_rc=False)
        check(r.returncode == 5 and "gid 100/100/100" in r.stderr and one_line(r.stderr),
              "nobody's attach of a process of uid 65534 but gid 100: exit 5 naming the gids "
              "(%d: %r)" % (r.returncode, r.stderr))

    with PyTarget("assert libc.prctl(%d, 0, 0, 0, 0) == 0\nassert libc.prctl(%d, 0, 0, 0, 0) == 0"
                  % (PR_SET_DUMPABLE, PR_GET_DUMPABLE),
                  preexec_fn=lambda: drop_to(NOBODY)) as t:
        log("kernel: nobody's own PTRACE_SEIZE of its non-dumpable process: %s"
            % in_child(lambda: (drop_to(NOBODY), kernel_ptrace_answer(t.pid))[1]))
        r = d.ctl("attach", t.pid, user=NOBODY, check_rc=False)
        expect(r.returncode == 5 and "dumpable" in r.stderr and one_line(r.stderr),
               "nobody's attach of its own non-dumpable process: exit 5 saying it is not "
               "dumpable (%d: %r)" % (r.returncode, r.stderr))
        expect(not traced(t.pid), "  the non-dumpable process is not traced")
        if traced(t.pid):
            d.ctl("detach", t.pid)

    # Root keeps the capabilities across setuid (PR_SET_KEEPCAPS) and makes itself dumpable
    # again (setuid cleared it): uid and gid are nobody's, CapPrm is full.
    with PyTarget("assert libc.prctl(%d, 1, 0, 0, 0) == 0\nos.setgroups([])\nos.setgid(%d)\n"
                  "os.setuid(%d)\nassert libc.prctl(%d, 1, 0, 0, 0) == 0"
                  % (PR_SET_KEEPCAPS, NOBODY, NOBODY, PR_SET_DUMPABLE)) as t:
        with open("/proc/%d/status" % t.pid) as f:
            st = f.read()
        check("\nUid:\t65534\t65534\t65534" in st and "\nCapPrm:\t0000000000000000" not in st,
              "(set-up) a process of uid 65534 that holds capabilities")
        r = d.ctl("attach", t.pid, user=NOBODY, check_rc=False)
        check(r.returncode == 5 and "capabilities" in r.stderr and one_line(r.stderr),
              "nobody's attach of a process holding capabilities: exit 5 saying so (%d: %r)"
              % (r.returncode, r.stderr))
        check(not traced(t.pid), "  the process holding capabilities is not traced")

    # The same process in 700 supplementary groups: its Groups line (8 bytes a group here)
    # pushes CapPrm and everything after it past the first 4 KiB of /proc/PID/status. A
    # reader that stops there saw no CapPrm, took it for 0, and let nobody attach a process
    # holding every capability (the rule failed open).
    many = list(range(1000000, 1000700))
    with PyTarget("assert libc.prctl(%d, 1, 0, 0, 0) == 0\nos.setgroups(%r)\nos.setgid(%d)\n"
                  "os.setuid(%d)\nassert libc.prctl(%d, 1, 0, 0, 0) == 0"
                  % (PR_SET_KEEPCAPS, many, NOBODY, NOBODY, PR_SET_DUMPABLE)) as t:
        with open("/proc/%d/status" % t.pid) as f:
            st = f.read()
        cap_at = st.find("\nCapPrm:\t")
        check("\nUid:\t65534\t65534\t65534" in st and cap_at > 4096
              and "\nCapPrm:\t0000000000000000" not in st and len(os.getgrouplist("root", 0)) < 700,
              "(set-up) a process of uid 65534 in %d groups that holds capabilities, CapPrm at "
              "byte %d of its status" % (len(many), cap_at))
        r = d.ctl("attach", t.pid, user=NOBODY, check_rc=False)
        expect(r.returncode == 5 and "capabilities" in r.stderr and one_line(r.stderr),
               "nobody's attach of a process in 700 groups holding capabilities: exit 5 saying "
               "so (%d: %r)" % (r.returncode, r.stderr))
        expect(not traced(t.pid), "  the process in 700 groups is not traced")
        if traced(t.pid):
            d.ctl("detach", t.pid)

    # 5. The protocol itself, from a connection whose peer is uid 65534.
    def raw_as_nobody():
        drop_to(NOBODY)
        c = RawClient(d.socket)
        out = {"attach": c.call({"cmd": "attach", "pid": other.pid, "id": 1}),
               "slice": c.call({"cmd": "slice", "pid": roots.pid, "id": 2}),
               "detach": c.call({"cmd": "detach", "pid": roots.pid, "id": 3}),
               "status": c.call({"cmd": "status", "pid": roots.pid, "id": 4}),
               "list": c.call({"cmd": "list", "id": 5}),
               "own": c.call({"cmd": "slice", "pid": mine.pid, "last_ns": 10**9, "id": 6})}
        c.close()
        return out
    out = in_child(raw_as_nobody)
    check("exception" not in out, "uid 65534 connects and shakes hands (%s)" % out.get("exception"))
    for k in ("attach", "slice", "detach", "status"):
        e = out[k].get("error", {})
        check(e.get("code") == "permission_denied" and "uid 0/0/0" in e.get("message", ""),
              "protocol: %s of a root process from uid 65534 -> permission_denied (%r)" % (k, e))
    check([t["pid"] for t in out["list"]["result"]["targets"]] == [mine.pid],
          "protocol: list from uid 65534 shows only its own target")
    check(out["own"].get("result", {}).get("samples", 0) > 0,
          "protocol: slice of its own process from uid 65534 works")
    check(not traced(other.pid), "root's unattached process is still untraced")

    # 6. uid 0 is not a capability: a root process that dropped every capability may not
    #    ptrace other users' processes (the kernel checks CAP_SYS_PTRACE, not the uid), so
    #    profd must not do it on its behalf either.
    def root_without_caps():
        capset_zero()
        kernel = kernel_ptrace_answer(mine.pid)
        c = RawClient(d.socket)
        rep = c.call({"cmd": "slice", "pid": mine.pid, "last_ns": 10**9})
        att = c.call({"cmd": "attach", "pid": other.pid})
        c.close()
        with open("/proc/self/status") as f:
            capeff = f.read().split("CapEff:")[1].split()[0]
        return {"kernel": kernel, "slice": rep, "attach": att, "uid": os.getuid(),
                "capeff": capeff}
    out = in_child(root_without_caps)
    check("exception" not in out and out["uid"] == 0 and int(out["capeff"], 16) == 0,
          "(set-up) a uid-0 client without capabilities (%s)" % out.get("exception"))
    log("kernel: PTRACE_SEIZE of nobody's process by uid 0 without capabilities: %s"
        % out["kernel"])
    expect(out["slice"].get("error", {}).get("code") == "permission_denied",
           "uid 0 without CAP_SYS_PTRACE: slice of nobody's process -> permission_denied "
           "(got %s)" % (out["slice"].get("error") or "a profile"))
    expect(out["attach"].get("error", {}).get("code") == "permission_denied",
           "uid 0 without CAP_SYS_PTRACE: attach of another process -> permission_denied "
           "(got %s)" % (out["attach"].get("error") or "attached"))
    if traced(other.pid):
        d.ctl("detach", other.pid)

    # nobody in a user namespace of its own holds every capability there, over nothing of
    # ours: it must still be refused.
    def nobody_in_userns():
        import ctypes
        drop_to(NOBODY)
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER = 0x10000000
        if libc.unshare(CLONE_NEWUSER) != 0:
            return {"skip": os.strerror(ctypes.get_errno())}
        with open("/proc/self/status") as f:
            capeff = f.read().split("CapEff:")[1].split()[0]
        c = RawClient(d.socket)
        att = c.call({"cmd": "attach", "pid": other.pid})
        sl = c.call({"cmd": "slice", "pid": mine.pid, "last_ns": 10**9})
        c.close()
        return {"capeff": capeff, "attach": att, "slice": sl}
    out = in_child(nobody_in_userns)
    if "skip" in out:
        log("not checked: unprivileged user namespaces are not available here (%s)" % out["skip"])
    else:
        check("exception" not in out and int(out["capeff"], 16) != 0,
              "(set-up) nobody in its own user namespace shows capabilities (%s)"
              % (out.get("capeff") or out.get("exception")))
        expect(out["attach"].get("error", {}).get("code") == "permission_denied",
               "nobody with every capability of its own user namespace: attach of root's "
               "process -> permission_denied (got %s)" % (out["attach"].get("error") or "attached"))
        expect("result" in out["slice"], "... but its own process stays its own (slice works)")
        if traced(other.pid):
            d.ctl("detach", other.pid)

    d.ctl("detach", mine.pid, user=NOBODY)
    check(not traced(mine.pid), "nobody detaches its own process")

# 5. One user cannot take every slot: --max-targets-per-user counts a user's attaches (not
# root's, which holds CAP_SYS_PTRACE).
with Daemon("--max-targets-per-user", "1") as d, Program("busy", 1, user=NOBODY) as a, \
        Program("busy", 1, user=NOBODY) as b, Program("busy", 1) as roots:
    d.ctl("attach", a.pid, user=NOBODY)
    r = d.ctl("attach", b.pid, user=NOBODY, check_rc=False)
    expect(r.returncode != 0 and "per user" in r.stderr and one_line(r.stderr)
           and not traced(b.pid),
           "nobody's second attach with --max-targets-per-user 1 is refused in one line, "
           "naming the limit (%d: %r)" % (r.returncode, r.stderr))
    r = d.ctl("attach", roots.pid, check_rc=False)
    expect(r.returncode == 0, "root's attach is not counted against nobody's quota (%d: %r)"
           % (r.returncode, r.stderr))
    d.ctl("detach", a.pid, user=NOBODY)
    r = d.ctl("attach", b.pid, user=NOBODY, check_rc=False)
    expect(r.returncode == 0, "after nobody detaches one, its next attach succeeds (%d: %r)"
           % (r.returncode, r.stderr))

# 6. attach and txn_start admit a process profd does not follow yet by one rule (the access
# rule, then the limits, counted alike). With --max-targets-per-user 1, nobody's target that
# has exited but is still kept (its samples, its slot) fills nobody's quota for both: the
# attach of another process and the first transaction of another process are refused
# alike (txn_start used to count only running targets); once nobody detaches the exited
# one, each is admitted.
def txn_start_as_nobody(sock):
    def run():
        drop_to(NOBODY)
        # Changing uid cleared the dumpable flag (prctl(2)); an exec would have set it back.
        assert ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0
        c = RawClient(sock)
        rep = c.call({"cmd": "txn_start", "name": "quota", "id": 1})
        if "result" in rep:
            c.call({"cmd": "txn_discard", "txn_id": rep["result"]["txn_id"], "id": 2})
        c.close()
        return rep
    return in_child(run)


with Daemon("--max-targets-per-user", "1") as d, Program("busy", 1, user=NOBODY) as a, \
        Program("busy", 1, user=NOBODY) as b:
    d.ctl("attach", a.pid, user=NOBODY)
    a.kill()
    wait_until(lambda: (d.target_status(a.pid) or {}).get("state") == "exited", 10,
               "nobody's target to be listed as exited")
    r = d.ctl("attach", b.pid, user=NOBODY, check_rc=False)
    expect(r.returncode != 0 and "per user" in r.stderr and not traced(b.pid),
           "quota 1, nobody's exited target kept: nobody's attach of another process is "
           "refused (%d: %r)" % (r.returncode, r.stderr))
    out = txn_start_as_nobody(d.socket)
    e = out.get("error", {})
    expect(e.get("code") == "limit" and "per user" in e.get("message", ""),
           "... and so is the first transaction of another of nobody's processes (%r)" % out)
    d.ctl("detach", a.pid, user=NOBODY)
    r = d.ctl("attach", b.pid, user=NOBODY, check_rc=False)
    expect(r.returncode == 0, "the exited target detached: nobody's attach is admitted (%d: %r)"
           % (r.returncode, r.stderr))
    d.ctl("detach", b.pid, user=NOBODY)
    out = txn_start_as_nobody(d.socket)
    expect("result" in out, "... and so is nobody's transaction (%r)" % out)

if problems:
    fail("%d problem(s):\n  " % len(problems) + "\n  ".join(problems))
