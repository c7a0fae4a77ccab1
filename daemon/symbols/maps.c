/* maps.c: parse /proc/PID/maps and attach the modules behind a process's code mappings. */
#include "maps.h"

#include "log.h"
#include "modules.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parse decimal digits at p into *v; as parse_hex_span. */
static const char *parse_dec(const char *p, const char *end, uint64_t *v)
{
    const char *s = p;
    uint64_t x = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - 9) / 10)
            return NULL;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *v = x;
    return p > s ? p : NULL;
}

/* Expect byte c at p; the byte after it, or NULL. */
static const char *expect(const char *p, const char *end, char c)
{
    return p && p < end && *p == c ? p + 1 : NULL;
}

/* Parse one maps line [p, end) (no newline):
 *   START-END PERMS OFFSET MAJOR:MINOR INODE [PATH]
 * where PATH is the rest of the line after the padding and may hold spaces. 0 or -EINVAL. */
static int parse_line(const char *p, const char *end, struct map_entry *e)
{
    uint64_t maj, min;
    memset(e, 0, sizeof(*e));
    /* The kernel never prints a NUL: a path holding one would be cut there (an empty path
     * if it comes first, which is neither a file nor anonymous memory). */
    if (memchr(p, '\0', (size_t)(end - p)))
        return -EINVAL;
    p = parse_hex_span(p, end, &e->start);
    p = expect(p, end, '-');
    if (p)
        p = parse_hex_span(p, end, &e->end);
    p = expect(p, end, ' ');
    if (!p || end - p < 5 || p[4] != ' ')
        return -EINVAL;
    static const char flags[] = "rwx";
    for (int i = 0; i < 3; i++) {
        if (p[i] == flags[i])
            e->prot |= 1u << i;
        else if (p[i] != '-')
            return -EINVAL;
    }
    if (p[3] != 'p' && p[3] != 's')
        return -EINVAL;
    p += 5;
    p = parse_hex_span(p, end, &e->pgoff);
    p = expect(p, end, ' ');
    if (p)
        p = parse_hex_span(p, end, &maj);
    p = expect(p, end, ':');
    if (p)
        p = parse_hex_span(p, end, &min);
    p = expect(p, end, ' ');
    if (p)
        p = parse_dec(p, end, &e->inode);
    if (!p || e->start >= e->end || maj > UINT32_MAX || min > UINT32_MAX)
        return -EINVAL;
    if (p < end && *p != ' ')
        return -EINVAL;
    e->dev_major = (uint32_t)maj;
    e->dev_minor = (uint32_t)min;
    while (p < end && *p == ' ')
        p++;
    if (p < end)
        e->path = strndup(p, (size_t)(end - p));
    return 0;
}

/* Order entries by start address. */
static int cmp_start(const void *a, const void *b)
{
    const struct map_entry *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Parse maps text into out. The kernel prints sorted, non-overlapping entries, but a read of
 * a changing map is not atomic across pages: strict (tests) rejects overlaps, else the later
 * of two overlapping entries is dropped. */
int maps_parse_text(const char *text, size_t len, bool strict, struct maps *out)
{
    out->v = NULL;
    out->n = 0;
    size_t cap = 0;
    const char *p = text, *end = text + len;
    bool sorted = true;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p) {
            if (out->n == cap) {
                cap = cap ? cap * 2 : 64;
                out->v = xrealloc(out->v, cap * sizeof(out->v[0]));
            }
            struct map_entry *e = &out->v[out->n];
            if (parse_line(p, le, e) < 0) {
                maps_finish(out);
                return -EINVAL;
            }
            if (out->n && e->start < out->v[out->n - 1].start)
                sorted = false;
            out->n++;
        }
        p = le + 1;
    }
    if (!sorted)
        sort_array(out->v, out->n, sizeof(out->v[0]), cmp_start);
    size_t k = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (k && out->v[i].start < out->v[k - 1].end) {
            if (strict) {
                /* Nothing was dropped before the first overlap: v[0, n) is intact. */
                maps_finish(out);
                return -EINVAL;
            }
            free(out->v[i].path);
            out->v[i].path = NULL;
            continue;
        }
        out->v[k++] = out->v[i];
    }
    out->n = k;
    return 0;
}

/* Parse maps text (tests); see maps.h. */
int maps_parse(const char *text, struct maps *out)
{
    return maps_parse_text(text, strlen(text), true, out);
}

/* Read a whole /proc file, which has no size to ask for. 0 or -errno. */
static int slurp(const char *path, char **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t cap = 64 * 1024, n = 0;
    char *b = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            b = xrealloc(b, cap);
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            free(b);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = n;
    return 0;
}

/* A mapping of a file rather than anonymous memory or a [special] area. */
static bool is_file(const struct map_entry *e)
{
    return e->path && e->path[0] == '/' && e->inode != 0;
}

/* Order entries by the file they map: device, inode, then path. */
static int cmp_file(const void *a, const void *b)
{
    const struct map_entry *x = *(const struct map_entry *const *)a;
    const struct map_entry *y = *(const struct map_entry *const *)b;
    if (x->dev_major != y->dev_major)
        return x->dev_major < y->dev_major ? -1 : 1;
    if (x->dev_minor != y->dev_minor)
        return x->dev_minor < y->dev_minor ? -1 : 1;
    if (x->inode != y->inode)
        return x->inode < y->inode ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* Whether an entry's module is settled: opened, or failed for good (EAGAIN: the helper that
 * reads ELF headers failed, so the next read of the maps tries again). */
static bool settled(const struct map_entry *e)
{
    return e->mod || (e->mod_err && e->mod_err != EAGAIN);
}

/* File-backed entries of m (the settled ones, if known_only), sorted by file. Returns the
 * count; *out is malloc'd. */
static size_t by_file(const struct maps *m, bool known_only, struct map_entry ***out)
{
    struct map_entry **v = xmalloc((m->n ? m->n : 1) * sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++) {
        struct map_entry *e = &m->v[i];
        if (is_file(e) && (!known_only || settled(e)))
            v[n++] = e;
    }
    sort_array(v, n, sizeof(*v), cmp_file);
    *out = v;
    return n;
}

/* Give every mapping of a file that has an executable mapping its module: from prev when it
 * already knew the file, else module_get once per file. */
static void attach_modules(int pid, const struct maps *prev, struct maps *m)
{
    struct map_entry **cur, **old = NULL;
    size_t ncur = by_file(m, false, &cur);
    size_t nold = prev ? by_file(prev, true, &old) : 0;
    size_t opened = 0, reused = 0;
    for (size_t a = 0, b; a < ncur; a = b) {
        struct map_entry *exec = NULL;
        for (b = a; b < ncur && !cmp_file(&cur[a], &cur[b]); b++)
            if (!exec && (cur[b]->prot & MAP_PROT_X))
                exec = cur[b];
        /* Data-only files (locale archives, fonts, caches) are never symbolized. */
        if (!exec)
            continue;
        struct module *mod = NULL;
        int err = 0;
        struct map_entry **hit = nold ? bsearch(&exec, old, nold, sizeof(*old), cmp_file) : NULL;
        if (hit) {
            mod = module_ref((*hit)->mod);
            err = (*hit)->mod_err;
            reused++;
        } else {
            mod = module_get(pid, exec->start, exec->end, exec->path, exec->inode);
            err = mod ? 0 : errno;
            if (!mod)
                log_debug("pid %d: cannot open %s: %s", pid, exec->path, strerror(err));
            opened++;
        }
        for (size_t i = a; i < b; i++) {
            cur[i]->mod = i == a ? mod : module_ref(mod);
            cur[i]->mod_err = err;
        }
    }
    log_debug("pid %d: maps: %zu files opened, %zu reused", pid, opened, reused);
    free(cur);
    free(old);
}

/* The [vdso] entry of m, or NULL (none under valgrind, or with vdso=0 on the kernel command
 * line). */
static struct map_entry *find_vdso(const struct maps *m)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].path && !strcmp(m->v[i].path, MODULE_VDSO))
            return &m->v[i];
    return NULL;
}

/* Give the vDSO mapping its module: prev's if the vDSO is still where it was (an exec maps
 * a new one, maybe of another ABI, at a new random address), else module_get's, which copies
 * the image out of the target. */
static void attach_vdso(int pid, const struct maps *prev, struct maps *m)
{
    struct map_entry *e = find_vdso(m);
    if (!e)
        return;
    const struct map_entry *o = prev ? find_vdso(prev) : NULL;
    if (o && o->start == e->start && o->end == e->end && settled(o)) {
        e->mod = module_ref(o->mod);
        e->mod_err = o->mod_err;
        return;
    }
    e->mod = module_get(pid, e->start, e->end, e->path, 0);
    e->mod_err = e->mod ? 0 : errno;
    if (!e->mod)
        log_debug("pid %d: cannot read its vDSO: %s", pid, strerror(e->mod_err));
}

/* Read /proc/PID/maps and, with open_modules, the modules behind it; see maps.h. */
int maps_read(int pid, bool open_modules, const struct maps *prev, struct maps *out)
{
    char path[64], *buf = NULL;
    size_t len = 0;
    out->v = NULL;
    out->n = 0;
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    int r = slurp(path, &buf, &len);
    if (r == -ENOENT)
        return -ESRCH;
    if (r < 0)
        return r;
    r = maps_parse_text(buf, len, false, out);
    free(buf);
    if (r < 0)
        return r;
    /* An exited process that is not yet reaped reads as an empty file. */
    if (!out->n && kill(pid, 0) < 0 && errno == ESRCH)
        return -ESRCH;
    if (open_modules) {
        attach_modules(pid, prev, out);
        attach_vdso(pid, prev, out);
    }
    return 0;
}

/* Free the entries and drop their module references. */
void maps_finish(struct maps *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].path);
        module_unref(m->v[i].mod);
    }
    free(m->v);
    m->v = NULL;
    m->n = 0;
}

/* Entry containing addr, by binary search over the sorted entries. */
const struct map_entry *maps_find(const struct maps *m, uint64_t addr)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct map_entry *e = &m->v[lo - 1];
    return addr < e->end ? e : NULL;
}

uint64_t map_vaddr_addr(const struct map_entry *e, uint64_t vaddr)
{
    const struct module *m = e->mod;
    for (int i = 0; m && i < m->nloads; i++) {
        const struct module_load *l = &m->loads[i];
        if (e->pgoff >= (l->offset & ~0xfffull) && e->pgoff < l->offset + l->filesz)
            return vaddr + (e->start - e->pgoff) - (l->vaddr - l->offset);
    }
    return 0;
}
