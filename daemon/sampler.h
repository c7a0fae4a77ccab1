/* sampler.h: take samples: from a thread blocked in a system call without stopping it, or
 * from a thread in a ptrace stop we asked for. */
#pragma once

#include <stddef.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct target;
struct thread;

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
