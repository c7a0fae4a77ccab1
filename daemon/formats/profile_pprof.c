/* profile_pprof.c: pprof's profile.proto, gzipped, as `go tool pprof` reads it.
 *
 * The encoding is a few dozen lines of protobuf's wire format (varints and length-delimited
 * fields, as Go's own runtime/pprof writes it without a protobuf library); zlib gzips it.
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
 *   names, outermost first, joined by " > ") on those taken inside one. */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "containers.h"

/* profile.proto's field numbers. */
enum {
    P_SAMPLE_TYPE = 1, P_SAMPLE = 2, P_MAPPING = 3, P_LOCATION = 4, P_FUNCTION = 5,
    P_STRING_TABLE = 6, P_TIME_NANOS = 9, P_DURATION_NANOS = 10, P_PERIOD_TYPE = 11,
    P_PERIOD = 12, P_COMMENT = 13, P_DEFAULT_SAMPLE_TYPE = 14,
    VT_TYPE = 1, VT_UNIT = 2,
    S_LOCATION_ID = 1, S_VALUE = 2, S_LABEL = 3,
    L_KEY = 1, L_STR = 2, L_NUM = 3,
    M_ID = 1, M_START = 2, M_LIMIT = 3, M_OFFSET = 4, M_FILENAME = 5, M_BUILD_ID = 6,
    M_HAS_FUNCTIONS = 7, M_HAS_FILENAMES = 8, M_HAS_LINES = 9, M_HAS_INLINES = 10,
    LOC_ID = 1, LOC_MAPPING = 2, LOC_ADDRESS = 3, LOC_LINE = 4,
    LN_FUNCTION = 1, LN_LINE = 2,
    F_ID = 1, F_NAME = 2, F_SYSTEM_NAME = 3, F_FILENAME = 4,
};

/* A protobuf message being written; oom once an append failed (then everything is dropped). */
struct pb {
    struct strbuf sb;
    bool oom;
};

static void pb_raw(struct pb *m, const void *data, size_t n)
{
    if (n && !m->oom && strbuf_append(&m->sb, data, n) < 0)
        m->oom = true;
}

static void pb_varint(struct pb *m, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n] = v & 0x7f;
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    pb_raw(m, b, n);
}

/* A varint field; proto3 leaves zeros out. */
static void pb_u64(struct pb *m, int field, uint64_t v)
{
    if (!v)
        return;
    pb_varint(m, (uint64_t)field << 3);
    pb_varint(m, v);
}

static void pb_bytes(struct pb *m, int field, const void *data, size_t n)
{
    pb_varint(m, (uint64_t)field << 3 | 2);
    pb_varint(m, n);
    pb_raw(m, data, n);
}

/* Append the message sub as field `field` of m, and empty sub for the next one. */
static void pb_msg(struct pb *m, int field, struct pb *sub)
{
    m->oom = m->oom || sub->oom;
    pb_bytes(m, field, sub->sb.buf ? sub->sb.buf : "", sub->sb.len);
    sub->sb.len = 0;
    sub->oom = false;
}

/* Packed repeated varints. */
static void pb_packed(struct pb *m, int field, const uint64_t *v, size_t n, struct pb *tmp)
{
    for (size_t i = 0; i < n; i++)
        pb_varint(tmp, v[i]);
    pb_msg(m, field, tmp);
}

/* The string table: each distinct string once, "" first. */
struct strtab {
    struct u64map index; /* hash -> first index + 1 with that hash */
    char **v;
    size_t n, cap;
    uint32_t *next; /* next index with the same hash + 1 (collisions), per index */
};

static uint64_t str_id(struct strtab *t, const char *s)
{
    if (!s)
        s = "";
    uint64_t h = hash_bytes(s, strlen(s));
    uintptr_t first = (uintptr_t)u64map_get(&t->index, h);
    for (uintptr_t i = first; i; i = t->next[i - 1])
        if (!strcmp(t->v[i - 1], s))
            return i - 1;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 256;
        t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
        t->next = xrealloc(t->next, t->cap * sizeof(*t->next));
    }
    t->v[t->n] = xstrdup(s);
    t->next[t->n] = (uint32_t)first;
    u64map_put(&t->index, h, (void *)(uintptr_t)(t->n + 1));
    return t->n++;
}

static void strtab_finish(struct strtab *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    free(t->next);
    u64map_finish(&t->index);
}

/* A sample key: samples with equal keys are one pprof sample. */
struct key {
    int32_t tid;
    uint32_t stack;
    uint32_t path;
};

static int cmp_key(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return x->path < y->path ? -1 : x->path > y->path;
}

struct writer {
    const struct profile *p;
    struct strtab st;
    struct pb out, tmp, tmp2;
    uint32_t *loc_of;   /* frame index -> location id (0: none yet), for a group's first */
    uint32_t nlocs;
    struct u64map funcs; /* (name id << 32 | file id) -> function id */
    uint32_t nfuncs;
    struct pb locs, fns; /* the location and function messages, in id order */
};

/* The id of the function of frame f (written to w->fns on first use). */
static uint64_t function_id(struct writer *w, const struct profile_frame *f)
{
    struct strbuf name = {0};
    if (profile_frame_name(&name, f) < 0)
        w->out.oom = true;
    uint64_t n = str_id(&w->st, name.buf), file = str_id(&w->st, f->file);
    strbuf_finish(&name);
    uint64_t key = n << 32 | file;
    uintptr_t id = (uintptr_t)u64map_get(&w->funcs, key);
    if (id)
        return id;
    id = ++w->nfuncs;
    u64map_put(&w->funcs, key, (void *)id);
    pb_u64(&w->tmp, F_ID, id);
    pb_u64(&w->tmp, F_NAME, n);
    pb_u64(&w->tmp, F_SYSTEM_NAME, n);
    pb_u64(&w->tmp, F_FILENAME, file);
    pb_msg(&w->fns, P_FUNCTION, &w->tmp);
    return id;
}

/* The mapping (image index + 1) holding a native frame, or 0. */
static uint64_t mapping_of(const struct profile *p, const struct profile_frame *f)
{
    if (f->python || !f->module)
        return 0;
    for (size_t i = 0; i < p->nimages; i++)
        if (p->images[i].code_file && !strcmp(p->images[i].code_file, f->module) &&
            f->addr >= p->images[i].addr && f->addr - p->images[i].addr < p->images[i].size)
            return i + 1;
    return 0;
}

/* The location of the frames from stack position i: a native address's inlined functions
 * and the one they are inlined into are one location. Sets *len to how many frames it
 * takes. */
static uint64_t location_id(struct writer *w, const uint32_t *frames, uint32_t n, uint32_t i,
                            uint32_t *len)
{
    const struct profile *p = w->p;
    uint32_t j = i;
    while (j + 1 < n && !p->frames[frames[j]].python && p->frames[frames[j]].inlined &&
           frames[j + 1] == frames[j] + 1)
        j++;
    *len = j - i + 1;
    uint32_t first = frames[i];
    if (w->loc_of[first])
        return w->loc_of[first];
    uint32_t id = ++w->nlocs;
    w->loc_of[first] = id;
    const struct profile_frame *f = &p->frames[first];
    pb_u64(&w->tmp2, LOC_ID, id);
    pb_u64(&w->tmp2, LOC_MAPPING, mapping_of(p, f));
    if (!f->python)
        pb_u64(&w->tmp2, LOC_ADDRESS, f->addr);
    for (uint32_t k = i; k <= j; k++) {
        const struct profile_frame *g = &p->frames[frames[k]];
        uint64_t fid = function_id(w, g);
        pb_u64(&w->tmp, LN_FUNCTION, fid);
        pb_u64(&w->tmp, LN_LINE, g->line > 0 ? (uint64_t)g->line : 0);
        pb_msg(&w->tmp2, LOC_LINE, &w->tmp);
    }
    pb_msg(&w->locs, P_LOCATION, &w->tmp2);
    return id;
}

static void label_str(struct writer *w, const char *key, const char *val)
{
    pb_u64(&w->tmp2, L_KEY, str_id(&w->st, key));
    pb_u64(&w->tmp2, L_STR, str_id(&w->st, val));
    pb_msg(&w->tmp, S_LABEL, &w->tmp2);
}

static void write_sample(struct writer *w, const struct key *k, uint64_t count,
                         uint64_t *ids, struct strbuf *path)
{
    const struct profile *p = w->p;
    const struct profile_stack *st = &p->stacks[k->stack];
    uint32_t n = st->frames ? st->n : 0, nids = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t len = 1;
        if (st->frames[i] < p->nframes)
            ids[nids++] = location_id(w, st->frames, n, i, &len);
        i += len;
    }
    pb_packed(&w->tmp, S_LOCATION_ID, ids, nids, &w->tmp2);
    uint64_t v[2] = {count, count * p->period_ns};
    pb_packed(&w->tmp, S_VALUE, v, 2, &w->tmp2);
    const char *tname = profile_thread_name(p, k->tid);
    label_str(w, "thread_name", tname && *tname ? tname : (p->comm ? p->comm : ""));
    pb_u64(&w->tmp2, L_KEY, str_id(&w->st, "thread_id"));
    pb_u64(&w->tmp2, L_NUM, (uint64_t)(int64_t)k->tid);
    pb_msg(&w->tmp, S_LABEL, &w->tmp2);
    const char *names = k->path < p->ntxn_paths ? p->txn_paths[k->path] : NULL;
    if (names) {
        path->len = 0;
        for (const char *s = names; *s; s++) {
            int r = *s == PROFILE_TXN_SEP ? strbuf_puts(path, " > ") : strbuf_append(path, s, 1);
            if (r < 0)
                w->out.oom = true;
        }
        label_str(w, "transaction", path->buf ? path->buf : "");
    }
    pb_msg(&w->out, P_SAMPLE, &w->tmp);
}

static void value_type(struct writer *w, int field, const char *type, const char *unit)
{
    pb_u64(&w->tmp, VT_TYPE, str_id(&w->st, type));
    pb_u64(&w->tmp, VT_UNIT, str_id(&w->st, unit));
    pb_msg(&w->out, field, &w->tmp);
}

/* The mappings, the executable's first: pprof takes the first for the main binary. */
static void write_mappings(struct writer *w)
{
    const struct profile *p = w->p;
    char hex[2 * PROFILE_MAX_BUILD_ID + 1];
    size_t main = 0;
    for (size_t i = 0; i < p->nimages; i++)
        if (p->exe && p->images[i].code_file && !strcmp(p->images[i].code_file, p->exe)) {
            main = i;
            break;
        }
    for (size_t k = 0; k < p->nimages; k++) {
        size_t i = k == 0 ? main : k <= main ? k - 1 : k;
        const struct profile_image *im = &p->images[i];
        size_t n = im->build_id_len < PROFILE_MAX_BUILD_ID ? im->build_id_len
                                                            : PROFILE_MAX_BUILD_ID;
        for (size_t k = 0; k < n; k++)
            snprintf(hex + 2 * k, 3, "%02x", im->build_id[k]);
        hex[2 * n] = '\0';
        pb_u64(&w->tmp, M_ID, i + 1);
        pb_u64(&w->tmp, M_START, im->addr);
        pb_u64(&w->tmp, M_LIMIT, im->addr + im->size);
        pb_u64(&w->tmp, M_OFFSET, 0);
        pb_u64(&w->tmp, M_FILENAME, str_id(&w->st, im->code_file));
        pb_u64(&w->tmp, M_BUILD_ID, str_id(&w->st, hex));
        /* Symbolized here: pprof must not look for the files itself. */
        pb_u64(&w->tmp, M_HAS_FUNCTIONS, 1);
        pb_u64(&w->tmp, M_HAS_FILENAMES, 1);
        pb_u64(&w->tmp, M_HAS_LINES, 1);
        pb_u64(&w->tmp, M_HAS_INLINES, 1);
        pb_msg(&w->out, P_MAPPING, &w->tmp);
    }
}

/* gzip in[0..n) onto out. */
static int gzip_append(const void *in, size_t n, struct strbuf *out)
{
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;
    uLong bound = deflateBound(&z, (uLong)n);
    int r = strbuf_reserve(out, bound);
    if (r == 0) {
        z.next_in = (Bytef *)(uintptr_t)in;
        z.avail_in = (uInt)n;
        z.next_out = (Bytef *)out->buf + out->len;
        z.avail_out = (uInt)bound;
        r = deflate(&z, Z_FINISH) == Z_STREAM_END ? 0 : -EIO;
        if (r == 0)
            out->len += z.total_out;
    }
    deflateEnd(&z);
    return r;
}

int profile_write_pprof(const struct profile *p, struct strbuf *out)
{
    struct writer w = {.p = p};
    str_id(&w.st, ""); /* string_table[0] */
    w.loc_of = xcalloc(p->nframes ? p->nframes : 1, sizeof(*w.loc_of));
    const char *kind = p->cputime ? "cpu" : "wall";
    value_type(&w, P_SAMPLE_TYPE, "samples", "count");
    value_type(&w, P_SAMPLE_TYPE, kind, "nanoseconds");
    pb_u64(&w.out, P_DEFAULT_SAMPLE_TYPE, str_id(&w.st, kind));
    value_type(&w, P_PERIOD_TYPE, kind, "nanoseconds");
    pb_u64(&w.out, P_PERIOD, p->period_ns);
    pb_u64(&w.out, P_TIME_NANOS, p->start_ns + (uint64_t)p->realtime_offset_ns);
    pb_u64(&w.out, P_DURATION_NANOS, p->end_ns > p->start_ns && p->end_ns != UINT64_MAX
                                         ? p->end_ns - p->start_ns : 0);
    char comment[128];
    snprintf(comment, sizeof(comment), "profd %s: process %d (%s), %u Hz", PROFD_VERSION,
             (int)p->pid, p->comm ? p->comm : "?", p->hz);
    pb_u64(&w.out, P_COMMENT, str_id(&w.st, comment));
    struct strbuf how = {0};
    if (profile_describe_sampling(p, &how) == 0)
        pb_u64(&w.out, P_COMMENT, str_id(&w.st, how.buf));
    strbuf_finish(&how);
    write_mappings(&w);

    struct key *keys = xmalloc((p->nsamples ? p->nsamples : 1) * sizeof(*keys));
    size_t nkeys = 0, maxn = 1;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack >= p->nstacks)
            continue;
        keys[nkeys++] = (struct key){s->tid, s->stack, s->txn_path};
        if (p->stacks[s->stack].n > maxn)
            maxn = p->stacks[s->stack].n;
    }
    sort_array(keys, nkeys, sizeof(*keys), cmp_key);
    uint64_t *ids = xmalloc(maxn * sizeof(*ids));
    struct strbuf path = {0};
    for (size_t i = 0; i < nkeys;) {
        size_t j = i + 1;
        while (j < nkeys && !cmp_key(&keys[i], &keys[j]))
            j++;
        write_sample(&w, &keys[i], j - i, ids, &path);
        i = j;
    }
    free(ids);
    free(keys);
    strbuf_finish(&path);
    pb_raw(&w.out, w.locs.sb.buf, w.locs.sb.len);
    pb_raw(&w.out, w.fns.sb.buf, w.fns.sb.len);
    w.out.oom = w.out.oom || w.locs.oom || w.fns.oom;
    for (size_t i = 0; i < w.st.n; i++)
        pb_bytes(&w.out, P_STRING_TABLE, w.st.v[i], strlen(w.st.v[i]));

    int r = w.out.oom ? -ENOMEM : gzip_append(w.out.sb.buf, w.out.sb.len, out);
    strbuf_finish(&w.out.sb);
    strbuf_finish(&w.tmp.sb);
    strbuf_finish(&w.tmp2.sb);
    strbuf_finish(&w.locs.sb);
    strbuf_finish(&w.fns.sb);
    u64map_finish(&w.funcs);
    strtab_finish(&w.st);
    free(w.loc_of);
    return r;
}
