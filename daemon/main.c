/* main.c: profd, the profiling daemon: options, the event loop, signals, shutdown. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stddef.h>
#include <unistd.h>

#include <ev.h>

#include "commands.h"
#include "config.h"
#include "export.h"
#include "pykernel.h"
#include "fds.h"
#include "log.h"
#include "memory.h"
#include "modules.h"
#include "sampler.h"
#include "sdnotify.h"
#include "schedule.h"
#include "server.h"
#include "symhelper.h"
#include "target.h"
#include "util.h"
#include "txn.h"
#include "worker.h"

static struct ev_loop *loop;
static ev_signal sigchld_w, sigterm_w, sigint_w, sighup_w;
static ev_timer housekeeping_w;
static ev_check collect_w;
static ev_prepare chores_w;
static int exit_code;

static void usage(FILE *f)
{
    struct strbuf sb = {0};
    config_usage(&sb);
    fprintf(f,
            "usage: profd [options]\n"
            "Out-of-process sampling profiler daemon. Runs in the foreground. Settings come\n"
            "from the configuration file (profd.conf(5)); options override them.\n\n"
            "  -c, --config PATH     configuration file (default:\n"
            "                        %s; missing, no error)\n"
            "%s"
            "      --show-config     print the configuration these would give, and exit\n"
            "  -V, --version         print the version\n"
            "  -h, --help            this help\n\n"
            "Signals: SIGHUP re-reads the configuration (a bad one is refused and the running\n"
            "one kept); SIGTERM and SIGINT detach from every process and exit 0.\n",
            PROFD_DEFAULT_CONFIG, sb.buf ? sb.buf : "");
    strbuf_finish(&sb);
}

/* The command line, kept for reloads: the configuration is always the defaults, then the
 * file, then these. */
struct flag {
    const char *key;
    const char *value;
};
static struct flag *flags;
static size_t nflags;
static char *dsn_flag; /* the --export-sentry flag's value (argv's is hidden) */
static const char *config_path = PROFD_DEFAULT_CONFIG;
static bool config_explicit;
static struct profd_config live;
static struct profd_config boot; /* as started: what only a restart changes is compared to it */

/* Defaults, the file, the flags. Returns 0, or -1 with the reason in err. */
static int build_config(struct profd_config *c, char *err, size_t errlen)
{
    config_defaults(c);
    if (config_load(c, config_path, !config_explicit, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < nflags; i++) {
        char why[300];
        if (config_set(c, flags[i].key, flags[i].value, why, sizeof(why)) < 0) {
            char flag[64];
            snprintf(flag, sizeof(flag), "%s", flags[i].key);
            for (char *p = flag; *p; p++)
                *p = *p == '_' ? '-' : *p;
            snprintf(err, errlen, "--%s: %s", flag, why);
            return -1;
        }
    }
    if (config_check(c, err, errlen) < 0 || config_read_secrets(c, err, errlen) < 0)
        return -1;
    return 0;
}

static gid_t group_id(const char *name)
{
    if (!name)
        return (gid_t)-1;
    struct group *g = getgrnam(name);
    uint64_t n;
    if (g)
        return g->gr_gid;
    return parse_u64(name, &n) == 0 ? (gid_t)n : (gid_t)-1;
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* Put c in force. At a reload, what only a restart can change (compared with the
 * configuration profd started with) is reported. */
static void apply_config(const struct profd_config *c, bool reloading)
{
    log_set_level(c->verbose ? LOG_LVL_DEBUG : LOG_LVL_INFO);
    server_cfg.default_mode = c->mode;
    server_cfg.default_sampler = c->sampler;
    server_cfg.default_hz = c->hz;
    server_cfg.default_buffer_ns = c->buffer_ns;
    server_cfg.max_hz = c->max_hz;
    server_cfg.max_targets = c->max_targets;
    server_cfg.max_targets_per_user = c->max_targets_per_user;
    server_cfg.max_memory = c->max_memory;
    memory_configure(c->max_memory);
    memcpy(server_cfg.allow_groups, c->allow_groups, c->nallow_groups * sizeof(gid_t));
    server_cfg.nallow_groups = c->nallow_groups;
    /* For helpers started from now on, and the next answers awaited. */
    symhelper_configure(NULL, c->symbolizer_memory, c->symbolizer_timeout_ns, c->verbose);
    if (!reloading) {
        server_cfg.socket_gid = group_id(c->socket_group);
        server_cfg.socket_mode = c->socket_mode;
        return;
    }
    sched_set_budget_pct(c->max_cpu);
    txn_set_linger(c->txn_linger_ns);
    server_groups_changed();
    if (!same_str(c->socket, boot.socket) || !same_str(c->socket_group, boot.socket_group) ||
        c->socket_mode != boot.socket_mode)
        log_warn("reload: the socket's path, group and mode change when profd restarts");
    if (c->max_stack_kib != boot.max_stack_kib || c->cputime_source != boot.cputime_source)
        log_warn("reload: max_stack and cputime_source change when profd restarts");
    if (!same_str(c->export_sentry, boot.export_sentry) ||
        !same_str(c->export_pyroscope, boot.export_pyroscope) ||
        !same_str(c->export_otlp, boot.export_otlp) ||
        !same_str(c->export_spool, boot.export_spool) ||
        c->export_interval_ns != boot.export_interval_ns ||
        c->export_timeout_ns != boot.export_timeout_ns ||
        c->export_spool_max != boot.export_spool_max)
        log_warn("reload: the export settings change when profd restarts");
}

/* What became of a notification of the service manager: a lost READY=1 makes a
 * Type=notify start time out, so a failure is said (once: STATUS= goes every second). */
static void notified(int r)
{
    static bool said;
    if (r < 0 && !said) {
        said = true;
        log_warn("cannot notify the service manager ($NOTIFY_SOCKET): %s", strerror(-r));
    }
}

/* STATUS= for the service manager, sent when it changes (at most once a second). */
static void notify_status(void)
{
    static char last[256];
    char now[256];
    if (!notify_wanted())
        return; /* (nobody to tell: the once-a-second status line is not even formatted) */
    unsigned n = 0, attached = 0;
    double rate = 0;
    for (struct target *t = targets_first(); t; t = t->next) {
        n++;
        if (t->state == T_ATTACHED) {
            attached++;
            rate += t->sched->recent_hz;
        }
    }
    snprintf(now, sizeof(now), "%u processes sampled, %.0f ticks/s in all%s", attached, rate,
             n > attached ? " (and exited ones kept)" : "");
    if (strcmp(now, last)) {
        snprintf(last, sizeof(last), "%s", now);
        notified(notify_send("STATUS=%s", now));
    }
}

/* Every ptrace stop and exit of every traced thread arrives here (SIGCHLD via signalfd). */
static void on_sigchld(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)l, (void)w, (void)revents;
    sampler_reap();
    commands_stops_reaped();
}

static void on_terminate(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)revents;
    log_info("signal %d: detaching from every process and exiting", w->signum);
    notified(notify_send("STOPPING=1\nSTATUS=detaching from every process"));
    ev_break(l, EVBREAK_ALL);
}

/* Re-read the configuration: SIGHUP, or a `reload` request (systemctl reload). */
static int reload(char *err, size_t errlen)
{
    notified(notify_send("RELOADING=1\nMONOTONIC_USEC=%llu",
                         (unsigned long long)(now_ns() / 1000)));
    struct profd_config c;
    int r = build_config(&c, err, errlen);
    if (r < 0) {
        log_err("reload refused, the running configuration stays: %s", err);
        config_free(&c);
    } else {
        apply_config(&c, true);
        config_free(&live);
        live = c;
        log_info("configuration reloaded from %s", config_path);
    }
    notified(notify_send("READY=1"));
    return r;
}

static void on_sighup(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)l, (void)w, (void)revents;
    char err[600];
    reload(err, sizeof(err));
}

static void on_housekeeping(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)w, (void)revents;
    targets_housekeeping(now_ns());
    txn_expire(now_ns());
    notify_status();
}

/* After every loop iteration: free targets forgotten during it. */
static void on_collect(struct ev_loop *l, ev_check *w, int revents)
{
    (void)l, (void)w, (void)revents;
    targets_collect();
}

/* Before the loop sleeps, after every callback of the iteration (a check watcher would run
 * before them: libev runs pending watchers last in, first out): the once-a-second chores
 * (housekeeping, the budget) run now if they were due within a third of their period anyway.
 * profd woke for something else (a tick, a read of the rings), and waking the daemon is what
 * costs most on an idle machine (each wake-up of an idle vCPU is a VM exit). */
static void on_prepare(struct ev_loop *l, ev_prepare *w, int revents)
{
    (void)w, (void)revents;
    if (sched_timer_run_early(l, &housekeeping_w, on_housekeeping))
        targets_collect();
    sched_chores_early();
}

/* The command line: settings' flags (config.c's table) kept in flags for build_config and
 * every reload, then profd's own. Returns -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, bool *show)
{
    /* The settings' flags come from config.c's table; then profd's own. */
    size_t nkeys;
    const struct config_key *keys = config_keys(&nkeys);
    enum { O_SHOW_CONFIG = 1000 };
    static struct option *opts; /* static: reachable until exit */
    static char **names;
    opts = xcalloc(nkeys + 5, sizeof(*opts));
    names = xcalloc(nkeys, sizeof(*names));
    char shortopts[64] = "c:Vh";
    size_t no = 0;
    for (size_t i = 0; i < nkeys; i++) {
        names[i] = xstrdup(keys[i].key);
        for (char *p = names[i]; *p; p++)
            if (*p == '_')
                *p = '-';
        bool value = keys[i].type != CFG_BOOL;
        opts[no++] = (struct option){names[i], value ? required_argument : no_argument, NULL,
                                     keys[i].short_flag ? keys[i].short_flag : 0};
        if (keys[i].short_flag) {
            size_t l = strlen(shortopts);
            shortopts[l] = keys[i].short_flag;
            shortopts[l + 1] = value ? ':' : '\0';
            shortopts[l + 2] = '\0';
        }
    }
    opts[no++] = (struct option){"config", required_argument, NULL, 'c'};
    opts[no++] = (struct option){"show-config", no_argument, NULL, O_SHOW_CONFIG};
    opts[no++] = (struct option){"version", no_argument, NULL, 'V'};
    opts[no++] = (struct option){"help", no_argument, NULL, 'h'};
    log_init("profd", LOG_LVL_INFO);
    flags = xcalloc((size_t)argc + 1, sizeof(*flags));
    int c, idx;
    while ((c = getopt_long(argc, argv, shortopts, opts, &idx)) != -1) {
        /* A setting, by its long or short flag: kept for reloads (config_set reads it). */
        const struct config_key *k = NULL;
        if (c == 0)
            k = &keys[idx];
        for (size_t i = 0; !k && c > 0 && c < 128 && i < nkeys; i++)
            if (keys[i].short_flag == c)
                k = &keys[i];
        if (k && k->type == CFG_DSN) {
            /* A DSN's key is a secret: kept here, and hidden from the process list (whose
             * /proc/PID/cmdline every user may read) from now on. */
            free(dsn_flag);
            dsn_flag = xstrdup(optarg);
            memset(optarg, '*', strlen(optarg));
            flags[nflags++] = (struct flag){k->key, dsn_flag};
            continue;
        }
        if (k) {
            flags[nflags++] = (struct flag){k->key, k->type == CFG_BOOL ? "yes" : optarg};
            continue;
        }
        switch (c) {
        case 'c':
            config_path = optarg;
            config_explicit = true;
            break;
        case O_SHOW_CONFIG:
            *show = true;
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
    return -1;
}

/* Each traced thread keeps two /proc descriptors open: allow as many as we may. */
static void raise_nofile_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t soft = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_warn("cannot raise the limit on open files from %llu to %llu: %s",
                     (unsigned long long)soft, (unsigned long long)rl.rlim_max,
                     strerror(errno));
    }
}

/* The loop's own watchers: signals, the second's housekeeping, the collection of
 * forgotten targets and the chores before each wait. */
static void start_watchers(void)
{
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
    ev_prepare_init(&chores_w, on_prepare);
    ev_prepare_start(loop, &chores_w);
}

/* After the loop: every target detached (within 5 s), every module stopped. */
/* What the schedule hears of the targets' lives (sched_target_hooks), and the export: a
 * target that stops sampling has its last window exported. */
static struct target_hooks hooks;

static void target_stopped(struct target *t)
{
    sched_target_hooks.stopped(t);
    export_target_stopped(t);
}

/* The exporters: the spool is the one given, else the unit's StateDirectory's (its first
 * path), else /var/lib/profd's. */
static void start_export(void)
{
    static char *spool;
    const char *state = getenv("STATE_DIRECTORY");
    if (live.export_spool)
        spool = xstrdup(live.export_spool);
    else if (state && *state)
        spool = xasprintf("%.*s/spool", (int)strcspn(state, ":"), state);
    else
        spool = xstrdup("/var/lib/profd/spool");
    /* A core dump of profd would hold the DSN's key: none is written while it holds one
     * (and no unprivileged process may ptrace it or read its memory). */
    if (live.export_sentry && prctl(PR_SET_DUMPABLE, 0) < 0)
        log_warn("prctl(PR_SET_DUMPABLE): %s: a core dump would hold the DSN", strerror(errno));
    struct export_config ec = {
        .sentry_dsn = live.export_sentry, .pyroscope_url = live.export_pyroscope,
        .otlp_url = live.export_otlp, .interval_ns = live.export_interval_ns,
        .timeout_ns = live.export_timeout_ns, .spool_dir = spool,
        .spool_max = live.export_spool_max};
    char why[300] = "";
    if (export_init(loop, &ec, why, sizeof(why)) < 0)
        fatal("%s", why[0] ? why : "cannot set up the exporters");
    free(spool);
    spool = NULL;
}

static void shut_down(void)
{
    /* Every exported process's last window is encoded and spooled first (with the
     * symbolizer still there); what is not sent yet is sent by the next start. */
    export_shutdown(5 * NS_PER_SEC);
    /* Symbols being loaded (a warm-up, a slice) are not waited for: no reply will go. */
    symhelper_abandon();
    commands_shutdown();
    txn_shutdown();
    server_shutdown();
    targets_shutdown(5 * NS_PER_SEC);
    targets_collect();
    ev_check_stop(loop, &collect_w);
    ev_prepare_stop(loop, &chores_w);
    worker_stop();
    modules_shutdown();
    sched_global_finish();
    sampler_finish();
    pyk_shutdown();
    ev_timer_stop(loop, &housekeeping_w);
    ev_signal_stop(loop, &sigchld_w);
    ev_signal_stop(loop, &sigterm_w);
    ev_signal_stop(loop, &sigint_w);
    ev_signal_stop(loop, &sighup_w);
    ev_loop_destroy(loop);
}

int main(int argc, char **argv)
{
    bool show = false;
    int pr = parse_args(argc, argv, &show);
    if (pr >= 0)
        return pr;
    char err[600];
    if (build_config(&live, err, sizeof(err)) < 0)
        fatal("%s", err);
    if (show) {
        struct strbuf sb = {0};
        config_show(&live, &sb);
        fputs(sb.buf ? sb.buf : "", stdout);
        strbuf_finish(&sb);
        return 0;
    }
    apply_config(&live, false);
    config_copy(&boot, &live);
    server_reload = reload;
    /* Before any other thread exists: it changes the environment. */
    char why[300] = "";
    int passed = listen_fd_passed(why, sizeof(why));
    if (passed < -1)
        fatal("socket activation: %s", why);
    server_cfg.max_buffer_ns = 3600 * NS_PER_SEC;
    const char *socket_opt = live.socket;

    /* Static: still reachable when one of the fatal() below exits (LeakSanitizer). */
    static char *path;
    path = profd_socket_path(socket_opt);
    if (!path)
        fatal("out of memory");

    raise_nofile_limit();
    fds_init();
    signal(SIGPIPE, SIG_IGN);

    /* Never the default loop: it installs a SIGCHLD handler that reaps with
     * waitpid(-1, WUNTRACED), which since Linux 4.7 steals ptrace stops of our tracees and
     * leaves them stuck in tracing stop. Signals arrive through a signalfd. */
    loop = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_SIGNALFD | EVFLAG_NOENV);
    if (!loop)
        fatal("cannot create the event loop");
    server_start_ns = now_ns();
    if (sampler_init((size_t)live.max_stack_kib * 1024) < 0)
        fatal("out of memory");
    hooks = sched_target_hooks;
    hooks.stopped = target_stopped;
    targets_init(loop, &hooks);
    pyk_init(loop);
    memory_count_with(targets_memory, server_memory);
    server_init(&(struct server_handlers){.dispatch = commands_dispatch,
                                          .client_gone = txn_client_gone});
    int r = sched_global_init(loop, live.cputime_source, live.max_cpu);
    if (r < 0)
        fatal("cannot set up the sampling schedules: %s", strerror(-r));
    txn_init(loop, live.txn_linger_ns);
    start_export();
    start_watchers();

    r = worker_start(loop);
    if (r < 0)
        fatal("cannot start the worker thread: %s", strerror(-r));
    if (passed >= 0) {
        /* Socket activation: the service manager's socket, wherever it is (an abstract
         * one is shown as @NAME). */
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        socklen_t salen = sizeof(sa);
        if (getsockname(passed, (struct sockaddr *)&sa, &salen) == 0 &&
            sa.sun_family == AF_UNIX && salen > offsetof(struct sockaddr_un, sun_path)) {
            if (!sa.sun_path[0])
                sa.sun_path[0] = '@';
            char name[sizeof(sa.sun_path) + 1];
            size_t n = salen - offsetof(struct sockaddr_un, sun_path);
            memcpy(name, sa.sun_path, n < sizeof(sa.sun_path) ? n : sizeof(sa.sun_path));
            name[n < sizeof(sa.sun_path) ? n : sizeof(sa.sun_path)] = '\0';
            free(path);
            path = xstrdup(name);
        }
        if (server_listen_fd(loop, passed, path) < 0)
            return 1;
    } else if (server_listen(loop, path) < 0) {
        return 1;
    }
    server_cfg.socket_path = path;
    log_info("profd %s listening on %s%s", PROFD_VERSION, path,
             passed >= 0 ? " (passed by the service manager)" : "");
    notified(notify_send("READY=1\nSTATUS=listening on %s, no process sampled yet", path));

    ev_run(loop, 0);

    shut_down();
    free(path);
    config_free(&live);
    config_free(&boot);
    free(flags);
    free(dsn_flag);
    log_info("exiting");
    return exit_code;
}
