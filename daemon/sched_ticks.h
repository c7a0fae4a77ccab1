/* sched_ticks.h: the schedules' tick arithmetic (the grid, the jitter, ticks missed, cputime's
 * credit), functions of their arguments and of random_below's draws only (test_schedule_ticks). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "sched_thread.h"
#include "util.h"

/* A random offset in [0, span). */
static inline uint64_t jitter(uint64_t span)
{
    return random_below(span);
}

/* alarm: each tick at a random point of the first quarter of its interval on the grid.
 * Exactly periodic ticks alias with periodic work (a loop whose period divides the
 * interval is always caught at the same point: measured here, a 60/30/10 split read
 * 52/35/13); the offset keeps the rate exact and the grid anchored. */
#define ALARM_JITTER_DIV 4

/* alarm: when the tick of the interval that starts at next (on the grid) is due. */
static inline uint64_t alarm_due(uint64_t next, uint64_t iv)
{
    return next + jitter(iv / ALARM_JITTER_DIV);
}

/* alarm: a tick taken at now, its interval starting at *next: the ticks whose interval has
 * passed entirely are missed, not made up in a burst (the one taken is now's). Moves *next
 * to the interval now is in and returns how many were missed. */
static inline uint64_t alarm_skip(uint64_t now, uint64_t *next, uint64_t iv)
{
    if (now < *next + iv)
        return 0;
    uint64_t k = (now - *next) / iv;
    *next += k * iv;
    return k;
}

/* alarm: now is in the window of the tick whose interval starts at next (the first quarter
 * of its interval, where alarm_due puts it). */
static inline bool alarm_in_window(uint64_t now, uint64_t next, uint64_t iv)
{
    return now >= next && now < next + iv / ALARM_JITTER_DIV;
}

/* A new rate starts a new grid from now, but never puts off the tick already due sooner
 * (pending: the old grid's next tick, or the end of the wait under way): the next one. */
static inline uint64_t regrid_next(uint64_t now, uint64_t iv, uint64_t pending)
{
    uint64_t next = now + iv;
    return pending > now && pending < next ? pending : next;
}

/* An interval of iv on average, anywhere in [3/4, 5/4) of it: cputime's thresholds (timer and
 * poll sources), and sleep's and event's waits. */
static inline uint64_t jittered(uint64_t iv)
{
    return iv - iv / 4 + jitter(iv / 2);
}

/* The moment a wall-clock tick due at `due` takes a thread it finds waiting for a CPU at
 * (sampler_tick's due_ns): a random point of the `span` before it (the interval, or sleep's
 * wait), not the moment it was due. profd's own wake-up at a tick preempts a thread of the
 * target; on a busy machine that thread may then wait for its CPU a while, longer at some
 * points of its work than at others (the scheduler's choice depends on how long it has run),
 * and a sample taken just before each wake-up falls in no such wait, only at their starts:
 * phases' 150 us phase read 1-3 points high beside two CPU hogs (the program's own clocks
 * sampled at the ticks' due times read it so too), and within 1.3 points at a point of the
 * span before. The waits profd causes are the program's time too, sampled as the rest. */
static inline uint64_t sample_instant(uint64_t due, uint64_t span)
{
    return due > span ? due - jitter(span) : due;
}

/* cputime: a thread (its credit c) has used `ns` more CPU, the interval iv: one sample is due
 * per interval of it. One is taken per look; up to two more intervals stay owed and are taken
 * at the next looks (the poll source looks twice per interval, so it catches up); beyond that
 * they are counted missed (added to *missed). Returns whether a sample is due (cpu_due set). */
static inline bool sched_credit(struct sched_thread *c, uint64_t iv, uint64_t ns,
                                uint64_t *missed)
{
    /* Each sample after a random amount of CPU in [3/4, 5/4) of the interval (1 on
     * average): exactly periodic samples alias with periodic work, as alarm's would. */
    if (!c->cpu_thresh_ns)
        c->cpu_thresh_ns = jittered(iv);
    c->cpu_credit_ns += ns;
    if (c->cpu_credit_ns < c->cpu_thresh_ns)
        return false;
    c->cpu_credit_ns -= c->cpu_thresh_ns;
    c->cpu_thresh_ns = jittered(iv);
    if (c->cpu_credit_ns > 2 * iv) {
        *missed += (c->cpu_credit_ns - 2 * iv) / iv;
        c->cpu_credit_ns = 2 * iv + c->cpu_credit_ns % iv;
    }
    c->cpu_due = true;
    return true;
}

/* How many samples the perf source's rings gather between two reads (profd's own timer).
 * (daemon/DESIGN.md, "How often cputime's rings are read".) */
#define CPUTIME_READ_NS (500 * NS_PER_MS)
#define CPUTIME_BATCH_MAX 48

/* cputime, perf source: the samples a ring gathers between two reads at interval_ns. */
static inline unsigned cputime_batch(uint64_t interval_ns)
{
    uint64_t n = CPUTIME_READ_NS / (interval_ns ? interval_ns : 1);
    return n < 1 ? 1 : n > CPUTIME_BATCH_MAX ? CPUTIME_BATCH_MAX : (unsigned)n;
}
