/* main.c: profd, the profiling daemon: options, the event loop, signals, shutdown. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ev.h>

#include "log.h"
#include "sampler.h"
#include "server.h"
#include "target.h"
#include "util.h"
#include "txn.h"
#include "worker.h"

static struct ev_loop *loop;
static ev_signal sigchld_w, sigterm_w, sigint_w, sighup_w;
static ev_timer housekeeping_w;
static ev_check collect_w;
static int exit_code;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: profd [options]\n"
            "Out-of-process sampling profiler daemon. Runs in the foreground.\n\n"
            "  -s, --socket PATH     listen on PATH (default: $PROFD_SOCKET, else\n"
            "                        /run/profd/profd.sock as root, else\n"
            "                        $XDG_RUNTIME_DIR/profd.sock)\n"
            "      --hz N            default sampling rate for attach (101)\n"
            "      --mode MODE       default schedule for attach: alarm (fixed rate on the\n"
            "                        wall clock), sleep, event, or cputime (per interval of each\n"
            "                        thread's CPU time) (alarm)\n"
            "      --max-cpu PERCENT CPU budget for sampling, in percent of one CPU: rates are\n"
            "                        lowered fairly across targets to stay within it; 0: none (25)\n"
            "      --txn-linger SECONDS\n"
            "                        how long a process attached for its transactions stays\n"
            "                        attached after its last one ended (5)\n"
            "      --cputime-source auto|perf|timer|poll\n"
            "                        how cputime follows CPU time (auto: the best available)\n"
            "      --buffer SECONDS  default sample buffer length (60)\n"
            "      --max-hz N        highest rate a client may ask for (10000)\n"
            "      --max-targets N   most processes followed at once (256)\n"
            "      --max-targets-per-user N\n"
            "                        most of them one user without CAP_SYS_PTRACE may attach (32)\n"
            "      --max-stack KIB   most stack copied per sample (512)\n"
            "  -v, --verbose         debug logging\n"
            "  -V, --version         print the version\n"
            "  -h, --help            this help\n");
}

/* Every ptrace stop and exit of every traced thread arrives here (SIGCHLD via signalfd). */
static void on_sigchld(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)l, (void)w, (void)revents;
    targets_reap();
    commands_stops_reaped();
}

static void on_terminate(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)revents;
    log_info("signal %d: detaching from every process and exiting", w->signum);
    ev_break(l, EVBREAK_ALL);
}

static void on_sighup(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)l, (void)w, (void)revents;
    log_info("SIGHUP: nothing to reload");
}

/* After every loop iteration: free targets forgotten during it. */
static void on_collect(struct ev_loop *l, ev_check *w, int revents)
{
    (void)l, (void)w, (void)revents;
    targets_collect();
}

static void on_housekeeping(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)w, (void)revents;
    targets_housekeeping(now_ns());
    txn_expire(now_ns());
}

static unsigned parse_uint_opt(const char *name, const char *v, unsigned lo, unsigned hi)
{
    uint64_t n;
    if (parse_u64(v, &n) < 0 || n < lo || n > hi)
        fatal("%s must be an integer from %u to %u, not \"%s\"", name, lo, hi, v);
    return (unsigned)n;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"hz", required_argument, NULL, 1},
        {"buffer", required_argument, NULL, 2},
        {"max-hz", required_argument, NULL, 3},
        {"max-targets", required_argument, NULL, 4},
        {"max-stack", required_argument, NULL, 5},
        {"max-targets-per-user", required_argument, NULL, 6},
        {"mode", required_argument, NULL, 7},
        {"max-cpu", required_argument, NULL, 8},
        {"cputime-source", required_argument, NULL, 9},
        {"txn-linger", required_argument, NULL, 10},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *socket_opt = NULL;
    unsigned max_stack_kib = 512;
    double max_cpu = 25;
    uint64_t linger_ns = 5 * NS_PER_SEC;
    enum cpu_source cpu_src = CPU_SRC_AUTO;
    server_cfg.default_mode = SCHED_ALARM;
    log_init("profd", LOG_LVL_INFO);
    server_cfg.default_hz = 101;
    server_cfg.default_buffer_ns = 60 * NS_PER_SEC;
    server_cfg.max_hz = 10000;
    server_cfg.max_buffer_ns = 3600 * NS_PER_SEC;
    server_cfg.max_targets = 256;
    server_cfg.max_targets_per_user = 32;
    int c;
    while ((c = getopt_long(argc, argv, "s:vVh", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            socket_opt = optarg;
            break;
        case 1:
            server_cfg.default_hz = parse_uint_opt("--hz", optarg, 1, 10000);
            break;
        case 2: {
            uint64_t ns;
            if (parse_duration_ns(optarg, &ns) < 0 || ns < NS_PER_SEC || ns > 3600 * NS_PER_SEC)
                fatal("--buffer must be from 1 s to 1 h, not \"%s\"", optarg);
            server_cfg.default_buffer_ns = ns;
            break;
        }
        case 3:
            server_cfg.max_hz = parse_uint_opt("--max-hz", optarg, 1, 100000);
            break;
        case 4:
            server_cfg.max_targets = parse_uint_opt("--max-targets", optarg, 1, 65536);
            break;
        case 5:
            max_stack_kib = parse_uint_opt("--max-stack", optarg, 8, 65536);
            break;
        case 6:
            server_cfg.max_targets_per_user =
                parse_uint_opt("--max-targets-per-user", optarg, 1, 65536);
            break;
        case 7:
            if (sched_mode_parse(optarg, &server_cfg.default_mode) < 0)
                fatal("--mode must be alarm, sleep, event or cputime, not \"%s\"", optarg);
            break;
        case 8: {
            char *end;
            errno = 0;
            max_cpu = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(max_cpu >= 0 && max_cpu <= 10000))
                fatal("--max-cpu must be a percentage from 0 to 10000, not \"%s\"", optarg);
            break;
        }
        case 9:
            if (cpu_source_parse(optarg, &cpu_src) < 0)
                fatal("--cputime-source must be auto, perf, timer or poll, not \"%s\"", optarg);
            break;
        case 10:
            if (parse_duration_ns(optarg, &linger_ns) < 0 || linger_ns > 3600 * NS_PER_SEC)
                fatal("--txn-linger must be a duration up to 1 h (\"5\", \"500ms\"), not \"%s\"",
                      optarg);
            break;
        case 'v':
            log_set_level(LOG_LVL_DEBUG);
            break;
        case 'V':
            printf("profd %s\n", PROFD_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (server_cfg.default_hz > server_cfg.max_hz)
        fatal("--hz %u is above --max-hz %u", server_cfg.default_hz, server_cfg.max_hz);

    char *path = profd_socket_path(socket_opt);
    if (!path)
        fatal("out of memory");

    /* Each traced thread keeps two /proc descriptors open: allow as many as we may. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);

    /* Never the default loop: it installs a SIGCHLD handler that reaps with
     * waitpid(-1, WUNTRACED), which since Linux 4.7 steals ptrace stops of our tracees and
     * leaves them stuck in tracing stop. Signals arrive through a signalfd. */
    loop = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_SIGNALFD | EVFLAG_NOENV);
    if (!loop)
        fatal("cannot create the event loop");
    server_start_ns = now_ns();
    if (sampler_init((size_t)max_stack_kib * 1024) < 0)
        fatal("out of memory");
    targets_init(loop);
    sched_global_init(loop, cpu_src, max_cpu);
    txn_init(loop, linger_ns);
    ev_signal_init(&sigchld_w, on_sigchld, SIGCHLD);
    ev_signal_start(loop, &sigchld_w);
    ev_signal_init(&sigterm_w, on_terminate, SIGTERM);
    ev_signal_start(loop, &sigterm_w);
    ev_signal_init(&sigint_w, on_terminate, SIGINT);
    ev_signal_start(loop, &sigint_w);
    ev_signal_init(&sighup_w, on_sighup, SIGHUP);
    ev_signal_start(loop, &sighup_w);
    ev_timer_init(&housekeeping_w, on_housekeeping, 1.0, 1.0);
    ev_timer_start(loop, &housekeeping_w);
    ev_check_init(&collect_w, on_collect);
    ev_check_start(loop, &collect_w);

    int r = worker_start(loop);
    if (r < 0)
        fatal("cannot start the worker thread: %s", strerror(-r));
    if (server_listen(loop, path) < 0)
        return 1;
    server_cfg.socket_path = path;
    log_info("profd %s listening on %s", PROFD_VERSION, path);

    ev_run(loop, 0);

    commands_shutdown();
    txn_shutdown();
    server_shutdown();
    targets_shutdown(5 * NS_PER_SEC);
    targets_collect();
    ev_check_stop(loop, &collect_w);
    worker_stop();
    sched_global_finish();
    sampler_finish();
    ev_timer_stop(loop, &housekeeping_w);
    ev_signal_stop(loop, &sigchld_w);
    ev_signal_stop(loop, &sigterm_w);
    ev_signal_stop(loop, &sigint_w);
    ev_signal_stop(loop, &sighup_w);
    ev_loop_destroy(loop);
    free(path);
    log_info("exiting");
    return exit_code;
}
