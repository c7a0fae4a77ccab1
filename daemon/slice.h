/* slice.h: a window of a target's samples, copied out on the loop thread and turned into a
 * symbolized, formatted profile on the worker thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "maps.h"
#include "profile.h"
#include "ring.h"
#include "target.h"

struct symbolizer;

enum slice_format {
    SLICE_COLLAPSED,
    SLICE_SENTRY,
};

const char *slice_format_name(enum slice_format f);
/* -1 if unknown. */
int slice_format_parse(const char *name);

struct slice_stack {
    uint32_t epoch;
    uint16_t n;
    uint16_t flags;
    uint64_t *ips;
};

struct slice_epoch {
    uint32_t epoch;
    struct maps maps; /* entries copied with their own module references */
};

struct slice_job {
    /* What to build. */
    enum slice_format format;
    bool thread_ids;
    /* Copied from the target. */
    int32_t pid;
    char comm[16];
    char *exe;
    unsigned hz;
    uint64_t start_ns, end_ns;
    int64_t realtime_offset_ns;
    struct ring_entry *samples; /* .stack indexes stacks[] */
    size_t nsamples;
    struct slice_stack *stacks;
    size_t nstacks;
    struct thread_name *names;
    size_t nnames;
    struct slice_epoch *epochs;
    size_t nepochs;
    struct profile_txn txn;
    struct cJSON *sampling; /* how the samples were taken (sched_describe), or NULL */
    uint64_t attach_ns;     /* when the target was attached */
    /* Result (worker). */
    int err;            /* 0 or -errno */
    char *data;         /* formatted text (collapsed) */
    size_t len;
    struct cJSON *json; /* formatted object (sentry) */
    size_t nthreads_out;
    uint64_t build_ns;  /* time spent symbolizing and formatting */
    /* Completion, on the loop thread. ctx NULL: the requester went away. */
    void (*done)(struct slice_job *job);
    void *ctx;
    struct slice_job *next;
};

/* Copy samples of t with start_ns <= time <= end_ns into a new job. */
struct slice_job *slice_collect(const struct target *t, uint64_t start_ns, uint64_t end_ns,
                                enum slice_format format);
/* Build the profile (symbolize) and format it. Runs on the worker thread. */
void slice_run(struct slice_job *job, struct symbolizer *sym);
/* Build only the symbolized profile (tests, and slice_run). Returns 0 or -ENOMEM. */
int slice_build_profile(const struct slice_job *job, struct symbolizer *sym, struct profile *p);
void slice_job_free(struct slice_job *job);
