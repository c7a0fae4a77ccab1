"""A program and a library deleted or replaced since they were loaded unwind completely and
are symbolized (issue 10).

tests/programs/delprog (-O2, no frame pointers) runs from a copy in a temporary directory
and dlopens libdelwork.so, also copied there; its two busy threads loop in
    worker -> app_round -> delwork_run -> delwork_step -> app_callback -> app_spin
(delwork_* in the library), so every sample crosses both objects twice. After the process
started, both files are deleted, or replaced by other ELF files at the same paths (renamed
over them, as a package upgrade does), before the attach or while it is sampled. The
unwinder reads the unwind tables from the process's memory, never the files by path; the
symbolizer opens the mapped files through /proc/PID/map_files. In every case at least 99.5%
of the busy threads' samples unwind to start_thread (and the status counters say as much),
and the frames carry the functions' names.
"""
import re
import shutil
import tempfile

from harness import *

HZ = 499
NEED = 2 * HZ * 3  # samples: about 3 s of the two busy threads at HZ on an idle machine
CHAIN = ["worker", "app_round", "delwork_run", "delwork_step", "app_callback", "app_spin"]


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def start_copy(tmp):
    prog = os.path.join(tmp, "delprog")
    lib = os.path.join(tmp, "libdelwork.so")
    shutil.copy(os.path.join(PROGRAMS, "delprog"), prog)
    shutil.copy(os.path.join(PROGRAMS, "libdelwork.so"), lib)
    p = subprocess.Popen([prog, "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("ready"):
        p.kill()
        p.wait()
        fail("delprog did not start: %r" % line)
    return p, prog, lib


def remove(prog, lib):
    os.unlink(prog)
    os.unlink(lib)


def replace(prog, lib):
    """Other ELF files at the same paths, renamed over them (new inodes): another program
    and another library, whose unwind tables and symbols have nothing to do with these."""
    for src, dst in ((os.path.join(PROGRAMS, "busy"), prog),
                     (os.path.join(PROGRAMS, "libdlblock.so"), lib)):
        tmpname = dst + ".new"
        shutil.copy(src, tmpname)
        os.rename(tmpname, dst)


def mapped_state(pid, path):
    """How /proc/PID/maps shows the mapping of path: 'deleted', 'live' or None."""
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            if path + " (deleted)" in line:
                return "deleted"
            if line.rstrip().endswith(path):
                return "live"
    return None


def check_profile(what, prof, unwind):
    busy = {s: c for s, c in prof.items() if re.match(r"del-\d+-\d+;", s)}
    total = sum(busy.values())
    complete = chained = unresolved = 0
    bad = []
    for stack, count in busy.items():
        frames = stack.split(";")[1:]
        ok = (len(frames) >= 3 and frames[0] in ("__clone3", "clone3", "__clone", "clone")
              and frames[1] == "start_thread" and frames[2] == "worker")
        if ok:
            complete += count
        else:
            bad.append((count, stack))
        joined = ";" + ";".join(frames) + ";"
        if ";" + ";".join(CHAIN) + ";" in joined:
            chained += count
        if any(f.startswith("[") for f in frames):
            unresolved += count
    for c, s in sorted(bad, reverse=True)[:5]:
        log("  incomplete: %d %s" % (c, s))
    check(total >= NEED // 4, "%s: %d samples of the busy threads" % (what, total))
    check(complete >= 0.995 * total,
          "%s: %.2f%% of the busy threads' samples unwind to start_thread/worker (need 99.5%%)"
          % (what, 100.0 * complete / total))
    check(chained >= 0.95 * total,
          "%s: %.1f%% of them show the whole chain %s, named"
          % (what, 100.0 * chained / total, ";".join(CHAIN)))
    check(unresolved <= 0.005 * total,
          "%s: %d of %d with a frame not symbolized" % (what, unresolved, total))
    done = unwind["complete"]
    all_ = unwind["complete"] + unwind["truncated"] + unwind["too_deep"]
    check(all_ > 0 and done >= 0.995 * all_,
          "%s: status counts %d complete unwinds of %d (%.2f%%)"
          % (what, done, all_, 100.0 * done / max(all_, 1)))


with Daemon() as d:
    # 1 and 2: deleted, or replaced, before the attach.
    for what, change in (("deleted before attach", remove), ("replaced before attach", replace)):
        tmp = tempfile.mkdtemp(prefix="profd-deleted-")
        p, prog, lib = start_copy(tmp)
        try:
            change(prog, lib)
            check(mapped_state(p.pid, prog) == "deleted" and mapped_state(p.pid, lib) == "deleted",
                  "%s: /proc/%d/maps shows the program and the library deleted" % (what, p.pid))
            d.ctl("attach", p.pid, "--hz", HZ)
            d.wait_samples(p.pid, NEED, timeout=90)
            st = d.target_status(p.pid)
            prof = d.slice(p.pid, "--thread-ids")
            check_profile(what, prof, st["unwind"])
            d.ctl("detach", p.pid)
        finally:
            p.kill()
            p.wait()
            shutil.rmtree(tmp, ignore_errors=True)

    # 3: replaced while sampled: the samples after the change.
    what = "replaced while sampled"
    tmp = tempfile.mkdtemp(prefix="profd-deleted-")
    p, prog, lib = start_copy(tmp)
    try:
        d.ctl("attach", p.pid, "--hz", HZ)
        st0 = d.wait_samples(p.pid, NEED // 3, timeout=90)
        replace(prog, lib)
        t_change = mono_ns()
        check(mapped_state(p.pid, prog) == "deleted" and mapped_state(p.pid, lib) == "deleted",
              "%s: /proc/%d/maps shows the program and the library deleted" % (what, p.pid))
        d.wait_samples(p.pid, st0["samples"] + NEED, timeout=90)
        st = d.target_status(p.pid)
        unwind = {k: st["unwind"][k] - st0["unwind"][k]
                  for k in ("complete", "truncated", "too_deep")}
        prof = d.slice(p.pid, "--thread-ids", "--from", t_change, "--to", mono_ns())
        check_profile(what, prof, unwind)
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
