/* defer.c: alarm's deferred ticks, the sampler's side: whether a target's threads stay as
 * they are so that its ticks can be taken after the fact (sampler_defer_begin), the change
 * watches that end a batch, and the batch's samples, each at its own time on the grid
 * (sampler_defer_ticks). The schedule's side (when a batch begins and ends) is
 * sched_defer.c. Part of the sampler (sampler_internal.h). */
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

/* ---- deferred ticks (alarm): taken after the fact, in batches ----
 *
 * Why, and what it was measured against: daemon/DESIGN.md, "Deferred ticks". */


/* perfs_open's batch (its ring holds 8 samples more) for a ring of b + DEFER_MARGIN. */
static unsigned defer_ring_batch(unsigned b)
{
    return b + DEFER_MARGIN > 8 ? b + DEFER_MARGIN - 8 : 0;
}

int defer_thread_how(const struct thread *th, uint64_t tick_ns, uint64_t max_age)
{
    if (th->zombie || !th->born || th->state == TH_GROUP_STOP || th->interrupt_pending ||
        th->rescue_pending || th->stop_eintr || th->chain_valid || th->smp.perf_deep_left ||
        th->smp.perf_refused || tick_ns - th->added_ns < YOUNG_NS ||
        (th->smp.ps.fd >= 0 && th->smp.ps.armed)) /* (a one-shot's sample still to read) */
        return DEFER_NONE;
    if (th->smp.ran_last_tick) {
        /* Running, its sample this tick its clock's (a stop or a one-shot: not yet), or its
         * preemption's: waiting for a CPU (profd's own, often, at its tick). */
        if (!preempted_at(th, tick_ns) &&
            (th->smp.pl.fd < 0 || th->smp.pl_stack == STACK_NONE ||
             tick_ns - th->smp.pl_last_ns >= max_age))
            return DEFER_NONE;
        return DEFER_RUNNING;
    }
    if (th->last_stack == STACK_NONE || !th->have_sched)
        return DEFER_NONE;
    return DEFER_BLOCKED;
}

unsigned defer_batch_fit(unsigned b, uint32_t stack)
{
    while (b >= DEFER_MIN_BATCH &&
           perfs_ring_bytes(stack, true, defer_ring_batch(b)) > DEFER_RING_MAX)
        b--;
    return b;
}

bool defer_share_judged(uint32_t ticks, uint32_t clock_samples, bool *starved)
{
    if (ticks < DEFER_STARVED_MIN_TICKS)
        return false;
    *starved = 2 * clock_samples < ticks;
    return true;
}

bool defer_waits_too_long(size_t unknown, uint64_t waits_ns, size_t nr, size_t n,
                          uint64_t interval_ns)
{
    return (double)unknown * (double)waits_ns * DEFER_WAIT_DIV >
           (double)nr * (double)(n * interval_ns);
}

/* Whether every thread of t is as a deferral needs it at this tick (blocked where its last
 * stack says, or running with a recent sample), and the batch (at most max_batch ticks, less
 * where a thread's ring would be too large) with the bytes of rings it takes. */
static bool defer_possible(const struct target *t, uint64_t tick_ns, unsigned max_batch,
                           unsigned *batch, size_t *ring_bytes)
{
    if (t->deferred || t->sampler == SAMPLER_PTRACE || py_stops(t) ||
        t->state != T_ATTACHED || t->maps_dirty || !t->nthreads)
        return false;
    uint64_t max_age = t->interval_ns * LATEST_MAX_AGE_HALVES / 2;
    unsigned b = max_batch;
    size_t rings = 0;
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct thread *th = t->threads[i];
        int how = defer_thread_how(th, tick_ns, max_age);
        if (how == DEFER_NONE)
            return false;
        if (how == DEFER_RUNNING) {
            b = defer_batch_fit(b, want_stack(th));
            rings += perfs_ring_bytes(want_stack(th), true, defer_ring_batch(b));
        }
        rings += perfs_changes_bytes(th->smp.ran_last_tick);
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
        if (th->smp.defer_kind == DEFER_BLOCKED) {
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
        int w = perfs_open_changes(&th->smp.chg, th->tid, th->smp.ran_last_tick);
        if (w < 0) {
            fds_give(1);
            goto undo;
        }
        memacct_add(memory_samples(), perfs_bytes(&th->smp.chg));
        /* (w == 1: a running thread's watch that wakes nobody, read at the batch's end.) */
        struct epoll_event ev = {.events = EPOLLIN};
        if (w == 0 && epoll_ctl(t->defer_epfd, EPOLL_CTL_ADD, th->smp.chg.fd, &ev) < 0)
            goto undo;
        if (!th->smp.ran_last_tick) {
            th->smp.defer_kind = DEFER_BLOCKED;
            continue;
        }
        /* Its clock becomes one whose ring holds the batch (two would each interrupt it).
         * Its newest sample until the clock has one: where it waited at the tick, if it did,
         * else the clock's. */
        if (preempted_at(th, tick_ns)) {
            stacks_ref(&t->stacks, th->smp.pw_stack);
            th->smp.dc_stack = th->smp.pw_stack;
            /* (At the time it is known to have waited there, the tick's due time, as
             * perf_preempted stamped it: by tick_ns, later on a busy machine, it may have
             * run on, into a transaction begun since.) */
            th->smp.dc_ns = th->smp.pw_due_ns;
        } else {
            th->smp.dc_stack = th->smp.pl_stack; /* (the reference moves) */
            th->smp.dc_ns = th->smp.pl_last_ns;
            th->smp.pl_stack = STACK_NONE;
        }
        sampler_latest_close(th);
        sampler_stream_close(th); /* a one-shot */
        th->smp.defer_kind = DEFER_RUNNING;
        th->smp.defer_ticks = th->smp.defer_clock = 0;
        if (perf_open_once(th, STREAM_CONTINUOUS, t->interval_ns, want_stack(th),
                           defer_ring_batch(b)) < 0)
            goto undo;
    }
    if (!defer_still_holds(t))
        goto undo;
    t->stats.deferred.begun++;
    *batch = b;
    *epfd = t->defer_epfd;
    return true;
undo:
    t->stats.deferred.refused++;
    sampler_defer_end(t, true);
    return false;
}

bool sampler_defer_resize(struct target *t, unsigned batch)
{
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        if (th->smp.defer_kind != DEFER_RUNNING || !sampler_perf_copy_resized(th))
            continue;
        uint32_t want = want_stack(th);
        /* (A larger copy must fit the ring room of the batch as begun.) */
        if (want > th->smp.ps.stack_size &&
            perfs_ring_bytes(want, true, defer_ring_batch(batch)) > DEFER_RING_MAX)
            return false;
        sampler_stream_close(th);
        if (perf_open_once(th, STREAM_CONTINUOUS, t->interval_ns, want,
                           defer_ring_batch(batch)) < 0)
            return false;
        if (th->smp.pw.fd >= 0)
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
        bool clock = going_on && th->smp.defer_kind == DEFER_RUNNING && t->state == T_ATTACHED &&
                     !th->zombie && th->smp.pl.fd < 0;
        uint32_t newest = STACK_NONE;
        uint64_t newest_ns = th->smp.dc_ns;
        if (clock) {
            newest = th->smp.dc_stack; /* (the reference moves) */
            th->smp.dc_stack = STACK_NONE;
        }
        sampler_defer_close(th);
        bool opened = clock && perf_open(t, th, STREAM_LATEST, t->interval_ns, want_stack(th),
                                         0) == 0;
        if (opened)
            preempt_watch_open(t, th, th->smp.pl.stack_size);
        if (opened && newest != STACK_NONE) {
            th->smp.pl_stack = newest; /* (the reference moves) */
            th->smp.pl_last_ns = newest_ns;
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
        if (th->smp.defer_kind == DEFER_NONE) {
            c = th->added_ns; /* a thread born since: from then on, unknown */
        } else if (th->smp.defer_kind == DEFER_BLOCKED) {
            c = perfs_first_change(&th->smp.chg);
            /* Its stack forgotten (the maps changed, target_refresh_maps): to be read again. */
            if (th->last_stack == STACK_NONE && t->maps_read_ns < c)
                c = t->maps_read_ns;
        } else {
            /* A running thread that blocked and has stayed blocked: where it is now is where
             * it was from then on (sampler_defer_ticks reads it). */
            bool back_in;
            c = perfs_first_block(&th->smp.chg, &back_in);
            th->smp.defer_block_ns = 0;
            if (c && c != UINT64_MAX && !back_in) {
                th->smp.defer_block_ns = c;
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
        perfs_first_block(&th->smp.chg, &back_in);
    if (rb <= 0 || id == STACK_NONE || back_in) {
        if (id != STACK_NONE)
            stacks_unref(&t->stacks, id);
        t->stats.deferred.running_unsampled += n;
        return;
    }
    for (size_t k = 0; k < n; k++)
        dsample_set(t, &row[k], ticks[k], id, k ? PATH_REUSED : PATH_PROC);
    t->stats.sampled.blocked_without_stop++;
    t->stats.sampled.idle_reused += n - 1;
    t->stats.deferred.samples_read_after_blocking += n;
    t->stats.ns_blocked += thread_cpu_ns() - t0;
    /* The next tick on time finds it blocked where it was, if it has not run since. */
    th->smp.ran_last_tick = false;
    th->smp.blocked_tick_ns = ticks[n - 1];
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
    bool recent = th->smp.dc_stack != STACK_NONE;
    if (recent && th->smp.dc_ns > t->sliced_to_ns)
        id = th->smp.dc_stack, at = th->smp.dc_ns;
    else if (cur != STACK_NONE && cur_ns - tk < c->max_age && cur_ns > t->sliced_to_ns)
        id = cur, at = cur_ns;
    if (recent && th->smp.dc_ns <= t->sliced_to_ns)
        t->stats.perf.latest_in_sliced_window++;
    if (id == STACK_NONE) {
        t->stats.deferred.running_unsampled++;
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
    if (th->smp.dc_stack != STACK_NONE)
        stacks_unref(&t->stacks, th->smp.dc_stack);
    th->smp.dc_stack = id;
    th->smp.dc_ns = ps->time_ns;
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
        if (th->smp.pw.fd < 0) {
            (*unknown)++;
            continue;
        }
        if (ticks[k] <= t->sliced_to_ns)
            continue;
        struct perf_sample s;
        int r = perfs_waiting_at(&th->smp.pw, ticks[k],
                                 th->smp.pw_stack != STACK_NONE ? th->smp.pw_ns : 0, &snap, &s);
        if (r == 1) {
            if (th->smp.pw_stack != STACK_NONE)
                stacks_unref(&t->stacks, th->smp.pw_stack);
            th->smp.pw_stack = s.tid == th->tid ? unwind_copy(t, th, &th->smp.pw, s.time_ns)
                                            : STACK_NONE;
            th->smp.pw_ns = s.time_ns;
        }
        if ((r == 1 || r == 2) && th->smp.pw_stack != STACK_NONE) {
            stacks_ref(&t->stacks, th->smp.pw_stack);
            waited[k] = th->smp.pw_stack;
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
        if (th->smp.defer_kind == DEFER_BLOCKED) {
            if (th->last_stack == STACK_NONE) {
                /* (forgotten by a new read of the maps) */
                t->stats.deferred.running_unsampled += n;
                continue;
            }
            for (size_t k = 0; k < n; k++)
                dsample_set(t, &row[k], ticks[k], th->last_stack, PATH_REUSED);
            t->stats.sampled.idle_reused += n;
        } else if (th->smp.defer_kind == DEFER_RUNNING) {
            target_thread_ran(th);
            /* The ticks before it blocked (if it did) from its clock. */
            size_t nr = n;
            while (th->smp.defer_block_ns && nr > 0 && ticks[nr - 1] >= th->smp.defer_block_ns)
                nr--;
            uint64_t t0 = thread_cpu_ns();
            size_t unknown;
            defer_waits(t, th, ticks, nr, waited, &unknown);
            struct defer_ctx c = {t, th, ticks, row, nr, 0, max_age, waited};
            uint64_t lost = 0;
            th->smp.defer_clock += perfs_drain(&th->smp.ps, &snap, on_deferred_sample, &c, &lost);
            perfs_rejitter(&th->smp.ps, PERIOD_DRAW_EVERY);
            th->smp.defer_ticks += (uint32_t)nr;
            /* Fewer clock samples than half its ticks: it had less than half a CPU, and each
             * sample stood for several ticks, the last one before a long wait for a CPU for
             * all of them; on time, its preemption watch has where it waited. So too when
             * its change watch saw it wait for a CPU (preempted until switched in) more
             * than 1/DEFER_WAIT_DIV of the batch, and its preemption watch, which holds a
             * few preemptions, could not say where at as many of the ticks. */
            bool short_of_cpu = false;
            if (defer_share_judged(th->smp.defer_ticks, th->smp.defer_clock, &short_of_cpu)) {
                starved |= short_of_cpu;
                th->smp.defer_ticks = th->smp.defer_clock = 0;
            }
            uint64_t waits = perfs_take_waited(&th->smp.chg, ticks[n - 1]);
            /* (The ticks its preemption watch could not say about, as many in waits as the
             * batch's share of waiting: those with a sample from before the wait.) */
            if (defer_waits_too_long(unknown, waits, nr, n, t->interval_ns)) {
                starved = true;
                t->stats.deferred.left_for_waits_for_a_cpu++;
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
            t->stats.deferred.samples++;
            t->stats.sampled.kernel_copy += d->path == PATH_PERF;
        }
    return starved;
}

