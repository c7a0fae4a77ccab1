/* pausemeter.c: the benchmark's busy target: spinner.c with times on its gaps.
 *
 * One thread spins on clock_gettime(CLOCK_MONOTONIC); every gap between two consecutive
 * readings longer than THRESHOLD_NS is a moment it did not run (a ptrace stop, a signal
 * handler, an interrupt, preemption) and is recorded with its CLOCK_MONOTONIC start, so a
 * profiler's sample times (profd's tick, perf's `-k CLOCK_MONOTONIC` time, a SIGPROF
 * handler's entry time) can be matched to the pause they caused. Built -O2 without frame
 * pointers; the spin is spin_loop -> measure -> main, like spinner.c.
 *
 * Usage: pausemeter WARM_MS SECONDS [THRESHOLD_NS]. Prints "ready PID" and waits for a line
 * on stdin (attach the profiler meanwhile); then spins WARM_MS without recording (the
 * profiler warms up on the very code it will sample), prints "measuring T0", records gaps
 * for SECONDS, and prints "done T1 N", then N lines "START_NS DURATION_NS", then "end". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_GAPS 4000000

static uint64_t *gap_start, *gap_len;
static size_t ngaps;

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void spin_loop(uint64_t end, uint64_t threshold, int record)
{
    uint64_t prev = mono_ns();
    while (prev < end) {
        uint64_t now = mono_ns();
        if (record && now - prev > threshold && ngaps < MAX_GAPS) {
            gap_start[ngaps] = prev;
            gap_len[ngaps] = now - prev;
            ngaps++;
        }
        prev = now;
    }
}

__attribute__((noinline)) static void measure(uint64_t ns, uint64_t threshold, int record)
{
    spin_loop(mono_ns() + ns, threshold, record);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: pausemeter WARM_MS SECONDS [THRESHOLD_NS]\n");
        return 2;
    }
    uint64_t warm_ms = strtoull(argv[1], NULL, 10);
    double secs = atof(argv[2]);
    uint64_t threshold = argc > 3 ? strtoull(argv[3], NULL, 10) : 1000;
    gap_start = malloc(MAX_GAPS * sizeof(*gap_start));
    gap_len = malloc(MAX_GAPS * sizeof(*gap_len));
    if (!gap_start || !gap_len)
        return 1;
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    measure(warm_ms * 1000000ull, threshold, 0);
    printf("measuring %llu\n", (unsigned long long)mono_ns());
    fflush(stdout);
    measure((uint64_t)(secs * 1e9), threshold, 1);
    printf("done %llu %zu\n", (unsigned long long)mono_ns(), ngaps);
    for (size_t i = 0; i < ngaps; i++)
        printf("%llu %llu\n", (unsigned long long)gap_start[i], (unsigned long long)gap_len[i]);
    printf("end\n");
    fflush(stdout);
    return 0;
}
