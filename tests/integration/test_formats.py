"""Real profiles of busy (2 worker threads) through the readers' rules: the collapsed output
passes tests/unit/profile/check_collapsed.py and speedscope's line rule `^(.*) (\\d+)$`; the
Sentry output passes tests/unit/profile/check_sentry.py, and its content is right: busy's
frames carry instruction_addr (inside busy's image, inside the function's symbol), function,
filename and a lineno inside that function in tests/programs/busy.c; thread_metadata names
busy-1 and busy-2 by their tids; debug_meta.images has busy and libc with the debug_id derived
from each file's GNU build-id (read here from the ELF note, per docs formats.md) and the load
address from /proc/PID/maps; active_thread_id is a sampled thread; samples are sorted.
Every format that has room for a note says how it was sampled (schedule, sampler, and the
samples by the path that took each: the kernel's copy of busy's two running threads, its
blocked main thread's stack read from /proc and then reused), and the counts add up to the
profile's samples: Sentry's and each chunk's "profd" object, pprof's comment, speedscope's
"profd" field, the flame graph's <desc>, and profctl's own line."""
import gzip
import re
from harness import *

CHECKERS = os.path.join(SOURCE, "tests", "unit", "profile")
BUSY_C = os.path.join(SOURCE, "tests", "programs", "busy.c")
SPEEDSCOPE_LINE = re.compile(r"^(.*) (\d+)$")


def run_checker(name, path, *args):
    r = subprocess.run([sys.executable, os.path.join(CHECKERS, name)] + list(args) + [path],
                       capture_output=True, text=True, timeout=120 * SLOW)
    return r.returncode, (r.stdout + r.stderr).strip()


def debug_id(build_id):
    """Sentry's debug_id of an ELF file: the first 16 bytes of the build-id (zero-padded),
    with the groups [0..4], [4..6], [6..8] byte-reversed, as a uuid."""
    b = (build_id + bytes(16))[:16]
    b = b[0:4][::-1] + b[4:6][::-1] + b[6:8][::-1] + b[8:16]
    h = b.hex()
    return "-".join((h[:8], h[8:12], h[12:16], h[16:20], h[20:]))


def readelf_build_id(path):
    try:
        out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return None
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else None


def function_lines(path):
    """{function: (first line, last line)} of the top-level function definitions in a C file
    laid out as busy.c is (header at column 0, closing brace alone at column 0)."""
    with open(path) as f:
        lines = f.read().split("\n")
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"^[A-Za-z].*?\b(\w+)\([^;]*\)\s*$", line)
        if m:
            end = next(j for j in range(i + 1, len(lines)) if lines[j] == "}")
            out[m.group(1)] = (i + 1, end + 1)
    return out


def mappings(pid, path):
    """(start, offset) of each mapping of path in the process."""
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            fl = line.split(None, 5)
            if len(fl) == 6 and fl[5].strip() == path:
                out.append((int(fl[0].split("-")[0], 16), int(fl[2], 16)))
    return out


def pb_strings(data):
    """profile.proto's string_table (field 6), read with the wire format's four rules."""
    out, i = [], 0

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7f) << shift
            shift += 7
            if b < 0x80:
                return v
    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n = varint()
            if field == 6:
                out.append(data[i:i + n].decode("utf-8", "replace"))
            i += n
        else:
            fail("pprof: wire type %d at byte %d" % (wire, i))
    return out


SUMMARY = re.compile(r"^profctl: (\d+) samples of (\d+) threads")

with Daemon() as d, Program("busy", 2) as p:
    exe = os.path.realpath("/proc/%d/exe" % p.pid)
    tids = {int(t) for t in os.listdir("/proc/%d/task" % p.pid)}

    def thread_names():
        out = {}
        for tid in tids:
            with open("/proc/%d/task/%d/comm" % (p.pid, tid)) as f:
                out[tid] = f.read().strip()
        return out if sorted(out.values()) == ["busy", "busy-1", "busy-2"] else None
    # busy says ready before its threads have named themselves.
    names = wait_until(thread_names, 5, "busy's threads to be named busy-1 and busy-2")
    d.ctl("attach", p.pid, "--hz", 499)
    # 1000 ticks (2 s at 499 Hz on an idle machine), however long this machine takes.
    wait_until(lambda: d.raw_target_status(p.pid)["ticks"] >= 1000, 60, "1000 ticks",
               interval=0.05)

    # 1. Collapsed.
    for extra in ([], ["--thread-ids"]):
        out = os.path.join(d.dir, "busy%s.folded" % "".join(extra))
        r = d.ctl("slice", p.pid, "-o", out, "--top", "0", *extra)
        n = int(SUMMARY.match(r.stderr).group(1))
        rc, msg = run_checker("check_collapsed.py", out)
        check(rc == 0, "collapsed%s passes check_collapsed (%s)" % (" ".join([""] + extra), msg))
        with open(out) as f:
            lines = f.read().splitlines()
        matched = [SPEEDSCOPE_LINE.match(l) for l in lines]
        check(all(matched), "every line matches speedscope's ^(.*) (\\d+)$ (%s)"
              % [l for l, m in zip(lines, matched) if not m][:3])
        check(sum(int(m.group(2)) for m in matched) == n > 0,
              "  and the counts add up to the %d samples of the summary" % n)
        stacks = [m.group(1) for m in matched]
        for w in ("busy-1", "busy-2"):
            check(any(s.split(";")[0].startswith(w) and s.endswith(";work_alpha;spin")
                      for s in stacks), "  %s has the stack ...;worker;work_alpha;spin" % w)

    # 2. Sentry.
    out = os.path.join(d.dir, "busy.sentry.json")
    r = d.ctl("slice", p.pid, "--format", "sentry", "-o", out)
    n = int(SUMMARY.match(r.stderr).group(1))
    rc, msg = run_checker("check_sentry.py", out)
    check(rc == 0, "sentry profile passes check_sentry (%s)" % msg)
    with open(out) as f:
        prof = json.load(f)
    trace = prof["profile"]
    samples, stacks, frames = trace["samples"], trace["stacks"], trace["frames"]
    check(0.95 * n <= len(samples) <= n, "the profile holds the samples of the summary "
          "(%d of %d)" % (len(samples), n))

    # Frames of busy's own functions.
    lines = function_lines(BUSY_C)
    check(set(lines) >= {"spin", "work_alpha", "work_beta", "work_gamma", "worker", "main"},
          "(set-up) function line ranges of busy.c: %s" % lines)
    busy_build_id, busy_syms = elf_read(exe)
    images = prof.get("debug_meta", {}).get("images", [])
    busy_img = [im for im in images if im.get("code_file") == exe]
    check(len(busy_img) == 1, "debug_meta.images has one image for %s" % exe)
    base = int(busy_img[0]["image_addr"], 16)
    size = busy_img[0]["image_size"]
    for fn in ("work_alpha", "work_beta", "work_gamma", "spin", "worker"):
        fr = [f for f in frames if f.get("function") == fn]
        check(fr, "frames of %s" % fn)
        lo, hi = lines[fn]
        for f in fr:
            addr = int(f["instruction_addr"], 16)
            sv, ss = busy_syms[fn]
            check(os.path.basename(f.get("filename", "")) == "busy.c" and
                  lo <= f.get("lineno", 0) <= hi and f.get("module") == exe and
                  f.get("in_app") is True,
                  "  %s at %s: busy.c line %s is within %s (lines %d-%d), module busy, in_app"
                  % (fn, f["instruction_addr"], f.get("lineno"), fn, lo, hi))
            check(base <= addr < base + size and sv <= addr - base <= sv + ss,
                  "  %s: its address is inside busy's image, at offset %#x in the symbol "
                  "%s [%#x, %#x]" % (fn, addr - base, fn, sv, sv + ss))
    src = os.path.realpath(os.path.join(SOURCE, "tests", "programs", "busy.c"))
    check(all(f.get("abs_path") and os.path.isabs(f["abs_path"]) and
              os.path.realpath(f["abs_path"]) == src
              for f in frames if f.get("function") in ("work_alpha", "spin", "worker")),
          "busy's frames carry abs_path, the absolute path of busy.c (built from ../ paths)")
    check(any(lines["work_alpha"][0] < f["lineno"] < lines["work_alpha"][1]
              for f in frames if f.get("function") == "work_alpha"),
          "work_alpha's frame points into its body (the call of spin)")

    # Threads.
    sampled = {int(s["thread_id"]) for s in samples}
    tm = trace.get("thread_metadata", {})
    check(sampled == tids, "every thread is sampled and no other tid appears (%s)" % sampled)
    check({int(k): v.get("name") for k, v in tm.items()} == names,
          "thread_metadata names each tid as /proc does: %s" % tm)
    active = prof["transaction"].get("active_thread_id")
    check(active in sampled and sum(1 for s in samples if int(s["thread_id"]) == active) >= 2,
          "transaction.active_thread_id %s is a sampled thread" % active)
    elapsed = [int(s["elapsed_since_start_ns"]) for s in samples]
    check(elapsed == sorted(elapsed) and len(set(elapsed)) > 1, "samples are sorted by time")
    check(len(set(elapsed)) > 100, "  over more than 100 ticks (%d)" % len(set(elapsed)))
    check(all(0 <= s["stack_id"] < len(stacks) for s in samples) and
          all(0 <= i < len(frames) for st in stacks for i in st), "indices are in range")

    # Images: busy and libc, debug_id from the build-id, load address from the maps.
    check(busy_build_id is not None and len(busy_build_id) >= 16, "(set-up) busy has a GNU "
          "build-id: %s" % (busy_build_id or b"").hex())
    rb = readelf_build_id(exe)
    if rb is not None:
        check(rb == busy_build_id.hex(), "  readelf -n agrees: %s" % rb)
    im = busy_img[0]
    check(im.get("type") == "symbolic" and im.get("debug_id") == debug_id(busy_build_id) and
          im.get("code_id") == busy_build_id.hex(),
          "busy's image: type symbolic, debug_id %s from build-id %s"
          % (debug_id(busy_build_id), busy_build_id.hex()))
    maps = mappings(p.pid, exe)
    check(base == min(s for s, off in maps if off == 0),
          "busy's image_addr %#x is where its offset-0 mapping starts" % base)
    libc_paths = {fl for fl in (l.split(None, 5)[-1].strip() for l in open("/proc/%d/maps" % p.pid))
                  if re.match(r"libc[.-]", os.path.basename(fl))}
    check(len(libc_paths) == 1, "(set-up) busy maps one libc: %s" % libc_paths)
    libc = libc_paths.pop()
    libc_img = [i for i in images if i.get("code_file") == libc]
    libc_id, _ = elf_read(libc)
    check(len(libc_img) == 1 and libc_id is not None and
          libc_img[0].get("debug_id") == debug_id(libc_id) and
          int(libc_img[0]["image_addr"], 16) == min(s for s, off in mappings(p.pid, libc)
                                                    if off == 0),
          "libc's image (%s): debug_id from its build-id, image_addr its load address" % libc)
    check(len({i["code_file"] for i in images}) == len(images), "one image per file")

    # 3. How it was sampled, in every format with room for it: the samples by the path that
    # took each add up to the profile's. busy's two threads spin (the kernel's copy, on the
    # default sampler where this machine allows perf events); its main thread waits in
    # pthread_join (read from /proc once, then its stack reused while it stays blocked).
    perf_ok = d.raw_target_status(p.pid)["paths"]["perf"]["samples"] > 0
    DESC = re.compile(r"sampled by profd: alarm at 499 Hz, sampler (\w+); (\d+) samples: "
                      r"perf (\d+), proc (\d+), ptrace (\d+), reused (\d+)")

    def check_paths(what, by, n, sampler=SAMPLER or "auto"):
        log("  %s: %s" % (what, by))
        check(sum(by.values()) == n > 0, "%s: the samples by path add up to the %d samples"
              % (what, n))
        check(by["proc"] + by["reused"] > 0, "%s: the blocked main thread's samples are there "
              "(proc or reused)" % what)
        if sampler == "ptrace":
            check(by["perf"] == 0 and by["ptrace"] > 0, "%s: the ptrace sampler's samples of "
                  "running threads are stops" % what)
        elif perf_ok:
            check(by["perf"] > 0 and by["ptrace"] <= 0.05 * n, "%s: the running threads' "
                  "samples are the kernel's copies (at most 5%% stops)" % what)

    def from_desc(what, text):
        m = DESC.search(text or "")
        check(m, "%s says how it was sampled: %r" % (what, (text or "")[:200]))
        check(m.group(1) == (SAMPLER or "auto"), "%s names the sampler %s" % (what, m.group(1)))
        by = dict(zip(("perf", "proc", "ptrace", "reused"), map(int, m.groups()[2:])))
        check_paths(what, by, int(m.group(2)))

    out = os.path.join(d.dir, "busy.chunks.json")
    r = d.ctl("slice", p.pid, "--format", "sentry-chunks", "-o", out)
    n = int(SUMMARY.match(r.stderr).group(1))
    m = re.search(r"profctl: samples by path: perf (\d+), proc (\d+), ptrace (\d+), "
                  r"reused (\d+)", r.stderr)
    check(m, "profctl says the samples by path: %s" % r.stderr)
    check_paths("profctl", dict(zip(("perf", "proc", "ptrace", "reused"),
                                    map(int, m.groups()))), n)
    with open(out) as f:
        chunks = json.load(f)
    total = {}
    for c in chunks:
        notes = c.get("profd", {})
        check(notes.get("sampler") == (SAMPLER or "auto") and notes.get("mode") == "alarm",
              "each chunk's profd notes name the schedule and sampler: %s" % notes)
        for k, v in notes["samples_by_path"].items():
            total[k] = total.get(k, 0) + v
    check_paths("sentry-chunks (all chunks)", total, n)
    check(prof["profd"]["sampling"]["sampler"] == (SAMPLER or "auto"),
          "the Sentry profile's profd.sampling names the sampler")
    n_sentry = int(SUMMARY.match(d.ctl("slice", p.pid, "--format", "sentry", "-o", out).stderr)
                   .group(1))
    with open(out) as f:
        check_paths("sentry", json.load(f)["profd"]["samples_by_path"], n_sentry)
    out = os.path.join(d.dir, "busy.pb.gz")
    d.ctl("slice", p.pid, "--format", "pprof", "-o", out)
    with gzip.open(out) as f:
        strings = pb_strings(f.read())
    from_desc("pprof's comment", next((x for x in strings if "sampled by profd" in x), None))
    out = os.path.join(d.dir, "busy.speedscope.json")
    d.ctl("slice", p.pid, "--format", "speedscope", "-o", out)
    with open(out) as f:
        from_desc("speedscope's profd field", json.load(f).get("profd"))
    out = os.path.join(d.dir, "busy.svg")
    d.ctl("slice", p.pid, "--format", "flamegraph", "-o", out)
    with open(out) as f:
        m = re.search(r"<desc>(.*?)</desc>", f.read())
        from_desc("the flame graph's <desc>", m and m.group(1))

    # 4. A process that has had no transaction, sliced by one (--transaction NAME) and split
    # by them (--by-transaction), in every format: an empty profile, or one whose every
    # sample is outside any transaction, never a failure (UBSan once stopped a sanitized
    # daemon here: qsort of an empty array of transactions); the daemon serves on.
    for fmt in ("collapsed", "sentry", "sentry-chunks", "pprof", "speedscope", "flamegraph"):
        out = os.path.join(d.dir, "notxn.%s" % fmt)
        r = d.ctl("slice", p.pid, "--format", fmt, "--last", "2", "--transaction", "none such",
                  "-o", out, check_rc=False)
        check(r.returncode == 0 and os.path.exists(out),
              "%s, --transaction of a process without transactions: answered (%s)"
              % (fmt, (r.stderr or "").strip()[-200:]))
        if fmt == "collapsed":
            with open(out) as f:
                text = f.read()
            check(text.strip() == "", "  ... with no samples (%r)" % text[:200])
        r = d.ctl("slice", p.pid, "--format", fmt, "--last", "2", "--by-transaction", "-o",
                  out, check_rc=False)
        check(r.returncode == 0, "%s, --by-transaction of a process without transactions: "
              "answered (%s)" % (fmt, (r.stderr or "").strip()[-200:]))
        if fmt == "collapsed":
            with open(out) as f:
                lines = f.read().splitlines()
            check(lines and all(l.startswith("[no transaction];") for l in lines),
                  "  ... every stack under [no transaction]")
    c = RawClient(d.socket)
    for extra in ({"transaction": "none such"}, {"by_transaction": True}):
        r = c.call(dict({"cmd": "slice", "pid": p.pid, "format": "summary",
                         "last_ns": 2 * 10 ** 9}, **extra))
        check("result" in r, "summary, %s: answered (%s)" % (extra, r.get("error")))
    c.close()
    check(d.raw_target_status(p.pid) is not None, "the daemon serves on")
