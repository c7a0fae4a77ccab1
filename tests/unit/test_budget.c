/* test_budget.c: the CPU budget's arithmetic (daemon/budget.c), without a daemon: the
 * division (under budget, the one-look hold, cut alike, max-min shares, the 1 Hz floor,
 * targets that cost nothing, the 5% dead band, one target, many), the demands' correction,
 * the loop's overhead factor and a target's demand. */
#include "budget.h"
#include "check.h"

#include <math.h>
#include <stdbool.h>

/* a within a billionth of b (relative; absolute below 1). */
static bool near(double a, double b)
{
    double m = fabs(b) > 1 ? fabs(b) : 1;
    return fabs(a - b) < 1e-9 * m;
}
#define NEAR(a, b) near((a), (b))

/* n targets of the given demands, rates and scales, in v; who is their index. */
static void fill(struct budget_share *v, size_t n, const double *demand, const unsigned *hz,
                 const double *scale)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (struct budget_share){.demand = demand[i], .hz = hz ? hz[i] : 1000,
                                     .scale = scale ? scale[i] : 1.0, .who = i};
}

/* The scale v gives the target the caller knew as who. */
static double scale_of(const struct budget_share *v, size_t n, size_t who)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].who == who)
            return v[i].scale;
    return -1;
}

/* Demands within the budget: every rate as asked, nothing throttled or held over. */
static void test_under_budget_keeps_rates(void)
{
    struct budget_share v[3];
    fill(v, 3, (double[]){100, 200, 300}, NULL, NULL);
    struct budget_state st = {0};
    budget_divide(v, 3, 1000, &st);
    for (size_t i = 0; i < 3; i++)
        CHECK(v[i].scale == 1.0);
    CHECK(!st.any_throttled);
    CHECK(!st.over_before);
    /* Exactly at the budget is not over it. */
    fill(v, 3, (double[]){100, 200, 300}, NULL, NULL);
    budget_divide(v, 3, 600, &st);
    CHECK(!st.over_before);
    CHECK(scale_of(v, 3, 2) == 1.0);
    /* Throttled targets come back to 1 once the budget covers them. */
    fill(v, 2, (double[]){100, 200}, NULL, (double[]){0.5, 0.25});
    st = (struct budget_state){.any_throttled = true};
    budget_divide(v, 2, 1000, &st);
    CHECK(scale_of(v, 2, 0) == 1.0);
    CHECK(scale_of(v, 2, 1) == 1.0);
    CHECK(!st.any_throttled);
}

/* Over the budget at one look, none throttled before: the rates stay (the hold) and the
 * next look over it cuts them. */
static void test_over_budget_once_is_held(void)
{
    struct budget_share v[2];
    struct budget_state st = {0};
    fill(v, 2, (double[]){300, 300}, NULL, NULL);
    budget_divide(v, 2, 300, &st);
    CHECK(v[0].scale == 1.0 && v[1].scale == 1.0);
    CHECK(st.over_before);
    CHECK(!st.any_throttled);
    fill(v, 2, (double[]){300, 300}, NULL, NULL);
    budget_divide(v, 2, 300, &st);
    CHECK(NEAR(v[0].scale, 0.5) && NEAR(v[1].scale, 0.5));
    CHECK(st.any_throttled);
    CHECK(st.over_before); /* (over, none throttled before this look) */
    /* Over again, throttled since: over_before no longer. */
    fill(v, 2, (double[]){300, 300}, NULL, (double[]){0.5, 0.5});
    budget_divide(v, 2, 300, &st);
    CHECK(!st.over_before);
    CHECK(v[0].scale == 0.5 && v[1].scale == 0.5);
    /* Already throttled: over the budget cuts at once. */
    st = (struct budget_state){.any_throttled = true};
    fill(v, 2, (double[]){300, 300}, NULL, NULL);
    budget_divide(v, 2, 300, &st);
    CHECK(NEAR(v[0].scale, 0.5) && NEAR(v[1].scale, 0.5));
    /* A look under the budget forgets a look over it. */
    st = (struct budget_state){.over_before = true};
    fill(v, 2, (double[]){100, 100}, NULL, NULL);
    budget_divide(v, 2, 300, &st);
    CHECK(!st.over_before);
    fill(v, 2, (double[]){300, 300}, NULL, NULL);
    budget_divide(v, 2, 300, &st);
    CHECK(v[0].scale == 1.0); /* held again */
}

/* Equal demands over the budget are cut alike, to what the budget holds. */
static void test_cut_alike(void)
{
    struct budget_share v[3];
    struct budget_state st = {.over_before = true};
    fill(v, 3, (double[]){100, 100, 100}, NULL, NULL);
    budget_divide(v, 3, 150, &st);
    double used = 0;
    for (size_t i = 0; i < 3; i++) {
        CHECK(NEAR(v[i].scale, 0.5));
        used += v[i].scale * v[i].demand;
    }
    CHECK(NEAR(used, 150));
    CHECK(st.any_throttled);
}

/* Max-min fair: each gets up to an equal share; what the cheaper ones leave goes to the
 * others; v comes back sorted by demand, who carried along. */
static void test_max_min_shares(void)
{
    struct budget_share v[3];
    struct budget_state st = {.any_throttled = true};
    fill(v, 3, (double[]){100, 10, 400}, NULL, NULL);
    budget_divide(v, 3, 210, &st);
    CHECK(v[0].demand == 10 && v[1].demand == 100 && v[2].demand == 400);
    CHECK_INT(v[0].who, 1);
    CHECK_INT(v[1].who, 0);
    CHECK_INT(v[2].who, 2);
    /* 210 / 3 = 70 each: 10 takes 10; (200) / 2 = 100: 100 takes 100; 400 gets the 100 left. */
    CHECK(scale_of(v, 3, 1) == 1.0);
    CHECK(scale_of(v, 3, 0) == 1.0);
    CHECK(NEAR(scale_of(v, 3, 2), 0.25));
    /* Two over their equal share: both cut to it, the small one whole. */
    fill(v, 3, (double[]){50, 300, 600}, NULL, NULL);
    st = (struct budget_state){.any_throttled = true};
    budget_divide(v, 3, 350, &st);
    CHECK(scale_of(v, 3, 0) == 1.0);
    CHECK(NEAR(scale_of(v, 3, 1), 150.0 / 300));
    CHECK(NEAR(scale_of(v, 3, 2), 150.0 / 600));
}

/* A rate is never cut below 1 Hz (scale 1/hz); a schedule with no rate (hz 0) not at all. */
static void test_one_hz_floor(void)
{
    struct budget_share v[2];
    struct budget_state st = {.any_throttled = true};
    fill(v, 2, (double[]){1000, 1000}, (unsigned[]){10, 0}, NULL);
    budget_divide(v, 2, 20, &st);
    CHECK(NEAR(scale_of(v, 2, 0), 0.1)); /* 10/1000 = 0.01, floored at 1/10 */
    CHECK(scale_of(v, 2, 1) == 1.0);
    /* Above the floor: the share, not the floor. */
    fill(v, 1, (double[]){1000}, (unsigned[]){10}, NULL);
    budget_divide(v, 1, 500, &st);
    CHECK(NEAR(v[0].scale, 0.5));
}

/* A target that costs nothing keeps its rate and leaves its share to the others. */
static void test_costs_nothing(void)
{
    struct budget_share v[2];
    struct budget_state st = {.any_throttled = true};
    fill(v, 2, (double[]){0, 200}, NULL, (double[]){0.5, 1.0});
    budget_divide(v, 2, 100, &st);
    CHECK(scale_of(v, 2, 0) == 1.0);
    CHECK(NEAR(scale_of(v, 2, 1), 0.5));
    /* All of them: nothing throttled, whatever the budget. */
    fill(v, 2, (double[]){0, 0}, NULL, NULL);
    st = (struct budget_state){.any_throttled = true};
    budget_divide(v, 2, 0, &st);
    CHECK(v[0].scale == 1.0 && v[1].scale == 1.0);
    CHECK(!st.any_throttled);
}

/* Changes of 5% or less of the scale are left alone, except back to 1. */
static void test_dead_band(void)
{
    struct budget_share v[1];
    struct budget_state st = {.any_throttled = true};
    fill(v, 1, (double[]){1000}, NULL, (double[]){0.5});
    budget_divide(v, 1, 520, &st); /* 0.52: 4% */
    CHECK(v[0].scale == 0.5);
    CHECK(st.any_throttled);
    fill(v, 1, (double[]){1000}, NULL, (double[]){0.5});
    budget_divide(v, 1, 480, &st); /* 0.48: 4% */
    CHECK(v[0].scale == 0.5);
    fill(v, 1, (double[]){1000}, NULL, (double[]){0.5});
    budget_divide(v, 1, 530, &st); /* 0.53: 6% */
    CHECK(NEAR(v[0].scale, 0.53));
    fill(v, 1, (double[]){1000}, NULL, (double[]){0.5});
    budget_divide(v, 1, 470, &st);
    CHECK(NEAR(v[0].scale, 0.47));
    /* 0.98 -> 1: within 5%, but back to the rate asked for. */
    fill(v, 1, (double[]){1000}, NULL, (double[]){0.98});
    budget_divide(v, 1, 2000, &st);
    CHECK(v[0].scale == 1.0);
    CHECK(!st.any_throttled);
}

/* One target gets the whole budget; many share it. */
static void test_one_and_many(void)
{
    struct budget_share one[1];
    struct budget_state st = {.any_throttled = true};
    fill(one, 1, (double[]){400}, NULL, NULL);
    budget_divide(one, 1, 100, &st);
    CHECK(NEAR(one[0].scale, 0.25));
    enum { N = 200 };
    struct budget_share v[N];
    double d[N];
    for (size_t i = 0; i < N; i++)
        d[i] = i < 100 ? 1 : 100; /* 100 cheap, 100 dear */
    fill(v, N, d, NULL, NULL);
    st = (struct budget_state){.any_throttled = true};
    /* 100 + 100 * 40: the cheap ones whole, the dear ones at 40 each. */
    budget_divide(v, N, 100 + 100 * 40, &st);
    for (size_t i = 0; i < N; i++) {
        double want = i < 100 ? 1.0 : 0.4;
        if (!NEAR(scale_of(v, N, i), want)) {
            CHECK(NEAR(scale_of(v, N, i), want));
            break;
        }
    }
    for (size_t i = 1; i < N; i++)
        CHECK(v[i - 1].demand <= v[i].demand);
    CHECK(st.any_throttled);
    budget_divide(v, 0, 100, &st); /* none: nothing to do, nothing throttled */
    CHECK(!st.any_throttled);
}

/* The correction: while some target is throttled, the budget over what the loop used,
 * within [0.8, 1.25] per look, not upwards while ticks are missed, mult within [0.25, 4];
 * with none throttled it halves its way back to 1. */
static void test_correction(void)
{
    /* Used 50 ns/s of 100: x1.25 at most. */
    CHECK(NEAR(budget_correct(1.0, 100, 50, 1.0, true, false), 1.25));
    /* Used 110 of 100: x100/110. */
    CHECK(NEAR(budget_correct(1.0, 100, 110, 1.0, true, false), 100.0 / 110));
    /* Used 200 of 100: x0.8 at most. */
    CHECK(NEAR(budget_correct(1.0, 100, 200, 1.0, true, false), 0.8));
    /* The window's length divides what it used: 100 in 2 s is 50 per second. */
    CHECK(NEAR(budget_correct(1.0, 100, 100, 2.0, true, false), 1.25));
    /* Late: not upwards; downwards still. */
    CHECK(NEAR(budget_correct(1.0, 100, 50, 1.0, true, true), 1.0));
    CHECK(NEAR(budget_correct(1.0, 100, 200, 1.0, true, true), 0.8));
    /* Nothing used: as far up as it goes. */
    CHECK(NEAR(budget_correct(2.0, 100, 0, 1.0, true, false), 2.5));
    /* Bounds of mult. */
    CHECK(NEAR(budget_correct(3.9, 100, 50, 1.0, true, false), 4.0));
    CHECK(NEAR(budget_correct(0.26, 100, 200, 1.0, true, false), 0.25));
    /* None throttled: back towards 1 by half. */
    CHECK(NEAR(budget_correct(3.0, 100, 50, 1.0, false, false), 2.0));
    CHECK(NEAR(budget_correct(0.5, 100, 50, 1.0, false, true), 0.75));
    /* Throttled, no window yet: unchanged. */
    CHECK(budget_correct(3.0, 100, 50, 0, true, false) == 3.0);
}

/* The loop's overhead: its CPU over the ticks', within [1, 4], averaged with the last;
 * unchanged when the ticks used 1 ms or less. */
static void test_overhead(void)
{
    CHECK(NEAR(budget_overhead(1.0, 3000000, 2000000), 1.25));  /* f 1.5 */
    CHECK(NEAR(budget_overhead(1.0, 1000000, 2000000), 1.0));   /* f 0.5 -> 1 */
    CHECK(NEAR(budget_overhead(1.0, 20000000, 2000000), 2.5));  /* f 10 -> 4 */
    CHECK(NEAR(budget_overhead(2.0, 3000000, 2000000), 1.75));
    CHECK(budget_overhead(2.0, 3000000, 1000000) == 2.0);       /* 1 ms: too little */
    CHECK(NEAR(budget_overhead(2.0, 3000000, 1000001), 0.5 * 2 + 0.5 * 3000000.0 / 1000001));
}

/* A target's demand: the wall-clock modes' smoothed cost per tick times their rate;
 * cputime's cost over the window at scale 1, with the intervals it missed. */
static void test_demand(void)
{
    double cpt = 0;
    struct budget_window w = {.cost_ns = 1000, .ticks = 10, .secs = 0.25, .hz = 100,
                              .scale = 0.5};
    CHECK(NEAR(budget_demand(&w, 2.0, &cpt), 200.0 * 100)); /* 1000 * 2 / 10 per tick */
    CHECK(NEAR(cpt, 200));
    w.cost_ns = 2000; /* 400 a tick: averaged with 200 */
    CHECK(NEAR(budget_demand(&w, 2.0, &cpt), 300.0 * 100));
    CHECK(NEAR(cpt, 300));
    w.ticks = 0; /* no ticks: the cost per tick stays */
    CHECK(NEAR(budget_demand(&w, 2.0, &cpt), 300.0 * 100));
    CHECK(NEAR(cpt, 300));
    /* cputime: 1000 ns * 2 over 0.25 s = 8000 ns/s at scale 0.5: 16000 at 1. */
    cpt = 0;
    w = (struct budget_window){.cost_ns = 1000, .ticks = 10, .secs = 0.25, .cputime = true,
                               .hz = 100, .scale = 0.5};
    CHECK(NEAR(budget_demand(&w, 2.0, &cpt), 16000));
    /* ... and 5 intervals missed at 200 a tick: + 1000 / 0.25 before the scale. */
    cpt = 0;
    w.missed = 5;
    CHECK(NEAR(budget_demand(&w, 2.0, &cpt), (8000 + 4000) / 0.5));
    /* Missed intervals without a tick in the window are not priced. */
    cpt = 200;
    w.ticks = 0;
    CHECK(NEAR(budget_demand(&w, 2.0, &cpt), 16000));
}

int main(void)
{
    RUN(test_under_budget_keeps_rates);
    RUN(test_over_budget_once_is_held);
    RUN(test_cut_alike);
    RUN(test_max_min_shares);
    RUN(test_one_hz_floor);
    RUN(test_costs_nothing);
    RUN(test_dead_band);
    RUN(test_one_and_many);
    RUN(test_correction);
    RUN(test_overhead);
    RUN(test_demand);
    return check_status("test_budget");
}
