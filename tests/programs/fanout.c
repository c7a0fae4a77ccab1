/* fanout.c: threads that sleep at the bottom of many different call paths, for a buffer
 * with many samples and many distinct stacks (tests/bench/slice_lateness, test_slicecopy).
 *
 * Usage: fanout [THREADS [DEPTH [SLEEP_US]]] (defaults 8, 7, 1000). THREADS - 1 threads
 * ("fan-N") loop: walk down a pseudo-random path of 1 to DEPTH levels, each level one of
 * three functions (fan_a, fan_b, fan_c), and at the bottom sleep SLEEP_US (nanosleep), so
 * that a wall-clock schedule finds them blocked (sampled without a stop) in one of about
 * 3^DEPTH * 1.5 stacks. The main thread is blocked in read() on stdin: THREADS in all.
 * Built -O2 without frame pointers. Prints "ready PID"; exits at end of input. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static int depth = 7;
static long sleep_ns = 1000000;

NOINLINE void fan_a(uint64_t *x, int left);
NOINLINE void fan_b(uint64_t *x, int left);
NOINLINE void fan_c(uint64_t *x, int left);

NOINLINE static void bottom(void)
{
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    __asm__ volatile("" ::: "memory");
}

/* One level down: the next function chosen by the path's random state. */
static inline void next(uint64_t *x, int left)
{
    if (left <= 0) {
        bottom();
        return;
    }
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    switch ((*x >> 33) % 3) {
    case 0:
        fan_a(x, left - 1);
        break;
    case 1:
        fan_b(x, left - 1);
        break;
    default:
        fan_c(x, left - 1);
        break;
    }
}

NOINLINE void fan_a(uint64_t *x, int left)
{
    next(x, left);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void fan_b(uint64_t *x, int left)
{
    next(x, left);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void fan_c(uint64_t *x, int left)
{
    next(x, left);
    __asm__ volatile("" ::: "memory");
}

static void *worker(void *arg)
{
    char name[16];
    snprintf(name, sizeof(name), "fan-%d", (int)(intptr_t)arg);
    pthread_setname_np(pthread_self(), name);
    uint64_t x = (uint64_t)(intptr_t)arg * 0x9E3779B97F4A7C15ull;
    for (;;) {
        x = x * 2862933555777941757ull + 3037000493ull;
        next(&x, (int)((x >> 40) % (uint64_t)depth));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8;
    if (argc > 2)
        depth = atoi(argv[2]);
    if (argc > 3)
        sleep_ns = atol(argv[3]) * 1000;
    if (n < 1 || n > 64)
        n = 8;
    if (depth < 1 || depth > 30)
        depth = 7;
    if (sleep_ns < 1000 || sleep_ns > 999999999)
        sleep_ns = 1000000;
    pthread_t th;
    for (int i = 1; i < n; i++)
        pthread_create(&th, NULL, worker, (void *)(intptr_t)i);
    printf("ready %d\n", getpid());
    fflush(stdout);
    char buf[256];
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    return 0;
}
