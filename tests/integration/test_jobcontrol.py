"""Job control works as without profd: SIGSTOP and SIGTSTP (Ctrl-Z) stop every thread and
keep it stopped while profd samples at 999 Hz, and the parent (the shell, here this test)
is told with waitpid(WUNTRACED); SIGCONT resumes it and the parent sees WCONTINUED; no system
call fails beyond what the stop itself causes natively (epoll_wait and timed accept report
EINTR after a stop/continue even without a tracer; select and read restart).

/proc shows a traced thread in a group-stop as 't' (tracing stop) rather than 'T': that is
ptrace's doing (gdb and strace show the same), so "stopped" here means 'T' or 't' and no CPU
time consumed."""
from harness import *


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    return sum(int(x) for x in s[s.rindex(")") + 2:].split()[11:13])


def all_stopped(pid):
    st = thread_states(pid)
    return st if st and all(s in "Tt" for s in st.values()) else None


def none_stopped(pid):
    st = thread_states(pid)
    return st if st and all(s not in "Tt" for s in st.values()) else None


def parent_sees(pid, flag, pred):
    def poll():
        wpid, status = os.waitpid(pid, flag | os.WNOHANG)
        return wpid == pid and pred(status)
    return poll


def cycle(d, p, stop_sig, label, n):
    """The n-th stop and continue of p."""
    os.kill(p.pid, stop_sig)
    wait_until(parent_sees(p.pid, os.WUNTRACED, os.WIFSTOPPED), 5,
               "%s: the parent to see the stop (waitpid WUNTRACED)" % label)
    log("ok: %s: the parent saw the %s stop, as a shell does" % (label, stop_sig.name))
    wait_until(lambda: all_stopped(p.pid), 5, "%s: every thread stopped by %s" % (label, stop_sig.name))
    # It must stay stopped (the computing thread uses no CPU) while profd keeps sampling.
    c0 = cpu_ticks(p.pid)
    for _ in range(10):
        time.sleep(0.05)
        st = thread_states(p.pid)
        if not all(s in "Tt" for s in st.values()):
            fail("%s: a thread left the stop on its own: %s" % (label, st))
    check(cpu_ticks(p.pid) == c0, "%s: all %d threads stay stopped for 0.5 s (no CPU used)"
          % (label, len(st)))
    os.kill(p.pid, signal.SIGCONT)
    wait_until(parent_sees(p.pid, os.WCONTINUED, os.WIFCONTINUED), 5,
               "%s: the parent to see WCONTINUED" % label)
    wait_until(lambda: none_stopped(p.pid), 5, "%s: every thread to resume after SIGCONT" % label)
    log("ok: %s: SIGCONT resumed every thread" % label)
    # Let the woken calls return before the counters are read: the thread blocked for good
    # in epoll_wait(-1) returns EINTR once per stop and continue (natively as with profd),
    # when it gets a CPU again.
    return wait_until(lambda: (lambda r: r if r["eintr_epollinf"] >= n else None)(p.report()),
                      10, "%s: the epoll_wait(-1) thread's EINTR of stop %d" % (label, n),
                      interval=0.05)


def run(with_profd):
    label = "with profd" if with_profd else "without profd"
    d = Daemon() if with_profd else None
    try:
        with Program("blocker", own_pgrp=True) as p:
            if d:
                d.ctl("attach", p.pid, "--hz", 999)
            time.sleep(0.3)
            cycle(d, p, signal.SIGSTOP, label, 1)
            rep = cycle(d, p, signal.SIGTSTP, label, 2)
            log("%s: %s" % (label, rep))
            check(rep["eintr_select"] == 0 and rep["eintr_read"] == 0,
                  "%s: select and read restarted after the stops" % label)
            for k in ("eintr_epoll", "eintr_accept"):
                check(rep[k] <= 2, "%s: %s = %d: at most one per stop, as natively" % (label, k, rep[k]))
            # Blocked for good in epoll_wait(-1): each stop/continue gives it exactly one
            # EINTR natively; profd must neither add nor hide one.
            check(rep["eintr_epollinf"] == 2, "%s: eintr_epollinf = %d: one per stop, exactly as "
                  "natively" % (label, rep["eintr_epollinf"]))
            for k in ("early_epoll", "early_select", "early_accept"):
                check(rep[k] == 0, "%s: %s = 0" % (label, k))
            if d:
                st = d.target_status(p.pid)
                check(st["group_stops"] >= 2 * len(p.tids),
                      "profd saw every thread's group-stop (%d)" % st["group_stops"])
                check(st["state"] == "attached", "profd still attached after the stops")
                # Sampling went on during and after the stops.
                d.wait_samples(p.pid, st["samples"] + 1, 5)
                log("ok: sampling continues after SIGCONT")
            p.send("exit")
            p.proc.wait(timeout=10)
            check(p.proc.returncode == 0, "%s: the program exits normally" % label)
    finally:
        if d:
            d.stop()


run(False)
run(True)
