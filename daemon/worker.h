/* worker.h: the slice worker thread. Symbolizing and formatting can take a while on a cold
 * cache; doing it here keeps the loop thread free to forward signals and take samples. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

struct cJSON;

struct slice_job;

/* Start the worker; finished jobs come back to the loop (job->done runs there). */
int worker_start(struct ev_loop *loop);
/* Stop the worker after the current job; pending jobs are completed with -ECANCELED. */
void worker_stop(void);
/* Take a job: if its samples are still to be copied (job->copy), that is done first, on the
 * loop thread, between other events; then the thread builds it. */
void worker_submit(struct slice_job *job);
/* Free p (at least a pointer's size) on the worker thread: for large buffers the worker
 * allocated, whose free would trim its arena on the caller's thread. At once if the worker
 * is not running. */
void worker_free_later(void *p);
/* Load the symbols of everything t has mapped in the background (slice_warm), so that its
 * first profile is as quick as the later ones. Nothing if the worker is not running. */
struct target;
void worker_warm(struct target *t);
/* Jobs waiting or running (status). */
unsigned worker_queue_length(void);

/* What the loop thread spends on slices, measured around each piece of that work: the
 * request (slice_begin), each copy step, and handing the reply over. */
enum worker_loop_kind {
    WORKER_LOOP_REQUEST,
    WORKER_LOOP_COPY,
    WORKER_LOOP_REPLY,
    WORKER_LOOP_KINDS
};
struct worker_loop_mark {
    uint64_t wall_ns, cpu_ns;
};
void worker_loop_begin(struct worker_loop_mark *m);
/* entries: samples copied in that piece. */
void worker_loop_end(const struct worker_loop_mark *m, enum worker_loop_kind kind,
                     size_t entries);
/* Status "slice_loop": per kind, how many, and the most wall and CPU time and samples one
 * took. */
struct cJSON *worker_describe_loop(void);
