/* faults.c: preloaded into profd (LD_PRELOAD) by tests/integration/test_faults.py, makes
 * chosen system calls fail so that the daemon's handling of each failure can be seen.
 * PROFD_FAULTS is a comma-separated list of:
 *   maps             open() of /proc/N/maps (or task/N/maps) fails with EACCES
 *   chmod            chmod() fails with EPERM
 *   timerfd_settime  timerfd_settime() that arms a timer fails with EINVAL
 *   signalfd         signalfd() of a mask holding SIGRTMIN+1 (profd's CPU-clock timers'
 *                    signal; libev's own signalfd is left alone) fails with EMFILE
 * With PROFD_FAULTS_WHILE=PATH, the faults apply only while PATH exists. */
#undef _FILE_OFFSET_BITS /* open and open64 both defined below, each as itself */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include <sys/signalfd.h>
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
