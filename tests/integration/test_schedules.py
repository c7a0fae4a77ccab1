#!/usr/bin/env python3
"""The schedules (sleep, event, alarm, cputime) and the CPU budget, on the real daemon.

- cputime: an idle process gets no samples, with each source (perf events, a CPU-clock timer,
  schedstat polling); a busy thread gets about one sample per interval of its CPU time, two
  busy threads twice the rate of one; a sleeping thread never shows (on-CPU stacks only).
- the wall-clock modes show the sleeping thread's blocking stack.
- event: a slice request takes a sample at once; sleep at the same rate has none yet.
- alarm: ticks missed while the daemon could not run are counted, not made up in a burst.
- a mode changed on an attached process shows in status and in the profile's metadata.
- the budget: many busy targets at 999 Hz are slowed down fairly and the daemon stays
  within its --max-cpu.
- a slow target (threads waiting for a CPU) does not slow down the others.
"""
import glob
import json
import os
import signal
import statistics
import time

from harness import (Daemon, Program, RawClient, check, check_timing, fail, log, SAMPLER, SLOW, TIMING,
                     parse_collapsed, skip, thread_states, wait_until)

NCPU = os.cpu_count() or 1


def proc_cpu_ns(pid):
    """CPU time of every thread of pid, from schedstat (ns)."""
    total = 0
    for p in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(p) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def daemon_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slice_raw(d, pid, last_s, fmt="collapsed"):
    c = RawClient(d.socket)
    r = c.call({"cmd": "slice", "pid": pid, "last_ns": int(last_s * 1e9), "format": fmt})
    c.close()
    if "result" not in r:
        fail("slice of %d: %r" % (pid, r))
    return r["result"]


def sampling(d, pid):
    return d.target_status(pid)["sampling"]


def counters_changed(a, b, pre=""):
    """The numbers that differ between two status objects, as "key: before -> after"."""
    out = []
    for k, v in b.items():
        if isinstance(v, dict):
            out += counters_changed(a.get(k) or {}, v, pre + k + ".")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v != a.get(k):
            out.append("%s%s: %s -> %s" % (pre, k, a.get(k), v))
    return out if pre else "; ".join(out)


def frozen(d, p):
    """p's CPU time (ns) and status, with p stopped (SIGSTOP) and the daemon caught up with
    its CPU time: a daemon that got little CPU lately has not yet seen all of it, and
    samples are due only for CPU time it has seen. Resume p with SIGCONT."""
    os.kill(p.pid, signal.SIGSTOP)
    wait_until(lambda: all(s in "Tt" for s in thread_states(p.pid).values()), 10,
               "process %d to stop" % p.pid)
    last = [None]

    def caught_up():
        st = d.target_status(p.pid)
        counts = (st["samples"], st["sampling"]["missed"], sum(st["skipped"].values()))
        same, last[0] = counts == last[0], counts
        return st if same else None
    # (A slice reads every ring first; and counts the same over 0.6 s, longer than the 500 ms
    # between two reads of cputime's rings: CI once, with a sanitized daemon, saw counts still
    # in a ring as caught up, 30 samples short.)
    d.slice(p.pid, "--last", 1)
    st = wait_until(caught_up, 20, "the daemon to account for process %d's CPU" % p.pid,
                    interval=0.6)
    return proc_cpu_ns(p.pid), st


# 1. cputime on an idle process: no samples, whichever source.
for source in ("perf", "timer", "poll"):
    with Daemon("--cputime-source", source) as d, Program("sleeper", 0) as p:
        d.ctl("attach", p.pid, "--mode", "cputime", "--hz", 999)
        s = sampling(d, p.pid)
        check(s["mode"] == "cputime" and s["cputime_source"] == source,
              "cputime source %s: status says so (%s)" % (source, s.get("cputime_source")))
        time.sleep(1.5)
        res = slice_raw(d, p.pid, 10)
        check(res["samples"] == 0, "cputime (%s): an idle process gets no samples (%d)"
              % (source, res["samples"]))

# 2. cputime on busy threads: one sample per interval of each thread's CPU, only on-CPU
# stacks; two busy threads get twice the rate of one.
HZ = 101
rates = {}
for source in ("perf", "timer", "poll"):
    for busy in (1, 2):
        if busy > NCPU:
            continue
        with Daemon("--cputime-source", source) as d, Program("sleeper", busy) as p:
            d.ctl("attach", p.pid, "--mode", "cputime", "--hz", HZ)
            time.sleep(0.3)
            c0, st0 = frozen(d, p)
            os.kill(p.pid, signal.SIGCONT)
            t0 = time.monotonic()
            # 2 CPU-seconds of the burners (about 200 samples; 2 s of one busy thread on an
            # idle machine): a count that says something, however much CPU they get.
            wait_until(lambda: proc_cpu_ns(p.pid) - c0 >= 2e9, 60, "2 CPU-seconds of burn()",
                       interval=0.1)
            t1 = time.monotonic()
            c1, st1 = frozen(d, p)
            os.kill(p.pid, signal.SIGCONT)
            n = st1["samples"] - st0["samples"]
            missed = st1["sampling"]["missed"] - st0["sampling"]["missed"]
            skipped = sum(st1["skipped"].values()) - sum(st0["skipped"].values())
            # (A one-shot of the kernel's copy given up after two intervals: a sample due
            # that was not taken, counted.)
            skipped += st1["perf"]["oneshot_expired"] - st0["perf"]["oneshot_expired"]
            due = n + missed + skipped
            per_cpu_s = due / ((c1 - c0) / 1e9)
            rates[(source, busy)] = (due / (t1 - t0), (c1 - c0) / 1e9 / (t1 - t0))
            # One sample due per interval of CPU time: taken, or counted when the daemon
            # could not take it (missed: it fell behind; skipped: the thread's previous stop
            # still pending, or off its CPU) on a busy machine or with a sanitizer.
            if TIMING and abs(per_cpu_s - HZ) > 0.15 * HZ:
                log("every counter that changed meanwhile:", counters_changed(st0, st1))
            check_timing(abs(per_cpu_s - HZ) <= 0.15 * HZ,
                         "cputime (%s), %d busy: %.1f samples due per CPU-second (%d asked; "
                         "%d taken, %d missed, %d skipped)"
                         % (source, busy, per_cpu_s, HZ, n, missed, skipped))
            prof = d.slice(p.pid)  # every sample since the attach
            burn = sum(c for s, c in prof.items() if s.endswith(";burn"))
            nap = sum(c for s, c in prof.items() if ";nap" in s or s.startswith("napper"))
            check(burn > 0 and burn >= 0.97 * sum(prof.values()),
                  "cputime (%s), %d busy: samples are the burners in burn() (%d of %d)"
                  % (source, busy, burn, sum(prof.values())))
            check(nap == 0, "cputime (%s): the sleeping thread never shows (%d)" % (source, nap))
    if (source, 2) in rates:
        # Twice the rate of one for twice the CPU: on a machine whose CPUs the busy threads
        # share with profd (2 here) they may get less than twice, so the rate is compared
        # with the CPU they got.
        (r2, cpu2), (r1, cpu1) = rates[(source, 2)], rates[(source, 1)]
        ratio, cpu_ratio = r2 / r1, cpu2 / cpu1
        check_timing(0.8 <= ratio / cpu_ratio <= 1.25,
                     "cputime (%s): two busy threads get %.2fx the samples per second of one, "
                     "for %.2fx the CPU" % (source, ratio, cpu_ratio))

# 3. The wall-clock modes show where the sleeping thread waits; event samples at a slice.
for mode in ("alarm", "sleep", "event"):
    with Daemon() as d, Program("sleeper", 1) as p:
        d.ctl("attach", p.pid, "--mode", mode, "--hz", 199)
        if mode != "event":  # (event samples at the slice request itself)
            d.wait_samples(p.pid, 3 * 50)  # 50 ticks of its 3 threads
        prof = d.slice(p.pid, "--last", 60)
        nap = {s: c for s, c in prof.items() if s.startswith("napper;")}
        check(nap and all(";start_thread;napper;nap;" in s and "nanosleep" in s for s in nap),
              "%s: the sleeping thread shows its blocking stack through nap() (%s)"
              % (mode, sorted(nap)[:2]))
        check(any(s.startswith("sleeper;_start;") and ";main;" in s and "read" in s.split(";")[-1]
                  for s in prof),
              "%s: the main thread shows its read() under main()" % mode)
        check(sampling(d, p.pid)["mode"] == mode, "%s: status shows the mode" % mode)
        # The burner is sampled from the kernel's copy in every wall-clock mode (where this
        # machine allows perf events and no other sampler is forced): no stops but the
        # first few.
        st = d.target_status(p.pid)
        if not SAMPLER and "error" not in st["perf"]:
            pa = st["paths"]
            check(pa["perf"]["samples"] > 0 and
                  pa["ptrace"]["samples"] <= max(3, 0.02 * pa["perf"]["samples"]),
                  "%s: the running burner's samples are the kernel's copies (%d perf, %d "
                  "ptrace stops)" % (mode, pa["perf"]["samples"], pa["ptrace"]["samples"]))

# 4. event: a slice request takes a sample at once; sleep at 1 Hz has none after 0.3 s.
with Daemon() as d, Program("sleeper", 0) as p, Program("sleeper", 0) as q:
    t_attach = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    d.ctl("attach", p.pid, "--mode", "event", "--hz", 1)
    d.ctl("attach", q.pid, "--mode", "sleep", "--hz", 1)
    time.sleep(0.3)
    ev = slice_raw(d, p.pid, 10)
    sl = slice_raw(d, q.pid, 10)
    check(ev["samples"] >= 2 and ev["sampling"]["event_samples"] >= 1,
          "event: a slice request 0.3 s after attach at 1 Hz holds a sample of every thread "
          "taken at the request (%d samples)" % ev["samples"])
    check(sl["samples"] == 0, "sleep at 1 Hz: no sample yet at 0.3 s (%d)" % sl["samples"])
    res = slice_raw(d, p.pid, 10, "sentry")
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    prof = res["profile"]
    last = max(int(s["elapsed_since_start_ns"]) for s in prof["profile"]["samples"])
    start = res["start_ns"]
    check(now - (start + last) < 200e6 * SLOW,
          "event: the newest sample was taken at the request (%.1f ms before it returned)"
          % ((now - start - last) / 1e6))
    check(prof.get("profd", {}).get("sampling", {}).get("mode") == "event",
          "the Sentry profile's metadata names the mode")
    # A window reaching back before the attach: the profile starts at the attach, so that
    # its samples fall in the 30 s relay keeps from its start.
    res = slice_raw(d, p.pid, 60, "sentry")
    el = [int(s["elapsed_since_start_ns"]) for s in res["profile"]["profile"]["samples"]]
    check(res["start_ns"] >= t_attach and el and max(el) < 30 * 10**9,
          "sentry, the last 60 s of a process attached %.1f s ago: the window starts at the "
          "attach (%.1f s after the 60 s) and its %d samples lie in relay's 30 s (last at "
          "%.1f s)" % ((time.clock_gettime_ns(time.CLOCK_MONOTONIC) - t_attach) / 1e9,
                       (res["start_ns"] - (res["end_ns"] - 60 * 10**9)) / 1e9, len(el),
                       max(el, default=0) / 1e9))

# 5. alarm: ticks missed while the daemon is stopped are counted, not bunched; changing the
# mode of an attached process takes effect.
with Daemon() as d, Program("sleeper", 0) as p:
    d.ctl("attach", p.pid, "--mode", "alarm", "--hz", 100)
    time.sleep(0.5)
    m0 = sampling(d, p.pid)["missed"]
    t_stop = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    os.kill(d.pid, signal.SIGSTOP)
    time.sleep(0.3)
    t_cont = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    os.kill(d.pid, signal.SIGCONT)
    time.sleep(0.5)
    s = sampling(d, p.pid)
    res = slice_raw(d, p.pid, 1.5, "sentry")  # (back to before the stop)
    tid = str(p.pid)
    ts = sorted(res["start_ns"] + int(x["elapsed_since_start_ns"])
                for x in res["profile"]["profile"]["samples"] if x["thread_id"] == tid)
    # A tick of the stop is counted missed, or, with the ticks deferred (the sleeper's
    # threads stay blocked: sampler.c), taken afterwards at its own time on the grid; it is
    # never taken at the resume.
    during = [x for x in ts if t_stop + 10**7 <= x < t_cont - 10**7]
    check(s["missed"] - m0 + len(during) >= 20,
          "alarm: the daemon stopped for 0.3 s at 100 Hz: %d ticks counted missed, %d taken "
          "afterwards at their own time (deferred: %d ticks in %d batches)"
          % (s["missed"] - m0, len(during), s["deferred"]["ticks"], s["deferred"]["batches"]))
    after = [x for x in ts if t_cont <= x < t_cont + 100 * 10**6]
    check(len(after) <= 12, "alarm: no burst after the stop: %d ticks in the 100 ms after it "
          "(10 due; a burst would make up the 30 missed)" % len(after))
    gaps = [b - a for a, b in zip(ts, ts[1:]) if a > t_cont]
    log("alarm: median interval after the stop %.2f ms"
        % (statistics.median(gaps) / 1e6 if gaps else -1))
    # Back on its 10 ms grid: from then on each interval has its tick, or counts it missed
    # (a late tick is still its interval's). The median interval between samples, checked
    # before, also measured how late ticks come when the CPUs are busy (11.06 ms seen).
    a, ta = d.raw_target_status(p.pid), time.monotonic()
    time.sleep(1.0)
    b, tb = d.raw_target_status(p.pid), time.monotonic()
    due = (tb - ta) * 100
    got = b["ticks"] - a["ticks"] + b["sampling"]["missed"] - a["sampling"]["missed"]
    check_timing(abs(got - due) <= 0.05 * due + 2,
                 "alarm: back on its 10 ms grid: %d ticks taken or counted missed in %.2f s "
                 "(%.0f intervals; %d missed)"
                 % (got, tb - ta, due, b["sampling"]["missed"] - a["sampling"]["missed"]))
    r = d.ctl("configure", p.pid, "--mode", "cputime", "--hz", 50)
    check("cputime at 50 Hz" in r.stdout, "configure: one line with the new schedule (%r)"
          % r.stdout)
    s = sampling(d, p.pid)
    check(s["mode"] == "cputime" and s["hz"] == 50 and d.target_status(p.pid)["hz"] == 50,
          "configure: status shows the new mode and rate")
    res = slice_raw(d, p.pid, 1)
    check(res["sampling"]["mode"] == "cputime", "a slice's metadata shows the new mode")
    r = d.ctl("configure", p.pid, "--mode", "bogus", check_rc=False)
    check(r.returncode == 2, "configure --mode bogus: a usage error")
    c = RawClient(d.socket)
    r = c.call({"cmd": "configure", "pid": p.pid, "mode": "often"})
    c.close()
    check(r.get("error", {}).get("code") == "bad_request" and "mode" in r["error"]["message"],
          "configure with an unknown mode: bad_request naming \"mode\"")

# 5b. A rate raised on an attached process raises the bound of its buffer with it (sized at
# attach for 1 Hz, the buffer would hold under 2 s of samples at 999 Hz: 1 Hz x 61 s x 64
# threads a tick = 3904 entries). Waited for by count, at whatever rate the machine allows.
with Daemon() as d, Program("sleeper", 0) as p:
    d.ctl("attach", p.pid, "--hz", 1, "--buffer", 60)
    d.ctl("configure", p.pid, "--hz", 999)
    d.wait_samples(p.pid, 4001, timeout=60)
    st = d.target_status(p.pid)
    check(st["buffered"] == st["samples"] and st["samples"] > 4000
          and st["ring_dropped_full"] == 0,
          "configure --hz 999 after attach at 1 Hz: every sample kept (%d of %d, %d dropped)"
          % (st["buffered"], st["samples"], st["ring_dropped_full"]))

# 6. The budget: 4 targets of 2 busy threads at 999 Hz would cost far more than 5% of a
# CPU; they are slowed down alike and the daemon stays within its budget.
with Daemon("--max-cpu", "5") as d:
    progs = [Program("sleeper", 2) for _ in range(4)]
    try:
        # By stops (--sampler ptrace): with the kernel's copies a target's cost per tick
        # varies with how many of its one-shot samples came in since the last tick (its 2
        # busy threads share 2 CPUs with 6 others), and the budget, which divides CPU by
        # measured cost, gave equal targets rates up to 2.3 times apart in half the runs.
        # Known (issue 10); the division itself is what is checked here.
        for p in progs:
            d.ctl("attach", p.pid, "--hz", 999, "--sampler", "ptrace")
        time.sleep(1.5 * SLOW)
        c0, t0 = daemon_cpu_s(d.pid), time.monotonic()
        n0 = {p.pid: d.target_status(p.pid)["ticks"] for p in progs}
        time.sleep(3)
        c1, t1 = daemon_cpu_s(d.pid), time.monotonic()
        st = {p.pid: d.target_status(p.pid) for p in progs}
        pct = 100 * (c1 - c0) / (t1 - t0)
        rate = {pid: (st[pid]["ticks"] - n0[pid]) / (t1 - t0) for pid in st}
        log("budget 5%%: daemon %.1f%% of a CPU; rates %s" % (pct, sorted(rate.values())))
        check(all(s["sampling"]["throttled"] and s["sampling"]["effective_hz"] < 999
                  for s in st.values()),
              "budget: every target is throttled and says so (effective %s Hz)"
              % [round(s["sampling"]["effective_hz"]) for s in st.values()])
        check(all(r > 0 for r in rate.values()), "budget: every target is still sampled")
        check_timing(pct <= 5 * 1.6 + 1,
                     "budget: the daemon stays near its 5%% budget (%.1f%% of a CPU)" % pct)
        check_timing(max(rate.values()) <= 2 * min(rate.values()),
                     "budget: the targets are slowed down fairly (%.0f to %.0f ticks/s)"
                     % (min(rate.values()), max(rate.values())))
    finally:
        for p in progs:
            p.kill()

# 7. A slow target does not slow down the others: 4 busy threads (more than the CPUs) that
# stop only when they get a CPU, next to an idle process sampled at 499 Hz. The idle one's
# rate is measured with the busy process sampled at 1 Hz (as good as alone), then at 101 Hz,
# four times in turn: on a machine shared with other work, what the daemon gets of the CPUs
# changes from one second to the next, and alternating spreads that over both. Waiting for
# the slow target's stops (they take milliseconds when its threads wait for a CPU) would
# take the quick one's ticks; the CPU the slow one's samples cost must not: at 101 Hz they
# cost profd ~4% of a CPU (at 499 Hz, with a CPU-bound process beside the test, profd's
# share of the CPUs left the quick one 11% short). Slow to stop: the slow target is sampled
# by stops (--sampler ptrace); from the kernel's copies its threads are never stopped, and
# there is nothing to wait for.
with Daemon() as d, Program("sleeper", 2 * NCPU) as slow, Program("sleeper", 0) as quick:
    d.ctl("attach", quick.pid, "--hz", 499)
    d.ctl("attach", slow.pid, "--hz", 1, "--sampler", "ptrace")

    def quick_ticks(slow_hz):
        d.ctl("configure", slow.pid, "--hz", slow_hz)
        time.sleep(0.3)
        n0, t0 = d.raw_target_status(quick.pid)["ticks"], time.monotonic()
        time.sleep(1.0)
        return d.raw_target_status(quick.pid)["ticks"] - n0, time.monotonic() - t0
    runs = {1: [0, 0.0], 101: [0, 0.0]}
    for _ in range(4):
        for hz in (1, 101):
            n, t = quick_ticks(hz)
            runs[hz][0] += n
            runs[hz][1] += t
    alone, beside = runs[1][0] / runs[1][1], runs[101][0] / runs[101][1]
    ss = d.target_status(slow.pid)
    log("slow target: %.0f ticks/s, %.0f us to stop on average; the other: %.0f ticks/s "
        "beside it at 1 Hz, %.0f at 101 Hz" % (ss["sampling"]["recent_ticks_per_s"],
                                             ss["stop_latency_us_avg"], alone, beside))
    # (Not with a sanitized daemon: sampling the slow target's 4 threads costs it several
    # times its normal CPU, which it then lacks for the other target; that measures the
    # sanitizer, not waiting on slow stops.)
    check_timing(beside >= 0.9 * alone, "a target next to a slow one keeps its rate (%.0f "
                 "ticks/s beside it at 101 Hz, %.0f at 1 Hz)" % (beside, alone), d)
