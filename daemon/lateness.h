/* lateness.h: how late a schedule's ticks ran against the time they were due: a histogram
 * since attach and a summary of the last complete second. Shown by status (tick_lateness);
 * tests/bench/slice_lateness diffs two histograms to see the ticks of a window. */
#pragma once

#include <stdint.h>

struct cJSON;

/* Log-linear buckets of nanoseconds: [0, 1024) in the first, then 8 a doubling (each 9% of
 * its lower bound wide) from 1024 ns up to 2^36 ns (69 s); the last takes everything above. */
#define LATE_SUB 8
#define LATE_OCTAVES 26
#define LATE_BUCKETS (1 + LATE_OCTAVES * LATE_SUB)

struct lateness {
    uint64_t n, sum_ns, max_ns;
    uint64_t hist[LATE_BUCKETS];
    /* The second in progress, and a summary of the last complete one. */
    uint64_t win_start_ns;
    uint32_t win[LATE_BUCKETS];
    uint64_t win_n, win_max_ns;
    uint64_t last_n, last_max_ns, last_p50_ns, last_p99_ns, last_end_ns;
};

/* A tick due at due_ns ran at now_ns. */
void lateness_record(struct lateness *l, uint64_t due_ns, uint64_t now_ns);
/* Bucket i's bounds [lo, hi) in ns (hi UINT64_MAX for the last). */
void lateness_bucket_bounds(unsigned i, uint64_t *lo, uint64_t *hi);
unsigned lateness_bucket(uint64_t ns);
/* The object status shows: counts, max, mean, p50, p99 (upper bounds of their buckets, at most
 * the max), the last second's, and the non-empty buckets as [lo_us, hi_us, count]. */
struct cJSON *lateness_describe(const struct lateness *l);
