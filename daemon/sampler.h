/* sampler.h: take samples: from a thread blocked in a system call without stopping it, or
 * from a thread in a ptrace stop we asked for. */
#pragma once

#include <stddef.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "target.h"

const char *sampler_kind_name(enum sampler_kind k);
int sampler_kind_parse(const char *s, enum sampler_kind *out);
/* Can process pid be sampled from the kernel's copy? 0, or -errno of perf_event_open (and
 * the ring's mmap) on its leader. */
int sampler_probe(pid_t pid);
/* Read what the kernel sampled for t's threads since the last look (before a slice or a
 * transaction's profile, so that the window is complete). */
void sampler_flush(struct target *t);
/* Read th's ring (its perf event woke us, or a flush). */
void sampler_drain_thread(struct target *t, struct thread *th);
/* Open th's continuous perf event for cputime: with stacks (unless the sampler is ptrace,
 * or its ring could not be had before) or counting only. Returns 0 or -errno. */
int sampler_perf_open_continuous(struct target *t, struct thread *th, uint64_t period_ns,
                                 unsigned batch, bool stacks);
/* Does th's continuous event carry stacks (no stop needed)? */
bool sampler_perf_has_stacks(const struct thread *th);
/* Does th's continuous event carry stacks of another size than its unwinds now want (open
 * it again)? */
bool sampler_perf_copy_resized(const struct thread *th);

/* The signal of the timer that bounds the wait for stops, on the loop thread only. */
#define SAMPLER_TIMER_SIGNAL (SIGRTMIN)

/* Allocate the stack-copy buffer and the stop timer. max_stack is the most bytes copied
 * per sample. Call on the loop thread. */
int sampler_init(size_t max_stack);
void sampler_finish(void);

/* What a tick asks of the sampler. */
struct sample_req {
    uint64_t tick_ns; /* when it is taken (now) */
    uint64_t due_ns;  /* the moment it stands for (when it was due, at most tick_ns): a thread
                         found waiting for a CPU is taken where it waited then */
    bool cpu_only;    /* cputime: only the threads marked sched.cpu_due, and only if they are
                         on a CPU (running, or runnable): on-CPU stacks */
    bool event;       /* an event's tick (event mode): a sample of now: a running thread's is a
                         one-shot asked for at the tick, not its clock's newest, which may be
                         an interval old */
    bool boundary;    /* a transaction's boundary (sampler_sample_boundary): a sample of that
                         moment: a running thread is stopped rather than sampled after 0.1 ms
                         more of its CPU (by then it may have left the transaction) */
};
/* One tick for t: sample each thread (reuse, blocked path, the kernel's copy or
 * PTRACE_INTERRUPT) as rq asks. */
void sampler_tick(struct target *t, const struct sample_req *rq);
/* A transaction's boundary: sample thread tid of t now (if it is one of its threads),
 * unless it had a boundary sample less than one (effective) interval ago, so that a stream
 * of short transactions cannot raise the sampling rate beyond twice the schedule's. At a
 * finish, window_ns is the transaction's start: one that lasted an interval or more gets
 * its sample anyway while its thread has fewer than two in it. */
void sampler_sample_boundary(struct target *t, pid_t tid, uint64_t now, uint64_t window_ns);
/* alarm's deferred ticks (defer.c). Begin: after a tick at tick_ns, if every thread of t
 * is blocked at its last stack or running with its clock's sample of that tick, open their
 * change watches and give running threads a clock that holds a batch of at most max_batch
 * ticks: true, the batch in *batch, and in *epfd a descriptor that polls readable once a
 * blocked thread is switched in or a running one switched out (sampler_defer_changed says
 * whether that changed anything: a preemption does not). */
bool sampler_defer_begin(struct target *t, uint64_t tick_ns, unsigned max_batch,
                         unsigned *batch, int *epfd);
/* When the first thread of t changed since the batch began, so that its later ticks cannot
 * be taken from the batch: a blocked one switched in, a running one blocked and switched in
 * again, one born; UINT64_MAX if none. *any: whether any thread changed, including a running
 * one that blocked and has stayed blocked (its ticks since are read from where it is now). */
uint64_t sampler_defer_changed(struct target *t, bool *any);
/* Whether a change watch of t hung up (its thread exited). */
bool sampler_defer_hung_up(struct target *t);
/* The samples of ticks[0..n) (in order, all before sampler_defer_changed's time). */
bool sampler_defer_ticks(struct target *t, const uint64_t *ticks, size_t n);
/* Open again, with the copy size their unwinds now want, the batch's clocks of the running
 * threads whose size changed (after sampler_defer_ticks: their rings are read), for a
 * batch of the size sampler_defer_begin gave. Returns false where one could not be opened
 * (end the deferral). */
bool sampler_defer_resize(struct target *t, unsigned batch);
/* Close the watches and the batch's clocks; the next tick is taken on time. going_on: the
 * schedule samples on (its running threads' clocks are opened again at once). */
void sampler_defer_end(struct target *t, bool going_on);
/* Handle every pending ptrace event and child exit (targets_wait_event until none), taking
 * the samples of the stops we asked for among them. */
void sampler_reap(void);
