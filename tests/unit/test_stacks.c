/* test_stacks.c: the stack table: deduplication, reference counts and reclaim, removal from
 * the middle of hash chains, a randomized comparison with a plain reference, and the table
 * fed through a ring whose evictions drop the references. */
#include "stacks.h"
#include "ring.h"
#include "check.h"
#include "util.h"

#include <stdbool.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static bool entry_is(const struct stack_entry *e, uint32_t epoch, uint16_t flags,
                     const uint64_t *ips, uint16_t n)
{
    return e && e->epoch == epoch && e->flags == flags && e->n == n &&
           (n == 0 || !memcmp(e->ips, ips, n * sizeof(*ips)));
}

/* Walk every chain: each live entry is in the bucket of its hash exactly once, no free slot
 * is in any chain, used counts the live ones, and ip_bytes sums their arrays. */
static bool table_consistent(const struct stack_table *st)
{
    uint32_t *seen = xcalloc(st->cap ? st->cap : 1, sizeof(*seen));
    bool ok = true;
    size_t chained = 0;
    for (uint32_t b = 0; b < st->nbuckets && ok; b++) {
        for (uint32_t id = st->buckets[b]; id != STACK_NONE && ok; id = st->v[id].next) {
            if (id >= st->cap || !st->v[id].refs || (st->v[id].hash & (st->nbuckets - 1)) != b ||
                seen[id]++ || ++chained > st->cap) {
                fprintf(stderr, "bucket %u: bad chain at id %u\n", b, id);
                ok = false;
            }
        }
    }
    size_t live = 0, bytes = 0;
    for (uint32_t id = 0; id < st->cap && ok; id++) {
        if (!st->v[id].refs)
            continue;
        live++;
        bytes += (st->v[id].n ? st->v[id].n : 1) * sizeof(uint64_t);
        if (!seen[id]) {
            fprintf(stderr, "live id %u is in no chain\n", id);
            ok = false;
        }
    }
    if (ok && (live != st->used || bytes != st->ip_bytes)) {
        fprintf(stderr, "used %u (counted %zu), ip_bytes %zu (counted %zu)\n", st->used, live,
                st->ip_bytes, bytes);
        ok = false;
    }
    free(seen);
    return ok;
}

/* Same ips, epoch and flags: the same id, one more reference. Any difference in ips,
 * length, epoch or flags: a different id. The ips are copied. */
static void test_dedup(void)
{
    struct stack_table st;
    stacks_init(&st);
    uint64_t ips[] = {0x401000, 0x401234, 0x7f0000001000, 0x7f0000002000};
    uint32_t a = stacks_intern(&st, 1, 0, ips, 4);
    CHECK(a != STACK_NONE);
    CHECK_U64(stacks_intern(&st, 1, 0, ips, 4), a);
    CHECK_INT(stacks_get(&st, a)->refs, 2);
    CHECK_U64(st.used, 1);

    uint32_t other_epoch = stacks_intern(&st, 2, 0, ips, 4);
    uint32_t truncated = stacks_intern(&st, 1, STACK_TRUNCATED, ips, 4);
    uint32_t prefix = stacks_intern(&st, 1, 0, ips, 3);
    uint64_t ips2[] = {0x401000, 0x401234, 0x7f0000001000, 0x7f0000002001};
    uint32_t changed = stacks_intern(&st, 1, 0, ips2, 4);
    uint64_t none = 0;
    uint32_t empty = stacks_intern(&st, 1, 0, &none, 0);
    uint32_t ids[] = {a, other_epoch, truncated, prefix, changed, empty};
    for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
        CHECK(ids[i] != STACK_NONE);
        for (size_t k = 0; k < i; k++)
            CHECK(ids[i] != ids[k]);
    }
    CHECK_U64(st.used, 6);
    CHECK(entry_is(stacks_get(&st, other_epoch), 2, 0, ips, 4));
    CHECK(entry_is(stacks_get(&st, truncated), 1, STACK_TRUNCATED, ips, 4));
    CHECK(entry_is(stacks_get(&st, prefix), 1, 0, ips, 3));
    CHECK(entry_is(stacks_get(&st, changed), 1, 0, ips2, 4));
    CHECK(entry_is(stacks_get(&st, empty), 1, 0, NULL, 0));
    CHECK_U64(stacks_intern(&st, 2, 0, ips, 4), other_epoch);
    CHECK_U64(stacks_intern(&st, 1, STACK_TRUNCATED, ips, 4), truncated);
    CHECK_U64(stacks_intern(&st, 1, 0, &none, 0), empty);

    /* The table holds its own copy. */
    uint64_t saved = ips[1];
    ips[1] = 0xdead;
    CHECK_U64(stacks_get(&st, a)->ips[1], saved);
    CHECK(stacks_get(&st, a)->ips != ips);
    CHECK(table_consistent(&st));
    stacks_finish(&st);
    CHECK(st.used == 0 && st.cap == 0 && st.v == NULL && st.ip_bytes == 0);
}

/* A stack lives while referenced; at zero its slot is freed (and reused by the next new
 * stack) and its memory returned. Unref and ref of dead or invalid ids do nothing. */
static void test_refcount_and_reclaim(void)
{
    struct stack_table st;
    stacks_init(&st);
    uint64_t base[] = {1, 2, 3};
    uint32_t keep = stacks_intern(&st, 0, 0, base, 3);
    size_t mem0 = stacks_memory(&st), bytes0 = st.ip_bytes;

    uint64_t ips[40];
    for (int i = 0; i < 40; i++)
        ips[i] = 0x500000 + (uint64_t)i * 8;
    uint32_t id = stacks_intern(&st, 0, 0, ips, 40);
    CHECK(id != STACK_NONE && id != keep);
    CHECK_U64(st.ip_bytes, bytes0 + 40 * sizeof(uint64_t));
    CHECK_U64(stacks_memory(&st), mem0 + 40 * sizeof(uint64_t));
    stacks_ref(&st, id);
    CHECK_U64(stacks_intern(&st, 0, 0, ips, 40), id);
    CHECK_INT(stacks_get(&st, id)->refs, 3);
    stacks_unref(&st, id);
    stacks_unref(&st, id);
    CHECK(stacks_get(&st, id) != NULL);
    CHECK_U64(st.used, 2);
    stacks_unref(&st, id);
    CHECK(stacks_get(&st, id) == NULL);
    CHECK_U64(st.used, 1);
    CHECK_U64(st.ip_bytes, bytes0);
    CHECK_U64(stacks_memory(&st), mem0);
    CHECK(table_consistent(&st));

    /* Freed: no longer found; more unrefs and a ref do not revive it or touch others. */
    stacks_unref(&st, id);
    CHECK(stacks_get(&st, id) == NULL);
    CHECK_U64(st.used, 1);
    CHECK_U64(st.ip_bytes, bytes0);
    stacks_ref(&st, id);
    CHECK(stacks_get(&st, id) == NULL);
    stacks_unref(&st, STACK_NONE);
    stacks_unref(&st, st.cap + 5);
    stacks_ref(&st, STACK_NONE);
    CHECK_U64(st.used, 1);
    CHECK_INT(stacks_get(&st, keep)->refs, 1);

    /* The next new stack takes the freed slot. */
    uint64_t ips3[] = {9, 9, 9, 9, 9};
    uint32_t reused = stacks_intern(&st, 0, 0, ips3, 5);
    CHECK_U64(reused, id);
    CHECK(entry_is(stacks_get(&st, reused), 0, 0, ips3, 5));
    /* The old one comes back as a fresh entry with one reference. */
    uint32_t again = stacks_intern(&st, 0, 0, ips, 40);
    CHECK(again != STACK_NONE && again != reused);
    CHECK_INT(stacks_get(&st, again)->refs, 1);
    CHECK(table_consistent(&st));

    /* Everything released: only the slot array and buckets remain. */
    stacks_unref(&st, again);
    stacks_unref(&st, reused);
    stacks_unref(&st, keep);
    CHECK_U64(st.used, 0);
    CHECK_U64(st.ip_bytes, 0);
    CHECK_U64(stacks_memory(&st),
              st.cap * sizeof(struct stack_entry) + st.nbuckets * sizeof(uint32_t));
    stacks_finish(&st);
}

/* Thousands of stacks make chains of three or more; removing heads, middles and tails of
 * them keeps every other stack findable and the chains intact, and the freed ids are reused
 * lowest-numbered-free-list first. */
static void test_chain_removal_in_the_middle(void)
{
    enum { N = 6000, LEN = 6 };
    struct stack_table st;
    stacks_init(&st);
    static uint64_t ips[N][LEN];
    uint32_t *id = xmalloc(N * sizeof(*id));
    for (uint32_t i = 0; i < N; i++) {
        for (int k = 0; k < LEN; k++)
            ips[i][k] = 0x400000 + (uint64_t)i * 64 + (uint64_t)k;
        id[i] = stacks_intern(&st, 0, 0, ips[i], LEN);
        REQUIRE(id[i] != STACK_NONE);
    }
    CHECK(table_consistent(&st));
    /* Index from id back to i. */
    uint32_t *which = xmalloc(st.cap * sizeof(*which));
    for (uint32_t i = 0; i < N; i++)
        which[id[i]] = i;

    bool *gone = xcalloc(N, sizeof(*gone));
    size_t middles = 0, heads = 0, tails = 0;
    for (uint32_t b = 0; b < st.nbuckets; b++) {
        uint32_t c[64], n = 0;
        for (uint32_t x = st.buckets[b]; x != STACK_NONE && n < 64; x = st.v[x].next)
            c[n++] = x;
        if (n < 3 || n == 64)
            continue;
        /* Alternate: the middle of one chain, the head of the next, the tail of the next. */
        uint32_t vi;
        switch ((middles + heads + tails) % 3) {
        case 0:
            vi = n / 2;
            middles++;
            break;
        case 1:
            vi = 0;
            heads++;
            break;
        default:
            vi = n - 1;
            tails++;
            break;
        }
        stacks_unref(&st, c[vi]);
        gone[which[c[vi]]] = true;
        /* The chain lost exactly that one link and kept the order of the others. */
        uint32_t m = 0;
        bool ok = true;
        for (uint32_t x = st.buckets[b]; x != STACK_NONE && ok; x = st.v[x].next, m++)
            ok = m < n - 1 && x == c[m < vi ? m : m + 1];
        CHECK(ok && m == n - 1);
    }
    CHECK(middles >= 20 && heads >= 20 && tails >= 20);
    CHECK(table_consistent(&st));

    /* Survivors: found again under the same id; removed: not in the table. */
    bool ok = true;
    for (uint32_t i = 0; i < N && ok; i++) {
        if (gone[i]) {
            ok = stacks_get(&st, id[i]) == NULL;
            continue;
        }
        uint32_t again = stacks_intern(&st, 0, 0, ips[i], LEN);
        ok = again == id[i] && stacks_get(&st, again)->refs == 2;
        stacks_unref(&st, again);
    }
    CHECK(ok);
    /* Removed stacks come back (into freed slots) and are findable. */
    for (uint32_t i = 0; i < N && ok; i++) {
        if (!gone[i])
            continue;
        uint32_t x = stacks_intern(&st, 0, 0, ips[i], LEN);
        ok = x != STACK_NONE && x < N && stacks_intern(&st, 0, 0, ips[i], LEN) == x;
        id[i] = x;
    }
    CHECK(ok);
    CHECK(table_consistent(&st));
    CHECK_U64(st.used, N);
    stacks_finish(&st);
    free(gone);
    free(which);
    free(id);
}

/* The table's hash (stacks.c hash_stack) before its final mix, rebuilt here to make
 * collisions on purpose: FNV-1a steps are invertible, so ips can be chosen to reach any
 * state. If hash_stack changes, this must follow (the test says so). */
#define FNV_BASIS 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv_state(uint32_t epoch, uint16_t flags, const uint64_t *ips, uint16_t n)
{
    uint64_t h = FNV_BASIS ^ ((uint64_t)epoch << 16 | flags);
    for (uint16_t i = 0; i < n; i++)
        h = (h ^ ips[i]) * FNV_PRIME;
    return h;
}

static uint64_t inverse_odd(uint64_t a)
{
    uint64_t x = a; /* Newton: each step doubles the correct low bits */
    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/* Entries with equal 64-bit hashes stay distinct: same length but other ips, and one more
 * ip that leaves the state unchanged; each is found and removed by its own id. */
static void test_full_hash_collisions(void)
{
    uint64_t a[3] = {0x401000, 0x402000, 0x403000};
    /* b differs in its first two ips and reaches the same state after them. */
    uint64_t b[3] = {0x501000, 0, 0x403000};
    uint64_t ha1 = fnv_state(0, 0, a, 1), hb1 = fnv_state(0, 0, b, 1);
    b[1] = hb1 ^ ha1 ^ a[1];
    /* c is a plus an ip d with (h ^ d) * P == h. */
    uint64_t c[4] = {a[0], a[1], a[2], 0};
    uint64_t h3 = fnv_state(0, 0, a, 3);
    c[3] = h3 ^ (h3 * inverse_odd(FNV_PRIME));

    struct stack_table st;
    stacks_init(&st);
    uint32_t ia = stacks_intern(&st, 0, 0, a, 3);
    uint32_t ib = stacks_intern(&st, 0, 0, b, 3);
    uint32_t ic = stacks_intern(&st, 0, 0, c, 4);
    REQUIRE(ia != STACK_NONE && ib != STACK_NONE && ic != STACK_NONE);
    bool collide = st.v[ia].hash == st.v[ib].hash && st.v[ia].hash == st.v[ic].hash;
    if (!collide)
        fprintf(stderr, "hash_stack changed: update fnv_state() to make collisions again\n");
    CHECK(collide);
    CHECK(ia != ib && ia != ic && ib != ic);
    CHECK(entry_is(stacks_get(&st, ia), 0, 0, a, 3));
    CHECK(entry_is(stacks_get(&st, ib), 0, 0, b, 3));
    CHECK(entry_is(stacks_get(&st, ic), 0, 0, c, 4));
    CHECK_U64(stacks_intern(&st, 0, 0, b, 3), ib);
    CHECK_U64(stacks_intern(&st, 0, 0, c, 4), ic);
    CHECK_U64(stacks_intern(&st, 0, 0, a, 3), ia);
    /* Removing the middle one of three equal hashes leaves the others. */
    stacks_unref(&st, ib);
    stacks_unref(&st, ib);
    CHECK(stacks_get(&st, ib) == NULL);
    CHECK_U64(stacks_intern(&st, 0, 0, a, 3), ia);
    CHECK_U64(stacks_intern(&st, 0, 0, c, 4), ic);
    CHECK_INT(stacks_get(&st, ia)->refs, 3);
    CHECK_INT(stacks_get(&st, ic)->refs, 3);
    CHECK(table_consistent(&st));
    stacks_finish(&st);
}

/* Reference: candidate stacks and their live ids and counts. */
struct cand {
    uint32_t epoch;
    uint16_t flags, n;
    uint64_t ips[24];
    uint32_t id; /* STACK_NONE when not live */
    uint32_t refs;
};

/* Random intern, ref and unref of a pool of stacks that share prefixes, leaves, epochs and
 * flags, checked against the reference: after every operation the touched entry, and every
 * 500 operations every live id's contents and count, the chains and the memory. */
static void test_random_against_model(void)
{
    enum { POOL = 400, OPS = 200000 };
    struct cand *pool = xcalloc(POOL, sizeof(*pool));
    for (int i = 0; i < POOL; i++) {
        struct cand *c = &pool[i];
        c->epoch = (uint32_t)(rnd() % 3);
        c->flags = rnd() % 4 == 0 ? STACK_TRUNCATED : 0;
        c->n = (uint16_t)(rnd() % 25);
        for (int k = 0; k < c->n; k++)
            c->ips[k] = 0x400000 + (rnd() % 16) * 0x10; /* few values: many near-duplicates */
        c->id = STACK_NONE;
    }
    /* Exact duplicates but for epoch or for flags. */
    for (int i = 0; i + 2 < POOL; i += 37) {
        pool[i + 1] = pool[i];
        pool[i + 1].epoch ^= 1;
        pool[i + 2] = pool[i];
        pool[i + 2].flags ^= STACK_TRUNCATED;
    }
    /* Make accidental duplicates distinct: the reference counts each candidate apart. */
    for (int i = 0; i < POOL; i++) {
        for (int k = 0; k < i; k++) {
            if (pool[k].n == pool[i].n && pool[k].epoch == pool[i].epoch &&
                pool[k].flags == pool[i].flags &&
                !memcmp(pool[k].ips, pool[i].ips, pool[i].n * sizeof(uint64_t))) {
                if (pool[i].n == 0)
                    pool[i].n = 1;
                pool[i].ips[0] = 0x900000 + (uint64_t)i;
                break;
            }
        }
    }

    struct stack_table st;
    stacks_init(&st);
    bool ok = true;
    size_t live = 0, peak = 0, reclaims = 0;
    for (int op = 0; op < OPS && ok; op++) {
        struct cand *c = &pool[rnd() % POOL];
        /* Alternate phases that add references (intern 50%, unref 45%, ref 5%) and
         * phases that drop them (20%, 75%, 5%), so slots are freed and reused many times. */
        unsigned what = (unsigned)(rnd() % 20);
        bool grow = (op / 5000) % 2 == 0;
        if (what < (grow ? 10u : 4u)) {
            uint32_t id = stacks_intern(&st, c->epoch, c->flags, c->ips, c->n);
            if (id == STACK_NONE || (c->id != STACK_NONE && id != c->id)) {
                fprintf(stderr, "op %d: intern gave %u, want %u\n", op, id, c->id);
                ok = false;
                break;
            }
            for (int k = 0; c->id == STACK_NONE && k < POOL; k++)
                if (pool[k].id == id) {
                    fprintf(stderr, "op %d: id %u given to two live stacks\n", op, id);
                    ok = false;
                }
            if (c->id == STACK_NONE)
                live++;
            c->id = id;
            c->refs++;
        } else if (c->id != STACK_NONE && what < 19) {
            stacks_unref(&st, c->id);
            if (--c->refs == 0) {
                if (stacks_get(&st, c->id)) {
                    fprintf(stderr, "op %d: id %u alive after its last unref\n", op, c->id);
                    ok = false;
                }
                c->id = STACK_NONE;
                live--;
                reclaims++;
            }
        } else if (c->id != STACK_NONE) {
            stacks_ref(&st, c->id);
            c->refs++;
        }
        if (c->id != STACK_NONE) {
            const struct stack_entry *e = stacks_get(&st, c->id);
            if (!entry_is(e, c->epoch, c->flags, c->ips, c->n) || e->refs != c->refs) {
                fprintf(stderr, "op %d: id %u has the wrong contents or count\n", op, c->id);
                ok = false;
            }
        }
        if (live > peak)
            peak = live;
        if (op % 500 == 0 || op == OPS - 1) {
            size_t bytes = 0;
            for (int k = 0; k < POOL; k++) {
                struct cand *p = &pool[k];
                if (p->id == STACK_NONE)
                    continue;
                bytes += (p->n ? p->n : 1) * sizeof(uint64_t);
                const struct stack_entry *e = stacks_get(&st, p->id);
                if (!entry_is(e, p->epoch, p->flags, p->ips, p->n) || e->refs != p->refs) {
                    fprintf(stderr, "op %d: live id %u differs from the reference\n", op, p->id);
                    ok = false;
                }
            }
            if (st.used != live || st.ip_bytes != bytes || !table_consistent(&st)) {
                fprintf(stderr, "op %d: used %u want %zu, ip_bytes %zu want %zu\n", op, st.used,
                        live, st.ip_bytes, bytes);
                ok = false;
            }
            /* Slots are bounded by the most stacks ever live at once (twice, for doubling). */
            if (st.cap > 64 && st.cap > 2 * peak) {
                fprintf(stderr, "op %d: %u slots for at most %zu live\n", op, st.cap, peak);
                ok = false;
            }
        }
    }
    CHECK(ok);
    CHECK(reclaims > 1000);
    CHECK(peak > POOL / 2);
    /* Release everything: the table is empty. */
    for (int k = 0; k < POOL; k++)
        while (pool[k].id != STACK_NONE && pool[k].refs) {
            stacks_unref(&st, pool[k].id);
            if (--pool[k].refs == 0)
                pool[k].id = STACK_NONE;
        }
    CHECK_U64(st.used, 0);
    CHECK_U64(st.ip_bytes, 0);
    CHECK(table_consistent(&st));
    stacks_finish(&st);
    free(pool);
}

/* The daemon's wiring: each sample takes a reference, the ring's eviction drops it. */
struct target_like {
    struct stack_table st;
    struct ring ring;
};

static void evict_unref(void *ctx, const struct ring_entry *e)
{
    struct target_like *t = ctx;
    stacks_unref(&t->st, e->stack);
}

/* Every live stack is referenced by exactly as many ring entries as its count, so no stack
 * outlives the samples that use it; after ring_finish the table is empty. */
static void test_ring_and_stacks_together(void)
{
    struct target_like t;
    stacks_init(&t.st);
    ring_init(&t.ring, 5000, 300, evict_unref, &t);
    uint32_t *uses = NULL;
    size_t uses_cap = 0;
    bool ok = true;
    uint64_t clock = 0;
    for (uint32_t i = 0; i < 30000 && ok; i++) {
        uint64_t ips[8];
        uint16_t n = (uint16_t)(1 + rnd() % 8);
        for (int k = 0; k < n; k++)
            ips[k] = 0x400000 + (rnd() % (i < 15000 ? 4 : 12)) * 0x100;
        uint32_t id = stacks_intern(&t.st, (uint32_t)(i / 10000), 0, ips, n);
        REQUIRE(id != STACK_NONE);
        clock += 1 + rnd() % 20;
        struct ring_entry e = {.t_ns = clock - (rnd() % 8 == 0 ? rnd() % 30 : 0),
                               .tid = (int32_t)(rnd() % 4),
                               .stack = id};
        CHECK_INT(ring_push(&t.ring, &e), 0);
        if (i % 97 == 0)
            ring_expire(&t.ring, clock + rnd() % 3000);
        if (i % 250 != 0)
            continue;
        if (uses_cap < t.st.cap) {
            uses_cap = t.st.cap;
            uses = xrealloc(uses, uses_cap * sizeof(*uses));
        }
        memset(uses, 0, uses_cap * sizeof(*uses));
        for (size_t k = 0; k < t.ring.len; k++) {
            uint32_t s = ring_at(&t.ring, k)->stack;
            if (s >= t.st.cap || !stacks_get(&t.st, s)) {
                fprintf(stderr, "sample %u: ring entry %zu names dead stack %u\n", i, k, s);
                ok = false;
                break;
            }
            uses[s]++;
        }
        for (uint32_t s = 0; s < t.st.cap && ok; s++) {
            const struct stack_entry *se = stacks_get(&t.st, s);
            if ((se ? se->refs : 0) != uses[s]) {
                fprintf(stderr, "sample %u: stack %u has %u refs, %u ring entries\n", i, s,
                        se ? se->refs : 0, uses[s]);
                ok = false;
            }
        }
    }
    CHECK(ok);
    CHECK(t.ring.dropped > 0);
    CHECK(table_consistent(&t.st));
    ring_finish(&t.ring);
    CHECK_U64(t.st.used, 0);
    CHECK_U64(t.st.ip_bytes, 0);
    stacks_finish(&t.st);
    free(uses);
}

/* A table counted against a limit: the count is stacks_memory() at every step; a new stack
 * is refused when it would not fit (a known one is still found and referenced), and once
 * stacks are reclaimed there is room again; stacks_finish gives it all back. */
static void test_memacct_bound(void)
{
    struct stack_table st;
    stacks_init(&st);
    struct memacct acct = {.limit = 16 * 1024};
    st.acct = &acct;
    uint64_t ips[32];
    uint32_t ids[1000];
    size_t n = 0;
    bool exact = true;
    for (uint32_t i = 0; i < 1000; i++) {
        for (int k = 0; k < 32; k++)
            ips[k] = 0x400000 + i * 64 + (uint64_t)k;
        uint32_t id = stacks_intern(&st, 1, 0, ips, 32);
        exact &= acct.used == stacks_memory(&st);
        if (id == STACK_NONE)
            break;
        ids[n++] = id;
    }
    CHECK(exact);
    CHECK(n > 10 && n < 1000);
    CHECK(acct.used <= acct.limit);
    CHECK(acct.refused == 1);
    /* A known stack is still found. */
    for (int k = 0; k < 32; k++)
        ips[k] = 0x400000 + (uint64_t)k;
    CHECK_U64(stacks_intern(&st, 1, 0, ips, 32), ids[0]);
    stacks_unref(&st, ids[0]);
    /* Room again once some are reclaimed. */
    for (size_t i = 0; i < 4; i++)
        stacks_unref(&st, ids[i]);
    CHECK_U64(acct.used, stacks_memory(&st));
    for (int k = 0; k < 32; k++)
        ips[k] = 0x900000 + (uint64_t)k;
    uint32_t id = stacks_intern(&st, 1, 0, ips, 32);
    CHECK(id != STACK_NONE);
    CHECK_U64(acct.used, stacks_memory(&st));
    stacks_finish(&st);
    CHECK_U64(acct.used, 0);
}

int main(void)
{
    RUN(test_dedup);
    RUN(test_refcount_and_reclaim);
    RUN(test_chain_removal_in_the_middle);
    RUN(test_full_hash_collisions);
    RUN(test_random_against_model);
    RUN(test_ring_and_stacks_together);
    RUN(test_memacct_bound);
    return check_status("test_stacks");
}
