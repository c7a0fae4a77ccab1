/* idlers.c: one busy thread among many idle ones, for the sampling benchmark.
 *
 * Usage: idlers SECONDS [NIDLE [STILL]]. Starts NIDLE (default 50) idle threads, each named after
 * how it blocks, a quarter of each kind:
 *   cond-N   pthread_cond_wait / pthread_cond_timedwait (futex)
 *   sleep-N  nanosleep (clock_nanosleep)
 *   pipe-N   read on a pipe nobody writes to
 *   epoll-N  epoll_wait on such a pipe
 * Even-numbered ones block for good; odd-numbered ones wake every 20-100 ms and block
 * again (a process whose idle threads have timers), so both "has not run since the last
 * sample" and "blocked in a system call, ran since" occur; with STILL 1, every one blocks for
 * good. The main thread, renamed "busy",
 * computes for SECONDS (busy_work -> mix_round -> mix, -O2, no frame pointers), then prints
 * "report eintr=E wakeups=W" (E: system calls of idle threads that failed with EINTR, which
 * a profiler must never cause) and exits. Prints "ready PID" once every thread is named and
 * blocked. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static atomic_uint eintr_count, wakeups, started;
static int still; /* every idle thread blocks for good */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Period of an odd-numbered (waking) thread: 20-100 ms, spread so they do not align. */
static int period_ms(int i)
{
    return 20 + (i * 37) % 81;
}

__attribute__((noinline)) static void idle_cond(int i)
{
    pthread_mutex_lock(&mu);
    for (;;) {
        if (i % 2 == 0) {
            pthread_cond_wait(&never, &mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long ns = ts.tv_nsec + period_ms(i) * 1000000L;
            ts.tv_sec += ns / 1000000000L;
            ts.tv_nsec = ns % 1000000000L;
            int r = pthread_cond_timedwait(&never, &mu, &ts);
            if (r == EINTR)
                eintr_count++;
            wakeups++;
        }
    }
}

__attribute__((noinline)) static void idle_sleep(int i)
{
    for (;;) {
        struct timespec ts = {i % 2 == 0 ? 100000 : 0, i % 2 == 0 ? 0 : period_ms(i) * 1000000L};
        if (nanosleep(&ts, NULL) < 0 && errno == EINTR)
            eintr_count++;
        wakeups++;
    }
}

__attribute__((noinline)) static void idle_pipe(int i)
{
    int fds[2];
    if (pipe(fds) < 0)
        abort();
    (void)i;
    for (;;) {
        char c;
        if (read(fds[0], &c, 1) < 0 && errno == EINTR)
            eintr_count++;
    }
}

__attribute__((noinline)) static void idle_epoll(int i)
{
    int fds[2];
    if (pipe(fds) < 0)
        abort();
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[0]};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev) < 0)
        abort();
    for (;;) {
        struct epoll_event out;
        int r = epoll_wait(ep, &out, 1, i % 2 == 0 ? -1 : period_ms(i));
        if (r < 0 && errno == EINTR)
            eintr_count++;
        wakeups++;
    }
}

static void *idle_main(void *arg)
{
    int i = (int)(intptr_t)arg;
    static const char *kinds[] = {"cond", "sleep", "pipe", "epoll"};
    char name[16];
    snprintf(name, sizeof(name), "%s-%d", kinds[i % 4], i);
    pthread_setname_np(pthread_self(), name);
    started++;
    int kind = i % 4;
    if (still)
        i = 0; /* (an even number: blocks for good) */
    switch (kind) {
    case 0:
        idle_cond(i / 4);
        break;
    case 1:
        idle_sleep(i / 4);
        break;
    case 2:
        idle_pipe(i / 4);
        break;
    default:
        idle_epoll(i / 4);
        break;
    }
    return NULL;
}

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

__attribute__((noinline)) static uint64_t mix_round(uint64_t x)
{
    for (int k = 0; k < 1000; k++)
        x = mix(x + (uint64_t)k);
    return x;
}

__attribute__((noinline)) static void busy_work(double secs)
{
    uint64_t end = mono_ns() + (uint64_t)(secs * 1e9), x = 1;
    while (mono_ns() < end)
        x = mix_round(x);
    sink = x;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 10;
    int nidle = argc > 2 ? atoi(argv[2]) : 50;
    still = argc > 3 && atoi(argv[3]) == 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < nidle; i++) {
        pthread_t th;
        if (pthread_create(&th, &attr, idle_main, (void *)(intptr_t)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    while ((int)started < nidle)
        usleep(1000);
    usleep(20000); /* let the last ones reach their blocking call */
    pthread_setname_np(pthread_self(), "busy");
    printf("ready %d\n", getpid());
    fflush(stdout);
    busy_work(secs);
    printf("report eintr=%u wakeups=%u\n", (unsigned)eintr_count, (unsigned)wakeups);
    fflush(stdout);
    return 0;
}
