"""profctl record and profctl top against the real daemon, on busy (3 worker threads).

record: a process for --duration (the file in the format -o names, the target detached and
still running after); one already profiled (recorded, left attached at its own rate); a
command started under profd (-- COMMAND: sampled from its start to its exit, record exits
when it does); Ctrl-C (the profile of the time until then is written); the progress line on
a terminal (elapsed, samples, rate); errors (no such process, nothing to record).

top: one view without a terminal (--once): functions by self or total share, a thread
filter; then the live view in a real terminal, tmux at 80x24 (capture-pane): it fits, it
refreshes, t sorts by total, f filters threads, q quits and detaches the process top
attached."""
import pty
import re
import select
import shutil
import xml.etree.ElementTree as ET
from harness import *

WORK = tempfile.mkdtemp(prefix="profd-record-")
atexit.register(shutil.rmtree, WORK, True)


def targets(d):
    return {t["pid"]: t for t in json.loads(d.ctl("list", "--json").stdout)["targets"]}


def summary_line(stderr):
    m = re.search(r"profctl: (\d+) samples of (\d+) threads of (\d+) over ([\d.]+) s .*?, "
                  r"(\S+) format, written to (\S+)", stderr)
    return m.groups() if m else None


def rows(text):
    """top's function rows: (self%, total%, self, total, name)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+([\d.]+)%\s+(\d+)\s+(\d+)  (\S.*)$", line)
        if m:
            out.append((float(m.group(1)), float(m.group(2)), int(m.group(3)),
                        int(m.group(4)), m.group(5)))
    return out


with Daemon() as d:
    with Program("busy", 3) as p:
        # 1. A process for --duration: a flame graph by default.
        r = d.ctl("record", "--duration", "1.5", p.pid, "-o", os.path.join(WORK, "a.svg"))
        s = summary_line(r.stderr)
        check(r.returncode == 0 and s and s[4] == "flamegraph" and int(s[0]) > 0 and
              int(s[2]) == p.pid, "record --duration 1.5 PID -o a.svg: a flame graph of its "
              "samples, and what it holds on stderr (%r)" % r.stderr[:300])
        root = ET.parse(os.path.join(WORK, "a.svg")).getroot()
        check(root.tag.endswith("svg") and 1.3 < float(s[3]) < 1.5 + 1.0 * SLOW,
              "record: the file is an SVG covering the 1.5 s recorded (%s s)" % s[3])
        check(p.pid not in targets(d) and p.alive(),
              "record: the process it attached is detached afterwards, and still running")

        # 2. A process already profiled: recorded at its own rate, left attached.
        d.ctl("attach", p.pid, "--hz", "199")
        r = d.ctl("record", "--duration", "1", p.pid, "-o", os.path.join(WORK, "b.folded"))
        t = targets(d).get(p.pid)
        check(r.returncode == 0 and "already being profiled" in r.stderr and t and
              t["hz"] == 199, "record of a process already profiled: recorded, and left "
              "attached at its own 199 Hz (%r, %r)" % (r.stderr[:200], t))
        with open(os.path.join(WORK, "b.folded")) as f:
            check(sum(parse_collapsed(f.read()).values()) > 0, "record -o b.folded: collapsed")
        d.ctl("detach", p.pid)

        # 3. Ctrl-C: the profile of the time until then.
        out = os.path.join(WORK, "c.pb.gz")
        rec = subprocess.Popen([PROFCTL, "--socket", d.socket, "record", str(p.pid), "-o", out],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: p.pid in targets(d) and targets(d)[p.pid]["samples"] > 100,
                   30 * SLOW, "record to attach and sample")
        rec.send_signal(signal.SIGINT)
        so, se = rec.communicate(timeout=60 * SLOW)
        with open(out, "rb") as f:
            data = f.read()
        check(rec.returncode == 0 and data[:2] == b"\x1f\x8b" and "recording stopped" in se
              and summary_line(se), "record until Ctrl-C: stopped, a pprof file written "
              "(-o NAME.pb.gz), exit 0 (%d, %r)" % (rec.returncode, se[:300]))
        check(p.pid not in targets(d) and p.alive(), "record after Ctrl-C: detached, the "
              "process still running")

        # 4. The progress line, on a terminal.
        master, slave = pty.openpty()
        rec = subprocess.Popen([PROFCTL, "--socket", d.socket, "record", "--duration", "2.5",
                                str(p.pid), "-o", os.path.join(WORK, "d.svg")],
                               stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        tty = b""
        while True:
            rl, _, _ = select.select([master], [], [], 60 * SLOW)
            try:
                chunk = os.read(master, 4096) if rl else b""
            except OSError:
                chunk = b""
            if not chunk:
                break
            tty += chunk
        rec.wait(timeout=60 * SLOW)
        os.close(master)
        text = tty.decode(errors="replace")
        progress = re.findall(r"\r\x1b\[Kprofctl: recording %d \(busy\): ([\d.]+) s, (\d+) "
                              r"samples, ([\d.]+) Hz achieved" % p.pid, text)
        check(rec.returncode == 0 and len(progress) >= 3 and
              [float(x[0]) for x in progress] == sorted(float(x[0]) for x in progress) and
              int(progress[-1][1]) > 0, "record on a terminal: a progress line updated in "
              "place, its time and samples growing (%s)" % progress[:6])

    # 5. A command started under profd, sampled from its start to its exit.
    out = os.path.join(WORK, "e.folded")
    t0 = time.monotonic()
    r = d.ctl("record", "-o", out, "--", os.path.join(PROGRAMS, "busy"), "2", "2")
    took = time.monotonic() - t0
    with open(out) as f:
        counts = parse_collapsed(f.read())
    threads = {k.split(";")[0] for k in counts}
    s = summary_line(r.stderr)
    check(r.returncode == 0 and s and {"busy-1", "busy-2"} <= threads and
          any("work_alpha" in k for k in counts) and "exited with status 0" in r.stderr,
          "record -- busy 2 2: its worker threads' stacks, record ending with the command "
          "(%s, %r)" % (sorted(threads), r.stderr[-300:]))
    check(s and 1.5 < float(s[3]) <= took + 0.1,
          "record -- COMMAND: the profile spans the command's 2 s run (%s s of %.2f s)"
          % (s[3] if s else None, took))
    r = d.ctl("record", "--duration", "1", "999999999", check_rc=False)
    check(r.returncode == 4 and "999999999" in r.stderr,
          "record of no such process: exit 4, naming it (%d, %r)" % (r.returncode, r.stderr))
    r = d.ctl("record", check_rc=False)
    check(r.returncode == 2, "record of nothing: usage, exit 2")
    out = os.path.join(WORK, "f.svg")
    r = d.ctl("record", "-o", out, "--", "/nonexistent/program", check_rc=False)
    check(r.returncode == 1 and r.stderr == "profctl: cannot run /nonexistent/program: No "
          "such file or directory\n" and not os.path.exists(out),
          "record -- a program that cannot run: said, exit 1, no file (%d, %r)"
          % (r.returncode, r.stderr[-300:]))

    with Program("busy", 3) as p:
        # 6. top without a terminal: one view.
        r = d.ctl("top", p.pid, "--once", "--window", "5")
        fr = rows(r.stdout)
        check(r.returncode == 0 and ("profd top: %d (busy)" % p.pid) in r.stdout and fr and
              fr[0][4] == "spin" and [x[2] for x in fr] == sorted((x[2] for x in fr),
                                                                  reverse=True),
              "top --once: a view of busy, spin first, functions by self samples (%r)"
              % r.stdout[:400])
        check(p.pid not in targets(d), "top --once attached busy, and detached it after")
        d.ctl("attach", p.pid, "--hz", "199")
        d.wait_samples(p.pid, 300)
        r = d.ctl("top", p.pid, "--once", "--sort", "total", "--threads", "busy-1")
        fr = rows(r.stdout)
        tl = [l for l in r.stdout.splitlines() if l.startswith("threads:")]
        check(fr and [x[3] for x in fr] == sorted((x[3] for x in fr), reverse=True) and
              tl and re.fullmatch(r"threads:  busy-1 \(\d+\) 100%", tl[0]) and
              'matching "busy-1"' in r.stdout,
              "top --sort total --threads busy-1: by total samples, busy-1's alone (%r)"
              % r.stdout[:500])
        check(p.pid in targets(d), "top left a process it did not attach attached")
        d.ctl("detach", p.pid)

        # 7. The live view in tmux, 80x24.
        if not shutil.which("tmux"):
            fail("tmux is not installed (.ci/setup installs it)")
        sock = os.path.join(WORK, "tmux.sock")

        def tmux(*a, check_rc=True):
            r = subprocess.run(["tmux", "-S", sock] + list(a), capture_output=True, text=True,
                               timeout=30)
            if check_rc and r.returncode:
                fail("tmux %s: %s" % (a, r.stderr))
            return r.stdout

        def screen():
            return tmux("capture-pane", "-p", "-t", "top")

        atexit.register(lambda: subprocess.run(["tmux", "-S", sock, "kill-server"],
                                               capture_output=True))
        tmux("new-session", "-d", "-s", "top", "-x", "80", "-y", "24",
             "%s --socket %s top %d; sleep 30" % (PROFCTL, d.socket, p.pid))
        wait_until(lambda: rows(screen()) and rows(screen())[0][4] == "spin", 30 * SLOW,
                   "top to show spin first")
        sc = screen()
        lines = sc.split("\n")
        check(all(len(l) <= 80 for l in lines) and lines[0].startswith("profd top: %d (busy)"
                                                                        % p.pid) and
              "sorted by self" in sc and "q quit" in sc,
              "top in 80x24: the header, functions by self share, the keys; no line wider "
              "than 80 (%r)" % sc)
        n1 = int(re.search(r"last 10 s: (\d+) samples", sc).group(1))
        wait_until(lambda: int(re.search(r"last 10 s: (\d+) samples", screen()).group(1)) > n1,
                   30 * SLOW, "top to refresh")
        tmux("send-keys", "-t", "top", "t")
        wait_until(lambda: "sorted by total" in screen(), 10 * SLOW, "t to sort by total")
        fr = rows(screen())
        check(fr and [x[3] for x in fr] == sorted((x[3] for x in fr), reverse=True),
              "top: t sorts by total samples (%r)" % fr[:5])
        tmux("send-keys", "-t", "top", "f")
        wait_until(lambda: "thread filter" in screen(), 10 * SLOW, "f to ask for a filter")
        tmux("send-keys", "-t", "top", "busy-2", "Enter")
        wait_until(lambda: 'matching "busy-2"' in screen(), 10 * SLOW, "the filter to apply")
        alone = wait_until(lambda: re.search(r"^threads:  busy-2 \(\d+\) 100%$", screen(),
                                             re.M), 10 * SLOW, "the view to hold busy-2 alone")
        check(alone, "top: f then a name filters the threads (%r)" % alone.group(0))
        tmux("send-keys", "-t", "top", "q")
        wait_until(lambda: "profd top" not in screen(), 10 * SLOW, "q to quit top")
        check(p.pid not in targets(d), "top: q quits, detaching the process it attached, "
              "and gives the terminal back")
