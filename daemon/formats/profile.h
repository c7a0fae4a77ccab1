/* profile.h: a symbolized slice of samples, the input to every output format.
 *
 * Built by slice.c from a target's ring buffer and stack table; formatted by
 * profile_collapsed.c, profile_sentry.c, profile_pprof.c, profile_speedscope.c and
 * profile_flamegraph.c. All strings and arrays
 * are owned by the profile and freed by profile_free(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ring.h"
#include "util.h"

#define PROFILE_MAX_BUILD_ID 64
#define PROFILE_TXN_SEP '\x1f'


/* One frame as shown to the user. Inlined functions are frames of their own. */
struct profile_frame {
    char *function;     /* demangled name; NULL if unresolved */
    char *file;         /* source file; NULL if unknown */
    int line;           /* 0 if unknown */
    char *module;       /* full path of the ELF file (or NULL: anonymous memory) */
    uint64_t addr;      /* instruction address in the target (return address for callers) */
    uint64_t module_off; /* file offset of addr inside module (for "module+0xOFF") */
    bool inlined;       /* inlined into its caller (the next frame towards the root) */
    bool jit;           /* named from /tmp/perf-PID.map */
    bool in_app;        /* the program's own code rather than a system library */
    bool python;        /* a Python function (function: its qualified name; file, line) */
    char *pymodule;     /* a Python frame's module (its function's __module__), or NULL */
};

/* An ELF image mapped in the target (for Sentry's debug_meta). */
struct profile_image {
    char *code_file;    /* path */
    uint8_t build_id[PROFILE_MAX_BUILD_ID];
    size_t build_id_len;
    uint64_t addr;      /* load address: start of its mapping at file offset 0 */
    uint64_t size;      /* from addr to the end of its last mapping */
};

/* A call stack: indices into profile.frames, LEAF FIRST (as Sentry stores them). */
struct profile_stack {
    uint32_t *frames;
    uint32_t n;
};

struct profile_sample {
    uint64_t t_ns;      /* CLOCK_MONOTONIC ns */
    int32_t tid;
    uint32_t stack;     /* index into profile.stacks */
    uint32_t txn_path;  /* index into profile.txn_paths; 0: in no transaction */
    uint32_t ctx;       /* index + 1 into profile.ctxs; 0: no thread context */
    uint8_t path;       /* how it was taken: enum sample_path */
    bool ctx_late;      /* its context was read after its instant (no eBPF program) */
};
/* An OpenTelemetry thread context a sample ran under (the Thread Context OTEP's record). */
struct profile_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t trace_flags;
    uint16_t attrs_len;
    uint8_t *attrs;      /* entries: key index (u8), length (u8), UTF-8 value */
    char trace_hex[33], span_hex[17];
};

/* A transaction in the profile's window (for listing; the samples carry txn_path). */
struct profile_span {
    int32_t tid;
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC; end_ns UINT64_MAX: still open */
    char *name;
    char *trace_id;      /* its trace (32 hex digits), or NULL */
    char *span_id;       /* its span (16 hex digits), or NULL */
};

struct profile_thread {
    int32_t tid;
    char *name;         /* comm ("worker-1"); never NULL */
};

struct profile_txn {
    char *id;           /* 32 hex digits (uuid without dashes); NULL when none */
    char *name;
    char *trace_id;     /* 32 hex digits */
    int32_t active_tid; /* thread that ran it; 0 if unknown */
    uint64_t start_ns;  /* CLOCK_MONOTONIC; 0: the profile's window is the transaction */
    uint64_t end_ns;
    uint64_t end_call_ns; /* as struct txn's */
};

struct profile {
    int32_t pid;
    char *comm;          /* process name */
    char *exe;           /* executable path */
    uint64_t start_ns;   /* monotonic window [start_ns, end_ns] */
    uint64_t end_ns;
    int64_t realtime_offset_ns; /* realtime = monotonic + offset (for timestamps) */
    uint64_t attach_ns;  /* CLOCK_MONOTONIC: when the process was attached */
    const char *profiler_id; /* Sentry's profiler_id for its chunks (not owned), or NULL: one
                                derived from the pid and the attach */
    int gzip_level;      /* pprof's zlib level (0: 6); the exporters take 1 */
    unsigned hz;         /* sampling rate requested */
    bool cputime;        /* a sample stands for period_ns of the thread's CPU time (cputime
                            schedule), else of wall-clock time */
    uint64_t period_ns;  /* 1e9 / hz */
    char *mode;          /* the schedule: "alarm", "cputime", ... (NULL: not known) */
    char *sampler;       /* the sampler asked for: "auto", "perf" or "ptrace" (NULL: not known) */
    /* The samples of the profile by the path that took each (enum sample_path). */
    uint64_t by_path[PATH_COUNT];
    struct profile_txn txn;
    bool thread_ids;     /* collapsed: name threads "name-TID" instead of merging by name */
    bool by_transaction; /* split by transaction: collapsed roots "[txn NAME]", sentry lists */
    /* The transactions samples ran under: [0] NULL (none), then each distinct nesting, its
     * names outermost first, separated by PROFILE_TXN_SEP. */
    char **txn_paths;
    size_t ntxn_paths;
    struct profile_ctx *ctxs;   /* the samples' thread contexts */
    size_t nctxs;
    char **attr_keys;    /* their attributes' key names by index (NULL: unknown) */
    size_t nattr_keys;
    bool by_span;        /* split by span: collapsed roots "[span ID ...]" */
    struct profile_span *spans; /* every transaction overlapping the window */
    size_t nspans;

    struct profile_frame *frames;
    size_t nframes;
    struct profile_stack *stacks;
    size_t nstacks;
    struct profile_sample *samples; /* sorted by t_ns */
    size_t nsamples;
    struct profile_thread *threads;
    size_t nthreads;
    struct profile_image *images;
    size_t nimages;
};

void profile_free(struct profile *p);
/* Append the frame's name as every format shows it: a Python function "module.qualname", a
 * native one its (demangled) name, an unresolved one "[module+0xOFF]", else "[unknown]". */
int profile_frame_name(struct strbuf *sb, const struct profile_frame *f);
/* A copy of s (NULL: "") that is valid UTF-8, invalid bytes made U+FFFD; NULL on ENOMEM. */
char *profile_utf8(const char *s);
/* "perf", "proc", "ptrace" or "reused" (enum sample_path). */
const char *profile_path_name(unsigned path);
/* One line that says how the profile was sampled, for formats with room for a note:
 * "sampled by profd: alarm at 99 Hz, sampler auto; 1234 samples: perf 1000, proc 200,
 * ptrace 0, reused 34". Appends to out. Returns 0 or -ENOMEM. */
int profile_describe_sampling(const struct profile *p, struct strbuf *out);
/* n bytes as 2n lowercase hex digits and a NUL. */
void profile_hex(const uint8_t *b, size_t n, char *out);
/* The value of a hex digit, or -1. */
int profile_hexval(char c);
/* A random version 4 uuid: its 16 bytes and 32 hex digits (the form of Sentry's ids; never
 * the nil uuid). Any thread. Returns 0 or -errno from getrandom(2), which blocks only until
 * the kernel's pool is first initialized. */
int profile_random_id(uint8_t bytes[16], char hex[33]);
/* The value of attribute key index key in context c (the last entry of that key, as the
 * OTEP says), its length in *len; NULL if it has none. */
const uint8_t *profile_ctx_attr(const struct profile_ctx *c, unsigned key, size_t *len);
/* The name of a context's attribute key index, as labels show it: its name in the process's
 * key map (the OTEP's process context), else "otel.attr.KEY". */
void profile_ctx_attr_name(const struct profile *p, unsigned key, char *out, size_t size);
/* Thread name for tid, or NULL. */
const char *profile_thread_name(const struct profile *p, int32_t tid);

/* Collapsed ("folded") stacks: one line per distinct (thread, stack),
 * "THREAD;root;...;leaf COUNT\n", as flamegraph.pl, inferno and speedscope read them
 * (conventions in ../shared/formats.md). Appends to out. Returns 0 or -ENOMEM. */
int profile_write_collapsed(const struct profile *p, struct strbuf *out);

/* Sentry sampled profile, version "1" (formats.md). Returns a new object or NULL (ENOMEM). */
cJSON *profile_to_sentry(const struct profile *p);

/* Sentry profile chunks, version "2" (continuous profiling): an array of chunks of at most
 * 60 s each, sharing one profiler_id. NULL on ENOMEM. */
cJSON *profile_to_sentry_chunks(const struct profile *p);

/* pprof's profile.proto, gzipped, as `go tool pprof` reads it. Appends to out. Returns 0,
 * -ENOMEM or -EIO (zlib). */
int profile_write_pprof(const struct profile *p, struct strbuf *out);

/* What an OTLP profile says of where it comes from (profile_otlp.c): its resource's
 * service.name (NULL: the process's name) and host.name (NULL: this host's), more resource
 * attributes ("KEY=VALUE"), and its profile_id (16 bytes: the caller's, so that a retried
 * send is the same profile). */
struct otlp_resource {
    const char *service;
    const char *host;
    char *const *labels;
    size_t nlabels;
    uint8_t profile_id[16];
};

/* An OTLP/HTTP ExportProfilesServiceRequest (protobuf, opentelemetry-proto's
 * profiles/v1development). Appends to out. Returns 0 or -ENOMEM. */
int profile_write_otlp(const struct profile *p, const struct otlp_resource *res,
                       struct strbuf *out);

/* gzip in[0..n) onto out at zlib's level (1 fastest ... 9 smallest: pprof's files 6, the
 * exporters' bodies 1, sent every few seconds). Returns 0, -ENOMEM or -EIO. */
int profile_gzip(const void *in, size_t n, int level, struct strbuf *out);

/* speedscope's file format: one sampled profile per thread, one per transaction. */
cJSON *profile_to_speedscope(const struct profile *p);

/* An interactive flame graph, a self-contained SVG. Appends to out. 0 or -ENOMEM. */
int profile_write_flamegraph(const struct profile *p, struct strbuf *out);

/* Where the time went: {"samples", "functions": [{name, self, total}] by self samples (by
 * total with sort_total), at most limit (0: all), "threads": [{tid, name, samples}]}, of the
 * threads whose tid is thread_filter or whose name contains it (NULL: all). NULL on ENOMEM. */
cJSON *profile_to_summary(const struct profile *p, size_t limit, const char *thread_filter,
                          bool sort_total);
