"""A slice of a large buffer does not hold up the loop thread (issue 10).

The samples of a slice are copied out of the target's ring on the loop thread a bounded
number at a time, between other events, and the reply is encoded on the worker thread; the
daemon counts, per piece of that work, how many samples it copied and how long it took
(status "slice_loop"). A full buffer of tests/programs/fanout (8 threads, about 1100
stacks, 999 Hz, 8 s: some 64 000 samples (longer where fewer are taken a second), the ring dropping the oldest all the while) is
sliced in both formats, at once from two clients, while another target is sampled at 999 Hz:
- no piece of loop work copied more than the step's bound, and the copies went through the
  steps (a copy made whole at the request would show as a request piece with samples, or as
  no copy pieces at all): counted, so this holds however busy the machine is;
- no piece took more than 3 ms of the loop thread's CPU time (a timing: not checked under
  valgrind or with a sanitized daemon);
- the other target's ticks during the slices were at most a generous factor later than over
  as long a time without (a timing too);
- every sample of the window is in the replies, the outputs agree, and once the replies are
  sent the daemon holds nothing for slices (max_memory's "slices" back to 0);
- a detach while a slice is being copied: the slice is answered (its copy completes as the
  ring is freed) or told the process was detached, and the daemon carries on.
"""
import threading

from harness import *

HZ = 999
BUFFER_S = 8
THREADS = 8


def lateness_hist(t):
    return {(b[0], b[1]): b[2] for b in t["tick_lateness"]["histogram_us"]}


def window(t0, t1):
    """Ticks between two statuses of a target: (count, max lateness in us, missed)."""
    a, b = lateness_hist(t0), lateness_hist(t1)
    n, mx = 0, 0.0
    for k, c in b.items():
        d = c - a.get(k, 0)
        if d > 0:
            n += d
            mx = max(mx, k[1] if k[1] >= 0 else k[0])
    return n, mx, t1["sampling"]["missed"] - t0["sampling"]["missed"]


def run_delay_us(pid):
    """How long the daemon's loop thread (its main thread) has waited for a CPU, in us
    (schedstat's second field): lateness that is the machine's, not profd's."""
    with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
        return int(f.read().split()[1]) / 1000.0


def slice_raw(d, req, out, key):
    """The reply's bytes: parsed only once the window is over (parsing megabytes of JSON
    takes this process's CPU, which the daemon's loop thread would compete for)."""
    c = RawClient(d.socket)
    c.s.settimeout(120 * SLOW)
    try:
        c.send(req)
        (n,) = struct.unpack(">I", c._recv_exact(4))
        out[key] = c._recv_exact(n)
    finally:
        c.close()


with Daemon() as d, Program("fanout", THREADS) as big, Program("sleeper", 1) as other:
    step = d.status()["daemon"]["slice_loop"]["copy_step_max_entries"]
    # The buffer must be large against a copy step, or copying it whole at the request would
    # pass unseen. A machine that samples the 8 threads slowly (a sanitized daemon on a busy
    # host: 2 200 samples a second, not 8 000, in one CI run) gets a longer buffer instead.
    buffer_s = BUFFER_S
    d.ctl("attach", big.pid, "--hz", HZ, "--buffer", buffer_s)
    d.ctl("attach", other.pid, "--hz", HZ)
    for attempt in range(2):
        # A full buffer: its samples span buffer_s seconds, and the ring is dropping its
        # oldest (it has taken more than it holds).
        def full():
            t = d.raw_target_status(big.pid)
            return t if t and t["buffered"] and t["samples"] > t["buffered"] and \
                t["newest_ns"] - t["oldest_ns"] >= (buffer_s - 0.1) * 1e9 else None
        wait_until(full, 60 + 10 * buffer_s, "a full %d s buffer of %d threads"
                   % (buffer_s, THREADS), interval=0.1)
        bst = d.target_status(big.pid)
        log("buffer: %d samples in %d stacks over %d s" % (bst["buffered"], bst["stacks"],
                                                          buffer_s))
        if bst["buffered"] <= 2 * step:
            # The first seconds are the slowest (a sanitized daemon's caches are cold: 2 200
            # samples a second against 5 300 later): once more over the buffer's span.
            time.sleep(buffer_s)
            bst = d.target_status(big.pid)
            log("buffer: %d samples in %d stacks %d s later" % (bst["buffered"], bst["stacks"],
                                                               buffer_s))
        if bst["buffered"] > 2 * step or attempt:
            break
        rate = max(bst["buffered"], 1) / buffer_s
        buffer_s = max(BUFFER_S + 1, min(30, int(3.5 * step / rate) + 1))
        log("sampled at %.0f a second: attaching again with a %d s buffer" % (rate, buffer_s))
        d.ctl("detach", big.pid)
        d.ctl("attach", big.pid, "--hz", HZ, "--buffer", buffer_s)
    check(bst["buffered"] > 2 * step,
          "the buffer holds %d samples: more than two copy steps of %d" % (bst["buffered"], step))

    s0 = d.raw_target_status(other.pid)
    w0 = run_delay_us(d.pid)
    loop0 = d.status()["daemon"]["slice_loop"]
    t0 = time.monotonic()
    res = {}
    ths = [threading.Thread(target=slice_raw, args=(d, {"cmd": "slice", "pid": big.pid,
                                                         "last_ns": buffer_s * 10**9,
                                                         "format": fmt}, res, fmt))
           for fmt in ("collapsed", "sentry")]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    took = time.monotonic() - t0
    s1 = d.raw_target_status(other.pid)
    w1 = run_delay_us(d.pid)
    # As long again without a slice.
    b0 = d.raw_target_status(other.pid)
    v0 = run_delay_us(d.pid)
    # (Only compared where timing is checked: not under valgrind, nor with a sanitized
    # daemon.)
    time.sleep(max(took, 0.5) if TIMING and not d.sanitized() else 0.5)
    b1 = d.raw_target_status(other.pid)
    v1 = run_delay_us(d.pid)
    st = d.status()
    loop = st["daemon"]["slice_loop"]
    log("slice_loop: %s" % json.dumps(loop))

    res = {k: json.loads(v) for k, v in res.items()}
    for fmt in ("collapsed", "sentry"):
        check("result" in res.get(fmt, {}), "the %s slice is answered (%s)"
              % (fmt, str(res.get(fmt))[:200] if "result" not in res.get(fmt, {}) else "ok"))
    col, sen = res["collapsed"]["result"], res["sentry"]["result"]
    n = col["samples"]
    check(n >= 0.9 * bst["buffered"],
          "the collapsed slice has the whole buffer: %d samples (%d buffered before)"
          % (n, bst["buffered"]))
    folded = parse_collapsed(col["data"])
    # (A sample whose stack was not recorded, for want of memory, is left out.)
    check(0.99 * n <= sum(folded.values()) <= n,
          "its stacks count %d samples of %d" % (sum(folded.values()), n))
    check(any("fan_a" in s and "bottom" in s for s in folded),
          "the fanout threads' stacks are there, symbolized")
    nsen = len(sen["profile"]["profile"]["samples"])
    check(abs(nsen - n) <= 0.1 * n,
          "the Sentry slice of the same window has %d samples (collapsed: %d)" % (nsen, n))

    copies = loop["copy"]["count"] - loop0["copy"]["count"]
    copied = loop["copy"]["samples"] - loop0["copy"]["samples"]
    # A copy that falls behind the ring's oldest end (the daemon under valgrind: idle steps
    # come seldom) is handed each sample as the ring drops it, at the tick that pushes it
    # out: counted apart.
    dropped = loop["samples_taken_as_dropped"] - loop0["samples_taken_as_dropped"]
    check(loop["copy"]["max_samples"] <= step and loop["request"]["max_samples"] == 0,
          "no piece of the loop thread's work copied more than %d samples (most: %d)"
          % (step, loop["copy"]["max_samples"]))
    check(copied + dropped == n + sen["samples"] and copies >= max(2, -(-copied // step)),
          "both slices were copied in steps: %d samples in %d steps of at most %d, and %d "
          "as the ring dropped them (the slices have %d and %d)"
          % (copied, copies, step, dropped, n, sen["samples"]))
    worst = max(loop[k]["max_cpu_us"] for k in ("request", "copy", "reply"))
    check_timing(worst <= 3000,
                 "no piece of loop work on slices took over 3 ms of CPU (most: %.0f us: "
                 "request %.0f, copy step %.0f, reply %.0f)"
                 % (worst, loop["request"]["max_cpu_us"], loop["copy"]["max_cpu_us"],
                    loop["reply"]["max_cpu_us"]), d)

    dn, dmax, dmiss = window(s0, s1)
    bn, bmax, bmiss = window(b0, b1)
    log("the other target's ticks: during the slices (%.2f s) %d, latest %.0f us, %d missed; "
        "as long without: %d, latest %.0f us, %d missed; the loop waited %.0f / %.0f us for "
        "a CPU" % (took, dn, dmax, dmiss, bn, bmax, bmiss, w1 - w0, v1 - v0))
    # Printing a Sentry profile of 64 000 samples on the loop thread took it away for tens
    # of milliseconds: ticks missed by the dozen, one late by as much. A machine busy with
    # other work preempts the loop for a few milliseconds at a time, with or without a slice,
    # and now and then for tens (seen: 63 ms during the slices with a CPU hog and another
    # test beside, 6 ms without): the time the loop waited for a CPU in the window (schedstat)
    # is the machine's, not the slices'. A loop kept busy by them would not be waiting.
    check_timing(dmax <= 3 * bmax + 15000 + (w1 - w0),
                 "ticks of the other target during the slices at most %.0f us late (without "
                 "a slice: %.0f us; the loop waited %.0f us for a CPU meanwhile)"
                 % (dmax, bmax, w1 - w0), d)
    # Ticks are missed, not made up, when the loop waited a whole interval or more for a CPU:
    # as many as the intervals in its wait (seen: 67 of 172 while it waited 102 ms). And on
    # a machine busy enough that the window without a slice missed ticks too (the other
    # programs' threads wait for CPUs, and a stop of one waits with them), by the same share
    # (seen with three CPU hogs: 369 of 524 against 28 of 41, with and without profd's
    # sampling change of 2026-12-02).
    share_without = bmiss / max(1, bn + bmiss)
    check_timing(dmiss <= 3 * share_without * (dn + dmiss) + 0.2 * (dn + dmiss) + 20 +
                 (w1 - w0) * HZ / 1e6,
                 "the other target missed %d of %d ticks during the slices (%d of %d without)"
                 % (dmiss, dn + dmiss, bmiss, bn + bmiss), d)

    mem = st["daemon"]["memory"]
    check(mem["slices_bytes"] == 0,
          "once answered, nothing is held for slices (max_memory's slices: %d bytes)"
          % mem["slices_bytes"])

    # A detach while a slice is being copied.
    a = RawClient(d.socket)
    a.s.settimeout(120 * SLOW)
    a.send({"cmd": "slice", "pid": big.pid, "last_ns": buffer_s * 10**9, "id": 7})
    r = d.ctl("detach", big.pid, check_rc=False)
    reply = a.recv()
    a.close()
    ok = ("result" in (reply or {}) and reply["result"]["samples"] > 0) or \
         ("error" in (reply or {}) and reply["error"]["code"] == "not_attached")
    check(ok and reply.get("id") == 7 and r.returncode == 0,
          "a slice copied while its process is detached is answered (%s)"
          % ("%d samples" % reply["result"]["samples"] if "result" in (reply or {})
             else str(reply)[:200]))
    after = d.raw_target_status(other.pid)
    check(after is not None and after["samples"] > s1["samples"],
          "the daemon carries on sampling the other target")
    check(d.status()["daemon"]["memory"]["slices_bytes"] == 0,
          "and holds nothing for slices afterwards")
