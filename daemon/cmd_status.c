/* cmd_status.c: the status and list commands: the daemon's figures and each target's
 * summary and counters. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "commands_internal.h"
#include "export.h"
#include "fds.h"
#include "lateness.h"
#include "pykernel.h"
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
    cJSON_AddNumberToObject(o, "attach_ns", (double)t->attach_ns);
    cJSON *ex = export_describe_target(t);
    if (ex)
        cJSON_AddItemToObject(o, "export", ex);
    return o;
}

/* ---- a target's status: its counters from target.h's lists ---- */

/* A counter of one of target.h's lists: its key, and where its uint64_t is in its group's
 * struct. */
struct stat_key {
    const char *name;
    size_t off;
};
#define STAT_KEY(T, name) {#name, offsetof(T, name)},

static void add_counters(cJSON *o, const void *group, const struct stat_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, keys[i].name,
                                (double)*(const uint64_t *)((const char *)group + keys[i].off));
}

/* Every counter of LIST (one of target.h's) added to o, in its order: group points to the
 * T that LIST made (checked by the compiler). */
#define ADD_COUNTERS(o, LIST, T, group)                                                    \
    do {                                                                                   \
        static const struct stat_key keys_[] = {LIST(STAT_KEY, T)};                        \
        const T *group_ = (group);                                                         \
        add_counters(o, group_, keys_, ARRAY_SIZE(keys_));                                 \
    } while (0)
/* One counter of target_stats' top level, where it is placed: its key its member's name. */
#define ADD_COUNTER(o, s, name) cJSON_AddNumberToObject(o, #name, (double)(s)->name)


/* OpenTelemetry's thread context (threadctx.h): where it is read from, whether the eBPF
 * program reads it at the sample (why not), and what the samples found. */
static void add_thread_context(cJSON *o, const struct tctx_target *c)
{
    cJSON *x = cJSON_AddObjectToObject(o, "thread_context");
    cJSON_AddStringToObject(x, "module", c->module);
    cJSON_AddBoolToObject(x, "read", c->status == TCTX_OK);
    if (c->status != TCTX_OK)
        cJSON_AddStringToObject(x, "why_not", c->why);
    cJSON_AddBoolToObject(x, "kernel", c->kernel);
    if (!c->kernel)
        cJSON_AddStringToObject(x, "kernel_why_not", c->kernel_why);
    cJSON_AddNumberToObject(x, "samples_with", (double)c->stats.with);
    cJSON_AddNumberToObject(x, "samples_without", (double)c->stats.without);
    cJSON_AddNumberToObject(x, "read_late", (double)c->stats.late);
    cJSON_AddNumberToObject(x, "unreadable", (double)c->stats.unreadable);
    cJSON_AddNumberToObject(x, "no_slot", (double)c->stats.no_slot);
    cJSON_AddNumberToObject(x, "threads_found", (double)c->stats.slots);
    cJSON_AddNumberToObject(x, "walks", (double)c->stats.walks);
    cJSON_AddNumberToObject(x, "records", (double)c->ks.records);
    cJSON_AddNumberToObject(x, "paired", (double)c->ks.paired);
    cJSON_AddNumberToObject(x, "unpaired", (double)c->ks.unpaired);
    cJSON_AddNumberToObject(x, "missing", (double)c->ks.missing);
    cJSON_AddNumberToObject(x, "dropped", (double)c->ks.dropped);
}

/* Its perf events: the sampling events, and apart from them the switch watches of threads
 * that seldom run (read at each tick instead of their schedstat). */
struct perf_usage {
    size_t streams, ring, watches, watch_bytes;
    uint32_t copy_min, copy_max; /* stack bytes per sample of the events open */
};

static void perf_usage(const struct target *t, struct perf_usage *u)
{
    size_t streams = 0, ring = 0, watches = 0, watch_bytes = 0;
    uint32_t copy_min = 0, copy_max = 0; /* stack bytes per sample of the events open */
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct thread *th = t->threads[i];
        const struct perf_stream *ev[3] = {&th->smp.ps, &th->smp.pl, &th->smp.pw};
        for (size_t k = 0; k < 3; k++) {
            /* (A one-shot not armed copies nothing: it is opened again at the thread's
             * size when next asked, kcopy.c.) */
            if (ev[k]->fd < 0 || !ev[k]->stack_size ||
                (k == 0 && !ev[k]->continuous && !ev[k]->armed))
                continue;
            if (!copy_min || ev[k]->stack_size < copy_min)
                copy_min = ev[k]->stack_size;
            if (ev[k]->stack_size > copy_max)
                copy_max = ev[k]->stack_size;
        }
        streams += (th->smp.ps.fd >= 0) + (th->smp.pl.fd >= 0) + (th->smp.pw.fd >= 0);
        ring += perfs_bytes(&th->smp.ps) + perfs_bytes(&th->smp.pl) + perfs_bytes(&th->smp.pw);
        watches += th->smp.sw.fd >= 0;
        watch_bytes += perfs_bytes(&th->smp.sw);
    }
    *u = (struct perf_usage){.streams = streams, .ring = ring, .watches = watches,
                             .watch_bytes = watch_bytes, .copy_min = copy_min,
                             .copy_max = copy_max};
}

static void add_perf(cJSON *o, const struct target *t)
{
    const struct stats_perf *s = &t->stats.perf;
    cJSON *pf = cJSON_AddObjectToObject(o, "perf");
    cJSON_AddStringToObject(pf, "sampler", sampler_kind_name(t->sampler));
    struct perf_usage u;
    perf_usage(t, &u);
    cJSON_AddNumberToObject(pf, "events", (double)u.streams);
    cJSON_AddNumberToObject(pf, "ring_bytes", (double)u.ring);
    ADD_COUNTERS(pf, TARGET_STATS_PERF, struct stats_perf, s);
    cJSON *cb = cJSON_AddObjectToObject(pf, "copy_bytes");
    cJSON_AddNumberToObject(cb, "min", u.copy_min);
    cJSON_AddNumberToObject(cb, "max", u.copy_max);
    ADD_COUNTERS(pf, TARGET_STATS_PERF_STOPPED, struct stats_perf, s);
    cJSON *sw = cJSON_AddObjectToObject(pf, "switch_watch");
    cJSON_AddNumberToObject(sw, "threads", (double)u.watches);
    cJSON_AddNumberToObject(sw, "ring_bytes", (double)u.watch_bytes);
    ADD_COUNTERS(sw, TARGET_STATS_SWITCH_WATCH, struct stats_switch_watch, &s->switch_watch);
    if (t->perf_err)
        cJSON_AddStringToObject(pf, "error", strerror(-t->perf_err));
    /* Why a Python target's running threads are stopped (stopped_for_python's reason). */
    if (t->py.status == PYS_OK && !t->py.kernel)
        cJSON_AddStringToObject(pf, "stopped_for_python_why", t->py.kernel_why);
}

static void add_python(cJSON *o, const struct target *t)
{
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
    if (t->py.status != PYS_OK)
        return;
    /* Where its running threads' frames are read: in the kernel at the sample (eBPF), or in
     * a stop (why). */
    cJSON *k = cJSON_AddObjectToObject(py, "kernel");
    cJSON_AddBoolToObject(k, "frames", t->py.kernel);
    if (!t->py.kernel)
        cJSON_AddStringToObject(k, "why_not", t->py.kernel_why);
    const struct py_kernel_stats *ks = &t->py.ks;
    struct {
        const char *name;
        uint64_t v;
    } kv[] = {{"records", ks->records},         {"paired", ks->paired},
              {"missing", ks->missing},         {"faulted", ks->faulted},
              {"failed_check", ks->failed_check}, {"truncated", ks->truncated},
              {"no_thread_state", ks->no_thread_state}, {"unpaired", ks->unpaired},
              {"queue_dropped", ks->queue_dropped}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
        cJSON_AddNumberToObject(k, kv[i].name, (double)kv[i].v);
}

static cJSON *target_status(const struct target *t, uint64_t now)
{
    cJSON *o = target_summary(t, now);
    const struct target_stats *s = &t->stats;
    uint64_t end = t->state == T_EXITED ? t->exit_ns : now;
    double secs = end > t->attach_ns ? (double)(end - t->attach_ns) / 1e9 : 0;
    ADD_COUNTER(o, s, ticks);
    cJSON_AddNumberToObject(o, "achieved_hz", secs > 0 ? (double)s->ticks / secs : 0);
    cJSON_AddItemToObject(o, "sampling", sched_describe(t->sched));
    /* alarm: how late its ticks ran against the grid (the loop thread busy elsewhere). */
    cJSON_AddItemToObject(o, "tick_lateness", lateness_describe(&t->sched->lateness));
    /* Ticks that found a thread running that ran at its previous tick too: known from its
     * syscall file alone (sampler.c). Not a kind of sample: outside "sampled". */
    ADD_COUNTER(o, s, running_again);
    cJSON *k = cJSON_AddObjectToObject(o, "sampled");
    ADD_COUNTERS(k, TARGET_STATS_SAMPLED, struct stats_sampled, &s->sampled);
    /* Per path: samples, and profd's time per sample on the loop thread (for stops: from
     * the interrupt through the wait, the copy and the unwind). */
    cJSON *paths = cJSON_AddObjectToObject(o, "paths");
    struct {
        const char *name;
        uint64_t n, ns;
    } pv[] = {{"perf", s->sampled.kernel_copy, s->ns_perf},
              {"proc", s->sampled.blocked_without_stop, s->ns_blocked},
              {"ptrace", s->sampled.stopped, s->ns_stopped}};
    for (size_t i = 0; i < 3; i++) {
        cJSON *p = cJSON_AddObjectToObject(paths, pv[i].name);
        cJSON_AddNumberToObject(p, "samples", (double)pv[i].n);
        cJSON_AddNumberToObject(p, "us_per_sample",
                                pv[i].n ? (double)pv[i].ns / (double)pv[i].n / 1e3 : 0);
    }
    add_perf(o, t);
    if (t->py.status != PYS_NONE)
        add_python(o, t);
    if (t->unw.go_rt.module) {
        /* A Go target: its frames stepped by the runtime's tables, and whether the goroutine
         * beneath a thread's system stack is read in the kernel at the sample (why not). */
        cJSON *g = cJSON_AddObjectToObject(o, "go");
        cJSON_AddNumberToObject(g, "frames", (double)t->unw.go_frames);
        cJSON_AddBoolToObject(g, "kernel", t->gok.kernel);
        if (!t->gok.kernel)
            cJSON_AddStringToObject(g, "why_not", t->gok.why);
        cJSON_AddNumberToObject(g, "records", (double)t->gok.records);
        cJSON_AddNumberToObject(g, "paired", (double)t->gok.paired);
        cJSON_AddNumberToObject(g, "used", (double)t->unw.go_copied);
        cJSON_AddNumberToObject(g, "unpaired", (double)t->gok.unpaired);
        cJSON_AddNumberToObject(g, "dropped", (double)t->gok.dropped);
        cJSON_AddNumberToObject(g, "stopped_reads", (double)t->gok.stopped_reads);
    }
    if (t->tctx.status != TCTX_NONE)
        add_thread_context(o, &t->tctx);
    cJSON *u = cJSON_AddObjectToObject(o, "unwind");
    ADD_COUNTERS(u, TARGET_STATS_UNWIND, struct stats_unwind, &s->unwind);
    uint64_t unw = s->unwind.complete + s->unwind.truncated + s->unwind.too_deep;
    cJSON_AddNumberToObject(u, "complete_pct",
                            unw ? 100.0 * (double)s->unwind.complete / (double)unw : 0);
    cJSON_AddNumberToObject(u, "signal_masks_spared", (double)t->unw.masks_spared);
    /* The housekeeping's looks at the maps that found VmSize, VmExe and VmLib unchanged. */
    cJSON_AddNumberToObject(u, "maps_rereads_spared", (double)t->maps_unchanged);
    /* The seconds' looks spared whole (none of its threads ran), and the threads' names not
     * read again (that thread had not run). */
    cJSON *hk = cJSON_AddObjectToObject(o, "housekeeping");
    cJSON_AddNumberToObject(hk, "spared", (double)t->housekeeping_spared);
    cJSON_AddNumberToObject(hk, "names_spared", (double)t->names_spared);
    cJSON *sk = cJSON_AddObjectToObject(o, "skipped");
    ADD_COUNTERS(sk, TARGET_STATS_SKIPPED, struct stats_skipped, &s->skipped);
    cJSON *b = cJSON_AddObjectToObject(o, "transaction_boundaries");
    ADD_COUNTERS(b, TARGET_STATS_BOUNDARIES, struct stats_boundaries, &s->transaction_boundaries);
    cJSON *f = cJSON_AddObjectToObject(o, "failed");
    ADD_COUNTERS(f, TARGET_STATS_FAILED, struct stats_failed, &s->failed);
    ADD_COUNTER(o, s, threads_stopped);
    cJSON_AddNumberToObject(o, "threads_stopped_per_tick",
                            s->ticks ? (double)s->threads_stopped / (double)s->ticks : 0);
    cJSON_AddNumberToObject(o, "stop_latency_us_avg",
                            s->threads_stopped ? (double)s->stop_latency_ns /
                                                     (double)s->threads_stopped / 1e3
                                               : 0);
    ADD_COUNTERS(o, TARGET_STATS_THREADS, struct target_stats, s);
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
    /* The eBPF program that reads Python frames at the sample (pykernel.h), once a Python
     * target came: loaded, or why not; its records, and those its ring buffer had no room
     * for. */
    cJSON *tr = cJSON_AddObjectToObject(d, "transactions");
    cJSON_AddNumberToObject(tr, "txn_start", (double)txn_requests.start);
    cJSON_AddNumberToObject(tr, "txn_finish", (double)txn_requests.finish);
    cJSON_AddNumberToObject(tr, "txn_discard", (double)txn_requests.discard);
    cJSON_AddNumberToObject(tr, "txn_profile", (double)txn_requests.profile);
    const char *bpf_why;
    bool bpf = pyk_loaded(&bpf_why);
    if (bpf || bpf_why) {
        cJSON *pb = cJSON_AddObjectToObject(d, "python_ebpf");
        cJSON_AddBoolToObject(pb, "loaded", bpf);
        if (bpf_why)
            cJSON_AddStringToObject(pb, "why_not", bpf_why);
        uint64_t recs, full;
        pyk_counters(&recs, &full);
        cJSON_AddNumberToObject(pb, "records", (double)recs);
        cJSON_AddNumberToObject(pb, "ring_full", (double)full);
    }
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
    cJSON *ex = export_describe();
    if (ex)
        cJSON_AddItemToObject(d, "export", ex);
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
