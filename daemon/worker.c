/* worker.c: one thread that symbolizes and formats slices; results return through ev_async.
 * Before a job goes to the thread, its samples are copied out of the target's ring on the
 * loop thread a bounded number at a time, at idle priority (ticks and requests first). */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "memory.h"
#include "slice.h"
#include "symbols.h"
#include "util.h"

/* The loop thread and the worker share no lock: the worker runs nicer (WORKER_NICE), and a
 * loop thread waiting for a lock the worker was preempted holding waited for the scheduler to
 * give the worker a CPU again (beside CPU hogs: up to 13 ms, 93 times over 3 ms in a 20 s
 * run of 8 threads' transactions, ticks missed meanwhile). Jobs and buffers go each way on
 * lists pushed with an atomic exchange and taken whole (newest first, so reversed); the
 * worker sleeps on a semaphore, which a post never blocks on. */
static pthread_t thread;
static sem_t wake;
static struct slice_job *todo_in;   /* loop -> worker */
static struct slice_job *done_in;   /* worker -> loop */
static struct slice_job *todo_head; /* the worker's, in order (after the join: the loop's) */
static bool stopping, running;
/* Buffers to free on the worker thread (worker_free_later), linked through their first
 * bytes. */
static void *to_free;
static unsigned queued;
/* Warm-ups (worker_warm) submitted and not done: the worker is, or will be, loading a new
 * target's symbols, which takes tens of ms (libc's DWARF from libc6-dbg: 41 ms here). */
static int warming;
/* The quick thread: a transaction's profile when the worker is warming, built without the
 * symbolizer (frames [module+0xOFF], the profile saying so) rather than after the warm-up:
 * the first finish of a 40 ms transaction of a process new to profd took 20-26 ms here
 * waiting for it (132-177 ms on a slower machine). */
static pthread_t quick_thread;
static sem_t quick_wake;
static struct slice_job *quick_in;
static bool quick_running;
static ev_async done_watcher;
static struct ev_loop *main_loop;
static struct symbolizer *sym;

/* Jobs whose samples are being copied (loop thread), in turn. */
static struct slice_job *copying_head, **copying_tail = &copying_head;
static ev_idle copy_watcher;

/* One copy step takes at most this many samples, and stops sooner once it has run this
 * long: a tick due meanwhile waits at most about that (a 60 s buffer of 8 threads at 999 Hz,
 * 480 000 samples, is some 60 steps). */
#define COPY_STEP_ENTRIES 8192
#define COPY_STEP_NS (150 * NS_PER_US)
#define COPY_CHECK_EVERY 512

/* What the loop thread spent on slices, by kind of work (status "slice_loop"). */
struct loop_work {
    uint64_t count, total_ns, max_ns, max_cpu_ns, entries, max_entries;
};
static struct loop_work work[WORKER_LOOP_KINDS];
/* Samples of completed copies that a tick's push took as the ring dropped them, before a
 * copy step reached them (a copy running behind the ring's oldest end). */
static uint64_t copied_as_dropped;

static void on_copy(struct ev_loop *loop, ev_idle *w, int revents);

/* How much nicer than the loop thread the worker runs. Building a large profile keeps it
 * busy for a second or more; at the same priority, on a machine with few CPUs, the loop
 * thread woken for a tick then waits for the scheduler to preempt it (measured here, 2 vCPUs
 * with a busy target: ticks of another target 2-4 ms late and dozens missed during a slice of
 * 480 000 samples). Ticks are due on time; a profile is not. */
#define WORKER_NICE 5

/* Push job onto *list (either thread). */
static void job_push(struct slice_job **list, struct slice_job *job)
{
    struct slice_job *old = __atomic_load_n(list, __ATOMIC_RELAXED);
    do
        job->next = old;
    while (!__atomic_compare_exchange_n(list, &old, job, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
}

/* Everything pushed onto *list, oldest first. */
static struct slice_job *jobs_take(struct slice_job **list)
{
    struct slice_job *l = __atomic_exchange_n(list, NULL, __ATOMIC_ACQUIRE), *fifo = NULL;
    while (l) {
        struct slice_job *next = l->next;
        l->next = fifo;
        fifo = l;
        l = next;
    }
    return fifo;
}

/* Append the jobs submitted since to the worker's queue. */
static void todo_refill(void)
{
    struct slice_job **tail = &todo_head;
    while (*tail)
        tail = &(*tail)->next;
    *tail = jobs_take(&todo_in);
}

static void free_list(void *list)
{
    while (list) {
        void *next = *(void **)list;
        free(list);
        list = next;
    }
}

/* The worker thread: run the queued jobs one by one and hand each back to the loop. */
static void *worker_main(void *arg)
{
    (void)arg;
    /* Linux: PRIO_PROCESS with a thread id sets that thread's nice value alone. */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)tid);
    if (!(nice == -1 && errno) && setpriority(PRIO_PROCESS, (id_t)tid, nice + WORKER_NICE) < 0)
        log_debug("worker: setpriority: %s", strerror(errno));
    for (;;) {
        free_list(__atomic_exchange_n(&to_free, NULL, __ATOMIC_ACQUIRE));
        if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
            break;
        todo_refill();
        if (!todo_head) {
            /* (Each push posts: a post since the exchange above is not lost.) */
            while (sem_wait(&wake) < 0 && errno == EINTR)
                ;
            continue;
        }
        struct slice_job *job = todo_head;
        todo_head = job->next;
        job->next = NULL;
        slice_run(job, sym);
        if (job->warm)
            __atomic_sub_fetch(&warming, 1, __ATOMIC_RELEASE);
        if (job->finish)
            job->finish(job);
        /* Let go of what was kept for modules no target maps any more (detached or exited
         * targets, unloaded libraries) so that a daemon running for months stays small;
         * the job still holds its modules, so nothing it used is dropped. */
        symbolizer_trim(sym);
        memory_symbolizer_set(symbolizer_memory(sym));

        job_push(&done_in, job);
        ev_async_send(main_loop, &done_watcher);
    }
    return NULL;
}

/* The quick thread: transactions' profiles without symbols, one by one. */
static void *quick_main(void *arg)
{
    (void)arg;
    for (;;) {
        if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
            break;
        struct slice_job *list = jobs_take(&quick_in);
        if (!list) {
            while (sem_wait(&quick_wake) < 0 && errno == EINTR)
                ;
            continue;
        }
        while (list) {
            struct slice_job *job = list;
            list = job->next;
            job->next = NULL;
            slice_run(job, NULL);
            if (job->finish)
                job->finish(job);
            job_push(&done_in, job);
            ev_async_send(main_loop, &done_watcher);
        }
    }
    return NULL;
}

/* On the loop thread: hand finished jobs to their requesters. */
static void on_done(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    struct slice_job *list = jobs_take(&done_in);
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
    /* Copies run only when no other watcher has an event pending. */
    ev_idle_init(&copy_watcher, on_copy);
    ev_set_priority(&copy_watcher, EV_MINPRI);
    /* The worker must never receive the daemon's signals (they are read by signalfd on the
     * loop thread): block them all in it. */
    if (sem_init(&wake, 0, 0) < 0)
        return -errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = pthread_create(&thread, NULL, worker_main, NULL);
    if (r == 0 && sem_init(&quick_wake, 0, 0) == 0) {
        /* (Without it, transactions' profiles wait for the warm-up as other slices do.) */
        quick_running = pthread_create(&quick_thread, NULL, quick_main, NULL) == 0;
        if (!quick_running)
            sem_destroy(&quick_wake);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        sem_destroy(&wake);
        return -r;
    }
    running = true;
    return 0;
}

void worker_loop_begin(struct worker_loop_mark *m)
{
    m->wall_ns = now_ns();
    m->cpu_ns = thread_cpu_ns();
}

void worker_loop_end(const struct worker_loop_mark *m, enum worker_loop_kind kind,
                     size_t entries)
{
    struct loop_work *w = &work[kind];
    uint64_t wall = now_ns() - m->wall_ns, cpu = thread_cpu_ns() - m->cpu_ns;
    w->count++;
    w->total_ns += wall;
    if (wall > w->max_ns)
        w->max_ns = wall;
    if (cpu > w->max_cpu_ns)
        w->max_cpu_ns = cpu;
    w->entries += entries;
    if (entries > w->max_entries)
        w->max_entries = entries;
}

cJSON *worker_describe_loop(void)
{
    static const char *const names[WORKER_LOOP_KINDS] = {"request", "copy", "reply"};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "copy_step_max_entries", COPY_STEP_ENTRIES);
    cJSON_AddNumberToObject(o, "copy_step_max_us", (double)COPY_STEP_NS / 1e3);
    cJSON_AddNumberToObject(o, "samples_taken_as_dropped", (double)copied_as_dropped);
    for (int k = 0; k < WORKER_LOOP_KINDS; k++) {
        const struct loop_work *w = &work[k];
        cJSON *x = cJSON_AddObjectToObject(o, names[k]);
        cJSON_AddNumberToObject(x, "count", (double)w->count);
        cJSON_AddNumberToObject(x, "total_ms", (double)w->total_ns / 1e6);
        cJSON_AddNumberToObject(x, "max_us", (double)w->max_ns / 1e3);
        cJSON_AddNumberToObject(x, "max_cpu_us", (double)w->max_cpu_ns / 1e3);
        cJSON_AddNumberToObject(x, "samples", (double)w->entries);
        cJSON_AddNumberToObject(x, "max_samples", (double)w->max_entries);
    }
    return o;
}

static void enqueue(struct slice_job *job)
{
    /* A transaction's profile while the worker loads a target's symbols: now, without them
     * (its application waits in its finish). */
    if (job->txn.id && quick_running && !job->warm &&
        __atomic_load_n(&warming, __ATOMIC_ACQUIRE)) {
        job_push(&quick_in, job);
        sem_post(&quick_wake);
        return;
    }
    job_push(&todo_in, job);
    sem_post(&wake);
}

/* Loop thread, when nothing else is pending: one bounded step of the first copy; a copy not
 * complete goes to the back, so that a large slice does not hold up a small one. */
static void on_copy(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)revents;
    struct slice_job *job = copying_head;
    if (!job) {
        ev_idle_stop(loop, w);
        return;
    }
    struct worker_loop_mark m;
    worker_loop_begin(&m);
    size_t total = 0, taken, as_dropped;
    bool complete = false;
    while (total < COPY_STEP_ENTRIES) {
        size_t max = COPY_STEP_ENTRIES - total;
        complete = slice_copy_step(job, max < COPY_CHECK_EVERY ? max : COPY_CHECK_EVERY, &taken,
                                   &as_dropped);
        total += taken;
        copied_as_dropped += as_dropped;
        if (complete || now_ns() - m.wall_ns >= COPY_STEP_NS)
            break;
    }
    worker_loop_end(&m, WORKER_LOOP_COPY, total);
    copying_head = job->next;
    if (!copying_head)
        copying_tail = &copying_head;
    job->next = NULL;
    if (complete) {
        enqueue(job);
    } else {
        *copying_tail = job;
        copying_tail = &job->next;
    }
    if (!copying_head)
        ev_idle_stop(loop, w);
}

void worker_free_later(void *p)
{
    if (!p)
        return;
    if (!running) {
        free(p);
        return;
    }
    void *old = __atomic_load_n(&to_free, __ATOMIC_RELAXED);
    do
        *(void **)p = old;
    while (!__atomic_compare_exchange_n(&to_free, &old, p, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
    sem_post(&wake);
}

void worker_submit(struct slice_job *job)
{
    queued++;
    if (!job->copy) {
        enqueue(job);
        return;
    }
    job->next = NULL;
    *copying_tail = job;
    copying_tail = &job->next;
    ev_idle_start(main_loop, &copy_watcher);
}

static void warm_done(struct slice_job *job)
{
    log_debug("pid %d: symbols of %zu files loaded in %.1f ms", job->pid, job->nwarm,
              (double)job->build_ns / 1e6);
    slice_job_free(job);
}

void worker_warm(struct target *t)
{
    if (!running)
        return;
    struct slice_job *job = slice_warm(t);
    job->done = warm_done;
    __atomic_add_fetch(&warming, 1, __ATOMIC_RELEASE);
    worker_submit(job);
}

unsigned worker_queue_length(void)
{
    return queued;
}

void worker_stop(void)
{
    if (!running)
        return;
    __atomic_store_n(&stopping, true, __ATOMIC_RELEASE);
    sem_post(&wake);
    pthread_join(thread, NULL);
    if (quick_running) {
        sem_post(&quick_wake);
        pthread_join(quick_thread, NULL);
        quick_running = false;
        sem_destroy(&quick_wake);
        /* (Jobs it had not taken are cancelled with the worker's.) */
        struct slice_job **tail = &todo_head;
        while (*tail)
            tail = &(*tail)->next;
        *tail = jobs_take(&quick_in);
    }
    running = false;
    free_list(__atomic_exchange_n(&to_free, NULL, __ATOMIC_ACQUIRE));
    todo_refill();
    /* Deliver what finished, cancel the rest. */
    on_done(main_loop, &done_watcher, 0);
    ev_idle_stop(main_loop, &copy_watcher);
    while (copying_head) {
        struct slice_job *job = copying_head;
        copying_head = job->next;
        job->err = -ECANCELED;
        queued--;
        job->done(job);
    }
    copying_tail = &copying_head;
    while (todo_head) {
        struct slice_job *job = todo_head;
        todo_head = job->next;
        job->err = -ECANCELED;
        queued--;
        job->done(job);
    }
    sem_destroy(&wake);
    ev_async_stop(main_loop, &done_watcher);
    symbolizer_destroy(sym);
    sym = NULL;
}
