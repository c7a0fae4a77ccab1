/* test_schedule_ticks.c: the schedules' tick arithmetic (daemon/sched_ticks.h), without a
 * daemon: alarm's due times in the first quarter of their interval, the [3/4, 5/4) jitter of
 * sleep's waits and cputime's thresholds, the sample instant, ticks missed, the window a
 * wake-up's tick may be taken in, a new grid after a change of rate, cputime's credit and
 * its ring's batch, and alarm's deferred batches' length, deadline, span and hold
 * (daemon/sched_defer.c). */
#include "sched_internal.h"
#include "sched_ticks.h"
#include "check.h"

#include <stdbool.h>

#define DRAWS 20000

/* The intervals tried: 999 Hz, 101 Hz, 1 Hz, and small ones where rounding shows. */
static const uint64_t ivs[] = {NS_PER_SEC / 999, NS_PER_SEC / 101, NS_PER_SEC, 8, 5};

/* Each draw in [lo, hi); over DRAWS of them, some in the lowest and some in the highest
 * tenth of that range (the whole range is used, not a part of it). */
static void check_spread(uint64_t (*draw)(uint64_t a, uint64_t iv), uint64_t a, uint64_t iv,
                         uint64_t lo, uint64_t hi)
{
    uint64_t min = UINT64_MAX, max = 0;
    for (int i = 0; i < DRAWS; i++) {
        uint64_t x = draw(a, iv);
        min = x < min ? x : min;
        max = x > max ? x : max;
    }
    CHECK(min >= lo);
    CHECK(max < hi);
    uint64_t tenth = (hi - lo) / 10;
    CHECK(min <= lo + tenth);
    CHECK(max + 1 >= hi - tenth);
}

static uint64_t draw_jittered(uint64_t a, uint64_t iv)
{
    (void)a;
    return jittered(iv);
}

static uint64_t draw_alarm_due(uint64_t next, uint64_t iv)
{
    return alarm_due(next, iv);
}

static uint64_t draw_sample_instant(uint64_t due, uint64_t span)
{
    return sample_instant(due, span);
}

/* sleep's waits and cputime's thresholds: anywhere in [3/4, 5/4) of the interval, an
 * interval on average. */
static void test_jittered_bounds(void)
{
    for (size_t k = 0; k < sizeof(ivs) / sizeof(ivs[0]); k++) {
        uint64_t iv = ivs[k];
        check_spread(draw_jittered, 0, iv, iv - iv / 4, iv - iv / 4 + iv / 2);
    }
    uint64_t iv = NS_PER_SEC / 101;
    double sum = 0;
    for (int i = 0; i < DRAWS; i++)
        sum += (double)jittered(iv);
    double mean = sum / DRAWS;
    CHECK(mean > 0.99 * (double)iv && mean < 1.01 * (double)iv);
}

/* alarm: a tick is due at a random point of the first quarter of its interval on the grid. */
static void test_alarm_due_first_quarter(void)
{
    uint64_t next = 5 * NS_PER_SEC;
    for (size_t k = 0; k < sizeof(ivs) / sizeof(ivs[0]); k++) {
        uint64_t iv = ivs[k];
        check_spread(draw_alarm_due, next, iv, next, next + (iv / 4 ? iv / 4 : 1));
    }
    /* An interval under 4 ns has no quarter to draw from: due at its start. */
    CHECK_U64(alarm_due(next, 3), next);
}

/* The sample instant: a random point of the span before the due time, never before 0. */
static void test_sample_instant(void)
{
    uint64_t due = 7 * NS_PER_SEC, span = NS_PER_SEC / 101;
    /* (due - span, due] */
    check_spread(draw_sample_instant, due, span, due - span + 1, due + 1);
    CHECK_U64(sample_instant(span, span), span);
    CHECK_U64(sample_instant(3, span), 3);
}

/* alarm: the ticks whose interval has passed entirely by now are missed, and the grid moves
 * to the interval now is in; a tick late within its interval misses none. */
static void test_alarm_skip_counts_missed(void)
{
    uint64_t iv = 1000, next = 10000;
    CHECK_U64(alarm_skip(10999, &next, iv), 0);
    CHECK_U64(next, 10000);
    CHECK_U64(alarm_skip(10000, &next, iv), 0);
    CHECK_U64(alarm_skip(11000, &next, iv), 1);
    CHECK_U64(next, 11000);
    next = 10000;
    CHECK_U64(alarm_skip(13500, &next, iv), 3);
    CHECK_U64(next, 13000);
    /* Now before the interval's start (a tick taken early in a wake-up): none. */
    next = 10000;
    CHECK_U64(alarm_skip(9000, &next, iv), 0);
    CHECK_U64(next, 10000);
    /* After a long stall: every interval counted once, on the same grid. */
    next = 10000;
    CHECK_U64(alarm_skip(10000 + 1000 * iv + 1, &next, iv), 1000);
    CHECK_U64(next, 10000 + 1000 * iv);
    CHECK_U64((next - 10000) % iv, 0);
}

/* alarm_run: a tick not yet due is taken in another's wake-up inside the first quarter of
 * its interval, where its due time falls, and not before it or after. */
static void test_alarm_in_window(void)
{
    uint64_t iv = 1000, next = 10000;
    CHECK(!alarm_in_window(9999, next, iv));
    CHECK(alarm_in_window(10000, next, iv));
    CHECK(alarm_in_window(10249, next, iv));
    CHECK(!alarm_in_window(10250, next, iv));
    CHECK(!alarm_in_window(10999, next, iv));
    /* Every due time alarm_due draws is inside the window. */
    for (int i = 0; i < DRAWS; i++)
        if (!alarm_in_window(alarm_due(next, iv), next, iv)) {
            CHECK(alarm_in_window(alarm_due(next, iv), next, iv));
            break;
        }
}

/* A new rate: a new grid from now, one interval on, unless the old grid's tick (or the wait
 * under way) comes sooner and has not passed. */
static void test_regrid_never_puts_off(void)
{
    uint64_t now = 50000, iv = 1000;
    CHECK_U64(regrid_next(now, iv, 50400), 50400); /* sooner: kept */
    CHECK_U64(regrid_next(now, iv, 52000), 51000); /* later: the new grid's */
    CHECK_U64(regrid_next(now, iv, 51000), 51000);
    CHECK_U64(regrid_next(now, iv, 49000), 51000); /* passed: the new grid's */
    CHECK_U64(regrid_next(now, iv, now), 51000);
    CHECK_U64(regrid_next(now, iv, 0), 51000);
}

/* cputime: a sample due per threshold of CPU (drawn in [3/4, 5/4) of the interval); what is
 * left over is credit; more than two intervals owed are counted missed. */
static void test_credit(void)
{
    const uint64_t iv = 1000;
    uint64_t missed = 0;
    struct sched_thread c = {0};
    /* The first look draws a threshold. */
    CHECK(!sched_credit(&c, iv, 10, &missed));
    CHECK(c.cpu_thresh_ns >= 750 && c.cpu_thresh_ns < 1250);
    CHECK_U64(c.cpu_credit_ns, 10);
    CHECK(!c.cpu_due);
    /* Below the threshold: credit grows, nothing due. */
    c = (struct sched_thread){.cpu_thresh_ns = 1000};
    CHECK(!sched_credit(&c, iv, 999, &missed));
    CHECK_U64(c.cpu_credit_ns, 999);
    CHECK_U64(c.cpu_thresh_ns, 1000);
    CHECK(!c.cpu_due);
    /* Reaching it: a sample due, the threshold spent, a new one drawn. */
    CHECK(sched_credit(&c, iv, 1, &missed));
    CHECK(c.cpu_due);
    CHECK_U64(c.cpu_credit_ns, 0);
    CHECK(c.cpu_thresh_ns >= 750 && c.cpu_thresh_ns < 1250);
    CHECK_U64(missed, 0);
    /* Two intervals owed beyond the sample are kept, none missed. */
    c = (struct sched_thread){.cpu_thresh_ns = 1000};
    CHECK(sched_credit(&c, iv, 3000, &missed));
    CHECK_U64(c.cpu_credit_ns, 2000);
    CHECK_U64(missed, 0);
    /* More: the whole intervals beyond two are missed, the part of one kept. */
    c = (struct sched_thread){.cpu_thresh_ns = 1000};
    CHECK(sched_credit(&c, iv, 4000, &missed));
    CHECK_U64(missed, 1);
    CHECK_U64(c.cpu_credit_ns, 2000);
    missed = 0;
    c = (struct sched_thread){.cpu_thresh_ns = 1000};
    CHECK(sched_credit(&c, iv, 5000, &missed));
    CHECK_U64(missed, 2);
    CHECK_U64(c.cpu_credit_ns, 2000);
    c = (struct sched_thread){.cpu_thresh_ns = 1000};
    CHECK(sched_credit(&c, iv, 4500, &missed));
    CHECK_U64(missed, 3); /* (added to what was missed before) */
    CHECK_U64(c.cpu_credit_ns, 2500);
    /* Credit carried over counts towards the next threshold. */
    c = (struct sched_thread){.cpu_thresh_ns = 1000, .cpu_credit_ns = 600};
    CHECK(sched_credit(&c, iv, 400, &missed));
    CHECK_U64(c.cpu_credit_ns, 0);
    /* Over many looks, one sample per interval of CPU on average. */
    c = (struct sched_thread){0};
    unsigned samples = 0;
    for (int i = 0; i < 100000; i++)
        samples += sched_credit(&c, iv, 100, &missed);
    CHECK(samples >= 9900 && samples <= 10100);
}

/* cputime's perf source: its rings are read every CPUTIME_READ_NS (500 ms) of samples,
 * between 1 and CPUTIME_BATCH_MAX (48) samples. */
static void test_cputime_batch(void)
{
    CHECK_INT(cputime_batch(20 * NS_PER_MS), 25);
    CHECK_INT(cputime_batch(500 * NS_PER_MS / 47), 47);
    CHECK_INT(cputime_batch(500 * NS_PER_MS / 48), 48);
    CHECK_INT(cputime_batch(500 * NS_PER_MS / 49), 48);
    CHECK_INT(cputime_batch(NS_PER_SEC / 101), 48);
    CHECK_INT(cputime_batch(NS_PER_MS), 48);
    CHECK_INT(cputime_batch(100 * NS_PER_MS), 5);
    CHECK_INT(cputime_batch(500 * NS_PER_MS), 1);
    CHECK_INT(cputime_batch(NS_PER_SEC), 1);
    CHECK_INT(cputime_batch(0), 48);
}

/* A deferred batch takes at most 500 ms and 64 ticks; under 2, none. */
static void test_defer_batch_max(void)
{
    CHECK_U64(sched_defer_batch_max(NS_PER_MS), 64);
    CHECK_U64(sched_defer_batch_max(10 * NS_PER_MS), 50);
    CHECK_U64(sched_defer_batch_max(NS_PER_SEC / 101), 50);
    CHECK_U64(sched_defer_batch_max(250 * NS_PER_MS), 2);
    CHECK_U64(sched_defer_batch_max(300 * NS_PER_MS), 1);
    CHECK_U64(sched_defer_batch_max(NS_PER_SEC), 0);
}

/* A batch ends where the window of its last tick ends: its span's worth of ticks (at least
 * 2, at most the batch) from the interval that starts at next. */
static void test_defer_deadline(void)
{
    uint64_t next = NS_PER_SEC, iv = 1000;
    CHECK_U64(sched_defer_deadline_ns(next, iv, 10 * iv, 64), next + 9 * iv + iv / 4);
    CHECK_U64(sched_defer_deadline_ns(next, iv, 10 * iv + 999, 64), next + 9 * iv + iv / 4);
    CHECK_U64(sched_defer_deadline_ns(next, iv, 10 * iv, 4), next + 3 * iv + iv / 4);
    CHECK_U64(sched_defer_deadline_ns(next, iv, iv / 2, 64), next + iv + iv / 4);
    CHECK_U64(sched_defer_deadline_ns(next, iv, 10 * iv, 1), next + iv + iv / 4);
    /* Every tick of the batch is due before it, none of the tick after. */
    uint64_t end = sched_defer_deadline_ns(next, iv, 5 * iv, 64);
    for (int i = 0; i < DRAWS; i++) {
        uint64_t last = alarm_due(next + 4 * iv, iv), after = alarm_due(next + 5 * iv, iv);
        if (last >= end || after < end) {
            CHECK(last < end && after >= end);
            break;
        }
    }
}

/* The hold after a deferral cut short: 100 ms at first, doubled while they do not pay (under
 * 16 ticks) or keep finding a thread waiting for a CPU, halved by one that paid (not under
 * 100 ms), 10 s at most. */
static void test_defer_hold(void)
{
    const uint64_t ms = NS_PER_MS;
    CHECK_U64(sched_defer_hold_ns(0, false, 100), 100 * ms);
    CHECK_U64(sched_defer_hold_ns(0, true, 0), 100 * ms);
    CHECK_U64(sched_defer_hold_ns(100 * ms, false, 15), 200 * ms);
    CHECK_U64(sched_defer_hold_ns(100 * ms, true, 1000), 200 * ms);
    CHECK_U64(sched_defer_hold_ns(400 * ms, false, 16), 200 * ms);
    CHECK_U64(sched_defer_hold_ns(200 * ms, false, 16), 100 * ms);
    CHECK_U64(sched_defer_hold_ns(150 * ms, false, 16), 150 * ms);
    CHECK_U64(sched_defer_hold_ns(100 * ms, false, 16), 100 * ms);
    CHECK_U64(sched_defer_hold_ns(8000 * ms, false, 1), 10000 * ms);
    CHECK_U64(sched_defer_hold_ns(10000 * ms, true, 1), 10000 * ms);
}

/* A batch's span: halved after a change seen late or a thread left waiting (not under
 * 50 ms), doubled after one that ran to its end (not over 500 ms). */
static void test_defer_span(void)
{
    const uint64_t ms = NS_PER_MS;
    CHECK_U64(sched_defer_span_halved(500 * ms), 250 * ms);
    CHECK_U64(sched_defer_span_halved(120 * ms), 60 * ms);
    CHECK_U64(sched_defer_span_halved(80 * ms), 50 * ms);
    CHECK_U64(sched_defer_span_halved(50 * ms), 50 * ms);
    CHECK_U64(sched_defer_span_doubled(50 * ms), 100 * ms);
    CHECK_U64(sched_defer_span_doubled(250 * ms), 500 * ms);
    CHECK_U64(sched_defer_span_doubled(300 * ms), 500 * ms);
    CHECK_U64(sched_defer_span_doubled(500 * ms), 500 * ms);
}

/* A deferral is left for preemptions when more than 2 woke profd, and more than one for
 * every 4 of its ticks. */
static void test_defer_preempted_often(void)
{
    CHECK(!sched_defer_preempted_often(2, 0));
    CHECK(sched_defer_preempted_often(3, 11));
    CHECK(!sched_defer_preempted_often(3, 12));
    CHECK(sched_defer_preempted_often(10, 39));
    CHECK(!sched_defer_preempted_often(10, 40));
}

int main(void)
{
    RUN(test_jittered_bounds);
    RUN(test_alarm_due_first_quarter);
    RUN(test_sample_instant);
    RUN(test_alarm_skip_counts_missed);
    RUN(test_alarm_in_window);
    RUN(test_regrid_never_puts_off);
    RUN(test_credit);
    RUN(test_cputime_batch);
    RUN(test_defer_batch_max);
    RUN(test_defer_deadline);
    RUN(test_defer_hold);
    RUN(test_defer_span);
    RUN(test_defer_preempted_often);
    return check_status("test_schedule_ticks");
}
