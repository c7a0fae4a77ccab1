/* commands.c: the request table. Requests are validated in a fixed order before any handler
 * runs: JSON object, handshake, known command, argument types, permission. Handlers build
 * a reply and never touch the socket. */
#include <errno.h>
#include <linux/capability.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "commands.h"
#include "fds.h"
#include "lateness.h"
#include "log.h"
#include "schedule.h"
#include "memory.h"
#include "modules.h"
#include "perms.h"
#include "proto.h"
#include "server.h"
#include "slice.h"
#include "symhelper.h"
#include "target.h"
#include "txn.h"
#include "util.h"
#include "worker.h"

/* Arguments every handler gets, already validated. */
struct request {
    struct client *c;
    const cJSON *req;
    const cJSON *id;
    pid_t pid;               /* for commands on a process */
    struct target *t;        /* attached target for pid, if any */
};

static cJSON *result_reply(const cJSON *id, cJSON *result)
{
    cJSON *r = cJSON_CreateObject();
    if (id)
        cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 1));
    cJSON_AddItemToObject(r, "result", result);
    return r;
}

static enum proto_error errno_code(int e)
{
    switch (e) {
    case ESRCH:
        return PE_NO_SUCH_PROCESS;
    case EPERM:
    case EACCES:
        return PE_PERMISSION_DENIED;
    case EEXIST:
        return PE_ALREADY_ATTACHED;
    case EBUSY:
        return PE_ATTACH_FAILED;
    case EINVAL:
        return PE_BAD_REQUEST;
    case EDQUOT:
    case EMFILE: /* profd's own descriptors or memory are used up */
    case ENFILE:
    case ENOMEM:
        return PE_LIMIT;
    default:
        return PE_ATTACH_FAILED;
    }
}

static cJSON *cmd_hello(struct request *r)
{
    int64_t v;
    int got = json_get_i64(r->req, "version", &v);
    if (got <= 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "hello needs \"version\": an integer");
    if (v < 1) {
        r->c->closing = true;
        return proto_error_reply(r->id, PE_UNSUPPORTED_VERSION,
                                 "protocol version %" PRId64 " is not supported; this profd "
                                 "speaks version %d",
                                 v, PROTO_VERSION);
    }
    r->c->handshaken = true;
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "version", PROTO_VERSION);
    cJSON_AddStringToObject(res, "server", "profd " PROFD_VERSION);
    cJSON_AddNumberToObject(res, "pid", getpid());
    return result_reply(r->id, res);
}

static cJSON *target_summary(const struct target *t, uint64_t now)
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

/* May the client see target t? Checked against the process's live credentials, or, once
 * it has exited (or vanished before its exit was reaped), those recorded at attach. */
static int may_access(const struct client *c, const struct target *t, pid_t pid, char *why,
                      size_t whylen)
{
    struct proc_creds cr;
    int r = -ESRCH;
    if (!(t && t->state == T_EXITED))
        r = proc_creds_read(pid, &cr, why, whylen);
    if (r == -EMFILE || r == -ENFILE || r == -ENOMEM)
        return r; /* refused too, as profd's own shortage (a limit, not a permission) */
    if (r < 0 && r != -ESRCH)
        return -EPERM; /* it lives, but its credentials cannot be known: refuse */
    bool live = r == 0;
    if (!live) {
        if (!t) {
            snprintf(why, whylen, "no such process: %d", pid);
            return -ESRCH;
        }
        cr = t->creds;
    }
    if (t && t->creds_changed && !peer_may_trace_any(&c->peer)) {
        snprintf(why, whylen, "permission denied: process %d changed credentials at exec (a "
                              "set-user-ID program) while profiled; its samples need "
                              "CAP_SYS_PTRACE", pid);
        return -EPERM;
    }
    r = perms_check(&c->peer, &cr, why, whylen);
    if (r == 0 && live && (!t || t->state != T_EXITED))
        r = perms_check_yama(&c->peer, pid, why, whylen);
    return r;
}

/* Do the limits let profd follow one more process for client c? Every listed target
 * counts, in the totals and in its owner's quota alike, whether it runs or has exited: an
 * exited one keeps its samples (max_memory) and its slot (max_targets) until they expire or
 * it is detached, and a quota that forgot it would let one user fill every slot with
 * processes that ran briefly. Returns 0 or -EDQUOT, the reason in why. */
static int limits_check(const struct client *c, char *why, size_t whylen)
{
    if (memory_admit_target(why, whylen) < 0)
        return -EDQUOT;
    if (targets_count() >= server_cfg.max_targets) {
        snprintf(why, whylen, "profd already follows %u processes", server_cfg.max_targets);
        return -EDQUOT;
    }
    if (peer_may_trace_any(&c->peer))
        return 0;
    /* One user must not take every slot from the others. */
    unsigned mine = 0;
    for (struct target *k = targets_first(); k; k = k->next)
        mine += k->owner_uid == c->peer.uid;
    if (mine >= server_cfg.max_targets_per_user) {
        snprintf(why, whylen, "uid %u has reached the limit per user of %u attached processes "
                              "(exited ones count until detached or expired)",
                 c->peer.uid, server_cfg.max_targets_per_user);
        return -EDQUOT;
    }
    return 0;
}

/* The one admission rule of attach and txn_start, for process pid (t: profd's target for it
 * if that is this very process, else NULL): may client c have it profiled (may_access: the
 * ptrace rule and Yama), and, when that makes profd follow a process it does not follow yet
 * (new_target), do the limits allow one more? Returns 0, or -ESRCH / -EPERM / -EDQUOT with
 * the reason in why. */
static int admit(const struct client *c, const struct target *t, pid_t pid, bool new_target,
                 char *why, size_t whylen)
{
    /* Not logged here: a refused transaction start may come thousands of times a second. */
    int r = may_access(c, t, pid, why, whylen);
    if (r < 0)
        return r;
    return new_target ? limits_check(c, why, whylen) : 0;
}

static cJSON *cmd_list(struct request *r)
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

static cJSON *cmd_status(struct request *r)
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

/* "mode" of a request: absent (def), or a mode name. Returns 0 or -1 (bad). */
static int get_mode(const cJSON *req, enum sched_mode def, enum sched_mode *out)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(req, "mode");
    *out = def;
    if (!m)
        return 0;
    if (!cJSON_IsString(m) || !m->valuestring || sched_mode_parse(m->valuestring, out) < 0)
        return -1;
    return 0;
}

#define BAD_MODE "\"mode\" must be \"sleep\", \"event\", \"alarm\" or \"cputime\""

static cJSON *cmd_attach(struct request *r)
{
    uint64_t hz = server_cfg.default_hz, buffer_ns = server_cfg.default_buffer_ns, buf_s;
    if (json_get_u64(r->req, "hz", &hz) < 0 || hz < 1 || hz > server_cfg.max_hz)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"hz\" must be an integer from 1 to %u",
                                 server_cfg.max_hz);
    enum sched_mode mode;
    if (get_mode(r->req, server_cfg.default_mode, &mode) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, BAD_MODE);
    enum sampler_kind sampler = server_cfg.default_sampler;
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(r->req, "sampler");
    if (sk && (!cJSON_IsString(sk) || !sk->valuestring ||
               sampler_kind_parse(sk->valuestring, &sampler) < 0))
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "\"sampler\" must be \"auto\", \"perf\" or \"ptrace\"");
    int got = json_get_u64(r->req, "buffer_s", &buf_s);
    if (got < 0 || (got && (buf_s < 1 || buf_s > server_cfg.max_buffer_ns / NS_PER_SEC)))
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "\"buffer_s\" must be an integer from 1 to %" PRIu64,
                                 server_cfg.max_buffer_ns / NS_PER_SEC);
    if (got)
        buffer_ns = buf_s * NS_PER_SEC;
    if (r->t && r->t->state == T_ATTACHED && !r->t->explicit_attach) {
        /* Attached for its transactions only: now also because a client asked. */
        r->t->explicit_attach = true;
        txn_target_changed(r->pid);
        return result_reply(r->id, target_summary(r->t, now_ns()));
    }
    if (r->t && !target_is_previous(r->t)) {
        return proto_error_reply(r->id, PE_ALREADY_ATTACHED, "process %d is already %s",
                                 r->pid, r->t->state == T_EXITED ? "attached (and has exited)"
                                                                 : "attached");
    }
    /* The access rule passed at dispatch; admit checks it again with the limits, as for a
     * transaction's start (one /proc read more per attach, and one rule for both). */
    char why[256];
    int e = admit(r->c, NULL, r->pid, true, why, sizeof(why));
    if (e < 0)
        return proto_error_reply(r->id, errno_code(-e), "%s", why);
    struct target *t;
    e = sched_attach(r->pid, mode, (unsigned)hz, buffer_ns, sampler, &t, why, sizeof(why));
    if (e < 0)
        return proto_error_reply(r->id, errno_code(-e), "%s",
                                 why[0] ? why : strerror(-e));
    t->owner_uid = r->c->peer.uid;
    t->explicit_attach = true;
    log_info("client pid %d (uid %u) attached %d", r->c->peer.pid, r->c->peer.uid, r->pid);
    worker_warm(t);
    return result_reply(r->id, target_summary(t, now_ns()));
}

/* Change how an attached process is sampled: "mode" and/or "hz". */
static cJSON *cmd_configure(struct request *r)
{
    if (!r->t || r->t->state != T_ATTACHED)
        return proto_error_reply(r->id, PE_NOT_ATTACHED, "process %d is not attached%s", r->pid,
                                 r->t ? " (it has exited)" : "");
    struct target *t = r->t;
    uint64_t hz = t->hz;
    if (json_get_u64(r->req, "hz", &hz) < 0 || hz < 1 || hz > server_cfg.max_hz)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"hz\" must be an integer from 1 to %u",
                                 server_cfg.max_hz);
    enum sched_mode mode;
    if (get_mode(r->req, t->sched->mode, &mode) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, BAD_MODE);
    int e = sched_reconfigure(t->sched, mode, (unsigned)hz);
    if (e < 0)
        return proto_error_reply(r->id, PE_INTERNAL, "cannot start the %s schedule: %s",
                                 sched_mode_name(mode), strerror(-e));
    target_set_hz(t, (unsigned)hz);
    log_info("client pid %d: %d now sampled %s at %u Hz", r->c->peer.pid, t->pid,
             sched_mode_name(mode), t->hz);
    cJSON *res = target_summary(t, now_ns());
    cJSON_AddItemToObject(res, "sampling", sched_describe(t->sched));
    return result_reply(r->id, res);
}

struct detach_wait {
    struct pending *p;
    bool sync;      /* target_detach is still on the stack */
    bool finished;
    int err;
    pid_t pid;
};

static void detach_done(struct target *t, void *ctx, int err)
{
    (void)t;
    struct detach_wait *w = ctx;
    w->finished = true;
    w->err = err;
    if (w->sync)
        return;
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "pid", w->pid);
    cJSON_AddBoolToObject(res, "detached", 1);
    pending_finish(w->p, result_reply(NULL, res));
    free(w);
}

static cJSON *cmd_detach(struct request *r)
{
    if (!r->t)
        return proto_error_reply(r->id, PE_NOT_ATTACHED, "process %d is not attached", r->pid);
    if (r->t->state == T_DETACHING)
        return proto_error_reply(r->id, PE_NOT_ATTACHED, "process %d is already detaching",
                                 r->pid);
    struct detach_wait *w = xcalloc(1, sizeof(*w));
    w->pid = r->pid;
    w->sync = true;
    w->p = xcalloc(1, sizeof(*w->p));
    w->p->client = r->c;
    w->p->id = r->id ? cJSON_Duplicate(r->id, 1) : NULL;
    log_info("client pid %d (uid %u) detaches %d", r->c->peer.pid, r->c->peer.uid, r->pid);
    target_detach(r->t, detach_done, w);
    w->sync = false;
    if (w->finished) {
        cJSON_Delete(w->p->id);
        free(w->p);
        free(w);
        cJSON *res = cJSON_CreateObject();
        cJSON_AddNumberToObject(res, "pid", r->pid);
        cJSON_AddBoolToObject(res, "detached", 1);
        return result_reply(r->id, res);
    }
    r->c->pending = w->p;
    return NULL;
}

/* The reply to a slice (worker thread, once it is built): made and encoded here, so that
 * the loop thread only hands the bytes over (printing a Sentry profile of 30 s of 8 threads
 * takes longer than many ticks' intervals). */
static void slice_reply(struct slice_job *job)
{
    cJSON *reply;
    if (job->err < 0) {
        reply = proto_error_reply(NULL, PE_INTERNAL, "could not build the profile: %s",
                                  strerror(-job->err));
    } else {
        cJSON *res = cJSON_CreateObject();
        cJSON_AddNumberToObject(res, "pid", job->pid);
        cJSON_AddStringToObject(res, "format", slice_format_name(job->format));
        cJSON_AddNumberToObject(res, "start_ns", (double)job->start_ns);
        cJSON_AddNumberToObject(res, "end_ns", (double)job->end_ns);
        cJSON_AddNumberToObject(res, "samples", (double)job->nsamples);
        cJSON_AddNumberToObject(res, "threads", (double)job->nthreads_out);
        cJSON_AddNumberToObject(res, "stacks", (double)job->nstacks);
        cJSON_AddNumberToObject(res, "truncated_samples", (double)job->truncated);
        cJSON_AddNumberToObject(res, "build_ms", (double)job->build_ns / 1e6);
        if (job->sym_error)
            cJSON_AddStringToObject(res, "symbols_error", job->sym_error);
        if (job->sampling)
            cJSON_AddItemToObject(res, "sampling", cJSON_Duplicate(job->sampling, 1));
        /* Sentry's profile carries profd's notes under "profd" (relay drops what it does
         * not know); no other format has room for them. */
        bool notes = job->json && job->format == SLICE_SENTRY;
        if (notes && job->sampling) {
            /* Sentry's readers drop fields they do not know: how it was sampled travels with
             * the profile. */
            cJSON *m = cJSON_GetObjectItemCaseSensitive(job->json, "profd");
            if (!m)
                m = cJSON_AddObjectToObject(job->json, "profd");
            cJSON_AddItemToObject(m, "sampling", cJSON_Duplicate(job->sampling, 1));
            /* A transaction that started before its process was attached (the first ones:
             * a start does not wait for the attach) has no samples of that time. */
            if (job->txn.start_ns > job->start_ns) {
                cJSON *x = cJSON_AddObjectToObject(m, "transaction");
                cJSON_AddNumberToObject(x, "lookback_ns", (double)(job->txn.start_ns - job->start_ns));
                cJSON_AddNumberToObject(x, "start_ns", (double)job->txn.start_ns);
                cJSON_AddNumberToObject(x, "end_ns", (double)job->txn.end_ns);
            }
            if (job->txn.start_ns && job->txn.start_ns < job->attach_ns)
                cJSON_AddNumberToObject(m, "unsampled_before_attach_ms",
                                        (double)(job->attach_ns - job->txn.start_ns) / 1e6);
        }
        if (notes && job->sym_error) {
            cJSON *m = cJSON_GetObjectItemCaseSensitive(job->json, "profd");
            if (!m)
                m = cJSON_AddObjectToObject(job->json, "profd");
            cJSON_AddStringToObject(m, "symbols_error", job->sym_error);
        }
        /* Built while the process's symbols were still being loaded (its first transactions,
         * worker.c): its frames are [module+0xOFF], with their instruction_addr and images. */
        if (job->symbols_pending) {
            cJSON_AddBoolToObject(res, "symbols_pending", true);
            if (notes) {
                cJSON *m = cJSON_GetObjectItemCaseSensitive(job->json, "profd");
                if (!m)
                    m = cJSON_AddObjectToObject(job->json, "profd");
                cJSON_AddBoolToObject(m, "symbols_pending", true);
            }
        }
        if (job->summary) {
            cJSON_AddItemToObject(res, "summary", job->summary);
            job->summary = NULL;
        }
        if (job->json) {
            cJSON_AddItemToObject(res, "profile", job->json);
            job->json = NULL;
        } else if (job->binary) {
            /* JSON carries text: a binary profile (pprof's gzip) travels in base64. */
            char *b64 = base64_encode(job->data ? job->data : "", job->len);
            cJSON_AddStringToObject(res, "data", b64 ? b64 : "");
            cJSON_AddStringToObject(res, "encoding", "base64");
            free(b64);
        } else {
            cJSON_AddStringToObject(res, "data", job->data ? job->data : "");
        }
        reply = result_reply(NULL, res);
    }
    /* As pending_finish would: the request's id last. */
    if (job->reply_id) {
        cJSON_AddItemToObject(reply, "id", job->reply_id);
        job->reply_id = NULL;
    }
    char *text = json_print(reply);
    cJSON_Delete(reply);
    if (!text || frame_encode(&job->reply_frame, text, strlen(text)) < 0)
        strbuf_finish(&job->reply_frame); /* the loop thread answers with an error */
    free(text);
    free(job->data);
    job->data = NULL;
    slice_job_drop_copy(job);
}

/* A slice is back from the worker (loop thread): hand its reply over. */
static void slice_done(struct slice_job *job)
{
    struct worker_loop_mark m;
    worker_loop_begin(&m);
    struct pending *p = job->ctx;
    log_debug("slice of %d: %zu samples, built in %.2f ms", job->pid, job->nsamples,
              (double)job->build_ns / 1e6);
    if (p && job->reply_frame.len) {
        pending_finish_frame(p, &job->reply_frame);
    } else if (p) {
        /* Cancelled (profd is exiting), or a reply that could not be encoded. */
        int err = job->err < 0 ? -job->err : ENOMEM;
        pending_finish(p, proto_error_reply(NULL, err == ECANCELED ? PE_SHUTTING_DOWN : PE_INTERNAL,
                                            "could not build the profile: %s", strerror(err)));
    }
    /* A reply not taken over (the requester went away, or had output waiting): the worker
     * allocated it, the worker frees it (see server.c's out_release). */
    worker_free_later(job->reply_frame.buf);
    job->reply_frame = (struct strbuf){0};
    slice_job_free(job);
    worker_loop_end(&m, WORKER_LOOP_REPLY, 0);
}

/* A slice request waiting for its window's last samples. */
struct slice_wait {
    struct pending *p;
    pid_t pid;
    uint64_t from, to;
    enum slice_format format;
    bool thread_ids;
    ev_timer timer;
    int tries;
    struct slice_wait *next; /* waits with an armed timer, freed at shutdown */
    /* A transaction's profile: its metadata (owned strings). */
    struct profile_txn txn;
    /* Keep only the samples inside transactions of this name ("transaction": NAME); split
     * the output by transaction ("by_transaction"). */
    char *only_txn;
    bool by_txn;
    /* The summary format: at most limit functions (0: all), by total rather than self
     * samples, of the threads whose tid or name matches threads. */
    uint64_t limit;
    bool sort_total;
    char *threads;
};

static struct slice_wait *waits;

static void slice_wait_free(struct slice_wait *w)
{
    free(w->txn.id);
    free(w->txn.name);
    free(w->txn.trace_id);
    free(w->only_txn);
    free(w->threads);
    free(w);
}

/* A transaction of the target that overlaps the job's window (and ran on a known thread). */
static void collect_txn(const struct txn *x, void *arg)
{
    struct slice_job *job = arg;
    uint64_t end = x->end_ns ? x->end_ns : UINT64_MAX;
    if (x->tid <= 0 || end < job->start_ns || x->start_ns > job->end_ns)
        return;
    slice_add_txn(job, x->tid, x->start_ns, end, x->name);
}

static void wait_unlink(struct slice_wait *w)
{
    for (struct slice_wait **p = &waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            return;
        }
}

void commands_shutdown(void)
{
    while (waits) {
        struct slice_wait *w = waits;
        waits = w->next;
        ev_timer_stop(server_loop(), &w->timer);
        pending_finish(w->p, proto_error_reply(NULL, PE_SHUTTING_DOWN, "profd is exiting"));
        slice_wait_free(w);
    }
}

/* Does t have a stop outstanding for a tick at or before `to`? */
/* The kernel's one-shot sample of a running thread comes after ONESHOT_PERIOD_NS of its CPU
 * time: waited for this long at most (a thread waiting for a CPU takes longer). */
#define ONESHOT_WAIT_NS (3 * NS_PER_MS)

static bool stops_in_flight(struct target *t, uint64_t to)
{
    if (t->state != T_ATTACHED)
        return false;
    sched_catch_up(t->sched, false); /* alarm's deferred ticks, up to now */
    sampler_flush(t); /* what the kernel sampled so far */
    uint64_t now = now_ns();
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct thread *th = t->threads[i];
        if (th->interrupt_pending && th->sample_tick_ns <= to)
            return true;
        if (th->ps.armed && !th->ps.continuous && th->ps.armed_ns <= to &&
            now - th->ps.armed_ns < ONESHOT_WAIT_NS)
            return true;
    }
    return false;
}

/* Hand the window to the worker, which copies it out of the ring a bounded number of samples
 * at a time between other events, then builds it. */
static void slice_start(struct slice_wait *w, struct target *t)
{
    struct worker_loop_mark m;
    worker_loop_begin(&m);
    struct slice_job *job = slice_begin(t, w->from, w->to, w->format);
    /* Later ticks take no clock sample from inside this window (sampler.c perf_latest). */
    uint64_t served = w->to < now_ns() ? w->to : now_ns();
    if (served > t->sliced_to_ns)
        t->sliced_to_ns = served;
    job->thread_ids = w->thread_ids;
    job->summary_limit = w->limit;
    job->sort_total = w->sort_total;
    job->thread_filter = w->threads;
    w->threads = NULL;
    slice_set_requester(job, w->p->client ? &w->p->client->peer : NULL);
    if (w->txn.name) {
        job->txn = w->txn; /* moved */
        memset(&w->txn, 0, sizeof(w->txn));
    }
    /* pprof labels samples with their transactions and speedscope gives each transaction a
     * profile of its own. */
    if (w->only_txn || w->by_txn || w->format == SLICE_PPROF || w->format == SLICE_SPEEDSCOPE) {
        /* Samples are tagged (and filtered) on the worker thread. */
        job->only_txn = w->only_txn;
        w->only_txn = NULL;
        job->by_txn = w->by_txn;
        txn_each(job->pid, collect_txn, job);
    }
    job->ctx = w->p;
    job->reply_id = w->p->id ? cJSON_Duplicate(w->p->id, 1) : NULL;
    job->finish = slice_reply;
    job->done = slice_done;
    worker_submit(job);
    slice_wait_free(w);
    worker_loop_end(&m, WORKER_LOOP_REQUEST, 0);
}

/* Up to 50 ms for stops that belong to the window; then slice what there is. */
static void slice_retry(struct ev_loop *l, ev_timer *tm, int revents)
{
    (void)revents;
    struct slice_wait *w = tm->data;
    struct target *t = target_find(w->pid);
    if (!w->p->client) {
        /* The requester went away. */
        ev_timer_stop(l, tm);
        wait_unlink(w);
        pending_finish(w->p, cJSON_CreateObject());
        slice_wait_free(w);
        return;
    }
    if (!t) {
        ev_timer_stop(l, tm);
        wait_unlink(w);
        pending_finish(w->p, proto_error_reply(NULL, PE_NOT_ATTACHED,
                                               "process %d was detached", w->pid));
        slice_wait_free(w);
        return;
    }
    if (stops_in_flight(t, w->to) && ++w->tries < 50)
        return;
    ev_timer_stop(l, tm);
    wait_unlink(w);
    slice_start(w, t);
}

void commands_stops_reaped(void)
{
    struct slice_wait **pp = &waits;
    while (*pp) {
        struct slice_wait *w = *pp;
        struct target *t = target_find(w->pid);
        if (!w->p->client || !t || stops_in_flight(t, w->to)) {
            pp = &w->next; /* its timer deals with it */
            continue;
        }
        *pp = w->next;
        ev_timer_stop(server_loop(), &w->timer);
        slice_start(w, t);
    }
}

static struct slice_wait *new_slice_wait(struct request *r, pid_t pid, uint64_t from,
                                         uint64_t to, enum slice_format format);
static cJSON *submit_slice(struct client *c, struct target *t, struct slice_wait *w);

static cJSON *cmd_slice(struct request *r)
{
    if (!r->t)
        return proto_error_reply(r->id, PE_NOT_ATTACHED, "process %d is not attached", r->pid);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(r->req, "format");
    int format = SLICE_COLLAPSED;
    if (fmt) {
        format = cJSON_IsString(fmt) ? slice_format_parse(fmt->valuestring) : -1;
        if (format < 0)
            return proto_error_reply(r->id, PE_BAD_REQUEST,
                                     "\"format\" must be \"collapsed\", \"sentry\", "
                                     "\"sentry-chunks\", \"pprof\", \"speedscope\", "
                                     "\"flamegraph\" or \"summary\"");
    }
    uint64_t now = now_ns(), last_ns = 0, from = 0, to = UINT64_MAX;
    int has_last = json_get_u64(r->req, "last_ns", &last_ns);
    int has_from = json_get_u64(r->req, "from_ns", &from);
    int has_to = json_get_u64(r->req, "to_ns", &to);
    if (has_last < 0 || has_from < 0 || has_to < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "\"last_ns\", \"from_ns\" and \"to_ns\" must be non-negative "
                                 "integers (nanoseconds, CLOCK_MONOTONIC)");
    if (has_last && (has_from || has_to))
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "give either \"last_ns\" or \"from_ns\"/\"to_ns\", not both");
    if (has_last) {
        uint64_t end = r->t->state == T_EXITED ? r->t->exit_ns : now;
        to = end;
        from = last_ns < end ? end - last_ns : 0;
    } else {
        if (!has_from && r->t->ring.len)
            from = ring_at(&r->t->ring, 0)->t_ns;
        if (!has_to)
            to = r->t->state == T_EXITED ? r->t->exit_ns : now;
        if (!has_from && from > to)
            from = to; /* a window that ends before the oldest sample: empty */
    }
    if (from > to)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"from_ns\" is after \"to_ns\"");
    /* A Sentry profile's time runs from its window's start, and relay keeps 30 s of it: a
     * window reaching back before the attach (`--last 60` of a process attached seconds
     * ago) starts at the attach, where its samples do, and the reply's start_ns says so. */
    if (format == SLICE_SENTRY && from < r->t->attach_ns && r->t->attach_ns <= to)
        from = r->t->attach_ns;
    const cJSON *tids = cJSON_GetObjectItemCaseSensitive(r->req, "thread_ids");
    if (tids && !cJSON_IsBool(tids))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"thread_ids\" must be a boolean");
    /* In event mode a valid slice request is an event: a sample now. A window that ends now
     * (the default) then ends with it. */
    if (r->t->state == T_ATTACHED && sched_event(r->t->sched)) {
        if (!has_last && !has_to)
            to = r->t->state == T_EXITED ? r->t->exit_ns : now_ns();
        else if (has_last && r->t->state != T_EXITED)
            to = now_ns();
        /* The tick may have handled a set-user-ID exec: the access rule just changed. */
        if (r->t->creds_changed && !peer_may_trace_any(&r->c->peer))
            return proto_error_reply(r->id, PE_PERMISSION_DENIED,
                                     "permission denied: process %d changed credentials at "
                                     "exec (a set-user-ID program) while profiled",
                                     r->pid);
    }
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(r->req, "transaction");
    if (only && (!cJSON_IsString(only) || !only->valuestring))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"transaction\" must be a string");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(r->req, "by_transaction");
    if (by && !cJSON_IsBool(by))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"by_transaction\" must be a boolean");
    uint64_t limit = 0;
    if (json_get_u64(r->req, "limit", &limit) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"limit\" must be a non-negative "
                                 "integer");
    const cJSON *sort = cJSON_GetObjectItemCaseSensitive(r->req, "sort");
    if (sort && (!cJSON_IsString(sort) || (strcmp(sort->valuestring, "self") &&
                                           strcmp(sort->valuestring, "total"))))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"sort\" must be \"self\" or "
                                 "\"total\"");
    const cJSON *threads = cJSON_GetObjectItemCaseSensitive(r->req, "threads");
    if (threads && (!cJSON_IsString(threads) || strlen(threads->valuestring) > 255))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"threads\" must be a string (a "
                                 "thread id or part of a thread's name)");
    struct slice_wait *w = new_slice_wait(r, r->pid, from, to, (enum slice_format)format);
    w->thread_ids = tids && cJSON_IsTrue(tids);
    w->limit = limit;
    w->sort_total = sort && !strcmp(sort->valuestring, "total");
    w->threads = threads ? xstrdup(threads->valuestring) : NULL;
    /* The samples of the threads that ran a transaction of that name, while it ran. */
    if (only)
        w->only_txn = xstrdup(only->valuestring);
    w->by_txn = by && cJSON_IsTrue(by);
    return submit_slice(r->c, r->t, w);
}

/* A new slice request's wait record; its reply goes to the requesting client. */
static struct slice_wait *new_slice_wait(struct request *r, pid_t pid, uint64_t from,
                                         uint64_t to, enum slice_format format)
{
    struct slice_wait *w = xcalloc(1, sizeof(*w));
    w->p = xcalloc(1, sizeof(*w->p));
    w->p->client = r->c;
    w->p->id = r->id ? cJSON_Duplicate(r->id, 1) : NULL;
    w->pid = pid;
    w->from = from;
    w->to = to;
    w->format = format;
    return w;
}

/* Slice now, or once the stops of ticks inside the window have arrived. The reply is sent
 * later: returns NULL. */
static cJSON *submit_slice(struct client *c, struct target *t, struct slice_wait *w)
{
    uint64_t to = w->to;
    size_t nsamples;
    size_t need = slice_estimate(t, w->from, w->to, w->format, &nsamples);
    char why[320];
    if (memory_admit_slice(need, nsamples, why, sizeof(why)) < 0) {
        cJSON *reply = proto_error_reply(w->p->id, PE_LIMIT, "%s", why);
        cJSON_Delete(w->p->id);
        free(w->p);
        slice_wait_free(w);
        return reply;
    }
    c->pending = w->p;
    if (stops_in_flight(t, to)) {
        /* Samples of ticks inside the window are still being taken (their threads have not
         * stopped yet): give them a moment, so the window is complete. */
        ev_timer_init(&w->timer, slice_retry, 0.001, 0.001);
        w->timer.data = w;
        ev_timer_start(server_loop(), &w->timer);
        w->next = waits;
        waits = w;
        return NULL;
    }
    slice_start(w, t);
    return NULL;
}

/* ---- transactions: always of the calling process (the socket's peer) ---- */

/* A start refused: its error reply, or, for a start that asked for no reply, a record of
 * the refusal that its finish (or discard) reports. */
static cJSON *start_refused(struct request *r, bool noreply, uint64_t id, enum proto_error code,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static cJSON *start_refused(struct request *r, bool noreply, uint64_t id, enum proto_error code,
                            const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (!noreply)
        return proto_error_reply(r->id, code, "%s", why);
    log_debug("client %" PRIu64 " (pid %d): transaction %" PRIu64 " refused: %s", r->c->id,
              r->c->peer.pid, id, why);
    txn_refuse(r->c->peer.pid, id, r->c->id, (int)code, why);
    return NULL;
}

/* A request without a reply that cannot even be recorded (no usable txn_id, or too many
 * open): logged; its finish will find no such transaction. */
static cJSON *start_dropped(struct request *r, const char *why)
{
    static uint64_t last_ns;
    uint64_t now = now_ns();
    if (now - last_ns > NS_PER_SEC) {
        last_ns = now;
        log_info("client %" PRIu64 " (pid %d): txn_start dropped: %s", r->c->id,
                 r->c->peer.pid, why);
    }
    return NULL;
}

static cJSON *cmd_txn_start(struct request *r)
{
    pid_t pid = r->c->peer.pid;
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(r->req, "noreply");
    if (nr && !cJSON_IsBool(nr))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"noreply\" must be a boolean");
    bool noreply = cJSON_IsTrue(nr);
    uint64_t id = 0;
    int has_id = json_get_u64(r->req, "txn_id", &id);
    if (has_id < 0 || (has_id && (id == 0 || id > (1ull << 53)))) {
        if (noreply)
            return start_dropped(r, "\"txn_id\" is not an integer from 1 to 2^53");
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "\"txn_id\" must be an integer from 1 to 2^53");
    }
    if (noreply && !has_id)
        return start_dropped(r, "\"noreply\" needs the caller's \"txn_id\"");
    if (has_id && txn_find_open(pid, r->c->id, id)) {
        if (noreply)
            return start_dropped(r, "\"txn_id\" already names an open transaction");
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "transaction %" PRIu64 " is already open on this connection",
                                 id);
    }
    struct txn_proc *tp = txn_proc_find(pid);
    if (tp && tp->open + tp->refused >= TXN_MAX_OPEN) {
        if (noreply)
            return start_dropped(r, "the process has too many open transactions");
        return proto_error_reply(r->id, PE_LIMIT, "process %d has %u open transactions", pid,
                                 tp->open + tp->refused);
    }
    if (!has_id)
        id = txn_new_id(pid, r->c->id);

    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r->req, "name");
    const cJSON *trace = cJSON_GetObjectItemCaseSensitive(r->req, "trace_id");
    if (!cJSON_IsString(name) || !name->valuestring || !name->valuestring[0] ||
        strlen(name->valuestring) > 512)
        return start_refused(r, noreply, id, PE_BAD_REQUEST,
                             "txn_start needs \"name\": a string of 1 to 512 bytes");
    if (trace && (!cJSON_IsString(trace) || !trace->valuestring ||
                  strlen(trace->valuestring) > 64))
        return start_refused(r, noreply, id, PE_BAD_REQUEST,
                             "\"trace_id\" must be a string (32 hex digits)");
    int64_t tid = 0;
    if (json_get_i64(r->req, "tid", &tid) < 0 || tid < 0 || tid > 0x3fffffff)
        return start_refused(r, noreply, id, PE_BAD_REQUEST, "\"tid\" must be a thread id");
    /* When it began, by the caller's clock (CLOCK_MONOTONIC, the daemon's too): a start
     * sent without waiting is read a little later. Not before the connection, not ahead. */
    uint64_t now = now_ns(), start = now;
    int has_t = json_get_u64(r->req, "t_ns", &start);
    if (has_t < 0)
        return start_refused(r, noreply, id, PE_BAD_REQUEST,
                             "\"t_ns\" must be a CLOCK_MONOTONIC time in nanoseconds");
    if (start > now || start < r->c->accept_ns)
        start = start > now ? now : r->c->accept_ns;
    if (tid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task/%d", pid, (int)tid);
        if (access(path, F_OK) < 0)
            return start_refused(r, noreply, id, PE_BAD_REQUEST,
                                 "thread %d is not a thread of your process %d", (int)tid, pid);
    }
    /* A target of this pid that has exited was an earlier process (the pid was reused):
     * the caller is checked as it is now. A new target unless an attach is already queued. */
    struct target *t = target_find(pid);
    const struct target *live = t && t->state != T_EXITED ? t : NULL;
    char why[256];
    int e = admit(r->c, live, pid, !live && !(tp && tp->attaching), why, sizeof(why));
    if (e < 0)
        return start_refused(r, noreply, id, errno_code(-e), "%s", why);
    /* Without a reply nobody waits for the attach: it happens now, before the
     * transaction's finish can be read. With one, right after the reply. */
    struct txn *x = txn_start(pid, (pid_t)tid, id, name->valuestring,
                              trace ? trace->valuestring : NULL, r->c->id, start,
                              r->c->peer.uid, noreply);
    /* A transaction's start is an event (event mode: every thread); in any mode its own
     * thread is sampled at its boundaries (at most once an interval), so even one shorter
     * than the interval can have the two samples Sentry needs. */
    t = target_find(pid);
    if (t && t->state == T_ATTACHED && !sched_event(t->sched)) {
        sched_catch_up(t->sched, true); /* (its stop of a running thread would end it) */
        sampler_sample_boundary(t, (pid_t)tid, now_ns(), 0);
    }
    if (noreply)
        return NULL;
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "txn_id", (double)x->id);
    cJSON_AddStringToObject(res, "id", x->uuid);
    cJSON_AddNumberToObject(res, "pid", pid);
    cJSON_AddBoolToObject(res, "attached", t && t->state == T_ATTACHED);
    return result_reply(r->id, res);
}

/* The caller's open transaction named by "txn_id" on this connection, or an error reply in
 * *err. A refused start is ended here, its refusal the error. */
static struct txn *open_txn(struct request *r, struct txn_proc **tpp, cJSON **err)
{
    uint64_t id = 0;
    *err = NULL;
    if (json_get_u64(r->req, "txn_id", &id) <= 0) {
        *err = proto_error_reply(r->id, PE_BAD_REQUEST, "\"txn_id\" must be the integer "
                                                        "of a txn_start");
        return NULL;
    }
    struct txn *x = txn_find_open(r->c->peer.pid, r->c->id, id);
    if (!x) {
        *err = proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "no open transaction %" PRIu64 " on this connection of "
                                 "process %d", id, r->c->peer.pid);
        return NULL;
    }
    *tpp = txn_proc_find(r->c->peer.pid);
    if (x->refused) {
        *err = proto_error_reply(r->id, (enum proto_error)x->refused_code,
                                 "transaction %" PRIu64 " was refused at its start: %s", id,
                                 x->refused_why);
        txn_end(*tpp, x, now_ns());
        return NULL;
    }
    return x;
}

/* "noreply": true (discard only): no answer, not even an error. */
static int want_noreply(struct request *r, cJSON **err)
{
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(r->req, "noreply");
    if (nr && !cJSON_IsBool(nr)) {
        *err = proto_error_reply(r->id, PE_BAD_REQUEST, "\"noreply\" must be a boolean");
        return -1;
    }
    return cJSON_IsTrue(nr);
}

static cJSON *cmd_txn_finish(struct request *r)
{
    double lookback = 0;
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(r->req, "lookback_s");
    if (lb) {
        if (!cJSON_IsNumber(lb) || !(lb->valuedouble >= 0 && lb->valuedouble <= 3600))
            return proto_error_reply(r->id, PE_BAD_REQUEST,
                                     "\"lookback_s\" must be seconds from 0 to 3600");
        lookback = lb->valuedouble;
    }
    /* When and on which thread the caller called finish (optional): from then on, that
     * thread waits in the client for the answer. */
    uint64_t now = now_ns(), called = 0;
    int64_t caller = 0;
    if (json_get_u64(r->req, "t_ns", &called) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "\"t_ns\" must be a CLOCK_MONOTONIC time in nanoseconds");
    if (json_get_i64(r->req, "tid", &caller) < 0 || caller < 0 || caller > 0x3fffffff)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"tid\" must be a thread id");
    struct txn_proc *tp;
    cJSON *err;
    struct txn *x = open_txn(r, &tp, &err);
    if (!x)
        return err;
    if (called && caller == x->tid)
        x->end_call_ns = called > now ? now : called < x->start_ns ? x->start_ns : called;
    pid_t pid = r->c->peer.pid;
    struct target *t = target_find(pid);
    if (t && t->state == T_EXITED)
        t = NULL; /* a previous process of this pid (the caller lives): not its samples */
    if (t && t->state == T_ATTACHED && !sched_event(t->sched)) {
        sched_catch_up(t->sched, true); /* (its stop of a running thread would end it) */
        sampler_sample_boundary(t, x->tid, now_ns(), x->start_ns); /* as at the start */
    }
    /* The profile names its thread: as it is called now. A thread that named itself just
     * after profd first read its name would otherwise keep the name it was born with until
     * the next refresh (housekeeping, once a second). */
    if (t && t->state == T_ATTACHED)
        target_refresh_name(t, x->tid);
    txn_end(tp, x, now_ns());
    if (!t) {
        if (tp->attach_err)
            return proto_error_reply(r->id, errno_code(-tp->attach_err),
                                     "process %d could not be profiled: %s", pid,
                                     tp->attach_why);
        return proto_error_reply(r->id, PE_NOT_ATTACHED, "process %d is not attached yet",
                                 pid);
    }
    uint64_t lb_ns = (uint64_t)(lookback * 1e9);
    uint64_t from = x->start_ns > lb_ns ? x->start_ns - lb_ns : 0;
    struct slice_wait *w = new_slice_wait(r, pid, from, x->end_ns, SLICE_SENTRY);
    w->txn.id = xstrdup(x->uuid);
    w->txn.name = xstrdup(x->name);
    w->txn.trace_id = x->trace_id ? xstrdup(x->trace_id) : NULL;
    w->txn.active_tid = x->tid;
    w->txn.start_ns = x->start_ns;
    w->txn.end_ns = x->end_ns;
    w->txn.end_call_ns = x->end_call_ns;
    return submit_slice(r->c, t, w);
}

static cJSON *cmd_txn_discard(struct request *r)
{
    cJSON *err = NULL;
    int noreply = want_noreply(r, &err);
    if (noreply < 0)
        return err;
    struct txn_proc *tp;
    struct txn *x = open_txn(r, &tp, &err);
    if (!x) {
        if (noreply) {
            cJSON_Delete(err);
            return NULL;
        }
        return err;
    }
    uint64_t id = x->id;
    txn_end(tp, x, now_ns());
    if (noreply)
        return NULL;
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "txn_id", (double)id);
    cJSON_AddBoolToObject(res, "discarded", true);
    return result_reply(r->id, res);
}

/* Re-read the configuration file, as SIGHUP does, and say whether it was taken: for
 * `systemctl reload` (profctl reload), which then fails on a bad file. Only root and the
 * daemon's own user may. */
static cJSON *cmd_reload(struct request *r)
{
    if (r->c->peer.uid != 0 && r->c->peer.uid != geteuid())
        return proto_error_reply(r->id, PE_PERMISSION_DENIED,
                                 "permission denied: only root and profd's own user (uid %u) "
                                 "may reload its configuration", (unsigned)geteuid());
    char err[600] = "";
    if (!server_reload || server_reload(err, sizeof(err)) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "configuration refused, the running "
                                 "one stays: %s", err[0] ? err : "no configuration to reload");
    cJSON *res = cJSON_CreateObject();
    cJSON_AddBoolToObject(res, "reloaded", 1);
    return result_reply(r->id, res);
}

struct command {
    const char *name;
    cJSON *(*fn)(struct request *r);
    bool pid_required;  /* "pid" names a process the client must be allowed to profile */
    bool pid_optional;
};

static const struct command commands[] = {
    {"hello", cmd_hello, false, false},
    {"attach", cmd_attach, true, false},
    {"detach", cmd_detach, true, false},
    {"list", cmd_list, false, false},
    {"status", cmd_status, false, true},
    {"slice", cmd_slice, true, false},
    {"configure", cmd_configure, true, false},
    {"txn_start", cmd_txn_start, false, false},
    {"txn_finish", cmd_txn_finish, false, false},
    {"txn_discard", cmd_txn_discard, false, false},
    {"reload", cmd_reload, false, false},
};

cJSON *commands_dispatch(struct client *c, const cJSON *req)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    /* A number too large for a double (1e999) reads as infinity, which the reply would carry
     * as null: the client could not match it. */
    if (id && !(cJSON_IsNumber(id) && isfinite(id->valuedouble)) && !cJSON_IsString(id))
        return proto_error_reply(NULL, PE_BAD_REQUEST, "\"id\" must be a number or a string");
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
    if (!cJSON_IsString(cmd) || !cmd->valuestring)
        return proto_error_reply(id, PE_BAD_REQUEST, "request has no \"cmd\" string");
    const struct command *k = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
        if (!strcmp(commands[i].name, cmd->valuestring))
            k = &commands[i];
    if (!c->handshaken && (!k || k->fn != cmd_hello))
        return proto_error_reply(id, PE_HANDSHAKE_REQUIRED,
                                 "the first request must be {\"cmd\": \"hello\", \"version\": %d}",
                                 PROTO_VERSION);
    if (!k)
        return proto_error_reply(id, PE_UNKNOWN_COMMAND, "unknown command \"%.64s\"",
                                 cmd->valuestring);
    struct request r = {.c = c, .req = req, .id = id};
    if (k->pid_required || k->pid_optional) {
        int64_t pid = 0;
        int got = json_get_i64(req, "pid", &pid);
        if (got < 0 || (got && (pid <= 0 || pid > 0x3fffffff)))
            return proto_error_reply(id, PE_BAD_REQUEST, "\"pid\" must be a positive integer");
        if (!got && k->pid_required)
            return proto_error_reply(id, PE_BAD_REQUEST, "%s needs \"pid\"", k->name);
        if (got) {
            r.pid = (pid_t)pid;
            r.t = target_find(r.pid);
            /* An attach of a pid reused since its target exited is about the process that
             * has it now: checked against its credentials, not the old one's. */
            if (k->fn == cmd_attach && target_is_previous(r.t))
                r.t = NULL;
            char why[256];
            int e = may_access(c, r.t, r.pid, why, sizeof(why));
            if (e < 0) {
                if (e == -EPERM)
                    log_info("refused %s of %d to pid %d (uid %u): %s", k->name, r.pid,
                             c->peer.pid, c->peer.uid, why);
                return proto_error_reply(id, errno_code(-e), "%s", why);
            }
        }
    }
    return k->fn(&r);
}
