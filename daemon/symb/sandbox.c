/* sandbox.c: privileges, limits and the seccomp filter of profd-symbolizer (see sandbox.h). */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "log.h"

#define NOBODY 65534

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

int sandbox_sanitized(void)
{
    return SANITIZED;
}

/* Close every descriptor above 2 but keep. */
static int close_others(int keep)
{
    for (int fd = 3; fd < keep; fd++)
        close(fd);
    if (syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0) == 0)
        return 0;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    for (rlim_t fd = (rlim_t)keep + 1; fd < rl.rlim_cur && fd < (1u << 20); fd++)
        close((int)fd);
    return 0;
}

/* Effective, permitted and inheritable sets empty (ambient and bounding are emptied
 * first, in sandbox_enter), and checked. */
static int drop_caps(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capset, &h, d) < 0)
        return -errno;
    if (syscall(SYS_capget, &h, d) < 0)
        return -errno;
    for (int i = 0; i < 2; i++)
        if (d[i].effective || d[i].permitted || d[i].inheritable)
            return -EPERM;
    return 0;
}

/* As root: become nobody. As anyone else: stay (there is no one lesser to become without
 * privileges; the empty capability sets and the filter are what confine the helper). */
static int drop_ids(void)
{
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) < 0)
        return -errno;
    if (r && e && s)
        return 0;
    if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
        setresuid(NOBODY, NOBODY, NOBODY) < 0)
        return -errno;
    gid_t gr, ge, gs;
    if (getresuid(&r, &e, &s) < 0 || getresgid(&gr, &ge, &gs) < 0)
        return -errno;
    if (r != NOBODY || e != NOBODY || s != NOBODY || gr != NOBODY || ge != NOBODY || gs != NOBODY)
        return -EPERM;
    return 0;
}

/* Limit res to v, or to the hard limit inherited if that is lower already: without
 * privileges (dropped by now) a hard limit can only go down, and asking for more fails with
 * EPERM (the helper never started under a profd whose RLIMIT_NOFILE was below 4096). */
static int set_limit(int res, uint64_t v)
{
    struct rlimit rl;
    if (getrlimit(res, &rl) < 0)
        return -errno;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < v)
        v = rl.rlim_max;
    rl.rlim_cur = rl.rlim_max = v;
    return setrlimit(res, &rl) < 0 ? -errno : 0;
}

/* ---- the seccomp filter ---- */

#define ARCH_NR AUDIT_ARCH_X86_64
#define LOAD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define NR_OFF offsetof(struct seccomp_data, nr)
#define ARG_LO(n) (offsetof(struct seccomp_data, args) + 8 * (n))
#define ALLOW_NR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), RET(SECCOMP_RET_ALLOW)
#define DENY_NR(nr)                                                                              \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), RET(SECCOMP_RET_ERRNO | EACCES)

/* mmap and mprotect: allowed unless they ask for executable memory (W^X: nothing the helper
 * reads is ever run). */
#define ALLOW_NO_EXEC(nr)                                                                        \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4), LOAD(ARG_LO(2)),                           \
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),                                   \
        RET(SECCOMP_RET_ERRNO | EACCES), RET(SECCOMP_RET_ALLOW)

static int install_filter(pid_t self)
{
    struct sock_filter f[] = {
        LOAD(offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH_NR, 1, 0),
        RET(SECCOMP_RET_KILL_PROCESS),
        LOAD(NR_OFF),
        /* x32 system calls share the architecture: refuse them all. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
        RET(SECCOMP_RET_KILL_PROCESS),
        ALLOW_NR(__NR_read),
        ALLOW_NR(__NR_pread64),
        ALLOW_NR(__NR_write),
        ALLOW_NR(__NR_writev),
        ALLOW_NR(__NR_close),
        ALLOW_NR(__NR_fstat),
        ALLOW_NR(__NR_lseek),
        ALLOW_NR(__NR_recvmsg),
        ALLOW_NR(__NR_sendmsg),
        ALLOW_NR(__NR_munmap),
        ALLOW_NR(__NR_mremap),
        ALLOW_NR(__NR_brk),
        ALLOW_NR(__NR_madvise),
        ALLOW_NR(__NR_futex),
        ALLOW_NR(__NR_getpid),
        ALLOW_NR(__NR_gettid),
        ALLOW_NR(__NR_clock_gettime),
        ALLOW_NR(__NR_gettimeofday),
        ALLOW_NR(__NR_getrandom),
        ALLOW_NR(__NR_rt_sigreturn),
        ALLOW_NR(__NR_rt_sigprocmask),
        /* Its own signal handling only (abort(), and a sanitizer's handlers at exit). */
        ALLOW_NR(__NR_rt_sigaction),
        ALLOW_NR(__NR_sigaltstack),
        ALLOW_NR(__NR_exit),
        ALLOW_NR(__NR_exit_group),
        ALLOW_NR(__NR_sched_yield),
        ALLOW_NR(__NR_sysinfo), /* qsort: _SC_PHYS_PAGES */
        ALLOW_NO_EXEC(__NR_mmap),
        ALLOW_NO_EXEC(__NR_mprotect),
        /* fstat is newfstatat(fd, "", AT_EMPTY_PATH) in glibc >= 2.33. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_newfstatat, 0, 4),
        LOAD(ARG_LO(3)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AT_EMPTY_PATH, 0, 1),
        RET(SECCOMP_RET_ALLOW),
        RET(SECCOMP_RET_ERRNO | EACCES),
        /* fcntl: descriptor flags and duplicates only (F_DUPFD_CLOEXEC, F_GETFD, F_SETFD,
         * F_GETFL); never locks or leases. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fcntl, 0, 7),
        LOAD(ARG_LO(1)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_DUPFD_CLOEXEC, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_GETFD, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_SETFD, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_GETFL, 0, 1),
        RET(SECCOMP_RET_ALLOW),
        RET(SECCOMP_RET_ERRNO | EINVAL),
        /* isatty() (a sanitizer's report, whether to colour it): TCGETS only. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 4),
        LOAD(ARG_LO(1)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TCGETS, 0, 1),
        RET(SECCOMP_RET_ALLOW),
        RET(SECCOMP_RET_ERRNO | ENOTTY),
        /* abort() signals itself: tgkill to this process only. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 3),
        LOAD(ARG_LO(0)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)self, 0, 1),
        RET(SECCOMP_RET_ALLOW),
        LOAD(NR_OFF),
        /* Calls that take a path: refused with EACCES, so that a library that looks for a
         * file (libdwfl's debug file search, a sanitizer's symbolizer) fails cleanly. */
        DENY_NR(__NR_open),
        DENY_NR(__NR_openat),
        DENY_NR(__NR_openat2),
        DENY_NR(__NR_creat),
        DENY_NR(__NR_stat),
        DENY_NR(__NR_lstat),
        DENY_NR(__NR_statx),
        DENY_NR(__NR_access),
        DENY_NR(__NR_faccessat),
        DENY_NR(__NR_faccessat2),
        DENY_NR(__NR_readlink),
        DENY_NR(__NR_readlinkat),
        DENY_NR(__NR_socket),
        RET(SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
        return -errno;
    return 0;
}

int sandbox_enter(const struct sandbox_opts *o)
{
    int r;
    if ((r = close_others(o->keep_fd)) < 0) {
        log_err("closing descriptors: %s", strerror(-r));
        return r;
    }
    /* The ambient and bounding sets first: dropping the bounding set needs CAP_SETPCAP, which
     * root loses with its uid. Without it (not root) the bounding set cannot matter:
     * no_new_privs keeps execve from raising anything. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;
    for (int c = 0; c <= 63; c++)
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL && errno != EPERM)
            return -errno;
    if ((r = drop_ids()) < 0) {
        log_err("cannot give up root (become uid %d): %s", NOBODY, strerror(-r));
        return r;
    }
    if ((r = drop_caps()) < 0) {
        log_err("cannot drop every capability: %s", strerror(-r));
        return r;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        r = -errno;
        log_err("prctl: %s", strerror(-r));
        return r;
    }
    if ((o->max_memory && !SANITIZED && (r = set_limit(RLIMIT_AS, o->max_memory)) < 0) ||
        (o->max_cpu_s && (r = set_limit(RLIMIT_CPU, o->max_cpu_s)) < 0) ||
        (r = set_limit(RLIMIT_CORE, 0)) < 0 ||
        (r = set_limit(RLIMIT_NPROC, 0)) < 0 || (r = set_limit(RLIMIT_NOFILE, 4096)) < 0) {
        log_err("setrlimit: %s", strerror(-r));
        return r;
    }
    /* Symbolizing can wait; sampling cannot. (The helper that reads ELF headers answers the
     * loop thread, which waits: at nice 10 beside a busy machine's CPU hogs, a target's
     * attach waited 4-18 ms per file for it, 53 ms in all, its ticks missed meanwhile.) */
    if (!o->keep_priority && setpriority(PRIO_PROCESS, 0, 10) < 0)
        log_debug("setpriority: %s", strerror(errno));
    if ((r = install_filter(getpid())) < 0) {
        log_err("seccomp: %s", strerror(-r));
        return r;
    }
    return 0;
}
