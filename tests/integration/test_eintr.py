"""No system call of the target fails with EINTR because profd is attached or sampling.

blocker's threads wait in epoll_wait (with and without timeout), epoll_pwait, select, accept
with SO_RCVTIMEO and read; one thread computes and handles real-time signals. At 999 Hz, with
hundreds of queued real-time signals and SIGWINCH (ignored by default) aimed at each blocked
thread, every call must see zero EINTR, no timeout may expire early, and every signal must be
handled. Then bursts of 30 ignored signals at each waiting thread, 1, 2, 5 and 10 ms apart:

- sent to the thread (tgkill), only it can take them: zero EINTR, whatever else runs.
- sent to the process (kill(2) with the thread's id, as `kill -WINCH TID` does), any thread
  may take them, also one other than the thread the kernel woke for them, which then finds
  nothing and fails with EINTR (see "Stolen wake-ups" in daemon/target.c). A thread that
  profd holds in a ptrace stop while such a signal waits is kept from taking it; this is
  what bursts of SIGWINCH+SIGURG pairs exercise (the second arrives while the first is being
  delivered): without that, an EINTR in a third to a half of the bursts (18 to 48 of a
  program's 600 pairs). What profd cannot hold still takes some (a thread in the moments
  after profd resumes it, a thread ending its own epoll_pwait): none to 3 of 600 pairs on
  this machine, the more the busier it is, so up to 1% is allowed. The computing thread is
  idle for these bursts: a thread stopped for every sample takes such signals after each
  stop, which profd cannot prevent (about a quarter of bursts of single SIGWINCH still see
  an EINTR then, as many as without the guard).
- the case as reported: single SIGWINCHs sent to the process while the computing thread is
  busy. Sampled from the kernel's copies (the default where perf events are allowed) no
  thread is stopped for a sample: at most 1% as above (measured 0 or 1 of 600). On the
  forced ptrace path (the test registered again with PROFD_SAMPLER=ptrace) not checked.

The same with the program built with frame pointers (as Ubuntu and Fedora build)."""
import os
import re
from harness import *

RT = 400
WINCH_ROUNDS = 20
BURST = 30
CADENCES_MS = (1, 2, 5, 10)
# epoll_wait, epoll_pwait, select, read, accept with SO_RCVTIMEO.
BURST_TARGETS = ("epoll", "epollp", "select", "ctl", "accept")
# At most this many EINTR for a program's process-directed bursts: 2% of its pairs (above).
# (A signal sent to the process is taken by whichever thread the kernel picks: a few calls
# that failed unseen remain. Measured per program: 0-1 on a quiet machine, 0-5 with both
# CPUs kept busy by other processes, once 7 in CI on a host slowed by other machines; broken
# repairs give hundreds.)
SHARED_EINTR_MAX = BURST * len(CADENCES_MS) * len(BURST_TARGETS) * 2 // 100


def pending(pid, tid, sig):
    """Whether sig waits in thread tid's own queue (SigPnd)."""
    with open("/proc/%d/task/%d/status" % (pid, tid)) as f:
        for line in f:
            if line.startswith("SigPnd:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def eintr_delta(before, after):
    return {k: after[k] - before[k] for k in after
            if (k.startswith("eintr") or k.startswith("early")) and after[k] != before[k]}


def bursts(p, send):
    """A burst of BURST sends at each target thread and cadence; returns the EINTR/early
    counters that moved, summed, and per (target, cadence)."""
    total, where = {}, {}
    for cad in CADENCES_MS:
        for name in BURST_TARGETS:
            before = p.report()
            for _ in range(BURST):
                send(p.tids[name])
                time.sleep(cad / 1000.0)
            delta = eintr_delta(before, p.report())
            if delta:
                where["%s@%dms" % (name, cad)] = delta
            for k, v in delta.items():
                total[k] = total.get(k, 0) + v
    return total, where


def run(prog):
    log("== %s" % prog)
    with Daemon("-v") as d, Program(prog) as p:
        d.ctl("attach", p.pid, "--hz", 999)
        wait_until(lambda: d.target_status(p.pid)["samples"] > 0, 10, "sampling to start")
        blocked = [p.tids[n] for n in ("epoll", "epollinf", "epollp", "select", "accept", "ctl")]
        for i in range(RT):
            os.kill(p.pid, signal.SIGRTMIN + (i % 8))
            if i % (RT // WINCH_ROUNDS) == 0:
                for tid in blocked:
                    # A SIGWINCH sent while the last one still waits is merged with it (a
                    # signal below SIGRTMIN is pending once or not at all): wait until the
                    # thread took it, which a busy machine can delay.
                    wait_until(lambda: not pending(p.pid, tid, signal.SIGWINCH), 10,
                               "thread %d to take its SIGWINCH" % tid, interval=0.001)
                    tgkill(p.pid, tid, signal.SIGWINCH)
            time.sleep(0.003)
        rep = wait_until(lambda: (lambda r: r if r["rt_handled"] >= RT else None)(p.report()),
                         10, "all real-time signals to be handled")
        # Every signal reaches profd, in a signal-delivery-stop of the thread that takes it:
        # a thread woken for its SIGWINCH may still be waiting for a CPU (or for profd) on a
        # busy machine when the last real-time signal has been handled.
        expected = RT + WINCH_ROUNDS * len(blocked)
        st = wait_until(lambda: (lambda s: s if s["signals_forwarded"] >= expected else None)(
            d.target_status(p.pid)), 10, "profd to see every signal (%d)" % expected)
        prof = d.slice(p.pid, "--last", 1)
        log("counters: %s" % rep)
        log("status: stopped %d (%.2f/tick), restarted %d, forwarded %d" % (
            st["threads_stopped"], st["threads_stopped_per_tick"], st["syscalls_restarted"],
            st["signals_forwarded"]))
        for k in ("eintr_epoll", "eintr_epollinf", "eintr_epollp", "eintr_select",
                  "eintr_accept", "eintr_read"):
            check(rep[k] == 0, "%s: %s = %d" % (prog, k, rep[k]))
        for k in ("early_epoll", "early_epollp", "early_select", "early_accept"):
            check(rep[k] == 0, "%s: no timeout cut short: %s = %d" % (prog, k, rep[k]))
        check(rep["rt_handled"] == RT, "%s: all %d real-time signals handled (%d)"
              % (prog, RT, rep["rt_handled"]))
        check(st["signals_forwarded"] >= expected,
              "%s: every signal went through profd and was re-injected (%d)"
              % (prog, st["signals_forwarded"]))
        check(st["syscalls_restarted"] >= WINCH_ROUNDS,
              "%s: SIGWINCH-interrupted epoll waits were restarted (%d)"
              % (prog, st["syscalls_restarted"]))
        # Only the computing thread runs; blocked threads are sampled without stopping.
        check_timing(st["threads_stopped_per_tick"] < 1.3,
              "%s: %.2f threads stopped per tick (only the one computing thread runs)"
              % (prog, st["threads_stopped_per_tick"]))
        expect = {"epoll": "epoll_thread", "epollinf": "epollinf_thread",
                  "epollp": "epollp_thread", "select": "select_thread",
                  "accept": "accept_thread", "sig": "sig_thread"}
        # The sig thread computes while a burst of real-time signals runs its handler, nested
        # (each frame holds a few KiB of saved registers): a sample taken inside such a
        # nest, or in the sigreturn trampoline on its way out, is often cut short (a copy
        # too short for the nest; an unwind that cannot leave the trampoline at every one of
        # its instructions): a known limit, daemon/DESIGN.md "Unwinding through signal
        # frames". Those samples (on_rt or __restore_rt at their leaf end) are counted
        # apart, bounded, and every other sample of every thread must be complete.
        for name, fn in expect.items():
            stacks = {s: c for s, c in prof.items() if s.startswith(name + ";")}
            whole = r"%s;(__clone3|clone3|__clone|clone);start_thread;%s" % (name, fn)
            good = sum(c for s, c in stacks.items() if re.match(whole, s))
            total = sum(stacks.values())
            bad = sorted(((c, s) for s, c in stacks.items() if not re.match(whole, s)),
                         reverse=True)
            nested = sum(c for c, s in bad if name == "sig" and
                         (s.endswith(";on_rt") or s.endswith(";__restore_rt")))
            check(total and good >= 0.99 * (total - nested) and nested <= 0.1 * total,
                  "%s: thread %s: %d of %d samples unwind through %s to the thread start "
                  "(and %d inside the signal handlers' nest, at most a tenth)%s"
                  % (prog, name, good, total - nested, fn, nested,
                     "".join("\n  %d x %s" % (c, s) for c, s in bad[:4])))
        check(any(s.startswith("ctl;_start;") and ";main;" in s for s in prof),
              "%s: the main thread's read() shows a complete stack from _start" % prog)

        # A storm of ignored signals, one every 10 ms at the threads waiting with a 50 ms
        # timeout: each restart must not start the timeout over, or the waits would never
        # end; they must end on time, not early, and never with EINTR. "On time": a socket's
        # own timeout (SO_RCVTIMEO) starts over when its call restarts and cannot be
        # shortened from outside, so such a call ends at the first signal after its timeout
        # is up: up to one signal interval late. Allowed: 50 ms + 100 ms for that and for a
        # busy machine; without the repair's accounting they would last the whole storm.
        # select is the yardstick of how busy: the kernel restarts it itself with what is
        # left of its timeout, so its lateness is the machine's and profd's stops', none of
        # the accounting's (measured with other work on the machine: all four waits up to
        # 200-450 ms late at once, with the daemon before this change too).
        p.send("resetmax")
        before = p.report()
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:
            for name in ("epoll", "epollp", "accept", "select"):
                tgkill(p.pid, p.tids[name], signal.SIGWINCH)
            time.sleep(0.01)
        after = p.report()
        yardstick = after["longest_select"] / 1000.0
        check(after["calls_select"] - before["calls_select"] >= 8 and yardstick < 750,
              "%s: under a SIGWINCH every 10 ms, select's 50 ms waits end (the longest %.1f ms)"
              % (prog, yardstick))
        allowed = max(150, yardstick + 100)
        for k in ("epoll", "epollp", "accept"):
            calls = after["calls_" + k] - before["calls_" + k]
            longest = after["longest_" + k] / 1000.0
            if k == "accept" and os.environ.get("PROFD_WRAPPER", "").startswith("valgrind"):
                # valgrind 3.19 does not implement pidfd_open: the daemon under it cannot
                # read a socket's SO_RCVTIMEO, so the restarted accept never times out.
                # Checked in the normal and sanitizer runs.
                log("not checked under valgrind (no pidfd_open): accept's waits (%d calls, "
                    "the longest %.1f ms)" % (calls, longest))
                continue
            if not TIMING:
                # Under valgrind each restart waits for the daemon's own (20-50x slower)
                # handling of the stop, so "on time" is valgrind's, not the accounting's
                # (164 ms once in CI, select's 54): what is checked is that the waits end
                # well inside the storm, which they would not without the accounting.
                check(calls >= 4 and longest < 750,
                      "%s: under a SIGWINCH every 10 ms, %s's 50 ms waits end (slow "
                      "wrapper: %d calls in 1.5 s, the longest %.1f ms, under 750)"
                      % (prog, k, calls, longest))
                continue
            check(calls >= 8 and longest <= allowed,
                  "%s: under a SIGWINCH every 10 ms, %s's 50 ms waits still end on time "
                  "(%d calls in 1.5 s, the longest %.1f ms, at most %.0f)"
                  % (prog, k, calls, longest, allowed))
        for k in after:
            if k.startswith("eintr") or k.startswith("early"):
                check(after[k] == before[k], "%s: no %s during the storm" % (prog, k))

        # Bursts of SIGWINCH sent to each waiting thread itself, the computing thread busy
        # (stopped at every tick): no EINTR, no timeout cut short.
        total, where = bursts(p, lambda tid: tgkill(p.pid, tid, signal.SIGWINCH))
        check(not total, "%s: %d SIGWINCH sent to each of %s, %s ms apart (tgkill): no EINTR, "
              "no early timeout (%s)" % (prog, BURST, "/".join(BURST_TARGETS),
                                         "/".join(map(str, CADENCES_MS)), where or "none"))

        # The case as reported (issue 9): single SIGWINCHs sent to the process at each
        # waiting thread's id while the computing thread is busy. Sampled from the kernel's
        # copies, no thread is stopped and resumed for a sample, so none takes a signal at
        # its resume whose wake-up was meant for another (stopped at every tick, as on the
        # forced ptrace path, about a quarter of such bursts saw an EINTR: not checked
        # there). What remains is ptrace's own: each ignored signal still stops the thread
        # that takes it (no ptrace option filters signals), and another thread resumed from
        # such a stop can take the next one: as rare as with the pairs below (0 or 1 of 600).
        if SAMPLER != "ptrace":
            st = d.target_status(p.pid)
            total, where = bursts(p, lambda tid: os.kill(tid, signal.SIGWINCH))
            st2 = d.target_status(p.pid)
            n = sum(total.values())
            check(n <= SHARED_EINTR_MAX and st2["threads_stopped"] == st["threads_stopped"],
                  "%s: %d SIGWINCH sent to the process at each of %s, %s ms apart (kill), the "
                  "computing thread busy and sampled from the kernel's copies (%d samples, no "
                  "stop): %d EINTR or early timeouts (at most %d) (%s)"
                  % (prog, BURST, "/".join(BURST_TARGETS), "/".join(map(str, CADENCES_MS)),
                     st2["paths"]["perf"]["samples"] - st["paths"]["perf"]["samples"], n,
                     SHARED_EINTR_MAX, where or "none"))

        # Bursts of SIGWINCH+SIGURG pairs sent to the process at each waiting thread's id,
        # the computing thread idle (blocked in read, as `calm` makes it).
        p.send("calm")
        wait_until(lambda: thread_states(p.pid).get(p.tids["sig"]) == "S", 10,
                   "the computing thread to be idle")
        before = d.target_status(p.pid)
        total, where = bursts(p, lambda tid: (os.kill(tid, signal.SIGWINCH),
                                              os.kill(tid, signal.SIGURG)))
        after = d.target_status(p.pid)
        p.send("work")
        n = sum(total.values())
        log("%s: process-directed bursts: %s; threads rescued %d, calls restarted %d" % (
            prog, where or "no EINTR",
            after.get("wakeups_rescued", 0) - before.get("wakeups_rescued", 0),
            after["syscalls_restarted"] - before["syscalls_restarted"]))
        # A call that failed unseen ends unseen: a new one that meets a signal at its start
        # can then be taken for the old one restarted, and its timeout cut short. Counted too.
        check(n <= SHARED_EINTR_MAX,
              "%s: %d SIGWINCH+SIGURG pairs sent to the process at each of %s, %s ms apart "
              "(kill): %d EINTR or early timeouts (at most %d) %s" % (
                  prog, BURST, "/".join(BURST_TARGETS), "/".join(map(str, CADENCES_MS)), n,
                  SHARED_EINTR_MAX, total))
        check(p.alive(), "%s: still running" % prog)
        p.send("exit")


run("blocker")
run("blocker-fp")
