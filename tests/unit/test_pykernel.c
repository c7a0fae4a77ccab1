/* test_pykernel.c: the pairing of the eBPF program's records with their samples
 * (daemon/pykernel.c's queue): a sample takes the first record of its event at or after its
 * time, at most PYK_PAIR_NS after; older records (samples not read) go, later ones wait for
 * their sample; a chain a read or a check ended gives no frames; a queue stays within its
 * bound, dropping its oldest. And the check that the program can read a layout whose
 * offsets a target's memory gave (3.13's debug offsets). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/pybpf.h"
#include "check.h"
#include "pykernel.h"
#include "python.h"

#define US 1000ull

static struct pybpf_rec rec;

/* A record of n frames at time t: frame i's code is base + i, its entry mark on the last. */
static const struct pybpf_rec *mk(uint64_t t, unsigned n, uint64_t base, uint8_t flags)
{
    memset(&rec, 0, sizeof(rec));
    rec.time_ns = t;
    rec.nframes = (uint16_t)n;
    rec.flags = flags;
    for (unsigned i = 0; i < n; i++)
        rec.frames[i] = (struct pybpf_frame){.code = base + i, .ident = 7 * (base + i),
                                             .func = 100 + i, .instr = 3 * i,
                                             .entry = i + 1 == n};
    return &rec;
}

static void test_pairing(void)
{
    struct pyk_queue q = {0};
    struct py_kernel_stats ks = {0};
    struct py_frame out[PY_MAX_FRAMES];
    pyk_queue_push(&q, mk(1000 * US, 3, 10, 0), &ks);
    pyk_queue_push(&q, mk(2000 * US + 5 * US, 4, 20, 0), &ks);
    pyk_queue_push(&q, mk(3000 * US + 1 * US, 2, 30, 0), &ks);
    /* The sample at 2000 us: the record 5 us after it; the one of 1000 us was not read. */
    CHECK_INT(pyk_queue_take(&q, 2000 * US, out, &ks), 4);
    CHECK_U64(out[0].code, 20);
    CHECK_U64(out[3].code, 23);
    CHECK_U64(out[2].ident, 7 * 22);
    CHECK_U64(out[1].func, 101);
    CHECK_INT(out[2].instr, 6);
    CHECK(!out[2].entry && out[3].entry);
    CHECK_U64(ks.unpaired, 1);
    CHECK_U64(ks.paired, 1);
    /* A sample whose record is missing (the next one is more than PYK_PAIR_NS after it): no
     * frames, counted, and the later record kept for its own sample. */
    CHECK_INT(pyk_queue_take(&q, 3000 * US + 1 * US - PYK_PAIR_NS - 1, out, &ks), PYK_MISSING);
    CHECK_U64(ks.missing, 1);
    CHECK_INT(pyk_queue_take(&q, 3000 * US, out, &ks), 2);
    CHECK_U64(out[0].code, 30);
    /* Empty: missing. */
    CHECK_INT(pyk_queue_take(&q, 4000 * US, out, &ks), PYK_MISSING);
    CHECK_U64(ks.missing, 2);
    /* A record before its sample is another sample's, never this one's. */
    pyk_queue_push(&q, mk(5000 * US - 1, 2, 40, 0), &ks);
    CHECK_INT(pyk_queue_take(&q, 5000 * US, out, &ks), PYK_MISSING);
    CHECK_U64(ks.unpaired, 2);
    free(q.buf);
}

static void test_flags(void)
{
    struct pyk_queue q = {0};
    struct py_kernel_stats ks = {0};
    struct py_frame out[PY_MAX_FRAMES];
    pyk_queue_push(&q, mk(1000 * US, 3, 10, PYBPF_FAULT), &ks);
    pyk_queue_push(&q, mk(2000 * US, 3, 10, PYBPF_BAD), &ks);
    pyk_queue_push(&q, mk(3000 * US, PYBPF_MAX_FRAMES, 10, PYBPF_TRUNCATED), &ks);
    pyk_queue_push(&q, mk(4000 * US, 0, 0, PYBPF_NO_TSTATE), &ks);
    /* A chain a fault or a check ended: the sample keeps its native frames only. */
    CHECK_INT(pyk_queue_take(&q, 1000 * US, out, &ks), 0);
    CHECK_U64(ks.faulted, 1);
    CHECK_INT(pyk_queue_take(&q, 2000 * US, out, &ks), 0);
    CHECK_U64(ks.failed_check, 1);
    /* Truncated: the innermost frames, counted. */
    CHECK_INT(pyk_queue_take(&q, 3000 * US, out, &ks), PYBPF_MAX_FRAMES);
    CHECK_U64(ks.truncated, 1);
    CHECK_INT(pyk_queue_take(&q, 4000 * US, out, &ks), 0);
    CHECK_U64(ks.no_thread_state, 1);
    CHECK_U64(ks.paired, 4);
    CHECK_U64(ks.missing, 0);
    free(q.buf);
}

static void test_bound(void)
{
    struct pyk_queue q = {0};
    struct py_kernel_stats ks = {0};
    struct py_frame out[PY_MAX_FRAMES];
    /* Records never taken (a batch longer than a queue holds): the oldest go. */
    for (unsigned i = 0; i < 2000; i++)
        pyk_queue_push(&q, mk((uint64_t)(i + 1) * 1000 * US, PYBPF_MAX_FRAMES, i, 0), &ks);
    CHECK(q.cap <= 256u * 1024u);
    CHECK(ks.queue_dropped > 0 && ks.queue_dropped < 2000);
    /* The newest are still there, in order. */
    CHECK_INT(pyk_queue_take(&q, 2000ull * 1000 * US, out, &ks), PYBPF_MAX_FRAMES);
    CHECK_U64(out[0].code, 1999);
    CHECK_U64(ks.unpaired + ks.queue_dropped, 1999);
    free(q.buf);
}

/* A preemption watch's queue, its records never taken (a busy thread seldom found waiting
 * at a tick): bounded, the newest kept, and a full queue does not move all it holds at
 * every record (it did: 32 KiB moved per record, 1.5 us of profd's CPU at each switch of
 * the thread). */
static void test_stale_bound(void)
{
    struct pyk_queue q = {0};
    struct py_kernel_stats ks = {0};
    struct py_frame out[PY_MAX_FRAMES];
    unsigned n = 20000;
    for (unsigned i = 0; i < n; i++) {
        mk((uint64_t)(i + 1) * 1000 * US, 5, i, 0);
        rec.kind = PYBPF_PREEMPT;
        pyk_queue_push(&q, &rec, &ks);
    }
    CHECK(q.cap <= 32u * 1024u);
    CHECK(ks.unpaired > n / 2 && ks.queue_dropped == 0);
    /* Moved per record: at most a few records' bytes (5 frames: under 200). */
    CHECK(q.moved / n < 512);
    CHECK_INT(pyk_queue_take(&q, (uint64_t)n * 1000 * US, out, &ks), 5);
    CHECK_U64(out[0].code, n - 1);
    CHECK_U64(ks.unpaired, n - 1);
    free(q.buf);
}

static void test_layout(void)
{
    struct py_runtime rt;
    memset(&rt, 0, sizeof(rt));
    for (unsigned v = 0x030b0000; v <= 0x030d0000; v += 0x00010000) {
        rt.lay = py_layout_of(v);
        CHECK(rt.lay && pyk_layout_fits(&rt));
    }
    /* Offsets a target's memory gave beyond what the program reads of a frame or of a code
     * object: refused (the target keeps the stop path). */
    rt.own = *py_layout_of(0x030d0000);
    rt.lay = &rt.own;
    rt.own.fr_instr = 200;
    CHECK(!pyk_layout_fits(&rt));
    rt.own = *py_layout_of(0x030d0000);
    rt.own.co_linetable = 150;
    rt.own.co_size = 156;
    CHECK(!pyk_layout_fits(&rt)); /* (co_size within bounds, the field past it) */
    rt.own = *py_layout_of(0x030d0000);
    rt.own.co_size = 4096;
    CHECK(!pyk_layout_fits(&rt));
    rt.own = *py_layout_of(0x030d0000);
    rt.own.fr_owner = 100; /* past the bytes read of a frame */
    CHECK(!pyk_layout_fits(&rt));
}

int main(void)
{
    RUN(test_pairing);
    RUN(test_flags);
    RUN(test_bound);
    RUN(test_stale_bound);
    RUN(test_layout);
    return check_status("test_pykernel");
}
