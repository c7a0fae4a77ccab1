/* symhelper.h: profd's side of an unprivileged helper process (profd-symbolizer): starting
 * it, talking to it with timeouts, and restarting it when it crashes, hangs or misbehaves.
 *
 * profd runs two: one for the loop thread (reading ELF headers of the files targets map) and
 * one for the slice worker (symbolizing), so that a long symbolization never holds up
 * sampling. Each is used by one thread at a time. A failure costs the request in progress:
 * the helper is killed, the reason is kept for the reply and the log, and the next request
 * starts a new one (after a pause if it keeps failing). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "symproto.h"

struct symhelper;

struct symhelper_stats {
    char role[16];
    pid_t pid;          /* 0 when not running */
    uint64_t starts;    /* processes started */
    uint64_t failures;  /* crashes, hangs, bad answers */
    uint64_t requests;
    bool waiting;       /* profd is waiting for its answer now */
    char last_error[320];
};

/* Settings for every helper started from now on: the program (NULL: the built-in search,
 * see symhelper.c), its address-space limit (0: none), how long profd waits for an answer
 * before it kills the helper, and verbosity. */
void symhelper_configure(const char *path, uint64_t max_memory, uint64_t timeout_ns,
                         bool verbose);
/* The program helpers are started from (for messages and tests). */
const char *symhelper_path(void);

struct symhelper *symhelper_create(const char *role);
/* The longest wait for this helper's answer, if shorter than symbolizer_timeout. */
void symhelper_set_max_wait(struct symhelper *h, uint64_t ns);
/* Stop the helper (close its socket, reap it) and free h. */
void symhelper_destroy(struct symhelper *h);

/* Start the helper if it is not running. 0, or -errno (the reason is in symhelper_error;
 * -EAGAIN while a failing helper is left to rest). */
int symhelper_ensure(struct symhelper *h);
/* profd is exiting: a request waiting for its answer ends within 100 ms (its helper is
 * killed), and no helper is started again. Any thread. */
void symhelper_abandon(void);
/* Send a request, starting the helper first if it is not running. 0, or -errno (the reason
 * is in symhelper_error; -EAGAIN while a failing helper is left to rest). */
int symhelper_send(struct symhelper *h, const struct symp_w *w, int fd);
/* The next message from the helper (at most SYMP_MAX_MSG bytes into buf, and a descriptor
 * if it sent one). Returns its length, or -errno after the helper was killed: it exited,
 * crashed, or did not answer within the timeout. */
ssize_t symhelper_recv(struct symhelper *h, void *buf, int *fd);
/* The caller found the helper's answer malformed: kill it, with this reason. */
void symhelper_fail(struct symhelper *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A request got its whole answer: the helper works (ends a run of failures). */
void symhelper_ok(struct symhelper *h);
/* Changes each time a new helper process starts: what the previous one held is gone. */
uint64_t symhelper_generation(const struct symhelper *h);
/* Why the last request failed ("" if it did not). */
const char *symhelper_error(const struct symhelper *h);
void symhelper_get_stats(struct symhelper *h, struct symhelper_stats *st);
/* The helper's pid, 0 if it is not running. */
pid_t symhelper_pid(struct symhelper *h);

/* Every helper's statistics (for status): fills up to max, returns how many there are. */
size_t symhelper_list(struct symhelper_stats *out, size_t max);

/* For the owner of waitpid(-1): a child's exit. True if it was a helper's (its status is
 * kept for the helper's error message). */
bool symhelper_reaped(pid_t pid, int status);
