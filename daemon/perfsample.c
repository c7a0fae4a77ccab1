/* perfsample.c: a thread's perf event and its ring (see perfsample.h). */
#include "perfsample.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "unwind.h"
#include "util.h"

/* perf's x86-64 user register mask: AX BX CX DX SI DI BP SP IP FLAGS CS SS (bits 0-11) and
 * R8-R15 (bits 16-23), 20 values in bit order. */
#define REGS_MASK 0xff0fffULL
#define NREGS 20
/* Room for one record beside its stack: header, tid, time, abi, registers, sizes. */
#define RECORD_OVERHEAD 256u

static struct perfs_totals totals;
static long page_size;
/* One record, copied out of the ring when it wraps around the ring's end. */
static uint8_t *scratch;

void perfs_stream_init(struct perf_stream *ps)
{
    memset(ps, 0, sizeof(*ps));
    ps->fd = -1;
}

/* A stack copy's size as the kernel takes it: 8-aligned, at most its limit. */
static uint32_t stack_bytes(uint32_t stack_size)
{
    if (stack_size) {
        stack_size = (stack_size + 7) & ~7u;
        if (stack_size > PERFS_MAX_STACK)
            stack_size = PERFS_MAX_STACK;
    }
    return stack_size;
}

static size_t ring_data_size(uint32_t stack_size, unsigned records)
{
    size_t need = ((size_t)stack_size + RECORD_OVERHEAD) * (records ? records : 1);
    size_t sz = (size_t)page_size;
    while (sz < need)
        sz <<= 1;
    return sz;
}

/* At paranoid 2 and above, without CAP_PERFMON, an event on another process must exclude
 * the kernel: the first refusal teaches every later open. Samples then skip the ticks that
 * land while the thread is in the kernel (a running thread in a system call). */
static bool need_exclude_kernel;

int perfs_init(void)
{
    if (!page_size)
        page_size = sysconf(_SC_PAGESIZE);
    if (!scratch)
        scratch = malloc(65536);
    return scratch ? 0 : -ENOMEM;
}

size_t perfs_ring_bytes(uint32_t stack_size, bool continuous, unsigned batch)
{
    if (perfs_init() < 0)
        return 0;
    stack_size = stack_bytes(stack_size);
    return (size_t)page_size +
           ring_data_size(stack_size, continuous && stack_size ? batch + 8 : 1);
}

/* A task-clock event of period_ns, stamped on CLOCK_MONOTONIC, with stack_size bytes of stack
 * per sample (0: counting only). */
static void task_clock_attr(struct perf_event_attr *pa, uint64_t period_ns, uint32_t stack_size)
{
    memset(pa, 0, sizeof(*pa));
    pa->size = sizeof(*pa);
    pa->type = PERF_TYPE_SOFTWARE;
    pa->config = PERF_COUNT_SW_TASK_CLOCK;
    pa->sample_period = period_ns;
    pa->sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
    if (stack_size) {
        pa->sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
        pa->sample_regs_user = REGS_MASK;
        pa->sample_stack_user = stack_size;
    }
    pa->use_clockid = 1;
    pa->clockid = CLOCK_MONOTONIC;
    pa->exclude_hv = 1;
}

/* Open pa on tid and map its ring of data bytes (prot: PROT_READ alone makes it one the
 * kernel overwrites). An event that counts in the kernel (in_kernel: a context switch) is
 * refused where only user-space events are allowed: excluding the kernel, it would never
 * sample. Returns 0 or -errno, counted. */
static int open_event_ex(struct perf_stream *ps, pid_t tid, struct perf_event_attr *pa,
                         size_t data, int prot, bool in_kernel)
{
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        if (in_kernel && need_exclude_kernel) {
            errno = EACCES;
            break;
        }
        pa->exclude_kernel = need_exclude_kernel;
        fd = (int)syscall(SYS_perf_event_open, pa, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0 && (errno == EACCES || errno == EPERM) && !need_exclude_kernel && !in_kernel)
            need_exclude_kernel = true;
        else
            break;
    }
    if (fd < 0) {
        int e = errno;
        totals.open_failed++;
        totals.last_err = -e;
        return -e;
    }
    void *buf = mmap(NULL, (size_t)page_size + data, prot, MAP_SHARED, fd, 0);
    if (buf == MAP_FAILED) {
        /* EPERM: past perf_event_mlock_kb and RLIMIT_MEMLOCK (the locked-memory limits). */
        int e = errno == EPERM ? ENOMEM : errno;
        close(fd);
        totals.open_failed++;
        totals.last_err = -e;
        return -e;
    }
    ps->fd = fd;
    ps->buf = buf;
    ps->data_size = data;
    totals.streams++;
    totals.opened++;
    totals.ring_bytes += (size_t)page_size + data;
    return 0;
}

static int open_event(struct perf_stream *ps, pid_t tid, struct perf_event_attr *pa, size_t data,
                      int prot)
{
    return open_event_ex(ps, tid, pa, data, prot, false);
}

int perfs_open(struct perf_stream *ps, pid_t tid, uint64_t period_ns, uint32_t stack_size,
               bool continuous, unsigned batch)
{
    if (perfs_init() < 0)
        return -ENOMEM;
    perfs_stream_init(ps);
    stack_size = stack_bytes(stack_size);
    struct perf_event_attr pa;
    task_clock_attr(&pa, period_ns, stack_size);
    pa.disabled = !continuous;
    /* A continuous ring holds its batch and 8 samples more: the reader may be late (a busy
     * machine) by that many periods before the kernel drops samples (counted as lost). */
    size_t data = ring_data_size(stack_size, continuous && stack_size ? batch + 8 : 1);
    if (continuous) {
        if (stack_size) {
            /* The reader reads on a timer of its own and does not poll the ring; the kernel
             * still runs its wake-up (in the target's sampling interrupt) each time a
             * watermark's worth of bytes has been written: the largest watermark, the whole
             * ring, makes that rarest. */
            pa.watermark = 1;
            pa.wakeup_watermark = (uint32_t)data;
        } else {
            pa.wakeup_events = 1;
        }
    } else {
        /* Never woken: the one sample is read at the next tick. */
        pa.watermark = 1;
        pa.wakeup_watermark = (uint32_t)data;
    }
    int r = open_event(ps, tid, &pa, data, PROT_READ | PROT_WRITE);
    if (r < 0)
        return r;
    ps->stack_size = stack_size;
    ps->continuous = continuous;
    ps->period_ns = period_ns;
    return 0;
}

#define LATEST_RECORDS 3

size_t perfs_latest_bytes(uint32_t stack_size)
{
    if (perfs_init() < 0)
        return 0;
    return (size_t)page_size + ring_data_size(stack_bytes(stack_size), LATEST_RECORDS);
}

int perfs_open_latest(struct perf_stream *ps, pid_t tid, uint64_t period_ns,
                      uint32_t stack_size)
{
    if (perfs_init() < 0)
        return -ENOMEM;
    perfs_stream_init(ps);
    stack_size = stack_bytes(stack_size);
    if (!stack_size)
        return -EINVAL;
    struct perf_event_attr pa;
    task_clock_attr(&pa, period_ns, stack_size);
    pa.write_backward = 1;
    /* Nobody polls it: the kernel never has anybody to wake. */
    size_t data = ring_data_size(stack_size, LATEST_RECORDS);
    pa.watermark = 1;
    pa.wakeup_watermark = (uint32_t)data;
    int r = open_event(ps, tid, &pa, data, PROT_READ);
    if (r < 0)
        return r;
    ps->stack_size = stack_size;
    ps->continuous = true;
    ps->latest = true;
    ps->period_ns = period_ns;
    return 0;
}

/* The record of `size` bytes at ring position pos: in place, or, where it wraps past the
 * ring's end, copied whole into scratch. */
static const uint8_t *record_at(const struct perf_stream *ps, uint64_t pos, size_t size)
{
    const uint8_t *data = ps->buf + page_size;
    uint64_t at = pos & (ps->data_size - 1);
    if (at + size <= ps->data_size)
        return data + at;
    size_t first = ps->data_size - at;
    memcpy(scratch, data + at, first);
    memcpy(scratch + first, data, size - first);
    return scratch;
}

int perfs_latest(struct perf_stream *ps, struct snapshot *snap, struct perf_sample *out)
{
    if (ps->fd < 0 || !ps->latest)
        return 0;
    struct perf_event_mmap_page *mp = (struct perf_event_mmap_page *)ps->buf;
    /* Written backward: data_head falls as records are written, and the newest record
     * starts at it; the older ones follow it. */
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    if (head == ps->seen_head)
        return 0;
    uint64_t fresh = ps->seen_head - head; /* bytes written since the last read */
    ps->seen_head = head;
    uint64_t mask = ps->data_size - 1;
    /* Past the span of one record from the head, what follows may be overwritten by a
     * record in the writing: look no further (older records are not wanted anyway). */
    uint64_t maxrec = (uint64_t)ps->stack_size + RECORD_OVERHEAD;
    uint64_t span = ps->data_size > maxrec ? ps->data_size - maxrec : 0;
    if (fresh < span)
        span = fresh;
    const uint8_t *data = ps->buf + page_size;
    uint64_t off = 0;
    while (off + sizeof(struct perf_event_header) <= span) {
        struct perf_event_header h;
        memcpy(&h, data + ((head + off) & mask), sizeof(h));
        if (h.size < sizeof(h) || h.size % 8 || h.size > span - off)
            return 0;
        if (h.type != PERF_RECORD_SAMPLE) {
            off += h.size;
            continue;
        }
        const uint8_t *rec = record_at(ps, head + off, h.size);
        int r = perfs_parse_sample(rec, h.size, out, snap);
        /* The kernel may have written on while we read: what it wrote since lies below the
         * head we read from, and one more record may be in the writing below that. Our
         * record is whole if none of it reached it. */
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the reads above, before the load */
        uint64_t now_head = __atomic_load_n(&mp->data_head, __ATOMIC_RELAXED);
        if ((head - now_head) + off + h.size + maxrec > ps->data_size)
            return -EAGAIN;
        if (r == 0 && out->user) {
            ps->since_drawn++;
            return 1;
        }
        return 0;
    }
    return 0;
}

size_t perfs_switches_bytes(void)
{
    if (perfs_init() < 0)
        return 0;
    return 2 * (size_t)page_size;
}

/* A dummy software event whose ring gets a PERF_RECORD_SWITCH at each switch in and out of
 * its thread (8 bytes, and its sample_id if asked for). */
static void switch_attr(struct perf_event_attr *pa)
{
    memset(pa, 0, sizeof(*pa));
    pa->size = sizeof(*pa);
    pa->type = PERF_TYPE_SOFTWARE;
    pa->config = PERF_COUNT_SW_DUMMY;
    pa->context_switch = 1;
    pa->exclude_hv = 1;
}

int perfs_open_switches(struct perf_stream *ps, pid_t tid)
{
    if (perfs_init() < 0)
        return -ENOMEM;
    perfs_stream_init(ps);
    struct perf_event_attr pa;
    switch_attr(&pa);
    /* Nobody polls it: the kernel never has anybody to wake. */
    pa.watermark = 1;
    pa.wakeup_watermark = (uint32_t)page_size;
    /* Mapped read-only: a ring the kernel overwrites, whose head never stops moving. */
    return open_event(ps, tid, &pa, (size_t)page_size, PROT_READ);
}

/* The sched_switch tracepoint's id (tracefs; CAP_DAC_READ_SEARCH reads it as the service's
 * user): > 0, or 0 where it cannot be read (tracefs not mounted, say: looked for again a
 * minute later). PROFD_BLOCK_WATCH=switches takes it as unreadable (the fallback, for
 * tests). */
static long sched_switch_id(void)
{
    static long id;
    static uint64_t next_look_ns;
    uint64_t now = now_ns();
    if (id > 0 || now < next_look_ns)
        return id;
    next_look_ns = now + 60 * NS_PER_SEC;
    const char *force = getenv("PROFD_BLOCK_WATCH");
    if (force && !strcmp(force, "switches"))
        return id;
    static const char *const paths[] = {
        "/sys/kernel/tracing/events/sched/sched_switch/id",
        "/sys/kernel/debug/tracing/events/sched/sched_switch/id",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && !id; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[24];
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        char *end;
        errno = 0;
        long v = strtol(buf, &end, 10);
        if (!errno && end != buf && (*end == '\n' || !*end) && v > 0 && v < INT32_MAX)
            id = v;
    }
    return id;
}

static enum perfs_block_watch block_watch = PERFS_BLOCKS_UNKNOWN;
/* The tracepoint cannot be used (its event or filter refused as unknown): for good. */
static bool sched_switch_unusable;
/* One event of the tracepoint held open for profd's life once a watch used it: the kernel
 * unregisters a tracepoint's perf probe when its last perf event closes, waiting out an RCU
 * grace period in close() (30-44 ms here, on the loop thread: a deferred batch's end closed
 * its watches, and every target's ticks waited; 7 times in a 20 s run of transactions), and
 * registers it again at the next open. This one, on profd's own thread and never enabled,
 * keeps the probe registered; it is never on a CPU's list of events, so a switch anywhere
 * finds none there and costs what it did without it. */
static int sched_switch_anchor = -1;

static void sched_switch_hold(long id)
{
    if (sched_switch_anchor >= 0)
        return;
    struct perf_event_attr pa;
    memset(&pa, 0, sizeof(pa));
    pa.size = sizeof(pa);
    pa.type = PERF_TYPE_TRACEPOINT;
    pa.config = (uint64_t)id;
    pa.disabled = 1;
    sched_switch_anchor = (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1,
                                       PERF_FLAG_FD_CLOEXEC);
}

enum perfs_block_watch perfs_block_watch(void)
{
    return block_watch;
}

bool perfs_sched_switch_held(void)
{
    return sched_switch_anchor >= 0;
}

/* A running thread's change watch's ring: 32 KiB, at least a page. Its switch records (24
 * bytes each, two per preemption) wake its poller only once half of it is full: 340
 * preemptions, more than a busy thread gets in a batch's 500 ms on a loaded machine (about
 * 250 a second here beside a CPU hog). */
static size_t running_changes_data(void)
{
    return (size_t)page_size > 32768 ? (size_t)page_size : 32768;
}

size_t perfs_changes_bytes(bool running)
{
    if (perfs_init() < 0)
        return 0;
    return (size_t)page_size + (running ? running_changes_data() : (size_t)page_size);
}

/* An error that says the event itself is unknown here (not a lack of room or rights). */
static bool event_unknown(int err)
{
    return err == ENOENT || err == EINVAL || err == EOPNOTSUPP || err == ENODEV;
}

int perfs_open_changes(struct perf_stream *ps, pid_t tid, bool running)
{
    if (perfs_init() < 0)
        return -ENOMEM;
    perfs_stream_init(ps);
    struct perf_event_attr pa;
    switch_attr(&pa);
    pa.sample_id_all = 1; /* each record ends with the thread's id and the kernel's time */
    pa.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
    pa.use_clockid = 1;
    pa.clockid = CLOCK_MONOTONIC;
    if (!running) {
        /* Every record wakes the poller: the first one is what it waits for. */
        pa.watermark = 1;
        pa.wakeup_watermark = 1;
        return open_event(ps, tid, &pa, (size_t)page_size, PROT_READ | PROT_WRITE);
    }
    if (need_exclude_kernel) {
        /* Only user-space events allowed (perf_event_paranoid 2 without CAP_PERFMON): no
         * event that counts in the scheduler. The switch records alone, waking nobody,
         * read at the batch's end. */
        block_watch = PERFS_BLOCKS_AT_BATCH_END;
        pa.watermark = 1;
        pa.wakeup_watermark = (uint32_t)running_changes_data();
        int r = open_event(ps, tid, &pa, running_changes_data(), PROT_READ | PROT_WRITE);
        return r < 0 ? r : 1;
    }
    /* A sample (TID and TIME alone, 24 bytes) wakes the poller at each switch out that is a
     * block; the switch records beside it (not waking it before the ring is half full)
     * say when it was switched in again. Its preemptions wake nobody: the sched_switch
     * tracepoint, filtered in the kernel on the state it leaves in (none of the states of
     * a blocked task: a preemption's is TASK_REPORT_MAX, 0x100 since 4.14, 2048 before). */
    pa.sample_period = 1;
    pa.wakeup_events = 1;
    long id = sched_switch_unusable ? 0 : sched_switch_id();
    if (id > 0) {
        pa.type = PERF_TYPE_TRACEPOINT;
        pa.config = (uint64_t)id;
        int r = open_event_ex(ps, tid, &pa, running_changes_data(), PROT_READ | PROT_WRITE,
                              true);
        if (r < 0 && !event_unknown(-r))
            return r; /* (refused for want of room or rights, or for now: so would the other) */
        if (r == 0) {
            if (ioctl(ps->fd, PERF_EVENT_IOC_SET_FILTER, "prev_state & 255") == 0) {
                block_watch = PERFS_BLOCKS_SCHED_SWITCH;
                sched_switch_hold(id);
                return 0;
            }
            int e = errno;
            perfs_close(ps);
            if (!event_unknown(e))
                return -e;
        }
        sched_switch_unusable = true;
    }
    /* Without it, the context-switch event: it samples every switch out, preemptions too,
     * each of which wakes the poller (who reads the record beside it and finds it one). */
    block_watch = PERFS_BLOCKS_SWITCHES;
    pa.type = PERF_TYPE_SOFTWARE;
    pa.config = PERF_COUNT_SW_CONTEXT_SWITCHES;
    return open_event_ex(ps, tid, &pa, running_changes_data(), PROT_READ | PROT_WRITE, true);
}

size_t perfs_preempt_bytes(uint32_t stack_size)
{
    return perfs_latest_bytes(stack_size);
}

int perfs_open_preempt(struct perf_stream *ps, pid_t tid, uint32_t stack_size, bool no_tracepoint)
{
    if (perfs_init() < 0)
        return -ENOMEM;
    perfs_stream_init(ps);
    stack_size = stack_bytes(stack_size);
    if (!stack_size)
        return -EINVAL;
    struct perf_event_attr pa;
    switch_attr(&pa);
    pa.sample_id_all = 1; /* each switch record ends with the thread's id and the time */
    pa.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_REGS_USER |
                     PERF_SAMPLE_STACK_USER;
    pa.sample_regs_user = REGS_MASK;
    pa.sample_stack_user = stack_size;
    pa.use_clockid = 1;
    pa.clockid = CLOCK_MONOTONIC;
    pa.sample_period = 1;
    pa.write_backward = 1;
    size_t data = ring_data_size(stack_size, LATEST_RECORDS);
    pa.watermark = 1; /* (nobody polls it) */
    pa.wakeup_watermark = (uint32_t)data;
    long id = sched_switch_unusable || no_tracepoint ? 0 : sched_switch_id();
    if (id > 0) {
        pa.type = PERF_TYPE_TRACEPOINT;
        pa.config = (uint64_t)id;
        int r = open_event_ex(ps, tid, &pa, data, PROT_READ, true);
        if (r < 0 && !event_unknown(-r))
            return r;
        if (r == 0) {
            /* Left runnable: preempted (TASK_REPORT_MAX, 0x100 since 4.14, 2048 before) or
             * yielding (0); a block's state is one of the low bits. */
            if (ioctl(ps->fd, PERF_EVENT_IOC_SET_FILTER, "prev_state == 0 || prev_state >= 256") ==
                0) {
                sched_switch_hold(id);
                ps->tracepoint = true;
                goto opened;
            }
            int e = errno;
            perfs_close(ps);
            if (!event_unknown(e))
                return -e;
        }
        sched_switch_unusable = true;
    }
    /* Without it, the context-switch event: a sample at every switch out, blocks too (the
     * record after it says whether it was a preemption). */
    pa.type = PERF_TYPE_SOFTWARE;
    pa.config = PERF_COUNT_SW_CONTEXT_SWITCHES;
    int r = open_event_ex(ps, tid, &pa, data, PROT_READ, true);
    if (r < 0)
        return r;
opened:
    ps->stack_size = stack_size;
    ps->latest = true;
    ps->opened_ns = now_ns();
    return 0;
}

int perfs_waiting_at(struct perf_stream *ps, uint64_t at_ns, uint64_t known_ns,
                     struct snapshot *snap, struct perf_sample *out)
{
    if (ps->fd < 0)
        return 0;
    struct perf_event_mmap_page *mp = (struct perf_event_mmap_page *)ps->buf;
    /* Written backward: the newest record starts at data_head, the older ones follow it;
     * data_head started at 0 and has fallen by every byte written. */
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t mask = ps->data_size - 1;
    uint64_t maxrec = (uint64_t)ps->stack_size + RECORD_OVERHEAD;
    uint64_t span = ps->data_size > maxrec ? ps->data_size - maxrec : 0;
    /* Every record since the open is still there: what came before it is not known. */
    bool whole = -head <= span;
    if (-head < span)
        span = -head;
    const uint8_t *data = ps->buf + page_size;
    bool out_seen = false; /* a preemption's switch out, at or before at_ns */
    for (uint64_t off = 0; off + sizeof(struct perf_event_header) <= span;) {
        struct perf_event_header h;
        memcpy(&h, data + ((head + off) & mask), sizeof(h));
        if (h.size < sizeof(h) + 16 || h.size % 8 || h.size > span - off ||
            (h.type != PERF_RECORD_SWITCH && h.type != PERF_RECORD_SAMPLE))
            return -ENODATA;
        const uint8_t *rec = record_at(ps, head + off, h.size);
        uint64_t t;
        /* A switch record's time ends it (sample_id_all); a sample's follows its ids. */
        memcpy(&t, rec + (h.type == PERF_RECORD_SWITCH ? (size_t)h.size - 8 : sizeof(h) + 8), 8);
        if (h.type == PERF_RECORD_SWITCH) {
            off += h.size;
            if (out_seen)
                return 0; /* (a preemption without its sample) */
            if (t > at_ns)
                continue; /* (after the moment asked about) */
            /* Switched in (running then), or out by a block: not waiting. Out by a
             * preemption: the sample before it has where. */
            if (!(h.misc & PERF_RECORD_MISC_SWITCH_OUT) ||
                !(h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT))
                return 0;
            out_seen = true;
            continue;
        }
        /* A preemption's sample: at_ns lies after it (its switch out, just after it, may lie
         * after at_ns: the switch was under way then). */
        if (t > at_ns) {
            off += h.size;
            continue;
        }
        if (t == known_ns) {
            out->time_ns = t;
            return 2;
        }
        int r = perfs_parse_sample(rec, h.size, out, snap);
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* (as perfs_latest) */
        uint64_t now_head = __atomic_load_n(&mp->data_head, __ATOMIC_RELAXED);
        if ((head - now_head) + off + h.size + maxrec > ps->data_size)
            return -EAGAIN;
        return r == 0 && out->user ? 1 : 0;
    }
    /* No switch at or before at_ns in the ring: running then if the ring holds every record
     * since the watch was opened (on a running thread) before at_ns. */
    return whole && !out_seen && ps->opened_ns <= at_ns ? 0 : -ENODATA;
}

int perfs_blocked_since(const struct perf_stream *ps, uint64_t since_ns)
{
    if (ps->fd < 0)
        return -1;
    const struct perf_event_mmap_page *mp = (const struct perf_event_mmap_page *)ps->buf;
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t mask = ps->data_size - 1;
    uint64_t maxrec = (uint64_t)ps->stack_size + RECORD_OVERHEAD;
    uint64_t span = ps->data_size > maxrec ? ps->data_size - maxrec : 0;
    /* Every record since the open is still there: what came before it is not known. */
    bool whole = -head <= span;
    if (-head < span)
        span = -head;
    const uint8_t *data = ps->buf + page_size;
    uint64_t off = 0;
    while (off + sizeof(struct perf_event_header) <= span) {
        struct perf_event_header h;
        memcpy(&h, data + ((head + off) & mask), sizeof(h));
        if (h.size < sizeof(h) + 16 || h.size % 8 || h.size > span - off ||
            (h.type != PERF_RECORD_SWITCH && h.type != PERF_RECORD_SAMPLE))
            return -1;
        const uint8_t *rec = record_at(ps, head + off, h.size);
        uint64_t t;
        memcpy(&t, rec + (h.type == PERF_RECORD_SWITCH ? (size_t)h.size - 8 : sizeof(h) + 8), 8);
        if (t <= since_ns)
            return 0; /* (reached back to it: no block after it) */
        if (h.type == PERF_RECORD_SWITCH && (h.misc & PERF_RECORD_MISC_SWITCH_OUT) &&
            !(h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT))
            return 1;
        off += h.size;
    }
    return whole && ps->opened_ns <= since_ns ? 0 : -1;
}

uint64_t perfs_first_change(const struct perf_stream *ps)
{
    if (ps->fd < 0)
        return UINT64_MAX;
    const struct perf_event_mmap_page *mp = (const struct perf_event_mmap_page *)ps->buf;
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = mp->data_tail;
    if (head == tail)
        return UINT64_MAX;
    /* The first record since the open (the tail is never moved): its time is its last 8
     * bytes. A record that does not look whole says "changed, now". */
    const uint8_t *data = ps->buf + page_size;
    uint64_t mask = ps->data_size - 1;
    struct perf_event_header h;
    memcpy(&h, data + (tail & mask), sizeof(h));
    if (head - tail < sizeof(h) + 16 || h.size < sizeof(h) + 16 || h.size % 8 ||
        h.size > head - tail)
        return 0;
    uint64_t t;
    memcpy(&t, record_at(ps, tail, h.size) + h.size - 8, sizeof(t));
    return t;
}

uint64_t perfs_first_block(struct perf_stream *ps, bool *back_in)
{
    *back_in = false;
    if (ps->fd < 0)
        return UINT64_MAX;
    struct perf_event_mmap_page *mp = (struct perf_event_mmap_page *)ps->buf;
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = mp->data_tail;
    const uint8_t *data = ps->buf + page_size;
    uint64_t mask = ps->data_size - 1;
    /* A ring that filled (the kernel drops records then, and says so only once there is
     * room again) may have lost the block: known only up to its last record. */
    bool full = head - tail + 64 > ps->data_size;
    uint64_t last = 0;
    while (tail < head) {
        struct perf_event_header h;
        memcpy(&h, data + (tail & mask), sizeof(h));
        if (h.size < sizeof(h) + 16 || h.size % 8 || h.size > head - tail ||
            (h.type != PERF_RECORD_SWITCH && h.type != PERF_RECORD_SAMPLE)) {
            *back_in = true; /* (unknown after it) */
            return last; /* (PERF_RECORD_LOST: records were dropped after this one) */
        }
        if (h.type == PERF_RECORD_SWITCH && tail >= ps->waits_pos) {
            /* Its waits for a CPU: from a preemption to its next switch in. */
            uint64_t t;
            memcpy(&t, record_at(ps, tail, h.size) + h.size - 8, sizeof(t));
            if (!(h.misc & PERF_RECORD_MISC_SWITCH_OUT)) {
                if (ps->out_ns && t > ps->out_ns)
                    ps->waited_ns += t - ps->out_ns;
                ps->out_ns = 0;
            } else if (h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) {
                if (!ps->out_ns)
                    ps->out_ns = t;
            }
            ps->waits_pos = tail + h.size;
        }
        if (h.type == PERF_RECORD_SWITCH && (h.misc & PERF_RECORD_MISC_SWITCH_OUT) &&
            !(h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)) {
            uint64_t t;
            memcpy(&t, record_at(ps, tail, h.size) + h.size - 8, sizeof(t));
            /* Switched in again since? (The records after it stay unread: the batch ends.) */
            for (uint64_t at = tail + h.size; at < head;) {
                struct perf_event_header h2;
                memcpy(&h2, data + (at & mask), sizeof(h2));
                if (h2.size < sizeof(h2) || h2.size % 8 || h2.size > head - at ||
                    (h2.type != PERF_RECORD_SWITCH && h2.type != PERF_RECORD_SAMPLE) ||
                    (h2.type == PERF_RECORD_SWITCH && !(h2.misc & PERF_RECORD_MISC_SWITCH_OUT))) {
                    *back_in = true;
                    break;
                }
                at += h2.size;
            }
            return t;
        }
        memcpy(&last, record_at(ps, tail, h.size) + h.size - 8, sizeof(last));
        tail += h.size;
    }
    if (full) {
        *back_in = true;
        return last;
    }
    __atomic_store_n(&mp->data_tail, tail, __ATOMIC_RELEASE);
    return UINT64_MAX;
}

uint64_t perfs_take_waited(struct perf_stream *ps, uint64_t now)
{
    uint64_t w = ps->waited_ns;
    if (ps->out_ns && now > ps->out_ns) {
        w += now - ps->out_ns;
        ps->out_ns = now; /* (counted up to now) */
    }
    ps->waited_ns = 0;
    return w;
}

bool perfs_has_records(const struct perf_stream *ps)
{
    if (ps->fd < 0)
        return false;
    const struct perf_event_mmap_page *mp = (const struct perf_event_mmap_page *)ps->buf;
    return __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE) != mp->data_tail;
}

uint64_t perfs_switches_head(const struct perf_stream *ps)
{
    const struct perf_event_mmap_page *mp = (const struct perf_event_mmap_page *)ps->buf;
    return __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
}

void perfs_close(struct perf_stream *ps)
{
    if (ps->fd < 0)
        return;
    munmap(ps->buf, (size_t)page_size + ps->data_size);
    close(ps->fd);
    totals.streams--;
    totals.ring_bytes -= (size_t)page_size + ps->data_size;
    perfs_stream_init(ps);
}

int perfs_arm(struct perf_stream *ps, uint64_t now)
{
    if (ps->fd < 0)
        return -EBADF;
    /* REFRESH adds to the event's limit of samples, which a disable leaves as it is: an arm
     * disabled before its sample (the thread blocked first, or the kernel lost it) is still
     * counted there, and a REFRESH after it would allow two samples, the second interrupting
     * the thread 0.1 ms of CPU later only to be dropped (the ring holds one). That arm is
     * enabled again instead. */
    if (ioctl(ps->fd, ps->limit_left ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_REFRESH,
              ps->limit_left ? 0 : 1) < 0)
        return -errno;
    ps->limit_left = true;
    ps->armed = true;
    ps->armed_ns = now;
    return 0;
}

void perfs_disarm(struct perf_stream *ps)
{
    if (ps->fd >= 0 && ps->armed)
        ioctl(ps->fd, PERF_EVENT_IOC_DISABLE, 0);
    ps->armed = false;
}

int perfs_set_period(struct perf_stream *ps, uint64_t period_ns)
{
    if (ps->fd < 0)
        return -EBADF;
    if (ioctl(ps->fd, PERF_EVENT_IOC_PERIOD, &period_ns) < 0)
        return -errno;
    ps->period_ns = period_ns;
    ps->since_drawn = 0;
    return 0;
}

/* Exactly periodic samples of a thread's CPU time alias with a loop whose period divides it:
 * phases' 1.031 ms loop under a 97 Hz clock (10.309 ms, 9.999 loops) was caught at points
 * that moved by 1 us a sample, a phase's share 2-3 points off in a run of 4 000 samples. A
 * period drawn at random now and then ends that: each draw starts the next samples at a
 * point of the loop that owes nothing to the last ones (profd draws when it reads the clock,
 * at no point of the target's loop), and spreads them at a step of their own (the period
 * within an eighth of the one asked for, either way). The draw restarts the count, losing
 * the part of a period since the last sample (half a period on average, the draw coming at
 * no particular point of one): the period drawn is shorter by that much spread over the
 * samples to the next draw, so that the rate stays the one asked for. */
int perfs_rejitter(struct perf_stream *ps, unsigned every)
{
    if (ps->fd < 0 || !ps->period_ns || ps->since_drawn < every)
        return 0;
    uint64_t p = ps->period_ns;
    uint64_t k = ps->since_drawn;
    uint64_t drawn = (p - p / 8 + random_below(p / 4)) * (2 * k) / (2 * k + 1);
    if (drawn < 10000)
        drawn = 10000; /* (perf's least for a software clock) */
    if (ioctl(ps->fd, PERF_EVENT_IOC_PERIOD, &drawn) < 0)
        return -errno;
    ps->since_drawn = 0;
    return 0;
}

size_t perfs_bytes(const struct perf_stream *ps)
{
    return ps->fd < 0 ? 0 : (size_t)page_size + ps->data_size;
}

void perfs_get_totals(struct perfs_totals *t)
{
    *t = totals;
}

static int take(const uint8_t **p, const uint8_t *end, void *dst, size_t n)
{
    if ((size_t)(end - *p) < n)
        return -EINVAL;
    memcpy(dst, *p, n);
    *p += n;
    return 0;
}

/* in_place: snap->data is pointed at the record's copy of the stack instead of copying it
 * (a ring the kernel does not write over until it is read: the copy is stable while it is
 * unwound, and the unwinder reads only the few words it needs of what the kernel wrote on
 * another CPU, where a copy of the whole 16 KiB took 3 us per sample here); the caller puts
 * snap->data back. */
static int parse_sample(const uint8_t *rec, size_t len, struct perf_sample *out,
                        struct snapshot *snap, bool in_place)
{
    const uint8_t *p = rec, *end = rec + len;
    struct perf_event_header h;
    if (take(&p, end, &h, sizeof(h)) < 0 || h.type != PERF_RECORD_SAMPLE || h.size != len)
        return -EINVAL;
    uint32_t ids[2];
    uint64_t time;
    if (take(&p, end, ids, sizeof(ids)) < 0 || take(&p, end, &time, sizeof(time)) < 0)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->tid = (pid_t)ids[1];
    out->time_ns = time;
    if (p == end)
        return 0; /* a counting stream: no registers or stack */
    uint64_t abi;
    if (take(&p, end, &abi, sizeof(abi)) < 0)
        return -EINVAL;
    uint64_t regs[NREGS];
    if (abi != PERF_SAMPLE_REGS_ABI_NONE && take(&p, end, regs, sizeof(regs)) < 0)
        return -EINVAL;
    uint64_t size;
    if (take(&p, end, &size, sizeof(size)) < 0 || size > (size_t)(end - p))
        return -EINVAL;
    const uint8_t *stack = p;
    p += size;
    uint64_t dyn = 0;
    if (size && (take(&p, end, &dyn, sizeof(dyn)) < 0 || dyn > size))
        return -EINVAL;
    if (p != end)
        return -EINVAL;
    /* No user registers: a sample in a kernel thread, or of a thread on its way out. */
    if (abi != PERF_SAMPLE_REGS_ABI_64 || !snap || dyn > snap->cap)
        return 0;
    struct user_regs_struct *r = &snap->regs;
    memset(r, 0, sizeof(*r));
    r->rax = regs[0];
    r->rbx = regs[1];
    r->rcx = regs[2];
    r->rdx = regs[3];
    r->rsi = regs[4];
    r->rdi = regs[5];
    r->rbp = regs[6];
    r->rsp = regs[7];
    r->rip = regs[8];
    r->eflags = regs[9];
    r->cs = regs[10];
    r->ss = regs[11];
    r->r8 = regs[12];
    r->r9 = regs[13];
    r->r10 = regs[14];
    r->r11 = regs[15];
    r->r12 = regs[16];
    r->r13 = regs[17];
    r->r14 = regs[18];
    r->r15 = regs[19];
    snapshot_reset(snap);
    snap->full_regs = true;
    snap->sealed = true;
    snap->base = r->rsp;
    snap->len = (size_t)dyn;
    if (in_place)
        snap->data = (uint8_t *)stack; /* (read only by the unwinder) */
    else
        memcpy(snap->data, stack, (size_t)dyn);
    out->user = true;
    out->stack_asked = (size_t)size;
    return 0;
}

int perfs_parse_sample(const uint8_t *rec, size_t len, struct perf_sample *out,
                       struct snapshot *snap)
{
    return parse_sample(rec, len, out, snap, false);
}

unsigned perfs_drain(struct perf_stream *ps, struct snapshot *snap, perfs_sample_fn fn,
                     void *ctx, uint64_t *lost)
{
    if (ps->fd < 0)
        return 0;
    struct perf_event_mmap_page *mp = (struct perf_event_mmap_page *)ps->buf;
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = mp->data_tail;
    const uint8_t *data = ps->buf + page_size;
    uint64_t mask = ps->data_size - 1;
    unsigned n = 0;
    uint64_t dropped = 0;
    while (tail + sizeof(struct perf_event_header) <= head) {
        struct perf_event_header h;
        /* A header never straddles the end: records are 8-byte aligned in a power-of-two
         * ring. */
        memcpy(&h, data + (tail & mask), sizeof(h));
        /* (The kernel's records are 8-byte multiples: anything else is not a record, and
         * the next header would straddle the end.) */
        if (h.size < sizeof(h) || h.size % 8 || h.size > head - tail || h.size > ps->data_size)
            break;
        const uint8_t *rec = record_at(ps, tail, h.size);
        if (h.type == PERF_RECORD_SAMPLE) {
            struct perf_sample s;
            uint8_t *own = snap ? snap->data : NULL;
            if (parse_sample(rec, h.size, &s, ps->stack_size ? snap : NULL, true) == 0) {
                n++;
                if (fn)
                    fn(ctx, &s, snap);
            }
            if (snap)
                snap->data = own;
        } else if (h.type == PERF_RECORD_LOST && h.size >= sizeof(h) + 16) {
            uint64_t l;
            memcpy(&l, rec + sizeof(h) + 8, sizeof(l));
            totals.lost += l;
            dropped += l;
            if (lost)
                *lost += l;
        }
        tail += h.size;
    }
    __atomic_store_n(&mp->data_tail, head, __ATOMIC_RELEASE);
    ps->since_drawn += n;
    if ((n || dropped) && !ps->continuous)
        ps->armed = ps->limit_left = false;
    return n;
}
