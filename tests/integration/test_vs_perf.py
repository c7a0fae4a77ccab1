"""profd's CPU split of busy matches what `perf record --call-graph dwarf` measures on the
same program: each of work_alpha/beta/gamma within a few percentage points."""
import re
import shutil
from harness import *

SECS = 4
FUNCS = ("work_alpha", "work_beta", "work_gamma")
POINTS = 3.0


def perf_record(pid, out):
    """perf record of pid for SECS, started now (it runs beside profd, over the same time)."""
    return subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999",
                             "--call-graph", "dwarf,65528", "-p", str(pid), "-o", out, "--",
                             "sleep", str(SECS)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def perf_shares(rec, out):
    _, err = rec.communicate(timeout=120)
    if rec.returncode != 0:
        return None, err
    s = subprocess.run(["perf", "script", "-i", out, "-F", "comm,tid,ip,sym"],
                       capture_output=True, text=True)
    counts = dict.fromkeys(FUNCS, 0)
    total = 0
    for block in s.stdout.split("\n\n"):
        lines = [l for l in block.strip().split("\n") if l.strip()]
        if not lines or not lines[0].startswith("busy-"):
            continue
        syms = set(l.split()[1].split("+")[0] for l in lines[1:] if len(l.split()) > 1)
        total += 1
        for f in FUNCS:
            if f in syms:
                counts[f] += 1
    if not total:
        return None, "perf recorded no samples of busy's workers:\n" + s.stderr[-2000:]
    return {f: 100.0 * c / total for f, c in counts.items()}, total


if not shutil.which("perf"):
    skip("perf is not installed")
probe = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "--",
                        "true"], capture_output=True, text=True)
if probe.returncode != 0:
    skip("perf cannot record here (%s)" % probe.stderr.strip()[:200])

# profd and perf over the same 4 s: the program's split moves with what else the machine runs
# (a CI run once had 58.4% against 62.4% in work_alpha with perf's window after profd's, while
# a build ran beside the tests). The bound is 3 points; a second run is made when the
# first is off by more (a bias of profd's fails both; a burst of load beside one seldom hits
# both), and the second is judged.
def compare():
    with Daemon() as d, Program("busy", 2) as p, tempfile.TemporaryDirectory() as tmp:
        d.ctl("attach", p.pid, "--hz", 999)
        d.wait_samples(p.pid, 3 * 300)  # attached, and sampling
        out = os.path.join(tmp, "perf.data")
        rec = perf_record(p.pid, out)
        t0 = time.monotonic()
        time.sleep(SECS + 0.1)
        prof = d.slice(p.pid, "--last", "%.2f" % (time.monotonic() - t0))
        d.ctl("detach", p.pid)
        total = sum(c for s, c in prof.items() if re.match(r"busy-\d+;", s))
        ours = {f: 100.0 * sum(c for s, c in prof.items()
                               if re.match(r"busy-\d+;", s) and f in s.split(";")) / total
                for f in FUNCS}
        theirs, info = perf_shares(rec, out)
        if theirs is None:
            fail("perf record failed: %s" % info)
        log("profd (%d samples): %s" % (total, ", ".join("%s %.1f%%" % kv for kv in ours.items())))
        log("perf  (%d samples): %s" % (info, ", ".join("%s %.1f%%" % kv for kv in theirs.items())))
        return ours, theirs


for attempt in (1, 2):
    ours, theirs = compare()
    if attempt == 1 and any(abs(ours[f] - theirs[f]) > POINTS for f in FUNCS):
        log("(first run off by more than %.0f points: run again)" % POINTS)
        continue
    for f in FUNCS:
        check(abs(ours[f] - theirs[f]) <= POINTS,
              "%s: profd %.1f%% vs perf %.1f%% (within %.0f points)"
              % (f, ours[f], theirs[f], POINTS))
    break
