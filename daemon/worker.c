/* worker.c: one thread that symbolizes and formats slices; results return through ev_async. */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

#include "log.h"
#include "memory.h"
#include "slice.h"
#include "symbols.h"

static pthread_t thread;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct slice_job *todo_head, **todo_tail = &todo_head;
static struct slice_job *done_head, **done_tail = &done_head;
static bool stopping, running;
static unsigned queued;
static ev_async done_watcher;
static struct ev_loop *main_loop;
static struct symbolizer *sym;

/* The worker thread: run the queued jobs one by one and hand each back to the loop. */
static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!todo_head && !stopping)
            pthread_cond_wait(&cond, &lock);
        if (stopping)
            break;
        struct slice_job *job = todo_head;
        todo_head = job->next;
        if (!todo_head)
            todo_tail = &todo_head;
        pthread_mutex_unlock(&lock);

        job->next = NULL;
        slice_run(job, sym);
        /* Let go of what was kept for modules no target maps any more (detached or exited
         * targets, unloaded libraries) so that a daemon running for months stays small;
         * the job still holds its modules, so nothing it used is dropped. */
        symbolizer_trim(sym);
        memory_symbolizer_set(symbolizer_memory(sym));

        pthread_mutex_lock(&lock);
        *done_tail = job;
        done_tail = &job->next;
        ev_async_send(main_loop, &done_watcher);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* On the loop thread: hand finished jobs to their requesters. */
static void on_done(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    pthread_mutex_lock(&lock);
    struct slice_job *list = done_head;
    done_head = NULL;
    done_tail = &done_head;
    pthread_mutex_unlock(&lock);
    while (list) {
        struct slice_job *job = list;
        list = job->next;
        queued--;
        job->done(job);
    }
}

/* Create the symbolizer and start the thread; see worker.h. */
int worker_start(struct ev_loop *loop)
{
    main_loop = loop;
    /* elfutils asks the debuginfod servers in DEBUGINFOD_URLS for every debug file it does
     * not find locally (/etc/profile.d/debuginfod.sh sets it in login shells where
     * debuginfod is configured, so a daemon started by hand inherits it). A profiler must
     * not send the build-ids of what runs on the machine over the network, stall a slice on
     * HTTP or fill a cache in root's home. libdebuginfod reads the variable at each query,
     * so removing it before the first lookup is enough. This runs before any other thread
     * exists, as unsetenv() requires (a getenv() elsewhere could see it half done). */
    unsetenv("DEBUGINFOD_URLS");
    sym = symbolizer_create();
    if (!sym)
        return -ENOMEM;
    const char *dbg = getenv("PROFD_DEBUGINFO_PATH");
    if (dbg && *dbg)
        symbolizer_set_debug_path(sym, dbg);
    ev_async_init(&done_watcher, on_done);
    ev_async_start(loop, &done_watcher);
    /* The worker must never receive the daemon's signals (they are read by signalfd on the
     * loop thread): block them all in it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = pthread_create(&thread, NULL, worker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0)
        return -r;
    running = true;
    return 0;
}

void worker_submit(struct slice_job *job)
{
    pthread_mutex_lock(&lock);
    job->next = NULL;
    *todo_tail = job;
    todo_tail = &job->next;
    queued++;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

unsigned worker_queue_length(void)
{
    return queued;
}

void worker_stop(void)
{
    if (!running)
        return;
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    running = false;
    /* Deliver what finished, cancel the rest. */
    on_done(main_loop, &done_watcher, 0);
    while (todo_head) {
        struct slice_job *job = todo_head;
        todo_head = job->next;
        job->err = -ECANCELED;
        queued--;
        job->done(job);
    }
    todo_tail = &todo_head;
    ev_async_stop(main_loop, &done_watcher);
    symbolizer_destroy(sym);
    sym = NULL;
}
