/* schedule.c: the sampling schedules (see schedule.h) and the CPU budget. */
#include "schedule.h"
#include "perfsample.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>

#include <cjson/cJSON.h>

#include "fds.h"
#include "log.h"
#include "ptrace_util.h"
#include "sampler.h"
#include "target.h"
#include "util.h"

/* The signal of the CPU-clock timers (cputime's timer source), read through a signalfd. The
 * sampler's stop timer uses SIGRTMIN. */
#define CPU_TIMER_SIGNAL (SIGRTMIN + 1)

/* How often the budget is re-divided. */
#define BUDGET_PERIOD_S 0.25
/* ... or every second while it is calm: no target throttled, none late, no timer to retry,
 * and the loop under half its budget (each look is a wake-up of profd: 17-34 us here). */
#define BUDGET_CALM_S 1.0

static struct {
    struct ev_loop *loop;
    enum cpu_source source;
    double max_cpu_pct;
    int sigfd;
    ev_io sig_w;
    ev_timer budget_w;
    long page;
    uint64_t win_loop_cpu_ns; /* the loop thread's CPU time when the window began */
    double overhead;          /* loop CPU / CPU measured in ticks (stops handled later...) */
    double avail;             /* CPU ns per second to share out */
    double mult;              /* the demands' error, measured: see on_budget */
    uint64_t win_start_ns;    /* when the loop's window began */
    bool any_throttled;       /* in the window that ends */
    bool over_before;         /* the demands exceeded the budget at the last look, none
                                 throttled: the next look over it throttles */
    int sig_err;              /* why there is no sigfd (-errno) */
    /* The alarm schedules' ticks on time share one timerfd, set for the soonest of them
     * (alarm_queue): each tick re-armed a timerfd of its own, a system call per tick
     * (13% of profd's CPU with 100 idle services at 101 Hz), where one wake-up takes the
     * ticks of several targets (alarm_run). */
    int atfd;
    ev_io atio;
    uint64_t alarm_armed_ns; /* when atfd fires; 0: not set */
    bool alarm_batch;        /* in alarm_run: atfd is set at its end */
} g = {.sigfd = -1, .overhead = 1.0, .mult = 1.0, .sig_err = -ENOSYS, .atfd = -1};

/* The running schedules. */
static LIST_HEAD(, sched) live_scheds = LIST_HEAD_INITIALIZER(live_scheds);
/* Changes at every insertion into or removal from live_scheds: a walk that runs ticks (which
 * can end schedules) starts again from the head when it changed. */
static uint64_t live_gen;

/* When the budget looks next: BUDGET_PERIOD_S after something changed (a schedule started
 * or changed its rate, a new budget, a timer to retry), or BUDGET_CALM_S. */
static void budget_next(double secs)
{
    if (g.loop && g.budget_w.repeat != secs) {
        g.budget_w.repeat = secs;
        ev_timer_again(g.loop, &g.budget_w);
    }
}

static void on_budget(struct ev_loop *loop, ev_timer *w, int revents);

bool sched_timer_run_early(struct ev_loop *loop, ev_timer *w,
                           void (*cb)(struct ev_loop *, ev_timer *, int))
{
    if (!ev_is_active(w) || ev_timer_remaining(loop, w) >= w->repeat / 3)
        return false;
    ev_timer_again(loop, w);
    cb(loop, w, EV_TIMER);
    return true;
}

void sched_chores_early(void)
{
    if (g.loop)
        sched_timer_run_early(g.loop, &g.budget_w, on_budget);
}

static const char *const mode_names[] = {"sleep", "event", "alarm", "cputime"};
static const char *const source_names[] = {"auto", "perf", "timer", "poll"};

const char *sched_mode_name(enum sched_mode m)
{
    return (unsigned)m < 4 ? mode_names[m] : "?";
}

int sched_mode_parse(const char *s, enum sched_mode *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, mode_names[i]))
            return *out = (enum sched_mode)i, 0;
    return -EINVAL;
}

const char *cpu_source_name(enum cpu_source s)
{
    return (unsigned)s < 4 ? source_names[s] : "?";
}

int cpu_source_parse(const char *s, enum cpu_source *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, source_names[i]))
            return *out = (enum cpu_source)i, 0;
    return -EINVAL;
}

double sched_budget_pct(void)
{
    return g.max_cpu_pct;
}

void sched_set_budget_pct(double pct)
{
    g.max_cpu_pct = pct;
    g.mult = 1.0; /* measured against the old budget */
    g.any_throttled = false;
    budget_next(BUDGET_PERIOD_S);
}

double sched_effective_hz(const struct sched *s)
{
    return s->eff_interval_ns ? 1e9 / (double)s->eff_interval_ns : 0;
}

/* One tick of s: the sampler run for its target. */
static void tick_sample(struct sched *s, uint64_t tick_ns, uint64_t due_ns, bool cpu_only)
{
    s->last_tick_ns = tick_ns;
    if (s->t->state == T_ATTACHED)
        sampler_tick(s->t, tick_ns, due_ns < tick_ns ? due_ns : tick_ns, cpu_only);
    s->ticks++;
    s->win_ticks++;
}

/* A tick's (or ticks') cost: profd's CPU. */
static void charge(struct sched *s, uint64_t c)
{
    s->cost_ns += c;
    s->win_cost_ns += c;
}

/* One tick of s, due at due_ns, taken at tick_ns, its cost (a reading of the loop thread's
 * CPU clock before and after) counted. */
static void run_tick(struct sched *s, uint64_t tick_ns, uint64_t due_ns, bool cpu_only)
{
    uint64_t c0 = thread_cpu_ns();
    tick_sample(s, tick_ns, due_ns, cpu_only);
    charge(s, thread_cpu_ns() - c0);
}

/* The alarm ticks of one wake-up (alarm_run): the loop thread's CPU clock is read once for
 * them all and shared out by each tick's wall time, not read around each tick (a system
 * call: 12% of profd's CPU with 100 idle services at 101 Hz, where a wake-up takes the ticks
 * of several). profd is seldom preempted within a wake-up (it runs at nice -10), and the
 * whole wake-up's CPU is counted either way. */
struct tick_batch {
    uint64_t cpu0;        /* the CPU clock at its start */
    struct sched *ticked; /* schedules that ticked in it, through batch_next */
};

static struct timespec ts_of(uint64_t ns)
{
    return (struct timespec){(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)};
}

/* timerfd_settime, 0 or -errno. */
static int tfd_set(struct sched *s, int flags, const struct itimerspec *it)
{
    return timerfd_settime(s->tfd, flags, it, NULL) < 0 ? -errno : 0;
}

/* Fire once, `after` ns from now. */
static int arm(struct sched *s, uint64_t after)
{
    s->wait_until_ns = now_ns() + after;
    s->wait_ns = after;
    struct itimerspec it = {.it_value = ts_of(after ? after : 1)};
    return tfd_set(s, 0, &it);
}

/* Fire at `first` (CLOCK_MONOTONIC) and every `period` ns after it, on that grid. */
static int arm_periodic(struct sched *s, uint64_t first, uint64_t period)
{
    struct itimerspec it = {.it_value = ts_of(first), .it_interval = ts_of(period)};
    return tfd_set(s, TFD_TIMER_ABSTIME, &it);
}

/* Fire once at `at` (CLOCK_MONOTONIC; at once if that has passed). */
static int arm_at(struct sched *s, uint64_t at)
{
    struct itimerspec it = {.it_value = ts_of(at ? at : 1)};
    return tfd_set(s, TFD_TIMER_ABSTIME, &it);
}

/* A timer that could not be set leaves the schedule without its next tick, for good: said
 * once in the log and in status ("timer_error"), and tried again at every budget period
 * (on_budget). */
static void timer_failed(struct sched *s, int err)
{
    s->timer_failures++;
    if (s->timer_err != err)
        log_err("pid %d: cannot set the timer of its %s schedule: %s; trying again every "
                "%.2f s", s->t->pid, sched_mode_name(s->mode), strerror(-err), BUDGET_PERIOD_S);
    s->timer_err = err;
    budget_next(BUDGET_PERIOD_S); /* which tries again */
}

/* The result of setting s's timer: a failure recorded, or one recovered from. */
static void timer_result(struct sched *s, int r)
{
    if (r < 0) {
        timer_failed(s, r);
    } else if (s->timer_err) {
        log_info("pid %d: the timer of its %s schedule is set again", s->t->pid,
                 sched_mode_name(s->mode));
        s->timer_err = 0;
    }
}

/* A random offset in [0, span). */
static uint64_t jitter(uint64_t span)
{
    return random_below(span);
}

/* alarm: each tick at a random point of the first quarter of its interval on the grid.
 * Exactly periodic ticks alias with periodic work (a loop whose period divides the
 * interval is always caught at the same point: measured here, a 60/30/10 split read
 * 52/35/13); the offset keeps the rate exact and the grid anchored. */
#define ALARM_JITTER_DIV 4

static void on_alarm_timer(struct ev_loop *loop, ev_io *w, int revents);

/* Set the alarm schedules' timer to fire at `at` (0: not at all). 0 or -errno. */
static int alarm_timer_set(uint64_t at)
{
    if (at == g.alarm_armed_ns)
        return 0;
    if (g.atfd < 0) {
        g.atfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (g.atfd < 0)
            return -errno;
        ev_io_init(&g.atio, on_alarm_timer, g.atfd, EV_READ);
        ev_io_start(g.loop, &g.atio);
    }
    struct itimerspec it = {.it_value = ts_of(at)};
    if (timerfd_settime(g.atfd, TFD_TIMER_ABSTIME, &it, NULL) < 0) {
        int e = -errno;
        g.alarm_armed_ns = 0; /* (unknown: set again at the next chance) */
        return e;
    }
    g.alarm_armed_ns = at;
    return 0;
}

/* An alarm schedule waiting on the shared timer for its tick. */
static bool alarm_waits(const struct sched *s)
{
    return s->mode == SCHED_ALARM && s->queued && s->running && !s->deferred;
}

/* After alarm_run: the shared timer set for the soonest tick left (soonest). Where it cannot
 * be set, every schedule waiting on it says so (status, log) and is set again with the
 * budget's retries (rearm). */
static void alarm_timer_set_soonest(uint64_t soonest)
{
    int r = alarm_timer_set(soonest == UINT64_MAX ? 0 : soonest ? soonest : 1);
    if (r < 0) {
        struct sched *s;
        LIST_FOREACH(s, &live_scheds, link)
            if (alarm_waits(s))
                timer_failed(s, r);
    }
}


/* s's next tick (due_ns) waits on the shared timer: set sooner if it is due first (inside
 * alarm_run, once at its end). 0 or -errno. */
static int alarm_queue(struct sched *s)
{
    s->queued = true;
    if (g.alarm_batch || (g.alarm_armed_ns && g.alarm_armed_ns <= s->due_ns))
        return 0;
    return alarm_timer_set(s->due_ns ? s->due_ns : 1);
}

static int arm_alarm(struct sched *s)
{
    s->due_ns = s->next_ns + jitter(s->eff_interval_ns / ALARM_JITTER_DIV);
    return alarm_queue(s);
}

/* Stop the timerfd; one that cannot be stopped is closed by sched_stop or re-set by the next
 * start, so it only costs a tick too many: logged. */
static void disarm(struct sched *s)
{
    struct itimerspec it;
    memset(&it, 0, sizeof(it));
    int r = tfd_set(s, 0, &it);
    if (r < 0)
        log_warn("pid %d: cannot stop the timer of its %s schedule: %s", s->t->pid,
                 sched_mode_name(s->mode), strerror(-r));
}

/* ---- cputime: credit of CPU time per thread ---- */

/* An interval of iv on average, anywhere in [3/4, 5/4) of it: cputime's thresholds (timer and
 * poll sources), and sleep's and event's waits. */
static uint64_t jittered(uint64_t iv)
{
    return iv - iv / 4 + jitter(iv / 2);
}

/* The moment a wall-clock tick due at `due` takes a thread it finds waiting for a CPU at
 * (sampler_tick's due_ns): a random point of the `span` before it (the interval, or sleep's
 * wait), not the moment it was due. profd's own wake-up at a tick preempts a thread of the
 * target; on a busy machine that thread may then wait for its CPU a while, longer at some
 * points of its work than at others (the scheduler's choice depends on how long it has run),
 * and a sample taken just before each wake-up falls in no such wait, only at their starts:
 * phases' 150 us phase read 1-3 points high beside two CPU hogs (the program's own clocks
 * sampled at the ticks' due times read it so too), and within 1.3 points at a point of the
 * span before. The waits profd causes are the program's time too, sampled as the rest. */
static uint64_t sample_instant(uint64_t due, uint64_t span)
{
    return due > span ? due - jitter(span) : due;
}

/* sleep and event: the wait after a sample, an interval on average. Exactly one interval
 * (Sentry's time.sleep) aliases: a thread that profd's tick preempts gets exactly an interval
 * of CPU from one sample to the next, so a loop whose period is near a divisor of it is
 * caught at points that march through it at a fixed step, slower where the sample costs more
 * (phases' 150 us phase read 11.0% for 12.9% at 499 Hz, event mode, the preemption watch
 * taking the preempted thread where it was). */
static uint64_t sleep_wait(const struct sched *s)
{
    return jittered(s->eff_interval_ns);
}

/* A thread has used `ns` more CPU: one sample is due per interval of it. One is taken per
 * look; up to two more intervals stay owed and are taken at the next looks (the poll source
 * looks twice per interval, so it catches up); beyond that they are counted missed. */
static bool credit(struct sched *s, struct thread *th, uint64_t ns)
{
    uint64_t iv = s->eff_interval_ns;
    /* Each sample after a random amount of CPU in [3/4, 5/4) of the interval (1 on
     * average): exactly periodic samples alias with periodic work, as alarm's would. */
    if (!th->sched.cpu_thresh_ns)
        th->sched.cpu_thresh_ns = jittered(iv);
    th->sched.cpu_credit_ns += ns;
    if (th->sched.cpu_credit_ns < th->sched.cpu_thresh_ns)
        return false;
    th->sched.cpu_credit_ns -= th->sched.cpu_thresh_ns;
    th->sched.cpu_thresh_ns = jittered(iv);
    if (th->sched.cpu_credit_ns > 2 * iv) {
        s->missed += (th->sched.cpu_credit_ns - 2 * iv) / iv;
        th->sched.cpu_credit_ns = 2 * iv + th->sched.cpu_credit_ns % iv;
    }
    th->sched.cpu_due = true;
    return true;
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
        run_tick(s, now_ns(), UINT64_MAX, true);
}

/* How many samples the perf source's rings gather between two reads (profd's own timer).
 * (daemon/DESIGN.md, "How often cputime's rings are read".) */
#define CPUTIME_READ_NS (500 * NS_PER_MS)
#define CPUTIME_BATCH_MAX 48

static unsigned batch_at(uint64_t interval_ns)
{
    uint64_t n = CPUTIME_READ_NS / (interval_ns ? interval_ns : 1);
    return n < 1 ? 1 : n > CPUTIME_BATCH_MAX ? CPUTIME_BATCH_MAX : (unsigned)n;
}

static unsigned perf_batch(const struct sched *s)
{
    return batch_at(s->eff_interval_ns);
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
    int r = sampler_perf_open_continuous(s->t, th, s->eff_interval_ns, batch_at(s->interval_ns),
                                         stacks);
    if (r < 0)
        return r;
    if (sampler_perf_has_stacks(th) && !s->reading) {
        /* The first ring with stacks: reads on profd's timer from now on. */
        s->reading = true;
        timer_result(s, arm_periodic(s, now_ns() + read_period_ns(s), read_period_ns(s)));
    }
    ev_io_init(&th->perf_io, on_perf, th->ps.fd, EV_READ);
    th->perf_io.data = th;
    if (!sampler_perf_has_stacks(th))
        ev_io_start(g.loop, &th->perf_io); /* counting: its overflows are read as they come */
    th->perf_last_ns = 0; /* idle from the next look of the budget on (shrink_idle_rings) */
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
    uint64_t before = th->t->stats.samples_perf;
    sampler_drain_thread(th->t, th);
    perfs_rejitter(&th->ps, PERIOD_DRAW_EVERY); /* (perfsample.c: against aliasing) */
    uint64_t n = th->t->stats.samples_perf - before;
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
        if (th->ps.fd >= 0 && th->ps.continuous && sampler_perf_has_stacks(th)) {
            read_stacks(s, th);
            any = true;
        }
    }
    account(s, c0);
    if (!any) {
        disarm(s);
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
    unsigned n = perfs_drain(&th->ps, NULL, NULL, NULL, NULL);
    if (n == 0) {
        /* Nothing new: either an overflow already consumed with the one before (the fd
         * stayed readable), or the thread is gone (POLLHUP for ever after; its exit
         * follows): only then stop watching. */
        struct pollfd pfd = {.fd = th->ps.fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLHUP))
            ev_io_stop(g.loop, &th->perf_io);
        return;
    }
    s->missed += n - 1;
    th->sched.cpu_due = true;
    /* The period stays exact here (as with perf record -c): re-setting it at each overflow
     * (to randomize it, as credit() does) restarts the count from the ioctl, which lost the
     * ~0.1 ms since the overflow: 8% of the samples at 999 Hz. */
    struct target *t = th->t;
    pid_t tid = th->tid;
    run_tick(s, now_ns(), UINT64_MAX, true);
    /* The tick waited for its stops, handling every tracee's events meanwhile: th may have
     * exited and been freed (found by ASan in test_chaos: a use after free here). The
     * target is freed only after the callback. */
    th = target_thread(t, tid);
    if (!th)
        return;
    /* It runs: from now on the kernel copies its stack at each sample (its first sample
     * above was a stop). */
    if (s->running && th->t->sampler != SAMPLER_PTRACE && !th->perf_refused &&
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
    struct itimerspec it = {.it_value = ts_of(ns), .it_interval = ts_of(ns)};
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
            LIST_FOREACH(s, &live_scheds, link)
                if (s->t->pid == (pid_t)si[i].ssi_int)
                    break;
            if (!s || s->t->state != T_ATTACHED || s->mode != SCHED_CPUTIME ||
                s->source != CPU_SRC_TIMER)
                continue;
            cpu_credit_tick(s);
        }
    }
}

/* ---- the wall-clock modes ---- */

static void defer_try(struct sched *s, uint64_t tick_ns);
static void defer_arm(struct sched *s);
static void defer_leave(struct sched *s);

/* One alarm tick of s at `now` (due at `due`), and the next one armed; in b (alarm_run), or
 * alone (NULL: its CPU read around it). */
static void alarm_tick(struct sched *s, uint64_t now, uint64_t due, struct tick_batch *b)
{
    s->queued = false;
    lateness_record(&s->lateness, due, now);
    /* Ticks whose interval has passed entirely are missed, not made up in a burst: the one
     * taken is now's. */
    if (now >= s->next_ns + s->eff_interval_ns) {
        uint64_t k = (now - s->next_ns) / s->eff_interval_ns;
        s->missed += k;
        s->next_ns += k * s->eff_interval_ns;
        due = now;
    }
    due = sample_instant(due, s->eff_interval_ns);
    if (b)
        tick_sample(s, now, due, false); /* (its cost counted by alarm_run) */
    else
        run_tick(s, now, due, false);
    if (!s->running)
        return;
    s->next_ns += s->eff_interval_ns;
    defer_try(s, now);
    if (!s->deferred) {
        timer_result(s, arm_alarm(s));
        return;
    }
    s->due_ns = s->next_ns + jitter(s->eff_interval_ns / ALARM_JITTER_DIV);
    defer_arm(s);
}

/* ---- alarm's deferred ticks (sampler.c: what makes them exact) ---- */

/* A batch spans at most this long and this many ticks. A change seen more than an interval
 * after it (profd held up: a busy machine) leaves the ticks since unknown (counted missed):
 * a batch that ends so halves the span of the next ones (down to DEFER_MIN_SPAN_NS), one
 * that runs to its end doubles it again. */
#define DEFER_MAX_NS (500 * NS_PER_MS)
#define DEFER_MIN_SPAN_NS (50 * NS_PER_MS)
#define DEFER_MAX_TICKS 64
/* Ticks taken in one go at most (more are due only after profd was held up). */
#define DEFER_CAP 256
/* After a batch cut short by a change, none for this long; doubled each time one ends
 * before it took DEFER_PAYS_TICKS ticks, up to the most. Beginning one costs profd a perf
 * event per thread (opened, mapped, closed): 20 services whose worker woke every 100 ms
 * cost 20% more per tick with batches begun every 100 ms than on time. A target whose
 * threads switch often is sampled on time, as before. */
#define DEFER_HOLD_MIN_NS (100 * NS_PER_MS)
#define DEFER_HOLD_MAX_NS (10 * NS_PER_SEC)
#define DEFER_PAYS_TICKS 16
/* A running thread's switch out wakes profd (a block ends the batch at once); a preemption
 * changes nothing, but its wake-up costs as much as a tick on time. A deferral that saw
 * more than 2 of them, and more than one for DEFER_TICKS_PER_PREEMPT of its ticks, is left
 * (and held off as after a change): its threads share their CPUs (a busy machine). */
#define DEFER_TICKS_PER_PREEMPT 4

enum defer_how { DEFER_KEEP, DEFER_LEAVE_TICK, DEFER_LEAVE_LATER, DEFER_LEAVE_PREEMPTED };

static bool defer_off;

static void defer_arm(struct sched *s)
{
    uint64_t span = s->defer_span_ns / s->eff_interval_ns;
    if (span > s->defer_batch)
        span = s->defer_batch;
    if (span < 2)
        span = 2;
    s->defer_deadline_ns = s->next_ns + (span - 1) * s->eff_interval_ns +
                           s->eff_interval_ns / ALARM_JITTER_DIV;
    /* Preemptions are counted batch by batch (on_defer_io). */
    s->defer_begin_ns = s->next_ns - s->eff_interval_ns;
    s->defer_run_preempts = 0;
    int r = arm_at(s, s->defer_deadline_ns);
    s->own_armed = r == 0;
    /* Without its timer the batch would end only when something read the buffer: no batch
     * then (the ticks due so far are taken), and no tick, as with a schedule on time. */
    if (r < 0)
        defer_leave(s);
    timer_result(s, r);
}

static void on_defer_io(struct ev_loop *loop, ev_io *w, int revents);

/* No deferral before a while from now: doubled while deferrals keep ending before they
 * took DEFER_PAYS_TICKS ticks, or (again) while they keep finding a running thread waiting
 * for a CPU, however long they ran: a busy machine's, whose ticks are exact on time only. */
static void defer_hold(struct sched *s, uint64_t now, bool again)
{
    /* One that paid halves the hold, rather than ending it: a target whose threads wake now
     * and then, some of its deferrals long and most short, began one every 1.7 s, and 100
     * mostly idle services cost profd more with their deferrals (opening, mapping and
     * closing a watch per thread each time) than on time: 8.8% of a CPU against 7.6%. */
    if (!s->defer_hold_ns)
        s->defer_hold_ns = DEFER_HOLD_MIN_NS;
    else if (again || s->defer_run_ticks < DEFER_PAYS_TICKS)
        s->defer_hold_ns *= 2;
    else if (s->defer_hold_ns / 2 >= DEFER_HOLD_MIN_NS)
        s->defer_hold_ns /= 2;
    if (s->defer_hold_ns > DEFER_HOLD_MAX_NS)
        s->defer_hold_ns = DEFER_HOLD_MAX_NS;
    s->defer_hold_until_ns = now + s->defer_hold_ns;
}

/* After a tick on time (at tick_ns): defer the next ones if the target allows it. */
static void defer_try(struct sched *s, uint64_t tick_ns)
{
    if (defer_off || s->mode != SCHED_ALARM || !s->running || s->deferred ||
        s->t->state != T_ATTACHED || tick_ns < s->defer_hold_until_ns)
        return;
    uint64_t b = DEFER_MAX_NS / s->eff_interval_ns;
    if (b > DEFER_MAX_TICKS)
        b = DEFER_MAX_TICKS;
    unsigned batch;
    int fd;
    uint64_t refused = s->t->stats.defer_refused;
    if (b < 2 || !sampler_defer_begin(s->t, tick_ns, (unsigned)b, &batch, &fd)) {
        /* Begun and undone (a watch or a ring refused): not again at the next tick. */
        if (s->t->stats.defer_refused != refused)
            defer_hold(s, tick_ns, false);
        return;
    }
    s->deferred = true;
    s->defer_batch = batch;
    if (!s->defer_span_ns)
        s->defer_span_ns = DEFER_MAX_NS;
    s->defer_run_ticks = 0;
    s->defer_batches++;
    ev_io_init(&s->dio, on_defer_io, fd, EV_READ);
    s->dio.data = s;
    ev_io_start(s->loop, &s->dio);
}

static void defer_leave(struct sched *s)
{
    ev_io_stop(s->loop, &s->dio);
    sampler_defer_end(s->t, s->running);
    s->deferred = false;
    /* Its deadline, not reached: the ticks from now on wait on the shared timer. */
    if (s->own_armed) {
        disarm(s);
        s->own_armed = false;
    }
}

static void alarm_tick(struct sched *s, uint64_t now, uint64_t due, struct tick_batch *b);

/* Take s's deferred ticks due before now and before the first change of a thread; then
 * defer on (DEFER_KEEP, if nothing changed) or take ticks on time again: the one due at
 * once (DEFER_LEAVE_TICK), or from the loop (DEFER_LEAVE_LATER: inside a hook of target.c
 * nothing may stop a thread). */
static void defer_take(struct sched *s, uint64_t now, enum defer_how how)
{
    struct target *t = s->t;
    uint64_t c0 = thread_cpu_ns();
    bool any = true;
    uint64_t changed = t->state == T_ATTACHED ? sampler_defer_changed(t, &any) : 0;
    uint64_t limit = changed < now ? changed : now;
    uint64_t iv = s->eff_interval_ns;
    uint64_t ticks[DEFER_CAP];
    size_t n = 0;
    while (n < DEFER_CAP && s->due_ns < limit) {
        ticks[n++] = s->due_ns;
        s->next_ns += iv;
        s->due_ns = s->next_ns + jitter(iv / ALARM_JITTER_DIV);
    }
    bool starved = false;
    if (n) {
        starved = sampler_defer_ticks(t, ticks, n);
        uint64_t c = thread_cpu_ns() - c0;
        s->last_tick_ns = ticks[n - 1];
        s->defer_ticks += n;
        s->defer_run_ticks += n;
        s->ticks += n;
        s->cost_ns += c;
        s->win_cost_ns += c;
        s->win_ticks += n;
    }
    /* A change seen more than an interval after it (a running thread's, at the batch's
     * end) cost the ticks since. */
    if (changed != UINT64_MAX && changed + s->eff_interval_ns < now) {
        s->defer_span_ns /= 2;
        if (s->defer_span_ns < DEFER_MIN_SPAN_NS)
            s->defer_span_ns = DEFER_MIN_SPAN_NS;
    }
    /* A running thread that waited for a CPU (sampler.c): on time again, and the next
     * batch, after a longer hold, shorter (its waiting ticks have the clock's older
     * samples). */
    if (starved) {
        s->defer_left_starved++;
        if (how == DEFER_KEEP)
            how = DEFER_LEAVE_PREEMPTED;
        s->defer_span_ns /= 2;
        if (s->defer_span_ns < DEFER_MIN_SPAN_NS)
            s->defer_span_ns = DEFER_MIN_SPAN_NS;
    }
    if (how == DEFER_KEEP && !any && s->due_ns >= now && s->running &&
        t->state == T_ATTACHED && sampler_defer_resize(t, s->defer_batch)) {
        defer_arm(s);
        return;
    }
    defer_leave(s);
    /* (Left for a transaction's boundary, say: not at once again either.) */
    if (any || starved || how == DEFER_LEAVE_LATER || how == DEFER_LEAVE_PREEMPTED) {
        s->defer_changed += any;
        s->defer_left_preempted += !any && !starved && how == DEFER_LEAVE_PREEMPTED;
        defer_hold(s, now, starved);
    }
    if (!s->running)
        return;
    if ((how == DEFER_LEAVE_TICK || how == DEFER_LEAVE_PREEMPTED) && s->due_ns <= now) {
        alarm_tick(s, now, s->due_ns, NULL);
    } else {
        timer_result(s, alarm_queue(s));
    }
}

/* A blocked thread of a deferred target was switched in, or a running one out. */
static void on_defer_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct sched *s = w->data;
    s->defer_wakes++;
    bool any = true;
    uint64_t now = now_ns();
    if (s->t->state == T_ATTACHED)
        sampler_defer_changed(s->t, &any);
    /* (A watch whose thread exited polls hung up, at once and for good: no record says so
     * where the thread's exit is not reported yet, a leader's that called pthread_exit.) */
    if (any || sampler_defer_hung_up(s->t)) {
        defer_take(s, now, DEFER_LEAVE_TICK);
        return;
    }
    /* Preempted: still running where its clock has it. */
    s->defer_preempts++;
    s->defer_run_preempts++;
    uint64_t ticks = (now - s->defer_begin_ns) / s->eff_interval_ns;
    if (s->defer_run_preempts > 2 && s->defer_run_preempts * DEFER_TICKS_PER_PREEMPT > ticks)
        defer_take(s, now, DEFER_LEAVE_PREEMPTED);
}

void sched_catch_up(struct sched *s, bool leave)
{
    if (s && s->deferred)
        defer_take(s, now_ns(), leave ? DEFER_LEAVE_LATER : DEFER_KEEP);
}

/* One wake-up's alarm ticks: every alarm schedule whose tick is due ticks, and so does every
 * other whose tick window (the first quarter of its interval on its grid, where arm_alarm
 * puts its tick at random) has begun, instead of waking profd again a moment later. A
 * wake-up costs profd 17-34 us on this VM, more than the tick of an idle target; with 100
 * targets at 101 Hz their ticks share a few wake-ups per interval instead of taking one
 * each. Each tick stays in its own window on its own grid (on the schedule's clock, its rate
 * exact), at a point set by other targets' random ones. Their CPU is counted as a batch's
 * (struct tick_batch). Then the shared timer is set for the soonest tick left. */
static void alarm_run(void)
{
    /* A tick can end schedules (its own target's, or another's whose exit it reaped): the
     * walk starts again from the head when the list changed. A schedule that ticked waits
     * for a later tick (due_ns and next_ns moved on). (An ended schedule's memory stays
     * until the callback returns: targets_collect.) */
    g.alarm_batch = true;
    struct tick_batch b = {.cpu0 = thread_cpu_ns(), .ticked = NULL};
    uint64_t wall = 0;
    struct sched *o = LIST_FIRST(&live_scheds);
    uint64_t now = now_ns(); /* read again after each tick: a tick takes time */
    /* The soonest tick left, found on the way (alarm_timer_update walks the list again only
     * where a tick changed it). */
    uint64_t soonest = UINT64_MAX;
    while (o) {
        struct sched *next = LIST_NEXT(o, link);
        bool waits = alarm_waits(o), due = waits && now >= o->due_ns;
        if (due || (waits && now >= o->next_ns &&
                    now < o->next_ns + o->eff_interval_ns / ALARM_JITTER_DIV &&
                    o->t->state == T_ATTACHED)) {
            uint64_t gen = live_gen;
            o->coalesced += !due;
            alarm_tick(o, now, due ? o->due_ns : now, &b);
            if (gen != live_gen) {
                next = LIST_FIRST(&live_scheds);
                soonest = UINT64_MAX; /* (walked again from the head) */
            }
            uint64_t after = now_ns();
            if (!o->batch_wall_ns) {
                o->batch_next = b.ticked;
                b.ticked = o;
            }
            o->batch_wall_ns += after - now + 1; /* (never 0 once on the list) */
            wall += after - now + 1;
            now = after;
        }
        if (alarm_waits(o) && o->due_ns < soonest)
            soonest = o->due_ns;
        o = next;
    }
    g.alarm_batch = false;
    alarm_timer_set_soonest(soonest);
    if (b.ticked) {
        double per_wall = (double)(thread_cpu_ns() - b.cpu0) / (double)wall;
        for (struct sched *x = b.ticked; x; x = x->batch_next) {
            charge(x, (uint64_t)((double)x->batch_wall_ns * per_wall));
            x->batch_wall_ns = 0;
        }
    }
}

static void on_alarm_timer(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    uint64_t expirations;
    if (read(g.atfd, &expirations, sizeof(expirations)) != sizeof(expirations))
        return; /* EAGAIN: re-armed meanwhile */
    g.alarm_armed_ns = 0;
    alarm_run();
}

static void on_timer(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct sched *s = w->data;
    uint64_t expirations;
    if (read(s->tfd, &expirations, sizeof(expirations)) != sizeof(expirations))
        return; /* EAGAIN: re-armed meanwhile */
    uint64_t now = now_ns();
    switch (s->mode) {
    case SCHED_ALARM:
    {
        /* (Its own timer is set only for a deferral's deadline: its ticks on time wait on
         * the shared one, on_alarm_timer.) */
        s->own_armed = false;
        if (!s->deferred)
            break;
        lateness_record(&s->lateness, s->defer_deadline_ns, now);
        s->defer_wakes++;
        defer_take(s, now, DEFER_KEEP);
        /* (Ran to its end, nothing changed: a longer span from the next batch on.) */
        if (s->deferred)
            s->defer_span_ns = s->defer_span_ns * 2 > DEFER_MAX_NS ? DEFER_MAX_NS
                                                                 : s->defer_span_ns * 2;
        alarm_run();
        break;
    }
    case SCHED_SLEEP:
    case SCHED_EVENT:
        run_tick(s, now, sample_instant(s->wait_until_ns, s->wait_ns), false);
        if (s->running)
            timer_result(s, arm(s, sleep_wait(s)));
        break;
    case SCHED_CPUTIME:
        if (s->source == CPU_SRC_PERF)
            cputime_read(s);
        else
            cpu_credit_tick(s); /* the poll source */
        break;
    }
}

static void set_interval(struct sched *s)
{
    s->interval_ns = NS_PER_SEC / (s->hz ? s->hz : 1);
    s->eff_interval_ns = (uint64_t)((double)s->interval_ns / s->scale);
    s->t->interval_ns = s->eff_interval_ns;
}

/* Samples the kernel dropped (the sampler counts them in the target's perf_lost) are
 * missed too. */
static void fold_lost(struct sched *s)
{
    s->missed += s->t->stats.perf_lost - s->lost_seen;
    s->lost_seen = s->t->stats.perf_lost;
}

static int start_cputime(struct sched *s)
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
            target_thread_perf_close(t->threads[i]);
        log_info("pid %d: perf task-clock events unavailable (%s)%s", t->pid, strerror(-r),
                 want == CPU_SRC_PERF ? "" : ": trying a CPU-clock timer");
        if (want == CPU_SRC_PERF)
            return r;
    }
    for (size_t i = 0; i < t->nthreads; i++) {
        t->threads[i]->sched.cpu_seen_valid = false;
        t->threads[i]->sched.cpu_credit_ns = 0;
        t->threads[i]->sched.cpu_thresh_ns = 0;
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
    int r = arm_periodic(s, now_ns() + poll_period_ns(s), poll_period_ns(s));
    if (r < 0)
        return r;
    cpu_credit_tick(s);
    return 0;
}

static void stop_sources(struct sched *s)
{
    if (s->deferred)
        defer_take(s, now_ns(), DEFER_LEAVE_LATER); /* (disarmed below) */
    sampler_flush(s->t); /* what the kernel sampled before the change is kept */
    disarm(s);
    s->own_armed = false;
    s->queued = false; /* (the shared timer, if set for it, fires for nothing once) */
    s->reading = false;
    if (s->have_cpu_timer) {
        timer_delete(s->cpu_timer);
        s->have_cpu_timer = false;
    }
    for (size_t i = 0; i < s->t->nthreads; i++)
        target_thread_perf_close(s->t->threads[i]); /* continuous or one-shot: the next mode opens its own */
}

static void fold_throttled(struct sched *s, uint64_t now)
{
    if (s->scale < 1.0)
        s->throttled_ns += now - s->scale_since_ns;
    s->scale_since_ns = now;
}

static int start_sources(struct sched *s)
{
    uint64_t now = now_ns();
    fold_throttled(s, now);
    if (s->mode == SCHED_CPUTIME)
        return start_cputime(s);
    s->source = CPU_SRC_AUTO;
    if (s->mode == SCHED_ALARM) {
        s->next_ns = now + s->eff_interval_ns;
        return arm_alarm(s);
    }
    return arm(s, sleep_wait(s));
}

int sched_start(struct sched *s, struct ev_loop *loop, struct target *t, enum sched_mode mode,
                unsigned hz)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->t = t;
    s->lost_seen = t->stats.perf_lost;
    s->mode = mode;
    s->hz = hz;
    s->scale = 1.0;
    set_interval(s);
    s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->tfd < 0)
        return -errno;
    ev_io_init(&s->tio, on_timer, s->tfd, EV_READ);
    s->tio.data = s;
    ev_io_start(loop, &s->tio);
    s->win_start_ns = now_ns();
    int r = start_sources(s);
    s->running = r == 0;
    if (s->running) {
        LIST_INSERT_HEAD(&live_scheds, s, link);
        live_gen++;
        budget_next(BUDGET_PERIOD_S); /* a newcomer: the budget looks again soon */
    }
    if (r < 0) {
        ev_io_stop(loop, &s->tio);
        close(s->tfd);
        s->tfd = -1;
    }
    return r;
}

void sched_stop(struct sched *s)
{
    if (!s->loop || !s->running)
        return;
    s->running = false;
    LIST_REMOVE(s, link);
    live_gen++;
    fold_throttled(s, now_ns());
    s->win_cost_ns = s->win_ticks = 0;
    stop_sources(s);
    ev_io_stop(s->loop, &s->tio);
    close(s->tfd);
    s->tfd = -1;
}

int sched_reconfigure(struct sched *s, enum sched_mode mode, unsigned hz)
{
    if (!s->running)
        return -ESRCH;
    enum sched_mode old_mode = s->mode;
    unsigned old_hz = s->hz;
    stop_sources(s);
    s->mode = mode;
    s->hz = hz;
    set_interval(s);
    int r = start_sources(s);
    budget_next(BUDGET_PERIOD_S); /* a new rate: its cost is measured soon */
    if (r == 0)
        timer_result(s, 0); /* a timer that had failed is set now */
    if (r < 0) {
        s->mode = old_mode;
        s->hz = old_hz;
        set_interval(s);
        if (start_sources(s) < 0) {
            /* The old schedule cannot be had again either (a cputime source gone): alarm,
             * which needs nothing but its timerfd, rather than no sampling at all. */
            log_warn("pid %d: cannot restart the %s schedule: sampling with alarm", s->t->pid,
                     sched_mode_name(s->mode));
            s->mode = SCHED_ALARM;
            int a = start_sources(s);
            if (a < 0)
                timer_failed(s, a); /* no tick at all until the retry succeeds */
        }
    }
    return r;
}

/* Events closer together than this share a sample: a client asking for slices in a loop
 * must not drive sampling at any rate. */
#define EVENT_MIN_GAP_NS (1 * NS_PER_MS)

bool sched_event(struct sched *s)
{
    if (!s->running || s->mode != SCHED_EVENT)
        return false;
    uint64_t now = now_ns();
    if (s->last_tick_ns && now - s->last_tick_ns < EVENT_MIN_GAP_NS)
        return false;
    s->events++;
    sampler_event_tick(true);
    run_tick(s, now_ns(), UINT64_MAX, false);
    sampler_event_tick(false);
    if (s->running)
        timer_result(s, arm(s, sleep_wait(s)));
    return true;
}


static void on_thread_added(struct thread *th)
{
    struct sched *s = th->t->sched;
    if (s->deferred)
        defer_take(s, now_ns(), DEFER_LEAVE_LATER); /* the ticks before its birth */
    if (s->running && s->mode == SCHED_CPUTIME && s->source == CPU_SRC_PERF) {
        int r = perf_open(s, th);
        if (r < 0)
            log_debug("pid %d: no perf event for new thread %d: %s", s->t->pid, th->tid,
                      strerror(-r));
    }
}

static void on_target_stopped(struct target *t)
{
    sched_stop(t->sched);
}

static void on_thread_exited(struct thread *th)
{
    struct sched *s = th->t->sched;
    if (s->deferred)
        defer_take(s, now_ns(), DEFER_LEAVE_LATER); /* the ticks before its exit */
    if (s->running && sampler_perf_has_stacks(th)) {
        uint64_t c0 = thread_cpu_ns();
        read_stacks(s, th);
        account(s, c0);
    }
}

const struct target_hooks sched_target_hooks = {
    .thread_added = on_thread_added,
    .stopped = on_target_stopped,
    .thread_exited = on_thread_exited,
};

int sched_attach(pid_t pid, enum sched_mode mode, unsigned hz, uint64_t buffer_ns,
                 enum sampler_kind sampler, struct target **out, char *why, size_t whylen)
{
    why[0] = '\0';
    struct target *old = target_find(pid);
    if (sampler == SAMPLER_PERF && pid > 0 && (!old || target_is_previous(old))) {
        /* Asked for the kernel's copies only: refused now rather than stopping threads. */
        int r = sampler_probe(pid);
        if (r < 0 && r != -ESRCH) {
            const char *need =
                r == -ENOSYS ? "perf_event_open is not there: a kernel without perf events, "
                               "or a seccomp filter on profd that hides the call"
                : r == -EMFILE || r == -ENFILE ? "profd is out of file descriptors"
                : r == -ENOMEM ? "profd has no room for the event's ring (max_memory, or "
                                 "its locked-memory limit)"
                               : "profd needs CAP_PERFMON or kernel.perf_event_paranoid <= 1, "
                                 "room under its locked-memory limit, and no seccomp filter "
                                 "that forbids perf_event_open";
            snprintf(why, whylen, "sampler perf: the kernel refuses a perf event on process "
                     "%d (%s; %s)", pid, strerror(-r), need);
            return r == -EMFILE || r == -ENFILE || r == -ENOMEM ? r : -EPERM;
        }
    }
    struct target *t;
    int r = target_attach(pid, hz, buffer_ns, sampler, xcalloc(1, sizeof(struct sched)), &t,
                          why, whylen);
    if (r < 0)
        return r;
    r = sched_start(t->sched, g.loop, t, mode, hz);
    if (r < 0) {
        /* Seized, but profd cannot sample it: released. The client did nothing wrong: -EIO
         * with the reason, unless the process is gone. */
        snprintf(why, whylen, "cannot start the %s schedule: %s", sched_mode_name(mode),
                 strerror(-r));
        log_warn("pid %d: attach failed: %s", pid, why);
        target_detach(t, NULL, NULL);
        return r == -ESRCH ? r : -EIO;
    }
    log_info("attached to %d (%s), %zu threads, %s at %u Hz%s%s, %" PRIu64 " s buffer", pid,
             t->comm, t->nthreads, sched_mode_name(mode), hz,
             mode == SCHED_CPUTIME ? " of CPU time, source " : "",
             mode == SCHED_CPUTIME ? cpu_source_name(t->sched->source) : "",
             buffer_ns / NS_PER_SEC);
    *out = t;
    return 0;
}

struct cJSON *sched_describe(const struct sched *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", sched_mode_name(s->mode));
    if (!s->t)
        return o; /* never started (an attach that failed, being undone) */
    cJSON_AddStringToObject(o, "sampler", sampler_kind_name(s->t->sampler));
    if (s->mode == SCHED_CPUTIME)
        cJSON_AddStringToObject(o, "cputime_source", cpu_source_name(s->source));
    cJSON_AddNumberToObject(o, "hz", s->hz);
    cJSON_AddStringToObject(o, "rate_unit", s->mode == SCHED_CPUTIME ? "per CPU-second of each thread"
                                                                   : "per second");
    cJSON_AddNumberToObject(o, "effective_hz", sched_effective_hz(s));
    cJSON_AddBoolToObject(o, "throttled", s->scale < 1.0);
    cJSON_AddNumberToObject(o, "budget_cpu_pct", g.max_cpu_pct);
    cJSON_AddNumberToObject(o, "budget_correction", g.mult);
    cJSON_AddNumberToObject(o, "recent_ticks_per_s", s->recent_hz);
    cJSON_AddNumberToObject(o, "recent_samples_per_s", s->recent_sps);
    cJSON_AddNumberToObject(o, "ticks", (double)s->ticks);
    uint64_t lost = s->t->stats.perf_lost - s->lost_seen;
    cJSON_AddNumberToObject(o, "missed", (double)(s->missed + lost));
    if (s->mode == SCHED_EVENT)
        cJSON_AddNumberToObject(o, "event_samples", (double)s->events);
    if (s->mode == SCHED_ALARM) {
        cJSON_AddNumberToObject(o, "coalesced", (double)s->coalesced);
        cJSON *d = cJSON_AddObjectToObject(o, "deferred");
        cJSON_AddBoolToObject(d, "now", s->deferred);
        cJSON_AddNumberToObject(d, "batch_ticks", s->deferred ? s->defer_batch : 0);
        cJSON_AddNumberToObject(d, "batches", (double)s->defer_batches);
        cJSON_AddNumberToObject(d, "ticks", (double)s->defer_ticks);
        cJSON_AddNumberToObject(d, "wakeups", (double)s->defer_wakes);
        cJSON_AddNumberToObject(d, "cut_short_by_a_change", (double)s->defer_changed);
        cJSON_AddNumberToObject(d, "wakeups_for_a_preemption", (double)s->defer_preempts);
        cJSON_AddNumberToObject(d, "left_for_preemptions", (double)s->defer_left_preempted);
        cJSON_AddNumberToObject(d, "left_for_threads_without_a_cpu",
                                (double)s->defer_left_starved);
        cJSON_AddNumberToObject(d, "left_for_waits_for_a_cpu", (double)s->t->stats.defer_waited);
        enum perfs_block_watch bw = perfs_block_watch();
        cJSON_AddStringToObject(d, "running_blocks_from",
                                bw == PERFS_BLOCKS_SCHED_SWITCH   ? "sched_switch"
                                : bw == PERFS_BLOCKS_SWITCHES     ? "context_switches"
                                : bw == PERFS_BLOCKS_AT_BATCH_END ? "batch_end"
                                                                  : "none yet");
        cJSON_AddBoolToObject(d, "sched_switch_held", perfs_sched_switch_held());
        cJSON_AddNumberToObject(d, "samples", (double)s->t->stats.deferred);
        cJSON_AddNumberToObject(d, "samples_read_after_blocking",
                                (double)s->t->stats.deferred_blocked);
        cJSON_AddNumberToObject(d, "running_unsampled", (double)s->t->stats.deferred_unsampled);
        cJSON_AddNumberToObject(d, "refused", (double)s->t->stats.defer_refused);
    }
    uint64_t thr = s->throttled_ns +
                   (s->running && s->scale < 1.0 ? now_ns() - s->scale_since_ns : 0);
    cJSON_AddNumberToObject(o, "throttled_s", (double)thr / 1e9);
    cJSON_AddNumberToObject(o, "cpu_ms", (double)s->cost_ns / 1e6);
    cJSON_AddNumberToObject(o, "timer_failures", (double)s->timer_failures);
    if (s->timer_err)
        cJSON_AddStringToObject(o, "timer_error", strerror(-s->timer_err));
    return o;
}

/* A cputime thread that has not run for this long goes back to a counting event (a page of
 * ring instead of room for a dozen stack copies) until it runs again. */
#define RING_IDLE_NS (10 * NS_PER_SEC)

static void shrink_idle_rings(struct sched *s, uint64_t now)
{
    for (size_t i = 0; i < s->t->nthreads; i++) {
        struct thread *th = s->t->threads[i];
        if (!sampler_perf_has_stacks(th) || !th->ps.continuous)
            continue;
        if (!th->perf_last_ns) {
            th->perf_last_ns = now; /* opened since the last look */
        } else if (now - th->perf_last_ns > RING_IDLE_NS) {
            uint64_t c0 = thread_cpu_ns();
            read_stacks(s, th); /* what it sampled since the last read */
            account(s, c0);
            if (th->ps.continuous && perf_open_as(s, th, false) == 0)
                th->perf_last_ns = 0;
        }
    }
}

/* ---- the budget ---- */

/* Set s's timer for its current interval from now: after a change of scale (a new grid),
 * or to recover from a timer that could not be set. Returns 0 or -errno. */
static int rearm(struct sched *s, uint64_t now)
{
    if (s->mode == SCHED_CPUTIME) {
        if (s->source == CPU_SRC_PERF) {
            uint64_t period = s->eff_interval_ns;
            for (size_t i = 0; i < s->t->nthreads; i++) {
                struct thread *th = s->t->threads[i];
                /* The event keeps counting at its old period: a rate the budget did not
                 * choose, for that thread. */
                if (th->ps.fd >= 0 && th->ps.continuous && perfs_set_period(&th->ps, period) < 0)
                    log_warn("pid %d: thread %d keeps its previous sampling period: "
                             "PERF_EVENT_IOC_PERIOD: %s", s->t->pid, th->tid, strerror(errno));
            }
            return s->reading ? arm_periodic(s, now + read_period_ns(s), read_period_ns(s)) : 0;
        }
        if (s->source == CPU_SRC_TIMER)
            return timer_set(s, s->eff_interval_ns);
        return arm_periodic(s, now + poll_period_ns(s), poll_period_ns(s));
    }
    /* A new rate starts a new grid from now, but never puts off the tick already due
     * sooner: the budget re-grids a target at every period its scale changes (every 0.25 s
     * at worst), and a target slowed to 1 Hz whose next tick moved away each time was never
     * sampled again (test_schedules under valgrind, CI run 15). */
    uint64_t next = now + s->eff_interval_ns;
    if (s->mode == SCHED_ALARM) {
        if (s->next_ns > now && s->next_ns < next)
            next = s->next_ns;
        s->next_ns = next;
        return arm_alarm(s);
    }
    /* sleep, event: the wait under way is for the old interval. */
    if (s->wait_until_ns > now && s->wait_until_ns < next)
        next = s->wait_until_ns;
    return arm(s, next - now);
}

static void set_scale(struct sched *s, double scale, uint64_t now)
{
    /* Deferred ticks are taken on the old grid first (as set_interval will compute it). */
    if (s->deferred && (uint64_t)((double)s->interval_ns / scale) != s->eff_interval_ns)
        defer_take(s, now, DEFER_LEAVE_LATER);
    fold_throttled(s, now);
    s->scale = scale;
    uint64_t old = s->eff_interval_ns;
    set_interval(s);
    if (old == s->eff_interval_ns)
        return;
    if (s->mode == SCHED_ALARM) {
        /* A new grid from now; a tick of the old one due now is missed (re-arming forgets
         * it). */
        if (alarm_waits(s) && s->due_ns <= now) {
            s->missed++;
            s->win_missed++; /* the budget's doing: not a sign of a starved loop */
        }
    }
    timer_result(s, rearm(s, now));
}

static int by_demand(const void *a, const void *b)
{
    double x = (*(struct sched *const *)a)->demand, y = (*(struct sched *const *)b)->demand;
    return x < y ? -1 : x > y;
}

/* Every BUDGET_PERIOD_S (BUDGET_CALM_S while calm): measure what each target's sampling cost in the window, estimate
 * what it would cost unthrottled, and divide the budget max-min fairly: every target gets
 * up to an equal share, and what the cheaper ones leave is shared by the others. A target
 * whose share is below its demand is slowed down in proportion. */
static void on_budget(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    uint64_t now = now_ns();
    struct sched *s;
    /* Deferred ticks up to now first: the window's cost per tick counts them (else the one
     * tick that began a batch, with its perf events to open, stood for them all, and an
     * idle target was throttled). (No tick is taken here: schedules do not end.) */
    LIST_FOREACH(s, &live_scheds, link)
        if (s->deferred)
            defer_take(s, now, DEFER_KEEP);
    uint64_t loop_cpu = thread_cpu_ns(), loop_win = loop_cpu - g.win_loop_cpu_ns;
    g.win_loop_cpu_ns = loop_cpu;
    double win_s = g.win_start_ns ? (double)(now - g.win_start_ns) / 1e9 : 0;
    g.win_start_ns = now;
    size_t n = 0;
    uint64_t ticks_cpu = 0;
    LIST_FOREACH(s, &live_scheds, link) {
        if (s->t->state != T_ATTACHED)
            continue;
        n++;
        ticks_cpu += s->win_cost_ns;
        if (s->timer_err)
            timer_result(s, rearm(s, now));
    }
    if (!n) {
        g.mult = 1.0;
        g.any_throttled = false;
        budget_next(BUDGET_CALM_S);
        return;
    }
    /* What the ticks do not see costs too: stops that arrive after their tick, the loop
     * itself. Sampling is nearly all the loop does, so the whole loop is held to the budget:
     * each target's demand is scaled by the loop's CPU over the ticks' own. */
    if (ticks_cpu > 1000000) {
        double f = (double)loop_win / (double)ticks_cpu;
        f = f < 1.0 ? 1.0 : f > 4.0 ? 4.0 : f;
        g.overhead = 0.5 * g.overhead + 0.5 * f;
    }
    struct sched **v = xmalloc(n * sizeof(*v));
    size_t k = 0;
    bool late = false; /* some target missed ticks: the loop lacked CPU, whatever it used */
    bool retry = false;
    LIST_FOREACH(s, &live_scheds, link) {
        if (s->t->state != T_ATTACHED)
            continue;
        retry |= s->timer_err != 0;
        struct target *t = s->t;
        double secs = (double)(now - s->win_start_ns) / 1e9;
        if (secs <= 0)
            secs = BUDGET_PERIOD_S;
        fold_lost(s);
        uint64_t missed = s->missed - s->win_missed;
        late |= missed > 0;
        s->recent_hz = (double)s->win_ticks / secs;
        /* Samples, counted here: a stop can complete after its tick. */
        s->recent_sps = (double)(t->stats.samples - s->win_samples) / secs;
        /* Demand: CPU per tick (all the loop's costs included) times the ticks it would
         * take unthrottled and on time: the wall-clock modes' rate, or for cputime the
         * intervals its threads used (taken or missed) at scale 1. */
        if (s->win_ticks) {
            double per_tick = (double)s->win_cost_ns * g.overhead / (double)s->win_ticks;
            s->cost_per_tick = s->cost_per_tick > 0 ? 0.5 * s->cost_per_tick + 0.5 * per_tick
                                                    : per_tick;
        }
        if (s->mode == SCHED_CPUTIME) {
            /* Its work (the ticks, and the timer or poll source's reads of every thread)
             * grows with the rate: what it cost, at scale 1, with the intervals missed. */
            double at_scale = (double)s->win_cost_ns * g.overhead / secs;
            if (s->win_ticks && missed)
                at_scale += s->cost_per_tick * (double)missed / secs;
            s->demand = at_scale / s->scale;
        } else {
            s->demand = s->cost_per_tick * (double)s->hz;
        }
        s->win_cost_ns = s->win_ticks = 0;
        s->win_samples = t->stats.samples;
        s->win_missed = s->missed;
        s->win_start_ns = now;
        v[k++] = s;
        if (s->mode == SCHED_CPUTIME && s->source == CPU_SRC_PERF)
            shrink_idle_rings(s, now);
    }
    if (g.max_cpu_pct > 0) {
        /* Only the budget: when the machine cannot give the loop even that much (every
         * CPU busy), ticks come late or are missed, at random across targets; that shows
         * in each one's missed ticks and achieved rate. (Lowering the budget to what the
         * loop got does not help: on a saturated machine the loop is late because it waits
         * for a CPU, however little it asks; it only spirals the rates down.) */
        g.avail = g.max_cpu_pct / 100.0 * 1e9;
        /* The demands are estimates, too high for a throttled target: the shares are corrected
         * by what profd really used. (daemon/DESIGN.md, "The budget's correction".) */
        if (win_s > 0 && g.any_throttled) {
            double used = (double)loop_win / win_s;
            double f = used > 0 ? g.avail / used : 1.25;
            f = f > 1.25 ? 1.25 : f < 0.8 ? 0.8 : f;
            if (f > 1.0 && late)
                f = 1.0;
            g.mult *= f;
            g.mult = g.mult > 4.0 ? 4.0 : g.mult < 0.25 ? 0.25 : g.mult;
        } else if (!g.any_throttled) {
            g.mult = 1.0 + (g.mult - 1.0) * 0.5;
        }
        /* A quarter-second window can see the demands over the budget once, none throttled
         * (a second's chores in it, a status request: 100 idle services at 101 Hz with the
         * loop at 19% of a CPU still throttled 20 of them for a moment): rates are lowered
         * only when the next look finds them over it too (over the budget for at most one
         * period more). */
        double total = 0;
        for (size_t i = 0; i < n; i++)
            total += v[i]->demand;
        bool over = total > g.avail * g.mult;
        bool hold = over && !g.any_throttled && !g.over_before;
        g.over_before = over && !g.any_throttled;
        g.any_throttled = false;
        sort_array(v, n, sizeof(*v), by_demand);
        double left = hold ? total : g.avail * g.mult;
        for (size_t i = 0; i < n; i++) {
            struct sched *s = v[i];
            double share = left / (double)(n - i);
            double alloc = s->demand < share ? s->demand : share;
            left -= alloc;
            double scale = s->demand > 0 ? alloc / s->demand : 1.0;
            double min_scale = s->hz ? 1.0 / s->hz : 1.0; /* never below 1 Hz */
            if (scale < min_scale)
                scale = min_scale;
            if (scale > 1.0)
                scale = 1.0;
            /* Leave small changes alone, so the rate does not wobble with the noise. */
            if (fabs(scale - s->scale) > 0.05 * s->scale || (scale == 1.0 && s->scale != 1.0))
                set_scale(s, scale, now);
            g.any_throttled |= s->scale < 1.0;
        }
    } else {
        for (size_t i = 0; i < n; i++) /* no budget (any more): every rate as asked */
            if (v[i]->scale != 1.0)
                set_scale(v[i], 1.0, now);
    }
    free(v);
    bool calm = !g.any_throttled && !late && !retry &&
                (g.max_cpu_pct <= 0 ||
                 (win_s > 0 && (double)loop_win / win_s < 0.5 * g.max_cpu_pct / 100.0 * 1e9));
    budget_next(calm ? BUDGET_CALM_S : BUDGET_PERIOD_S);
}

int sched_global_init(struct ev_loop *loop, enum cpu_source source, double max_cpu_pct)
{
    g.loop = loop;
    g.source = source;
    g.max_cpu_pct = max_cpu_pct;
    g.page = sysconf(_SC_PAGESIZE);
    /* PROFD_DEFER=0: every alarm tick on time (for comparisons; see sampler.c). */
    const char *d = getenv("PROFD_DEFER");
    defer_off = d && !strcmp(d, "0");
    g.win_loop_cpu_ns = thread_cpu_ns();
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
    ev_timer_init(&g.budget_w, on_budget, BUDGET_PERIOD_S, BUDGET_PERIOD_S);
    ev_timer_start(loop, &g.budget_w);
    return 0;
}

void sched_global_finish(void)
{
    if (!g.loop)
        return;
    if (g.atfd >= 0) {
        ev_io_stop(g.loop, &g.atio);
        close(g.atfd);
        g.atfd = -1;
        g.alarm_armed_ns = 0;
    }
    ev_timer_stop(g.loop, &g.budget_w);
    if (g.sigfd >= 0) {
        ev_io_stop(g.loop, &g.sig_w);
        close(g.sigfd);
        g.sigfd = -1;
    }
}
