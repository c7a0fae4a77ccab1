/* idlesvc.c: a mostly idle service, for the scale benchmark (tests/bench/bench.py).
 *
 * Usage: idlesvc SECONDS [THREADS]. THREADS (default 5, 2 to 64) threads in all:
 *   main       clock_nanosleep for SECONDS, then exits the process;
 *   work       computes 1% of the time: a burst of 1 ms of its own CPU time every 100 ms
 *              (work_burst -> work_mix, -O2, no frame pointers), phased by the pid so that
 *              many copies do not burst together;
 *   the rest   in turn: epoll-N (epoll_wait on a pipe nobody writes, 1 s timeout), read-N
 *              (read on such a pipe, for good), sleep-N (nanosleep of 1 s, in a loop).
 * With the default 5: main, work, epoll-1, read-2, sleep-3. Prints "ready PID" once every
 * thread is started and named. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))
#define BURST_NS 1000000ull
#define PERIOD_NS 100000000ull

static atomic_uint started;
static volatile uint64_t sink;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

NOINLINE void work_mix(unsigned n)
{
    uint64_t x = sink;
    for (unsigned i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

NOINLINE void work_burst(void)
{
    uint64_t end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + BURST_NS;
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end)
        work_mix(2000);
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "work");
    atomic_fetch_add(&started, 1);
    uint64_t next = clock_ns(CLOCK_MONOTONIC) + (uint64_t)getpid() * 7919u % PERIOD_NS;
    for (;;) {
        struct timespec ts = {(time_t)(next / 1000000000ull), (long)(next % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
            ;
        work_burst();
        next += PERIOD_NS;
        uint64_t now = clock_ns(CLOCK_MONOTONIC);
        if (next < now) /* descheduled for long: keep the period, not the backlog */
            next = now + PERIOD_NS - (now - next) % PERIOD_NS;
    }
    return NULL;
}

static void *idler(void *arg)
{
    int i = (int)(intptr_t)arg; /* 1..62 */
    char name[24];
    int p[2];
    if (pipe(p) < 0)
        abort();
    switch (i % 3) {
    case 1: {
        snprintf(name, sizeof(name), "epoll-%d", i);
        pthread_setname_np(pthread_self(), name);
        int ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
        atomic_fetch_add(&started, 1);
        for (;;)
            epoll_wait(ep, &ev, 1, 1000);
    }
    case 2: {
        snprintf(name, sizeof(name), "read-%d", i);
        pthread_setname_np(pthread_self(), name);
        atomic_fetch_add(&started, 1);
        char c;
        for (;;)
            if (read(p[0], &c, 1) <= 0)
                usleep(1000);
    }
    default: {
        snprintf(name, sizeof(name), "sleep-%d", i);
        pthread_setname_np(pthread_self(), name);
        atomic_fetch_add(&started, 1);
        for (;;) {
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
        }
    }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 60;
    int n = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 2 || n > 64)
        n = 5;
    pthread_t th;
    pthread_create(&th, NULL, worker, NULL);
    for (int i = 1; i <= n - 2; i++)
        pthread_create(&th, NULL, idler, (void *)(intptr_t)i);
    while (atomic_load(&started) < (unsigned)(n - 1))
        usleep(1000);
    printf("ready %d\n", getpid());
    fflush(stdout);
    uint64_t end = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(secs * 1e9);
    struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
    return 0;
}
