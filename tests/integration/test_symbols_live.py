"""Symbols in a real profile: a thread spinning in clock_gettime spends its time in the vDSO,
which has no file on disk. Its samples must unwind through the vDSO (with profd's own
unwind table for it) to main and _start, and name the vDSO function from the image read out
of the process's memory, as perf does."""
from harness import *

with Daemon() as d:
    p = subprocess.Popen([os.path.join(PROGRAMS, "spinner"), "4"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline().split()[1])
        d.ctl("attach", pid, "--hz", 499)
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(2.5)
        prof = d.slice(pid, "--last", 2)
        total = sum(prof.values())
        vdso = {s: c for s, c in prof.items() if "__vdso_clock_gettime" in s}
        complete = sum(c for s, c in prof.items()
                       if s.startswith("spinner;_start;__libc_start_main") and ";main;" in s
                       and ";spin_loop" in s)
        check(total > 500, "spinner sampled (%d samples)" % total)
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
