/* cmd_txn.c: the transaction commands (txn_start, txn_finish, txn_discard), always of
 * the calling process (the socket's peer). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands_internal.h"
#include "log.h"
#include "proto.h"
#include "sampler.h"
#include "schedule.h"
#include "server.h"
#include "target.h"
#include "txn.h"
#include "util.h"

struct txn_requests txn_requests;

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

/* Is s exactly n hex digits? */
static bool is_hex(const char *s, size_t n)
{
    size_t i = 0;
    for (; s && s[i] && i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return s && i == n && !s[i];
}

cJSON *cmd_txn_start(struct request *r)
{
    txn_requests.start++;
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
    const cJSON *span = cJSON_GetObjectItemCaseSensitive(r->req, "span_id");
    if (span && (!cJSON_IsString(span) || !is_hex(span->valuestring, 16)))
        return start_refused(r, noreply, id, PE_BAD_REQUEST,
                             "\"span_id\" must be a string of 16 hex digits");
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
                              trace ? trace->valuestring : NULL,
                              span ? span->valuestring : NULL, r->c->id, start,
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

/* "lookback_s" (optional, 0 to 3600 s) into *lookback; an error reply if it is not one. */
static cJSON *get_lookback(struct request *r, double *lookback)
{
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(r->req, "lookback_s");
    if (lb && (!cJSON_IsNumber(lb) || !(lb->valuedouble >= 0 && lb->valuedouble <= 3600)))
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "\"lookback_s\" must be seconds from 0 to 3600");
    *lookback = lb ? lb->valuedouble : 0;
    return NULL;
}

cJSON *cmd_txn_finish(struct request *r)
{
    txn_requests.finish++;
    double lookback = 0;
    cJSON *bad = get_lookback(r, &lookback);
    if (bad)
        return bad;
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
    w->say_tctx = true;
    w->tctx = t->state == T_ATTACHED && t->tctx.status == TCTX_OK;
    return submit_slice(r->c, t, w);
}

/* "trace_id" (32 hex digits) and "span_id" (16): the ids of a transaction published in the
 * thread context. */
static bool get_ids(struct request *r, const char **trace, const char **span)
{
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(r->req, "trace_id");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(r->req, "span_id");
    *trace = cJSON_IsString(tr) ? tr->valuestring : NULL;
    *span = cJSON_IsString(sp) ? sp->valuestring : NULL;
    return is_hex(*trace, 32) && is_hex(*span, 16);
}

/* The profile of a transaction the caller published in its thread context (threadctx.h):
 * no txn_start was sent (the client knows profd reads the context: a reply said so). The
 * same profile as a txn_finish's, of the window from its start (by the caller's clock) to
 * now; its samples carry its span. */
cJSON *cmd_txn_profile(struct request *r)
{
    txn_requests.profile++;
    pid_t pid = r->c->peer.pid;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r->req, "name");
    const char *trace, *span;
    if (!cJSON_IsString(name) || !name->valuestring || !name->valuestring[0] ||
        strlen(name->valuestring) > 512)
        return proto_error_reply(r->id, PE_BAD_REQUEST,
                                 "txn_profile needs \"name\": a string of 1 to 512 bytes");
    if (!get_ids(r, &trace, &span))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "txn_profile needs \"trace_id\" (32 "
                                 "hex digits) and \"span_id\" (16)");
    int64_t tid = 0, caller = 0;
    uint64_t now = now_ns(), start = 0, called = 0;
    double lookback = 0;
    cJSON *bad = get_lookback(r, &lookback);
    if (bad)
        return bad;
    if (json_get_i64(r->req, "txn_tid", &tid) <= 0 || tid <= 0 || tid > 0x3fffffff ||
        json_get_i64(r->req, "tid", &caller) < 0 || caller < 0 || caller > 0x3fffffff)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"txn_tid\" (the transaction's "
                                 "thread) and \"tid\" (the caller's) must be thread ids");
    if (json_get_u64(r->req, "start_ns", &start) <= 0 || json_get_u64(r->req, "t_ns", &called) < 0)
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"start_ns\" and \"t_ns\" must be "
                                 "CLOCK_MONOTONIC times in nanoseconds");
    struct target *t = target_find(pid);
    if (!t || t->state != T_ATTACHED || t->tctx.status != TCTX_OK)
        return proto_error_reply(r->id, PE_NOT_ATTACHED, "process %d's thread context is not "
                                 "read (%s): start transactions with txn_start", pid,
                                 !t || t->state != T_ATTACHED ? "not attached"
                                 : t->tctx.why[0] ? t->tctx.why : "none found");
    char why[256];
    int e = admit(r->c, t, pid, false, why, sizeof(why));
    if (e < 0)
        return proto_error_reply(r->id, errno_code(-e), "%s", why);
    /* Not before the attach's samples could be (a start by another clock), not ahead. */
    start = start > now ? now : start;
    called = called > now ? now : called < start ? start : called;
    if (caller != tid)
        called = 0; /* (finished by another thread: its own is not waiting in the call) */
    if (!sched_event(t->sched)) {
        sched_catch_up(t->sched, true);
        sampler_sample_boundary(t, (pid_t)tid, now_ns(), start);
    }
    target_refresh_name(t, (pid_t)tid);
    /* Known from now on as the transactions that sent their start are (slices split by
     * transaction, the spans OTLP links to); ended at once. */
    struct txn *x = txn_start(pid, (pid_t)tid, txn_new_id(pid, r->c->id), name->valuestring,
                              trace, span, r->c->id, start, r->c->peer.uid, false);
    x->end_call_ns = called;
    txn_end(txn_proc_find(pid), x, now);
    txn_context_used(pid);
    uint64_t lb_ns = (uint64_t)(lookback * 1e9);
    struct slice_wait *w = new_slice_wait(r, pid, start > lb_ns ? start - lb_ns : 0, now,
                                          SLICE_SENTRY);
    w->txn.id = xstrdup(x->uuid);
    w->txn.name = xstrdup(name->valuestring);
    w->txn.trace_id = xstrdup(trace);
    w->txn.active_tid = (pid_t)tid;
    w->txn.start_ns = start;
    w->txn.end_ns = now;
    w->txn.end_call_ns = called ? called : now;
    w->say_tctx = true;
    w->tctx = true;
    return submit_slice(r->c, t, w);
}

cJSON *cmd_txn_discard(struct request *r)
{
    txn_requests.discard++;
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
