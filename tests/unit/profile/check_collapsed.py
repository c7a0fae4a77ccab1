#!/usr/bin/env python3
"""check_collapsed.py: reject collapsed ("folded") stacks that flamegraph.pl or speedscope
would misread.

Usage: check_collapsed.py [--allow-empty] [FILE]   (standard input without FILE)
Exit status 0 when the text is accepted, 1 with one line per problem when it is not.

The readers' rules, transcribed from their parsers:
- flamegraph.pl: each line is matched with /^(.*)\\s+?(\\d+(?:\\.\\d*)?)$/ (a line that does
  not match is skipped with only "Ignored N lines with invalid format" on stderr), and the
  stack part is matched again: if it also ends in whitespace and a number, that number is
  taken as the first column of a differential graph. Frames are `split ";"`.
- speedscope (import/bg-flamegraph.ts): /^(.*) (\\d+)$/ per line, lines that do not match are
  skipped; frames are stack.split(';'). Before that, its format sniffing tries the text as
  `perf script` output (import/linux-tools-perf.ts): a first line matching
  /^(\\S.+?)\\s+(\\d+)(?:\\/?(\\d+))?\\s+/ with a time /\\s+(\\d+\\.\\d+):\\s+/ would make it so.
Rules marked "profd:" are our own promise on top (one line per stack, sorted, counts >= 1,
no empty or space-padded frames, every line terminated by a newline).
"""

import re
import sys

FLAMEGRAPH_LINE = re.compile(rb"(.*)\s+?(\d+(?:\.\d*)?)", re.S)
SPEEDSCOPE_LINE = re.compile(rb"(.*) (\d+)", re.S)
PERF_EVENT_START = re.compile(rb"^(\S.+?)\s+(\d+)(?:/?(\d+))?\s+")
PERF_TIME = re.compile(rb"\s+(\d+\.\d+):\s+")
CONTROL = re.compile(rb"[\x00-\x1f\x7f]")


def check(data, allow_empty=False):
    """Return a list of problems with the collapsed text `data` (bytes)."""
    errors = []
    if not data:
        if not allow_empty:
            errors.append("empty input: flamegraph.pl stops with 'No stack counts found'")
        return errors
    if not data.endswith(b"\n"):
        errors.append("profd: the last line has no newline")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()

    first = lines[0] if lines else b""
    if PERF_EVENT_START.search(first) and PERF_TIME.search(first):
        errors.append("line 1: speedscope would import the file as `perf script` output")

    stacks = []
    for n, line in enumerate(lines, 1):
        where = "line %d (%r)" % (n, line[:80])
        if CONTROL.search(line):
            errors.append("%s: control character inside a line" % where)
            continue
        fg = FLAMEGRAPH_LINE.fullmatch(line)
        ss = SPEEDSCOPE_LINE.fullmatch(line)
        if not fg:
            errors.append("%s: flamegraph.pl ignores it (no count)" % where)
            continue
        if not ss:
            errors.append("%s: speedscope ignores it (needs exactly 'STACK COUNT')" % where)
            continue
        stack, count = ss.group(1), ss.group(2)
        if fg.group(1) != stack or fg.group(2) != count:
            errors.append("%s: flamegraph.pl and speedscope split it differently" % where)
            continue
        if FLAMEGRAPH_LINE.fullmatch(stack):
            errors.append("%s: flamegraph.pl reads the end of the stack as a second count "
                          "(differential graph)" % where)
        if int(count) < 1 or (len(count) > 1 and count.startswith(b"0")):
            errors.append("profd: %s: count must be a positive integer" % where)
        frames = stack.split(b";")
        if not stack or any(f == b"" for f in frames):
            errors.append("%s: empty frame" % where)
        elif any(f != f.strip(b" ") for f in frames):
            errors.append("profd: %s: frame with leading or trailing spaces" % where)
        stacks.append(stack)

    if len(set(stacks)) != len(stacks):
        errors.append("profd: the same stack on more than one line")
    if stacks != sorted(stacks):
        errors.append("profd: lines are not sorted")
    return errors


def main(argv):
    args = [a for a in argv[1:] if a != "--allow-empty"]
    allow_empty = len(args) != len(argv) - 1
    if args:
        with open(args[0], "rb") as f:
            data = f.read()
    else:
        data = sys.stdin.buffer.read()
    errors = check(data, allow_empty)
    for e in errors:
        print("check_collapsed: " + e, file=sys.stderr)
    if errors:
        return 1
    lines = data.count(b"\n")
    total = sum(int(l.rsplit(b" ", 1)[1]) for l in data.split(b"\n") if l)
    print("check_collapsed: ok (%d lines, %d samples)" % (lines, total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
