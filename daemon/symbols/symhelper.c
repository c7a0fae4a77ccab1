/* symhelper.c: start, supervise and restart profd-symbolizer processes (see symhelper.h). */
#include "symhelper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#ifndef PROFD_SYMBOLIZER
#define PROFD_SYMBOLIZER "/usr/libexec/profd-symbolizer"
#endif
#define HELPER_NAME "profd-symbolizer"
#define MAX_HELPERS 8
/* How long a new helper may take to say it is ready. */
#define HELLO_TIMEOUT_MS 5000
/* A helper that fails this many times in a row is left to rest before the next start, for a
 * time that doubles with each further failure, up to MAX_REST_NS. */
#define FAILS_BEFORE_REST 3
#define MAX_REST_NS (60 * NS_PER_SEC)
/* CPU seconds a helper may use in its life (RLIMIT_CPU): a bound on one stuck in a loop
 * while no request waits on it. It is restarted after. */
#define HELPER_CPU_S 3600

struct symhelper {
    char role[16];
    uint64_t max_wait_ns; /* 0: the configured symbolizer_timeout */
    int sock;
    pid_t pid;
    uint64_t gen;
    int fails_in_row;
    uint64_t rest_until_ns;
    /* Exit status noted by the reaper (another thread), and whether there is one. */
    int reaped_status;
    bool reaped;
    int last_status; /* how the last one that failed ended (wait status; 0 if unknown) */
    char error[512];
    struct symhelper_stats st;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* profd is exiting: requests in flight end now, no helper is started again. */
static bool abandoned;
static struct symhelper *all[MAX_HELPERS];
static char *cfg_path;
static uint64_t cfg_memory = 4ull << 30;
static uint64_t cfg_timeout_ns = 30 * NS_PER_SEC;
static bool cfg_verbose;

void symhelper_configure(const char *path, uint64_t max_memory, uint64_t timeout_ns, bool verbose)
{
    pthread_mutex_lock(&lock);
    free(cfg_path);
    cfg_path = path ? xstrdup(path) : NULL;
    cfg_memory = max_memory;
    if (timeout_ns)
        cfg_timeout_ns = timeout_ns;
    cfg_verbose = verbose;
    pthread_mutex_unlock(&lock);
}

/* The helper program: the configured one; else $PROFD_SYMBOLIZER (tests run from the build
 * tree); else profd-symbolizer next to our own executable (the build tree); else the
 * installed one. */
const char *symhelper_path(void)
{
    static char found[PATH_MAX];
    if (cfg_path)
        return cfg_path;
    const char *e = getenv("PROFD_SYMBOLIZER");
    if (e && *e)
        return e;
    if (!found[0]) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
            self[n] = '\0';
            char *slash = strrchr(self, '/');
            if (slash && (size_t)(slash - self) + sizeof("/" HELPER_NAME) < sizeof(found)) {
                memcpy(found, self, (size_t)(slash - self) + 1);
                memcpy(found + (slash - self) + 1, HELPER_NAME, sizeof(HELPER_NAME));
                if (access(found, X_OK) != 0)
                    found[0] = '\0';
            }
        }
        if (!found[0])
            snprintf(found, sizeof(found), "%s", PROFD_SYMBOLIZER);
    }
    return found;
}

void symhelper_set_max_wait(struct symhelper *h, uint64_t ns)
{
    h->max_wait_ns = ns;
}

struct symhelper *symhelper_create(const char *role)
{
    struct symhelper *h = xcalloc(1, sizeof(*h));
    snprintf(h->role, sizeof(h->role), "%s", role);
    snprintf(h->st.role, sizeof(h->st.role), "%s", role);
    h->sock = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HELPERS; i++)
        if (!all[i]) {
            all[i] = h;
            break;
        }
    pthread_mutex_unlock(&lock);
    return h;
}

bool symhelper_reaped(pid_t pid, int status)
{
    bool ours = false;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HELPERS; i++) {
        struct symhelper *h = all[i];
        if (h && h->pid == pid) {
            __atomic_store_n(&h->reaped_status, status, __ATOMIC_RELAXED);
            __atomic_store_n(&h->reaped, true, __ATOMIC_RELEASE);
            ours = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return ours;
}

/* Describe an exit status: "crashed (SIGSEGV)", "exited with status 1". */
static void describe_status(int status, char *buf, size_t len)
{
    if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)%s", WTERMSIG(status),
                 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?",
                 WTERMSIG(status) == SIGSYS ? ": a system call outside its seccomp filter"
                 : WTERMSIG(status) == SIGXCPU ? ": its CPU time limit" : "");
    else if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "ended (status %#x)", status);
}

/* Wait for the helper process to be gone, and describe how it ended. It has been killed,
 * or its socket closed: it exits at once. Whoever owns waitpid(-1) (the loop thread) may
 * reap it first; its status then comes through symhelper_reaped. */
static void reap(struct symhelper *h, char *how, size_t len, int *out)
{
    int status = 0;
    bool known = false;
    for (int tries = 0; tries < 200; tries++) {
        pid_t r = waitpid(h->pid, &status, __WALL | WNOHANG);
        if (r == h->pid) {
            known = true;
            break;
        }
        if (r < 0 && errno == ECHILD) {
            if (__atomic_load_n(&h->reaped, __ATOMIC_ACQUIRE)) {
                status = __atomic_load_n(&h->reaped_status, __ATOMIC_RELAXED);
                known = true;
                break;
            }
        } else if (r < 0 && errno != EINTR) {
            break;
        }
        usleep(1000);
    }
    if (out)
        *out = known ? status : 0;
    if (how) {
        if (known)
            describe_status(status, how, len);
        else
            snprintf(how, len, "ended");
    }
    pthread_mutex_lock(&lock);
    h->pid = 0;
    h->st.pid = 0;
    pthread_mutex_unlock(&lock);
}

/* Kill the helper and remember why. It may be dead already (crashed: its status says how)
 * or alive (hung, or sending nonsense: killed here). */
static void fail(struct symhelper *h, const char *why)
{
    if (h->pid <= 0)
        return;
    char how[96] = "";
    kill(h->pid, SIGKILL);
    close(h->sock);
    h->sock = -1;
    int status = 0;
    reap(h, how, sizeof(how), &status);
    h->last_status = status;
    bool ours = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    snprintf(h->error, sizeof(h->error), "the symbolizer (%s) %s%s%s", h->role, why,
             ours || !how[0] ? "" : ": it ", ours ? "" : how);
    if (__atomic_load_n(&abandoned, __ATOMIC_ACQUIRE))
        log_info("%s", h->error);
    else
        log_warn("%s; it will be restarted", h->error);
    h->st.failures++;
    snprintf(h->st.last_error, sizeof(h->st.last_error), "%.300s", h->error);
    if (++h->fails_in_row >= FAILS_BEFORE_REST) {
        int k = h->fails_in_row - FAILS_BEFORE_REST;
        uint64_t rest = k > 9 ? MAX_REST_NS : (100 * NS_PER_MS) << k;
        h->rest_until_ns = now_ns() + (rest > MAX_REST_NS ? MAX_REST_NS : rest);
    }
}

void symhelper_fail(struct symhelper *h, const char *fmt, ...)
{
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    fail(h, why);
}

/* Environment of the helper: nothing but what logging and sanitizers read. */
static char **helper_env(void)
{
    static const char *const keep[] = {"JOURNAL_STREAM", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                                       "LSAN_OPTIONS"};
    char **env = xcalloc(ARRAY_SIZE(keep) + 1, sizeof(*env));
    size_t n = 0;
    for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
        const char *v = getenv(keep[i]);
        /* LeakSanitizer stops the world with ptrace and reads /proc at exit, and a report's
         * symbolization starts llvm-symbolizer: nothing the helper's seccomp filter allows.
         * Its code is leak-checked in-process by the unit tests (tests/unit/symb). */
        if (v && !strcmp(keep[i], "ASAN_OPTIONS"))
            env[n++] = xasprintf("%s=%s:detect_leaks=0:symbolize=0", keep[i], v);
        else if (v)
            env[n++] = xasprintf("%s=%s", keep[i], v);
    }
    return env;
}

static void free_strv(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

/* Start a helper process and wait for its hello. */
static int start(struct symhelper *h)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = errno;
        snprintf(h->error, sizeof(h->error), "cannot start the symbolizer: socketpair: %s",
                 strerror(e));
        return -e;
    }
    pthread_mutex_lock(&lock);
    const char *path = symhelper_path();
    char *argv[] = {
        xstrdup(path), xstrdup("--role"), xstrdup(h->role), xstrdup("--memory"),
        xasprintf("%llu", (unsigned long long)cfg_memory), xstrdup("--cpu"),
        xasprintf("%d", HELPER_CPU_S), cfg_verbose ? xstrdup("-v") : NULL, NULL,
    };
    pthread_mutex_unlock(&lock);
    char **env = helper_env();
    /* Everything the child needs is ready: between fork and exec it may call only
     * async-signal-safe functions (we have other threads). */
    pid_t pid = fork();
    if (pid == 0) {
        /* A signal mask and ignored signals survive execve: the worker thread blocks every
         * signal, and profd ignores SIGPIPE. The helper starts with neither. */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaction(sig, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, NULL); /* not sigprocmask: unwind.c answers that one */
        setpgid(0, 0); /* not in the terminal's process group: Ctrl-C is for profd */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (sv[1] == 3)
            fcntl(3, F_SETFD, 0);
        else if (dup2(sv[1], 3) < 0)
            _exit(127);
        execve(argv[0], argv, env);
        _exit(127);
    }
    int e = errno;
    close(sv[1]);
    free_strv(env);
    for (size_t i = 0; i < ARRAY_SIZE(argv); i++)
        free(argv[i]);
    if (pid < 0) {
        close(sv[0]);
        snprintf(h->error, sizeof(h->error), "cannot start the symbolizer: fork: %s",
                 strerror(e));
        return -e;
    }
    pthread_mutex_lock(&lock);
    h->sock = sv[0];
    h->pid = pid;
    h->reaped = false;
    h->st.pid = pid;
    h->st.starts++;
    pthread_mutex_unlock(&lock);

    int fd = -1;
    uint8_t *big = xmalloc(SYMP_MAX_MSG);
    ssize_t n = symp_recv(h->sock, big, &fd, HELLO_TIMEOUT_MS);
    if (fd >= 0)
        close(fd);
    struct symp_r r;
    symp_r_init(&r, big, n > 0 ? (size_t)n : 0);
    uint32_t type = symp_get_u32(&r), version = symp_get_u32(&r);
    bool done = symp_r_done(&r);
    free(big);
    if (n <= 0 || type != SYMP_HELLO || version != SYMP_VERSION || !done) {
        char why[128];
        if (n == -ETIMEDOUT)
            snprintf(why, sizeof(why), "did not start within %d ms", HELLO_TIMEOUT_MS);
        else if (n <= 0)
            snprintf(why, sizeof(why), "closed its socket at start (%s)", path);
        else
            snprintf(why, sizeof(why), "is not the version profd speaks (%s)", path);
        fail(h, why);
        if (WIFEXITED(h->last_status) && WEXITSTATUS(h->last_status) == 127) {
            /* Not there, or not executable: nothing a restart changes. Rest at once, and
             * say what to fix. */
            snprintf(h->error, sizeof(h->error), "cannot run the symbolizer %s: %s", path,
                     access(path, X_OK) < 0 ? strerror(errno) : "exec failed");
            log_err("%s; frames stay unsymbolized", h->error);
            pthread_mutex_lock(&lock);
            snprintf(h->st.last_error, sizeof(h->st.last_error), "%.300s", h->error);
            pthread_mutex_unlock(&lock);
            h->fails_in_row = FAILS_BEFORE_REST;
            h->rest_until_ns = now_ns() + MAX_REST_NS;
            return -ENOENT;
        }
        return -ECHILD;
    }
    h->gen++;
    log_debug("symbolizer (%s) started: pid %d", h->role, (int)pid);
    return 0;
}

void symhelper_abandon(void)
{
    __atomic_store_n(&abandoned, true, __ATOMIC_RELEASE);
}

int symhelper_ensure(struct symhelper *h)
{
    h->error[0] = '\0';
    if (__atomic_load_n(&abandoned, __ATOMIC_ACQUIRE)) {
        snprintf(h->error, sizeof(h->error), "profd is exiting");
        return -ECANCELED;
    }
    /* A helper that died while idle (killed, or its CPU limit) cost no request: notice it
     * now (its end of the socket is closed, or it sent something unasked) and start another,
     * so that the caller knows before it writes a request whether the helper it talks to
     * holds what it sent the last one. */
    if (h->pid > 0) {
        struct pollfd p = {.fd = h->sock, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) {
            fail(h, "ended while idle");
            h->fails_in_row = 0; /* costs nothing: no reason to rest */
            h->rest_until_ns = 0;
        }
    }
    if (h->pid <= 0) {
        uint64_t now = now_ns();
        if (now < h->rest_until_ns) {
            snprintf(h->error, sizeof(h->error),
                     "the symbolizer (%s) failed %d times in a row and is resting for %.1f s: "
                     "%.300s", h->role, h->fails_in_row,
                     (double)(h->rest_until_ns - now) / 1e9, h->st.last_error);
            return -EAGAIN;
        }
        int r = start(h);
        if (r < 0)
            return r;
    }
    return 0;
}

int symhelper_send(struct symhelper *h, const struct symp_w *w, int fd)
{
    int r = symhelper_ensure(h);
    if (r < 0)
        return r;
    h->st.requests++;
    r = symp_send(h->sock, w, fd);
    if (r < 0) {
        char why[96];
        snprintf(why, sizeof(why), "closed its socket (%s)", strerror(-r));
        fail(h, why);
    }
    return r;
}

ssize_t symhelper_recv(struct symhelper *h, void *buf, int *fd)
{
    *fd = -1;
    if (h->pid <= 0 || h->sock < 0)
        return -ECHILD;
    uint64_t wait = h->max_wait_ns && h->max_wait_ns < cfg_timeout_ns ? h->max_wait_ns
                                                                       : cfg_timeout_ns;
    /* In slices of at most 100 ms, so that profd's exit does not wait for an answer. */
    uint64_t deadline = now_ns() + wait;
    ssize_t n;
    __atomic_store_n(&h->st.waiting, true, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t now = now_ns(), left = deadline > now ? deadline - now : 0;
        int slice_ms = left > 100 * NS_PER_MS ? 100 : (int)(left / NS_PER_MS);
        n = symp_recv(h->sock, buf, fd, slice_ms);
        if (n != -ETIMEDOUT || !left)
            break;
        if (__atomic_load_n(&abandoned, __ATOMIC_ACQUIRE)) {
            n = -ECANCELED;
            break;
        }
    }
    __atomic_store_n(&h->st.waiting, false, __ATOMIC_RELAXED);
    if (n > 0)
        return n;
    char why[96];
    if (n == -ECANCELED)
        snprintf(why, sizeof(why), "was stopped: profd is exiting");
    else if (n == -ETIMEDOUT)
        snprintf(why, sizeof(why), "did not answer within %.1f s and was killed",
                 (double)wait / 1e9);
    else if (n == 0)
        snprintf(why, sizeof(why), "closed its socket");
    else
        snprintf(why, sizeof(why), "sent what profd cannot read (%s)", strerror((int)-n));
    fail(h, why);
    return n == 0 ? -ECONNRESET : n;
}

uint64_t symhelper_generation(const struct symhelper *h)
{
    return h->gen;
}

const char *symhelper_error(const struct symhelper *h)
{
    return h->error;
}

void symhelper_ok(struct symhelper *h)
{
    h->fails_in_row = 0;
    h->rest_until_ns = 0;
}

void symhelper_get_stats(struct symhelper *h, struct symhelper_stats *st)
{
    pthread_mutex_lock(&lock);
    *st = h->st;
    pthread_mutex_unlock(&lock);
}

size_t symhelper_list(struct symhelper_stats *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HELPERS; i++)
        if (all[i]) {
            if (n < max)
                out[n] = all[i]->st;
            n++;
        }
    pthread_mutex_unlock(&lock);
    return n;
}

pid_t symhelper_pid(struct symhelper *h)
{
    pthread_mutex_lock(&lock);
    pid_t p = h->pid;
    pthread_mutex_unlock(&lock);
    return p;
}

void symhelper_destroy(struct symhelper *h)
{
    if (!h)
        return;
    if (h->pid > 0) {
        /* Closing the socket ends it; SIGKILL in case it is stuck. */
        close(h->sock);
        h->sock = -1;
        kill(h->pid, SIGKILL);
        reap(h, NULL, 0, NULL);
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HELPERS; i++)
        if (all[i] == h)
            all[i] = NULL;
    pthread_mutex_unlock(&lock);
    free(h);
}
