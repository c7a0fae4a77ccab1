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
added to it; it profiles native frames (the interpreter's C stack). Like libprofd: lazy
connection, reconnection after a daemon restart, a timeout on every wait, thread-safe,
fork-safe (a child never uses its parent's connection).
"""

import json
import os
import socket
import struct
import threading
import time

__all__ = ["Profd", "ProfdError", "default_socket_path"]

PROTO_VERSION = 1
MAX_REPLY = 256 << 20


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


class Profd:
    def __init__(self, socket_path=None, timeout=1.0, finish_timeout=10.0):
        self.path = socket_path or default_socket_path()
        self.timeout = timeout
        self.finish_timeout = finish_timeout
        self._lock = threading.Lock()
        self._sock = None
        self._owner = None
        self._next_id = 0
        # Transaction ids are chosen here, (gen << 32) | seq, gen changing with each
        # connection: an id the daemon lost with its connection is known to be gone.
        self._gen = 0
        self._seq = 0

    # -- connection ----------------------------------------------------------------------
    def close(self):
        with self._lock:
            self._drop()

    def _drop(self):
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None

    def _connect(self, timeout):
        if self._sock is not None and self._owner != os.getpid():
            # Inherited across fork: the parent's connection. Close our copy only.
            self._drop()
        if self._sock is not None:
            return
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise ProfdError("no_daemon", "profd is not running at %s (%s)"
                             % (self.path, e.strerror or e))
        self._sock, self._owner = s, os.getpid()
        self._exchange({"cmd": "hello", "version": PROTO_VERSION}, timeout)
        self._gen = self._gen + 1 if self._gen + 1 < (1 << 21) else 1
        self._seq = 0

    def _current(self, txn_id):
        return (self._sock is not None and self._owner == os.getpid()
                and isinstance(txn_id, int) and txn_id >> 32 == self._gen)

    def _send_only(self, req):
        data = json.dumps(req).encode()
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(struct.pack(">I", len(data)) + data)
        except socket.timeout:
            self._drop()  # part of a frame may be out: the stream is no longer usable
            raise ProfdError("timeout", "profd did not read within %.1f s" % self.timeout)
        except OSError as e:
            self._drop()
            raise ProfdError("disconnected", str(e))

    def _recv_exact(self, n):
        b = bytearray()
        while len(b) < n:
            chunk = self._sock.recv(n - len(b))
            if not chunk:
                raise ProfdError("disconnected", "profd closed the connection")
            b += chunk
        return bytes(b)

    def _exchange(self, req, timeout):
        self._next_id += 1
        rid = self._next_id
        req = dict(req, id=rid)
        data = json.dumps(req).encode()
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(struct.pack(">I", len(data)) + data)
            while True:
                n = struct.unpack(">I", self._recv_exact(4))[0]
                if n > MAX_REPLY:
                    raise ProfdError("protocol", "reply of %d bytes" % n)
                reply = json.loads(self._recv_exact(n))
                if reply.get("id") == rid:
                    break
                # A late reply to a call that timed out: skip it.
        except socket.timeout:
            raise ProfdError("timeout", "profd did not answer within %.1f s" % timeout)
        except ProfdError as e:
            if e.code != "timeout":
                self._drop()
            raise
        except (OSError, ValueError) as e:
            self._drop()
            raise ProfdError("disconnected", str(e))
        if "error" in reply:
            err = reply["error"]
            raise ProfdError(err.get("code", "internal"), err.get("message", ""))
        return reply["result"]

    def _call(self, req, timeout):
        with self._lock:
            self._connect(timeout)
            return self._exchange(req, timeout)

    # -- transactions --------------------------------------------------------------------
    def start(self, name, trace_id=None):
        """Start a transaction run by the calling thread; returns its id. Sent without
        waiting for an answer: what profd refuses is reported by finish()."""
        name = str(name)
        if not name or len(name.encode()) > 512 or (trace_id and len(trace_id) > 64):
            raise ProfdError("bad_request", "name: 1 to 512 bytes; trace_id: 32 hex digits")
        req = {"cmd": "txn_start", "name": name, "tid": threading.get_native_id(),
               "t_ns": time.monotonic_ns(), "noreply": True}
        if trace_id:
            req["trace_id"] = trace_id
        with self._lock:
            self._connect(self.timeout)
            self._seq += 1
            req["txn_id"] = self._gen << 32 | self._seq
            self._send_only(req)
            return req["txn_id"]

    def finish(self, txn_id, lookback_s=0):
        """Finish it; returns its Sentry sampled profile (version 1) as a dict."""
        req = {"cmd": "txn_finish", "txn_id": txn_id}
        if lookback_s:
            req["lookback_s"] = lookback_s
        with self._lock:
            if not self._current(txn_id):
                raise ProfdError("no_transaction", "transaction %r is not open on this "
                                 "connection" % (txn_id,))
            return self._exchange(req, self.finish_timeout)["profile"]

    def discard(self, txn_id):
        """End it without building a profile (sent without waiting for an answer)."""
        with self._lock:
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
