/* sampler.c: the sample path's entry and its decision per thread: a tick (sampler_tick) or a
 * transaction's boundary takes each thread as what it is doing requires: one that has not
 * run (its last stack again), one blocked in a system call (/proc and a copy, no stop), a
 * running one from the kernel's copy (kcopy.c) or by a ptrace stop (stops.c); then the
 * unwind, the stack table and the ring. Alarm's deferred ticks are defer.c's, the switch
 * watches watch.c's (what they share: sampler_internal.h). The schedule calls it; it calls
 * target.c and the layers below, never back. Nothing here symbolizes, allocates per frame or
 * opens files while a thread is stopped: the stop covers PTRACE_GETREGS, one
 * process_vm_readv of the stack and PTRACE_CONT; the unwind runs from the copy after the
 * thread is running again. */
#include "sampler.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "fds.h"
#include "log.h"
#include "memory.h"
#include "perfsample.h"
#include "procfs.h"
#include "syscalls.h"
#include "target.h"
#include "util.h"
#include "sampler_internal.h"

struct snapshot snap;
static uint64_t ips[UNWIND_MAX_FRAMES + PY_MAX_FRAMES];
/* The Python frames of the sample being taken, read while the thread could not change them
 * (python.h); npy of them, 0 if none. */
struct py_frame pyframes[PY_MAX_FRAMES];
int npy;

int sampler_init(size_t max_stack)
{
    stops_init();
    snap.cap = max_stack;
    snap.data = malloc(max_stack);
    return snap.data ? 0 : -ENOMEM;
}

void sampler_finish(void)
{
    stops_finish();
    free(snap.data);
    memset(&snap, 0, sizeof(snap));
}

/* Record one sample (the ring takes over the stack reference). when: the time the stack was
 * seen (the stop, or the read of a blocked thread), not the tick's: a thread slow to stop
 * may have moved on since the tick, and transactions are matched to samples by time. */
void push(struct target *t, struct thread *th, uint64_t when, uint32_t stack,
          enum sample_path path)
{
    struct ring_entry e = {.t_ns = when, .tid = th->tid, .path = path, .stack = stack};
    if (ring_push(&t->ring, &e) < 0) {
        stacks_unref(&t->stacks, stack);
        return;
    }
    t->stats.samples++;
}

/* Unwind the snapshot and intern the stack. Returns a stack id with one reference, or
 * STACK_NONE. When the unwind asked for memory outside every known mapping (a library
 * loaded since the maps were read), the maps are re-read and the unwind retried once: the
 * copy is still valid. */
static void learn_stack_top(struct thread *th, enum unwind_end end);

uint32_t unwind_and_intern(struct target *t, struct thread *th, enum unwind_end *endp,
                           bool boundary)
{
    enum unwind_end end;
    t->unw.maps_miss = false;
    int n = unwinder_unwind(&t->unw, &snap, ips, UNWIND_MAX_FRAMES, &end);
    if (end != UNWIND_COMPLETE && t->unw.maps_miss) {
        /* At most every 100 ms: code that is in no mapping at all (a stray pc) must not
         * make every sample re-read the maps. */
        uint64_t now = now_ns();
        if (now - t->maps_read_ns > 100 * NS_PER_MS && target_refresh_maps(t) > 0) {
            /* (What the first pass read, astray in code it did not know, says nothing.) */
            snap.max_read = 0;
            snap.short_copy = false;
            t->unw.maps_miss = false;
            n = unwinder_unwind(&t->unw, &snap, ips, UNWIND_MAX_FRAMES, &end);
        }
    }
    learn_stack_top(th, end);
    if (t->unw.maps_miss)
        t->maps_dirty = true; /* code we do not know yet: re-read the maps soon */
    if (endp)
        *endp = end;
    if (n == 0) {
        /* Not even the pc: record the pc alone so the time is not lost. */
        ips[0] = snap.regs.rip;
        n = 1;
    }
    if (npy > 0)
        n = (int)py_encode(&t->py, pyframes, npy, ips, (size_t)n,
                           sizeof(ips) / sizeof(ips[0]));
    npy = 0;
    uint16_t flags = boundary ? STACK_BOUNDARY : 0;
    switch (end) {
    case UNWIND_COMPLETE:
        t->stats.unwind.complete++;
        break;
    case UNWIND_TOO_DEEP:
        t->stats.unwind.too_deep++;
        flags |= STACK_TRUNCATED;
        break;
    default:
        t->stats.unwind.truncated++;
        flags |= STACK_TRUNCATED;
        break;
    }
    return tctx_tag(t, th->tid, stacks_intern(&t->stacks, t->epoch, flags, ips, (uint16_t)n));
}

/* Fallback copy size when the mapping holding sp is not known yet (a thread whose stack was
 * mapped after the maps were last read): perf's default is 8 KiB; be more generous. */
#define UNKNOWN_STACK_COPY (64 * 1024)
/* Copied above the outermost frame an earlier unwind of the thread needed. */
#define STACK_TOP_SLACK 256

/* How far up to copy a thread's stack, from sp. At most to the end of the stack mapping
 * holding sp (from the maps read earlier): a thread stack is usually followed by other
 * readable memory, so a copy "until it fails" would run far past the stack's top and cost
 * the target time for nothing. And no further than the thread's outermost frame needed
 * last time (plus slack): the frames at the top of a stack (clone3, start_thread, _start)
 * do not move, while above them lie the thread's TLS and descriptor, or the environment
 * strings, which no unwind reads. A copy that proves too short (the unwind wanted the
 * stack above it) forgets this and copies to the mapping's end next time. */
uint64_t stack_limit(struct target *t, struct thread *th, uint64_t sp)
{
    const struct map_entry *m = maps_find(&t->maps, sp);
    if (!m || !(m->prot & MAP_PROT_W)) {
        t->maps_dirty = true;
        return sp + UNKNOWN_STACK_COPY;
    }
    if (th->stack_top > sp && th->stack_top + STACK_TOP_SLACK < m->end)
        return th->stack_top + STACK_TOP_SLACK;
    return m->end;
}

/* After an unwind of th's copy: learn how much stack it needed. */
static void learn_stack_top(struct thread *th, enum unwind_end end)
{
    if (snap.short_copy)
        th->stack_top = 0;
    else if (end == UNWIND_COMPLETE && snap.max_read)
        th->stack_top = snap.max_read;
}

/* Remember the stack as the thread's latest, for reuse while it does not run. */
void set_last(struct thread *th, uint32_t stack, uint64_t run_ns, uint64_t pcount)
{
    if (th->last_stack != STACK_NONE)
        stacks_unref(&th->t->stacks, th->last_stack);
    stacks_ref(&th->t->stacks, stack);
    th->last_stack = stack;
    th->have_sched = true;
    th->run_ns = run_ns;
    th->pcount = pcount;
}

/* Ask the kernel to stop a running thread; the stop arrives through the wait (targets_wait_event). Returns
 * whether the interrupt was sent. */
static bool interrupt(struct target *t, struct thread *th, const struct sample_req *rq)
{
    if (ptrace(PTRACE_INTERRUPT, th->tid, 0, 0) < 0) {
        t->stats.failed.thread_exited++;
        return false;
    }
    th->interrupt_pending = true;
    th->boundary_stop = rq->boundary;
    th->interrupt_sent_ns = now_ns();
    th->sample_tick_ns = rq->tick_ns;
    t->stats.threads_stopped++;
    return true;
}

/* A thread whose wait a job-control stop failed with EINTR (natively) is, just after
 * SIGCONT, on its way back to user mode with that EINTR in rax. Interrupting it then would
 * look exactly like interrupting a new wait of its own, which must be repaired while the
 * old one must not: do not interrupt it until it is past that point, which shows as
 * having run a while (the way back takes a few microseconds) or being blocked again. */
#define PAST_STOP_EINTR_NS (200 * NS_PER_US)


/* Record the thread's latest stack again (it is still where it was). Returns false if it
 * has none. */
/* A tick found th not running (blocked, stopped): the ticks that waited for its one-shot's
 * sample go without one (where it runs next may be elsewhere). */
static void oneshot_unwait(struct target *t, struct thread *th)
{
    t->stats.skipped.still_stopping += th->smp.oneshot_waiting;
    th->smp.oneshot_waiting = 0;
}

bool push_last(struct target *t, struct thread *th, uint64_t tick_ns)
{
    oneshot_unwait(t, th);
    if (th->last_stack == STACK_NONE)
        return false;
    stacks_ref(&t->stacks, th->last_stack);
    push(t, th, tick_ns, th->last_stack, PATH_REUSED);
    t->stats.sampled.idle_reused++;
    return true;
}


/* A thread blocked in a system call, read without stopping it: where it is from /proc (sp,
 * pc), a copy of its stack and its Python frames, unwound. run and pcount: its schedstat read
 * before; the copy stands if a reading after it is the same (else it is looked at again,
 * once). Returns 1 with *id (one reference; STACK_NONE if the unwind failed), *end, *sp and
 * *seen_ns, a moment the thread was there (before the reading that confirmed it: not after
 * the unwind, which takes long enough under load for the thread to have run on into a
 * transaction that started since); 0 if it is not blocked (running, or it ran during both
 * copies); -1 if it vanished or its memory could not be copied (counted). */
int read_blocked(struct target *t, struct thread *th, uint64_t *run, uint64_t *pcount,
                 uint32_t *id, enum unwind_end *end, uint64_t *sp, uint64_t *seen_ns,
                 bool boundary)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        struct sysc_info si;
        if (proc_read_syscall(th->syscall_fd, &si) < 0) {
            t->stats.failed.thread_exited++;
            return -1;
        }
        if (si.state != SYSC_IN_SYSCALL)
            return 0;
        perf_expire(t, th);
        memset(&snap.regs, 0, sizeof(snap.regs));
        snap.regs.rsp = si.sp;
        snap.regs.rip = si.pc;
        snap.full_regs = false;
        if (snapshot_copy_stack(th->tid, si.sp, stack_limit(t, th, si.sp), &snap) < 0) {
            t->stats.failed.stack_copy++;
            return -1;
        }
        /* Its Python frames too: the check below that it did not run covers them. */
        npy = py_capture(&t->py, th->tid, &th->py_tstate, pyframes);
        tctx_capture(t, th, false);
        uint64_t run2, pcount2;
        *seen_ns = now_ns();
        if (proc_read_schedstat(th->schedstat_fd, &run2, &pcount2) < 0) {
            t->stats.failed.thread_exited++;
            npy = 0; /* (read for this sample, which is not taken) */
            tctx_cur.have = false;
            return -1;
        }
        if (pcount2 != *pcount || run2 != *run) {
            /* It ran while we copied: the copy may be torn. Look again. */
            t->stats.failed.torn_copy_retried++;
            npy = 0;
            tctx_cur.have = false;
            *run = run2;
            *pcount = pcount2;
            continue;
        }
        if (th->stop_eintr && *run - th->stop_eintr_run_ns >= PAST_STOP_EINTR_NS)
            th->stop_eintr = false; /* blocked again since: past the job-control EINTR */
        *id = unwind_and_intern(t, th, end, boundary);
        *sp = si.sp;
        return 1;
    }
    return 0;
}

/* A wall-clock tick's sample of a thread running now: its clock's newest sample, a one-shot,
 * or a stop. Returns whether it was interrupted. */
static bool sample_running(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    th->smp.ran_last_tick = true;
    target_thread_ran(th);
    target_thread_forget_stack(th);
    if (perf_preempted(t, th, rq) || perf_latest(t, th, rq)) {
        /* A one-shot asked for two intervals ago and not taken (the kernel lost it) is not
         * waited for; one not needed for a second (opened for the thread's first tick,
         * say) gives back its ring and descriptor until one is needed again. */
        if (th->smp.ps.fd >= 0 && !th->smp.ps.continuous) {
            if (th->smp.ps.armed && tick_ns - th->smp.ps.armed_ns >= 2 * t->interval_ns)
                perf_expire(t, th);
            if (!th->smp.ps.armed && tick_ns - th->smp.ps.armed_ns > ONESHOT_IDLE_NS)
                sampler_stream_close(th);
        }
        return false;
    }
    if (perf_oneshot(t, th, rq))
        return false;
    return interrupt(t, th, rq);
}

/* cputime: th used an interval of CPU (its CPU time now run): take it where it is now if
 * that is on a CPU; if it has blocked since, where it ran is unknown and its blocking stack
 * is not CPU. Returns whether it was interrupted. */
static bool sample_on_cpu(struct target *t, struct thread *th, const struct sample_req *rq,
                          uint64_t run)
{
    target_thread_ran(th);
    struct sysc_info si;
    if (proc_read_syscall(th->syscall_fd, &si) < 0) {
        t->stats.failed.thread_exited++;
        return false;
    }
    if (si.state == SYSC_IN_SYSCALL) {
        t->stats.skipped.off_cpu_when_due++;
        return false;
    }
    if (th->stop_eintr && run - th->stop_eintr_run_ns < PAST_STOP_EINTR_NS) {
        t->stats.skipped.resuming_from_job_control++;
        return false;
    }
    th->stop_eintr = false;
    target_thread_forget_stack(th);
    if (perf_oneshot(t, th, rq))
        return false;
    return interrupt(t, th, rq);
}

/* What read_blocked saw of a blocked thread, beside its stack. */
struct blocked_read {
    uint64_t run, pcount; /* its schedstat */
    uint64_t sp;
    uint64_t head;        /* its switch watch's head, read before the schedstat */
    uint64_t seen_ns;     /* a moment it was there */
    uint64_t cpu0;        /* profd's CPU clock when the read began */
};

/* The sample read_blocked took of th (stack id, one reference) recorded, and kept as its
 * last stack if reusable. */
static void push_blocked(struct target *t, struct thread *th, uint32_t id, bool reusable,
                         const struct blocked_read *b)
{
    /* Only a complete stack is worth reusing while the thread stays blocked: a truncated
     * one (code mapped after the maps were read, say) is taken again next time. (Nor a
     * boundary's, whose frames inside the client library a profile leaves out: the thread's
     * next samples take their own.) */
    oneshot_unwait(t, th);
    if (reusable) {
        set_last(th, id, b->run, b->pcount);
        learn_perf_stack(th, b->sp);
        if (th->smp.sw.fd >= 0) {
            th->smp.sw_head = b->head; /* (read before schedstat was) */
            th->smp.sw_valid = true;
        }
    } else {
        target_thread_forget_stack(th);
    }
    push(t, th, b->seen_ns, id, PATH_PROC);
    t->stats.sampled.blocked_without_stop++;
    t->stats.ns_blocked += thread_cpu_ns() - b->cpu0;
    young_name(th);
}

/* Sample one thread, stopping it only if it is running. Returns whether it was
 * interrupted (its sample completes when the stop arrives). */
static bool sample_thread(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    bool cpu_only = rq->cpu_only;
    uint64_t run, pcount;
    uint64_t head = 0;
    /* Only the wall-clock modes' ticks count towards a watch or against one (not a
     * transaction's boundary sample, which cputime takes this way too). */
    bool wall = !cpu_only && !rq->boundary;
    if (th->smp.sw.fd < 0 && wall && ++th->smp.sw_ticks >= WATCH_LOOK) {
        if (th->smp.sw_quiet >= WATCH_QUIET)
            watch_open(t, th, tick_ns);
        th->smp.sw_ticks = th->smp.sw_quiet = 0;
    }
    if (th->smp.sw.fd >= 0 && !cpu_only && watch_spares(t, th, tick_ns, wall, &head))
        return false;
    if (th->schedstat_fd < 0 || th->syscall_fd < 0) {
        /* Without its /proc files (profd's descriptors for threads are used up, fds.h)
         * whether it ran or waits cannot be seen: stop it for its stack. */
        target_thread_forget_stack(th);
        t->stats.perf.stopped_without_files++;
        return interrupt(t, th, rq);
    }
    /* Running at its last tick: most likely running still, which its syscall file says in
     * one read. Its schedstat only tells whether a blocked thread ran since its last sample
     * (and when a stop's or a repair's EINTR lies far enough behind: then it is read). */
    bool was_running = th->smp.ran_last_tick;
    th->smp.ran_last_tick = false;
    if (was_running && !cpu_only && !th->stop_eintr && !th->chain_valid) {
        struct sysc_info si;
        if (proc_read_syscall(th->syscall_fd, &si) < 0) {
            t->stats.failed.thread_exited++;
            return false;
        }
        if (si.state != SYSC_IN_SYSCALL) {
            t->stats.running_again++;
            return sample_running(t, th, rq);
        }
        /* (blocked since: as any thread, below) */
    }
    if (proc_read_schedstat(th->schedstat_fd, &run, &pcount) < 0) {
        t->stats.failed.thread_exited++;
        return false;
    }
    if (cpu_only)
        return sample_on_cpu(t, th, rq, run);
    /* Not run since its last sample: same stack, no need to look again. */
    if (th->have_sched && run == th->run_ns && pcount == th->pcount && push_last(t, th, tick_ns)) {
        watch_quiet(th, head, rq->boundary);
        return false;
    }
    target_thread_ran(th);
    uint64_t t0 = thread_cpu_ns();
    uint32_t id;
    enum unwind_end end;
    uint64_t sp, seen;
    int rb = read_blocked(t, th, &run, &pcount, &id, &end, &sp, &seen, rq->boundary);
    if (rb < 0)
        return false;
    if (rb > 0) {
        if (id != STACK_NONE)
            push_blocked(t, th, id, end == UNWIND_COMPLETE && !rq->boundary,
                         &(struct blocked_read){run, pcount, sp, head, seen, t0});
        return false;
    }
    if (th->stop_eintr) {
        if (run - th->stop_eintr_run_ns < PAST_STOP_EINTR_NS) {
            t->stats.skipped.resuming_from_job_control++;
            return false;
        }
        th->stop_eintr = false;
    }
    /* Just restarted by an ignored-signal repair and not yet blocked again (or waiting for
     * a CPU to do so): it is in the call it was in. Stopping it would add a switch that
     * makes the chain of repairs look broken and its timeout start over (see
     * repair_ignored_signal); its last stack is where it is. */
    if (th->chain_valid && run - th->chain_run_ns < PAST_STOP_EINTR_NS) {
        if (!push_last(t, th, tick_ns))
            t->stats.skipped.resuming_from_job_control++;
        return false;
    }
    return sample_running(t, th, rq);
}


/* A wall-clock sample of one thread: its stack where job control stopped it, nothing while
 * our previous stop is outstanding, else as sample_thread. Returns whether it was
 * interrupted. */
static bool sample_wall(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    if (th->state == TH_GROUP_STOP) {
        /* Stopped by job control: where it stopped is where its time goes. */
        if (!push_last(t, th, tick_ns))
            t->stats.skipped.job_control_stopped++;
        return false;
    }
    if (th->interrupt_pending || th->rescue_pending) {
        t->stats.skipped.still_stopping++;
        return false;
    }
    return sample_thread(t, th, rq);
}

/* One thread, now, as a tick would (a transaction's boundary on the thread running it). */
static void sample_one(struct target *t, struct thread *th, uint64_t tick_ns)
{
    if (t->state != T_ATTACHED || th->zombie || !th->born)
        return;
    /* A sample of that moment: a running thread is stopped rather than sampled after 0.1 ms
     * more of its CPU (by then it may have left the transaction). */
    struct sample_req rq = {.tick_ns = tick_ns, .due_ns = tick_ns, .boundary = true};
    bool stopped = sample_wall(t, th, &rq);
    if (stopped)
        await_counted(t, 1);
}

/* Whether thread tid has at least two samples since `since` (ring entries are in time
 * order). Looks at most at SCAN_LIMIT entries: beyond, it answers no (one sample more is
 * cheap; a long scan on the loop is not). */
#define SCAN_LIMIT 4096
static bool two_samples_since(const struct target *t, pid_t tid, uint64_t since)
{
    size_t n = 0;
    for (size_t i = ring_lower_bound(&t->ring, since), k = 0;
         i < t->ring.len && k < SCAN_LIMIT; i++, k++)
        if (ring_at(&t->ring, i)->tid == tid && ++n == 2)
            return true;
    return false;
}

void sampler_sample_boundary(struct target *t, pid_t tid, uint64_t now, uint64_t window_ns)
{
    if (t->state != T_ATTACHED || tid <= 0)
        return;
    struct thread *th = target_thread(t, tid);
    if (!th)
        return;
    /* At most one boundary sample per interval and thread: a stream of transactions
     * shorter than an interval must not multiply the stop rate. Except at the finish of a
     * transaction that lasted an interval or more and still has fewer than the two samples
     * of its thread Sentry needs (relay drops a profile with one): its start's sample was
     * skipped for the previous transaction's finish, and no tick landed in it (a starved
     * daemon). Those cost at most one sample per interval too. */
    uint64_t iv = t->interval_ns;
    if (th->boundary_ns && now - th->boundary_ns < iv &&
        !(window_ns && now - window_ns >= iv && !two_samples_since(t, tid, window_ns))) {
        t->stats.transaction_boundaries.skipped_within_interval++;
        return;
    }
    th->boundary_ns = now;
    t->stats.transaction_boundaries.sampled++;
    sample_one(t, th, now);
}

/* t's Python frames are read in the kernel from now on (a runtime found since attach: an
 * exec, a library loaded): its threads' events opened before, without the program, would
 * give samples without them. Closed here, they open again with it as they are asked for.
 * (cputime's clock keeps its own: it has stacks only after a thread's first interval of
 * CPU, which a process that execs into Python spends mostly after the exec.) */
static void py_kernel_began(struct target *t)
{
    t->py.kernel_reopen = false;
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        sampler_latest_close(th);
        sampler_preempt_close(th);
        if (!th->smp.ps.continuous)
            sampler_stream_close(th);
    }
}

/* The program is attached to t's threads' events as they are, cputime's clocks too, whose
 * samples so far stay theirs; a preemption watch on the sched_switch tracepoint, which takes
 * no program beside its filter, is closed (it opens again as the context-switch event).
 * Until *on turns false: refused, said, and read the old way again. */
static void attach_open_events(struct target *t, const bool *on)
{
    for (size_t i = 0; i < t->nthreads && *on; i++) {
        struct thread *th = t->threads[i];
        if (th->smp.pw.fd >= 0 && th->smp.pw.tracepoint)
            sampler_preempt_close(th);
        struct {
            struct perf_stream *ps;
            enum pyk_event ev;
        } evs[] = {{&th->smp.ps, PYK_CLOCK}, {&th->smp.pl, PYK_LATEST}, {&th->smp.pw, PYK_PREEMPT}};
        for (size_t k = 0; k < 3 && *on; k++)
            if (evs[k].ps->fd >= 0 && evs[k].ps->stack_size &&
                pyk_attach(t, evs[k].ps->fd, evs[k].ev, false) < 0)
                break;
    }
}

/* t's goroutines are read in the kernel from now on (its Go runtime found by the first
 * unwinds, moments after attach). */
static void go_kernel_began(struct target *t)
{
    t->gok.reopen = false;
    if (t->tctx.kernel)
        py_kernel_began(t); /* (its events carry the context's program: closed, they open
                               again with Go's, which ends in it) */
    else
        attach_open_events(t, &t->gok.kernel);
}

/* t's thread context is read by the eBPF program from now on (a Python or Go target's
 * programs end in it already). */
static void ctx_kernel_began(struct target *t)
{
    t->tctx.reopen = false;
    if (!t->py.kernel && !t->gok.kernel)
        attach_open_events(t, &t->tctx.kernel);
}

void sampler_tick(struct target *t, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    unsigned interrupted = 0;
    t->stats.ticks++;
    /* New threads (new stacks) or an unknown stack seen last time: re-read the maps now,
     * before stopping anything; at most every 20 ms (a program that starts a thread every
     * millisecond would otherwise have them read at every tick). Until then a stack not in
     * the maps is copied up to UNKNOWN_STACK_COPY. */
    if (t->maps_dirty && tick_ns - t->maps_read_ns > 20 * NS_PER_MS)
        target_refresh_maps(t);
    /* (A Go runtime found by an unwind since: its goroutines read by the kernel from now
     * on, gokernel.h; likewise.) */
    gok_target_update(t);
    /* (Threads sampled without their thread context's slot: found now, threadctx.h.) */
    tctx_target_update(t);
    if (t->py.kernel_reopen)
        py_kernel_began(t);
    if (t->gok.reopen)
        go_kernel_began(t);
    if (t->tctx.reopen)
        ctx_kernel_began(t);
    /* What the kernel sampled since the last tick (one-shot samples of that tick). */
    sampler_flush(t);
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        if (th->zombie || !th->born) {
            th->sched.cpu_due = false;
            continue;
        }
        if (rq->cpu_only) {
            if (!th->sched.cpu_due)
                continue;
            th->sched.cpu_due = false;
            if (th->state == TH_GROUP_STOP || th->interrupt_pending || th->rescue_pending) {
                t->stats.skipped.off_cpu_when_due += th->state == TH_GROUP_STOP;
                t->stats.skipped.still_stopping += th->interrupt_pending || th->rescue_pending;
                continue;
            }
            interrupted += sample_thread(t, th, rq);
            continue;
        }
        /* A clock whose thread has not been found running for a while gives back its
         * ring (locked memory) and descriptor until it is. */
        if (th->smp.pl.fd >= 0 && tick_ns - th->smp.pl_last_ns > LATEST_IDLE_NS) {
            sampler_latest_close(th);
            sampler_preempt_close(th);
        }
        interrupted += sample_wall(t, th, rq);
        if (!th->smp.ran_last_tick)
            th->smp.blocked_tick_ns = tick_ns;
    }
    if (interrupted)
        await_counted(t, interrupted);
    /* Threads that appeared in the last YOUNG_NS: read their names at every tick, after the
     * stops, so a short-lived thread's samples carry the name it gives itself. */
    for (size_t i = 0; t->state == T_ATTACHED && i < t->nthreads; i++)
        if (tick_ns - t->threads[i]->added_ns < YOUNG_NS && t->threads[i]->born)
            target_thread_refresh_name(t->threads[i]);
}

/* A new thread usually names itself (pthread_setname_np) just after it starts: read the
 * names of young threads again with their first samples (never while one is stopped), so
 * even short-lived threads' samples carry the name they gave themselves. */
void young_name(struct thread *th)
{
    if (th->name_checks < 3)
        target_thread_refresh_name(th);
}

