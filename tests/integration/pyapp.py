# pyapp.py: a Python program of known structure for test_python (run by each interpreter).
#
# Thread "work" repeats 100 ms rounds: phase_a spins in Python for 60 ms, phase_b calls
# zlib.compress (C) for 30 ms, phase_c drains a generator for 10 ms: a wall-clock profile of
# it is 60/30/10. Thread "aio" runs an asyncio loop whose coroutine crunches in Python between
# awaits. Thread "idle" sleeps in idle_wait; the main thread waits for stdin in main_wait.
import asyncio
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


def handle():
    t = time.monotonic()
    phase_a(t + 0.060)
    phase_b(t + 0.090)
    phase_c(t + 0.100)


def work():
    while True:
        handle()


async def crunch():
    while True:
        spin_until(time.monotonic() + 0.005)
        await asyncio.sleep(0.005)


def aio():
    asyncio.run(crunch())


def idle_wait():
    time.sleep(3600)


def main_wait():
    sys.stdin.readline()


for f in (work, aio, idle_wait):
    threading.Thread(target=f, name=f.__name__, daemon=True).start()
print("ready", flush=True)
main_wait()
