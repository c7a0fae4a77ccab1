/* kcopy.c: a running thread's sample from the kernel's copy of its registers and the top of
 * its stack (perf events, perfsample.h), no stop: the thread's events (its clock in the
 * wall-clock modes, cputime's continuous event, the one-shot, the preemption watch), how much
 * stack they copy, and which of their samples stands for a tick (perf_latest, perf_oneshot,
 * perf_preempted). Part of the sampler (sampler_internal.h). */
#include "sampler_internal.h"

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

/* ---- the kernel's copy (perf events) ---- */

static const char *const kind_names[] = {"auto", "perf", "ptrace"};

const char *sampler_kind_name(enum sampler_kind k)
{
    return (unsigned)k < 3 ? kind_names[k] : "?";
}

int sampler_kind_parse(const char *s, enum sampler_kind *out)
{
    for (unsigned i = 0; i < 3; i++)
        if (!strcmp(s, kind_names[i])) {
            *out = (enum sampler_kind)i;
            return 0;
        }
    return -EINVAL;
}

/* A thread's first copy size (the kernel reserves the whole size in each record, so more
 * costs ring memory, and copying it lengthens the thread's pause): then what its complete
 * unwinds need, learn_perf_stack. */
#define PERF_FIRST_STACK (16 * 1024)
/* The least a copy holds: a page. */
#define PERF_LEAST_STACK 4096u
/* Complete unwinds over which a thread's copy is judged too large, at first; each copy found
 * too short after a shrink doubles it (up to STACK_LOOK_MAX), so a thread whose stack is
 * deeper only now and then is seldom shrunk below it. (busy.c's threads need 12 KiB in a
 * tenth of their samples: over 32 unwinds 3% of looks missed those and shrank the copy to
 * 4 KiB, and test_unwind found 3 of 398 such samples truncated; over 128, 1e-6.) */
#define STACK_LOOK_FIRST 128u
#define STACK_LOOK_MAX 65536u
/* Running samples taken by a stop once a thread's stack proved deeper than the kernel
 * copies; then the kernel's copy is tried again. */
#define DEEP_STOPS 100

uint32_t want_stack(const struct thread *th)
{
    uint32_t n = th->smp.perf_stack ? th->smp.perf_stack : PERF_FIRST_STACK;
    return n > PERFS_MAX_STACK ? PERFS_MAX_STACK : n;
}

static void stack_look_restart(struct thread *th)
{
    th->smp.stack_look_n = 0;
    th->smp.stack_look_need = 0;
}

/* After a complete unwind of a copy starting at sp: the stack it needed (up to the highest
 * byte the unwind read, a KiB more, in pages), for the size of the thread's kernel copies.
 * A deeper need enlarges them at once; once stack_look complete unwinds in a row needed
 * less than they hold, they shrink to the most those needed (a copy takes the kernel time
 * in the thread's interrupt: 4 KiB instead of 16 for a shallow stack). Where the copies'
 * size changes, their event is opened again (read_stacks, perf_latest, perf_oneshot,
 * sampler_defer_resize). */
void learn_perf_stack(struct thread *th, uint64_t sp)
{
    if (!snap.max_read || snap.max_read <= sp)
        return;
    uint64_t need = snap.max_read - sp + 1024;
    need = (need + 4095) & ~4095ull;
    if (need > PERFS_MAX_STACK)
        need = PERFS_MAX_STACK;
    if (need > th->smp.stack_deepest)
        th->smp.stack_deepest = (uint32_t)need;
    if (need > want_stack(th)) {
        th->smp.perf_stack = (uint32_t)need;
        th->smp.stack_shrunk = false;
        stack_look_restart(th);
        return;
    }
    if (need > th->smp.stack_look_need)
        th->smp.stack_look_need = (uint32_t)need;
    if (!th->smp.stack_look)
        th->smp.stack_look = STACK_LOOK_FIRST;
    if (++th->smp.stack_look_n < th->smp.stack_look)
        return;
    uint32_t least = th->smp.stack_look_need > PERF_LEAST_STACK ? th->smp.stack_look_need
                                                             : PERF_LEAST_STACK;
    if (least < want_stack(th)) {
        th->smp.perf_stack = least;
        th->smp.stack_shrunk = true;
        th->t->stats.perf.copy_shrunk++;
    }
    stack_look_restart(th);
}

/* Which of th's events ps is, for the Python frames' program (pykernel.h). */
static enum pyk_event pyk_event_of(const struct thread *th, const struct perf_stream *ps)
{
    return ps == &th->smp.pl ? PYK_LATEST : ps == &th->smp.pw ? PYK_PREEMPT : PYK_CLOCK;
}

/* Unwind a kernel's copy (in snap) of th's event ps's sample taken at time_ns and intern
 * it, with the Python frames the kernel read at that sample (pykernel.h), if any; learn from
 * it how much the thread's copies should hold. Returns as unwind_and_intern. */
uint32_t unwind_copy(struct target *t, struct thread *th, const struct perf_stream *ps,
                     uint64_t time_ns)
{
    uint32_t stack_size = ps->stack_size;
    enum unwind_end end;
    if (t->py.kernel) {
        enum pyk_event ev = pyk_event_of(th, ps);
        npy = pyk_take(t, th, ev, time_ns, pyframes);
        if (npy == PYK_MISSING && ev == PYK_PREEMPT) {
            /* A switch without its record (the ring buffer was full): not this tick's
             * sample, which is the clock's or a one-shot's then. */
            npy = 0;
            return STACK_NONE;
        }
        if (npy < 0)
            npy = 0; /* (the native frames alone, counted missing) */
    }
    snap.gcopy = t->gok.kernel ? gok_take(t, th, pyk_event_of(th, ps), time_ns) : NULL;
    /* Its OpenTelemetry context: the program's read at the sample, else one now (after it,
     * marked so). */
    if (!tctx_take(t, th, pyk_event_of(th, ps), time_ns))
        tctx_capture(t, th, true);
    uint32_t id = unwind_and_intern(t, th, &end, false);
    snap.gcopy = NULL;
    if (end == UNWIND_COMPLETE) {
        learn_perf_stack(th, snap.regs.rsp);
    } else if (snap.short_copy) {
        /* The copy ended before the unwind did: copy more from now on (the most an unwind
         * of the thread needed, if that is more: it was shrunk below it), up to the
         * kernel's limit; past it, stop the thread for its running samples for a while.
         * A copy shrunk too far is shrunk again only after twice as many complete
         * unwinds. */
        t->stats.perf.copy_too_short++;
        if (th->smp.stack_shrunk) {
            th->smp.stack_look = th->smp.stack_look ? th->smp.stack_look * 2 : STACK_LOOK_FIRST * 2;
            if (th->smp.stack_look > STACK_LOOK_MAX)
                th->smp.stack_look = STACK_LOOK_MAX;
        }
        th->smp.stack_shrunk = false;
        stack_look_restart(th);
        if (stack_size >= PERFS_MAX_STACK) {
            th->smp.perf_deep_left = DEEP_STOPS;
        } else {
            uint32_t more = stack_size * 2 > PERFS_MAX_STACK ? PERFS_MAX_STACK : stack_size * 2;
            th->smp.perf_stack = th->smp.stack_deepest > more ? th->smp.stack_deepest : more;
        }
    }
    return id;
}

struct drain_ctx {
    struct target *t;
    struct thread *th;
};

/* A sample of th's continuous event (its copy in snap) unwound and interned: a stack id with
 * one reference, or STACK_NONE (none: no registers, another thread's, or no unwind). */
uint32_t unwind_kernel_sample(struct target *t, struct thread *th,
                              const struct perf_sample *ps)
{
    if (!ps->user || ps->tid != th->tid) {
        t->stats.perf.without_registers++;
        return STACK_NONE;
    }
    uint32_t id = unwind_copy(t, th, &th->smp.ps, ps->time_ns);
    th->smp.perf_last_ns = ps->time_ns;
    return id;
}

/* One sample the kernel took: unwind its copy and record it at the kernel's time. */
static void on_perf_sample(void *arg, const struct perf_sample *ps, struct snapshot *s)
{
    struct drain_ctx *c = arg;
    struct target *t = c->t;
    struct thread *th = c->th;
    (void)s;
    target_thread_ran(th);
    uint32_t id = unwind_kernel_sample(t, th, ps);
    if (id == STACK_NONE)
        return;
    push(t, th, ps->time_ns, id, PATH_PERF);
    t->stats.sampled.kernel_copy++;
    if (th->smp.ps.continuous)
        return;
    /* A one-shot's: also the sample of each tick that found the thread waiting for it
     * (waiting for a CPU, preempted where this sample has it, give or take its
     * ONESHOT_PERIOD_NS of CPU), at this sample's time. */
    for (; th->smp.oneshot_waiting; th->smp.oneshot_waiting--) {
        stacks_ref(&t->stacks, id);
        push(t, th, ps->time_ns, id, PATH_PERF);
        t->stats.sampled.kernel_copy++;
        t->stats.perf.oneshot_waited_for++;
    }
}

void sampler_drain_thread(struct target *t, struct thread *th)
{
    /* (A deferred tick's clock is read by sampler_defer_ticks only.) */
    if (th->smp.ps.fd < 0 || th->smp.defer_kind != DEFER_NONE)
        return;
    /* An empty ring (most ticks of a thread whose event is kept for its bursts) is not worth
     * the two readings of the CPU clock: each is a system call (3 us here). */
    if (!perfs_has_records(&th->smp.ps))
        return;
    struct drain_ctx c = {t, th};
    uint64_t lost = 0;
    uint64_t t0 = thread_cpu_ns();
    if (perfs_drain(&th->smp.ps, &snap, on_perf_sample, &c, &lost))
        t->stats.ns_perf += thread_cpu_ns() - t0;
    t->stats.perf.lost += lost; /* (missed ticks too: the schedule counts them) */
}

void sampler_flush(struct target *t)
{
    /* A one-shot's ring holds a record only while it is armed (a sample taken just before a
     * disarm is drained there, perf_expire): an unarmed one is not looked at (its ring's
     * page, a memory load per thread and tick, was 4% of profd's CPU with 100 services). */
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct perf_stream *ps = &t->threads[i]->smp.ps;
        if (ps->fd >= 0 && ps->stack_size && (ps->continuous || ps->armed))
            sampler_drain_thread(t, t->threads[i]);
    }
}

bool sampler_perf_has_stacks(const struct thread *th)
{
    return th->smp.ps.fd >= 0 && th->smp.ps.stack_size;
}

bool sampler_perf_copy_resized(const struct thread *th)
{
    return sampler_perf_has_stacks(th) && th->smp.ps.stack_size != want_stack(th);
}

/* Open th's perf event: continuous (cputime) or one-shot. Fails (and the thread is then
 * sampled by stopping) without a descriptor in the budget, past max_memory, or where the
 * kernel refuses. */

/* Whether one more ring of this size fits. The rings hold samples (locked memory): they count
 * with the samples, within the three quarters of max_memory these may take, and take a
 * quarter of max_memory at most, so that they never crowd out the buffers. Past it, threads
 * are sampled by stopping them. */
bool ring_room(size_t ring)
{
    struct perfs_totals pt;
    perfs_get_totals(&pt);
    uint64_t max = memory_max();
    return !memory_over() && !(max && pt.ring_bytes + ring > max / 4) &&
           memacct_room(memory_samples(), ring);
}

int perf_open_once(struct thread *th, enum stream_kind kind, uint64_t period,
                   uint32_t stack, unsigned batch)
{
    bool continuous = kind == STREAM_CONTINUOUS;
    /* (An eBPF program on its events: Python's frames, Go's goroutine, the context.) */
    bool program = th->t->py.kernel || th->t->gok.kernel || th->t->tctx.kernel;
    struct perf_stream *ps = kind == STREAM_LATEST    ? &th->smp.pl
                             : kind == STREAM_PREEMPT ? &th->smp.pw
                                                      : &th->smp.ps;
    size_t ring = kind == STREAM_LATEST    ? perfs_latest_bytes(stack)
                  : kind == STREAM_PREEMPT ? perfs_preempt_bytes(stack)
                                           : perfs_ring_bytes(stack, continuous, batch);
    if (!ring_room(ring))
        return -ENOMEM;
    if (!fds_take(1))
        return -EMFILE;
    int r = kind == STREAM_LATEST    ? perfs_open_latest(ps, th->tid, period, stack)
            : kind == STREAM_PREEMPT ? perfs_open_preempt(ps, th->tid, stack, program)
                                     : perfs_open(ps, th->tid, period, stack, continuous, batch);
    if (r == 0 && stack && program) {
        int a = pyk_attach(th->t, ps->fd, pyk_event_of(th, ps), ps->tracepoint);
        if (a < 0 && th->t->py.kernel) {
            perfs_close(ps); /* (its samples would lack the Python frames: stopped for them) */
            r = a;
        } /* (a Go target's event is kept: its goroutines are read at the unwind now; so is
           * one with a thread context, read after its samples now) */
    }
    if (r == 0)
        memacct_add(memory_samples(), perfs_bytes(ps));
    else
        fds_give(1);
    return r;
}


int perf_open(struct target *t, struct thread *th, enum stream_kind kind,
              uint64_t period, uint32_t stack, unsigned batch)
{
    int r = perf_open_once(th, kind, period, stack, batch);
    /* Switch watches only save profd work: they give their room to the sampling. */
    if ((r == -ENOMEM || r == -EMFILE) && watches_release(now_ns()))
        r = perf_open_once(th, kind, period, stack, batch);
    if (r < 0) {
        if (r != -ESRCH && t->perf_err != r) {
            t->perf_err = r;
            log_info("pid %d: no perf event for thread %d (%s): its running samples are taken "
                     "by stopping it", t->pid, th->tid, strerror(-r));
        }
    }
    return r;
}

int sampler_perf_open_continuous(struct target *t, struct thread *th, uint64_t period_ns,
                                 unsigned batch, bool stacks)
{
    sampler_thread_release(th);
    /* (A Python target's running threads are stopped for their Python frames where the
     * kernel cannot read them, pykernel.h.) */
    uint32_t stack = t->sampler == SAMPLER_PTRACE || !stacks || th->smp.perf_refused ||
                             py_stops(t)
                         ? 0
                         : want_stack(th);
    int r = perf_open(t, th, STREAM_CONTINUOUS, period_ns, stack, batch);
    if (r < 0 && stack && r != -ESRCH) {
        /* No room for stacks in the ring (locked memory): count only, stop to sample. */
        th->smp.perf_refused = true;
        r = perf_open(t, th, STREAM_CONTINUOUS, period_ns, 0, batch);
    }
    return r;
}

int sampler_probe(pid_t pid)
{
    struct perf_stream ps;
    if (!fds_take(1))
        return -EMFILE;
    int r = perfs_open(&ps, pid, ONESHOT_PERIOD_NS, PERFS_MIN_STACK, false, 1);
    if (r == 0)
        perfs_close(&ps);
    fds_give(1);
    return r;
}

/* A thread's one-shot sample that was not taken is no longer wanted: the thread is blocked
 * now (that sample would come at some later run, for the wrong tick), or it was asked for two
 * intervals ago (lost). Counted as expired unless it came just before the disarm. */
void perf_expire(struct target *t, struct thread *th)
{
    if (th->smp.ps.fd < 0 || !th->smp.ps.armed)
        return;
    perfs_disarm(&th->smp.ps);
    uint64_t before = t->stats.sampled.kernel_copy + t->stats.perf.without_registers;
    sampler_drain_thread(t, th); /* taken just before the disarm */
    if (t->stats.sampled.kernel_copy + t->stats.perf.without_registers == before)
        t->stats.perf.oneshot_expired++;
}

/* perf_event_open's refusals that asking again will not change (permissions, a filter, a
 * kernel without the event), as against a shortage (descriptors, memory) that may pass. */
bool refused_for_good(int r)
{
    return r == -EACCES || r == -EPERM || r == -ENOENT || r == -EINVAL || r == -ENOSYS;
}

/* Ticks at most that wait for one one-shot's sample (a thread kept from a CPU that long:
 * the later ones go without). */
#define ONESHOT_MAX_WAITING 1024u

/* A running thread's sample from the kernel's copy: ask for one sample of its next
 * ONESHOT_PERIOD_NS of CPU, read at the next tick. Returns false when it must be stopped
 * instead. */
bool perf_oneshot(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    if (t->sampler == SAMPLER_PTRACE || rq->boundary)
        return false;
    if (th->smp.perf_refused) { /* (refused for good, or no room for stacks in its ring) */
        t->stats.perf.stopped_no_event++;
        return false;
    }
    if (py_stops(t)) {
        if (t->py.kernel_loading)
            t->stats.perf.stopped_for_python_loading++;
        else
            t->stats.perf.stopped_for_python++;
        return false;
    }
    if (th->smp.ps.fd >= 0 && th->smp.ps.continuous) {
        /* cputime's counting event (the thread's first interval of CPU): this sample by a
         * stop. (With no room for stacks in its ring, th->smp.perf_refused: above.) */
        t->stats.perf.stopped_first_interval++;
        return false;
    }
    if (th->smp.perf_deep_left) {
        th->smp.perf_deep_left--;
        t->stats.perf.stopped_stack_too_deep++;
        return false;
    }
    if (th->smp.ps.fd >= 0 && th->smp.ps.stack_size != want_stack(th))
        sampler_stream_close(th); /* (its clock has its own size check) */
    if (th->smp.ps.fd < 0) {
        int r = perf_open(t, th, STREAM_ONESHOT, ONESHOT_PERIOD_NS, want_stack(th), 1);
        if (r < 0) {
            /* Refused for good (permissions, a filter): do not ask at every tick. Out of
             * descriptors or memory: ask again later (the next tick). */
            if (refused_for_good(r))
                th->smp.perf_refused = true;
            t->stats.perf.stopped_no_event++;
            return false;
        }
    }
    if (th->smp.ps.armed) {
        /* Its previous sample is not taken yet: it waits for a CPU (counted), or the kernel
         * lost the one-shot (tests/bench/oneshot_refresh: a few in a thousand re-arms here),
         * which would leave a running thread unsampled for good. After two intervals it is
         * asked for again (counted as expired). */
        if (tick_ns - th->smp.ps.armed_ns < 2 * t->interval_ns) {
            if (th->smp.oneshot_waiting < ONESHOT_MAX_WAITING)
                th->smp.oneshot_waiting++;
            else
                t->stats.skipped.still_stopping++;
            return true;
        }
        /* (Not taken: the tick that asked for it waits for the next one too.) */
        uint64_t expired = t->stats.perf.oneshot_expired;
        perf_expire(t, th);
        if (t->stats.perf.oneshot_expired != expired &&
            th->smp.oneshot_waiting < ONESHOT_MAX_WAITING)
            th->smp.oneshot_waiting++;
    }
    if (perfs_arm(&th->smp.ps, tick_ns) < 0) {
        t->stats.perf.stopped_no_event++;
        return false;
    }
    t->stats.perf.oneshot_asked++;
    return true;
}

/* A running thread's preemption watch (perfsample.h), beside its clock: opened with it, and
 * with the same copy size. Where the kernel refuses it for good (no tracepoint nor
 * context-switch event for user-space-only perf), not asked again. A shortage (room,
 * descriptors) only goes without it: the clock and the one-shot do without. */
void preempt_watch_open(struct target *t, struct thread *th, uint32_t stack)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("PROFD_PREEMPT_WATCH");
        off = e && !strcmp(e, "0");
    }
    if (th->smp.pw.fd >= 0 && th->smp.pw.stack_size != stack)
        sampler_preempt_close(th);
    if (off || th->smp.pw_refused || th->smp.pw.fd >= 0)
        return;
    int r = perf_open_once(th, STREAM_PREEMPT, 0, stack, 0);
    if (r < 0 && refused_for_good(r))
        th->smp.pw_refused = true;
    if (r < 0)
        t->stats.perf.preempt_watch_failed++;
}

/* Whether th's sample at tick_ns was where it waited for a CPU (perf_preempted). */
bool preempted_at(const struct thread *th, uint64_t tick_ns)
{
    return th->smp.pw_stack != STACK_NONE && th->smp.pw_tick_ns == tick_ns;
}

/* A wall-clock tick's sample of a thread found running that is waiting for a CPU: the stack
 * it was preempted at, where its wall time goes until it runs again (its clock's newest
 * sample is up to an interval of its CPU older: a workload preempted mostly at some point of
 * its loop, such as a system call at a phase's end, had those waits spread over whatever ran
 * an interval before; the one-shot's sample comes 0.1 ms of CPU after it runs again). At the
 * tick's time: it has been there since the preemption. Returns false when it is not waiting
 * (or that is not known): its clock's sample then, as before. */
bool perf_preempted(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns, due_ns = rq->due_ns;
    /* (Nor for a stack deeper than the kernel copies: its preemptions' copies are cut short
     * too, and its running samples are taken by a stop for a while.) */
    if (th->smp.pw.fd < 0 || rq->boundary || due_ns <= t->sliced_to_ns || th->smp.perf_deep_left)
        return false;
    struct perf_sample s;
    /* At the tick's time, not when profd came to it: on a busy machine profd gets a CPU
     * when a thread gives one up, often preempted where a loop makes a system call (the
     * kernel's time to switch), and that thread, running at the tick, waits there now. */
    int r = perfs_waiting_at(&th->smp.pw, due_ns,
                             th->smp.pw_stack != STACK_NONE ? th->smp.pw_ns : 0, &snap, &s);
    if (r == 1) {
        uint64_t t0 = thread_cpu_ns();
        if (th->smp.pw_stack != STACK_NONE)
            stacks_unref(&t->stacks, th->smp.pw_stack);
        th->smp.pw_stack =
            s.tid == th->tid ? unwind_copy(t, th, &th->smp.pw, s.time_ns) : STACK_NONE;
        th->smp.pw_ns = s.time_ns;
        t->stats.ns_perf += thread_cpu_ns() - t0;
    } else if (r != 2) {
        if (r == -EAGAIN)
            t->stats.perf.latest_torn++;
        return false;
    }
    if (th->smp.pw_stack == STACK_NONE)
        return false;
    stacks_ref(&t->stacks, th->smp.pw_stack);
    push(t, th, due_ns, th->smp.pw_stack, PATH_PERF);
    th->smp.pw_tick_ns = tick_ns;
    th->smp.pw_due_ns = due_ns;
    t->stats.sampled.kernel_copy++;
    t->stats.perf.preempted++;
    return true;
}


/* Whether th's clock sample taken at sample_ns stands for a tick at tick_ns it is found
 * running at: when it is recent (max_age), or when the thread has only waited for a CPU
 * since (its preemption watch shows no block): it has run less than an interval of CPU
 * since, wherever in its work the waits fell. A one-shot instead, a sample 0.1 ms of CPU
 * after such a tick, would be a sample of the moment it got its CPU back, and those moments
 * cluster where the scheduler preempts it (a loop's system call): its profile would lean
 * there (phases' 150 us phase 1-2 points high beside two CPU hogs). */
static bool clock_sample_stands(struct target *t, struct thread *th, uint64_t tick_ns,
                                uint64_t sample_ns, uint64_t max_age)
{
    if ((int64_t)(tick_ns - sample_ns) < (int64_t)max_age)
        return true;
    if (th->smp.pw.fd < 0)
        return false;
    /* Its watch's ring holds a few preemptions: where it does not reach back to the sample
     * (a thread preempted often, at a low rate), every tick since it found the thread on
     * a CPU or waiting for one, not blocked. */
    int blocked = perfs_blocked_since(&th->smp.pw, sample_ns);
    if (blocked > 0 || (blocked < 0 && th->smp.blocked_tick_ns >= sample_ns))
        return false;
    t->stats.perf.latest_across_waits++;
    return true;
}

/* A running thread's sample for a wall-clock tick: its clock's newest sample, or the last one
 * used, if recent enough and outside any window already sliced. (daemon/DESIGN.md, "A running
 * thread's tick from its clock".) */
bool perf_latest(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    if (t->sampler == SAMPLER_PTRACE || th->smp.perf_refused || th->smp.pl_refused ||
        rq->boundary || rq->event || py_stops(t) || th->smp.perf_deep_left)
        return false; /* (perf_oneshot counts why) */
    uint64_t max_age = t->interval_ns * LATEST_MAX_AGE_HALVES / 2;
    uint32_t want = want_stack(th);
    if (th->smp.pl.fd >= 0 && th->smp.pl.stack_size != want)
        sampler_latest_close(th); /* a deeper stack, or a shallower one */
    /* A new rate (the budget's, which moves a little at each look: followed when it moved
     * by a tenth). */
    if (th->smp.pl.fd >= 0 && (th->smp.pl.period_ns > t->interval_ns + t->interval_ns / 10 ||
                           th->smp.pl.period_ns < t->interval_ns - t->interval_ns / 10) &&
        perfs_set_period(&th->smp.pl, t->interval_ns) < 0)
        sampler_latest_close(th);
    if (th->smp.pl.fd < 0) {
        int r = perf_open(t, th, STREAM_LATEST, t->interval_ns, want, 0);
        if (refused_for_good(r))
            th->smp.pl_refused = true;
        th->smp.pl_last_ns = tick_ns; /* (its samples come after; and it is idle from now) */
        if (r == 0)
            preempt_watch_open(t, th, th->smp.pl.stack_size);
        return false; /* nothing in it yet */
    }
    uint64_t t0 = thread_cpu_ns();
    struct perf_sample s;
    int r = perfs_latest(&th->smp.pl, &snap, &s);
    if (r == -EAGAIN)
        t->stats.perf.latest_torn++;
    bool fresh = r > 0 && s.tid == th->tid && s.time_ns > th->smp.pl_last_ns;
    bool refused_sliced = false; /* a sample that lies in a window already sliced */
    if (fresh && s.time_ns <= t->sliced_to_ns)
        refused_sliced = true;
    else if (fresh) {
        bool recent = clock_sample_stands(t, th, tick_ns, s.time_ns, max_age);
        uint32_t id = recent ? unwind_copy(t, th, &th->smp.pl, s.time_ns) : STACK_NONE;
        sampler_forget_latest(th);
        th->smp.pl_last_ns = s.time_ns;
        th->smp.perf_last_ns = s.time_ns;
        perfs_rejitter(&th->smp.pl, PERIOD_DRAW_EVERY); /* (perfsample.c: against aliasing) */
        if (id != STACK_NONE) {
            stacks_ref(&t->stacks, id);
            th->smp.pl_stack = id;
            push(t, th, s.time_ns, id, PATH_PERF);
            t->stats.sampled.kernel_copy++;
            t->stats.perf.latest++;
            t->stats.ns_perf += thread_cpu_ns() - t0;
            return true;
        }
    }
    bool reusable = th->smp.pl_stack != STACK_NONE &&
                    clock_sample_stands(t, th, tick_ns, th->smp.pl_last_ns, max_age);
    if (reusable && th->smp.pl_last_ns <= t->sliced_to_ns)
        refused_sliced = true;
    else if (reusable) {
        /* At the time it was taken, not the tick's: a transaction that began or ended
         * since must not get (or lose) a stack from outside it. */
        stacks_ref(&t->stacks, th->smp.pl_stack);
        push(t, th, th->smp.pl_last_ns, th->smp.pl_stack, PATH_PERF);
        t->stats.sampled.kernel_copy++;
        t->stats.perf.latest_reused++;
        t->stats.ns_perf += thread_cpu_ns() - t0;
        return true;
    }
    if (refused_sliced)
        t->stats.perf.latest_in_sliced_window++; /* (once per tick) */
    return false;
}

