/* slice.c: from a window of raw samples to a symbolized profile and its formatted output. */
#include "slice.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "containers.h"
#include "memory.h"
#include "schedule.h"
#include "modules.h"
#include "perms.h"
#include "symbols.h"
#include "txn.h"
#include "util.h"

const char *slice_format_name(enum slice_format f)
{
    switch (f) {
    case SLICE_COLLAPSED:
        return "collapsed";
    case SLICE_SENTRY:
        return "sentry";
    case SLICE_SENTRY_CHUNKS:
        return "sentry-chunks";
    case SLICE_PPROF:
        return "pprof";
    case SLICE_SPEEDSCOPE:
        return "speedscope";
    case SLICE_FLAMEGRAPH:
        return "flamegraph";
    case SLICE_SUMMARY:
        return "summary";
    }
    return "?";
}

int slice_format_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "collapsed") || !strcmp(name, "folded"))
        return SLICE_COLLAPSED;
    if (!strcmp(name, "sentry"))
        return SLICE_SENTRY;
    if (!strcmp(name, "sentry-chunks"))
        return SLICE_SENTRY_CHUNKS;
    if (!strcmp(name, "pprof"))
        return SLICE_PPROF;
    if (!strcmp(name, "speedscope"))
        return SLICE_SPEEDSCOPE;
    if (!strcmp(name, "flamegraph") || !strcmp(name, "svg"))
        return SLICE_FLAMEGRAPH;
    if (!strcmp(name, "summary"))
        return SLICE_SUMMARY;
    return -1;
}

static void copy_maps(struct maps *dst, const struct maps *src)
{
    dst->n = src->n;
    dst->v = xcalloc(src->n ? src->n : 1, sizeof(*dst->v));
    for (size_t i = 0; i < src->n; i++) {
        dst->v[i] = src->v[i];
        dst->v[i].path = src->v[i].path ? xstrdup(src->v[i].path) : NULL;
        dst->v[i].mod = src->v[i].mod ? module_ref(src->v[i].mod) : NULL;
    }
}

/* Bytes per sample of building and formatting a slice, beyond its copy (a sample costs 16
 * bytes in the ring): see slice_estimate. Measured (peak RSS of the daemon, 21000 samples of
 * 14 stacks, cold): a collapsed slice 53 bytes a sample, a Sentry one 633. */
#define BUILD_BYTES_COLLAPSED 64
#define BUILD_BYTES_SENTRY 640
#define BUILD_BYTES_SPEEDSCOPE 1024
/* Functions in the summary every reply carries. */
#define SUMMARY_TOP 20

static size_t build_bytes(enum slice_format format)
{
    switch (format) {
    case SLICE_SENTRY:
    case SLICE_SENTRY_CHUNKS:
        return BUILD_BYTES_SENTRY;
    case SLICE_SPEEDSCOPE: /* a JSON array per sample, a number per frame */
        return BUILD_BYTES_SPEEDSCOPE;
    default: /* a line, a pprof sample or a box per distinct stack */
        return BUILD_BYTES_COLLAPSED;
    }
}

size_t slice_estimate(const struct target *t, uint64_t start_ns, uint64_t end_ns,
                      enum slice_format format, size_t *nsamples)
{
    size_t first = ring_lower_bound(&t->ring, start_ns);
    size_t last = ring_lower_bound(&t->ring, end_ns == UINT64_MAX ? end_ns : end_ns + 1);
    size_t n = last > first ? last - first : 0;
    size_t stacks = n < t->stacks.used ? n : t->stacks.used;
    size_t per_stack = t->stacks.used ? t->stacks.ip_bytes / t->stacks.used : 0;
    *nsamples = n;
    /* The copy, then what building needs: per distinct stack its symbolized frames (a few
     * hundred bytes each, strings included), per sample the profile's entry and the output:
     * a line per distinct stack in collapsed form, but a JSON object per sample in Sentry's
     * (cJSON nodes of ~64 bytes each, then the printed text in the client's buffer). */
    return n * sizeof(struct ring_entry) + stacks * (sizeof(struct slice_stack) + per_stack) +
           (t->nnames + t->nthreads) * sizeof(struct thread_name) + stacks * 4 * per_stack +
           n * build_bytes(format);
}

/* The copy of a window in progress (slice_begin, slice_copy_step). */
struct slice_copy {
    struct ring_reader rd; /* first: the reader's callbacks get this */
    struct slice_job *job;
    struct u64map pyids;   /* target's code id + 1 -> job's index + 1 */
    struct target *t; /* NULL once the target is gone (its maps copied by then) */
    uint32_t *remap;  /* target stack id -> index in job->stacks + 1 (0: none yet) */
    uint32_t *remap_call; /* the same, for the copies flagged STACK_BOUNDARY (in_call) */
    size_t nremap;
    uint64_t *hashes; /* per job stack: the hash of the stack it was copied from */
    size_t cap_samples, cap_stacks;
    bool maps_copied;
    struct u64map ctxids; /* a context's hash (its table entry's) -> job's index + 1 */
    size_t cap_ctxs, cap_sample_ctx;
};

/* The samples' array. A large one is mapped here rather than taken from malloc: at the request,
 * on the loop thread, glibc took 400-500 us for 750 KB (its heap grown and trimmed with brk
 * at every turn); a mapping costs one system call, and its pages are touched as the copy
 * steps reach them. It is grown with mremap (late samples), and unmapped on the worker thread
 * once the profile is built. */
#define SAMPLES_MAP_MIN (64 * 1024)

static void samples_resize(struct slice_job *job, size_t n)
{
    size_t bytes = n * sizeof(*job->samples);
    if (job->samples_mapped) {
        void *p = mremap(job->samples, job->samples_mapped, bytes, MREMAP_MAYMOVE);
        if (p == MAP_FAILED)
            abort(); /* as xrealloc does */
        job->samples = p;
        job->samples_mapped = bytes;
    } else if (bytes >= SAMPLES_MAP_MIN) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            abort();
        if (job->nsamples)
            memcpy(p, job->samples, job->nsamples * sizeof(*job->samples));
        free(job->samples);
        job->samples = p;
        job->samples_mapped = bytes;
    } else {
        job->samples = xrealloc(job->samples, bytes);
    }
}

/* Count n more bytes as the job's (memory.h's slices). */
static void account(struct slice_job *job, size_t n)
{
    job->mem_bytes += n;
    memory_slices_add((ssize_t)n);
}

/* One entry of the window, read by the ring (at a step, or as it drops the entry): copied
 * with its stack, renumbered. The entry is still in the ring, so its stack is the one it
 * was recorded with: an id seen before may since have been freed and given to another stack
 * (an entry inserted late), which its hash tells apart. */

/* A Python frame's value with its code object copied into the job (once) and its id
 * renumbered to the job's; a code the target no longer has becomes "<unknown>". */
static uint64_t copy_pycode(struct slice_copy *c, uint64_t v)
{
    struct slice_job *job = c->job;
    uint32_t id = PY_CODE_ID(v);
    size_t k = (size_t)(uintptr_t)u64map_get(&c->pyids, (uint64_t)id + 1);
    if (!k) {
        const struct py_code_entry *e = c->t ? py_code_get(&c->t->py, id) : NULL;
        job->pycodes = xrealloc(job->pycodes, (job->npycodes + 1) * sizeof(*job->pycodes));
        struct slice_pycode *pc = &job->pycodes[job->npycodes];
        memset(pc, 0, sizeof(*pc));
        if (e) {
            pc->module = xstrdup(e->module);
            pc->qualname = xstrdup(e->qualname);
            pc->filename = xstrdup(e->filename);
            pc->firstlineno = e->firstlineno;
            if (e->linetable_len) {
                pc->linetable = xmalloc(e->linetable_len);
                memcpy(pc->linetable, e->linetable, e->linetable_len);
                pc->linetable_len = e->linetable_len;
            }
        } else {
            pc->module = xstrdup("");
            pc->qualname = xstrdup("<unknown>");
            pc->filename = xstrdup("");
        }
        account(job, sizeof(*pc) + pc->linetable_len + strlen(pc->qualname) +
                         strlen(pc->filename) + strlen(pc->module) + 3);
        k = ++job->npycodes;
        u64map_put(&c->pyids, (uint64_t)id + 1, (void *)(uintptr_t)k);
    }
    return (v & ~(PY_ID_MASK << 24)) | ((uint64_t)(k - 1) << 24);
}

/* Was the transaction's thread waiting inside the client library's finish at this sample
 * (after it called txn_finish, before profd read it)? Such a sample stands at the call
 * site, as the boundary samples do: a daemon slow to read the finish would otherwise leave
 * the ticks of the wait in the client's code. (The start is sent without waiting: the
 * thread is back in the application before profd reads it.) */
static bool in_call(const struct slice_job *job, const struct ring_entry *e)
{
    const struct profile_txn *x = &job->txn;
    return x->active_tid && e->tid == x->active_tid && x->end_call_ns &&
           e->t_ns > x->end_call_ns && e->t_ns <= x->end_ns;
}

/* The samples' contexts as long as the samples' array (once one has a context). */
static void size_sample_ctx(struct slice_copy *c)
{
    struct slice_job *job = c->job;
    if (c->cap_sample_ctx >= c->cap_samples)
        return;
    job->sample_ctx = xrealloc(job->sample_ctx, c->cap_samples * sizeof(*job->sample_ctx));
    memset(job->sample_ctx + c->cap_sample_ctx, 0,
           (c->cap_samples - c->cap_sample_ctx) * sizeof(*job->sample_ctx));
    account(job, (c->cap_samples - c->cap_sample_ctx) * sizeof(*job->sample_ctx));
    c->cap_sample_ctx = c->cap_samples;
}

/* Sample i's thread context: the target's entry ctx, copied once per window (found by its
 * content's hash: the table may hold a context twice over time, freed and made again). */
static void copy_ctx(struct slice_copy *c, size_t i, uint32_t ctx, bool late)
{
    struct slice_job *job = c->job;
    const struct stack_entry *ce = stacks_get(&c->t->stacks, ctx);
    uint16_t len;
    const uint8_t *bytes = tctx_bytes(c->t, ctx, &len);
    if (!ce || !bytes)
        return;
    size_sample_ctx(c);
    uintptr_t k = (uintptr_t)u64map_get(&c->ctxids, ce->hash);
    if (!k || job->ctxs[k - 1].len != len || memcmp(job->ctxs[k - 1].rec, bytes, len)) {
        if (job->nctxs == c->cap_ctxs) {
            c->cap_ctxs = c->cap_ctxs ? c->cap_ctxs * 2 : 16;
            job->ctxs = xrealloc(job->ctxs, c->cap_ctxs * sizeof(*job->ctxs));
            account(job, c->cap_ctxs / 2 * sizeof(*job->ctxs));
        }
        struct slice_ctx *sc = &job->ctxs[job->nctxs++];
        sc->rec = xmalloc(len ? len : 1);
        memcpy(sc->rec, bytes, len);
        sc->len = len;
        sc->hash = ce->hash;
        account(job, len);
        k = job->nctxs;
        if (!u64map_get(&c->ctxids, ce->hash))
            u64map_put(&c->ctxids, ce->hash, (void *)k); /* (a collision: kept apart) */
    }
    job->sample_ctx[i] = (uint32_t)k | (late ? SLICE_CTX_LATE : 0);
}

static void copy_take(struct ring_reader *rd, const struct ring_entry *e)
{
    struct slice_copy *c = (struct slice_copy *)rd;
    struct slice_job *job = c->job;
    if (job->nsamples == c->cap_samples) {
        size_t ncap = c->cap_samples ? c->cap_samples * 2 : 64;
        samples_resize(job, ncap);
        account(job, (ncap - c->cap_samples) * sizeof(*job->samples));
        c->cap_samples = ncap;
        if (job->sample_ctx)
            size_sample_ctx(c);
    }
    struct ring_entry *out = &job->samples[job->nsamples++];
    *out = *e;
    uint32_t ctx, sid;
    bool late;
    sid = tctx_resolve(c->t, e->stack, &ctx, &late);
    if (ctx != STACK_NONE)
        copy_ctx(c, job->nsamples - 1, ctx, late);
    const struct stack_entry *se = stacks_get(&c->t->stacks, sid);
    if (!se) {
        out->stack = STACK_NONE;
        return;
    }
    if (sid >= c->nremap) {
        size_t n = c->t->stacks.cap > sid ? c->t->stacks.cap : (size_t)sid + 1;
        c->remap = xrealloc(c->remap, n * sizeof(*c->remap));
        memset(c->remap + c->nremap, 0, (n - c->nremap) * sizeof(*c->remap));
        account(job, (n - c->nremap) * sizeof(*c->remap));
        if (job->txn.active_tid) {
            c->remap_call = xrealloc(c->remap_call, n * sizeof(*c->remap_call));
            memset(c->remap_call + c->nremap, 0, (n - c->nremap) * sizeof(*c->remap_call));
            account(job, (n - c->nremap) * sizeof(*c->remap_call));
        }
        c->nremap = n;
    }
    bool call = !(se->flags & STACK_BOUNDARY) && in_call(job, e);
    uint32_t *remap = call ? c->remap_call : c->remap;
    uint32_t k = remap[sid];
    if (k && c->hashes[k - 1] == se->hash) {
        out->stack = k - 1;
        return;
    }
    if (job->nstacks == c->cap_stacks) {
        size_t ncap = c->cap_stacks ? c->cap_stacks * 2 : 64;
        job->stacks = xrealloc(job->stacks, ncap * sizeof(*job->stacks));
        c->hashes = xrealloc(c->hashes, ncap * sizeof(*c->hashes));
        account(job, (ncap - c->cap_stacks) * (sizeof(*job->stacks) + sizeof(*c->hashes)));
        c->cap_stacks = ncap;
    }
    struct slice_stack *ss = &job->stacks[job->nstacks];
    ss->epoch = se->epoch;
    ss->n = se->n;
    ss->flags = se->flags | (call ? STACK_BOUNDARY : 0);
    ss->ips = xmalloc((se->n ? se->n : 1) * sizeof(uint64_t));
    memcpy(ss->ips, se->ips, se->n * sizeof(uint64_t));
    account(job, (se->n ? se->n : 1) * sizeof(uint64_t));
    for (uint16_t j = 0; j < ss->n; j++)
        if (py_is_frame(ss->ips[j]))
            ss->ips[j] = copy_pycode(c, ss->ips[j]);
    c->hashes[job->nstacks] = se->hash;
    remap[sid] = (uint32_t)job->nstacks + 1;
    out->stack = (uint32_t)job->nstacks++;
    /* The generations the stacks come from: their maps are copied at the end. */
    bool have = false;
    for (size_t j = 0; j < job->nepochs && !have; j++)
        have = job->epochs[j].epoch == se->epoch;
    if (!have) {
        job->epochs = xrealloc(job->epochs, (job->nepochs + 1) * sizeof(*job->epochs));
        job->epochs[job->nepochs++] = (struct slice_epoch){.epoch = se->epoch};
        account(job, sizeof(*job->epochs));
    }
}

/* Copy the maps of the generations the stacks come from (at the end of the copy, when they
 * hold every mapping the window's samples can be in, or when the target goes). */
static void copy_epoch_maps(struct slice_copy *c)
{
    struct slice_job *job = c->job;
    if (c->maps_copied || !c->t)
        return;
    c->maps_copied = true;
    for (size_t i = 0; i < job->nepochs; i++) {
        const struct maps *m = target_epoch_maps(c->t, job->epochs[i].epoch);
        if (!m)
            continue;
        copy_maps(&job->epochs[i].maps, m);
        account(job, m->n * sizeof(struct map_entry));
    }
}

/* The target's ring is being finished (the target is being freed): every entry of the
 * window has just been taken. Its maps are still there: copy them now. */
static void copy_gone(struct ring_reader *rd)
{
    struct slice_copy *c = (struct slice_copy *)rd;
    copy_epoch_maps(c);
    c->t = NULL;
}

static void copy_free(struct slice_copy *c)
{
    ring_reader_detach(&c->rd);
    free(c->remap);
    free(c->remap_call);
    free(c->hashes);
    u64map_finish(&c->pyids);
    u64map_finish(&c->ctxids);
    free(c);
}

int slice_window(const struct slice_window_in *in, uint64_t *from_out, uint64_t *to_out)
{
    uint64_t from = in->has_from ? in->from_ns : 0, to = in->has_to ? in->to_ns : UINT64_MAX;
    uint64_t end = in->exited ? in->exit_ns : in->now_ns; /* the newest a sample can be */
    if (in->has_last) {
        to = end;
        from = in->last_ns < end ? end - in->last_ns : 0;
    } else {
        if (!in->has_from && in->have_oldest)
            from = in->oldest_ns;
        if (!in->has_to)
            to = end;
        if (!in->has_from && from > to)
            from = to; /* a window that ends before the oldest sample: empty */
    }
    if (from > to)
        return -EINVAL;
    /* A Sentry profile's time runs from its window's start, and relay keeps 30 s of it: a
     * window reaching back before the attach (`--last 60` of a process attached seconds
     * ago) starts at the attach, where its samples do, and the reply's start_ns says so. */
    if (in->from_attach && from < in->attach_ns && in->attach_ns <= to)
        from = in->attach_ns;
    *from_out = from;
    *to_out = to;
    return 0;
}

struct slice_job *slice_begin(struct target *t, uint64_t start_ns, uint64_t end_ns,
                              enum slice_format format)
{
    struct slice_job *job = xcalloc(1, sizeof(*job));
    account(job, sizeof(*job));
    job->format = format;
    job->pid = t->pid;
    memcpy(job->comm, t->comm, sizeof(job->comm));
    job->exe = xstrdup(t->exe);
    job->hz = t->hz;
    job->sampling = sched_describe(t->sched);
    job->have_sched = true;
    job->mode = t->sched->mode;
    job->sampler = t->sampler;
    job->attach_ns = t->attach_ns;
    job->start_ns = start_ns;
    job->end_ns = end_ns;
    job->realtime_offset_ns = (int64_t)(realtime_ns() - now_ns());
    slice_set_requester(job, NULL);

    /* Names: departed threads' (oldest first), then live threads', so that the last entry
     * for a tid, which the builder takes, is the most recent. */
    job->nnames = t->nnames + t->nthreads;
    job->names = xmalloc((job->nnames ? job->nnames : 1) * sizeof(*job->names));
    if (t->nnames)
        memcpy(job->names, t->names, t->nnames * sizeof(*job->names));
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread_name *tn = &job->names[t->nnames + i];
        tn->tid = t->threads[i]->tid;
        memcpy(tn->name, t->threads[i]->name, sizeof(tn->name));
        tn->last_seen_ns = job->end_ns;
    }
    account(job, job->nnames * sizeof(*job->names));

    /* The thread context's attribute key names (threadctx.h), as they are now. */
    if (t->tctx.nkeys) {
        job->nattr_keys = t->tctx.nkeys;
        job->attr_keys = xcalloc(job->nattr_keys, sizeof(*job->attr_keys));
        for (size_t i = 0; i < job->nattr_keys; i++)
            if (t->tctx.keys[i]) {
                job->attr_keys[i] = xstrdup(t->tctx.keys[i]);
                account(job, strlen(t->tctx.keys[i]) + 1);
            }
    }

    /* The samples: read by slice_copy_step, a bounded number at a time. */
    struct slice_copy *c = xcalloc(1, sizeof(*c));
    c->job = job;
    c->t = t;
    c->rd.take = copy_take;
    c->rd.gone = copy_gone;
    size_t first = ring_lower_bound(&t->ring, start_ns);
    size_t last = ring_lower_bound(&t->ring, end_ns == UINT64_MAX ? end_ns : end_ns + 1);
    c->cap_samples = last > first ? last - first : 1;
    samples_resize(job, c->cap_samples);
    account(job, c->cap_samples * sizeof(*job->samples));
    ring_reader_attach(&t->ring, &c->rd, first, last);
    job->copy = c;
    return job;
}

bool slice_copy_step(struct slice_job *job, size_t max, size_t *taken, size_t *as_dropped)
{
    struct slice_copy *c = job->copy;
    *taken = *as_dropped = 0;
    if (!c)
        return true;
    *taken = ring_reader_step(&c->rd, max);
    if (c->rd.ring && c->rd.next < c->rd.end)
        return false;
    *as_dropped = c->rd.taken_as_dropped;
    copy_epoch_maps(c);
    copy_free(c);
    job->copy = NULL;
    return true;
}

struct slice_job *slice_warm(struct target *t)
{
    struct slice_job *job = xcalloc(1, sizeof(*job));
    job->format = SLICE_SUMMARY;
    job->pid = t->pid;
    slice_set_requester(job, NULL);
    job->warm = xcalloc(t->maps.n ? t->maps.n : 1, sizeof(*job->warm));
    job->warm_off = xcalloc(t->maps.n ? t->maps.n : 1, sizeof(*job->warm_off));
    for (size_t i = 0; i < t->maps.n; i++) {
        const struct map_entry *e = &t->maps.v[i];
        if (!e->mod || !(e->prot & MAP_PROT_X))
            continue;
        bool seen = false;
        for (size_t k = 0; k < job->nwarm && !seen; k++)
            seen = job->warm[k] == e->mod;
        if (seen)
            continue;
        job->warm[job->nwarm] = module_ref(e->mod);
        job->warm_off[job->nwarm++] = e->pgoff;
    }
    return job;
}

void slice_set_requester(struct slice_job *job, const struct peer *p)
{
    free((void *)job->creds.groups);
    if (!p) {
        /* Nobody to act for (the requester went away): no rights at all. */
        job->creds = (struct fs_creds){.uid = 65534, .gid = 65534};
        return;
    }
    gid_t *g = xmalloc((p->ngroups ? (size_t)p->ngroups : 1) * sizeof(gid_t));
    if (p->ngroups)
        memcpy(g, p->groups, (size_t)p->ngroups * sizeof(gid_t));
    job->creds = (struct fs_creds){
        .uid = p->uid,
        .gid = p->gid,
        .groups = g,
        .ngroups = p->ngroups,
        /* CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: the client reads any file itself. */
        .dac = (p->cap_eff & ((1ull << 1) | (1ull << 2))) != 0,
    };
}

void slice_job_drop_copy(struct slice_job *job)
{
    /* nsamples and nstacks stay: the reply says how many there were. */
    if (job->samples_mapped)
        munmap(job->samples, job->samples_mapped);
    else
        free(job->samples);
    job->samples = NULL;
    job->samples_mapped = 0;
    for (size_t i = 0; job->stacks && i < job->nstacks; i++)
        free(job->stacks[i].ips);
    free(job->stacks);
    job->stacks = NULL;
    for (size_t i = 0; i < job->nctxs; i++)
        free(job->ctxs[i].rec);
    free(job->ctxs);
    job->ctxs = NULL;
    job->nctxs = 0;
    free(job->sample_ctx);
    job->sample_ctx = NULL;
    free(job->names);
    job->names = NULL;
    job->nnames = 0;
    for (size_t i = 0; i < job->ntxns; i++) {
        free(job->txns[i].name);
        free(job->txns[i].trace_id);
        free(job->txns[i].span_id);
    }
    free(job->txns);
    job->txns = NULL;
    job->ntxns = job->cap_txns = 0;
    free(job->sample_path);
    job->sample_path = NULL;
    for (size_t i = 1; i < job->npaths; i++)
        free(job->paths[i]);
    free(job->paths);
    job->paths = NULL;
    job->npaths = 0;
}

void slice_job_free(struct slice_job *job)
{
    if (!job)
        return;
    if (job->copy)
        copy_free(job->copy);
    memory_slices_add(-(ssize_t)job->mem_bytes);
    free((void *)job->creds.groups);
    free(job->sym_error);
    free(job->exe);
    cJSON_Delete(job->sampling);
    for (size_t i = 0; i < job->nepochs; i++)
        maps_finish(&job->epochs[i].maps);
    free(job->epochs);
    for (size_t i = 0; i < job->npycodes; i++) {
        free(job->pycodes[i].module);
        free(job->pycodes[i].qualname);
        free(job->pycodes[i].filename);
        free(job->pycodes[i].linetable);
    }
    free(job->pycodes);
    free(job->txn.id);
    free(job->txn.name);
    free(job->txn.trace_id);
    free(job->only_txn);
    for (size_t i = 0; i < job->nattr_keys; i++)
        free(job->attr_keys[i]);
    free(job->attr_keys);
    slice_job_drop_copy(job);
    free(job->data);
    free(job->thread_filter);
    cJSON_Delete(job->summary);
    for (size_t i = 0; i < job->nwarm; i++)
        module_unref(job->warm[i]);
    free(job->warm);
    free(job->warm_off);
    if (job->json)
        cJSON_Delete(job->json);
    cJSON_Delete(job->reply_id);
    strbuf_finish(&job->reply_frame);
    free(job);
}

/* ---- transactions: which ones each sample ran under ---- */

/* A transaction of the job's process, if it overlaps the window and ran on a known thread. */
static void add_txn(const struct txn *x, void *arg)
{
    struct slice_job *job = arg;
    uint64_t end = x->end_ns ? x->end_ns : UINT64_MAX;
    if (x->tid <= 0 || end < job->start_ns || x->start_ns > job->end_ns)
        return;
    if (job->ntxns == job->cap_txns) {
        job->cap_txns = job->cap_txns ? job->cap_txns * 2 : 16;
        job->txns = xrealloc(job->txns, job->cap_txns * sizeof(*job->txns));
    }
    job->txns[job->ntxns++] = (struct slice_txn){x->tid, x->start_ns, end, xstrdup(x->name),
                                                 x->trace_id ? xstrdup(x->trace_id) : NULL,
                                                 x->span_id ? xstrdup(x->span_id) : NULL};
}

void slice_add_txns(struct slice_job *job)
{
    txn_each(job->pid, add_txn, job);
}

/* By thread, then start; of two starting together the longer (the outer) first. */
static int cmp_txn(const void *a, const void *b)
{
    const struct slice_txn *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    if (x->end_ns != y->end_ns)
        return x->end_ns > y->end_ns ? -1 : 1;
    return 0;
}

struct sample_ref {
    int32_t tid;
    uint32_t i;
    uint64_t t_ns;
};

static int cmp_ref(const void *a, const void *b)
{
    const struct sample_ref *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The index of path in job->paths, added if new. slots: open-addressed table of indices
 * (0: empty), size mask + 1, larger than twice the number of paths there can be. */
static uint32_t intern_path(struct slice_job *job, uint32_t *slots, size_t mask,
                            const char *path)
{
    size_t h = (size_t)hash_str(path) & mask;
    for (; slots[h]; h = (h + 1) & mask)
        if (!strcmp(job->paths[slots[h]], path))
            return slots[h];
    job->paths[job->npaths] = xstrdup(path);
    slots[h] = (uint32_t)job->npaths;
    return (uint32_t)job->npaths++;
}

void slice_tag_txns(struct slice_job *job)
{
    if (!job->ntxns && !job->only_txn)
        return;
    sort_array(job->txns, job->ntxns, sizeof(*job->txns), cmp_txn);
    size_t n = job->nsamples;
    struct sample_ref *refs = xmalloc((n ? n : 1) * sizeof(*refs));
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct sample_ref){job->samples[i].tid, (uint32_t)i, job->samples[i].t_ns};
    sort_array(refs, n, sizeof(*refs), cmp_ref);
    job->sample_path = xcalloc(n ? n : 1, sizeof(*job->sample_path));
    job->paths = xcalloc(n + 1, sizeof(*job->paths));
    job->npaths = 1;
    size_t mask = 15;
    while (mask + 1 < 2 * (n + 1))
        mask = mask * 2 + 1;
    uint32_t *slots = xcalloc(mask + 1, sizeof(*slots));
    size_t *active = xmalloc((job->ntxns ? job->ntxns : 1) * sizeof(*active));
    size_t nact = 0, k = 0;
    bool *keep = job->only_txn ? xcalloc(n ? n : 1, sizeof(*keep)) : NULL;
    struct strbuf sb = {0};
    for (size_t r = 0; r < n; r++) {
        const struct sample_ref *s = &refs[r];
        if (r == 0 || refs[r - 1].tid != s->tid) {
            nact = 0;
            while (k < job->ntxns && job->txns[k].tid < s->tid)
                k++;
        }
        while (k < job->ntxns && job->txns[k].tid == s->tid && job->txns[k].start_ns <= s->t_ns)
            active[nact++] = k++;
        size_t m = 0;
        for (size_t j = 0; j < nact; j++)
            if (job->txns[active[j]].end_ns >= s->t_ns)
                active[m++] = active[j];
        nact = m;
        if (!nact)
            continue; /* path 0, and outside any transaction of that name */
        sb.len = 0;
        bool match = false, oom = false;
        for (size_t j = 0; j < nact && !oom; j++) {
            const char *name = job->txns[active[j]].name;
            match |= job->only_txn && !strcmp(name, job->only_txn);
            const char sep[2] = {PROFILE_TXN_SEP, 0};
            oom = (j && strbuf_puts(&sb, sep) < 0);
            size_t at = sb.len;
            oom = oom || strbuf_puts(&sb, name) < 0;
            for (char *c = sb.buf + at; !oom && *c; c++)
                if (*c == PROFILE_TXN_SEP)
                    *c = '_';
        }
        if (oom)
            abort(); /* as xmalloc does */
        job->sample_path[s->i] = intern_path(job, slots, mask, sb.buf);
        if (keep)
            keep[s->i] = match;
    }
    strbuf_finish(&sb);
    if (keep) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (!keep[i])
                continue;
            job->samples[m] = job->samples[i];
            if (job->sample_ctx)
                job->sample_ctx[m] = job->sample_ctx[i];
            job->sample_path[m++] = job->sample_path[i];
        }
        job->nsamples = m;
    }
    free(keep);
    free(active);
    free(slots);
    free(refs);
}

void slice_filter_contexts(struct slice_job *job)
{
    if (!job->has_only_span && !job->has_only_trace)
        return;
    size_t m = 0;
    for (size_t i = 0; i < job->nsamples; i++) {
        uint32_t k = job->sample_ctx ? job->sample_ctx[i] & ~SLICE_CTX_LATE : 0;
        const uint8_t *rec = k ? job->ctxs[k - 1].rec : NULL;
        if (!rec || (job->has_only_trace && memcmp(rec, job->only_trace, 16)) ||
            (job->has_only_span && memcmp(rec + 16, job->only_span, 8)))
            continue;
        job->samples[m] = job->samples[i];
        job->sample_ctx[m] = job->sample_ctx[i];
        if (job->sample_path)
            job->sample_path[m] = job->sample_path[i];
        m++;
    }
    job->nsamples = m;
}

/* Most recently added mapping containing addr in an exec generation's history. */
static const struct map_entry *find_mapping(const struct slice_job *job, uint32_t epoch,
                                            uint64_t addr)
{
    for (size_t i = 0; i < job->nepochs; i++) {
        if (job->epochs[i].epoch != epoch)
            continue;
        const struct maps *m = &job->epochs[i].maps;
        for (size_t j = m->n; j-- > 0;)
            if (addr >= m->v[j].start && addr < m->v[j].end)
                return &m->v[j];
    }
    return NULL;
}

/* Open-addressing map from (epoch, address, caller?) to the run of frames it expands to. */
struct ipkey {
    uint64_t ip;
    uint32_t epoch;
    uint32_t caller;
    uint32_t first, count; /* frames[first .. first+count) */
    bool used;
};

struct builder {
    const struct slice_job *job;
    struct symbolizer *sym;
    struct profile *p;
    size_t cap_frames;
    struct ipkey *keys;
    size_t nkeys;
    /* modules referenced, for images */
    const struct map_entry **mods;
    size_t nmods, cap_mods;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static bool is_system_path(const char *path)
{
    static const char *const dirs[] = {"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/",
                                       "/usr/libexec/", "/usr/local/lib/"};
    /* [vdso] and the other kernel-provided mappings are not the application's code. */
    if (path[0] == '[')
        return true;
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
        if (!strncmp(path, dirs[i], strlen(dirs[i])))
            return true;
    return false;
}

static struct profile_frame *new_frame(struct builder *b)
{
    struct profile *p = b->p;
    if (p->nframes == b->cap_frames) {
        b->cap_frames = b->cap_frames ? b->cap_frames * 2 : 256;
        p->frames = xrealloc(p->frames, b->cap_frames * sizeof(*p->frames));
    }
    struct profile_frame *f = &p->frames[p->nframes++];
    memset(f, 0, sizeof(*f));
    return f;
}

static void note_module(struct builder *b, const struct map_entry *m)
{
    for (size_t i = 0; i < b->nmods; i++)
        if (b->mods[i]->mod == m->mod)
            return;
    if (b->nmods == b->cap_mods) {
        b->cap_mods = b->cap_mods ? b->cap_mods * 2 : 16;
        b->mods = xrealloc(b->mods, b->cap_mods * sizeof(*b->mods));
    }
    b->mods[b->nmods++] = m;
}

/* Symbolize one address into frames (inlined callees first). */
/* A Python frame (python.h): its code object's names, file and the line of its code unit. */
static void expand_py(struct builder *b, uint64_t v)
{
    const struct slice_job *job = b->job;
    uint32_t id = PY_CODE_ID(v);
    struct profile_frame *f = new_frame(b);
    f->python = true;
    if (id >= job->npycodes) {
        f->function = xstrdup("<unknown>");
        return;
    }
    const struct slice_pycode *pc = &job->pycodes[id];
    f->function = xstrdup(pc->qualname);
    f->file = pc->filename[0] ? xstrdup(pc->filename) : NULL;
    f->pymodule = pc->module[0] ? xstrdup(pc->module) : NULL;
    struct py_code c = {.firstlineno = pc->firstlineno,
                        .linetable = pc->linetable,
                        .linetable_len = pc->linetable_len};
    int line = py_code_line(&c, PY_INSTR(v));
    f->line = line > 0 ? line : 0;
    /* The application's code unless it is the standard library's or an installed
     * package's (as Sentry's SDK decides in_app). */
    f->in_app = f->file && !strstr(f->file, "/lib/python") && !strstr(f->file, "site-packages") &&
                !strstr(f->file, "dist-packages") && f->file[0] != '<';
}

static void expand_ip(struct builder *b, uint32_t epoch, uint64_t ip, bool caller)
{
    const struct slice_job *job = b->job;
    if (py_is_frame(ip)) {
        expand_py(b, ip);
        return;
    }
    const struct map_entry *m = find_mapping(job, epoch, ip);
    if (m && m->mod) {
        uint64_t off = ip - m->start + m->pgoff;
        const struct sym_frame *sf;
        int n = symbolizer_lookup(b->sym, m->mod, caller && off ? off - 1 : off, &sf, NULL);
        bool in_app = !strcmp(m->mod->path, job->exe) || !is_system_path(m->mod->path);
        /* vDSO code that no symbol covers is named after the mapping, as below: the
         * module-only form would print as "[[vdso]+0x780]". */
        const char *special = m->mod->path[0] == '[' ? m->mod->path : NULL;
        for (int i = 0; i < n; i++) {
            struct profile_frame *f = new_frame(b);
            f->function = dup_or_null(sf[i].function ? sf[i].function : special);
            f->file = dup_or_null(sf[i].file);
            f->line = sf[i].line;
            f->inlined = sf[i].inlined;
            f->module = xstrdup(m->mod->path);
            f->addr = ip;
            f->module_off = off;
            f->in_app = in_app;
        }
        note_module(b, m);
        return;
    }
    struct profile_frame *f = new_frame(b);
    f->addr = ip;
    if (m && m->path) {
        /* A file we could not open: its module and offset, "[file+0xOFF]" in collapsed
         * output. A special mapping ([vsyscall], or [vdso] if its image could not be read)
         * also gets its name as the function, so that it prints as "[vsyscall]" rather than
         * "[[vsyscall]+0x0]". */
        f->module = xstrdup(m->path);
        f->module_off = ip - m->start;
        if (m->path[0] == '[')
            f->function = xstrdup(m->path);
        return;
    }
    const char *jit = b->sym ? symbolizer_jit_lookup(b->sym, job->pid, ip) : NULL;
    if (jit) {
        f->function = xstrdup(jit);
        f->jit = true;
        f->in_app = true;
    }
}

/* Frames for (epoch, ip, caller), symbolizing on first use. */
static struct ipkey *lookup_ip(struct builder *b, uint32_t epoch, uint64_t ip, bool caller,
                               size_t mask)
{
    size_t h = mix(ip ^ ((uint64_t)epoch << 48) ^ ((uint64_t)caller << 63)) & mask;
    while (b->keys[h].used) {
        struct ipkey *k = &b->keys[h];
        if (k->ip == ip && k->epoch == epoch && k->caller == caller)
            return k;
        h = (h + 1) & mask;
    }
    struct ipkey *k = &b->keys[h];
    k->used = true;
    k->ip = ip;
    k->epoch = epoch;
    k->caller = caller;
    k->first = (uint32_t)b->p->nframes;
    expand_ip(b, epoch, ip, caller);
    k->count = (uint32_t)(b->p->nframes - k->first);
    return k;
}

/* The addresses of one module the slice needs, as file offsets (return addresses at their
 * call). */
struct modoffs {
    struct module *mod;
    uint64_t *offs;
    size_t n, cap;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *v = xrealloc(*v, *cap * sizeof(**v));
    }
    (*v)[(*n)++] = x;
}

/* Sort and drop duplicates; returns the new count. */
static size_t sort_unique(uint64_t *v, size_t n)
{
    sort_array(v, n, sizeof(*v), cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

/* Ask the symbolizer for every address of the slice in one exchange per module (and one for
 * JIT code), so that building the profile then finds each in the cache. Returns whether some
 * frames are in files whose headers the helper failed to read (EAGAIN: no module). */
static bool prefetch(const struct slice_job *job, struct symbolizer *sym)
{
    bool unread = false;
    struct u64map by_mod = {0}; /* module address -> index + 1 into mods */
    struct modoffs *mods = NULL;
    size_t nmods = 0;
    uint64_t *jit = NULL;
    size_t njit = 0, capjit = 0;
    for (size_t i = 0; i < job->nstacks; i++) {
        const struct slice_stack *ss = &job->stacks[i];
        for (uint16_t j = 0; j < ss->n; j++) {
            uint64_t ip = ss->ips[j];
            if (py_is_frame(ip))
                continue;
            const struct map_entry *m = find_mapping(job, ss->epoch, ip);
            if (m && m->mod) {
                uint64_t off = ip - m->start + m->pgoff;
                if (j > 0 && off)
                    off--; /* a return address: look up its call */
                size_t k = (size_t)(uintptr_t)u64map_get(&by_mod, (uintptr_t)m->mod);
                if (!k) {
                    mods = xrealloc(mods, (nmods + 1) * sizeof(*mods));
                    mods[nmods] = (struct modoffs){.mod = m->mod};
                    k = ++nmods;
                    u64map_put(&by_mod, (uintptr_t)m->mod, (void *)(uintptr_t)k);
                }
                struct modoffs *mo = &mods[k - 1];
                push_u64(&mo->offs, &mo->n, &mo->cap, off);
            } else if (!m || !m->path) {
                push_u64(&jit, &njit, &capjit, ip);
            } else if (m->mod_err == EAGAIN) {
                unread = true;
            }
        }
    }
    for (size_t i = 0; i < nmods; i++) {
        size_t n = sort_unique(mods[i].offs, mods[i].n);
        symbolizer_prefetch(sym, mods[i].mod, mods[i].offs, n);
        free(mods[i].offs);
    }
    if (njit)
        symbolizer_jit_prefetch(sym, job->pid, jit, sort_unique(jit, njit));
    free(jit);
    free(mods);
    u64map_finish(&by_mod);
    return unread;
}

/* Is frame f a native call of CPython's evaluation loop (which runs Python frames)? */
static bool is_eval_frame(const struct profile_frame *f)
{
    /* (With a full symbol table a compiler's split part is "_PyEval_EvalFrameDefault.cold"
     * or ".part.N"; the helper names a stripped one's as the function.) */
    static const char name[] = "_PyEval_EvalFrameDefault";
    return !f->python && f->function && !strncmp(f->function, name, sizeof(name) - 1) &&
           (f->function[sizeof(name) - 1] == '\0' || f->function[sizeof(name) - 1] == '.');
}

/* A stack's frames, leaf first: the native ones (native[n]) with the Python ones (py[npy],
 * innermost first, split into one group per evaluation call by entry[]) in place of the
 * evaluation-loop frames that ran them, innermost group at the innermost such frame, as
 * py-spy --native shows them. Groups left over (the native unwind ended, or the loop's
 * frames are not named) go on the root side. Returns how many frames went into out. */
static size_t interleave(const struct profile *p, const uint32_t *native, size_t n,
                         const uint32_t *py, const bool *entry, size_t npy, uint32_t *out)
{
    size_t m = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k < npy && is_eval_frame(&p->frames[native[i]])) {
            do
                out[m++] = py[k];
            while (!entry[k++] && k < npy);
            continue;
        }
        out[m++] = native[i];
    }
    while (k < npy)
        out[m++] = py[k++];
    return m;
}

/* Is f the client library's (libprofd, or the Python module profd)? */
static bool is_client_frame(const struct profile_frame *f)
{
    if (f->python)
        return f->pymodule && !strcmp(f->pymodule, "profd");
    if (f->function && !strncmp(f->function, "profd_", 6))
        return true;
    const char *base = f->module ? strrchr(f->module, '/') : NULL;
    base = base ? base + 1 : f->module;
    return base && !strncmp(base, "libprofd.so", 11);
}

/* A transaction boundary's sample is taken inside the client library's call: the profile
 * shows it at the application's call site, without the library's frames and what they
 * called (the system call that sent the request, say). frames: leaf first; returns the new
 * count. */
static size_t at_call_site(const struct profile *p, uint32_t *frames, size_t m)
{
    size_t cut = 0; /* frames [0, cut) go: up to the outermost client frame */
    for (size_t i = 0; i < m; i++)
        if (is_client_frame(&p->frames[frames[i]]))
            cut = i + 1;
    if (!cut || cut == m)
        return m; /* none, or nothing of the application's would be left */
    memmove(frames, frames + cut, (m - cut) * sizeof(*frames));
    return m - cut;
}

/* Samples, and the threads they name. Samples with a lost stack are dropped. */
static void profile_samples(const struct slice_job *job, struct profile *p)
{
    p->samples = xmalloc((job->nsamples ? job->nsamples : 1) * sizeof(*p->samples));
    p->threads = NULL;
    size_t cap_threads = 0;
    for (size_t i = 0; i < job->nsamples; i++) {
        const struct ring_entry *e = &job->samples[i];
        if (e->stack == STACK_NONE)
            continue;
        struct profile_sample *s = &p->samples[p->nsamples++];
        s->t_ns = e->t_ns;
        s->tid = e->tid;
        s->stack = e->stack;
        s->txn_path = job->sample_path ? job->sample_path[i] : 0;
        uint32_t k = job->sample_ctx ? job->sample_ctx[i] : 0;
        s->ctx = k & ~SLICE_CTX_LATE;
        s->ctx_late = k & SLICE_CTX_LATE;
        s->path = (uint8_t)e->path;
        p->by_path[e->path]++;
        bool known = false;
        for (size_t j = p->nthreads; j-- > 0;)
            if (p->threads[j].tid == e->tid) {
                known = true;
                break;
            }
        if (known)
            continue;
        if (p->nthreads == cap_threads) {
            cap_threads = cap_threads ? cap_threads * 2 : 16;
            p->threads = xrealloc(p->threads, cap_threads * sizeof(*p->threads));
        }
        const char *name = NULL;
        for (size_t j = 0; j < job->nnames; j++)
            if (job->names[j].tid == e->tid)
                name = job->names[j].name;
        p->threads[p->nthreads].tid = e->tid;
        p->threads[p->nthreads].name = xstrdup(name ? name : job->comm);
        p->nthreads++;
    }
}

/* The thread contexts the samples name (slice_ctx's bytes: threadctx.h's). */
static void profile_ctxs(const struct slice_job *job, struct profile *p)
{
    p->by_span = job->by_span;
    p->nattr_keys = job->nattr_keys;
    p->attr_keys = xcalloc(job->nattr_keys ? job->nattr_keys : 1, sizeof(*p->attr_keys));
    for (size_t i = 0; i < job->nattr_keys; i++)
        p->attr_keys[i] = job->attr_keys[i] ? xstrdup(job->attr_keys[i]) : NULL;
    p->ctxs = xcalloc(job->nctxs ? job->nctxs : 1, sizeof(*p->ctxs));
    p->nctxs = job->nctxs;
    for (size_t i = 0; i < job->nctxs; i++) {
        const struct slice_ctx *sc = &job->ctxs[i];
        struct profile_ctx *c = &p->ctxs[i];
        if (sc->len < TCTX_KEPT)
            continue;
        memcpy(c->trace_id, sc->rec, 16);
        memcpy(c->span_id, sc->rec + 16, 8);
        c->trace_flags = sc->rec[24];
        c->attrs_len = (uint16_t)(sc->len - TCTX_KEPT);
        c->attrs = xmalloc(c->attrs_len ? c->attrs_len : 1);
        memcpy(c->attrs, sc->rec + TCTX_KEPT, c->attrs_len);
        profile_hex(c->trace_id, 16, c->trace_hex);
        profile_hex(c->span_id, 8, c->span_hex);
    }
}

/* Images: every module a frame came from, at its load address. */
static void profile_images(const struct slice_job *job, const struct builder *b,
                           struct profile *p)
{
    p->images = xcalloc(b->nmods ? b->nmods : 1, sizeof(*p->images));
    for (size_t i = 0; i < b->nmods; i++) {
        const struct module *mod = b->mods[i]->mod;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t e = 0; e < job->nepochs; e++) {
            const struct maps *m = &job->epochs[e].maps;
            for (size_t j = 0; j < m->n; j++) {
                if (m->v[j].mod != mod)
                    continue;
                uint64_t base = m->v[j].start - m->v[j].pgoff;
                if (base < lo)
                    lo = base;
                if (m->v[j].end > hi)
                    hi = m->v[j].end;
            }
        }
        struct profile_image *im = &p->images[p->nimages++];
        im->code_file = xstrdup(mod->path);
        im->build_id_len = mod->build_id_len < PROFILE_MAX_BUILD_ID ? mod->build_id_len
                                                                     : PROFILE_MAX_BUILD_ID;
        memcpy(im->build_id, mod->build_id, im->build_id_len);
        im->addr = lo;
        im->size = hi > lo ? hi - lo : 0;
    }
}

/* What p says of the job as a whole: the process, the window, how it was sampled, its
 * transactions. */
static void profile_header(const struct slice_job *job, struct profile *p)
{
    memset(p, 0, sizeof(*p));
    p->pid = job->pid;
    p->comm = xstrdup(job->comm);
    p->exe = xstrdup(job->exe);
    p->start_ns = job->start_ns;
    p->end_ns = job->end_ns;
    p->realtime_offset_ns = job->realtime_offset_ns;
    p->hz = job->hz;
    p->attach_ns = job->attach_ns;
    p->cputime = job->have_sched && job->mode == SCHED_CPUTIME;
    p->mode = job->have_sched ? xstrdup(sched_mode_name(job->mode)) : NULL;
    p->sampler = job->have_sched ? xstrdup(sampler_kind_name(job->sampler)) : NULL;
    p->period_ns = job->hz ? NS_PER_SEC / job->hz : 0;
    p->thread_ids = job->thread_ids;
    p->by_transaction = job->by_txn;
    p->ntxn_paths = job->npaths ? job->npaths : 1;
    p->txn_paths = xcalloc(p->ntxn_paths, sizeof(*p->txn_paths));
    for (size_t i = 1; i < job->npaths; i++)
        p->txn_paths[i] = xstrdup(job->paths[i]);
    p->spans = xcalloc(job->ntxns ? job->ntxns : 1, sizeof(*p->spans));
    for (size_t i = 0; i < job->ntxns; i++)
        p->spans[p->nspans++] = (struct profile_span){
            job->txns[i].tid, job->txns[i].start_ns, job->txns[i].end_ns,
            xstrdup(job->txns[i].name),
            job->txns[i].trace_id ? xstrdup(job->txns[i].trace_id) : NULL,
            job->txns[i].span_id ? xstrdup(job->txns[i].span_id) : NULL};
    p->txn.id = dup_or_null(job->txn.id);
    p->txn.name = dup_or_null(job->txn.name);
    p->txn.trace_id = dup_or_null(job->txn.trace_id);
    p->txn.active_tid = job->txn.active_tid;
    p->txn.start_ns = job->txn.start_ns;
    p->txn.end_ns = job->txn.end_ns;

}

int slice_build_profile(const struct slice_job *job, struct symbolizer *sym, struct profile *p)
{
    profile_header(job, p);
    struct builder b = {.job = job, .sym = sym, .p = p};
    size_t total_ips = 0;
    for (size_t i = 0; i < job->nstacks; i++)
        total_ips += job->stacks[i].n;
    size_t nslots = 64;
    while (nslots < total_ips * 2)
        nslots *= 2;
    b.keys = xcalloc(nslots, sizeof(*b.keys));

    p->nstacks = job->nstacks;
    p->stacks = xcalloc(job->nstacks ? job->nstacks : 1, sizeof(*p->stacks));
    uint32_t *tmp = NULL, *py = NULL;
    bool *py_entry = NULL;
    size_t cap_tmp = 0, cap_py = 0;
    for (size_t i = 0; i < job->nstacks; i++) {
        const struct slice_stack *ss = &job->stacks[i];
        size_t n = 0, npy = 0;
        for (uint16_t j = 0; j < ss->n; j++) {
            /* ips[0] is where the thread was; the rest are return addresses, looked up at
             * the call instruction (address - 1). Python frames follow the native ones. */
            struct ipkey *k = lookup_ip(&b, ss->epoch, ss->ips[j], j > 0, nslots - 1);
            if (py_is_frame(ss->ips[j])) {
                if (npy == cap_py) {
                    cap_py = cap_py ? cap_py * 2 : 64;
                    py = xrealloc(py, cap_py * sizeof(*py));
                    py_entry = xrealloc(py_entry, cap_py * sizeof(*py_entry));
                }
                py[npy] = k->first;
                py_entry[npy++] = ss->ips[j] & PY_ENTRY;
                continue;
            }
            if (n + k->count > cap_tmp) {
                cap_tmp = (n + k->count) * 2;
                tmp = xrealloc(tmp, cap_tmp * sizeof(*tmp));
            }
            for (uint32_t f = 0; f < k->count; f++)
                tmp[n++] = k->first + f;
        }
        uint32_t *frames = xmalloc((n + npy ? n + npy : 1) * sizeof(uint32_t));
        size_t m = interleave(p, tmp, n, py, py_entry, npy, frames);
        if (ss->flags & STACK_BOUNDARY)
            m = at_call_site(p, frames, m);
        p->stacks[i].n = (uint32_t)m;
        p->stacks[i].frames = frames;
    }
    free(tmp);
    free(py);
    free(py_entry);
    free(b.keys);

    profile_samples(job, p);
    profile_ctxs(job, p);
    profile_images(job, &b, p);
    free(b.mods);
    return 0;
}

/* job's output in its format, from p. */
static void slice_format(struct slice_job *job, const struct profile *p)
{
    int r;
    switch (job->format) {
    case SLICE_COLLAPSED: {
        struct strbuf sb = {0};
        r = profile_write_collapsed(p, &sb);
        if (r < 0) {
            strbuf_finish(&sb);
            job->err = r;
            break;
        }
        job->len = sb.len;
        job->data = strbuf_steal(&sb);
        break;
    }
    case SLICE_PPROF:
    case SLICE_FLAMEGRAPH: {
        struct strbuf sb = {0};
        r = job->format == SLICE_PPROF ? profile_write_pprof(p, &sb)
                                       : profile_write_flamegraph(p, &sb);
        if (r < 0) {
            strbuf_finish(&sb);
            job->err = r;
            break;
        }
        job->binary = job->format == SLICE_PPROF;
        job->len = sb.len;
        job->data = strbuf_steal(&sb);
        break;
    }
    case SLICE_SUMMARY:
        job->json = profile_to_summary(p, job->summary_limit, job->thread_filter,
                                       job->sort_total);
        if (!job->json)
            job->err = -ENOMEM;
        break;
    case SLICE_SENTRY:
    case SLICE_SENTRY_CHUNKS:
    case SLICE_SPEEDSCOPE:
        job->json = job->format == SLICE_SENTRY          ? profile_to_sentry(p)
                    : job->format == SLICE_SENTRY_CHUNKS ? profile_to_sentry_chunks(p)
                                                         : profile_to_speedscope(p);
        if (!job->json)
            job->err = -ENOMEM;
        break;
    }
}

void slice_run(struct slice_job *job, struct symbolizer *sym)
{
    uint64_t t0 = now_ns();
    if (job->warm) {
        symbolizer_begin(sym, &job->creds);
        for (size_t i = 0; i < job->nwarm; i++)
            symbolizer_prefetch(sym, job->warm[i], &job->warm_off[i], 1);
        symbolizer_begin(sym, NULL);
        job->build_ns = now_ns() - t0;
        return;
    }
    struct profile p;
    slice_tag_txns(job);
    slice_filter_contexts(job);
    if (!sym) {
        /* (worker.c's quick thread: no symbols, frames [module+0xOFF].) */
        job->symbols_pending = true;
        int r = slice_build_profile(job, NULL, &p);
        if (r < 0) {
            job->err = r;
            return;
        }
        job->nthreads_out = p.nthreads;
        slice_format(job, &p);
        profile_free(&p);
        job->build_ns = now_ns() - t0;
        return;
    }
    symbolizer_begin(sym, &job->creds);
    bool unread = prefetch(job, sym);
    int r = slice_build_profile(job, sym, &p);
    if (symbolizer_error(sym)[0]) {
        job->sym_error = xstrdup(symbolizer_error(sym));
    } else if (unread) {
        char why[320];
        modules_helper_error(why, sizeof(why));
        job->sym_error = xasprintf("frames left unsymbolized: their files could not be read: "
                                   "%s", why[0] ? why : "the symbolizer failed");
    }
    symbolizer_begin(sym, NULL);
    for (size_t i = 0; i < job->nsamples; i++) {
        uint32_t st = job->samples[i].stack;
        if (st != STACK_NONE && (job->stacks[st].flags & STACK_TRUNCATED))
            job->truncated++;
    }
    if (r < 0) {
        job->err = r;
        return;
    }
    job->nthreads_out = p.nthreads;
    if (job->on_profile) {
        job->on_profile(job, &p);
        profile_free(&p);
        job->build_ns = now_ns() - t0;
        return;
    }
    slice_format(job, &p);
    /* (Not for a transaction's profile: the application takes the profile alone, and the
     * worker's time is what its finish waits for.) */
    if (job->format != SLICE_SUMMARY && !job->err && !job->txn.id)
        job->summary = profile_to_summary(&p, SUMMARY_TOP, NULL, false);
    profile_free(&p);
    job->build_ns = now_ns() - t0;
}
