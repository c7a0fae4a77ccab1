/* record.c: `profctl record`, as `perf record` and `py-spy record`: attach to processes (or
 * start a command under profd), sample until --duration, Ctrl-C or the command's end, write
 * the profile of exactly that time, detach what it attached, and say what it holds.
 *
 * A command is started stopped at a pipe: profd attaches to it first, then it is let go to
 * exec, so that its whole run is sampled (profd follows the exec). The terminal's Ctrl-C
 * reaches it too, as it would under perf; record then waits for it and exits with 0 once
 * the profile is written. A process that was already a target when record began is left
 * attached, at its own rate. While it runs, a progress line on stderr (when stderr is a
 * terminal) shows the time, the samples and the rate achieved. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "profctl.h"
#include "util.h"

struct rec {
    pid_t pid;
    bool attached_here;   /* detach it at the end */
    char comm[64];
    double samples0, ticks0; /* the target's counts when recording began */
    double samples, ticks;   /* and now */
    bool exited;
};

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
}

/* Fill r's counts from profd's status. */
static void poll_status(int fd, struct rec *r)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "status");
    cJSON_AddNumberToObject(req, "pid", r->pid);
    cJSON *reply;
    const char *code, *msg;
    const cJSON *res = try_call(fd, req, &reply, &code, &msg);
    const cJSON *t = res ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "targets"), 0)
                         : NULL;
    if (t) {
        r->samples = num(t, "samples");
        r->ticks = num(t, "ticks");
        r->exited = strcmp(str(t, "state"), "attached") != 0;
        snprintf(r->comm, sizeof(r->comm), "%s", str(t, "comm"));
    } else {
        r->exited = true; /* forgotten: gone */
    }
    cJSON_Delete(reply);
}

/* Attach r->pid (or find it attached already). */
static void attach(int fd, const struct record_opts *o, struct rec *r)
{
    r->attached_here = attach_unless_attached(fd, r->pid, o->hz, o->mode, o->sampler);
    if (!r->attached_here)
        fprintf(stderr, "profctl: %d was already being profiled: recorded at its own rate, "
                        "and left attached\n", r->pid);
    poll_status(fd, r);
    r->samples0 = r->samples;
    r->ticks0 = r->ticks;
}

static void detach(int fd, struct rec *r)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "detach");
    cJSON_AddNumberToObject(req, "pid", r->pid);
    cJSON *reply;
    const char *code, *msg;
    try_call(fd, req, &reply, &code, &msg); /* an exited target may be gone already */
    cJSON_Delete(reply);
}

/* Where the profile of pid goes: out as given for one process, else with "-PID" before its
 * extension; by default profd-PID.svg (a flame graph, as py-spy record writes). */
static char *output_for(const struct record_opts *o, pid_t pid, size_t n)
{
    if (!o->out)
        return xasprintf("profd-%d.%s", pid,
                         !o->format || !strcmp(o->format, "flamegraph") ? "svg"
                         : !strcmp(o->format, "pprof")                  ? "pb.gz"
                         : !strcmp(o->format, "collapsed")              ? "folded"
                         : !strcmp(o->format, "speedscope")             ? "speedscope.json"
                         : !strcmp(o->format, "sentry-chunks")          ? "chunks.json"
                                                                        : "json");
    if (n == 1 || !strcmp(o->out, "-"))
        return xstrdup(o->out);
    const char *slash = strrchr(o->out, '/'), *dot = strchr(slash ? slash : o->out, '.');
    if (!dot || dot == (slash ? slash + 1 : o->out))
        return xasprintf("%s-%d", o->out, pid);
    return xasprintf("%.*s-%d%s", (int)(dot - o->out), o->out, pid, dot);
}

static void progress(struct rec *recs, size_t n, double secs)
{
    double samples = 0, ticks = 0;
    for (size_t i = 0; i < n; i++) {
        samples += recs[i].samples - recs[i].samples0;
        ticks += recs[i].ticks - recs[i].ticks0;
    }
    char who[96];
    if (n == 1)
        snprintf(who, sizeof(who), "%d (%s)", recs[0].pid, recs[0].comm);
    else
        snprintf(who, sizeof(who), "%zu processes", n);
    fprintf(stderr, "\r\033[Kprofctl: recording %s: %.1f s, %.0f samples, %.1f Hz achieved%s",
            who, secs, samples, secs > 0 ? ticks / secs / (double)n : 0,
            n == 1 && recs[0].exited ? " (exited)" : "");
}

int cmd_record(const struct record_opts *o, int argc, char **argv)
{
    bool command = argc > 0 && !strcmp(argv[0], "--");
    if (command) {
        argc--;
        argv++;
    }
    if (argc < 1)
        die(EXIT_USAGE, "record needs PID... or -- COMMAND [ARGS]");
    int fd = connect_daemon();
    size_t n = command ? 1 : (size_t)argc;
    struct rec *recs = xcalloc(n, sizeof(*recs));
    pid_t child = 0;
    int go[2] = {-1, -1}, err[2] = {-1, -1};

    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    if (command) {
        /* go: the child waits on it until it is attached; err: closed by a successful
         * exec (close-on-exec), else it carries exec's errno. */
        if (pipe2(go, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
            die(EXIT_FAIL, "pipe: %s", strerror(errno));
        fflush(NULL);
        child = fork();
        if (child < 0)
            die(EXIT_FAIL, "fork: %s", strerror(errno));
        if (child == 0) {
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            close(go[1]);
            close(err[0]);
            char c;
            ssize_t got;
            while ((got = read(go[0], &c, 1)) < 0 && errno == EINTR)
                ;
            if (got != 1)
                _exit(127); /* profctl could not attach: never run unprofiled */
            execvp(argv[0], argv);
            int e = errno;
            if (write(err[1], &e, sizeof(e)) != sizeof(e))
                _exit(126);
            _exit(127);
        }
        close(go[0]);
        close(err[1]);
        recs[0].pid = child;
    } else {
        for (size_t i = 0; i < n; i++)
            recs[i].pid = parse_pid(argv[i]);
    }
    for (size_t i = 0; i < n; i++)
        attach(fd, o, &recs[i]);
    uint64_t start = now_ns();
    if (command) {
        if (write(go[1], "g", 1) != 1)
            die(EXIT_FAIL, "could not start %s: %s", argv[0], strerror(errno));
        close(go[1]);
        int e;
        ssize_t got;
        while ((got = read(err[0], &e, sizeof(e))) < 0 && errno == EINTR)
            ;
        close(err[0]);
        if (got == sizeof(e)) { /* nothing ran: no profile */
            detach(fd, &recs[0]);
            while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
            die(EXIT_FAIL, "cannot run %s: %s", argv[0], strerror(e));
        }
    }

    bool tty = isatty(STDERR_FILENO);
    int status = -1;
    uint64_t next_poll = 0;
    for (;;) {
        uint64_t now = now_ns();
        if (stop_sig || (o->duration_ns && now - start >= o->duration_ns))
            break;
        if (child && status < 0 && waitpid(child, &status, WNOHANG) == child)
            break; /* the command's end ends the recording */
        if (now >= next_poll) {
            bool all_gone = true;
            for (size_t i = 0; i < n; i++) {
                poll_status(fd, &recs[i]);
                all_gone = all_gone && recs[i].exited;
            }
            if (tty)
                progress(recs, n, (double)(now - start) / 1e9);
            if (all_gone && !child)
                break;
            next_poll = now + 500 * NS_PER_MS;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    uint64_t end = now_ns();
    if (tty) {
        for (size_t i = 0; i < n; i++)
            poll_status(fd, &recs[i]);
        progress(recs, n, (double)(end - start) / 1e9);
        fputc('\n', stderr);
    }
    if (stop_sig)
        fprintf(stderr, "profctl: %s: recording stopped after %.1f s\n", strsignal(stop_sig),
                (double)(end - start) / 1e9);

    const char *format = o->format ? o->format
                         : o->out && format_of(o->out) ? format_of(o->out) : "flamegraph";
    for (size_t i = 0; i < n; i++) {
        char *out = output_for(o, recs[i].pid, n);
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "cmd", "slice");
        cJSON_AddNumberToObject(req, "pid", recs[i].pid);
        cJSON_AddStringToObject(req, "format", format);
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRIu64, start);
        cJSON_AddStringToObject(req, "from_ns", buf);
        snprintf(buf, sizeof(buf), "%" PRIu64, end);
        cJSON_AddStringToObject(req, "to_ns", buf);
        cJSON *reply;
        const char *code, *msg;
        const cJSON *res = try_call(fd, req, &reply, &code, &msg);
        if (res)
            write_slice(res, recs[i].pid, out, o->top);
        else
            fprintf(stderr, "profctl: no profile of %d: %s\n", recs[i].pid, *msg ? msg : code);
        cJSON_Delete(reply);
        free(out);
        if (recs[i].attached_here)
            detach(fd, &recs[i]);
    }
    close(fd);
    if (child) {
        if (status < 0) {
            fprintf(stderr, "profctl: waiting for %s (pid %d) to exit\n", argv[0], child);
            while (waitpid(child, &status, 0) < 0 && errno == EINTR)
                ;
        }
        if (WIFEXITED(status))
            fprintf(stderr, "profctl: %s exited with status %d\n", argv[0], WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
            fprintf(stderr, "profctl: %s was killed by %s\n", argv[0],
                    strsignal(WTERMSIG(status)));
    }
    free(recs);
    return 0;
}
