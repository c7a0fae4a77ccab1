/* fds.h: profd's descriptor budget. Every traced thread costs descriptors (its three /proc
 * files, a perf event in cputime mode): a process with thousands of threads must not take
 * the ones that clients, each target's own files and the symbolizers need. Descriptors per
 * thread may use the limit on open files (RLIMIT_NOFILE) less a reserve; a thread beyond it
 * goes without (sampler.c then samples it by stopping it). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Read the limit (call after raising it). */
void fds_init(void);
/* Take n per-thread descriptors from the budget; false (counted) if it has not got them. */
bool fds_take(unsigned n);
/* The same for something that only saves profd work (a switch watch): only while a quarter
 * of the budget stays free for threads' files. */
bool fds_take_spare(unsigned n);
/* Give back n taken with fds_take or fds_take_spare. */
void fds_give(unsigned n);

struct fds_stats {
    uint64_t limit;      /* RLIMIT_NOFILE (soft) */
    uint64_t reserve;    /* kept for everything but threads */
    uint64_t per_thread; /* taken now by threads */
    uint64_t refused;    /* threads (or perf events) that went without, since start */
    uint64_t open;       /* descriptors open now in profd (all of them; -1: unknown) */
};
void fds_get_stats(struct fds_stats *st);
