/* commands_internal.h: what the commands' files share (commands.c, the dispatcher; cmd_status.c,
 * cmd_slice.c, cmd_txn.c): a request, the access rule, replies, and each file's handlers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>
#include <ev.h>

#include "profile.h"
#include "proto.h"
#include "slice.h"

struct client;
struct target;

/* Arguments every handler gets, already validated. */
struct request {
    struct client *c;
    const cJSON *req;
    const cJSON *id;
    pid_t pid;               /* for commands on a process */
    struct target *t;        /* attached target for pid, if any */
};

/* ---- commands.c ---- */

cJSON *result_reply(const cJSON *id, cJSON *result);
/* The protocol's error code for errno e (an attach, an access check, a limit). */
enum proto_error errno_code(int e);
/* May the client see target t? Checked against the process's live credentials, or, once
 * it has exited (or vanished before its exit was reaped), those recorded at attach. */
int may_access(const struct client *c, const struct target *t, pid_t pid, char *why,
               size_t whylen);
/* The one admission rule of attach and txn_start: may_access, and the limits when profd
 * would follow one more process (new_target). Returns 0 or -errno, the reason in why. */
int admit(const struct client *c, const struct target *t, pid_t pid, bool new_target,
          char *why, size_t whylen);

/* ---- cmd_status.c ---- */

/* A target's line in list, and the head of its status (and of attach's and configure's
 * replies). */
cJSON *target_summary(const struct target *t, uint64_t now);
cJSON *cmd_list(struct request *r);
cJSON *cmd_status(struct request *r);

/* ---- cmd_slice.c ---- */

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
    /* Keep only the samples of one span or trace ("span", "trace": their ids in hex), split
     * by span ("by_span"): OpenTelemetry's thread context (threadctx.h). */
    bool has_span, has_trace, by_span;
    uint8_t span[8], trace[16];
    /* A transaction's profile: say whether profd reads the process's thread context (the
     * client then starts and ends its next ones there, without messages). */
    bool say_tctx, tctx;
    /* The summary format: at most limit functions (0: all), by total rather than self
     * samples, of the threads whose tid or name matches threads. */
    uint64_t limit;
    bool sort_total;
    char *threads;
};

cJSON *cmd_slice(struct request *r);
/* A new slice request's wait record; its reply goes to the requesting client. */
struct slice_wait *new_slice_wait(struct request *r, pid_t pid, uint64_t from, uint64_t to,
                                  enum slice_format format);
/* Slice now, or once the stops of ticks inside the window have arrived. The reply is sent
 * later: returns NULL. */
cJSON *submit_slice(struct client *c, struct target *t, struct slice_wait *w);

/* ---- cmd_txn.c ---- */

cJSON *cmd_txn_start(struct request *r);
cJSON *cmd_txn_finish(struct request *r);
cJSON *cmd_txn_discard(struct request *r);
cJSON *cmd_txn_profile(struct request *r);
/* The transaction requests read (status "transactions"): txn_profile's are those of
 * transactions published in the thread context, which sent no start. */
extern struct txn_requests {
    uint64_t start, finish, discard, profile;
} txn_requests;
