/* ring.h: a target's time-ordered sample buffer, bounded by age and by entry count. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "memacct.h"

/* How a sample was taken: each entry says which path took it (a slice counts them). */
enum sample_path {
    PATH_PERF,   /* the kernel's copy of a running thread (a perf event's sample) */
    PATH_PROC,   /* a blocked thread read from /proc and copied, not stopped */
    PATH_PTRACE, /* a ptrace stop */
    PATH_REUSED, /* an idle thread's last stack, standing for this tick too */
    PATH_COUNT
};

struct ring_entry {
    uint64_t t_ns;     /* CLOCK_MONOTONIC time of the sample */
    int32_t tid : 30;  /* (the kernel's tids are below 2^22, PID_MAX_LIMIT) */
    uint32_t path : 2; /* enum sample_path */
    uint32_t stack;    /* id in the target's stack table */
};
_Static_assert(sizeof(struct ring_entry) == 16, "a ring entry is 16 bytes");
_Static_assert(PATH_COUNT <= 4, "a ring entry has 2 bits for its path");

/* Called for every entry dropped from the buffer (so its stack reference can be released). */
typedef void (*ring_evict_fn)(void *ctx, const struct ring_entry *e);

/* A reader that copies a range of the buffer out a few entries at a time (a slice, copied
 * across loop iterations so that a large one never holds up the loop). The ring keeps its
 * place while entries are dropped or inserted, and hands it any entry of the range it has
 * not read yet before dropping that entry (before evict, so the entry's stack is still
 * there). Entries inserted inside the unread part of the range (late samples of a tick) are
 * read too; entries inserted before it or after it are not. */
struct ring_reader {
    size_t next, end; /* [next, end): indexes (0: the oldest) still to be read */
    size_t taken_as_dropped; /* entries taken by drop_oldest, not by ring_reader_step */
    void (*take)(struct ring_reader *rd, const struct ring_entry *e);
    /* The ring is being finished, after every entry of the range was taken: the reader is
     * detached already. NULL: nothing to do. */
    void (*gone)(struct ring_reader *rd);
    struct ring *ring;        /* NULL once detached */
    struct ring_reader *link; /* the ring's readers */
};

struct ring {
    struct ring_entry *v;
    size_t cap;         /* allocated slots (power of two) */
    size_t head;        /* index of the oldest entry */
    size_t len;
    size_t max_entries; /* hard bound on len */
    uint64_t span_ns;   /* entries older than newest - span_ns are dropped */
    ring_evict_fn evict;
    void *evict_ctx;
    uint64_t dropped;   /* entries dropped because of max_entries (not age) */
    /* Set after ring_init, or NULL: its storage is counted there, and grows only while
     * that has room; when it has none the ring is full at its present size. */
    struct memacct *acct;
    uint64_t dropped_mem; /* entries dropped because acct had no room */
    uint64_t no_room_ns;  /* when acct last had no room (growth is retried 100 ms later) */
    struct ring_reader *readers;
};

void ring_init(struct ring *r, uint64_t span_ns, size_t max_entries, ring_evict_fn evict,
               void *ctx);
/* Drop every entry (calling evict) and free the memory. */
void ring_finish(struct ring *r);
/* Insert an entry in time order (usually at the end), dropping entries that fell out of
 * the time span or exceed max_entries (or the room acct leaves), oldest first. Returns 0 or
 * -ENOMEM. */
int ring_push(struct ring *r, const struct ring_entry *e);
/* Drop entries older than now_ns - span_ns (for targets that stopped producing samples). */
void ring_expire(struct ring *r, uint64_t now_ns);
/* The i-th oldest entry. */
static inline const struct ring_entry *ring_at(const struct ring *r, size_t i)
{
    return &r->v[(r->head + i) & (r->cap - 1)];
}
/* Index of the first entry with t_ns >= t (len if none). Binary search. */
size_t ring_lower_bound(const struct ring *r, uint64_t t);
size_t ring_memory(const struct ring *r);

/* Read entries [first, last) with rd (its take and gone set), in steps. */
void ring_reader_attach(struct ring *r, struct ring_reader *rd, size_t first, size_t last);
/* Take up to max more entries, oldest first; returns how many were taken. When none is left
 * (rd->next == rd->end) the range is read (entries dropped meanwhile were taken as they
 * went). */
size_t ring_reader_step(struct ring_reader *rd, size_t max);
/* Stop reading (no-op if detached already). */
void ring_reader_detach(struct ring_reader *rd);
