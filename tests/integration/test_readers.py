"""Every output format read by its real reader, on real profiles: busy (3 worker threads,
-O2 without frame pointers, work_alpha/beta/gamma spinning in spin()) and txnapp (2 threads
running transactions through libprofd). Each format's slice covers the same window as a
collapsed slice, and what the reader shows is compared with it.

- pprof: `go tool pprof` reads the gzipped profile.proto (it exits 1 on a malformed one);
  its -traces report holds the collapsed stacks with their counts, thread by thread; -top
  gives each function the collapsed output's self and total samples; -raw shows busy's
  mapping with its GNU build-id; txnapp's samples carry their transactions as labels.
- speedscope: its own importer (npm speedscope, its release index.html) in headless
  Chromium imports the file (the page title becomes the profile's name), lists a profile
  per thread with the collapsed output's weight and one per transaction, and its sandwich
  view of the busiest thread names that thread's functions with their self and total time.
- flame graph SVG: well-formed XML whose boxes hold the collapsed output's counts; a
  screenshot in headless Chromium draws each box in its colour with the width of its share
  of the samples; its script zooms on a click (the box fills the width, its callers stay
  faded, the rest is hidden), searches (the share of samples matched, the boxes lit) and
  names the box under the pointer.
- Sentry profile chunks (version 2): every chunk passes relay's rules
  (tests/unit/profile/check_sentry.py), and together they hold every sample of the window.
- The format follows -o's extension; a binary format is not written to a terminal.

Needs go (golang-go), chromium and the npm package speedscope (tests/readers, installed by
.ci/setup); without them the test is skipped, saying which is missing."""
import base64
import gzip
import html
import pty
import re
import shutil
import xml.etree.ElementTree as ET
import zlib
from harness import *

GO = shutil.which("go")
CHROMIUM = shutil.which("chromium")
SPEEDSCOPE = os.environ.get("PROFD_SPEEDSCOPE") or os.path.join(
    SOURCE, "tests", "readers", "node_modules", "speedscope", "dist", "release")
missing = [what for what, ok in (("go (golang-go)", GO), ("chromium", CHROMIUM),
                                 ("speedscope (npm ci --prefix tests/readers)",
                                  os.path.exists(os.path.join(SPEEDSCOPE, "index.html"))))
           if not ok]
if missing:
    skip("the readers are not installed: %s (.ci/setup installs them)" % ", ".join(missing))

WORK = tempfile.mkdtemp(prefix="profd-readers-")
atexit.register(shutil.rmtree, WORK, True)
SUFFIX = re.compile(r"_\[[ij]\]$")


def chromium(*args, timeout=90):
    """Run headless Chromium with a profile of its own; returns its stdout."""
    prof = tempfile.mkdtemp(dir=WORK)
    # No network here: without these flags Chromium keeps trying to reach Google's hosts.
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-quic", "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        "--hide-scrollbars", "--user-data-dir=" + prof,
                        "--allow-file-access-from-files"] + list(args),
                       capture_output=True, text=True, timeout=timeout * SLOW)
    return r.stdout


def short(name):
    """A C++ name without its template arguments and parameter lists, as pprof's reports
    show it ("A<int>::f(long) const" is "A::f const")."""
    if name.startswith("[") or ("(" not in name and "<" not in name):
        return name
    out, depth = [], 0
    for c in name:
        if c in "(<":
            depth += 1
        elif c in ")>":
            depth -= 1
            if depth < 0:
                return name  # operator> and such: left as it is
        elif depth == 0:
            out.append(c)
    return "".join(out) if depth == 0 else name


def frames_of(stack, pprof=False):
    """A collapsed line's frames (thread first), as the other formats name them (pprof's
    reports: C++ names shortened)."""
    return tuple((short if pprof else str)(SUFFIX.sub("", f)) for f in stack.split(";"))


def self_total(counts, thread=None, pprof=False):
    """{function: (self, total)} of collapsed counts (of one thread if given). pprof: its
    -top lines summed by their shortened name. pprof has a line per function, whose total
    counts a sample once however often the function is in its stack; two functions whose
    names shorten alike (libasan's "maybe_parse_param_index(char const*, int*)" beside a
    name without its parameters) are two lines, and a sample through both is in each."""
    out = {}
    for stack, c in counts.items():
        fr = frames_of(stack)
        if thread is not None and (short(fr[0]) if pprof else fr[0]) != thread:
            continue
        for f in set(fr[1:]):
            f = short(f) if pprof else f
            s, t = out.get(f, (0, 0))
            out[f] = (s, t + c)
        leaf = short(fr[-1]) if pprof else fr[-1]
        s, t = out[leaf]
        out[leaf] = (s + c, t)
    return out


def slice_to(d, pid, name, window, *extra):
    path = os.path.join(WORK, name)
    d.ctl("slice", pid, "--from", window[0], "--to", window[1], "-o", path, "--top", "0",
          *extra)
    with open(path, "rb") as f:
        return path, f.read()


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG without interlace."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                fail("screenshot: PNG colour type %d depth %d not handled" % (ctype, depth))
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    raw, rows, prev, stride = zlib.decompress(idat), [], bytearray(w * bpp), w * bpp
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def check_pprof(d, pid, window, counts, exe, what):
    path, data = slice_to(d, pid, what + ".pb.gz", window)
    check(data[:2] == b"\x1f\x8b" and len(gzip.decompress(data)) > 0,
          "%s pprof: a gzip file (-o NAME.pb.gz picks the format)" % what)
    r = subprocess.run([GO, "tool", "pprof", "-traces", "-sample_index=samples", path],
                       capture_output=True, text=True, timeout=120 * SLOW)
    check(r.returncode == 0, "%s pprof: go tool pprof -traces reads it (%s)"
          % (what, r.stderr.strip()[-300:]))
    traces, labels = {}, []
    for block in r.stdout.split("-----------+" + "-" * 55)[1:]:
        lab, count, fr = {}, None, []
        for line in block.splitlines():
            m = re.match(r"^\s*(\w+):\s+(.*)$", line)
            if count is None and m:
                lab[m.group(1)] = m.group(2).strip()
                continue
            m = re.match(r"^\s+(\d+)\s+(\S.*)$", line) if count is None else None
            if m:
                count = int(m.group(1))
                fr.append(m.group(2).strip())
            elif count is not None and line.strip():
                fr.append(line.strip())
        if count is None:
            continue
        fr = [short(re.sub(r"\s+\(inline\)$", "", f)) for f in fr]
        key = (lab.get("thread_name", "?"),) + tuple(reversed(fr))
        traces[key] = traces.get(key, 0) + count
        labels.append(lab)
    want = {}
    for stack, c in counts.items():
        want[frames_of(stack, True)] = want.get(frames_of(stack, True), 0) + c
    diff = {k: (want.get(k), traces.get(k)) for k in set(want) | set(traces)
            if want.get(k) != traces.get(k)}
    check(not diff and sum(traces.values()) > 0,
          "%s pprof: -traces holds the collapsed output's %d stacks of %d samples, thread by "
          "thread (differences: %s)" % (what, len(want), sum(want.values()),
                                        sorted(diff.items())[:4]))
    r = subprocess.run([GO, "tool", "pprof", "-top", "-sample_index=samples", "-nodecount=100000",
                        "-nodefraction=0", "-edgefraction=0", path],
                       capture_output=True, text=True, timeout=120 * SLOW)
    top = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.*)$", line)
        if m:  # an inlined function is "NAME (inline)" there
            name = short(re.sub(r" \(inline\)$", "", m.group(3).strip()))
            s0, t0 = top.get(name, (0, 0))
            top[name] = (s0 + int(m.group(1)), t0 + int(m.group(2)))
    want_top = self_total(counts, pprof=True)
    check(r.returncode == 0 and top == want_top,
          "%s pprof: -top gives each of %d functions its self and total samples (%s)"
          % (what, len(want_top), sorted((k, want_top.get(k), top.get(k))
                                         for k in set(top) | set(want_top)
                                         if top.get(k) != want_top.get(k))[:4]))
    r = subprocess.run([GO, "tool", "pprof", "-raw", path], capture_output=True, text=True,
                       timeout=120 * SLOW)
    build_id, _ = elf_read(exe)
    check(r.returncode == 0 and re.search(r"^1: 0x[0-9a-f]+/0x[0-9a-f]+/0x0 %s %s "
                                          % (re.escape(exe), build_id.hex()), r.stdout, re.M),
          "%s pprof: -raw shows the executable's mapping first, with its build id %s"
          % (what, build_id.hex()))
    return labels


def speedscope_dom(path, view="sandwich"):
    """Load path with speedscope's importer in headless Chromium; the page's text lines."""
    with open(path, "rb") as f:
        data = f.read()
    js = os.path.join(tempfile.mkdtemp(dir=WORK), "load.js")
    with open(js, "w") as f:
        f.write("speedscope.loadFileFromBase64(%s, %s);\n"
                % (json.dumps(os.path.basename(path)), json.dumps(base64.b64encode(data).decode())))
    dom = chromium("--window-size=1600,4000", "--virtual-time-budget=15000", "--dump-dom",
                   "file://%s/index.html#localProfilePath=%s&view=%s" % (SPEEDSCOPE, js, view))
    return [html.unescape(t).strip() for t in re.sub(r"<[^>]+>", "\n", dom).split("\n")
            if t.strip()]


UNITS = {"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9}


def ns_of(text):
    m = re.match(r"^([\d.]+)(ns|µs|us|ms|s|min)\b", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def near(shown, want):
    """speedscope shows durations with 2 decimals: 1.65s, 650.00ms."""
    return shown is not None and abs(shown - want) <= max(0.006 * want, 1e4)


def sandwich_rows(lines):
    """The sandwich view's rows in speedscope's page text: Total, Self, Symbol Name, then
    total, self and name for each function."""
    rows = {}
    if "Symbol Name" in lines:
        i = lines.index("Symbol Name") + 1
        while i + 2 < len(lines) and ns_of(lines[i]) is not None:
            rows[lines[i + 2]] = (ns_of(lines[i]), ns_of(lines[i + 1]))
            i += 3
    return rows


def check_speedscope(d, pid, window, counts, title, what, txns=()):
    path, data = slice_to(d, pid, what + ".speedscope.json", window)
    doc = json.loads(data)
    period_ns = doc["profiles"][0]["weights"][0]
    check(doc.get("$schema") == "https://www.speedscope.app/file-format-schema.json",
          "%s speedscope: the schema speedscope recognises the format by" % what)
    lines = speedscope_dom(path)
    renders = 1
    check(lines and lines[0] == "%s - speedscope" % title,
          "%s speedscope: its importer took the file (page title %r)"
          % (what, lines[0] if lines else None))
    # The profile list: "#", "Name", "Total Weight", then index, name, weight.
    listed = {}
    if "Total Weight" in lines:
        i = lines.index("Total Weight") + 1
        while i + 2 < len(lines) and lines[i].isdigit():
            listed[lines[i + 1]] = ns_of(lines[i + 2])
            i += 3
    per_thread = {}
    for stack, c in counts.items():
        t = frames_of(stack)[0]
        per_thread[t] = per_thread.get(t, 0) + c
    threads = {n: w for n, w in listed.items() if not n.startswith("transaction ")}
    by_name = {}
    for n, w in threads.items():
        base = re.sub(r" \(tid \d+\)$", "", n)
        by_name[base] = by_name.get(base, 0) + w
    check(set(by_name) == set(per_thread) and
          all(near(by_name[t], per_thread[t] * period_ns) for t in per_thread),
          "%s speedscope: a profile per thread, each weighing its samples (%s; collapsed: %s)"
          % (what, sorted(threads.items()), sorted(per_thread.items())))
    for name in txns:
        n = sum(1 for x in listed if x.startswith("transaction %s " % name))
        check(n >= 1, "%s speedscope: the transactions %s have profiles of their own (%d)"
              % (what, name, n))
    # The sandwich view of the active (busiest) thread: Total, Self, Symbol Name, then rows.
    active = doc["profiles"][doc.get("activeProfileIndex", 0)]["name"]
    tname = re.sub(r" \(tid \d+\)$", "", active)
    tids = sum(1 for n in threads if n.startswith(tname + " (tid"))
    want = self_total(counts, tname) if tids == 1 else None
    rows = sandwich_rows(lines)
    # Chromium lays the sandwich's table out after the profile list; on a busy machine its
    # virtual time can run out before every row is drawn (CI once got 0 of 9 rows with the
    # list complete). The page is drawn again, at most twice more, when rows are missing:
    # a wrong profile gives the same rows every time.
    while want and renders < 3 and not set(want) <= set(rows):
        lines = speedscope_dom(path)
        renders += 1
        rows = sandwich_rows(lines)
    if renders > 1:
        print("note: %s speedscope: the sandwich view drawn %d times" % (what, renders))
    check(want is not None and set(rows) == set(want) and
          all(near(rows[f][0], want[f][1] * period_ns) and near(rows[f][1], want[f][0] * period_ns)
              for f in want),
          "%s speedscope: the sandwich view of %s names its %d functions with their total and "
          "self time (%s)" % (what, active, len(want or ()),
                              sorted((f, rows.get(f), (want or {}).get(f)) for f in
                                     set(rows) | set(want or ())
                                     if f not in rows or f not in (want or {}) or not (
                                         near(rows[f][0], want[f][1] * period_ns) and
                                         near(rows[f][1], want[f][0] * period_ns)))[:4]))


SVG = "{http://www.w3.org/2000/svg}"


def check_flamegraph(d, pid, window, counts, what):
    path, data = slice_to(d, pid, what + ".svg", window)
    root = ET.fromstring(data)
    check(root.tag == SVG + "svg", "%s flame graph: well-formed SVG" % what)
    boxes = []
    for g in root.iter(SVG + "g"):
        if g.get("class") != "f":
            continue
        t, r = g.find(SVG + "title").text, g.find(SVG + "rect")
        m = re.match(r"^(.*) \((\d+) samples, [\d.]+%\)$", t)
        boxes.append(dict(name=m.group(1) if m else t, title_n=int(m.group(2)) if m else -1,
                          s=int(g.get("data-s")), n=int(g.get("data-n")), d=int(g.get("data-d")),
                          x=float(r.get("x")), y=float(r.get("y")), w=float(r.get("width")),
                          fill=r.get("fill")))
    total = sum(counts.values())
    # Each box's count: the samples whose stack (thread first) begins with its path.
    prefix = {}
    for stack, c in counts.items():
        fr = frames_of(stack)
        for k in range(1, len(fr) + 1):
            prefix[fr[:k]] = prefix.get(fr[:k], 0) + c
    paths, want = [], {}
    by_depth = sorted(boxes, key=lambda b: (b["d"], b["s"]))
    for b in by_depth:
        if b["d"] == 0:
            b["path"] = ()
        else:
            parent = [p for p in by_depth if p["d"] == b["d"] - 1 and
                      p["s"] <= b["s"] and b["s"] + b["n"] <= p["s"] + p["n"]]
            b["path"] = parent[0]["path"] + (b["name"],) if len(parent) == 1 else None
        paths.append(b["path"])
    bad = [(b["path"], b["n"], prefix.get(b["path"])) for b in boxes
           if b["path"] is None or b["n"] != b["title_n"] or
           (b["d"] > 0 and prefix.get(b["path"]) != b["n"]) or (b["d"] == 0 and b["n"] != total)]
    check(boxes and not bad and boxes[0]["n"] == total,
          "%s flame graph: %d boxes, each holding the samples of the collapsed stacks through "
          "it (all: %d; wrong: %s)" % (what, len(boxes), total, bad[:3]))
    # Rendered: a screenshot the SVG's size; each box wider than 4 px in its colour, as wide
    # as its share (its right pixel is the gap to the next).
    height = int(root.get("height"))
    png = os.path.join(WORK, what + ".png")
    chromium("--window-size=%s,%d" % (root.get("width"), height), "--screenshot=" + png,
             "file://" + path)
    W, H, px = png_pixels(png)
    scale = (W - 20) / total
    wrong, drawn = [], 0
    for b in boxes:
        w = b["n"] * scale
        if w < 4:
            continue
        rgb = tuple(int(v) for v in re.findall(r"\d+", b["fill"]))
        y = int(b["y"]) + 1
        x0 = int(b["x"] + w / 2)
        if px[y][x0] != rgb:
            wrong.append((b["name"], "colour", px[y][x0], rgb))
            continue
        lo = hi = x0
        while lo > 0 and px[y][lo - 1] == rgb:
            lo -= 1
        while hi + 1 < W and px[y][hi + 1] == rgb:
            hi += 1
        drawn += 1
        if abs((hi - lo + 1) - (w - 1)) > 2.5:
            wrong.append((b["name"], "width", hi - lo + 1, round(w - 1, 1)))
    check(W == int(root.get("width")) and drawn > 5 and not wrong,
          "%s flame graph: the screenshot draws %d boxes in their colours, each as wide as "
          "its share of the samples, to 2.5 px (wrong: %s)" % (what, drawn, wrong[:3]))
    return path, boxes, total


def check_script(path, boxes, total, what, target):
    """The SVG's own script, run by Chromium in a page that embeds it: hover, zoom on
    target (a box's name), search."""
    page = os.path.join(WORK, what + "-script.html")
    with open(page, "w") as f:
        f.write("""<!DOCTYPE html><html><body><object id="o" type="image/svg+xml"
data="file://%s" width="1200" height="2000"></object><pre id="out">waiting</pre><script>
document.getElementById('o').addEventListener('load', function () {
  var doc = this.contentDocument, win = this.contentWindow, out = {};
  var gs = Array.prototype.slice.call(doc.querySelectorAll('g.f'));
  var g = gs.filter(function (x) { return x.querySelector('title').textContent.indexOf(%s) === 0; })[0];
  g.dispatchEvent(new MouseEvent('mouseover'));
  out.details = doc.getElementById('details').textContent;
  g.dispatchEvent(new MouseEvent('click'));
  out.zoom = gs.map(function (x) {
    var r = x.querySelector('rect');
    return [x.getAttribute('data-s'), x.getAttribute('data-n'), x.getAttribute('data-d'),
            x.style.display, x.classList.contains('parent'), +r.getAttribute('x'),
            +r.getAttribute('width')];
  });
  out.target = [g.getAttribute('data-s'), g.getAttribute('data-d')];
  out.covered = win.search('^' + %s + '$');
  out.matched = doc.getElementById('matched').textContent;
  out.lit = gs.filter(function (x) {
    return x.querySelector('rect').getAttribute('fill') === 'rgb(230,0,230)'; }).length;
  document.getElementById('out').textContent = JSON.stringify(out);
});
</script></body></html>""" % (path, json.dumps(target + " ("), json.dumps(target)))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", "file://" + page)
    m = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
    try:
        out = json.loads(html.unescape(m.group(1)))
    except (AttributeError, ValueError):
        fail("%s flame graph: the script page gave no result (%r)" % (what, dom[-300:]))
    mine = [b for b in boxes if b["name"] == target]
    want_cover = sum(b["n"] for b in mine)  # no box of it lies inside another here
    check(out["details"].startswith(target + " (") and "samples" in out["details"],
          "%s flame graph: hovering %s names it with its samples (%r)"
          % (what, target, out["details"]))
    s0, d0 = int(out["target"][0]), int(out["target"][1])
    tgt = [b for b in boxes if b["s"] == s0 and b["d"] == d0][0]
    bad = []
    for s, n, dd, disp, parent, x, w in out["zoom"]:
        s, n, dd = int(s), int(n), int(dd)
        inside = dd >= d0 and s >= s0 and s + n <= s0 + tgt["n"]
        below = dd < d0 and s <= s0 and s + n >= s0 + tgt["n"]
        if inside and not (disp == "" and not parent and
                           abs(x - (10 + (s - s0) * 1180 / tgt["n"])) < 0.01):
            bad.append(("inside", s, dd, disp, x))
        elif below and not (parent and disp == "" and x == 10):
            bad.append(("caller", s, dd, disp, parent))
        elif not inside and not below and disp != "none":
            bad.append(("other", s, dd, disp))
    check(not bad, "%s flame graph: a click on %s zooms to it: it and what it called fill "
          "the width, its callers stay faded, the rest is hidden (wrong: %s)"
          % (what, target, bad[:3]))
    check(out["covered"] == want_cover and out["lit"] == len(mine) and
          ("%.1f%%" % (100.0 * want_cover / total)) in out["matched"],
          "%s flame graph: searching ^%s$ lights its %d boxes and reports %d samples, %.1f%% "
          "(%r, %d lit)" % (what, target, len(mine), want_cover, 100.0 * want_cover / total,
                            out["matched"], out["lit"]))


def check_chunks(d, pid, window, counts, what):
    path, data = slice_to(d, pid, what + ".chunks.json", window)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "unit", "profile"))
    import check_sentry
    chunks = json.loads(data)
    problems = [(i, check_sentry.check_chunk(json.dumps(c).encode())[0][:2])
                for i, c in enumerate(chunks)]
    problems = [p for p in problems if p[1]]
    n = sum(len(c["profile"]["samples"]) for c in chunks)
    ids = {c["profiler_id"] for c in chunks}
    check(chunks and not problems and n == sum(counts.values()) and len(ids) == 1,
          "%s Sentry chunks: %d chunk(s) pass relay's rules (%s), share one profiler_id and "
          "hold the window's %d samples (%d)" % (what, len(chunks), problems[:2],
                                                 sum(counts.values()), n))


def window_of(d, pid, seconds):
    """A window of the last `seconds`, once the target has been sampled that long."""
    t0 = time.monotonic_ns()
    d.wait_samples(pid, 3 * 150 * seconds, timeout=60 * SLOW)
    while time.monotonic_ns() - t0 < seconds * 1e9:
        time.sleep(0.05)
    t1 = time.monotonic_ns()
    return (t0, t1)


with Daemon() as d:
    exe = os.path.join(PROGRAMS, "busy")
    with Program("busy", 3) as p:
        d.ctl("attach", p.pid, "--hz", "199")
        win = window_of(d, p.pid, 2)
        counts = parse_collapsed(d.ctl("slice", p.pid, "--from", win[0], "--to", win[1],
                                       "--top", "0").stdout)
        log("busy: %d samples of %d stacks" % (sum(counts.values()), len(counts)))
        check_pprof(d, p.pid, win, counts, exe, "busy")
        check_speedscope(d, p.pid, win, counts, "busy (pid %d)" % p.pid, "busy")
        path, boxes, total = check_flamegraph(d, p.pid, win, counts, "busy")
        check_script(path, boxes, total, "busy", "work_beta")
        check_chunks(d, p.pid, win, counts, "busy")

        # -o's extension picks the format; --format still wins.
        for name, test in (("e.folded", lambda b: re.match(rb"^busy", b)),
                           ("e.json", lambda b: json.loads(b)["version"] == "1"),
                           ("e.chunks.json", lambda b: json.loads(b)[0]["version"] == "2"),
                           ("e.pb.gz", lambda b: b[:2] == b"\x1f\x8b"),
                           ("e.speedscope.json", lambda b: "$schema" in json.loads(b)),
                           ("e.svg", lambda b: b.startswith(b"<?xml") and b"<svg" in b)):
            _, data = slice_to(d, p.pid, name, win)
            check(test(data), "-o %s without --format writes that format" % name)
        _, data = slice_to(d, p.pid, "f.svg", win, "--format", "collapsed")
        check(re.match(rb"^busy", data), "--format collapsed -o f.svg: --format wins")
        # A binary format is refused on a terminal (exit 2), written to a pipe.
        master, slave = pty.openpty()
        r = subprocess.run([PROFCTL, "--socket", d.socket, "slice", str(p.pid), "--format",
                            "pprof"], stdout=slave, stderr=subprocess.PIPE, text=True,
                           timeout=60 * SLOW)
        os.close(slave)
        os.close(master)
        check(r.returncode == 2 and "-o FILE" in r.stderr,
              "slice --format pprof to a terminal: exit 2, asking for -o FILE (%d, %r)"
              % (r.returncode, r.stderr))
        r = subprocess.run([PROFCTL, "--socket", d.socket, "slice", str(p.pid), "--format",
                            "pprof", "--top", "0"], capture_output=True, timeout=60 * SLOW)
        check(r.returncode == 0 and r.stdout[:2] == b"\x1f\x8b",
              "slice --format pprof to a pipe: the gzip file on stdout")

    # Transactions: txnapp's 2 threads x 8 transactions of 40 ms.
    outdir = tempfile.mkdtemp(dir=WORK)
    t0 = time.monotonic_ns()
    # (LeakSanitizer cannot run in a process profd traces: off for the sanitized txnapp.)
    app_env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                   ":detect_leaks=0")
    with Program("txnapp", d.socket, outdir, 2, 8, 40, env=app_env) as t:
        line = t.readline(timeout=120 * SLOW)
        check(line.startswith("done"), "txnapp ran its transactions (%r)" % line)
        t1 = time.monotonic_ns()
        win = (t0, t1)
        counts = parse_collapsed(d.ctl("slice", t.pid, "--from", t0, "--to", t1,
                                       "--top", "0").stdout)
        labels = check_pprof(d, t.pid, win, counts, os.path.join(PROGRAMS, "txnapp"), "txnapp")
        txn = {lab.get("transaction") for lab in labels} - {None}
        check({"request-0", "request-1"} <= txn and all(
            re.fullmatch(r"request-\d+( > inner-\d+)?", x) for x in txn),
              "txnapp pprof: samples carry their transactions as labels (%s)" % sorted(txn))
        check_speedscope(d, t.pid, win, counts, "txnapp (pid %d)" % t.pid,
                         "txnapp", txns=("request-0", "request-1"))
        check_chunks(d, t.pid, win, counts, "txnapp")
