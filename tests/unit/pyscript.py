# pyscript.py: a Python program of known structure for test_pyframes. Each thread waits in a
# known place; the lines marked "# L:name" are where the test expects each frame to be.
import sys
import threading
import zlib

ev = threading.Event()
tids = {}


def leaf_wait():
    ev.wait()  # L:leaf_wait


def middle():
    leaf_wait()  # L:middle


class Outer:
    def method(self):
        middle()  # L:method


def gen():
    yield middle()  # L:gen


def keyf(x):
    middle()  # L:keyf
    return x


def note(name):
    tids[name] = threading.get_native_id()


def run_method():
    note("method")
    Outer().method()  # L:run_method


def run_gen():
    note("gen")
    next(gen())  # L:run_gen


def run_sorted():
    note("sorted")
    sorted([1], key=keyf)  # L:run_sorted


def run_zlib():
    note("zlib")
    data = bytes(range(256)) * 4096
    while not ev.is_set():
        zlib.compress(data, 9)  # L:run_zlib


threads = [threading.Thread(target=f, name=f.__name__)
           for f in (run_method, run_gen, run_sorted, run_zlib)]
for t in threads:
    t.start()
while len(tids) < len(threads):
    pass
print("ready", " ".join("%s=%d" % kv for kv in sorted(tids.items())), flush=True)
sys.stdin.readline()
ev.set()
for t in threads:
    t.join()
