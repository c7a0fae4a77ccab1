"""profd.SentryIntegration with Sentry's real SDK (Debian's python3-sentry-sdk, 1.9.10) and a
transport that captures envelopes (no network), in sentryapp.py under Debian's python3:

- every sampled transaction (sentry_sdk.start_transaction, and a request through the SDK's
  WSGI integration) carries a `profile` item valid by relay's rules, linked as the SDK links
  its own: transactions[0].id is the transaction event's id, the same trace id and name, the
  thread that ran it the active one; and it names the Python function that made it slow;
- once a finish's reply says profd reads the process's thread context, the SDK's trace and
  span ids are published there (libprofd through ctypes): no start message, the profile
  asked for by span id, and `slice --span` of the SDK's span is its samples;
- the SDK's profiler never starts (no scheduler, no SIGPROF/SIGALRM handler);
- profiles_sample_rate 0: transactions without profiles;
- without profd: the application runs unchanged, transactions go without profiles;
- continuous=True, with profd exporting to a Sentry receiver on the loopback
  (tests/integration/receivers.py): transactions carry no profile item but
  contexts.profile.profiler_id, the profiler_id of the chunks profd sends, and the thread
  that ran them in the trace context's data; the chunks hold that thread's samples of
  compute_primes inside each transaction's time."""
import json
import os
import sys
import tempfile

from harness import *

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "unit", "profile"))
import check_sentry  # noqa: E402

PY = "/usr/bin/python3"
if subprocess.run([PY, "-c", "import sentry_sdk"], capture_output=True).returncode != 0:
    skip("Sentry's SDK is not installed for %s (.ci/setup installs python3-sentry-sdk)" % PY)
ENV = dict(os.environ, PROFD_PY=os.path.join(HERE, "..", "..", "client", "python"))
# Under valgrind the daemon takes a few samples a second: a transaction of 120 ms may get
# fewer than the two samples a profile needs (then none is sent); what is checked there is
# that those sent are right, and that some are.
WRAPPED = bool(os.environ.get("PROFD_WRAPPER"))


def start_app(out, sock, rate):
    app = subprocess.Popen([PY, os.path.join(HERE, "sentryapp.py"), out, sock, str(rate)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV,
                           bufsize=1)
    ready = app.stdout.readline().split()
    if not ready or ready[0] != "ready":
        fail("sentryapp did not start: %r" % ready)
    return app, int(ready[2])


def ask(app, line):
    app.stdin.write(line + "\n")
    app.stdin.flush()
    return app.stdout.readline().split()


def envelopes(out):
    with open(out) as f:
        return [json.loads(l) for l in f if l.strip()]


def transactions(out):
    """[(event, profile or None)] of the transaction envelopes."""
    res = []
    for env in envelopes(out):
        ev = [i["payload"] for i in env["items"] if i["type"] == "transaction"]
        pr = [i["payload"] for i in env["items"] if i["type"] == "profile"]
        if ev:
            res.append((ev[0], pr[0] if pr else None))
    return res


def python_functions(prof, tid):
    frames = prof["profile"]["frames"]
    stacks = prof["profile"]["stacks"]
    names = set()
    for s in prof["profile"]["samples"]:
        if int(s["thread_id"]) == tid:
            for i in stacks[s["stack_id"]]:
                f = frames[i]
                if "instruction_addr" not in f:
                    names.add("%s.%s" % (f.get("module", "?"), f["function"]))
    return names


tmp = tempfile.mkdtemp(prefix="profd-sentry-")

# 1. With profd: every transaction has its profile, linked, naming the slow function.
with Daemon() as d:
    out = os.path.join(tmp, "with.jsonl")
    app, main_tid = start_app(out, d.socket, 1.0)
    try:
        traces = []
        for i in range(3):
            traces.append(ask(app, "txn job-%d 120" % i)[1])
        # Once a finish said profd reads the process's thread context, the SDK's trace and
        # span ids are published there (no start message): a slice of that span is its
        # samples.
        spans = [ask(app, "txn ctx-%d 150" % i)[1:3] for i in range(2)]
        ask(app, "wsgi /slow")
        ask(app, "wsgi /fast")
        state = ask(app, "state")
        ask(app, "quit")
        app.wait(timeout=30)
    finally:
        app.kill()
    check(state[1:4] == ["scheduler=True", "sigprof=True", "sigalrm=True"],
          "the SDK's profiler never started: no scheduler, SIGPROF and SIGALRM untouched (%s)"
          % state[1:])
    txs = transactions(out)
    nprof = 0
    check(len(txs) == 7, "7 transactions sent (%d)" % len(txs))
    if not LIBPROFD_SANITIZED:
        tr = d.status()["daemon"]["transactions"]
        check(tr["txn_profile"] >= 2 and tr["txn_start"] <= 5,
              "the later transactions were published in the thread context: no start message, "
              "their profiles asked for by span id (%s)" % tr)
        trace, span = spans[-1]
        one = d.slice(app.pid, "--span", span)
        check(sum(one.values()) >= (1 if WRAPPED else 2) and
              any("compute_primes" in k for k in one) and
              d.slice(app.pid, "--trace", trace) == one,
              "--span of the SDK's span %s (and --trace of its trace): its samples, in "
              "compute_primes (%s)" % (span, list(one.items())[:2]))
    else:
        log("(libprofd is sanitized: the Python module uses messages, not the thread context)")
    for ev, prof in txs:
        name = ev.get("transaction")
        url = ev.get("request", {}).get("url", "")
        if url.endswith("/fast"):
            # A few milliseconds: at most one sample, which relay would drop: none sent.
            problems = check_sentry.check(json.dumps(prof).encode())[0] if prof else []
            check(not problems, "the fast WSGI request (%s): no profile, or a valid one (%s; "
                  "%d samples)" % (url, problems[:2],
                                   len((prof or {}).get("profile", {}).get("samples", ()))))
            continue
        if url:
            name = "%s %s" % (name, url)
        if prof is None:
            if WRAPPED:
                log("%s: no profile (too few samples under valgrind)" % name)
            else:
                check(False, "transaction %s has a profile item" % name)
            continue
        nprof += 1
        problems, _ = check_sentry.check(json.dumps(prof).encode())
        t = prof.get("transactions", [{}])[0]
        linked = (t.get("id") == ev.get("event_id") and
                  t.get("trace_id") == ev["contexts"]["trace"]["trace_id"] and
                  t.get("name") == ev.get("transaction") and
                  int(t.get("active_thread_id", 0)) == main_tid)
        check(not problems and linked,
              "%s: its profile passes relay's rules (%s) and is linked to it: event id, trace "
              "id, name, active thread %d (%s)"
              % (name, problems[:2], main_tid,
                 {k: t.get(k) for k in ("id", "trace_id", "name", "active_thread_id")}))
        # The boundary samples (at the start and the finish, taken inside profd's client)
        # stand at the application's call site: no frame of the client. (A tick may still
        # land inside it, as in any code the application runs: at most one here.)
        fr, stk = prof["profile"]["frames"], prof["profile"]["stacks"]
        client = [i for i, f in enumerate(fr) if f.get("module") == "profd" or
                  str(f.get("function", "")).startswith("profd_")]
        inside = [s for s in prof["profile"]["samples"]
                  if any(i in client for i in stk[s["stack_id"]])]
        check(len(inside) <= 1, "%s: %d of its %d samples inside profd's own client (boundary "
              "samples, and ticks while profd had not read the start or finish, stand at the "
              "call site)%s" % (name, len(inside), len(prof["profile"]["samples"]), "".join(
                  "\n  at %.1f ms: %s" % (int(s["elapsed_since_start_ns"]) / 1e6, " <- ".join(
                      "%s.%s" % (fr[i].get("module"), fr[i].get("function"))
                      for i in stk[s["stack_id"]][:8])) for s in inside)))
        if "unsampled_before_attach_ms" in prof.get("profd", {}):
            # Started before profd had attached the process (the integration asks it to
            # at init, and a start does not wait): the profile says so.
            log("%s: started %s ms before the attach completed" %
                (name, prof["profd"]["unsampled_before_attach_ms"]))
            continue
        if (name.startswith(("job-", "ctx-")) or name.endswith("/slow")) and not WRAPPED:
            fns = python_functions(prof, main_tid)
            want = "__main__.compute_primes"
            check(want in fns, "%s: the profile names %s (of %d Python functions: %s)"
                  % (name, want, len(fns), sorted(fns)[:8]))
    check(nprof >= (1 if WRAPPED else 6), "%d of the 6 slow transactions have profiles"
          % nprof)
    slow = [p for e, p in txs if e.get("request", {}).get("url", "").endswith("/slow") and p]
    check(WRAPPED or (slow and "__main__.slow_handler" in python_functions(slow[0], main_tid)),
          "the slow WSGI request's profile shows slow_handler, the function that made it slow")

# 2. profiles_sample_rate 0: transactions, no profiles.
with Daemon() as d:
    out = os.path.join(tmp, "rate0.jsonl")
    app, _ = start_app(out, d.socket, 0.0)
    try:
        for i in range(3):
            ask(app, "txn none-%d 10" % i)
        ask(app, "quit")
        app.wait(timeout=30)
    finally:
        app.kill()
    txs = transactions(out)
    check(len(txs) == 3 and all(p is None for _, p in txs),
          "profiles_sample_rate 0: %d transactions, none with a profile" % len(txs))

# 3. No profd: the application runs unchanged, no profile, nothing raises.
out = os.path.join(tmp, "none.jsonl")
app, _ = start_app(out, os.path.join(tmp, "no-such.sock"), 1.0)
try:
    t0 = time.monotonic()
    for i in range(3):
        r = ask(app, "txn alone-%d 10" % i)
        check(r and r[0] == "done", "without profd, transaction %d runs (%s)" % (i, r))
    state = ask(app, "state")
    ask(app, "quit")
    app.wait(timeout=30)
finally:
    app.kill()
txs = transactions(out)
check(len(txs) == 3 and all(p is None for _, p in txs) and app.returncode == 0,
      "without profd: %d transactions sent without profiles, the app exits 0 (%s; %s)"
      % (len(txs), app.returncode, state[-1]))

# 4. Continuous profiling: the transactions link to the chunks profd's exporter sends.
import receivers  # noqa: E402

rx = receivers.Receiver().start()
try:
    with Daemon("--export-sentry", rx.urls()["sentry"], "--export-interval", "1",
                "--export-spool", os.path.join(tmp, "spool")) as d:
        out = os.path.join(tmp, "continuous.jsonl")
        app = subprocess.Popen([PY, os.path.join(HERE, "sentryapp.py"), out, d.socket, "1.0"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env=dict(ENV, PROFD_CONTINUOUS="1"), bufsize=1)
        ready = app.stdout.readline().split()
        try:
            check(ready and ready[0] == "ready", "sentryapp (continuous) started (%s)" % ready)
            app_pid, main_tid = int(ready[1]), int(ready[2])
            for i in range(3):
                ask(app, "txn cont-%d 300" % i)
            state = ask(app, "state")
            ask(app, "quit")
            app.wait(timeout=30)
        finally:
            app.kill()
        wait_until(lambda: rx.taken("sentry") and
                   d.status()["daemon"]["export"]["sentry"]["queued"] == 0 and
                   not d.status()["daemon"]["export"]["windows_building"], 60,
                   "the chunks sent")
    txs = transactions(out)
    chunks = [c for b in rx.taken("sentry") for c in b.chunks]
    ids = {c["profiler_id"] for c in chunks}
    check(len(txs) == 3 and all(p is None for _, p in txs) and state[5] == "errors=0",
          "continuous: 3 transactions sent without a profile item, no error (%s)" % state[5:])
    check(len(ids) == 1 and not rx.problems,
          "continuous: profd sent chunks of one profiler_id, valid by relay's rules (%s; %s)"
          % (ids, rx.problems[:2]))
    for ev, _ in txs:
        ctx = ev.get("contexts", {})
        data = ctx.get("trace", {}).get("data", {})
        t0, t1 = ev["start_timestamp"], ev["timestamp"]
        if isinstance(t0, str):
            import datetime
            t0 = datetime.datetime.fromisoformat(t0.replace("Z", "+00:00")).timestamp()
            t1 = datetime.datetime.fromisoformat(t1.replace("Z", "+00:00")).timestamp()
        names = set()
        for c in chunks:
            fr, stk = c["profile"]["frames"], c["profile"]["stacks"]
            for smp in c["profile"]["samples"]:
                if smp["thread_id"] == str(main_tid) and t0 <= smp["timestamp"] <= t1:
                    names |= {"%s.%s" % (fr[i].get("module"), fr[i].get("function"))
                              for i in stk[smp["stack_id"]]}
        check(ctx.get("profile", {}).get("profiler_id") in ids and
              data.get("thread.id") == str(main_tid) and
              "__main__.compute_primes" in names,
              "continuous: %s links to the chunks (profiler_id %s, thread.id %s) and they "
              "hold its thread's compute_primes inside its time (%d functions)"
              % (ev.get("transaction"), ctx.get("profile"), data.get("thread.id"),
                 len(names)))
finally:
    rx.stop()
