/* schedule.h: when to sample a target. Kept apart from the sampler: the sampler takes a sample
 * when told; the scheduler decides when (fixed-rate wall clock for now). */
#pragma once

#include <stdint.h>

#include <ev.h>

struct target;

struct sched {
    ev_timer timer;
    struct ev_loop *loop;
    struct target *t;
    uint64_t interval_ns;
};

void sched_start(struct sched *s, struct ev_loop *loop, struct target *t, unsigned hz);
void sched_stop(struct sched *s);
