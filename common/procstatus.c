/* procstatus.c: /proc/PID/status read whole and parsed without trusting its text. */
#include "procstatus.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const field_names[PS_NFIELDS] = {
    [PS_NAME] = "Name",
    [PS_STATE] = "State",
    [PS_TGID] = "Tgid",
    [PS_PID] = "Pid",
    [PS_PPID] = "PPid",
    [PS_TRACERPID] = "TracerPid",
    [PS_UID] = "Uid",
    [PS_GID] = "Gid",
    [PS_NGROUPS] = "Groups",
    [PS_NSPID] = "NSpid",
    [PS_SIGIGN] = "SigIgn",
    [PS_SIGCGT] = "SigCgt",
    [PS_SHDPND] = "ShdPnd",
    [PS_CAPPRM] = "CapPrm",
    [PS_CAPEFF] = "CapEff",
    [PS_VCSW] = "voluntary_ctxt_switches",
    [PS_NVCSW] = "nonvoluntary_ctxt_switches",
    [PS_VMSIZE] = "VmSize",
    [PS_VMEXE] = "VmExe",
    [PS_VMLIB] = "VmLib",
};

const char *procstatus_field_name(enum procstatus_field f)
{
    return (unsigned)f < PS_NFIELDS ? field_names[f] : "?";
}

/* A cursor over one line's value: [p, end). */
struct cur {
    const char *p, *end;
};

static void skip_blanks(struct cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* Only blanks left (the kernel ends some lines with a space: Groups). */
static bool at_end(struct cur *c)
{
    skip_blanks(c);
    return c->p == c->end;
}

/* A decimal number of at most max, no sign. */
static bool take_dec(struct cur *c, uint64_t max, uint64_t *v)
{
    skip_blanks(c);
    const char *start = c->p;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (x > (max - d) / 10)
            return false;
        x = x * 10 + d;
        c->p++;
    }
    *v = x;
    return c->p > start;
}

/* A hexadecimal mask of 64 bits at most (the kernel prints 16 digits). */
static bool take_hex(struct cur *c, uint64_t *v)
{
    skip_blanks(c);
    const char *start = c->p;
    uint64_t x = 0;
    while (c->p < c->end) {
        char ch = *c->p;
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            d = (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            d = (unsigned)(ch - 'A' + 10);
        else
            break;
        if (x >> 60)
            return false;
        x = x << 4 | d;
        c->p++;
    }
    *v = x;
    return c->p > start;
}

/* One number and nothing else on the line. */
static bool one_dec(struct cur *c, uint64_t max, uint64_t *v)
{
    return take_dec(c, max, v) && at_end(c);
}

/* A size: one number, then " kB", and nothing else. */
static bool one_kb(struct cur *c, uint64_t *v)
{
    if (!take_dec(c, UINT64_MAX / 1024, v))
        return false;
    skip_blanks(c);
    if (c->end - c->p < 2 || c->p[0] != 'k' || c->p[1] != 'B')
        return false;
    c->p += 2;
    return at_end(c);
}

static bool one_hex(struct cur *c, uint64_t *v)
{
    return take_hex(c, v) && at_end(c);
}

/* Exactly four ids (real, effective, saved, filesystem). */
static bool four_ids(struct cur *c, uint32_t out[4])
{
    for (int i = 0; i < 4; i++) {
        uint64_t v;
        if (!take_dec(c, UINT32_MAX, &v))
            return false;
        out[i] = (uint32_t)v;
    }
    return at_end(c);
}

/* Parse the value of field f into st. Returns whether it was well-formed. */
static bool parse_value(enum procstatus_field f, struct cur *c, struct procstatus *st)
{
    uint64_t v;
    switch (f) {
    case PS_NAME: {
        /* "Name:\t" then the name, which may itself begin with a space. */
        if (c->p < c->end && *c->p == '\t')
            c->p++;
        size_t n = (size_t)(c->end - c->p);
        if (n >= sizeof(st->name))
            n = sizeof(st->name) - 1;
        memcpy(st->name, c->p, n);
        st->name[n] = '\0';
        return true;
    }
    case PS_STATE: {
        /* "S (sleeping)": the letter counts. */
        skip_blanks(c);
        if (c->p == c->end)
            return false;
        char s = *c->p++;
        if (!((s >= 'A' && s <= 'Z') || (s >= 'a' && s <= 'z')))
            return false;
        if (c->p < c->end && *c->p != ' ' && *c->p != '\t')
            return false;
        st->state = s;
        return true;
    }
    case PS_TGID:
    case PS_PID:
    case PS_PPID:
    case PS_TRACERPID: {
        if (!one_dec(c, INT_MAX, &v))
            return false;
        pid_t *dst = f == PS_TGID   ? &st->tgid
                     : f == PS_PID  ? &st->pid
                     : f == PS_PPID ? &st->ppid
                                    : &st->tracer_pid;
        *dst = (pid_t)v;
        return true;
    }
    case PS_UID:
        return four_ids(c, st->uid);
    case PS_GID:
        return four_ids(c, st->gid);
    case PS_NGROUPS: {
        uint32_t n = 0;
        while (!at_end(c)) {
            if (!take_dec(c, UINT32_MAX, &v))
                return false;
            n++;
        }
        st->ngroups = n;
        return true;
    }
    case PS_NSPID: {
        /* One pid per namespace level, outermost first. */
        uint32_t n = 0;
        pid_t last = 0;
        while (!at_end(c)) {
            if (!take_dec(c, INT_MAX, &v))
                return false;
            last = (pid_t)v;
            n++;
        }
        if (!n)
            return false;
        st->nspid = last;
        st->nspid_depth = n;
        return true;
    }
    case PS_SHDPND:
        return one_hex(c, &st->sig_shd);
    case PS_SIGIGN:
        return one_hex(c, &st->sig_ign);
    case PS_SIGCGT:
        return one_hex(c, &st->sig_cgt);
    case PS_CAPPRM:
        return one_hex(c, &st->cap_prm);
    case PS_CAPEFF:
        return one_hex(c, &st->cap_eff);
    case PS_VCSW:
        return one_dec(c, UINT64_MAX, &st->vcsw);
    case PS_NVCSW:
        return one_dec(c, UINT64_MAX, &st->nvcsw);
    case PS_VMSIZE:
        return one_kb(c, &st->vm_size_kb);
    case PS_VMEXE:
        return one_kb(c, &st->vm_exe_kb);
    case PS_VMLIB:
        return one_kb(c, &st->vm_lib_kb);
    case PS_NFIELDS:
        break;
    }
    return false;
}

static int field_of(const char *key, size_t len)
{
    for (int f = 0; f < PS_NFIELDS; f++)
        if (strlen(field_names[f]) == len && !memcmp(field_names[f], key, len))
            return f;
    return -1;
}

int procstatus_parse(const char *text, size_t len, struct procstatus *out)
{
    memset(out, 0, sizeof(*out));
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            break; /* cut short: a partial value (CapPrm:\t0000) must not count */
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        int f = colon ? field_of(p, (size_t)(colon - p)) : -1;
        if (f >= 0) {
            uint32_t bit = 1u << f;
            struct cur c = {colon + 1, eol};
            if ((out->have | out->bad) & bit) {
                /* Twice: which one is the kernel's? Neither. */
                out->have &= ~bit;
                out->bad |= bit;
            } else if (parse_value((enum procstatus_field)f, &c, out)) {
                out->have |= bit;
            } else {
                out->bad |= bit;
            }
        }
        p = eol + 1;
    }
    return __builtin_popcount(out->have);
}

int procstatus_read_fd(int fd, struct strbuf *sb, struct procstatus *out)
{
    memset(out, 0, sizeof(*out)); /* a failed read leaves no field present */
    if (fd < 0)
        return -EBADF;
    sb->len = 0;
    size_t want = sb->cap > 4096 ? sb->cap - 1 : 4095;
    for (;;) {
        if (strbuf_reserve(sb, want) < 0)
            return -ENOMEM;
        size_t size = sb->cap - 1;
        /* One read from offset 0: the kernel formats the whole file for it (seq_file
         * single_open), so all fields are of one moment; a read that fills the buffer may
         * have been cut, and is made again into a bigger one. */
        ssize_t n = pread(fd, sb->buf, size, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -ESRCH; /* nothing: a task that has been reaped reads empty or ESRCH */
        if ((size_t)n < size) {
            sb->buf[n] = '\0';
            procstatus_parse(sb->buf, (size_t)n, out);
            return 0;
        }
        if (size + 1 >= PROCSTATUS_MAX_SIZE)
            return -EFBIG;
        want = size * 2;
    }
}

int procstatus_read(pid_t pid, pid_t tid, struct strbuf *sb, struct procstatus *out)
{
    char path[64];
    if (pid <= 0) {
        memset(out, 0, sizeof(*out));
        return -ESRCH;
    }
    if (tid > 0)
        snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
    else
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        memset(out, 0, sizeof(*out));
        return e == ENOENT ? -ESRCH : -e;
    }
    struct strbuf own = {0};
    int r = procstatus_read_fd(fd, sb ? sb : &own, out);
    strbuf_finish(&own);
    close(fd);
    return r;
}
