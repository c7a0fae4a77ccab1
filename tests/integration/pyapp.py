# pyapp.py: a Python program of known structure for test_python (run by each interpreter).
#
# Thread "work" repeats 100 ms rounds: phase_a spins in Python for 60 ms, phase_b calls
# zlib.compress (C) for 30 ms, phase_c drains a generator for 10 ms: a wall-clock profile of
# it is 60/30/10, give or take the GIL's delays at the phases' ends (each phase's real time
# is kept, and printed on "report"). Thread "aio" runs an asyncio loop whose coroutine crunches in Python between
# awaits. Thread "sorting" sorts with a key function (Python called back from C). Thread
# "idle" sleeps in idle_wait; the main thread waits for stdin in main_wait.
import asyncio
import json
import sys
import threading
import time
import zlib

DATA = bytes(range(256)) * 256


def spin_until(deadline):
    x = 0
    while time.monotonic() < deadline:
        for i in range(200):
            x += i * i
    return x


def phase_a(deadline):
    return spin_until(deadline)


def phase_b(deadline):
    n = 0
    while time.monotonic() < deadline:
        n += len(zlib.compress(DATA, 9))
    return n


def gen_items(deadline):
    while time.monotonic() < deadline:
        x = 0
        for i in range(200):
            x += i
        yield x


def phase_c(deadline):
    return sum(gen_items(deadline))


spent = {"a": 0.0, "b": 0.0, "c": 0.0}  # what each phase really took (the GIL delays ends)


def handle():
    t = time.monotonic()
    phase_a(t + 0.060)
    t1 = time.monotonic()
    phase_b(t + 0.090)
    t2 = time.monotonic()
    phase_c(t + 0.100)
    t3 = time.monotonic()
    spent["a"] += t1 - t
    spent["b"] += t2 - t1
    spent["c"] += t3 - t2


def work():
    while True:
        handle()


async def crunch():
    while True:
        spin_until(time.monotonic() + 0.005)
        await asyncio.sleep(0.005)


def aio():
    asyncio.run(crunch())


def sort_key(x):
    """Python called back from C: list.sort calls it for each element."""
    spin_until(time.monotonic() + 0.0002)
    return -x


def sorting():
    # (light: 2 ms of sorting every 22 ms, not to crowd the work thread's rounds)
    while True:
        sorted(range(10), key=sort_key)
        time.sleep(0.02)


def idle_wait():
    time.sleep(3600)


def main_wait():
    """Stdin: "reset" zeroes the phases' times, "report" prints them; end of input ends."""
    for line in sys.stdin:
        if line.strip() == "reset":
            for k in spent:
                spent[k] = 0.0
        elif line.strip() == "report":
            print(json.dumps(spent), flush=True)


for f in (work, aio, sorting, idle_wait):
    threading.Thread(target=f, name=f.__name__, daemon=True).start()
print("ready", flush=True)
main_wait()
