"""Failures of the system calls the daemon depends on are handled or reported, never silent.
A library preloaded into the daemon (tests/programs/faults.c) makes chosen calls fail:

- /proc/PID/maps unreadable at attach: the attach fails saying so (attach_failed), and the
  process is released; once the maps can be read, the same attach works;
- ... unreadable when the process execs: said in the log, and read again once they can be:
  the new program's samples unwind and symbolize;
- timerfd_settime failing: an attach in a wall-clock mode fails saying its schedule cannot
  start (it used to attach and never take a sample), and the process is released; failing
  for a schedule already running, status and the log say so and it is set again (ticks
  resume) once it can be;
- chmod of the socket failing while its mode is right already (bind made it so): a warning,
  and profd serves;
- no signalfd for the CPU-clock timers: with --cputime-source timer profd refuses to start,
  saying why; with the default source it warns, and cputime samples with another source.
"""
import shutil

from harness import *

FAULTS = os.path.join(PROGRAMS, "libprofdfaults.so")
tmp = tempfile.mkdtemp(prefix="profd-faults-")
MARKER = os.path.join(tmp, "failing")  # with PROFD_FAULTS_WHILE: faults while it exists


def fault_env(faults, while_path=None):
    e = {"LD_PRELOAD": FAULTS, "PROFD_FAULTS": faults,
         # The preloaded library comes ahead of the sanitizer's runtime (ASan build).
         "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
    if while_path:
        e["PROFD_FAULTS_WHILE"] = while_path
    return e


def untraced(pid):
    return all(v == 0 for v in tracer_pids(pid).values())


def fail_now(on):
    if on:
        open(MARKER, "w").close()
    elif os.path.exists(MARKER):
        os.unlink(MARKER)


try:
    # 1. The maps of a process cannot be read at attach.
    with Daemon(env=fault_env("maps", MARKER)) as d, Program("busy", 1) as p:
        fail_now(True)
        c = RawClient(d.socket)
        r = c.call({"cmd": "attach", "pid": p.pid})
        e = r.get("error", {})
        check(e.get("code") == "attach_failed" and
              "cannot read the memory maps of process %d: Permission denied" % p.pid
              in e.get("message", ""),
              "maps unreadable at attach: attach_failed, saying why (%r)" % r)
        wait_until(lambda: untraced(p.pid) and not d.status()["targets"], 10,
                   "profd to release the process it could not set up")
        log("ok:   the process was released")
        fail_now(False)
        r = c.call({"cmd": "attach", "pid": p.pid, "hz": 199})
        check("result" in r, "maps readable again: the same attach works (%r)" % r.get("error"))
        c.close()

    # 2. ... and when it execs: said, and read again once they can be.
    with Daemon(env=fault_env("maps", MARKER)) as d, \
            Program("execer", int(4000 * SLOW), os.path.join(PROGRAMS, "busy"), 2) as p:
        d.ctl("attach", p.pid, "--hz", 199)
        # (The exec comes 4 s after the start: an attach slower than that, on a loaded
        # machine, would see the new program already, and no exec.)
        check(d.target_status(p.pid)["comm"] == "execer",
              "(set-up) attached before the exec")
        fail_now(True)
        wait_until(lambda: d.target_status(p.pid)["comm"] == "busy", 15, "the exec to be seen")
        check("process %d exec'd and its maps cannot be read (Permission denied)" % p.pid
              in d.log(), "maps unreadable at exec: said in the log")
        fail_now(False)
        wait_until(lambda: "pid %d: its maps read again" % p.pid in d.log(), 10,
                   "the maps to be read again")
        log("ok:   read again once they could be")
        time.sleep(1.0)
        prof = d.slice(p.pid, "--last", 1)
        check(any(";work_alpha;spin" in s for s in prof),
              "the new program's samples unwind and symbolize (%d stacks)" % len(prof))
        check(d.target_status(p.pid)["state"] == "attached", "still attached")

    # 3. The schedule's timer cannot be set.
    with Daemon(env=fault_env("timerfd_settime")) as d, Program("busy", 1) as p:
        for mode in ("alarm", "sleep"):
            r = d.ctl("attach", p.pid, "--mode", mode, check_rc=False)
            check(r.returncode != 0 and "cannot start the %s schedule: Invalid argument" % mode
                  in r.stderr,
                  "timerfd_settime failing: attach in %s mode fails saying why (%d: %r)"
                  % (mode, r.returncode, r.stderr))
            wait_until(lambda: untraced(p.pid) and not d.status()["targets"], 10,
                       "profd to release the process")
            log("ok:   the process was released")

    # ... or stops being settable while the process is sampled: no tick comes, which status
    # and the log say, and the timer is set again once it can be.
    with Daemon(env=fault_env("timerfd_settime", MARKER)) as d, Program("busy", 1) as p:
        d.ctl("attach", p.pid, "--hz", 99)
        time.sleep(0.3)
        fail_now(True)
        wait_until(lambda: d.target_status(p.pid)["sampling"].get("timer_error")
                   == "Invalid argument", 5, "status to show the timer's failure")
        log("ok: the timer cannot be set: status says so")
        check("pid %d: cannot set the timer of its alarm schedule: Invalid argument" % p.pid
              in d.log(), "... and so does the log")
        a = d.target_status(p.pid)["ticks"]
        time.sleep(0.5)
        b = d.target_status(p.pid)["ticks"]
        check(b - a <= 1, "... no tick meanwhile (%d)" % (b - a))
        fail_now(False)
        wait_until(lambda: "timer_error" not in d.target_status(p.pid)["sampling"], 5,
                   "the timer to be set again")
        a = d.target_status(p.pid)["ticks"]
        time.sleep(0.5)
        st = d.target_status(p.pid)
        check(st["ticks"] - a >= 10 and st["sampling"]["timer_failures"] >= 1,
              "set again once it can be: ticks resume (%d in 0.5 s at 99 Hz), failures "
              "counted (%d)" % (st["ticks"] - a, st["sampling"]["timer_failures"]))

    # 4. chmod of the socket fails; bind gave it its mode already.
    with Daemon(env=fault_env("chmod")) as d:
        check(os.stat(d.socket).st_mode & 0o777 == 0o666, "chmod failing: the socket is 0666")
        # (The socket exists from bind on; the warning follows the chmod after it.)
        wait_until(lambda: "chmod 0666 %s: Operation not permitted (its mode is 0666 already)"
                   % d.socket in d.log(), 10, "the failed chmod in the log")
        log("ok: ... and the failed chmod is said in the log")
        d.ctl("status")
        log("ok:   profd serves")

    # 5. No signalfd for the CPU-clock timers.
    sock = os.path.join(tmp, "timer.sock")
    env = dict(os.environ, **fault_env("signalfd"))
    r = subprocess.run([PROFD, "--socket", sock, "--config", "/dev/null",
                        "--cputime-source", "timer"], env=env, capture_output=True, text=True,
                       timeout=60 * SLOW)
    check(r.returncode == 1 and "cputime_source is timer" in r.stderr
          and "signalfd: Too many open files" in r.stderr and not os.path.exists(sock),
          "no signalfd, --cputime-source timer: profd refuses to start, saying why (%d: %r)"
          % (r.returncode, r.stderr[-300:]))
    with Daemon(env=fault_env("signalfd")) as d, Program("busy", 1) as p:
        check("no CPU-clock timers (signalfd: Too many open files)" in d.log(),
              "no signalfd, default source: a warning at start")
        d.ctl("attach", p.pid, "--mode", "cputime", "--hz", 199)
        time.sleep(1.0)
        st = d.target_status(p.pid)
        check(st["sampling"]["cputime_source"] in ("perf", "poll") and st["samples"] > 0,
              "... and cputime samples with another source (%s, %d samples)"
              % (st["sampling"]["cputime_source"], st["samples"]))
finally:
    shutil.rmtree(tmp, True)
