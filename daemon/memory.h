/* memory.h: what profd holds, by kind, against max_memory.
 *
 * The samples (every target's ring buffer and stack table) grow while the total stays
 * within three quarters of max_memory: past that a ring keeps its size and overwrites its
 * oldest samples, and a new stack is not recorded (status counts both). The last quarter is
 * for building profiles: a slice or a transaction's profile that would take the total past
 * max_memory is refused, and so is an attach once the total has reached three quarters.
 * The total counts each target's threads, maps and unwind caches, slices being built and
 * their copies, clients' buffers, transactions and the symbolizer's cache too. Why a ring overwrites rather than refusing samples: an
 * operator who sized the bound wants the latest seconds, which is what any bounded buffer
 * keeps; why a slice is refused rather than built: it is asked for by someone who gets the
 * reason and can ask for a shorter window, while running past the bound is what max_memory
 * exists to prevent. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "memacct.h"

struct cJSON;

/* max_memory in bytes (0: no bound). May be called again (reload): a lower bound applies to
 * growth from then on. */
void memory_configure(uint64_t max_memory);
/* What the parts it does not count itself hold now: every target (rings and stack tables
 * included), and the connected clients' buffers. Set once, at start. */
void memory_count_with(size_t (*targets)(void), size_t (*clients)(void));
uint64_t memory_max(void);
/* The count every target's ring and stack table share (their acct), and the perf events'
 * rings (kcopy.c). */
struct memacct *memory_samples(void);
/* Slices: copies handed to the worker and results not yet sent (loop thread). */
void memory_slices_add(ssize_t delta);
/* Transactions kept (loop thread). */
void memory_txns_add(ssize_t delta);
/* Should ended transactions be forgotten early? When they hold an eighth of max_memory or
 * more and the total has reached it: they only split slices by transaction, and like the
 * oldest samples, the oldest of them go first. */
bool memory_txns_shed(void);
/* The symbolizer's cache, as the worker last measured it (any thread). */
void memory_symbolizer_set(size_t bytes);

struct memory_parts {
    size_t samples;      /* rings and stack tables */
    size_t targets;      /* the rest of each target: threads, names, maps, unwind caches */
    size_t slices;
    size_t clients;      /* buffers of connected clients */
    size_t transactions;
    size_t symbolizer;
    size_t total;
};
void memory_get(struct memory_parts *p);
/* The total (as memory_get). */
size_t memory_total(void);
/* Is the total past max_memory? */
bool memory_over(void);
/* May a new process be followed? 0, or -EDQUOT with the reason in why. */
int memory_admit_target(char *why, size_t whylen);
/* May a slice whose work is estimated at `need` bytes be built? 0, or -EDQUOT with why. */
int memory_admit_slice(size_t need, size_t nsamples, char *why, size_t whylen);
/* The daemon section's "memory" object for status. */
struct cJSON *memory_describe(void);
