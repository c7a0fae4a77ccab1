/* budget.c: the CPU budget: every target's sampling cost measured, and the rates lowered,
 * fairly, when sampling them all would cost more than the budget (see schedule.h). */
#include "budget.h"

#include <math.h>
#include <stdlib.h>

#include "sched_internal.h"
#include "target.h"
#include "util.h"

/* ... or every second while it is calm: no target throttled, none late, no timer to retry,
 * and the loop under half its budget (each look is a wake-up of profd: 17-34 us here). */
#define BUDGET_CALM_S 1.0

static struct {
    struct ev_loop *loop;
    double max_cpu_pct;
    ev_timer budget_w;
    uint64_t win_loop_cpu_ns; /* the loop thread's CPU time when the window began */
    double overhead;          /* loop CPU / CPU measured in ticks (stops handled later...) */
    double avail;             /* CPU ns per second to share out */
    double mult;              /* the demands' error, measured: see on_budget */
    uint64_t win_start_ns;    /* when the loop's window began */
    struct budget_state st;   /* any_throttled: in the window that ends; over_before: the
                                 demands exceeded the budget at the last look, none
                                 throttled: the next look over it throttles */
} g = {.overhead = 1.0, .mult = 1.0};

/* When the budget looks next: BUDGET_PERIOD_S after something changed (a schedule started
 * or changed its rate, a new budget, a timer to retry), or BUDGET_CALM_S. */
static void budget_next(double secs)
{
    if (g.loop && g.budget_w.repeat != secs) {
        g.budget_w.repeat = secs;
        ev_timer_again(g.loop, &g.budget_w);
    }
}

void budget_look_soon(void)
{
    budget_next(BUDGET_PERIOD_S);
}

static void on_budget(struct ev_loop *loop, ev_timer *w, int revents);

void sched_chores_early(void)
{
    if (g.loop)
        sched_timer_run_early(g.loop, &g.budget_w, on_budget);
}

double sched_budget_pct(void)
{
    return g.max_cpu_pct;
}

void sched_set_budget_pct(double pct)
{
    g.max_cpu_pct = pct;
    g.mult = 1.0; /* measured against the old budget */
    g.st.any_throttled = false;
    budget_next(BUDGET_PERIOD_S);
}

double budget_correction(void)
{
    return g.mult;
}

/* ---- the arithmetic ---- */

double budget_overhead(double overhead, uint64_t loop_ns, uint64_t ticks_ns)
{
    /* Sampling is nearly all the loop does, so the whole loop is held to the budget: each
     * target's demand is scaled by the loop's CPU over the ticks' own. */
    if (ticks_ns > 1000000) {
        double f = (double)loop_ns / (double)ticks_ns;
        f = f < 1.0 ? 1.0 : f > 4.0 ? 4.0 : f;
        overhead = 0.5 * overhead + 0.5 * f;
    }
    return overhead;
}

double budget_demand(const struct budget_window *w, double overhead, double *cost_per_tick)
{
    /* Demand: CPU per tick (all the loop's costs included) times the ticks it would
     * take unthrottled and on time: the wall-clock modes' rate, or for cputime the
     * intervals its threads used (taken or missed) at scale 1. */
    if (w->ticks) {
        double per_tick = (double)w->cost_ns * overhead / (double)w->ticks;
        *cost_per_tick = *cost_per_tick > 0 ? 0.5 * *cost_per_tick + 0.5 * per_tick : per_tick;
    }
    if (w->cputime) {
        /* Its work (the ticks, and the timer or poll source's reads of every thread)
         * grows with the rate: what it cost, at scale 1, with the intervals missed. */
        double at_scale = (double)w->cost_ns * overhead / w->secs;
        if (w->ticks && w->missed)
            at_scale += *cost_per_tick * (double)w->missed / w->secs;
        return at_scale / w->scale;
    }
    return *cost_per_tick * (double)w->hz;
}

double budget_correct(double mult, double avail, uint64_t loop_ns, double win_s,
                      bool any_throttled, bool late)
{
    /* The demands are estimates, too high for a throttled target: the shares are corrected
     * by what profd really used. (daemon/DESIGN.md, "The budget's correction".) */
    if (win_s > 0 && any_throttled) {
        double used = (double)loop_ns / win_s;
        double f = used > 0 ? avail / used : 1.25;
        f = f > 1.25 ? 1.25 : f < 0.8 ? 0.8 : f;
        if (f > 1.0 && late)
            f = 1.0;
        mult *= f;
        mult = mult > 4.0 ? 4.0 : mult < 0.25 ? 0.25 : mult;
    } else if (!any_throttled) {
        mult = 1.0 + (mult - 1.0) * 0.5;
    }
    return mult;
}

static int by_demand(const void *a, const void *b)
{
    double x = ((const struct budget_share *)a)->demand;
    double y = ((const struct budget_share *)b)->demand;
    return x < y ? -1 : x > y;
}

/* The budget divided max-min fairly: every target gets up to an equal share, and what the
 * cheaper ones leave is shared by the others. A target whose share is below its demand is
 * slowed down in proportion. */
void budget_divide(struct budget_share *v, size_t n, double avail, struct budget_state *st)
{
    /* A quarter-second window can see the demands over the budget once, none throttled
     * (a second's chores in it, a status request: 100 idle services at 101 Hz with the
     * loop at 19% of a CPU still throttled 20 of them for a moment): rates are lowered
     * only when the next look finds them over it too (over the budget for at most one
     * period more). */
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].demand;
    bool over = total > avail;
    bool hold = over && !st->any_throttled && !st->over_before;
    st->over_before = over && !st->any_throttled;
    st->any_throttled = false;
    sort_array(v, n, sizeof(*v), by_demand);
    double left = hold ? total : avail;
    for (size_t i = 0; i < n; i++) {
        struct budget_share *s = &v[i];
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
            s->scale = scale;
        st->any_throttled |= s->scale < 1.0;
    }
}

/* ---- the look ---- */

/* s's window ends now: its rates over it, its demand (budget_demand), a new window. Returns
 * the ticks it missed in it. */
static uint64_t window_close(struct sched *s, uint64_t now)
{
    struct target *t = s->t;
    double secs = (double)(now - s->win_start_ns) / 1e9;
    if (secs <= 0)
        secs = BUDGET_PERIOD_S;
    sched_fold_lost(s);
    uint64_t missed = s->missed - s->win_missed;
    s->recent_hz = (double)s->win_ticks / secs;
    /* Samples, counted here: a stop can complete after its tick. */
    s->recent_sps = (double)(t->stats.samples - s->win_samples) / secs;
    struct budget_window w = {.cost_ns = s->win_cost_ns, .ticks = s->win_ticks,
                              .missed = missed, .secs = secs,
                              .cputime = s->mode == SCHED_CPUTIME, .hz = s->hz,
                              .scale = s->scale};
    s->demand = budget_demand(&w, g.overhead, &s->cost_per_tick);
    s->win_cost_ns = s->win_ticks = 0;
    s->win_samples = t->stats.samples;
    s->win_missed = s->missed;
    s->win_start_ns = now;
    return missed;
}

/* The targets' new scales (v sorted by demand, ss theirs by v's who), against the budget. */
static void divide(struct budget_share *v, struct sched **ss, size_t n, uint64_t loop_win,
                   double win_s, bool late, uint64_t now)
{
    if (g.max_cpu_pct <= 0) {
        for (size_t i = 0; i < n; i++) /* no budget (any more): every rate as asked */
            if (ss[i]->scale != 1.0)
                sched_set_scale(ss[i], 1.0, now);
        return;
    }
    /* Only the budget: when the machine cannot give the loop even that much (every
     * CPU busy), ticks come late or are missed, at random across targets; that shows
     * in each one's missed ticks and achieved rate. (Lowering the budget to what the
     * loop got does not help: on a saturated machine the loop is late because it waits
     * for a CPU, however little it asks; it only spirals the rates down.) */
    g.avail = g.max_cpu_pct / 100.0 * 1e9;
    g.mult = budget_correct(g.mult, g.avail, loop_win, win_s, g.st.any_throttled, late);
    budget_divide(v, n, g.avail * g.mult, &g.st);
    for (size_t i = 0; i < n; i++) {
        struct sched *s = ss[v[i].who];
        if (v[i].scale != s->scale)
            sched_set_scale(s, v[i].scale, now);
    }
}

/* Every BUDGET_PERIOD_S (BUDGET_CALM_S while calm): measure what each target's sampling cost
 * in the window, estimate what it would cost unthrottled (window_close), and divide the
 * budget (budget_divide). */
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
    LIST_FOREACH(s, &sched_live, link)
        if (s->deferred)
            sched_defer_take(s, now, DEFER_KEEP);
    uint64_t loop_cpu = thread_cpu_ns(), loop_win = loop_cpu - g.win_loop_cpu_ns;
    g.win_loop_cpu_ns = loop_cpu;
    double win_s = g.win_start_ns ? (double)(now - g.win_start_ns) / 1e9 : 0;
    g.win_start_ns = now;
    size_t n = 0;
    uint64_t ticks_cpu = 0;
    LIST_FOREACH(s, &sched_live, link) {
        if (s->t->state != T_ATTACHED)
            continue;
        n++;
        ticks_cpu += s->win_cost_ns;
        if (s->timer_err)
            sched_timer_result(s, sched_rearm(s, now));
    }
    if (!n) {
        g.mult = 1.0;
        g.st.any_throttled = false;
        budget_next(BUDGET_CALM_S);
        return;
    }
    g.overhead = budget_overhead(g.overhead, loop_win, ticks_cpu);
    struct budget_share *v = xmalloc(n * sizeof(*v));
    struct sched **ss = xmalloc(n * sizeof(*ss));
    size_t k = 0;
    bool late = false; /* some target missed ticks: the loop lacked CPU, whatever it used */
    bool retry = false;
    LIST_FOREACH(s, &sched_live, link) {
        if (s->t->state != T_ATTACHED)
            continue;
        retry |= s->timer_err != 0;
        late |= window_close(s, now) > 0;
        v[k] = (struct budget_share){.demand = s->demand, .hz = s->hz, .scale = s->scale,
                                     .who = k};
        ss[k++] = s;
        if (s->mode == SCHED_CPUTIME && s->source == CPU_SRC_PERF)
            cputime_shrink_idle_rings(s, now);
    }
    divide(v, ss, n, loop_win, win_s, late, now);
    free(v);
    free(ss);
    bool calm = !g.st.any_throttled && !late && !retry &&
                (g.max_cpu_pct <= 0 ||
                 (win_s > 0 && (double)loop_win / win_s < 0.5 * g.max_cpu_pct / 100.0 * 1e9));
    budget_next(calm ? BUDGET_CALM_S : BUDGET_PERIOD_S);
}

void budget_init(double max_cpu_pct)
{
    g.max_cpu_pct = max_cpu_pct;
    g.win_loop_cpu_ns = thread_cpu_ns();
}

void budget_start(struct ev_loop *loop)
{
    g.loop = loop;
    ev_timer_init(&g.budget_w, on_budget, BUDGET_PERIOD_S, BUDGET_PERIOD_S);
    ev_timer_start(loop, &g.budget_w);
}

void budget_finish(void)
{
    if (g.loop)
        ev_timer_stop(g.loop, &g.budget_w);
}
