/* sched_internal.h: what the schedules' files (schedule.c, cputime.c, sched_defer.c, budget.c)
 * share; the rest of the daemon uses schedule.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/queue.h>

#include <ev.h>

#include "sched_ticks.h"
#include "schedule.h"

struct cJSON;

/* ---- schedule.c: the modes, their timers and ticks ---- */

/* The daemon's loop (sched_global_init). */
extern struct ev_loop *sched_loop;
/* The running schedules. */
LIST_HEAD(sched_list, sched);
extern struct sched_list sched_live;
/* Changes at every insertion into or removal from sched_live: a walk that runs ticks (which
 * can end schedules) starts again from the head when it changed. */
extern uint64_t sched_live_gen;

struct tick_batch;
/* One tick of s, due at due_ns, taken at tick_ns, its cost counted. */
/* What a tick is: a wall-clock mode's (alarm, sleep, event's timer), cputime's (an
 * interval of CPU: on-CPU threads only), an event's (a sample of now). */
enum tick_kind { TICK_WALL, TICK_CPU, TICK_EVENT };
void sched_run_tick(struct sched *s, uint64_t tick_ns, uint64_t due_ns, enum tick_kind kind);
/* One alarm tick of s at `now` (due at `due`), and the next one armed; in b (alarm_run), or
 * alone (NULL: its CPU read around it). */
void sched_alarm_tick(struct sched *s, uint64_t now, uint64_t due, struct tick_batch *b);
struct timespec sched_ts_of(uint64_t ns);
/* s's timerfd: fire at `first` and every `period` ns after it; once at `at` (both on
 * CLOCK_MONOTONIC); stopped. 0 or -errno. */
int sched_arm_periodic(struct sched *s, uint64_t first, uint64_t period);
int sched_arm_at(struct sched *s, uint64_t at);
void sched_disarm(struct sched *s);
/* s's next alarm tick (due_ns) waits on the alarm schedules' shared timer. 0 or -errno. */
int sched_alarm_queue(struct sched *s);
/* The result of setting s's timer: a failure recorded (retried by the budget), or one
 * recovered from. */
void sched_timer_result(struct sched *s, int r);
/* Samples the kernel dropped are missed too: counted in s->missed. */
void sched_fold_lost(struct sched *s);
/* Set s's timer for its current interval from now. 0 or -errno. */
int sched_rearm(struct sched *s, uint64_t now);
/* The budget's factor on s's rate: a new interval, and its timer re-gridded from now. */
void sched_set_scale(struct sched *s, double scale, uint64_t now);

/* ---- cputime.c: cputime's credit of CPU time per thread, and its sources ---- */

/* The CPU timers' signal, read through a signalfd (sched_global_init). 0, or -errno when
 * source is CPU_SRC_TIMER and it cannot be received. */
int cputime_global_init(struct ev_loop *loop, enum cpu_source source);
void cputime_global_finish(void);
/* Start counting s's threads' CPU time with the best source there is (s->source says
 * which). 0 or -errno. */
int cputime_start(struct sched *s);
/* s's CPU-clock timer deleted, if it has one. */
void cputime_stop(struct sched *s);
/* s's timerfd fired: the perf source's reads, or the poll source's look. */
void cputime_on_timer(struct sched *s);
/* sched_rearm for cputime. */
int cputime_rearm(struct sched *s, uint64_t now);
/* A new thread of a running cputime schedule: its perf event (perf source). */
void cputime_thread_added(struct sched *s, struct thread *th);
/* A thread exits: what its ring sampled since the last read is read. */
void cputime_thread_exited(struct sched *s, struct thread *th);
/* The rings of threads idle for long go back to counting (the budget's look). */
void cputime_shrink_idle_rings(struct sched *s, uint64_t now);

/* ---- sched_defer.c: alarm's deferred ticks, the schedule's side ---- */

enum defer_how { DEFER_KEEP, DEFER_LEAVE_TICK, DEFER_LEAVE_LATER, DEFER_LEAVE_PREEMPTED };

/* Whether deferral is allowed at all (PROFD_DEFER=0: every alarm tick on time). */
void sched_defer_init(void);
/* After a tick on time (at tick_ns): defer the next ones if the target allows it. */
void sched_defer_try(struct sched *s, uint64_t tick_ns);
/* A deferral's timer set for the end of its batch. */
void sched_defer_arm(struct sched *s);
/* Take s's deferred ticks due before now, then defer on or leave as `how` says. */
void sched_defer_take(struct sched *s, uint64_t now, enum defer_how how);
/* s's timerfd fired at a deferral's deadline (now): its ticks taken. */
void sched_defer_deadline(struct sched *s, uint64_t now);
/* status: the "deferred" object of s (alarm). */
void sched_defer_describe(const struct sched *s, struct cJSON *o);
/* Its arithmetic (test_schedule_ticks): the most ticks a batch may take at interval iv (under
 * 2: no deferral); a batch's deadline, the last of its ticks' windows' end (its span's worth
 * of ticks, within [2, batch], from the interval that starts at next); the hold after a
 * deferral cut short (again: it found a thread waiting for a CPU; run_ticks: the ticks it
 * took); a batch's span halved or doubled within its bounds; whether a deferral woken so
 * often by preemptions is left. */
uint64_t sched_defer_batch_max(uint64_t iv);
uint64_t sched_defer_deadline_ns(uint64_t next, uint64_t iv, uint64_t span_ns, unsigned batch);
uint64_t sched_defer_hold_ns(uint64_t hold_ns, bool again, uint64_t run_ticks);
uint64_t sched_defer_span_halved(uint64_t span_ns);
uint64_t sched_defer_span_doubled(uint64_t span_ns);
bool sched_defer_preempted_often(uint64_t run_preempts, uint64_t ticks);
