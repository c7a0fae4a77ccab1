/* cmd_slice.c: the slice command: a window's wait for its last stops, its hand-over to
 * the worker and the reply the worker encodes (also for txn_finish's profiles). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "commands_internal.h"
#include "log.h"
#include "memory.h"
#include "perms.h"
#include "proto.h"
#include "sampler.h"
#include "schedule.h"
#include "server.h"
#include "slice.h"
#include "target.h"
#include "txn.h"
#include "util.h"
#include "worker.h"

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
        if (job->say_tctx)
            cJSON_AddBoolToObject(res, "thread_context", job->tctx);
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
        if (th->smp.ps.armed && !th->smp.ps.continuous && th->smp.ps.armed_ns <= to &&
            now - th->smp.ps.armed_ns < ONESHOT_WAIT_NS)
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
    /* Later ticks take no clock sample from inside this window (kcopy.c perf_latest). */
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
        slice_add_txns(job);
    }
    job->say_tctx = w->say_tctx;
    job->tctx = w->tctx;
    job->has_only_span = w->has_span;
    job->has_only_trace = w->has_trace;
    job->by_span = w->by_span;
    memcpy(job->only_span, w->span, sizeof(w->span));
    memcpy(job->only_trace, w->trace, sizeof(w->trace));
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

/* A span or trace id in hex (n bytes: 2n digits, either case) into out. */
static bool hex_id(const cJSON *j, uint8_t *out, size_t n)
{
    if (!cJSON_IsString(j) || !j->valuestring || strlen(j->valuestring) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = profile_hexval(j->valuestring[2 * i]), lo = profile_hexval(j->valuestring[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

cJSON *cmd_slice(struct request *r)
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
    struct slice_window_in win = {
        .has_last = has_last, .has_from = has_from, .has_to = has_to,
        .last_ns = last_ns, .from_ns = from, .to_ns = to, .now_ns = now,
        .exited = r->t->state == T_EXITED, .exit_ns = r->t->exit_ns,
        .have_oldest = r->t->ring.len > 0,
        .oldest_ns = r->t->ring.len ? ring_at(&r->t->ring, 0)->t_ns : 0,
        .attach_ns = r->t->attach_ns, .from_attach = format == SLICE_SENTRY};
    if (slice_window(&win, &from, &to) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"from_ns\" is after \"to_ns\"");
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
    uint8_t span[8], trace[16];
    const cJSON *jspan = cJSON_GetObjectItemCaseSensitive(r->req, "span");
    const cJSON *jtrace = cJSON_GetObjectItemCaseSensitive(r->req, "trace");
    const cJSON *by_span = cJSON_GetObjectItemCaseSensitive(r->req, "by_span");
    if (jspan && !hex_id(jspan, span, sizeof(span)))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"span\" must be a span id: 16 hex "
                                 "digits");
    if (jtrace && !hex_id(jtrace, trace, sizeof(trace)))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"trace\" must be a trace id: 32 hex "
                                 "digits");
    if (by_span && !cJSON_IsBool(by_span))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"by_span\" must be a boolean");
    if (cJSON_IsTrue(by_span) && by && cJSON_IsTrue(by))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "split by span or by transaction, not "
                                 "both");
    struct slice_wait *w = new_slice_wait(r, r->pid, from, to, (enum slice_format)format);
    w->has_span = jspan != NULL;
    w->has_trace = jtrace != NULL;
    w->by_span = cJSON_IsTrue(by_span);
    memcpy(w->span, span, jspan ? sizeof(span) : 0);
    memcpy(w->trace, trace, jtrace ? sizeof(trace) : 0);
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
struct slice_wait *new_slice_wait(struct request *r, pid_t pid, uint64_t from,
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
cJSON *submit_slice(struct client *c, struct target *t, struct slice_wait *w)
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
