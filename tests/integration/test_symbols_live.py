"""Symbols in a real profile: a thread spinning in clock_gettime spends its time in the vDSO,
which has no file on disk. Its samples must unwind through the vDSO (with profd's own
unwind table for it) to main and _start, and name the vDSO function from the image read out
of the process's memory, as perf does."""
from harness import *

with Daemon() as d:
    # It spins for up to 60 s (ended at the end of the test): time enough for the samples
    # below on a slow or busy machine.
    p = subprocess.Popen([os.path.join(PROGRAMS, "spinner"), "60"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline().split()[1])
        d.ctl("attach", pid, "--hz", 499)

        def run_ns():
            with open("/proc/%d/schedstat" % pid) as f:
                return int(f.read().split()[0])
        r0 = run_ns()
        p.stdin.write("go\n")
        p.stdin.flush()
        # The window starts once it spins (20 ms of CPU since the go): the samples before
        # are of its main thread waiting for the go, not through the vDSO.
        wait_until(lambda: run_ns() > r0 + 20 * 10**6, 30, "the spinner to spin")
        t_from = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        n0 = d.raw_target_status(pid)["samples"]
        # The samples of 2 s at 499 Hz, however long this machine takes to give them.
        d.wait_samples(pid, n0 + 1000, timeout=60)
        secs = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - t_from) / 1e9
        prof = d.slice(pid, "--from", t_from,
                       "--to", time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        total = sum(prof.values())
        vdso = {s: c for s, c in prof.items() if "__vdso_clock_gettime" in s}
        complete = sum(c for s, c in prof.items()
                       if s.startswith("spinner;_start;__libc_start_main") and ";main;" in s
                       and ";spin_loop" in s)
        check(total >= 900, "spinner sampled (%d samples in %.1f s)" % (total, secs))
        check(sum(vdso.values()) > 0.3 * total,
              "%.0f%% of samples are in the vDSO's __vdso_clock_gettime, named"
              % (100.0 * sum(vdso.values()) / total))
        check(not any("[[" in s or "vdso]+0x" in s for s in prof),
              "no vDSO frame is left as a bare address")
        check(complete >= 0.99 * total,
              "%d of %d samples unwind through spin_loop and main to _start (through the vDSO)"
              % (complete, total))
        st = d.target_status(pid)
        check(st["unwind"]["complete_pct"] >= 99, "status: %.1f%% complete unwinds"
              % st["unwind"]["complete_pct"])
    finally:
        p.kill()
        p.wait()
