"""Python programs profiled from outside: pyapp.py (a known time split, a C extension under
Python, a generator, an asyncio coroutine, a sleeping thread) under every CPython 3.11-3.14 on
the machine (Debian's python3.11 always; pyenv's 3.11, 3.12 and 3.13 and Debian unstable's
3.14, fetched by fetch_python.py, where present), on both
sampling paths. On each path (auto: the frames read in the kernel at each sample, by eBPF; stops: the same
turned off, running threads stopped for their frames; ptrace). Checked in each run: where the
frames were read, and the Python functions in the collapsed profile in place
of the interpreter's evaluation loop, module-qualified; the split of the work thread within
5 points of 60/30/10; zlib's native frames under the Python function that called it; at least
99% of the work thread's samples complete (from start_thread through Thread._bootstrap to the
phase); the blocked thread's Python frames; and status naming the version."""
import glob
import json
import os
import sys
import time

from harness import *

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit",
                                "profile"))
import check_sentry  # noqa: E402

HZ = 199
HERE = os.path.dirname(os.path.abspath(__file__))

interpreters = []
if os.access("/usr/bin/python3.11", os.X_OK):
    interpreters.append("/usr/bin/python3.11")
root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
found = sorted(glob.glob(os.path.join(root, "versions", "3.1[123].*", "bin", "python3.1[123]")))
interpreters += found
if not found:
    log("no pyenv interpreters under %s: only Debian's python3.11 is checked" % root)
# Debian unstable's 3.14 (stripped, its evaluation loop split by GCC 16), where .ci/setup
# could fetch it (fetch_python.py; PROFD_TEST_PYTHONS: another directory of such trees).
extra = os.environ.get("PROFD_TEST_PYTHONS", "/opt/profd-tests")
newer = sorted(glob.glob(os.path.join(extra, "python3.1[1-9]", "usr", "bin", "python3.1[1-9]")))
interpreters += newer
if not newer:
    log("no CPython under %s (tests/integration/fetch_python.py fetches Debian's 3.14): "
        "3.14 is not checked" % extra)
# PROFD_TEST_PYTHON=PATH: that interpreter only.
if os.environ.get("PROFD_TEST_PYTHON"):
    interpreters = [os.environ["PROFD_TEST_PYTHON"]]
if not interpreters:
    skip("no CPython 3.11-3.14 on this machine")

# auto: running threads from the kernel's copy, their Python frames read in the kernel at the
# sample (eBPF, daemon/pykernel.h) where it loads; "stops": the same with that turned off
# (PROFD_PYTHON_BPF=0), their Python frames read in a ptrace stop, as where the kernel refuses
# the program; ptrace: every running thread stopped.
SAMPLERS = ["auto", "stops", "ptrace"]
# Under valgrind (the daemon takes a few samples a second) one interpreter, one sampler, and
# what does not need many samples: names, nesting, completeness; not the split.
WRAPPED = bool(os.environ.get("PROFD_WRAPPER"))
if WRAPPED:
    interpreters, SAMPLERS = interpreters[:1], ["auto"]
NEED = 200 if WRAPPED else 4 * HZ * 3


def start_pyapp(python, what):
    """pyapp.py under python, once it says it is ready."""
    app = subprocess.Popen([python, os.path.join(HERE, "pyapp.py")], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    if app.stdout.readline().strip() != "ready":
        app.kill()
        app.wait()
        fail("%s: pyapp did not start" % what)
    return app


def check_path(what, sampler, st, ebpf):
    """Where the running threads' Python frames were read: in the kernel at each sample (auto,
    where the program loads: no stop, every sample paired with its record), or in stops, with
    the reason in status."""
    k = (st.get("python") or {}).get("kernel") or {}
    perf = st.get("perf") or {}
    stopped = perf.get("stopped_for_python", 0)
    if sampler == "ptrace":
        return
    if sampler == "stops":
        check(k.get("frames") is False and "PROFD_PYTHON_BPF=0" in k.get("why_not", "") and
              "PROFD_PYTHON_BPF=0" in perf.get("stopped_for_python_why", "") and stopped > 0,
              "%s: running threads stopped for their Python frames (%d), status says why "
              "(%r)" % (what, stopped, perf.get("stopped_for_python_why")))
        return
    if not ebpf.get("loaded"):
        # (Not this machine's kind: CI's is root on a kernel with BPF. Said, and the
        # fallback checked instead.)
        log("%s: the eBPF program did not load here (%s): the stop path is checked"
            % (what, ebpf.get("why_not")))
        check(stopped > 0 and perf.get("stopped_for_python_why"),
              "%s: stopped for Python frames, and why (%r)"
              % (what, perf.get("stopped_for_python_why")))
        return
    paired = k.get("paired", 0)
    # A chain that fails a check would be a torn read: none. A sample whose record is missing
    # (native frames only, counted) or whose chain a fault ended: rare (one in 70 once, with
    # the daemon under valgrind).
    # (Stopped for Python frames only while the program was being loaded, on a thread of its
    # own: at the first Python target of a daemon, tens of milliseconds, seconds under
    # valgrind. Other stops, as for a native target's running threads: rare; once 127 of
    # ~1,500 in one run on a busy machine, not seen again in ten.)
    loading = perf.get("stopped_for_python_loading", 0)
    check(k.get("frames") is True and stopped == 0 and
          st["sampled"].get("stopped", 0) <= loading + 0.05 * st["sampled"].get("kernel_copy", 0)
          and paired > 0 and
          st["sampled"].get("kernel_copy", 0) >= paired and k.get("failed_check", 0) == 0 and
          k.get("missing", 0) + k.get("faulted", 0) <= max(2, 0.01 * paired),
          "%s: running threads sampled without a stop, their Python frames read in the "
          "kernel: %d samples paired with their record, %d stopped (for Python %d, while the "
          "program loaded %d; %s), %d failing a check, %d without a record, %d ended by a fault"
          % (what, paired, st["sampled"].get("stopped", 0), stopped, loading,
             {x: v for x, v in perf.items() if x.startswith("stopped") and v},
             k.get("failed_check", 0),
             k.get("missing", 0), k.get("faulted", 0)))


def run(python, sampler, first=True):
    what = "%s (%s)" % (python, sampler)
    app = start_pyapp(python, what)
    env = {"PROFD_PYTHON_BPF": "0"} if sampler == "stops" else None
    try:
        with Daemon(env=env) as d:
            d.ctl("attach", app.pid, "--hz", HZ, "--sampler",
                  "auto" if sampler == "stops" else sampler)
            # The eBPF program loads on a thread of its own at a daemon's first Python
            # target (tens of ms; seconds under valgrind): the samples judged are after it.
            deadline = time.monotonic() + 30 * SLOW
            while time.monotonic() < deadline and \
                    (d.status().get("daemon", {}).get("python_ebpf") or {}).get("why_not") == \
                    "being loaded":
                time.sleep(0.05)
            app.stdin.write("reset\n")
            app.stdin.flush()
            # Enough samples of the work thread for a split within 5 points: 4 threads a
            # tick, ~3 s at full rate, however long this machine takes.
            d.wait_samples(app.pid, NEED, timeout=120)
            app.stdin.write("report\n")
            app.stdin.flush()
            spent = json.loads(app.stdout.readline())
            st = d.target_status(app.pid)
            prof = d.slice(app.pid, "--thread-ids")
            sentry = d.ctl("slice", app.pid, "--last", "2", "--format", "sentry").stdout
            ebpf = d.status().get("daemon", {}).get("python_ebpf") or {}
        py = st.get("python") or {}
        check_path(what, sampler, st, ebpf)
        ver = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
        check(py.get("frames") is True and py.get("version") == ver,
              "%s: status says Python %s frames are read (%s)" % (what, ver, py))
        work = {s: c for s, c in prof.items() if "__main__.work" in s.split(";")}
        total = sum(work.values())
        check(total >= NEED // 8, "%s: the work thread's samples name __main__.work (%d)"
              % (what, total))
        complete = 0
        share = {"__main__.phase_a": 0, "__main__.phase_b": 0, "__main__.phase_c": 0}
        under_b = native_under_b = in_libz = gen = 0
        bad = []
        for s, c in work.items():
            fr = s.split(";")[1:]
            # The thread's root: start_thread (an interpreter run with its own C library,
            # as the fetched 3.14 is, has a stripped one: its libc frame unnamed).
            root = "start_thread" if "start_thread" in fr else next(
                (f for f in fr if f.startswith("[libc.so.6+")), None)
            ok = (root and "threading.Thread._bootstrap" in fr and
                  fr.index(root) < fr.index("threading.Thread._bootstrap") and
                  "__main__.handle" in fr and
                  not any(f == "_PyEval_EvalFrameDefault" for f in fr))
            for k in share:
                if k in fr:
                    share[k] += c
                    ok = ok and fr.index("__main__.handle") < fr.index(k)
            if ok:
                complete += c
            else:
                bad.append((c, s))
            if "__main__.phase_b" in fr:
                under_b += c
                rest = fr[fr.index("__main__.phase_b") + 1:]
                # zlib.compress: C code below the Python caller (zlib's module, libz; or the
                # wait for the GIL it released, which the asyncio thread holds meanwhile).
                if rest and not any(f.startswith("__main__.") for f in rest):
                    native_under_b += c
                if any("libz" in f or f.startswith("deflate") for f in rest):
                    in_libz += c
            if "__main__.phase_c" in fr and "__main__.gen_items" in fr and \
                    fr.index("__main__.phase_c") < fr.index("__main__.gen_items"):
                gen += c
        for c, s in sorted(bad, reverse=True)[:3]:
            log("  incomplete: %d %s" % (c, s))
        named = sum(share.values())
        check(complete >= 0.99 * total,
              "%s: %.2f%% of the work thread's samples are complete: start_thread, "
              "Thread._bootstrap, handle, the phase, no evaluation loop left (need 99%%)"
              % (what, 100.0 * complete / max(1, total)))
        # Built to spend 60/30/10; checked against the program's own measure of where its
        # time went: on a busy machine a phase's end can be late (the GIL, a CPU), so that
        # the program itself spent 65.8% in phase_a beside a CPU hog and a build (load 9.7),
        # and profd had 66.8% there. (A thread that waits for a CPU is sampled
        # once it runs: both samplers need it to run, ticks meanwhile are counted
        # still_stopping.)
        tot = sum(spent.values()) or 1
        want = {"__main__.phase_a": 60, "__main__.phase_b": 30, "__main__.phase_c": 10}
        off = []
        for k, e in want.items():
            got = 100.0 * share[k] / max(1, named)
            measured = 100.0 * spent[k[-1]] / tot
            msg = ("%s: %s %.1f%% of the rounds' samples (the program measured %.1f%%; built "
                   "for %d%%)" % (what, k, got, measured, e))
            if WRAPPED:
                log("not checked under a slow wrapper (too few samples):", msg)
            elif first and abs(got - measured) > 5:
                off.append(msg)
            else:
                check(abs(got - measured) <= 5, msg)
        if off:
            # (As test_truth: a run off by more, on a machine busy with other work, is run
            # again once and the second judged.)
            log("off by more than 5 points, run again once:", "; ".join(off))
            return False
        check(under_b and native_under_b >= 0.8 * under_b and
              (in_libz >= 0.1 * under_b or (WRAPPED and in_libz)),
              "%s: native frames under __main__.phase_b (zlib.compress) in %d of its %d "
              "samples, libz's deflate in %d" % (what, native_under_b, under_b, in_libz))
        check(gen >= 0.8 * share["__main__.phase_c"] and (gen > 0 or WRAPPED),
              "%s: the generator __main__.gen_items under __main__.phase_c (%d of %d)"
              % (what, gen, share["__main__.phase_c"]))
        # Python called back from C: sort_key above list.sort's C frames, which are above
        # the Python caller (sorting): the evaluation loop replaced on both sides.
        cb = good_cb = 0
        for s, c in prof.items():
            fr = s.split(";")
            if "__main__.sort_key" not in fr or "__main__.sorting" not in fr:
                continue
            cb += c
            between = fr[fr.index("__main__.sorting") + 1:fr.index("__main__.sort_key")]
            if between and all(not f.startswith("__main__.") for f in between) and \
                    any("sort" in f or f.startswith("[") for f in between) and \
                    "_PyEval_EvalFrameDefault" not in fr:
                good_cb += c
        # (Under valgrind the short sorting phase may get no sample at all.)
        check((cb > 0 or WRAPPED) and good_cb >= 0.95 * cb,
              "%s: Python called back from C: __main__.sort_key above list.sort's native "
              "frames, above __main__.sorting, in %d of its %d samples" % (what, good_cb, cb))
        aio = sum(c for s, c in prof.items() if "__main__.crunch" in s.split(";"))
        check(aio > 0, "%s: the asyncio coroutine __main__.crunch is named (%d samples)"
              % (what, aio))
        idle = sum(c for s, c in prof.items()
                   if "__main__.idle_wait" in s.split(";") and "threading.Thread._bootstrap" in s)
        check(idle > 0, "%s: the sleeping thread's Python frames (__main__.idle_wait: %d)"
              % (what, idle))
        # Sentry's format: valid by relay's rules; Python frames as the Python SDK writes them,
        # native ones with their addresses, in one stack.
        problems, _ = check_sentry.check(sentry.encode())
        doc = json.loads(sentry)
        frames = doc["profile"]["frames"]
        pyf = [f for f in frames if "instruction_addr" not in f]
        leaf_a = [f for f in pyf if f.get("function") == "phase_a"]
        mixed = any(any("instruction_addr" in frames[i] for i in st_) and
                    any("instruction_addr" not in frames[i] for i in st_)
                    for st_ in doc["profile"]["stacks"])
        check(not problems and leaf_a and leaf_a[0].get("module") == "__main__" and
              leaf_a[0].get("abs_path", "").endswith("/pyapp.py") and
              leaf_a[0].get("filename") == "pyapp.py" and leaf_a[0].get("lineno", 0) > 0 and
              leaf_a[0].get("in_app") is True and mixed,
              "%s: the Sentry profile passes relay's rules (%s) and has phase_a as the SDK "
              "writes it (%s), in stacks with native frames" % (what, problems[:2],
                                                               leaf_a[:1]))
        # (The module's own frame has no function object to name its module: "<module>".)
        main = sum(c for s, c in prof.items()
                   if "__main__.main_wait" in s.split(";") and
                   ("<module>" in s.split(";") or "__main__.<module>" in s.split(";")))
        check(main > 0, "%s: the main thread's __main__.main_wait under <module> (%d)"
              % (what, main))
    finally:
        app.kill()
        app.wait()


for python in interpreters:
    for sampler in SAMPLERS:
        if run(python, sampler) is False:
            run(python, sampler, first=False)

# A CPython profd cannot read (before 3.11): said in status, native stacks still sampled.
old = sorted(glob.glob(os.path.join(root, "versions", "3.[0-9].*", "bin", "python3.[0-9]")) +
             glob.glob(os.path.join(root, "versions", "3.10.*", "bin", "python3.10")))
if not old or WRAPPED:
    log("no CPython before 3.11 under %s (or under valgrind): the unreadable version is not "
        "checked" % root)
else:
    python = max(old, key=lambda p: tuple(int(x) for x in
                                           os.path.basename(os.path.dirname(os.path.dirname(p)))
                                           .split(".")))
    app = start_pyapp(python, python)
    try:
        with Daemon() as d:
            d.ctl("attach", app.pid, "--hz", HZ)
            d.wait_samples(app.pid, 200, timeout=60)
            st = d.target_status(app.pid)
            prof = d.slice(app.pid)
        py = st.get("python") or {}
        native = sum(c for s, c in prof.items() if "_PyEval_EvalFrameDefault" in s)
        check(py.get("frames") is False and "3.11" in py.get("error", "") and native > 0,
              "%s: status says profd cannot read it (%s), and its native stacks are sampled "
              "(%d samples in the evaluation loop)" % (python, py.get("error"), native))
    finally:
        app.kill()
        app.wait()

# Hostile frames: a program that makes the code object it runs look like another type (its
# ob_type set to int's, with ctypes) while it runs. The program's check refuses the chain at
# that frame (failed_check), the sample keeps its native frames only, nothing is named from
# it, and the daemon goes on sampling.
HOSTILE = r"""
import ctypes, sys
def victim():
    x = 0
    while True:
        for i in range(100):
            x += i
ctypes.c_void_p.from_address(id(victim.__code__) + 8).value = id(int)
print("ready", flush=True)
victim()
"""
if not WRAPPED:
    python = interpreters[-1]
    app = subprocess.Popen([python, "-c", HOSTILE], stdout=subprocess.PIPE, text=True)
    try:
        if app.stdout.readline().strip() != "ready":
            fail("%s: the hostile program did not start" % python)
        with Daemon() as d:
            d.ctl("attach", app.pid, "--hz", HZ)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and \
                    (d.status().get("daemon", {}).get("python_ebpf") or {}).get("why_not") == \
                    "being loaded":
                time.sleep(0.05)
            d.wait_samples(app.pid, 200, timeout=60)
            st = d.target_status(app.pid)
            ebpf = d.status().get("daemon", {}).get("python_ebpf") or {}
            prof = d.slice(app.pid)
        k = (st.get("python") or {}).get("kernel") or {}
        named = sum(c for s, c in prof.items() if "__main__.victim" in s)
        native = sum(c for s, c in prof.items() if "_PyEval_EvalFrameDefault" in s)
        if ebpf.get("loaded"):
            check(k.get("failed_check", 0) > 0 and named == 0 and native > 0 and
                  app.poll() is None,
                  "%s: a code object made to look like another type while it runs: its chains "
                  "refused by the program's check (%d), never named (%d), its native frames "
                  "sampled (%d)" % (python, k.get("failed_check", 0), named, native))
        else:
            log("%s: the eBPF program did not load here (%s): the hostile frames are not "
                "checked on it" % (python, ebpf.get("why_not")))
    finally:
        app.kill()
        app.wait()
