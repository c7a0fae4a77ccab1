# sentryapp.py: an application using Sentry's SDK with profd.SentryIntegration, for
# test_sentry. Envelopes are captured by a transport (no network) and written to OUT, one JSON
# object per envelope: {"items": [{"type": ..., "payload": ...}, ...]}.
# Usage: sentryapp.py OUT SOCKET RATE   (prints "ready", runs what stdin asks, "done" each)
import json
import os
import signal
import sys
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.util import setup_testing_defaults

sys.path.insert(0, os.environ["PROFD_PY"])
import profd  # noqa: E402
import sentry_sdk  # noqa: E402
from sentry_sdk.integrations.wsgi import SentryWsgiMiddleware  # noqa: E402
from sentry_sdk.transport import Transport  # noqa: E402

OUT, SOCK, RATE = sys.argv[1], sys.argv[2], float(sys.argv[3])
lock = threading.Lock()


class Capture(Transport):
    def capture_envelope(self, envelope):
        items = []
        for it in envelope.items:
            payload = it.payload.json if it.payload.json is not None else \
                json.loads(it.payload.bytes or b"null")
            items.append({"type": it.headers.get("type"), "payload": payload})
        with lock, open(OUT, "a") as f:
            f.write(json.dumps({"items": items}) + "\n")

    def capture_event(self, event):
        with lock, open(OUT, "a") as f:
            f.write(json.dumps({"items": [{"type": "event", "payload": event}]}) + "\n")


# PROFD_CONTINUOUS=1: Sentry's continuous profiling, the chunks sent by profd's exporter.
integration = profd.SentryIntegration(socket_path=SOCK,
                                      continuous=os.environ.get("PROFD_CONTINUOUS") == "1")
sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=Capture,
                traces_sample_rate=1.0, _experiments={"profiles_sample_rate": RATE},
                integrations=[integration])


def compute_primes(ms):
    end = time.monotonic() + ms / 1000
    n, found = 2, 0
    while time.monotonic() < end:
        if all(n % d for d in range(2, int(n ** 0.5) + 1)):
            found += 1
        n += 1
    return found


def slow_handler(environ, start_response):
    compute_primes(80)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"slow\n"]


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/slow":
        return slow_handler(environ, start_response)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"fast\n"]


class Quiet(WSGIRequestHandler):
    def log_message(self, *a):
        pass


def wsgi_request(path):
    """One request through the SDK's WSGI integration, served in this thread."""
    environ = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    out = []
    body = SentryWsgiMiddleware(app)(environ, lambda status, headers: out.append(status))
    for _ in body:
        pass
    getattr(body, "close", lambda: None)()


print("ready", os.getpid(), threading.get_native_id(),
      "sigprof=%s" % (signal.getsignal(signal.SIGPROF) is signal.SIG_DFL),
      "sigalrm=%s" % (signal.getsignal(signal.SIGALRM) is signal.SIG_DFL),
      "threads=%d" % threading.active_count(), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "txn":
        with sentry_sdk.start_transaction(op="task", name=cmd[1]) as tx:
            compute_primes(int(cmd[2]))
        print("done", tx.trace_id, tx.span_id, flush=True)
    elif cmd[0] == "wsgi":
        wsgi_request(cmd[1])
        print("done", flush=True)
    elif cmd[0] == "state":
        import sentry_sdk.profiler as sp
        print("state", "scheduler=%s" % (sp._scheduler is None),
              "sigprof=%s" % (signal.getsignal(signal.SIGPROF) is signal.SIG_DFL),
              "sigalrm=%s" % (signal.getsignal(signal.SIGALRM) is signal.SIG_DFL),
              "threads=%d" % threading.active_count(), "errors=%d" % integration.errors,
              repr(integration.last_error).replace(" ", "_"), flush=True)
    elif cmd[0] == "quit":
        break
sentry_sdk.flush()
