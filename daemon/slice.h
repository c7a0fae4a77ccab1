/* slice.h: a window of a target's samples, copied out on the loop thread a bounded number
 * of entries at a time (worker.c drives the copy between other events), then turned into a
 * symbolized, formatted profile and its reply on the worker thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fsaccess.h"
#include "maps.h"
#include "profile.h"
#include "ring.h"
#include "schedule.h"
#include "target.h"
#include "util.h"

struct symbolizer;
struct peer;
struct slice_copy;

enum slice_format {
    SLICE_COLLAPSED,
    SLICE_SENTRY,
    SLICE_SENTRY_CHUNKS,
    SLICE_PPROF,
    SLICE_SPEEDSCOPE,
    SLICE_FLAMEGRAPH,
    SLICE_SUMMARY,
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

/* A Python code object the slice's stacks name (python.h), copied from the target. */
struct slice_pycode {
    char *module, *qualname, *filename;
    int firstlineno;
    uint8_t *linetable;
    size_t linetable_len;
};

struct slice_epoch {
    uint32_t epoch;
    struct maps maps; /* entries copied with their own module references */
};

/* A thread context (threadctx.h's bytes: trace, span, flags, attributes). */
struct slice_ctx {
    uint8_t *rec;
    uint16_t len;
    uint64_t hash; /* of the target's entry it was copied from */
};
#define SLICE_CTX_LATE (1u << 31)

/* A transaction of the target, as the slice sees it. */
struct slice_txn {
    int32_t tid;
    uint64_t start_ns, end_ns; /* end_ns UINT64_MAX: still open */
    char *name;
    char *trace_id, *span_id;  /* hex, or NULL */
};

struct slice_job {
    /* What to build. */
    enum slice_format format;
    bool thread_ids;
    /* The summary format's: at most this many functions (0: all), by total samples rather
     * than self, of the threads whose tid or name matches thread_filter (owned; NULL: all). */
    uint64_t summary_limit;
    bool sort_total;
    char *thread_filter;
    /* Copied from the target. */
    int32_t pid;
    char comm[16];
    char *exe;
    unsigned hz;
    uint64_t start_ns, end_ns;
    int64_t realtime_offset_ns;
    struct ring_entry *samples; /* .stack indexes stacks[] */
    size_t nsamples;
    size_t samples_mapped;      /* samples is a mapping of this many bytes (0: malloc'd) */
    struct slice_stack *stacks;
    size_t nstacks;
    struct thread_name *names;
    size_t nnames;
    struct slice_epoch *epochs;
    size_t nepochs;
    /* Python code objects, by the ids in the copied stacks (renumbered: index here). */
    struct slice_pycode *pycodes;
    size_t npycodes;
    struct profile_txn txn;
    /* Transactions of the target that overlap the window: each sample is tagged with those
     * open on its thread at its time. */
    struct slice_txn *txns;
    size_t ntxns, cap_txns;
    char *only_txn;         /* keep only samples inside a transaction of this name */
    bool by_txn;            /* split the output by transaction */
    uint32_t *sample_path;  /* per sample: index into paths (0: in no transaction) */
    char **paths;           /* [0] NULL; then "outer\x1finner" names */
    size_t npaths;
    /* The OpenTelemetry thread contexts the samples carry (threadctx.h): per sample, its
     * context's index + 1 in ctxs (0: none), SLICE_CTX_LATE where it was read after the
     * sample; NULL when no sample has one. */
    struct slice_ctx *ctxs;
    size_t nctxs;
    uint32_t *sample_ctx;
    char **attr_keys; /* the target's attribute key names then (NULL entries: unknown) */
    size_t nattr_keys;
    /* Keep only the samples of one span, or one trace; split the output by span. */
    bool has_only_span, has_only_trace, by_span;
    uint8_t only_span[8], only_trace[16];
    bool say_tctx, tctx; /* the reply says "thread_context": tctx */
    struct cJSON *sampling; /* how the samples were taken (sched_describe), or NULL: for
                               the reply, which shows it to the client as it was */
    /* The same for the profile: its schedule's mode and the sampler asked for (when
     * have_sched; a job built without a target has neither). */
    bool have_sched;
    enum sched_mode mode;
    enum sampler_kind sampler;
    uint64_t attach_ns;     /* when the target was attached */
    /* Whose rights open the files a slice needs by path (debug files, perf maps): the
     * requesting client's (groups owned by the job). */
    struct fs_creds creds;
    /* Result (worker). */
    int err;            /* 0 or -errno */
    char *data;         /* formatted bytes (collapsed, pprof, flame graph) */
    size_t len;
    bool binary;        /* data is not text (pprof): base64 on the wire */
    struct cJSON *json; /* formatted object (sentry, its chunks, speedscope, summary) */
    struct cJSON *summary; /* the top functions and the threads (every format but summary) */
    size_t nthreads_out;
    uint64_t build_ns;  /* time spent symbolizing and formatting */
    char *sym_error;    /* why some frames were left unsymbolized, or NULL */
    size_t mem_bytes;   /* the copy's size, counted in memory.h's slices */
    /* The copy of the samples while it is being made (slice_copy_step), else NULL. */
    struct slice_copy *copy;
    /* On the worker thread after slice_run, if set: make the reply (reply_frame, encoded for
     * the wire with reply_id) and let go of what only that needed, so that the loop thread
     * has only to hand it over. */
    void (*finish)(struct slice_job *job);
    struct cJSON *reply_id;
    struct strbuf reply_frame;
    size_t truncated;   /* samples whose stack is truncated (slice_run) */
    /* A warm-up (slice_warm): only load these modules' symbols into the symbolizer, one
     * offset each (references held). */
    /* Built without the symbolizer (worker.c: a transaction's finish while the symbols of
     * its files were still being loaded): frames [module+0xOFF], and the profile says so. */
    bool symbols_pending;
    struct module **warm;
    uint64_t *warm_off;
    size_t nwarm;
    /* Instead of a format (the exporters, export/encode.c): called with the symbolized
     * profile on the worker thread; the job's data, json and summary stay empty. */
    void (*on_profile)(struct slice_job *job, const struct profile *p);
    /* Completion, on the loop thread. ctx NULL: the requester went away. */
    void (*done)(struct slice_job *job);
    void *ctx;
    struct slice_job *next;
};

/* What building a slice of t's samples with start_ns <= time <= end_ns in format would take
 * (bytes, an estimate: the copy, the symbolized profile and the output), and how many
 * samples it has. */
size_t slice_estimate(const struct target *t, uint64_t start_ns, uint64_t end_ns,
                      enum slice_format format, size_t *nsamples);
/* What a slice request asks of its window, and what the target is: */
struct slice_window_in {
    bool has_last, has_from, has_to; /* which of last_ns, from_ns, to_ns it gave */
    uint64_t last_ns, from_ns, to_ns;
    uint64_t now_ns;      /* CLOCK_MONOTONIC now */
    bool exited;          /* the target exited at exit_ns */
    uint64_t exit_ns;
    bool have_oldest;     /* its buffer holds samples, the oldest at oldest_ns */
    uint64_t oldest_ns;
    uint64_t attach_ns;
    bool from_attach;     /* the format's time starts at the window (Sentry's): never before
                             the attach */
};
/* The window [*from, *to] (ns, CLOCK_MONOTONIC) of such a request: the last last_ns up to now
 * (or the exit); otherwise from_ns (default: the oldest sample) to to_ns (default: now, or
 * the exit), empty where it ends before the oldest sample. Returns 0, or -EINVAL if from_ns
 * is after to_ns. A pure function (tests/unit/test_slice_window.c). */
int slice_window(const struct slice_window_in *in, uint64_t *from, uint64_t *to);

/* A new job for t's samples with start_ns <= time <= end_ns: what it needs of the target
 * but the samples is copied now, the samples by slice_copy_step (everything it holds is
 * counted in memory.h's slices until slice_job_free). Until the copy is complete the job
 * keeps its place in t's ring: entries the ring drops meanwhile are copied as it drops
 * them, and if t is freed meanwhile the copy completes then. */
struct slice_job *slice_begin(struct target *t, uint64_t start_ns, uint64_t end_ns,
                              enum slice_format format);
/* A job that loads into the worker's symbolizer the symbols of every ELF file t has mapped
 * with code, so that its first slice or transaction profile does not pay for reading them
 * (the worker runs jobs in order: a profile asked for meanwhile waits for it, as it would
 * have waited for its own loading). Its done callback is the caller's to set. */
struct slice_job *slice_warm(struct target *t);
/* Copy up to max more samples (and the stacks they use) into the job; *taken: how many.
 * Returns whether the copy is complete (then job->copy is NULL, and *as_dropped is how many
 * of the job's samples were copied as the ring dropped them, not by a step; else 0). Loop
 * thread. */
bool slice_copy_step(struct slice_job *job, size_t max, size_t *taken, size_t *as_dropped);
/* Symbolize as this client (its uid, gid, groups and file capabilities); NULL: as nobody. */
void slice_set_requester(struct slice_job *job, const struct peer *p);
/* Add to the job the transactions of its process (txn.h) that overlap its window and ran
 * on a known thread (their names, trace and span ids copied). Loop thread. */
void slice_add_txns(struct slice_job *job);
/* Tag every sample with the transactions open on its thread then, and drop those outside
 * only_txn if set. Runs on the worker thread (slice_run calls it). */
void slice_tag_txns(struct slice_job *job);
/* Keep only the samples of only_span / only_trace (if set). Worker thread (slice_run calls
 * it, after slice_tag_txns). */
void slice_filter_contexts(struct slice_job *job);
/* Build the profile (symbolize) and format it. Runs on the worker thread. */
void slice_run(struct slice_job *job, struct symbolizer *sym);
/* Free the samples, stacks, names and transactions (once the profile is built: worker
 * thread); their bytes stay counted until slice_job_free, on the loop thread. */
void slice_job_drop_copy(struct slice_job *job);
/* Build only the symbolized profile (tests, and slice_run). Returns 0 or -ENOMEM. */
int slice_build_profile(const struct slice_job *job, struct symbolizer *sym, struct profile *p);
void slice_job_free(struct slice_job *job);
