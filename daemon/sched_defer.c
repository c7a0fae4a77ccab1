/* sched_defer.c: alarm's deferred ticks, the schedule's side: when a deferral begins, its
 * batch's deadline and hold, the ticks taken at its end (defer.c: what makes them exact). */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "perfsample.h"
#include "sampler.h"
#include "target.h"
#include "util.h"

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

static bool defer_off;

void sched_defer_init(void)
{
    /* PROFD_DEFER=0: every alarm tick on time (for comparisons; see defer.c). */
    const char *d = getenv("PROFD_DEFER");
    defer_off = d && !strcmp(d, "0");
}

/* ---- the arithmetic (test_schedule_ticks) ---- */

uint64_t sched_defer_batch_max(uint64_t iv)
{
    uint64_t b = DEFER_MAX_NS / iv;
    return b > DEFER_MAX_TICKS ? DEFER_MAX_TICKS : b;
}

uint64_t sched_defer_deadline_ns(uint64_t next, uint64_t iv, uint64_t span_ns, unsigned batch)
{
    uint64_t span = span_ns / iv;
    if (span > batch)
        span = batch;
    if (span < 2)
        span = 2;
    return next + (span - 1) * iv + iv / ALARM_JITTER_DIV;
}

uint64_t sched_defer_hold_ns(uint64_t hold_ns, bool again, uint64_t run_ticks)
{
    /* One that paid halves the hold, rather than ending it: a target whose threads wake now
     * and then, some of its deferrals long and most short, began one every 1.7 s, and 100
     * mostly idle services cost profd more with their deferrals (opening, mapping and
     * closing a watch per thread each time) than on time: 8.8% of a CPU against 7.6%. */
    if (!hold_ns)
        hold_ns = DEFER_HOLD_MIN_NS;
    else if (again || run_ticks < DEFER_PAYS_TICKS)
        hold_ns *= 2;
    else if (hold_ns / 2 >= DEFER_HOLD_MIN_NS)
        hold_ns /= 2;
    return hold_ns > DEFER_HOLD_MAX_NS ? DEFER_HOLD_MAX_NS : hold_ns;
}

uint64_t sched_defer_span_halved(uint64_t span_ns)
{
    span_ns /= 2;
    return span_ns < DEFER_MIN_SPAN_NS ? DEFER_MIN_SPAN_NS : span_ns;
}

uint64_t sched_defer_span_doubled(uint64_t span_ns)
{
    return span_ns * 2 > DEFER_MAX_NS ? DEFER_MAX_NS : span_ns * 2;
}

bool sched_defer_preempted_often(uint64_t run_preempts, uint64_t ticks)
{
    return run_preempts > 2 && run_preempts * DEFER_TICKS_PER_PREEMPT > ticks;
}

/* ---- deferrals ---- */

static void defer_leave(struct sched *s);

void sched_defer_arm(struct sched *s)
{
    s->defer_deadline_ns = sched_defer_deadline_ns(s->next_ns, s->eff_interval_ns,
                                                   s->defer_span_ns, s->defer_batch);
    /* Preemptions are counted batch by batch (on_defer_io). */
    s->defer_begin_ns = s->next_ns - s->eff_interval_ns;
    s->defer_run_preempts = 0;
    int r = sched_arm_at(s, s->defer_deadline_ns);
    s->own_armed = r == 0;
    /* Without its timer the batch would end only when something read the buffer: no batch
     * then (the ticks due so far are taken), and no tick, as with a schedule on time. */
    if (r < 0)
        defer_leave(s);
    sched_timer_result(s, r);
}

static void on_defer_io(struct ev_loop *loop, ev_io *w, int revents);

/* No deferral before a while from now: doubled while deferrals keep ending before they
 * took DEFER_PAYS_TICKS ticks, or (again) while they keep finding a running thread waiting
 * for a CPU, however long they ran: a busy machine's, whose ticks are exact on time only. */
static void defer_hold(struct sched *s, uint64_t now, bool again)
{
    s->defer_hold_ns = sched_defer_hold_ns(s->defer_hold_ns, again, s->defer_run_ticks);
    s->defer_hold_until_ns = now + s->defer_hold_ns;
}

/* After a tick on time (at tick_ns): defer the next ones if the target allows it. */
void sched_defer_try(struct sched *s, uint64_t tick_ns)
{
    if (defer_off || s->mode != SCHED_ALARM || !s->running || s->deferred ||
        s->t->state != T_ATTACHED || tick_ns < s->defer_hold_until_ns)
        return;
    uint64_t b = sched_defer_batch_max(s->eff_interval_ns);
    unsigned batch;
    int fd;
    uint64_t refused = s->t->stats.deferred.refused;
    if (b < 2 || !sampler_defer_begin(s->t, tick_ns, (unsigned)b, &batch, &fd)) {
        /* Begun and undone (a watch or a ring refused): not again at the next tick. */
        if (s->t->stats.deferred.refused != refused)
            defer_hold(s, tick_ns, false);
        return;
    }
    s->deferred = true;
    s->defer_batch = batch;
    if (!s->defer_span_ns)
        s->defer_span_ns = DEFER_MAX_NS;
    s->defer_run_ticks = 0;
    s->defer_count.batches++;
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
        sched_disarm(s);
        s->own_armed = false;
    }
}

/* Take s's deferred ticks due before now and before the first change of a thread; then
 * defer on (DEFER_KEEP, if nothing changed) or take ticks on time again: the one due at
 * once (DEFER_LEAVE_TICK), or from the loop (DEFER_LEAVE_LATER: inside a hook of target.c
 * nothing may stop a thread). */
void sched_defer_take(struct sched *s, uint64_t now, enum defer_how how)
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
        s->due_ns = alarm_due(s->next_ns, iv);
    }
    bool starved = false;
    if (n) {
        starved = sampler_defer_ticks(t, ticks, n);
        uint64_t c = thread_cpu_ns() - c0;
        s->last_tick_ns = ticks[n - 1];
        s->defer_count.ticks += n;
        s->defer_run_ticks += n;
        s->ticks += n;
        s->cost_ns += c;
        s->win_cost_ns += c;
        s->win_ticks += n;
    }
    /* A change seen more than an interval after it (a running thread's, at the batch's
     * end) cost the ticks since. */
    if (changed != UINT64_MAX && changed + s->eff_interval_ns < now) {
        s->defer_span_ns = sched_defer_span_halved(s->defer_span_ns);
    }
    /* A running thread that waited for a CPU (defer.c): on time again, and the next
     * batch, after a longer hold, shorter (its waiting ticks have the clock's older
     * samples). */
    if (starved) {
        s->defer_count.left_for_threads_without_a_cpu++;
        if (how == DEFER_KEEP)
            how = DEFER_LEAVE_PREEMPTED;
        s->defer_span_ns = sched_defer_span_halved(s->defer_span_ns);
    }
    if (how == DEFER_KEEP && !any && s->due_ns >= now && s->running &&
        t->state == T_ATTACHED && sampler_defer_resize(t, s->defer_batch)) {
        sched_defer_arm(s);
        return;
    }
    defer_leave(s);
    /* (Left for a transaction's boundary, say: not at once again either.) */
    if (any || starved || how == DEFER_LEAVE_LATER || how == DEFER_LEAVE_PREEMPTED) {
        s->defer_count.cut_short_by_a_change += any;
        s->defer_count.left_for_preemptions += !any && !starved && how == DEFER_LEAVE_PREEMPTED;
        defer_hold(s, now, starved);
    }
    if (!s->running)
        return;
    if ((how == DEFER_LEAVE_TICK || how == DEFER_LEAVE_PREEMPTED) && s->due_ns <= now) {
        sched_alarm_tick(s, now, s->due_ns, NULL);
    } else {
        sched_timer_result(s, sched_alarm_queue(s));
    }
}

/* A blocked thread of a deferred target was switched in, or a running one out. */
static void on_defer_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct sched *s = w->data;
    s->defer_count.wakeups++;
    bool any = true;
    uint64_t now = now_ns();
    if (s->t->state == T_ATTACHED)
        sampler_defer_changed(s->t, &any);
    /* (A watch whose thread exited polls hung up, at once and for good: no record says so
     * where the thread's exit is not reported yet, a leader's that called pthread_exit.) */
    if (any || sampler_defer_hung_up(s->t)) {
        sched_defer_take(s, now, DEFER_LEAVE_TICK);
        return;
    }
    /* Preempted: still running where its clock has it. */
    s->defer_count.wakeups_for_a_preemption++;
    s->defer_run_preempts++;
    uint64_t ticks = (now - s->defer_begin_ns) / s->eff_interval_ns;
    if (sched_defer_preempted_often(s->defer_run_preempts, ticks))
        sched_defer_take(s, now, DEFER_LEAVE_PREEMPTED);
}

void sched_catch_up(struct sched *s, bool leave)
{
    if (s && s->deferred)
        sched_defer_take(s, now_ns(), leave ? DEFER_LEAVE_LATER : DEFER_KEEP);
}

void sched_defer_deadline(struct sched *s, uint64_t now)
{
    lateness_record(&s->lateness, s->defer_deadline_ns, now);
    s->defer_count.wakeups++;
    sched_defer_take(s, now, DEFER_KEEP);
    /* (Ran to its end, nothing changed: a longer span from the next batch on.) */
    if (s->deferred)
        s->defer_span_ns = sched_defer_span_doubled(s->defer_span_ns);
}

void sched_defer_describe(const struct sched *s, cJSON *o)
{
    cJSON *d = cJSON_AddObjectToObject(o, "deferred");
    cJSON_AddBoolToObject(d, "now", s->deferred);
    cJSON_AddNumberToObject(d, "batch_ticks", s->deferred ? s->defer_batch : 0);
#define ADD_COUNT(name) cJSON_AddNumberToObject(d, #name, (double)s->defer_count.name);
    SCHED_DEFER_COUNTS(ADD_COUNT)
#undef ADD_COUNT
    /* The target's counts of them, each under its name (target.h). */
#define ADD_TARGET_COUNT(T, name)                                                                  \
    cJSON_AddNumberToObject(d, #name, (double)s->t->stats.deferred.name);
    TARGET_STATS_DEFERRED(ADD_TARGET_COUNT, )
#undef ADD_TARGET_COUNT
    enum perfs_block_watch bw = perfs_block_watch();
    cJSON_AddStringToObject(d, "running_blocks_from",
                            bw == PERFS_BLOCKS_SCHED_SWITCH   ? "sched_switch"
                            : bw == PERFS_BLOCKS_SWITCHES     ? "context_switches"
                            : bw == PERFS_BLOCKS_AT_BATCH_END ? "batch_end"
                                                              : "none yet");
    cJSON_AddBoolToObject(d, "sched_switch_held", perfs_sched_switch_held());
}
