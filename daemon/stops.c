/* stops.c: the ptrace stop path: the wait for the stops a tick asked for (spinning, then
 * sleeping on a timer), and the sample taken in a stop (registers, the stack's copy, the
 * Python frames; the thread resumed before its unwind). Part of the sampler
 * (sampler_internal.h). */
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

void stops_init(void)
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
}

void stops_finish(void)
{
    if (have_stop_timer)
        timer_delete(stop_timer);
    have_stop_timer = false;
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
void await_counted(struct target *t, unsigned pending)
{
    uint64_t t0 = thread_cpu_ns();
    awaiting = true;
    await_stops(t, pending);
    awaiting = false;
    t->stats.ns_stopped += thread_cpu_ns() - t0;
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
        /* Its Python frames, while it cannot change them; a Go thread's goroutine, off
         * the stack copied (a cgo call, the runtime's code on g0, a signal handler). */
        npy = py_capture(&t->py, th->tid, &th->py_tstate, pyframes);
        snap.gcopy = gok_read_stopped(t, th->tid, &snap.regs);
        /* And its OpenTelemetry context, which it cannot change either. */
        tctx_capture(t, th, false);
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
        snap.gcopy = NULL;
        tctx_cur.have = false;
        return;
    }
    enum unwind_end end;
    uint32_t id = unwind_and_intern(t, th, &end, th->boundary_stop);
    snap.gcopy = NULL;
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
