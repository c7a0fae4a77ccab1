"""Processes that are hard on a profiler, each found to break an earlier version of profd:

- hostile: a thread spins in code without unwind information with rbp at the top of the
  address space (libunwind's frame-chain guess then asks for the last word of memory): the
  daemon must survive, and that thread's stack must be its true one, nothing guessed;
- forker: clone() without CLONE_THREAD or exit signal makes child processes that the kernel
  attaches to the tracer and reports as clones; each execs /bin/true: they are processes,
  not threads of the target, must be released, and the program must finish;
- zleader: the main thread called pthread_exit (a zombie leader): attach, sample the
  workers, and detach at once; or the process killed: its end is seen;
- dlopener: a thread blocks for good in a library loaded after attach: its stack comes out
  whole once profd has read the new maps."""
import re
from harness import *

# A hostile rbp.
with Daemon() as d, Program("hostile", stdin=False) as p:
    d.ctl("attach", p.pid, "--hz", 999)
    # Half a second's samples at 999 Hz, however long this machine takes.
    d.wait_samples(p.pid, 1000)
    st = d.target_status(p.pid)
    check(d.proc.poll() is None and st and st["state"] == "attached",
          "the daemon survives a thread with rbp = 0xfffffffffffffff8 in code without CFI")
    prof = d.slice(p.pid, "--last", 1)
    bad = {s: c for s, c in prof.items() if s.startswith("badrbp;")}
    # spin_badrbp pushed nothing: its caller's return address is at sp, checked to follow a
    # call, so the true stack is recovered; nothing may come from the poisoned rbp.
    allowed = {"badrbp;clone3;start_thread;bad;spin_badrbp", "badrbp;spin_badrbp"}
    # (On a loaded machine the slice may reach back to the thread's first moment, naming
    # itself: its true stack too. CI once: bad;__pthread_setname_np;__prctl.)
    setup = "badrbp;clone3;start_thread;bad;__pthread_setname_np"
    allowed |= {setup, setup + ";__prctl"}
    check(bad and set(bad) <= allowed and any(s in bad for s in allowed if "spin" in s),
          "its samples are its true stack, nothing guessed from rbp: %s" % sorted(bad)[:3])
    check(any(s.startswith("hostile;") and ";main;compute" in s for s in prof),
          "the main thread is profiled as usual")
    d.ctl("detach", p.pid)
    check(p.alive(), "the process runs on")

# Child processes made with a bare clone().
with Daemon() as d, Program("forker", 150, stdin=False) as p:
    d.ctl("attach", p.pid, "--hz", 999)
    try:
        p.proc.wait(timeout=30 * SLOW)
    except subprocess.TimeoutExpired:
        fail("forker hung: a child process was left stopped (%s)" % thread_states(p.pid))
    out = p.proc.stdout.read()
    check(p.proc.returncode == 0 and "done 150" in out,
          "150 clone() children exec'd and exited; the parent finished (%r)" % out.strip())
    st = d.target_status(p.pid)
    check(st["threads_seen"] <= 2, "none of them was taken for a thread of the target "
          "(%d threads seen)" % st["threads_seen"])
    check("exec'd" not in d.log(), "none of their execs was taken for the target's")

# A zombie leader.
with Daemon() as d, Program("zleader", stdin=False) as p:
    wait_until(lambda: thread_states(p.pid).get(p.pid) == "Z", 10,
               "the leader to exit (a zombie)")
    d.ctl("attach", p.pid, "--hz", 499)
    d.wait_samples(p.pid, 500)
    prof = d.slice(p.pid, "--last", 1)
    check(any(s.startswith("zworker;") and ";zwork" in s for s in prof),
          "the workers of a process whose leader exited are profiled")
    t0 = time.monotonic()
    d.ctl("detach", p.pid, timeout=10)
    check(time.monotonic() - t0 < 2 * SLOW, "detach does not wait for the zombie leader "
          "(%.2f s)" % (time.monotonic() - t0))
    check(all(v == 0 for v in tracer_pids(p.pid).values()), "every thread released")

# The same process, attached, then killed: the leader, never traced, reports its exit to its
# parent alone; profd sees the process end when the last thread it traces exits (it used to
# keep such a target "attached", with no threads, until the daemon exited).
with Daemon() as d, Program("zleader", stdin=False) as p:
    wait_until(lambda: thread_states(p.pid).get(p.pid) == "Z", 10,
               "the leader to exit (a zombie)")
    d.ctl("attach", p.pid, "--hz", 499)
    d.wait_samples(p.pid, 100)
    p.kill()
    wait_until(lambda: (d.target_status(p.pid) or {}).get("state") == "exited", 10,
               "profd to see the process end")
    check(re.search(r"process %d \(zleader\) ended: its last thread exited" % p.pid, d.log()),
          "a process whose leader exited before the attach: its end seen when its workers "
          "exit, and said")
    check(d.slice(p.pid, "--last", 5), "its samples are still there to slice")

# A library loaded after attach, blocked in for good.
with Daemon() as d, Program("dlopener") as p:
    d.ctl("attach", p.pid, "--hz", 499)
    d.wait_samples(p.pid, 10)  # sampled, with the maps of before the dlopen
    p.send("go")
    check(p.readline().strip() == "loaded", "(set-up) the library is loaded and blocking")
    time.sleep(1.0)
    prof = d.slice(p.pid, "--last", 0.5)
    whole = sum(c for s, c in prof.items()
                if re.search(r";main;dlblock_wait;dlblock_inner;(__GI___libc_read|__libc_read|read)", s))
    total = sum(prof.values())
    check(total and whole >= 0.95 * total,
          "its samples unwind through the new library to main (%d of %d): %s"
          % (whole, total, sorted(prof)[:2]))
