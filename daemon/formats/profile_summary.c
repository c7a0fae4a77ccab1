/* profile_summary.c: where the time went, as `perf report`'s and `py-spy top`'s tables show
 * it: functions by self samples (the leaf) and total samples (anywhere on the stack, once
 * per sample however often it recurs), and the threads by samples.
 *
 * Functions are named as collapsed output names the frames (profile_frame_name, with _[i]
 * after an inlined function and _[j] after a JIT one), so the summary matches the file. */
#include "profile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "containers.h"

struct fn {
    const char *name; /* interned */
    uint64_t self, total;
    uint32_t seen;    /* the last stack (+1) that counted it in total */
};

struct thr {
    int32_t tid;
    uint64_t n;
};

static int by_self(const void *a, const void *b)
{
    const struct fn *x = a, *y = b;
    if (x->self != y->self)
        return x->self < y->self ? 1 : -1;
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1;
    return strcmp(x->name, y->name);
}

static int by_total(const void *a, const void *b)
{
    const struct fn *x = a, *y = b;
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1;
    return by_self(a, b);
}

static int by_samples(const void *a, const void *b)
{
    const struct thr *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

/* Does thread tid pass the filter (a tid, or part of the thread's name)? */
static bool wanted(const struct profile *p, int32_t tid, const char *filter)
{
    if (!filter || !*filter)
        return true;
    char num[16];
    snprintf(num, sizeof(num), "%" PRId32, tid);
    if (!strcmp(num, filter))
        return true;
    const char *name = profile_thread_name(p, tid);
    return name && strstr(name, filter);
}

/* thr holds one entry of n 1 per sample: made one per thread with its count, the busiest
 * first. Returns the threads' number. */
static size_t thread_counts(struct thr *thr, size_t nthr)
{
    sort_array(thr, nthr, sizeof(*thr), by_samples); /* all n == 1: by tid */
    size_t nt = 0;
    for (size_t i = 0; i < nthr; i++) {
        if (nt && thr[nt - 1].tid == thr[i].tid)
            thr[nt - 1].n++;
        else
            thr[nt++] = thr[i];
    }
    sort_array(thr, nt, sizeof(*thr), by_samples);
    return nt;
}

/* The threads' entries (tid, name, samples) into ta. */
static bool add_threads(const struct profile *p, cJSON *ta, const struct thr *thr, size_t nt)
{
    bool ok = true;
    for (size_t i = 0; ok && i < nt; i++) {
        cJSON *t = cJSON_CreateObject();
        const char *tn = profile_thread_name(p, thr[i].tid);
        char *u = profile_utf8(tn ? tn : "");
        ok = t && cJSON_AddItemToArray(ta, t) &&
             cJSON_AddNumberToObject(t, "tid", thr[i].tid) && u &&
             cJSON_AddStringToObject(t, "name", u) &&
             cJSON_AddNumberToObject(t, "samples", (double)thr[i].n);
        free(u);
    }
    return ok;
}

cJSON *profile_to_summary(const struct profile *p, size_t limit, const char *thread_filter,
                          bool sort_total)
{
    struct strset names = {0};
    struct u64map index = {0}; /* interned name -> fn index + 1 */
    struct fn *fns = NULL;
    size_t nfns = 0, cap = 0;
    uint32_t *fn_of = xcalloc(p->nframes ? p->nframes : 1, sizeof(*fn_of)); /* frame -> fn+1 */
    uint64_t *per_stack = xcalloc(p->nstacks ? p->nstacks : 1, sizeof(*per_stack));
    struct thr *thr = xmalloc((p->nsamples ? p->nsamples : 1) * sizeof(*thr));
    size_t nthr = 0;
    uint64_t samples = 0, by_path[PATH_COUNT] = {0};
    struct strbuf sb = {0};

    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack >= p->nstacks || !wanted(p, s->tid, thread_filter))
            continue;
        per_stack[s->stack]++;
        samples++;
        by_path[s->path < PATH_COUNT ? s->path : PATH_PERF]++;
        thr[nthr++] = (struct thr){s->tid, 1};
    }
    for (uint32_t st = 0; st < p->nstacks; st++) {
        if (!per_stack[st])
            continue;
        const struct profile_stack *k = &p->stacks[st];
        for (uint32_t j = 0; k->frames && j < k->n; j++) {
            uint32_t fi = k->frames[j];
            if (fi >= p->nframes)
                continue;
            if (!fn_of[fi]) {
                const struct profile_frame *f = &p->frames[fi];
                sb.len = 0;
                bool named = !f->python && f->function && *f->function;
                if (profile_frame_name(&sb, f) < 0 ||
                    (named && f->jit && strbuf_puts(&sb, "_[j]") < 0) ||
                    (named && !f->jit && f->inlined && strbuf_puts(&sb, "_[i]") < 0))
                    continue;
                const char *name = strset_intern(&names, sb.buf, sb.len);
                uintptr_t x = (uintptr_t)u64map_get(&index, (uint64_t)(uintptr_t)name);
                if (!x) {
                    if (nfns == cap) {
                        cap = cap ? cap * 2 : 64;
                        fns = xrealloc(fns, cap * sizeof(*fns));
                    }
                    fns[nfns] = (struct fn){.name = name};
                    x = ++nfns;
                    u64map_put(&index, (uint64_t)(uintptr_t)name, (void *)x);
                }
                fn_of[fi] = (uint32_t)x;
            }
            struct fn *fn = &fns[fn_of[fi] - 1];
            if (j == 0)
                fn->self += per_stack[st];
            if (fn->seen != st + 1) {
                fn->seen = st + 1;
                fn->total += per_stack[st];
            }
        }
    }
    if (nfns)
        sort_array(fns, nfns, sizeof(*fns), sort_total ? by_total : by_self);

    size_t nt = thread_counts(thr, nthr);

    cJSON *o = cJSON_CreateObject(), *fa = NULL, *ta = NULL, *pa = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "samples", (double)samples) &&
              (!p->mode || cJSON_AddStringToObject(o, "mode", p->mode)) &&
              (!p->sampler || cJSON_AddStringToObject(o, "sampler", p->sampler)) &&
              (pa = cJSON_AddObjectToObject(o, "paths")) &&
              (fa = cJSON_AddArrayToObject(o, "functions")) &&
              (ta = cJSON_AddArrayToObject(o, "threads"));
    for (unsigned i = 0; ok && i < PATH_COUNT; i++)
        ok = cJSON_AddNumberToObject(pa, profile_path_name(i), (double)by_path[i]);
    for (size_t i = 0; ok && i < nfns && (!limit || i < limit); i++) {
        cJSON *f = cJSON_CreateObject();
        char *u = profile_utf8(fns[i].name);
        ok = f && cJSON_AddItemToArray(fa, f) && u && cJSON_AddStringToObject(f, "name", u) &&
             cJSON_AddNumberToObject(f, "self", (double)fns[i].self) &&
             cJSON_AddNumberToObject(f, "total", (double)fns[i].total);
        free(u);
    }
    ok = ok && add_threads(p, ta, thr, nt);
    strbuf_finish(&sb);
    free(thr);
    free(per_stack);
    free(fn_of);
    free(fns);
    u64map_finish(&index);
    strset_finish(&names);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
