/* cmd_status.c: the status and list commands: the daemon's figures and each target's
 * summary and counters. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "commands_internal.h"
#include "fds.h"
#include "lateness.h"
#include "memory.h"
#include "modules.h"
#include "schedule.h"
#include "server.h"
#include "symhelper.h"
#include "target.h"
#include "util.h"
#include "worker.h"

cJSON *target_summary(const struct target *t, uint64_t now)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "pid", t->pid);
    cJSON_AddStringToObject(o, "comm", t->comm);
    cJSON_AddStringToObject(o, "exe", t->exe ? t->exe : "");
    cJSON_AddStringToObject(o, "state", target_state_name(t->state));
    cJSON_AddNumberToObject(o, "threads", (double)t->nthreads);
    cJSON_AddNumberToObject(o, "hz", t->hz);
    cJSON_AddStringToObject(o, "mode", sched_mode_name(t->sched->mode));
    cJSON_AddNumberToObject(o, "buffer_s", (double)(t->buffer_ns / NS_PER_SEC));
    cJSON_AddNumberToObject(o, "samples", (double)t->stats.samples);
    cJSON_AddNumberToObject(o, "buffered", (double)t->ring.len);
    if (t->ring.len) {
        cJSON_AddNumberToObject(o, "oldest_ns", (double)ring_at(&t->ring, 0)->t_ns);
        cJSON_AddNumberToObject(o, "newest_ns", (double)ring_at(&t->ring, t->ring.len - 1)->t_ns);
    }
    uint64_t end = t->state == T_EXITED ? t->exit_ns : now;
    cJSON_AddNumberToObject(o, "attached_s", (double)(end - t->attach_ns) / 1e9);
    return o;
}

static cJSON *target_status(const struct target *t, uint64_t now)
{
    cJSON *o = target_summary(t, now);
    const struct target_stats *s = &t->stats;
    uint64_t end = t->state == T_EXITED ? t->exit_ns : now;
    double secs = end > t->attach_ns ? (double)(end - t->attach_ns) / 1e9 : 0;
    cJSON_AddNumberToObject(o, "ticks", (double)s->ticks);
    cJSON_AddNumberToObject(o, "achieved_hz", secs > 0 ? (double)s->ticks / secs : 0);
    cJSON_AddItemToObject(o, "sampling", sched_describe(t->sched));
    /* alarm: how late its ticks ran against the grid (the loop thread busy elsewhere). */
    cJSON_AddItemToObject(o, "tick_lateness", lateness_describe(&t->sched->lateness));
    /* Ticks that found a thread running that ran at its previous tick too: known from its
     * syscall file alone (sampler.c). Not a kind of sample: outside "sampled". */
    cJSON_AddNumberToObject(o, "running_again", (double)s->schedstat_spared);
    cJSON *k = cJSON_AddObjectToObject(o, "sampled");
    cJSON_AddNumberToObject(k, "stopped", (double)s->samples_stopped);
    cJSON_AddNumberToObject(k, "blocked_without_stop", (double)s->samples_blocked);
    cJSON_AddNumberToObject(k, "idle_reused", (double)s->samples_reused);
    cJSON_AddNumberToObject(k, "kernel_copy", (double)s->samples_perf);
    /* Per path: samples, and profd's time per sample on the loop thread (for stops: from
     * the interrupt through the wait, the copy and the unwind). */
    cJSON *paths = cJSON_AddObjectToObject(o, "paths");
    struct {
        const char *name;
        uint64_t n, ns;
    } pv[] = {{"perf", s->samples_perf, s->ns_perf},
              {"proc", s->samples_blocked, s->ns_blocked},
              {"ptrace", s->samples_stopped, s->ns_stopped}};
    for (size_t i = 0; i < 3; i++) {
        cJSON *p = cJSON_AddObjectToObject(paths, pv[i].name);
        cJSON_AddNumberToObject(p, "samples", (double)pv[i].n);
        cJSON_AddNumberToObject(p, "us_per_sample",
                                pv[i].n ? (double)pv[i].ns / (double)pv[i].n / 1e3 : 0);
    }
    cJSON *pf = cJSON_AddObjectToObject(o, "perf");
    cJSON_AddStringToObject(pf, "sampler", sampler_kind_name(t->sampler));
    /* The sampling events, and apart from them the switch watches of threads that seldom
     * run (read at each tick instead of their schedstat). */
    size_t streams = 0, ring = 0, watches = 0, watch_bytes = 0;
    uint32_t copy_min = 0, copy_max = 0; /* stack bytes per sample of the events open */
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct thread *th = t->threads[i];
        const struct perf_stream *ev[3] = {&th->ps, &th->pl, &th->pw};
        for (size_t k = 0; k < 3; k++) {
            if (ev[k]->fd < 0 || !ev[k]->stack_size)
                continue;
            if (!copy_min || ev[k]->stack_size < copy_min)
                copy_min = ev[k]->stack_size;
            if (ev[k]->stack_size > copy_max)
                copy_max = ev[k]->stack_size;
        }
        streams += (th->ps.fd >= 0) + (th->pl.fd >= 0) + (th->pw.fd >= 0);
        ring += perfs_bytes(&th->ps) + perfs_bytes(&th->pl) + perfs_bytes(&th->pw);
        watches += th->sw.fd >= 0;
        watch_bytes += perfs_bytes(&th->sw);
    }
    cJSON_AddNumberToObject(pf, "events", (double)streams);
    cJSON_AddNumberToObject(pf, "ring_bytes", (double)ring);
    cJSON_AddNumberToObject(pf, "oneshot_asked", (double)s->perf_armed);
    cJSON_AddNumberToObject(pf, "oneshot_expired", (double)s->perf_expired);
    cJSON_AddNumberToObject(pf, "oneshot_waited_for", (double)s->perf_waited);
    cJSON_AddNumberToObject(pf, "latest", (double)s->perf_latest);
    cJSON_AddNumberToObject(pf, "latest_reused", (double)s->perf_latest_reused);
    cJSON_AddNumberToObject(pf, "latest_torn", (double)s->perf_latest_torn);
    cJSON_AddNumberToObject(pf, "preempted", (double)s->perf_preempted);
    cJSON_AddNumberToObject(pf, "preempt_watch_failed", (double)s->preempt_watch_failed);
    cJSON_AddNumberToObject(pf, "latest_across_waits", (double)s->perf_latest_across_waits);
    cJSON_AddNumberToObject(pf, "latest_in_sliced_window", (double)s->perf_latest_sliced);
    cJSON_AddNumberToObject(pf, "lost", (double)s->perf_lost);
    cJSON_AddNumberToObject(pf, "without_registers", (double)s->perf_no_regs);
    cJSON_AddNumberToObject(pf, "copy_too_short", (double)s->perf_short);
    cJSON_AddNumberToObject(pf, "copy_shrunk", (double)s->perf_shrunk);
    cJSON *cb = cJSON_AddObjectToObject(pf, "copy_bytes");
    cJSON_AddNumberToObject(cb, "min", copy_min);
    cJSON_AddNumberToObject(cb, "max", copy_max);
    cJSON_AddNumberToObject(pf, "stopped_stack_too_deep", (double)s->fallback_deep);
    cJSON_AddNumberToObject(pf, "stopped_no_event", (double)s->fallback_refused);
    cJSON_AddNumberToObject(pf, "stopped_first_interval", (double)s->fallback_first);
    cJSON_AddNumberToObject(pf, "stopped_without_files", (double)s->fallback_no_files);
    cJSON_AddNumberToObject(pf, "stopped_for_python", (double)s->fallback_python);
    cJSON *sw = cJSON_AddObjectToObject(pf, "switch_watch");
    cJSON_AddNumberToObject(sw, "threads", (double)watches);
    cJSON_AddNumberToObject(sw, "ring_bytes", (double)watch_bytes);
    cJSON_AddNumberToObject(sw, "reads_spared", (double)s->watch_skipped);
    cJSON_AddNumberToObject(sw, "opened", (double)s->watch_opened);
    cJSON_AddNumberToObject(sw, "closed_running_often", (double)s->watch_closed_busy);
    cJSON_AddNumberToObject(sw, "closed_for_room", (double)s->watch_released);
    if (t->perf_err)
        cJSON_AddStringToObject(pf, "error", strerror(-t->perf_err));
    if (t->py.status != PYS_NONE) {
        cJSON *py = cJSON_AddObjectToObject(o, "python");
        char v[16];
        snprintf(v, sizeof(v), "%lu.%lu", (t->py.rt.version_hex >> 24) & 0xff,
                 (t->py.rt.version_hex >> 16) & 0xff);
        if (t->py.rt.version_hex)
            cJSON_AddStringToObject(py, "version", v);
        cJSON_AddBoolToObject(py, "frames", t->py.status == PYS_OK);
        if (t->py.status == PYS_UNSUPPORTED)
            cJSON_AddStringToObject(py, "error", t->py.why);
        cJSON_AddNumberToObject(py, "samples", (double)t->py.samples);
        cJSON_AddNumberToObject(py, "torn", (double)t->py.torn);
        cJSON_AddNumberToObject(py, "unreadable", (double)t->py.unreadable);
        cJSON_AddNumberToObject(py, "code_objects", (double)t->py.ncodes);
        cJSON_AddNumberToObject(py, "code_objects_failed", (double)t->py.codes_failed);
        cJSON_AddNumberToObject(py, "us_per_read",
                                t->py.captures ? (double)t->py.capture_ns / 1e3 /
                                                     (double)t->py.captures
                                               : 0);
    }
    cJSON *u = cJSON_AddObjectToObject(o, "unwind");
    cJSON_AddNumberToObject(u, "complete", (double)s->unwind_complete);
    cJSON_AddNumberToObject(u, "truncated", (double)s->unwind_truncated);
    cJSON_AddNumberToObject(u, "too_deep", (double)s->unwind_too_deep);
    uint64_t unw = s->unwind_complete + s->unwind_truncated + s->unwind_too_deep;
    cJSON_AddNumberToObject(u, "complete_pct", unw ? 100.0 * (double)s->unwind_complete / (double)unw : 0);
    cJSON_AddNumberToObject(u, "signal_masks_spared", (double)t->unw.masks_spared);
    /* The housekeeping's looks at the maps that found VmSize, VmExe and VmLib unchanged. */
    cJSON_AddNumberToObject(u, "maps_rereads_spared", (double)t->maps_unchanged);
    /* The seconds' looks spared whole (none of its threads ran), and the threads' names not
     * read again (that thread had not run). */
    cJSON *hk = cJSON_AddObjectToObject(o, "housekeeping");
    cJSON_AddNumberToObject(hk, "spared", (double)t->housekeeping_spared);
    cJSON_AddNumberToObject(hk, "names_spared", (double)t->names_spared);
    cJSON *sk = cJSON_AddObjectToObject(o, "skipped");
    cJSON_AddNumberToObject(sk, "still_stopping", (double)s->skipped_pending);
    cJSON_AddNumberToObject(sk, "job_control_stopped", (double)s->skipped_stopped);
    cJSON_AddNumberToObject(sk, "resuming_from_job_control", (double)s->skipped_resuming);
    cJSON_AddNumberToObject(sk, "off_cpu_when_due", (double)s->skipped_off_cpu);
    cJSON *b = cJSON_AddObjectToObject(o, "transaction_boundaries");
    cJSON_AddNumberToObject(b, "sampled", (double)s->boundary_taken);
    cJSON_AddNumberToObject(b, "skipped_within_interval", (double)s->boundary_skipped);
    cJSON *f = cJSON_AddObjectToObject(o, "failed");
    cJSON_AddNumberToObject(f, "thread_exited", (double)s->failed_vanished);
    cJSON_AddNumberToObject(f, "registers", (double)s->failed_regs);
    cJSON_AddNumberToObject(f, "stack_copy", (double)s->failed_copy);
    cJSON_AddNumberToObject(f, "torn_copy_retried", (double)s->torn);
    cJSON_AddNumberToObject(o, "threads_stopped", (double)s->interrupts);
    cJSON_AddNumberToObject(o, "threads_stopped_per_tick",
                            s->ticks ? (double)s->interrupts / (double)s->ticks : 0);
    cJSON_AddNumberToObject(o, "stop_latency_us_avg",
                            s->interrupts ? (double)s->stop_latency_ns / (double)s->interrupts / 1e3 : 0);
    cJSON_AddNumberToObject(o, "syscalls_restarted", (double)s->eintr_repaired);
    cJSON_AddNumberToObject(o, "wakeups_rescued", (double)s->wakeups_rescued);
    cJSON_AddNumberToObject(o, "signals_forwarded", (double)s->signals_forwarded);
    cJSON_AddNumberToObject(o, "group_stops", (double)s->group_stops);
    cJSON_AddNumberToObject(o, "threads_seen", (double)s->threads_seen);
    /* Threads that went without their /proc files (profd's descriptors, fds.h). */
    cJSON_AddNumberToObject(o, "threads_without_files", (double)t->nthreads_nofiles);
    cJSON_AddNumberToObject(o, "stacks", t->stacks.used);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)target_memory(t));
    cJSON_AddNumberToObject(o, "ring_dropped_full", (double)t->ring.dropped);
    /* Samples lost to the bound on every target's samples (memory.h): the oldest
     * overwritten by a ring kept at its size, or new stacks not recorded. */
    cJSON_AddNumberToObject(o, "dropped_max_memory",
                            (double)(t->ring.dropped_mem + t->stacks.refused));
    return o;
}

cJSON *cmd_list(struct request *r)
{
    cJSON *arr = cJSON_CreateArray();
    uint64_t now = now_ns();
    char why[256];
    for (struct target *t = targets_first(); t; t = t->next)
        if (may_access(r->c, t, t->pid, why, sizeof(why)) == 0)
            cJSON_AddItemToArray(arr, target_summary(t, now));
    cJSON *res = cJSON_CreateObject();
    cJSON_AddItemToObject(res, "targets", arr);
    return result_reply(r->id, res);
}

cJSON *cmd_status(struct request *r)
{
    uint64_t now = now_ns();
    cJSON *res = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(res, "daemon");
    cJSON_AddStringToObject(d, "version", PROFD_VERSION);
    cJSON_AddNumberToObject(d, "pid", getpid());
    cJSON_AddNumberToObject(d, "uptime_s", (double)(now - server_start_ns) / 1e9);
    cJSON_AddNumberToObject(d, "budget_cpu_pct", sched_budget_pct());
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    cJSON_AddNumberToObject(d, "cpu_s", cpu);
    cJSON_AddNumberToObject(d, "user_s", (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6);
    cJSON_AddNumberToObject(d, "system_s", (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
    cJSON_AddNumberToObject(d, "max_rss_kib", (double)ru.ru_maxrss);
    cJSON_AddNumberToObject(d, "clients", (double)server_client_count());
    struct fds_stats fs;
    fds_get_stats(&fs);
    cJSON *fo = cJSON_AddObjectToObject(d, "descriptors");
    if (fs.open != (uint64_t)-1)
        cJSON_AddNumberToObject(fo, "open", (double)fs.open);
    cJSON_AddNumberToObject(fo, "limit", (double)fs.limit);
    cJSON_AddNumberToObject(fo, "reserved", (double)fs.reserve);
    cJSON_AddNumberToObject(fo, "threads", (double)fs.per_thread);
    cJSON_AddNumberToObject(fo, "threads_refused", (double)fs.refused);
    cJSON_AddNumberToObject(fo, "clients_refused", (double)server_refused_count());
    char why[256];
    size_t visible = 0;
    uint64_t samples = 0;
    for (struct target *t = targets_first(); t; t = t->next) {
        if (may_access(r->c, t, t->pid, why, sizeof(why)) == 0) {
            if (t->state == T_ATTACHED)
                sched_catch_up(t->sched, false); /* its counts include alarm's deferred ticks */
            visible++;
            samples += t->stats.samples;
        }
    }
    /* Totals over what this client may see, like the list below. */
    cJSON_AddNumberToObject(d, "targets", (double)visible);
    cJSON_AddNumberToObject(d, "modules", (double)modules_count());
    cJSON_AddNumberToObject(d, "slices_queued", worker_queue_length());
    /* What the loop thread spent on slices (the rest is the worker's). */
    cJSON_AddItemToObject(d, "slice_loop", worker_describe_loop());
    cJSON_AddItemToObject(d, "memory", memory_describe());
    /* The unprivileged helpers that parse what targets control. */
    struct symhelper_stats hs[4];
    size_t nh = symhelper_list(hs, ARRAY_SIZE(hs));
    cJSON *helpers = cJSON_AddArrayToObject(d, "symbolizers");
    for (size_t i = 0; i < nh && i < ARRAY_SIZE(hs); i++) {
        cJSON *h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "role", hs[i].role);
        cJSON_AddNumberToObject(h, "pid", hs[i].pid);
        cJSON_AddNumberToObject(h, "starts", (double)hs[i].starts);
        cJSON_AddNumberToObject(h, "failures", (double)hs[i].failures);
        cJSON_AddNumberToObject(h, "requests", (double)hs[i].requests);
        cJSON_AddBoolToObject(h, "waiting", hs[i].waiting);
        cJSON_AddStringToObject(h, "last_error", hs[i].last_error);
        cJSON_AddItemToArray(helpers, h);
    }
    cJSON_AddNumberToObject(d, "default_hz", server_cfg.default_hz);
    cJSON_AddNumberToObject(d, "default_buffer_s", (double)(server_cfg.default_buffer_ns / NS_PER_SEC));
    cJSON_AddNumberToObject(d, "samples", (double)samples);
    cJSON *arr = cJSON_AddArrayToObject(res, "targets");
    for (struct target *t = targets_first(); t; t = t->next) {
        if (r->pid && t->pid != r->pid)
            continue;
        if (may_access(r->c, t, t->pid, why, sizeof(why)) != 0)
            continue;
        cJSON_AddItemToArray(arr, target_status(t, now)); /* (caught up above) */
    }
    return result_reply(r->id, res);
}
