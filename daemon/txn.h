/* txn.h: transactions that applications mark with the client library (txn_start/finish).
 *
 * A transaction belongs to the process that started it (the socket's peer) and to the
 * connection it came over: when that connection closes, its open transactions are
 * discarded. A process is attached at its first transaction (after the reply: a start never
 * waits for an attach) and stays attached while any transaction is open or a client
 * attached it explicitly; after its last transaction ends it is detached once it has had
 * none for the linger time, so a steady stream of requests does not re-attach every time.
 * Ended transactions (finished or discarded) are kept as long as the samples they cover (at
 * most TXN_MAX_DONE per process, fewer when max_memory is reached), so slices can be split
 * by transaction. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

struct txn {
    uint64_t id;             /* the caller's number for it, unique on its connection */
    char uuid[33];           /* the Sentry transaction id (32 hex digits) */
    char *name;
    char *trace_id;          /* 32 hex digits, or NULL */
    char *span_id;           /* 16 hex digits, or NULL */
    pid_t pid, tid;          /* process, and the thread that started it (0: unknown) */
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC; end_ns 0 while open */
    /* When its thread called txn_finish (the caller's clock; 0: unknown, or another thread
     * called it): from then until end_ns, when profd read the finish, that thread waits
     * inside the client. */
    uint64_t end_call_ns;
    uint64_t client;         /* connection that owns it while open */
    /* A start sent without waiting for its reply and refused: why, for its finish. */
    bool refused;
    int refused_code;        /* its protocol error code (PE_*) */
    char *refused_why;
    struct txn *next;
};

/* Most transactions one process may have open (and refused starts not yet ended). */
#define TXN_MAX_OPEN 65536
/* Most ended transactions kept per process (for splitting slices by transaction): beyond
 * it the oldest are forgotten before their samples are. */
#define TXN_MAX_DONE 100000

/* The transactions of one process. */
struct txn_proc {
    pid_t pid;
    struct txn *open_list;   /* open ones and refused starts, newest first */
    struct txn *done, *done_tail; /* ended ones in the order they ended (oldest first) */
    unsigned open;           /* open transactions (refused starts not counted) */
    unsigned refused;        /* refused starts not yet finished or discarded */
    unsigned ndone;          /* in the done queue */
    uint64_t forgotten;      /* ended ones dropped early (TXN_MAX_DONE, max_memory) */
    bool attaching;          /* the attach is queued */
    int attach_err;          /* 0, or -errno of a failed attach (why in attach_why) */
    char attach_why[200];
    uint64_t last_end_ns;
    uid_t uid;               /* of the client that started the first one */
    uint64_t ctx_with;       /* samples with a thread context when the linger last looked:
                                transactions published there (threadctx.h) keep it attached */
    ev_timer linger;
    struct txn_proc *next;
};

void txn_init(struct ev_loop *loop, uint64_t linger_ns);
/* A new linger time (configuration reload), for detaches armed from now on. */
void txn_set_linger(uint64_t linger_ns);
void txn_shutdown(void);
struct txn_proc *txn_proc_find(pid_t pid);
/* Start transaction id of process pid (its thread tid) on connection client (of user uid),
 * begun at start_ns. A process not attached is attached now (attach_sync: the caller is
 * not waiting for a reply) or right after the reply. Returns the transaction (never
 * NULL). */
struct txn *txn_start(pid_t pid, pid_t tid, uint64_t id, const char *name,
                      const char *trace_id, const char *span_id, uint64_t client,
                      uint64_t start_ns, uid_t uid, bool attach_sync);
/* Record a refused start (code PE_*, why) so that its finish can say why. */
void txn_refuse(pid_t pid, uint64_t id, uint64_t client, int code, const char *why);
/* The open (or refused) transaction id of connection client in process pid, or NULL. */
struct txn *txn_find_open(pid_t pid, uint64_t client, uint64_t id);
/* A number for a transaction whose caller gave none: unused on that connection. */
uint64_t txn_new_id(pid_t pid, uint64_t client);
/* End a transaction (finish or discard; a discarded one still splits slices by
 * transaction). A refused start is forgotten at once. */
void txn_end(struct txn_proc *tp, struct txn *x, uint64_t now);
/* A connection closed: discard its open transactions. */
void txn_client_gone(uint64_t client, uint64_t now);
/* Forget transactions whose samples are gone (ended longer ago than their buffer). */
void txn_expire(uint64_t now);
/* A client attached or detached pid explicitly: the linger logic must know. */
void txn_target_changed(pid_t pid);
/* A transaction of process pid published in its thread context ended (txn_profile): it
 * lingers as after a txn_finish. */
void txn_context_used(pid_t pid);
/* Call fn on every transaction of pid, open or ended (not refused starts). */
void txn_each(pid_t pid, void (*fn)(const struct txn *x, void *arg), void *arg);
