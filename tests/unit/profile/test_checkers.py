#!/usr/bin/env python3
"""test_checkers.py: the validators accept profd's real output and reject broken variants.

Usage: test_checkers.py TEST_PROFILE   (the test_profile binary, which prints the outputs of
its main test profile with --emit-collapsed and --emit-sentry)

Each broken variant changes one thing in the real output and must be rejected for the reason
named, which proves the validator checks that rule rather than passing everything.
"""

import copy
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_collapsed  # noqa: E402
import check_sentry  # noqa: E402

failures = 0


def expect(name, errors, want):
    """errors must be non-empty and one of them contain `want`."""
    global failures
    if not errors:
        print("FAIL %s: accepted" % name)
        failures += 1
    elif not any(want in e for e in errors):
        print("FAIL %s: rejected, but not for %r:\n  %s" % (name, want, "\n  ".join(errors)))
        failures += 1
    else:
        print("ok   %s: %s" % (name, next(e for e in errors if want in e)))


def sentry_cases(good):
    """(name, mutate(profile) -> profile or bytes, expected message part)."""
    p = good
    n_stacks, n_frames = len(p["profile"]["stacks"]), len(p["profile"]["frames"])

    def drop(*path):
        def f(d):
            o = d
            for k in path[:-1]:
                o = o[k]
            del o[path[-1]]
            return d
        return f

    def setv(value, *path):
        def f(d):
            o = d
            for k in path[:-1]:
                o = o[k]
            o[path[-1]] = value
            return d
        return f

    def samples(fn):
        def f(d):
            d["profile"]["samples"] = fn(d["profile"]["samples"])
            return d
        return f

    def raw(fn):
        """Work on the serialized text."""
        def f(d):
            return fn(json.dumps(d).encode())
        return f

    def dup_frame(d):
        fr = d["profile"]["frames"]
        fr.append(copy.deepcopy(fr[0]))
        d["profile"]["stacks"][0].append(len(fr) - 1)
        return d

    def single_samples(d):
        seen, out = set(), []
        for s in d["profile"]["samples"]:
            if s["thread_id"] not in seen:
                seen.add(s["thread_id"])
                out.append(s)
        d["profile"]["samples"] = out
        return d

    def too_long(d):
        # The last sample with a non-empty stack: idle ones at a thread's end are dropped
        # before relay looks at the last sample.
        d["transaction"]["relative_end_ns"] = 40 * 10**9
        stacks = d["profile"]["stacks"]
        last = [s for s in d["profile"]["samples"] if stacks[s["stack_id"]]][-1]
        last["elapsed_since_start_ns"] = str(31 * 10**9)
        return d

    def outside(d):
        for s in d["profile"]["samples"]:
            s["elapsed_since_start_ns"] = str(int(s["elapsed_since_start_ns"]) + 10**10)
        return d

    def wrong_debug_id(d):
        im = d["debug_meta"]["images"][0]
        im["debug_id"] = "01020304" + im["debug_id"][8:]
        return d

    return [
        ("missing version", drop("version"), "version: relay: missing field"),
        ("numeric version", setv(1, "version"), "not the sample format version"),
        ("bad event_id", setv("xyz", "event_id"), "is not a uuid"),
        ("event_id with dashes", setv("A2669CD2-C7E0-47ED-8298-4AAF9666A6B6", "event_id"),
         "profd: must be 32 lowercase hex"),
        ("missing platform", drop("platform"), "platform: relay: missing field"),
        ("cocoa without device fields", setv("cocoa", "platform"), "MissingProfileMetadata"),
        ("rust platform", setv("rust", "platform"), "re-symbolicate"),
        ("bad timestamp", setv("yesterday", "timestamp"), "not an RFC 3339"),
        ("impossible date", setv("2023-02-30T00:00:00.000000Z", "timestamp"), "RFC 3339"),
        ("missing os.version", drop("os", "version"), "os.version: relay: missing field"),
        ("missing device.architecture", drop("device", "architecture"),
         "architecture: relay: missing field"),
        ("no transaction", drop("transaction"), "NoTransactionAssociated"),
        ("nil trace_id", setv("0" * 32, "transaction", "trace_id"), "nil uuid"),
        ("empty transaction name", setv("", "transaction", "name"), "empty name"),
        ("relative_end before start", setv(4 * 10**9, "transaction", "relative_start_ns"),
         "relative_start_ns must be below"),
        ("negative active_thread_id", setv(-1, "transaction", "active_thread_id"),
         "expected an integer"),
        ("active thread without samples", setv(999, "transaction", "active_thread_id"),
         "vroom builds call trees"),
        ("stack_id out of range", setv(n_stacks, "profile", "samples", 6, "stack_id"),
         "MalformedSamples"),
        ("frame index out of range", setv([n_frames], "profile", "stacks", 0), "MalformedStacks"),
        ("stack_id as a string", setv("0", "profile", "samples", 0, "stack_id"),
         "stack_id: relay: expected an integer"),
        ("numeric thread_id", setv(100, "profile", "samples", 0, "thread_id"),
         "profd: must be a string of decimal digits"),
        ("negative thread_id", setv("-1", "profile", "samples", 0, "thread_id"),
         "does not parse as u64"),
        ("numeric queue_address", setv(5, "profile", "samples", 0, "queue_address"),
         "queue_address: relay: expected a string"),
        ("duplicate key in a sample", raw(lambda b: b.replace(b'"stack_id": ',
                                                              b'"stack_id": 0, "stack_id": ', 1)),
         "duplicate field stack_id"),
        ("thread_id past u64", setv(str(2**64), "profile", "samples", 0, "thread_id"),
         "does not parse as u64"),
        ("float elapsed", setv(1.5, "profile", "samples", 0, "elapsed_since_start_ns"),
         "expected a number or a numeric string"),
        ("unsorted samples", samples(lambda s: s[::-1]), "not sorted by time"),
        ("all samples after the transaction", outside, "NotEnoughSamples"),
        ("one sample per thread", single_samples, "NotEnoughSamples"),
        ("longer than 30 s", too_long, "DurationIsTooLong"),
        ("numeric instruction_addr", setv(4198400, "profile", "frames", 0, "instruction_addr"),
         "an address must be a string"),
        ("bad instruction_addr", setv("0xZZ", "profile", "frames", 0, "instruction_addr"),
         "is not an address"),
        ("negative lineno", setv(-1, "profile", "frames", 0, "lineno"), "expected an integer"),
        ("string in_app", setv("yes", "profile", "frames", 0, "in_app"), "expected a boolean"),
        ("package field", setv("/usr/bin/app", "profile", "frames", 0, "package"),
         "relay drops field"),
        ("filename and file", setv("x.c", "profile", "frames", 0, "file"), "duplicate field"),
        ("duplicate frame", dup_frame, "duplicate frames"),
        ("image type elf", setv("elf", "debug_meta", "images", 0, "type"),
         "unknown image type"),
        ("image without image_addr", drop("debug_meta", "images", 0, "image_addr"),
         "image_addr: relay: missing field"),
        ("bad debug_id", setv("nope", "debug_meta", "images", 0, "debug_id"),
         "is not a debug id"),
        ("wrong debug_id", wrong_debug_id, "is not the debug id of build-id"),
        ("thread_metadata without samples", setv({"name": "x"}, "profile", "thread_metadata",
                                                 "4242"), "a thread without samples"),
        ("invalid UTF-8", raw(lambda b: b.replace(b'"main"', b'"ma\xffin"')), "not UTF-8"),
        ("lone surrogate", raw(lambda b: b.replace(b'"main"', b'"ma\\ud800in"')),
         "lone surrogate"),
        ("duplicate key", raw(lambda b: b.replace(b'"platform": "native"',
                                                  b'"platform": "native", "platform": "native"')),
         "duplicate field platform"),
        ("NaN", raw(lambda b: b.replace(b'"in_app": true', b'"in_app": NaN', 1)),
         "invalid JSON"),
        ("not JSON", raw(lambda b: b[:-2]), "invalid JSON"),
    ]


def collapsed_cases():
    return [
        ("no count", lambda t: t + b"app;main\n", "flamegraph.pl ignores it"),
        ("decimal count", lambda t: t + b"zz;main 1.5\n", "speedscope ignores it"),
        ("zero count", lambda t: t + b"zz;main 0\n", "count must be a positive integer"),
        ("leaf ending in a number", lambda t: t + b"zz;tick 42 3\n", "differential"),
        ("empty frame", lambda t: t + b"zz;;main 3\n", "empty frame"),
        ("padded frame", lambda t: t + b"zz;main  3\n", "leading or trailing spaces"),
        ("tab inside", lambda t: t + b"zz;ma\tin 3\n", "control character"),
        ("CR line end", lambda t: t.replace(b"\n", b"\r\n", 1), "control character"),
        ("unsorted", lambda t: b"zz 1\n" + t, "not sorted"),
        ("same stack twice", lambda t: t + t.split(b"\n")[-2] + b"\n", "more than one line"),
        ("no final newline", lambda t: t[:-1], "no newline"),
        ("looks like perf script", lambda t: b"app 123 4.5: x 5\n" + t, "`perf script`"),
        ("empty", lambda t: b"", "No stack counts"),
    ]


def run(exe, what):
    return subprocess.run([exe, what], check=True, stdout=subprocess.PIPE).stdout


def main(argv):
    exe = argv[1]
    text = run(exe, "--emit-collapsed")
    errors = check_collapsed.check(text)
    if errors:
        print("FAIL real collapsed output rejected:\n  " + "\n  ".join(errors))
        return 1
    print("ok   real collapsed output accepted")
    for name, mutate, want in collapsed_cases():
        expect("collapsed: " + name, check_collapsed.check(mutate(text)), want)

    data = run(exe, "--emit-sentry")
    errors, _ = check_sentry.check(data)
    if errors:
        print("FAIL real Sentry output rejected:\n  " + "\n  ".join(errors))
        return 1
    print("ok   real Sentry output accepted")
    good = json.loads(data)
    for name, mutate, want in sentry_cases(good):
        broken = mutate(copy.deepcopy(good))
        if not isinstance(broken, bytes):
            broken = json.dumps(broken).encode()
        errors, _ = check_sentry.check(broken)
        expect("sentry: " + name, errors, want)

    if failures:
        print("%d failed" % failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
