/* sampler.h: take samples: from a thread blocked in a system call without stopping it, or
 * from a thread in a ptrace stop we asked for. */
#pragma once

#include <stddef.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct target;
struct thread;

/* How running threads are sampled. The blocked ones are always read from /proc and copied
 * without a stop; idle ones reuse their last stack. */
enum sampler_kind {
    SAMPLER_AUTO,   /* the kernel's copy (perf) where the kernel gives it, else a stop */
    SAMPLER_PERF,   /* the kernel's copy; an attach fails where perf events are refused
                       (stacks deeper than the kernel copies are still taken by a stop) */
    SAMPLER_PTRACE, /* a ptrace stop */
};
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
/* Close th's perf event (the thread is gone, or the schedule changes). */
void sampler_perf_close(struct thread *th);
/* Open th's continuous perf event for cputime: with stacks (unless the sampler is ptrace,
 * or its ring could not be had before) or counting only. Returns 0 or -errno. */
int sampler_perf_open_continuous(struct target *t, struct thread *th, uint64_t period_ns,
                                 unsigned batch, bool stacks);
/* Does th's continuous event carry stacks (no stop needed)? */
bool sampler_perf_has_stacks(const struct thread *th);

/* The signal of the timer that bounds the wait for stops, on the loop thread only. */
#define SAMPLER_TIMER_SIGNAL (SIGRTMIN)

/* Allocate the stack-copy buffer and the stop timer. max_stack is the most bytes copied
 * per sample. Call on the loop thread. */
int sampler_init(size_t max_stack);
void sampler_finish(void);

/* One tick for t: sample each thread (reuse, blocked path, or PTRACE_INTERRUPT). With
 * cpu_only, only the threads marked cpu_due, and only if they are on a CPU (running, or
 * runnable): on-CPU stacks for the cputime schedule. */
void sampler_tick(struct target *t, uint64_t tick_ns, bool cpu_only);
/* One thread, now, as a tick would (a transaction's boundary on the thread running it). */
void sampler_sample_one(struct target *t, struct thread *th, uint64_t tick_ns);
/* th is in the interrupt stop we asked for: copy regs and stack, resume it, unwind. */
void sampler_on_stop(struct thread *th);
/* Release a thread's sampler state (its last-stack reference). */
void sampler_thread_reset(struct thread *th);
