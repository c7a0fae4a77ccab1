/* spinner.c: measures, from inside, every pause of a busy thread.
 *
 * One thread spins on clock_gettime(CLOCK_MONOTONIC) and records each gap between two
 * consecutive readings longer than THRESHOLD_NS: each is a moment the thread did not run
 * (a ptrace stop, a signal handler, an interrupt, preemption). The spin is inside
 * spin_loop -> measure -> main, built -O2 without frame pointers.
 * Usage: spinner SECONDS [THRESHOLD_NS]. Prints "ready PID", waits for a line on stdin
 * (so the measurement starts when the profiler is attached), then spins for SECONDS and
 * prints "gaps N", then each gap in ns on its own line, then "end". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_GAPS 2000000

static uint64_t *gaps;
static size_t ngaps;

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void spin_loop(uint64_t end, uint64_t threshold)
{
    uint64_t prev = mono_ns();
    while (prev < end) {
        uint64_t now = mono_ns();
        if (now - prev > threshold && ngaps < MAX_GAPS)
            gaps[ngaps++] = now - prev;
        prev = now;
    }
}

__attribute__((noinline)) static void measure(unsigned secs, uint64_t threshold)
{
    spin_loop(mono_ns() + (uint64_t)secs * 1000000000ull, threshold);
}

int main(int argc, char **argv)
{
    unsigned secs = argc > 1 ? (unsigned)atoi(argv[1]) : 5;
    uint64_t threshold = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000;
    gaps = malloc(MAX_GAPS * sizeof(*gaps));
    if (!gaps)
        return 1;
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    measure(secs, threshold);
    printf("gaps %zu\n", ngaps);
    for (size_t i = 0; i < ngaps; i++)
        printf("%llu\n", (unsigned long long)gaps[i]);
    printf("end\n");
    return 0;
}
