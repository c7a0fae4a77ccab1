/* profile_pprof.c: pprof's profile.proto, gzipped, as `go tool pprof` reads it.
 *
 * Encoded by protobuf-c from proto/pprof.proto (the tables it shares with OTLP:
 * profile_tables.h); zlib gzips it.
 * What the readers need (shared/formats.md): string_table[0] is "", every sample has one
 * value per sample type, location ids leaf first, no id 0, every referenced id exists,
 * period_type, period, time_nanos and duration_nanos set, mappings with their build ids.
 *
 * - Sample types: samples/count and wall/nanoseconds (cpu/nanoseconds for the cputime
 *   schedule), a sample worth the sampling period. The time is the default, as in Go's CPU
 *   profiles.
 * - A location per distinct address (per Python frame), its lines innermost inlined function
 *   first and the function they were inlined into last, as profile.proto orders them.
 * - A function per (name, file); an unresolved frame is named "[module+0xOFF]" (speedscope
 *   drops locations without a line, and pprof would otherwise show only a bare address).
 * - Labels: thread_name and thread_id on every sample, transaction (the open transactions'
 *   names, outermost first, joined by " > ") on those taken inside one; trace_id, span_id
 *   and the attributes (profile_ctx_attr_name) of a sample's OpenTelemetry thread context,
 *   and thread_context "read late" where it was read after the sample. */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "pprof.pb-c.h"
#include "profile_tables.h"

#define TCTX_NAME_BUF 160 /* (a key name: at most 128 bytes, threadctx.h) */

typedef Perftools__Profiles__Profile PProfile;
typedef Perftools__Profiles__Sample PSample;
typedef Perftools__Profiles__Label PLabel;
typedef Perftools__Profiles__Mapping PMapping;
typedef Perftools__Profiles__Location PLocation;
typedef Perftools__Profiles__Line PLine;
typedef Perftools__Profiles__Function PFunction;
typedef Perftools__Profiles__ValueType PValueType;

/* A sample key: samples with equal keys are one pprof sample. */
struct key {
    int32_t tid;
    uint32_t stack;
    uint32_t path;
    uint32_t ctx;
    bool late;
};

static int cmp_key(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    if (x->ctx != y->ctx)
        return x->ctx < y->ctx ? -1 : 1;
    if (x->late != y->late)
        return x->late < y->late ? -1 : 1;
    return x->path < y->path ? -1 : x->path > y->path;
}

struct writer {
    const struct profile *p;
    struct ptables t;
    struct arena a;
    struct strbuf path;
};

static PValueType *value_type(struct writer *w, const char *type, const char *unit)
{
    PValueType *v = arena_alloc(&w->a, sizeof(*v));
    perftools__profiles__value_type__init(v);
    v->type = ptables_string(&w->t, type);
    v->unit = ptables_string(&w->t, unit);
    return v;
}

static PLabel *label(struct writer *w, const char *key, const char *str, int64_t num)
{
    PLabel *l = arena_alloc(&w->a, sizeof(*l));
    perftools__profiles__label__init(l);
    l->key = ptables_string(&w->t, key);
    if (str)
        l->str = ptables_string(&w->t, str);
    else
        l->num = num;
    return l;
}

static PSample *sample(struct writer *w, const struct key *k, uint64_t count)
{
    const struct profile *p = w->p;
    PSample *s = arena_alloc(&w->a, sizeof(*s));
    perftools__profiles__sample__init(s);
    s->location_id = arena_alloc(&w->a, (p->stacks[k->stack].n + 1) * sizeof(uint64_t));
    s->n_location_id = ptables_stack(&w->t, k->stack, s->location_id);
    s->value = arena_alloc(&w->a, 2 * sizeof(int64_t));
    s->n_value = 2;
    s->value[0] = (int64_t)count;
    s->value[1] = (int64_t)(count * p->period_ns);
    const struct profile_ctx *c = k->ctx && k->ctx <= p->nctxs ? &p->ctxs[k->ctx - 1] : NULL;
    s->label = arena_alloc(&w->a, (6 + (c ? c->attrs_len / 2u : 0)) * sizeof(PLabel *));
    const char *tname = profile_thread_name(p, k->tid);
    s->label[s->n_label++] = label(w, "thread_name", tname && *tname ? tname
                                                     : (p->comm ? p->comm : ""), 0);
    s->label[s->n_label++] = label(w, "thread_id", NULL, k->tid);
    const char *names = k->path < p->ntxn_paths ? p->txn_paths[k->path] : NULL;
    if (names) {
        ptables_txn_path(names, &w->path);
        s->label[s->n_label++] = label(w, "transaction", w->path.buf ? w->path.buf : "", 0);
    }
    if (c) {
        s->label[s->n_label++] = label(w, "trace_id", c->trace_hex, 0);
        s->label[s->n_label++] = label(w, "span_id", c->span_hex, 0);
        /* Read after the sample (a kernel copy without the eBPF program): the thread's
         * context a little later, not necessarily the sample's. */
        if (k->late)
            s->label[s->n_label++] = label(w, "thread_context", "read late", 0);
        for (unsigned key = 0; key < 256; key++) {
            size_t len;
            const uint8_t *v = profile_ctx_attr(c, key, &len);
            if (!v)
                continue;
            char name[TCTX_NAME_BUF], *value = arena_strndup(&w->a, (const char *)v, len);
            profile_ctx_attr_name(p, key, name, sizeof(name));
            s->label[s->n_label++] = label(w, name, value, 0);
        }
    }
    return s;
}

/* The samples, one per (thread, stack, transactions). */
static void samples(struct writer *w, PProfile *pr)
{
    const struct profile *p = w->p;
    struct key *keys = xmalloc((p->nsamples ? p->nsamples : 1) * sizeof(*keys));
    size_t nkeys = 0;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack < p->nstacks)
            keys[nkeys++] = (struct key){s->tid, s->stack, s->txn_path, s->ctx, s->ctx_late};
    }
    sort_array(keys, nkeys, sizeof(*keys), cmp_key);
    pr->sample = arena_alloc(&w->a, (nkeys + 1) * sizeof(PSample *));
    for (size_t i = 0; i < nkeys;) {
        size_t j = i + 1;
        while (j < nkeys && !cmp_key(&keys[i], &keys[j]))
            j++;
        pr->sample[pr->n_sample++] = sample(w, &keys[i], j - i);
        i = j;
    }
    free(keys);
}

/* The mappings, the executable's first: pprof takes the first for the main binary. */
static void mappings(struct writer *w, PProfile *pr)
{
    const struct profile *p = w->p;
    char hex[2 * PROFILE_MAX_BUILD_ID + 1];
    size_t main = 0;
    for (size_t i = 0; i < p->nimages; i++)
        if (p->exe && p->images[i].code_file && !strcmp(p->images[i].code_file, p->exe)) {
            main = i;
            break;
        }
    pr->mapping = arena_alloc(&w->a, (p->nimages + 1) * sizeof(PMapping *));
    for (size_t k = 0; k < p->nimages; k++) {
        size_t i = k == 0 ? main : k <= main ? k - 1 : k;
        const struct profile_image *im = &p->images[i];
        PMapping *m = arena_alloc(&w->a, sizeof(*m));
        perftools__profiles__mapping__init(m);
        ptables_build_id(im, hex);
        m->id = i + 1;
        m->memory_start = im->addr;
        m->memory_limit = im->addr + im->size;
        m->filename = ptables_string(&w->t, im->code_file);
        m->build_id = ptables_string(&w->t, hex);
        /* Symbolized here: pprof must not look for the files itself. */
        m->has_functions = m->has_filenames = m->has_line_numbers = m->has_inline_frames = 1;
        pr->mapping[pr->n_mapping++] = m;
    }
}

/* The locations and functions the samples named, in id order. */
static void locations(struct writer *w, PProfile *pr)
{
    const struct ptables *t = &w->t;
    pr->location = arena_alloc(&w->a, (t->nlocations + 1) * sizeof(PLocation *));
    for (size_t i = 0; i < t->nlocations; i++) {
        const struct ptab_location *l = &t->locations[i];
        PLocation *loc = arena_alloc(&w->a, sizeof(*loc));
        perftools__profiles__location__init(loc);
        loc->id = i + 1;
        loc->mapping_id = l->mapping;
        loc->address = l->address;
        loc->line = arena_alloc(&w->a, (l->nlines + 1) * sizeof(PLine *));
        for (uint32_t k = 0; k < l->nlines; k++) {
            PLine *ln = arena_alloc(&w->a, sizeof(*ln));
            perftools__profiles__line__init(ln);
            ln->function_id = t->lines[l->line0 + k].function;
            ln->line = t->lines[l->line0 + k].line;
            loc->line[loc->n_line++] = ln;
        }
        pr->location[pr->n_location++] = loc;
    }
    pr->function = arena_alloc(&w->a, (t->nfunctions + 1) * sizeof(PFunction *));
    for (size_t i = 0; i < t->nfunctions; i++) {
        PFunction *f = arena_alloc(&w->a, sizeof(*f));
        perftools__profiles__function__init(f);
        f->id = i + 1;
        f->name = f->system_name = t->functions[i].name;
        f->filename = t->functions[i].file;
        pr->function[pr->n_function++] = f;
    }
}

int profile_write_pprof(const struct profile *p, struct strbuf *out)
{
    struct writer w = {.p = p};
    ptables_init(&w.t, p);
    PProfile pr;
    perftools__profiles__profile__init(&pr);
    const char *kind = p->cputime ? "cpu" : "wall";
    pr.sample_type = arena_alloc(&w.a, 2 * sizeof(PValueType *));
    pr.sample_type[pr.n_sample_type++] = value_type(&w, "samples", "count");
    pr.sample_type[pr.n_sample_type++] = value_type(&w, kind, "nanoseconds");
    pr.default_sample_type = ptables_string(&w.t, kind);
    pr.period_type = value_type(&w, kind, "nanoseconds");
    pr.period = (int64_t)p->period_ns;
    pr.time_nanos = (int64_t)(p->start_ns + (uint64_t)p->realtime_offset_ns);
    pr.duration_nanos = p->end_ns > p->start_ns && p->end_ns != UINT64_MAX
                            ? (int64_t)(p->end_ns - p->start_ns) : 0;
    char comment[128];
    snprintf(comment, sizeof(comment), "profd %s: process %d (%s), %u Hz", PROFD_VERSION,
             (int)p->pid, p->comm ? p->comm : "?", p->hz);
    pr.comment = arena_alloc(&w.a, 2 * sizeof(int64_t));
    pr.comment[pr.n_comment++] = ptables_string(&w.t, comment);
    struct strbuf how = {0};
    if (profile_describe_sampling(p, &how) == 0)
        pr.comment[pr.n_comment++] = ptables_string(&w.t, how.buf);
    strbuf_finish(&how);
    mappings(&w, &pr);
    samples(&w, &pr);
    locations(&w, &pr);
    pr.string_table = w.t.strings;
    pr.n_string_table = w.t.nstrings;
    int r = w.t.oom ? -ENOMEM : 0;
    size_t n = r ? 0 : perftools__profiles__profile__get_packed_size(&pr);
    uint8_t *buf = r ? NULL : malloc(n ? n : 1);
    if (!r && !buf)
        r = -ENOMEM;
    if (!r) {
        perftools__profiles__profile__pack(&pr, buf);
        r = profile_gzip(buf, n, p->gzip_level ? p->gzip_level : 6, out);
    }
    free(buf);
    strbuf_finish(&w.path);
    arena_free(&w.a);
    ptables_finish(&w.t);
    return r;
}
