/* test_gokernel.c: the pairing of the eBPF program's goroutine copies with their samples
 * (daemon/gokernel.c's queue): a sample takes the first record of its event at or after its
 * time, at most PYK_PAIR_NS after, with its goroutine, bounds, saved sp/pc and stack bytes
 * as written; older records (samples not read) go, counted; a later sample's record waits
 * (a sample without one: its record lost); a header-only record (the thread on its
 * goroutine's stack) pairs with its sample and gives no copy; a queue stays within its
 * bound, dropping its oldest; a record claiming more stack than a record holds is refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/pybpf.h"
#include "check.h"
#include "gokernel.h"
#include "unwind.h"

#define US 1000ull

static struct gobpf_rec rec;
static uint8_t stack[GOBPF_STACK];

/* A record at time t of goroutine g with len bytes of stack, each byte (g + i) & 0xff. */
static const struct gobpf_rec *mk(uint64_t t, uint64_t g, uint32_t len)
{
    memset(&rec, 0, GOBPF_REC_HEAD);
    rec.time_ns = t;
    rec.flags = GOBPF_GO;
    rec.g = g;
    rec.lo = 0x1000000 + g * 0x10000;
    rec.hi = rec.lo + 0x8000;
    rec.base = rec.hi - len;
    rec.sp = rec.base + (len > 64 ? 64 : 0);
    rec.pc = 0x400000 + g;
    rec.len = len;
    for (uint32_t i = 0; i < len && i < GOBPF_STACK; i++)
        rec.stack[i] = (uint8_t)(g + i);
    return &rec;
}

static bool is(const struct go_copy *c, uint64_t g, uint32_t len)
{
    if (c->g != g || c->len != len || c->pc != 0x400000 + g || c->hi - c->base != len ||
        c->sp != c->base + (len > 64 ? 64 : 0) ||
        c->lo != 0x1000000 + g * 0x10000 || c->data != stack)
        return false;
    for (uint32_t i = 0; i < len; i++)
        if (c->data[i] != (uint8_t)(g + i))
            return false;
    return true;
}

static void test_pairing(void)
{
    struct pyk_queue q = {0};
    struct go_kernel k = {0};
    struct go_copy c;
    gok_queue_push(&q, mk(1000 * US, 1, 24), &k);
    gok_queue_push(&q, mk(2000 * US + 5 * US, 2, 1000), &k);
    gok_queue_push(&q, mk(3000 * US + 100 * US, 3, 8), &k);
    /* Before the first record by more than the pairing window: none (it waits). */
    CHECK(!gok_queue_take(&q, 500 * US, &c, stack, &k));
    CHECK(k.paired == 0 && k.unpaired == 0);
    CHECK(gok_queue_take(&q, 1000 * US, &c, stack, &k) && is(&c, 1, 24));
    /* The sample at 2 ms: its record 5 us after it. */
    CHECK(gok_queue_take(&q, 2000 * US, &c, stack, &k) && is(&c, 2, 1000));
    /* A sample at 2.5 ms ran on its own stack: no record; the 3.1 ms one's stays. */
    CHECK(!gok_queue_take(&q, 2500 * US, &c, stack, &k));
    CHECK(gok_queue_take(&q, 3000 * US, &c, stack, &k) && is(&c, 3, 8));
    CHECK(k.paired == 3 && k.unpaired == 0);
    /* Records of samples never read go when a later sample is taken. */
    gok_queue_push(&q, mk(4000 * US, 4, 16), &k);
    gok_queue_push(&q, mk(5000 * US, 5, 16), &k);
    CHECK(gok_queue_take(&q, 5000 * US, &c, stack, &k) && is(&c, 5, 16));
    CHECK(k.unpaired == 1);
    CHECK(q.head == 0 && q.tail == 0);
    free(q.buf);
}

/* Every sample has its record: one whose thread was on its goroutine's own stack is a
 * header alone (g 0), which that sample takes (no copy), so that it cannot take the next
 * sample's copy, even a few microseconds later (a preemption watch's switches). */
static void test_header_only(void)
{
    struct pyk_queue q = {0};
    struct go_kernel k = {0};
    struct go_copy c;
    gok_queue_push(&q, mk(1000 * US + 2, 0, 0), &k);
    gok_queue_push(&q, mk(1000 * US + 40 * US, 6, 32), &k);
    CHECK(!gok_queue_take(&q, 1000 * US, &c, stack, &k));
    CHECK(k.paired == 1);
    CHECK(gok_queue_take(&q, 1000 * US + 38 * US, &c, stack, &k) && is(&c, 6, 32));
    CHECK(k.paired == 2 && k.unpaired == 0);
    free(q.buf);
}

static void test_bounds(void)
{
    struct pyk_queue q = {0};
    struct go_kernel k = {0};
    struct go_copy c;
    /* A whole record's stack, and one that claims more than a record holds: refused. */
    gok_queue_push(&q, mk(1 * US, 7, GOBPF_STACK), &k);
    CHECK(gok_queue_take(&q, 1 * US, &c, stack, &k) && is(&c, 7, GOBPF_STACK));
    struct gobpf_rec *big = malloc(sizeof(*big));
    memcpy(big, mk(2 * US, 8, 16), sizeof(*big));
    big->len = GOBPF_STACK + 8;
    gok_queue_push(&q, big, &k);
    CHECK(!gok_queue_take(&q, 2 * US, &c, stack, &k));
    free(big);
    /* Past the queue's bound (1 MiB a queue) the oldest go, counted; the newest stay. */
    unsigned n = 0;
    for (uint64_t t = 10; t < 10 + 200; t++, n++)
        gok_queue_push(&q, mk(t * 1000 * US, t, 8000), &k);
    CHECK(k.dropped > 0 && q.cap <= 1024u * 1024u);
    CHECK(gok_queue_take(&q, 209 * 1000 * US, &c, stack, &k) && is(&c, 209, 8000));
    CHECK(k.unpaired + k.dropped + 1 == n);
    free(q.buf);
}

int main(void)
{
    RUN(test_pairing);
    RUN(test_header_only);
    RUN(test_bounds);
    return check_status("test_gokernel");
}
