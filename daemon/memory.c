/* memory.c: what profd holds, by kind, against max_memory (see memory.h). */
#include "memory.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include <cjson/cJSON.h>


static uint64_t max_memory;
static struct memacct samples;
static size_t slices, txns;
static _Atomic size_t symbolizer;
static uint64_t refused_targets, refused_slices;
static size_t (*targets_held)(void), (*clients_held)(void);

void memory_count_with(size_t (*targets)(void), size_t (*clients)(void))
{
    targets_held = targets;
    clients_held = clients;
}

/* Everything but the samples. */
static size_t not_samples(void)
{
    struct memory_parts p;
    memory_get(&p);
    return p.total - p.samples;
}

void memory_configure(uint64_t max)
{
    max_memory = max;
    /* The samples grow while the total stays within three quarters of max_memory. */
    samples.limit = (size_t)(max / 4 * 3);
    samples.others = not_samples;
}

uint64_t memory_max(void)
{
    return max_memory;
}

struct memacct *memory_samples(void)
{
    return &samples;
}

static void add(size_t *v, ssize_t delta)
{
    if (delta < 0 && (size_t)-delta > *v)
        *v = 0;
    else
        *v += (size_t)delta;
}

void memory_slices_add(ssize_t delta)
{
    add(&slices, delta);
}

void memory_txns_add(ssize_t delta)
{
    add(&txns, delta);
}

bool memory_txns_shed(void)
{
    return max_memory && txns >= max_memory / 8 && memory_over();
}

void memory_symbolizer_set(size_t bytes)
{
    atomic_store(&symbolizer, bytes);
}

void memory_get(struct memory_parts *p)
{
    size_t all_targets = targets_held ? targets_held() : 0;
    p->samples = samples.used;
    p->targets = all_targets > samples.used ? all_targets - samples.used : 0;
    p->slices = slices;
    p->clients = clients_held ? clients_held() : 0;
    p->transactions = txns;
    p->symbolizer = atomic_load(&symbolizer);
    p->total = p->samples + p->targets + p->slices + p->clients + p->transactions +
               p->symbolizer;
}

size_t memory_total(void)
{
    struct memory_parts p;
    memory_get(&p);
    return p.total;
}

bool memory_over(void)
{
    return max_memory && memory_total() > max_memory;
}

static double mib(size_t n)
{
    return (double)n / (1 << 20);
}

/* What a new target takes before its first samples: its unwinder's page cache
 * (PAGE_CACHE_SLOTS pages of 4 KiB), threads, maps, a first ring. */
#define NEW_TARGET_BYTES (320 * 1024)

int memory_admit_target(char *why, size_t whylen)
{
    if (!max_memory)
        return 0;
    struct memory_parts p;
    memory_get(&p);
    if (p.total + NEW_TARGET_BYTES <= samples.limit)
        return 0;
    refused_targets++;
    snprintf(why, whylen, "profd holds %.1f MiB (samples %.1f MiB) and samples only while the "
             "total is below three quarters of its max_memory of %.1f MiB: no room for "
             "another process", mib(p.total), mib(p.samples), mib((size_t)max_memory));
    return -EDQUOT;
}

int memory_admit_slice(size_t need, size_t nsamples, char *why, size_t whylen)
{
    if (!max_memory)
        return 0;
    struct memory_parts p;
    memory_get(&p);
    if (p.total + need <= max_memory)
        return 0;
    refused_slices++;
    snprintf(why, whylen, "a profile of %zu samples needs about %.1f MiB and profd holds %.1f "
             "MiB of its max_memory of %.1f MiB: ask for a shorter window, or raise "
             "max_memory", nsamples, mib(need), mib(p.total), mib((size_t)max_memory));
    return -EDQUOT;
}

cJSON *memory_describe(void)
{
    struct memory_parts p;
    memory_get(&p);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "max_bytes", (double)max_memory);
    cJSON_AddNumberToObject(m, "total_bytes", (double)p.total);
    cJSON_AddNumberToObject(m, "samples_bytes", (double)p.samples);
    /* The samples grow while the total is below this (three quarters of max_bytes). */
    cJSON_AddNumberToObject(m, "samples_grow_below_bytes", (double)samples.limit);
    cJSON_AddNumberToObject(m, "targets_bytes", (double)p.targets);
    cJSON_AddNumberToObject(m, "slices_bytes", (double)p.slices);
    cJSON_AddNumberToObject(m, "clients_bytes", (double)p.clients);
    cJSON_AddNumberToObject(m, "transactions_bytes", (double)p.transactions);
    cJSON_AddNumberToObject(m, "symbolizer_bytes", (double)p.symbolizer);
    /* Growths of the samples refused (a ring kept at its size, a stack not recorded). */
    cJSON_AddNumberToObject(m, "samples_growth_refused", (double)samples.refused);
    cJSON_AddNumberToObject(m, "attaches_refused", (double)refused_targets);
    cJSON_AddNumberToObject(m, "slices_refused", (double)refused_slices);
    return m;
}
