/* txn.c: the transactions of applications (see txn.h). */
#include "txn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "export.h"
#include "log.h"
#include "memory.h"
#include "schedule.h"
#include "server.h"
#include "worker.h"
#include "target.h"
#include "util.h"

static struct {
    struct ev_loop *loop;
    uint64_t linger_ns;
    uint64_t next_seq;
    struct txn_proc *procs;
    ev_timer attach_w; /* queued attaches, run after the replies are out */
} g;

struct txn_proc *txn_proc_find(pid_t pid)
{
    for (struct txn_proc *p = g.procs; p; p = p->next)
        if (p->pid == pid)
            return p;
    return NULL;
}

/* What a transaction holds (memory.h counts it). */
static size_t txn_bytes(const struct txn *x)
{
    return sizeof(*x) + (x->name ? strlen(x->name) + 1 : 0) +
           (x->trace_id ? strlen(x->trace_id) + 1 : 0) +
           (x->span_id ? strlen(x->span_id) + 1 : 0) +
           (x->refused_why ? strlen(x->refused_why) + 1 : 0);
}

static void txn_free(struct txn *x)
{
    memory_txns_add(-(ssize_t)txn_bytes(x));
    free(x->refused_why);
    free(x->name);
    free(x->trace_id);
    free(x->span_id);
    free(x);
}

static void uuid_hex(char out[33])
{
    uint8_t b[16];
    if (getrandom(b, sizeof(b), 0) != sizeof(b)) {
        /* Not random, but unique within this daemon. */
        uint64_t t = now_ns(), s = g.next_seq;
        memcpy(b, &t, 8);
        memcpy(b + 8, &s, 8);
    }
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void arm_linger(struct txn_proc *tp);

/* Detach a process nobody needs any more: no open transaction, not attached explicitly,
 * and none for the linger time. */
static void on_linger(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct txn_proc *tp = w->data;
    struct target *t = target_find(tp->pid);
    if (tp->open || !t || t->state != T_ATTACHED || t->explicit_attach)
        return;
    if (t->tctx.stats.with != tp->ctx_with) {
        /* Its transactions are published in its thread context, without messages: some
         * ran since the last look. */
        tp->ctx_with = t->tctx.stats.with;
        arm_linger(tp);
        return;
    }
    log_info("pid %d: no transaction for %.1f s: detaching", tp->pid,
             (double)g.linger_ns / 1e9);
    target_detach(t, NULL, NULL);
}

static void arm_linger(struct txn_proc *tp)
{
    ev_timer_stop(g.loop, &tp->linger);
    struct target *t = target_find(tp->pid);
    if (tp->open || !t || t->state != T_ATTACHED || t->explicit_attach)
        return;
    ev_timer_set(&tp->linger, (double)g.linger_ns / 1e9, 0);
    ev_timer_start(g.loop, &tp->linger);
}

void txn_context_used(pid_t pid)
{
    struct txn_proc *tp = txn_proc_find(pid);
    if (tp) {
        struct target *t = target_find(pid);
        tp->ctx_with = t ? t->tctx.stats.with : 0;
        arm_linger(tp);
    }
}

void txn_target_changed(pid_t pid)
{
    struct txn_proc *tp = txn_proc_find(pid);
    if (tp)
        arm_linger(tp);
}

/* Attach a process for its transactions (tp->attaching is cleared). */
static void attach_now(struct txn_proc *tp)
{
    tp->attaching = false;
    struct target *t = target_find(tp->pid);
    if (t && !target_is_previous(t))
        return; /* attached meanwhile; or it exited: its samples stay until forgotten */
    if (!tp->open)
        return; /* every transaction ended before we got to it */
    if (t) {
        /* The pid is another process's now (target_attach forgets the old target): so are
         * its transactions from here on; the ended ones of the old process go with it. */
        while (tp->done) {
            struct txn *x = tp->done;
            tp->done = x->next;
            txn_free(x);
        }
        tp->done_tail = NULL;
        tp->ndone = 0;
    }
    char why[256] = "";
    int r = sched_attach(tp->pid, server_cfg.default_mode, server_cfg.default_hz,
                          server_cfg.default_buffer_ns, server_cfg.default_sampler, &t, why,
                          sizeof(why));
    if (r < 0) {
        tp->attach_err = r;
        snprintf(tp->attach_why, sizeof(tp->attach_why), "%s", why[0] ? why : strerror(-r));
        log_info("pid %d: cannot attach for its transactions: %s", tp->pid, tp->attach_why);
        return;
    }
    tp->attach_err = 0;
    t->owner_uid = tp->uid;
    export_attached(t, NULL, NULL, 0, false);
    log_info("pid %d attached for its transactions", tp->pid);
    worker_warm(t); /* its first finish then costs what the later ones do */
}

static void on_attach(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    for (struct txn_proc *tp = g.procs; tp; tp = tp->next)
        if (tp->attaching)
            attach_now(tp);
}

static struct txn_proc *proc_get(pid_t pid)
{
    struct txn_proc *tp = txn_proc_find(pid);
    if (!tp) {
        tp = xcalloc(1, sizeof(*tp));
        tp->pid = pid;
        ev_timer_init(&tp->linger, on_linger, 0, 0);
        tp->linger.data = tp;
        tp->next = g.procs;
        g.procs = tp;
    }
    return tp;
}

struct txn *txn_start(pid_t pid, pid_t tid, uint64_t id, const char *name,
                      const char *trace_id, const char *span_id, uint64_t client,
                      uint64_t start_ns, uid_t uid,
                      bool attach_sync)
{
    struct txn_proc *tp = proc_get(pid);
    if (!tp->uid)
        tp->uid = uid;
    struct txn *x = xcalloc(1, sizeof(*x));
    x->id = id;
    uuid_hex(x->uuid);
    x->name = xstrdup(name);
    x->trace_id = trace_id ? xstrdup(trace_id) : NULL;
    x->span_id = span_id ? xstrdup(span_id) : NULL;
    x->pid = pid;
    x->tid = tid;
    x->start_ns = start_ns;
    x->client = client;
    x->next = tp->open_list;
    tp->open_list = x;
    tp->open++;
    memory_txns_add((ssize_t)txn_bytes(x));
    ev_timer_stop(g.loop, &tp->linger);
    struct target *t = target_find(pid);
    if (!t || t->state == T_EXITED) {
        /* (An exited target of this pid is a previous process: the caller lives.) */
        tp->attaching = true;
        tp->attach_err = 0;
        tp->uid = uid; /* the attach is this caller's */
        if (attach_sync) {
            attach_now(tp);
            return x;
        }
        if (!ev_is_active(&g.attach_w)) {
            ev_timer_set(&g.attach_w, 0, 0);
            ev_timer_start(g.loop, &g.attach_w);
        }
    }
    return x;
}

void txn_refuse(pid_t pid, uint64_t id, uint64_t client, int code, const char *why)
{
    struct txn_proc *tp = proc_get(pid);
    struct txn *x = xcalloc(1, sizeof(*x));
    x->id = id;
    x->pid = pid;
    x->client = client;
    x->refused = true;
    x->refused_code = code;
    x->refused_why = xstrdup(why);
    x->next = tp->open_list;
    tp->open_list = x;
    tp->refused++;
    memory_txns_add((ssize_t)txn_bytes(x));
}

struct txn *txn_find_open(pid_t pid, uint64_t client, uint64_t id)
{
    struct txn_proc *tp = txn_proc_find(pid);
    for (struct txn *x = tp ? tp->open_list : NULL; x; x = x->next)
        if (x->id == id && x->client == client)
            return x;
    return NULL;
}

uint64_t txn_new_id(pid_t pid, uint64_t client)
{
    uint64_t id;
    do
        id = ++g.next_seq;
    while (txn_find_open(pid, client, id));
    return id;
}

void txn_end(struct txn_proc *tp, struct txn *x, uint64_t now)
{
    for (struct txn **p = &tp->open_list; *p; p = &(*p)->next) {
        if (*p == x) {
            *p = x->next;
            break;
        }
    }
    x->next = NULL;
    if (x->refused) {
        tp->refused--;
        txn_free(x);
        return;
    }
    x->end_ns = now > x->start_ns ? now : x->start_ns + 1;
    tp->open--;
    tp->last_end_ns = now;
    /* Ends come in time order: the queue stays sorted by end_ns. */
    if (tp->done_tail)
        tp->done_tail->next = x;
    else
        tp->done = x;
    tp->done_tail = x;
    ++tp->ndone;
    while (tp->done != x && (tp->ndone > TXN_MAX_DONE || memory_txns_shed())) {
        struct txn *old = tp->done;
        tp->done = old->next;
        txn_free(old);
        tp->ndone--;
        tp->forgotten++;
    }
    arm_linger(tp);
}

void txn_client_gone(uint64_t client, uint64_t now)
{
    for (struct txn_proc *tp = g.procs; tp; tp = tp->next) {
        struct txn *x = tp->open_list;
        while (x) {
            struct txn *next = x->next;
            if (x->client == client) {
                if (!x->refused)
                    log_debug("pid %d: transaction %" PRIu64 " (%s) discarded: its "
                              "connection closed", tp->pid, x->id, x->name);
                txn_end(tp, x, now);
            }
            x = next;
        }
    }
}

void txn_each(pid_t pid, void (*fn)(const struct txn *x, void *arg), void *arg)
{
    struct txn_proc *tp = txn_proc_find(pid);
    if (!tp)
        return;
    for (const struct txn *x = tp->done; x; x = x->next)
        fn(x, arg);
    for (const struct txn *x = tp->open_list; x; x = x->next)
        if (!x->refused)
            fn(x, arg);
}

void txn_expire(uint64_t now)
{
    struct txn_proc **pp = &g.procs;
    while (*pp) {
        struct txn_proc *tp = *pp;
        struct target *t = target_find(tp->pid);
        uint64_t keep = t ? t->buffer_ns : server_cfg.default_buffer_ns;
        uint64_t before = now > keep ? now - keep : 0;
        while (tp->done && tp->done->end_ns < before) {
            struct txn *x = tp->done;
            tp->done = x->next;
            txn_free(x);
            tp->ndone--;
        }
        if (!tp->done)
            tp->done_tail = NULL;
        if (!tp->done && !tp->open_list && !tp->attaching && !target_find(tp->pid)) {
            ev_timer_stop(g.loop, &tp->linger);
            *pp = tp->next;
            free(tp);
        } else {
            pp = &tp->next;
        }
    }
}

void txn_set_linger(uint64_t linger_ns)
{
    g.linger_ns = linger_ns;
}

void txn_init(struct ev_loop *loop, uint64_t linger_ns)
{
    g.loop = loop;
    g.linger_ns = linger_ns;
    ev_timer_init(&g.attach_w, on_attach, 0, 0);
}

void txn_shutdown(void)
{
    if (!g.loop)
        return;
    ev_timer_stop(g.loop, &g.attach_w);
    while (g.procs) {
        struct txn_proc *tp = g.procs;
        g.procs = tp->next;
        ev_timer_stop(g.loop, &tp->linger);
        for (struct txn **l = &tp->open_list; l; l = l == &tp->open_list ? &tp->done : NULL)
            while (*l) {
                struct txn *x = *l;
                *l = x->next;
                txn_free(x);
            }
        free(tp);
    }
}
