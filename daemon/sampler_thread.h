/* sampler_thread.h: the sampler's state in each thread (struct thread's member smp): its perf
 * events and what it learnt from them, its switch watch, its deferred ticks. Initialised
 * and released here (sampler_thread.c), a leaf below target.c, which releases it with the
 * thread; used by the sampler's files (sampler.c, kcopy.c, defer.c, watch.c, stops.c) and
 * cputime.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <ev.h>

#include "perfsample.h"
#include "pykernel.h"

struct thread;

/* What a thread was doing when alarm's ticks were deferred (defer.c). */
enum { DEFER_NONE, DEFER_BLOCKED, DEFER_RUNNING };

struct sampler_thread {
    bool ran_last_tick;         /* a wall-clock tick found it running (sampler.c) */
    /* Its perf event (perfsample.h): continuous in cputime (perf source), one-shot in the
     * wall-clock modes (opened the first time it is seen running). */
    struct perf_stream ps;
    ev_io perf_io;              /* cputime: the ring's wake-ups */
    uint32_t perf_stack;        /* stack bytes its samples should copy (kcopy.c
                                   learn_perf_stack): 0, the first size */
    uint32_t stack_deepest;     /* the most stack any of its complete unwinds needed */
    uint32_t stack_look_need;   /* the most needed by the complete unwinds since the copy's
                                   size was last judged, stack_look_n of them */
    uint32_t stack_look_n;
    uint32_t stack_look;        /* complete unwinds after which the size is judged again */
    bool stack_shrunk;          /* its copy's size was last set by shrinking it */
    uint32_t oneshot_waiting;   /* wall-clock ticks since its one-shot was asked for that found
                                   it running still (waiting for a CPU): its sample stands for
                                   them too (kcopy.c perf_oneshot) */
    uint16_t perf_deep_left;    /* running samples still to take by a stop: its stack is
                                   deeper than the kernel copies */
    bool perf_refused;          /* its event could not be opened: sampled by stopping */
    uint64_t perf_last_ns;      /* its latest sample from the kernel's copy */
    /* The wall-clock modes: its event whose newest sample stands for a tick it is found
     * running at (perfsample.h, latest), that sample's time and stack (one reference). */
    struct perf_stream pl;
    uint64_t pl_last_ns;
    uint32_t pl_stack;
    bool pl_refused;            /* that event could not be opened: the one-shot is asked */
    /* Beside that clock, its preemption watch (perfsample.h): where it waits for a CPU, and
     * the stack of the preemption it waits since (one reference). */
    struct perf_stream pw;
    uint32_t pw_stack;
    uint64_t pw_ns;             /* when the preemption of pw_stack was sampled */
    uint64_t pw_tick_ns;        /* the latest tick that took pw_stack */
    uint64_t pw_due_ns;         /* that tick's due time: known waiting there then */
    uint64_t blocked_tick_ns;   /* the latest wall-clock tick that did not find it running */
    bool pw_refused;            /* could not be opened: ticks that find it waiting take its
                                   clock's sample or a one-shot's */
    /* The wall-clock modes: its switch watch (perfsample.h), opened once it had not run at
     * most ticks (watch.c, WATCH_QUIET): while its head stays at sw_head (read before the
     * schedstat read that found the thread as run_ns/pcount say), that read is not needed. */
    struct perf_stream sw;
    uint64_t sw_head;
    bool sw_valid;              /* sw_head stands for run_ns/pcount */
    bool sw_refused;            /* could not be opened: schedstat at every tick */
    uint16_t sw_ticks;          /* ticks counted: towards a watch, or of the watch */
    uint16_t sw_quiet, sw_moved; /* of those, it had not run (before a watch); the watch
                                    found moved */
    uint64_t sw_retry_ns;       /* closed for running too often: not again before then */
    /* alarm's deferred ticks (defer.c): its change watch (perfsample.h), what it was
     * doing when they began (DEFER_*: blocked at last_stack, or running with ps a
     * continuous clock), and that clock's newest sample read (one reference). */
    struct perf_stream chg;
    uint8_t defer_kind;
    uint32_t dc_stack;
    uint64_t dc_ns;
    uint64_t defer_block_ns;    /* running, it blocked then and has stayed blocked */
    uint32_t defer_ticks, defer_clock; /* running: ticks taken, clock samples read, since
                                        * its share of the CPU was last judged */
    /* A Python target's: the records of its Python frames the kernel wrote with its events'
     * samples, not yet paired with them (pykernel.h), one queue per event. */
    struct pyk_queue pyq[PYK_EVENTS];
    struct pyk_queue goq[PYK_EVENTS]; /* a Go target's goroutine copies (gokernel.h) */
    struct pyk_queue ctxq[PYK_EVENTS]; /* its OpenTelemetry contexts (threadctx.h) */
};

/* Set up the module: the loop its event watchers are on. */
void sampler_threads_init(struct ev_loop *loop);
/* th's state before its first sample: no event, no stack held. */
void sampler_thread_init(struct thread *th);
/* Give back everything th's state holds: every event (descriptors and rings) and their
 * stacks' references. */
void sampler_thread_release(struct thread *th);
/* Close th's continuous (cputime) or one-shot event. */
void sampler_stream_close(struct thread *th);
/* Close the event of th whose newest sample stands for a tick (wall-clock modes). */
void sampler_latest_close(struct thread *th);
/* Close its preemption watch (perfsample.h), if open. */
void sampler_preempt_close(struct thread *th);
/* Drop the last stack of th's clock (its reference), so that no tick takes it again. */
void sampler_forget_latest(struct thread *th);
/* Close th's change watch and its deferred ticks' clock, and drop their stack. */
void sampler_defer_close(struct thread *th);
/* Close th's switch watch, if it has one. */
void sampler_watch_close(struct thread *th);
