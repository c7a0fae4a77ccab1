/* cputime.c: the cputime schedule: each thread's credit of CPU time, and its sources (perf
 * task-clock events, CPU-clock timers, polled schedstat); see schedule.h. */
#include "sched_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/signalfd.h>

#include "log.h"
#include "perfsample.h"
#include "procfs.h"
#include "sampler.h"
#include "target.h"
#include "util.h"

/* The signal of the CPU-clock timers (cputime's timer source), read through a signalfd. The
 * sampler's stop timer uses SIGRTMIN. */
#define CPU_TIMER_SIGNAL (SIGRTMIN + 1)

static struct {
    enum cpu_source source;
    int sigfd;
    ev_io sig_w;
    int sig_err; /* why there is no sigfd (-errno) */
} g = {.sigfd = -1, .sig_err = -ENOSYS};

void sched_thread_init(struct sched_thread *c)
{
    memset(c, 0, sizeof(*c));
}

void sched_thread_restart(struct sched_thread *c)
{
    c->cpu_seen_valid = false;
    c->cpu_credit_ns = 0;
    c->cpu_thresh_ns = 0;
}

/* A thread has used `ns` more CPU: one sample is due per interval of it (sched_credit). */
static bool credit(struct sched *s, struct thread *th, uint64_t ns)
{
    return sched_credit(&th->sched, s->eff_interval_ns, ns, &s->missed);
}

/* The poll source looks at the threads twice per interval. */
static uint64_t poll_period_ns(const struct sched *s)
{
    return s->eff_interval_ns / 2;
}

/* Timer and poll sources: read every thread's CPU time, mark those due, sample them. */
static void cpu_credit_tick(struct sched *s)
{
    struct target *t = s->t;
    bool any = false;
    uint64_t c0 = thread_cpu_ns();
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        if (!th->born || th->zombie)
            continue;
        uint64_t run, pcount;
        if (proc_read_schedstat(th->schedstat_fd, &run, &pcount) < 0)
            continue;
        if (!th->sched.cpu_seen_valid) {
            th->sched.cpu_seen_valid = true;
            th->sched.cpu_seen_ns = run;
            continue;
        }
        uint64_t d = run - th->sched.cpu_seen_ns;
        th->sched.cpu_seen_ns = run;
        any |= credit(s, th, d);
    }
    uint64_t c = thread_cpu_ns() - c0; /* the reads: the budget counts them too */
    s->cost_ns += c;
    s->win_cost_ns += c;
    if (any)
        sched_run_tick(s, now_ns(), UINT64_MAX, TICK_CPU);
}

static unsigned perf_batch(const struct sched *s)
{
    return cputime_batch(s->eff_interval_ns);
}

/* The period of cputime's ring reads. */
static uint64_t read_period_ns(const struct sched *s)
{
    return perf_batch(s) * s->eff_interval_ns;
}

static void on_perf(struct ev_loop *loop, ev_io *w, int revents);

/* A thread's cputime event: counting only (a page of ring) until it has used an interval
 * of CPU, then with stacks: threads that never run cost no ring memory. */
static int perf_open_as(struct sched *s, struct thread *th, bool stacks)
{
    /* The ring is sized for the batch at the requested rate: the budget only ever lowers it
     * (a new rate asked for opens new events). */
    int r = sampler_perf_open_continuous(s->t, th, s->eff_interval_ns,
                                         cputime_batch(s->interval_ns), stacks);
    if (r < 0)
        return r;
    if (sampler_perf_has_stacks(th) && !s->reading) {
        /* The first ring with stacks: reads on profd's timer from now on. */
        s->reading = true;
        uint64_t period = read_period_ns(s);
        sched_timer_result(s, sched_arm_periodic(s, now_ns() + period, period));
    }
    ev_io_init(&th->smp.perf_io, on_perf, th->smp.ps.fd, EV_READ);
    th->smp.perf_io.data = th;
    if (!sampler_perf_has_stacks(th))
        ev_io_start(sched_loop,
                    &th->smp.perf_io); /* counting: its overflows are read as they come */
    th->smp.perf_last_ns = 0; /* idle from the next look of the budget on (shrink_idle_rings) */
    return 0;
}

static int perf_open(struct sched *s, struct thread *th)
{
    return perf_open_as(s, th, false);
}

/* Read a thread's ring of kernel copies: no stop, the samples are recorded as they are
 * read. Returns how many; the caller accounts the CPU. */
static uint64_t read_stacks(struct sched *s, struct thread *th)
{
    uint64_t before = th->t->stats.sampled.kernel_copy;
    sampler_drain_thread(th->t, th);
    perfs_rejitter(&th->smp.ps, PERIOD_DRAW_EVERY); /* (perfsample.c: against aliasing) */
    uint64_t n = th->t->stats.sampled.kernel_copy - before;
    th->t->stats.ticks += n;
    s->ticks += n;
    s->win_ticks += n;
    if (n)
        s->last_tick_ns = now_ns();
    /* An unwind found the copy too short, or the unwinds need less than it holds: a copy
     * of the size they need from now on. */
    if (sampler_perf_copy_resized(th) && s->running) {
        int r = perf_open_as(s, th, true);
        if (r < 0 && r != -ESRCH)
            log_debug("pid %d: thread %d: no perf event of the new copy size: %s", s->t->pid,
                      th->tid, strerror(-r));
    }
    return n;
}

static void account(struct sched *s, uint64_t c0)
{
    uint64_t c = thread_cpu_ns() - c0;
    s->cost_ns += c;
    s->win_cost_ns += c;
}

/* cputime's timer with the perf source: every thread's ring of kernel copies is read. With
 * none left (every thread idle long enough to count only: shrink_idle_rings), the timer is
 * stopped until a thread's ring carries stacks again: an idle target costs no wake-ups. */
static void cputime_read(struct sched *s)
{
    uint64_t c0 = thread_cpu_ns();
    bool any = false;
    /* A read may grow a thread's ring (a new event): by index, against the count now. */
    for (size_t i = 0; i < s->t->nthreads && s->t->state == T_ATTACHED; i++) {
        struct thread *th = s->t->threads[i];
        if (th->smp.ps.fd >= 0 && th->smp.ps.continuous && sampler_perf_has_stacks(th)) {
            read_stacks(s, th);
            any = true;
        }
    }
    account(s, c0);
    if (!any) {
        sched_disarm(s);
        s->reading = false;
    }
}

static void on_perf(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct thread *th = w->data;
    struct sched *s = th->t->sched;
    /* A counting event (a ring with stacks is read on cputime's timer, not watched). */
    unsigned n = perfs_drain(&th->smp.ps, NULL, NULL, NULL, NULL);
    if (n == 0) {
        /* Nothing new: either an overflow already consumed with the one before (the fd
         * stayed readable), or the thread is gone (POLLHUP for ever after; its exit
         * follows): only then stop watching. */
        struct pollfd pfd = {.fd = th->smp.ps.fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLHUP))
            ev_io_stop(sched_loop, &th->smp.perf_io);
        return;
    }
    s->missed += n - 1;
    th->sched.cpu_due = true;
    /* The period stays exact here (as with perf record -c): re-setting it at each overflow
     * (to randomize it, as credit() does) restarts the count from the ioctl, which lost the
     * ~0.1 ms since the overflow: 8% of the samples at 999 Hz. */
    struct target *t = th->t;
    pid_t tid = th->tid;
    sched_run_tick(s, now_ns(), UINT64_MAX, TICK_CPU);
    /* The tick waited for its stops, handling every tracee's events meanwhile: th may have
     * exited and been freed (found by ASan in test_chaos: a use after free here). The
     * target is freed only after the callback. */
    th = target_thread(t, tid);
    if (!th)
        return;
    /* It runs: from now on the kernel copies its stack at each sample (its first sample
     * above was a stop). */
    if (s->running && th->t->sampler != SAMPLER_PTRACE && !th->smp.perf_refused &&
        th->t->state == T_ATTACHED) {
        int r = perf_open_as(s, th, true);
        if (r < 0 && r != -ESRCH)
            log_debug("pid %d: thread %d: no perf event with stacks: %s", s->t->pid, th->tid,
                      strerror(-r));
    }
}

static int timer_open(struct sched *s)
{
    clockid_t cid;
    int r = clock_getcpuclockid(s->t->pid, &cid);
    if (r)
        return -r;
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = CPU_TIMER_SIGNAL;
    sev.sigev_value.sival_int = s->t->pid;
    if (timer_create(cid, &sev, &s->cpu_timer) < 0)
        return -errno;
    s->have_cpu_timer = true;
    return 0;
}

/* Set the CPU-clock timer to fire every ns of the process's CPU time. Returns 0 or -errno. */
static int timer_set(struct sched *s, uint64_t ns)
{
    struct itimerspec it = {.it_value = sched_ts_of(ns), .it_interval = sched_ts_of(ns)};
    return timer_settime(s->cpu_timer, 0, &it, NULL) < 0 ? -errno : 0;
}

/* A CPU-clock timer fired: its process used one more interval of CPU. */
static void on_cpu_signal(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    struct signalfd_siginfo si[16];
    ssize_t n;
    while ((n = read(g.sigfd, si, sizeof(si))) > 0) {
        for (size_t i = 0; i < (size_t)n / sizeof(si[0]); i++) {
            /* By pid, not by pointer: a signal may outlive its schedule. */
            struct sched *s;
            LIST_FOREACH(s, &sched_live, link)
                if (s->t->pid == (pid_t)si[i].ssi_int)
                    break;
            if (!s || s->t->state != T_ATTACHED || s->mode != SCHED_CPUTIME ||
                s->source != CPU_SRC_TIMER)
                continue;
            cpu_credit_tick(s);
        }
    }
}

int cputime_start(struct sched *s)
{
    struct target *t = s->t;
    enum cpu_source want = g.source;
    if (want == CPU_SRC_AUTO || want == CPU_SRC_PERF) {
        int r = 0;
        for (size_t i = 0; r == 0 && i < t->nthreads; i++) {
            if (t->threads[i]->zombie)
                continue;
            r = perf_open(s, t->threads[i]);
            if (r == -ESRCH)
                r = 0; /* exiting (or a leader that called pthread_exit): nothing to count */
        }
        if (r == 0) {
            s->source = CPU_SRC_PERF; /* (the reads start with the first ring of stacks) */
            return 0;
        }
        for (size_t i = 0; i < t->nthreads; i++)
            sampler_thread_release(t->threads[i]);
        log_info("pid %d: perf task-clock events unavailable (%s)%s", t->pid, strerror(-r),
                 want == CPU_SRC_PERF ? "" : ": trying a CPU-clock timer");
        if (want == CPU_SRC_PERF)
            return r;
    }
    for (size_t i = 0; i < t->nthreads; i++) {
        sched_thread_restart(&t->threads[i]->sched);
    }
    if (want == CPU_SRC_AUTO || want == CPU_SRC_TIMER) {
        int r = g.sigfd >= 0 ? timer_open(s) : g.sig_err;
        if (r == 0) {
            r = timer_set(s, s->eff_interval_ns);
            if (r < 0) {
                timer_delete(s->cpu_timer);
                s->have_cpu_timer = false;
            }
        }
        if (r == 0) {
            s->source = CPU_SRC_TIMER;
            cpu_credit_tick(s); /* the starting point of every thread's CPU time */
            return 0;
        }
        log_info("pid %d: CPU-clock timer unavailable (%s)%s", t->pid, strerror(-r),
                 want == CPU_SRC_TIMER ? "" : ": polling schedstat");
        if (want == CPU_SRC_TIMER)
            return r;
    }
    s->source = CPU_SRC_POLL;
    int r = sched_arm_periodic(s, now_ns() + poll_period_ns(s), poll_period_ns(s));
    if (r < 0)
        return r;
    cpu_credit_tick(s);
    return 0;
}

/* A cputime thread that has not run for this long goes back to a counting event (a page of
 * ring instead of room for a dozen stack copies) until it runs again. */
#define RING_IDLE_NS (10 * NS_PER_SEC)

void cputime_shrink_idle_rings(struct sched *s, uint64_t now)
{
    for (size_t i = 0; i < s->t->nthreads; i++) {
        struct thread *th = s->t->threads[i];
        if (!sampler_perf_has_stacks(th) || !th->smp.ps.continuous)
            continue;
        if (!th->smp.perf_last_ns) {
            th->smp.perf_last_ns = now; /* opened since the last look */
        } else if (now - th->smp.perf_last_ns > RING_IDLE_NS) {
            uint64_t c0 = thread_cpu_ns();
            read_stacks(s, th); /* what it sampled since the last read */
            account(s, c0);
            if (th->smp.ps.continuous && perf_open_as(s, th, false) == 0)
                th->smp.perf_last_ns = 0;
        }
    }
}

/* Set s's timer for its current interval from now (sched_rearm). Returns 0 or -errno. */
int cputime_rearm(struct sched *s, uint64_t now)
{
    if (s->source == CPU_SRC_PERF) {
        uint64_t period = s->eff_interval_ns;
        for (size_t i = 0; i < s->t->nthreads; i++) {
            struct thread *th = s->t->threads[i];
            /* The event keeps counting at its old period: a rate the budget did not
             * choose, for that thread. */
            if (th->smp.ps.fd >= 0 && th->smp.ps.continuous &&
                perfs_set_period(&th->smp.ps, period) < 0)
                log_warn("pid %d: thread %d keeps its previous sampling period: "
                         "PERF_EVENT_IOC_PERIOD: %s", s->t->pid, th->tid, strerror(errno));
        }
        return s->reading ? sched_arm_periodic(s, now + read_period_ns(s), read_period_ns(s))
                          : 0;
    }
    if (s->source == CPU_SRC_TIMER)
        return timer_set(s, s->eff_interval_ns);
    return sched_arm_periodic(s, now + poll_period_ns(s), poll_period_ns(s));
}

void cputime_on_timer(struct sched *s)
{
    if (s->source == CPU_SRC_PERF)
        cputime_read(s);
    else
        cpu_credit_tick(s); /* the poll source */
}

void cputime_stop(struct sched *s)
{
    if (s->have_cpu_timer) {
        timer_delete(s->cpu_timer);
        s->have_cpu_timer = false;
    }
}

void cputime_thread_added(struct sched *s, struct thread *th)
{
    if (s->running && s->mode == SCHED_CPUTIME && s->source == CPU_SRC_PERF) {
        int r = perf_open(s, th);
        if (r < 0)
            log_debug("pid %d: no perf event for new thread %d: %s", s->t->pid, th->tid,
                      strerror(-r));
    }
}

void cputime_thread_exited(struct sched *s, struct thread *th)
{
    if (s->running && sampler_perf_has_stacks(th)) {
        uint64_t c0 = thread_cpu_ns();
        read_stacks(s, th);
        account(s, c0);
    }
}

int cputime_global_init(struct ev_loop *loop, enum cpu_source source)
{
    g.source = source;
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, CPU_TIMER_SIGNAL);
    int e = pthread_sigmask(SIG_BLOCK, &ss, NULL);
    if (e == 0)
        g.sigfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    g.sig_err = e ? -e : g.sigfd < 0 ? -errno : 0;
    if (g.sigfd >= 0) {
        ev_io_init(&g.sig_w, on_cpu_signal, g.sigfd, EV_READ);
        ev_io_start(loop, &g.sig_w);
    } else if (source == CPU_SRC_TIMER) {
        log_err("cputime_source is timer, but the CPU-clock timers' signal cannot be "
                "received (%s: %s)", e ? "pthread_sigmask" : "signalfd", strerror(-g.sig_err));
        return g.sig_err;
    } else {
        log_warn("no CPU-clock timers (%s: %s): cputime uses perf events, else polls "
                 "schedstat", e ? "pthread_sigmask" : "signalfd", strerror(-g.sig_err));
    }
    return 0;
}

void cputime_global_finish(void)
{
    if (g.sigfd >= 0) {
        ev_io_stop(sched_loop, &g.sig_w);
        close(g.sigfd);
        g.sigfd = -1;
    }
}
