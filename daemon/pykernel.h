/* pykernel.h: a Python target's running threads sampled without a stop: their Python frames
 * read in the kernel at the instant of each perf sample, by an eBPF program (bpf/
 * pyframes.bpf.c) attached to the thread's perf events, and paired here with the same
 * sample's stack copy.
 *
 * The program is loaded once, when the first Python target comes, on a thread of its own
 * (the targets' threads are stopped for their frames until it is loaded, then switched
 * over), and not again once the kernel refused it: no CAP_BPF or CAP_PERFMON, no BPF or no
 * program type, a seccomp filter. Each Python process profd reads is in its map with its version's layout; the
 * program finds the interrupted thread's state, walks its chain and writes one record per
 * sample into a ring buffer, stamped with the perf event it ran for and the time. profd
 * reads the ring buffer before it reads a perf sample of such a thread, keeps each thread's
 * records per event in arrival order, and takes for a sample the record of the same event
 * written at most PYK_PAIR_NS after it (the program runs in the overflow, right after the
 * kernel stamped the sample): older records are those of samples not read (a clock's
 * newest sample only is read) and go.
 *
 * Where this cannot be (refused, or PROFD_PYTHON_BPF=0), the target's running threads are
 * stopped for their frames (perf.stopped_for_python), and status says why. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "pyframes.h"

struct target;
struct thread;

/* The perf events a record can come from (bpf/pybpf.h enum pybpf_kind). */
enum pyk_event { PYK_CLOCK, PYK_LATEST, PYK_PREEMPT, PYK_EVENTS };

/* Most a record's time may follow its sample's. */
#define PYK_PAIR_NS 200000ull

/* A thread's records not yet paired, one queue per event (sampler_thread.h, which frees
 * them with the thread's events). */
struct pyk_queue {
    uint8_t *buf;
    uint32_t head, tail, cap;
    uint64_t moved; /* bytes moved to its front, in all (tests/unit/test_pykernel.c) */
};

struct ev_loop;
/* Set up (at start): the loop on which the program's loader says it is done. Loads
 * nothing. */
void pyk_init(struct ev_loop *loop);
/* After t's runtime was looked for (attach, new maps, exec): t->py.kernel says whether its
 * frames come from the kernel from now on, t->py.kernel_why why not. Its threads' events
 * opened before keep what they had (the caller reopens them). */
void pyk_target_update(struct target *t);
/* t is going: its map entry goes. */
void pyk_target_forget(struct target *t);
/* Attach the program for event ev to perf event fd, a software event or (tracepoint) the
 * sched_switch tracepoint's, of a thread of t. 0, or -errno (t->py.kernel is then false: its
 * frames are read in stops from now on). */
int pyk_attach(struct target *t, int fd, enum pyk_event ev, bool tracepoint);
/* The Python frames of th's sample of event ev taken at time_ns, from its record: how many
 * into out (0: none, counted why), PYK_MISSING when it has no record (counted), or -1 when
 * t's frames are not read in the kernel. */
#define PYK_MISSING (-2)
int pyk_take(struct target *t, struct thread *th, enum pyk_event ev, uint64_t time_ns,
             struct py_frame *out);
/* The queue's parts, pure (tests/unit/test_pykernel.c): append a record (the oldest dropped
 * for room, counted); take the frames of the sample at time_ns (as pyk_take, counting in
 * ks: PYK_MISSING when it has none). */
struct pybpf_rec;
struct py_kernel_stats;
/* Room for need more bytes at q's tail (gokernel.c's queue too): the room records taken at
 * its front left reclaimed, the queue grown up to max bytes, then its oldest records
 * dropped (size_at: the size of the record at a position); stale: a queue whose older
 * records no sample will want once newer ones came (a preemption watch's: only a thread's
 * latest switch is read) drops its older half at once, so that a queue kept full does not
 * move all it holds at every record. The number dropped, or PYK_NO_ROOM if need is more
 * than a queue of max holds. */
#define PYK_NO_ROOM (~0u)
unsigned pyk_queue_room(struct pyk_queue *q, size_t need, uint32_t max, bool stale,
                        size_t (*size_at)(const uint8_t *));
void pyk_queue_push(struct pyk_queue *q, const struct pybpf_rec *r, struct py_kernel_stats *ks);
int pyk_queue_take(struct pyk_queue *q, uint64_t time_ns, struct py_frame *out,
                   struct py_kernel_stats *ks);
/* Whether the program can read rt's layout (every field within what it reads of a frame and
 * of a code object: 3.13+'s come from the target's memory). */
bool pyk_layout_fits(const struct py_runtime *rt);
/* The program's counters: records written, records the ring buffer had no room for. */
void pyk_counters(uint64_t *records, uint64_t *full);
/* For Go targets (gokernel.c), which the same program serves: load it (as for Python: 0,
 * -EINPROGRESS, or -EPERM with *why said), its Go processes' map (-1 before it is loaded),
 * read its ring buffer (records go to their threads' queues). */
int pyk_load(const char **why);
int pyk_goprocs_fd(void);
/* The same for the thread context's programs (threadctx.h) and their processes' map. */
int pyk_load_ctx(const char **why);
int pyk_ctxprocs_fd(void);
/* A process went into the context's map (+1) or out of it (-1): the Python and Go
 * programs end in the context's while there is one. */
void pyk_ctx_targets(int delta);
void pyk_consume(void);
/* Whether the program is loaded; why not if it is not (NULL: not tried yet). */
bool pyk_loaded(const char **why);
/* Unload (at exit). */
void pyk_shutdown(void);
