/* stacks.c: stack deduplication (hash chains over a slot array) with reclaim at refcount 0. */
#include "stacks.h"

#include <stdlib.h>
#include <string.h>

void stacks_init(struct stack_table *st)
{
    memset(st, 0, sizeof(*st));
    st->free_head = STACK_NONE;
}

void stacks_finish(struct stack_table *st)
{
    struct memacct *acct = st->acct;
    uint64_t refused = st->refused;
    memacct_sub(acct, stacks_memory(st));
    for (uint32_t i = 0; i < st->cap; i++)
        if (st->v[i].refs)
            free(st->v[i].ips);
    free(st->v);
    free(st->buckets);
    stacks_init(st);
    st->acct = acct;
    st->refused = refused;
}

/* FNV-1a over the words, then a final mix: cheap and good enough for code addresses. */
static uint64_t hash_stack(uint32_t epoch, uint16_t flags, const uint64_t *ips, uint16_t n)
{
    uint64_t h = 1469598103934665603ull ^ ((uint64_t)epoch << 16 | flags);
    for (uint16_t i = 0; i < n; i++) {
        h ^= ips[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static int rehash(struct stack_table *st, uint32_t nb)
{
    uint32_t *b = malloc(nb * sizeof(*b));
    if (!b)
        return -1;
    for (uint32_t i = 0; i < nb; i++)
        b[i] = STACK_NONE;
    for (uint32_t id = 0; id < st->cap; id++) {
        struct stack_entry *e = &st->v[id];
        if (!e->refs)
            continue;
        uint32_t k = (uint32_t)e->hash & (nb - 1);
        e->next = b[k];
        b[k] = id;
    }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = nb;
    return 0;
}

/* Get a free slot id, growing the slot array when none is left. */
static uint32_t alloc_slot(struct stack_table *st)
{
    if (st->free_head != STACK_NONE) {
        uint32_t id = st->free_head;
        st->free_head = st->v[id].next;
        return id;
    }
    uint32_t ncap = st->cap ? st->cap * 2 : 64;
    if (ncap >= STACK_NONE)
        return STACK_NONE;
    struct stack_entry *nv = realloc(st->v, ncap * sizeof(*nv));
    if (!nv)
        return STACK_NONE;
    memset(nv + st->cap, 0, (ncap - st->cap) * sizeof(*nv));
    /* Chain the new slots (except the one returned) into the free list, lowest first. */
    for (uint32_t i = ncap - 1; i > st->cap; i--) {
        nv[i].next = st->free_head;
        st->free_head = i;
    }
    uint32_t id = st->cap;
    st->v = nv;
    st->cap = ncap;
    return id;
}

uint32_t stacks_intern(struct stack_table *st, uint32_t epoch, uint16_t flags,
                       const uint64_t *ips, uint16_t n)
{
    uint64_t h = hash_stack(epoch, flags, ips, n);
    if (st->nbuckets) {
        for (uint32_t id = st->buckets[h & (st->nbuckets - 1)]; id != STACK_NONE;
             id = st->v[id].next) {
            struct stack_entry *e = &st->v[id];
            if (e->hash == h && e->n == n && e->epoch == epoch && e->flags == flags &&
                (n == 0 || !memcmp(e->ips, ips, n * sizeof(*ips)))) {
                e->refs++;
                return id;
            }
        }
    }
    bool grow_buckets = (uint64_t)(st->used + 1) * 4 > (uint64_t)st->nbuckets * 3; /* load <= 0.75 */
    if (st->acct) {
        /* What this new stack costs: its addresses, and the table's growth if it needs to. */
        size_t more = (n ? n : 1) * sizeof(uint64_t);
        if (st->free_head == STACK_NONE)
            more += (st->cap ? st->cap : 64) * sizeof(struct stack_entry);
        if (grow_buckets)
            more += (st->nbuckets ? st->nbuckets : 64) * sizeof(uint32_t);
        if (!memacct_room(st->acct, more)) {
            st->refused++;
            return STACK_NONE;
        }
    }
    size_t before = stacks_memory(st);
    if (grow_buckets) {
        if (rehash(st, st->nbuckets ? st->nbuckets * 2 : 64) < 0)
            return STACK_NONE;
    }
    uint64_t *copy = malloc((n ? n : 1) * sizeof(*copy));
    uint32_t id = copy ? alloc_slot(st) : STACK_NONE;
    if (id == STACK_NONE) {
        free(copy);
        memacct_add(st->acct, stacks_memory(st) - before); /* the table may have grown */
        return STACK_NONE;
    }
    if (n)
        memcpy(copy, ips, n * sizeof(*ips));
    struct stack_entry *e = &st->v[id];
    e->hash = h;
    e->refs = 1;
    e->epoch = epoch;
    e->flags = flags;
    e->n = n;
    e->ips = copy;
    uint32_t k = (uint32_t)h & (st->nbuckets - 1);
    e->next = st->buckets[k];
    st->buckets[k] = id;
    st->used++;
    st->ip_bytes += (n ? n : 1) * sizeof(*copy);
    memacct_add(st->acct, stacks_memory(st) - before);
    return id;
}

void stacks_ref(struct stack_table *st, uint32_t id)
{
    if (id < st->cap && st->v[id].refs)
        st->v[id].refs++;
}

void stacks_unref(struct stack_table *st, uint32_t id)
{
    if (id >= st->cap || !st->v[id].refs)
        return;
    struct stack_entry *e = &st->v[id];
    if (--e->refs)
        return;
    /* Unlink from its hash chain, then put the slot on the free list. */
    uint32_t *link = &st->buckets[e->hash & (st->nbuckets - 1)];
    while (*link != id)
        link = &st->v[*link].next;
    *link = e->next;
    st->ip_bytes -= (e->n ? e->n : 1) * sizeof(uint64_t);
    memacct_sub(st->acct, (e->n ? e->n : 1) * sizeof(uint64_t));
    uint64_t parts[2] = {STACK_NONE, STACK_NONE};
    if ((e->flags & STACK_PAIR) && e->n == 2)
        memcpy(parts, e->ips, sizeof(parts));
    free(e->ips);
    e->ips = NULL;
    e->next = st->free_head;
    st->free_head = id;
    st->used--;
    /* A pair's parts are never pairs: one level. */
    for (int i = 0; i < 2; i++)
        if (parts[i] != STACK_NONE)
            stacks_unref(st, (uint32_t)parts[i]);
}

size_t stacks_memory(const struct stack_table *st)
{
    return st->cap * sizeof(struct stack_entry) + st->nbuckets * sizeof(uint32_t) + st->ip_bytes;
}
