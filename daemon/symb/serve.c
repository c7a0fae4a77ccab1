/* serve.c: profd-symbolizer's answers to profd's requests (see serve.h). */
#include "serve.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "elfinfo.h"
#include "log.h"

/* A request profd never sends: a bug on its side, reported as such. */
static int bad_request(int fd, const char *what)
{
    if (fd >= 0)
        close(fd);
    log_err("%s", what);
    return -EPROTO;
}

static int do_describe(struct symb_server *s, int fd)
{
    struct symp_elf_info info;
    if (fd < 0)
        return bad_request(fd, "describe without a descriptor");
    elfinfo_read(fd, &info);
    close(fd);
    symp_w_init(&s->out, SYMP_DESCRIPTION);
    symp_put_elf_info(&s->out, &info);
    return s->send(s->send_arg, &s->out);
}

/* One address's frames; with each string cut at cap bytes. */
static void put_entry(struct symp_w *w, int n, const struct dsym_frame *f, enum symp_source src,
                      size_t cap)
{
    symp_put_u32(w, src);
    symp_put_u32(w, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        symp_put_u32(w, (uint32_t)f[i].line);
        symp_put_u32(w, f[i].inlined);
        const char *str[2] = {f[i].function, f[i].file};
        for (int k = 0; k < 2; k++) {
            if (!str[k]) {
                symp_put_u32(w, UINT32_MAX);
                continue;
            }
            size_t len = strnlen(str[k], cap);
            symp_put_bytes(w, str[k], (uint32_t)len);
        }
    }
}

static void begin_frames(struct symb_server *s, uint64_t id, uint32_t first)
{
    symp_w_init(&s->out, SYMP_FRAMES);
    symp_put_u64(&s->out, id);
    symp_put_u32(&s->out, first);
    s->count_at = s->out.len;
    symp_put_u32(&s->out, 0);
    symp_put_u32(&s->out, 0);
}

static void begin_names(struct symb_server *s, uint32_t first)
{
    symp_w_init(&s->out, SYMP_JIT_NAMES);
    symp_put_u32(&s->out, first);
    s->count_at = s->out.len;
    symp_put_u32(&s->out, 0);
    symp_put_u32(&s->out, 0);
}

/* Fill in the count and final flag, and send. */
static int finish_and_send(struct symb_server *s, uint32_t count, bool final)
{
    uint32_t fin = final;
    memcpy(s->out.buf + s->count_at, &count, 4);
    memcpy(s->out.buf + s->count_at + 4, &fin, 4);
    return s->send(s->send_arg, &s->out);
}

/* FRAMES messages: u64 module, u32 first, u32 count, u32 final, then count entries: u32
 * source, u32 n, n x (u32 line, u32 inlined, str function, str file). */
static int do_lookup(struct symb_server *s, struct symp_r *r, int fd)
{
    uint64_t id = symp_get_u64(r);
    uint32_t flags = symp_get_u32(r);
    const char *path = NULL;
    uint32_t plen = 0;
    char pathbuf[SYMP_MAX_STR + 1];
    if (flags & SYMP_LOOKUP_NEW) {
        if (!symp_get_str(r, &path, &plen))
            path = NULL;
        if (path) {
            memcpy(pathbuf, path, plen);
            pathbuf[plen] = '\0';
        }
    }
    uint32_t n = symp_get_u32(r);
    if (r->bad || n > SYMP_MAX_BATCH || r->len - r->off != (size_t)n * 8)
        return bad_request(fd, "malformed lookup request");
    const uint8_t *offs = r->p + r->off;
    if (flags & SYMP_LOOKUP_NEW) {
        if (fd < 0)
            return bad_request(fd, "new module without a descriptor");
        dsym_add(s->dsym, id, fd, path ? pathbuf : NULL); /* takes fd; failures look up as
                                                            * unknown */
    } else if (fd >= 0) {
        close(fd);
    }
    if (!dsym_has(s->dsym, id)) /* profd would cache empty answers for it */
        return bad_request(-1, "lookup in a module profd never sent");
    begin_frames(s, id, 0);
    uint32_t count = 0, first = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off;
        memcpy(&off, offs + (size_t)i * 8, 8);
        const struct dsym_frame *f;
        enum symp_source src = SYMP_SRC_NONE;
        static const struct dsym_frame unknown;
        int nf = dsym_lookup(s->dsym, id, off, &f, &src);
        if (nf <= 0) {
            f = &unknown;
            nf = 1;
            src = SYMP_SRC_NONE;
        }
        /* Fit the entry in this message, else in the next; a single entry too large for
         * an empty message has its names cut shorter until it fits. */
        for (size_t cap = SYMP_MAX_STR;; cap /= 2) {
            size_t at = s->out.len;
            put_entry(&s->out, nf, f, src, cap);
            if (!s->out.overflow)
                break;
            s->out.overflow = false;
            s->out.len = at;
            if (count > 0) {
                int e = finish_and_send(s, count, false);
                if (e < 0)
                    return e;
                first += count;
                count = 0;
                begin_frames(s, id, first);
                cap *= 2; /* try again at full length in the empty message */
            } else if (cap < 16) {
                return bad_request(-1, "an entry does not fit in a message");
            }
        }
        count++;
    }
    return finish_and_send(s, count, true);
}

/* JIT_NAMES messages: u32 first, u32 count, u32 final, then count names (str, NULL if
 * none). */
static int do_jit(struct symb_server *s, struct symp_r *r, int fd)
{
    uint32_t pid = symp_get_u32(r);
    uint32_t flags = symp_get_u32(r);
    uint32_t n = symp_get_u32(r);
    if (r->bad || n > SYMP_MAX_BATCH || r->len - r->off != (size_t)n * 8)
        return bad_request(fd, "malformed JIT request");
    const uint8_t *addrs = r->p + r->off;
    if (flags & SYMP_JIT_FILE) {
        if (fd < 0)
            return bad_request(fd, "JIT request without its file");
        int e = jitmaps_update(s->jit, pid, fd);
        if (e < 0)
            log_debug("perf map of %u: %s", pid, strerror(-e));
        close(fd);
    } else {
        if (fd >= 0)
            close(fd);
        if (flags & SYMP_JIT_GONE)
            jitmaps_update(s->jit, pid, -1);
    }
    begin_names(s, 0);
    uint32_t count = 0, first = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t a;
        memcpy(&a, addrs + (size_t)i * 8, 8);
        const char *name = jitmaps_lookup(s->jit, pid, a);
        size_t at = s->out.len;
        symp_put_str(&s->out, name);
        if (s->out.overflow) {
            s->out.overflow = false;
            s->out.len = at;
            int e = finish_and_send(s, count, false);
            if (e < 0)
                return e;
            first += count;
            count = 0;
            begin_names(s, first);
            symp_put_str(&s->out, name);
        }
        count++;
    }
    return finish_and_send(s, count, true);
}

int symb_serve(struct symb_server *s, const void *msg, size_t len, int fd)
{
    struct symp_r r;
    symp_r_init(&r, msg, len);
    switch (symp_get_u32(&r)) {
    case SYMP_DESCRIBE:
        return do_describe(s, fd);
    case SYMP_LOOKUP:
        return do_lookup(s, &r, fd);
    case SYMP_FORGET:
        dsym_forget(s->dsym, symp_get_u64(&r));
        if (fd >= 0)
            close(fd);
        return 0;
    case SYMP_JIT:
        return do_jit(s, &r, fd);
    case SYMP_JIT_FORGET:
        jitmaps_forget(s->jit, symp_get_u32(&r));
        if (fd >= 0)
            close(fd);
        return 0;
    default:
        return bad_request(fd, "unknown request");
    }
}
