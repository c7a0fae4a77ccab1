/* fuzz_perfring.c: libFuzzer target for the reader of a perf event's ring
 * (daemon/perfsample.c: perfs_drain, perfs_latest, perfs_parse_sample).
 *
 * The ring is written by the kernel, but what a sample carries is the target's: its
 * registers and the top of its stack, which go on to the unwinder (fuzz_unwind). The reader
 * must take any bytes in the ring without reading past it or past a record, wrap records
 * around the ring's end, never copy more stack than the snapshot holds, and count the
 * samples the kernel reported lost.
 *
 * Input: byte 0 chooses the ring's size (1 to 16 pages of data) and whether the stream
 * carries stacks; bytes 1-2 the offset of the first record (data_tail); the rest is the
 * ring's data from there on, wrapping, and data_head is set past it.
 *
 *   build-fuzz/tests/fuzz/fuzz_perfring-libfuzzer -max_len=70000 \
 *       /tmp/perfring-new tests/fuzz/corpus/perfring
 *
 * The plain build replays tests/fuzz/corpus/perfring under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <linux/perf_event.h>
#include <unistd.h>

#include "perfsample.h"
#include "unwind.h"

static struct snapshot snap;
static unsigned seen;

static void on_sample(void *ctx, const struct perf_sample *s, struct snapshot *sn)
{
    (void)ctx;
    seen++;
    if (s->user) {
        FUZZ_ASSERT(sn == &snap && sn->len <= sn->cap && sn->len <= s->stack_asked);
        FUZZ_ASSERT(sn->base == sn->regs.rsp && sn->sealed && sn->full_regs);
        /* Every byte copied is readable. */
        volatile uint8_t x = 0;
        for (size_t i = 0; i < sn->len; i += 512)
            x ^= sn->data[i];
        (void)x;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3 || size > 1 << 20)
        return 0;
    if (perfs_init() < 0)
        return 0;
    if (!snap.data) {
        snap.cap = PERFS_MAX_STACK;
        snap.data = malloc(snap.cap);
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = 1u << (data[0] % 5); /* 1..16 */
    size_t dsize = pages * (size_t)page;
    uint8_t *buf = aligned_alloc((size_t)page, (size_t)page + dsize);
    if (!buf)
        return 0;
    memset(buf, 0, (size_t)page + dsize);
    struct perf_stream ps;
    perfs_stream_init(&ps);
    ps.fd = 0; /* perfs_drain reads the mapping only */
    ps.buf = buf;
    ps.data_size = dsize;
    ps.stack_size = (data[0] & 0x80) ? 0 : 16384;
    ps.continuous = data[0] & 0x40;
    uint64_t tail = ((uint64_t)data[1] << 8 | data[2]) & ~7ull;
    const uint8_t *body = data + 3;
    size_t n = size - 3 < dsize ? size - 3 : dsize;
    for (size_t i = 0; i < n; i++)
        buf[page + ((tail + i) & (dsize - 1))] = body[i];
    struct perf_event_mmap_page *mp = (struct perf_event_mmap_page *)buf;
    mp->data_tail = tail;
    mp->data_head = tail + n;
    uint64_t lost = 0;
    struct perf_sample s0;
    seen = 0;
    unsigned got = perfs_drain(&ps, &snap, on_sample, NULL, &lost);
    FUZZ_ASSERT(got == seen);
    FUZZ_ASSERT(mp->data_tail == mp->data_head);
    /* The same bytes as a ring the kernel overwrites (written backward, perfs_latest): the
     * newest record starts at data_head, older ones follow it, and the n bytes from there
     * were written since the last read. Nothing writes on meanwhile, so the newest sample
     * is never torn. */
    struct perf_stream pl = ps;
    pl.continuous = pl.latest = true;
    pl.stack_size = (data[0] & 0x80) ? 8 : (data[0] & 0x20) ? 1024 : 16384;
    mp->data_head = tail;
    pl.seen_head = tail + n;
    int r = perfs_latest(&pl, &snap, &s0);
    FUZZ_ASSERT(r == 0 || r == 1);
    if (r == 1)
        FUZZ_ASSERT(s0.user && snap.len <= snap.cap && snap.len <= s0.stack_asked &&
                    snap.base == snap.regs.rsp);
    FUZZ_ASSERT(perfs_latest(&pl, &snap, &s0) == 0); /* nothing new since */
    /* A lone record, parsed where it lies. */
    struct perf_sample s;
    if (perfs_parse_sample(body, size - 3, &s, &snap) == 0 && s.user)
        FUZZ_ASSERT(snap.len <= snap.cap && snap.len <= s.stack_asked);
    free(buf);
    return 0;
}
