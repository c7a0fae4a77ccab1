"""Profiles against the program's own clocks: every mode at 97, 499 and 999 Hz, the share of
each of phases' three phases within 2 points of where that run's threads spent their time
(wall time for alarm, sleep and event; CPU time for cputime), on the machine as it is and on
a busy one (more CPU-bound threads than CPUs: threads wait for a CPU in the middle of their
work, and a wall-clock profile must put each wait where it happens).

phases (tests/programs/phases.c) loops over a 600 us, a 300 us and a 150 us phase (the last
a qsort of an 8 KiB array on its stack: a deeper stack, a larger copy), an iteration close
to the 999 Hz interval, and reads its clocks at every phase boundary; asked on stdin, it says
how much wall and CPU time its workers spent in each phase so far. A profile is the slice of
exactly the window between two such answers.

On the machine as it is, one program of two workers (one per CPU) at a time. Busy: the three
wall-clock modes at once, each on a program of its own (six workers on two CPUs), and
cputime beside two CPU hogs."""
import sys
from harness import *

PHASES = ("phase_long", "phase_mid", "phase_short")
POINTS = 2.0
WALL_MODES = ("alarm", "sleep", "event")
# Samples of the workers in the window. At 97 Hz ticks are 10 ms apart and the phase each
# finds is independent of the last one's: the shares' noise is binomial, 0.8 points sd for
# the 58% phase at 3 800 samples, so 2 points is 2.5 sd; at the higher rates consecutive
# ticks sweep the 1 ms loop and the noise is lower. A run off by more than 2 points is
# repeated once and the second judged: a bias fails both, chance both about once in 10^4.
SAMPLES = {97: 3800, 499: 6000, 999: 8000}
WORKERS = 2
HOGS = 2


def snap(p):
    p.send("snap")
    while True:
        f = p.readline().split()
        if f and f[0] == "snap":
            return [int(x) for x in f[1:]]


def shares(values):
    total = sum(values)
    return [100.0 * v / total for v in values] if total else None


def profile_shares(prof):
    """Shares of the phases in the workers' samples (those in none, the loop between them or
    a stack cut short, are left out, as the program's clocks leave that time out)."""
    counts = [0, 0, 0]
    for stack, n in prof.items():
        if not stack.startswith("phases-"):
            continue
        frames = stack.split(";")
        for i, f in enumerate(PHASES):
            if f in frames:
                counts[i] += n
                break
    return shares(counts), sum(counts)


def fmt(v):
    return "/".join("%.1f" % x for x in v)


def measure(d, runs, hz):
    """runs: [(mode, Program)], sampled at once. Returns [(profile shares, samples, truth
    shares, status)] in the same order."""
    for mode, p in runs:
        d.ctl("attach", p.pid, "--mode", mode, "--hz", hz)
    for mode, p in runs:
        d.wait_samples(p.pid, WORKERS * 10, timeout=30)
    start = {p.pid: d.raw_target_status(p.pid)["samples"] for _, p in runs}
    a = {p.pid: snap(p) for _, p in runs}

    # Enough samples of each program, at whatever rate this machine allows (its main
    # thread, blocked in a read, takes one per tick in the wall-clock modes).
    def enough():
        for mode, p in runs:
            per_tick = WORKERS + (mode != "cputime")
            want = SAMPLES[hz] * per_tick // WORKERS
            if d.raw_target_status(p.pid)["samples"] - start[p.pid] < want:
                return False
        return True
    wait_until(enough, 300, "%d samples of each program at %d Hz" % (SAMPLES[hz], hz),
               interval=0.25)
    b = {p.pid: snap(p) for _, p in runs}
    out = []
    for mode, p in runs:
        r = d.ctl("slice", p.pid, "--from", a[p.pid][0], "--to", b[p.pid][0])
        st = d.target_status(p.pid)
        d.ctl("detach", p.pid)
        ours, n = profile_shares(parse_collapsed(r.stdout))
        wall = [b[p.pid][1 + i] - a[p.pid][1 + i] for i in range(3)]
        cpu = [b[p.pid][4 + i] - a[p.pid][4 + i] for i in range(3)]
        truth = shares(cpu if mode == "cputime" else wall)
        if ours is None or truth is None:
            fail("%s at %d Hz: no samples of the phases in the window (%s)" %
                 (mode, hz, r.stderr))
        perf = st.get("perf", {})
        log("%-7s %3d Hz %5d samples: profile %s, truth %s (preempted %s, latest %s, "
            "across waits %s, one-shots %s)" %
            (mode, hz, n, fmt(ours), fmt(truth), perf.get("preempted"), perf.get("latest"),
             perf.get("latest_across_waits"), perf.get("oneshot_asked")))
        out.append((ours, n, truth))
    return out


def judge(modes, hz, busy):
    """Each mode of `modes` at hz, at once (each on a program of its own), against the truth;
    up to two runs more when any is off by more than POINTS, the last judged. (CI once saw
    cputime at 97 Hz beside the hogs 2.8 and 2.6 points off in two runs in a row, the
    machine busy with the rest of the suite; 0.9-1.6 in its other runs.)"""
    for attempt in (1, 2, 3):
        hs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
              for _ in range(HOGS if busy == "hogs" else 0)]
        try:
            with Daemon() as d:
                progs = [Program("phases", WORKERS) for _ in modes]
                try:
                    results = measure(d, list(zip(modes, progs)), hz)
                finally:
                    for p in progs:
                        p.kill()
        finally:
            for h in hs:
                h.kill()
                h.wait()
        offs = [max(abs(o - t) for o, t in zip(ours, truth)) for ours, _, truth in results]
        if max(offs) <= POINTS or attempt == 3:
            break
        log("(%s at %d Hz: off by %.1f points: run again)" % (
            "/".join(modes), hz, max(offs)))
    where = {None: "", "hogs": " beside %d CPU hogs" % HOGS,
             "together": " (%d programs at once: %d workers on %d CPUs)" % (
                 len(modes), len(modes) * WORKERS, os.cpu_count())}[busy]
    for mode, (ours, n, truth), off in zip(modes, results, offs):
        check(off <= POINTS,
              "%s at %d Hz%s: each phase's share within %.0f points of the program's own "
              "clocks (profile %s, truth %s, %d samples)" %
              (mode, hz, where, POINTS, fmt(ours), fmt(truth), n))


only = os.environ.get("TRUTH_ONLY")  # "alarm", "999", "busy"...: a maintainer's rerun of part


def wanted(*keys):
    return not only or only in keys


for hz in (999, 499, 97):
    for mode in WALL_MODES + ("cputime",):
        if wanted(mode, str(hz), "quiet"):
            judge((mode,), hz, None)
for hz in (999, 499, 97):
    if wanted("busy", str(hz), *WALL_MODES):
        judge(WALL_MODES, hz, "together")
    if wanted("busy", str(hz), "cputime"):
        judge(("cputime",), hz, "hogs")
