/* syscalls.c: the system-call tables of the EINTR repairs: which calls may be restarted,
 * their timeouts, the repair of their registers; signal dispositions. */
#include "syscalls.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

bool sig_is_ignored(uint64_t ign, uint64_t cgt, int sig)
{
    if (sig <= 0 || sig > 64)
        return false;
    uint64_t bit = 1ull << (sig - 1);
    if (ign & bit)
        return true;
    if (cgt & bit)
        return false;
    return sig == SIGCHLD || sig == SIGCONT || sig == SIGURG || sig == SIGWINCH;
}

bool sysc_restartable(long nr)
{
    switch (nr) {
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
    case SYS_epoll_pwait2:
#else
    case 441:
#endif
    case SYS_read:
    case SYS_write:
    case SYS_readv:
    case SYS_writev:
    case SYS_accept:
    case SYS_accept4:
    case SYS_recvfrom:
    case SYS_recvmsg:
    case SYS_sendto:
    case SYS_sendmsg:
    case SYS_rt_sigtimedwait:
        return true;
    default:
        return false;
    }
}

/* Read a struct timespec from the target; -1 if unreadable or negative. */
static int64_t remote_timespec_ns(pid_t tid, uint64_t addr)
{
    struct timespec ts;
    struct iovec l = {&ts, sizeof(ts)}, r = {(void *)(uintptr_t)addr, sizeof(ts)};
    if (!addr || process_vm_readv(tid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(ts) || ts.tv_sec < 0 ||
        ts.tv_nsec < 0 || ts.tv_sec > 1000000000)
        return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t sysc_timeout_ns(pid_t tid, int pidfd, const struct user_regs_struct *regs, int epoll_ms)
{
    long nr = (long)regs->orig_rax;
    int opt;
    switch (nr) {
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
        return epoll_ms < 0 ? -1 : (int64_t)epoll_ms * 1000000;
    case 441: /* epoll_pwait2 */
        return remote_timespec_ns(tid, regs->r10);
    case SYS_rt_sigtimedwait:
        return remote_timespec_ns(tid, regs->rdx);
    case SYS_read:
    case SYS_readv:
    case SYS_accept:
    case SYS_accept4:
    case SYS_recvfrom:
    case SYS_recvmsg:
        opt = SO_RCVTIMEO;
        break;
    default:
        opt = SO_SNDTIMEO;
        break;
    }
    if (pidfd < 0)
        return -1;
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)regs->rdi, 0);
    if (fd < 0)
        return -1;
    struct timeval tv;
    socklen_t len = sizeof(tv);
    int64_t t = -1;
    if (getsockopt(fd, SOL_SOCKET, opt, &tv, &len) == 0 && (tv.tv_sec || tv.tv_usec))
        t = (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
    close(fd);
    return t;
}

bool sysc_repair_ignored(struct user_regs_struct *regs, uint64_t waited_ns, int64_t timeout_ns)
{
    long nr = (long)regs->orig_rax;
    if ((long)regs->rax != -EINTR || !sysc_restartable(nr))
        return false;
    bool epoll = nr == SYS_epoll_wait || nr == SYS_epoll_pwait || nr == 441;
    if (timeout_ns >= 0 && waited_ns >= (uint64_t)timeout_ns) {
        regs->rax = epoll ? 0 : (uint64_t)-EAGAIN; /* what its timeout returns */
        return true;
    }
    if (timeout_ns >= 0 && (nr == SYS_epoll_wait || nr == SYS_epoll_pwait)) {
        uint64_t left = (uint64_t)timeout_ns - waited_ns;
        regs->r10 = (left + 999999) / 1000000;
    }
    regs->rax = (uint64_t)-KERNEL_ERESTARTNOHAND;
    return true;
}

bool sysc_repair_eintr(pid_t tid, struct user_regs_struct *regs, uint64_t elapsed_ns)
{
    long nr = (long)regs->orig_rax;
    if ((long)regs->rax != -EINTR || !sysc_restartable(nr))
        return false;
    if (nr == SYS_epoll_wait || nr == SYS_epoll_pwait) {
        /* int timeout in ms, 4th argument (r10). Lower it by the whole milliseconds already
         * waited: never early; at most 1 ms late. */
        int timeout = (int)regs->r10;
        uint64_t ms = elapsed_ns / 1000000ull;
        if (timeout > 0 && ms > 0) {
            if ((uint64_t)timeout <= ms) {
                regs->rax = 0; /* timed out: no events */
                return true;
            }
            regs->r10 = (uint64_t)(unsigned)(timeout - (int)ms);
        }
    } else if (nr == 441 && regs->r10 && elapsed_ns) {
        /* epoll_pwait2: const struct timespec *timeout. It is the program's memory, so it
         * is not rewritten: if it has expired, return 0; otherwise restart it whole. */
        struct timespec ts;
        struct iovec l = {&ts, sizeof(ts)}, r = {(void *)(uintptr_t)regs->r10, sizeof(ts)};
        if (process_vm_readv(tid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(ts) && ts.tv_sec >= 0) {
            uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
            if (t <= elapsed_ns) {
                regs->rax = 0;
                return true;
            }
        }
    }
    regs->rax = (uint64_t)-KERNEL_ERESTARTNOHAND;
    return true;
}
