/* sampler.c: the sample path, every way a sample is taken: a thread that has not run (its
 * last stack again), one blocked in a system call (/proc and a copy, no stop), a running one
 * from the kernel's copy (its perf event's ring) or by a ptrace stop (interrupt, the wait for
 * the stop through target.c, GETREGS and the copy, resume); then the unwind, the stack table
 * and the ring. The schedule calls it; it calls target.c and the layers below, never back.
 * Nothing here symbolizes, allocates per frame or opens files while a thread is stopped: the
 * stop covers PTRACE_GETREGS, one process_vm_readv of the stack and PTRACE_CONT; the unwind
 * runs from the copy after the thread is running again. */
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

static struct snapshot snap;
static uint64_t ips[UNWIND_MAX_FRAMES + PY_MAX_FRAMES];
/* The Python frames of the sample being taken, read while the thread could not change them
 * (python.h); npy of them, 0 if none. */
static struct py_frame pyframes[PY_MAX_FRAMES];
static int npy;
static timer_t stop_timer; /* bounds the wait for stops; see await_stops */
static bool have_stop_timer;
static volatile sig_atomic_t stop_timer_fired;
static long ncpus = 1;
static bool awaiting; /* in await_stops: its time is counted as the stops' cost */


static void on_stop_timer(int sig)
{
    (void)sig;
    stop_timer_fired = 1;
}

int sampler_init(size_t max_stack)
{
    ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpus < 1)
        ncpus = 1;
    /* The stop timer's signal: a handler without SA_RESTART, so it interrupts the wait. The
     * timer targets this (the loop) thread only. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_timer;
    sigemptyset(&sa.sa_mask);
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SAMPLER_TIMER_SIGNAL;
    sev._sigev_un._tid = gettid();
    /* Without the handler the timer's real-time signal would kill profd (its default
     * action): no timer then. Without the timer, stops slow to come are never slept for
     * (await_stops): they are handled as they arrive. */
    const char *what = "sigaction";
    if (sigaction(SAMPLER_TIMER_SIGNAL, &sa, NULL) == 0) {
        what = "timer_create";
        have_stop_timer = timer_create(CLOCK_MONOTONIC, &sev, &stop_timer) == 0;
    }
    if (!have_stop_timer)
        log_warn("no timer to bound the wait for stops (%s: %s): a thread slow to stop is "
                 "not waited for", what, strerror(errno));
    snap.cap = max_stack;
    snap.data = malloc(max_stack);
    return snap.data ? 0 : -ENOMEM;
}

void sampler_finish(void)
{
    if (have_stop_timer)
        timer_delete(stop_timer);
    have_stop_timer = false;
    free(snap.data);
    memset(&snap, 0, sizeof(snap));
}

/* Record one sample (the ring takes over the stack reference). when: the time the stack was
 * seen (the stop, or the read of a blocked thread), not the tick's: a thread slow to stop
 * may have moved on since the tick, and transactions are matched to samples by time. */
static void push(struct target *t, struct thread *th, uint64_t when, uint32_t stack,
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

static uint32_t unwind_and_intern(struct target *t, struct thread *th, enum unwind_end *endp,
                                  bool boundary)
{
    enum unwind_end end;
    t->unw.maps_miss = false;
    int n = unwinder_unwind(&t->unw, &snap, ips, UNWIND_MAX_FRAMES, &end);
    if (end != UNWIND_COMPLETE && t->unw.maps_miss) {
        /* At most every 100 ms: code that is in no mapping at all (a stray pc) must not
         * make every sample re-read the maps. */
        uint64_t now = now_ns();
        if (now - t->maps_read_ns > 100 * NS_PER_MS && target_refresh_maps(t) > 0)
            n = unwinder_unwind(&t->unw, &snap, ips, UNWIND_MAX_FRAMES, &end);
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
    return stacks_intern(&t->stacks, t->epoch, flags, ips, (uint16_t)n);
}

/* Fallback copy size when the mapping holding sp is not known yet (a thread whose stack was
 * mapped after the maps were last read): perf's default is 8 KiB; be more generous. */
#define UNKNOWN_STACK_COPY (64 * 1024)
/* A thread this young has its name read at every tick. */
#define YOUNG_NS (20 * NS_PER_MS)
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
static uint64_t stack_limit(struct target *t, struct thread *th, uint64_t sp)
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
static void set_last(struct thread *th, uint32_t stack, uint64_t run_ns, uint64_t pcount)
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

static void young_name(struct thread *th);

/* Record the thread's latest stack again (it is still where it was). Returns false if it
 * has none. */
/* A tick found th not running (blocked, stopped): the ticks that waited for its one-shot's
 * sample go without one (where it runs next may be elsewhere). */
static void oneshot_unwait(struct target *t, struct thread *th)
{
    t->stats.skipped.still_stopping += th->oneshot_waiting;
    th->oneshot_waiting = 0;
}

static bool push_last(struct target *t, struct thread *th, uint64_t tick_ns)
{
    oneshot_unwait(t, th);
    if (th->last_stack == STACK_NONE)
        return false;
    stacks_ref(&t->stacks, th->last_stack);
    push(t, th, tick_ns, th->last_stack, PATH_REUSED);
    t->stats.sampled.idle_reused++;
    return true;
}


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

static uint32_t want_stack(const struct thread *th)
{
    uint32_t n = th->perf_stack ? th->perf_stack : PERF_FIRST_STACK;
    return n > PERFS_MAX_STACK ? PERFS_MAX_STACK : n;
}

static void stack_look_restart(struct thread *th)
{
    th->stack_look_n = 0;
    th->stack_look_need = 0;
}

/* After a complete unwind of a copy starting at sp: the stack it needed (up to the highest
 * byte the unwind read, a KiB more, in pages), for the size of the thread's kernel copies.
 * A deeper need enlarges them at once; once stack_look complete unwinds in a row needed
 * less than they hold, they shrink to the most those needed (a copy takes the kernel time
 * in the thread's interrupt: 4 KiB instead of 16 for a shallow stack). Where the copies'
 * size changes, their event is opened again (read_stacks, perf_latest, perf_oneshot,
 * sampler_defer_resize). */
static void learn_perf_stack(struct thread *th, uint64_t sp)
{
    if (!snap.max_read || snap.max_read <= sp)
        return;
    uint64_t need = snap.max_read - sp + 1024;
    need = (need + 4095) & ~4095ull;
    if (need > PERFS_MAX_STACK)
        need = PERFS_MAX_STACK;
    if (need > th->stack_deepest)
        th->stack_deepest = (uint32_t)need;
    if (need > want_stack(th)) {
        th->perf_stack = (uint32_t)need;
        th->stack_shrunk = false;
        stack_look_restart(th);
        return;
    }
    if (need > th->stack_look_need)
        th->stack_look_need = (uint32_t)need;
    if (!th->stack_look)
        th->stack_look = STACK_LOOK_FIRST;
    if (++th->stack_look_n < th->stack_look)
        return;
    uint32_t least = th->stack_look_need > PERF_LEAST_STACK ? th->stack_look_need
                                                             : PERF_LEAST_STACK;
    if (least < want_stack(th)) {
        th->perf_stack = least;
        th->stack_shrunk = true;
        th->t->stats.perf.copy_shrunk++;
    }
    stack_look_restart(th);
}

/* Unwind a kernel's copy of stack_size bytes (in snap) and intern it; learn from it how
 * much the thread's copies should hold. Returns as unwind_and_intern. */
static uint32_t unwind_copy(struct target *t, struct thread *th, uint32_t stack_size)
{
    enum unwind_end end;
    uint32_t id = unwind_and_intern(t, th, &end, false);
    if (end == UNWIND_COMPLETE) {
        learn_perf_stack(th, snap.regs.rsp);
    } else if (snap.short_copy) {
        /* The copy ended before the unwind did: copy more from now on (the most an unwind
         * of the thread needed, if that is more: it was shrunk below it), up to the
         * kernel's limit; past it, stop the thread for its running samples for a while.
         * A copy shrunk too far is shrunk again only after twice as many complete
         * unwinds. */
        t->stats.perf.copy_too_short++;
        if (th->stack_shrunk) {
            th->stack_look = th->stack_look ? th->stack_look * 2 : STACK_LOOK_FIRST * 2;
            if (th->stack_look > STACK_LOOK_MAX)
                th->stack_look = STACK_LOOK_MAX;
        }
        th->stack_shrunk = false;
        stack_look_restart(th);
        if (stack_size >= PERFS_MAX_STACK) {
            th->perf_deep_left = DEEP_STOPS;
        } else {
            uint32_t more = stack_size * 2 > PERFS_MAX_STACK ? PERFS_MAX_STACK : stack_size * 2;
            th->perf_stack = th->stack_deepest > more ? th->stack_deepest : more;
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
static uint32_t unwind_kernel_sample(struct target *t, struct thread *th,
                                     const struct perf_sample *ps)
{
    if (!ps->user || ps->tid != th->tid) {
        t->stats.perf.without_registers++;
        return STACK_NONE;
    }
    uint32_t id = unwind_copy(t, th, th->ps.stack_size);
    th->perf_last_ns = ps->time_ns;
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
    if (th->ps.continuous)
        return;
    /* A one-shot's: also the sample of each tick that found the thread waiting for it
     * (waiting for a CPU, preempted where this sample has it, give or take its
     * ONESHOT_PERIOD_NS of CPU), at this sample's time. */
    for (; th->oneshot_waiting; th->oneshot_waiting--) {
        stacks_ref(&t->stacks, id);
        push(t, th, ps->time_ns, id, PATH_PERF);
        t->stats.sampled.kernel_copy++;
        t->stats.perf.oneshot_waited_for++;
    }
}

void sampler_drain_thread(struct target *t, struct thread *th)
{
    /* (A deferred tick's clock is read by sampler_defer_ticks only.) */
    if (th->ps.fd < 0 || th->defer_kind != DEFER_NONE)
        return;
    /* An empty ring (most ticks of a thread whose event is kept for its bursts) is not worth
     * the two readings of the CPU clock: each is a system call (3 us here). */
    if (!perfs_has_records(&th->ps))
        return;
    struct drain_ctx c = {t, th};
    uint64_t lost = 0;
    uint64_t t0 = thread_cpu_ns();
    if (perfs_drain(&th->ps, &snap, on_perf_sample, &c, &lost))
        t->stats.ns_perf += thread_cpu_ns() - t0;
    t->stats.perf.lost += lost; /* (missed ticks too: the schedule counts them) */
}

void sampler_flush(struct target *t)
{
    /* A one-shot's ring holds a record only while it is armed (a sample taken just before a
     * disarm is drained there, perf_expire): an unarmed one is not looked at (its ring's
     * page, a memory load per thread and tick, was 4% of profd's CPU with 100 services). */
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct perf_stream *ps = &t->threads[i]->ps;
        if (ps->fd >= 0 && ps->stack_size && (ps->continuous || ps->armed))
            sampler_drain_thread(t, t->threads[i]);
    }
}

bool sampler_perf_has_stacks(const struct thread *th)
{
    return th->ps.fd >= 0 && th->ps.stack_size;
}

bool sampler_perf_copy_resized(const struct thread *th)
{
    return sampler_perf_has_stacks(th) && th->ps.stack_size != want_stack(th);
}

/* Open th's perf event: continuous (cputime) or one-shot. Fails (and the thread is then
 * sampled by stopping) without a descriptor in the budget, past max_memory, or where the
 * kernel refuses. */
enum stream_kind { STREAM_ONESHOT, STREAM_CONTINUOUS, STREAM_LATEST, STREAM_PREEMPT };

/* Whether one more ring of this size fits. The rings hold samples (locked memory): they count
 * with the samples, within the three quarters of max_memory these may take, and take a
 * quarter of max_memory at most, so that they never crowd out the buffers. Past it, threads
 * are sampled by stopping them. */
static bool ring_room(size_t ring)
{
    struct perfs_totals pt;
    perfs_get_totals(&pt);
    uint64_t max = memory_max();
    return !memory_over() && !(max && pt.ring_bytes + ring > max / 4) &&
           memacct_room(memory_samples(), ring);
}

static int perf_open_once(struct thread *th, enum stream_kind kind, uint64_t period,
                          uint32_t stack, unsigned batch)
{
    bool continuous = kind == STREAM_CONTINUOUS;
    struct perf_stream *ps = kind == STREAM_LATEST    ? &th->pl
                             : kind == STREAM_PREEMPT ? &th->pw
                                                      : &th->ps;
    size_t ring = kind == STREAM_LATEST    ? perfs_latest_bytes(stack)
                  : kind == STREAM_PREEMPT ? perfs_preempt_bytes(stack)
                                           : perfs_ring_bytes(stack, continuous, batch);
    if (!ring_room(ring))
        return -ENOMEM;
    if (!fds_take(1))
        return -EMFILE;
    int r = kind == STREAM_LATEST    ? perfs_open_latest(ps, th->tid, period, stack)
            : kind == STREAM_PREEMPT ? perfs_open_preempt(ps, th->tid, stack)
                                     : perfs_open(ps, th->tid, period, stack, continuous, batch);
    if (r == 0)
        memacct_add(memory_samples(), perfs_bytes(ps));
    else
        fds_give(1);
    return r;
}

static bool watches_release(uint64_t now);

static int perf_open(struct target *t, struct thread *th, enum stream_kind kind,
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
    target_thread_perf_close(th);
    /* (A Python target's running threads are stopped for their Python frames, python.h.) */
    uint32_t stack = t->sampler == SAMPLER_PTRACE || !stacks || th->perf_refused ||
                             t->py.status == PYS_OK
                         ? 0
                         : want_stack(th);
    int r = perf_open(t, th, STREAM_CONTINUOUS, period_ns, stack, batch);
    if (r < 0 && stack && r != -ESRCH) {
        /* No room for stacks in the ring (locked memory): count only, stop to sample. */
        th->perf_refused = true;
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
static void perf_expire(struct target *t, struct thread *th)
{
    if (th->ps.fd < 0 || !th->ps.armed)
        return;
    perfs_disarm(&th->ps);
    uint64_t before = t->stats.sampled.kernel_copy + t->stats.perf.without_registers;
    sampler_drain_thread(t, th); /* taken just before the disarm */
    if (t->stats.sampled.kernel_copy + t->stats.perf.without_registers == before)
        t->stats.perf.oneshot_expired++;
}

/* perf_event_open's refusals that asking again will not change (permissions, a filter, a
 * kernel without the event), as against a shortage (descriptors, memory) that may pass. */
static bool refused_for_good(int r)
{
    return r == -EACCES || r == -EPERM || r == -ENOENT || r == -EINVAL || r == -ENOSYS;
}

/* Ticks at most that wait for one one-shot's sample (a thread kept from a CPU that long:
 * the later ones go without). */
#define ONESHOT_MAX_WAITING 1024u

/* A running thread's sample from the kernel's copy: ask for one sample of its next
 * ONESHOT_PERIOD_NS of CPU, read at the next tick. Returns false when it must be stopped
 * instead. */
static bool perf_oneshot(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    if (t->sampler == SAMPLER_PTRACE || rq->boundary)
        return false;
    if (th->perf_refused) { /* (refused for good, or no room for stacks in its ring) */
        t->stats.perf.stopped_no_event++;
        return false;
    }
    if (t->py.status == PYS_OK) {
        t->stats.perf.stopped_for_python++;
        return false;
    }
    if (th->ps.fd >= 0 && th->ps.continuous) {
        /* cputime's counting event (the thread's first interval of CPU): this sample by a
         * stop. (With no room for stacks in its ring, th->perf_refused: above.) */
        t->stats.perf.stopped_first_interval++;
        return false;
    }
    if (th->perf_deep_left) {
        th->perf_deep_left--;
        t->stats.perf.stopped_stack_too_deep++;
        return false;
    }
    if (th->ps.fd >= 0 && th->ps.stack_size != want_stack(th))
        target_thread_stream_close(th); /* (its clock has its own size check) */
    if (th->ps.fd < 0) {
        int r = perf_open(t, th, STREAM_ONESHOT, ONESHOT_PERIOD_NS, want_stack(th), 1);
        if (r < 0) {
            /* Refused for good (permissions, a filter): do not ask at every tick. Out of
             * descriptors or memory: ask again later (the next tick). */
            if (refused_for_good(r))
                th->perf_refused = true;
            t->stats.perf.stopped_no_event++;
            return false;
        }
    }
    if (th->ps.armed) {
        /* Its previous sample is not taken yet: it waits for a CPU (counted), or the kernel
         * lost the one-shot (tests/bench/oneshot_refresh: a few in a thousand re-arms here),
         * which would leave a running thread unsampled for good. After two intervals it is
         * asked for again (counted as expired). */
        if (tick_ns - th->ps.armed_ns < 2 * t->interval_ns) {
            if (th->oneshot_waiting < ONESHOT_MAX_WAITING)
                th->oneshot_waiting++;
            else
                t->stats.skipped.still_stopping++;
            return true;
        }
        /* (Not taken: the tick that asked for it waits for the next one too.) */
        uint64_t expired = t->stats.perf.oneshot_expired;
        perf_expire(t, th);
        if (t->stats.perf.oneshot_expired != expired && th->oneshot_waiting < ONESHOT_MAX_WAITING)
            th->oneshot_waiting++;
    }
    if (perfs_arm(&th->ps, tick_ns) < 0) {
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
static void preempt_watch_open(struct target *t, struct thread *th, uint32_t stack)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("PROFD_PREEMPT_WATCH");
        off = e && !strcmp(e, "0");
    }
    if (th->pw.fd >= 0 && th->pw.stack_size != stack)
        target_thread_preempt_close(th);
    if (off || th->pw_refused || th->pw.fd >= 0)
        return;
    int r = perf_open_once(th, STREAM_PREEMPT, 0, stack, 0);
    if (r < 0 && refused_for_good(r))
        th->pw_refused = true;
    if (r < 0)
        t->stats.perf.preempt_watch_failed++;
}

/* Whether th's sample at tick_ns was where it waited for a CPU (perf_preempted). */
static bool preempted_at(const struct thread *th, uint64_t tick_ns)
{
    return th->pw_stack != STACK_NONE && th->pw_tick_ns == tick_ns;
}

/* A wall-clock tick's sample of a thread found running that is waiting for a CPU: the stack
 * it was preempted at, where its wall time goes until it runs again (its clock's newest
 * sample is up to an interval of its CPU older: a workload preempted mostly at some point of
 * its loop, such as a system call at a phase's end, had those waits spread over whatever ran
 * an interval before; the one-shot's sample comes 0.1 ms of CPU after it runs again). At the
 * tick's time: it has been there since the preemption. Returns false when it is not waiting
 * (or that is not known): its clock's sample then, as before. */
static bool perf_preempted(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns, due_ns = rq->due_ns;
    /* (Nor for a stack deeper than the kernel copies: its preemptions' copies are cut short
     * too, and its running samples are taken by a stop for a while.) */
    if (th->pw.fd < 0 || rq->boundary || due_ns <= t->sliced_to_ns || th->perf_deep_left)
        return false;
    struct perf_sample s;
    /* At the tick's time, not when profd came to it: on a busy machine profd gets a CPU
     * when a thread gives one up, often preempted where a loop makes a system call (the
     * kernel's time to switch), and that thread, running at the tick, waits there now. */
    int r = perfs_waiting_at(&th->pw, due_ns, th->pw_stack != STACK_NONE ? th->pw_ns : 0,
                             &snap, &s);
    if (r == 1) {
        uint64_t t0 = thread_cpu_ns();
        if (th->pw_stack != STACK_NONE)
            stacks_unref(&t->stacks, th->pw_stack);
        th->pw_stack = s.tid == th->tid ? unwind_copy(t, th, th->pw.stack_size) : STACK_NONE;
        th->pw_ns = s.time_ns;
        t->stats.ns_perf += thread_cpu_ns() - t0;
    } else if (r != 2) {
        if (r == -EAGAIN)
            t->stats.perf.latest_torn++;
        return false;
    }
    if (th->pw_stack == STACK_NONE)
        return false;
    stacks_ref(&t->stacks, th->pw_stack);
    push(t, th, due_ns, th->pw_stack, PATH_PERF);
    th->pw_tick_ns = tick_ns;
    th->pw_due_ns = due_ns;
    t->stats.sampled.kernel_copy++;
    t->stats.perf.preempted++;
    return true;
}

/* The newest sample of the thread's clock stands for a tick it is found running at when it
 * is at most this many intervals old (halves): a thread on a CPU throughout has one per
 * interval of its CPU, but ticks fall anywhere in the first quarter of theirs. */
#define LATEST_MAX_AGE_HALVES 3
/* A one-shot event not asked for this long is closed while the thread's clock serves. */
#define ONESHOT_IDLE_NS (NS_PER_SEC)
/* A thread's clock not used for this long is closed (opened again when it runs). */
#define LATEST_IDLE_NS (10 * NS_PER_SEC)

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
    if (th->pw.fd < 0)
        return false;
    /* Its watch's ring holds a few preemptions: where it does not reach back to the sample
     * (a thread preempted often, at a low rate), every tick since it found the thread on
     * a CPU or waiting for one, not blocked. */
    int blocked = perfs_blocked_since(&th->pw, sample_ns);
    if (blocked > 0 || (blocked < 0 && th->blocked_tick_ns >= sample_ns))
        return false;
    t->stats.perf.latest_across_waits++;
    return true;
}

/* A running thread's sample for a wall-clock tick: its clock's newest sample, or the last one
 * used, if recent enough and outside any window already sliced. (daemon/DESIGN.md, "A running
 * thread's tick from its clock".) */
static bool perf_latest(struct target *t, struct thread *th, const struct sample_req *rq)
{
    uint64_t tick_ns = rq->tick_ns;
    if (t->sampler == SAMPLER_PTRACE || th->perf_refused || th->pl_refused || rq->boundary ||
        rq->event || t->py.status == PYS_OK || th->perf_deep_left)
        return false; /* (perf_oneshot counts why) */
    uint64_t max_age = t->interval_ns * LATEST_MAX_AGE_HALVES / 2;
    uint32_t want = want_stack(th);
    if (th->pl.fd >= 0 && th->pl.stack_size != want)
        target_thread_latest_close(th); /* a deeper stack, or a shallower one */
    /* A new rate (the budget's, which moves a little at each look: followed when it moved
     * by a tenth). */
    if (th->pl.fd >= 0 && (th->pl.period_ns > t->interval_ns + t->interval_ns / 10 ||
                           th->pl.period_ns < t->interval_ns - t->interval_ns / 10) &&
        perfs_set_period(&th->pl, t->interval_ns) < 0)
        target_thread_latest_close(th);
    if (th->pl.fd < 0) {
        int r = perf_open(t, th, STREAM_LATEST, t->interval_ns, want, 0);
        if (refused_for_good(r))
            th->pl_refused = true;
        th->pl_last_ns = tick_ns; /* (its samples come after; and it is idle from now) */
        if (r == 0)
            preempt_watch_open(t, th, th->pl.stack_size);
        return false; /* nothing in it yet */
    }
    uint64_t t0 = thread_cpu_ns();
    struct perf_sample s;
    int r = perfs_latest(&th->pl, &snap, &s);
    if (r == -EAGAIN)
        t->stats.perf.latest_torn++;
    bool fresh = r > 0 && s.tid == th->tid && s.time_ns > th->pl_last_ns;
    bool refused_sliced = false; /* a sample that lies in a window already sliced */
    if (fresh && s.time_ns <= t->sliced_to_ns)
        refused_sliced = true;
    else if (fresh) {
        bool recent = clock_sample_stands(t, th, tick_ns, s.time_ns, max_age);
        uint32_t id = recent ? unwind_copy(t, th, th->pl.stack_size) : STACK_NONE;
        target_thread_forget_latest(th);
        th->pl_last_ns = s.time_ns;
        th->perf_last_ns = s.time_ns;
        perfs_rejitter(&th->pl, PERIOD_DRAW_EVERY); /* (perfsample.c: against aliasing) */
        if (id != STACK_NONE) {
            stacks_ref(&t->stacks, id);
            th->pl_stack = id;
            push(t, th, s.time_ns, id, PATH_PERF);
            t->stats.sampled.kernel_copy++;
            t->stats.perf.latest++;
            t->stats.ns_perf += thread_cpu_ns() - t0;
            return true;
        }
    }
    bool reusable = th->pl_stack != STACK_NONE &&
                    clock_sample_stands(t, th, tick_ns, th->pl_last_ns, max_age);
    if (reusable && th->pl_last_ns <= t->sliced_to_ns)
        refused_sliced = true;
    else if (reusable) {
        /* At the time it was taken, not the tick's: a transaction that began or ended
         * since must not get (or lose) a stack from outside it. */
        stacks_ref(&t->stacks, th->pl_stack);
        push(t, th, th->pl_last_ns, th->pl_stack, PATH_PERF);
        t->stats.sampled.kernel_copy++;
        t->stats.perf.latest_reused++;
        t->stats.ns_perf += thread_cpu_ns() - t0;
        return true;
    }
    if (refused_sliced)
        t->stats.perf.latest_in_sliced_window++; /* (once per tick) */
    return false;
}

/* ---- deferred ticks (alarm): taken after the fact, in batches ----
 *
 * Why, and what it was measured against: daemon/DESIGN.md, "Deferred ticks". */

/* A running thread's clock ring while deferred: at most this much locked memory, for the
 * batch's samples and DEFER_MARGIN more (profd late at the batch's end: a busy machine). */
#define DEFER_RING_MAX (1024u * 1024u + 4096u) /* (1 MiB of ring and its header page) */
#define DEFER_MARGIN 4u
#define DEFER_MIN_BATCH 4
/* Ticks of a running thread taken at once before its share of the CPU is judged. */
#define DEFER_STARVED_MIN_TICKS 16
/* A batch is left when more than this share (1 / it) of a running thread's ticks fell in its
 * waits for a CPU where its preemption watch (a few preemptions) cannot say where it waited:
 * those ticks took its clock's sample from before the preemption, not where it waited, as a
 * tick on time would have (perf_preempted). Up to an eighth of them, each at most an
 * interval of the thread's CPU from where it waited, is below the accuracy profd keeps
 * (test_truth: 2 points of a phase's share); beside CPU hogs the waits are a third to a
 * half of its time; on a machine running profd, its client and little else, 1-12%. */
#define DEFER_WAIT_DIV 8

/* perfs_open's batch (its ring holds 8 samples more) for a ring of b + DEFER_MARGIN. */
static unsigned defer_ring_batch(unsigned b)
{
    return b + DEFER_MARGIN > 8 ? b + DEFER_MARGIN - 8 : 0;
}

/* Whether every thread of t is as a deferral needs it at this tick (blocked where its last
 * stack says, or running with a recent sample), and the batch (at most max_batch ticks, less
 * where a thread's ring would be too large) with the bytes of rings it takes. */
static bool defer_possible(const struct target *t, uint64_t tick_ns, unsigned max_batch,
                           unsigned *batch, size_t *ring_bytes)
{
    if (t->deferred || t->sampler == SAMPLER_PTRACE || t->py.status == PYS_OK ||
        t->state != T_ATTACHED || t->maps_dirty || !t->nthreads)
        return false;
    uint64_t max_age = t->interval_ns * LATEST_MAX_AGE_HALVES / 2;
    unsigned b = max_batch;
    size_t rings = 0;
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct thread *th = t->threads[i];
        if (th->zombie || !th->born || th->state == TH_GROUP_STOP || th->interrupt_pending ||
            th->rescue_pending || th->stop_eintr || th->chain_valid || th->perf_deep_left ||
            th->perf_refused || tick_ns - th->added_ns < YOUNG_NS ||
            (th->ps.fd >= 0 && th->ps.armed)) /* (a one-shot's sample still to read) */
            return false;
        if (th->ran_last_tick) {
            /* Running, its sample this tick its clock's (a stop or a one-shot: not yet), or
             * its preemption's: waiting for a CPU (profd's own, often, at its tick). */
            if (!preempted_at(th, tick_ns) && (th->pl.fd < 0 || th->pl_stack == STACK_NONE ||
                                               tick_ns - th->pl_last_ns >= max_age))
                return false;
            while (b >= DEFER_MIN_BATCH &&
                   perfs_ring_bytes(want_stack(th), true, defer_ring_batch(b)) > DEFER_RING_MAX)
                b--;
            rings += perfs_ring_bytes(want_stack(th), true, defer_ring_batch(b));
        } else if (th->last_stack == STACK_NONE || !th->have_sched) {
            return false;
        }
        rings += perfs_changes_bytes(th->ran_last_tick);
    }
    *batch = b;
    *ring_bytes = rings;
    return true;
}

/* What a deferral saw at the tick still holds now that its watches are open: a blocked
 * thread has not run since its stack was read, a running one is not in a system call. */
static bool defer_still_holds(const struct target *t)
{
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct thread *th = t->threads[i];
        if (th->defer_kind == DEFER_BLOCKED) {
            uint64_t run, pcount;
            if (proc_read_schedstat(th->schedstat_fd, &run, &pcount) < 0 ||
                run != th->run_ns || pcount != th->pcount)
                return false;
        } else {
            struct sysc_info si;
            if (proc_read_syscall(th->syscall_fd, &si) < 0 || si.state == SYSC_IN_SYSCALL)
                return false;
        }
    }
    return true;
}

bool sampler_defer_begin(struct target *t, uint64_t tick_ns, unsigned max_batch,
                         unsigned *batch, int *epfd)
{
    unsigned b;
    size_t rings;
    if (!defer_possible(t, tick_ns, max_batch, &b, &rings))
        return false;
    if (b < DEFER_MIN_BATCH || !ring_room(rings) || !fds_take(1))
        return false;
    t->defer_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (t->defer_epfd < 0) {
        fds_give(1);
        return false;
    }
    t->deferred = true; /* (sampler_defer_end undoes what follows) */
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        if (!fds_take(1))
            goto undo;
        /* A blocked thread's first switch wakes profd; a running one's switches out do (a
         * preemption changes nothing: sampler_defer_changed reads it and defers on). */
        int w = perfs_open_changes(&th->chg, th->tid, th->ran_last_tick);
        if (w < 0) {
            fds_give(1);
            goto undo;
        }
        memacct_add(memory_samples(), perfs_bytes(&th->chg));
        /* (w == 1: a running thread's watch that wakes nobody, read at the batch's end.) */
        struct epoll_event ev = {.events = EPOLLIN};
        if (w == 0 && epoll_ctl(t->defer_epfd, EPOLL_CTL_ADD, th->chg.fd, &ev) < 0)
            goto undo;
        if (!th->ran_last_tick) {
            th->defer_kind = DEFER_BLOCKED;
            continue;
        }
        /* Its clock becomes one whose ring holds the batch (two would each interrupt it).
         * Its newest sample until the clock has one: where it waited at the tick, if it did,
         * else the clock's. */
        if (preempted_at(th, tick_ns)) {
            stacks_ref(&t->stacks, th->pw_stack);
            th->dc_stack = th->pw_stack;
            /* (At the time it is known to have waited there, the tick's due time, as
             * perf_preempted stamped it: by tick_ns, later on a busy machine, it may have
             * run on, into a transaction begun since.) */
            th->dc_ns = th->pw_due_ns;
        } else {
            th->dc_stack = th->pl_stack; /* (the reference moves) */
            th->dc_ns = th->pl_last_ns;
            th->pl_stack = STACK_NONE;
        }
        target_thread_latest_close(th);
        target_thread_stream_close(th); /* a one-shot */
        th->defer_kind = DEFER_RUNNING;
        th->defer_ticks = th->defer_clock = 0;
        if (perf_open_once(th, STREAM_CONTINUOUS, t->interval_ns, want_stack(th),
                           defer_ring_batch(b)) < 0)
            goto undo;
    }
    if (!defer_still_holds(t))
        goto undo;
    t->stats.defer_begun++;
    *batch = b;
    *epfd = t->defer_epfd;
    return true;
undo:
    t->stats.defer_refused++;
    sampler_defer_end(t, true);
    return false;
}

bool sampler_defer_resize(struct target *t, unsigned batch)
{
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        if (th->defer_kind != DEFER_RUNNING || !sampler_perf_copy_resized(th))
            continue;
        uint32_t want = want_stack(th);
        /* (A larger copy must fit the ring room of the batch as begun.) */
        if (want > th->ps.stack_size &&
            perfs_ring_bytes(want, true, defer_ring_batch(batch)) > DEFER_RING_MAX)
            return false;
        target_thread_stream_close(th);
        if (perf_open_once(th, STREAM_CONTINUOUS, t->interval_ns, want,
                           defer_ring_batch(batch)) < 0)
            return false;
        if (th->pw.fd >= 0)
            preempt_watch_open(t, th, want); /* (its samples copy as much) */
    }
    return true;
}

void sampler_defer_end(struct target *t, bool going_on)
{
    if (!t->deferred)
        return;
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        /* A running thread's clock again, at once, its newest sample (the batch clock's) with
         * it: the next tick on time finds a sample of it in either (perf_latest), not an
         * empty clock, which would ask a one-shot (a second interrupt of the thread). */
        bool clock = going_on && th->defer_kind == DEFER_RUNNING && t->state == T_ATTACHED &&
                     !th->zombie && th->pl.fd < 0;
        uint32_t newest = STACK_NONE;
        uint64_t newest_ns = th->dc_ns;
        if (clock) {
            newest = th->dc_stack; /* (the reference moves) */
            th->dc_stack = STACK_NONE;
        }
        target_thread_defer_close(th);
        bool opened = clock && perf_open(t, th, STREAM_LATEST, t->interval_ns, want_stack(th),
                                         0) == 0;
        if (opened)
            preempt_watch_open(t, th, th->pl.stack_size);
        if (opened && newest != STACK_NONE) {
            th->pl_stack = newest; /* (the reference moves) */
            th->pl_last_ns = newest_ns;
        } else if (newest != STACK_NONE) {
            stacks_unref(&t->stacks, newest);
        }
    }
    close(t->defer_epfd);
    fds_give(1);
    t->defer_epfd = -1;
    t->deferred = false;
}

uint64_t sampler_defer_changed(struct target *t, bool *any)
{
    uint64_t first = UINT64_MAX;
    *any = false;
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        uint64_t c;
        if (th->defer_kind == DEFER_NONE) {
            c = th->added_ns; /* a thread born since: from then on, unknown */
        } else if (th->defer_kind == DEFER_BLOCKED) {
            c = perfs_first_change(&th->chg);
            /* Its stack forgotten (the maps changed, target_refresh_maps): to be read again. */
            if (th->last_stack == STACK_NONE && t->maps_read_ns < c)
                c = t->maps_read_ns;
        } else {
            /* A running thread that blocked and has stayed blocked: where it is now is where
             * it was from then on (sampler_defer_ticks reads it). */
            bool back_in;
            c = perfs_first_block(&th->chg, &back_in);
            th->defer_block_ns = 0;
            if (c && c != UINT64_MAX && !back_in) {
                th->defer_block_ns = c;
                *any = true;
                continue;
            }
        }
        if (c < first)
            first = c;
    }
    if (first != UINT64_MAX)
        *any = true;
    return first;
}

bool sampler_defer_hung_up(struct target *t)
{
    if (!t->deferred)
        return false;
    struct epoll_event ev[16];
    int n = epoll_wait(t->defer_epfd, ev, 16, 0);
    for (int i = 0; i < n; i++)
        if (ev[i].events & (EPOLLHUP | EPOLLERR))
            return true;
    return false;
}

static int read_blocked(struct target *t, struct thread *th, uint64_t *run, uint64_t *pcount,
                        uint32_t *id, enum unwind_end *end, uint64_t *sp, uint64_t *seen_ns,
                        bool boundary);

/* A deferred tick's sample of one thread, before it is pushed: the ticks' samples are
 * gathered thread by thread, then pushed tick by tick (in time order: ring_push keeps the
 * buffer sorted by walking back from its end). */
struct dsample {
    uint64_t at;
    uint32_t id; /* one reference; STACK_NONE: none */
    uint8_t path; /* enum sample_path */
};

static void dsample_set(struct target *t, struct dsample *d, uint64_t at, uint32_t id,
                        enum sample_path path)
{
    stacks_ref(&t->stacks, id);
    d->at = at;
    d->id = id;
    d->path = (uint8_t)path;
}

/* Ticks[0..n) of a running thread that blocked before them and has stayed blocked: its
 * stack read now, as a blocked thread's (read_blocked), stands for each, if its change
 * watch still shows no switch in after the read. */
static void defer_fill_blocked(struct target *t, struct thread *th, const uint64_t *ticks,
                               struct dsample *row, size_t n)
{
    uint64_t t0 = thread_cpu_ns();
    uint64_t run, pcount, sp, seen;
    uint32_t id = STACK_NONE;
    enum unwind_end end;
    bool back_in = true;
    int rb = proc_read_schedstat(th->schedstat_fd, &run, &pcount) < 0
                 ? -1
                 : read_blocked(t, th, &run, &pcount, &id, &end, &sp, &seen, false);
    if (rb > 0)
        perfs_first_block(&th->chg, &back_in);
    if (rb <= 0 || id == STACK_NONE || back_in) {
        if (id != STACK_NONE)
            stacks_unref(&t->stacks, id);
        t->stats.deferred_unsampled += n;
        return;
    }
    for (size_t k = 0; k < n; k++)
        dsample_set(t, &row[k], ticks[k], id, k ? PATH_REUSED : PATH_PROC);
    t->stats.sampled.blocked_without_stop++;
    t->stats.sampled.idle_reused += n - 1;
    t->stats.deferred_blocked += n;
    t->stats.ns_blocked += thread_cpu_ns() - t0;
    /* The next tick on time finds it blocked where it was, if it has not run since. */
    th->ran_last_tick = false;
    th->blocked_tick_ns = ticks[n - 1];
    if (end == UNWIND_COMPLETE) {
        set_last(th, id, run, pcount);
        learn_perf_stack(th, sp);
    }
    stacks_unref(&t->stacks, id); /* (read_blocked's) */
}

struct defer_ctx {
    struct target *t;
    struct thread *th;
    const uint64_t *ticks;
    struct dsample *row;
    size_t n, k;
    uint64_t max_age;
    const uint32_t *waited; /* per tick: where the thread waited for a CPU then (one
                               reference), or STACK_NONE (running, or not known) */
};

/* Tick k's sample of a running thread: its clock's newest sample before the tick, else the
 * first one after it (cur, if any and recent, as a one-shot's would be), both at the
 * kernel's time, neither inside a window already sliced (as perf_latest). */
static void defer_assign(struct defer_ctx *c, uint32_t cur, uint64_t cur_ns)
{
    struct target *t = c->t;
    struct thread *th = c->th;
    uint64_t tk = c->ticks[c->k];
    uint32_t id = STACK_NONE;
    uint64_t at = 0;
    if (c->waited[c->k] != STACK_NONE) {
        /* Waiting for a CPU then, where its preemption watch has it (as perf_preempted). */
        dsample_set(t, &c->row[c->k], tk, c->waited[c->k], PATH_PERF);
        t->stats.perf.preempted++;
        return;
    }
    /* Not blocked since (or the batch would have ended before this tick), and with less
     * than an interval of CPU since its newest sample (or there would be a newer one): a
     * thread kept off its CPU a while (a busy machine) is still where that sample has it,
     * however old (lost samples, counted missed, aside). */
    bool recent = th->dc_stack != STACK_NONE;
    if (recent && th->dc_ns > t->sliced_to_ns)
        id = th->dc_stack, at = th->dc_ns;
    else if (cur != STACK_NONE && cur_ns - tk < c->max_age && cur_ns > t->sliced_to_ns)
        id = cur, at = cur_ns;
    if (recent && th->dc_ns <= t->sliced_to_ns)
        t->stats.perf.latest_in_sliced_window++;
    if (id == STACK_NONE) {
        t->stats.deferred_unsampled++;
        return;
    }
    dsample_set(t, &c->row[c->k], at, id, PATH_PERF);
}

static void on_deferred_sample(void *arg, const struct perf_sample *ps, struct snapshot *s)
{
    struct defer_ctx *c = arg;
    struct target *t = c->t;
    struct thread *th = c->th;
    (void)s;
    uint32_t id = unwind_kernel_sample(t, th, ps);
    if (id == STACK_NONE)
        return;
    for (; c->k < c->n && c->ticks[c->k] < ps->time_ns; c->k++)
        defer_assign(c, id, ps->time_ns);
    if (th->dc_stack != STACK_NONE)
        stacks_unref(&t->stacks, th->dc_stack);
    th->dc_stack = id;
    th->dc_ns = ps->time_ns;
}

/* waited[0..n): for each of ticks[0..n) of a running thread, where it waited for a CPU then
 * (a reference each), as its preemption watch has it, or STACK_NONE: running then, or not
 * known (counted in *unknown: its ring holds a few preemptions, not a whole batch's). */
static void defer_waits(struct target *t, struct thread *th, const uint64_t *ticks, size_t n,
                        uint32_t *waited, size_t *unknown)
{
    *unknown = 0;
    for (size_t k = 0; k < n; k++) {
        waited[k] = STACK_NONE;
        if (th->pw.fd < 0) {
            (*unknown)++;
            continue;
        }
        if (ticks[k] <= t->sliced_to_ns)
            continue;
        struct perf_sample s;
        int r = perfs_waiting_at(&th->pw, ticks[k],
                                 th->pw_stack != STACK_NONE ? th->pw_ns : 0, &snap, &s);
        if (r == 1) {
            if (th->pw_stack != STACK_NONE)
                stacks_unref(&t->stacks, th->pw_stack);
            th->pw_stack = s.tid == th->tid ? unwind_copy(t, th, th->pw.stack_size)
                                            : STACK_NONE;
            th->pw_ns = s.time_ns;
        }
        if ((r == 1 || r == 2) && th->pw_stack != STACK_NONE) {
            stacks_ref(&t->stacks, th->pw_stack);
            waited[k] = th->pw_stack;
        } else if (r < 0) {
            (*unknown)++;
        }
    }
}

bool sampler_defer_ticks(struct target *t, const uint64_t *ticks, size_t n)
{
    static struct dsample *buf;
    static uint32_t *waited;
    static size_t cap;
    bool starved = false;
    if (!t->deferred || !n || !t->nthreads)
        return false;
    size_t nth = t->nthreads; /* (an unwind re-reads maps, never the threads) */
    if (nth * n > cap) {
        cap = nth * n;
        buf = xrealloc(buf, cap * sizeof(*buf));
        waited = xrealloc(waited, cap * sizeof(*waited));
    }
    for (size_t i = 0; i < nth * n; i++)
        buf[i] = (struct dsample){0, STACK_NONE, false};
    t->stats.ticks += n;
    uint64_t max_age = t->interval_ns * LATEST_MAX_AGE_HALVES / 2;
    for (size_t i = 0; i < nth; i++) {
        struct thread *th = t->threads[i];
        struct dsample *row = buf + i * n;
        if (th->defer_kind == DEFER_BLOCKED) {
            if (th->last_stack == STACK_NONE) {
                t->stats.deferred_unsampled += n; /* (forgotten by a new read of the maps) */
                continue;
            }
            for (size_t k = 0; k < n; k++)
                dsample_set(t, &row[k], ticks[k], th->last_stack, PATH_REUSED);
            t->stats.sampled.idle_reused += n;
        } else if (th->defer_kind == DEFER_RUNNING) {
            target_thread_ran(th);
            /* The ticks before it blocked (if it did) from its clock. */
            size_t nr = n;
            while (th->defer_block_ns && nr > 0 && ticks[nr - 1] >= th->defer_block_ns)
                nr--;
            uint64_t t0 = thread_cpu_ns();
            size_t unknown;
            defer_waits(t, th, ticks, nr, waited, &unknown);
            struct defer_ctx c = {t, th, ticks, row, nr, 0, max_age, waited};
            uint64_t lost = 0;
            th->defer_clock += perfs_drain(&th->ps, &snap, on_deferred_sample, &c, &lost);
            perfs_rejitter(&th->ps, PERIOD_DRAW_EVERY);
            th->defer_ticks += (uint32_t)nr;
            /* Fewer clock samples than half its ticks: it had less than half a CPU, and each
             * sample stood for several ticks, the last one before a long wait for a CPU for
             * all of them; on time, its preemption watch has where it waited. So too when
             * its change watch saw it wait for a CPU (preempted until switched in) more
             * than 1/DEFER_WAIT_DIV of the batch, and its preemption watch, which holds a
             * few preemptions, could not say where at as many of the ticks. */
            if (th->defer_ticks >= DEFER_STARVED_MIN_TICKS) {
                starved |= 2 * th->defer_clock < th->defer_ticks;
                th->defer_ticks = th->defer_clock = 0;
            }
            uint64_t waits = perfs_take_waited(&th->chg, ticks[n - 1]);
            /* (The ticks its preemption watch could not say about, as many in waits as the
             * batch's share of waiting: those with a sample from before the wait.) */
            if ((double)unknown * (double)waits * DEFER_WAIT_DIV >
                (double)nr * (double)(n * t->interval_ns)) {
                starved = true;
                t->stats.defer_waited++;
            }
            for (; c.k < nr; c.k++)
                defer_assign(&c, STACK_NONE, 0);
            for (size_t k = 0; k < nr; k++)
                if (waited[k] != STACK_NONE)
                    stacks_unref(&t->stacks, waited[k]);
            t->stats.perf.lost += lost;
            t->stats.ns_perf += thread_cpu_ns() - t0;
            if (nr < n)
                defer_fill_blocked(t, th, ticks + nr, row + nr, n - nr);
        }
    }
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < nth; i++) {
            struct dsample *d = &buf[i * n + k];
            if (d->id == STACK_NONE)
                continue;
            struct thread *th = t->threads[i];
            push(t, th, d->at, d->id, d->path); /* (the reference moves to the buffer) */
            t->stats.deferred++;
            t->stats.sampled.kernel_copy += d->path == PATH_PERF;
        }
    return starved;
}

/* ---- switch watches (perfsample.h): a thread that seldom runs, checked without a read ---- */

/* A thread is watched once it had not run at WATCH_QUIET of WATCH_LOOK ticks (a thread woken
 * every 50 ms, say, by a timeout: at 101 Hz, 4 ticks in 5). */
#define WATCH_LOOK 16
#define WATCH_QUIET 12
/* A watch is looked at over this many ticks; found moved at more than half, it is closed
 * (the thread runs at most ticks: its schedstat is read anyway, and the records cost it)
 * and not opened again for WATCH_RETRY_NS. */
#define WATCH_WINDOW 64
#define WATCH_RETRY_NS (30 * NS_PER_SEC)

/* No watch is opened anywhere before then: a sampling event lacked room (watches_release). */
static uint64_t watches_blocked_until;

/* Close every target's switch watches, for a sampling event that lacks room (memory or
 * descriptors: the watches of any target may be what took it), and open none for
 * WATCH_RETRY_NS. Returns whether one was closed. */
static bool watches_release(uint64_t now)
{
    bool any = false;
    watches_blocked_until = now + WATCH_RETRY_NS;
    for (struct target *t = targets_first(); t; t = t->next)
        for (size_t i = 0; i < t->nthreads; i++)
            if (t->threads[i]->sw.fd >= 0) {
                target_thread_watch_close(t->threads[i]);
                t->stats.perf.switch_watch.closed_for_room++;
                any = true;
            }
    return any;
}

/* A switch watch for th, if it may have one: not with sampler ptrace (no perf event at all),
 * within the descriptors (a quarter of them left for threads' files) and the rings' share of
 * max_memory as other events. One that cannot be opened is not asked for again before
 * WATCH_RETRY_NS, nor ever where perf refuses it for good. */
static void watch_open(struct target *t, struct thread *th, uint64_t now)
{
    if (t->sampler == SAMPLER_PTRACE || th->sw_refused || now < th->sw_retry_ns ||
        now < watches_blocked_until)
        return;
    th->sw_retry_ns = now + WATCH_RETRY_NS; /* (if it fails) */
    if (!ring_room(perfs_switches_bytes()) || !fds_take_spare(1))
        return;
    int r = perfs_open_switches(&th->sw, th->tid);
    if (r < 0) {
        fds_give(1);
        if (refused_for_good(r))
            th->sw_refused = true;
        return;
    }
    memacct_add(memory_samples(), perfs_bytes(&th->sw));
    th->sw_valid = false; /* a switch before the open is not in it: read schedstat once */
    th->sw_ticks = th->sw_moved = 0;
    t->stats.perf.switch_watch.opened++;
}

/* The thread had not run since its last sample (schedstat read after head was): what the
 * watch's head is to say from now on; or, unwatched, counted towards a watch. */
static void watch_quiet(struct thread *th, uint64_t head, bool boundary)
{
    if (th->sw.fd >= 0) {
        th->sw_head = head;
        th->sw_valid = true;
    } else if (!boundary) {
        th->sw_quiet++;
    }
}

/* A thread blocked in a system call, read without stopping it: where it is from /proc (sp,
 * pc), a copy of its stack and its Python frames, unwound. run and pcount: its schedstat read
 * before; the copy stands if a reading after it is the same (else it is looked at again,
 * once). Returns 1 with *id (one reference; STACK_NONE if the unwind failed), *end, *sp and
 * *seen_ns, a moment the thread was there (before the reading that confirmed it: not after
 * the unwind, which takes long enough under load for the thread to have run on into a
 * transaction that started since); 0 if it is not blocked (running, or it ran during both
 * copies); -1 if it vanished or its memory could not be copied (counted). */
static int read_blocked(struct target *t, struct thread *th, uint64_t *run, uint64_t *pcount,
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
        uint64_t run2, pcount2;
        *seen_ns = now_ns();
        if (proc_read_schedstat(th->schedstat_fd, &run2, &pcount2) < 0) {
            t->stats.failed.thread_exited++;
            return -1;
        }
        if (pcount2 != *pcount || run2 != *run) {
            /* It ran while we copied: the copy may be torn. Look again. */
            t->stats.failed.torn_copy_retried++;
            npy = 0;
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
    th->ran_last_tick = true;
    target_thread_ran(th);
    target_thread_forget_stack(th);
    if (perf_preempted(t, th, rq) || perf_latest(t, th, rq)) {
        /* A one-shot asked for two intervals ago and not taken (the kernel lost it) is not
         * waited for; one not needed for a second (opened for the thread's first tick,
         * say) gives back its ring and descriptor until one is needed again. */
        if (th->ps.fd >= 0 && !th->ps.continuous) {
            if (th->ps.armed && tick_ns - th->ps.armed_ns >= 2 * t->interval_ns)
                perf_expire(t, th);
            if (!th->ps.armed && tick_ns - th->ps.armed_ns > ONESHOT_IDLE_NS)
                target_thread_stream_close(th);
        }
        return false;
    }
    if (perf_oneshot(t, th, rq))
        return false;
    return interrupt(t, th, rq);
}

/* A watched thread at a tick (its head read into *head): true if the watch says it has not
 * run since its last sample, which is recorded again (no schedstat read); a watch that finds
 * it running too often (wall: a wall-clock tick) is closed. */
static bool watch_spares(struct target *t, struct thread *th, uint64_t tick_ns, bool wall,
                         uint64_t *head)
{
    /* Not switched in or out since its head was noted: it has not run since its last
     * sample, as a read of schedstat would say. */
    *head = perfs_switches_head(&th->sw);
    bool moved = !th->sw_valid || *head != th->sw_head;
    bool busy = false;
    if (wall) {
        th->sw_moved += moved;
        if (++th->sw_ticks >= WATCH_WINDOW) {
            busy = th->sw_moved > WATCH_WINDOW / 2;
            th->sw_ticks = th->sw_moved = 0;
        }
    }
    if (busy) {
        target_thread_watch_close(th);
        th->sw_retry_ns = tick_ns + WATCH_RETRY_NS;
        t->stats.perf.switch_watch.closed_running_often++;
    } else if (!moved && th->have_sched && push_last(t, th, tick_ns)) {
        t->stats.perf.switch_watch.reads_spared++;
        return true;
    } else {
        th->sw_valid = false; /* (set again by sample_thread if it had not run) */
    }
    return false;
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
        if (th->sw.fd >= 0) {
            th->sw_head = b->head; /* (read before schedstat was) */
            th->sw_valid = true;
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
    if (th->sw.fd < 0 && wall && ++th->sw_ticks >= WATCH_LOOK) {
        if (th->sw_quiet >= WATCH_QUIET)
            watch_open(t, th, tick_ns);
        th->sw_ticks = th->sw_quiet = 0;
    }
    if (th->sw.fd >= 0 && !cpu_only && watch_spares(t, th, tick_ns, wall, &head))
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
    bool was_running = th->ran_last_tick;
    th->ran_last_tick = false;
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


/* Longest we wait, inside the tick, for the threads we interrupted to stop: a quarter of
 * the interval, at most 250 us. A running thread stops within ~30-60 us; one waiting for a
 * CPU stops only when it gets one, and one exiting never does: those are handled when their
 * stop arrives through SIGCHLD, without holding up the ticks. */
#define STOP_WAIT_MAX_NS (250 * NS_PER_US)

/* Wait for the stops just asked for and handle them at once, spinning briefly on the wait
 * before sleeping. (daemon/DESIGN.md, "Waiting for the stops of a tick".) */
#define SPIN_NS (100 * NS_PER_US)
#define SPIN_BUSY_NS (30 * NS_PER_US)

/* Threads of t still to stop. */
static unsigned count_pending(const struct target *t)
{
    unsigned n = 0;
    for (size_t i = 0; i < t->nthreads; i++)
        n += t->threads[i]->interrupt_pending;
    return n;
}

static int arm_stop_timer(uint64_t ns)
{
    struct itimerspec it = {
        .it_value = {(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)},
        .it_interval = {(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)},
    };
    return timer_settime(stop_timer, 0, &it, NULL) < 0 ? -errno : 0;
}

/* The stop timer failed (what, -errno): a wait it does not bound could block the loop
 * for as long as a thread takes to stop (for ever in uninterruptible sleep), and one it
 * does not stop firing interrupts the loop every period. Do without it from now on. */
static void stop_timer_failed(const char *what, int err)
{
    log_err("the timer bounding the wait for stops failed (%s: %s): threads slow to stop "
            "are no longer waited for", what, strerror(-err));
    timer_delete(stop_timer);
    have_stop_timer = false;
}

/* A short breather between polls: lets the other hyperthread or vCPU work. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < 64; i++)
        __builtin_ia32_pause();
#endif
}

static void sample_stopped(struct thread *th);

/* One ptrace event or child exit (targets_wait_event): a stop we asked for is sampled here,
 * the rest is target.c's. Returns as targets_wait_event. */
static int wait_event(bool block)
{
    struct thread *th;
    int r = targets_wait_event(block, &th);
    if (th) {
        sample_stopped(th);
        targets_sample_done(th);
    }
    return r;
}

void sampler_reap(void)
{
    while (wait_event(false) > 0)
        ;
}

/* Poll for the stops until `until`. Returns the number still pending. */
static unsigned spin_for_stops(struct target *t, unsigned pending, uint64_t until)
{
    while (pending && t->state == T_ATTACHED) {
        int r = wait_event(false);
        if (r < 0)
            return 0; /* ECHILD: nothing traced any more */
        if (r > 0) {
            pending = count_pending(t);
        } else if (now_ns() >= until) {
            break;
        } else {
            cpu_relax();
        }
    }
    return pending;
}

/* Sleep in the wait for the stops, for at most `wait` (the stop timer's EINTR). */
static void sleep_for_stops(struct target *t, unsigned pending, uint64_t wait)
{
    stop_timer_fired = 0;
    int r = arm_stop_timer(wait);
    if (r < 0) {
        stop_timer_failed("arming it", r);
        return;
    }
    while (pending && !stop_timer_fired && t->state == T_ATTACHED) {
        int r = wait_event(true);
        if (r == -EINTR)
            continue;
        if (r < 0)
            break; /* ECHILD */
        pending = count_pending(t);
    }
    r = arm_stop_timer(0);
    if (r < 0)
        stop_timer_failed("disarming it", r);
}

static void await_stops(struct target *t, unsigned pending)
{
    uint64_t wait = t->interval_ns / 4;
    if (wait > STOP_WAIT_MAX_NS)
        wait = STOP_WAIT_MAX_NS;
    uint64_t spin = pending < (unsigned)ncpus ? SPIN_NS : SPIN_BUSY_NS;
    pending = spin_for_stops(t, pending, now_ns() + (wait < spin ? wait : spin));
    /* Sleeping for the rest holds up every other target's ticks: only when there is none.
     * (Threads slow to stop, waiting for a CPU say, then cost their own target only: their
     * stops are handled as they come.) */
    if (pending && have_stop_timer && t->state == T_ATTACHED && targets_count() == 1)
        sleep_for_stops(t, pending, wait);
    /* The stops handled here also raised SIGCHLD, pending on the loop's signalfd: clear it so
     * the loop does not wake for nothing, then handle whatever came in between. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct timespec zero = {0, 0};
    sigtimedwait(&chld, NULL, &zero);
    sampler_reap();
}

/* await_stops, its CPU time counted as the stops' (profd's cost of the ptrace path). */
static void await_counted(struct target *t, unsigned pending)
{
    uint64_t t0 = thread_cpu_ns();
    awaiting = true;
    await_stops(t, pending);
    awaiting = false;
    t->stats.ns_stopped += thread_cpu_ns() - t0;
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
        if (th->pl.fd >= 0 && tick_ns - th->pl_last_ns > LATEST_IDLE_NS) {
            target_thread_latest_close(th);
            target_thread_preempt_close(th);
        }
        interrupted += sample_wall(t, th, rq);
        if (!th->ran_last_tick)
            th->blocked_tick_ns = tick_ns;
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
static void young_name(struct thread *th)
{
    if (th->name_checks < 3)
        target_thread_refresh_name(th);
}

/* th is in the interrupt stop we asked for: copy regs and stack, resume it, unwind. */
static void sample_stopped(struct thread *th)
{
    struct target *t = th->t;
    uint64_t stopped = now_ns();
    uint64_t c0 = awaiting ? 0 : thread_cpu_ns();
    th->interrupt_pending = false;
    t->stats.stop_latency_ns += stopped - th->interrupt_sent_ns;
    int copy_err = -1;
    bool have_regs = ptrace(PTRACE_GETREGS, th->tid, 0, &snap.regs) == 0;
    if (have_regs) {
        snap.full_regs = true;
        copy_err = snapshot_copy_stack(th->tid, snap.regs.rsp,
                                       stack_limit(t, th, snap.regs.rsp), &snap);
        /* The stop interrupted an epoll wait or a socket call with a timeout, which the
         * kernel would now fail with EINTR: make it restart instead. We sent the interrupt
         * right after seeing the thread running, so it has been blocked only since then;
         * restarting with the whole timeout is late by at most that. */
        struct user_regs_struct regs = snap.regs;
        if ((long)regs.rax != -EINTR) {
            th->stop_eintr = false; /* past the job-control EINTR, if there was one */
        } else if (!th->stop_eintr && sysc_repair_eintr(th->tid, &regs, 0) &&
                   ptrace(PTRACE_SETREGS, th->tid, 0, &regs) == 0) {
            t->stats.syscalls_restarted++;
        }
        /* Its Python frames, while it cannot change them. */
        npy = py_capture(&t->py, th->tid, &th->py_tstate, pyframes);
    }
    target_resume(th, 0);
    young_name(th);
    if (!have_regs) {
        t->stats.failed.registers++;
        return;
    }
    if (copy_err < 0) {
        t->stats.failed.stack_copy++;
        npy = 0;
        return;
    }
    enum unwind_end end;
    uint32_t id = unwind_and_intern(t, th, &end, th->boundary_stop);
    th->boundary_stop = false;
    if (end == UNWIND_COMPLETE)
        learn_perf_stack(th, snap.regs.rsp);
    if (id == STACK_NONE)
        return;
    push(t, th, stopped, id, PATH_PTRACE);
    t->stats.sampled.stopped++;
    /* Handling the stop (inside await_stops that is counted there). */
    if (!awaiting)
        t->stats.ns_stopped += thread_cpu_ns() - c0;
}
