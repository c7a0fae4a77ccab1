/* ring.c: the per-target ring buffer of samples (time, thread, stack id). */
#include "ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ring_init(struct ring *r, uint64_t span_ns, size_t max_entries, ring_evict_fn evict,
               void *ctx)
{
    memset(r, 0, sizeof(*r));
    r->span_ns = span_ns;
    r->max_entries = max_entries ? max_entries : 1;
    r->evict = evict;
    r->evict_ctx = ctx;
}

static void drop_oldest(struct ring *r)
{
    /* A reader that has yet to read the oldest entry takes it now; the others' indexes
     * move down by one. */
    for (struct ring_reader *rd = r->readers; rd; rd = rd->link) {
        if (!rd->end)
            continue;
        if (!rd->next) {
            rd->take(rd, ring_at(r, 0));
            rd->taken_as_dropped++;
        } else
            rd->next--;
        rd->end--;
    }
    if (r->evict)
        r->evict(r->evict_ctx, ring_at(r, 0));
    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
}

void ring_finish(struct ring *r)
{
    while (r->len)
        drop_oldest(r);
    while (r->readers) {
        struct ring_reader *rd = r->readers;
        r->readers = rd->link;
        rd->ring = NULL;
        rd->link = NULL;
        rd->next = rd->end = 0;
        if (rd->gone)
            rd->gone(rd);
    }
    memacct_sub(r->acct, r->cap * sizeof(*r->v));
    free(r->v);
    r->v = NULL;
    r->cap = r->head = 0;
}

/* Double the storage, unwrapping the entries to the start. -EDQUOT: acct has no room. */
static int grow(struct ring *r)
{
    size_t ncap = r->cap ? r->cap * 2 : 256;
    if (!memacct_room(r->acct, (ncap - r->cap) * sizeof(struct ring_entry)))
        return -EDQUOT;
    struct ring_entry *nv = malloc(ncap * sizeof(*nv));
    if (!nv)
        return -ENOMEM;
    memacct_add(r->acct, (ncap - r->cap) * sizeof(*nv));
    for (size_t i = 0; i < r->len; i++)
        nv[i] = *ring_at(r, i);
    free(r->v);
    r->v = nv;
    r->cap = ncap;
    r->head = 0;
    return 0;
}

void ring_expire(struct ring *r, uint64_t now_ns)
{
    if (now_ns < r->span_ns)
        return;
    uint64_t limit = now_ns - r->span_ns;
    while (r->len && ring_at(r, 0)->t_ns < limit)
        drop_oldest(r);
}

int ring_push(struct ring *r, const struct ring_entry *e)
{
    uint64_t newest = e->t_ns;
    if (r->len && ring_at(r, r->len - 1)->t_ns > newest)
        newest = ring_at(r, r->len - 1)->t_ns;
    ring_expire(r, newest);
    /* Full: at max_entries, or out of storage that acct lets it grow (a bound on the memory
     * of every target's samples: the newest are kept, as in a buffer at its size). */
    bool full = r->len >= r->max_entries, no_room = false;
    if (!full && r->len == r->cap) {
        /* Refused once: asked again only 100 ms of samples later (asking costs a count of
         * everything profd holds, and a full ring is pushed to at every sample). */
        int err = r->no_room_ns && e->t_ns - r->no_room_ns < 100000000 ? -EDQUOT : grow(r);
        if (err == -EDQUOT) {
            full = no_room = true;
            if (!r->no_room_ns || e->t_ns - r->no_room_ns >= 100000000)
                r->no_room_ns = e->t_ns ? e->t_ns : 1;
        } else if (err < 0) {
            return err;
        } else {
            r->no_room_ns = 0;
        }
    }
    /* A late sample that is already out of the span, or older than everything in a full
     * buffer, is dropped itself rather than pushing out newer ones; so is any sample when
     * there is no room for even one. */
    if ((newest >= r->span_ns && e->t_ns < newest - r->span_ns) ||
        (full && (!r->len || e->t_ns < ring_at(r, 0)->t_ns))) {
        if (r->evict)
            r->evict(r->evict_ctx, e);
        if (no_room)
            r->dropped_mem++;
        else
            r->dropped++;
        return 0;
    }
    if (full) {
        drop_oldest(r);
        if (no_room)
            r->dropped_mem++;
        else
            r->dropped++;
    }
    /* Samples of one tick can complete out of order (a thread that took long to stop);
     * keep the buffer sorted by walking back from the end, which is almost always 0 steps. */
    size_t i = r->len;
    while (i > 0 && ring_at(r, i - 1)->t_ns > e->t_ns) {
        r->v[(r->head + i) & (r->cap - 1)] = *ring_at(r, i - 1);
        i--;
    }
    r->v[(r->head + i) & (r->cap - 1)] = *e;
    r->len++;
    for (struct ring_reader *rd = r->readers; rd; rd = rd->link) {
        if (i < rd->next) {
            rd->next++;
            rd->end++;
        } else if (i < rd->end) {
            rd->end++;
        }
    }
    return 0;
}

size_t ring_lower_bound(const struct ring *r, uint64_t t)
{
    size_t lo = 0, hi = r->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ring_at(r, mid)->t_ns < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t ring_memory(const struct ring *r)
{
    return r->cap * sizeof(struct ring_entry);
}

void ring_reader_attach(struct ring *r, struct ring_reader *rd, size_t first, size_t last)
{
    rd->next = first < r->len ? first : r->len;
    rd->end = last < r->len ? last : r->len;
    if (rd->end < rd->next)
        rd->end = rd->next;
    rd->taken_as_dropped = 0;
    rd->ring = r;
    rd->link = r->readers;
    r->readers = rd;
}

size_t ring_reader_step(struct ring_reader *rd, size_t max)
{
    size_t n = 0;
    while (rd->ring && rd->next < rd->end && n < max) {
        rd->take(rd, ring_at(rd->ring, rd->next));
        rd->next++;
        n++;
    }
    return n;
}

void ring_reader_detach(struct ring_reader *rd)
{
    if (!rd->ring)
        return;
    for (struct ring_reader **p = &rd->ring->readers; *p; p = &(*p)->link)
        if (*p == rd) {
            *p = rd->link;
            break;
        }
    rd->ring = NULL;
    rd->link = NULL;
}
