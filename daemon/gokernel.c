/* gokernel.c: a Go target's goroutine read in the kernel at each sample (see gokernel.h). */
#include "gokernel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <sys/user.h>

#include "bpf/pybpf.h"
#include "log.h"
#include "target.h"
#include "unwind.h"
#include "util.h"

/* Most bytes of records one thread's queue for one event holds (records of samples not
 * read yet: a deferral's batch, cputime's ring read every 250 ms); the oldest go first. */
#define QUEUE_MAX (1024u * 1024u)
/* Most a record's time may follow its sample's (the program runs in the overflow, right
 * after the kernel stamped the sample). */
#define PAIR_NS PYK_PAIR_NS

static size_t rec_size(const struct gobpf_rec *r)
{
    return GOBPF_REC_HEAD + ((r->len + 7u) & ~7u);
}

void gok_target_update(struct target *t)
{
    struct go_kernel *k = &t->gok;
    const struct go_runtime *rt = &t->unw.go_rt;
    if (t->py.status != PYS_NONE) {
        /* A Go program that embeds CPython: the events carry Python's program (one each);
         * its goroutines are read at the unwind. */
        if (k->kernel)
            gok_target_forget(t);
        if (rt->module)
            snprintf(k->why, sizeof(k->why), "a Python process: its events carry the Python "
                     "frames' program");
        return;
    }
    if (k->kernel && k->module == rt->module)
        return;
    if (k->kernel) { /* (an exec: another runtime, or none) */
        gok_target_forget(t);
        k->module = 0;
    }
    if (!rt->module || (k->module == rt->module && k->why[0]))
        return; /* (none; or tried and refused for this one) */
    k->module = rt->module;
    const char *why = NULL;
    if (!rt->tls_known || rt->m_curg <= 0) {
        snprintf(k->why, sizeof(k->why), "%s", !rt->tls_known
                 ? "the executable has thread-locals of its own: where g is is unknown"
                 : "runtime.systemstack's code does not say where m.curg is");
        return;
    }
    int r = pyk_load(&why);
    if (r == -EINPROGRESS) {
        k->module = 0; /* (tried again when it is loaded) */
        snprintf(k->why, sizeof(k->why), "%s", why);
        return;
    }
    if (r < 0) {
        snprintf(k->why, sizeof(k->why), "%s", why ? why : "no eBPF program");
        return;
    }
    struct gobpf_proc p = {.tls_g = rt->tls_g, .g_m = 48, .m_curg = (uint32_t)rt->m_curg,
                           .g_sched = 56};
    __u32 key = (__u32)t->pid;
    if (bpf_map_update_elem(pyk_goprocs_fd(), &key, &p, BPF_ANY) < 0) {
        snprintf(k->why, sizeof(k->why), "the eBPF program's map refused it (%s)",
                 strerror(errno));
        return;
    }
    k->kernel = true;
    k->reopen = true;
    k->why[0] = '\0';
    log_debug("pid %d: goroutines beneath a thread's system stack read at each sample", t->pid);
}

void gok_target_forget(struct target *t)
{
    t->gok.kernel = false;
    int fd = pyk_goprocs_fd();
    if (fd < 0)
        return;
    __u32 key = (__u32)t->pid;
    bpf_map_delete_elem(fd, &key);
}

static size_t size_at(const uint8_t *at)
{
    return rec_size((const void *)at);
}

void gok_queue_push(struct pyk_queue *q, const struct gobpf_rec *r, struct go_kernel *k)
{
    size_t need = rec_size(r);
    if (r->len > GOBPF_STACK)
        return;
    bool stale = r->kind == PYBPF_PREEMPT;
    unsigned dropped = pyk_queue_room(q, need, QUEUE_MAX, stale, size_at);
    if (dropped == PYK_NO_ROOM)
        return;
    if (stale)
        k->unpaired += dropped; /* (other switches', never to be read) */
    else
        k->dropped += dropped;
    memcpy(q->buf + q->tail, r, GOBPF_REC_HEAD + r->len);
    q->tail += (uint32_t)need;
}

bool gok_queue_take(struct pyk_queue *q, uint64_t time_ns, struct go_copy *c, uint8_t *stack,
                    struct go_kernel *k)
{
    while (q->head < q->tail) {
        const struct gobpf_rec *r = (const void *)(q->buf + q->head);
        uint32_t size = (uint32_t)rec_size(r);
        if (r->time_ns < time_ns) {
            q->head += size; /* a sample not read (skipped, lost) */
            k->unpaired++;
            continue;
        }
        if (r->time_ns - time_ns > PAIR_NS)
            break; /* a later sample's: this one's is missing */
        if (r->len > GOBPF_STACK || size > q->tail - q->head) {
            q->head = q->tail = 0; /* (not a record of ours: none is) */
            return false;
        }
        k->paired++;
        q->head += size;
        if (q->head == q->tail)
            q->head = q->tail = 0;
        if (!r->g)
            return false; /* the sample's thread was on its goroutine's stack: no copy */
        *c = (struct go_copy){.g = r->g, .lo = r->lo, .hi = r->hi, .sp = r->sp, .pc = r->pc,
                              .base = r->base, .len = r->len, .data = stack};
        memcpy(stack, r->stack, r->len);
        return true;
    }
    if (q->head == q->tail)
        q->head = q->tail = 0;
    return false;
}

void gok_on_record(const void *data, size_t size)
{
    const struct gobpf_rec *r = data;
    if (size < GOBPF_REC_HEAD || r->len > GOBPF_STACK || size < GOBPF_REC_HEAD + r->len ||
        r->kind >= PYBPF_KINDS)
        return;
    struct target *t = target_find((pid_t)r->pid);
    if (!t || !t->gok.kernel)
        return;
    struct thread *th = target_thread(t, (pid_t)r->tid);
    if (!th)
        return;
    t->gok.records++;
    gok_queue_push(&th->smp.goq[r->kind], r, &t->gok);
}

const struct go_copy *gok_take(struct target *t, struct thread *th, enum pyk_event ev,
                               uint64_t time_ns)
{
    static struct go_copy c;
    static uint8_t *stack;
    if (!t->gok.kernel)
        return NULL;
    pyk_consume();
    if (!stack)
        stack = xmalloc(GOBPF_STACK);
    return gok_queue_take(&th->smp.goq[ev], time_ns, &c, stack, &t->gok) ? &c : NULL;
}

const struct go_copy *gok_read_stopped(struct target *t, pid_t tid,
                                       const struct user_regs_struct *regs)
{
    static struct go_copy c;
    static uint8_t *stack;
    const struct go_runtime *rt = &t->unw.go_rt;
    if (!rt->module || !rt->tls_known || rt->m_curg <= 0 || !regs->fs_base)
        return NULL;
    ssize_t (*rd)(pid_t, void *, uint64_t, size_t) = t->unw.read_mem;
    uint64_t g, m, curg, head[9];
    if (rd(tid, &g, regs->fs_base + (uint64_t)rt->tls_g, 8) != 8 || !g ||
        rd(tid, &m, g + 48, 8) != 8 || !m || rd(tid, &curg, m + (uint64_t)rt->m_curg, 8) != 8)
        return NULL;
    bool g0 = !curg; /* (no goroutine on the thread: g0's stack, m's first field) */
    if ((g0 && (rd(tid, &curg, m, 8) != 8 || !curg)) ||
        rd(tid, head, curg, sizeof(head)) != sizeof(head))
        return NULL;
    /* As the program does (bpf/pyframes.bpf.c go_copy): g.stack at 0, g.sched at 56. */
    uint64_t lo = head[0], hi = head[1], sp = head[7], pc = head[8];
    if (hi <= lo || hi - lo > (1ull << 30) || (curg == g && regs->rsp >= lo && regs->rsp < hi))
        return NULL;
    uint64_t base;
    if (sp < lo || sp >= hi || g0) {
        base = hi - lo > GOBPF_STACK - 8 ? hi - (GOBPF_STACK - 8) : lo;
        sp = pc = 0;
    } else {
        base = sp - lo > GOBPF_BELOW_SP ? sp - GOBPF_BELOW_SP : lo;
    }
    size_t len = hi - base > GOBPF_STACK - 8 ? GOBPF_STACK - 8 : (size_t)(hi - base);
    if (!stack)
        stack = xmalloc(GOBPF_STACK);
    if (rd(tid, stack, base, len) != (ssize_t)len)
        return NULL;
    c = (struct go_copy){.g = curg, .lo = lo, .hi = hi, .sp = sp, .pc = pc, .base = base,
                         .len = (uint32_t)len, .data = stack};
    t->gok.stopped_reads++;
    return &c;
}
