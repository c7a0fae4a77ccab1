/* churn.c: threads created and ending all the time. The main thread starts a short-lived
 * thread every millisecond (each computes ~3 ms in churn_work, then exits) and joins them
 * all; after SECONDS it prints "created N" and exits 0. If profd left any thread stopped,
 * the join would hang. Usage: churn SECONDS [wait]; prints "ready PID"; with "wait", starts
 * only at a line on stdin (so that every thread is made after the profiler attached). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXLIVE 64

static volatile uint64_t sink;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) void churn_work(void)
{
    uint64_t end = mono_ns() + 3000000, x = sink;
    while (mono_ns() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005ull + 1;
    sink = x;
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "churner");
    churn_work();
    return NULL;
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 3;
    pthread_t live[MAXLIVE];
    int n = 0;
    unsigned long created = 0;
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[16];
    if (argc > 2 && !strcmp(argv[2], "wait") && !fgets(line, sizeof(line), stdin))
        return 1;
    uint64_t end = mono_ns() + (uint64_t)secs * 1000000000ull;
    while (mono_ns() < end) {
        if (n == MAXLIVE) {
            pthread_join(live[0], NULL);
            for (int i = 1; i < n; i++)
                live[i - 1] = live[i];
            n--;
        }
        if (pthread_create(&live[n], NULL, worker, NULL) == 0) {
            n++;
            created++;
        }
        usleep(1000);
        /* Reap finished ones in order. */
        while (n > 0 && pthread_tryjoin_np(live[0], NULL) == 0) {
            for (int i = 1; i < n; i++)
                live[i - 1] = live[i];
            n--;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(live[i], NULL);
    printf("created %lu\n", created);
    fflush(stdout);
    return 0;
}
