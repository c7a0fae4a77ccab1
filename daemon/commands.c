/* commands.c: the request table. Requests are validated in a fixed order before any handler
 * runs: JSON object, handshake, known command, argument types, permission. Handlers build
 * a reply and never touch the socket; the status and list commands are in cmd_status.c,
 * slices in cmd_slice.c, transactions in cmd_txn.c. */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "commands_internal.h"
#include "export.h"
#include "log.h"
#include "memory.h"
#include "perms.h"
#include "proto.h"
#include "schedule.h"
#include "server.h"
#include "target.h"
#include "txn.h"
#include "util.h"
#include "worker.h"

cJSON *result_reply(const cJSON *id, cJSON *result)
{
    cJSON *r = cJSON_CreateObject();
    if (id)
        cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 1));
    cJSON_AddItemToObject(r, "result", result);
    return r;
}

enum proto_error errno_code(int e)
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

/* May the client see target t? Checked against the process's live credentials, or, once
 * it has exited (or vanished before its exit was reaped), those recorded at attach. */
int may_access(const struct client *c, const struct target *t, pid_t pid, char *why,
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
int admit(const struct client *c, const struct target *t, pid_t pid, bool new_target,
          char *why, size_t whylen)
{
    /* Not logged here: a refused transaction start may come thousands of times a second. */
    int r = may_access(c, t, pid, why, whylen);
    if (r < 0)
        return r;
    return new_target ? limits_check(c, why, whylen) : 0;
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

/* What an attach asks of the export: "service" (a name), "labels" ({"KEY": "VALUE"}),
 * "export" (false: this process stays local). */
struct attach_export {
    const char *service;
    char *labels[EXPORT_MAX_LABELS];
    char buf[EXPORT_MAX_LABELS][330];
    size_t nlabels;
    bool off;
};

static cJSON *attach_export_parse(struct request *r, struct attach_export *ax)
{
    memset(ax, 0, sizeof(*ax));
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(r->req, "service");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(r->req, "labels");
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(r->req, "export");
    if (sv && (!cJSON_IsString(sv) || !sv->valuestring[0] || strlen(sv->valuestring) > 128 ||
               strpbrk(sv->valuestring, "{},=\"\n\r\t")))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"service\" must be a name of 1 to "
                                 "128 bytes without {},=\" or control characters");
    if (ex && !cJSON_IsBool(ex))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"export\" must be a boolean");
    if (lb && !cJSON_IsObject(lb))
        return proto_error_reply(r->id, PE_BAD_REQUEST, "\"labels\" must be an object of "
                                 "strings");
    const cJSON *l;
    cJSON_ArrayForEach(l, lb) {
        if (ax->nlabels == EXPORT_MAX_LABELS)
            return proto_error_reply(r->id, PE_BAD_REQUEST, "at most %d labels",
                                     EXPORT_MAX_LABELS);
        char *kv = ax->buf[ax->nlabels];
        int n = cJSON_IsString(l) ? snprintf(kv, sizeof(ax->buf[0]), "%s=%s", l->string,
                                             l->valuestring) : -1;
        if (n < 0 || (size_t)n >= sizeof(ax->buf[0]) || !export_label_ok(kv))
            return proto_error_reply(r->id, PE_BAD_REQUEST, "label \"%.64s\": a key is a letter "
                                     "or '_' then letters, digits or '_' (at most 64), its "
                                     "value a string of at most 256 printable bytes",
                                     l->string ? l->string : "");
        ax->labels[ax->nlabels++] = kv;
    }
    ax->service = sv ? sv->valuestring : NULL;
    ax->off = ex && cJSON_IsFalse(ex);
    return NULL;
}

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
    struct attach_export ax;
    cJSON *bad = attach_export_parse(r, &ax);
    if (bad)
        return bad;
    struct target *t;
    e = sched_attach(r->pid, mode, (unsigned)hz, buffer_ns, sampler, &t, why, sizeof(why));
    if (e < 0)
        return proto_error_reply(r->id, errno_code(-e), "%s",
                                 why[0] ? why : strerror(-e));
    t->owner_uid = r->c->peer.uid;
    t->explicit_attach = true;
    export_attached(t, ax.service, ax.labels, ax.nlabels, ax.off);
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
    {"txn_profile", cmd_txn_profile, false, false},
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
