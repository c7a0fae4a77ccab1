"""wsgiapp.py: a small WSGI application (the standard library's wsgiref) with Sentry's SDK, its
WSGI integration and profd.SentryIntegration. Envelopes go to a transport that writes each
transaction and its profile to OUT_DIR (no network). Serves N requests from a thread of its
own, one in eight slow (render_report), then prints, for each slow request, the Python
functions its profile spends the most samples in.

    PROFD_SOCKET=... python3 wsgiapp.py OUT_DIR [N]
"""
import collections
import json
import os
import sys
import threading
import time
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import profd  # noqa: E402
import sentry_sdk  # noqa: E402
from sentry_sdk.integrations.wsgi import SentryWsgiMiddleware  # noqa: E402
from sentry_sdk.transport import Transport  # noqa: E402

OUT = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 40


class ToFiles(Transport):
    """Each transaction (and its profile, if any) as OUT/txn-N.json."""
    n = 0
    lock = threading.Lock()

    def capture_envelope(self, envelope):
        doc = {}
        for it in envelope.items:
            doc[it.headers.get("type")] = it.payload.json
        if "transaction" in doc:
            with ToFiles.lock:
                ToFiles.n += 1
                with open(os.path.join(OUT, "txn-%d.json" % ToFiles.n), "w") as f:
                    json.dump(doc, f)

    def capture_event(self, event):
        pass


sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=ToFiles,
                traces_sample_rate=1.0, _experiments={"profiles_sample_rate": 1.0},
                integrations=[profd.SentryIntegration()])


def render_report():
    """The slow part: 100 ms of Python."""
    end = time.monotonic() + 0.1
    rows = []
    while time.monotonic() < end:
        rows.append(sum(i * i for i in range(500)))
    return len(rows)


def app(environ, start_response):
    if environ["PATH_INFO"] == "/report":
        body = b"report: %d rows\n" % render_report()
    else:
        body = b"ok\n"
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]


class Quiet(WSGIRequestHandler):
    def log_message(self, *a):
        pass


server = make_server("127.0.0.1", 0, SentryWsgiMiddleware(app), handler_class=Quiet)
threading.Thread(target=server.serve_forever, name="wsgi", daemon=True).start()
port = server.server_address[1]
time.sleep(0.3)  # (profd attaches the process: the integration asked it to at init)
t0 = time.monotonic()
for i in range(N):
    path = "/report" if i % 8 == 7 else "/"
    urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path)).read()
sentry_sdk.flush()
print("%d requests in %.1f s; transactions and profiles in %s" % (N, time.monotonic() - t0, OUT))

slow = with_profile = 0
for name in sorted(os.listdir(OUT)):
    if not name.startswith("txn-"):
        continue
    doc = json.load(open(os.path.join(OUT, name)))
    url = doc["transaction"].get("request", {}).get("url", "")
    prof = doc.get("profile")
    with_profile += prof is not None
    if not url.endswith("/report") or not prof:
        continue
    slow += 1
    tid = int(prof["transactions"][0]["active_thread_id"])
    fr, st = prof["profile"]["frames"], prof["profile"]["stacks"]
    mine = [s for s in prof["profile"]["samples"] if int(s["thread_id"]) == tid]
    c = collections.Counter()
    for s in mine:
        c.update({"%s.%s" % (fr[i].get("module", "?"), fr[i]["function"])
                  for i in st[s["stack_id"]] if "instruction_addr" not in fr[i]})
    if slow <= 3:
        top = ", ".join("%s %.0f%%" % (f, 100 * n / len(mine)) for f, n in c.most_common()
                        if f.startswith("__main__.") and f not in ("__main__.<module>",))
        print("  %s %s: %d samples of its thread: %s" % (name, url, len(mine), top))
print("%d of %d transactions sent with a profile; %d slow requests' profiles" %
      (with_profile, ToFiles.n, slow))
