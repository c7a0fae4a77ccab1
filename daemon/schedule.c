/* schedule.c: the sampling schedules (see schedule.h): the modes, their timers and ticks,
 * starting and stopping them, and what status says of them. cputime's credit is in
 * cputime.c, alarm's deferred ticks in sched_defer.c, the CPU budget in budget.c. */
#include "sched_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/timerfd.h>

#include <cjson/cJSON.h>

#include "budget.h"
#include "log.h"
#include "perfsample.h"
#include "sampler.h"
#include "target.h"
#include "util.h"

struct ev_loop *sched_loop;

/* The alarm schedules' ticks on time share one timerfd, set for the soonest of them
 * (alarm_queue): each tick re-armed a timerfd of its own, a system call per tick (13% of
 * profd's CPU with 100 idle services at 101 Hz), where one wake-up takes the ticks of several
 * targets (alarm_run). */
static struct {
    int atfd;
    ev_io atio;
    uint64_t alarm_armed_ns; /* when atfd fires; 0: not set */
    bool alarm_batch;        /* in alarm_run: atfd is set at its end */
} g = {.atfd = -1};

struct sched_list sched_live = LIST_HEAD_INITIALIZER(sched_live);
uint64_t sched_live_gen;

bool sched_timer_run_early(struct ev_loop *loop, ev_timer *w,
                           void (*cb)(struct ev_loop *, ev_timer *, int))
{
    if (!ev_is_active(w) || ev_timer_remaining(loop, w) >= w->repeat / 3)
        return false;
    ev_timer_again(loop, w);
    cb(loop, w, EV_TIMER);
    return true;
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

double sched_effective_hz(const struct sched *s)
{
    return s->eff_interval_ns ? 1e9 / (double)s->eff_interval_ns : 0;
}

/* One tick of s: the sampler run for its target. */
static void tick_sample(struct sched *s, uint64_t tick_ns, uint64_t due_ns, enum tick_kind kind)
{
    s->last_tick_ns = tick_ns;
    struct sample_req rq = {.tick_ns = tick_ns, .due_ns = due_ns < tick_ns ? due_ns : tick_ns,
                            .cpu_only = kind == TICK_CPU, .event = kind == TICK_EVENT};
    if (s->t->state == T_ATTACHED)
        sampler_tick(s->t, &rq);
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
void sched_run_tick(struct sched *s, uint64_t tick_ns, uint64_t due_ns, enum tick_kind kind)
{
    uint64_t c0 = thread_cpu_ns();
    tick_sample(s, tick_ns, due_ns, kind);
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

struct timespec sched_ts_of(uint64_t ns)
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
    struct itimerspec it = {.it_value = sched_ts_of(after ? after : 1)};
    return tfd_set(s, 0, &it);
}

/* Fire at `first` (CLOCK_MONOTONIC) and every `period` ns after it, on that grid. */
int sched_arm_periodic(struct sched *s, uint64_t first, uint64_t period)
{
    struct itimerspec it = {.it_value = sched_ts_of(first), .it_interval = sched_ts_of(period)};
    return tfd_set(s, TFD_TIMER_ABSTIME, &it);
}

/* Fire once at `at` (CLOCK_MONOTONIC; at once if that has passed). */
int sched_arm_at(struct sched *s, uint64_t at)
{
    struct itimerspec it = {.it_value = sched_ts_of(at ? at : 1)};
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
    budget_look_soon(); /* which tries again */
}

/* The result of setting s's timer: a failure recorded, or one recovered from. */
void sched_timer_result(struct sched *s, int r)
{
    if (r < 0) {
        timer_failed(s, r);
    } else if (s->timer_err) {
        log_info("pid %d: the timer of its %s schedule is set again", s->t->pid,
                 sched_mode_name(s->mode));
        s->timer_err = 0;
    }
}

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
        ev_io_start(sched_loop, &g.atio);
    }
    struct itimerspec it = {.it_value = sched_ts_of(at)};
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
        LIST_FOREACH(s, &sched_live, link)
            if (alarm_waits(s))
                timer_failed(s, r);
    }
}

/* s's next tick (due_ns) waits on the shared timer: set sooner if it is due first (inside
 * alarm_run, once at its end). 0 or -errno. */
int sched_alarm_queue(struct sched *s)
{
    s->queued = true;
    if (g.alarm_batch || (g.alarm_armed_ns && g.alarm_armed_ns <= s->due_ns))
        return 0;
    return alarm_timer_set(s->due_ns ? s->due_ns : 1);
}

static int arm_alarm(struct sched *s)
{
    s->due_ns = alarm_due(s->next_ns, s->eff_interval_ns);
    return sched_alarm_queue(s);
}

/* Stop the timerfd; one that cannot be stopped is closed by sched_stop or re-set by the next
 * start, so it only costs a tick too many: logged. */
void sched_disarm(struct sched *s)
{
    struct itimerspec it;
    memset(&it, 0, sizeof(it));
    int r = tfd_set(s, 0, &it);
    if (r < 0)
        log_warn("pid %d: cannot stop the timer of its %s schedule: %s", s->t->pid,
                 sched_mode_name(s->mode), strerror(-r));
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

/* ---- the wall-clock modes ---- */

/* One alarm tick of s at `now` (due at `due`), and the next one armed; in b (alarm_run), or
 * alone (NULL: its CPU read around it). */
void sched_alarm_tick(struct sched *s, uint64_t now, uint64_t due, struct tick_batch *b)
{
    s->queued = false;
    lateness_record(&s->lateness, due, now);
    /* Ticks whose interval has passed entirely are missed, not made up in a burst: the one
     * taken is now's (alarm_skip). */
    uint64_t k = alarm_skip(now, &s->next_ns, s->eff_interval_ns);
    if (k) {
        s->missed += k;
        due = now;
    }
    due = sample_instant(due, s->eff_interval_ns);
    if (b)
        tick_sample(s, now, due, TICK_WALL); /* (its cost counted by alarm_run) */
    else
        sched_run_tick(s, now, due, TICK_WALL);
    if (!s->running)
        return;
    s->next_ns += s->eff_interval_ns;
    sched_defer_try(s, now);
    if (!s->deferred) {
        sched_timer_result(s, arm_alarm(s));
        return;
    }
    s->due_ns = alarm_due(s->next_ns, s->eff_interval_ns);
    sched_defer_arm(s);
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
    struct sched *o = LIST_FIRST(&sched_live);
    uint64_t now = now_ns(); /* read again after each tick: a tick takes time */
    /* The soonest tick left, found on the way (alarm_timer_update walks the list again only
     * where a tick changed it). */
    uint64_t soonest = UINT64_MAX;
    while (o) {
        struct sched *next = LIST_NEXT(o, link);
        bool waits = alarm_waits(o), due = waits && now >= o->due_ns;
        if (due || (waits && alarm_in_window(now, o->next_ns, o->eff_interval_ns) &&
                    o->t->state == T_ATTACHED)) {
            uint64_t gen = sched_live_gen;
            o->coalesced += !due;
            sched_alarm_tick(o, now, due ? o->due_ns : now, &b);
            if (gen != sched_live_gen) {
                next = LIST_FIRST(&sched_live);
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
        sched_defer_deadline(s, now);
        alarm_run();
        break;
    }
    case SCHED_SLEEP:
    case SCHED_EVENT:
        sched_run_tick(s, now, sample_instant(s->wait_until_ns, s->wait_ns), TICK_WALL);
        if (s->running)
            sched_timer_result(s, arm(s, sleep_wait(s)));
        break;
    case SCHED_CPUTIME:
        cputime_on_timer(s);
        break;
    }
}

static void set_interval(struct sched *s)
{
    s->interval_ns = NS_PER_SEC / (s->hz ? s->hz : 1);
    s->eff_interval_ns = (uint64_t)((double)s->interval_ns / s->scale);
    s->t->interval_ns = s->eff_interval_ns;
}

/* Samples the kernel dropped (the sampler counts them in the target's stats.perf.lost) are
 * missed too. */
void sched_fold_lost(struct sched *s)
{
    s->missed += s->t->stats.perf.lost - s->lost_seen;
    s->lost_seen = s->t->stats.perf.lost;
}

static void stop_sources(struct sched *s)
{
    if (s->deferred)
        sched_defer_take(s, now_ns(), DEFER_LEAVE_LATER); /* (disarmed below) */
    sampler_flush(s->t); /* what the kernel sampled before the change is kept */
    sched_disarm(s);
    s->own_armed = false;
    s->queued = false; /* (the shared timer, if set for it, fires for nothing once) */
    s->reading = false;
    cputime_stop(s);
    for (size_t i = 0; i < s->t->nthreads; i++)
        sampler_thread_release(s->t->threads[i]); /* continuous or one-shot: the next mode opens its own */
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
        return cputime_start(s);
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
    s->lost_seen = t->stats.perf.lost;
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
        LIST_INSERT_HEAD(&sched_live, s, link);
        sched_live_gen++;
        budget_look_soon(); /* a newcomer: the budget looks again soon */
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
    sched_live_gen++;
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
    budget_look_soon(); /* a new rate: its cost is measured soon */
    if (r == 0)
        sched_timer_result(s, 0); /* a timer that had failed is set now */
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
    sched_run_tick(s, now_ns(), UINT64_MAX, TICK_EVENT);
    if (s->running)
        sched_timer_result(s, arm(s, sleep_wait(s)));
    return true;
}

static void on_thread_added(struct thread *th)
{
    struct sched *s = th->t->sched;
    sched_thread_init(&th->sched);
    if (s->deferred)
        sched_defer_take(s, now_ns(), DEFER_LEAVE_LATER); /* the ticks before its birth */
    cputime_thread_added(s, th);
}

static void on_target_stopped(struct target *t)
{
    sched_stop(t->sched);
}

static void on_thread_exited(struct thread *th)
{
    struct sched *s = th->t->sched;
    if (s->deferred)
        sched_defer_take(s, now_ns(), DEFER_LEAVE_LATER); /* the ticks before its exit */
    cputime_thread_exited(s, th);
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
    r = sched_start(t->sched, sched_loop, t, mode, hz);
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
    cJSON_AddNumberToObject(o, "budget_cpu_pct", sched_budget_pct());
    cJSON_AddNumberToObject(o, "budget_correction", budget_correction());
    cJSON_AddNumberToObject(o, "recent_ticks_per_s", s->recent_hz);
    cJSON_AddNumberToObject(o, "recent_samples_per_s", s->recent_sps);
    cJSON_AddNumberToObject(o, "ticks", (double)s->ticks);
    uint64_t lost = s->t->stats.perf.lost - s->lost_seen;
    cJSON_AddNumberToObject(o, "missed", (double)(s->missed + lost));
    if (s->mode == SCHED_EVENT)
        cJSON_AddNumberToObject(o, "event_samples", (double)s->events);
    if (s->mode == SCHED_ALARM) {
        cJSON_AddNumberToObject(o, "coalesced", (double)s->coalesced);
        sched_defer_describe(s, o);
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

/* ---- the budget ---- */

/* Set s's timer for its current interval from now: after a change of scale (a new grid),
 * or to recover from a timer that could not be set. Returns 0 or -errno. */
int sched_rearm(struct sched *s, uint64_t now)
{
    if (s->mode == SCHED_CPUTIME)
        return cputime_rearm(s, now);
    /* A new rate starts a new grid from now, but never puts off the tick already due
     * sooner: the budget re-grids a target at every period its scale changes (every 0.25 s
     * at worst), and a target slowed to 1 Hz whose next tick moved away each time was never
     * sampled again (test_schedules under valgrind, CI run 15). (regrid_next) */
    if (s->mode == SCHED_ALARM) {
        s->next_ns = regrid_next(now, s->eff_interval_ns, s->next_ns);
        return arm_alarm(s);
    }
    /* sleep, event: the wait under way is for the old interval. */
    return arm(s, regrid_next(now, s->eff_interval_ns, s->wait_until_ns) - now);
}

void sched_set_scale(struct sched *s, double scale, uint64_t now)
{
    /* Deferred ticks are taken on the old grid first (as set_interval will compute it). */
    if (s->deferred && (uint64_t)((double)s->interval_ns / scale) != s->eff_interval_ns)
        sched_defer_take(s, now, DEFER_LEAVE_LATER);
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
    sched_timer_result(s, sched_rearm(s, now));
}

int sched_global_init(struct ev_loop *loop, enum cpu_source source, double max_cpu_pct)
{
    sched_loop = loop;
    sched_defer_init();
    budget_init(max_cpu_pct);
    int r = cputime_global_init(loop, source);
    if (r < 0)
        return r;
    budget_start(loop);
    return 0;
}

void sched_global_finish(void)
{
    if (!sched_loop)
        return;
    if (g.atfd >= 0) {
        ev_io_stop(sched_loop, &g.atio);
        close(g.atfd);
        g.atfd = -1;
        g.alarm_armed_ns = 0;
    }
    budget_finish();
    cputime_global_finish();
}
