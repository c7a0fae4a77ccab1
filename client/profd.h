/* profd.h: mark transactions of your application for profd, and get each one's profile.
 *
 *     struct profd *p = profd_open(NULL);
 *     uint64_t txn;
 *     if (profd_txn_start(p, "GET /users", NULL, &txn) == 0) {
 *         handle_request();
 *         char *profile = NULL;
 *         if (profd_txn_finish(p, txn, &profile) == 0) {
 *             send_to_sentry(profile);   // Sentry sampled profile, version 1 (JSON)
 *             free(profile);
 *         }
 *     }
 *     profd_close(p);
 *
 * The daemon samples your process from outside (ptrace): no thread, no signal handler and no
 * timer is added to it. It attaches at your first transaction and detaches a few seconds
 * after your last one ends.
 *
 * Errors: every function returns 0 or a negative PROFD_E* code; profd_strerror() names it.
 * When the daemon is absent, dead or restarting, calls fail at once (or within the timeout)
 * and your application runs on; a later call reconnects. No call raises SIGPIPE.
 *
 * Threads: a struct profd may be shared by any number of threads. Starts and discards are
 * sent at once; while one thread waits for its finish's profile, the others go on. A
 * transaction is finished or discarded through the handle that started it. Fork: a child process never uses its parent's connection; its first call
 * opens its own, and it is profiled as a process of its own (so is each worker of a
 * prefork server), even if another thread of the parent was inside a call when it forked.
 * Transactions started by the parent are the parent's.
 *
 * Link with -lprofd (pkg-config profd). */
#ifndef PROFD_H
#define PROFD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct profd;

enum {
    PROFD_ENOMEM = -1,       /* out of memory */
    PROFD_EINVAL = -2,       /* a bad argument (NULL, empty name) */
    PROFD_ENODAEMON = -3,    /* profd is not running (nothing listens on the socket) */
    PROFD_ETIMEDOUT = -4,    /* profd did not answer in time */
    PROFD_EDISCONNECTED = -5, /* the connection to profd was lost (it exited?) */
    PROFD_EPROTO = -6,       /* profd answered something this library does not understand */
    PROFD_EPERM = -7,        /* profd may not profile this process (credentials) */
    PROFD_ENOTXN = -8,       /* no such open transaction (finished, discarded, another
                                process's, or profd restarted since it started) */
    PROFD_ELIMIT = -9,       /* profd follows as many processes as it may, or is at its
                                max_memory or out of file descriptors */
    PROFD_ENOTPROFILED = -10, /* the process could not be attached, or not yet */
    PROFD_EDAEMON = -11,     /* any other error profd reported */
    PROFD_EBUSY = -12,       /* profd is not reading (its socket is full): nothing was sent */
};

/* A handle on the daemon at socket_path; NULL: $PROFD_SOCKET, else /run/profd/profd.sock
 * (as root) or $XDG_RUNTIME_DIR/profd.sock. Does not connect (the first call does), so it
 * succeeds whether or not profd runs. Returns NULL only when out of memory. */
struct profd *profd_open(const char *socket_path);

/* Close the connection and free p. Open transactions on it are discarded by the daemon.
 * p may be NULL. Not to be called while another thread uses p. */
void profd_close(struct profd *p);

/* Most time a call waits for profd, in milliseconds (default: 1000 for connecting and
 * the first handshake, 10000 for finish, which symbolizes). 0 or less: the defaults. */
void profd_set_timeout(struct profd *p, int start_ms, int finish_ms);

/* Start a transaction of this process, run by the calling thread. name: what it does
 * ("GET /users", 1 to 512 bytes); trace_id: the Sentry trace it belongs to (32 hex
 * digits), or NULL. On success *txn_id names it for profd_txn_finish or
 * profd_txn_discard. Transactions may nest and overlap, in any threads.
 *
 * Sends the start and returns without waiting for an answer (one send(2), a few
 * microseconds; the first call of a process also connects, one round trip). It records
 * the start time by this process's clock. It does not wait for profd to attach either.
 * Once a finish's reply said that profd reads this process's OpenTelemetry thread context
 * (otel_thread_ctx_v1, exported by this library), a start sends nothing: it publishes the
 * transaction's trace, span and name there (a memory write, tens of nanoseconds), a discard
 * sends nothing either, and a finish asks for the profile by the transaction's ids
 * ("txn_profile"). The calling thread's samples then carry the span (profctl slice
 * --span). $PROFD_THREAD_CONTEXT=0 keeps every start and end a message.
 * What profd may refuse (this process may not be profiled, a limit) is reported by the
 * finish. PROFD_EBUSY: profd has not read its socket for a while (nothing was sent; the
 * transaction does not exist). */
int profd_txn_start(struct profd *p, const char *name, const char *trace_id, uint64_t *txn_id);
/* The same, with the span it runs as (16 hex digits, or NULL): where profd exports profiles
 * to OpenTelemetry, the samples inside the transaction link to that trace and span. */
int profd_txn_start_span(struct profd *p, const char *name, const char *trace_id,
                         const char *span_id, uint64_t *txn_id);

/* Finish a transaction: its profile, the samples of every thread of the process between its
 * start and now, as a Sentry sampled profile (version 1) in JSON, in a string the caller
 * frees with free(). Waits for profd's answer (default at most 10 s). Errors: PROFD_ENOTXN
 * (unknown, already ended, or lost with an earlier connection), PROFD_EPERM, PROFD_ELIMIT
 * (profd refused the start, or the profile would take profd past its max_memory),
 * PROFD_ENOTPROFILED (not attached, or not yet). */
int profd_txn_finish(struct profd *p, uint64_t txn_id, char **profile_json);

/* The same, with the lookback_s seconds before the start too ("what was it doing before
 * this slow request?"); the transaction's own times are relative_start_ns and
 * relative_end_ns in the profile (Sentry keeps only the samples between them). */
int profd_txn_finish_lookback(struct profd *p, uint64_t txn_id, double lookback_s,
                              char **profile_json);

/* End a transaction without a profile (nothing is built). Like a start, it is sent without
 * waiting for an answer: 0 once sent. PROFD_ENOTXN: txn_id is of an earlier connection (profd
 * restarted since, or it is the parent's across fork); an id profd does not know on this
 * connection is not reported. */
int profd_txn_discard(struct profd *p, uint64_t txn_id);

/* Publish, on the calling thread, OpenTelemetry's thread context (the Thread Context OTEP:
 * the record otel_thread_ctx_v1 points to, which profd reads at each sample) for a
 * transaction the caller tracks itself (the Python module does): trace_id (32 hex digits;
 * NULL: the trace of one of this thread's it nests in, else a random one), span_id (16;
 * NULL: random), name as the record's attribute 0 (cut to 255 bytes). Their hex into
 * trace_out and span_out (may be NULL). No message is sent. Returns a handle for
 * profd_context_end, or NULL (a bad argument, out of memory, 64 deep). profd_txn_start does
 * this itself once profd said it reads the process's context (a finish's reply). */
void *profd_context_begin(const char *trace_id, const char *span_id, const char *name,
                          char trace_out[33], char span_out[17]);
/* End it: the thread's context goes back to what it was before it (called from another
 * thread, the record is marked invalid, and the thread moves on at its next call). */
void profd_context_end(void *handle);

/* A static description of an error code. */
const char *profd_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
