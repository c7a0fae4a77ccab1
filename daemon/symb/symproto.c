/* symproto.c: encoding, decoding and transport of symbolizer messages (see symproto.h). */
#include "symproto.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

void symp_w_init(struct symp_w *w, uint32_t type)
{
    w->len = 0;
    w->overflow = false;
    symp_put_u32(w, type);
}

static void put(struct symp_w *w, const void *p, size_t n)
{
    if (w->overflow || n > sizeof(w->buf) - w->len) {
        w->overflow = true;
        return;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

void symp_put_u32(struct symp_w *w, uint32_t v)
{
    put(w, &v, sizeof(v));
}

void symp_put_u64(struct symp_w *w, uint64_t v)
{
    put(w, &v, sizeof(v));
}

void symp_put_bytes(struct symp_w *w, const void *p, uint32_t n)
{
    symp_put_u32(w, n);
    put(w, p, n);
}

void symp_put_str(struct symp_w *w, const char *s)
{
    if (!s) {
        symp_put_u32(w, UINT32_MAX);
        return;
    }
    size_t n = strnlen(s, SYMP_MAX_STR);
    symp_put_bytes(w, s, (uint32_t)n);
}

size_t symp_w_room(const struct symp_w *w)
{
    return w->overflow ? 0 : sizeof(w->buf) - w->len;
}

void symp_r_init(struct symp_r *r, const void *msg, size_t len)
{
    r->p = msg;
    r->len = len;
    r->off = 0;
    r->bad = false;
}

/* Copy n bytes out, or mark the reader bad and yield zeroes. */
static void get(struct symp_r *r, void *out, size_t n)
{
    if (r->bad || n > r->len - r->off) {
        r->bad = true;
        memset(out, 0, n);
        return;
    }
    memcpy(out, r->p + r->off, n);
    r->off += n;
}

uint32_t symp_get_u32(struct symp_r *r)
{
    uint32_t v;
    get(r, &v, sizeof(v));
    return v;
}

uint64_t symp_get_u64(struct symp_r *r)
{
    uint64_t v;
    get(r, &v, sizeof(v));
    return v;
}

uint32_t symp_get_bytes(struct symp_r *r, void *out, uint32_t cap)
{
    uint32_t n = symp_get_u32(r);
    if (r->bad || n > cap || n > r->len - r->off) {
        r->bad = true;
        return 0;
    }
    memcpy(out, r->p + r->off, n);
    r->off += n;
    return n;
}

bool symp_get_str(struct symp_r *r, const char **s, uint32_t *len)
{
    *s = NULL;
    *len = 0;
    uint32_t n = symp_get_u32(r);
    if (r->bad || n == UINT32_MAX)
        return false;
    if (n > SYMP_MAX_STR || n > r->len - r->off || memchr(r->p + r->off, '\0', n)) {
        r->bad = true;
        return false;
    }
    *s = (const char *)r->p + r->off;
    *len = n;
    r->off += n;
    return true;
}

bool symp_r_done(const struct symp_r *r)
{
    return !r->bad && r->off == r->len;
}

void symp_put_elf_info(struct symp_w *w, const struct symp_elf_info *e)
{
    symp_put_u32(w, (uint32_t)e->err);
    symp_put_u32(w, e->e_type);
    symp_put_bytes(w, e->build_id, e->build_id_len);
    symp_put_u64(w, e->build_id_vaddr);
    symp_put_u32(w, e->nloads);
    for (uint32_t i = 0; i < e->nloads && i < SYMP_MAX_LOADS; i++) {
        const struct symp_load *l = &e->loads[i];
        symp_put_u64(w, l->offset);
        symp_put_u64(w, l->vaddr);
        symp_put_u64(w, l->filesz);
        symp_put_u64(w, l->memsz);
        symp_put_u32(w, l->flags);
    }
    symp_put_u64(w, e->py_runtime);
    symp_put_u64(w, e->py_version);
    symp_put_u64(w, e->py_code_type);
    symp_put_u64(w, e->py_str_type);
    symp_put_u32(w, e->nsyms);
    for (uint32_t i = 0; i < e->nsyms && i < SYMP_MAX_SYMS; i++) {
        symp_put_str(w, e->syms[i].name);
        symp_put_u64(w, e->syms[i].value);
    }
}

int symp_get_elf_info(struct symp_r *r, struct symp_elf_info *e)
{
    memset(e, 0, sizeof(*e));
    e->err = (int32_t)symp_get_u32(r);
    e->e_type = symp_get_u32(r);
    e->build_id_len = symp_get_bytes(r, e->build_id, sizeof(e->build_id));
    e->build_id_vaddr = symp_get_u64(r);
    e->nloads = symp_get_u32(r);
    if (e->nloads > SYMP_MAX_LOADS)
        return -EPROTO;
    for (uint32_t i = 0; i < e->nloads; i++) {
        struct symp_load *l = &e->loads[i];
        l->offset = symp_get_u64(r);
        l->vaddr = symp_get_u64(r);
        l->filesz = symp_get_u64(r);
        l->memsz = symp_get_u64(r);
        l->flags = symp_get_u32(r);
        /* Segments that wrap the address space or the file are nonsense. */
        if (l->offset + l->filesz < l->offset || l->vaddr + l->memsz < l->vaddr)
            return -EPROTO;
    }
    e->py_runtime = symp_get_u64(r);
    e->py_version = symp_get_u64(r);
    e->py_code_type = symp_get_u64(r);
    e->py_str_type = symp_get_u64(r);
    e->nsyms = symp_get_u32(r);
    if (e->nsyms > SYMP_MAX_SYMS)
        return -EPROTO;
    for (uint32_t i = 0; i < e->nsyms; i++) {
        const char *name;
        uint32_t len;
        if (!symp_get_str(r, &name, &len) || !len || len >= SYMP_MAX_SYM_NAME)
            return -EPROTO;
        memcpy(e->syms[i].name, name, len);
        e->syms[i].name[len] = 0;
        e->syms[i].value = symp_get_u64(r);
    }
    if (!symp_r_done(r) || e->err > 0 || e->err < -4095)
        return -EPROTO;
    return 0;
}

int symp_send(int sock, const struct symp_w *w, int fd)
{
    if (w->overflow)
        return -EMSGSIZE;
    struct iovec iov = {(void *)w->buf, w->len};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.b;
        mh.msg_controllen = sizeof(ctl.b);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (n >= 0)
            return (size_t)n == w->len ? 0 : -EIO;
        if (errno != EINTR)
            return -errno;
    }
}

ssize_t symp_recv(int sock, void *buf, int *fd, int timeout_ms)
{
    *fd = -1;
    if (timeout_ms >= 0) {
        uint64_t deadline = now_ns() + (uint64_t)timeout_ms * NS_PER_MS;
        for (;;) {
            uint64_t now = now_ns();
            int left = now >= deadline ? 0 : (int)((deadline - now + NS_PER_MS - 1) / NS_PER_MS);
            struct pollfd p = {.fd = sock, .events = POLLIN};
            int r = poll(&p, 1, left);
            if (r > 0)
                break;
            if (r == 0)
                return -ETIMEDOUT;
            if (errno != EINTR)
                return -errno;
        }
    }
    struct iovec iov = {buf, SYMP_MAX_MSG};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                        .msg_controllen = sizeof(ctl.b)};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    /* Take the first descriptor, close any others (a peer may send more than we asked). */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int f;
            memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*fd < 0)
                *fd = f;
            else
                close(f);
        }
    }
    if (n == 0)
        return 0;
    if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < sizeof(uint32_t)) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return -EPROTO;
    }
    return n;
}

uint32_t symp_type_of(const void *buf)
{
    uint32_t t;
    memcpy(&t, buf, sizeof(t));
    return t;
}
