/* sampler_internal.h: what the sampler's files share (sampler.c: the tick, a thread's
 * decision, the blocked read, the unwind and the record; kcopy.c: the kernel's copy;
 * defer.c: alarm's deferred ticks; watch.c: switch watches; stops.c: the ptrace stop path).
 * Nothing outside them includes it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "perfsample.h"
#include "pykernel.h"
#include "python.h"
#include "ring.h"
#include "sampler.h"
#include "target.h"
#include "unwind.h"
#include "util.h"

/* A thread this young has its name read at every tick. */
#define YOUNG_NS (20 * NS_PER_MS)

/* The newest sample of the thread's clock stands for a tick it is found running at when it
 * is at most this many intervals old (halves): a thread on a CPU throughout has one per
 * interval of its CPU, but ticks fall anywhere in the first quarter of theirs. */
#define LATEST_MAX_AGE_HALVES 3

/* A one-shot event not asked for this long is closed while the thread's clock serves. */
#define ONESHOT_IDLE_NS (NS_PER_SEC)

/* A thread's clock not used for this long is closed (opened again when it runs). */
#define LATEST_IDLE_NS (10 * NS_PER_SEC)

/* A thread is watched once it had not run at WATCH_QUIET of WATCH_LOOK ticks (a thread woken
 * every 50 ms, say, by a timeout: at 101 Hz, 4 ticks in 5). */
#define WATCH_LOOK 16
#define WATCH_QUIET 12

/* A thread's perf events (kcopy.c perf_open): one-shot, continuous (cputime), its clock
 * (the wall-clock modes' latest), its preemption watch. */
enum stream_kind { STREAM_ONESHOT, STREAM_CONTINUOUS, STREAM_LATEST, STREAM_PREEMPT };

/* The copy of the sample being taken (registers and stack), and its Python frames, read
 * while the thread could not change them (python.h): npy of them, 0 if none. */
extern struct snapshot snap;
extern struct py_frame pyframes[PY_MAX_FRAMES];
extern int npy;

/* Whether t's running threads are stopped for their Python frames (a Python target whose
 * frames the kernel does not read: pykernel.h). */
static inline bool py_stops(const struct target *t)
{
    return t->py.status == PYS_OK && !t->py.kernel;
}

/* sampler.c */
void push(struct target *t, struct thread *th, uint64_t when, uint32_t stack,
          enum sample_path path);
uint32_t unwind_and_intern(struct target *t, struct thread *th, enum unwind_end *endp,
                           bool boundary);
uint64_t stack_limit(struct target *t, struct thread *th, uint64_t sp);
void set_last(struct thread *th, uint32_t stack, uint64_t run_ns, uint64_t pcount);
bool push_last(struct target *t, struct thread *th, uint64_t tick_ns);
int read_blocked(struct target *t, struct thread *th, uint64_t *run, uint64_t *pcount,
                 uint32_t *id, enum unwind_end *end, uint64_t *sp, uint64_t *seen_ns,
                 bool boundary);
void young_name(struct thread *th);

/* kcopy.c */
uint32_t want_stack(const struct thread *th);
void learn_perf_stack(struct thread *th, uint64_t sp);
uint32_t unwind_copy(struct target *t, struct thread *th, const struct perf_stream *ps,
                     uint64_t time_ns);
uint32_t unwind_kernel_sample(struct target *t, struct thread *th,
                              const struct perf_sample *ps);
bool ring_room(size_t ring);
int perf_open_once(struct thread *th, enum stream_kind kind, uint64_t period,
                   uint32_t stack, unsigned batch);
int perf_open(struct target *t, struct thread *th, enum stream_kind kind,
              uint64_t period, uint32_t stack, unsigned batch);
void perf_expire(struct target *t, struct thread *th);
bool refused_for_good(int r);
bool perf_oneshot(struct target *t, struct thread *th, const struct sample_req *rq);
void preempt_watch_open(struct target *t, struct thread *th, uint32_t stack);
bool preempted_at(const struct thread *th, uint64_t tick_ns);
bool perf_preempted(struct target *t, struct thread *th, const struct sample_req *rq);
bool perf_latest(struct target *t, struct thread *th, const struct sample_req *rq);

/* watch.c */
bool watches_release(uint64_t now);
void watch_open(struct target *t, struct thread *th, uint64_t now);
void watch_quiet(struct thread *th, uint64_t head, bool boundary);
bool watch_spares(struct target *t, struct thread *th, uint64_t tick_ns, bool wall,
                  uint64_t *head);

/* stops.c */
void await_counted(struct target *t, unsigned pending);

/* stops.c: the stop timer set up and given back (sampler_init, sampler_finish). */
void stops_init(void);
void stops_finish(void);

/* defer.c: alarm's deferred ticks, their rules as functions of the thread's state and plain
 * numbers (tests/unit/test_defer.c). */
/* A running thread's clock ring while deferred: at most this much locked memory, for the
 * batch's samples and DEFER_MARGIN more (profd late at the batch's end: a busy machine). */
#define DEFER_RING_MAX (1024u * 1024u + 4096u) /* (1 MiB of ring and its header page) */
#define DEFER_MARGIN 4u
#define DEFER_MIN_BATCH 4
/* Ticks of a running thread taken at once before its share of the CPU is judged. */
#define DEFER_STARVED_MIN_TICKS 16
/* A batch is left when more than this share (1 / it) of a running thread's ticks fell in its
 * waits for a CPU where its preemption watch (a few preemptions) cannot say where it waited:
 * those ticks took its clock's sample from before the preemption, not where it waited, as a
 * tick on time would have (perf_preempted). Up to an eighth of them, each at most an
 * interval of the thread's CPU from where it waited, is below the accuracy profd keeps
 * (test_truth: 2 points of a phase's share); beside CPU hogs the waits are a third to a
 * half of its time; on a machine running profd, its client and little else, 1-12%. */
#define DEFER_WAIT_DIV 8
/* How th can be deferred at tick_ns: DEFER_RUNNING (running, with its clock's sample at most
 * max_age old, or waiting for a CPU since its preemption), DEFER_BLOCKED (blocked where its
 * last stack says), or DEFER_NONE (not at all: stopped, young, in a repair, a one-shot's
 * sample still to read...). */
int defer_thread_how(const struct thread *th, uint64_t tick_ns, uint64_t max_age);
/* The batch b made smaller (down to DEFER_MIN_BATCH - 1 at least) until a running thread's
 * clock ring copying stack bytes per sample stays within DEFER_RING_MAX. */
unsigned defer_batch_fit(unsigned b, uint32_t stack);
/* A running thread's share of a CPU, judged once it had DEFER_STARVED_MIN_TICKS deferred
 * ticks (returns whether it was; the counts then start over): *starved if its clock gave
 * fewer samples than half its ticks (less than half a CPU). */
bool defer_share_judged(uint32_t ticks, uint32_t clock_samples, bool *starved);
/* Whether a running thread's batch is left: its change watch saw it wait waits_ns for a CPU
 * in the batch of n ticks of interval_ns, and its preemption watch could not say where at
 * unknown of its nr ticks: more than 1/DEFER_WAIT_DIV of the batch, as many of them. */
bool defer_waits_too_long(size_t unknown, uint64_t waits_ns, size_t nr, size_t n,
                          uint64_t interval_ns);
