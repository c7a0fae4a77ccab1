/* profile_speedscope.c: speedscope's file format (its file-format-schema.json), as its
 * importer reads it.
 *
 * - "$schema" exactly "https://www.speedscope.app/file-format-schema.json": the importer
 *   recognises the format by it.
 * - shared.frames: one per function (name and file), as a flame graph merges them (a
 *   frame per line would split a function into one per line), with the first of its
 *   lines the samples have.
 * - A sampled profile per thread, its samples in time order (root first, as speedscope
 *   wants them), each weighing the sampling period in nanoseconds; then a profile per
 *   transaction in the window, the samples of its thread between its start and its end,
 *   named after it, so that a transaction can be looked at alone. */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "containers.h"

#define SCHEMA "https://www.speedscope.app/file-format-schema.json"

struct ss {
    const struct profile *p;
    cJSON *frames;             /* shared.frames */
    uint32_t *frame_of;        /* profile frame -> speedscope frame + 1 */
    struct u64map by_key;      /* hash(name, file) -> speedscope frame + 1 */
    char **keys;               /* per speedscope frame: "name\0file" as hashed */
    size_t *key_len;
    cJSON **obj;               /* per speedscope frame: its object, for its line */
    uint32_t n;
    bool oom;
};

static bool add_str(cJSON *o, const char *key, const char *s)
{
    char *u = profile_utf8(s);
    bool ok = u && cJSON_AddStringToObject(o, key, u);
    free(u);
    return ok;
}

/* The speedscope frame of profile frame fi. */
static uint32_t frame_id(struct ss *s, uint32_t fi)
{
    if (s->frame_of[fi])
        return s->frame_of[fi] - 1;
    const struct profile_frame *f = &s->p->frames[fi];
    struct strbuf name = {0};
    if (profile_frame_name(&name, f) < 0)
        s->oom = true;
    const char *file = f->file ? f->file : "";
    size_t nl = name.len, len = nl + 1 + strlen(file);
    char *key = xmalloc(len + 1);
    memcpy(key, name.buf ? name.buf : "", nl);
    key[nl] = '\0';
    strcpy(key + nl + 1, file);
    uint64_t h = hash_bytes(key, len);
    uint32_t id = UINT32_MAX;
    for (uint64_t k = h;; k++) { /* collisions: the next key */
        uintptr_t v = (uintptr_t)u64map_get(&s->by_key, k);
        if (!v)
            break;
        if (s->key_len[v - 1] == len && !memcmp(s->keys[v - 1], key, len)) {
            id = (uint32_t)(v - 1);
            break;
        }
    }
    if (id == UINT32_MAX) {
        uint64_t k = h;
        while (u64map_get(&s->by_key, k))
            k++;
        id = s->n++;
        s->keys = xrealloc(s->keys, s->n * sizeof(*s->keys));
        s->key_len = xrealloc(s->key_len, s->n * sizeof(*s->key_len));
        s->obj = xrealloc(s->obj, s->n * sizeof(*s->obj));
        s->obj[id] = NULL;
        s->keys[id] = key;
        s->key_len[id] = len;
        key = NULL;
        u64map_put(&s->by_key, k, (void *)(uintptr_t)(id + 1));
        cJSON *o = cJSON_CreateObject();
        bool ok = o && cJSON_AddItemToArray(s->frames, o);
        if (!ok)
            cJSON_Delete(o);
        ok = ok && add_str(o, "name", name.buf ? name.buf : "");
        if (ok && f->file && *f->file)
            ok = add_str(o, "file", f->file);
        s->obj[id] = ok ? o : NULL;
        s->oom = s->oom || !ok;
    }
    /* Its line: the first of the function's lines the profile has (the samples' lines,
     * merged as the frame merges them; speedscope shows file:line beside the name). */
    cJSON *o = s->obj[id];
    if (o && f->line > 0) {
        cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "line");
        if (!l)
            s->oom = s->oom || !cJSON_AddNumberToObject(o, "line", f->line);
        else if (f->line < l->valueint)
            cJSON_SetNumberValue(l, f->line);
    }
    free(key);
    strbuf_finish(&name);
    s->frame_of[fi] = id + 1;
    return id;
}

/* A sampled profile of thread tid's samples in [from, to]; NULL if it has none. */
static cJSON *sampled(struct ss *s, int32_t tid, uint64_t from, uint64_t to, uint32_t ctx,
                      const char *name)
{
    const struct profile *p = s->p;
    /* A sample weighs the sampling period; with none known, it counts as one. */
    uint64_t weight = p->period_ns ? p->period_ns : 1;
    cJSON *prof = cJSON_CreateObject(), *samples = NULL, *weights = NULL;
    bool ok = prof && cJSON_AddStringToObject(prof, "type", "sampled") &&
              add_str(prof, "name", name) &&
              cJSON_AddStringToObject(prof, "unit", p->period_ns ? "nanoseconds" : "none") &&
              cJSON_AddNumberToObject(prof, "startValue", 0) &&
              (samples = cJSON_AddArrayToObject(prof, "samples")) &&
              (weights = cJSON_AddArrayToObject(prof, "weights"));
    uint64_t total = 0;
    for (size_t i = 0; ok && i < p->nsamples; i++) {
        const struct profile_sample *x = &p->samples[i];
        /* (A span's profile: its samples, whatever their thread.) */
        if ((ctx ? x->ctx != ctx : x->tid != tid) || x->t_ns < from || x->t_ns > to ||
            x->stack >= p->nstacks)
            continue;
        const struct profile_stack *st = &p->stacks[x->stack];
        cJSON *a = cJSON_CreateArray();
        ok = a && cJSON_AddItemToArray(samples, a);
        if (!ok)
            cJSON_Delete(a);
        for (uint32_t k = st->frames ? st->n : 0; ok && k-- > 0;) /* root first */
            if (st->frames[k] < p->nframes)
                ok = cJSON_AddItemToArray(a, cJSON_CreateNumber(frame_id(s, st->frames[k])));
        ok = ok && cJSON_AddItemToArray(weights, cJSON_CreateNumber((double)weight));
        total += weight;
    }
    ok = ok && cJSON_AddNumberToObject(prof, "endValue", (double)total);
    if (!ok || !total) {
        s->oom = s->oom || !ok;
        cJSON_Delete(prof);
        return NULL;
    }
    return prof;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static bool push_profile(struct ss *s, cJSON *profiles, cJSON *prof)
{
    if (!prof)
        return !s->oom;
    if (!cJSON_AddItemToArray(profiles, prof)) {
        cJSON_Delete(prof);
        return false;
    }
    return true;
}

cJSON *profile_to_speedscope(const struct profile *p)
{
    struct ss s = {.p = p};
    s.frame_of = xcalloc(p->nframes ? p->nframes : 1, sizeof(*s.frame_of));
    cJSON *root = cJSON_CreateObject(), *shared = NULL, *profiles = NULL;
    char name[256];
    snprintf(name, sizeof(name), "%s (pid %d)", p->comm ? p->comm : "?", (int)p->pid);
    bool ok = root && cJSON_AddStringToObject(root, "$schema", SCHEMA) &&
              (shared = cJSON_AddObjectToObject(root, "shared")) &&
              (s.frames = cJSON_AddArrayToObject(shared, "frames")) &&
              (profiles = cJSON_AddArrayToObject(root, "profiles")) &&
              add_str(root, "name", name) &&
              cJSON_AddStringToObject(root, "exporter", "profd " PROFD_VERSION);
    /* How it was sampled: speedscope keeps what it does not read, and shows none of it. */
    struct strbuf how = {0};
    ok = ok && profile_describe_sampling(p, &how) == 0 && add_str(root, "profd", how.buf);
    strbuf_finish(&how);

    /* The threads, by tid. */
    int32_t *tids = xmalloc((p->nsamples ? p->nsamples : 1) * sizeof(*tids));
    size_t nt = 0;
    for (size_t i = 0; i < p->nsamples; i++)
        tids[nt++] = p->samples[i].tid;
    sort_array(tids, nt, sizeof(*tids), cmp_i32);
    /* Opened on the busiest thread. */
    size_t busiest = 0, most = 0, nprof = 0;
    for (size_t i = 0; ok && i < nt; i++) {
        if (i && tids[i] == tids[i - 1])
            continue;
        size_t n = 1;
        while (i + n < nt && tids[i + n] == tids[i])
            n++;
        if (n > most) {
            most = n;
            busiest = nprof;
        }
        const char *tn = profile_thread_name(p, tids[i]);
        snprintf(name, sizeof(name), "%s (tid %d)", tn && *tn ? tn : "?", (int)tids[i]);
        cJSON *prof = sampled(&s, tids[i], 0, UINT64_MAX, 0, name);
        nprof += prof != NULL;
        ok = push_profile(&s, profiles, prof);
    }
    free(tids);
    ok = ok && cJSON_AddNumberToObject(root, "activeProfileIndex", (double)busiest);
    for (size_t i = 0; ok && i < p->nspans; i++) {
        const struct profile_span *sp = &p->spans[i];
        uint64_t at = sp->start_ns > p->start_ns ? sp->start_ns - p->start_ns : 0;
        snprintf(name, sizeof(name), "transaction %.160s (tid %d, at %.3f s%s)",
                 sp->name ? sp->name : "?", (int)sp->tid, (double)at / 1e9,
                 sp->end_ns == UINT64_MAX ? ", still open" : "");
        ok = push_profile(&s, profiles, sampled(&s, sp->tid, sp->start_ns, sp->end_ns, 0, name));
    }
    /* Split by span (--by-span): a profile per OpenTelemetry span the samples carry. */
    for (size_t i = 0; ok && p->by_span && i < p->nctxs; i++) {
        const struct profile_ctx *c = &p->ctxs[i];
        size_t len;
        const uint8_t *v = profile_ctx_attr(c, 0, &len);
        snprintf(name, sizeof(name), "span %s%s%.*s (trace %s)", c->span_hex, v ? " " : "",
                 v ? (int)(len < 100 ? len : 100) : 0, v ? (const char *)v : "", c->trace_hex);
        ok = push_profile(&s, profiles, sampled(&s, 0, 0, UINT64_MAX, (uint32_t)i + 1, name));
    }
    ok = ok && !s.oom;
    for (uint32_t i = 0; i < s.n; i++)
        free(s.keys[i]);
    free(s.keys);
    free(s.key_len);
    free(s.obj);
    free(s.frame_of);
    u64map_finish(&s.by_key);
    if (!ok) {
        cJSON_Delete(root);
        errno = ENOMEM;
        return NULL;
    }
    return root;
}
