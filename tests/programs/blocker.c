/* blocker.c: a target whose threads block in system calls that a careless tracer breaks.
 *
 * Threads: "epoll" (epoll_wait, 50 ms timeout), "epollinf" (epoll_wait, no timeout),
 * "epollp" (epoll_pwait, 50 ms, with a signal mask), "select" (select, 50 ms), "accept"
 * (accept on a socket with SO_RCVTIMEO 50 ms), "ctl" (read on stdin, the control channel)
 * and "sig" (computes; the only thread that takes the real-time signals
 * SIGRTMIN..SIGRTMIN+7, which have handlers). SIGWINCH and SIGURG keep their default action
 * (ignored). Each blocking call counts EINTR and returns that came before their timeout
 * ("early"). Commands on stdin: "report" prints the counters on one line, "resetmax" resets
 * the longest waits, "calm" makes "sig" stop computing (it waits in read on a pipe, still
 * taking its signals) and "work" makes it compute again, "exit" exits. At start it prints
 * "tid NAME TID" per thread and "ready PID". */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NRT 8

static atomic_ulong eintr_epoll, eintr_epollinf, eintr_epollp, eintr_select, eintr_accept,
    eintr_read;
static atomic_ulong early_epoll, early_epollp, early_select, early_accept;
static atomic_ulong calls_epoll, calls_epollp, calls_select, calls_accept;
/* Longest wait of each timed call since the last "resetmax", in microseconds. */
static atomic_ulong longest_epoll, longest_epollp, longest_select, longest_accept;

static void note_wait(atomic_ulong *longest, uint64_t ns)
{
    unsigned long us = (unsigned long)(ns / 1000), cur = atomic_load(longest);
    while (us > cur && !atomic_compare_exchange_weak(longest, &cur, us))
        ;
}
static atomic_ulong rt_handled[NRT];
static atomic_int tids_ready;
#define NTHREADS 7
static pid_t tids[NTHREADS];
static const char *names[NTHREADS] = {"epoll", "epollinf", "select", "accept", "ctl", "sig",
                                      "epollp"};
static int epfd, pipefd[2], lsock, calmfd[2];
static atomic_int calm;
static volatile uint64_t sink;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void named(int i)
{
    pthread_setname_np(pthread_self(), names[i]);
    tids[i] = (pid_t)syscall(SYS_gettid);
    atomic_fetch_add(&tids_ready, 1);
}

/* 50 ms, minus the clock granularity slack we allow for "early". */
#define TIMEOUT_NS 50000000ull
#define EARLY_NS (TIMEOUT_NS - 500000ull)

static void *epoll_thread(void *arg)
{
    (void)arg;
    named(0);
    struct epoll_event ev[4];
    for (;;) {
        uint64_t t0 = mono_ns();
        int n = epoll_wait(epfd, ev, 4, 50);
        uint64_t t1 = mono_ns();
        atomic_fetch_add(&calls_epoll, 1);
        note_wait(&longest_epoll, t1 - t0);
        if (n < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_epoll, 1);
        else if (n == 0 && t1 - t0 < EARLY_NS)
            atomic_fetch_add(&early_epoll, 1);
    }
    return NULL;
}

static void *epollinf_thread(void *arg)
{
    (void)arg;
    named(1);
    struct epoll_event ev[4];
    for (;;) {
        int n = epoll_wait(epfd, ev, 4, -1);
        if (n < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_epollinf, 1);
    }
    return NULL;
}

/* epoll_pwait with a mask that also blocks SIGUSR1: the kernel installs it for the wait and
 * restores the thread's own on the way out (a restart must go through that too). */
static void *epollp_thread(void *arg)
{
    (void)arg;
    named(6);
    sigset_t m;
    pthread_sigmask(SIG_BLOCK, NULL, &m);
    sigaddset(&m, SIGUSR1);
    struct epoll_event ev[4];
    for (;;) {
        uint64_t t0 = mono_ns();
        int n = epoll_pwait(epfd, ev, 4, 50, &m);
        uint64_t t1 = mono_ns();
        atomic_fetch_add(&calls_epollp, 1);
        note_wait(&longest_epollp, t1 - t0);
        if (n < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_epollp, 1);
        else if (n == 0 && t1 - t0 < EARLY_NS)
            atomic_fetch_add(&early_epollp, 1);
    }
    return NULL;
}

static void *select_thread(void *arg)
{
    (void)arg;
    named(2);
    for (;;) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(pipefd[0], &r);
        struct timeval tv = {0, 50000};
        uint64_t t0 = mono_ns();
        int n = select(pipefd[0] + 1, &r, NULL, NULL, &tv);
        uint64_t t1 = mono_ns();
        atomic_fetch_add(&calls_select, 1);
        note_wait(&longest_select, t1 - t0);
        if (n < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_select, 1);
        else if (n == 0 && t1 - t0 < EARLY_NS)
            atomic_fetch_add(&early_select, 1);
    }
    return NULL;
}

static void *accept_thread(void *arg)
{
    (void)arg;
    named(3);
    for (;;) {
        uint64_t t0 = mono_ns();
        int fd = accept(lsock, NULL, NULL);
        uint64_t t1 = mono_ns();
        atomic_fetch_add(&calls_accept, 1);
        note_wait(&longest_accept, t1 - t0);
        if (fd >= 0)
            close(fd);
        else if (errno == EINTR)
            atomic_fetch_add(&eintr_accept, 1);
        else if ((errno == EAGAIN || errno == EWOULDBLOCK) && t1 - t0 < EARLY_NS)
            atomic_fetch_add(&early_accept, 1);
    }
    return NULL;
}

static void on_rt(int sig)
{
    atomic_fetch_add(&rt_handled[sig - SIGRTMIN], 1);
}

static void *sig_thread(void *arg)
{
    (void)arg;
    named(5);
    sigset_t s;
    sigemptyset(&s);
    for (int i = 0; i < NRT; i++)
        sigaddset(&s, SIGRTMIN + i);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    uint64_t x = 1;
    for (;;) {
        if (atomic_load(&calm)) {
            char c;
            if (read(calmfd[0], &c, 1) < 0 && errno != EINTR)
                return NULL;
            continue;
        }
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005ull + 1;
        sink = x;
    }
    return NULL;
}

static void report(void)
{
    unsigned long rt = 0;
    for (int i = 0; i < NRT; i++)
        rt += atomic_load(&rt_handled[i]);
    printf("report eintr_epoll=%lu eintr_epollinf=%lu eintr_epollp=%lu eintr_select=%lu "
           "eintr_accept=%lu eintr_read=%lu early_epoll=%lu early_epollp=%lu early_select=%lu "
           "early_accept=%lu calls_epoll=%lu calls_epollp=%lu calls_select=%lu "
           "calls_accept=%lu rt_handled=%lu longest_epoll=%lu longest_epollp=%lu "
           "longest_select=%lu longest_accept=%lu\n",
           atomic_load(&eintr_epoll), atomic_load(&eintr_epollinf), atomic_load(&eintr_epollp),
           atomic_load(&eintr_select), atomic_load(&eintr_accept), atomic_load(&eintr_read),
           atomic_load(&early_epoll), atomic_load(&early_epollp), atomic_load(&early_select),
           atomic_load(&early_accept), atomic_load(&calls_epoll), atomic_load(&calls_epollp),
           atomic_load(&calls_select), atomic_load(&calls_accept), rt,
           atomic_load(&longest_epoll), atomic_load(&longest_epollp),
           atomic_load(&longest_select), atomic_load(&longest_accept));
    fflush(stdout);
}

int main(void)
{
    sigset_t s;
    sigemptyset(&s);
    for (int i = 0; i < NRT; i++)
        sigaddset(&s, SIGRTMIN + i);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_rt;
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < NRT; i++)
        sigaction(SIGRTMIN + i, &sa, NULL);

    epfd = epoll_create1(0);
    if (pipe(pipefd) < 0 || pipe(calmfd) < 0)
        return 1;
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(epfd, EPOLL_CTL_ADD, pipefd[0], &ev);
    lsock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "blocker-%d", getpid());
    bind(lsock, (struct sockaddr *)&sun, sizeof(sun));
    listen(lsock, 1);
    struct timeval tv = {0, 50000};
    setsockopt(lsock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    pthread_t th;
    pthread_create(&th, NULL, epoll_thread, NULL);
    pthread_create(&th, NULL, epollinf_thread, NULL);
    pthread_create(&th, NULL, select_thread, NULL);
    pthread_create(&th, NULL, accept_thread, NULL);
    pthread_create(&th, NULL, sig_thread, NULL);
    pthread_create(&th, NULL, epollp_thread, NULL);
    /* The main thread is the control thread ("ctl"): blocked in read() on stdin. */
    named(4);
    while (atomic_load(&tids_ready) < NTHREADS)
        usleep(1000);
    for (int i = 0; i < NTHREADS; i++)
        printf("tid %s %d\n", names[i], tids[i]);
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[256];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(0, line + len, sizeof(line) - 1 - len);
        if (n < 0) {
            if (errno == EINTR)
                atomic_fetch_add(&eintr_read, 1);
            continue;
        }
        if (n == 0)
            return 0;
        len += (size_t)n;
        line[len] = '\0';
        char *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = '\0';
            if (!strcmp(line, "report"))
                report();
            else if (!strcmp(line, "resetmax")) {
                atomic_store(&longest_epoll, 0);
                atomic_store(&longest_epollp, 0);
                atomic_store(&longest_select, 0);
                atomic_store(&longest_accept, 0);
            } else if (!strcmp(line, "calm")) {
                atomic_store(&calm, 1);
            } else if (!strcmp(line, "work")) {
                if (atomic_exchange(&calm, 0) && write(calmfd[1], "w", 1) < 0)
                    return 1;
            } else if (!strcmp(line, "exit"))
                exit(0);
            size_t rest = len - (size_t)(nl + 1 - line);
            memmove(line, nl + 1, rest);
            len = rest;
            line[len] = '\0';
        }
        if (len >= sizeof(line) - 1)
            len = 0;
    }
}
