"""Go programs: complete stacks and names from the Go runtime's own table (.gopclntab).

tests/programs/go/goprog.go is built here with each Go toolchain Debian packages on this
machine (golang-go's 1.19; golang-1.2x-go from bookworm-backports: the 1.20+ table layout),
with and without cgo, with and without -ldflags=-s -w (no symbols, no DWARF: names only from
.gopclntab), one of them position independent. Its workers are goroutines locked to their
threads, looping over leafHeavy (2M rounds in Go), leafLight (1M) and leafC (1M rounds in C
through cgo, or in Go); it reports its threads' CPU time in each leaf; one more goroutine
blocks in read(2) on its own stack.

Each build is sampled at 199 Hz on the wall clock (alarm: running threads from the kernel's
copy, blocked ones from /proc) and per CPU time (cputime); two of them by ptrace stops too:
- every stack complete: down to runtime.goexit (goroutines), runtime.mstart or
  runtime.rt0_go (system stacks) or runtime.mcall (the scheduler on g0), but for switches
  of stacks not followed yet (KNOWN_ENDS, at most 0.5%; 1% by ptrace stops); a worker's
  stack holds its goroutine's function under runtime.goexit, the blocked goroutine's
  main.blocker. Under cgo, the goroutine beneath a C frame is copied by the kernel at the
  sample (eBPF) or read in the stop: 90% of such samples have its frames, never another
  moment's;
- cputime: each leaf's share within 3 points of the program's CPU clock;
- the Go functions named in stripped builds, with file and line: speedscope's frame, the
  flame graph's boxes, go tool pprof's lines.
"""
import glob
import json
import re
import shutil
import subprocess
import tempfile

from harness import *

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "programs", "go")
HZ = 199
LEAVES = ("main.leafHeavy", "main.leafLight", "main.leafC")
TOPS = ("runtime.goexit", "runtime.mstart", "runtime.rt0_go", "runtime.mcall")
# Where an unwind still ends early (gounwind.c; each a switch to another stack that is read
# only at the unwind, after the sample): Go's signal handler on the signal stack (SIGURG
# preemptions; libc's restorer __restore_rt under cgo), the vDSO call's switch to g0 (nanotime1, walltime, time.now), the runtime's code on g0
# for a goroutine (systemstack, morestack growing a stack), the scheduler switching to a
# goroutine (gogo). Bounded below.
# A signal frame anywhere: the interrupted code's stack is another one (the handler runs on
# the signal stack), read only where it is in the copy.
SIGNAL = ("__restore_rt", "runtime.sigreturn", "runtime.sigreturn__sigaction",
          "runtime.sigtramp", "runtime.cgoSigtramp")
KNOWN_ENDS = ("runtime.sigtramp", "runtime.cgoSigtramp", "runtime.sigreturn",
              "runtime.sigreturn__sigaction", "__restore_rt",
              "runtime.nanotime1", "runtime.walltime", "time.now",
              "runtime.systemstack", "runtime.morestack", "runtime.gogo")


def toolchains():
    """(version, go binary) of each Go toolchain installed from Debian's packages."""
    out = []
    for go in sorted(glob.glob("/usr/lib/go-1.*/bin/go")):
        r = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True)
        if r.returncode == 0:
            out.append((r.stdout.strip(), go))
    return out


def build(go, ver, cgo, strip, pie, outdir):
    name = "goprog-%s%s%s%s" % (ver, "-cgo" if cgo else "", "-s" if strip else "",
                               "-pie" if pie else "")
    exe = os.path.join(outdir, name)
    env = dict(os.environ, CGO_ENABLED="1" if cgo else "0", GOTOOLCHAIN="local",
               GOPROXY="off", GOFLAGS="-mod=mod", GOTELEMETRY="off",
               # (One cache for the machine's build directories: Go 1.20+ compiles its
               # standard library on the first build, ~1 minute here.)
               GOCACHE=os.path.join(tempfile.gettempdir(), "profd-test-go-cache", ver),
               GOPATH=os.path.join(outdir, "gopath"))
    args = [go, "build", "-o", exe]
    if strip:
        args.append("-ldflags=-s -w")
    if pie:
        args.append("-buildmode=pie")
    r = subprocess.run(args + ["."], cwd=SRC, env=env, capture_output=True, text=True)
    check(r.returncode == 0, "%s builds (%s)" % (name, r.stderr.strip()[-500:]))
    if strip:
        secs = subprocess.run(["readelf", "-SW", exe], capture_output=True, text=True).stdout
        check(".symtab" not in secs and ".debug_" not in secs,
              "%s: no symbol table, no DWARF" % name)
    return name, exe


def report(p):
    p.send("report")
    line = p.readline(timeout=30)
    f = line.split()
    if not f or f[0] != "split":
        fail("goprog's report: %r" % line)
    return {"main." + k: int(v) for k, v in (x.split("=") for x in f[1:])}


def frames_of(stack):
    return stack.split(";")[1:]  # (the first is the process's name)


def run(d, name, exe, cgo, sampler, mode, again=True, go_bpf=True):
    tag = "%s (%s, %s)" % (name, sampler, mode)
    with Program(exe, 3) as p:
        # (cputime at 499 Hz: the workers' CPU gives its samples, ~2 CPUs' worth at most.)
        args = ["attach", p.pid, "--hz", HZ if mode == "alarm" else 499, "--mode", mode]
        if sampler != "auto":
            args += ["--sampler", sampler]
        before = report(p)
        d.ctl(*args)
        t0 = time.monotonic()
        # Running threads' goroutines beneath their system stacks (a cgo call) are read by
        # the kernel at the sample (gokernel.h) once profd has found the runtime (its first
        # unwinds) and attached its eBPF program: from when status says so.
        gok = {}
        if sampler != "ptrace":
            def kernel_state():
                gok.update(d.target_status(p.pid).get("go") or {})
                return gok.get("kernel") or gok.get("why_not", "being loaded") not in (
                    "", "the eBPF program is being loaded")
            wait_until(kernel_state, 60, "the Go runtime found (status go)")
        t_kernel = time.monotonic()
        # alarm: ~7 threads a tick (3 busy workers, the blocked reader, the runtime's idle
        # ones); cputime: the workers' CPU. The shares need ~4000 of the workers' samples:
        # a share's standard error is then under 0.8 points (3 points are 4 of them).
        d.wait_samples(p.pid, 10000 if mode == "alarm" else 4000, timeout=240)
        after = report(p)
        st = d.target_status(p.pid)
        prof = d.slice(p.pid, "--last", 600)
        since_kernel = d.slice(p.pid, "--last", "%.1f" % max(1.0, time.monotonic() - t_kernel - 0.5))
        d.ctl("slice", p.pid, "--last", 600, "--format", "pprof", "-o",
              os.path.join(d.dir, name + ".pb.gz"))
        ss = json.loads(d.ctl("slice", p.pid, "--last", 600, "--format", "speedscope").stdout)
        svg = d.ctl("slice", p.pid, "--last", 600, "--format", "flamegraph").stdout
        secs = time.monotonic() - t0
    total = sum(prof.values())
    log("%s: %d samples in %.1f s; paths %s; unwind %s"
        % (tag, total, secs, {k: v["samples"] for k, v in st["paths"].items()}, st["unwind"]))
    # Completeness.
    incomplete, strays, cgo_unread, known_ends, workers, blocked = [], [], 0, 0, 0, 0
    ends, end_stacks = {}, []
    shares = {k: 0 for k in LEAVES}
    for stack, n in prof.items():
        fr = frames_of(stack)
        # (Preempted in newstack: off its thread; 1.22 inlines gopreempt_m there.)
        desched = any(f.split("_[i]")[0] in ("runtime.gopreempt_m", "runtime.preemptPark",
                                             "runtime.goschedImpl") for f in fr)
        # (A thread of C code's, cgo's threads before they enter Go: from clone3 and
        # start_thread; or just created, with not one instruction of its own run yet:
        # clone3's return is its whole stack, as unwind.c says.)
        born = bool(fr) and fr[0] in ("clone3", "__clone3", "clone", "__clone") and \
            (len(fr) == 1 or fr[1] == "start_thread")
        if not fr or not (fr[0] in TOPS or (fr[0] == "runtime.morestack" and desched) or born):
            if cgo and fr and fr[0] == "runtime.asmcgocall":
                cgo_unread += n
            elif fr and (fr[0] in KNOWN_ENDS or any(f in SIGNAL for f in fr)):
                known_ends += n
                ends[fr[0]] = ends.get(fr[0], 0) + n
                end_stacks.append((n, stack))
            else:
                incomplete.append((n, stack))
            continue
        if "main.work" in fr:
            workers += n
            # Frames read live across a cgo call are the call's, not another moment's.
            if "runtime.asmcgocall" in fr and "main.leafC;main._Cfunc_cspin;runtime.cgocall;" \
                    "runtime.asmcgocall;" not in stack:
                strays.append(stack)
            g = fr[1] if len(fr) > 1 else ""
            if not (fr[0] == "runtime.goexit" and
                    (fr[1:3] == ["runtime.main", "main.main"] or re.match(r"main\.main\.func\d+$", g))):
                strays.append(stack)
            for k in LEAVES:
                if k in fr:
                    shares[k] += n
        if "main.blocker" in fr:
            blocked += n
            if fr[0] != "runtime.goexit":
                strays.append(stack)
    check(not strays, "%s: every worker's stack is its goroutine's (main.main's or main.main."
          "funcN) from runtime.goexit, the blocked goroutine's too; a cgo call's under "
          "main.leafC;main._Cfunc_cspin (not: %s)" % (tag, strays[:3]))
    for n, s in sorted(incomplete, reverse=True)[:5]:
        log("  incomplete: %d %s" % (n, s))
    for n, s in sorted(end_stacks, reverse=True)[:3]:
        log("  at a switch not followed: %d %s" % (n, s))
    # (By ptrace stops a thread is stopped again for every signal it gets, Go's preemption
    # signal too (SIGURG, every 10 ms to each busy goroutine): the tick after such a stop
    # often finds the thread in the handler it was just let into (1.5% of the samples with a
    # sanitized daemon). The handler, its restorer, a stack growing and nanotime1's switch
    # are crossed from the goroutine copied at the sample, by the kernel or in the stop:
    # none left in 15 of 16 runs here, 3 in 10000 in the other. Where the kernel refuses the
    # Go programs, the kernel's copies cross none of them.)
    bound = 0.01 if sampler == "ptrace" or not go_bpf else 0.005
    check(not incomplete and known_ends <= bound * total,
          "%s: every stack complete, down to %s, but for %d of %d at a switch of stacks not "
          "followed yet (%s; need <= %d%%) (%d others: %s)"
          % (tag, "/".join(TOPS), known_ends, total, ends, 100 * bound,
             sum(n for n, _ in incomplete), [s for _, s in incomplete[:3]]))
    # A cgo call's goroutine frames: by ptrace stops read right after the thread runs again,
    # before the C call (~3 ms) returns; from the kernel's copy, copied by the kernel at the
    # sample (eBPF, gokernel.h) from when profd found the runtime (its first unwinds; before
    # that, and where the kernel refuses the program, read at the unwind, after the sample,
    # when most C calls have returned: two in three to six in seven were lost so). Bound:
    # 90% read, over the time since status said the kernel reads them.
    if cgo:
        in_c = sum(n for s, n in prof.items() if "main.leafC" in s) + cgo_unread
        log("%s: %d of %d samples in C without the goroutine's frames (status go: %s)"
            % (tag, cgo_unread, in_c, gok))
        late = sum(n for s, n in since_kernel.items() if "cspin" in s)
        late_unread = sum(n for s, n in since_kernel.items()
                          if frames_of(s)[:1] == ["runtime.asmcgocall"])
        if sampler == "ptrace":
            check(in_c > 0 and cgo_unread <= 0.1 * in_c,
                  "%s: C frames under cgo: the goroutine's frames beneath read for 90%% by "
                  "stops (%d of %d without them)" % (tag, cgo_unread, in_c))
        elif not go_bpf:
            log("%s: %d of %d C samples without the goroutine's frames, read at the unwind"
                % (tag, cgo_unread, in_c))
            check(not gok.get("kernel") and "PROFD_GO_BPF=0" in gok.get("why_not", ""),
                  "%s: PROFD_GO_BPF=0: status says the goroutines are read at the unwind "
                  "(%s)" % (tag, gok))
        elif gok.get("kernel"):
            check(late > 0 and late_unread <= 0.1 * late,
                  "%s: C frames under cgo: the goroutine's frames beneath copied by the kernel "
                  "at the sample for 90%% (%d of %d without them since status said so)"
                  % (tag, late_unread, late))
        else:
            log("%s: not checked: the goroutine beneath C code is not read by the kernel "
                "here (%s)" % (tag, gok.get("why_not")))
        check(any("runtime.asmcgocall" in s and "main.leafC" in s and "cspin" in s
                  for s in prof),
              "%s: mixed stacks: goroutine ... main.leafC;main._Cfunc_cspin;runtime.cgocall;"
              "runtime.asmcgocall;...cspin (C)" % tag)
    check(workers > 0 and (blocked > 0 or mode == "cputime"),
          "%s: the workers' and (alarm) the blocked goroutine's stacks sampled (%d, %d)"
          % (tag, workers, blocked))
    # Names with file and line: speedscope's frames (a function's first line sampled), the
    # flame graph's boxes (their lines, on the details line), pprof's lines: spin's own lines,
    # its `func` line included (its prologue, where Go's preemption signal often lands: a
    # sample in the handler, followed into spin since the handler is crossed; CI, ASan: 31).
    want_line = next(i for i, l in enumerate(open(os.path.join(SRC, "goprog.go")), 1)
                     if l.startswith("func spin("))
    spin = [f for f in ss["shared"]["frames"] if f["name"] == "main.spin"]
    check(len(spin) == 1 and spin[0].get("file", "").endswith("/goprog.go") and
          want_line <= spin[0].get("line", 0) < want_line + 6,
          "%s: speedscope's main.spin frame at goprog.go:%d-%d (%s)"
          % (tag, want_line, want_line + 5, spin))
    srcs = re.findall(r'data-src="([^"]*)"><title>main\.spin ', svg)
    check(srcs and all(re.match(r".*/goprog\.go:(\d+)(-\d+)?$", x) and
                       want_line <= int(re.match(r".*:(\d+)", x).group(1)) < want_line + 6
                       for x in srcs),
          "%s: the flame graph's main.spin boxes at goprog.go's lines (%s)" % (tag, srcs[:3]))
    if GO:
        r = subprocess.run([GO, "tool", "pprof", "-lines", "-top", "-nodecount=40",
                            os.path.join(d.dir, name + ".pb.gz")],
                           capture_output=True, text=True)
        check(re.search(r"main\.spin .*goprog\.go:(\d+)", r.stdout) and
              all(want_line <= int(m) < want_line + 6
                  for m in re.findall(r"main\.spin .*goprog\.go:(\d+)", r.stdout)),
              "%s: go tool pprof shows main.spin at goprog.go's lines %d-%d\n%s"
              % (tag, want_line, want_line + 5, r.stdout[-1500:]))
    if mode != "cputime":
        return
    # cputime's profile against the program's own clock, its threads' CPU time in each leaf,
    # over the same time. (Not alarm's: on this machine's 2 CPUs the 3 workers wait their
    # turns, and not evenly: a thread back from a cgo call or Go's scheduler is run first by
    # the kernel, preempting one in a Go leaf, whose waits the wall clock counts and its CPU
    # time does not: alarm's shares were 3-5 points off the CPU clock, cputime's within 1.)
    # (Cgo calls whose goroutine frames were not read count for leafC: they are its C code.)
    shares["main.leafC"] += cgo_unread if cgo else 0
    spent = {k: after[k] - before[k] for k in LEAVES}
    known = {k: spent[k] / float(sum(spent.values())) for k in LEAVES}
    tot = sum(shares.values())
    off = {k: (100.0 * shares[k] / tot, 100.0 * known[k]) for k in LEAVES}
    if again and any(abs(m - w) > 3 for m, w in off.values()):
        # (As test_python: a run off by more than the bound is run again once, the second
        # judged; both are logged.)
        log("%s: shares %s (profile, program's clock): run again" % (tag, off))
        return run(d, name, exe, cgo, sampler, mode, again=False)
    for k, (mine, want) in off.items():
        check(abs(mine - want) <= 3,
              "%s: %s %.1f%% of the workers' samples, the program's clock says %.1f%%"
              % (tag, k, mine, want))

tcs = toolchains()
if not tcs:
    skip("no Go toolchain (Debian's golang-go) on this machine")
GO = tcs[0][1]
log("Go toolchains:", ", ".join(v for v, _ in tcs))
out = tempfile.mkdtemp(prefix="profd-go-")
try:
    builds = []
    for i, (ver, go) in enumerate(tcs):
        # Every combination with the first (Debian's golang-go); two with each other one.
        combos = ([(False, False, False), (False, True, False), (True, False, False),
                   (True, True, False)] if i == 0 else
                  [(False, False, False), (True, True, True)])
        for cgo, strip, pie in combos:
            builds.append((build(go, ver, cgo, strip, pie, out), cgo))
    with Daemon() as d:
        for (name, exe), cgo in builds:
            run(d, name, exe, cgo, "auto", "alarm")
            run(d, name, exe, cgo, "auto", "cputime")
        # The ptrace stops' path: the first toolchain's cgo build, and the newest's.
        for (name, exe), cgo in [builds[3], builds[-1]] if len(builds) > 4 else [builds[-1]]:
            run(d, name, exe, cgo, "ptrace", "alarm")
            run(d, name, exe, cgo, "ptrace", "cputime")
    # Where the kernel refuses the Go programs (PROFD_GO_BPF=0 makes it so): the goroutine
    # beneath C code read at the unwind, never another moment's; every stack complete but
    # for those and the switches only the kernel's copy of the goroutine follows.
    (name, exe), cgo = next((b for b in builds if b[1]), builds[0])
    with Daemon(env={"PROFD_GO_BPF": "0"}) as d:
        run(d, name, exe, cgo, "auto", "alarm", go_bpf=False)
finally:
    shutil.rmtree(out, ignore_errors=True)
