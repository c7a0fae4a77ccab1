/* watch.c: switch watches (perfsample.h): a thread that seldom runs is checked at a tick by
 * its watch's ring head, without a read of its schedstat; watches opened, judged and closed.
 * Part of the sampler (sampler_internal.h). */
#include "sampler_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "fds.h"
#include "log.h"
#include "memory.h"
#include "perfsample.h"
#include "procfs.h"
#include "syscalls.h"
#include "target.h"
#include "util.h"

/* ---- switch watches (perfsample.h): a thread that seldom runs, checked without a read ---- */

/* A watch is looked at over this many ticks; found moved at more than half, it is closed
 * (the thread runs at most ticks: its schedstat is read anyway, and the records cost it)
 * and not opened again for WATCH_RETRY_NS. */
#define WATCH_WINDOW 64
#define WATCH_RETRY_NS (30 * NS_PER_SEC)

/* No watch is opened anywhere before then: a sampling event lacked room (watches_release). */
static uint64_t watches_blocked_until;

/* Close every target's switch watches, for a sampling event that lacks room (memory or
 * descriptors: the watches of any target may be what took it), and open none for
 * WATCH_RETRY_NS. Returns whether one was closed. */
bool watches_release(uint64_t now)
{
    bool any = false;
    watches_blocked_until = now + WATCH_RETRY_NS;
    for (struct target *t = targets_first(); t; t = t->next)
        for (size_t i = 0; i < t->nthreads; i++)
            if (t->threads[i]->smp.sw.fd >= 0) {
                sampler_watch_close(t->threads[i]);
                t->stats.perf.switch_watch.closed_for_room++;
                any = true;
            }
    return any;
}

/* A switch watch for th, if it may have one: not with sampler ptrace (no perf event at all),
 * within the descriptors (a quarter of them left for threads' files) and the rings' share of
 * max_memory as other events. One that cannot be opened is not asked for again before
 * WATCH_RETRY_NS, nor ever where perf refuses it for good. */
void watch_open(struct target *t, struct thread *th, uint64_t now)
{
    if (t->sampler == SAMPLER_PTRACE || th->smp.sw_refused || now < th->smp.sw_retry_ns ||
        now < watches_blocked_until)
        return;
    th->smp.sw_retry_ns = now + WATCH_RETRY_NS; /* (if it fails) */
    if (!ring_room(perfs_switches_bytes()) || !fds_take_spare(1))
        return;
    int r = perfs_open_switches(&th->smp.sw, th->tid);
    if (r < 0) {
        fds_give(1);
        if (refused_for_good(r))
            th->smp.sw_refused = true;
        return;
    }
    memacct_add(memory_samples(), perfs_bytes(&th->smp.sw));
    th->smp.sw_valid = false; /* a switch before the open is not in it: read schedstat once */
    th->smp.sw_ticks = th->smp.sw_moved = 0;
    t->stats.perf.switch_watch.opened++;
}

/* The thread had not run since its last sample (schedstat read after head was): what the
 * watch's head is to say from now on; or, unwatched, counted towards a watch. */
void watch_quiet(struct thread *th, uint64_t head, bool boundary)
{
    if (th->smp.sw.fd >= 0) {
        th->smp.sw_head = head;
        th->smp.sw_valid = true;
    } else if (!boundary) {
        th->smp.sw_quiet++;
    }
}

/* A watched thread at a tick (its head read into *head): true if the watch says it has not
 * run since its last sample, which is recorded again (no schedstat read); a watch that finds
 * it running too often (wall: a wall-clock tick) is closed. */
bool watch_spares(struct target *t, struct thread *th, uint64_t tick_ns, bool wall,
                  uint64_t *head)
{
    /* Not switched in or out since its head was noted: it has not run since its last
     * sample, as a read of schedstat would say. */
    *head = perfs_switches_head(&th->smp.sw);
    bool moved = !th->smp.sw_valid || *head != th->smp.sw_head;
    bool busy = false;
    if (wall) {
        th->smp.sw_moved += moved;
        if (++th->smp.sw_ticks >= WATCH_WINDOW) {
            busy = th->smp.sw_moved > WATCH_WINDOW / 2;
            th->smp.sw_ticks = th->smp.sw_moved = 0;
        }
    }
    if (busy) {
        sampler_watch_close(th);
        th->smp.sw_retry_ns = tick_ns + WATCH_RETRY_NS;
        t->stats.perf.switch_watch.closed_running_often++;
    } else if (!moved && th->have_sched && push_last(t, th, tick_ns)) {
        t->stats.perf.switch_watch.reads_spared++;
        return true;
    } else {
        th->smp.sw_valid = false; /* (set again by sample_thread if it had not run) */
    }
    return false;
}

