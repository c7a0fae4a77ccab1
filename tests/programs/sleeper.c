/* sleeper.c: a target for the schedules: BUSY threads ("burner-N") spinning in burn(),
 * NAPPERS threads ("napper", default 1) sleeping in nap() (nanosleep, 1 s at a time), and the
 * main thread blocked in read() on stdin, and PHASERS threads ("phaser", default 0) that
 * compute in work_phase() for 300 ms of wall time, then sleep in rest_phase() (nanosleep)
 * for 300 ms, and again. With BUSY = 0 the process is idle. Built -O2 without frame
 * pointers. Usage: sleeper [BUSY [NAPPERS [PHASERS]]]; prints "ready PID"; exits at end of
 * input. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile uint64_t sink;

NOINLINE void burn(void)
{
    uint64_t x = sink;
    for (unsigned i = 0; i < 100000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

static void *burner(void *arg)
{
    char name[16];
    snprintf(name, sizeof(name), "burner-%d", (int)(intptr_t)arg);
    pthread_setname_np(pthread_self(), name);
    for (;;)
        burn();
    return NULL;
}

NOINLINE void nap(void)
{
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    __asm__ volatile("" ::: "memory");
}

static void *napper(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "napper");
    for (;;)
        nap();
    return NULL;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

NOINLINE void work_phase(void)
{
    uint64_t end = mono_ns() + 300000000u;
    while (mono_ns() < end)
        burn();
}

NOINLINE void rest_phase(void)
{
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    __asm__ volatile("" ::: "memory");
}

static void *phaser(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "phaser");
    for (;;) {
        work_phase();
        rest_phase();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 0;
    int naps = argc > 2 ? atoi(argv[2]) : 1;
    pthread_t th;
    if (n < 0 || n > 64)
        n = 0;
    if (naps < 0 || naps > 64)
        naps = 1;
    int phasers = argc > 3 ? atoi(argv[3]) : 0;
    if (phasers < 0 || phasers > 64)
        phasers = 0;
    for (int i = 0; i < naps; i++)
        pthread_create(&th, NULL, napper, NULL);
    for (int i = 0; i < phasers; i++)
        pthread_create(&th, NULL, phaser, NULL);
    for (int i = 0; i < n; i++)
        pthread_create(&th, NULL, burner, (void *)(intptr_t)(i + 1));
    printf("ready %d\n", getpid());
    fflush(stdout);
    char buf[256];
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    return 0;
}
