/* pykernel.c: Python frames read in the kernel at the sample's instant (see pykernel.h). */
#include "pykernel.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <ev.h>

#include "bpf/pybpf.h"
#include "gokernel.h"
#include "log.h"
#include "pyframes.skel.h"
#include "target.h"
#include "util.h"

_Static_assert(PYBPF_MAX_FRAMES == PY_MAX_FRAMES, "a record holds what a sample can");
_Static_assert((int)PYK_EVENTS == (int)PYBPF_KINDS, "one program per event");

/* The program is loaded on a thread of its own (the verifier, and libbpf's relocations,
 * take 20-30 ms here, seconds under valgrind: not on the loop, whose ticks would wait);
 * until it is, Python targets are stopped for their frames, then switched over. */
enum { LOAD_NONE, LOAD_RUNNING, LOAD_DONE, LOAD_FAILED };
static int load_state; /* (atomic: the loader's result is read after it) */
static pthread_t loader;
static struct ev_loop *loop;
static ev_async load_done_w;
static bool loader_started, loader_joined; /* (the loop thread's) */
static struct pyframes_bpf *skel;   /* (the loader's until load_state says it is done) */
static struct ring_buffer *rb;
static char why_not[160];
static char go_why_not[160]; /* the Go programs left out (loaded without them): why */
static char ctx_why_not[160]; /* the thread context's programs left out: why */

/* The program, once the loader is done with it; NULL before, or if it failed. */
static struct pyframes_bpf *loaded(void)
{
    return __atomic_load_n(&load_state, __ATOMIC_ACQUIRE) == LOAD_DONE ? skel : NULL;
}

/* A queued record: the sample's frames, ready for py_encode. */
struct entry {
    uint64_t time_ns;
    uint16_t n;
    uint8_t flags;
    uint8_t pad[5];
    struct py_frame frames[];
};
#define ENTRY_SIZE(n) (sizeof(struct entry) + (size_t)(n) * sizeof(struct py_frame))
/* Most bytes a thread's queue for one event holds: records of samples not read yet (a
 * deferral's batch of a clock). A preemption watch's ring holds its last few preemptions
 * only, and its records of older ones, never to be read, go first (counted unpaired). */
#define QUEUE_MAX (256u * 1024u)
#define QUEUE_MAX_PREEMPT (32u * 1024u)

static int on_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG)
        return 0;
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '\n')
        buf[n - 1] = '\0';
    log_debug("libbpf: %s", buf);
    return 0;
}

static int on_record(void *ctx, void *data, size_t size);

/* The loader thread: the program and its ring buffer, or why not. */
static void *load_thread(void *arg)
{
    (void)arg;
    struct stat ns;
    int r = 0;
    struct pyframes_bpf *s = NULL;
    if (stat("/proc/self/ns/pid", &ns) < 0) {
        r = -errno;
        snprintf(why_not, sizeof(why_not), "no PID namespace to key processes by (%s)",
                 strerror(-r));
        goto out;
    }
    s = pyframes_bpf__open();
    const char *go_off = getenv("PROFD_GO_BPF");
    if (!s) {
        r = errno ? -errno : -ENOMEM;
    } else {
        /* (The kernel's dev_t: major << 20 | minor.) */
        s->rodata->pidns_dev = ((uint64_t)major(ns.st_dev) << 20) | minor(ns.st_dev);
        s->rodata->pidns_ino = ns.st_ino;
        /* PROFD_GO_BPF=0: without the Go programs (Go targets' goroutines read at the
         * unwind, as where the kernel refuses them: for tests). */
        r = go_off && !strcmp(go_off, "0") ? -ENOTSUP : pyframes_bpf__load(s);
        r = r == -1 ? -errno : r;
        if (r < 0) {
            /* Without the Go programs (their kernel needs: BTF, bpf_task_pt_regs), the
             * Python ones may still load. */
            int go_r = r;
            pyframes_bpf__destroy(s);
            s = pyframes_bpf__open();
            if (!s) {
                r = errno ? -errno : -ENOMEM;
            } else {
                s->rodata->pidns_dev = ((uint64_t)major(ns.st_dev) << 20) | minor(ns.st_dev);
                s->rodata->pidns_ino = ns.st_ino;
                bpf_program__set_autoload(s->progs.go_clock, false);
                bpf_program__set_autoload(s->progs.go_latest, false);
                bpf_program__set_autoload(s->progs.go_preempt, false);
                /* (The thread context's need the same: BTF for the thread pointer. Go's
                 * turned off alone leaves them.) */
                if (go_r != -ENOTSUP) {
                    bpf_program__set_autoload(s->progs.ctx_clock, false);
                    bpf_program__set_autoload(s->progs.ctx_latest, false);
                    bpf_program__set_autoload(s->progs.ctx_preempt, false);
                }
                r = pyframes_bpf__load(s);
                r = r == -1 ? -errno : r;
                /* (Said for Go only where Python's loaded without them: else the reason
                 * is the program's, why_not.) */
                if (r == 0 && go_r == -ENOTSUP)
                    snprintf(go_why_not, sizeof(go_why_not), "turned off (PROFD_GO_BPF=0)");
                else if (r == 0)
                    snprintf(go_why_not, sizeof(go_why_not), "the kernel refused the eBPF "
                             "program for Go (%s)", strerror(-go_r));
                if (r == 0 && go_r != -ENOTSUP)
                    snprintf(ctx_why_not, sizeof(ctx_why_not), "the kernel refused the eBPF "
                             "program for the thread context (%s)", strerror(-go_r));
            }
        }
    }
    if (r < 0) {
        snprintf(why_not, sizeof(why_not), "the kernel refused the eBPF program (%s%s)",
                 strerror(-r), r == -EPERM || r == -EACCES ? ": no CAP_BPF and CAP_PERFMON, "
                                                             "or a seccomp filter" : "");
        goto out;
    }
    /* The Python and Go programs end in the thread context's (bpf/pyframes.bpf.c). */
    const struct bpf_program *ctxp[PYBPF_KINDS] = {s->progs.ctx_clock, s->progs.ctx_latest,
                                                   s->progs.ctx_preempt};
    for (__u32 k = 0; !ctx_why_not[0] && k < PYBPF_KINDS; k++) {
        int pfd = bpf_program__fd(ctxp[k]);
        if (pfd < 0 || bpf_map_update_elem(bpf_map__fd(s->maps.ctxjump), &k, &pfd, BPF_ANY) < 0)
            snprintf(ctx_why_not, sizeof(ctx_why_not), "the eBPF program's jump table refused "
                     "the thread context's (%s)", strerror(errno));
    }
    rb = ring_buffer__new(bpf_map__fd(s->maps.records), on_record, NULL, NULL);
    if (rb && (ring_buffer__add(rb, bpf_map__fd(s->maps.gorecords), on_record, NULL) < 0 ||
               ring_buffer__add(rb, bpf_map__fd(s->maps.ctxrecords), on_record, NULL) < 0)) {
        ring_buffer__free(rb);
        rb = NULL;
        errno = errno ? errno : ENOMEM;
    }
    if (!rb) {
        r = -errno;
        snprintf(why_not, sizeof(why_not), "no ring buffer for the eBPF program (%s)",
                 strerror(-r));
        goto out;
    }
    skel = s;
out:
    if (r < 0)
        pyframes_bpf__destroy(s);
    __atomic_store_n(&load_state, r < 0 ? LOAD_FAILED : LOAD_DONE, __ATOMIC_RELEASE);
    ev_async_send(loop, &load_done_w);
    return NULL;
}

/* On the loop: the loader is done. Every Python target is switched over (or told why not). */
static void on_load_done(struct ev_loop *l, ev_async *w, int revents)
{
    (void)l;
    (void)w;
    (void)revents;
    pthread_join(loader, NULL);
    loader_joined = true;
    if (loaded())
        log_info("Python frames are read in the kernel at each sample (eBPF)");
    else
        log_info("Python frames are read in ptrace stops: %s", why_not);
    for (struct target *t = targets_first(); t; t = t->next) {
        pyk_target_update(t);
        gok_target_update(t);
    }
}

void pyk_init(struct ev_loop *l)
{
    loop = l;
    ev_async_init(&load_done_w, on_load_done);
    ev_async_start(loop, &load_done_w);
    ev_unref(loop); /* (a watcher that does not keep the loop alive) */
}

/* 0 when the program is loaded; -EINPROGRESS while it loads (started on the first call);
 * else -EPERM with why_not said. */
static int load(void)
{
    int st = __atomic_load_n(&load_state, __ATOMIC_ACQUIRE);
    if (st == LOAD_DONE)
        return 0;
    if (st == LOAD_RUNNING)
        return -EINPROGRESS;
    if (st == LOAD_FAILED)
        return -EPERM;
    const char *e = getenv("PROFD_PYTHON_BPF");
    if ((e && !strcmp(e, "0")) || !loop) {
        snprintf(why_not, sizeof(why_not), "turned off (PROFD_PYTHON_BPF=0)");
        __atomic_store_n(&load_state, LOAD_FAILED, __ATOMIC_RELEASE);
        return -EPERM;
    }
    libbpf_set_print(on_libbpf);
    __atomic_store_n(&load_state, LOAD_RUNNING, __ATOMIC_RELEASE);
    /* (No signal for it: they are the loop's.) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&loader, NULL, load_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    loader_started = r == 0;
    if (r) {
        snprintf(why_not, sizeof(why_not), "no thread to load the eBPF program (%s)",
                 strerror(r));
        __atomic_store_n(&load_state, LOAD_FAILED, __ATOMIC_RELEASE);
        return -EPERM;
    }
    return -EINPROGRESS;
}

int pyk_load(const char **why)
{
    int r = load();
    if (r == 0 && go_why_not[0])
        r = -EPERM;
    *why = r == -EINPROGRESS ? "the eBPF program is being loaded"
           : r < 0             ? (go_why_not[0] ? go_why_not : why_not)
                               : NULL;
    return r;
}

int pyk_load_ctx(const char **why)
{
    int r = load();
    if (r == 0 && ctx_why_not[0])
        r = -EPERM;
    *why = r == -EINPROGRESS ? "the eBPF program is being loaded"
           : r < 0             ? (ctx_why_not[0] ? ctx_why_not : why_not)
                               : NULL;
    return r;
}

void pyk_ctx_targets(int delta)
{
    struct pyframes_bpf *sk = loaded();
    if (sk)
        sk->bss->ctx_targets += (uint32_t)delta;
}

int pyk_ctxprocs_fd(void)
{
    struct pyframes_bpf *sk = loaded();
    return sk ? bpf_map__fd(sk->maps.ctxprocs) : -1;
}

int pyk_goprocs_fd(void)
{
    struct pyframes_bpf *sk = loaded();
    return sk ? bpf_map__fd(sk->maps.goprocs) : -1;
}

void pyk_consume(void)
{
    if (rb)
        ring_buffer__consume(rb);
}

bool pyk_loaded(const char **why)
{
    int st = __atomic_load_n(&load_state, __ATOMIC_ACQUIRE);
    if (why)
        *why = st == LOAD_FAILED ? why_not : st == LOAD_RUNNING ? "being loaded" : NULL;
    return st == LOAD_DONE;
}

void pyk_shutdown(void)
{
    if (loop) {
        if (loader_started && !loader_joined) {
            pthread_join(loader, NULL); /* (its notice will not be read) */
            loader_joined = true;
        }
        ev_ref(loop);
        ev_async_stop(loop, &load_done_w);
    }
    ring_buffer__free(rb);
    rb = NULL;
    pyframes_bpf__destroy(skel);
    skel = NULL;
}

/* The layout the program walks with, from the runtime's. */
static void proc_of(const struct py_runtime *rt, struct pybpf_proc *p)
{
    const struct py_layout *L = rt->lay;
    memset(p, 0, sizeof(*p));
    p->runtime = rt->runtime;
    p->code_type = rt->code_type;
    p->rt_interp_head = L->rt_interp_head;
    p->interp_next = L->interp_next;
    p->interp_threads = L->interp_threads;
    p->ts_next = L->ts_next;
    p->ts_native_tid = L->ts_native_tid;
    p->ts_frame = L->ts_frame;
    p->cframe_current = L->cframe_current;
    p->fr_code = L->fr_code;
    p->fr_previous = L->fr_previous;
    p->fr_instr = L->fr_instr;
    p->fr_owner = L->fr_owner;
    p->fr_owner_max = L->fr_owner_max;
    p->ptr_tag = L->ptr_tag;
    p->fr_func = L->fr_func;
    p->fr_is_entry = L->fr_is_entry;
    p->fr_size = L->fr_size;
    p->co_filename = L->co_filename;
    p->co_name = L->co_name;
    p->co_qualname = L->co_qualname;
    p->co_linetable = L->co_linetable;
    p->co_firstlineno = L->co_firstlineno;
    p->co_code_adaptive = L->co_code_adaptive;
    p->co_size = L->co_size;
}

/* Whether every field the program reads lies where its buffers reach (3.13+'s offsets come
 * from the target's memory: pyframes.c bounds them; checked again against the program's). */
static bool proc_fits(const struct pybpf_proc *p);

bool pyk_layout_fits(const struct py_runtime *rt)
{
    struct pybpf_proc p;
    proc_of(rt, &p);
    return proc_fits(&p);
}

static bool proc_fits(const struct pybpf_proc *p)
{
    unsigned fr[] = {p->fr_code, p->fr_previous, p->fr_instr, p->fr_func};
    for (size_t i = 0; i < sizeof(fr) / sizeof(fr[0]); i++)
        if (fr[i] + 8 > PYBPF_FRAME_BYTES || fr[i] + 8 > p->fr_size)
            return false;
    if (p->fr_owner >= p->fr_size || (p->fr_is_entry >= 0 && (unsigned)p->fr_is_entry >= p->fr_size))
        return false;
    unsigned co[] = {p->co_filename, p->co_name, p->co_qualname, p->co_linetable};
    for (size_t i = 0; i < sizeof(co) / sizeof(co[0]); i++)
        if (co[i] + 8 > p->co_size)
            return false;
    return p->co_firstlineno + 4 <= p->co_size && p->co_size <= PYBPF_CODE_BYTES &&
           p->fr_size <= PYBPF_FRAME_BYTES && p->co_size >= 24;
}

void pyk_target_update(struct target *t)
{
    struct py_target *py = &t->py;
    bool was = py->kernel;
    if (was && py->status == PYS_OK && py->kernel_module == py->module_id)
        return; /* (maps read again: the same runtime) */
    py->kernel = false;
    if (py->status != PYS_OK) {
        if (was)
            pyk_target_forget(t);
        return;
    }
    int r = load();
    py->kernel_loading = r == -EINPROGRESS;
    if (r < 0) {
        snprintf(py->kernel_why, sizeof(py->kernel_why), "%s",
                 r == -EINPROGRESS ? "the eBPF program is being loaded" : why_not);
        return;
    }
    struct pybpf_proc p;
    proc_of(&py->rt, &p);
    if (!proc_fits(&p)) { /* (3.13+'s offsets come from the target) */
        snprintf(py->kernel_why, sizeof(py->kernel_why), "this CPython's layout is beyond "
                 "what the eBPF program reads");
        return;
    }
    __u32 key = (__u32)t->pid;
    if (bpf_map_update_elem(bpf_map__fd(loaded()->maps.procs), &key, &p, BPF_ANY) < 0) {
        snprintf(py->kernel_why, sizeof(py->kernel_why), "the eBPF program's map refused it "
                 "(%s)", strerror(errno));
        return;
    }
    py->kernel = true;
    py->kernel_reopen = true;
    py->kernel_module = py->module_id;
    py->kernel_why[0] = '\0';
}

void pyk_target_forget(struct target *t)
{
    t->py.kernel = false;
    struct pyframes_bpf *sk = loaded();
    if (!sk)
        return;
    __u32 key = (__u32)t->pid;
    bpf_map_delete_elem(bpf_map__fd(sk->maps.procs), &key);
}

int pyk_attach(struct target *t, int fd, enum pyk_event ev, bool tracepoint)
{
    struct pyframes_bpf *sk = loaded();
    if (!(t->py.kernel || t->gok.kernel || t->tctx.kernel) || !sk)
        return -EPERM;
    const struct bpf_program *prog = ev == PYK_CLOCK     ? sk->progs.py_clock
                                     : ev == PYK_LATEST  ? sk->progs.py_latest
                                     : tracepoint         ? sk->progs.py_preempt_tp
                                                          : sk->progs.py_preempt;
    if (t->gok.kernel) /* (never on the tracepoint: gokernel.h) */
        prog = ev == PYK_CLOCK ? sk->progs.go_clock : ev == PYK_LATEST ? sk->progs.go_latest
                                                                        : sk->progs.go_preempt;
    /* A native target's thread context alone (the others end in it). */
    bool ctx_only = !t->py.kernel && !t->gok.kernel;
    if (ctx_only)
        prog = ev == PYK_CLOCK ? sk->progs.ctx_clock : ev == PYK_LATEST ? sk->progs.ctx_latest
                                                                         : sk->progs.ctx_preempt;
    if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, bpf_program__fd(prog)) == 0)
        return 0;
    int r = -errno;
    if (r == -EEXIST && (t->gok.kernel || ctx_only))
        return 0; /* (attached before: the runtime found again after a flush) */
    if (ctx_only) {
        tctx_kernel_refused(t, r);
        return r;
    }
    if (t->gok.kernel) {
        snprintf(t->gok.why, sizeof(t->gok.why), "the kernel refused the eBPF program on a "
                 "perf event (%s)", strerror(-r));
        log_info("pid %d: %s: goroutines beneath C code are read at the unwind", t->pid,
                 t->gok.why);
        gok_target_forget(t);
        return r;
    }
    if (!t->py.kernel_why[0] || t->py.kernel)
        snprintf(t->py.kernel_why, sizeof(t->py.kernel_why), "the kernel refused the eBPF "
                 "program on a perf event (%s)", strerror(-r));
    log_info("pid %d: %s: its running threads are stopped for their Python frames", t->pid,
             t->py.kernel_why);
    pyk_target_forget(t);
    return r;
}

unsigned pyk_queue_room(struct pyk_queue *q, size_t need, uint32_t max, bool stale,
                        size_t (*size_at)(const uint8_t *))
{
    unsigned dropped = 0;
    while (q->tail + need > q->cap) {
        if (q->head) { /* the room taken records left at the front */
            memmove(q->buf, q->buf + q->head, q->tail - q->head);
            q->moved += q->tail - q->head;
            q->tail -= q->head;
            q->head = 0;
        } else if (q->cap < max) {
            uint32_t cap = q->cap ? q->cap * 2 : 4096;
            q->buf = xrealloc(q->buf, cap);
            q->cap = cap;
        } else if (q->tail) {
            /* Full: its oldest record goes (a stale queue's older half). */
            uint32_t upto = stale ? q->cap / 2 : 1;
            while (q->head < q->tail && q->head < upto) {
                q->head += (uint32_t)size_at(q->buf + q->head);
                dropped++;
            }
            if (q->head > q->tail) /* (a record's size past the queue's end: none kept) */
                q->head = q->tail;
        } else {
            return PYK_NO_ROOM; /* (a record larger than a queue) */
        }
    }
    return dropped;
}

static size_t entry_size(const uint8_t *at)
{
    return ENTRY_SIZE(((const struct entry *)(const void *)at)->n);
}

void pyk_queue_push(struct pyk_queue *q, const struct pybpf_rec *r, struct py_kernel_stats *ks)
{
    uint32_t max = r->kind == PYBPF_PREEMPT ? QUEUE_MAX_PREEMPT : QUEUE_MAX;
    size_t need = ENTRY_SIZE(r->nframes);
    unsigned dropped = pyk_queue_room(q, need, max, r->kind == PYBPF_PREEMPT, entry_size);
    if (dropped == PYK_NO_ROOM)
        return;
    if (r->kind == PYBPF_PREEMPT)
        ks->unpaired += dropped;
    else
        ks->queue_dropped += dropped;
    struct entry *e = (void *)(q->buf + q->tail);
    e->time_ns = r->time_ns;
    e->n = r->nframes;
    e->flags = r->flags;
    for (unsigned i = 0; i < r->nframes; i++) {
        const struct pybpf_frame *f = &r->frames[i];
        e->frames[i] = (struct py_frame){.code = f->code, .ident = f->ident, .func = f->func,
                                         .instr = f->instr, .entry = f->entry != 0};
    }
    q->tail += (uint32_t)need;
}

static int on_record(void *ctx, void *data, size_t size)
{
    (void)ctx;
    const struct pybpf_rec *r = data;
    if (size >= PYBPF_REC_HEAD && (r->flags & GOBPF_GO)) {
        gok_on_record(data, size);
        return 0;
    }
    if (size >= PYBPF_REC_HEAD && (r->flags & CTXBPF_CTX)) {
        tctx_on_record(data, size);
        return 0;
    }
    if (size < PYBPF_REC_HEAD || r->nframes > PYBPF_MAX_FRAMES || r->kind >= PYBPF_KINDS ||
        size < PYBPF_REC_HEAD + r->nframes * sizeof(struct pybpf_frame))
        return 0;
    struct target *t = target_find((pid_t)r->pid);
    if (!t || !t->py.kernel)
        return 0;
    struct thread *th = target_thread(t, (pid_t)r->tid);
    if (!th)
        return 0;
    t->py.ks.records++;
    pyk_queue_push(&th->smp.pyq[r->kind], r, &t->py.ks);
    return 0;
}

int pyk_take(struct target *t, struct thread *th, enum pyk_event ev, uint64_t time_ns,
             struct py_frame *out)
{
    if (!t->py.kernel)
        return -1;
    ring_buffer__consume(rb);
    return pyk_queue_take(&th->smp.pyq[ev], time_ns, out, &t->py.ks);
}

int pyk_queue_take(struct pyk_queue *q, uint64_t time_ns, struct py_frame *out,
                   struct py_kernel_stats *ks)
{
    while (q->head < q->tail) {
        const struct entry *e = (const void *)(q->buf + q->head);
        uint32_t size = (uint32_t)ENTRY_SIZE(e->n);
        if (e->time_ns < time_ns) {
            q->head += size; /* a sample not read (skipped, lost) */
            ks->unpaired++;
            continue;
        }
        if (e->time_ns - time_ns > PYK_PAIR_NS)
            break; /* a later sample's: this one's is missing */
        int n = 0;
        if (e->flags & PYBPF_FAULT) {
            ks->faulted++;
        } else if (e->flags & PYBPF_BAD) {
            ks->failed_check++;
        } else {
            ks->truncated += (e->flags & PYBPF_TRUNCATED) != 0;
            ks->no_thread_state += (e->flags & PYBPF_NO_TSTATE) != 0;
            n = e->n;
            memcpy(out, e->frames, (size_t)n * sizeof(*out));
        }
        ks->paired++;
        q->head += size;
        if (q->head == q->tail)
            q->head = q->tail = 0;
        return n;
    }
    if (q->head == q->tail)
        q->head = q->tail = 0;
    ks->missing++;
    return PYK_MISSING;
}

void pyk_counters(uint64_t *records, uint64_t *full)
{
    *records = *full = 0;
    struct pyframes_bpf *sk = loaded();
    if (!sk)
        return;
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || ncpu > 4096)
        return;
    uint64_t v[ncpu];
    memset(v, 0, sizeof(v)); /* (valgrind does not know a per-CPU map's lookup fills it) */
    int fd = bpf_map__fd(sk->maps.counters);
    __u32 k = PYBPF_C_RECORDS;
    if (bpf_map_lookup_elem(fd, &k, v) == 0)
        for (int i = 0; i < ncpu; i++)
            *records += v[i];
    k = PYBPF_C_RB_FULL;
    if (bpf_map_lookup_elem(fd, &k, v) == 0)
        for (int i = 0; i < ncpu; i++)
            *full += v[i];
}
