/* perfsample.h: a thread's perf event, whose samples the kernel takes: a task-clock event on
 * one thread with its own ring, carrying (for stack samples) the thread's user registers and
 * the top of its user stack, copied by the kernel in the sampling interrupt. The thread is
 * never stopped; its copy is unwound later, like a ptrace copy.
 *
 * Two uses:
 *   continuous  cputime: one sample per period of the thread's CPU time, for as long as
 *               the event is open; its reader reads the ring on a timer of its own and
 *               does not poll it: the kernel's wake-up, once per ring's worth of samples
 *               written, then finds nobody to wake (a wake-up is paid in the target's
 *               interrupt: ~60 us per sample here if every sample woke the reader);
 *   latest      the wall-clock modes: one sample per interval of the thread's CPU time, in
 *               a ring the kernel overwrites; at a tick, a thread found running is
 *               represented by its newest sample (perfs_latest): nothing to ask of the
 *               kernel at the tick, no interrupt of the target's CPU to arm anything;
 *   one-shot    the wall-clock modes' fallback, for a running thread without a recent
 *               sample (its first, or one that got little CPU): the event is disabled; perfs_arm at a tick enables
 *               it for one sample, taken after ONESHOT_PERIOD_NS of the thread's CPU time
 *               (the closest perf has to "sample this thread now"; with 10 us it took
 *               none here), and read at the next tick or before a slice.
 * Samples are stamped on CLOCK_MONOTONIC (use_clockid), the clock of the buffers, slices
 * and transactions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct snapshot;

#define ONESHOT_PERIOD_NS 100000u
/* The kernel's bound on a stack copy (perf caps sample_stack_user below 65535, 8-aligned). */
#define PERFS_MAX_STACK 65528u
#define PERFS_MIN_STACK 8192u

struct perf_stream {
    int fd;              /* -1: none */
    uint8_t *buf;        /* the mmapped ring: a header page, then data_size bytes */
    size_t data_size;    /* a power of two */
    uint32_t stack_size; /* bytes of stack per sample; 0: no registers or stack (counts only) */
    bool continuous;
    bool latest;         /* an overwritable ring: only its newest sample is read */
    uint64_t seen_head;  /* latest: data_head at the last read */
    bool armed;          /* one-shot: enabled, its sample not yet read */
    bool limit_left;     /* one-shot: armed since its last sample (the kernel's event limit,
                            which only a sample takes back down, still holds that arm) */
    uint64_t armed_ns;   /* when (the tick) */
    uint64_t period_ns;  /* the period asked for (perfs_rejitter draws around it) */
    uint32_t since_drawn; /* samples read since the period was last set */
    /* A change watch of a running thread: when it was last preempted and not yet switched in
     * again (0: it was not), and the time it waited for a CPU since the last
     * perfs_take_waited (perfs_first_block reads it). */
    uint64_t out_ns, waited_ns, waits_pos; /* (records before waits_pos are counted) */
    uint64_t opened_ns;  /* a preemption watch: when it was opened */
    bool tracepoint;     /* a preemption watch on the sched_switch tracepoint */
};

/* Why perf_event_open or the ring's mmap was refused, for status and the log. */
struct perfs_totals {
    uint64_t streams;     /* open now */
    uint64_t ring_bytes;  /* mapped now */
    uint64_t opened, open_failed;
    uint64_t lost;        /* samples the kernel dropped (PERF_RECORD_LOST) */
    int last_err;         /* -errno of the latest refusal, 0: none */
};

/* The page size and the scratch record (perfs_open calls it). Returns 0 or -ENOMEM. */
int perfs_init(void);
void perfs_stream_init(struct perf_stream *ps);
/* Open a task-clock event on tid: period_ns of its CPU time per sample; stack_size bytes of
 * stack per sample (0: none); continuous (enabled now; with stacks its ring holds `batch`
 * samples and 8 more, and its watermark is the whole ring; counting only, it wakes a poller
 * at every sample) or one-shot (disabled until perfs_arm). Returns 0 or -errno
 * (-EACCES/-EPERM: perf refused by perf_event_paranoid, capabilities or a seccomp filter;
 * -EMFILE; -ENOMEM: no locked memory for the ring, perf_event_mlock_kb then RLIMIT_MEMLOCK). */
int perfs_open(struct perf_stream *ps, pid_t tid, uint64_t period_ns, uint32_t stack_size,
               bool continuous, unsigned batch);
/* Open a task-clock event on tid whose ring the kernel overwrites (written backward, mapped
 * read-only): one sample per period_ns of the thread's CPU time, of which only the newest is
 * read (perfs_latest), at a tick. The ring holds three samples: the newest, one the kernel may
 * write while it is read, and room for the check that it did not overwrite it. Returns as
 * perfs_open. */
int perfs_open_latest(struct perf_stream *ps, pid_t tid, uint64_t period_ns,
                      uint32_t stack_size);
/* The bytes perfs_open_latest maps for such an event. */
size_t perfs_latest_bytes(uint32_t stack_size);
/* The bytes perfs_open maps for such an event (its ring rounded up to a power of two, and
 * the header page). */
size_t perfs_ring_bytes(uint32_t stack_size, bool continuous, unsigned batch);
void perfs_close(struct perf_stream *ps);
/* One-shot: enable the event for one sample. Returns 0 or -errno. */
int perfs_arm(struct perf_stream *ps, uint64_t now);
/* One-shot: disable an armed event (its sample no longer wanted). */
void perfs_disarm(struct perf_stream *ps);
/* Continuous: a new period (restarts the count). */
int perfs_set_period(struct perf_stream *ps, uint64_t period_ns);
/* A clock (continuous or latest) that has had `every` samples read since its period was last
 * set: a period drawn anew, at random in [7/8, 9/8) of period_ns. Returns 0 (also when not
 * due yet) or -errno. */
int perfs_rejitter(struct perf_stream *ps, unsigned every);
/* How often profd's clocks draw a new period: every this many samples read. */
#define PERIOD_DRAW_EVERY 16

struct perf_sample {
    uint64_t time_ns; /* CLOCK_MONOTONIC, when the kernel took it */
    pid_t tid;
    bool user;        /* registers and a stack copy are in the snapshot */
    size_t stack_asked; /* stack bytes asked for (the copy's length is in the snapshot) */
};
/* Called for each sample read; with stack samples, snap holds its registers and copy. */
typedef void (*perfs_sample_fn)(void *ctx, const struct perf_sample *s, struct snapshot *snap);

/* Read every record in the ring, in order: samples go to fn (snap is the scratch copy,
 * whose cap must be at least PERFS_MAX_STACK); returns the number of samples, and adds the
 * samples the kernel reported lost to *lost. A record that does not parse ends the read:
 * the ring is emptied. */
unsigned perfs_drain(struct perf_stream *ps, struct snapshot *snap, perfs_sample_fn fn,
                     void *ctx, uint64_t *lost);
/* An overwritable ring's newest sample, if the kernel wrote one since the last call: 1 and
 * the sample in *out (its registers and copy in snap), 0 if none is new (or the newest
 * record is not a sample of the thread's user space), -EAGAIN if the kernel overwrote it
 * while it was read. */
int perfs_latest(struct perf_stream *ps, struct snapshot *snap, struct perf_sample *out);
/* A running thread's preemption watch (the wall-clock modes): the thread's user registers
 * and the top of its stack each time it is preempted (the sched_switch tracepoint filtered
 * in the kernel on the state it leaves in: runnable; without tracefs, the context-switch
 * event, every switch out), and a record at each of its switches in and out, in a ring the
 * kernel overwrites (written backward, mapped read-only, never woken). A thread found
 * running at a tick may be waiting for a CPU, preempted: its clock's newest sample is from
 * before, up to an interval of its CPU before, and the one-shot's would come after it ran
 * again, while the tick's wall time belongs where it waits. Needs what events that count in
 * the kernel need (CAP_PERFMON, or perf_event_paranoid 1). no_tracepoint: the context-switch
 * event even where the tracepoint can be had (an eBPF program on a tracepoint runs for all of
 * its events: pykernel.h attaches one per thread). Returns as perfs_open. */
int perfs_open_preempt(struct perf_stream *ps, pid_t tid, uint32_t stack_size,
                       bool no_tracepoint);
/* The bytes perfs_open_preempt maps for such a watch. */
size_t perfs_preempt_bytes(uint32_t stack_size);
/* Whether the watched thread was waiting for a CPU at at_ns (at or before its newest record):
 * the newest of its switches at or before then was a preemption. 1: it was, since a
 * preemption whose sample is in *out (its registers and copy in snap); 2: it was, since the
 * preemption sampled at known_ns (not read again; out->time_ns says so); 0: it was not
 * (running, or blocked); -ENODATA: not known from what the ring still holds; -EAGAIN: the
 * kernel overwrote the record while it was read. */
int perfs_waiting_at(struct perf_stream *ps, uint64_t at_ns, uint64_t known_ns,
                     struct snapshot *snap, struct perf_sample *out);
/* Whether the watched thread blocked (was switched out other than by a preemption) after
 * since_ns: 1 it did, 0 it did not (every switch since then is in the ring), -1 not known. */
int perfs_blocked_since(const struct perf_stream *ps, uint64_t since_ns);
/* A running thread's change watch: the time it waited for a CPU (preempted, up to `now` if it
 * waits still) since the last call, as far as perfs_first_block has read its records. */
uint64_t perfs_take_waited(struct perf_stream *ps, uint64_t now);
/* A thread's switch watch: a dummy event whose ring gets a record (PERF_RECORD_SWITCH) each
 * time the thread is switched in or out, and is never read: only its head is, a load from
 * memory. While the head has not moved since a tick, the thread has not run since (nor is
 * it running: its switch in would have written one), which otherwise takes a read of its
 * /proc schedstat, a system call per thread and tick (perfs_switches_head). Costs the thread
 * a record per switch: worth it for threads that seldom run. Returns as perfs_open. */
int perfs_open_switches(struct perf_stream *ps, pid_t tid);
/* The bytes perfs_open_switches maps (a header page and a page of ring). */
size_t perfs_switches_bytes(void);
/* A thread's change watch (the deferred ticks of alarm, defer.c): an event whose ring
 * gets a record each time the thread is switched in or out, stamped on CLOCK_MONOTONIC. A
 * blocked thread's (running false): every record wakes a poller of its descriptor. A
 * running thread's: each block wakes it (a sample of the sched_switch tracepoint, filtered
 * in the kernel: PERFS_BLOCKS_SCHED_SWITCH), or, without tracefs, each switch out
 * (the context-switch event: PERFS_BLOCKS_SWITCHES; the record beside it says whether it
 * was a preemption); its switches in do not. A running thread's, where perf allows user-space
 * events only (it would count in the kernel), is the switch records alone, waking nobody
 * (PERFS_BLOCKS_AT_BATCH_END): read at the batch's end, returning 1. Returns 0, 1, or
 * -errno as perfs_open. */
int perfs_open_changes(struct perf_stream *ps, pid_t tid, bool running);
enum perfs_block_watch {
    PERFS_BLOCKS_UNKNOWN,      /* none opened yet */
    PERFS_BLOCKS_SCHED_SWITCH, /* blocks alone wake profd */
    PERFS_BLOCKS_SWITCHES,     /* every switch out does */
    PERFS_BLOCKS_AT_BATCH_END, /* none does: read at the batch's end */
};
/* Which event the running threads' change watches are. */
enum perfs_block_watch perfs_block_watch(void);
/* Whether profd holds the sched_switch tracepoint's perf probe registered (perfsample.c
 * sched_switch_hold: closing a watch then costs no RCU grace period). */
bool perfs_sched_switch_held(void);
/* The bytes perfs_open_changes maps. */
size_t perfs_changes_bytes(bool running);
/* A running thread's: when it first blocked (was switched out other than by preemption)
 * since the watch was opened, and in *back_in whether it was switched in since (or a record
 * after it cannot be read); UINT64_MAX if it has not blocked (the records read are then
 * consumed: a preempted thread is still running). Where records were lost, or the ring is
 * full (they may be), known only up to the last one read: its time (0 if none), with
 * *back_in set. */
uint64_t perfs_first_block(struct perf_stream *ps, bool *back_in);
/* When the thread was first switched in or out since the watch was opened: UINT64_MAX if
 * it has not been, 0 if the record cannot be read (taken as "before anything"). */
uint64_t perfs_first_change(const struct perf_stream *ps);
/* Its head: moves by each record the kernel writes. */
uint64_t perfs_switches_head(const struct perf_stream *ps);
/* Whether ps's ring holds records not drained yet (a memory read, no system call). */
bool perfs_has_records(const struct perf_stream *ps);
/* Bytes of ring mapped for ps. */
size_t perfs_bytes(const struct perf_stream *ps);
void perfs_get_totals(struct perfs_totals *t);
/* Parse one PERF_RECORD_SAMPLE of a stack stream (exposed for the fuzzer): rec/len the
 * whole record, header included. Returns 0 or -EINVAL. */
int perfs_parse_sample(const uint8_t *rec, size_t len, struct perf_sample *out,
                       struct snapshot *snap);
