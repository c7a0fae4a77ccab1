/* execer.c: computes in before_exec on two threads, then a non-main thread calls execv
 * (so the kernel moves it to the leader's tid). Usage: execer MILLISECONDS PROGRAM [ARGS];
 * prints "ready PID" first. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static char **exec_argv;
static unsigned ms;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) void before_exec(uint64_t until)
{
    uint64_t x = sink;
    while (mono_ns() < until)
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005ull + 1;
    sink = x;
}

static void *execing_thread(void *arg)
{
    before_exec(*(uint64_t *)arg);
    execv(exec_argv[0], exec_argv);
    perror("execv");
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    ms = (unsigned)atoi(argv[1]);
    exec_argv = argv + 2;
    printf("ready %d\n", getpid());
    fflush(stdout);
    uint64_t until = mono_ns() + (uint64_t)ms * 1000000ull;
    pthread_t th;
    pthread_create(&th, NULL, execing_thread, &until);
    before_exec(until + 1000000000ull);
    return 0;
}
