/* export.c: windows of every exported target, their encoding for each backend, and the
 * queues that send them (export.h).
 *
 * On the loop: a timer closes each target's window every interval (up to EXPORT_LAG_NS ago,
 * so that the samples of that time have all arrived: a ptrace stop's sample comes after its
 * tick) and hands it to the worker as a slice job; the job's profile is encoded there, once
 * per exporter, and each body written to the spool; back on the loop the records join their
 * exporter's queue, which sends one at a time, oldest first. */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "endpoint.h"
#include "export_internal.h"
#include "http.h"
#include "log.h"
#include "profile.h"
#include "proto.h"
#include "retry.h"
#include "slice.h"
#include "spool.h"
#include "target.h"
#include "txn.h"
#include "util.h"
#include "worker.h"

/* How far behind now a window closes: the samples of its ticks have arrived by then. */
#define EXPORT_LAG_NS (300 * NS_PER_MS)

struct exporter exporters[EX_COUNT] = {
    [EX_SENTRY] = {.name = "sentry", .category = "profile_chunk"},
    [EX_PYROSCOPE] = {.name = "pyroscope"},
    [EX_OTLP] = {.name = "otlp"},
};

/* What the export keeps of an attached process. */
struct export_target {
    pid_t pid;
    uint64_t attach_ns;     /* with pid, which attach */
    char *service;
    char **labels;          /* "KEY=VALUE" */
    size_t nlabels;
    char profiler_id[33];
    uint64_t from_ns;       /* the next window's start (CLOCK_MONOTONIC) */
    int64_t rt_offset_ns;   /* real time - CLOCK_MONOTONIC, at the attach: one for all its
                               windows, so that they meet in real time as they do here */
    bool forgotten;         /* its target is gone: freed once no window is at the worker */
    uint64_t windows, samples, empty; /* windows encoded, their samples; windows empty */
    uint64_t lost;          /* windows that could not be built (out of memory, shutdown) */
    unsigned pending;       /* windows at the worker */
    bool stopped;           /* its last window has gone */
    struct export_target *next;
};

static struct {
    struct ev_loop *loop;
    bool on;
    uint64_t interval_ns, timeout_ns, spool_max;
    char *spool_dir;        /* NULL: no spool (records in memory) */
    char host[256];
    ev_timer tick;
    struct export_target *targets;
    unsigned pending;       /* windows at the worker, all targets */
    uint64_t spool_bytes;   /* every queued record's size */
} g;

/* ---- Targets ---------------------------------------------------------------------------- */

static struct export_target *find(const struct target *t)
{
    for (struct export_target *e = g.targets; e; e = e->next)
        if (e->pid == t->pid && e->attach_ns == t->attach_ns)
            return e;
    return NULL;
}

static void unlink_target(struct export_target *e)
{
    for (struct export_target **p = &g.targets; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    free(e->service);
    for (size_t i = 0; i < e->nlabels; i++)
        free(e->labels[i]);
    free(e->labels);
    free(e);
}

bool export_label_ok(const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t kl = eq ? (size_t)(eq - kv) : 0;
    if (!kl || kl > 64 || strlen(eq + 1) > 256 || (kv[0] >= '0' && kv[0] <= '9'))
        return false;
    for (size_t i = 0; i < kl; i++)
        if (!(kv[i] == '_' || (kv[i] >= 'a' && kv[i] <= 'z') || (kv[i] >= 'A' && kv[i] <= 'Z') ||
              (kv[i] >= '0' && kv[i] <= '9')))
            return false;
    for (const char *v = eq + 1; *v; v++)
        if ((unsigned char)*v < ' ' || *v == 0x7f)
            return false;
    return true;
}

void export_attached(struct target *t, const char *service, char *const *labels,
                     size_t nlabels, bool off)
{
    if (!g.on || off)
        return;
    uint8_t raw[16];
    char profiler_id[33];
    int r = profile_random_id(raw, profiler_id);
    if (r < 0) {
        log_warn("%d (%s) is not exported: no random profiler_id: %s", t->pid, t->comm,
                 strerror(-r));
        return;
    }
    struct export_target *e = xcalloc(1, sizeof(*e));
    memcpy(e->profiler_id, profiler_id, sizeof(e->profiler_id));
    e->pid = t->pid;
    e->attach_ns = t->attach_ns;
    e->from_ns = t->attach_ns;
    e->rt_offset_ns = (int64_t)(realtime_ns() - now_ns());
    e->service = service && *service ? xstrdup(service) : export_default_service(t);
    e->labels = xcalloc(nlabels ? nlabels : 1, sizeof(*e->labels));
    for (size_t i = 0; i < nlabels && i < EXPORT_MAX_LABELS; i++)
        e->labels[e->nlabels++] = xstrdup(labels[i]);
    e->next = g.targets;
    g.targets = e;
    log_info("exporting %d (%s) as service \"%s\"", t->pid, t->comm, e->service);
}

const char *export_profiler_id(const struct target *t)
{
    struct export_target *e = g.on ? find(t) : NULL;
    return e ? e->profiler_id : NULL;
}

/* ---- Windows ---------------------------------------------------------------------------- */

static void window_free(struct export_window *w)
{
    for (size_t i = 0; i < w->nout; i++) {
        free(w->out[i].path);
        free(w->out[i].mem);
    }
    free(w->service);
    free(w->spool_dir);
    for (size_t i = 0; i < w->nlabels; i++)
        free(w->labels[i]);
    free(w->labels);
    free(w);
}

static void window_done(struct slice_job *job);

/* Hand [e->from_ns, to] of t to the worker. */
static void submit(struct export_target *e, struct target *t, uint64_t to)
{
    if (to < e->from_ns)
        return;
    struct export_window *w = xcalloc(1, sizeof(*w));
    w->pid = e->pid;
    w->from_ns = e->from_ns;
    w->to_ns = to;
    w->service = xstrdup(e->service);
    w->labels = xcalloc(e->nlabels ? e->nlabels : 1, sizeof(*w->labels));
    for (size_t i = 0; i < e->nlabels; i++)
        w->labels[w->nlabels++] = xstrdup(e->labels[i]);
    memcpy(w->profiler_id, e->profiler_id, sizeof(w->profiler_id));
    w->host = g.host;
    for (int x = 0; x < EX_COUNT; x++)
        w->want[x] = exporters[x].on;
    w->spool_dir = g.spool_dir ? xstrdup(g.spool_dir) : NULL;
    e->from_ns = to + 1;
    struct slice_job *job = slice_begin(t, w->from_ns, w->to_ns, SLICE_PPROF);
    job->realtime_offset_ns = e->rt_offset_ns;
    /* Later ticks take no clock sample from inside this window (kcopy.c perf_latest): a
     * sample of its time that came now would be in no window. */
    if (to > t->sliced_to_ns)
        t->sliced_to_ns = to;
    /* Symbolized with the process's own rights: it mapped those files. */
    gid_t *gid = xmalloc(sizeof(*gid));
    *gid = t->creds.gid[1];
    job->creds = (struct fs_creds){.uid = t->creds.uid[1], .gid = *gid, .groups = gid,
                                   .ngroups = 1};
    slice_add_txns(job);
    job->on_profile = export_encode;
    job->ctx = w;
    job->done = window_done;
    e->pending++;
    g.pending++;
    worker_submit(job);
}

/* The samples of a target's ticks up to now are in its ring (a slice does the same). */
static void catch_up(struct target *t)
{
    if (t->state != T_ATTACHED)
        return;
    sched_catch_up(t->sched, false);
    sampler_flush(t);
}

static void on_tick(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)w;
    (void)revents;
    uint64_t now = now_ns();
    for (struct export_target *e = g.targets; e; e = e->next) {
        struct target *t = target_find(e->pid);
        if (e->stopped || !t || t->attach_ns != e->attach_ns || t->state != T_ATTACHED)
            continue;
        catch_up(t);
        if (now > EXPORT_LAG_NS)
            submit(e, t, now - EXPORT_LAG_NS);
    }
}

/* Called when t stops sampling (its exit, or a detach begins), and again when it is
 * forgotten: its status keeps its export's counts until then. */
void export_target_stopped(struct target *t)
{
    struct export_target *e = g.on ? find(t) : NULL;
    if (!e)
        return;
    if (e->stopped) {
        e->forgotten = true;
        if (!e->pending)
            unlink_target(e);
        return;
    }
    e->stopped = true;
    uint64_t end = t->state == T_EXITED && t->exit_ns ? t->exit_ns : now_ns();
    submit(e, t, end);
}

/* Back from the worker (loop): the window's records join their queues. */
static void window_done(struct slice_job *job)
{
    struct export_window *w = job->ctx;
    struct export_target *e = NULL;
    for (struct export_target *x = g.targets; x; x = x->next)
        if (x->pid == w->pid && x->profiler_id[0] && !strcmp(x->profiler_id, w->profiler_id))
            e = x;
    g.pending--;
    if (e) {
        e->pending--;
        if (job->err < 0 || w->err < 0) {
            e->lost++;
        } else {
            e->windows++;
            e->samples += w->samples;
            e->empty += w->samples == 0;
        }
    }
    if (job->err < 0 || w->err < 0)
        log_warn("export of %d: the window %" PRIu64 "-%" PRIu64 " could not be built: %s",
                 w->pid, w->from_ns, w->to_ns, strerror(-(job->err < 0 ? job->err : w->err)));
    for (size_t i = 0; i < w->nout; i++) {
        struct export_out *o = &w->out[i];
        queue_add(&exporters[o->ex], o->seq, o->path, o->mem, o->size);
        o->path = o->mem = NULL;
    }
    if (e && e->forgotten && !e->pending)
        unlink_target(e);
    window_free(w);
    slice_job_free(job);
    queue_bound();
    for (int x = 0; x < EX_COUNT; x++)
        queue_pump(&exporters[x]);
}

/* ---- Set-up and status ------------------------------------------------------------------ */

static void take_spooled(uint64_t seq, const char *name, const char *path, size_t size,
                         void *ctx)
{
    (void)ctx;
    for (int x = 0; x < EX_COUNT; x++)
        if (exporters[x].on && !strcmp(exporters[x].name, name)) {
            queue_add(&exporters[x], seq, xstrdup(path), NULL, size);
            return;
        }
    log_warn("spool: %s is for the %s exporter, which is not configured: kept", path, name);
}

bool export_enabled(void)
{
    return g.on;
}

uint64_t export_spool_bytes(void)
{
    return g.spool_bytes;
}

void export_spool_add(int64_t delta)
{
    g.spool_bytes += (uint64_t)delta;
}

uint64_t export_spool_max(void)
{
    return g.spool_max;
}

uint64_t export_timeout_ns(void)
{
    return g.timeout_ns;
}

struct ev_loop *export_ev_loop(void)
{
    return g.loop;
}

const char *export_spool_dir(void)
{
    return g.spool_dir;
}

int export_init(struct ev_loop *loop, const struct export_config *c, char *why, size_t whylen)
{
    g.loop = loop;
    const char *urls[EX_COUNT] = {c->sentry_dsn, c->pyroscope_url, c->otlp_url};
    for (int x = 0; x < EX_COUNT; x++)
        g.on |= urls[x] && *urls[x];
    if (!g.on)
        return 0;
    int r = http_init(loop);
    if (r < 0) {
        snprintf(why, whylen, "export: libcurl could not be set up");
        return r;
    }
    for (int x = 0; x < EX_COUNT; x++) {
        if (!urls[x] || !*urls[x])
            continue;
        r = exporter_setup(&exporters[x], urls[x], why, whylen);
        if (r < 0)
            return r;
    }
    g.interval_ns = c->interval_ns;
    g.timeout_ns = c->timeout_ns;
    g.spool_max = c->spool_max;
    if (gethostname(g.host, sizeof(g.host) - 1) < 0)
        snprintf(g.host, sizeof(g.host), "localhost");
    if (c->spool_dir && *c->spool_dir) {
        r = spool_open(c->spool_dir);
        if (r < 0) {
            log_warn("export: spool %s: %s: unsent profiles are kept in memory only "
                     "(lost if profd stops)", c->spool_dir, strerror(-r));
        } else {
            g.spool_dir = xstrdup(c->spool_dir);
            int n = spool_scan(g.spool_dir, take_spooled, NULL);
            if (n > 0)
                log_info("export: %d profiles spooled by an earlier run, sent now", n);
        }
    }
    double s = (double)g.interval_ns / 1e9;
    ev_timer_init(&g.tick, on_tick, s, s);
    ev_timer_start(loop, &g.tick);
    for (int x = 0; x < EX_COUNT; x++)
        if (exporters[x].on)
            log_info("export: %s to %s every %g s", exporters[x].name, exporters[x].shown, s);
    queue_bound();
    for (int x = 0; x < EX_COUNT; x++)
        queue_pump(&exporters[x]);
    return 0;
}

cJSON *export_describe(void)
{
    if (!g.on)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "interval_s", (double)g.interval_ns / 1e9);
    cJSON_AddStringToObject(o, "spool", g.spool_dir ? g.spool_dir : "");
    cJSON_AddNumberToObject(o, "spool_bytes", (double)g.spool_bytes);
    cJSON_AddNumberToObject(o, "spool_max", (double)g.spool_max);
    cJSON_AddNumberToObject(o, "windows_building", g.pending);
    for (int x = 0; x < EX_COUNT; x++)
        if (exporters[x].on)
            cJSON_AddItemToObject(o, exporters[x].name, queue_describe(&exporters[x]));
    return o;
}

cJSON *export_describe_target(const struct target *t)
{
    struct export_target *e = g.on ? find(t) : NULL;
    if (!e)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "service", e->service);
    cJSON *l = cJSON_AddObjectToObject(o, "labels");
    for (size_t i = 0; i < e->nlabels; i++) {
        const char *eq = strchr(e->labels[i], '=');
        char key[65];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - e->labels[i]), e->labels[i]);
        cJSON_AddStringToObject(l, key, eq + 1);
    }
    cJSON_AddStringToObject(o, "profiler_id", e->profiler_id);
    cJSON_AddNumberToObject(o, "windows", (double)e->windows);
    cJSON_AddNumberToObject(o, "empty_windows", (double)e->empty);
    cJSON_AddNumberToObject(o, "samples", (double)e->samples);
    cJSON_AddNumberToObject(o, "lost_windows", (double)e->lost);
    cJSON_AddNumberToObject(o, "windows_building", e->pending);
    cJSON_AddNumberToObject(o, "exported_to_ns", (double)(e->from_ns - 1));
    return o;
}

void export_shutdown(uint64_t timeout_ns)
{
    if (!g.on)
        return;
    ev_timer_stop(g.loop, &g.tick);
    for (struct export_target *e = g.targets, *next; e; e = next) {
        next = e->next;
        struct target *t = target_find(e->pid);
        if (t && t->attach_ns == e->attach_ns) {
            catch_up(t);
            if (t->state == T_ATTACHED)
                sched_stop(t->sched); /* no sample after its last window */
            export_target_stopped(t);
        }
    }
    uint64_t deadline = now_ns() + timeout_ns;
    while (g.pending && now_ns() < deadline)
        ev_run(g.loop, EVRUN_ONCE);
    if (g.pending)
        log_warn("export: %u windows not encoded by the shutdown's deadline: lost", g.pending);
    for (int x = 0; x < EX_COUNT; x++)
        queue_shutdown(&exporters[x]);
    while (g.targets)
        unlink_target(g.targets);
    http_shutdown();
    free(g.spool_dir);
    g.spool_dir = NULL;
    g.on = false;
}
