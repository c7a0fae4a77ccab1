/* test_threadctx.c: OpenTelemetry's thread context (daemon/threadctx.c): a record as the
 * OTEP lays it out parsed to what a sample keeps (trace, span, flags, the attributes' whole
 * entries; invalid records and ones naming no trace and no span are none), the eBPF
 * program's records paired with their samples (the first of the event at or after the
 * sample, at most PYK_PAIR_NS after; a thread without a context or whose record could not
 * be read pairs and gives none; older ones go, counted), and a sample's (stack, context)
 * pair in the stack table holding both until it goes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/pybpf.h"
#include "check.h"
#include "pykernel.h"
#include "stacks.h"
#include "threadctx.h"

#define US 1000ull

/* A record: trace (first byte t), span (first byte s), valid, flags 1, and attrs. */
static size_t mk(uint8_t *rec, uint8_t t, uint8_t s, uint8_t valid, const uint8_t *attrs,
                 uint16_t size, uint16_t claimed)
{
    memset(rec, 0, TCTX_HEAD);
    rec[0] = t;
    rec[16] = s;
    rec[24] = valid;
    rec[25] = 1;
    memcpy(rec + 26, &claimed, 2);
    memcpy(rec + TCTX_HEAD, attrs, size);
    return TCTX_HEAD + size;
}

static void test_parse(void)
{
    uint8_t rec[TCTX_HEAD + TCTX_MAX_ATTRS];
    struct tctx_sample out;
    static const uint8_t two[] = {0, 3, 'a', 'b', 'c', 2, 1, 'x'};
    size_t n = mk(rec, 0x7e, 0x55, 1, two, sizeof(two), sizeof(two));
    CHECK(tctx_parse(rec, n, &out) && out.have);
    CHECK_INT(out.len, TCTX_KEPT + sizeof(two));
    CHECK(out.rec[0] == 0x7e && out.rec[16] == 0x55 && out.rec[24] == 1);
    CHECK(!memcmp(out.rec + TCTX_KEPT, two, sizeof(two)));
    /* Not valid (0, or any value but 1): none. */
    mk(rec, 0x7e, 0x55, 0, two, sizeof(two), sizeof(two));
    CHECK(!tctx_parse(rec, n, &out) && !out.have);
    mk(rec, 0x7e, 0x55, 2, two, sizeof(two), sizeof(two));
    CHECK(!tctx_parse(rec, n, &out));
    /* Valid, but no trace and no span: none. */
    mk(rec, 0, 0, 1, two, sizeof(two), sizeof(two));
    CHECK(!tctx_parse(rec, n, &out));
    /* Shorter than the head: none. */
    CHECK(!tctx_parse(rec, TCTX_HEAD - 1, &out));
    /* An entry cut by the size: parsing stops before it. */
    n = mk(rec, 1, 1, 1, two, sizeof(two), sizeof(two) - 1);
    CHECK(tctx_parse(rec, n, &out) && out.len == TCTX_KEPT + 5);
    /* A size past what was read: what was read, whole entries only. */
    n = mk(rec, 1, 1, 1, two, 6, 600);
    CHECK(tctx_parse(rec, n, &out) && out.len == TCTX_KEPT + 5);
    /* No attributes. */
    n = mk(rec, 1, 1, 1, two, 0, 0);
    CHECK(tctx_parse(rec, n, &out) && out.len == TCTX_KEPT);
    /* The most attributes kept. */
    uint8_t big[TCTX_MAX_ATTRS];
    for (size_t i = 0; i + 2 + 100 <= sizeof(big); i += 102) {
        big[i] = (uint8_t)i;
        big[i + 1] = 100;
        memset(big + i + 2, 'v', 100);
    }
    n = mk(rec, 1, 1, 1, big, sizeof(big), sizeof(big));
    CHECK(tctx_parse(rec, n, &out) && out.len == TCTX_KEPT + 6 * 102);
}

static struct ctxbpf_rec crec;

static const struct ctxbpf_rec *cmk(uint64_t t, uint8_t span, uint8_t flags)
{
    memset(&crec, 0, sizeof(crec));
    crec.time_ns = t;
    crec.flags = CTXBPF_CTX | flags;
    if (!flags) {
        static const uint8_t a[] = {0, 1, 'w'};
        crec.len = (uint16_t)mk(crec.rec, 0x7e, span, 1, a, sizeof(a), sizeof(a));
    }
    return &crec;
}

static void test_pairing(void)
{
    struct pyk_queue q = {0};
    struct tctx_target c = {0};
    struct tctx_sample s;
    tctx_queue_push(&q, cmk(1000 * US, 1, 0), &c);
    tctx_queue_push(&q, cmk(2000 * US + 5 * US, 2, 0), &c);
    tctx_queue_push(&q, cmk(3000 * US, 0, CTXBPF_NONE), &c);
    tctx_queue_push(&q, cmk(4000 * US, 0, CTXBPF_FAULT), &c);
    /* Long before the first: none yet (it waits for its own sample). */
    CHECK(!tctx_queue_take(&q, 500 * US, &s, &c) && !s.have);
    CHECK(tctx_queue_take(&q, 1000 * US, &s, &c) && s.have && !s.late && s.rec[16] == 1);
    CHECK(tctx_queue_take(&q, 2000 * US, &s, &c) && s.have && s.rec[16] == 2);
    CHECK(s.len == TCTX_KEPT + 3 && s.rec[TCTX_KEPT + 2] == 'w');
    /* No context at that sample, and one whose record could not be read: paired, none. */
    CHECK(tctx_queue_take(&q, 3000 * US, &s, &c) && !s.have);
    CHECK(tctx_queue_take(&q, 4000 * US, &s, &c) && !s.have);
    CHECK(c.ks.paired == 4 && c.stats.with == 2 && c.stats.without == 1 &&
          c.stats.unreadable == 1 && c.ks.missing == 1);
    /* A sample whose record is lost, before a later one's: none, and the later one stays. */
    tctx_queue_push(&q, cmk(6000 * US, 6, 0), &c);
    CHECK(!tctx_queue_take(&q, 5000 * US, &s, &c));
    CHECK(tctx_queue_take(&q, 6000 * US, &s, &c) && s.rec[16] == 6);
    /* Records of samples never read go, counted. */
    tctx_queue_push(&q, cmk(7000 * US, 7, 0), &c);
    tctx_queue_push(&q, cmk(8000 * US, 8, 0), &c);
    CHECK(tctx_queue_take(&q, 8000 * US, &s, &c) && s.rec[16] == 8);
    CHECK(c.ks.unpaired == 1 && q.head == 0 && q.tail == 0);
    /* A record claiming more than a record holds: refused. */
    cmk(9000 * US, 9, 0);
    crec.len = CTXBPF_MAX + 1;
    tctx_queue_push(&q, &crec, &c);
    CHECK(q.tail == 0);
    /* A full queue drops its oldest. */
    for (int i = 0; i < 6000; i++)
        tctx_queue_push(&q, cmk((10000 + (uint64_t)i) * US, (uint8_t)i, 0), &c);
    CHECK(c.ks.dropped > 0 && q.cap <= 256u * 1024u);
    free(q.buf);
}

static void test_pairs(void)
{
    struct stack_table st;
    stacks_init(&st);
    uint64_t ips[3] = {0x401000, 0x402000, 0x403000};
    uint64_t ctxw[2] = {8, 0x1122334455667788ull};
    uint32_t stack = stacks_intern(&st, 1, 0, ips, 3);
    uint32_t ctx = stacks_intern(&st, 0, STACK_CONTEXT, ctxw, 2);
    uint64_t pair[2] = {stack, ctx};
    uint32_t p = stacks_intern(&st, 0, STACK_PAIR, pair, 2);
    CHECK(p != STACK_NONE && st.used == 3);
    /* The pair holds the stack and the context: they stay while it does. */
    stacks_ref(&st, p);
    stacks_unref(&st, p);
    CHECK(stacks_get(&st, stack) && stacks_get(&st, ctx) && stacks_get(&st, p));
    stacks_unref(&st, p);
    CHECK(!stacks_get(&st, p) && !stacks_get(&st, stack) && !stacks_get(&st, ctx));
    CHECK_INT(st.used, 0);
    CHECK_INT(st.ip_bytes, 0);
    stacks_finish(&st);
}

/* The process context's payload (OTEP 4719): a Resource whose attribute_key_map names the
 * keys, among other attributes; not one, or no key map: -1; a name too long or not a
 * string: NULL; a truncated payload: what precedes the cut, or -1. */
static void test_keymap(void)
{
    static const uint8_t res[] = {
        0x0a, 0x26, 0x0a, 0x1a, 't', 'h', 'r', 'e', 'a', 'd', 'l', 'o', 'c', 'a', 'l', '.',
        's', 'c', 'h', 'e', 'm', 'a', '_', 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x12, 0x08,
        0x0a, 0x06, 't', 'l', 's', '_', 'v', '1',
        0x0a, 0x38, 0x0a, 0x1d, 't', 'h', 'r', 'e', 'a', 'd', 'l', 'o', 'c', 'a', 'l', '.',
        'a', 't', 't', 'r', 'i', 'b', 'u', 't', 'e', '_', 'k', 'e', 'y', '_', 'm', 'a', 'p',
        0x12, 0x17, 0x2a, 0x15,
        0x0a, 0x06, 0x0a, 0x04, 'r', 'o', 'u', 't',   /* "rout" */
        0x0a, 0x02, 0x18, 0x07,                       /* an int: no name */
        0x0a, 0x07, 0x0a, 0x05, 'm', 'e', 't', 'h', 'o'};
    char *names[8] = {0};
    int n = tctx_parse_keymap(res, sizeof(res), names, 8);
    CHECK_INT(n, 3);
    CHECK(names[0] && !strcmp(names[0], "rout") && !names[1] && names[2] &&
          !strcmp(names[2], "metho"));
    for (int i = 0; i < 8; i++)
        free(names[i]);
    /* The first attribute alone (no key map): -1. */
    CHECK_INT(tctx_parse_keymap(res, 40, names, 8), -1);
    /* Cut inside the key map: its length runs past the end: -1 (nothing half-read). */
    CHECK_INT(tctx_parse_keymap(res, sizeof(res) - 3, names, 8), -1);
    /* At most max names. */
    n = tctx_parse_keymap(res, sizeof(res), names, 1);
    CHECK(n == 1 && names[0] && !strcmp(names[0], "rout"));
    free(names[0]);
    /* Garbage: -1. */
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    CHECK_INT(tctx_parse_keymap(junk, sizeof(junk), names, 8), -1);
}

int main(void)
{
    test_keymap();
    test_parse();
    test_pairing();
    test_pairs();
    return check_failures ? 1 : 0;
}
