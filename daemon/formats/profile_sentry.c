/* profile_sentry.c: Sentry's sampled profile format, version "1", as relay and vroom read it.
 *
 * The format is defined by its readers: relay (relay-profiling/src/sample/v1.rs, sample/mod.rs,
 * transaction_metadata.rs, debug_image.rs, utils.rs) parses and normalizes the envelope item
 * `profile`, then Sentry (src/sentry/profiles/task.py) and vroom (sample/sample.go, and its
 * Rust port vroomrs) store it and build call trees. What relay does with a profile from here:
 *
 * - It deserializes it with serde: a field of the wrong type, a bad uuid, an address that is
 *   not a "0x..." string or a string that is not UTF-8 rejects the whole item (InvalidJson).
 *   Fields it does not know are dropped (it has no `package`, so the image path goes in
 *   `module`; `code_id` of the images is dropped too, and kept only for other readers).
 * - `platform` is free-form for version "1". We say "native" (Sentry's platform for C and
 *   C++): relay counts it as a backend profile (ProfileType::from_platform), and Sentry
 *   symbolicates server-side only cocoa, rust, javascript and node, so our frames, already
 *   symbolized here, are kept as sent. With "rust" Sentry would re-symbolicate them from
 *   uploaded debug files, and cut the two outermost frames of a stack whose second-outermost
 *   it could not name (task.py, truncate_stack_needed).
 *   vroom keeps our in_app because the frames' platform defaults to the profile's.
 * - It keeps the samples with relative_start_ns <= elapsed <= relative_end_ns of the
 *   transaction: ours spans the whole window, so every sample in the window stays.
 * - It drops idle (empty-stack) samples before a thread's first and after its last non-empty
 *   one, then every sample of a thread left with only one, and rejects the profile if none
 *   remain (NotEnoughSamples). A profile of a few seconds at the usual rates keeps thousands.
 * - It rejects a sample whose stack_id or a stack whose frame index is out of range
 *   (MalformedSamples, MalformedStacks): indices here always refer to emitted entries.
 * - It rejects the profile when its last sample is more than 30 s after the start
 *   (DurationIsTooLong), looking only at the last one: samples are sorted, and a window
 *   longer than 30 s is cut to its first 30 s here rather than lost there.
 * - It replaces the transaction name, release, environment and SDK with those of the
 *   transaction event that must travel in the same envelope (else the profile is dropped).
 * vroom then builds call trees only from the samples of transaction.active_thread_id. */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/utsname.h>
#include <time.h>

#include "containers.h"
#include "log.h"

/* relay-profiling's MAX_PROFILE_DURATION. */
#define MAX_DURATION_NS (30 * NS_PER_SEC)
#define NONE UINT32_MAX

/* A sample kept for output, with its position in p->samples to sort stably. */
struct out_sample {
    uint64_t elapsed;
    int32_t tid;
    uint32_t stack;
    size_t order;
};

/* Stack frame sequences after frame renumbering, for stack deduplication. */
struct seqs {
    const uint32_t *buf; /* all sequences, one after another */
    const size_t *off;   /* start of stack i's sequence in buf */
    const uint32_t *len;
};

/* s, or NULL when it is NULL or empty: what the output leaves out. */
static const char *nz(const char *s)
{
    return s && *s ? s : NULL;
}

/* strcmp where NULL and "" are equal (both are left out of the output) and sort first. */
static int cmp_str(const char *a, const char *b)
{
    a = nz(a);
    b = nz(b);
    if (!a || !b)
        return (a != NULL) - (b != NULL);
    return strcmp(a, b);
}

/* Order frame indices by everything the output shows of a frame, then by index: equal
 * neighbours are the same Sentry frame, and the first index of a run represents it. */
static int cmp_frame(const void *a, const void *b, void *ctx)
{
    const struct profile *p = ctx;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    const struct profile_frame *x = &p->frames[ia], *y = &p->frames[ib];
    int r;
    if ((r = cmp_str(x->function, y->function)) || (r = cmp_str(x->file, y->file)) ||
        (r = cmp_str(x->module, y->module)) || (r = cmp_str(x->pymodule, y->pymodule)))
        return r;
    int lx = x->line > 0 ? x->line : 0, ly = y->line > 0 ? y->line : 0;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->in_app != y->in_app)
        return x->in_app ? 1 : -1;
    return ia < ib ? -1 : ia > ib;
}

/* Same frame as the neighbour in cmp_frame order (the index aside). */
static bool same_frame(const struct profile *p, uint32_t ia, uint32_t ib)
{
    const struct profile_frame *x = &p->frames[ia], *y = &p->frames[ib];
    return !cmp_str(x->function, y->function) && !cmp_str(x->file, y->file) &&
           !cmp_str(x->module, y->module) && !cmp_str(x->pymodule, y->pymodule) &&
           (x->line > 0 ? x->line : 0) == (y->line > 0 ? y->line : 0) && x->addr == y->addr &&
           x->in_app == y->in_app;
}

/* Order stacks by their renumbered frame sequence, then by index. */
static int cmp_stack(const void *a, const void *b, void *ctx)
{
    const struct seqs *s = ctx;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    if (s->len[ia] != s->len[ib])
        return s->len[ia] < s->len[ib] ? -1 : 1;
    int r = memcmp(s->buf + s->off[ia], s->buf + s->off[ib], s->len[ia] * sizeof(uint32_t));
    if (r)
        return r;
    return ia < ib ? -1 : ia > ib;
}

/* Same stack as the neighbour in cmp_stack order (the index aside). */
static bool same_stack(const struct seqs *s, uint32_t ia, uint32_t ib)
{
    return s->len[ia] == s->len[ib] &&
           !memcmp(s->buf + s->off[ia], s->buf + s->off[ib], s->len[ia] * sizeof(uint32_t));
}

/* Order output samples by time, keeping the input order of equal times. */
static int cmp_sample(const void *a, const void *b)
{
    const struct out_sample *x = a, *y = b;
    if (x->elapsed != y->elapsed)
        return x->elapsed < y->elapsed ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Order thread ids numerically. */
static int cmp_tid(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* A random (version 4) uuid as 32 hex digits, the form Sentry SDKs send. Returns 0 or
 * -errno. */
static int random_uuid(char out[33])
{
    uint8_t b[16];
    return profile_random_id(b, out);
}

/* Parse a uuid given as 32 hex digits or 8-4-4-4-12 into 32 lowercase hex digits. False
 * for anything else and for the nil uuid, which relay refuses as a transaction or trace id. */
static bool parse_uuid(const char *s, char out[33])
{
    size_t len = strlen(s), n = 0;
    bool dashed = len == 36;
    if (len != 32 && !dashed)
        return false;
    bool nil = true;
    for (size_t i = 0; i < len; i++) {
        if (dashed && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-')
                return false;
            continue;
        }
        int v = profile_hexval(s[i]);
        if (v < 0)
            return false;
        nil = nil && v == 0;
        out[n++] = "0123456789abcdef"[v];
    }
    out[n] = '\0';
    return !nil;
}

/* Sentry's debug_id for an ELF file, as sentry-rust's debug_id_from_build_id computes it:
 * the first 16 bytes of the GNU build-id (zero-padded when shorter) read as a uuid whose
 * first three fields are little-endian on x86, so they are byte-swapped. */
static void debug_id_from_build_id(const uint8_t *id, size_t len, char out[37])
{
    uint8_t u[16] = {0};
    memcpy(u, id, len < sizeof(u) ? len : sizeof(u));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    static const uint8_t order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
#else
    static const uint8_t order[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#endif
    char *o = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        profile_hex(&u[order[i]], 1, o);
        o += 2;
    }
    *o = '\0';
}

/* RFC 3339 in UTC with microseconds ("2023-11-14T22:13:20.123456Z"): what chrono (relay)
 * and Go's time.Time (vroom) both parse. */
static void format_rfc3339(int64_t ns, char *out, size_t size)
{
    if (ns < 0)
        ns = 0;
    time_t sec = (time_t)(ns / (int64_t)NS_PER_SEC);
    long usec = (long)(ns % (int64_t)NS_PER_SEC / (int64_t)NS_PER_US);
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
}

/* Add a string member. Paths and thread names on Linux are bytes, but relay's parser takes
 * only UTF-8 and would reject the whole profile for one bad byte (profile_utf8). */
static bool add_text(cJSON *o, const char *key, const char *s)
{
    char *fixed = profile_utf8(s);
    bool ok = fixed && cJSON_AddStringToObject(o, key, fixed) != NULL;
    free(fixed);
    return ok;
}

/* Add item under key, or free it: the caller only learns whether it worked. */
static bool put(cJSON *o, const char *key, cJSON *item)
{
    if (!item)
        return false;
    if (!cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

/* Append item to array a, or free it. */
static bool push(cJSON *a, cJSON *item)
{
    if (!item)
        return false;
    if (!cJSON_AddItemToArray(a, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

/* Add a u64 as a JSON number written exactly: cJSON keeps numbers as doubles and prints
 * 1e15 and above in exponent form, which relay's u64 fields refuse. */
static bool add_u64(cJSON *o, const char *key, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cJSON_AddRawToObject(o, key, buf) != NULL;
}

/* A Python frame's filename as the SDK gives it (filename_for_module): the path from the
 * module's package root, "pkg/mod.py" for module "pkg.mod" in ".../pkg/mod.py"; else the
 * file's base name. */
static const char *python_filename(const struct profile_frame *f)
{
    const char *base = strrchr(f->file, '/');
    base = base ? base + 1 : f->file;
    if (!nz(f->pymodule) || !strchr(f->pymodule, '.'))
        return base;
    /* Walk back one path component per dot of the module name. */
    const char *p = base;
    for (const char *d = f->pymodule; (d = strchr(d, '.')); d++) {
        if (p == f->file)
            return base;
        const char *q = p - 1; /* the '/' before p */
        while (q > f->file && q[-1] != '/')
            q--;
        p = q;
    }
    return p;
}

/* One frame: the fields relay's sample::Frame knows. An unresolved frame has no function:
 * Sentry shows it as unknown, with its module and address. */
static cJSON *frame_json(const struct profile_frame *f)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (f->python) {
        /* As Sentry's Python SDK writes a frame (sentry_sdk/profiler.py extract_frame): the
         * function, its module, the file relative to the module's package root (filename)
         * and its absolute path, the line; no address. */
        bool ok = add_text(o, "function", nz(f->function) ? f->function : "<unknown>");
        if (nz(f->pymodule))
            ok = ok && add_text(o, "module", f->pymodule);
        if (nz(f->file)) {
            ok = ok && add_text(o, "abs_path", f->file);
            ok = ok && add_text(o, "filename", python_filename(f));
        }
        if (f->line > 0)
            ok = ok && cJSON_AddNumberToObject(o, "lineno", f->line) != NULL;
        ok = ok && cJSON_AddBoolToObject(o, "in_app", f->in_app) != NULL;
        if (!ok) {
            cJSON_Delete(o);
            return NULL;
        }
        return o;
    }
    char addr[24];
    snprintf(addr, sizeof(addr), "0x%" PRIx64, f->addr);
    bool ok = cJSON_AddStringToObject(o, "instruction_addr", addr) != NULL;
    if (nz(f->function))
        ok = ok && add_text(o, "function", f->function);
    if (nz(f->file)) {
        /* filename is what Sentry shows, abs_path the full path; a relative path from the
         * debug info (relative to its compilation directory) can only be a filename. */
        if (f->file[0] == '/') {
            const char *base = strrchr(f->file, '/') + 1;
            ok = ok && add_text(o, "abs_path", f->file);
            ok = ok && add_text(o, "filename", *base ? base : f->file);
        } else {
            ok = ok && add_text(o, "filename", f->file);
        }
    }
    if (f->line > 0)
        ok = ok && cJSON_AddNumberToObject(o, "lineno", f->line) != NULL;
    if (nz(f->module))
        ok = ok && add_text(o, "module", f->module);
    ok = ok && cJSON_AddBoolToObject(o, "in_app", f->in_app) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One debug_meta image, in the form relay's "symbolic" image takes for ELF files. */
static cJSON *image_json(const struct profile_image *im)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    char debug_id[37], code_id[2 * PROFILE_MAX_BUILD_ID + 1], addr[24];
    size_t idlen =
        im->build_id_len < PROFILE_MAX_BUILD_ID ? im->build_id_len : PROFILE_MAX_BUILD_ID;
    debug_id_from_build_id(im->build_id, idlen, debug_id);
    profile_hex(im->build_id, idlen, code_id);
    snprintf(addr, sizeof(addr), "0x%" PRIx64, im->addr);
    bool ok = cJSON_AddStringToObject(o, "type", "symbolic") != NULL;
    ok = ok && add_text(o, "code_file", im->code_file);
    ok = ok && cJSON_AddStringToObject(o, "debug_id", debug_id) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "code_id", code_id) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "image_addr", addr) != NULL;
    ok = ok && add_u64(o, "image_size", im->size);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Everything the output refers to, renumbered: samples kept, and old -> new frame and stack
 * indices (NONE for those left out). */
struct plan {
    struct out_sample *samples;
    size_t nsamples;
    uint32_t *frame_new;
    uint32_t *frame_old; /* new -> old */
    uint32_t nframes_out;
    uint32_t *stack_new;
    uint32_t *stack_old;
    uint32_t nstacks_out;
    uint32_t *seq_buf; /* renumbered frames of each used stack, one after another */
    size_t *seq_off;
    uint32_t *seq_len;
    uint64_t relative_end_ns;
};

/* Free what plan_build allocated. */
static void plan_finish(struct plan *pl)
{
    free(pl->samples);
    free(pl->frame_new);
    free(pl->frame_old);
    free(pl->stack_new);
    free(pl->stack_old);
    free(pl->seq_buf);
    free(pl->seq_off);
    free(pl->seq_len);
}

/* Number the distinct entries. On entry map[i] is NONE for an unused index, else the smallest
 * index equal to i (its representative, so map[i] <= i). On return map[i] is the new index,
 * representatives numbered in their original order, and old_of[new] their old index.
 * Returns how many there are. */
static uint32_t number_runs(uint32_t *map, uint32_t n, uint32_t *old_of)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (map[i] == NONE)
            continue;
        if (map[i] == i) {
            old_of[k] = i;
            map[i] = k++;
        } else {
            map[i] = map[map[i]]; /* the representative came earlier: already renumbered */
        }
    }
    return k;
}

/* Choose the samples (in the window, at most 30 s in, with a valid stack and a tid relay can
 * read as u64), then keep only the stacks and frames they use, merging duplicates: relay and
 * vroom index both, so equal entries would only make the item bigger and show a function
 * twice. Returns 0 or -ENOMEM. */
static int plan_build(const struct profile *p, struct plan *pl, uint64_t max_span)
{
    uint64_t start = p->start_ns, end = p->end_ns > start ? p->end_ns : start;
    uint64_t span = end - start;
    if (span > max_span)
        span = max_span;
    /* Older relays require relative_start_ns < relative_end_ns. */
    pl->relative_end_ns = span ? span : 1;

    /* Stacks hold 32-bit frame indices and samples 32-bit stack indices. */
    uint32_t nf = p->nframes > NONE ? NONE : (uint32_t)p->nframes;
    uint32_t nst = p->nstacks > NONE ? NONE : (uint32_t)p->nstacks;
    size_t ns = p->nsamples;
    pl->samples = malloc((ns ? ns : 1) * sizeof(*pl->samples));
    pl->frame_new = malloc((nf ? nf : 1) * sizeof(uint32_t));
    pl->frame_old = malloc((nf ? nf : 1) * sizeof(uint32_t));
    pl->stack_new = malloc((nst ? nst : 1) * sizeof(uint32_t));
    pl->stack_old = malloc((nst ? nst : 1) * sizeof(uint32_t));
    pl->seq_off = calloc(nst ? nst : 1, sizeof(size_t));
    pl->seq_len = calloc(nst ? nst : 1, sizeof(uint32_t));
    if (!pl->samples || !pl->frame_new || !pl->frame_old || !pl->stack_new || !pl->stack_old ||
        !pl->seq_off || !pl->seq_len)
        return -ENOMEM;

    for (size_t i = 0; i < ns; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->t_ns < start || s->t_ns - start > pl->relative_end_ns || s->stack >= nst ||
            s->tid < 0)
            continue;
        pl->samples[pl->nsamples++] = (struct out_sample){
            .elapsed = s->t_ns - start, .tid = s->tid, .stack = s->stack, .order = i};
    }
    sort_array(pl->samples, pl->nsamples, sizeof(*pl->samples), cmp_sample);

    /* Mark the stacks the samples use and the valid frames of those (0 = used). */
    for (uint32_t i = 0; i < nst; i++)
        pl->stack_new[i] = NONE;
    for (uint32_t i = 0; i < nf; i++)
        pl->frame_new[i] = NONE;
    size_t total = 0;
    for (size_t i = 0; i < pl->nsamples; i++) {
        uint32_t si = pl->samples[i].stack;
        if (pl->stack_new[si] != NONE)
            continue;
        pl->stack_new[si] = 0;
        const struct profile_stack *st = &p->stacks[si];
        for (uint32_t j = 0; st->frames && j < st->n; j++)
            if (st->frames[j] < nf) {
                pl->frame_new[st->frames[j]] = 0;
                total++;
            }
    }

    /* Frames: sort the used ones so that equal frames are neighbours, the smallest index of
     * each run first, and map each to that one. frame_old serves as scratch until numbered. */
    uint32_t *idx = pl->frame_old, n = 0;
    for (uint32_t i = 0; i < nf; i++)
        if (pl->frame_new[i] != NONE)
            idx[n++] = i;
    qsort_r(idx, n, sizeof(*idx), cmp_frame, (void *)p);
    for (uint32_t i = 0, rep = 0; i < n; i++) {
        if (i == 0 || !same_frame(p, idx[i - 1], idx[i]))
            rep = idx[i];
        pl->frame_new[idx[i]] = rep;
    }
    pl->nframes_out = number_runs(pl->frame_new, nf, pl->frame_old);

    /* Stacks: renumber their frames (dropping indices that were out of range), then merge
     * equal sequences the same way. */
    pl->seq_buf = malloc((total ? total : 1) * sizeof(uint32_t));
    if (!pl->seq_buf)
        return -ENOMEM;
    size_t off = 0;
    for (uint32_t i = 0; i < nst; i++) {
        pl->seq_off[i] = off;
        if (pl->stack_new[i] == NONE)
            continue;
        const struct profile_stack *st = &p->stacks[i];
        for (uint32_t j = 0; st->frames && j < st->n; j++)
            if (st->frames[j] < nf)
                pl->seq_buf[off++] = pl->frame_new[st->frames[j]];
        pl->seq_len[i] = (uint32_t)(off - pl->seq_off[i]);
    }
    struct seqs sq = {.buf = pl->seq_buf, .off = pl->seq_off, .len = pl->seq_len};
    uint32_t *sidx = pl->stack_old, m = 0;
    for (uint32_t i = 0; i < nst; i++)
        if (pl->stack_new[i] != NONE)
            sidx[m++] = i;
    qsort_r(sidx, m, sizeof(*sidx), cmp_stack, &sq);
    for (uint32_t i = 0, rep = 0; i < m; i++) {
        if (i == 0 || !same_stack(&sq, sidx[i - 1], sidx[i]))
            rep = sidx[i];
        pl->stack_new[sidx[i]] = rep;
    }
    pl->nstacks_out = number_runs(pl->stack_new, nst, pl->stack_old);
    return 0;
}

/* The "profile" member: samples, stacks, frames and thread_metadata. The samples' times are
 * elapsed_since_start_ns (version 1), or with t0 >= 0 (a chunk, version 2) timestamps: unix
 * seconds, the plan's start being t0. */
static cJSON *trace_json(const struct profile *p, const struct plan *pl, double t0)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON *samples = cJSON_AddArrayToObject(o, "samples");
    cJSON *stacks = cJSON_AddArrayToObject(o, "stacks");
    cJSON *frames = cJSON_AddArrayToObject(o, "frames");
    cJSON *threads = cJSON_AddObjectToObject(o, "thread_metadata");
    bool ok = samples && stacks && frames && threads;

    char buf[32];
    for (size_t i = 0; ok && i < pl->nsamples; i++) {
        const struct out_sample *s = &pl->samples[i];
        cJSON *so = cJSON_CreateObject();
        ok = push(samples, so);
        ok = ok && cJSON_AddNumberToObject(so, "stack_id", pl->stack_new[s->stack]) != NULL;
        /* Strings, as the SDKs send them: relay reads both through its
         * deserialize_number_from_string, and a string stays exact in any reader. */
        snprintf(buf, sizeof(buf), "%" PRId32, s->tid);
        ok = ok && cJSON_AddStringToObject(so, "thread_id", buf) != NULL;
        if (t0 >= 0) {
            ok = ok && cJSON_AddNumberToObject(so, "timestamp", t0 + (double)s->elapsed / 1e9);
        } else {
            snprintf(buf, sizeof(buf), "%" PRIu64, s->elapsed);
            ok = ok && cJSON_AddStringToObject(so, "elapsed_since_start_ns", buf) != NULL;
        }
    }
    for (uint32_t k = 0; ok && k < pl->nstacks_out; k++) {
        uint32_t old = pl->stack_old[k];
        cJSON *a = cJSON_CreateArray();
        ok = push(stacks, a);
        /* Leaf first, as the profile stores them and Sentry expects. */
        for (uint32_t j = 0; ok && j < pl->seq_len[old]; j++)
            ok = push(a, cJSON_CreateNumber(pl->seq_buf[pl->seq_off[old] + j]));
    }
    for (uint32_t k = 0; ok && k < pl->nframes_out; k++)
        ok = push(frames, frame_json(&p->frames[pl->frame_old[k]]));

    /* Names of the threads that have samples (relay drops the others). */
    int32_t *tids = malloc((pl->nsamples ? pl->nsamples : 1) * sizeof(*tids));
    ok = ok && tids;
    for (size_t i = 0; ok && i < pl->nsamples; i++)
        tids[i] = pl->samples[i].tid;
    if (ok)
        sort_array(tids, pl->nsamples, sizeof(*tids), cmp_tid);
    for (size_t i = 0; ok && i < pl->nsamples; i++) {
        if (i > 0 && tids[i] == tids[i - 1])
            continue;
        const char *name = profile_thread_name(p, tids[i]);
        if (!name)
            continue;
        snprintf(buf, sizeof(buf), "%" PRId32, tids[i]);
        cJSON *t = cJSON_AddObjectToObject(threads, buf);
        ok = t && add_text(t, "name", name);
    }
    free(tids);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The transaction the profile belongs to: the caller's, or else the whole window as a
 * transaction named after the process and run by its main thread (tid == pid). id and trace
 * are 32 hex digits. */
static cJSON *txn_json(const struct profile *p, const struct plan *pl, const char *id,
                       const char *trace)
{
    /* relay refuses an empty name; it puts the transaction event's in its place anyway. */
    const char *name = nz(p->txn.name);
    if (!name)
        name = nz(p->comm);
    if (!name && nz(p->exe)) {
        name = strrchr(p->exe, '/');
        name = name && name[1] ? name + 1 : p->exe;
    }
    if (!name)
        name = "profd";
    int32_t active = p->txn.id && p->txn.active_tid > 0 ? p->txn.active_tid : p->pid;

    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = cJSON_AddStringToObject(o, "id", id) != NULL;
    ok = ok && add_text(o, "name", name);
    ok = ok && cJSON_AddStringToObject(o, "trace_id", trace) != NULL;
    /* Numbers: every relay reads these as plain u64, the newer ones strings too. */
    ok = ok && add_u64(o, "active_thread_id", active > 0 ? (uint64_t)active : 0);
    /* relay keeps only the samples between these two: a look-back before a transaction of
     * the client library is part of it here (the profile says where the transaction
     * itself began, under "profd"). */
    uint64_t rs = 0, re = pl->relative_end_ns;
    if (p->txn.end_ns > p->start_ns && p->txn.end_ns - p->start_ns < re)
        re = p->txn.end_ns - p->start_ns;
    if (re == 0)
        re = 1;
    ok = ok && add_u64(o, "relative_start_ns", rs);
    ok = ok && add_u64(o, "relative_end_ns", re);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The caller's id if it is a uuid relay accepts, else a new one: a malformed id would make
 * relay reject the whole profile. */
static int pick_id(const char *given, const char *what, char out[33])
{
    if (given && parse_uuid(given, out))
        return 0;
    if (given)
        log_warn("sentry profile: %s \"%s\" is not a uuid relay accepts; using a new one", what,
                 given);
    return random_uuid(out);
}

/* Build the profile (see the comment at the top for what relay makes of it). Returns a new
 * object, or NULL with errno set: ENOMEM, or getrandom's error for the ids. */
/* Split by transaction: the transactions in the window, under "profd" (relay ignores it),
 * each with its thread and its times relative to the profile's start, clipped to the
 * window; the samples between them are that transaction's. */
/* profd's notes (relay keeps the fields it knows and drops the rest): how the samples of
 * [from, to] were taken, by path (enum sample_path), and the schedule and sampler. */
static cJSON *notes_json(const struct profile *p, uint64_t from, uint64_t to)
{
    uint64_t n[PATH_COUNT] = {0};
    for (size_t i = 0; i < p->nsamples; i++)
        if (p->samples[i].t_ns >= from && p->samples[i].t_ns <= to &&
            p->samples[i].path < PATH_COUNT)
            n[p->samples[i].path]++;
    cJSON *o = cJSON_CreateObject();
    cJSON *by = o ? cJSON_AddObjectToObject(o, "samples_by_path") : NULL;
    bool ok = by && (!p->mode || cJSON_AddStringToObject(o, "mode", p->mode)) &&
              (!p->sampler || cJSON_AddStringToObject(o, "sampler", p->sampler));
    for (unsigned i = 0; ok && i < PATH_COUNT; i++)
        ok = cJSON_AddNumberToObject(by, profile_path_name(i), (double)n[i]) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The transactions of the window, listed in o as "transactions". */
static bool add_spans(cJSON *o, const struct profile *p)
{
    cJSON *a = cJSON_AddArrayToObject(o, "transactions");
    bool ok = a != NULL;
    for (size_t i = 0; ok && i < p->nspans; i++) {
        const struct profile_span *sp = &p->spans[i];
        uint64_t s = sp->start_ns > p->start_ns ? sp->start_ns - p->start_ns : 0;
        uint64_t e = sp->end_ns < p->end_ns ? sp->end_ns : p->end_ns;
        e = e > p->start_ns ? e - p->start_ns : 0;
        cJSON *x = cJSON_CreateObject();
        ok = push(a, x);
        ok = ok && add_text(x, "name", sp->name); /* a client's bytes: UTF-8 for relay */
        ok = ok && cJSON_AddNumberToObject(x, "thread_id", sp->tid) != NULL;
        ok = ok && cJSON_AddNumberToObject(x, "relative_start_ns", (double)s) != NULL;
        ok = ok && cJSON_AddNumberToObject(x, "relative_end_ns", (double)e) != NULL;
        ok = ok && cJSON_AddBoolToObject(x, "open", sp->end_ns == UINT64_MAX) != NULL;
    }
    return ok;
}

/* profd.spans: the OpenTelemetry spans the samples ran under (their thread context, read at
 * each sample): trace and span ids, the thread, the first and last of their samples (from
 * the profile's start), how many, how many read late, and their attributes by key index.
 * Sentry keeps no per-sample label: this is where a span's share can be found. */
#define SENTRY_MAX_SPANS 1000 /* (a profile of a busy service's minute: its first ones) */
static bool add_ctx_spans(cJSON *o, const struct profile *p)
{
    struct span_seen {
        int32_t tid;
        uint64_t first, last, n, late;
    } *seen = calloc(p->nctxs, sizeof(*seen));
    if (!seen)
        return false;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (!s->ctx || s->ctx > p->nctxs)
            continue;
        struct span_seen *x = &seen[s->ctx - 1];
        if (!x->n++)
            x->first = s->t_ns, x->tid = s->tid;
        x->last = s->t_ns;
        x->late += s->ctx_late;
    }
    cJSON *a = cJSON_AddArrayToObject(o, "spans");
    bool ok = a != NULL;
    size_t listed = 0;
    for (size_t i = 0; ok && i < p->nctxs; i++) {
        const struct profile_ctx *c = &p->ctxs[i];
        const struct span_seen *x = &seen[i];
        if (!x->n)
            continue;
        if (listed++ == SENTRY_MAX_SPANS) {
            ok = cJSON_AddBoolToObject(o, "spans_truncated", true) != NULL;
            break;
        }
        cJSON *j = cJSON_CreateObject();
        ok = push(a, j);
        ok = ok && cJSON_AddStringToObject(j, "trace_id", c->trace_hex) != NULL;
        ok = ok && cJSON_AddStringToObject(j, "span_id", c->span_hex) != NULL;
        ok = ok && cJSON_AddNumberToObject(j, "thread_id", x->tid) != NULL;
        ok = ok && cJSON_AddNumberToObject(j, "relative_first_ns",
                                           (double)(x->first - p->start_ns)) != NULL;
        ok = ok && cJSON_AddNumberToObject(j, "relative_last_ns",
                                           (double)(x->last - p->start_ns)) != NULL;
        ok = ok && cJSON_AddNumberToObject(j, "samples", (double)x->n) != NULL;
        if (ok && x->late)
            ok = cJSON_AddNumberToObject(j, "read_late", (double)x->late) != NULL;
        cJSON *attrs = ok ? cJSON_AddObjectToObject(j, "attributes") : NULL;
        ok = attrs != NULL;
        for (unsigned k = 0; ok && k < 256; k++) {
            size_t len;
            const uint8_t *v = profile_ctx_attr(c, k, &len);
            if (!v)
                continue;
            char key[160], *val = strndup((const char *)v, len);
            profile_ctx_attr_name(p, k, key, sizeof(key));
            ok = val && add_text(attrs, key, val); /* a target's bytes: UTF-8 for relay */
            free(val);
        }
    }
    free(seen);
    return ok;
}

/* debug_meta.images: only images with a build-id (the debug_id is derived from it, and a
 * nil one matches no debug file); none if there are none. */
static bool add_debug_meta(cJSON *root, const struct profile *p)
{
    bool any_image = false;
    for (size_t i = 0; i < p->nimages; i++)
        any_image = any_image || (p->images[i].build_id_len > 0 && nz(p->images[i].code_file));
    if (!any_image)
        return true;
    cJSON *dm = cJSON_AddObjectToObject(root, "debug_meta");
    cJSON *images = dm ? cJSON_AddArrayToObject(dm, "images") : NULL;
    bool ok = images != NULL;
    for (size_t i = 0; ok && i < p->nimages; i++)
        if (p->images[i].build_id_len > 0 && nz(p->images[i].code_file))
            ok = push(images, image_json(&p->images[i]));
    return ok;
}

cJSON *profile_to_sentry(const struct profile *p)
{
    struct plan pl = {0};
    cJSON *root = NULL;
    char event_id[33], txn_id[33], trace_id[33], ts[48];
    struct utsname un;
    int r;

    if ((r = random_uuid(event_id)) < 0 || (r = pick_id(p->txn.id, "transaction id", txn_id)) < 0 ||
        (r = pick_id(p->txn.trace_id, "trace id", trace_id)) < 0)
        goto fail;
    r = -ENOMEM;
    if (plan_build(p, &pl, MAX_DURATION_NS) < 0)
        goto fail;
    if (uname(&un) < 0) {
        snprintf(un.release, sizeof(un.release), "unknown");
        snprintf(un.machine, sizeof(un.machine), "unknown");
    }
    format_rfc3339((int64_t)p->start_ns + p->realtime_offset_ns, ts, sizeof(ts));

    root = cJSON_CreateObject();
    if (!root)
        goto fail;
    bool ok = cJSON_AddStringToObject(root, "version", "1") != NULL;
    ok = ok && cJSON_AddStringToObject(root, "event_id", event_id) != NULL;
    ok = ok && cJSON_AddStringToObject(root, "platform", "native") != NULL;
    ok = ok && cJSON_AddStringToObject(root, "timestamp", ts) != NULL;
    cJSON *os = ok ? cJSON_AddObjectToObject(root, "os") : NULL;
    ok = os && cJSON_AddStringToObject(os, "name", "Linux") != NULL;
    ok = ok && add_text(os, "version", un.release);
    cJSON *dev = ok ? cJSON_AddObjectToObject(root, "device") : NULL;
    ok = dev && add_text(dev, "architecture", un.machine);
    /* No "runtime": a native program has none (relay's needs a name and a version, and the
     * C library we could name is the daemon's, not necessarily the target's). */
    ok = ok && put(root, "transaction", txn_json(p, &pl, txn_id, trace_id));

    ok = ok && add_debug_meta(root, p);
    ok = ok && put(root, "profile", trace_json(p, &pl, -1));
    cJSON *notes = ok ? notes_json(p, p->start_ns, p->end_ns) : NULL;
    ok = ok && put(root, "profd", notes);
    if (ok && p->by_transaction)
        ok = add_spans(notes, p);
    if (ok && p->nctxs)
        ok = add_ctx_spans(notes, p);
    if (!ok)
        goto fail;
    plan_finish(&pl);
    return root;

fail:
    cJSON_Delete(root);
    plan_finish(&pl);
    errno = -r;
    return NULL;
}

/* A chunk's length: the SDKs send one a minute; relay takes up to 66 s. */
#define CHUNK_NS (60 * NS_PER_SEC)

/* The profiler session's id: the same for every slice of one attach of one process, so that
 * the chunks of successive slices join up as one continuous profile. */
static void profiler_id(const struct profile *p, char out[33])
{
    char seed[96];
    int n = snprintf(seed, sizeof(seed), "profd %d %" PRIu64 " %" PRId64, (int)p->pid,
                     p->attach_ns, p->realtime_offset_ns / (int64_t)NS_PER_SEC);
    uint64_t a = hash_bytes(seed, (size_t)n), b = hash_bytes(seed, (size_t)n - 1) ^ a * 31;
    uint8_t u[16];
    for (int i = 0; i < 8; i++) {
        u[i] = (uint8_t)(a >> (8 * i));
        u[8 + i] = (uint8_t)(b >> (8 * i));
    }
    u[6] = (u[6] & 0x0f) | 0x40; /* a version 4 uuid's form */
    u[8] = (u[8] & 0x3f) | 0x80;
    profile_hex(u, 16, out);
}

static cJSON *chunk_json(const struct profile *p, const char *profiler, bool python)
{
    struct plan pl = {0};
    char chunk_id[33];
    cJSON *o = NULL;
    if (random_uuid(chunk_id) < 0 || plan_build(p, &pl, CHUNK_NS - 1) < 0)
        goto fail;
    if (!pl.nsamples) { /* relay: NotEnoughSamples; no chunk for an empty minute */
        plan_finish(&pl);
        errno = 0;
        return NULL;
    }
    o = cJSON_CreateObject();
    cJSON *sdk = o ? cJSON_AddObjectToObject(o, "client_sdk") : NULL;
    bool ok = sdk && cJSON_AddStringToObject(sdk, "name", "profd") &&
              cJSON_AddStringToObject(sdk, "version", PROFD_VERSION);
    ok = ok && cJSON_AddStringToObject(o, "version", "2");
    ok = ok && cJSON_AddStringToObject(o, "chunk_id", chunk_id);
    ok = ok && cJSON_AddStringToObject(o, "profiler_id", profiler);
    ok = ok && cJSON_AddStringToObject(o, "platform", python ? "python" : "native");
    ok = ok && cJSON_AddStringToObject(o, "release", "");
    ok = ok && add_debug_meta(o, p);
    double t0 = ((double)p->start_ns + (double)p->realtime_offset_ns) / 1e9;
    ok = ok && put(o, "profile", trace_json(p, &pl, t0));
    ok = ok && put(o, "profd", notes_json(p, p->start_ns, p->end_ns));
    plan_finish(&pl);
    if (ok)
        return o;
fail:
    plan_finish(&pl);
    cJSON_Delete(o);
    errno = ENOMEM;
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The window in chunks of CHUNK_NS from its start, only those that have samples. */
cJSON *profile_to_sentry_chunks(const struct profile *p)
{
    char profiler[33];
    if (p->profiler_id && strlen(p->profiler_id) == 32)
        memcpy(profiler, p->profiler_id, sizeof(profiler));
    else
        profiler_id(p, profiler);
    bool python = false;
    for (size_t i = 0; i < p->nframes && !python; i++)
        python = p->frames[i].python;
    uint64_t *times = malloc((p->nsamples ? p->nsamples : 1) * sizeof(*times));
    cJSON *a = times ? cJSON_CreateArray() : NULL;
    size_t n = 0;
    for (size_t i = 0; a && i < p->nsamples; i++)
        if (p->samples[i].t_ns >= p->start_ns)
            times[n++] = p->samples[i].t_ns;
    sort_array(times, n, sizeof(*times), cmp_u64);
    for (size_t i = 0; a && i < n;) {
        struct profile sub = *p;
        sub.start_ns = p->start_ns + (times[i] - p->start_ns) / CHUNK_NS * CHUNK_NS;
        sub.end_ns = sub.start_ns > UINT64_MAX - (CHUNK_NS - 1) ? UINT64_MAX
                                                                : sub.start_ns + CHUNK_NS - 1;
        cJSON *c = chunk_json(&sub, profiler, python);
        if ((!c && errno) || (c && !push(a, c))) {
            cJSON_Delete(a);
            a = NULL;
        }
        while (i < n && times[i] <= sub.end_ns)
            i++;
    }
    free(times);
    return a;
}
