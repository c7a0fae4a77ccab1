/* schedule.c: a fixed-rate wall-clock trigger per target on a libev timer. */
#include "schedule.h"

#include "target.h"
#include "util.h"

/* One tick: sample the target. The tick time is the sample time of every thread. */
static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct sched *s = w->data;
    uint64_t now = now_ns();
    target_sample(s->t, now);
}

void sched_start(struct sched *s, struct ev_loop *loop, struct target *t, unsigned hz)
{
    s->loop = loop;
    s->t = t;
    s->interval_ns = NS_PER_SEC / (hz ? hz : 1);
    double iv = (double)s->interval_ns / 1e9;
    ev_timer_init(&s->timer, on_tick, iv, iv);
    s->timer.data = s;
    ev_timer_start(loop, &s->timer);
}

void sched_stop(struct sched *s)
{
    if (s->loop)
        ev_timer_stop(s->loop, &s->timer);
}
