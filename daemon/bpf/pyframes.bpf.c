/* pyframes.bpf.c: a CPython 3.11-3.14 thread's Python frames, read in the kernel at the
 * instant of its perf sample (the event's overflow, the thread interrupted: its chain cannot
 * change under the read), into a ring buffer that profd pairs with the same sample's stack
 * copy (daemon/pykernel.c). Per frame: the code object's address and what identifies it,
 * the code unit it is at, whether it is an evaluation call's first; naming is profd's.
 *
 * Everything is read with bpf_probe_read_user from the target's memory, a page not resident
 * ends the chain (counted: PYBPF_FAULT), every pointer is checked before it is followed as
 * pyframes.c checks it (a code object's type; bounded counts), and a chain longer than a
 * record is marked truncated, its outer frames left out, never guessed. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "pybpf.h"

char LICENSE[] SEC("license") = "GPL";

/* profd's PID namespace (its nsfs device and inode, set before the load): processes and
 * threads are keyed and named by their ids there, as profd knows them (a container's profd,
 * or targets in one, see other numbers than the kernel's first namespace). */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;

/* (Kernel memory, charged to profd once a Python target comes: the processes' entries
 * made as they come; the threads' states preallocated, 1.4 MiB; the ring buffer 8 MiB.) */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct pybpf_proc);
} procs SEC(".maps");

/* Go processes (gokernel.c): made as they come, like procs. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct gobpf_proc);
} goprocs SEC(".maps");

/* Go records, a ring of their own: a busy Go target's copies (up to 16 KiB each) do not
 * crowd out Python's records. */
struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4 << 20);
} gorecords SEC(".maps");

/* A Go record being built (16 KiB: a per-CPU array of its own). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct gobpf_rec);
} goscratch SEC(".maps");

/* Processes whose OpenTelemetry thread context is read (threadctx.c): made as they come. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct ctxbpf_proc);
} ctxprocs SEC(".maps");

/* Their records, a ring of their own. */
struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 20);
} ctxrecords SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ctxbpf_rec);
} ctxscratch SEC(".maps");

/* How many processes are in ctxprocs (profd keeps it): the Python and Go programs end in
 * the context's only while there is one, so that without any they cost what they did. */
volatile __u32 ctx_targets = 0;

/* The context programs by event (enum pybpf_kind), for the Python and Go programs to end
 * in: filled by profd once loaded, and left empty where the kernel refused them (they need
 * its BTF, as Go's), so that Python's load without them. */
struct {
    __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
    __uint(max_entries, PYBPF_KINDS);
    __type(key, __u32);
    __type(value, __u32);
} ctxjump SEC(".maps");

/* The thread pointer (fs base) of the current task, as the kernel keeps it (arch_prctl,
 * which glibc and the Go runtime set it with; saved at every switch): matched by name in
 * the running kernel's BTF (CO-RE). */
struct thread_struct___profd {
    unsigned long fsbase;
} __attribute__((preserve_access_index));
struct task_struct___profd {
    struct thread_struct___profd thread;
} __attribute__((preserve_access_index));
/* Its user registers' stack pointer (bpf_task_pt_regs). */
struct pt_regs___profd {
    unsigned long sp;
} __attribute__((preserve_access_index));

/* (More threads than this: the least recent ones' states are looked for again.) */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct pybpf_tstate);
} tstates SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 8 << 20);
} records SEC(".maps");

/* The record being built and the walk's state (too big for the 512-byte stack). */
struct scratch {
    struct pybpf_proc p;
    __u64 f;          /* the next frame to read */
    __u64 t, interp;  /* the thread-state walk */
    __u32 tid;
    __u32 n;
    /* The code object read last in this walk (a recursion's frames share it): its head's
     * facts, not read again. */
    __u64 last_code, last_ident, last_units;
    __u8 fb[PYBPF_FRAME_BYTES + 8]; /* (room for a field at the masked offset's end) */
    __u8 cb[256 + 8];
    struct pybpf_rec rec;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct scratch);
} scratch SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, PYBPF_C_N);
    __type(key, __u32);
    __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which, __u64 n)
{
    __u64 *c = bpf_map_lookup_elem(&counters, &which);
    if (c)
        *c += n;
}

static __always_inline struct scratch *get_scratch(void)
{
    __u32 zero = 0;
    return bpf_map_lookup_elem(&scratch, &zero);
}

/* A field of the frame or code object read into s (its offset bounded within the buffer). */
#define FB64(s, off) (*(__u64 *)&(s)->fb[(off) & (PYBPF_FRAME_BYTES - 1)])
#define CB64(s, off) (*(__u64 *)&(s)->cb[(off) & 0xff])
#define CB32(s, off) (*(__u32 *)&(s)->cb[(off) & 0xff])

static __always_inline int read_u64(__u64 *dst, __u64 addr)
{
    return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

/* One thread state of the walk: 1 stops it (found, or the list's end). */
static long tstate_step(__u32 i, void *arg)
{
    struct scratch *s = get_scratch();
    (void)i;
    (void)arg;
    if (!s)
        return 1;
    if (!s->t) {
        /* The next interpreter's threads. */
        if (!s->interp)
            return 1;
        if (read_u64(&s->t, s->interp + s->p.interp_threads) ||
            read_u64(&s->interp, s->interp + s->p.interp_next)) {
            s->interp = 0;
            s->t = 0;
            return 1;
        }
        return 0;
    }
    __u64 tid = 0, next = 0;
    if (read_u64(&tid, s->t + s->p.ts_native_tid) || read_u64(&next, s->t + s->p.ts_next)) {
        s->t = 0;
        s->interp = 0;
        return 1;
    }
    if ((__u32)tid == s->tid)
        return 1; /* s->t is it */
    s->t = next;
    return 0;
}

/* The current thread's state: the one found last time if it is still the thread's, else
 * looked for in the interpreters' lists (and remembered; none found is remembered for
 * PYBPF_RECHECK_NS). 0 if none. */
static __always_inline __u64 find_tstate(struct scratch *s, __u64 now)
{
    __u32 tid = s->tid;
    struct pybpf_tstate *ts = bpf_map_lookup_elem(&tstates, &tid);
    if (ts && ts->addr) {
        __u64 native = 0;
        if (!read_u64(&native, ts->addr + s->p.ts_native_tid) && (__u32)native == tid)
            return ts->addr;
    } else if (ts && now - ts->checked_ns < PYBPF_RECHECK_NS) {
        return 0;
    }
    s->t = 0;
    s->interp = 0;
    if (read_u64(&s->interp, s->p.runtime + s->p.rt_interp_head))
        return 0;
    bpf_loop(PYBPF_MAX_TSTATES * PYBPF_MAX_INTERPS, tstate_step, NULL, 0);
    struct pybpf_tstate v = {.addr = s->t, .checked_ns = now};
    bpf_map_update_elem(&tstates, &tid, &v, BPF_ANY);
    return s->t;
}

/* One step of the frame chain: 1 ends it. */
static long frame_step(__u32 i, void *arg)
{
    struct scratch *s = get_scratch();
    (void)i;
    (void)arg;
    if (!s || !s->f)
        return 1;
    __u32 fsz = s->p.fr_size;
    if (fsz > PYBPF_FRAME_BYTES)
        fsz = PYBPF_FRAME_BYTES;
    if (bpf_probe_read_user(s->fb, fsz, (const void *)s->f)) {
        s->rec.flags |= PYBPF_FAULT;
        return 1;
    }
    __u64 prev = FB64(s, s->p.fr_previous);
    __u8 owner = s->fb[s->p.fr_owner & (PYBPF_FRAME_BYTES - 1)];
    if (owner > s->p.fr_owner_max) {
        s->rec.flags |= PYBPF_BAD;
        return 1;
    }
    __u32 n = s->n;
    if (owner >= 3) {
        /* A shim: the frame recorded before it is an evaluation call's first. */
        if (n > 0 && n <= PYBPF_MAX_FRAMES)
            s->rec.frames[(n - 1) & (PYBPF_MAX_FRAMES - 1)].entry = 1;
        s->f = prev;
        return 0;
    }
    if (n >= PYBPF_MAX_FRAMES) {
        s->rec.flags |= PYBPF_TRUNCATED;
        return 1;
    }
    __u64 code = FB64(s, s->p.fr_code) & ~(__u64)s->p.ptr_tag;
    if (code != s->last_code || !code) {
        __u32 csz = s->p.co_size;
        if (csz > PYBPF_CODE_BYTES)
            csz = PYBPF_CODE_BYTES;
        if (!code || bpf_probe_read_user(s->cb, csz, (const void *)code)) {
            s->rec.flags |= PYBPF_FAULT;
            return 1;
        }
        if (CB64(s, 8) != s->p.code_type) {
            s->rec.flags |= PYBPF_BAD;
            return 1;
        }
        s->last_code = code;
        s->last_units = CB64(s, 16);
        s->last_ident = pybpf_ident(CB64(s, s->p.co_filename), CB64(s, s->p.co_name),
                                    CB64(s, s->p.co_qualname), CB64(s, s->p.co_linetable),
                                    CB32(s, s->p.co_firstlineno));
    }
    __u64 units = s->last_units;
    __u64 base = code + s->p.co_code_adaptive;
    __u64 ip = FB64(s, s->p.fr_instr);
    __u64 instr = ip >= base ? (ip - base) / 2 : 0;
    if (units > (1u << 24) || instr > units) {
        s->rec.flags |= PYBPF_BAD;
        return 1;
    }
    struct pybpf_frame *fr = &s->rec.frames[n & (PYBPF_MAX_FRAMES - 1)];
    fr->code = code;
    fr->func = FB64(s, s->p.fr_func) & ~(__u64)s->p.ptr_tag;
    fr->instr = (__u32)instr;
    fr->entry = s->p.fr_is_entry >= 0 && s->fb[s->p.fr_is_entry & (PYBPF_FRAME_BYTES - 1)];
    fr->ident = s->last_ident;
    s->n = n + 1;
    s->f = prev;
    return 0;
}

/* A Go thread's sample: if it runs on a stack other than its goroutine's (g, from its
 * thread pointer, is not g.m.curg: C code of a cgo call or the runtime's on g0, a signal
 * handler on gsignal), the goroutine's stack from its saved sp, as it is at this instant
 * (read later, the goroutine would have moved on). */
/* The record of one sample: the goroutine's copy (len bytes of stack) or, with g 0, the
 * header alone (nothing to copy), so that every sample has its record and none takes
 * another's (pairing, gokernel.c). */
static __always_inline int go_emit(struct gobpf_rec *r, __u32 pid, __u32 tid,
                                   enum pybpf_kind kind, __u64 len)
{
    r->time_ns = bpf_ktime_get_ns();
    r->pid = pid;
    r->tid = tid;
    r->unused = 0;
    r->kind = (__u8)kind;
    r->flags = GOBPF_GO;
    r->len = (__u32)len;
    count(PYBPF_C_GO_RECORDS, 1);
    len &= GOBPF_STACK - 1;
    if (bpf_ringbuf_output(&gorecords, r, GOBPF_REC_HEAD + len, BPF_RB_NO_WAKEUP))
        count(PYBPF_C_RB_FULL, 1);
    return 1;
}

static __always_inline int go_copy(__u32 pid, __u32 tid, enum pybpf_kind kind,
                                   const struct gobpf_proc *p)
{
    __u32 zero = 0;
    struct gobpf_rec *r = bpf_map_lookup_elem(&goscratch, &zero);
    if (!r)
        return 1;
    r->g = 0;
    struct task_struct *cur = bpf_get_current_task_btf();
    struct task_struct___profd *task = (void *)cur;
    struct pt_regs___profd *regs = (void *)bpf_task_pt_regs(cur);
    __u64 fs = BPF_CORE_READ(task, thread.fsbase), usp = BPF_CORE_READ(regs, sp);
    __u64 g = 0, m = 0, curg = 0, b[2], sched[2];
    if (!fs || read_u64(&g, fs + p->tls_g) || !g || read_u64(&m, g + p->g_m) || !m ||
        read_u64(&curg, m + p->m_curg))
        return go_emit(r, pid, tid, kind, 0);
    /* No goroutine on the thread (the scheduler's code on g0): g0's stack (m.g0, m's first
     * field), for a signal handler that interrupted it. */
    int g0 = !curg;
    if (g0 && (read_u64(&curg, m) || !curg))
        return go_emit(r, pid, tid, kind, 0);
    if (bpf_probe_read_user(b, sizeof(b), (const void *)curg) ||
        bpf_probe_read_user(sched, sizeof(sched), (const void *)(curg + p->g_sched)))
        return go_emit(r, pid, tid, kind, 0);
    __u64 lo = b[0], hi = b[1], sp = sched[0], pc = sched[1];
    /* On its goroutine's own stack: the sample's copy holds it. (Still curg's g but on
     * another stack: a signal handler before it switched g, a vDSO call on g0.) */
    if (hi <= lo || hi - lo > (1ull << 30) || (curg == g && usp >= lo && usp < hi))
        return go_emit(r, pid, tid, kind, 0);
    __u64 base;
    if (sp < lo || sp >= hi || g0) {
        /* No switch saved it (a signal's handler on gsignal: the goroutine was running,
         * its sp is in the signal frame), or g0's (its sched is its top): the stack's top,
         * where its outer frames are. */
        base = hi - lo > GOBPF_STACK - 8 ? hi - (GOBPF_STACK - 8) : lo;
        sp = pc = 0;
    } else {
        base = sp - lo > GOBPF_BELOW_SP ? sp - GOBPF_BELOW_SP : lo;
    }
    __u64 len = hi - base;
    if (len > GOBPF_STACK - 8)
        len = GOBPF_STACK - 8;
    len &= GOBPF_STACK - 1; /* (a bound the verifier sees; the same value) */
    if (bpf_probe_read_user(r->stack, len, (const void *)base))
        return go_emit(r, pid, tid, kind, 0);
    r->g = curg;
    r->lo = lo;
    r->hi = hi;
    r->sp = sp;
    r->pc = pc;
    r->base = base;
    return go_emit(r, pid, tid, kind, len);
}

static __always_inline int walk(enum pybpf_kind kind)
{
    struct bpf_pidns_info ns;
    if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
        return 1; /* (not in profd's namespace: not a target) */
    __u32 pid = ns.tgid, tid = ns.pid;
    struct pybpf_proc *p = bpf_map_lookup_elem(&procs, &pid);
    if (!p)
        return 1; /* (not a Python target's: its sample goes on as it is) */
    struct scratch *s = get_scratch();
    if (!s)
        return 1;
    __u64 now = bpf_ktime_get_ns();
    s->p = *p;
    s->tid = tid;
    s->n = 0;
    s->f = 0;
    s->last_code = 0;
    s->rec.time_ns = now;
    s->rec.pid = pid;
    s->rec.tid = tid;
    s->rec.kind = (__u8)kind;
    s->rec.flags = 0;
    __u64 ts = find_tstate(s, now);
    if (!ts) {
        s->rec.flags = PYBPF_NO_TSTATE;
    } else if (!read_u64(&s->f, ts + s->p.ts_frame)) {
        if (s->p.cframe_current >= 0 && s->f &&
            read_u64(&s->f, s->f + (__u32)s->p.cframe_current)) {
            s->f = 0;
            s->rec.flags |= PYBPF_FAULT;
        }
        bpf_loop(PYBPF_MAX_STEPS, frame_step, NULL, 0);
        if (s->f && !(s->rec.flags & (PYBPF_FAULT | PYBPF_BAD)))
            s->rec.flags |= PYBPF_TRUNCATED;
    } else {
        s->rec.flags |= PYBPF_FAULT;
    }
    __u32 n = s->n;
    if (n > PYBPF_MAX_FRAMES)
        n = PYBPF_MAX_FRAMES;
    s->rec.nframes = (__u16)n;
    __u64 size = PYBPF_REC_HEAD + (__u64)n * sizeof(struct pybpf_frame);
    count(PYBPF_C_RECORDS, 1);
    if (bpf_ringbuf_output(&records, &s->rec, size, BPF_RB_NO_WAKEUP))
        count(PYBPF_C_RB_FULL, 1);
    return 1; /* the perf sample (the stack copy) is written as always */
}

SEC("perf_event")
int py_clock(void *ctx)
{
    walk(PYBPF_CLOCK);
    if (ctx_targets)
        bpf_tail_call(ctx, &ctxjump, PYBPF_CLOCK);
    return 1;
}

SEC("perf_event")
int py_latest(void *ctx)
{
    walk(PYBPF_LATEST);
    if (ctx_targets)
        bpf_tail_call(ctx, &ctxjump, PYBPF_LATEST);
    return 1;
}

SEC("perf_event")
int py_preempt(void *ctx)
{
    walk(PYBPF_PREEMPT);
    if (ctx_targets)
        bpf_tail_call(ctx, &ctxjump, PYBPF_PREEMPT);
    return 1;
}

/* The preemption watch on the sched_switch tracepoint (perfsample.c): the switched-out
 * thread is still current there. Its filter keeps preemptions and yields only (the state it
 * leaves in 0, or TASK_REPORT_MAX and above), but the program runs before the filter: it
 * walks for those alone. (prev_state: at 32 in the tracepoint's record, its format file.) */
SEC("tracepoint")
int py_preempt_tp(void *ctx)
{
    long state = *(long *)((char *)ctx + 32);
    if (state != 0 && state < 256)
        return 0; /* a block: the filter drops its sample too */
    return walk(PYBPF_PREEMPT);
}

/* A Go target's events (gokernel.h): programs of their own, which profd leaves out where the
 * kernel refuses them (no BTF for the thread pointer, no bpf_task_pt_regs before 5.15),
 * keeping Python's. */
static __always_inline int go_sample(enum pybpf_kind kind)
{
    struct bpf_pidns_info ns;
    if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
        return 1;
    __u32 pid = ns.tgid;
    struct gobpf_proc *gp = bpf_map_lookup_elem(&goprocs, &pid);
    return gp ? go_copy(pid, ns.pid, kind, gp) : 1;
}

SEC("perf_event")
int go_clock(void *ctx)
{
    go_sample(PYBPF_CLOCK);
    if (ctx_targets)
        bpf_tail_call(ctx, &ctxjump, PYBPF_CLOCK);
    return 1;
}

SEC("perf_event")
int go_latest(void *ctx)
{
    go_sample(PYBPF_LATEST);
    if (ctx_targets)
        bpf_tail_call(ctx, &ctxjump, PYBPF_LATEST);
    return 1;
}

SEC("perf_event")
int go_preempt(void *ctx)
{
    go_sample(PYBPF_PREEMPT);
    if (ctx_targets)
        bpf_tail_call(ctx, &ctxjump, PYBPF_PREEMPT);
    return 1;
}

/* OpenTelemetry's thread context (threadctx.h): the record the thread's otel_thread_ctx_v1
 * points to, read at the sample's instant (the thread is interrupted: its writer, which
 * uses compiler fences only, cannot be halfway). Where the pointer is: the thread pointer's
 * dtv (at fs base + 8, glibc's x86-64 TCB), its module's slot (16 bytes each, the block's
 * address first), plus the symbol's offset; profd checked the slot against libthread_db's
 * answer before it put the process in the map. */
static __always_inline int ctx_emit(struct ctxbpf_rec *r, __u32 pid, __u32 tid,
                                    enum pybpf_kind kind, __u32 flags, __u64 len)
{
    r->time_ns = bpf_ktime_get_ns();
    r->pid = pid;
    r->tid = tid;
    r->kind = (__u8)kind;
    r->flags = (__u8)(CTXBPF_CTX | flags);
    r->pad = 0;
    if (len > CTXBPF_MAX)
        len = CTXBPF_MAX;
    r->len = (__u16)len;
    count(PYBPF_C_CTX_RECORDS, 1);
    if (bpf_ringbuf_output(&ctxrecords, r, CTXBPF_REC_HEAD + (len & 1023), BPF_RB_NO_WAKEUP))
        count(PYBPF_C_RB_FULL, 1);
    return 1;
}

static __always_inline int ctx_sample(enum pybpf_kind kind)
{
    struct bpf_pidns_info ns;
    if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
        return 1;
    __u32 pid = ns.tgid, zero = 0;
    struct ctxbpf_proc *p = bpf_map_lookup_elem(&ctxprocs, &pid);
    if (!p)
        return 1;
    struct ctxbpf_rec *r = bpf_map_lookup_elem(&ctxscratch, &zero);
    if (!r)
        return 1;
    struct task_struct___profd *task = (void *)bpf_get_current_task_btf();
    __u64 fs = BPF_CORE_READ(task, thread.fsbase), dtv = 0, len = 0, block = 0, ptr = 0;
    __u32 modid = p->modid & 1023;
    /* A dtv made before the module was loaded is shorter than its id (the entry before
     * entry 0 holds its length): none yet, as a block not allocated yet (all ones). */
    if (!fs || read_u64(&dtv, fs + 8) || !dtv || read_u64(&len, dtv - 16) || modid > len ||
        read_u64(&block, dtv + 16 * (__u64)modid) || block == ~0ull ||
        read_u64(&ptr, block + p->sym_off))
        return ctx_emit(r, pid, ns.pid, kind, CTXBPF_FAULT, 0);
    if (!ptr)
        return ctx_emit(r, pid, ns.pid, kind, CTXBPF_NONE, 0);
    if (bpf_probe_read_user(r->rec, CTXBPF_HEAD, (const void *)ptr))
        return ctx_emit(r, pid, ns.pid, kind, CTXBPF_FAULT, 0);
    __u64 size = *(__u16 *)&r->rec[26];
    if (size > CTXBPF_MAX - CTXBPF_HEAD)
        size = CTXBPF_MAX - CTXBPF_HEAD;
    /* (The head alone where the attributes cannot be read: the span is not lost.) */
    if (r->rec[24] != 1 || !size ||
        bpf_probe_read_user(r->rec + CTXBPF_HEAD, size & 1023, (const void *)(ptr + CTXBPF_HEAD)))
        size = 0;
    return ctx_emit(r, pid, ns.pid, kind, 0, CTXBPF_HEAD + size);
}

SEC("perf_event")
int ctx_clock(void *ctx)
{
    (void)ctx;
    return ctx_sample(PYBPF_CLOCK);
}

SEC("perf_event")
int ctx_latest(void *ctx)
{
    (void)ctx;
    return ctx_sample(PYBPF_LATEST);
}

SEC("perf_event")
int ctx_preempt(void *ctx)
{
    (void)ctx;
    return ctx_sample(PYBPF_PREEMPT);
}
