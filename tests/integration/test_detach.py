"""Detaching leaves the target exactly as it was: `profctl detach`, SIGTERM and SIGINT of the
daemon release every thread (TracerPid 0, none left in a tracing stop) with no signal lost;
a process stopped by SIGSTOP stays stopped after detach and SIGCONT resumes it; after
SIGKILL of the daemon the targets keep running."""
import threading
from harness import *


def untraced_and_running(pid):
    tr = tracer_pids(pid)
    st = thread_states(pid)
    if tr and all(v == 0 for v in tr.values()) and all(s not in "tT" for s in st.values()):
        return True
    return None


class Pelter:
    """Sends real-time signals to a process from a thread; counts what it sent."""

    def __init__(self, pid):
        self.pid, self.sent, self.stop = pid, 0, False
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        while not self.stop:
            os.kill(self.pid, signal.SIGRTMIN + self.sent % 8)
            self.sent += 1
            time.sleep(0.001)

    def finish(self):
        self.stop = True
        self.t.join()
        return self.sent


def handled_all(p, sent):
    return wait_until(lambda: (lambda r: r if r["rt_handled"] == sent else None)(p.report()),
                      10, "all %d signals to be handled" % sent)


# 1. profctl detach under a stream of signals.
with Daemon() as d, Program("blocker") as p:
    d.ctl("attach", p.pid, "--hz", 999)
    pel = Pelter(p.pid)
    time.sleep(0.5)
    d.ctl("detach", p.pid)
    time.sleep(0.2)
    sent = pel.finish()
    wait_until(lambda: untraced_and_running(p.pid), 5, "every thread untraced and running")
    log("ok: detach: TracerPid 0 and no thread stopped")
    rep = handled_all(p, sent)
    check(all(rep[k] == 0 for k in rep if k.startswith("eintr")), "detach: no EINTR (%s)" % rep)
    log("ok: detach: all %d signals sent across the detach were handled" % sent)
    r = d.ctl("detach", p.pid, check_rc=False)
    check(r.returncode == 6 and "not attached" in r.stderr, "detach again: 'not attached' (exit 6)")
    check(d.status()["daemon"]["targets"] == 0, "the daemon forgot the process")

# 2. Detach while the process is stopped by SIGSTOP: it stays stopped; SIGCONT resumes it.
with Daemon() as d, Program("blocker", own_pgrp=True) as p:
    d.ctl("attach", p.pid, "--hz", 999)
    time.sleep(0.2)
    os.kill(p.pid, signal.SIGSTOP)
    wait_until(lambda: all(s in "Tt" for s in thread_states(p.pid).values()), 5, "group stop")
    d.ctl("detach", p.pid)
    time.sleep(0.3)
    st = thread_states(p.pid)
    check(all(s == "T" for s in st.values()) and all(v == 0 for v in tracer_pids(p.pid).values()),
          "detached while stopped: still stopped (T), untraced")
    os.kill(p.pid, signal.SIGCONT)
    wait_until(lambda: untraced_and_running(p.pid), 5, "SIGCONT to resume it")
    check(p.report()["eintr_select"] == 0, "resumed and responsive")

# 3. Daemon SIGTERM / SIGINT with attached processes, under a stream of signals.
for sig in (signal.SIGTERM, signal.SIGINT):
    d = Daemon()
    with Program("blocker") as p, Program("busy", 2) as b:
        d.ctl("attach", p.pid, "--hz", 999)
        d.ctl("attach", b.pid, "--hz", 999)
        pel = Pelter(p.pid)
        d.wait_samples(b.pid, 300)  # sampling busy's running threads when it ends
        time.sleep(0.5)
        rc = d.stop(sig)
        time.sleep(0.1)
        sent = pel.finish()
        check(rc == 0, "daemon exits 0 on %s" % sig.name)
        for q in (p, b):
            wait_until(lambda: untraced_and_running(q.pid), 5, "process released")
        log("ok: %s: both processes untraced and running" % sig.name)
        handled_all(p, sent)
        log("ok: %s: all %d signals sent across the daemon's exit were handled" % (sig.name, sent))
        check("detached from %d" % p.pid in d.log(), "%s: the log says it detached" % sig.name)

# 4. Daemon SIGKILL: the processes run on.
d = Daemon()
with Program("blocker") as p, Program("busy", 2) as b:
    d.ctl("attach", p.pid, "--hz", 999)
    d.ctl("attach", b.pid, "--hz", 999)
    d.wait_samples(b.pid, 300)  # sampling busy's running threads when it is killed
    time.sleep(0.5)
    d.stop(signal.SIGKILL)
    for q in (p, b):
        wait_until(lambda: untraced_and_running(q.pid), 5, "process released by the kernel")
    log("ok: SIGKILL: both processes untraced and running")
    before = p.report()
    os.kill(p.pid, signal.SIGRTMIN)
    wait_until(lambda: p.report()["rt_handled"] == before["rt_handled"] + 1, 5, "a new signal")
    check(all(before[k] == 0 for k in before if k.startswith("eintr")),
          "SIGKILL: no EINTR before or after (%s)" % before)
    # busy is still computing: its CPU time grows.
    def cpu(pid):
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return sum(int(x) for x in s[s.rindex(")") + 2:].split()[11:13])
    c0 = cpu(b.pid)
    wait_until(lambda: cpu(b.pid) > c0, 10, "busy's CPU time to grow")
    log("ok: SIGKILL: busy keeps computing")
