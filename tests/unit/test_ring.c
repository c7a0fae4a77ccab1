/* test_ring.c: the sample ring: wrap-around, expiry by age and by count with the evict
 * callback, out-of-order inserts against a reference model, lower-bound search on wrapped
 * buffers, its memory bound, and readers that copy a range out in steps while the ring goes
 * on. */
#include "ring.h"
#include "check.h"
#include "util.h"

#include <errno.h>
#include <stdbool.h>

/* Every evicted entry, in order. */
struct evlog {
    struct ring_entry *v;
    size_t n, cap;
};

static void record_evict(void *ctx, const struct ring_entry *e)
{
    struct evlog *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = *e;
}

static struct ring_entry entry(uint64_t t, uint32_t seq)
{
    return (struct ring_entry){.t_ns = t, .tid = (int32_t)(1000 + seq % 7), .stack = seq};
}

static bool same(const struct ring_entry *a, const struct ring_entry *b)
{
    return a->t_ns == b->t_ns && a->tid == b->tid && a->stack == b->stack;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* 20000 pushes through a 256-slot ring: the storage never grows, the head wraps around
 * dozens of times, the ring always holds the newest 256 in order, and every older entry was
 * evicted exactly once, oldest first, and counted in dropped. */
static void test_wraps_around_many_times(void)
{
    enum { MAX = 256, N = 20000 };
    struct evlog log = {0};
    struct ring r;
    ring_init(&r, UINT64_MAX, MAX, record_evict, &log);
    size_t wraps = 0, last_head = 0;
    bool ok = true;
    for (uint32_t i = 0; i < N && ok; i++) {
        struct ring_entry e = entry(1000 + (uint64_t)i * 10, i);
        CHECK_INT(ring_push(&r, &e), 0);
        if (r.head < last_head)
            wraps++;
        last_head = r.head;
        size_t want_len = i + 1 < MAX ? i + 1 : MAX;
        uint32_t oldest = i + 1 - (uint32_t)want_len;
        if (r.len != want_len || r.cap != MAX || log.n != oldest || r.dropped != oldest ||
            ring_at(&r, 0)->stack != oldest || ring_at(&r, r.len - 1)->stack != i) {
            fprintf(stderr, "push %u: len %zu cap %zu evicted %zu dropped %llu\n", i, r.len, r.cap,
                    log.n, (unsigned long long)r.dropped);
            ok = false;
        }
    }
    CHECK(ok);
    CHECK(wraps >= (N - MAX) / MAX - 1);
    for (size_t i = 0; i < r.len && ok; i++) {
        struct ring_entry want = entry(1000 + (uint64_t)(N - MAX + i) * 10, N - MAX + (uint32_t)i);
        ok = same(ring_at(&r, i), &want);
    }
    CHECK(ok);
    for (size_t i = 0; i < log.n && ok; i++) {
        struct ring_entry want = entry(1000 + (uint64_t)i * 10, (uint32_t)i);
        ok = same(&log.v[i], &want);
    }
    CHECK(ok);
    ring_finish(&r);
    free(log.v);
}

/* Entries older than newest - span go, through the callback, exactly once and oldest
 * first; an entry exactly span old stays. Age drops are not counted in dropped. */
static void test_time_span_expiry(void)
{
    struct evlog log = {0};
    struct ring r;
    ring_init(&r, 100, 1u << 20, record_evict, &log);
    bool ok = true;
    for (uint32_t i = 0; i < 5000 && ok; i++) {
        struct ring_entry e = entry((uint64_t)i * 10, i);
        ring_push(&r, &e);
        /* Kept: t >= 10 i - 100, i.e. entries i-10 .. i. */
        uint32_t first = i >= 10 ? i - 10 : 0;
        if (r.len != i - first + 1 || ring_at(&r, 0)->stack != first || log.n != first) {
            fprintf(stderr, "push %u: len %zu oldest %u evicted %zu\n", i, r.len,
                    r.len ? ring_at(&r, 0)->stack : 0, log.n);
            ok = false;
        }
    }
    CHECK(ok);
    CHECK_U64(r.dropped, 0);
    for (size_t i = 0; i < log.n && ok; i++)
        ok = log.v[i].stack == i && log.v[i].t_ns == i * 10;
    CHECK(ok);
    /* With room for all of them, the storage is sized by the span, not by the pushes. */
    CHECK(r.cap <= 256);

    /* A gap: one push far in the future expires everything before it. */
    size_t before = log.n, len = r.len;
    struct ring_entry far = entry(1000000, 99999);
    ring_push(&r, &far);
    CHECK_U64(log.n, before + len);
    CHECK_U64(r.len, 1);
    CHECK(same(ring_at(&r, 0), &far));

    /* ring_expire drops by the caller's clock; a clock earlier than the span is no-op. */
    ring_expire(&r, 1000100);
    CHECK_U64(r.len, 1);
    ring_expire(&r, 1000101);
    CHECK_U64(r.len, 0);
    CHECK_U64(log.n, before + len + 1);
    CHECK(same(&log.v[log.n - 1], &far));
    ring_finish(&r);

    struct evlog log2 = {0};
    ring_init(&r, 1000, 100, record_evict, &log2);
    struct ring_entry e = entry(5, 1);
    ring_push(&r, &e);
    ring_expire(&r, 999);
    ring_expire(&r, 0);
    CHECK_U64(r.len, 1);
    CHECK_U64(log2.n, 0);
    ring_finish(&r);
    CHECK_U64(log2.n, 1);
    free(log.v);
    free(log2.v);
}

/* The count bound: never more than max_entries, each entry pushed out counted in dropped
 * and evicted; 0 means 1. */
static void test_max_entries_bound(void)
{
    static const size_t maxes[] = {1, 2, 3, 100, 255, 256, 257, 1000};
    for (size_t k = 0; k < ARRAY_SIZE(maxes); k++) {
        size_t max = maxes[k];
        struct evlog log = {0};
        struct ring r;
        ring_init(&r, UINT64_MAX, max, record_evict, &log);
        size_t n = max * 3 + 17;
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            struct ring_entry e = entry(i, (uint32_t)i);
            ring_push(&r, &e);
            ok = ok && r.len <= max;
        }
        CHECK(ok);
        CHECK_U64(r.len, max);
        CHECK_U64(r.dropped, n - max);
        CHECK_U64(log.n, n - max);
        CHECK_U64(ring_at(&r, 0)->stack, n - max);
        ring_finish(&r);
        CHECK_U64(log.n, n);
        free(log.v);
    }
    struct ring r;
    ring_init(&r, UINT64_MAX, 0, NULL, NULL);
    for (uint32_t i = 0; i < 10; i++) {
        struct ring_entry e = entry(i, i);
        ring_push(&r, &e);
    }
    CHECK_U64(r.len, 1);
    CHECK_U64(ring_at(&r, 0)->stack, 9);
    CHECK_U64(r.dropped, 9);
    ring_finish(&r);
}

/* A plain reference: a sorted array with the ring's documented rules. */
struct model {
    struct ring_entry *v;
    size_t len, max;
    uint64_t span;
    struct evlog evicted;
};

static void model_drop_front(struct model *m)
{
    record_evict(&m->evicted, &m->v[0]);
    memmove(m->v, m->v + 1, (m->len - 1) * sizeof(*m->v));
    m->len--;
}

static void model_push(struct model *m, const struct ring_entry *e)
{
    uint64_t newest = e->t_ns;
    if (m->len && m->v[m->len - 1].t_ns > newest)
        newest = m->v[m->len - 1].t_ns;
    while (m->len && newest >= m->span && m->v[0].t_ns < newest - m->span)
        model_drop_front(m);
    /* A late entry already out of the span, or older than everything in a full buffer, is
     * dropped itself (evicted at once) rather than pushing out newer ones. */
    if ((newest >= m->span && e->t_ns < newest - m->span) ||
        (m->len >= m->max && m->len && e->t_ns < m->v[0].t_ns)) {
        record_evict(&m->evicted, e);
        return;
    }
    if (m->len >= m->max)
        model_drop_front(m);
    size_t i = m->len; /* after any equal times: stable */
    while (i > 0 && m->v[i - 1].t_ns > e->t_ns)
        i--;
    memmove(m->v + i + 1, m->v + i, (m->len - i) * sizeof(*m->v));
    m->v[i] = *e;
    m->len++;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Samples completing out of order (up to 50 time units late, with ties) against the
 * model: same contents, same order, same evictions, after every push; sorted throughout. */
static void test_out_of_order_inserts_match_model(void)
{
    static const struct {
        size_t max;
        uint64_t span;
    } configs[] = {{300, 1000}, {50, 100000}, {1000, 300}, {7, 20}};
    for (size_t c = 0; c < ARRAY_SIZE(configs); c++) {
        struct evlog log = {0};
        struct ring r;
        struct model m = {.max = configs[c].max, .span = configs[c].span};
        m.v = xmalloc((m.max + 1) * sizeof(*m.v));
        ring_init(&r, m.span, m.max, record_evict, &log);
        uint64_t clock = 1000;
        bool ok = true;
        size_t late = 0;
        for (uint32_t i = 0; i < 20000 && ok; i++) {
            clock += rnd() % 4;
            uint64_t back = rnd() % 3 == 0 ? rnd() % 51 : 0;
            late += back > 0;
            struct ring_entry e = entry(clock - back, i);
            CHECK_INT(ring_push(&r, &e), 0);
            model_push(&m, &e);
            if (r.len != m.len || log.n != m.evicted.n) {
                fprintf(stderr, "config %zu push %u: len %zu/%zu evicted %zu/%zu\n", c, i, r.len,
                        m.len, log.n, m.evicted.n);
                ok = false;
                break;
            }
            for (size_t k = 0; k < r.len && ok; k++) {
                if (!same(ring_at(&r, k), &m.v[k]) ||
                    (k > 0 && ring_at(&r, k - 1)->t_ns > ring_at(&r, k)->t_ns)) {
                    fprintf(stderr, "config %zu push %u: entry %zu differs\n", c, i, k);
                    ok = false;
                }
            }
        }
        CHECK(ok);
        CHECK(late > 1000);
        for (size_t k = 0; k < log.n && ok; k++)
            ok = same(&log.v[k], &m.evicted.v[k]);
        CHECK(ok);
        ring_finish(&r);
        free(log.v);
        free(m.v);
        free(m.evicted.v);
    }
}

static size_t linear_lower_bound(const struct ring *r, uint64_t t)
{
    size_t i = 0;
    while (i < r->len && ring_at(r, i)->t_ns < t)
        i++;
    return i;
}

/* lower_bound equals a linear scan for every time around the contents of a ring whose
 * entries wrap past the end of the storage, with duplicate times; and on the edges. */
static void test_lower_bound_on_wrapped_buffers(void)
{
    struct ring r;
    ring_init(&r, UINT64_MAX, 256, NULL, NULL);
    CHECK_U64(ring_lower_bound(&r, 0), 0);
    CHECK_U64(ring_lower_bound(&r, UINT64_MAX), 0);
    /* Fill, then push 100 more so the oldest is at slot 100 and the newest at slot 99. */
    uint64_t t = 100;
    for (uint32_t i = 0; i < 356; i++) {
        t += i % 3 == 0 ? 0 : 5; /* runs of equal times */
        struct ring_entry e = entry(t, i);
        ring_push(&r, &e);
    }
    CHECK_U64(r.head, 100);
    CHECK(r.head + r.len > r.cap);
    uint64_t lo = ring_at(&r, 0)->t_ns, hi = ring_at(&r, r.len - 1)->t_ns;
    bool ok = true;
    for (uint64_t q = lo - 3; q <= hi + 3 && ok; q++) {
        size_t got = ring_lower_bound(&r, q), want = linear_lower_bound(&r, q);
        if (got != want) {
            fprintf(stderr, "lower_bound(%llu) = %zu, want %zu\n", (unsigned long long)q, got,
                    want);
            ok = false;
        }
    }
    CHECK(ok);
    CHECK_U64(ring_lower_bound(&r, 0), 0);
    CHECK_U64(ring_lower_bound(&r, lo), 0);
    CHECK_U64(ring_lower_bound(&r, hi + 1), r.len);
    CHECK_U64(ring_lower_bound(&r, UINT64_MAX), r.len);
    CHECK(ring_at(&r, ring_lower_bound(&r, hi))->t_ns == hi);
    /* The boundary between the two physical halves. */
    size_t k = r.cap - r.head;
    uint64_t tk = ring_at(&r, k)->t_ns;
    CHECK_U64(ring_lower_bound(&r, tk), linear_lower_bound(&r, tk));
    CHECK(ring_at(&r, ring_lower_bound(&r, tk))->t_ns == tk);
    if (ring_lower_bound(&r, tk) > 0)
        CHECK(ring_at(&r, ring_lower_bound(&r, tk) - 1)->t_ns < tk);
    ring_finish(&r);
}

/* Storage: at most the power of two at or above max_entries (256 at least), whatever is
 * pushed, and ring_memory reports it. */
static void test_memory_bounded(void)
{
    static const size_t maxes[] = {1, 100, 256, 257, 1000, 4096, 5000};
    for (size_t k = 0; k < ARRAY_SIZE(maxes); k++) {
        size_t max = maxes[k], bound = pow2_at_least(max) < 256 ? 256 : pow2_at_least(max);
        struct ring r;
        ring_init(&r, UINT64_MAX, max, NULL, NULL);
        size_t peak = 0;
        for (uint32_t i = 0; i < 3 * max + 1000; i++) {
            /* Some out of order, to exercise the insertion path at the bound. */
            struct ring_entry e = entry(10000 + i * 4 - (i % 5 == 0 ? 9 : 0), i);
            ring_push(&r, &e);
            if (r.cap > peak)
                peak = r.cap;
        }
        if (peak > bound)
            fprintf(stderr, "max_entries %zu: cap %zu > %zu\n", max, peak, bound);
        CHECK(peak <= bound);
        CHECK_U64(ring_memory(&r), r.cap * sizeof(struct ring_entry));
        ring_finish(&r);
        CHECK_U64(ring_memory(&r), 0);
    }
}

/* ring_finish evicts every entry, oldest first, and frees; the ring can then start over. */
static void test_finish_evicts_all(void)
{
    struct evlog log = {0};
    struct ring r;
    ring_init(&r, UINT64_MAX, 300, record_evict, &log);
    for (uint32_t i = 0; i < 1000; i++) {
        struct ring_entry e = entry(i, i);
        ring_push(&r, &e);
    }
    size_t before = log.n;
    CHECK_U64(before, 700);
    ring_finish(&r);
    CHECK_U64(log.n, 1000);
    bool ok = true;
    for (size_t i = 0; i < log.n; i++)
        ok = ok && log.v[i].stack == i;
    CHECK(ok);
    CHECK(r.len == 0 && r.v == NULL && r.cap == 0);
    ring_finish(&r); /* twice is harmless */
    CHECK_U64(log.n, 1000);
    struct ring_entry e = entry(5, 5);
    CHECK_INT(ring_push(&r, &e), 0);
    CHECK_U64(r.len, 1);
    ring_finish(&r);
    CHECK_U64(log.n, 1001);
    free(log.v);
}

/* A ring whose storage is counted against a limit (every target's samples against
 * max_memory): it grows while the count has room, then keeps its size and its newest
 * entries, the oldest dropped and counted as dropped_mem; the count follows the storage and
 * goes back to 0 at ring_finish. Without room for even its first slots nothing is kept. */
static void test_memacct_bound(void)
{
    struct evlog log = {0};
    struct memacct acct = {.limit = 1024 * sizeof(struct ring_entry)};
    struct ring r;
    ring_init(&r, UINT64_MAX, 1u << 20, record_evict, &log);
    r.acct = &acct;
    for (uint32_t i = 0; i < 5000; i++) {
        struct ring_entry e = entry(1000 + i, i);
        CHECK_INT(ring_push(&r, &e), 0);
    }
    CHECK_U64(r.cap, 1024);
    CHECK_U64(r.len, 1024);
    CHECK_U64(acct.used, 1024 * sizeof(struct ring_entry));
    CHECK(acct.refused > 0);
    CHECK_U64(r.dropped_mem, 5000 - 1024);
    CHECK_U64(r.dropped, 0);
    CHECK_U64(ring_at(&r, 0)->stack, 5000 - 1024);
    CHECK_U64(ring_at(&r, r.len - 1)->stack, 4999);
    CHECK_U64(log.n, 5000 - 1024);
    ring_finish(&r);
    CHECK_U64(acct.used, 0);

    struct memacct none = {.limit = 16};
    ring_init(&r, UINT64_MAX, 1u << 20, record_evict, &log);
    r.acct = &none;
    struct ring_entry e = entry(1, 1);
    CHECK_INT(ring_push(&r, &e), 0);
    CHECK_U64(r.len, 0);
    CHECK_U64(r.dropped_mem, 1);
    ring_finish(&r);
    free(log.v);
}

/* ---- readers: a range copied out in steps while the ring goes on ---- */

static unsigned long long seq_clock; /* orders takes against evictions */

struct reading {
    struct ring_reader rd;
    struct ring_entry *v;
    unsigned long long *when;
    size_t n, cap;
    int gone;
};

static void reading_take(struct ring_reader *rd, const struct ring_entry *e)
{
    struct reading *x = (struct reading *)rd;
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 256;
        x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
        x->when = xrealloc(x->when, x->cap * sizeof(*x->when));
    }
    x->when[x->n] = seq_clock++;
    x->v[x->n++] = *e;
}

static void reading_gone(struct ring_reader *rd)
{
    ((struct reading *)rd)->gone++;
}

struct seqlog {
    struct evlog log;
    unsigned long long *when;
};

static void record_evict_seq(void *ctx, const struct ring_entry *e)
{
    struct seqlog *l = ctx;
    if (l->log.n == l->log.cap)
        l->when = xrealloc(l->when, (l->log.cap ? l->log.cap * 2 : 256) * sizeof(*l->when));
    l->when[l->log.n] = seq_clock++;
    record_evict(&l->log, e);
}

/* A full ring of 1000 entries, a reader on entries 100..899 read 7 at a time while 3 new
 * samples a step push the oldest out (the reader's unread ones among them), with late
 * samples inserted before the unread part, inside it and after it: the reader gets exactly
 * the range plus the late samples inserted inside its unread part, in time order, each once,
 * and every entry of the range that was dropped was taken before it was evicted. */
static void test_reader_while_ring_moves(void)
{
    enum { MAX = 1000 };
    struct seqlog sl = {0};
    struct ring r;
    ring_init(&r, UINT64_MAX, MAX, record_evict_seq, &sl);
    for (uint32_t i = 0; i < MAX; i++) {
        struct ring_entry e = entry(1000 + (uint64_t)i * 10, i);
        CHECK_INT(ring_push(&r, &e), 0);
    }
    struct reading x = {.rd = {.take = reading_take, .gone = reading_gone}};
    ring_reader_attach(&r, &x.rd, 100, 900);
    uint32_t next_seq = MAX, late_seq = 1000000;
    uint64_t newest = 1000 + (uint64_t)(MAX - 1) * 10;
    size_t expect_extra = 0, steps = 0, stepped = 0;
    bool inside_done = false, before_done = false;
    while (x.rd.next < x.rd.end) {
        stepped += ring_reader_step(&x.rd, 7);
        steps++;
        for (int k = 0; k < 3; k++) {
            newest += 10;
            struct ring_entry e = entry(newest, next_seq++);
            CHECK_INT(ring_push(&r, &e), 0);
        }
        if (steps == 20 && x.rd.end > x.rd.next + 10) {
            /* Inside the unread part: between two of its entries. */
            uint64_t t = ring_at(&r, x.rd.next + 5)->t_ns + 5;
            struct ring_entry e = entry(t, late_seq++);
            CHECK_INT(ring_push(&r, &e), 0);
            expect_extra++;
            inside_done = true;
        }
        if (steps == 30 && x.rd.next > 2) {
            /* Before it: among entries already read. */
            uint64_t t = ring_at(&r, x.rd.next - 2)->t_ns + 5;
            struct ring_entry e = entry(t, late_seq++);
            CHECK_INT(ring_push(&r, &e), 0);
            before_done = true;
        }
    }
    CHECK(inside_done && before_done);
    CHECK_U64(x.n, 800 + expect_extra);
    bool ordered = true, all = true;
    for (size_t i = 1; i < x.n; i++)
        ordered &= x.v[i - 1].t_ns <= x.v[i].t_ns;
    CHECK(ordered);
    /* Every original entry 100..899, once. */
    size_t k = 0;
    for (uint32_t want = 100; want < 900; want++) {
        while (k < x.n && x.v[k].stack >= 1000000)
            k++;
        all &= k < x.n && x.v[k].stack == want;
        k++;
    }
    CHECK(all);
    /* Entries of the range that were evicted were taken first. */
    size_t evicted_in_range = 0;
    bool before_evict = true;
    for (size_t i = 0; i < sl.log.n; i++) {
        uint32_t st = sl.log.v[i].stack;
        if (st < 100 || st >= 900)
            continue;
        evicted_in_range++;
        for (size_t j = 0; j < x.n; j++)
            if (x.v[j].stack == st)
                before_evict &= x.when[j] < sl.when[i];
    }
    CHECK(evicted_in_range > 100); /* the ring did push unread entries out */
    CHECK(before_evict);
    /* What the steps did not take, the drops did, and the reader counted it (here the
     * steps outrun the drops: test_reader_finish_and_detach has readers that fall behind). */
    CHECK_U64(stepped + x.rd.taken_as_dropped, x.n);
    CHECK_INT(x.gone, 0);
    ring_reader_detach(&x.rd);
    CHECK(r.readers == NULL);
    ring_finish(&r);
    CHECK_INT(x.gone, 0);
    free(x.v);
    free(x.when);
    free(sl.log.v);
    free(sl.when);
}

/* Finishing the ring with two readers part way: each takes the rest of its range, then is
 * told the ring is gone, detached. A detached reader takes nothing more. */
static void test_reader_finish_and_detach(void)
{
    struct evlog log = {0};
    struct ring r;
    ring_init(&r, UINT64_MAX, 1u << 20, record_evict, &log);
    for (uint32_t i = 0; i < 600; i++) {
        struct ring_entry e = entry(1000 + (uint64_t)i * 10, i);
        CHECK_INT(ring_push(&r, &e), 0);
    }
    struct reading a = {.rd = {.take = reading_take, .gone = reading_gone}};
    struct reading b = {.rd = {.take = reading_take, .gone = reading_gone}};
    struct reading c = {.rd = {.take = reading_take, .gone = reading_gone}};
    ring_reader_attach(&r, &a.rd, 10, 500);
    ring_reader_attach(&r, &b.rd, 0, 600);
    ring_reader_attach(&r, &c.rd, 200, 300);
    CHECK_U64(ring_reader_step(&a.rd, 100), 100);
    CHECK_U64(ring_reader_step(&b.rd, 599), 599);
    CHECK_U64(ring_reader_step(&c.rd, 10), 10);
    ring_reader_detach(&c.rd);
    CHECK_U64(ring_reader_step(&c.rd, 10), 0);
    ring_finish(&r);
    CHECK_U64(a.n, 490);
    CHECK_U64(a.rd.taken_as_dropped, 390);
    CHECK_U64(b.rd.taken_as_dropped, 1);
    CHECK_U64(a.v[0].stack, 10);
    CHECK_U64(a.v[489].stack, 499);
    CHECK_U64(b.n, 600);
    CHECK_U64(b.v[599].stack, 599);
    CHECK_U64(c.n, 10);
    CHECK_INT(a.gone, 1);
    CHECK_INT(b.gone, 1);
    CHECK_INT(c.gone, 0);
    CHECK(a.rd.ring == NULL && b.rd.ring == NULL);
    CHECK_U64(ring_reader_step(&a.rd, 10), 0);
    ring_reader_detach(&a.rd); /* detached already: nothing */
    CHECK_U64(log.n, 600);
    /* A range past the end is clamped; an empty one reads nothing. */
    ring_init(&r, UINT64_MAX, 1u << 20, record_evict, &log);
    struct ring_entry e = entry(5, 5);
    CHECK_INT(ring_push(&r, &e), 0);
    struct reading d = {.rd = {.take = reading_take}};
    ring_reader_attach(&r, &d.rd, 0, 10);
    CHECK_U64(d.rd.end, 1);
    CHECK_U64(ring_reader_step(&d.rd, 10), 1);
    ring_finish(&r); /* gone NULL: fine */
    CHECK(d.rd.ring == NULL);
    free(a.v), free(a.when), free(b.v), free(b.when), free(c.v), free(c.when);
    free(d.v), free(d.when);
    free(log.v);
}

int main(void)
{
    RUN(test_wraps_around_many_times);
    RUN(test_time_span_expiry);
    RUN(test_max_entries_bound);
    RUN(test_out_of_order_inserts_match_model);
    RUN(test_lower_bound_on_wrapped_buffers);
    RUN(test_memory_bounded);
    RUN(test_finish_evicts_all);
    RUN(test_memacct_bound);
    RUN(test_reader_while_ring_moves);
    RUN(test_reader_finish_and_detach);
    return check_status("test_ring");
}
