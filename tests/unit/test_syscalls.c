/* test_syscalls.c: the /proc readers (procfs.c: syscall and schedstat parsing) and the
 * repair rules (syscalls.c: signal dispositions, which system calls may be restarted, the
 * EINTR repair on hand-made registers), and the readers on live threads of this process (one blocked in read(), one spinning). */
#include "procfs.h"
#include "syscalls.h"
#include "check.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void test_sysc_parse_kernel_formats(void)
{
    struct sysc_info s;
    memset(&s, 0xaa, sizeof(s));
    CHECK_INT(sysc_parse("running\n", &s), 0);
    CHECK_INT(s.state, SYSC_RUNNING);
    CHECK_INT(s.nr, -1);

    memset(&s, 0xaa, sizeof(s));
    CHECK_INT(sysc_parse("-1 0x7ffd3c2a1e28 0x7f3a2b1c0d9e\n", &s), 0);
    CHECK_INT(s.state, SYSC_BLOCKED);
    CHECK_INT(s.nr, -1);
    CHECK_U64(s.sp, 0x7ffd3c2a1e28);
    CHECK_U64(s.pc, 0x7f3a2b1c0d9e);

    memset(&s, 0xaa, sizeof(s));
    CHECK_INT(sysc_parse("232 0x3 0x7ffd3c2a1f00 0x20 0xffffffffffffffff 0x0 0x8 "
                         "0x7ffd3c2a1e28 0x7f3a2b1c0d9e\n",
                         &s),
              0);
    CHECK_INT(s.state, SYSC_IN_SYSCALL);
    CHECK_INT(s.nr, 232);
    CHECK_U64(s.args[0], 3);
    CHECK_U64(s.args[1], 0x7ffd3c2a1f00);
    CHECK_U64(s.args[2], 0x20);
    CHECK_U64(s.args[3], UINT64_MAX);
    CHECK_U64(s.args[4], 0);
    CHECK_U64(s.args[5], 8);
    CHECK_U64(s.sp, 0x7ffd3c2a1e28);
    CHECK_U64(s.pc, 0x7f3a2b1c0d9e);

    /* nr 0 (read) is a system call like any other; no trailing newline is fine. */
    CHECK_INT(sysc_parse("0 0x5 0x1000 0x11 0x0 0x0 0x0 0x7ffe00 0x7f00", &s), 0);
    CHECK_INT(s.state, SYSC_IN_SYSCALL);
    CHECK_INT(s.nr, 0);
    CHECK_U64(s.args[2], 0x11);
    CHECK_U64(s.pc, 0x7f00);

    static const char *const bad[] = {
        "",
        "\n",
        "garbage\n",
        "-1\n",
        "-1 0x7ffd3c2a1e28\n",
        "-1 0x1 0x2 0x3\n",
        "-1 0x1 zz\n",
        "232 0x3 0x4\n",
        "232 0x1 0x2 0x3 0x4 0x5 0x6 0x7\n",
        "232 0x1 0x2 0x3 0x4 0x5 0x6 0x7 zz\n",
        "x232 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8\n",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        int r = sysc_parse(bad[i], &s);
        if (r != -EINVAL) {
            fprintf(stderr, "sysc_parse(\"%s\") = %d, want -EINVAL\n", bad[i], r);
            check_failures++;
        }
    }
}

/* SIG_IGN ignores any signal; the default-ignore signals are ignored unless caught; others
 * are ignored only by SIG_IGN. */
static void test_sig_is_ignored(void)
{
#define BIT(sig) (1ull << ((sig)-1))
    static const int default_ignored[] = {SIGCHLD, SIGCONT, SIGURG, SIGWINCH};
    for (size_t i = 0; i < ARRAY_SIZE(default_ignored); i++) {
        int sig = default_ignored[i];
        CHECK(sig_is_ignored(0, 0, sig));
        CHECK(!sig_is_ignored(0, BIT(sig), sig));
        CHECK(sig_is_ignored(BIT(sig), 0, sig));
        /* Other signals' bits do not matter. */
        CHECK(!sig_is_ignored(~BIT(sig), BIT(sig), sig));
        CHECK(sig_is_ignored(0, ~BIT(sig), sig));
    }
    const int normal[] = {SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGPIPE, SIGALRM, SIGRTMIN};
    for (size_t i = 0; i < ARRAY_SIZE(normal); i++) {
        int sig = normal[i];
        CHECK(!sig_is_ignored(0, 0, sig));
        CHECK(!sig_is_ignored(0, BIT(sig), sig));
        CHECK(sig_is_ignored(BIT(sig), 0, sig));
        CHECK(!sig_is_ignored(~BIT(sig), 0, sig));
    }
    CHECK(sig_is_ignored(BIT(64), 0, 64));
    CHECK(!sig_is_ignored(0, 0, 64));
    CHECK(!sig_is_ignored(~0ull, 0, 0));
    CHECK(!sig_is_ignored(~0ull, 0, 65));
    CHECK(!sig_is_ignored(~0ull, 0, -1));
#undef BIT
}

static void test_sysc_restartable(void)
{
    static const long yes[] = {SYS_epoll_wait, SYS_epoll_pwait,    441 /* epoll_pwait2 */,
                               SYS_read,       SYS_write,          SYS_readv,
                               SYS_writev,     SYS_accept,         SYS_accept4,
                               SYS_recvfrom,   SYS_recvmsg,        SYS_sendto,
                               SYS_sendmsg,    SYS_rt_sigtimedwait};
    static const long no[] = {
        SYS_close,  SYS_connect, SYS_nanosleep, SYS_clock_nanosleep, SYS_futex, SYS_poll,
        SYS_select, SYS_wait4,   SYS_pause,     SYS_epoll_ctl,       -1,        100000};
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
        if (!sysc_restartable(yes[i])) {
            fprintf(stderr, "syscall %ld should be restartable\n", yes[i]);
            check_failures++;
        }
    for (size_t i = 0; i < ARRAY_SIZE(no); i++)
        if (sysc_restartable(no[i])) {
            fprintf(stderr, "syscall %ld should not be restartable\n", no[i]);
            check_failures++;
        }
    CHECK_INT(SYS_close, 3);
    CHECK_INT(SYS_connect, 42);
}

static struct user_regs_struct eintr_regs(long nr)
{
    struct user_regs_struct r;
    memset(&r, 0x5a, sizeof(r));
    r.orig_rax = (uint64_t)nr;
    r.rax = (uint64_t)-EINTR;
    return r;
}

#define RESTART ((uint64_t)-KERNEL_ERESTARTNOHAND)

/* Registers other than rax and r10 are never touched. */
static bool others_same(const struct user_regs_struct *a, const struct user_regs_struct *b)
{
    struct user_regs_struct x = *a, y = *b;
    x.rax = y.rax = 0;
    x.r10 = y.r10 = 0;
    return !memcmp(&x, &y, sizeof(x));
}

/* epoll_wait and epoll_pwait: the timeout lowered by the whole milliseconds waited (never
 * early), 0 events once it has run out, an infinite or zero timeout left alone, and the
 * restart code set; other restartable calls just restart. */
static void test_repair_epoll_timeouts(void)
{
    static const long nrs[] = {SYS_epoll_wait, SYS_epoll_pwait};
    for (size_t k = 0; k < ARRAY_SIZE(nrs); k++) {
        struct user_regs_struct r = eintr_regs(nrs[k]), orig;
        r.r10 = 1000;
        orig = r;
        CHECK(sysc_repair_eintr(getpid(), &r, 300 * NS_PER_MS + 500 * NS_PER_US));
        CHECK_U64(r.r10, 700);
        CHECK_U64(r.rax, RESTART);
        CHECK_U64(r.orig_rax, nrs[k]);
        CHECK(others_same(&r, &orig));

        r = orig;
        CHECK(sysc_repair_eintr(getpid(), &r, 999 * NS_PER_MS + 999999));
        CHECK_U64(r.r10, 1);
        CHECK_U64(r.rax, RESTART);

        /* Expired: exactly, and long ago. */
        r = orig;
        CHECK(sysc_repair_eintr(getpid(), &r, 1000 * NS_PER_MS));
        CHECK_U64(r.rax, 0);
        CHECK(others_same(&r, &orig));
        r = orig;
        CHECK(sysc_repair_eintr(getpid(), &r, 3600 * NS_PER_SEC));
        CHECK_U64(r.rax, 0);

        /* Less than a millisecond, or unknown: the same timeout again. */
        r = orig;
        CHECK(sysc_repair_eintr(getpid(), &r, 999 * NS_PER_US));
        CHECK_U64(r.r10, 1000);
        CHECK_U64(r.rax, RESTART);
        r = orig;
        CHECK(sysc_repair_eintr(getpid(), &r, 0));
        CHECK_U64(r.r10, 1000);
        CHECK_U64(r.rax, RESTART);

        /* Infinite (-1, sign-extended or not) and zero timeouts stay. */
        static const uint64_t keep[] = {UINT64_MAX, 0xffffffffull, 0};
        for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
            r = eintr_regs(nrs[k]);
            r.r10 = keep[i];
            CHECK(sysc_repair_eintr(getpid(), &r, 5 * NS_PER_SEC));
            CHECK_U64(r.r10, keep[i]);
            CHECK_U64(r.rax, RESTART);
        }
    }
    static const long plain[] = {SYS_read, SYS_recvmsg, SYS_accept4, SYS_rt_sigtimedwait};
    for (size_t i = 0; i < ARRAY_SIZE(plain); i++) {
        struct user_regs_struct r = eintr_regs(plain[i]), orig = r;
        CHECK(sysc_repair_eintr(getpid(), &r, 5 * NS_PER_SEC));
        CHECK_U64(r.rax, RESTART);
        CHECK_U64(r.r10, orig.r10);
        CHECK(others_same(&r, &orig));
    }
}

/* Not -EINTR, or not a call that may be restarted: false and not a byte changed. */
static void test_repair_leaves_others_alone(void)
{
    static const uint64_t results[] = {0, 5, (uint64_t)-EAGAIN, (uint64_t)-KERNEL_ERESTARTNOHAND,
                                       (uint64_t)-512 /* ERESTARTSYS */};
    for (size_t i = 0; i < ARRAY_SIZE(results); i++) {
        struct user_regs_struct r = eintr_regs(SYS_epoll_wait), orig;
        r.rax = results[i];
        r.r10 = 1000;
        orig = r;
        CHECK(!sysc_repair_eintr(getpid(), &r, 500 * NS_PER_MS));
        CHECK(!memcmp(&r, &orig, sizeof(r)));
    }
    static const long never[] = {SYS_close, SYS_connect, SYS_nanosleep, SYS_futex, -1};
    for (size_t i = 0; i < ARRAY_SIZE(never); i++) {
        struct user_regs_struct r = eintr_regs(never[i]), orig = r;
        CHECK(!sysc_repair_eintr(getpid(), &r, 500 * NS_PER_MS));
        CHECK(!memcmp(&r, &orig, sizeof(r)));
    }
}

/* epoll_pwait2: the timeout is a timespec in the target's memory (here our own), read but
 * never rewritten: expired -> 0 events, otherwise restart whole; NULL means infinite. */
static void test_repair_epoll_pwait2(void)
{
    struct timespec ts = {.tv_sec = 1, .tv_nsec = 500 * NS_PER_MS};
    struct user_regs_struct r = eintr_regs(441), orig;
    r.r10 = (uint64_t)(uintptr_t)&ts;
    orig = r;
    CHECK(sysc_repair_eintr(getpid(), &r, 1500 * NS_PER_MS));
    CHECK_U64(r.rax, 0);
    CHECK(others_same(&r, &orig));
    r = orig;
    CHECK(sysc_repair_eintr(getpid(), &r, 1499 * NS_PER_MS));
    CHECK_U64(r.rax, RESTART);
    CHECK_U64(r.r10, (uintptr_t)&ts);
    CHECK(ts.tv_sec == 1 && ts.tv_nsec == (long)(500 * NS_PER_MS));
    r = orig;
    CHECK(sysc_repair_eintr(getpid(), &r, 0));
    CHECK_U64(r.rax, RESTART);
    r = eintr_regs(441);
    r.r10 = 0;
    CHECK(sysc_repair_eintr(getpid(), &r, 10 * NS_PER_SEC));
    CHECK_U64(r.rax, RESTART);
    CHECK_U64(r.r10, 0);
    /* Unreadable timeout: restart whole rather than guess. */
    r = eintr_regs(441);
    r.r10 = 16;
    CHECK(sysc_repair_eintr(getpid(), &r, 10 * NS_PER_SEC));
    CHECK_U64(r.rax, RESTART);
    CHECK_U64(r.r10, 16);
}

/* The readers on files with known text: schedstat fields, the syscall file, empty files
 * (a thread that is gone) and closed descriptors. */
static int text_file(const char *text)
{
    char path[] = "/tmp/test_syscalls-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    unlink(path);
    REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    return fd;
}

static void test_readers_on_known_text(void)
{
    uint64_t run = 1, pc = 1;
    int fd = text_file("123456789 42 7\n");
    CHECK_INT(proc_read_schedstat(fd, &run, &pc), 0);
    CHECK_U64(run, 123456789);
    CHECK_U64(pc, 7);
    close(fd);
    fd = text_file("12 34\n");
    CHECK_INT(proc_read_schedstat(fd, &run, &pc), -EINVAL);
    close(fd);
    fd = text_file("");
    CHECK_INT(proc_read_schedstat(fd, &run, &pc), -ESRCH);
    struct sysc_info s;
    CHECK_INT(proc_read_syscall(fd, &s), -ESRCH);
    close(fd);
    fd = text_file("running\n");
    CHECK_INT(proc_read_syscall(fd, &s), 0);
    CHECK_INT(s.state, SYSC_RUNNING);
    /* pread from the start: reading twice gives the same answer. */
    CHECK_INT(proc_read_syscall(fd, &s), 0);
    CHECK_INT(s.state, SYSC_RUNNING);
    close(fd);
    CHECK_INT(proc_read_schedstat(-1, &run, &pc), -EBADF);
    CHECK_INT(proc_read_syscall(-1, &s), -EBADF);
}

/* ---- live threads ---- */

struct blocked {
    int pipe[2];
    char buf[17];
    _Atomic pid_t tid;
    ssize_t got;
};

static void *blocked_main(void *arg)
{
    struct blocked *b = arg;
    atomic_store(&b->tid, (pid_t)syscall(SYS_gettid));
    b->got = read(b->pipe[0], b->buf, sizeof(b->buf));
    return NULL;
}

struct spinner {
    atomic_bool stop;
    _Atomic pid_t tid;
};

static void *spinner_main(void *arg)
{
    struct spinner *s = arg;
    atomic_store(&s->tid, (pid_t)syscall(SYS_gettid));
    volatile uint64_t x = 0;
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed))
        x++;
    return NULL;
}

static int open_task_file(pid_t tid, const char *name)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    return fd;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A thread blocked in read() shows as in system call 0 with its arguments and accrues no
 * run time; a spinning thread shows "running" and accrues run time; a thread that has
 * exited is an error. Polls with generous deadlines (the threads need time to get there,
 * more so under valgrind). */
static void test_live_threads(void)
{
    struct blocked b = {.got = -2};
    REQUIRE(pipe2(b.pipe, O_CLOEXEC) == 0);
    pthread_t bt, st;
    REQUIRE(pthread_create(&bt, NULL, blocked_main, &b) == 0);
    struct spinner sp = {0};
    REQUIRE(pthread_create(&st, NULL, spinner_main, &sp) == 0);
    while (!atomic_load(&b.tid) || !atomic_load(&sp.tid))
        sleep_ms(1);

    int bsys = open_task_file(b.tid, "syscall"), bsched = open_task_file(b.tid, "schedstat");
    int ssys = open_task_file(sp.tid, "syscall"), ssched = open_task_file(sp.tid, "schedstat");

    struct sysc_info si = {0};
    bool in_read = false;
    for (int i = 0; i < 1000 && !in_read; i++) {
        CHECK_INT(proc_read_syscall(bsys, &si), 0);
        in_read = si.state == SYSC_IN_SYSCALL && si.nr == SYS_read;
        if (!in_read)
            sleep_ms(5);
    }
    CHECK(in_read);
    CHECK_U64(si.args[0], b.pipe[0]);
    CHECK_U64(si.args[1], (uintptr_t)b.buf);
    CHECK_U64(si.args[2], sizeof(b.buf));
    CHECK(si.sp != 0 && si.pc != 0);

    uint64_t run0, pc0, run1, pc1;
    CHECK_INT(proc_read_schedstat(bsched, &run0, &pc0), 0);
    sleep_ms(50);
    CHECK_INT(proc_read_schedstat(bsched, &run1, &pc1), 0);
    CHECK_U64(run1, run0);
    CHECK_U64(pc1, pc0);
    CHECK_INT(proc_read_syscall(bsys, &si), 0);
    CHECK(si.state == SYSC_IN_SYSCALL && si.nr == SYS_read);

    bool running = false;
    for (int i = 0; i < 1000 && !running; i++) {
        CHECK_INT(proc_read_syscall(ssys, &si), 0);
        running = si.state == SYSC_RUNNING;
        if (!running)
            sleep_ms(2);
    }
    CHECK(running);
    /* Run time grows while it spins (waiting up to 5 s: other work may share the CPUs). */
    CHECK_INT(proc_read_schedstat(ssched, &run0, &pc0), 0);
    run1 = run0;
    pc1 = pc0;
    for (int i = 0; i < 500 && run1 <= run0 + 5 * NS_PER_MS; i++) {
        sleep_ms(10);
        CHECK_INT(proc_read_schedstat(ssched, &run1, &pc1), 0);
    }
    CHECK(run1 > run0 + 5 * NS_PER_MS);
    CHECK(pc1 >= pc0);

    atomic_store(&sp.stop, true);
    REQUIRE(write(b.pipe[1], "x", 1) == 1);
    pthread_join(st, NULL);
    pthread_join(bt, NULL);
    CHECK_INT(b.got, 1);
    /* The threads are gone: their files can no longer be read. pthread_join returns when
     * the kernel clears the thread id, a little before the task is reaped, so wait. */
    bool gone = false;
    for (int i = 0; i < 2000 && !gone; i++) {
        gone = proc_read_syscall(bsys, &si) < 0 && proc_read_schedstat(ssched, &run0, &pc0) < 0;
        if (!gone)
            sleep_ms(1);
    }
    CHECK(gone);
    close(bsys);
    close(bsched);
    close(ssys);
    close(ssched);
    close(b.pipe[0]);
    close(b.pipe[1]);
}

/* The repair of a call an ignored signal interrupted, knowing its whole timeout and how
 * long it has waited (across restarts): restart with what is left, or end it as its timeout
 * would (0 for epoll, -EAGAIN for socket calls and rt_sigtimedwait); never early. */
static void test_repair_ignored(void)
{
    struct user_regs_struct r = eintr_regs(SYS_epoll_wait), orig = r;
    CHECK(sysc_repair_ignored(&r, 20 * NS_PER_MS, 50 * (int64_t)NS_PER_MS));
    CHECK_U64(r.rax, RESTART);
    CHECK_U64(r.r10, 30);
    CHECK(others_same(&r, &orig));
    r = eintr_regs(SYS_epoll_pwait);
    CHECK(sysc_repair_ignored(&r, 20 * NS_PER_MS + 1, 50 * (int64_t)NS_PER_MS));
    CHECK_U64(r.r10, 30); /* 29.999999 ms left: rounded up, never early */
    r = eintr_regs(SYS_epoll_wait);
    CHECK(sysc_repair_ignored(&r, 50 * NS_PER_MS, 50 * (int64_t)NS_PER_MS));
    CHECK_U64(r.rax, 0);
    r = eintr_regs(SYS_epoll_wait);
    orig = r;
    CHECK(sysc_repair_ignored(&r, 3600 * NS_PER_SEC, -1)); /* no timeout: restart as is */
    CHECK_U64(r.rax, RESTART);
    CHECK_U64(r.r10, orig.r10);
    static const long timed[] = {SYS_accept, SYS_recvfrom, SYS_read, SYS_sendmsg,
                                 SYS_rt_sigtimedwait};
    for (size_t k = 0; k < ARRAY_SIZE(timed); k++) {
        r = eintr_regs(timed[k]);
        orig = r;
        CHECK(sysc_repair_ignored(&r, 10 * NS_PER_MS, 52 * (int64_t)NS_PER_MS));
        CHECK_U64(r.rax, RESTART);
        CHECK_U64(r.r10, orig.r10);
        r = eintr_regs(timed[k]);
        CHECK(sysc_repair_ignored(&r, 60 * NS_PER_MS, 52 * (int64_t)NS_PER_MS));
        CHECK_U64(r.rax, (uint64_t)-EAGAIN);
    }
    r = eintr_regs(SYS_close); /* never restarted */
    orig = r;
    CHECK(!sysc_repair_ignored(&r, 0, -1));
    CHECK(!memcmp(&r, &orig, sizeof(r)));
}

/* The timeout of a live socket call, read through a copy of the descriptor. */
static void test_timeout_of_own_socket(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    struct timeval tv = {0, 250000};
    REQUIRE(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd < 0 && errno == ENOSYS) {
        /* Only under valgrind 3.19, which does not implement pidfd_open (the normal and
         * sanitizer runs test this); the daemon then treats socket timeouts as unknown. */
        printf("not checked: pidfd_open: ENOSYS (valgrind)\n");
        close(sv[0]);
        close(sv[1]);
        return;
    }
    REQUIRE(pidfd >= 0);
    struct user_regs_struct r = eintr_regs(SYS_recvfrom);
    r.rdi = (uint64_t)sv[0];
    int64_t t = sysc_timeout_ns(getpid(), pidfd, &r, 0);
    /* The kernel keeps socket timeouts in jiffies: 250 ms may read back a tick longer. */
    CHECK(t >= 250 * (int64_t)NS_PER_MS && t < 260 * (int64_t)NS_PER_MS);
    r.orig_rax = SYS_sendto; /* no SO_SNDTIMEO set */
    CHECK(sysc_timeout_ns(getpid(), pidfd, &r, 0) == -1);
    r = eintr_regs(SYS_epoll_wait);
    CHECK(sysc_timeout_ns(getpid(), pidfd, &r, 70) == 70 * (int64_t)NS_PER_MS);
    CHECK(sysc_timeout_ns(getpid(), pidfd, &r, -1) == -1);
    close(pidfd);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    RUN(test_sysc_parse_kernel_formats);
    RUN(test_sig_is_ignored);
    RUN(test_sysc_restartable);
    RUN(test_repair_epoll_timeouts);
    RUN(test_repair_leaves_others_alone);
    RUN(test_repair_epoll_pwait2);
    RUN(test_repair_ignored);
    RUN(test_timeout_of_own_socket);
    RUN(test_readers_on_known_text);
    RUN(test_live_threads);
    return check_status("test_syscalls");
}
