/* stacks.h: a target's table of distinct call stacks, deduplicated and reference counted. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memacct.h"

#define STACK_NONE UINT32_MAX

/* Stack flags, part of a stack's identity. */
#define STACK_TRUNCATED 1u /* the unwind stopped before the thread's first frame */
#define STACK_BOUNDARY 2u  /* a transaction boundary's sample, taken inside the client library's
                              call: a profile shows it at the application's call site */
/* Not stacks: what a sample's thread context needs (threadctx.h), in the same table for its
 * reference counts and its memory bound. */
#define STACK_CONTEXT 4u   /* a thread context: ips[0] its length in bytes, then its bytes */
#define STACK_PAIR 8u      /* a sample's stack and context: ips = {stack id, context id}; it
                              holds a reference to both, dropped when it goes */
#define STACK_CTX_LATE 16u /* a pair whose context was read after the sample's instant */

struct stack_entry {
    uint64_t hash;
    uint32_t refs;   /* 0: slot free */
    uint32_t next;   /* next id in the hash chain, or STACK_NONE */
    uint32_t epoch;  /* exec generation of the process when recorded */
    uint16_t flags;
    uint16_t n;      /* number of ips */
    uint64_t *ips;   /* leaf first; ips[0] is the interrupted pc, the rest return addresses */
};

struct stack_table {
    struct stack_entry *v;
    uint32_t cap;
    uint32_t used;      /* live entries */
    uint32_t free_head; /* free slot list, linked through next */
    uint32_t *buckets;
    uint32_t nbuckets;  /* power of two */
    size_t ip_bytes;    /* memory held by ip arrays */
    /* Set after stacks_init, or NULL: the table's memory is counted there, and a new stack
     * is refused (STACK_NONE) when that has no room for it. */
    struct memacct *acct;
    uint64_t refused; /* new stacks refused for want of room in acct */
};

void stacks_init(struct stack_table *st);
void stacks_finish(struct stack_table *st);
/* Find or add the stack; returns its id with one more reference, or STACK_NONE on ENOMEM
 * (or when acct has no room for a new one). */
uint32_t stacks_intern(struct stack_table *st, uint32_t epoch, uint16_t flags,
                       const uint64_t *ips, uint16_t n);
void stacks_ref(struct stack_table *st, uint32_t id);
/* Drop a reference; the entry is reclaimed at zero. */
void stacks_unref(struct stack_table *st, uint32_t id);
static inline const struct stack_entry *stacks_get(const struct stack_table *st, uint32_t id)
{
    return id < st->cap && st->v[id].refs ? &st->v[id] : NULL;
}
size_t stacks_memory(const struct stack_table *st);
