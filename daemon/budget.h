/* budget.h: the CPU budget: how often it looks (budget.c's on_budget), and its arithmetic as
 * pure functions of plain numbers (tests/unit/test_budget.c): each target's demand, the
 * correction of the demands by what profd used, and the division of the budget. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;

/* How often the budget is re-divided. */
#define BUDGET_PERIOD_S 0.25

/* Set the budget (percent of one CPU, 0: none) and begin its first window (sched_global_init),
 * then start its timer on loop; stop it. */
void budget_init(double max_cpu_pct);
void budget_start(struct ev_loop *loop);
void budget_finish(void);
/* Something changed (a schedule started or changed its rate, a timer to retry): the budget
 * looks again BUDGET_PERIOD_S from now. */
void budget_look_soon(void);
/* The demands' correction now (status: budget_correction). */
double budget_correction(void);

/* ---- the arithmetic ---- */

/* The loop's CPU over the ticks' own (what the ticks do not see: stops that arrive after
 * their tick, the loop itself), smoothed: overhead's next value, from the window's CPU of the
 * loop (loop_ns) and of the ticks (ticks_ns). Unchanged when the ticks used 1 ms or less. */
double budget_overhead(double overhead, uint64_t loop_ns, uint64_t ticks_ns);

/* A target's budget window. */
struct budget_window {
    uint64_t cost_ns; /* profd's CPU spent on its ticks */
    uint64_t ticks;   /* its ticks */
    uint64_t missed;  /* its ticks (cputime: intervals of CPU) missed */
    double secs;      /* the window's length */
    bool cputime;     /* a cputime schedule (its work grows with its threads' CPU) */
    unsigned hz;      /* the rate asked for */
    double scale;     /* the budget's factor on it in the window */
};
/* What the target's sampling would cost (CPU ns per second) unthrottled and on time, the
 * loop's overhead included; *cost_per_tick (smoothed CPU ns per tick, 0: none yet) updated. */
double budget_demand(const struct budget_window *w, double overhead, double *cost_per_tick);

/* The demands' correction (mult) for the next division, from what profd used (loop_ns of the
 * loop's CPU over win_s seconds; win_s 0: no window yet) against avail (CPU ns per second),
 * whether any target was throttled in the window and whether one missed ticks (late). */
double budget_correct(double mult, double avail, uint64_t loop_ns, double win_s,
                      bool any_throttled, bool late);

/* One target's part of a division. */
struct budget_share {
    double demand; /* in: CPU ns per second at scale 1 (budget_demand) */
    unsigned hz;   /* in: the rate asked for: the scale never takes it below 1 Hz */
    double scale;  /* in: its scale now; out: the scale it gets, in (0, 1] */
    size_t who;    /* the caller's, carried along */
};
/* What the budget remembers from one division to the next. */
struct budget_state {
    bool any_throttled; /* some target's scale was below 1 after the last division */
    bool over_before;   /* the demands exceeded the budget at the last look, none throttled */
};
/* Divide avail (CPU ns per second, corrected) among the n targets of v: sorts v by demand
 * and sets each one's scale; updates st. */
void budget_divide(struct budget_share *v, size_t n, double avail, struct budget_state *st);
