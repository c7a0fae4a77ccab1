/* profile_otlp.c: OpenTelemetry's profiles signal (OTLP, profiles/v1development), an
 * ExportProfilesServiceRequest as an OTLP/HTTP exporter POSTs it, encoded by protobuf-c
 * from proto/otlp_*.proto.
 *
 * - The dictionary holds what every table shares: strings, mappings (one per image, its GNU
 *   build id as the attribute process.executable.build_id.gnu), locations, functions and
 *   stacks as pprof has them (profile_tables.h), the samples' attributes (thread.id and
 *   thread.name) and links; entry 0 of each table is its zero entry.
 * - One ResourceProfiles (the process: service.name, host.name, process.pid,
 *   process.executable.name and .path, the caller's labels), one ScopeProfiles (profd), one
 *   Profile: sample type cpu or wall nanoseconds, its window (time_unix_nano,
 *   duration_nano), the period, a 16-byte profile_id.
 * - A Sample per (stack, thread, link) with each of its samples' real time in
 *   timestamps_unix_nano and the period as the value beside it; a sample taken inside a
 *   transaction that has a trace id links to that trace (and its span when the client gave
 *   one): the innermost such transaction open on its thread at its time; a sample that
 *   carries an OpenTelemetry thread context (read at its instant) links to its trace and
 *   span instead. */
#include "profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "otlp_service.pb-c.h"
#include "profile_tables.h"

typedef Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceRequest
    ORequest;
typedef Opentelemetry__Proto__Profiles__V1development__ProfilesDictionary ODictionary;
typedef Opentelemetry__Proto__Profiles__V1development__ResourceProfiles OResourceProfiles;
typedef Opentelemetry__Proto__Profiles__V1development__ScopeProfiles OScopeProfiles;
typedef Opentelemetry__Proto__Profiles__V1development__Profile OProfile;
typedef Opentelemetry__Proto__Profiles__V1development__Sample OSample;
typedef Opentelemetry__Proto__Profiles__V1development__Mapping OMapping;
typedef Opentelemetry__Proto__Profiles__V1development__Location OLocation;
typedef Opentelemetry__Proto__Profiles__V1development__Line OLine;
typedef Opentelemetry__Proto__Profiles__V1development__Function OFunction;
typedef Opentelemetry__Proto__Profiles__V1development__Stack OStack;
typedef Opentelemetry__Proto__Profiles__V1development__Link OLink;
typedef Opentelemetry__Proto__Profiles__V1development__ValueType OValueType;
typedef Opentelemetry__Proto__Profiles__V1development__KeyValueAndUnit OAttribute;
typedef Opentelemetry__Proto__Common__V1__AnyValue OAnyValue;
typedef Opentelemetry__Proto__Common__V1__KeyValue OKeyValue;
typedef Opentelemetry__Proto__Common__V1__InstrumentationScope OScope;
typedef Opentelemetry__Proto__Resource__V1__Resource OResource;

#define NEW(w, T, init) ((T *)new_msg((w), sizeof(T), (void (*)(void *))(init)))

struct writer {
    const struct profile *p;
    struct ptables t;
    struct arena a;
    ODictionary *d;
    size_t cap_attributes, cap_links, cap_stacks;
    uint32_t *stack_index; /* per profile stack: its stack_table index, 0: none yet */
    uint32_t *thread_attr; /* per profile thread: its thread.id attribute (+1: thread.name) */
};

static void *new_msg(struct writer *w, size_t size, void (*init)(void *))
{
    void *m = arena_alloc(&w->a, size);
    init(m);
    return m;
}

/* Append item to a table of pointers that grows (in the arena). */
static void push(struct writer *w, void ***table, size_t *n, size_t *cap, void *item)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void **t = arena_alloc(&w->a, c * sizeof(void *));
        if (*n)
            memcpy(t, *table, *n * sizeof(void *));
        *table = t;
        *cap = c;
    }
    (*table)[(*n)++] = item;
}

static OAnyValue *string_value(struct writer *w, const char *s)
{
    OAnyValue *v = NEW(w, OAnyValue, opentelemetry__proto__common__v1__any_value__init);
    v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    v->string_value = (char *)(s ? s : "");
    return v;
}

static OAnyValue *int_value(struct writer *w, int64_t n)
{
    OAnyValue *v = NEW(w, OAnyValue, opentelemetry__proto__common__v1__any_value__init);
    v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
    v->int_value = n;
    return v;
}

/* An entry of the dictionary's attribute table; returns its index. */
static int32_t attribute(struct writer *w, const char *key, OAnyValue *value)
{
    OAttribute *a = NEW(w, OAttribute,
                        opentelemetry__proto__profiles__v1development__key_value_and_unit__init);
    a->key_strindex = (int32_t)ptables_string(&w->t, key);
    a->value = value;
    push(w, (void ***)&w->d->attribute_table, &w->d->n_attribute_table, &w->cap_attributes, a);
    return (int32_t)w->d->n_attribute_table - 1;
}

/* A resource attribute (key and value strings copied into the arena). */
static OKeyValue *resource_kv(struct writer *w, const char *key, OAnyValue *value)
{
    OKeyValue *kv = NEW(w, OKeyValue, opentelemetry__proto__common__v1__key_value__init);
    size_t n = strlen(key) + 1;
    kv->key = arena_alloc(&w->a, n);
    memcpy(kv->key, key, n);
    kv->value = value;
    return kv;
}

static char *arena_str(struct writer *w, const char *s, size_t n)
{
    char *c = arena_alloc(&w->a, n + 1);
    memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

static OResource *resource(struct writer *w, const struct otlp_resource *res)
{
    const struct profile *p = w->p;
    OResource *r = NEW(w, OResource, opentelemetry__proto__resource__v1__resource__init);
    char host[256] = "";
    if (!res->host && gethostname(host, sizeof(host) - 1) < 0)
        snprintf(host, sizeof(host), "localhost");
    const char *exe = p->exe ? strrchr(p->exe, '/') : NULL;
    r->attributes = arena_alloc(&w->a, (6 + res->nlabels) * sizeof(OKeyValue *));
    r->attributes[r->n_attributes++] = resource_kv(
        w, "service.name", string_value(w, res->service ? res->service : p->comm));
    r->attributes[r->n_attributes++] = resource_kv(
        w, "host.name", string_value(w, res->host ? res->host : arena_str(w, host, strlen(host))));
    r->attributes[r->n_attributes++] = resource_kv(w, "process.pid", int_value(w, p->pid));
    r->attributes[r->n_attributes++] = resource_kv(
        w, "process.executable.name", string_value(w, exe && exe[1] ? exe + 1 : p->comm));
    if (p->exe)
        r->attributes[r->n_attributes++] = resource_kv(w, "process.executable.path",
                                                       string_value(w, p->exe));
    for (size_t i = 0; i < res->nlabels; i++) {
        const char *eq = strchr(res->labels[i], '=');
        if (!eq)
            continue;
        char *key = arena_str(w, res->labels[i], (size_t)(eq - res->labels[i]));
        r->attributes[r->n_attributes++] = resource_kv(w, key, string_value(w, eq + 1));
    }
    return r;
}

/* The mapping table: the zero entry, then one per image (index = image + 1). */
static void mappings(struct writer *w)
{
    const struct profile *p = w->p;
    ODictionary *d = w->d;
    d->mapping_table = arena_alloc(&w->a, (p->nimages + 1) * sizeof(OMapping *));
    d->mapping_table[d->n_mapping_table++] =
        NEW(w, OMapping, opentelemetry__proto__profiles__v1development__mapping__init);
    for (size_t i = 0; i < p->nimages; i++) {
        const struct profile_image *im = &p->images[i];
        OMapping *m = NEW(w, OMapping, opentelemetry__proto__profiles__v1development__mapping__init);
        m->memory_start = im->addr;
        m->memory_limit = im->addr + im->size;
        m->filename_strindex = (int32_t)ptables_string(&w->t, im->code_file);
        if (im->build_id_len) {
            char hex[2 * PROFILE_MAX_BUILD_ID + 1];
            ptables_build_id(im, hex);
            m->attribute_indices = arena_alloc(&w->a, sizeof(int32_t));
            m->attribute_indices[m->n_attribute_indices++] = attribute(
                w, "process.executable.build_id.gnu",
                string_value(w, arena_str(w, hex, strlen(hex))));
        }
        d->mapping_table[d->n_mapping_table++] = m;
    }
}

/* The stack_table index of profile stack s (added on first use). */
static int32_t stack_index(struct writer *w, uint32_t s)
{
    if (w->stack_index[s])
        return (int32_t)w->stack_index[s];
    OStack *st = NEW(w, OStack, opentelemetry__proto__profiles__v1development__stack__init);
    uint64_t *ids = arena_alloc(&w->a, (w->p->stacks[s].n + 1) * sizeof(uint64_t));
    uint32_t n = ptables_stack(&w->t, s, ids);
    st->location_indices = arena_alloc(&w->a, (n + 1) * sizeof(int32_t));
    for (uint32_t i = 0; i < n; i++)
        st->location_indices[st->n_location_indices++] = (int32_t)ids[i];
    push(w, (void ***)&w->d->stack_table, &w->d->n_stack_table, &w->cap_stacks, st);
    w->stack_index[s] = (uint32_t)w->d->n_stack_table - 1;
    return (int32_t)w->stack_index[s];
}

/* The locations and functions the stacks named: the zero entries, then by id. */
static void locations(struct writer *w)
{
    const struct ptables *t = &w->t;
    ODictionary *d = w->d;
    d->location_table = arena_alloc(&w->a, (t->nlocations + 1) * sizeof(OLocation *));
    d->location_table[d->n_location_table++] =
        NEW(w, OLocation, opentelemetry__proto__profiles__v1development__location__init);
    for (size_t i = 0; i < t->nlocations; i++) {
        const struct ptab_location *l = &t->locations[i];
        OLocation *loc =
            NEW(w, OLocation, opentelemetry__proto__profiles__v1development__location__init);
        loc->mapping_index = (int32_t)l->mapping;
        loc->address = l->address;
        loc->lines = arena_alloc(&w->a, (l->nlines + 1) * sizeof(OLine *));
        for (uint32_t k = 0; k < l->nlines; k++) {
            OLine *ln = NEW(w, OLine, opentelemetry__proto__profiles__v1development__line__init);
            ln->function_index = (int32_t)t->lines[l->line0 + k].function;
            ln->line = t->lines[l->line0 + k].line;
            loc->lines[loc->n_lines++] = ln;
        }
        d->location_table[d->n_location_table++] = loc;
    }
    d->function_table = arena_alloc(&w->a, (t->nfunctions + 1) * sizeof(OFunction *));
    d->function_table[d->n_function_table++] =
        NEW(w, OFunction, opentelemetry__proto__profiles__v1development__function__init);
    for (size_t i = 0; i < t->nfunctions; i++) {
        OFunction *f =
            NEW(w, OFunction, opentelemetry__proto__profiles__v1development__function__init);
        f->name_strindex = f->system_name_strindex = (int32_t)t->functions[i].name;
        f->filename_strindex = (int32_t)t->functions[i].file;
        d->function_table[d->n_function_table++] = f;
    }
}

/* hex (exactly 2n digits) into out[n]; false if it is not that, or all zero. */
static bool unhex(const char *hex, uint8_t *out, size_t n)
{
    if (!hex || strlen(hex) != 2 * n)
        return false;
    uint8_t any = 0;
    for (size_t i = 0; i < n; i++) {
        int a = profile_hexval(hex[2 * i]), b = profile_hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0)
            return false;
        out[i] = (uint8_t)(a << 4 | b);
        any |= out[i];
    }
    return any != 0;
}

/* The link_table index of each span with a valid trace id (0: none), in spans' order. */
static uint32_t *links(struct writer *w)
{
    const struct profile *p = w->p;
    uint32_t *idx = arena_alloc(&w->a, (p->nspans + 1) * sizeof(uint32_t));
    memset(idx, 0, (p->nspans + 1) * sizeof(uint32_t));
    ODictionary *d = w->d;
    push(w, (void ***)&d->link_table, &d->n_link_table, &w->cap_links,
         NEW(w, OLink, opentelemetry__proto__profiles__v1development__link__init));
    for (size_t i = 0; i < p->nspans; i++) {
        uint8_t *trace = arena_alloc(&w->a, 16), *span = arena_alloc(&w->a, 8);
        if (!unhex(p->spans[i].trace_id, trace, 16))
            continue;
        OLink *l = NEW(w, OLink, opentelemetry__proto__profiles__v1development__link__init);
        l->trace_id = (ProtobufCBinaryData){16, trace};
        if (unhex(p->spans[i].span_id, span, 8))
            l->span_id = (ProtobufCBinaryData){8, span};
        push(w, (void ***)&d->link_table, &d->n_link_table, &w->cap_links, l);
        idx[i] = (uint32_t)d->n_link_table - 1;
    }
    return idx;
}

/* The link_table index of each thread context the samples carry (its trace and span, read
 * at the sample: threadctx.h), in ctxs' order. */
static uint32_t *ctx_links(struct writer *w)
{
    const struct profile *p = w->p;
    uint32_t *idx = arena_alloc(&w->a, (p->nctxs + 1) * sizeof(uint32_t));
    ODictionary *d = w->d;
    for (size_t i = 0; i < p->nctxs; i++) {
        OLink *l = NEW(w, OLink, opentelemetry__proto__profiles__v1development__link__init);
        uint8_t *ids = arena_alloc(&w->a, 24);
        memcpy(ids, p->ctxs[i].trace_id, 16);
        memcpy(ids + 16, p->ctxs[i].span_id, 8);
        l->trace_id = (ProtobufCBinaryData){16, ids};
        l->span_id = (ProtobufCBinaryData){8, ids + 16};
        push(w, (void ***)&d->link_table, &d->n_link_table, &w->cap_links, l);
        idx[i] = (uint32_t)d->n_link_table - 1;
    }
    return idx;
}

/* The link of a sample: the innermost span with a trace open on its thread at its time. */
static uint32_t link_of(const struct profile *p, const uint32_t *link, int32_t tid, uint64_t t)
{
    uint32_t best = 0;
    uint64_t best_start = 0;
    for (size_t i = 0; i < p->nspans; i++) {
        const struct profile_span *s = &p->spans[i];
        if (link[i] && s->tid == tid && s->start_ns <= t && t <= s->end_ns &&
            (!best || s->start_ns >= best_start)) {
            best = link[i];
            best_start = s->start_ns;
        }
    }
    return best;
}

/* thread.id and thread.name of profile thread i's tid: two attributes, the first's index. */
static uint32_t thread_attributes(struct writer *w, int32_t tid)
{
    const struct profile *p = w->p;
    size_t i = 0;
    while (i < p->nthreads && p->threads[i].tid != tid)
        i++;
    if (i < p->nthreads && w->thread_attr[i])
        return w->thread_attr[i];
    uint32_t first = (uint32_t)attribute(w, "thread.id", int_value(w, tid));
    const char *name = i < p->nthreads ? p->threads[i].name : NULL;
    attribute(w, "thread.name", string_value(w, name ? name : (p->comm ? p->comm : "")));
    if (i < p->nthreads)
        w->thread_attr[i] = first;
    return first;
}

struct key {
    uint32_t stack, link;
    int32_t tid;
    uint64_t t;
};

static int cmp_key(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->link != y->link)
        return x->link < y->link ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

static OSample *sample(struct writer *w, const struct key *k, size_t n)
{
    const struct profile *p = w->p;
    OSample *s = NEW(w, OSample, opentelemetry__proto__profiles__v1development__sample__init);
    s->stack_index = stack_index(w, k->stack);
    s->link_index = (int32_t)k->link;
    uint32_t ta = thread_attributes(w, k->tid);
    s->attribute_indices = arena_alloc(&w->a, 2 * sizeof(int32_t));
    s->attribute_indices[s->n_attribute_indices++] = (int32_t)ta;
    s->attribute_indices[s->n_attribute_indices++] = (int32_t)ta + 1;
    s->values = arena_alloc(&w->a, n * sizeof(int64_t));
    s->timestamps_unix_nano = arena_alloc(&w->a, n * sizeof(uint64_t));
    for (size_t i = 0; i < n; i++) {
        s->values[s->n_values++] = (int64_t)p->period_ns;
        s->timestamps_unix_nano[s->n_timestamps_unix_nano++] =
            (uint64_t)((int64_t)k[i].t + p->realtime_offset_ns);
    }
    return s;
}

static void samples(struct writer *w, OProfile *pr)
{
    const struct profile *p = w->p;
    uint32_t *link = links(w), *ctx_link = ctx_links(w);
    struct key *keys = xmalloc((p->nsamples ? p->nsamples : 1) * sizeof(*keys));
    size_t nkeys = 0;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack < p->nstacks)
            keys[nkeys++] = (struct key){s->stack,
                                         /* its thread context's, else its transaction's */
                                         s->ctx && s->ctx <= p->nctxs
                                             ? ctx_link[s->ctx - 1]
                                             : link_of(p, link, s->tid, s->t_ns),
                                         s->tid, s->t_ns};
    }
    sort_array(keys, nkeys, sizeof(*keys), cmp_key);
    pr->samples = arena_alloc(&w->a, (nkeys + 1) * sizeof(OSample *));
    for (size_t i = 0; i < nkeys;) {
        size_t j = i + 1;
        while (j < nkeys && keys[j].stack == keys[i].stack && keys[j].tid == keys[i].tid &&
               keys[j].link == keys[i].link)
            j++;
        pr->samples[pr->n_samples++] = sample(w, &keys[i], j - i);
        i = j;
    }
    free(keys);
}

static OProfile *profile(struct writer *w, const struct otlp_resource *res)
{
    const struct profile *p = w->p;
    OProfile *pr = NEW(w, OProfile, opentelemetry__proto__profiles__v1development__profile__init);
    const char *kind = p->cputime ? "cpu" : "wall";
    pr->sample_type =
        NEW(w, OValueType, opentelemetry__proto__profiles__v1development__value_type__init);
    pr->sample_type->type_strindex = (int32_t)ptables_string(&w->t, kind);
    pr->sample_type->unit_strindex = (int32_t)ptables_string(&w->t, "nanoseconds");
    pr->period_type = pr->sample_type;
    pr->period = (int64_t)p->period_ns;
    pr->time_unix_nano = (uint64_t)((int64_t)p->start_ns + p->realtime_offset_ns);
    pr->duration_nano = p->end_ns > p->start_ns && p->end_ns != UINT64_MAX
                            ? p->end_ns - p->start_ns : 0;
    uint8_t *id = arena_alloc(&w->a, 16);
    memcpy(id, res->profile_id, 16);
    pr->profile_id = (ProtobufCBinaryData){16, id};
    samples(w, pr);
    return pr;
}

int profile_write_otlp(const struct profile *p, const struct otlp_resource *res,
                       struct strbuf *out)
{
    struct writer w = {.p = p};
    ptables_init(&w.t, p);
    w.stack_index = xcalloc(p->nstacks + 1, sizeof(*w.stack_index));
    w.thread_attr = xcalloc(p->nthreads + 1, sizeof(*w.thread_attr));
    ORequest req;
    opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__init(&req);
    w.d = NEW(&w, ODictionary,
              opentelemetry__proto__profiles__v1development__profiles_dictionary__init);
    req.dictionary = w.d;
    /* The zero entries: of the attributes and stacks (strings, mappings, locations,
     * functions and links have theirs from their builders). */
    attribute(&w, "", NULL);
    push(&w, (void ***)&w.d->stack_table, &w.d->n_stack_table, &w.cap_stacks,
         NEW(&w, OStack, opentelemetry__proto__profiles__v1development__stack__init));
    mappings(&w);
    OResourceProfiles *rp = NEW(&w, OResourceProfiles,
                                opentelemetry__proto__profiles__v1development__resource_profiles__init);
    rp->resource = resource(&w, res);
    OScopeProfiles *sp =
        NEW(&w, OScopeProfiles, opentelemetry__proto__profiles__v1development__scope_profiles__init);
    sp->scope = NEW(&w, OScope, opentelemetry__proto__common__v1__instrumentation_scope__init);
    sp->scope->name = "profd";
    sp->scope->version = PROFD_VERSION;
    sp->profiles = arena_alloc(&w.a, sizeof(OProfile *));
    sp->profiles[sp->n_profiles++] = profile(&w, res);
    rp->scope_profiles = arena_alloc(&w.a, sizeof(OScopeProfiles *));
    rp->scope_profiles[rp->n_scope_profiles++] = sp;
    req.resource_profiles = arena_alloc(&w.a, sizeof(OResourceProfiles *));
    req.resource_profiles[req.n_resource_profiles++] = rp;
    locations(&w); /* (after the samples: their stacks named the locations) */
    w.d->string_table = w.t.strings;
    w.d->n_string_table = w.t.nstrings;
    int r = w.t.oom ? -ENOMEM : 0;
    if (!r) {
        size_t n = opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__get_packed_size(&req);
        r = strbuf_reserve(out, n ? n : 1);
        if (!r) {
            opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__pack(
                &req, (uint8_t *)out->buf + out->len);
            out->len += n;
        }
    }
    free(w.stack_index);
    free(w.thread_attr);
    arena_free(&w.a);
    ptables_finish(&w.t);
    return r;
}
