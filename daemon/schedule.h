/* schedule.h: when to sample a target. Kept apart from the sampler: the sampler takes a sample
 * when told; the scheduler decides when, and which threads.
 *
 * Four modes, after Sentry's Python profiler's schedulers, out of process:
 *   sleep    the next sample one interval after the previous one finished (drifts by the
 *            cost of each sample, like a loop around time.sleep);
 *   event    sleep, but woken at once by events (a slice request; transaction boundaries
 *            once the client library calls sched_event);
 *   alarm    fixed-rate ticks on the monotonic clock anchored at start (like ITIMER_REAL,
 *            which is on the wall clock), each at a random point of the first quarter of
 *            its interval (against aliasing): no drift; ticks missed because the daemon was
 *            late are counted, not bunched;
 *   cputime  one sample of a thread per interval of that thread's CPU time (where
 *            ITIMER_PROF counts the whole process's and samples whichever thread): only
 *            threads that ran; an idle process gets none, two busy threads twice the rate
 *            of one. On-CPU stacks only.
 * The wall-clock modes sample every thread at each tick, blocked ones without stopping them.
 *
 * The CPU budget (budget.c's on_budget and budget_divide, set by sched_set_budget_pct) lowers
 * the rates of the targets, fairly, when sampling them all would cost more than the budget.
 *
 * The files: schedule.c (the modes, their timers and ticks), cputime.c (cputime), sched_defer.c
 * (alarm's deferred ticks), budget.c (the budget), sched_ticks.h (their arithmetic). They call
 * down into sampler.c, and into target.c to attach, detach and find threads; target.c tells
 * them of its threads' lives through sched_target_hooks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/queue.h>

#include <ev.h>

#include "lateness.h"
#include "sampler.h"

struct target;
struct thread;
struct target_hooks;

enum sched_mode { SCHED_SLEEP, SCHED_EVENT, SCHED_ALARM, SCHED_CPUTIME };

/* alarm's deferral counters, reported under "sampling.deferred" by these names, in this
 * order (sched_defer.c): batches begun, ticks taken in them, wake-ups, batches cut short by a
 * thread's change, wake-ups for a running thread's preemption, deferrals left for
 * preemptions and for threads that had no CPU. */
#define SCHED_DEFER_COUNTS(X)                                                                      \
    X(batches) X(ticks) X(wakeups) X(cut_short_by_a_change) X(wakeups_for_a_preemption)          \
    X(left_for_preemptions) X(left_for_threads_without_a_cpu)
#define SCHED_COUNT_MEMBER(name) uint64_t name;
struct sched_defer_counts {
    SCHED_DEFER_COUNTS(SCHED_COUNT_MEMBER)
};

/* How cputime learns that a thread has used an interval of CPU. */
enum cpu_source {
    CPU_SRC_AUTO,  /* the best that works: perf, then timer, then poll */
    CPU_SRC_PERF,  /* a perf task-clock event per thread, overflowing every interval */
    CPU_SRC_TIMER, /* a POSIX timer on the process's CPU clock, then schedstat per thread */
    CPU_SRC_POLL,  /* schedstat of every thread polled twice per interval of wall time */
};

const char *sched_mode_name(enum sched_mode m);
int sched_mode_parse(const char *s, enum sched_mode *out);
const char *cpu_source_name(enum cpu_source s);
int cpu_source_parse(const char *s, enum cpu_source *out);

struct sched {
    struct ev_loop *loop;
    struct target *t;
    bool running;
    /* Every running schedule, for the budget and the CPU timers' signal (their own list,
     * sched_live, rather than a walk of target.c's targets). */
    LIST_ENTRY(sched) link;
    enum sched_mode mode;
    enum cpu_source source; /* in use (cputime only) */
    unsigned hz;            /* requested */
    uint64_t interval_ns;   /* requested interval */
    double scale;           /* budget's factor on the rate, (0, 1] */
    uint64_t eff_interval_ns; /* interval_ns / scale */
    /* (What a wake-up's walk of every schedule reads, alarm_run, kept together.) */
    uint64_t next_ns;       /* alarm: start of the next tick's interval on the grid */
    uint64_t due_ns;        /* alarm: when the armed tick is due (its lateness is measured) */
    /* alarm: its tick waits on the alarm schedules' one timer (schedule.c, sched_alarm_queue);
     * its own timerfd is set only for a deferral's deadline (own_armed). */
    bool queued;
    bool own_armed;
    /* Wall-clock modes, and cputime's poll source: a timerfd (CLOCK_MONOTONIC, to the
     * nanosecond: libev's own timers wait in epoll_wait, to the millisecond, rounded up,
     * which at 999 Hz loses a tick in six) watched by the loop. */
    int tfd;
    ev_io tio;
    uint64_t wait_until_ns; /* sleep, event: when the wait under way ends */
    uint64_t wait_ns;       /* and how long it is */
    /* alarm: in a wake-up's batch of ticks (alarm_run), the wall time of its own, and the
     * next schedule that ticked in it. */
    uint64_t batch_wall_ns;
    struct sched *batch_next;
    struct lateness lateness; /* alarm: how late ticks ran */
    timer_t cpu_timer;      /* cputime's timer source */
    bool have_cpu_timer;

    /* Counters, since attach. */
    uint64_t ticks;         /* times the sampler ran */
    uint64_t missed;        /* ticks (alarm) or CPU intervals (cputime) not sampled: late */
    uint64_t lost_seen;     /* the target's stats.perf.lost counted in missed so far */
    uint64_t coalesced;     /* alarm: ticks run in another schedule's wake-up */
    bool reading;           /* cputime, perf: its timer reads the rings (some carry stacks) */
    uint64_t events;        /* event mode: samples taken at an event */
    uint64_t last_tick_ns;  /* when the sampler last ran */
    uint64_t cost_ns;       /* daemon CPU spent sampling this target */
    uint64_t throttled_ns;  /* time spent with scale < 1 */
    /* Budget window. */
    uint64_t win_cost_ns, win_ticks, win_start_ns;
    uint64_t win_samples;   /* the target's sample count when the window began */
    uint64_t win_missed;    /* missed when the window began */
    double demand;          /* CPU ns per second this target would cost at scale 1, on time */
    double cost_per_tick;   /* smoothed CPU ns per tick, the loop's overhead included */
    double recent_hz;       /* ticks per second over the last budget window */
    double recent_sps;      /* samples (buffer entries) per second, same window */
    uint64_t scale_since_ns;
    /* Its timer could not be set (timerfd_settime, timer_settime): the -errno, 0 once it is
     * set again (retried every budget period), and how often that happened. */
    int timer_err;
    uint64_t timer_failures;
    /* alarm: ticks deferred (defer.c, sampler_defer_begin): the batch's length in ticks,
     * when it ends, the watcher of the threads' change watches; after a batch cut short by
     * a change, none begins before defer_hold_until_ns (the hold doubles while deferrals keep
     * being cut short). */
    bool deferred;
    unsigned defer_batch;
    uint64_t defer_deadline_ns;
    ev_io dio;
    uint64_t defer_hold_until_ns, defer_hold_ns;
    uint64_t defer_run_ticks; /* ticks taken since the deferral began */
    uint64_t defer_span_ns;   /* a batch's span now (sched_defer.c: DEFER_MAX_NS at most) */
    uint64_t defer_begin_ns;  /* when the deferral began */
    uint64_t defer_run_preempts; /* wake-ups for a running thread's preemption since then */
    struct sched_defer_counts defer_count;
};

/* Set the daemon-wide state: the loop, the cputime source to use (CPU_SRC_AUTO: the best
 * available) and the sampling budget in percent of one CPU (0: none). Blocks the signal of
 * the CPU timers and reads it through a signalfd; call before starting other threads.
 * Returns 0, or -errno when source is CPU_SRC_TIMER and the CPU timers' signal cannot be
 * received (with any other source that is logged and cputime does without the timers). */
int sched_global_init(struct ev_loop *loop, enum cpu_source source, double max_cpu_pct);
/* The budget's look, now, if it was due within a third of its period: called after each
 * loop iteration, so that it shares the wake-up of whatever woke the daemon. */
void sched_chores_early(void);
/* Run the repeating timer w's callback cb now, and restart w, if w is active and due within
 * a third of its period. Returns whether it ran. */
bool sched_timer_run_early(struct ev_loop *loop, ev_timer *w,
                           void (*cb)(struct ev_loop *, ev_timer *, int));
void sched_global_finish(void);
double sched_budget_pct(void);
/* A new budget (configuration reload); applied at the next division (0.25 s). */
void sched_set_budget_pct(double pct);

int sched_start(struct sched *s, struct ev_loop *loop, struct target *t, enum sched_mode mode,
                unsigned hz);
/* Attach to process pid (target_attach) and start its schedule: the attach of a request or
 * of a transaction's process. With sampler perf, an attach that the kernel would refuse
 * perf events is refused (-EPERM) before a thread is seized. Returns as target_attach, and
 * -EIO also when the schedule cannot be started (why says why). */
int sched_attach(pid_t pid, enum sched_mode mode, unsigned hz, uint64_t buffer_ns,
                 enum sampler_kind sampler, struct target **out, char *why, size_t whylen);
/* What the schedules hear of the targets' lives (targets_init). */
extern const struct target_hooks sched_target_hooks;
void sched_stop(struct sched *s);
/* Change the mode and/or rate of a running schedule. Returns 0 or -errno. */
int sched_reconfigure(struct sched *s, enum sched_mode mode, unsigned hz);
/* An event (slice request, transaction boundary): in event mode, sample now and start the
 * wait over. Returns whether a sample was taken. */
bool sched_event(struct sched *s);
/* The effective rate after the budget. */
double sched_effective_hz(const struct sched *s);
/* alarm: take s's deferred ticks due by now, before the buffer is read (a slice) or added
 * to out of turn (a transaction's boundary sample); with leave, the next tick is taken on
 * time again (its timer fires at once if it is due). */
void sched_catch_up(struct sched *s, bool leave);
/* How a target is sampled, for status and profile metadata (a new object). */
struct cJSON *sched_describe(const struct sched *s);
