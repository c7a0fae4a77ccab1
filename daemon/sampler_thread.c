/* sampler_thread.c: the sampler's state in each thread (sampler_thread.h) set up and given
 * back: its events' descriptors and rings, the stacks it holds. A leaf: it calls perfsample.c,
 * the stack table and the accounting of memory and descriptors, nothing above them. */
#include "sampler_thread.h"

#include <stdlib.h>

#include <ev.h>

#include "fds.h"
#include "memory.h"
#include "stacks.h"
#include "target.h"

static struct ev_loop *loop; /* cputime's ring wake-ups (perf_io) are watched on it */

void sampler_threads_init(struct ev_loop *l)
{
    loop = l;
}

void sampler_thread_init(struct thread *th)
{
    struct sampler_thread *s = &th->smp;
    perfs_stream_init(&s->ps);
    perfs_stream_init(&s->pl);
    perfs_stream_init(&s->pw);
    perfs_stream_init(&s->sw);
    perfs_stream_init(&s->chg);
    s->pl_stack = s->pw_stack = s->dc_stack = STACK_NONE;
}

void sampler_thread_release(struct thread *th)
{
    sampler_defer_close(th);
    sampler_watch_close(th);
    sampler_latest_close(th);
    sampler_preempt_close(th);
    sampler_stream_close(th);
    for (int i = 0; i < PYK_EVENTS; i++) {
        free(th->smp.pyq[i].buf);
        th->smp.pyq[i] = (struct pyk_queue){0};
        free(th->smp.goq[i].buf);
        th->smp.goq[i] = (struct pyk_queue){0};
        free(th->smp.ctxq[i].buf);
        th->smp.ctxq[i] = (struct pyk_queue){0};
    }
}

void sampler_stream_close(struct thread *th)
{
    th->smp.oneshot_waiting = 0; /* (its sample will not come) */
    if (th->smp.ps.fd < 0)
        return;
    if (ev_is_active(&th->smp.perf_io))
        ev_io_stop(loop, &th->smp.perf_io);
    memacct_sub(memory_samples(), perfs_bytes(&th->smp.ps));
    perfs_close(&th->smp.ps);
    fds_give(1);
}

void sampler_defer_close(struct thread *th)
{
    if (th->smp.dc_stack != STACK_NONE)
        stacks_unref(&th->t->stacks, th->smp.dc_stack);
    th->smp.dc_stack = STACK_NONE;
    th->smp.dc_ns = 0;
    th->smp.defer_block_ns = 0;
    if (th->smp.defer_kind == DEFER_RUNNING)
        sampler_stream_close(th); /* its clock */
    th->smp.defer_kind = DEFER_NONE;
    if (th->smp.chg.fd < 0)
        return;
    memacct_sub(memory_samples(), perfs_bytes(&th->smp.chg));
    perfs_close(&th->smp.chg); /* (out of the epoll set with its last descriptor) */
    fds_give(1);
}

void sampler_watch_close(struct thread *th)
{
    th->smp.sw_valid = false;
    th->smp.sw_quiet = th->smp.sw_ticks = th->smp.sw_moved = 0;
    if (th->smp.sw.fd < 0)
        return;
    memacct_sub(memory_samples(), perfs_bytes(&th->smp.sw));
    perfs_close(&th->smp.sw);
    fds_give(1);
}

void sampler_forget_latest(struct thread *th)
{
    if (th->smp.pl_stack != STACK_NONE)
        stacks_unref(&th->t->stacks, th->smp.pl_stack);
    th->smp.pl_stack = STACK_NONE;
}

void sampler_preempt_close(struct thread *th)
{
    if (th->smp.pw_stack != STACK_NONE)
        stacks_unref(&th->t->stacks, th->smp.pw_stack);
    th->smp.pw_stack = STACK_NONE;
    if (th->smp.pw.fd < 0)
        return;
    memacct_sub(memory_samples(), perfs_bytes(&th->smp.pw));
    perfs_close(&th->smp.pw);
    fds_give(1);
}

void sampler_latest_close(struct thread *th)
{
    sampler_forget_latest(th);
    th->smp.pl_last_ns = 0;
    if (th->smp.pl.fd < 0)
        return;
    memacct_sub(memory_samples(), perfs_bytes(&th->smp.pl));
    perfs_close(&th->smp.pl);
    fds_give(1);
}
