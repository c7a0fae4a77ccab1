/* profctl.c: command-line client of profd: its options and commands (attach, configure,
 * detach, list, status, reload, slice here; record.c, top.c); what they share is ctl.c. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "profctl.h"
#include "proto.h"
#include "util.h"

static bool json_out;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: profctl [--socket PATH] COMMAND [ARGS]\n\n"
            "  attach PID [--hz N] [--buffer SECONDS] [--mode MODE]\n"
            "         [--sampler auto|perf|ptrace] [--service NAME] [--label KEY=VALUE]...\n"
            "         [--no-export]                     start sampling a process\n"
            "  configure PID [--mode MODE] [--hz N]     change how it is sampled\n"
            "  detach PID                               stop sampling it\n"
            "  list [--json]                            attached processes\n"
            "  status [PID] [--json]                    daemon and sampling statistics\n"
            "  reload                                   profd re-reads its configuration file\n"
            "                                           (root and profd's user only)\n"
            "  slice PID [--last SECONDS | --from NS --to NS] [--format FORMAT] [-o FILE]\n"
            "            [--thread-ids] [--top N] [--transaction NAME] [--by-transaction]\n"
            "            [--span ID | --trace ID] [--by-span]\n"
            "                                           write a profile of a time window\n"
            "  record [--duration SECONDS] [-o FILE] [--format FORMAT] [--hz N] [--mode MODE]\n"
            "         PID... | -- COMMAND [ARGS]        sample until Ctrl-C, the duration or\n"
            "                                           the command's end; write the profile\n"
            "  top PID [--window SECONDS] [--sort self|total] [--threads FILTER] [--once]\n"
            "                                           a live view of the busiest functions\n\n"
            "The socket is --socket, else $PROFD_SOCKET, else /run/profd/profd.sock as root,\n"
            "else $XDG_RUNTIME_DIR/profd.sock (or /run/profd/profd.sock if only that exists).\n"
            "--from/--to are CLOCK_MONOTONIC nanoseconds. MODE: alarm (fixed rate on the wall\n"
            "clock), sleep (an interval after each sample), event (sleep, and a sample at each\n"
            "slice request), cputime (per interval of each thread's CPU time, on-CPU only).\n"
            "Exit status: 0 ok, 1 error, 2 usage, 3 profd not running, 4 no such process,\n"
            "5 permission denied, 6 not attached.\n"
            "FORMAT: collapsed (folded stacks, the default), sentry (a Sentry profile),\n"
            "sentry-chunks (Sentry's continuous profile chunks), pprof (gzipped\n"
            "profile.proto, for go tool pprof), speedscope (speedscope's JSON), flamegraph\n"
            "(an interactive SVG). Without --format, -o's name decides: FILE.folded, .json,\n"
            ".chunks.json, .pb.gz, .speedscope.json, .svg; else collapsed.\n"
            "--transaction NAME keeps the samples of threads while they ran a transaction of\n"
            "that name; --by-transaction splits the profile by transaction (collapsed: a root\n"
            "frame \"[txn NAME]\" per open transaction, or \"[no transaction]\"; sentry: the\n"
            "transactions listed under \"profd\").\n"
            "--span ID (16 hex digits) and --trace ID (32) keep the samples a process took\n"
            "under that OpenTelemetry span or trace, as its thread context published them;\n"
            "--by-span splits the profile by span (collapsed: a root \"[span ID VALUES]\", or\n"
            "\"[no span]\"); pprof labels every sample with its trace_id and span_id.\n"
            "Where profd exports profiles (profd.conf(5): export_sentry, export_pyroscope,\n"
            "export_otlp), an attached process's are filed under --service (default: its\n"
            "systemd unit, else its executable's name) with each --label; --no-export keeps\n"
            "them on this host.\n");
}

static void print_json(const cJSON *o)
{
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
}

/* What an attach asks of the export. */
struct attach_export {
    const char *service;
    const char *labels[16];
    size_t nlabels;
    bool off;
};

static int cmd_attach(int fd, pid_t pid, uint64_t hz, uint64_t buffer_s, const char *mode,
                      const char *sampler, const struct attach_export *ax)
{
    cJSON *req = attach_request(pid, hz, buffer_s, mode, sampler);
    if (ax->service)
        cJSON_AddStringToObject(req, "service", ax->service);
    if (ax->nlabels) {
        cJSON *l = cJSON_AddObjectToObject(req, "labels");
        for (size_t i = 0; i < ax->nlabels; i++) {
            const char *eq = strchr(ax->labels[i], '=');
            char key[80];
            snprintf(key, sizeof(key), "%.*s", (int)(eq - ax->labels[i]), ax->labels[i]);
            cJSON_AddStringToObject(l, key, eq + 1);
        }
    }
    if (ax->off)
        cJSON_AddBoolToObject(req, "export", 0);
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    if (json_out)
        print_json(res);
    else
        printf("attached to %d (%s): %d threads, %s at %d Hz, %d s buffer\n", pid,
               str(res, "comm"), (int)num(res, "threads"), str(res, "mode"),
               (int)num(res, "hz"), (int)num(res, "buffer_s"));
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(res, "export");
    if (!json_out && ex)
        printf("exported as service \"%s\" (Sentry profiler_id %s)\n", str(ex, "service"),
               str(ex, "profiler_id"));
    cJSON_Delete(reply);
    return 0;
}

static int cmd_configure(int fd, pid_t pid, uint64_t hz, const char *mode)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "configure");
    cJSON_AddNumberToObject(req, "pid", pid);
    if (hz)
        cJSON_AddNumberToObject(req, "hz", (double)hz);
    if (mode)
        cJSON_AddStringToObject(req, "mode", mode);
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    if (json_out) {
        print_json(res);
    } else {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(res, "sampling");
        printf("%d (%s) now sampled: %s at %d Hz", pid, str(res, "comm"), str(s, "mode"),
               (int)num(s, "hz"));
        if (!strcmp(str(s, "mode"), "cputime"))
            printf(" of CPU time (source: %s)", str(s, "cputime_source"));
        printf("\n");
    }
    cJSON_Delete(reply);
    return 0;
}

static int cmd_detach(int fd, pid_t pid)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "detach");
    cJSON_AddNumberToObject(req, "pid", pid);
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    if (json_out)
        print_json(res);
    else
        printf("detached from %d\n", pid);
    cJSON_Delete(reply);
    return 0;
}

static int cmd_reload(int fd)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "reload");
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    if (json_out)
        print_json(res);
    else
        printf("profd re-read its configuration\n");
    cJSON_Delete(reply);
    return 0;
}

static int cmd_list(int fd)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "list");
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    if (json_out) {
        print_json(res);
    } else {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(res, "targets");
        printf("%-8s %-16s %-10s %7s %6s %9s %8s\n", "PID", "COMMAND", "STATE", "THREADS", "HZ",
               "SAMPLES", "BUFFER");
        const cJSON *t;
        cJSON_ArrayForEach(t, arr)
        {
            printf("%-8d %-16s %-10s %7d %6d %9.0f %7ds\n", (int)num(t, "pid"), str(t, "comm"),
                   str(t, "state"), (int)num(t, "threads"), (int)num(t, "hz"),
                   num(t, "samples"), (int)num(t, "buffer_s"));
        }
    }
    cJSON_Delete(reply);
    return 0;
}

static int cmd_status(int fd, pid_t pid)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "status");
    if (pid)
        cJSON_AddNumberToObject(req, "pid", pid);
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    if (json_out) {
        print_json(res);
        cJSON_Delete(reply);
        return 0;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(res, "daemon");
    double up = num(d, "uptime_s"), cpu = num(d, "cpu_s"), samples = num(d, "samples");
    printf("profd %s (pid %d) on %s\n", str(d, "version"), (int)num(d, "pid"), socket_path);
    printf("  uptime %.0f s, CPU %.2f s (%.2f%% of one CPU), %.0f samples", up, cpu,
           up > 0 ? 100 * cpu / up : 0, samples);
    if (samples > 0)
        printf(", %.1f us CPU per sample", cpu * 1e6 / samples);
    printf("\n  sampling budget %.0f%% of one CPU\n", num(d, "budget_cpu_pct"));
    printf("  max RSS %.0f KiB, %d clients, %d processes, %d ELF files open\n",
           num(d, "max_rss_kib"), (int)num(d, "clients"), (int)num(d, "targets"),
           (int)num(d, "modules"));
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(d, "memory");
    if (mem) {
        double mib = 1024 * 1024;
        printf("  memory %.1f MiB", num(mem, "total_bytes") / mib);
        if (num(mem, "max_bytes") > 0)
            printf(" of max_memory %.1f MiB", num(mem, "max_bytes") / mib);
        printf(": samples %.1f MiB (growing while the total is below %.1f), targets %.1f, "
               "slices %.1f, clients %.1f, transactions %.1f, symbolizer %.1f\n",
               num(mem, "samples_bytes") / mib, num(mem, "samples_grow_below_bytes") / mib,
               num(mem, "targets_bytes") / mib, num(mem, "slices_bytes") / mib,
               num(mem, "clients_bytes") / mib, num(mem, "transactions_bytes") / mib,
               num(mem, "symbolizer_bytes") / mib);
        if (num(mem, "samples_growth_refused") + num(mem, "attaches_refused") +
                num(mem, "slices_refused") > 0)
            printf("  AT max_memory: samples' growth refused %.0f times, %.0f attaches and "
                   "%.0f slices refused\n", num(mem, "samples_growth_refused"),
                   num(mem, "attaches_refused"), num(mem, "slices_refused"));
    }
    const cJSON *fds = cJSON_GetObjectItemCaseSensitive(d, "descriptors");
    if (fds) {
        printf("  descriptors %.0f open of %.0f (threads' %.0f, %.0f kept for the rest)",
               num(fds, "open"), num(fds, "limit"), num(fds, "threads"), num(fds, "reserved"));
        if (num(fds, "threads_refused") + num(fds, "clients_refused") > 0)
            printf("; OUT: %.0f threads without their files, %.0f connections refused",
                   num(fds, "threads_refused"), num(fds, "clients_refused"));
        printf("\n");
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(res, "targets"))
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(t, "sampled");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(t, "unwind");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "skipped");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "failed");
        printf("\n%d %s (%s) [%s]\n", (int)num(t, "pid"), str(t, "comm"), str(t, "exe"),
               str(t, "state"));
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "sampling");
        bool cpu = !strcmp(str(m, "mode"), "cputime");
        printf("  threads %d, %.0f s attached\n", (int)num(t, "threads"), num(t, "attached_s"));
        printf("  schedule %s%s%s%s: %d Hz requested%s, %.1f Hz effective%s, recently %.1f "
               "ticks/s and %.1f samples/s; %.0f ticks, %.0f missed; %.1f ms CPU\n",
               str(m, "mode"), cpu ? " (source: " : "", cpu ? str(m, "cputime_source") : "",
               cpu ? ")" : "", (int)num(m, "hz"), cpu ? " per CPU-second of each thread" : "",
               num(m, "effective_hz"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "throttled"))
                   ? " (THROTTLED by the CPU budget)"
                   : "",
               num(m, "recent_ticks_per_s"), num(m, "recent_samples_per_s"), num(m, "ticks"),
               num(m, "missed"), num(m, "cpu_ms"));
        if (*str(m, "timer_error"))
            printf("  TIMER FAILING: %s: no tick until it can be set again (retried every "
                   "0.25 s)\n", str(m, "timer_error"));
        printf("  samples %.0f (%.0f in buffer): %.0f from the kernel's copy, %.0f stopped, %.0f "
               "blocked without stopping, %.0f idle (not run since last)\n",
               num(t, "samples"), num(t, "buffered"), num(k, "kernel_copy"), num(k, "stopped"),
               num(k, "blocked_without_stop"), num(k, "idle_reused"));
        const cJSON *paths = cJSON_GetObjectItemCaseSensitive(t, "paths");
        const cJSON *pf = cJSON_GetObjectItemCaseSensitive(t, "perf");
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(paths, "perf");
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(paths, "proc");
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(paths, "ptrace");
        printf("  sampler %s: profd's CPU per sample %.1f us (kernel's copy), %.1f us (/proc), "
               "%.1f us (stop); %.0f perf events, %.0f KiB of rings, %.0f lost%s%s\n",
               str(pf, "sampler"), num(pp, "us_per_sample"), num(pr, "us_per_sample"),
               num(pt, "us_per_sample"), num(pf, "events"), num(pf, "ring_bytes") / 1024,
               num(pf, "lost"), *str(pf, "error") ? "; perf refused: " : "", str(pf, "error"));
        printf("  unwinds %.1f%% complete (%.0f truncated, %.0f too deep)\n",
               num(u, "complete_pct"), num(u, "truncated"), num(u, "too_deep"));
        printf("  skipped: %.0f still stopping, %.0f stopped by job control, %.0f resuming from "
               "it; failed: %.0f thread exited, %.0f registers, %.0f stack copy; %.0f torn "
               "copies retried\n",
               num(s, "still_stopping"), num(s, "job_control_stopped"),
               num(s, "resuming_from_job_control"), num(f, "thread_exited"),
               num(f, "registers"), num(f, "stack_copy"), num(f, "torn_copy_retried"));
        printf("  threads stopped %.0f (%.2f per tick, %.0f us to stop on average); "
               "%.0f system calls restarted; %.0f signals forwarded\n",
               num(t, "threads_stopped"), num(t, "threads_stopped_per_tick"),
               num(t, "stop_latency_us_avg"), num(t, "syscalls_restarted"),
               num(t, "signals_forwarded"));
        printf("  memory %.1f KiB (%d distinct stacks)", num(t, "memory_bytes") / 1024,
               (int)num(t, "stacks"));
        if (num(t, "dropped_max_memory") > 0)
            printf("; %.0f samples dropped at max_memory", num(t, "dropped_max_memory"));
        if (num(t, "threads_without_files") > 0)
            printf("; %.0f threads without their /proc files (sampled by stopping)",
                   num(t, "threads_without_files"));
        printf("\n");
    }
    cJSON_Delete(reply);
    return 0;
}

/* A slice's OpenTelemetry span filters (hex ids, or NULL) and split. */
struct span_opts {
    const char *span, *trace;
    bool by_span;
};

static int cmd_slice(int fd, pid_t pid, const char *format, uint64_t last_ns, int have_last,
                     uint64_t from, int have_from, uint64_t to, int have_to, const char *out,
                     bool thread_ids, unsigned top, const char *txn_name, bool by_txn,
                     const struct span_opts *so)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "slice");
    cJSON_AddNumberToObject(req, "pid", pid);
    cJSON_AddStringToObject(req, "format", format);
    char buf[32];
    if (have_last) {
        snprintf(buf, sizeof(buf), "%" PRIu64, last_ns);
        cJSON_AddStringToObject(req, "last_ns", buf);
    }
    if (have_from) {
        snprintf(buf, sizeof(buf), "%" PRIu64, from);
        cJSON_AddStringToObject(req, "from_ns", buf);
    }
    if (have_to) {
        snprintf(buf, sizeof(buf), "%" PRIu64, to);
        cJSON_AddStringToObject(req, "to_ns", buf);
    }
    if (thread_ids)
        cJSON_AddBoolToObject(req, "thread_ids", 1);
    if (txn_name)
        cJSON_AddStringToObject(req, "transaction", txn_name);
    if (by_txn)
        cJSON_AddBoolToObject(req, "by_transaction", 1);
    if (so->span)
        cJSON_AddStringToObject(req, "span", so->span);
    if (so->trace)
        cJSON_AddStringToObject(req, "trace", so->trace);
    if (so->by_span)
        cJSON_AddBoolToObject(req, "by_span", 1);
    cJSON *reply;
    const cJSON *res = call(fd, req, &reply);
    write_slice(res, pid, out, top);
    cJSON_Delete(reply);
    return 0;
}

int main(int argc, char **argv)
{
    enum { O_HZ = 1, O_BUFFER, O_LAST, O_FROM, O_TO, O_FORMAT, O_JSON, O_TIDS, O_TOP, O_MODE,
           O_TXN, O_BY_TXN, O_SAMPLER, O_DURATION, O_WINDOW, O_SORT, O_THREADS, O_ONCE,
           O_SERVICE, O_LABEL, O_NO_EXPORT, O_SPAN, O_TRACE, O_BY_SPAN };
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"hz", required_argument, NULL, O_HZ},
        {"buffer", required_argument, NULL, O_BUFFER},
        {"last", required_argument, NULL, O_LAST},
        {"from", required_argument, NULL, O_FROM},
        {"to", required_argument, NULL, O_TO},
        {"format", required_argument, NULL, O_FORMAT},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, O_JSON},
        {"thread-ids", no_argument, NULL, O_TIDS},
        {"top", required_argument, NULL, O_TOP},
        {"mode", required_argument, NULL, O_MODE},
        {"transaction", required_argument, NULL, O_TXN},
        {"by-transaction", no_argument, NULL, O_BY_TXN},
        {"span", required_argument, NULL, O_SPAN},
        {"trace", required_argument, NULL, O_TRACE},
        {"by-span", no_argument, NULL, O_BY_SPAN},
        {"sampler", required_argument, NULL, O_SAMPLER},
        {"duration", required_argument, NULL, O_DURATION},
        {"window", required_argument, NULL, O_WINDOW},
        {"sort", required_argument, NULL, O_SORT},
        {"threads", required_argument, NULL, O_THREADS},
        {"once", no_argument, NULL, O_ONCE},
        {"service", required_argument, NULL, O_SERVICE},
        {"label", required_argument, NULL, O_LABEL},
        {"no-export", no_argument, NULL, O_NO_EXPORT},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    uint64_t hz = 0, buffer_ns = 0, last_ns = 0, from = 0, to = 0, top = 10;
    int have_last = 0, have_from = 0, have_to = 0;
    const char *format = NULL, *out = NULL, *mode = NULL, *txn_name = NULL;
    const char *sampler = NULL, *threads = NULL;
    uint64_t duration_ns = 0, window_ns = 10 * NS_PER_SEC;
    bool tids = false, by_txn = false, sort_total = false, once = false;
    struct attach_export ax = {0};
    struct span_opts so = {0};
    int c;
    /* "record ... -- COMMAND ARGS": the command is not profctl's to parse. */
    int all = argc;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            argc = i;
            break;
        }
    /* Options may come before or after the command ("permute" mode). */
    while ((c = getopt_long(argc, argv, "s:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            socket_opt = optarg;
            break;
        case O_HZ:
            if (parse_u64(optarg, &hz) < 0 || hz < 1 || hz > 100000)
                die(EXIT_USAGE, "--hz must be an integer from 1 to 100000");
            break;
        case O_BUFFER:
            if (parse_duration_ns(optarg, &buffer_ns) < 0 || buffer_ns < NS_PER_SEC)
                die(EXIT_USAGE, "--buffer must be a duration of at least 1 s (\"60\", \"5m\")");
            break;
        case O_LAST:
            if (parse_duration_ns(optarg, &last_ns) < 0)
                die(EXIT_USAGE, "--last must be a duration (\"5\", \"500ms\", \"2m\")");
            have_last = 1;
            break;
        case O_FROM:
            if (parse_u64(optarg, &from) < 0)
                die(EXIT_USAGE, "--from must be CLOCK_MONOTONIC nanoseconds");
            have_from = 1;
            break;
        case O_TO:
            if (parse_u64(optarg, &to) < 0)
                die(EXIT_USAGE, "--to must be CLOCK_MONOTONIC nanoseconds");
            have_to = 1;
            break;
        case O_SAMPLER:
            if (strcmp(optarg, "auto") && strcmp(optarg, "perf") && strcmp(optarg, "ptrace"))
                die(EXIT_USAGE, "--sampler must be auto, perf or ptrace");
            sampler = optarg;
            break;
        case O_FORMAT:
            if (!valid_format(optarg))
                die(EXIT_USAGE, "--format must be collapsed, sentry, sentry-chunks, pprof, "
                                "speedscope or flamegraph");
            format = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case O_JSON:
            json_out = true;
            break;
        case O_TIDS:
            tids = true;
            break;
        case O_TOP:
            if (parse_u64(optarg, &top) < 0)
                die(EXIT_USAGE, "--top must be a number");
            break;
        case O_DURATION:
            if (parse_duration_ns(optarg, &duration_ns) < 0 || !duration_ns)
                die(EXIT_USAGE, "--duration must be a duration (\"10\", \"500ms\", \"2m\")");
            break;
        case O_WINDOW:
            if (parse_duration_ns(optarg, &window_ns) < 0 || window_ns < 100 * NS_PER_MS)
                die(EXIT_USAGE, "--window must be a duration of at least 100 ms");
            break;
        case O_SORT:
            if (strcmp(optarg, "self") && strcmp(optarg, "total"))
                die(EXIT_USAGE, "--sort must be self or total");
            sort_total = !strcmp(optarg, "total");
            break;
        case O_THREADS:
            threads = optarg;
            break;
        case O_ONCE:
            once = true;
            break;
        case O_SERVICE:
            ax.service = optarg;
            break;
        case O_LABEL:
            if (!strchr(optarg, '=') || optarg[0] == '=')
                die(EXIT_USAGE, "--label must be KEY=VALUE");
            if (ax.nlabels == sizeof(ax.labels) / sizeof(ax.labels[0]))
                die(EXIT_USAGE, "at most 16 --label");
            ax.labels[ax.nlabels++] = optarg;
            break;
        case O_NO_EXPORT:
            ax.off = true;
            break;
        case O_BY_TXN:
            by_txn = true;
            break;
        case O_SPAN:
            if (strlen(optarg) != 16 || strspn(optarg, "0123456789abcdefABCDEF") != 16)
                die(EXIT_USAGE, "--span must be a span id: 16 hex digits");
            so.span = optarg;
            break;
        case O_TRACE:
            if (strlen(optarg) != 32 || strspn(optarg, "0123456789abcdefABCDEF") != 32)
                die(EXIT_USAGE, "--trace must be a trace id: 32 hex digits");
            so.trace = optarg;
            break;
        case O_BY_SPAN:
            so.by_span = true;
            break;
        case O_TXN:
            txn_name = optarg;
            break;
        case O_MODE:
            if (strcmp(optarg, "alarm") && strcmp(optarg, "sleep") && strcmp(optarg, "event") &&
                strcmp(optarg, "cputime"))
                die(EXIT_USAGE, "--mode must be alarm, sleep, event or cputime");
            mode = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[optind++];
    int nargs = argc - optind;
    char **args = argv + optind;
    if (have_last && (have_from || have_to))
        die(EXIT_USAGE, "give either --last or --from/--to");
    if (!strcmp(cmd, "attach") && nargs == 1) {
        pid_t pid = parse_pid(args[0]);
        return cmd_attach(connect_daemon(), pid, hz, buffer_ns / NS_PER_SEC, mode, sampler,
                          &ax);
    }
    if (!strcmp(cmd, "configure") && nargs == 1) {
        pid_t pid = parse_pid(args[0]);
        if (!hz && !mode)
            die(EXIT_USAGE, "configure needs --mode or --hz");
        return cmd_configure(connect_daemon(), pid, hz, mode);
    }
    if (!strcmp(cmd, "detach") && nargs == 1) {
        pid_t pid = parse_pid(args[0]);
        return cmd_detach(connect_daemon(), pid);
    }
    if (!strcmp(cmd, "list") && nargs == 0)
        return cmd_list(connect_daemon());
    if (!strcmp(cmd, "reload") && nargs == 0)
        return cmd_reload(connect_daemon());
    if (!strcmp(cmd, "status") && nargs <= 1) {
        pid_t pid = nargs ? parse_pid(args[0]) : 0;
        return cmd_status(connect_daemon(), pid);
    }
    if (!strcmp(cmd, "record")) {
        struct record_opts ro = {.hz = hz, .duration_ns = duration_ns, .mode = mode,
                                 .sampler = sampler, .format = format, .out = out,
                                 .top = (unsigned)top};
        /* The PIDs, then "--" and the command if one was given. */
        char **rargs = xcalloc((size_t)(nargs + (all - argc) + 1), sizeof(*rargs));
        int rn = 0;
        for (int i = 0; i < nargs; i++)
            rargs[rn++] = args[i];
        if (all > argc) {
            if (nargs)
                die(EXIT_USAGE, "record takes PID... or -- COMMAND, not both");
            for (int i = argc; i < all; i++)
                rargs[rn++] = argv[i];
        }
        int rc = cmd_record(&ro, rn, rargs);
        free(rargs);
        return rc;
    }
    if (all > argc)
        die(EXIT_USAGE, "only record runs a command (\"--\")");
    if (!strcmp(cmd, "top") && nargs == 1) {
        struct top_opts to_ = {.hz = hz, .window_ns = window_ns, .interval_ns = NS_PER_SEC,
                               .mode = mode, .sampler = sampler, .threads = threads,
                               .sort_total = sort_total, .once = once};
        return cmd_top(&to_, parse_pid(args[0]));
    }
    /* No --format: what -o's name asks for, else collapsed stacks. */
    if (!format)
        format = out && format_of(out) ? format_of(out) : "collapsed";
    if (!strcmp(cmd, "slice") && nargs == 1) {
        pid_t pid = parse_pid(args[0]);
        return cmd_slice(connect_daemon(), pid, format, last_ns, have_last, from, have_from, to,
                         have_to, out, tids, (unsigned)top, txn_name, by_txn, &so);
    }
    usage(stderr);
    return EXIT_USAGE;
}
