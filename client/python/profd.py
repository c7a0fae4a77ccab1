"""profd.py: mark transactions of a Python application for profd and get their profiles.

Only the standard library; the same protocol as libprofd (common/PROTOCOL.md).

    import profd
    p = profd.Profd()                       # $PROFD_SOCKET, else the default socket
    with p.transaction("GET /users") as t:  # never raises because of profd
        handle_request()
    if t.profile:                           # Sentry sampled profile (dict), or None
        send(t.profile)

    txn = p.start("job")                    # or by hand: ProfdError on failure
    ...
    profile = p.finish(txn, lookback_s=2)   # the 2 s before the start too

profd samples the process from outside (ptrace): no thread, no signal handler, no timer is
added to it; for CPython 3.11-3.13 its profiles show the program's Python functions with the
native frames between and below them. With Sentry's SDK:

    sentry_sdk.init(dsn=..., traces_sample_rate=1.0,
                    _experiments={"profiles_sample_rate": 1.0},  # (the SDK's own option)
                    integrations=[profd.SentryIntegration()])

makes every sampled transaction carry profd's profile of exactly it, and keeps the SDK's own
profiler (its signal handler or thread) from ever starting. Like libprofd: lazy
connection, reconnection after a daemon restart, a timeout on every wait, thread-safe,
fork-safe (a child never uses its parent's connection).
"""

import json
import os
import select
import socket
import struct
import threading
import time
import weakref

__all__ = ["Profd", "ProfdError", "SentryIntegration", "default_socket_path"]

PROTO_VERSION = 1
MAX_REPLY = 256 << 20

_ctx_lib = None
_ctx_lib_tried = False


def _context_lib():
    """libprofd (ctypes), whose profd_context_begin/end publish a transaction in the calling
    thread's OpenTelemetry thread context (otel_thread_ctx_v1, the Thread Context OTEP),
    which profd reads at each sample: a native thread-local that pure Python cannot make.
    None where it cannot be loaded ($PROFD_LIBPROFD names it, else libprofd.so.0; "none":
    none), or with $PROFD_THREAD_CONTEXT=0: every start and end is then a message."""
    global _ctx_lib, _ctx_lib_tried
    if _ctx_lib_tried:
        return _ctx_lib
    _ctx_lib_tried = True
    if os.environ.get("PROFD_THREAD_CONTEXT") == "0" or os.environ.get("PROFD_LIBPROFD") == "none":
        return None
    try:
        import ctypes
        lib = ctypes.CDLL(os.environ.get("PROFD_LIBPROFD") or "libprofd.so.0")
        lib.profd_context_begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                            ctypes.c_char_p, ctypes.c_char_p]
        lib.profd_context_begin.restype = ctypes.c_void_p
        lib.profd_context_end.argtypes = [ctypes.c_void_p]
        lib.profd_context_end.restype = None
        _ctx_lib = (lib, ctypes.create_string_buffer)
    except (OSError, AttributeError):
        _ctx_lib = None
    return _ctx_lib


class ProfdError(Exception):
    """A failed call. code: "no_daemon", "timeout", "disconnected", "protocol", or the
    daemon's error code ("permission_denied", "bad_request", "limit", ...)."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def default_socket_path():
    p = os.environ.get("PROFD_SOCKET")
    if p:
        return p
    system = "/run/profd/profd.sock"
    if os.geteuid() == 0:
        return system
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    own = os.path.join(xdg, "profd.sock") if xdg else "/tmp/profd-%d.sock" % os.getuid()
    if not os.path.exists(own) and os.path.exists(system):
        return system
    return own


_instances = weakref.WeakSet()


def _after_fork_in_child():
    # A child may have been forked while another thread held an instance's lock (waiting
    # for a profile, say): no thread of the child would ever release it.
    for p in list(_instances):
        p._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Profd:
    def __init__(self, socket_path=None, timeout=1.0, finish_timeout=10.0):
        self.path = socket_path or default_socket_path()
        self.timeout = timeout
        self.finish_timeout = finish_timeout
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._sock = None
        self._owner = None
        self._next_id = 0
        # Transaction ids are chosen here, (gen << 32) | seq, gen changing with each
        # connection: an id the daemon lost with its connection is known to be gone.
        self._gen = 0
        self._seq = 0
        # Replies: one waiting thread at a time reads the socket without the lock and
        # hands each reply to its caller, so other threads' calls go on meanwhile.
        self._conn = 0          # number of the current connection
        self._reading = False
        self._rbuf = bytearray()
        self._waiting = set()   # request ids whose callers wait
        self._replies = {}
        self._dead = None       # a socket dropped while being read: its reader closes it
        # profd reads this process's thread context (a finish's reply said so): starts are
        # published there (_context_lib), and only a finish that wants a profile is sent.
        self._ctx_ok = False
        self._ctx_open = {}     # txn id -> (handle, name, trace, span, start ns, tid)
        _instances.add(self)

    def _reset_after_fork(self):
        self._ctx_ok = False
        self._ctx_open = {}     # (the parent's)
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._reading = False
        self._waiting = set()
        self._replies = {}

    # -- connection ----------------------------------------------------------------------
    def close(self):
        with self._lock:
            self._drop()

    def _drop(self):
        """Forget the connection (lock held); a socket being read is shut down and left for
        its reader to close."""
        if self._sock is not None:
            try:
                if self._reading:
                    self._sock.shutdown(socket.SHUT_RDWR)
                    self._dead = self._sock
                else:
                    self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._conn += 1
        self._rbuf = bytearray()
        self._cv.notify_all()

    def _connect(self):
        if self._sock is not None and self._owner != os.getpid():
            # Inherited across fork: the parent's connection. Close our copy only.
            self._drop()
        if self._sock is not None:
            return
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
            # The handshake, before anyone else may use the socket.
            data = json.dumps({"cmd": "hello", "version": PROTO_VERSION, "id": 0}).encode()
            s.sendall(struct.pack(">I", len(data)) + data)
            head = self._recv_exact(s, 4)
            reply = json.loads(self._recv_exact(s, struct.unpack(">I", head)[0]))
        except socket.timeout:
            s.close()
            raise ProfdError("timeout", "profd did not answer within %.1f s" % self.timeout)
        except (OSError, ValueError) as e:
            s.close()
            raise ProfdError("no_daemon", "profd is not running at %s (%s)"
                             % (self.path, getattr(e, "strerror", None) or e))
        if "result" not in reply:
            s.close()
            raise ProfdError("protocol", "profd refused the handshake: %r" % reply)
        self._sock, self._owner = s, os.getpid()
        self._conn += 1
        self._rbuf = bytearray()
        self._gen = self._gen + 1 if self._gen + 1 < (1 << 21) else 1
        self._seq = 0
        self._ctx_ok = False  # (a new daemon, perhaps: not attached yet)

    @staticmethod
    def _recv_exact(s, n):
        b = bytearray()
        while len(b) < n:
            chunk = s.recv(n - len(b))
            if not chunk:
                raise OSError("profd closed the connection")
            b += chunk
        return bytes(b)

    def _current(self, txn_id):
        return (self._sock is not None and self._owner == os.getpid()
                and isinstance(txn_id, int) and txn_id >> 32 == self._gen)

    def _send_only(self, req):
        data = json.dumps(req).encode()
        try:
            self._sock.sendall(struct.pack(">I", len(data)) + data)
        except socket.timeout:
            self._drop()  # part of a frame may be out: the stream is no longer usable
            raise ProfdError("timeout", "profd did not read within %.1f s" % self.timeout)
        except OSError as e:
            self._drop()
            raise ProfdError("disconnected", str(e))

    def _read_some(self, timeout):
        """As the only reader (lock held, released while waiting): wait up to timeout for
        data, then hand out the complete replies. A part of a reply stays buffered for the
        next reader."""
        sock, conn = self._sock, self._conn
        self._reading = True
        self._lock.release()
        data, err = b"", None
        try:
            r, _, _ = select.select([sock], [], [], max(timeout, 0))
            if r:
                data = sock.recv(1 << 16)
                if not data:
                    err = "profd closed the connection"
        except (OSError, ValueError) as e:
            err = str(e) or "connection lost"
        finally:
            self._lock.acquire()
            self._reading = False
        if self._dead is sock:
            self._dead = None
            try:
                sock.close()
            except OSError:
                pass
        if self._conn == conn:
            if err:
                self._drop()
            elif data:
                self._rbuf += data
                while len(self._rbuf) >= 4:
                    n = struct.unpack(">I", self._rbuf[:4])[0]
                    if n == 0 or n > MAX_REPLY:
                        self._drop()
                        break
                    if len(self._rbuf) < 4 + n:
                        break
                    frame = bytes(self._rbuf[4:4 + n])
                    del self._rbuf[:4 + n]
                    try:
                        reply = json.loads(frame)
                    except ValueError:
                        self._drop()
                        break
                    rid = reply.get("id") if isinstance(reply, dict) else None
                    if rid in self._waiting:
                        self._replies[rid] = reply
                    # else: a late reply, of a call that timed out
        self._cv.notify_all()

    def _exchange(self, req, timeout):
        """Send req and wait for its reply (lock held, released while waiting)."""
        self._next_id += 1
        rid = self._next_id
        self._send_only(dict(req, id=rid))
        conn = self._conn
        self._waiting.add(rid)
        deadline = time.monotonic() + timeout
        try:
            while rid not in self._replies:
                if self._conn != conn or self._sock is None:
                    raise ProfdError("disconnected", "the connection to profd was lost")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProfdError("timeout", "profd did not answer within %.1f s" % timeout)
                if not self._reading:
                    self._read_some(left)
                else:
                    self._cv.wait(left)
            reply = self._replies.pop(rid)
        finally:
            self._waiting.discard(rid)
            self._replies.pop(rid, None)
        if "error" in reply:
            err = reply["error"]
            raise ProfdError(err.get("code", "internal"), err.get("message", ""))
        return reply["result"]

    # -- transactions --------------------------------------------------------------------
    def start(self, name, trace_id=None, span_id=None):
        """Start a transaction run by the calling thread; returns its id. Sent without
        waiting for an answer: what profd refuses is reported by finish(). span_id (16 hex
        digits): the span it runs as, which profd's OpenTelemetry export links its samples
        to."""
        name = str(name)
        if not name or len(name.encode()) > 512 or (trace_id and len(trace_id) > 64) or \
                (span_id and len(span_id) != 16):
            raise ProfdError("bad_request", "name: 1 to 512 bytes; trace_id: 32 hex digits; "
                             "span_id: 16 hex digits")
        # (Loaded at the first start, before profd attaches: it finds the symbol then.)
        lib = _context_lib()
        if lib and self._ctx_ok and (trace_id is None or len(trace_id) == 32):
            tbuf, sbuf = lib[1](33), lib[1](17)
            h = lib[0].profd_context_begin(trace_id.encode() if trace_id else None,
                                           span_id.encode() if span_id else None,
                                           name.encode(), tbuf, sbuf)
            if h:
                with self._lock:
                    self._seq += 1
                    txn_id = self._gen << 32 | self._seq
                    self._ctx_open[txn_id] = (h, name, tbuf.value.decode(), sbuf.value.decode(),
                                              time.monotonic_ns(), threading.get_native_id())
                return txn_id
        req = {"cmd": "txn_start", "name": name, "tid": threading.get_native_id(),
               "t_ns": time.monotonic_ns(), "noreply": True}
        if trace_id:
            req["trace_id"] = trace_id
        if span_id:
            req["span_id"] = span_id
        with self._lock:
            self._connect()
            self._seq += 1
            req["txn_id"] = self._gen << 32 | self._seq
            self._send_only(req)
            return req["txn_id"]

    def finish(self, txn_id, lookback_s=0):
        """Finish it; returns its Sentry sampled profile (version 1) as a dict."""
        req = {"cmd": "txn_finish", "txn_id": txn_id, "t_ns": time.monotonic_ns(),
               "tid": threading.get_native_id()}
        if lookback_s:
            req["lookback_s"] = lookback_s
        with self._lock:
            got = self._ctx_open.pop(txn_id, None)
            if got is not None:
                # Published in the thread context: its profile asked for by its ids.
                h, name, trace, span, start_ns, tid = got
                _context_lib()[0].profd_context_end(h)
                req.update(cmd="txn_profile", name=name, trace_id=trace, span_id=span,
                           start_ns=start_ns, txn_tid=tid)
                del req["txn_id"]
                self._connect()
            elif not self._current(txn_id):
                raise ProfdError("no_transaction", "transaction %r is not open on this "
                                 "connection" % (txn_id,))
            try:
                res = self._exchange(req, self.finish_timeout)
            except ProfdError as e:
                if got is not None and e.code in ("not_attached", "no_such_process"):
                    self._ctx_ok = False  # the next start sends one
                raise
            # Whether profd reads this process's thread context: the next starts are
            # published there, without a message.
            self._ctx_ok = bool(res.get("thread_context")) and _context_lib() is not None
            return res["profile"]

    def profiler_id(self):
        """profd's Sentry profiler_id for this process (32 hex digits), under which its
        exporter sends this process's profile chunks (profd.conf(5): export_sentry); None
        when profd exports nothing. The process is attached if it is not (and stays so: an
        explicit attach), so that the chunks cover it from now on."""
        pid = os.getpid()
        cached = getattr(self, "_profiler", None)
        if cached and cached[0] == pid:
            return cached[1]
        with self._lock:
            self._connect()
            try:
                res = self._exchange({"cmd": "attach", "pid": pid}, self.timeout)
            except ProfdError as e:
                if e.code != "already_attached":
                    raise
                res = self._exchange({"cmd": "status", "pid": pid}, self.timeout)
                res = next((t for t in res.get("targets", []) if t.get("pid") == pid), {})
        pid_id = (res.get("export") or {}).get("profiler_id")
        self._profiler = (pid, pid_id)
        return pid_id

    def discard(self, txn_id):
        """End it without building a profile (sent without waiting for an answer)."""
        with self._lock:
            got = self._ctx_open.pop(txn_id, None)
            if got is not None:
                _context_lib()[0].profd_context_end(got[0])  # (nothing to send)
                return
            if not self._current(txn_id):
                raise ProfdError("no_transaction", "transaction %r is not open on this "
                                 "connection" % (txn_id,))
            self._send_only({"cmd": "txn_discard", "txn_id": txn_id, "noreply": True})

    def transaction(self, name, trace_id=None, lookback_s=0):
        """A context manager: the block is a transaction; .profile holds its profile after
        the block (None if profd was unavailable), .error what went wrong. Never raises
        because of profd; an exception in the block discards the transaction."""
        return _Transaction(self, name, trace_id, lookback_s)


class _Transaction:
    def __init__(self, p, name, trace_id, lookback_s):
        self.p, self.name, self.trace_id, self.lookback_s = p, name, trace_id, lookback_s
        self.id = None
        self.profile = None
        self.error = None

    def __enter__(self):
        try:
            self.id = self.p.start(self.name, self.trace_id)
        except ProfdError as e:
            self.error = e
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.id is None:
            return False
        try:
            if exc_type is None:
                self.profile = self.p.finish(self.id, self.lookback_s)
            else:
                self.p.discard(self.id)
        except ProfdError as e:
            self.error = e
        return False


# -- Sentry's SDK --------------------------------------------------------------------------

def _sentry_integration_base():
    try:
        from sentry_sdk.integrations import Integration
        return Integration
    except ImportError:  # no SDK: the class still exists, and does nothing
        return object


class SentryIntegration(_sentry_integration_base()):
    """Pass to sentry_sdk.init(integrations=[...]): each transaction the SDK starts and
    samples (sentry_sdk.start_transaction, its WSGI integration...) is a profd transaction of
    the thread that started it, and when it finishes its profile from profd travels in the
    transaction's envelope as the `profile` item, linked as the SDK links its own (the
    transaction's event id, trace id and name; the thread that ran it as the active one).
    Profiles are sampled at profiles_sample_rate (given here, else the SDK's
    `_experiments["profiles_sample_rate"]`; none: every sampled transaction). The SDK's own
    profiler is never set up: no signal handler, thread or timer of it runs. Without profd
    the application runs unchanged and its transactions go without profiles; nothing raises
    (finish waits at most finish_timeout for the profile)."""

    identifier = "profd"
    _installed = False

    def __init__(self, socket_path=None, profiles_sample_rate=None, timeout=0.5,
                 finish_timeout=2.0, continuous=False):
        self.profiles_sample_rate = profiles_sample_rate
        self.continuous = continuous
        self.client = Profd(socket_path, timeout=timeout, finish_timeout=finish_timeout)
        self.errors = 0  # transactions that went without a profile because of profd
        self.last_error = None  # why the latest of them did
        # Have profd attach this process now (a transaction's start attaches it), so that
        # the first real transaction is sampled from its start. Continuous: attached for
        # good, its chunks sent by profd's exporter under this profiler_id.
        try:
            if continuous:
                self.client.profiler_id()
            else:
                self.client.discard(self.client.start("profd.SentryIntegration"))
        except Exception as e:
            self.last_error = e

    @staticmethod
    def setup_once():
        if SentryIntegration._installed:
            return
        SentryIntegration._installed = True
        import random

        import sentry_sdk.client
        import sentry_sdk.scope
        from sentry_sdk.hub import Hub
        from sentry_sdk.tracing import Transaction

        # The SDK's profiler (a SIGPROF/SIGALRM handler or a sampling thread) stays off:
        # profd samples from outside.
        sentry_sdk.client.setup_profiler = lambda options: None

        start_transaction = Hub.start_transaction
        # Open profd transactions by the SDK transaction's span id (its objects have
        # __slots__): oldest first, bounded (one never finished is discarded at profd).
        import collections
        open_txns = collections.OrderedDict()
        lock = threading.Lock()

        def start(hub, transaction=None, **kwargs):
            tx = start_transaction(hub, transaction, **kwargs)
            me = hub.get_integration(SentryIntegration)
            if me is None or not getattr(tx, "sampled", False):
                return tx
            if me.continuous:
                return start_continuous(me, tx)
            with lock:
                if tx.span_id in open_txns:
                    return tx
            rate = me.profiles_sample_rate
            if rate is None and hub.client is not None:
                rate = hub.client.options.get("_experiments", {}).get("profiles_sample_rate")
            if rate is not None and random.random() >= float(rate):
                return tx
            try:
                txn = me.client.start(tx.name or "transaction", tx.trace_id, tx.span_id)
            except Exception as e:  # profd absent or refusing: no profile, nothing else changes
                me.errors += 1
                me.last_error = e
                return tx
            with lock:
                open_txns[tx.span_id] = (me, txn)
                while len(open_txns) > 10000:
                    _, (m, old) = open_txns.popitem(last=False)
                    try:
                        m.client.discard(old)
                    except Exception:
                        pass
            return tx

        finish = Transaction.finish

        def finish_with_profile(tx, hub=None):
            with lock:
                got = open_txns.pop(tx.span_id, None) if tx.timestamp is None else None
            if got is not None:
                me, txn = got
                try:
                    prof = me.client.finish(txn)
                    # A profile relay would drop (a transaction shorter than the
                    # sampling interval) is not sent.
                    if _relay_keeps(prof):
                        tx._profile = _as_sdk_profile(prof, tx)
                except Exception as e:
                    me.errors += 1
                    me.last_error = e
            return finish(tx, hub)

        # Continuous profiling, as Sentry's SDKs link a transaction to the chunks of their
        # own continuous profiler: contexts.profile.profiler_id on the transaction, and the
        # thread that ran it (its native id, as the chunks' samples name it) in the trace
        # context's data; profd's exporter sends the chunks.
        threads = collections.OrderedDict()  # span id -> (thread id, name, profiler_id)

        def start_continuous(me, tx):
            try:
                profiler = me.client.profiler_id()
            except Exception as e:
                me.errors += 1
                me.last_error = e
                return tx
            if not profiler:
                me.errors += 1
                me.last_error = ProfdError("not_exported", "profd exports no profiles "
                                           "(profd.conf(5): export_sentry)")
                return tx
            with lock:
                threads[tx.span_id] = (str(threading.get_native_id()),
                                       threading.current_thread().name, profiler)
                while len(threads) > 10000:
                    threads.popitem(last=False)
            return tx

        get_trace_context = Transaction.get_trace_context

        def trace_context(tx):
            rv = get_trace_context(tx)
            with lock:
                got = threads.get(tx.span_id)
            if got:
                rv.setdefault("data", {}).update({"thread.id": got[0], "thread.name": got[1]})
            return rv

        def profile_context(event, hint):
            trace = (event.get("contexts") or {}).get("trace") or {}
            if event.get("type") == "transaction" and trace.get("span_id"):
                with lock:
                    got = threads.pop(trace["span_id"], None)
                if got:
                    event["contexts"]["profile"] = {"profiler_id": got[2]}
            return event

        sentry_sdk.scope.add_global_event_processor(profile_context)

        Hub.start_transaction = start
        Transaction.finish = finish_with_profile
        Transaction.get_trace_context = trace_context


def _relay_keeps(prof):
    """Whether relay keeps the profile and Sentry can draw it: relay's normalization (samples
    inside the transaction; per thread, idle samples at the edges dropped, then threads with a
    single sample) must leave at least two samples of the active thread, from which Sentry
    builds the call trees. Two samples of two threads, or one of them idle, are not enough."""
    try:
        t = prof.get("transaction") or {}
        trace = prof.get("profile") or {}
        stacks = trace.get("stacks") or []
        start = int(t.get("relative_start_ns", 0))
        end = int(t.get("relative_end_ns", 0))
        active = str(t.get("active_thread_id", ""))
        samples = []
        for s in trace.get("samples") or []:
            at = int(s.get("elapsed_since_start_ns", -1))
            if end > 0 and not start <= at <= end:
                continue
            st = s.get("stack_id", -1)
            busy = isinstance(st, int) and 0 <= st < len(stacks) and bool(stacks[st])
            samples.append((str(s.get("thread_id")), busy))
        mine = [busy for tid, busy in samples if tid == active]
        busy_at = [i for i, busy in enumerate(mine) if busy]
        return bool(busy_at) and busy_at[-1] - busy_at[0] + 1 >= 2
    except (TypeError, ValueError, AttributeError):
        return False


def _as_sdk_profile(prof, tx):
    """profd's Sentry profile as the SDK's client expects a transaction's `_profile`: a
    `transactions` list (the client sets its id to the event's), the transaction's name
    now (a WSGI transaction is renamed after it starts), a Python runtime."""
    import platform
    t = prof.pop("transaction", None) or {}
    t["name"] = tx.name or t.get("name", "")
    t["trace_id"] = tx.trace_id
    prof["transactions"] = [t]
    prof["platform"] = "python"
    prof["runtime"] = {"name": platform.python_implementation(),
                       "version": platform.python_version()}
    return prof
