"""receivers.py: the backends profd exports to, on the loopback, judging strictly.

One Receiver answers all three on one port:
  POST /api/PROJECT/envelope/       Sentry: X-Sentry-Auth with the DSN's key; an envelope of
                                    profile_chunk items, each passing relay's rules
                                    (tests/unit/profile/check_sentry.py)
  POST /ingest?name=...&from=...    Pyroscope: the query's fields, the pprof (gzip) as the
                                    multipart field "profile", decoded by protoc with
                                    daemon/formats/proto/pprof.proto
  POST /v1development/profiles      OTLP/HTTP protobuf
A body that breaks a rule is answered 400 and its problem kept (a test fails on any). Faults
are switched on by the test: answer 503 (or reset the connection, or never answer) until a
time. Every request is recorded; the accepted bodies are kept for the test to decode."""

import email.parser
import email.policy
import gzip
import http.server
import json
import os
import re
import socket
import subprocess
import struct
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unit", "profile"))
import check_sentry  # noqa: E402

KEY = "0123456789abcdef0123456789abcdef"
PROTO_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "daemon", "formats", "proto")
OTLP_REQUEST = "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest"


def otlp_decode(data):
    """protoc's text of an OTLP request, decoded with the project's .proto files; ValueError
    if protoc cannot read it."""
    r = subprocess.run(["protoc", "--decode=" + OTLP_REQUEST, "-I", PROTO_DIR,
                        "otlp_service.proto"], input=data, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise ValueError("protoc --decode: %s" % r.stderr.decode(errors="replace")[:300])
    return r.stdout.decode()


class Body:
    """An accepted body: its kind, id, window (real time ns), samples as the header says."""

    def __init__(self, kind, headers, data, query=None):
        self.kind = kind
        self.id = headers.get("X-Profd-Id")
        w = headers.get("X-Profd-Window", "0-0").split("-")
        self.window = (int(w[0]), int(w[1]))
        self.samples_said = int(headers.get("X-Profd-Samples", "-1"))
        self.data = data
        self.query = query or {}
        self.chunks = []
        self.received = time.time()


class Receiver:
    def __init__(self, port=0, strict=True):
        """strict=False (the benchmark): bodies are counted and kept, not judged."""
        self.strict = strict
        self.lock = threading.Lock()
        self.bodies = []      # accepted
        self.requests = []    # (kind, id, what was answered)
        self.problems = []
        self.fault = None     # None, "503", "reset", "hang", "429", "400"
        self.fault_until = 0.0
        self.server = None
        self.port = port
        self.hold = None
        if port == 0:
            # The port stays bound (not listening: a connection to it is refused) until the
            # receiver starts, so that nothing else takes it meanwhile (another test's
            # server, or a connection's own local port: the "down" scenario waits for
            # refusals there).
            self.hold = socket.socket()
            self.hold.bind(("127.0.0.1", 0))
            self.port = self.hold.getsockname()[1]

    # -- life --
    def start(self, tls=None):
        """tls: (certificate file, key file): answer HTTPS with them."""
        rx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                rx.handle(self)

        if self.hold:
            # The held socket itself, made to listen: the port is never free meanwhile.
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler,
                                                          bind_and_activate=False)
            self.server.socket.close()
            self.server.socket = self.hold
            self.server.server_address = self.hold.getsockname()
            self.hold = None
            self.server.server_activate()
        else:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        if tls:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.hold:
            self.hold.close()
            self.hold = None
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def set_fault(self, fault, seconds):
        """Answer with fault for `seconds` from the next request on (not from now: on a busy
        machine the daemon and its target may take seconds to start, and a fault that ended
        before the first request tested nothing)."""
        with self.lock:
            self.fault = fault
            self.fault_seconds = seconds
            self.fault_until = None if fault else 0.0

    def urls(self):
        base = "http://127.0.0.1:%d" % self.port
        return {"sentry": "http://%s@127.0.0.1:%d/42" % (KEY, self.port),
                "pyroscope": base, "otlp": base}

    # -- a request --
    def answer(self, h, status, text=b"", headers=()):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(text)))
        h.end_headers()
        h.wfile.write(text)

    def handle(self, h):
        n = int(h.headers.get("Content-Length", "0"))
        data = h.rfile.read(n)
        wire = len(data)
        if h.headers.get("Content-Encoding") == "gzip":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                with self.lock:
                    self.problems.append("a body said gzip, and is not: %s" % e)
                return self.answer(h, 400, b"bad gzip")
        path, _, q = h.path.partition("?")
        kind = ("sentry" if path.startswith("/api/") else "pyroscope" if path == "/ingest"
                else "otlp" if path == "/v1development/profiles" else "?")
        rid = h.headers.get("X-Profd-Id")
        with self.lock:
            if self.fault and self.fault_until is None:
                self.fault_until = time.time() + self.fault_seconds
            fault = self.fault if time.time() < self.fault_until else None
        if fault == "reset":
            self.requests.append((kind, rid, "reset"))
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            h.close_connection = True
            return
        if fault == "hang":
            self.requests.append((kind, rid, "hang"))
            time.sleep(max(0.0, self.fault_until - time.time()) + 1)
            h.close_connection = True
            return
        if fault == "503":
            self.requests.append((kind, rid, 503))
            return self.answer(h, 503, b"down for maintenance", [("Retry-After", "1")])
        if fault == "429":
            self.requests.append((kind, rid, 429))
            return self.answer(h, 429, b"", [("X-Sentry-Rate-Limits", "2:profile_chunk:key"),
                                             ("Retry-After", "2")])
        if fault == "400":
            self.requests.append((kind, rid, 400))
            return self.answer(h, 400, b"bad request: refused on purpose")
        if not self.strict:
            with self.lock:
                b = Body(kind, h.headers, data)
                b.wire = wire
                self.bodies.append(b)
                self.requests.append((kind, rid, 200))
            return self.answer(h, 200, b"{}")
        try:
            body = getattr(self, "judge_" + kind.replace("?", "unknown"))(h, path, q, data)
        except ValueError as e:
            with self.lock:
                self.problems.append("%s %s: %s" % (kind, rid, e))
                self.requests.append((kind, rid, 400))
            return self.answer(h, 400, str(e).encode())
        with self.lock:
            self.bodies.append(body)
            self.requests.append((kind, rid, 200))
        self.answer(h, 200, b"{}")

    def judge_unknown(self, h, path, q, data):
        raise ValueError("no such endpoint: %s" % path)

    def judge_sentry(self, h, path, q, data):
        if path != "/api/42/envelope/":
            raise ValueError("envelope posted to %s" % path)
        auth = h.headers.get("X-Sentry-Auth", "")
        if ("sentry_key=%s" % KEY) not in auth or "sentry_version=7" not in auth or \
                not auth.startswith("Sentry "):
            raise ValueError("X-Sentry-Auth: %r" % auth)
        if h.headers.get("Content-Type") != "application/x-sentry-envelope":
            raise ValueError("Content-Type %r" % h.headers.get("Content-Type"))
        b = Body("sentry", h.headers, data)
        nl = data.index(b"\n")
        json.loads(data[:nl])
        rest = data[nl + 1:]
        while rest.strip():
            nl = rest.index(b"\n")
            ih = json.loads(rest[:nl])
            if ih.get("type") != "profile_chunk":
                raise ValueError("item type %r" % ih.get("type"))
            n = ih.get("length")
            payload = rest[nl + 1:nl + 1 + n]
            if len(payload) != n or rest[nl + 1 + n:nl + 2 + n] not in (b"\n", b""):
                raise ValueError("item length %r does not match its payload" % n)
            problems = check_sentry.check_chunk(payload)[0]
            if problems:
                raise ValueError("relay would reject the chunk: %s" % problems[:3])
            chunk = json.loads(payload)
            if ih.get("platform") != chunk.get("platform"):
                raise ValueError("item platform %r, chunk's %r" % (ih.get("platform"),
                                                                  chunk.get("platform")))
            b.chunks.append(chunk)
            rest = rest[nl + 2 + n:]
        if not b.chunks:
            raise ValueError("an envelope without chunks")
        if b.id != b.chunks[0]["chunk_id"]:
            raise ValueError("X-Profd-Id %s is not the first chunk's id" % b.id)
        return b

    def judge_pyroscope(self, h, path, q, data):
        query = {k: v[0] for k, v in urllib.parse.parse_qs(q, strict_parsing=True).items()}
        for k in ("name", "from", "until", "format", "sampleRate", "spyName"):
            if k not in query:
                raise ValueError("the query has no %s (%s)" % (k, q))
        if query["format"] != "pprof" or query["spyName"] != "profd" or \
                int(query["from"]) > int(query["until"]):
            raise ValueError("query %s" % query)
        ctype = h.headers.get("Content-Type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ValueError("Content-Type %r" % ctype)
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + data)
        parts = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                 for p in msg.iter_parts()}
        prof = parts.get("profile")
        if not prof:
            raise ValueError("no multipart field \"profile\" (%s)" % list(parts))
        b = Body("pyroscope", h.headers, gzip.decompress(prof), query)
        r = subprocess.run(["protoc", "--decode=perftools.profiles.Profile", "-I", PROTO_DIR,
                            "pprof.proto"], input=b.data, capture_output=True, timeout=60)
        if r.returncode != 0 or b"string_table: \"\"" not in r.stdout:
            raise ValueError("protoc --decode of the pprof: %s"
                             % r.stderr.decode(errors="replace")[:300])
        return b

    def judge_otlp(self, h, path, q, data):
        if h.headers.get("Content-Type") != "application/x-protobuf":
            raise ValueError("Content-Type %r" % h.headers.get("Content-Type"))
        b = Body("otlp", h.headers, data)
        b.text = otlp_decode(data)
        b.timestamps = [int(t) for t in re.findall(r"^\s*timestamps_unix_nano: (\d+)$",
                                                   b.text, re.M)]
        lo, hi = b.window
        outside = [t for t in b.timestamps if not lo <= t <= hi]
        if outside:
            raise ValueError("%d samples' timestamps outside the window %s: %s"
                             % (len(outside), b.window, outside[:3]))
        return b

    # -- for the test --
    def taken(self, kind):
        with self.lock:
            return [b for b in self.bodies if b.kind == kind]


def pb_fields(buf):
    """A protobuf message's fields: (number, value), value an int (varint, fixed) or bytes."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            ln, i = _varint(buf, i)
            v, i = buf[i:i + ln], i + ln
        elif wt == 1:
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wt == 5:
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, v


def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _ints(v):
    """A repeated integer field's value: one varint, or a packed run."""
    if isinstance(v, int):
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def pprof_samples(data):
    """A pprof's samples: [(count, {label: value})] (count: the first value)."""
    strings, samples = [], []
    for f, v in pb_fields(data):
        if f == 6:
            strings.append(v.decode())
        elif f == 2:
            samples.append(v)
    out = []
    for s in samples:
        values, labels = [], {}
        for f, v in pb_fields(s):
            if f == 2:
                values += _ints(v)
            elif f == 3:
                lab = dict(pb_fields(v))
                labels[lab.get(1, 0)] = lab.get(2, 0)
        out.append((values[0] if values else 0,
                    {strings[k]: strings[v] for k, v in labels.items()}))
    return out
