/* shortlived.c: busy threads that live a fraction of a second each, one after another: what
 * the kernel sampled of a thread must not be lost when it exits (test_sampler).
 *
 * Usage: shortlived N MS. Prints "ready PID", waits for a line on stdin, then runs N threads
 * one at a time, each computing MS ms of its own CPU time in short_work and exiting, then
 * prints one line: "done", and each thread's id and CPU time in ns. Exits at the end of
 * input. Built -O2 without frame pointers. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long ms;

struct result {
    long tid;
    uint64_t cpu_ns;
};

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;

__attribute__((noinline)) static void short_work(void)
{
    uint64_t x = 1;
    while (cpu_ns() < (uint64_t)ms * 1000000ull)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

static void *run(void *arg)
{
    struct result *r = arg;
    r->tid = syscall(SYS_gettid);
    short_work();
    r->cpu_ns = cpu_ns();
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    ms = argc > 2 ? atol(argv[2]) : 200;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 0;
    struct result *r = calloc(n > 0 ? n : 1, sizeof(*r));
    if (!r)
        return 1;
    for (int i = 0; i < n; i++) {
        pthread_t th;
        if (pthread_create(&th, NULL, run, &r[i]) != 0)
            return 1;
        pthread_join(th, NULL);
    }
    printf("done");
    for (int i = 0; i < n; i++)
        printf(" %ld %llu", r[i].tid, (unsigned long long)r[i].cpu_ns);
    printf("\n");
    while (fgets(line, sizeof(line), stdin))
        ;
    return 0;
}
