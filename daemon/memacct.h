/* memacct.h: a count of bytes held against a limit, shared by the structures that grow
 * without asking anyone (every target's ring buffer and stack table, memory.c's "samples").
 * One thread only (the loop's). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct memacct {
    size_t used;
    size_t limit;     /* 0: none */
    uint64_t refused; /* growths refused */
    /* Bytes held by others that count against the same limit (NULL: none). It may cost
     * something to know: for small requests the last answer is used up to 32 times. */
    size_t (*others)(void);
    size_t others_last;
    unsigned others_uses;
};

/* May n more bytes be held? A refusal is counted. NULL: nothing is counted. */
static inline bool memacct_room(struct memacct *a, size_t n)
{
    if (!a || !a->limit)
        return true;
    if (a->others && (n >= 4096 || a->others_uses++ % 32 == 0))
        a->others_last = a->others();
    if (a->used + n + (a->others ? a->others_last : 0) <= a->limit)
        return true;
    a->refused++;
    return false;
}

static inline void memacct_add(struct memacct *a, size_t n)
{
    if (a)
        a->used += n;
}

static inline void memacct_sub(struct memacct *a, size_t n)
{
    if (a)
        a->used = n > a->used ? 0 : a->used - n;
}
