/* jitmap.c: perf maps, parsed incrementally and bounded (see jitmap.h). */
#include "jitmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "containers.h"
#include "util.h"

/* Read this much of a perf map at a time: the file's size says nothing about what it is
 * worth keeping, and a target can make it as large as it likes. */
#define READ_CHUNK (1u << 20)

struct jit_sym {
    uint64_t start, end, seq;
    const char *name; /* interned in the map's names */
};

/* A process's perf map as last read. */
struct jitmap {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    off_t parsed; /* bytes of complete lines read so far */
    uint64_t seq;
    struct jit_sym *v; /* sorted by start, non-overlapping */
    size_t n, cap;
    struct strset names;
};

struct jitmaps {
    struct u64map by_pid; /* pid -> struct jitmap */
};

struct jitmaps *jitmaps_create(void)
{
    return xcalloc(1, sizeof(struct jitmaps));
}

static void jitmap_clear(struct jitmap *jm)
{
    jm->n = 0;
    jm->parsed = 0;
    jm->size = 0;
    jm->ino = 0;
    jm->dev = 0;
    strset_finish(&jm->names);
}

static void jitmap_free(struct jitmap *jm)
{
    strset_finish(&jm->names);
    free(jm->v);
    free(jm);
}

void jitmaps_forget(struct jitmaps *j, uint32_t pid)
{
    struct jitmap *jm = u64map_get(&j->by_pid, pid);
    if (!jm)
        return;
    u64map_del(&j->by_pid, pid);
    jitmap_free(jm);
}

void jitmaps_destroy(struct jitmaps *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->by_pid.cap; i++)
        if (j->by_pid.vals[i])
            jitmap_free(j->by_pid.vals[i]);
    u64map_finish(&j->by_pid);
    free(j);
}

/* Hex digits at p, after an optional 0x, up to end (parse_hex_span: never past it, never
 * skipping anything, where strtoull would skip white space, newlines included, and read the
 * next line). */
static const char *hex(const char *p, const char *end, uint64_t *v)
{
    if (end - p >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        p += 2;
    return parse_hex_span(p, end, v);
}

int jit_parse_line(const char *p, const char *end, struct jit_line *out)
{
    if (end > p && end[-1] == '\r')
        end--;
    uint64_t start, size;
    const char *q = hex(p, end, &start);
    if (!q || q == end || *q != ' ')
        return -EINVAL;
    q = hex(q + 1, end, &size);
    if (!q || q == end || *q != ' ' || size == 0 || start + size < start)
        return -EINVAL;
    q++;
    size_t len = (size_t)(end - q);
    if (len == 0 || memchr(q, '\0', len))
        return -EINVAL;
    out->start = start;
    out->size = size;
    out->name = q;
    out->name_len = len > JIT_MAX_NAME ? JIT_MAX_NAME : len;
    return 0;
}

/* Order entries by start, then by line (later lines win). */
static int cmp_sym(const void *a, const void *b)
{
    const struct jit_sym *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Order u64 values (the sweep's boundaries). */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A max-heap of entry indices by line (seq): the latest line on top. */
struct heap {
    size_t *v, n;
    const struct jit_sym *e;
};

static void heap_push(struct heap *h, size_t i)
{
    size_t k = h->n++;
    while (k > 0 && h->e[h->v[(k - 1) / 2]].seq < h->e[i].seq) {
        h->v[k] = h->v[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    h->v[k] = i;
}

static void heap_pop(struct heap *h)
{
    size_t last = h->v[--h->n], k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->e[h->v[c + 1]].seq > h->e[h->v[c]].seq)
            c++;
        if (h->e[h->v[c]].seq <= h->e[last].seq)
            break;
        h->v[k] = h->v[c];
        k = c;
    }
    if (h->n)
        h->v[k] = last;
}

/* Sort and make entries disjoint. A JIT reuses freed code memory and appends the new name,
 * so where entries overlap the later line wins: every address keeps the name of the last
 * line that covers it, an earlier entry being cut where a later one starts, split around one
 * inside it, or dropped where later ones cover it. The result depends only on the lines,
 * not on how the file was read: a map read again as it grows (earlier entries already cut)
 * ends as one read whole. (It used to cut an entry's whole tail at a later entry inside it,
 * so that an older entry it had covered could come back, or not, depending on whether the
 * two were read in the same update; found by fuzz_jitmap.) A sweep over the entries'
 * boundaries with the latest covering line on a heap. */
static void jitmap_sort(struct jitmap *jm)
{
    size_t n = jm->n;
    sort_array(jm->v, n, sizeof(jm->v[0]), cmp_sym);
    bool overlap = false;
    for (size_t i = 1; i < n && !overlap; i++)
        overlap = jm->v[i - 1].end > jm->v[i].start;
    if (!overlap)
        return; /* the usual case: append-only maps of fresh code */
    uint64_t *b = xmalloc(2 * n * sizeof(*b));
    for (size_t i = 0; i < n; i++) {
        b[2 * i] = jm->v[i].start;
        b[2 * i + 1] = jm->v[i].end;
    }
    sort_array(b, 2 * n, sizeof(*b), cmp_u64);
    size_t nb = 0;
    for (size_t i = 0; i < 2 * n; i++)
        if (!nb || b[nb - 1] != b[i])
            b[nb++] = b[i];
    struct heap h = {.v = xmalloc(n * sizeof(size_t)), .e = jm->v};
    struct jit_sym *out = xmalloc(2 * n * sizeof(*out));
    size_t k = 0, next = 0;
    for (size_t i = 0; i + 1 < nb; i++) {
        while (next < n && jm->v[next].start == b[i])
            heap_push(&h, next++);
        while (h.n && jm->v[h.v[0]].end <= b[i])
            heap_pop(&h);
        if (!h.n)
            continue;
        const struct jit_sym *w = &jm->v[h.v[0]];
        if (k && out[k - 1].seq == w->seq && out[k - 1].end == b[i])
            out[k - 1].end = b[i + 1];
        else
            out[k++] = (struct jit_sym){b[i], b[i + 1], w->seq, w->name};
    }
    free(b);
    free(h.v);
    free(jm->v);
    jm->v = out;
    jm->n = k;
    jm->cap = 2 * n;
}

/* Add the complete lines of [buf, buf + len); returns the bytes they take. A last line
 * without its newline is being written: it is left for the next read. */
static size_t add_lines(struct jitmap *jm, const char *buf, size_t len)
{
    size_t used = 0;
    while (used < len) {
        const char *p = buf + used, *nl = memchr(p, '\n', len - used);
        if (!nl)
            break;
        used = (size_t)(nl - buf) + 1;
        struct jit_line l;
        if (jm->n >= JIT_MAX_ENTRIES || jit_parse_line(p, nl, &l) < 0)
            continue;
        if (jm->n == jm->cap) {
            jm->cap = jm->cap ? jm->cap * 2 : 64;
            jm->v = xrealloc(jm->v, jm->cap * sizeof(jm->v[0]));
        }
        jm->v[jm->n++] = (struct jit_sym){
            .start = l.start,
            .end = l.start + l.size,
            .seq = jm->seq++,
            .name = strset_intern(&jm->names, l.name, l.name_len),
        };
    }
    return used;
}

int jitmaps_update(struct jitmaps *j, uint32_t pid, int fd)
{
    struct jitmap *jm = u64map_get(&j->by_pid, pid);
    if (fd < 0) {
        jitmaps_forget(j, pid);
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if (!jm) {
        jm = xcalloc(1, sizeof(*jm));
        u64map_put(&j->by_pid, pid, jm);
    }
    bool same_file = jm->ino == st.st_ino && jm->dev == st.st_dev;
    bool same_mtime =
        st.st_mtim.tv_sec == jm->mtime.tv_sec && st.st_mtim.tv_nsec == jm->mtime.tv_nsec;
    if (same_file && st.st_size == jm->size && same_mtime)
        return 0;
    if (!same_file || st.st_size <= jm->size || st.st_size < jm->parsed)
        jitmap_clear(jm); /* a new file, or rewritten rather than appended to */
    size_t before = jm->n;
    /* Chunks of the file; a line cut by a chunk's end is read again with the next. A single
     * line longer than a chunk is no perf map line: skip to its end. */
    char *buf = xmalloc(READ_CHUNK);
    int r = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, READ_CHUNK, jm->parsed);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            break;
        }
        if (n == 0)
            break;
        size_t used = add_lines(jm, buf, (size_t)n);
        if (used == 0) {
            if ((size_t)n < READ_CHUNK)
                break; /* an incomplete last line: wait for its end */
            const char *nl = NULL;
            off_t at = jm->parsed + n;
            /* Skip the overlong line. */
            while (!nl) {
                ssize_t m = pread(fd, buf, READ_CHUNK, at);
                if (m <= 0)
                    break;
                nl = memchr(buf, '\n', (size_t)m);
                at += nl ? (nl - buf) + 1 : m;
            }
            if (!nl)
                break;
            jm->parsed = at;
            continue;
        }
        jm->parsed += (off_t)used;
    }
    free(buf);
    if (jm->n != before)
        jitmap_sort(jm);
    jm->dev = st.st_dev;
    jm->ino = st.st_ino;
    jm->size = st.st_size;
    jm->mtime = st.st_mtim;
    return r;
}

const char *jitmaps_lookup(const struct jitmaps *j, uint32_t pid, uint64_t addr)
{
    const struct jitmap *jm = u64map_get(&j->by_pid, pid);
    if (!jm)
        return NULL;
    size_t lo = 0, hi = jm->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (jm->v[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && addr < jm->v[lo - 1].end ? jm->v[lo - 1].name : NULL;
}

size_t jitmaps_count(const struct jitmaps *j, uint32_t pid)
{
    const struct jitmap *jm = u64map_get(&j->by_pid, pid);
    return jm ? jm->n : 0;
}
