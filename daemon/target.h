/* target.h: an attached process, its threads, their ptrace state, and its sample buffer. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

#include "maps.h"
#include "perfsample.h"
#include "perms.h"
#include "gokernel.h"
#include "python.h"
#include "ring.h"
#include "sampler_thread.h"
#include "sched_thread.h"
#include "stacks.h"
#include "threadctx.h"
#include "unwind.h"

struct target;
struct sched;

/* How running threads are sampled. The blocked ones are always read from /proc and copied
 * without a stop; idle ones reuse their last stack. */
enum sampler_kind {
    SAMPLER_AUTO,   /* the kernel's copy (perf) where the kernel gives it, else a stop */
    SAMPLER_PERF,   /* the kernel's copy; an attach fails where perf events are refused
                       (stacks deeper than the kernel copies are still taken by a stop) */
    SAMPLER_PTRACE, /* a ptrace stop */
};
enum thread_state {
    TH_RUNNING,    /* not in a ptrace stop (possibly with an interrupt pending) */
    TH_GROUP_STOP, /* in a group-stop (SIGSTOP, Ctrl-Z), parked with PTRACE_LISTEN */
};

struct thread {
    pid_t tid;
    struct target *t;
    enum thread_state state;
    bool interrupt_pending;     /* PTRACE_INTERRUPT sent, stop not yet seen */
    bool rescue_pending;        /* PTRACE_INTERRUPT sent to catch a wake-up whose signal
                                   another thread may take (rescue_stolen_wakeups) */
    uint64_t interrupt_sent_ns;
    uint64_t sample_tick_ns;    /* tick the pending stop belongs to */
    uint64_t boundary_ns;       /* its latest transaction-boundary sample */
    bool boundary_stop;         /* the pending stop is for a transaction-boundary sample */
    int schedstat_fd;           /* /proc/PID/task/TID/schedstat, kept open */
    int syscall_fd;             /* /proc/PID/task/TID/syscall */
    int status_fd;              /* /proc/PID/task/TID/status */
    /* "Has it run since the last sample?": schedstat when its last stack was taken. */
    bool have_sched;
    uint64_t run_ns, pcount;
    uint32_t last_stack;        /* holds a reference; STACK_NONE if none */
    uint64_t stack_top;         /* highest stack address a complete unwind needed; 0: unknown */
    /* The call that ignored signals keep interrupting (sigrepair.c). */
    bool chain_valid;
    long chain_nr;
    uint64_t chain_args[3];
    uint64_t chain_start_ns;
    uint64_t chain_vcsw;
    uint64_t chain_run_ns;      /* its CPU time (schedstat) at the latest repair */
    uint64_t chain_repair_ns;   /* when it was last restarted */
    int64_t chain_limit_ns;     /* the restarted call's own timeout from then (-1: none) */
    uint64_t chain_r10;         /* the timeout argument it was restarted with (epoll waits) */
    int chain_epoll_ms;
    bool zombie;                /* leader that called pthread_exit: no more samples */
    bool born;                  /* past its first stop (threads new to ptrace start in one) */
    bool stop_eintr;            /* a job-control stop (not us) made its wait fail with EINTR */
    uint64_t stop_eintr_run_ns; /* its CPU time then (schedstat) */
    uint8_t name_checks;        /* times the name was read since the thread appeared */
    uint64_t added_ns;          /* when profd started following it */
    char name[16];
    struct sched_thread sched;  /* the schedule's (sched_thread.h): cputime's credit */
    struct sampler_thread smp;  /* the sampler's (sampler_thread.h) */
    uint64_t py_tstate;         /* its CPython thread state, as found last (python.h) */
    uint64_t tctx_slot;         /* where its otel_thread_ctx_v1 is (threadctx.h); 0: unknown */
    uint64_t tctx_retry_ns;     /* without it: when its samples may ask for a walk again */
    uint32_t tctx_backoff;      /* walks it was not found in (capped), for that delay */
    bool ran_since_name;        /* seen to have run since its name was last read */
    struct thread *hnext;       /* tid hash chain */
};

/* A thread name remembered for slices after the thread is gone. */
struct thread_name {
    int32_t tid;
    char name[16];
    uint64_t last_seen_ns;
};

/* Executable mappings seen during one exec generation, for symbolizing its samples. */
struct epoch_maps {
    uint32_t epoch;
    struct maps maps; /* union of every mapping seen in that generation */
};

enum target_state {
    T_ATTACHED,
    T_DETACHING,
    T_EXITED, /* process gone; its samples stay readable until buffer expiry or detach */
    T_GONE,   /* forgotten; memory freed after the current callback (targets_collect) */
};

/* A target's counters. Those its status reports (cmd_status.c; common/PROTOCOL.md, "Target
 * status") are named once, in the lists below: each list is a group, a struct of that name
 * here and an object of that name in the reply, and each X(T, name) in it a uint64_t member
 * and the key it is reported under, in the list's order. X is called with the list's second
 * argument as T (cmd_status.c passes the group's struct type, for offsetof). */
#define STATS_MEMBER(T, name) uint64_t name;

/* "sampled": how the samples were taken. */
#define TARGET_STATS_SAMPLED(X, T)                                                                 \
    X(T, stopped)              /* taken in a ptrace stop */                                        \
    X(T, blocked_without_stop) /* taken without stopping (thread blocked in a syscall) */          \
    X(T, idle_reused)          /* thread had not run: previous stack recorded again */             \
    X(T, kernel_copy)          /* the kernel's copy at a perf sample (no stop) */

/* "perf": the kernel's copies, from the one-shots asked for to the copies' sizes. */
#define TARGET_STATS_PERF(X, T)                                                                    \
    X(T, oneshot_asked)       /* one-shot samples asked for */                                     \
    X(T, oneshot_expired)     /* one-shot asked for, not taken (the thread blocked first) */       \
    X(T, oneshot_waited_for)  /* ticks of a thread waiting for a CPU given its one-shot's          \
                                 sample when it came */                                            \
    X(T, latest)              /* a tick's running sample: the newest of the thread's clock */      \
    X(T, latest_reused)       /* the same, taken by an earlier tick (no newer one yet) */          \
    X(T, latest_torn)         /* the newest overwritten while it was read */                       \
    X(T, preempted)           /* a tick's running sample: the thread waited for a CPU, at          \
                                 the stack its preemption watch took */                            \
    X(T, preempt_watch_failed) /* preemption watches that could not be opened */                   \
    X(T, latest_across_waits) /* a clock sample older than the tick's bound that stood for         \
                                 it: the thread only waited for a CPU */                           \
    X(T, latest_in_sliced_window) /* ticks whose clock sample (newest or reused) lay in a          \
                                     window already sliced: a one-shot asked instead */            \
    X(T, lost)                /* samples the kernel dropped (PERF_RECORD_LOST) */                  \
    X(T, without_registers)   /* samples without user registers */                                 \
    X(T, copy_too_short)      /* copies too short for a complete unwind (copy enlarged) */         \
    X(T, copy_shrunk)         /* copies made smaller: the complete unwinds needed less */

/* "perf", after "copy_bytes": threads stopped where the kernel's copy was not taken. */
#define TARGET_STATS_PERF_STOPPED(X, T)                                                            \
    X(T, stopped_stack_too_deep) /* running: stack deeper than the kernel copies */                \
    X(T, stopped_no_event)       /* running: no perf event for them */                             \
    X(T, stopped_first_interval) /* running: cputime's counting event (its first interval          \
                                    of CPU, no copy yet) */                                        \
    X(T, stopped_without_files)  /* without their /proc files (fds.h), not known to be             \
                                    blocked, and no event asked for */                             \
    X(T, stopped_for_python)     /* running: Python frames are read in the stop (python.h) */      \
    X(T, stopped_for_python_loading) /* the same while the eBPF program that reads them at         \
                                        the sample is loaded (pykernel.h) */

/* "perf"."switch_watch": the switch watches of threads that seldom run (watch.c). */
#define TARGET_STATS_SWITCH_WATCH(X, T)                                                            \
    X(T, reads_spared)         /* ticks a switch watch spared a schedstat read */                  \
    X(T, opened)               /* switch watches opened */                                         \
    X(T, closed_running_often) /* closed: their thread ran often */                                \
    X(T, closed_for_room)      /* closed for a sampling event that lacked room */

/* "unwind": how far the unwinds went. */
#define TARGET_STATS_UNWIND(X, T) X(T, complete) X(T, truncated) X(T, too_deep)

/* "skipped": ticks that took no sample of a thread. */
#define TARGET_STATS_SKIPPED(X, T)                                                                 \
    X(T, still_stopping)            /* previous stop still outstanding */                          \
    X(T, job_control_stopped)       /* thread in group-stop with no earlier stack */               \
    X(T, resuming_from_job_control) /* thread on its way back from a job-control stop */           \
    X(T, off_cpu_when_due)          /* cputime: due, but blocked by the time we looked */

/* "transaction_boundaries": samples at transactions' starts and finishes. */
#define TARGET_STATS_BOUNDARIES(X, T)                                                              \
    X(T, sampled)                 /* transaction-boundary samples */                               \
    X(T, skipped_within_interval) /* not taken: the thread had one less than an interval ago */

/* "failed": samples not taken. */
#define TARGET_STATS_FAILED(X, T)                                                                  \
    X(T, thread_exited)     /* thread exited while being sampled */                                \
    X(T, registers)         /* GETREGS failed */                                                   \
    X(T, stack_copy)        /* stack copy failed */                                                \
    X(T, torn_copy_retried) /* blocked-thread copy raced with the thread running */

/* The top level, after "threads_stopped" and its averages: the ptrace side's repairs. */
#define TARGET_STATS_THREADS(X, T)                                                                 \
    X(T, syscalls_restarted) /* system calls restarted instead of failing with EINTR */            \
    X(T, wakeups_rescued)    /* threads stopped because a signal they may have been woken          \
                                for was taken by another thread */                                 \
    X(T, signals_forwarded)                                                                        \
    X(T, group_stops)                                                                              \
    X(T, threads_seen)

/* "sampling"."deferred": alarm's deferred ticks (defer.c), reported with the schedule's own
 * counts of them (sched_defer.c). */
#define TARGET_STATS_DEFERRED(X, T)                                                                \
    X(T, left_for_waits_for_a_cpu)    /* batches left: a running thread waited for a CPU in       \
                                         them */                                                  \
    X(T, samples)                     /* samples taken for deferred ticks */                      \
    X(T, samples_read_after_blocking) /* of those, a running thread's after it blocked (read    \
                                         then) */                                                 \
    X(T, running_unsampled)           /* a running thread's deferred tick without a clock         \
                                         sample near it */                                        \
    X(T, refused)                     /* batches begun and undone */

struct target_stats {
    /* The top level, each where target_status places it (its key its name). */
    uint64_t samples;         /* entries added to the buffer (in the summary) */
    uint64_t ticks;
    uint64_t running_again;   /* running at its last tick and now: its schedstat not read */
    struct stats_sampled {
        TARGET_STATS_SAMPLED(STATS_MEMBER, )
    } sampled;
    struct stats_perf {
        TARGET_STATS_PERF(STATS_MEMBER, )
        TARGET_STATS_PERF_STOPPED(STATS_MEMBER, )
        struct stats_switch_watch {
            TARGET_STATS_SWITCH_WATCH(STATS_MEMBER, )
        } switch_watch;
    } perf;
    struct stats_unwind {
        TARGET_STATS_UNWIND(STATS_MEMBER, )
    } unwind;
    struct stats_skipped {
        TARGET_STATS_SKIPPED(STATS_MEMBER, )
    } skipped;
    struct stats_boundaries {
        TARGET_STATS_BOUNDARIES(STATS_MEMBER, )
    } transaction_boundaries;
    struct stats_failed {
        TARGET_STATS_FAILED(STATS_MEMBER, )
    } failed;
    uint64_t threads_stopped; /* threads stopped (ptrace interrupts) */
    TARGET_STATS_THREADS(STATS_MEMBER, )
    /* Reported through figures made of them (target_status): "paths"' us_per_sample and
     * stop_latency_us_avg. */
    uint64_t ns_stopped, ns_blocked, ns_perf; /* profd's CPU time (loop thread) per path */
    uint64_t stop_latency_ns;    /* sum of interrupt -> stop */
    struct stats_deferred {
        uint64_t begun; /* batches of deferred ticks begun (not reported) */
        TARGET_STATS_DEFERRED(STATS_MEMBER, )
    } deferred;
};

struct target {
    pid_t pid;
    enum target_state state;
    char comm[16];
    char *exe;
    struct proc_creds creds; /* at attach, updated at exec: checked after the process exits */
    bool creds_changed;      /* an exec changed them (set-user-ID): CAP_SYS_PTRACE needed */
    unsigned hz;
    uint64_t interval_ns;   /* between samples, after the budget (its schedule sets it) */
    enum sampler_kind sampler; /* asked for at attach */
    int perf_err;           /* why perf events were refused for it (-errno), 0: none */
    uint64_t buffer_ns;
    uint64_t attach_ns;
    uint64_t start_time;    /* the process's start (/proc/PID/stat): with pid, its identity */
    uid_t owner_uid;        /* uid of the client that attached it */
    bool explicit_attach;   /* attached by an attach request (not only for transactions) */
    uint64_t exit_ns;
    int exit_status;        /* wait status of the leader; -1: unknown (an untraced leader) */
    /* The end of the newest window sliced (at most the time of its request): no sample
     * of a thread's clock from before it is taken since (kcopy.c perf_latest). */
    uint64_t sliced_to_ns;

    struct thread **threads;
    size_t nthreads, cap_threads;

    struct ring ring;
    struct stack_table stacks;
    uint32_t epoch;         /* exec generation */
    struct maps maps;       /* current maps */
    bool maps_dirty;
    uint64_t maps_read_ns;  /* when the maps were last read */
    /* The process's VmSize, VmExe and VmLib as its status file said at the last look (each
     * second, with its signal dispositions), and as it said before the maps were last read
     * (VmSize 0: unknown, its status without them): read again when these differ
     * (housekeeping). */
    struct vm_sizes {
        uint64_t size_kb, exe_kb, lib_kb;
    } vm_now, vm_at_maps;
    uint64_t maps_unchanged; /* the housekeeping's re-reads spared by an unchanged VmSize */
    /* Counts the times a thread of it was seen to have run (sampler.c target_ran), or its
     * threads came or went: what it was at the last housekeeping and the last read of the
     * maps. A process none of whose threads ran cannot have changed its mappings, names or
     * signal dispositions: the housekeeping spares their reads (housekeeping_spared). */
    uint64_t activity, hk_activity, maps_activity;
    uint64_t housekeeping_spared, names_spared;
    int maps_err;           /* -errno of the last read of the maps that failed, 0 after one
                             * that worked (a failure is logged once) */
    bool warned_task_files; /* a thread's /proc files could not be opened (logged once) */
    size_t nthreads_nofiles; /* threads without their /proc files (sampled by stopping) */
    struct epoch_maps *epochs;
    size_t nepochs;
    struct unwinder unw;
    struct py_target py;    /* its CPython runtime, if any */
    struct go_kernel gok;   /* its goroutines read at its samples (a Go target) */
    struct tctx_target tctx; /* its threads' OpenTelemetry context (threadctx.h) */
    struct sched *sched;    /* its schedule (schedule.c: given at attach, freed with it) */
    int status_fd;          /* /proc/PID/status (signal dispositions) */
    uint64_t sig_ign, sig_cgt; /* dispositions (SigIgn, SigCgt) at the latest read of it */
    int pidfd;              /* pidfd_open of the process (to read its sockets' timeouts) */
    /* alarm's ticks are deferred (defer.c): an epoll set of its threads' change watches. */
    bool deferred;
    int defer_epfd;

    struct thread_name *names;
    size_t nnames, cap_names;

    struct target_stats stats;
    /* Called once when a detach has finished (every thread released) or failed. */
    void (*on_detached)(struct target *t, void *ctx, int err);
    void *on_detached_ctx;
    struct target *next;
};

struct ev_loop;

/* What the schedule, above, hears of the targets' lives: the only calls out of this file
 * into the sample path (which calls down into it). */
struct target_hooks {
    /* th is new (traced by us): a schedule that keeps something per thread opens it. */
    void (*thread_added)(struct thread *th);
    /* t samples no more (a detach has begun, or it exited, or it is forgotten): its
     * schedule stops, before its threads are forgotten. */
    void (*stopped)(struct target *t);
    /* th exited, its process lives on: what its schedule gathered for it and has not read
     * yet (a ring of kernel copies) is read now, before th is forgotten. */
    void (*thread_exited)(struct thread *th);
};

/* Set up the module: the loop its descriptors' watchers are on, and the hooks. */
void targets_init(struct ev_loop *loop, const struct target_hooks *hooks);
/* Detach from everything, synchronously with a deadline (daemon shutdown). */
void targets_shutdown(uint64_t timeout_ns);

/* Attach to process pid: seize every thread, read its maps and set up its unwinder; its
 * schedule is not started (sched_attach does both). Returns 0 or -errno: -ESRCH (no such
 * process), -EPERM (not allowed, or already traced: why says by whom), -EEXIST (already
 * attached), -EINVAL (pid is a thread, not a process; an exited target of that pid is
 * replaced when another process has the pid now, see target_is_previous),
 * -EMFILE/-ENFILE/-ENOMEM (profd is out of descriptors or memory to even look at it), -EIO
 * (seized, but it cannot be sampled: its maps or the unwinder could not be set up; why says
 * which and why). The schedule's state, sched (stopped, its memory zeroed), is t's from
 * then on, or freed if the attach fails. */
int target_attach(pid_t pid, unsigned hz, uint64_t buffer_ns, enum sampler_kind sampler,
                  struct sched *sched, struct target **out, char *why, size_t whylen);
/* Begin detaching; done() is called when every thread is released (possibly at once). */
void target_detach(struct target *t, void (*done)(struct target *, void *, int), void *ctx);
struct target *target_find(pid_t pid);
/* Has t exited, and its pid been given to another process since (the kernel reuses pids)?
 * Such a target is not that process: attaching the pid (an attach, a transaction's start)
 * replaces it, and a transaction of the new process never reads its samples. (While a
 * target is attached its pid cannot be reused: a traced process's pid is freed only once
 * profd has reaped it.) */
bool target_is_previous(const struct target *t);
struct target *targets_first(void);
size_t targets_count(void);

/* Free forgotten targets: call when no callback holds one (an ev_check). */
void targets_collect(void);
/* Wait for one ptrace event or child exit (block: until there is one, or a signal
 * interrupts the wait) and handle it. A stop is seen without being reaped (waitid WNOWAIT)
 * and ended by the ptrace request that resumes, parks or releases the thread: a signal it
 * stopped for stays in the kernel, not in profd, until it is re-injected, so that a daemon
 * killed meanwhile loses nothing. The interrupt stops the sampler asked for are not handled
 * here: with sample, such a thread is returned in *sample, still stopped, for the caller to
 * sample and resume (target_resume), and then to call targets_sample_done(); without, it is
 * resumed unsampled. (Every other event is handled here, whichever target it is of: one may
 * end a target, which its callers then see in state T_GONE or T_EXITED.) Returns the thread
 * id handled, 0 if none was waiting (without block), or -errno (-ECHILD: no child or
 * tracee; -EINTR). */
int targets_wait_event(bool block, struct thread **sample);
/* The caller of targets_wait_event has taken its sample of th and resumed it. */
void targets_sample_done(struct thread *th);
/* Periodic housekeeping (1 Hz): thread names, maps changes, expiry of exited targets. */
void targets_housekeeping(uint64_t now);

/* t's thread tid, or NULL (it exited, and was freed). */
struct thread *target_thread(const struct target *t, pid_t tid);
/* Change the rate of t (and the bound of its buffer with it). */
void target_set_hz(struct target *t, unsigned hz);

/* Resume a thread from a ptrace stop, passing sig (0 for none). ESRCH is ignored: the thread
 * died meanwhile and its exit status follows. */
void target_resume(struct thread *th, int sig);
/* Drop th's last stack (its reference): the thread is gone, or its code changed, so that
 * it is not recorded again for a thread that has not run. */
void target_thread_forget_stack(struct thread *th);
/* th was seen to have run (since its last sample): what the housekeeping reads may have
 * changed. */
static inline void target_thread_ran(struct thread *th)
{
    th->ran_since_name = true;
    th->t->activity++;
}
/* Re-read a thread's name (comm) and remember it for slices. */
void target_thread_refresh_name(struct thread *th);
/* The same for thread tid of t, if it is one of its threads. */
void target_refresh_name(struct target *t, pid_t tid);
/* Re-read the maps; flush unwind caches if code was unmapped. Returns 1 if changed, 0 if
 * not, or -errno. */
int target_refresh_maps(struct target *t);

const char *target_state_name(enum target_state s);
size_t target_memory(const struct target *t);
/* Of every target. */
size_t targets_memory(void);
/* Maps of exec generation epoch, or NULL if forgotten. */
const struct maps *target_epoch_maps(const struct target *t, uint32_t epoch);
