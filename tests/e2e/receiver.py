#!/usr/bin/env python3
"""receiver.py: tests/integration/receivers.py's strict backends on 127.0.0.1:PORT for
tests/e2e/nspawn.sh (the container shares the host's network): runs until SIGTERM, then
writes what it took to OUT, a line per backend ("sentry 3"), and each problem found
("problem ...").

    tests/e2e/receiver.py PORT OUT"""
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import receivers  # noqa: E402

rx = receivers.Receiver(int(sys.argv[1])).start()
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: done.set())
done.wait()
with open(sys.argv[2], "w") as f:
    for kind in ("sentry", "pyroscope", "otlp"):
        f.write("%s %d\n" % (kind, len(rx.taken(kind))))
    for p in rx.problems:
        f.write("problem %s\n" % p)
rx.stop()
