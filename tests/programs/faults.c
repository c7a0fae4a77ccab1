/* faults.c: preloaded into profd (LD_PRELOAD) by tests/integration/test_faults.py, makes
 * chosen system calls fail so that the daemon's handling of each failure can be seen.
 * PROFD_FAULTS is a comma-separated list of:
 *   maps             open() of /proc/N/maps (or task/N/maps) fails with EACCES
 *   chmod            chmod() fails with EPERM
 *   timerfd_settime  timerfd_settime() that arms a timer fails with EINVAL
 *   signalfd         signalfd() of a mask holding SIGRTMIN+1 (profd's CPU-clock timers'
 *                    signal; libev's own signalfd is left alone) fails with EMFILE
 *   perf             perf_event_open() fails with EACCES (as under perf_event_paranoid 3,
 *                    or a seccomp filter without it)
 *   perf_kernel      perf_event_open() of an event that does not exclude the kernel fails
 *                    with EACCES (as under perf_event_paranoid 2 without CAP_PERFMON)
 *   perf_mmap        mmap() of a perf event's ring fails with EPERM (as past the
 *                    locked-memory limits)
 * With PROFD_FAULTS_WHILE=PATH, the faults apply only while PATH exists.
 *
 * PROFD_CHAOS=ACTION:POINT:N (tests/integration/test_chaos.py) kills (ACTION "kill": SIGKILL)
 * or stops (ACTION "stop": SIGSTOP, until the test sends SIGCONT) the daemon at the N-th
 * time it reaches POINT, just before the call, so that a fault lands exactly there:
 *   resume_sig  PTRACE_CONT or PTRACE_DETACH passing a signal: a signal the daemon has
 *               collected from a signal-delivery-stop and is about to re-inject
 *   getregs     PTRACE_GETREGS: a thread is held in a ptrace stop (mid-stop)
 *   setregs     PTRACE_SETREGS: an interrupted call being repaired
 *   vm_readv    process_vm_readv: a stack being copied (mid-copy)
 *   interrupt   PTRACE_INTERRUPT: threads being stopped for a sample or a detach
 *   detach      PTRACE_DETACH: threads being released one by one (mid-detach)
 *   seize       PTRACE_SEIZE: threads being attached one by one (mid-attach)
 *   worker      sendmsg from a thread other than the main one: the slice worker asking
 *               its symbolizer (mid-slice)
 * Only in profd itself (not in a program it starts). */
#undef _FILE_OFFSET_BITS /* open and open64 both defined below, each as itself */
#include <dlfcn.h>
#include <linux/perf_event.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

static bool active(const char *what)
{
    const char *list = getenv("PROFD_FAULTS");
    size_t n = strlen(what);
    bool found = false;
    for (const char *p = list; p && !found && (p = strstr(p, what)); p += n)
        found = (p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0');
    const char *w = getenv("PROFD_FAULTS_WHILE");
    return found && (!w || access(w, F_OK) == 0);
}

static bool is_maps(const char *path)
{
    size_t n = strlen(path);
    return !strncmp(path, "/proc/", 6) && n > 11 && !strcmp(path + n - 5, "/maps");
}

static mode_t mode_arg(int flags, va_list ap)
{
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
        return (mode_t)va_arg(ap, int);
    return 0;
}

int open(const char *path, int flags, ...)
{
    static int (*real)(const char *, int, ...);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (is_maps(path) && active("maps")) {
        errno = EACCES;
        return -1;
    }
    if (!real)
        real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    return real(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    static int (*real)(const char *, int, ...);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (is_maps(path) && active("maps")) {
        errno = EACCES;
        return -1;
    }
    if (!real)
        real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open64");
    return real(path, flags, mode);
}

int chmod(const char *path, mode_t mode)
{
    static int (*real)(const char *, mode_t);
    if (active("chmod")) {
        errno = EPERM;
        return -1;
    }
    if (!real)
        real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "chmod");
    return real(path, mode);
}

int timerfd_settime(int fd, int flags, const struct itimerspec *v, struct itimerspec *old)
{
    static int (*real)(int, int, const struct itimerspec *, struct itimerspec *);
    if (v && (v->it_value.tv_sec || v->it_value.tv_nsec) && active("timerfd_settime")) {
        errno = EINVAL;
        return -1;
    }
    if (!real)
        real = (int (*)(int, int, const struct itimerspec *, struct itimerspec *))dlsym(
            RTLD_NEXT, "timerfd_settime");
    return real(fd, flags, v, old);
}

int signalfd(int fd, const sigset_t *mask, int flags)
{
    static int (*real)(int, const sigset_t *, int);
    if (sigismember(mask, SIGRTMIN + 1) == 1 && active("signalfd")) {
        errno = EMFILE;
        return -1;
    }
    if (!real)
        real = (int (*)(int, const sigset_t *, int))dlsym(RTLD_NEXT, "signalfd");
    return real(fd, mask, flags);
}

/* ---- PROFD_CHAOS ---- */

enum chaos_point { CP_NONE, CP_RESUME_SIG, CP_GETREGS, CP_SETREGS, CP_VM_READV, CP_INTERRUPT,
                   CP_DETACH, CP_SEIZE, CP_WORKER };
static const char *const chaos_names[] = {"", "resume_sig", "getregs", "setregs", "vm_readv",
                                          "interrupt", "detach", "seize", "worker"};
static atomic_int chaos_state; /* 0: not parsed, 1: armed, 2: off or fired */
static enum chaos_point chaos_at;
static int chaos_sig;
static long chaos_n;
static atomic_long chaos_count;

static void chaos_parse(void)
{
    const char *v = getenv("PROFD_CHAOS");
    extern char *program_invocation_short_name;
    int state = 2;
    char action[16], point[16];
    long n;
    if (v && strcmp(program_invocation_short_name, "profd") == 0 &&
        sscanf(v, "%15[a-z]:%15[a-z_]:%ld", action, point, &n) == 3 && n > 0) {
        for (size_t i = 1; i < sizeof(chaos_names) / sizeof(*chaos_names); i++)
            if (!strcmp(point, chaos_names[i]))
                chaos_at = (enum chaos_point)i;
        chaos_sig = !strcmp(action, "kill") ? SIGKILL : !strcmp(action, "stop") ? SIGSTOP : 0;
        chaos_n = n;
        if (chaos_at != CP_NONE && chaos_sig)
            state = 1;
    }
    int expected = 0;
    atomic_compare_exchange_strong(&chaos_state, &expected, state);
}

/* At point p: the fault, if this is its N-th time. */
static void chaos(enum chaos_point p)
{
    if (atomic_load(&chaos_state) == 0)
        chaos_parse();
    if (atomic_load(&chaos_state) != 1 || p != chaos_at)
        return;
    if (atomic_fetch_add(&chaos_count, 1) + 1 != chaos_n)
        return;
    atomic_store(&chaos_state, 2);
    kill(getpid(), chaos_sig);
}

long ptrace(enum __ptrace_request req, ...)
{
    static long (*real)(enum __ptrace_request, ...);
    va_list ap;
    va_start(ap, req);
    pid_t pid = va_arg(ap, pid_t);
    void *addr = va_arg(ap, void *);
    void *data = va_arg(ap, void *);
    va_end(ap);
    switch ((int)req) {
    case PTRACE_CONT:
        if (data)
            chaos(CP_RESUME_SIG);
        break;
    case PTRACE_DETACH:
        chaos(data ? CP_RESUME_SIG : CP_DETACH);
        break;
    case PTRACE_GETREGS:
        chaos(CP_GETREGS);
        break;
    case PTRACE_SETREGS:
        chaos(CP_SETREGS);
        break;
    case PTRACE_INTERRUPT:
        chaos(CP_INTERRUPT);
        break;
    case PTRACE_SEIZE:
        chaos(CP_SEIZE);
        break;
    }
    if (!real)
        real = (long (*)(enum __ptrace_request, ...))dlsym(RTLD_NEXT, "ptrace");
    return real(req, pid, addr, data);
}

ssize_t process_vm_readv(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                         const struct iovec *remote, unsigned long riovcnt, unsigned long flags)
{
    static ssize_t (*real)(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                           unsigned long, unsigned long);
    chaos(CP_VM_READV);
    if (!real)
        real = (ssize_t(*)(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                           unsigned long, unsigned long))dlsym(RTLD_NEXT, "process_vm_readv");
    return real(pid, local, liovcnt, remote, riovcnt, flags);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (syscall(SYS_gettid) != getpid())
        chaos(CP_WORKER);
    if (!real)
        real = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    return real(fd, msg, flags);
}

/* syscall(): perf_event_open has no libc wrapper; profd calls it through syscall(). */
long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_perf_event_open &&
        (active("perf") ||
         (active("perf_kernel") && !((const struct perf_event_attr *)a[0])->exclude_kernel))) {
        errno = EACCES;
        return -1;
    }
    static long (*real)(long, ...);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static bool is_perf_fd(int fd)
{
    char path[64], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    return strcmp(target, "anon_inode:[perf_event]") == 0;
}

/* A perf event's ring mapped while perf_mmap is active: refused. */
static bool refuse_perf_ring(int flags, int fd)
{
    return fd >= 0 && (flags & MAP_SHARED) && active("perf_mmap") && is_perf_fd(fd);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (refuse_perf_ring(flags, fd)) {
        errno = EPERM;
        return MAP_FAILED;
    }
    static void *(*real)(void *, size_t, int, int, int, off_t);
    if (!real)
        real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    return real(addr, len, prot, flags, fd, off);
}

/* profd is built with 64-bit file offsets: its mmap is mmap64. */
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    if (refuse_perf_ring(flags, fd)) {
        errno = EPERM;
        return MAP_FAILED;
    }
    static void *(*real)(void *, size_t, int, int, int, off64_t);
    if (!real)
        real = (void *(*)(void *, size_t, int, int, int, off64_t))dlsym(RTLD_NEXT, "mmap64");
    return real(addr, len, prot, flags, fd, off);
}
