/* worker.h: the slice worker thread. Symbolizing and formatting can take a while on a cold
 * cache; doing it here keeps the loop thread free to forward signals and take samples. */
#pragma once

#include <ev.h>

struct slice_job;

/* Start the worker; finished jobs come back to the loop (job->done runs there). */
int worker_start(struct ev_loop *loop);
/* Stop the worker after the current job; pending jobs are completed with -ECANCELED. */
void worker_stop(void);
void worker_submit(struct slice_job *job);
/* Jobs waiting or running (status). */
unsigned worker_queue_length(void);
