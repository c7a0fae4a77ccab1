/* sched_thread.h: what the schedule keeps per thread (cputime's credit of CPU time),
 * embedded in struct thread (target.h) as th->sched; set and reset by cputime.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* cputime schedule: CPU time seen, credit towards the next sample, a sample due. It holds
 * nothing to release: it goes with its thread. */
struct sched_thread {
    bool cpu_seen_valid;
    bool cpu_due;               /* a sample is due (sampler_tick's cpu_only takes it) */
    uint64_t cpu_seen_ns;
    uint64_t cpu_credit_ns;
    uint64_t cpu_thresh_ns;     /* CPU to the next sample (random around the interval) */
};

/* cputime.c: c zeroed (a new thread: the schedule's thread_added hook); c's CPU time and
 * credit forgotten, a sample due kept (cputime starts counting by schedstat). */
void sched_thread_init(struct sched_thread *c);
void sched_thread_restart(struct sched_thread *c);
