/* fuzz_threadctx.c: daemon/threadctx.c on what a target controls: its thread context's
 * record (the OTEP's layout, read from its memory) parsed as a sample keeps it, and the
 * eBPF program's records of it (their lengths and flags as the ring buffer hands them over)
 * queued and paired; then the attributes looked up as the formats do (profile_ctx_attr).
 * Checked: nothing reads out of bounds; a kept context is at most TCTX_MAX bytes, its
 * attributes whole entries within it; a queue stays within its bound. */
#include "fuzz.h"

#include "bpf/pybpf.h"
#include "profile.h"
#include "pykernel.h"
#include "threadctx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_in in = {data, size};
    /* 0. The same bytes as a process context's payload (OTEP 4719). */
    char *names[TCTX_MAX_KEYS];
    int nk = tctx_parse_keymap(data, size, names, TCTX_MAX_KEYS);
    FUZZ_ASSERT(nk <= TCTX_MAX_KEYS);
    for (int i = 0; i < nk; i++) {
        FUZZ_ASSERT(!names[i] || strlen(names[i]) <= TCTX_MAX_KEY_NAME);
        free(names[i]);
    }
    /* 1. A record as read from the target. */
    struct tctx_sample s;
    size_t n = in.n > TCTX_HEAD + TCTX_MAX_ATTRS ? TCTX_HEAD + TCTX_MAX_ATTRS : in.n;
    uint8_t *rec = malloc(n ? n : 1);
    FUZZ_ASSERT(rec);
    memcpy(rec, in.p, n);
    if (tctx_parse(rec, n, &s)) {
        FUZZ_ASSERT(s.have && s.len >= TCTX_KEPT && s.len <= TCTX_MAX && s.len <= n);
        struct profile_ctx c = {.attrs = s.rec + TCTX_KEPT,
                                .attrs_len = (uint16_t)(s.len - TCTX_KEPT)};
        size_t at = 0;
        while (at + 2 <= c.attrs_len && at + 2 + c.attrs[at + 1] <= c.attrs_len)
            at += 2 + c.attrs[at + 1];
        FUZZ_ASSERT(at == c.attrs_len); /* whole entries only */
        for (unsigned k = 0; k < 256; k++) {
            size_t len;
            const uint8_t *v = profile_ctx_attr(&c, k, &len);
            FUZZ_ASSERT(!v || (v >= c.attrs && v + len <= c.attrs + c.attrs_len));
        }
    }
    free(rec);
    /* 2. The program's records: the input cut into records of chosen lengths and flags,
     * queued, and taken at chosen times. */
    struct pyk_queue q = {0};
    struct tctx_target t = {0};
    static struct ctxbpf_rec r;
    uint64_t now = 0;
    while (in.n) {
        uint8_t op = fuzz_u8(&in);
        now += fuzz_u16(&in);
        if (op & 1) {
            memset(&r, 0, sizeof(r));
            r.time_ns = now + (op >> 4) * 50000ull;
            r.flags = (uint8_t)(CTXBPF_CTX | (op & 6) >> 1);
            r.len = fuzz_u16(&in);
            size_t take = r.len < CTXBPF_MAX ? r.len : CTXBPF_MAX;
            take = take < in.n ? take : in.n;
            memcpy(r.rec, in.p, take);
            in.p += take;
            in.n -= take;
            tctx_queue_push(&q, &r, &t);
            FUZZ_ASSERT(q.cap <= 256u * 1024u && q.tail <= q.cap && q.head <= q.tail);
        } else if (tctx_queue_take(&q, now, &s, &t) && s.have) {
            FUZZ_ASSERT(s.len >= TCTX_KEPT && s.len <= TCTX_MAX);
        }
    }
    free(q.buf);
    return 0;
}
