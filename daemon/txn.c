/* txn.c: the transactions of applications (see txn.h). */
#include "txn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"
#include "server.h"
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

static void txn_free(struct txn *x)
{
    free(x->name);
    free(x->trace_id);
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

void txn_target_changed(pid_t pid)
{
    struct txn_proc *tp = txn_proc_find(pid);
    if (tp)
        arm_linger(tp);
}

static void on_attach(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    for (struct txn_proc *tp = g.procs; tp; tp = tp->next) {
        if (!tp->attaching)
            continue;
        tp->attaching = false;
        struct target *t = target_find(tp->pid);
        if (t && t->state != T_EXITED)
            continue;
        if (!tp->open)
            continue; /* every transaction ended before we got to it */
        if (t)
            continue; /* it exited: its samples stay until forgotten */
        char why[256] = "";
        int r = target_attach(tp->pid, server_cfg.default_mode, server_cfg.default_hz,
                              server_cfg.default_buffer_ns, &t, why, sizeof(why));
        if (r < 0) {
            tp->attach_err = r;
            snprintf(tp->attach_why, sizeof(tp->attach_why), "%s", why[0] ? why : strerror(-r));
            log_info("pid %d: cannot attach for its transactions: %s", tp->pid, tp->attach_why);
            continue;
        }
        tp->attach_err = 0;
        t->owner_uid = tp->uid;
        log_info("pid %d attached for its transactions", tp->pid);
    }
}

struct txn *txn_start(pid_t pid, pid_t tid, const char *name, const char *trace_id,
                      uint64_t client, uint64_t now)
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
    struct txn *x = xcalloc(1, sizeof(*x));
    x->seq = ++g.next_seq;
    uuid_hex(x->uuid);
    x->name = xstrdup(name);
    x->trace_id = trace_id ? xstrdup(trace_id) : NULL;
    x->pid = pid;
    x->tid = tid;
    x->start_ns = now;
    x->client = client;
    x->next = tp->txns;
    tp->txns = x;
    tp->open++;
    ev_timer_stop(g.loop, &tp->linger);
    struct target *t = target_find(pid);
    if (!t || t->state == T_EXITED) {
        tp->attaching = true;
        tp->attach_err = 0;
        if (!ev_is_active(&g.attach_w)) {
            ev_timer_set(&g.attach_w, 0, 0);
            ev_timer_start(g.loop, &g.attach_w);
        }
    }
    return x;
}

struct txn *txn_find_open(pid_t pid, uint64_t seq)
{
    struct txn_proc *tp = txn_proc_find(pid);
    for (struct txn *x = tp ? tp->txns : NULL; x; x = x->next)
        if (x->seq == seq && !x->end_ns)
            return x;
    return NULL;
}

void txn_end(struct txn_proc *tp, struct txn *x, bool discard, uint64_t now)
{
    if (!x->end_ns) {
        x->end_ns = now > x->start_ns ? now : x->start_ns + 1;
        tp->open--;
        tp->last_end_ns = now;
    }
    if (discard) {
        for (struct txn **p = &tp->txns; *p; p = &(*p)->next) {
            if (*p == x) {
                *p = x->next;
                break;
            }
        }
        txn_free(x);
    }
    arm_linger(tp);
}

void txn_client_gone(uint64_t client, uint64_t now)
{
    for (struct txn_proc *tp = g.procs; tp; tp = tp->next) {
        struct txn *x = tp->txns;
        while (x) {
            struct txn *next = x->next;
            if (!x->end_ns && x->client == client) {
                log_debug("pid %d: transaction %" PRIu64 " (%s) discarded: its connection "
                          "closed", tp->pid, x->seq, x->name);
                txn_end(tp, x, true, now);
            }
            x = next;
        }
    }
}

void txn_expire(uint64_t now)
{
    struct txn_proc **pp = &g.procs;
    while (*pp) {
        struct txn_proc *tp = *pp;
        struct target *t = target_find(tp->pid);
        uint64_t keep = t ? t->buffer_ns : server_cfg.default_buffer_ns;
        uint64_t before = now > keep ? now - keep : 0;
        for (struct txn **p = &tp->txns; *p;) {
            struct txn *x = *p;
            if (x->end_ns && x->end_ns < before) {
                *p = x->next;
                txn_free(x);
            } else {
                p = &x->next;
            }
        }
        if (!tp->txns && !tp->attaching && !target_find(tp->pid)) {
            ev_timer_stop(g.loop, &tp->linger);
            *pp = tp->next;
            free(tp);
        } else {
            pp = &tp->next;
        }
    }
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
        while (tp->txns) {
            struct txn *x = tp->txns;
            tp->txns = x->next;
            txn_free(x);
        }
        free(tp);
    }
}
