"""The wire protocol (common/PROTOCOL.md) spoken byte by byte against the real daemon with
harness.RawClient: handshake and version negotiation; every kind of bad request gets a
bad_request/unknown_command with a clear message and leaves the connection usable; ids are
echoed; requests are answered in order, pipelined or split into single bytes; frames of
exactly 1 MiB are accepted, bigger or empty ones refused and the connection closed;
misbehaving clients (truncated frame, silent, 200 at once, never reading) do not disturb
anyone else; process errors (no such process, zombie, thread, already attached/traced, not
attached, profd itself, the target limit); and a client that never reads its replies does
not make the daemon's memory grow without bound.
Failures found in the daemon are collected and reported at the end, so that one bug does not
hide the others."""
import threading
from harness import *

problems = []


def expect(cond, msg):
    """Like check, but carry on: the test fails at the end with every problem listed."""
    if cond:
        log("ok:", msg)
    else:
        log("FAIL:", msg)
        problems.append(msg)


def frame(obj):
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(payload)) + payload


def err(reply):
    return (reply or {}).get("error") or {}


def closed(c):
    """True when the daemon has closed the connection (EOF, or a reset)."""
    try:
        c.s.settimeout(5 * SLOW)
        return c.s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def fresh_status(d, what):
    """A new client shakes hands and gets a correct status within a few seconds."""
    t0 = time.monotonic()
    c = RawClient(d.socket)
    r = c.call({"cmd": "status", "id": "fresh"})
    c.close()
    dt = time.monotonic() - t0
    check(r and r.get("id") == "fresh" and r["result"]["daemon"]["pid"] == d.pid
          and dt < 5 * SLOW, "after %s: a fresh client gets its status (%.3f s)" % (what, dt))


def dead_pid():
    """The pid of a child that has exited and been reaped."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


with Daemon("--max-targets", "2") as d, Program("busy", 2) as p, Program("busy", 1) as q, \
        Program("busy", 1) as third:

    # 1. Handshake.
    c = RawClient(d.socket, hello=False)
    r = c.call({"cmd": "status", "id": 1})
    check(err(r).get("code") == "handshake_required" and r.get("id") == 1
          and "hello" in err(r).get("message", ""),
          "a request before hello: handshake_required naming hello, id echoed")
    r = c.call({"cmd": "frobnicate"})
    check(err(r).get("code") == "handshake_required", "an unknown command before hello: "
          "handshake_required")
    r = c.call({"cmd": "hello"})
    check(err(r).get("code") == "bad_request" and "version" in err(r).get("message", ""),
          "hello without a version: bad_request naming version")
    r = c.call({"cmd": "status"})
    check(err(r).get("code") == "handshake_required", "  and the connection is still not "
          "handshaken")
    r = c.call({"cmd": "hello", "version": 5, "id": "h"})
    res = r.get("result", {})
    check(res.get("version") == 1 and r.get("id") == "h" and res.get("pid") == d.pid
          and res.get("server", "").startswith("profd "),
          "hello version 5: accepted, agreed version 1, server and pid in the result")
    r = c.call({"cmd": "status"})
    check("daemon" in r.get("result", {}), "  then requests are answered")
    c.close()
    for v in (0, -3):
        c = RawClient(d.socket, hello=False)
        r = c.call({"cmd": "hello", "version": v, "id": 9})
        check(err(r).get("code") == "unsupported_version" and r.get("id") == 9
              and "version 1" in err(r).get("message", ""),
              "hello version %d: unsupported_version saying which version profd speaks" % v)
        check(closed(c), "  and the daemon closes the connection")
        c.close()
    c = RawClient(d.socket, hello=False)
    r = c.call({"cmd": "hello", "version": "1"})
    check(r.get("result", {}).get("version") == 1, "hello with the version as a decimal string")
    c.close()

    # 2. Bad requests: each gets an error with a message, and the connection goes on.
    c = RawClient(d.socket)
    cases = [
        (b'{"cmd":', "bad_request", "JSON object"),
        (b'\xff\xfe\x00', "bad_request", "JSON object"),
        (b'[1, 2]', "bad_request", "JSON object"),
        (b'"status"', "bad_request", "JSON object"),
        ({}, "bad_request", '"cmd"'),
        ({"cmd": 5}, "bad_request", '"cmd"'),
        ({"cmd": None}, "bad_request", '"cmd"'),
        ({"cmd": "frobnicate"}, "unknown_command", "frobnicate"),
        ({"cmd": "STATUS"}, "unknown_command", "STATUS"),
        ({"cmd": "status", "id": {"a": 1}}, "bad_request", '"id"'),
        ({"cmd": "status", "id": [1]}, "bad_request", '"id"'),
        ({"cmd": "attach"}, "bad_request", '"pid"'),
        ({"cmd": "attach", "pid": "abc"}, "bad_request", '"pid"'),
        ({"cmd": "attach", "pid": -5}, "bad_request", '"pid"'),
        ({"cmd": "attach", "pid": 0}, "bad_request", '"pid"'),
        ({"cmd": "attach", "pid": 1.5}, "bad_request", '"pid"'),
        ({"cmd": "attach", "pid": True}, "bad_request", '"pid"'),
        ({"cmd": "attach", "pid": p.pid, "hz": 0}, "bad_request", '"hz"'),
        ({"cmd": "attach", "pid": p.pid, "hz": 10**9}, "bad_request", '"hz"'),
        ({"cmd": "attach", "pid": p.pid, "hz": 10001}, "bad_request", '"hz"'),
        ({"cmd": "attach", "pid": p.pid, "hz": 1e30}, "bad_request", '"hz"'),
        ({"cmd": "attach", "pid": p.pid, "hz": "fast"}, "bad_request", '"hz"'),
        ({"cmd": "attach", "pid": p.pid, "hz": 99.5}, "bad_request", '"hz"'),
        ({"cmd": "attach", "pid": p.pid, "buffer_s": 0}, "bad_request", '"buffer_s"'),
        ({"cmd": "attach", "pid": p.pid, "buffer_s": 3601}, "bad_request", '"buffer_s"'),
        ({"cmd": "attach", "pid": p.pid, "buffer_s": -1}, "bad_request", '"buffer_s"'),
        ({"cmd": "detach", "pid": "x"}, "bad_request", '"pid"'),
        ({"cmd": "slice"}, "bad_request", '"pid"'),
        ({"cmd": "status", "pid": -1}, "bad_request", '"pid"'),
    ]
    for req, code, needle in cases:
        r = c.call(req)
        e = err(r)
        check(e.get("code") == code and needle in e.get("message", ""),
              "%.60r -> %s mentioning %s (%r)" % (req, code, needle, e.get("message")))
        r = c.call({"cmd": "status", "id": "next"})
        check(r.get("id") == "next" and "daemon" in r.get("result", {}),
              "  the same connection answers the next request")
    check(c.call({"cmd": "list"})["result"]["targets"] == [],
          "none of the refused attach requests attached anything")

    # Now attached: the slice arguments.
    r = c.call({"cmd": "attach", "pid": p.pid, "hz": 499, "buffer_s": 30, "id": 3})
    res = r.get("result", {})
    check(r.get("id") == 3 and res.get("pid") == p.pid and res.get("hz") == 499
          and res.get("buffer_s") == 30 and res.get("state") == "attached"
          and res.get("threads") == 3,
          "attach with hz and buffer_s: the summary says so (%r)" % res)
    d.wait_samples(p.pid, 20)  # (a slice below must hold samples)
    for req, needle in [
        ({"format": "xml"}, '"format"'),
        ({"format": 1}, '"format"'),
        ({"from_ns": 2000, "to_ns": 1000}, '"from_ns"'),
        ({"from_ns": 1000, "last_ns": 10**9}, "either"),
        ({"to_ns": 10**12, "last_ns": 10**9}, "either"),
        ({"last_ns": "abc"}, '"last_ns"'),
        ({"last_ns": -1}, '"last_ns"'),
        ({"from_ns": "-5"}, '"last_ns"'),
        ({"thread_ids": "yes"}, '"thread_ids"'),
    ]:
        req.update({"cmd": "slice", "pid": p.pid})
        r = c.call(req)
        check(err(r).get("code") == "bad_request" and needle in err(r).get("message", ""),
              "%.70r -> bad_request mentioning %s (%r)" % (req, needle, err(r).get("message")))
        r = c.call({"cmd": "status", "id": "next"})
        check(r.get("id") == "next" and "daemon" in r.get("result", {}),
              "  the same connection answers the next request")

    # 3. ids: numbers and strings come back, on results, errors and late (async) replies.
    for ident in (42, 0, -7, 2.5, "abc-1", ""):
        r = c.call({"cmd": "list", "id": ident})
        check(r.get("id") == ident and "result" in r, "id %r echoed on a result" % (ident,))
    r = c.call({"cmd": "frobnicate", "id": "e1"})
    check(r.get("id") == "e1" and "error" in r, "id echoed on an error")
    r = c.call({"cmd": "slice", "pid": p.pid, "last_ns": 10**9, "id": 77})
    check(r.get("id") == 77 and r.get("result", {}).get("samples", 0) > 0,
          "id echoed on a slice (answered by the worker thread)")
    r = c.call({"cmd": "list"})
    check("id" not in r, "no id in the request: none in the reply")

    # 4. Order: pipelined requests are answered in order, even behind a slice; a request split
    #    into single bytes is answered once whole.
    c.send_raw(frame({"cmd": "slice", "pid": p.pid, "format": "sentry", "id": "s"}) +
               frame({"cmd": "status", "id": "t"}) + frame({"cmd": "frobnicate", "id": "u"}) +
               frame({"cmd": "list", "id": "v"}))
    ids = [c.recv().get("id") for _ in range(4)]
    check(ids == ["s", "t", "u", "v"], "pipelined slice, status, error, list: replies in "
          "order (%s)" % ids)
    data = frame({"cmd": "status", "id": "bytes"})
    for i in range(len(data)):
        c.send_raw(data[i:i + 1])
        time.sleep(0.002)
    check(c.recv().get("id") == "bytes", "a request sent one byte at a time is answered")
    # A client that half-closes after its requests still gets every reply.
    h = RawClient(d.socket)
    h.send_raw(frame({"cmd": "slice", "pid": p.pid, "id": 1}) + frame({"cmd": "status", "id": 2}))
    h.s.shutdown(socket.SHUT_WR)
    r1, r2 = h.recv(), h.recv()
    check(r1 and r2 and r1.get("id") == 1 and r2.get("id") == 2 and closed(h),
          "requests followed by a half-close: both answered, then the connection is closed")
    h.close()

    # 5. Frame limits.
    pad = b'{"cmd":"status","id":"big","pad":"'
    body = pad + b"x" * ((1 << 20) - len(pad) - 2) + b'"}'
    check(len(body) == 1 << 20, "(set-up) a request of exactly 1 MiB")
    c.send_raw(struct.pack(">I", len(body)) + body)
    r = c.recv()
    check(r.get("id") == "big" and "daemon" in r.get("result", {}),
          "a request of exactly 1 MiB is accepted")
    c.close()
    for n in ((1 << 20) + 1, 2 << 20, 0xFFFFFFFF):
        t = RawClient(d.socket)
        t.send_raw(struct.pack(">I", n) + b"x" * 1000)
        r = t.recv()
        check(err(r).get("code") == "too_large" and "1 MiB" in err(r).get("message", ""),
              "a frame announcing %d bytes: too_large" % n)
        check(closed(t), "  and the connection is closed")
        t.close()
        fresh_status(d, "an oversized frame")
    t = RawClient(d.socket)
    t.send_raw(struct.pack(">I", 0))
    r = t.recv()
    check(err(r).get("code") == "bad_request" and "empty" in err(r).get("message", ""),
          "a zero-length frame: bad_request 'empty frame'")
    check(closed(t), "  and the connection is closed")
    t.close()
    fresh_status(d, "an empty frame")

    # 6. Misbehaving clients.
    def nfds():
        # Its sockets: a client's end is one. (Not every descriptor: the attached target's
        # perf events come and go as its threads' ticks are deferred, and the clocks of
        # threads not seen running for a while are closed.)
        n = 0
        for fd in os.listdir("/proc/%d/fd" % d.pid):
            try:
                n += os.readlink("/proc/%d/fd/%s" % (d.pid, fd)).startswith("socket:")
            except OSError:
                pass  # (closed meanwhile)
        return n
    # The sockets the daemon holds with one client connected, this observer: counted
    # once the daemon has let go of every client above (they are closed, but the daemon
    # closes its ends only when it sees that), and again at the end.
    obs = RawClient(d.socket)

    def only_observer():
        return obs.call({"cmd": "status"})["result"]["daemon"]["clients"] == 1
    wait_until(only_observer, 10, "the daemon to let go of the closed clients")
    fds_before = nfds()
    t = RawClient(d.socket)
    t.send_raw(struct.pack(">I", 100) + b'{"cmd":"st')
    t.close()
    fresh_status(d, "a client that sent half a frame and disconnected")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(d.socket)
    silent2 = RawClient(d.socket)  # handshaken, then silent
    fresh_status(d, "a client that connected and sent nothing (still connected)")

    results = [None] * 200
    def one(i):
        try:
            k = RawClient(d.socket)
            results[i] = k.call({"cmd": "status", "id": i})
            k.close()
        except Exception as e:
            results[i] = {"exception": str(e)}
    threads = [threading.Thread(target=one, args=(i,)) for i in range(200)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    good = sum(1 for i, r in enumerate(results)
               if r and r.get("id") == i and r.get("result", {}).get("daemon", {}).get("pid") == d.pid)
    check(good == 200, "200 concurrent clients each get their own status (%d did, %.2f s)"
          % (good, time.monotonic() - t0))
    fresh_status(d, "200 concurrent clients")

    t = RawClient(d.socket)
    t.send_raw(frame({"cmd": "status"}) * 500)
    t.close()
    fresh_status(d, "500 requests without reading a reply, then a disconnect")
    silent.close()
    silent2.close()
    wait_until(only_observer, 10, "every closed client to be forgotten")
    log("ok: the daemon counts only the asking client once the others are gone")
    wait_until(lambda: nfds() == fds_before, 5, "the daemon's sockets to return to %d "
               "(now %d)" % (fds_before, nfds()))
    log("ok: the daemon holds as many sockets as before (%d): no client's leaked" % fds_before)
    obs.close()

    # 7. Errors about the process.
    c = RawClient(d.socket)
    gone = dead_pid()
    r = c.call({"cmd": "attach", "pid": gone})
    check(err(r).get("code") == "no_such_process" and str(gone) in err(r).get("message", ""),
          "attach of a pid that does not exist: no_such_process")
    for cmd in ("slice", "detach", "status"):
        r = c.call({"cmd": cmd, "pid": gone})
        check(err(r).get("code") == "no_such_process", "%s of it: no_such_process" % cmd)
    z = subprocess.Popen(["true"])
    wait_until(lambda: open("/proc/%d/stat" % z.pid).read().split(") ")[1][0] == "Z", 5,
               "a zombie")
    r = c.call({"cmd": "attach", "pid": z.pid})
    check(err(r).get("code") == "no_such_process", "attach of a zombie: no_such_process (%r)"
          % err(r))
    z.wait()
    tid = max(int(x) for x in os.listdir("/proc/%d/task" % q.pid))
    check(tid != q.pid, "(set-up) a thread id that is not a process id")
    r = c.call({"cmd": "attach", "pid": tid})
    check(err(r).get("code") == "bad_request" and "thread of process %d" % q.pid in
          err(r).get("message", ""), "attach of a thread id: bad_request naming its process (%r)"
          % err(r).get("message"))
    r = c.call({"cmd": "attach", "pid": p.pid})
    check(err(r).get("code") == "already_attached", "attach twice: already_attached")
    for cmd in ("detach", "slice"):
        r = c.call({"cmd": cmd, "pid": q.pid})
        check(err(r).get("code") == "not_attached" and "not attached" in err(r).get("message", ""),
              "%s of a process not attached: not_attached" % cmd)
    r = c.call({"cmd": "status", "pid": q.pid})
    check(r.get("result", {}).get("targets") == [], "status of a process not attached: no target")
    r = c.call({"cmd": "attach", "pid": d.pid})
    check(err(r).get("code") == "permission_denied" and "itself" in err(r).get("message", ""),
          "attach of the daemon itself: permission_denied (%r)" % err(r).get("message"))
    # A process some other tracer holds (this test, here): a clear error naming it.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    with Program("busy", 1) as held:
        check(libc.ptrace(0x4206, held.pid, None, None) == 0, "(set-up) this test traces a process")
        r = c.call({"cmd": "attach", "pid": held.pid})
        check(err(r).get("code") in ("permission_denied", "attach_failed") and
              "traced by pid %d" % os.getpid() in err(r).get("message", ""),
              "attach of a process traced by someone else: refused naming the tracer (%r)" % err(r))
        wait_until(lambda: all(v in (0, os.getpid()) for v in tracer_pids(held.pid).values()),
                   5, "profd to let go of the threads it had seized")
        log("ok:   and profd let go of the threads it had seized")
    # The target limit (--max-targets 2).
    check("result" in c.call({"cmd": "attach", "pid": q.pid}), "attach a second process")
    r = c.call({"cmd": "attach", "pid": third.pid})
    check(err(r).get("code") == "limit" and "2" in err(r).get("message", ""),
          "a third with --max-targets 2: limit")
    r = c.call({"cmd": "detach", "pid": q.pid, "id": "dq"})
    check(r.get("id") == "dq" and r.get("result") == {"pid": q.pid, "detached": True},
          "detach: {pid, detached: true} with the id")
    wait_until(lambda: all(v == 0 for v in tracer_pids(q.pid).values()), 5, "q untraced")
    r = c.call({"cmd": "detach", "pid": q.pid})
    check(err(r).get("code") == "not_attached", "detach again: not_attached")

    # 8. buffer_s is checked before it is turned into nanoseconds: 18446744074 s times 1e9
    #    wraps around 2^64 to 0.29 s.
    r = c.call({"cmd": "attach", "pid": q.pid, "buffer_s": 18446744074})
    expect(err(r).get("code") == "bad_request" and '"buffer_s"' in err(r).get("message", ""),
           "attach with buffer_s 18446744074 (overflows when multiplied by 1e9): bad_request "
           "(got %r)" % (r.get("error") or r.get("result")))
    if "result" in r:
        c.call({"cmd": "detach", "pid": q.pid})
    c.close()

    # 9. A client that sends requests and never reads the replies: its replies must not pile
    #    up in the daemon without bound (any local user can connect). Send 100000 status
    #    requests (2 MB; each reply is some 50 times its request) without reading, and
    #    watch the daemon's resident memory. With back-pressure (stop reading a client while
    #    much of its output is pending) or a cap on pending output (drop the client), it
    #    stays within a few MiB, and our sends block or fail instead.
    before = rss_kib(d.pid)
    t = RawClient(d.socket)
    t.s.setblocking(False)
    data = memoryview(frame({"cmd": "status"}) * 100000)
    off, t0, peak = 0, time.monotonic(), before
    # Until everything is sent, or for 10 s, or until the daemon has taken nothing for 2 s:
    # it stopped reading this client (the back-pressure this checks), and more time shows
    # nothing more (under valgrind, 10 s is 80).
    progress = t0
    while off < len(data) and time.monotonic() - t0 < 10 * SLOW and \
            time.monotonic() - progress < 2 * SLOW:
        try:
            n = t.s.send(data[off:])
            off += n
            if n:
                progress = time.monotonic()
        except BlockingIOError:
            time.sleep(0.005)
            peak = max(peak, rss_kib(d.pid))
        except (BrokenPipeError, ConnectionResetError):
            break  # the daemon dropped us: also fine
    for _ in range(20):  # let the daemon answer what it has read
        time.sleep(0.1 * SLOW)
        peak = max(peak, rss_kib(d.pid))
    t.close()
    log("sent %d of %d bytes of requests in %.1f s; daemon RSS %d KiB before, %d KiB at most "
        "after" % (off, len(data), time.monotonic() - t0, before, peak))
    if d.sanitized() or not TIMING:
        log("not checked with a sanitizer's or valgrind's allocator: the daemon's memory grew "
            "by %d KiB" % (peak - before))
    else:
        expect(peak - before < 16 * 1024, "a client that never reads: the daemon's memory grew "
               "by %d KiB (limit 16 MiB)" % (peak - before))
    fresh_status(d, "a client that never read its replies")

if problems:
    fail("%d problem(s):\n  " % len(problems) + "\n  ".join(problems))
