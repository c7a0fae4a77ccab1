/* target.c: attaching to processes with PTRACE_SEIZE, following their threads, forwarding
 * their signals and job control exactly, and detaching cleanly; the one owner of waitpid and
 * of ptrace events, and of the targets' and threads' state.
 *
 * The sample path calls down into it (schedule -> sampler -> here) and it calls nothing of
 * theirs by name: the stops the sampler asked for are handed back to the sampler's wait
 * (targets_wait_event), and what the schedules must hear of the targets' lives (a new
 * thread, a thread gone, a target that samples no more) goes through the three hooks
 * targets_init was given, a detach's end through its caller's done callback. The sampler's
 * wait handles every tracee's events (waitid P_ALL), so these may run inside another
 * target's tick: a target that ends there is freed only after it (targets_collect).
 *
 * Invariant: outside a callback, every traced thread is either running (maybe with one
 * PTRACE_INTERRUPT outstanding) or parked in a group-stop with PTRACE_LISTEN. Every other
 * stop is resolved in the callback that sees it: a signal-delivery-stop re-injects its
 * signal at once, an interrupt stop is sampled (by the waiter) and resumed. Stops are seen
 * without being reaped (targets_wait_event): a signal reaped by the tracer and not yet
 * re-injected is lost if the tracer dies, one that was never reaped is delivered. */
#include "target.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "fds.h"
#include "log.h"
#include "memory.h"
#include "modules.h"
#include "procstatus.h"
#include "procfs.h"
#include "pykernel.h"
#include "syscalls.h"
#include "sigrepair.h"
#include "symhelper.h"
#include "util.h"

#define TID_BUCKETS 4096
#define MAX_EPOCHS 16
/* Most entries a ring may hold, whatever the rate and thread count: 4M entries, 64 MiB. */
#define RING_MAX_ENTRIES (4u << 20)

static struct ev_loop *loop;
static struct target_hooks hooks;
static pid_t self_pid;
static struct target *targets;
static struct thread *tid_hash[TID_BUCKETS];

/* PTRACE_O_TRACECLONE: new threads are attached by the kernel. PTRACE_O_TRACEEXEC: exec is
 * an event, not a SIGTRAP. Never PTRACE_O_EXITKILL: the target must outlive the daemon. */
static const long SEIZE_OPTIONS = PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC;

void targets_init(struct ev_loop *l, const struct target_hooks *h)
{
    loop = l;
    hooks = *h;
    self_pid = getpid();
    sampler_threads_init(l);
}

struct target *targets_first(void)
{
    return targets;
}

size_t targets_count(void)
{
    size_t n = 0;
    for (struct target *t = targets; t; t = t->next)
        n++;
    return n;
}

struct target *target_find(pid_t pid)
{
    for (struct target *t = targets; t; t = t->next)
        if (t->pid == pid)
            return t;
    return NULL;
}

/* When process pid started (/proc/PID/stat, field 22, clock ticks since boot): with the
 * pid, what tells a process from a later one that got the same pid. */
static int read_start_time(pid_t pid, uint64_t *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    ssize_t n = read_file(path, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    const char *p = strrchr(buf, ')');
    /* After ") ": state is field 3; starttime is field 22, 19 fields further. */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return -EINVAL;
    char *end;
    *out = strtoull(p + 1, &end, 10);
    return end == p + 1 ? -EINVAL : 0;
}

bool target_is_previous(const struct target *t)
{
    uint64_t start;
    /* A zombie of the process itself (its parent has not reaped it) still has its start
     * time: only another process has another. */
    return t && t->state == T_EXITED && t->start_time &&
           read_start_time(t->pid, &start) == 0 && start != t->start_time;
}

const char *target_state_name(enum target_state s)
{
    switch (s) {
    case T_ATTACHED:
        return "attached";
    case T_DETACHING:
        return "detaching";
    case T_EXITED:
        return "exited";
    case T_GONE:
        return "gone";
    }
    return "?";
}

static struct thread *thread_find(pid_t tid)
{
    for (struct thread *th = tid_hash[(unsigned)tid % TID_BUCKETS]; th; th = th->hnext)
        if (th->tid == tid)
            return th;
    return NULL;
}

struct thread *target_thread(const struct target *t, pid_t tid)
{
    struct thread *th = thread_find(tid);
    return th && th->t == t ? th : NULL;
}

/* Read /proc/PID/task/TID/stat: the thread's name and whether it is a zombie. */
static int read_thread_stat(pid_t pid, pid_t tid, char name[16], bool *zombie)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
    ssize_t n = read_file(path, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close || close < open || close[1] != ' ')
        return -EINVAL;
    size_t len = (size_t)(close - open - 1);
    if (len > 15)
        len = 15;
    memcpy(name, open + 1, len);
    name[len] = '\0';
    if (zombie)
        *zombie = close[2] == 'Z' || close[2] == 'X';
    return 0;
}

/* Remember a departed thread's name for slices taken after it is gone. Appended without a
 * search (a program that starts thousands of threads a second must not make this O(n)):
 * live threads' names are in their struct thread, and a slice takes the newest entry for a
 * tid. Entries older than the buffer are dropped at housekeeping. */
static void remember_name(struct target *t, int32_t tid, const char *name, uint64_t now)
{
    if (t->nnames == t->cap_names) {
        t->cap_names = t->cap_names ? t->cap_names * 2 : 16;
        t->names = xrealloc(t->names, t->cap_names * sizeof(*t->names));
    }
    struct thread_name *tn = &t->names[t->nnames++];
    tn->tid = tid;
    snprintf(tn->name, sizeof(tn->name), "%s", name);
    tn->last_seen_ns = now;
}

/* Open /proc/PID/task/TID/what: a descriptor, or -1 with the errno in *err. */
static int open_task_file(pid_t pid, pid_t tid, const char *what, int *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", pid, tid, what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        *err = errno;
    return fd;
}

void target_thread_forget_stack(struct thread *th)
{
    if (th->last_stack != STACK_NONE)
        stacks_unref(&th->t->stacks, th->last_stack);
    th->last_stack = STACK_NONE;
    th->have_sched = false;
}

/* Start following a thread that is now traced by us. */
static struct thread *thread_add(struct target *t, pid_t tid)
{
    struct thread *th = xcalloc(1, sizeof(*th));
    th->tid = tid;
    th->t = t;
    th->state = TH_RUNNING;
    th->last_stack = STACK_NONE;
    th->added_ns = now_ns();
    int err = 0;
    th->schedstat_fd = th->syscall_fd = th->status_fd = -1;
    if (fds_take(3)) {
        th->schedstat_fd = open_task_file(t->pid, tid, "schedstat", &err);
        th->syscall_fd = open_task_file(t->pid, tid, "syscall", &err);
        th->status_fd = open_task_file(t->pid, tid, "status", &err);
        fds_give((th->schedstat_fd < 0) + (th->syscall_fd < 0) + (th->status_fd < 0));
    } else {
        err = EMFILE;
    }
    sampler_thread_init(th);
    if (th->schedstat_fd < 0 || th->syscall_fd < 0)
        t->nthreads_nofiles++;
    if (err && err != ENOENT && err != ESRCH && !t->warned_task_files) {
        /* Not a thread that is gone already: profd itself is short of something. Said once
         * per process (status counts them: threads_without_files). */
        struct fds_stats fs;
        fds_get_stats(&fs);
        t->warned_task_files = true;
        log_warn("pid %d: thread %d goes without its /proc files (%s; profd's threads hold "
                 "%" PRIu64 " descriptors, %" PRIu64 " of its limit of %" PRIu64 " are kept "
                 "for clients and targets): such threads are sampled by stopping them (in "
                 "cputime mode not at all)",
                 t->pid, tid, strerror(err), fs.per_thread, fs.reserve, fs.limit);
    }
    if (read_thread_stat(t->pid, tid, th->name, NULL) < 0)
        snprintf(th->name, sizeof(th->name), "%s", t->comm);
    if (t->nthreads == t->cap_threads) {
        t->cap_threads = t->cap_threads ? t->cap_threads * 2 : 16;
        t->threads = xrealloc(t->threads, t->cap_threads * sizeof(*t->threads));
    }
    t->threads[t->nthreads++] = th;
    unsigned b = (unsigned)tid % TID_BUCKETS;
    th->hnext = tid_hash[b];
    tid_hash[b] = th;
    t->stats.threads_seen++;
    t->activity++;
    hooks.thread_added(th);
    return th;
}

/* Forget a thread (it exited, or we detached from it). */
static void thread_remove(struct thread *th)
{
    struct target *t = th->t;
    t->activity++;
    /* alarm's deferred ticks up to now, while its clock and watch are there (a leader's exit
     * or an exec does not go through the hook). */
    if (t->deferred && t->state == T_ATTACHED)
        hooks.thread_exited(th);
    remember_name(t, th->tid, th->name, now_ns());
    target_thread_forget_stack(th);
    /* Its perf event, continuous (cputime) or one-shot (the wall-clock modes). (At a thread's
     * exit its ring was read (hooks.thread_exited); otherwise what it sampled since the last
     * read, up to 250 ms, is dropped: at an exec its copies no longer match the maps, and a
     * process that exits or is detached has stopped sampling.) */
    sampler_thread_release(th);
    for (struct thread **p = &tid_hash[(unsigned)th->tid % TID_BUCKETS]; *p; p = &(*p)->hnext) {
        if (*p == th) {
            *p = th->hnext;
            break;
        }
    }
    for (size_t i = 0; i < t->nthreads; i++) {
        if (t->threads[i] == th) {
            t->threads[i] = t->threads[--t->nthreads];
            break;
        }
    }
    if (th->schedstat_fd < 0 || th->syscall_fd < 0)
        t->nthreads_nofiles--;
    fds_give((th->schedstat_fd >= 0) + (th->syscall_fd >= 0) + (th->status_fd >= 0));
    if (th->schedstat_fd >= 0)
        close(th->schedstat_fd);
    if (th->syscall_fd >= 0)
        close(th->syscall_fd);
    if (th->status_fd >= 0)
        close(th->status_fd);
    free(th);
}

static void map_entry_copy(struct map_entry *dst, const struct map_entry *src)
{
    *dst = *src;
    dst->path = src->path ? xstrdup(src->path) : NULL;
    dst->mod = src->mod ? module_ref(src->mod) : NULL;
}

/* Add the new maps' code mappings to the generation's history (the union of everything
 * seen), so samples taken before a dlclose still symbolize. */
static void epoch_merge(struct target *t, const struct maps *m)
{
    struct epoch_maps *em = &t->epochs[t->nepochs - 1];
    for (size_t i = 0; i < m->n; i++) {
        const struct map_entry *e = &m->v[i];
        if (!e->mod && !(e->prot & MAP_PROT_X))
            continue;
        bool known = false;
        for (size_t j = em->maps.n; j-- > 0;) {
            const struct map_entry *h = &em->maps.v[j];
            if (h->start == e->start && h->end == e->end && h->pgoff == e->pgoff &&
                h->mod == e->mod) {
                known = true;
                break;
            }
        }
        if (known)
            continue;
        em->maps.v = xrealloc(em->maps.v, (em->maps.n + 1) * sizeof(*em->maps.v));
        map_entry_copy(&em->maps.v[em->maps.n++], e);
    }
}

static void epoch_begin(struct target *t)
{
    if (t->nepochs == MAX_EPOCHS) {
        maps_finish(&t->epochs[0].maps);
        memmove(t->epochs, t->epochs + 1, (MAX_EPOCHS - 1) * sizeof(*t->epochs));
        t->nepochs--;
    }
    t->epochs = xrealloc(t->epochs, (t->nepochs + 1) * sizeof(*t->epochs));
    struct epoch_maps *em = &t->epochs[t->nepochs++];
    memset(em, 0, sizeof(*em));
    em->epoch = t->epoch;
}

const struct maps *target_epoch_maps(const struct target *t, uint32_t epoch)
{
    for (size_t i = 0; i < t->nepochs; i++)
        if (t->epochs[i].epoch == epoch)
            return &t->epochs[i].maps;
    return NULL;
}

static bool same_mapping(const struct map_entry *a, const struct map_entry *b)
{
    return a->start == b->start && a->end == b->end && a->pgoff == b->pgoff &&
           a->inode == b->inode && a->prot == b->prot;
}

/* A thread whose /proc files show the process's memory: the leader, unless it called
 * pthread_exit (a zombie leader's maps read empty), then any live thread. */
static pid_t mm_tid(const struct target *t)
{
    const struct thread *leader = thread_find(t->pid);
    if ((!leader || leader->zombie) && t->nthreads) {
        for (size_t i = 0; i < t->nthreads; i++)
            if (!t->threads[i]->zombie)
                return t->threads[i]->tid;
    }
    return t->pid;
}

/* Look for t's CPython runtime in its maps (python.h), and where its running threads' frames
 * are read from then (pykernel.h). */
static void detect_python(struct target *t)
{
    py_target_detect(&t->py, t->pid, &t->maps);
    pyk_target_update(t);
    tctx_target_detect(t);
}

int target_refresh_maps(struct target *t)
{
    struct maps nm;
    t->maps_read_ns = now_ns();
    /* (The status was read before: these maps are at least as new as what it said.) */
    struct vm_sizes vm = t->vm_now;
    pid_t tid = mm_tid(t);
    unwinder_set_tid(&t->unw, tid);
    int r = maps_read(tid, true, &t->maps, &nm);
    if (r < 0) {
        /* The old maps stay (maps_dirty too: the next tick tries again). An exiting process
         * (ESRCH) is no news; anything else is said once until it reads again. */
        if (r != -ESRCH && r != t->maps_err)
            log_warn("pid %d: cannot re-read /proc/%d/maps: %s; samples in code mapped since "
                     "may not unwind", t->pid, tid, strerror(-r));
        t->maps_err = r;
        return r;
    }
    if (t->maps_err && t->maps_err != -ESRCH)
        log_info("pid %d: its maps read again", t->pid);
    t->maps_err = 0;
    t->vm_at_maps = vm; /* (a read that failed is tried again at the next look) */
    t->maps_activity = t->activity;
    bool changed = nm.n != t->maps.n;
    bool code_gone = false;
    /* Both lists are sorted by start: a merge walk finds removed code mappings. */
    size_t i = 0, j = 0;
    while (i < t->maps.n) {
        const struct map_entry *o = &t->maps.v[i];
        while (j < nm.n && nm.v[j].start < o->start)
            j++;
        if (j < nm.n && same_mapping(o, &nm.v[j])) {
            i++;
            continue;
        }
        changed = true;
        if (o->prot & MAP_PROT_X)
            code_gone = true;
        i++;
    }
    /* New code (dlopen)? */
    bool code_added = false;
    for (size_t k = 0; k < nm.n && !code_added; k++) {
        if (!(nm.v[k].prot & MAP_PROT_X))
            continue;
        const struct map_entry *o = maps_find(&t->maps, nm.v[k].start);
        code_added = !o || !same_mapping(o, &nm.v[k]);
    }
    maps_finish(&t->maps);
    t->maps = nm;
    t->maps_dirty = false;
    epoch_merge(t, &t->maps);
    detect_python(t);
    if (code_gone) {
        /* Code unmapped (dlclose): cached unwind rules for its addresses may now be wrong. */
        unwinder_flush(&t->unw);
    }
    if (code_gone || code_added) {
        /* Stacks kept for threads that have not run were unwound against the old code (and
         * so was the last of each clock, which a tick may take again). */
        for (size_t k = 0; k < t->nthreads; k++) {
            struct thread *th = t->threads[k];
            target_thread_forget_stack(th);
            sampler_forget_latest(th);
        }
    }
    return changed ? 1 : 0;
}

/* Every status file read on the loop thread goes through this one buffer, grown to the
 * largest file seen and kept: the reads in a signal-delivery stop allocate nothing. */
static struct strbuf status_buf;

/* /proc/TID/status of any thread (a tid names its thread there too, unlisted). */
static int tid_status(pid_t tid, struct procstatus *st)
{
    return procstatus_read(tid, 0, &status_buf, st);
}

/* The process a thread belongs to (Tgid in /proc/TID/status), or -errno. */
static pid_t read_tgid(pid_t tid)
{
    struct procstatus st;
    int r = tid_status(tid, &st);
    if (r < 0)
        return r;
    return procstatus_has(&st, PS_TGID) ? st.tgid : -EPROTO;
}

/* Who traces a thread (TracerPid), 0 if nobody, -1 if that cannot be read. */
static pid_t tracer_of(pid_t tid)
{
    struct procstatus st;
    if (tid_status(tid, &st) < 0 || !procstatus_has(&st, PS_TRACERPID))
        return -1;
    return st.tracer_pid;
}

static void ring_evict(void *ctx, const struct ring_entry *e)
{
    struct target *t = ctx;
    stacks_unref(&t->stacks, e->stack);
}

/* The thread whose stop is being handled without having been reaped (targets_wait_event),
 * 0 if none, and whether a ptrace request has ended that stop. */
static pid_t peeked_tid;
static bool peeked_released;
/* The stop being handled is an interrupt the sampler asked for: the waiter's to sample. */
static struct thread *sample_stop;

/* r (0 or -errno) of the ptrace request that resumes, parks or releases tid from a stop.
 * Only a success counts: ESRCH may also mean that the kernel wants the stop reaped first. */
static void note_released(pid_t tid, int r)
{
    if (tid == peeked_tid && r == 0)
        peeked_released = true;
}

static struct target *graveyard; /* freed by targets_collect, after the current callback */
static void target_destroy(struct target *t);

/* Forget a target: out of the list and untraced now, its memory later. Callers up the stack
 * (a tick waiting for stops, which handles every tracee's events) may still hold it: they
 * see state T_GONE and stop. */
static void target_free(struct target *t)
{
    for (struct target **p = &targets; *p; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;
            break;
        }
    }
    hooks.stopped(t);
    while (t->nthreads)
        thread_remove(t->threads[0]);
    t->state = T_GONE;
    t->next = graveyard;
    graveyard = t;
}

void targets_collect(void)
{
    while (graveyard) {
        struct target *t = graveyard;
        graveyard = t->next;
        target_destroy(t);
    }
}

/* Free a target's memory. */
static void target_destroy(struct target *t)
{
    free(t->threads);
    ring_finish(&t->ring);
    stacks_finish(&t->stacks);
    maps_finish(&t->maps);
    for (size_t i = 0; i < t->nepochs; i++)
        maps_finish(&t->epochs[i].maps);
    free(t->epochs);
    unwinder_finish(&t->unw);
    pyk_target_forget(t);
    gok_target_forget(t);
    py_target_finish(&t->py);
    tctx_target_finish(&t->tctx);
    if (t->status_fd >= 0)
        close(t->status_fd);
    if (t->pidfd >= 0)
        close(t->pidfd);
    free(t->names);
    free(t->exe);
    free(t->sched);
    free(t);
}

/* The maps are read again at least this often, changed or not (targets_housekeeping). */
#define MAPS_LOOK_NS (10 * NS_PER_SEC)


/* Seize every thread, rescanning /proc/PID/task until a pass finds none new: threads
 * created by seized threads are attached by the kernel (PTRACE_O_TRACECLONE), and ones
 * created by not-yet-seized threads are caught by the next pass. In each pass the leader
 * is seized last: once it is traced, signals sent to the process that it ignores are
 * queued instead of dropped (kernel/signal.c sig_ignored), and one taken by a thread not
 * seized yet would end its epoll_wait with an EINTR nobody repairs (see target_detach). */
static int seize_all(struct target *t, char *why, size_t whylen)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", t->pid);
    for (int pass = 0; pass < 100; pass++) {
        DIR *d = opendir(path);
        if (!d)
            return -ESRCH;
        int added = 0;
        bool leader_seen = false;
        struct dirent *de;
        for (;;) {
            pid_t tid;
            de = readdir(d);
            if (de && (de->d_name[0] < '0' || de->d_name[0] > '9'))
                continue;
            if (de) {
                tid = (pid_t)atoi(de->d_name);
                if (tid == t->pid) {
                    leader_seen = true;
                    continue;
                }
            } else if (leader_seen) {
                leader_seen = false;
                tid = t->pid;
            } else {
                break;
            }
            if (thread_find(tid))
                continue;
            bool seized = true;
            if (ptrace(PTRACE_SEIZE, tid, 0, SEIZE_OPTIONS) < 0) {
                int e = errno;
                bool zombie = false;
                if (e == ESRCH)
                    continue; /* exited meanwhile */
                int st = e == EPERM ? read_thread_stat(t->pid, tid, (char[16]){0}, &zombie) : 0;
                if (e == EPERM && ((st == 0 && zombie) || st == -ENOENT || st == -ESRCH))
                    continue; /* exiting or gone (the kernel refuses a task that has an exit
                               * state with EPERM), or a leader that called pthread_exit:
                               * nothing to trace */
                if (e == EPERM && tracer_of(tid) == getpid()) {
                    /* Auto-attached through a seized thread's clone: it starts in a stop
                     * we have not reaped yet. */
                    seized = false;
                } else {
                    pid_t tracer = tracer_of(tid);
                    closedir(d);
                    if (e == EPERM && tracer > 0) {
                        snprintf(why, whylen,
                                 "process %d is already traced by pid %d (a debugger or "
                                 "another profiler)", t->pid, tracer);
                        return -EBUSY;
                    }
                    snprintf(why, whylen, "ptrace(PTRACE_SEIZE, %d): %s", tid, strerror(e));
                    return -e;
                }
            }
            thread_add(t, tid)->born = seized; /* PTRACE_SEIZE does not stop it */
            added++;
        }
        closedir(d);
        if (!added)
            return t->nthreads ? 0 : -ESRCH;
    }
    snprintf(why, whylen, "threads of %d kept appearing faster than they could be attached",
             t->pid);
    return -EAGAIN;
}

/* The most entries a buffer holds: its length at hz for up to 64 threads sampled per tick. */
static size_t ring_max_entries(unsigned hz, uint64_t buffer_ns)
{
    uint64_t n = (uint64_t)hz * (buffer_ns / NS_PER_SEC + 1) * 64;
    return (size_t)(n > RING_MAX_ENTRIES ? RING_MAX_ENTRIES : n);
}

/* Is pid a process profd may keep as t (its credentials and name read into t)? Returns 0 or
 * -errno, why saying why. */
static int identify_process(pid_t pid, struct target *t, char *why, size_t whylen)
{
    pid_t tgid = read_tgid(pid);
    if (tgid == -EMFILE || tgid == -ENFILE || tgid == -ENOMEM) {
        snprintf(why, whylen, "profd cannot read /proc/%d/status now: %s", pid,
                 strerror(-tgid));
        return tgid;
    }
    if (tgid < 0) {
        snprintf(why, whylen, "no such process: %d", pid);
        return -ESRCH;
    }
    /* Kept to check clients against once the process has exited: credentials that cannot
     * be read for certain are no credentials to keep. */
    int cr = proc_creds_read(pid, &t->creds, why, whylen);
    if (cr < 0) {
        return cr == -ESRCH || cr == -EMFILE || cr == -ENFILE || cr == -ENOMEM ? cr : -EPERM;
    }
    if (tgid != pid) {
        snprintf(why, whylen, "%d is a thread of process %d: attach to the process", pid, tgid);
        return -EINVAL;
    }
    bool zombie = false;
    if (read_thread_stat(pid, pid, t->comm, &zombie) < 0) {
        snprintf(why, whylen, "no such process: %d", pid);
        return -ESRCH;
    }
    return 0;
}

/* The process's own files kept open: its status (signal dispositions, read now) and a pidfd
 * (its sockets' timeouts). Either may be missing: said in the log, the repairs do less. */
static void open_process_files(struct target *t)
{
    pid_t pid = t->pid;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    t->status_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (t->status_fd < 0 && errno != ENOENT)
        log_warn("pid %d: cannot open %s (%s): signals it ignores may make its waits fail "
                 "with EINTR", pid, path, strerror(errno));
    sigrepair_read_sigstate(t, NULL);
    t->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (t->pidfd < 0 && errno != ESRCH)
        log_warn("pid %d: pidfd_open: %s: socket timeouts of its interrupted calls are "
                 "unknown (they restart with the whole timeout)", pid, strerror(errno));
}

static int seize_and_set_up(pid_t pid, unsigned hz, uint64_t buffer_ns,
                            enum sampler_kind sampler, struct sched *sched, bool *taken,
                            struct target **out, char *why, size_t whylen)
{
    why[0] = '\0';
    if (pid <= 0)
        return -ESRCH;
    struct target *old = target_find(pid);
    if (old && target_is_previous(old)) {
        /* Its samples were of another process: forgotten, as they would be at expiry. */
        log_info("forgetting exited process %d (%s): the pid is another process's now", pid,
                 old->comm);
        target_detach(old, NULL, NULL);
    } else if (old) {
        snprintf(why, whylen, "process %d is already attached", pid);
        return -EEXIST;
    }
    if (pid == getpid()) {
        snprintf(why, whylen, "profd cannot profile itself");
        return -EPERM;
    }
    struct target *t = xcalloc(1, sizeof(*t));
    t->pid = pid;
    t->sampler = sampler;
    t->sched = sched;
    *taken = true;
    t->status_fd = -1;
    t->pidfd = -1;
    t->defer_epfd = -1;
    int idr = identify_process(pid, t, why, whylen);
    if (idr < 0) {
        free(t); /* (sched too: see target_attach) */
        *taken = false;
        return idr;
    }
    char path[64], buf[4096];
    if (read_start_time(pid, &t->start_time) < 0)
        t->start_time = 0; /* unknown: never taken for a previous process */
    /* A leader that called pthread_exit is a zombie while its other threads run: still a
     * process to profile. */
    snprintf(path, sizeof(path), "/proc/%d/exe", pid);
    ssize_t n = readlink(path, buf, sizeof(buf) - 1);
    t->exe = xstrdup(n > 0 ? (buf[n] = '\0', buf) : t->comm);
    t->hz = hz;
    t->buffer_ns = buffer_ns;
    t->attach_ns = now_ns();
    t->state = T_ATTACHED;
    stacks_init(&t->stacks);
    ring_init(&t->ring, buffer_ns, ring_max_entries(hz, buffer_ns), ring_evict, t);
    /* Every target's samples share one bound (memory.h). */
    t->stacks.acct = t->ring.acct = memory_samples();
    epoch_begin(t);
    t->next = targets;
    targets = t;

    int r = seize_all(t, why, whylen);
    if (r < 0) {
        /* Undo: release what we seized. They are running; interrupt each and detach at its
         * stop (target_detach does exactly that). */
        if (t->nthreads) {
            target_detach(t, NULL, NULL);
        } else {
            target_free(t);
        }
        if (r == -ESRCH && !why[0])
            snprintf(why, whylen, "no such process: %d", pid);
        return r;
    }
    open_process_files(t);
    /* Without its maps nothing unwinds (every sample would be one frame): no attach. */
    r = maps_read(mm_tid(t), true, NULL, &t->maps);
    if (r < 0) {
        snprintf(why, whylen, "cannot read the memory maps of process %d: %s", pid,
                 strerror(-r));
        goto setup_failed;
    }
    epoch_merge(t, &t->maps);
    detect_python(t);
    r = unwinder_init(&t->unw, mm_tid(t), &t->maps);
    if (r < 0) {
        snprintf(why, whylen, "cannot set up unwinding: %s", strerror(-r));
        goto setup_failed;
    }
    *out = t;
    return 0;

setup_failed:
    /* Seized, but profd cannot sample it: release it. The client did nothing wrong (an
     * EINVAL or EACCES of profd's own is no bad request or refusal of theirs): -EIO, the
     * reason in why, unless the process is gone. */
    log_warn("pid %d: attach failed: %s", pid, why);
    target_detach(t, NULL, NULL);
    return r == -ESRCH ? r : -EIO;
}

int target_attach(pid_t pid, unsigned hz, uint64_t buffer_ns, enum sampler_kind sampler,
                  struct sched *sched, struct target **out, char *why, size_t whylen)
{
    bool taken = false;
    int r = seize_and_set_up(pid, hz, buffer_ns, sampler, sched, &taken, out, why, whylen);
    if (!taken)
        free(sched);
    return r;
}


void target_resume(struct thread *th, int sig)
{
    /* Any ptrace stop clears a pending PTRACE_INTERRUPT (kernel/signal.c ptrace_stop: "any
     * trap clears pending STOP trap"): a thread that stopped for something else (a clone, a
     * signal) while our interrupt was on its way will not stop for it. Forget it; the
     * thread is sampled at the next tick. (Asking again instead made every new thread's
     * creator stop twice per clone.) */
    if (th->interrupt_pending) {
        th->interrupt_pending = false;
        th->t->stats.skipped.still_stopping++;
    }
    th->rescue_pending = false;
    sigrepair_guard_shared(th);
    int r = ptrace(PTRACE_CONT, th->tid, 0, (long)sig) < 0 ? -errno : 0;
    note_released(th->tid, r);
    if (r < 0 && r != -ESRCH)
        log_warn("PTRACE_CONT %d: %s", th->tid, strerror(-r));
}

/* All threads released: report and free. */
static void detach_finished(struct target *t)
{
    log_info("detached from %d (%s)", t->pid, t->comm);
    if (t->on_detached)
        t->on_detached(t, t->on_detached_ctx, 0);
    target_free(t);
}

/* Ask th to stop so that it can be released; false if it cannot be (gone, or a zombie
 * leader: it never stops, and the kernel releases it when the process is reaped), and then
 * it is forgotten at once. */
static bool interrupt_for_detach(struct target *t, struct thread *th)
{
    bool zombie = false;
    char name[16];
    if (ptrace(PTRACE_INTERRUPT, th->tid, 0, 0) < 0 ||
        (read_thread_stat(t->pid, th->tid, name, &zombie) == 0 && zombie)) {
        thread_remove(th);
        return false;
    }
    th->interrupt_pending = true;
    th->interrupt_sent_ns = now_ns();
    return true;
}

/* The leader of t, still followed and not a zombie: while it is traced, t's other threads
 * are not released (see target_detach). */
static struct thread *live_leader(const struct target *t)
{
    struct thread *leader = thread_find(t->pid);
    return leader && leader->t == t && !leader->zombie ? leader : NULL;
}

/* Interrupt every thread of t for its release (the leader has gone first). */
static void interrupt_the_rest(struct target *t)
{
    for (size_t i = t->nthreads; i-- > 0;)
        if (i < t->nthreads)
            interrupt_for_detach(t, t->threads[i]);
}

/* Detach one thread from a ptrace stop, passing sig (a signal it was about to receive). */
static void detach_thread(struct thread *th, int sig)
{
    struct target *t = th->t;
    bool leader = th->tid == t->pid;
    int r = ptrace(PTRACE_DETACH, th->tid, 0, (long)sig) < 0 ? -errno : 0;
    note_released(th->tid, r);
    if (r < 0 && r != -ESRCH)
        log_warn("PTRACE_DETACH %d: %s", th->tid, strerror(-r));
    thread_remove(th);
    if (t->state == T_DETACHING && leader)
        interrupt_the_rest(t);
    if (t->state == T_DETACHING && t->nthreads == 0)
        detach_finished(t);
}

/* A leader that calls pthread_exit while its process is being detached never stops (a
 * zombie until the whole process exits): go on without it. */
static void detach_check_leader(struct target *t)
{
    struct thread *leader = thread_find(t->pid);
    bool zombie = false;
    char name[16];
    if (!leader || leader->t != t || read_thread_stat(t->pid, t->pid, name, &zombie) < 0 ||
        !zombie)
        return;
    thread_remove(leader);
    interrupt_the_rest(t);
    if (t->nthreads == 0)
        detach_finished(t);
}

/* A stop of th while t is being detached, to be ended passing sig: th is released, unless
 * the leader still is to go first; then th runs on, traced, until its turn. */
static void detach_or_resume(struct thread *th, int sig)
{
    if (th->tid != th->t->pid && live_leader(th->t))
        target_resume(th, sig);
    else
        detach_thread(th, sig);
}

void target_detach(struct target *t, void (*done)(struct target *, void *, int), void *ctx)
{
    t->on_detached = done;
    t->on_detached_ctx = ctx;
    if (t->state == T_EXITED) {
        if (done)
            done(t, ctx, 0);
        t->on_detached = NULL;
        target_free(t);
        return;
    }
    t->state = T_DETACHING;
    hooks.stopped(t);
    /* PTRACE_DETACH needs a stop the thread can be released from; a thread parked with
     * PTRACE_LISTEN is interrupted first. (daemon/DESIGN.md, "Detaching a thread parked with
     * PTRACE_LISTEN".) */
    struct thread *leader = live_leader(t);
    if (!leader || !interrupt_for_detach(t, leader))
        interrupt_the_rest(t);
    if (t->nthreads == 0)
        detach_finished(t);
}

/* The process is gone: keep its samples for slicing until they expire. status: the
 * leader's wait status, or -1 where it went to the parent alone. */
static void target_exited(struct target *t, int status)
{
    t->exit_status = status;
    t->exit_ns = now_ns();
    hooks.stopped(t);
    while (t->nthreads)
        thread_remove(t->threads[0]);
    unwinder_finish(&t->unw);
    if (t->status_fd >= 0)
        close(t->status_fd);
    t->status_fd = -1;
    if (t->pidfd >= 0)
        close(t->pidfd);
    t->pidfd = -1;
    if (t->state == T_DETACHING) {
        detach_finished(t);
        return;
    }
    t->state = T_EXITED;
    if (status == -1)
        log_info("process %d (%s) ended: its last thread exited (its main thread had ended "
                 "before the attach; its exit status went to its parent alone)", t->pid, t->comm);
    else if (WIFEXITED(status))
        log_info("process %d (%s) exited with status %d", t->pid, t->comm, WEXITSTATUS(status));
    else
        log_info("process %d (%s) killed by signal %d", t->pid, t->comm, WTERMSIG(status));
}

/* PTRACE_EVENT_EXEC, reported by the thread that called execve after it took over the
 * leader's tid: every other thread is gone (ptrace(2), "execve(2) under ptrace"). Start a
 * new generation: new maps, fresh unwind caches, fresh thread state. */
static void target_execed(struct target *t, struct thread *th)
{
    (void)th;
    /* A set-user-ID program: as profd is privileged, the kernel let the exec raise the
     * process's credentials, which it would not have done for an unprivileged tracer. The
     * samples taken from now on are the privileged program's: mark the target so that only a
     * client with CAP_SYS_PTRACE may read any of it, even after it drops them or exits. */
    struct proc_creds now;
    char why[256];
    if (proc_creds_read(t->pid, &now, why, sizeof(why)) == 0) {
        if (memcmp(now.uid, t->creds.uid, sizeof(now.uid)) ||
            memcmp(now.gid, t->creds.gid, sizeof(now.gid)) || now.cap_prm != t->creds.cap_prm ||
            now.dumpable != t->creds.dumpable) {
            t->creds_changed = true;
            log_info("process %d changed credentials at exec: its samples now need "
                     "CAP_SYS_PTRACE", t->pid);
        }
        t->creds = now;
    } else if (!t->creds_changed) {
        /* Whether the exec raised them is unknown: take it that it did. */
        t->creds_changed = true;
        log_warn("process %d exec'd and its new credentials cannot be read (%s): its "
                 "samples now need CAP_SYS_PTRACE", t->pid, why);
    }
    while (t->nthreads)
        thread_remove(t->threads[0]);
    struct thread *leader = thread_add(t, t->pid);
    leader->born = true; /* it is in the exec stop right now */
    read_thread_stat(t->pid, t->pid, t->comm, NULL);
    memcpy(leader->name, t->comm, sizeof(leader->name));
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/exe", t->pid);
    ssize_t n = readlink(path, buf, sizeof(buf) - 1);
    if (n > 0) {
        buf[n] = '\0';
        free(t->exe);
        t->exe = xstrdup(buf);
    }
    t->epoch++;
    epoch_begin(t);
    maps_finish(&t->maps);
    int r = maps_read(t->pid, true, NULL, &t->maps);
    if (r < 0) {
        /* The old program's maps are gone with it: none until the next tick reads them. */
        log_warn("process %d exec'd and its maps cannot be read (%s): reading them again at "
                 "the next tick", t->pid, strerror(-r));
        t->maps_err = r;
        t->maps_dirty = true;
    }
    epoch_merge(t, &t->maps);
    unwinder_flush(&t->unw);
    /* Another program: its runtime, if any, is looked for again. (Code entries stay: the
     * old generation's stacks name them.) */
    t->py.status = PYS_NONE;
    t->py.module_id = 0;
    tctx_target_finish(&t->tctx);
    for (size_t k = 0; k < t->nthreads; k++)
        t->threads[k]->tctx_slot = 0;
    detect_python(t);
    log_info("process %d exec'd %s", t->pid, t->exe);
    if (t->state == T_DETACHING)
        detach_thread(leader, 0);
    else
        target_resume(leader, 0);
}

/* A thread we do not know stopped: a new thread whose first stop arrived before its
 * creator's PTRACE_EVENT_CLONE. Adopt it into its process, or let it go. */
static struct thread *adopt_unknown(pid_t tid, int status)
{
    pid_t tgid = read_tgid(tid);
    struct target *t = tgid > 0 ? target_find(tgid) : NULL;
    if (t && t->state != T_EXITED)
        return thread_add(t, tid);
    /* Not one of our processes' threads: a clone() without CLONE_THREAD made a new process,
     * which the kernel attached to us. Release it, passing on a signal it stopped for. */
    int sig = (unsigned)status >> 16 == 0 ? WSTOPSIG(status) : 0;
    int r = ptrace(PTRACE_DETACH, tid, 0, (long)sig) < 0 ? -errno : 0;
    note_released(tid, r);
    if (r < 0 && r != -ESRCH)
        log_warn("PTRACE_DETACH %d (a process we were not asked to trace): %s", tid,
                 strerror(-r));
    return NULL;
}

/* The stop of a rescue (rescue_stolen_wakeups): the thread was runnable, perhaps woken for a
 * signal another thread took. If its call failed with EINTR, it is repaired as an ignored
 * signal's interruption is (a signal with a handler that is also pending still makes the
 * restarted call fail with EINTR, as it would untraced). */
static void rescue_stop(struct thread *th)
{
    th->rescue_pending = false;
    struct user_regs_struct regs;
    if (!th->stop_eintr && ptrace(PTRACE_GETREGS, th->tid, 0, &regs) == 0) {
        sigrepair_ignored_wakeup(th, &regs);
    }
    target_resume(th, 0);
}


/* Handle one wait status of a traced thread (or of a child that exited). */
/* th exited (or was killed): forgotten, and its process's end or its detach's seen to. */
static void thread_ended(struct thread *th, int status)
{
    struct target *t = th->t;
    pid_t tid = th->tid;
    bool leader = tid == t->pid;
    if (!leader && t->state == T_ATTACHED)
        hooks.thread_exited(th);
    thread_remove(th);
    /* The leader is reported last, once the whole group is gone (__WALL). */
    if (leader)
        target_exited(t, status);
    else if (t->state == T_DETACHING && t->nthreads == 0)
        detach_finished(t);
    else if (t->state == T_ATTACHED && t->nthreads == 0)
        /* A leader that had exited before the attach (a zombie: pthread_exit, or the
         * process exiting as it was attached) was not traced (seize_all), so its exit
         * goes to its parent alone: the last traced thread's is the process's end. */
        target_exited(t, -1);
}

/* th entered a group-stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU). */
static void group_stop(struct thread *th, bool detaching)
{
    struct target *t = th->t;
    pid_t tid = th->tid;
    /* Group-stop. PTRACE_LISTEN keeps it stopped as job control wants, yet lets
     * SIGCONT through; PTRACE_CONT here would break Ctrl-Z and SIGSTOP. A pending
     * interrupt of ours was consumed by this stop. */
    th->interrupt_pending = false;
    th->rescue_pending = false;
    t->stats.group_stops++;
    /* A stop signal makes an epoll wait fail with EINTR even without a tracer
     * (signal(7)); the SIGCONT that ends the stop reaches a traced thread as a
     * signal-delivery-stop, where that EINTR must not be mistaken for ours. */
    struct user_regs_struct regs;
    uint64_t pcount;
    th->stop_eintr = ptrace(PTRACE_GETREGS, tid, 0, &regs) == 0 &&
                     (long)regs.rax == -EINTR && sysc_restartable((long)regs.orig_rax);
    if (th->stop_eintr &&
        proc_read_schedstat(th->schedstat_fd, &th->stop_eintr_run_ns, &pcount) < 0)
        th->stop_eintr_run_ns = 0;
    if (detaching && !(tid != t->pid && live_leader(t))) {
        detach_thread(th, 0);
    } else {
        /* (Detaching: parked until the leader is released.) */
        int r = ptrace(PTRACE_LISTEN, tid, 0, 0) < 0 ? -errno : 0;
        note_released(tid, r);
        if (r == 0)
            th->state = TH_GROUP_STOP;
        else if (r != -ESRCH)
            log_warn("PTRACE_LISTEN %d: %s", tid, strerror(-r));
    }
}

/* th cloned: the new thread is followed if it is one of this process's that profd traces. */
static void clone_event(struct thread *th, bool detaching)
{
    struct target *t = th->t;
    pid_t tid = th->tid;
    unsigned long msg = 0;
    /* Only a thread of this process that still exists and that we still trace: clone()
     * without CLONE_THREAD makes a new process (released at its first stop, in
     * adopt_unknown); a new thread whose first stop and exit were both handled already
     * must not come back; nor one whose first stop came first and released it (a
     * detach): it would be waited for in vain. */
    struct procstatus st;
    if (ptrace(PTRACE_GETEVENTMSG, tid, 0, &msg) == 0 && !thread_find((pid_t)msg) &&
        tid_status((pid_t)msg, &st) == 0 && procstatus_has(&st, PS_TGID) &&
        st.tgid == t->pid && procstatus_has(&st, PS_TRACERPID) && st.tracer_pid == self_pid)
        thread_add(t, (pid_t)msg);
    t->maps_dirty = true; /* its stack was mapped: re-read at the next tick */
    if (detaching)
        detach_or_resume(th, 0);
    else
        target_resume(th, 0);
}

static void targets_handle_wait(pid_t tid, int status)
{
    struct thread *th = thread_find(tid);
    if (!th) {
        if (!WIFSTOPPED(status) && symhelper_reaped(tid, status))
            return; /* a symbolizer process: its status says how it ended */
        if (!WIFSTOPPED(status))
            return; /* exit of a thread we already forgot (after exec or detach) */
        th = adopt_unknown(tid, status);
        if (!th)
            return;
        th->t->maps_dirty = true;
    }
    struct target *t = th->t;
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
        thread_ended(th, status);
        return;
    }
    if (!WIFSTOPPED(status))
        return;
    int sig = WSTOPSIG(status);
    int event = (unsigned)status >> 16;
    bool detaching = t->state == T_DETACHING;
    switch (event) {
    case PTRACE_EVENT_STOP:
        if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
            group_stop(th, detaching);
            return;
        }
        /* SIGTRAP: our interrupt, a new thread's first stop, or the end of a LISTEN. */
        th->state = TH_RUNNING;
        if (!th->born) {
            /* A new thread's first stop (PTRACE_O_TRACECLONE attaches it stopped): it has
             * not run yet, and its creator may be waiting on it. Let it go at once; an
             * interrupt sent meanwhile traps again right after. */
            th->born = true;
            if (detaching) {
                th->interrupt_pending = false;
                detach_or_resume(th, 0);
            } else {
                target_resume(th, 0);
            }
            return;
        }
        if (detaching) {
            /* Interrupted to be detached (or, before that, to be sampled or rescued): a
             * wait it was in must not fail because of it. */
            if ((th->interrupt_pending || th->rescue_pending) && !th->stop_eintr)
                sigrepair_interrupted_syscall(th);
            th->rescue_pending = false;
            detach_or_resume(th, 0);
        }
        else if (th->interrupt_pending)
            sample_stop = th; /* the sampler's: given to the waiter (targets_wait_event) */
        else if (th->rescue_pending)
            rescue_stop(th);
        else
            target_resume(th, 0);
        return;
    case PTRACE_EVENT_CLONE:
        clone_event(th, detaching);
        return;
    case PTRACE_EVENT_EXEC:
        /* Reported under the process id once the execing thread took it over. */
        if (tid == t->pid)
            target_execed(t, th);
        else
            detach_thread(th, 0);
        return;
    case 0:
        /* Signal-delivery-stop: re-inject now, in this callback. */
        t->stats.signals_forwarded++;
        sigrepair_ignored_signal(th, sig);
        if (detaching)
            detach_or_resume(th, sig);
        else
            target_resume(th, sig);
        return;
    default:
        if (detaching)
            detach_or_resume(th, 0);
        else
            target_resume(th, 0);
        return;
    }
}

/* A sample stop that no one will sample (a reap outside the sampler's waits): resumed as
 * the sampler would resume it, its interrupted call restarted. */
static void resume_unsampled(struct thread *th)
{
    th->interrupt_pending = false;
    if (!th->stop_eintr)
        sigrepair_interrupted_syscall(th);
    target_resume(th, 0);
}

/* The end of a peeked stop's handling: if the request that should have ended the stop
 * failed, reap it so that it is not seen again, and handle what was reaped as any reaped
 * stop (or the exit of a thread killed meanwhile). */
static void peek_done(pid_t tid)
{
    peeked_tid = 0;
    if (peeked_released)
        return;
    int status;
    if (waitpid(tid, &status, __WALL | WNOHANG) != tid)
        return;
    sample_stop = NULL;
    targets_handle_wait(tid, status);
    if (sample_stop)
        resume_unsampled(sample_stop);
    sample_stop = NULL;
}

int targets_wait_event(bool block, struct thread **sample)
{
    if (sample)
        *sample = NULL;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    /* WNOWAIT: see the event without reaping it. Reaping a stop (waitpid) takes its signal
     * out of the kernel's hands: the tracer's wait clears the thread's exit_code
     * (kernel/exit.c, wait_task_stopped), so a tracer that dies before its PTRACE_CONT(sig)
     * loses that signal (measured: a SIGUSR1 caught this way and never re-injected was
     * gone after the tracer's exit). A stop left unreaped keeps it: the kernel delivers it
     * when the dead tracer's threads are released (ptrace_stop returns the exit_code). The
     * ptrace request that resumes the thread ends the stop as well as a wait would. */
    if (waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | __WALL | WNOWAIT | (block ? 0 : WNOHANG)) < 0)
        return -errno;
    pid_t tid = si.si_pid;
    if (tid == 0)
        return 0;
    int status;
    /* The wait status waitpid would give: the stop signal and the ptrace event. */
    int peek = ((si.si_status & 0xffff) << 8) | 0x7f;
    if (si.si_code == CLD_TRAPPED && (unsigned)peek >> 16 != PTRACE_EVENT_EXEC) {
        /* (An exec stop must be reaped first: the kernel refuses every request on it with
         * ESRCH until it is, when the exec moved the thread to the leader's tid,
         * kernel/ptrace.c looks_like_a_spurious_pid.) */
        peeked_tid = tid;
        peeked_released = false;
        sample_stop = NULL;
        targets_handle_wait(tid, peek);
        struct thread *th = sample_stop;
        sample_stop = NULL;
        if (th && sample) {
            *sample = th; /* still in its stop: the caller's, then targets_sample_done */
            return tid;
        }
        if (th)
            resume_unsampled(th);
        peek_done(tid);
        return tid;
    }
    if (si.si_code == CLD_STOPPED) {
        /* A child that is not traced (a symbolizer helper) stopped by job control: none of
         * ours to resume. Reap the notification, or it would be seen again at once. */
        memset(&si, 0, sizeof(si));
        waitid(P_PID, (id_t)tid, &si, WSTOPPED | WNOHANG);
        return tid;
    }
    /* An exit. Until it is reaped the thread is a zombie whose name can still be read: one
     * that ran since its name was read, or is young, may have named itself since (a thread
     * of a few milliseconds that names itself as it starts may have had no read in its
     * life on a busy machine), and its samples take the name it had last. Then reaped and
     * handled. (ECHILD: the symbolizer's owner reaped it first.) */
    struct thread *gone = thread_find(tid);
    if (gone && (gone->ran_since_name || gone->name_checks < 3))
        target_thread_refresh_name(gone);
    if (waitpid(tid, &status, __WALL | WNOHANG) == tid)
        targets_handle_wait(tid, status);
    return tid;
}

void targets_sample_done(struct thread *th)
{
    if (!peeked_tid)
        return;
    if (th->interrupt_pending) /* the caller did not take it after all */
        resume_unsampled(th);
    peek_done(peeked_tid);
}

/* Handle every pending ptrace event and child exit; no sample taken. */
static void targets_reap(void)
{
    while (targets_wait_event(false, NULL) > 0)
        ;
}

void target_set_hz(struct target *t, unsigned hz)
{
    t->hz = hz;
    t->ring.max_entries = ring_max_entries(hz, t->buffer_ns);
}


/* The name the kernel printed in a status file (proc_task_name: a newline as "\n", a
 * backslash as "\\", nothing else escaped), as the task's comm, cut to 15 bytes. */
static void unescape_name(const char *in, char name[16])
{
    size_t n = 0;
    for (const char *p = in; *p && n < 15; p++) {
        char c = *p;
        if (c == '\\' && (p[1] == 'n' || p[1] == '\\'))
            c = *++p == 'n' ? '\n' : '\\';
        name[n++] = c;
    }
    name[n] = '\0';
}

/* th's name and state from a status file of it, read already: whether it had both. */
static bool name_from_status(struct thread *th, const struct procstatus *st)
{
    if (!procstatus_has(st, PS_NAME) || !procstatus_has(st, PS_STATE))
        return false;
    unescape_name(st->name, th->name);
    th->zombie = st->state == 'Z' || st->state == 'X';
    if (th->zombie)
        th->interrupt_pending = false; /* a zombie never stops */
    return true;
}

/* th's name and state: from pre if given (a status file of it read already), else from its
 * status file, open already (an open of a /proc file costs 10-40 us here, the largest part
 * of a second's housekeeping); from its stat file without either. */
static void refresh_name(struct thread *th, const struct procstatus *pre)
{
    bool zombie = false;
    if (th->name_checks < UINT8_MAX)
        th->name_checks++;
    if (pre && name_from_status(th, pre))
        return;
    struct procstatus st;
    if (th->status_fd >= 0 && procstatus_read_fd(th->status_fd, &status_buf, &st) == 0 &&
        name_from_status(th, &st))
        return;
    if (read_thread_stat(th->t->pid, th->tid, th->name, &zombie) == 0) {
        th->zombie = zombie;
        if (zombie)
            th->interrupt_pending = false; /* a zombie never stops */
    }
}

void target_thread_refresh_name(struct thread *th)
{
    refresh_name(th, NULL);
}

void target_refresh_name(struct target *t, pid_t tid)
{
    struct thread *th = thread_find(tid);
    if (th && th->t == t)
        target_thread_refresh_name(th);
}

/* Catch threads that escaped attach (should not happen) and refresh names and zombies. */
static void refresh_threads(struct target *t, uint64_t now)
{
    /* The process's status file is its leader thread's (its name, its state) with the
     * process's signal dispositions: one read for both. */
    struct procstatus pst;
    bool have_pst = sigrepair_read_status(t, NULL, &pst) == 0; /* (dispositions may have changed
                                                           * with no signal since) */
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        /* A thread's name changes when it sets it (prctl) or another thread of the process
         * writes its comm file: not while none of them has run. */
        if (!th->ran_since_name && th->name_checks >= 3 && th->tid != t->pid) {
            t->names_spared++;
            continue;
        }
        th->ran_since_name = false;
        refresh_name(th, th->tid == t->pid && have_pst ? &pst : NULL);
    }
    /* The process's name is its leader's. */
    struct thread *leader = thread_find(t->pid);
    if (leader && leader->t == t)
        snprintf(t->comm, sizeof(t->comm), "%s", leader->name);
    else
        read_thread_stat(t->pid, t->pid, t->comm, NULL);
    /* Forget names of threads gone for longer than the buffer holds samples (order kept:
     * the newest entry for a tid wins). */
    size_t keep = 0;
    for (size_t i = 0; i < t->nnames; i++)
        if (t->names[i].last_seen_ns + t->buffer_ns >= now)
            t->names[keep++] = t->names[i];
    t->nnames = keep;
}

void targets_housekeeping(uint64_t now)
{
    struct target *next;
    for (struct target *t = targets; t; t = next) {
        next = t->next;
        ring_expire(&t->ring, now);
        if (t->state == T_EXITED) {
            if (now > t->exit_ns + t->buffer_ns) {
                log_info("forgetting exited process %d (%s)", t->pid, t->comm);
                target_free(t);
            }
            continue;
        }
        if (t->state == T_DETACHING)
            detach_check_leader(t);
        if (t->state != T_ATTACHED)
            continue;
        /* None of its threads ran since the last look, none came or went: its names, its
         * signal dispositions and its mappings are as they were (only the process itself
         * changes them; profd is its only tracer). 100 idle services: 4% of profd's CPU was
         * these reads. */
        if (t->activity == t->hk_activity && !t->maps_dirty) {
            t->housekeeping_spared++;
            continue;
        }
        t->hk_activity = t->activity;
        refresh_threads(t, now);
        /* Re-read at each look where the status says the mappings changed, and at least
         * every MAPS_LOOK_NS in any case (a mapping replaced by one of the same size) if a
         * thread ran since the last read; an unwind that meets code in no mapping reads them
         * at once (sampler.c). Reading them was the largest part of profd's CPU for a target
         * whose threads are all asleep or all in one busy loop: 21% of it at 101 Hz with one
         * busy thread. */
        if (!t->vm_now.size_kb || memcmp(&t->vm_now, &t->vm_at_maps, sizeof(t->vm_now)) ||
            t->maps_dirty ||
            (now - t->maps_read_ns >= MAPS_LOOK_NS && t->activity != t->maps_activity))
            target_refresh_maps(t);
        else
            t->maps_unchanged++;
    }
}

void targets_shutdown(uint64_t timeout_ns)
{
    struct target *next;
    for (struct target *t = targets; t; t = next) {
        next = t->next;
        if (t->state != T_DETACHING) /* one already detaching answers its client when done */
            target_detach(t, NULL, NULL);
    }
    uint64_t deadline = now_ns() + timeout_ns;
    for (unsigned round = 0; targets && now_ns() < deadline; round++) {
        targets_reap();
        if (round % 100 == 99) {
            for (struct target *t = targets, *next; t; t = next) {
                next = t->next;
                if (t->state == T_DETACHING)
                    detach_check_leader(t);
            }
        }
        if (!targets)
            break;
        targets_collect();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (targets)
        log_warn("%zu processes not fully detached at exit: threads that never stopped "
                 "(uninterruptible sleep) are released by the kernel as profd exits",
                 targets_count());
    strbuf_finish(&status_buf);
    sigrepair_finish();
}

size_t targets_memory(void)
{
    size_t sum = 0;
    for (struct target *t = targets_first(); t; t = t->next)
        sum += target_memory(t);
    return sum;
}

size_t target_memory(const struct target *t)
{
    size_t m = sizeof(*t) + ring_memory(&t->ring) + stacks_memory(&t->stacks);
    m += t->nthreads * sizeof(struct thread) + t->cap_names * sizeof(struct thread_name);
    m += t->unw.pages ? PAGE_CACHE_SLOTS * sizeof(struct page_slot) : 0;
    for (size_t i = 0; i < t->nepochs; i++)
        m += t->epochs[i].maps.n * sizeof(struct map_entry);
    m += t->maps.n * sizeof(struct map_entry);
    for (size_t i = 0; i < t->nthreads; i++) {
        const struct sampler_thread *smp = &t->threads[i]->smp;
        m += perfs_bytes(&smp->ps) + perfs_bytes(&smp->pl); /* the kernel's rings: locked */
        for (int k = 0; k < PYK_EVENTS; k++)
            m += smp->pyq[k].cap + smp->goq[k].cap + smp->ctxq[k].cap; /* records not paired yet (pykernel.h,
                                                     * gokernel.h) */
    }
    return m + py_target_memory(&t->py);
}
