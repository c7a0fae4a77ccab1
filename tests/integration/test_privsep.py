"""Privilege separation: what targets control is parsed by profd-symbolizer, never by profd.

- Both helpers (one reads ELF headers for the loop thread, one symbolizes slices) run without
  privileges: uid and gid nobody (profd runs as root here), every capability set empty,
  no_new_privs, seccomp filter mode, not dumpable, limits on address space, CPU time,
  processes; children of profd in a process group of their own; the symbols helper at nice
  10, the modules helper at profd's (the loop thread waits for it).
- A helper that crashes in the middle of a slice costs that slice's symbols only: the reply
  says why, the frames stay [module+0xOFF], the daemon logs it, the next slice is symbolized
  by a new helper; sampling goes on meanwhile.
- A helper that hangs is killed after symbolizer_timeout, with the same outcome.
- A helper that dies while idle costs nothing: the next request starts another.
"""
import os
import signal
import subprocess
from harness import *

HELPER = os.path.join(BUILD, "daemon", "profd-symbolizer")


def helpers(d):
    return {h["role"]: h for h in d.status()["daemon"]["symbolizers"]}


def running_helper(d, role, pid):
    """The helper of role, started by slices of process pid if none runs (one may have been
    killed by a timeout on a loaded machine). Never pid 0: os.kill(0, ...) would signal this
    test's own process group."""
    h = helpers(d)[role]
    for _ in range(5):
        if h["pid"] > 0:
            return h
        d.slice(pid, "--last", 1)
        h = helpers(d)[role]
    fail("no %s helper running after 5 slices (%r)" % (role, h))


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def limits(pid):
    out = {}
    with open("/proc/%d/limits" % pid) as f:
        next(f)
        for line in f:
            name = line[:26].strip()
            out[name] = line[26:47].strip()
    return out


def functions(prof):
    return {f for stack in prof for f in stack.split(";")}


def slice_in_background(d, pid):
    return subprocess.Popen([PROFCTL, "--socket", d.socket, "slice", str(pid), "--last", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_request_sent(d):
    """profd waits for the (stopped) symbols helper's answer."""
    wait_until(lambda: helpers(d)["symbols"]["waiting"], 30,
               "profd to wait for the stopped symbolizer's answer")


with Daemon("--symbolizer-timeout", "60") as d, Program("busy", 2) as b:
    d.ctl("attach", b.pid, "--hz", 199)
    wait_until(lambda: d.target_status(b.pid)["samples"] >= 100, 30, "samples")
    prof = d.slice(b.pid, "--last", 2)
    check({"work_alpha", "work_beta", "main"} <= functions(prof),
          "a slice is symbolized through the helper (%d stacks)" % len(prof))

    # 1. What the helpers are allowed.
    hs = helpers(d)
    check(set(hs) == {"modules", "symbols"} and all(h["pid"] > 0 for h in hs.values()),
          "status lists both helpers, running (%r)" % hs)
    for role, h in hs.items():
        st = proc_status(h["pid"])
        caps = {k: int(st[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
        check(st["Uid"].split() == ["65534"] * 4 and st["Gid"].split() == ["65534"] * 4 and
              st["Groups"].strip() == "",
              "%s helper: uid and gid nobody, no groups (%s / %s)" % (role, st["Uid"], st["Gid"]))
        check(not any(caps.values()), "%s helper: every capability set empty (%r)" % (role, caps))
        check(st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2",
              "%s helper: no_new_privs, seccomp filter mode (%s, %s)"
              % (role, st["NoNewPrivs"], st["Seccomp"]))
        check(int(st["PPid"]) == d.pid, "%s helper: a child of profd" % role)
        # The worker thread blocks every signal and profd ignores SIGPIPE: a mask and ignored
        # signals survive execve, and a helper that blocked SIGSEGV could not even be killed
        # by it.
        check(int(st["SigBlk"], 16) == 0 and int(st["SigIgn"], 16) == 0,
              "%s helper: no signal blocked or ignored (%s, %s)" % (role, st["SigBlk"], st["SigIgn"]))
        check(os.getpgid(h["pid"]) == h["pid"],
              "%s helper: a process group of its own (Ctrl-C on profd's terminal is not for it)"
              % role)
        # Not dumpable: the kernel gives its /proc files to root, whatever its uid.
        check(os.stat("/proc/%d/status" % h["pid"]).st_uid == 0,
              "%s helper: not dumpable (no one but root may ptrace it)" % role)
        lim = limits(h["pid"])
        check(lim["Max cpu time"] == "3600" and lim["Max core file size"] == "0" and
              lim["Max processes"] == "0",
              "%s helper: limits on CPU time, core dumps, processes (%r)"
              % (role, {k: lim[k] for k in ("Max cpu time", "Max core file size",
                                            "Max processes")}))
        if not d.sanitized():
            check(lim["Max address space"] == str(4 << 30),
                  "%s helper: address space limited to symbolizer_memory (%s)"
                  % (role, lim["Max address space"]))
        # Its priority: the symbols helper's below profd's (symbolizing can wait); the
        # modules helper's profd's own, since the loop thread waits for its answers (at nice
        # 10 beside CPU hogs an attach waited 4-18 ms per file for it).
        nice = int(open("/proc/%d/stat" % h["pid"]).read().rsplit(")", 1)[1].split()[16])
        dnice = int(open("/proc/%d/stat" % d.pid).read().rsplit(")", 1)[1].split()[16])
        check(nice == (dnice if role == "modules" else 10),
              "%s helper: nice %d (profd's: %d)" % (role, nice, dnice))
        # Its descriptors: the standard three, its socket to profd, and files profd gave it
        # (never a directory: it has nothing to look up paths from).
        for fd in os.listdir("/proc/%d/fd" % h["pid"]):
            target = os.readlink("/proc/%d/fd/%s" % (h["pid"], fd))
            if int(fd) == 3:
                check(target.startswith("socket:"), "%s helper: fd 3 is its socket" % role)
            elif int(fd) > 3:
                check(not os.path.isdir("/proc/%d/fd/%s" % (h["pid"], fd)),
                      "%s helper: fd %s is not a directory (%s)" % (role, fd, target))

    # 2. A crash in the middle of a slice: that slice's frames stay unsymbolized, the reply
    # says why; the next slice has its symbols again; sampling never stopped.
    sym = helpers(d)["symbols"]
    # Modules it already has are answered from profd's cache: another program's are not.
    with Program("sleeper", 1) as c:
        d.ctl("attach", c.pid, "--hz", 199)
        wait_until(lambda: d.target_status(c.pid)["samples"] >= 50, 30, "samples of the second")
        sym = running_helper(d, "symbols", b.pid)
        os.kill(sym["pid"], signal.SIGSTOP)
        # The slice waits for the stopped helper; the daemon goes on sampling meanwhile.
        samples_before = d.target_status(c.pid)["samples"]
        p = slice_in_background(d, c.pid)
        wait_request_sent(d)
        wait_until(lambda: d.target_status(c.pid)["samples"] > samples_before + 20, 30,
                   "sampling to go on while the symbolizer is stopped")
        # A crash: SIGILL (a sanitizer would catch a SIGSEGV and report it as its own
        # error). A stopped process keeps it pending until it continues (it dumps core).
        os.kill(sym["pid"], signal.SIGILL)
        os.kill(sym["pid"], signal.SIGCONT)
        out, err = p.communicate(timeout=60 * SLOW)
        check(p.returncode == 0, "the slice is answered although its symbolizer crashed (%d %s)"
              % (p.returncode, err.strip()))
        fns = functions(parse_collapsed(out))
        check("burn" not in fns and any(f.startswith("[sleeper+0x") for f in fns),
              "its frames stay unsymbolized, as [module+0xOFF] (%s)" % sorted(fns))
        crash = "signal 4 (ILL)"
        check("not symbolized" in err and crash in err,
              "profctl says why: %s" % [l for l in err.splitlines() if "symbol" in l])
        check(crash in d.log() and "restarted" in d.log(),
              "the daemon logs the crash and the restart")
        h2 = helpers(d)["symbols"]
        check(h2["failures"] == sym["failures"] + 1 and crash in h2["last_error"],
              "status counts the failure and says what it was (%r)" % h2)
        prof = d.slice(c.pid, "--last", 2)
        h3 = helpers(d)["symbols"]
        check("burn" in functions(prof) and h3["pid"] not in (0, sym["pid"]) and
              h3["starts"] == sym["starts"] + 1,
              "the next slice is symbolized by a new helper (pid %d, %d starts)"
              % (h3["pid"], h3["starts"]))

    # 3. Killed while idle: nothing lost, the next request starts another helper.
    mod = helpers(d)["modules"]
    check(mod["pid"] > 0, "the modules helper runs (%r)" % mod)
    os.kill(mod["pid"], signal.SIGKILL)
    with Program("spinner", 60) as e:
        d.ctl("attach", e.pid)
        wait_until(lambda: d.target_status(e.pid)["samples"] >= 20, 30, "samples of the third")
        prof = d.slice(e.pid, "--last", 2)
        m2 = helpers(d)["modules"]
        check("main" in functions(prof) and m2["starts"] == mod["starts"] + 1 and
              m2["pid"] not in (0, mod["pid"]),
              "a helper killed while idle is replaced at the next request, nothing lost "
              "(%r)" % m2)

# 4. A helper that hangs is killed after symbolizer_timeout.
with Daemon("--symbolizer-timeout", "2") as d, Program("busy", 1) as b:
    d.ctl("attach", b.pid, "--hz", 199)
    wait_until(lambda: d.target_status(b.pid)["samples"] >= 50, 30, "samples")
    d.slice(b.pid, "--last", 1)  # the helper is running, and has this process's modules
    with Program("sleeper", 1) as c:
        d.ctl("attach", c.pid, "--hz", 199)
        wait_until(lambda: d.target_status(c.pid)["samples"] >= 50, 30, "samples")
        sym = running_helper(d, "symbols", b.pid)
        os.kill(sym["pid"], signal.SIGSTOP)
        t0 = time.monotonic()
        p = slice_in_background(d, c.pid)
        out, err = p.communicate(timeout=60 * SLOW)
        took = time.monotonic() - t0
        fns = functions(parse_collapsed(out))
        check(p.returncode == 0 and "burn" not in fns and
              "did not answer within 2.0 s" in err,
              "a hung symbolizer is killed after the timeout; the reply says so (%.1f s: %s)"
              % (took, [l for l in err.splitlines() if "symbol" in l]))
        check_timing(took >= 1.9, "... after the 2 s timeout, not before (%.1f s)" % took)
        wait_until(lambda: not os.path.exists("/proc/%d" % sym["pid"]), 10,
                   "the hung helper to be killed and reaped")
        # The new helper reads the modules afresh: under ASan on a loaded machine that can
        # take longer than the 2 s timeout again (then that module is given up after its
        # second failure, and the others are symbolized). Symbols must come back within a
        # few slices, each answered.
        tries = []
        for _ in range(5):
            tries.append(functions(d.slice(c.pid, "--last", 1)))
            if "burn" in tries[-1]:
                break
        check("burn" in tries[-1], "the next slices are symbolized again (%d tries)" % len(tries))
