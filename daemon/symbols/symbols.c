/* symbols.c: profd's side of symbolization: caches, the exchange with the unprivileged
 * helper, and the files it asks for (see symbols.h). */
#include "symbols.h"

#include "containers.h"
#include "fsaccess.h"
#include "log.h"
#include "modules.h"
#include "procstatus.h"
#include "symhelper.h"
#include "symproto.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_DEBUG_PATH ":.debug:/usr/lib/debug"
/* A perf map larger than this is not read: no JIT writes that much, and the helper would
 * spend its whole timeout on it. */
#define JIT_MAX_FILE (256ull << 20)
/* A module that made the helper fail this many times is not sent to it again. */
#define POISON_AFTER 2

/* One cached answer: n frames, innermost first. */
struct sym_entry {
    int n;
    enum sym_source src;
    struct sym_frame f[];
};

/* What the symbolizer keeps per module (module->sym): the answers so far (strings in the
 * arena), and what the helper holds of it. */
struct modcache {
    struct symbolizer *owner;
    struct module *mod; /* reference */
    struct u64map cache; /* file offset -> struct sym_entry */
    struct arena arena;
    uint64_t gen;        /* helper generation that has the module; 0: none */
    int failures;        /* helper failures while working on it */
};

/* A process's JIT names from its last prefetch. */
struct jitcache {
    int pid;
    struct u64map names; /* address -> name (in arena); JIT_NONE: none */
    struct arena arena;
};
static char jit_none[1];
#define JIT_NONE ((void *)jit_none)

struct symbolizer {
    char *debug_path;
    struct symhelper *helper;
    struct u64map states; /* module address -> struct modcache */
    struct u64map jits;   /* pid -> struct jitcache */
    const struct fs_creds *creds;
    char error[256];
    bool failed;          /* the helper failed in this request: ask it nothing more */
    uint64_t lookups, hits;
    uint8_t *buf;         /* SYMP_MAX_MSG: received messages */
    struct symp_w *w;
};

struct symbolizer *symbolizer_create(void)
{
    struct symbolizer *s = xcalloc(1, sizeof(*s));
    s->debug_path = xstrdup(DEFAULT_DEBUG_PATH);
    s->helper = symhelper_create("symbols");
    s->buf = xmalloc(SYMP_MAX_MSG);
    s->w = xmalloc(sizeof(*s->w));
    return s;
}

void symbolizer_set_debug_path(struct symbolizer *s, const char *path)
{
    free(s->debug_path);
    s->debug_path = xstrdup(path ? path : DEFAULT_DEBUG_PATH);
}

void symbolizer_begin(struct symbolizer *s, const struct fs_creds *c)
{
    s->creds = c;
    s->error[0] = '\0';
    s->failed = false;
}

const char *symbolizer_error(const struct symbolizer *s)
{
    return s->error;
}

/* Record why frames stay unsymbolized (the first reason of the request is kept). */
static void set_error(struct symbolizer *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(struct symbolizer *s, const char *fmt, ...)
{
    if (s->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof(s->error), fmt, ap);
    va_end(ap);
}

/* ---- per-module state ---- */

static struct modcache *state_get(struct symbolizer *s, struct module *m)
{
    struct modcache *st = __atomic_load_n(&m->sym, __ATOMIC_ACQUIRE);
    if (st && st->owner == s)
        return st;
    st = u64map_get(&s->states, (uintptr_t)m);
    if (st)
        return st;
    st = xcalloc(1, sizeof(*st));
    st->owner = s;
    st->mod = module_ref(m);
    u64map_put(&s->states, (uintptr_t)m, st);
    void *expected = NULL;
    __atomic_compare_exchange_n(&m->sym, &expected, st, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    return st;
}

static void state_free(struct modcache *st)
{
    void *expected = st;
    __atomic_compare_exchange_n(&st->mod->sym, &expected, NULL, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
    u64map_finish(&st->cache);
    arena_free(&st->arena);
    module_unref(st->mod);
    free(st);
}

/* ---- debug files the helper asks for ---- */

/* Open one candidate debug file as the requester; skip the module itself under another
 * name (libdwfl does the same). */
static int try_debug(struct symbolizer *s, const struct module *m, const char *path)
{
    int fd = fs_open_as(s->creds, AT_FDCWD, path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return fd;
    struct stat a, b;
    if (fstat(fd, &a) < 0 || !S_ISREG(a.st_mode) ||
        (fstat(m->fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
        close(fd);
        return -ENOENT;
    }
    log_debug("%s: debug file %s", m->path, path);
    return fd;
}

/* The debug file the helper asked for: by build-id under each absolute directory of the
 * debug path, or by .gnu_debuglink name next to the module, in its .debug directory and
 * under each absolute directory followed by the module's directory (elfutils' and gdb's
 * search). The name comes from the target's file: a plain file name, nothing else. */
static int open_debug(struct symbolizer *s, const struct module *m, uint32_t kind,
                      const uint8_t *data, size_t len)
{
    if (kind == SYMP_OPEN_BUILD_ID && (len < 2 || len > SYMP_MAX_BUILD_ID))
        return -EINVAL;
    if (kind == SYMP_OPEN_DEBUGLINK &&
        (len == 0 || len > 255 || memchr(data, '/', len) || memchr(data, '\0', len) ||
         (len == 1 && data[0] == '.') || (len == 2 && data[0] == '.' && data[1] == '.')))
        return -EINVAL;
    if (kind != SYMP_OPEN_BUILD_ID && kind != SYMP_OPEN_DEBUGLINK)
        return -EINVAL;
    char hex[2 * SYMP_MAX_BUILD_ID + 1], name[256];
    if (kind == SYMP_OPEN_BUILD_ID) {
        for (size_t i = 0; i < len; i++)
            snprintf(hex + 2 * i, 3, "%02x", data[i]);
    } else {
        memcpy(name, data, len);
        name[len] = '\0';
    }
    char *dir = NULL;
    if (m->path[0] == '/') {
        dir = xstrdup(m->path);
        *strrchr(dir, '/') = '\0';
    }
    int fd = -ENOENT;
    char *paths = xstrdup(s->debug_path), *save = NULL;
    const char *list = paths[0] == '+' || paths[0] == '-' ? paths + 1 : paths;
    /* strtok_r would skip the empty entry (the module's own directory): split by hand. */
    for (char *e = (char *)list, *next; e && fd < 0; e = next) {
        next = strchr(e, ':');
        if (next)
            *next++ = '\0';
        if (*e == '+' || *e == '-')
            e++;
        char *p = NULL;
        if (kind == SYMP_OPEN_BUILD_ID) {
            if (e[0] == '/')
                p = xasprintf("%s/.build-id/%.2s/%s.debug", e, hex, hex + 2);
        } else if (dir) {
            if (e[0] == '\0')
                p = xasprintf("%s/%s", dir, name);
            else if (e[0] == '/')
                p = xasprintf("%s%s/%s", e, dir, name);
            else
                p = xasprintf("%s/%s/%s", dir, e, name);
        }
        if (p) {
            fd = try_debug(s, m, p);
            free(p);
        }
    }
    (void)save;
    free(paths);
    free(dir);
    return fd;
}

/* ---- the exchange ---- */

/* Copy [p, p + len) into the module's arena (NULL stays NULL). */
static const char *keep_str(struct modcache *st, const char *p, uint32_t len, bool present)
{
    return present ? arena_strndup(&st->arena, p, len) : NULL;
}

/* Read one FRAMES message's entries into the cache: offs[first .. first + count). Only a
 * message read whole and found sound is kept: a helper that sends a malformed one may have
 * been subverted by what it parsed, so none of it is believed. Returns the count, or
 * -EPROTO. */
static int take_frames(struct modcache *st, struct symp_r *r, const uint64_t *offs, size_t n,
                       size_t expect_first, bool *final)
{
    uint64_t id = symp_get_u64(r);
    uint32_t first = symp_get_u32(r), count = symp_get_u32(r), fin = symp_get_u32(r);
    if (r->bad || id != st->mod->id || first != expect_first || count > n - first || fin > 1)
        return -EPROTO;
    struct sym_entry **got = xmalloc((count ? count : 1) * sizeof(*got));
    int ret = -EPROTO;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t src = symp_get_u32(r), nf = symp_get_u32(r);
        if (r->bad || src > SYMP_SRC_NONE || nf == 0 || nf > SYMP_MAX_FRAMES)
            goto out;
        struct sym_entry *e =
            arena_alloc(&st->arena, sizeof(*e) + (size_t)nf * sizeof(struct sym_frame));
        e->n = (int)nf;
        e->src = (enum sym_source)src;
        for (uint32_t k = 0; k < nf; k++) {
            uint32_t line = symp_get_u32(r), inl = symp_get_u32(r);
            const char *fn, *file;
            uint32_t fl, il;
            bool hf = symp_get_str(r, &fn, &fl), hi = symp_get_str(r, &file, &il);
            if (r->bad || inl > 1 || line > INT32_MAX)
                goto out;
            e->f[k] = (struct sym_frame){keep_str(st, fn, fl, hf), keep_str(st, file, il, hi),
                                         (int)line, inl == 1};
        }
        /* Only the outermost frame is the function containing the code; inlined frames come
         * first. Anything else is not an answer libdwfl gives. */
        if (e->f[nf - 1].inlined)
            goto out;
        got[i] = e;
    }
    if (!symp_r_done(r))
        goto out;
    for (uint32_t i = 0; i < count; i++)
        u64map_put(&st->cache, offs[first + i], got[i]);
    *final = fin == 1;
    ret = (int)count;
out:
    free(got);
    return ret;
}

int symbolizer_take_frames(struct symbolizer *s, struct module *m, const void *msg, size_t len,
                           const uint64_t *offs, size_t n, size_t first, bool *final)
{
    struct symp_r r;
    symp_r_init(&r, msg, len);
    if (symp_get_u32(&r) != SYMP_FRAMES || first > n)
        return -EPROTO;
    return take_frames(state_get(s, m), &r, offs, n, first, final);
}

/* The helper failed while working on st's module (st NULL: on no module in particular). */
static void helper_failed(struct symbolizer *s, struct modcache *st)
{
    s->failed = true;
    if (st && ++st->failures >= POISON_AFTER)
        log_warn("%s made the symbolizer fail %d times: it is not symbolized any more",
                 st->mod->path, st->failures);
    set_error(s, "frames left unsymbolized: %s%s%s", symhelper_error(s->helper),
              st ? " while reading " : "", st ? st->mod->path : "");
}

/* One LOOKUP exchange for offs[0..n) (n <= SYMP_MAX_BATCH, none cached). 0 or -EIO. */
static int lookup_batch(struct symbolizer *s, struct modcache *st, const uint64_t *offs,
                        size_t n)
{
    if (symhelper_ensure(s->helper) < 0) {
        s->failed = true;
        set_error(s, "frames left unsymbolized: %s", symhelper_error(s->helper));
        return -EIO;
    }
    bool fresh = st->gen != symhelper_generation(s->helper);
    symp_w_init(s->w, SYMP_LOOKUP);
    symp_put_u64(s->w, st->mod->id);
    symp_put_u32(s->w, fresh ? SYMP_LOOKUP_NEW : 0);
    if (fresh)
        symp_put_str(s->w, st->mod->path);
    symp_put_u32(s->w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        symp_put_u64(s->w, offs[i]);
    if (symhelper_send(s->helper, s->w, fresh ? st->mod->fd : -1) < 0) {
        helper_failed(s, st);
        return -EIO;
    }
    if (fresh)
        st->gen = symhelper_generation(s->helper);
    size_t got = 0;
    for (;;) {
        int fd;
        ssize_t len = symhelper_recv(s->helper, s->buf, &fd);
        if (len < 0) {
            helper_failed(s, st);
            return -EIO;
        }
        struct symp_r r;
        symp_r_init(&r, s->buf, (size_t)len);
        uint32_t type = symp_get_u32(&r);
        if (fd >= 0)
            close(fd); /* the helper never has a reason to send one */
        int k = -EPROTO;
        bool final = false;
        if (type == SYMP_FRAMES) {
            k = take_frames(st, &r, offs, n, got, &final);
        } else if (type == SYMP_OPEN) {
            int dfd = -EPROTO;
            uint32_t kind = symp_get_u32(&r);
            uint64_t id = symp_get_u64(&r);
            uint8_t data[256];
            uint32_t dlen = symp_get_bytes(&r, data, sizeof(data));
            if (symp_r_done(&r) && id == st->mod->id) {
                dfd = open_debug(s, st->mod, kind, data, dlen);
                symp_w_init(s->w, SYMP_OPENED);
                symp_put_u32(s->w, (uint32_t)(dfd < 0 ? dfd : 0));
                int e = symhelper_send(s->helper, s->w, dfd);
                if (dfd >= 0)
                    close(dfd);
                if (e < 0) {
                    helper_failed(s, st);
                    return -EIO;
                }
                continue;
            }
        }
        if (k < 0) {
            symhelper_fail(s->helper, "sent a malformed answer");
            helper_failed(s, st);
            return -EIO;
        }
        got += (size_t)k;
        if (final) {
            if (got != n) {
                symhelper_fail(s->helper, "answered %zu of %zu addresses", got, n);
                helper_failed(s, st);
                return -EIO;
            }
            symhelper_ok(s->helper);
            return 0;
        }
    }
}

int symbolizer_prefetch(struct symbolizer *s, struct module *m, const uint64_t *offs, size_t n)
{
    struct modcache *st = state_get(s, m);
    if (st->failures >= POISON_AFTER) {
        set_error(s, "frames left unsymbolized: %s made the symbolizer fail before, and is "
                     "not read any more", m->path);
        return -EIO;
    }
    if (s->failed)
        return -EIO;
    uint64_t *todo = xmalloc((n ? n : 1) * sizeof(*todo));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (u64map_get(&st->cache, offs[i]))
            continue;
        bool dup = false;
        for (size_t j = k; j-- > 0 && j + 8 > k;) /* neighbours: callers sort their offsets */
            dup |= todo[j] == offs[i];
        if (!dup)
            todo[k++] = offs[i];
    }
    int r = 0;
    for (size_t at = 0; at < k && r == 0; at += SYMP_MAX_BATCH)
        r = lookup_batch(s, st, todo + at, k - at < SYMP_MAX_BATCH ? k - at : SYMP_MAX_BATCH);
    free(todo);
    return r;
}

int symbolizer_lookup(struct symbolizer *s, struct module *m, uint64_t file_off,
                      const struct sym_frame **frames, enum sym_source *src)
{
    static const struct sym_entry unknown = {.n = 1, .src = SYM_NONE};
    static const struct sym_frame unknown_frame;
    if (!m || !frames)
        return -EINVAL;
    if (!s) {
        /* (No symbolizer: a profile built without symbols, worker.c's quick thread.) */
        *frames = &unknown_frame;
        if (src)
            *src = unknown.src;
        return 1;
    }
    s->lookups++;
    struct modcache *st = state_get(s, m);
    const struct sym_entry *e = u64map_get(&st->cache, file_off);
    if (e) {
        s->hits++;
    } else if (symbolizer_prefetch(s, m, &file_off, 1) == 0) {
        e = u64map_get(&st->cache, file_off);
    }
    if (!e) {
        *frames = &unknown_frame;
        if (src)
            *src = unknown.src;
        return 1;
    }
    *frames = e->f;
    if (src)
        *src = e->src;
    return e->n;
}

int symbolizer_lookup_cached(struct symbolizer *s, struct module *m, uint64_t file_off,
                             const struct sym_frame **frames, enum sym_source *src)
{
    const struct modcache *st = s && m ? state_get(s, m) : NULL;
    const struct sym_entry *e = st ? u64map_get(&st->cache, file_off) : NULL;
    if (!e)
        return -ENOENT;
    *frames = e->f;
    if (src)
        *src = e->src;
    return e->n;
}

/* ---- JIT code ---- */

/* The pid a process has in its own pid namespace: the last field of NSpid in its status
 * (perf map files are named by it). pid itself if the kernel does not say. */
static int ns_pid(int pid)
{
    struct procstatus st;
    if (procstatus_read(pid, 0, NULL, &st) < 0 || !procstatus_has(&st, PS_NSPID))
        return pid;
    return st.nspid;
}

/* Open process pid's perf map: /proc/PID/root/tmp/perf-NSPID.map, the root by profd's right
 * to trace pid, the rest as the requester, without following symbolic links (a link there
 * could point at a file only root may read, which would come back as symbol names). It must
 * be a regular file owned by the process's user (the owner of /proc/PID) or root, as perf
 * requires, and not larger than JIT_MAX_FILE. Returns a descriptor or -errno. */
static int open_perf_map(struct symbolizer *s, int pid)
{
    char path[64];
    struct stat proc, st;
    snprintf(path, sizeof(path), "/proc/%d", pid);
    if (stat(path, &proc) < 0)
        return -errno;
    snprintf(path, sizeof(path), "/proc/%d/root", pid);
    int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -errno;
    int tmp = fs_open_as(s->creds, root, "tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW);
    close(root);
    if (tmp < 0)
        return tmp;
    snprintf(path, sizeof(path), "perf-%d.map", ns_pid(pid));
    int fd = fs_open_as(s->creds, tmp, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    close(tmp);
    if (fd < 0)
        return fd;
    int r = fstat(fd, &st) < 0                                     ? -errno
            : !S_ISREG(st.st_mode)                                 ? -EINVAL
            : st.st_uid != 0 && st.st_uid != proc.st_uid           ? -EPERM
            : (uint64_t)st.st_size > JIT_MAX_FILE                  ? -EFBIG
                                                                   : 0;
    if (r < 0) {
        log_debug("pid %d: perf map not read: %s", pid, strerror(-r));
        close(fd);
        return r;
    }
    return fd;
}

/* Read one JIT_NAMES message (msg, len: the whole message) answering addrs[first .. first +
 * count) of the n asked: kept only if the whole message is sound, as take_frames. Returns
 * the count, or -EPROTO. */
static int take_names(struct jitcache *jc, const void *msg, size_t len, const uint64_t *addrs,
                      size_t n, size_t expect_first, bool *final)
{
    struct symp_r rd;
    symp_r_init(&rd, msg, len);
    uint32_t type = symp_get_u32(&rd), first = symp_get_u32(&rd), count = symp_get_u32(&rd),
             fin = symp_get_u32(&rd);
    if (type != SYMP_JIT_NAMES || rd.bad || first != expect_first || expect_first > n ||
        count > n - first || fin > 1)
        return -EPROTO;
    const char **names = xmalloc((count ? count : 1) * sizeof(*names));
    uint32_t *lens = xmalloc((count ? count : 1) * sizeof(*lens));
    for (uint32_t i = 0; i < count && !rd.bad; i++)
        if (!symp_get_str(&rd, &names[i], &lens[i]))
            names[i] = NULL;
    int ret = -EPROTO;
    if (symp_r_done(&rd)) {
        for (uint32_t i = 0; i < count; i++)
            u64map_put(&jc->names, addrs[first + i],
                       names[i] ? arena_strndup(&jc->arena, names[i], lens[i]) : JIT_NONE);
        *final = fin == 1;
        ret = (int)count;
    }
    free(names);
    free(lens);
    return ret;
}

/* The JIT names of pid, an empty set made if there is none. */
static struct jitcache *jit_get(struct symbolizer *s, int pid)
{
    struct jitcache *jc = u64map_get(&s->jits, (uint64_t)(uint32_t)pid);
    if (!jc) {
        jc = xcalloc(1, sizeof(*jc));
        jc->pid = pid;
        u64map_put(&s->jits, (uint64_t)(uint32_t)pid, jc);
    }
    return jc;
}

int symbolizer_take_jit_names(struct symbolizer *s, int pid, const void *msg, size_t len,
                              const uint64_t *addrs, size_t n, size_t first, bool *final)
{
    return take_names(jit_get(s, pid), msg, len, addrs, n, first, final);
}

static void jit_free(struct jitcache *jc)
{
    u64map_finish(&jc->names);
    arena_free(&jc->arena);
    free(jc);
}

int symbolizer_jit_prefetch(struct symbolizer *s, int pid, const uint64_t *addrs, size_t n)
{
    struct jitcache *jc = jit_get(s, pid);
    u64map_finish(&jc->names);
    arena_free(&jc->arena);
    if (s->failed)
        return -EIO;
    int fd = open_perf_map(s, pid);
    for (size_t at = 0; at < n || at == 0; at += SYMP_MAX_BATCH) {
        size_t k = n - at < SYMP_MAX_BATCH ? n - at : SYMP_MAX_BATCH;
        symp_w_init(s->w, SYMP_JIT);
        symp_put_u32(s->w, (uint32_t)pid);
        /* The file goes with the first batch only: later ones use what the helper read. */
        symp_put_u32(s->w, at > 0 ? 0 : fd >= 0 ? SYMP_JIT_FILE : SYMP_JIT_GONE);
        symp_put_u32(s->w, (uint32_t)k);
        for (size_t i = 0; i < k; i++)
            symp_put_u64(s->w, addrs[at + i]);
        int r = symhelper_send(s->helper, s->w, at == 0 ? fd : -1);
        size_t got = 0;
        bool final = false;
        while (r == 0 && !final) {
            int rfd;
            ssize_t len = symhelper_recv(s->helper, s->buf, &rfd);
            if (rfd >= 0)
                close(rfd);
            if (len < 0) {
                r = -EIO;
                break;
            }
            int count = take_names(jc, s->buf, (size_t)len, addrs + at, k, got, &final);
            if (count < 0) {
                r = -EPROTO;
                break;
            }
            got += (size_t)count;
            if (final && got != k)
                r = -EPROTO;
        }
        if (r == -EPROTO)
            symhelper_fail(s->helper, "sent a malformed answer about JIT code");
        if (r < 0) {
            if (fd >= 0)
                close(fd);
            helper_failed(s, NULL);
            return -EIO;
        }
        symhelper_ok(s->helper);
        if (k == 0)
            break;
    }
    if (fd >= 0)
        close(fd);
    return 0;
}

const char *symbolizer_jit_lookup(struct symbolizer *s, int pid, uint64_t addr)
{
    struct jitcache *jc = u64map_get(&s->jits, (uint64_t)(uint32_t)pid);
    const char *name = jc ? u64map_get(&jc->names, addr) : NULL;
    if (!name) {
        if (symbolizer_jit_prefetch(s, pid, &addr, 1) < 0)
            return NULL;
        jc = u64map_get(&s->jits, (uint64_t)(uint32_t)pid);
        name = jc ? u64map_get(&jc->names, addr) : NULL;
    }
    return name == JIT_NONE ? NULL : name;
}

int symbolizer_jit_cached(struct symbolizer *s, int pid, uint64_t addr, const char **name)
{
    struct jitcache *jc = u64map_get(&s->jits, (uint64_t)(uint32_t)pid);
    const char *n = jc ? u64map_get(&jc->names, addr) : NULL;
    if (!n)
        return 0;
    *name = n == JIT_NONE ? NULL : n;
    return 1;
}

/* ---- housekeeping ---- */

void symbolizer_trim(struct symbolizer *s)
{
    struct u64map keep = {0};
    for (size_t i = 0; i < s->states.cap; i++) {
        struct modcache *st = s->states.vals[i];
        if (!st)
            continue;
        /* Only our reference left: no target maps the file any more. A concurrent
         * module_get may take a new one right after; it then just finds sym NULL. */
        if (__atomic_load_n(&st->mod->refs, __ATOMIC_ACQUIRE) == 1) {
            if (st->gen && st->gen == symhelper_generation(s->helper) &&
                symhelper_pid(s->helper) > 0) {
                symp_w_init(s->w, SYMP_FORGET);
                symp_put_u64(s->w, st->mod->id);
                symhelper_send(s->helper, s->w, -1);
            }
            state_free(st);
        } else {
            u64map_put(&keep, s->states.keys[i], st);
        }
    }
    u64map_finish(&s->states);
    s->states = keep;

    struct u64map jkeep = {0};
    for (size_t i = 0; i < s->jits.cap; i++) {
        struct jitcache *jc = s->jits.vals[i];
        if (!jc)
            continue;
        if (kill(jc->pid, 0) < 0 && errno == ESRCH) {
            if (symhelper_pid(s->helper) > 0) {
                symp_w_init(s->w, SYMP_JIT_FORGET);
                symp_put_u32(s->w, (uint32_t)jc->pid);
                symhelper_send(s->helper, s->w, -1);
            }
            jit_free(jc);
        } else {
            u64map_put(&jkeep, s->jits.keys[i], jc);
        }
    }
    u64map_finish(&s->jits);
    s->jits = jkeep;
}

void symbolizer_destroy(struct symbolizer *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->states.cap; i++)
        if (s->states.vals[i])
            state_free(s->states.vals[i]);
    u64map_finish(&s->states);
    for (size_t i = 0; i < s->jits.cap; i++)
        if (s->jits.vals[i])
            jit_free(s->jits.vals[i]);
    u64map_finish(&s->jits);
    symhelper_destroy(s->helper);
    free(s->debug_path);
    free(s->buf);
    free(s->w);
    free(s);
}

void symbolizer_get_stats(struct symbolizer *s, struct symbolizer_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->lookups = s->lookups;
    st->hits = s->hits;
    st->modules = s->states.n;
    struct symhelper_stats hs;
    symhelper_get_stats(s->helper, &hs);
    st->helper_starts = hs.starts;
    st->helper_failures = hs.failures;
    st->helper_pid = hs.pid;
    snprintf(st->helper_error, sizeof(st->helper_error), "%s", hs.last_error);
}

size_t symbolizer_memory(const struct symbolizer *s)
{
    size_t m = sizeof(*s) + SYMP_MAX_MSG + sizeof(*s->w) +
               s->states.cap * (sizeof(uint64_t) + sizeof(void *)) +
               s->jits.cap * (sizeof(uint64_t) + sizeof(void *));
    for (size_t i = 0; i < s->states.cap; i++) {
        const struct modcache *st = s->states.vals[i];
        if (st)
            m += sizeof(*st) + st->arena.bytes +
                 st->cache.cap * (sizeof(uint64_t) + sizeof(void *));
    }
    for (size_t i = 0; i < s->jits.cap; i++) {
        const struct jitcache *jc = s->jits.vals[i];
        if (jc)
            m += sizeof(*jc) + jc->arena.bytes +
                 jc->names.cap * (sizeof(uint64_t) + sizeof(void *));
    }
    return m;
}
