/* profile_tables.c: the tables pprof and OTLP share (profile_tables.h). */
#include "profile_tables.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "util.h"

void ptables_init(struct ptables *t, const struct profile *p)
{
    memset(t, 0, sizeof(*t));
    t->p = p;
    t->location_of = xcalloc(p->nframes ? p->nframes : 1, sizeof(*t->location_of));
    ptables_string(t, ""); /* id 0 */
}

void ptables_finish(struct ptables *t)
{
    for (size_t i = 0; i < t->nstrings; i++)
        free(t->strings[i]);
    free(t->strings);
    free(t->string_next);
    u64map_finish(&t->string_index);
    free(t->functions);
    u64map_finish(&t->function_index);
    free(t->locations);
    free(t->lines);
    free(t->location_of);
}

#define GROW(arr, n, cap)                                                                          \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? (cap) * 2 : 64;                                                        \
            (arr) = xrealloc((arr), (cap) * sizeof(*(arr)));                                       \
        }                                                                                          \
    } while (0)

uint32_t ptables_string(struct ptables *t, const char *s)
{
    if (!s)
        s = "";
    uint64_t h = hash_bytes(s, strlen(s));
    uintptr_t first = (uintptr_t)u64map_get(&t->string_index, h);
    for (uintptr_t i = first; i; i = t->string_next[i - 1])
        if (!strcmp(t->strings[i - 1], s))
            return (uint32_t)(i - 1);
    size_t cap = t->cap_strings;
    GROW(t->strings, t->nstrings, t->cap_strings);
    if (cap != t->cap_strings)
        t->string_next = xrealloc(t->string_next, t->cap_strings * sizeof(*t->string_next));
    t->strings[t->nstrings] = xstrdup(s);
    t->string_next[t->nstrings] = (uint32_t)first;
    u64map_put(&t->string_index, h, (void *)(uintptr_t)(t->nstrings + 1));
    return (uint32_t)t->nstrings++;
}

/* The id of frame f's function: one per (name, file). */
static uint32_t function_id(struct ptables *t, const struct profile_frame *f)
{
    struct strbuf name = {0};
    if (profile_frame_name(&name, f) < 0)
        t->oom = true;
    uint64_t n = ptables_string(t, name.buf), file = ptables_string(t, f->file);
    strbuf_finish(&name);
    uint64_t key = n << 32 | file;
    uintptr_t id = (uintptr_t)u64map_get(&t->function_index, key);
    if (id)
        return (uint32_t)id;
    GROW(t->functions, t->nfunctions, t->cap_functions);
    t->functions[t->nfunctions++] = (struct ptab_function){(uint32_t)n, (uint32_t)file};
    u64map_put(&t->function_index, key, (void *)(uintptr_t)t->nfunctions);
    return (uint32_t)t->nfunctions;
}

uint32_t ptables_mapping(const struct profile *p, const struct profile_frame *f)
{
    if (f->python || !f->module)
        return 0;
    for (size_t i = 0; i < p->nimages; i++)
        if (p->images[i].code_file && !strcmp(p->images[i].code_file, f->module) &&
            f->addr >= p->images[i].addr && f->addr - p->images[i].addr < p->images[i].size)
            return (uint32_t)(i + 1);
    return 0;
}

/* The location of the frames from stack position i: a native address's inlined functions
 * and the one they are inlined into are one location. *len: how many frames it takes. */
static uint32_t location_id(struct ptables *t, const uint32_t *frames, uint32_t n, uint32_t i,
                            uint32_t *len)
{
    const struct profile *p = t->p;
    uint32_t j = i;
    while (j + 1 < n && !p->frames[frames[j]].python && p->frames[frames[j]].inlined &&
           frames[j + 1] == frames[j] + 1)
        j++;
    *len = j - i + 1;
    uint32_t first = frames[i];
    if (t->location_of[first])
        return t->location_of[first];
    const struct profile_frame *f = &p->frames[first];
    struct ptab_location loc = {.mapping = ptables_mapping(p, f),
                                .address = f->python ? 0 : f->addr,
                                .line0 = (uint32_t)t->nlines, .nlines = j - i + 1};
    for (uint32_t k = i; k <= j; k++) {
        const struct profile_frame *g = &p->frames[frames[k]];
        uint32_t fid = function_id(t, g);
        GROW(t->lines, t->nlines, t->cap_lines);
        t->lines[t->nlines++] = (struct ptab_line){fid, g->line > 0 ? g->line : 0};
    }
    GROW(t->locations, t->nlocations, t->cap_locations);
    t->locations[t->nlocations++] = loc;
    t->location_of[first] = (uint32_t)t->nlocations;
    return (uint32_t)t->nlocations;
}

uint32_t ptables_stack(struct ptables *t, uint32_t stack, uint64_t *ids)
{
    const struct profile *p = t->p;
    const struct profile_stack *st = &p->stacks[stack];
    uint32_t n = st->frames ? st->n : 0, nids = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t len = 1;
        if (st->frames[i] < p->nframes)
            ids[nids++] = location_id(t, st->frames, n, i, &len);
        i += len;
    }
    return nids;
}

void ptables_build_id(const struct profile_image *im, char *out)
{
    profile_hex(im->build_id, im->build_id_len < PROFILE_MAX_BUILD_ID ? im->build_id_len
                                                                     : PROFILE_MAX_BUILD_ID,
                out);
}

void ptables_txn_path(const char *names, struct strbuf *out)
{
    out->len = 0;
    for (const char *s = names; *s; s++) {
        if (*s == PROFILE_TXN_SEP)
            strbuf_puts(out, " > ");
        else
            strbuf_append(out, s, 1);
    }
    strbuf_append(out, "", 1);
    out->len--;
}

int profile_gzip(const void *in, size_t n, int level, struct strbuf *out)
{
    z_stream z = {0};
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
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
