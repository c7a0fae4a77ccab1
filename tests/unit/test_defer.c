/* test_defer.c: the rules of alarm's deferred ticks, the sampler's side (daemon/defer.c),
 * without a daemon: which threads a deferral can take (running with a recent clock sample or
 * waiting for a CPU since its preemption, blocked with a reusable stack; none that is
 * stopped, young, in a repair chain or awaiting a one-shot), the batch made to fit the ring
 * bound, the running thread's share of a CPU and its waits that leave a batch. */
#include "check.h"
#include "sampler_internal.h"

#define MS 1000000ull
#define TICK (1000 * MS) /* the tick judged: 1 s after the clock's start */

/* A thread past its youth, blocked where its last stack says. */
static struct thread blocked(void)
{
    struct thread th = {0};
    th.born = true;
    th.state = TH_RUNNING;
    th.added_ns = 0;
    th.last_stack = 7;
    th.have_sched = true;
    perfs_stream_init(&th.smp.ps);
    perfs_stream_init(&th.smp.pl);
    perfs_stream_init(&th.smp.pw);
    th.smp.pl_stack = th.smp.pw_stack = th.smp.dc_stack = STACK_NONE;
    return th;
}

/* The same thread found running at the tick, its clock's newest sample age ns old. */
static struct thread running(uint64_t age)
{
    struct thread th = blocked();
    th.smp.ran_last_tick = true;
    th.smp.pl.fd = 3; /* (never used as a descriptor here) */
    th.smp.pl_stack = 9;
    th.smp.pl_last_ns = TICK - age;
    return th;
}

static void test_blocked(void)
{
    uint64_t max_age = 15 * MS;
    struct thread th = blocked();
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_BLOCKED);
    th.last_stack = STACK_NONE; /* no stack to stand for its ticks */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
    th = blocked();
    th.have_sched = false; /* whether it ran since is unknown */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
}

static void test_running(void)
{
    uint64_t max_age = 15 * MS;
    struct thread th = running(10 * MS);
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_RUNNING);
    th = running(15 * MS); /* its clock's sample too old: a tick would ask a one-shot */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
    th = running(1 * MS);
    th.smp.pl_stack = STACK_NONE; /* no sample of its clock to take */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
    th = running(1 * MS);
    th.smp.pl.fd = -1; /* no clock */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
    /* Waiting for a CPU since its preemption at this tick: deferred on that, whatever its
     * clock says. */
    th.smp.pw_stack = 11;
    th.smp.pw_tick_ns = TICK;
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_RUNNING);
    th.smp.pw_tick_ns = TICK - 10 * MS; /* an earlier tick's preemption */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
}

static void test_never(void)
{
    uint64_t max_age = 15 * MS;
    struct thread base = running(1 * MS), th;
    CHECK_INT(defer_thread_how(&base, TICK, max_age), DEFER_RUNNING);
#define NEVER(field, value)                                                                        \
    do {                                                                                           \
        th = base;                                                                                 \
        th.field = value;                                                                          \
        CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);                               \
    } while (0)
    NEVER(zombie, true);
    NEVER(born, false);
    NEVER(state, TH_GROUP_STOP);
    NEVER(interrupt_pending, true);
    NEVER(rescue_pending, true);
    NEVER(stop_eintr, true);
    NEVER(chain_valid, true);
    NEVER(smp.perf_deep_left, 3);
    NEVER(smp.perf_refused, true);
    NEVER(added_ns, TICK - YOUNG_NS + 1); /* young: its name is still read at every tick */
    /* A one-shot asked for whose sample is still to be read. */
    th = base;
    th.smp.ps.fd = 4;
    th.smp.ps.armed = true;
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_NONE);
    th.smp.ps.armed = false;
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_RUNNING);
    th = base;
    th.added_ns = TICK - YOUNG_NS; /* just old enough */
    CHECK_INT(defer_thread_how(&th, TICK, max_age), DEFER_RUNNING);
#undef NEVER
}

static void test_batch_fit(void)
{
    /* A small copy: the whole batch fits. */
    CHECK_INT(defer_batch_fit(64, 4096), 64);
    /* A large copy per sample: the batch shrinks to the largest that fits the bound. */
    unsigned b = defer_batch_fit(500, 64 * 1024);
    if (perfs_ring_bytes(64 * 1024, true, 500) == 0) {
        fprintf(stderr, "perf events unavailable here: ring sizes unknown, not checked\n");
        return;
    }
    CHECK(b < 500);
    CHECK(b >= DEFER_MIN_BATCH);
    CHECK(perfs_ring_bytes(64 * 1024, true, b + DEFER_MARGIN > 8 ? b + DEFER_MARGIN - 8 : 0) <=
          DEFER_RING_MAX);
    CHECK(defer_batch_fit(b + 1, 64 * 1024) == b); /* one more would not fit */
    CHECK(defer_batch_fit(b, 64 * 1024) == b);
}

static void test_share(void)
{
    bool starved = false;
    /* Too few ticks to judge: the counts go on. */
    CHECK(!defer_share_judged(DEFER_STARVED_MIN_TICKS - 1, 0, &starved));
    CHECK(!starved);
    /* Half a CPU or more: not starved. */
    CHECK(defer_share_judged(DEFER_STARVED_MIN_TICKS, DEFER_STARVED_MIN_TICKS / 2, &starved));
    CHECK(!starved);
    /* Fewer clock samples than half its ticks: less than half a CPU. */
    CHECK(defer_share_judged(DEFER_STARVED_MIN_TICKS, DEFER_STARVED_MIN_TICKS / 2 - 1,
                             &starved));
    CHECK(starved);
    CHECK(defer_share_judged(100, 49, &starved));
    CHECK(starved);
    CHECK(defer_share_judged(100, 50, &starved));
    CHECK(!starved);
}

static void test_waits(void)
{
    uint64_t iv = 10 * MS;
    /* A batch of 10 ticks (100 ms): the preemption watch said where at every tick: no
     * waiting counts. */
    CHECK(!defer_waits_too_long(0, 100 * MS, 10, 10, iv));
    /* It could not say at all 10 ticks, and the thread waited for a CPU 1/8 of the batch or
     * less: stays. */
    CHECK(!defer_waits_too_long(10, 100 * MS / DEFER_WAIT_DIV, 10, 10, iv));
    /* More than 1/8 of the batch waiting, at as many ticks unknown: left. */
    CHECK(defer_waits_too_long(10, 100 * MS / DEFER_WAIT_DIV + 1, 10, 10, iv));
    /* Half the ticks unknown: twice the waiting needed. */
    CHECK(!defer_waits_too_long(5, 2 * 100 * MS / DEFER_WAIT_DIV, 10, 10, iv));
    CHECK(defer_waits_too_long(5, 2 * 100 * MS / DEFER_WAIT_DIV + 2, 10, 10, iv));
}

int main(void)
{
    RUN(test_blocked);
    RUN(test_running);
    RUN(test_never);
    RUN(test_batch_fit);
    RUN(test_share);
    RUN(test_waits);
    return check_status("test_defer");
}
